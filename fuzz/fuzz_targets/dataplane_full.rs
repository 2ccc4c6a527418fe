//! The whole pipeline with every path on: Teredo server and relay, stateful NAT64 (Pref64
//! `2001:db8:64::/96`, pool4 `192.0.2.100`) and IP-HTTPS (pool `2001:db8:1::/48`, one
//! registered connection owning `2001:db8:1:6::/64`). The input is a program: each operation
//! hands a length-prefixed packet to `handle_teredo` (from the seeds' client or an arbitrary
//! mapping), `handle_iphttps` (on a link of the packet's source /64), `handle_tun`,
//! `handle_native_esp` (a UDP payload from that mapping to an `[ipsec] listen` socket), or runs the
//! timers, then drains `poll_transmit` and `poll_tun_write`. The shared state (peer table,
//! NAT64 tables, client table) and the worker (its rate limiters) live across runs, bounded, as
//! in production; the clock only moves forward.
//!
//! Checked: no panic; every `handle_*` counts exactly one drop when its verdict is `Drop` and
//! none otherwise; verdict ranges lie in the buffer; a packet queued for the IP-HTTPS
//! connection is IPv6 for its /64; off-path datagrams and TUN writes are well formed.
//!
//! Input: `[op][args...][len u16][packet]...`.
#![no_main]

use gate64_dataplane::{
    ClientQueue, DataplaneConfig, DropReason, HEADROOM, IphttpsLink, Prefix, Shared, Stats,
    Verdict, Worker,
};
use gate64_nat64::Nat64;
use gate64_teredo::{RelayConfig, ServerConfig};
use gate64_wire::ipv6;
use libfuzzer_sys::fuzz_target;

#[path = "shared/iphttps_link.rs"]
mod iphttps_link;
use iphttps_link::{Replies, link_up};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// The mapping encoded by `2001:0:c000:201:*:f225:39cc:9bf5`, the seeds' client.
const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3546);
const POOL4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
const IPHTTPS_POOL: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0, 0, 0, 0, 0);
/// The /64 of the registered IP-HTTPS connection.
const BOB: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0x6, 0, 0, 0, 0);

/// The registered connection's queue: checks what it is given and refuses every fourth
/// packet, so the full-queue drop runs too.
#[derive(Default)]
struct CheckedQueue(AtomicU64);

impl ClientQueue for CheckedQueue {
    fn push(&self, packet: &[u8]) -> bool {
        let p = ipv6::Packet::new_checked(packet).expect("only IPv6 is queued");
        assert_eq!(slash64(p.dst()), BOB, "queued for the /64 that owns it");
        self.0.fetch_add(1, Ordering::Relaxed) % 4 != 3
    }
}

fn slash64(a: Ipv6Addr) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(a) & !u128::from(u64::MAX))
}

fn nat64() -> Arc<Nat64> {
    let mut table = gate64_nat64::state::Config::new(vec![POOL4]);
    table.shards = 4;
    let nat = Nat64::new(gate64_nat64::Settings {
        prefix: gate64_nat64::Prefix::new("2001:db8:64::".parse().unwrap(), 96).unwrap(),
        table,
        translate: gate64_nat64::translate::Config::default(),
    })
    .expect("a valid NAT64 config");
    Arc::new(nat)
}

fn shared() -> Arc<Shared> {
    static S: OnceLock<Arc<Shared>> = OnceLock::new();
    S.get_or_init(|| {
        let shared = Shared::new(DataplaneConfig {
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
            self_addresses: vec![
                IpAddr::V4(PRIMARY),
                IpAddr::V4(POOL4),
                "2001:db8:100::1".parse().unwrap(),
            ],
            dns64_listen: vec!["[2001:db8:100::1]:53".parse().unwrap()],
            ike_per_client_per_sec: 1000,
            require_ipsec: false,
            ipsec_endpoint: None,
            ipsec_pool: None,
            ipsec4: None,
            sadb: None,
            rs_per_sec: 10,
            rs_burst: 10,
            iphttps_prefix: Some(Prefix::new(IPHTTPS_POOL, 48)),
            iphttps_peer_prefix: None,
            nat64: Some(nat64()),
            binding_log: None,
        });
        shared.iphttps_clients().insert(
            BOB,
            Arc::new(CheckedQueue::default()) as Arc<dyn ClientQueue>,
        );
        shared
    })
    .clone()
}

/// A clock shared by every run that never goes back: NAT64 and relay timers see time pass.
fn now(advance: Duration) -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    static OFFSET_MS: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(Instant::now);
    let ms = OFFSET_MS.fetch_add(advance.as_millis() as u64, Ordering::Relaxed);
    base + Duration::from_millis(ms) + advance
}

fn total(s: &Stats) -> u64 {
    DropReason::ALL.iter().map(|d| s.drops(*d)).sum()
}

