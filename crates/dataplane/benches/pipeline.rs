//! Pipeline hot paths: a client's data to the TUN device (from Teredo, and from IP-HTTPS
//! through its connection's judgement, without headroom), corporate traffic to a trusted
//! Teredo client among 100,000 peers, and RS -> RA; and the ESP path (`esp_path_1400`) of
//! a 1,400-byte inner packet in three layers measured in one run: AES-256-GCM alone (the
//! floor: ring's, which gate64-esp calls, with aws-lc's beside it), gate64's ESP seal + encapsulate and decapsulate + open, and the whole dataplane
//! step from a TUN buffer to the Teredo datagram and back among 1,500 IPsec clients. After
//! the run it prints each ESP-path case in CPU cycles per inner byte (`cycles_per_byte`).
//!
//! `cargo bench -p gate64-dataplane` (add `-- --quick` for a short run).
#![allow(missing_docs)]

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use gate64_dataplane::{
    ClientQueue, DataplaneConfig, HEADROOM, IphttpsLink, Prefix, Shared, Stats, Verdict, Worker,
};
use gate64_esp::{
    ChildSaPair, Cipher, Inbound, Lifetime, Outbound, Peer, SaDb, SaKeys, SaParams, Selector,
    TunnelKind,
};
use gate64_iphttps::server::{Connection, Handshake, ServerConfig as LinkConfig};
use gate64_teredo::{Address, RelayConfig, ServerConfig, addr};
use gate64_wire::{icmpv6, ipv6, teredo as tw, udp};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3546);
const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 5);
const PACKET: usize = 1280;
const PEERS: u32 = 100_000;

fn config() -> DataplaneConfig {
    DataplaneConfig {
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
        iphttps_peer_prefix: None,
        nat64: None,
        binding_log: None,
    }
}

fn worker() -> Worker {
    Worker::new(Shared::new(config()), Arc::new(Stats::default()))
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

// The ESP path: AES-GCM alone, gate64's ESP, and the whole dataplane step.

/// Inner packet of the ESP-path cases.
const ESP_INNER: usize = 1400;
/// Clients with a child SA each, as at the capacity bench's 1,500-client step.
const ESP_CLIENTS: u32 = 1500;
/// gate64's IPsec endpoint.
const ENDPOINT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x500);
/// The clients' UDP port for ESP in UDP (RFC 3948).
const NAT_T_CLIENT_PORT: u16 = 4501;
/// Packets made ready per timed batch where a case needs fresh ones (a new sequence number
/// each): about 220 kB of buffers, what a NIC ring holds.
const ESP_BATCH: u64 = 128;
/// The `esp_path_1400` cases, in the order `cycles_per_byte` prints them.
const ESP_CASES: [&str; 8] = [
    "aes256gcm_seal",
    "aes256gcm_open",
    "aws_lc_aes256gcm_seal",
    "aws_lc_aes256gcm_open",
    "esp_seal_encap",
    "esp_decap_open",
    "dataplane_tun_to_client",
    "dataplane_client_to_tun",
];

/// Packets `dataplane_tun_to_client` and `dataplane_client_to_tun` ran through the worker in
/// this run, warm-up and profiling included: with `perf record` the CPU samples under
/// `Worker::handle_tun` / `Worker::handle_teredo` over these counts are CPU time per packet
/// whatever else the machine runs (criterion's figures are wall time).
static DATAPLANE_CALLS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// AES-256-GCM with a 32-bit sequence number (no ESN), the corporate /48 on gate64's side and
/// the client's inner address on the other.
fn esp_params(spi: u32, key_byte: u8, inner: Ipv6Addr) -> SaParams {
    let cipher = Cipher::AesGcm16_256;
    SaParams {
        spi,
        keys: SaKeys {
            cipher,
            key: (0..cipher.keymat_len() as u8)
                .map(|i| i ^ key_byte)
                .collect(),
        },
        esn: false,
        lifetime: Lifetime::UNLIMITED,
        created: Instant::now(),
        local_ts: vec![Selector::prefix("2001:db8:100::/48".parse().unwrap())],
        remote_ts: vec![Selector::address(IpAddr::V6(inner))],
    }
}

/// A Teredo client with an intranet child SA.
struct EspClient {
    mapped: SocketAddrV4,
    outer: Ipv6Addr,
    inner: Ipv6Addr,
    /// The client's sealing half (what gate64 opens with).
    seal: Outbound,
}

