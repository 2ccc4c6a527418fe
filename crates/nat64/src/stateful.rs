//! Stateful NAT64 on whole packets (RFC 6146 §3.5): the BIB/session lookup, the RFC 7915
//! translation and the port (ICMP identifier) rewrite, for drivers whose threads share one
//! table. Each shard sits behind its own lock, so a packet takes one shard lock and no global
//! one; the shard follows from the IPv6 client (IPv6→IPv4) or the IPv4 port (IPv4→IPv6).
//!
//! The common packets (TCP, UDP, ICMP echo) are translated in place: the new header is
//! written over the old one and the payload is not moved ([`translate::v6_to_v4_in_place`]).
//! ICMP errors, whose quoted packet changes size, go through a caller-provided scratch buffer
//! and are copied back once.
//!
//! Not yet: reassembly or holding of out-of-order fragments (non-first fragments carry no
//! ports and are refused with [`Error::Fragment`]), IPv4→IPv6 packets without DF that need
//! IPv6 fragmentation ([`TranslateError::NeedsFragmentation`]).

use crate::addr::Prefix;
use crate::state::{self, Event, Proto, Router, Shard, TableError, TcpFlags};
use crate::translate::{self, TranslateError};
use gate64_wire::{checksum, icmpv4, icmpv6, ipv4, ipv6, tcp, udp};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

const V4_HDR: usize = ipv4::HEADER_LEN;
const V6_HDR: usize = ipv6::HEADER_LEN;
const ICMP_HDR: usize = icmpv4::HEADER_LEN;
const PROTO_ICMP: u8 = ipv4::PROTO_ICMP;
const PROTO_TCP: u8 = ipv4::PROTO_TCP;
const PROTO_UDP: u8 = ipv4::PROTO_UDP;
const NH_ICMPV6: u8 = ipv6::NH_ICMPV6;
/// Room an IPv4→IPv6 ICMP error needs before the packet: 20 more bytes in each of the outer
/// and the quoted header.
pub const ERROR_GROWTH: usize = 40;
/// Timer entries one [`Nat64::handle_timeout`] call visits per shard at most. At the
/// workers' tick (500 ms) that expires up to 4,096 sessions per second and shard (65,536 over
/// the daemon's 16 shards), in slices of a few milliseconds of lock time where one call used
/// to hold a shard for as long as every due session took (`benches/expiry.rs`).
pub const EXPIRY_VISITS_PER_TICK: usize = 2048;

/// Everything [`Nat64`] needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Pref64 (RFC 6052).
    pub prefix: Prefix,
    /// The tables: pool4, ports, shards, timers, filtering, limits.
    pub table: state::Config,
    /// Header translation: MTUs, traffic class, zero UDP checksums.
    pub translate: translate::Config,
}

/// Why a packet was not translated.
///
/// Exhaustive on purpose: the dataplane maps each to a drop reason by name, so a new one
/// must be given its reason there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The header translation refused it (some variants ask for an ICMP error back).
    #[error(transparent)]
    Translate(#[from] TranslateError),
    /// The table refused it: no binding, pool exhausted, session limit, no TCP session.
    #[error(transparent)]
    Table(#[from] TableError),
    /// The destination is not inside Pref64 (IPv6) or pool4 (IPv4).
    #[error("destination is not translated by this NAT64")]
    NotOurs,
    /// The IPv4 address inside Pref64 may not be translated to: unspecified, loopback, link
    /// local, multicast, broadcast, or non-global under the Well-Known Prefix.
    #[error("embedded IPv4 address may not be translated to")]
    BadAddress,
    /// A protocol without a table (RFC 6146 handles TCP, UDP and ICMP queries).
    #[error("protocol not handled by the NAT64")]
    Protocol,
    /// A non-first fragment: its ports are in another packet (no reassembly yet).
    #[error("non-first fragment")]
    Fragment,
}

impl Error {
    /// The ICMPv6 error to send back to the client when this stopped one of its IPv6 packets
    /// ([`Nat64::v6_to_v4`]), or `None` for a silent drop: Time Exceeded (RFC 7915 §5.1),
    /// Packet Too Big (§5.1), Parameter Problem (§5.1), Destination Unreachable 1/1 for an
    /// extension header after the Fragment header, 1/3 when the pool is exhausted
    /// (RFC 6146 §3.5.1.1, §3.5.2.1), and 1/1 (administratively prohibited, RFC 4443 §3.1)
    /// when the client is at its own limit (RFC 6888 REQ-4: refusals for a quota are
    /// answered with Destination Unreachable).
    pub fn icmpv6_reply(&self) -> Option<icmpv6::ErrorRepr> {
        use icmpv6::ErrorRepr as E;
        Some(match *self {
            Error::Translate(TranslateError::TimeExceeded) => E::TimeExceeded { code: 0 },
            Error::Translate(TranslateError::PacketTooBig { mtu }) => E::PacketTooBig { mtu },
            Error::Translate(TranslateError::ParameterProblem { pointer }) => {
                E::ParamProblem { code: 0, pointer }
            }
            Error::Translate(TranslateError::HeaderAfterFragment) => E::DstUnreachable { code: 1 },
            Error::Table(TableError::PoolExhausted) => E::DstUnreachable { code: 3 },
            Error::Table(TableError::ClientSessionLimit | TableError::ClientPortLimit) => {
                E::DstUnreachable { code: 1 }
            }
            _ => return None,
        })
    }

    /// The ICMPv4 error to send back to the IPv4 source when this stopped one of its packets
    /// ([`Nat64::v4_to_v6`]), or `None` for a silent drop: Time Exceeded (RFC 7915 §4.1),
    /// Fragmentation Needed (§4.1), source route (3/5, §4.1), zero UDP checksum (3/13,
    /// §4.5), and port unreachable (3/3) without a binding (RFC 6146 §3.5.1).
    pub fn icmpv4_reply(&self) -> Option<icmpv4::ErrorRepr> {
        use icmpv4::ErrorRepr as E;
        Some(match *self {
            Error::Translate(TranslateError::TimeExceeded) => E::TimeExceeded { code: 0 },
            Error::Translate(TranslateError::FragmentationNeeded { mtu }) => E::FragNeeded { mtu },
            Error::Translate(TranslateError::SourceRoute) => E::DstUnreachable { code: 5 },
            Error::Translate(TranslateError::UdpZeroChecksum) => E::DstUnreachable { code: 13 },
            Error::Table(TableError::NoBinding) => E::DstUnreachable { code: 3 },
            _ => return None,
        })
    }
}

/// Where the translated packet is: `buf[start..end]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translated {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// RFC 6146 §3.8 hairpinning: an IPv6 client sent to Pref64 + one of our own pool4
    /// addresses; the result is an IPv6 packet for another IPv6 client, not an IPv4 packet.
    pub hairpin: bool,
}

