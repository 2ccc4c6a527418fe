//! `gate64 bench load`, the capacity harness's load generator, at small scale
//! against the real daemon: every emulated client comes up with its transport and both IPsec
//! tunnels (gate64 and the status file count two IKE SAs and two child SAs per client), and
//! kernel sockets bound to the inner addresses of the ADDRESSES file reach a corporate host
//! through each tunnel.
//!
//! - `netns_bench_load_teredo`: Teredo clients only.
//! - `netns_bench_load_mix`: 30% of the clients on IP-HTTPS, held idle past gate64's
//!   liveness checks (`ipsec.dpd_secs`, 10 s here): gate64 still counts every SA afterwards (the
//!   clients answer the checks, and the Teredo ones the relay's bubbles), and the flows
//!   still go through.
//! - `netns_bench_load_scale`: `GATE64_LOAD_CLIENTS` clients (default 1,000; 70% Teredo,
//!   30% IP-HTTPS unless `GATE64_LOAD_IPHTTPS_SHARE` says otherwise), printing how many clients per second come up and the generator's memory
//!   per client. Its figures are printed, never asserted.

use std::net::{Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use gate64_testkit::{
    CLIENT_GW_V4, CORP_HOST, Gate64Options, Process, SERVER_V4, Topology, gate64_binary, wait_for,
};

use crate::common::{
    env_count, env_or, gate64_lines, iphttps_section, netns_test, path_str, serve_iphttps,
    spawn_bench_load,
};

/// gate64's `corpnet.address6` in the lab configuration: its IKE endpoint.
const ENDPOINT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
/// A corporate host outside the infrastructure tunnel's selector (the intranet tunnel's).
const INTRANET_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 3);
/// The pool: room for 100,000 clients.
const POOL6: &str = "fd00:c1::/104";
const CORP_PREFIX: &str = "2001:db8:100::/48";
/// The clients' source addresses: hosts .129 to .254, added on the client link. gate64 sees
/// the clients of one address as one NAT's and paces its bubbles per address (and holds at
/// most 256 relay peers per address): the more addresses, the closer to the harness's /16.
const SOURCE_V4: &str = "198.51.100.128/25";
const SOURCES: std::ops::RangeInclusive<u8> = 129..=254;
/// Clients of the small tests.
const CLIENTS: usize = 50;
/// Clients of the scale test unless `GATE64_LOAD_CLIENTS` says otherwise.
const SCALE_CLIENTS: usize = 1_000;
const ECHO_PORT: u16 = 7007;
/// Every client up: qualification or TLS, then two IKE negotiations each, on two shared
/// cores: generous (plus [`UP_PER_CLIENT`] for each client).
const UP_TIMEOUT: Duration = Duration::from_secs(60);
/// The time each client adds to [`UP_TIMEOUT`] (a debug build of both sides, two cores).
const UP_PER_CLIENT: Duration = Duration::from_millis(50);
/// gate64's liveness check interval in these tests (`ipsec.dpd_secs`; the default is 30 s).
const DPD_SECS: u64 = 10;
/// Idle time past gate64's first liveness check ([`DPD_SECS`]) and the retransmissions a
/// silent client would have failed by (5 s apart).
const IDLE_HOLD: Duration = Duration::from_secs(DPD_SECS + 20);
/// How long gate64's SA gauges may lag behind the SAs the generator sees up.
const GAUGE_TIMEOUT: Duration = Duration::from_secs(20);
/// Inner addresses a flow is bound to.
const FLOWS: usize = 8;

#[test]
#[ignore = "netns: needs root"]
fn netns_bench_load_teredo() {
    netns_test("netns_bench_load_teredo", Topology::builder(), |topo| {
        bench_load(topo, CLIENTS, 0.0, Duration::ZERO)
    });
}

#[test]
#[ignore = "netns: needs root"]
fn netns_bench_load_mix() {
    netns_test("netns_bench_load_mix", Topology::builder(), |topo| {
        bench_load(topo, CLIENTS, 0.3, IDLE_HOLD)
    });
}

