//! `gate64 bench flows`: the clients' traffic, bound to the load generator's inner addresses.
//!
//! Two parts, both optional:
//! - probes: one UDP echo (three tries, 2 s each) from each client (`--probe-all`), so every
//!   client's tunnels are shown to carry traffic; 512 clients are probed at once, and the
//!   clients none of whose tries came back are probed again afterwards, a few at a time, so a
//!   probe lost in the first round's bursts is told apart from a client that carries nothing
//!   (both rounds, and on which try each echo came, are in the result);
//! - bulk: `--flows` paced flows spread evenly over the clients, offering `--mbps` in all:
//!   a `--udp-share` of them UDP echo streams (loss and latency), the others TCP, uploads and
//!   downloads alternating; a `--nat64-share` of them go to the IPv4-only host by name
//!   (resolved through gate64's DNS64 from inside a tunnel), the rest to the native IPv6 host.

use super::dns::resolve_aaaa;
use super::paths::Paths;
use super::udp::bind_udp;
use super::{Direction, PACE_TICK, TcpRequest, UDP_PAYLOAD, UdpHeader, due_bytes, paced_write};
use crate::bench::spec::{ClientAddress, Transport, parse_addresses};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, UdpSocket};
use tokio::time::Instant;

/// Probes in flight at once (each holds a socket).
const PROBE_CONCURRENCY: usize = 512;
/// Tries of one client's probe, each waiting this long for the echo.
const PROBE_TRIES: usize = 3;
/// The second round: clients whose probe failed are probed again this many at a time, when
/// no more than `REPROBE_MAX` failed (more is a broken path, not lost probes).
const REPROBE_CONCURRENCY: usize = 8;
const REPROBE_MAX: usize = 1_000;
/// Failed clients listed in the result, with why.
const FAILURES_LISTED: usize = 20;
const PROBE_WAIT: Duration = Duration::from_secs(2);
/// How long the senders wait for the last echoes and counts after their paced period.
const DRAIN: Duration = Duration::from_secs(2);
/// Bound on connecting a TCP flow.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Clients tried in turn for the DNS64 lookup, spread over the population (a client whose
/// tunnels are being set up again does not stop the run).
const RESOLVE_ATTEMPTS: usize = 20;
/// The longest the DNS64 lookup may take over all its attempts (each waits 2 s for an
/// answer): a DNS64 that answers no client within it is broken, not slow.
const RESOLVE_BUDGET: Duration = Duration::from_secs(10);

