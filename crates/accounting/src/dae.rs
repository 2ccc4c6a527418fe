//! RADIUS Dynamic Authorization (RFC 5176): the Disconnect-Request and CoA-Request a RADIUS
//! server or an administrator sends gate64 to end a session or change it, and the ACK or
//! NAK gate64 answers. No I/O: the listener in `gate64-io` owns the socket, the daemon
//! finds the sessions and acts on them.
//!
//! [`Dae::handle`] takes a datagram and its source: a source that is no listed client, a
//! datagram that is not a well-formed request, an authenticator or Message-Authenticator
//! that does not verify under the client's secret, an Event-Timestamp outside the replay
//! window, and a request already seen (same client, identifier and authenticator within the
//! window) are dropped without an answer and counted ([`Result`]). What passes is a
//! [`Request`]: the attributes that name sessions ([`Criteria`]), a Session-Timeout, and the
//! attributes gate64 cannot act on. [`encode_response`] writes the ACK or NAK.
//!
//! A request's authenticator is `MD5(Code | Identifier | Length | 16 zero octets |
//! attributes | secret)` (RFC 5176 §3.5); a Message-Authenticator is the HMAC-MD5 under the
//! secret of the request with both its authenticator and the Message-Authenticator's value
//! zeroed; a response's authenticator is `MD5(Code | Identifier | Length | request
//! authenticator | attributes | secret)`.

use md5::{Digest, Md5};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use subtle::ConstantTimeEq;

/// UDP port of Dynamic Authorization (RFC 5176 §3).
pub const DAE_PORT: u16 = 3799;
/// The largest RADIUS packet (RFC 2865 §3).
pub const MAX_PACKET: usize = 4096;
const HEADER_LEN: usize = 20;

/// Packet codes (RFC 5176 §3).
pub mod code {
    /// Disconnect-Request.
    pub const DISCONNECT_REQUEST: u8 = 40;
    /// Disconnect-ACK.
    pub const DISCONNECT_ACK: u8 = 41;
    /// Disconnect-NAK.
    pub const DISCONNECT_NAK: u8 = 42;
    /// CoA-Request.
    pub const COA_REQUEST: u8 = 43;
    /// CoA-ACK.
    pub const COA_ACK: u8 = 44;
    /// CoA-NAK.
    pub const COA_NAK: u8 = 45;
}

/// Attribute types a request may carry (RFC 2865 §5, RFC 2866 §5, RFC 2869 §5, RFC 3162,
/// RFC 5176 §3.5, RFC 6911).
pub mod attr {
    /// User-Name.
    pub const USER_NAME: u8 = 1;
    /// NAS-IP-Address.
    pub const NAS_IP_ADDRESS: u8 = 4;
    /// Framed-IP-Address.
    pub const FRAMED_IP_ADDRESS: u8 = 8;
    /// Filter-Id: the name of a `[[policy]]` (CoA).
    pub const FILTER_ID: u8 = 11;
    /// Session-Timeout.
    pub const SESSION_TIMEOUT: u8 = 27;
    /// Calling-Station-Id.
    pub const CALLING_STATION_ID: u8 = 31;
    /// NAS-Identifier.
    pub const NAS_IDENTIFIER: u8 = 32;
    /// Proxy-State: copied into the answer (RFC 2865 §5.33).
    pub const PROXY_STATE: u8 = 33;
    /// Acct-Session-Id.
    pub const ACCT_SESSION_ID: u8 = 44;
    /// Acct-Multi-Session-Id.
    pub const ACCT_MULTI_SESSION_ID: u8 = 50;
    /// Event-Timestamp.
    pub const EVENT_TIMESTAMP: u8 = 55;
    /// Message-Authenticator.
    pub const MESSAGE_AUTHENTICATOR: u8 = 80;
    /// NAS-IPv6-Address.
    pub const NAS_IPV6_ADDRESS: u8 = 95;
    /// Error-Cause.
    pub const ERROR_CAUSE: u8 = 101;
    /// Framed-IPv6-Address.
    pub const FRAMED_IPV6_ADDRESS: u8 = 168;
}

/// Error-Cause values (RFC 5176 §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCause {
    /// 401: the request holds an attribute gate64 cannot act on.
    UnsupportedAttribute = 401,
    /// 402: the request names no session.
    MissingAttribute = 402,
    /// 404: the request is not one gate64 can act on (its attributes contradict).
    InvalidRequest = 404,
    /// 407: an attribute's value is malformed (an address of the wrong length).
    InvalidAttributeValue = 407,
    /// 503: no session matches.
    SessionContextNotFound = 503,
    /// 506: gate64 could not carry it out (the IKE driver did not answer).
    ResourcesUnavailable = 506,
}

