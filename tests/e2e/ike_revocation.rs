//! Revoked client certificates against `gate64 serve` over Debian's Miredo client, with a
//! CRL made by strongSwan's `pki --signcrl` in `[ipsec] crls`.
//!
//! - `netns_revoked_strongswan_client_is_refused_and_a_reload_cuts_off_another`: a client
//!   whose certificate the CRL lists gets no tunnel (AUTHENTICATION_FAILED) and is counted as
//!   `gate64_ike_refused_total{reason="revoked"}`; the lab client's certificate, not listed,
//!   builds its tunnel. Then a new CRL listing it too replaces the file and gate64 gets
//!   SIGHUP: within 10 s charon holds no IKE SA (gate64 sent a Delete), gate64 holds none,
//!   `gate64_ipsec_disconnects_total{reason="revoked"}` is 1, and a new attempt is refused.
//! - `netns_a_changed_crl_file_cuts_off_a_connected_client_without_a_reload`: with
//!   `crl_refresh_secs = 10`, a CRL file replaced without a signal ends the IKE SA of the
//!   connected client it lists within 30 s (charon holds none, counted as `revoked`).

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::strongswan::{
    CertPaths, Charon, CharonConfig, INFRASTRUCTURE, Tunnel, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Netns, Topology, find_tool, wait_until};

use crate::common::{gate64_lines, netns_test};
use crate::ike_multi_auth::issue_under_lab_ca;
use crate::ipsec::{
    GATE64_ADDRESS6, INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab, wait_session_record,
};
use crate::ipsec_reload::{hup, wait_log};

#[test]
#[ignore = "netns: needs root"]
fn netns_revoked_strongswan_client_is_refused_and_a_reload_cuts_off_another() {
    netns_test(
        "netns_revoked_strongswan_client_is_refused_and_a_reload_cuts_off_another",
        Topology::builder(),
        revoked_refused_then_cut_off,
    );
}

/// A CRL of the CA certificate `ca` (its key `ca.key` and `pki-strongswan.conf` in `dir`)
/// listing `revoked`, made by `pki --signcrl` and written to `out` through a temporary file
/// and a rename, as an operator replaces it.
pub(crate) fn sign_crl(
    ns: &Netns,
    dir: &Path,
    ca: &Path,
    revoked: &[&Path],
    out: &Path,
) -> Result<()> {
    let pki = find_tool("pki").context("`pki` not found: apt-get install strongswan-pki")?;
    let s = |p: &Path| -> Result<String> { Ok(p.to_str().context("path")?.to_owned()) };
    let listed = revoked
        .iter()
        .map(|p| Ok(format!("--cert '{}'", s(p)?)))
        .collect::<Result<Vec<_>>>()?
        .join(" ");
    let tmp = out.with_extension("new");
    let script = format!(
        "export STRONGSWAN_CONF='{conf}'; '{pki}' --signcrl --cacert '{ca}' --cakey '{key}' \
         --lifetime 30 {listed} --reason key-compromise --outform pem > '{tmp}' && \
         mv '{tmp}' '{out}'",
        conf = s(&dir.join("pki-strongswan.conf"))?,
        pki = s(&pki)?,
        ca = s(ca)?,
        key = s(&dir.join("ca.key"))?,
        tmp = s(&tmp)?,
        out = s(out)?,
    );
    ns.exec_ok(&["sh", "-c", &script]).map(drop)
}

fn initiator<'a>(topo: &'a Topology, credentials: CertPaths) -> Result<Charon<'a>> {
    let tunnels = vec![Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")])];
    Charon::start(
        &topo.cli,
        "initiator",
        CharonConfig::initiator(IpAddr::V6(GATE64_ADDRESS6), credentials, tunnels),
    )
}

/// What charon logs when the responder's IKE_AUTH answer carries AUTHENTICATION_FAILED.
const AUTH_FAILED_RECEIVED: &str = "received AUTHENTICATION_FAILED notify error";

/// `gate64_ike_refused_total{reason="revoked"}`.
fn revoked_refusals(topo: &Topology) -> Result<f64> {
    Ok(topo
        .metrics()?
        .sum("gate64_ike_refused_total", &[("reason", "revoked")]))
}

