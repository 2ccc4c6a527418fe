//! GRE header view and representation (RFC 2784 with the RFC 2890 key and sequence number
//! extensions), and the Cisco-style GRE keepalive.
//!
//! ```text
//!  0                   1                   2                   3
//! |C|R|K|S|s|Recur|  reserved0  | Ver |         Protocol Type         |
//! |      Checksum (optional)      |      Reserved1 (optional)     |  C
//! |                         Key (optional)                        |  K
//! |                 Sequence Number (optional)                    |  S
//! ```
//!
//! Only version 0 is accepted (RFC 2784 §2.3.1: other versions are discarded;
//! [`Error::Unsupported`]). The RFC 1701 bits R (routing present), s (strict source route) and
//! Recur must be zero (RFC 2784 §2.3 says a receiver MUST discard a packet with any of bits
//! 1–5 set unless it implements RFC 1701, which gate64 does not; [`Error::Malformed`]). Bits
//! 6–12 are reserved, sent as zero and ignored on receipt (RFC 2784 §2.3). The optional
//! fields appear in the order checksum, key, sequence (RFC 2890 §2), so the header is 4 to
//! 16 bytes.
//!
//! The checksum (RFC 2784 §2.5) is the one's complement of the one's-complement sum of the
//! GRE header and payload with the Checksum field zero; Reserved1 is sent as zero.

use crate::{Error, Result, checksum};

/// IP protocol number (and IPv6 Next Header) of GRE.
pub const IP_PROTOCOL: u8 = 47;
/// Length of the mandatory part of the header (flags, version, protocol type).
pub const BASE_LEN: usize = 4;
/// Length of the longest header: base, checksum + reserved1, key, sequence.
pub const MAX_HEADER_LEN: usize = 16;

/// Checksum Present (RFC 2784 §2.2).
pub const FLAG_C: u16 = 0x8000;
/// Routing Present (RFC 1701; must be zero here).
pub const FLAG_R: u16 = 0x4000;
/// Key Present (RFC 2890 §2).
pub const FLAG_K: u16 = 0x2000;
/// Sequence Number Present (RFC 2890 §2).
pub const FLAG_S: u16 = 0x1000;
/// Strict Source Route (RFC 1701; must be zero here).
pub const FLAG_STRICT_ROUTE: u16 = 0x0800;
/// Recursion Control (RFC 1701, 3 bits; must be zero here).
pub const RECURSION_MASK: u16 = 0x0700;
/// The version field (3 bits); 0 is the only one accepted.
pub const VERSION_MASK: u16 = 0x0007;

/// Protocol Type of an IPv4 payload (an EtherType, RFC 2784 §2.4).
pub const PROTO_IPV4: u16 = 0x0800;
/// Protocol Type of an IPv6 payload.
pub const PROTO_IPV6: u16 = 0x86dd;
/// Protocol Type of bridged Ethernet (not carried by gate64's L3 tunnels).
pub const PROTO_TRANSPARENT_ETHERNET: u16 = 0x6558;
/// Protocol Type 0: the reply part of a Cisco-style keepalive ([`keepalive`]).
pub const PROTO_KEEPALIVE: u16 = 0x0000;

/// Byte ranges of the header fields; the optional ones move with the flags, so only the fixed
/// part is here (see [`Packet::header_len`]).
pub mod field {
    use core::ops::Range;
    /// Flags and version.
    pub const FLAGS: Range<usize> = 0..2;
    /// Protocol Type.
    pub const PROTOCOL: Range<usize> = 2..4;
}

/// Header length for a flag word (no checks).
const fn header_len_for(flags: u16) -> usize {
    let mut len = BASE_LEN;
    if flags & FLAG_C != 0 {
        len += 4;
    }
    if flags & FLAG_K != 0 {
        len += 4;
    }
    if flags & FLAG_S != 0 {
        len += 4;
    }
    len
}

