//! The IKE_SA_INIT flood test, `netns_ike_sa_init_flood_spares_clients`: one address (the
//! corporate host, sending straight to gate64's IKE port, the path that reaches the responder
//! with the least work per datagram) floods IKE_SA_INIT from one thread as fast as it goes,
//! while strongSwan over Teredo holds both tunnels. Asserted: cookies engage, the established
//! client's flow keeps passing and its SAs stay, and a new client from another address (gate64's
//! own initiator with a certificate of its own, on the flood's path) builds both tunnels during
//! the flood. Printed, never asserted: per round (`G64_FLOOD_ROUNDS`, 1 in CI) the established
//! client's throughput undisturbed, during the same flood aimed at a socket on gate64's host
//! that nobody reads (the control: the flooding thread and the kernels' work, which the 2-core
//! lab cannot keep off the client's cores), and during the flood at gate64; the medians of
//! their ratios (the acceptance aims at >= 0.9), the new client's time to both tunnels, what
//! the IKE driver shed and what the kernel dropped.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use gate64_ike::auth::Credentials;
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::initiator::{Initiator, InitiatorConfig, InitiatorEvent};
use gate64_testkit::strongswan::{INFRASTRUCTURE, INTRANET, LabCerts, Tunnel, with_charon_logs};
use gate64_testkit::{CORP_HOST, Netns, Topology};

use crate::common::{gate64_lines, median, netns_test, rounds_from_env};
use crate::ike_interop::initiator_config;
use crate::ipsec::{
    GATE64_ADDRESS6, INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab, route_corp_to_gate64,
};

/// Half-open IKE SAs gate64 may hold during the flood: the cookie threshold and the
/// per-source cap keep it far below this.
const HALF_OPEN_BOUND: f64 = 100.0;
/// The new client's address, on the corporate link beside the flooding host but in a /64 of
/// its own: the IKE driver's per-source bounds take an IPv6 /64 as one source.
pub(crate) const NEWCOMER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 8, 0, 0, 0, 3);

/// Puts [`NEWCOMER`] on `tcorp`'s corporate link, its /64 routed there from gate64's host.
pub(crate) fn add_newcomer(topo: &Topology) -> Result<()> {
    topo.corp.addr_add("vsrv", &format!("{NEWCOMER}/64"))?;
    topo.srv
        .ip(&[
            "-6",
            "route",
            "replace",
            "2001:db8:100:8::/64",
            "via",
            "2001:db8:100:1::2",
        ])
        .map(drop)
}
/// How long the metrics may lag (the IKE gauges are copied once a second).
pub(crate) const GAUGE_LAG: Duration = Duration::from_secs(10);

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_sa_init_flood_spares_clients() {
    netns_test(
        "netns_ike_sa_init_flood_spares_clients",
        Topology::builder(),
        ike_sa_init_flood,
    );
}

pub(crate) fn tunnels() -> Vec<Tunnel> {
    vec![
        Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ]
}

fn ike_sa_init_flood(topo: &Topology) -> Result<()> {
    // The flood comes from one address, whose own half-open SAs the per-source cap holds
    // at 5 (the default): a cookie threshold below that makes the cookies engage.
    let mut lab =
        TeredoIpsecLab::start_with(topo, None, "half_open_cookie_threshold = 2\n", Some("info"))?;
    let _iperf = topo.start_iperf_server()?;
    route_corp_to_gate64(topo)?;
    add_newcomer(topo)?;
    let init = sa_init_datagram(&lab.certs)?;
    let newcomer = newcomer_configs(&topo.srv, &lab.certs, "newcomer.gate64.lab")?;
    let initiator = TeredoIpsecLab::initiator(topo, lab.certs.initiator(), tunnels())?;
    let scenario = || -> Result<()> {
        initiator.load_all()?;
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        // The control's target: a socket on gate64's host that nobody reads, so that the
        // same flood costs the machine what it costs without gate64 (the flooding thread,
        // both kernels' send and receive work) and the ratio against it is gate64's share.
        let sink = topo
            .srv
            .run_in(|| UdpSocket::bind(SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), CONTROL_PORT)))?
            .context("binding the control flood's unread socket")?;
        let mut newcomer = Some(newcomer);
        let mut rounds = Vec::new();
        for round in 1..=flood_rounds() {
            let r = flood_round(topo, lab.gate.pid(), &init, newcomer.take())
                .with_context(|| format!("round {round}"))?;
            println!("round {round}: {r}");
            rounds.push(r);
            if round == 1 {
                // Checked at once: the new client's initiator is gone after round 1, so
                // gate64's liveness checks end its SAs during later rounds.
                outcomes(topo)?;
            }
        }
        drop(sink);
        let median_of = |f: fn(&Round) -> f64| median(rounds.iter().map(f));
        println!(
            "median of {} round(s): established client keeps {:.2} of its undisturbed \
             throughput during the flood, {:.2} during the same flood at an unread socket \
             (control), so {:.2} of the control's",
            rounds.len(),
            median_of(|r| r.flood_bps / r.calm_bps.max(1.0)),
            median_of(|r| r.control_bps / r.calm_bps.max(1.0)),
            median_of(|r| r.flood_bps / r.control_bps.max(1.0)),
        );
        // The established client kept its SAs and its path through both tunnels.
        initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("the established client's ping after the flood")?;
        Ok(())
    };
    with_charon_logs(scenario(), &[&initiator])?;
    lab.miredo.ensure_running()?;
    lab.gate.ensure_running()
}

