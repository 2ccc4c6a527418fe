//! Scale-out with a resilient next-hop group: a node that dies hands its IPsec clients to its
//! peer with their SAs, without a new IKE_AUTH.
//!
//! ```text
//!  etcli: gate64 bench load ──┐                              ┌─ etna: gate64 node A (10.0.1.2)
//!  (Teredo + both IPsec       │ etrouter: 192.0.2.1, .2      │   │ ha0: [ha] sync, 10.0.9.0/30
//!   tunnels per client)       ├─ via nhid 100, resilient ────┤   │
//!                             │                              └─ etnb: gate64 node B (10.0.2.2)
//!                             └─ etcorp: UDP echo on 2001:db8:100:1::2 and ::3
//! ```
//!
//! Both nodes hold the same Teredo server addresses (192.0.2.1 and 192.0.2.2) and the same
//! IKE endpoint; the router sends the server addresses through a resilient next-hop group
//! (two entries per node). Each node leases inner addresses from its own half of the pool
//! (`fd00:c1::/105`, `fd00:c1::80:0/105`) and names the other half `ha.peer_pool6`; each is
//! the other's `[ha]` peer. The router routes each half to its node and the covering
//! `fd00:c1::/104` to both (what each node's BIRD would announce, docs/scale-out.md), so the
//! more specific half wins while its node lives.
//!
//! Why Teredo clients: a Teredo client's address names its server address and its NAT
//! mapping, not the node, so when its bucket moves to node B it keeps its Teredo address
//! (node B holds the same server address and serves any client whose address names it) and
//! its next ESP packet, unchanged, reaches node B, which takes its IKE SA over on demand
//! (by that ESP, once node A has been quiet on the sync link for three flush intervals). An
//! IP-HTTPS client would lose its TCP connection when its bucket moves and get a /64 of
//! node B's prefix, so its SAs would no longer match its outer address.
//!
//! `netns_scale_out_takeover_keeps_clients`:
//! 1. Both nodes in the group; `GATE64_TAKEOVER_CLIENTS` Teredo clients (default 300; both
//!    tunnels each) come up, spread over the nodes by the hash, and probe a corporate host
//!    through each tunnel every 500 ms. Asserted: both nodes carry clients, every client is
//!    answered, and node B's store holds node A's SAs.
//! 2. Node A is SIGKILLed (every process of its namespace); the router's set-up changes
//!    as a routing daemon's would when node A's BGP session and health check fail: node A's
//!    entries leave the group, its half of the pool is withdrawn and the covering route
//!    keeps only node B. Asserted: every client's probes are answered again through both
//!    tunnels; node B ran no IKE negotiation for them (its count unchanged), and its
//!    `gate64_ha_sync_total{direction="takeover",result="on_demand"}` grew by node A's IKE SAs
//!    (two per client) with no install failure; the generator negotiated nothing more,
//!    saw no session end and lists the same inner addresses; node B routes node A's half
//!    into its TUN (checked at its start). The per-client gap
//!    (longest wait between two echoes of one tunnel, from a window started before the
//!    death) is printed, never asserted.
//!
//! `netns_scale_out_takeover_without_peer_pool_withdraws_child_sas`: the same lab and death
//! with `GATE64_TAKEOVER_CLIENTS_REFUSED` clients (default 40) and no `ha.peer_pool6`: node
//! B refuses each of node A's IKE SAs ("outside the address pool"). Asserted: every one of
//! them counted `install_failed`, the child SA the same takeover installed for each taken
//! out again (`withdrawn`, one per IKE SA), node B's child SA gauge back at its own
//! clients', its SA database (the child SAs `gate64 status --json` lists, by inbound SPI)
//! holding exactly the SPIs it held before the death and none of those node A's held (no
//! child SA of node A's left without its IKE SA), and no negotiation on node B.

use std::collections::BTreeSet;
use std::net::Ipv6Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use gate64_testkit::{Metrics, Netns, Process, gate64_binary, netns_or_skip, wait_for};

