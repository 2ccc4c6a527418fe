use super::*;

#[test]
fn rfc4380_5_2_4_non_global_list() {
    for a in [
        "0.1.2.3",
        "10.0.0.1",
        "127.0.0.1",
        "169.254.1.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "192.88.99.1",
        "224.0.0.253",
        "240.0.0.1",
        "255.255.255.255",
    ] {
        assert!(
            !is_teredo_global(a.parse().unwrap()),
            "{a} must not be global"
        );
    }
    for a in [
        "192.0.2.1",
        "198.51.100.10",
        "100.64.0.1",
        "172.32.0.1",
        "8.8.8.8",
    ] {
        assert!(is_teredo_global(a.parse().unwrap()), "{a} must be global");
    }
}

/// The worked example of Wikipedia's "Internet checksum" / IPv4 header article (a UDP packet
/// 192.168.0.1 → 192.168.0.199, header checksum 0xb861), checked against etherparse too.
const WIKIPEDIA_HEADER: [u8; 20] = [
    0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01,
    0xc0, 0xa8, 0x00, 0xc7,
];

fn wikipedia_packet() -> Vec<u8> {
    let mut p = WIKIPEDIA_HEADER.to_vec();
    p.resize(0x73, 0xab);
    p
}

fn wikipedia_repr() -> Repr {
    Repr {
        src: Ipv4Addr::new(192, 168, 0, 1),
        dst: Ipv4Addr::new(192, 168, 0, 199),
        protocol: PROTO_UDP,
        payload_len: 0x73 - 20,
        ttl: 64,
        tos: 0,
        ident: 0,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    }
}

#[test]
fn bytes_to_repr_and_back() {
    let buf = wikipedia_packet();
    let p = Packet::new_checked(&buf[..]).unwrap();
    assert!(p.verify_checksum());
    assert_eq!(p.checksum(), 0xb861);
    assert_eq!(Repr::parse(&p), Ok(wikipedia_repr()));
    assert_eq!(p.payload().len(), 0x73 - 20);
    let mut out = [0u8; 20];
    wikipedia_repr().emit(&mut out).unwrap();
    assert_eq!(out, WIKIPEDIA_HEADER);
    let e = etherparse::Ipv4HeaderSlice::from_slice(&buf).unwrap();
    assert_eq!(
        (
            e.source_addr(),
            e.destination_addr(),
            e.total_len(),
            e.ttl()
        ),
        (p.src(), p.dst(), p.total_len(), p.ttl())
    );
}

#[test]
fn malformed_headers_are_errors() {
    let buf = wikipedia_packet();
    assert_eq!(
        Packet::new_checked(&buf[..19]).unwrap_err(),
        Error::Truncated
    );
    // Total Length past the buffer: truncated, but fine for a quoted packet.
    assert_eq!(
        Packet::new_checked(&buf[..60]).unwrap_err(),
        Error::Truncated
    );
    let q = Packet::new_checked_quoted(&buf[..60]).unwrap();
    assert_eq!(q.payload().len(), 40);
    let mut v6 = buf.clone();
    v6[0] = 0x65;
    assert_eq!(Packet::new_checked(&v6[..]).unwrap_err(), Error::Malformed);
    let mut short_ihl = buf.clone();
    short_ihl[0] = 0x44;
    assert_eq!(
        Packet::new_checked(&short_ihl[..]).unwrap_err(),
        Error::Malformed
    );
    let mut total_below_ihl = buf.clone();
    total_below_ihl[2..4].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(
        Packet::new_checked(&total_below_ihl[..]).unwrap_err(),
        Error::Malformed
    );
    // IHL 15 (60 bytes) over a 20-byte buffer.
    let mut long_ihl = WIKIPEDIA_HEADER;
    long_ihl[0] = 0x4f;
    assert_eq!(
        Packet::new_checked_quoted(&long_ihl[..]).unwrap_err(),
        Error::Truncated
    );
    let mut bad_sum = buf.clone();
    bad_sum[11] ^= 1;
    let p = Packet::new_checked(&bad_sum[..]).unwrap();
    assert_eq!(Repr::parse(&p), Err(Error::Malformed));
    let big = Repr {
        payload_len: u16::MAX,
        ..wikipedia_repr()
    };
    assert_eq!(big.emit(&mut [0u8; 20]), Err(Error::Malformed));
    assert_eq!(wikipedia_repr().emit(&mut [0u8; 19]), Err(Error::Truncated));
}

