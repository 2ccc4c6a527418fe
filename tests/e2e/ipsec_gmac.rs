//! `[ipsec] iphttps_integrity_only`: ESP with integrity only (AES-GMAC, RFC 4543) for IP-HTTPS
//! clients, whose TLS already encrypts the hop, and never for Teredo ones.
//!
//! - `netns_ipsec_iphttps_integrity_only_strongswan`: gate64 with the key on and IP-HTTPS;
//!   strongSwan's charon in `tcli`, over the IP-HTTPS TUN device of `gate64 connect iphttps
//!   --no-ipsec`, proposes only `esp_proposals = aes256gmac` for the infrastructure tunnel;
//!   gate64 accepts it, pings reach the corporate host through it, gate64's status shows the
//!   child SA as `aes256gmac` with the traffic, and nothing fails ESP authentication.
//! - `netns_ipsec_teredo_refuses_integrity_only`: gate64 with the key on answers the same
//!   GMAC-only proposal from charon over Teredo (Miredo), with IP-HTTPS enabled beside it,
//!   NO_PROPOSAL_CHOSEN, counted as
//!   `gate64_ike_refused_total{reason="no_proposal"}`, and installs no child SA.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, LabCerts, Tunnel, with_charon_logs,
};
use gate64_testkit::{CLIENT_GW_V4, CORP_HOST, Gate64Options, Topology};

use crate::common::{
    connect_iphttps, gate64_lines, make_certs, netns_test, path_str, serve_iphttps, status_json,
};
use crate::ipsec::{GATE64_ADDRESS6, TeredoIpsecLab};
use crate::ipsec_connect::POOL6;

/// strongSwan's name for ENCR_NULL_AUTH_AES_GMAC with a 256-bit key, as gate64's status
/// spells it too.
const GMAC_ESP: &str = "aes256gmac";
const INITIATE_TIMEOUT: Duration = Duration::from_secs(30);
const SETTLE_TIMEOUT: Duration = Duration::from_secs(15);

#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_iphttps_integrity_only_strongswan() {
    netns_test(
        "netns_ipsec_iphttps_integrity_only_strongswan",
        Topology::builder(),
        iphttps_integrity_only,
    );
}