use crate::bench_load::{field, udp_echo};
use crate::common::{
    addresses, env_count, gate64_certs, gate64_lines, path_str, resilient_group, run_timed,
    spawn_bench_load, status_json_in, status_text, wait_all_up,
};
use crate::failover::{metrics, now_epoch, signal};

/// gate64's IKE endpoint on both nodes (`corpnet.address6`).
const ENDPOINT: &str = "2001:db8:100::1";
/// Reached by the infrastructure tunnel.
const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 2);
/// Reached by the intranet tunnel only.
const INTRANET_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 3);
const CORP_PREFIX: &str = "2001:db8:100::/48";
/// Both halves: what each node announces besides its own half, and the generator's view.
const POOL6: &str = "fd00:c1::/104";
/// The Teredo server addresses, on both nodes.
const TEREDO: [&str; 2] = ["192.0.2.1", "192.0.2.2"];
/// The clients' source addresses on the client link, which `wire_edges` puts there (gate64
/// paces its bubbles and bounds its relay peers per address).
const SOURCE_V4: &str = "203.0.113.128/25";
const CLIENTS: usize = 300;
/// Clients of the test without `ha.peer_pool6`.
const CLIENTS_REFUSED: usize = 40;
/// Milliseconds between two probes of one client through one tunnel.
const PROBE_INTERVAL_MS: u64 = 500;
/// Buckets of the router's resilient next-hop group.
pub(crate) const BUCKETS: u32 = 512;
/// Node A's two entries in the group.
pub(crate) const NH_A: [u32; 2] = [11, 12];
/// Node B's two entries in the group.
pub(crate) const NH_B: [u32; 2] = [21, 22];
/// The next-hop group's id.
pub(crate) const GROUP: u32 = 100;
/// Seconds a busy bucket keeps its node (`idle_timer` of the group).
pub(crate) const IDLE_TIMER: u64 = 30;
/// The `[ha]` sync port of both nodes.
pub(crate) const HA_PORT: u16 = 4501;
const UP_TIMEOUT: Duration = Duration::from_secs(60);
const UP_PER_CLIENT: Duration = Duration::from_millis(60);
/// Node B holds every record of node A within this long (node A flushes every second).
const SYNC_BOUND: Duration = Duration::from_secs(30);
/// Every client of node A answered again within this long of the death (generous: two
/// shared cores, the quiet rule's 3 s, and the on-demand rate of 200 IKE SAs a second).
const RESUME_BOUND: Duration = Duration::from_secs(40);

#[test]
#[ignore = "netns: needs root"]
fn netns_scale_out_takeover_keeps_clients() {
    if !netns_or_skip("netns_scale_out_takeover_keeps_clients") {
        return;
    }
    let clients = env_count("GATE64_TAKEOVER_CLIENTS", CLIENTS);
    run_timed("ECMP takeover", || lab(clients, true));
}

#[test]
#[ignore = "netns: needs root"]
fn netns_scale_out_takeover_without_peer_pool_withdraws_child_sas() {
    if !netns_or_skip("netns_scale_out_takeover_without_peer_pool_withdraws_child_sas") {
        return;
    }
    let clients = env_count("GATE64_TAKEOVER_CLIENTS_REFUSED", CLIENTS_REFUSED);
    if let Err(e) = lab(clients, false) {
        panic!("{e:#}");
    }
}

struct Node {
    name: &'static str,
    index: u8,
    pool6: &'static str,
    peer_pool6: &'static str,
}

const NODES: [Node; 2] = [
    Node {
        name: "A",
        index: 1,
        pool6: "fd00:c1::/105",
        peer_pool6: "fd00:c1::80:0/105",
    },
    Node {
        name: "B",
        index: 2,
        pool6: "fd00:c1::80:0/105",
        peer_pool6: "fd00:c1::/105",
    },
];

/// The node (0 for A, 1 for B) whose half of the pool holds `inner`.
fn node_of(inner: Ipv6Addr) -> usize {
    usize::from(u128::from(inner) & (1 << 23) != 0)
}

struct Lab {
    router: Netns,
    corp: Netns,
    cli: Netns,
    nodes: [Netns; 2],
}

