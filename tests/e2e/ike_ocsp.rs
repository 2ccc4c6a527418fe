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
//!   connects again and builds both tunnels before gate64 gives that lookup up. After a reload to `ocsp = "require"`, a new
//!   certificate naming the port nobody listens on is refused as `ocsp_unavailable`, and
//!   `good` still connects.

use std::net::{Ipv6Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_ike::auth::Credentials;
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::initiator::InitiatorConfig;
use gate64_testkit::strongswan::LabCerts;
use gate64_testkit::{CORP_HOST, Metrics, Netns, Process, Topology, wait_until};

use crate::common::{gate64_lines, netns_test, path_str};
use crate::ike_bounds::corp_sources;
use crate::ike_interop::initiator_config;
use crate::ipsec::{GATE64_ADDRESS6, TeredoIpsecLab};
use crate::ipsec_flood::{GAUGE_LAG, build_both_from};
use crate::ipsec_reload::{hup, wait_log};

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

/// A CA kept by `openssl ca` in `dir`, which issues client certificates naming an OCSP
/// responder.
struct OpensslCa<'a> {
    ns: &'a Netns,
    dir: PathBuf,
}

impl<'a> OpensslCa<'a> {
    fn new(ns: &'a Netns, dir: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(dir.join("issued"))?;
        std::fs::write(dir.join("index.txt"), "")?;
        std::fs::write(dir.join("serial"), "1000\n")?;
        std::fs::write(
            dir.join("openssl.cnf"),
            format!(
                "[ca]\ndefault_ca = lab\n[lab]\ndir = {dir}\ndatabase = $dir/index.txt\n\
                 serial = $dir/serial\nnew_certs_dir = $dir/issued\ncertificate = $dir/ca.pem\n\
                 private_key = $dir/ca.key\ndefault_md = sha256\ndefault_days = 30\n\
                 policy = any\nunique_subject = no\ncopy_extensions = none\n\
                 [any]\ncommonName = supplied\n",
                dir = dir.display()
            ),
        )?;
        let ca = OpensslCa { ns, dir };
        ca.run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &ca.path("ca.key")?,
            "-out",
            &ca.path("ca.pem")?,
            "-days",
            "30",
            "-subj",
            "/CN=gate64 lab OCSP CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        ])?;
        Ok(ca)
    }

    fn path(&self, name: &str) -> Result<String> {
        Ok(path_str(&self.dir.join(name))?.to_owned())
    }

    fn run(&self, args: &[&str]) -> Result<()> {
        let mut argv = vec!["openssl"];
        argv.extend_from_slice(args);
        self.ns.exec_ok(&argv).map(drop)
    }

    /// A client certificate for `name` whose AIA names `http://[RESPONDER]:port`: (cert, key).
    fn issue(&self, name: &str, port: u16) -> Result<(PathBuf, PathBuf)> {
        let (cert, key, csr, ext) = (
            self.dir.join(format!("{name}.pem")),
            self.dir.join(format!("{name}.key")),
            self.dir.join(format!("{name}.csr")),
            self.dir.join(format!("{name}.ext")),
        );
        std::fs::write(
            &ext,
            format!(
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n\
                 subjectAltName=DNS:{name}.gate64.lab\n\
                 authorityInfoAccess=OCSP;URI:http://[{RESPONDER}]:{port}\n"
            ),
        )?;
        self.run(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            path_str(&key)?,
            "-out",
            path_str(&csr)?,
            "-subj",
            &format!("/CN={name}.gate64.lab"),
        ])?;
        self.run(&[
            "ca",
            "-batch",
            "-config",
            &self.path("openssl.cnf")?,
            "-in",
            path_str(&csr)?,
            "-extfile",
            path_str(&ext)?,
            "-out",
            path_str(&cert)?,
        ])?;
        Ok((cert, key))
    }

    fn revoke(&self, cert: &Path) -> Result<()> {
        self.run(&[
            "ca",
            "-config",
            &self.path("openssl.cnf")?,
            "-revoke",
            path_str(cert)?,
        ])
    }

    /// `openssl ocsp` answering for this CA on every address of `ns`, signing with the CA.
    fn responder(&self, ns: &Netns) -> Result<Process> {
        let port = OCSP_PORT.to_string();
        let p = ns.spawn(
            "openssl-ocsp",
            &[
                "openssl",
                "ocsp",
                "-index",
                &self.path("index.txt")?,
                "-port",
                &port,
                "-rsigner",
                &self.path("ca.pem")?,
                "-rkey",
                &self.path("ca.key")?,
                "-CA",
                &self.path("ca.pem")?,
                "-nmin",
                "5",
            ],
        )?;
        let up = wait_until(Duration::from_secs(10), || {
            ns.exec_ok(&["ss", "-Hntl", &format!("sport = :{OCSP_PORT}")])
                .is_ok_and(|s| !s.trim().is_empty())
        });
        ensure!(up, "openssl ocsp did not listen on {OCSP_PORT}");
        Ok(p)
    }
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

/// The two initiators (infrastructure, intranet) of `client` (certificate and key).
fn tunnel_configs(
    certs: &LabCerts,
    (cert, key): &(PathBuf, PathBuf),
) -> Result<[InitiatorConfig; 2]> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("{}", p.display()));
    let (chain, key) = (read(cert)?, read(key)?);
    let config = |tunnel, ts: &str| -> Result<_> {
        let mut c = initiator_config(certs, tunnel, ts)?;
        c.credentials = Credentials::from_pem(&chain, &key)?;
        Ok(c)
    };
    Ok([
        config(TunnelKind::Infrastructure, &format!("{CORP_HOST}/128"))?,
        config(TunnelKind::Intranet, "2001:db8:100::/48")?,
    ])
}

fn ocsp(topo: &Topology) -> Result<()> {
    let ca = OpensslCa::new(&topo.srv, topo.srv.dir().join("ocsp-ca"))?;
    let good = ca.issue("good", OCSP_PORT)?;
    let revoked = ca.issue("revoked", OCSP_PORT)?;
    ca.revoke(&revoked.0)?;
    let down = ca.issue("down", DOWN_PORT)?;
    let mute = ca.issue("mute", MUTE_PORT)?;
    let down_later = ca.issue("down-later", DOWN_PORT)?;
    let ca_pem = ca.dir.join("ca.pem");
    let mut lab = TeredoIpsecLab::start_with(
        topo,
        Some(&ca_pem),
        "ocsp = \"soft\"\nauth_threads = 2\n",
        Some("info"),
    )?;
    topo.corp.ip(&[
        "-6",
        "route",
        "replace",
        &format!("{GATE64_ADDRESS6}/128"),
        "via",
        "2001:db8:100:1::1",
    ])?;
    let sources: Vec<Ipv6Addr> = (1..=6u16)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0xb0, 0, 0, 0, i))
        .collect();
    corp_sources(topo, "2001:db8:100:b0::/64", &sources)?;
    let _responder = ca.responder(&topo.corp)?;
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
    println!("mute client under soft: {mute_result:?}");

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