/// The control flood's port on gate64's address: bound by the test, never read.
const CONTROL_PORT: u16 = 5500;
/// iperf3 seconds per phase.
const IPERF_SECS: u32 = 3;

/// Rounds of (undisturbed, control, flood) iperf3 runs: `$G64_FLOOD_ROUNDS` (1 to 9), else 1.
fn flood_rounds() -> usize {
    rounds_from_env("G64_FLOOD_ROUNDS", 9)
}

/// One round's figures: the established client's iperf3 (bit/s) and gate64's CPU seconds over
/// each run, undisturbed, during the control flood and during the flood at gate64's IKE port.
struct Round {
    calm_bps: f64,
    control_bps: f64,
    flood_bps: f64,
    cpu: [f64; 3],
    flood_rate: f64,
    control_rate: f64,
    newcomer: Option<Duration>,
}

impl std::fmt::Display for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} Mbit/s undisturbed, {:.1} during the control flood ({:.0}/s at an unread \
             socket), {:.1} during the IKE flood ({:.0}/s at UDP 500): ratios {:.2} and {:.2}, \
             flood over control {:.2}; gate64's CPU per run {:.2} / {:.2} / {:.2} s",
            self.calm_bps / 1e6,
            self.control_bps / 1e6,
            self.control_rate,
            self.flood_bps / 1e6,
            self.flood_rate,
            self.control_bps / self.calm_bps.max(1.0),
            self.flood_bps / self.calm_bps.max(1.0),
            self.flood_bps / self.control_bps.max(1.0),
            self.cpu[0],
            self.cpu[1],
            self.cpu[2],
        )?;
        if let Some(took) = self.newcomer {
            write!(
                f,
                "; new client from {NEWCOMER}: both tunnels in {:.1} ms",
                took.as_secs_f64() * 1e3
            )?;
        }
        Ok(())
    }
}

/// The established client's iperf3 and gate64's CPU over it: (bit/s, CPU seconds).
fn measured(topo: &Topology, gate: u32, what: &str) -> Result<(f64, f64)> {
    let cpu = cpu_seconds(gate)?;
    let run = topo
        .iperf3(IPERF_SECS, 1, false)
        .with_context(|| format!("iperf3 {what}"))?;
    ensure!(
        run.received_bytes > 0,
        "the established client moved nothing {what}"
    );
    Ok((run.received_bps, cpu_seconds(gate)? - cpu))
}

/// Runs `during` while one thread in `tcorp` floods `init` at `port` of gate64's address;
/// returns what `during` returned and the flood's rate.
fn while_flooding<T>(
    topo: &Topology,
    init: &[u8],
    port: u16,
    during: impl FnOnce() -> Result<T>,
) -> Result<(T, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let datagram = init.to_vec();
    let flooder = topo
        .corp
        .spawn_thread("ike-init-flood", move || flood(&datagram, port, &flag))?;
    thread::sleep(Duration::from_secs(1));
    let result = during();
    stop.store(true, Ordering::Relaxed);
    let (sent, secs) = flooder
        .join()
        .map_err(|_| anyhow::anyhow!("flood thread panicked"))???;
    Ok((result?, sent as f64 / secs.max(0.001)))
}

