//! Scale-out with a resilient next-hop group: IPsec clients stay on their node when another
//! node joins.
//!
//! ```text
//!  rscli: gate64 bench load ──┐                            ┌─ rsna: gate64 node A (10.0.1.2)
//!  (IP-HTTPS + both IPsec     │ rsrouter: 198.51.100.100   │
//!   tunnels per client)       ├─ via nhid 100, resilient ──┤
//!  rsnew: gate64 connect ─────┤                            └─ rsnb: gate64 node B (10.0.2.2)
//!         iphttps             └─ rscorp: UDP echo on 2001:db8:100:1::2 and ::3
//! ```
//!
//! Both nodes listen for IP-HTTPS on 198.51.100.100 and terminate IKE and ESP inside it, so a
//! client's IPsec SAs live on the node its TCP connection reaches. The router sends that
//! address through a resilient next-hop group (`ip nexthop ... type resilient`,
//! `unbalanced_timer 0`): buckets that carried traffic within `idle_timer` keep their node,
//! idle ones move. Each node hands out inner addresses from its own half of the pool
//! (`fd00:c1::/105`, `fd00:c1::80:0/105`) and IP-HTTPS /64s from its own prefix; the router
//! routes each back to its node (static routes here; BIRD announces them in
//! `scale_out.rs`).
//!
//! `netns_scale_out_resilient_join_and_leave`:
//! 1. Only node A is in the group: `GATE64_RESILIENT_CLIENTS` clients (default 1,000) come
//!    up on it, and each one's inner address reaches both echo hosts (one per tunnel).
//! 2. Node B joins the group. Asserted over more than `idle_timer` afterwards (the clients'
//!    buckets stay busy only through gate64's liveness checks and their answers): node A's
//!    IKE negotiation count and SA gauges unchanged, node B negotiated nothing, the
//!    generator saw no session end, every client kept its inner address, and each one's
//!    traffic still flows through both tunnels. How many buckets moved is printed. A new
//!    IP-HTTPS client then connects (again, from a new port each time) until a connection
//!    lands on node B.
//! 3. Node A leaves the group: its buckets move to node B, whose listener has no connection
//!    for them, so each client's TCP connection is reset; the clients connect again and
//!    authenticate again on node B (asserted: every client up with an address of node B's
//!    half, node B's negotiations grew by two per client). The time that took is printed.

use std::collections::BTreeMap;
use std::net::{Ipv6Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use gate64_testkit::{Metrics, Netns, Process, gate64_binary, netns_or_skip, wait_for};

use crate::bench_load::{field, udp_echo};
use crate::common::{
    addresses, env_count, path_str, resilient_group, run_timed, spawn_bench_load, status_text,
};
use crate::failover::metrics;
use crate::scale_out_takeover::{serve_node, wire_node};

const ANYCAST: &str = "198.51.100.100";
/// gate64's IKE endpoint on both nodes (`corpnet.address6`).
const ENDPOINT: &str = "2001:db8:100::1";
/// Reached by the infrastructure tunnel.
const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 2);
/// Reached by the intranet tunnel only.
const INTRANET_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 3);
const CORP_PREFIX: &str = "2001:db8:100::/48";
/// The generator's view of the pool: both nodes' halves.
const POOL6: &str = "fd00:c1::/104";
const ECHO_PORT: u16 = 7007;
/// The clients' source addresses on the client link.
const SOURCE_V4: &str = "203.0.113.128/25";
const SOURCES: std::ops::RangeInclusive<u8> = 129..=254;
const CLIENTS: usize = 1_000;
/// gate64's liveness check interval: an idle client's TCP connection carries its answer at
/// least this often, which keeps its bucket busy.
const DPD_SECS: u64 = 5;
/// The group's `idle_timer`: longer than [`DPD_SECS`] plus the answer's way back.
const IDLE_TIMER: u64 = 12;
/// Buckets of the group: many more than clients, so that most are idle and can move.
const BUCKETS: u32 = 4096;
/// Nexthop ids: two entries per node (a group of one entry never marks its buckets busy:
/// the kernel selects no path among one, so every bucket looks idle when a second node
/// joins and half of them, busy or not, would move).
const NH_A: [u32; 2] = [11, 12];
const NH_B: [u32; 2] = [21, 22];
const GROUP: u32 = 100;
const UP_TIMEOUT: Duration = Duration::from_secs(60);
const UP_PER_CLIENT: Duration = Duration::from_millis(60);
/// New IP-HTTPS connections tried after the join until one reaches node B (each has an even
/// chance).
const NEW_CONNECTIONS: usize = 16;
/// Threads sending the round trips.
const PROBERS: usize = 8;

