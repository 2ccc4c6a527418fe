//! IPv6 fixed header view and representation (RFC 8200 §3), the extension-header walker
//! (RFC 8200 §4) and the Fragment header (RFC 8200 §4.5).

use crate::{Error, Result};
use std::net::Ipv6Addr;

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;
/// Next-header value for ICMPv6.
pub const NH_ICMPV6: u8 = 58;
/// Next-header value "no next header", used by Teredo bubbles.
pub const NH_NONE: u8 = 59;
/// Next-header value for UDP.
pub const NH_UDP: u8 = 17;
/// Next-header value for TCP.
pub const NH_TCP: u8 = 6;
/// Next-header value for the Hop-by-Hop Options header.
pub const NH_HOP_BY_HOP: u8 = 0;
/// Next-header value for the Routing header.
pub const NH_ROUTING: u8 = 43;
/// Next-header value for the Fragment header.
pub const NH_FRAGMENT: u8 = 44;
/// Next-header value for the Destination Options header.
pub const NH_DEST_OPTS: u8 = 60;
/// Length of the Fragment header.
pub const FRAG_HEADER_LEN: usize = 8;

/// Byte ranges of the IPv6 fixed header fields (RFC 8200 §3).
pub mod field {
    /// Version, Traffic Class and Flow Label.
    pub const VER_TC_FLOW: core::ops::Range<usize> = 0..4;
    /// Payload Length.
    pub const LENGTH: core::ops::Range<usize> = 4..6;
    /// Next Header.
    pub const NXT_HDR: usize = 6;
    /// Hop Limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source Address.
    pub const SRC: core::ops::Range<usize> = 8..24;
    /// Destination Address.
    pub const DST: core::ops::Range<usize> = 24..40;
}

/// A checked view of an IPv6 packet: the version is 6 and the buffer holds at least
/// `40 + payload_len` bytes. Accessors never panic once [`Packet::new_checked`] succeeded.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    buf: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Checks version and length; bytes after `40 + payload_len` are allowed (RFC 4380 §5.3.1
    /// and RFC 6081 trailers) and excluded from [`Packet::as_bytes`].
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        let plen = check_fixed(buf)?;
        if buf.len() < HEADER_LEN + plen {
            return Err(Error::Truncated);
        }
        Ok(Packet {
            buf: &buf[..HEADER_LEN + plen],
        })
    }

    /// Like [`Packet::new_checked`], but the payload may be cut short of the Payload Length,
    /// as in the packet an ICMPv6 error quotes (RFC 4443 §3). [`Packet::payload`] is then what
    /// is there; [`Packet::payload_len`] still reads the field.
    #[inline]
    pub fn new_checked_quoted(buf: &'a [u8]) -> Result<Self> {
        let plen = check_fixed(buf)?;
        Ok(Packet {
            buf: &buf[..buf.len().min(HEADER_LEN + plen)],
        })
    }

    /// Traffic Class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.buf[0] << 4) | (self.buf[1] >> 4)
    }

    /// Flow Label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        u32::from_be_bytes([0, self.buf[1] & 0x0f, self.buf[2], self.buf[3]])
    }

    /// The extension headers after the fixed header, up to the Fragment header or the first
    /// header that is not Hop-by-Hop, Routing or Destination Options.
    #[inline]
    pub fn ext_headers(&self) -> ExtHeaders<'a> {
        ExtHeaders {
            buf: self.buf,
            next: self.next_header(),
            offset: HEADER_LEN,
            done: false,
        }
    }

    /// Walks the extension headers ([`Packet::ext_headers`]) to the upper layer. A plain
    /// loop rather than the iterator: this is the per-packet path (see
    /// `benches/views.rs`).
    #[inline]
    pub fn walk(&self) -> Result<Chain> {
        let (mut nh, mut off) = (self.next_header(), HEADER_LEN);
        let mut fragment = None;
        loop {
            match nh {
                NH_HOP_BY_HOP | NH_ROUTING | NH_DEST_OPTS => {
                    let len =
                        (usize::from(*self.buf.get(off + 1).ok_or(Error::Truncated)?) + 1) * 8;
                    let h = self.buf.get(off..off + len).ok_or(Error::Truncated)?;
                    nh = h[0];
                    off += len;
                }
                NH_FRAGMENT => {
                    let f = FragmentRepr::parse(self.buf.get(off..).unwrap_or_default())?;
                    nh = f.next_header;
                    off += FRAG_HEADER_LEN;
                    fragment = Some(f);
                    break;
                }
                _ => break,
            }
        }
        Ok(Chain {
            upper_offset: off,
            protocol: nh,
            fragment,
        })
    }

    /// The packet bytes, header and payload, without trailing bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// Total length: 40 + payload length.
    #[inline]
    pub fn total_len(&self) -> usize {
        self.buf.len()
    }

    /// Payload length field.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        u16::from_be_bytes([self.buf[4], self.buf[5]])
    }

    /// Next-header field.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buf[6]
    }

    /// Hop limit field.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buf[7]
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv6Addr {
        addr_at(self.buf, 8)
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv6Addr {
        addr_at(self.buf, 24)
    }

    /// Payload after the fixed header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[HEADER_LEN..]
    }

    /// A Teredo bubble: no next header and an empty payload (RFC 4380 §2.8).
    #[inline]
    pub fn is_bubble(&self) -> bool {
        self.next_header() == NH_NONE && self.payload_len() == 0
    }
}

