//! The Internet checksum over the lengths the hot paths sum: the UDP datagram of an ESP-in-UDP
//! packet carrying 1,400 inner bytes (1,448 bytes, summed by every seal towards a client) and
//! a 64 KiB TUN super-packet's payload (summed when it is split into segments).
//!
//! `cargo bench -p gate64-wire --bench checksum -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gate64_wire::checksum;
use std::hint::black_box;

fn sums(c: &mut Criterion) {
    let mut g = c.benchmark_group("checksum");
    for len in [1448usize, 65_535] {
        let data: Vec<u8> = (0..len).map(|i| (i * 131 + 7) as u8).collect();
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(format!("sum_{len}"), |b| {
            b.iter(|| checksum::finish(checksum::sum(black_box(&data), black_box(0x1234))))
        });
    }
    g.finish();
}

criterion_group!(benches, sums);
criterion_main!(benches);
