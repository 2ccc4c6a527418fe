//! ICMP error translation (RFC 7915 §4.2–4.3, §5.2–5.3): the error's type, code and
//! parameter through [`icmpv4::ErrorRepr`] / [`icmpv6::ErrorRepr`], and the packet it quotes.

use super::headers::{
    FRAG_HDR, Out, V4_HDR, V4Hdr, V6_HDR, V6Hdr, parse_v4, parse_v6, traffic_class, v4_addrs,
    v6_addrs, write_v4_header, write_v6_header,
};
use super::upper::{fix_upper_4to6, fix_upper_6to4, icmp6_pseudo};
use super::{Config, ICMPV4_ERROR_MAX, IPV6_MIN_MTU, InnerMap4, InnerMap6, TranslateError};
use gate64_wire::{checksum, icmpv4, icmpv6, ipv4, ipv6};
use std::net::{Ipv4Addr, Ipv6Addr};

const ICMP_HDR: usize = icmpv4::HEADER_LEN;

/// RFC 1191 §7 plateaus, as Jool uses them for Fragmentation Needed with MTU 0.
const MTU_PLATEAUS: [u16; 11] = [
    65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68,
];

/// RFC 7915 §5.2: the ICMPv4 error an ICMPv6 error becomes, or `Untranslatable`.
pub fn error_6to4(cfg: &Config, e: icmpv6::ErrorRepr) -> Result<icmpv4::ErrorRepr, TranslateError> {
    use icmpv4::ErrorRepr as V4;
    use icmpv6::ErrorRepr as V6;
    Ok(match e {
        V6::DstUnreachable { code: 0 | 2 | 3 } => V4::DstUnreachable { code: 1 },
        V6::DstUnreachable { code: 1 } => V4::DstUnreachable { code: 10 },
        V6::DstUnreachable { code: 4 } => V4::DstUnreachable { code: 3 },
        V6::PacketTooBig { mtu } => {
            // RFC 7915 §5.2: min(PTB MTU − 20, IPv4 next-hop MTU, IPv6 MTU − 20).
            let mtu = mtu
                .saturating_sub(20)
                .min(u32::from(cfg.ipv4_mtu))
                .min(cfg.ipv6_mtu.saturating_sub(20));
            V4::FragNeeded {
                mtu: mtu.min(0xffff) as u16,
            }
        }
        V6::TimeExceeded {
            code: code @ (0 | 1),
        } => V4::TimeExceeded { code },
        V6::ParamProblem { code: 0, pointer } => V4::ParamProblem {
            code: 0,
            pointer: pointer_6to4(pointer).ok_or(TranslateError::Untranslatable)?,
        },
        V6::ParamProblem { code: 1, .. } => V4::DstUnreachable { code: 2 },
        _ => return Err(TranslateError::Untranslatable),
    })
}

/// RFC 7915 §4.2: the ICMPv6 error an ICMPv4 error becomes, or `Untranslatable`.
/// `quoted_total` is the quoted packet's Total Length, for Fragmentation Needed with MTU 0.
pub fn error_4to6(
    cfg: &Config,
    e: icmpv4::ErrorRepr,
    quoted_total: u16,
) -> Result<icmpv6::ErrorRepr, TranslateError> {
    use icmpv4::ErrorRepr as V4;
    use icmpv6::ErrorRepr as V6;
    Ok(match e {
        V4::DstUnreachable {
            code: 0 | 1 | 5 | 6 | 7 | 8 | 11 | 12,
        } => V6::DstUnreachable { code: 0 },
        V4::DstUnreachable { code: 2 } => V6::ParamProblem {
            code: 1,
            pointer: 6,
        },
        V4::DstUnreachable { code: 3 } => V6::DstUnreachable { code: 4 },
        V4::FragNeeded { mtu } => V6::PacketTooBig {
            mtu: ptb_mtu(cfg, mtu, quoted_total),
        },
        V4::DstUnreachable {
            code: 9 | 10 | 13 | 15,
        } => V6::DstUnreachable { code: 1 },
        V4::TimeExceeded {
            code: code @ (0 | 1),
        } => V6::TimeExceeded { code },
        V4::ParamProblem {
            code: 0 | 2,
            pointer,
        } => V6::ParamProblem {
            code: 0,
            pointer: pointer_4to6(pointer).ok_or(TranslateError::Untranslatable)?,
        },
        _ => return Err(TranslateError::Untranslatable),
    })
}

