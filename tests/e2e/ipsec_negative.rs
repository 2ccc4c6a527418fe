//! IPsec's refusals end to end: strongSwan as the client over Debian's
//! Miredo client against `gate64 serve`, set up as in `ipsec.rs`.
//!
//! - `netns_ipsec_refuses_bad_clients`: a client whose certificate has expired, one whose
//!   certificate comes from a CA gate64 does not trust, one whose certificate from the trusted
//!   CA lists serverAuth alone (all three made by `gate64 certs`), and one asking for
//!   selectors outside its tunnels get no child SA, reach nothing on the corporate side, and
//!   are counted under `auth_failed` and `ts_unacceptable`.
//! - `netns_ipsec_replayed_esp_reaches_nothing`: ESP datagrams of an established client,
//!   captured on its Teredo interface and sent again, reach nothing on the corporate side and
//!   are counted as replays.
//! - `netns_ipsec_esp_outside_its_selectors_is_dropped`: a client (gate64's own initiator and
//!   ESP, driven by the test) sends, inside its infrastructure child SA, pings to an intranet
//!   host outside that SA's selectors: each is dropped and counted `esp_selector`, and its
//!   intranet SA still carries pings to the corporate host.
//! - `netns_ipsec_dead_client_loses_its_sas`: strongSwan killed with SIGKILL: gate64's
//!   liveness checks (`ipsec.dpd_secs`) go unanswered and its IKE and child SAs are deleted.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::strongswan::{CertPaths, INFRASTRUCTURE, INTRANET, Tunnel, with_charon_logs};
use gate64_testkit::{CORP_HOST, Metrics, Netns, Topology, gate64_binary};

use crate::common::{gate64_lines, netns_test, path_str};
use crate::ipsec::{GATE64_ADDRESS6, INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab};

/// A prefix outside the lab's corporate prefixes (`2001:db8:100::/48`), so outside both
/// tunnels.
const OUTSIDE_TS: &str = "2001:db8:200::/48";

