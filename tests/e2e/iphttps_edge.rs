//! IP-HTTPS on an internet edge: what one host or many idle clients can take.
//!
//! - `netns_iphttps_clients_that_stop_reading_without_ipsec`: in each round, the established
//!   client in `tcli` measures its iperf3 (-R and forward) undisturbed, then while `tcorp`
//!   sends the trickle below to /64s that no client holds (the control: what the sender and
//!   the TUN path take of the 2 cores without any stalled client); then 2,000 IP-HTTPS
//!   clients from `tatk` (8 addresses, `iphttps-load --stop-reading`) link up and never read
//!   again while `tcorp` sends UDP towards every one of them (20,000 datagrams a second until
//!   gate64 takes no more for them, then a trickle of 2,000), and the established client
//!   measures again while they are stalled. gate64's peak RSS (VmHWM) stays under its RSS
//!   before the load + `iphttps.queue_budget_bytes` + a per-connection allowance
//!   ([`PER_CONNECTION_ALLOWANCE`]); the send queues' gauge never passes the budget; stalled
//!   links are closed (`gate64_iphttps_write_timeouts_total`); the established client still
//!   passes traffic (its ratios, stalled over undisturbed just before, the
//!   `iphttps_queue_full` drops and the load average are printed, not asserted: the 2-core
//!   lab is shared; `G64_STALLED_IPERF_RUNS=5` runs five rounds and prints the median
//!   ratios, see docs/performance.md, "Clients that stop reading"); a new client from
//!   another address links up.
//! - `netns_iphttps_memory_per_connection`: the figures of docs/performance-history.md
//!   ("Memory per connection, and clients that stop reading"): gate64's
//!   RSS delta per connection for 2,000 idle links, then while each receives traffic and
//!   reads it (active); asserts only that all linked up and traffic reached them.
//! - `netns_iphttps_handshake_flood`: `tatk` opens TCP connections to :443 as fast as two
//!   threads can, half of them idle (no ClientHello), half sending garbage, and makes whole
//!   TLS handshakes and IP-HTTPS requests as fast as `iphttps-load` can (256 in flight, the
//!   links it gets held); during the flood
//!   legitimate clients from `tcli` each link up within 5 s, and the flood is counted under
//!   `gate64_tls_handshakes_total{result="source_handshakes"}`.

