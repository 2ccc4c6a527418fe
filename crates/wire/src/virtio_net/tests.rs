use super::*;
use proptest::prelude::*;

/// The header Linux's `tun` hands over for a TCP/IPv6 super-packet (virtio spec v1.2 §5.1.6:
/// flags NEEDS_CSUM, gso TCPV6, hdr_len 72, gso_size 1208, csum_start 40, csum_offset 16), in
/// the host's byte order.
fn tcpv6_bytes() -> [u8; 10] {
    let mut b = [0u8; 10];
    b[0] = 1;
    b[1] = 4;
    b[2..4].copy_from_slice(&72u16.to_ne_bytes());
    b[4..6].copy_from_slice(&1208u16.to_ne_bytes());
    b[6..8].copy_from_slice(&40u16.to_ne_bytes());
    b[8..10].copy_from_slice(&16u16.to_ne_bytes());
    b
}

#[test]
fn bytes_to_header_and_back() {
    let h = Header {
        flags: F_NEEDS_CSUM,
        gso_type: GsoType::TcpV6,
        gso_ecn: false,
        hdr_len: 72,
        gso_size: 1208,
        csum_start: 40,
        csum_offset: 16,
    };
    assert_eq!(Header::decode(&tcpv6_bytes()), Ok(h));
    assert!(h.needs_csum());
    let mut out = [0xffu8; 10];
    h.encode(&mut out).unwrap();
    assert_eq!(out, tcpv6_bytes());
    let mut none = [0xffu8; 10];
    Header::NONE.encode(&mut none).unwrap();
    assert_eq!(none, [0; 10]);
}

#[test]
fn short_and_unknown_headers_are_errors() {
    assert_eq!(Header::decode(&[0u8; 9]), Err(Error::Truncated));
    let mut b = tcpv6_bytes();
    b[1] = 2;
    assert_eq!(Header::decode(&b), Err(Error::Unsupported));
    b[1] = 0x84;
    assert_eq!(
        Header::decode(&b).map(|h| (h.gso_type, h.gso_ecn)),
        Ok((GsoType::TcpV6, true))
    );
    assert_eq!(Header::NONE.encode(&mut [0u8; 9]), Err(Error::Truncated));
}

proptest! {
    #[test]
    fn decode_encode_roundtrip(
        flags in any::<u8>(),
        gso in prop::sample::select(vec![
            GsoType::None, GsoType::TcpV4, GsoType::Udp, GsoType::TcpV6, GsoType::UdpL4,
        ]),
        gso_ecn in any::<bool>(),
        f in any::<[u16; 4]>(),
    ) {
        let h = Header {
            flags,
            gso_type: gso,
            gso_ecn,
            hdr_len: f[0],
            gso_size: f[1],
            csum_start: f[2],
            csum_offset: f[3],
        };
        let mut b = [0u8; HEADER_LEN];
        h.encode(&mut b).unwrap();
        prop_assert_eq!(Header::decode(&b), Ok(h));
    }
}
