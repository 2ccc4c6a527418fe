//! UDP header view and representation (RFC 768).

use crate::{Error, Result, checksum, ipv4, ipv6};
use std::net::{Ipv6Addr, SocketAddrV4};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// Byte ranges of the UDP header fields (RFC 768).
pub mod field {
    use core::ops::Range;
    /// Source Port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination Port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Length (header and data).
    pub const LENGTH: Range<usize> = 4..6;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// The source and destination ports at the start of a UDP header (TCP's start the same
/// way), from its first four bytes alone: enough for a policy or a flow hash, which must not
/// require the whole datagram; `None` when shorter.
#[inline]
pub fn peek_ports(header: &[u8]) -> Option<(u16, u16)> {
    match *header {
        [s0, s1, d0, d1, ..] => Some((u16::from_be_bytes([s0, s1]), u16::from_be_bytes([d0, d1]))),
        _ => None,
    }
}

/// A checked view of a UDP datagram: the Length field is at least 8 and the buffer holds
/// that many bytes (more are allowed and left out of [`Packet::payload`]).
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic on short buffers.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Checks the header and the Length field against the buffer.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let p = Packet { buffer };
        let len = usize::from(p.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if p.buffer.as_ref().len() < len {
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

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }

    /// Length field (header and data).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// Checksum field; 0 over IPv4 means "none" (RFC 768).
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// The data, up to the Length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    /// True when the checksum verifies with the pseudo-header sum `pseudo`, or is 0 (none).
    /// Always true under `cfg(fuzzing)`.
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        let b = &self.buffer.as_ref()[..usize::from(self.len())];
        cfg!(fuzzing) || self.checksum() == 0 || checksum::finish(checksum::sum(b, pseudo)) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Computes the checksum over the datagram with the pseudo-header sum `pseudo` and stores
    /// it, a computed 0 as 0xffff (RFC 768: 0 means "no checksum").
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let len = usize::from(self.len());
        let c = checksum::finish(checksum::sum(&self.buffer.as_ref()[..len], pseudo));
        self.set_checksum(checksum::udp_field(c));
    }
}

/// The fields of a UDP header, parsed or to emit; the checksum is filled afterwards
/// ([`Packet::fill_checksum`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Bytes of data after the header.
    pub payload_len: u16,
}

impl Repr {
    /// The header fields of a checked datagram.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: p.len() - HEADER_LEN as u16,
        }
    }

    /// Writes the header (checksum zero) into `out[..8]`.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        let len = self
            .payload_len
            .checked_add(HEADER_LEN as u16)
            .ok_or(Error::Malformed)?;
        let h = out.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
        h[field::SRC_PORT].copy_from_slice(&self.src_port.to_be_bytes());
        h[field::DST_PORT].copy_from_slice(&self.dst_port.to_be_bytes());
        h[field::LENGTH].copy_from_slice(&len.to_be_bytes());
        h[field::CHECKSUM].fill(0);
        Ok(())
    }
}

/// Writes the UDP header (`src_port` → `dst_port`) in front of the payload that fills the
/// rest of `dgram`, with its checksum over the IPv6 addresses `src` → `dst` (mandatory over
/// IPv6, RFC 8200 §8.1). `Truncated` when `dgram` is shorter than a header, `Malformed` when
/// it is longer than a UDP length can say.
pub fn emit_over_v6(
    dgram: &mut [u8],
    (src, dst): (&Ipv6Addr, &Ipv6Addr),
    src_port: u16,
    dst_port: u16,
) -> Result<()> {
    let len = u16::try_from(dgram.len()).map_err(|_| Error::Malformed)?;
    let payload_len = len.checked_sub(HEADER_LEN as u16).ok_or(Error::Truncated)?;
    Repr {
        src_port,
        dst_port,
        payload_len,
    }
    .emit(dgram)?;
    let pseudo = checksum::pseudo_header_v6(src, dst, ipv6::NH_UDP, u32::from(len));
    Packet::new_unchecked(dgram).fill_checksum(pseudo);
    Ok(())
}