/// A checked view of a GRE packet (header and payload): the flag word asks for nothing gate64
/// refuses, the version is 0, and the buffer holds the whole header.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic on short buffers.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Checks the flag word, the version and the header length against the buffer.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < BASE_LEN {
            return Err(Error::Truncated);
        }
        let flags = u16::from_be_bytes([b[0], b[1]]);
        if flags & VERSION_MASK != 0 {
            return Err(Error::Unsupported);
        }
        if flags & (FLAG_R | FLAG_STRICT_ROUTE | RECURSION_MASK) != 0 {
            return Err(Error::Malformed);
        }
        if b.len() < header_len_for(flags) {
            return Err(Error::Truncated);
        }
        Ok(Packet { buffer })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, at: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    fn u32_at(&self, at: usize) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// The flag and version word.
    pub fn flags(&self) -> u16 {
        self.u16_at(field::FLAGS.start)
    }

    /// Protocol Type: the EtherType of the payload.
    pub fn protocol_type(&self) -> u16 {
        self.u16_at(field::PROTOCOL.start)
    }

    /// Header length in bytes, 4 to 16.
    pub fn header_len(&self) -> usize {
        header_len_for(self.flags())
    }

    /// The Checksum field, when present.
    pub fn checksum(&self) -> Option<u16> {
        (self.flags() & FLAG_C != 0).then(|| self.u16_at(BASE_LEN))
    }

    /// The Key field (RFC 2890 §2.1), when present.
    pub fn key(&self) -> Option<u32> {
        let flags = self.flags();
        let at = BASE_LEN + if flags & FLAG_C != 0 { 4 } else { 0 };
        (flags & FLAG_K != 0).then(|| self.u32_at(at))
    }

    /// The Sequence Number field (RFC 2890 §2.2), when present.
    pub fn sequence(&self) -> Option<u32> {
        let flags = self.flags();
        let at = header_len_for(flags) - 4;
        (flags & FLAG_S != 0).then(|| self.u32_at(at))
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// True when no checksum is present or it verifies over header and payload (RFC 2784
    /// §2.5). Always true under `cfg(fuzzing)`.
    pub fn verify_checksum(&self) -> bool {
        cfg!(fuzzing)
            || self.checksum().is_none()
            || checksum::finish(checksum::sum(self.buffer.as_ref(), 0)) == 0
    }
}

/// The fields of a GRE header, parsed or to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Protocol Type (EtherType) of the payload.
    pub protocol_type: u16,
    /// Whether the header carries a checksum (filled by [`fill_checksum`]).
    pub checksum: bool,
    /// The RFC 2890 key.
    pub key: Option<u32>,
    /// The RFC 2890 sequence number.
    pub sequence: Option<u32>,
}

impl Repr {
    /// The header fields of a checked packet (the checksum's value is checked by
    /// [`Packet::verify_checksum`], not here).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            protocol_type: p.protocol_type(),
            checksum: p.checksum().is_some(),
            key: p.key(),
            sequence: p.sequence(),
        }
    }

    /// The flag word this emits.
    pub const fn flags(&self) -> u16 {
        (if self.checksum { FLAG_C } else { 0 })
            | (if self.key.is_some() { FLAG_K } else { 0 })
            | (if self.sequence.is_some() { FLAG_S } else { 0 })
    }

    /// Bytes of the header this emits, 4 to 16.
    pub const fn header_len(&self) -> usize {
        header_len_for(self.flags())
    }

    /// Writes the header into `out[..header_len()]` with Checksum and Reserved1 zero and
    /// returns its length. Call [`fill_checksum`] once the payload follows it.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        let len = self.header_len();
        let h = out.get_mut(..len).ok_or(Error::Truncated)?;
        h[field::FLAGS].copy_from_slice(&self.flags().to_be_bytes());
        h[field::PROTOCOL].copy_from_slice(&self.protocol_type.to_be_bytes());
        let mut at = BASE_LEN;
        if self.checksum {
            h[at..at + 4].fill(0);
            at += 4;
        }
        if let Some(key) = self.key {
            h[at..at + 4].copy_from_slice(&key.to_be_bytes());
            at += 4;
        }
        if let Some(seq) = self.sequence {
            h[at..at + 4].copy_from_slice(&seq.to_be_bytes());
        }
        Ok(len)
    }
}

/// Computes and stores the checksum of the GRE packet `packet` (header and payload) when its
/// C bit is set (RFC 2784 §2.5: Checksum zero while summing; Reserved1 stays zero). Does
/// nothing on a packet without checksum; fails on one shorter than its header.
pub fn fill_checksum(packet: &mut [u8]) -> Result<()> {
    let p = Packet::new_checked(&*packet)?;
    if p.checksum().is_none() {
        return Ok(());
    }
    packet[BASE_LEN..BASE_LEN + 2].fill(0);
    let c = checksum::finish(checksum::sum(packet, 0));
    packet[BASE_LEN..BASE_LEN + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

pub mod keepalive;

#[cfg(test)]
mod tests;
