//! RADIUS accounting against Debian's FreeRADIUS (interop-accounting-revocation.md), running
//! in gate64's namespace on 127.0.0.1:1813 with `[[accounting.radius]]` pointing at it and
//! `interim_secs = 10`:
//!
//! - `netns_radius_accounting_for_a_strongswan_client_over_teredo`: strongSwan builds both
//!   tunnels over Debian's Miredo client; FreeRADIUS's detail file holds a Start for each
//!   tunnel (tied by Acct-Multi-Session-Id, User-Name the certificate subject), at least one
//!   Interim-Update and, once the client hangs up, a Stop for each whose octets match what
//!   the client counted on its child SAs (strongSwan's own counters), within header slack.
//! - `netns_radius_accounting_for_an_iphttps_client_and_the_server_down`: the same over
//!   `gate64 connect iphttps`; then FreeRADIUS stops, the client connects again and its
//!   traffic still flows, and the requests nobody acknowledged are counted
//!   (`gate64_radius_accounting_total{result="timeout"}`).

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::freeradius::{FreeRadius, Record};
use gate64_testkit::strongswan::{
    Charon, INFRASTRUCTURE, INTRANET, LabCerts, Tunnel, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Topology, wait_for};

use crate::common::{netns_test, path_str};
use crate::ipsec::{INITIATE_TIMEOUT, IphttpsIpsecLab, POOL6, SETTLE_TIMEOUT, TeredoIpsecLab};

const SECRET: &str = "gate64-lab-radius-secret";
/// The interim interval of the tests: `interim_secs`' minimum is 10.
const INTERIM_SECS: u64 = 10;
/// Long enough for an Interim-Update (10 s) on a loaded machine.
const RECORD_TIMEOUT: Duration = Duration::from_secs(40);

/// The `[accounting]` keys and server table of both tests.
fn accounting(topo: &Topology) -> Result<String> {
    let secret = topo
        .srv
        .write_file("radius.secret", &format!("{SECRET}\n"))?;
    // gate64 refuses a secret file its group or others may read.
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(format!(
        "interim_secs = {INTERIM_SECS}\nnas_identifier = \"gate64-lab\"\n\
         [[accounting.radius]]\nserver = \"127.0.0.1:1813\"\nsecret_file = \"{}\"\n",
        path_str(&secret)?
    ))
}

#[test]
#[ignore = "netns: needs root"]
fn netns_radius_accounting_for_a_strongswan_client_over_teredo() {
    netns_test(
        "netns_radius_accounting_for_a_strongswan_client_over_teredo",
        Topology::builder(),
        over_teredo,
    );
}

fn over_teredo(topo: &Topology) -> Result<()> {
    let radius = FreeRadius::start(&topo.srv, "127.0.0.1", SECRET)?;
    let keys = accounting(topo)?;
    let mut lab = TeredoIpsecLab::start_accounting(topo, None, "", None, &keys, |_| Ok(()))?;
    let charon = initiator(topo, &lab.certs)?;
    with_charon_logs(one_session(topo, &charon, &radius), &[&charon])?;
    lab.gate.ensure_running()
}

#[test]
#[ignore = "netns: needs root"]
fn netns_radius_accounting_for_an_iphttps_client_and_the_server_down() {
    netns_test(
        "netns_radius_accounting_for_an_iphttps_client_and_the_server_down",
        Topology::builder(),
        over_iphttps_then_down,
    );
}

fn over_iphttps_then_down(topo: &Topology) -> Result<()> {
    let mut radius = FreeRadius::start(&topo.srv, "127.0.0.1", SECRET)?;
    let lab = IphttpsIpsecLab::start(topo, &accounting(topo)?)?;
    let (mut gate, certs) = (lab.gate, lab.certs);
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    let charon = initiator(topo, &certs)?;
    let mut scenario = || -> Result<()> {
        one_session(topo, &charon, &radius)?;
        // The server goes down: clients are served on, what cannot be sent is counted.
        radius.stop();
        build_and_ping(topo, &charon)?;
        hang_up(&charon)?;
        let timeouts = wait_for(Duration::from_secs(60), || {
            let m = topo.metrics().ok()?;
            let n = m.sum("gate64_radius_accounting_total", &[("result", "timeout")]);
            (n >= 4.0).then_some(n)
        });
        ensure!(
            timeouts.is_some(),
            "with the server down, the Starts and Stops of the second session are not counted \
             as timeouts:\n{}",
            topo.metrics_text().unwrap_or_default()
        );
        Ok(())
    };
    with_charon_logs(scenario(), &[&charon])?;
    gate.ensure_running()
}

pub(crate) fn initiator<'a>(topo: &'a Topology, certs: &LabCerts) -> Result<Charon<'a>> {
    let infrastructure_ts = format!("{CORP_HOST}/128");
    let tunnels = vec![
        Tunnel::new(INFRASTRUCTURE, &[&infrastructure_ts]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ];
    let charon = TeredoIpsecLab::initiator(topo, certs.initiator(), tunnels)?;
    charon.load_all()?;
    Ok(charon)
}

pub(crate) fn build_and_ping(topo: &Topology, charon: &Charon<'_>) -> Result<()> {
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        charon.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
    }
    charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
    topo.ping6(&topo.cli, CORP_HOST, 1)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping the corporate host through the infrastructure tunnel")?;
    Ok(())
}

