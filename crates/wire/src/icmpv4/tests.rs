use super::*;
use proptest::prelude::*;

/// ICMPv4 headers assembled from the RFC 792 layouts (and RFC 1191 §4 for the MTU), checksum
/// zero, each with the Repr it stands for.
fn vectors() -> [([u8; 8], Repr); 5] {
    [
        (
            [3, 4, 0, 0, 0, 0, 0x05, 0xdc],
            Repr::Error(ErrorRepr::FragNeeded { mtu: 1500 }),
        ),
        (
            [3, 13, 0, 0, 0, 0, 0, 0],
            Repr::Error(ErrorRepr::DstUnreachable { code: 13 }),
        ),
        (
            [11, 0, 0, 0, 0, 0, 0, 0],
            Repr::Error(ErrorRepr::TimeExceeded { code: 0 }),
        ),
        (
            [12, 0, 0, 0, 9, 0, 0, 0],
            Repr::Error(ErrorRepr::ParamProblem {
                code: 0,
                pointer: 9,
            }),
        ),
        (
            [8, 0, 0, 0, 0x12, 0x34, 0x00, 0x07],
            Repr::EchoRequest {
                ident: 0x1234,
                seq_no: 7,
            },
        ),
    ]
}

#[test]
fn bytes_to_repr_and_back() {
    for (bytes, repr) in vectors() {
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(repr), "{bytes:?}");
        let mut out = [0xffu8; 8];
        repr.emit(&mut out).unwrap();
        assert_eq!(out, bytes);
    }
}

#[test]
fn checksum_fills_and_verifies() {
    // RFC 792 echo with data; the checksum covers the whole message, no pseudo-header.
    let mut m = [8, 0, 0, 0, 0x12, 0x34, 0, 1, b'p', b'i', b'n', b'g'];
    let mut p = Packet::new_checked(&mut m[..]).unwrap();
    p.fill_checksum(0);
    assert!(p.verify_checksum(0));
    let e = etherparse::Icmpv4Slice::from_slice(&m).unwrap();
    assert_eq!(e.checksum(), u16::from_be_bytes([m[2], m[3]]));
}

#[test]
fn malformed_messages_are_errors() {
    assert_eq!(
        Packet::new_checked(&[3u8, 4, 0][..]).unwrap_err(),
        Error::Truncated
    );
    let echo_code = [8u8, 1, 0, 0, 0, 0, 0, 0];
    let p = Packet::new_checked(&echo_code[..]).unwrap();
    assert_eq!(Repr::parse(&p), Err(Error::Malformed));
    let quench = [4u8, 0, 0, 0, 0, 0, 0, 0];
    let p = Packet::new_checked(&quench[..]).unwrap();
    assert_eq!(Repr::parse(&p), Err(Error::Unsupported));
    assert!(is_error(4) && is_error(5) && !is_error(8) && !is_error(0));
    assert_eq!(
        ErrorRepr::TimeExceeded { code: 0 }.emit(&mut [0u8; 7]),
        Err(Error::Truncated)
    );
}

fn error_repr() -> impl Strategy<Value = ErrorRepr> {
    prop_oneof![
        any::<u8>()
            .prop_filter("code 4 is FragNeeded", |c| *c != CODE_FRAG_NEEDED)
            .prop_map(|code| ErrorRepr::DstUnreachable { code }),
        any::<u16>().prop_map(|mtu| ErrorRepr::FragNeeded { mtu }),
        any::<u8>().prop_map(|code| ErrorRepr::TimeExceeded { code }),
        any::<(u8, u8)>().prop_map(|(code, pointer)| ErrorRepr::ParamProblem { code, pointer }),
    ]
}

proptest! {
    #[test]
    fn parse_emit_roundtrip(
        r in prop_oneof![
            error_repr().prop_map(Repr::Error),
            any::<(u16, u16)>().prop_map(|(ident, seq_no)| Repr::EchoRequest { ident, seq_no }),
            any::<(u16, u16)>().prop_map(|(ident, seq_no)| Repr::EchoReply { ident, seq_no }),
        ],
    ) {
        let mut b = [0u8; 8];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()), Ok(r));
    }

    #[test]
    fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..20)) {
        if let Ok(p) = Packet::new_checked(&buf[..]) {
            let _ = (Repr::parse(&p), p.data(), p.verify_checksum(0));
        }
    }
}
