use super::*;
use std::net::Ipv4Addr;

fn request() -> Request {
    Request {
        status: StatusType::Stop,
        session_id: "6753a1f000000001-i".into(),
        multi_session_id: "6753a1f000000001".into(),
        user_name: "CN=laptop-17".into(),
        calling_station: "2001:0:4136:e378:8000:63bf:3fff:1".into(),
        framed: vec!["fd00:c1::5".parse().unwrap()],
        class: vec![b"grp-a".to_vec(), vec![0, 1]],
        session_time: Some(62),
        counts: Some(Counts {
            bytes_in: (5 << 32) + 7,
            bytes_out: 20_412,
            packets_in: 130,
            packets_out: u64::MAX,
        }),
        terminate: Some(TerminateCause::UserRequest),
        event_time: 1_796_083_200,
    }
}

fn nas() -> Nas<'static> {
    Nas {
        identifier: "gate64",
        address: Some(IpAddr::V4(Ipv4Addr::new(10, 64, 0, 1))),
    }
}

/// The attributes of an encoded packet, in order.
fn attributes(packet: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = HEADER_LEN;
    while at < packet.len() {
        let len = usize::from(packet[at + 1]);
        out.push((packet[at], packet[at + 2..at + len].to_vec()));
        at += len;
    }
    out
}

fn value(attrs: &[(u8, Vec<u8>)], kind: u8) -> Option<&[u8]> {
    attrs.iter().find(|(k, _)| *k == kind).map(|(_, v)| &v[..])
}

fn u32_of(attrs: &[(u8, Vec<u8>)], kind: u8) -> Option<u32> {
    value(attrs, kind).and_then(|v| v.try_into().ok().map(u32::from_be_bytes))
}

#[test]
fn a_request_carries_its_attributes_with_gigawords() {
    let mut packet = Vec::new();
    encode_request(7, &request(), &nas(), 3, b"s3cret", &mut packet).unwrap();
    assert_eq!(packet[0], ACCOUNTING_REQUEST);
    assert_eq!(packet[1], 7);
    assert_eq!(
        usize::from(u16::from_be_bytes([packet[2], packet[3]])),
        packet.len()
    );
    let a = attributes(&packet);
    assert_eq!(u32_of(&a, attr::ACCT_STATUS_TYPE), Some(2));
    assert_eq!(value(&a, attr::USER_NAME), Some(&b"CN=laptop-17"[..]));
    assert_eq!(
        value(&a, attr::ACCT_SESSION_ID),
        Some(&b"6753a1f000000001-i"[..])
    );
    assert_eq!(
        value(&a, attr::ACCT_MULTI_SESSION_ID),
        Some(&b"6753a1f000000001"[..])
    );
    assert_eq!(value(&a, attr::NAS_IP_ADDRESS), Some(&[10, 64, 0, 1][..]));
    assert_eq!(u32_of(&a, attr::ACCT_INPUT_OCTETS), Some(7));
    assert_eq!(u32_of(&a, attr::ACCT_INPUT_GIGAWORDS), Some(5));
    assert_eq!(u32_of(&a, attr::ACCT_OUTPUT_OCTETS), Some(20_412));
    assert_eq!(u32_of(&a, attr::ACCT_OUTPUT_GIGAWORDS), Some(0));
    assert_eq!(
        u32_of(&a, attr::ACCT_OUTPUT_PACKETS),
        Some(u32::MAX),
        "saturated"
    );
    assert_eq!(u32_of(&a, attr::ACCT_SESSION_TIME), Some(62));
    assert_eq!(u32_of(&a, attr::ACCT_DELAY_TIME), Some(3));
    assert_eq!(u32_of(&a, attr::ACCT_TERMINATE_CAUSE), Some(1));
    assert_eq!(
        value(&a, attr::FRAMED_IPV6_ADDRESS),
        Some(&"fd00:c1::5".parse::<Ipv6Addr>().unwrap().octets()[..])
    );
    let classes: Vec<&[u8]> = a
        .iter()
        .filter(|(k, _)| *k == attr::CLASS)
        .map(|(_, v)| v.as_slice())
        .collect();
    assert_eq!(
        classes,
        [&b"grp-a"[..], &[0, 1][..]],
        "every Class, in order"
    );
}

