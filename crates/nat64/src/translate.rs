//! Stateless IP/ICMP translation (RFC 7915 §4 IPv4→IPv6, §5 IPv6→IPv4) into caller buffers.
//!
//! The caller maps the outer addresses (RFC 6052 prefix for SIIT, the BIB/session table for
//! stateful NAT64) and passes them in; the translator rewrites headers, fixes transport
//! checksums and translates ICMP, including the packet quoted in an ICMP error. Conditions
//! where RFC 7915 wants an ICMP error sent back are returned as [`TranslateError`] variants
//! naming that error; the caller builds the reply.
//!
//! Nothing here allocates or panics on input; output never exceeds `out`.

use gate64_wire::checksum;
use std::net::{Ipv4Addr, Ipv6Addr};

/// IPv4 header length without options.
const V4_HDR: usize = 20;
/// IPv6 fixed header length.
const V6_HDR: usize = 40;
/// IPv6 Fragment header length.
const FRAG_HDR: usize = 8;
/// ICMP header length (type, code, checksum, four more bytes).
const ICMP_HDR: usize = 8;

const PROTO_ICMP: u8 = 0x01;
const PROTO_TCP: u8 = 0x06;
const PROTO_UDP: u8 = 0x11;
const NH_HOP_BY_HOP: u8 = 0x00;
const NH_ROUTING: u8 = 0x2b;
const NH_FRAGMENT: u8 = 0x2c;
const NH_ICMPV6: u8 = 0x3a;
const NH_DEST_OPTS: u8 = 0x3c;

const ICMPV4_ECHO_REPLY: u8 = 0;
const ICMPV4_DEST_UNREACHABLE: u8 = 3;
const ICMPV4_ECHO_REQUEST: u8 = 8;
const ICMPV4_TIME_EXCEEDED: u8 = 11;
const ICMPV4_PARAMETER_PROBLEM: u8 = 12;
const ICMPV6_DEST_UNREACHABLE: u8 = 1;
const ICMPV6_PACKET_TOO_BIG: u8 = 2;
const ICMPV6_TIME_EXCEEDED: u8 = 3;
const ICMPV6_PARAMETER_PROBLEM: u8 = 4;
const ICMPV6_ECHO_REQUEST: u8 = 128;
const ICMPV6_ECHO_REPLY: u8 = 129;

/// IPv6 minimum link MTU (RFC 8200 §5); also the cap for translated ICMPv6 errors.
pub const IPV6_MIN_MTU: u32 = 1280;
/// Cap for translated ICMPv4 errors (RFC 1812 §4.3.2.3, as Jool does).
pub const ICMPV4_ERROR_MAX: usize = 576;
/// IPv6→IPv4 without a Fragment header: DF is set when the IPv4 packet is larger than this
/// (RFC 7915 §5.1, so that PMTUD works for packets a 1280-byte IPv6 link can carry).
const DF_THRESHOLD: usize = 1260;
/// RFC 1191 §7 plateaus, as Jool uses them for Fragmentation Needed with MTU 0.
const MTU_PLATEAUS: [u16; 11] = [
    65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68,
];

/// Translator settings. `Default` gives 1500-byte MTUs on both sides, a 1280-byte lowest IPv6
/// MTU, Traffic Class/TOS copied and zero IPv4 UDP checksums computed afresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Next-hop IPv4 MTU: IPv6→IPv4 packets larger than this get [`TranslateError::PacketTooBig`].
    pub ipv4_mtu: u16,
    /// Next-hop IPv6 MTU (for gate64 the tunnel's inner MTU).
    pub ipv6_mtu: u32,
    /// IPv4 packets without DF are never made into IPv6 packets larger than this
    /// (RFC 7915 §4 "lowest-ipv6-mtu"); the smaller of it and `ipv6_mtu` applies.
    pub lowest_ipv6_mtu: u32,
    /// Force this Traffic Class / TOS instead of copying it (RFC 7915 §4.1, §5.1).
    pub traffic_class: Option<u8>,
    /// IPv4 UDP with checksum 0, unfragmented: compute the checksum (true) or refuse with
    /// [`TranslateError::UdpZeroChecksum`] (false). RFC 7915 §4.5.
    pub compute_udp_zero_checksum: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ipv4_mtu: 1500,
            ipv6_mtu: 1500,
            lowest_ipv6_mtu: IPV6_MIN_MTU,
            traffic_class: None,
            compute_udp_zero_checksum: true,
        }
    }
}

/// Why a packet was not translated. The variants marked "reply" name the ICMP error RFC 7915
/// wants sent back to the packet's source; the others are silent drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TranslateError {
    /// Shorter than its headers or length fields say.
    #[error("truncated packet")]
    Truncated,
    /// Wrong version, impossible lengths or header fields.
    #[error("malformed packet")]
    Malformed,
    /// Well-formed but not translatable by this implementation (jumbograms, fragmented ICMP,
    /// a non-first fragment whose headers cannot be walked).
    #[error("unsupported packet")]
    Unsupported,
    /// `out` is too small for the translated packet.
    #[error("output buffer too small")]
    BufferTooSmall,
    /// Reply: hop limit / TTL would reach zero. IPv6→IPv4: ICMPv6 Time Exceeded 3/0;
    /// IPv4→IPv6: ICMPv4 Time Exceeded 11/0 (RFC 7915 §4.1, §5.1).
    #[error("hop limit exceeded in transit")]
    TimeExceeded,
    /// Reply: ICMPv6 Packet Too Big 2/0 with this MTU; the IPv4 packet would exceed the IPv4
    /// next-hop MTU (RFC 7915 §5.1, MTU = IPv4 MTU + 20, at least 1280).
    #[error("packet too big, MTU {mtu}")]
    PacketTooBig {
        /// MTU to report.
        mtu: u32,
    },
    /// Reply: ICMPv4 Fragmentation Needed 3/4 with this MTU; a DF packet would exceed the
    /// IPv6 next-hop MTU (RFC 7915 §4.1, MTU = IPv6 MTU − 20).
    #[error("fragmentation needed, MTU {mtu}")]
    FragmentationNeeded {
        /// MTU to report.
        mtu: u16,
    },
    /// A packet without DF is larger than the IPv6 limit and must be split into IPv6
    /// fragments of at most `mtu` bytes (RFC 7915 §4.1); [`v4_to_v6_fragments`] does that.
    #[error("needs IPv6 fragmentation to {mtu} bytes")]
    NeedsFragmentation {
        /// The IPv6 packet size limit.
        mtu: u32,
    },
    /// Reply: ICMPv6 Parameter Problem 4/0 with this pointer: a Routing header with Segments
    /// Left ≠ 0 (RFC 7915 §5.1), or a header field we refuse.
    #[error("parameter problem at byte {pointer}")]
    ParameterProblem {
        /// Byte offset of the offending field in the IPv6 packet.
        pointer: u32,
    },
    /// Reply: ICMPv6 Destination Unreachable 1/1: an extension header follows the Fragment
    /// header (RFC 7915 §5.1; Jool test ac).
    #[error("extension header after the fragment header")]
    HeaderAfterFragment,
    /// Reply: ICMPv4 Destination Unreachable 3/5: an unexpired source route option
    /// (RFC 7915 §4.1).
    #[error("unexpired IPv4 source route")]
    SourceRoute,
    /// Reply: ICMPv4 Destination Unreachable 3/13: UDP checksum 0 that cannot or may not be
    /// computed (RFC 7915 §4.5).
    #[error("IPv4 UDP with zero checksum")]
    UdpZeroChecksum,
    /// An ICMP error whose checksum does not verify; dropped silently (RFC 7915 §4.3, §5.3).
    #[error("bad ICMP error checksum")]
    BadChecksum,
    /// An IPv4 header checksum that does not verify; dropped silently.
    #[error("bad IPv4 header checksum")]
    BadHeaderChecksum,
    /// An ICMP error, whose quoted packet grows or shrinks: use the copying functions
    /// ([`v6_to_v4_with`], [`v4_to_v6_with`]) instead of the in-place ones.
    #[error("ICMP error needs the copying translator")]
    NotInPlace,
    /// No equivalent on the other side (ICMP types RFC 7915 drops, Neighbour Discovery, MLD,
    /// an error quoting an error, untranslatable inner addresses); dropped silently.
    #[error("not translatable")]
    Untranslatable,
}

/// Maps the addresses of the packet quoted inside an ICMPv6 error to IPv4.
pub type InnerMap6<'a> = &'a dyn Fn(Ipv6Addr, Ipv6Addr) -> Option<(Ipv4Addr, Ipv4Addr)>;
/// Maps the addresses of the packet quoted inside an ICMPv4 error to IPv6.
pub type InnerMap4<'a> = &'a dyn Fn(Ipv4Addr, Ipv4Addr) -> Option<(Ipv6Addr, Ipv6Addr)>;

/// Translates the IPv6 packet `pkt` to IPv4 with addresses `src4`/`dst4` into `out`, with the
/// default [`Config`]. The packet quoted in an ICMPv6 error is translated when its addresses
/// are the outer ones reversed (the common case of an error from the destination itself);
/// other quoted addresses need [`v6_to_v4_with`]. Returns the IPv4 packet length.
pub fn v6_to_v4(
    pkt: &[u8],
    src4: Ipv4Addr,
    dst4: Ipv4Addr,
    out: &mut [u8],
) -> Result<usize, TranslateError> {
    let (o_src, o_dst) = peek_v6_addrs(pkt).ok_or(TranslateError::Truncated)?;
    let reverse =
        move |s: Ipv6Addr, d: Ipv6Addr| (s == o_dst && d == o_src).then_some((dst4, src4));
    v6_to_v4_with(&Config::default(), pkt, src4, dst4, &reverse, out)
}

/// Translates the IPv4 packet `pkt` to IPv6 with addresses `src6`/`dst6` into `out`, with the
/// default [`Config`]; quoted packets as in [`v6_to_v4`]. Returns the IPv6 packet length.
pub fn v4_to_v6(
    pkt: &[u8],
    src6: Ipv6Addr,
    dst6: Ipv6Addr,
    out: &mut [u8],
) -> Result<usize, TranslateError> {
    let (o_src, o_dst) = peek_v4_addrs(pkt).ok_or(TranslateError::Truncated)?;
    let reverse =
        move |s: Ipv4Addr, d: Ipv4Addr| (s == o_dst && d == o_src).then_some((dst6, src6));
    v4_to_v6_with(&Config::default(), pkt, src6, dst6, &reverse, out)
}

/// IPv6→IPv4 (RFC 7915 §5) with explicit settings and a mapping for the addresses of a packet
/// quoted in an ICMPv6 error.
pub fn v6_to_v4_with(
    cfg: &Config,
    pkt: &[u8],
    src4: Ipv4Addr,
    dst4: Ipv4Addr,
    inner: InnerMap6<'_>,
    out: &mut [u8],
) -> Result<usize, TranslateError> {
    let h = parse_v6(pkt, false)?;
    let end = V6_HDR + h.plen;
    let hop = pkt[7];
    if hop <= 1 {
        return Err(TranslateError::TimeExceeded);
    }
    let upper = &pkt[h.off..end];
    let first = h.frag.is_none_or(|f| f.offset == 0);
    let whole = h.frag.is_none();

    if h.proto == NH_ICMPV6 && first && upper.len() >= ICMP_HDR && upper[0] < 128 {
        if !whole {
            return Err(TranslateError::Unsupported);
        }
        return icmp6_error_to_v4(cfg, pkt, &h, src4, dst4, inner, out);
    }

    let total = V4_HDR + upper.len();
    check_v4_size(cfg, total)?;
    let o = out.get_mut(..total).ok_or(TranslateError::BufferTooSmall)?;
    o[V4_HDR..].copy_from_slice(upper);
    let proto = if h.proto == NH_ICMPV6 {
        PROTO_ICMP
    } else {
        h.proto
    };
    if first {
        let (src6, dst6) = v6_addrs(pkt);
        fix_upper_6to4(
            &mut o[V4_HDR..],
            h.proto,
            whole,
            (src6, dst6, h.upper_len()),
            (src4, dst4),
        )?;
    }
    let tos = cfg.traffic_class.unwrap_or_else(|| traffic_class(pkt));
    write_v4_header(o, &h, tos, hop - 1, proto, src4, dst4, total);
    Ok(total)
}