fn lab(clients: usize, peer_pool: bool) -> Result<()> {
    ensure!(clients > 0, "GATE64_TAKEOVER_CLIENTS must be at least 1");
    let lab = Lab {
        router: Netns::new("etrouter")?,
        corp: Netns::new("etcorp")?,
        cli: Netns::new("etcli")?,
        nodes: [Netns::new("etna")?, Netns::new("etnb")?],
    };
    let r = run(&lab, clients, peer_pool);
    if r.is_err() {
        for ns in [&lab.router, &lab.cli, &lab.nodes[0], &lab.nodes[1]] {
            eprintln!("{}", ns.logs_report());
        }
    }
    r
}

fn node_config(
    node: &Node,
    certs: &Path,
    (secret, socket): (&Path, &Path),
    peer_pool: bool,
) -> Result<String> {
    let pem = |f: &str| path_str(&certs.join(f)).map(str::to_owned);
    let (me, peer) = (node.index, 3 - node.index);
    let peer_pool6 = if peer_pool {
        format!("peer_pool6 = \"{}\"\n", node.peer_pool6)
    } else {
        String::new()
    };
    Ok(format!(
        "[server]\nworkers = 1\n\n\
         [teredo]\nserver_addresses = [\"{}\", \"{}\"]\nport = 3544\nrelay = true\n\n\
         [corpnet]\ntun = \"gate64\"\nipv6_prefixes = [\"{CORP_PREFIX}\"]\n\
         address6 = \"{ENDPOINT}\"\n\n\
         [ipsec]\ncertificate = {:?}\nprivate_key = {:?}\nca = {:?}\npool6 = \"{}\"\n\
         endpoint = \"{ENDPOINT}\"\ninfrastructure_prefixes = [\"{CORP_HOST}/128\"]\n\n\
         [ha]\nnode_id = {me}\npeer_node_id = {peer}\nlisten = \"10.0.9.{me}:{HA_PORT}\"\n\
         peer = \"10.0.9.{peer}:{HA_PORT}\"\nsecret_file = {:?}\n{peer_pool6}\n\
         [control]\nsocket = {:?}\n\n\
         [metrics]\nlisten = \"127.0.0.1:9164\"\n\n[log]\nlevel = \"info\"\n",
        TEREDO[0],
        TEREDO[1],
        pem("ipsec.pem")?,
        pem("ipsec.key")?,
        pem("clients-ca.pem")?,
        node.pool6,
        path_str(secret)?,
        path_str(socket)?,
    ))
}

fn spec_json(certs: &Path, clients: usize) -> Result<String> {
    let pem = |f: &str| path_str(&certs.join(f)).map(str::to_owned);
    Ok(format!(
        r#"{{ "clients": {clients}, "teredo_server": "{}",
  "source_v4": "{SOURCE_V4}",
  "ipsec": {{ "endpoint": "{ENDPOINT}", "ca": {:?},
             "client_ca_cert": {:?}, "client_ca_key": {:?},
             "infrastructure_ts": ["{CORP_HOST}/128"], "intranet_ts": ["{CORP_PREFIX}"] }},
  "pool6": "{POOL6}", "corp_prefixes": [], "tun": "load0",
  "connect_per_sec": 2000, "max_setups_in_flight": 128,
  "probe": {{ "targets": ["{CORP_HOST}", "{INTRANET_HOST}"], "port": 7007,
             "interval_ms": {PROBE_INTERVAL_MS} }} }}"#,
        TEREDO[0],
        pem("ca.pem")?,
        pem("clients-ca.pem")?,
        pem("clients-ca.key")?,
    ))
}

/// Node B's metrics once its HA store holds at least `records` records of node A, waiting up
/// to `bound`; else an error with its gate64 metrics.
pub(crate) fn wait_store_records(nb: &Netns, records: f64, bound: Duration) -> Result<Metrics> {
    let held = wait_for(bound, || {
        let m = metrics(nb).ok()?;
        (m.sum("gate64_ha_store_records", &[]) >= records).then_some(m)
    });
    held.with_context(|| {
        format!(
            "node B held fewer than {records} records of node A within {bound:?}\n{}",
            metrics(nb).map(|m| gate64_lines(&m)).unwrap_or_default()
        )
    })
}

