//! gate64 with an RSA-2048 server certificate (made by strongSwan's `pki`, its key a PKCS#1
//! `RSA PRIVATE KEY`), against real strongSwan charon over Debian's Miredo client:
//!
//! - `netns_ike_rsa_server_charon_rfc7427`: charon with its defaults announces
//!   SIGNATURE_HASH_ALGORITHMS; gate64 signs RFC 7427 (method 14) with PKCS#1 v1.5 over SHA-256,
//!   which charon's log names, and both tunnels carry pings.
//! - `netns_ike_rsa_server_charon_rfc7427_pss`: the same with `ipsec.rsa_pss = true`: charon
//!   verifies RSASSA-PSS (RSA_EMSA_PSS).
//! - `netns_ike_rsa_server_charon_method_1`: charon with `signature_authentication = no`
//!   announces nothing, as clients without RFC 7427 do; gate64 signs method 1 (PKCS#1 v1.5
//!   over SHA-1), which charon's log names ("RSA signature"), and both tunnels carry pings.
//! - `netns_ike_rsa_server_gate64_connect`: `gate64 connect teredo` (gate64's own initiator)
//!   verifies the RSA certificate and signature and builds both tunnels.

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, LabCerts, Tunnel, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Netns, Topology, find_tool, wait_for};
use std::net::IpAddr;
use std::time::Duration;