/// Options of `gate64 bench flows`.
#[derive(Debug, Clone, clap::Args)]
pub struct FlowsArgs {
    /// The load generator's addresses file (`<inner IPv6> <teredo|iphttps>` per line).
    #[arg(long)]
    pub addresses: PathBuf,
    /// The native IPv6 server.
    #[arg(long)]
    pub v6_server: Ipv6Addr,
    /// The IPv4-only server's name, resolved through DNS64.
    #[arg(long)]
    pub v4_name: String,
    /// gate64's DNS64 address.
    #[arg(long)]
    pub dns: Ipv6Addr,
    /// The address DNS64 should synthesize for `--v4-name`: a different answer is a DNS64
    /// failure.
    #[arg(long)]
    pub dns64_expect: Option<Ipv6Addr>,
    /// Lab use only: when the DNS64 lookup fails, send the NAT64 share to this address
    /// instead, so the NAT64 figures can still be measured. The run still reports DNS64 as
    /// failed (`paths.dns64`), and every caller fails on it.
    #[arg(long)]
    pub nat64_fallback: Option<Ipv6Addr>,
    /// The servers' port (TCP and UDP).
    #[arg(long, default_value_t = 9000)]
    pub port: u16,
    /// Offered load of the bulk flows in all, Mbit/s (0: probes only).
    #[arg(long, default_value_t = 0.0)]
    pub mbps: f64,
    /// Duration of the bulk flows.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Number of bulk flows, spread evenly over the clients.
    #[arg(long, default_value_t = 64)]
    pub flows: usize,
    /// Share of the bulk flows that are UDP echo streams.
    #[arg(long, default_value_t = 0.3)]
    pub udp_share: f64,
    /// Share of the flows (and probes) towards the IPv4-only server through NAT64.
    #[arg(long, default_value_t = 1.0 / 3.0)]
    pub nat64_share: f64,
    /// Send one UDP probe from every client first.
    #[arg(long)]
    pub probe_all: bool,
    /// Where to write the result (JSON).
    #[arg(long)]
    pub out: PathBuf,
    /// Runtime threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

/// What one `gate64 bench flows` run measured (its `--out` file).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FlowsResult {
    /// Clients in the addresses file.
    pub clients: usize,
    /// Clients probed.
    pub probed: usize,
    /// Clients whose probe came back, in the first round or the second.
    pub probe_ok: usize,
    /// Clients whose probe came back in the first round (512 clients probed at once).
    pub probe_ok_first_round: usize,
    /// Of the first round's echoes, how many came on the first, second, third try.
    pub probe_answered_at_try: Vec<u64>,
    /// Clients probed again in the second round (those the first round failed, when no more
    /// than 1,000 did), a few at a time.
    pub reprobed: usize,
    /// Of those, whose probe came back.
    pub reprobe_ok: usize,
    /// Up to 20 clients whose probe did not come back in either round.
    pub probe_failed: Vec<Ipv6Addr>,
    /// Up to 20 clients whose probe failed in the first round: which, how, and whether the
    /// second round reached them.
    pub probe_failures: Vec<ProbeFailure>,
    /// The IPv4-only server's synthesized address (DNS64, or `--nat64-fallback`).
    pub nat64_target: Option<Ipv6Addr>,
    /// Why the DNS64 lookup failed, if it did.
    pub dns64_error: Option<String>,
    /// What each path carried, and the DNS64 lookup's outcome.
    pub paths: Paths,
    /// Offered load of the bulk flows, Mbit/s.
    pub offered_mbps: f64,
    /// Duration of the bulk flows.
    pub seconds: f64,
    /// TCP bulk flows.
    pub tcp_flows: usize,
    /// UDP bulk flows.
    pub udp_flows: usize,
    /// Bulk flows towards the IPv4-only host.
    pub nat64_flows: usize,
    /// Bytes the TCP flows were to move.
    pub tcp_offered_bytes: u64,
    /// Bytes the TCP flows delivered (counted by the receiving end).
    pub tcp_bytes: u64,
    /// TCP flows that failed (connect, reset, timeout).
    pub tcp_errors: usize,
    /// First TCP error, for the report.
    pub tcp_first_error: Option<String>,
    /// UDP datagrams sent.
    pub udp_sent: u64,
    /// UDP datagrams echoed back.
    pub udp_received: u64,
    /// UDP round-trip loss, percent.
    pub loss_percent: f64,
    /// UDP round-trip time, median, ms.
    pub rtt_p50_ms: f64,
    /// UDP round-trip time, 99th percentile, ms.
    pub rtt_p99_ms: f64,
    /// Payload moved through the tunnels per second, both directions (TCP once, UDP twice:
    /// out and echoed), Mbit/s.
    pub goodput_mbps: f64,
}

/// A client whose probe failed in the first round.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProbeFailure {
    /// Its inner address.
    pub inner: Ipv6Addr,
    /// Its transport.
    pub transport: Transport,
    /// Whether the probe went to the IPv4-only host through NAT64.
    pub nat64: bool,
    /// Why: no echo within the tries, or the error binding or sending.
    pub error: String,
    /// When its first try went, in ms since the first round began.
    pub sent_at_ms: u64,
    /// Whether the second round's probe came back (`None`: not probed again).
    pub reprobe_ok: Option<bool>,
}

/// Runs `gate64 bench flows`.
pub fn run(args: &FlowsArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.addresses)
        .with_context(|| format!("reading {}", args.addresses.display()))?;
    let clients = parse_addresses(&text)?;
    if clients.is_empty() {
        bail!("{}: no client is up", args.addresses.display());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .context("starting a runtime")?;
    let result = rt.block_on(measure(args, &clients))?;
    let json = serde_json::to_string_pretty(&result)?;
    std::fs::write(&args.out, json).with_context(|| format!("writing {}", args.out.display()))
}

/// Whether item `k` of a sequence belongs to a `share` spread evenly over it.
fn in_share(k: usize, share: f64) -> bool {
    ((k + 1) as f64 * share).floor() > (k as f64 * share).floor()
}

