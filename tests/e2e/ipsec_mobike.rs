//! MOBIKE (RFC 4555) with a native IKEv2 client:
//!
//! - `netns_strongswan_mobike_address_change`: strongSwan (charon with kernel-libipsec,
//!   `mobike = yes` by default) in a LAN namespace behind `tcli`, which masquerades it
//!   (nftables), connects to gate64's listen address 192.0.2.10 over IPv4 (the setup of
//!   `ipsec_native`). While an iperf3 flow runs through the tunnel, the client's LAN address
//!   changes (10.9.0.2 → 10.9.0.3; the NAT gives the new address another port); charon
//!   notices (kernel-netlink roam events) and sends UPDATE_SA_ADDRESSES; gate64 checks the
//!   new path with COOKIE2 and moves the SAs. The flow completes, the IKE SPIs are the same
//!   on both sides before and after (the child SA too, or its rekey on that IKE SA: charon
//!   with kernel-libipsec rekeys it after a move), gate64 follows the new NAT port, counts a
//!   `moved` MOBIKE update, and no second negotiation (IKE_AUTH) happened.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, IkeSa, LabCerts, Tunnel, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Gate64Options, Topology};

use crate::common::{gate64_ctl, gate64_lines, netns_test, path_str};
use crate::ipsec::{INITIATE_TIMEOUT, POOL6, SETTLE_TIMEOUT, ipsec_section_with_ca};
use crate::ipsec_native::{LanNat, lan_behind_nat_with};

/// gate64's public IPv4 address for native clients.
const LISTEN_V4: &str = "192.0.2.10";
/// The client's LAN address before and after it moves.
const LAN_BEFORE: &str = "10.9.0.2";
const LAN_AFTER: &str = "10.9.0.3";
/// How long the iperf3 flow runs; the address changes a few seconds in.
const FLOW_SECS: u32 = 15;

#[test]
#[ignore = "netns: needs root"]
fn netns_strongswan_mobike_address_change() {
    netns_test(
        "netns_strongswan_mobike_address_change",
        Topology::builder(),
        mobike_address_change,
    );
}

