//! GRE site-to-site in network namespaces.
//!
//! - `netns_gre_ovs_interop`: Open vSwitch's userspace datapath (a GRE peer nobody here
//!   wrote) in `greovs`, gate64 in `gregw`, a host behind gate64 in `grelan`. The host behind
//!   Open vSwitch (its `site` port) pings the host behind gate64 and back, IPv4 and IPv6
//!   inside, with key 42 and then without a key; iperf3 runs each way (delivery asserted,
//!   Mbit/s printed).
//! - `netns_gre_two_tenants_overlapping_prefixes`: two sites, each a gate64 GRE peer, both
//!   using 172.16.0.0/24, in two tenants of the gateway (a TUN and routing table each); each
//!   site reaches only its own tenant's LAN, whose hosts share 10.64.0.5.
//! - `netns_gre_bad_input`: a raw socket sends wrong key, unknown peer, truncated, bad
//!   checksum and inner TTL 1: each dropped and counted under its reason.
//! - `netns_gre_ipv6_outer`: the tunnel over IPv6 (RFC 7676) between gate64 and another
//!   gate64, two GRE workers each, IPv4 and IPv6 inside, both ways, with keepalives, then
//!   iperf3 with 8 flows each way; packets counted sent cover those counted received.
//! - `netns_gre_two_workers`: two gate64s, each with two GRE workers (a TUN queue and a
//!   thread each), carry pings (IPv4 and IPv6 inside) and iperf3 with 8 flows each way;
//!   each end's packets counted sent are at least the other end's counted received.
//! - `netns_gre_keepalive_up_down`: gate64 sends Cisco-style keepalives every second to a
//!   peer without keepalives of its own (another gate64 that only reflects them); the tunnel
//!   goes down once the peer stops and up again once it is back.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::{
    GrePeer, Metrics, Netns, Ovs, Process, gate64_binary, http_get, netns_or_skip, wait_until,
};

const METRICS: &str = "127.0.0.1:9164";
/// Up to this long for a path to carry its first packet (Open vSwitch resolves its tunnel
/// neighbour on the first one; two cores are shared with other tests).
const DELIVERY: Duration = Duration::from_secs(30);

fn metrics_addr() -> SocketAddr {
    METRICS.parse().expect("literal address")
}

#[test]
#[ignore = "netns: needs root"]
fn netns_gre_ovs_interop() {
    if !netns_or_skip("netns_gre_ovs_interop") {
        return;
    }
    run(ovs_interop);
}

#[test]
#[ignore = "netns: needs root"]
fn netns_gre_two_tenants_overlapping_prefixes() {
    if !netns_or_skip("netns_gre_two_tenants_overlapping_prefixes") {
        return;
    }
    run(two_tenants);
}

#[test]
#[ignore = "netns: needs root"]
fn netns_gre_bad_input() {
    if !netns_or_skip("netns_gre_bad_input") {
        return;
    }
    run(bad_input);
}

#[test]
#[ignore = "netns: needs root"]
fn netns_gre_keepalive_up_down() {
    if !netns_or_skip("netns_gre_keepalive_up_down") {
        return;
    }
    run(keepalive_up_down);
}

#[test]
#[ignore = "netns: needs root"]
fn netns_gre_ipv6_outer() {
    if !netns_or_skip("netns_gre_ipv6_outer") {
        return;
    }
    run(ipv6_outer);
}

#[test]
#[ignore = "netns: needs root"]
fn netns_gre_two_workers() {
    if !netns_or_skip("netns_gre_two_workers") {
        return;
    }
    run(two_workers);
}

/// Runs a scenario; on error, panics with the error (namespaces and processes are cleaned up
/// by their drops, logs kept and printed by them).
fn run(scenario: impl FnOnce() -> Result<()>) {
    if let Err(e) = scenario() {
        panic!("{e:#}");
    }
}

/// The gateway, its LAN host and the links of the single-tunnel scenarios: `gw` has
/// 203.0.113.1/24 towards the peer namespace (`peer_port` there) and 10.64.0.1/24,
/// 2001:db8:64::1/64 towards `lan` (10.64.0.5, 2001:db8:64::5).
struct Lab {
    gw: Netns,
    lan: Netns,
    peer: Netns,
}