/// A worker with IPsec required and `ESP_CLIENTS` Teredo clients, each with one child SA
/// (ESP in UDP) and each a verified Teredo peer (its first ESP packet went through).
fn esp_worker() -> (Worker, Vec<EspClient>) {
    let mut cfg = config();
    cfg.require_ipsec = true;
    cfg.ipsec_endpoint = Some(ENDPOINT);
    cfg.self_addresses = vec![ENDPOINT.into()];
    cfg.ipsec_pool = Some(Prefix::new("fd00:c1::".parse().unwrap(), 112));
    let sadb = Arc::new(SaDb::new());
    cfg.sadb = Some(Arc::clone(&sadb));
    let mut w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
    let pool = u128::from(Ipv6Addr::new(0xfd00, 0xc1, 0, 0, 0, 0, 0, 0));
    let clients: Vec<EspClient> = (0..ESP_CLIENTS)
        .map(|k| {
            let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + k);
            let mapped = SocketAddrV4::new(ip, 40000);
            let outer = teredo(mapped);
            let inner = Ipv6Addr::from(pool + u128::from(k) + 1);
            let inbound = esp_params(0x1000_0000 + k, k as u8, inner);
            let outbound = esp_params(0x2000_0000 + k, !(k as u8), inner);
            let seal = Outbound::new(&inbound).unwrap();
            sadb.install(ChildSaPair {
                inbound,
                outbound,
                peer: Peer {
                    outer,
                    native: None,
                    udp_encap: Some(NAT_T_CLIENT_PORT),
                    inner: vec![inner.into()],
                },
                tunnel: TunnelKind::Intranet,
                ike_spi: u64::from(k) + 1,
            })
            .unwrap();
            EspClient {
                mapped,
                outer,
                inner,
                seal,
            }
        })
        .collect();
    for c in &clients {
        let (mut buf, start, end) = esp_from(c);
        let v = w.handle_teredo(Instant::now(), PRIMARY, c.mapped, &mut buf, start, end);
        assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
    }
    (w, clients)
}

/// Writes the IPv6 and UDP headers of an `ESP_INNER`-byte packet from `src` to `dst` at
/// `buf[at..]`, leaving the payload as it is.
fn inner_headers(buf: &mut [u8], at: usize, src: &Ipv6Addr, dst: &Ipv6Addr) {
    let plen = u16::try_from(ESP_INNER - ipv6::HEADER_LEN).unwrap();
    ipv6::emit_header(&mut buf[at..], plen, ipv6::NH_UDP, 64, src, dst).unwrap();
    let u = &mut buf[at + ipv6::HEADER_LEN..];
    u[..4].copy_from_slice(&[0x13, 0x89, 0x13, 0x89]);
    u[4..6].copy_from_slice(&plen.to_be_bytes());
    u[6..8].fill(0);
}

/// Client `c`'s next ESP packet to the endpoint as a Teredo datagram's payload at `HEADROOM`
/// of a driver-sized buffer: an `ESP_INNER`-byte UDP packet from its inner address to the
/// corporate host, sealed, in UDP 4500 (RFC 3948) in IPv6 from its Teredo address.
fn esp_from(c: &EspClient) -> (Vec<u8>, usize, usize) {
    let front = ipv6::HEADER_LEN + udp::HEADER_LEN;
    let at = HEADROOM + front;
    let esp_len = c.seal.cipher().esp_len(ESP_INNER);
    let mut buf = vec![0x5a; at + esp_len + 256];
    inner_headers(&mut buf, at + c.seal.header_len(), &c.inner, &CORP_HOST);
    let n = c.seal.seal(&mut buf, at, ESP_INNER, 41).unwrap();
    let end = at + n;
    let plen = u16::try_from(end - HEADROOM - ipv6::HEADER_LEN).unwrap();
    let out = &mut buf[HEADROOM..end];
    ipv6::emit_header(out, plen, ipv6::NH_UDP, 64, &c.outer, &ENDPOINT).unwrap();
    udp::emit_over_v6(
        &mut out[ipv6::HEADER_LEN..],
        (&c.outer, &ENDPOINT),
        NAT_T_CLIENT_PORT,
        4500,
    )
    .unwrap();
    (buf, HEADROOM, end)
}

fn gcm_nonce(seq: u64) -> [u8; 12] {
    let mut n = [7u8; 12];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    n
}

