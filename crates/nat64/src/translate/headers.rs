//! The RFC 7915 view of the two IP headers: what the translator reads from a packet (through
//! `gate64_wire`'s checked views and extension-header walker, with RFC 7915's policy on top)
//! and the headers it writes.

use super::{DF_THRESHOLD, TranslateError};
use gate64_wire::ipv6::{self, FragmentRepr};
use gate64_wire::{checksum, ipv4};
use std::net::{Ipv4Addr, Ipv6Addr};

pub(crate) use gate64_wire::ipv4::HEADER_LEN as V4_HDR;
pub(crate) use gate64_wire::ipv6::FRAG_HEADER_LEN as FRAG_HDR;
pub(crate) use gate64_wire::ipv6::HEADER_LEN as V6_HDR;

impl From<gate64_wire::Error> for TranslateError {
    fn from(e: gate64_wire::Error) -> Self {
        match e {
            gate64_wire::Error::Truncated => TranslateError::Truncated,
            gate64_wire::Error::Malformed => TranslateError::Malformed,
            gate64_wire::Error::Unsupported => TranslateError::Unsupported,
        }
    }
}

/// What the translator needs of an IPv6 packet's headers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct V6Hdr {
    /// Payload Length field.
    pub(crate) plen: usize,
    /// Offset of the upper-layer header.
    pub(crate) off: usize,
    /// Upper-layer protocol.
    pub(crate) proto: u8,
    pub(crate) frag: Option<FragmentRepr>,
}

impl V6Hdr {
    /// Upper-layer length as the headers announce it (for the pseudo-header).
    pub(crate) fn upper_len(&self) -> usize {
        (V6_HDR + self.plen).saturating_sub(self.off)
    }

    /// Whole packet or first fragment: the upper-layer header is there.
    pub(crate) fn is_first(&self) -> bool {
        self.frag.is_none_or(|f| f.offset == 0)
    }
}

/// Checks the IPv6 packet (`gate64_wire::ipv6::Packet`) and walks its extension headers with
/// RFC 7915 §5.1's policy: Hop-by-Hop only first (RFC 8200 §4.3), a Routing header with
/// Segments Left ≠ 0 refused with Parameter Problem, nothing that looks like an extension
/// header after the Fragment header. `quoted`: the packet is inside an ICMP error, so its
/// payload may be cut short of the Payload Length.
pub(crate) fn parse_v6(pkt: &[u8], quoted: bool) -> Result<V6Hdr, TranslateError> {
    let p = if quoted {
        ipv6::Packet::new_checked_quoted(pkt)?
    } else {
        ipv6::Packet::new_checked(pkt)?
    };
    let mut h = V6Hdr {
        plen: usize::from(p.payload_len()),
        off: V6_HDR,
        proto: p.next_header(),
        frag: None,
    };
    for eh in p.ext_headers() {
        let eh = eh?;
        if eh.header_type == ipv6::NH_HOP_BY_HOP && eh.offset != V6_HDR {
            return Err(TranslateError::ParameterProblem { pointer: 6 });
        }
        if eh.segments_left().is_some_and(|left| left != 0) {
            return Err(TranslateError::ParameterProblem {
                pointer: (eh.offset + 3) as u32,
            });
        }
        h.off = eh.offset + eh.len();
        h.proto = eh.next_header();
        h.frag = h.frag.or(eh.fragment());
    }
    if h.frag.is_some() && ipv6::is_extension(h.proto) {
        // RFC 7915 §5.1 (Jool test ac): the translator cannot walk past the Fragment header.
        return Err(TranslateError::HeaderAfterFragment);
    }
    Ok(h)
}

/// `pkt` holds at least the 40-byte fixed header.
pub(crate) fn v6_addrs(pkt: &[u8]) -> (Ipv6Addr, Ipv6Addr) {
    ipv6::peek_addrs(pkt).unwrap_or((Ipv6Addr::UNSPECIFIED, Ipv6Addr::UNSPECIFIED))
}

/// Traffic Class of an IPv6 packet (0 if `pkt` is not one: callers have parsed it).
pub(crate) fn traffic_class(pkt: &[u8]) -> u8 {
    ipv6::Packet::new_checked_quoted(pkt).map_or(0, |p| p.traffic_class())
}

/// What the translator needs of an IPv4 header.
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