/// The NAT64: Pref64, pool4 and the sharded tables.
#[derive(Debug)]
pub struct Nat64 {
    prefix: Prefix,
    /// pool4 addresses, sorted for binary search.
    pool: Vec<Ipv4Addr>,
    /// Transport addresses per protocol: addresses × ports.
    capacity: u64,
    xlat: translate::Config,
    router: Router,
    shards: Vec<Mutex<Shard>>,
}

/// The transport part of a packet's flow, as the tables see it.
#[derive(Debug, Clone, Copy)]
struct Flow {
    proto: Proto,
    /// Offset of the transport header in the packet.
    l4: usize,
    src_port: u16,
    dst_port: u16,
    flags: TcpFlags,
}

impl Nat64 {
    /// Builds the tables; fails on an unusable table configuration.
    pub fn new(s: Settings) -> Result<Nat64, TableError> {
        let mut pool = s.table.pool4.clone();
        pool.sort_unstable();
        pool.dedup();
        let (lo, hi) = (s.table.ports.0.max(1), s.table.ports.1);
        let capacity = pool.len() as u64 * u64::from(hi.saturating_sub(lo)).saturating_add(1);
        let (router, shards) = state::Table::new(s.table)?.into_parts();
        Ok(Nat64 {
            prefix: s.prefix,
            pool,
            capacity,
            xlat: s.translate,
            router,
            shards: shards.into_iter().map(Mutex::new).collect(),
        })
    }

    /// Pref64.
    pub fn prefix(&self) -> &Prefix {
        &self.prefix
    }

    /// True when `a` is one of pool4's addresses.
    pub fn in_pool(&self, a: Ipv4Addr) -> bool {
        self.pool.binary_search(&a).is_ok()
    }

    /// pool4's addresses.
    pub fn pool(&self) -> &[Ipv4Addr] {
        &self.pool
    }

    /// IPv4 transport addresses per protocol (pool4 addresses × ports): with
    /// [`state::Stats::bib_by_proto`] this gives the pool's use.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    fn shard(&self, i: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding a shard lock cannot leave a shard half-updated in a way later
        // packets could not cope with, so keep serving rather than poison every worker.
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Translates the IPv6 packet `buf[start..end]` (from a client, to Pref64) into IPv4,
    /// creating or refreshing its session. `scratch` (at least 1280 bytes) is used for ICMP
    /// errors only. The result lies inside `buf[start..end]`.
    pub fn v6_to_v4(
        &self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
        scratch: &mut [u8],
    ) -> Result<Translated, Error> {
        let pkt = buf
            .get_mut(start..end)
            .ok_or(Error::Translate(TranslateError::Truncated))?;
        let h = translate::parse_v6(pkt, false)?;
        let (src6, dst6) = translate::v6_addrs(pkt);
        let z4 = self.remote_v4(&dst6)?;
        if h.frag.is_some_and(|f| f.offset != 0) {
            return Err(Error::Fragment);
        }
        let u = pkt.get(h.off..).unwrap_or_default();
        if h.proto == NH_ICMPV6 && u.first().is_some_and(|&t| icmpv6::is_error(t)) {
            let n = self.v6_error_to_v4(pkt, &h, src6, z4, scratch)?;
            pkt.get_mut(..n)
                .ok_or(Error::Translate(TranslateError::BufferTooSmall))?
                .copy_from_slice(&scratch[..n]);
            return Ok(Translated {
                start,
                end: start + n,
                hairpin: false,
            });
        }
        let flow = flow_v6(h.proto, h.off, u)?;
        let x = (src6, flow.src_port);
        let z = (z4, flow.dst_port_v6());
        let t = {
            let mut shard = self.shard(self.router.shard_of_v6(&src6));
            shard.handle_v6(now, flow.proto, x, z, flow.flags)?
        };
        rewrite_port(pkt, flow, true, t.1);
        let (at, len) = translate::v6_to_v4_in_place(&self.xlat, pkt, t.0, z4)?;
        let out = Translated {
            start: start + at,
            end: start + at + len,
            hairpin: false,
        };
        if self.in_pool(z4) {
            // §3.8: the IPv4 packet is ours; take it through the IPv4→IPv6 path at once.
            let back = self.v4_to_v6(now, buf, out.start, out.end, scratch)?;
            return Ok(Translated {
                hairpin: true,
                ..back
            });
        }
        Ok(out)
    }

    /// Translates the IPv4 packet `buf[start..end]` (to pool4) into IPv6 for the client that
    /// owns the binding. The IPv6 packet starts up to 28 bytes before `start` (up to
    /// [`ERROR_GROWTH`] for ICMP errors), so leave that much headroom; `scratch` (at least
    /// 1280 bytes) serves ICMP errors.
    pub fn v4_to_v6(
        &self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
        scratch: &mut [u8],
    ) -> Result<Translated, Error> {
        let pkt = buf
            .get(start..end)
            .ok_or(Error::Translate(TranslateError::Truncated))?;
        let h = translate::parse_v4(pkt, false)?;
        let (z4, t4) = translate::v4_addrs(pkt);
        if !self.in_pool(t4) {
            return Err(Error::NotOurs);
        }
        if h.frag_offset != 0 {
            return Err(Error::Fragment);
        }
        let u = pkt.get(h.ihl..h.total).unwrap_or_default();
        if h.proto == PROTO_ICMP && u.first().is_some_and(|&t| icmpv4::is_error(t)) {
            let n = self.v4_error_to_v6(pkt, z4, t4, scratch)?;
            let at = start
                .checked_sub(ERROR_GROWTH)
                .ok_or(Error::Translate(TranslateError::BufferTooSmall))?;
            buf.get_mut(at..at + n)
                .ok_or(Error::Translate(TranslateError::BufferTooSmall))?
                .copy_from_slice(&scratch[..n]);
            return Ok(Translated {
                start: at,
                end: at + n,
                hairpin: false,
            });
        }
        let flow = flow_v4(h.proto, h.ihl, u)?;
        let z = (z4, flow.src_port_v4());
        let t = (t4, flow.dst_port);
        let x = {
            let mut shard = self.shard(self.router.shard_of_v4(t.1));
            shard.handle_v4(now, flow.proto, z, t, flow.flags)?
        };
        let src6 = self.prefix.embed(z4).ok_or(Error::BadAddress)?;
        let pkt = buf
            .get_mut(start..end)
            .ok_or(Error::Translate(TranslateError::Truncated))?;
        rewrite_port(pkt, flow, false, x.1);
        let (at, len) = translate::v4_to_v6_in_place(&self.xlat, buf, start, src6, x.0)?;
        Ok(Translated {
            start: at,
            end: at + len,
            hairpin: false,
        })
    }