#[test]
#[ignore = "netns: needs root"]
fn netns_scale_out_resilient_join_and_leave() {
    if !netns_or_skip("netns_scale_out_resilient_join_and_leave") {
        return;
    }
    let clients = env_count("GATE64_RESILIENT_CLIENTS", CLIENTS);
    run_timed("resilient scale-out", || resilient(clients));
}

struct Node {
    name: &'static str,
    index: u8,
    pool6: &'static str,
    iphttps_prefix: &'static str,
    teredo: [&'static str; 2],
}

const NODES: [Node; 2] = [
    Node {
        name: "A",
        index: 1,
        pool6: "fd00:c1::/105",
        iphttps_prefix: "2001:db8:1::/48",
        teredo: ["192.0.2.1", "192.0.2.2"],
    },
    Node {
        name: "B",
        index: 2,
        pool6: "fd00:c1::80:0/105",
        iphttps_prefix: "2001:db8:2::/48",
        teredo: ["192.0.2.3", "192.0.2.4"],
    },
];

fn resilient(clients: usize) -> Result<()> {
    let router = Netns::new("rsrouter")?;
    let corp = Netns::new("rscorp")?;
    let cli = Netns::new("rscli")?;
    let nodes = [Netns::new("rsna")?, Netns::new("rsnb")?];
    let newcomer = Netns::new("rsnew")?;
    let r = run(&router, &corp, &cli, &newcomer, &nodes, clients);
    if r.is_err() {
        for ns in [&router, &cli, &newcomer, &nodes[0], &nodes[1]] {
            eprintln!("{}", ns.logs_report());
        }
    }
    r
}

fn node_config(node: &Node, certs: &Path) -> Result<String> {
    let pem = |f: &str| path_str(&certs.join(f)).map(str::to_owned);
    Ok(format!(
        "[server]\nworkers = 1\n\n\
         [teredo]\nserver_addresses = [\"{}\", \"{}\"]\nport = 3544\nrelay = true\n\n\
         [iphttps]\nenabled = true\nlisten = \"{ANYCAST}:443\"\ncertificate = {:?}\n\
         private_key = {:?}\nprefix = \"{}\"\n\n\
         [corpnet]\ntun = \"gate64\"\nipv6_prefixes = [\"{CORP_PREFIX}\"]\n\
         address6 = \"{ENDPOINT}\"\n\n\
         [ipsec]\ncertificate = {:?}\nprivate_key = {:?}\nca = {:?}\npool6 = \"{}\"\n\
         endpoint = \"{ENDPOINT}\"\ninfrastructure_prefixes = [\"{CORP_HOST}/128\"]\n\
         dpd_secs = {DPD_SECS}\n\n\
         [metrics]\nlisten = \"127.0.0.1:9164\"\n\n[log]\nlevel = \"info\"\n",
        node.teredo[0],
        node.teredo[1],
        pem("server.pem")?,
        pem("server.key")?,
        node.iphttps_prefix,
        pem("ipsec.pem")?,
        pem("ipsec.key")?,
        pem("clients-ca.pem")?,
        node.pool6,
    ))
}

fn spec_json(certs: &Path, clients: usize) -> Result<String> {
    let pem = |f: &str| path_str(&certs.join(f)).map(str::to_owned);
    Ok(format!(
        r#"{{ "clients": {clients}, "iphttps_share": 1.0,
  "teredo_server": "{}",
  "iphttps_url": "https://{ANYCAST}:443/IPHTTPS", "iphttps_ca": {:?},
  "iphttps_server_name": "gate64.lab",
  "source_v4": "{SOURCE_V4}",
  "ipsec": {{ "endpoint": "{ENDPOINT}", "ca": {:?},
             "client_ca_cert": {:?}, "client_ca_key": {:?},
             "infrastructure_ts": ["{CORP_HOST}/128"], "intranet_ts": ["{CORP_PREFIX}"] }},
  "pool6": "{POOL6}",
  "corp_prefixes": ["{CORP_PREFIX}"],
  "tun": "load0",
  "connect_per_sec": 2000, "max_setups_in_flight": 128 }}"#,
        NODES[0].teredo[0],
        pem("ca.pem")?,
        pem("ca.pem")?,
        pem("clients-ca.pem")?,
        pem("clients-ca.key")?,
    ))
}

