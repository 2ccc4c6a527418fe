//! The server identity a strongSwan road warrior asks for, against `gate64 serve` over
//! Debian's Miredo client, as strongSwan's own examples configure it: `remote.id` = the
//! server's address or DNS name from its certificate's subjectAltName.
//!
//! - `netns_strongswan_remote_id_from_the_certificate_builds_both_tunnels`: gate64 runs with
//!   the lab certificate (subject `CN=<its address>`, subjectAltName its IPv6 address) and
//!   `ipsec.identity` = that subject DN, so that what it answers unasked is the DN. `remote.id`
//!   = `%any` builds both tunnels and charon shows the DN; `remote.id` = the address builds
//!   both and charon shows the address (answered as asked). The certificate is renewed with
//!   one that holds the address and then a DNS name (SIGHUP), and `remote.id` = that name
//!   builds both tunnels; a name the certificate does not hold gets no tunnel (charon's
//!   constraint check refuses gate64's answer).
//! - `netns_disconnect_ends_a_strongswan_clients_sas_and_it_connects_again`: `gate64
//!   disconnect` by the client's identity ends both its IKE SAs at once (gate64's status,
//!   gauges and counter), charon hears the Delete, and the client connects again.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, LabCerts, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Topology, gate64_binary, wait_until};

use crate::common::{netns_test, path_str};
use crate::ike_multi_auth::issue_under_lab_ca;
use crate::ipsec::{
    GATE64_ADDRESS6, INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab, wait_session_record,
};
use crate::ipsec_flood::tunnels;
use crate::ipsec_reload::{hup, wait_log};

/// The DNS name of the renewed certificate (beside gate64's address).
const SERVER_NAME: &str = "gw.gate64.lab";

#[test]
#[ignore = "netns: needs root"]
fn netns_strongswan_remote_id_from_the_certificate_builds_both_tunnels() {
    netns_test(
        "netns_strongswan_remote_id_from_the_certificate_builds_both_tunnels",
        Topology::builder(),
        remote_id_from_the_certificate,
    );
}

/// A strongSwan initiator in `tcli` whose `remote.id` is `remote_id`.
fn initiator<'a>(topo: &'a Topology, certs: &LabCerts, remote_id: &str) -> Result<Charon<'a>> {
    let mut config =
        CharonConfig::initiator(IpAddr::V6(GATE64_ADDRESS6), certs.initiator(), tunnels());
    config.remote_id = remote_id.to_owned();
    Charon::start(&topo.cli, "initiator", config)
}

/// Both tunnels up with `remote.id` = `remote_id`, the corporate host answering through
/// them, and charon naming `shown` as the remote identity of both IKE SAs.
fn both_tunnels(topo: &Topology, certs: &LabCerts, remote_id: &str, shown: &str) -> Result<()> {
    let charon = initiator(topo, certs, remote_id)?;
    let scenario = || -> Result<()> {
        charon.load_all()?;
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            charon.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        let sas = charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
        for sa in &sas {
            ensure!(
                sa.remote_id == shown,
                "charon shows the remote identity {:?}, not {shown:?}",
                sa.remote_id
            );
        }
        // An unasserted first echo through the fresh SAs, then the asserted ones.
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .with_context(|| format!("ping through the tunnels with remote.id {remote_id}"))?;
        Ok(())
    };
    with_charon_logs(scenario(), &[&charon]).with_context(|| format!("remote.id = {remote_id}"))
}

