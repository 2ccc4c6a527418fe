//! IKEv2 messages (RFC 7296 §3): the 28-byte header, the generic payload chain and every
//! payload gate64 speaks, parsed into owned `Repr`s and emitted back.
//!
//! Contract: [`Message::parse`] never panics and bounds every count (payloads, proposals,
//! transforms, selectors, attributes) so a hostile datagram costs at most linear work.
//! Unknown payload types without the critical bit are skipped (RFC 7296 §2.5); an unknown
//! payload with the critical bit fails with [`ParseError::UnsupportedCritical`], which the
//! responder answers with N(UNSUPPORTED_CRITICAL_PAYLOAD). The encrypted payload (SK, and its
//! RFC 7383 fragment form SKF) must be last: its body runs to the end of the message and is
//! kept as bytes for [`crate::keys`] to open.
//!
//! Why our own codec rather than `ipsec-parser` (rusticata): that crate only parses, while a
//! responder must emit every payload it parses (and the AUTH octets are computed over our own
//! emitted bytes), so one definition with parse and emit side by side, round-trip proptested
//! and fuzzed, is less code than a parser plus a separate serializer kept in step with it.

mod payload;
mod sa;

pub use payload::{
    CfgAttribute, Configuration, Delete, Identification, Notify, TrafficSelector, cfg, notify,
};
pub use sa::{Attribute, Proposal, Transform, transform};

/// Length of the fixed IKE header.
pub const HEADER_LEN: usize = 28;
/// Length of the generic payload header.
pub const PAYLOAD_HEADER_LEN: usize = 4;
/// The largest IKE message accepted (RFC 7296 §2: implementations must accept 1280 bytes and
/// should accept 3000; a UDP datagram cannot exceed this).
pub const MAX_MESSAGE_LEN: usize = 65_535;
/// At most this many payloads in one chain (a real IKE_AUTH carries about a dozen).
pub const MAX_PAYLOADS: usize = 64;

/// IKE major version 2, minor 0 (RFC 7296 §3.1).
pub const VERSION: u8 = 0x20;

/// Exchange types (RFC 7296 §3.1).
pub mod exchange {
    /// IKE_SA_INIT.
    pub const IKE_SA_INIT: u8 = 34;
    /// IKE_AUTH.
    pub const IKE_AUTH: u8 = 35;
    /// CREATE_CHILD_SA.
    pub const CREATE_CHILD_SA: u8 = 36;
    /// INFORMATIONAL.
    pub const INFORMATIONAL: u8 = 37;
}

/// Header flags (RFC 7296 §3.1).
pub mod flags {
    /// Sent by the original initiator of the IKE SA.
    pub const INITIATOR: u8 = 0x08;
    /// Version: a higher major version could be spoken.
    pub const VERSION: u8 = 0x10;
    /// This message is a response.
    pub const RESPONSE: u8 = 0x20;
}

/// Payload type numbers (RFC 7296 §3.2, RFC 7383 §2.5).
pub mod kind {
    /// No next payload.
    pub const NONE: u8 = 0;
    /// Security Association.
    pub const SA: u8 = 33;
    /// Key Exchange.
    pub const KE: u8 = 34;
    /// Identification - Initiator.
    pub const IDI: u8 = 35;
    /// Identification - Responder.
    pub const IDR: u8 = 36;
    /// Certificate.
    pub const CERT: u8 = 37;
    /// Certificate Request.
    pub const CERTREQ: u8 = 38;
    /// Authentication.
    pub const AUTH: u8 = 39;
    /// Nonce.
    pub const NONCE: u8 = 40;
    /// Notify.
    pub const NOTIFY: u8 = 41;
    /// Delete.
    pub const DELETE: u8 = 42;
    /// Vendor ID.
    pub const VENDOR_ID: u8 = 43;
    /// Traffic Selector - Initiator.
    pub const TSI: u8 = 44;
    /// Traffic Selector - Responder.
    pub const TSR: u8 = 45;
    /// Encrypted and Authenticated.
    pub const SK: u8 = 46;
    /// Configuration.
    pub const CP: u8 = 47;
    /// Extensible Authentication.
    pub const EAP: u8 = 48;
    /// Encrypted and Authenticated Fragment (RFC 7383).
    pub const SKF: u8 = 53;
}

/// Why bytes are not an IKE message. Small and `Copy`: parsing never allocates an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Shorter than a length field says.
    #[error("truncated")]
    Truncated,
    /// A field holds a value the RFC forbids (bad length, reserved type, ...).
    #[error("malformed")]
    Malformed,
    /// More payloads, proposals, transforms or selectors than gate64 accepts.
    #[error("too many elements")]
    TooMany,
    /// The major version is not 2 (RFC 7296 §2.5: answer INVALID_MAJOR_VERSION).
    #[error("unsupported major version {0}")]
    Version(u8),
    /// An unknown payload carried the critical bit (RFC 7296 §2.5).
    #[error("unsupported critical payload {0}")]
    UnsupportedCritical(u8),
}