/// The node (0 for A, 1 for B) whose half of the pool holds `inner`.
fn node_of(inner: Ipv6Addr) -> usize {
    usize::from(u128::from(inner) & (1 << 23) != 0)
}

/// What a node's gate64 counts: IKE negotiations (every result) and IKE and child SAs.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ike {
    negotiations: f64,
    mmsa: f64,
    qmsa: f64,
}

fn ike(ns: &Netns) -> Result<Ike> {
    let m: Metrics = metrics(ns)?;
    Ok(Ike {
        negotiations: m.sum("gate64_ike_negotiations_total", &[]),
        mmsa: m.sum("gate64_ipsec_mmsa", &[]),
        qmsa: m.sum("gate64_ipsec_qmsa", &[]),
    })
}

/// The router's buckets of the group per nexthop id: (all, idle for less than 1 s).
fn buckets(router: &Netns) -> Result<BTreeMap<u32, (usize, usize)>> {
    let out = router.ip(&["nexthop", "bucket", "show", "id", &GROUP.to_string()])?;
    let mut per: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |k: &str| {
            words
                .iter()
                .position(|w| *w == k)
                .and_then(|i| words.get(i + 1))
        };
        let nh: u32 = after("nhid")
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("bucket line {line:?}"))?;
        let idle: f64 = after("idle_time")
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("bucket line {line:?}"))?;
        let e = per.entry(nh).or_default();
        e.0 += 1;
        e.1 += usize::from(idle < 1.0);
    }
    Ok(per)
}

fn buckets_of(per: &BTreeMap<u32, (usize, usize)>, ids: [u32; 2]) -> usize {
    ids.iter().filter_map(|id| per.get(id)).map(|e| e.0).sum()
}

fn group(router: &Netns, verb: &str, ids: &[u32]) -> Result<()> {
    resilient_group(router, verb, GROUP, ids, BUCKETS, IDLE_TIMER)
}

/// A datagram from each inner address to both echo hosts comes back (each through its own
/// tunnel); returns the pairs that did not. A pair that fails is tried again, twice, 2 s
/// apart: a datagram lost once on a saturated machine is not a client whose tunnel is gone
/// (those never answer); how many pairs needed it is printed.
fn probe(cli: &Netns, inner: &[Ipv6Addr]) -> Result<Vec<String>> {
    let pairs: Vec<(Ipv6Addr, Ipv6Addr)> = inner
        .iter()
        .flat_map(|&a| [CORP_HOST, INTRANET_HOST].map(|h| (a, h)))
        .collect();
    let mut failed = probe_pairs(cli, &pairs)?;
    let first = failed.len();
    for _ in 0..2 {
        if failed.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
        failed = probe_pairs(cli, &failed)?;
    }
    if first > 0 {
        println!(
            "{first} of {} round trips needed another try; {} failed every try",
            pairs.len(),
            failed.len()
        );
    }
    Ok(failed.iter().map(|(a, h)| format!("{a} -> {h}")).collect())
}

/// One round trip per pair, spread over [`PROBERS`] threads; returns the pairs that failed.
fn probe_pairs(cli: &Netns, pairs: &[(Ipv6Addr, Ipv6Addr)]) -> Result<Vec<(Ipv6Addr, Ipv6Addr)>> {
    let chunk = pairs.len().div_ceil(PROBERS).max(1);
    let results: Vec<Result<Vec<(Ipv6Addr, Ipv6Addr)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = pairs
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    cli.run_in(|| {
                        part.iter()
                            .copied()
                            .filter(|&(a, h)| !round_trip(a, h))
                            .collect::<Vec<_>>()
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a prober panicked")))
            })
            .collect()
    });
    let mut failed = Vec::new();
    for r in results {
        failed.extend(r?);
    }
    Ok(failed)
}