use std::collections::VecDeque;
use std::io::Write;
use std::net::{Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use gate64_testkit::{
    CLIENT_GW_V4, Gate64Options, Process, Topology, find_binary, wait_for, wait_until,
};

use crate::common::{
    IPHTTPS_PREFIX, connect_iphttps, gate64_lines, handshakes, iphttps_section, make_certs, median,
    netns_test, path_str, rounds_from_env, serve_iphttps,
};

/// Clients that stop reading.
const STALLED: usize = 2000;
/// Source addresses in `tatk` they come from (250 each, under the per-source limit).
const STALLED_SOURCES: u8 = 8;
/// `iphttps.queue_budget_bytes` in the stalled-clients test.
const BUDGET: u64 = 16 << 20;
/// Memory a stalled connection may hold outside the queue budget: an idle connection's
/// ~26 KiB (docs/performance-history.md, "Memory per connection"), rustls' record buffer (32 KiB), the queue's growth slack
/// (~16 KiB) and room for the allocator (measured peaks: 62–86 KiB).
const PER_CONNECTION_ALLOWANCE: u64 = 112 << 10;
/// Undisturbed and disturbed iperf3 runs.
const IPERF_SECS: u32 = 6;
/// `iphttps.write_timeout_secs` in the stalled-clients test: the shed rule closes most stalled
/// links once the queue budget is under pressure; this closes the rest within the round.
const STALL_WRITE_TIMEOUT_SECS: u64 = 20;
/// Datagrams a second towards the 2,000 stalled clients until gate64 takes no more for them
/// (10 a second each: every client's TCP window, gate64's socket buffer and its queue fill
/// within seconds).
const FILL_RATE: u32 = 20_000;
/// Datagrams a second towards the stalled clients (one each) and in the control while the
/// established client measures: enough that every stalled link keeps being offered traffic,
/// little enough that the test's own sender does not take the 2-core machine's CPU from the
/// flow being measured (at `FILL_RATE` the control alone cost it 10-30 %).
const TRICKLE_RATE: u32 = 2_000;
/// Kernel memory one stalled connection's send side may take (`ss -tm` skmem `w`): gate64
/// caps unsent bytes at 32 KiB (TCP_NOTSENT_LOWAT), plus one record and the buffers'
/// overhead (measured: ~45 KiB). Without the cap the autotuned send buffer took 132 KiB
/// per stalled connection within 10 s, and kept growing.
const SOCKET_SEND_ALLOWANCE: u64 = 96 << 10;
/// The longest the fill may take before the stalled phase is measured anyway.
const FILL_MAX: Duration = Duration::from_secs(60);
/// Rounds of (undisturbed, stalled) iperf3 pairs (median of the ratios printed):
/// `$G64_STALLED_IPERF_RUNS`, else 1.
fn iperf_runs() -> usize {
    rounds_from_env("G64_STALLED_IPERF_RUNS", 5)
}

/// iperf3 -R and forward throughputs (bit/s).
#[derive(Debug, Clone, Copy)]
struct Throughput {
    reverse: f64,
    forward: f64,
}

impl Throughput {
    fn measure(topo: &Topology) -> Result<Throughput> {
        let run = |reverse: bool| {
            Ok::<_, anyhow::Error>(topo.iperf3(IPERF_SECS, 1, reverse)?.received_bps)
        };
        Ok(Throughput {
            reverse: run(true).context("iperf3 -R")?,
            forward: run(false).context("iperf3 forward")?,
        })
    }

    fn report(&self, base: &Throughput) -> String {
        format!(
            "-R {:.0} Mbit/s ({:.0} %), forward {:.0} Mbit/s ({:.0} %)",
            self.reverse / 1e6,
            100.0 * self.reverse / base.reverse,
            self.forward / 1e6,
            100.0 * self.forward / base.forward
        )
    }
}

/// The 1-minute load average, to judge the iperf3 figures on a shared machine.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default()
}

fn queue_full_drops(topo: &Topology) -> f64 {
    topo.metrics().ok().map_or(0.0, |m| {
        m.sum("gate64_drops_total", &[("reason", "iphttps_queue_full")])
    })
}

#[test]
#[ignore = "netns: needs root"]
fn netns_iphttps_clients_that_stop_reading_without_ipsec() {
    netns_test(
        "netns_iphttps_clients_that_stop_reading_without_ipsec",
        Topology::builder().attacker(true),
        clients_that_stop_reading,
    );
}

