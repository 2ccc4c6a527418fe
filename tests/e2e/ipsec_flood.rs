//! Issue 8's flood acceptance: `netns_ike_init_flood`. One address (the corporate host, sending
//! straight to gate64's IKE port, the simplest path that reaches the responder) floods
//! IKE_SA_INIT from one thread as fast as it goes, while strongSwan over Teredo holds both
//! tunnels: cookies engage, half-open SAs stay bounded, the established client keeps moving
//! data (its throughput ratio against the undisturbed run is printed, asserted only > 0), and
//! the client builds both tunnels anew during the flood from its own address.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, ensure};
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::initiator::Initiator;
use gate64_testkit::strongswan::{INFRASTRUCTURE, INTRANET, LabCerts, Tunnel, with_charon_logs};
use gate64_testkit::{CORP_HOST, Topology};

use crate::common::{gate64_lines, netns_test};
use crate::ike_interop::initiator_config;
use crate::ipsec::{GATE64_ADDRESS6, INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab};

/// Half-open IKE SAs gate64 may hold during the flood: the cookie threshold and the
/// per-source cap keep it far below this.
const HALF_OPEN_BOUND: f64 = 100.0;

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_init_flood() {
    netns_test("netns_ike_init_flood", Topology::builder(), ike_init_flood);
}

fn tunnels() -> Vec<Tunnel> {
    vec![
        Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ]
}

fn ike_init_flood(topo: &Topology) -> Result<()> {
    // The flood comes from one address, whose own half-open SAs the per-source cap holds
    // at 5 (the default): a cookie threshold below that makes the cookies engage.
    let mut lab =
        TeredoIpsecLab::start_with(topo, None, "half_open_cookie_threshold = 2\n", Some("info"))?;
    let _iperf = topo.start_iperf_server()?;
    topo.corp.ip(&[
        "-6",
        "route",
        "replace",
        &format!("{GATE64_ADDRESS6}/128"),
        "via",
        "2001:db8:100:1::1",
    ])?;
    let init = sa_init_datagram(&lab.certs)?;
    let initiator = TeredoIpsecLab::initiator(topo, lab.certs.initiator(), tunnels())?;
    let scenario = || -> Result<()> {
        initiator.load_all()?;
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        let calm = topo
            .iperf3(3, 1, false)
            .context("iperf3 before the flood")?;

        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let flood = topo
            .corp
            .spawn_thread("ike-init-flood", move || flood(&init, &flag))?;
        let result = (|| -> Result<()> {
            thread::sleep(Duration::from_secs(1));
            let during = topo
                .iperf3(3, 1, false)
                .context("iperf3 during the flood")?;
            let m = topo.metrics()?;
            let half_open = m.sum("gate64_ike_half_open", &[]);
            println!(
                "during the flood: gate64_ike_cookies_sent_total {}, tsrv {}",
                m.sum("gate64_ike_cookies_sent_total", &[]),
                udp6_counters(&topo.srv)?
            );
            println!(
                "established client during the flood: {:.1} Mbit/s vs {:.1} undisturbed \
                 (ratio {:.2}); gate64_ike_half_open {half_open}",
                during.received_bps / 1e6,
                calm.received_bps / 1e6,
                during.received_bps / calm.received_bps.max(1.0)
            );
            ensure!(
                during.received_bytes > 0,
                "the established client moved nothing"
            );
            ensure!(
                half_open <= HALF_OPEN_BOUND,
                "gate64_ike_half_open {half_open} during the flood\n{}",
                gate64_lines(&m)
            );
            // Both tunnels anew during the flood, from the client's own address.
            for tunnel in [INFRASTRUCTURE, INTRANET] {
                initiator.terminate(tunnel, Duration::from_secs(10))?;
            }
            initiator.wait_established(0, 0, SETTLE_TIMEOUT)?;
            for tunnel in [INFRASTRUCTURE, INTRANET] {
                initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
            }
            initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
            topo.ping6_all(&topo.cli, CORP_HOST, 3)
                .context("ping through the tunnels built during the flood")?;
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        let (sent, secs) = flood
            .join()
            .map_err(|_| anyhow::anyhow!("flood thread panicked"))???;
        println!(
            "flood: {sent} IKE_SA_INIT in {secs:.1} s ({:.0}/s from one thread)",
            sent as f64 / secs.max(0.001)
        );
        result?;
        let m = topo.metrics()?;
        let cookies = m.sum("gate64_ike_cookies_sent_total", &[]);
        ensure!(
            cookies > 0.0,
            "no cookie sent during the flood\n{}",
            gate64_lines(&m)
        );
        println!("gate64_ike_cookies_sent_total {cookies}");
        Ok(())
    };
    with_charon_logs(scenario(), &[&initiator])?;
    lab.miredo.ensure_running()?;
    lab.gate.ensure_running()
}

/// The kernel's UDP receive counters in `ns`: how many datagrams the IKE sockets got and how
/// many the full receive buffers dropped.
fn udp6_counters(ns: &gate64_testkit::Netns) -> Result<String> {
    let snmp = ns.exec_ok(&["cat", "/proc/net/snmp6"])?;
    Ok(snmp
        .lines()
        .filter(|l| l.starts_with("Udp6InDatagrams") || l.starts_with("Udp6RcvbufErrors"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", "))
}

/// One genuine IKE_SA_INIT from gate64's initiator; the flood varies its SPIi so that each
/// datagram looks like a new exchange.
fn sa_init_datagram(certs: &LabCerts) -> Result<Vec<u8>> {
    let config = initiator_config(certs, TunnelKind::Intranet, "2001:db8:100::/48")?;
    let local = SocketAddr::new(IpAddr::V6(CORP_HOST), 500);
    let remote = SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), 500);
    let mut i = Initiator::new(config, Instant::now(), SystemTime::now(), local, remote)?;
    i.start(Instant::now());
    let (_, _, bytes) = i.poll_transmit().context("no IKE_SA_INIT")?;
    ensure!(bytes.len() > 28, "IKE_SA_INIT of {} bytes", bytes.len());
    Ok(bytes)
}

/// Sends `init` with a fresh SPIi each time to gate64's port 500 until `stop`; returns how
/// many it sent and for how long.
fn flood(init: &[u8], stop: &AtomicBool) -> Result<(u64, f64)> {
    let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V6(CORP_HOST), 0))?;
    let to = SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), 500);
    let mut datagram = init.to_vec();
    let (started, mut sent) = (Instant::now(), 0u64);
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..64 {
            sent += 1;
            datagram[..8].copy_from_slice(&(sent | 1 << 63).to_be_bytes());
            // A full socket buffer is the flood's ceiling, not an error.
            let _ = socket.send_to(&datagram, to);
        }
    }
    Ok((sent, started.elapsed().as_secs_f64()))
}