/// One echoed datagram from `[inner]` to `host`, up to 3 tries of 1 s.
fn round_trip(inner: Ipv6Addr, host: Ipv6Addr) -> bool {
    let Ok(sock) = UdpSocket::bind(SocketAddr::from((inner, 0))) else {
        return false;
    };
    if sock.set_read_timeout(Some(Duration::from_secs(1))).is_err() {
        return false;
    }
    let msg = format!("from {inner} to {host}");
    let mut buf = [0u8; 512];
    (0..3).any(|_| {
        sock.send_to(msg.as_bytes(), SocketAddr::from((host, ECHO_PORT)))
            .is_ok()
            && sock
                .recv_from(&mut buf)
                .is_ok_and(|(n, from)| from.ip() == host && &buf[..n] == msg.as_bytes())
    })
}

/// One datagram from each inner address to the echo host, not waited for.
fn nudge(inner: &[Ipv6Addr]) {
    for &a in inner {
        if let Ok(sock) = UdpSocket::bind(SocketAddr::from((a, 0))) {
            let _ = sock.send_to(b"nudge", SocketAddr::from((CORP_HOST, ECHO_PORT)));
        }
    }
}

/// Waits until the generator counts every client up with both SAs; returns its status.
fn all_up(status: &Path, clients: usize, timeout: Duration) -> Option<String> {
    let n = clients as f64;
    wait_for(timeout, || {
        let s = std::fs::read_to_string(status).ok()?;
        (field(&s, "up")? == n && field(&s, "mmsa")? == 2.0 * n && field(&s, "qmsa")? == 2.0 * n)
            .then_some(s)
    })
}

