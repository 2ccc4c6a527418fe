//! Planning the TUN writes of one 128-packet batch ([`GroTable`]) when the batch holds 1, 8,
//! 32 or 128 interleaved TCP flows (1,280-byte IPv6 segments, round robin, so no two adjacent
//! packets share a flow once there are several). `adjacent` plans each run of one flow's
//! adjacent packets on its own: exactly the grouping of the adjacent-only coalescing the
//! table replaced, measured in the same run. The writes each plan makes (what the kernel
//! pays for, one skb and one pass through forwarding each) are printed before the timings.
//!
//! `cargo bench -p gate64-wire --bench offload -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gate64_wire::offload::{GRO_BATCH, GroTable};
use gate64_wire::{ipv6, tcp};
use std::hint::black_box;

const SEGMENT: usize = 1280 - 40 - 32;

fn segment(flow: u16, seq: u32) -> Vec<u8> {
    let mut p = vec![0x5a; 1280];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((1280 - 40) as u16).to_be_bytes());
    p[6] = ipv6::NH_TCP;
    p[7] = 64;
    p[8..24].copy_from_slice(&[0x20, 0x01, 0, 0, 0x4a, 0x3b, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    p[22..24].copy_from_slice(&flow.to_be_bytes());
    p[24..40].copy_from_slice(&[0xfd, 0, 0, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5]);
    let t = tcp::Repr {
        src_port: 40000 + flow,
        dst_port: 443,
        seq_number: seq,
        ack_number: 2,
        flags: tcp::FLAG_ACK,
        window: 512,
        urgent: 0,
        options: &[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3],
    };
    t.emit(&mut p[40..]).unwrap();
    p
}

/// `GRO_BATCH` segments of `flows` flows sent round robin.
fn batch(flows: u16) -> Vec<Vec<u8>> {
    (0..GRO_BATCH)
        .map(|i| {
            let flow = (i % usize::from(flows)) as u16;
            let k = (i / usize::from(flows)) as u32;
            segment(flow, 1000 + k * SEGMENT as u32)
        })
        .collect()
}

/// The table's writes: how many, and the sum of the packets they carry (to keep them alive).
fn flow_table(t: &mut GroTable, packets: &[&[u8]]) -> (usize, usize) {
    let mut out = (0, 0);
    t.for_each_write(packets, |parts, n| {
        out.0 += 1;
        out.1 += n + parts.len();
    });
    out
}

/// The adjacent-only grouping: each run of one flow's adjacent packets planned on its own.
fn adjacent(t: &mut GroTable, packets: &[&[u8]]) -> (usize, usize) {
    let flow = |p: &[u8]| [p[22], p[23]];
    let mut out = (0, 0);
    let mut start = 0;
    for end in 1..=packets.len() {
        if end == packets.len() || flow(packets[end]) != flow(packets[start]) {
            let (w, n) = flow_table(t, &packets[start..end]);
            out = (out.0 + w, out.1 + n);
            start = end;
        }
    }
    out
}

fn plan(c: &mut Criterion) {
    let mut g = c.benchmark_group("gro_plan");
    g.throughput(Throughput::Elements(GRO_BATCH as u64));
    let mut t = GroTable::new();
    for flows in [1u16, 8, 32, 128] {
        let owned = batch(flows);
        let packets: Vec<&[u8]> = owned.iter().map(|p| &p[..]).collect();
        let (a, _) = adjacent(&mut t, &packets);
        let (f, _) = flow_table(&mut t, &packets);
        println!(
            "gro_plan {flows} flows: adjacent {a} writes, flow table {f} writes per {GRO_BATCH} packets"
        );
        g.bench_with_input(BenchmarkId::new("adjacent", flows), &packets, |b, p| {
            b.iter(|| adjacent(&mut t, black_box(p)))
        });
        g.bench_with_input(BenchmarkId::new("flow_table", flows), &packets, |b, p| {
            b.iter(|| flow_table(&mut t, black_box(p)))
        });
    }
    g.finish();
}

criterion_group!(benches, plan);
criterion_main!(benches);