/// Version and jumbogram checks shared by both constructors; returns the Payload Length.
#[inline]
fn check_fixed(buf: &[u8]) -> Result<usize> {
    if buf.len() < HEADER_LEN {
        return Err(Error::Truncated);
    }
    if buf[0] >> 4 != 6 {
        return Err(Error::Malformed);
    }
    let plen = usize::from(u16::from_be_bytes([buf[4], buf[5]]));
    if plen == 0 && buf[field::NXT_HDR] == NH_HOP_BY_HOP {
        // A hop-by-hop header with payload length 0 announces a jumbogram (RFC 2675).
        return Err(Error::Unsupported);
    }
    Ok(plen)
}

#[inline]
fn addr_at(buf: &[u8], at: usize) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&buf[at..at + 16]);
    Ipv6Addr::from(o)
}

/// Reads the destination address of something that looks like an IPv6 header, for routing
/// decisions before full validation. Returns `None` when too short.
#[inline]
pub fn peek_dst(buf: &[u8]) -> Option<Ipv6Addr> {
    (buf.len() >= HEADER_LEN).then(|| addr_at(buf, 24))
}

/// Source and destination of something that looks like an IPv6 header, for decisions before
/// full validation. Returns `None` when too short.
#[inline]
pub fn peek_addrs(buf: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr)> {
    (buf.len() >= HEADER_LEN).then(|| (addr_at(buf, 8), addr_at(buf, 24)))
}

/// Writes a fixed IPv6 header into `out[..40]`.
#[inline]
pub fn emit_header(
    out: &mut [u8],
    payload_len: u16,
    next_header: u8,
    hop_limit: u8,
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
) -> Result<()> {
    let h = out.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
    h[..4].copy_from_slice(&[0x60, 0, 0, 0]);
    h[4..6].copy_from_slice(&payload_len.to_be_bytes());
    h[6] = next_header;
    h[7] = hop_limit;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    Ok(())
}

/// The fields of an IPv6 fixed header, parsed or to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Next Header.
    pub next_header: u8,
    /// Payload Length.
    pub payload_len: u16,
    /// Hop Limit.
    pub hop_limit: u8,
    /// Traffic Class.
    pub traffic_class: u8,
    /// Flow Label (20 bits).
    pub flow_label: u32,
}

impl Repr {
    /// The fixed-header fields of a checked packet.
    #[inline]
    pub fn parse(p: &Packet<'_>) -> Repr {
        Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        }
    }

    /// Writes the fixed header into `out[..40]`. Fails when `out` is short or the flow label
    /// does not fit 20 bits.
    #[inline]
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        if self.flow_label > 0xf_ffff {
            return Err(Error::Malformed);
        }
        let h = out.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
        let word = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label;
        h[field::VER_TC_FLOW].copy_from_slice(&word.to_be_bytes());
        h[field::LENGTH].copy_from_slice(&self.payload_len.to_be_bytes());
        h[field::NXT_HDR] = self.next_header;
        h[field::HOP_LIMIT] = self.hop_limit;
        h[field::SRC].copy_from_slice(&self.src.octets());
        h[field::DST].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

/// Where the upper layer starts, as [`Packet::walk`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    /// Offset of the upper-layer header (or of the fragment data) from the packet start.
    pub upper_offset: usize,
    /// Next Header of the last extension header walked: the upper-layer protocol, or the
    /// extension header the walk stopped at.
    pub protocol: u8,
    /// The Fragment header, when the walk ended at one.
    pub fragment: Option<FragmentRepr>,
}

