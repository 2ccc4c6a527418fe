//! The pipeline: one function per stage, each returning `Result<_, Drop>`.
//!
//! ```text
//! Teredo UDP -> decap (teredo::Server::classify: §5.3.1 rules, anti-spoofing)
//!            -> client table (relay peer trust, §5.4.2)
//!            -> policy (the IPsec step; `allow_without_ipsec` bypasses it)
//!            -> route: corpnet prefix -> TUN | own Teredo client -> UDP | else drop
//! TUN        -> route: own Teredo client -> relay (trusted: UDP; else queue + bubble)
//! ```
//!
//! Buffers are the caller's: a packet arrives in `buf[start..end]` with at least [`HEADROOM`]
//! bytes free before `start`, so outer headers are prepended in place. A verdict names the
//! byte range to send; nothing is copied on the forwarding path, and nothing is allocated
//! except when a packet must wait in a relay queue.

use crate::{Direction, Drop, Side, Stats, ratelimit::RateLimiter};
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
}

/// State shared by all workers: the server and the sharded peer table.
#[derive(Debug)]
pub struct Shared {
    cfg: DataplaneConfig,
    server: Option<Server>,
    peers: Peers,
}

impl Shared {
    /// Builds the shared state.
    pub fn new(cfg: DataplaneConfig) -> Arc<Self> {
        let server = cfg.teredo.clone().map(Server::new);
        let peers = Peers::new(cfg.relay.clone());
        Arc::new(Shared { cfg, server, peers })
    }

    /// The configuration.
    pub fn config(&self) -> &DataplaneConfig {
        &self.cfg
    }

    /// The Teredo server, when enabled.
    pub fn teredo(&self) -> Option<&Server> {
        self.server.as_ref()
    }

    /// Gauges for the exporter.
    pub fn gauges(&self, now: Instant) -> crate::Gauges {
        let (valid, total) = self.peers.count(now);
        crate::Gauges {
            teredo_clients: valid as u64,
            teredo_peers: total as u64,
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

    /// Runs relay timers for shard part `part` of `of` (one part per worker).
    pub fn handle_timeout(&mut self, now: Instant, part: usize, of: usize) {
        let Some(server) = self.shared.server.as_ref() else {
            return;
        };
        let origin = SocketAddrV4::new(server.config().primary, server.config().port);
        let from = server.config().primary;
        let src = server.link_local();
        let (stats, transmits) = (&self.stats, &mut self.transmits);
        self.shared
            .peers
            .handle_timeout(now, part, of, |e| match e {
                TimerEvent::Bubble { peer, mapping } => {
                    let mut data = vec![0u8; tw::ORIGIN_LEN + ipv6::HEADER_LEN];
                    if let Ok(n) = relay::emit_bubble(&mut data, &src, &peer, Some(origin)) {
                        data.truncate(n);
                        transmits.push(Transmit {
                            from,
                            to: mapping,
                            data,
                        });
                    }
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
                self.route_from_client(server, remote, buf, pkt, pkt + len, &dst, echo_to_us)
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
        let cfg = &self.shared.cfg;
        let to_self = *dst == cfg.corp_address;
        if !to_self && !cfg.corp_prefixes.iter().any(|p| p.contains(dst)) {
            return Err(Drop::NoRoute);
        }
        self.policy(to_self, echo)?;
        Ok(Verdict::Tun { start, end })
    }

    /// The policy step. Once IPsec exists, a packet enters the corporate network only out of
    /// a child SA whose selectors cover it; without one a client may reach gate64 itself with
    /// ICMPv6 echo only. `allow_without_ipsec` turns the check off for labs.
    fn policy(&self, to_self: bool, echo: bool) -> Result<(), Drop> {
        if self.shared.cfg.allow_without_ipsec || (to_self && echo) {
            Ok(())
        } else {
            Err(Drop::NoSa)
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
        let pkt = ipv6::Packet::new_checked(bytes).map_err(|e| reject_to_drop(e.into()))?;
        let len = pkt.total_len();
        let dst = pkt.dst();
        let server = shared.server.as_ref().ok_or(Drop::NoRoute)?;
        let d = Address::decode(&dst)
            .filter(|d| server.is_own_client(d))
            .ok_or(Drop::NoRoute)?;
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
                    let origin = SocketAddrV4::new(from, server.config().port);
                    let mut data = vec![0u8; tw::ORIGIN_LEN + ipv6::HEADER_LEN];
                    if let Ok(n) =
                        relay::emit_bubble(&mut data, &server.link_local(), &dst, Some(origin))
                    {
                        data.truncate(n);
                        self.transmits.push(Transmit {
                            from,
                            to: mapping,
                            data,
                        });
                    }
                }
                Ok(Verdict::Consumed)
            }
            TxDecision::Drop(TxDrop::QueueFull) => Err(Drop::RelayQueueFull),
            TxDecision::Drop(TxDrop::TableFull) => Err(Drop::PeerTableFull),
        }
    }
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
