//! The one road for a client's IPv6 packet, whatever transport brought it (Teredo, IP-HTTPS,
//! ESP): route it by destination, pass the security step ([`crate::policy`]), and hand it to
//! the stage that sends it on.
//!
//! ```text
//! transport stage (teredo.rs, iphttps.rs)  -- a packet and the client it came from
//! -> ESP to the IPsec endpoint? ipsec.rs opens it, and its inner packet takes this road
//!    again as ClientBinding::Ipsec
//! -> route:  forwardable unicast? then
//!            ipsec.pool6 -> another client (sealed under its SA)
//!            IP-HTTPS pool /64 -> another client     Teredo address of ours -> another client
//!            Pref64 + gate64's IPv4 -> gate64 itself (via NAT64)    Pref64 -> NAT64
//!            corp_address or another of gate64's addresses -> gate64 itself
//!            corporate prefix -> corpnet      anything else -> no_route
//! -> policy: Shared::policy (the one security step)
//! -> Tun | NAT64 6->4 (nat64.rs) | another client (teredo.rs relay, iphttps.rs queue)
//! ```
//!
//! An IPv4 packet opened from ESP (`ipsec.pool4` set) takes the same road, shorter: the
//! ESP stage has held its source to the SA's selectors; then
//!
//! ```text
//! -> route:  forwardable unicast? then
//!            gate64's own IPv4 address -> gate64 itself (refused: to_self)
//!            corporate IPv4 network (corpnet.ipv4_prefixes) -> corpnet
//!            anything else (NAT64's pool, another client, the internet) -> no_route
//! -> policy: Shared::policy4
//! -> Tun
//! ```

use crate::egress::Elsewhere;
use crate::{DropReason, Verdict, Worker};
use gate64_teredo::Address;
use gate64_wire::{ipv4, ipv6};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Instant;

/// The client a packet came from: the transport binding it arrived through, already checked
/// by its transport stage (Teredo §5.4.2 source check, IP-HTTPS /64 source check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientBinding {
    /// A Teredo client: its address and the NAT mapping its datagram came from.
    Teredo {
        /// The client's Teredo address (the packet's source).
        address: Address,
        /// The UDP source of its datagram.
        mapping: SocketAddrV4,
    },
    /// An IP-HTTPS connection, by the /64 it owns.
    Iphttps {
        /// The connection's /64.
        prefix: Ipv6Addr,
    },
    /// Out of an IPsec child SA: the inner packet of an ESP packet that a Teredo or IP-HTTPS
    /// client sent to the IPsec endpoint, opened under the SA and inside its selectors.
    Ipsec {
        /// The client's outer IPv6 address (its Teredo address or an address of its
        /// IP-HTTPS /64, checked by the transport stage): the SA's peer.
        outer: Ipv6Addr,
        /// The child SA it was opened under, by its inbound SPI (which also names the
        /// tunnel: infrastructure or intranet).
        inbound_spi: u32,
    },
}

/// Where a client's packet goes, before the policy step has looked at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// gate64's own corporate address.
    Gate64,
    /// Another address of gate64's own (`self_addresses`).
    SelfAddress,
    /// Pref64 + one of gate64's own IPv4 addresses: NAT64 would deliver it to the host.
    Nat64ToSelf,
    /// A corporate prefix, through the TUN.
    Corpnet,
    /// Pref64: translated to IPv4 (RFC 6146), then the TUN.
    Nat64,
    /// One of our Teredo clients, through the relay.
    TeredoClient(Address),
    /// An IP-HTTPS connection's queue.
    IphttpsClient,
    /// An inner address from `ipsec.pool6`: a client reached only through its SA.
    IpsecClient,
}

impl Worker {
    /// The one road: the IPv6 packet in `buf[start..end]` (trailing bytes past its payload
    /// length are ignored) from the client `from`.
    pub(crate) fn ingress(
        &mut self,
        now: Instant,
        from: &ClientBinding,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let shared = Arc::clone(&self.shared);
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let pkt = ipv6::Packet::new_checked(bytes)?;
        let end = start + pkt.total_len();
        let dst = pkt.dst();
        if shared.is_esp(&pkt) {
            return self.esp_ingress(now, from, buf, start, end);
        }
        if shared.cfg.ipsec_endpoint == Some(dst) && pkt.next_header() == ipv6::NH_FRAGMENT {
            return self.endpoint_fragment(now, from, buf, start, end);
        }
        let route = shared.route(&dst)?;
        shared.policy(from, &route, &pkt)?;
        if shared.is_ike(&pkt) {
            self.admit_ike(now, from)?;
        }
        match route {
            Route::Gate64 | Route::SelfAddress | Route::Corpnet => Ok(Verdict::Tun { start, end }),
            // The policy never admits it; listed so the match stays exhaustive.
            Route::Nat64ToSelf => Err(DropReason::ToSelf),
            Route::Nat64 => self.nat64_from_v6(now, buf, start, end),
            // Sealed first when the client has an SA for it (ipsec.rs); then, whatever the
            // source, its connection's queue or the relay, to verified peers only (RFC 4380
            // §5.4.1; the server role relays bubbles alone, teredo.rs).
            Route::IphttpsClient | Route::TeredoClient(_) | Route::IpsecClient => {
                self.deliver_to_client(now, buf, start, end, Elsewhere::Drop)
            }
        }
    }
}

