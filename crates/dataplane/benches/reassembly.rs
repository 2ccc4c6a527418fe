//! Fragments to the IPsec endpoint, through `Worker::handle_teredo` as a driver hands them
//! over (the Teredo stage included): an honest client's datagram in two fragments that
//! completes (1,400 bytes of IKE, which the road queues for the TUN), and what an attacker
//! sends: 8-byte fragments at increasing offsets (refused at the floor) and 512-byte fragments
//! of datagrams that never complete (kept, until the client's share makes it give up its own
//! oldest).
//!
//! `cargo bench -p gate64-dataplane --bench reassembly` (add `-- --quick` for a short run).
//! Criterion's time is per iteration; each iteration is one fragment except for
//! `honest_two_fragments`, which sends two.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gate64_dataplane::{
    DataplaneConfig, DropReason, HEADROOM, Prefix, Shared, Stats, Verdict, Worker,
};
use gate64_teredo::{Address, RelayConfig, ServerConfig};
use gate64_wire::ipv6;
use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Instant;

const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3546);
const ENDPOINT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x500);

fn worker() -> Worker {
    let cfg = DataplaneConfig {
        teredo: Some(ServerConfig {
            primary: PRIMARY,
            secondary: Ipv4Addr::new(192, 0, 2, 2),
            port: 3544,
            allow_loopback: false,
            mtu_option: Some(1280),
        }),
        relay: RelayConfig::default(),
        corp_prefixes: vec![Prefix::new("2001:db8:100::".parse().unwrap(), 48)],
        corp_address: "2001:db8:100::1".parse().unwrap(),
        self_addresses: vec![ENDPOINT.into()],
        dns64_listen: Vec::new(),
        require_ipsec: true,
        ipsec_endpoint: Some(ENDPOINT),
        ipsec4: None,
        ipsec_pool: None,
        sadb: None,
        // The honest bench measures reassembly, not the IKE rate limiter's refusals.
        ike_per_client_per_sec: u32::MAX,
        rs_per_sec: 1,
        rs_burst: 1,
        iphttps_prefix: None,
        iphttps_peer_prefix: None,
        nat64: None,
        binding_log: None,
    };
    Worker::new(Shared::new(cfg), Arc::new(Stats::default()))
}

fn teredo(mapped: SocketAddrV4) -> Ipv6Addr {
    Address {
        server: PRIMARY,
        flags: 0x2c5a,
        mapped,
    }
    .encode()
}

/// A fragment of datagram `id` from the client, `data` at byte `offset`, framed at
/// `HEADROOM` in a driver-sized buffer: `(buf, start, end)`.
fn fragment(id: u32, offset: usize, more: bool, data: &[u8]) -> (Vec<u8>, usize, usize) {
    let total = ipv6::HEADER_LEN + ipv6::FRAG_HEADER_LEN + data.len();
    let mut buf = vec![0u8; HEADROOM + total + 256];
    let p = &mut buf[HEADROOM..];
    let plen = u16::try_from(ipv6::FRAG_HEADER_LEN + data.len()).unwrap();
    ipv6::emit_header(p, plen, ipv6::NH_FRAGMENT, 64, &teredo(CLIENT), &ENDPOINT).unwrap();
    let repr = ipv6::FragmentRepr {
        next_header: ipv6::NH_UDP,
        offset: u16::try_from(offset / 8).unwrap(),
        more,
        ident: id,
    };
    repr.emit(&mut p[ipv6::HEADER_LEN..]).unwrap();
    p[ipv6::HEADER_LEN + ipv6::FRAG_HEADER_LEN..][..data.len()].copy_from_slice(data);
    (buf, HEADROOM, HEADROOM + total)
}

fn send(w: &mut Worker, now: Instant, f: &mut (Vec<u8>, usize, usize)) -> Verdict {
    w.handle_teredo(now, PRIMARY, CLIENT, &mut f.0, f.1, f.2)
}

/// IKE (UDP to port 500) with `len` bytes of UDP payload, in two fragments of datagram `id`.
fn honest_pair(id: u32, len: usize) -> [(Vec<u8>, usize, usize); 2] {
    let mut udp = vec![0x11u8; 8 + len];
    udp[..4].copy_from_slice(&[0x11, 0x94, 0x01, 0xf4]);
    let (first, rest) = udp.split_at(1232);
    [
        fragment(id, 0, true, first),
        fragment(id, 1232, false, rest),
    ]
}

fn honest(c: &mut Criterion) {
    let mut w = worker();
    let now = Instant::now();
    let mut pair = honest_pair(1, 1400);
    for f in &mut pair {
        assert_eq!(send(&mut w, now, f), Verdict::Consumed);
    }
    assert!(w.poll_tun_write().is_some(), "the datagram completes");
    let mut g = c.benchmark_group("reassembly");
    g.throughput(Throughput::Elements(2));
    g.bench_function("honest_two_fragments", |b| {
        b.iter(|| {
            for f in &mut pair {
                black_box(send(&mut w, now, f));
            }
            black_box(w.poll_tun_write());
        })
    });
    g.finish();
}

fn attack(c: &mut Criterion) {
    let mut w = worker();
    let now = Instant::now();
    // The flood as it was reported: 8-byte fragments of one datagram at increasing offsets.
    let mut tiny: Vec<_> = (0..8191)
        .map(|i| fragment(2, i * 8, true, &[0u8; 8]))
        .collect();
    assert_eq!(
        send(&mut w, now, &mut tiny[0]),
        Verdict::Drop(DropReason::FragTooSmall)
    );
    // Datagrams 0..64 of 64 fragments' worth each, never finished: a fragment either adds
    // to one of the client's datagrams or starts one in place of its own oldest.
    let mut kept: Vec<_> = (0..64u32 * 8)
        .map(|i| fragment(i % 64, (i / 64) as usize * 512, true, &[0x42; 512]))
        .collect();
    let mut g = c.benchmark_group("reassembly");
    g.throughput(Throughput::Elements(1));
    let mut i = 0;
    g.bench_function("attack_tiny_fragment", |b| {
        b.iter(|| {
            i = (i + 1) % tiny.len();
            black_box(send(&mut w, now, &mut tiny[i]))
        })
    });
    g.bench_function("attack_never_completed_512", |b| {
        b.iter(|| {
            i = (i + 1) % kept.len();
            black_box(send(&mut w, now, &mut kept[i]))
        })
    });
    g.finish();
}

criterion_group!(benches, honest, attack);
criterion_main!(benches);
