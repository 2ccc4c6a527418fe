//! IP-HTTPS (and Teredo) with gate64's own Linux client, `gate64 connect`, in network
//! namespaces (teredo-iphttps.md §2; there is no open-source IP-HTTPS peer, §2.6).
//!
//! gate64 serves in `tsrv` with Teredo and `[iphttps]` on 198.51.100.1:443 (certificates from
//! `gate64 certs`, client prefix 2001:db8:1::/48); `gate64 connect` runs in `tcli`.
//!
//! - `netns_iphttps_connect_ping_iperf`: link up, ping both ways, iperf3 both ways, metrics.
//! - `netns_iphttps_client_certificate_required`: `client_ca` set: no client certificate, no
//!   link (and `tls_error` counted); with one, the link comes up.
//! - `netns_teredo_gate64_connect`: `gate64 connect teredo` instead of Miredo.

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::{
    CLIENT_GW_V4, CORP_HOST, Gate64Options, Metrics, Process, SERVER_V4, TEREDO_PREFIX, Topology,
    gate64_binary, netns_or_skip, wait_for, wait_until,
};

/// The IP-HTTPS client prefix gate64 hands /64s from.
const IPHTTPS_PREFIX: &str = "2001:db8:1::/48";
/// The corporate prefix the clients route into their tunnel.
const CORP_PREFIX: &str = "2001:db8:100::/48";
/// Connect + TLS + RS/RA normally takes well under a second.
const LINK_TIMEOUT: Duration = Duration::from_secs(15);
/// Server restart plus the client's backoff (1 s, 2 s, 4 s, ...).
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a refused client is watched for a link that must not come.
const REFUSED_WATCH: Duration = Duration::from_secs(5);

#[test]
#[ignore = "netns: needs root"]
fn netns_iphttps_connect_ping_iperf() {
    if !netns_or_skip("netns_iphttps_connect_ping_iperf") {
        return;
    }
    let topo = Topology::builder()
        .build()
        .expect("building the lab topology");
    topo.check(connect_ping_iperf(&topo));
}

