//! ESP with AES-CBC and HMAC-SHA2-256-128, what macOS, iOS and Windows propose by default,
//! end to end against strongSwan's charon over Debian's Miredo client:
//!
//! - `netns_strongswan_esp_aes_cbc_sha256_over_teredo`: charon proposes only
//!   `esp_proposals = aes256-sha256` (macOS' ESP suite) for both tunnels; gate64 (default
//!   `esp_proposals`) accepts it, pings reach the corporate host through the infrastructure
//!   tunnel (and gate64 with both up), charon's and gate64's status show the suite on both
//!   child SAs, and gate64 counts no ESP authentication failure or malformed packet.
//! - `netns_strongswan_esp_cbc_refused_by_gcm_only_gate64`: gate64 with
//!   `esp_proposals = ["aes256gcm16"]` answers the same CBC-only client NO_PROPOSAL_CHOSEN,
//!   counted as `gate64_ike_refused_total{reason="no_proposal"}`, and installs no child SA.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, Tunnel, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Topology};

use crate::common::{expect_no_proposal, gate64_lines, netns_test, status_json};
use crate::ipsec::{GATE64_ADDRESS6, INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab};

/// macOS' (and iOS') ESP proposal in strongSwan's notation.
const MACOS_ESP: &str = "aes256-sha256";

/// A charon initiator in `tcli` proposing only AES-256-CBC + HMAC-SHA2-256-128 for ESP.
fn cbc_initiator<'a>(
    topo: &'a Topology,
    lab: &TeredoIpsecLab,
    tunnels: Vec<Tunnel>,
) -> Result<Charon<'a>> {
    let mut config =
        CharonConfig::initiator(IpAddr::V6(GATE64_ADDRESS6), lab.certs.initiator(), tunnels);
    config.esp_proposals = vec![MACOS_ESP.to_owned()];
    Charon::start(&topo.cli, "initiator", config)
}

#[test]
#[ignore = "netns: needs root"]
fn netns_strongswan_esp_aes_cbc_sha256_over_teredo() {
    netns_test(
        "netns_strongswan_esp_aes_cbc_sha256_over_teredo",
        Topology::builder(),
        esp_aes_cbc_sha256,
    );
}

fn esp_aes_cbc_sha256(topo: &Topology) -> Result<()> {
    let mut lab = TeredoIpsecLab::start(topo, None)?;
    let tunnels = vec![
        Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ];
    let initiator = cbc_initiator(topo, &lab, tunnels)?;
    let result = (|| -> Result<String> {
        initiator.load_all()?;
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
        // One unasserted ping first, as in the AES-GCM test: the checks are on the steady
        // state.
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping the corporate host through the AES-CBC infrastructure tunnel")?;
        topo.ping6_all(&topo.cli, GATE64_ADDRESS6, 3)
            .context("ping gate64 through the AES-CBC intranet tunnel")?;
        initiator.swanctl(&["--list-sas"], Duration::from_secs(10))
    })();
    let sas = with_charon_logs(result, &[&initiator])?;
    ensure!(
        sas.matches("AES_CBC-256/HMAC_SHA2_256_128").count() >= 2,
        "charon's child SAs are not AES_CBC-256/HMAC_SHA2_256_128:\n{sas}"
    );
    let status = status_json(topo)?;
    let children: Vec<&serde_json::Value> = status["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["sas"].as_array().into_iter().flatten())
        .collect();
    // The pings to gate64 itself leave outside the intranet tunnel (charon routes its IKE
    // peer's address outside the tunnels), so only the infrastructure SA must carry traffic.
    let carried = |sa: &serde_json::Value| {
        sa["packets_in"].as_u64().unwrap_or(0) >= 3 && sa["packets_out"].as_u64().unwrap_or(0) >= 3
    };
    ensure!(
        children.len() == 2
            && children.iter().all(|sa| sa["esp"] == MACOS_ESP)
            && children
                .iter()
                .any(|sa| sa["tunnel"] == INFRASTRUCTURE && carried(sa)),
        "gate64 status does not show two {MACOS_ESP} child SAs, the infrastructure one with \
         traffic:\n{status:#}"
    );
    let m = topo.metrics()?;
    for (name, at_least) in [("gate64_ipsec_qmsa", 2.0), ("gate64_ipsec_mmsa", 2.0)] {
        let v = m.sum(name, &[]);
        ensure!(v >= at_least, "{name} is {v}\n{}", gate64_lines(&m));
    }
    for reason in ["esp_auth", "esp_replay", "malformed", "truncated"] {
        let v = m.sum("gate64_drops_total", &[("reason", reason)]);
        ensure!(
            v == 0.0,
            "gate64_drops_total{{reason=\"{reason}\"}} is {v}\n{}",
            gate64_lines(&m)
        );
    }
    lab.gate.ensure_running()
}

#[test]
#[ignore = "netns: needs root"]
fn netns_strongswan_esp_cbc_refused_by_gcm_only_gate64() {
    netns_test(
        "netns_strongswan_esp_cbc_refused_by_gcm_only_gate64",
        Topology::builder(),
        esp_cbc_refused,
    );
}

fn esp_cbc_refused(topo: &Topology) -> Result<()> {
    let mut lab =
        TeredoIpsecLab::start_with(topo, None, "esp_proposals = [\"aes256gcm16\"]\n", None)?;
    let tunnels = vec![Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")])];
    let initiator = cbc_initiator(topo, &lab, tunnels)?;
    initiator.load_all()?;
    expect_no_proposal(
        topo,
        &initiator,
        INITIATE_TIMEOUT,
        "a CBC-only client of a GCM-only gate64",
    )?;
    lab.gate.ensure_running()
}