async fn measure(args: &FlowsArgs, clients: &[ClientAddress]) -> Result<FlowsResult> {
    let mut result = FlowsResult {
        clients: clients.len(),
        ..FlowsResult::default()
    };
    let v6 = SocketAddr::V6(SocketAddrV6::new(args.v6_server, args.port, 0, 0));
    let nat64 = if args.nat64_share > 0.0 {
        let dns64 = &mut result.paths.dns64;
        dns64.tried = true;
        let answer = resolve(args, clients).await.and_then(|a| {
            dns64.answer = Some(a);
            match args.dns64_expect {
                Some(want) if want != a => {
                    bail!("DNS64 answered {a} for {}, expected {want}", args.v4_name)
                }
                _ => Ok(a),
            }
        });
        let target = match (answer, args.nat64_fallback) {
            (Ok(t), _) => {
                dns64.ok = true;
                Some(t)
            }
            (Err(e), fallback) => {
                let e = format!("{e:#}");
                eprintln!("{e}");
                dns64.error = Some(e.clone());
                result.dns64_error = Some(e);
                dns64.fallback_used = fallback.is_some();
                fallback
            }
        };
        result.nat64_target = target;
        target.map(|t| SocketAddr::V6(SocketAddrV6::new(t, args.port, 0, 0)))
    } else {
        None
    };
    // Each flow's destination, and whether it goes through NAT64. Without a NAT64 address
    // (DNS64 failed, no fallback) every flow goes to the IPv6 server, and DNS64 is reported
    // as failed.
    let target = |k: usize| match nat64 {
        Some(t) if in_share(k, args.nat64_share) => (t, true),
        _ => (v6, false),
    };
    if args.probe_all {
        probe_all(clients, &target, &mut result).await;
    }
    if args.mbps > 0.0 && args.flows > 0 {
        bulk(args, clients, &target, &mut result).await;
    }
    Ok(result)
}

async fn resolve(args: &FlowsArgs, clients: &[ClientAddress]) -> Result<Ipv6Addr> {
    let server = SocketAddr::V6(SocketAddrV6::new(args.dns, 53, 0, 0));
    let mut last = anyhow::anyhow!("no client");
    let stride = (clients.len() / RESOLVE_ATTEMPTS).max(1);
    let give_up = Instant::now() + RESOLVE_BUDGET;
    for c in clients.iter().step_by(stride).take(RESOLVE_ATTEMPTS) {
        if Instant::now() >= give_up {
            break;
        }
        match resolve_aaaa(c.inner, server, &args.v4_name).await {
            Ok(a) => return Ok(a),
            Err(e) => last = e,
        }
    }
    Err(last.context("resolving the IPv4-only host through DNS64"))
}

async fn probe_all(
    clients: &[ClientAddress],
    target: &impl Fn(usize) -> (SocketAddr, bool),
    result: &mut FlowsResult,
) {
    result.probed = clients.len();
    result.probe_answered_at_try = vec![0; PROBE_TRIES];
    let all: Vec<usize> = (0..clients.len()).collect();
    let round_start = Instant::now();
    let (first, sent_at) = probe_round(clients, &all, target, PROBE_CONCURRENCY).await;
    let mut failed = Vec::new();
    for (&i, outcome) in all.iter().zip(&first) {
        match outcome {
            Ok(try_index) => {
                result.probe_ok_first_round += 1;
                if let Some(n) = result.probe_answered_at_try.get_mut(*try_index) {
                    *n += 1;
                }
            }
            Err(_) => failed.push(i),
        }
    }
    let second = if failed.len() <= REPROBE_MAX {
        result.reprobed = failed.len();
        probe_round(clients, &failed, target, REPROBE_CONCURRENCY)
            .await
            .0
    } else {
        Vec::new()
    };
    for (k, &i) in failed.iter().enumerate() {
        let reprobe_ok = second.get(k).map(Result::is_ok);
        result.reprobe_ok += usize::from(reprobe_ok == Some(true));
        if result.probe_failures.len() < FAILURES_LISTED {
            result.probe_failures.push(ProbeFailure {
                inner: clients[i].inner,
                transport: clients[i].transport,
                nat64: target(i).1,
                error: first[i]
                    .as_ref()
                    .err()
                    .map_or_else(String::new, |e| format!("{e:#}")),
                sent_at_ms: sent_at[i]
                    .map_or(0, |at| at.duration_since(round_start).as_millis() as u64),
                reprobe_ok,
            });
        }
        if reprobe_ok != Some(true) && result.probe_failed.len() < FAILURES_LISTED {
            result.probe_failed.push(clients[i].inner);
        }
    }
    result.probe_ok = result.probe_ok_first_round + result.reprobe_ok;
    // A client counts on its paths as passed when either round reached it.
    let reached_again: std::collections::HashSet<usize> = (failed.iter().zip(&second))
        .filter(|(_, r)| r.is_ok())
        .map(|(&i, _)| i)
        .collect();
    for (i, (c, outcome)) in clients.iter().zip(&first).enumerate() {
        let ok = outcome.is_ok() || reached_again.contains(&i);
        for path in result.paths.on(target(i).1, c.transport) {
            path.probe(ok);
        }
    }
}

