use super::*;

/// A Disconnect-Request radclient (FreeRADIUS 3.2) sent with secret `s3cret`: User-Name
/// "CN=laptop", Acct-Session-Id "0000000100000001-intranet", Event-Timestamp 1796083200.
const DISCONNECT: &str = "28c90040f8f42165e4dd8ad443f0d91445fa3ba4010b434e3d6c6170746f702c1b\
                          303030303030303130303030303030312d696e7472616e657437066b0e0e00";
/// A CoA-Request radclient sent with secret `s3cret`: User-Name "CN=laptop",
/// Session-Timeout 5 and a Message-Authenticator.
const COA: &str = "2bd8003761874a1037762b2927e983fb4946c687010b434e3d6c6170746f701b0600\
                   0000055012bcf5390829114c96c7292f43408ea73a";
/// The Disconnect-ACK and Disconnect-NAK (Error-Cause 503) to [`DISCONNECT`], computed with
/// Python's hashlib.
const ACK: &str = "29c90014d00be74f61f991ee9436eab6e87b090e";
const NAK_503: &str = "2ac9001ad24b92453c266166ab0b78d47e6277de6506000001f7";

const SECRET: &[u8] = b"s3cret";
const NOW: u64 = 1_796_083_200;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn client(addr: &str, prefix_len: u8, secret: &[u8]) -> Client {
    Client {
        address: addr.parse().unwrap(),
        prefix_len,
        secret: secret.to_vec(),
    }
}

fn dae() -> Dae {
    Dae::new(vec![client("10.64.0.0", 24, SECRET)], 300)
}