/// `gate64_ha_sync_total{direction="takeover",result=<result>}` in `m`.
pub(crate) fn sync(m: &Metrics, result: &str) -> f64 {
    m.sum(
        "gate64_ha_sync_total",
        &[("direction", "takeover"), ("result", result)],
    )
}

/// The router, the corporate host and the client link; both nodes linked to the router
/// and to each other (the sync link).
fn wire(lab: &Lab) -> Result<()> {
    let Lab {
        router, corp, cli, ..
    } = lab;
    crate::scale_out_resilient::wire_edges(router, corp, cli)?;
    lab.nodes[0].veth("ha0", &lab.nodes[1], "ha0")?;
    for (ns, node) in lab.nodes.iter().zip(&NODES) {
        // What BIRD would announce: the node's own half, back to the node.
        wire_node(router, (ns, node.index, true), &TEREDO, &[node.pool6])?;
    }
    // And the covering route both announce: used for a half only when its node withdrew it.
    add_covering_route(router, POOL6)?;
    let group = GROUP.to_string();
    let members = [NH_A[0], NH_A[1], NH_B[0], NH_B[1]];
    resilient_group(router, "add", GROUP, &members, BUCKETS, IDLE_TIMER)?;
    for a in TEREDO {
        router.ip(&["route", "add", &format!("{a}/32"), "nhid", &group])?;
    }
    Ok(())
}

/// Both nodes' gate64, each with its own copy of the shared HA secret.
fn start_nodes(lab: &Lab, certs: &Path, peer_pool: bool) -> Result<Vec<Process>> {
    let bin = gate64_binary()?;
    let mut gates = Vec::new();
    for (ns, node) in lab.nodes.iter().zip(&NODES) {
        let secret = ns.write_file("ha.secret", &format!("{}\n", "6b".repeat(32)))?;
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let socket = ns.dir().join("control.sock");
        let conf = ns.write_file(
            "gate64.toml",
            &node_config(node, certs, (&secret, &socket), peer_pool)?,
        )?;
        gates.push(serve_node(ns, node.name, &bin, &conf)?);
    }
    Ok(gates)
}

/// `gate64 serve --config <conf>` in `ns`, running and serving /metrics within 30 s (else
/// an error naming node `name` with its log).
pub(crate) fn serve_node(ns: &Netns, name: &str, bin: &Path, conf: &Path) -> Result<Process> {
    let mut gate = ns.spawn(
        "gate64",
        &[path_str(bin)?, "serve", "--config", path_str(conf)?],
    )?;
    ensure!(
        gate64_testkit::wait_until(Duration::from_secs(30), || gate.is_running()
            && metrics(ns).is_ok()),
        "gate64 on node {name} did not come up: {}",
        gate.log()
    );
    Ok(gate)
}

/// Links node `i` (1 or 2) to `router` (`n<i>` there, `up0` in `ns`: 10.0.<i>.0/24 and
/// 2001:db8:f<i>::/64, default routes to the router), with `ha_link` gives it 10.0.9.<i>/30
/// on `ha0`, adds `lo_addresses` (/32s) on `lo`, turns IPv6 forwarding on; on `router`,
/// routes `announced` to the node (what its BIRD would announce) and adds its two next hops
/// (`NH_A` or `NH_B`).
pub(crate) fn wire_node(
    router: &Netns,
    (ns, i, ha_link): (&Netns, u8, bool),
    lo_addresses: &[&str],
    announced: &[&str],
) -> Result<()> {
    let port = format!("n{i}");
    router.veth(&port, ns, "up0")?;
    router.addr_add(&port, &format!("10.0.{i}.1/24"))?;
    router.addr_add(&port, &format!("2001:db8:f{i}::1/64"))?;
    ns.addr_add("up0", &format!("10.0.{i}.2/24"))?;
    ns.addr_add("up0", &format!("2001:db8:f{i}::2/64"))?;
    if ha_link {
        ns.addr_add("ha0", &format!("10.0.9.{i}/30"))?;
    }
    ns.ip(&["route", "add", "default", "via", &format!("10.0.{i}.1")])?;
    let gw = format!("2001:db8:f{i}::1");
    ns.ip(&["-6", "route", "add", "default", "via", &gw])?;
    ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    for a in lo_addresses {
        ns.addr_add("lo", &format!("{a}/32"))?;
    }
    let via = format!("2001:db8:f{i}::2");
    for net in announced {
        router.ip(&["-6", "route", "add", net, "via", &via])?;
    }
    let ids = if i == 1 { NH_A } else { NH_B };
    for id in ids {
        let (id, via) = (id.to_string(), format!("10.0.{i}.2"));
        router.ip(&["nexthop", "add", "id", &id, "via", &via, "dev", &port])?;
    }
    Ok(())
}

