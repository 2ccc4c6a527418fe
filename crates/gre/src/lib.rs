//! GRE site-to-site tunnels, sans-IO: the tunnel table, decapsulation with every receive
//! check, encapsulation in the caller's headroom, and Cisco-style keepalives with up/down
//! state.
//!
//! RFCs covered: RFC 2784 (GRE: version 0, the optional checksum, §2.3's discard rules),
//! RFC 2890 (the key that selects the tunnel, §2.1, and the sequence number, §2.2), RFC 7676
//! (IPv6 as delivery and payload protocol). Header layouts live in [`gate64_wire::gre`].
//!
//! # Contract
//!
//! - A tunnel is keyed by (outer local address, outer remote address, key). A packet from an
//!   address pair no tunnel uses is [`DropReason::UnknownPeer`]; from a known pair with a
//!   missing, extra or different key it is [`DropReason::BadKey`], so a tenant's key never
//!   reaches another tenant.
//! - [`Gre::decap`] never panics on any input; every refusal is one [`DropReason`], counted
//!   once in [`Gre::drops`]. What it accepts is an inner IPv4 or IPv6 packet with a TTL / hop
//!   limit above 1 whose length fits the GRE payload, or a keepalive ([`Inner`]).
//! - Time is a parameter: the caller passes `now` to [`Gre::handle_timeout`] and sleeps until
//!   [`Gre::poll_timeout`]; nothing here reads a clock, opens a socket or allocates per
//!   packet.
//! - Encapsulation writes the GRE header in front of the inner packet, in the caller's
//!   buffer ([`Gre::encap`]); the outer IP header is the socket's (raw protocol-47 sockets
//!   add it).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gate64_wire::{gre, ipv4, ipv6};
use ipnet::IpNet;

mod keepalive;
pub mod outer;
mod route;
mod sequence;
pub mod stats;

pub use route::Routes;
use sequence::Window;
pub use stats::{DropStats, TunnelStats};

/// Index of a tunnel in the table, in the order the tunnels were given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TunnelId(pub usize);

/// Index of a tenant (a routing domain), in the order the caller numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(pub usize);

/// Keepalive settings of a tunnel (Cisco's `keepalive <period> <retries>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Time between keepalives.
    pub interval: Duration,
    /// Unanswered keepalives after which the tunnel is down.
    pub retries: u32,
}

/// One tunnel as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelConfig {
    /// Name, for logs and metric labels.
    pub name: String,
    /// gate64's outer address.
    pub local: IpAddr,
    /// The peer's outer address (same family as `local`).
    pub remote: IpAddr,
    /// RFC 2890 key, sent and required on receipt when set.
    pub key: Option<u32>,
    /// The tenant whose routing domain the inner packets belong to.
    pub tenant: TenantId,
    /// Inner prefixes reached through this tunnel.
    pub routes: Vec<IpNet>,
    /// Send a GRE checksum (RFC 2784 §2.5) on encapsulated packets.
    pub send_checksum: bool,
    /// Send RFC 2890 sequence numbers.
    pub send_sequence: bool,
    /// Keepalives, or `None` (the tunnel is then always up).
    pub keepalive: Option<Keepalive>,
}

/// Why a GRE packet was dropped. Labels are a metrics contract: never rename them. Exhaustive
/// on purpose: the driver maps each one to its `gate64_drops_total` reason, and a new one
/// must get its own rather than fall into another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DropReason {
    /// Shorter than its GRE header, or the inner packet is cut short.
    #[error("truncated")]
    Truncated,
    /// GRE version other than 0 (RFC 2784 §2.3.1).
    #[error("GRE version other than 0")]
    BadVersion,
    /// RFC 1701 routing/strict-route/recursion bits set, an inner packet that is not what the
    /// Protocol Type says, or a payload type gate64 does not carry (also a super-packet from
    /// the tenant's TUN that the driver cannot split).
    #[error("malformed")]
    Malformed,
    /// No tunnel between these outer addresses.
    #[error("unknown peer")]
    UnknownPeer,
    /// A known peer, but not with this key (or without one where a key is required).
    #[error("bad key")]
    BadKey,
    /// Sequence number not after the last one accepted (RFC 2890 §2.2).
    #[error("out of sequence")]
    Sequence,
    /// GRE checksum does not verify (RFC 2784 §2.5).
    #[error("bad checksum")]
    Checksum,
    /// Inner TTL or hop limit 0 or 1: forwarding it would expire it.
    #[error("inner TTL expired")]
    Ttl,
    /// An inner packet read from the tenant's TUN that no tunnel's routes cover.
    #[error("no tunnel route")]
    NoRoute,
    /// No headroom for the GRE header, or an inner packet too long for one GRE packet.
    #[error("no room to encapsulate")]
    NoRoom,
    /// An inner packet for a tunnel whose keepalives went unanswered: its routes are
    /// withdrawn from the data path until the peer answers again.
    #[error("tunnel down")]
    TunnelDown,
}

