//! IPsec state synchronisation (`[ha]`) across a keepalived takeover, in network namespaces.
//!
//! Two gate64 nodes (`hsa` priority 150, `hsb` priority 100) run in hot mode with the same
//! IPsec configuration and certificates and `[ha]` pointing at each other over a link of
//! their own (10.0.9.1 / 10.0.9.2, UDP 4501). keepalived (VRRPv3, 100 ms adverts) moves the
//! IKE address 192.0.2.10 (`[ipsec] listen`) and the inside gateway 2001:db8:100:1::1; its
//! notify script (`config/keepalived/gate64-notify.sh -m hot`) keeps gate64 running on both
//! and sends SIGUSR1 to the one that becomes master.
//!
//! ```text
//!  hscli (charon, 192.0.2.50) ── hsbr: br0 ─┬─ hsa up0 ─ ha0 ─┐ lan0 ─┬─ hsbr: br1 ── hscorp
//!                                            └─ hsb up0 ─ ha0 ─┘ lan0 ─┘   (2001:db8:100:1::2)
//! ```
//!
//! - `netns_ha_sync_takeover_keeps_ipsec_sas`: strongSwan's charon builds both tunnels
//!   (infrastructure and intranet) to 192.0.2.10 and pings the corporate host through the
//!   infrastructure tunnel; the standby's store fills from the channel. Every process of
//!   `hsa` is SIGKILLed and its links go down (power loss). The ping must flow again through
//!   `hsb`, which ran no IKE negotiation of its own (`gate64_ike_negotiations_total` stays 0,
//!   no half-open IKE SA was ever made); charon still holds the same IKE and child SPIs, and
//!   `gate64_ha_sync_total` shows the records received and installed. One of the ping's ESP
//!   packets, caught on `hsa` before the death, sent again to `hsb` is dropped and counted
//!   (`gate64_esp_replay_drops_total`) and does not move the child SA; charon then rekeys the
//!   infrastructure child SA through `hsb`'s taken-over IKE SA and pings through the new one.
//!   charon announced RFC 6311 Message ID synchronization in IKE_AUTH, so `hsb` sends it a
//!   sync request per IKE SA at the takeover; both must be answered
//!   (`gate64_ha_mid_sync_total{result="synced"}` 2, none `failed` or `unsupported`).
//!   The ping's longest silence and its losses are printed, never asserted.
//! - `netns_ha_sync_esp_takes_over_unpromoted`: as the first, but charon's liveness checks
//!   are 10 minutes apart (it sends no IKE request during the test) and `hsb` is never
//!   promoted: its keepalived is stopped (SIGSTOP) before the crash, so no notify script
//!   runs, and the test moves the IKE address and the inside gateway to `hsb` by hand. The
//!   ping's ESP alone must bring the infrastructure tunnel's IKE SA and child SAs over
//!   (`gate64_ha_sync_total{result="on_demand_esp"}`), with no IKE negotiation on `hsb` and
//!   charon's SPIs unchanged. The ping's longest silence is printed, never asserted.
//! - `netns_ha_sync_cut_channel_client_returns_by_qcd`: the sync link is down before the
//!   client connects, so `hsb` holds nothing of it; the client is `gate64 connect teredo`
//!   (both tunnels through the pair's Teredo server and relay, whose addresses keepalived
//!   moves too), and both nodes have the same `qcd_secret_file`. After the same crash the
//!   client, still pinging, hears nothing back, sends a liveness check, gets INVALID_IKE_SPI
//!   with the Quick Crash Detection token from `hsb` and negotiates again at once: the test
//!   checks it came back within 40 s (less than its liveness check's own timeout), that
//!   `hsb` counted a QCD answer and that the client logged why; it prints how long it took.
//! - `netns_ha_sync_takeover_keeps_emulated_clients`: beside charon (as in the first test),
//!   `gate64 bench load` runs `GATE64_HA_CLIENTS` Teredo clients (default 1,000; both
//!   tunnels each, to the endpoint through the pair's Teredo server and relay), each probing
//!   a corporate host through each tunnel every 500 ms. After the same crash: every client's
//!   probes are answered again through `hsb`, which ran no IKE negotiation; the generator
//!   made none either (its `ike_negotiations` and session ends unchanged); charon keeps its
//!   SPIs and the replayed ESP packet is dropped. The distribution of the per-client gap
//!   (the longest wait between two echoes of one tunnel, from a window started just before
//!   the crash) is printed, never asserted.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::capture::Ipv4Capture;
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, IkeSa, LabCerts, Tunnel, with_charon_logs,
};
use gate64_testkit::{
    CORP_HOST, Keepalived, Metrics, Netns, Vrrp, gate64_binary, holds_address, netns_or_skip,
    wait_for, wait_until,
};

use crate::bench_load::{field, udp_echo};
use crate::common::{
    GATE64_ADDRESS6, POOL6, env_count, gate64_lines, path_str, spawn_bench_load, status_text,
    wait_all_up,
};
use crate::failover::{Stream, metrics, now_epoch, signal};
use crate::ipsec::{INITIATE_TIMEOUT, SETTLE_TIMEOUT};

/// The IKE address keepalived moves (`[ipsec] listen` on both nodes).
const IKE_ADDRESS: &str = "192.0.2.10";
/// The inside gateway keepalived moves: the corporate host's route to the inner addresses.
pub(crate) const INSIDE_GATEWAY: &str = "2001:db8:100:1::1";
/// The sync channel's UDP port on both nodes.
const HA_PORT: u16 = 4501;
/// The ping must flow again through the standby within this long of the death (generous:
/// two shared cores).
const RESUME_BOUND: Duration = Duration::from_secs(30);
/// The standby's store must hold the client's records within this long of the tunnels
/// coming up (the active node flushes every second).
const SYNC_BOUND: Duration = Duration::from_secs(10);
/// Records the standby must have stored and installed: two IKE SAs and two child SAs.
const RECORDS: f64 = 4.0;