/// The fixed IKE header, without the next-payload and length fields (derived on emit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// IKE SA initiator's SPI.
    pub spi_i: u64,
    /// IKE SA responder's SPI (zero in the first IKE_SA_INIT request).
    pub spi_r: u64,
    /// Exchange type ([`exchange`]).
    pub exchange: u8,
    /// Flags ([`flags`]).
    pub flags: u8,
    /// Message ID.
    pub message_id: u32,
}

impl Header {
    /// Whether the R flag is set.
    pub fn is_response(&self) -> bool {
        self.flags & flags::RESPONSE != 0
    }

    /// Whether the I flag is set.
    pub fn from_initiator(&self) -> bool {
        self.flags & flags::INITIATOR != 0
    }

    /// Reads the header of `bytes`: the header and the first payload type. The length field
    /// must equal `bytes.len()` (RFC 7296 §3.1).
    pub fn parse(bytes: &[u8]) -> Result<(Header, u8), ParseError> {
        let h = bytes.get(..HEADER_LEN).ok_or(ParseError::Truncated)?;
        if h[17] >> 4 != 2 {
            return Err(ParseError::Version(h[17] >> 4));
        }
        let length = be32(&h[24..28]) as usize;
        if length < HEADER_LEN || length > bytes.len() {
            return Err(ParseError::Truncated);
        }
        if length != bytes.len() {
            return Err(ParseError::Malformed);
        }
        let header = Header {
            spi_i: be64(&h[0..8]),
            spi_r: be64(&h[8..16]),
            exchange: h[18],
            flags: h[19],
            message_id: be32(&h[20..24]),
        };
        Ok((header, h[16]))
    }

    /// Appends the 28 header bytes; the length is patched by [`finish_length`].
    pub fn emit(&self, first_payload: u8, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.spi_i.to_be_bytes());
        out.extend_from_slice(&self.spi_r.to_be_bytes());
        out.push(first_payload);
        out.push(VERSION);
        out.push(self.exchange);
        out.push(self.flags);
        out.extend_from_slice(&self.message_id.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
    }
}

/// Writes `out.len()` into the header length field of the message starting at `out[0]`.
pub fn finish_length(out: &mut [u8]) {
    let len = u32::try_from(out.len()).unwrap_or(u32::MAX);
    if let Some(field) = out.get_mut(24..28) {
        field.copy_from_slice(&len.to_be_bytes());
    }
}

/// One payload of a chain, in its validated form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Security Association: proposals in preference order.
    Sa(Vec<Proposal>),
    /// Key Exchange: DH group and public value.
    Ke {
        /// Diffie-Hellman group number.
        group: u16,
        /// Public value as the group's RFC defines it.
        data: Vec<u8>,
    },
    /// Identification of the initiator.
    IdI(Identification),
    /// Identification of the responder.
    IdR(Identification),
    /// Certificate.
    Cert {
        /// Encoding (4 = X.509 signature).
        encoding: u8,
        /// Certificate data (DER for encoding 4).
        data: Vec<u8>,
    },
    /// Certificate Request.
    CertReq {
        /// Encoding (4 = X.509 signature).
        encoding: u8,
        /// Concatenated SHA-1 hashes of trusted CAs' public keys.
        data: Vec<u8>,
    },
    /// Authentication.
    Auth {
        /// Method (1 RSA, 9 ECDSA P-256, 14 Digital Signature, ...).
        method: u8,
        /// Authentication data.
        data: Vec<u8>,
    },
    /// Nonce.
    Nonce(Vec<u8>),
    /// Notify.
    Notify(Notify),
    /// Delete.
    Delete(Delete),
    /// Vendor ID.
    VendorId(Vec<u8>),
    /// Traffic selectors of the initiator.
    TsI(Vec<TrafficSelector>),
    /// Traffic selectors of the responder.
    TsR(Vec<TrafficSelector>),
    /// Configuration.
    Cp(Configuration),
    /// Encrypted and Authenticated: the first inner payload type, and IV ‖ ciphertext ‖ ICV.
    Sk {
        /// Type of the first payload inside.
        first: u8,
        /// IV, ciphertext and ICV.
        body: Vec<u8>,
    },
    /// Encrypted fragment (RFC 7383 §2.5).
    Skf {
        /// Type of the first inner payload (fragment 1 only, else 0).
        first: u8,
        /// Fragment number, from 1.
        number: u16,
        /// Total fragments.
        total: u16,
        /// IV, ciphertext and ICV.
        body: Vec<u8>,
    },
    /// A known payload gate64 does not interpret (EAP, ...): kept so it can be refused.
    Other {
        /// Payload type.
        kind: u8,
        /// Body bytes.
        body: Vec<u8>,
    },
}

