//! RADIUS accounting messages (RFC 2866, with RFC 2869's Interim-Update and Gigawords and the
//! IPv6 attributes of RFC 3162 and RFC 6911): the Accounting-Request gate64 sends and the
//! check of the Accounting-Response that acknowledges it. No I/O: the sender in `gate64-io`
//! owns the socket, the identifiers and the retransmissions.
//!
//! A request's authenticator is `MD5(Code | Identifier | Length | 16 zero octets |
//! attributes | secret)` (RFC 2866 §3); a response's is `MD5(Code | Identifier | Length |
//! request authenticator | attributes | secret)`. A response that does not verify is
//! ignored, as RFC 2865 §3 asks: it is not from the server that holds the secret.

use crate::record::Counts;
use md5::{Digest, Md5};
use std::net::{IpAddr, Ipv6Addr};
use subtle::ConstantTimeEq;

/// UDP port of RADIUS accounting (RFC 2866 §1).
pub const ACCOUNTING_PORT: u16 = 1813;
/// Code of an Accounting-Request.
pub const ACCOUNTING_REQUEST: u8 = 4;
/// Code of an Accounting-Response.
pub const ACCOUNTING_RESPONSE: u8 = 5;
/// The largest RADIUS packet (RFC 2865 §3).
pub const MAX_PACKET: usize = 4096;
pub(crate) const HEADER_LEN: usize = 20;
/// An attribute's value is at most 253 octets (its type and length take two of 255).
pub(crate) const MAX_VALUE: usize = 253;

/// Attribute types (RFC 2865 §5, RFC 2866 §5, RFC 2869 §5, RFC 3162 §2, RFC 6911 §3).
pub(crate) mod attr {
    pub const USER_NAME: u8 = 1;
    pub const NAS_IP_ADDRESS: u8 = 4;
    pub const SERVICE_TYPE: u8 = 6;
    pub const CLASS: u8 = 25;
    pub const CALLING_STATION_ID: u8 = 31;
    pub const NAS_IDENTIFIER: u8 = 32;
    pub const ACCT_STATUS_TYPE: u8 = 40;
    pub const ACCT_DELAY_TIME: u8 = 41;
    pub const ACCT_INPUT_OCTETS: u8 = 42;
    pub const ACCT_OUTPUT_OCTETS: u8 = 43;
    pub const ACCT_SESSION_ID: u8 = 44;
    pub const ACCT_AUTHENTIC: u8 = 45;
    pub const ACCT_SESSION_TIME: u8 = 46;
    pub const ACCT_INPUT_PACKETS: u8 = 47;
    pub const ACCT_OUTPUT_PACKETS: u8 = 48;
    pub const ACCT_TERMINATE_CAUSE: u8 = 49;
    pub const ACCT_MULTI_SESSION_ID: u8 = 50;
    pub const ACCT_INPUT_GIGAWORDS: u8 = 52;
    pub const ACCT_OUTPUT_GIGAWORDS: u8 = 53;
    pub const EVENT_TIMESTAMP: u8 = 55;
    pub const NAS_PORT_TYPE: u8 = 61;
    pub const NAS_IPV6_ADDRESS: u8 = 95;
    pub const FRAMED_IPV6_ADDRESS: u8 = 168;
}

/// Service-Type Framed (RFC 2865 §5.6): the user has a tunnel, not a login.
pub(crate) const SERVICE_FRAMED: u32 = 2;
/// Acct-Authentic Local (RFC 2866 §5.6): certificates, not a RADIUS authentication.
const AUTHENTIC_LOCAL: u32 = 2;
/// NAS-Port-Type Virtual (RFC 2865 §5.41).
pub(crate) const PORT_VIRTUAL: u32 = 5;

/// Acct-Status-Type (RFC 2866 §5.1, RFC 2869 §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusType {
    /// The session began.
    Start = 1,
    /// The session ended.
    Stop = 2,
    /// The session goes on; its counters so far.
    InterimUpdate = 3,
}

/// Acct-Terminate-Cause (RFC 2866 §5.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminateCause {
    /// The client ended it (deleted its IKE SA).
    UserRequest = 1,
    /// The client went silent (failed the liveness checks).
    LostCarrier = 2,
    /// Its authentication's lifetime or the certificate's ran out.
    SessionTimeout = 5,
    /// The administrator ended it, or revoked its certificate.
    AdminReset = 6,
    /// gate64 ended it for another reason (a newer login of the same identity replaced it).
    NasRequest = 10,
    /// gate64 stopped.
    NasReboot = 11,
}

