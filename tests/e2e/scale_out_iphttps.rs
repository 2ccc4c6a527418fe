//! Scale-out with a resilient next-hop group: a node that dies hands its IP-HTTPS clients to
//! its peer with their /64s and their IPsec SAs, without a new IKE_AUTH.
//!
//! ```text
//!  ehic0..2: gate64 connect iphttps ─┐                          ┌─ ehina: gate64 node A
//!  (both IPsec tunnels each, one     │ ehirtr: 198.51.100.100 │   │ ha0: [ha] sync
//!   namespace per client)            ├─ via nhid 100, resilient ─┤   │
//!                                    │                          └─ ehinb: gate64 node B
//!                                    └─ ehicorp: 2001:db8:100:1::2 and ::3
//! ```
//!
//! Both nodes listen for IP-HTTPS on the same address (198.51.100.100, on their loopback) with
//! the same TLS certificate, and hold the same IKE endpoint; the router sends that address
//! through a resilient next-hop group (two entries per node). Each node hands out /64s of its
//! own IP-HTTPS prefix (A `2001:db8:2::/48`, B `2001:db8:3::/48`) and inner addresses of its
//! own half of the IPsec pool, and names the other's in `ha.peer_iphttps_prefix` and
//! `ha.peer_pool6`; each is the other's `[ha]` peer. The router routes each node's prefixes
//! to it and the covering ones (`2001:db8:2::/47`, `fd00:c1::/104`) to both, what each
//! node's BIRD would announce (docs/scale-out.md).
//!
//! `netns_scale_out_iphttps_takeover_keeps_the_64s`:
//! 1. Only node A is in the group while `GATE64_ECMP_IPHTTPS_CLIENTS` clients (default 3)
//!    connect, so all are node A's; each brings both tunnels up and pings a corporate host
//!    through each (20 a second). Node B joins the group: the clients' busy buckets stay with
//!    node A (asserted: node B has no IP-HTTPS link). Node B's store holds node A's SAs.
//! 2. Node A is SIGKILLed; the router's set-up changes as a routing daemon's would: node A's
//!    entries leave the group (its buckets move to node B, which resets their connections),
//!    its prefixes are withdrawn and the covering routes keep node B only. Asserted: every
//!    client's pings flow again through both tunnels; node B gave each client its /64 back
//!    (`gate64_iphttps_prefix_reclaims_total{result="reclaimed"}` grew by the clients, none
//!    `in_use`), ran no IKE negotiation, took exactly two IKE SAs per client over on demand
//!    with no install failure; `gate64 status --json` on node B lists every client with the
//!    outer address, inner addresses, IKE SPIs and child SPIs it had on node A. The gap of
//!    each client's two ping streams (longest silence from one second before the death) is
//!    printed, never asserted.
//!
//! `netns_scale_out_iphttps_moved_client_keeps_the_peers_64`: a client that left node B for
//! node A without a word, and negotiated there, gets node A's /64 from node B when node A
//! dies, although node B still holds its old link (of a binding and a hint the newer wins,
//! `PrefixPool::claim`).
//! 1. Node B's sync messages go nowhere (node A's still reach node B), and only node B is in
//!    the group while the clients connect: each gets a /64 of node B's prefix and both
//!    tunnels on node B, and node A learns nothing of them.
//! 2. The group becomes node A alone (node B stays up and keeps routing its prefixes): each
//!    client's TCP segments reach node A, which resets them; the client reconnects to node A,
//!    gets a /64 of node A's prefix (node A has no binding or hint for it) and, its address
//!    changed, negotiates both tunnels there. Node B never hears of it: the client's old link
//!    and IKE SAs stay open there.
//! 3. Node B's store receives node A's IKE and child SAs as node A makes them: their remote
//!    addresses name the clients' node A /64s, and they are newer than node B's bindings.
//! 4. Node A is SIGKILLed and withdrawn as in the test above. Asserted: every client's pings
//!    flow again through both tunnels; node B gave each client its node A /64
//!    (`reclaimed` grew by the clients, none `in_use`), ran no IKE negotiation, took exactly
//!    two IKE SAs per client over on demand; node B's status lists every client with the
//!    outer address, inner addresses and SPIs it had on node A.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, ensure};
use gate64_testkit::strongswan::{CertPaths, KeyType, LabCerts};
use gate64_testkit::{Metrics, Netns, Process, gate64_binary, netns_or_skip, wait_until};