    /// The IPv4 address a client reaches at `dst6`.
    fn remote_v4(&self, dst6: &Ipv6Addr) -> Result<Ipv4Addr, Error> {
        if !self.prefix.contains(dst6) {
            return Err(Error::NotOurs);
        }
        let z = self.prefix.extract(dst6).ok_or(Error::BadAddress)?;
        if !translatable_v4(z) {
            return Err(Error::BadAddress);
        }
        Ok(z)
    }

    /// ICMPv6 error from client X' about a packet (Y',y)→(X',x) it got from us: outer
    /// X'→Y' becomes T→Z, the quoted packet (Y',y)→(X',x) becomes (Z,y)→(T,t).
    fn v6_error_to_v4(
        &self,
        pkt: &[u8],
        h: &translate::V6Hdr,
        x6: Ipv6Addr,
        z4: Ipv4Addr,
        scratch: &mut [u8],
    ) -> Result<usize, Error> {
        let inner = pkt.get(h.off + ICMP_HDR..).unwrap_or_default();
        let ih = translate::parse_v6(inner, true)?;
        let (_, inner_dst) = translate::v6_addrs(inner);
        if inner_dst != x6 {
            return Err(Error::Translate(TranslateError::Untranslatable));
        }
        let iu = inner.get(ih.off..).unwrap_or_default();
        let flow = flow_v6_quoted(ih.proto, iu)?;
        // The quoted packet went to the client: its destination port is the client's x.
        let x = (x6, flow.dst_port);
        let t = self
            .shard(self.router.shard_of_v6(&x6))
            .bib_v6(flow.proto, x)
            .ok_or(Error::Table(TableError::NoBinding))?;
        let prefix = self.prefix;
        let map = move |s: Ipv6Addr, d: Ipv6Addr| {
            (d == x6)
                .then(|| prefix.extract(&s))
                .flatten()
                .map(|s4| (s4, t.0))
        };
        let n = translate::v6_to_v4_with(&self.xlat, pkt, t.0, z4, &map, scratch)?;
        // Quoted IPv4 packet: at 28 (outer 20 + ICMP 8); its destination port x → t.
        let out = scratch.get_mut(..n).unwrap_or_default();
        if let Some(q) = out.get_mut(V4_HDR + ICMP_HDR..) {
            let ihl = ipv4::Packet::new_checked_quoted(&q[..]).map_or(V4_HDR, |p| p.header_len());
            if let Some(l4) = q.get_mut(ihl..) {
                rewrite_quoted(l4, flow.proto, false, t.1);
            }
        }
        refresh_icmp4_checksum(out);
        Ok(n)
    }

    /// ICMPv4 error from Z_r (the host or a router) about a packet (T,t)→(Z,z) we sent:
    /// outer Z_r→T becomes Pref64+Z_r→X', the quoted packet becomes (X',x)→(Pref64+Z,z).
    fn v4_error_to_v6(
        &self,
        pkt: &[u8],
        zr: Ipv4Addr,
        t4: Ipv4Addr,
        scratch: &mut [u8],
    ) -> Result<usize, Error> {
        let h = translate::parse_v4(pkt, false)?;
        let inner = pkt.get(h.ihl + ICMP_HDR..h.total).unwrap_or_default();
        let ih = translate::parse_v4(inner, true)?;
        let (inner_src, inner_dst) = translate::v4_addrs(inner);
        if inner_src != t4 || ih.frag_offset != 0 {
            return Err(Error::Translate(TranslateError::Untranslatable));
        }
        let iu = inner.get(ih.ihl..).unwrap_or_default();
        let flow = flow_v4_quoted(ih.proto, iu)?;
        // The quoted packet came from us: its source port is the pool port t.
        let t = (t4, flow.src_port);
        let x = self
            .shard(self.router.shard_of_v4(t.1))
            .bib_v4(flow.proto, t)
            .ok_or(Error::Table(TableError::NoBinding))?;
        let src6 = self.prefix.embed(zr).ok_or(Error::BadAddress)?;
        let dst_inner = self.prefix.embed(inner_dst).ok_or(Error::BadAddress)?;
        let map =
            move |s: Ipv4Addr, d: Ipv4Addr| (s == t4 && d == inner_dst).then_some((x.0, dst_inner));
        let n = translate::v4_to_v6_with(&self.xlat, pkt, src6, x.0, &map, scratch)?;
        let out = scratch.get_mut(..n).unwrap_or_default();
        // Quoted IPv6 packet at 48 (outer 40 + ICMPv6 8): its source port t → x.
        if let Some(q) = out.get_mut(V6_HDR + ICMP_HDR..)
            && let Ok(qh) = translate::parse_v6(q, true)
            && let Some(l4) = q.get_mut(qh.off..)
        {
            rewrite_quoted(l4, flow.proto, true, x.1);
        }
        refresh_icmp6_checksum(out);
        Ok(n)
    }

    /// Expires sessions in the shards of part `part` of `of` (one part per worker thread),
    /// at most [`EXPIRY_VISITS_PER_TICK`] timer entries per shard, so one call holds a shard's
    /// lock for bounded time; what is left is due at the next call. True when some shard has
    /// due entries left.
    pub fn handle_timeout(&self, now: Instant, part: usize, of: usize) -> bool {
        let mut more = false;
        for i in (0..self.shards.len()).filter(|i| i % of.max(1) == part) {
            more |= self
                .shard(i)
                .handle_timeout_bounded(now, EXPIRY_VISITS_PER_TICK);
        }
        more
    }

    /// Hands the queued compliance events of part `part` of `of` to `f`.
    pub fn drain_events(&self, part: usize, of: usize, mut f: impl FnMut(Event)) {
        for i in (0..self.shards.len()).filter(|i| i % of.max(1) == part) {
            let mut shard = self.shard(i);
            while let Some(e) = shard.poll_event() {
                f(e);
            }
        }
    }

    /// Sum of the shards' counters (takes each shard lock briefly).
    pub fn stats(&self) -> state::Stats {
        (0..self.shards.len()).fold(state::Stats::default(), |a, i| {
            a.plus(&self.shard(i).stats())
        })
    }
}

impl Flow {
    /// The remote's "port" on the IPv6 side: ICMP sessions use 0 (the identifier is the
    /// client's port).
    fn dst_port_v6(&self) -> u16 {
        if self.proto == Proto::Icmp {
            0
        } else {
            self.dst_port
        }
    }

