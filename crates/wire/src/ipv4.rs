//! IPv4 header view and representation (RFC 791 §3.1), and the address classes Teredo cares
//! about (RFC 4380 §5.2.4).

use crate::{Error, Result, checksum};
use std::net::Ipv4Addr;

/// Length of the IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// Protocol number of ICMPv4.
pub const PROTO_ICMP: u8 = 0x01;
/// Protocol number of TCP.
pub const PROTO_TCP: u8 = 0x06;
/// Protocol number of UDP.
pub const PROTO_UDP: u8 = 0x11;

/// Byte ranges of the IPv4 header fields (RFC 791 §3.1).
pub mod field {
    /// Version (high nibble) and IHL (low nibble, in 32-bit words).
    pub const VER_IHL: usize = 0;
    /// Type of Service (DSCP and ECN).
    pub const TOS: usize = 1;
    /// Total Length.
    pub const LENGTH: core::ops::Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: core::ops::Range<usize> = 4..6;
    /// Flags (reserved, DF, MF) and Fragment Offset.
    pub const FLG_OFF: core::ops::Range<usize> = 6..8;
    /// Time to Live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header Checksum.
    pub const CHECKSUM: core::ops::Range<usize> = 10..12;
    /// Source Address.
    pub const SRC: core::ops::Range<usize> = 12..16;
    /// Destination Address.
    pub const DST: core::ops::Range<usize> = 16..20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A checked view of an IPv4 packet. After [`Packet::new_checked`] the version is 4, the IHL
/// is at least 5, the Total Length covers the header and the buffer holds the whole packet;
/// after [`Packet::new_checked_quoted`] (a packet quoted in an ICMP error, RFC 792) the buffer
/// may end before the Total Length. Accessors never panic on a checked view.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic on short buffers.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Checks version, IHL, Total Length and that the buffer holds the whole packet (bytes
    /// after Total Length are allowed and left out of [`Packet::payload`]).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_checked_quoted(buffer)?;
        if p.buffer.as_ref().len() < usize::from(p.total_len()) {
            return Err(Error::Truncated);
        }
        Ok(p)
    }

    /// Like [`Packet::new_checked`], but the payload may be cut short of the Total Length, as
    /// in the packet an ICMP error quotes.
    pub fn new_checked_quoted(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(Error::Malformed);
        }
        let p = Packet { buffer };
        let ihl = p.header_len();
        if ihl < HEADER_LEN || usize::from(p.total_len()) < ihl {
            return Err(Error::Malformed);
        }
        if p.buffer.as_ref().len() < ihl {
            return Err(Error::Truncated);
        }
        Ok(p)
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[r];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// Type of Service (DSCP and ECN).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// Total Length field.
    pub fn total_len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        self.u16_at(field::IDENT)
    }

    /// Don't Fragment.
    pub fn dont_frag(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_DF != 0
    }

    /// More Fragments.
    pub fn more_frags(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment Offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        self.u16_at(field::FLG_OFF) & OFFSET_MASK
    }

    /// A fragment: MF set or a non-zero offset.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// Time to Live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header Checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The options, between the fixed header and IHL × 4.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The header, options included.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The payload up to the Total Length (or the end of a quoted packet's buffer).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len().min(usize::from(self.total_len()));
        &b[self.header_len()..end]
    }

    /// True when the header checksum verifies. Always true under `cfg(fuzzing)` so fuzzers
    /// reach deeper code.
    pub fn verify_checksum(&self) -> bool {
        cfg!(fuzzing) || checksum::finish(checksum::sum(self.header(), 0)) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the Time to Live.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Recomputes the header checksum over the header and options.
    pub fn fill_checksum(&mut self) {
        let ihl = self.header_len();
        let b = self.buffer.as_mut();
        b[field::CHECKSUM].fill(0);
        let c = checksum::finish(checksum::sum(&b[..ihl], 0));
        b[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (ihl, total) = (self.header_len(), usize::from(self.total_len()));
        let b = self.buffer.as_mut();
        let end = b.len().min(total);
        &mut b[ihl..end]
    }
}

/// The fields of an IPv4 header without options, parsed or to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Payload length (Total Length minus the header).
    pub payload_len: u16,
    /// Time to Live.
    pub ttl: u8,
    /// Type of Service.
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// More Fragments.
    pub more_frags: bool,
    /// Fragment Offset in 8-byte units (13 bits).
    pub frag_offset: u16,
}