use crate::common::{
    env_count, gate64_certs, gate64_lines, iphttps_ipsec_argv, path_str, resilient_group,
    run_timed, status_json_in,
};
use crate::failover::{Stream, metrics, now_epoch, ping_ok, signal};
use crate::scale_out_takeover::{
    BUCKETS, GROUP, HA_PORT, IDLE_TIMER, NH_A, NH_B, add_covering_route, serve_node, sync,
    wait_store_records, wire_node,
};

/// gate64's IKE endpoint on both nodes (`corpnet.address6`).
const ENDPOINT: &str = "2001:db8:100::1";
/// Reached by the infrastructure tunnel.
const CORP_HOST: &str = "2001:db8:100:1::2";
/// Reached by the intranet tunnel only.
const INTRANET_HOST: &str = "2001:db8:100:1::3";
const CORP_PREFIX: &str = "2001:db8:100::/48";
/// The IP-HTTPS address both nodes listen on.
const IPHTTPS_ADDRESS: &str = "198.51.100.100";
/// Both halves of the IPsec pool, and both IP-HTTPS prefixes: what each node announces
/// besides its own.
const POOL6: &str = "fd00:c1::/104";
const IPHTTPS_COVER: &str = "2001:db8:2::/47";
const CLIENTS: usize = 3;
/// Every client's tunnels up on node A within this long (generous: two shared cores).
const UP_TIMEOUT: Duration = Duration::from_secs(60);
/// Node B holds every record of node A within this long (node A flushes every second).
const SYNC_BOUND: Duration = Duration::from_secs(20);
/// Every client answered again within this long of the death: the client's TCP reset and
/// reconnect (1 s back-off), then the quiet rule's 3 s and the next ESP packet.
const RESUME_BOUND: Duration = Duration::from_secs(30);

struct Node {
    name: &'static str,
    index: u8,
    pool6: &'static str,
    prefix: &'static str,
}

const NODES: [Node; 2] = [
    Node {
        name: "A",
        index: 1,
        pool6: "fd00:c1::/105",
        prefix: "2001:db8:2::/48",
    },
    Node {
        name: "B",
        index: 2,
        pool6: "fd00:c1::80:0/105",
        prefix: "2001:db8:3::/48",
    },
];

#[test]
#[ignore = "netns: needs root"]
fn netns_scale_out_iphttps_takeover_keeps_the_64s() {
    if !netns_or_skip("netns_scale_out_iphttps_takeover_keeps_the_64s") {
        return;
    }
    let clients = env_count("GATE64_ECMP_IPHTTPS_CLIENTS", CLIENTS);
    run_timed("ECMP IP-HTTPS takeover", || lab(clients, run));
}

#[test]
#[ignore = "netns: needs root"]
fn netns_scale_out_iphttps_moved_client_keeps_the_peers_64() {
    if !netns_or_skip("netns_scale_out_iphttps_moved_client_keeps_the_peers_64") {
        return;
    }
    let clients = env_count("GATE64_ECMP_IPHTTPS_CLIENTS", CLIENTS);
    run_timed("ECMP IP-HTTPS takeover of a client that moved", || {
        lab(clients, run_moved)
    });
}

/// The namespaces; dropped in reverse order of creation.
struct Lab {
    router: Netns,
    corp: Netns,
    nodes: [Netns; 2],
    clients: Vec<Netns>,
}

fn lab(clients: usize, run: fn(&Lab) -> Result<()>) -> Result<()> {
    ensure!(
        (1..=20).contains(&clients),
        "GATE64_ECMP_IPHTTPS_CLIENTS must be 1..=20"
    );
    let lab = Lab {
        router: Netns::new("ehirtr")?,
        corp: Netns::new("ehicorp")?,
        nodes: [Netns::new("ehina")?, Netns::new("ehinb")?],
        clients: (0..clients)
            .map(|i| Netns::new(&format!("ehic{i}")))
            .collect::<Result<_>>()?,
    };
    let r = run(&lab);
    if r.is_err() {
        for ns in [&lab.router, &lab.nodes[0], &lab.nodes[1]]
            .into_iter()
            .chain(&lab.clients)
        {
            eprintln!("{}", ns.logs_report());
        }
    }
    r
}

