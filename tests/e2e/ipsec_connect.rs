//! `gate64 connect` as a DirectAccess-style IPsec client (issue 8 item 7, tests 8(b) and 8(c)).
//!
//! - `netns_ipsec_connect_initiator_against_strongswan` (8(c)): `gate64 connect teredo` in
//!   `tcli` qualifies with `gate64 serve` in `tsrv` (Teredo server and relay, corporate side
//!   open: this test is about the client, not gate64's policy) and builds both tunnels, two
//!   IKE SAs with one child SA each, to strongSwan's charon in `tcorp` (the fixture's
//!   responder, userspace ESP). The client learns its inner address from the configuration
//!   payload and its routes from the traffic selectors (no `--route`); pings to a host inside
//!   each tunnel's selector and a short iperf3 go through the tunnels, as strongSwan's packet
//!   counters show.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, ChildSa, INFRASTRUCTURE, INTRANET, IkeSa, LabCerts, Tunnel, find_child,
    with_charon_logs,
};
use gate64_testkit::{
    CORP_HOST, Gate64Options, Process, SERVER_V4, Topology, gate64_binary, wait_for,
};

use crate::common::{netns_test, path_str};

/// The infrastructure tunnel's corporate side: one host (DNS64, domain controller).
const INFRASTRUCTURE_TS: &str = "fd00:c0::53/128";
/// The intranet tunnel's corporate side; it contains the infrastructure host.
const INTRANET_TS: &str = "fd00:c0::/64";
const INFRASTRUCTURE_HOST: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc0, 0, 0, 0, 0, 0, 0x53);
const INTRANET_HOST: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc0, 0, 0, 0, 0, 0, 1);
/// The responder's pool of inner addresses.
const POOL6: &str = "fd00:c1::100/120";
/// Qualification, then two IKE_SA_INIT + IKE_AUTH over a fresh Teredo path: generous.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(40);
const PINGS: u32 = 3;
/// The client's TUN device.
const IFNAME: &str = "gate64t";

fn tunnels() -> Vec<Tunnel> {
    vec![
        Tunnel::new(INFRASTRUCTURE, &[INFRASTRUCTURE_TS]),
        Tunnel::new(INTRANET, &[INTRANET_TS]),
    ]
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_connect_initiator_against_strongswan() {
    netns_test(
        "netns_ipsec_connect_initiator_against_strongswan",
        Topology::builder(),
        initiator_against_strongswan,
    );
}

fn initiator_against_strongswan(topo: &Topology) -> Result<()> {
    let mut gate = topo.start_gate64(&Gate64Options::default())?;
    let corp = &topo.corp;
    corp.addr_add("lo", &format!("{INFRASTRUCTURE_HOST}/128"))?;
    corp.addr_add("lo", &format!("{INTRANET_HOST}/64"))?;
    let server = IpAddr::V6(CORP_HOST);
    let certs = LabCerts::generate(corp, &corp.dir().join("certs"), server)?;
    let responder = Charon::start(
        corp,
        "responder",
        CharonConfig::responder(Some(server), certs.responder(), tunnels(), POOL6),
    )?;
    let mut scenario = || -> Result<()> {
        responder.load_all()?;
        let _iperf = topo.start_iperf_server()?;
        let mut client = spawn_client(topo, &certs)?;
        let sas = responder.wait_established(2, 2, ESTABLISH_TIMEOUT)?;
        ensure!(
            sas.iter().all(|s| s.children.len() == 1),
            "not one child SA per IKE SA: {sas:#?}"
        );
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            let c = child(&sas, tunnel)?;
            ensure!(c.udp_encap, "{tunnel}: ESP not UDP-encapsulated: {c:?}");
        }
        wait_routes(topo, &mut client)?;
        for (tunnel, host, other) in [
            (INFRASTRUCTURE, INFRASTRUCTURE_HOST, INTRANET),
            (INTRANET, INTRANET_HOST, INFRASTRUCTURE),
        ] {
            let before = responder.list_sas()?;
            topo.ping6_all(&topo.cli, host, PINGS)
                .with_context(|| format!("ping {host} through {tunnel}"))?;
            let after = responder.list_sas()?;
            let (inn, out) = delta(&before, &after, tunnel)?;
            let p = u64::from(PINGS);
            ensure!(
                inn >= p && out >= p,
                "{tunnel}: strongSwan counted {inn} packets in, {out} out for {PINGS} pings \
                 to {host}"
            );
            // The intranet selector covers the infrastructure host too: the narrower one
            // must carry its traffic.
            ensure!(
                delta(&before, &after, other)? == (0, 0),
                "pings to {host} went through {other} too"
            );
        }
        let before = responder.list_sas()?;
        let iperf = topo.iperf3_to(&INTRANET_HOST.to_string(), 3, 1, false, None)?;
        ensure!(
            iperf.received_bytes > 0,
            "iperf3 through the intranet tunnel: {iperf:?}"
        );
        let after = responder.list_sas()?;
        let (inn, _) = delta(&before, &after, INTRANET)?;
        ensure!(
            inn > 100,
            "iperf3's segments did not go through the intranet child SA ({inn} packets)"
        );
        println!(
            "gate64 connect + strongSwan: iperf3 {:.1} Mbit/s through the intranet tunnel",
            iperf.received_bps / 1e6
        );
        client.ensure_running()?;
        gate.ensure_running()?;
        Ok(())
    };
    with_charon_logs(scenario(), &[&responder])
}

