//! Native clients' IKE SA proposals against `gate64 serve`, with strongSwan's charon (over
//! Debian's Miredo client) proposing one set at a time:
//!
//! - `netns_ike_proposals_native_sets`: macOS's `aes256-sha256-modp2048` (AES-CBC-256,
//!   HMAC-SHA2-256-128, MODP-2048) and `aes256gcm16-prfsha384-ecp384`: each builds both
//!   tunnels (ESP stays AES-GCM-16-256), charon logs the proposal gate64 selected, and a ping
//!   crosses the infrastructure tunnel.
//! - `netns_ike_proposals_windows_legacy`: Windows' default `aes256-sha1-modp1024` is refused
//!   (NO_PROPOSAL_CHOSEN) with gate64's warn line naming `ipsec.legacy_proposals` and what was
//!   proposed; with `legacy_proposals = true` the same client builds both tunnels.

use std::net::IpAddr;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, Tunnel, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Topology, wait_for};

use crate::common::netns_test;
use crate::ipsec::{GATE64_ADDRESS6, INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab};

fn tunnels() -> Vec<Tunnel> {
    vec![
        Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ]
}

/// charon in `tcli` proposing only `proposal` for IKE.
fn charon<'a>(
    topo: &'a Topology,
    lab: &TeredoIpsecLab,
    label: &str,
    proposal: &str,
) -> Result<Charon<'a>> {
    let mut cfg = CharonConfig::initiator(
        IpAddr::V6(GATE64_ADDRESS6),
        lab.certs.initiator(),
        tunnels(),
    );
    cfg.ike_proposals = vec![proposal.to_owned()];
    Charon::start(&topo.cli, label, cfg)
}

/// Both tunnels up with the IKE proposal charon says was selected being `selected`, and a
/// ping through the infrastructure tunnel; then both are taken down again.
fn both_tunnels(topo: &Topology, initiator: &Charon<'_>, selected: &str) -> Result<()> {
    initiator.load_all()?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
    }
    initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
    let log = std::fs::read_to_string(initiator.log_path())?;
    let needle = format!("selected proposal: {selected}");
    ensure!(
        log.matches(&needle).count() >= 2,
        "charon did not log {needle:?} for both IKE SAs"
    );
    // One unasserted ping first, as in the other strongSwan tests: an early echo through a
    // fresh SA now and then goes unanswered.
    topo.ping6(&topo.cli, CORP_HOST, 1)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping the corporate host through the infrastructure tunnel")?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        initiator.terminate(tunnel, INITIATE_TIMEOUT)?;
    }
    Ok(())
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_proposals_native_sets() {
    netns_test(
        "netns_ike_proposals_native_sets",
        Topology::builder(),
        native_sets,
    );
}

fn native_sets(topo: &Topology) -> Result<()> {
    let mut lab = TeredoIpsecLab::start_with(topo, None, "", Some("info"))?;
    for (label, proposal, selected) in [
        (
            "macos",
            "aes256-sha256-modp2048",
            "IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048",
        ),
        (
            "ecp384",
            "aes256gcm16-prfsha384-ecp384",
            "IKE:AES_GCM_16_256/PRF_HMAC_SHA2_384/ECP_384",
        ),
    ] {
        let initiator = charon(topo, &lab, label, proposal)?;
        with_charon_logs(both_tunnels(topo, &initiator, selected), &[&initiator])
            .with_context(|| format!("IKE proposal {proposal}"))?;
    }
    lab.gate.ensure_running()
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_proposals_windows_legacy() {
    netns_test(
        "netns_ike_proposals_windows_legacy",
        Topology::builder(),
        windows_legacy,
    );
}

const WINDOWS: &str = "aes256-sha1-modp1024";

fn windows_legacy(topo: &Topology) -> Result<()> {
    {
        let mut lab = TeredoIpsecLab::start_with(topo, None, "", Some("info"))?;
        let initiator = charon(topo, &lab, "windows", WINDOWS)?;
        let result = (|| -> Result<()> {
            initiator.load_all()?;
            let refused = initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT);
            ensure!(refused.is_err(), "gate64 accepted {WINDOWS} by default");
            let log = std::fs::read_to_string(initiator.log_path())?;
            ensure!(
                log.contains("NO_PROPOSAL_CHOSEN"),
                "charon did not see NO_PROPOSAL_CHOSEN"
            );
            Ok(())
        })();
        with_charon_logs(result, &[&initiator])?;
        let line = wait_for(SETTLE_TIMEOUT, || {
            lab.gate
                .log()
                .lines()
                .find(|l| l.contains("ipsec.legacy_proposals"))
                .map(str::to_owned)
        })
        .with_context(|| {
            format!(
                "no log line names ipsec.legacy_proposals:\n{}",
                lab.gate.log()
            )
        })?;
        for needle in ["WARN", "aes256-sha1-prfsha1-modp1024", "modp1024"] {
            ensure!(line.contains(needle), "no {needle:?} in {line}");
        }
        lab.gate.ensure_running()?;
    }
    let mut lab = TeredoIpsecLab::start_with(topo, None, "legacy_proposals = true\n", None)?;
    let initiator = charon(topo, &lab, "windows-legacy", WINDOWS)?;
    with_charon_logs(
        both_tunnels(
            topo,
            &initiator,
            "IKE:AES_CBC_256/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_1024",
        ),
        &[&initiator],
    )?;
    lab.gate.ensure_running()
}
