//! gate64's IKEv2 responder against a real strongSwan initiator (charon with kernel-libipsec).
//!
//! - `netns_ike_strongswan_initiator_builds_two_tunnels`: strongSwan in `ikecli` with two
//!   connections (infrastructure and intranet, `reuse_ikesa = no`, `vips = ::`) reaches
//!   gate64's IKE driver (`gate64_io::ike`, run in-process on a thread inside `ikegw`) over a
//!   plain IPv6 veth. Both IKE SAs and both child SAs must be ESTABLISHED/INSTALLED in
//!   `swanctl --list-sas`, with the inner address gate64 gave from its pool, and the driver's
//!   sink must have seen two `ChildSaUp` events with the right tunnels and that address.
//!   gate64 sends its IKE_AUTH responses as RFC 7383 fragments (strongSwan reassembles them).
//!   strongSwan's ESP (a ping from its virtual IP into the infrastructure tunnel) must open
//!   with the inbound keys gate64 derived (gate64_esp). Then strongSwan rekeys the intranet
//!   child SA and the infrastructure IKE SA
//!   (CREATE_CHILD_SA) and terminates the intranet IKE SA (INFORMATIONAL Delete): gate64
//!   reports each step and strongSwan's table follows.
//! - `netns_ike_strongswan_client_of_another_ca_is_refused`: with cookies required for every
//!   IKE_SA_INIT (strongSwan must retry with one), a client certificate from a CA gate64
//!   does not trust gets AUTHENTICATION_FAILED, and gate64 reports why.
//!
//! - `netns_ike_gate64_initiator_against_strongswan_responder`: gate64's sans-IO initiator
//!   (run over plain sockets in `ikecli`) builds both tunnels, one IKE SA each, against
//!   strongSwan as the responder in `ikegw`, moving to 4500 as libipsec's faked NAT demands.
//!
//! Certificates come from strongSwan's `pki` (the fixture's `LabCerts`): gate64 uses the
//! responder's, strongSwan the initiator's, both under the one lab CA.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use gate64_ike::auth::{Credentials, TrustAnchors};
use gate64_ike::child_sa::{ChildSaPair, TunnelKind};
use gate64_ike::initiator::{Initiator, InitiatorConfig, InitiatorEvent};
use gate64_ike::keys::Group;
use gate64_ike::message::TrafficSelector;
use gate64_ike::responder::RekeyKind;
use gate64_ike::responder::{Event, Refusal, Responder, ResponderConfig};
use gate64_io::ike::{IKE_PORT, IkeDriver, IkeSockets, NAT_T_PORT};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, IkeSa, LabCerts, Tunnel, find_child,
    with_charon_logs,
};
use gate64_testkit::{Netns, netns_or_skip, wait_for};

pub(crate) const CLIENT: &str = "2001:db8:6::1";
pub(crate) const GATEWAY: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 2);
const INFRASTRUCTURE_TS: &str = "fd00:c0::53/128";
const INTRANET_TS: &str = "fd00:c0::/64";
const POOL6: &str = "fd00:c1::100/120";
/// The first address gate64's pool hands out (the all-zero host part and the first address,
/// gate64's own, are skipped).
const FIRST_LEASE: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc1, 0, 0, 0, 0, 0, 0x102);
/// The infrastructure tunnel's host (its whole selector).
const INFRASTRUCTURE_HOST: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc0, 0, 0, 0, 0, 0, 0x53);
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

pub(crate) fn tunnels() -> Vec<Tunnel> {
    vec![
        Tunnel::new(INFRASTRUCTURE, &[INFRASTRUCTURE_TS]),
        Tunnel::new(INTRANET, &[INTRANET_TS]),
    ]
}

/// gate64's responder configuration from the lab's responder certificate.
pub(crate) fn responder_config(certs: &LabCerts) -> Result<ResponderConfig> {
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

type DriverThread = std::thread::JoinHandle<Result<Result<()>>>;

/// gate64's IKE driver running on a thread inside the gateway namespace.
pub(crate) struct Driver {
    pub(crate) events: mpsc::Receiver<Event>,
    /// ESP datagrams that reached its NAT-T socket (no dataplane runs here).
    esp: mpsc::Receiver<Vec<u8>>,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: DriverThread,
}

impl Driver {
    pub(crate) fn start(gw: &Netns, config: ResponderConfig) -> Result<Driver> {
        let (events_tx, events) = mpsc::channel();
        let (esp_tx, esp) = mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = gw.spawn_thread("ike-driver", move || -> Result<()> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let sockets = IkeSockets::bind(GATEWAY, IKE_PORT, NAT_T_PORT)?;
                let responder = Responder::new(config, Instant::now(), SystemTime::now())?;
                let driver = IkeDriver::new(sockets, responder, move |e| {
                    let _ = events_tx.send(e);
                })
                .with_stray_esp(move |_, esp| {
                    let _ = esp_tx.send(esp.to_vec());
                });
                driver
                    .run(async {
                        let _ = stopped.await;
                    })
                    .await?;
                Ok(())
            })
        })?;
        Ok(Driver {
            events,
            esp,
            stop,
            thread,
        })
    }

    pub(crate) fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        let joined = self
            .thread
            .join()
            .map_err(|_| anyhow::anyhow!("the IKE driver thread panicked"))?;
        joined?.context("IKE driver")
    }
}