fn mobike_address_change(topo: &Topology) -> Result<()> {
    let iperf3 = gate64_testkit::find_tool("iperf3").context("`iperf3` not found")?;
    let iperf3 = path_str(&iperf3)?.to_owned();
    // The client's LAN behind tcli (10.9.0.1), masqueraded as tcli's own address.
    let lan = lan_behind_nat_with(
        topo,
        LanNat {
            client: &format!("{LAN_BEFORE}/24"),
            ..LanNat::default()
        },
    )?;
    // Deleting the first address keeps the second (same subnet) instead of taking it along.
    lan.sysctl("net.ipv4.conf.vnat.promote_secondaries", "1")?;
    topo.srv.addr_add("vcli", &format!("{LISTEN_V4}/24"))?;
    let listen: IpAddr = LISTEN_V4.parse()?;

    let certs = LabCerts::generate(&topo.srv, &topo.srv.dir().join("certs"), listen)?;
    let opts = Gate64Options {
        without_ipsec: false,
        extra: ipsec_section_with_ca(
            topo,
            &certs,
            &certs.ca,
            &format!("listen = [\"{listen}\"]\n"),
        )?,
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    let _iperf_server = topo.start_iperf_server()?;
    let ts = format!("{CORP_HOST}/128");
    let initiator = Charon::start(
        &lan,
        "initiator",
        CharonConfig::initiator(
            listen,
            certs.initiator(),
            vec![Tunnel::new(INFRASTRUCTURE, &[&ts])],
        ),
    )?;
    let result = (|| -> Result<()> {
        initiator.load_all()?;
        initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT)?;
        let before = initiator.wait_established(1, 1, SETTLE_TIMEOUT)?;
        topo.ping6(&lan, CORP_HOST, 1)?;
        topo.ping6_all(&lan, CORP_HOST, 3)
            .context("ping the corporate host before the move")?;
        let status_before = gate64_ctl(topo, &["status"])?;
        let port_before = encap_port(&status_before)?;
        ensure_same_spis(&status_before, &before)?;
        let m = topo.metrics()?;
        let negotiations = m.sum("gate64_ike_negotiations_total", &[]);

        let host = CORP_HOST.to_string();
        let secs = FLOW_SECS.to_string();
        let mut flow = lan.spawn(
            "iperf3-client",
            &[
                &iperf3,
                "-6",
                "-c",
                &host,
                "-t",
                &secs,
                "--connect-timeout",
                "5000",
            ],
        )?;
        std::thread::sleep(Duration::from_secs(4));
        lan.addr_add("vnat", &format!("{LAN_AFTER}/24"))?;
        lan.ip(&["addr", "del", &format!("{LAN_BEFORE}/24"), "dev", "vnat"])?;
        lan.ip(&["route", "replace", "default", "via", "10.9.0.1"])?;
        let status = flow
            .wait_timeout(Duration::from_secs(u64::from(FLOW_SECS) + 30))
            .context("iperf3 did not finish")?;
        let log = flow.log();
        ensure!(
            status.success() && log.contains("receiver"),
            "the iperf3 flow across the move failed ({status}):\n{log}"
        );

        let after = initiator.wait_established(1, 1, SETTLE_TIMEOUT)?;
        ensure!(
            after[0].local_host == LAN_AFTER,
            "charon moved its IKE SA to {LAN_AFTER}: {:?}",
            after[0]
        );
        ensure!(
            after[0].spis == before[0].spis,
            "the same IKE SA carries on: before {before:?}, after {after:?}"
        );
        let m = topo.metrics()?;
        let (child_before, child_after) = (&before[0].children[0], &after[0].children[0]);
        let same_child = (child_after.spi_in, child_after.spi_out)
            == (child_before.spi_in, child_before.spi_out);
        // charon with kernel-libipsec cannot change an installed SA's addresses: after a
        // MOBIKE move it rekeys its child SA on the same IKE SA (its log: "queueing
        // CHILD_REKEY task"). Either the child SA carried on or gate64 counted that rekey.
        let rekeys = m.sum("gate64_ipsec_rekeys_total", &[("kind", "child")]);
        ensure!(
            same_child || rekeys >= 1.0,
            "the child SA carried on or was rekeyed on the IKE SA: before {before:?}, after \
             {after:?}\n{}",
            gate64_lines(&m)
        );
        let status_after = gate64_ctl(topo, &["status"])?;
        ensure_same_spis(&status_after, &after)?;
        let port_after = encap_port(&status_after)?;
        ensure!(
            port_after != port_before,
            "gate64 follows the client's new NAT port ({port_before}):\n{status_after}"
        );
        topo.ping6_all(&lan, CORP_HOST, 3)
            .context("ping the corporate host after the move")?;
        let m = topo.metrics()?;
        let moved = m.sum("gate64_ike_mobike_updates_total", &[("result", "moved")]);
        ensure!(
            moved >= 1.0,
            "a MOBIKE move counted: {moved}\n{}",
            gate64_lines(&m)
        );
        let again = m.sum("gate64_ike_negotiations_total", &[]);
        ensure!(
            again == negotiations,
            "no second IKE_AUTH: negotiations {negotiations} then {again}\n{}",
            gate64_lines(&m)
        );
        println!("before:\n{status_before}\nafter:\n{status_after}");
        Ok(())
    })();
    with_charon_logs(result, &[&initiator])?;
    gate.ensure_running()
}

/// The client's UDP port of the (one) child SA in `gate64 status` (`ESP in UDP 4500:PORT`).
fn encap_port(status: &str) -> Result<u16> {
    let port = status
        .split("ESP in UDP 4500:")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok());
    port.with_context(|| format!("no ESP in UDP port in gate64 status:\n{status}"))
}

/// gate64's status shows the IKE SA and child SA charon listed in `sas`: the IKE SPI (the
/// initiator's) and gate64's inbound SPI (charon's outbound).
fn ensure_same_spis(status: &str, sas: &[IkeSa]) -> Result<()> {
    let sa = sas.first().context("no IKE SA")?;
    let child = sa.children.first().context("no child SA")?;
    for needle in [
        format!("IKE {:016x}", sa.spis.0),
        format!("in  {:08x}", child.spi_out),
        format!("out {:08x}", child.spi_in),
    ] {
        ensure!(
            status.contains(&needle),
            "no {needle:?} in gate64 status:\n{status}"
        );
    }
    Ok(())
}