/// On `router`: `net` through both nodes (`ip -6 route add <net> nexthop via 2001:db8:f1::2
/// nexthop via 2001:db8:f2::2`), the covering route both announce.
pub(crate) fn add_covering_route(router: &Netns, net: &str) -> Result<()> {
    router.ip(&[
        "-6",
        "route",
        "add",
        net,
        "nexthop",
        "via",
        "2001:db8:f1::2",
        "nexthop",
        "via",
        "2001:db8:f2::2",
    ])?;
    Ok(())
}

/// What a routing daemon does when node A's health check and BGP session fail: node A's
/// entries leave the group (its buckets move to node B), its half of the pool is withdrawn,
/// and the covering route keeps node B only.
fn withdraw_node_a(router: &Netns) -> Result<()> {
    resilient_group(router, "replace", GROUP, &NH_B, BUCKETS, IDLE_TIMER)?;
    router.ip(&[
        "-6",
        "route",
        "del",
        NODES[0].pool6,
        "via",
        "2001:db8:f1::2",
    ])?;
    router.ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:f2::2"])?;
    Ok(())
}

fn run(lab: &Lab, clients: usize, peer_pool: bool) -> Result<()> {
    wire(lab)?;
    let certs = lab.router.dir().join("certs");
    gate64_certs(&lab.router, &certs, ENDPOINT, "gate64.lab")?;
    let _gates = start_nodes(lab, &certs, peer_pool)?;
    let [na, nb] = &lab.nodes;
    let route = nb.ip(&["-6", "route", "show", NODES[1].peer_pool6])?;
    ensure!(
        !peer_pool || route.contains("dev gate64"),
        "node B does not route its peer's pool ({}) into its TUN: {route:?}",
        NODES[1].peer_pool6
    );

    let echo = [CORP_HOST, INTRANET_HOST]
        .map(|host| lab.corp.spawn_thread("udp-echo", move || udp_echo(host)));
    let spec = lab
        .cli
        .write_file("load-spec.json", &spec_json(&certs, clients)?)?;
    let status = lab.cli.dir().join("load-status.json");
    let mut load = spawn_bench_load(&lab.cli, &spec, &status)?;
    let n = clients as f64;
    let t = Instant::now();
    let timeout = UP_TIMEOUT + UP_PER_CLIENT * u32::try_from(clients)?;
    let up = wait_all_up(&status, clients, timeout);
    load.ensure_running()?;
    let s = up?;
    let inner = addresses(&status)?;
    let on_a = inner.iter().filter(|&&a| node_of(a) == 0).count();
    ensure!(
        inner.len() == clients && on_a > 0 && on_a < clients,
        "{} addresses for {clients} clients, {on_a} of them node A's: the hash should spread \
         the clients over both nodes",
        inner.len()
    );
    println!(
        "{clients} Teredo clients (2 IKE SAs + 2 child SAs each) up and answered in {:.1} s: \
         {on_a} on node A, {} on node B",
        t.elapsed().as_secs_f64(),
        clients - on_a
    );
    // Node B holds node A's records: 2 IKE SAs and 2 child SAs per client of node A.
    let records = 4.0 * on_a as f64;
    let b_before = wait_store_records(nb, records, SYNC_BOUND)?;
    let b_negotiated = b_before.sum("gate64_ike_negotiations_total", &[]);
    let b_on_demand = sync(&b_before, "on_demand");
    let s_get = |s: &str, k: &str| field(s, k).unwrap_or(-1.0);
    let (generator_negotiations, session_ends) =
        (s_get(&s, "ike_negotiations"), s_get(&s, "session_errors"));

    // Without ha.peer_pool6: what each node's SA database holds before the death.
    let before_death = if peer_pool {
        None
    } else {
        Some([sadb_spis(na)?, sadb_spis(nb)?])
    };
    // The gaps measured from here: the takeover's, not the set-up's.
    signal(load.pid(), "-USR1");
    std::thread::sleep(Duration::from_secs(3));
    let at_death = field(&status_text(&status), "elapsed_seconds").unwrap_or(f64::MAX);
    let died = now_epoch();
    for pid in na.pids() {
        signal(pid as u32, "-KILL");
    }
    withdraw_node_a(&lab.router)?;
    if let Some([a_spis, b_spis]) = before_death {
        let before = Before {
            metrics: &b_before,
            a_spis,
            b_spis,
        };
        return refused_and_withdrawn(nb, &before, clients, on_a);
    }
    // Every client answered again: a status written well after the death in which no client
    // is silent (no echo for two probe intervals and a second) and every one was answered
    // through both tunnels.
    let recovered = wait_for(RESUME_BOUND, || {
        let s = std::fs::read_to_string(&status).ok()?;
        (field(&s, "elapsed_seconds")? >= at_death + 6.0
            && field(&s, "probe_silent")? == 0.0
            && field(&s, "probe_never")? == 0.0)
            .then_some(s)
    });
    let recovery_secs = now_epoch() - died;
    let m = metrics(nb)?;
    let s = status_text(&status);
    load.ensure_running()?;
    ensure!(
        recovered.is_some(),
        "not every client's traffic flowed again within {RESUME_BOUND:?} of node A's death: \
         {s}\n{}",
        gate64_lines(&m)
    );
    let negotiated = m.sum("gate64_ike_negotiations_total", &[]);
    ensure!(
        negotiated == b_negotiated,
        "node B ran IKE negotiations across the takeover ({b_negotiated} before, {negotiated} \
         after): a client authenticated again\n{}",
        gate64_lines(&m)
    );
    let on_demand = sync(&m, "on_demand") - b_on_demand;
    let failed = sync(&m, "install_failed");
    ensure!(
        on_demand == 2.0 * on_a as f64 && failed == 0.0,
        "node B took {on_demand} IKE SAs over on demand ({failed} installs failed), want \
         {} (2 for each of node A's {on_a} clients)\n{}",
        2 * on_a,
        gate64_lines(&m)
    );
    ensure!(
        s_get(&s, "ike_negotiations") == generator_negotiations
            && s_get(&s, "session_errors") == session_ends
            && s_get(&s, "up") == n,
        "the generator negotiated again or lost a session across the takeover (before: \
         {generator_negotiations} negotiations, {session_ends} session ends): {s}"
    );
    let after = addresses(&status)?;
    ensure!(
        after == inner,
        "the clients' inner addresses changed across the takeover"
    );
    drop(echo);
    println!(
        "ECMP takeover with {clients} Teredo clients ({on_a} on node A): every client flowing \
         again (checked {recovery_secs:.1} s after the death); node B took {on_demand} IKE SAs \
         over on demand ({} by ESP) and ran no IKE negotiation for them; per-client gap \
         (longest wait between two echoes of one tunnel, probes every {PROBE_INTERVAL_MS} ms, \
         all clients): min {:.2} s, p50 {:.2} s, p90 {:.2} s, p99 {:.2} s, max {:.2} s",
        sync(&m, "on_demand_esp") - sync(&b_before, "on_demand_esp"),
        s_get(&s, "gap_min_seconds"),
        s_get(&s, "gap_p50_seconds"),
        s_get(&s, "gap_p90_seconds"),
        s_get(&s, "gap_p99_seconds"),
        s_get(&s, "gap_max_seconds"),
    );
    Ok(())
}

