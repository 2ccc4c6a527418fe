//! Teredo datagram parsing: Miredo's 61-byte RS and a 1280-byte data packet.
//!
//! `cargo bench -p gate64-wire` (add `-- --quick` for a short run).
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gate64_wire::{icmpv6, ipv6, teredo as tw};
use std::hint::black_box;

fn rs_datagram() -> Vec<u8> {
    let mut b = vec![0u8; 61];
    let auth = tw::Auth {
        client_id: &[],
        auth_value: &[],
        nonce: *b"nonce-01",
        confirmation: 0,
    };
    auth.emit(&mut b).unwrap();
    icmpv6::emit_router_solicitation(&mut b[13..], &"fe80::ffff:ffff:ffff".parse().unwrap())
        .unwrap();
    b
}

fn data_datagram() -> Vec<u8> {
    let mut b = vec![0x5a; 1280];
    ipv6::emit_header(
        &mut b,
        1280 - 40,
        ipv6::NH_UDP,
        64,
        &"2001:0:c000:201:2c5a:f225:39cc:9bf5".parse().unwrap(),
        &"2001:db8:100::5".parse().unwrap(),
    )
    .unwrap();
    b
}

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("teredo_parse");
    for (name, d) in [("rs", rs_datagram()), ("data_1280", data_datagram())] {
        assert!(tw::Packet::parse(&d).is_ok());
        g.throughput(Throughput::Bytes(d.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| tw::Packet::parse(black_box(&d)).is_ok())
        });
    }
    g.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