impl DropReason {
    /// Every reason, in [`DropReason::index`] order.
    pub const ALL: [DropReason; 11] = [
        DropReason::Truncated,
        DropReason::BadVersion,
        DropReason::Malformed,
        DropReason::UnknownPeer,
        DropReason::BadKey,
        DropReason::Sequence,
        DropReason::Checksum,
        DropReason::Ttl,
        DropReason::NoRoute,
        DropReason::NoRoom,
        DropReason::TunnelDown,
    ];

    /// Position in [`DropReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The `gate64_drops_total{reason}` label. Truncated, bad-version and malformed packets
    /// share `gre_malformed`: to an operator they are all "the peer sent garbage".
    pub const fn label(self) -> &'static str {
        match self {
            DropReason::Truncated | DropReason::BadVersion | DropReason::Malformed => {
                "gre_malformed"
            }
            DropReason::UnknownPeer => "gre_unknown_peer",
            DropReason::BadKey => "gre_bad_key",
            DropReason::Sequence => "gre_sequence",
            DropReason::Checksum => "gre_checksum",
            DropReason::Ttl => "gre_ttl",
            DropReason::NoRoute => "gre_no_route",
            DropReason::NoRoom => "gre_no_room",
            DropReason::TunnelDown => "gre_tunnel_down",
        }
    }
}

/// What an accepted GRE packet carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inner {
    /// An IPv4 packet for the tenant's routing domain.
    Ipv4,
    /// An IPv6 packet for the tenant's routing domain.
    Ipv6,
    /// The peer's keepalive: `range` is the pre-built reply's GRE part, to send back to the
    /// tunnel's remote address as it is.
    KeepaliveReflect,
    /// The answer to one of our keepalives (Protocol Type 0); nothing to forward.
    KeepaliveAnswer,
}

/// A GRE packet that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decapped {
    /// The tunnel it arrived on.
    pub tunnel: TunnelId,
    /// That tunnel's tenant.
    pub tenant: TenantId,
    /// Where the inner packet lies in the GRE bytes.
    pub range: Range<usize>,
    /// What the inner packet is.
    pub inner: Inner,
}

/// Why a tunnel table could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// Two tunnels with the same (local, remote, key).
    #[error("tunnels {0} and {1} have the same local address, remote address and key")]
    Duplicate(String, String),
    /// `local` and `remote` of a tunnel are of different families.
    #[error("tunnel {0}: local and remote addresses are of different families")]
    FamilyMismatch(String),
}

struct Tunnel {
    config: TunnelConfig,
    /// What this table's thread counted (the exporter sums the original and its senders).
    stats: Arc<TunnelStats>,
    /// The original table's counters, whose `up` is the tunnel's state for every copy.
    state: Arc<TunnelStats>,
    window: Window,
    next_sequence: u32,
    keepalive: keepalive::Timer,
}

/// The GRE tunnels of one gate64 and their state.
pub struct Gre {
    tunnels: Vec<Tunnel>,
    by_key: HashMap<(IpAddr, IpAddr, Option<u32>), TunnelId>,
    peers: HashMap<(IpAddr, IpAddr), TunnelId>,
    routes: Routes,
    drops: Arc<DropStats>,
    pending: std::collections::VecDeque<TunnelId>,
}

