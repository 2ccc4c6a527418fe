//! strongSwan on both ends (interop-strongswan.md): the reference peer for gate64's IKE and ESP,
//! and the proof that `gate64_testkit::strongswan` builds the DirectAccess shape, two IKE SAs
//! and two child SAs per client (infrastructure and intranet).
//!
//! - `netns_strongswan_reference_two_tunnels_veth`: initiator and responder on one IPv6 veth.
//! - `netns_strongswan_reference_refuses_a_client_of_another_ca`: IKE_AUTH fails, no SA.
//! - `netns_strongswan_reference_two_tunnels_over_teredo`: the initiator in `tcli` builds both
//!   tunnels over Debian's miredo client, through Miredo's own Teredo server and relay in
//!   `tsrv`, to the responder in `tcorp`; pings reach an address inside each tunnel's selector.
//!
//! The Teredo lab uses Miredo's server and relay rather than `gate64 serve` so that this
//! reference measures strongSwan alone, whatever gate64's IPsec policy does to IKE it does not
//! terminate itself.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, IkeSa, LabCerts, RESPONDER_CONNECTION, Tunnel,
    find_child, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Netns, Topology, find_tool, netns_or_skip, wait_for};

use crate::common::{netns_test, path_str};

/// The infrastructure tunnel's corporate side: one host (DNS64, domain controller).
const INFRASTRUCTURE_TS: &str = "fd00:c0::53/128";
/// The intranet tunnel's corporate side; it contains the infrastructure host, and the more
/// specific selector must still win for that host.
const INTRANET_TS: &str = "fd00:c0::/64";
/// Pinged through the infrastructure tunnel.
const INFRASTRUCTURE_HOST: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc0, 0, 0, 0, 0, 0, 0x53);
/// Pinged through the intranet tunnel.
const INTRANET_HOST: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc0, 0, 0, 0, 0, 0, 1);
/// The responder's pool of inner addresses (the `[ipsec] pool6` of the design).
const POOL6: &str = "fd00:c1::100/120";
const POOL6_BASE: u128 = 0xfd00_00c1_0000_0000_0000_0000_0000_0100;
const POOL6_SIZE: u128 = 256;
/// One IKE_SA_INIT + IKE_AUTH; generous for retransmissions over a fresh Teredo path.
const INITIATE_TIMEOUT: Duration = Duration::from_secs(30);
const SETTLE_TIMEOUT: Duration = Duration::from_secs(15);
const PINGS: u32 = 3;

/// The veth lab's addresses.
const VETH_INITIATOR: &str = "2001:db8:5::1";
const VETH_RESPONDER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 2);

fn tunnels() -> Vec<Tunnel> {
    vec![
        Tunnel::new(INFRASTRUCTURE, &[INFRASTRUCTURE_TS]),
        Tunnel::new(INTRANET, &[INTRANET_TS]),
    ]
}

#[test]
#[ignore = "netns: needs root"]
fn netns_strongswan_reference_two_tunnels_veth() {
    let name = "netns_strongswan_reference_two_tunnels_veth";
    if !netns_or_skip(name) {
        return;
    }
    let cli = Netns::new("swcli").expect("netns");
    let corp = Netns::new("swcorp").expect("netns");
    if let Err(e) = two_tunnels_veth(&cli, &corp) {
        panic!("{name}: {e:#}\n{}{}", cli.logs_report(), corp.logs_report());
    }
}

fn two_tunnels_veth(cli: &Netns, corp: &Netns) -> Result<()> {
    cli.veth("vcorp", corp, "vcli")?;
    cli.addr_add("vcorp", &format!("{VETH_INITIATOR}/64"))?;
    corp.addr_add("vcli", &format!("{VETH_RESPONDER}/64"))?;
    let initiator_addr: IpAddr = VETH_INITIATOR.parse().context("constant")?;
    two_tunnels(cli, corp, VETH_RESPONDER, initiator_addr)
}