/// True for the IPv6 extension header types of RFC 8200 §4 and the IANA IPv6 Extension
/// Header Types registry (AH and ESP excepted: they start a payload gate64 does not parse
/// as headers): Hop-by-Hop, Routing, Fragment, Destination Options, Mobility, HIP, Shim6 and
/// the two experimental values.
#[inline]
pub fn is_extension(next_header: u8) -> bool {
    matches!(
        next_header,
        NH_HOP_BY_HOP | NH_ROUTING | NH_FRAGMENT | NH_DEST_OPTS | 135 | 139 | 140 | 253 | 254
    )
}

/// Iterator over the extension headers of a packet (RFC 8200 §4): Hop-by-Hop, Routing and
/// Destination Options by their length byte, and the Fragment header, after which it stops
/// (RFC 8200 §4.5: what follows is the fragmentable part). Yields an error, then stops, when
/// a header runs past the packet. Policy (which headers a caller accepts where) is the
/// caller's.
#[derive(Debug, Clone)]
pub struct ExtHeaders<'a> {
    buf: &'a [u8],
    next: u8,
    offset: usize,
    done: bool,
}

impl<'a> Iterator for ExtHeaders<'a> {
    type Item = Result<ExtHeader<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let len = match self.next {
            NH_HOP_BY_HOP | NH_ROUTING | NH_DEST_OPTS => self
                .buf
                .get(self.offset + 1)
                .map(|&l| (usize::from(l) + 1) * 8),
            NH_FRAGMENT => {
                self.done = true;
                Some(FRAG_HEADER_LEN)
            }
            _ => return None,
        };
        let bytes = len.and_then(|l| self.buf.get(self.offset..self.offset + l));
        let Some(bytes) = bytes else {
            self.done = true;
            return Some(Err(Error::Truncated));
        };
        let h = ExtHeader {
            header_type: self.next,
            offset: self.offset,
            bytes,
        };
        self.next = bytes[0];
        self.offset += bytes.len();
        Some(Ok(h))
    }
}

/// One extension header, as [`ExtHeaders`] yields it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader<'a> {
    /// Its type (the Next Header value that announced it).
    pub header_type: u8,
    /// Its offset from the start of the IPv6 packet.
    pub offset: usize,
    bytes: &'a [u8],
}

impl<'a> ExtHeader<'a> {
    /// Next Header field.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.bytes[0]
    }

    /// Length in bytes.
    #[allow(clippy::len_without_is_empty)]
    #[inline]
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The whole header.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Segments Left of a Routing header (RFC 8200 §4.4), at byte 3; `None` for other types.
    #[inline]
    pub fn segments_left(&self) -> Option<u8> {
        (self.header_type == NH_ROUTING).then(|| self.bytes[3])
    }

    /// The Fragment header's fields; `None` for other types.
    #[inline]
    pub fn fragment(&self) -> Option<FragmentRepr> {
        (self.header_type == NH_FRAGMENT)
            .then(|| FragmentRepr::parse(self.bytes).ok())
            .flatten()
    }
}

/// The IPv6 Fragment header (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentRepr {
    /// Next Header of the fragmentable part.
    pub next_header: u8,
    /// Fragment Offset in 8-byte units (13 bits).
    pub offset: u16,
    /// M flag: more fragments follow.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

impl FragmentRepr {
    /// Parses the 8-byte header at the start of `b`.
    #[inline]
    pub fn parse(b: &[u8]) -> Result<FragmentRepr> {
        let b = b.get(..FRAG_HEADER_LEN).ok_or(Error::Truncated)?;
        let fo = u16::from_be_bytes([b[2], b[3]]);
        Ok(FragmentRepr {
            next_header: b[0],
            offset: fo >> 3,
            more: fo & 1 != 0,
            ident: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        })
    }

    /// Writes the header into `out[..8]` (reserved fields zero).
    #[inline]
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        if self.offset > 0x1fff {
            return Err(Error::Malformed);
        }
        let f = out.get_mut(..FRAG_HEADER_LEN).ok_or(Error::Truncated)?;
        f[0] = self.next_header;
        f[1] = 0;
        f[2..4].copy_from_slice(&((self.offset << 3) | u16::from(self.more)).to_be_bytes());
        f[4..8].copy_from_slice(&self.ident.to_be_bytes());
        Ok(())
    }
}

/// True for addresses an IPv6 router may forward between links: not unspecified, loopback,
/// link-local, multicast or IPv4-mapped (RFC 4380 §5.3.1 "MUST NOT forward").
#[inline]
pub fn is_forwardable_unicast(a: &Ipv6Addr) -> bool {
    let s = a.segments();
    !(a.is_unspecified()
        || a.is_loopback()
        || a.is_multicast()
        || (s[0] & 0xffc0) == 0xfe80
        || a.to_ipv4_mapped().is_some())
}

#[cfg(test)]
mod tests;