fn check(v: Verdict, len: usize, stats: &Stats, drops_before: u64) {
    let drops = total(stats);
    match v {
        Verdict::Drop(d) => assert_eq!(drops, drops_before + 1, "{d:?} counted once"),
        Verdict::Tun { start, end }
        | Verdict::Udp { start, end, .. }
        | Verdict::Native { start, end, .. } => {
            assert!(start <= end && end <= len, "{v:?}");
            assert_eq!(drops, drops_before, "{v:?} counted no drop");
        }
        Verdict::Consumed => assert_eq!(drops, drops_before, "consumed counted no drop"),
    }
}

fn byte(data: &mut &[u8]) -> u8 {
    match data.split_first() {
        Some((&b, rest)) => {
            *data = rest;
            b
        }
        None => 0,
    }
}

fn chunk<'a>(data: &mut &'a [u8]) -> &'a [u8] {
    let n = match data {
        [a, b, ..] => usize::from(u16::from_be_bytes([*a, *b])).min(data.len() - 2),
        _ => return std::mem::take(data),
    };
    let part = &data[2..2 + n];
    *data = &data[2 + n..];
    part
}

fn drain(w: &mut Worker) {
    while let Some(t) = w.poll_transmit() {
        assert!(
            [PRIMARY, Ipv4Addr::new(192, 0, 2, 2)].contains(&t.from),
            "{:?}",
            t.from
        );
        assert!(
            gate64_wire::teredo::Packet::parse(&t.data).is_ok(),
            "a Teredo datagram"
        );
    }
    while let Some(p) = w.poll_tun_write() {
        let version = p.first().map(|b| b >> 4);
        assert!(matches!(version, Some(4 | 6)), "an IP packet for the TUN");
    }
}

/// One worker for every run, as a driver thread keeps its worker: building one allocates
/// three 512 KiB rate-limiter tables, which cost more than the run itself.
fn worker() -> &'static Mutex<Worker> {
    static W: OnceLock<Mutex<Worker>> = OnceLock::new();
    W.get_or_init(|| Mutex::new(Worker::new(shared(), Arc::new(Stats::default()))))
}

fuzz_target!(|input: &[u8]| {
    if input.len() > 65_535 {
        return;
    }
    let mut guard = worker().lock().unwrap_or_else(PoisonError::into_inner);
    let w = &mut *guard;
    let stats = Arc::clone(w.stats());
    let mut data = input;
    let mut ops = 0;
    while !data.is_empty() && ops < 16 {
        ops += 1;
        let op = byte(&mut data);
        let t = now(Duration::from_millis(u64::from(op >> 4) * 250));
        if op % 4 == 3 {
            // Timers for one of two worker parts, or for all.
            let (part, of) = [(0, 1), (0, 2), (1, 2)][usize::from(byte(&mut data) % 3)];
            w.handle_timeout(
                t + Duration::from_secs(u64::from(byte(&mut data))),
                part,
                of,
            );
            drain(w);
            continue;
        }
        let remote = if op & 4 == 0 {
            CLIENT
        } else {
            let ip = Ipv4Addr::new(byte(&mut data), byte(&mut data), 100, byte(&mut data));
            SocketAddrV4::new(ip, u16::from_be_bytes([byte(&mut data), byte(&mut data)]))
        };
        let pkt = chunk(&mut data);
        let mut buf = vec![0u8; HEADROOM + pkt.len() + 256];
        let (start, end) = (HEADROOM, HEADROOM + pkt.len());
        buf[start..end].copy_from_slice(pkt);
        let before = total(&stats);
        if op & 8 == 0 {
            w.start_batch();
        }
        let v = match op % 4 {
            0 => w.handle_teredo(t, PRIMARY, remote, &mut buf, start, end),
            1 => {
                // The connection of the packet's source /64 judges it, then the road; packets
                // lie back to back in a stream buffer, so there is no headroom.
                let prefix = ipv6::Packet::new_checked(pkt).map_or(BOB, |p| slash64(p.src()));
                let mut conn = link_up(prefix, t);
                let mut link = IphttpsLink {
                    conn: &mut conn,
                    replies: &Replies,
                };
                w.handle_iphttps(t, &mut link, &mut buf, start, end, 0)
            }
            2 if op & 64 != 0 => {
                let local = std::net::SocketAddr::from((Ipv4Addr::new(192, 0, 2, 10), 4500));
                w.handle_native_esp(t, local, remote.into(), &mut buf, start, end)
            }
            _ => w.handle_tun(t, &mut buf, start, end),
        };
        check(v, buf.len(), &stats, before);
        if let Verdict::Udp { to, .. } = v {
            assert!(!to.ip().is_unspecified(), "a datagram to 0.0.0.0");
        }
        drain(w);
    }
});