fn src(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn radclient_disconnect_verifies_and_names_the_session() {
    let req = dae()
        .handle(NOW + 10, src("10.64.0.2"), &hex(DISCONNECT))
        .unwrap();
    assert_eq!(req.kind, Kind::Disconnect);
    assert_eq!(req.identifier, 0xc9);
    assert_eq!(req.criteria.user_name.as_deref(), Some("CN=laptop"));
    assert_eq!(
        req.criteria.session_id.as_deref(),
        Some("0000000100000001-intranet")
    );
    assert!(req.unsupported.is_empty());
    assert_eq!(req.invalid, None);
    let mut out = Vec::new();
    encode_response(&req, None, SECRET, &mut out);
    assert_eq!(out, hex(ACK));
    encode_response(
        &req,
        Some(ErrorCause::SessionContextNotFound),
        SECRET,
        &mut out,
    );
    assert_eq!(out, hex(NAK_503));
}

#[test]
fn radclient_coa_with_message_authenticator_verifies() {
    let req = dae().handle(NOW, src("10.64.0.9"), &hex(COA)).unwrap();
    assert_eq!(req.kind, Kind::Coa);
    assert_eq!(req.session_timeout, Some(5));
    assert_eq!(req.criteria.user_name.as_deref(), Some("CN=laptop"));
    assert!(req.unsupported.is_empty());
}

#[test]
fn a_changed_message_authenticator_is_dropped() {
    let mut bytes = hex(COA);
    // Change the Message-Authenticator and sign the request anew: only the HMAC is wrong.
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    resign(&mut bytes, SECRET);
    assert_eq!(
        dae().handle(NOW, src("10.64.0.9"), &bytes),
        Err((Some(Kind::Coa), Dropped::MessageAuthenticator))
    );
}

/// Recomputes the request authenticator of `bytes` (after a test changed it).
fn resign(bytes: &mut [u8], secret: &[u8]) {
    bytes[4..20].fill(0);
    let mut md5 = Md5::new();
    md5.update(&bytes[..]);
    md5.update(secret);
    let a: [u8; 16] = md5.finalize().into();
    bytes[4..20].copy_from_slice(&a);
}

/// A request built here: `attrs` as (type, value), signed with `secret`.
fn build(code: u8, id: u8, attrs: &[(u8, &[u8])], secret: &[u8]) -> Vec<u8> {
    let mut out = vec![code, id, 0, 0];
    out.extend_from_slice(&[0; 16]);
    for (t, v) in attrs {
        out.push(*t);
        out.push(v.len() as u8 + 2);
        out.extend_from_slice(v);
    }
    let len = out.len() as u16;
    out[2..4].copy_from_slice(&len.to_be_bytes());
    resign(&mut out, secret);
    out
}

#[test]
fn wrong_secret_unknown_source_and_replay_are_dropped() {
    let mut d = dae();
    assert_eq!(
        Dae::new(vec![client("10.64.0.0", 24, b"other")], 300).handle(
            NOW,
            src("10.64.0.2"),
            &hex(DISCONNECT)
        ),
        Err((Some(Kind::Disconnect), Dropped::Authenticator))
    );
    assert_eq!(
        d.handle(NOW, src("10.64.1.2"), &hex(DISCONNECT)),
        Err((Some(Kind::Disconnect), Dropped::UnknownClient))
    );
    assert!(d.handle(NOW, src("10.64.0.2"), &hex(DISCONNECT)).is_ok());
    assert_eq!(
        d.handle(NOW + 1, src("10.64.0.2"), &hex(DISCONNECT)),
        Err((Some(Kind::Disconnect), Dropped::Replay))
    );
    // Out of the window the timestamp is stale anyway; the cache forgets it.
    assert_eq!(
        d.handle(NOW + 301, src("10.64.0.2"), &hex(DISCONNECT)),
        Err((Some(Kind::Disconnect), Dropped::Stale))
    );
    assert!(d.seen.is_empty());
}

#[test]
fn a_request_without_timestamp_is_remembered_for_the_window() {
    let mut d = dae();
    let bytes = build(40, 1, &[(attr::USER_NAME, b"alice")], SECRET);
    assert!(d.handle(NOW, src("10.64.0.2"), &bytes).is_ok());
    assert_eq!(
        d.handle(NOW + 300, src("10.64.0.2"), &bytes),
        Err((Some(Kind::Disconnect), Dropped::Replay))
    );
    // Another client address of the prefix sending the same octets is another request.
    assert!(d.handle(NOW + 300, src("10.64.0.3"), &bytes).is_ok());
    assert!(d.handle(NOW + 301, src("10.64.0.2"), &bytes).is_ok());
}

#[test]
fn clients_match_by_prefix_and_mapped_addresses() {
    let c = client("10.64.0.2", 32, SECRET);
    assert!(c.contains(src("10.64.0.2")));
    assert!(c.contains(src("::ffff:10.64.0.2")));
    assert!(!c.contains(src("10.64.0.3")));
    let c = client("fd00:64::", 33, SECRET);
    assert!(c.contains(src("fd00:64:7fff::1")));
    assert!(!c.contains(src("fd00:64:8000::1")));
    assert!(!c.contains(src("10.64.0.2")));
    let any = client("::", 0, SECRET);
    assert!(any.contains(src("2001:db8::1")));
}

#[test]
fn attributes_are_sorted_into_criteria_unsupported_and_invalid() {
    let v6: Ipv6Addr = "fd00:c1::5".parse().unwrap();
    let bytes = build(
        43,
        2,
        &[
            (attr::FRAMED_IPV6_ADDRESS, &v6.octets()),
            (attr::FRAMED_IP_ADDRESS, &[192, 0, 2, 7]),
            (attr::CALLING_STATION_ID, b"2001:db8::1"),
            (attr::ACCT_MULTI_SESSION_ID, b"0000000100000001"),
            (11, b"web-only"),
            (26, &[0, 0, 0, 9, 1, 3, 0]),
            (attr::PROXY_STATE, b"p1"),
        ],
        SECRET,
    );
    let req = verify(&bytes, SECRET, NOW, 300).unwrap();
    assert_eq!(
        req.criteria.framed,
        [IpAddr::V6(v6), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7))]
    );
    assert_eq!(req.criteria.calling_station.as_deref(), Some("2001:db8::1"));
    assert_eq!(
        req.criteria.multi_session_id.as_deref(),
        Some("0000000100000001")
    );
    assert_eq!(req.unsupported, [26]);
    assert_eq!(req.filter_id.as_deref(), Some("web-only"));
    assert_eq!(req.proxy_state, [b"p1".to_vec()]);

    let mut out = Vec::new();
    encode_response(
        &req,
        Some(ErrorCause::UnsupportedAttribute),
        SECRET,
        &mut out,
    );
    assert_eq!(out[0], code::COA_NAK);
    assert_eq!(&out[20..], &[101, 6, 0, 0, 1, 145, 33, 4, b'p', b'1']);

    // Filter-Id names one policy: twice, differently, contradicts; in a Disconnect-Request
    // it is unsupported; alone it is a change a CoA-Request may ask for.
    let bytes = build(
        43,
        7,
        &[(attr::FILTER_ID, b"a"), (attr::FILTER_ID, b"b")],
        SECRET,
    );
    assert_eq!(
        verify(&bytes, SECRET, NOW, 300).unwrap().invalid,
        Some(ErrorCause::InvalidRequest)
    );
    let bytes = build(40, 8, &[(attr::FILTER_ID, b"a")], SECRET);
    assert_eq!(verify(&bytes, SECRET, NOW, 300).unwrap().unsupported, [11]);
    let bytes = build(
        43,
        9,
        &[(attr::USER_NAME, b"u"), (attr::FILTER_ID, b"contractors")],
        SECRET,
    );
    assert_eq!(precheck(&verify(&bytes, SECRET, NOW, 300).unwrap()), None);
    let bytes = build(43, 10, &[(attr::USER_NAME, b"u")], SECRET);
    assert_eq!(
        precheck(&verify(&bytes, SECRET, NOW, 300).unwrap()),
        Some(ErrorCause::MissingAttribute)
    );

    // Session-Timeout is no Disconnect-Request attribute.
    let bytes = build(40, 3, &[(attr::SESSION_TIMEOUT, &[0, 0, 0, 5])], SECRET);
    assert_eq!(verify(&bytes, SECRET, NOW, 300).unwrap().unsupported, [27]);
    // A short address, or a name given twice differently.
    let bytes = build(40, 4, &[(attr::FRAMED_IP_ADDRESS, &[1, 2, 3])], SECRET);
    assert_eq!(
        verify(&bytes, SECRET, NOW, 300).unwrap().invalid,
        Some(ErrorCause::InvalidAttributeValue)
    );
    let bytes = build(
        40,
        5,
        &[(attr::USER_NAME, b"a"), (attr::USER_NAME, b"b")],
        SECRET,
    );
    assert_eq!(
        verify(&bytes, SECRET, NOW, 300).unwrap().invalid,
        Some(ErrorCause::InvalidRequest)
    );
    let bytes = build(40, 6, &[], SECRET);
    assert!(
        verify(&bytes, SECRET, NOW, 300)
            .unwrap()
            .criteria
            .is_empty()
    );
}