/// The inbound SPIs of the child SAs in `ns`'s SA database, as `gate64 status --json` lists
/// them; an error when its `child_sas` count says otherwise.
fn sadb_spis(ns: &Netns) -> Result<BTreeSet<u64>> {
    let v = status_json_in(ns)?;
    let listed: Vec<u64> = v["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["sas"].as_array().into_iter().flatten())
        .filter_map(|sa| sa["spi_in"].as_u64())
        .collect();
    let spis: BTreeSet<u64> = listed.iter().copied().collect();
    let count = v["child_sas"].as_u64();
    ensure!(
        count == Some(spis.len() as u64) && listed.len() == spis.len(),
        "{}'s gate64 status --json counts {count:?} child SAs and lists {} ({} SPIs)",
        ns.name(),
        listed.len(),
        spis.len()
    );
    Ok(spis)
}

/// Node B before node A's death: its metrics, and both nodes' SA databases.
struct Before<'a> {
    metrics: &'a Metrics,
    a_spis: BTreeSet<u64>,
    b_spis: BTreeSet<u64>,
}

/// Without `ha.peer_pool6`: node B refuses each of node A's IKE SAs when its client's ESP
/// arrives, and takes out again the child SA the same takeover installed for it: its SA
/// database then holds exactly the child SAs it held before the death, none of node A's.
fn refused_and_withdrawn(nb: &Netns, before: &Before, clients: usize, on_a: usize) -> Result<()> {
    let want = 2.0 * on_a as f64;
    let own = 2 * (clients - on_a);
    ensure!(
        before.a_spis.len() == 2 * on_a && before.b_spis.len() == own,
        "before the death node A's SA database held {} child SAs, node B's {}: want 2 for \
         each client of the node ({on_a} on node A, {} on node B)",
        before.a_spis.len(),
        before.b_spis.len(),
        clients - on_a
    );
    // `gate64_ipsec_qmsa` is the SA database's size as the IKE driver last published it, and
    // an on-demand takeover installs a child SA before it tries (and here withdraws for) its
    // IKE SA: a publish in between leaves the gauge one high until the next. So wait for it
    // to come down as well (the checks below still want exactly these figures).
    let refused = wait_for(RESUME_BOUND, || {
        let m = metrics(nb).ok()?;
        (sync(&m, "install_failed") >= want
            && sync(&m, "withdrawn") >= want
            && m.sum("gate64_ipsec_qmsa", &[]) <= own as f64)
            .then_some(m)
    });
    let m = match refused {
        Some(m) => m,
        None => metrics(nb)?,
    };
    let (failed, withdrawn) = (sync(&m, "install_failed"), sync(&m, "withdrawn"));
    let child_sas = m.sum("gate64_ipsec_qmsa", &[]);
    ensure!(
        failed == want && withdrawn == want && child_sas == own as f64,
        "node B without ha.peer_pool6: {failed} IKE SAs refused and {withdrawn} child SAs \
         withdrawn, want {want} of each (node A's {on_a} clients, 2 tunnels each); {child_sas} \
         child SAs, want its own {own}\n{}",
        gate64_lines(&m)
    );
    // The SA database entry by entry: node B's own child SAs, and not one of node A's that
    // the takeover installed and withdrew.
    let spis = sadb_spis(nb)?;
    let left: Vec<_> = spis.intersection(&before.a_spis).collect();
    let own_missing = before.b_spis.difference(&spis).count();
    ensure!(
        spis == before.b_spis && left.is_empty(),
        "node B's SA database holds {} child SAs, want its own {own}: {} of node A's left \
         ({left:x?}), {own_missing} of its own missing",
        spis.len(),
        left.len()
    );
    let negotiated = m.sum("gate64_ike_negotiations_total", &[]);
    let before_negotiated = before.metrics.sum("gate64_ike_negotiations_total", &[]);
    ensure!(
        negotiated == before_negotiated,
        "node B ran IKE negotiations ({before_negotiated} before, {negotiated} after)"
    );
    println!(
        "without ha.peer_pool6: node B refused {failed} IKE SAs of node A's {on_a} clients and \
         withdrew the {withdrawn} child SAs it had installed for them; {child_sas} child SAs \
         left, its SA database holds its own {own} SPIs and none of node A's {}",
        before.a_spis.len()
    );
    Ok(())
}
