//! The IP-HTTPS client table on the data path: a packet from the TUN offered to one of 10,000
//! connections (`ClientTable::deliver`).
//!
//! `cargo bench -p gate64-dataplane --bench clients` (add `-- --quick` for a short run).
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use gate64_dataplane::{ClientQueue, ClientTable, Delivery};
use std::hint::black_box;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const CLIENTS: u64 = 10_000;

/// Counts what it is offered, so the bench measures the table, not a queue.
#[derive(Default)]
struct Counter(AtomicUsize);

impl ClientQueue for Counter {
    fn push(&self, packet: &[u8]) -> bool {
        self.0.fetch_add(packet.len(), Ordering::Relaxed);
        true
    }
}

/// The address `host` in the `n`th /64 of `2001:db8:1::/48`.
fn address(n: u64, host: u64) -> Ipv6Addr {
    Ipv6Addr::from((0x2001_0db8_0001_0000_u128 + u128::from(n)) << 64 | u128::from(host))
}

fn deliver(c: &mut Criterion) {
    let table = ClientTable::default();
    for n in 0..CLIENTS {
        table.insert(address(n, 0), Arc::new(Counter::default()));
    }
    let dst = address(CLIENTS / 2, 0xabcd);
    let packet = [0u8; 1280];
    assert_eq!(table.deliver(&dst, &packet), Delivery::Queued);
    let mut g = c.benchmark_group("clients");
    g.bench_function("deliver_10k", |b| {
        b.iter(|| black_box(table.deliver(black_box(&dst), &packet)))
    });
    g.finish();
}

criterion_group!(benches, deliver);
criterion_main!(benches);