impl ErrorCause {
    /// The label of `gate64_radius_dae_requests_total{result}` for a NAK with this cause.
    pub fn label(self) -> &'static str {
        match self {
            ErrorCause::UnsupportedAttribute => "nak_unsupported_attribute",
            ErrorCause::MissingAttribute => "nak_missing_attribute",
            ErrorCause::InvalidRequest => "nak_invalid_request",
            ErrorCause::InvalidAttributeValue => "nak_invalid_attribute_value",
            ErrorCause::SessionContextNotFound => "nak_session_not_found",
            ErrorCause::ResourcesUnavailable => "nak_resources_unavailable",
        }
    }
}

/// Which request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Disconnect-Request: end the sessions.
    Disconnect,
    /// CoA-Request: change them.
    Coa,
}

impl Kind {
    /// The `code` label of `gate64_radius_dae_requests_total`.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Disconnect => "disconnect",
            Kind::Coa => "coa",
        }
    }

    fn of(code: u8) -> Option<Kind> {
        match code {
            code::DISCONNECT_REQUEST => Some(Kind::Disconnect),
            code::COA_REQUEST => Some(Kind::Coa),
            _ => None,
        }
    }

    /// The code of the ACK (`true`) or NAK answering this request.
    pub fn answer(self, ack: bool) -> u8 {
        match (self, ack) {
            (Kind::Disconnect, true) => code::DISCONNECT_ACK,
            (Kind::Disconnect, false) => code::DISCONNECT_NAK,
            (Kind::Coa, true) => code::COA_ACK,
            (Kind::Coa, false) => code::COA_NAK,
        }
    }
}

/// Why a datagram was dropped without an answer. Labels are the `result` of
/// `gate64_radius_dae_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Its source is no `[[accounting.dae.client]]`.
    UnknownClient,
    /// Shorter than a header, its Length field wrong, or an attribute overruns it.
    Malformed,
    /// Neither a Disconnect-Request nor a CoA-Request.
    Code,
    /// Its authenticator does not verify under the client's secret: another secret, or
    /// forged.
    Authenticator,
    /// Its Message-Authenticator is malformed or does not verify.
    MessageAuthenticator,
    /// Its Event-Timestamp is outside the replay window.
    Stale,
    /// The same request (client, identifier, authenticator) came within the window.
    Replay,
    /// The replay cache is full of requests still within the window.
    Busy,
}

impl Dropped {
    /// The `result` label.
    pub fn label(self) -> &'static str {
        match self {
            Dropped::UnknownClient => "unknown_client",
            Dropped::Malformed => "malformed",
            Dropped::Code => "bad_code",
            Dropped::Authenticator => "bad_authenticator",
            Dropped::MessageAuthenticator => "bad_message_authenticator",
            Dropped::Stale => "stale",
            Dropped::Replay => "replay",
            Dropped::Busy => "busy",
        }
    }
}

/// Every `result` label of `gate64_radius_dae_requests_total`, in order.
pub const RESULTS: [&str; 15] = [
    "ack",
    "nak_unsupported_attribute",
    "nak_missing_attribute",
    "nak_invalid_request",
    "nak_invalid_attribute_value",
    "nak_session_not_found",
    "nak_resources_unavailable",
    "unknown_client",
    "malformed",
    "bad_code",
    "bad_authenticator",
    "bad_message_authenticator",
    "stale",
    "replay",
    "busy",
];

/// The attributes of a request that name sessions; every one given must match (RFC 5176
/// §3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Criteria {
    /// User-Name: the client's authenticated identity, as accounting sends it.
    pub user_name: Option<String>,
    /// Acct-Session-Id: one tunnel of a session (`SESSION-TUNNEL`).
    pub session_id: Option<String>,
    /// Acct-Multi-Session-Id: the session.
    pub multi_session_id: Option<String>,
    /// Calling-Station-Id: the client's outer address.
    pub calling_station: Option<String>,
    /// Framed-IP-Address or Framed-IPv6-Address: an inner address of the client.
    pub framed: Vec<IpAddr>,
}