impl TerminateCause {
    /// The cause for a session log `reason`.
    pub fn for_reason(reason: &str) -> TerminateCause {
        match reason {
            "admin" | "revoked" | "radius" => TerminateCause::AdminReset,
            "expired" | "reauth" | "session_timeout" => TerminateCause::SessionTimeout,
            "replaced" => TerminateCause::NasRequest,
            "shutdown" => TerminateCause::NasReboot,
            "dead_peer" => TerminateCause::LostCarrier,
            _ => TerminateCause::UserRequest,
        }
    }
}

/// What an Accounting-Request tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Start, Interim-Update or Stop.
    pub status: StatusType,
    /// Acct-Session-Id: one tunnel of one client session.
    pub session_id: String,
    /// Acct-Multi-Session-Id: the client session its tunnels share.
    pub multi_session_id: String,
    /// User-Name: the authenticated identity.
    pub user_name: String,
    /// Calling-Station-Id: where the client is (its outer address).
    pub calling_station: String,
    /// Framed-IPv6-Address: the client's inner addresses.
    pub framed: Vec<Ipv6Addr>,
    /// Class: each one the session's Access-Accept carried, echoed (RFC 2865 §5.25).
    pub class: Vec<Vec<u8>>,
    /// Acct-Session-Time in seconds (Interim-Update and Stop).
    pub session_time: Option<u32>,
    /// The counters (Interim-Update and Stop); octets beyond 2^32 go to Gigawords.
    pub counts: Option<Counts>,
    /// Acct-Terminate-Cause (Stop).
    pub terminate: Option<TerminateCause>,
    /// Event-Timestamp: when it happened, seconds since the Unix epoch.
    pub event_time: u32,
}

/// Who gate64 is to the server, and the seconds the request waited (Acct-Delay-Time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nas<'a> {
    /// NAS-Identifier.
    pub identifier: &'a str,
    /// NAS-IP-Address or NAS-IPv6-Address: the address gate64 sends from.
    pub address: Option<IpAddr>,
}

/// Why an encoded request did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong;

/// Writes the Accounting-Request for `req` with `identifier` into `out` (cleared first) and
/// returns its authenticator (to check the response with).
pub fn encode_request(
    identifier: u8,
    req: &Request,
    nas: &Nas<'_>,
    delay_secs: u32,
    secret: &[u8],
    out: &mut Vec<u8>,
) -> Result<[u8; 16], TooLong> {
    out.clear();
    out.extend_from_slice(&[ACCOUNTING_REQUEST, identifier, 0, 0]);
    out.extend_from_slice(&[0; 16]);
    int(out, attr::ACCT_STATUS_TYPE, req.status as u32);
    text(out, attr::ACCT_SESSION_ID, &req.session_id);
    text(out, attr::ACCT_MULTI_SESSION_ID, &req.multi_session_id);
    text(out, attr::USER_NAME, &req.user_name);
    text(out, attr::NAS_IDENTIFIER, nas.identifier);
    match nas.address {
        Some(IpAddr::V4(a)) => put(out, attr::NAS_IP_ADDRESS, &a.octets()),
        Some(IpAddr::V6(a)) => put(out, attr::NAS_IPV6_ADDRESS, &a.octets()),
        None => {}
    }
    int(out, attr::NAS_PORT_TYPE, PORT_VIRTUAL);
    int(out, attr::SERVICE_TYPE, SERVICE_FRAMED);
    int(out, attr::ACCT_AUTHENTIC, AUTHENTIC_LOCAL);
    text(out, attr::CALLING_STATION_ID, &req.calling_station);
    for a in &req.framed {
        put(out, attr::FRAMED_IPV6_ADDRESS, &a.octets());
    }
    for class in &req.class {
        if !class.is_empty() && class.len() <= MAX_VALUE {
            put(out, attr::CLASS, class);
        }
    }
    int(out, attr::EVENT_TIMESTAMP, req.event_time);
    int(out, attr::ACCT_DELAY_TIME, delay_secs);
    if let Some(t) = req.session_time {
        int(out, attr::ACCT_SESSION_TIME, t);
    }
    if let Some(c) = req.counts {
        int(out, attr::ACCT_INPUT_OCTETS, c.bytes_in as u32);
        int(out, attr::ACCT_INPUT_GIGAWORDS, (c.bytes_in >> 32) as u32);
        int(out, attr::ACCT_OUTPUT_OCTETS, c.bytes_out as u32);
        int(out, attr::ACCT_OUTPUT_GIGAWORDS, (c.bytes_out >> 32) as u32);
        int(out, attr::ACCT_INPUT_PACKETS, saturate(c.packets_in));
        int(out, attr::ACCT_OUTPUT_PACKETS, saturate(c.packets_out));
    }
    if let Some(cause) = req.terminate {
        int(out, attr::ACCT_TERMINATE_CAUSE, cause as u32);
    }
    let len = u16::try_from(out.len())
        .ok()
        .filter(|&l| usize::from(l) <= MAX_PACKET)
        .ok_or(TooLong)?;
    out[2..4].copy_from_slice(&len.to_be_bytes());
    let mut md5 = Md5::new();
    md5.update(&out[..]);
    md5.update(secret);
    let authenticator: [u8; 16] = md5.finalize().into();
    out[4..20].copy_from_slice(&authenticator);
    Ok(authenticator)
}

