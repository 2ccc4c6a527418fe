//! NAT64 hot paths: a 1,280-byte UDP packet of an existing session IPv6 → IPv4 and its reply
//! IPv4 → IPv6, among 100,000 sessions (one shard lock, two table lookups, in-place header
//! rewrite, port rewrite). Each iteration first copies the packet back into the buffer (the
//! translation overwrites it), which the figures include.
//!
//! `cargo bench -p gate64-nat64` (add `-- --quick` for a short run).
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gate64_nat64::{Nat64, Prefix, Settings, state, translate};
use gate64_wire::checksum;
use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

const HOST: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 5);
const HEAD: usize = 64;
const PACKET: usize = 1280;
const SESSIONS: u32 = 100_000;

fn prefix() -> Prefix {
    Prefix::new(Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0, 0), 96).unwrap()
}

fn udp6(src: Ipv6Addr, sport: u16) -> Vec<u8> {
    let dst = prefix().embed(HOST).unwrap();
    let mut p = vec![0u8; PACKET];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((PACKET - 40) as u16).to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    p[40..42].copy_from_slice(&sport.to_be_bytes());
    p[42..44].copy_from_slice(&5001u16.to_be_bytes());
    p[44..46].copy_from_slice(&((PACKET - 40) as u16).to_be_bytes());
    let c = checksum::upper_layer_v6(&src, &dst, 17, &p[40..]);
    p[46..48].copy_from_slice(&c.to_be_bytes());
    p
}

fn bench(c: &mut Criterion) {
    let mut table = state::Config::new((0..16).map(|i| Ipv4Addr::new(192, 0, 2, 10 + i)).collect());
    table.shards = 16;
    let nat = Nat64::new(Settings {
        prefix: prefix(),
        table,
        translate: translate::Config::default(),
    })
    .unwrap();
    let now = Instant::now();
    let mut buf = vec![0u8; HEAD + 2048];
    let mut scratch = vec![0u8; 2048];
    // 100,000 sessions from 1,000 clients.
    for i in 0..SESSIONS {
        let client = Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, 0x8000, 0, (i / 100) as u16, 1);
        let p = udp6(client, 20_000 + (i % 100) as u16);
        buf[HEAD..HEAD + PACKET].copy_from_slice(&p);
        nat.v6_to_v4(now, &mut buf, HEAD, HEAD + PACKET, &mut scratch)
            .unwrap();
    }
    let client = Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, 0x8000, 0, 7, 1);
    let out = udp6(client, 20_042);
    buf[HEAD..HEAD + PACKET].copy_from_slice(&out);
    let t = nat
        .v6_to_v4(now, &mut buf, HEAD, HEAD + PACKET, &mut scratch)
        .unwrap();
    // The reply: swap the IPv4 packet's addresses and ports.
    let mut reply = buf[t.start..t.end].to_vec();
    let (s4, d4) = (reply[12..16].to_vec(), reply[16..20].to_vec());
    reply[12..16].copy_from_slice(&d4);
    reply[16..20].copy_from_slice(&s4);
    let (sp, dp) = (reply[20..22].to_vec(), reply[22..24].to_vec());
    reply[20..22].copy_from_slice(&dp);
    reply[22..24].copy_from_slice(&sp);
    reply[10..12].fill(0);
    let hc = checksum::finish(checksum::sum(&reply[..20], 0));
    reply[10..12].copy_from_slice(&hc.to_be_bytes());
    reply[26..28].fill(0); // no UDP checksum: the translator computes a fresh one

    let mut g = c.benchmark_group("nat64");
    g.throughput(Throughput::Elements(1));
    g.bench_function("v6_to_v4_existing_session_1280B", |b| {
        b.iter(|| {
            buf[HEAD..HEAD + PACKET].copy_from_slice(&out);
            black_box(nat.v6_to_v4(now, &mut buf, HEAD, HEAD + PACKET, &mut scratch))
        })
    });
    let n = reply.len();
    g.bench_function("v4_to_v6_reply_1260B", |b| {
        b.iter(|| {
            buf[HEAD..HEAD + n].copy_from_slice(&reply);
            black_box(nat.v4_to_v6(now, &mut buf, HEAD, HEAD + n, &mut scratch))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