/// `charon`'s tunnel is refused because its certificate is revoked: the initiation fails
/// with AUTHENTICATION_FAILED received from gate64, and gate64 counts one more refusal with
/// the reason `revoked`. A timeout, another notify or a refusal for another reason fails.
fn refused(topo: &Topology, charon: &Charon<'_>, what: &str) -> Result<()> {
    let before = revoked_refusals(topo)?;
    let err = match charon.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT) {
        Ok(out) => bail!("{what}: a tunnel with a revoked certificate:\n{out}"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(
        err.contains(AUTH_FAILED_RECEIVED),
        "{what}: the initiation failed, but charon did not receive AUTHENTICATION_FAILED: {err}"
    );
    let mut after = before;
    let counted = wait_until(Duration::from_secs(5), || {
        after = revoked_refusals(topo).unwrap_or(after);
        after > before
    });
    ensure!(
        counted,
        "{what}: gate64_ike_refused_total{{reason=\"revoked\"}} stayed at {after} (was \
         {before}): the refusal was not for revocation\n{}",
        gate64_lines(&topo.metrics()?)
    );
    Ok(())
}

fn revoked_refused_then_cut_off(topo: &Topology) -> Result<()> {
    let dir = topo.srv.dir().join("certs");
    let crl = dir.join("clients.crl");
    let lost = (dir.join("lost.pem"), dir.join("lost.key"));
    let keys = format!("crls = [\"{}\"]\n", crl.display());
    let mut lab = TeredoIpsecLab::start_prepared(topo, None, &keys, None, |certs| {
        let issued = issue_under_lab_ca(
            &topo.srv,
            &dir,
            &certs.ca,
            (
                "lost",
                "CN=lost.gate64.lab",
                "lost.gate64.lab",
                "clientAuth",
            ),
        )?;
        ensure!(issued == lost, "issued at {issued:?}");
        sign_crl(&topo.srv, &dir, &certs.ca, &[&lost.0], &crl)
    })?;
    let metric = |name: &str, reason: &str| -> Result<f64> {
        Ok(topo.metrics()?.sum(name, &[("reason", reason)]))
    };

    // The revoked certificate: no tunnel, counted as revoked.
    let lost_charon = initiator(topo, CertPaths::new(&lab.certs.ca, &lost.0, &lost.1))?;
    let first = || -> Result<()> {
        lost_charon.load_all()?;
        refused(topo, &lost_charon, "at start")?;
        let revoked = metric("gate64_ike_refused_total", "revoked")?;
        ensure!(revoked >= 1.0, "refused{{reason=revoked}} is {revoked}");
        // The session log records the refusal with where it came from.
        let line = wait_session_record(topo, "auth_refused", "revoked")?;
        ensure!(
            line["source"].is_string()
                && line["identity"]
                    .as_str()
                    .is_some_and(|id| id.contains("lost.gate64.lab")),
            "the refusal names its source and the identity the client claimed: {line}"
        );
        Ok(())
    };
    with_charon_logs(first(), &[&lost_charon])?;
    drop(lost_charon);

    // The lab client's certificate is not listed: its tunnel comes up.
    let charon = initiator(topo, lab.certs.initiator())?;
    let cut_off = || -> Result<()> {
        charon.load_all()?;
        charon.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT)?;
        charon.wait_established(1, 1, SETTLE_TIMEOUT)?;
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping through the tunnel before the new CRL")?;

        sign_crl(
            &topo.srv,
            &dir,
            &lab.certs.ca,
            &[&lost.0, &lab.certs.initiator_cert],
            &crl,
        )?;
        hup(&lab.gate)?;
        wait_log(&lab.gate, "IKE credentials reloaded")?;
        let gone = wait_until(Duration::from_secs(10), || {
            charon.list_sas().is_ok_and(|sas| sas.is_empty())
        });
        ensure!(gone, "charon still lists IKE SAs: {:?}", charon.list_sas());
        let m = topo.metrics()?;
        let mmsa = m.sum("gate64_ipsec_mmsa", &[]);
        ensure!(mmsa == 0.0, "gate64_ipsec_mmsa is {mmsa} after the new CRL");
        let ended = m.sum("gate64_ipsec_disconnects_total", &[("reason", "revoked")]);
        ensure!(ended == 1.0, "disconnects{{reason=revoked}} is {ended}");
        let gone = wait_session_record(topo, "disconnect", "revoked")?;
        ensure!(gone["identity"] == "CN=client.gate64.lab", "{gone}");
        refused(topo, &charon, "after the new CRL")
    };
    with_charon_logs(cut_off(), &[&charon])?;
    lab.gate.ensure_running()
}

#[test]
#[ignore = "netns: needs root"]
fn netns_a_changed_crl_file_cuts_off_a_connected_client_without_a_reload() {
    netns_test(
        "netns_a_changed_crl_file_cuts_off_a_connected_client_without_a_reload",
        Topology::builder(),
        changed_file_cuts_off,
    );
}

/// `crl_refresh_secs = 10`: the lab client connects under an empty CRL; a CRL listing it
/// replaces the file, and with no signal gate64 ends its IKE SA within 30 s (charon holds
/// none, `disconnects{reason="revoked"}` is 1).
fn changed_file_cuts_off(topo: &Topology) -> Result<()> {
    let dir = topo.srv.dir().join("certs");
    let crl = dir.join("clients.crl");
    let keys = format!("crls = [\"{}\"]\ncrl_refresh_secs = 10\n", crl.display());
    let mut lab = TeredoIpsecLab::start_prepared(topo, None, &keys, None, |certs| {
        sign_crl(&topo.srv, &dir, &certs.ca, &[], &crl)
    })?;
    let charon = initiator(topo, lab.certs.initiator())?;
    let scenario = || -> Result<()> {
        charon.load_all()?;
        charon.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT)?;
        charon.wait_established(1, 1, SETTLE_TIMEOUT)?;
        sign_crl(
            &topo.srv,
            &dir,
            &lab.certs.ca,
            &[&lab.certs.initiator_cert],
            &crl,
        )?;
        let gone = wait_until(Duration::from_secs(30), || {
            charon.list_sas().is_ok_and(|sas| sas.is_empty())
        });
        ensure!(gone, "charon still lists IKE SAs: {:?}", charon.list_sas());
        let ended = topo
            .metrics()?
            .sum("gate64_ipsec_disconnects_total", &[("reason", "revoked")]);
        ensure!(ended == 1.0, "disconnects{{reason=revoked}} is {ended}");
        Ok(())
    };
    with_charon_logs(scenario(), &[&charon])?;
    lab.gate.ensure_running()
}
