//! The pipeline: one function per stage, each returning `Result<_, Drop>`.
//!
//! ```text
//! Teredo UDP -> decap (teredo::Server::classify: §5.3.1 rules, anti-spoofing)
//!            -> client table (relay peer trust, §5.4.2)
//!            -> policy (the IPsec step; `allow_without_ipsec` bypasses it)
//!            -> route: corpnet prefix -> TUN | own Teredo client -> UDP | else drop
//!            -> route: NAT64 prefix -> NAT64 (RFC 6146, in place) -> TUN as IPv4
//! TUN        -> route: own Teredo client -> relay (trusted: UDP; else queue + bubble)
//! TUN IPv4   -> NAT64 (to pool4) -> IPv6 -> the client route above
//! TUN IPv6 to the NAT64 prefix (corporate IPv6 hosts, IP-HTTPS clients) -> NAT64 -> TUN
//! ```
//!
//! Buffers are the caller's: a packet arrives in `buf[start..end]` with at least [`HEADROOM`]
//! bytes free before `start`, so outer headers are prepended in place. A verdict names the
//! byte range to send; nothing is copied on the forwarding path, and nothing is allocated
//! except when a packet must wait in a relay queue.

use crate::clients::{ClientTable, Delivery};
use crate::stats::Nat64Direction;
use crate::{Direction, Drop, Side, Stats, ratelimit::RateLimiter};
use gate64_nat64::state::{Event as BindingEvent, TableError};
use gate64_nat64::stateful::{self, Error as NatError};
use gate64_nat64::{Nat64, TranslateError};
use gate64_teredo::relay::{self, TimerEvent, TxDrop};
use gate64_teredo::{
    Address, Ingress, Peers, Reject, RelayConfig, Server, ServerConfig, TxDecision,
};
use gate64_wire::{icmpv6, ipv6, teredo as tw};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Instant;

/// Bytes a driver must leave free before a packet for headers to be prepended.
pub const HEADROOM: usize = 64;
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
    /// Skip the IPsec policy step. Only until the IPsec layer exists, and for labs.
    pub allow_without_ipsec: bool,
    /// Router Solicitations per second per source address.
    pub rs_per_sec: u32,
    /// Burst of Router Solicitations per source address.
    pub rs_burst: u32,
    /// The IP-HTTPS pool: each connection owns one /64 of it. `None` when IP-HTTPS is off.
    pub iphttps_prefix: Option<Prefix>,
    /// Stateful NAT64; `None` when `[nat64]` is off.
    pub nat64: Option<Arc<Nat64>>,
    /// Where BIB creations and deletions go (RFC 6888 compliance log); `None` when off.
    pub binding_log: Option<BindingLog>,
}

/// A sink for NAT64 binding events, called from the worker that expires the shard.
#[derive(Clone)]
pub struct BindingLog(pub Arc<dyn Fn(&BindingEvent) + Send + Sync>);

impl std::fmt::Debug for BindingLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BindingLog")
    }
}

/// ICMP errors gate64 itself sends per worker per second (RFC 4443 §2.4 (f) asks for a
/// limit), and the burst allowed.
const ICMP_ERRORS_PER_SEC: f64 = 200.0;
const ICMP_ERROR_BURST: f64 = 50.0;

/// State shared by all workers: the server and the sharded peer table.
#[derive(Debug)]
pub struct Shared {
    cfg: DataplaneConfig,
    server: Option<Server>,
    peers: Peers,
    iphttps: ClientTable,
}

impl Shared {
    /// Builds the shared state.
    pub fn new(cfg: DataplaneConfig) -> Arc<Self> {
        let server = cfg.teredo.clone().map(Server::new);
        let peers = Peers::new(cfg.relay.clone());
        Arc::new(Shared {
            cfg,
            server,
            peers,
            iphttps: ClientTable::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DataplaneConfig {
        &self.cfg
    }

    /// The Teredo server, when enabled.
    pub fn teredo(&self) -> Option<&Server> {
        self.server.as_ref()
    }

    /// The IP-HTTPS client table (connections register their /64 here).
    pub fn iphttps_clients(&self) -> &ClientTable {
        &self.iphttps
    }

    /// The policy step. Once IPsec exists, a packet enters the corporate network only out of
    /// a child SA whose selectors cover it; without one a client may reach gate64 itself with
    /// ICMPv6 echo only. `allow_without_ipsec` turns the check off for labs.
    fn policy(&self, to_self: bool, echo: bool) -> Result<(), Drop> {
        if self.cfg.allow_without_ipsec || (to_self && echo) {
            Ok(())
        } else {
            Err(Drop::NoSa)
        }
    }

    /// Routes a packet an IP-HTTPS client sent (its source already checked against the
    /// connection's /64 by `gate64-iphttps`): to the corporate network through the policy
    /// step, or into another IP-HTTPS client's queue. Teredo destinations are not reachable
    /// from IP-HTTPS clients yet (the relay's sockets belong to the UDP workers).
    pub fn route_from_iphttps(&self, stats: &Stats, packet: &[u8]) -> Result<IphttpsEgress, Drop> {
        let r = self.iphttps_egress(packet);
        if let Err(d) = r {
            stats.count_drops(d, 1);
        }
        r
    }

    fn iphttps_egress(&self, packet: &[u8]) -> Result<IphttpsEgress, Drop> {
        let pkt = ipv6::Packet::new_checked(packet).map_err(|e| reject_to_drop(e.into()))?;
        let dst = pkt.dst();
        if !ipv6::is_forwardable_unicast(&dst) {
            return Err(Drop::BadDestination);
        }
        if self.cfg.iphttps_prefix.is_some_and(|p| p.contains(&dst)) {
            return match self.iphttps.deliver(&dst, pkt.as_bytes()) {
                Delivery::Queued => Ok(IphttpsEgress::Delivered),
                Delivery::QueueFull => Err(Drop::IphttpsQueueFull),
                Delivery::NoClient => Err(Drop::NoRoute),
            };
        }
        let to_self = dst == self.cfg.corp_address;
        // NAT64 destinations go to the kernel like corporate ones; with `nat64.route_prefix`
        // it routes them back into the TUN, where a worker translates them.
        let nat64 = self
            .cfg
            .nat64
            .as_ref()
            .is_some_and(|n| n.prefix().contains(&dst));
        if !to_self && !nat64 && !self.cfg.corp_prefixes.iter().any(|p| p.contains(&dst)) {
            return Err(Drop::NoRoute);
        }
        let echo = icmpv6::type_code(&pkt) == Some((icmpv6::TYPE_ECHO_REQUEST, 0));
        self.policy(to_self, echo)?;
        Ok(IphttpsEgress::Tun {
            len: pkt.total_len(),
        })
    }

    /// Gauges for the exporter.
    pub fn gauges(&self, now: Instant) -> crate::Gauges {
        let (valid, total) = self.peers.count(now);
        let nat = self.cfg.nat64.as_ref().map(|n| (n.stats(), n.capacity()));
        crate::Gauges {
            teredo_clients: valid as u64,
            teredo_peers: total as u64,
            iphttps_clients: self.iphttps.len() as u64,
            nat64: nat.map(|(s, capacity)| crate::Nat64Gauges {
                bib_entries: s.bib_by_proto.map(|n| n as u64),
                sessions: s.sessions_by_proto.map(|n| n as u64),
                pool_capacity: capacity,
                pool_exhausted: s.pool_exhausted,
            }),
        }
    }
}

/// Where the bytes `buf[start..end]` go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write to the TUN device.
    Tun {
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
    },
    /// Send as a UDP datagram from the Teredo socket on `from`.
    Udp {
        /// Which server address to send from.
        from: Ipv4Addr,
        /// Destination.
        to: SocketAddrV4,
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
    },
    /// Handled here (a bubble, or queued while the peer is bubbled); nothing to send now.
    Consumed,
    /// Dropped and counted.
    Drop(Drop),
}

/// Where a packet from an IP-HTTPS client goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IphttpsEgress {
    /// Write its first `len` bytes to the TUN device.
    Tun {
        /// The IPv6 packet's length (trailing bytes excluded).
        len: usize,
    },
    /// Already queued for another IP-HTTPS client.
    Delivered,
}

/// A datagram produced off the fast path (bubbles, flushed relay queues).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Which server address to send from.
    pub from: Ipv4Addr,
    /// Destination.
    pub to: SocketAddrV4,
    /// The datagram.
    pub data: Vec<u8>,
}

