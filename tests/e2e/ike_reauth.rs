//! RFC 4478 reauthentication against `gate64 serve` with `[ipsec] reauth_secs = 60`.
//!
//! - `netns_ike_reauthentication_keeps_strongswan_and_ends_a_client_that_does_not`: strongSwan
//!   (charon with kernel-libipsec over Debian's miredo, `reauth_time`) builds both tunnels and
//!   hears AUTH_LIFETIME; gate64's own initiator builds both tunnels from the corporate side
//!   and never authenticates anew. After the lifetime and its grace (66 s), strongSwan holds
//!   two IKE SAs with new SPIs (it authenticated anew, and its log shows AUTH_LIFETIME
//!   received for both first IKE SAs before it did) and its ping crosses both tunnels,
//!   while gate64 has ended the other client's two IKE SAs
//!   (`gate64_ipsec_disconnects_total{reason="reauth"}` = 2, and none of strongSwan's).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use gate64_ike::initiator::{Initiator, InitiatorConfig, InitiatorEvent};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Metrics, Topology};

use crate::common::{gate64_lines, netns_test};
use crate::ipsec::{
    GATE64_ADDRESS6, INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab, route_corp_to_gate64,
};
use crate::ipsec_flood::{GAUGE_LAG, NEWCOMER, add_newcomer, newcomer_configs, tunnels};

/// `reauth_secs`: the least gate64 takes.
const REAUTH: Duration = Duration::from_secs(60);
/// The deadline of an IKE SA that was not authenticated anew: the lifetime and a tenth.
const GRACE_END: Duration = Duration::from_secs(66);

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_reauthentication_keeps_strongswan_and_ends_a_client_that_does_not() {
    netns_test(
        "netns_ike_reauthentication_keeps_strongswan_and_ends_a_client_that_does_not",
        Topology::builder(),
        reauthentication,
    );
}

/// Builds both tunnels from [`NEWCOMER`] with gate64's initiator, which never authenticates
/// anew, and keeps answering gate64's liveness checks until `until`; returns, per tunnel,
/// how long after it was established gate64 deleted it (`None`: not by `until`).
fn hold_both(configs: [InitiatorConfig; 2], until: Instant) -> Result<Vec<Option<Duration>>> {
    let remote = SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), 500);
    let mut peers = Vec::new();
    for config in configs {
        let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V6(NEWCOMER), 0))?;
        socket.set_read_timeout(Some(Duration::from_millis(50)))?;
        let local = socket.local_addr()?;
        let mut initiator =
            Initiator::new(config, Instant::now(), SystemTime::now(), local, remote)?;
        initiator.start(Instant::now());
        // (socket, initiator, when established, how long it lived)
        peers.push((socket, initiator, None::<Instant>, None::<Duration>));
    }
    let mut buf = vec![0u8; 65_535];
    while Instant::now() < until && peers.iter().any(|p| p.3.is_none()) {
        for (socket, initiator, up, lived) in peers.iter_mut().filter(|p| p.3.is_none()) {
            while let Some((_, to, bytes)) = initiator.poll_transmit() {
                socket.send_to(&bytes, to)?;
            }
            if let Ok((n, _)) = socket.recv_from(&mut buf) {
                initiator.handle(Instant::now(), &buf[..n]);
            }
            initiator.handle_timeout(Instant::now());
            while let Some((_, to, bytes)) = initiator.poll_transmit() {
                socket.send_to(&bytes, to)?;
            }
            match (initiator.poll_event(), *up) {
                (Some(InitiatorEvent::Established { .. }), _) => *up = Some(Instant::now()),
                (Some(InitiatorEvent::Failed(_)), Some(at)) => *lived = Some(at.elapsed()),
                (Some(InitiatorEvent::Failed(e)), None) => bail!("gate64's initiator failed: {e}"),
                _ => {}
            }
        }
    }
    if peers.iter().any(|p| p.2.is_none()) {
        bail!("gate64's initiator did not build both tunnels");
    }
    Ok(peers.into_iter().map(|p| p.3).collect())
}