#[test]
#[ignore = "netns: needs root"]
fn netns_strongswan_reference_refuses_a_client_of_another_ca() {
    let name = "netns_strongswan_reference_refuses_a_client_of_another_ca";
    if !netns_or_skip(name) {
        return;
    }
    let cli = Netns::new("swcli").expect("netns");
    let corp = Netns::new("swcorp").expect("netns");
    if let Err(e) = another_ca(&cli, &corp) {
        panic!("{name}: {e:#}\n{}{}", cli.logs_report(), corp.logs_report());
    }
}

/// The client trusts the responder, but its own certificate comes from a CA the responder
/// does not know: IKE_AUTH fails, and neither side keeps an SA (the failure path the fixture
/// must report, as gate64's negative tests will use it).
fn another_ca(cli: &Netns, corp: &Netns) -> Result<()> {
    cli.veth("vcorp", corp, "vcli")?;
    cli.addr_add("vcorp", &format!("{VETH_INITIATOR}/64"))?;
    corp.addr_add("vcli", &format!("{VETH_RESPONDER}/64"))?;
    let server = IpAddr::V6(VETH_RESPONDER);
    let lab = LabCerts::generate(corp, &corp.dir().join("lab"), server)?;
    let other = LabCerts::generate(corp, &corp.dir().join("other"), server)?;
    let responder = Charon::start(
        corp,
        "responder",
        CharonConfig::responder(Some(server), lab.responder(), tunnels(), POOL6),
    )?;
    let mut credentials = other.initiator();
    credentials.cas = vec![lab.ca.clone()];
    let initiator = Charon::start(
        cli,
        "initiator",
        CharonConfig::initiator(server, credentials, tunnels()),
    )?;
    let scenario = || -> Result<()> {
        responder.load_all()?;
        initiator.load_all()?;
        let refused = initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT);
        let err = match refused {
            Ok(out) => anyhow::bail!("a client of another CA got in:\n{out}"),
            Err(e) => format!("{e:#}"),
        };
        ensure!(
            err.contains("AUTHENTICATION_FAILED"),
            "initiate failed, but not with AUTHENTICATION_FAILED: {err}"
        );
        initiator.wait_established(0, 0, SETTLE_TIMEOUT)?;
        responder.wait_established(0, 0, SETTLE_TIMEOUT)?;
        Ok(())
    };
    with_charon_logs(scenario(), &[&initiator, &responder])
}

#[test]
#[ignore = "netns: needs root"]
fn netns_strongswan_reference_two_tunnels_over_teredo() {
    netns_test(
        "netns_strongswan_reference_two_tunnels_over_teredo",
        Topology::builder(),
        two_tunnels_over_teredo,
    );
}

fn two_tunnels_over_teredo(topo: &Topology) -> Result<()> {
    let _pair = topo.start_reference_pair()?;
    let (_client, teredo_addr) = crate::teredo::qualify(topo)?;
    // The first packets to a native host go through Teredo's connectivity test and bubbles
    // (teredo-iphttps.md §1.7): get that done before IKE's first message.
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp over Teredo before IKE")?;
    two_tunnels(&topo.cli, &topo.corp, CORP_HOST, IpAddr::V6(teredo_addr))
}

/// Responder in `corp` on `server`, initiator in `cli` (whose IKE address is `client_addr`):
/// both tunnels up, the SA tables on both ends agree, each tunnel carries its own pings, and
/// terminating one tunnel leaves the other.
fn two_tunnels(cli: &Netns, corp: &Netns, server: Ipv6Addr, client_addr: IpAddr) -> Result<()> {
    corp.addr_add("lo", &format!("{INFRASTRUCTURE_HOST}/128"))?;
    corp.addr_add("lo", &format!("{INTRANET_HOST}/64"))?;
    let server = IpAddr::V6(server);
    let certs = LabCerts::generate(corp, &corp.dir().join("certs"), server)?;
    let responder = Charon::start(
        corp,
        "responder",
        CharonConfig::responder(Some(server), certs.responder(), tunnels(), POOL6),
    )?;
    let initiator = Charon::start(
        cli,
        "initiator",
        CharonConfig::initiator(server, certs.initiator(), tunnels()),
    )?;
    with_charon_logs(
        exercise(cli, &initiator, &responder, client_addr),
        &[&initiator, &responder],
    )
}

