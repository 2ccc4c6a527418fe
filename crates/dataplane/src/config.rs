//! What the dataplane is told once at start: prefixes, addresses, limits, and the buffer
//! contract with drivers.

use gate64_nat64::Nat64;
use gate64_nat64::state::Event as BindingEvent;
use gate64_teredo::{RelayConfig, ServerConfig};
use gate64_wire::{ipv6, teredo as tw};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// Bytes a driver must leave free before a packet for headers to be prepended: the outer
/// IPv6 + UDP + ESP headers of a sealed packet (40 + 8 + up to 24) plus a Teredo origin indication
/// or IP-HTTPS framing, with room to spare.
pub const HEADROOM: usize = 128;
/// Largest packet a driver must be able to hold after the headroom: an IPv6 packet with a
/// 64 KiB payload plus Teredo headers.
pub const MAX_PACKET: usize = 65535 + ipv6::HEADER_LEN + 2 * tw::AUTH_MIN_LEN + tw::ORIGIN_LEN;

/// An IPv6 prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    bits: u128,
    len: u8,
}

impl Prefix {
    /// `addr/len`; host bits are cleared, `len` is capped at 128.
    pub fn new(addr: Ipv6Addr, len: u8) -> Self {
        let len = len.min(128);
        Prefix {
            bits: u128::from(addr) & mask(len),
            len,
        }
    }

    /// True when `a` lies inside.
    pub fn contains(&self, a: &Ipv6Addr) -> bool {
        u128::from(*a) & mask(self.len) == self.bits
    }
}

/// An IPv4 prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix4 {
    bits: u32,
    len: u8,
}

impl Prefix4 {
    /// `addr/len`; host bits are cleared, `len` is capped at 32.
    pub fn new(addr: Ipv4Addr, len: u8) -> Self {
        let len = len.min(32);
        Prefix4 {
            bits: u32::from(addr) & mask4(len),
            len,
        }
    }

    /// True when `a` lies inside.
    pub fn contains(&self, a: &Ipv4Addr) -> bool {
        u32::from(*a) & mask4(self.len) == self.bits
    }
}

fn mask4(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

/// IPv4 inside the IPsec tunnels (`[ipsec] pool4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipsec4 {
    /// `ipsec.pool4`: inner IPv4 addresses of clients, reached only through their SA.
    pub pool: Prefix4,
    /// `ha.peer_pool4`: the `[ha]` peer's pool, whose addresses this node's clients hold
    /// only when their IKE SA was taken over from the peer; reached, like `pool`, only
    /// through their SA. `None`: no such pool.
    pub peer_pool: Option<Prefix4>,
    /// The corporate IPv4 networks clients reach through the TUN (`corpnet.ipv4_prefixes`);
    /// each SA's selectors narrow this to its tunnel's.
    pub corp_prefixes: Vec<Prefix4>,
}

impl Ipsec4 {
    /// Whether `a` is a client's inner IPv4 address: in `pool` or `peer_pool`.
    pub fn holds(&self, a: &Ipv4Addr) -> bool {
        self.pool.contains(a) || self.peer_pool.is_some_and(|p| p.contains(a))
    }
}

fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

/// Everything the pipeline needs to know, built from the config once.
#[derive(Debug, Clone)]
pub struct DataplaneConfig {
    /// The Teredo server; `None` when Teredo is off.
    pub teredo: Option<ServerConfig>,
    /// Relay timers and limits.
    pub relay: RelayConfig,
    /// Corporate prefixes clients may reach.
    pub corp_prefixes: Vec<Prefix>,
    /// gate64's own corporate-side address.
    pub corp_address: Ipv6Addr,
    /// gate64's other addresses it knows of (Teredo server, IP-HTTPS, DNS64 and metrics
    /// listeners): a client's packet to one of them, or to Pref64 + one of the IPv4 ones, is
    /// traffic to gate64 itself and gets only what a client needs (see `policy.rs`).
    pub self_addresses: Vec<IpAddr>,
    /// Where DNS64 is served (UDP and TCP), e.g. `corp_address` port 53: clients may send
    /// there. Empty when DNS64 is off.
    pub dns64_listen: Vec<SocketAddr>,
    /// The security step (`[ipsec] require`): the corporate network, NAT64, DNS64 and other
    /// clients only out of a child SA. `false` is the lab switch.
    pub require_ipsec: bool,
    /// gate64's IKE/ESP address (`ipsec.endpoint`); `None` while IPsec is not configured:
    /// then no IKE is admitted and no ESP opened.
    pub ipsec_endpoint: Option<Ipv6Addr>,
    /// IPv4 inside the tunnels; `None` while `ipsec.pool4` is not set (or IPsec not
    /// configured): IPv4 out of ESP is dropped, and IPv4 from the TUN all goes to NAT64.
    pub ipsec4: Option<Ipsec4>,
    /// `ipsec.pool6`: inner addresses of clients reached only through their SA.
    pub ipsec_pool: Option<Prefix>,
    /// The child SAs, shared with the IKE driver that installs them; `None` while IPsec is
    /// not configured.
    pub sadb: Option<Arc<gate64_esp::SaDb>>,
    /// IKE packets per second one client may send to the IPsec endpoint on each worker
    /// (`[ipsec] ike_packets_per_source_per_sec`); as many again may come at once.
    pub ike_per_client_per_sec: u32,
    /// Router Solicitations per second per source address.
    pub rs_per_sec: u32,
    /// Burst of Router Solicitations per source address.
    pub rs_burst: u32,
    /// The IP-HTTPS pool: each connection owns one /64 of it. `None` when IP-HTTPS is off.
    pub iphttps_prefix: Option<Prefix>,
    /// The HA peer's IP-HTTPS pool (`ha.peer_iphttps_prefix`): /64s of it this node serves
    /// to the peer's clients that reconnected here, routed as `iphttps_prefix` is.
    pub iphttps_peer_prefix: Option<Prefix>,
    /// Stateful NAT64; `None` when `[nat64]` is off.
    pub nat64: Option<Arc<Nat64>>,
    /// Where BIB creations and deletions go (RFC 6888 compliance log); `None` when off.
    pub binding_log: Option<BindingLog>,
}

impl DataplaneConfig {
    /// Whether `a` lies in a /64 an IP-HTTPS link of this node may hold: `iphttps_prefix` or
    /// `iphttps_peer_prefix`.
    pub fn is_iphttps(&self, a: &Ipv6Addr) -> bool {
        self.iphttps_prefix.is_some_and(|p| p.contains(a))
            || self.iphttps_peer_prefix.is_some_and(|p| p.contains(a))
    }
}

/// A sink for NAT64 binding events, called from the worker that expires the shard.
#[derive(Clone)]
pub struct BindingLog(pub Arc<dyn Fn(&BindingEvent) + Send + Sync>);

impl std::fmt::Debug for BindingLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BindingLog")
    }
}
