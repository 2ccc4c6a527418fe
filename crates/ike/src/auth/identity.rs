//! ID payload contents (RFC 7296 §3.5).

use super::AuthError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// ID types handled here (RFC 7296 §3.5). DER_ASN1_GN (10) and FC_NAME (12) are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum IdType {
    /// A 4-byte IPv4 address.
    Ipv4Addr = 1,
    /// A fully-qualified domain name, ASCII, no terminator.
    Fqdn = 2,
    /// An RFC 822 email address, ASCII.
    Rfc822Addr = 3,
    /// A 16-byte IPv6 address.
    Ipv6Addr = 5,
    /// The DER encoding of an X.500 Name.
    DerAsn1Dn = 9,
    /// Opaque octets.
    KeyId = 11,
}

impl IdType {
    /// The ID Type field value.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The type for an ID Type field value.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Ipv4Addr),
            2 => Some(Self::Fqdn),
            3 => Some(Self::Rfc822Addr),
            5 => Some(Self::Ipv6Addr),
            9 => Some(Self::DerAsn1Dn),
            11 => Some(Self::KeyId),
            _ => None,
        }
    }
}

/// The contents of an IDi or IDr payload: a type and its data, kept as sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The ID type.
    pub id_type: IdType,
    /// The identification data (an address, name or DER DN), as on the wire.
    pub data: Vec<u8>,
}

impl Identity {
    /// An ID from an ID payload's type and data; checks the address lengths.
    pub fn new(id_type: u8, data: &[u8]) -> Result<Self, AuthError> {
        let id_type = IdType::from_code(id_type).ok_or(AuthError::UnsupportedIdType(id_type))?;
        let ok = match id_type {
            IdType::Ipv4Addr => data.len() == 4,
            IdType::Ipv6Addr => data.len() == 16,
            _ => !data.is_empty(),
        };
        if !ok {
            return Err(AuthError::Malformed("ID data length does not fit its type"));
        }
        Ok(Self {
            id_type,
            data: data.to_vec(),
        })
    }

    /// An ID from an ID payload body (type, three reserved bytes, data: RFC 7296 §3.5).
    pub fn from_payload_body(body: &[u8]) -> Result<Self, AuthError> {
        match body {
            [id_type, _, _, _, data @ ..] => Self::new(*id_type, data),
            _ => Err(AuthError::Malformed("ID payload shorter than its header")),
        }
    }

    /// The ID payload body: type, three zero reserved bytes, data. This is the `IDx'` that
    /// RFC 7296 §2.15 feeds to `prf(SK_px, IDx')`.
    pub fn payload_body(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(4 + self.data.len());
        body.extend_from_slice(&[self.id_type.code(), 0, 0, 0]);
        body.extend_from_slice(&self.data);
        body
    }

    /// An FQDN ID.
    pub fn fqdn(name: &str) -> Self {
        Self {
            id_type: IdType::Fqdn,
            data: name.as_bytes().to_vec(),
        }
    }

    /// An RFC 822 (email address) ID.
    pub fn email(addr: &str) -> Self {
        Self {
            id_type: IdType::Rfc822Addr,
            data: addr.as_bytes().to_vec(),
        }
    }

    /// An IPv4 or IPv6 address ID.
    pub fn ip(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(a) => Self {
                id_type: IdType::Ipv4Addr,
                data: a.octets().to_vec(),
            },
            IpAddr::V6(a) => Self {
                id_type: IdType::Ipv6Addr,
                data: a.octets().to_vec(),
            },
        }
    }

    /// A DER_ASN1_DN ID from the DER encoding of a Name (e.g. a certificate's subject).
    pub fn der_dn(der: &[u8]) -> Self {
        Self {
            id_type: IdType::DerAsn1Dn,
            data: der.to_vec(),
        }
    }

    /// A KEY_ID ID.
    pub fn key_id(octets: &[u8]) -> Self {
        Self {
            id_type: IdType::KeyId,
            data: octets.to_vec(),
        }
    }

    /// The address of an IPv4/IPv6 ID.
    pub fn ip_addr(&self) -> Option<IpAddr> {
        match self.id_type {
            IdType::Ipv4Addr => <[u8; 4]>::try_from(self.data.as_slice())
                .ok()
                .map(|a| IpAddr::V4(Ipv4Addr::from(a))),
            IdType::Ipv6Addr => <[u8; 16]>::try_from(self.data.as_slice())
                .ok()
                .map(|a| IpAddr::V6(Ipv6Addr::from(a))),
            _ => None,
        }
    }
}

/// For logs: `dn:CN=..`, `fqdn:..`, `email:..`, `ip:..`, `keyid:<hex>`.
impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.id_type {
            IdType::Fqdn => write!(f, "fqdn:{}", String::from_utf8_lossy(&self.data)),
            IdType::Rfc822Addr => write!(f, "email:{}", String::from_utf8_lossy(&self.data)),
            IdType::Ipv4Addr | IdType::Ipv6Addr => match self.ip_addr() {
                Some(a) => write!(f, "ip:{a}"),
                None => f.write_str("ip:<malformed>"),
            },
            IdType::DerAsn1Dn => {
                use x509_parser::prelude::FromDer;
                match x509_parser::x509::X509Name::from_der(&self.data) {
                    Ok((_, name)) => write!(f, "dn:{name}"),
                    Err(_) => f.write_str("dn:<malformed>"),
                }
            }
            IdType::KeyId => {
                f.write_str("keyid:")?;
                self.data.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}