/// Probes the clients `which` (indices into `clients`), `concurrency` at a time. Returns,
/// in the order of `which`, each outcome (the try that got the echo, or why none did) and
/// when its first try started.
async fn probe_round(
    clients: &[ClientAddress],
    which: &[usize],
    target: &impl Fn(usize) -> (SocketAddr, bool),
    concurrency: usize,
) -> (Vec<Result<usize>>, Vec<Option<Instant>>) {
    let limit = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    let mut started = vec![None; which.len()];
    for (k, &i) in which.iter().enumerate() {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            break;
        };
        started[k] = Some(Instant::now());
        let (src, (dst, _)) = (clients[i].inner, target(i));
        tasks.spawn(async move {
            let outcome = probe(src, dst, i as u64).await;
            drop(permit);
            (k, outcome)
        });
    }
    let mut outcomes: Vec<Result<usize>> = which
        .iter()
        .map(|_| Err(anyhow::anyhow!("not probed")))
        .collect();
    while let Some(done) = tasks.join_next().await {
        // A probe task cannot panic; one that did leaves its client "not probed".
        if let Ok((k, outcome)) = done {
            outcomes[k] = outcome;
        }
    }
    (outcomes, started)
}

/// One client's probe: the index of the try whose echo came back. Each try waits its whole
/// [`PROBE_WAIT`] for the echo: a receive error (an ICMPv6 error the kernel matched to the
/// socket) or a datagram that is not the echo is noted and the wait goes on, so a failure
/// always means three tries of [`PROBE_WAIT`] without the echo, and its text says what else
/// each try saw.
async fn probe(src: Ipv6Addr, dst: SocketAddr, seq: u64) -> Result<usize> {
    let sock = bind_udp(src).with_context(|| format!("binding {src}"))?;
    sock.connect(dst).await?;
    let mut buf = [0_u8; 64];
    let header = UdpHeader {
        flow: u32::MAX,
        seq,
        sent_us: 0,
    };
    header.write(&mut buf);
    let mut seen = Vec::new();
    for try_index in 0..PROBE_TRIES {
        sock.send(&buf[..UdpHeader::LEN])
            .await
            .with_context(|| format!("sending to {dst}"))?;
        let sent = Instant::now();
        let deadline = sent + PROBE_WAIT;
        let mut reply = [0_u8; 64];
        let (mut strays, mut errors, mut first_error) = (0_u32, 0_u32, None);
        while let Ok(received) = tokio::time::timeout_at(deadline, sock.recv(&mut reply)).await {
            match received {
                Ok(n) if UdpHeader::parse(&reply[..n]) == Some(header) => return Ok(try_index),
                Ok(_) => strays += 1,
                // Reported once per ICMPv6 error, so this does not spin.
                Err(e) => {
                    errors += 1;
                    first_error
                        .get_or_insert_with(|| format!("{e} at {} ms", sent.elapsed().as_millis()));
                }
            }
        }
        if strays > 0 || errors > 0 {
            seen.push(format!(
                "try {}: {strays} other datagram(s), {errors} receive error(s){}",
                try_index + 1,
                first_error
                    .map(|e| format!(", the first {e}"))
                    .unwrap_or_default()
            ));
        }
    }
    let seen = if seen.is_empty() {
        "nothing else came".to_owned()
    } else {
        seen.join("; ")
    };
    bail!("no echo from {dst} in {PROBE_TRIES} tries of {PROBE_WAIT:?} ({seen})")
}

/// What one bulk flow reports.
#[derive(Debug, Default)]
struct FlowOutcome {
    tcp_offered: u64,
    tcp_bytes: u64,
    tcp_error: Option<String>,
    udp_sent: u64,
    udp_received: u64,
    rtts_us: Vec<u32>,
}