/// IPv4→IPv6 (RFC 7915 §4) with explicit settings and a mapping for the addresses of a packet
/// quoted in an ICMPv4 error.
pub fn v4_to_v6_with(
    cfg: &Config,
    pkt: &[u8],
    src6: Ipv6Addr,
    dst6: Ipv6Addr,
    inner: InnerMap4<'_>,
    out: &mut [u8],
) -> Result<usize, TranslateError> {
    let h = parse_v4(pkt, false)?;
    if !cfg!(fuzzing) && checksum::finish(checksum::sum(&pkt[..h.ihl], 0)) != 0 {
        return Err(TranslateError::BadHeaderChecksum);
    }
    check_v4_options(&pkt[V4_HDR..h.ihl])?;
    let ttl = pkt[8];
    if ttl <= 1 {
        return Err(TranslateError::TimeExceeded);
    }
    let upper = &pkt[h.ihl..h.total];
    let first = h.frag_offset == 0;
    let fragmented = h.is_fragment();

    if h.proto == PROTO_ICMP && first && upper.len() >= ICMP_HDR && is_icmp4_error(upper[0]) {
        if fragmented {
            return Err(TranslateError::Unsupported);
        }
        return icmp4_error_to_v6(cfg, pkt, &h, src6, dst6, inner, out);
    }

    let fh = if fragmented { FRAG_HDR } else { 0 };
    let total = V6_HDR + fh + upper.len();
    check_v6_size(cfg, &h, total)?;
    let o = out.get_mut(..total).ok_or(TranslateError::BufferTooSmall)?;
    o[V6_HDR + fh..].copy_from_slice(upper);
    let nh = if h.proto == PROTO_ICMP {
        NH_ICMPV6
    } else {
        h.proto
    };
    if first {
        let (src4, dst4) = v4_addrs(pkt);
        fix_upper_4to6(
            cfg,
            &mut o[V6_HDR + fh..],
            h.proto,
            !fragmented,
            (src4, dst4),
            (src6, dst6, h.total - h.ihl),
        )?;
    }
    let tc = cfg.traffic_class.unwrap_or(pkt[1]);
    write_v6_header(o, &h, tc, ttl - 1, nh, src6, dst6, total);
    Ok(total)
}

/// IPv6→IPv4 (RFC 7915 §5) in place, without copying the payload: `buf` holds exactly the
/// IPv6 packet and the IPv4 packet is written over its tail, its header just before the
/// upper-layer header. Returns where the IPv4 packet starts and its length (it ends where the
/// IPv6 packet ended). ICMPv6 errors give [`TranslateError::NotInPlace`].
pub fn v6_to_v4_in_place(
    cfg: &Config,
    buf: &mut [u8],
    src4: Ipv4Addr,
    dst4: Ipv4Addr,
) -> Result<(usize, usize), TranslateError> {
    let h = parse_v6(buf, false)?;
    let end = V6_HDR + h.plen;
    let hop = buf[7];
    if hop <= 1 {
        return Err(TranslateError::TimeExceeded);
    }
    let first = h.frag.is_none_or(|f| f.offset == 0);
    let whole = h.frag.is_none();
    if h.proto == NH_ICMPV6 && first && buf.get(h.off).is_some_and(|&t| t < 128) {
        return Err(TranslateError::NotInPlace);
    }
    let total = V4_HDR + (end - h.off);
    check_v4_size(cfg, total)?;
    let (src6, dst6) = v6_addrs(buf);
    let tos = cfg.traffic_class.unwrap_or_else(|| traffic_class(buf));
    if first {
        fix_upper_6to4(
            &mut buf[h.off..end],
            h.proto,
            whole,
            (src6, dst6, h.upper_len()),
            (src4, dst4),
        )?;
    }
    let proto = if h.proto == NH_ICMPV6 {
        PROTO_ICMP
    } else {
        h.proto
    };
    // parse_v6 guarantees off >= 40, so the IPv4 header fits inside the old IPv6 header.
    let at = h.off - V4_HDR;
    write_v4_header(
        &mut buf[at..end],
        &h,
        tos,
        hop - 1,
        proto,
        src4,
        dst4,
        total,
    );
    Ok((at, total))
}

/// IPv4→IPv6 (RFC 7915 §4) in place: the IPv4 packet is `buf[start..]` and the IPv6 header
/// (plus a Fragment header for fragments) is written over the IPv4 header and the headroom
/// before it, so `start` must leave at least 28 bytes (48 for fragments) minus the IPv4
/// header length. Returns where the IPv6 packet starts and its length. Packets that need
/// splitting and ICMPv4 errors are refused as in [`v4_to_v6_with`] /
/// [`TranslateError::NotInPlace`].
pub fn v4_to_v6_in_place(
    cfg: &Config,
    buf: &mut [u8],
    start: usize,
    src6: Ipv6Addr,
    dst6: Ipv6Addr,
) -> Result<(usize, usize), TranslateError> {
    let pkt = buf.get(start..).ok_or(TranslateError::Truncated)?;
    let h = parse_v4(pkt, false)?;
    if !cfg!(fuzzing) && checksum::finish(checksum::sum(&pkt[..h.ihl], 0)) != 0 {
        return Err(TranslateError::BadHeaderChecksum);
    }
    check_v4_options(&pkt[V4_HDR..h.ihl])?;
    let ttl = pkt[8];
    if ttl <= 1 {
        return Err(TranslateError::TimeExceeded);
    }
    let first = h.frag_offset == 0;
    let fragmented = h.is_fragment();
    let upper_len = h.total - h.ihl;
    if h.proto == PROTO_ICMP && first && upper_len >= ICMP_HDR && is_icmp4_error(pkt[h.ihl]) {
        return Err(TranslateError::NotInPlace);
    }
    let fh = if fragmented { FRAG_HDR } else { 0 };
    let total = V6_HDR + fh + upper_len;
    check_v6_size(cfg, &h, total)?;
    let at = (start + h.ihl)
        .checked_sub(V6_HDR + fh)
        .ok_or(TranslateError::BufferTooSmall)?;
    let (src4, dst4) = v4_addrs(pkt);
    let tc = cfg.traffic_class.unwrap_or(pkt[1]);
    let nh = if h.proto == PROTO_ICMP {
        NH_ICMPV6
    } else {
        h.proto
    };
    let upper = start + h.ihl;
    if first {
        fix_upper_4to6(
            cfg,
            &mut buf[upper..upper + upper_len],
            h.proto,
            !fragmented,
            (src4, dst4),
            (src6, dst6, upper_len),
        )?;
    }
    write_v6_header(
        &mut buf[at..at + total],
        &h,
        tc,
        ttl - 1,
        nh,
        src6,
        dst6,
        total,
    );
    Ok((at, total))
}

/// IPv4→IPv6 (RFC 7915 §4) that also splits a packet without DF into IPv6 fragments when it
/// exceeds min(`ipv6_mtu`, `lowest_ipv6_mtu`) (§4.1; doc §2.7): each fragment carries a
/// multiple of 8 data bytes, the identification is the IPv4 one, and the transport checksum
/// covers the whole datagram. Packets go back to back into `out`, their lengths into `lens`;
/// returns how many were written (1 when no split was needed).
pub fn v4_to_v6_fragments(
    cfg: &Config,
    pkt: &[u8],
    src6: Ipv6Addr,
    dst6: Ipv6Addr,
    inner: InnerMap4<'_>,
    out: &mut [u8],
    lens: &mut [usize],
) -> Result<usize, TranslateError> {
    let slot = lens.first_mut().ok_or(TranslateError::BufferTooSmall)?;
    let limit = match v4_to_v6_with(cfg, pkt, src6, dst6, inner, out) {
        Ok(n) => {
            *slot = n;
            return Ok(1);
        }
        Err(TranslateError::NeedsFragmentation { mtu }) => mtu,
        Err(e) => return Err(e),
    };
    // v4_to_v6_with validated the header, options, TTL and DF before refusing the size.
    let h = parse_v4(pkt, false)?;
    let upper = &pkt[h.ihl..h.total];
    if usize::from(h.frag_offset) * 8 + upper.len() > usize::from(u16::MAX) {
        // RFC 791: a datagram ends by byte 65535; offsets past it do not fit the field.
        return Err(TranslateError::Malformed);
    }
    let chunk_max = (limit as usize).saturating_sub(V6_HDR + FRAG_HDR) / 8 * 8;
    if chunk_max == 0 {
        return Err(TranslateError::Unsupported);
    }
    let count = upper.len().div_ceil(chunk_max);
    let need = count * (V6_HDR + FRAG_HDR) + upper.len();
    if lens.len() < count || out.len() < need {
        return Err(TranslateError::BufferTooSmall);
    }
    let nh = if h.proto == PROTO_ICMP {
        NH_ICMPV6
    } else {
        h.proto
    };
    let tc = cfg.traffic_class.unwrap_or(pkt[1]);
    let (src4, dst4) = v4_addrs(pkt);
    let mut at = 0;
    for (i, chunk) in upper.chunks(chunk_max).enumerate() {
        let n = V6_HDR + FRAG_HDR + chunk.len();
        let o = &mut out[at..at + n];
        o[V6_HDR + FRAG_HDR..].copy_from_slice(chunk);
        let pos = i * chunk_max;
        if i == 0 && h.frag_offset == 0 {
            let u = &mut o[V6_HDR + FRAG_HDR..];
            if h.proto == PROTO_UDP && read16(u, 6) == Some(0) {
                // RFC 7915 §4.5 over the whole datagram, which only this function sees.
                if h.is_fragment() || !cfg.compute_udp_zero_checksum {
                    return Err(TranslateError::UdpZeroChecksum);
                }
                let len = u32::try_from(upper.len()).unwrap_or(u32::MAX);
                let c = checksum::finish(checksum::sum(
                    upper,
                    checksum::pseudo_header_v6(&src6, &dst6, PROTO_UDP, len),
                ));
                let c = if c == 0 { 0xffff } else { c };
                u[6..8].copy_from_slice(&c.to_be_bytes());
            } else {
                let v6 = (src6, dst6, upper.len());
                fix_upper_4to6(cfg, u, h.proto, !h.is_fragment(), (src4, dst4), v6)?;
            }
        }
        let last = pos + chunk.len() == upper.len();
        let fh = V4Hdr {
            more: h.more || !last,
            frag_offset: h.frag_offset + (pos / 8) as u16,
            ..h
        };
        write_v6_header(o, &fh, tc, pkt[8] - 1, nh, src6, dst6, n);
        lens[i] = n;
        at += n;
    }
    Ok(count)
}

/// RFC 7915 §5.1 size rules for the IPv4 packet an IPv6 one becomes: `total` bytes must fit
/// an IPv4 packet and the IPv4 next-hop MTU (else Packet Too Big with MTU + 20, at least 1280).
fn check_v4_size(cfg: &Config, total: usize) -> Result<(), TranslateError> {
    if total > usize::from(u16::MAX) {
        return Err(TranslateError::Unsupported);
    }
    if total > usize::from(cfg.ipv4_mtu) {
        let mtu = (u32::from(cfg.ipv4_mtu) + 20).max(IPV6_MIN_MTU);
        return Err(TranslateError::PacketTooBig { mtu });
    }
    Ok(())
}

