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
//! - `netns_ike_ocsp_soft_lets_twenty_clients_in_while_the_responder_is_silent`: `ocsp =
//!   "soft"`, one verification thread, 20 clients at once whose certificates name a responder
//!   that never answers: all 20 build both tunnels.

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

/// Clients that connect at once while their OCSP responder does not answer.
const AT_ONCE: usize = 20;

/// `ocsp = "soft"` with one verification thread, and a responder that takes every connection
/// and answers nothing (as a blackholed one, it holds a lookup its whole timeout): 20 clients,
/// each with its own certificate naming that responder, build both tunnels at once. The first
/// lookup holds the one thread at most 5 s; the responder is then not asked again for 30 s,
/// so the other lookups fail at once and soft lets every client in, well within the half-open
/// timeout.
#[test]
#[ignore = "netns: needs root"]
fn netns_ike_ocsp_soft_lets_twenty_clients_in_while_the_responder_is_silent() {
    netns_test(
        "netns_ike_ocsp_soft_lets_twenty_clients_in_while_the_responder_is_silent",
        Topology::builder(),
        twenty_at_once,
    );
}

fn twenty_at_once(topo: &Topology) -> Result<()> {
    let ca = OpensslCa::new(
        &topo.srv,
        topo.srv.dir().join("ocsp-ca"),
        "gate64 lab OCSP CA",
    )?;
    let url = format!("http://[{RESPONDER}]:{MUTE_PORT}");
    let clients: Vec<(PathBuf, PathBuf)> = (0..AT_ONCE)
        .map(|i| {
            let name = format!("silent{i}");
            ca.issue(
                &name,
                (
                    &format!("/CN={name}.gate64.lab"),
                    &format!("{name}.gate64.lab"),
                ),
                Some(&url),
            )
        })
        .collect::<Result<_>>()?;
    let ca_pem = ca.dir.join("ca.pem");
    let lab = TeredoIpsecLab::start_with(
        topo,
        Some(&ca_pem),
        "ocsp = \"soft\"\nauth_threads = 1\n",
        Some("info"),
    )?;
    route_corp_to_gate64(topo)?;
    // Twenty sites: each client in a /48 of its own, so that the per-host shares of the
    // half-open table and the verification queue (tested elsewhere) do not decide this.
    let sources: Vec<Ipv6Addr> = (0..AT_ONCE as u16)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0x1b00 + i, 0, 0, 0, 0, 1))
        .collect();
    for source in &sources {
        corp_sources(topo, &format!("{source}/128"), &[*source])?;
    }
    // The silent responder: takes each connection and holds it without a byte, so gate64's
    // lookup runs into its own deadline.
    let responder: Ipv6Addr = RESPONDER.parse()?;
    let listener = topo
        .corp
        .run_in(move || TcpListener::bind((responder, MUTE_PORT)))??;
    listener.set_nonblocking(true)?;
    let stop = Arc::new(AtomicBool::new(false));
    let holder = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => held.push(conn),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            held.len()
        })
    };
    let before = topo.metrics()?;
    let mut joins = Vec::new();
    for (client, source) in clients.iter().zip(sources.iter().copied()) {
        let configs = tunnel_configs(&lab.certs, client)?;
        joins.push(
            topo.corp
                .run_in(move || std::thread::spawn(move || build_both_from(configs, source)))?,
        );
    }
    let results: Vec<Result<Duration>> = joins
        .into_iter()
        .map(|j| {
            j.join()
                .map_err(|_| anyhow::anyhow!("a client's thread panicked"))
                .and_then(|r| r)
        })
        .collect();
    stop.store(true, Ordering::Relaxed);
    let connections = holder
        .join()
        .map_err(|_| anyhow::anyhow!("the silent responder's thread panicked"))?;
    let m = metrics_when(topo, |m| {
        ocsp_count(m, "unavailable") - ocsp_count(&before, "unavailable") >= AT_ONCE as f64
            && m.sum("gate64_ipsec_mmsa", &[]) == 2.0 * AT_ONCE as f64
    })?;
    let admitted = results.iter().filter(|r| r.is_ok()).count();
    let slowest = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .max()
        .copied()
        .unwrap_or_default();
    println!(
        "{admitted} of {AT_ONCE} clients built both tunnels, the slowest in {:.1} s; the silent \
         responder was asked {connections} time(s)",
        slowest.as_secs_f64()
    );
    let refusals: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| format!("{e:#}")))
        .collect();
    ensure!(
        admitted == AT_ONCE,
        "only {admitted} of {AT_ONCE} clients got in: {refusals:?}\n{}",
        gate64_lines(&m)
    );
    ensure!(
        m.sum("gate64_ipsec_mmsa", &[]) == 2.0 * AT_ONCE as f64,
        "gate64 does not hold two IKE SAs per client\n{}",
        gate64_lines(&m)
    );
    ensure!(
        ocsp_count(&m, "unavailable") - ocsp_count(&before, "unavailable") >= AT_ONCE as f64,
        "the lookups were not counted as unavailable\n{}",
        gate64_lines(&m)
    );
    ensure!(connections >= 1, "gate64 never asked the silent responder");
    Ok(())
}

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
