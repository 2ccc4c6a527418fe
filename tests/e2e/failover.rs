//! Active/passive failover with keepalived, in network namespaces.
//!
//! Two gate64 nodes (`haa` priority 150, `hab` priority 100) share the same configuration:
//! Teredo on 192.0.2.1/.2, IP-HTTPS on 198.51.100.1:443 and a GRE tunnel whose local address
//! is 203.0.113.1, with the inside gateway 10.64.0.1 / 2001:db8:100:1::1. keepalived (VRRPv3,
//! 100 ms adverts) moves all of these addresses; `config/keepalived/gate64-notify.sh` in hot
//! mode keeps gate64 running on both nodes (sockets bound to addresses the backup does not
//! hold yet: `ip_nonlocal_bind`, and IP_FREEBIND for GRE).
//!
//! ```text
//!  haovs (Open vSwitch GRE peer, site 172.16.0.5) ─┐            ┌─ haa up0 / lan0 ─┐
//!  hatc  (gate64 connect teredo, 198.51.100.10)  ──┤ habr: br0  ├─ hab up0 / lan0 ─┤ habr: br1 ── halan
//!  haic  (gate64 connect iphttps, 198.51.100.20) ──┘            │                  │  (10.64.0.5,
//!                                                                                   2001:db8:100:1::2)
//! ```
//!
//! Three steady ping streams run through the active node (site → LAN through the GRE tunnel,
//! Teredo client → corporate host, IP-HTTPS client → corporate host); then the active node
//! dies and each stream must resume through the other within 30 s. The figures (the longest
//! silence of each stream around the death, echo requests lost, when the backup held the
//! addresses) are printed, never asserted.
//!
//! - `netns_failover_gre_keepalived_without_ipsec`: a crash: every process of the node SIGKILLed and its
//!   links down (power loss); keepalived on the backup notices after the master-down
//!   interval.
//! - `netns_failover_graceful_keepalived_without_ipsec`: a graceful stop: keepalived gets SIGTERM, sends a
//!   priority-0 advertisement and its notify script stops gate64.
//! - `netns_failover_cold_keepalived_without_ipsec`: a crash with the notify script in cold mode: gate64
//!   runs on the master only, so the backup starts it when it is promoted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::{
    GrePeer, Keepalived, Metrics, Netns, Ovs, Process, Vrrp, gate64_binary, holds_address,
    http_get, netns_or_skip, wait_until,
};

use crate::common::path_str;

/// The corporate host behind both nodes.
const CORP_HOST: &str = "2001:db8:100:1::2";
/// The LAN host behind the GRE gateway.
const LAN_HOST: &str = "10.64.0.5";
/// The host behind Open vSwitch.
const SITE_HOST: &str = "172.16.0.5";
/// Echo requests per second of each stream: 20 (every 50 ms).
const PING_INTERVAL: &str = "0.05";
/// A stream must resume within this long of the node's death (generous: two shared cores).
const RESUME_BOUND: Duration = Duration::from_secs(30);
/// Steady traffic before the failure, so the streams are known to work through the master.
const BEFORE: Duration = Duration::from_secs(3);
/// Steady traffic after every stream resumed, so losses after the resumption are counted.
const AFTER: Duration = Duration::from_secs(3);
/// Seconds of the iperf3 TCP flow through the tunnel: before, across and after the death.
const IPERF_SECS: &str = "12";
/// First delivery through a fresh lab (Open vSwitch resolves its neighbour first).
const DELIVERY: Duration = Duration::from_secs(30);

/// How the notify script runs gate64 (`-m`): on both nodes, or on the master only.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Standby {
    Hot,
    Cold,
}