impl Lab {
    fn new(peer_tag: &str) -> Result<Lab> {
        let lab = Lab {
            gw: Netns::new("gregw")?,
            lan: Netns::new("grelan")?,
            peer: Netns::new(peer_tag)?,
        };
        let (gw, lan, peer) = (&lab.gw, &lab.lan, &lab.peer);
        gw.veth("u0", peer, "pp")?;
        gw.addr_add("u0", "203.0.113.1/24")?;
        gw.veth("l0", lan, "l1")?;
        gw.addr_add("l0", "10.64.0.1/24")?;
        gw.addr_add("l0", "2001:db8:64::1/64")?;
        lan.addr_add("l1", "10.64.0.5/24")?;
        lan.addr_add("l1", "2001:db8:64::5/64")?;
        lan.ip(&["-4", "route", "add", "default", "via", "10.64.0.1"])?;
        lan.ip(&["-6", "route", "add", "default", "via", "2001:db8:64::1"])?;
        router(gw)?;
        Ok(lab)
    }
}

/// Turns on forwarding and turns off reverse-path filtering (tenants' addresses repeat).
fn router(ns: &Netns) -> Result<()> {
    ns.sysctl("net.ipv4.ip_forward", "1")?;
    ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    ns.sysctl("net.ipv4.conf.all.rp_filter", "0")?;
    ns.sysctl("net.ipv4.conf.default.rp_filter", "0")
}

/// `gate64 serve` in `ns` with `[corpnet] tun`, `[metrics]` and `gre` (no client transport);
/// waits (≤ 20 s) for its GRE metrics.
fn start_gate64(ns: &Netns, gre: &str) -> Result<Process> {
    start_gate64_workers(ns, gre, 1)
}

/// [`start_gate64`] with `[server] workers` (the GRE threads and TUN queues).
fn start_gate64_workers(ns: &Netns, gre: &str, workers: u32) -> Result<Process> {
    let bin = gate64_binary()?;
    let conf = format!(
        "[server]\nworkers = {workers}\n\n[corpnet]\ntun = \"gate64\"\n\n[metrics]\nlisten = \"{METRICS}\"\n\n{gre}"
    );
    let file = ns.write_file("gate64.toml", &conf)?;
    let bin_s = bin.to_string_lossy().into_owned();
    let file_s = file.to_string_lossy().into_owned();
    let mut gate = ns.spawn("gate64", &[&bin_s, "serve", "--config", &file_s])?;
    let up = wait_until(Duration::from_secs(20), || {
        gate.is_running() && metrics(ns).is_ok_and(|m| m.has("gate64_gre_tunnels"))
    });
    gate.ensure_running()
        .with_context(|| format!("gate64 serve with\n{conf}"))?;
    ensure!(
        up,
        "gate64 did not come up within 20 s; its log:\n{}",
        gate.log()
    );
    Ok(gate)
}

fn metrics(ns: &Netns) -> Result<Metrics> {
    let text = ns.run_in(|| http_get(metrics_addr(), "/metrics"))??;
    Ok(Metrics::parse(&text))
}

/// One ping from `src` to `dst` in `ns`, answered within 2 s.
fn ping_once(ns: &Netns, src: &str, dst: &str) -> bool {
    ns.exec(&["ping", "-c", "1", "-W", "2", "-I", src, dst])
        .is_ok_and(|o| o.status.success())
}

/// Pings until one is answered (≤ [`DELIVERY`]).
fn delivered(ns: &Netns, src: &str, dst: &str) -> Result<()> {
    ensure!(
        wait_until(DELIVERY, || ping_once(ns, src, dst)),
        "no ping reply {src} -> {dst} in {} within {DELIVERY:?}",
        ns.name()
    );
    Ok(())
}

/// `[gre]` asking for the packet-socket outer path (the default is the raw socket), for the
/// tests that check gate64 sends whole frames ([`sends_frames`]).
const PACKET_PATH: &str = "[gre]\nouter_path = \"packet\"\n\n";

/// The site's key-42 tunnel routes for the interop and bad-input scenarios.
fn site2(key: Option<u32>) -> String {
    let key = key.map_or(String::new(), |k| format!("key = {k}\n"));
    format!(
        "[[gre.tunnel]]\nname = \"site2\"\nlocal = \"203.0.113.1\"\nremote = \"203.0.113.2\"\n\
         {key}routes = [\"172.16.0.0/24\", \"2001:db8:16::/64\"]\n"
    )
}