/// The router, the corporate host, one link per client and per node, the sync link; the
/// group's first members `first`.
fn wire(lab: &Lab, first: &[u32]) -> Result<()> {
    let Lab {
        router,
        corp,
        nodes,
        ..
    } = lab;
    crate::scale_out_resilient::wire_edges(router, corp, &lab.clients[0])?;
    for (i, ns) in lab.clients.iter().enumerate().skip(1) {
        let port = format!("c{i}");
        router.veth(&port, ns, "eth0")?;
        router.addr_add(&port, &format!("10.8.{i}.1/24"))?;
        ns.addr_add("eth0", &format!("10.8.{i}.2/24"))?;
        ns.ip(&["route", "add", "default", "via", &format!("10.8.{i}.1")])?;
    }
    nodes[0].veth("ha0", &nodes[1], "ha0")?;
    for (ns, node) in nodes.iter().zip(&NODES) {
        // What BIRD would announce: the node's own pool half and IP-HTTPS prefix.
        let announced = [node.pool6, node.prefix];
        wire_node(
            router,
            (ns, node.index, true),
            &[IPHTTPS_ADDRESS],
            &announced,
        )?;
    }
    // The covering routes both announce: used for a node's own only once it withdrew them.
    for net in [POOL6, IPHTTPS_COVER] {
        add_covering_route(router, net)?;
    }
    resilient_group(router, "add", GROUP, first, BUCKETS, IDLE_TIMER)?;
    let group = GROUP.to_string();
    router.ip(&[
        "route",
        "add",
        &format!("{IPHTTPS_ADDRESS}/32"),
        "nhid",
        &group,
    ])?;
    Ok(())
}

/// The group's members become `members`; its buckets and timers stay.
fn set_group(router: &Netns, members: &[u32]) -> Result<()> {
    resilient_group(router, "replace", GROUP, members, BUCKETS, IDLE_TIMER)
}

/// What a routing daemon does when node A's health check and BGP session fail: node A's
/// entries leave the group, its prefixes are withdrawn, the covering routes keep node B.
fn withdraw_node_a(router: &Netns) -> Result<()> {
    set_group(router, &NH_B)?;
    for net in [NODES[0].pool6, NODES[0].prefix] {
        router.ip(&["-6", "route", "del", net, "via", "2001:db8:f1::2"])?;
    }
    for net in [POOL6, IPHTTPS_COVER] {
        router.ip(&["-6", "route", "replace", net, "via", "2001:db8:f2::2"])?;
    }
    Ok(())
}

fn node_config(node: &Node, tls: &Path, ike: &LabCerts, ns: &Netns) -> Result<String> {
    let (me, peer) = (node.index, 3 - node.index);
    let other = &NODES[usize::from(peer - 1)];
    let secret = ns.write_file("ha.secret", &format!("{}\n", "6b".repeat(32)))?;
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(format!(
        "[server]\nworkers = 1\n\n[teredo]\nenabled = false\n\n\
         [iphttps]\nenabled = true\nlisten = \"{IPHTTPS_ADDRESS}:443\"\ncertificate = {:?}\n\
         private_key = {:?}\nprefix = \"{}\"\n\n\
         [corpnet]\ntun = \"gate64\"\nipv6_prefixes = [\"{CORP_PREFIX}\"]\n\
         address6 = \"{ENDPOINT}\"\n\n\
         [ipsec]\ncertificate = {:?}\nprivate_key = {:?}\nca = {:?}\npool6 = \"{}\"\n\
         endpoint = \"{ENDPOINT}\"\ninfrastructure_prefixes = [\"{CORP_HOST}/128\"]\n\n\
         [ha]\nnode_id = {me}\npeer_node_id = {peer}\nlisten = \"10.0.9.{me}:{HA_PORT}\"\n\
         peer = \"10.0.9.{peer}:{HA_PORT}\"\nsecret_file = {:?}\npeer_pool6 = \"{}\"\n\
         peer_iphttps_prefix = \"{}\"\n\n\
         [control]\nsocket = {:?}\n\n\
         [metrics]\nlisten = \"127.0.0.1:9164\"\n\n[log]\nlevel = \"info\"\n",
        path_str(&tls.join("server.pem"))?,
        path_str(&tls.join("server.key"))?,
        node.prefix,
        path_str(&ike.responder_cert)?,
        path_str(&ike.responder_key)?,
        path_str(&ike.ca)?,
        node.pool6,
        path_str(&secret)?,
        other.pool6,
        other.prefix,
        path_str(&ns.dir().join("control.sock"))?,
    ))
}