fn clients_that_stop_reading(topo: &Topology) -> Result<()> {
    let atk = topo.atk()?;
    let sources: Vec<String> = (0..STALLED_SOURCES)
        .map(|i| format!("203.0.113.{}", 21 + i))
        .collect();
    for a in &sources {
        atk.addr_add("vsrv", &format!("{a}/24"))?;
    }
    topo.cli.addr_add("vsrv", "198.51.100.11/24")?;
    let certs = make_certs(topo)?;
    let mut gate = start_edge_gate64(
        topo,
        &certs,
        &format!(
            "queue_budget_bytes = {BUDGET}\nwrite_timeout_secs = {STALL_WRITE_TIMEOUT_SECS}\n"
        ),
    )?;
    let _iperf = topo.start_iperf_server()?;
    let (mut client, addr) = connect_iphttps(topo, &certs, false)?;
    let rounds = iperf_runs();
    let mut ratios = Vec::new();
    let mut peak_queued = 0.0f64;
    for round in 0..rounds {
        let r = stalled_round(topo, &gate, atk, &certs, &sources, round)?;
        println!(
            "round {}/{rounds}: undisturbed -R {:.0} Mbit/s, forward {:.0} Mbit/s (load \
             average {}); the same traffic to /64s nobody holds (control): {}; {STALLED} \
             stalled clients getting traffic: {} (load average {}; {:.0} iphttps_queue_full \
             drops, all clients; gate64 took data for them for {:.1} s at {FILL_RATE}/s, then \
             {TRICKLE_RATE}/s); {} datagrams sent to them; {:.0} stalled links closed",
            round + 1,
            r.undisturbed.reverse / 1e6,
            r.undisturbed.forward / 1e6,
            r.load_undisturbed,
            r.control.report(&r.undisturbed),
            r.disturbed.report(&r.undisturbed),
            r.load_disturbed,
            r.queue_full_drops,
            r.fill.took.as_secs_f64(),
            r.sent,
            r.closed,
        );
        println!(
            "round {}: kernel send side of gate64's connections: up to {} connections with \
             unsent bytes at once, the largest {} KiB",
            round + 1,
            r.fill.peak_backlogged,
            r.fill.peak_socket_bytes >> 10
        );
        ensure!(
            r.fill.peak_backlogged >= STALLED / 2,
            "only {} connections ever held unsent bytes: the stalled clients' windows did not \
             close",
            r.fill.peak_backlogged
        );
        ensure!(
            r.fill.peak_socket_bytes <= SOCKET_SEND_ALLOWANCE,
            "a stalled connection's kernel send side took {} bytes, over {SOCKET_SEND_ALLOWANCE}",
            r.fill.peak_socket_bytes
        );
        ensure!(
            r.disturbed.reverse > 0.0 && r.disturbed.forward > 0.0,
            "the established client got nothing while the stalled clients had traffic"
        );
        ratios.push([
            r.disturbed.reverse / r.undisturbed.reverse,
            r.disturbed.forward / r.undisturbed.forward,
            r.control.reverse / r.undisturbed.reverse,
            r.control.forward / r.undisturbed.forward,
            r.disturbed.reverse / r.control.reverse,
            r.disturbed.forward / r.control.forward,
        ]);
        peak_queued = peak_queued.max(r.peak_queued);
    }
    let percent = |i: usize| 100.0 * median(ratios.iter().map(|r| r[i]));
    println!(
        "established client, median over {rounds} rounds of (stalled / undisturbed just \
         before): -R {:.0} %, forward {:.0} %; (control / undisturbed): -R {:.0} %, forward \
         {:.0} %; (stalled / control): -R {:.0} %, forward {:.0} %",
        percent(0),
        percent(1),
        percent(2),
        percent(3),
        percent(4),
        percent(5),
    );
    ensure!(
        peak_queued <= BUDGET as f64,
        "gate64_iphttps_queued_bytes reached {peak_queued}, over the {BUDGET} budget"
    );
    gate.ensure_running()?;
    client.ensure_running()?;
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> the established client after the load")?;

    // A new client from another address.
    let mut fresh = spawn_load(topo, &certs, &topo.cli, 1, "198.51.100.11", false)?;
    let line = wait_for(Duration::from_secs(20), || load_summary(&fresh))
        .with_context(|| format!("the new client's iphttps-load:\n{}", fresh.log()))?;
    println!("new client from 198.51.100.11: {line}");
    ensure!(
        field(&line, "established") == Some(1),
        "the new client did not link up: {line}"
    );
    fresh.stop();
    Ok(())
}

/// The fill of the stalled clients' buffers ([`wait_until_stalled`]).
struct Fill {
    /// How long gate64 took data for them.
    took: Duration,
    /// The largest kernel send-side allocation of one of gate64's :443 connections seen
    /// meanwhile (`ss -tm`, skmem `w`), in bytes.
    peak_socket_bytes: u64,
    /// The most connections holding unsent bytes at once.
    peak_backlogged: usize,
}

/// The kernel's send side of gate64's IP-HTTPS connections (`ss -tm` in `tsrv`): the largest
/// skmem `w` (bytes queued, with their overhead) and how many have any.
fn socket_send_memory(topo: &Topology) -> Result<(u64, usize)> {
    let out = topo
        .srv
        .exec_ok(&["ss", "-tmnH", "state", "established", "( sport = :443 )"])?;
    let queued = out.split("skmem:(").skip(1).filter_map(|m| {
        m.split([',', ')'])
            .find_map(|f| f.strip_prefix('w').and_then(|v| v.parse::<u64>().ok()))
    });
    Ok(queued.fold((0, 0), |(peak, n), w| (peak.max(w), n + usize::from(w > 0))))
}

