//! The IP-HTTPS server role ([MS-IPHTTPS] §3.2), one [`Connection`] per HTTP connection.
//!
//! States: `AwaitingRequest` (the TLS session is up, the POST head is being read) → `LinkUp`
//! (200 sent; both directions carry IPv6 packets) → `Closed`. The driver owns TLS, the socket
//! and the clock:
//!
//! ```text
//! read plaintext into a StreamBuffer
//! AwaitingRequest: conn.handle_input(now, buf.data(), date, &mut out) -> Handshake
//!                  (send `out`; LinkUp{consumed}: buf.consume(consumed); Rejected: close)
//! LinkUp:          while let Some(pkt) = buf.next_packet(&deframer)? {
//!                      conn.handle_packet(now, pkt, &mut reply) -> PacketVerdict
//!                  }                         (a FrameError: conn.close(..), close TLS)
//! towards client:  conn.handle_egress(now, pkt) -> Ok: write pkt to TLS as is
//! timers:          conn.handle_timeout(now); while let Some(n) = conn.poll_unsolicited_ra(..)
//!                  sleep_until(conn.poll_timeout())
//! ```
//!
//! Addressing: every connection gets its own /64 from a [`PrefixPool`] (the driver may move it,
//! before any RA, to the /64 the client held before: [`Connection::readdress`],
//! [`solicitation_interface_id`], [`crate::pool`]), advertised in a Router
//! Advertisement (A flag, L clear, MTU option, router lifetime > 0 so the client routes via
//! us) from [`SERVER_LINK_LOCAL`]. With one client per /64 no other client can own any address
//! the client forms, so the proxy-DAD rules of §3.2.5.2.1 (answer a DAD NS for another
//! client's address) never apply: DAD probes are simply consumed, and the only address a
//! client could collide with, the server's link-local, is defended with a Neighbor
//! Advertisement. The server also answers Neighbor Solicitations for its link-local (address
//! resolution or NUD of the default router).
//!
//! Filtering (Authentication Mode None, §3.2.5.2.1): link-local unicast not addressed to the
//! server and multicast other than RS and DAD NS are dropped; a source outside the client's
//! /64 is dropped as spoofed; towards the client only unicast to its /64 and our RAs go out.
//!
//! Timers: the spec has none (§3.2.6). We close a connection whose request head has not
//! arrived after [`ServerConfig::request_timeout`], and a link with no packet in either
//! direction for [`ServerConfig::idle_timeout`] (our own unsolicited RAs do not count, or the
//! link would never be idle). Unsolicited RAs go out at link-up and then every
//! [`ServerConfig::ra_interval`].

use crate::http::{self, HttpError, Request};
pub use crate::pool::{Claim, Hint, PrefixPool, PrefixTooLong};
use gate64_wire::{checksum, icmpv6, ipv6};
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The server's link-local address on every IP-HTTPS link: the source of its RAs.
pub const SERVER_LINK_LOCAL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
/// All-nodes multicast, the destination of unsolicited RAs (RFC 4861 §6.2.4).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// Largest reply [`Connection::handle_packet`] and [`Connection::poll_unsolicited_ra`] write:
/// an RA with one PIO and the MTU option (96 bytes). Reply buffers must hold this much.
pub const MAX_REPLY_LEN: usize = ipv6::HEADER_LEN + 16 + 32 + 8;
/// Prefix length advertised to each client (SLAAC needs 64, RFC 4862 §5.5.3).
pub const CLIENT_PREFIX_LEN: u8 = 64;

const TYPE_NEIGHBOR_SOLICITATION: u8 = 135;
const TYPE_NEIGHBOR_ADVERTISEMENT: u8 = 136;
const NS_LEN: usize = 24;
const NA_LEN: usize = ipv6::HEADER_LEN + 24;

/// Server settings shared by all connections (`[iphttps]` in the config file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The request path clients use ([`http::DEFAULT_PATH`]).
    pub path: String,
    /// The pool the per-client /64s come from (`[iphttps] prefix`).
    pub prefix: Ipv6Addr,
    /// Its length, at most 64.
    pub prefix_len: u8,
    /// Link MTU advertised in the RA (1280 by §3.2.3.1).
    pub link_mtu: u32,
    /// Router lifetime in RAs, seconds; non-zero so the client uses us as default router.
    pub router_lifetime: u16,
    /// Close a link that carried no packet in either direction this long.
    pub idle_timeout: Duration,
    /// Close a connection whose request head has not arrived this long after it was opened.
    pub request_timeout: Duration,
    /// Interval between unsolicited RAs.
    pub ra_interval: Duration,
}

impl Default for ServerConfig {
    /// `/IPHTTPS`, pool `2001:db8:1::/48`, MTU 1280, router lifetime 1800 s, idle 15 min
    /// (long, as §3.2.6 advises against short idle timeouts), request 30 s, RAs every 5 min.
    fn default() -> Self {
        ServerConfig {
            path: http::DEFAULT_PATH.to_owned(),
            prefix: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0),
            prefix_len: 48,
            link_mtu: 1280,
            router_lifetime: 1800,
            idle_timeout: Duration::from_secs(15 * 60),
            request_timeout: Duration::from_secs(30),
            ra_interval: Duration::from_secs(5 * 60),
        }
    }
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// TLS is up; waiting for the POST head.
    AwaitingRequest,
    /// 200 sent; packets flow.
    LinkUp,
    /// Done; the driver closes the transport and releases the prefix.
    Closed,
}

/// Why a connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The request head was refused (the error answer was written).
    BadRequest(HttpError),
    /// No request head within [`ServerConfig::request_timeout`].
    RequestTimeout,
    /// No packet within [`ServerConfig::idle_timeout`].
    IdleTimeout,
    /// The byte stream could not be deframed (§3.2.5.2.2: close on a non-IPv6 packet).
    Framing(crate::FrameError),
    /// The transport closed or failed.
    TransportClosed,
}