fn iphttps_integrity_only(topo: &Topology) -> Result<()> {
    let tls = make_certs(topo)?;
    let ike = LabCerts::generate(
        &topo.srv,
        &topo.srv.dir().join("ike-certs"),
        IpAddr::V6(GATE64_ADDRESS6),
    )?;
    let infrastructure_ts = format!("{CORP_HOST}/128");
    let mut conf = Gate64Options {
        without_ipsec: false,
        extra: format!(
            "[ipsec]\ncertificate = \"{}\"\nprivate_key = \"{}\"\nca = \"{}\"\n\
             pool6 = \"{POOL6}\"\nendpoint = \"{GATE64_ADDRESS6}\"\n\
             infrastructure_prefixes = [\"{infrastructure_ts}\"]\n\
             iphttps_integrity_only = true\n",
            path_str(&ike.responder_cert)?,
            path_str(&ike.responder_key)?,
            path_str(&ike.ca)?,
        ),
        ..Gate64Options::default()
    }
    .config_toml();
    conf.push_str(&format!(
        "\n[iphttps]\nenabled = true\nlisten = \"{CLIENT_GW_V4}:443\"\ncertificate = {:?}\n\
         private_key = {:?}\nprefix = \"2001:db8:1::/48\"\n\n[control]\nsocket = {:?}\n",
        path_str(&tls.join("server.pem"))?,
        path_str(&tls.join("server.key"))?,
        path_str(&topo.srv.dir().join("control.sock"))?,
    ));
    let mut gate = serve_iphttps(topo, "gate64-ipsec-gmac.toml", &conf)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    let (mut client, addr) = connect_iphttps(topo, &tls, false)?;
    let mut config = CharonConfig::initiator(
        IpAddr::V6(GATE64_ADDRESS6),
        ike.initiator(),
        vec![Tunnel::new(INFRASTRUCTURE, &[&infrastructure_ts])],
    );
    config.esp_proposals = vec![GMAC_ESP.to_owned()];
    let initiator = Charon::start(&topo.cli, "initiator", config)?;
    let result = (|| -> Result<String> {
        initiator.load_all()?;
        initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT)?;
        let sas = initiator.wait_established(1, 1, SETTLE_TIMEOUT)?;
        ensure!(
            sas.iter().all(|s| s.local_host == addr.to_string()),
            "IKE does not run from the IP-HTTPS address {addr}: {sas:#?}"
        );
        // One unasserted ping first: the checks are on the steady state.
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping the corporate host through the AES-GMAC infrastructure tunnel")?;
        initiator.swanctl(&["--list-sas"], Duration::from_secs(10))
    })();
    let sas = with_charon_logs(result, &[&initiator])?;
    ensure!(
        sas.contains("GMAC"),
        "charon's child SA is not AES-GMAC:\n{sas}"
    );
    let status = status_json(topo)?;
    let children: Vec<&serde_json::Value> = status["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["sas"].as_array().into_iter().flatten())
        .collect();
    ensure!(
        children.len() == 1
            && children[0]["esp"] == GMAC_ESP
            && children[0]["packets_in"].as_u64().unwrap_or(0) >= 3
            && children[0]["packets_out"].as_u64().unwrap_or(0) >= 3,
        "gate64 status does not show one {GMAC_ESP} child SA with traffic:\n{status:#}"
    );
    let m = topo.metrics()?;
    for reason in ["esp_auth", "esp_replay", "malformed", "truncated"] {
        let v = m.sum("gate64_drops_total", &[("reason", reason)]);
        ensure!(
            v == 0.0,
            "gate64_drops_total{{reason=\"{reason}\"}} is {v}\n{}",
            gate64_lines(&m)
        );
    }
    client.ensure_running()?;
    gate.ensure_running()
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_teredo_refuses_integrity_only() {
    netns_test(
        "netns_ipsec_teredo_refuses_integrity_only",
        Topology::builder(),
        teredo_refuses,
    );
}

fn teredo_refuses(topo: &Topology) -> Result<()> {
    // IP-HTTPS is on too, so the setting is in force: only the transport differs.
    let tls = make_certs(topo)?;
    let iphttps = format!(
        "\n[iphttps]\nenabled = true\nlisten = \"{CLIENT_GW_V4}:443\"\ncertificate = {:?}\n\
         private_key = {:?}\nprefix = \"2001:db8:1::/48\"\n",
        path_str(&tls.join("server.pem"))?,
        path_str(&tls.join("server.key"))?,
    );
    let mut lab = TeredoIpsecLab::start_accounting(
        topo,
        None,
        "iphttps_integrity_only = true\n",
        None,
        &iphttps,
        |_| Ok(()),
    )?;
    let mut config = CharonConfig::initiator(
        IpAddr::V6(GATE64_ADDRESS6),
        lab.certs.initiator(),
        vec![Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")])],
    );
    config.esp_proposals = vec![GMAC_ESP.to_owned()];
    let initiator = Charon::start(&topo.cli, "initiator", config)?;
    initiator.load_all()?;
    let outcome = initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT);
    ensure!(
        outcome.is_err(),
        "a Teredo client got an AES-GMAC child SA: {outcome:?}"
    );
    let log = std::fs::read_to_string(initiator.log_path()).unwrap_or_default();
    ensure!(
        log.contains("NO_PROPOSAL_CHOSEN"),
        "charon did not see NO_PROPOSAL_CHOSEN:\n{}",
        initiator.log_tail(60)
    );
    let m = topo.metrics()?;
    let refused = m.sum("gate64_ike_refused_total", &[("reason", "no_proposal")]);
    ensure!(
        refused >= 1.0,
        "gate64_ike_refused_total{{reason=\"no_proposal\"}} is {refused}\n{}",
        gate64_lines(&m)
    );
    let qmsa = m.sum("gate64_ipsec_qmsa", &[]);
    ensure!(
        qmsa == 0.0,
        "gate64_ipsec_qmsa is {qmsa}\n{}",
        gate64_lines(&m)
    );
    lab.gate.ensure_running()
}
