//! The security step: the one place on the road ([`crate::ingress`]) that decides whether a
//! client's packet may go where it is routed. IPsec (an ESP child SA whose selectors cover the
//! packet) lands here; until then `[corpnet] allow_without_ipsec` stands in for it.

use crate::ingress::{ClientBinding, Route};
use crate::{DropReason, Shared};
use gate64_wire::{icmpv6, ipv6};

impl Shared {
    /// Admits `pkt` from `from` towards `route`, or refuses it with [`DropReason::NoSa`].
    ///
    /// - Another client of gate64: admitted. Client-to-client traffic is the relay service
    ///   RFC 4380 §5.3 offers every qualified Teredo client (and its IP-HTTPS counterpart); it
    ///   never enters the corporate network, which is what the IPsec policy guards.
    /// - The corporate network, NAT64 (translated traffic enters it too) or gate64 itself:
    ///   only out of a child SA once IPsec exists; without one a client may reach gate64
    ///   itself with ICMPv6 echo only, so it can test the link before IPsec is up.
    pub(crate) fn policy(
        &self,
        _from: &ClientBinding,
        route: &Route,
        pkt: &ipv6::Packet<'_>,
    ) -> Result<(), DropReason> {
        match route {
            Route::TeredoClient(_) | Route::IphttpsClient => Ok(()),
            _ if self.allow_without_ipsec() => Ok(()),
            Route::Gate64 if is_echo_request(pkt) => Ok(()),
            Route::Gate64 | Route::Corpnet | Route::Nat64 => Err(DropReason::NoSa),
        }
    }
}

fn is_echo_request(pkt: &ipv6::Packet<'_>) -> bool {
    icmpv6::type_code(pkt) == Some((icmpv6::TYPE_ECHO_REQUEST, 0))
}