async fn bulk(
    args: &FlowsArgs,
    clients: &[ClientAddress],
    target: &impl Fn(usize) -> (SocketAddr, bool),
    result: &mut FlowsResult,
) {
    let flows = args.flows.min(clients.len());
    let bytes_per_sec = (args.mbps * 1e6 / 8.0 / flows as f64) as u64;
    let duration = Duration::from_secs(args.seconds);
    let epoch = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut tcp_count = 0_usize;
    for k in 0..flows {
        let client = clients[k * clients.len() / flows];
        let (src, transport) = (client.inner, client.transport);
        let (dst, nat64) = target(k);
        if nat64 {
            result.nat64_flows += 1;
        }
        if in_share(k, args.udp_share) {
            result.udp_flows += 1;
            let flow = k as u32;
            let run = udp_flow(flow, src, dst, bytes_per_sec, duration, epoch);
            tasks.spawn(async move { (nat64, transport, run.await) });
        } else {
            let direction = if tcp_count.is_multiple_of(2) {
                Direction::Upload
            } else {
                Direction::Download
            };
            tcp_count += 1;
            let req = TcpRequest {
                direction,
                bytes_per_sec,
                duration_ms: duration.as_millis() as u64,
            };
            let run = tcp_flow(src, dst, req);
            tasks.spawn(async move { (nat64, transport, run.await) });
        }
    }
    result.tcp_flows = tcp_count;
    result.offered_mbps = args.mbps;
    result.seconds = duration.as_secs_f64();
    let mut rtts = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let o = match done {
            Ok((nat64, transport, o)) => {
                let bytes = o.tcp_bytes + o.udp_received * UDP_PAYLOAD as u64;
                for path in result.paths.on(nat64, transport) {
                    path.flow(bytes);
                }
                o
            }
            Err(e) => FlowOutcome {
                tcp_error: Some(format!("flow task: {e}")),
                ..FlowOutcome::default()
            },
        };
        result.tcp_offered_bytes += o.tcp_offered;
        result.tcp_bytes += o.tcp_bytes;
        if let Some(e) = o.tcp_error {
            result.tcp_errors += 1;
            result.tcp_first_error.get_or_insert(e);
        }
        result.udp_sent += o.udp_sent;
        result.udp_received += o.udp_received;
        rtts.extend(o.rtts_us);
    }
    summarize(result, &mut rtts);
}

fn summarize(result: &mut FlowsResult, rtts_us: &mut [u32]) {
    if result.udp_sent > 0 {
        let lost = result.udp_sent.saturating_sub(result.udp_received);
        result.loss_percent = lost as f64 * 100.0 / result.udp_sent as f64;
    }
    rtts_us.sort_unstable();
    let pct = |p: f64| -> f64 {
        if rtts_us.is_empty() {
            return 0.0;
        }
        let i = ((rtts_us.len() - 1) as f64 * p).round() as usize;
        f64::from(rtts_us[i]) / 1000.0
    };
    result.rtt_p50_ms = pct(0.50);
    result.rtt_p99_ms = pct(0.99);
    if result.seconds > 0.0 {
        let udp = result.udp_received * 2 * UDP_PAYLOAD as u64;
        result.goodput_mbps = (result.tcp_bytes + udp) as f64 * 8.0 / result.seconds / 1e6;
    }
}

async fn udp_flow(
    flow: u32,
    src: Ipv6Addr,
    dst: SocketAddr,
    bytes_per_sec: u64,
    duration: Duration,
    epoch: Instant,
) -> FlowOutcome {
    let mut out = FlowOutcome::default();
    let sock = match bind_udp(src) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            out.tcp_error = Some(format!("UDP flow from {src}: {e:#}"));
            return out;
        }
    };
    if let Err(e) = sock.connect(dst).await {
        out.tcp_error = Some(format!("UDP flow from {src} to {dst}: {e}"));
        return out;
    }
    let receiver = tokio::spawn(udp_receive(sock.clone(), flow, epoch, duration + DRAIN));
    let start = Instant::now();
    let mut buf = vec![0_u8; UDP_PAYLOAD];
    while start.elapsed() < duration {
        let due = due_bytes(bytes_per_sec, start.elapsed()) / UDP_PAYLOAD as u64;
        while out.udp_sent < due {
            let header = UdpHeader {
                flow,
                seq: out.udp_sent,
                sent_us: epoch.elapsed().as_micros() as u64,
            };
            header.write(&mut buf);
            // A refused or dropped datagram is loss, which is what is measured.
            let _ = sock.send(&buf).await;
            out.udp_sent += 1;
        }
        tokio::time::sleep(PACE_TICK).await;
    }
    if let Ok((received, rtts)) = receiver.await {
        out.udp_received = received;
        out.rtts_us = rtts;
    }
    out
}