/// Both tunnels as the lab's clients ask for them.
fn tunnels() -> Vec<Tunnel> {
    vec![
        Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ]
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_refuses_bad_clients() {
    netns_test(
        "netns_ipsec_refuses_bad_clients",
        Topology::builder(),
        refuses_bad_clients,
    );
}

fn refuses_bad_clients(topo: &Topology) -> Result<()> {
    let made = gate64_certs(topo)?;
    // gate64 trusts the CA of `gate64 certs`' IPsec clients too, so that the expired
    // certificate fails on its dates, not on its issuer.
    let mut lab = TeredoIpsecLab::start(topo, Some(&made.join("clients-ca.pem")))?;
    let before = topo.metrics()?;
    // The expired and the other CA's certificates fail on their dates and issuer; the
    // serverAuth-only one, from the trusted CA, on `client_eku = "strict"` (the default).
    for name in [
        "ipsec-client-expired",
        "ipsec-client-otherca",
        "ipsec-client-serveronly",
    ] {
        let credentials = CertPaths::new(
            &lab.certs.ca,
            made.join(format!("{name}.pem")),
            made.join(format!("{name}.key")),
        );
        refused(topo, name, credentials, tunnels(), "AUTHENTICATION_FAILED")?;
    }
    refused(
        topo,
        "selectors outside the tunnels",
        lab.certs.initiator(),
        vec![Tunnel::new(INTRANET, &[OUTSIDE_TS])],
        "TS_UNACCEPTABLE",
    )?;
    let after = topo.metrics()?;
    for (result, at_least) in [("auth_failed", 3.0), ("ts_unacceptable", 1.0)] {
        let grew = negotiations(&after, result) - negotiations(&before, result);
        ensure!(
            grew >= at_least,
            "gate64_ike_negotiations_total{{result=\"{result}\"}} grew by {grew}, expected \
             >= {at_least}\n{}",
            gate64_lines(&after)
        );
    }
    println!(
        "refusals counted: auth_failed {}, ts_unacceptable {}",
        negotiations(&after, "auth_failed"),
        negotiations(&after, "ts_unacceptable")
    );
    let qmsa = after.sum("gate64_ipsec_qmsa", &[]);
    ensure!(qmsa == 0.0, "gate64_ipsec_qmsa is {qmsa} after refusals");
    lab.miredo.ensure_running()?;
    lab.gate.ensure_running()
}

/// A strongSwan initiator with `credentials` asking for `tunnels`: its first tunnel's
/// initiation fails with `notify`, it holds no child SA, and the corporate host does not
/// answer it.
fn refused(
    topo: &Topology,
    case: &str,
    credentials: CertPaths,
    tunnels: Vec<Tunnel>,
    notify: &str,
) -> Result<()> {
    let name = tunnels
        .first()
        .map(|t| t.name.clone())
        .context("no tunnel")?;
    let initiator = TeredoIpsecLab::initiator(topo, credentials, tunnels)?;
    let scenario = || -> Result<()> {
        initiator.load_all()?;
        let err = match initiator.initiate(&name, &name, INITIATE_TIMEOUT) {
            Ok(out) => bail!("{case}: the client got its tunnel:\n{out}"),
            Err(e) => format!("{e:#}"),
        };
        ensure!(
            err.contains(notify),
            "{case}: initiate failed, but not with {notify}: {err}"
        );
        let children: usize = initiator
            .list_sas()?
            .iter()
            .map(|s| s.children.iter().filter(|c| c.is_installed()).count())
            .sum();
        ensure!(
            children == 0,
            "{case}: the client holds {children} child SAs"
        );
        let corp = topo.ping6(&topo.cli, CORP_HOST, 2)?;
        ensure!(
            corp.received == 0,
            "{case}: the corporate host answered: {}",
            corp.output
        );
        Ok(())
    };
    with_charon_logs(scenario(), &[&initiator]).with_context(|| format!("case {case}"))
}

fn negotiations(m: &Metrics, result: &str) -> f64 {
    m.sum("gate64_ike_negotiations_total", &[("result", result)])
}

/// `gate64 certs` into its own directory (the strongSwan fixture's `certs/` holds other
/// files of the same names).
fn gate64_certs(topo: &Topology) -> Result<PathBuf> {
    let dir = topo.srv.dir().join("gate64-certs");
    let bin = gate64_binary()?;
    let out = topo.srv.exec_ok(&[
        path_str(&bin)?,
        "certs",
        "--out",
        path_str(&dir)?,
        "--server-ip",
        &GATE64_ADDRESS6.to_string(),
    ])?;
    ensure!(
        dir.join("ipsec-client-expired.pem").is_file(),
        "gate64 certs: {out}"
    );
    Ok(dir)
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_replayed_esp_reaches_nothing() {
    netns_test(
        "netns_ipsec_replayed_esp_reaches_nothing",
        Topology::builder(),
        replayed_esp,
    );
}

/// How often each captured datagram is sent again.
const REPLAYS: usize = 2;

fn replayed_esp(topo: &Topology) -> Result<()> {
    let mut lab = TeredoIpsecLab::start(topo, None)?;
    let initiator = TeredoIpsecLab::initiator(topo, lab.certs.initiator(), tunnels())?;
    let scenario = || -> Result<()> {
        initiator.load_all()?;
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping the corporate host through the infrastructure tunnel")?;
        let echoes_before = echo_requests_in(&topo.corp)?;
        let captured = capture_and_replay(&topo.cli, &lab.teredo.to_string())?;
        ensure!(
            captured >= 3,
            "captured {captured} ESP datagrams, expected >= 3"
        );
        let echoes_captured = echo_requests_in(&topo.corp)?;
        ensure!(
            echoes_captured >= echoes_before + 3,
            "the captured pings did not reach the corporate host: {echoes_before} -> \
             {echoes_captured} echo requests"
        );
        // gate64 drops replays in its worker, before anything reaches the TUN: once the
        // counters show them all, nothing more can arrive.
        let wanted = (captured * REPLAYS) as f64;
        let mut m = topo.metrics()?;
        let counted = gate64_testkit::wait_until(Duration::from_secs(10), || {
            m = match topo.metrics() {
                Ok(m) => m,
                Err(_) => return false,
            };
            m.sum("gate64_esp_replay_drops_total", &[]) >= wanted
        });
        ensure!(
            counted,
            "gate64_esp_replay_drops_total below {wanted}\n{}",
            gate64_lines(&m)
        );
        let drops = m.sum("gate64_drops_total", &[("reason", "esp_replay")]);
        ensure!(
            drops >= wanted,
            "gate64_drops_total{{reason=\"esp_replay\"}} is {drops}, expected >= {wanted}"
        );
        println!(
            "captured {captured} ESP datagrams, sent each {REPLAYS} times: \
             gate64_esp_replay_drops_total {}, esp_replay drops {drops}",
            m.sum("gate64_esp_replay_drops_total", &[])
        );
        let echoes_after = echo_requests_in(&topo.corp)?;
        ensure!(
            echoes_after == echoes_captured,
            "replayed ESP reached the corporate host: {echoes_captured} -> {echoes_after} \
             echo requests"
        );
        // The established SA still works after the replays.
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping after the replays")?;
        Ok(())
    };
    with_charon_logs(scenario(), &[&initiator])?;
    lab.miredo.ensure_running()?;
    lab.gate.ensure_running()
}

/// ICMPv6 echo requests `ns` has received (`Icmp6InEchos` of its /proc/net/snmp6).
fn echo_requests_in(ns: &Netns) -> Result<u64> {
    let snmp = ns.exec_ok(&["cat", "/proc/net/snmp6"])?;
    snmp.lines()
        .find_map(|l| l.strip_prefix("Icmp6InEchos"))
        .and_then(|v| v.trim().parse().ok())
        .context("no Icmp6InEchos in /proc/net/snmp6")
}

/// In `cli`: pings the corporate host 3 times through the SA while an `AF_PACKET` socket on
/// Miredo's `teredo` interface records the ESP-in-UDP datagrams (RFC 3948) leaving for gate64,
/// then sends each payload [`REPLAYS`] times from a UDP socket on the client's Teredo
/// address `teredo` (python3's socket module: the e2e crate stays free of `unsafe`).
/// Returns how many datagrams it captured.
fn capture_and_replay(cli: &Netns, teredo: &str) -> Result<usize> {
    let script = format!(
        r#"import socket, struct, subprocess, time
cap = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(3))
cap.bind(("teredo", 0))
subprocess.run(["ping", "-6", "-n", "-c", "3", "-i", "0.2", "-W", "3", "{corp}"], stdout=subprocess.DEVNULL)
time.sleep(0.5)
cap.setblocking(False)
endpoint = socket.inet_pton(socket.AF_INET6, "{endpoint}")
esp = []
while True:
    try:
        pkt, addr = cap.recvfrom(65535)
    except BlockingIOError:
        break
    if addr[2] != socket.PACKET_OUTGOING or len(pkt) < 56 or pkt[0] >> 4 != 6 or pkt[6] != 17:
        continue
    if pkt[24:40] != endpoint or struct.unpack("!H", pkt[42:44])[0] != 4500:
        continue
    if pkt[48:52] != b"\0\0\0\0":
        esp.append(pkt[48:])
tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
tx.bind(("{teredo}", 0))
for _ in range({replays}):
    for p in esp:
        tx.sendto(p, ("{endpoint}", 4500))
    time.sleep(0.2)
print(len(esp))
"#,
        corp = CORP_HOST,
        endpoint = GATE64_ADDRESS6,
        replays = REPLAYS,
    );
    let out = cli
        .exec_ok(&["python3", "-c", &script])
        .context("python3 ESP capture and replay")?;
    out.trim()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .with_context(|| format!("capture printed {out:?}"))
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_dead_client_loses_its_sas() {
    netns_test(
        "netns_ipsec_dead_client_loses_its_sas",
        Topology::builder(),
        dead_client,
    );
}

/// `ipsec.dpd_secs` in this test: short, so the test stays short.
const DPD_SECS: u64 = 5;
/// A generous bound on dpd + 3 retransmissions 5 s apart + the driver's timer.
const DEAD_PEER_BOUND: Duration = Duration::from_secs(60);

/// strongSwan builds both tunnels and is killed with SIGKILL (no Delete sent): gate64's
/// liveness checks go unanswered and both IKE SAs and child SAs go.
fn dead_client(topo: &Topology) -> Result<()> {
    let mut lab =
        TeredoIpsecLab::start_with(topo, None, &format!("dpd_secs = {DPD_SECS}\n"), None)?;
    let initiator = TeredoIpsecLab::initiator(topo, lab.certs.initiator(), tunnels())?;
    let scenario = || -> Result<()> {
        initiator.load_all()?;
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
        // Alive and idle for several dpd intervals: it answers the checks and keeps its SAs.
        std::thread::sleep(Duration::from_secs(2 * DPD_SECS + 2));
        initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
        let m = topo.metrics()?;
        for name in ["gate64_ipsec_mmsa", "gate64_ipsec_qmsa"] {
            let v = m.sum(name, &[]);
            ensure!(
                v == 2.0,
                "{name} is {v} while the client answers\n{}",
                gate64_lines(&m)
            );
        }
        Ok(())
    };
    with_charon_logs(scenario(), &[&initiator])?;
    let charon = charon_pid(&topo.cli)?;
    topo.cli.exec_ok(&["kill", "-KILL", &charon.to_string()])?;
    let killed = std::time::Instant::now();
    let mut m = topo.metrics()?;
    let gone = gate64_testkit::wait_until(DEAD_PEER_BOUND, || {
        m = match topo.metrics() {
            Ok(m) => m,
            Err(_) => return false,
        };
        m.sum("gate64_ipsec_mmsa", &[]) == 0.0 && m.sum("gate64_ipsec_qmsa", &[]) == 0.0
    });
    ensure!(
        gone,
        "SAs of a killed client still up after {DEAD_PEER_BOUND:?}\n{}",
        gate64_lines(&m)
    );
    println!(
        "killed client's SAs gone after {:.1} s (dpd_secs = {DPD_SECS})",
        killed.elapsed().as_secs_f64()
    );
    drop(initiator);
    lab.miredo.ensure_running()?;
    lab.gate.ensure_running()
}

/// The pid of the one charon running in `ns` (the test's own initiator).
fn charon_pid(ns: &Netns) -> Result<i32> {
    let found: Vec<i32> = ns
        .pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim().starts_with("charon"))
        })
        .collect();
    match found[..] {
        [pid] => Ok(pid),
        _ => bail!("expected one charon in {}, found pids {found:?}", ns.name()),
    }
}

