//! Teredo on an internet edge, against Debian's Miredo client in namespaces:
//!
//! - `netns_teredo_spoofer_reflects_nothing_without_ipsec`: an attacker aims gate64's Teredo port at a third
//!   party (crafted bubbles, junk and RFC 6081 trailers, payloads to Teredo addresses that
//!   encode the victim's IPv4:port) for 30 s; a packet capture in the victim's namespace
//!   (every IPv4 packet that reaches it, any port or protocol) finds none of the attacker's
//!   bytes and at most the rate-limited trickle of bubbles; a Miredo client keeps reaching
//!   the corporate host.
//! - `netns_teredo_peer_table_flood_admits_new_client_without_ipsec`: one host floods the peer table (every
//!   flag value from 1,024 mappings) for 60 s; a new Miredo client from
//!   another address qualifies and reaches the corporate host during it, and the table stays
//!   within the per-address cap (filled in well under a second, then refilled thousands of
//!   times over).

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use gate64_testkit::capture::Ipv4Capture;
use gate64_testkit::flood::{self, PeerFloodConfig, Reflect, ReflectConfig, VictimCounts};
use gate64_testkit::{
    ATTACKER_V4, CORP_HOST, Gate64Options, Metrics, Netns, SERVER_V4, TEREDO_PORT, Topology,
};
use gate64_wire::{ipv4, udp};

use crate::common::{gate64_lines, netns_test};
use crate::teredo::qualify;

/// The third party's address (RFC 2544 benchmarking range: global by RFC 4380 §5.2.4).
const VICTIM_V4: &str = "198.18.0.10";
/// The victim's ports the attacker encodes in Teredo destinations.
const VICTIM_PORTS: std::ops::RangeInclusive<u16> = 5001..=5004;
/// Covers the client's ten pings (from 2 s in) with room; the bounds below are rates.
const ATTACK: Duration = Duration::from_secs(20);
const ATTACK_PPS: u64 = 3_000;
/// gate64's defaults: `[limits] teredo_relay_per_destination_per_sec` and its burst (twice
/// it), per worker; the lab runs 2 workers.
const RELAY_PER_DESTINATION_PER_SEC: f64 = 10.0;
const RELAY_BURST: f64 = 20.0;
const WORKERS: f64 = 2.0;
/// `[limits] max_teredo_peers_per_ipv4` (its default).
const PEERS_PER_IPV4: u32 = 256;
/// Covers the new client's qualification and five pings (from 3 s in) with room.
const PEER_FLOOD: Duration = Duration::from_secs(25);

#[test]
#[ignore = "netns: needs root"]
fn netns_teredo_spoofer_reflects_nothing_without_ipsec() {
    netns_test(
        "netns_teredo_spoofer_reflects_nothing_without_ipsec",
        Topology::builder().attacker(true),
        spoofer_reflects_nothing,
    );
}

