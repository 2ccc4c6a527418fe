//! Reassembly of fragments to the IPsec endpoint (`dataplane/src/reassembly.rs`), through a
//! `Worker` as a driver feeds it: Teredo on, the endpoint `2001:db8:100::500`, IPsec required
//! without SAs (a whole datagram that is IKE reaches the TUN, ESP is `esp_unknown_spi`), and an
//! IP-HTTPS pool. The input is a program: each operation sends a fragment built from fields
//! (client, Identification, offset, M, length from a set around the floor, data that makes a
//! whole datagram IKE or not), a fragment with arbitrary bytes after the fixed header (the
//! Fragment header itself fuzzed), or runs the tick after moving the clock. Seven Teredo
//! mappings and one IP-HTTPS /64 share the worker, so per-client shares, a full table and
//! expiry are reached. The worker and a forward-only clock live across runs, as in a driver.
//!
//! Checked: no panic; a `Drop` verdict counts at least one drop (its own, plus the fragments
//! of a datagram it spoiled), a fragment never comes back as `Tun` or `Udp` (a whole datagram
//! is queued), no call counts more drops than the table can hold fragments; what reaches the
//! TUN is an IPv6 packet to the endpoint with its Payload Length, never a fragment.
//!
//! Input: `[op][fields...]...`.
#![no_main]

use gate64_dataplane::{
    DataplaneConfig, DropReason, HEADROOM, IphttpsLink, Prefix, Shared, Stats, Verdict, Worker,
};
use gate64_teredo::{Address, RelayConfig, ServerConfig};
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
const ENDPOINT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x500);
const IPHTTPS_POOL: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0, 0, 0, 0, 0);
/// The IP-HTTPS client's /64 and its address in it.
const BOB: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0x6, 0, 0, 0, 0);
const BOB_ADDR: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0x6, 0, 0, 0, 0xb);
/// Most drops one call may count: its own, and every fragment the table holds.
const MAX_DROPS_PER_CALL: u64 = 1 + 16 * 64;
/// Non-final fragment lengths around the floor (512) and what honest clients send.
const LENGTHS: [usize; 8] = [0, 8, 504, 512, 1232, 1240, 1236, 16];

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
            self_addresses: vec![IpAddr::V6(ENDPOINT)],
            dns64_listen: Vec::new(),
            ike_per_client_per_sec: 100_000,
            require_ipsec: true,
            ipsec_endpoint: Some(ENDPOINT),
            ipsec_pool: None,
            ipsec4: None,
            sadb: None,
            rs_per_sec: 10,
            rs_burst: 10,
            iphttps_prefix: Some(Prefix::new(IPHTTPS_POOL, 48)),
            iphttps_peer_prefix: None,
            nat64: None,
            binding_log: None,
        })
    })
    .clone()
}

/// A clock shared by every run that never goes back.
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

/// Client `k`: Teredo mappings 0-6, the IP-HTTPS client for 7.
fn source(k: u8) -> (Option<SocketAddrV4>, Ipv6Addr) {
    if k % 8 == 7 {
        return (None, BOB_ADDR);
    }
    let mapping = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3546 + u16::from(k % 8));
    let address = Address {
        server: PRIMARY,
        flags: 0x2c5a,
        mapped: mapping,
    };
    (Some(mapping), address.encode())
}

/// A packet from `src` to the endpoint whose fixed header announces a Fragment header and
/// whose payload is `payload`.
fn packet(src: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; ipv6::HEADER_LEN + payload.len()];
    let plen = u16::try_from(payload.len()).unwrap_or(u16::MAX);
    ipv6::emit_header(&mut b, plen, ipv6::NH_FRAGMENT, 64, &src, &ENDPOINT).unwrap();
    b[ipv6::HEADER_LEN..].copy_from_slice(payload);
    b
}

