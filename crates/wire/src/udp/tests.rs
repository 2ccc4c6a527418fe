use super::*;
use proptest::prelude::*;
use std::net::Ipv6Addr;

/// A DNS query's UDP header 2001:db8::5 port 40000 → 64:ff9b::c000:205 port 53 with 4 data
/// bytes, assembled from the RFC 768 layout; checksum computed with etherparse
/// (`UdpHeader::calc_checksum_ipv6_raw`), an independent implementation.
fn datagram() -> (Vec<u8>, Ipv6Addr, Ipv6Addr) {
    let src: Ipv6Addr = "2001:db8::5".parse().unwrap();
    let dst: Ipv6Addr = "64:ff9b::c000:205".parse().unwrap();
    let mut b = vec![
        0x9c, 0x40, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef,
    ];
    let (h, data) = etherparse::UdpHeader::from_slice(&b).unwrap();
    let c = h
        .calc_checksum_ipv6_raw(src.octets(), dst.octets(), data)
        .unwrap();
    b[6..8].copy_from_slice(&c.to_be_bytes());
    (b, src, dst)
}

#[test]
fn bytes_to_repr_and_back() {
    let (b, src, dst) = datagram();
    let pseudo = checksum::pseudo_header_v6(&src, &dst, 17, 12);
    let p = Packet::new_checked(&b[..]).unwrap();
    assert!(p.verify_checksum(pseudo));
    let r = Repr {
        src_port: 40000,
        dst_port: 53,
        payload_len: 4,
    };
    assert_eq!(Repr::parse(&p), r);
    assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    let mut out = vec![0u8; 12];
    r.emit(&mut out).unwrap();
    out[8..].copy_from_slice(p.payload());
    Packet::new_unchecked(&mut out[..]).fill_checksum(pseudo);
    assert_eq!(out, b);
}

#[test]
fn malformed_datagrams_are_errors() {
    let (b, ..) = datagram();
    assert_eq!(Packet::new_checked(&b[..7]).unwrap_err(), Error::Truncated);
    let mut short = b.clone();
    short[5] = 7;
    assert_eq!(
        Packet::new_checked(&short[..]).unwrap_err(),
        Error::Malformed
    );
    let mut long = b.clone();
    long[5] = 13;
    assert_eq!(
        Packet::new_checked(&long[..]).unwrap_err(),
        Error::Truncated
    );
    // Bytes past the Length field are not payload.
    let mut trailer = b.clone();
    trailer.push(0);
    assert_eq!(
        Packet::new_checked(&trailer[..]).unwrap().payload().len(),
        4
    );
    let big = Repr {
        src_port: 1,
        dst_port: 2,
        payload_len: u16::MAX,
    };
    assert_eq!(big.emit(&mut [0u8; 8]), Err(Error::Malformed));
}

proptest! {
    #[test]
    fn parse_emit_roundtrip(ports in any::<(u16, u16)>(), payload_len in 0u16..600) {
        let r = Repr { src_port: ports.0, dst_port: ports.1, payload_len };
        let mut b = vec![0u8; HEADER_LEN + usize::from(payload_len)];
        r.emit(&mut b).unwrap();
        let p = Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(Repr::parse(&p), r);
        let e = etherparse::UdpHeaderSlice::from_slice(&b).unwrap();
        prop_assert_eq!(e.length(), payload_len + 8);
    }

    #[test]
    fn view_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..40)) {
        if let Ok(p) = Packet::new_checked(&buf[..]) {
            prop_assert!(usize::from(p.len()) <= buf.len());
            let _ = (p.payload(), p.verify_checksum(0), Repr::parse(&p));
        }
    }
}

#[test]
fn peek_ports_reads_the_first_four_bytes_only() {
    assert_eq!(peek_ports(&[0x01, 0xf4, 0x11, 0x94]), Some((500, 4500)));
    assert_eq!(peek_ports(&[0, 53, 0x30, 0x39, 9, 9]), Some((53, 12345)));
    assert_eq!(peek_ports(&[0, 53, 0]), None);
    assert_eq!(peek_ports(&[]), None);
}

#[test]
fn emit_over_v6_writes_the_header_and_checksum_an_independent_implementation_computes() {
    let (want, src, dst) = datagram();
    let mut b = want.clone();
    b[..HEADER_LEN].fill(0xaa);
    emit_over_v6(&mut b, (&src, &dst), 40000, 53).unwrap();
    assert_eq!(b, want);
}

#[test]
fn emit_over_v6_refuses_what_no_udp_header_can_describe() {
    let a: Ipv6Addr = "2001:db8::1".parse().unwrap();
    assert_eq!(
        emit_over_v6(&mut [0u8; 7], (&a, &a), 1, 2),
        Err(Error::Truncated)
    );
    let mut huge = vec![0u8; usize::from(u16::MAX) + 1];
    assert_eq!(
        emit_over_v6(&mut huge, (&a, &a), 1, 2),
        Err(Error::Malformed)
    );
}