impl core::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CloseReason::BadRequest(e) => write!(f, "bad request: {e}"),
            CloseReason::RequestTimeout => f.write_str("no request in time"),
            CloseReason::IdleTimeout => f.write_str("idle timeout"),
            CloseReason::Framing(e) => write!(f, "framing error: {e}"),
            CloseReason::TransportClosed => f.write_str("transport closed"),
        }
    }
}

/// Result of [`Connection::handle_input`] while awaiting the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handshake {
    /// The head is incomplete: read more and call again with all buffered bytes.
    Pending,
    /// The `200 OK` was appended to `out`; the first `consumed` bytes were the head and
    /// everything after them is the packet stream. The link is up.
    LinkUp {
        /// Bytes of the request head.
        consumed: usize,
        /// The accepted request.
        request: Request,
    },
    /// An error answer was appended to `out`: send it, then close. The connection is closed.
    Rejected {
        /// Why.
        error: HttpError,
    },
}

/// What to do with one packet from the client ([`Connection::handle_packet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketVerdict {
    /// Route it (its source is in the client's /64, its destination routable).
    Forward,
    /// A reply of `len` bytes was written to the reply buffer: send it back to this client.
    Reply {
        /// Length of the reply packet.
        len: usize,
    },
    /// Handled here, nothing to send (a DAD probe).
    Consumed,
    /// Refused; count it under [`DropReason::as_str`].
    Drop(DropReason),
}

/// Why a packet was dropped. All are the peer's doing except [`DropReason::ReplyBuffer`].
/// Exhaustive on purpose: the dataplane names each one as a metric label, and a new one must
/// get its own name there rather than fall into another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The link is not up.
    NotLinkUp,
    /// Not a well-formed IPv6 packet.
    Malformed,
    /// A Router Solicitation failing RFC 4861 §6.1.1 validation.
    InvalidRouterSolicitation,
    /// A Neighbor Solicitation failing RFC 4861 §7.1.1 validation, or not for the server.
    InvalidNeighborSolicitation,
    /// Unspecified source outside DAD.
    UnspecifiedSource,
    /// Multicast other than RS and DAD NS (§3.2.5.2.1).
    Multicast,
    /// Link-local source or destination, not ND with the server (§3.2.5.2.1).
    LinkLocal,
    /// A source outside this client's /64: it may not use another client's addresses.
    SpoofedSource,
    /// A destination no router forwards (loopback, IPv4-mapped, ...).
    NotForwardable,
    /// Towards the client: a destination outside its /64.
    NotForClient,
    /// The caller's reply buffer was shorter than [`MAX_REPLY_LEN`] (a caller bug).
    ReplyBuffer,
}

impl DropReason {
    /// A short snake_case name for the `gate64_drops_total{reason}` label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::NotLinkUp => "iphttps_not_link_up",
            DropReason::Malformed => "malformed",
            DropReason::InvalidRouterSolicitation => "invalid_rs",
            DropReason::InvalidNeighborSolicitation => "invalid_ns",
            DropReason::UnspecifiedSource => "unspecified_source",
            DropReason::Multicast => "multicast",
            DropReason::LinkLocal => "link_local",
            DropReason::SpoofedSource => "spoofed_source",
            DropReason::NotForwardable => "not_forwardable",
            DropReason::NotForClient => "not_for_client",
            DropReason::ReplyBuffer => "reply_buffer",
        }
    }
}

impl core::fmt::Display for DropReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// [`Connection::handle_input`] was called after the request was handled (a driver bug).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("operation invalid in state {0:?}")]
pub struct WrongState(pub State);

/// Counters of one connection, exported by the driver as metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets received from the client.
    pub packets_in: u64,
    /// Their bytes.
    pub bytes_in: u64,
    /// Packets accepted towards the client ([`Connection::handle_egress`]).
    pub packets_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// Packets from the client to be routed.
    pub forwarded: u64,
    /// Router Advertisements sent, solicited or not.
    pub ras_sent: u64,
    /// Packets dropped, both directions.
    pub dropped: u64,
}

/// What an [`EgressFilter`] let through and refused since it was last asked
/// ([`EgressFilter::take_tally`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EgressTally {
    /// Packets let through towards the client.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Packets refused.
    pub refused: u64,
    /// When the last packet that counts as traffic (not gate64's own RA or NA) went.
    pub last_traffic: Option<Instant>,
}

impl EgressTally {
    /// Adds `other` (a later tally) to this one.
    pub fn merge(&mut self, other: EgressTally) {
        self.packets += other.packets;
        self.bytes += other.bytes;
        self.refused += other.refused;
        self.last_traffic = self.last_traffic.max(other.last_traffic);
    }
}

/// The sending half of a link's judgement (§3.2.5.2.1), for a writer apart from the task
/// that owns the [`Connection`]: only unicast to the client's /64 leaves, besides gate64's own
/// RAs and NAs from [`SERVER_LINK_LOCAL`]. It tallies what it let through; the owner folds
/// the tally in with [`Connection::note_egress`] (before its timers), so that traffic towards
/// the client keeps the link from going idle.
#[derive(Debug, Clone)]
pub struct EgressFilter {
    client_prefix: Ipv6Addr,
    tally: EgressTally,
}

impl EgressFilter {
    /// Judges a packet about to be written to the stream.
    pub fn handle(&mut self, now: Instant, pkt: &[u8]) -> Result<(), DropReason> {
        match judge_egress(self.client_prefix, pkt) {
            Ok(traffic) => {
                self.tally.packets += 1;
                self.tally.bytes += pkt.len() as u64;
                if traffic {
                    self.tally.last_traffic = Some(now);
                }
                Ok(())
            }
            Err(r) => {
                self.tally.refused += 1;
                Err(r)
            }
        }
    }