use crate::common::{gate64_lines, netns_test};
use crate::ipsec::{GATE64_ADDRESS6, INITIATE_TIMEOUT, POOL6, SETTLE_TIMEOUT, TeredoIpsecLab};
use crate::ipsec_connect::{ESTABLISH_TIMEOUT, gate64_with_lab_ike_prepared, spawn_client};

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_rsa_server_charon_rfc7427() {
    netns_test(
        "netns_ike_rsa_server_charon_rfc7427",
        Topology::builder(),
        |topo| rsa_server(topo, Sig::Pkcs1Sha256),
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_rsa_server_charon_rfc7427_pss() {
    netns_test(
        "netns_ike_rsa_server_charon_rfc7427_pss",
        Topology::builder(),
        |topo| rsa_server(topo, Sig::PssSha256),
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_rsa_server_charon_method_1() {
    netns_test(
        "netns_ike_rsa_server_charon_method_1",
        Topology::builder(),
        |topo| rsa_server(topo, Sig::Method1),
    );
}

/// Replaces the lab's responder certificate and key with an RSA-2048 pair under the same
/// (ECDSA) lab CA, same subject and subjectAltName: `pki --gen --type rsa` writes PKCS#1.
fn rsa_responder(ns: &Netns, certs: &LabCerts) -> Result<()> {
    let pki = find_tool("pki").context("`pki` not found: apt-get install strongswan-pki")?;
    let dir = certs.ca.parent().context("certificate directory")?;
    let conf = dir.join("pki-strongswan.conf");
    let path = |p: &std::path::Path| -> Result<String> {
        Ok(p.to_str().context("non-UTF-8 path")?.to_owned())
    };
    let addr = GATE64_ADDRESS6.to_string();
    let script = format!(
        "export STRONGSWAN_CONF='{conf}'; \
         '{pki}' --gen --type rsa --size 2048 --outform pem > '{key}' && \
         '{pki}' --pub --in '{key}' --type rsa --outform pem | \
         '{pki}' --issue --lifetime 30 --type pub --cacert '{ca}' --cakey '{ca_key}' \
         --dn 'CN={addr}' --san '{addr}' --flag serverAuth --outform pem > '{cert}'",
        conf = path(&conf)?,
        pki = path(&pki)?,
        key = path(&certs.responder_key)?,
        ca = path(&certs.ca)?,
        ca_key = path(&dir.join("ca.key"))?,
        cert = path(&certs.responder_cert)?,
    );
    ns.exec_ok(&["sh", "-c", &script])?;
    let key = std::fs::read_to_string(&certs.responder_key)?;
    ensure!(
        key.starts_with("-----BEGIN RSA PRIVATE KEY-----"),
        "pki did not write a PKCS#1 RSA key: {:.60}",
        key
    );
    Ok(())
}

/// What gate64 is to sign with, and how charon's log names it: "authentication of '<gate64's
/// id>' with <what> successful", once per IKE SA; <what> is the RFC 7427 scheme for method 14
/// and the method's name for a classic one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sig {
    /// Method 14, PKCS#1 v1.5 with SHA-256 (charon announces hashes; the default).
    Pkcs1Sha256,
    /// Method 14, RSASSA-PSS with SHA-256 (`ipsec.rsa_pss = true`).
    PssSha256,
    /// Method 1, PKCS#1 v1.5 with SHA-1 (charon with `signature_authentication = no`).
    Method1,
}

impl Sig {
    fn charon_name(self) -> &'static str {
        match self {
            Sig::Pkcs1Sha256 => "RSA_EMSA_PKCS1_SHA2_256",
            Sig::PssSha256 => "RSA_EMSA_PSS",
            Sig::Method1 => "RSA signature",
        }
    }
}

/// gate64 with the RSA certificate; charon builds both tunnels, pings through each, and its
/// log says it verified gate64's signature as `sig`, and no other way.
fn rsa_server(topo: &Topology, sig: Sig) -> Result<()> {
    let keys = if sig == Sig::PssSha256 {
        "rsa_pss = true\n"
    } else {
        ""
    };
    let mut lab = TeredoIpsecLab::start_prepared(topo, None, keys, None, |certs| {
        rsa_responder(&topo.srv, certs)
    })?;
    let tunnels = vec![
        Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ];
    let mut config =
        CharonConfig::initiator(IpAddr::V6(GATE64_ADDRESS6), lab.certs.initiator(), tunnels);
    config.signature_authentication = sig != Sig::Method1;
    let initiator = Charon::start(&topo.cli, "initiator", config)?;
    let result = (|| -> Result<()> {
        initiator.load_all()?;
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping the corporate host through the infrastructure tunnel")?;
        topo.ping6_all(&topo.cli, GATE64_ADDRESS6, 3)
            .context("ping gate64 through the intranet tunnel")?;
        let log = std::fs::read_to_string(initiator.log_path())?;
        let want = sig.charon_name();
        let verified = log
            .lines()
            .filter(|l| {
                l.contains(&format!("authentication of '{GATE64_ADDRESS6}'"))
                    || l.contains(&format!("authentication of 'CN={GATE64_ADDRESS6}'"))
            })
            .filter(|l| l.contains(&format!("with {want}")) && l.contains("successful"))
            .count();
        ensure!(
            verified == 2,
            "charon verified gate64's {want} signature {verified} times, expected 2 (one per \
             IKE SA)"
        );
        for other in [Sig::Pkcs1Sha256, Sig::PssSha256, Sig::Method1] {
            let not = other.charon_name();
            ensure!(
                other == sig || !log.contains(&format!("'{GATE64_ADDRESS6}' with {not}")),
                "charon's log names {not} for gate64"
            );
        }
        Ok(())
    })();
    with_charon_logs(result, &[&initiator])?;
    let m = topo.metrics()?;
    let ok = m.sum("gate64_ike_negotiations_total", &[("result", "ok")]);
    ensure!(ok >= 2.0, "negotiations ok: {ok}\n{}", gate64_lines(&m));
    lab.gate.ensure_running()
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_rsa_server_gate64_connect() {
    netns_test(
        "netns_ike_rsa_server_gate64_connect",
        Topology::builder(),
        rsa_server_gate64_connect,
    );
}

/// `gate64 connect teredo` (gate64's own initiator, which announces SIGNATURE_HASH_ALGORITHMS)
/// verifies gate64's RSA-2048 certificate and method-14 signature and builds both tunnels.
fn rsa_server_gate64_connect(topo: &Topology) -> Result<()> {
    let (ike, infrastructure_ts, mut gate) =
        gate64_with_lab_ike_prepared(topo, |ike| rsa_responder(&topo.srv, ike))?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    let mut client = spawn_client(
        topo,
        &ike,
        GATE64_ADDRESS6,
        &infrastructure_ts,
        "2001:db8:100::/48",
        3600,
    )?;
    let up = wait_for(ESTABLISH_TIMEOUT, || {
        let m = topo.metrics().ok()?;
        let both = m.sum("gate64_ipsec_qmsa", &[]) == 2.0 && m.sum("gate64_ipsec_mmsa", &[]) == 2.0;
        both.then_some(())
    });
    client.ensure_running()?;
    ensure!(
        up.is_some(),
        "gate64 did not count 2 IKE SAs and 2 child SAs within {ESTABLISH_TIMEOUT:?}\n{}",
        gate64_lines(&topo.metrics()?)
    );
    let pinged = wait_for(Duration::from_secs(10), || {
        topo.ping6_all(&topo.cli, CORP_HOST, 2).ok()
    });
    ensure!(
        pinged.is_some(),
        "no ping through the infrastructure tunnel"
    );
    client.ensure_running()?;
    gate.ensure_running()
}
