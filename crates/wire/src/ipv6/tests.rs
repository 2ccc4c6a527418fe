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

/// A fixed header with Traffic Class 0xe1 and Flow Label 0x23456, assembled by hand from the
/// RFC 8200 §3 layout: 6e 12 34 56 | 00 08 | 11 | 40 | 2001:db8::1 | 2001:db8::2.
const FIXED: [u8; 40] = [
    0x6e, 0x12, 0x34, 0x56, 0x00, 0x08, 0x11, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 1, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
];

fn fixed_repr() -> Repr {
    Repr {
        src: "2001:db8::1".parse().unwrap(),
        dst: "2001:db8::2".parse().unwrap(),
        next_header: NH_UDP,
        payload_len: 8,
        hop_limit: 64,
        traffic_class: 0xe1,
        flow_label: 0x23456,
    }
}

#[test]
fn fixed_header_bytes_to_repr_and_back() {
    let mut buf = FIXED.to_vec();
    buf.extend_from_slice(&[0; 8]);
    let p = Packet::new_checked(&buf).unwrap();
    assert_eq!(Repr::parse(&p), fixed_repr());
    let mut out = [0u8; 40];
    fixed_repr().emit(&mut out).unwrap();
    assert_eq!(out, FIXED);
    let e = etherparse::Ipv6HeaderSlice::from_slice(&buf).unwrap();
    assert_eq!(e.traffic_class(), p.traffic_class());
    assert_eq!(e.flow_label().value(), p.flow_label());
    let wide = Repr {
        flow_label: 0x10_0000,
        ..fixed_repr()
    };
    assert_eq!(wide.emit(&mut out), Err(Error::Malformed));
}