#[test]
#[ignore = "netns: needs root"]
fn netns_ha_sync_takeover_keeps_ipsec_sas() {
    run_in_lab("netns_ha_sync_takeover_keeps_ipsec_sas", takeover);
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ha_sync_esp_takes_over_unpromoted() {
    run_in_lab("netns_ha_sync_esp_takes_over_unpromoted", esp_takeover);
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ha_sync_cut_channel_client_returns_by_qcd() {
    run_in_lab(
        "netns_ha_sync_cut_channel_client_returns_by_qcd",
        cut_channel,
    );
}

/// Runs `test` in a fresh [`Lab`] of this file's (namespaces `hs…`), as [`run_lab`] does.
fn run_in_lab(name: &str, test: impl FnOnce(&Lab) -> Result<()>) {
    run_lab(name, || Lab::new("hs", NODE_SYSCTLS, CORP_SYSCTLS), test);
}

/// Runs `test` in the [`Lab`] `new_lab` makes (skipped without root or `ip netns`): on
/// failure prints every node's logs and panics with the error; prints how long it took
/// either way.
pub(crate) fn run_lab(
    name: &str,
    new_lab: impl FnOnce() -> Result<Lab>,
    test: impl FnOnce(&Lab) -> Result<()>,
) {
    if !netns_or_skip(name) {
        return;
    }
    let started = Instant::now();
    let r = new_lab().and_then(|lab| {
        let r = test(&lab);
        if r.is_err() {
            eprintln!("{}", lab.logs());
        }
        r
    });
    println!("{name} took {:.1} s", started.elapsed().as_secs_f64());
    if let Err(e) = r {
        panic!("{e:#}");
    }
}

/// What `gate64 connect` logs when the responder proved it lost the IKE SA.
const QCD_LINE: &str = "the responder lost its IKE SA";
/// The client's liveness check timeout (its retransmissions) plus its check interval: a
/// recovery without Quick Crash Detection takes at least this long.
const WITHOUT_QCD: Duration = Duration::from_secs(40);
/// `gate64 connect` building both tunnels through Teredo.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(40);

/// Both tunnels of one client up on `node`.
fn both_tunnels_up(node: &Netns) -> bool {
    metrics(node).is_ok_and(|m| {
        m.sum("gate64_ipsec_qmsa", &[]) == 2.0 && m.sum("gate64_ipsec_mmsa", &[]) == 2.0
    })
}

/// The sync channel is down before the client connects, so the standby holds nothing of it;
/// after the active node's death the client, still pinging, hears nothing back, sends a
/// liveness check, gets INVALID_IKE_SPI with the Quick Crash Detection token (the same
/// `qcd_secret_file` on both nodes) from the new master and negotiates again at once.
fn cut_channel(lab: &Lab) -> Result<()> {
    let [active_ns, standby_ns] = &lab.nodes;
    for node in &lab.nodes {
        node.ip(&["link", "set", "ha0", "down"])?;
    }
    let (certs, [_active, mut standby]) =
        start_pair(lab, Client::Teredo, std::net::IpAddr::V6(GATE64_ADDRESS6))?;
    let bin = gate64_binary()?;
    let mut client = lab.client.spawn(
        "gate64-connect-ipsec",
        &[
            "env",
            "RUST_LOG=debug",
            path_str(&bin)?,
            "connect",
            "teredo",
            "--server",
            "192.0.2.1",
            "--ifname",
            "gate64t",
            "--ipsec-endpoint",
            &GATE64_ADDRESS6.to_string(),
            "--ipsec-cert",
            path_str(&certs.initiator_cert)?,
            "--ipsec-key",
            path_str(&certs.initiator_key)?,
            "--ipsec-ca",
            path_str(&certs.ca)?,
            "--infrastructure-ts",
            &format!("{CORP_HOST}/128"),
            "--intranet-ts",
            "2001:db8:100::/48",
            "--ipsec-renew-secs",
            "3600",
        ],
    )?;
    let up = wait_until(ESTABLISH_TIMEOUT, || both_tunnels_up(active_ns));
    client.ensure_running()?;
    ensure!(
        up,
        "the tunnels did not come up on hsa within {ESTABLISH_TIMEOUT:?}\n{}",
        gate64_lines(&metrics(active_ns)?)
    );
    ensure!(
        wait_until(Duration::from_secs(10), || ping_once(&lab.client)),
        "no ping reply from {CORP_HOST} through hsa"
    );
    let stored = sync(&metrics(standby_ns)?, "in", "stored");
    ensure!(
        stored == 0.0,
        "hsb stored {stored} records over the cut channel"
    );

    let stream = Stream::start("ping-ipsec", &lab.client, "-6", &CORP_HOST.to_string())?;
    std::thread::sleep(Duration::from_secs(1));
    let died = now_epoch();
    let t = Instant::now();
    for pid in active_ns.pids() {
        signal(pid as u32, "-KILL");
    }
    for dev in ["up0", "lan0"] {
        active_ns.ip(&["link", "set", dev, "down"])?;
    }
    let recovered = wait_until(WITHOUT_QCD, || {
        both_tunnels_up(standby_ns) && stream.resumed_after(died + 0.5)
    });
    let gap = t.elapsed();
    signal(stream.process.pid(), "-INT");
    client.ensure_running()?;
    let m = metrics(standby_ns)?;
    ensure!(
        recovered,
        "the client did not come back through hsb within {WITHOUT_QCD:?} of the death\n{}\n\
         client log:\n{}",
        gate64_lines(&m),
        client.log()
    );
    let sent = m.sum("gate64_ike_qcd_total", &[("result", "sent")]);
    ensure!(sent >= 1.0, "hsb sent no QCD answer\n{}", gate64_lines(&m));
    ensure!(
        client.log().contains(QCD_LINE),
        "the client did not log {QCD_LINE:?}:\n{}",
        client.log()
    );
    let (silence, lost) = stream.figures(died).unwrap_or((f64::NAN, 0));
    println!(
        "HA takeover with the sync channel cut: the client came back through hsb by Quick \
         Crash Detection {:.1} s after hsa's death (ping: longest silence {silence:.2} s, \
         {lost} echo requests lost); {sent} QCD answers",
        gap.as_secs_f64()
    );
    standby
        .process()
        .ensure_running()
        .context("keepalived on hsb")
}

/// The namespaces of a hot pair; dropped in reverse order of creation.
pub(crate) struct Lab {
    pub(crate) bridge: Netns,
    pub(crate) nodes: [Netns; 2],
    pub(crate) client: Netns,
    pub(crate) corp: Netns,
}

/// This file's lab's node sysctls beyond [`Lab::new`]'s own: no DAD on the inside link (the
/// inside gateway keepalived moves is usable at once), IPv4 forwarding for the Teredo relay,
/// and no reverse-path filter (the IKE and Teredo addresses move between the nodes).
const NODE_SYSCTLS: &[(&str, &str)] = &[
    ("net.ipv6.conf.lan0.accept_dad", "0"),
    ("net.ipv4.ip_forward", "1"),
    ("net.ipv4.conf.all.rp_filter", "0"),
    ("net.ipv4.conf.default.rp_filter", "0"),
];
/// This file's lab's corporate host: no DAD on its link.
const CORP_SYSCTLS: &[(&str, &str)] = &[("net.ipv6.conf.eth0.accept_dad", "0")];

impl Lab {
    /// The namespaces `{tag}br` (two bridges: `br0` outside, `br1` inside), `{tag}a` and
    /// `{tag}b` (the nodes: `up0` on `br0` at 192.0.2.11 and .12, `lan0` on `br1` at
    /// 2001:db8:100:1::11 and ::12, and the sync link `ha0` between them, 10.0.9.1 and .2),
    /// `{tag}cli` (the client, 192.0.2.50 on `br0`) and `{tag}corp` (the corporate host
    /// [`CORP_HOST`] on `br1`, routing the pool and its default to [`INSIDE_GATEWAY`]). Both
    /// nodes forward IPv6 and bind addresses they do not hold yet (hot standby), and set
    /// `node_sysctls` before their addresses; the corporate host sets `corp_sysctls`.
    pub(crate) fn new(
        tag: &str,
        node_sysctls: &[(&str, &str)],
        corp_sysctls: &[(&str, &str)],
    ) -> Result<Lab> {
        let lab = Lab {
            bridge: Netns::new(&format!("{tag}br"))?,
            nodes: [
                Netns::new(&format!("{tag}a"))?,
                Netns::new(&format!("{tag}b"))?,
            ],
            client: Netns::new(&format!("{tag}cli"))?,
            corp: Netns::new(&format!("{tag}corp"))?,
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
        // The sync link, between the nodes only.
        lab.nodes[0].veth("ha0", &lab.nodes[1], "ha0")?;
        for (i, node) in lab.nodes.iter().enumerate() {
            attach(&format!("u{i}"), node, "up0", "br0")?;
            attach(&format!("l{i}"), node, "lan0", "br1")?;
            let hot = [
                ("net.ipv6.conf.all.forwarding", "1"),
                // Hot standby: the standby's gate64 binds the addresses that move (IKE,
                // IP-HTTPS) before they move there.
                ("net.ipv4.ip_nonlocal_bind", "1"),
                ("net.ipv6.ip_nonlocal_bind", "1"),
            ];
            for &(key, value) in node_sysctls.iter().chain(&hot) {
                node.sysctl(key, value)?;
            }
            let host = 11 + i;
            node.addr_add("up0", &format!("192.0.2.{host}/24"))?;
            node.addr_add("lan0", &format!("2001:db8:100:1::{host}/64"))?;
            node.addr_add("ha0", &format!("10.0.9.{}/30", i + 1))?;
        }
        attach("cl", &lab.client, "eth0", "br0")?;
        attach("co", &lab.corp, "eth0", "br1")?;
        lab.client.addr_add("eth0", "192.0.2.50/24")?;
        for &(key, value) in corp_sysctls {
            lab.corp.sysctl(key, value)?;
        }
        lab.corp.addr_add("eth0", &format!("{CORP_HOST}/64"))?;
        lab.corp
            .ip(&["-6", "route", "add", "default", "via", INSIDE_GATEWAY])?;
        lab.corp
            .ip(&["-6", "route", "add", POOL6, "via", INSIDE_GATEWAY])?;
        Ok(lab)
    }

    /// Every process log of every namespace, and the log of a gate64 a notify script
    /// started, for failure reports.
    pub(crate) fn logs(&self) -> String {
        let mut all: String = [&self.nodes[0], &self.nodes[1], &self.client]
            .iter()
            .map(|ns| ns.logs_report())
            .collect();
        for node in &self.nodes {
            let Ok(log) = std::fs::read_to_string(node.dir().join("gate64.log")) else {
                continue;
            };
            all.push_str(&format!(
                "----- {} / gate64 (started by the notify script) -----\n{log}\n",
                node.name(),
            ));
        }
        all
    }
}

/// A secret file of `hex` repeated to 64 characters, mode 0600, in `ns`'s directory.
fn secret(ns: &Netns, name: &str, hex: &str) -> Result<std::path::PathBuf> {
    let path = ns.write_file(name, &format!("{}\n", hex.repeat(32)))?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(path)
}

/// How the client reaches the pair.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Client {
    /// strongSwan's charon, IKEv2 straight to [`IKE_ADDRESS`] (`[ipsec] listen`).
    Native,
    /// `gate64 connect teredo`, IKEv2 to the endpoint [`GATE64_ADDRESS6`] through the pair's
    /// Teredo server and relay (192.0.2.1 and 192.0.2.2, moved by keepalived).
    Teredo,
    /// Both: charon to [`IKE_ADDRESS`] and the generator's Teredo clients to the endpoint,
    /// with inner addresses from [`LOAD_POOL6`] (room for them all).
    Both,
}

/// Node `i`'s configuration: the IPsec section both share, and `[ha]` towards the other.
fn node_config(
    i: usize,
    client: Client,
    certs: &LabCerts,
    qcd: &Path,
    ha: &Path,
) -> Result<String> {
    let (me, peer) = (i + 1, 2 - i);
    let teredo_on = "server_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\nrelay = true";
    let (teredo, reach, pool) = match client {
        Client::Native => (
            "enabled = false".to_owned(),
            format!("listen = [\"{IKE_ADDRESS}\"]"),
            POOL6,
        ),
        Client::Teredo => (
            teredo_on.to_owned(),
            format!("endpoint = \"{GATE64_ADDRESS6}\""),
            POOL6,
        ),
        Client::Both => (
            teredo_on.to_owned(),
            format!("endpoint = \"{GATE64_ADDRESS6}\"\nlisten = [\"{IKE_ADDRESS}\"]"),
            LOAD_POOL6,
        ),
    };
    Ok(format!(
        "[server]\nworkers = 1\n\n[teredo]\n{teredo}\n\n\
         [corpnet]\ntun = \"gate64\"\nipv6_prefixes = [\"2001:db8:100::/48\"]\n\
         address6 = \"2001:db8:100::1\"\n\n\
         [ipsec]\ncertificate = {:?}\nprivate_key = {:?}\nca = {:?}\npool6 = \"{pool}\"\n\
         infrastructure_prefixes = [\"{CORP_HOST}/128\"]\n{reach}\n\
         qcd_secret_file = {:?}\n\n\
         [ha]\nnode_id = {me}\npeer_node_id = {peer}\nlisten = \"10.0.9.{me}:{HA_PORT}\"\n\
         peer = \"10.0.9.{peer}:{HA_PORT}\"\nsecret_file = {:?}\n\n\
         [metrics]\nlisten = \"127.0.0.1:9164\"\n\n[log]\nlevel = \"debug\"\n",
        path_str(&certs.responder_cert)?,
        path_str(&certs.responder_key)?,
        path_str(&certs.ca)?,
        path_str(qcd)?,
        path_str(ha)?,
    ))
}

/// keepalived on `node` with `priority`, its notify script running gate64 in hot mode.
fn start_keepalived(node: &Netns, priority: u8, config: &Path) -> Result<Keepalived> {
    let bin = gate64_binary()?;
    let dir = node.dir();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/keepalived/gate64-notify.sh");
    let notify = format!(
        "{} -m hot -b {} -c {} -p {} -l {}",
        path_str(&script)?,
        path_str(&bin)?,
        path_str(config)?,
        path_str(&dir.join("gate64.pid"))?,
        path_str(&dir.join("gate64.log"))?,
    );
    let vrrp = Vrrp {
        name: "gate64",
        interface: "up0",
        vrid: 65,
        priority,
        advert_ms: 100,
        addresses: &["192.0.2.10/24", "192.0.2.1/24", "192.0.2.2/24"],
        excluded: &["2001:db8:100:1::1/64 dev lan0"],
        notify: Some(&notify),
    };
    Keepalived::start(node, "keepalived", &vrrp)
}

fn sync(m: &Metrics, direction: &str, result: &str) -> f64 {
    m.sum(
        "gate64_ha_sync_total",
        &[("direction", direction), ("result", result)],
    )
}

/// The distinct IKE SA and child SA records the standby's store holds (each SA once, however
/// often its record came: `stored` counts messages).
fn held(m: &Metrics) -> f64 {
    m.sum("gate64_ha_store_records", &[])
}

/// One IKE SA's SPIs and its child SAs' (inbound, outbound) SPIs, sorted.
type SaSpis = ((u64, u64), Vec<(u32, u32)>);

/// Every IKE SA's [`SaSpis`] charon holds, sorted.
fn spis(sas: &[IkeSa]) -> Vec<SaSpis> {
    let mut all: Vec<_> = sas
        .iter()
        .map(|sa| {
            let mut children: Vec<_> = sa.children.iter().map(|c| (c.spi_in, c.spi_out)).collect();
            children.sort_unstable();
            (sa.spis, children)
        })
        .collect();
    all.sort_unstable();
    all
}

/// The inbound SPI of charon's installed child SA named `name`.
fn child_spi(sas: &[IkeSa], name: &str) -> Option<u32> {
    sas.iter()
        .flat_map(|s| &s.children)
        .find(|c| c.name == name && c.is_installed())
        .map(|c| c.spi_in)
}

/// The UDP payload of the next ESP-in-UDP packet the client sends to the IKE address, caught
/// where it arrives: on the active node.
fn catch_esp(lab: &Lab) -> Result<Vec<u8>> {
    let capture = Ipv4Capture::open(&lab.nodes[0], Duration::from_millis(200))?;
    let mut buf = vec![0u8; 65_536];
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Some(payload) = capture.next(&mut buf)?.and_then(esp_payload) {
            return Ok(payload.to_vec());
        }
    }
    bail!("no ESP packet from the client to {IKE_ADDRESS}:4500 within 5 s")
}

/// The ESP packet in `p`, an IPv4 packet from the client to the IKE address's UDP port 4500
/// (not IKE behind the zero marker, not a NAT keepalive).
fn esp_payload(p: &[u8]) -> Option<&[u8]> {
    let first = *p.first()?;
    let ihl = usize::from(first & 0x0f) * 4;
    let to_us = first >> 4 == 4
        && *p.get(9)? == 17
        && p.get(12..16)? == [192, 0, 2, 50]
        && p.get(16..20)? == [192, 0, 2, 10];
    let udp = p.get(ihl..)?;
    let payload = udp.get(8..)?;
    (to_us
        && udp.get(2..4)? == 4500u16.to_be_bytes()
        && payload.len() > 8
        && payload.get(..4)? != [0; 4])
        .then_some(payload)
}

/// The pair running: certificates for `responder` (the address the client's IKE goes to),
/// each node's configuration for `client`, keepalived on both (`hsa` master), gate64 up on
/// both. Returns the certificates and both keepalived instances.
fn start_pair(
    lab: &Lab,
    client: Client,
    responder: std::net::IpAddr,
) -> Result<(LabCerts, [Keepalived; 2])> {
    let [active_ns, standby_ns] = &lab.nodes;
    let certs = LabCerts::generate(&lab.bridge, &lab.bridge.dir().join("ike-certs"), responder)?;
    let mut configs = Vec::new();
    for (i, node) in lab.nodes.iter().enumerate() {
        // The same secrets on both nodes, each node with its own copy.
        let qcd = secret(node, "qcd.secret", "5a")?;
        let ha = secret(node, "ha.secret", "6b")?;
        let config = node_config(i, client, &certs, &qcd, &ha)?;
        configs.push(node.write_file("gate64.toml", &config)?);
    }
    let active = start_keepalived(active_ns, 150, &configs[0])?;
    let standby = start_keepalived(standby_ns, 100, &configs[1])?;
    ensure!(
        wait_until(Duration::from_secs(15), || holds_address(
            active_ns,
            IKE_ADDRESS
        )),
        "hsa (priority 150) did not become master within 15 s"
    );
    for node in &lab.nodes {
        ensure!(
            wait_until(Duration::from_secs(20), || metrics(node)
                .is_ok_and(|m| m.has("gate64_ipsec_qmsa"))),
            "gate64 on {} (started by the notify script) did not serve /metrics within 20 s",
            node.name()
        );
    }
    Ok((certs, [active, standby]))
}

fn takeover(lab: &Lab) -> Result<()> {
    let (certs, [_active, mut standby]) = start_pair(lab, Client::Native, IKE_ADDRESS.parse()?)?;
    let tunnels = vec![
        Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ];
    let charon = Charon::start(
        &lab.client,
        "initiator",
        CharonConfig::initiator(IKE_ADDRESS.parse()?, certs.initiator(), tunnels),
    )?;
    let r = with_client(lab, &charon);
    let r = with_charon_logs(r, &[&charon]);
    standby
        .process()
        .ensure_running()
        .context("keepalived on hsb")?;
    r
}

/// SIGKILLs every process of the active node and takes its links down (the sync link too);
/// waits for the standby to hold the IKE address. Returns when the node died (seconds since
/// the epoch) and how long the standby took to hold the address.
fn kill_active(lab: &Lab) -> Result<(f64, f64)> {
    let [active_ns, standby_ns] = &lab.nodes;
    let died = now_epoch();
    let t = Instant::now();
    for pid in active_ns.pids() {
        signal(pid as u32, "-KILL");
    }
    for dev in ["up0", "lan0", "ha0"] {
        active_ns.ip(&["link", "set", dev, "down"])?;
    }
    let took_over = wait_until(RESUME_BOUND, || holds_address(standby_ns, IKE_ADDRESS));
    let vrrp_secs = t.elapsed().as_secs_f64();
    ensure!(
        took_over,
        "hsb did not take {IKE_ADDRESS} within {RESUME_BOUND:?}"
    );
    Ok((died, vrrp_secs))
}

/// Sends `replay` (an ESP packet caught before the takeover) again from the client, from
/// another port, and checks that the standby counts it as a replay (its replay drops past
/// those in `m`) and still carries the client's traffic.
fn replay_is_dropped(lab: &Lab, m: &Metrics, replay: &[u8]) -> Result<()> {
    let standby_ns = &lab.nodes[1];
    let replays_before = m.sum("gate64_esp_replay_drops_total", &[]);
    lab.client.run_in(|| -> Result<()> {
        let socket = std::net::UdpSocket::bind("192.0.2.50:0")?;
        socket.send_to(replay, (IKE_ADDRESS, 4500))?;
        Ok(())
    })??;
    let replayed = wait_until(Duration::from_secs(5), || {
        metrics(standby_ns)
            .is_ok_and(|m| m.sum("gate64_esp_replay_drops_total", &[]) > replays_before)
    });
    ensure!(
        replayed,
        "hsb did not count the replayed ESP packet\n{}",
        gate64_lines(&metrics(standby_ns)?)
    );
    ensure!(
        ping_once(&lab.client),
        "no ping reply from {CORP_HOST} through hsb after the replayed ESP packet"
    );
    Ok(())
}

fn ping_once(ns: &Netns) -> bool {
    ns.exec(&["ping", "-6", "-c", "1", "-W", "2", &CORP_HOST.to_string()])
        .is_ok_and(|o| o.status.success())
}

fn with_client(lab: &Lab, charon: &Charon<'_>) -> Result<()> {
    let [active_ns, standby_ns] = &lab.nodes;
    charon.load_all()?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        charon.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
    }
    let before = charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
    ensure!(
        wait_until(Duration::from_secs(10), || ping_once(&lab.client)),
        "no ping reply from {CORP_HOST} through hsa"
    );
    let active = metrics(active_ns)?;
    let ok = active.sum("gate64_ike_negotiations_total", &[("result", "ok")]);
    ensure!(
        ok >= 2.0,
        "hsa negotiated {ok} IKE SAs\n{}",
        gate64_lines(&active)
    );
    // The standby holds the client's records before the takeover.
    let stored = wait_for(SYNC_BOUND, || {
        let m = metrics(standby_ns).ok()?;
        (held(&m) >= RECORDS).then_some(m)
    });
    let Some(standby_before) = stored else {
        bail!(
            "hsb held fewer than {RECORDS} records within {SYNC_BOUND:?}\nhsa:\n{}\nhsb:\n{}",
            gate64_lines(&metrics(active_ns)?),
            gate64_lines(&metrics(standby_ns)?)
        );
    };
    let negotiated_before = standby_before.sum("gate64_ike_negotiations_total", &[]);

    let stream = Stream::start("ping-ipsec", &lab.client, "-6", &CORP_HOST.to_string())?;
    // One of the ping's ESP packets, caught before the flushes that sync its sequence number.
    let replay = catch_esp(lab)?;
    std::thread::sleep(Duration::from_secs(2));
    let (died, vrrp_secs) = kill_active(lab)?;
    let resumed = wait_until(RESUME_BOUND, || stream.resumed_after(died + 0.5));
    std::thread::sleep(Duration::from_secs(2));
    signal(stream.process.pid(), "-INT");
    std::thread::sleep(Duration::from_millis(300));
    let m = metrics(standby_ns)?;
    ensure!(
        resumed,
        "the ping did not flow again through hsb within {RESUME_BOUND:?} of the death\n{}\n\
         ping:\n{}",
        gate64_lines(&m),
        stream.process.log()
    );
    let figures = stream.figures(died);

    let negotiated = m.sum("gate64_ike_negotiations_total", &[]);
    ensure!(
        negotiated == negotiated_before && negotiated == 0.0,
        "hsb ran IKE negotiations of its own ({negotiated_before} before, {negotiated} \
         after): the client negotiated again\n{}",
        gate64_lines(&m)
    );
    let installed = sync(&m, "takeover", "installed");
    ensure!(
        installed >= RECORDS,
        "hsb installed {installed} synced records, want at least {RECORDS}\n{}",
        gate64_lines(&m)
    );
    let failed = sync(&m, "takeover", "install_failed");
    ensure!(
        failed == 0.0,
        "hsb failed to install {failed} synced records\n{}",
        gate64_lines(&m)
    );
    // RFC 6311: charon announced Message ID sync in IKE_AUTH, hsa answered it and synced the
    // flag, and charon answers hsb's sync request for both IKE SAs.
    let mid = |m: &Metrics, result| m.sum("gate64_ha_mid_sync_total", &[("result", result)]);
    let synced_ids = wait_for(SETTLE_TIMEOUT, || {
        let m = metrics(standby_ns).ok()?;
        (mid(&m, "synced") >= 2.0).then_some(m)
    });
    let Some(m_sync) = synced_ids else {
        bail!(
            "charon did not answer hsb's two Message ID sync requests within {SETTLE_TIMEOUT:?}\n{}",
            gate64_lines(&metrics(standby_ns)?)
        );
    };
    ensure!(
        mid(&m_sync, "failed") == 0.0 && mid(&m_sync, "unsupported") == 0.0,
        "Message ID syncs failed or unsupported\n{}",
        gate64_lines(&m_sync)
    );
    let after = charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
    ensure!(
        spis(&before) == spis(&after),
        "charon's SAs changed across the takeover:\nbefore {before:#?}\nafter {after:#?}"
    );
    ensure!(
        ping_once(&lab.client),
        "no ping reply from {CORP_HOST} through hsb after the takeover"
    );

    // The ESP packet caught before the death, sent again (from another port): hsb refuses
    // it as a replay, and the child SA stays at the client's address.
    replay_is_dropped(lab, &m, &replay)?;

    // The taken-over IKE SA works on hsb: charon rekeys the infrastructure child SA through it.
    let old = child_spi(&after, INFRASTRUCTURE).context("no infrastructure child SA")?;
    charon.rekey_child(INFRASTRUCTURE)?;
    let rekeyed = wait_for(SETTLE_TIMEOUT, || {
        let sas = charon.list_sas().ok()?;
        let new = child_spi(&sas, INFRASTRUCTURE)?;
        let installed = sas
            .iter()
            .flat_map(|s| &s.children)
            .filter(|c| c.name == INFRASTRUCTURE && c.is_installed())
            .count();
        (new != old && installed == 1).then_some(new)
    });
    ensure!(
        rekeyed.is_some(),
        "charon did not rekey the infrastructure child SA through hsb: {:#?}",
        charon.list_sas()?
    );
    ensure!(
        wait_until(Duration::from_secs(5), || ping_once(&lab.client)),
        "no ping reply from {CORP_HOST} through the rekeyed child SA"
    );
    let (silence, lost) = figures.unwrap_or((f64::NAN, 0));
    println!(
        "HA takeover: hsb held {IKE_ADDRESS} {vrrp_secs:.2} s after hsa's death; the ping \
         through the infrastructure tunnel: longest silence {silence:.2} s, {lost} echo \
         requests (20/s) lost; hsb stored {} records, installed {installed}, ran {negotiated} \
         IKE negotiations; charon answered {} RFC 6311 Message ID syncs; charon's IKE and child \
         SPIs unchanged; a replayed ESP packet from before the death dropped and counted; a \
         child SA rekey through hsb",
        sync(&m, "in", "stored"),
        mid(&m_sync, "synced"),
    );
    Ok(())
}