fn spoofer_reflects_nothing(topo: &Topology) -> Result<()> {
    let vic = Netns::new("tvic")?;
    topo.srv.veth("vvic", &vic, "vsrv")?;
    // gate64 sends datagrams to one destination as one UDP GSO send, and a veth carries such
    // a super-packet whole: the victim's sockets get its datagrams one by one, but a packet
    // capture would see them glued into one (two relayed bubbles as one "foreign" datagram).
    // One segment per packet on this link makes the kernel split them before the veth, so the
    // capture sees the datagrams the victim receives.
    topo.srv.ip(&["link", "set", "vvic", "gso_max_segs", "1"])?;
    topo.srv.addr_add("vvic", "198.18.0.1/24")?;
    vic.addr_add("vsrv", &format!("{VICTIM_V4}/24"))?;
    vic.ip(&["route", "add", "default", "via", "198.18.0.1"])?;
    let opts = Gate64Options {
        log_level: "info".to_owned(),
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    let (_client, addr) = qualify(topo)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping before the attack")?;
    let before = topo.metrics()?;

    let victims: Vec<SocketAddrV4> = VICTIM_PORTS
        .map(|p| SocketAddrV4::new(VICTIM_V4.parse().expect("constant"), p))
        .collect();
    let listener = Listener::start(&vic, &victims)?;
    let started = Instant::now();
    let cfg = ReflectConfig {
        target: SocketAddrV4::new(SERVER_V4, TEREDO_PORT),
        bind: ATTACKER_V4,
        sources: 64,
        victims,
        pps: ATTACK_PPS,
        duration: ATTACK,
        seed: 0x6a7e_1201,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let attack = topo
        .atk()?
        .spawn_thread("reflect", move || flood::run_reflection(&cfg, &flag))?;
    let _stop_on_error = StopOnDrop(stop);
    thread::sleep(Duration::from_secs(2));
    let ping_during = topo.ping6(&topo.cli, CORP_HOST, 10);
    let sent = join_bounded(attack, ATTACK + Duration::from_secs(20))??;
    // Bubble retries for the attacker's queued packets run up to 8 s after it stopped.
    thread::sleep(Duration::from_secs(9));
    let (counts, foreign) = listener.finish()?;
    let window = started.elapsed().as_secs_f64();
    println!(
        "attack sent, by kind: {:?}",
        Reflect::ALL.iter().zip(sent).collect::<Vec<_>>()
    );
    println!("victim received: {counts:?} in a {window:.1} s window");
    println!("ping during the attack: {ping_during:?}");

    gate.ensure_running()
        .context("gate64 died during the attack")?;
    ensure!(
        sent.iter().all(|n| *n > 0),
        "the attacker sent nothing of some kind: {sent:?}"
    );
    ensure!(
        counts.foreign == 0 && counts.marked == 0,
        "the victim received the attacker's bytes: {counts:?}; the first foreign packets: \
         {foreign:#?}"
    );
    let bound = WORKERS * (RELAY_BURST + RELAY_PER_DESTINATION_PER_SEC * window);
    let bubbles = counts.bare_bubbles + counts.bubbles_with_trailers;
    ensure!(
        (bubbles as f64) <= bound,
        "{bubbles} bubbles reached the victim; the rate limit allows {bound:.0}: {counts:?}"
    );
    ensure!(
        counts.datagrams > 0,
        "no bubble at all reached the victim's sockets: is the capture working? {counts:?}"
    );
    let ping_during = ping_during.context("ping during the attack")?;
    ensure!(
        ping_during.received > 0,
        "the Miredo client got no ping reply during the attack:\n{}",
        ping_during.output
    );
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp after the attack")?;
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> client after the attack")?;

    let after = topo.metrics()?;
    let drops = |reason: &str| {
        after.sum("gate64_drops_total", &[("reason", reason)])
            - before.sum("gate64_drops_total", &[("reason", reason)])
    };
    for reason in [
        "teredo_bad_trailer",
        "spoofed_source",
        "teredo_relay_source_rate_limited",
        "teredo_relay_destination_rate_limited",
    ] {
        println!(
            "gate64_drops_total{{reason=\"{reason}\"}} +{}",
            drops(reason)
        );
        ensure!(
            drops(reason) > 0.0,
            "no {reason} drops during the attack\n{}",
            gate64_lines(&after)
        );
    }
    Ok(())
}

#[test]
#[ignore = "netns: needs root"]
fn netns_teredo_peer_table_flood_admits_new_client_without_ipsec() {
    netns_test(
        "netns_teredo_peer_table_flood_admits_new_client_without_ipsec",
        Topology::builder().attacker(true),
        peer_table_flood,
    );
}

fn peer_table_flood(topo: &Topology) -> Result<()> {
    let opts = Gate64Options {
        log_level: "info".to_owned(),
        extra: format!("[limits]\nmax_teredo_peers_per_ipv4 = {PEERS_PER_IPV4}\n"),
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    let cfg = PeerFloodConfig {
        target: SocketAddrV4::new(SERVER_V4, TEREDO_PORT),
        bind: ATTACKER_V4,
        sources: 1024,
        pps: 20_000,
        duration: PEER_FLOOD,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let flood = topo
        .atk()?
        .spawn_thread("peer-flood", move || flood::run_peer_flood(&cfg, &flag))?;
    let _stop_on_error = StopOnDrop(stop);
    thread::sleep(Duration::from_secs(3));
    let peers_before_client = peers(&topo.metrics()?);

    let (_client, addr) = qualify(topo).context("a new client qualifying during the flood")?;
    let ping = topo.ping6(&topo.cli, CORP_HOST, 5)?;
    let during = topo.metrics()?;
    let sent = join_bounded(flood, PEER_FLOOD + Duration::from_secs(20))??;
    println!("peer flood: {sent} datagrams from 1,024 mappings, every flag value in turn");
    println!(
        "gate64_teredo_peers: {peers_before_client} before the client, {} with it",
        peers(&during)
    );
    println!(
        "ping during the flood: {}/{}",
        ping.received, ping.transmitted
    );

    gate.ensure_running()
        .context("gate64 died during the flood")?;
    ensure!(
        ping.received > 0,
        "the new client reached no corporate host during the flood:\n{}",
        ping.output
    );
    ensure!(
        sent > 10 * u64::from(PEERS_PER_IPV4),
        "the flood sent only {sent} datagrams"
    );
    for (when, m) in [
        ("before the client", peers_before_client),
        ("during", peers(&during)),
    ] {
        ensure!(
            m <= f64::from(PEERS_PER_IPV4) + 1.0,
            "gate64_teredo_peers {when} the flood is {m}, above the per-address cap\n{}",
            gate64_lines(&during)
        );
    }
    let refused = during.sum("gate64_drops_total", &[("reason", "peer_table_full")]);
    ensure!(refused == 0.0, "{refused} peers refused (peer_table_full)");
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> the new client after the flood")?;
    Ok(())
}

fn peers(m: &Metrics) -> f64 {
    m.sum("gate64_teredo_peers", &[])
}

/// What reaches the victim: a packet capture in its namespace ([`Ipv4Capture`]) counts every
/// IPv4 packet that comes in, on any port and of any protocol (a UDP datagram by its payload,
/// anything else as foreign), not only what the victim's sockets would read. Its UDP sockets
/// on the encoded ports stay bound, so its kernel answers no port-unreachable to gate64.
struct Listener {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<()>>,
    counts: Arc<Mutex<VictimCounts>>,
    foreign: Arc<Mutex<Vec<String>>>,
    _sockets: Vec<UdpSocket>,
}

impl Listener {
    fn start(vic: &Netns, victims: &[SocketAddrV4]) -> Result<Listener> {
        let addrs = victims.to_vec();
        let sockets = vic.run_in(move || {
            addrs
                .iter()
                .map(UdpSocket::bind)
                .collect::<std::io::Result<Vec<_>>>()
        })??;
        let capture = Ipv4Capture::open(vic, Duration::from_millis(50))?;
        let victim: Ipv4Addr = VICTIM_V4.parse()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Mutex::new(VictimCounts::default()));
        let foreign = Arc::new(Mutex::new(Vec::new()));
        let (flag, sink, foreign_seen) = (stop.clone(), counts.clone(), foreign.clone());
        let handle = thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while !flag.load(Ordering::Relaxed) {
                let Some(packet) = capture.next(&mut buf)? else {
                    continue;
                };
                if let Some(payload) = to_victim(packet, victim) {
                    let mut counts = sink.lock().unwrap_or_else(|e| e.into_inner());
                    let foreign = counts.foreign;
                    counts.add(payload);
                    if counts.foreign > foreign {
                        let mut seen = foreign_seen.lock().unwrap_or_else(|e| e.into_inner());
                        if seen.len() < FOREIGN_KEPT {
                            seen.push(describe(packet));
                        }
                    }
                }
            }
            Ok(())
        });
        Ok(Listener {
            stop,
            handle,
            counts,
            foreign,
            _sockets: sockets,
        })
    }

    /// What the victim received, and the first [`FOREIGN_KEPT`] packets that were neither
    /// bubble kind, described.
    fn finish(self) -> Result<(VictimCounts, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| anyhow::anyhow!("victim capture panicked"))?
            .context("victim capture")?;
        let counts = *self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let foreign = std::mem::take(&mut *self.foreign.lock().unwrap_or_else(|e| e.into_inner()));
        Ok((counts, foreign))
    }
}