    /// What was let through and refused since the last call.
    pub fn take_tally(&mut self) -> EgressTally {
        std::mem::take(&mut self.tally)
    }
}

/// Whether `pkt` may go to the client of the /64 `client_prefix`: `Ok(true)` for traffic,
/// `Ok(false)` for gate64's own RA or NA (no traffic for the idle timer).
fn judge_egress(client_prefix: Ipv6Addr, pkt: &[u8]) -> Result<bool, DropReason> {
    let p = ipv6::Packet::new_checked(pkt).map_err(|_| DropReason::Malformed)?;
    if p.src() == SERVER_LINK_LOCAL
        && matches!(
            icmpv6::type_code(&p),
            Some((
                icmpv6::TYPE_ROUTER_ADVERTISEMENT | TYPE_NEIGHBOR_ADVERTISEMENT,
                0
            ))
        )
    {
        return Ok(false);
    }
    if mask64(p.dst()) != client_prefix {
        return Err(DropReason::NotForClient);
    }
    Ok(true)
}

/// One IP-HTTPS connection, server side.
#[derive(Debug, Clone)]
pub struct Connection {
    cfg: Arc<ServerConfig>,
    client_prefix: Ipv6Addr,
    state: State,
    opened: Instant,
    last_activity: Instant,
    next_ra: Instant,
    close_reason: Option<CloseReason>,
    stats: Stats,
}

impl Connection {
    /// A connection whose TLS session came up at `now`, serving `client_prefix` (a /64 from the
    /// [`PrefixPool`]; bits past 64 are ignored). The caller allocates the prefix first and
    /// refuses the connection when the pool is exhausted (§3.2.5.1: disconnect when no
    /// client-table entry can be added).
    pub fn new(cfg: Arc<ServerConfig>, client_prefix: Ipv6Addr, now: Instant) -> Self {
        Connection {
            cfg,
            client_prefix: mask64(client_prefix),
            state: State::AwaitingRequest,
            opened: now,
            last_activity: now,
            next_ra: now,
            close_reason: None,
            stats: Stats::default(),
        }
    }