/// The pids of `node`'s keepalived processes.
fn keepalived_pids(node: &Netns) -> Vec<u32> {
    (node.pids().into_iter())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "keepalived")
        })
        .map(|pid| pid as u32)
        .collect()
}

/// The standby takes the client over on its ESP alone: charon sends no IKE request (its
/// liveness checks are 10 minutes apart) and nothing promotes `hsb` (its keepalived is
/// stopped, the addresses are moved by hand).
fn esp_takeover(lab: &Lab) -> Result<()> {
    let (certs, [_active, mut standby]) = start_pair(lab, Client::Native, IKE_ADDRESS.parse()?)?;
    let tunnels = vec![
        Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ];
    let mut config = CharonConfig::initiator(IKE_ADDRESS.parse()?, certs.initiator(), tunnels);
    config.dpd_delay = Duration::from_secs(600);
    let charon = Charon::start(&lab.client, "initiator", config)?;
    let stopped = keepalived_pids(&lab.nodes[1]);
    let r = with_esp_only_client(lab, &charon, &stopped);
    for pid in &stopped {
        signal(*pid, "-CONT");
    }
    let r = with_charon_logs(r, &[&charon]);
    standby
        .process()
        .ensure_running()
        .context("keepalived on hsb")?;
    r
}

fn with_esp_only_client(lab: &Lab, charon: &Charon<'_>, keepalived: &[u32]) -> Result<()> {
    let [active_ns, standby_ns] = &lab.nodes;
    ensure!(!keepalived.is_empty(), "no keepalived process on hsb");
    charon.load_all()?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        charon.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
    }
    let before = charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
    ensure!(
        wait_until(Duration::from_secs(10), || ping_once(&lab.client)),
        "no ping reply from {CORP_HOST} through hsa"
    );
    let stored = wait_until(SYNC_BOUND, || {
        metrics(standby_ns).is_ok_and(|m| held(&m) >= RECORDS)
    });
    ensure!(
        stored,
        "hsb held fewer than {RECORDS} records within {SYNC_BOUND:?}\n{}",
        gate64_lines(&metrics(standby_ns)?)
    );
    // No promotion: hsb's keepalived sees nothing from here on, so its notify script never
    // runs.
    for pid in keepalived {
        signal(*pid, "-STOP");
    }
    let stream = Stream::start("ping-ipsec", &lab.client, "-6", &CORP_HOST.to_string())?;
    std::thread::sleep(Duration::from_secs(2));
    let died = now_epoch();
    let t = Instant::now();
    for pid in active_ns.pids() {
        signal(pid as u32, "-KILL");
    }
    for dev in ["up0", "lan0", "ha0"] {
        active_ns.ip(&["link", "set", dev, "down"])?;
    }
    standby_ns.ip(&["addr", "add", &format!("{IKE_ADDRESS}/24"), "dev", "up0"])?;
    standby_ns.ip(&[
        "-6",
        "addr",
        "add",
        &format!("{INSIDE_GATEWAY}/64"),
        "dev",
        "lan0",
    ])?;
    // What keepalived's gratuitous ARP and unsolicited NA would do.
    lab.client.ip(&["neigh", "flush", "dev", "eth0"])?;
    lab.corp.ip(&["-6", "neigh", "flush", "dev", "eth0"])?;
    let resumed = wait_until(RESUME_BOUND, || stream.resumed_after(died + 0.5));
    let gap = t.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    signal(stream.process.pid(), "-INT");
    std::thread::sleep(Duration::from_millis(300));
    let m = metrics(standby_ns)?;
    ensure!(
        resumed,
        "the ping did not flow again through hsb within {RESUME_BOUND:?} of the death\n{}\n\
         ping:\n{}",
        gate64_lines(&m),
        stream.process.log()
    );
    let negotiated = m.sum("gate64_ike_negotiations_total", &[]);
    ensure!(
        negotiated == 0.0,
        "hsb ran {negotiated} IKE negotiations: the client negotiated again\n{}",
        gate64_lines(&m)
    );
    let by_esp = sync(&m, "takeover", "on_demand_esp");
    ensure!(
        by_esp >= 1.0,
        "no IKE SA was taken over by ESP on hsb\n{}",
        gate64_lines(&m)
    );
    let by_request = sync(&m, "takeover", "on_demand") - by_esp;
    ensure!(
        by_request == 0.0,
        "{by_request} IKE SA(s) were taken over by an IKE request, not by ESP\n{}",
        gate64_lines(&m)
    );
    let failed = sync(&m, "takeover", "install_failed");
    ensure!(
        failed == 0.0,
        "hsb failed to install {failed} synced records\n{}",
        gate64_lines(&m)
    );
    let after = charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
    ensure!(
        spis(&before) == spis(&after),
        "charon's SAs changed across the takeover:\nbefore {before:#?}\nafter {after:#?}"
    );
    let (silence, lost) = stream.figures(died).unwrap_or((f64::NAN, 0));
    println!(
        "HA takeover by ESP, hsb not promoted: the ping flowed again {:.2} s after hsa's \
         death (longest silence {silence:.2} s, {lost} echo requests lost); {by_esp} IKE SA(s) \
         taken over by ESP, {} records installed, {negotiated} IKE negotiations on hsb; \
         charon's IKE and child SPIs unchanged",
        gap.as_secs_f64(),
        sync(&m, "takeover", "installed"),
    );
    Ok(())
}