fn two_tunnels(cli: &Netns, gw: &Netns) -> Result<()> {
    cli.veth("vgw", gw, "vcli")?;
    cli.addr_add("vgw", &format!("{CLIENT}/64"))?;
    gw.addr_add("vcli", &format!("{GATEWAY}/64"))?;
    let server = IpAddr::V6(GATEWAY);
    let certs = LabCerts::generate(gw, &gw.dir().join("certs"), server)?;
    let mut config = responder_config(&certs)?;
    // Small enough that the IKE_AUTH responses (certificate + AUTH, ~800 bytes) go out as
    // RFC 7383 fragments, which strongSwan must reassemble.
    config.fragment_size = 500;
    let driver = Driver::start(gw, config)?;
    let initiator = Charon::start(
        cli,
        "initiator",
        CharonConfig::initiator(server, certs.initiator(), tunnels()),
    )?;
    let outcome = with_charon_logs(exercise(cli, &initiator, &driver), &[&initiator]);
    if outcome.is_ok() {
        print_proof(&initiator);
    }
    drop(initiator);
    let stopped = driver.stop();
    outcome?;
    stopped
}

fn exercise(cli: &Netns, initiator: &Charon<'_>, driver: &Driver) -> Result<()> {
    let events = &driver.events;
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
    check_children(&sas, &seen)?;
    esp_opens_with_gate64_keys(cli, driver, &seen)?;
    rekey_and_terminate(initiator, events)
}

fn check_children(sas: &[IkeSa], seen: &[Box<ChildSaPair>]) -> Result<()> {
    let mut tunnels: Vec<TunnelKind> = seen.iter().map(|p| p.tunnel).collect();
    tunnels.sort_by_key(|t| *t == TunnelKind::Intranet);
    ensure!(
        tunnels == vec![TunnelKind::Infrastructure, TunnelKind::Intranet],
        "gate64's child SAs: {seen:#?}"
    );
    for pair in seen {
        ensure!(
            pair.peer.inner == vec![IpAddr::V6(FIRST_LEASE)],
            "inner address: {pair:#?}"
        );
        ensure!(
            pair.peer.udp_encap.is_some(),
            "UDP encapsulation: {pair:#?}"
        );
        let child = find_child(sas, name_of(pair.tunnel)).context("child")?;
        ensure!(
            child.spi_out == pair.inbound.spi && child.spi_in == pair.outbound.spi,
            "SPIs agree: strongSwan {child:?} vs gate64 {pair:#?}"
        );
    }
    Ok(())
}

fn name_of(tunnel: TunnelKind) -> &'static str {
    match tunnel {
        TunnelKind::Infrastructure => INFRASTRUCTURE,
        TunnelKind::Intranet => INTRANET,
    }
}

/// Waits (bounded) for an event matching `want`; returns the events seen up to it.
pub(crate) fn wait_event(
    events: &mpsc::Receiver<Event>,
    what: &str,
    want: impl Fn(&Event) -> bool,
) -> Result<Vec<Event>> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        match events.recv_timeout(Duration::from_millis(200)) {
            Ok(e) => {
                let done = want(&e);
                seen.push(e);
                if done {
                    return Ok(seen);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the IKE driver stopped"),
        }
    }
    bail!("no {what} from gate64 within {SETTLE_TIMEOUT:?}; saw {seen:#?}")
}

