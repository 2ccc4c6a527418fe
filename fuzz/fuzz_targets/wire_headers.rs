//! gate64-wire's header views and Reprs on arbitrary bytes: no view, walker or Repr panics,
//! and whatever parses emits back to bytes that parse to the same Repr.
//! Input: `[selector][bytes]`; the selector picks the layer (IPv4, IPv6 with its extension
//! headers, TCP, UDP, ICMPv4, ICMPv6, virtio-net), and bit 7 the quoted (ICMP-embedded)
//! constructors for IPv4/IPv6.
#![no_main]

use gate64_wire::{icmpv4, icmpv6, ipv4, ipv6, tcp, udp, virtio_net};
use libfuzzer_sys::fuzz_target;

fn ipv4(b: &[u8], quoted: bool) {
    let p = if quoted {
        ipv4::Packet::new_checked_quoted(b)
    } else {
        ipv4::Packet::new_checked(b)
    };
    let Ok(p) = p else { return };
    assert!(p.header_len() >= ipv4::HEADER_LEN && p.header_len() <= b.len());
    let _ = (p.options(), p.payload(), p.is_fragment(), p.tos());
    if let Ok(r) = ipv4::Repr::parse(&p) {
        let mut out = vec![0u8; ipv4::HEADER_LEN + usize::from(r.payload_len)];
        if r.emit(&mut out).is_ok() {
            let q = ipv4::Packet::new_checked(&out[..]).expect("emitted header parses");
            let again = ipv4::Repr::parse(&q).expect("emitted checksum verifies");
            // Options are left out, so the payload grows by their length.
            assert_eq!((again.src, again.dst, again.ident), (r.src, r.dst, r.ident));
        }
    }
}

fn ipv6(b: &[u8], quoted: bool) {
    let p = if quoted {
        ipv6::Packet::new_checked_quoted(b)
    } else {
        ipv6::Packet::new_checked(b)
    };
    let Ok(p) = p else { return };
    let _ = (
        p.payload(),
        p.traffic_class(),
        p.flow_label(),
        p.is_bubble(),
    );
    let mut end = ipv6::HEADER_LEN;
    for h in p.ext_headers() {
        let Ok(h) = h else { break };
        assert_eq!(h.offset, end);
        end += h.len();
        assert!(end <= p.as_bytes().len());
        let _ = (h.segments_left(), h.fragment(), h.as_bytes());
    }
    if let Ok(c) = p.walk() {
        assert!(c.upper_offset <= p.as_bytes().len());
        if let Some(f) = c.fragment {
            let mut fb = [0u8; ipv6::FRAG_HEADER_LEN];
            f.emit(&mut fb).expect("13-bit offset fits");
            assert_eq!(ipv6::FragmentRepr::parse(&fb), Ok(f));
        }
    }
    let r = ipv6::Repr::parse(&p);
    let mut out = [0u8; ipv6::HEADER_LEN];
    r.emit(&mut out).expect("parsed flow label fits");
    let mut pkt = out.to_vec();
    pkt.resize(ipv6::HEADER_LEN + usize::from(r.payload_len), 0);
    if let Ok(q) = ipv6::Packet::new_checked(&pkt) {
        assert_eq!(ipv6::Repr::parse(&q), r);
    }
}

fn tcp(b: &[u8]) {
    let Ok(p) = tcp::Packet::new_checked(b) else {
        return;
    };
    let r = tcp::Repr::parse(&p);
    let mut out = vec![0u8; r.header_len()];
    r.emit(&mut out).expect("parsed options are whole words");
    assert_eq!(
        tcp::Repr::parse(&tcp::Packet::new_checked(&out[..]).unwrap()),
        r
    );
    let _ = (p.payload(), p.verify_checksum(0));
}

fn udp(b: &[u8]) {
    let Ok(p) = udp::Packet::new_checked(b) else {
        return;
    };
    let r = udp::Repr::parse(&p);
    let mut out = vec![0u8; usize::from(p.len())];
    r.emit(&mut out).expect("parsed length fits");
    assert_eq!(
        udp::Repr::parse(&udp::Packet::new_checked(&out[..]).unwrap()),
        r
    );
    let _ = (p.payload(), p.verify_checksum(0));
}

fn icmp(b: &[u8], v6: bool) {
    if v6 {
        let Ok(p) = icmpv6::Packet::new_checked(b) else {
            return;
        };
        if let Ok(r) = icmpv6::Repr::parse(&p) {
            let mut out = [0u8; 8];
            r.emit(&mut out).unwrap();
            assert_eq!(
                icmpv6::Repr::parse(&icmpv6::Packet::new_checked(&out[..]).unwrap()),
                Ok(r)
            );
        }
    } else {
        let Ok(p) = icmpv4::Packet::new_checked(b) else {
            return;
        };
        if let Ok(r) = icmpv4::Repr::parse(&p) {
            let mut out = [0u8; 8];
            r.emit(&mut out).unwrap();
            assert_eq!(
                icmpv4::Repr::parse(&icmpv4::Packet::new_checked(&out[..]).unwrap()),
                Ok(r)
            );
        }
    }
}

fn virtio(b: &[u8]) {
    let Ok(h) = virtio_net::Header::decode(b) else {
        return;
    };
    let mut out = [0u8; virtio_net::HEADER_LEN];
    h.encode(&mut out).unwrap();
    assert_eq!(virtio_net::Header::decode(&out), Ok(h));
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let quoted = sel & 0x80 != 0;
    match sel % 7 {
        0 => ipv4(rest, quoted),
        1 => ipv6(rest, quoted),
        2 => tcp(rest),
        3 => udp(rest),
        4 => icmp(rest, false),
        5 => icmp(rest, true),
        _ => virtio(rest),
    }
});
