//! The header layout ICMPv4 (RFC 792) and ICMPv6 (RFC 4443 §2.1) share: type, code,
//! checksum and a second 32-bit word, then the body. [`crate::icmpv4::Packet`] and
//! [`crate::icmpv6::Packet`] are this view.

use crate::{Error, Result, checksum};

/// Length of the ICMP header (type, code, checksum and the second word).
pub const HEADER_LEN: usize = 8;

/// Byte ranges of the ICMP header fields.
pub mod field {
    use core::ops::Range;
    /// Type.
    pub const TYPE: usize = 0;
    /// Code.
    pub const CODE: usize = 1;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 2..4;
    /// The second word: echo identifier and sequence, MTU, pointer or unused.
    pub const REST: Range<usize> = 4..8;
    /// Echo identifier.
    pub const ECHO_IDENT: Range<usize> = 4..6;
    /// Echo sequence number.
    pub const ECHO_SEQNO: Range<usize> = 6..8;
}

/// A checked view of an ICMP message: the buffer holds at least the 8-byte header.
/// Accessors never panic on a checked view. The checksum functions take the pseudo-header
/// sum: 0 for ICMPv4, [`checksum::pseudo_header_v6`] for ICMPv6 (RFC 4443 §2.3).
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic on short buffers.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Checks that the buffer holds the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Packet { buffer })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::CHECKSUM];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The second header word.
    pub fn rest(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::REST];
        [b[0], b[1], b[2], b[3]]
    }

    /// Echo identifier (meaningful for echo messages only).
    pub fn echo_ident(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::ECHO_IDENT];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Echo sequence number (meaningful for echo messages only).
    pub fn echo_seq_no(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::ECHO_SEQNO];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The body after the header: echo data, or the quoted packet of an error.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// True when the checksum over the whole buffer verifies with the pseudo-header sum
    /// `pseudo`. Always true under `cfg(fuzzing)`.
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        cfg!(fuzzing) || checksum::finish(checksum::sum(self.buffer.as_ref(), pseudo)) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, t: u8) {
        self.buffer.as_mut()[field::TYPE] = t;
    }

    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, id: u16) {
        self.buffer.as_mut()[field::ECHO_IDENT].copy_from_slice(&id.to_be_bytes());
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Computes the checksum over the whole buffer with the pseudo-header sum `pseudo` and
    /// stores it.
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let c = checksum::finish(checksum::sum(self.buffer.as_ref(), pseudo));
        self.set_checksum(c);
    }

    /// The body, mutable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// Writes an 8-byte ICMP header with a zero checksum into `out[..8]`.
pub(crate) fn emit_header(out: &mut [u8], msg_type: u8, code: u8, rest: [u8; 4]) -> Result<()> {
    let h = out.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
    h[field::TYPE] = msg_type;
    h[field::CODE] = code;
    h[field::CHECKSUM].fill(0);
    h[field::REST].copy_from_slice(&rest);
    Ok(())
}
