//! RADIUS authentication for the IKEv2 EAP relay (RFC 2865, RFC 3579): the Access-Request
//! that carries one EAP message to the server, the password-less one that asks it to
//! authorize a certificate identity, and the check and parse of its Access-Challenge,
//! Access-Accept or Access-Reject. No I/O: the relay in `gate64-io` owns
//! the sockets and the retransmissions.
//!
//! Every request and every reply carries a Message-Authenticator (RFC 3579 §3.2:
//! HMAC-MD5 over the packet with the attribute's value zeroed, keyed by the secret); a reply
//! without one (but a bare Access-Reject, which can only refuse), or whose Response
//! Authenticator or Message-Authenticator does not verify, is not taken as the server's and
//! is ignored. An Access-Accept hands over the
//! EAP method's MSK as MS-MPPE-Recv-Key and MS-MPPE-Send-Key (RFC 2548 §2.4.2, §2.4.3),
//! each salt-encrypted under the secret and the request's authenticator.

use super::{HEADER_LEN, MAX_PACKET, MAX_VALUE, Nas, PORT_VIRTUAL, SERVICE_FRAMED, TooLong};
use super::{attr, int, put, text};
use md5::{Digest, Md5};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use subtle::ConstantTimeEq;

/// UDP port of RADIUS authentication (RFC 2865 §3).
pub const AUTH_PORT: u16 = 1812;
/// Code of an Access-Request.
pub const ACCESS_REQUEST: u8 = 1;
/// Code of an Access-Accept.
pub const ACCESS_ACCEPT: u8 = 2;
/// Code of an Access-Reject.
pub const ACCESS_REJECT: u8 = 3;
/// Code of an Access-Challenge.
pub const ACCESS_CHALLENGE: u8 = 11;

const FRAMED_IP_ADDRESS: u8 = 8;
const FILTER_ID: u8 = 11;
const CLASS: u8 = 25;
const STATE: u8 = 24;
const SESSION_TIMEOUT: u8 = 27;
const FRAMED_IPV6_PREFIX: u8 = 97;
const FRAMED_IPV6_ADDRESS: u8 = 168;
const VENDOR_SPECIFIC: u8 = 26;
const EAP_MESSAGE: u8 = 79;
const MESSAGE_AUTHENTICATOR: u8 = 80;
const VENDOR_MICROSOFT: u32 = 311;
const MS_MPPE_SEND_KEY: u8 = 16;
const MS_MPPE_RECV_KEY: u8 = 17;
/// The most Class attributes kept from one Access-Accept; more are dropped and counted.
pub const MAX_CLASSES: usize = 8;
/// The longest Filter-Id kept (RFC 2865 §5.11 text, one attribute).
pub const MAX_FILTER_ID: usize = 253;
/// The largest EAP message relayed (what fits a RADIUS packet beside the other attributes).
pub const MAX_EAP: usize = 3000;

/// What one Access-Request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRequest<'a> {
    /// User-Name: the EAP identity the client gave.
    pub user_name: &'a str,
    /// Calling-Station-Id: the client's outer address.
    pub calling_station: &'a str,
    /// The EAP message from the client, split over EAP-Message attributes.
    pub eap_message: &'a [u8],
    /// The State of the previous Access-Challenge, echoed.
    pub state: Option<&'a [u8]>,
}

/// Writes the Access-Request for `req` with `identifier` and the random
/// `authenticator` into `out` (cleared first), with its Message-Authenticator.
pub fn encode_access_request(
    identifier: u8,
    authenticator: &[u8; 16],
    req: &AccessRequest<'_>,
    nas: &Nas<'_>,
    secret: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), TooLong> {
    if req.eap_message.is_empty() || req.eap_message.len() > MAX_EAP {
        return Err(TooLong);
    }
    out.clear();
    out.extend_from_slice(&[ACCESS_REQUEST, identifier, 0, 0]);
    out.extend_from_slice(authenticator);
    text(out, attr::USER_NAME, req.user_name);
    text(out, attr::NAS_IDENTIFIER, nas.identifier);
    match nas.address {
        Some(IpAddr::V4(a)) => put(out, attr::NAS_IP_ADDRESS, &a.octets()),
        Some(IpAddr::V6(a)) => put(out, attr::NAS_IPV6_ADDRESS, &a.octets()),
        None => {}
    }
    int(out, attr::NAS_PORT_TYPE, PORT_VIRTUAL);
    int(out, attr::SERVICE_TYPE, SERVICE_FRAMED);
    text(out, attr::CALLING_STATION_ID, req.calling_station);
    for chunk in req.eap_message.chunks(MAX_VALUE) {
        put(out, EAP_MESSAGE, chunk);
    }
    if let Some(state) = req.state {
        if state.is_empty() || state.len() > MAX_VALUE {
            return Err(TooLong);
        }
        put(out, STATE, state);
    }
    sign(out, secret)
}