/// RFC 7915 §4.1 size rules for the IPv6 packet of `total` bytes an IPv4 one becomes: with DF
/// it must fit the IPv6 MTU (else Fragmentation Needed with MTU − 20); without DF it must fit
/// the smaller of that and `lowest_ipv6_mtu`, or be split.
fn check_v6_size(cfg: &Config, h: &V4Hdr, total: usize) -> Result<(), TranslateError> {
    if h.df {
        if total as u64 > u64::from(cfg.ipv6_mtu) {
            let mtu = cfg
                .ipv6_mtu
                .saturating_sub(20)
                .clamp(576, u32::from(u16::MAX));
            return Err(TranslateError::FragmentationNeeded { mtu: mtu as u16 });
        }
    } else {
        let limit = cfg.ipv6_mtu.min(cfg.lowest_ipv6_mtu);
        if total as u64 > u64::from(limit) {
            return Err(TranslateError::NeedsFragmentation { mtu: limit });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// IPv6 parsing

#[derive(Debug, Clone, Copy)]
pub(crate) struct Frag {
    pub(crate) id: u32,
    /// In 8-byte units.
    pub(crate) offset: u16,
    pub(crate) more: bool,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct V6Hdr {
    /// Payload Length field.
    pub(crate) plen: usize,
    /// Offset of the upper-layer header.
    pub(crate) off: usize,
    /// Upper-layer protocol.
    pub(crate) proto: u8,
    pub(crate) frag: Option<Frag>,
}

impl V6Hdr {
    /// Upper-layer length as the headers announce it (for the pseudo-header).
    fn upper_len(&self) -> usize {
        (V6_HDR + self.plen).saturating_sub(self.off)
    }
}

fn is_extension(nh: u8) -> bool {
    // RFC 8200 §4 and the IANA IPv6 Extension Header Types registry (HIP, Shim6, Mobility,
    // experimental), which may not follow a Fragment header (RFC 7915 §5.1, Jool test ac).
    matches!(
        nh,
        NH_HOP_BY_HOP | NH_ROUTING | NH_FRAGMENT | NH_DEST_OPTS | 135 | 139 | 140 | 253 | 254
    )
}

/// Checks version and lengths and walks the extension headers. `quoted`: the packet is inside
/// an ICMP error, so its payload may be cut short of the Payload Length.
pub(crate) fn parse_v6(pkt: &[u8], quoted: bool) -> Result<V6Hdr, TranslateError> {
    if pkt.len() < V6_HDR {
        return Err(TranslateError::Truncated);
    }
    if pkt[0] >> 4 != 6 {
        return Err(TranslateError::Malformed);
    }
    let plen = usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
    if plen == 0 && pkt[6] == NH_HOP_BY_HOP {
        // RFC 2675 jumbogram.
        return Err(TranslateError::Unsupported);
    }
    let end = V6_HDR + plen;
    if !quoted && pkt.len() < end {
        return Err(TranslateError::Truncated);
    }
    let avail = end.min(pkt.len());
    let mut nh = pkt[6];
    let mut off = V6_HDR;
    let mut frag = None;
    loop {
        match nh {
            NH_HOP_BY_HOP | NH_DEST_OPTS | NH_ROUTING if frag.is_none() => {
                if nh == NH_HOP_BY_HOP && off != V6_HDR {
                    // RFC 8200 §4.3: Hop-by-Hop only directly after the fixed header.
                    return Err(TranslateError::ParameterProblem { pointer: 6 });
                }
                let h = pkt
                    .get(off..off + 4)
                    .filter(|_| off + 4 <= avail)
                    .ok_or(TranslateError::Truncated)?;
                let len = (usize::from(h[1]) + 1) * 8;
                if nh == NH_ROUTING && h[3] != 0 {
                    return Err(TranslateError::ParameterProblem {
                        pointer: (off + 3) as u32,
                    });
                }
                if off + len > avail {
                    return Err(TranslateError::Truncated);
                }
                nh = h[0];
                off += len;
            }
            NH_FRAGMENT if frag.is_none() => {
                let h = pkt
                    .get(off..off + FRAG_HDR)
                    .filter(|_| off + FRAG_HDR <= avail)
                    .ok_or(TranslateError::Truncated)?;
                let fo = u16::from_be_bytes([h[2], h[3]]);
                frag = Some(Frag {
                    id: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
                    offset: fo >> 3,
                    more: fo & 1 != 0,
                });
                nh = h[0];
                off += FRAG_HDR;
            }
            n if frag.is_some() && is_extension(n) => {
                return Err(TranslateError::HeaderAfterFragment);
            }
            _ => break,
        }
    }
    Ok(V6Hdr {
        plen,
        off,
        proto: nh,
        frag,
    })
}

fn peek_v6_addrs(pkt: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr)> {
    (pkt.len() >= V6_HDR).then(|| v6_addrs(pkt))
}

/// `pkt` holds at least the 40-byte fixed header.
pub(crate) fn v6_addrs(pkt: &[u8]) -> (Ipv6Addr, Ipv6Addr) {
    let mut s = [0u8; 16];
    let mut d = [0u8; 16];
    s.copy_from_slice(&pkt[8..24]);
    d.copy_from_slice(&pkt[24..40]);
    (Ipv6Addr::from(s), Ipv6Addr::from(d))
}

fn traffic_class(pkt: &[u8]) -> u8 {
    (pkt[0] << 4) | (pkt[1] >> 4)
}

// ---------------------------------------------------------------------------------------------
// IPv4 parsing

#[derive(Debug, Clone, Copy)]
pub(crate) struct V4Hdr {
    pub(crate) ihl: usize,
    /// Total Length field.
    pub(crate) total: usize,
    pub(crate) id: u16,
    pub(crate) df: bool,
    pub(crate) more: bool,
    /// In 8-byte units.
    pub(crate) frag_offset: u16,
    pub(crate) proto: u8,
}

impl V4Hdr {
    pub(crate) fn is_fragment(&self) -> bool {
        self.more || self.frag_offset != 0
    }
}

/// Checks version, IHL and Total Length. `quoted`: the packet may be cut short.
pub(crate) fn parse_v4(pkt: &[u8], quoted: bool) -> Result<V4Hdr, TranslateError> {
    if pkt.len() < V4_HDR {
        return Err(TranslateError::Truncated);
    }
    if pkt[0] >> 4 != 4 {
        return Err(TranslateError::Malformed);
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
    if ihl < V4_HDR || total < ihl {
        return Err(TranslateError::Malformed);
    }
    if pkt.len() < ihl || (!quoted && pkt.len() < total) {
        return Err(TranslateError::Truncated);
    }
    let ff = u16::from_be_bytes([pkt[6], pkt[7]]);
    Ok(V4Hdr {
        ihl,
        total,
        id: u16::from_be_bytes([pkt[4], pkt[5]]),
        df: ff & 0x4000 != 0,
        more: ff & 0x2000 != 0,
        frag_offset: ff & 0x1fff,
        proto: pkt[9],
    })
}

/// RFC 7915 §4.1: options are dropped, except that an unexpired Loose or Strict Source Route
/// means the packet is not translated.
fn check_v4_options(mut opts: &[u8]) -> Result<(), TranslateError> {
    const EOL: u8 = 0;
    const NOP: u8 = 1;
    const LSRR: u8 = 0x83;
    const SSRR: u8 = 0x89;
    while let [kind, rest @ ..] = opts {
        match *kind {
            EOL => break,
            NOP => opts = rest,
            k => {
                let len = usize::from(*rest.first().ok_or(TranslateError::Malformed)?);
                if len < 2 || len > opts.len() {
                    return Err(TranslateError::Malformed);
                }
                if (k == LSRR || k == SSRR) && len >= 3 && usize::from(opts[2]) <= len {
                    return Err(TranslateError::SourceRoute);
                }
                opts = &opts[len..];
            }
        }
    }
    Ok(())
}

fn peek_v4_addrs(pkt: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr)> {
    (pkt.len() >= V4_HDR).then(|| v4_addrs(pkt))
}

/// `pkt` holds at least 20 bytes.
pub(crate) fn v4_addrs(pkt: &[u8]) -> (Ipv4Addr, Ipv4Addr) {
    (
        Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]),
        Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]),
    )
}

pub(crate) fn is_icmp4_error(t: u8) -> bool {
    matches!(
        t,
        ICMPV4_DEST_UNREACHABLE | ICMPV4_TIME_EXCEEDED | ICMPV4_PARAMETER_PROBLEM | 4 | 5
    )
}

// ---------------------------------------------------------------------------------------------
// Header emission

/// Writes the IPv4 header into `o[..20]` for a translated IPv6 packet (RFC 7915 §5.1).
#[allow(clippy::too_many_arguments)]
fn write_v4_header(
    o: &mut [u8],
    h: &V6Hdr,
    tos: u8,
    ttl: u8,
    proto: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    total: usize,
) {
    let (id, ff) = match h.frag {
        // RFC 7915 §5.1.1: low 16 bits of the identification, DF clear, MF and offset copied.
        Some(f) => (f.id as u16, (f.offset & 0x1fff) | (u16::from(f.more) << 13)),
        None if total > DF_THRESHOLD => (0, 0x4000),
        // DF clear, so the packet may be fragmented by IPv4 routers and needs an
        // identification; without state or RNG we derive one from the contents.
        None => (flow_ident(o, src, dst), 0),
    };
    o[0] = 0x45;
    o[1] = tos;
    o[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    o[4..6].copy_from_slice(&id.to_be_bytes());
    o[6..8].copy_from_slice(&ff.to_be_bytes());
    o[8] = ttl;
    o[9] = proto;
    o[10..12].fill(0);
    o[12..16].copy_from_slice(&src.octets());
    o[16..20].copy_from_slice(&dst.octets());
    let c = checksum::finish(checksum::sum(&o[..V4_HDR], 0));
    o[10..12].copy_from_slice(&c.to_be_bytes());
}

/// An identification that varies between packets of a flow: the sum of the addresses and the
/// first bytes of the payload, which `o[20..]` already holds.
fn flow_ident(o: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> u16 {
    let head = &o[V4_HDR..o.len().min(V4_HDR + 64)];
    let acc = checksum::sum(head, checksum::sum(&src.octets(), 0));
    let acc = checksum::sum(&dst.octets(), acc);
    !checksum::finish(acc)
}

/// Writes the IPv6 header (and a Fragment header for IPv4 fragments) into `o` for a translated
/// IPv4 packet (RFC 7915 §4.1).
#[allow(clippy::too_many_arguments)]
fn write_v6_header(
    o: &mut [u8],
    h: &V4Hdr,
    tc: u8,
    hop: u8,
    nh: u8,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    total: usize,
) {
    let frag = h.is_fragment();
    o[0] = 0x60 | (tc >> 4);
    o[1] = tc << 4;
    o[2] = 0;
    o[3] = 0;
    o[4..6].copy_from_slice(&((total - V6_HDR) as u16).to_be_bytes());
    o[6] = if frag { NH_FRAGMENT } else { nh };
    o[7] = hop;
    o[8..24].copy_from_slice(&src.octets());
    o[24..40].copy_from_slice(&dst.octets());
    if frag {
        let f = &mut o[V6_HDR..V6_HDR + FRAG_HDR];
        f[0] = nh;
        f[1] = 0;
        let fo = (h.frag_offset << 3) | u16::from(h.more);
        f[2..4].copy_from_slice(&fo.to_be_bytes());
        f[4..8].copy_from_slice(&u32::from(h.id).to_be_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// Transport checksums

/// RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), with `remove` and `add` as unfolded sums.
pub(crate) fn adjust(hc: u16, remove: u32, add: u32) -> u16 {
    let acc = u32::from(!hc) + u32::from(!fold(remove)) + u32::from(fold(add));
    checksum::finish(acc)
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

fn read16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Applies `f` to the 16-bit field at `at` if the buffer holds it.
fn update16(b: &mut [u8], at: usize, f: impl FnOnce(u16) -> u16) {
    if let Some(v) = read16(b, at) {
        b[at..at + 2].copy_from_slice(&f(v).to_be_bytes());
    }
}

fn addr_sum6(a: Ipv6Addr, b: Ipv6Addr) -> u32 {
    checksum::sum(&b.octets(), checksum::sum(&a.octets(), 0))
}

fn addr_sum4(a: Ipv4Addr, b: Ipv4Addr) -> u32 {
    checksum::sum(&b.octets(), checksum::sum(&a.octets(), 0))
}

/// Sum of the ICMPv6 pseudo-header (RFC 4443 §2.3) for a message of `len` bytes.
fn icmp6_pseudo(src: Ipv6Addr, dst: Ipv6Addr, len: usize) -> u32 {
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    checksum::pseudo_header_v6(&src, &dst, NH_ICMPV6, len)
}

/// Rewrites the upper-layer header `u` (first fragment or whole packet) from IPv6 to IPv4:
/// TCP/UDP checksums incrementally (RFC 7915 §5.5), ICMPv6 echo to ICMPv4 echo (§5.2).
/// `v6` = (src, dst, upper-layer length), `v4` = (src, dst).
fn fix_upper_6to4(
    u: &mut [u8],
    proto: u8,
    whole: bool,
    v6: (Ipv6Addr, Ipv6Addr, usize),
    v4: (Ipv4Addr, Ipv4Addr),
) -> Result<(), TranslateError> {
    let (remove, add) = (addr_sum6(v6.0, v6.1), addr_sum4(v4.0, v4.1));
    match proto {
        PROTO_TCP => update16(u, 16, |c| adjust(c, remove, add)),
        PROTO_UDP => update16(u, 6, |c| match adjust(c, remove, add) {
            // RFC 768: a computed 0 is sent as all ones; 0 itself means "no checksum".
            0 => 0xffff,
            c => c,
        }),
        NH_ICMPV6 => {
            if !whole {
                // The pseudo-header length is that of the whole datagram, unknown here.
                return Err(TranslateError::Unsupported);
            }
            let t = match u.first() {
                Some(&ICMPV6_ECHO_REQUEST) => ICMPV4_ECHO_REQUEST,
                Some(&ICMPV6_ECHO_REPLY) => ICMPV4_ECHO_REPLY,
                _ => return Err(TranslateError::Untranslatable),
            };
            if u.len() < ICMP_HDR {
                return Err(TranslateError::Truncated);
            }
            let remove = icmp6_pseudo(v6.0, v6.1, v6.2) + (u32::from(u[0]) << 8);
            u[0] = t;
            update16(u, 2, |c| adjust(c, remove, u32::from(t) << 8));
        }
        _ => {}
    }
    Ok(())
}

/// IPv4→IPv6 counterpart of [`fix_upper_6to4`] (RFC 7915 §4.5, §4.2). `v6` = (src, dst,
/// upper-layer length from the IPv4 Total Length).
fn fix_upper_4to6(
    cfg: &Config,
    u: &mut [u8],
    proto: u8,
    whole: bool,
    v4: (Ipv4Addr, Ipv4Addr),
    v6: (Ipv6Addr, Ipv6Addr, usize),
) -> Result<(), TranslateError> {
    let (remove, add) = (addr_sum4(v4.0, v4.1), addr_sum6(v6.0, v6.1));
    match proto {
        PROTO_TCP => update16(u, 16, |c| adjust(c, remove, add)),
        PROTO_UDP => match read16(u, 6) {
            Some(0) => {
                // RFC 7915 §4.5: IPv6 forbids a zero UDP checksum.
                if !whole || !cfg.compute_udp_zero_checksum {
                    return Err(TranslateError::UdpZeroChecksum);
                }
                let len = u32::try_from(u.len()).unwrap_or(u32::MAX);
                let c = checksum::finish(checksum::sum(
                    u,
                    checksum::pseudo_header_v6(&v6.0, &v6.1, PROTO_UDP, len),
                ));
                let c = if c == 0 { 0xffff } else { c };
                u[6..8].copy_from_slice(&c.to_be_bytes());
            }
            Some(_) => update16(u, 6, |c| match adjust(c, remove, add) {
                0 => 0xffff,
                c => c,
            }),
            None => {}
        },
        PROTO_ICMP => {
            if !whole {
                return Err(TranslateError::Unsupported);
            }
            let t = match u.first() {
                Some(&ICMPV4_ECHO_REQUEST) => ICMPV6_ECHO_REQUEST,
                Some(&ICMPV4_ECHO_REPLY) => ICMPV6_ECHO_REPLY,
                _ => return Err(TranslateError::Untranslatable),
            };
            if u.len() < ICMP_HDR {
                return Err(TranslateError::Truncated);
            }
            let add = icmp6_pseudo(v6.0, v6.1, v6.2) + (u32::from(t) << 8);
            let remove = u32::from(u[0]) << 8;
            u[0] = t;
            update16(u, 2, |c| adjust(c, remove, add));
        }
        _ => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ICMP errors

/// RFC 7915 §5.2: ICMPv6 error → ICMPv4 error, quoted packet translated, capped at 576 bytes.
fn icmp6_error_to_v4(
    cfg: &Config,
    pkt: &[u8],
    h: &V6Hdr,
    src4: Ipv4Addr,
    dst4: Ipv4Addr,
    inner: InnerMap6<'_>,
    out: &mut [u8],
) -> Result<usize, TranslateError> {
    let (src6, dst6) = v6_addrs(pkt);
    let msg = &pkt[h.off..V6_HDR + h.plen];
    if !cfg!(fuzzing)
        && checksum::finish(checksum::sum(msg, icmp6_pseudo(src6, dst6, msg.len()))) != 0
    {
        return Err(TranslateError::BadChecksum);
    }
    let (t, c) = (msg[0], msg[1]);
    let param = u32::from_be_bytes([msg[4], msg[5], msg[6], msg[7]]);
    let (t4, c4, rest) = match (t, c) {
        (ICMPV6_DEST_UNREACHABLE, 0 | 2 | 3) => (ICMPV4_DEST_UNREACHABLE, 1, [0; 4]),
        (ICMPV6_DEST_UNREACHABLE, 1) => (ICMPV4_DEST_UNREACHABLE, 10, [0; 4]),
        (ICMPV6_DEST_UNREACHABLE, 4) => (ICMPV4_DEST_UNREACHABLE, 3, [0; 4]),
        (ICMPV6_PACKET_TOO_BIG, 0) => {
            // RFC 7915 §5.2: min(PTB MTU − 20, IPv4 next-hop MTU, IPv6 MTU − 20).
            let mtu = param
                .saturating_sub(20)
                .min(u32::from(cfg.ipv4_mtu))
                .min(cfg.ipv6_mtu.saturating_sub(20));
            let [_, _, a, b] = mtu.min(0xffff).to_be_bytes();
            (ICMPV4_DEST_UNREACHABLE, 4, [0, 0, a, b])
        }
        (ICMPV6_TIME_EXCEEDED, 0 | 1) => (ICMPV4_TIME_EXCEEDED, c, [0; 4]),
        (ICMPV6_PARAMETER_PROBLEM, 0) => {
            let p = pointer_6to4(param).ok_or(TranslateError::Untranslatable)?;
            (ICMPV4_PARAMETER_PROBLEM, 0, [p, 0, 0, 0])
        }
        (ICMPV6_PARAMETER_PROBLEM, 1) => (ICMPV4_DEST_UNREACHABLE, 2, [0; 4]),
        _ => return Err(TranslateError::Untranslatable),
    };

    let cap = out.len().min(ICMPV4_ERROR_MAX);
    if cap < V4_HDR + ICMP_HDR + V4_HDR {
        return Err(TranslateError::BufferTooSmall);
    }
    let (o, body) = out[..cap].split_at_mut(V4_HDR + ICMP_HDR);
    let n = quoted_6to4(&msg[ICMP_HDR..], inner, body)?;
    let total = V4_HDR + ICMP_HDR + n;
    let icmp = &mut o[V4_HDR..];
    icmp[0] = t4;
    icmp[1] = c4;
    icmp[2..4].fill(0);
    icmp[4..8].copy_from_slice(&rest);
    let sum = checksum::sum(&body[..n], checksum::sum(icmp, 0));
    icmp[2..4].copy_from_slice(&checksum::finish(sum).to_be_bytes());
    let out = &mut out[..total];
    let tos = cfg.traffic_class.unwrap_or_else(|| traffic_class(pkt));
    write_v4_header(out, h, tos, pkt[7] - 1, PROTO_ICMP, src4, dst4, total);
    Ok(total)
}

/// Translates the IPv6 packet quoted in an ICMPv6 error into `o` (cut to fit), keeping its
/// hop limit (RFC 7915 §5.3). Returns the bytes written.
fn quoted_6to4(q: &[u8], inner: InnerMap6<'_>, o: &mut [u8]) -> Result<usize, TranslateError> {
    // A quoted packet we cannot read is a reason to drop the error, not to reply to it.
    let h = parse_v6(q, true).map_err(|_| TranslateError::Untranslatable)?;
    let (s6, d6) = v6_addrs(q);
    let (s4, d4) = inner(s6, d6).ok_or(TranslateError::Untranslatable)?;
    let upper = q.get(h.off..).unwrap_or(&[]);
    let upper = &upper[..upper.len().min(h.upper_len())];
    if h.proto == NH_ICMPV6 && upper.first().is_some_and(|&t| t < 128) {
        // RFC 7915 §5.3: one level only; an error quoting an error is dropped.
        return Err(TranslateError::Untranslatable);
    }
    let n = (V4_HDR + upper.len()).min(o.len());
    let o = &mut o[..n];
    o[V4_HDR..].copy_from_slice(&upper[..n - V4_HDR]);
    let first = h.frag.is_none_or(|f| f.offset == 0);
    if first {
        let v6 = (s6, d6, h.upper_len());
        match fix_upper_6to4(&mut o[V4_HDR..], h.proto, h.frag.is_none(), v6, (s4, d4)) {
            Ok(()) | Err(TranslateError::Truncated | TranslateError::Unsupported) => {}
            Err(e) => return Err(e),
        }
    }
    let proto = if h.proto == NH_ICMPV6 {
        PROTO_ICMP
    } else {
        h.proto
    };
    // The quoted packet's own Total Length: what it was, not what is left of it.
    let total = (V4_HDR + h.upper_len()).min(usize::from(u16::MAX));
    let (tc, hop) = (traffic_class(q), q[7]);
    write_v4_header(o, &h, tc, hop, proto, s4, d4, total);
    Ok(n)
}

/// RFC 7915 §4.2: ICMPv4 error → ICMPv6 error, quoted packet translated, capped at 1280 bytes.
fn icmp4_error_to_v6(
    cfg: &Config,
    pkt: &[u8],
    h: &V4Hdr,
    src6: Ipv6Addr,
    dst6: Ipv6Addr,
    inner: InnerMap4<'_>,
    out: &mut [u8],
) -> Result<usize, TranslateError> {
    let msg = &pkt[h.ihl..h.total];
    if !cfg!(fuzzing) && checksum::finish(checksum::sum(msg, 0)) != 0 {
        return Err(TranslateError::BadChecksum);
    }
    let (t, c) = (msg[0], msg[1]);
    let (t6, c6, rest) = match (t, c) {
        (ICMPV4_DEST_UNREACHABLE, 0 | 1 | 5 | 6 | 7 | 8 | 11 | 12) => {
            (ICMPV6_DEST_UNREACHABLE, 0, 0)
        }
        (ICMPV4_DEST_UNREACHABLE, 2) => (ICMPV6_PARAMETER_PROBLEM, 1, 6),
        (ICMPV4_DEST_UNREACHABLE, 3) => (ICMPV6_DEST_UNREACHABLE, 4, 0),
        (ICMPV4_DEST_UNREACHABLE, 4) => {
            let quoted_total = read16(msg, ICMP_HDR + 2).unwrap_or(0);
            (
                ICMPV6_PACKET_TOO_BIG,
                0,
                ptb_mtu(cfg, read16(msg, 6), quoted_total),
            )
        }
        (ICMPV4_DEST_UNREACHABLE, 9 | 10 | 13 | 15) => (ICMPV6_DEST_UNREACHABLE, 1, 0),
        (ICMPV4_TIME_EXCEEDED, 0 | 1) => (ICMPV6_TIME_EXCEEDED, c, 0),
        (ICMPV4_PARAMETER_PROBLEM, 0 | 2) => {
            let p = pointer_4to6(msg[4]).ok_or(TranslateError::Untranslatable)?;
            (ICMPV6_PARAMETER_PROBLEM, 0, p)
        }
        _ => return Err(TranslateError::Untranslatable),
    };

    // RFC 7915 §4.3: ICMPv6 errors are never fragmented; cut to the IPv6 minimum MTU.
    let cap = out.len().min(IPV6_MIN_MTU as usize);
    if cap < V6_HDR + ICMP_HDR + V6_HDR {
        return Err(TranslateError::BufferTooSmall);
    }
    let (o, body) = out[..cap].split_at_mut(V6_HDR + ICMP_HDR);
    let n = quoted_4to6(&msg[ICMP_HDR..], inner, body)?;
    let total = V6_HDR + ICMP_HDR + n;
    let icmp = &mut o[V6_HDR..];
    icmp[0] = t6;
    icmp[1] = c6;
    icmp[2..4].fill(0);
    icmp[4..8].copy_from_slice(&rest.to_be_bytes());
    let sum = checksum::sum(&body[..n], checksum::sum(icmp, 0));
    let sum = sum.wrapping_add(icmp6_pseudo(src6, dst6, ICMP_HDR + n));
    icmp[2..4].copy_from_slice(&checksum::finish(sum).to_be_bytes());
    let tc = cfg.traffic_class.unwrap_or(pkt[1]);
    write_v6_header(
        &mut out[..total],
        h,
        tc,
        pkt[8] - 1,
        NH_ICMPV6,
        src6,
        dst6,
        total,
    );
    Ok(total)
}

/// RFC 7915 §4.2 Packet Too Big MTU from a Fragmentation Needed MTU: max(1280, min(FN + 20,
/// IPv6 MTU, IPv4 MTU + 20)); FN 0 (pre-RFC 1191 routers) uses the plateau below the quoted
/// packet's Total Length.
fn ptb_mtu(cfg: &Config, fn_mtu: Option<u16>, quoted_total: u16) -> u32 {
    let fn_mtu = match fn_mtu.unwrap_or(0) {
        0 => MTU_PLATEAUS
            .into_iter()
            .find(|&p| p < quoted_total)
            .unwrap_or(68),
        m => m,
    };
    (u32::from(fn_mtu) + 20)
        .min(cfg.ipv6_mtu)
        .min(u32::from(cfg.ipv4_mtu) + 20)
        .max(IPV6_MIN_MTU)
}

/// Translates the IPv4 packet quoted in an ICMPv4 error into `o` (cut to fit), keeping its TTL
/// and never checking its header checksum (RFC 7915 §4.3; Jool issue #126).
fn quoted_4to6(q: &[u8], inner: InnerMap4<'_>, o: &mut [u8]) -> Result<usize, TranslateError> {
    let h = parse_v4(q, true).map_err(|_| TranslateError::Untranslatable)?;
    let (s4, d4) = v4_addrs(q);
    let (s6, d6) = inner(s4, d4).ok_or(TranslateError::Untranslatable)?;
    let upper = &q[h.ihl..q.len().min(h.total)];
    if h.proto == PROTO_ICMP && upper.first().is_some_and(|&t| is_icmp4_error(t)) {
        return Err(TranslateError::Untranslatable);
    }
    let fh = if h.is_fragment() { FRAG_HDR } else { 0 };
    if o.len() < V6_HDR + fh {
        return Err(TranslateError::BufferTooSmall);
    }
    let n = (V6_HDR + fh + upper.len()).min(o.len());
    let o = &mut o[..n];
    o[V6_HDR + fh..].copy_from_slice(&upper[..n - V6_HDR - fh]);
    if h.frag_offset == 0 {
        let v6 = (s6, d6, h.total - h.ihl);
        let cfg = Config {
            // A quoted zero UDP checksum stays zero: the datagram is incomplete.
            compute_udp_zero_checksum: false,
            ..Config::default()
        };
        let u = &mut o[V6_HDR + fh..];
        match fix_upper_4to6(&cfg, u, h.proto, !h.is_fragment(), (s4, d4), v6) {
            Ok(())
            | Err(
                TranslateError::Truncated
                | TranslateError::Unsupported
                | TranslateError::UdpZeroChecksum,
            ) => {}
            Err(e) => return Err(e),
        }
    }
    let nh = if h.proto == PROTO_ICMP {
        NH_ICMPV6
    } else {
        h.proto
    };
    // Payload Length of the quoted packet as it was.
    let total = (V6_HDR + fh + h.total - h.ihl).min(V6_HDR + usize::from(u16::MAX));
    write_v6_header(o, &h, q[1], q[8], nh, s6, d6, total);
    Ok(n)
}

/// ICMPv6 Parameter Problem pointer → ICMPv4 (RFC 7915 §5.2 figure 6).
fn pointer_6to4(p: u32) -> Option<u8> {
    Some(match p {
        0 => 0,
        1 => 1,
        4 | 5 => 2,
        6 => 9,
        7 => 8,
        8..=23 => 12,
        24..=39 => 16,
        _ => return None,
    })
}

/// ICMPv4 Parameter Problem pointer → ICMPv6 (RFC 7915 §4.2 figure 3).
fn pointer_4to6(p: u8) -> Option<u32> {
    Some(match p {
        0 => 0,
        1 => 1,
        2 | 3 => 4,
        8 => 7,
        9 => 6,
        12..=15 => 8,
        16..=19 => 24,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Jool's graybox network (doc §5): n6 2001:db8::5, n4 192.0.2.5 as 64:ff9b::c000:205,
    // the translator's pool4 192.0.2.2.
    const N6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5);
    const N4_AS_V6: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0xc000, 0x0205);
    const POOL4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    const N4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 5);
    const ROUTER4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
    const ROUTER6: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0xcb00, 0x7101);

    // --- builders -----------------------------------------------------------------------------

    fn udp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend_from_slice(&sport.to_be_bytes());
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(data);
        u
    }

    fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, data: &[u8]) -> Vec<u8> {
        let mut t = Vec::new();
        t.extend_from_slice(&sport.to_be_bytes());
        t.extend_from_slice(&dport.to_be_bytes());
        t.extend_from_slice(&seq.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        t.extend_from_slice(data);
        t
    }

    fn icmp(t: u8, c: u8, rest: [u8; 4], data: &[u8]) -> Vec<u8> {
        let mut m = vec![t, c, 0, 0];
        m.extend_from_slice(&rest);
        m.extend_from_slice(data);
        m
    }

    fn csum_at(proto: u8) -> Option<usize> {
        match proto {
            PROTO_TCP => Some(16),
            PROTO_UDP => Some(6),
            PROTO_ICMP | NH_ICMPV6 => Some(2),
            _ => None,
        }
    }

    /// IPv6 packet; `ext` = extension headers (chained by the caller, last one's next header
    /// = `proto`); the upper-layer checksum is filled in when `proto` has one.
    #[allow(clippy::too_many_arguments)]
    fn v6pkt(
        tc: u8,
        hop: u8,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        first_nh: u8,
        ext: &[u8],
        proto: u8,
        upper: &[u8],
    ) -> Vec<u8> {
        let mut up = upper.to_vec();
        if let Some(at) = csum_at(proto).filter(|&at| up.len() >= at + 2) {
            up[at..at + 2].fill(0);
            let c = checksum::upper_layer_v6(&src, &dst, proto, &up);
            let c = if c == 0 && proto == PROTO_UDP {
                0xffff
            } else {
                c
            };
            up[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        let mut p = vec![0x60 | (tc >> 4), tc << 4, 0, 0];
        p.extend_from_slice(&((ext.len() + up.len()) as u16).to_be_bytes());
        p.push(first_nh);
        p.push(hop);
        p.extend_from_slice(&src.octets());
        p.extend_from_slice(&dst.octets());
        p.extend_from_slice(ext);
        p.extend_from_slice(&up);
        p
    }

    fn simple6(hop: u8, src: Ipv6Addr, dst: Ipv6Addr, proto: u8, upper: &[u8]) -> Vec<u8> {
        v6pkt(0, hop, src, dst, proto, &[], proto, upper)
    }

    fn pseudo4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> u32 {
        addr_sum4(src, dst) + u32::from(proto) + len as u32
    }

    /// IPv4 packet with header and upper-layer checksums filled (`ff` = flags and offset).
    #[allow(clippy::too_many_arguments)]
    fn v4pkt(
        tos: u8,
        ttl: u8,
        id: u16,
        ff: u16,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: u8,
        opts: &[u8],
        upper: &[u8],
    ) -> Vec<u8> {
        let mut up = upper.to_vec();
        if let Some(at) = csum_at(proto).filter(|&at| up.len() >= at + 2) {
            up[at..at + 2].fill(0);
            let ps = if proto == PROTO_ICMP {
                0
            } else {
                pseudo4(src, dst, proto, up.len())
            };
            let c = checksum::finish(checksum::sum(&up, ps));
            let c = if c == 0 && proto == PROTO_UDP {
                0xffff
            } else {
                c
            };
            up[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        let ihl = 20 + opts.len();
        let mut p = vec![0x40 | (ihl / 4) as u8, tos];
        p.extend_from_slice(&((ihl + up.len()) as u16).to_be_bytes());
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&ff.to_be_bytes());
        p.extend_from_slice(&[ttl, proto, 0, 0]);
        p.extend_from_slice(&src.octets());
        p.extend_from_slice(&dst.octets());
        p.extend_from_slice(opts);
        let c = checksum::finish(checksum::sum(&p, 0));
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(&up);
        p
    }

    fn simple4(ttl: u8, src: Ipv4Addr, dst: Ipv4Addr, proto: u8, upper: &[u8]) -> Vec<u8> {
        v4pkt(0, ttl, 0x1234, 0, src, dst, proto, &[], upper)
    }

    /// (type, code) in, (type, code) out or dropped.
    type TypeCodeCase = ((u8, u8), Option<(u8, u8)>);

    // --- from-scratch verification -----------------------------------------------------------

    /// IPv4 header checksum, and for whole packets the TCP/UDP/ICMP checksum.
    fn check_v4(p: &[u8]) {
        let h = parse_v4(p, false).expect("valid IPv4");
        assert_eq!(checksum::finish(checksum::sum(&p[..h.ihl], 0)), 0, "header");
        if h.is_fragment() {
            return;
        }
        let (s, d) = v4_addrs(p);
        let up = &p[h.ihl..h.total];
        let ps = match h.proto {
            PROTO_TCP | PROTO_UDP => pseudo4(s, d, h.proto, up.len()),
            PROTO_ICMP => 0,
            _ => return,
        };
        assert_eq!(
            checksum::finish(checksum::sum(up, ps)),
            0,
            "upper {}",
            h.proto
        );
    }

    /// TCP/UDP/ICMPv6 checksum of a whole IPv6 packet.
    fn check_v6(p: &[u8]) {
        let h = parse_v6(p, false).expect("valid IPv6");
        if h.frag.is_some() {
            return;
        }
        let (s, d) = v6_addrs(p);
        let up = &p[h.off..];
        if matches!(h.proto, PROTO_TCP | PROTO_UDP | NH_ICMPV6) {
            let c = checksum::upper_layer_v6(&s, &d, h.proto, up);
            assert_eq!(c, 0, "upper {}", h.proto);
        }
    }

    fn t64(p: &[u8]) -> Result<Vec<u8>, TranslateError> {
        t64_with(&Config::default(), p)
    }

    fn t64_with(cfg: &Config, p: &[u8]) -> Result<Vec<u8>, TranslateError> {
        let mut out = [0u8; 70_000];
        let map = |s: Ipv6Addr, d: Ipv6Addr| Some((sip4(s)?, sip4(d)?));
        let (s, d) = v6_addrs(p);
        let (s4, d4) = (sip4(s).unwrap(), sip4(d).unwrap());
        let n = v6_to_v4_with(cfg, p, s4, d4, &map, &mut out)?;
        check_v4(&out[..n]);
        Ok(out[..n].to_vec())
    }

    fn t46(p: &[u8]) -> Result<Vec<u8>, TranslateError> {
        t46_with(&Config::default(), p)
    }

    fn t46_with(cfg: &Config, p: &[u8]) -> Result<Vec<u8>, TranslateError> {
        let mut out = [0u8; 70_000];
        let map = |s: Ipv4Addr, d: Ipv4Addr| Some((sip6(s), sip6(d)));
        let (s, d) = v4_addrs(p);
        let n = v4_to_v6_with(cfg, p, sip6(s), sip6(d), &map, &mut out)?;
        check_v6(&out[..n]);
        Ok(out[..n].to_vec())
    }

    /// The test network's static mapping: 2001:db8::5 ↔ 192.0.2.2, 64:ff9b::/96 otherwise.
    fn sip4(a: Ipv6Addr) -> Option<Ipv4Addr> {
        if a == N6 {
            return Some(POOL4);
        }
        crate::Prefix::WELL_KNOWN.allow_private(true).extract(&a)
    }

    fn sip6(a: Ipv4Addr) -> Ipv6Addr {
        if a == POOL4 {
            return N6;
        }
        crate::Prefix::WELL_KNOWN
            .allow_private(true)
            .embed(a)
            .unwrap()
    }

    /// Replaces the IPv4 identification (derived from contents when DF is clear) and fixes
    /// the header checksum, so packets can be compared byte for byte.
    fn with_id(mut p: Vec<u8>, id: u16) -> Vec<u8> {
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[10..12].fill(0);
        let c = checksum::finish(checksum::sum(&p[..20], 0));
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    fn id_of(p: &[u8]) -> u16 {
        u16::from_be_bytes([p[4], p[5]])
    }

    // --- RFC 7915 §5.1 / §4.1 header fields ---------------------------------------------------

    #[test]
    fn rfc7915_5_1_udp_fields() {
        let p6 = v6pkt(
            0xb8,
            64,
            N6,
            N4_AS_V6,
            PROTO_UDP,
            &[],
            PROTO_UDP,
            &udp(2000, 53, b"q"),
        );
        let p4 = t64(&p6).unwrap();
        let want = v4pkt(
            0xb8,
            63,
            0,
            0,
            POOL4,
            N4,
            PROTO_UDP,
            &[],
            &udp(2000, 53, b"q"),
        );
        assert_eq!(with_id(p4.clone(), 0), want);
        // A literal check of the header fields too.
        assert_eq!(&p4[..4], &[0x45, 0xb8, 0x00, 29]);
        assert_eq!(&p4[6..10], &[0, 0, 63, 17]);
        assert_eq!(&p4[12..20], &[192, 0, 2, 2, 192, 0, 2, 5]);
    }

    #[test]
    fn rfc7915_4_1_udp_fields() {
        let p4 = v4pkt(
            0x2e,
            64,
            7,
            0x4000,
            N4,
            POOL4,
            PROTO_UDP,
            &[],
            &udp(53, 2000, b"ans"),
        );
        let p6 = t46(&p4).unwrap();
        let want = v6pkt(
            0x2e,
            63,
            N4_AS_V6,
            N6,
            PROTO_UDP,
            &[],
            PROTO_UDP,
            &udp(53, 2000, b"ans"),
        );
        assert_eq!(p6, want);
        assert_eq!(&p6[..8], &[0x62, 0xe0, 0, 0, 0, 11, 17, 63]);
    }

    #[test]
    fn rfc7915_5_5_tcp_both_ways() {
        let seg = tcp(40000, 443, 0xdead_beef, 0x02, b"hello");
        let p6 = simple6(10, N6, N4_AS_V6, PROTO_TCP, &seg);
        let p4 = t64(&p6).unwrap();
        assert_eq!(
            with_id(p4.clone(), 0),
            v4pkt(0, 9, 0, 0, POOL4, N4, PROTO_TCP, &[], &seg)
        );
        let back = simple4(9, N4, POOL4, PROTO_TCP, &seg);
        assert_eq!(
            t46(&back).unwrap(),
            simple6(8, N4_AS_V6, N6, PROTO_TCP, &seg)
        );
    }

    #[test]
    fn rfc7915_5_2_echo_both_ways() {
        let e6 = icmp(ICMPV6_ECHO_REQUEST, 0, [0x12, 0x34, 0, 1], b"ping");
        let e4 = icmp(ICMPV4_ECHO_REQUEST, 0, [0x12, 0x34, 0, 1], b"ping");
        let p4 = t64(&simple6(64, N6, N4_AS_V6, NH_ICMPV6, &e6)).unwrap();
        assert_eq!(
            with_id(p4, 0),
            v4pkt(0, 63, 0, 0, POOL4, N4, PROTO_ICMP, &[], &e4)
        );

        let r4 = icmp(ICMPV4_ECHO_REPLY, 0, [0x12, 0x34, 0, 1], b"ping");
        let r6 = icmp(ICMPV6_ECHO_REPLY, 0, [0x12, 0x34, 0, 1], b"ping");
        let p6 = t46(&simple4(64, N4, POOL4, PROTO_ICMP, &r4)).unwrap();
        assert_eq!(p6, simple6(63, N4_AS_V6, N6, NH_ICMPV6, &r6));
    }

    #[test]
    fn rfc7915_hop_limit_expiry_both_ways() {
        let u = udp(1, 2, b"");
        assert_eq!(
            t64(&simple6(1, N6, N4_AS_V6, PROTO_UDP, &u)),
            Err(TranslateError::TimeExceeded)
        );
        assert_eq!(
            t64(&simple6(0, N6, N4_AS_V6, PROTO_UDP, &u)),
            Err(TranslateError::TimeExceeded)
        );
        assert_eq!(
            t46(&simple4(1, N4, POOL4, PROTO_UDP, &u)),
            Err(TranslateError::TimeExceeded)
        );
        assert!(t46(&simple4(2, N4, POOL4, PROTO_UDP, &u)).is_ok());
    }

    #[test]
    fn rfc7915_5_1_df_threshold_1260() {
        // Doc §5 case 14 (Jool ch/ci): 1281 → 1261 with DF; 1280 → 1260 without.
        let big = simple6(64, N6, N4_AS_V6, PROTO_UDP, &udp(1, 2, &[7; 1233]));
        assert_eq!(big.len(), 1281);
        let p4 = t64(&big).unwrap();
        assert_eq!((p4.len(), p4[6] & 0x40, id_of(&p4)), (1261, 0x40, 0));
        let p4 = t64(&simple6(
            64,
            N6,
            N4_AS_V6,
            PROTO_UDP,
            &udp(1, 2, &[7; 1232]),
        ))
        .unwrap();
        assert_eq!((p4.len(), p4[6] & 0x40), (1260, 0));
    }

    #[test]
    fn rfc7915_5_1_1_fragment_header() {
        // Doc §5 case 15 (Jool cj): ID 0x01020408, offset 80, M on/off → ID 1032, MF copied.
        for m in [1u8, 0] {
            let frag = [PROTO_UDP, 0, 0x02, 0x80 | m, 0x01, 0x02, 0x04, 0x08];
            let p6 = v6pkt(0, 64, N6, N4_AS_V6, NH_FRAGMENT, &frag, 0xff, &[9; 16]);
            let p4 = t64(&p6).unwrap();
            let ff = u16::from_be_bytes([p4[6], p4[7]]);
            assert_eq!(id_of(&p4), 1032);
            assert_eq!(ff, 80 | (u16::from(m) << 13), "DF clear, offset 80");
            assert_eq!(p4[9], PROTO_UDP);
            assert_eq!(&p4[20..], &[9; 16]);
        }
    }

    #[test]
    fn rfc7915_5_1_extension_headers_skipped() {
        // Doc §5 case 2 (Jool ab): HbH, DestOpt, Routing (SL 0), Fragment, then UDP.
        let u = udp(5, 6, b"xyz");
        let mut ext = vec![NH_DEST_OPTS, 0, 1, 4, 0, 0, 0, 0];
        ext.extend_from_slice(&[NH_ROUTING, 0, 1, 4, 0, 0, 0, 0]);
        ext.extend_from_slice(&[NH_FRAGMENT, 0, 0, 0, 0, 0, 0, 0]);
        ext.extend_from_slice(&[PROTO_UDP, 0, 0, 1, 0, 0, 0x12, 0x34]);
        let p6 = v6pkt(0, 64, N6, N4_AS_V6, NH_HOP_BY_HOP, &ext, PROTO_UDP, &u);
        let p4 = t64(&p6).unwrap();
        assert_eq!(
            (p4.len(), p4[9], id_of(&p4)),
            (20 + u.len(), PROTO_UDP, 0x1234)
        );
        assert_eq!(p4[6], 0x20, "MF, no DF");
        // Without the Fragment header: unfragmented and the UDP checksum still verifies.
        ext.truncate(16);
        ext[8] = PROTO_UDP;
        let p6 = v6pkt(0, 64, N6, N4_AS_V6, NH_HOP_BY_HOP, &ext, PROTO_UDP, &u);
        let p4 = t64(&p6).unwrap();
        assert_eq!(&p4[6..8], &[0, 0]);
        check_v4(&p4);
    }

    #[test]
    fn rfc7915_5_1_routing_segments_left() {
        let ext = [PROTO_UDP, 0, 0, 1, 0, 0, 0, 0];
        let p6 = v6pkt(
            0,
            64,
            N6,
            N4_AS_V6,
            NH_ROUTING,
            &ext,
            PROTO_UDP,
            &udp(1, 2, b""),
        );
        assert_eq!(
            t64(&p6),
            Err(TranslateError::ParameterProblem { pointer: 43 })
        );
    }

    #[test]
    fn rfc7915_5_1_header_after_fragment() {
        // Doc §5 case 3 (Jool ac).
        let ext = [
            NH_DEST_OPTS,
            0,
            0,
            0,
            0,
            0,
            0,
            1,
            PROTO_UDP,
            0,
            1,
            4,
            0,
            0,
            0,
            0,
        ];
        let p6 = v6pkt(
            0,
            64,
            N6,
            N4_AS_V6,
            NH_FRAGMENT,
            &ext,
            PROTO_UDP,
            &udp(1, 2, b""),
        );
        assert_eq!(t64(&p6), Err(TranslateError::HeaderAfterFragment));
    }

    #[test]
    fn rfc7915_opaque_protocols() {
        // Doc §5 case 4 (Jool ad, fa): No Next Header and DCCP pass unchanged.
        let p4 = t64(&simple6(64, N6, N4_AS_V6, 59, &[])).unwrap();
        assert_eq!((p4.len(), p4[9], p4[6] & 0x40), (20, 59, 0));
        let p4 = t64(&simple6(64, N6, N4_AS_V6, 33, &[1, 2, 3, 4])).unwrap();
        assert_eq!((&p4[20..], p4[9]), (&[1u8, 2, 3, 4][..], 33));
        let p6 = t46(&simple4(64, N4, POOL4, 33, &[1, 2, 3, 4])).unwrap();
        assert_eq!((&p6[40..], p6[6]), (&[1u8, 2, 3, 4][..], 33));
    }

    #[test]
    fn rfc7915_5_1_packet_too_big() {
        // Doc §5 case 13 (Jool cg): IPv6 1421 B, IPv4 MTU 1400 → PTB 1420.
        let cfg = Config {
            ipv4_mtu: 1400,
            ..Config::default()
        };
        let p6 = simple6(64, N6, N4_AS_V6, PROTO_UDP, &udp(1, 2, &[0; 1373]));
        assert_eq!(p6.len(), 1421);
        assert_eq!(
            t64_with(&cfg, &p6),
            Err(TranslateError::PacketTooBig { mtu: 1420 })
        );
        let p6 = simple6(64, N6, N4_AS_V6, PROTO_UDP, &udp(1, 2, &[0; 1372]));
        assert_eq!(t64_with(&cfg, &p6).unwrap().len(), 1400);
    }

    #[test]
    fn rfc7915_4_1_options_dropped() {
        // Doc §5 case 1 (Jool aa): options vanish, an expired source route included.
        let u = udp(53, 2000, b"a");
        let rr = [7, 7, 4, 0, 0, 0, 0, 0]; // Record Route, then EOL padding.
        let lsrr_expired = [0x83, 7, 8, 1, 2, 3, 4, 0];
        for opts in [&rr[..], &lsrr_expired[..]] {
            let p4 = v4pkt(0, 64, 1, 0x4000, N4, POOL4, PROTO_UDP, opts, &u);
            assert_eq!(t46(&p4).unwrap(), simple6(63, N4_AS_V6, N6, PROTO_UDP, &u));
        }
        let lsrr_live = [0x83, 7, 4, 1, 2, 3, 4, 0];
        let p4 = v4pkt(0, 64, 1, 0x4000, N4, POOL4, PROTO_UDP, &lsrr_live, &u);
        assert_eq!(t46(&p4), Err(TranslateError::SourceRoute));
    }

    #[test]
    fn rfc7915_4_1_fragment_gets_fragment_header() {
        // Doc §5 case 11 (Jool ce): fragment with MF, ID 1234, 1252 B → 1280 B, same ID.
        let u = udp(53, 2000, &[3; 1224]);
        let p4 = v4pkt(0, 64, 1234, 0x6000, N4, POOL4, PROTO_UDP, &[], &u);
        assert_eq!(p4.len(), 1252);
        let p6 = t46(&p4).unwrap();
        assert_eq!(p6.len(), 1280);
        assert_eq!(p6[6], NH_FRAGMENT);
        assert_eq!(&p6[40..48], &[PROTO_UDP, 0, 0, 1, 0, 0, 0x04, 0xd2]);
        // Non-first fragment: offset copied, payload opaque.
        let p4 = v4pkt(0, 64, 1234, 0x0010, N4, POOL4, PROTO_UDP, &[], &[5; 24]);
        let p6 = t46(&p4).unwrap();
        assert_eq!(&p6[40..48], &[PROTO_UDP, 0, 0, 0x80, 0, 0, 0x04, 0xd2]);
        assert_eq!(&p6[48..], &p4[20..], "payload untouched");
    }

    #[test]
    fn rfc7915_4_1_mtu_rules() {
        let cfg = Config {
            ipv6_mtu: 1280,
            ..Config::default()
        };
        // Doc §5 case 9 (cb, cd): 1260 B → 1280 B, no Fragment header, DF or not.
        for ff in [0x4000, 0] {
            let p4 = v4pkt(
                0,
                64,
                9,
                ff,
                N4,
                POOL4,
                PROTO_TCP,
                &[],
                &tcp(1, 2, 3, 0x10, &[0; 1220]),
            );
            assert_eq!(t46_with(&cfg, &p4).unwrap().len(), 1280);
        }
        // Case 8 (ca): 1261 B with DF → Fragmentation Needed, MTU 1260.
        let seg = tcp(1, 2, 3, 0x10, &[0; 1221]);
        let p4 = v4pkt(0, 64, 9, 0x4000, N4, POOL4, PROTO_TCP, &[], &seg);
        assert_eq!(
            t46_with(&cfg, &p4),
            Err(TranslateError::FragmentationNeeded { mtu: 1260 })
        );
        // Case 10 without DF: needs IPv6 fragments.
        let p4 = v4pkt(0, 64, 1234, 0, N4, POOL4, PROTO_TCP, &[], &seg);
        assert_eq!(
            t46_with(&cfg, &p4),
            Err(TranslateError::NeedsFragmentation { mtu: 1280 })
        );
    }

    #[test]
    fn rfc7915_4_5_udp_zero_checksum() {
        let mut u = udp(53, 2000, b"zero");
        let mut p4 = simple4(64, N4, POOL4, PROTO_UDP, &u);
        p4[26..28].fill(0);
        // Doc §5 case 17 (eb): computed afresh.
        let p6 = t46(&p4).unwrap();
        assert_eq!(p6, simple6(63, N4_AS_V6, N6, PROTO_UDP, &u));
        // (ea): option off → 3/13.
        let off = Config {
            compute_udp_zero_checksum: false,
            ..Config::default()
        };
        assert_eq!(t46_with(&off, &p4), Err(TranslateError::UdpZeroChecksum));
        // (ec): first fragment → 3/13 regardless.
        u.extend_from_slice(&[0; 4]);
        let mut p4 = v4pkt(0, 64, 1, 0x2000, N4, POOL4, PROTO_UDP, &[], &u);
        p4[26..28].fill(0);
        assert_eq!(t46(&p4), Err(TranslateError::UdpZeroChecksum));
    }

    #[test]
    fn rfc7915_4_1_bad_ipv4_header_checksum() {
        let mut p4 = simple4(64, N4, POOL4, PROTO_UDP, &udp(1, 2, b""));
        p4[10] ^= 1;
        assert_eq!(t46(&p4), Err(TranslateError::BadHeaderChecksum));
    }

    // --- ICMP errors (RFC 7915 §4.2-4.3, §5.2-5.3) --------------------------------------------

    /// An ICMPv4 error from `from` to the IPv4 side's view of n6, quoting a UDP packet n6 sent.
    fn icmp4_error(t: u8, c: u8, rest: [u8; 4], from: Ipv4Addr, inner_data: usize) -> Vec<u8> {
        let inner = v4pkt(
            0,
            5,
            77,
            0,
            POOL4,
            N4,
            PROTO_UDP,
            &[],
            &udp(2000, 4000, &vec![1; inner_data]),
        );
        simple4(64, from, POOL4, PROTO_ICMP, &icmp(t, c, rest, &inner))
    }

    fn icmp6_error(t: u8, c: u8, rest: [u8; 4], from: Ipv6Addr, inner_data: usize) -> Vec<u8> {
        let inner = simple6(
            5,
            N6,
            N4_AS_V6,
            PROTO_UDP,
            &udp(2000, 4000, &vec![1; inner_data]),
        );
        simple6(64, from, N6, NH_ICMPV6, &icmp(t, c, rest, &inner))
    }

    fn type_code_rest(p: &[u8], hdr: usize) -> (u8, u8, [u8; 4]) {
        (
            p[hdr],
            p[hdr + 1],
            [p[hdr + 4], p[hdr + 5], p[hdr + 6], p[hdr + 7]],
        )
    }

    #[test]
    fn rfc7915_4_2_port_unreachable_with_inner_packet() {
        let p4 = icmp4_error(3, 3, [0; 4], N4, 4);
        let p6 = t46(&p4).unwrap();
        let inner6 = simple6(5, N6, N4_AS_V6, PROTO_UDP, &udp(2000, 4000, &[1; 4]));
        let want = simple6(63, N4_AS_V6, N6, NH_ICMPV6, &icmp(1, 4, [0; 4], &inner6));
        assert_eq!(p6, want);
        check_v6(&p6[48..]); // the inner UDP checksum was updated too
    }

    #[test]
    fn rfc7915_5_2_port_unreachable_with_inner_packet() {
        let p6 = icmp6_error(1, 4, [0; 4], N4_AS_V6, 4);
        let p4 = t64(&p6).unwrap();
        assert_eq!(type_code_rest(&p4, 20), (3, 3, [0; 4]));
        let inner = &p4[28..];
        let want = v4pkt(
            0,
            5,
            id_of(inner),
            0,
            POOL4,
            N4,
            PROTO_UDP,
            &[],
            &udp(2000, 4000, &[1; 4]),
        );
        assert_eq!(
            inner,
            &want[..],
            "inner TTL kept, addresses and checksum mapped"
        );
        assert_eq!(p4.len(), 20 + 8 + 20 + 12);
    }

    #[test]
    fn rfc7915_4_2_type_code_table() {
        let cases: &[TypeCodeCase] = &[
            ((3, 0), Some((1, 0))),
            ((3, 1), Some((1, 0))),
            ((3, 2), Some((4, 1))),
            ((3, 3), Some((1, 4))),
            ((3, 5), Some((1, 0))),
            ((3, 6), Some((1, 0))),
            ((3, 7), Some((1, 0))),
            ((3, 8), Some((1, 0))),
            ((3, 9), Some((1, 1))),
            ((3, 10), Some((1, 1))),
            ((3, 11), Some((1, 0))),
            ((3, 12), Some((1, 0))),
            ((3, 13), Some((1, 1))),
            ((3, 14), None),
            ((3, 15), Some((1, 1))),
            ((11, 0), Some((3, 0))),
            ((11, 1), Some((3, 1))),
            ((12, 1), None),
            ((4, 0), None),
            ((5, 0), None),
        ];
        for &((t, c), want) in cases {
            let r = t46(&icmp4_error(t, c, [0; 4], ROUTER4, 4));
            match want {
                Some((t6, c6)) => {
                    let p6 = r.unwrap_or_else(|e| panic!("{t}/{c}: {e}"));
                    assert_eq!((p6[40], p6[41]), (t6, c6), "{t}/{c}");
                }
                None => assert_eq!(r, Err(TranslateError::Untranslatable), "{t}/{c}"),
            }
        }
        // 3/2 → 4/1 pointing at the Next Header field.
        let p6 = t46(&icmp4_error(3, 2, [0; 4], N4, 4)).unwrap();
        assert_eq!(type_code_rest(&p6, 40), (4, 1, [0, 0, 0, 6]));
        // Informational types other than echo are dropped.
        let ts = simple4(64, N4, POOL4, PROTO_ICMP, &icmp(13, 0, [0; 4], &[0; 12]));
        assert_eq!(t46(&ts), Err(TranslateError::Untranslatable));
    }

    #[test]
    fn rfc7915_5_2_type_code_table() {
        let cases: &[TypeCodeCase] = &[
            ((1, 0), Some((3, 1))),
            ((1, 1), Some((3, 10))),
            ((1, 2), Some((3, 1))),
            ((1, 3), Some((3, 1))),
            ((1, 4), Some((3, 3))),
            ((1, 5), None),
            ((3, 0), Some((11, 0))),
            ((3, 1), Some((11, 1))),
            ((4, 1), Some((3, 2))),
            ((4, 2), None),
            ((5, 0), None),
        ];
        for &((t, c), want) in cases {
            let r = t64(&icmp6_error(t, c, [0; 4], ROUTER6, 4));
            match want {
                Some((t4, c4)) => {
                    let p4 = r.unwrap_or_else(|e| panic!("{t}/{c}: {e}"));
                    assert_eq!((p4[20], p4[21]), (t4, c4), "{t}/{c}");
                }
                None => assert_eq!(r, Err(TranslateError::Untranslatable), "{t}/{c}"),
            }
        }
        // Neighbour Discovery and MLD have no IPv4 counterpart.
        for t in [130, 133, 135, 136] {
            let nd = simple6(255, N6, N4_AS_V6, NH_ICMPV6, &icmp(t, 0, [0; 4], &[0; 16]));
            assert_eq!(t64(&nd), Err(TranslateError::Untranslatable), "{t}");
        }
    }

    #[test]
    fn rfc7915_parameter_problem_pointers() {
        let v4_to_v6: &[(u8, Option<u32>)] = &[
            (0, Some(0)),
            (1, Some(1)),
            (2, Some(4)),
            (3, Some(4)),
            (4, None),
            (7, None),
            (8, Some(7)),
            (9, Some(6)),
            (10, None),
            (11, None),
            (12, Some(8)),
            (15, Some(8)),
            (16, Some(24)),
            (19, Some(24)),
            (20, None),
        ];
        for &(p4, want) in v4_to_v6 {
            let r = t46(&icmp4_error(12, 0, [p4, 0, 0, 0], ROUTER4, 4));
            match want {
                Some(p6) => {
                    let o = r.unwrap();
                    assert_eq!(type_code_rest(&o, 40), (4, 0, p6.to_be_bytes()), "{p4}");
                }
                None => assert_eq!(r, Err(TranslateError::Untranslatable), "{p4}"),
            }
        }
        let v6_to_v4: &[(u32, Option<u8>)] = &[
            (0, Some(0)),
            (1, Some(1)),
            (2, None),
            (3, None),
            (4, Some(2)),
            (5, Some(2)),
            (6, Some(9)),
            (7, Some(8)),
            (8, Some(12)),
            (23, Some(12)),
            (24, Some(16)),
            (39, Some(16)),
            (40, None),
        ];
        for &(p6, want) in v6_to_v4 {
            let r = t64(&icmp6_error(4, 0, p6.to_be_bytes(), ROUTER6, 4));
            match want {
                Some(p4) => {
                    let o = r.unwrap();
                    assert_eq!(type_code_rest(&o, 20), (12, 0, [p4, 0, 0, 0]), "{p6}");
                }
                None => assert_eq!(r, Err(TranslateError::Untranslatable), "{p6}"),
            }
        }
    }

    #[test]
    fn rfc7915_5_2_ptb_to_fragmentation_needed() {
        // Doc §5 case 16 (da): PTB 1280 → FN 1260.
        let p4 = t64(&icmp6_error(2, 0, 1280u32.to_be_bytes(), ROUTER6, 4)).unwrap();
        assert_eq!(type_code_rest(&p4, 20), (3, 4, [0, 0, 0x04, 0xec]));
        // Capped by the IPv4 MTU and the IPv6 MTU − 20.
        let cfg = Config {
            ipv4_mtu: 1400,
            ipv6_mtu: 1500,
            ..Config::default()
        };
        let p4 = t64_with(&cfg, &icmp6_error(2, 0, 9000u32.to_be_bytes(), ROUTER6, 4)).unwrap();
        assert_eq!(u16::from_be_bytes([p4[26], p4[27]]), 1400);
    }

    #[test]
    fn rfc7915_4_2_fragmentation_needed_to_ptb() {
        // Doc §5 case 16 (db): FN 1261/1260/1259 → PTB 1281/1280/1280.
        for (fnm, ptb) in [(1261u16, 1281u32), (1260, 1280), (1259, 1280)] {
            let [a, b] = fnm.to_be_bytes();
            let p6 = t46(&icmp4_error(3, 4, [0, 0, a, b], ROUTER4, 4)).unwrap();
            assert_eq!(type_code_rest(&p6, 40), (2, 0, ptb.to_be_bytes()), "{fnm}");
        }
        // Case 24: FN 1400 → PTB 1420.
        let p6 = t46(&icmp4_error(3, 4, [0, 0, 0x05, 0x78], ROUTER4, 4)).unwrap();
        assert_eq!(type_code_rest(&p6, 40).2, 1420u32.to_be_bytes());
        // FN MTU 0: plateau below the quoted Total Length (1500 → 1492, + 20).
        let p6 = t46(&icmp4_error(3, 4, [0; 4], ROUTER4, 1472)).unwrap();
        assert_eq!(
            type_code_rest(&p6, 40).2,
            1500u32.to_be_bytes(),
            "IPv6 MTU caps"
        );
        let cfg = Config {
            ipv6_mtu: 9000,
            ipv4_mtu: 9000,
            ..Config::default()
        };
        let p6 = t46_with(&cfg, &icmp4_error(3, 4, [0; 4], ROUTER4, 1472)).unwrap();
        assert_eq!(type_code_rest(&p6, 40).2, 1512u32.to_be_bytes());
    }

    #[test]
    fn rfc7915_4_3_error_sizes() {
        // Doc §5 case 5 (ba): ICMPv4 error 400 B (20+8+20+8+344) → ICMPv6 440 B, inner TTL kept.
        let p4 = icmp4_error(3, 3, [0; 4], N4, 344);
        assert_eq!(p4.len(), 400);
        let p6 = t46(&p4).unwrap();
        assert_eq!(p6.len(), 440);
        assert_eq!(p6[48 + 7], 5, "inner hop limit = inner TTL");
        // Cases 6 (bb, bc) and 28: 1500 B → exactly 1280 B, inner lengths as they were.
        let p4 = icmp4_error(3, 3, [0; 4], N4, 1444);
        assert_eq!(p4.len(), 1500);
        let p6 = t46(&p4).unwrap();
        assert_eq!(p6.len(), 1280);
        assert_eq!(u16::from_be_bytes([p6[4], p6[5]]), 1240);
        assert_eq!(
            u16::from_be_bytes([p6[48 + 4], p6[48 + 5]]),
            1452,
            "inner plen"
        );
    }

    #[test]
    fn rfc7915_5_3_error_sizes() {
        // Doc §5 case 7 (bd): ICMPv6 error 400 B → ICMPv4 360 B; (be) 700 B → 576 B.
        let p6 = icmp6_error(1, 4, [0; 4], N4_AS_V6, 304);
        assert_eq!(p6.len(), 400);
        assert_eq!(t64(&p6).unwrap().len(), 360);
        let p6 = icmp6_error(1, 4, [0; 4], N4_AS_V6, 604);
        assert_eq!(p6.len(), 700);
        let p4 = t64(&p6).unwrap();
        assert_eq!(p4.len(), 576);
        assert_eq!(
            u16::from_be_bytes([p4[28 + 2], p4[28 + 3]]),
            20 + 612,
            "inner total"
        );
    }

    #[test]
    fn rfc7915_icmp_error_rules() {
        // Doc §5 case 18 (ha): an error from 127.0.0.1 is still translated.
        let p4 = icmp4_error(11, 0, [0; 4], Ipv4Addr::LOCALHOST, 4);
        let mut out = [0u8; 1500];
        let map = |s: Ipv4Addr, d: Ipv4Addr| Some((sip6(s), sip6(d)));
        let n = v4_to_v6_with(&Config::default(), &p4, ROUTER6, N6, &map, &mut out).unwrap();
        assert_eq!((out[40], n), (3, 40 + 8 + 40 + 12));
        // Bad checksum → dropped; an error quoting an error → dropped.
        let mut bad = icmp4_error(3, 3, [0; 4], N4, 4);
        bad[23] ^= 1;
        assert_eq!(t46(&bad), Err(TranslateError::BadChecksum));
        let mut bad6 = icmp6_error(1, 4, [0; 4], N4_AS_V6, 4);
        bad6[43] ^= 1;
        assert_eq!(t64(&bad6), Err(TranslateError::BadChecksum));
        let nested = simple4(
            64,
            N4,
            POOL4,
            PROTO_ICMP,
            &icmp(3, 3, [0; 4], &icmp4_error(3, 3, [0; 4], N4, 4)),
        );
        assert_eq!(t46(&nested), Err(TranslateError::Untranslatable));
        // Quoted packet with other addresses: the plain functions refuse, a mapping works.
        let te = icmp4_error(11, 0, [0; 4], ROUTER4, 4);
        assert_eq!(
            v4_to_v6(&te, ROUTER6, N6, &mut out),
            Err(TranslateError::Untranslatable)
        );
        let pu = icmp4_error(3, 3, [0; 4], N4, 4);
        assert!(v4_to_v6(&pu, N4_AS_V6, N6, &mut out).is_ok());
    }

    // --- malformed input ----------------------------------------------------------------------

    #[test]
    fn malformed_input_is_an_error() {
        let mut out = [0u8; 2000];
        let p6 = simple6(64, N6, N4_AS_V6, PROTO_UDP, &udp(1, 2, b"abc"));
        let p4 = simple4(64, N4, POOL4, PROTO_UDP, &udp(1, 2, b"abc"));
        for n in 0..p6.len() {
            assert!(v6_to_v4(&p6[..n], POOL4, N4, &mut out).is_err(), "{n}");
        }
        for n in 0..p4.len() {
            assert!(v4_to_v6(&p4[..n], N4_AS_V6, N6, &mut out).is_err(), "{n}");
        }
        let mut v = p6.clone();
        v[0] = 0x40;
        assert_eq!(
            v6_to_v4(&v, POOL4, N4, &mut out),
            Err(TranslateError::Malformed)
        );
        let mut v = p4.clone();
        v[0] = 0x65;
        assert_eq!(
            v4_to_v6(&v, N4_AS_V6, N6, &mut out),
            Err(TranslateError::Malformed)
        );
        // Lying lengths.
        let mut v = p6.clone();
        v[5] += 1;
        assert_eq!(
            v6_to_v4(&v, POOL4, N4, &mut out),
            Err(TranslateError::Truncated)
        );
        let mut v = p4.clone();
        v[0] = 0x4f;
        assert!(v4_to_v6(&v, N4_AS_V6, N6, &mut out).is_err());
        // Output buffer too small.
        assert_eq!(
            v6_to_v4(&p6, POOL4, N4, &mut out[..30]),
            Err(TranslateError::BufferTooSmall)
        );
        assert_eq!(
            v4_to_v6(&p4, N4_AS_V6, N6, &mut out[..50]),
            Err(TranslateError::BufferTooSmall)
        );
    }

    // --- IPv6 fragmentation of IPv4 packets without DF (RFC 7915 §4.1, doc §2.7) -------------

    fn frag46(cfg: &Config, p4: &[u8]) -> Result<Vec<Vec<u8>>, TranslateError> {
        let mut out = [0u8; 70_000];
        let mut lens = [0usize; 64];
        let map = |s: Ipv4Addr, d: Ipv4Addr| Some((sip6(s), sip6(d)));
        let (s, d) = v4_addrs(p4);
        let k = v4_to_v6_fragments(cfg, p4, sip6(s), sip6(d), &map, &mut out, &mut lens)?;
        let mut at = 0;
        Ok(lens[..k]
            .iter()
            .map(|&n| {
                at += n;
                out[at - n..at].to_vec()
            })
            .collect())
    }

    /// (offset in bytes, M, identification) of an IPv6 fragment.
    fn frag_fields(p: &[u8]) -> (usize, bool, u32) {
        assert_eq!(p[6], NH_FRAGMENT);
        let fo = u16::from_be_bytes([p[42], p[43]]);
        let id = u32::from_be_bytes([p[44], p[45], p[46], p[47]]);
        (usize::from(fo >> 3) * 8, fo & 1 == 1, id)
    }

    /// Reassembles fragments of one datagram (in order) into an unfragmented IPv6 packet.
    fn reassemble(frags: &[Vec<u8>]) -> Vec<u8> {
        let mut p = frags[0][..40].to_vec();
        p[6] = frags[0][40];
        for f in frags {
            p.extend_from_slice(&f[48..]);
        }
        let plen = (p.len() - 40) as u16;
        p[4..6].copy_from_slice(&plen.to_be_bytes());
        p
    }

    #[test]
    fn rfc7915_4_1_fragments_tcp_1261() {
        // Doc §5 case 10 (cc, ck): TCP 1261 B, DF=0, ID 1234 → 1280 B (MF) + 57 B at 1232.
        let seg = tcp(1, 2, 3, 0x10, &[0x5a; 1221]);
        let p4 = v4pkt(0, 64, 1234, 0, N4, POOL4, PROTO_TCP, &[], &seg);
        assert_eq!(p4.len(), 1261);
        let f = frag46(&Config::default(), &p4).unwrap();
        assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), [1280, 57]);
        assert_eq!(frag_fields(&f[0]), (0, true, 1234));
        assert_eq!(frag_fields(&f[1]), (1232, false, 1234));
        let whole = reassemble(&f);
        check_v6(&whole);
        assert_eq!(whole, simple6(63, N4_AS_V6, N6, PROTO_TCP, &seg));
    }

    #[test]
    fn rfc7915_4_1_fragments_of_a_fragment() {
        // Doc §5 case 12 (cf): IPv4 fragment 1268 B, DF=0 → 1280 B + 64 B, ID kept, MF on both.
        let p4 = v4pkt(0, 64, 1234, 0x2000, N4, POOL4, 0xfd, &[], &[1; 1248]);
        let f = frag46(&Config::default(), &p4).unwrap();
        assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), [1280, 64]);
        assert_eq!(frag_fields(&f[0]), (0, true, 1234));
        assert_eq!(frag_fields(&f[1]), (1232, true, 1234));
    }

    #[test]
    fn rfc7915_4_1_fragments_udp_and_lowest_mtu() {
        // Doc §5 case 29 (minmtu6): UDP 1400-byte payload, ID 4660 → 1280 B + 224 B.
        let u = udp(53, 2000, &[7; 1400]);
        let p4 = v4pkt(0, 64, 4660, 0, N4, POOL4, PROTO_UDP, &[], &u);
        let f = frag46(&Config::default(), &p4).unwrap();
        assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), [1280, 224]);
        assert_eq!(frag_fields(&f[1]).2, 4660);
        check_v6(&reassemble(&f));
        // Case 20 (jca, jcb): lowest-ipv6-mtu 1402 → 1400 B (1352 data) + rest; DF=1 whole.
        let cfg = Config {
            lowest_ipv6_mtu: 1402,
            ..Config::default()
        };
        let u = udp(53, 2000, &[7; 1355]);
        let p4 = v4pkt(0, 64, 4660, 0, N4, POOL4, PROTO_UDP, &[], &u);
        let f = frag46(&cfg, &p4).unwrap();
        assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), [1400, 48 + 11]);
        assert_eq!(frag_fields(&f[1]).0, 169 * 8);
        let p4 = v4pkt(0, 64, 4660, 0x4000, N4, POOL4, PROTO_UDP, &[], &u);
        assert_eq!(frag46(&cfg, &p4).unwrap().len(), 1);
        // Zero UDP checksum computed over the whole datagram.
        let mut p4 = v4pkt(0, 64, 4660, 0, N4, POOL4, PROTO_UDP, &[], &u);
        p4[26..28].fill(0);
        let f = frag46(&cfg, &p4).unwrap();
        assert_eq!(reassemble(&f), simple6(63, N4_AS_V6, N6, PROTO_UDP, &u));
        // Small packets pass through as one.
        let p4 = simple4(64, N4, POOL4, PROTO_UDP, &udp(1, 2, b"x"));
        assert_eq!(frag46(&cfg, &p4).unwrap(), vec![t46(&p4).unwrap()]);
    }

    #[test]
    fn fragments_refuse_small_buffers() {
        let p4 = v4pkt(
            0,
            64,
            1,
            0,
            N4,
            POOL4,
            PROTO_UDP,
            &[],
            &udp(1, 2, &[0; 3000]),
        );
        let map = |s: Ipv4Addr, d: Ipv4Addr| Some((sip6(s), sip6(d)));
        let mut out = [0u8; 4000];
        let cfg = Config::default();
        let mut lens = [0usize; 2];
        assert_eq!(
            v4_to_v6_fragments(&cfg, &p4, N4_AS_V6, N6, &map, &mut out, &mut lens),
            Err(TranslateError::BufferTooSmall)
        );
        let mut lens = [0usize; 3];
        assert_eq!(
            v4_to_v6_fragments(&cfg, &p4, N4_AS_V6, N6, &map, &mut out[..3100], &mut lens),
            Err(TranslateError::BufferTooSmall)
        );
        assert_eq!(
            v4_to_v6_fragments(&cfg, &p4, N4_AS_V6, N6, &map, &mut out, &mut lens),
            Ok(3)
        );
    }

    // --- properties ---------------------------------------------------------------------------

    fn upper_strategy() -> impl Strategy<Value = (u8, Vec<u8>)> {
        (
            0u8..4,
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(|(k, a, b, seq, data)| match k {
                0 => (PROTO_UDP, udp(a, b, &data)),
                1 => (PROTO_TCP, tcp(a, b, seq, 0x18, &data)),
                2 => (
                    NH_ICMPV6,
                    icmp(ICMPV6_ECHO_REQUEST, 0, seq.to_be_bytes(), &data),
                ),
                _ => (
                    NH_ICMPV6,
                    icmp(ICMPV6_ECHO_REPLY, 0, seq.to_be_bytes(), &data),
                ),
            })
    }

    proptest! {
        /// RFC 7915 round trip: 6→4→6 gives back the packet, hop limit down by two.
        #[test]
        fn round_trip_6_4_6(
            (proto, upper) in upper_strategy(),
            tc in any::<u8>(),
            hop in 3u8..=255,
            s in any::<[u8; 16]>(),
            d4 in any::<u32>(),
            s4 in any::<u32>(),
        ) {
            let src6 = Ipv6Addr::from(s);
            let dst6 = crate::Prefix::WELL_KNOWN.allow_private(true).embed(Ipv4Addr::from(d4)).unwrap();
            let (src4, dst4) = (Ipv4Addr::from(s4), Ipv4Addr::from(d4));
            let p6 = v6pkt(tc, hop, src6, dst6, proto, &[], proto, &upper);
            let mut mid = [0u8; 1500];
            let n = v6_to_v4(&p6, src4, dst4, &mut mid).unwrap();
            check_v4(&mid[..n]);
            let mut back = [0u8; 1500];
            let m = v4_to_v6(&mid[..n], src6, dst6, &mut back).unwrap();
            let mut want = p6.clone();
            want[7] = hop - 2;
            prop_assert_eq!(&back[..m], &want[..]);
        }

        /// Arbitrary bytes never panic and never claim more output than the buffer holds.
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut out = [0u8; 300];
            if let Ok(n) = v6_to_v4(&data, POOL4, N4, &mut out) {
                prop_assert!(n <= out.len());
            }
            if let Ok(n) = v4_to_v6(&data, N4_AS_V6, N6, &mut out) {
                prop_assert!(n <= out.len());
            }
        }

        /// Valid packets with a few bytes changed (version nibble kept) never panic, and
        /// small output buffers are refused rather than overrun.
        #[test]
        fn mutated_packets_never_panic(
            (proto, upper) in upper_strategy(),
            err in any::<bool>(),
            flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 1..6),
            outlen in 0usize..1600,
        ) {
            let mut out = vec![0u8; outlen];
            let mut p6 = simple6(64, N6, N4_AS_V6, proto, &upper);
            if err {
                p6 = icmp6_error(1, 4, [0; 4], N4_AS_V6, upper.len());
            }
            let mut p4 = simple4(64, N4, POOL4, if proto == NH_ICMPV6 { PROTO_ICMP } else { proto }, &upper);
            if err {
                p4 = icmp4_error(3, 4, [0; 4], N4, upper.len());
            }
            for (at, x) in &flips {
                let i = usize::from(*at) % p6.len();
                if i > 0 { p6[i] ^= x; }
                let i = usize::from(*at) % p4.len();
                if i > 0 { p4[i] ^= x; }
            }
            if let Ok(n) = v6_to_v4(&p6, POOL4, N4, &mut out) {
                prop_assert!(n <= outlen);
            }
            if let Ok(n) = v4_to_v6(&p4, N4_AS_V6, N6, &mut out) {
                prop_assert!(n <= outlen);
            }
        }
    }
}