impl Criteria {
    /// Whether the request names nothing to match.
    pub fn is_empty(&self) -> bool {
        self.user_name.is_none()
            && self.session_id.is_none()
            && self.multi_session_id.is_none()
            && self.calling_station.is_none()
            && self.framed.is_empty()
    }
}

/// A request that verified, from a listed client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Disconnect or CoA.
    pub kind: Kind,
    /// The identifier the answer carries.
    pub identifier: u8,
    /// The request's authenticator (the answer's is computed over it).
    pub authenticator: [u8; 16],
    /// Which sessions.
    pub criteria: Criteria,
    /// Session-Timeout (CoA): seconds the session may last from now.
    pub session_timeout: Option<u32>,
    /// Filter-Id (CoA): the `[[policy]]` the sessions get from now on.
    pub filter_id: Option<String>,
    /// Attribute types gate64 cannot act on (Vendor-Specific, a Session-Timeout or Filter-Id
    /// in a Disconnect-Request, ...), each once, in order.
    pub unsupported: Vec<u8>,
    /// Why the attributes are wrong, when they are: the answer is then a NAK with it.
    pub invalid: Option<ErrorCause>,
    /// The Proxy-State attributes, which the answer repeats in order.
    pub proxy_state: Vec<Vec<u8>>,
    /// Which client sent it (its index in the list given to [`Dae::new`]).
    pub client: usize,
}

/// One client allowed to send requests: a prefix of source addresses and its secret.
#[derive(Clone)]
pub struct Client {
    /// Its address (`/32` or `/128`) or a prefix of addresses.
    pub address: IpAddr,
    /// The prefix length.
    pub prefix_len: u8,
    /// The shared secret; never logged.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("address", &self.address)
            .field("prefix_len", &self.prefix_len)
            .finish_non_exhaustive()
    }
}