/// `gate64 connect teredo` with IPsec towards the responder, asking for each tunnel's prefix.
fn spawn_client(topo: &Topology, certs: &LabCerts) -> Result<Process> {
    let bin = gate64_binary()?;
    let (server, endpoint) = (SERVER_V4.to_string(), CORP_HOST.to_string());
    topo.cli.spawn(
        "gate64-connect-ipsec",
        &[
            "env",
            "RUST_LOG=debug",
            path_str(&bin)?,
            "connect",
            "teredo",
            "--server",
            &server,
            "--ifname",
            IFNAME,
            "--ipsec-endpoint",
            &endpoint,
            "--ipsec-cert",
            path_str(&certs.initiator_cert)?,
            "--ipsec-key",
            path_str(&certs.initiator_key)?,
            "--ipsec-ca",
            path_str(&certs.ca)?,
            "--infrastructure-ts",
            INFRASTRUCTURE_TS,
            "--intranet-ts",
            INTRANET_TS,
        ],
    )
}

/// Waits until the client routed both tunnels' selectors into its TUN device (learnt from
/// the traffic selectors, not given with `--route`).
fn wait_routes(topo: &Topology, client: &mut Process) -> Result<()> {
    let routed = wait_for(Duration::from_secs(10), || {
        let r = topo.cli.ip(&["-6", "route", "show", "dev", IFNAME]).ok()?;
        (r.contains("fd00:c0::53 ") && r.contains("fd00:c0::/64")).then_some(())
    });
    client.ensure_running()?;
    ensure!(
        routed.is_some(),
        "the client did not route both selectors into {IFNAME}: {}",
        topo.cli
            .ip(&["-6", "route", "show", "dev", IFNAME])
            .unwrap_or_else(|e| e.to_string())
    );
    Ok(())
}

fn child<'a>(sas: &'a [IkeSa], name: &str) -> Result<&'a ChildSa> {
    find_child(sas, name).with_context(|| format!("not exactly one child SA {name}: {sas:#?}"))
}

/// Packets (in, out) strongSwan counted on child SA `name` between two listings.
fn delta(before: &[IkeSa], after: &[IkeSa], name: &str) -> Result<(u64, u64)> {
    let (b, a) = (child(before, name)?, child(after, name)?);
    Ok((
        a.packets_in.saturating_sub(b.packets_in),
        a.packets_out.saturating_sub(b.packets_out),
    ))
}
