//! Stateless IP/ICMP translation (RFC 7915 §4 IPv4→IPv6, §5 IPv6→IPv4) into caller buffers.
//!
//! The caller maps the outer addresses (RFC 6052 prefix for SIIT, the BIB/session table for
//! stateful NAT64) and passes them in; the translator rewrites headers, fixes transport
//! checksums and translates ICMP, including the packet quoted in an ICMP error. Conditions
//! where RFC 7915 wants an ICMP error sent back are returned as [`TranslateError`] variants
//! naming that error; the caller builds the reply.
//!
//! Nothing here allocates or panics on input; output never exceeds `out`. Header layouts
//! come from `gate64_wire`; this module holds RFC 7915's rules: `headers` what is read and
//! written, `upper` the transport rewrites, `icmp` the ICMP error translation.

mod headers;
mod icmp;
mod upper;

pub use icmp::{error_4to6, error_6to4};

use headers::{
    FRAG_HDR, Out, V4_HDR, V4Hdr, V6_HDR, check_v4_options, traffic_class, write_v4_header,
    write_v6_header,
};
pub(crate) use headers::{V6Hdr, parse_v4, parse_v6, v4_addrs, v6_addrs};
use icmp::{icmp4_error_to_v6, icmp6_error_to_v4, v4_protocol, v6_next_header};
use upper::{fix_upper_4to6, fix_upper_6to4, udp_checksum_v6};

use gate64_wire::{icmpv4, icmpv6, ipv4, ipv6};
use std::net::{Ipv4Addr, Ipv6Addr};

/// ICMP header length (type, code, checksum, four more bytes).
const ICMP_HDR: usize = icmpv4::HEADER_LEN;

/// IPv6 minimum link MTU (RFC 8200 §5); also the cap for translated ICMPv6 errors.
pub const IPV6_MIN_MTU: u32 = 1280;
/// Cap for translated ICMPv4 errors (RFC 1812 §4.3.2.3, as Jool does).
pub const ICMPV4_ERROR_MAX: usize = 576;
/// IPv6→IPv4 without a Fragment header: DF is set when the IPv4 packet is larger than this
/// (RFC 7915 §5.1, so that PMTUD works for packets a 1280-byte IPv6 link can carry).
const DF_THRESHOLD: usize = 1260;

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
///
/// Exhaustive on purpose: the dataplane maps each to a drop reason by name, so a new one
/// must be given its reason there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
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
    let (o_src, o_dst) = ipv6::peek_addrs(pkt).ok_or(TranslateError::Truncated)?;
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
    let (o_src, o_dst) = ipv4::peek_addrs(pkt).ok_or(TranslateError::Truncated)?;
    let reverse =
        move |s: Ipv4Addr, d: Ipv4Addr| (s == o_dst && d == o_src).then_some((dst6, src6));
    v4_to_v6_with(&Config::default(), pkt, src6, dst6, &reverse, out)
}

/// The checks every IPv6→IPv4 translation starts with: headers (RFC 7915 §5.1 policy) and
/// hop limit. Returns the headers and whether the packet is an ICMPv6 error to translate
/// with its quoted packet.
fn ingress_v6(pkt: &[u8]) -> Result<(V6Hdr, bool), TranslateError> {
    let h = parse_v6(pkt, false)?;
    if pkt[ipv6::field::HOP_LIMIT] <= 1 {
        return Err(TranslateError::TimeExceeded);
    }
    let upper = &pkt[h.off..V6_HDR + h.plen];
    let error = h.proto == ipv6::NH_ICMPV6
        && h.is_first()
        && upper.len() >= ICMP_HDR
        && icmpv6::is_error(upper[0]);
    Ok((h, error))
}