fn ovs_interop() -> Result<()> {
    let lab = Lab::new("greovs")?;
    let ovs = Ovs::start(&lab.peer)?;
    let peer = GrePeer {
        underlay_port: "pp",
        underlay_cidr: "203.0.113.2/24",
        remote_ip: "203.0.113.1",
        key: Some(42),
        site_addrs: &["172.16.0.5/24", "2001:db8:16::5/64"],
        site_routes: &[
            ("10.64.0.0/24", "172.16.0.1"),
            ("2001:db8:64::/64", "2001:db8:16::1"),
        ],
    };
    ovs.l3_gre_peer(&peer)?;
    let gate = start_gate64(&lab.gw, &format!("{PACKET_PATH}{}", site2(Some(42))))?;
    let r = interop_checks(&lab, &ovs, true).and_then(|()| sends_frames(&gate, "site2"));
    if r.is_err() {
        eprintln!("Open vSwitch datapath flows:\n{}", ovs.dump_flows());
        eprintln!("gate64 log:\n{}", gate.log());
    }
    r?;
    drop(gate);
    // The same without a key on either side.
    ovs.vsctl(&["remove", "interface", "gre0", "options", "key"])?;
    let gate = start_gate64(&lab.gw, &format!("{PACKET_PATH}{}", site2(None)))?;
    let r = interop_checks(&lab, &ovs, false).and_then(|()| sends_frames(&gate, "site2"));
    if r.is_err() {
        eprintln!("Open vSwitch datapath flows:\n{}", ovs.dump_flows());
        eprintln!("gate64 log:\n{}", gate.log());
    }
    r
}

fn interop_checks(lab: &Lab, _ovs: &Ovs<'_>, iperf: bool) -> Result<()> {
    let (lan, peer) = (&lab.lan, &lab.peer);
    delivered(peer, "172.16.0.5", "10.64.0.5").context("IPv4, Open vSwitch side first")?;
    delivered(lan, "10.64.0.5", "172.16.0.5").context("IPv4, gate64 side first")?;
    delivered(peer, "2001:db8:16::5", "2001:db8:64::5").context("IPv6, Open vSwitch side")?;
    delivered(lan, "2001:db8:64::5", "2001:db8:16::5").context("IPv6, gate64 side")?;
    let m = metrics(&lab.gw)?;
    let bytes = |dir| {
        m.get(
            "gate64_gre_bytes_total",
            &[("tunnel", "site2"), ("direction", dir)],
        )
    };
    ensure!(
        bytes("rx").unwrap_or(0.0) > 0.0 && bytes("tx").unwrap_or(0.0) > 0.0,
        "GRE byte counters did not move: rx {:?} tx {:?}",
        bytes("rx"),
        bytes("tx")
    );
    ensure!(
        m.get("gate64_gre_tunnels", &[("state", "up")]) == Some(1.0),
        "gate64_gre_tunnels{{state=up}} is not 1"
    );
    if iperf {
        let (up, down) = iperf3_both_ways(lab, "10.64.0.5", "172.16.0.5", 1)?;
        println!(
            "GRE via Open vSwitch <-> gate64, one TCP flow, 3 s: Open vSwitch side to gate64 \
             side {up:.0} Mbit/s, gate64 side to Open vSwitch side {down:.0} Mbit/s"
        );
    }
    Ok(())
}