impl Repr {
    /// Parses a checked packet, verifying the header checksum (RFC 791 §3.1). Options are
    /// accepted and left out of the representation.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        if !p.verify_checksum() {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            payload_len: p.total_len() - p.header_len() as u16,
            ttl: p.ttl(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
        })
    }

    /// Bytes of the header this emits.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 20-byte header, checksum included, into `out[..20]`. The payload is the
    /// caller's. Fails when `out` is short or the lengths or offset do not fit their fields.
    #[inline]
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        let total = self
            .payload_len
            .checked_add(HEADER_LEN as u16)
            .ok_or(Error::Malformed)?;
        if self.frag_offset > OFFSET_MASK {
            return Err(Error::Malformed);
        }
        let h = out.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
        let flags =
            if self.dont_frag { FLAG_DF } else { 0 } | if self.more_frags { FLAG_MF } else { 0 };
        h[field::VER_IHL] = 0x45;
        h[field::TOS] = self.tos;
        h[field::LENGTH].copy_from_slice(&total.to_be_bytes());
        h[field::IDENT].copy_from_slice(&self.ident.to_be_bytes());
        h[field::FLG_OFF].copy_from_slice(&(flags | self.frag_offset).to_be_bytes());
        h[field::TTL] = self.ttl;
        h[field::PROTOCOL] = self.protocol;
        h[field::CHECKSUM].fill(0);
        h[field::SRC].copy_from_slice(&self.src.octets());
        h[field::DST].copy_from_slice(&self.dst.octets());
        let c = checksum::finish(checksum::sum(h, 0));
        h[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
        Ok(())
    }
}

/// Option type End of Option List (RFC 791 §3.1).
pub const OPT_EOL: u8 = 0;
/// Option type No Operation.
pub const OPT_NOP: u8 = 1;
/// Option type Loose Source and Record Route.
pub const OPT_LSRR: u8 = 0x83;
/// Option type Strict Source and Record Route.
pub const OPT_SSRR: u8 = 0x89;

/// One IPv4 option: its type and its bytes (type, and length and data for multi-byte ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpOption<'a> {
    /// Option type.
    pub kind: u8,
    /// The whole option.
    pub bytes: &'a [u8],
}

impl IpOption<'_> {
    /// An unexpired Loose or Strict Source Route: its pointer (byte 2) has not passed the
    /// end of the route data (RFC 791 §3.1).
    pub fn is_unexpired_source_route(&self) -> bool {
        matches!(self.kind, OPT_LSRR | OPT_SSRR)
            && self.bytes.len() >= 3
            && usize::from(self.bytes[2]) <= self.bytes.len()
    }
}

/// Iterates over the options in `opts` (the bytes [`Packet::options`] returns) up to End of
/// Option List. Yields [`Error::Malformed`], then stops, for an option whose length byte is
/// missing, below 2, or past the end.
pub fn options(opts: &[u8]) -> Options<'_> {
    Options { rest: opts }
}

/// Iterator returned by [`options`].
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<IpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.rest;
        let (&kind, tail) = rest.split_first()?;
        let len = match kind {
            OPT_EOL => {
                self.rest = &[];
                return None;
            }
            OPT_NOP => 1,
            _ => match tail.first() {
                Some(&l) if l >= 2 && usize::from(l) <= rest.len() => usize::from(l),
                _ => {
                    self.rest = &[];
                    return Some(Err(Error::Malformed));
                }
            },
        };
        let (bytes, after) = rest.split_at(len);
        self.rest = after;
        Some(Ok(IpOption { kind, bytes }))
    }
}

/// The addresses of something that looks like an IPv4 header, for decisions before full
/// validation. `None` when shorter than 20 bytes.
#[inline]
pub fn peek_addrs(buf: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr)> {
    (buf.len() >= HEADER_LEN).then(|| {
        let p = Packet::new_unchecked(buf);
        (p.src(), p.dst())
    })
}

/// RFC 4380 §5.2.4 "global unicast" test, the list Miredo's `v4global.c` implements too:
/// 0/8, 10/8, 127/8, 169.254/16, 172.16/12, 192.168/16, 192.88.99/24 (6to4 anycast) and
/// 224/4 and above (multicast, reserved, broadcast) are not global. TEST-NETs and 100.64/10
/// are global by this definition, which is what makes them usable in labs.
pub fn is_teredo_global(addr: Ipv4Addr) -> bool {
    let o = addr.octets();
    !(o[0] == 0
        || o[0] == 10
        || o[0] == 127
        || (o[0] == 169 && o[1] == 254)
        || (o[0] == 172 && (o[1] & 0xf0) == 16)
        || (o[0] == 192 && o[1] == 168)
        || (o[0] == 192 && o[1] == 88 && o[2] == 99)
        || o[0] >= 224)
}

#[cfg(test)]
mod tests;
