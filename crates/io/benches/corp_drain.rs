//! The worker's CPU time per 2,048 packets from the corporate link, arriving in bursts of 16
//! every 50 µs (the TUN side of many clients' downlink). A worker that takes few packets per
//! wake-up pays an `epoll_wait`, a batch setup and a send per burst; one that drains to a
//! packet budget and counts the corporate side as work for interrupt moderation lets bursts
//! gather and takes them together. The corporate link is the no-root lab's UDP socket; the
//! packets are dropped by the dataplane (not IPv6), so the figure is the read and dispatch
//! cost alone. Criterion reports the worker thread's CPU time (`iter_custom`), not wall time.
//!
//! `cargo bench -p gate64-io --bench corp_drain --
//!     --warm-up-time 1 --measurement-time 5 --sample-size 10`
#![allow(missing_docs)]
#![forbid(unsafe_code)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gate64_dataplane::{DataplaneConfig, Direction, Shared, Side, Stats, Worker};
use gate64_io::{CorpLink, WorkerIo};
use gate64_sys::resource::ThreadCpuClock;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PACKETS: u64 = 2048;
const BURST: u64 = 16;
const GAP: Duration = Duration::from_micros(50);

fn config() -> DataplaneConfig {
    DataplaneConfig {
        teredo: None,
        relay: gate64_teredo::RelayConfig::default(),
        corp_prefixes: Vec::new(),
        corp_address: "2001:db8:100::1".parse().unwrap(),
        require_ipsec: true,
        ipsec_endpoint: None,
        ipsec4: None,
        ipsec_pool: None,
        sadb: None,
        rs_per_sec: 20,
        rs_burst: 40,
        iphttps_prefix: None,
        iphttps_peer_prefix: None,
        nat64: None,
        binding_log: None,
        self_addresses: Vec::new(),
        dns64_listen: Vec::new(),
        ike_per_client_per_sec: 1000,
    }
}

fn drain(c: &mut Criterion) {
    let corp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let sender = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    corp.connect(sender.local_addr().unwrap()).unwrap();
    corp.set_nonblocking(true).unwrap();
    sender.connect(corp.local_addr().unwrap()).unwrap();
    let stats = Arc::new(Stats::default());
    let dp = Worker::new(Shared::new(config()), Arc::clone(&stats));
    let io = WorkerIo {
        index: 0,
        count: 1,
        sockets: Vec::new(),
        corp: Arc::new(CorpLink::Socket(corp)),
        corp_mtu: 1280,
        native: Vec::new(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            tx.send(ThreadCpuClock::current().unwrap()).unwrap();
            gate64_io::udp::worker::run(io, dp, stop)
        })
    };
    let clock = rx.recv().unwrap();
    let mut g = c.benchmark_group("corp_drain");
    g.throughput(Throughput::Elements(PACKETS));
    g.bench_function("bursts_of_16", |b| {
        b.iter_custom(|iters| {
            let mut cpu = Duration::ZERO;
            for _ in 0..iters {
                let start = stats.packets(Side::Corpnet, Direction::Rx);
                let before = clock.elapsed();
                let mut next = Instant::now();
                for _ in 0..PACKETS / BURST {
                    for _ in 0..BURST {
                        sender.send(&[0u8; 64]).unwrap();
                    }
                    next += GAP;
                    while Instant::now() < next {
                        std::hint::spin_loop();
                    }
                }
                // Until all arrived, or none for 5 ms (a full socket buffer drops some).
                let mut seen = stats.packets(Side::Corpnet, Direction::Rx);
                while seen < start + PACKETS {
                    std::thread::sleep(Duration::from_millis(5));
                    let now = stats.packets(Side::Corpnet, Direction::Rx);
                    if now == seen {
                        break;
                    }
                    seen = now;
                }
                cpu += clock.elapsed() - before;
            }
            cpu
        })
    });
    g.finish();
    stop.store(true, Ordering::Relaxed);
    let _ = worker.join();
}

criterion_group!(benches, drain);
criterion_main!(benches);
