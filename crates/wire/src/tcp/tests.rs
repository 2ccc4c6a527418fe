use super::*;
use proptest::prelude::*;
use std::net::Ipv4Addr;

const SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 1);
const DST: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 2);

/// Assembled by hand from the RFC 9293 §3.1 layout (ports 48896 → 80, seq 0x01234567, ack
/// 0x89abcdef, data offset 6, flags URG|ACK|RST|FIN, window 0x0123, urgent 0x0201, one
/// 4-byte option, 4 data bytes); its checksum 192.168.1.1 → 192.168.1.2 was computed with
/// etherparse (`TcpHeaderSlice::calc_checksum_ipv4_raw`), an independent implementation.
fn segment() -> Vec<u8> {
    let mut b = vec![
        0xbf, 0x00, 0x00, 0x50, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x60, 0x35, 0x01,
        0x23, 0x00, 0x00, 0x02, 0x01, 0x03, 0x03, 0x0c, 0x01, 0xaa, 0x00, 0x00, 0xff,
    ];
    let e = etherparse::TcpHeaderSlice::from_slice(&b).unwrap();
    let c = e
        .calc_checksum_ipv4_raw(SRC.octets(), DST.octets(), &b[24..])
        .unwrap();
    b[16..18].copy_from_slice(&c.to_be_bytes());
    b
}

fn segment_repr() -> Repr<'static> {
    Repr {
        src_port: 48896,
        dst_port: 80,
        seq_number: 0x0123_4567,
        ack_number: 0x89ab_cdef,
        flags: FLAG_URG | FLAG_ACK | FLAG_RST | FLAG_FIN,
        window: 0x0123,
        urgent: 0x0201,
        options: &[0x03, 0x03, 0x0c, 0x01],
    }
}

fn pseudo(len: usize) -> u32 {
    checksum::pseudo_header_v4(&SRC, &DST, 6, len as u16)
}

#[test]
fn bytes_to_repr_and_back() {
    let b = segment();
    let p = Packet::new_checked(&b[..]).unwrap();
    assert!(p.verify_checksum(pseudo(b.len())));
    assert_eq!(Repr::parse(&p), segment_repr());
    assert_eq!(p.payload(), &[0xaa, 0x00, 0x00, 0xff]);
    let mut out = vec![0u8; b.len()];
    segment_repr().emit(&mut out).unwrap();
    out[24..].copy_from_slice(&[0xaa, 0x00, 0x00, 0xff]);
    let mut view = Packet::new_unchecked(&mut out[..]);
    view.fill_checksum(pseudo(b.len()));
    assert_eq!(out, b);
}

#[test]
fn malformed_segments_are_errors() {
    let b = segment();
    assert_eq!(Packet::new_checked(&b[..19]).unwrap_err(), Error::Truncated);
    let mut short_off = b.clone();
    short_off[12] = 0x40;
    assert_eq!(
        Packet::new_checked(&short_off[..]).unwrap_err(),
        Error::Malformed
    );
    let mut long_off = b.clone();
    long_off[12] = 0xf0;
    assert_eq!(
        Packet::new_checked(&long_off[..]).unwrap_err(),
        Error::Truncated
    );
    let mut bad = b.clone();
    bad[27] ^= 1;
    assert!(
        !Packet::new_checked(&bad[..])
            .unwrap()
            .verify_checksum(pseudo(bad.len()))
    );
    let odd = Repr {
        options: &[1, 1, 1],
        ..segment_repr()
    };
    assert_eq!(odd.emit(&mut [0u8; 60]), Err(Error::Malformed));
    assert_eq!(segment_repr().emit(&mut [0u8; 23]), Err(Error::Truncated));
}

proptest! {
    #[test]
    fn parse_emit_roundtrip(
        ports in any::<(u16, u16)>(),
        seq_ack in any::<(u32, u32)>(),
        flags in any::<u8>(),
        window in any::<u16>(),
        urgent in any::<u16>(),
        words in 0usize..=10,
        opt in any::<[u8; 40]>(),
    ) {
        let r = Repr {
            src_port: ports.0,
            dst_port: ports.1,
            seq_number: seq_ack.0,
            ack_number: seq_ack.1,
            flags,
            window,
            urgent,
            options: &opt[..words * 4],
        };
        let mut b = vec![0u8; r.header_len()];
        r.emit(&mut b).unwrap();
        let p = Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(Repr::parse(&p), r);
        let e = etherparse::TcpHeaderSlice::from_slice(&b).unwrap();
        prop_assert_eq!((e.sequence_number(), e.data_offset()), (r.seq_number, (4 + words) as u8 + 1));
    }

    #[test]
    fn view_never_panics_and_agrees_with_etherparse(
        buf in proptest::collection::vec(any::<u8>(), 0..80),
    ) {
        let ours = Packet::new_checked(&buf[..]);
        let theirs = etherparse::TcpHeaderSlice::from_slice(&buf);
        prop_assert_eq!(ours.is_ok(), theirs.is_ok());
        if let (Ok(p), Ok(e)) = (ours, theirs) {
            prop_assert_eq!(p.header_len(), e.slice().len());
            prop_assert_eq!(p.options(), e.options());
            let _ = (p.payload(), p.urgent(), p.window());
        }
    }
}
