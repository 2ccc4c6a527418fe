//! Pipeline hot paths: a client's data to the TUN device (from Teredo, and from IP-HTTPS
//! through its connection's judgement, without headroom), corporate traffic to a trusted
//! Teredo client among 100,000 peers, and RS -> RA.
//!
//! `cargo bench -p gate64-dataplane` (add `-- --quick` for a short run).
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gate64_dataplane::{
    ClientQueue, DataplaneConfig, HEADROOM, IphttpsLink, Prefix, Shared, Stats, Verdict, Worker,
};
use gate64_iphttps::server::{Connection, Handshake, ServerConfig as LinkConfig};
use gate64_teredo::{Address, RelayConfig, ServerConfig, addr};
use gate64_wire::{icmpv6, ipv6, teredo as tw};
use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Instant;

const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3546);
const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 5);
const PACKET: usize = 1280;
const PEERS: u32 = 100_000;

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
        self_addresses: Vec::new(),
        dns64_listen: Vec::new(),
        require_ipsec: false,
        ipsec_endpoint: None,
        ipsec4: None,
        ipsec_pool: None,
        sadb: None,
        // The RS bench must measure RS -> RA, not the rate limiter's refusals.
        ike_per_client_per_sec: 1_000,
        rs_per_sec: u32::MAX,
        rs_burst: u32::MAX,
        iphttps_prefix: Some(Prefix::new("2001:db8:1::".parse().unwrap(), 48)),
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

/// A `total`-byte UDP-over-IPv6 packet at `HEADROOM` in a driver-sized buffer.
fn framed_udp(src: Ipv6Addr, dst: Ipv6Addr, total: usize) -> (Vec<u8>, usize, usize) {
    let mut buf = vec![0x5a; HEADROOM + total + 256];
    let plen = u16::try_from(total - ipv6::HEADER_LEN).unwrap();
    ipv6::emit_header(&mut buf[HEADROOM..], plen, ipv6::NH_UDP, 64, &src, &dst).unwrap();
    (buf, HEADROOM, HEADROOM + total)
}

/// Makes the client at `mapped` a trusted peer with its direct bubble.
fn trust(w: &mut Worker, now: Instant, mapped: SocketAddrV4) {
    let ll = addr::server_link_local(PRIMARY, 3544);
    let mut buf = vec![0u8; HEADROOM + ipv6::HEADER_LEN];
    ipv6::emit_header(
        &mut buf[HEADROOM..],
        0,
        ipv6::NH_NONE,
        255,
        &teredo(mapped),
        &ll,
    )
    .unwrap();
    let end = buf.len();
    let v = w.handle_teredo(now, PRIMARY, mapped, &mut buf, HEADROOM, end);
    assert_eq!(v, Verdict::Consumed);
}

fn teredo_to_tun(c: &mut Criterion) {
    let mut w = worker();
    let now = Instant::now();
    trust(&mut w, now, CLIENT);
    let (mut buf, start, end) = framed_udp(teredo(CLIENT), CORP_HOST, PACKET);
    assert!(matches!(
        w.handle_teredo(now, PRIMARY, CLIENT, &mut buf, start, end),
        Verdict::Tun { .. }
    ));
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Bytes(PACKET as u64));
    g.bench_function("teredo_to_tun", |b| {
        b.iter(|| black_box(w.handle_teredo(now, PRIMARY, CLIENT, black_box(&mut buf), start, end)))
    });
    g.finish();
}

fn tun_to_teredo(c: &mut Criterion) {
    let mut w = worker();
    let now = Instant::now();
    for i in 0..PEERS {
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + i);
        trust(&mut w, now, SocketAddrV4::new(ip, 40000));
    }
    trust(&mut w, now, CLIENT);
    assert_eq!(
        w.stats().packets(
            gate64_dataplane::Side::Internet,
            gate64_dataplane::Direction::Rx
        ),
        u64::from(PEERS) + 1
    );
    let (mut buf, start, end) = framed_udp(CORP_HOST, teredo(CLIENT), PACKET);
    assert!(matches!(
        w.handle_tun(now, &mut buf, start, end),
        Verdict::Udp { to: CLIENT, .. }
    ));
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Bytes(PACKET as u64));
    g.bench_function("tun_to_teredo", |b| {
        b.iter(|| black_box(w.handle_tun(now, black_box(&mut buf), start, end)))
    });
    g.finish();
}

fn rs_to_ra(c: &mut Criterion) {
    let mut w = worker();
    let now = Instant::now();
    // Miredo's 61-byte RS: auth header with a nonce, then the RS to ff02::2.
    let mut rs = [0u8; 61];
    let auth = tw::Auth {
        client_id: &[],
        auth_value: &[],
        nonce: *b"nonce-01",
        confirmation: 0,
    };
    auth.emit(&mut rs).unwrap();
    icmpv6::emit_router_solicitation(&mut rs[13..], &"fe80::ffff:ffff:ffff".parse().unwrap())
        .unwrap();
    let mut buf = vec![0u8; HEADROOM + 256];
    let (start, end) = (HEADROOM, HEADROOM + rs.len());
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Bytes(rs.len() as u64));
    g.bench_function("rs_to_ra", |b| {
        b.iter(|| {
            // The RA is written over the RS, so restore it (61 bytes) every time.
            buf[start..end].copy_from_slice(&rs);
            let v = w.handle_teredo(now, PRIMARY, CLIENT, black_box(&mut buf), start, end);
            debug_assert!(matches!(v, Verdict::Udp { .. }));
            black_box(v)
        })
    });
    g.finish();
}

/// An IP-HTTPS link's replies: the bench sends none.
struct NoReplies;

impl ClientQueue for NoReplies {
    fn push(&self, _: &[u8]) -> bool {
        true
    }
}

fn iphttps_to_tun(c: &mut Criterion) {
    let mut w = worker();
    let now = Instant::now();
    let prefix: Ipv6Addr = "2001:db8:1:5::".parse().unwrap();
    let cfg = LinkConfig::default();
    let request = gate64_iphttps::ClientConnection::new(&cfg.path, "gate64.bench", 1).request();
    let mut conn = Connection::new(Arc::new(cfg), prefix, now);
    let up = conn.handle_input(
        now,
        &request,
        "Sun, 06 Nov 1994 08:49:37 GMT",
        &mut Vec::new(),
    );
    assert!(matches!(up, Ok(Handshake::LinkUp { .. })));
    // Packets lie back to back in the driver's read buffer: no headroom.
    let client: Ipv6Addr = "2001:db8:1:5::a".parse().unwrap();
    let (mut buf, _, _) = framed_udp(client, CORP_HOST, PACKET);
    let (start, end) = (HEADROOM, HEADROOM + PACKET);
    let mut link = IphttpsLink {
        conn: &mut conn,
        replies: &NoReplies,
    };
    assert!(matches!(
        w.handle_iphttps(now, &mut link, &mut buf, start, end, 0),
        Verdict::Tun { .. }
    ));
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Bytes(PACKET as u64));
    g.bench_function("iphttps_to_tun", |b| {
        b.iter(|| black_box(w.handle_iphttps(now, &mut link, black_box(&mut buf), start, end, 0)))
    });
    g.finish();
}

criterion_group!(
    benches,
    teredo_to_tun,
    iphttps_to_tun,
    tun_to_teredo,
    rs_to_ra
);
criterion_main!(benches);