/// Waits until gate64 takes no more data for the stalled clients: each has its TCP window,
/// gate64's socket buffer and its send queue full, or was shed. That is when gate64's
/// IP-HTTPS sends (packets queued to a link; no iperf3 runs meanwhile) fall under a
/// twentieth of `FILL_RATE` over a second. Samples the connections' kernel memory each
/// second meanwhile. Takes at most `FILL_MAX`.
fn wait_until_stalled(topo: &Topology) -> Fill {
    let queued = || {
        topo.metrics().ok().and_then(|m| {
            m.get(
                "gate64_packets_total",
                &[("side", "internet"), ("direction", "tx")],
            )
        })
    };
    let start = Instant::now();
    let mut fill = Fill {
        took: Duration::ZERO,
        peak_socket_bytes: 0,
        peak_backlogged: 0,
    };
    let mut last = queued();
    while start.elapsed() < FILL_MAX {
        std::thread::sleep(Duration::from_secs(1));
        if let Ok((peak, backlogged)) = socket_send_memory(topo) {
            fill.peak_socket_bytes = fill.peak_socket_bytes.max(peak);
            fill.peak_backlogged = fill.peak_backlogged.max(backlogged);
        }
        let now = queued();
        if let (Some(before), Some(after)) = (last, now)
            && after - before < f64::from(FILL_RATE / 20)
        {
            break;
        }
        last = now;
    }
    fill.took = start.elapsed();
    fill
}

/// The first /64 (index in `IPHTTPS_PREFIX`) of the control's traffic: far past every round's
/// clients, so it is routed to gate64 and dropped there as it finds no client.
const CONTROL_FIRST: u128 = 40_000;

/// Runs `during` while `tcorp` sends `rate` datagrams a second to the `STALLED` /64s from
/// index `first`, starting 1 s before it; returns its result and how many datagrams went.
fn with_traffic_to<T>(
    topo: &Topology,
    first: u128,
    rate: u32,
    during: impl FnOnce() -> Result<T>,
) -> Result<(T, u64)> {
    let sender = TrafficToClients::start(topo, first, rate)?;
    std::thread::sleep(Duration::from_secs(1));
    let result = during();
    let n = sender.stop()?;
    Ok((result?, n))
}

/// `tcorp` sending UDP to the `STALLED` /64s from index `first` ([`to_stalled_clients`]) on
/// a thread of its own at a rate that can change, until stopped (or dropped, on an error
/// path).
struct TrafficToClients {
    stop: Arc<AtomicBool>,
    rate: Arc<AtomicU32>,
    thread: Option<std::thread::JoinHandle<Result<Result<u64>>>>,
}

impl TrafficToClients {
    /// Starts sending `rate` datagrams a second.
    fn start(topo: &Topology, first: u128, rate: u32) -> Result<TrafficToClients> {
        let stop = Arc::new(AtomicBool::new(false));
        let rate = Arc::new(AtomicU32::new(rate));
        let (flag, per_sec) = (Arc::clone(&stop), Arc::clone(&rate));
        let thread = topo.corp.spawn_thread("to-clients", move || {
            to_stalled_clients(first, &per_sec, &flag)
        })?;
        Ok(TrafficToClients {
            stop,
            rate,
            thread: Some(thread),
        })
    }

    fn set_rate(&self, per_sec: u32) {
        self.rate.store(per_sec, Ordering::Relaxed);
    }

    /// Stops the sender; returns how many datagrams it sent.
    fn stop(mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self
            .thread
            .take()
            .context("the sender was already joined")?;
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("sender panicked"))??
    }
}