#[test]
fn rfc791_options_walk() {
    // NOP, LSRR with 2 addresses and its pointer at the first (4), Record Route expired, EOL.
    let opts = [
        1, 0x83, 11, 4, 192, 0, 2, 1, 192, 0, 2, 2, 7, 7, 8, 192, 0, 2, 9, 0,
    ];
    let got: Vec<(u8, usize, bool)> = options(&opts)
        .map(|o| o.map(|o| (o.kind, o.bytes.len(), o.is_unexpired_source_route())))
        .collect::<Result<_>>()
        .unwrap();
    assert_eq!(got, vec![(1, 1, false), (0x83, 11, true), (7, 7, false)]);
    let expired = [0x89, 7, 8, 192, 0, 2, 1];
    let o = options(&expired).next().unwrap().unwrap();
    assert!(!o.is_unexpired_source_route());
    for bad in [&[0x83][..], &[0x83, 1, 0, 0], &[0x83, 9, 4, 0]] {
        let mut it = options(bad);
        assert_eq!(it.next(), Some(Err(Error::Malformed)), "{bad:?}");
        assert_eq!(it.next(), None);
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn repr() -> impl Strategy<Value = Repr> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<u8>(),
            0u16..=65515,
            any::<(u8, u8, u16)>(),
            any::<(bool, bool)>(),
            0u16..=0x1fff,
        )
            .prop_map(
                |(s, d, protocol, payload_len, (ttl, tos, ident), (df, mf), off)| Repr {
                    src: Ipv4Addr::from(s),
                    dst: Ipv4Addr::from(d),
                    protocol,
                    payload_len,
                    ttl,
                    tos,
                    ident,
                    dont_frag: df,
                    more_frags: mf,
                    frag_offset: off,
                },
            )
    }

    proptest! {
        #[test]
        fn parse_emit_roundtrip(r in repr()) {
            let mut b = vec![0u8; 20 + usize::from(r.payload_len)];
            r.emit(&mut b).unwrap();
            let p = Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p), Ok(r));
            let e = etherparse::Ipv4HeaderSlice::from_slice(&b).unwrap();
            prop_assert_eq!(e.header_checksum(), p.checksum());
        }

        /// The view accepts exactly what etherparse's header slice accepts, plus the Total
        /// Length checks etherparse leaves to its packet slicer.
        #[test]
        fn view_agrees_with_etherparse(buf in proptest::collection::vec(any::<u8>(), 0..120)) {
            let ours = Packet::new_checked_quoted(&buf[..]);
            let theirs = etherparse::Ipv4HeaderSlice::from_slice(&buf);
            match (&ours, &theirs) {
                (Ok(p), Ok(e)) => {
                    prop_assert_eq!(p.header(), e.slice());
                    prop_assert_eq!((p.src(), p.dst()), (e.source_addr(), e.destination_addr()));
                    prop_assert_eq!(p.frag_offset(), e.fragments_offset().value());
                }
                // Total Length below the header is refused by the view only.
                (Err(Error::Malformed), Ok(e)) => {
                    prop_assert!(usize::from(e.total_len()) < e.slice().len())
                }
                (Err(_), Err(_)) => {}
                _ => prop_assert!(false, "{:?} vs {:?}", ours.map(|_| ()), theirs.map(|_| ())),
            }
            if let Ok(p) = Packet::new_checked(&buf[..]) {
                let _ = (p.payload(), Repr::parse(&p));
                let total: usize = options(p.options())
                    .map_while(|o| o.ok())
                    .map(|o| o.bytes.len())
                    .sum();
                prop_assert!(total <= p.options().len());
            }
        }
    }
}