/// gate64 with `outer_path = "packet"` found the next hop of `tunnel` (a veth, so Ethernet) and writes its outer packets
/// as whole frames on a packet socket: its log says so within 5 s (the neighbour is learnt
/// from the first packets, sent through the raw socket).
fn sends_frames(gate: &Process, tunnel: &str) -> Result<()> {
    let line = "GRE tunnel sends whole frames on a packet socket";
    // The log may be coloured (escapes between a field's name and its value): the line
    // and the tunnel's name are looked for apart.
    let found = || {
        gate.log()
            .lines()
            .any(|l| l.contains(line) && l.contains(tunnel))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !found() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    ensure!(
        found(),
        "gate64 does not send tunnel {tunnel}'s packets as frames; its log:\n{}",
        gate.log()
    );
    Ok(())
}

/// iperf3 servers on the LAN host (at `lan_host`) and the site host (at `site_host`), then
/// [`iperf3`] runs with `flows` flows from the site to the LAN host and back: (up, down)
/// Mbit/s.
fn iperf3_both_ways(lab: &Lab, lan_host: &str, site_host: &str, flows: u32) -> Result<(f64, f64)> {
    let _lan_server = lab.lan.spawn("iperf3", &["iperf3", "-s", "-B", lan_host])?;
    let _site_server = lab
        .peer
        .spawn("iperf3", &["iperf3", "-s", "-B", site_host])?;
    std::thread::sleep(Duration::from_millis(500));
    let up = iperf3(&lab.peer, lan_host, site_host, flows)?;
    let down = iperf3(&lab.lan, site_host, lan_host, flows)?;
    Ok((up, down))
}

/// A 3 s iperf3 run with `flows` parallel flows from `ns` (source `src`) to `dst`; returns
/// the received
/// Mbit/s, which must be above 0.
fn iperf3(ns: &Netns, dst: &str, src: &str, flows: u32) -> Result<f64> {
    let flows = flows.to_string();
    let argv = [
        "iperf3",
        "-P",
        &flows,
        "-c",
        dst,
        "-B",
        src,
        "-t",
        "3",
        "--json",
        "--connect-timeout",
        "5000",
    ];
    let out = ns.exec_timeout(&argv, Duration::from_secs(40))?;
    let json = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success(), "iperf3 {dst}: {json}");
    let bps = json
        .rsplit_once("\"sum_received\"")
        .and_then(|(_, rest)| rest.split_once("\"bits_per_second\":"))
        .and_then(|(_, rest)| rest.trim_start().split([',', '\n', '}']).next())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(|| format!("no sum_received in {json}"))?;
    ensure!(bps > 0.0, "iperf3 to {dst} delivered nothing");
    Ok(bps / 1e6)
}

fn two_tenants() -> Result<()> {
    let gw = Netns::new("gre2gw")?;
    let site_a = Netns::new("gresa")?;
    let site_b = Netns::new("gresb")?;
    let lan_red = Netns::new("grered")?;
    let lan_blue = Netns::new("greblue")?;
    router(&gw)?;
    gw.veth("ua", &site_a, "wan0")?;
    gw.veth("ub", &site_b, "wan0")?;
    gw.addr_add("ua", "203.0.113.1/24")?;
    gw.addr_add("ub", "198.51.100.1/24")?;
    site_a.addr_add("wan0", "203.0.113.2/24")?;
    site_b.addr_add("wan0", "198.51.100.2/24")?;
    // Both LANs are 10.64.0.0/24 behind 10.64.0.1: only the tenant's table tells them apart.
    for (dev, ns, table, tun) in [
        ("lr", &lan_red, "100", "gre-red"),
        ("lb", &lan_blue, "200", "gre-blue"),
    ] {
        gw.veth(dev, ns, "lan0")?;
        gw.ip(&["addr", "add", "10.64.0.1/24", "dev", dev, "noprefixroute"])?;
        gw.ip(&["route", "add", "10.64.0.0/24", "dev", dev, "table", table])?;
        gw.ip(&["rule", "add", "iif", dev, "lookup", table])?;
        gw.ip(&["rule", "add", "iif", tun, "lookup", table])?;
        ns.addr_add("lan0", "10.64.0.5/24")?;
        ns.ip(&["route", "add", "default", "via", "10.64.0.1"])?;
    }
    lan_red.addr_add("lan0", "10.64.0.77/24")?;
    let tunnels = "[[gre.tenant]]\nname = \"red\"\ntun = \"gre-red\"\ntable = 100\n\n\
        [[gre.tenant]]\nname = \"blue\"\ntun = \"gre-blue\"\ntable = 200\n\n\
        [[gre.tunnel]]\nname = \"red-site\"\nlocal = \"203.0.113.1\"\nremote = \"203.0.113.2\"\n\
        key = 1\ntenant = \"red\"\nroutes = [\"172.16.0.0/24\"]\n\n\
        [[gre.tunnel]]\nname = \"blue-site\"\nlocal = \"198.51.100.1\"\nremote = \"198.51.100.2\"\n\
        key = 2\ntenant = \"blue\"\nroutes = [\"172.16.0.0/24\"]\n";
    let _gate = start_gate64(&gw, tunnels)?;
    let mut sites = Vec::new();
    for (ns, local, remote, key) in [
        (&site_a, "203.0.113.2", "203.0.113.1", 1),
        (&site_b, "198.51.100.2", "198.51.100.1", 2),
    ] {
        router(ns)?;
        ns.addr_add("lo", "172.16.0.5/32")?;
        let conf = format!(
            "[[gre.tunnel]]\nname = \"hq\"\nlocal = \"{local}\"\nremote = \"{remote}\"\n\
             key = {key}\nroutes = [\"10.64.0.0/24\"]\n"
        );
        sites.push(start_gate64(ns, &conf)?);
    }
    delivered(&site_a, "172.16.0.5", "10.64.0.5").context("red site to its LAN")?;
    delivered(&site_b, "172.16.0.5", "10.64.0.5").context("blue site to its LAN")?;
    delivered(&site_a, "172.16.0.5", "10.64.0.77").context("red site to red-only host")?;
    delivered(&lan_red, "10.64.0.77", "172.16.0.5").context("red LAN to its site")?;
    // 10.64.0.77 exists only in red's LAN: blue's site must not reach it.
    for _ in 0..3 {
        if ping_once(&site_b, "172.16.0.5", "10.64.0.77") {
            bail!("the blue site reached 10.64.0.77, a host of the red tenant");
        }
    }
    let m = metrics(&gw)?;
    for t in ["red-site", "blue-site"] {
        let rx = m.get(
            "gate64_gre_packets_total",
            &[("tunnel", t), ("direction", "rx")],
        );
        let tx = m.get(
            "gate64_gre_packets_total",
            &[("tunnel", t), ("direction", "tx")],
        );
        ensure!(
            rx.unwrap_or(0.0) > 0.0 && tx.unwrap_or(0.0) > 0.0,
            "tunnel {t} carried nothing: rx {rx:?} tx {tx:?}"
        );
    }
    Ok(())
}