impl Drop for TrafficToClients {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What one round of [`stalled_round`] measured.
struct Round {
    undisturbed: Throughput,
    /// The same traffic sent to /64s that no client holds: what the sender and the TUN path
    /// cost the 2-core machine without any stalled client.
    control: Throughput,
    /// gate64 taking data for the stalled clients until every one of them was full or shed.
    fill: Fill,
    disturbed: Throughput,
    load_undisturbed: String,
    load_disturbed: String,
    queue_full_drops: f64,
    peak_queued: f64,
    sent: u64,
    closed: f64,
}

/// One round: the established client's iperf3 undisturbed, then with the trickle to /64s
/// nobody holds (the control); then 2,000 fresh clients link up from `tatk` and stop
/// reading, get `FILL_RATE` until gate64 takes no more for them, and the established
/// client's iperf3 runs again while they stay stalled with `TRICKLE_RATE` still offered to
/// them. Each round pairs its figures with the undisturbed ones taken just before, so a
/// shared machine's drift between rounds cancels out. The round ends once the stalled links
/// were closed and the load is gone. The memory bound is checked in the first round.
fn stalled_round(
    topo: &Topology,
    gate: &Process,
    atk: &gate64_testkit::Netns,
    certs: &Path,
    sources: &[String],
    round: usize,
) -> Result<Round> {
    let load_undisturbed = loadavg();
    let undisturbed = Throughput::measure(topo).context("iperf3 over IP-HTTPS, undisturbed")?;
    let control = with_traffic_to(topo, CONTROL_FIRST, TRICKLE_RATE, || {
        Throughput::measure(topo)
    })
    .context("iperf3 while the same traffic goes to /64s nobody holds")?
    .0;
    let rss_before = rss_kib(gate.pid(), "VmRSS")?;
    let timeouts = || {
        topo.metrics()
            .ok()
            .and_then(|m| m.get("gate64_iphttps_write_timeouts_total", &[]))
            .unwrap_or(0.0)
    };
    let timeouts_before = timeouts();

    let mut load = spawn_load(topo, certs, atk, STALLED, &sources.join(","), true)?;
    let line = wait_for(Duration::from_secs(90), || load_summary(&load))
        .with_context(|| format!("iphttps-load did not finish:\n{}", load.log()))?;
    println!("stalled clients, round {}: {line}", round + 1);
    ensure!(
        field(&line, "established") == Some(STALLED as u64),
        "not every stalled client linked up: {line}\n{}",
        gate64_lines(&topo.metrics()?)
    );
    let rss_linked = rss_kib(gate.pid(), "VmRSS")?;

    // Traffic towards every stalled client: fresh /64s are handed out in order, so this
    // round's clients hold the STALLED prefixes after those of earlier rounds (and the
    // established client's, the first).
    let sender = TrafficToClients::start(topo, 1 + (round * STALLED) as u128, FILL_RATE)?;
    let drops_before = queue_full_drops(topo);
    let watching = AtomicBool::new(true);
    let ((fill, disturbed), peak_queued) = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let mut peak = 0.0f64;
            while watching.load(Ordering::Relaxed) {
                if let Ok(m) = topo.metrics() {
                    peak = peak.max(m.get("gate64_iphttps_queued_bytes", &[]).unwrap_or(0.0));
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            peak
        });
        let fill = wait_until_stalled(topo);
        sender.set_rate(TRICKLE_RATE);
        std::thread::sleep(Duration::from_secs(1));
        let r = Throughput::measure(topo);
        watching.store(false, Ordering::Relaxed);
        ((fill, r), watcher.join().unwrap_or(f64::MAX))
    });
    let disturbed = disturbed.context("iperf3 while the stalled clients get traffic")?;
    let queue_full_drops = queue_full_drops(topo) - drops_before;
    let load_disturbed = loadavg();
    let opened_at = rss_kib(gate.pid(), "VmHWM")?;
    // Stalled links close after write_timeout_secs (or TCP_USER_TIMEOUT), each once its
    // socket buffers are full.
    wait_until(Duration::from_secs(60), || {
        timeouts() - timeouts_before >= (STALLED / 2) as f64
    });
    let closed = timeouts() - timeouts_before;
    let sent = sender.stop()?;
    ensure!(
        closed > 0.0,
        "no stalled link was closed within 60 s\n{}",
        gate64_lines(&topo.metrics()?)
    );
    if round == 0 {
        let hwm = rss_kib(gate.pid(), "VmHWM")?.max(opened_at);
        println!(
            "RSS before {rss_before} KiB, with {STALLED} linked {rss_linked} KiB, peak {hwm} \
             KiB; peak queued {:.0} KiB of a {} KiB budget",
            peak_queued / 1024.0,
            BUDGET >> 10,
        );
        let bound = rss_before + (BUDGET >> 10) + STALLED as u64 * (PER_CONNECTION_ALLOWANCE >> 10);
        ensure!(
            hwm <= bound,
            "gate64's peak RSS {hwm} KiB is over {bound} KiB (RSS before {rss_before} KiB + \
             budget {} KiB + {STALLED} x {} KiB)",
            BUDGET >> 10,
            PER_CONNECTION_ALLOWANCE >> 10
        );
    }
    // The next round starts undisturbed: the load gone and its links released.
    load.stop();
    let iphttps_clients = || {
        topo.metrics()
            .ok()
            .and_then(|m| m.get("gate64_clients", &[("transport", "iphttps")]))
    };
    let released = wait_until(Duration::from_secs(30), || {
        iphttps_clients().is_some_and(|n| n <= 1.0)
    });
    ensure!(
        released,
        "round {}: the stalled clients' links were not released within 30 s of the load \
         stopping: gate64_clients{{transport=\"iphttps\"}} is {:?}",
        round + 1,
        iphttps_clients()
    );
    Ok(Round {
        undisturbed,
        control,
        fill,
        disturbed,
        load_undisturbed,
        load_disturbed,
        queue_full_drops,
        peak_queued,
        sent,
        closed,
    })
}