fn hang_up(charon: &Charon<'_>) -> Result<()> {
    for tunnel in [INTRANET, INFRASTRUCTURE] {
        charon.terminate(tunnel, SETTLE_TIMEOUT)?;
    }
    Ok(())
}

fn of<'r>(records: &'r [Record], status: &str) -> Vec<&'r Record> {
    records
        .iter()
        .filter(|r| r.get("Acct-Status-Type").is_some_and(|s| s == status))
        .collect()
}

/// `Acct-{Input,Output}-Octets` with their Gigawords.
fn octets(r: &Record, way: &str) -> u64 {
    let get = |name: String| {
        r.get(&name)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (get(format!("Acct-{way}-Gigawords")) << 32) + get(format!("Acct-{way}-Octets"))
}

/// How far, per packet, the octets gate64 reports may be from what the client counted: both
/// count inner IP packets, this leaves room for a header counted by one side and not the
/// other (and is less than the ESP-in-UDP overhead, which neither counts).
const HEADER_SLACK: u64 = 8;

/// Inner bytes and packets the client itself counted, summed over its child SAs
/// (strongSwan's `swanctl --list-sas`).
#[derive(Debug, Default)]
struct ClientCounts {
    bytes_in: u64,
    packets_in: u64,
    bytes_out: u64,
    packets_out: u64,
}

fn client_counts(charon: &Charon<'_>) -> Result<ClientCounts> {
    let mut c = ClientCounts::default();
    for child in charon.list_sas()?.iter().flat_map(|sa| &sa.children) {
        c.bytes_in += child.bytes_in;
        c.packets_in += child.packets_in;
        c.bytes_out += child.bytes_out;
        c.packets_out += child.packets_out;
    }
    Ok(c)
}

/// One client session: both tunnels up, traffic, an Interim-Update, the hang-up; the Stops'
/// octets are checked against what the client counted, outside gate64.
fn one_session(topo: &Topology, charon: &Charon<'_>, radius: &FreeRadius) -> Result<()> {
    build_and_ping(topo, charon)?;
    let interim = wait_for(RECORD_TIMEOUT, || {
        let records = radius.records().ok()?;
        (!of(&records, "Interim-Update").is_empty()).then_some(())
    });
    ensure!(
        interim.is_some(),
        "no Interim-Update within {RECORD_TIMEOUT:?}; records: {:?}\n{}",
        radius.records(),
        radius.log()
    );
    // What the client counted through its child SAs, just before it hangs up: no traffic
    // crosses the tunnels in between.
    let observed = client_counts(charon)?;
    hang_up(charon)?;
    let records = wait_for(RECORD_TIMEOUT, || {
        let records = radius.records().ok()?;
        (of(&records, "Stop").len() >= 2).then_some(records)
    })
    .with_context(|| {
        format!(
            "no two Stops; records: {:?}\n{}",
            radius.records(),
            radius.log()
        )
    })?;
    let (starts, stops) = (of(&records, "Start"), of(&records, "Stop"));
    ensure!(starts.len() == 2 && stops.len() == 2, "{records:#?}");
    let multi = &starts[0]["Acct-Multi-Session-Id"];
    for r in starts.iter().chain(&stops) {
        ensure!(
            r["User-Name"] == "CN=client.gate64.lab"
                && r["NAS-Identifier"] == "gate64-lab"
                && r["Acct-Multi-Session-Id"] == *multi
                && r.get("Framed-IPv6-Address")
                    .is_some_and(|a| a.starts_with("fd00:c1::"))
                && r.contains_key("Calling-Station-Id"),
            "a record lacks the client's identity, session or addresses: {r:#?}"
        );
    }
    let mut ids: Vec<&str> = stops
        .iter()
        .map(|r| r["Acct-Session-Id"].as_str())
        .collect();
    ids.sort_unstable();
    ensure!(
        ids[0].ends_with("-infrastructure") && ids[1].ends_with("-intranet"),
        "one accounting session per tunnel: {ids:?}"
    );
    ensure!(
        stops
            .iter()
            .all(|r| r["Acct-Terminate-Cause"] == "User-Request"),
        "{stops:#?}"
    );
    // Input is what the client sent, Output what it received.
    for (way, (bytes, packets)) in [
        ("Input", (observed.bytes_out, observed.packets_out)),
        ("Output", (observed.bytes_in, observed.packets_in)),
    ] {
        let radius_octets: u64 = stops.iter().map(|r| octets(r, way)).sum();
        let slack = packets * HEADER_SLACK;
        println!(
            "Acct-{way}-Octets of the Stops: {radius_octets}; the client counted {bytes} bytes \
             in {packets} packets"
        );
        ensure!(
            bytes > 0 && radius_octets.abs_diff(bytes) <= slack,
            "Acct-{way}-Octets of the Stops ({radius_octets}) differ from the {bytes} bytes \
             in {packets} packets charon counted on the client's child SAs by more than \
             {slack}"
        );
    }
    let m = topo.metrics()?;
    let acked = m.sum("gate64_radius_accounting_total", &[("result", "acked")]);
    ensure!(acked >= 5.0, "acked requests: {acked}");
    println!("FreeRADIUS detail records: {records:#?}");
    Ok(())
}
