use super::*;
use std::net::Ipv4Addr;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const SECRET: &[u8] = b"testing123";

fn ra() -> [u8; 16] {
    core::array::from_fn(|i| i as u8)
}

/// An Access-Accept built with python3's hashlib/hmac (not this code): EAP-Success id 7,
/// MS-MPPE-Recv-Key 0x11 × 32 (salt 8001), MS-MPPE-Send-Key 0x22 × 32 (salt 8002), a
/// Message-Authenticator, secret "testing123", request authenticator 00 01 .. 0f.
const ACCEPT: &str = "020700a08d407e9803ee1ad9a5ff3d2c1a9c48fe4f06030700041a3a000001371134800112b5155c1b0b3429de36a17aa3ab04e2ebe3081f82871c67d39e1dab3d92804bf8ba8d8ef0de16f8d54520c0010a857b1a3a000001371034800237691c1cce39be9010c2d199d2d11026d40e191a87d90e213154fcd4989f44915fc7ee8659af31873cedaddd1239dbdc5012b6c91990a4014c81e36030a540121612";

#[test]
fn hmac_md5_matches_rfc_2104() {
    // RFC 2104 / RFC 2202 test case 1.
    let mac = hmac_md5(&[0x0b; 16], &[b"Hi There"]);
    assert_eq!(mac.to_vec(), hex("9294727a3638bb1c13f48ef8158bfc9d"));
    // Test case 2, split over two parts.
    let mac = hmac_md5(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
    assert_eq!(mac.to_vec(), hex("750c783e6ab0b503eaa86e310a5db738"));
}

#[test]
fn mppe_key_decrypts_the_python_vector() {
    let value = hex(
        "800112b5155c1b0b3429de36a17aa3ab04e2ebe3081f82871c67d39e1dab3d92804bf8ba8d8ef0de16f8d54520c0010a857b",
    );
    assert_eq!(
        decrypt_mppe_key(&value, SECRET, &ra()),
        Some(vec![0x11; 32])
    );
    assert_eq!(
        encrypt_mppe_key(&[0x11; 32], [0x80, 1], SECRET, &ra()),
        value
    );
    // Another secret gives no key (the length octet decrypts to garbage or the salt is bad).
    let mut bad_salt = value.clone();
    bad_salt[0] = 0x00;
    assert_eq!(decrypt_mppe_key(&bad_salt, SECRET, &ra()), None);
    assert_eq!(decrypt_mppe_key(&value[..17], SECRET, &ra()), None);
}

#[test]
fn accept_from_python_parses_with_the_msk() {
    let pkt = hex(ACCEPT);
    let reply = parse_access_reply(&pkt, 7, &ra(), SECRET).unwrap();
    let mut msk = vec![0x11; 32];
    msk.extend([0x22; 32]);
    assert_eq!(
        reply,
        AccessReply::Accept {
            eap_message: vec![3, 7, 0, 4],
            msk,
            authorization: Authorization::default(),
        }
    );
    assert_eq!(
        parse_access_reply(&pkt, 8, &ra(), SECRET),
        Err(ReplyError::Identifier)
    );
    assert_eq!(
        parse_access_reply(&pkt, 7, &ra(), b"other"),
        Err(ReplyError::Authenticator)
    );
}

#[test]
fn a_forged_message_authenticator_is_refused() {
    // Recompute the Response Authenticator over a changed Message-Authenticator: only the
    // HMAC catches it.
    let mut pkt = hex(ACCEPT);
    let n = pkt.len();
    pkt[n - 1] ^= 1;
    let mut md5 = Md5::new();
    md5.update(&pkt[..4]);
    md5.update(ra());
    md5.update(&pkt[20..]);
    md5.update(SECRET);
    let auth: [u8; 16] = md5.finalize().into();
    pkt[4..20].copy_from_slice(&auth);
    assert_eq!(
        parse_access_reply(&pkt, 7, &ra(), SECRET),
        Err(ReplyError::Authenticator)
    );
}

/// Builds a reply as a server would: attributes, a Message-Authenticator, the Response
/// Authenticator.
fn server_reply(code: u8, id: u8, attrs: &[u8], with_ma: bool) -> Vec<u8> {
    let mut body = attrs.to_vec();
    let ma_at = body.len();
    if with_ma {
        body.extend([MESSAGE_AUTHENTICATOR, 18]);
        body.extend([0; 16]);
    }
    let len = (20 + body.len()) as u16;
    let mut pkt = vec![code, id];
    pkt.extend(len.to_be_bytes());
    pkt.extend(ra());
    pkt.extend(&body);
    if with_ma {
        let mac = hmac_md5(SECRET, &[&pkt]);
        pkt[20 + ma_at + 2..20 + ma_at + 18].copy_from_slice(&mac);
    }
    let mut md5 = Md5::new();
    md5.update(&pkt[..4]);
    md5.update(ra());
    md5.update(&pkt[20..]);
    md5.update(SECRET);
    let auth: [u8; 16] = md5.finalize().into();
    pkt[4..20].copy_from_slice(&auth);
    pkt
}

#[test]
fn challenge_joins_eap_messages_and_keeps_state() {
    let eap: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
    let mut attrs = vec![EAP_MESSAGE, 255];
    attrs.extend(&eap[..253]);
    attrs.extend([EAP_MESSAGE, 49]);
    attrs.extend(&eap[253..]);
    attrs.extend([STATE, 5, 1, 2, 3]);
    let pkt = server_reply(ACCESS_CHALLENGE, 3, &attrs, true);
    assert_eq!(
        parse_access_reply(&pkt, 3, &ra(), SECRET),
        Ok(AccessReply::Challenge {
            eap_message: eap,
            state: Some(vec![1, 2, 3])
        })
    );
    let unsigned = server_reply(ACCESS_CHALLENGE, 3, &attrs, false);
    assert_eq!(
        parse_access_reply(&unsigned, 3, &ra(), SECRET),
        Err(ReplyError::NoMessageAuthenticator)
    );
    let reject = server_reply(ACCESS_REJECT, 3, &[EAP_MESSAGE, 6, 4, 9, 0, 4], true);
    assert_eq!(
        parse_access_reply(&reject, 3, &ra(), SECRET),
        Ok(AccessReply::Reject {
            eap_message: vec![4, 9, 0, 4]
        })
    );
    assert_eq!(
        parse_access_reply(&reject[..30], 3, &ra(), SECRET),
        Err(ReplyError::Malformed)
    );
}

#[test]
fn request_splits_eap_and_signs() {
    let eap: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
    let nas = Nas {
        identifier: "gate64",
        address: Some(Ipv4Addr::new(192, 0, 2, 1).into()),
    };
    let req = AccessRequest {
        user_name: "alice",
        calling_station: "2001:db8::7",
        eap_message: &eap,
        state: Some(&[9, 9]),
    };
    let mut out = Vec::new();
    encode_access_request(42, &ra(), &req, &nas, SECRET, &mut out).unwrap();
    assert_eq!(out[0], ACCESS_REQUEST);
    assert_eq!(out[1], 42);
    assert_eq!(usize::from(u16::from_be_bytes([out[2], out[3]])), out.len());
    let attrs = attributes(&out[20..]).unwrap();
    let joined: Vec<u8> = attrs
        .iter()
        .filter(|a| a.1 == EAP_MESSAGE)
        .flat_map(|a| a.2.to_vec())
        .collect();
    assert_eq!(joined, eap);
    let sizes: Vec<usize> = attrs
        .iter()
        .filter(|a| a.1 == EAP_MESSAGE)
        .map(|a| a.2.len())
        .collect();
    assert_eq!(sizes, [253, 253, 94]);
    let find = |t: u8| attrs.iter().find(|a| a.1 == t).map(|a| a.2.to_vec());
    assert_eq!(find(attr::USER_NAME), Some(b"alice".to_vec()));
    assert_eq!(
        find(attr::CALLING_STATION_ID),
        Some(b"2001:db8::7".to_vec())
    );
    assert_eq!(find(attr::NAS_IDENTIFIER), Some(b"gate64".to_vec()));
    assert_eq!(find(attr::NAS_IP_ADDRESS), Some(vec![192, 0, 2, 1]));
    assert_eq!(find(STATE), Some(vec![9, 9]));
    // The Message-Authenticator verifies as a server checks it.
    let (at, _, ma) = *attrs.iter().find(|a| a.1 == MESSAGE_AUTHENTICATOR).unwrap();
    let mut zeroed = out.clone();
    zeroed[20 + at + 2..20 + at + 18].fill(0);
    assert_eq!(hmac_md5(SECRET, &[&zeroed]).to_vec(), ma.to_vec());
    let empty = AccessRequest {
        eap_message: &[],
        ..req
    };
    assert_eq!(
        encode_access_request(1, &ra(), &empty, &nas, SECRET, &mut out),
        Err(TooLong)
    );
}

#[test]
fn authorize_request_has_no_password_and_signs() {
    let nas = Nas {
        identifier: "gate64",
        address: Some(Ipv4Addr::new(192, 0, 2, 1).into()),
    };
    let mut out = Vec::new();
    let who = ("CN=carol, O=Example", "2001:db8::7");
    encode_authorize_request(7, &ra(), who, &nas, SECRET, &mut out).unwrap();
    assert_eq!((out[0], out[1]), (ACCESS_REQUEST, 7));
    assert_eq!(usize::from(u16::from_be_bytes([out[2], out[3]])), out.len());
    let attrs = attributes(&out[20..]).unwrap();
    let find = |t: u8| attrs.iter().find(|a| a.1 == t).map(|a| a.2.to_vec());
    assert_eq!(find(attr::USER_NAME), Some(b"CN=carol, O=Example".to_vec()));
    assert_eq!(find(attr::SERVICE_TYPE), Some(17u32.to_be_bytes().to_vec()));
    assert_eq!(find(attr::NAS_IDENTIFIER), Some(b"gate64".to_vec()));
    assert_eq!(find(attr::NAS_IP_ADDRESS), Some(vec![192, 0, 2, 1]));
    assert_eq!(find(attr::NAS_PORT_TYPE), Some(5u32.to_be_bytes().to_vec()));
    assert_eq!(
        find(attr::CALLING_STATION_ID),
        Some(b"2001:db8::7".to_vec())
    );
    // No User-Password (2), CHAP-Password (3) or EAP-Message.
    assert!(attrs.iter().all(|a| ![2, 3, EAP_MESSAGE].contains(&a.1)));
    let (at, _, ma) = *attrs.iter().find(|a| a.1 == MESSAGE_AUTHENTICATOR).unwrap();
    let mut zeroed = out.clone();
    zeroed[20 + at + 2..20 + at + 18].fill(0);
    assert_eq!(hmac_md5(SECRET, &[&zeroed]).to_vec(), ma.to_vec());
    // A name one attribute cannot hold is refused, not cut to another account's.
    let long = "x".repeat(254);
    let too_long = encode_authorize_request(1, &ra(), (&long, "::1"), &nas, SECRET, &mut out);
    assert_eq!(too_long, Err(TooLong));
    let empty = encode_authorize_request(1, &ra(), ("", "::1"), &nas, SECRET, &mut out);
    assert_eq!(empty, Err(TooLong));
}

/// A server that signs no reply to a password-less request: its bare Access-Reject is taken
/// (it can only refuse), its Access-Accept is not, nor a Reject with an EAP-Message.
#[test]
fn only_a_bare_reject_may_come_without_a_message_authenticator() {
    let reject = server_reply(ACCESS_REJECT, 5, &[], false);
    assert_eq!(
        parse_access_reply(&reject, 5, &ra(), SECRET),
        Ok(AccessReply::Reject {
            eap_message: Vec::new()
        })
    );
    let accept = server_reply(ACCESS_ACCEPT, 5, &attr(FILTER_ID, b"staff"), false);
    assert_eq!(
        parse_access_reply(&accept, 5, &ra(), SECRET),
        Err(ReplyError::NoMessageAuthenticator)
    );
    let eap_reject = server_reply(ACCESS_REJECT, 5, &[EAP_MESSAGE, 6, 4, 9, 0, 4], false);
    assert_eq!(
        parse_access_reply(&eap_reject, 5, &ra(), SECRET),
        Err(ReplyError::NoMessageAuthenticator)
    );
    // Its Response Authenticator must still verify.
    let mut forged = reject.clone();
    forged[4] ^= 1;
    assert!(parse_access_reply(&forged, 5, &ra(), SECRET).is_err());
}

fn attr(kind: u8, value: &[u8]) -> Vec<u8> {
    let mut out = vec![kind, (value.len() + 2) as u8];
    out.extend_from_slice(value);
    out
}

fn authorization_of(attrs: &[u8]) -> Authorization {
    let pkt = server_reply(ACCESS_ACCEPT, 9, attrs, true);
    match parse_access_reply(&pkt, 9, &ra(), SECRET) {
        Ok(AccessReply::Accept { authorization, .. }) => authorization,
        other => panic!("not an accept: {other:?}"),
    }
}

#[test]
fn accept_carries_its_authorization() {
    let mut attrs = Vec::new();
    attrs.extend(attr(FRAMED_IP_ADDRESS, &[10, 77, 0, 9]));
    let v6: Ipv6Addr = "fd00:c1::77".parse().unwrap();
    attrs.extend(attr(FRAMED_IPV6_ADDRESS, &v6.octets()));
    // fd00:c1:0:8::/61 written with a stray host bit, which is cleared.
    attrs.extend(attr(
        FRAMED_IPV6_PREFIX,
        &[0, 61, 0xfd, 0, 0, 0xc1, 0, 0, 0, 0x0f],
    ));
    attrs.extend(attr(SESSION_TIMEOUT, &8u32.to_be_bytes()));
    attrs.extend(attr(FILTER_ID, b"contractors"));
    attrs.extend(attr(CLASS, b"grp-a"));
    attrs.extend(attr(CLASS, &[0, 0xff]));
    let a = authorization_of(&attrs);
    assert_eq!(a.framed_ip, Some(Ipv4Addr::new(10, 77, 0, 9)));
    assert_eq!(a.framed_ipv6, Some(v6));
    assert_eq!(
        a.framed_ipv6_prefix,
        Some(("fd00:c1:0:8::".parse().unwrap(), 61))
    );
    assert_eq!(a.session_timeout, Some(8));
    assert_eq!(a.filter_id.as_deref(), Some("contractors"));
    assert_eq!(a.class, vec![b"grp-a".to_vec(), vec![0, 0xff]]);
    assert_eq!(a.malformed, 0);
}

#[test]
fn malformed_authorization_values_are_dropped_and_counted() {
    let mut attrs = Vec::new();
    attrs.extend(attr(FRAMED_IP_ADDRESS, &[10, 77, 0]));
    attrs.extend(attr(FRAMED_IPV6_ADDRESS, &[0xfd; 15]));
    attrs.extend(attr(FRAMED_IPV6_PREFIX, &[0, 129, 0xfd]));
    attrs.extend(attr(SESSION_TIMEOUT, &0u32.to_be_bytes()));
    attrs.extend(attr(FILTER_ID, &[0xff, 0xfe]));
    attrs.extend(attr(FILTER_ID, b"bad\nname"));
    for i in 0..(MAX_CLASSES as u8 + 2) {
        attrs.extend(attr(CLASS, &[i]));
    }
    let a = authorization_of(&attrs);
    assert_eq!(a.framed_ip, None);
    assert_eq!(a.framed_ipv6, None);
    assert_eq!(a.framed_ipv6_prefix, None);
    assert_eq!(a.session_timeout, None);
    assert_eq!(a.filter_id, None);
    assert_eq!(a.class.len(), MAX_CLASSES);
    assert_eq!(a.malformed, 6 + 2);
    // "The NAS assigns" is no address; a second Session-Timeout is one too many.
    let mut attrs = attr(FRAMED_IP_ADDRESS, &[255, 255, 255, 254]);
    attrs.extend(attr(SESSION_TIMEOUT, &30u32.to_be_bytes()));
    attrs.extend(attr(SESSION_TIMEOUT, &40u32.to_be_bytes()));
    let a = authorization_of(&attrs);
    assert_eq!(
        (a.framed_ip, a.session_timeout, a.malformed),
        (None, Some(30), 1)
    );
}

#[test]
fn a_challenge_authorizes_nothing() {
    let mut attrs = attr(EAP_MESSAGE, &[1, 2, 0, 4]);
    attrs.extend(attr(FILTER_ID, b"contractors"));
    let pkt = server_reply(ACCESS_CHALLENGE, 9, &attrs, true);
    assert!(matches!(
        parse_access_reply(&pkt, 9, &ra(), SECRET),
        Ok(AccessReply::Challenge { .. })
    ));
}