impl Standby {
    fn flag(self) -> &'static str {
        match self {
            Standby::Hot => "hot",
            Standby::Cold => "cold",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Death {
    /// SIGKILL for every process of the node and its links down.
    Crash,
    /// SIGTERM to keepalived; its notify script stops gate64.
    Graceful,
}

#[test]
#[ignore = "netns: needs root"]
fn netns_failover_gre_keepalived_without_ipsec() {
    if !netns_or_skip("netns_failover_gre_keepalived_without_ipsec") {
        return;
    }
    if let Err(e) = failover(Death::Crash, Standby::Hot) {
        panic!("{e:#}");
    }
}

#[test]
#[ignore = "netns: needs root"]
fn netns_failover_graceful_keepalived_without_ipsec() {
    if !netns_or_skip("netns_failover_graceful_keepalived_without_ipsec") {
        return;
    }
    if let Err(e) = failover(Death::Graceful, Standby::Hot) {
        panic!("{e:#}");
    }
}

#[test]
#[ignore = "netns: needs root"]
fn netns_failover_cold_keepalived_without_ipsec() {
    if !netns_or_skip("netns_failover_cold_keepalived_without_ipsec") {
        return;
    }
    if let Err(e) = failover(Death::Crash, Standby::Cold) {
        panic!("{e:#}");
    }
}

/// The namespaces of the pair; dropped in reverse order of creation.
struct Lab {
    bridge: Netns,
    nodes: [Netns; 2],
    ovs: Netns,
    lan: Netns,
    teredo: Netns,
    iphttps: Netns,
}

impl Lab {
    fn new() -> Result<Lab> {
        let lab = Lab {
            bridge: Netns::new("habr")?,
            nodes: [Netns::new("haa")?, Netns::new("hab")?],
            ovs: Netns::new("haovs")?,
            lan: Netns::new("halan")?,
            teredo: Netns::new("hatc")?,
            iphttps: Netns::new("haic")?,
        };
        let br = &lab.bridge;
        for b in ["br0", "br1"] {
            br.ip(&["link", "add", b, "type", "bridge"])?;
            br.link_up(b)?;
        }
        let attach = |port: &str, ns: &Netns, dev: &str, bridge: &str| -> Result<()> {
            br.veth(port, ns, dev)?;
            br.ip(&["link", "set", port, "master", bridge]).map(drop)
        };
        for (i, node) in lab.nodes.iter().enumerate() {
            attach(&format!("u{i}"), node, "up0", "br0")?;
            attach(&format!("l{i}"), node, "lan0", "br1")?;
            let host = 11 + i;
            for net in ["203.0.113", "192.0.2", "198.51.100"] {
                node.addr_add("up0", &format!("{net}.{host}/24"))?;
            }
            node.addr_add("lan0", &format!("10.64.0.{host}/24"))?;
            node.addr_add("lan0", &format!("2001:db8:100:1::{host}/64"))?;
            for (key, value) in [
                ("net.ipv4.ip_forward", "1"),
                ("net.ipv6.conf.all.forwarding", "1"),
                ("net.ipv4.conf.all.rp_filter", "0"),
                ("net.ipv4.conf.default.rp_filter", "0"),
                // Hot standby: the backup's gate64 binds addresses keepalived has not moved
                // to it yet.
                ("net.ipv4.ip_nonlocal_bind", "1"),
                ("net.ipv6.ip_nonlocal_bind", "1"),
            ] {
                node.sysctl(key, value)?;
            }
        }
        attach("ov", &lab.ovs, "pp", "br0")?;
        attach("tc", &lab.teredo, "eth0", "br0")?;
        attach("ic", &lab.iphttps, "eth0", "br0")?;
        attach("ln", &lab.lan, "eth0", "br1")?;
        for (ns, addr) in [
            (&lab.teredo, "198.51.100.10/24"),
            (&lab.iphttps, "198.51.100.20/24"),
        ] {
            ns.addr_add("eth0", addr)?;
            ns.ip(&["route", "add", "default", "via", "198.51.100.1"])?;
        }
        lab.lan.addr_add("eth0", "10.64.0.5/24")?;
        lab.lan.addr_add("eth0", "2001:db8:100:1::2/64")?;
        lab.lan
            .ip(&["route", "add", "default", "via", "10.64.0.1"])?;
        lab.lan
            .ip(&["-6", "route", "add", "default", "via", "2001:db8:100:1::1"])?;
        Ok(lab)
    }

    /// Every process log of every namespace, for failure reports.
    fn logs(&self) -> String {
        let mut all: String = [&self.nodes[0], &self.nodes[1], &self.teredo, &self.iphttps]
            .iter()
            .map(|ns| ns.logs_report())
            .collect();
        for node in &self.nodes {
            let log = node.dir().join("gate64.log");
            all.push_str(&format!(
                "----- {} / gate64 (started by the notify script) -----\n{}\n",
                node.name(),
                std::fs::read_to_string(&log).unwrap_or_default()
            ));
        }
        all
    }
}

/// The configuration both nodes run.
fn gate64_config(certs: &Path) -> Result<String> {
    Ok(format!(
        "[server]\nworkers = 1\n\n\
         [teredo]\nserver_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\nport = 3544\nrelay = true\n\n\
         [iphttps]\nenabled = true\nlisten = \"198.51.100.1:443\"\ncertificate = {:?}\n\
         private_key = {:?}\nprefix = \"2001:db8:1::/48\"\n\n\
         [corpnet]\ntun = \"gate64\"\nipv6_prefixes = [\"2001:db8:100::/48\"]\n\
         address6 = \"2001:db8:100::1\"\n\n[ipsec]\nrequire = false\n\n\
         [metrics]\nlisten = \"127.0.0.1:9164\"\n\n[log]\nlevel = \"info\"\n\n\
         [[gre.tunnel]]\nname = \"site2\"\nlocal = \"203.0.113.1\"\nremote = \"203.0.113.2\"\n\
         key = 42\nroutes = [\"172.16.0.0/24\", \"2001:db8:16::/64\"]\n",
        path_str(&certs.join("server.pem"))?,
        path_str(&certs.join("server.key"))?,
    ))
}

fn notify_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/keepalived/gate64-notify.sh")
}

/// keepalived on `node` with `priority`, its notify script running gate64 in hot mode.
fn start_keepalived(
    node: &Netns,
    priority: u8,
    config: &Path,
    standby: Standby,
) -> Result<Keepalived> {
    let bin = gate64_binary()?;
    let dir = node.dir();
    let notify = format!(
        "{} -m {} -b {} -c {} -p {} -l {}",
        path_str(&notify_script())?,
        standby.flag(),
        path_str(&bin)?,
        path_str(config)?,
        path_str(&dir.join("gate64.pid"))?,
        path_str(&dir.join("gate64.log"))?,
    );
    let vrrp = Vrrp {
        name: "gate64",
        interface: "up0",
        vrid: 64,
        priority,
        advert_ms: 100,
        addresses: &[
            "203.0.113.1/24",
            "192.0.2.1/24",
            "192.0.2.2/24",
            "198.51.100.1/24",
            "10.64.0.1/24 dev lan0",
        ],
        excluded: &["2001:db8:100:1::1/64 dev lan0"],
        notify: Some(&notify),
    };
    Keepalived::start(node, "keepalived", &vrrp)
}

pub(crate) fn metrics(ns: &Netns) -> Result<Metrics> {
    let addr = "127.0.0.1:9164".parse()?;
    let text = ns.run_in(|| http_get(addr, "/metrics"))??;
    Ok(Metrics::parse(&text))
}

pub(crate) fn ping_ok(ns: &Netns, family: &str, dst: &str) -> bool {
    ns.exec(&["ping", family, "-c", "1", "-W", "2", dst])
        .is_ok_and(|o| o.status.success())
}

fn delivered(ns: &Netns, family: &str, dst: &str, what: &str) -> Result<()> {
    ensure!(
        wait_until(DELIVERY, || ping_ok(ns, family, dst)),
        "{what}: no ping reply from {dst} within {DELIVERY:?}"
    );
    Ok(())
}

/// A steady `ping -D` stream; its replies are read from its log.
pub(crate) struct Stream {
    pub(crate) what: &'static str,
    pub(crate) process: Process,
}

impl Stream {
    pub(crate) fn start(what: &'static str, ns: &Netns, family: &str, dst: &str) -> Result<Stream> {
        let process = ns.spawn(
            what,
            &[
                "ping",
                family,
                "-D",
                "-n",
                "-i",
                PING_INTERVAL,
                "-W",
                "1",
                "-w",
                "80",
                dst,
            ],
        )?;
        Ok(Stream { what, process })
    }