/// The checks every IPv4→IPv6 translation starts with: header, header checksum, options
/// (RFC 7915 §4.1) and TTL. Returns the header and whether the packet is an ICMPv4 error to
/// translate with its quoted packet.
fn ingress_v4(pkt: &[u8]) -> Result<(V4Hdr, bool), TranslateError> {
    let h = parse_v4(pkt, false)?;
    let p = ipv4::Packet::new_unchecked(pkt);
    if !p.verify_checksum() {
        return Err(TranslateError::BadHeaderChecksum);
    }
    check_v4_options(p.options())?;
    if p.ttl() <= 1 {
        return Err(TranslateError::TimeExceeded);
    }
    let upper = &pkt[h.ihl..h.total];
    let error = h.proto == ipv4::PROTO_ICMP
        && h.frag_offset == 0
        && upper.len() >= ICMP_HDR
        && icmpv4::is_error(upper[0]);
    Ok((h, error))
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
    let (h, error) = ingress_v6(pkt)?;
    if error {
        if h.frag.is_some() {
            return Err(TranslateError::Unsupported);
        }
        return icmp6_error_to_v4(cfg, pkt, &h, (src4, dst4), inner, out);
    }
    let upper = &pkt[h.off..V6_HDR + h.plen];
    let total = V4_HDR + upper.len();
    check_v4_size(cfg, total)?;
    let o = out.get_mut(..total).ok_or(TranslateError::BufferTooSmall)?;
    o[V4_HDR..].copy_from_slice(upper);
    if h.is_first() {
        let (src6, dst6) = v6_addrs(pkt);
        let v6 = (src6, dst6, h.upper_len());
        fix_upper_6to4(
            &mut o[V4_HDR..],
            h.proto,
            h.frag.is_none(),
            v6,
            (src4, dst4),
        )?;
    }
    write_v4_header(o, &h, v4_fields(cfg, pkt, &h, (src4, dst4), total));
    Ok(total)
}

/// The IPv4 header fields of a translated IPv6 packet (RFC 7915 §5.1).
fn v4_fields(
    cfg: &Config,
    pkt: &[u8],
    h: &V6Hdr,
    (src, dst): (Ipv4Addr, Ipv4Addr),
    total: usize,
) -> Out<Ipv4Addr> {
    Out {
        tos: cfg.traffic_class.unwrap_or_else(|| traffic_class(pkt)),
        ttl: pkt[ipv6::field::HOP_LIMIT] - 1,
        proto: v4_protocol(h.proto),
        src,
        dst,
        total,
    }
}

