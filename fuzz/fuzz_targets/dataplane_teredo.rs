//! The whole pipeline: the input as a Teredo datagram from a client, then as a packet from the
//! TUN device, then the relay's off-path transmits and timers. The peer table and the worker
//! (its rate limiters) are shared across runs (bounded), so state built by one input is seen by
//! the next, as in production; the clock only moves forward, as a worker's does.
#![no_main]

use gate64_dataplane::{
    DataplaneConfig, DropReason, HEADROOM, Prefix, Shared, Stats, Verdict, Worker,
};
use gate64_teredo::{RelayConfig, ServerConfig};
use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// The mapping encoded by `2001:0:c000:201:*:f225:39cc:9bf5`, the seeds' client.
const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3546);

fn shared() -> Arc<Shared> {
    static S: OnceLock<Arc<Shared>> = OnceLock::new();
    S.get_or_init(|| {
        Shared::new(DataplaneConfig {
            teredo: Some(ServerConfig {
                primary: PRIMARY,
                secondary: Ipv4Addr::new(192, 0, 2, 2),
                port: 3544,
                allow_loopback: false,
                mtu_option: Some(1280),
            }),
            relay: RelayConfig {
                max_peers: 4096,
                ..RelayConfig::default()
            },
            corp_prefixes: vec![Prefix::new("2001:db8:100::".parse().unwrap(), 48)],
            corp_address: "2001:db8:100::1".parse().unwrap(),
            self_addresses: Vec::new(),
            dns64_listen: Vec::new(),
            ike_per_client_per_sec: 1000,
            require_ipsec: true,
            ipsec_endpoint: None,
            ipsec_pool: None,
            ipsec4: None,
            sadb: None,
            rs_per_sec: 10,
            rs_burst: 10,
            iphttps_prefix: None,
            iphttps_peer_prefix: None,
            nat64: None,
            binding_log: None,
        })
    })
    .clone()
}

fn check(v: Verdict, len: usize, stats: &Stats, drops_before: u64) {
    let drops: u64 = DropReason::ALL.iter().map(|d| stats.drops(*d)).sum();
    match v {
        Verdict::Drop(d) => {
            assert_eq!(drops, drops_before + 1, "{d:?} counted once");
        }
        Verdict::Tun { start, end }
        | Verdict::Udp { start, end, .. }
        | Verdict::Native { start, end, .. } => {
            assert!(start <= end && end <= len, "{v:?}");
            assert_eq!(drops, drops_before);
        }
        Verdict::Consumed => assert_eq!(drops, drops_before),
    }
}

/// One worker for every run, as a driver thread keeps its worker: building one allocates
/// three 512 KiB rate-limiter tables, which cost more than the run itself.
fn worker() -> &'static Mutex<Worker> {
    static W: OnceLock<Mutex<Worker>> = OnceLock::new();
    W.get_or_init(|| Mutex::new(Worker::new(shared(), Arc::new(Stats::default()))))
}

/// A clock that moves 3 s per run, so no run sees an instant before the last run's timers.
fn clock() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(Instant::now);
    base + Duration::from_secs(3 * RUNS.fetch_add(1, Ordering::Relaxed))
}

fuzz_target!(|data: &[u8]| {
    if data.len() > 65_535 {
        return;
    }
    let mut guard = worker().lock().unwrap_or_else(PoisonError::into_inner);
    let w = &mut *guard;
    let stats = Arc::clone(w.stats());
    let now = clock();
    let total = |s: &Stats| DropReason::ALL.iter().map(|d| s.drops(*d)).sum::<u64>();

    let mut buf = vec![0u8; HEADROOM + data.len() + 256];
    let (start, end) = (HEADROOM, HEADROOM + data.len());
    buf[start..end].copy_from_slice(data);
    let before = total(&stats);
    let v = w.handle_teredo(now, PRIMARY, CLIENT, &mut buf, start, end);
    check(v, buf.len(), &stats, before);

    buf[start..end].copy_from_slice(data);
    let before = total(&stats);
    let v = w.handle_tun(now, &mut buf, start, end);
    check(v, buf.len(), &stats, before);
    if let Verdict::Udp {
        start: s, end: e, ..
    } = v
    {
        assert_eq!(&buf[s..e], &data[..e - s], "sent untouched");
    }

    while w.poll_transmit().is_some() {}
    w.handle_timeout(now + Duration::from_secs(3), 0, 1);
    while w.poll_transmit().is_some() {}
});