/// Inside its infrastructure child SA, a client sends packets to an intranet host (outside
/// that SA's selectors, RFC 4301 §5.2): gate64 drops each, counted `esp_selector`, while
/// the client's intranet SA carries its pings. strongSwan seals only what its selectors
/// cover, so the client here is gate64's own initiator and ESP (`gate64_ike`,
/// `gate64_esp`, as `gate64 connect` uses them) run by the test in `tcli` over Miredo's
/// Teredo interface, crafting the inner packets itself.
#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_esp_outside_its_selectors_is_dropped() {
    netns_test(
        "netns_ipsec_esp_outside_its_selectors_is_dropped",
        Topology::builder(),
        esp_outside_its_selectors,
    );
}

/// Packets sent through the infrastructure SA to the intranet host.
const MISDIRECTED: u16 = 5;
/// An intranet host: inside the corporate /48 (the intranet tunnel), outside `CORP_HOST`/128
/// (the infrastructure tunnel).
const INTRANET_ONLY_HOST: std::net::Ipv6Addr =
    std::net::Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x99);

fn esp_outside_its_selectors(topo: &Topology) -> Result<()> {
    let mut lab = TeredoIpsecLab::start(topo, None)?;
    let before = topo.metrics()?;
    let client = own_client::Settings::from_lab(&lab.certs, lab.teredo)?;
    let outcome = topo
        .cli
        .spawn_thread("own-ipsec-client", move || client.run(MISDIRECTED))?
        .join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))??;
    let outcome = outcome?;
    ensure!(
        outcome.intranet_replies >= 1,
        "the intranet SA carried no ping to {CORP_HOST}: {outcome:?}"
    );
    let wanted = f64::from(MISDIRECTED);
    let mut m = topo.metrics()?;
    let grew = |m: &Metrics| {
        m.sum("gate64_drops_total", &[("reason", "esp_selector")])
            - before.sum("gate64_drops_total", &[("reason", "esp_selector")])
    };
    let counted = gate64_testkit::wait_until(Duration::from_secs(10), || {
        m = match topo.metrics() {
            Ok(m) => m,
            Err(_) => return false,
        };
        grew(&m) >= wanted
    });
    ensure!(
        counted,
        "gate64_drops_total{{reason=\"esp_selector\"}} grew by {}, expected {wanted}\n{}",
        grew(&m),
        gate64_lines(&m)
    );
    println!(
        "{MISDIRECTED} packets to {INTRANET_ONLY_HOST} inside the infrastructure SA: \
         esp_selector drops +{}; intranet SA: {} of {} pings answered",
        grew(&m),
        outcome.intranet_replies,
        own_client::PINGS
    );
    lab.miredo.ensure_running()?;
    lab.gate.ensure_running()
}

