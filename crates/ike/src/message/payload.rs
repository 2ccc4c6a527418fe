//! Bodies of the ID, Notify, Delete, TS and CP payloads (RFC 7296 §3.5, §3.10, §3.11, §3.13,
//! §3.15).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{ParseError, be16};

/// At most this many traffic selectors in one TS payload.
pub const MAX_SELECTORS: usize = 32;
/// At most this many SPIs in one Delete payload.
pub const MAX_DELETE_SPIS: usize = 64;
/// At most this many configuration attributes.
pub const MAX_CFG_ATTRIBUTES: usize = 32;

/// Notify message types (RFC 7296 §3.10.1 and the IANA registry).
pub mod notify {
    /// An unknown payload had the critical bit.
    pub const UNSUPPORTED_CRITICAL_PAYLOAD: u16 = 1;
    /// No IKE SA for this SPI.
    pub const INVALID_IKE_SPI: u16 = 4;
    /// Major version not supported.
    pub const INVALID_MAJOR_VERSION: u16 = 5;
    /// Malformed message.
    pub const INVALID_SYNTAX: u16 = 7;
    /// Message ID out of window.
    pub const INVALID_MESSAGE_ID: u16 = 9;
    /// Unknown child SA SPI.
    pub const INVALID_SPI: u16 = 11;
    /// No acceptable proposal.
    pub const NO_PROPOSAL_CHOSEN: u16 = 14;
    /// Wrong DH group; the data names the wanted one.
    pub const INVALID_KE_PAYLOAD: u16 = 17;
    /// Authentication failed.
    pub const AUTHENTICATION_FAILED: u16 = 24;
    /// Single pair required.
    pub const SINGLE_PAIR_REQUIRED: u16 = 34;
    /// No more SAs on this IKE SA.
    pub const NO_ADDITIONAL_SAS: u16 = 35;
    /// No address could be assigned.
    pub const INTERNAL_ADDRESS_FAILURE: u16 = 36;
    /// Configuration payload refused.
    pub const FAILED_CP_REQUIRED: u16 = 37;
    /// Traffic selectors unacceptable.
    pub const TS_UNACCEPTABLE: u16 = 38;
    /// Retry later (e.g. a rekey collision).
    pub const TEMPORARY_FAILURE: u16 = 43;
    /// The child SA to rekey does not exist.
    pub const CHILD_SA_NOT_FOUND: u16 = 44;
    /// Status: the peer forgot every earlier SA with us.
    pub const INITIAL_CONTACT: u16 = 16384;
    /// Status: window size.
    pub const SET_WINDOW_SIZE: u16 = 16385;
    /// Status: addresses the initiator may accept in TS.
    pub const ADDITIONAL_TS_POSSIBLE: u16 = 16386;
    /// Status: the time left until the initiator must authenticate anew, 4 octets of
    /// seconds (RFC 4478 §3).
    pub const AUTH_LIFETIME: u16 = 16403;
    /// Status: a Quick Crash Detection token (RFC 6290 §4.1), in IKE_AUTH and beside
    /// INVALID_IKE_SPI in an unprotected answer for an IKE SA the sender lost.
    pub const QCD_TOKEN: u16 = 16419;
    /// Status: the sender takes part in RFC 6311 Message ID synchronization (IKE_AUTH, no
    /// data).
    pub const IKEV2_MESSAGE_ID_SYNC_SUPPORTED: u16 = 16420;
    /// Status: an RFC 6311 Message ID synchronization request or response (INFORMATIONAL with
    /// Message ID 0; 12 octets, [`crate::mid_sync`]).
    pub const IKEV2_MESSAGE_ID_SYNC: u16 = 16422;
    /// Status: IPCOMP.
    pub const IPCOMP_SUPPORTED: u16 = 16387;
    /// Status: NAT detection, source.
    pub const NAT_DETECTION_SOURCE_IP: u16 = 16388;
    /// Status: NAT detection, destination.
    pub const NAT_DETECTION_DESTINATION_IP: u16 = 16389;
    /// Status: stateless cookie (RFC 7296 §2.6).
    pub const COOKIE: u16 = 16390;
    /// Status: transport mode requested.
    pub const USE_TRANSPORT_MODE: u16 = 16391;
    /// Status: the SPI of the child SA being rekeyed.
    pub const REKEY_SA: u16 = 16393;
    /// Status: ESP TFC padding not supported.
    pub const ESP_TFC_PADDING_NOT_SUPPORTED: u16 = 16394;
    /// Status: no first-fragment child SAs.
    pub const NON_FIRST_FRAGMENTS_ALSO: u16 = 16395;
    /// Status: MOBIKE supported (RFC 4555).
    pub const MOBIKE_SUPPORTED: u16 = 16396;
    /// Status: the sender's addresses changed; move the IKE SA and its child SAs to the
    /// addresses this request came from and went to (RFC 4555 §3.5). No data.
    pub const UPDATE_SA_ADDRESSES: u16 = 16400;
    /// Status: a return-routability cookie, 8 to 64 octets, echoed in the response
    /// (RFC 4555 §3.7, §4.5).
    pub const COOKIE2: u16 = 16401;
    /// Status: the sender does not accept a NAT between the addresses (RFC 4555 §3.9).
    pub const NO_NATS_ALLOWED: u16 = 16402;
    /// Error: a NAT was found where the request said none is allowed (RFC 4555 §4.8).
    pub const UNEXPECTED_NAT_DETECTED: u16 = 41;
    /// Status: the sender can run several authentication rounds (RFC 4739 §3.1).
    pub const MULTIPLE_AUTH_SUPPORTED: u16 = 16404;
    /// Status: another IKE_AUTH round follows this one (RFC 4739 §3.2).
    pub const ANOTHER_AUTH_FOLLOWS: u16 = 16405;
    /// Status: IKE fragmentation supported (RFC 7383).
    pub const IKEV2_FRAGMENTATION_SUPPORTED: u16 = 16430;
    /// Status: hash algorithms for digital signatures (RFC 7427).
    pub const SIGNATURE_HASH_ALGORITHMS: u16 = 16431;
    /// Status, from the private-use range (RFC 7296 §3.10.1: 40960–65535): which of the two
    /// tunnels an IKE_AUTH's child SA is for, one octet ([`TUNNEL_INFRASTRUCTURE`] or
    /// [`TUNNEL_INTRANET`]). gate64's own client sends it when it was given no traffic
    /// selectors, so that two IKE SAs that both ask for `::/0` still become two distinct
    /// tunnels: gate64 then narrows TSr into the named tunnel's prefixes. A responder that
    /// does not know the type ignores it, as §3.10.1 requires of unknown status types.
    pub const GATE64_TUNNEL: u16 = 40_964;
    /// [`GATE64_TUNNEL`]'s octet for the infrastructure tunnel.
    pub const TUNNEL_INFRASTRUCTURE: u8 = 1;
    /// [`GATE64_TUNNEL`]'s octet for the intranet tunnel.
    pub const TUNNEL_INTRANET: u8 = 2;