impl Worker {
    /// The one road for IPv4: the IPv4 packet in `buf[start..end]` (trailing bytes past its
    /// total length are ignored) from `from`, which only the ESP stage hands over (IPv4
    /// reaches gate64 from clients only inside a child SA). Without `ipsec.pool4` there is
    /// no IPv4 road (`unsupported`).
    pub(crate) fn ingress4(
        &mut self,
        from: &ClientBinding,
        buf: &[u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let pkt = ipv4::Packet::new_checked(bytes)?;
        let end = start + usize::from(pkt.total_len());
        let route = self.shared.route4(pkt.dst())?;
        self.shared.policy4(from, &route)?;
        match route {
            Route::Corpnet => Ok(Verdict::Tun { start, end }),
            // The policy admits nothing else over IPv4; listed so the match stays exhaustive.
            _ => Err(DropReason::NoRoute),
        }
    }
}

impl crate::Shared {
    /// The route of a client's IPv4 packet to `dst`: gate64 itself, or a corporate IPv4
    /// network; nothing else is reached over IPv4 inside the tunnels.
    fn route4(&self, dst: Ipv4Addr) -> Result<Route, DropReason> {
        let v4 = self.cfg.ipsec4.as_ref().ok_or(DropReason::Unsupported)?;
        if dst.is_unspecified()
            || dst.is_loopback()
            || dst.is_multicast()
            || dst.is_broadcast()
            || dst.octets()[0] == 0
        {
            return Err(DropReason::BadDestination);
        }
        if self.is_own_v4(dst) {
            return Ok(Route::SelfAddress);
        }
        if v4.corp_prefixes.iter().any(|p| p.contains(&dst)) {
            return Ok(Route::Corpnet);
        }
        Err(DropReason::NoRoute)
    }

    /// The route of a client's packet to `dst`.
    fn route(&self, dst: &Ipv6Addr) -> Result<Route, DropReason> {
        if !ipv6::is_forwardable_unicast(dst) {
            return Err(DropReason::BadDestination);
        }
        if self.cfg.is_iphttps(dst) {
            return Ok(Route::IphttpsClient);
        }
        if self.cfg.ipsec_pool.is_some_and(|p| p.contains(dst)) {
            // The pool's first address is gate64's own, the default IPsec endpoint.
            if self.cfg.self_addresses.contains(&IpAddr::V6(*dst)) {
                return Ok(Route::SelfAddress);
            }
            return Ok(Route::IpsecClient);
        }
        if let (Some(server), Some(d)) = (self.server.as_ref(), Address::decode(dst)) {
            // Teredo addresses of other servers are theirs to relay.
            return if server.is_own_client(&d) {
                Ok(Route::TeredoClient(d))
            } else {
                Err(DropReason::NoRoute)
            };
        }
        if let Some(nat) = self.cfg.nat64.as_ref()
            && nat.prefix().contains(dst)
        {
            let to_self = nat
                .prefix()
                .extract(dst)
                .is_some_and(|v4| self.is_own_v4(v4));
            return Ok(if to_self {
                Route::Nat64ToSelf
            } else {
                Route::Nat64
            });
        }
        if *dst == self.cfg.corp_address {
            return Ok(Route::Gate64);
        }
        // Checked before the corporate prefixes: an address of gate64's inside one is still
        // gate64 itself.
        if self.cfg.self_addresses.contains(&IpAddr::V6(*dst)) {
            return Ok(Route::SelfAddress);
        }
        if self.cfg.corp_prefixes.iter().any(|p| p.contains(dst)) {
            return Ok(Route::Corpnet);
        }
        Err(DropReason::NoRoute)
    }
}

impl crate::Shared {
    /// True for one of gate64's own IPv4 addresses: the Teredo server's or a configured one.
    fn is_own_v4(&self, a: std::net::Ipv4Addr) -> bool {
        self.server
            .as_ref()
            .is_some_and(|s| s.config().primary == a || s.config().secondary == a)
            || self.cfg.self_addresses.contains(&IpAddr::V4(a))
    }
}