fn start_nodes(lab: &Lab, tls: &Path, ike: &LabCerts) -> Result<Vec<Process>> {
    let bin = gate64_binary()?;
    let mut gates = Vec::new();
    for (ns, node) in lab.nodes.iter().zip(&NODES) {
        let conf = ns.write_file("gate64.toml", &node_config(node, tls, ike, ns)?)?;
        gates.push(serve_node(ns, node.name, &bin, &conf)?);
    }
    Ok(gates)
}

/// `gate64 connect iphttps` with both tunnels, as the client certificate `cert` says.
fn spawn_client(ns: &Netns, tls: &Path, ike: &LabCerts, cert: &CertPaths) -> Result<Process> {
    let bin = gate64_binary()?;
    let ca = tls.join("ca.pem");
    let url = format!("https://{IPHTTPS_ADDRESS}/IPHTTPS");
    let infra = format!("{CORP_HOST}/128");
    let ipsec = (&*cert.cert, &*cert.key, &*ike.ca);
    let server = (url.as_str(), ca.as_path());
    let ts = (infra.as_str(), CORP_PREFIX);
    let mut argv = iphttps_ipsec_argv(&bin, server, ENDPOINT, ipsec, ts)?;
    argv.extend(["--ipsec-renew-secs", "3600"]);
    ns.spawn("gate64-connect-iphttps", &argv)
}

/// One `gate64 connect iphttps` per client namespace, with a client certificate each.
fn start_clients(lab: &Lab, tls: &Path, ike: &LabCerts) -> Result<Vec<Process>> {
    let mut clients = Vec::new();
    for (i, ns) in lab.clients.iter().enumerate() {
        let cert =
            ike.issue_client(&lab.router, &format!("c{i}.gate64.lab"), KeyType::EcdsaP256)?;
        clients.push(spawn_client(ns, tls, ike, &cert)?);
    }
    Ok(clients)
}

/// Waits until `node` (named `name`) holds both tunnels of every client and each client
/// reaches both corporate hosts through it.
fn wait_tunnels_on(lab: &Lab, node: &Netns, name: &str, clients: &mut [Process]) -> Result<()> {
    let want = 2.0 * lab.clients.len() as f64;
    let up = wait_until(UP_TIMEOUT, || {
        metrics(node).is_ok_and(|m| {
            m.sum("gate64_ipsec_qmsa", &[]) == want && m.sum("gate64_ipsec_mmsa", &[]) == want
        })
    });
    for c in clients.iter_mut() {
        c.ensure_running()?;
    }
    ensure!(
        up,
        "not every client's two tunnels came up on node {name} within {UP_TIMEOUT:?}\n{}",
        gate64_lines(&metrics(node)?)
    );
    for (i, ns) in lab.clients.iter().enumerate() {
        for host in [CORP_HOST, INTRANET_HOST] {
            ensure!(
                wait_until(Duration::from_secs(15), || ping_ok(ns, "-6", host)),
                "client {i}: no ping reply from {host} through node {name}"
            );
        }
    }
    Ok(())
}

/// A client as a node's `gate64 status --json` shows it: outer address, inner addresses,
/// and every (IKE SPI, inbound SPI, outbound SPI) of its child SAs.
type Client = (String, Vec<String>, BTreeSet<(String, u64, u64)>);