impl Gre {
    /// Builds the table from `tunnels` (ids in this order), every tunnel up, keepalive timers
    /// due one interval after `now`.
    pub fn new(tunnels: Vec<TunnelConfig>, now: Instant) -> Result<Gre, TableError> {
        let mut by_key = HashMap::new();
        let mut peers = HashMap::new();
        let mut routes = Routes::default();
        let mut table = Vec::with_capacity(tunnels.len());
        for (i, config) in tunnels.into_iter().enumerate() {
            let id = TunnelId(i);
            if config.local.is_ipv4() != config.remote.is_ipv4() {
                return Err(TableError::FamilyMismatch(config.name));
            }
            let k = (config.local, config.remote, config.key);
            if let Some(other) = by_key.insert(k, id) {
                let other: &Tunnel = &table[other.0];
                return Err(TableError::Duplicate(
                    other.config.name.clone(),
                    config.name,
                ));
            }
            peers.entry((config.local, config.remote)).or_insert(id);
            for net in &config.routes {
                routes.insert(config.tenant, *net, id);
            }
            let stats = Arc::new(TunnelStats::default());
            stats::bump(&stats.up, 1);
            table.push(Tunnel {
                keepalive: keepalive::Timer::new(config.keepalive, now),
                config,
                state: Arc::clone(&stats),
                stats,
                window: Window::default(),
                next_sequence: 0,
            });
        }
        Ok(Gre {
            tunnels: table,
            by_key,
            peers,
            routes,
            drops: Arc::new(DropStats::default()),
            pending: Default::default(),
        })
    }

    /// The tunnels' ids, names, and the counters this table's thread writes (shared with the
    /// metrics exporter, which sums them over the original and its [`Gre::sender`] copies).
    /// `up` is the tunnel's state in the original's counters only.
    pub fn tunnels(&self) -> impl Iterator<Item = (TunnelId, &TunnelConfig, &Arc<TunnelStats>)> {
        self.tunnels
            .iter()
            .enumerate()
            .map(|(i, t)| (TunnelId(i), &t.config, &t.stats))
    }

    /// The configuration of tunnel `id`.
    pub fn config(&self, id: TunnelId) -> Option<&TunnelConfig> {
        self.tunnels.get(id.0).map(|t| &t.config)
    }

    /// Whether tunnel `id` is up (keepalives answered, or keepalives off). Read from the
    /// shared counters, so a [`Gre::sender`] copy follows the state its original's timers and
    /// keepalive answers set.
    pub fn is_up(&self, id: TunnelId) -> bool {
        self.tunnels
            .get(id.0)
            .is_some_and(|t| t.state.up.load(std::sync::atomic::Ordering::Relaxed) != 0)
    }

    /// A copy of the table for another thread that only routes and encapsulates
    /// ([`Gre::route_packet`], [`Gre::encap`]): it shares the up/down state (which stays
    /// this table's to run), counts in counters of its own (each counter has one writer), and
    /// has no keepalive timers of its own. `None` when a tunnel sends sequence numbers: RFC
    /// 2890 receivers drop numbers that arrive out of order, so one tunnel's numbers must come
    /// from one thread in send order.
    pub fn sender(&self, now: Instant) -> Option<Gre> {
        if self.tunnels.iter().any(|t| t.config.send_sequence) {
            return None;
        }
        Some(Gre {
            tunnels: self
                .tunnels
                .iter()
                .map(|t| Tunnel {
                    config: t.config.clone(),
                    stats: Arc::new(TunnelStats::default()),
                    state: Arc::clone(&t.state),
                    window: Window::default(),
                    next_sequence: 0,
                    keepalive: keepalive::Timer::new(None, now),
                })
                .collect(),
            by_key: self.by_key.clone(),
            peers: self.peers.clone(),
            routes: self.routes.clone(),
            drops: Arc::new(DropStats::default()),
            pending: Default::default(),
        })
    }

    /// Drops by reason that this table's thread counted (shared with the metrics exporter,
    /// which sums them over the original and its senders).
    pub fn drops(&self) -> &Arc<DropStats> {
        &self.drops
    }

    /// Checks a GRE packet `gre` (after the outer IP header) that arrived from `src` to `dst`
    /// and finds its tunnel and inner packet. Every refusal is counted.
    pub fn decap(&mut self, src: IpAddr, dst: IpAddr, gre: &[u8]) -> Result<Decapped, DropReason> {
        let r = self.decap_uncounted(src, dst, gre);
        if let Err(reason) = r {
            self.drops.count(reason);
        }
        r
    }