/// The generator's clients unless `GATE64_HA_CLIENTS` says otherwise.
const LOAD_CLIENTS: usize = 1_000;
/// The pool of the test with the generator: room for every client and charon.
const LOAD_POOL6: &str = "fd00:c4::/112";
/// A corporate host reached by the intranet tunnel only (the infrastructure tunnel's
/// selector is [`CORP_HOST`]`/128`).
const INTRANET_HOST: std::net::Ipv6Addr =
    std::net::Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 3);
/// The generator's Teredo clients' source addresses: hosts .129 to .254 of the client link
/// (gate64 paces its bubbles and bounds its relay peers per address).
const LOAD_SOURCE_V4: &str = "192.0.2.128/25";
const LOAD_SOURCES: std::ops::RangeInclusive<u8> = 129..=254;
/// Milliseconds between two probes of one client through one tunnel.
const PROBE_INTERVAL_MS: u64 = 500;
/// Every client up: qualification, then two IKE negotiations each, on two shared cores.
const LOAD_UP_TIMEOUT: Duration = Duration::from_secs(60);
const LOAD_UP_PER_CLIENT: Duration = Duration::from_millis(60);
/// The standby holds every record within this long of the clients coming up.
const LOAD_SYNC_BOUND: Duration = Duration::from_secs(30);