/// Checks version, IHL and Total Length (`gate64_wire::ipv4::Packet`). `quoted`: the packet
/// may be cut short.
pub(crate) fn parse_v4(pkt: &[u8], quoted: bool) -> Result<V4Hdr, TranslateError> {
    let p = if quoted {
        ipv4::Packet::new_checked_quoted(pkt)?
    } else {
        ipv4::Packet::new_checked(pkt)?
    };
    Ok(V4Hdr {
        ihl: p.header_len(),
        total: usize::from(p.total_len()),
        id: p.ident(),
        df: p.dont_frag(),
        more: p.more_frags(),
        frag_offset: p.frag_offset(),
        proto: p.protocol(),
    })
}

/// RFC 7915 §4.1: options are dropped, except that an unexpired Loose or Strict Source Route
/// means the packet is not translated.
pub(crate) fn check_v4_options(opts: &[u8]) -> Result<(), TranslateError> {
    for opt in ipv4::options(opts) {
        if opt?.is_unexpired_source_route() {
            return Err(TranslateError::SourceRoute);
        }
    }
    Ok(())
}

/// `pkt` holds at least 20 bytes.
pub(crate) fn v4_addrs(pkt: &[u8]) -> (Ipv4Addr, Ipv4Addr) {
    ipv4::peek_addrs(pkt).unwrap_or((Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED))
}

/// The fields a translated header takes from its context: Traffic Class / TOS, hop limit /
/// TTL, upper-layer protocol, addresses and the packet's total length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out<A> {
    pub(crate) tos: u8,
    pub(crate) ttl: u8,
    pub(crate) proto: u8,
    pub(crate) src: A,
    pub(crate) dst: A,
    pub(crate) total: usize,
}

/// Writes the IPv4 header into `o[..20]` for a translated IPv6 packet (RFC 7915 §5.1); the
/// payload is already at `o[20..]`.
pub(crate) fn write_v4_header(o: &mut [u8], h: &V6Hdr, f: Out<Ipv4Addr>) {
    let (ident, dont_frag, more_frags, frag_offset) = match h.frag {
        // RFC 7915 §5.1.1: low 16 bits of the identification, DF clear, MF and offset copied.
        Some(fr) => (fr.ident as u16, false, fr.more, fr.offset & 0x1fff),
        None if f.total > DF_THRESHOLD => (0, true, false, 0),
        // DF clear, so the packet may be fragmented by IPv4 routers and needs an
        // identification; without state or RNG we derive one from the contents.
        None => (flow_ident(o, f.src, f.dst), false, false, 0),
    };
    let repr = ipv4::Repr {
        src: f.src,
        dst: f.dst,
        protocol: f.proto,
        payload_len: (f.total as u16).wrapping_sub(V4_HDR as u16),
        ttl: f.ttl,
        tos: f.tos,
        ident,
        dont_frag,
        more_frags,
        frag_offset,
    };
    // Callers size `o` to at least 20 bytes and `total` to at most 65535.
    let _ = repr.emit(o);
}

/// An identification that varies between packets of a flow: the sum of the addresses and the
/// first bytes of the payload, which `o[20..]` already holds.
fn flow_ident(o: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> u16 {
    let head = o.get(V4_HDR..o.len().min(V4_HDR + 64)).unwrap_or_default();
    !checksum::finish(checksum::sum(head, checksum::addr_sum_v4(&src, &dst)))
}

/// Writes the IPv6 header (and a Fragment header for IPv4 fragments) into `o` for a translated
/// IPv4 packet (RFC 7915 §4.1).
pub(crate) fn write_v6_header(o: &mut [u8], h: &V4Hdr, f: Out<Ipv6Addr>) {
    let frag = h.is_fragment();
    let repr = ipv6::Repr {
        src: f.src,
        dst: f.dst,
        next_header: if frag { ipv6::NH_FRAGMENT } else { f.proto },
        payload_len: (f.total - V6_HDR) as u16,
        hop_limit: f.ttl,
        traffic_class: f.tos,
        flow_label: 0,
    };
    // Callers size `o` to the 40 (48 with a Fragment header) bytes written here.
    let _ = repr.emit(o);
    if frag {
        let fr = FragmentRepr {
            next_header: f.proto,
            offset: h.frag_offset,
            more: h.more,
            ident: u32::from(h.id),
        };
        let _ = fr.emit(o.get_mut(V6_HDR..).unwrap_or_default());
    }
}