/// strongSwan rekeys the intranet child SA, then the infrastructure IKE SA, then terminates
/// the intranet IKE SA; gate64 follows each (RFC 7296 §1.3.3, §2.18, §1.4.1).
fn rekey_and_terminate(initiator: &Charon<'_>, events: &mpsc::Receiver<Event>) -> Result<()> {
    let before = initiator.list_sas()?;
    let old = find_child(&before, INTRANET)
        .context("intranet child")?
        .spi_in;
    initiator.rekey_child(INTRANET)?;
    wait_event(events, "child rekey", |e| {
        matches!(
            e,
            Event::Rekeyed {
                kind: RekeyKind::Child
            }
        )
    })?;
    // strongSwan deletes the old child SA once the new one is up.
    wait_event(events, "old child SA deleted", |e| {
        matches!(e, Event::ChildSaDown { .. })
    })?;
    // The old child SA may be listed a moment longer (deleting): wait for one intranet child.
    let renewed = wait_for(SETTLE_TIMEOUT, || {
        let sas = initiator.list_sas().ok()?;
        find_child(&sas, INTRANET)
            .map(|c| c.spi_in)
            .filter(|spi| *spi != old)
    });
    let new = renewed.context("one intranet child SA with new SPIs")?;
    initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
    ensure!(
        new != old,
        "the intranet child SA has new SPIs ({old:x} -> {new:x})"
    );

    let spis = |sas: &[IkeSa]| {
        sas.iter()
            .find(|s| s.name == INFRASTRUCTURE)
            .map(|s| s.spis)
    };
    let old_ike = spis(&before).context("infrastructure IKE SA")?;
    initiator.rekey_ike(INFRASTRUCTURE)?;
    wait_event(events, "IKE rekey", |e| {
        matches!(
            e,
            Event::Rekeyed {
                kind: RekeyKind::Ike
            }
        )
    })?;
    wait_event(events, "old IKE SA deleted", |e| {
        matches!(e, Event::IkeSaDown { .. })
    })?;
    let after = initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
    ensure!(
        spis(&after) != Some(old_ike),
        "the infrastructure IKE SA has new SPIs"
    );

    initiator.terminate(INTRANET, SETTLE_TIMEOUT)?;
    let seen = wait_event(events, "intranet IKE SA down", |e| {
        matches!(
            e,
            Event::IkeSaDown {
                tunnel: Some(TunnelKind::Intranet),
                ..
            }
        )
    })?;
    ensure!(
        seen.iter().any(|e| matches!(e, Event::ChildSaDown { .. })),
        "the intranet child SA went down with its IKE SA: {seen:#?}"
    );
    initiator.wait_established(1, 1, SETTLE_TIMEOUT)?;
    Ok(())
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_strongswan_client_of_another_ca_is_refused() {
    let name = "netns_ike_strongswan_client_of_another_ca_is_refused";
    if !netns_or_skip(name) {
        return;
    }
    let cli = Netns::new("ikecli").expect("netns");
    let gw = Netns::new("ikegw").expect("netns");
    if let Err(e) = another_ca(&cli, &gw) {
        panic!("{name}: {e:#}\n{}{}", cli.logs_report(), gw.logs_report());
    }
}

fn another_ca(cli: &Netns, gw: &Netns) -> Result<()> {
    cli.veth("vgw", gw, "vcli")?;
    cli.addr_add("vgw", &format!("{CLIENT}/64"))?;
    gw.addr_add("vcli", &format!("{GATEWAY}/64"))?;
    let server = IpAddr::V6(GATEWAY);
    let lab = LabCerts::generate(gw, &gw.dir().join("lab"), server)?;
    let other = LabCerts::generate(gw, &gw.dir().join("other"), server)?;
    let mut config = responder_config(&lab)?;
    // Every IKE_SA_INIT must carry a cookie (RFC 7296 §2.6): strongSwan has to retry with it
    // before it reaches IKE_AUTH.
    config.half_open_cookie_threshold = 0;
    let driver = Driver::start(gw, config)?;
    let events = &driver.events;
    let mut credentials = other.initiator();
    credentials.cas = vec![lab.ca.clone()];
    let initiator = Charon::start(
        cli,
        "initiator",
        CharonConfig::initiator(server, credentials, tunnels()),
    )?;
    let scenario = || -> Result<()> {
        initiator.load_all()?;
        let err = match initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT) {
            Ok(out) => bail!("a client of another CA got in:\n{out}"),
            Err(e) => format!("{e:#}"),
        };
        ensure!(
            err.contains("AUTHENTICATION_FAILED"),
            "not AUTHENTICATION_FAILED: {err}"
        );
        let seen = wait_event(events, "a failed negotiation", |e| {
            matches!(e, Event::Negotiation { result: Err(_), .. })
        })?;
        let named = seen.iter().any(|e| {
            matches!(e, Event::Negotiation { result: Err(Refusal::Authentication(why)), .. }
                if why.contains("trusted CA"))
        });
        ensure!(named, "gate64 names the unknown CA: {seen:#?}");
        ensure!(
            seen.iter().any(|e| matches!(e, Event::CookieSent { .. })),
            "a cookie was asked for first: {seen:#?}"
        );
        ensure!(
            !seen.iter().any(|e| matches!(e, Event::ChildSaUp(_))),
            "no child SA: {seen:#?}"
        );
        initiator.wait_established(0, 0, SETTLE_TIMEOUT)?;
        Ok(())
    };
    let outcome = with_charon_logs(scenario(), &[&initiator]);
    drop(initiator);
    let stopped = driver.stop();
    outcome?;
    stopped
}