#[test]
#[ignore = "netns: needs root"]
fn netns_ha_sync_takeover_keeps_emulated_clients() {
    let clients = env_count("GATE64_HA_CLIENTS", LOAD_CLIENTS);
    println!("HA sync test with {clients} emulated clients");
    run_in_lab("netns_ha_sync_takeover_keeps_emulated_clients", |lab| {
        takeover_with_load(lab, clients)
    });
}

fn takeover_with_load(lab: &Lab, clients: usize) -> Result<()> {
    ensure!(clients > 0, "GATE64_HA_CLIENTS must be at least 1");
    let (certs, [_active, mut standby]) = start_pair(lab, Client::Both, IKE_ADDRESS.parse()?)?;
    let corp = &lab.corp;
    corp.ip(&["-6", "route", "add", LOAD_POOL6, "via", INSIDE_GATEWAY])?;
    let intranet = format!("{INTRANET_HOST}/64");
    corp.ip(&["-6", "addr", "add", &intranet, "dev", "eth0", "nodad"])?;
    let echo = [CORP_HOST, INTRANET_HOST]
        .map(|host| corp.spawn_thread("udp-echo", move || udp_echo(host)));
    for host in LOAD_SOURCES {
        lab.client.addr_add("eth0", &format!("192.0.2.{host}/24"))?;
    }
    let tunnels = vec![
        Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ];
    let charon = Charon::start(
        &lab.client,
        "initiator",
        CharonConfig::initiator(IKE_ADDRESS.parse()?, certs.initiator(), tunnels),
    )?;
    let r = with_load(lab, &charon, &certs, clients);
    let r = with_charon_logs(r, &[&charon]);
    drop(echo);
    standby
        .process()
        .ensure_running()
        .context("keepalived on hsb")?;
    r
}