fn bad_input() -> Result<()> {
    let lab = Lab::new("grebad")?;
    lab.peer.addr_add("pp", "203.0.113.2/24")?;
    lab.peer.addr_add("pp", "203.0.113.3/24")?;
    let _gate = start_gate64(&lab.gw, &site2(Some(42)))?;
    let cases: [(&str, &str, Vec<u8>); 6] = [
        ("valid", "203.0.113.2", keyed(0x2000, 42, 64)),
        ("gre_bad_key", "203.0.113.2", keyed(0x2000, 43, 64)),
        ("gre_unknown_peer", "203.0.113.3", keyed(0x2000, 42, 64)),
        (
            "gre_malformed",
            "203.0.113.2",
            vec![0x20, 0x00, 0x08, 0x00, 0x00],
        ),
        ("gre_checksum", "203.0.113.2", keyed(0xa000, 42, 64)),
        ("gre_ttl", "203.0.113.2", keyed(0x2000, 42, 1)),
    ];
    const SENT: usize = 5;
    for (_, from, bytes) in &cases {
        send_raw(&lab.peer, from, "203.0.113.1", bytes, SENT)?;
    }
    let counted = |m: &Metrics, reason: &str| match reason {
        "valid" => m.get(
            "gate64_gre_packets_total",
            &[("tunnel", "site2"), ("direction", "rx")],
        ),
        _ => m.get("gate64_drops_total", &[("reason", reason)]),
    };
    let mut last = None;
    let all = wait_until(Duration::from_secs(20), || {
        let Ok(m) = metrics(&lab.gw) else {
            return false;
        };
        let ok = cases
            .iter()
            .all(|(reason, ..)| counted(&m, reason).unwrap_or(0.0) >= SENT as f64);
        last = Some(m);
        ok
    });
    if !all {
        let m = last.unwrap_or_default();
        let seen: Vec<_> = cases.iter().map(|(r, ..)| (*r, counted(&m, r))).collect();
        bail!("not every bad packet was counted (each sent {SENT} times): {seen:?}");
    }
    Ok(())
}