    fn decap_uncounted(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        bytes: &[u8],
    ) -> Result<Decapped, DropReason> {
        let p = gre::Packet::new_checked(bytes).map_err(|e| match e {
            gate64_wire::Error::Truncated => DropReason::Truncated,
            gate64_wire::Error::Unsupported => DropReason::BadVersion,
            gate64_wire::Error::Malformed => DropReason::Malformed,
        })?;
        let id = match self.by_key.get(&(dst, src, p.key())) {
            Some(id) => *id,
            None if self.peers.contains_key(&(dst, src)) => return Err(DropReason::BadKey),
            None => return Err(DropReason::UnknownPeer),
        };
        if !p.verify_checksum() {
            return Err(DropReason::Checksum);
        }
        let start = p.header_len();
        let (inner, len) = inner_packet(p.protocol_type(), p.payload())?;
        let t = &mut self.tunnels[id.0];
        if let Some(seq) = p.sequence()
            && !t.window.accept(seq)
        {
            return Err(DropReason::Sequence);
        }
        let range = start..start + len;
        let inner = match inner {
            Inner::KeepaliveAnswer => {
                t.keepalive.answered();
                stats::bump(&t.stats.keepalives_answered, 1);
                t.state.up.store(1, std::sync::atomic::Ordering::Relaxed);
                Inner::KeepaliveAnswer
            }
            family => {
                if is_keepalive_request(&t.config, &bytes[range.clone()], family) {
                    stats::bump(&t.stats.keepalives_reflected, 1);
                    let ip_len = if family == Inner::Ipv4 {
                        ipv4::HEADER_LEN
                    } else {
                        ipv6::HEADER_LEN
                    };
                    return Ok(Decapped {
                        tunnel: id,
                        tenant: t.config.tenant,
                        range: range.start + ip_len..range.end,
                        inner: Inner::KeepaliveReflect,
                    });
                }
                stats::bump(&t.stats.rx_packets, 1);
                stats::bump(&t.stats.rx_bytes, len as u64);
                family
            }
        };
        Ok(Decapped {
            tunnel: id,
            tenant: t.config.tenant,
            range,
            inner,
        })
    }

    /// The tunnel for an inner packet read from `tenant`'s routing domain, by its destination;
    /// a packet too short for its IP header or that no route covers is refused and counted.
    pub fn route_packet(&self, tenant: TenantId, packet: &[u8]) -> Result<TunnelId, DropReason> {
        let dst = match packet.first().map(|b| b >> 4) {
            Some(4) => packet
                .get(16..20)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(IpAddr::from),
            Some(6) => packet
                .get(24..40)
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .map(IpAddr::from),
            _ => None,
        };
        let r = match dst {
            None => Err(DropReason::Malformed),
            Some(dst) => match self.route(tenant, dst) {
                // Keepalive loss withdraws the tunnel's routes: nothing is sent into a tunnel
                // whose peer stopped answering (a black hole the operator should see counted).
                Some(id) if !self.is_up(id) => Err(DropReason::TunnelDown),
                Some(id) => Ok(id),
                None => Err(DropReason::NoRoute),
            },
        };
        if let Err(reason) = r {
            self.drops.count(reason);
        }
        r
    }

    /// The tunnel that carries an inner packet to `dst` in `tenant`'s routing domain (longest
    /// prefix match over the tunnels' routes).
    pub fn route(&self, tenant: TenantId, dst: IpAddr) -> Option<TunnelId> {
        self.routes.lookup(tenant, dst)
    }