/// The generator's SPEC.json: `clients` Teredo clients with both tunnels, certificates from
/// the lab's CA (its key in PKCS#8, which the generator reads), probing both corporate hosts.
fn load_spec(lab: &Lab, certs: &LabCerts, clients: usize) -> Result<String> {
    let dir = certs.ca.parent().context("the CA's directory")?;
    let key = dir.join("ca.p8.key");
    lab.bridge.exec_ok(&[
        "openssl",
        "pkcs8",
        "-topk8",
        "-nocrypt",
        "-in",
        path_str(&dir.join("ca.key"))?,
        "-out",
        path_str(&key)?,
    ])?;
    let ca = path_str(&certs.ca)?;
    Ok(format!(
        r#"{{ "clients": {clients}, "teredo_server": "192.0.2.1",
  "source_v4": "{LOAD_SOURCE_V4}",
  "ipsec": {{ "endpoint": "{GATE64_ADDRESS6}", "ca": {ca:?},
             "client_ca_cert": {ca:?}, "client_ca_key": {:?},
             "infrastructure_ts": ["{CORP_HOST}/128"], "intranet_ts": ["2001:db8:100::/48"] }},
  "pool6": "{LOAD_POOL6}", "corp_prefixes": [], "tun": "load0",
  "connect_per_sec": 2000, "max_setups_in_flight": 128,
  "probe": {{ "targets": ["{CORP_HOST}", "{INTRANET_HOST}"], "port": 7007,
             "interval_ms": {PROBE_INTERVAL_MS} }} }}"#,
        path_str(&key)?,
    ))
}