/// Hop-by-Hop (8 bytes, PadN), Routing (type 0 layout, Segments Left 0, 24 bytes),
/// Destination Options (8), Fragment (offset 0, M set, ident 0xdeadbeef), then 8 bytes of UDP.
fn chained() -> Vec<u8> {
    let mut b = FIXED.to_vec();
    b[6] = NH_HOP_BY_HOP;
    b.extend_from_slice(&[NH_ROUTING, 0, 1, 4, 0, 0, 0, 0]);
    b.extend_from_slice(&[NH_DEST_OPTS, 2, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(&[0; 16]);
    b.extend_from_slice(&[NH_FRAGMENT, 0, 1, 4, 0, 0, 0, 0]);
    b.extend_from_slice(&[NH_UDP, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]);
    b.extend_from_slice(&[0x9c, 0x40, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00]);
    let plen = (b.len() - 40) as u16;
    b[4..6].copy_from_slice(&plen.to_be_bytes());
    b
}

#[test]
fn rfc8200_4_walker_reaches_the_upper_layer() {
    let b = chained();
    let p = Packet::new_checked(&b).unwrap();
    let kinds: Vec<(u8, usize, usize)> = p
        .ext_headers()
        .map(|h| h.map(|h| (h.header_type, h.offset, h.len())).unwrap())
        .collect();
    assert_eq!(
        kinds,
        vec![
            (NH_HOP_BY_HOP, 40, 8),
            (NH_ROUTING, 48, 24),
            (NH_DEST_OPTS, 72, 8),
            (NH_FRAGMENT, 80, 8)
        ]
    );
    let chain = p.walk().unwrap();
    let frag = FragmentRepr {
        next_header: NH_UDP,
        offset: 0,
        more: true,
        ident: 0xdead_beef,
    };
    assert_eq!(
        chain,
        Chain {
            upper_offset: 88,
            protocol: NH_UDP,
            fragment: Some(frag),
        }
    );
    let routing = p.ext_headers().nth(1).unwrap().unwrap();
    assert_eq!(routing.segments_left(), Some(0));
    let e = etherparse::Ipv6HeaderSlice::from_slice(&b).unwrap();
    let (_, nh, rest) =
        etherparse::Ipv6ExtensionsSlice::from_slice(e.next_header(), &b[40..]).unwrap();
    assert_eq!(nh.0, chain.protocol);
    assert_eq!(rest.len(), b.len() - chain.upper_offset);
}

#[test]
fn bad_extension_chains_are_errors() {
    let b = chained();
    // Destination Options announcing 16 bytes more than the packet holds.
    let mut long = b.clone();
    long[73] = 9;
    let p = Packet::new_checked(&long).unwrap();
    assert_eq!(p.walk(), Err(Error::Truncated));
    // The packet ends inside the Fragment header.
    let mut cut = b[..84].to_vec();
    cut[4..6].copy_from_slice(&44u16.to_be_bytes());
    let p = Packet::new_checked(&cut).unwrap();
    assert_eq!(p.walk(), Err(Error::Truncated));
    // A chain that ends at the fixed header: the upper layer starts at 40.
    let p = Packet::new_checked(&FIXED[..]).map(|_| ());
    assert_eq!(p, Err(Error::Truncated));
    let mut plain = FIXED.to_vec();
    plain.extend_from_slice(&[0; 8]);
    let p = Packet::new_checked(&plain).unwrap();
    assert_eq!(p.walk().unwrap().upper_offset, HEADER_LEN);
    // The walk stops after the Fragment header: a second one is the caller's to refuse.
    let mut two = b.clone();
    two[80] = NH_FRAGMENT;
    let p = Packet::new_checked(&two).unwrap();
    assert_eq!(p.walk().unwrap().protocol, NH_FRAGMENT);
    // A quoted packet may end early; its walk then stops with Truncated.
    let p = Packet::new_checked_quoted(&b[..60]).unwrap();
    assert_eq!(p.payload().len(), 20);
    assert_eq!(p.walk(), Err(Error::Truncated));
}

#[test]
fn fragment_header_bytes_both_ways() {
    // RFC 8200 §4.5 layout: next header 17, offset 167 (0x539 >> 3) with M set, ident.
    let bytes = [17, 0, 0x05, 0x39, 0xde, 0xad, 0xbe, 0xef];
    let f = FragmentRepr::parse(&bytes).unwrap();
    assert_eq!(
        f,
        FragmentRepr {
            next_header: 17,
            offset: 167,
            more: true,
            ident: 0xdead_beef,
        }
    );
    let mut out = [0xffu8; 8];
    f.emit(&mut out).unwrap();
    assert_eq!(out, [17, 0, 0x05, 0x38 | 1, 0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(FragmentRepr::parse(&bytes[..7]), Err(Error::Truncated));
    let big = FragmentRepr {
        offset: 0x2000,
        ..f
    };
    assert_eq!(big.emit(&mut out), Err(Error::Malformed));
}

mod repr_props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn repr_parse_emit_roundtrip(
            src in any::<u128>(),
            dst in any::<u128>(),
            next_header in 1u8..=255,
            payload_len in 0u16..300,
            hop_limit in any::<u8>(),
            traffic_class in any::<u8>(),
            flow_label in 0u32..=0xf_ffff,
        ) {
            let r = Repr {
                src: Ipv6Addr::from(src),
                dst: Ipv6Addr::from(dst),
                next_header,
                payload_len,
                hop_limit,
                traffic_class,
                flow_label,
            };
            let mut b = vec![0u8; HEADER_LEN + usize::from(payload_len)];
            r.emit(&mut b).unwrap();
            let p = Packet::new_checked(&b).unwrap();
            prop_assert_eq!(Repr::parse(&p), r);
        }

        #[test]
        fn fragment_parse_emit_roundtrip(
            next_header in any::<u8>(),
            offset in 0u16..=0x1fff,
            more in any::<bool>(),
            ident in any::<u32>(),
        ) {
            let f = FragmentRepr { next_header, offset, more, ident };
            let mut b = [0u8; FRAG_HEADER_LEN];
            f.emit(&mut b).unwrap();
            prop_assert_eq!(FragmentRepr::parse(&b), Ok(f));
        }

        /// The walker never panics and agrees with etherparse on where the upper layer
        /// starts when neither refuses the chain and no Fragment header ends it early.
        #[test]
        fn walker_agrees_with_etherparse(
            nh in prop::sample::select(vec![0u8, 43, 44, 60, 6, 17, 58, 59]),
            body in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut b = FIXED.to_vec();
            b[6] = nh;
            b[4..6].copy_from_slice(&(body.len() as u16).to_be_bytes());
            b.extend_from_slice(&body);
            let Ok(p) = Packet::new_checked(&b) else { return Ok(()) };
            let ours = p.walk();
            let theirs = etherparse::Ipv6ExtensionsSlice::from_slice(
                etherparse::IpNumber(nh),
                &b[HEADER_LEN..],
            );
            if let (Ok(c), Ok((_, next, rest))) = (ours, theirs)
                && c.fragment.is_none()
                && !matches!(next.0, 51 | 135 | 139 | 140 | 253 | 254)
            {
                prop_assert_eq!(c.protocol, next.0);
                prop_assert_eq!(b.len() - c.upper_offset, rest.len());
            }
        }

        /// The walk and the iterator agree: same end, same protocol, same Fragment header.
        #[test]
        fn walk_matches_the_iterator(
            nh in prop::sample::select(vec![0u8, 43, 44, 60, 17]),
            body in proptest::collection::vec(
                prop_oneof![Just(0u8), Just(43), Just(44), Just(60), Just(17), 0u8..4, any::<u8>()],
                0..120,
            ),
        ) {
            let mut b = FIXED.to_vec();
            b[6] = nh;
            b[4..6].copy_from_slice(&(body.len() as u16).to_be_bytes());
            b.extend_from_slice(&body);
            // A Hop-by-Hop header with Payload Length 0 announces a jumbogram: refused.
            let Ok(p) = Packet::new_checked(&b) else { return Ok(()) };
            let mut folded = Ok(Chain { upper_offset: HEADER_LEN, protocol: nh, fragment: None });
            for h in p.ext_headers() {
                match h {
                    Ok(h) => {
                        if let Ok(c) = &mut folded {
                            c.upper_offset = h.offset + h.len();
                            c.protocol = h.next_header();
                            c.fragment = c.fragment.or(h.fragment());
                        }
                    }
                    Err(e) => folded = Err(e),
                }
            }
            prop_assert_eq!(p.walk(), folded);
        }
    }
}