impl Payload {
    /// The payload type number.
    pub fn kind(&self) -> u8 {
        match self {
            Payload::Sa(_) => kind::SA,
            Payload::Ke { .. } => kind::KE,
            Payload::IdI(_) => kind::IDI,
            Payload::IdR(_) => kind::IDR,
            Payload::Cert { .. } => kind::CERT,
            Payload::CertReq { .. } => kind::CERTREQ,
            Payload::Auth { .. } => kind::AUTH,
            Payload::Nonce(_) => kind::NONCE,
            Payload::Notify(_) => kind::NOTIFY,
            Payload::Delete(_) => kind::DELETE,
            Payload::VendorId(_) => kind::VENDOR_ID,
            Payload::TsI(_) => kind::TSI,
            Payload::TsR(_) => kind::TSR,
            Payload::Cp(_) => kind::CP,
            Payload::Sk { .. } => kind::SK,
            Payload::Skf { .. } => kind::SKF,
            Payload::Other { kind, .. } => *kind,
        }
    }

    /// Parses one payload body of type `kind`. `Ok(None)` for an unknown non-critical type.
    fn parse_body(kind: u8, critical: bool, body: &[u8]) -> Result<Option<Payload>, ParseError> {
        let fixed = |n: usize| body.get(..n).ok_or(ParseError::Truncated);
        let p = match kind {
            kind::SA => Payload::Sa(sa::parse_proposals(body)?),
            kind::KE => {
                let h = fixed(4)?;
                Payload::Ke {
                    group: be16(&h[0..2]),
                    data: body[4..].to_vec(),
                }
            }
            kind::IDI => Payload::IdI(Identification::parse(body)?),
            kind::IDR => Payload::IdR(Identification::parse(body)?),
            kind::CERT | kind::CERTREQ | kind::AUTH => {
                let first = fixed(1)?[0];
                let data = if kind == kind::AUTH {
                    body.get(4..).ok_or(ParseError::Truncated)?.to_vec()
                } else {
                    body[1..].to_vec()
                };
                match kind {
                    kind::CERT => Payload::Cert {
                        encoding: first,
                        data,
                    },
                    kind::CERTREQ => Payload::CertReq {
                        encoding: first,
                        data,
                    },
                    _ => Payload::Auth {
                        method: first,
                        data,
                    },
                }
            }
            kind::NONCE => {
                // RFC 7296 §3.9: 16 to 256 bytes.
                if !(16..=256).contains(&body.len()) {
                    return Err(ParseError::Malformed);
                }
                Payload::Nonce(body.to_vec())
            }
            kind::NOTIFY => Payload::Notify(Notify::parse(body)?),
            kind::DELETE => Payload::Delete(Delete::parse(body)?),
            kind::VENDOR_ID => Payload::VendorId(body.to_vec()),
            kind::TSI => Payload::TsI(TrafficSelector::parse_list(body)?),
            kind::TSR => Payload::TsR(TrafficSelector::parse_list(body)?),
            kind::CP => Payload::Cp(Configuration::parse(body)?),
            kind::SK => Payload::Sk {
                first: 0,
                body: body.to_vec(),
            },
            kind::SKF => {
                let h = fixed(4)?;
                let (number, total) = (be16(&h[0..2]), be16(&h[2..4]));
                if number == 0 || total == 0 || number > total {
                    return Err(ParseError::Malformed);
                }
                Payload::Skf {
                    first: 0,
                    number,
                    total,
                    body: body[4..].to_vec(),
                }
            }
            kind::EAP => Payload::Other {
                kind,
                body: body.to_vec(),
            },
            _ if critical => return Err(ParseError::UnsupportedCritical(kind)),
            _ => return Ok(None),
        };
        Ok(Some(p))
    }

    /// Appends this payload's body (without the generic header).
    fn emit_body(&self, out: &mut Vec<u8>) {
        match self {
            Payload::Sa(proposals) => sa::emit_proposals(proposals, out),
            Payload::Ke { group, data } => {
                out.extend_from_slice(&group.to_be_bytes());
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(data);
            }
            Payload::IdI(id) | Payload::IdR(id) => id.emit(out),
            Payload::Cert { encoding, data } | Payload::CertReq { encoding, data } => {
                out.push(*encoding);
                out.extend_from_slice(data);
            }
            Payload::Auth { method, data } => {
                out.extend_from_slice(&[*method, 0, 0, 0]);
                out.extend_from_slice(data);
            }
            Payload::Nonce(data) | Payload::VendorId(data) => out.extend_from_slice(data),
            Payload::Notify(n) => n.emit(out),
            Payload::Delete(d) => d.emit(out),
            Payload::TsI(ts) | Payload::TsR(ts) => TrafficSelector::emit_list(ts, out),
            Payload::Cp(c) => c.emit(out),
            Payload::Sk { body, .. } => out.extend_from_slice(body),
            Payload::Skf {
                number,
                total,
                body,
                ..
            } => {
                out.extend_from_slice(&number.to_be_bytes());
                out.extend_from_slice(&total.to_be_bytes());
                out.extend_from_slice(body);
            }
            Payload::Other { body, .. } => out.extend_from_slice(body),
        }
    }