/// The `Udp:` lines of `/proc/net/snmp` in `ns` (receive buffer errors: datagrams the
/// kernel dropped before a socket read them).
fn udp_counters(ns: &Netns) -> String {
    ns.exec(&["cat", "/proc/net/snmp"])
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.starts_with("Udp:"))
                .collect::<Vec<_>>()
                .join(" / ")
        })
        .unwrap_or_default()
}

fn with_load(lab: &Lab, charon: &Charon<'_>, certs: &LabCerts, clients: usize) -> Result<()> {
    let [_, standby_ns] = &lab.nodes;
    charon.load_all()?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        charon.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
    }
    let before = charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
    ensure!(
        wait_until(Duration::from_secs(10), || ping_once(&lab.client)),
        "no ping reply from {CORP_HOST} through hsa"
    );

    let spec = lab
        .client
        .write_file("load-spec.json", &load_spec(lab, certs, clients)?)?;
    let status = lab.client.dir().join("load-status.json");
    let mut load = spawn_bench_load(&lab.client, &spec, &status)?;
    let n = clients as f64;
    let t = Instant::now();
    let timeout = LOAD_UP_TIMEOUT + LOAD_UP_PER_CLIENT * u32::try_from(clients)?;
    // Every client up with both SAs, and every one's probes answered through both tunnels.
    let up = wait_all_up(&status, clients, timeout);
    load.ensure_running()?;
    let s = up?;
    println!(
        "{clients} emulated Teredo clients (2 IKE SAs + 2 child SAs each) up and answered on \
         hsa in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let records = RECORDS * (n + 1.0);
    let stored = wait_for(LOAD_SYNC_BOUND, || {
        let m = metrics(standby_ns).ok()?;
        (held(&m) >= records).then_some(m)
    });
    let Some(standby_before) = stored else {
        bail!(
            "hsb held fewer than {records} records within {LOAD_SYNC_BOUND:?}\nhsb:\n{}",
            gate64_lines(&metrics(standby_ns)?)
        );
    };
    let negotiated_before = standby_before.sum("gate64_ike_negotiations_total", &[]);
    let s_get = |s: &str, k: &str| field(s, k).unwrap_or(-1.0);
    let (generator_negotiations, session_ends) =
        (s_get(&s, "ike_negotiations"), s_get(&s, "session_errors"));

    let stream = Stream::start("ping-ipsec", &lab.client, "-6", &CORP_HOST.to_string())?;
    let replay = catch_esp(lab)?;
    // The gaps measured from here: the takeover's, not the set-up's.
    signal(load.pid(), "-USR1");
    std::thread::sleep(Duration::from_secs(3));
    let at_death = field(&status_text(&status), "elapsed_seconds").unwrap_or(f64::MAX);
    let (died, vrrp_secs) = kill_active(lab)?;
    // Every client answered again: a status written well after the death (the status may be
    // a second old at it) in which no client is silent (no echo for two probe intervals and
    // a second) and every one was answered by both hosts.
    let recovered = wait_for(RESUME_BOUND, || {
        let s = std::fs::read_to_string(&status).ok()?;
        (field(&s, "elapsed_seconds")? >= at_death + 6.0
            && field(&s, "probe_silent")? == 0.0
            && field(&s, "probe_never")? == 0.0)
            .then_some(s)
    });
    let resumed = wait_until(RESUME_BOUND, || stream.resumed_after(died + 0.5));
    let recovery_secs = t.elapsed().as_secs_f64();
    signal(stream.process.pid(), "-INT");
    std::thread::sleep(Duration::from_secs(1));
    let m = metrics(standby_ns)?;
    let s = status_text(&status);
    load.ensure_running()?;
    ensure!(
        recovered.is_some(),
        "not every emulated client's traffic flowed again through hsb within \
         {RESUME_BOUND:?} of the death: {s}\n{}",
        gate64_lines(&m)
    );
    ensure!(
        resumed,
        "charon's ping did not flow again through hsb within {RESUME_BOUND:?} of the death\n\
         {}\nping:\n{}",
        gate64_lines(&m),
        stream.process.log()
    );
    let figures = stream.figures(died);
    let negotiated = m.sum("gate64_ike_negotiations_total", &[]);
    ensure!(
        negotiated == negotiated_before && negotiated == 0.0,
        "hsb ran IKE negotiations of its own ({negotiated_before} before, {negotiated} \
         after): a client negotiated again\n{}",
        gate64_lines(&m)
    );
    ensure!(
        s_get(&s, "ike_negotiations") == generator_negotiations
            && s_get(&s, "session_errors") == session_ends
            && s_get(&s, "up") == n,
        "the generator negotiated again or lost a session across the takeover (before: \
         {generator_negotiations} negotiations, {session_ends} session ends): {s}"
    );
    let installed = sync(&m, "takeover", "installed");
    let failed = sync(&m, "takeover", "install_failed");
    ensure!(
        installed >= records && failed == 0.0,
        "hsb installed {installed} synced records ({failed} failed), want at least \
         {records} (hsb's UDP counters: {})\n{}",
        udp_counters(standby_ns),
        gate64_lines(&m)
    );
    let after = charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
    ensure!(
        spis(&before) == spis(&after),
        "charon's SAs changed across the takeover:\nbefore {before:#?}\nafter {after:#?}"
    );

    // The ESP packet caught before the death, sent again: hsb refuses it as a replay.
    replay_is_dropped(lab, &m, &replay)?;

    let (silence, lost) = figures.unwrap_or((f64::NAN, 0));
    println!(
        "HA takeover with {clients} emulated Teredo clients and charon: hsb held \
         {IKE_ADDRESS} {vrrp_secs:.2} s after hsa's death, every client flowing again \
         (checked {recovery_secs:.1} s after it); per-client gap (longest wait between two echoes of one \
         tunnel, probes every {PROBE_INTERVAL_MS} ms): min {:.2} s, p50 {:.2} s, p90 {:.2} s, \
         p99 {:.2} s, max {:.2} s; charon's ping: longest silence {silence:.2} s, {lost} echo \
         requests lost; hsb installed {installed} records and ran {negotiated} IKE \
         negotiations; the generator made {} (all before the takeover); charon's SPIs \
         unchanged; a replayed ESP packet dropped",
        s_get(&s, "gap_min_seconds"),
        s_get(&s, "gap_p50_seconds"),
        s_get(&s, "gap_p90_seconds"),
        s_get(&s, "gap_p99_seconds"),
        s_get(&s, "gap_max_seconds"),
        s_get(&s, "ike_negotiations"),
    );
    Ok(())
}
