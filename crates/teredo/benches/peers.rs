//! The relay's peer table on the data path: the lookup for a packet towards a trusted peer
//! among 100,000 (`handle_transmit`), the refresh when a known peer's packet arrives
//! (`handle_receive`), and one worker's timer pass over its share (`handle_timeout`).
//!
//! `cargo bench -p gate64-teredo` (add `-- --quick` for a short run).
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use gate64_teredo::Address;
use gate64_teredo::relay::{Peers, RelayConfig, TxDecision};
use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

const PEERS: u32 = 100_000;
const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn client(i: u32) -> Address {
    Address {
        server: SERVER,
        flags: 0,
        mapped: SocketAddrV4::new(
            Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + i),
            40000,
        ),
    }
}

fn populated(now: Instant) -> Peers {
    let peers = Peers::new(RelayConfig::default());
    for i in 0..PEERS {
        let c = client(i);
        peers.handle_receive(now, &c.encode(), c.mapped).unwrap();
    }
    peers
}

fn lookups(c: &mut Criterion) {
    let now = Instant::now();
    let peers = populated(now);
    let target = client(PEERS / 2);
    let key = target.encode();
    assert_eq!(
        peers.handle_transmit(now, &target, b"x"),
        TxDecision::Send(target.mapped)
    );
    let mut g = c.benchmark_group("peers");
    g.bench_function("transmit_trusted_100k", |b| {
        b.iter(|| black_box(peers.handle_transmit(now, black_box(&target), b"x")))
    });
    g.bench_function("receive_known_100k", |b| {
        b.iter(|| black_box(peers.handle_receive(now, black_box(&key), target.mapped)))
    });
    g.finish();
}

/// One worker's timer pass (part 0 of 2) over 100,000 idle, trusted peers: nothing is due, so
/// this is the cost of walking that worker's share of the table every tick.
fn timers(c: &mut Criterion) {
    let now = Instant::now();
    let peers = populated(now);
    let mut g = c.benchmark_group("peers");
    g.bench_function("timeout_part_0_of_2_100k", |b| {
        b.iter(|| {
            peers.handle_timeout(now, 0, 2, |e| {
                black_box(e);
            })
        })
    });
    g.finish();
}

criterion_group!(benches, lookups, timers);
criterion_main!(benches);