    /// (reply time as seconds since the epoch, icmp_seq) of every reply so far.
    fn replies(&self) -> Vec<(f64, u64)> {
        self.process
            .log()
            .lines()
            .filter(|l| l.contains("bytes from"))
            .filter_map(|l| {
                let t = l.strip_prefix('[')?.split(']').next()?.parse().ok()?;
                let seq = l.split("icmp_seq=").nth(1)?.split_whitespace().next()?;
                Some((t, seq.parse().ok()?))
            })
            .collect()
    }

    pub(crate) fn resumed_after(&self, t: f64) -> bool {
        self.replies().iter().any(|&(at, _)| at > t)
    }

    /// The outage and the losses: the longest silence between two replies from one second
    /// before `death` on (seconds), and the echo requests lost between the first and the
    /// last reply (sent, never answered; a reply that came late is not lost).
    pub(crate) fn figures(&self, death: f64) -> Option<(f64, u64)> {
        let replies = self.replies();
        let mut times: Vec<f64> = replies.iter().map(|r| r.0).collect();
        times.sort_by(f64::total_cmp);
        times.iter().find(|&&at| at > death)?;
        let silence = times
            .windows(2)
            .filter(|w| w[1] > death - 1.0)
            .map(|w| w[1] - w[0])
            .fold(0.0, f64::max);
        let seqs: std::collections::BTreeSet<u64> = replies.iter().map(|r| r.1).collect();
        let (lo, hi) = (*seqs.first()?, *seqs.last()?);
        Some((silence, hi - lo + 1 - seqs.len() as u64))
    }
}

/// The IP-HTTPS client's global address on `gate64c`, if any.
fn iphttps_address(ns: &Netns) -> Option<String> {
    let out = ns
        .ip(&[
            "-6", "-o", "addr", "show", "dev", "gate64c", "scope", "global",
        ])
        .ok()?;
    let word = out
        .split_whitespace()
        .skip_while(|w| *w != "inet6")
        .nth(1)?;
    Some(word.split('/').next()?.to_owned())
}

/// iperf3's text report: (intervals that carried 0 Mbit/s, intervals, lowest Mbit/s) of the
/// sender's
/// per-interval lines (`[  5]   0.00-0.50   sec  2.88 MBytes  48.2 Mbits/sec ...`).
fn iperf_stall(log: &str) -> (usize, usize, f64) {
    let rates: Vec<f64> = log
        .lines()
        .filter(|l| l.contains("sec") && l.contains("Mbits/sec") && !l.contains("sender"))
        .filter(|l| !l.contains("receiver"))
        .filter_map(|l| {
            let before = l.split("Mbits/sec").next()?;
            before.split_whitespace().last()?.parse().ok()
        })
        .collect();
    let lowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
    (
        rates.iter().filter(|&&r| r == 0.0).count(),
        rates.len(),
        lowest,
    )
}

pub(crate) fn now_epoch() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub(crate) fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

fn failover(death: Death, standby: Standby) -> Result<()> {
    let started = Instant::now();
    let lab = Lab::new()?;
    let r = scenario(&lab, death, standby);
    if r.is_err() {
        eprintln!("{}", lab.logs());
    }
    println!(
        "failover test ({death:?}, {standby:?} standby) took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    r
}

fn scenario(lab: &Lab, death: Death, standby: Standby) -> Result<()> {
    let bin = gate64_binary()?;
    let certs = lab.bridge.dir().join("certs");
    lab.bridge.exec_ok(&[
        path_str(&bin)?,
        "certs",
        "--out",
        path_str(&certs)?,
        "--server-ip",
        "198.51.100.1",
        "--server-name",
        "gate64.lab.example",
    ])?;
    let config = lab
        .bridge
        .write_file("gate64.toml", &gate64_config(&certs)?)?;

    // The underlay veth stays a kernel interface beside Open vSwitch's br-phy: without
    // arp_ignore it answers ARP for br-phy's address with its own MAC, and a node that
    // learnt that MAC sends its GRE packets where Open vSwitch does not pop them.
    lab.ovs.sysctl("net.ipv4.conf.all.arp_ignore", "1")?;
    let ovs = Ovs::start(&lab.ovs)?;
    ovs.l3_gre_peer(&GrePeer {
        underlay_port: "pp",
        underlay_cidr: "203.0.113.2/24",
        remote_ip: "203.0.113.1",
        key: Some(42),
        site_addrs: &["172.16.0.5/24", "2001:db8:16::5/64"],
        site_routes: &[("10.64.0.0/24", "172.16.0.1")],
    })?;

    let mut active = start_keepalived(&lab.nodes[0], 150, &config, standby)?;
    let mut backup = start_keepalived(&lab.nodes[1], 100, &config, standby)?;
    ensure!(
        wait_until(Duration::from_secs(15), || holds_address(
            &lab.nodes[0],
            "203.0.113.1"
        )),
        "haa (priority 150) did not become master within 15 s"
    );
    // Cold standby: only the master runs gate64 until the failure.
    let running = if standby == Standby::Hot { 2 } else { 1 };
    for node in &lab.nodes[..running] {
        ensure!(
            wait_until(Duration::from_secs(20), || metrics(node)
                .is_ok_and(|m| m.has("gate64_gre_tunnels"))),
            "gate64 on {} (started by the notify script) did not serve /metrics within 20 s",
            node.name()
        );
    }

    let mut teredo = lab.teredo.spawn(
        "gate64-connect-teredo",
        &[
            path_str(&bin)?,
            "connect",
            "teredo",
            "--no-ipsec",
            "--server",
            "192.0.2.1",
            "--route",
            "2001:db8:100::/48",
        ],
    )?;
    let url = "https://198.51.100.1/IPHTTPS";
    let ca = certs.join("ca.pem");
    let mut iphttps = lab.iphttps.spawn(
        "gate64-connect-iphttps",
        &[
            path_str(&bin)?,
            "connect",
            "iphttps",
            "--no-ipsec",
            "--server",
            url,
            "--ca",
            path_str(&ca)?,
            "--route",
            "2001:db8:100::/48",
        ],
    )?;
    delivered(&lab.ovs, "-4", LAN_HOST, "GRE site -> LAN")
        .with_context(|| format!("Open vSwitch flows:\n{}", ovs.dump_flows()))?;
    delivered(&lab.lan, "-4", SITE_HOST, "LAN -> GRE site")?;
    delivered(
        &lab.teredo,
        "-6",
        CORP_HOST,
        "Teredo client -> corporate host",
    )?;
    delivered(
        &lab.iphttps,
        "-6",
        CORP_HOST,
        "IP-HTTPS client -> corporate host",
    )?;

    let _iperf_server = lab
        .lan
        .spawn("iperf3-server", &["iperf3", "-s", "-B", LAN_HOST])?;
    std::thread::sleep(Duration::from_millis(300));
    let iphttps_before = iphttps_address(&lab.iphttps);
    let mut iperf = lab.ovs.spawn(
        "iperf3-gre",
        &[
            "iperf3",
            "-c",
            LAN_HOST,
            "-B",
            SITE_HOST,
            "-t",
            IPERF_SECS,
            "-i",
            "0.5",
            "-b",
            "50M",
            "-f",
            "m",
            "--connect-timeout",
            "5000",
        ],
    )?;
    let streams = [
        Stream::start("ping-gre", &lab.ovs, "-4", LAN_HOST)?,
        Stream::start("ping-teredo", &lab.teredo, "-6", CORP_HOST)?,
        Stream::start("ping-iphttps", &lab.iphttps, "-6", CORP_HOST)?,
    ];
    std::thread::sleep(BEFORE);
    for s in &streams {
        ensure!(
            !s.replies().is_empty(),
            "{}: no replies through the master before the failure",
            s.what
        );
    }

    if standby == Standby::Cold {
        ensure!(
            metrics(&lab.nodes[1]).is_err(),
            "cold standby: gate64 already runs on the backup before the failure"
        );
    }
    let died = now_epoch();
    let t = Instant::now();
    match death {
        Death::Crash => {
            for pid in lab.nodes[0].pids() {
                signal(pid as u32, "-KILL");
            }
            lab.nodes[0].ip(&["link", "set", "up0", "down"])?;
            lab.nodes[0].ip(&["link", "set", "lan0", "down"])?;
        }
        Death::Graceful => active.stop(),
    }
    let took_over = wait_until(RESUME_BOUND, || holds_address(&lab.nodes[1], "203.0.113.1"));
    let vrrp_secs = t.elapsed().as_secs_f64();
    ensure!(
        took_over,
        "hab did not take the addresses within {RESUME_BOUND:?}"
    );
    let all = wait_until(RESUME_BOUND, || {
        streams.iter().all(|s| s.resumed_after(died + 0.5))
    });
    std::thread::sleep(AFTER);
    for s in &streams {
        signal(s.process.pid(), "-INT");
    }
    std::thread::sleep(Duration::from_millis(300));

    println!(
        "failover ({death:?}, {standby:?} standby): hab held the addresses {vrrp_secs:.2} s after the death"
    );
    let mut stuck = Vec::new();
    for s in &streams {
        match s.figures(died) {
            Some((secs, lost)) => println!(
                "  {:<13} longest silence {secs:.2} s; {lost} echo \
                 requests (20/s) lost",
                s.what
            ),
            None => {
                println!("  {:<13} never resumed", s.what);
                stuck.push(s.what);
            }
        }
    }
    let iperf_done = iperf
        .wait_timeout(RESUME_BOUND)
        .is_some_and(|s| s.success());
    let (stalled, intervals, lowest) = iperf_stall(&iperf.log());
    println!(
        "  iperf3-gre    one TCP flow at 50 Mbit/s through the tunnel: {stalled} of \
         {intervals} half-second intervals carried nothing, the lowest {lowest:.1} Mbit/s; \
         finished: {iperf_done}"
    );
    ensure!(
        iperf_done,
        "the iperf3 TCP flow through the GRE tunnel did not finish:\n{}",
        iperf.log()
    );
    let iphttps_after = iphttps_address(&lab.iphttps);
    println!(
        "  IP-HTTPS client address before {} and after {}",
        iphttps_before.as_deref().unwrap_or("?"),
        iphttps_after.as_deref().unwrap_or("?")
    );
    teredo.ensure_running().context("gate64 connect teredo")?;
    iphttps.ensure_running().context("gate64 connect iphttps")?;
    backup
        .process()
        .ensure_running()
        .context("keepalived on hab")?;
    if !all || !stuck.is_empty() {
        bail!("not every stream resumed within {RESUME_BOUND:?} of the death: {stuck:?}");
    }
    let m = metrics(&lab.nodes[1])?;
    println!(
        "  hab after the failover: {} Teredo and {} IP-HTTPS clients",
        m.get("gate64_clients", &[("transport", "teredo")])
            .unwrap_or(0.0),
        m.get("gate64_clients", &[("transport", "iphttps")])
            .unwrap_or(0.0)
    );
    Ok(())
}