fn remote_id_from_the_certificate(topo: &Topology) -> Result<()> {
    let dn = format!("CN={GATE64_ADDRESS6}");
    let keys = format!("identity = \"{dn}\"\n");
    let mut lab = TeredoIpsecLab::start_with(topo, None, &keys, None)?;
    both_tunnels(topo, &lab.certs, "%any", &dn)?;
    let address = GATE64_ADDRESS6.to_string();
    both_tunnels(topo, &lab.certs, &address, &address)?;

    // A certificate holding a DNS name besides the address, at the same paths, then SIGHUP.
    let dir = topo.srv.dir().join("certs");
    let sans = format!("{GATE64_ADDRESS6} {SERVER_NAME}");
    let (cert, key) = issue_under_lab_ca(
        &topo.srv,
        &dir,
        &lab.certs.ca,
        ("named", &dn, &sans, "serverAuth"),
    )?;
    std::fs::copy(&cert, &lab.certs.responder_cert).context("replacing the certificate")?;
    std::fs::copy(&key, &lab.certs.responder_key).context("replacing the key")?;
    hup(&lab.gate)?;
    wait_log(&lab.gate, "IKE credentials reloaded")?;
    both_tunnels(topo, &lab.certs, SERVER_NAME, SERVER_NAME)?;

    // A name the certificate does not hold: gate64 answers with its own identity, which
    // charon refuses. The refusal is charon's own (its constraint check of the identity
    // gate64 answered with), not a timeout or a refusal by gate64.
    let charon = initiator(topo, &lab.certs, "elsewhere.gate64.lab")?;
    let refused = || -> Result<()> {
        charon.load_all()?;
        if let Ok(out) = charon.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT) {
            bail!("a tunnel to a server that is not elsewhere.gate64.lab:\n{out}");
        }
        let log = std::fs::read_to_string(charon.log_path()).context("charon's log")?;
        let check = "constraint check failed: identity 'elsewhere.gate64.lab' required";
        ensure!(
            log.contains(check),
            "charon did not refuse gate64's identity (no \"{check}\" in its log)"
        );
        ensure!(
            !log.contains("received AUTHENTICATION_FAILED notify error"),
            "gate64 refused the client rather than charon refusing gate64"
        );
        Ok(())
    };
    with_charon_logs(refused(), &[&charon])?;
    lab.gate.ensure_running()
}

#[test]
#[ignore = "netns: needs root"]
fn netns_disconnect_ends_a_strongswan_clients_sas_and_it_connects_again() {
    netns_test(
        "netns_disconnect_ends_a_strongswan_clients_sas_and_it_connects_again",
        Topology::builder(),
        disconnect_and_connect_again,
    );
}

/// `gate64 disconnect <identity>` with strongSwan's two tunnels up: gate64 holds no SA of it
/// when the command returns (status, gauges, the disconnect counter), charon heard the
/// Delete (no IKE SA left), a second disconnect matches nothing (exit 1), and the client
/// builds both tunnels again.
fn disconnect_and_connect_again(topo: &Topology) -> Result<()> {
    let mut lab = TeredoIpsecLab::start(topo, None)?;
    let charon = initiator(topo, &lab.certs, "%any")?;
    let bin = gate64_binary()?;
    let socket = topo.srv.dir().join("control.sock");
    let gate64 = |args: &[&str]| -> Result<std::process::Output> {
        let mut argv = vec![path_str(&bin)?];
        argv.extend_from_slice(args);
        argv.extend(["--socket", path_str(&socket)?]);
        topo.srv.exec(&argv)
    };
    let identity = "CN=client.gate64.lab";
    let scenario = || -> Result<()> {
        charon.load_all()?;
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            charon.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
        let out = gate64(&["disconnect", identity])?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success() && stdout.contains("2 IKE SA(s) removed"),
            "gate64 disconnect {identity}: {out:?}"
        );
        println!("{stdout}");
        let status = gate64(&["status", "--json"])?;
        let json = String::from_utf8_lossy(&status.stdout);
        ensure!(
            json.contains("\"ike_sas\": 0") && json.contains("\"clients\": []"),
            "gate64 status --json after the disconnect:\n{json}"
        );
        let m = topo.metrics()?;
        for (name, labels, want) in [
            ("gate64_ipsec_mmsa", &[][..], 0.0),
            ("gate64_ipsec_qmsa", &[][..], 0.0),
            (
                "gate64_ipsec_disconnects_total",
                &[("reason", "admin")][..],
                2.0,
            ),
        ] {
            let got = m.sum(name, labels);
            ensure!(got == want, "{name}{labels:?} is {got}, expected {want}");
        }
        let gone = wait_session_record(topo, "disconnect", "admin")?;
        ensure!(gone["identity"] == identity, "{gone}");
        let heard = wait_until(Duration::from_secs(10), || {
            charon.list_sas().is_ok_and(|sas| sas.is_empty())
        });
        ensure!(heard, "charon still lists IKE SAs: {:?}", charon.list_sas());
        let again = gate64(&["disconnect", identity])?;
        ensure!(
            again.status.code() == Some(1),
            "a second disconnect matched something: {again:?}"
        );
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            charon.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping through the tunnels built again")?;
        Ok(())
    };
    with_charon_logs(scenario(), &[&charon])?;
    lab.gate.ensure_running()
}