fn exercise(
    cli: &Netns,
    initiator: &Charon<'_>,
    responder: &Charon<'_>,
    client_addr: IpAddr,
) -> Result<()> {
    responder.load_all()?;
    initiator.load_all()?;
    // One after the other: each IKE SA is its own exchange (reuse_ikesa = no).
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
    }
    let client = initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
    let server = responder.wait_established(2, 2, SETTLE_TIMEOUT)?;
    check_tables(&client, &server, client_addr)?;

    for (tunnel, host, other) in [
        (INFRASTRUCTURE, INFRASTRUCTURE_HOST, INTRANET),
        (INTRANET, INTRANET_HOST, INFRASTRUCTURE),
    ] {
        let before = initiator.list_sas()?;
        ping_all(cli, host).with_context(|| format!("ping {host} through {tunnel}"))?;
        let after = initiator.list_sas()?;
        let delta = |name: &str| -> Result<(u64, u64)> {
            let (b, a) = (child(&before, name)?, child(&after, name)?);
            Ok((
                a.packets_out.saturating_sub(b.packets_out),
                a.packets_in.saturating_sub(b.packets_in),
            ))
        };
        let (out, inn) = delta(tunnel)?;
        let p = u64::from(PINGS);
        ensure!(
            out >= p && inn >= p,
            "{tunnel}: {out} packets out, {inn} in for {PINGS} pings to {host}"
        );
        // The intranet selector covers the infrastructure host too: the more specific
        // selector must carry its traffic, and no ping may leak into the other tunnel.
        ensure!(
            delta(other)? == (0, 0),
            "pings to {host} went through {other} too: {:?}",
            delta(other)?
        );
    }
    let server = responder.list_sas()?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        let c = child(&server, tunnel)?;
        ensure!(
            c.packets_in >= u64::from(PINGS) && c.packets_out >= u64::from(PINGS),
            "responder's {tunnel} child SA counted {c:?}"
        );
    }

    let (client, server) = rekey(initiator, responder)?;
    check_tables(&client, &server, client_addr).context("after the rekeys")?;
    ping_all(cli, INTRANET_HOST).context("intranet after the rekeys")?;

    initiator.terminate(INTRANET, Duration::from_secs(10))?;
    initiator.wait_established(1, 1, SETTLE_TIMEOUT)?;
    let server = responder.wait_established(1, 1, SETTLE_TIMEOUT)?;
    ensure!(
        child(&server, INFRASTRUCTURE).is_ok(),
        "the infrastructure tunnel went down with the intranet tunnel: {server:#?}"
    );
    ping_all(cli, INFRASTRUCTURE_HOST).context("infrastructure after intranet went down")?;
    Ok(())
}

/// Rekeys the intranet child SA and the infrastructure IKE SA from the initiator; the
/// initiator then shows new SPIs for both, and each end two IKE SAs and two child SAs again.
/// Returns both tables.
fn rekey(initiator: &Charon<'_>, responder: &Charon<'_>) -> Result<(Vec<IkeSa>, Vec<IkeSa>)> {
    let before = initiator.list_sas()?;
    let old_child = child(&before, INTRANET)?.spi_in;
    let old_ike = ike(&before, INFRASTRUCTURE)?.spis;
    initiator.rekey_child(INTRANET)?;
    initiator.rekey_ike(INFRASTRUCTURE)?;
    let rekeyed = |sas: &[IkeSa]| {
        let child_new = find_child(sas, INTRANET).is_some_and(|c| c.spi_in != old_child);
        let ike_new = sas.iter().all(|s| s.spis != old_ike);
        child_new && ike_new
    };
    let done = wait_for(SETTLE_TIMEOUT, || {
        let sas = initiator.list_sas().ok()?;
        rekeyed(&sas).then_some(())
    });
    ensure!(
        done.is_some(),
        "no new intranet child SPI (old {old_child:08x}) or infrastructure IKE SPIs (old \
         {old_ike:x?}) within {SETTLE_TIMEOUT:?}: {:#?}",
        initiator.list_sas()
    );
    // The old SAs are deleted once the rekey completes: back to exactly two and two.
    let client = initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
    let server = responder.wait_established(2, 2, SETTLE_TIMEOUT)?;
    ensure!(
        rekeyed(&client),
        "after the rekeys, the initiator shows {client:#?}"
    );
    Ok((client, server))
}

