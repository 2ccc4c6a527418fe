//! RADIUS Dynamic Authorization (RFC 5176, `[accounting.dae]`) against Debian's radclient, in
//! gate64's namespace, with 127.0.0.1 the one listed client:
//!
//! - `netns_radius_dae_disconnect_and_coa_for_a_strongswan_client`: strongSwan builds both
//!   tunnels over Teredo; a Disconnect-Request with the client's User-Name and a wrong secret,
//!   one from an address not listed, and a valid one sent a second time (the same octets)
//!   leave it connected and are counted; radclient's Disconnect-Request with the right
//!   secret is ACKed and charon has no IKE SA left soon after
//!   (`gate64_ipsec_disconnects_total{reason="radius"}` rose); a CoA-Request with
//!   Session-Timeout = 5 is ACKed and ends the next session within a generous bound; a
//!   Filter-Id naming no `[[policy]]` is NAKed (Invalid-Request); a Disconnect-Request naming one tunnel by
//!   its Acct-Session-Id (read from the session log) ends that tunnel's IKE SA only.
//! - `netns_radius_dae_coa_filter_id_changes_a_live_sessions_policy`: the same client
//!   connected, two corporate hosts answer it (one through each tunnel) and iperf3 measures
//!   the path; a CoA-Request whose Filter-Id names a policy reaching one host is ACKed and
//!   the other stops answering (`gate64_drops_total{reason="policy"}`), one naming no
//!   `[[policy]]` is NAKed and leaves that policy in place, and one naming a policy of
//!   `rate_mbps = 2` shows `2 Mbit/s each way` in `gate64 status` and `/status.json` and
//!   holds iperf3 to it (`reason="rate_limit"`). Throughout, charon and gate64 keep the
//!   same IKE and ESP SPIs and no IKE SA is negotiated again.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{Charon, INFRASTRUCTURE, with_charon_logs};
use gate64_testkit::{CORP_HOST, METRICS_ADDR, Topology, wait_for};

use crate::common::{
    OTHER_CORP_HOST, assert_policy_cuts, gate64_ctl, netns_test, path_str, policy_drops,
    status_json,
};
use crate::ipsec::TeredoIpsecLab;
use crate::radius::{build_and_ping, initiator};

const SECRET: &str = "gate64-lab-dae-secret";
const USER: &str = "CN=client.gate64.lab";
/// How long a Disconnect may take to reach charon (the brief allows 2 s; a loaded machine
/// gets some slack).
const GONE_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends one Disconnect-Request built here (User-Name, Event-Timestamp `ts`, identifier 42)
/// from `src` to 127.0.0.1:3799 or `dst`, and prints the answer's code or `none`. Built the
/// same way from the same arguments, two sends are the same octets: a replay.
const SEND_PY: &str = r#"
import hashlib, socket, struct, sys
src, dst, secret, user, ts = sys.argv[1], sys.argv[2], sys.argv[3].encode(), sys.argv[4].encode(), int(sys.argv[5])
attrs = bytes([1, len(user) + 2]) + user + bytes([55, 6]) + struct.pack(">I", ts)
head = bytes([40, 42]) + struct.pack(">H", 20 + len(attrs))
auth = hashlib.md5(head + bytes(16) + attrs + secret).digest()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((src, 0))
s.settimeout(1.5)
host, port = dst.rsplit(":", 1)
s.sendto(head + auth + attrs, (host, int(port)))
try:
    print(s.recv(4096)[0])
except socket.timeout:
    print("none")
"#;

#[test]
#[ignore = "netns: needs root"]
fn netns_radius_dae_disconnect_and_coa_for_a_strongswan_client() {
    netns_test(
        "netns_radius_dae_disconnect_and_coa_for_a_strongswan_client",
        Topology::builder(),
        scenario,
    );
}