/// A GRE packet with `flags` (K, optionally C with a wrong checksum), key `key`, and an
/// inner IPv4 ICMP echo 172.16.0.5 -> 10.64.0.5 with TTL `ttl`.
fn keyed(flags: u16, key: u32, ttl: u8) -> Vec<u8> {
    let mut b = flags.to_be_bytes().to_vec();
    b.extend_from_slice(&0x0800u16.to_be_bytes());
    if flags & 0x8000 != 0 {
        // Checksum 0x1234 and Reserved1: cannot verify over this packet.
        b.extend_from_slice(&[0x12, 0x34, 0, 0]);
    }
    b.extend_from_slice(&key.to_be_bytes());
    let mut ip = vec![
        0x45, 0, 0, 28, 0, 1, 0x40, 0, ttl, 1, 0, 0, 172, 16, 0, 5, 10, 64, 0, 5,
    ];
    let sum = ip
        .chunks(2)
        .fold(0u32, |s, w| s + u32::from(u16::from_be_bytes([w[0], w[1]])));
    let folded = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&folded.to_be_bytes());
    ip.extend_from_slice(&[8, 0, 0xf7, 0xff, 0, 0, 0, 0]);
    b.extend_from_slice(&ip);
    b
}

/// Sends `bytes` as GRE (IP protocol 47) from `from` to `to`, `times` times, from a raw
/// socket in `ns` (python3's socket module: the e2e crate stays free of `unsafe`).
fn send_raw(ns: &Netns, from: &str, to: &str, bytes: &[u8], times: usize) -> Result<()> {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let script = format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_RAW,47)\n\
         s.bind(('{from}',0))\nfor _ in range({times}): s.sendto(bytes.fromhex('{hex}'),('{to}',0))\n"
    );
    ns.exec_ok(&["python3", "-c", &script])
        .context("python3 raw GRE send")?;
    Ok(())
}

fn keepalive_up_down() -> Result<()> {
    let lab = Lab::new("greka")?;
    lab.peer.addr_add("pp", "203.0.113.2/24")?;
    // A site host behind the peer, so traffic through the tunnel shows the routes' state.
    lab.peer.addr_add("lo", "172.16.0.5/32")?;
    let with_keepalive = site2(Some(42)).replace(
        "routes",
        "keepalive_secs = 1\nkeepalive_retries = 2\nroutes",
    );
    let _gate = start_gate64(&lab.gw, &with_keepalive)?;
    let peer_conf = "[[gre.tunnel]]\nname = \"hq\"\nlocal = \"203.0.113.2\"\n\
        remote = \"203.0.113.1\"\nkey = 42\nroutes = [\"10.64.0.0/24\"]\n";
    let state = |s: &str| {
        metrics(&lab.gw)
            .ok()
            .and_then(|m| m.get("gate64_gre_tunnels", &[("state", s)]))
            == Some(1.0)
    };
    let peer = start_gate64(&lab.peer, peer_conf)?;
    // Up while answered: a few intervals pass and it stays up.
    std::thread::sleep(Duration::from_secs(4));
    ensure!(
        state("up"),
        "the tunnel is not up while the peer answers keepalives"
    );
    delivered(&lab.lan, "10.64.0.5", "172.16.0.5").context("through the tunnel while up")?;
    let tunnel_down_drops = || {
        metrics(&lab.gw)
            .ok()
            .and_then(|m| m.get("gate64_drops_total", &[("reason", "gre_tunnel_down")]))
            .unwrap_or(0.0)
    };
    ensure!(tunnel_down_drops() == 0.0, "tunnel-down drops while up");
    drop(peer);
    ensure!(
        wait_until(Duration::from_secs(20), || state("down")),
        "the tunnel did not go down after its peer stopped"
    );
    // Down: its routes are withdrawn, so a packet for the site is dropped and counted, not
    // sent into a tunnel nobody answers.
    ensure!(
        !ping_once(&lab.lan, "10.64.0.5", "172.16.0.5"),
        "a ping crossed a tunnel that is down"
    );
    ensure!(
        wait_until(Duration::from_secs(5), || tunnel_down_drops() >= 1.0),
        "no gre_tunnel_down drop counted for a packet to a down tunnel"
    );
    let _peer = start_gate64(&lab.peer, peer_conf)?;
    ensure!(
        wait_until(Duration::from_secs(20), || state("up")),
        "the tunnel did not come back up once its peer answered again"
    );
    delivered(&lab.lan, "10.64.0.5", "172.16.0.5").context("routes restored once up again")?;
    let m = metrics(&lab.gw)?;
    ensure!(
        m.get("gate64_gre_tunnels", &[("state", "down")]) == Some(0.0),
        "a tunnel is still counted down"
    );
    Ok(())
}

