use super::*;

fn bubble() -> [u8; 40] {
    let mut b = [0u8; 40];
    emit_header(
        &mut b,
        0,
        NH_NONE,
        64,
        &"fe80::1".parse().unwrap(),
        &"2001::1".parse().unwrap(),
    )
    .unwrap();
    b
}

#[test]
fn parses_bubble_and_keeps_trailer_out() {
    let mut buf = bubble().to_vec();
    buf.extend_from_slice(&[1, 2, 3]);
    let p = Packet::new_checked(&buf).unwrap();
    assert!(p.is_bubble());
    assert_eq!(p.total_len(), 40);
    assert_eq!(p.src(), "fe80::1".parse::<Ipv6Addr>().unwrap());
    assert_eq!(p.dst(), "2001::1".parse::<Ipv6Addr>().unwrap());
}

#[test]
fn rejects_short_wrong_version_and_lying_length() {
    let b = bubble();
    assert_eq!(Packet::new_checked(&b[..39]).unwrap_err(), Error::Truncated);
    let mut v4 = b;
    v4[0] = 0x45;
    assert_eq!(Packet::new_checked(&v4).unwrap_err(), Error::Malformed);
    let mut long = b;
    long[5] = 8;
    assert_eq!(Packet::new_checked(&long).unwrap_err(), Error::Truncated);
    let mut jumbo = b;
    jumbo[6] = 0;
    assert_eq!(Packet::new_checked(&jumbo).unwrap_err(), Error::Unsupported);
}

#[test]
fn forwardable_classes() {
    for a in ["::", "::1", "fe80::1", "ff02::2", "::ffff:1.2.3.4"] {
        assert!(!is_forwardable_unicast(&a.parse().unwrap()), "{a}");
    }
    assert!(is_forwardable_unicast(&"2001:db8::1".parse().unwrap()));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn new_checked_never_panics(
            buf in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..2000),
                (any::<[u8; 40]>(), proptest::collection::vec(any::<u8>(), 0..300))
                    .prop_map(|(mut h, t)| { h[0] = 0x60 | (h[0] & 0xf); [&h[..], &t].concat() }),
            ]
        ) {
            if let Ok(p) = Packet::new_checked(&buf) {
                prop_assert_eq!(p.total_len(), HEADER_LEN + usize::from(p.payload_len()));
                prop_assert!(p.total_len() <= buf.len());
                prop_assert_eq!(p.payload().len(), usize::from(p.payload_len()));
                let _ = (p.src(), p.dst(), p.next_header(), p.hop_limit(), p.is_bubble());
            }
            let _ = peek_dst(&buf);
        }

        #[test]
        fn header_emit_parse_roundtrip(
            plen in 0u16..512,
            nh in 1u8..=255,
            hop in any::<u8>(),
            src in any::<u128>(),
            dst in any::<u128>(),
        ) {
            let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
            let mut b = vec![0u8; HEADER_LEN + usize::from(plen)];
            emit_header(&mut b, plen, nh, hop, &src, &dst).unwrap();
            let p = Packet::new_checked(&b).unwrap();
            prop_assert_eq!(
                (p.payload_len(), p.next_header(), p.hop_limit(), p.src(), p.dst()),
                (plen, nh, hop, src, dst)
            );
        }
    }
}