/// The request authenticator against MD5 computed elsewhere (Python's hashlib over the same
/// octets): RFC 2866 §3's construction, not only this module's own idea of it.
#[test]
fn the_request_authenticator_is_rfc_2866s() {
    let req = Request {
        status: StatusType::Start,
        session_id: "a".into(),
        multi_session_id: String::new(),
        user_name: "u".into(),
        calling_station: String::new(),
        framed: Vec::new(),
        class: Vec::new(),
        session_time: None,
        counts: None,
        terminate: None,
        event_time: 1,
    };
    let nas = Nas {
        identifier: "n",
        address: None,
    };
    let mut packet = Vec::new();
    let auth = encode_request(1, &req, &nas, 0, b"secret", &mut packet).unwrap();
    assert_eq!(
        hex(&packet[..4]),
        "04010041",
        "code, identifier, length of this request"
    );
    assert_eq!(hex(&auth), "b71de0efac97d416e42ccbe6bae9cba0");
    assert_eq!(&packet[4..20], &auth);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn response(id: u8, request_auth: &[u8; 16], attrs: &[u8], secret: &[u8]) -> Vec<u8> {
    let len = (HEADER_LEN + attrs.len()) as u16;
    let mut out = vec![ACCOUNTING_RESPONSE, id];
    out.extend_from_slice(&len.to_be_bytes());
    let mut md5 = Md5::new();
    md5.update(&out);
    md5.update(request_auth);
    md5.update(attrs);
    md5.update(secret);
    let auth: [u8; 16] = md5.finalize().into();
    out.extend_from_slice(&auth);
    out.extend_from_slice(attrs);
    out
}

#[test]
fn a_response_verifies_only_under_the_secret_and_the_request() {
    let mut packet = Vec::new();
    let auth = encode_request(9, &request(), &nas(), 0, b"s3cret", &mut packet).unwrap();
    let ok = response(9, &auth, &[], b"s3cret");
    assert_eq!(response_identifier(&ok), Ok(9));
    assert_eq!(check_response(&ok, &auth, b"s3cret"), Ok(()));
    // Padding past the Length field is ignored.
    let mut padded = ok.clone();
    padded.extend_from_slice(&[0; 5]);
    assert_eq!(check_response(&padded, &auth, b"s3cret"), Ok(()));
    assert_eq!(
        check_response(&ok, &auth, b"other"),
        Err(ResponseError::Authenticator)
    );
    assert_eq!(
        check_response(&ok, &[0; 16], b"s3cret"),
        Err(ResponseError::Authenticator)
    );
    // A change in any octet of the response authenticator, first or last, is refused alike.
    for at in 4..20 {
        let mut forged = ok.clone();
        forged[at] ^= 0x01;
        assert_eq!(
            check_response(&forged, &auth, b"s3cret"),
            Err(ResponseError::Authenticator),
            "octet {at}"
        );
    }
    let with_attr = response(9, &auth, &[18, 4, b'o', b'k'], b"s3cret");
    assert_eq!(check_response(&with_attr, &auth, b"s3cret"), Ok(()));
}

#[test]
fn malformed_responses_are_refused() {
    let auth = [0u8; 16];
    let good = response(1, &auth, &[18, 3, b'x'], b"k");
    let mut cases: Vec<(Vec<u8>, ResponseError)> = vec![
        (Vec::new(), ResponseError::Malformed),
        (good[..19].to_vec(), ResponseError::Malformed),
        (response(1, &auth, &[18, 1], b"k"), ResponseError::Malformed),
        (response(1, &auth, &[18, 0], b"k"), ResponseError::Malformed),
        (
            response(1, &auth, &[18, 9, 1], b"k"),
            ResponseError::Malformed,
        ),
        (response(1, &auth, &[18], b"k"), ResponseError::Malformed),
    ];
    let mut wrong_code = good.clone();
    wrong_code[0] = 2;
    cases.push((wrong_code, ResponseError::Code(2)));
    let mut long = good.clone();
    long[2..4].copy_from_slice(&200u16.to_be_bytes());
    cases.push((long, ResponseError::Malformed));
    let mut short = good.clone();
    short[2..4].copy_from_slice(&19u16.to_be_bytes());
    cases.push((short, ResponseError::Malformed));
    for (datagram, want) in cases {
        assert_eq!(
            check_response(&datagram, &auth, b"k"),
            Err(want),
            "{datagram:?}"
        );
    }
}

#[test]
fn long_text_is_cut_at_a_character_boundary() {
    let mut req = request();
    req.user_name = "é".repeat(200);
    let mut packet = Vec::new();
    encode_request(1, &req, &nas(), 0, b"k", &mut packet).unwrap();
    let a = attributes(&packet);
    let name = value(&a, attr::USER_NAME).unwrap();
    assert_eq!(name.len(), 252);
    assert!(std::str::from_utf8(name).is_ok());
}

#[test]
fn reasons_map_to_terminate_causes() {
    for (reason, cause) in [
        ("closed", TerminateCause::UserRequest),
        ("admin", TerminateCause::AdminReset),
        ("revoked", TerminateCause::AdminReset),
        ("expired", TerminateCause::SessionTimeout),
        ("reauth", TerminateCause::SessionTimeout),
        ("radius", TerminateCause::AdminReset),
        ("session_timeout", TerminateCause::SessionTimeout),
        ("replaced", TerminateCause::NasRequest),
        ("shutdown", TerminateCause::NasReboot),
    ] {
        assert_eq!(TerminateCause::for_reason(reason), cause, "{reason}");
    }
}