#[test]
#[ignore = "netns: needs root"]
fn netns_iphttps_memory_per_connection() {
    netns_test(
        "netns_iphttps_memory_per_connection",
        Topology::builder().attacker(true),
        memory_per_connection,
    );
}

fn memory_per_connection(topo: &Topology) -> Result<()> {
    let atk = topo.atk()?;
    let sources: Vec<String> = (0..STALLED_SOURCES)
        .map(|i| format!("203.0.113.{}", 21 + i))
        .collect();
    for a in &sources {
        atk.addr_add("vsrv", &format!("{a}/24"))?;
    }
    let certs = make_certs(topo)?;
    let gate = start_edge_gate64(topo, &certs, "")?;
    // The pool's first /64 goes to a placeholder, so the load's are 1..=2000 as the sender
    // expects.
    let mut first = spawn_load(topo, &certs, &topo.cli, 1, "", false)?;
    wait_for(Duration::from_secs(20), || load_summary(&first)).context("first client")?;
    std::thread::sleep(Duration::from_secs(1));
    let before = rss_kib(gate.pid(), "VmRSS")?;
    let mut load = spawn_load(topo, &certs, atk, STALLED, &sources.join(","), false)?;
    let line = wait_for(Duration::from_secs(90), || load_summary(&load))
        .with_context(|| format!("iphttps-load did not finish:\n{}", load.log()))?;
    ensure!(
        field(&line, "established") == Some(STALLED as u64),
        "not every client linked up: {line}"
    );
    std::thread::sleep(Duration::from_secs(2));
    let idle = rss_kib(gate.pid(), "VmRSS")?;
    let tx0 = topo
        .metrics()?
        .get(
            "gate64_packets_total",
            &[("side", "internet"), ("direction", "tx")],
        )
        .unwrap_or(0.0);
    let sender = TrafficToClients::start(topo, 1, FILL_RATE)?;
    std::thread::sleep(Duration::from_secs(6));
    let active = rss_kib(gate.pid(), "VmRSS")?;
    sender.stop()?;
    let hwm = rss_kib(gate.pid(), "VmHWM")?;
    let tx = topo
        .metrics()?
        .get(
            "gate64_packets_total",
            &[("side", "internet"), ("direction", "tx")],
        )
        .unwrap_or(0.0)
        - tx0;
    let per = |kib: u64| kib.saturating_sub(before) as f64 / STALLED as f64;
    println!(
        "RSS before {before} KiB; {STALLED} idle links {idle} KiB ({:.1} KiB each); receiving \
         and reading {active} KiB ({:.1} KiB each), peak {hwm} KiB ({:.1} KiB each); \
         {tx:.0} packets sent to clients",
        per(idle),
        per(active),
        per(hwm)
    );
    ensure!(tx > 0.0, "no packet reached the clients");
    load.stop();
    first.stop();
    Ok(())
}

