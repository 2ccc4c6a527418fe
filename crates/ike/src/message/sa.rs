//! The Security Association payload body (RFC 7296 §3.3): proposals, transforms, attributes.

use super::{ParseError, be16};

/// At most this many proposals in one SA payload.
pub const MAX_PROPOSALS: usize = 32;
/// At most this many transforms in one proposal (strongSwan's default proposal has ~40).
pub const MAX_TRANSFORMS: usize = 128;
/// At most this many attributes in one transform.
pub const MAX_ATTRIBUTES: usize = 8;

/// Transform types, IDs and the key-length attribute (RFC 7296 §3.3.2, IANA registry).
pub mod transform {
    /// Transform type 1: encryption algorithm.
    pub const ENCR: u8 = 1;
    /// Transform type 2: pseudorandom function.
    pub const PRF: u8 = 2;
    /// Transform type 3: integrity algorithm.
    pub const INTEG: u8 = 3;
    /// Transform type 4: key exchange (Diffie-Hellman group).
    pub const KE: u8 = 4;
    /// Transform type 5: extended sequence numbers.
    pub const ESN: u8 = 5;
    /// ENCR_AES_GCM_16 (RFC 5282 / RFC 4106).
    pub const ENCR_AES_GCM_16: u16 = 20;
    /// PRF_HMAC_SHA2_256 (RFC 4868).
    pub const PRF_HMAC_SHA2_256: u16 = 5;
    /// 256-bit random ECP group (RFC 5903).
    pub const GROUP_ECP_256: u16 = 19;
    /// Curve25519 (RFC 8031).
    pub const GROUP_CURVE25519: u16 = 31;
    /// No extended sequence numbers.
    pub const ESN_NONE: u16 = 0;
    /// Extended sequence numbers.
    pub const ESN_ENABLED: u16 = 1;
    /// Attribute type 14: key length in bits (TV form).
    pub const ATTR_KEY_LENGTH: u16 = 14;
    /// Protocol ID 1: IKE.
    pub const PROTO_IKE: u8 = 1;
    /// Protocol ID 2: AH.
    pub const PROTO_AH: u8 = 2;
    /// Protocol ID 3: ESP.
    pub const PROTO_ESP: u8 = 3;
    /// ENCR_NULL_AUTH_AES_GMAC (RFC 4543): integrity only, key length 128, 192 or 256.
    pub const ENCR_NULL_AUTH_AES_GMAC: u16 = 21;
    /// ENCR_AES_CBC (RFC 3602), with a key-length attribute of 128, 192 or 256.
    pub const ENCR_AES_CBC: u16 = 12;
    /// AUTH_HMAC_SHA2_256_128 (RFC 4868).
    pub const AUTH_HMAC_SHA2_256_128: u16 = 12;
}

/// One proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// Proposal number (the first is 1; a reply echoes the chosen one).
    pub number: u8,
    /// Protocol ID (1 IKE, 3 ESP).
    pub protocol: u8,
    /// The sender's SPI: empty in IKE_SA_INIT, 8 bytes for IKE rekey, 4 for ESP.
    pub spi: Vec<u8>,
    /// Transforms in preference order.
    pub transforms: Vec<Transform>,
}

impl Proposal {
    /// Whether every transform is of one of `kinds` and has only attributes gate64
    /// understands: RFC 7296 §3.3.6 has a proposal with an unknown transform type, or a
    /// transform with an unknown attribute, passed over rather than chosen.
    pub fn only_understood(&self, kinds: &[u8]) -> bool {
        self.transforms
            .iter()
            .all(|t| kinds.contains(&t.kind) && t.attributes_understood())
    }
}

/// One transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    /// Transform type ([`transform::ENCR`], ...).
    pub kind: u8,
    /// Transform ID within the type.
    pub id: u16,
    /// Attributes (in practice only the key length).
    pub attributes: Vec<Attribute>,
}

impl Transform {
    /// A transform without attributes.
    pub fn new(kind: u8, id: u16) -> Self {
        Transform {
            kind,
            id,
            attributes: Vec::new(),
        }
    }

    /// A transform with a key-length attribute in bits.
    pub fn with_key_length(kind: u8, id: u16, bits: u16) -> Self {
        Transform {
            kind,
            id,
            attributes: vec![Attribute::Tv {
                kind: transform::ATTR_KEY_LENGTH,
                value: bits,
            }],
        }
    }

    /// The key length attribute, if present.
    pub fn key_length(&self) -> Option<u16> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::Tv {
                kind: transform::ATTR_KEY_LENGTH,
                value,
            } => Some(*value),
            _ => None,
        })
    }

    /// Whether every attribute is one gate64 understands (RFC 7296 §3.3.6: a transform with
    /// an unknown attribute must not be chosen).
    pub fn attributes_understood(&self) -> bool {
        self.attributes.iter().all(|a| {
            matches!(
                a,
                Attribute::Tv {
                    kind: transform::ATTR_KEY_LENGTH,
                    ..
                }
            )
        })
    }
}