fn ipv6_outer() -> Result<()> {
    let lab = Lab::new("gre6")?;
    lab.gw.addr_add("u0", "2001:db8:ffff::1/64")?;
    lab.peer.addr_add("pp", "2001:db8:ffff::2/64")?;
    router(&lab.peer)?;
    lab.peer.addr_add("lo", "172.16.0.5/32")?;
    lab.peer.addr_add("lo", "2001:db8:16::5/128")?;
    let tunnel = |local: &str, remote: &str, routes: &str| {
        format!(
            "[[gre.tunnel]]\nname = \"v6\"\nlocal = \"{local}\"\nremote = \"{remote}\"\n\
             key = 7\nkeepalive_secs = 1\nroutes = {routes}\n"
        )
    };
    let gw = tunnel(
        "2001:db8:ffff::1",
        "2001:db8:ffff::2",
        "[\"172.16.0.0/24\", \"2001:db8:16::/64\"]",
    );
    let peer = tunnel(
        "2001:db8:ffff::2",
        "2001:db8:ffff::1",
        "[\"10.64.0.0/24\", \"2001:db8:64::/64\"]",
    );
    // Two workers at each end: the second sends on its own IPv6 socket.
    let gw_gate = start_gate64_workers(&lab.gw, &format!("{PACKET_PATH}{gw}"), 2)?;
    let _peer = start_gate64_workers(&lab.peer, &peer, 2)?;
    delivered(&lab.peer, "172.16.0.5", "10.64.0.5").context("IPv4 in IPv6, site first")?;
    delivered(&lab.lan, "10.64.0.5", "172.16.0.5").context("IPv4 in IPv6, LAN first")?;
    delivered(&lab.peer, "2001:db8:16::5", "2001:db8:64::5").context("IPv6 in IPv6, site")?;
    delivered(&lab.lan, "2001:db8:64::5", "2001:db8:16::5").context("IPv6 in IPv6, LAN")?;
    // Keepalives answered over IPv6: still up after several intervals.
    std::thread::sleep(Duration::from_secs(5));
    let m = metrics(&lab.gw)?;
    ensure!(
        m.get("gate64_gre_tunnels", &[("state", "up")]) == Some(1.0),
        "the IPv6 tunnel is not up after 5 keepalive intervals"
    );
    // 8 flows each way, spread over both workers' queues by their ports.
    let (up, down) = iperf3_both_ways(&lab, "2001:db8:64::5", "2001:db8:16::5", 8)?;
    println!("IPv6 outer, two workers, 8 flows: site -> LAN {up:.1} Mbit/s, back {down:.1} Mbit/s");
    sends_frames(&gw_gate, "v6")?;
    sent_covers_received(&lab, "v6")
}

