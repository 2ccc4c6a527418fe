//! The security step: the one place on the road ([`crate::ingress`]) that decides whether a
//! client's packet may go where it is routed.
//!
//! With `[ipsec] require = true` (the default) the corporate network, NAT64, DNS64 and other
//! clients are reached only out of a child SA ([`ClientBinding::Ipsec`]: the ESP stage,
//! `ipsec.rs`, has opened the packet and checked it against the SA's selectors). Without one
//! a client reaches only gate64 itself, for what it needs to build its SAs: ICMPv6 echo and
//! IKE. `require = false` is the lab switch: the old open behaviour.

use crate::ingress::{ClientBinding, Route};
use crate::ipsec::{encap_from, encap_to};
use crate::{DropReason, Shared};
use gate64_esp::udp_encap::Encapsulated;
use gate64_wire::{icmpv6, ipv6, udp};
use std::net::{Ipv6Addr, SocketAddr};

impl Shared {
    /// Admits `pkt` from `from` towards `route`, or refuses it.
    ///
    /// - The corporate network, NAT64 (translated traffic enters it too) and another client:
    ///   only out of a child SA while IPsec is required ([`DropReason::NoSa`]).
    /// - gate64 itself: only what a client needs there ([`Shared::to_self`]), whatever
    ///   `require` says: nothing else on the host (the metrics exporter, SSH, ...) is
    ///   reachable through a tunnel.
    pub(crate) fn policy(
        &self,
        from: &ClientBinding,
        route: &Route,
        pkt: &ipv6::Packet<'_>,
    ) -> Result<(), DropReason> {
        match route {
            Route::Gate64 | Route::SelfAddress | Route::Nat64ToSelf => {
                self.to_self(from, route, pkt)
            }
            Route::Corpnet
            | Route::Nat64
            | Route::TeredoClient(_)
            | Route::IphttpsClient
            | Route::IpsecClient => self.needs_sa(from),
        }
    }

    /// The security step for a client's IPv4 packet (see [`crate::ingress`]): a corporate
    /// IPv4 network only out of a child SA, gate64 itself never (it answers nothing over
    /// IPv4 inside the tunnels).
    pub(crate) fn policy4(&self, from: &ClientBinding, route: &Route) -> Result<(), DropReason> {
        match route {
            Route::Corpnet => self.needs_sa(from),
            Route::Gate64 | Route::SelfAddress | Route::Nat64ToSelf => Err(DropReason::ToSelf),
            _ => Err(DropReason::NoRoute),
        }
    }

    /// Admitted out of a child SA, or by anyone while IPsec is not required.
    fn needs_sa(&self, from: &ClientBinding) -> Result<(), DropReason> {
        if matches!(from, ClientBinding::Ipsec { .. }) || !self.require_ipsec() {
            Ok(())
        } else {
            Err(DropReason::NoSa)
        }
    }

    /// Traffic to gate64 itself: ICMPv6 echo to any of its IPv6 addresses (so a client can
    /// test its link before IPsec is up); IKE to the IPsec endpoint (UDP 500, and 4500 with
    /// the zero non-ESP marker: IKE is what makes the SA); UDP or TCP to a DNS64 listener
    /// (`corp_address` port 53 by default) under the rule of the corporate network, since it
    /// answers with corporate names (the infrastructure tunnel covers it).
    /// Neighbour discovery never gets here: the transport stages answer it; nor does ESP to
    /// the endpoint: the ESP stage takes it first. Pref64 + one of gate64's own IPv4
    /// addresses is refused outright: translation never loops back into the host.
    fn to_self(
        &self,
        from: &ClientBinding,
        route: &Route,
        pkt: &ipv6::Packet<'_>,
    ) -> Result<(), DropReason> {
        if matches!(route, Route::Nat64ToSelf) {
            return Err(DropReason::ToSelf);
        }
        if is_echo_request(pkt) || self.is_ike(pkt) {
            return Ok(());
        }
        let dns64 = transport_dst_port(pkt).is_some_and(|port| {
            let at = SocketAddr::from((pkt.dst(), port));
            self.cfg.dns64_listen.contains(&at)
        });
        match dns64 {
            true => self.needs_sa(from),
            false => Err(DropReason::ToSelf),
        }
    }

    /// The other way: a packet towards a client that no outbound child SA covers (the caller
    /// has tried to seal it). While IPsec is required, what reaches a client in clear is only
    /// what it needs to build its SAs and to use its link: IKE from the IPsec endpoint
    /// (UDP 500, or 4500 behind the zero non-ESP marker), ICMPv6 errors (RFC 4443 §2.1: they
    /// quote the client's own packet), neighbour discovery (RFC 4861) and an echo reply from
    /// one of gate64's own addresses (the answer to the echo request [`Shared::to_self`]
    /// admits). Everything else, from the corporate network, NAT64 or another client, is
    /// [`DropReason::NoSaToClient`]. With `require = false` (the lab switch) everything
    /// passes.
    pub(crate) fn to_client_in_clear(&self, pkt: &ipv6::Packet<'_>) -> Result<(), DropReason> {
        if !self.require_ipsec() {
            return Ok(());
        }
        let src = pkt.src();
        let admitted = match icmpv6::type_code(pkt) {
            Some((t, _)) if icmpv6::is_error(t) => true,
            Some((t, _)) if (ND_FIRST_TYPE..=ND_LAST_TYPE).contains(&t) => true,
            Some((icmpv6::TYPE_ECHO_REPLY, 0)) => self.is_own_v6(&src),
            Some(_) => false,
            None => self.cfg.ipsec_endpoint == Some(src) && is_ike_from(pkt),
        };
        if admitted {
            Ok(())
        } else {
            Err(DropReason::NoSaToClient)
        }
    }

    /// One of gate64's own IPv6 addresses: `corp_address`, the IPsec endpoint or another
    /// configured one.
    fn is_own_v6(&self, a: &Ipv6Addr) -> bool {
        *a == self.cfg.corp_address
            || self.cfg.ipsec_endpoint == Some(*a)
            || self.cfg.self_addresses.contains(&std::net::IpAddr::V6(*a))
    }

    /// UDP to `[endpoint]:500`, or to `[endpoint]:4500` whose payload starts with the zero
    /// non-ESP marker (RFC 3948 §2.2). Only while IPsec is configured (an endpoint is set).
    pub(crate) fn is_ike(&self, pkt: &ipv6::Packet<'_>) -> bool {
        if self.cfg.ipsec_endpoint != Some(pkt.dst()) || pkt.next_header() != ipv6::NH_UDP {
            return false;
        }
        matches!(encap_to(pkt.payload()), Some(Encapsulated::Ike { .. }))
    }
}

/// Neighbour discovery's ICMPv6 types (RFC 4861 §4): Router Solicitation (133) to Redirect
/// (137).
const ND_FIRST_TYPE: u8 = icmpv6::TYPE_ROUTER_SOLICITATION;
const ND_LAST_TYPE: u8 = 137;

/// UDP from port 500, or from 4500 with the zero non-ESP marker: IKE as gate64's responder
/// sends it (the source address is the caller's to check).
fn is_ike_from(pkt: &ipv6::Packet<'_>) -> bool {
    if pkt.next_header() != ipv6::NH_UDP {
        return false;
    }
    matches!(encap_from(pkt.payload()), Some(Encapsulated::Ike { .. }))
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
    // TCP's header starts with the two ports as UDP's does.
    udp::peek_ports(pkt.payload()).map(|(_, dst)| dst)
}
