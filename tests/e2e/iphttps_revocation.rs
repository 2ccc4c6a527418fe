//! Revoked client certificates at the IP-HTTPS listener: `[iphttps] client_ca` with a CRL
//! made by strongSwan's `pki --signcrl` in `client_crls`, against `gate64 connect iphttps`.
//!
//! - `netns_iphttps_refuses_a_revoked_client_certificate_and_reads_a_changed_crl`: a client
//!   whose certificate the CRL lists gets no link, counted as
//!   `gate64_tls_handshakes_total{result="revoked"}` and logged; the lab client, not listed,
//!   connects and pings the corporate host. Then a CRL listing it too replaces the file, with
//!   no signal: within `ipsec.crl_refresh_secs` (10 s here) gate64 reads it again and the lab
//!   client's next connection is refused as revoked.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::write_pki_conf;
use gate64_testkit::{CORP_HOST, Gate64Options, Process, Topology, wait_for, wait_until};

use crate::common::{
    client_address, connect_iphttps, gate64_lines, handshakes, iphttps_section, make_certs,
    netns_test, path_str, serve_iphttps, spawn_iphttps_client, spawn_iphttps_client_as,
};
use crate::ike_multi_auth::issue_under_lab_ca;
use crate::ike_revocation::sign_crl;
use crate::ipsec_reload::wait_log;

/// A refused client retries its handshake every few seconds, and gate64 looks at the CRL
/// files every 10 s here; a loaded machine gets a wide margin.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(60);
/// A stopped client's TUN device goes with its process.
const LINK_GONE_TIMEOUT: Duration = Duration::from_secs(10);

#[test]
#[ignore = "netns: needs root"]
fn netns_iphttps_refuses_a_revoked_client_certificate_and_reads_a_changed_crl() {
    netns_test(
        "netns_iphttps_refuses_a_revoked_client_certificate_and_reads_a_changed_crl",
        Topology::builder(),
        revoked_refused_then_refreshed,
    );
}

/// `gate64 serve` with the lab configuration, `[iphttps]` asking for client certificates of
/// the lab CA and checking them against `crl`, and CRL files looked at every 10 s.
fn start_gate64_with_crl(topo: &Topology, certs: &Path, crl: &Path) -> Result<Process> {
    let base = Gate64Options::default().config_toml();
    let ipsec = "[ipsec]\nrequire = false\n";
    ensure!(
        base.contains(ipsec),
        "the lab configuration changed:\n{base}"
    );
    let mut conf = base.replace(ipsec, &format!("{ipsec}crl_refresh_secs = 10\n"));
    conf.push_str(&iphttps_section(certs)?);
    conf.push_str(&format!(
        "client_ca = {:?}\nclient_crls = [{:?}]\n",
        path_str(&certs.join("ca.pem"))?,
        path_str(crl)?,
    ));
    serve_iphttps(topo, "gate64-iphttps-crl.toml", &conf)
}

/// Waits until `gate64_tls_handshakes_total{result="revoked"}` passes `before` while `client`
/// tries, and checks that it got no link.
fn refused_as_revoked(topo: &Topology, client: &Process, before: f64) -> Result<f64> {
    let counted = wait_for(REFUSAL_TIMEOUT, || {
        let n = handshakes(&topo.metrics().ok()?, "revoked");
        (n > before).then_some(n)
    });
    let Some(counted) = counted else {
        let m = topo.metrics()?;
        anyhow::bail!(
            "result=\"revoked\" did not rise above {before} within {REFUSAL_TIMEOUT:?}\n{}\n\
             client log:\n{}",
            gate64_lines(&m),
            client.log()
        );
    };
    ensure!(
        client_address(topo).is_none(),
        "a client with a revoked certificate got a link: {}",
        topo.cli.ip(&["-6", "addr", "show", "dev", "gate64c"])?
    );
    Ok(counted)
}

fn revoked_refused_then_refreshed(topo: &Topology) -> Result<()> {
    let certs = make_certs(topo)?;
    write_pki_conf(&certs)?;
    let ca = certs.join("ca.pem");
    let lost = issue_under_lab_ca(
        &topo.srv,
        &certs,
        &ca,
        (
            "lost",
            "CN=lost.gate64.lab",
            "lost.gate64.lab",
            "clientAuth",
        ),
    )?;
    let crl = certs.join("clients.crl");
    sign_crl(&topo.srv, &certs, &ca, &[&lost.0], &crl)?;
    let mut gate = start_gate64_with_crl(topo, &certs, &crl)?;

    // The listed certificate: refused, counted and logged as revoked.
    let client = spawn_iphttps_client_as(topo, &certs, Some((&lost.0, &lost.1)), &[])?;
    let revoked = refused_as_revoked(topo, &client, 0.0)?;
    wait_log(&gate, "IP-HTTPS client certificate refused: revoked")?;
    drop(client);

    // The lab client's certificate, not listed: link up, ping.
    let (client, _) = connect_iphttps(topo, &certs, true)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp with an unrevoked certificate")?;
    drop(client);
    // The TUN device, and the address on it, go with the process.
    ensure!(
        wait_until(LINK_GONE_TIMEOUT, || topo
            .cli
            .ip(&["link", "show", "gate64c"])
            .is_err()),
        "gate64c still exists after the client stopped"
    );

    // A CRL listing it too replaces the file, without a signal: read within 10 s, and its
    // next connection is refused.
    let lab_client = certs.join("client.pem");
    sign_crl(&topo.srv, &certs, &ca, &[&lost.0, &lab_client], &crl)?;
    ensure!(
        wait_until(REFUSAL_TIMEOUT, || gate
            .log()
            .contains("`iphttps.client_crls` changed: read again")),
        "gate64 did not read the changed CRL within {REFUSAL_TIMEOUT:?}; log:\n{}",
        gate.log()
    );
    let client = spawn_iphttps_client(topo, &certs, true)?;
    refused_as_revoked(topo, &client, revoked)?;
    drop(client);
    gate.ensure_running()
}