fn connect_ping_iperf(topo: &Topology) -> Result<()> {
    let certs = make_certs(topo)?;
    let mut gate = start_gate64(topo, &certs, false)?;
    let _iperf = topo.start_iperf_server()?;
    let (mut client, addr) = connect_iphttps(topo, &certs, false)?;

    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp over IP-HTTPS")?;
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> the client's IP-HTTPS address")?;
    let mut uploaded = 0;
    for reverse in [false, true] {
        let what = if reverse {
            "iperf3 -R over IP-HTTPS (tcorp -> client)"
        } else {
            "iperf3 over IP-HTTPS (client -> tcorp)"
        };
        let r = topo.iperf3(3, 1, reverse).context(what)?;
        ensure!(
            r.sent_bytes > 0 && r.received_bytes > 0,
            "{what}: no data: {r:?}"
        );
        if !reverse {
            uploaded = r.received_bytes;
        }
        println!("{what}: {:.0} Mbit/s", r.received_bps / 1e6);
    }
    gate.ensure_running()?;

    let m = topo.metrics()?;
    // The upload went through gate64 (TLS in, TUN out), not around it.
    let corp_tx = m
        .get(
            "gate64_bytes_total",
            &[("side", "corpnet"), ("direction", "tx")],
        )
        .unwrap_or(0.0);
    ensure!(
        corp_tx >= uploaded as f64,
        "gate64 wrote {corp_tx} bytes to the corporate side, iperf3 uploaded {uploaded}\n{}",
        gate64_lines(&m)
    );
    let clients = m.get("gate64_clients", &[("transport", "iphttps")]);
    ensure!(
        clients == Some(1.0),
        "gate64_clients{{transport=\"iphttps\"}} is {clients:?}, expected 1\n{}",
        gate64_lines(&m)
    );
    let ok = handshakes(&m, "ok");
    ensure!(
        ok >= 1.0,
        "gate64_tls_handshakes_total{{result=\"ok\"}} is {ok}\n{}",
        gate64_lines(&m)
    );

    // Restart the server: the client reconnects on its own (backoff from 1 s) and keeps its
    // TUN device; the first /64 of the pool, and so the same address, comes back.
    gate.stop();
    drop(gate);
    let t = Instant::now();
    let _gate = start_gate64(topo, &certs, false)?;
    let back = wait_until(RECONNECT_TIMEOUT, || {
        topo.ping6(&topo.cli, CORP_HOST, 1)
            .is_ok_and(|p| p.all_ok())
    });
    ensure!(
        back,
        "no ping through IP-HTTPS within {RECONNECT_TIMEOUT:?} of a gate64 restart; client \
         log:\n{}",
        client.log()
    );
    println!(
        "reconnected after a gate64 restart in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    client.ensure_running()?;
    ensure!(
        client_address(topo) == Some(addr),
        "address changed across the reconnect"
    );
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> client after the reconnect")?;
    Ok(())
}

#[test]
#[ignore = "netns: needs root"]
fn netns_iphttps_client_certificate_required() {
    if !netns_or_skip("netns_iphttps_client_certificate_required") {
        return;
    }
    let topo = Topology::builder()
        .build()
        .expect("building the lab topology");
    topo.check(client_certificate_required(&topo));
}

fn client_certificate_required(topo: &Topology) -> Result<()> {
    let certs = make_certs(topo)?;
    let _gate = start_gate64(topo, &certs, true)?;
    let before = handshakes(&topo.metrics()?, "tls_error");

    // Without a certificate: the server refuses the handshake, the client keeps retrying.
    let mut refused = spawn_iphttps_client(topo, &certs, false)?;
    let errors = wait_for(REFUSED_WATCH, || {
        let n = handshakes(&topo.metrics().ok()?, "tls_error");
        (n > before).then_some(n)
    });
    ensure!(
        errors.is_some(),
        "gate64_tls_handshakes_total{{result=\"tls_error\"}} did not rise above {before}; \
         client log:\n{}",
        refused.log()
    );
    std::thread::sleep(Duration::from_secs(1));
    ensure!(
        client_address(topo).is_none(),
        "a client without a certificate got a link: {}",
        topo.cli.ip(&["-6", "addr", "show", "dev", "gate64c"])?
    );
    refused.ensure_running()?;
    drop(refused);
    // The TUN device goes with the process.
    ensure!(
        wait_until(Duration::from_secs(5), || topo
            .cli
            .ip(&["link", "show", "gate64c"])
            .is_err()),
        "gate64c still exists after the client stopped"
    );

    // With the client certificate: link up, ping.
    let (_client, addr) = connect_iphttps(topo, &certs, true)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp over IP-HTTPS with a client certificate")?;
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> the client")?;
    let m = topo.metrics()?;
    ensure!(
        handshakes(&m, "ok") >= 1.0,
        "no successful handshake counted\n{}",
        gate64_lines(&m)
    );
    Ok(())
}

#[test]
#[ignore = "netns: needs root"]
fn netns_teredo_gate64_connect() {
    if !netns_or_skip("netns_teredo_gate64_connect") {
        return;
    }
    let topo = Topology::builder()
        .build()
        .expect("building the lab topology");
    topo.check(teredo_connect(&topo));
}

fn teredo_connect(topo: &Topology) -> Result<()> {
    let mut gate = topo.start_gate64(&Gate64Options::default())?;
    let bin = gate64_binary()?;
    let server = SERVER_V4.to_string();
    let mut client = topo.cli.spawn(
        "gate64-connect-teredo",
        &[
            path_str(&bin)?,
            "connect",
            "teredo",
            "--server",
            &server,
            "--route",
            CORP_PREFIX,
        ],
    )?;
    let t = Instant::now();
    let addr = wait_address(topo, &mut client, "gate64t", TEREDO_PREFIX, 32)?;
    println!(
        "gate64 connect teredo qualified as {addr} in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp over Teredo (gate64 connect)")?;
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> the client's Teredo address")?;
    gate.ensure_running()?;
    client.ensure_running()?;
    let m = topo.metrics()?;
    let clients = m.get("gate64_clients", &[("transport", "teredo")]);
    ensure!(
        clients == Some(1.0),
        "gate64_clients{{transport=\"teredo\"}} is {clients:?}\n{}",
        gate64_lines(&m)
    );
    Ok(())
}

/// `gate64 certs` output for the server's client-side address, in `tsrv`'s directory.
fn make_certs(topo: &Topology) -> Result<PathBuf> {
    let bin = gate64_binary()?;
    let dir = topo.srv.dir().join("certs");
    let ip = CLIENT_GW_V4.to_string();
    let out = topo.srv.exec_ok(&[
        path_str(&bin)?,
        "certs",
        "--out",
        path_str(&dir)?,
        "--server-ip",
        &ip,
        "--server-name",
        "gate64.lab.example",
    ])?;
    ensure!(dir.join("server.pem").is_file(), "gate64 certs: {out}");
    Ok(dir)
}

/// `gate64 serve` in `tsrv`: the standard lab configuration plus `[iphttps]` on
/// 198.51.100.1:443; with `client_ca`, clients need a certificate from the lab CA. Waits
/// (≤ 15 s) for /metrics and the TLS listener.
fn start_gate64(topo: &Topology, certs: &Path, client_ca: bool) -> Result<Process> {
    let bin = gate64_binary()?;
    let mut conf = Gate64Options::default().config_toml();
    conf.push_str(&format!(
        "\n[iphttps]\nenabled = true\nlisten = \"{CLIENT_GW_V4}:443\"\ncertificate = {:?}\n\
         private_key = {:?}\nprefix = \"{IPHTTPS_PREFIX}\"\n",
        path_str(&certs.join("server.pem"))?,
        path_str(&certs.join("server.key"))?,
    ));
    if client_ca {
        conf.push_str(&format!(
            "client_ca = {:?}\n",
            path_str(&certs.join("ca.pem"))?
        ));
    }
    let file = topo.srv.write_file("gate64-iphttps.toml", &conf)?;
    let mut gate = topo.srv.spawn(
        "gate64",
        &[path_str(&bin)?, "serve", "--config", path_str(&file)?],
    )?;
    let ready = wait_until(Duration::from_secs(15), || {
        gate.is_running()
            && topo
                .srv
                .exec_ok(&["ss", "-Hntl", "sport = :443"])
                .is_ok_and(|s| !s.trim().is_empty())
            && topo.metrics_text().is_ok()
    });
    gate.ensure_running()
        .with_context(|| format!("gate64 serve with\n{conf}"))?;
    ensure!(
        ready,
        "gate64 did not listen on {CLIENT_GW_V4}:443 and serve /metrics within 15 s; log:\n{}",
        gate.log()
    );
    Ok(gate)
}

fn spawn_iphttps_client(topo: &Topology, certs: &Path, with_cert: bool) -> Result<Process> {
    let bin = gate64_binary()?;
    let url = format!("https://{CLIENT_GW_V4}/IPHTTPS");
    let (ca, cert, key) = (
        certs.join("ca.pem"),
        certs.join("client.pem"),
        certs.join("client.key"),
    );
    let mut argv = vec![
        "env",
        "RUST_LOG=debug,rustls=info",
        path_str(&bin)?,
        "connect",
        "iphttps",
        "--server",
        &url,
        "--ca",
        path_str(&ca)?,
        "--route",
        CORP_PREFIX,
    ];
    if with_cert {
        argv.extend([
            "--client-cert",
            path_str(&cert)?,
            "--client-key",
            path_str(&key)?,
        ]);
    }
    topo.cli.spawn("gate64-connect-iphttps", &argv)
}

/// Starts `gate64 connect iphttps` in `tcli` and waits for its address.
fn connect_iphttps(topo: &Topology, certs: &Path, with_cert: bool) -> Result<(Process, Ipv6Addr)> {
    let mut client = spawn_iphttps_client(topo, certs, with_cert)?;
    let t = Instant::now();
    let prefix: Ipv6Addr = "2001:db8:1::".parse().expect("constant");
    let addr = wait_address(topo, &mut client, "gate64c", prefix, 48)?;
    println!(
        "gate64 connect iphttps: link up as {addr} in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    Ok((client, addr))
}

/// Polls `ip -6 addr show dev <ifname>` in `tcli` for a usable (not tentative) global address
/// within `prefix/len`, and for the route to the corporate prefix through the device.
fn wait_address(
    topo: &Topology,
    client: &mut Process,
    ifname: &str,
    prefix: Ipv6Addr,
    len: u32,
) -> Result<Ipv6Addr> {
    let found = wait_for(LINK_TIMEOUT, || {
        if !client.is_running() {
            return Some(None);
        }
        let routed = topo
            .cli
            .ip(&["-6", "route", "show", CORP_PREFIX])
            .is_ok_and(|r| r.contains(ifname));
        let addr = address_in(topo, ifname, prefix, len)?;
        routed.then_some(Some(addr))
    });
    match found {
        Some(Some(addr)) => Ok(addr),
        Some(None) => {
            client.ensure_running()?;
            unreachable!("ensure_running fails for an exited process")
        }
        None => bail!(
            "no {prefix}/{len} address on {ifname} within {LINK_TIMEOUT:?}; `ip -6 addr`: {}; \
             `ip -6 route`: {}; client log:\n{}",
            topo.cli
                .ip(&["-6", "addr"])
                .unwrap_or_else(|e| e.to_string()),
            topo.cli
                .ip(&["-6", "route"])
                .unwrap_or_else(|e| e.to_string()),
            client.log()
        ),
    }
}

fn client_address(topo: &Topology) -> Option<Ipv6Addr> {
    address_in(topo, "gate64c", "2001:db8:1::".parse().ok()?, 48)
}

fn address_in(topo: &Topology, ifname: &str, prefix: Ipv6Addr, len: u32) -> Option<Ipv6Addr> {
    let out = topo.cli.ip(&["-6", "addr", "show", "dev", ifname]).ok()?;
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    out.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("inet6 ") && !l.contains("tentative"))
        .filter_map(|l| l.split_whitespace().nth(1)?.split('/').next()?.parse().ok())
        .find(|a: &Ipv6Addr| u128::from(*a) & mask == u128::from(prefix) & mask)
}

fn handshakes(m: &Metrics, result: &str) -> f64 {
    m.sum("gate64_tls_handshakes_total", &[("result", result)])
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("non-UTF-8 path {}", p.display()))
}

/// All `gate64_*` samples, one per line, for failure messages.
fn gate64_lines(m: &Metrics) -> String {
    let lines: Vec<String> = m
        .samples()
        .iter()
        .filter(|s| s.name.starts_with("gate64_"))
        .map(ToString::to_string)
        .collect();
    format!("gate64 metrics:\n{}", lines.join("\n"))
}