/// A fragment built from fields read off `data`.
fn fragment(data: &mut &[u8], src: Ipv6Addr) -> Vec<u8> {
    let ident = u32::from(byte(data) % 4);
    let field = u16::from_be_bytes([byte(data), byte(data)]);
    let (offset, more) = (field >> 3, field & 1 == 1);
    let choice = byte(data);
    let len = match choice % 16 {
        i @ 0..8 => LENGTHS[usize::from(i)],
        _ => usize::from(u16::from_be_bytes([byte(data), byte(data)])) % 1500,
    };
    let next_header = match choice >> 4 {
        0 => ipv6::NH_FRAGMENT,
        1 => 50,
        n => {
            if n & 1 == 0 {
                ipv6::NH_UDP
            } else {
                byte(data)
            }
        }
    };
    let mut payload = vec![0u8; ipv6::FRAG_HEADER_LEN + len];
    let repr = ipv6::FragmentRepr {
        next_header,
        offset: offset & 0x1fff,
        more,
        ident,
    };
    repr.emit(&mut payload).unwrap();
    let start = usize::from(offset & 0x1fff) * 8;
    for (i, d) in payload[ipv6::FRAG_HEADER_LEN..].iter_mut().enumerate() {
        // UDP to port 500 at the datagram's start: a whole one is IKE.
        *d = match start + i {
            2 => 0x01,
            3 => 0xf4,
            n => n as u8,
        };
    }
    packet(src, &payload)
}

fn drain(w: &mut Worker) {
    while let Some(t) = w.poll_transmit() {
        assert!(
            gate64_wire::teredo::Packet::parse(&t.data).is_ok(),
            "a Teredo datagram"
        );
    }
    while let Some(p) = w.poll_tun_write() {
        let pkt = ipv6::Packet::new_checked(&p).expect("an IPv6 packet for the TUN");
        assert_eq!(pkt.total_len(), p.len(), "the Payload Length was set");
        assert_eq!(pkt.dst(), ENDPOINT);
        assert_ne!(pkt.next_header(), ipv6::NH_FRAGMENT, "never a fragment");
    }
}

fn worker() -> &'static Mutex<Worker> {
    static W: OnceLock<Mutex<Worker>> = OnceLock::new();
    W.get_or_init(|| Mutex::new(Worker::new(shared(), Arc::new(Stats::default()))))
}

fuzz_target!(|input: &[u8]| {
    if input.len() > 200_000 {
        return;
    }
    let mut guard = worker().lock().unwrap_or_else(PoisonError::into_inner);
    let w = &mut *guard;
    let stats = Arc::clone(w.stats());
    let mut data = input;
    let mut ops = 0;
    while !data.is_empty() && ops < 256 {
        ops += 1;
        let op = byte(&mut data);
        let t = now(Duration::from_millis(u64::from(op >> 5) * 50));
        let (mapping, src) = source(op >> 2);
        let pkt = match op % 4 {
            0 | 1 => fragment(&mut data, src),
            2 => packet(src, chunk(&mut data)),
            _ => {
                let later = Duration::from_millis(u64::from(byte(&mut data)) * 40);
                w.handle_timeout(now(later), 0, 1);
                drain(w);
                continue;
            }
        };
        let before = total(&stats);
        let v = match mapping {
            Some(remote) => {
                let mut buf = vec![0u8; HEADROOM + pkt.len() + 256];
                buf[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(&pkt);
                let end = HEADROOM + pkt.len();
                w.handle_teredo(t, PRIMARY, remote, &mut buf, HEADROOM, end)
            }
            // IP-HTTPS packets lie back to back: no headroom in front.
            None => {
                let mut buf = pkt.clone();
                let end = buf.len();
                let mut conn = link_up(BOB, t);
                let mut link = IphttpsLink {
                    conn: &mut conn,
                    replies: &Replies,
                };
                w.handle_iphttps(t, &mut link, &mut buf, 0, end, 0)
            }
        };
        let counted = total(&stats) - before;
        match v {
            Verdict::Drop(d) => assert!(counted >= 1, "{d:?} counted"),
            Verdict::Consumed => {}
            other => panic!("a fragment came back as {other:?}"),
        }
        assert!(counted <= MAX_DROPS_PER_CALL, "{counted} drops in one call");
        drain(w);
    }
});