fn v4(a: &str) -> std::net::SocketAddrV4 {
    a.parse().unwrap()
}

/// 100.64.0.5:1024 → 192.0.2.1:3544 carrying `payload`, from [`emit_over_v4`].
fn over_v4(payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0xee; 3];
    emit_over_v4(
        &mut out,
        v4("100.64.0.5:1024"),
        v4("192.0.2.1:3544"),
        7,
        payload,
    )
    .unwrap();
    // What was in the buffer stays; the packet is appended.
    assert_eq!(out[..3], [0xee; 3]);
    out.split_off(3)
}

#[test]
fn emitted_over_v4_checks_out_with_etherparse() {
    let p = over_v4(b"qualification");
    let (ip, rest) = etherparse::Ipv4Header::from_slice(&p).unwrap();
    assert_eq!(ip.header_checksum, ip.calc_header_checksum());
    assert_eq!(
        (ip.source, ip.destination),
        ([100, 64, 0, 5], [192, 0, 2, 1])
    );
    assert_eq!(ip.protocol, etherparse::IpNumber::UDP);
    assert_eq!(usize::from(ip.total_len), p.len());
    let (udp, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
    assert_eq!((udp.source_port, udp.destination_port), (1024, 3544));
    assert_eq!(data, b"qualification");
    assert_eq!(
        udp.checksum,
        udp.calc_checksum_ipv4_raw(ip.source, ip.destination, data)
            .unwrap()
    );
}

#[test]
fn over_v4_round_trips_and_ignores_trailing_bytes() {
    let mut p = over_v4(b"abc");
    p.extend_from_slice(b"padding");
    let d = parse_over_v4(&p).unwrap();
    assert_eq!(d.src, v4("100.64.0.5:1024"));
    assert_eq!(d.dst, v4("192.0.2.1:3544"));
    assert_eq!(d.payload, b"abc");
    // An empty payload and a checksum of 0 (none, RFC 768) are fine.
    let mut p = over_v4(b"");
    p[26..28].fill(0);
    assert_eq!(parse_over_v4(&p).unwrap().payload, b"");
}

#[test]
fn malformed_over_v4_is_refused() {
    let good = over_v4(b"some teredo bytes");
    assert_eq!(parse_over_v4(&good[..19]), Err(Error::Truncated));
    assert_eq!(
        parse_over_v4(&good[..good.len() - 1]),
        Err(Error::Truncated)
    );
    let bad = |at: usize, byte: u8| {
        let mut p = good.clone();
        p[at] = byte;
        parse_over_v4(&p).map(|d| d.payload.len())
    };
    // The IPv4 header checksum.
    assert_eq!(bad(10, good[10] ^ 1), Err(Error::Malformed));
    // A payload byte: the UDP checksum.
    assert_eq!(bad(30, good[30] ^ 1), Err(Error::Malformed));
    // Version 6.
    assert_eq!(bad(0, 0x65), Err(Error::Malformed));
    // UDP Length 7, and longer than the IPv4 payload.
    assert_eq!(bad(25, 7), Err(Error::Malformed));
    assert_eq!(bad(25, good[25] + 1), Err(Error::Truncated));
    // TCP, and a first fragment: both refused with a fixed header checksum.
    let refix = |mut p: Vec<u8>| {
        p[10..12].fill(0);
        let c = checksum::finish(checksum::sum(&p[..20], 0));
        p[10..12].copy_from_slice(&c.to_be_bytes());
        parse_over_v4(&p).map(|d| d.payload.len())
    };
    let mut tcp = good.clone();
    tcp[9] = 6;
    assert_eq!(refix(tcp), Err(Error::Unsupported));
    let mut frag = good.clone();
    frag[6] = 0x20;
    assert_eq!(refix(frag), Err(Error::Unsupported));
}

#[test]
fn over_v4_refuses_what_does_not_fit() {
    let mut out = Vec::new();
    let big = vec![0u8; 65_535 - 28 + 1];
    let r = emit_over_v4(&mut out, v4("1.2.3.4:1"), v4("5.6.7.8:2"), 0, &big);
    assert_eq!(r, Err(Error::Malformed));
    assert!(out.is_empty());
    emit_over_v4(&mut out, v4("1.2.3.4:1"), v4("5.6.7.8:2"), 0, &big[1..]).unwrap();
    assert_eq!(out.len(), 65_535);
}

proptest! {
    #[test]
    fn over_v4_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_over_v4(&bytes);
    }
}