/// The IPv6 header fields of a translated IPv4 packet (RFC 7915 §4.1).
fn v6_fields(
    cfg: &Config,
    pkt: &[u8],
    h: &V4Hdr,
    (src, dst): (Ipv6Addr, Ipv6Addr),
    total: usize,
) -> Out<Ipv6Addr> {
    Out {
        tos: cfg.traffic_class.unwrap_or(pkt[ipv4::field::TOS]),
        ttl: pkt[ipv4::field::TTL] - 1,
        proto: v6_next_header(h.proto),
        src,
        dst,
        total,
    }
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
    let (h, error) = ingress_v4(pkt)?;
    let fragmented = h.is_fragment();
    if error {
        if fragmented {
            return Err(TranslateError::Unsupported);
        }
        return icmp4_error_to_v6(cfg, pkt, &h, (src6, dst6), inner, out);
    }
    let upper = &pkt[h.ihl..h.total];
    let fh = if fragmented { FRAG_HDR } else { 0 };
    let total = V6_HDR + fh + upper.len();
    check_v6_size(cfg, &h, total)?;
    let o = out.get_mut(..total).ok_or(TranslateError::BufferTooSmall)?;
    o[V6_HDR + fh..].copy_from_slice(upper);
    if h.frag_offset == 0 {
        let v6 = (src6, dst6, h.total - h.ihl);
        let u = &mut o[V6_HDR + fh..];
        fix_upper_4to6(cfg, u, h.proto, !fragmented, v4_addrs(pkt), v6)?;
    }
    write_v6_header(o, &h, v6_fields(cfg, pkt, &h, (src6, dst6), total));
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
    let (h, _) = ingress_v6(buf)?;
    let error = h.proto == ipv6::NH_ICMPV6
        && h.is_first()
        && buf.get(h.off).is_some_and(|&t| icmpv6::is_error(t));
    if error {
        return Err(TranslateError::NotInPlace);
    }
    let end = V6_HDR + h.plen;
    let total = V4_HDR + (end - h.off);
    check_v4_size(cfg, total)?;
    let fields = v4_fields(cfg, buf, &h, (src4, dst4), total);
    if h.is_first() {
        let (src6, dst6) = v6_addrs(buf);
        let v6 = (src6, dst6, h.upper_len());
        let u = &mut buf[h.off..end];
        fix_upper_6to4(u, h.proto, h.frag.is_none(), v6, (src4, dst4))?;
    }
    // parse_v6 guarantees off >= 40, so the IPv4 header fits inside the old IPv6 header.
    let at = h.off - V4_HDR;
    write_v4_header(&mut buf[at..end], &h, fields);
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
    let (h, error) = ingress_v4(pkt)?;
    if error {
        return Err(TranslateError::NotInPlace);
    }
    let fragmented = h.is_fragment();
    let upper_len = h.total - h.ihl;
    let fh = if fragmented { FRAG_HDR } else { 0 };
    let total = V6_HDR + fh + upper_len;
    check_v6_size(cfg, &h, total)?;
    let at = (start + h.ihl)
        .checked_sub(V6_HDR + fh)
        .ok_or(TranslateError::BufferTooSmall)?;
    let fields = v6_fields(cfg, pkt, &h, (src6, dst6), total);
    let v4 = v4_addrs(pkt);
    if h.frag_offset == 0 {
        let upper = start + h.ihl;
        let u = &mut buf[upper..upper + upper_len];
        fix_upper_4to6(cfg, u, h.proto, !fragmented, v4, (src6, dst6, upper_len))?;
    }
    write_v6_header(&mut buf[at..at + total], &h, fields);
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
    let mut at = 0;
    for (i, chunk) in upper.chunks(chunk_max).enumerate() {
        let n = V6_HDR + FRAG_HDR + chunk.len();
        let o = &mut out[at..at + n];
        o[V6_HDR + FRAG_HDR..].copy_from_slice(chunk);
        let pos = i * chunk_max;
        if i == 0 && h.frag_offset == 0 {
            first_fragment_upper(cfg, &h, pkt, (src6, dst6), &mut o[V6_HDR + FRAG_HDR..])?;
        }
        let last = pos + chunk.len() == upper.len();
        let fh = V4Hdr {
            more: h.more || !last,
            frag_offset: h.frag_offset + (pos / 8) as u16,
            ..h
        };
        write_v6_header(o, &fh, v6_fields(cfg, pkt, &h, (src6, dst6), n));
        lens[i] = n;
        at += n;
    }
    Ok(count)
}

/// The transport header of the first IPv6 fragment `u` that [`v4_to_v6_fragments`] makes of
/// the IPv4 packet `pkt`: its checksum covers the whole datagram.
fn first_fragment_upper(
    cfg: &Config,
    h: &V4Hdr,
    pkt: &[u8],
    v6: (Ipv6Addr, Ipv6Addr),
    u: &mut [u8],
) -> Result<(), TranslateError> {
    let upper = &pkt[h.ihl..h.total];
    let udp_zero =
        h.proto == ipv4::PROTO_UDP && u.get(gate64_wire::udp::field::CHECKSUM) == Some(&[0, 0][..]);
    if udp_zero {
        // RFC 7915 §4.5 over the whole datagram, which only v4_to_v6_fragments sees.
        if h.is_fragment() || !cfg.compute_udp_zero_checksum {
            return Err(TranslateError::UdpZeroChecksum);
        }
        let c = udp_checksum_v6(upper, v6.0, v6.1);
        u[gate64_wire::udp::field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
        return Ok(());
    }
    let v6 = (v6.0, v6.1, upper.len());
    fix_upper_4to6(cfg, u, h.proto, !h.is_fragment(), v4_addrs(pkt), v6)
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

#[cfg(test)]
mod tests;
