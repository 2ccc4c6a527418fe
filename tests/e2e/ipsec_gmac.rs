//! `[ipsec] iphttps_integrity_only`: ESP with integrity only (AES-GMAC, RFC 4543) for IP-HTTPS
//! clients, whose TLS already encrypts the hop, and never for Teredo ones.
//!
//! - `netns_ipsec_iphttps_integrity_only_strongswan`: gate64 with the key on and IP-HTTPS;
//!   strongSwan's charon in `tcli`, over the IP-HTTPS TUN device of `gate64 connect iphttps
//!   --no-ipsec`, proposes only `esp_proposals = aes256gmac`; gate64 chooses it and charon
//!   selects gate64's answer (`ESP:NULL_AES_GMAC_256`). The lab's charon cannot carry the
//!   packets: its userspace ESP (kernel-libipsec) has no AES-GMAC.
//! - `netns_ipsec_connect_iphttps_integrity_only`: `gate64 connect iphttps` with IPsec offers
//!   AES-GMAC; gate64 with the key on takes it for both tunnels (`aes256gmac` in its status),
//!   pings reach the corporate host through the infrastructure tunnel, and nothing fails ESP
//!   authentication.
//! - `netns_ipsec_teredo_refuses_integrity_only`: gate64 with the key on answers the same
//!   GMAC-only proposal from charon over Teredo (Miredo), with IP-HTTPS enabled beside it,
//!   NO_PROPOSAL_CHOSEN, counted as
//!   `gate64_ike_refused_total{reason="no_proposal"}`, and installs no child SA.

use std::net::IpAddr;
use std::time::Duration;

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{Charon, CharonConfig, INFRASTRUCTURE, LabCerts, Tunnel};
use gate64_testkit::{CLIENT_GW_V4, CORP_HOST, Process, Topology, gate64_binary, wait_until};

use crate::common::{
    connect_iphttps, expect_no_proposal, gate64_lines, iphttps_ipsec_argv, iphttps_section,
    make_certs, netns_test, serve_iphttps_ipsec, status_json,
};
use crate::ipsec::{GATE64_ADDRESS6, TeredoIpsecLab};

/// strongSwan's name for ENCR_NULL_AUTH_AES_GMAC with a 256-bit key, as gate64's status
/// spells it too.
const GMAC_ESP: &str = "aes256gmac";
const INITIATE_TIMEOUT: Duration = Duration::from_secs(30);

#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_iphttps_integrity_only_strongswan() {
    netns_test(
        "netns_ipsec_iphttps_integrity_only_strongswan",
        Topology::builder(),
        strongswan_negotiates,
    );
}

/// `gate64 serve` with IPsec, IP-HTTPS and `iphttps_integrity_only = true` in `tsrv`, the
/// corporate side routing the pool back; the TLS and IKE credentials.
fn serve(topo: &Topology) -> Result<(Process, PathBuf, LabCerts)> {
    serve_iphttps_ipsec(
        topo,
        "gate64-ipsec-gmac.toml",
        "iphttps_integrity_only = true\n",
    )
}

/// strongSwan's userspace ESP (kernel-libipsec, the lab's) has no AES-GMAC ("unsupported
/// AEAD algorithm NULL_AES_GMAC"), so this checks the negotiation: gate64 chooses the
/// transform and charon takes gate64's answer as its selected proposal. The packets are
/// `netns_ipsec_connect_iphttps_integrity_only`'s.
fn strongswan_negotiates(topo: &Topology) -> Result<()> {
    let (mut gate, tls, ike) = serve(topo)?;
    let (mut client, _addr) = connect_iphttps(topo, &tls, false)?;
    let mut config = CharonConfig::initiator(
        IpAddr::V6(GATE64_ADDRESS6),
        ike.initiator(),
        vec![Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")])],
    );
    config.esp_proposals = vec![GMAC_ESP.to_owned()];
    let initiator = Charon::start(&topo.cli, "initiator", config)?;
    initiator.load_all()?;
    // Fails in charon's own ESP, after the negotiation.
    let _ = initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT);
    let log = std::fs::read_to_string(initiator.log_path()).unwrap_or_default();
    ensure!(
        log.contains("selected proposal: ESP:NULL_AES_GMAC_256"),
        "charon did not select gate64's AES-GMAC answer:\n{}",
        initiator.log_tail(60)
    );
    ensure!(
        !log.contains("NO_PROPOSAL_CHOSEN"),
        "gate64 refused AES-GMAC over IP-HTTPS:\n{}",
        initiator.log_tail(60)
    );
    client.ensure_running()?;
    gate.ensure_running()
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_connect_iphttps_integrity_only() {
    netns_test(
        "netns_ipsec_connect_iphttps_integrity_only",
        Topology::builder(),
        connect_pings,
    );
}

/// `gate64 connect iphttps` with IPsec offers AES-256-GMAC before AES-256-GCM; with the key
/// on gate64 takes it for both tunnels, and pings to the corporate host go through.
fn connect_pings(topo: &Topology) -> Result<()> {
    let (mut gate, tls, ike) = serve(topo)?;
    let bin = gate64_binary()?;
    let url = format!("https://{CLIENT_GW_V4}/IPHTTPS");
    let endpoint = GATE64_ADDRESS6.to_string();
    let infrastructure_ts = format!("{CORP_HOST}/128");
    let tls_ca = tls.join("ca.pem");
    let mut argv = vec!["env", "RUST_LOG=debug,rustls=info"];
    argv.extend(iphttps_ipsec_argv(
        &bin,
        (&url, &tls_ca),
        &endpoint,
        (&ike.initiator_cert, &ike.initiator_key, &ike.ca),
        (&infrastructure_ts, "2001:db8:100::/48"),
    )?);
    let mut client = topo.cli.spawn("gate64-connect-iphttps-ipsec", &argv)?;
    let gmac_sas = |status: &serde_json::Value| {
        status["clients"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["sas"].as_array().into_iter().flatten())
            .filter(|sa| sa["esp"] == GMAC_ESP)
            .count()
    };
    let up = wait_until(Duration::from_secs(60), || {
        status_json(topo).is_ok_and(|s| gmac_sas(&s) >= 2)
    });
    client.ensure_running()?;
    ensure!(
        up,
        "gate64 status does not show two {GMAC_ESP} child SAs:\n{:#}\n{}",
        status_json(topo)?,
        client.log()
    );
    let reached = wait_until(Duration::from_secs(20), || {
        topo.ping6(&topo.cli, CORP_HOST, 1).is_ok()
    });
    ensure!(
        reached,
        "no ping through the AES-GMAC tunnel:\n{}",
        client.log()
    );
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping the corporate host through the AES-GMAC infrastructure tunnel")?;
    let status = status_json(topo)?;
    let carried = status["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["sas"].as_array().into_iter().flatten())
        .any(|sa| {
            sa["esp"] == GMAC_ESP
                && sa["packets_in"].as_u64().unwrap_or(0) >= 3
                && sa["packets_out"].as_u64().unwrap_or(0) >= 3
        });
    ensure!(
        carried,
        "no {GMAC_ESP} child SA carried the pings:\n{status:#}"
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
    let iphttps = iphttps_section(&tls)?;
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
    expect_no_proposal(
        topo,
        &initiator,
        INITIATE_TIMEOUT,
        "a Teredo client asking for AES-GMAC",
    )?;
    lab.gate.ensure_running()
}