/// One worker's pipeline. Owned by one thread; shares only [`Shared`].
#[derive(Debug)]
pub struct Worker {
    shared: Arc<Shared>,
    stats: Arc<Stats>,
    rs_limiter: RateLimiter,
    transmits: Vec<Transmit>,
    /// Packets for the TUN made off the fast path (ICMP errors gate64 sends).
    tun_writes: Vec<Vec<u8>>,
    /// NAT64's buffer for ICMP errors, whose quoted packet changes size.
    scratch: Vec<u8>,
    icmp_budget: TokenBucket,
}

/// A plain token bucket for the ICMP errors one worker sends.
#[derive(Debug)]
struct TokenBucket {
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    fn take(&mut self, now: Instant) -> bool {
        let elapsed = self
            .last
            .map_or(1.0, |l| now.saturating_duration_since(l).as_secs_f64());
        self.last = Some(now);
        self.tokens = (self.tokens + elapsed * ICMP_ERRORS_PER_SEC).min(ICMP_ERROR_BURST);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Worker {
    /// A worker over `shared`, counting into `stats`.
    pub fn new(shared: Arc<Shared>, stats: Arc<Stats>) -> Self {
        let rs_limiter = RateLimiter::new(shared.cfg.rs_per_sec, shared.cfg.rs_burst, 65_536);
        Worker {
            shared,
            stats,
            rs_limiter,
            transmits: Vec::new(),
            tun_writes: Vec::new(),
            scratch: vec![0; 2048],
            icmp_budget: TokenBucket {
                tokens: ICMP_ERROR_BURST,
                last: None,
            },
        }
    }

    /// This worker's counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// A Teredo datagram in `buf[start..end]` arrived on server address `local` from `remote`.
    pub fn handle_teredo(
        &mut self,
        now: Instant,
        local: Ipv4Addr,
        remote: SocketAddrV4,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Verdict {
        self.stats
            .packet(Side::Internet, Direction::Rx, end.saturating_sub(start));
        let v = self
            .teredo_ingress(now, local, remote, buf, start, end)
            .unwrap_or_else(Verdict::Drop);
        self.count(v)
    }

    /// An IPv6 packet in `buf[start..end]` was read from the TUN device.
    pub fn handle_tun(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Verdict {
        self.stats
            .packet(Side::Corpnet, Direction::Rx, end.saturating_sub(start));
        let v = self
            .tun_ingress(now, buf, start, end)
            .unwrap_or_else(Verdict::Drop);
        self.count(v)
    }

    /// Runs relay and NAT64 timers for shard part `part` of `of` (one part per worker).
    pub fn handle_timeout(&mut self, now: Instant, part: usize, of: usize) {
        if let Some(nat) = self.shared.cfg.nat64.as_ref() {
            nat.handle_timeout(now, part, of);
            if let Some(log) = self.shared.cfg.binding_log.as_ref() {
                nat.drain_events(part, of, |e| (log.0)(&e));
            }
        }
        let Some(server) = self.shared.server.as_ref() else {
            return;
        };
        let (stats, transmits) = (&self.stats, &mut self.transmits);
        self.shared
            .peers
            .handle_timeout(now, part, of, |e| match e {
                TimerEvent::Bubble { peer, mapping } => {
                    transmits.extend(bubble(server, &peer, mapping));
                }
                TimerEvent::GaveUp { dropped } => {
                    stats.count_drops(Drop::BubbleTimeout, dropped as u64);
                }
            });
    }

    /// Datagrams produced off the fast path; drain after every `handle_*` call.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop()
    }

    /// Packets for the TUN produced off the fast path (ICMP errors from gate64); drain after
    /// every `handle_*` call.
    pub fn poll_tun_write(&mut self) -> Option<Vec<u8>> {
        self.tun_writes.pop()
    }

    fn count(&self, v: Verdict) -> Verdict {
        if let Verdict::Drop(d) = v {
            self.stats.count_drops(d, 1);
        }
        v
    }

    fn teredo_ingress(
        &mut self,
        now: Instant,
        local: Ipv4Addr,
        remote: SocketAddrV4,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, Drop> {
        let shared = Arc::clone(&self.shared);
        let server = shared.server.as_ref().ok_or(Drop::NoRoute)?;
        let datagram = buf.get(start..end).ok_or(Drop::Truncated)?;
        match server.classify(remote, datagram).map_err(reject_to_drop)? {
            Ingress::RouterSolicitation(sol) => {
                if !self.rs_limiter.allow(now, *remote.ip()) {
                    return Err(Drop::RsRateLimited);
                }
                let out = buf.get_mut(start..).ok_or(Drop::Truncated)?;
                let (n, from) = server
                    .emit_advertisement(&sol, local, remote, out)
                    .map_err(reject_to_drop)?;
                self.stats.teredo_qualifications.inc();
                Ok(Verdict::Udp {
                    from,
                    to: remote,
                    start,
                    end: start + n,
                })
            }
            Ingress::FromClient {
                client,
                ipv6,
                offset,
            } => {
                let (dst, is_bubble, len) = (ipv6.dst(), ipv6.is_bubble(), ipv6.total_len());
                let echo_to_us = icmpv6::type_code(&ipv6) == Some((icmpv6::TYPE_ECHO_REQUEST, 0));
                self.client_seen(now, &client, remote)?;
                let pkt = start + offset;
                if is_bubble {
                    // Bubbles only open NAT state and establish trust (§5.2.6), except those
                    // addressed to another of our clients, which the server relays with every
                    // byte after the IPv6 header (RFC 6081 trailers), as Miredo does.
                    return match Address::decode(&dst) {
                        Some(d) if server.is_own_client(&d) => {
                            self.relay_to_client(server, remote, buf, pkt, end, &d)
                        }
                        _ => Ok(Verdict::Consumed),
                    };
                }
                self.route_from_client(now, server, remote, buf, pkt, pkt + len, &dst, echo_to_us)
            }
            Ingress::ToClient { dst, ipv6, offset } => {
                // §5.3.1 rule 6 exists for other relays' indirect bubbles. Relaying other
                // native-sourced data would let anyone inject packets that look as if they came
                // from the corporate network, so only bubbles pass.
                if !ipv6.is_bubble() {
                    return Err(Drop::SpoofedSource);
                }
                // Keep RFC 6081 trailers: forward through the end of the datagram.
                self.relay_to_client(server, remote, buf, start + offset, end, &dst)
            }
        }
    }

    /// §5.4.2: a verified packet from a client makes it a trusted peer; send what waited for it.
    fn client_seen(
        &mut self,
        now: Instant,
        client: &Address,
        remote: SocketAddrV4,
    ) -> Result<(), Drop> {
        match self
            .shared
            .peers
            .handle_receive(now, &client.encode(), remote)
        {
            Ok(None) => Ok(()),
            Ok(Some(queued)) => {
                let from = self
                    .shared
                    .server
                    .as_ref()
                    .map_or(Ipv4Addr::UNSPECIFIED, |s| s.config().primary);
                self.transmits
                    .extend(queued.into_iter().map(|data| Transmit {
                        from,
                        to: remote,
                        data,
                    }));
                Ok(())
            }
            Err(_) => Err(Drop::PeerTableFull),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn route_from_client(
        &mut self,
        now: Instant,
        server: &Server,
        remote: SocketAddrV4,
        buf: &mut [u8],
        start: usize,
        end: usize,
        dst: &Ipv6Addr,
        echo: bool,
    ) -> Result<Verdict, Drop> {
        if !ipv6::is_forwardable_unicast(dst) {
            return Err(Drop::BadDestination);
        }
        if let Some(d) = Address::decode(dst) {
            return if server.is_own_client(&d) {
                self.relay_to_client(server, remote, buf, start, end, &d)
            } else {
                Err(Drop::NoRoute)
            };
        }
        let shared = Arc::clone(&self.shared);
        let cfg = &shared.cfg;
        if let Some(nat) = cfg.nat64.as_ref()
            && nat.prefix().contains(dst)
        {
            // Translated traffic enters the corporate network: the same policy step applies.
            shared.policy(false, false)?;
            return self.nat64_from_v6(nat, now, buf, start, end);
        }
        let to_self = *dst == cfg.corp_address;
        if !to_self && !cfg.corp_prefixes.iter().any(|p| p.contains(dst)) {
            return Err(Drop::NoRoute);
        }
        shared.policy(to_self, echo)?;
        Ok(Verdict::Tun { start, end })
    }

    /// NAT64 of an IPv6 packet to Pref64: the IPv4 result goes to the TUN; a hairpinned one
    /// (RFC 6146 §3.8) to the client that owns the destination.
    fn nat64_from_v6(
        &mut self,
        nat: &Nat64,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, Drop> {
        match nat.v6_to_v4(now, buf, start, end, &mut self.scratch) {
            Ok(t) => {
                self.stats.nat64_translation(Nat64Direction::V6ToV4);
                if t.hairpin {
                    self.stats.nat64_translation(Nat64Direction::V4ToV6);
                    return self.deliver_to_client(now, buf, t.start, t.end, Elsewhere::Drop);
                }
                Ok(Verdict::Tun {
                    start: t.start,
                    end: t.end,
                })
            }
            Err(e) => {
                let offending = buf.get(start..end).unwrap_or_default();
                self.icmpv6_error_for(nat, now, &e, offending);
                Err(nat_drop(&e))
            }
        }
    }

    /// Sends the ICMPv6 error RFC 7915 / RFC 6146 ask for when `e` stopped `offending`, through
    /// the TUN (the kernel routes it to the client like any other packet).
    fn icmpv6_error_for(&mut self, nat: &Nat64, now: Instant, e: &NatError, offending: &[u8]) {
        let (kind, param) = match e {
            NatError::Translate(TranslateError::TimeExceeded) => ((3, 0), 0),
            NatError::Translate(TranslateError::PacketTooBig { mtu }) => ((2, 0), *mtu),
            NatError::Translate(TranslateError::ParameterProblem { pointer }) => ((4, 0), *pointer),
            NatError::Translate(TranslateError::HeaderAfterFragment) => ((1, 1), 0),
            NatError::Table(TableError::PoolExhausted) => ((1, 3), 0),
            _ => return,
        };
        if is_icmpv6_error(offending) || !self.icmp_budget.take(now) {
            return;
        }
        let Ok(p) = ipv6::Packet::new_checked(offending) else {
            return;
        };
        let src = nat
            .pool()
            .first()
            .and_then(|a| nat.prefix().embed(*a))
            .unwrap_or(self.shared.cfg.corp_address);
        let mut out = vec![0u8; 1280];
        let n = stateful::icmpv6_error(&mut out, src, p.src(), kind, param, offending);
        if n > 0 {
            out.truncate(n);
            self.tun_writes.push(out);
        }
    }

    /// The ICMPv4 error for an IPv4 packet NAT64 could not take, into the TUN.
    fn icmpv4_error_for(&mut self, nat: &Nat64, now: Instant, e: &NatError, offending: &[u8]) {
        let (kind, rest) = match e {
            NatError::Translate(TranslateError::TimeExceeded) => ((11, 0), 0),
            NatError::Translate(TranslateError::FragmentationNeeded { mtu }) => {
                ((3, 4), u32::from(*mtu))
            }
            NatError::Translate(TranslateError::SourceRoute) => ((3, 5), 0),
            NatError::Translate(TranslateError::UdpZeroChecksum) => ((3, 13), 0),
            NatError::Table(TableError::NoBinding) => ((3, 3), 0),
            _ => return,
        };
        if is_icmpv4_error(offending) || !self.icmp_budget.take(now) {
            return;
        }
        let (Some(&from), Some(src)) = (nat.pool().first(), offending.get(12..16)) else {
            return;
        };
        let to = Ipv4Addr::new(src[0], src[1], src[2], src[3]);
        if to.is_broadcast() || to.is_multicast() || to.is_unspecified() {
            return;
        }
        let mut out = vec![0u8; 576];
        let n = stateful::icmpv4_error(&mut out, from, to, kind, rest, offending);
        if n > 0 {
            out.truncate(n);
            self.tun_writes.push(out);
        }
    }

    /// Server forwarding to one of our clients (§5.3.1): with an origin indication naming
    /// where the packet came from, prepended in the headroom.
    fn relay_to_client(
        &self,
        server: &Server,
        remote: SocketAddrV4,
        buf: &mut [u8],
        start: usize,
        end: usize,
        dst: &Address,
    ) -> Result<Verdict, Drop> {
        if !server.is_acceptable_v4(*dst.mapped.ip()) {
            return Err(Drop::NonGlobalMapping);
        }
        let at = start.checked_sub(tw::ORIGIN_LEN).ok_or(Drop::Truncated)?;
        let head = buf.get_mut(at..start).ok_or(Drop::Truncated)?;
        tw::Origin(remote).emit(head).map_err(|_| Drop::Truncated)?;
        Ok(Verdict::Udp {
            from: server.config().primary,
            to: dst.mapped,
            start: at,
            end,
        })
    }

    fn tun_ingress(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, Drop> {
        let shared = Arc::clone(&self.shared);
        let bytes = buf.get(start..end).ok_or(Drop::Truncated)?;
        if bytes.first().is_some_and(|b| b >> 4 == 4) {
            let nat = shared.cfg.nat64.as_ref().ok_or(Drop::NoRoute)?;
            return match nat.v4_to_v6(now, buf, start, end, &mut self.scratch) {
                Ok(t) => {
                    self.stats.nat64_translation(Nat64Direction::V4ToV6);
                    // A mapping of a corporate IPv6 host (`route_prefix`) is not a client's:
                    // the IPv6 packet goes back to the kernel, which routes it there.
                    self.deliver_to_client(now, buf, t.start, t.end, Elsewhere::Tun)
                }
                Err(e) => {
                    let offending = buf.get(start..end).unwrap_or_default();
                    self.icmpv4_error_for(nat, now, &e, offending);
                    Err(nat_drop(&e))
                }
            };
        }
        let pkt = ipv6::Packet::new_checked(bytes).map_err(|e| reject_to_drop(e.into()))?;
        if let Some(nat) = shared.cfg.nat64.as_ref()
            && nat.prefix().contains(&pkt.dst())
        {
            // A corporate IPv6 host, or an IP-HTTPS client through the kernel: both have
            // passed whatever policy applies to them before the kernel routed them here.
            return self.nat64_from_v6(nat, now, buf, start, end);
        }
        self.deliver_to_client(now, buf, start, end, Elsewhere::Drop)
    }

    /// Routes the IPv6 packet `buf[start..end]` to the client that owns its destination: an
    /// IP-HTTPS connection's queue or a Teredo client through the relay.
    fn deliver_to_client(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
        elsewhere: Elsewhere,
    ) -> Result<Verdict, Drop> {
        let shared = Arc::clone(&self.shared);
        let bytes = buf.get(start..end).ok_or(Drop::Truncated)?;
        let pkt = ipv6::Packet::new_checked(bytes).map_err(|e| reject_to_drop(e.into()))?;
        let len = pkt.total_len();
        let dst = pkt.dst();
        if shared.cfg.iphttps_prefix.is_some_and(|p| p.contains(&dst)) {
            return match shared.iphttps.deliver(&dst, pkt.as_bytes()) {
                Delivery::Queued => {
                    self.stats.packet(Side::Internet, Direction::Tx, len);
                    Ok(Verdict::Consumed)
                }
                Delivery::QueueFull => Err(Drop::IphttpsQueueFull),
                Delivery::NoClient => Err(Drop::NoRoute),
            };
        }
        let own = shared.server.as_ref().and_then(|s| {
            Address::decode(&dst)
                .filter(|d| s.is_own_client(d))
                .map(|d| (s, d))
        });
        let Some((server, d)) = own else {
            return match elsewhere {
                Elsewhere::Drop => Err(Drop::NoRoute),
                Elsewhere::Tun => Ok(Verdict::Tun { start, end }),
            };
        };
        if !server.is_acceptable_v4(*d.mapped.ip()) {
            return Err(Drop::NonGlobalMapping);
        }
        let from = server.config().primary;
        match shared.peers.handle_transmit(now, &d, pkt.as_bytes()) {
            TxDecision::Send(to) => Ok(Verdict::Udp {
                from,
                to,
                start,
                end: start + len,
            }),
            TxDecision::Queued { bubble, mapping } => {
                if bubble {
                    self.transmits.extend(self::bubble(server, &dst, mapping));
                }
                Ok(Verdict::Consumed)
            }
            TxDecision::Drop(TxDrop::QueueFull) => Err(Drop::RelayQueueFull),
            TxDecision::Drop(TxDrop::TableFull) => Err(Drop::PeerTableFull),
        }
    }
}

/// What [`Worker::deliver_to_client`] does with a destination that is no client of ours.
#[derive(Debug, Clone, Copy)]
enum Elsewhere {
    /// Drop it (`no_route`): the packet came from the kernel, which routed it to us.
    Drop,
    /// Hand it to the kernel: NAT64 output for a corporate IPv6 host.
    Tun,
}

/// A bubble from the server's link-local address to the Teredo peer `peer`, sent to its
/// mapping from the primary address with an origin indication naming primary:port, as the
/// client's server relays it (RFC 4380 §5.2.9, §5.4.1). Off the fast path: it allocates.
fn bubble(server: &Server, peer: &Ipv6Addr, mapping: SocketAddrV4) -> Option<Transmit> {
    let from = server.config().primary;
    let origin = SocketAddrV4::new(from, server.config().port);
    let mut data = vec![0u8; tw::ORIGIN_LEN + ipv6::HEADER_LEN];
    let n = relay::emit_bubble(&mut data, &server.link_local(), peer, Some(origin)).ok()?;
    data.truncate(n);
    Some(Transmit {
        from,
        to: mapping,
        data,
    })
}

fn nat_drop(e: &NatError) -> Drop {
    match e {
        NatError::Translate(t) => match t {
            TranslateError::Truncated => Drop::Truncated,
            TranslateError::Malformed | TranslateError::BadHeaderChecksum => Drop::Malformed,
            TranslateError::TimeExceeded => Drop::TtlExceeded,
            TranslateError::PacketTooBig { .. } | TranslateError::FragmentationNeeded { .. } => {
                Drop::PacketTooBig
            }
            _ => Drop::Nat64Untranslatable,
        },
        NatError::Table(t) => match t {
            TableError::NoBinding => Drop::Nat64NoBinding,
            TableError::NoSession => Drop::Nat64NoSession,
            TableError::PoolExhausted => Drop::Nat64PoolExhausted,
            TableError::SessionLimit => Drop::Nat64SessionLimit,
            _ => Drop::Nat64Untranslatable,
        },
        NatError::NotOurs => Drop::NoRoute,
        NatError::BadAddress => Drop::Nat64BadAddress,
        NatError::Fragment => Drop::Nat64Fragment,
        _ => Drop::Nat64Untranslatable,
    }
}

/// True for an ICMPv6 error message (never answered with another error, RFC 4443 §2.4 (e)).
fn is_icmpv6_error(p: &[u8]) -> bool {
    p.get(6) == Some(&58) && p.get(40).is_some_and(|&t| t < 128)
}

/// True for an ICMPv4 error message (RFC 1812 §4.3.2.7: never answered with an error).
fn is_icmpv4_error(p: &[u8]) -> bool {
    let ihl = usize::from(p.first().map_or(5, |b| b & 0x0f)) * 4;
    p.get(9) == Some(&1)
        && p.get(ihl)
            .is_some_and(|&t| matches!(t, 3 | 4 | 5 | 11 | 12))
}

fn reject_to_drop(r: Reject) -> Drop {
    match r {
        Reject::Truncated => Drop::Truncated,
        Reject::Malformed => Drop::Malformed,
        Reject::Unsupported => Drop::Unsupported,
        Reject::NonGlobalSource => Drop::NonGlobalSource,
        Reject::LoopGuard => Drop::LoopGuard,
        Reject::SpoofedSource => Drop::SpoofedSource,
        Reject::ForeignClient => Drop::ForeignClient,
        Reject::UnhandledIcmpv6 => Drop::UnhandledIcmpv6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_wire::checksum;
    use proptest::prelude::*;
    use std::time::Duration;

    const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const SECONDARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3546);
    const OTHER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 20), 40000);
    const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 5);
    const CORP_ADDRESS: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
    /// Slack after the packet, for the RA written over a 61-byte RS.
    const TAILROOM: usize = 256;

    fn config(allow_without_ipsec: bool) -> DataplaneConfig {
        DataplaneConfig {
            teredo: Some(ServerConfig {
                primary: PRIMARY,
                secondary: SECONDARY,
                port: 3544,
                allow_loopback: false,
                mtu_option: Some(1280),
            }),
            relay: RelayConfig::default(),
            corp_prefixes: vec![Prefix::new("2001:db8:100::".parse().unwrap(), 48)],
            corp_address: CORP_ADDRESS,
            allow_without_ipsec,
            rs_per_sec: 1,
            rs_burst: 3,
            iphttps_prefix: None,
            nat64: None,
            binding_log: None,
        }
    }

    fn worker(allow_without_ipsec: bool) -> Worker {
        Worker::new(
            Shared::new(config(allow_without_ipsec)),
            Arc::new(Stats::default()),
        )
    }

    fn teredo(mapped: SocketAddrV4) -> Address {
        Address {
            server: PRIMARY,
            flags: 0x2c5a,
            mapped,
        }
    }

    /// `bytes` at `HEADROOM` in a buffer with tailroom: `(buf, start, end)`.
    fn framed(bytes: &[u8]) -> (Vec<u8>, usize, usize) {
        let mut buf = vec![0u8; HEADROOM + bytes.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
        (buf, HEADROOM, HEADROOM + bytes.len())
    }

    /// The 61-byte RS Miredo sends: auth header (ID-len = AU-len = 0) with a nonce, then the
    /// RS from `src` to ff02::2 (brief §1.4).
    fn miredo_rs(src: &str) -> Vec<u8> {
        let mut b = vec![0u8; 61];
        let auth = tw::Auth {
            client_id: &[],
            auth_value: &[],
            nonce: *b"nonce-01",
            confirmation: 0,
        };
        auth.emit(&mut b).unwrap();
        icmpv6::emit_router_solicitation(&mut b[13..], &src.parse().unwrap()).unwrap();
        b
    }

    fn echo(src: Ipv6Addr, dst: Ipv6Addr, data_len: usize) -> Vec<u8> {
        let mut b = vec![0u8; ipv6::HEADER_LEN + 8 + data_len];
        let data = vec![0xa5; data_len];
        icmpv6::emit_echo(&mut b, true, &src, &dst, 7, 1, &data).unwrap();
        b
    }

    /// A UDP-over-IPv6 packet (not ICMPv6) of `total` bytes; the checksum is irrelevant here.
    fn udp(src: Ipv6Addr, dst: Ipv6Addr, total: usize) -> Vec<u8> {
        let mut b = vec![0x5a; total];
        let plen = u16::try_from(total - ipv6::HEADER_LEN).unwrap();
        ipv6::emit_header(&mut b, plen, ipv6::NH_UDP, 64, &src, &dst).unwrap();
        b
    }

    fn bubble(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut b = vec![0u8; ipv6::HEADER_LEN];
        ipv6::emit_header(&mut b, 0, ipv6::NH_NONE, 255, &src, &dst).unwrap();
        b
    }

    fn total_drops(s: &Stats) -> u64 {
        Drop::ALL.iter().map(|d| s.drops(*d)).sum()
    }

    fn from_teredo(w: &mut Worker, now: Instant, remote: SocketAddrV4, bytes: &[u8]) -> Verdict {
        let (mut buf, start, end) = framed(bytes);
        w.handle_teredo(now, PRIMARY, remote, &mut buf, start, end)
    }

    fn from_tun(w: &mut Worker, now: Instant, bytes: &[u8]) -> Verdict {
        let (mut buf, start, end) = framed(bytes);
        w.handle_tun(now, &mut buf, start, end)
    }

    fn server_link_local() -> Ipv6Addr {
        gate64_teredo::addr::server_link_local(PRIMARY, 3544)
    }

    // RFC 4380 §5.3.2, brief §1.9: Miredo's RS gets the 117-byte RA from the primary.
    #[test]
    fn rfc4380_5_3_2_rs_gets_117_byte_ra_from_primary() {
        let mut w = worker(false);
        let rs = miredo_rs("fe80::ffff:ffff:ffff");
        let (mut buf, start, end) = framed(&rs);
        let v = w.handle_teredo(Instant::now(), PRIMARY, CLIENT, &mut buf, start, end);
        assert_eq!(
            v,
            Verdict::Udp {
                from: PRIMARY,
                to: CLIENT,
                start: HEADROOM,
                end: HEADROOM + 117
            }
        );
        let p = tw::Packet::parse(&buf[HEADROOM..HEADROOM + 117]).unwrap();
        assert_eq!(p.auth.unwrap().nonce, *b"nonce-01");
        assert_eq!(p.auth.unwrap().confirmation, 0);
        assert_eq!(p.origin.unwrap().0, CLIENT);
        assert_eq!(p.ipv6.src(), server_link_local());
        assert_eq!(
            p.ipv6.dst(),
            "fe80::ffff:ffff:ffff".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(p.ipv6.hop_limit(), 255);
        assert!(icmpv6::checksum_ok(&p.ipv6));
        let ra = icmpv6::RouterAdvert::parse(&p.ipv6).unwrap();
        assert_eq!(ra.prefix, "2001:0:c000:201::".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ra.prefix_len, 64);
        assert_eq!(ra.mtu, Some(1280));

        let s = w.stats();
        assert_eq!(s.teredo_qualifications.get(), 1);
        assert_eq!(s.packets(Side::Internet, Direction::Rx), 1);
        assert_eq!(s.bytes(Side::Internet, Direction::Rx), 61);
        assert_eq!(total_drops(s), 0);
    }

    #[test]
    fn rs_flood_from_one_source_is_rate_limited_after_burst() {
        let mut w = worker(false);
        let t0 = Instant::now();
        let rs = miredo_rs("fe80::ffff:ffff:ffff");
        let verdicts: Vec<_> = (0..10)
            .map(|_| from_teredo(&mut w, t0, CLIENT, &rs))
            .collect();
        assert!(
            verdicts[..3]
                .iter()
                .all(|v| matches!(v, Verdict::Udp { .. }))
        );
        assert!(
            verdicts[3..]
                .iter()
                .all(|v| *v == Verdict::Drop(Drop::RsRateLimited))
        );
        let s = w.stats();
        assert_eq!(s.teredo_qualifications.get(), 3);
        assert_eq!(s.drops(Drop::RsRateLimited), 7);
        assert_eq!(total_drops(s), 7);
        assert_eq!(s.packets(Side::Internet, Direction::Rx), 10);
        assert_eq!(s.bytes(Side::Internet, Direction::Rx), 610);
        // Another source is unaffected, and the flooding one gets a token back after 1 s.
        assert!(matches!(
            from_teredo(&mut w, t0, OTHER, &rs),
            Verdict::Udp { to: OTHER, .. }
        ));
        assert!(matches!(
            from_teredo(&mut w, t0 + Duration::from_secs(1), CLIENT, &rs),
            Verdict::Udp { to: CLIENT, .. }
        ));
    }

    #[test]
    fn client_to_corp_goes_to_tun_in_place_without_ipsec() {
        let mut w = worker(true);
        let pkt = udp(teredo(CLIENT).encode(), CORP_HOST, 200);
        // Auth header and origin indication before the IPv6 packet are skipped, not copied.
        let mut dgram = vec![0u8, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0];
        dgram.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        dgram.extend_from_slice(&pkt);
        dgram.extend_from_slice(b"trailer");
        let (mut buf, start, end) = framed(&dgram);
        let v = w.handle_teredo(Instant::now(), PRIMARY, CLIENT, &mut buf, start, end);
        let at = HEADROOM + 21;
        assert_eq!(
            v,
            Verdict::Tun {
                start: at,
                end: at + 200
            }
        );
        assert_eq!(&buf[at..at + 200], &pkt[..]);
        let s = w.stats();
        assert_eq!(s.packets(Side::Internet, Direction::Rx), 1);
        assert_eq!(s.bytes(Side::Internet, Direction::Rx), dgram.len() as u64);
        assert_eq!(total_drops(s), 0);
        // gate64's own corporate address is routed too.
        let v = from_teredo(
            &mut w,
            Instant::now(),
            CLIENT,
            &udp(teredo(CLIENT).encode(), CORP_ADDRESS, 60),
        );
        assert!(matches!(v, Verdict::Tun { .. }));
    }

    const POOL4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
    const V4HOST: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 5);

    fn pref64() -> gate64_nat64::Prefix {
        gate64_nat64::Prefix::new("2001:db8:64::".parse().unwrap(), 96).unwrap()
    }

    fn nat_worker(allow_without_ipsec: bool) -> Worker {
        let mut cfg = config(allow_without_ipsec);
        let mut table = gate64_nat64::state::Config::new(vec![POOL4]);
        table.shards = 4;
        let nat = Nat64::new(gate64_nat64::Settings {
            prefix: pref64(),
            table,
            translate: gate64_nat64::translate::Config::default(),
        })
        .unwrap();
        cfg.nat64 = Some(Arc::new(nat));
        Worker::new(Shared::new(cfg), Arc::new(Stats::default()))
    }

    /// An IPv4 UDP packet with a valid header checksum and no UDP checksum.
    fn udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, data: usize) -> Vec<u8> {
        let total = 28 + data;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&src.octets());
        p[16..20].copy_from_slice(&dst.octets());
        let c = checksum::finish(checksum::sum(&p[..20], 0));
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p[24..26].copy_from_slice(&((8 + data) as u16).to_be_bytes());
        p
    }

    #[test]
    fn rfc6146_client_reaches_ipv4_host_through_nat64_and_back_without_ipsec() {
        let mut w = nat_worker(true);
        let now = Instant::now();
        let client = teredo(CLIENT).encode();
        let pkt = udp(client, pref64().embed(V4HOST).unwrap(), 100);
        let (mut buf, start, end) = framed(&pkt);
        let v = w.handle_teredo(now, PRIMARY, CLIENT, &mut buf, start, end);
        // In place: the IPv4 header sits where the IPv6 header ended.
        let at = HEADROOM + 20;
        assert_eq!(
            v,
            Verdict::Tun {
                start: at,
                end: at + 80
            }
        );
        let v4 = &buf[at..at + 80];
        assert_eq!(v4[0], 0x45);
        assert_eq!(&v4[12..16], &POOL4.octets());
        assert_eq!(&v4[16..20], &V4HOST.octets());
        let t = u16::from_be_bytes([v4[20], v4[21]]);
        // The host answers; the reply goes to the client's Teredo mapping as IPv6.
        let reply = udp4(V4HOST, POOL4, 0x5a5a, t, 12);
        let (mut buf, start, end) = framed(&reply);
        let v = w.handle_tun(now, &mut buf, start, end);
        let Verdict::Udp { to, start, end, .. } = v else {
            panic!("expected a datagram to the client, got {v:?}");
        };
        assert_eq!(to, CLIENT);
        let back = ipv6::Packet::new_checked(&buf[start..end]).unwrap();
        assert_eq!(back.dst(), client);
        assert_eq!(back.src(), pref64().embed(V4HOST).unwrap());
        assert_eq!(
            u16::from_be_bytes([buf[start + 42], buf[start + 43]]),
            0x5a5a
        );
        let s = w.stats();
        assert_eq!(s.nat64_translations(Nat64Direction::V6ToV4), 1);
        assert_eq!(s.nat64_translations(Nat64Direction::V4ToV6), 1);
        assert_eq!(total_drops(s), 0);
    }

    #[test]
    fn corporate_ipv6_host_uses_nat64_through_the_kernel_both_ways() {
        let mut w = nat_worker(false);
        let now = Instant::now();
        // From the TUN (route_prefix): no client, no policy step, IPv4 back to the kernel.
        let pkt = udp(CORP_HOST, pref64().embed(V4HOST).unwrap(), 100);
        let (mut buf, start, end) = framed(&pkt);
        let v = w.handle_tun(now, &mut buf, start, end);
        let at = HEADROOM + 20;
        assert_eq!(
            v,
            Verdict::Tun {
                start: at,
                end: at + 80
            }
        );
        let t = u16::from_be_bytes([buf[at + 20], buf[at + 21]]);
        // The reply's mapping is the corporate host's: the IPv6 packet goes to the kernel too.
        let (mut buf, start, end) = framed(&udp4(V4HOST, POOL4, 0x5a5a, t, 12));
        let Verdict::Tun { start, end } = w.handle_tun(now, &mut buf, start, end) else {
            panic!("expected the translated reply back into the TUN");
        };
        let back = ipv6::Packet::new_checked(&buf[start..end]).unwrap();
        assert_eq!(back.dst(), CORP_HOST);
        assert_eq!(total_drops(w.stats()), 0);
    }

    #[test]
    fn nat64_traffic_passes_the_policy_step_like_corporate_traffic() {
        let mut w = nat_worker(false);
        let pkt = udp(
            teredo(CLIENT).encode(),
            pref64().embed(V4HOST).unwrap(),
            100,
        );
        let v = from_teredo(&mut w, Instant::now(), CLIENT, &pkt);
        assert_eq!(v, Verdict::Drop(Drop::NoSa));
        assert_eq!(w.stats().nat64_translations(Nat64Direction::V6ToV4), 0);
    }

    #[test]
    fn rfc6146_ipv4_without_binding_gets_port_unreachable() {
        let mut w = nat_worker(true);
        let v = from_tun(&mut w, Instant::now(), &udp4(V4HOST, POOL4, 53, 5555, 4));
        assert_eq!(v, Verdict::Drop(Drop::Nat64NoBinding));
        let icmp = w.poll_tun_write().expect("an ICMPv4 error into the TUN");
        assert_eq!(&icmp[12..16], &POOL4.octets());
        assert_eq!(&icmp[16..20], &V4HOST.octets());
        assert_eq!((icmp[20], icmp[21]), (3, 3));
        // Never an error about an error.
        let err_about = {
            let mut e = vec![0u8; 28 + 8];
            e[0] = 0x45;
            e[2..4].copy_from_slice(&36u16.to_be_bytes());
            e[8] = 64;
            e[9] = 1;
            e[12..16].copy_from_slice(&V4HOST.octets());
            e[16..20].copy_from_slice(&POOL4.octets());
            let c = checksum::finish(checksum::sum(&e[..20], 0));
            e[10..12].copy_from_slice(&c.to_be_bytes());
            e[20] = 3;
            e
        };
        let _ = from_tun(&mut w, Instant::now(), &err_about);
        assert!(w.poll_tun_write().is_none());
    }

    #[test]
    fn nat64_bad_embedded_address_and_ipv4_without_nat64_are_dropped() {
        let mut w = nat_worker(true);
        let dst = pref64().embed(Ipv4Addr::new(127, 0, 0, 1)).unwrap();
        let v = from_teredo(
            &mut w,
            Instant::now(),
            CLIENT,
            &udp(teredo(CLIENT).encode(), dst, 60),
        );
        assert_eq!(v, Verdict::Drop(Drop::Nat64BadAddress));
        let mut plain = worker(true);
        let v = from_tun(&mut plain, Instant::now(), &udp4(V4HOST, POOL4, 1, 2, 0));
        assert_eq!(v, Verdict::Drop(Drop::NoRoute));
    }

    // RFC 4380 §5.4.2: the source must encode the UDP source it came from.
    #[test]
    fn rfc4380_5_4_2_spoofed_source_is_dropped() {
        let mut w = worker(true);
        let pkt = udp(teredo(CLIENT).encode(), CORP_HOST, 100);
        let wrong_port = SocketAddrV4::new(*CLIENT.ip(), 9999);
        assert_eq!(
            from_teredo(&mut w, Instant::now(), wrong_port, &pkt),
            Verdict::Drop(Drop::SpoofedSource)
        );
        assert_eq!(
            from_teredo(&mut w, Instant::now(), OTHER, &pkt),
            Verdict::Drop(Drop::SpoofedSource)
        );
        // A native source sending data (not a bubble) to our client: spoofing the corpnet.
        let native = udp(CORP_HOST, teredo(OTHER).encode(), 100);
        assert_eq!(
            from_teredo(&mut w, Instant::now(), CLIENT, &native),
            Verdict::Drop(Drop::SpoofedSource)
        );
        let s = w.stats();
        assert_eq!(s.drops(Drop::SpoofedSource), 3);
        assert_eq!(total_drops(s), 3);
        assert_eq!(s.packets(Side::Internet, Direction::Rx), 3);
    }

    // The policy step: without IPsec only ICMPv6 echo to gate64 itself passes.
    #[test]
    fn policy_without_sa_drops_corp_traffic_but_passes_echo_to_gate64() {
        let mut w = worker(false);
        let me = teredo(CLIENT).encode();
        let now = Instant::now();
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &udp(me, CORP_HOST, 100)),
            Verdict::Drop(Drop::NoSa)
        );
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &echo(me, CORP_HOST, 8)),
            Verdict::Drop(Drop::NoSa),
            "echo to another corp host needs an SA"
        );
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &udp(me, CORP_ADDRESS, 100)),
            Verdict::Drop(Drop::NoSa),
            "non-echo to gate64 needs an SA"
        );
        let ping = echo(me, CORP_ADDRESS, 8);
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &ping),
            Verdict::Tun {
                start: HEADROOM,
                end: HEADROOM + ping.len()
            }
        );
        let s = w.stats();
        assert_eq!(s.drops(Drop::NoSa), 3);
        assert_eq!(total_drops(s), 3);
        assert_eq!(s.packets(Side::Internet, Direction::Rx), 4);
    }

    #[test]
    fn corp_traffic_passes_policy_without_ipsec() {
        let mut w = worker(true);
        let me = teredo(CLIENT).encode();
        let pkt = echo(me, CORP_HOST, 8);
        assert_eq!(
            from_teredo(&mut w, Instant::now(), CLIENT, &pkt),
            Verdict::Tun {
                start: HEADROOM,
                end: HEADROOM + pkt.len()
            }
        );
        assert_eq!(w.stats().drops(Drop::NoSa), 0);
    }

    #[test]
    fn destination_outside_prefixes_is_no_route_without_ipsec() {
        let mut w = worker(true);
        let me = teredo(CLIENT).encode();
        let now = Instant::now();
        for dst in ["2001:db8:101::1", "2001:db8:99::1", "2a00::1"] {
            assert_eq!(
                from_teredo(&mut w, now, CLIENT, &udp(me, dst.parse().unwrap(), 80)),
                Verdict::Drop(Drop::NoRoute),
                "{dst}"
            );
        }
        // A client of another Teredo server.
        let foreign = Address {
            server: Ipv4Addr::new(203, 0, 113, 9),
            ..teredo(OTHER)
        };
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &udp(me, foreign.encode(), 80)),
            Verdict::Drop(Drop::NoRoute)
        );
        assert_eq!(w.stats().drops(Drop::NoRoute), 4);
        assert_eq!(total_drops(w.stats()), 4);
    }

    // RFC 4380 §5.3.1: link-local, multicast, loopback and unspecified: MUST NOT forward.
    #[test]
    fn rfc4380_5_3_1_non_global_destination_is_bad_destination_without_ipsec() {
        let mut w = worker(true);
        let me = teredo(CLIENT).encode();
        let now = Instant::now();
        let dsts = [
            "fe80::1",
            "ff02::1",
            "ff05::2",
            "ff0e::1",
            "::1",
            "::",
            "::ffff:1.2.3.4",
        ];
        for dst in dsts {
            assert_eq!(
                from_teredo(&mut w, now, CLIENT, &udp(me, dst.parse().unwrap(), 80)),
                Verdict::Drop(Drop::BadDestination),
                "{dst}"
            );
        }
        assert_eq!(w.stats().drops(Drop::BadDestination), dsts.len() as u64);
        assert_eq!(total_drops(w.stats()), dsts.len() as u64);
    }

    // RFC 4380 §5.3.1: the server forwards to its own client with an origin indication naming
    // the sender, prepended in the headroom.
    #[test]
    fn rfc4380_5_3_1_client_to_own_client_gets_origin_indication() {
        let mut w = worker(false);
        let pkt = echo(teredo(CLIENT).encode(), teredo(OTHER).encode(), 16);
        let (mut buf, start, end) = framed(&pkt);
        let v = w.handle_teredo(Instant::now(), PRIMARY, CLIENT, &mut buf, start, end);
        assert_eq!(
            v,
            Verdict::Udp {
                from: PRIMARY,
                to: OTHER,
                start: HEADROOM - tw::ORIGIN_LEN,
                end: HEADROOM + pkt.len()
            }
        );
        let mut origin = [0u8; 8];
        tw::Origin(CLIENT).emit(&mut origin).unwrap();
        assert_eq!(&buf[HEADROOM - 8..HEADROOM], &origin);
        assert_eq!(&buf[HEADROOM..HEADROOM + pkt.len()], &pkt[..]);
        let p = tw::Packet::parse(&buf[HEADROOM - 8..HEADROOM + pkt.len()]).unwrap();
        assert_eq!(p.origin.unwrap().0, CLIENT);
        assert_eq!(p.ipv6.src(), teredo(CLIENT).encode());
        assert_eq!(total_drops(w.stats()), 0);

        // An indirect bubble to the other client is relayed the same way (§5.2.9).
        let b = bubble(teredo(CLIENT).encode(), teredo(OTHER).encode());
        assert!(matches!(
            from_teredo(&mut w, Instant::now(), CLIENT, &b),
            Verdict::Udp { to: OTHER, .. }
        ));
        // A client whose embedded mapping is not global is never sent to.
        let private = teredo("10.1.2.3:5000".parse().unwrap()).encode();
        assert_eq!(
            from_teredo(
                &mut w,
                Instant::now(),
                CLIENT,
                &echo(teredo(CLIENT).encode(), private, 0)
            ),
            Verdict::Drop(Drop::NonGlobalMapping)
        );
    }

    // Brief §1.3 and §1.8: RFC 6081 puts trailers after a bubble's IPv6 header; a relayed
    // bubble keeps every byte after it, as Miredo forwards the whole received length.
    #[test]
    fn rfc6081_relayed_bubbles_keep_their_trailers() {
        let mut w = worker(false);
        let now = Instant::now();
        let trailer = [0x01, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];
        // Indirect bubble from one client to another.
        let mut b = bubble(teredo(CLIENT).encode(), teredo(OTHER).encode());
        b.extend_from_slice(&trailer);
        let (mut buf, start, end) = framed(&b);
        let v = w.handle_teredo(now, PRIMARY, CLIENT, &mut buf, start, end);
        assert_eq!(
            v,
            Verdict::Udp {
                from: PRIMARY,
                to: OTHER,
                start: start - tw::ORIGIN_LEN,
                end
            }
        );
        assert_eq!(&buf[end - trailer.len()..end], &trailer);
        // Another relay's bubble (native source) to our client (§5.3.1 rule 6).
        let mut b = bubble("2001:db8:7::1".parse().unwrap(), teredo(OTHER).encode());
        b.extend_from_slice(&trailer);
        let (mut buf, start, end) = framed(&b);
        let remote: SocketAddrV4 = "203.0.113.99:3545".parse().unwrap();
        let v = w.handle_teredo(now, PRIMARY, remote, &mut buf, start, end);
        assert_eq!(
            v,
            Verdict::Udp {
                from: PRIMARY,
                to: OTHER,
                start: start - tw::ORIGIN_LEN,
                end
            }
        );
        let p = tw::Packet::parse(&buf[start - tw::ORIGIN_LEN..end]).unwrap();
        assert_eq!(p.origin.unwrap().0, remote);
    }

    // RFC 4380 §5.4.1 case 1: trusted peer, send straight to its mapping, packet untouched.
    #[test]
    fn rfc4380_5_4_1_tun_to_trusted_client_is_sent_untouched() {
        let mut w = worker(false);
        let now = Instant::now();
        let me = teredo(CLIENT).encode();
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &bubble(me, server_link_local())),
            Verdict::Consumed
        );
        let pkt = udp(CORP_HOST, me, 1280);
        let (mut buf, start, end) = framed(&pkt);
        let v = w.handle_tun(now, &mut buf, start, end);
        assert_eq!(
            v,
            Verdict::Udp {
                from: PRIMARY,
                to: CLIENT,
                start,
                end
            }
        );
        assert_eq!(&buf[start..end], &pkt[..]);
        assert!(w.poll_transmit().is_none());
        let s = w.stats();
        assert_eq!(s.packets(Side::Corpnet, Direction::Rx), 1);
        assert_eq!(s.bytes(Side::Corpnet, Direction::Rx), 1280);
        assert_eq!(total_drops(s), 0);
    }

    // RFC 4380 §5.4.1 case 3 and §5.4.2: queue, bubble, and flush on the client's bubble.
    #[test]
    fn rfc4380_5_4_1_tun_to_unknown_client_bubbles_then_flushes() {
        let mut w = worker(false);
        let now = Instant::now();
        let me = teredo(CLIENT).encode();
        let pkt = udp(CORP_HOST, me, 300);
        assert_eq!(from_tun(&mut w, now, &pkt), Verdict::Consumed);
        let t = w.poll_transmit().expect("bubble");
        assert!(w.poll_transmit().is_none());
        assert_eq!(t.from, PRIMARY);
        assert_eq!(t.to, CLIENT);
        assert_eq!(t.data.len(), tw::ORIGIN_LEN + ipv6::HEADER_LEN);
        let p = tw::Packet::parse(&t.data).unwrap();
        assert_eq!(
            p.origin.unwrap().0,
            SocketAddrV4::new(PRIMARY, 3544),
            "the client answers the origin indication with a direct bubble"
        );
        assert!(p.ipv6.is_bubble());
        assert_eq!(p.ipv6.src(), server_link_local());
        assert_eq!(p.ipv6.dst(), me);

        // The client's direct bubble makes it trusted and releases the queue.
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &bubble(me, server_link_local())),
            Verdict::Consumed
        );
        let t = w.poll_transmit().expect("queued packet");
        assert_eq!(
            t,
            Transmit {
                from: PRIMARY,
                to: CLIENT,
                data: pkt.clone()
            }
        );
        assert!(w.poll_transmit().is_none());
        assert!(matches!(
            from_tun(&mut w, now, &pkt),
            Verdict::Udp { to: CLIENT, .. }
        ));
        assert_eq!(total_drops(w.stats()), 0);
    }

    // RFC 4380 §5.4.1: repeat the bubble every 2 s, then drop the queue.
    #[test]
    fn rfc4380_5_4_1_bubble_retries_then_bubble_timeout() {
        let mut w = worker(false);
        let t0 = Instant::now();
        let me = teredo(CLIENT).encode();
        let pkt = udp(CORP_HOST, me, 100);
        assert_eq!(from_tun(&mut w, t0, &pkt), Verdict::Consumed);
        assert_eq!(from_tun(&mut w, t0, &pkt), Verdict::Consumed);
        let first: Vec<_> = std::iter::from_fn(|| w.poll_transmit()).collect();
        assert_eq!(first.len(), 1, "one bubble for two queued packets");

        let mut retries = Vec::new();
        for ms in (500..=7500).step_by(500) {
            w.handle_timeout(t0 + Duration::from_millis(ms), 0, 1);
            while let Some(t) = w.poll_transmit() {
                assert_eq!(t.data, first[0].data);
                assert_eq!(t.to, CLIENT);
                retries.push(ms);
            }
        }
        assert_eq!(retries, vec![2000, 4000, 6000]);
        assert_eq!(w.stats().drops(Drop::BubbleTimeout), 0);
        w.handle_timeout(t0 + Duration::from_secs(8), 0, 1);
        assert!(w.poll_transmit().is_none());
        assert_eq!(w.stats().drops(Drop::BubbleTimeout), 2);
        assert_eq!(total_drops(w.stats()), 2);
        // The untrusted entry is gone: the next packet starts over with a bubble.
        assert_eq!(w.shared.gauges(t0 + Duration::from_secs(8)).teredo_peers, 0);
        assert_eq!(
            from_tun(&mut w, t0 + Duration::from_secs(9), &pkt),
            Verdict::Consumed
        );
        assert!(w.poll_transmit().is_some());
    }

    #[test]
    fn garbage_from_tun_is_malformed_or_truncated() {
        let mut w = worker(false);
        let now = Instant::now();
        // IPv4 from the TUN is NAT64's; without NAT64 nothing routes it.
        assert_eq!(
            from_tun(&mut w, now, &[0x45; 60]),
            Verdict::Drop(Drop::NoRoute)
        );
        assert_eq!(
            from_tun(&mut w, now, &[0x75; 60]),
            Verdict::Drop(Drop::Malformed)
        );
        assert_eq!(from_tun(&mut w, now, &[]), Verdict::Drop(Drop::Truncated));
        assert_eq!(
            from_tun(&mut w, now, &[0x60; 39]),
            Verdict::Drop(Drop::Truncated)
        );
        let mut lying = udp(CORP_HOST, teredo(CLIENT).encode(), 100);
        lying[5] = 200;
        assert_eq!(
            from_tun(&mut w, now, &lying),
            Verdict::Drop(Drop::Truncated)
        );
        // Out-of-range indices are a driver bug, but still only a drop.
        let mut buf = [0u8; 8];
        assert_eq!(
            w.handle_tun(now, &mut buf, 4, 100),
            Verdict::Drop(Drop::Truncated)
        );
        assert_eq!(
            w.handle_tun(now, &mut buf, 6, 2),
            Verdict::Drop(Drop::Truncated)
        );
        // Well-formed, but not for a Teredo client of ours.
        assert_eq!(
            from_tun(
                &mut w,
                now,
                &udp(CORP_HOST, "2001:db8:5::1".parse().unwrap(), 60)
            ),
            Verdict::Drop(Drop::NoRoute)
        );
        let s = w.stats();
        assert_eq!(s.drops(Drop::Malformed), 1);
        assert_eq!(s.drops(Drop::Truncated), 5);
        assert_eq!(s.drops(Drop::NoRoute), 2);
        assert_eq!(total_drops(s), 8);
        assert_eq!(s.packets(Side::Corpnet, Direction::Rx), 8);
    }

    // RFC 4380 §5.3.1 rule 3: the IPv4 source must be global unicast.
    #[test]
    fn rfc4380_5_3_1_non_global_source_is_dropped() {
        let mut w = worker(true);
        let rs = miredo_rs("fe80::ffff:ffff:ffff");
        for src in [
            "10.0.0.1:3546",
            "127.0.0.1:3546",
            "192.168.1.1:1",
            "224.0.0.253:3544",
        ] {
            let src: SocketAddrV4 = src.parse().unwrap();
            assert_eq!(
                from_teredo(&mut w, Instant::now(), src, &rs),
                Verdict::Drop(Drop::NonGlobalSource)
            );
            let data = udp(teredo(src).encode(), CORP_HOST, 60);
            assert_eq!(
                from_teredo(&mut w, Instant::now(), src, &data),
                Verdict::Drop(Drop::NonGlobalSource)
            );
        }
        assert_eq!(w.stats().drops(Drop::NonGlobalSource), 8);
        assert_eq!(w.stats().teredo_qualifications.get(), 0);
    }

    #[test]
    fn echo_checksum_helper_matches_wire() {
        // Guards the fixtures above: emit_echo's checksum verifies.
        let e = echo(teredo(CLIENT).encode(), CORP_ADDRESS, 8);
        let p = ipv6::Packet::new_checked(&e).unwrap();
        assert_eq!(
            checksum::upper_layer_v6(&p.src(), &p.dst(), ipv6::NH_ICMPV6, p.payload()),
            0
        );
    }

    /// Inputs that get past the outer parsers often: an optional auth header and origin
    /// indication, then an IPv6 header with addresses drawn from the interesting classes.
    fn teredo_ish() -> impl Strategy<Value = Vec<u8>> {
        let addr = prop_oneof![
            Just(teredo(CLIENT).encode()),
            Just(teredo(OTHER).encode()),
            Just(CORP_HOST),
            Just(CORP_ADDRESS),
            Just(icmpv6::ALL_ROUTERS),
            Just(server_link_local()),
            Just("fe80::ffff:ffff:ffff".parse().unwrap()),
            any::<u128>().prop_map(Ipv6Addr::from),
        ];
        (
            any::<bool>(),
            any::<bool>(),
            addr.clone(),
            addr,
            prop_oneof![Just(58u8), Just(59), Just(17), any::<u8>()],
            proptest::collection::vec(any::<u8>(), 0..200),
            0u16..300,
        )
            .prop_map(|(auth, origin, src, dst, nh, payload, plen)| {
                let mut b = Vec::new();
                if auth {
                    b.extend_from_slice(&[0, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0]);
                }
                if origin {
                    b.extend_from_slice(&[0, 0, 0xf2, 0x27, 0x3f, 0xff, 0xfd, 0xfe]);
                }
                let mut h = [0u8; 40];
                ipv6::emit_header(&mut h, plen, nh, 64, &src, &dst).unwrap();
                b.extend_from_slice(&h);
                b.extend_from_slice(&payload);
                b
            })
    }

    fn any_input() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..2000),
            teredo_ish()
        ]
    }

    /// Forwarded verdicts stay inside the buffer; a drop counts exactly once, under its own
    /// reason; anything else counts none.
    fn check_accounting(before: &[u64], s: &Stats, v: Verdict, len: usize) {
        let after: Vec<u64> = Drop::ALL.iter().map(|d| s.drops(*d)).collect();
        let delta: u64 = after.iter().zip(before).map(|(a, b)| a - b).sum();
        match v {
            Verdict::Drop(d) => {
                assert_eq!(delta, 1, "{v:?}");
                let i = Drop::ALL.iter().position(|x| *x == d).unwrap();
                assert_eq!(after[i] - before[i], 1, "{v:?}");
            }
            Verdict::Tun { start, end } | Verdict::Udp { start, end, .. } => {
                assert_eq!(delta, 0, "{v:?}");
                assert!(start <= end && end <= len, "{v:?}");
            }
            Verdict::Consumed => assert_eq!(delta, 0),
        }
    }

    proptest! {
        #[test]
        fn handle_teredo_never_panics_and_counts_each_drop_once(
            bytes in any_input(),
            ip in any::<u32>(),
            port in any::<u16>(),
            remote_is_client in any::<bool>(),
            allow in any::<bool>(),
        ) {
            let mut w = worker(allow);
            let remote = if remote_is_client {
                CLIENT
            } else {
                SocketAddrV4::new(Ipv4Addr::from(ip), port)
            };
            let (mut buf, start, end) = framed(&bytes);
            let len = buf.len();
            let before: Vec<u64> = Drop::ALL.iter().map(|d| w.stats().drops(*d)).collect();
            let v = w.handle_teredo(Instant::now(), PRIMARY, remote, &mut buf, start, end);
            check_accounting(&before, w.stats(), v, len);
            prop_assert_eq!(w.stats().packets(Side::Internet, Direction::Rx), 1);
            prop_assert_eq!(w.stats().bytes(Side::Internet, Direction::Rx), bytes.len() as u64);
        }

        #[test]
        fn handle_tun_never_panics_and_counts_each_drop_once(
            bytes in any_input(),
            trusted in any::<bool>(),
        ) {
            let mut w = worker(false);
            let now = Instant::now();
            if trusted {
                from_teredo(&mut w, now, CLIENT, &bubble(teredo(CLIENT).encode(), server_link_local()));
            }
            let (mut buf, start, end) = framed(&bytes);
            let len = buf.len();
            let before: Vec<u64> = Drop::ALL.iter().map(|d| w.stats().drops(*d)).collect();
            let v = w.handle_tun(now, &mut buf, start, end);
            check_accounting(&before, w.stats(), v, len);
            // The packet is never modified on the way to a client.
            if let Verdict::Udp { start: s, end: e, .. } = v {
                prop_assert_eq!(&buf[s..e], &bytes[..e - s]);
            }
            while w.poll_transmit().is_some() {}
            w.handle_timeout(now + Duration::from_secs(60), 0, 1);
        }
    }
}