    /// The registry name of an error notify and what most likely caused it, for messages
    /// an admin reads ("responder refused with AUTHENTICATION_FAILED (24): …"). A code this
    /// table does not know is named by its number alone.
    pub fn describe(code: u16) -> (&'static str, &'static str) {
        match code {
            UNSUPPORTED_CRITICAL_PAYLOAD => (
                "UNSUPPORTED_CRITICAL_PAYLOAD",
                "the peer does not implement a payload this side marked critical",
            ),
            INVALID_IKE_SPI => (
                "INVALID_IKE_SPI",
                "the peer no longer knows this IKE SA (it restarted or deleted it); connect again",
            ),
            INVALID_MAJOR_VERSION => ("INVALID_MAJOR_VERSION", "the peer does not speak IKEv2"),
            INVALID_SYNTAX => (
                "INVALID_SYNTAX",
                "the peer could not parse or decrypt the message (a proposal or key mismatch)",
            ),
            INVALID_MESSAGE_ID => (
                "INVALID_MESSAGE_ID",
                "message IDs out of step; connect again",
            ),
            INVALID_SPI => ("INVALID_SPI", "the peer does not know this child SA"),
            NO_PROPOSAL_CHOSEN => (
                "NO_PROPOSAL_CHOSEN",
                "no cipher suite in common; compare the proposals on both sides",
            ),
            INVALID_KE_PAYLOAD => (
                "INVALID_KE_PAYLOAD",
                "the peer wants another Diffie-Hellman group",
            ),
            AUTHENTICATION_FAILED => (
                "AUTHENTICATION_FAILED",
                "the responder refused this side's certificate or identity (an unknown CA, \
                 a revoked or expired certificate, an identity the certificate does not carry, \
                 or a second connection with the same identity); the responder's log names the cause",
            ),
            SINGLE_PAIR_REQUIRED => (
                "SINGLE_PAIR_REQUIRED",
                "the responder accepts only one selector pair per child SA",
            ),
            NO_ADDITIONAL_SAS => (
                "NO_ADDITIONAL_SAS",
                "the responder takes no more child SAs on this IKE SA",
            ),
            INTERNAL_ADDRESS_FAILURE => (
                "INTERNAL_ADDRESS_FAILURE",
                "the responder had no address to assign",
            ),
            FAILED_CP_REQUIRED => (
                "FAILED_CP_REQUIRED",
                "the responder requires a configuration payload",
            ),
            TS_UNACCEPTABLE => (
                "TS_UNACCEPTABLE",
                "the traffic selectors asked for are not inside the responder's tunnel prefixes",
            ),
            TEMPORARY_FAILURE => (
                "TEMPORARY_FAILURE",
                "the responder is busy (a rekey collision); it retries by itself",
            ),
            CHILD_SA_NOT_FOUND => (
                "CHILD_SA_NOT_FOUND",
                "the child SA to rekey is gone at the responder",
            ),
            _ => ("unknown notify", "not an error type this client knows"),
        }
    }
}