/// RFC 7915 §5.2: ICMPv6 error → ICMPv4 error, quoted packet translated, capped at 576 bytes.
pub(super) fn icmp6_error_to_v4(
    cfg: &Config,
    pkt: &[u8],
    h: &V6Hdr,
    v4: (Ipv4Addr, Ipv4Addr),
    inner: InnerMap6<'_>,
    out: &mut [u8],
) -> Result<usize, TranslateError> {
    let (src6, dst6) = v6_addrs(pkt);
    let msg = icmpv6::Packet::new_checked(&pkt[h.off..V6_HDR + h.plen])?;
    if !msg.verify_checksum(icmp6_pseudo(src6, dst6, msg.into_inner().len())) {
        return Err(TranslateError::BadChecksum);
    }
    if msg.msg_type() == icmpv6::TYPE_PACKET_TOO_BIG && msg.msg_code() != 0 {
        return Err(TranslateError::Untranslatable);
    }
    let e6 = icmpv6::ErrorRepr::parse(&msg).map_err(|_| TranslateError::Untranslatable)?;
    let e4 = error_6to4(cfg, e6)?;

    let cap = out.len().min(ICMPV4_ERROR_MAX);
    if cap < V4_HDR + ICMP_HDR + V4_HDR {
        return Err(TranslateError::BufferTooSmall);
    }
    let (o, body) = out[..cap].split_at_mut(V4_HDR + ICMP_HDR);
    let n = quoted_6to4(msg.data(), inner, body)?;
    let total = V4_HDR + ICMP_HDR + n;
    let icmp = &mut o[V4_HDR..];
    e4.emit(icmp)?;
    let sum = checksum::sum(&body[..n], checksum::sum(icmp, 0));
    icmp[icmpv4::field::CHECKSUM].copy_from_slice(&checksum::finish(sum).to_be_bytes());
    let fields = Out {
        tos: cfg.traffic_class.unwrap_or_else(|| traffic_class(pkt)),
        ttl: pkt[ipv6::field::HOP_LIMIT] - 1,
        proto: ipv4::PROTO_ICMP,
        src: v4.0,
        dst: v4.1,
        total,
    };
    write_v4_header(&mut out[..total], h, fields);
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
    if h.proto == ipv6::NH_ICMPV6 && upper.first().is_some_and(|&t| icmpv6::is_error(t)) {
        // RFC 7915 §5.3: one level only; an error quoting an error is dropped.
        return Err(TranslateError::Untranslatable);
    }
    let n = (V4_HDR + upper.len()).min(o.len());
    let o = &mut o[..n];
    o[V4_HDR..].copy_from_slice(&upper[..n - V4_HDR]);
    if h.is_first() {
        let v6 = (s6, d6, h.upper_len());
        match fix_upper_6to4(&mut o[V4_HDR..], h.proto, h.frag.is_none(), v6, (s4, d4)) {
            Ok(()) | Err(TranslateError::Truncated | TranslateError::Unsupported) => {}
            Err(e) => return Err(e),
        }
    }
    let fields = Out {
        tos: traffic_class(q),
        ttl: q[ipv6::field::HOP_LIMIT],
        proto: v4_protocol(h.proto),
        src: s4,
        dst: d4,
        // The quoted packet's own Total Length: what it was, not what is left of it.
        total: (V4_HDR + h.upper_len()).min(usize::from(u16::MAX)),
    };
    write_v4_header(o, &h, fields);
    Ok(n)
}