async fn udp_receive(
    sock: Arc<UdpSocket>,
    flow: u32,
    epoch: Instant,
    window: Duration,
) -> (u64, Vec<u32>) {
    let deadline = Instant::now() + window;
    let mut buf = vec![0_u8; 2048];
    let (mut received, mut rtts) = (0_u64, Vec::new());
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
        let Some(h) = UdpHeader::parse(&buf[..n]) else {
            continue;
        };
        if h.flow == flow {
            received += 1;
            let now = epoch.elapsed().as_micros() as u64;
            rtts.push(now.saturating_sub(h.sent_us).min(u64::from(u32::MAX)) as u32);
        }
    }
    (received, rtts)
}

async fn tcp_flow(src: Ipv6Addr, dst: SocketAddr, req: TcpRequest) -> FlowOutcome {
    let duration = Duration::from_millis(req.duration_ms);
    let mut out = FlowOutcome {
        tcp_offered: due_bytes(req.bytes_per_sec, duration),
        ..FlowOutcome::default()
    };
    match tcp_exchange(src, dst, req, duration).await {
        Ok(bytes) => out.tcp_bytes = bytes,
        Err(e) => out.tcp_error = Some(format!("TCP {src} -> {dst} ({:?}): {e:#}", req.direction)),
    }
    out
}