/// The IP-HTTPS clients in `node`'s `gate64 status --json`.
fn status_clients(node: &Netns) -> Result<BTreeSet<Client>> {
    let v = status_json_in(node)?;
    let mut all = BTreeSet::new();
    for c in v["clients"].as_array().into_iter().flatten() {
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let inner = c["inner"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        let sas = (c["sas"].as_array().into_iter().flatten())
            .map(|sa| {
                (
                    text(&sa["ike_spi_hex"]),
                    sa["spi_in"].as_u64().unwrap_or_default(),
                    sa["spi_out"].as_u64().unwrap_or_default(),
                )
            })
            .collect();
        all.insert((text(&c["outer"]), inner, sas));
    }
    Ok(all)
}

fn reclaims(m: &Metrics, result: &str) -> f64 {
    m.sum(
        "gate64_iphttps_prefix_reclaims_total",
        &[("result", result)],
    )
}

/// The lab wired with the group's first members `first`, its certificates, both nodes up
/// (node B routing node A's IP-HTTPS prefix into its TUN).
fn set_up(lab: &Lab, first: &[u32]) -> Result<(PathBuf, LabCerts, Vec<Process>)> {
    wire(lab, first)?;
    let tls = lab.router.dir().join("tls");
    gate64_certs(&lab.router, &tls, IPHTTPS_ADDRESS, "gate64.lab")?;
    let endpoint: Ipv6Addr = ENDPOINT.parse()?;
    let ike = LabCerts::generate(
        &lab.router,
        &lab.router.dir().join("ike"),
        IpAddr::V6(endpoint),
    )?;
    let gates = start_nodes(lab, &tls, &ike)?;
    let route = lab.nodes[1].ip(&["-6", "route", "show", NODES[0].prefix])?;
    ensure!(
        route.contains("dev gate64"),
        "node B does not route node A's IP-HTTPS prefix into its TUN: {route:?}"
    );
    Ok((tls, ike, gates))
}

/// Both ping streams of each client (infrastructure and intranet host).
fn start_streams(lab: &Lab) -> Result<Vec<[Stream; 2]>> {
    (lab.clients.iter())
        .map(|ns| {
            Ok([
                Stream::start("ping-infrastructure", ns, "-6", CORP_HOST)?,
                Stream::start("ping-intranet", ns, "-6", INTRANET_HOST)?,
            ])
        })
        .collect()
}

fn run(lab: &Lab) -> Result<()> {
    // Node A alone at first: every client connects to it.
    let (tls, ike, _gates) = set_up(lab, &NH_A)?;
    let n = lab.clients.len();
    let [na, nb] = &lab.nodes;
    let mut clients = start_clients(lab, &tls, &ike)?;
    wait_tunnels_on(lab, na, "A", &mut clients)?;
    let streams = start_streams(lab)?;
    // Node B joins: the clients' buckets carry their pings, so they stay with node A.
    set_group(&lab.router, &[NH_A[0], NH_A[1], NH_B[0], NH_B[1]])?;
    let before = only_clients_of(na, &NODES[0], n)?;
    let records = 4.0 * n as f64;
    let b_before = wait_store_records(nb, records, SYNC_BOUND)?;
    let links = b_before.sum("gate64_tls_handshakes_total", &[("result", "ok")]);
    ensure!(
        links == 0.0,
        "node B has {links} IP-HTTPS link(s) before node A's death: the join moved a client"
    );

    let none = BTreeSet::new();
    let taken = kill_node_a_and_check(lab, &mut clients, &streams, &b_before, &before, &none)?;
    println!(
        "ECMP IP-HTTPS takeover with {n} clients of node A: each back on node B with its /64, \
         inner address and SPIs; {taken}"
    );
    Ok(())
}

/// Each client's two ping streams.
type Streams = [[Stream; 2]];

/// SIGKILLs node A and withdraws it as a routing daemon would, then asserts that every
/// client's pings flow again through node B, which gave each client of node A (`before`, as
/// node A's status listed them) its /64 back, ran no IKE negotiation since `b_before`, took
/// exactly both IKE SAs of each client over on demand, and now lists those clients exactly as
/// node A did; besides them, only clients of `stale` (node B's own from before, which it may
/// still list or may have timed out). Returns what to print: the counts and each ping
/// stream's longest silence.
fn kill_node_a_and_check(
    lab: &Lab,
    clients: &mut [Process],
    streams: &Streams,
    b_before: &Metrics,
    before: &BTreeSet<Client>,
    stale: &BTreeSet<Client>,
) -> Result<String> {
    let [na, nb] = &lab.nodes;
    let n = before.len();
    let want = 2.0 * n as f64;
    let died = now_epoch();
    for pid in na.pids() {
        signal(pid as u32, "-KILL");
    }
    withdraw_node_a(&lab.router)?;
    // A reply counts from half a second after the router's change: none still in flight
    // from before it, so each came through node B.
    let cut = now_epoch() + 0.5;
    let resumed = wait_until(RESUME_BOUND, || {
        streams.iter().flatten().all(|s| s.resumed_after(cut))
    });
    let recovery = now_epoch() - died;
    let m = metrics(nb)?;
    ensure!(
        resumed,
        "not every client's pings flowed again through node B within {RESUME_BOUND:?} of node \
         A's death\n{}",
        gate64_lines(&m)
    );
    let reclaimed = reclaims(&m, "reclaimed") - reclaims(b_before, "reclaimed");
    ensure!(
        reclaimed == n as f64 && reclaims(&m, "in_use") == 0.0,
        "node B gave {reclaimed} of {n} clients their /64 back\n{}",
        gate64_lines(&m)
    );
    let negotiated = m.sum("gate64_ike_negotiations_total", &[]);
    ensure!(
        negotiated == b_before.sum("gate64_ike_negotiations_total", &[]),
        "node B ran IKE negotiations across the takeover ({negotiated}): a client \
         authenticated again\n{}",
        gate64_lines(&m)
    );
    let on_demand = sync(&m, "on_demand") - sync(b_before, "on_demand");
    let failed = sync(&m, "install_failed");
    ensure!(
        on_demand == want && failed == 0.0,
        "node B took {on_demand} IKE SAs over on demand ({failed} installs failed), want \
         {want} (2 for each of node A's {n} clients)\n{}",
        gate64_lines(&m)
    );
    let after = status_clients(nb)?;
    let others: BTreeSet<Client> = after.difference(before).cloned().collect();
    ensure!(
        after.is_superset(before) && others.is_subset(stale),
        "the clients' addresses or SAs changed across the takeover:\nnode A before \
         {before:#?}\nnode B's own before {stale:#?}\nnode B after {after:#?}"
    );
    for c in clients.iter_mut() {
        c.ensure_running()?;
    }
    let mut gaps = Vec::new();
    for (i, pair) in streams.iter().enumerate() {
        for s in pair {
            let (silence, lost) = s.figures(died).unwrap_or((f64::NAN, 0));
            gaps.push(format!(
                "client {i} {}: {silence:.2} s, {lost} lost",
                s.what
            ));
        }
    }
    Ok(format!(
        "checked {recovery:.1} s after node A's death: node B reclaimed {reclaimed} /64s of \
         node A's prefix, took {on_demand} IKE SAs over on demand ({} by ESP) and ran no IKE \
         negotiation; longest silence per ping stream (20 a second, from 1 s before the \
         death): {}",
        sync(&m, "on_demand_esp") - sync(b_before, "on_demand_esp"),
        gaps.join("; ")
    ))
}

/// The IP-HTTPS clients `ns`'s status lists (it runs node `node`): an error unless they are
/// `n`, each with its outer address in the node's prefix, an inner address and two child SAs.
fn only_clients_of(ns: &Netns, node: &Node, n: usize) -> Result<BTreeSet<Client>> {
    let status = status_clients(ns)?;
    let prefix = format!("{}:", node.prefix.trim_end_matches("::/48"));
    ensure!(
        status.len() == n
            && (status.iter())
                .all(|c| c.0.starts_with(&prefix) && !c.1.is_empty() && c.2.len() == 2),
        "want {n} clients on node {}, each with its outer address in {}, an inner address \
         and two child SAs (outer, inner, SAs): {status:#?}",
        node.name,
        node.prefix
    );
    Ok(status)
}

/// Node B's sync messages to node A go nowhere (node A's to node B still arrive): a route
/// that refuses them in node B.
fn block_sync_from_b(lab: &Lab) -> Result<()> {
    lab.nodes[1].ip(&["route", "add", "prohibit", "10.0.9.1/32"])?;
    Ok(())
}

fn run_moved(lab: &Lab) -> Result<()> {
    // Node B alone at first, and node A hears nothing of its clients.
    let (tls, ike, _gates) = set_up(lab, &NH_B)?;
    block_sync_from_b(lab)?;
    let n = lab.clients.len();
    let [na, nb] = &lab.nodes;
    let mut clients = start_clients(lab, &tls, &ike)?;
    wait_tunnels_on(lab, nb, "B", &mut clients)?;
    let on_b = only_clients_of(nb, &NODES[1], n)?;

    // The clients' packets go to node A: each reconnects there, gets a /64 of node A's and
    // negotiates both tunnels again; node B keeps their old links and SAs.
    set_group(&lab.router, &NH_A)?;
    wait_tunnels_on(lab, na, "A", &mut clients)?;
    let before = only_clients_of(na, &NODES[0], n)?;
    let streams = start_streams(lab)?;

    // Node B learns what node A did: the records name the clients' node A /64s.
    let b_before = wait_store_records(nb, 4.0 * n as f64, SYNC_BOUND)?;
    let taken = kill_node_a_and_check(lab, &mut clients, &streams, &b_before, &before, &on_b)?;
    println!(
        "ECMP IP-HTTPS takeover of {n} clients that moved from node B to node A without a \
         word: each back on node B with its node A /64, inner address and SPIs, while node B \
         still held its old link; {taken}"
    );
    Ok(())
}
