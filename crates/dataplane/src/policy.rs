//! The security step: the one place on the road ([`crate::ingress`]) that decides whether a
//! client's packet may go where it is routed. IPsec (an ESP child SA whose selectors cover the
//! packet) lands here; until then `[corpnet] allow_without_ipsec` stands in for it.

use crate::ingress::{ClientBinding, Route};
use crate::{DropReason, Shared};
use gate64_wire::{icmpv6, ipv6};
use std::net::SocketAddr;

/// IKEv2 (RFC 7296 §2) and its NAT traversal port (RFC 3948 §2): the ports a client will need
/// at gate64 to set up IPsec. Not admitted yet: there is no IKE responder to reach. When it
/// lands, `to_self` admits UDP to these ports without an SA (IKE is what makes the SA).
#[allow(dead_code)]
pub(crate) const IKE_PORTS: [u16; 2] = [500, 4500];

impl Shared {
    /// Admits `pkt` from `from` towards `route`, or refuses it.
    ///
    /// - Another client of gate64: admitted. Client-to-client traffic is the relay service
    ///   RFC 4380 §5.3 offers every qualified Teredo client (and its IP-HTTPS counterpart); it
    ///   never enters the corporate network, which is what the IPsec policy guards.
    /// - gate64 itself: only what a client needs there ([`Shared::to_self`]), whatever
    ///   `allow_without_ipsec` says: nothing else on the host (the metrics exporter, SSH, ...)
    ///   is reachable through a tunnel.
    /// - The corporate network or NAT64 (translated traffic enters it too): only out of a
    ///   child SA once IPsec exists ([`DropReason::NoSa`]).
    pub(crate) fn policy(
        &self,
        _from: &ClientBinding,
        route: &Route,
        pkt: &ipv6::Packet<'_>,
    ) -> Result<(), DropReason> {
        match route {
            Route::TeredoClient(_) | Route::IphttpsClient => Ok(()),
            Route::Gate64 | Route::SelfAddress | Route::Nat64ToSelf => self.to_self(route, pkt),
            _ if self.allow_without_ipsec() => Ok(()),
            Route::Corpnet | Route::Nat64 => Err(DropReason::NoSa),
        }
    }

    /// Traffic to gate64 itself: ICMPv6 echo to any of its IPv6 addresses (so a client can
    /// test its link before IPsec is up); UDP or TCP to a DNS64 listener (`corp_address` port
    /// 53 by default), under the same rule as the corporate network (it answers with
    /// corporate names).
    /// Neighbour discovery never gets here: the transport stages answer it. Pref64 + one of
    /// gate64's own IPv4 addresses is refused outright: translation never loops back into
    /// the host.
    fn to_self(&self, route: &Route, pkt: &ipv6::Packet<'_>) -> Result<(), DropReason> {
        if matches!(route, Route::Nat64ToSelf) {
            return Err(DropReason::ToSelf);
        }
        if is_echo_request(pkt) {
            return Ok(());
        }
        let dns64 = transport_dst_port(pkt).is_some_and(|port| {
            let at = SocketAddr::from((pkt.dst(), port));
            self.cfg.dns64_listen.contains(&at)
        });
        match dns64 {
            true if self.allow_without_ipsec() => Ok(()),
            true => Err(DropReason::NoSa),
            false => Err(DropReason::ToSelf),
        }
    }
}

fn is_echo_request(pkt: &ipv6::Packet<'_>) -> bool {
    icmpv6::type_code(pkt) == Some((icmpv6::TYPE_ECHO_REQUEST, 0))
}

/// The UDP or TCP destination port right after the fixed header. A packet with extension
/// headers first has none here: a client's DNS query needs none, so it is not admitted.
fn transport_dst_port(pkt: &ipv6::Packet<'_>) -> Option<u16> {
    if !matches!(pkt.next_header(), ipv6::NH_UDP | ipv6::NH_TCP) {
        return None;
    }
    let p = pkt.payload();
    Some(u16::from_be_bytes([*p.get(2)?, *p.get(3)?]))
}
