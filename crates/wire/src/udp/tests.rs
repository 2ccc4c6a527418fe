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
