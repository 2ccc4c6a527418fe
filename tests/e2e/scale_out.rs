//! Scale-out past one box with BIRD and ECMP, in network namespaces.
//!
//! ```text
//!  sotc1 (Teredo, server 192.0.2.1) ─┐                 ┌─ son1: gate64 + BIRD AS 65001 (10.0.1.2)
//!  sotc2 (Teredo, server 192.0.2.3) ─┤ sorouter: BIRD  │
//!  soic1..3 (IP-HTTPS, anycast      ─┤ AS 65000, ECMP  ┤
//!            198.51.100.100)        ─┘  └─ socorp      └─ son2: gate64 + BIRD AS 65002 (10.0.2.2)
//!                                     (2001:db8:100:1::2)
//! ```
//!
//! Each node owns its state and announces by BGP what brings that state's traffic to it:
//! its Teredo server addresses (node 1 192.0.2.1/.2, node 2 192.0.2.3/.4) and Teredo prefix
//! (2001:0:c000:201::/64, 2001:0:c000:203::/64, derived from the server address, RFC 4380
//! §4), its IP-HTTPS client prefix (2001:db8:1::/48, 2001:db8:2::/48), its NAT64 pool4
//! (198.19.1.0/28, 198.19.2.0/28: replies from the IPv4 host 10.20.0.2 come back to the node
//! holding the binding), and the IP-HTTPS
//! address 198.51.100.100, which both announce: the router installs it as an ECMP route and
//! hashes each TCP connection to one node (`fib_multipath_hash_policy = 1`). Return traffic
//! from the corporate host reaches the node holding the client because the client's address
//! lies in that node's prefix.
//!
//! `netns_scale_out_bird_ecmp_without_ipsec`: every client reaches the corporate host, and the IPv4 host
//! through NAT64; node 1 dies (every
//! process killed, its link down); node 2's clients keep working without losing an echo
//! request and still reach the IPv4 host (asserted); what happens to node 1's clients is printed.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::{Bird, Neighbor, Netns, Process, gate64_binary, netns_or_skip, wait_until};

use crate::common::path_str;
use crate::failover::{Stream, metrics, now_epoch, ping_ok, signal};

const CORP_HOST: &str = "2001:db8:100:1::2";
/// Pref64 (network-specific: the IPv4 host is private, RFC 6052 §3.1).
const PREF64: &str = "2001:db8:64::/96";
/// The IPv4-only corporate host 10.20.0.2 through Pref64.
const CORP_HOST_V4_VIA_NAT64: &str = "2001:db8:64::a14:2";
const ANYCAST_IPHTTPS: &str = "198.51.100.100";
/// IP-HTTPS clients started; the router's hash decides which node each lands on.
const IPHTTPS_CLIENTS: usize = 3;
/// Generous bound for BGP sessions, client links and recoveries on two shared cores.
const BOUND: Duration = Duration::from_secs(30);

#[test]
#[ignore = "netns: needs root"]
fn netns_scale_out_bird_ecmp_without_ipsec() {
    if !netns_or_skip("netns_scale_out_bird_ecmp_without_ipsec") {
        return;
    }
    crate::common::run_timed("scale-out", scale_out);
}