    /// Encapsulates the inner packet `buf[start..end]` for tunnel `id`: writes the GRE header
    /// into the headroom before `start` (at most [`gre::MAX_HEADER_LEN`] bytes), fills the
    /// checksum if the tunnel sends one, and returns where the GRE packet starts; the caller
    /// sends `buf[returned..end]` to the tunnel's remote address. `protocol_type` follows
    /// the inner packet's version nibble.
    pub fn encap(
        &mut self,
        id: TunnelId,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<usize, DropReason> {
        let r = self.encap_uncounted(id, buf, start, end);
        if let Err(reason) = r {
            self.drops.count(reason);
        }
        r
    }

    fn encap_uncounted(
        &mut self,
        id: TunnelId,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<usize, DropReason> {
        let t = self.tunnels.get_mut(id.0).ok_or(DropReason::NoRoute)?;
        let inner = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let protocol_type = match inner.first().map(|b| b >> 4) {
            Some(4) => gre::PROTO_IPV4,
            Some(6) => gre::PROTO_IPV6,
            _ => return Err(DropReason::Malformed),
        };
        let len = inner.len();
        let sequence = t.config.send_sequence.then(|| {
            let s = t.next_sequence;
            t.next_sequence = s.wrapping_add(1);
            s
        });
        let repr = gre::Repr {
            protocol_type,
            checksum: t.config.send_checksum,
            key: t.config.key,
            sequence,
        };
        let at = start
            .checked_sub(repr.header_len())
            .ok_or(DropReason::NoRoom)?;
        repr.emit(&mut buf[at..start])
            .map_err(|_| DropReason::NoRoom)?;
        if repr.checksum {
            gre::fill_checksum(&mut buf[at..end]).map_err(|_| DropReason::Malformed)?;
        }
        stats::bump(&t.stats.tx_packets, 1);
        stats::bump(&t.stats.tx_bytes, len as u64);
        Ok(at)
    }

    /// Runs the keepalive timers due at `now`: a tunnel whose `retries` keepalives went
    /// unanswered goes down, and the keepalives due are queued for [`Gre::poll_transmit`].
    pub fn handle_timeout(&mut self, now: Instant) {
        for (i, t) in self.tunnels.iter_mut().enumerate() {
            if t.keepalive.fire(now) {
                self.pending.push_back(TunnelId(i));
            }
            let up = u64::from(t.keepalive.is_up());
            if t.state.up.load(std::sync::atomic::Ordering::Relaxed) != up {
                t.state.up.store(up, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// When [`Gre::handle_timeout`] should run next, or `None` without keepalives.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.tunnels.iter().filter_map(|t| t.keepalive.due()).min()
    }

    /// Writes the next queued keepalive's GRE bytes into `out` and returns its tunnel (send to
    /// the tunnel's remote address) and length. A keepalive that does not fit `out` is
    /// skipped.
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Option<(TunnelId, usize)> {
        while let Some(id) = self.pending.pop_front() {
            let t = &self.tunnels[id.0];
            let c = &t.config;
            let n = match (c.local, c.remote) {
                (IpAddr::V4(l), IpAddr::V4(r)) => gre::keepalive::emit_v4(l, r, c.key, out),
                (IpAddr::V6(l), IpAddr::V6(r)) => gre::keepalive::emit_v6(l, r, c.key, out),
                _ => continue,
            };
            if let Ok(n) = n {
                stats::bump(&t.stats.keepalives_sent, 1);
                return Some((id, n));
            }
        }
        None
    }
}

/// Checks the inner packet the Protocol Type announces and returns its kind and length (its
/// own length field; bytes after it are padding and not forwarded).
fn inner_packet(protocol_type: u16, payload: &[u8]) -> Result<(Inner, usize), DropReason> {
    match protocol_type {
        gre::PROTO_KEEPALIVE => Ok((Inner::KeepaliveAnswer, 0)),
        gre::PROTO_IPV4 => {
            let p = ipv4::Packet::new_checked(payload).map_err(wire_drop)?;
            if p.ttl() <= 1 {
                return Err(DropReason::Ttl);
            }
            Ok((Inner::Ipv4, usize::from(p.total_len())))
        }
        gre::PROTO_IPV6 => {
            let p = ipv6::Packet::new_checked(payload).map_err(wire_drop)?;
            if p.hop_limit() <= 1 {
                return Err(DropReason::Ttl);
            }
            Ok((Inner::Ipv6, ipv6::HEADER_LEN + usize::from(p.payload_len())))
        }
        _ => Err(DropReason::Malformed),
    }
}

fn wire_drop(e: gate64_wire::Error) -> DropReason {
    match e {
        gate64_wire::Error::Truncated => DropReason::Truncated,
        _ => DropReason::Malformed,
    }
}

/// True when `inner` is the peer's keepalive: an IP packet from our local address to the
/// peer's, carrying GRE (the reply the peer pre-built; Cisco's form, see
/// [`gate64_wire::gre::keepalive`]). Anything else from our own address is not ours to
/// reflect.
fn is_keepalive_request(config: &TunnelConfig, inner: &[u8], family: Inner) -> bool {
    match family {
        Inner::Ipv4 => ipv4::Packet::new_checked(inner).is_ok_and(|p| {
            p.protocol() == gre::IP_PROTOCOL
                && IpAddr::V4(p.src()) == config.local
                && IpAddr::V4(p.dst()) == config.remote
                && p.header_len() == ipv4::HEADER_LEN
        }),
        Inner::Ipv6 => ipv6::Packet::new_checked(inner).is_ok_and(|p| {
            p.next_header() == gre::IP_PROTOCOL
                && IpAddr::V6(p.src()) == config.local
                && IpAddr::V6(p.dst()) == config.remote
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
