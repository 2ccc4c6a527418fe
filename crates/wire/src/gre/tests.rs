use super::*;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A keyed GRE packet as Open vSwitch sent it in the interop recipe
/// (`../shared/docs/interop-ovs-gre.md`: `GREv0, key=0x2a`, IPv4 inside), laid out by hand
/// from RFC 2890 §2: flags 0x2000 (K), Protocol Type 0x0800, Key 42, then 4 payload bytes.
const KEYED: [u8; 12] = [
    0x20, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x2a, 0x45, 0x00, 0x00, 0x14,
];

#[test]
fn rfc2890_keyed_header_bytes_to_repr_and_back() {
    let p = Packet::new_checked(&KEYED[..]).unwrap();
    let r = Repr::parse(&p);
    assert_eq!(
        r,
        Repr {
            protocol_type: PROTO_IPV4,
            checksum: false,
            key: Some(42),
            sequence: None,
        }
    );
    assert_eq!(p.header_len(), 8);
    assert_eq!(p.payload(), &KEYED[8..]);
    let mut out = [0u8; 8];
    assert_eq!(r.emit(&mut out).unwrap(), 8);
    assert_eq!(out, KEYED[..8]);
}

/// RFC 2784 §2.5: the checksum covers header and payload with the field zero. The expected
/// value is computed independently here with a word-at-a-time sum.
#[test]
fn rfc2784_checksum_covers_header_and_payload() {
    let r = Repr {
        protocol_type: PROTO_IPV6,
        checksum: true,
        key: Some(7),
        sequence: Some(9),
    };
    let mut b = vec![0u8; 16 + 5];
    r.emit(&mut b).unwrap();
    b[16..].copy_from_slice(&[1, 2, 3, 4, 5]);
    fill_checksum(&mut b).unwrap();
    let mut zeroed = b.clone();
    zeroed[4] = 0;
    zeroed[5] = 0;
    zeroed.push(0);
    let mut sum: u32 = zeroed
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    assert_eq!(u16::from_be_bytes([b[4], b[5]]), !(sum as u16));
    assert_eq!(&b[6..8], &[0, 0], "Reserved1 is zero");
    let p = Packet::new_checked(&b[..]).unwrap();
    assert!(p.verify_checksum());
    assert_eq!(p.key(), Some(7));
    assert_eq!(p.sequence(), Some(9));
    b[20] ^= 1;
    assert!(!Packet::new_checked(&b[..]).unwrap().verify_checksum());
}

#[test]
fn malformed_headers_are_errors() {
    assert_eq!(
        Packet::new_checked(&KEYED[..3]).unwrap_err(),
        Error::Truncated
    );
    // Key announced, 2 of its bytes missing.
    assert_eq!(
        Packet::new_checked(&KEYED[..6]).unwrap_err(),
        Error::Truncated
    );
    // RFC 2784 §2.3.1: versions other than 0 are discarded.
    for version in 1..=7u8 {
        let mut b = KEYED;
        b[1] |= version;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::Unsupported);
    }
    // RFC 2784 §2.3: bits 1-5 (R, s, Recur) set.
    for bit in [0x40u8, 0x08, 0x04, 0x02, 0x01] {
        let mut b = KEYED;
        b[0] |= bit;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::Malformed,
            "{bit:#x}"
        );
    }
    // Bits 6-12 are reserved and ignored on receipt.
    let mut b = KEYED;
    b[1] |= 0xf8;
    assert_eq!(Packet::new_checked(&b[..]).unwrap().key(), Some(42));
}

#[test]
fn fill_checksum_without_c_bit_changes_nothing() {
    let mut b = KEYED;
    fill_checksum(&mut b).unwrap();
    assert_eq!(b, KEYED);
    assert_eq!(fill_checksum(&mut [0x80, 0, 8, 0]), Err(Error::Truncated));
}

/// The keepalive from Cisco's description: GRE 0x0800 carrying IPv4 B→A, protocol 47,
/// carrying GRE type 0 with the tunnel's key.
#[test]
fn cisco_keepalive_v4_layout() {
    let a = Ipv4Addr::new(203, 0, 113, 1);
    let b = Ipv4Addr::new(203, 0, 113, 2);
    let mut out = [0u8; 64];
    let n = keepalive::emit_v4(a, b, Some(42), &mut out).unwrap();
    assert_eq!(n, keepalive::len_v4(Some(42)));
    assert_eq!(n, 8 + 20 + 8);
    let outer = Packet::new_checked(&out[..n]).unwrap();
    assert_eq!(outer.protocol_type(), PROTO_IPV4);
    assert_eq!(outer.key(), Some(42));
    let ip = crate::ipv4::Packet::new_checked(outer.payload()).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!((ip.src(), ip.dst(), ip.protocol()), (b, a, IP_PROTOCOL));
    let inner = Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(inner.protocol_type(), PROTO_KEEPALIVE);
    assert_eq!(inner.key(), Some(42));
    assert!(inner.payload().is_empty());
    assert_eq!(
        keepalive::emit_v4(a, b, None, &mut out[..10]),
        Err(Error::Truncated)
    );
}

#[test]
fn keepalive_v6_layout() {
    let a: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let b: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let mut out = [0u8; 80];
    let n = keepalive::emit_v6(a, b, None, &mut out).unwrap();
    assert_eq!(n, keepalive::len_v6(None));
    let outer = Packet::new_checked(&out[..n]).unwrap();
    assert_eq!(outer.protocol_type(), PROTO_IPV6);
    let ip = crate::ipv6::Packet::new_checked(outer.payload()).unwrap();
    assert_eq!((ip.src(), ip.dst(), ip.next_header()), (b, a, IP_PROTOCOL));
    let inner = Packet::new_checked(&outer.payload()[40..]).unwrap();
    assert_eq!(inner.protocol_type(), PROTO_KEEPALIVE);
}

fn repr() -> impl Strategy<Value = Repr> {
    (
        any::<u16>(),
        any::<bool>(),
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<u32>()),
    )
        .prop_map(|(protocol_type, checksum, key, sequence)| Repr {
            protocol_type,
            checksum,
            key,
            sequence,
        })
}

proptest! {
    #[test]
    fn parse_of_emit_is_identity(r in repr(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut b = vec![0u8; r.header_len() + payload.len()];
        let n = r.emit(&mut b).unwrap();
        prop_assert_eq!(n, r.header_len());
        b[n..].copy_from_slice(&payload);
        fill_checksum(&mut b).unwrap();
        let p = Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(Repr::parse(&p), r);
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert!(p.verify_checksum());
    }

    #[test]
    fn emit_into_short_buffer_fails(r in repr(), short in 0usize..16) {
        let mut b = vec![0u8; short];
        let res = r.emit(&mut b);
        prop_assert_eq!(res.is_ok(), short >= r.header_len());
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..32)) {
        if let Ok(p) = Packet::new_checked(&b[..]) {
            let r = Repr::parse(&p);
            prop_assert_eq!(r.header_len(), p.header_len());
            prop_assert!(p.header_len() <= b.len());
            let _ = p.verify_checksum();
        }
    }
}