    /// The body as emitted (e.g. the ID payload body that RFC 7296 §2.15 signs).
    pub fn body_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.emit_body(&mut out);
        out
    }
}

/// Parses a payload chain starting with type `first`. The encrypted payload (SK/SKF) ends
/// the chain and records its own next-payload field as `first`.
pub fn parse_chain(first: u8, mut bytes: &[u8]) -> Result<Vec<Payload>, ParseError> {
    let mut payloads = Vec::new();
    let mut next = first;
    while next != kind::NONE {
        if payloads.len() >= MAX_PAYLOADS {
            return Err(ParseError::TooMany);
        }
        let h = bytes
            .get(..PAYLOAD_HEADER_LEN)
            .ok_or(ParseError::Truncated)?;
        let (this, critical) = (next, h[1] & 0x80 != 0);
        next = h[0];
        let len = usize::from(be16(&h[2..4]));
        if len < PAYLOAD_HEADER_LEN {
            return Err(ParseError::Malformed);
        }
        let body = bytes
            .get(PAYLOAD_HEADER_LEN..len)
            .ok_or(ParseError::Truncated)?;
        bytes = &bytes[len..];
        match Payload::parse_body(this, critical, body)? {
            Some(Payload::Sk { body, .. }) => {
                payloads.push(Payload::Sk { first: next, body });
                next = kind::NONE;
            }
            Some(Payload::Skf {
                number,
                total,
                body,
                ..
            }) => {
                payloads.push(Payload::Skf {
                    first: next,
                    number,
                    total,
                    body,
                });
                next = kind::NONE;
            }
            Some(p) => payloads.push(p),
            None => {}
        }
    }
    if !bytes.is_empty() {
        return Err(ParseError::Malformed);
    }
    Ok(payloads)
}

/// Appends a payload chain; returns the first payload's type. An SK/SKF payload must be last
/// and carries its inner first type as its next-payload field.
pub fn emit_chain(payloads: &[Payload], out: &mut Vec<u8>) -> u8 {
    for (i, p) in payloads.iter().enumerate() {
        let next = match p {
            Payload::Sk { first, .. } | Payload::Skf { first, .. } => *first,
            _ => payloads.get(i + 1).map_or(kind::NONE, Payload::kind),
        };
        let start = out.len();
        out.extend_from_slice(&[next, 0, 0, 0]);
        p.emit_body(out);
        let len = u16::try_from(out.len() - start).unwrap_or(u16::MAX);
        out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
    }
    payloads.first().map_or(kind::NONE, Payload::kind)
}

/// A whole IKE message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The header.
    pub header: Header,
    /// The payloads in order (for a protected message: the SK payload, still encrypted).
    pub payloads: Vec<Payload>,
}

impl Message {
    /// Parses a datagram (without the RFC 3948 non-ESP marker).
    pub fn parse(bytes: &[u8]) -> Result<Message, ParseError> {
        if bytes.len() > MAX_MESSAGE_LEN {
            return Err(ParseError::TooMany);
        }
        let (header, first) = Header::parse(bytes)?;
        let payloads = parse_chain(first, &bytes[HEADER_LEN..])?;
        Ok(Message { header, payloads })
    }

    /// Emits the message with its lengths filled in.
    pub fn emit(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        self.header.emit(kind::NONE, &mut out);
        out[16] = emit_chain(&self.payloads, &mut out);
        finish_length(&mut out);
        out
    }

    /// The first notify of type `kind`.
    pub fn notify(&self, kind: u16) -> Option<&Notify> {
        find_notify(&self.payloads, kind)
    }
}

/// The first notify of type `kind` in `payloads`.
pub fn find_notify(payloads: &[Payload], kind: u16) -> Option<&Notify> {
    payloads.iter().find_map(|p| match p {
        Payload::Notify(n) if n.kind == kind => Some(n),
        _ => None,
    })
}

/// The type of the first error notify in `payloads` (types below 16384, RFC 7296 §3.10.1).
pub fn find_error_notify(payloads: &[Payload]) -> Option<u16> {
    payloads.iter().find_map(|p| match p {
        Payload::Notify(n) if n.is_error() => Some(n.kind),
        _ => None,
    })
}

pub(crate) fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests;