/// charon's log shows gate64's AUTH_LIFETIME of [`REAUTH`] received for each of the first two
/// IKE SAs before it reauthenticated any: the reauthentication answers gate64's notify.
/// (charon's own `reauth_time` is [`REAUTH`] too, so new SPIs alone would not show it.)
fn heard_auth_lifetime_first(charon: &Charon<'_>) -> Result<()> {
    let log = std::fs::read_to_string(charon.log_path())
        .with_context(|| format!("reading {}", charon.log_path().display()))?;
    let heard = format!("received AUTH_LIFETIME of {}s", REAUTH.as_secs());
    let Some(reauth) = log.find("reauthenticating IKE_SA") else {
        bail!("charon's log shows no reauthentication");
    };
    let before = log[..reauth].matches(&heard).count();
    ensure!(
        before == 2,
        "charon logged \"{heard}\" {before} times before it first reauthenticated, not once \
         for each of its two IKE SAs"
    );
    Ok(())
}

fn reauth_ends(m: &Metrics) -> f64 {
    m.sum("gate64_ipsec_disconnects_total", &[("reason", "reauth")])
}

fn reauthentication(topo: &Topology) -> Result<()> {
    let keys = format!("reauth_secs = {}\n", REAUTH.as_secs());
    let mut lab = TeredoIpsecLab::start_with(topo, None, &keys, Some("info"))?;
    route_corp_to_gate64(topo)?;
    add_newcomer(topo)?;
    let mut config = CharonConfig::initiator(
        std::net::IpAddr::V6(GATE64_ADDRESS6),
        lab.certs.initiator(),
        tunnels(),
    );
    config.ike_reauth = Some(REAUTH);
    config.ike_rekey = Some(Duration::ZERO);
    let charon = Charon::start(&topo.cli, "initiator", config)?;
    let newcomer = newcomer_configs(&topo.srv, &lab.certs, "no-reauth.gate64.lab")?;
    let scenario = || -> Result<()> {
        charon.load_all()?;
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            charon.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
        let started = Instant::now();
        let before: Vec<(u64, u64)> = charon.list_sas()?.iter().map(|sa| sa.spis).collect();
        // Past the grace of the first IKE SAs, and the time strongSwan needs to finish its
        // reauthentication (a new IKE_SA_INIT and IKE_AUTH per tunnel).
        let deadline = started + GRACE_END + GAUGE_LAG + Duration::from_secs(20);
        let holder = topo
            .corp
            .run_in(move || std::thread::spawn(move || hold_both(newcomer, deadline)))?;
        let mut m = topo.metrics()?;
        loop {
            let sas = charon.list_sas()?;
            let renewed = sas.len() == 2
                && sas
                    .iter()
                    .all(|sa| sa.state == "ESTABLISHED" && !before.contains(&sa.spis));
            if (renewed && reauth_ends(&m) >= 2.0) || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
            m = topo.metrics()?;
        }
        let sas = charon.list_sas()?;
        let lived = holder
            .join()
            .map_err(|_| anyhow::anyhow!("the holding thread panicked"))??;
        println!(
            "after {:.0} s: strongSwan IKE SAs {:?} (before {before:?}); the client that did \
             not authenticate anew was deleted after {lived:?}; reauth ends {}",
            started.elapsed().as_secs_f64(),
            sas.iter()
                .map(|sa| (&sa.state, sa.spis))
                .collect::<Vec<_>>(),
            reauth_ends(&m)
        );
        ensure!(
            lived
                .iter()
                .all(|l| l.is_some_and(|l| l >= GRACE_END - Duration::from_secs(2))),
            "gate64 deleted the client that did not authenticate anew after {lived:?}, not \
             once its lifetime and grace ({GRACE_END:?}) had passed"
        );
        charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
        let sas = charon.list_sas()?;
        ensure!(
            sas.iter().all(|sa| !before.contains(&sa.spis)),
            "strongSwan did not authenticate anew: {sas:?}"
        );
        heard_auth_lifetime_first(&charon)?;
        ensure!(
            reauth_ends(&m) == 2.0,
            "gate64 ended {} IKE SAs for reauth (want the other client's 2)\n{}",
            reauth_ends(&m),
            gate64_lines(&m)
        );
        topo.ping6_all(&topo.cli, CORP_HOST, 3)?;
        ensure!(
            reauth_ends(&topo.metrics()?) == 2.0,
            "strongSwan's IKE SAs were ended for reauth too"
        );
        Ok(())
    };
    with_charon_logs(scenario(), &[&charon])?;
    lab.gate.ensure_running()
}
