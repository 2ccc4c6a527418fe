//! ICMPv4 (RFC 792): the header view and the messages gate64 translates or sends: echo and
//! the errors RFC 7915 §4.2 maps.

use crate::{Error, Result, icmp};

pub use crate::icmp::{HEADER_LEN, Packet, field};

/// Echo Reply.
pub const TYPE_ECHO_REPLY: u8 = 0;
/// Destination Unreachable.
pub const TYPE_DST_UNREACHABLE: u8 = 3;
/// Source Quench (deprecated by RFC 6633, still an error message).
pub const TYPE_SOURCE_QUENCH: u8 = 4;
/// Redirect.
pub const TYPE_REDIRECT: u8 = 5;
/// Echo Request.
pub const TYPE_ECHO_REQUEST: u8 = 8;
/// Time Exceeded.
pub const TYPE_TIME_EXCEEDED: u8 = 11;
/// Parameter Problem.
pub const TYPE_PARAM_PROBLEM: u8 = 12;
/// Destination Unreachable code "fragmentation needed and DF set" (RFC 1191 §4 MTU in the
/// low 16 bits of the second word).
pub const CODE_FRAG_NEEDED: u8 = 4;

/// True for the error types, whose body quotes the packet that caused them (RFC 792; the
/// RFC 1122 §3.2.2 list).
#[inline]
pub fn is_error(msg_type: u8) -> bool {
    matches!(
        msg_type,
        TYPE_DST_UNREACHABLE
            | TYPE_SOURCE_QUENCH
            | TYPE_REDIRECT
            | TYPE_TIME_EXCEEDED
            | TYPE_PARAM_PROBLEM
    )
}

/// An ICMPv4 error message's header, the quoted packet aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorRepr {
    /// Destination Unreachable (type 3) with any code but 4.
    DstUnreachable {
        /// Code (0 net, 1 host, 2 protocol, 3 port, 5 source route failed, 13
        /// administratively prohibited, …).
        code: u8,
    },
    /// Destination Unreachable, fragmentation needed and DF set (3/4), with the next-hop
    /// MTU (RFC 1191 §4; 0 from pre-RFC 1191 routers).
    FragNeeded {
        /// Next-hop MTU.
        mtu: u16,
    },
    /// Time Exceeded (type 11): 0 TTL exceeded in transit, 1 reassembly time exceeded.
    TimeExceeded {
        /// Code.
        code: u8,
    },
    /// Parameter Problem (type 12) pointing at the offending octet.
    ParamProblem {
        /// Code (0 pointer indicates the error, 2 bad length).
        code: u8,
        /// Offset of the offending octet.
        pointer: u8,
    },
}

impl ErrorRepr {
    /// Type, code and second header word.
    pub fn type_code_rest(&self) -> (u8, u8, [u8; 4]) {
        match *self {
            ErrorRepr::DstUnreachable { code } => (TYPE_DST_UNREACHABLE, code, [0; 4]),
            ErrorRepr::FragNeeded { mtu } => {
                let [a, b] = mtu.to_be_bytes();
                (TYPE_DST_UNREACHABLE, CODE_FRAG_NEEDED, [0, 0, a, b])
            }
            ErrorRepr::TimeExceeded { code } => (TYPE_TIME_EXCEEDED, code, [0; 4]),
            ErrorRepr::ParamProblem { code, pointer } => {
                (TYPE_PARAM_PROBLEM, code, [pointer, 0, 0, 0])
            }
        }
    }

    /// The error of a checked message; [`Error::Unsupported`] for other types.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<ErrorRepr> {
        let (code, rest) = (p.msg_code(), p.rest());
        Ok(match p.msg_type() {
            TYPE_DST_UNREACHABLE if code == CODE_FRAG_NEEDED => ErrorRepr::FragNeeded {
                mtu: u16::from_be_bytes([rest[2], rest[3]]),
            },
            TYPE_DST_UNREACHABLE => ErrorRepr::DstUnreachable { code },
            TYPE_TIME_EXCEEDED => ErrorRepr::TimeExceeded { code },
            TYPE_PARAM_PROBLEM => ErrorRepr::ParamProblem {
                code,
                pointer: rest[0],
            },
            _ => return Err(Error::Unsupported),
        })
    }

    /// Writes the 8-byte header (checksum zero) into `out[..8]`.
    /// `DstUnreachable { code: 4 }` emits a Fragmentation Needed with MTU 0.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        let (t, c, rest) = self.type_code_rest();
        icmp::emit_header(out, t, c, rest)
    }
}

/// An ICMPv4 message header gate64 understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// Echo Request (type 8).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
    },
    /// Echo Reply (type 0).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
    },
    /// One of the errors of [`ErrorRepr`].
    Error(ErrorRepr),
}

impl Repr {
    /// The header of a checked message (echo code must be 0); [`Error::Unsupported`] for
    /// other types.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        let (ident, seq_no) = (p.echo_ident(), p.echo_seq_no());
        match (p.msg_type(), p.msg_code()) {
            (TYPE_ECHO_REQUEST, 0) => Ok(Repr::EchoRequest { ident, seq_no }),
            (TYPE_ECHO_REPLY, 0) => Ok(Repr::EchoReply { ident, seq_no }),
            (TYPE_ECHO_REQUEST | TYPE_ECHO_REPLY, _) => Err(Error::Malformed),
            _ => ErrorRepr::parse(p).map(Repr::Error),
        }
    }

    /// Writes the 8-byte header (checksum zero) into `out[..8]`.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        match *self {
            Repr::EchoRequest { ident, seq_no } => emit_echo(out, TYPE_ECHO_REQUEST, ident, seq_no),
            Repr::EchoReply { ident, seq_no } => emit_echo(out, TYPE_ECHO_REPLY, ident, seq_no),
            Repr::Error(e) => e.emit(out),
        }
    }
}

fn emit_echo(out: &mut [u8], msg_type: u8, ident: u16, seq: u16) -> Result<()> {
    let [a, b] = ident.to_be_bytes();
    let [c, d] = seq.to_be_bytes();
    icmp::emit_header(out, msg_type, 0, [a, b, c, d])
}

#[cfg(test)]
mod tests;