/// A transform attribute (RFC 7296 §3.3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribute {
    /// Type/Value form (AF bit set): a 16-bit value.
    Tv {
        /// Attribute type (15 bits).
        kind: u16,
        /// Value.
        value: u16,
    },
    /// Type/Length/Value form.
    Tlv {
        /// Attribute type (15 bits).
        kind: u16,
        /// Value bytes.
        value: Vec<u8>,
    },
}

pub(super) fn parse_proposals(mut body: &[u8]) -> Result<Vec<Proposal>, ParseError> {
    let mut proposals = Vec::new();
    loop {
        if proposals.len() >= MAX_PROPOSALS {
            return Err(ParseError::TooMany);
        }
        let h = body.get(..8).ok_or(ParseError::Truncated)?;
        let last = h[0];
        let len = usize::from(be16(&h[2..4]));
        let spi_len = usize::from(h[6]);
        let count = usize::from(h[7]);
        if len < 8 + spi_len || (last != 0 && last != 2) {
            return Err(ParseError::Malformed);
        }
        let whole = body.get(..len).ok_or(ParseError::Truncated)?;
        let spi = whole
            .get(8..8 + spi_len)
            .ok_or(ParseError::Truncated)?
            .to_vec();
        let transforms = parse_transforms(&whole[8 + spi_len..], count)?;
        proposals.push(Proposal {
            number: h[4],
            protocol: h[5],
            spi,
            transforms,
        });
        body = &body[len..];
        if last == 0 {
            break;
        }
    }
    if !body.is_empty() {
        return Err(ParseError::Malformed);
    }
    Ok(proposals)
}

fn parse_transforms(mut body: &[u8], count: usize) -> Result<Vec<Transform>, ParseError> {
    if count > MAX_TRANSFORMS {
        return Err(ParseError::TooMany);
    }
    let mut transforms = Vec::with_capacity(count);
    for i in 0..count {
        let h = body.get(..8).ok_or(ParseError::Truncated)?;
        let len = usize::from(be16(&h[2..4]));
        let last_expected = if i + 1 == count { 0 } else { 3 };
        if len < 8 || h[0] != last_expected {
            return Err(ParseError::Malformed);
        }
        let whole = body.get(..len).ok_or(ParseError::Truncated)?;
        let attributes = parse_attributes(&whole[8..])?;
        transforms.push(Transform {
            kind: h[4],
            id: be16(&h[6..8]),
            attributes,
        });
        body = &body[len..];
    }
    if !body.is_empty() {
        return Err(ParseError::Malformed);
    }
    Ok(transforms)
}

fn parse_attributes(mut body: &[u8]) -> Result<Vec<Attribute>, ParseError> {
    let mut attributes = Vec::new();
    while !body.is_empty() {
        if attributes.len() >= MAX_ATTRIBUTES {
            return Err(ParseError::TooMany);
        }
        let h = body.get(..4).ok_or(ParseError::Truncated)?;
        let word = be16(&h[0..2]);
        let kind = word & 0x7fff;
        let second = be16(&h[2..4]);
        if word & 0x8000 != 0 {
            attributes.push(Attribute::Tv {
                kind,
                value: second,
            });
            body = &body[4..];
        } else {
            let end = 4 + usize::from(second);
            let value = body.get(4..end).ok_or(ParseError::Truncated)?.to_vec();
            attributes.push(Attribute::Tlv { kind, value });
            body = &body[end..];
        }
    }
    Ok(attributes)
}

pub(super) fn emit_proposals(proposals: &[Proposal], out: &mut Vec<u8>) {
    for (i, p) in proposals.iter().enumerate() {
        let start = out.len();
        let last = if i + 1 == proposals.len() { 0 } else { 2 };
        let spi_len = u8::try_from(p.spi.len()).unwrap_or(u8::MAX);
        let count = u8::try_from(p.transforms.len()).unwrap_or(u8::MAX);
        out.extend_from_slice(&[last, 0, 0, 0, p.number, p.protocol, spi_len, count]);
        out.extend_from_slice(&p.spi[..usize::from(spi_len)]);
        for (j, t) in p.transforms.iter().take(usize::from(count)).enumerate() {
            let t_start = out.len();
            let t_last = if j + 1 == usize::from(count) { 0 } else { 3 };
            out.extend_from_slice(&[t_last, 0, 0, 0, t.kind, 0]);
            out.extend_from_slice(&t.id.to_be_bytes());
            for a in &t.attributes {
                emit_attribute(a, out);
            }
            patch_len(out, t_start);
        }
        patch_len(out, start);
    }
}

fn emit_attribute(a: &Attribute, out: &mut Vec<u8>) {
    match a {
        Attribute::Tv { kind, value } => {
            out.extend_from_slice(&(0x8000 | kind).to_be_bytes());
            out.extend_from_slice(&value.to_be_bytes());
        }
        Attribute::Tlv { kind, value } => {
            out.extend_from_slice(&(kind & 0x7fff).to_be_bytes());
            let len = u16::try_from(value.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&value[..usize::from(len)]);
        }
    }
}

fn patch_len(out: &mut [u8], start: usize) {
    let len = u16::try_from(out.len() - start).unwrap_or(u16::MAX);
    out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
}