/// A minimal DirectAccess-style client on plain sockets: gate64's sans-IO initiator for each
/// tunnel from `[teredo]:4500` (RFC 7296 §2.23 lets an initiator start there), and ESP sealed
/// by the test so that the inner packet can be anything.
mod own_client {
    use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
    use std::time::{Duration, Instant, SystemTime};

    use anyhow::{Context, Result, bail};
    use gate64_esp::{Inbound, MAX_TRAILER, NEXT_HEADER_IPV6, Outbound, SPI_SEQ_IV_LEN, spi_of};
    use gate64_ike::auth::{Credentials, TrustAnchors};
    use gate64_ike::child_sa::{ChildSaPair, TunnelKind};
    use gate64_ike::initiator::{Initiator, InitiatorConfig, InitiatorEvent};
    use gate64_ike::keys::Group;
    use gate64_ike::message::TrafficSelector;
    use gate64_testkit::CORP_HOST;
    use gate64_testkit::strongswan::LabCerts;

    use super::INTRANET_ONLY_HOST;
    use crate::ipsec::{GATE64_ADDRESS6, INITIATE_TIMEOUT};

    /// Pings through the intranet SA.
    pub(super) const PINGS: u16 = 3;
    const NAT_T_PORT: u16 = 4500;
    const ICMPV6: u8 = 58;