    /// The remote's port on the IPv4 side (ICMP: 0, as on the IPv6 side).
    fn src_port_v4(&self) -> u16 {
        if self.proto == Proto::Icmp {
            0
        } else {
            self.src_port
        }
    }
}

/// IPv4 destinations the NAT64 never translates to (RFC 6052 §3.1 leaves the choice; Jool
/// and TAYGA refuse these): 0/8, loopback, link local, multicast, class E and broadcast.
fn translatable_v4(a: Ipv4Addr) -> bool {
    let o = a.octets();
    !(o[0] == 0 || a.is_loopback() || a.is_link_local() || a.is_multicast() || o[0] >= 240)
}

fn read16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// TCP/UDP ports (and TCP flags) or the ICMPv6 echo identifier of an IPv6 packet's transport
/// header `u`.
fn flow_v6(proto: u8, l4: usize, u: &[u8]) -> Result<Flow, Error> {
    match proto {
        PROTO_TCP | PROTO_UDP => ports(proto, l4, u),
        NH_ICMPV6 => match u.first() {
            Some(128 | 129) => echo(l4, u),
            _ => Err(Error::Translate(TranslateError::Untranslatable)),
        },
        _ => Err(Error::Protocol),
    }
}

fn flow_v4(proto: u8, l4: usize, u: &[u8]) -> Result<Flow, Error> {
    match proto {
        PROTO_TCP | PROTO_UDP => ports(proto, l4, u),
        PROTO_ICMP => match u.first() {
            Some(8 | 0) => echo(l4, u),
            _ => Err(Error::Translate(TranslateError::Untranslatable)),
        },
        _ => Err(Error::Protocol),
    }
}

/// A packet quoted in an ICMP error: only its first 8 transport bytes are guaranteed.
fn flow_v6_quoted(proto: u8, u: &[u8]) -> Result<Flow, Error> {
    match proto {
        PROTO_TCP | PROTO_UDP => quoted_ports(proto, u),
        NH_ICMPV6 if matches!(u.first(), Some(128 | 129)) => echo(0, u),
        _ => Err(Error::Translate(TranslateError::Untranslatable)),
    }
}

fn flow_v4_quoted(proto: u8, u: &[u8]) -> Result<Flow, Error> {
    match proto {
        PROTO_TCP | PROTO_UDP => quoted_ports(proto, u),
        PROTO_ICMP if matches!(u.first(), Some(8 | 0)) => echo(0, u),
        _ => Err(Error::Translate(TranslateError::Untranslatable)),
    }
}

fn ports(proto: u8, l4: usize, u: &[u8]) -> Result<Flow, Error> {
    let (proto, src_port, dst_port, flags) = if proto == PROTO_TCP {
        // Only the fixed header is needed here; options are the endpoints' business.
        let t = u.get(..tcp::HEADER_LEN).ok_or(TranslateError::Truncated)?;
        let t = tcp::Packet::new_unchecked(t);
        let flags = TcpFlags::from_byte(t.flags());
        (Proto::Tcp, t.src_port(), t.dst_port(), flags)
    } else {
        let d = u.get(..udp::HEADER_LEN).ok_or(TranslateError::Truncated)?;
        let d = udp::Packet::new_unchecked(d);
        (Proto::Udp, d.src_port(), d.dst_port(), TcpFlags::default())
    };
    Ok(Flow {
        proto,
        l4,
        src_port,
        dst_port,
        flags,
    })
}

/// The ports of a quoted transport header: only its first 8 bytes are guaranteed (RFC 792).
fn quoted_ports(proto: u8, u: &[u8]) -> Result<Flow, Error> {
    let d = udp::Packet::new_unchecked(u.get(..4).ok_or(TranslateError::Truncated)?);
    Ok(Flow {
        proto: if proto == PROTO_TCP {
            Proto::Tcp
        } else {
            Proto::Udp
        },
        l4: 0,
        src_port: d.src_port(),
        dst_port: d.dst_port(),
        flags: TcpFlags::default(),
    })
}

fn echo(l4: usize, u: &[u8]) -> Result<Flow, Error> {
    let m = icmpv4::Packet::new_checked(u).map_err(TranslateError::from)?;
    let id = m.echo_ident();
    Ok(Flow {
        proto: Proto::Icmp,
        l4,
        src_port: id,
        dst_port: id,
        flags: TcpFlags::default(),
    })
}

/// Rewrites the source (`src`) or destination port of the packet's transport header to
/// `new`, updating its checksum incrementally (RFC 1624). ICMP echo: the identifier.
fn rewrite_port(pkt: &mut [u8], flow: Flow, src: bool, new: u16) {
    if let Some(l4) = pkt.get_mut(flow.l4..) {
        rewrite_l4(l4, flow.proto, src, new, true);
    }
}

/// Port rewrite inside a quoted packet, which may be cut short of its checksum field.
fn rewrite_quoted(l4: &mut [u8], proto: Proto, src: bool, new: u16) {
    rewrite_l4(l4, proto, src, new, false);
}

fn rewrite_l4(l4: &mut [u8], proto: Proto, src: bool, new: u16, zero_udp_means_none: bool) {
    let port = |f: core::ops::Range<usize>, d: core::ops::Range<usize>| {
        if src { f.start } else { d.start }
    };
    let (at, csum) = match proto {
        Proto::Tcp => (
            port(tcp::field::SRC_PORT, tcp::field::DST_PORT),
            tcp::field::CHECKSUM.start,
        ),
        Proto::Udp => (
            port(udp::field::SRC_PORT, udp::field::DST_PORT),
            udp::field::CHECKSUM.start,
        ),
        Proto::Icmp => (
            icmpv4::field::ECHO_IDENT.start,
            icmpv4::field::CHECKSUM.start,
        ),
    };
    let Some(old) = read16(l4, at) else {
        return;
    };
    if old == new {
        return;
    }
    l4[at..at + 2].copy_from_slice(&new.to_be_bytes());
    let Some(c) = read16(l4, csum) else {
        return;
    };
    if proto == Proto::Udp && c == 0 && zero_udp_means_none {
        return; // IPv4 UDP without checksum stays without one
    }
    let mut n = checksum::adjust(c, u32::from(old), u32::from(new));
    if proto == Proto::Udp {
        n = checksum::udp_field(n);
    }
    l4[csum..csum + 2].copy_from_slice(&n.to_be_bytes());
}

/// Recomputes the ICMPv4 checksum of the IPv4 packet `p` (20-byte header).
fn refresh_icmp4_checksum(p: &mut [u8]) {
    if let Some(m) = p.get_mut(V4_HDR..)
        && let Ok(mut m) = icmpv4::Packet::new_checked(m)
    {
        m.fill_checksum(0);
    }
}

