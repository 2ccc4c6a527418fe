//! Deframing a 64 KiB stream of 1280-byte IPv6 packets, as the server does per TLS read.
//!
//! `cargo bench -p gate64-iphttps` (add `-- --quick` for a short run).
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gate64_iphttps::framing::{Deframer, LINK_MTU, StreamBuffer};
use gate64_wire::ipv6;
use std::hint::black_box;

const STREAM_LEN: usize = 64 * 1024;

fn stream() -> Vec<u8> {
    let mut p = vec![0x5a; LINK_MTU];
    ipv6::emit_header(
        &mut p,
        (LINK_MTU - ipv6::HEADER_LEN) as u16,
        ipv6::NH_UDP,
        64,
        &"2001:db8:1:7::1".parse().unwrap(),
        &"2001:db8:ff::1".parse().unwrap(),
    )
    .unwrap();
    // 64 KiB: 51 whole packets and the start of the 52nd.
    p.iter().copied().cycle().take(STREAM_LEN).collect()
}

fn framing(c: &mut Criterion) {
    let s = stream();
    let d = Deframer::new(LINK_MTU);
    let mut g = c.benchmark_group("iphttps_deframe");
    g.throughput(Throughput::Bytes(STREAM_LEN as u64));
    g.bench_function("slice_64k_of_1280", |b| {
        b.iter(|| {
            let buf = black_box(&s[..]);
            let (mut at, mut n) = (0, 0usize);
            while let Ok(Some(len)) = d.next_packet(&buf[at..]) {
                at += len;
                n += 1;
            }
            black_box((at, n))
        })
    });
    let mut sb = StreamBuffer::default();
    g.bench_function("stream_buffer_64k_of_1280", |b| {
        b.iter(|| {
            // One 64 KiB TLS read copied in, then every complete packet taken out; the partial
            // packet left over is compacted by the next read.
            sb.extend_from_slice(black_box(&s));
            let mut n = 0usize;
            while let Ok(Some(p)) = sb.next_packet(&d) {
                n += p.len();
            }
            sb.clear();
            black_box(n)
        })
    });
    g.finish();
}

criterion_group!(benches, framing);
criterion_main!(benches);
