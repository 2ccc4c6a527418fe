//! OCSP for client certificates against `gate64 serve` in namespaces, with Debian's `openssl
//! ocsp` as the responder and a CA kept by `openssl ca`.
//!
//! - `netns_ike_ocsp_refuses_revoked_and_soft_or_require_decide_without_an_answer`: the CA
//!   issues certificates whose Authority Information Access names `openssl ocsp` in `tcorp`
//!   (`good`, and `revoked` which `openssl ca -revoke` revoked), one naming a port nobody
//!   listens on (`down`), and one naming a listener that accepts and never answers (`mute`).
//!   With `ocsp = "soft"`: `good` builds both tunnels (one lookup, the second tunnel from the
//!   cache), `revoked` is refused as revoked, `down` builds both tunnels (unavailable). While
//!   `mute`'s lookup (one tunnel) waits on one of the two verification threads, `good`
//!   connects again and builds both tunnels before gate64 gives that lookup up; once that
//!   listener closes without an answer, `mute` gets its tunnel and the lookup is counted as
//!   unavailable. After a reload to `ocsp = "require"`, a new
//!   certificate naming the port nobody listens on is refused as `ocsp_unavailable`, and
//!   `good` still connects.

use std::net::{Ipv6Addr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::LabCerts;
use gate64_testkit::{Metrics, Topology, wait_until};

use crate::common::{gate64_lines, netns_test};
use crate::ike_bounds::corp_sources;
use crate::ipsec::{TeredoIpsecLab, route_corp_to_gate64};
use crate::ipsec_flood::{GAUGE_LAG, build_both_from, tunnel_configs};
use crate::ipsec_reload::{hup, wait_log};
use crate::openssl_ca::OpensslCa;

/// The corporate host's address on gate64's link: where the responders listen.
const RESPONDER: &str = "2001:db8:100:1::2";
/// `openssl ocsp`'s port.
const OCSP_PORT: u16 = 8888;
/// A port nobody listens on.
const DOWN_PORT: u16 = 8889;
/// A port whose listener accepts and never answers.
const MUTE_PORT: u16 = 8890;

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_ocsp_refuses_revoked_and_soft_or_require_decide_without_an_answer() {
    netns_test(
        "netns_ike_ocsp_refuses_revoked_and_soft_or_require_decide_without_an_answer",
        Topology::builder(),
        ocsp,
    );
}

fn ocsp_count(m: &Metrics, result: &str) -> f64 {
    m.sum("gate64_ike_ocsp_total", &[("result", result)])
}

fn refused(m: &Metrics, reason: &str) -> f64 {
    m.sum("gate64_ike_refused_total", &[("reason", reason)])
}

/// Metrics once `check` holds of them (at most [`GAUGE_LAG`]; the OCSP counters are copied
/// once a second).
fn metrics_when(topo: &Topology, check: impl Fn(&Metrics) -> bool) -> Result<Metrics> {
    let mut m = topo.metrics()?;
    let _ = wait_until(GAUGE_LAG, || match topo.metrics() {
        Ok(now) => {
            let ok = check(&now);
            m = now;
            ok
        }
        Err(_) => false,
    });
    Ok(m)
}

/// Both tunnels with the client certificate and key `client` from `source` in `tcorp`.
fn connect(
    topo: &Topology,
    certs: &LabCerts,
    client: &(PathBuf, PathBuf),
    source: Ipv6Addr,
) -> Result<()> {
    let (certs, client) = (certs.clone(), client.clone());
    topo.corp
        .run_in(move || connect_in_ns(&certs, &client, source))?
}

/// [`connect`] from a thread already in `tcorp`.
fn connect_in_ns(certs: &LabCerts, client: &(PathBuf, PathBuf), source: Ipv6Addr) -> Result<()> {
    build_both_from(tunnel_configs(certs, client)?, source).map(drop)
}

fn ocsp(topo: &Topology) -> Result<()> {
    let ca = OpensslCa::new(
        &topo.srv,
        topo.srv.dir().join("ocsp-ca"),
        "gate64 lab OCSP CA",
    )?;
    let client = |name: &str, port: u16| {
        ca.issue(
            name,
            (
                &format!("/CN={name}.gate64.lab"),
                &format!("{name}.gate64.lab"),
            ),
            Some(&format!("http://[{RESPONDER}]:{port}")),
        )
    };
    let good = client("good", OCSP_PORT)?;
    let revoked = client("revoked", OCSP_PORT)?;
    ca.revoke(&revoked.0)?;
    let down = client("down", DOWN_PORT)?;
    let mute = client("mute", MUTE_PORT)?;
    let down_later = client("down-later", DOWN_PORT)?;
    let ca_pem = ca.dir.join("ca.pem");
    let mut lab = TeredoIpsecLab::start_with(
        topo,
        Some(&ca_pem),
        "ocsp = \"soft\"\nauth_threads = 2\n",
        Some("info"),
    )?;
    route_corp_to_gate64(topo)?;
    let sources: Vec<Ipv6Addr> = (1..=6u16)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0xb0, 0, 0, 0, i))
        .collect();
    corp_sources(topo, "2001:db8:100:b0::/64", &sources)?;
    let _responder = ca.responder(&topo.corp, OCSP_PORT)?;
    // soft: good in, revoked out, an unreachable responder lets the client in.
    connect(topo, &lab.certs, &good, sources[0]).context("good, soft")?;
    let m = metrics_when(topo, |m| {
        ocsp_count(m, "good") >= 1.0 && ocsp_count(m, "cached") >= 1.0
    })?;
    println!(
        "good: ocsp good {}, cached {}",
        ocsp_count(&m, "good"),
        ocsp_count(&m, "cached")
    );
    ensure!(
        ocsp_count(&m, "good") == 1.0 && ocsp_count(&m, "cached") >= 1.0,
        "one lookup for good's two tunnels expected\n{}",
        gate64_lines(&m)
    );
    let refused_revoked = connect(topo, &lab.certs, &revoked, sources[1]);
    let m = metrics_when(topo, |m| {
        refused(m, "revoked") >= 1.0 && ocsp_count(m, "revoked") >= 1.0
    })?;
    ensure!(
        refused_revoked.is_err()
            && refused(&m, "revoked") >= 1.0
            && ocsp_count(&m, "revoked") >= 1.0,
        "the revoked certificate got in ({refused_revoked:?})\n{}",
        gate64_lines(&m)
    );
    connect(topo, &lab.certs, &down, sources[2]).context("down, soft")?;
    let m = metrics_when(topo, |m| ocsp_count(m, "unavailable") >= 1.0)?;
    ensure!(
        ocsp_count(&m, "unavailable") >= 1.0,
        "no unavailable lookup counted\n{}",
        gate64_lines(&m)
    );
    let unavailable_before_mute = ocsp_count(&m, "unavailable");

    // A lookup that waits holds one verification thread; the other one serves good.
    let responder: Ipv6Addr = RESPONDER.parse()?;
    let mute_listener = topo
        .corp
        .run_in(move || TcpListener::bind((responder, MUTE_PORT)))??;
    let released = Arc::new(AtomicBool::new(false));
    let (accepted_tx, accepted_rx) = std::sync::mpsc::channel();
    let holder = {
        let released = Arc::clone(&released);
        std::thread::spawn(move || {
            // Holds gate64's connection open, answering nothing, until told; reports whether
            // gate64 was still waiting then (its side not closed yet).
            let Ok((mut conn, _)) = mute_listener.accept() else {
                return false;
            };
            let _ = accepted_tx.send(());
            let _ = conn.set_read_timeout(Some(Duration::from_millis(50)));
            let mut buf = [0u8; 4096];
            let mut open = true;
            while open && !released.load(Ordering::Relaxed) {
                if let Ok(0) = std::io::Read::read(&mut conn, &mut buf) {
                    open = false;
                }
            }
            open
        })
    };
    // One tunnel only: its one lookup holds one of the two verification threads.
    let [infrastructure, _] = tunnel_configs(&lab.certs, &mute)?;
    let mute_source = sources[3];
    let mute_client = topo.corp.run_in(move || {
        std::thread::spawn(move || build_both_from([infrastructure], mute_source))
    })?;
    accepted_rx
        .recv_timeout(Duration::from_secs(30))
        .context("gate64 never asked the mute responder")?;
    connect(topo, &lab.certs, &good, sources[4]).context("good while a lookup waits")?;
    released.store(true, Ordering::Relaxed);
    let still_waiting = holder
        .join()
        .map_err(|_| anyhow::anyhow!("the mute responder's thread panicked"))?;
    ensure!(
        still_waiting,
        "gate64 gave the mute lookup up before the other client was served"
    );
    let mute_result = mute_client
        .join()
        .map_err(|_| anyhow::anyhow!("the mute client's thread panicked"))?;
    // Once the mute responder closes without an answer, soft lets the client in, and the
    // lookup is counted as unavailable.
    mute_result.context("mute, soft: no tunnel once its responder closed without an answer")?;
    let m = metrics_when(topo, |m| {
        ocsp_count(m, "unavailable") > unavailable_before_mute
    })?;
    ensure!(
        ocsp_count(&m, "unavailable") > unavailable_before_mute,
        "mute's lookup was not counted as unavailable (still {unavailable_before_mute})\n{}",
        gate64_lines(&m)
    );

    // require: no answer refuses.
    let conf_path = topo.srv.dir().join("gate64.toml");
    let conf = std::fs::read_to_string(&conf_path)?;
    std::fs::write(
        &conf_path,
        conf.replace("ocsp = \"soft\"", "ocsp = \"require\""),
    )?;
    hup(&lab.gate)?;
    wait_log(&lab.gate, "configuration reloaded")?;
    let refused_down = connect(topo, &lab.certs, &down_later, sources[5]);
    let m = metrics_when(topo, |m| refused(m, "ocsp_unavailable") >= 1.0)?;
    ensure!(
        refused_down.is_err() && refused(&m, "ocsp_unavailable") >= 1.0,
        "under require a certificate without an answer got in ({refused_down:?})\n{}",
        gate64_lines(&m)
    );
    connect(topo, &lab.certs, &good, sources[0]).context("good, require")?;
    lab.gate.ensure_running()
}