/// Service-Type Authorize-Only (RFC 3576 §2.1, RFC 5176 §3.1): the NAS already authenticated
/// the user and asks only what to grant. Chosen over Call-Check (10, RFC 2865 §5.6), the
/// other password-less type, because Call-Check means "answer this call by its
/// Calling-Station-Id", while Authorize-Only names what the request is, so a server policy
/// can tell these requests apart from password checks (e.g. only accept them from gate64).
pub const SERVICE_AUTHORIZE_ONLY: u32 = 17;

/// Writes the Access-Request that asks the server to authorize the certificate identity
/// `user_name` (authenticated by gate64 already): User-Name, the NAS attributes,
/// Service-Type Authorize-Only, Calling-Station-Id and a Message-Authenticator; no password,
/// no EAP-Message. `out` is cleared first.
pub fn encode_authorize_request(
    identifier: u8,
    authenticator: &[u8; 16],
    (user_name, calling_station): (&str, &str),
    nas: &Nas<'_>,
    secret: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), TooLong> {
    if user_name.is_empty() || user_name.len() > MAX_VALUE {
        // A cut name would authorize another account.
        return Err(TooLong);
    }
    out.clear();
    out.extend_from_slice(&[ACCESS_REQUEST, identifier, 0, 0]);
    out.extend_from_slice(authenticator);
    text(out, attr::USER_NAME, user_name);
    text(out, attr::NAS_IDENTIFIER, nas.identifier);
    match nas.address {
        Some(IpAddr::V4(a)) => put(out, attr::NAS_IP_ADDRESS, &a.octets()),
        Some(IpAddr::V6(a)) => put(out, attr::NAS_IPV6_ADDRESS, &a.octets()),
        None => {}
    }
    int(out, attr::NAS_PORT_TYPE, PORT_VIRTUAL);
    int(out, attr::SERVICE_TYPE, SERVICE_AUTHORIZE_ONLY);
    text(out, attr::CALLING_STATION_ID, calling_station);
    sign(out, secret)
}

/// Appends the Message-Authenticator to the request in `out`, sets its length and signs it.
fn sign(out: &mut Vec<u8>, secret: &[u8]) -> Result<(), TooLong> {
    let ma_at = out.len();
    put(out, MESSAGE_AUTHENTICATOR, &[0; 16]);
    let len = u16::try_from(out.len())
        .ok()
        .filter(|&l| usize::from(l) <= MAX_PACKET)
        .ok_or(TooLong)?;
    out[2..4].copy_from_slice(&len.to_be_bytes());
    let mac = hmac_md5(secret, &[&out[..]]);
    out[ma_at + 2..ma_at + 18].copy_from_slice(&mac);
    Ok(())
}

/// The authorization attributes of an Access-Accept (RFC 2865 §5.8, §5.11, §5.25, §5.27;
/// RFC 3162 §2.3; RFC 6911 §3.1). A value of the wrong length or form is dropped and counted
/// in `malformed`; the packet is still taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorization {
    /// Framed-IP-Address, unless 255.255.255.255 (the user chooses) or 255.255.255.254 (the
    /// NAS chooses): both leave the choice to gate64's pool.
    pub framed_ip: Option<Ipv4Addr>,
    /// Framed-IPv6-Address.
    pub framed_ipv6: Option<Ipv6Addr>,
    /// Framed-IPv6-Prefix: the prefix (host bits cleared) and its length.
    pub framed_ipv6_prefix: Option<(Ipv6Addr, u8)>,
    /// Session-Timeout in seconds (0 is dropped: no limit is no attribute).
    pub session_timeout: Option<u32>,
    /// Filter-Id: the name of the policy to apply (UTF-8, 1 to 253 octets).
    pub filter_id: Option<String>,
    /// Every Class, in order, at most [`MAX_CLASSES`]: echoed in the session's
    /// Accounting-Requests (RFC 2865 §5.25).
    pub class: Vec<Vec<u8>>,
    /// Attributes dropped: a malformed value, a second single-valued attribute, a Class
    /// beyond [`MAX_CLASSES`].
    pub malformed: u32,
}