/// `[accounting.dae]` with 127.0.0.1 the one client, its secret in a file.
fn dae_keys(topo: &Topology) -> Result<String> {
    let secret = topo.srv.write_file("dae.secret", &format!("{SECRET}\n"))?;
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(format!(
        "[accounting.dae]\nlisten = \"0.0.0.0:3799\"\n\
         [[accounting.dae.client]]\naddress = \"127.0.0.1\"\nsecret_file = \"{}\"\n",
        path_str(&secret)?
    ))
}

fn scenario(topo: &Topology) -> Result<()> {
    let keys = dae_keys(topo)?;
    let mut lab = TeredoIpsecLab::start_accounting(topo, None, "", None, &keys, |_| Ok(()))?;
    let charon = initiator(topo, &lab.certs)?;
    with_charon_logs(steps(topo, &charon), &[&charon])?;
    lab.gate.ensure_running()
}

fn steps(topo: &Topology, charon: &Charon<'_>) -> Result<()> {
    let script = topo.srv.write_file("dae_send.py", SEND_PY)?;
    let script = path_str(&script)?.to_owned();
    let send = |src: &str, dst: &str, secret: &str, ts: u64| -> Result<String> {
        let out =
            topo.srv
                .exec_ok(&["python3", &script, src, dst, secret, USER, &ts.to_string()])?;
        Ok(out.trim().to_owned())
    };
    let dae = |result: &str| -> f64 {
        topo.metrics()
            .map(|m| m.sum("gate64_radius_dae_requests_total", &[("result", result)]))
            .unwrap_or(-1.0)
    };
    let disconnects = |reason: &str| -> f64 {
        topo.metrics()
            .map(|m| m.sum("gate64_ipsec_disconnects_total", &[("reason", reason)]))
            .unwrap_or(-1.0)
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();

    build_and_ping(topo, charon)?;
    // Refused without an answer: another secret, an address not listed.
    let wrong = radclient(
        topo,
        "disconnect",
        &format!("User-Name = \"{USER}\""),
        "not-it",
    )?;
    ensure!(!wrong.contains("Received"), "{wrong}");
    ensure!(
        send("192.0.2.1", "192.0.2.1:3799", SECRET, now)? == "none",
        "an unlisted address was answered"
    );
    ensure!(dae("bad_authenticator") >= 1.0 && dae("unknown_client") >= 1.0);
    ensure!(
        charon.list_sas()?.len() == 2,
        "a refused request ended a tunnel"
    );

    // radclient's Disconnect-Request ends both tunnels.
    let before = disconnects("radius");
    let out = radclient(
        topo,
        "disconnect",
        &format!("User-Name = \"{USER}\""),
        SECRET,
    )?;
    ensure!(out.contains("Received Disconnect-ACK"), "radclient: {out}");
    wait_for(GONE_TIMEOUT, || {
        charon.list_sas().ok().filter(|s| s.is_empty()).map(|_| ())
    })
    .context("charon still has IKE SAs after the Disconnect-ACK")?;
    ensure!(
        disconnects("radius") >= before + 2.0,
        "reason=radius did not rise by the two IKE SAs:\n{}",
        topo.metrics_text().unwrap_or_default()
    );

    // A request sent twice: the first ends the session, the second, after the client
    // connected again, has no effect.
    build_and_ping(topo, charon)?;
    ensure!(send("127.0.0.1", "127.0.0.1:3799", SECRET, now)? == "41");
    wait_for(GONE_TIMEOUT, || {
        charon.list_sas().ok().filter(|s| s.is_empty()).map(|_| ())
    })
    .context("the first send did not end the session")?;
    build_and_ping(topo, charon)?;
    ensure!(send("127.0.0.1", "127.0.0.1:3799", SECRET, now)? == "none");
    std::thread::sleep(Duration::from_secs(2));
    ensure!(charon.list_sas()?.len() == 2, "a replay ended the session");
    ensure!(dae("replay") >= 1.0);

    // CoA: Session-Timeout = 5 ends the session some seconds later.
    let before = disconnects("session_timeout");
    let out = radclient(
        topo,
        "coa",
        &format!("User-Name = \"{USER}\"\nSession-Timeout = 5"),
        SECRET,
    )?;
    ensure!(out.contains("Received CoA-ACK"), "radclient: {out}");
    ensure!(
        charon.list_sas()?.len() == 2,
        "the CoA ended the session at once"
    );
    wait_for(Duration::from_secs(40), || {
        charon.list_sas().ok().filter(|s| s.is_empty()).map(|_| ())
    })
    .context("the session outlived its Session-Timeout")?;
    ensure!(disconnects("session_timeout") >= before + 2.0);
    // A Filter-Id that names no [[policy]] is refused, never ACKed.
    let out = radclient(
        topo,
        "coa",
        &format!("User-Name = \"{USER}\"\nFilter-Id = \"web-only\""),
        SECRET,
    )?;
    ensure!(
        out.contains("Received CoA-NAK") && out.contains("Invalid-Request"),
        "radclient: {out}"
    );

    // One tunnel by Acct-Session-Id, as accounting names it: the other stays. The session
    // still up is the one the log shows connected and not disconnected; the log is written
    // by a thread of its own, so first every earlier session's end must be in it.
    let log = crate::ipsec::session_log(topo);
    let open_session = || -> Option<String> {
        let text = std::fs::read_to_string(&log).ok()?;
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let ended = |id: &serde_json::Value| {
            lines
                .iter()
                .any(|v| v["event"] == "disconnect" && v["session"] == *id)
        };
        lines
            .iter()
            .rfind(|v| v["event"] == "connect" && !ended(&v["session"]))
            .and_then(|v| v["session"].as_str().map(str::to_owned))
    };
    wait_for(GONE_TIMEOUT, || open_session().is_none().then_some(()))
        .context("the session log does not show the earlier sessions' ends")?;
    build_and_ping(topo, charon)?;
    let session = wait_for(GONE_TIMEOUT, open_session)
        .context("no connect line of the new session in the session log")?;
    let out = radclient(
        topo,
        "disconnect",
        &format!("Acct-Session-Id = \"{session}-intranet\""),
        SECRET,
    )?;
    ensure!(out.contains("Received Disconnect-ACK"), "radclient: {out}");
    let left = wait_for(GONE_TIMEOUT, || {
        let sas = charon.list_sas().ok()?;
        (sas.len() == 1).then_some(sas)
    })
    .context("the intranet tunnel's IKE SA did not end alone")?;
    ensure!(left[0].name == INFRASTRUCTURE, "{left:?}");
    Ok(())
}

/// `radclient -x 127.0.0.1:3799 KIND SECRET` in gate64's namespace with `attrs` on its
/// stdin; its output (one try, no retransmission).
fn radclient(topo: &Topology, kind: &str, attrs: &str, secret: &str) -> Result<String> {
    let cmd =
        format!("printf '%s\\n' '{attrs}' | radclient -r 1 -t 2 -x 127.0.0.1:3799 {kind} {secret}");
    let out = topo.srv.exec(&["sh", "-c", &cmd])?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The rate of the `slow` policy, Mbit/s.
const SLOW_MBPS: f64 = 2.0;
/// `one-host` reaches the corporate host of the infrastructure tunnel only; `slow` reaches
/// the whole corporate /48 at `SLOW_MBPS` each way.
const POLICIES: &str = "[[policy]]\nname = \"one-host\"\nprefixes = [\"2001:db8:100:1::2/128\"]\n\
     [[policy]]\nname = \"slow\"\nprefixes = [\"2001:db8:100::/48\"]\nrate_mbps = 2\n";
/// iperf3's run, seconds.
const IPERF_SECS: u32 = 3;

#[test]
#[ignore = "netns: needs root"]
fn netns_radius_dae_coa_filter_id_changes_a_live_sessions_policy() {
    netns_test(
        "netns_radius_dae_coa_filter_id_changes_a_live_sessions_policy",
        Topology::builder(),
        coa_policy_scenario,
    );
}

fn coa_policy_scenario(topo: &Topology) -> Result<()> {
    let keys = dae_keys(topo)? + POLICIES;
    let mut lab = TeredoIpsecLab::start_accounting(topo, None, "", None, &keys, |_| Ok(()))?;
    topo.corp
        .addr_add("vsrv", &format!("{OTHER_CORP_HOST}/64"))?;
    let _iperf = topo.start_iperf_server()?;
    let charon = initiator(topo, &lab.certs)?;
    with_charon_logs(coa_policy_steps(topo, &charon), &[&charon])?;
    lab.gate.ensure_running()
}

/// The SAs as both ends list them: charon's IKE SAs (name, both IKE SPIs, each child SA's
/// SPIs) and gate64's child SAs (IKE SPI, SPIs in and out), sorted.
type Spis = (
    Vec<(String, (u64, u64), Vec<(u32, u32)>)>,
    Vec<(String, u64, u64)>,
);

fn spis(topo: &Topology, charon: &Charon<'_>) -> Result<Spis> {
    let mut client: Vec<_> = charon
        .list_sas()?
        .into_iter()
        .map(|sa| {
            let children = sa.children.iter().map(|c| (c.spi_in, c.spi_out)).collect();
            (sa.name, sa.spis, children)
        })
        .collect();
    client.sort();
    let doc = status_json(topo)?;
    let mut gate: Vec<(String, u64, u64)> = doc["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["sas"].as_array().into_iter().flatten())
        .map(|sa| {
            (
                sa["ike_spi_hex"].as_str().unwrap_or_default().to_owned(),
                sa["spi_in"].as_u64().unwrap_or_default(),
                sa["spi_out"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    gate.sort();
    ensure!(
        client.len() == 2 && gate.len() == 2,
        "two IKE SAs with a child SA each: {client:?} {gate:?}"
    );
    Ok((client, gate))
}

/// Each child SA's `field` in `gate64 status --json`.
fn status_field(topo: &Topology, field: &str) -> Result<Vec<serde_json::Value>> {
    let doc = status_json(topo)?;
    Ok(doc["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["sas"].as_array().into_iter().flatten())
        .map(|sa| sa[field].clone())
        .collect())
}

fn coa_policy_steps(topo: &Topology, charon: &Charon<'_>) -> Result<()> {
    let drops = |reason: &str| -> f64 {
        topo.metrics()
            .map(|m| m.sum("gate64_drops_total", &[("reason", reason)]))
            .unwrap_or(-1.0)
    };
    let negotiated = || -> f64 {
        topo.metrics()
            .map(|m| m.sum("gate64_ike_negotiations_total", &[("result", "ok")]))
            .unwrap_or(-1.0)
    };
    let coa = |filter_id: &str| -> Result<String> {
        radclient(
            topo,
            "coa",
            &format!("User-Name = \"{USER}\"\nFilter-Id = \"{filter_id}\""),
            SECRET,
        )
    };
    let other_answers = || -> Result<bool> {
        let out = topo
            .cli
            .exec(&["ping", "-6", "-c", "2", "-W", "1", OTHER_CORP_HOST])?;
        Ok(out.status.success())
    };

    build_and_ping(topo, charon)?;
    topo.ping6_host_all(&topo.cli, OTHER_CORP_HOST, 3)
        .context("before any CoA, the host of the intranet tunnel answers")?;
    ensure!(
        status_field(topo, "policy")?.iter().all(|v| v.is_null())
            && status_field(topo, "limit")?.iter().all(|v| v.is_null()),
        "no policy before the CoA: {}",
        status_json(topo)?
    );
    let sas = spis(topo, charon)?;
    let ike_ok = negotiated();
    ensure!(ike_ok >= 2.0, "the two IKE SAs are not counted: {ike_ok}");
    let before = topo.iperf3_to(&CORP_HOST.to_string(), IPERF_SECS, 1, false, None)?;

    // Filter-Id = one-host: the intranet tunnel's other host is cut off at once.
    let drops_before = policy_drops(topo)?;
    let out = coa("one-host")?;
    ensure!(out.contains("Received CoA-ACK"), "radclient: {out}");
    println!("radclient coa Filter-Id = \"one-host\":\n{out}");
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("one-host still reaches the corporate host")?;
    assert_policy_cuts(topo, "one-host", drops_before)?;
    ensure!(
        status_field(topo, "policy")?
            .iter()
            .all(|v| v == "one-host"),
        "status --json: {}",
        status_json(topo)?
    );

    // A Filter-Id that names no [[policy]]: NAKed, and one-host stays.
    let out = coa("web-only")?;
    ensure!(
        out.contains("Received CoA-NAK") && out.contains("Invalid-Request"),
        "radclient: {out}"
    );
    println!("radclient coa Filter-Id = \"web-only\":\n{out}");
    ensure!(
        status_field(topo, "policy")?
            .iter()
            .all(|v| v == "one-host"),
        "the NAKed CoA changed the policy: {}",
        status_json(topo)?
    );
    topo.ping6_all(&topo.cli, CORP_HOST, 2)?;
    ensure!(
        !other_answers()?,
        "the NAKed CoA lifted one-host: {OTHER_CORP_HOST} answered"
    );

    // Filter-Id = slow: both hosts again, at 2 Mbit/s each way.
    let rate_drops = drops("rate_limit");
    let out = coa("slow")?;
    ensure!(out.contains("Received CoA-ACK"), "radclient: {out}");
    let text = gate64_ctl(topo, &["status"])?;
    println!("gate64 status after Filter-Id = \"slow\":\n{text}");
    ensure!(
        text.contains("policy slow, limit 2 Mbit/s each way"),
        "gate64 status:\n{text}"
    );
    ensure!(
        status_field(topo, "limit")?
            .iter()
            .all(|v| v == "2 Mbit/s each way"),
        "status --json: {}",
        status_json(topo)?
    );
    // The /status page's data (rebuilt every 2 s while it is read) shows them too.
    let json_url = format!("http://{METRICS_ADDR}/status.json");
    wait_for(Duration::from_secs(10), || {
        let page = topo.srv.exec_ok(&["curl", "-s", &json_url]).ok()?;
        let page: serde_json::Value = serde_json::from_str(&page).ok()?;
        let row = &page["clients"][0];
        (row["policy"] == "slow" && row["limit"] == "2 Mbit/s each way").then_some(())
    })
    .context("/status.json never showed the slow policy and its limit")?;
    topo.ping6_host_all(&topo.cli, OTHER_CORP_HOST, 2)
        .context("slow reaches the whole corporate /48")?;
    let after = topo.iperf3_to(&CORP_HOST.to_string(), IPERF_SECS, 1, false, None)?;
    let (before_mbps, after_mbps) = (before.received_bps / 1e6, after.received_bps / 1e6);
    println!(
        "iperf3 to {CORP_HOST}: {before_mbps:.1} Mbit/s before, {after_mbps:.2} Mbit/s under \
         rate_mbps = {SLOW_MBPS}"
    );
    ensure!(
        drops("rate_limit") > rate_drops,
        "iperf3 ran under a 2 Mbit/s policy and nothing was dropped as rate_limit:\n{}",
        topo.metrics_text().unwrap_or_default()
    );
    // A gross check only (timing): well below the path's own rate.
    if before_mbps > 10.0 * SLOW_MBPS {
        ensure!(
            after_mbps < 3.0 * SLOW_MBPS,
            "{after_mbps:.2} Mbit/s under a {SLOW_MBPS} Mbit/s limit"
        );
    } else {
        ensure!(
            after_mbps < before_mbps,
            "{after_mbps:.2} Mbit/s under the limit, {before_mbps:.2} without"
        );
    }

    // Nothing was renegotiated: the same SPIs at both ends, no new IKE SA.
    ensure!(
        spis(topo, charon)? == sas,
        "the SAs changed across the CoAs: {sas:?}"
    );
    ensure!(
        negotiated() == ike_ok,
        "an IKE SA was negotiated during the CoAs"
    );
    Ok(())
}