/// UDP from `tcorp` to the first address of each stalled client's /64 (the `STALLED` /64s from
/// index `first` of `IPHTTPS_PREFIX`) until `stop`: 1,200-byte datagrams round-robin, `rate`
/// a second (read at every 10 ms tick, so it can change while it runs).
fn to_stalled_clients(first: u128, rate: &AtomicU32, stop: &AtomicBool) -> Result<u64> {
    let sock = UdpSocket::bind("[::]:0").context("UDP socket in tcorp")?;
    let base: Ipv6Addr = IPHTTPS_PREFIX
        .split('/')
        .next()
        .unwrap_or_default()
        .parse()
        .context("IPHTTPS_PREFIX")?;
    let payload = [0x5au8; 1200];
    let mut targets = (first..first + STALLED as u128)
        .map(|i| SocketAddr::from((Ipv6Addr::from(u128::from(base) | (i << 64) | 1), 9)))
        .cycle();
    let mut n = 0u64;
    let mut tick = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        for dst in targets
            .by_ref()
            .take((rate.load(Ordering::Relaxed) / 100) as usize)
        {
            if sock.send_to(&payload, dst).is_ok() {
                n += 1;
            }
        }
        tick += Duration::from_millis(10);
        if let Some(wait) = tick.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    Ok(n)
}

#[test]
#[ignore = "netns: needs root"]
fn netns_iphttps_handshake_flood() {
    netns_test(
        "netns_iphttps_handshake_flood",
        Topology::builder().attacker(true),
        handshake_flood,
    );
}