/// One gate64 node's own addresses and prefixes.
struct NodePlan {
    index: usize,
    teredo: [&'static str; 2],
    teredo_prefix: &'static str,
    iphttps_prefix: &'static str,
    pool4: &'static str,
}

const NODES: [NodePlan; 2] = [
    NodePlan {
        index: 1,
        teredo: ["192.0.2.1", "192.0.2.2"],
        teredo_prefix: "2001:0:c000:201::/64",
        iphttps_prefix: "2001:db8:1::/48",
        pool4: "198.19.1.0/28",
    },
    NodePlan {
        index: 2,
        teredo: ["192.0.2.3", "192.0.2.4"],
        teredo_prefix: "2001:0:c000:203::/64",
        iphttps_prefix: "2001:db8:2::/48",
        pool4: "198.19.2.0/28",
    },
];

fn node_gate64_config(plan: &NodePlan, certs: &Path) -> Result<String> {
    Ok(format!(
        "[server]\nworkers = 1\n\n\
         [teredo]\nserver_addresses = [\"{}\", \"{}\"]\nport = 3544\nrelay = true\n\n\
         [iphttps]\nenabled = true\nlisten = \"{ANYCAST_IPHTTPS}:443\"\ncertificate = {:?}\n\
         private_key = {:?}\nprefix = \"{}\"\n\n\
         [corpnet]\ntun = \"gate64\"\nipv6_prefixes = [\"2001:db8:100::/48\"]\n\
         address6 = \"2001:db8:100::1\"\n\n[ipsec]\nrequire = false\n\n\
         [nat64]\nprefix = \"{PREF64}\"\npool4 = [\"{}\"]\n\n\
         [metrics]\nlisten = \"127.0.0.1:9164\"\n\n[log]\nlevel = \"info\"\n",
        plan.teredo[0],
        plan.teredo[1],
        path_str(&certs.join("server.pem"))?,
        path_str(&certs.join("server.key"))?,
        plan.iphttps_prefix,
        plan.pool4,
    ))
}

/// The router in front of the ECMP nodes: it forwards both families, does not check sources
/// strictly (replies may come back over another node), and hashes multipath on ports too, so
/// that the clients spread over the nodes.
pub(crate) fn router_sysctls(ns: &Netns) -> Result<()> {
    for (k, v) in [
        ("net.ipv4.ip_forward", "1"),
        ("net.ipv6.conf.all.forwarding", "1"),
        ("net.ipv4.conf.all.rp_filter", "0"),
        ("net.ipv4.conf.default.rp_filter", "0"),
        ("net.ipv4.fib_multipath_hash_policy", "1"),
        ("net.ipv6.fib_multipath_hash_policy", "1"),
    ] {
        ns.sysctl(k, v)?;
    }
    Ok(())
}

fn scale_out() -> Result<()> {
    let router = Netns::new("sorouter")?;
    let corp = Netns::new("socorp")?;
    let nodes = [Netns::new("son1")?, Netns::new("son2")?];
    let teredo_clients = [Netns::new("sotc1")?, Netns::new("sotc2")?];
    let iphttps_clients: Vec<Netns> = (1..=IPHTTPS_CLIENTS)
        .map(|i| Netns::new(&format!("soic{i}")))
        .collect::<Result<_>>()?;
    let r = run(&router, &corp, &nodes, &teredo_clients, &iphttps_clients);
    if r.is_err() {
        for ns in [&router, &nodes[0], &nodes[1]]
            .into_iter()
            .chain(&teredo_clients)
            .chain(&iphttps_clients)
        {
            eprintln!("{}", ns.logs_report());
        }
    }
    r
}

fn run(
    router: &Netns,
    corp: &Netns,
    nodes: &[Netns; 2],
    teredo_clients: &[Netns; 2],
    iphttps_clients: &[Netns],
) -> Result<()> {
    let bin = gate64_binary()?;
    router_sysctls(router)?;
    router.veth("corp", corp, "eth0")?;
    router.addr_add("corp", "2001:db8:100:1::1/64")?;
    corp.addr_add("eth0", "2001:db8:100:1::2/64")?;
    corp.ip(&["-6", "route", "add", "default", "via", "2001:db8:100:1::1"])?;
    router.addr_add("corp", "10.20.0.1/24")?;
    corp.addr_add("eth0", "10.20.0.2/24")?;
    corp.ip(&["route", "add", "default", "via", "10.20.0.1"])?;
    router.ip(&["link", "add", "brc", "type", "bridge"])?;
    router.link_up("brc")?;
    router.addr_add("brc", "203.0.113.254/24")?;
    let clients: Vec<&Netns> = teredo_clients.iter().chain(iphttps_clients).collect();
    for (i, c) in clients.iter().enumerate() {
        let port = format!("c{i}");
        router.veth(&port, c, "eth0")?;
        router.ip(&["link", "set", &port, "master", "brc"])?;
        c.addr_add("eth0", &format!("203.0.113.{}/24", 10 + i))?;
        c.ip(&["route", "add", "default", "via", "203.0.113.254"])?;
    }

    let certs = router.dir().join("certs");
    router.exec_ok(&[
        path_str(&bin)?,
        "certs",
        "--out",
        path_str(&certs)?,
        "--server-ip",
        ANYCAST_IPHTTPS,
        "--server-name",
        "gate64.lab.example",
    ])?;

    let mut router_neighbors = Vec::new();
    let names = [["n1v4", "n1v6"], ["n2v4", "n2v6"]];
    let node_v4: Vec<String> = NODES
        .iter()
        .map(|p| format!("10.0.{}.2", p.index))
        .collect();
    let node_v6: Vec<String> = NODES
        .iter()
        .map(|p| format!("2001:db8:f{}::2", p.index))
        .collect();
    let mut gates: Vec<Process> = Vec::new();
    let mut birds = Vec::new();
    for (k, (node, plan)) in nodes.iter().zip(&NODES).enumerate() {
        let i = plan.index;
        let port = format!("n{i}");
        router.veth(&port, node, "up0")?;
        router.addr_add(&port, &format!("10.0.{i}.1/24"))?;
        router.addr_add(&port, &format!("2001:db8:f{i}::1/64"))?;
        node.addr_add("up0", &format!("10.0.{i}.2/24"))?;
        node.addr_add("up0", &format!("2001:db8:f{i}::2/64"))?;
        node.ip(&["route", "add", "default", "via", &format!("10.0.{i}.1")])?;
        node.ip(&[
            "-6",
            "route",
            "add",
            "default",
            "via",
            &format!("2001:db8:f{i}::1"),
        ])?;
        node.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        node.sysctl("net.ipv4.ip_forward", "1")?;
        for a in plan.teredo.iter().chain([&ANYCAST_IPHTTPS]) {
            node.addr_add("lo", &format!("{a}/32"))?;
        }
        let conf = node.write_file("gate64.toml", &node_gate64_config(plan, &certs)?)?;
        let mut gate = node.spawn(
            "gate64",
            &[path_str(&bin)?, "serve", "--config", path_str(&conf)?],
        )?;
        ensure!(
            wait_until(BOUND, || gate.is_running() && metrics(node).is_ok()),
            "gate64 on {} did not come up: {}",
            node.name(),
            gate.log()
        );
        gates.push(gate);
        let announced: Vec<String> = plan
            .teredo
            .iter()
            .chain([&ANYCAST_IPHTTPS])
            .map(|a| format!("{a}/32"))
            .chain([
                plan.teredo_prefix.to_owned(),
                plan.iphttps_prefix.to_owned(),
                plan.pool4.to_owned(),
            ])
            .collect();
        let announced: Vec<&str> = announced.iter().map(String::as_str).collect();
        let (r4, r6) = (format!("10.0.{i}.1"), format!("2001:db8:f{i}::1"));
        let up = [
            Neighbor {
                name: "up4",
                address: &r4,
                asn: 65000,
            },
            Neighbor {
                name: "up6",
                address: &r6,
                asn: 65000,
            },
        ];
        birds.push(Bird::start(
            node,
            &gate64_testkit::bird::node_config(&node_v4[k], 65000 + i as u32, &up, &announced),
        )?);
        router_neighbors.push((names[k][0], node_v4[k].clone(), 65000 + i as u32));
        router_neighbors.push((names[k][1], node_v6[k].clone(), 65000 + i as u32));
    }
    let neighbors: Vec<Neighbor> = router_neighbors
        .iter()
        .map(|(name, address, asn)| Neighbor {
            name,
            address,
            asn: *asn,
        })
        .collect();
    let router_bird = Bird::start(
        router,
        &gate64_testkit::bird::router_config("10.0.0.1", 65000, &neighbors),
    )?;
    let sessions = wait_until(BOUND, || {
        names.iter().flatten().all(|n| router_bird.established(n))
    });
    ensure!(
        sessions,
        "BGP sessions not established within {BOUND:?}:\n{}",
        router_bird
            .birdc(&["show", "protocols"])
            .unwrap_or_default()
    );
    let ecmp = wait_until(BOUND, || {
        router
            .ip(&["route", "show", &format!("{ANYCAST_IPHTTPS}/32")])
            .is_ok_and(|r| r.matches("nexthop").count() == 2)
    });
    ensure!(
        ecmp,
        "the router has no two-path ECMP route to {ANYCAST_IPHTTPS}: {}",
        router.ip(&["route"]).unwrap_or_default()
    );
    println!(
        "router: {ANYCAST_IPHTTPS} by ECMP: {}",
        router
            .ip(&["route", "show", &format!("{ANYCAST_IPHTTPS}/32")])?
            .trim()
    );

    let mut client_procs = Vec::new();
    for (c, plan) in teredo_clients.iter().zip(&NODES) {
        client_procs.push(c.spawn(
            "gate64-connect-teredo",
            &[
                path_str(&bin)?,
                "connect",
                "teredo",
                "--no-ipsec",
                "--server",
                plan.teredo[0],
                "--route",
                "2001:db8:100::/48",
                "--route",
                PREF64,
            ],
        )?);
    }
    let url = format!("https://{ANYCAST_IPHTTPS}/IPHTTPS");
    let ca = certs.join("ca.pem");
    let connect_iphttps = |c: &Netns| -> Result<Process> {
        c.spawn(
            "gate64-connect-iphttps",
            &[
                path_str(&bin)?,
                "connect",
                "iphttps",
                "--no-ipsec",
                "--server",
                &url,
                "--ca",
                path_str(&ca)?,
                "--route",
                "2001:db8:100::/48",
                "--route",
                PREF64,
            ],
        )
    };
    let mut iphttps_procs = Vec::new();
    for c in iphttps_clients {
        iphttps_procs.push(connect_iphttps(c)?);
    }
    for c in &clients {
        ensure!(
            wait_until(BOUND, || ping_ok(c, "-6", CORP_HOST)),
            "{}: no reply from the corporate host within {BOUND:?}",
            c.name()
        );
        // NAT64: the reply to the node's own pool4 must come back to that node.
        ensure!(
            wait_until(BOUND, || ping_ok(c, "-6", CORP_HOST_V4_VIA_NAT64)),
            "{}: no reply from the IPv4 host through NAT64 within {BOUND:?}; router routes:\n{}\n\
             node 1 routes:\n{}\nnode 1 drops: {:?}",
            c.name(),
            router.ip(&["route"]).unwrap_or_default(),
            nodes[0].ip(&["route"]).unwrap_or_default(),
            metrics(&nodes[0]).map(|m| m.sum("gate64_drops_total", &[]))
        );
    }
    // Which node holds each client: the prefix of its address.
    let on_node = |c: &Netns| -> Result<usize> {
        let addrs = c.ip(&["-6", "-o", "addr", "show", "scope", "global"])?;
        if addrs.contains("2001:0:c000:201:") || addrs.contains("2001:db8:1:") {
            Ok(1)
        } else if addrs.contains("2001:0:c000:203:") || addrs.contains("2001:db8:2:") {
            Ok(2)
        } else {
            bail!("{}: no address of either node: {addrs}", c.name())
        }
    };
    let mut placement: Vec<usize> = clients.iter().map(|c| on_node(c)).collect::<Result<_>>()?;
    // The hash may put every IP-HTTPS client on node 2 (one run in eight), which would leave
    // node 1's death without an IP-HTTPS client to reconnect: connect the last one again (a
    // new source port, a new hash) until it lands on node 1, at most 16 times.
    let last = clients.len() - 1;
    for _ in 0..16 {
        if placement[2..].contains(&1) {
            break;
        }
        iphttps_procs[IPHTTPS_CLIENTS - 1].stop();
        iphttps_procs[IPHTTPS_CLIENTS - 1] = connect_iphttps(clients[last])?;
        ensure!(
            wait_until(BOUND, || ping_ok(clients[last], "-6", CORP_HOST)),
            "{}: no reply after connecting again",
            clients[last].name()
        );
        placement[last] = on_node(clients[last])?;
    }
    ensure!(
        placement[0] == 1 && placement[1] == 2,
        "the Teredo clients are not on their servers' nodes: {placement:?}"
    );
    for (k, plan) in NODES.iter().enumerate() {
        let m = metrics(&nodes[k])?;
        let n = |t| m.get("gate64_clients", &[("transport", t)]).unwrap_or(0.0);
        println!(
            "node {}: {} Teredo and {} IP-HTTPS clients",
            plan.index,
            n("teredo"),
            n("iphttps")
        );
    }

    let tags = ["teredo1", "teredo2", "iphttps1", "iphttps2", "iphttps3"];
    let streams: Vec<Stream> = clients
        .iter()
        .zip(tags)
        .map(|(c, tag)| Stream::start(tag, c, "-6", CORP_HOST))
        .collect::<Result<_>>()?;
    std::thread::sleep(Duration::from_secs(2));

    let died = now_epoch();
    let t = Instant::now();
    for pid in nodes[0].pids() {
        signal(pid as u32, "-KILL");
    }
    router.ip(&["link", "set", "n1", "down"])?;
    let withdrawn = wait_until(BOUND, || {
        router
            .ip(&["route", "show", &format!("{ANYCAST_IPHTTPS}/32")])
            .is_ok_and(|r| !r.contains("nexthop") && r.contains("10.0.2.2"))
    });
    println!(
        "node 1 died; the router's route to {ANYCAST_IPHTTPS} was single-path via node 2 \
         after {:.2} s ({withdrawn})",
        t.elapsed().as_secs_f64()
    );
    ensure!(
        withdrawn,
        "the router kept a route to {ANYCAST_IPHTTPS} via the dead node 1 for {BOUND:?}: {}",
        router.ip(&["route"]).unwrap_or_default()
    );
    // Node 1's IP-HTTPS clients reconnect (1 s backoff) and land on node 2; its Teredo
    // client's server is gone. Each gets a bounded chance to recover.
    let fates: Vec<(String, bool, String)> = std::thread::scope(|scope| {
        let waits: Vec<_> = clients
            .iter()
            .zip(&placement)
            .zip(tags)
            .filter(|((_, node), _)| **node == 1)
            .map(|((c, _), tag)| {
                scope.spawn(move || {
                    let recovered =
                        wait_until(Duration::from_secs(20), || ping_ok(c, "-6", CORP_HOST));
                    let node = recovered.then(|| on_node(c).ok()).flatten();
                    let fate = if recovered {
                        format!(
                            "recovered {:.1} s after the death, now on node {}",
                            now_epoch() - died,
                            node.map_or("?".to_owned(), |n| n.to_string())
                        )
                    } else {
                        "no reply within 20 s (its server and its state are gone)".to_owned()
                    };
                    // An IP-HTTPS client reaches the anycast address, now node 2 alone.
                    let iphttps_moved = tag.starts_with("iphttps") && node == Some(2);
                    let ok = !tag.starts_with("iphttps") || iphttps_moved;
                    (format!("{} ({tag})", c.name()), ok, fate)
                })
            })
            .collect();
        waits
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| ("?".to_owned(), false, "panicked".to_owned()))
            })
            .collect()
    });
    std::thread::sleep(Duration::from_secs(2));
    for s in &streams {
        signal(s.process.pid(), "-INT");
    }
    std::thread::sleep(Duration::from_millis(300));
    for (c, _, fate) in &fates {
        println!("  node 1's client {c}: {fate}");
    }
    ensure!(
        fates.iter().any(|(c, _, _)| c.contains("iphttps")),
        "no IP-HTTPS client was on node 1 (placement {placement:?}): the reconnection is untested"
    );
    for (c, ok, fate) in &fates {
        ensure!(
            *ok,
            "node 1's IP-HTTPS client {c} did not reconnect to node 2: {fate}"
        );
    }
    for ((s, &node), c) in streams.iter().zip(&placement).zip(&clients) {
        if node != 2 {
            continue;
        }
        let (silence, lost) = s
            .figures(died)
            .with_context(|| format!("{}: no reply after node 1 died", s.what))?;
        println!(
            "  node 2's client {} ({}): longest silence {silence:.2} s, {lost} echo requests lost",
            c.name(),
            s.what
        );
        ensure!(
            lost == 0 && s.resumed_after(died + 1.0),
            "{}: node 2's client lost {lost} echo requests when node 1 died",
            s.what
        );
    }
    for (c, &node) in clients.iter().zip(&placement) {
        if node == 2 {
            ensure!(
                ping_ok(c, "-6", CORP_HOST_V4_VIA_NAT64),
                "{}: node 2's client lost NAT64 when node 1 died",
                c.name()
            );
        }
    }
    gates[1].ensure_running().context("gate64 on node 2")?;
    drop(router_bird);
    drop(birds);
    Ok(())
}
