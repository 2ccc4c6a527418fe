//! Quick Crash Detection (RFC 6290) between `gate64 connect` and `gate64 serve`.
//!
//! - `netns_ipsec_qcd_recovers_after_a_restart`: gate64 with `[ipsec] qcd_secret_file`;
//!   `gate64 connect teredo` builds both tunnels and pings through them. gate64 is SIGKILLed
//!   and started again with the same configuration (same secret, no IKE state). The client,
//!   still pinging, hears nothing back, sends a liveness check; the restarted gate64 answers
//!   it with INVALID_IKE_SPI and the token, and the client negotiates again at once instead
//!   of waiting for its check's retransmissions to run out (about 30 s). The test checks
//!   that it recovered that way (the client's log line, gate64's
//!   `gate64_ike_qcd_total{result="sent"}`) and prints how long the tunnels were down.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::LabCerts;
use gate64_testkit::{CORP_HOST, Gate64Options, Topology, wait_for};

use crate::common::{gate64_lines, ipsec_keys, netns_test, path_str, wait_routes};
use crate::ipsec_connect::{ESTABLISH_TIMEOUT, GATE64_ADDRESS6, IFNAME, spawn_client};

/// What the client logs when the responder proved it lost the IKE SA.
const QCD_LINE: &str = "the responder lost its IKE SA";
/// The client's liveness check timeout (its retransmissions) plus its check interval: a
/// recovery without QCD takes at least this long.
const WITHOUT_QCD: Duration = Duration::from_secs(40);

#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_qcd_recovers_after_a_restart() {
    netns_test(
        "netns_ipsec_qcd_recovers_after_a_restart",
        Topology::builder(),
        qcd_recovers_after_a_restart,
    );
}

fn both_tunnels_up(topo: &Topology) -> Option<()> {
    let m = topo.metrics().ok()?;
    let both = m.sum("gate64_ipsec_qmsa", &[]) == 2.0 && m.sum("gate64_ipsec_mmsa", &[]) == 2.0;
    both.then_some(())
}

fn qcd_recovers_after_a_restart(topo: &Topology) -> Result<()> {
    let ike = LabCerts::generate(
        &topo.srv,
        &topo.srv.dir().join("ike-certs"),
        IpAddr::V6(GATE64_ADDRESS6),
    )?;
    let secret = topo
        .srv
        .write_file("qcd.secret", &format!("{}\n", "5a".repeat(32)))?;
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let infrastructure_ts = format!("{CORP_HOST}/128");
    let opts = Gate64Options {
        without_ipsec: false,
        extra: ipsec_keys(
            &ike,
            &format!("qcd_secret_file = \"{}\"\n", path_str(&secret)?),
        )?,
        ..Gate64Options::default()
    };
    let toml = opts.config_toml();
    let mut gate = topo.start_gate64_with(&toml)?;
    let mut client = spawn_client(
        topo,
        &ike,
        GATE64_ADDRESS6,
        &infrastructure_ts,
        "2001:db8:100::/48",
        3600,
    )?;
    let up = wait_for(ESTABLISH_TIMEOUT, || both_tunnels_up(topo));
    client.ensure_running()?;
    ensure!(
        up.is_some(),
        "the tunnels did not come up within {ESTABLISH_TIMEOUT:?}\n{}",
        gate64_lines(&topo.metrics()?)
    );
    // gate64 counts the SAs when it sends its last IKE_AUTH answer; the client installs its
    // routes only after reading that answer.
    wait_routes(
        topo,
        &mut client,
        IFNAME,
        &[&format!("{CORP_HOST} "), "2001:db8:100::/48"],
    )?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping through the tunnel before the restart")?;

    // Traffic keeps flowing from the client while gate64 is away.
    let ping = topo.cli.spawn(
        "ping-during-restart",
        &["ping", "-6", "-i", "0.2", &CORP_HOST.to_string()],
    )?;
    let killed = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-KILL", &gate.pid().to_string()])
        .output()
        .context("kill -KILL gate64")?;
    ensure!(kill.status.success(), "kill -KILL: {kill:?}");
    ensure!(
        gate.wait_timeout(Duration::from_secs(5)).is_some(),
        "gate64 did not die"
    );
    let mut gate = topo.start_gate64_with(&toml)?;
    let recovered = wait_for(WITHOUT_QCD, || {
        both_tunnels_up(topo)?;
        topo.ping6(&topo.cli, CORP_HOST, 1)
            .ok()
            .filter(|p| p.received == 1)
    });
    let gap = killed.elapsed();
    drop(ping);
    client.ensure_running()?;
    gate.ensure_running()?;
    let m = topo.metrics()?;
    ensure!(
        recovered.is_some(),
        "the client did not recover within {WITHOUT_QCD:?} of the restart\n{}\nclient log:\n{}",
        gate64_lines(&m),
        client.log()
    );
    let sent = m.sum("gate64_ike_qcd_total", &[("result", "sent")]);
    ensure!(
        sent >= 1.0,
        "the restarted gate64 sent no QCD answer\n{}",
        gate64_lines(&m)
    );
    ensure!(
        client.log().contains(QCD_LINE),
        "the client did not log {QCD_LINE:?}:\n{}",
        client.log()
    );
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping through the tunnel after the restart")?;
    println!(
        "QCD: tunnels back {:.1} s after gate64 was SIGKILLed (restart included; without QCD \
         the client's liveness check alone takes about 30 s to time out); {sent} QCD answers",
        gap.as_secs_f64()
    );
    Ok(())
}