#[test]
#[ignore = "netns: needs root"]
fn netns_bench_load_scale() {
    let clients = env_count("GATE64_LOAD_CLIENTS", SCALE_CLIENTS);
    let share = env_or("GATE64_LOAD_IPHTTPS_SHARE", 0.3);
    netns_test("netns_bench_load_scale", Topology::builder(), |topo| {
        bench_load(topo, clients, share, Duration::ZERO)
    });
}

fn bench_load(topo: &Topology, clients: usize, iphttps_share: f64, hold: Duration) -> Result<()> {
    let certs = make_certs(topo)?;
    let mut gate = start_gate64(topo, &certs)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    topo.corp.addr_add("vsrv", &format!("{INTRANET_HOST}/64"))?;
    for host in SOURCES {
        topo.cli
            .addr_add("vsrv", &format!("198.51.100.{host}/24"))?;
    }
    let echo = [CORP_HOST, INTRANET_HOST]
        .map(|host| topo.corp.spawn_thread("udp-echo", move || udp_echo(host)));
    let spec = topo.cli.write_file(
        "load-spec.json",
        &spec_json(&certs, clients, iphttps_share)?,
    )?;
    let status = topo.cli.dir().join("load-status.json");
    let mut load = spawn_bench_load(&topo.cli, &spec, &status)?;
    let started = Instant::now();
    let timeout = UP_TIMEOUT + UP_PER_CLIENT * u32::try_from(clients)?;
    let up = wait_for(timeout, || {
        let s = std::fs::read_to_string(&status).ok()?;
        (field(&s, "ready")? == 1.0).then_some(s)
    });
    load.ensure_running()?;
    let last = std::fs::read_to_string(&status).unwrap_or_default();
    print_figures(&last, clients, started.elapsed());
    let s =
        up.with_context(|| format!("the generator was not ready within {timeout:?}: {last}"))?;
    let n = clients as f64;
    let want = 2.0 * n;
    let get = |k: &str| field(&s, k).unwrap_or(-1.0);
    ensure!(
        get("up") == n && get("failed") == 0.0,
        "not every client up: {s}"
    );
    ensure!(
        get("mmsa") == want && get("qmsa") == want,
        "the generator counts other than {want} IKE and child SAs: {s}"
    );
    let n_iphttps = (n * iphttps_share).round();
    ensure!(
        get("iphttps_up") == n_iphttps && get("teredo_up") == n - n_iphttps,
        "transports: {s}"
    );
    check_gate64_sas(topo, want)?;
    if !hold.is_zero() {
        std::thread::sleep(hold);
        load.ensure_running()?;
        check_gate64_sas(topo, want).with_context(|| format!("after {hold:?} idle"))?;
    }
    let addresses = read_addresses(&status, iphttps_share > 0.0)?;
    ensure!(
        addresses.len() == clients,
        "{} addresses listed for {clients} clients",
        addresses.len()
    );
    let flows: Vec<Ipv6Addr> = addresses
        .iter()
        .step_by((clients / FLOWS).max(1))
        .copied()
        .collect();
    let echoed = topo.cli.run_in(|| {
        flows
            .iter()
            .flat_map(|&inner| [CORP_HOST, INTRANET_HOST].map(|host| (inner, host)))
            .map(|(inner, host)| udp_round_trip(inner, host).map(|()| (inner, host)))
            .collect::<Vec<_>>()
    })?;
    for r in echoed {
        r?;
    }
    let s = std::fs::read_to_string(&status)?;
    ensure!(
        field(&s, "esp_errors") == Some(0.0),
        "the generator refused ESP: {s}"
    );
    check_one_neighbour(topo, clients)?;
    load.ensure_running()?;
    gate.ensure_running()?;
    drop(echo);
    Ok(())
}