/// Bytes of IPv4 and UDP header in front of a datagram's payload ([`emit_over_v4`]).
pub const V4_OVERHEAD: usize = ipv4::HEADER_LEN + HEADER_LEN;

/// A UDP datagram in an IPv4 packet, as a host's stack takes it in ([`parse_over_v4`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V4Datagram<'a> {
    /// The sender's address and port.
    pub src: SocketAddrV4,
    /// The receiver's address and port.
    pub dst: SocketAddrV4,
    /// The data after the UDP header (as long as the UDP Length says).
    pub payload: &'a [u8],
}

/// Parses an IPv4 packet carrying one whole UDP datagram: a checked IPv4 header with a valid
/// checksum (options skipped), protocol UDP, no fragment, and a UDP Length within the IPv4
/// payload whose checksum verifies (0: none, RFC 768). `Unsupported` for another protocol or
/// a fragment (a host would reassemble; a Teredo peer does not fragment), `Truncated` or
/// `Malformed` for the rest.
pub fn parse_over_v4(packet: &[u8]) -> Result<V4Datagram<'_>> {
    let ip = ipv4::Packet::new_checked(packet)?;
    let repr = ipv4::Repr::parse(&ip)?;
    if repr.protocol != ipv4::PROTO_UDP || ip.is_fragment() {
        return Err(Error::Unsupported);
    }
    let start = ip.header_len();
    let end = usize::from(ip.total_len());
    let udp = Packet::new_checked(packet.get(start..end).ok_or(Error::Truncated)?)?;
    let pseudo = checksum::pseudo_header_v4(&repr.src, &repr.dst, ipv4::PROTO_UDP, udp.len());
    if !udp.verify_checksum(pseudo) {
        return Err(Error::Malformed);
    }
    Ok(V4Datagram {
        src: SocketAddrV4::new(repr.src, udp.src_port()),
        dst: SocketAddrV4::new(repr.dst, udp.dst_port()),
        payload: udp
            .into_inner()
            .get(HEADER_LEN..usize::from(udp.len()))
            .unwrap_or_default(),
    })
}

/// Appends to `out` an IPv4 packet (TTL 64, DF clear, identification `ident`) carrying
/// `payload` from `src` to `dst` in a UDP datagram with its checksum. `Malformed`, with
/// nothing appended, when the packet would exceed IPv4's 65,535 bytes.
pub fn emit_over_v4(
    out: &mut Vec<u8>,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    ident: u16,
    payload: &[u8],
) -> Result<()> {
    let udp_len = payload
        .len()
        .checked_add(HEADER_LEN)
        .and_then(|l| u16::try_from(l).ok())
        .ok_or(Error::Malformed)?;
    if usize::from(udp_len) + ipv4::HEADER_LEN > usize::from(u16::MAX) {
        return Err(Error::Malformed);
    }
    let start = out.len();
    out.resize(start + V4_OVERHEAD, 0);
    out.extend_from_slice(payload);
    let packet = &mut out[start..];
    ipv4::Repr {
        src: *src.ip(),
        dst: *dst.ip(),
        protocol: ipv4::PROTO_UDP,
        payload_len: udp_len,
        ttl: 64,
        tos: 0,
        ident,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
    }
    .emit(packet)?;
    let dgram = &mut packet[ipv4::HEADER_LEN..];
    Repr {
        src_port: src.port(),
        dst_port: dst.port(),
        payload_len: udp_len - HEADER_LEN as u16,
    }
    .emit(dgram)?;
    let pseudo = checksum::pseudo_header_v4(src.ip(), dst.ip(), ipv4::PROTO_UDP, udp_len);
    Packet::new_unchecked(dgram).fill_checksum(pseudo);
    Ok(())
}

#[cfg(test)]
mod tests;