fn run(
    router: &Netns,
    corp: &Netns,
    cli: &Netns,
    newcomer: &Netns,
    nodes: &[Netns; 2],
    clients: usize,
) -> Result<()> {
    ensure!(clients > 0, "GATE64_RESILIENT_CLIENTS must be at least 1");
    let bin = gate64_binary()?;
    wire_edges(router, corp, cli)?;
    router.veth("new", newcomer, "eth0")?;
    router.addr_add("new", "192.168.77.1/24")?;
    newcomer.addr_add("eth0", "192.168.77.2/24")?;
    newcomer.ip(&["route", "add", "default", "via", "192.168.77.1"])?;

    let certs = router.dir().join("certs");
    router.exec_ok(&[
        path_str(&bin)?,
        "certs",
        "--out",
        path_str(&certs)?,
        "--server-ip",
        ANYCAST,
        "--server-ip",
        ENDPOINT,
        "--server-name",
        "gate64.lab",
    ])?;

    let mut gates: Vec<Process> = Vec::new();
    for (ns, node) in nodes.iter().zip(&NODES) {
        let lo = [node.teredo[0], node.teredo[1], ANYCAST];
        // What BIRD would announce: the node's own prefixes, back to the node.
        let announced = [node.pool6, node.iphttps_prefix];
        wire_node(router, (ns, node.index, false), &lo, &announced)?;
        let conf = ns.write_file("gate64.toml", &node_config(node, &certs)?)?;
        gates.push(serve_node(ns, node.name, &bin, &conf)?);
    }
    // Node A alone: two entries of its own.
    group(router, "add", &NH_A)?;
    let grouped = Instant::now();
    router.ip(&[
        "route",
        "add",
        &format!("{ANYCAST}/32"),
        "nhid",
        &GROUP.to_string(),
    ])?;

    let echo = [CORP_HOST, INTRANET_HOST]
        .map(|host| corp.spawn_thread("udp-echo", move || udp_echo(host)));
    let spec = cli.write_file("load-spec.json", &spec_json(&certs, clients)?)?;
    let status = cli.dir().join("load-status.json");
    let mut load = spawn_bench_load(cli, &spec, &status)?;
    let t = Instant::now();
    let timeout = UP_TIMEOUT + UP_PER_CLIENT * u32::try_from(clients)?;
    let up = all_up(&status, clients, timeout);
    load.ensure_running()?;
    let s = up.with_context(|| {
        format!(
            "not every client up within {timeout:?}: {}",
            status_text(&status)
        )
    })?;
    println!(
        "{clients} clients up on node A (IP-HTTPS + 2 IKE SAs + 2 child SAs each) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let before = addresses(&status)?;
    ensure!(
        before.len() == clients && before.iter().all(|&a| node_of(a) == 0),
        "{} addresses listed for {clients} clients, {} outside node A's pool",
        before.len(),
        before.iter().filter(|&&a| node_of(a) != 0).count()
    );
    let a0 = wait_for(Duration::from_secs(20), || {
        let m = ike(&nodes[0]).ok()?;
        (m.mmsa == 2.0 * clients as f64 && m.qmsa == m.mmsa).then_some(m)
    })
    .with_context(|| format!("node A's SA gauges: {:?}", ike(&nodes[0])))?;
    let b0 = ike(&nodes[1])?;
    ensure!(
        b0.negotiations == 0.0 && b0.mmsa == 0.0,
        "node B negotiated before it joined: {b0:?}"
    );
    let session_errors = field(&s, "session_errors").unwrap_or(-1.0);
    let t = Instant::now();
    let failed = probe(cli, &before)?;
    ensure!(
        failed.is_empty(),
        "before the join, {} of {} round trips failed, e.g. {:?}",
        failed.len(),
        2 * clients,
        failed.first()
    );
    println!(
        "before the join: {} round trips (each client, both tunnels) in {:.1} s",
        2 * clients,
        t.elapsed().as_secs_f64()
    );
    // Buckets nobody used must have been idle for `idle_timer` to move at the join.
    let idle_since_group = Duration::from_secs(IDLE_TIMER + 1);
    if let Some(rest) = idle_since_group.checked_sub(grouped.elapsed()) {
        // Keep the clients' buckets busy meanwhile.
        std::thread::sleep(rest);
        probe(cli, &before)?;
    }
    let per = buckets(router)?;
    let busy: usize = per.values().map(|e| e.1).sum();
    println!(
        "before the join: {} buckets, all node A's; {busy} used in the last second",
        buckets_of(&per, NH_A)
    );

    // Node B joins.
    let joined = Instant::now();
    group(router, "replace", &[NH_A[0], NH_A[1], NH_B[0], NH_B[1]])?;
    let per = buckets(router)?;
    println!(
        "at the join: node A keeps {} buckets, node B gets {} (the idle ones; busy ones stay)",
        buckets_of(&per, NH_A),
        buckets_of(&per, NH_B)
    );
    ensure!(
        buckets_of(&per, NH_B) > 0,
        "no bucket moved to node B: {per:?}"
    );
    // Hold past `idle_timer`: only gate64's liveness checks and their answers (every
    // `dpd_secs`) keep the clients' buckets busy now, so none may move.
    std::thread::sleep(Duration::from_secs(IDLE_TIMER + DPD_SECS));
    let a1 = ike(&nodes[0])?;
    let b1 = ike(&nodes[1])?;
    let s = status_text(&status);
    let after = addresses(&status)?;
    let failed = probe(cli, &after)?;
    let per = buckets(router)?;
    println!(
        "{:.0} s after the join: node A {a1:?} (before: {a0:?}), node B {b1:?}; generator \
         session ends {} (before: {session_errors}); node A holds {} buckets, node B {}; {} of {} \
         round trips failed",
        joined.elapsed().as_secs_f64(),
        field(&s, "session_errors").unwrap_or(-1.0),
        buckets_of(&per, NH_A),
        buckets_of(&per, NH_B),
        failed.len(),
        2 * clients
    );
    ensure!(
        a1 == a0,
        "node A's IKE figures changed after node B joined: {a0:?} -> {a1:?}"
    );
    ensure!(
        b1.negotiations == 0.0 && b1.mmsa == 0.0,
        "node B negotiated with node A's clients: {b1:?}"
    );
    ensure!(
        field(&s, "session_errors") == Some(session_errors)
            && field(&s, "up") == Some(clients as f64),
        "a client's session ended after node B joined: {s}"
    );
    ensure!(
        after == before,
        "a client's inner address changed after the join"
    );
    ensure!(
        failed.is_empty(),
        "after the join, {} round trips failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );

    // New connections hash to node B's buckets too: an IP-HTTPS client connects until one
    // of its connections (each from a new port) lands on node B.
    let mut landed = [0usize; 2];
    for _ in 0..NEW_CONNECTIONS {
        let mut c = newcomer.spawn(
            "gate64-connect-iphttps",
            &[
                path_str(&bin)?,
                "connect",
                "iphttps",
                "--no-ipsec",
                "--server",
                &format!("https://{ANYCAST}/IPHTTPS"),
                "--ca",
                path_str(&certs.join("ca.pem"))?,
            ],
        )?;
        let node = wait_for(Duration::from_secs(15), || {
            let a = newcomer
                .ip(&["-6", "-o", "addr", "show", "scope", "global"])
                .ok()?;
            NODES
                .iter()
                .position(|n| a.contains(n.iphttps_prefix.trim_end_matches(":/48")))
        });
        c.stop();
        let node =
            node.with_context(|| format!("a new IP-HTTPS client got no address: {}", c.log()))?;
        landed[node] += 1;
        if node == 1 {
            break;
        }
    }
    println!(
        "after the join: new IP-HTTPS connections landed {} times on node A, {} on node B",
        landed[0], landed[1]
    );
    ensure!(
        landed[1] == 1,
        "{NEW_CONNECTIONS} new connections after the join all landed on node A"
    );

    // Node A leaves: its buckets go to node B.
    let left = Instant::now();
    group(router, "replace", &NH_B)?;
    // A datagram from each client makes it notice at once (else the answer to node A's next
    // liveness check would).
    cli.run_in(|| nudge(&before))?;
    // Every client sets up again at once, after a reset: twice the first set-up's bound.
    let back = wait_for(timeout * 2, || {
        let s = all_up(&status, clients, Duration::from_millis(1))?;
        let now = addresses(&status).ok()?;
        (now.len() == clients && now.iter().all(|&a| node_of(a) == 1)).then_some((s, now))
    });
    let secs = left.elapsed().as_secs_f64();
    let b2 = ike(&nodes[1])?;
    let (s, now) = back.with_context(|| {
        format!(
            "node A's clients were not all back on node B within {:?}: {}; node B {b2:?}",
            timeout * 2,
            status_text(&status)
        )
    })?;
    let failed = probe(cli, &now)?;
    let b2 = ike(&nodes[1])?;
    println!(
        "node A left: its {clients} clients were reset, connected again and authenticated \
         again on node B within {secs:.1} s; node B {b2:?}; generator session ends {}; {} of {} \
         round trips failed",
        field(&s, "session_errors").unwrap_or(-1.0),
        failed.len(),
        2 * clients
    );
    ensure!(
        b2.negotiations >= 2.0 * clients as f64,
        "node B negotiated {} times for {clients} returning clients",
        b2.negotiations
    );
    ensure!(
        failed.is_empty(),
        "after node A left, {} round trips failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    load.ensure_running()?;
    for g in &mut gates {
        g.ensure_running()?;
    }
    drop(echo);
    Ok(())
}

/// The router's forwarding and ECMP hash settings, the corporate link with both echo hosts'
/// addresses, and the client link with the clients' source addresses: the parts of the lab
/// the resilient scale-out tests share.
pub(crate) fn wire_edges(router: &Netns, corp: &Netns, cli: &Netns) -> Result<()> {
    crate::scale_out::router_sysctls(router)?;
    router.veth("corp", corp, "eth0")?;
    router.addr_add("corp", "2001:db8:100:1::1/64")?;
    // No duplicate address detection: the echo servers bind these at once.
    for host in [CORP_HOST, INTRANET_HOST] {
        let addr = format!("{host}/64");
        corp.ip(&["-6", "addr", "add", &addr, "dev", "eth0", "nodad"])?;
    }
    corp.ip(&["-6", "route", "add", "default", "via", "2001:db8:100:1::1"])?;
    router.veth("cli", cli, "eth0")?;
    router.addr_add("cli", "203.0.113.1/24")?;
    cli.addr_add("eth0", "203.0.113.2/24")?;
    for host in SOURCES {
        cli.addr_add("eth0", &format!("203.0.113.{host}/24"))?;
    }
    cli.ip(&["route", "add", "default", "via", "203.0.113.1"])?;
    Ok(())
}