/// Configuration payload types and attribute types (RFC 7296 §3.15).
pub mod cfg {
    /// CFG_REQUEST.
    pub const REQUEST: u8 = 1;
    /// CFG_REPLY.
    pub const REPLY: u8 = 2;
    /// CFG_SET.
    pub const SET: u8 = 3;
    /// CFG_ACK.
    pub const ACK: u8 = 4;
    /// INTERNAL_IP4_ADDRESS.
    pub const INTERNAL_IP4_ADDRESS: u16 = 1;
    /// INTERNAL_IP4_DNS.
    pub const INTERNAL_IP4_DNS: u16 = 3;
    /// INTERNAL_IP4_SUBNET: a 4-byte address and a 4-byte netmask, a subnet the tunnel
    /// reaches (RFC 7296 §3.15.1).
    pub const INTERNAL_IP4_SUBNET: u16 = 13;
    /// INTERNAL_IP6_ADDRESS: 16-byte address and 1-byte prefix length.
    pub const INTERNAL_IP6_ADDRESS: u16 = 8;
    /// INTERNAL_IP6_DNS: a 16-byte address.
    pub const INTERNAL_IP6_DNS: u16 = 10;
    /// INTERNAL_IP6_SUBNET: a 16-byte address and a 1-byte prefix length, a subnet the
    /// tunnel reaches (RFC 7296 §3.15.1).
    pub const INTERNAL_IP6_SUBNET: u16 = 15;
    /// INTERNAL_DNS_DOMAIN (RFC 8598 §4): a domain name whose queries go to the
    /// INTERNAL_IP*_DNS servers (split DNS), in ASCII without a trailing dot.
    pub const INTERNAL_DNS_DOMAIN: u16 = 25;
}

/// ID payload body (RFC 7296 §3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identification {
    /// ID type (1 IPv4, 2 FQDN, 3 RFC 822, 5 IPv6, 9 DER DN, 11 key ID).
    pub kind: u8,
    /// Identification data.
    pub data: Vec<u8>,
}

impl Identification {
    pub(super) fn parse(body: &[u8]) -> Result<Self, ParseError> {
        let h = body.get(..4).ok_or(ParseError::Truncated)?;
        Ok(Identification {
            kind: h[0],
            data: body[4..].to_vec(),
        })
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.kind, 0, 0, 0]);
        out.extend_from_slice(&self.data);
    }

    /// The body as RFC 7296 §2.15 signs it: type, three reserved bytes, data.
    pub fn body(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.data.len());
        self.emit(&mut out);
        out
    }
}

/// Notify payload body (RFC 7296 §3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    /// Protocol ID (0 when not about an SA).
    pub protocol: u8,
    /// SPI of the SA concerned (may be empty).
    pub spi: Vec<u8>,
    /// Notify message type ([`notify`]).
    pub kind: u16,
    /// Notification data.
    pub data: Vec<u8>,
}

impl Notify {
    /// A notify about no SA in particular.
    pub fn new(kind: u16, data: Vec<u8>) -> Self {
        Notify {
            protocol: 0,
            spi: Vec::new(),
            kind,
            data,
        }
    }

    /// Whether this notify reports an error (types below 16384, RFC 7296 §3.10.1).
    pub fn is_error(&self) -> bool {
        self.kind < 16384
    }