/// Two gate64s over IPv4, each with two GRE workers: every direction carries pings and
/// iperf3 with 8 flows (spread over both TUN queues by their ports).
fn two_workers() -> Result<()> {
    let lab = Lab::new("grew2")?;
    lab.peer.addr_add("pp", "203.0.113.2/24")?;
    router(&lab.peer)?;
    lab.peer.addr_add("lo", "172.16.0.5/32")?;
    lab.peer.addr_add("lo", "2001:db8:16::5/128")?;
    let tunnel = |local: &str, remote: &str, routes: &str| {
        format!(
            "[[gre.tunnel]]\nname = \"w2\"\nlocal = \"{local}\"\nremote = \"{remote}\"\n\
             key = 42\nroutes = {routes}\n"
        )
    };
    let gw = tunnel(
        "203.0.113.1",
        "203.0.113.2",
        "[\"172.16.0.0/24\", \"2001:db8:16::/64\"]",
    );
    let peer = tunnel(
        "203.0.113.2",
        "203.0.113.1",
        "[\"10.64.0.0/24\", \"2001:db8:64::/64\"]",
    );
    // The gateway starts without its tunnel address, as a backup node does before
    // keepalived moves the address in: gate64 must start, and its send-only socket connect
    // to loopback (so the kernel stops cloning it every GRE packet) once the address is there.
    lab.gw.ip(&["addr", "del", "203.0.113.1/24", "dev", "u0"])?;
    let gw_gate = start_gate64_workers(&lab.gw, &gw, 2)?;
    ensure!(
        loopback_connected_sockets(&lab.gw)? == 0,
        "a send socket connected while its address was not on the host"
    );
    lab.gw.addr_add("u0", "203.0.113.1/24")?;
    ensure!(
        wait_until(Duration::from_secs(10), || {
            loopback_connected_sockets(&lab.gw).is_ok_and(|n| n == 1)
        }),
        "worker 1's send socket did not connect to loopback after the address arrived: {:?}",
        lab.gw.exec_ok(&["ss", "-H", "-w", "-a", "-n"])
    );
    let _peer = start_gate64_workers(&lab.peer, &peer, 2)?;
    ensure!(
        loopback_connected_sockets(&lab.peer)? == 1,
        "the peer's worker 1 send socket is not connected to loopback"
    );
    delivered(&lab.peer, "172.16.0.5", "10.64.0.5").context("IPv4, site first")?;
    delivered(&lab.lan, "10.64.0.5", "172.16.0.5").context("IPv4, LAN first")?;
    delivered(&lab.peer, "2001:db8:16::5", "2001:db8:64::5").context("IPv6, site")?;
    delivered(&lab.lan, "2001:db8:64::5", "2001:db8:16::5").context("IPv6, LAN")?;
    // Worker 1 encapsulates what its TUN queue gets. The kernel spreads flows over the
    // queues by hash, so 8 flows all land on queue 0 once in 128 rounds: another round then
    // brings new ports (at most 8), and worker 1 must have worked in one of them.
    let before = thread_ticks(gw_gate.pid(), "gre-1")?;
    let mut worker1 = 0;
    for _ in 0..8 {
        let (up, down) = iperf3_both_ways(&lab, "10.64.0.5", "172.16.0.5", 8)?;
        println!(
            "two GRE workers, 8 flows: site -> LAN {up:.1} Mbit/s, LAN -> site {down:.1} Mbit/s"
        );
        worker1 = thread_ticks(gw_gate.pid(), "gre-1")? - before;
        if worker1 > 0 {
            break;
        }
    }
    println!("the gateway's worker 1 (gre-1) ran {worker1} CPU ticks");
    ensure!(
        worker1 > 0,
        "the gateway's second GRE worker carried nothing"
    );
    sent_covers_received(&lab, "w2")
}

/// CPU ticks (user + system) of the thread named `name` in process `pid`.
fn thread_ticks(pid: u32, name: &str) -> Result<u64> {
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let dir = entry?.path();
        if std::fs::read_to_string(dir.join("comm"))
            .unwrap_or_default()
            .trim()
            != name
        {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat"))?;
        // Fields after the command name's closing parenthesis: utime and stime are 12 and 13.
        let rest = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .context("a stat line")?;
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        ensure!(f.len() > 12, "a short stat line: {stat}");
        return Ok(f[11] + f[12]);
    }
    bail!("process {pid} has no thread {name}")
}

/// Raw sockets in `ns` connected to the loopback address (`ss -w`: gate64's send-only GRE
/// sockets once connected).
fn loopback_connected_sockets(ns: &Netns) -> Result<usize> {
    let out = ns.exec_ok(&["ss", "-H", "-w", "-a", "-n"])?;
    Ok(out
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(4)
                .is_some_and(|peer| peer.starts_with("127.0.0.1:"))
        })
        .count())
}

/// Checks `tunnel`'s packet counters at both ends after traffic both ways.
fn sent_covers_received(lab: &Lab, tunnel: &str) -> Result<()> {
    // Both workers encapsulate: each counts in counters of its own, and the exporter sums
    // them. A packet is decapsulated only after it was sent, so what one end counts sent is
    // at least what the other counts received (unless counts were lost).
    let packets = |ns: &Netns, dir: &str| -> Result<f64> {
        metrics(ns)?
            .get(
                "gate64_gre_packets_total",
                &[("tunnel", tunnel), ("direction", dir)],
            )
            .with_context(|| format!("no gate64_gre_packets_total{{direction={dir}}}"))
    };
    for (from, to, what) in [
        (&lab.peer, &lab.gw, "site -> LAN"),
        (&lab.gw, &lab.peer, "LAN -> site"),
    ] {
        let (sent, received) = (packets(from, "tx")?, packets(to, "rx")?);
        println!("{what}: {sent} packets counted sent, {received} counted received");
        ensure!(
            received > 10_000.0 && sent >= received,
            "{what}: {sent} packets counted sent, {received} received: sends went uncounted"
        );
    }
    Ok(())
}
