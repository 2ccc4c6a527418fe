//! Writing one 128-packet batch of 1,280-byte IPv6/TCP segments to a real offloading TUN,
//! which the kernel forwards out of a veth device: the per-write cost the GRO table saves (an
//! skb, a pass through routing and forwarding), with 1, 8, 32 or 128 flows sent round robin.
//! `adjacent` writes each run of one flow's adjacent packets on its own, which is exactly the
//! adjacent-only coalescing the table replaced; `flow_table` writes the batch at once. Both
//! run in the same process, alternately per flow count.
//!
//! Needs root: the bench moves its thread into a fresh network namespace (`unshare`), so the
//! TUN, the veth pair and the routes vanish with the process. Without the privilege it
//! says so and measures nothing.
//!
//! `cargo bench -p gate64-io --bench tun_write -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs)]
#![forbid(unsafe_code)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gate64_io::CorpLink;
use gate64_wire::{ipv6, tcp};
use std::hint::black_box;
use std::process::Command;

const BATCH: usize = 128;
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

fn batch(flows: u16) -> Vec<Vec<u8>> {
    (0..BATCH)
        .map(|i| {
            let flow = (i % usize::from(flows)) as u16;
            segment(
                flow,
                1000 + (i / usize::from(flows)) as u32 * SEGMENT as u32,
            )
        })
        .collect()
}

fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .status()
        .is_ok_and(|s| s.success())
}

/// A TUN in a namespace of its own whose packets to fd00:0:0:c0::/64 leave by a veth.
fn lab() -> Option<CorpLink> {
    // Moves this thread into a new network namespace.
    if gate64_sys::namespace::unshare(gate64_sys::namespace::CLONE_NEWNET).is_err() {
        eprintln!("tun_write: no CAP_SYS_ADMIN to make a network namespace; skipped");
        return None;
    }
    // No NAPI thread: each write forwards within the system call, so that is what is timed.
    let mut links =
        gate64_io::tun::create("gbench0", 1280, "fd00:1::1".parse().ok()?, 1, false).ok()?;
    let ok = sh(&["ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"])
        && sh(&["ip", "link", "set", "v0", "up"])
        && sh(&["ip", "link", "set", "v1", "up"])
        && sh(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])
        && sh(&["ip", "-6", "route", "add", "fd00:0:0:c0::/64", "dev", "v0"])
        // A neighbour that is not the peer's address: the peer drops the frames as not its
        // own, so each write costs one pass through forwarding and one transmission.
        && sh(&[
            "ip", "-6", "neigh", "add", "fd00:0:0:c0::5", "lladdr", "02:00:00:00:00:01", "dev",
            "v0", "nud", "permanent",
        ]);
    let corp = links.pop()?;
    (ok && corp.offload()).then_some(corp)
}

fn write(c: &mut Criterion) {
    let Some(corp) = lab() else {
        return;
    };
    let mut g = c.benchmark_group("tun_write");
    g.throughput(Throughput::Elements(BATCH as u64));
    for flows in [1u16, 8, 32, 128] {
        let owned = batch(flows);
        let packets: Vec<&[u8]> = owned.iter().map(|p| &p[..]).collect();
        let w = corp.write_packets(&packets);
        assert_eq!(
            (w.ok, w.failed),
            (BATCH, 0),
            "the lab TUN takes every packet"
        );
        g.bench_with_input(BenchmarkId::new("adjacent", flows), &packets, |b, p| {
            b.iter(|| {
                let mut start = 0;
                for end in 1..=p.len() {
                    if end == p.len() || p[end][22..24] != p[start][22..24] {
                        black_box(corp.write_packets(&p[start..end]));
                        start = end;
                    }
                }
            })
        });
        g.bench_with_input(BenchmarkId::new("flow_table", flows), &packets, |b, p| {
            b.iter(|| black_box(corp.write_packets(black_box(p))))
        });
    }
    g.finish();
}

criterion_group!(benches, write);
criterion_main!(benches);