    pub(super) fn parse(body: &[u8]) -> Result<Self, ParseError> {
        let h = body.get(..4).ok_or(ParseError::Truncated)?;
        let spi_len = usize::from(h[1]);
        let spi = body
            .get(4..4 + spi_len)
            .ok_or(ParseError::Truncated)?
            .to_vec();
        Ok(Notify {
            protocol: h[0],
            spi,
            kind: be16(&h[2..4]),
            data: body[4 + spi_len..].to_vec(),
        })
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        let spi_len = u8::try_from(self.spi.len()).unwrap_or(u8::MAX);
        out.extend_from_slice(&[self.protocol, spi_len]);
        out.extend_from_slice(&self.kind.to_be_bytes());
        out.extend_from_slice(&self.spi[..usize::from(spi_len)]);
        out.extend_from_slice(&self.data);
    }
}

/// Delete payload body (RFC 7296 §3.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    /// Protocol ID: 1 IKE (no SPIs; the header names the SA), 3 ESP.
    pub protocol: u8,
    /// SPI size: 0 for IKE, 4 for ESP.
    pub spi_size: u8,
    /// The SPIs, each `spi_size` bytes.
    pub spis: Vec<Vec<u8>>,
}

impl Delete {
    pub(super) fn parse(body: &[u8]) -> Result<Self, ParseError> {
        let h = body.get(..4).ok_or(ParseError::Truncated)?;
        let (protocol, spi_size, count) = (h[0], h[1], usize::from(be16(&h[2..4])));
        if count > MAX_DELETE_SPIS {
            return Err(ParseError::TooMany);
        }
        let rest = &body[4..];
        let size = usize::from(spi_size);
        if size == 0 && count != 0 || rest.len() != size * count {
            return Err(ParseError::Malformed);
        }
        let spis = if size == 0 {
            Vec::new()
        } else {
            rest.chunks(size).map(<[u8]>::to_vec).collect()
        };
        Ok(Delete {
            protocol,
            spi_size,
            spis,
        })
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        let count = u16::try_from(self.spis.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&[self.protocol, self.spi_size]);
        out.extend_from_slice(&count.to_be_bytes());
        for spi in self.spis.iter().take(usize::from(count)) {
            out.extend_from_slice(spi);
        }
    }

    /// ESP SPIs as integers (entries of another size are skipped).
    pub fn esp_spis(&self) -> impl Iterator<Item = u32> + '_ {
        self.spis.iter().filter_map(|s| {
            <[u8; 4]>::try_from(s.as_slice())
                .ok()
                .map(u32::from_be_bytes)
        })
    }
}

/// One traffic selector (RFC 7296 §3.13.1), TS_IPV4_ADDR_RANGE (7) or TS_IPV6_ADDR_RANGE (8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrafficSelector {
    /// IP protocol (0 = any).
    pub protocol: u8,
    /// First port.
    pub start_port: u16,
    /// Last port.
    pub end_port: u16,
    /// First address; the family decides the TS type.
    pub start: IpAddr,
    /// Last address, same family as `start`.
    pub end: IpAddr,
}

/// TS type of an IPv4 range.
pub const TS_IPV4_ADDR_RANGE: u8 = 7;
/// TS type of an IPv6 range.
pub const TS_IPV6_ADDR_RANGE: u8 = 8;

impl TrafficSelector {
    /// Every port and protocol over the address range `start..=end`.
    pub fn range(start: IpAddr, end: IpAddr) -> Self {
        TrafficSelector {
            protocol: 0,
            start_port: 0,
            end_port: 0xffff,
            start,
            end,
        }
    }

    /// Parses a TS payload body. Selector types other than 7 and 8 (e.g. RFC 9478 security
    /// labels) are skipped: the responder narrows to what it understands.
    pub(super) fn parse_list(body: &[u8]) -> Result<Vec<Self>, ParseError> {
        let h = body.get(..4).ok_or(ParseError::Truncated)?;
        let count = usize::from(h[0]);
        if count > MAX_SELECTORS {
            return Err(ParseError::TooMany);
        }
        let mut rest = &body[4..];
        let mut list = Vec::with_capacity(count);
        for _ in 0..count {
            let t = rest.get(..4).ok_or(ParseError::Truncated)?;
            let len = usize::from(be16(&t[2..4]));
            let whole = rest.get(..len).ok_or(ParseError::Truncated)?;
            if len < 8 {
                return Err(ParseError::Malformed);
            }
            if let Some(ts) = Self::parse_one(whole)? {
                list.push(ts);
            }
            rest = &rest[len..];
        }
        if !rest.is_empty() {
            return Err(ParseError::Malformed);
        }
        Ok(list)
    }