    /// What the thread in `tcli` needs: credentials as PEM and its Teredo address.
    pub(super) struct Settings {
        chain: Vec<u8>,
        key: Vec<u8>,
        ca: Vec<u8>,
        teredo: Ipv6Addr,
    }

    /// What the client saw.
    #[derive(Debug)]
    pub(super) struct Outcome {
        /// Echo replies from `CORP_HOST` to pings sent through the intranet SA.
        pub(super) intranet_replies: u16,
    }

    struct Tunnel {
        inbound: Inbound,
        outbound: Outbound,
    }

    impl Settings {
        pub(super) fn from_lab(certs: &LabCerts, teredo: Ipv6Addr) -> Result<Settings> {
            let read = |p: &std::path::Path| {
                std::fs::read(p).with_context(|| format!("reading {}", p.display()))
            };
            Ok(Settings {
                chain: read(&certs.initiator_cert)?,
                key: read(&certs.initiator_key)?,
                ca: read(&certs.ca)?,
                teredo,
            })
        }

        /// Builds both tunnels, sends `misdirected` pings to the intranet host through the
        /// infrastructure SA, then pings `CORP_HOST` through the intranet SA.
        pub(super) fn run(self, misdirected: u16) -> Result<Outcome> {
            let local = SocketAddr::new(IpAddr::V6(self.teredo), NAT_T_PORT);
            let remote = SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), NAT_T_PORT);
            let socket = UdpSocket::bind(local).context("binding [teredo]:4500")?;
            socket.set_read_timeout(Some(Duration::from_millis(100)))?;
            let (inner, infrastructure) = self.establish(
                &socket,
                (local, remote),
                TunnelKind::Infrastructure,
                &format!("{CORP_HOST}/128"),
            )?;
            let (_, intranet) = self.establish(
                &socket,
                (local, remote),
                TunnelKind::Intranet,
                "2001:db8:100::/48",
            )?;
            let inner = match inner {
                Some(IpAddr::V6(a)) => a,
                other => bail!("no inner IPv6 address from the pool: {other:?}"),
            };
            for seq in 0..misdirected {
                let ping = echo_request(inner, INTRANET_ONLY_HOST, seq);
                send_sealed(&socket, remote, &infrastructure.outbound, &ping)?;
            }
            for seq in 0..PINGS {
                let ping = echo_request(inner, CORP_HOST, 100 + seq);
                send_sealed(&socket, remote, &intranet.outbound, &ping)?;
            }
            let mut replies = 0;
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut buf = vec![0u8; 65_535];
            while replies < PINGS && Instant::now() < deadline {
                let Ok((n, _)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                let esp = &mut buf[..n];
                // gate64 seals the reply under whichever SA's selectors cover its source.
                let tunnel = [&infrastructure, &intranet]
                    .into_iter()
                    .find(|t| spi_of(esp) == Some(t.inbound.spi()));
                let Some(opened) = tunnel.and_then(|t| t.inbound.open(esp).ok()) else {
                    continue;
                };
                let p = &esp[opened.inner];
                if p.len() >= 48 && p[6] == ICMPV6 && p[40] == 129 && p[8..24] == CORP_HOST.octets()
                {
                    replies += 1;
                }
            }
            Ok(Outcome {
                intranet_replies: replies,
            })
        }