impl Authorization {
    /// Takes one attribute of an Access-Accept; other types are left alone.
    fn take(&mut self, kind: u8, value: &[u8]) {
        let ok = match kind {
            FRAMED_IP_ADDRESS => match <[u8; 4]>::try_from(value) {
                Ok(octets) if self.framed_ip.is_none() => {
                    let a = Ipv4Addr::from(octets);
                    if !matches!(u32::from(a), 0xffff_ffff | 0xffff_fffe) {
                        self.framed_ip = Some(a);
                    }
                    true
                }
                _ => false,
            },
            FRAMED_IPV6_ADDRESS => match <[u8; 16]>::try_from(value) {
                Ok(octets) if self.framed_ipv6.is_none() => {
                    self.framed_ipv6 = Some(Ipv6Addr::from(octets));
                    true
                }
                _ => false,
            },
            FRAMED_IPV6_PREFIX => match (value, &self.framed_ipv6_prefix) {
                // Reserved, Prefix-Length, then the prefix's significant octets (RFC 3162
                // §2.3: 0 to 16 of them).
                ([_, len, prefix @ ..], None) if *len <= 128 && prefix.len() <= 16 => {
                    let mut octets = [0u8; 16];
                    octets[..prefix.len()].copy_from_slice(prefix);
                    let bits = u128::from_be_bytes(octets);
                    let mask = u128::MAX.checked_shl(128 - u32::from(*len)).unwrap_or(0);
                    self.framed_ipv6_prefix = Some((Ipv6Addr::from(bits & mask), *len));
                    true
                }
                _ => false,
            },
            SESSION_TIMEOUT => match <[u8; 4]>::try_from(value) {
                Ok(octets) if self.session_timeout.is_none() && octets != [0; 4] => {
                    self.session_timeout = Some(u32::from_be_bytes(octets));
                    true
                }
                _ => false,
            },
            FILTER_ID => match std::str::from_utf8(value) {
                Ok(name)
                    if self.filter_id.is_none()
                        && !name.is_empty()
                        && name.len() <= MAX_FILTER_ID
                        && !name.chars().any(char::is_control) =>
                {
                    self.filter_id = Some(name.to_owned());
                    true
                }
                _ => false,
            },
            CLASS if !value.is_empty() && self.class.len() < MAX_CLASSES => {
                self.class.push(value.to_vec());
                true
            }
            CLASS => false,
            _ => true,
        };
        if !ok {
            self.malformed = self.malformed.saturating_add(1);
        }
    }
}

/// What the server answered.
#[derive(Clone, PartialEq, Eq)]
pub enum AccessReply {
    /// Access-Challenge: the next EAP message for the client, and the State to echo.
    Challenge {
        /// The EAP-Message attributes, joined.
        eap_message: Vec<u8>,
        /// The State attribute, if any.
        state: Option<Vec<u8>>,
    },
    /// Access-Accept: the EAP-Success for the client and the MSK (MS-MPPE-Recv-Key ‖
    /// MS-MPPE-Send-Key; empty when the server sent no keys).
    Accept {
        /// The EAP-Message attributes, joined (an EAP-Success).
        eap_message: Vec<u8>,
        /// The MSK.
        msk: Vec<u8>,
        /// What the server authorizes.
        authorization: Authorization,
    },
    /// Access-Reject, with the EAP-Failure the server sent (may be empty).
    Reject {
        /// The EAP-Message attributes, joined.
        eap_message: Vec<u8>,
    },
}

impl std::fmt::Debug for AccessReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessReply::Challenge { eap_message, .. } => f
                .debug_struct("Challenge")
                .field("eap_len", &eap_message.len())
                .finish_non_exhaustive(),
            AccessReply::Accept { msk, .. } => f
                .debug_struct("Accept")
                .field("msk_len", &msk.len())
                .finish_non_exhaustive(),
            AccessReply::Reject { .. } => f.write_str("Reject"),
        }
    }
}