/// gate64's own initiator against strongSwan as the responder, one IKE SA per
/// tunnel as `gate64 connect` builds them; strongSwan's libipsec fakes a NAT, so the
/// initiator must move to 4500 (RFC 7296 §2.23) with the non-ESP marker.
#[test]
#[ignore = "netns: needs root"]
fn netns_ike_gate64_initiator_against_strongswan_responder() {
    let name = "netns_ike_gate64_initiator_against_strongswan_responder";
    if !netns_or_skip(name) {
        return;
    }
    let cli = Netns::new("ikecli").expect("netns");
    let gw = Netns::new("ikegw").expect("netns");
    if let Err(e) = initiator_against_strongswan(&cli, &gw) {
        panic!("{name}: {e:#}\n{}{}", cli.logs_report(), gw.logs_report());
    }
}

fn initiator_against_strongswan(cli: &Netns, gw: &Netns) -> Result<()> {
    cli.veth("vgw", gw, "vcli")?;
    cli.addr_add("vgw", &format!("{CLIENT}/64"))?;
    gw.addr_add("vcli", &format!("{GATEWAY}/64"))?;
    let server = IpAddr::V6(GATEWAY);
    // strongSwan routes each child SA's remote side through ipsec0 with a source address
    // from its local selector, so the corporate hosts must exist here (as in the reference).
    gw.addr_add("lo", "fd00:c0::53/128")?;
    gw.addr_add("lo", "fd00:c0::1/64")?;
    let certs = LabCerts::generate(gw, &gw.dir().join("certs"), server)?;
    let responder = Charon::start(
        gw,
        "responder",
        CharonConfig::responder(Some(server), certs.responder(), tunnels(), POOL6),
    )?;
    let scenario = || -> Result<()> {
        responder.load_all()?;
        let mut inners = Vec::new();
        for (tunnel, ts) in [
            (TunnelKind::Infrastructure, INFRASTRUCTURE_TS),
            (TunnelKind::Intranet, INTRANET_TS),
        ] {
            let config = initiator_config(&certs, tunnel, ts)?;
            let (inner, child) = cli.run_in(move || run_initiator(config))??;
            ensure!(
                child.tunnel == tunnel && child.peer.udp_encap == Some(NAT_T_PORT),
                "{child:#?}"
            );
            inners.push(inner);
        }
        let sas = responder.wait_established(2, 2, SETTLE_TIMEOUT)?;
        for sa in &sas {
            ensure!(
                sa.remote_vips.len() == 1 && inners.contains(&Some(sa.remote_vips[0])),
                "strongSwan leased what gate64's initiator reports: {sa:?} vs {inners:?}"
            );
        }
        Ok(())
    };
    let outcome = with_charon_logs(scenario(), &[&responder]);
    if outcome.is_ok() {
        print_proof(&responder);
    }
    outcome
}

/// The proof in charon's own words, for `--nocapture` runs.
fn print_proof(charon: &Charon<'_>) {
    let tail = charon.log_tail(400);
    let keys = [
        "established",
        "rekeyed",
        "deleting IKE_SA",
        "virtual IP",
        "retransmit",
        "fragment",
    ];
    for line in tail.lines().filter(|l| keys.iter().any(|k| l.contains(k))) {
        eprintln!("charon: {line}");
    }
}

/// gate64's initiator with the fixture's client credentials, asking for `ts` as `tunnel`.
pub(crate) fn initiator_config(
    certs: &LabCerts,
    tunnel: TunnelKind,
    ts: &str,
) -> Result<InitiatorConfig> {
    let read = |p: &std::path::Path| std::fs::read(p).with_context(|| format!("{}", p.display()));
    let net: ipnet::IpNet = ts.parse()?;
    Ok(InitiatorConfig {
        credentials: Credentials::from_pem(
            &read(&certs.initiator_cert)?,
            &read(&certs.initiator_key)?,
        )?,
        anchors: TrustAnchors::from_pem(&read(&certs.ca)?)?,
        group: Group::Ecp256,
        request_address: true,
        tsi: vec![TrafficSelector::range(
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::from(u128::MAX)),
        )],
        tsr: vec![TrafficSelector::range(net.network(), net.broadcast())],
        tunnel,
        retransmit_after: Duration::from_secs(1),
        max_retransmits: 5,
        integrity_only: false,
    })
}

