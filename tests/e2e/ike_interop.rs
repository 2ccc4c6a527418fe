//! gate64's IKEv2 responder against a real strongSwan initiator (charon with kernel-libipsec).
//!
//! - `netns_ike_strongswan_initiator_builds_two_tunnels`: strongSwan in `ikecli` with two
//!   connections (infrastructure and intranet, `reuse_ikesa = no`, `vips = ::`) reaches
//!   gate64's IKE driver (`gate64_io::ike`, run in-process on a thread inside `ikegw`) over a
//!   plain IPv6 veth. Both IKE SAs and both child SAs must be ESTABLISHED/INSTALLED in
//!   `swanctl --list-sas`, with the inner address gate64 gave from its pool, and the driver's
//!   sink must have seen two `ChildSaUp` events with the right tunnels and that address.
//!
//! Certificates come from strongSwan's `pki` (the fixture's `LabCerts`): gate64 uses the
//! responder's, strongSwan the initiator's, both under the one lab CA.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use gate64_ike::auth::{Credentials, TrustAnchors};
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::responder::{Event, Responder, ResponderConfig};
use gate64_io::ike::{IKE_PORT, IkeDriver, IkeSockets, NAT_T_PORT};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, LabCerts, Tunnel, find_child, with_charon_logs,
};
use gate64_testkit::{Netns, netns_or_skip};

const CLIENT: &str = "2001:db8:6::1";
const GATEWAY: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 2);
const INFRASTRUCTURE_TS: &str = "fd00:c0::53/128";
const INTRANET_TS: &str = "fd00:c0::/64";
const POOL6: &str = "fd00:c1::100/120";
/// The first address gate64's pool hands out (the all-zero host part is skipped).
const FIRST_LEASE: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc1, 0, 0, 0, 0, 0, 0x101);
const INITIATE_TIMEOUT: Duration = Duration::from_secs(30);
const SETTLE_TIMEOUT: Duration = Duration::from_secs(15);

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_strongswan_initiator_builds_two_tunnels() {
    let name = "netns_ike_strongswan_initiator_builds_two_tunnels";
    if !netns_or_skip(name) {
        return;
    }
    let cli = Netns::new("ikecli").expect("netns");
    let gw = Netns::new("ikegw").expect("netns");
    if let Err(e) = two_tunnels(&cli, &gw) {
        panic!("{name}: {e:#}\n{}{}", cli.logs_report(), gw.logs_report());
    }
}

fn tunnels() -> Vec<Tunnel> {
    vec![
        Tunnel::new(INFRASTRUCTURE, &[INFRASTRUCTURE_TS]),
        Tunnel::new(INTRANET, &[INTRANET_TS]),
    ]
}

/// gate64's responder configuration from the lab's responder certificate.
fn responder_config(certs: &LabCerts) -> Result<ResponderConfig> {
    let read = |p: &std::path::Path| std::fs::read(p).with_context(|| format!("{}", p.display()));
    let credentials =
        Credentials::from_pem(&read(&certs.responder_cert)?, &read(&certs.responder_key)?)
            .context("gate64 credentials from pki's files")?;
    let anchors = TrustAnchors::from_pem(&read(&certs.ca)?).context("lab CA")?;
    Ok(ResponderConfig::new(
        credentials,
        anchors,
        POOL6.parse()?,
        vec![INFRASTRUCTURE_TS.parse()?],
        vec![INTRANET_TS.parse()?],
    ))
}

fn two_tunnels(cli: &Netns, gw: &Netns) -> Result<()> {
    cli.veth("vgw", gw, "vcli")?;
    cli.addr_add("vgw", &format!("{CLIENT}/64"))?;
    gw.addr_add("vcli", &format!("{GATEWAY}/64"))?;
    let server = IpAddr::V6(GATEWAY);
    let certs = LabCerts::generate(gw, &gw.dir().join("certs"), server)?;
    let config = responder_config(&certs)?;

    let (events_tx, events) = mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let driver = gw.spawn_thread("ike-driver", move || -> Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async move {
            let sockets = IkeSockets::bind(GATEWAY, IKE_PORT, NAT_T_PORT)?;
            let responder = Responder::new(config, Instant::now(), SystemTime::now())?;
            let driver = IkeDriver::new(sockets, responder, move |e| {
                let _ = events_tx.send(e);
            });
            driver
                .run(async {
                    let _ = stopped.await;
                })
                .await?;
            Ok(())
        })
    })?;

    let initiator = Charon::start(
        cli,
        "initiator",
        CharonConfig::initiator(server, certs.initiator(), tunnels()),
    )?;
    let outcome = with_charon_logs(exercise(&initiator, &events), &[&initiator]);
    if outcome.is_ok() {
        // The proof in charon's own words, for `--nocapture` runs.
        let tail = initiator.log_tail(400);
        for line in tail
            .lines()
            .filter(|l| l.contains("established") || l.contains("assigned"))
        {
            eprintln!("charon: {line}");
        }
    }
    drop(initiator);
    let _ = stop.send(());
    let joined = driver
        .join()
        .map_err(|_| anyhow::anyhow!("the IKE driver thread panicked"))?;
    outcome?;
    joined?.context("IKE driver")
}

fn exercise(initiator: &Charon<'_>, events: &mpsc::Receiver<Event>) -> Result<()> {
    initiator.load_all()?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
    }
    let sas = initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        let child = find_child(&sas, tunnel).with_context(|| format!("no child SA {tunnel}"))?;
        ensure!(child.is_installed(), "{tunnel}: {child:?}");
        ensure!(
            child.udp_encap,
            "{tunnel}: libipsec's ESP should be UDP-encapsulated"
        );
    }
    for sa in &sas {
        ensure!(
            sa.local_vips == vec![IpAddr::V6(FIRST_LEASE)],
            "strongSwan's virtual IP is gate64's first lease: {sa:?}"
        );
    }

    let mut seen = Vec::new();
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    while seen.len() < 2 && Instant::now() < deadline {
        match events.recv_timeout(Duration::from_millis(500)) {
            Ok(Event::ChildSaUp(pair)) => seen.push(pair),
            Ok(Event::Refused { peer, reason }) => eprintln!("gate64 refused {peer}: {reason:?}"),
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the IKE driver stopped"),
        }
    }
    let mut tunnels: Vec<TunnelKind> = seen.iter().map(|p| p.tunnel).collect();
    tunnels.sort_by_key(|t| *t == TunnelKind::Intranet);
    ensure!(
        tunnels == vec![TunnelKind::Infrastructure, TunnelKind::Intranet],
        "gate64's child SAs: {seen:#?}"
    );
    for pair in &seen {
        ensure!(
            pair.peer.inner == vec![IpAddr::V6(FIRST_LEASE)],
            "inner address: {pair:#?}"
        );
        ensure!(
            pair.peer.udp_encap.is_some(),
            "UDP encapsulation: {pair:#?}"
        );
        let child = find_child(
            &sas,
            if pair.tunnel == TunnelKind::Intranet {
                INTRANET
            } else {
                INFRASTRUCTURE
            },
        )
        .context("child")?;
        ensure!(
            child.spi_out == pair.inbound.spi && child.spi_in == pair.outbound.spi,
            "SPIs agree: strongSwan {child:?} vs gate64 {pair:#?}"
        );
    }
    Ok(())
}