impl Client {
    fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.address, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            (_, ip) => ip,
        };
        match (self.address, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix_len)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix_len)
            }
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], len: u8) -> bool {
    let len = usize::from(len).min(a.len() * 8);
    let (whole, rest) = (len / 8, len % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    a[whole] & mask == b[whole] & mask
}

/// Requests remembered for replay detection at most; beyond it (all still within the
/// window) new requests are dropped as `busy`, so a flood from a listed client cannot grow
/// the memory without bound.
pub const MAX_REMEMBERED: usize = 4096;

/// The verifier: the clients, the replay window and the requests seen within it.
#[derive(Debug)]
pub struct Dae {
    clients: Vec<Client>,
    window_secs: u64,
    /// When each request seen arrived (seconds since the Unix epoch), oldest first.
    seen: VecDeque<(u64, SeenKey)>,
    seen_set: HashMap<SeenKey, u64>,
}

type SeenKey = (IpAddr, u8, [u8; 16]);

impl Dae {
    /// Accepts requests from `clients` (the first whose prefix holds the source wins), with
    /// Event-Timestamps within `window_secs` of now and replays remembered that long.
    pub fn new(clients: Vec<Client>, window_secs: u64) -> Dae {
        Dae {
            clients,
            window_secs,
            seen: VecDeque::new(),
            seen_set: HashMap::new(),
        }
    }

    /// The client at `index` (as [`Request::client`] names it).
    pub fn client(&self, index: usize) -> Option<&Client> {
        self.clients.get(index)
    }

    /// Checks the datagram `datagram` from `source`, received at `now` (seconds since the
    /// Unix epoch).
    pub fn handle(
        &mut self,
        now: u64,
        source: IpAddr,
        datagram: &[u8],
    ) -> Result<Request, (Option<Kind>, Dropped)> {
        self.expire(now);
        let kind = datagram.first().copied().and_then(Kind::of);
        let client = self
            .clients
            .iter()
            .position(|c| c.contains(source))
            .ok_or((kind, Dropped::UnknownClient))?;
        let secret = &self.clients[client].secret;
        let mut request = verify(datagram, secret, now, self.window_secs).map_err(|e| (kind, e))?;
        request.client = client;
        let key = (source, request.identifier, request.authenticator);
        if self.seen_set.contains_key(&key) {
            return Err((Some(request.kind), Dropped::Replay));
        }
        if self.seen.len() >= MAX_REMEMBERED {
            return Err((Some(request.kind), Dropped::Busy));
        }
        self.seen.push_back((now, key));
        self.seen_set.insert(key, now);
        Ok(request)
    }

    fn expire(&mut self, now: u64) {
        while let Some(&(at, key)) = self.seen.front() {
            // A clock that stepped back keeps entries until it passes them again.
            if now.saturating_sub(at) <= self.window_secs {
                break;
            }
            self.seen.pop_front();
            self.seen_set.remove(&key);
        }
    }
}

/// The NAK a verified request gets before any session is looked up, if any: its attributes
/// are malformed or contradict (404, 407), it holds attributes gate64 cannot act on (401:
/// a NAK, never an ACK of a change not made), it names no session (402), or it is a
/// CoA-Request that asks for no change gate64 makes (402: Session-Timeout and Filter-Id are
/// the ones).
pub fn precheck(request: &Request) -> Option<ErrorCause> {
    if let Some(cause) = request.invalid {
        return Some(cause);
    }
    if !request.unsupported.is_empty() {
        return Some(ErrorCause::UnsupportedAttribute);
    }
    if request.criteria.is_empty() {
        return Some(ErrorCause::MissingAttribute);
    }
    if request.kind == Kind::Coa && request.session_timeout.is_none() && request.filter_id.is_none()
    {
        return Some(ErrorCause::MissingAttribute);
    }
    None
}

/// Checks the framing, code, authenticators and Event-Timestamp of `datagram` under
/// `secret`, and reads its attributes.
pub fn verify(
    datagram: &[u8],
    secret: &[u8],
    now: u64,
    window_secs: u64,
) -> Result<Request, Dropped> {
    let header = datagram.get(..HEADER_LEN).ok_or(Dropped::Malformed)?;
    let kind = Kind::of(header[0]).ok_or(Dropped::Code)?;
    let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    if len < HEADER_LEN || len > datagram.len() || len > MAX_PACKET {
        return Err(Dropped::Malformed);
    }
    // Octets beyond the Length field are padding and ignored (RFC 2865 §3).
    let packet = &datagram[..len];
    let attrs = attributes(&packet[HEADER_LEN..]).ok_or(Dropped::Malformed)?;

    let mut authenticator = [0u8; 16];
    authenticator.copy_from_slice(&packet[4..HEADER_LEN]);
    let mut md5 = Md5::new();
    md5.update(&packet[..4]);
    md5.update([0u8; 16]);
    md5.update(&packet[HEADER_LEN..]);
    md5.update(secret);
    let expected: [u8; 16] = md5.finalize().into();
    if !bool::from(expected[..].ct_eq(&authenticator)) {
        return Err(Dropped::Authenticator);
    }

    let mut message_auth = None;
    for &(at, kind, value) in &attrs {
        if kind == attr::MESSAGE_AUTHENTICATOR {
            if value.len() != 16 || message_auth.is_some() {
                return Err(Dropped::MessageAuthenticator);
            }
            message_auth = Some(at);
        }
    }
    if let Some(at) = message_auth {
        let mut zeroed = packet.to_vec();
        zeroed[4..HEADER_LEN].fill(0);
        let value = HEADER_LEN + at + 2;
        zeroed[value..value + 16].fill(0);
        let mac = hmac_md5(secret, &zeroed);
        if !bool::from(mac[..].ct_eq(&packet[value..value + 16])) {
            return Err(Dropped::MessageAuthenticator);
        }
    }

    let mut request = Request {
        kind,
        identifier: header[1],
        authenticator,
        criteria: Criteria::default(),
        session_timeout: None,
        filter_id: None,
        unsupported: Vec::new(),
        invalid: None,
        proxy_state: Vec::new(),
        client: 0,
    };
    let invalid = |request: &mut Request, cause| {
        request.invalid.get_or_insert(cause);
    };
    for &(_, kind, value) in &attrs {
        let c = &mut request.criteria;
        match kind {
            attr::EVENT_TIMESTAMP => {
                let secs = u32_of(value).ok_or(Dropped::Stale)?;
                if now.abs_diff(u64::from(secs)) > window_secs {
                    return Err(Dropped::Stale);
                }
            }
            attr::MESSAGE_AUTHENTICATOR | attr::NAS_IDENTIFIER => {}
            attr::NAS_IP_ADDRESS | attr::NAS_IPV6_ADDRESS => {}
            attr::PROXY_STATE => request.proxy_state.push(value.to_vec()),
            attr::USER_NAME => set_text(&mut c.user_name, value, &mut request.invalid),
            attr::ACCT_SESSION_ID => set_text(&mut c.session_id, value, &mut request.invalid),
            attr::ACCT_MULTI_SESSION_ID => {
                set_text(&mut c.multi_session_id, value, &mut request.invalid)
            }
            attr::CALLING_STATION_ID => {
                set_text(&mut c.calling_station, value, &mut request.invalid)
            }
            attr::FRAMED_IP_ADDRESS => match <[u8; 4]>::try_from(value) {
                Ok(a) => c.framed.push(IpAddr::V4(Ipv4Addr::from(a))),
                Err(_) => invalid(&mut request, ErrorCause::InvalidAttributeValue),
            },
            attr::FRAMED_IPV6_ADDRESS => match <[u8; 16]>::try_from(value) {
                Ok(a) => c.framed.push(IpAddr::V6(Ipv6Addr::from(a))),
                Err(_) => invalid(&mut request, ErrorCause::InvalidAttributeValue),
            },
            attr::SESSION_TIMEOUT if request.kind == Kind::Coa => match u32_of(value) {
                Some(secs) if request.session_timeout.is_none() => {
                    request.session_timeout = Some(secs)
                }
                Some(_) => invalid(&mut request, ErrorCause::InvalidRequest),
                None => invalid(&mut request, ErrorCause::InvalidAttributeValue),
            },
            attr::FILTER_ID if request.kind == Kind::Coa => {
                set_text(&mut request.filter_id, value, &mut request.invalid)
            }
            other => {
                if !request.unsupported.contains(&other) {
                    request.unsupported.push(other);
                }
            }
        }
    }
    Ok(request)
}

/// A text attribute that names a session; given twice (with another value) it contradicts
/// itself.
fn set_text(slot: &mut Option<String>, value: &[u8], invalid: &mut Option<ErrorCause>) {
    let Ok(text) = std::str::from_utf8(value) else {
        invalid.get_or_insert(ErrorCause::InvalidAttributeValue);
        return;
    };
    match slot {
        Some(old) if old != text => {
            invalid.get_or_insert(ErrorCause::InvalidRequest);
        }
        Some(_) => {}
        None => *slot = Some(text.to_owned()),
    }
}

fn u32_of(value: &[u8]) -> Option<u32> {
    <[u8; 4]>::try_from(value).ok().map(u32::from_be_bytes)
}

/// The attributes of `body` as (offset in `body`, type, value); `None` when they do not
/// tile it exactly (each at least 2 octets long, RFC 2865 §5).
fn attributes(body: &[u8]) -> Option<Vec<(usize, u8, &[u8])>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let kind = body[at];
        let len = usize::from(*body.get(at + 1)?);
        if len < 2 || at + len > body.len() {
            return None;
        }
        out.push((at, kind, &body[at + 2..at + len]));
        at += len;
    }
    Some(out)
}