    /// Serves `client_prefix` instead of the /64 it was made with, as long as it has neither
    /// judged a packet nor sent a Router Advertisement (nothing told the client its old /64).
    pub fn readdress(&mut self, client_prefix: Ipv6Addr) -> Result<(), WrongState> {
        if self.state == State::Closed || self.stats.packets_in > 0 || self.stats.ras_sent > 0 {
            return Err(WrongState(self.state));
        }
        self.client_prefix = mask64(client_prefix);
        Ok(())
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The client's /64.
    pub fn client_prefix(&self) -> Ipv6Addr {
        self.client_prefix
    }

    /// Why the connection closed, once it has.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.close_reason
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Feeds the bytes received so far (all of them, from the start of the connection) while
    /// awaiting the request. Appends the answer to `out`: the `200 OK` with `date` (an RFC 1123
    /// date, see [`http::http_date`]), or an error answer after which the driver closes.
    pub fn handle_input(
        &mut self,
        now: Instant,
        buf: &[u8],
        date: &str,
        out: &mut Vec<u8>,
    ) -> Result<Handshake, WrongState> {
        if self.state != State::AwaitingRequest {
            return Err(WrongState(self.state));
        }
        match http::parse_request(buf, &self.cfg.path) {
            Ok(None) => Ok(Handshake::Pending),
            Ok(Some((request, consumed))) => {
                http::ok_response(date, out);
                self.state = State::LinkUp;
                self.last_activity = now;
                // RFC 4861 §6.2.4: advertise at once when the interface comes up.
                self.next_ra = now;
                Ok(Handshake::LinkUp { consumed, request })
            }
            Err(error) => {
                out.extend_from_slice(http::error_response(error.status()));
                self.close(CloseReason::BadRequest(error));
                Ok(Handshake::Rejected { error })
            }
        }
    }

    /// Judges one deframed packet from the client. A reply (RA or NA, at most
    /// [`MAX_REPLY_LEN`] bytes) is written to `reply`.
    pub fn handle_packet(&mut self, now: Instant, pkt: &[u8], reply: &mut [u8]) -> PacketVerdict {
        let v = self.judge(now, pkt, reply);
        match v {
            PacketVerdict::Forward => self.stats.forwarded += 1,
            PacketVerdict::Drop(_) => self.stats.dropped += 1,
            PacketVerdict::Reply { .. } | PacketVerdict::Consumed => {}
        }
        v
    }

    /// Checks a packet before the driver writes it to the stream: only unicast to the
    /// client's /64 goes out (§3.2.5.2.1: no multicast but RAs), and the server's own RAs and
    /// NAs from [`SERVER_LINK_LOCAL`] (what [`Connection::handle_packet`] and
    /// [`Connection::poll_unsolicited_ra`] wrote), which do not count as traffic for the idle
    /// timer. For a driver whose one task both reads and writes; a driver that writes from
    /// another task gives it an [`EgressFilter`] instead.
    pub fn handle_egress(&mut self, now: Instant, pkt: &[u8]) -> Result<(), DropReason> {
        if self.state != State::LinkUp {
            self.stats.dropped += 1;
            return Err(DropReason::NotLinkUp);
        }
        let mut filter = self.egress_filter();
        let r = filter.handle(now, pkt);
        self.note_egress(filter.take_tally());
        r
    }

    /// The link's egress filter, for a writer that runs apart from the task owning this
    /// connection (after link-up: the writer exists only while the link is up). What it let
    /// through comes back with [`Connection::note_egress`].
    pub fn egress_filter(&self) -> EgressFilter {
        EgressFilter {
            client_prefix: self.client_prefix,
            tally: EgressTally::default(),
        }
    }

    /// Folds in what a writer's [`EgressFilter`] let through and refused: the counters, and
    /// its last packet of traffic towards the client moves the idle timer.
    pub fn note_egress(&mut self, tally: EgressTally) {
        self.stats.packets_out += tally.packets;
        self.stats.bytes_out += tally.bytes;
        self.stats.dropped += tally.refused;
        if let Some(at) = tally.last_traffic {
            self.last_activity = self.last_activity.max(at);
        }
    }

    /// When [`Connection::handle_timeout`] or [`Connection::poll_unsolicited_ra`] is due next;
    /// `None` once closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::AwaitingRequest => Some(self.opened + self.cfg.request_timeout),
            State::LinkUp => Some((self.last_activity + self.cfg.idle_timeout).min(self.next_ra)),
            State::Closed => None,
        }
    }

    /// Runs the timers; returns the reason when this call closed the connection.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<CloseReason> {
        let reason = match self.state {
            State::AwaitingRequest if now >= self.opened + self.cfg.request_timeout => {
                CloseReason::RequestTimeout
            }
            State::LinkUp if now >= self.last_activity + self.cfg.idle_timeout => {
                CloseReason::IdleTimeout
            }
            _ => return None,
        };
        self.close(reason);
        Some(reason)
    }

    /// Writes an unsolicited RA to `ff02::1` into `out` when one is due; returns its length.
    pub fn poll_unsolicited_ra(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        if self.state != State::LinkUp || now < self.next_ra {
            return None;
        }
        let len = self.emit_ra(out, &ALL_NODES)?;
        self.next_ra = now + self.cfg.ra_interval;
        Some(len)
    }

    /// Marks the connection closed (transport gone, framing error, shutdown). Idempotent; the
    /// first reason sticks.
    pub fn close(&mut self, reason: CloseReason) {
        if self.state != State::Closed {
            self.state = State::Closed;
            self.close_reason = Some(reason);
        }
    }

    fn judge(&mut self, now: Instant, pkt: &[u8], reply: &mut [u8]) -> PacketVerdict {
        use PacketVerdict::Drop;
        if self.state != State::LinkUp {
            return Drop(DropReason::NotLinkUp);
        }
        self.last_activity = now;
        self.stats.packets_in += 1;
        self.stats.bytes_in += pkt.len() as u64;
        let Ok(p) = ipv6::Packet::new_checked(pkt) else {
            return Drop(DropReason::Malformed);
        };
        let (src, dst) = (p.src(), p.dst());
        match icmpv6::type_code(&p) {
            Some((icmpv6::TYPE_ROUTER_SOLICITATION, _)) => return self.handle_rs(now, &p, reply),
            Some((TYPE_NEIGHBOR_SOLICITATION, _)) => return self.handle_ns(&p, reply),
            _ => {}
        }
        if src.is_unspecified() {
            return Drop(DropReason::UnspecifiedSource);
        }
        if dst.is_multicast() {
            return Drop(DropReason::Multicast);
        }
        if is_link_local(&src) || is_link_local(&dst) {
            return Drop(DropReason::LinkLocal);
        }
        if !self.in_client_prefix(&src) {
            return Drop(DropReason::SpoofedSource);
        }
        if !ipv6::is_forwardable_unicast(&dst) {
            return Drop(DropReason::NotForwardable);
        }
        PacketVerdict::Forward
    }

    /// RFC 4861 §6.1.1 validation, then §6.2.6: answer to the solicitor, or to all nodes when
    /// it has no address yet.
    fn handle_rs(&mut self, now: Instant, p: &ipv6::Packet<'_>, reply: &mut [u8]) -> PacketVerdict {
        let src = p.src();
        let valid = (src.is_unspecified() || is_link_local(&src) || self.in_client_prefix(&src))
            && rs_valid(p);
        if !valid {
            return PacketVerdict::Drop(DropReason::InvalidRouterSolicitation);
        }
        let to = if src.is_unspecified() { ALL_NODES } else { src };
        match self.emit_ra(reply, &to) {
            Some(len) => {
                self.next_ra = now + self.cfg.ra_interval;
                PacketVerdict::Reply { len }
            }
            None => PacketVerdict::Drop(DropReason::ReplyBuffer),
        }
    }

    /// RFC 4861 §7.1.1 validation. DAD probes (unspecified source) are consumed, except for
    /// the server's own link-local, which is defended (§7.2.4); solicitations for the server's
    /// link-local are answered (§7.2.4) with R and S set and no Target Link-Layer option,
    /// since the link has no link-layer addresses.
    fn handle_ns(&mut self, p: &ipv6::Packet<'_>, reply: &mut [u8]) -> PacketVerdict {
        let (src, dst) = (p.src(), p.dst());
        let b = p.payload();
        let target = match b.get(8..NS_LEN) {
            Some(t) => Ipv6Addr::from(<[u8; 16]>::try_from(t).expect("slice of 16 bytes")),
            None => return PacketVerdict::Drop(DropReason::InvalidNeighborSolicitation),
        };
        let valid = p.hop_limit() == 255
            && b[1] == 0
            && !target.is_multicast()
            && (!src.is_unspecified() || is_solicited_node(&dst))
            && icmpv6::checksum_ok(p);
        if !valid {
            return PacketVerdict::Drop(DropReason::InvalidNeighborSolicitation);
        }
        if target != SERVER_LINK_LOCAL {
            return if src.is_unspecified() {
                // DAD for an address of the client's own: nobody else can hold it here.
                PacketVerdict::Consumed
            } else {
                PacketVerdict::Drop(DropReason::InvalidNeighborSolicitation)
            };
        }
        if !(dst == SERVER_LINK_LOCAL || dst == solicited_node(&SERVER_LINK_LOCAL)) {
            return PacketVerdict::Drop(DropReason::InvalidNeighborSolicitation);
        }
        let (to, solicited) = if src.is_unspecified() {
            (ALL_NODES, false) // defending against a DAD probe: §7.2.4, S clear, to all nodes
        } else {
            (src, true)
        };
        match emit_neighbor_advert(reply, &SERVER_LINK_LOCAL, &to, solicited) {
            Some(len) => PacketVerdict::Reply { len },
            None => PacketVerdict::Drop(DropReason::ReplyBuffer),
        }
    }

    /// Writes an RA for the client's /64 to `dst` into `out` and counts it; its length.
    fn emit_ra(&mut self, out: &mut [u8], dst: &Ipv6Addr) -> Option<usize> {
        let ra = icmpv6::RouterAdvert {
            router_lifetime: self.cfg.router_lifetime,
            prefix: self.client_prefix,
            prefix_len: CLIENT_PREFIX_LEN,
            mtu: Some(self.cfg.link_mtu),
        };
        let r = ra.emit(out, &SERVER_LINK_LOCAL, dst);
        debug_assert!(r.is_ok(), "reply buffer shorter than MAX_REPLY_LEN");
        let len = r.ok()?;
        self.stats.ras_sent += 1;
        Some(len)
    }

    fn in_client_prefix(&self, a: &Ipv6Addr) -> bool {
        mask64(*a) == self.client_prefix
    }
}