fn ike<'a>(sas: &'a [IkeSa], name: &str) -> Result<&'a IkeSa> {
    let mut found = sas.iter().filter(|s| s.name == name);
    match (found.next(), found.next()) {
        (Some(sa), None) => Ok(sa),
        _ => anyhow::bail!("not exactly one IKE SA {name}: {sas:#?}"),
    }
}

/// Both tables show two IKE SAs with one child each, the same SPIs crosswise, and an inner
/// address from the pool that is not the client's IKE address (pitfall 2).
fn check_tables(client: &[IkeSa], server: &[IkeSa], client_addr: IpAddr) -> Result<()> {
    let mut names: Vec<&str> = client.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    ensure!(
        names == [INFRASTRUCTURE, INTRANET],
        "initiator IKE SAs: {names:?}"
    );
    ensure!(
        server.iter().all(|s| s.name == RESPONDER_CONNECTION),
        "responder IKE SAs: {server:#?}"
    );
    for sa in client {
        ensure!(
            sa.children.len() == 1 && sa.children[0].name == sa.name,
            "initiator IKE SA {} has children {:?}",
            sa.name,
            sa.children
        );
        ensure!(
            sa.local_host == client_addr.to_string() && sa.remote_port == 4500,
            "IKE SA {} runs {} -> {}:{} (expected from {client_addr}, NAT-T port 4500)",
            sa.name,
            sa.local_host,
            sa.remote_host,
            sa.remote_port
        );
        let vip = sa.local_vips.first().copied();
        let in_pool = vip.is_some_and(|v| match v {
            IpAddr::V6(v) => (POOL6_BASE..POOL6_BASE + POOL6_SIZE).contains(&u128::from(v)),
            IpAddr::V4(_) => false,
        });
        ensure!(
            in_pool && vip != Some(client_addr),
            "IKE SA {}: virtual IP {vip:?} not from {POOL6}",
            sa.name
        );
        let theirs = server
            .iter()
            .find(|s| s.spis == sa.spis)
            .with_context(|| format!("no responder IKE SA with SPIs {:x?}", sa.spis))?;
        ensure!(
            theirs.remote_vips == sa.local_vips,
            "responder assigned {:?}, initiator uses {:?}",
            theirs.remote_vips,
            sa.local_vips
        );
        let (mine, peer) = (&sa.children[0], child(server, &sa.name)?);
        ensure!(
            mine.spi_in == peer.spi_out && mine.spi_out == peer.spi_in && mine.udp_encap,
            "child {}: initiator {mine:?}, responder {peer:?}",
            sa.name
        );
    }
    Ok(())
}

fn child<'a>(sas: &'a [IkeSa], name: &str) -> Result<&'a gate64_testkit::strongswan::ChildSa> {
    find_child(sas, name).with_context(|| format!("not exactly one child SA {name}: {sas:#?}"))
}

/// `ping -6 -c 3` from `ns`; fails unless every request was answered.
fn ping_all(ns: &Netns, dst: Ipv6Addr) -> Result<()> {
    let ping = find_tool("ping").context("`ping` not found: apt-get install iputils-ping")?;
    let (dst, count) = (dst.to_string(), PINGS.to_string());
    let out = ns.exec_timeout(
        &[
            path_str(&ping)?,
            "-6",
            "-n",
            "-c",
            &count,
            "-i",
            "0.2",
            "-W",
            "3",
            &dst,
        ],
        Duration::from_secs(20),
    )?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && text.contains(&format!("{PINGS} received")),
        "ping {dst}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
