//! SIGHUP renews gate64's IKE certificate with no client dropped.
//!
//! - `netns_reload_renews_the_ike_certificate_and_keeps_ike_sas`: strongSwan over Miredo's
//!   Teredo client builds the infrastructure tunnel to `gate64 serve`; a new certificate and
//!   key (another subject and name, same CA) replace the files at the same paths, then SIGHUP. The
//!   IKE SA and child SA up before keep their SPIs and carry pings; the intranet tunnel,
//!   negotiated after the reload, is served the new certificate (strongSwan's remote
//!   identity), while the old tunnel still shows the old one. The reload starts gate64's
//!   cache of verified chains empty (the intranet tunnel's IKE_AUTH misses it) and its
//!   counters carry on: `gate64_ike_chain_cache_total{result="miss"}` grows by one past its
//!   value before the reload, and `gate64_ike_chain_cache_entries` holds the one chain again.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::strongswan::{INFRASTRUCTURE, INTRANET, IkeSa, Tunnel, with_charon_logs};
use gate64_testkit::{CORP_HOST, Process, Topology, wait_for, wait_until};

use crate::common::{gate64_lines, netns_test};
use crate::ike_multi_auth::issue_under_lab_ca;
use crate::ipsec::{INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab};

/// The renewed certificate's subject.
const RENEWED_DN: &str = "CN=gate64 renewed IKE certificate";
/// The renewed certificate's only subjectAltName: the identity gate64 then answers with (its
/// first subjectAltName, as no `ipsec.identity` is set and strongSwan asks for none).
const RENEWED_NAME: &str = "renewed.gate64.lab";
/// A host of the intranet tunnel (the lab's corporate /48), not the infrastructure host.
const INTRANET_TS: &str = "2001:db8:100::/48";

#[test]
#[ignore = "netns: needs root"]
fn netns_reload_renews_the_ike_certificate_and_keeps_ike_sas() {
    netns_test(
        "netns_reload_renews_the_ike_certificate_and_keeps_ike_sas",
        Topology::builder(),
        renews_the_ike_certificate,
    );
}

fn renews_the_ike_certificate(topo: &Topology) -> Result<()> {
    let mut lab = TeredoIpsecLab::start(topo, None)?;
    let infrastructure_ts = format!("{CORP_HOST}/128");
    let tunnels = vec![
        Tunnel::new(INFRASTRUCTURE, &[&infrastructure_ts]),
        Tunnel::new(INTRANET, &[INTRANET_TS]),
    ];
    let initiator = TeredoIpsecLab::initiator(topo, lab.certs.initiator(), tunnels)?;
    let scenario = || -> Result<()> {
        initiator.load_all()?;
        initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT)?;
        let before = initiator.wait_established(1, 1, SETTLE_TIMEOUT)?;
        let old = ike(&before, INFRASTRUCTURE)?.clone();
        ensure!(
            !old.remote_id.contains(RENEWED_NAME),
            "the renewed certificate before the reload: {old:?}"
        );
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping through the infrastructure tunnel before the reload")?;
        let misses = chain_cache_after(topo, "before the reload", 1.0)?;

        // A renewal as certbot-style tools do it: new files at the same paths.
        let dir = topo.srv.dir().join("certs");
        let (cert, key) = issue_under_lab_ca(
            &topo.srv,
            &dir,
            &lab.certs.ca,
            ("renewed", RENEWED_DN, RENEWED_NAME, "serverAuth"),
        )?;
        std::fs::copy(&cert, &lab.certs.responder_cert).context("renewing the certificate")?;
        std::fs::copy(&key, &lab.certs.responder_key).context("renewing the key")?;
        hup(&lab.gate)?;
        wait_log(&lab.gate, "IKE credentials reloaded")?;
        wait_log(&lab.gate, "configuration reloaded")?;

        initiator.initiate(INTRANET, INTRANET, INITIATE_TIMEOUT)?;
        let after = initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
        let kept = ike(&after, INFRASTRUCTURE)?;
        ensure!(
            kept.spis == old.spis
                && kept.children.first().map(|c| c.spi_in)
                    == old.children.first().map(|c| c.spi_in),
            "the infrastructure SAs changed across the reload: before {old:?}, after {kept:?}"
        );
        let renewed = ike(&after, INTRANET)?;
        ensure!(
            renewed.remote_id.contains(RENEWED_NAME),
            "the IKE SA negotiated after the reload got {:?}, not {RENEWED_NAME}",
            renewed.remote_id
        );
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping through the infrastructure tunnel after the reload")?;
        chain_cache_after(topo, "after the reload", misses + 1.0)?;
        println!(
            "before the reload: {}; after: {}",
            old.remote_id, renewed.remote_id
        );
        Ok(())
    };
    with_charon_logs(scenario(), &[&initiator])?;
    lab.gate.ensure_running()
}

/// Waits until gate64's chain cache counts at least `misses` misses and holds the client's
/// one chain; returns the misses counted. The daemon copies the counters once a second.
fn chain_cache_after(topo: &Topology, when: &str, misses: f64) -> Result<f64> {
    let read = |m: &gate64_testkit::Metrics| {
        (
            m.sum("gate64_ike_chain_cache_total", &[("result", "miss")]),
            m.sum("gate64_ike_chain_cache_entries", &[]),
        )
    };
    let seen = wait_for(Duration::from_secs(10), || {
        let m = topo.metrics().ok()?;
        let (missed, entries) = read(&m);
        (missed >= misses && entries == 1.0).then_some(missed)
    });
    match seen {
        Some(missed) => {
            println!("chain cache {when}: {missed} misses, 1 entry");
            Ok(missed)
        }
        None => {
            let m = topo.metrics()?;
            let (missed, entries) = read(&m);
            bail!(
                "{when}: chain cache misses {missed}, entries {entries}; expected at least \
                 {misses} misses and 1 entry\n{}",
                gate64_lines(&m)
            )
        }
    }
}

fn ike<'a>(sas: &'a [IkeSa], name: &str) -> Result<&'a IkeSa> {
    sas.iter()
        .find(|s| s.name == name)
        .with_context(|| format!("no IKE SA {name}: {sas:#?}"))
}

pub(crate) fn hup(p: &Process) -> Result<()> {
    let out = std::process::Command::new("kill")
        .args(["-HUP".to_owned(), p.pid().to_string()])
        .output()
        .context("running kill")?;
    ensure!(out.status.success(), "kill -HUP: {out:?}");
    Ok(())
}

pub(crate) fn wait_log(p: &Process, needle: &str) -> Result<()> {
    ensure!(
        wait_until(Duration::from_secs(15), || p.log().contains(needle)),
        "no {needle:?} in gate64's log within 15 s:\n{}",
        p.log()
    );
    Ok(())
}