/// Foreign packets kept whole for the failure message.
const FOREIGN_KEPT: usize = 8;

/// An IPv4 packet as a failure message shows it: protocol, source and its first 96 bytes.
fn describe(packet: &[u8]) -> String {
    let (proto, src) = match ipv4::Packet::new_checked_quoted(packet) {
        Ok(ip) => (ip.protocol(), ip.src().to_string()),
        Err(_) => (0, "?".to_owned()),
    };
    let hex: String = packet.iter().take(96).map(|b| format!("{b:02x}")).collect();
    format!("protocol {proto} from {src}, {} bytes: {hex}", packet.len())
}

/// What an IPv4 packet addressed to `victim` carries: a UDP datagram's payload (first or
/// only fragment), else everything after the IPv4 header; `None` for packets to others.
fn to_victim(packet: &[u8], victim: Ipv4Addr) -> Option<&[u8]> {
    let ip = ipv4::Packet::new_checked_quoted(packet).ok()?;
    if ip.dst() != victim {
        return None;
    }
    // The view's payload borrows the view; the same bytes, borrowed from `packet`.
    let body = packet.get(ip.header_len()..ip.header_len() + ip.payload().len())?;
    if ip.protocol() == ipv4::PROTO_UDP && ip.frag_offset() == 0 {
        return body.get(udp::HEADER_LEN..);
    }
    Some(body)
}

/// Joins `handle` within `limit`.
fn join_bounded<T>(handle: JoinHandle<Result<T>>, limit: Duration) -> Result<T> {
    let t = Instant::now();
    while !handle.is_finished() && t.elapsed() < limit {
        thread::sleep(Duration::from_millis(100));
    }
    ensure!(handle.is_finished(), "thread still running after {limit:?}");
    handle
        .join()
        .map_err(|_| anyhow::anyhow!("thread panicked"))?
}

/// Stops a generator if the test ends early.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