/// HMAC-MD5 (RFC 2104) of `data` under `key`.
fn hmac_md5(key: &[u8], data: &[u8]) -> [u8; 16] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..16].copy_from_slice(&Md5::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Md5::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(data);
    let inner: [u8; 16] = inner.finalize().into();
    let mut outer = Md5::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

/// Writes the answer to `request` into `out` (cleared first): its ACK (`cause` `None`) or a
/// NAK with Error-Cause `cause`, with the request's Proxy-States, signed with `secret`.
pub fn encode_response(
    request: &Request,
    cause: Option<ErrorCause>,
    secret: &[u8],
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&[
        request.kind.answer(cause.is_none()),
        request.identifier,
        0,
        0,
    ]);
    out.extend_from_slice(&request.authenticator);
    if let Some(cause) = cause {
        out.extend_from_slice(&[attr::ERROR_CAUSE, 6]);
        out.extend_from_slice(&(cause as u32).to_be_bytes());
    }
    for state in &request.proxy_state {
        // Each came in one attribute, so it fits in one; a request of nothing but
        // Proxy-States near the size limit loses its last ones to the Error-Cause.
        if out.len() + state.len() + 2 > MAX_PACKET {
            break;
        }
        out.push(attr::PROXY_STATE);
        out.push(state.len() as u8 + 2);
        out.extend_from_slice(state);
    }
    let len = out.len() as u16;
    out[2..4].copy_from_slice(&len.to_be_bytes());
    let mut md5 = Md5::new();
    md5.update(&out[..]);
    md5.update(secret);
    let authenticator: [u8; 16] = md5.finalize().into();
    out[4..HEADER_LEN].copy_from_slice(&authenticator);
}

#[cfg(test)]
mod tests;