impl PrefixPool {
    /// A pool over the configured `[iphttps] prefix`.
    pub fn from_config(cfg: &ServerConfig) -> Result<Self, PrefixTooLong> {
        Self::new(cfg.prefix, cfg.prefix_len)
    }
}

/// The interface id of `pkt` if it is a Router Solicitation [`Connection`] would answer, from
/// a link-local source other than `fe80::`: the low 64 bits of that source. The driver keys
/// the link's /64 on it ([`PrefixPool::claim`]).
pub fn solicitation_interface_id(pkt: &[u8]) -> Option<u64> {
    let p = ipv6::Packet::new_checked(pkt).ok()?;
    let (kind, _) = icmpv6::type_code(&p)?;
    let src = p.src();
    let iid = u128::from(src) as u64;
    (kind == icmpv6::TYPE_ROUTER_SOLICITATION && is_link_local(&src) && iid != 0 && rs_valid(&p))
        .then_some(iid)
}

/// RFC 4861 §6.1.1 checks of a Router Solicitation but its source's; `p` is ICMPv6 with at
/// least 4 bytes ([`icmpv6::type_code`] said so).
fn rs_valid(p: &ipv6::Packet<'_>) -> bool {
    let dst = p.dst();
    p.hop_limit() == 255
        && p.payload().get(1) == Some(&0)
        && p.payload().len() >= 8
        && (dst == icmpv6::ALL_ROUTERS || dst == SERVER_LINK_LOCAL)
        && icmpv6::checksum_ok(p)
}

fn mask64(a: Ipv6Addr) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(a) & !u128::from(u64::MAX))
}

fn is_link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// `ff02::1:ff00:0/104` (RFC 4291 §2.7.1).
fn is_solicited_node(a: &Ipv6Addr) -> bool {
    a.octets()[..13] == solicited_node(&Ipv6Addr::UNSPECIFIED).octets()[..13]
}

