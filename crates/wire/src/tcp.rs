//! TCP header view and representation (RFC 9293 §3.1).

use crate::{Error, Result, checksum};

/// Length of the TCP header without options.
pub const HEADER_LEN: usize = 20;

/// Byte ranges of the TCP header fields (RFC 9293 §3.1).
pub mod field {
    use core::ops::Range;
    /// Source Port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination Port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Sequence Number.
    pub const SEQ_NUM: Range<usize> = 4..8;
    /// Acknowledgment Number.
    pub const ACK_NUM: Range<usize> = 8..12;
    /// Data Offset (high nibble, in 32-bit words).
    pub const DATA_OFF: usize = 12;
    /// Control bits.
    pub const FLAGS: usize = 13;
    /// Window.
    pub const WINDOW: Range<usize> = 14..16;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 16..18;
    /// Urgent Pointer.
    pub const URGENT: Range<usize> = 18..20;
}

/// FIN control bit.
pub const FLAG_FIN: u8 = 0x01;
/// SYN control bit.
pub const FLAG_SYN: u8 = 0x02;
/// RST control bit.
pub const FLAG_RST: u8 = 0x04;
/// PSH control bit.
pub const FLAG_PSH: u8 = 0x08;
/// ACK control bit.
pub const FLAG_ACK: u8 = 0x10;
/// URG control bit.
pub const FLAG_URG: u8 = 0x20;
/// ECE control bit (RFC 3168).
pub const FLAG_ECE: u8 = 0x40;
/// CWR control bit (RFC 3168).
pub const FLAG_CWR: u8 = 0x80;

/// A checked view of a TCP segment: the buffer holds the header and its options (Data Offset
/// at least 5). Accessors never panic on a checked view.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic on short buffers.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Checks that the buffer holds the header and the options its Data Offset announces.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let p = Packet { buffer };
        let hl = p.header_len();
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if p.buffer.as_ref().len() < hl {
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

    fn u32_at(&self, r: core::ops::Range<usize>) -> u32 {
        let b = &self.buffer.as_ref()[r];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }

    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        self.u32_at(field::SEQ_NUM)
    }

    /// Acknowledgment number.
    pub fn ack_number(&self) -> u32 {
        self.u32_at(field::ACK_NUM)
    }

    /// Header length in bytes (Data Offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }

    /// The control bits (`FLAG_*`).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Window.
    pub fn window(&self) -> u16 {
        self.u16_at(field::WINDOW)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        self.u16_at(field::URGENT)
    }

    /// The options.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The data after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// True when the checksum verifies with the pseudo-header sum `pseudo` (see
    /// [`checksum::pseudo_header_v4`], [`checksum::pseudo_header_v6`]). Always true under
    /// `cfg(fuzzing)`.
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        cfg!(fuzzing) || checksum::finish(checksum::sum(self.buffer.as_ref(), pseudo)) == 0
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

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, seq: u32) {
        self.buffer.as_mut()[field::SEQ_NUM].copy_from_slice(&seq.to_be_bytes());
    }

    /// Sets the control bits.
    pub fn set_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[field::FLAGS] = flags;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Computes the checksum over the whole buffer (header and data) with the pseudo-header
    /// sum `pseudo` and stores it.
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let c = checksum::finish(checksum::sum(self.buffer.as_ref(), pseudo));
        self.set_checksum(c);
    }
}

/// The fields of a TCP header, parsed or to emit. The checksum is computed over the whole
/// segment afterwards ([`Packet::fill_checksum`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number.
    pub ack_number: u32,
    /// Control bits (`FLAG_*`).
    pub flags: u8,
    /// Window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options, a multiple of 4 bytes, at most 40.
    pub options: &'a [u8],
}

impl<'a> Repr<'a> {
    /// The header fields of a checked segment.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &'a Packet<&'a T>) -> Repr<'a> {
        let b: &'a [u8] = p.buffer.as_ref();
        let hl = p.header_len();
        Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq_number: p.seq_number(),
            ack_number: p.ack_number(),
            flags: p.flags(),
            window: p.window(),
            urgent: p.urgent(),
            options: &b[HEADER_LEN..hl],
        }
    }

    /// Bytes of the header this emits.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Writes the header (checksum zero) into `out[..header_len()]`.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        let hl = self.header_len();
        if !self.options.len().is_multiple_of(4) || hl > 60 {
            return Err(Error::Malformed);
        }
        let h = out.get_mut(..hl).ok_or(Error::Truncated)?;
        h[field::SRC_PORT].copy_from_slice(&self.src_port.to_be_bytes());
        h[field::DST_PORT].copy_from_slice(&self.dst_port.to_be_bytes());
        h[field::SEQ_NUM].copy_from_slice(&self.seq_number.to_be_bytes());
        h[field::ACK_NUM].copy_from_slice(&self.ack_number.to_be_bytes());
        h[field::DATA_OFF] = ((hl / 4) as u8) << 4;
        h[field::FLAGS] = self.flags;
        h[field::WINDOW].copy_from_slice(&self.window.to_be_bytes());
        h[field::CHECKSUM].fill(0);
        h[field::URGENT].copy_from_slice(&self.urgent.to_be_bytes());
        h[HEADER_LEN..].copy_from_slice(self.options);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