/// Why a datagram is not the reply to an Access-Request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyError {
    /// Shorter than a header, its Length field wrong, or an attribute overruns it.
    Malformed,
    /// Not an Access-Accept, Access-Reject or Access-Challenge.
    Code(u8),
    /// Another identifier than the request's.
    Identifier,
    /// No Message-Authenticator (RFC 3579 §3.2 requires one with EAP-Message).
    NoMessageAuthenticator,
    /// The Response Authenticator or the Message-Authenticator does not verify.
    Authenticator,
    /// An MS-MPPE key attribute that does not decrypt to a key.
    Key,
}

/// Checks that `datagram` is the reply to the Access-Request with `identifier` and
/// `request_authenticator` under `secret`, and parses it.
pub fn parse_access_reply(
    datagram: &[u8],
    identifier: u8,
    request_authenticator: &[u8; 16],
    secret: &[u8],
) -> Result<AccessReply, ReplyError> {
    let header = datagram.get(..HEADER_LEN).ok_or(ReplyError::Malformed)?;
    let code = header[0];
    if !matches!(code, ACCESS_ACCEPT | ACCESS_REJECT | ACCESS_CHALLENGE) {
        return Err(ReplyError::Code(code));
    }
    if header[1] != identifier {
        return Err(ReplyError::Identifier);
    }
    let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    if len < HEADER_LEN || len > datagram.len() || len > MAX_PACKET {
        return Err(ReplyError::Malformed);
    }
    let packet = &datagram[..len];
    let attrs = attributes(&packet[HEADER_LEN..]).ok_or(ReplyError::Malformed)?;
    // Response Authenticator: MD5(Code | Identifier | Length | Request Authenticator |
    // attributes | secret) (RFC 2865 §3).
    let mut md5 = Md5::new();
    md5.update(&packet[..4]);
    md5.update(request_authenticator);
    md5.update(&packet[HEADER_LEN..]);
    md5.update(secret);
    let expected: [u8; 16] = md5.finalize().into();
    if !bool::from(expected[..].ct_eq(&packet[4..HEADER_LEN])) {
        return Err(ReplyError::Authenticator);
    }
    // Message-Authenticator: HMAC-MD5 over the packet with the Request Authenticator in
    // place of the Response Authenticator and the attribute's value zeroed.
    let Some((ma_at, ma)) = attrs
        .iter()
        .find(|(_, kind, _)| *kind == MESSAGE_AUTHENTICATOR)
        .map(|(at, _, v)| (*at, *v))
    else {
        // A bare Access-Reject (no EAP-Message) from a server that signs no reply to a
        // password-less request (FreeRADIUS before 3.2.5): its Response Authenticator
        // verified, and a forged reject could only refuse, so it is taken rather than
        // retried and the server held down. An Accept or a Challenge without one never is
        // (a forged Response Authenticator, as in BlastRADIUS, would grant access).
        if code == ACCESS_REJECT && !attrs.iter().any(|(_, kind, _)| *kind == EAP_MESSAGE) {
            return Ok(AccessReply::Reject {
                eap_message: Vec::new(),
            });
        }
        return Err(ReplyError::NoMessageAuthenticator);
    };
    if ma.len() != 16 {
        return Err(ReplyError::Malformed);
    }
    let value_at = HEADER_LEN + ma_at + 2;
    let mac = hmac_md5(
        secret,
        &[
            &packet[..4],
            request_authenticator,
            &packet[HEADER_LEN..value_at],
            &[0; 16],
            &packet[value_at + 16..],
        ],
    );
    if !bool::from(mac[..].ct_eq(ma)) {
        return Err(ReplyError::Authenticator);
    }
    let mut eap_message = Vec::new();
    let mut state = None;
    let (mut recv, mut send) = (None, None);
    let mut authorization = Authorization::default();
    for (_, kind, value) in &attrs {
        if code == ACCESS_ACCEPT {
            authorization.take(*kind, value);
        }
        match *kind {
            EAP_MESSAGE => eap_message.extend_from_slice(value),
            STATE => state = Some(value.to_vec()),
            VENDOR_SPECIFIC if code == ACCESS_ACCEPT => {
                let Some((vendor, rest)) = value.split_first_chunk::<4>() else {
                    continue;
                };
                if u32::from_be_bytes(*vendor) != VENDOR_MICROSOFT {
                    continue;
                }
                // One vendor attribute per Vendor-Specific (RFC 2548 §2).
                let (Some(&vtype), Some(&vlen)) = (rest.first(), rest.get(1)) else {
                    return Err(ReplyError::Malformed);
                };
                let vvalue = rest
                    .get(2..usize::from(vlen))
                    .filter(|_| vlen >= 2)
                    .ok_or(ReplyError::Malformed)?;
                match vtype {
                    MS_MPPE_RECV_KEY => recv = Some(vvalue),
                    MS_MPPE_SEND_KEY => send = Some(vvalue),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    Ok(match code {
        ACCESS_CHALLENGE => AccessReply::Challenge { eap_message, state },
        ACCESS_REJECT => AccessReply::Reject { eap_message },
        _ => {
            let mut msk = Vec::new();
            if let (Some(recv), Some(send)) = (recv, send) {
                msk =
                    decrypt_mppe_key(recv, secret, request_authenticator).ok_or(ReplyError::Key)?;
                msk.extend(
                    decrypt_mppe_key(send, secret, request_authenticator).ok_or(ReplyError::Key)?,
                );
            }
            AccessReply::Accept {
                eap_message,
                msk,
                authorization,
            }
        }
    })
}

/// Each attribute of `body` as (offset in `body`, type, value); `None` when they do not tile
/// it exactly (RFC 2865 §5: each at least 2 octets long).
fn attributes(body: &[u8]) -> Option<Vec<(usize, u8, &[u8])>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let kind = body[at];
        let len = usize::from(*body.get(at + 1)?);
        if len < 2 {
            return None;
        }
        out.push((at, kind, body.get(at + 2..at + len)?));
        at += len;
    }
    Some(out)
}

/// Decrypts an MS-MPPE-Send-Key or -Recv-Key value (RFC 2548 §2.4.2): a 2-octet salt (high
/// bit set), then blocks `c(i) = p(i) XOR MD5(secret | c(i-1))` with
/// `c(0) = request authenticator | salt`; the plaintext is a length octet, the key, padding.
pub fn decrypt_mppe_key(
    value: &[u8],
    secret: &[u8],
    request_authenticator: &[u8; 16],
) -> Option<Vec<u8>> {
    let (salt, cipher) = value.split_first_chunk::<2>()?;
    if salt[0] & 0x80 == 0 || cipher.is_empty() || cipher.len() % 16 != 0 {
        return None;
    }
    let mut plain = Vec::with_capacity(cipher.len());
    let mut previous: &[u8] = request_authenticator;
    let mut first = true;
    for block in cipher.chunks(16) {
        let mut md5 = Md5::new();
        md5.update(secret);
        md5.update(previous);
        if first {
            md5.update(salt);
            first = false;
        }
        let b: [u8; 16] = md5.finalize().into();
        plain.extend(block.iter().zip(b).map(|(c, k)| c ^ k));
        previous = block;
    }
    let key_len = usize::from(*plain.first()?);
    if key_len == 0 || key_len >= plain.len() {
        return None;
    }
    Some(plain[1..=key_len].to_vec())
}

/// Encrypts `key` as an MS-MPPE key attribute value with `salt` (the server's side of
/// [`decrypt_mppe_key`]; for tests and test servers).
pub fn encrypt_mppe_key(
    key: &[u8],
    salt: [u8; 2],
    secret: &[u8],
    request_authenticator: &[u8; 16],
) -> Vec<u8> {
    let mut plain = vec![u8::try_from(key.len()).unwrap_or(u8::MAX)];
    plain.extend_from_slice(&key[..key.len().min(255)]);
    while plain.len() % 16 != 0 {
        plain.push(0);
    }
    let mut out = salt.to_vec();
    let mut previous = request_authenticator.to_vec();
    previous.extend_from_slice(&salt);
    for block in plain.chunks(16) {
        let mut md5 = Md5::new();
        md5.update(secret);
        md5.update(&previous);
        let b: [u8; 16] = md5.finalize().into();
        let c: Vec<u8> = block.iter().zip(b).map(|(p, k)| p ^ k).collect();
        out.extend_from_slice(&c);
        previous = c;
    }
    out
}

/// HMAC-MD5 (RFC 2104) of the concatenated `parts` under `key`.
pub fn hmac_md5(key: &[u8], parts: &[&[u8]]) -> [u8; 16] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..16].copy_from_slice(&Md5::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Md5::new();
    inner.update(k.map(|b| b ^ 0x36));
    for p in parts {
        inner.update(p);
    }
    let mut outer = Md5::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

#[cfg(test)]
mod tests;