/// One round: iperf3 undisturbed, during the control flood, during the IKE flood (and, in
/// the first round, the new client's two tunnels and the half-open bound during it).
fn flood_round(
    topo: &Topology,
    gate: u32,
    init: &[u8],
    newcomer: Option<[InitiatorConfig; 2]>,
) -> Result<Round> {
    let (calm_bps, calm_cpu) = measured(topo, gate, "before the flood")?;
    let ((control_bps, control_cpu), control_rate) =
        while_flooding(topo, init, CONTROL_PORT, || {
            measured(topo, gate, "during the control flood")
        })?;
    let ((flood_bps, flood_cpu, newcomer), flood_rate) = while_flooding(topo, init, 500, || {
        let (bps, cpu) = measured(topo, gate, "during the flood")?;
        let took = match newcomer {
            Some(configs) => Some(
                topo.corp
                    .run_in(move || build_both(configs))?
                    .context("the new client during the flood")?,
            ),
            None => None,
        };
        let m = topo.metrics()?;
        let half_open = m.sum("gate64_ike_half_open", &[]);
        ensure!(
            half_open <= HALF_OPEN_BOUND,
            "gate64_ike_half_open {half_open} during the flood\n{}",
            gate64_lines(&m)
        );
        println!(
            "during the flood: gate64_ike_half_open {half_open}, tsrv {}",
            udp6_counters(&topo.srv)?
        );
        Ok((bps, cpu, took))
    })?;
    Ok(Round {
        calm_bps,
        control_bps,
        flood_bps,
        cpu: [calm_cpu, control_cpu, flood_cpu],
        flood_rate,
        control_rate,
        newcomer,
    })
}

/// What gate64 counted: cookies sent, and both clients' SAs (2 + 2 IKE SAs, 2 + 2 child SAs).
fn outcomes(topo: &Topology) -> Result<()> {
    let deadline = Instant::now() + GAUGE_LAG;
    let m = loop {
        let m = topo.metrics()?;
        let sas = (
            m.sum("gate64_ipsec_mmsa", &[]),
            m.sum("gate64_ipsec_qmsa", &[]),
        );
        if sas.0 >= 4.0 && sas.1 >= 4.0 || Instant::now() >= deadline {
            break m;
        }
        thread::sleep(Duration::from_millis(250));
    };
    let cookies = m.sum("gate64_ike_cookies_sent_total", &[]);
    println!(
        "gate64_ike_cookies_sent_total {cookies}, gate64_ike_shed_total source_rate {} \
         batch_share {}, gate64_ipsec_mmsa {}, gate64_ipsec_qmsa {}",
        m.sum("gate64_ike_shed_total", &[("reason", "source_rate")]),
        m.sum("gate64_ike_shed_total", &[("reason", "batch_share")]),
        m.sum("gate64_ipsec_mmsa", &[]),
        m.sum("gate64_ipsec_qmsa", &[]),
    );
    ensure!(
        cookies > 0.0,
        "no cookie sent during the flood\n{}",
        gate64_lines(&m)
    );
    ensure!(
        m.sum("gate64_ipsec_mmsa", &[]) >= 4.0 && m.sum("gate64_ipsec_qmsa", &[]) >= 4.0,
        "gate64 does not hold both clients' tunnels\n{}",
        gate64_lines(&m)
    );
    Ok(())
}

/// User + system CPU seconds of process `pid` and its threads so far (`/proc/PID/stat`).
pub(crate) fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').context("no command name")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> {
        Ok(fields.get(i).context("short /proc stat")?.parse::<f64>()?)
    };
    // USER_HZ, 100 on Linux whatever the kernel's own tick.
    let hz = 100.0;
    Ok((ticks(11)? + ticks(12)?) / hz)
}

/// The kernel's UDP receive counters in `ns`: how many datagrams the IKE sockets got and how
/// many the full receive buffers dropped.
pub(crate) fn udp6_counters(ns: &Netns) -> Result<String> {
    let snmp = ns.exec_ok(&["cat", "/proc/net/snmp6"])?;
    Ok(snmp
        .lines()
        .filter(|l| l.starts_with("Udp6InDatagrams") || l.starts_with("Udp6RcvbufErrors"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", "))
}

/// One genuine IKE_SA_INIT from gate64's initiator; the flood varies its SPIi so that each
/// datagram looks like a new exchange.
fn sa_init_datagram(certs: &LabCerts) -> Result<Vec<u8>> {
    let config = initiator_config(certs, TunnelKind::Intranet, "2001:db8:100::/48")?;
    let local = SocketAddr::new(IpAddr::V6(CORP_HOST), 500);
    let remote = SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), 500);
    let mut i = Initiator::new(config, Instant::now(), SystemTime::now(), local, remote)?;
    i.start(Instant::now());
    let (_, _, bytes) = i.poll_transmit().context("no IKE_SA_INIT")?;
    ensure!(bytes.len() > 28, "IKE_SA_INIT of {} bytes", bytes.len());
    Ok(bytes)
}

/// Sends `init` with a fresh SPIi each time to `port` of gate64's address until `stop`;
/// returns how many it sent and for how long.
fn flood(init: &[u8], port: u16, stop: &AtomicBool) -> Result<(u64, f64)> {
    let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V6(CORP_HOST), 0))?;
    let to = SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), port);
    let mut datagram = init.to_vec();
    let (started, mut sent) = (Instant::now(), 0u64);
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..64 {
            sent += 1;
            datagram[..8].copy_from_slice(&(sent | 1 << 63).to_be_bytes());
            // A full socket buffer is the flood's ceiling, not an error.
            let _ = socket.send_to(&datagram, to);
        }
    }
    Ok((sent, started.elapsed().as_secs_f64()))
}

