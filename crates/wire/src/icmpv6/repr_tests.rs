use super::*;
use proptest::prelude::*;

/// ICMPv6 headers assembled from the RFC 4443 §3–4 layouts, checksum zero, each with the
/// Repr it stands for.
fn vectors() -> [([u8; 8], Repr); 5] {
    [
        (
            [1, 3, 0, 0, 0, 0, 0, 0],
            Repr::Error(ErrorRepr::DstUnreachable { code: 3 }),
        ),
        (
            [2, 0, 0, 0, 0, 0, 0x05, 0x00],
            Repr::Error(ErrorRepr::PacketTooBig { mtu: 1280 }),
        ),
        (
            [3, 1, 0, 0, 0, 0, 0, 0],
            Repr::Error(ErrorRepr::TimeExceeded { code: 1 }),
        ),
        (
            [4, 0, 0, 0, 0, 0, 0, 43],
            Repr::Error(ErrorRepr::ParamProblem {
                code: 0,
                pointer: 43,
            }),
        ),
        (
            [129, 0, 0, 0, 0xab, 0xcd, 0x00, 0x02],
            Repr::EchoReply {
                ident: 0xabcd,
                seq_no: 2,
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
fn malformed_messages_are_errors() {
    assert_eq!(
        Packet::new_checked(&[1u8; 7][..]).unwrap_err(),
        Error::Truncated
    );
    let rs = [TYPE_ROUTER_SOLICITATION, 0, 0, 0, 0, 0, 0, 0];
    let p = Packet::new_checked(&rs[..]).unwrap();
    assert_eq!(Repr::parse(&p), Err(Error::Unsupported));
    let echo_code = [128u8, 9, 0, 0, 0, 0, 0, 0];
    let p = Packet::new_checked(&echo_code[..]).unwrap();
    assert_eq!(Repr::parse(&p), Err(Error::Malformed));
    // RFC 4443 §3.2: a receiver ignores the Packet Too Big code.
    let ptb = [2u8, 7, 0, 0, 0, 0, 0x05, 0xdc];
    let p = Packet::new_checked(&ptb[..]).unwrap();
    assert_eq!(
        ErrorRepr::parse(&p),
        Ok(ErrorRepr::PacketTooBig { mtu: 1500 })
    );
    assert!(is_error(127) && !is_error(128));
}

fn error_repr() -> impl Strategy<Value = ErrorRepr> {
    prop_oneof![
        any::<u8>().prop_map(|code| ErrorRepr::DstUnreachable { code }),
        any::<u32>().prop_map(|mtu| ErrorRepr::PacketTooBig { mtu }),
        any::<u8>().prop_map(|code| ErrorRepr::TimeExceeded { code }),
        any::<(u8, u32)>().prop_map(|(code, pointer)| ErrorRepr::ParamProblem { code, pointer }),
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
}
