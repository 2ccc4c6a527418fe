//! IPsec's security step end to end (issue 8), against Debian's Miredo client:
//!
//! - `netns_teredo_without_sa_reaches_only_gate64`: gate64 with `[ipsec] require = true` (the
//!   default) and no SA: the client qualifies and pings gate64 itself, its packets to the
//!   corporate host are dropped and counted (`no_sa`), and `gate64 status` on the control
//!   socket lists no SA.

use std::net::Ipv6Addr;

use anyhow::{Context, Result, ensure};
use gate64_testkit::{CORP_HOST, Gate64Options, Topology, gate64_binary};

use crate::common::{gate64_lines, netns_test, path_str};
use crate::teredo::qualify;

/// gate64's `corpnet.address6` in the lab configuration.
const GATE64_ADDRESS6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);

#[test]
#[ignore = "netns: needs root"]
fn netns_teredo_without_sa_reaches_only_gate64() {
    netns_test(
        "netns_teredo_without_sa_reaches_only_gate64",
        Topology::builder(),
        without_sa,
    );
}

fn without_sa(topo: &Topology) -> Result<()> {
    let socket = topo.srv.dir().join("control.sock");
    let opts = Gate64Options {
        without_ipsec: false,
        extra: format!("[control]\nsocket = \"{}\"\n", path_str(&socket)?),
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    let (_client, _addr) = qualify(topo)?;
    topo.ping6_all(&topo.cli, GATE64_ADDRESS6, 3)
        .context("ICMPv6 echo to gate64 itself is admitted without an SA")?;
    let corp = topo.ping6(&topo.cli, CORP_HOST, 3)?;
    ensure!(
        corp.transmitted == 3 && corp.received == 0,
        "the corporate host answered without an SA: {}",
        corp.output
    );
    gate.ensure_running()?;
    let m = topo.metrics()?;
    // Miredo holds a native destination's packets until its relay answers the first one
    // (RFC 4380 §5.2.4's connectivity test), so at least that one reaches the policy.
    let no_sa = m.sum("gate64_drops_total", &[("reason", "no_sa")]);
    ensure!(
        no_sa >= 1.0,
        "gate64_drops_total{{reason=\"no_sa\"}} is {no_sa}, expected >= 1\n{}",
        gate64_lines(&m)
    );
    let bin = gate64_binary()?;
    let status = topo
        .srv
        .exec_ok(&[path_str(&bin)?, "status", "--socket", path_str(&socket)?])?;
    ensure!(
        status.starts_with("gate64 IPsec not configured: 0 IKE SAs, 0 child SAs, 0 clients"),
        "gate64 status:\n{status}"
    );
    let json = topo.srv.exec_ok(&[
        path_str(&bin)?,
        "status",
        "--json",
        "--socket",
        path_str(&socket)?,
    ])?;
    ensure!(
        json.contains("\"require_ipsec\": true") && json.contains("\"clients\": []"),
        "gate64 status --json:\n{json}"
    );
    Ok(())
}