        fn establish(
            &self,
            socket: &UdpSocket,
            (local, remote): (SocketAddr, SocketAddr),
            tunnel: TunnelKind,
            tsr: &str,
        ) -> Result<(Option<IpAddr>, Tunnel)> {
            let net: ipnet::IpNet = tsr.parse()?;
            let config = InitiatorConfig {
                credentials: Credentials::from_pem(&self.chain, &self.key)?,
                anchors: TrustAnchors::from_pem(&self.ca)?,
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
            };
            let mut initiator =
                Initiator::new(config, Instant::now(), SystemTime::now(), local, remote)?;
            initiator.start(Instant::now());
            let deadline = Instant::now() + INITIATE_TIMEOUT;
            let mut buf = vec![0u8; 65_535];
            while Instant::now() < deadline {
                while let Some((_, to, bytes)) = initiator.poll_transmit() {
                    // RFC 3948 §2.2: the non-ESP marker before IKE on port 4500.
                    socket.send_to(&[&[0u8; 4][..], &bytes].concat(), to)?;
                }
                if let Ok((n, _)) = socket.recv_from(&mut buf)
                    && n > 4
                    && buf[..4] == [0; 4]
                {
                    initiator.handle(Instant::now(), &buf[4..n]);
                }
                initiator.handle_timeout(Instant::now());
                match initiator.poll_event() {
                    Some(InitiatorEvent::Established { inner, child, .. }) => {
                        return Ok((inner, sa_pair(&child)?));
                    }
                    Some(InitiatorEvent::Failed(e)) => bail!("{tunnel:?}: initiator failed: {e}"),
                    _ => {}
                }
            }
            bail!("{tunnel:?}: not established within {INITIATE_TIMEOUT:?}")
        }
    }

    fn sa_pair(child: &ChildSaPair) -> Result<Tunnel> {
        Ok(Tunnel {
            inbound: Inbound::new(&child.inbound)
                .map_err(|e| anyhow::anyhow!("inbound SA: {e:?}"))?,
            outbound: Outbound::new(&child.outbound)
                .map_err(|e| anyhow::anyhow!("outbound SA: {e:?}"))?,
        })
    }

    /// Seals `inner` under `sa` (RFC 4303 tunnel mode) and sends it UDP-encapsulated (RFC
    /// 3948: ESP starts at the UDP payload, its SPI is the non-zero first word).
    fn send_sealed(socket: &UdpSocket, to: SocketAddr, sa: &Outbound, inner: &[u8]) -> Result<()> {
        let mut buf = vec![0u8; SPI_SEQ_IV_LEN + inner.len() + MAX_TRAILER];
        buf[SPI_SEQ_IV_LEN..SPI_SEQ_IV_LEN + inner.len()].copy_from_slice(inner);
        let n = sa
            .seal(&mut buf, 0, inner.len(), NEXT_HEADER_IPV6)
            .map_err(|e| anyhow::anyhow!("sealing: {e:?}"))?;
        socket.send_to(&buf[..n], to)?;
        Ok(())
    }

    /// An ICMPv6 echo request (RFC 4443 §4.1) from `src` to `dst`, checksum included
    /// (RFC 8200 §8.1 pseudo-header).
    fn echo_request(src: Ipv6Addr, dst: Ipv6Addr, seq: u16) -> Vec<u8> {
        let body = b"gate64 esp_selector e2e";
        let icmp_len = 8 + body.len();
        let mut p = vec![0u8; 40 + icmp_len];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&(icmp_len as u16).to_be_bytes());
        p[6] = ICMPV6;
        p[7] = 64;
        p[8..24].copy_from_slice(&src.octets());
        p[24..40].copy_from_slice(&dst.octets());
        p[40] = 128;
        p[44..46].copy_from_slice(&0x6464u16.to_be_bytes());
        p[46..48].copy_from_slice(&seq.to_be_bytes());
        p[48..].copy_from_slice(body);
        let mut sum: u32 = 0;
        let mut add = |bytes: &[u8]| {
            for pair in bytes.chunks(2) {
                let hi = u32::from(pair[0]) << 8;
                sum += hi | u32::from(pair.get(1).copied().unwrap_or(0));
            }
        };
        add(&p[8..40]);
        add(&(icmp_len as u32).to_be_bytes());
        add(&[0, 0, 0, ICMPV6]);
        add(&p[40..]);
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        let checksum = !(sum as u16);
        p[42..44].copy_from_slice(&checksum.to_be_bytes());
        p
    }
}