/// The floor's cases for one AES-GCM implementation: `seal` and `open` of what ESP encrypts
/// (inner packet, padding, Pad Length, Next Header) with ESP's 8-byte AAD.
macro_rules! aes_gcm_floor {
    ($g:expr, $aead:path, $prefix:literal, $len:expr) => {{
        use $aead as aead;
        let key =
            aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_256_GCM, &[0x42; 32]).unwrap());
        let aad = [1u8; 8];
        let nonce = |seq| aead::Nonce::assume_unique_for_key(gcm_nonce(seq));
        let mut body = vec![0x45u8; $len];
        let mut seq = 0u64;
        $g.bench_function(concat!($prefix, "aes256gcm_seal"), |b| {
            b.iter(|| {
                seq += 1;
                let tag = key
                    .seal_in_place_separate_tag(
                        nonce(seq),
                        aead::Aad::from(aad),
                        black_box(&mut body),
                    )
                    .unwrap();
                black_box(tag)
            })
        });
        let mut sealed = body.clone();
        let tag = key
            .seal_in_place_separate_tag(nonce(1), aead::Aad::from(aad), &mut sealed)
            .unwrap();
        sealed.extend_from_slice(tag.as_ref());
        $g.bench_function(concat!($prefix, "aes256gcm_open"), |b| {
            b.iter_batched_ref(
                || sealed.clone(),
                |ct| {
                    key.open_in_place(nonce(1), aead::Aad::from(aad), ct)
                        .map(|p| p.len())
                        .unwrap()
                },
                BatchSize::NumIterations(ESP_BATCH),
            )
        });
    }};
}

fn esp_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("esp_path_1400");
    g.throughput(Throughput::Bytes(ESP_INNER as u64));
    let cipher = Cipher::AesGcm16_256;
    let esp_len = cipher.esp_len(ESP_INNER);
    let header = cipher.header_len();

    // The floor, through the library gate64-esp calls for AES-GCM (ring), and aws-lc's (what
    // gate64-esp called before, and still calls for AES-GMAC) beside it.
    aes_gcm_floor!(g, ring::aead, "", esp_len - header - 16);
    aes_gcm_floor!(g, aws_lc_rs::aead, "aws_lc_", esp_len - header - 16);

    // gate64's ESP alone: seal, then the outer IPv6 and UDP headers (with the UDP checksum,
    // mandatory over IPv6) in front; and back: the outer headers parsed (the ICV, not the
    // UDP checksum, vouches for the bytes, as in the dataplane), the SPI read and the packet
    // opened (anti-replay, ICV, trailer).
    let client = EspClient {
        mapped: SocketAddrV4::new(Ipv4Addr::new(100, 64, 0, 1), 40000),
        outer: teredo(SocketAddrV4::new(Ipv4Addr::new(100, 64, 0, 1), 40000)),
        inner: "fd00:c1::1".parse().unwrap(),
        seal: Outbound::new(&esp_params(0x0102_0304, 1, "fd00:c1::1".parse().unwrap())).unwrap(),
    };
    let front = ipv6::HEADER_LEN + udp::HEADER_LEN;
    let mut buf = vec![0x45u8; front + esp_len];
    g.bench_function("esp_seal_encap", |b| {
        b.iter(|| {
            let n = client
                .seal
                .seal(black_box(&mut buf), front, ESP_INNER, 41)
                .unwrap();
            let out = &mut buf[..front + n];
            let plen = u16::try_from(out.len() - ipv6::HEADER_LEN).unwrap();
            ipv6::emit_header(out, plen, ipv6::NH_UDP, 64, &ENDPOINT, &client.outer).unwrap();
            udp::emit_over_v6(
                &mut out[ipv6::HEADER_LEN..],
                (&ENDPOINT, &client.outer),
                4500,
                NAT_T_CLIENT_PORT,
            )
            .unwrap();
            black_box(out.len())
        })
    });
    let inbound = Inbound::new(&esp_params(0x0102_0304, 1, client.inner)).unwrap();
    g.bench_function("esp_decap_open", |b| {
        b.iter_batched_ref(
            || esp_from(&client),
            |(buf, start, end)| {
                let pkt = ipv6::Packet::new_checked(&buf[*start..*end]).unwrap();
                assert_eq!(pkt.dst(), ENDPOINT);
                let esp_at = *start + ipv6::HEADER_LEN;
                let d = udp::Packet::new_checked(&buf[esp_at..*end]).unwrap();
                assert_eq!(d.dst_port(), 4500);
                let esp = &mut buf[esp_at + udp::HEADER_LEN..*end];
                assert_eq!(gate64_esp::spi_of(esp), Some(0x0102_0304));
                inbound.open(esp).unwrap()
            },
            BatchSize::NumIterations(ESP_BATCH),
        )
    });

    // The whole dataplane step among 1,500 clients, a different client's SA each packet:
    // a corporate host's packet from the TUN to the Teredo datagram for its client (policy,
    // SA lookup by inner address, seal, outer headers, Teredo relay), and a client's ESP
    // from its Teredo datagram to the TUN (SA lookup by SPI, open, selectors, policy).
    let (mut w, clients) = esp_worker();
    let now = Instant::now();
    let mut buf = vec![0u8; HEADROOM + ESP_INNER + 256];
    let (start, end) = (HEADROOM, HEADROOM + ESP_INNER);
    let mut k = 0;
    for c in &clients {
        inner_headers(&mut buf, start, &CORP_HOST, &c.inner);
        let v = w.handle_tun(now, &mut buf, start, end);
        assert!(
            matches!(v, Verdict::Udp { to, .. } if to == c.mapped),
            "{v:?}"
        );
    }
    g.bench_function("dataplane_tun_to_client", |b| {
        b.iter(|| {
            let c = &clients[k];
            k = (k + 1) % clients.len();
            // Only the headers are written again: sealing turned the rest into ciphertext,
            // and sealing that costs the same.
            inner_headers(&mut buf, start, &CORP_HOST, &c.inner);
            DATAPLANE_CALLS[0].fetch_add(1, Relaxed);
            black_box(w.handle_tun(now, black_box(&mut buf), start, end))
        })
    });
    let mut k = 0;
    g.bench_function("dataplane_client_to_tun", |b| {
        b.iter_batched_ref(
            || {
                let c = &clients[k];
                k = (k + 1) % clients.len();
                (esp_from(c), c.mapped)
            },
            |((buf, start, end), mapped)| {
                DATAPLANE_CALLS[1].fetch_add(1, Relaxed);
                w.handle_teredo(now, PRIMARY, *mapped, buf, *start, *end)
            },
            BatchSize::NumIterations(ESP_BATCH),
        )
    });
    g.finish();
    let drops: u64 = gate64_dataplane::DropReason::ALL
        .iter()
        .map(|&r| w.stats().drops(r))
        .sum();
    assert_eq!(drops, 0, "the ESP path dropped packets");
}

