//! IP-HTTPS (and Teredo) with gate64's own Linux client, `gate64 connect`, in network
//! namespaces (teredo-iphttps.md §2; there is no open-source IP-HTTPS peer, §2.6).
//!
//! gate64 serves in `tsrv` with Teredo and `[iphttps]` on 198.51.100.1:443 (certificates from
//! `gate64 certs`, client prefix 2001:db8:1::/48); `gate64 connect` runs in `tcli`.
//!
//! - `netns_iphttps_connect_ping_iperf_without_ipsec`: link up, ping both ways, iperf3 both ways, metrics.
//! - `netns_iphttps_client_certificate_required_without_ipsec`: `client_ca` set: no client certificate, no
//!   link (and `tls_error` counted); with one, the link comes up.
//! - `netns_teredo_gate64_connect_without_ipsec`: `gate64 connect teredo` instead of Miredo.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use gate64_testkit::{
    CORP_HOST, Gate64Options, SERVER_V4, TEREDO_PREFIX, Topology, gate64_binary, wait_for,
    wait_until,
};

use crate::common::{
    CORP_PREFIX, client_address, connect_iphttps, connect_iphttps_routes, gate64_lines, handshakes,
    make_certs, netns_test, path_str, spawn_iphttps_client, start_gate64, start_gate64_with,
    wait_address,
};

/// Server restart plus the client's backoff (1 s, 2 s, 4 s, ...).
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a refused client is watched for a link that must not come.
const REFUSED_WATCH: Duration = Duration::from_secs(5);

#[test]
#[ignore = "netns: needs root"]
fn netns_iphttps_connect_ping_iperf_without_ipsec() {
    netns_test(
        "netns_iphttps_connect_ping_iperf_without_ipsec",
        Topology::builder(),
        connect_ping_iperf,
    );
}

fn connect_ping_iperf(topo: &Topology) -> Result<()> {
    let certs = make_certs(topo)?;
    let mut gate = start_gate64(topo, &certs, false, None)?;
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
    let _gate = start_gate64(topo, &certs, false, None)?;
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
fn netns_iphttps_client_certificate_required_without_ipsec() {
    netns_test(
        "netns_iphttps_client_certificate_required_without_ipsec",
        Topology::builder(),
        client_certificate_required,
    );
}

fn client_certificate_required(topo: &Topology) -> Result<()> {
    let certs = make_certs(topo)?;
    let _gate = start_gate64(topo, &certs, true, None)?;
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
fn netns_teredo_gate64_connect_without_ipsec() {
    netns_test(
        "netns_teredo_gate64_connect_without_ipsec",
        Topology::builder(),
        teredo_connect,
    );
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
            "--no-ipsec",
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

#[test]
#[ignore = "netns: needs root"]
fn netns_iphttps_nat64_by_name_without_ipsec() {
    netns_test(
        "netns_iphttps_nat64_by_name_without_ipsec",
        Topology::builder().corp_ipv4(true),
        iphttps_nat64_by_name,
    );
}

/// An IP-HTTPS client resolves an IPv4-only host through gate64's DNS64 and reaches it by
/// name (ping, iperf3 both ways) through NAT64: its packets reach the kernel from the TLS task,
/// which routes Pref64 back into the TUN (`nat64.route_prefix`), where a worker translates.
fn iphttps_nat64_by_name(topo: &Topology) -> Result<()> {
    use crate::nat64::{GATE_DNS, PREF64, V4ONLY, nat64_dns64_toml, start_corp_dns};
    let certs = make_certs(topo)?;
    let _dns = start_corp_dns(topo)?;
    let extra = nat64_dns64_toml(&topo.srv.dir().join("bindings.jsonl"));
    let mut gate = start_gate64_with(topo, &certs, false, None, &extra)?;
    let _iperf = topo.start_iperf_server()?;
    let (_client, _addr) = connect_iphttps_routes(topo, &certs, false, &[PREF64])?;
    topo.cli.set_resolver(GATE_DNS.parse()?)?;
    topo.ping6_host_all(&topo.cli, V4ONLY, 3)
        .context("ping6 the IPv4-only host by name over IP-HTTPS + NAT64")?;
    for reverse in [false, true] {
        let r = topo
            .iperf3_to(V4ONLY, 2, 1, reverse, None)
            .with_context(|| format!("iperf3 over IP-HTTPS + NAT64 (reverse: {reverse})"))?;
        ensure!(r.received_bytes > 0, "iperf3 moved nothing: {r:?}");
        println!(
            "iperf3 over IP-HTTPS + NAT64 by name, reverse={reverse}: {:.0} Mbit/s",
            r.received_bps / 1e6
        );
    }
    gate.ensure_running()?;
    let m = topo.metrics()?;
    for dir in ["v6_to_v4", "v4_to_v6"] {
        let n = m.sum("gate64_nat64_translations_total", &[("direction", dir)]);
        ensure!(n > 0.0, "no NAT64 translations {dir}\n{}", gate64_lines(&m));
    }
    Ok(())
}