/// Recomputes the ICMPv6 checksum of the IPv6 packet `p` (no extension headers).
fn refresh_icmp6_checksum(p: &mut [u8]) {
    let Some((src, dst)) = ipv6::peek_addrs(p) else {
        return;
    };
    if let Ok(mut m) = icmpv6::Packet::new_checked(&mut p[V6_HDR..]) {
        let len = m.data().len() + ICMP_HDR;
        m.fill_checksum(checksum::pseudo_header_v6(
            &src, &dst, NH_ICMPV6, len as u32,
        ));
    }
}

/// Writes an ICMPv6 error (RFC 4443) from `src` to `dst` quoting `offending` into `out`,
/// capped at 1280 bytes (RFC 4443 §2.4 (c)); returns its length (0 when `out` is too small).
pub fn emit_icmpv6_error(
    out: &mut [u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    error: &icmpv6::ErrorRepr,
    offending: &[u8],
) -> usize {
    let (t, c, rest) = error.type_code_rest();
    write_icmpv6_error(out, src, dst, (t, c, rest), offending)
}

/// Writes an ICMPv4 error (RFC 792) from `src` to `dst` quoting `offending` into `out`,
/// capped at 576 bytes (RFC 1812 §4.3.2.3); returns its length (0 when `out` is too small).
pub fn emit_icmpv4_error(
    out: &mut [u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    error: &icmpv4::ErrorRepr,
    offending: &[u8],
) -> usize {
    let (t, c, rest) = error.type_code_rest();
    write_icmpv4_error(out, src, dst, (t, c, rest), offending)
}

fn write_icmpv6_error(
    out: &mut [u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    (t, c, rest): (u8, u8, [u8; 4]),
    offending: &[u8],
) -> usize {
    let cap = out.len().min(translate::IPV6_MIN_MTU as usize);
    let Some(room) = cap.checked_sub(V6_HDR + ICMP_HDR) else {
        return 0;
    };
    let q = offending.len().min(room);
    let total = V6_HDR + ICMP_HDR + q;
    let o = &mut out[..total];
    let ip = ipv6::Repr {
        src,
        dst,
        next_header: NH_ICMPV6,
        payload_len: (total - V6_HDR) as u16,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    // `o` holds the 40 + 8 header bytes (room checked above).
    let _ = ip.emit(o);
    let m = &mut o[V6_HDR..];
    m[..4].copy_from_slice(&[t, c, 0, 0]);
    m[icmpv6::field::REST].copy_from_slice(&rest);
    m[ICMP_HDR..].copy_from_slice(&offending[..q]);
    refresh_icmp6_checksum(o);
    total
}

fn write_icmpv4_error(
    out: &mut [u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    (t, c, rest): (u8, u8, [u8; 4]),
    offending: &[u8],
) -> usize {
    let cap = out.len().min(translate::ICMPV4_ERROR_MAX);
    let Some(room) = cap.checked_sub(V4_HDR + ICMP_HDR) else {
        return 0;
    };
    let q = offending.len().min(room);
    let total = V4_HDR + ICMP_HDR + q;
    let o = &mut out[..total];
    let ip = ipv4::Repr {
        src,
        dst,
        protocol: PROTO_ICMP,
        payload_len: (total - V4_HDR) as u16,
        ttl: 64,
        tos: 0,
        ident: 0,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
    };
    let _ = ip.emit(o);
    let m = &mut o[V4_HDR..];
    m[..4].copy_from_slice(&[t, c, 0, 0]);
    m[icmpv4::field::REST].copy_from_slice(&rest);
    m[ICMP_HDR..].copy_from_slice(&offending[..q]);
    refresh_icmp4_checksum(o);
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    const PREF: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x64, 0, 0, 0, 0, 0, 0);
    const X1: Ipv6Addr = Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, 0x8000, 0x63bf, 0x3fff, 0xfdd2);
    const X2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xaaaa, 1, 0, 0, 0, 2);
    const T: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
    const Z: Ipv4Addr = Ipv4Addr::new(10, 20, 0, 5);
    const HEAD: usize = 64;

    fn nat(shards: usize) -> Nat64 {
        let mut table = state::Config::new(vec![T]);
        table.shards = shards;
        table.hash_key = 3;
        table.ports = (61001, 65535);
        Nat64::new(Settings {
            prefix: Prefix::new(PREF, 96).unwrap(),
            table,
            translate: translate::Config::default(),
        })
        .unwrap()
    }

    fn z6() -> Ipv6Addr {
        Prefix::new(PREF, 96).unwrap().embed(Z).unwrap()
    }

    fn v6(src: Ipv6Addr, dst: Ipv6Addr, nh: u8, upper: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&(upper.len() as u16).to_be_bytes());
        p[6] = nh;
        p[7] = 64;
        p[8..24].copy_from_slice(&src.octets());
        p[24..40].copy_from_slice(&dst.octets());
        let mut u = upper.to_vec();
        let at = match nh {
            PROTO_TCP => 16,
            PROTO_UDP => 6,
            _ => 2,
        };
        let c = checksum::upper_layer_v6(&src, &dst, nh, &u);
        u[at..at + 2].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(&u);
        p
    }

    fn v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, upper: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((20 + upper.len()) as u16).to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&src.octets());
        p[16..20].copy_from_slice(&dst.octets());
        let c = checksum::finish(checksum::sum(&p, 0));
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let mut u = upper.to_vec();
        let at = if proto == PROTO_TCP {
            16
        } else if proto == PROTO_UDP {
            6
        } else {
            2
        };
        let c = v4_upper_checksum(src, dst, proto, &u);
        u[at..at + 2].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(&u);
        p
    }

    fn v4_upper_checksum(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, u: &[u8]) -> u16 {
        if proto == PROTO_ICMP {
            return checksum::finish(checksum::sum(u, 0));
        }
        let mut acc = checksum::sum(&src.octets(), 0);
        acc = checksum::sum(&dst.octets(), acc);
        acc += u32::from(proto) + u.len() as u32;
        checksum::finish(checksum::sum(u, acc))
    }

    fn udp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
        let mut u = vec![0u8; 8];
        u[0..2].copy_from_slice(&sport.to_be_bytes());
        u[2..4].copy_from_slice(&dport.to_be_bytes());
        u[4..6].copy_from_slice(&((8 + data.len()) as u16).to_be_bytes());
        u.extend_from_slice(data);
        u
    }

    fn tcp(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[12] = 0x50;
        t[13] = flags;
        t.extend_from_slice(b"payload");
        t
    }

    fn echo(kind: u8, id: u16) -> Vec<u8> {
        let mut e = vec![kind, 0, 0, 0];
        e.extend_from_slice(&id.to_be_bytes());
        e.extend_from_slice(&[0, 1, 0xaa, 0xbb]);
        e
    }

    /// The packet at HEAD in a buffer with headroom.
    fn framed(p: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; HEAD];
        b.extend_from_slice(p);
        b.resize(HEAD + p.len() + 64, 0);
        b
    }

    fn run6(n: &Nat64, now: Instant, p: &[u8]) -> Result<Vec<u8>, Error> {
        let mut b = framed(p);
        let mut scratch = [0u8; 1500];
        let t = n.v6_to_v4(now, &mut b, HEAD, HEAD + p.len(), &mut scratch)?;
        Ok(b[t.start..t.end].to_vec())
    }

    fn run4(n: &Nat64, now: Instant, p: &[u8]) -> Result<Vec<u8>, Error> {
        let mut b = framed(p);
        let mut scratch = [0u8; 1500];
        let t = n.v4_to_v6(now, &mut b, HEAD, HEAD + p.len(), &mut scratch)?;
        Ok(b[t.start..t.end].to_vec())
    }

    fn v4_valid(p: &[u8]) -> bool {
        let ihl = usize::from(p[0] & 0xf) * 4;
        let hdr_ok = checksum::finish(checksum::sum(&p[..ihl], 0)) == 0;
        let (s, d) = translate::v4_addrs(p);
        let u = &p[ihl..];
        let upper_ok = if p[9] == PROTO_ICMP {
            checksum::finish(checksum::sum(u, 0)) == 0
        } else {
            let mut acc = checksum::sum(&s.octets(), 0);
            acc = checksum::sum(&d.octets(), acc);
            acc += u32::from(p[9]) + u.len() as u32;
            checksum::finish(checksum::sum(u, acc)) == 0
        };
        hdr_ok && upper_ok
    }

    fn v6_valid(p: &[u8]) -> bool {
        let (s, d) = translate::v6_addrs(p);
        let len = u32::try_from(p.len() - 40).unwrap();
        checksum::finish(checksum::sum(
            &p[40..],
            checksum::pseudo_header_v6(&s, &d, p[6], len),
        )) == 0
    }

    #[test]
    fn udp_round_trip_rewrites_ports_and_checksums() {
        let n = nat(4);
        let now = Instant::now();
        let out = run6(&n, now, &v6(X1, z6(), PROTO_UDP, &udp(40000, 53, b"query"))).unwrap();
        assert_eq!(out.len(), 20 + 8 + 5);
        assert_eq!(translate::v4_addrs(&out), (T, Z));
        let t = u16::from_be_bytes([out[20], out[21]]);
        assert!((61001..=65535).contains(&t), "pool port, got {t}");
        assert_eq!(u16::from_be_bytes([out[22], out[23]]), 53);
        assert_eq!(out[8], 63, "TTL = hop limit - 1");
        assert!(v4_valid(&out));
        // The reply reaches the client at its own port.
        let back = run4(&n, now, &v4(Z, T, PROTO_UDP, &udp(53, t, b"answer"))).unwrap();
        assert_eq!(translate::v6_addrs(&back), (z6(), X1));
        assert_eq!(u16::from_be_bytes([back[42], back[43]]), 40000);
        assert!(v6_valid(&back));
        let s = n.stats();
        assert_eq!((s.bib_by_proto[1], s.sessions_by_proto[1]), (1, 1));
    }

    #[test]
    fn rfc6146_3_5_1_endpoint_independent_mapping_across_remotes() {
        let n = nat(8);
        let now = Instant::now();
        let other = Prefix::new(PREF, 96)
            .unwrap()
            .embed(Ipv4Addr::new(10, 9, 9, 9))
            .unwrap();
        let a = run6(&n, now, &v6(X1, z6(), PROTO_UDP, &udp(5000, 53, b""))).unwrap();
        let b = run6(&n, now, &v6(X1, other, PROTO_UDP, &udp(5000, 53, b""))).unwrap();
        assert_eq!(a[20..22], b[20..22], "same (T,t) for every remote");
        assert_eq!(n.stats().sessions, 2);
        assert_eq!(n.stats().bib_entries, 1);
    }

    #[test]
    fn tcp_handshake_through_both_directions() {
        let n = nat(4);
        let now = Instant::now();
        let syn = run6(&n, now, &v6(X1, z6(), PROTO_TCP, &tcp(33000, 80, 0x02))).unwrap();
        assert!(v4_valid(&syn));
        let t = u16::from_be_bytes([syn[20], syn[21]]);
        let synack = run4(&n, now, &v4(Z, T, PROTO_TCP, &tcp(80, t, 0x12))).unwrap();
        assert!(v6_valid(&synack));
        assert_eq!(u16::from_be_bytes([synack[42], synack[43]]), 33000);
        // A segment for a port nobody holds: no binding.
        assert_eq!(
            run4(&n, now, &v4(Z, T, PROTO_TCP, &tcp(80, t ^ 2, 0x10))),
            Err(Error::Table(TableError::NoBinding))
        );
    }

    #[test]
    fn tcp_non_syn_without_session_is_refused() {
        let n = nat(1);
        assert_eq!(
            run6(
                &n,
                Instant::now(),
                &v6(X1, z6(), PROTO_TCP, &tcp(1, 80, 0x10))
            ),
            Err(Error::Table(TableError::NoSession))
        );
    }

    #[test]
    fn icmp_echo_identifier_is_mapped_both_ways() {
        let n = nat(4);
        let now = Instant::now();
        let req = run6(&n, now, &v6(X1, z6(), NH_ICMPV6, &echo(128, 0x1234))).unwrap();
        assert_eq!(req[9], PROTO_ICMP);
        assert_eq!(req[20], 8, "ICMPv4 echo request");
        assert!(v4_valid(&req));
        let id = u16::from_be_bytes([req[24], req[25]]);
        let rep = run4(&n, now, &v4(Z, T, PROTO_ICMP, &echo(0, id))).unwrap();
        assert_eq!(rep[40], 129);
        assert_eq!(u16::from_be_bytes([rep[44], rep[45]]), 0x1234);
        assert!(v6_valid(&rep));
    }

    #[test]
    fn icmpv4_port_unreachable_reaches_the_client_with_its_own_port() {
        let n = nat(4);
        let now = Instant::now();
        let sent = run6(&n, now, &v6(X1, z6(), PROTO_UDP, &udp(40000, 9, b"probe"))).unwrap();
        // The IPv4 host answers 3/3 quoting what it got.
        let mut err = vec![3, 3, 0, 0, 0, 0, 0, 0];
        err.extend_from_slice(&sent);
        let icmp = v4(Z, T, PROTO_ICMP, &err);
        let out = run4(&n, now, &icmp).unwrap();
        assert_eq!(translate::v6_addrs(&out), (z6(), X1));
        assert_eq!((out[40], out[41]), (1, 4), "ICMPv6 port unreachable");
        assert!(v6_valid(&out));
        let quoted = &out[48..];
        assert_eq!(translate::v6_addrs(quoted), (X1, z6()));
        assert_eq!(u16::from_be_bytes([quoted[40], quoted[41]]), 40000);
        // The quoted UDP checksum still verifies after the port went back.
        assert!(v6_valid(quoted));
    }

    #[test]
    fn icmpv6_error_from_client_reaches_the_ipv4_host_with_the_pool_port() {
        let n = nat(4);
        let now = Instant::now();
        let sent = run6(&n, now, &v6(X1, z6(), PROTO_UDP, &udp(40000, 9, b"x"))).unwrap();
        let t = u16::from_be_bytes([sent[20], sent[21]]);
        let inbound = run4(&n, now, &v4(Z, T, PROTO_UDP, &udp(9, t, b"y"))).unwrap();
        let mut err = vec![1, 4, 0, 0, 0, 0, 0, 0];
        err.extend_from_slice(&inbound);
        let out = run6(&n, now, &v6(X1, z6(), NH_ICMPV6, &err)).unwrap();
        assert_eq!(translate::v4_addrs(&out), (T, Z));
        assert_eq!((out[20], out[21]), (3, 3));
        assert!(v4_valid(&out));
        let q = &out[28..];
        assert_eq!(translate::v4_addrs(q), (Z, T));
        assert_eq!(u16::from_be_bytes([q[22], q[23]]), t);
    }

    #[test]
    fn rfc6146_3_8_hairpinning_between_two_clients() {
        let n = nat(4);
        let now = Instant::now();
        let pref = Prefix::new(PREF, 96).unwrap();
        // Client 2 has a binding (T,t2) after talking to anyone.
        let out = run6(&n, now, &v6(X2, z6(), PROTO_UDP, &udp(7000, 53, b""))).unwrap();
        let t2 = u16::from_be_bytes([out[20], out[21]]);
        // Client 1 sends to Pref64 + T, port t2.
        let p = v6(X1, pref.embed(T).unwrap(), PROTO_UDP, &udp(8000, t2, b"hi"));
        let mut b = framed(&p);
        let mut scratch = [0u8; 1500];
        let r = n
            .v6_to_v4(now, &mut b, HEAD, HEAD + p.len(), &mut scratch)
            .unwrap();
        assert!(r.hairpin);
        let h = &b[r.start..r.end];
        let (src, dst) = translate::v6_addrs(h);
        assert_eq!(dst, X2);
        assert_eq!(pref.extract(&src), Some(T));
        assert_eq!(u16::from_be_bytes([h[42], h[43]]), 7000);
        assert!(v6_valid(h));
    }

    #[test]
    fn destinations_outside_prefix_pool_or_allowed_space_are_refused() {
        let n = nat(1);
        let now = Instant::now();
        let pref = Prefix::new(PREF, 96).unwrap();
        let elsewhere = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
        let pkt = v6(X1, elsewhere, PROTO_UDP, &udp(1, 2, b""));
        assert_eq!(run6(&n, now, &pkt), Err(Error::NotOurs));
        for bad in [
            [127, 0, 0, 1],
            [224, 0, 0, 1],
            [255, 255, 255, 255],
            [0, 1, 2, 3],
        ] {
            let d = pref.embed(Ipv4Addr::from(bad)).unwrap();
            let pkt = v6(X1, d, PROTO_UDP, &udp(1, 2, b""));
            assert_eq!(run6(&n, now, &pkt), Err(Error::BadAddress), "{bad:?}");
        }
        let not_pool = v4(Z, Ipv4Addr::new(192, 0, 2, 99), PROTO_UDP, &udp(1, 2, b""));
        assert_eq!(run4(&n, now, &not_pool), Err(Error::NotOurs));
        let sctp = v6(X1, z6(), 132, &[0u8; 12]);
        assert_eq!(run6(&n, now, &sctp), Err(Error::Protocol));
    }

    #[test]
    fn sessions_expire_with_their_timers() {
        let n = nat(4);
        let now = Instant::now();
        run6(&n, now, &v6(X1, z6(), PROTO_UDP, &udp(1000, 53, b""))).unwrap();
        run6(&n, now, &v6(X1, z6(), NH_ICMPV6, &echo(128, 9))).unwrap();
        assert_eq!(n.stats().sessions, 2);
        for part in 0..2 {
            n.handle_timeout(now + Duration::from_secs(61), part, 2);
        }
        assert_eq!(n.stats().sessions, 1, "ICMP gone after 60 s, UDP stays");
        for part in 0..2 {
            n.handle_timeout(now + Duration::from_secs(301), part, 2);
        }
        assert_eq!(n.stats().sessions, 0);
        let mut events = 0;
        for part in 0..2 {
            n.drain_events(part, 2, |_| events += 1);
        }
        assert_eq!(events, 4, "two BIB creations and two deletions");
    }

    #[test]
    fn a_refreshed_flow_keeps_one_timer_entry() {
        let n = nat(1);
        let now = Instant::now();
        for i in 0..10_000u64 {
            let p = v6(X1, z6(), PROTO_UDP, &udp(1000, 53, b""));
            run6(&n, now + Duration::from_millis(i), &p).unwrap();
        }
        // Before the fix every packet pushed a heap entry; now the one session keeps one.
        let s = n.shard(0);
        assert_eq!(s.stats().sessions, 1);
        assert!(
            s.timer_entries() <= 2,
            "{} timer entries",
            s.timer_entries()
        );
    }

    #[test]
    fn session_limit_is_enforced() {
        let mut table = state::Config::new(vec![T]);
        table.max_sessions = 2;
        let n = Nat64::new(Settings {
            prefix: Prefix::new(PREF, 96).unwrap(),
            table,
            translate: translate::Config::default(),
        })
        .unwrap();
        let now = Instant::now();
        for port in [1000, 1001] {
            run6(&n, now, &v6(X1, z6(), PROTO_UDP, &udp(port, 53, b""))).unwrap();
        }
        assert_eq!(
            run6(&n, now, &v6(X1, z6(), PROTO_UDP, &udp(1002, 53, b""))),
            Err(Error::Table(TableError::SessionLimit))
        );
    }

    #[test]
    fn in_place_translation_matches_the_copying_translator() {
        let cfg = translate::Config::default();
        for p in [
            v6(X1, z6(), PROTO_UDP, &udp(40000, 53, &[7u8; 1200])),
            v6(X1, z6(), PROTO_TCP, &tcp(33000, 80, 0x18)),
            v6(X1, z6(), NH_ICMPV6, &echo(128, 77)),
        ] {
            let mut copy = vec![0u8; 1500];
            let reverse = |_: Ipv6Addr, _: Ipv6Addr| None;
            let n = translate::v6_to_v4_with(&cfg, &p, T, Z, &reverse, &mut copy).unwrap();
            let mut inplace = p.clone();
            let (at, len) = translate::v6_to_v4_in_place(&cfg, &mut inplace, T, Z).unwrap();
            assert_eq!(&inplace[at..at + len], &copy[..n]);
            let v4pkt = copy[..n].to_vec();
            let mut copy6 = vec![0u8; 1500];
            let reverse4 = |_: Ipv4Addr, _: Ipv4Addr| None;
            let m = translate::v4_to_v6_with(&cfg, &v4pkt, X2, X1, &reverse4, &mut copy6).unwrap();
            let mut inplace6 = framed(&v4pkt);
            let (at, len) =
                translate::v4_to_v6_in_place(&cfg, &mut inplace6, HEAD, X2, X1).unwrap();
            assert_eq!(&inplace6[at..at + len], &copy6[..m]);
        }
    }

    #[test]
    fn icmp_error_builders_make_valid_packets() {
        let offending = v6(X1, z6(), PROTO_UDP, &udp(1, 2, &[0u8; 2000]));
        let mut out = [0u8; 1500];
        let unreachable = icmpv6::ErrorRepr::DstUnreachable { code: 3 };
        let n = emit_icmpv6_error(&mut out, X2, X1, &unreachable, &offending);
        assert_eq!(n, 1280);
        assert!(v6_valid(&out[..n]));
        let off4 = v4(Z, T, PROTO_UDP, &udp(1, 2, &[0u8; 1000]));
        let port_unreachable = icmpv4::ErrorRepr::DstUnreachable { code: 3 };
        let n = emit_icmpv4_error(&mut out, T, Z, &port_unreachable, &off4);
        assert_eq!(n, 576);
        assert!(v4_valid(&out[..n]));
        assert_eq!(
            emit_icmpv4_error(&mut out[..10], T, Z, &port_unreachable, &off4),
            0
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200),
                                       v in 0u8..2) {
            let n = nat(2);
            let mut p = data.clone();
            if let Some(b) = p.first_mut() {
                *b = (*b & 0x0f) | if v == 0 { 0x60 } else { 0x45 };
            }
            if v == 0 && p.len() >= 40 {
                p[24..40].copy_from_slice(&z6().octets());
            }
            if v == 1 && p.len() >= 20 {
                p[16..20].copy_from_slice(&T.octets());
            }
            let mut b = framed(&p);
            let mut scratch = [0u8; 1500];
            let now = Instant::now();
            let r = if v == 0 {
                n.v6_to_v4(now, &mut b, HEAD, HEAD + p.len(), &mut scratch)
            } else {
                n.v4_to_v6(now, &mut b, HEAD, HEAD + p.len(), &mut scratch)
            };
            if let Ok(t) = r {
                prop_assert!(t.start <= t.end && t.end <= b.len());
            }
        }
    }

    #[test]
    fn repr_builders_write_the_rfc_type_code_and_parameter() {
        let offending = v6(X1, z6(), PROTO_UDP, &udp(40000, 53, b"q"));
        let (src, dst) = (z6(), X1);
        let cases = [
            (icmpv6::ErrorRepr::TimeExceeded { code: 0 }, (3, 0), 0),
            (icmpv6::ErrorRepr::PacketTooBig { mtu: 1300 }, (2, 0), 1300),
            (
                icmpv6::ErrorRepr::ParamProblem {
                    code: 0,
                    pointer: 43,
                },
                (4, 0),
                43,
            ),
            (icmpv6::ErrorRepr::DstUnreachable { code: 3 }, (1, 3), 0),
        ];
        for (repr, kind, param) in cases {
            let mut a = vec![0u8; 1280];
            let n = emit_icmpv6_error(&mut a, src, dst, &repr, &offending);
            assert_eq!((a[V6_HDR], a[V6_HDR + 1]), kind);
            assert_eq!(a[V6_HDR + 4..V6_HDR + 8], u32::to_be_bytes(param));
            assert!(v6_valid(&a[..n]));
            let m = icmpv6::Packet::new_checked(&a[V6_HDR..n]).unwrap();
            assert_eq!(icmpv6::ErrorRepr::parse(&m), Ok(repr));
        }
        let offending = v4(Z, T, PROTO_UDP, &udp(53, 1024, b"r"));
        let cases = [
            (icmpv4::ErrorRepr::TimeExceeded { code: 0 }, (11, 0), 0),
            (icmpv4::ErrorRepr::FragNeeded { mtu: 1400 }, (3, 4), 1400),
            (icmpv4::ErrorRepr::DstUnreachable { code: 13 }, (3, 13), 0),
        ];
        for (repr, kind, rest) in cases {
            let mut a = vec![0u8; 576];
            let n = emit_icmpv4_error(&mut a, T, Z, &repr, &offending);
            assert_eq!((a[V4_HDR], a[V4_HDR + 1]), kind);
            assert_eq!(a[V4_HDR + 4..V4_HDR + 8], u32::to_be_bytes(rest));
            assert!(v4_valid(&a[..n]));
            let m = icmpv4::Packet::new_checked(&a[V4_HDR..n]).unwrap();
            assert_eq!(icmpv4::ErrorRepr::parse(&m), Ok(repr));
        }
    }

    #[test]
    fn replies_name_the_errors_rfc7915_asks_for() {
        let e = Error::Translate(TranslateError::PacketTooBig { mtu: 1280 });
        assert_eq!(
            e.icmpv6_reply(),
            Some(icmpv6::ErrorRepr::PacketTooBig { mtu: 1280 })
        );
        assert_eq!(e.icmpv4_reply(), None);
        let e = Error::Table(TableError::NoBinding);
        assert_eq!(
            e.icmpv4_reply(),
            Some(icmpv4::ErrorRepr::DstUnreachable { code: 3 })
        );
        assert_eq!(Error::Fragment.icmpv6_reply(), None);
        // RFC 6888 REQ-4: a client at its own limit hears why; IPv4 hosts do not.
        for t in [TableError::ClientSessionLimit, TableError::ClientPortLimit] {
            assert_eq!(
                Error::Table(t).icmpv6_reply(),
                Some(icmpv6::ErrorRepr::DstUnreachable { code: 1 })
            );
            assert_eq!(Error::Table(t).icmpv4_reply(), None);
        }
    }
}