#[test]
fn malformed_datagrams_are_dropped() {
    let good = hex(DISCONNECT);
    assert_eq!(verify(&[], SECRET, NOW, 300), Err(Dropped::Malformed));
    assert_eq!(
        verify(&good[..19], SECRET, NOW, 300),
        Err(Dropped::Malformed)
    );
    let mut accounting = good.clone();
    accounting[0] = 4;
    assert_eq!(verify(&accounting, SECRET, NOW, 300), Err(Dropped::Code));
    let mut long = good.clone();
    long[3] += 1;
    assert_eq!(verify(&long, SECRET, NOW, 300), Err(Dropped::Malformed));
    let mut zero_attr = good.clone();
    zero_attr[21] = 0;
    assert_eq!(
        verify(&zero_attr, SECRET, NOW, 300),
        Err(Dropped::Malformed)
    );
    // Padding beyond the Length field is ignored.
    let mut padded = good.clone();
    padded.extend_from_slice(&[0xee; 7]);
    assert!(verify(&padded, SECRET, NOW, 300).is_ok());
    // A short Event-Timestamp or Message-Authenticator.
    let bytes = build(40, 7, &[(attr::EVENT_TIMESTAMP, &[1, 2])], SECRET);
    assert_eq!(verify(&bytes, SECRET, NOW, 300), Err(Dropped::Stale));
    let bytes = build(40, 8, &[(attr::MESSAGE_AUTHENTICATOR, &[0; 15])], SECRET);
    assert_eq!(
        verify(&bytes, SECRET, NOW, 300),
        Err(Dropped::MessageAuthenticator)
    );
}

#[test]
fn every_prefix_of_a_request_and_every_byte_flip_is_handled() {
    let good = hex(COA);
    let mut d = Dae::new(vec![client("::", 0, SECRET)], 300);
    for n in 0..good.len() {
        let _ = d.handle(NOW, src("::1"), &good[..n]);
    }
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut b = good.clone();
            b[i] ^= 1 << bit;
            assert!(d.handle(NOW, src("::1"), &b).is_err(), "byte {i} bit {bit}");
        }
    }
}

#[test]
fn the_cache_is_bounded() {
    let mut d = Dae::new(vec![client("::", 0, SECRET)], 300);
    for i in 0..MAX_REMEMBERED {
        let id = (i % 256) as u8;
        let bytes = build(
            40,
            id,
            &[(attr::USER_NAME, &(i as u32).to_be_bytes())],
            SECRET,
        );
        assert!(d.handle(NOW, src("::1"), &bytes).is_ok());
    }
    let bytes = build(40, 0, &[(attr::USER_NAME, b"one more")], SECRET);
    assert_eq!(
        d.handle(NOW, src("::1"), &bytes),
        Err((Some(Kind::Disconnect), Dropped::Busy))
    );
    assert!(d.handle(NOW + 301, src("::1"), &bytes).is_ok());
    assert_eq!(d.seen.len(), 1);
    assert_eq!(d.seen_set.len(), 1);
}