async fn tcp_exchange(
    src: Ipv6Addr,
    dst: SocketAddr,
    req: TcpRequest,
    duration: Duration,
) -> Result<u64> {
    let sock = TcpSocket::new_v6()?;
    socket2::SockRef::from(&sock).set_freebind_v6(true)?;
    sock.bind(SocketAddr::V6(SocketAddrV6::new(src, 0, 0, 0)))?;
    let mut stream = tokio::time::timeout(CONNECT_TIMEOUT, sock.connect(dst))
        .await
        .context("connect timed out")??;
    stream.set_nodelay(true)?;
    stream.write_all(&req.encode()).await?;
    let bound = duration + CONNECT_TIMEOUT + DRAIN;
    let exchange = async {
        match req.direction {
            Direction::Upload => {
                paced_write(&mut stream, req.bytes_per_sec, duration).await?;
                stream.shutdown().await?;
                let mut count = [0_u8; 8];
                stream.read_exact(&mut count).await?;
                Ok::<u64, anyhow::Error>(u64::from_be_bytes(count))
            }
            Direction::Download => {
                let mut buf = vec![0_u8; 64 * 1024];
                let mut total = 0_u64;
                loop {
                    let n = stream.read(&mut buf).await?;
                    if n == 0 {
                        return Ok(total);
                    }
                    total += n as u64;
                }
            }
        }
    };
    tokio::time::timeout(bound, exchange)
        .await
        .context("flow did not finish in time")?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_spread_evenly() {
        let picked = (0..9).filter(|&k| in_share(k, 1.0 / 3.0)).count();
        assert_eq!(picked, 3);
        assert_eq!((0..10).filter(|&k| in_share(k, 0.3)).count(), 3);
        assert!(!(0..10).any(|k| in_share(k, 0.0)));
    }

    #[test]
    fn summary_counts_loss_and_percentiles() {
        let mut r = FlowsResult {
            udp_sent: 200,
            udp_received: 198,
            seconds: 1.0,
            tcp_bytes: 1_000_000,
            ..FlowsResult::default()
        };
        let mut rtts: Vec<u32> = (1..=100).map(|v| v * 1000).collect();
        summarize(&mut r, &mut rtts);
        assert!((r.loss_percent - 1.0).abs() < 1e-9);
        assert_eq!(r.rtt_p99_ms, 99.0);
        assert_eq!(r.rtt_p50_ms, 51.0);
        assert!(r.goodput_mbps > 8.0);
    }

    /// Sink and flows over loopback: probes and bulk flows of both protocols and directions
    /// deliver (no namespaces: `::1` stands in for every client and both servers).
    #[test]
    fn flows_against_the_sink_on_loopback() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let port = super::super::sink::serve_for_test(Ipv6Addr::LOCALHOST.into())
                .unwrap()
                .port();
            let clients: Vec<ClientAddress> = (0..4)
                .map(|_| ClientAddress {
                    inner: Ipv6Addr::LOCALHOST,
                    transport: crate::bench::spec::Transport::Teredo,
                })
                .collect();
            let args = FlowsArgs {
                addresses: PathBuf::new(),
                v6_server: Ipv6Addr::LOCALHOST,
                v4_name: String::new(),
                dns: Ipv6Addr::LOCALHOST,
                dns64_expect: None,
                nat64_fallback: None,
                port,
                mbps: 8.0,
                seconds: 1,
                flows: 4,
                udp_share: 0.5,
                nat64_share: 0.0,
                probe_all: true,
                out: PathBuf::new(),
                threads: 2,
            };
            let r = measure(&args, &clients).await.unwrap();
            assert_eq!((r.probed, r.probe_ok), (4, 4), "{r:?}");
            assert_eq!(r.probe_ok_first_round, 4, "{r:?}");
            assert_eq!(r.probe_answered_at_try.iter().sum::<u64>(), 4, "{r:?}");
            assert_eq!((r.reprobed, r.reprobe_ok), (0, 0), "{r:?}");
            assert!(r.probe_failures.is_empty() && r.probe_failed.is_empty());
            assert_eq!((r.udp_flows, r.tcp_flows, r.tcp_errors), (2, 2, 0), "{r:?}");
            assert!(r.udp_received > 0 && r.tcp_bytes > 0, "{r:?}");
            assert!(r.paths.failures().is_empty(), "{:?}", r.paths.failures());
            assert_eq!((r.paths.teredo.probes, r.paths.teredo.probes_ok), (4, 4));
            assert_eq!((r.paths.ipv6.flows, r.paths.teredo.flows), (4, 4));
            assert!(r.paths.ipv6.bytes > 0 && !r.paths.dns64.tried, "{r:?}");

            // A client whose inner address is not on this host fails both rounds, with why,
            // and only its paths count the failure.
            let mut with_broken = clients.clone();
            with_broken.push(ClientAddress {
                inner: "2001:db8:dead::1".parse().unwrap(),
                transport: crate::bench::spec::Transport::Iphttps,
            });
            let probes_only = FlowsArgs {
                mbps: 0.0,
                ..args.clone()
            };
            let r = measure(&probes_only, &with_broken).await.unwrap();
            assert_eq!((r.probed, r.probe_ok, r.probe_ok_first_round), (5, 4, 4));
            assert_eq!((r.reprobed, r.reprobe_ok), (1, 0), "{r:?}");
            assert_eq!(r.probe_failed, vec![with_broken[4].inner]);
            let f = &r.probe_failures[0];
            assert_eq!((f.inner, f.reprobe_ok), (with_broken[4].inner, Some(false)));
            // `bind_udp` binds any address (IP_FREEBIND), so the send goes out and no echo
            // comes back to an address that is not this host's.
            assert!(f.error.starts_with("no echo"), "{f:?}");
            assert_eq!((r.paths.iphttps.probes, r.paths.iphttps.probes_ok), (1, 0));
            assert_eq!((r.paths.teredo.probes, r.paths.teredo.probes_ok), (4, 4));

            // A NAT64 share whose DNS64 server does not answer (nothing serves [::1]:53 in
            // the test): DNS64 is reported failed,
            // nothing goes to the IPv4-only server, the run still measures the rest.
            let args = FlowsArgs {
                dns: Ipv6Addr::LOCALHOST,
                nat64_share: 0.5,
                mbps: 0.0,
                v4_name: "v4only.corp.example".into(),
                ..args
            };
            let r = measure(&args, &clients[..1]).await.unwrap();
            let f = r.paths.failures();
            assert!(r.paths.dns64.tried && !r.paths.dns64.ok, "{r:?}");
            assert!(f.len() == 1 && f[0].starts_with("DNS64: "), "{f:?}");
            assert_eq!((r.nat64_target, r.paths.nat64.probes), (None, 0), "{r:?}");
        });
    }
}