/// Why a datagram is not the Accounting-Response to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseError {
    /// Shorter than a header, its Length field wrong, or an attribute overruns it.
    Malformed,
    /// Not an Accounting-Response.
    Code(u8),
    /// The authenticator does not verify: another secret, or forged.
    Authenticator,
}

/// The identifier of an Accounting-Response `datagram`, once its framing is sound (which
/// request it answers); the authenticator is checked by [`check_response`].
pub fn response_identifier(datagram: &[u8]) -> Result<u8, ResponseError> {
    let header = datagram.get(..HEADER_LEN).ok_or(ResponseError::Malformed)?;
    if header[0] != ACCOUNTING_RESPONSE {
        return Err(ResponseError::Code(header[0]));
    }
    let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    if len < HEADER_LEN || len > datagram.len() || len > MAX_PACKET {
        return Err(ResponseError::Malformed);
    }
    // Attributes must tile the rest exactly (RFC 2865 §5: each at least 2 octets long).
    let mut at = HEADER_LEN;
    while at < len {
        let attr_len = usize::from(*datagram.get(at + 1).ok_or(ResponseError::Malformed)?);
        if attr_len < 2 || at + attr_len > len {
            return Err(ResponseError::Malformed);
        }
        at += attr_len;
    }
    Ok(header[1])
}

/// Checks that `datagram` is the Accounting-Response to the request whose authenticator was
/// `request_authenticator`, under `secret`. Octets beyond the Length field are padding and
/// ignored (RFC 2865 §3).
pub fn check_response(
    datagram: &[u8],
    request_authenticator: &[u8; 16],
    secret: &[u8],
) -> Result<(), ResponseError> {
    response_identifier(datagram)?;
    let len = usize::from(u16::from_be_bytes([datagram[2], datagram[3]]));
    let mut md5 = Md5::new();
    md5.update(&datagram[..4]);
    md5.update(request_authenticator);
    md5.update(&datagram[HEADER_LEN..len]);
    md5.update(secret);
    let expected: [u8; 16] = md5.finalize().into();
    // In constant time: how many leading octets of a forged authenticator matched must not
    // show in how long the check took.
    if !bool::from(expected[..].ct_eq(&datagram[4..HEADER_LEN])) {
        return Err(ResponseError::Authenticator);
    }
    Ok(())
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub(crate) fn int(out: &mut Vec<u8>, kind: u8, value: u32) {
    put(out, kind, &value.to_be_bytes());
}

/// A text attribute; cut to what one attribute holds, at a character boundary. An empty
/// value is left out (RFC 2865 §5: text is at least one octet).
pub(crate) fn text(out: &mut Vec<u8>, kind: u8, value: &str) {
    let mut end = value.len().min(MAX_VALUE);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    if end > 0 {
        put(out, kind, &value.as_bytes()[..end]);
    }
}

pub(crate) fn put(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    let value = &value[..value.len().min(MAX_VALUE)];
    out.push(kind);
    out.push(value.len() as u8 + 2);
    out.extend_from_slice(value);
}

pub mod access;

#[cfg(test)]
mod tests;
