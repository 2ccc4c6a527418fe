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

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{Charon, INFRASTRUCTURE, with_charon_logs};
use gate64_testkit::{Topology, wait_for};

use crate::common::{netns_test, path_str};
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

fn scenario(topo: &Topology) -> Result<()> {
    let secret = topo.srv.write_file("dae.secret", &format!("{SECRET}\n"))?;
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let keys = format!(
        "[accounting.dae]\nlisten = \"0.0.0.0:3799\"\n\
         [[accounting.dae.client]]\naddress = \"127.0.0.1\"\nsecret_file = \"{}\"\n",
        path_str(&secret)?
    );
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