/// RFC 7915 §4.2: ICMPv4 error → ICMPv6 error, quoted packet translated, capped at 1280 bytes.
pub(super) fn icmp4_error_to_v6(
    cfg: &Config,
    pkt: &[u8],
    h: &V4Hdr,
    v6: (Ipv6Addr, Ipv6Addr),
    inner: InnerMap4<'_>,
    out: &mut [u8],
) -> Result<usize, TranslateError> {
    let msg = icmpv4::Packet::new_checked(&pkt[h.ihl..h.total])?;
    if !msg.verify_checksum(0) {
        return Err(TranslateError::BadChecksum);
    }
    let quoted_total = msg
        .data()
        .get(ipv4::field::LENGTH)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
    let e4 = icmpv4::ErrorRepr::parse(&msg).map_err(|_| TranslateError::Untranslatable)?;
    let e6 = error_4to6(cfg, e4, quoted_total)?;

    // RFC 7915 §4.3: ICMPv6 errors are never fragmented; cut to the IPv6 minimum MTU.
    let cap = out.len().min(IPV6_MIN_MTU as usize);
    if cap < V6_HDR + ICMP_HDR + V6_HDR {
        return Err(TranslateError::BufferTooSmall);
    }
    let (o, body) = out[..cap].split_at_mut(V6_HDR + ICMP_HDR);
    let n = quoted_4to6(msg.data(), inner, body)?;
    let total = V6_HDR + ICMP_HDR + n;
    let icmp = &mut o[V6_HDR..];
    e6.emit(icmp)?;
    let sum = checksum::sum(&body[..n], checksum::sum(icmp, 0));
    let sum = sum + icmp6_pseudo(v6.0, v6.1, ICMP_HDR + n);
    icmp[icmpv6::field::CHECKSUM].copy_from_slice(&checksum::finish(sum).to_be_bytes());
    let fields = Out {
        tos: cfg.traffic_class.unwrap_or(pkt[ipv4::field::TOS]),
        ttl: pkt[ipv4::field::TTL] - 1,
        proto: ipv6::NH_ICMPV6,
        src: v6.0,
        dst: v6.1,
        total,
    };
    write_v6_header(&mut out[..total], h, fields);
    Ok(total)
}

/// RFC 7915 §4.2 Packet Too Big MTU from a Fragmentation Needed MTU: max(1280, min(FN + 20,
/// IPv6 MTU, IPv4 MTU + 20)); FN 0 (pre-RFC 1191 routers) uses the plateau below the quoted
/// packet's Total Length.
fn ptb_mtu(cfg: &Config, fn_mtu: u16, quoted_total: u16) -> u32 {
    let fn_mtu = match fn_mtu {
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
    if h.proto == ipv4::PROTO_ICMP && upper.first().is_some_and(|&t| icmpv4::is_error(t)) {
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
    let fields = Out {
        tos: q[ipv4::field::TOS],
        ttl: q[ipv4::field::TTL],
        proto: v6_next_header(h.proto),
        src: s6,
        dst: d6,
        // Payload Length of the quoted packet as it was.
        total: (V6_HDR + fh + h.total - h.ihl).min(V6_HDR + usize::from(u16::MAX)),
    };
    write_v6_header(o, &h, fields);
    Ok(n)
}

/// The IPv4 protocol number of an IPv6 upper layer (ICMPv6 becomes ICMPv4).
pub(super) fn v4_protocol(nh: u8) -> u8 {
    if nh == ipv6::NH_ICMPV6 {
        ipv4::PROTO_ICMP
    } else {
        nh
    }
}

/// The IPv6 Next Header of an IPv4 protocol (ICMPv4 becomes ICMPv6).
pub(super) fn v6_next_header(proto: u8) -> u8 {
    if proto == ipv4::PROTO_ICMP {
        ipv6::NH_ICMPV6
    } else {
        proto
    }
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