fn solicited_node(a: &Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// A Neighbor Advertisement (RFC 4861 §4.4) for `src` itself as target: R set, S as given,
/// O set, no options.
fn emit_neighbor_advert(
    out: &mut [u8],
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    solicited: bool,
) -> Option<usize> {
    let out = out.get_mut(..NA_LEN)?;
    ipv6::emit_header(out, 24, ipv6::NH_ICMPV6, 255, src, dst).ok()?;
    let b = &mut out[ipv6::HEADER_LEN..];
    b.fill(0);
    b[0] = TYPE_NEIGHBOR_ADVERTISEMENT;
    b[4] = 0x80 | if solicited { 0x40 } else { 0 } | 0x20;
    b[8..24].copy_from_slice(&src.octets());
    let c = checksum::upper_layer_v6(src, dst, ipv6::NH_ICMPV6, b);
    b[2..4].copy_from_slice(&c.to_be_bytes());
    Some(NA_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 7, 0, 0, 0, 0);
    const CLIENT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 7, 0x1234, 0x5678, 0x9abc, 0xdef0);
    const CLIENT_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x1234, 0x5678, 0x9abc, 0xdef0);
    const REMOTE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);
    const DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

    fn cfg() -> Arc<ServerConfig> {
        Arc::new(ServerConfig::default())
    }

    fn link_up(now: Instant) -> Connection {
        let mut c = Connection::new(cfg(), PREFIX, now);
        let req = http::request("/IPHTTPS", "gw");
        let mut out = Vec::new();
        let h = c.handle_input(now, &req, DATE, &mut out).unwrap();
        assert!(matches!(h, Handshake::LinkUp { consumed, .. } if consumed == req.len()));
        assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"));
        c
    }

    fn udp(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut p = vec![0u8; 48];
        ipv6::emit_header(&mut p, 8, ipv6::NH_UDP, 64, &src, &dst).unwrap();
        p
    }

    fn rs(src: Ipv6Addr) -> Vec<u8> {
        let mut p = vec![0u8; 48];
        icmpv6::emit_router_solicitation(&mut p, &src).unwrap();
        p
    }

    fn ns(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
        let mut p = vec![0u8; ipv6::HEADER_LEN + NS_LEN];
        ipv6::emit_header(&mut p, 24, ipv6::NH_ICMPV6, 255, &src, &dst).unwrap();
        p[40] = TYPE_NEIGHBOR_SOLICITATION;
        p[48..64].copy_from_slice(&target.octets());
        icmpv6::fill_checksum(&mut p).unwrap();
        p
    }

    #[test]
    fn rs_from_link_local_gets_ra_with_client_prefix() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        let mut out = [0u8; MAX_REPLY_LEN];
        let v = c.handle_packet(t0, &rs(CLIENT_LL), &mut out);
        let PacketVerdict::Reply { len } = v else {
            panic!("{v:?}")
        };
        assert_eq!(len, MAX_REPLY_LEN);
        let p = ipv6::Packet::new_checked(&out[..len]).unwrap();
        assert_eq!(p.src(), SERVER_LINK_LOCAL);
        assert_eq!(p.dst(), CLIENT_LL);
        assert_eq!(p.hop_limit(), 255);
        assert!(icmpv6::checksum_ok(&p));
        let ra = icmpv6::RouterAdvert::parse(&p).unwrap();
        assert_eq!(
            ra,
            icmpv6::RouterAdvert {
                router_lifetime: 1800,
                prefix: PREFIX,
                prefix_len: 64,
                mtu: Some(1280),
            }
        );
        // PIO flags: A set, L clear (RFC 4861 §4.6.2); M = O = 0 in the RA header.
        assert_eq!(out[40 + 16 + 3], 0x40);
        assert_eq!(out[40 + 5], 0);
        assert_eq!(c.stats().ras_sent, 1);
    }

    #[test]
    fn rs_from_unspecified_gets_ra_to_all_nodes() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        let mut out = [0u8; MAX_REPLY_LEN];
        let PacketVerdict::Reply { len } =
            c.handle_packet(t0, &rs(Ipv6Addr::UNSPECIFIED), &mut out)
        else {
            panic!()
        };
        assert_eq!(
            ipv6::Packet::new_checked(&out[..len]).unwrap().dst(),
            ALL_NODES
        );
    }

    #[test]
    fn invalid_rs_dropped() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        let mut out = [0u8; MAX_REPLY_LEN];
        let mut bad_sum = rs(CLIENT_LL);
        bad_sum[42] ^= 1;
        let mut bad_hop = rs(CLIENT_LL);
        bad_hop[7] = 64;
        let from_other = rs(REMOTE);
        for p in [bad_sum, bad_hop, from_other] {
            assert_eq!(
                c.handle_packet(t0, &p, &mut out),
                PacketVerdict::Drop(DropReason::InvalidRouterSolicitation)
            );
        }
    }

    #[test]
    fn dad_probes_consumed_server_address_defended() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        let mut out = [0u8; MAX_REPLY_LEN];
        let dad = ns(Ipv6Addr::UNSPECIFIED, solicited_node(&CLIENT), CLIENT);
        assert_eq!(c.handle_packet(t0, &dad, &mut out), PacketVerdict::Consumed);
        let dad_ll = ns(Ipv6Addr::UNSPECIFIED, solicited_node(&CLIENT_LL), CLIENT_LL);
        assert_eq!(
            c.handle_packet(t0, &dad_ll, &mut out),
            PacketVerdict::Consumed
        );
        // DAD to a non-solicited-node destination is invalid.
        let bad = ns(Ipv6Addr::UNSPECIFIED, ALL_NODES, CLIENT);
        assert_eq!(
            c.handle_packet(t0, &bad, &mut out),
            PacketVerdict::Drop(DropReason::InvalidNeighborSolicitation)
        );
        let probe = ns(
            Ipv6Addr::UNSPECIFIED,
            solicited_node(&SERVER_LINK_LOCAL),
            SERVER_LINK_LOCAL,
        );
        let PacketVerdict::Reply { len } = c.handle_packet(t0, &probe, &mut out) else {
            panic!()
        };
        let p = ipv6::Packet::new_checked(&out[..len]).unwrap();
        assert_eq!(p.dst(), ALL_NODES);
        assert!(icmpv6::checksum_ok(&p));
        assert_eq!(
            icmpv6::type_code(&p),
            Some((TYPE_NEIGHBOR_ADVERTISEMENT, 0))
        );
        assert_eq!(out[44], 0xa0, "R and O, not S");
    }

    #[test]
    fn ns_for_router_answered() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        let mut out = [0u8; MAX_REPLY_LEN];
        for dst in [SERVER_LINK_LOCAL, solicited_node(&SERVER_LINK_LOCAL)] {
            let q = ns(CLIENT_LL, dst, SERVER_LINK_LOCAL);
            let PacketVerdict::Reply { len } = c.handle_packet(t0, &q, &mut out) else {
                panic!()
            };
            let p = ipv6::Packet::new_checked(&out[..len]).unwrap();
            assert_eq!(
                (p.src(), p.dst(), p.hop_limit()),
                (SERVER_LINK_LOCAL, CLIENT_LL, 255)
            );
            assert!(icmpv6::checksum_ok(&p));
            assert_eq!(out[44], 0xe0, "R, S and O");
            assert_eq!(&out[48..64], &SERVER_LINK_LOCAL.octets());
        }
        // Address resolution for anything else: not ours to answer.
        let q = ns(CLIENT_LL, solicited_node(&REMOTE), REMOTE);
        assert_eq!(
            c.handle_packet(t0, &q, &mut out),
            PacketVerdict::Drop(DropReason::InvalidNeighborSolicitation)
        );
    }

    #[test]
    fn forwarding_rules() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        let mut out = [0u8; MAX_REPLY_LEN];
        let cases = [
            (udp(CLIENT, REMOTE), PacketVerdict::Forward),
            (
                udp(Ipv6Addr::new(0x2001, 0xdb8, 1, 8, 0, 0, 0, 1), REMOTE),
                PacketVerdict::Drop(DropReason::SpoofedSource),
            ),
            (
                udp(REMOTE, CLIENT),
                PacketVerdict::Drop(DropReason::SpoofedSource),
            ),
            (
                udp(CLIENT, ALL_NODES),
                PacketVerdict::Drop(DropReason::Multicast),
            ),
            (
                udp(CLIENT_LL, SERVER_LINK_LOCAL),
                PacketVerdict::Drop(DropReason::LinkLocal),
            ),
            (
                udp(CLIENT, SERVER_LINK_LOCAL),
                PacketVerdict::Drop(DropReason::LinkLocal),
            ),
            (
                udp(Ipv6Addr::UNSPECIFIED, REMOTE),
                PacketVerdict::Drop(DropReason::UnspecifiedSource),
            ),
            (
                udp(CLIENT, Ipv6Addr::LOCALHOST),
                PacketVerdict::Drop(DropReason::NotForwardable),
            ),
            (vec![0x60; 30], PacketVerdict::Drop(DropReason::Malformed)),
        ];
        for (p, want) in cases {
            assert_eq!(c.handle_packet(t0, &p, &mut out), want);
        }
        assert_eq!(c.stats().forwarded, 1);
        assert_eq!(c.stats().dropped, 8);
    }

    #[test]
    fn egress_only_to_the_clients_prefix() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        assert_eq!(c.handle_egress(t0, &udp(REMOTE, CLIENT)), Ok(()));
        assert_eq!(
            c.handle_egress(t0, &udp(REMOTE, ALL_NODES)),
            Err(DropReason::NotForClient)
        );
        assert_eq!(
            c.handle_egress(t0, &udp(REMOTE, REMOTE)),
            Err(DropReason::NotForClient)
        );
        assert_eq!(c.stats().packets_out, 1);
    }

    // The driver writes replies and unsolicited RAs through the same filter as routed
    // packets: they go out, yet leave the idle timer alone.
    #[test]
    fn own_ras_and_nas_pass_the_egress_filter_without_counting_as_traffic() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        let mut out = [0u8; MAX_REPLY_LEN];
        let n = c.poll_unsolicited_ra(t0, &mut out).unwrap();
        let later = t0 + Duration::from_secs(60);
        assert_eq!(c.handle_egress(later, &out[..n]), Ok(()));
        let PacketVerdict::Reply { len } = c.handle_packet(
            t0,
            &ns(CLIENT_LL, SERVER_LINK_LOCAL, SERVER_LINK_LOCAL),
            &mut out,
        ) else {
            panic!("the NS for the router is answered");
        };
        assert_eq!(c.handle_egress(later, &out[..len]), Ok(()));
        assert_eq!(c.stats().packets_out, 2);
        // Other link-local or multicast traffic does not pass.
        assert_eq!(
            c.handle_egress(later, &udp(SERVER_LINK_LOCAL, ALL_NODES)),
            Err(DropReason::NotForClient)
        );
        // The idle timer still runs from the NS at t0.
        let idle = ServerConfig::default().idle_timeout;
        assert_eq!(c.handle_timeout(t0 + idle), Some(CloseReason::IdleTimeout));
    }

    #[test]
    fn packets_before_link_up_dropped() {
        let t0 = Instant::now();
        let mut c = Connection::new(cfg(), PREFIX, t0);
        let mut out = [0u8; MAX_REPLY_LEN];
        assert_eq!(
            c.handle_packet(t0, &udp(CLIENT, REMOTE), &mut out),
            PacketVerdict::Drop(DropReason::NotLinkUp)
        );
        assert_eq!(c.poll_unsolicited_ra(t0, &mut out), None);
    }

    #[test]
    fn request_rejected_and_closed() {
        let t0 = Instant::now();
        let mut c = Connection::new(cfg(), PREFIX, t0);
        let mut out = Vec::new();
        assert_eq!(
            c.handle_input(t0, b"GET /IPHTTPS HT", DATE, &mut out),
            Ok(Handshake::Pending)
        );
        assert!(out.is_empty());
        let h = c.handle_input(t0, b"GET /IPHTTPS HTTP/1.1\r\n\r\n", DATE, &mut out);
        assert_eq!(
            h,
            Ok(Handshake::Rejected {
                error: HttpError::MethodNotAllowed
            })
        );
        assert_eq!(out, http::error_response(405));
        assert_eq!(c.state(), State::Closed);
        assert_eq!(
            c.close_reason(),
            Some(CloseReason::BadRequest(HttpError::MethodNotAllowed))
        );
        assert_eq!(
            c.handle_input(t0, b"", DATE, &mut out),
            Err(WrongState(State::Closed))
        );
        assert_eq!(c.poll_timeout(), None);
    }

    #[test]
    fn request_timeout() {
        let t0 = Instant::now();
        let mut c = Connection::new(cfg(), PREFIX, t0);
        let due = t0 + Duration::from_secs(30);
        assert_eq!(c.poll_timeout(), Some(due));
        assert_eq!(c.handle_timeout(due - Duration::from_millis(1)), None);
        assert_eq!(c.handle_timeout(due), Some(CloseReason::RequestTimeout));
        assert_eq!(c.state(), State::Closed);
    }

    #[test]
    fn idle_timeout_counts_both_directions_not_our_ras() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        let mut out = [0u8; MAX_REPLY_LEN];
        let idle = ServerConfig::default().idle_timeout;
        // The first unsolicited RA is due at link-up, then every ra_interval.
        assert_eq!(c.poll_timeout(), Some(t0));
        assert!(c.poll_unsolicited_ra(t0, &mut out).is_some());
        assert_eq!(c.poll_unsolicited_ra(t0, &mut out), None);
        let t1 = t0 + Duration::from_secs(100);
        assert_eq!(
            c.handle_packet(t1, &udp(CLIENT, REMOTE), &mut out),
            PacketVerdict::Forward
        );
        let t2 = t0 + Duration::from_secs(200);
        assert_eq!(c.handle_egress(t2, &udp(REMOTE, CLIENT)), Ok(()));
        // RAs keep going out, yet do not keep the link alive.
        let mut now = t2;
        while let Some(next) = c.poll_timeout() {
            now = next;
            if c.handle_timeout(now).is_some() {
                break;
            }
            while c.poll_unsolicited_ra(now, &mut out).is_some() {}
        }
        assert_eq!(now, t2 + idle);
        assert_eq!(c.close_reason(), Some(CloseReason::IdleTimeout));
        assert_eq!(c.stats().ras_sent, 1 + 15 * 60 / 300);
    }

    /// A writer apart from the connection: its filter tallies what went, and the tally,
    /// folded in before the timers, moves the idle deadline for traffic but not for our RAs.
    #[test]
    fn a_writers_egress_tally_keeps_the_link_up_for_traffic_only() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        let idle = ServerConfig::default().idle_timeout;
        let mut out = [0u8; MAX_REPLY_LEN];
        let ra = c.poll_unsolicited_ra(t0, &mut out).expect("due at link-up");
        let mut filter = c.egress_filter();
        let t1 = t0 + Duration::from_secs(60);
        assert_eq!(filter.handle(t1, &out[..ra]), Ok(()), "our RA goes out");
        assert_eq!(
            filter.handle(t1, &udp(REMOTE, "2001:db8:1:6::1".parse().unwrap())),
            Err(DropReason::NotForClient)
        );
        let ra_only = filter.take_tally();
        assert_eq!((ra_only.packets, ra_only.refused), (1, 1));
        assert_eq!(ra_only.last_traffic, None, "an RA is no traffic");
        c.note_egress(ra_only);
        assert_eq!(c.handle_timeout(t0 + idle), Some(CloseReason::IdleTimeout));

        let mut c = link_up(t0);
        let mut filter = c.egress_filter();
        let t2 = t0 + Duration::from_secs(300);
        assert_eq!(filter.handle(t2, &udp(REMOTE, CLIENT)), Ok(()));
        c.note_egress(filter.take_tally());
        assert_eq!(
            c.handle_timeout(t0 + idle),
            None,
            "traffic towards the client counts"
        );
        assert_eq!(c.handle_timeout(t2 + idle), Some(CloseReason::IdleTimeout));
        assert_eq!(c.stats().packets_out, 1);
    }

    #[test]
    fn unsolicited_ra_layout() {
        let t0 = Instant::now();
        let mut c = link_up(t0);
        let mut out = [0u8; MAX_REPLY_LEN];
        let len = c.poll_unsolicited_ra(t0, &mut out).unwrap();
        let p = ipv6::Packet::new_checked(&out[..len]).unwrap();
        assert_eq!((p.src(), p.dst()), (SERVER_LINK_LOCAL, ALL_NODES));
        assert_eq!(icmpv6::RouterAdvert::parse(&p).unwrap().prefix, PREFIX);
        let ra_interval = ServerConfig::default().ra_interval;
        assert_eq!(c.poll_timeout(), Some(t0 + ra_interval));
    }

    #[test]
    fn close_is_sticky() {
        let mut c = link_up(Instant::now());
        c.close(CloseReason::Framing(crate::FrameError::NotIpv6));
        c.close(CloseReason::TransportClosed);
        assert_eq!(
            c.close_reason(),
            Some(CloseReason::Framing(crate::FrameError::NotIpv6))
        );
    }

    #[test]
    fn the_interface_id_of_a_valid_link_local_solicitation() {
        assert_eq!(
            solicitation_interface_id(&rs(CLIENT_LL)),
            Some(0x1234_5678_9abc_def0)
        );
        // Not link-local, unspecified, `fe80::`, a bad checksum, another type, garbage.
        for src in [CLIENT, Ipv6Addr::UNSPECIFIED, "fe80::".parse().unwrap()] {
            assert_eq!(solicitation_interface_id(&rs(src)), None, "{src}");
        }
        let mut bad = rs(CLIENT_LL);
        bad[45] ^= 1;
        assert_eq!(solicitation_interface_id(&bad), None);
        let ns = ns(CLIENT_LL, SERVER_LINK_LOCAL, SERVER_LINK_LOCAL);
        assert_eq!(solicitation_interface_id(&ns), None);
        let short = rs(CLIENT_LL);
        for n in 0..short.len() {
            assert_eq!(solicitation_interface_id(&short[..n]), None);
        }
    }

    #[test]
    fn readdress_only_before_the_client_heard_of_its_64() {
        let t0 = Instant::now();
        let other: Ipv6Addr = "2001:db8:1:9::".parse().unwrap();
        let mut c = link_up(t0);
        c.readdress(other).unwrap();
        assert_eq!(c.client_prefix(), other);
        let mut out = [0u8; MAX_REPLY_LEN];
        let ll: Ipv6Addr = "fe80::9".parse().unwrap();
        assert!(matches!(
            c.handle_packet(t0, &rs(ll), &mut out),
            PacketVerdict::Reply { .. }
        ));
        let ra = icmpv6::RouterAdvert::parse(&ipv6::Packet::new_checked(&out[..]).unwrap());
        assert_eq!(ra.unwrap().prefix, other);
        assert!(c.readdress(PREFIX).is_err());
        let mut quiet = link_up(t0);
        assert!(quiet.poll_unsolicited_ra(t0, &mut out).is_some());
        assert!(quiet.readdress(other).is_err());
    }

    #[test]
    fn the_default_pool_is_valid() {
        assert!(PrefixPool::from_config(&ServerConfig::default()).is_ok());
    }

    #[test]
    fn solicited_node_address() {
        assert_eq!(
            solicited_node(&SERVER_LINK_LOCAL),
            "ff02::1:ff00:1".parse::<Ipv6Addr>().unwrap()
        );
        assert!(is_solicited_node(&solicited_node(&CLIENT)));
        assert!(!is_solicited_node(&ALL_NODES));
    }
}