    fn parse_one(t: &[u8]) -> Result<Option<Self>, ParseError> {
        let addr_len = match t[0] {
            TS_IPV4_ADDR_RANGE => 4,
            TS_IPV6_ADDR_RANGE => 16,
            _ => return Ok(None),
        };
        if t.len() != 8 + 2 * addr_len {
            return Err(ParseError::Malformed);
        }
        let addr = |b: &[u8]| -> IpAddr {
            if let Ok(a) = <[u8; 16]>::try_from(b) {
                IpAddr::V6(Ipv6Addr::from(a))
            } else {
                let mut a = [0; 4];
                a.copy_from_slice(&b[..4]);
                IpAddr::V4(Ipv4Addr::from(a))
            }
        };
        Ok(Some(TrafficSelector {
            protocol: t[1],
            start_port: be16(&t[4..6]),
            end_port: be16(&t[6..8]),
            start: addr(&t[8..8 + addr_len]),
            end: addr(&t[8 + addr_len..]),
        }))
    }

    pub(super) fn emit_list(list: &[Self], out: &mut Vec<u8>) {
        let count = u8::try_from(list.len()).unwrap_or(u8::MAX);
        out.extend_from_slice(&[count, 0, 0, 0]);
        for ts in list.iter().take(usize::from(count)) {
            let (kind, len) = match ts.start {
                IpAddr::V4(_) => (TS_IPV4_ADDR_RANGE, 16u16),
                IpAddr::V6(_) => (TS_IPV6_ADDR_RANGE, 40u16),
            };
            out.extend_from_slice(&[kind, ts.protocol]);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&ts.start_port.to_be_bytes());
            out.extend_from_slice(&ts.end_port.to_be_bytes());
            for a in [ts.start, ts.end] {
                match (ts.start, a) {
                    (IpAddr::V4(_), IpAddr::V4(v)) => out.extend_from_slice(&v.octets()),
                    (IpAddr::V6(_), IpAddr::V6(v)) => out.extend_from_slice(&v.octets()),
                    // A mixed-family selector is our bug; emit the family of `start`.
                    (IpAddr::V4(_), IpAddr::V6(_)) => out.extend_from_slice(&[0xff; 4]),
                    (IpAddr::V6(_), IpAddr::V4(_)) => out.extend_from_slice(&[0xff; 16]),
                }
            }
        }
    }
}

/// Configuration payload body (RFC 7296 §3.15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configuration {
    /// CFG type ([`cfg::REQUEST`], ...).
    pub kind: u8,
    /// Attributes in order.
    pub attributes: Vec<CfgAttribute>,
}

/// One configuration attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CfgAttribute {
    /// Attribute type (15 bits).
    pub kind: u16,
    /// Value (empty in a request that asks for any value).
    pub value: Vec<u8>,
}

impl Configuration {
    pub(super) fn parse(body: &[u8]) -> Result<Self, ParseError> {
        let h = body.get(..4).ok_or(ParseError::Truncated)?;
        let mut rest = &body[4..];
        let mut attributes = Vec::new();
        while !rest.is_empty() {
            if attributes.len() >= MAX_CFG_ATTRIBUTES {
                return Err(ParseError::TooMany);
            }
            let a = rest.get(..4).ok_or(ParseError::Truncated)?;
            let end = 4 + usize::from(be16(&a[2..4]));
            let value = rest.get(4..end).ok_or(ParseError::Truncated)?.to_vec();
            attributes.push(CfgAttribute {
                kind: be16(&a[0..2]) & 0x7fff,
                value,
            });
            rest = &rest[end..];
        }
        Ok(Configuration {
            kind: h[0],
            attributes,
        })
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.kind, 0, 0, 0]);
        for a in &self.attributes {
            let len = u16::try_from(a.value.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&(a.kind & 0x7fff).to_be_bytes());
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&a.value[..usize::from(len)]);
        }
    }

    /// Whether the configuration asks for (or carries) attribute `kind`.
    pub fn has(&self, kind: u16) -> bool {
        self.attributes.iter().any(|a| a.kind == kind)
    }
}

#[cfg(test)]
mod notify_names {
    use super::notify;

    #[test]
    fn error_notifies_have_their_registry_name_and_a_likely_cause() {
        let (name, cause) = notify::describe(notify::AUTHENTICATION_FAILED);
        assert_eq!(name, "AUTHENTICATION_FAILED");
        assert!(cause.contains("certificate"), "{cause}");
        let (name, cause) = notify::describe(notify::TS_UNACCEPTABLE);
        assert_eq!(name, "TS_UNACCEPTABLE");
        assert!(cause.contains("tunnel prefixes"), "{cause}");
        assert_eq!(notify::describe(0).0, "unknown notify");
    }
}