/// Runs one initiator over sockets on the client's ports 500 and 4500 (inside its namespace)
/// until it is established: (inner address, child SA).
fn run_initiator(config: InitiatorConfig) -> Result<(Option<IpAddr>, ChildSaPair)> {
    let client: Ipv6Addr = CLIENT.parse()?;
    let bind = |port| -> Result<std::net::UdpSocket> {
        let s = std::net::UdpSocket::bind((client, port))?;
        s.set_read_timeout(Some(Duration::from_millis(100)))?;
        Ok(s)
    };
    let (ike, nat_t) = (bind(IKE_PORT)?, bind(NAT_T_PORT)?);
    let local = ike.local_addr()?;
    let remote = std::net::SocketAddr::new(IpAddr::V6(GATEWAY), IKE_PORT);
    let mut initiator = Initiator::new(config, Instant::now(), SystemTime::now(), local, remote)?;
    initiator.start(Instant::now());
    let deadline = Instant::now() + INITIATE_TIMEOUT;
    let mut buf = vec![0u8; 65_535];
    while Instant::now() < deadline {
        while let Some((from, to, bytes)) = initiator.poll_transmit() {
            if from.port() == NAT_T_PORT {
                nat_t.send_to(&[&[0u8; 4][..], &bytes].concat(), to)?;
            } else {
                ike.send_to(&bytes, to)?;
            }
        }
        for (socket, marker) in [(&ike, 0), (&nat_t, 4)] {
            if let Ok((n, _)) = socket.recv_from(&mut buf)
                && n > marker
                && buf[..marker].iter().all(|b| *b == 0)
            {
                initiator.handle(Instant::now(), &buf[marker..n]);
            }
        }
        initiator.handle_timeout(Instant::now());
        match initiator.poll_event() {
            Some(InitiatorEvent::Established { inner, child, .. }) => return Ok((inner, *child)),
            Some(InitiatorEvent::Failed(e)) => bail!("gate64's initiator failed: {e}"),
            Some(other) => bail!("unexpected initiator event {other:?}"),
            None => {}
        }
    }
    bail!("gate64's initiator did not establish within {INITIATE_TIMEOUT:?}")
}

/// strongSwan's ESP (a ping from its virtual IP into the infrastructure tunnel) opens with the
/// inbound keys gate64's responder derived: the KEYMAT order and salt (RFC 7296 §2.17,
/// RFC 4106 §8.1) agree with a real peer's, and the inner packet fits the selectors.
fn esp_opens_with_gate64_keys(
    cli: &Netns,
    driver: &Driver,
    seen: &[Box<ChildSaPair>],
) -> Result<()> {
    let pair = seen
        .iter()
        .find(|p| p.tunnel == TunnelKind::Infrastructure)
        .context("infrastructure child SA")?;
    let inbound = gate64_esp::Inbound::new(&pair.inbound).context("inbound SA")?;
    // Nobody answers inside the lab: the pings only need to leave strongSwan.
    let _ = cli.exec(&[
        "ping",
        "-6",
        "-c",
        "2",
        "-i",
        "0.2",
        "-W",
        "1",
        "fd00:c0::53",
    ]);
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    while Instant::now() < deadline {
        let Ok(mut esp) = driver.esp.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        if gate64_esp::spi_of(&esp) != Some(pair.inbound.spi) {
            continue;
        }
        let opened = inbound
            .open(&mut esp)
            .map_err(|e| anyhow::anyhow!("gate64 cannot open strongSwan's ESP: {e:?}"))?;
        ensure!(opened.next_header == 41, "an IPv6 inner packet: {opened:?}");
        let inner = &esp[opened.inner.clone()];
        ensure!(
            inner.len() >= 40 && inner[6] == 58,
            "ICMPv6 inside: {inner:02x?}"
        );
        let (src, dst) = (&inner[8..24], &inner[24..40]);
        ensure!(
            src == FIRST_LEASE.octets() && dst == INFRASTRUCTURE_HOST.octets(),
            "{inner:02x?}"
        );
        ensure!(
            inbound.admits(IpAddr::V6(FIRST_LEASE), IpAddr::V6(INFRASTRUCTURE_HOST)),
            "the selectors admit it"
        );
        return Ok(());
    }
    bail!(
        "no ESP with gate64's SPI {:08x} reached the gateway",
        pair.inbound.spi
    )
}
