//! Hand-written checked views against etherparse 0.21's zero-copy header slices, on the
//! header reads the NAT64 and offload hot paths do per packet: a 1,280-byte IPv4/TCP segment
//! and a 1,280-byte IPv6/UDP datagram behind a Destination Options header. Both sides check
//! the headers and read addresses, protocol and ports (and the TCP sequence number).
//!
//! `cargo bench -p gate64-wire --bench views -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use etherparse::{
    IpNumber, Ipv4HeaderSlice, Ipv6ExtensionsSlice, Ipv6HeaderSlice, TcpHeaderSlice, UdpHeaderSlice,
};
use gate64_wire::{ipv4, ipv6, tcp, udp};
use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};

fn tcp4_segment() -> Vec<u8> {
    let mut p = vec![0x5a; 1280];
    let ip = ipv4::Repr {
        src: Ipv4Addr::new(192, 0, 2, 10),
        dst: Ipv4Addr::new(198, 51, 100, 5),
        protocol: ipv4::PROTO_TCP,
        payload_len: 1260,
        ttl: 64,
        tos: 0,
        ident: 7,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    };
    ip.emit(&mut p).unwrap();
    let t = tcp::Repr {
        src_port: 40000,
        dst_port: 443,
        seq_number: 1,
        ack_number: 2,
        flags: tcp::FLAG_ACK,
        window: 512,
        urgent: 0,
        options: &[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3],
    };
    t.emit(&mut p[20..]).unwrap();
    p
}

fn udp6_datagram() -> Vec<u8> {
    let mut p = vec![0x5a; 1280];
    let ip = ipv6::Repr {
        src: "2001:db8::5".parse::<Ipv6Addr>().unwrap(),
        dst: "64:ff9b::c000:205".parse::<Ipv6Addr>().unwrap(),
        next_header: ipv6::NH_DEST_OPTS,
        payload_len: 1240,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    ip.emit(&mut p).unwrap();
    p[40..48].copy_from_slice(&[ipv6::NH_UDP, 0, 1, 4, 0, 0, 0, 0]);
    let u = udp::Repr {
        src_port: 40000,
        dst_port: 53,
        payload_len: 1280 - 56,
    };
    u.emit(&mut p[48..]).unwrap();
    p
}

fn hand_tcp4(p: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr, u16, u16, u32)> {
    let ip = ipv4::Packet::new_checked(p).ok()?;
    if ip.protocol() != ipv4::PROTO_TCP {
        return None;
    }
    let t = tcp::Packet::new_checked(ip.payload()).ok()?;
    Some((
        ip.src(),
        ip.dst(),
        t.src_port(),
        t.dst_port(),
        t.seq_number(),
    ))
}

fn etherparse_tcp4(p: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr, u16, u16, u32)> {
    let ip = Ipv4HeaderSlice::from_slice(p).ok()?;
    // etherparse's header slice does not check Total Length against the buffer.
    let total = usize::from(ip.total_len());
    if total > p.len() || ip.protocol() != IpNumber::TCP {
        return None;
    }
    let t = TcpHeaderSlice::from_slice(&p[ip.slice().len()..total]).ok()?;
    Some((
        ip.source_addr(),
        ip.destination_addr(),
        t.source_port(),
        t.destination_port(),
        t.sequence_number(),
    ))
}

fn hand_udp6(p: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr, u16, u16)> {
    let ip = ipv6::Packet::new_checked(p).ok()?;
    let chain = ip.walk().ok()?;
    if chain.protocol != ipv6::NH_UDP {
        return None;
    }
    let u = udp::Packet::new_checked(&ip.as_bytes()[chain.upper_offset..]).ok()?;
    Some((ip.src(), ip.dst(), u.src_port(), u.dst_port()))
}

fn etherparse_udp6(p: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr, u16, u16)> {
    let ip = Ipv6HeaderSlice::from_slice(p).ok()?;
    let end = 40 + usize::from(ip.payload_length());
    let body = p.get(40..end)?;
    let (_, nh, rest) = Ipv6ExtensionsSlice::from_slice(ip.next_header(), body).ok()?;
    if nh != IpNumber::UDP {
        return None;
    }
    let u = UdpHeaderSlice::from_slice(rest).ok()?;
    Some((
        ip.source_addr(),
        ip.destination_addr(),
        u.source_port(),
        u.destination_port(),
    ))
}

fn views(c: &mut Criterion) {
    let mut g = c.benchmark_group("header_views");
    g.throughput(Throughput::Elements(1));
    let t4 = tcp4_segment();
    assert_eq!(hand_tcp4(&t4), etherparse_tcp4(&t4));
    assert!(hand_tcp4(&t4).is_some());
    g.bench_function("tcp4_hand", |b| b.iter(|| hand_tcp4(black_box(&t4))));
    g.bench_function("tcp4_etherparse", |b| {
        b.iter(|| etherparse_tcp4(black_box(&t4)))
    });
    let u6 = udp6_datagram();
    assert_eq!(hand_udp6(&u6), etherparse_udp6(&u6));
    assert!(hand_udp6(&u6).is_some());
    g.bench_function("udp6_dstopts_hand", |b| {
        b.iter(|| hand_udp6(black_box(&u6)))
    });
    g.bench_function("udp6_dstopts_etherparse", |b| {
        b.iter(|| etherparse_udp6(black_box(&u6)))
    });
    g.finish();
}

criterion_group!(benches, views);
criterion_main!(benches);