/// Prints the generator's figures from its status `s`: clients up per second, its memory
/// and CPU per client started (printed, never asserted: the machine is shared).
fn print_figures(s: &str, clients: usize, waited: Duration) {
    let get = |k: &str| field(s, k).unwrap_or(-1.0);
    let (up, started) = (get("up"), get("started").max(1.0));
    let secs = match get("ready_seconds") {
        r if r > 0.0 => r,
        _ => get("elapsed_seconds"),
    };
    println!(
        "bench load: {up} of {clients} clients up ({} IP-HTTPS) in {secs:.1} s by the \
         generator's clock ({:.1} s waited): {:.1} clients/s; generator RSS {:.1} MiB, \
         {:.1} KiB and {:.1} ms CPU per client started",
        get("iphttps_up"),
        waited.as_secs_f64(),
        up / secs.max(0.001),
        get("rss_bytes") / (1 << 20) as f64,
        (get("rss_bytes") - get("rss_start_bytes")) / started / 1024.0,
        get("cpu_seconds") * 1000.0 / started,
    );
}

/// After IKE and traffic to every client, gate64's TUN has one IPv6 neighbour entry, its
/// routes' nominal next hop, not one per client address.
fn check_one_neighbour(topo: &Topology, clients: usize) -> Result<()> {
    let routes = topo.srv.ip(&["-6", "route", "show", "dev", "gate64"])?;
    ensure!(
        routes.contains(&format!("{POOL6} via fe80::1")),
        "the pool's route into the TUN has no next hop: {routes}"
    );
    let neighbours = topo
        .srv
        .ip(&["-6", "neigh", "show", "dev", "gate64", "nud", "all"])?;
    // Multicast entries (the kernel's own MLD reports to ff02::16) are not per client.
    let unicast: Vec<&str> = neighbours
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("ff"))
        .collect();
    ensure!(
        unicast.len() <= 1 && unicast.iter().all(|l| l.starts_with("fe80::1 ")),
        "{} unicast neighbour entries on the TUN after traffic to {clients} clients (one \
         expected, fe80::1): {neighbours}",
        unicast.len()
    );
    Ok(())
}

/// gate64 counts `want` IKE SAs and `want` child SAs (its gauges follow the SA database
/// within a moment: waited for).
fn check_gate64_sas(topo: &Topology, want: f64) -> Result<()> {
    let names = ["gate64_ipsec_mmsa", "gate64_ipsec_qmsa"];
    let counted = wait_for(GAUGE_TIMEOUT, || {
        let m = topo.metrics().ok()?;
        names.iter().all(|n| m.sum(n, &[]) == want).then_some(())
    });
    if counted.is_none() {
        let m = topo.metrics()?;
        let got: Vec<f64> = names.iter().map(|n| m.sum(n, &[])).collect();
        anyhow::bail!(
            "gate64 counts {got:?} (MMSA, QMSA), expected {want} each\n{}",
            gate64_lines(&m)
        );
    }
    Ok(())
}

/// `gate64 certs` for IP-HTTPS (198.51.100.1, `gate64.lab`) and IKE (the endpoint).
fn make_certs(topo: &Topology) -> Result<PathBuf> {
    let bin = gate64_binary()?;
    let dir = topo.srv.dir().join("certs");
    let (ip, endpoint) = (CLIENT_GW_V4.to_string(), ENDPOINT.to_string());
    let out = topo.srv.exec_ok(&[
        path_str(&bin)?,
        "certs",
        "--out",
        path_str(&dir)?,
        "--server-ip",
        &ip,
        "--server-ip",
        &endpoint,
        "--server-name",
        "gate64.lab",
    ])?;
    ensure!(dir.join("clients-ca.key").is_file(), "gate64 certs: {out}");
    Ok(dir)
}

/// `gate64 serve` with IPsec required, the pool and IP-HTTPS on 198.51.100.1:443.
fn start_gate64(topo: &Topology, certs: &Path) -> Result<Process> {
    let pem = |f: &str| path_str(&certs.join(f)).map(str::to_owned);
    let mut conf = Gate64Options {
        without_ipsec: false,
        log_level: "info".to_owned(),
        extra: format!(
            "[ipsec]\ncertificate = {:?}\nprivate_key = {:?}\nca = {:?}\npool6 = \"{POOL6}\"\n\
             endpoint = \"{ENDPOINT}\"\n\
             infrastructure_prefixes = [\"{CORP_HOST}/128\"]\ndpd_secs = {DPD_SECS}\n",
            pem("ipsec.pem")?,
            pem("ipsec.key")?,
            pem("clients-ca.pem")?,
        ),
        ..Gate64Options::default()
    }
    .config_toml();
    conf.push_str(&iphttps_section(certs)?);
    serve_iphttps(topo, "gate64-bench-load.toml", &conf)
}