/// The new client's two initiators (infrastructure and intranet) with a certificate of its
/// own (for `name`): with the established client's, its INITIAL_CONTACT would replace that client's SAs
/// (RFC 7296 §2.4).
pub(crate) fn newcomer_configs(
    ns: &Netns,
    certs: &LabCerts,
    name: &str,
) -> Result<[InitiatorConfig; 2]> {
    tunnel_configs(certs, &issue_client_certificate(ns, certs, name)?)
}

/// The two initiators (infrastructure, intranet) of a client with the certificate and key
/// `client` (PEM files), trusting the lab CA of `certs` for gate64's certificate.
pub(crate) fn tunnel_configs(
    certs: &LabCerts,
    (cert, key): &(PathBuf, PathBuf),
) -> Result<[InitiatorConfig; 2]> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("{}", p.display()));
    let (chain, key) = (read(cert)?, read(key)?);
    let config = |tunnel, ts: &str| -> Result<InitiatorConfig> {
        let mut c = initiator_config(certs, tunnel, ts)?;
        c.credentials = Credentials::from_pem(&chain, &key)?;
        Ok(c)
    };
    Ok([
        config(TunnelKind::Infrastructure, &format!("{CORP_HOST}/128"))?,
        config(TunnelKind::Intranet, "2001:db8:100::/48")?,
    ])
}

/// A client certificate for `name` from the lab CA (strongSwan's `pki`, as `LabCerts` makes
/// its own), next to the others: (certificate, key).
fn issue_client_certificate(
    ns: &Netns,
    certs: &LabCerts,
    name: &str,
) -> Result<(PathBuf, PathBuf)> {
    let dir = certs.ca.parent().context("the lab CA has no directory")?;
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    let pki = gate64_testkit::find_tool("pki").context("`pki` not found")?;
    let q = |p: &Path| format!("'{}'", p.display());
    let script = format!(
        "export STRONGSWAN_CONF={conf}; {pki} --gen --type ecdsa --size 256 --outform pem > {key} \
         && {pki} --pub --in {key} --type ecdsa --outform pem | {pki} --issue --lifetime 30 \
         --type pub --cacert {ca} --cakey {ca_key} --dn CN={name} --san {name} \
         --flag clientAuth --outform pem > {cert}",
        conf = q(&dir.join("pki-strongswan.conf")),
        pki = q(&pki),
        key = q(&key),
        ca = q(&certs.ca),
        ca_key = q(&dir.join("ca.key")),
        cert = q(&cert),
    );
    ns.exec_ok(&["sh", "-c", &script])?;
    Ok((cert, key))
}

/// Runs both initiators from [`NEWCOMER`] at once (each on its own socket) until both are
/// established; returns how long that took.
pub(crate) fn build_both(configs: [InitiatorConfig; 2]) -> Result<Duration> {
    build_both_from(configs, NEWCOMER)
}

/// [`build_both`] from `source`, an address of the namespace it runs in (any number of
/// initiators, each on its own socket).
pub(crate) fn build_both_from(
    configs: impl IntoIterator<Item = InitiatorConfig>,
    source: Ipv6Addr,
) -> Result<Duration> {
    let started = Instant::now();
    let remote = SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), 500);
    let mut peers = Vec::new();
    for config in configs {
        let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V6(source), 0))?;
        socket.set_read_timeout(Some(Duration::from_millis(20)))?;
        let local = socket.local_addr()?;
        let mut initiator = Initiator::new(config, started, SystemTime::now(), local, remote)?;
        initiator.start(Instant::now());
        peers.push((socket, initiator, false));
    }
    let mut buf = vec![0u8; 65_535];
    let deadline = started + INITIATE_TIMEOUT;
    while peers.iter().any(|(_, _, up)| !up) {
        if Instant::now() >= deadline {
            bail!("not both tunnels within {INITIATE_TIMEOUT:?}");
        }
        for (socket, initiator, up) in peers.iter_mut().filter(|(_, _, up)| !up) {
            while let Some((_, to, bytes)) = initiator.poll_transmit() {
                socket.send_to(&bytes, to)?;
            }
            if let Ok((n, _)) = socket.recv_from(&mut buf) {
                initiator.handle(Instant::now(), &buf[..n]);
            }
            initiator.handle_timeout(Instant::now());
            match initiator.poll_event() {
                Some(InitiatorEvent::Established { .. }) => *up = true,
                Some(InitiatorEvent::Failed(e)) => bail!("gate64's initiator failed: {e}"),
                _ => {}
            }
        }
    }
    Ok(started.elapsed())
}