/// Prints each `esp_path_1400` case criterion measured in this run (its results newer than
/// `since`) in CPU cycles per inner byte: the median time per packet times the clock, over
/// 1,400 bytes. The clock is the "cpu MHz" of `/proc/cpuinfo`: the VMs these figures come
/// from expose no cycle counter (`perf stat -e cycles` says "not supported"), so this is
/// wall time at the nominal clock, and on a loaded machine it includes time the bench thread
/// waited for a core.
fn cycles_per_byte(since: std::time::SystemTime) {
    let Some(mhz) = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("cpu MHz"))
            .and_then(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
    }) else {
        println!("esp_path_1400: no \"cpu MHz\" in /proc/cpuinfo, no cycles per byte");
        return;
    };
    let dir = criterion_dir().join("esp_path_1400");
    let mut header = false;
    for case in ESP_CASES {
        let path = dir.join(case).join("new").join("estimates.json");
        let fresh = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= since);
        let median = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["median"]["point_estimate"].as_f64());
        let (true, Some(ns)) = (fresh, median) else {
            continue;
        };
        if !header {
            println!("\nesp_path_1400 in cycles per inner byte at {mhz} MHz (/proc/cpuinfo):");
            header = true;
        }
        let cpb = ns * mhz / 1000.0 / ESP_INNER as f64;
        println!("  {case:<26} {ns:>9.1} ns  {cpb:>6.2} cycles/byte");
    }
    let calls = DATAPLANE_CALLS.each_ref().map(|c| c.load(Relaxed));
    if calls.iter().any(|&n| n > 0) {
        println!(
            "esp_path_1400 worker calls: tun_to_client {}, client_to_tun {}",
            calls[0], calls[1]
        );
    }
}

/// Where criterion writes its results: as criterion decides it, with the target directory
/// of this binary (target/release/deps/..) where no variable names one.
fn criterion_dir() -> std::path::PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return std::path::PathBuf::from(target).join("criterion");
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("criterion")))
        .unwrap_or_else(|| "target/criterion".into())
}

criterion_group!(
    benches,
    teredo_to_tun,
    iphttps_to_tun,
    tun_to_teredo,
    rs_to_ra,
    esp_path
);

fn main() {
    let since = std::time::SystemTime::now();
    benches();
    Criterion::default().configure_from_args().final_summary();
    cycles_per_byte(since);
}