fn spec_json(certs: &Path, clients: usize, iphttps_share: f64) -> Result<String> {
    let pem = |f: &str| path_str(&certs.join(f)).map(str::to_owned);
    Ok(format!(
        r#"{{ "clients": {clients}, "iphttps_share": {iphttps_share},
  "teredo_server": "{SERVER_V4}",
  "iphttps_url": "https://{CLIENT_GW_V4}:443/IPHTTPS", "iphttps_ca": {:?},
  "iphttps_server_name": "gate64.lab",
  "source_v4": "{SOURCE_V4}",
  "ipsec": {{ "endpoint": "{ENDPOINT}", "ca": {:?},
             "client_ca_cert": {:?}, "client_ca_key": {:?},
             "infrastructure_ts": ["{CORP_HOST}/128"], "intranet_ts": ["{CORP_PREFIX}"] }},
  "pool6": "{POOL6}",
  "corp_prefixes": ["{CORP_PREFIX}"],
  "tun": "load0",
  "connect_per_sec": 2000, "max_setups_in_flight": 128 }}"#,
        pem("ca.pem")?,
        pem("ca.pem")?,
        pem("clients-ca.pem")?,
        pem("clients-ca.key")?,
    ))
}

/// The inner addresses of the ADDRESSES file; with `mixed`, both transports must appear.
fn read_addresses(status: &Path, mixed: bool) -> Result<Vec<Ipv6Addr>> {
    let mut path = status.as_os_str().to_owned();
    path.push(".addresses");
    let text = std::fs::read_to_string(&path).context("the ADDRESSES file")?;
    let mut kinds = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let (addr, kind) = line
            .split_once(' ')
            .with_context(|| format!("ADDRESSES line {line:?}"))?;
        out.push(
            addr.parse()
                .with_context(|| format!("ADDRESSES line {line:?}"))?,
        );
        kinds.insert(kind.to_owned());
    }
    let want: &[&str] = if mixed {
        &["iphttps", "teredo"]
    } else {
        &["teredo"]
    };
    ensure!(
        kinds.iter().map(String::as_str).eq(want.iter().copied()),
        "transports listed: {kinds:?}"
    );
    Ok(out)
}

/// A number (or `true` as 1, `false` as 0) of the flat JSON object `s`.
pub(crate) fn field(s: &str, key: &str) -> Option<f64> {
    let at = s.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = s[at..].trim_start();
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    match rest[..end].trim() {
        "true" => Some(1.0),
        "false" => Some(0.0),
        v => v.parse().ok(),
    }
}

/// Echoes UDP datagrams on `[host]:ECHO_PORT` until the namespace goes.
pub(crate) fn udp_echo(host: Ipv6Addr) -> Result<()> {
    let sock = UdpSocket::bind(SocketAddr::from((host, ECHO_PORT)))?;
    let mut buf = [0u8; 2048];
    loop {
        let (n, from) = sock.recv_from(&mut buf)?;
        sock.send_to(&buf[..n], from)?;
    }
}

/// A datagram from `[inner]` (an AnyIP address of the pool) to the echo server on `host`
/// comes back, with retries for the first packets of a path.
fn udp_round_trip(inner: Ipv6Addr, host: Ipv6Addr) -> Result<()> {
    let sock = UdpSocket::bind(SocketAddr::from((inner, 0)))
        .with_context(|| format!("binding {inner}"))?;
    sock.set_read_timeout(Some(Duration::from_secs(1)))?;
    let msg = format!("from {inner} to {host}");
    let mut buf = [0u8; 2048];
    for _ in 0..5 {
        sock.send_to(msg.as_bytes(), SocketAddr::from((host, ECHO_PORT)))?;
        if let Ok((n, from)) = sock.recv_from(&mut buf)
            && from.ip() == host
            && &buf[..n] == msg.as_bytes()
        {
            return Ok(());
        }
    }
    anyhow::bail!("no echo from {host} for a datagram from {inner}")
}