fn handshake_flood(topo: &Topology) -> Result<()> {
    let atk = topo.atk()?;
    let certs = make_certs(topo)?;
    let mut gate = start_edge_gate64(topo, &certs, "")?;
    let m0 = topo.metrics()?;
    let stop = Arc::new(AtomicBool::new(false));
    let target = SocketAddr::from((CLIENT_GW_V4, 443));
    let flooders = (0..2)
        .map(|garbage| {
            let stop = Arc::clone(&stop);
            atk.spawn_thread("flood", move || flood(target, garbage == 1, &stop))
        })
        .collect::<Result<Vec<_>>>()?;
    // And whole TLS handshakes from the same address, as many as it can: `iphttps-load`
    // with 256 attempts in flight and a million to make, holding what links up.
    let mut full = spawn_load_with(topo, &certs, atk, 1_000_000, "", false, 5)?;
    std::thread::sleep(Duration::from_secs(3));

    // Legitimate clients during the flood: each must link up within 5 s.
    let mut outcome = Ok(());
    for round in 0..3 {
        let t = Instant::now();
        let mut legit = spawn_load_with(topo, &certs, &topo.cli, 4, "", false, 5)?;
        let line = wait_for(Duration::from_secs(30), || load_summary(&legit));
        legit.stop();
        let line = line.unwrap_or_else(|| format!("no summary; log:\n{}", legit.log()));
        println!(
            "flood round {round}: legitimate clients {line} (after {:.2} s)",
            t.elapsed().as_secs_f64()
        );
        if field(&line, "established") != Some(4) {
            outcome = Err(anyhow::anyhow!(
                "round {round}: not every legitimate client linked up within 5 s during the \
                 flood: {line}"
            ));
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    full.stop();
    let mut connects = 0;
    for f in flooders {
        connects += f
            .join()
            .map_err(|_| anyhow::anyhow!("flooder panicked"))??;
    }
    let m = topo.metrics()?;
    let rise = |r: &str| handshakes(&m, r) - handshakes(&m0, r);
    println!(
        "flood: {connects} TCP connections from the two raw flooders; refused at accept for \
         the source's handshake limit {}, for its connection limit {}, cut without a \
         ClientHello {}, TLS errors {}, ok {} (12 of them the legitimate clients')",
        rise("source_handshakes"),
        rise("source_connections"),
        rise("no_client_hello"),
        rise("tls_error"),
        rise("ok")
    );
    outcome?;
    ensure!(
        rise("ok") > 12.0,
        "the flooding address completed no TLS handshake: the flood did not reach TLS\n{}",
        gate64_lines(&m)
    );
    ensure!(
        rise("source_handshakes") > 0.0,
        "the flood never hit iphttps.max_handshakes_per_source\n{}",
        gate64_lines(&m)
    );
    gate.ensure_running()?;
    Ok(())
}

/// Opens TCP connections to `target` until `stop`: idle ones (no ClientHello) or ones that
/// send garbage, keeping the last 4,000 open. Returns how many connected.
fn flood(target: SocketAddr, garbage: bool, stop: &AtomicBool) -> u64 {
    let mut held = VecDeque::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect_timeout(&target, Duration::from_millis(500)) else {
            continue;
        };
        n += 1;
        if garbage {
            let _ = s.write_all(b"\x16\x03\x01\x00\x05garbage, not a ClientHello\r\n");
        }
        held.push_back(s);
        if held.len() > 4000 {
            held.pop_front();
        }
    }
    n
}

/// `gate64 serve` in `tsrv` with `[iphttps]` on 198.51.100.1:443 plus `iphttps_keys`, log
/// level info (per-connection debug lines would dominate). Waits (≤ 15 s) until it listens.
fn start_edge_gate64(topo: &Topology, certs: &Path, iphttps_keys: &str) -> Result<Process> {
    let mut conf = Gate64Options {
        log_level: "info".to_owned(),
        ..Gate64Options::default()
    }
    .config_toml();
    conf.push_str(&iphttps_section(certs)?);
    conf.push_str(iphttps_keys);
    serve_iphttps(topo, "gate64-edge.toml", &conf)
}

/// `iphttps-load` in `ns`: `count` clients from `bind` (comma-separated, may be empty), held
/// until stopped; `stop_reading` as its flag. Per-attempt limit 30 s.
fn spawn_load(
    topo: &Topology,
    certs: &Path,
    ns: &gate64_testkit::Netns,
    count: usize,
    bind: &str,
    stop_reading: bool,
) -> Result<Process> {
    spawn_load_with(topo, certs, ns, count, bind, stop_reading, 30)
}

fn spawn_load_with(
    _topo: &Topology,
    certs: &Path,
    ns: &gate64_testkit::Netns,
    count: usize,
    bind: &str,
    stop_reading: bool,
    timeout_secs: u64,
) -> Result<Process> {
    let bin = find_binary("iphttps-load", "IPHTTPS_LOAD_BIN")
        .context("run `cargo build -p gate64-testkit --bins` first")?;
    let (count, timeout) = (count.to_string(), timeout_secs.to_string());
    let url = format!("https://{CLIENT_GW_V4}/IPHTTPS");
    let ca = certs.join("ca.pem");
    let mut argv = vec![
        path_str(&bin)?,
        "--url",
        &url,
        "--ca",
        path_str(&ca)?,
        "--count",
        &count,
        "--concurrency",
        "64",
        "--timeout",
        &timeout,
        "--hold-secs",
        "0",
    ];
    if !bind.is_empty() {
        argv.extend(["--bind", bind]);
    }
    if stop_reading {
        argv.push("--stop-reading");
    }
    ns.spawn("iphttps-load", &argv)
}

/// The `established=... failed=...` line once every attempt has finished.
fn load_summary(load: &Process) -> Option<String> {
    load.log()
        .lines()
        .find(|l| l.starts_with("established="))
        .map(str::to_owned)
}

/// `key=<number>` in a summary line.
fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))?
        .parse()
        .ok()
}

/// A `/proc/<pid>/status` line in KiB (`VmRSS`, `VmHWM`).
fn rss_kib(pid: u32, key: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no {key} in /proc/{pid}/status"))
}
