//! `gate64 demo`: the no-root lab. Starts the daemon on loopback (Teredo on 127.0.0.1 and
//! 127.0.0.2), an in-process corporate network behind it (corporate links are connected UDP
//! sockets carrying raw IPv6 instead of TUN queues), and a population of emulated Teredo
//! clients that qualify, ping a corporate host and then exchange traffic with it. Prints live
//! figures and, at the end, a capacity table in the columns of the Windows Server 2012
//! DirectAccess reference.

use crate::daemon::Daemon;
use anyhow::{Context, Result, bail};
use gate64_config::Config;
use gate64_dataplane::{Direction, Drop, Side, Stats};
use gate64_io::CorpLink;
use gate64_teredo::client::{Client, Event};
use gate64_wire::{checksum, icmpv6, ipv6};
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The corporate host the clients talk to.
const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc0, 0, 0, 0, 0, 0x10);
/// UDP echo (RFC 862) and discard (RFC 863) ports.
const ECHO_PORT: u16 = 7;
const DISCARD_PORT: u16 = 9;
/// Bulk packets fill the Teredo MTU.
const BULK_PACKET: usize = 1280;
/// UDP echo requests: small, like interactive traffic.
const ECHO_PACKET: usize = 128;
/// Client pacing tick.
const TICK: Duration = Duration::from_millis(50);
/// A UDP echo request every this many ticks.
const ECHO_EVERY_TICKS: u32 = 4;
/// Threads driving the emulated clients.
const CLIENT_THREADS: usize = 2;
/// Socket buffers: generous, so loopback bursts are not lost in the kernel.
const SOCKET_BUFFER: usize = 4 << 20;

/// The Windows Server 2012 DirectAccess reference row.
fn reference_row() -> [String; 7] {
    [
        "reference: WS2012 DirectAccess",
        "750",
        "84.2",
        "118.8",
        "46.4% of 4 cores",
        "-",
        "~750 MB (~1 MB/client)",
    ]
    .map(String::from)
}

/// Options of `gate64 demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Number of emulated Teredo clients.
    #[arg(long, default_value_t = 200)]
    pub clients: usize,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Worker threads of the daemon (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Total client → corporate network load (UDP to the discard port), Mbit/s.
    #[arg(long, default_value_t = 200.0)]
    pub rate_mbit: f64,
    /// Total corporate network → clients load (a bulk stream to every client), Mbit/s.
    #[arg(long, default_value_t = 50.0)]
    pub down_mbit: f64,
}

/// Counters shared by the clients, the corporate network and the progress line.
#[derive(Default)]
struct Totals {
    qualified: AtomicU64,
    pinged: AtomicU64,
    echo_sent: AtomicU64,
    echo_answered: AtomicU64,
    up_bytes: AtomicU64,
    down_bytes: AtomicU64,
    client_errors: AtomicU64,
    corp_pings: AtomicU64,
    corp_echoes: AtomicU64,
    corp_discarded: AtomicU64,
    corp_sent: AtomicU64,
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Runs the demo. Errors (exit 1) when fewer than 95% of the clients qualified or got their
/// ping answered.
pub fn run(args: &DemoArgs) -> Result<()> {
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .try_init();

    let totals = Arc::new(Totals::default());
    let stop = Arc::new(AtomicBool::new(false));
    let corp_sock = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .context("binding the corporate network's socket")?;
    corp_sock.set_read_timeout(Some(Duration::from_millis(5)))?;
    let corp_addr = corp_sock.local_addr()?;

    let (daemon, port, workers) = start_daemon(args, corp_addr)?;
    let server = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    eprintln!(
        "gate64 demo: Teredo server on 127.0.0.1:{port} and 127.0.0.2:{port}, {workers} workers, corporate host {CORP_HOST}, {} clients for {} s",
        args.clients, args.seconds
    );

    let corp = {
        let (totals, stop) = (Arc::clone(&totals), Arc::clone(&stop));
        let down = args.down_mbit * 1e6 / 8.0;
        std::thread::Builder::new()
            .name("demo-corpnet".into())
            .spawn(move || corpnet(corp_sock, down, &totals, &stop))?
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(CLIENT_THREADS)
        .thread_name("demo-clients")
        .enable_all()
        .build()
        .context("starting the client runtime")?;
    let cpu0 = Cpu::sample();
    let t0 = Instant::now();
    let bytes0 = side_bytes(&daemon.workers.stats());
    let end = t0 + Duration::from_secs(args.seconds);
    let per_client = args.rate_mbit * 1e6 / 8.0 / args.clients as f64;
    let seed = RandomSeed::default();
    let tasks: Vec<_> = (0..args.clients)
        .map(|i| {
            let totals = Arc::clone(&totals);
            let seed = seed.next(i as u64);
            rt.spawn(async move {
                if let Err(e) = emulated_client(server, seed, per_client, end, &totals).await {
                    tracing::warn!(client = i, error = %e, "emulated client failed");
                    add(&totals.client_errors, 1);
                }
            })
        })
        .collect();

    // Live progress, once per second.
    let mut last = (t0, bytes0);
    let tty = io::IsTerminal::is_terminal(&io::stderr());
    while Instant::now() < end {
        std::thread::sleep(
            Duration::from_secs(1).min(end.saturating_duration_since(Instant::now())),
        );
        let now = Instant::now();
        let b = side_bytes(&daemon.workers.stats());
        let dt = now.duration_since(last.0).as_secs_f64().max(1e-3);
        let line = format!(
            "[{:>3.0}s] qualified {}/{}  pings answered {}  corpnet {:.1} Mbit/s  internet {:.1} Mbit/s",
            now.duration_since(t0).as_secs_f64(),
            get(&totals.qualified),
            args.clients,
            get(&totals.pinged),
            mbit(b.0 - last.1.0, dt),
            mbit(b.1 - last.1.1, dt),
        );
        if tty {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
        let _ = io::stderr().flush();
        last = (now, b);
    }
    if tty {
        eprintln!();
    }
    rt.block_on(async {
        for t in tasks {
            let _ = t.await;
        }
    });
    let wall = t0.elapsed().as_secs_f64();
    let cpu1 = Cpu::sample();
    let bytes1 = side_bytes(&daemon.workers.stats());
    let rss = rss_bytes();
    let drops = drop_counts(&daemon.workers.stats());
    let peers = daemon.shared.gauges(Instant::now()).teredo_clients;
    stop.store(true, Ordering::Relaxed);
    rt.shutdown_timeout(Duration::from_secs(1));
    let _ = corp.join();
    daemon.stop()?;

    let n = args.clients as u64;
    let qualified = get(&totals.qualified);
    let pinged = get(&totals.pinged);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers_pct = cpu1.workers.saturating_sub(cpu0.workers).as_secs_f64() / wall * 100.0;
    let process_pct = cpu1.process.saturating_sub(cpu0.process).as_secs_f64() / wall * 100.0;
    let ours = [
        "gate64 demo (this run)".to_owned(),
        format!("{qualified}/{n}"),
        format!("{:.1}", mbit(bytes1.0 - bytes0.0, wall)),
        format!("{:.1}", mbit(bytes1.1 - bytes0.1, wall)),
        format!(
            "{workers_pct:.1}% of 1 core ({:.1}% of {cores})",
            workers_pct / cores as f64
        ),
        format!("{process_pct:.1}% of 1 core"),
        match rss {
            Some(r) => format!(
                "{:.1} MB ({:.1} KB/client)",
                r as f64 / 1e6,
                r as f64 / 1e3 / n as f64
            ),
            None => "?".into(),
        },
    ];
    println!();
    print_table(&[ours, reference_row()]);
    println!();
    println!(
        "clients: {qualified}/{n} qualified, {pinged}/{n} pings answered, UDP echo {}/{} answered, {} relay peers valid",
        get(&totals.echo_answered),
        get(&totals.echo_sent),
        peers
    );
    println!(
        "traffic: clients sent {:.1} MB to the discard port (corpnet received {:.1} MB), corpnet sent {:.1} MB (clients received {:.1} MB)",
        get(&totals.up_bytes) as f64 / 1e6,
        get(&totals.corp_discarded) as f64 / 1e6,
        get(&totals.corp_sent) as f64 / 1e6,
        get(&totals.down_bytes) as f64 / 1e6,
    );
    println!(
        "CPU: workers = threads gate64-w*, process = everything in this process (daemon, emulated clients and corporate network)"
    );
    if drops.is_empty() {
        println!("drops: none");
    } else {
        let d: Vec<_> = drops.iter().map(|(r, c)| format!("{r}={c}")).collect();
        println!("drops: {}", d.join(" "));
    }
    if get(&totals.client_errors) > 0 {
        println!(
            "client errors: {} (failed tasks or refused datagrams)",
            get(&totals.client_errors)
        );
    }
    let need = (n * 95).div_ceil(100);
    let mut failed = Vec::new();
    if qualified < need {
        failed.push(format!("only {qualified}/{n} clients qualified"));
    }
    if pinged < need {
        failed.push(format!("only {pinged}/{n} clients got their ping answered"));
    }
    if !failed.is_empty() {
        bail!(
            "demo failed: {} (need at least 95%, {need})",
            failed.join(", ")
        );
    }
    println!("demo ok: {qualified}/{n} qualified, {pinged}/{n} pings answered");
    Ok(())
}

/// Starts the daemon on a free port bound on both 127.0.0.1 and 127.0.0.2, with one corporate
/// link per worker connected to the corporate network at `corp`.
fn start_daemon(args: &DemoArgs, corp: SocketAddr) -> Result<(Daemon, u16, usize)> {
    let seed = RandomSeed::default();
    let mut last_err = None;
    for attempt in 0..20u64 {
        let port = 20_000 + (seed.next(attempt) % 40_000) as u16;
        // A plain bind (no SO_REUSEPORT) fails if anything holds the port.
        let probe = (
            UdpSocket::bind((Ipv4Addr::LOCALHOST, port)),
            UdpSocket::bind((Ipv4Addr::new(127, 0, 0, 2), port)),
        );
        if probe.0.is_err() || probe.1.is_err() {
            continue;
        }
        drop(probe);
        let mut cfg = Config::lab(Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 2), port);
        cfg.server.workers = args.workers;
        // Every emulated client comes from 127.0.0.1: the per-source RS limit would hold them
        // back.
        cfg.limits.rs_per_source_per_sec = 1_000_000;
        cfg.limits.rs_burst = 1_000_000;
        cfg.validate().context("the lab configuration")?;
        let workers = cfg.effective_workers();
        let links = (0..workers)
            .map(|_| {
                let s = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
                s.connect(corp)?;
                s.set_nonblocking(true)?;
                Ok(CorpLink::Socket(s))
            })
            .collect::<io::Result<Vec<_>>>()
            .context("creating the corporate links")?;
        match Daemon::start(&cfg, Some(links)) {
            Ok(d) => return Ok((d, port, workers)),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no free UDP port on 127.0.0.1 and 127.0.0.2")))
        .context("starting the daemon on loopback")
}

fn udp_socket(addr: SocketAddrV4) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// The corporate network: a host at [`CORP_HOST`] answering ICMPv6 echo and UDP echo,
/// discarding UDP to port 9, and sending a bulk stream of `down` bytes/s spread over every
/// client it has heard from. Replies go to the worker socket the request came from.
fn corpnet(sock: UdpSocket, down: f64, totals: &Totals, stop: &AtomicBool) {
    let mut buf = vec![0u8; 65_536];
    let mut out = vec![0u8; BULK_PACKET];
    let mut clients: HashMap<Ipv6Addr, SocketAddr> = HashMap::new();
    let mut order: Vec<Ipv6Addr> = Vec::new();
    let mut rr = 0usize;
    let mut tokens = 0.0f64;
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            let pkt = &mut buf[..n];
            if let Some(src) = answer(pkt, totals) {
                if clients.insert(src, from).is_none() {
                    order.push(src);
                }
                if pkt[0] != 0 {
                    let _ = sock.send_to(pkt, from);
                }
            }
        }
        let now = Instant::now();
        let dt = now.duration_since(last).as_secs_f64();
        if dt < 0.002 {
            continue;
        }
        last = now;
        if order.is_empty() || down <= 0.0 {
            continue;
        }
        tokens = (tokens + down * dt).min(down * 0.05);
        while tokens >= BULK_PACKET as f64 {
            rr = (rr + 1) % order.len();
            let dst = order[rr];
            let via = clients[&dst];
            if let Ok(len) = emit_udp(
                &mut out,
                &CORP_HOST,
                &dst,
                DISCARD_PORT,
                DISCARD_PORT,
                BULK_PACKET - 48,
            ) && sock.send_to(&out[..len], via).is_ok()
            {
                add(&totals.corp_sent, len as u64);
            }
            tokens -= BULK_PACKET as f64;
        }
    }
}

/// Turns a request in `pkt` into its answer in place. Returns the client's address when the
/// packet was for [`CORP_HOST`]; `pkt[0]` is zeroed when nothing goes back.
fn answer(pkt: &mut [u8], totals: &Totals) -> Option<Ipv6Addr> {
    let p = ipv6::Packet::new_checked(pkt).ok()?;
    let (src, dst, nh, len) = (p.src(), p.dst(), p.next_header(), p.total_len());
    if dst != CORP_HOST {
        return None;
    }
    let tc = icmpv6::type_code(&p);
    let pkt = &mut pkt[..len];
    match nh {
        ipv6::NH_ICMPV6 if tc == Some((icmpv6::TYPE_ECHO_REQUEST, 0)) => {
            swap_addresses(pkt);
            pkt[ipv6::HEADER_LEN] = icmpv6::TYPE_ECHO_REPLY;
            icmpv6::fill_checksum(pkt).ok()?;
            add(&totals.corp_pings, 1);
        }
        ipv6::NH_UDP if len >= ipv6::HEADER_LEN + 8 => {
            let u = ipv6::HEADER_LEN;
            let dport = u16::from_be_bytes([pkt[u + 2], pkt[u + 3]]);
            match dport {
                ECHO_PORT => {
                    swap_addresses(pkt);
                    let (a, b) = pkt[u..u + 4].split_at_mut(2);
                    a.swap_with_slice(b);
                    fill_udp_checksum(pkt);
                    add(&totals.corp_echoes, 1);
                }
                DISCARD_PORT => {
                    add(&totals.corp_discarded, len as u64);
                    pkt[0] = 0;
                }
                _ => pkt[0] = 0,
            }
        }
        _ => pkt[0] = 0,
    }
    Some(src)
}

fn swap_addresses(pkt: &mut [u8]) {
    let (s, d) = pkt[8..40].split_at_mut(16);
    s.swap_with_slice(d);
}

/// Recomputes the UDP checksum of the IPv6 packet `pkt` (RFC 8200 §8.1: 0 is sent as 0xffff).
fn fill_udp_checksum(pkt: &mut [u8]) {
    let mut a = [0u8; 16];
    let mut b = [0u8; 16];
    a.copy_from_slice(&pkt[8..24]);
    b.copy_from_slice(&pkt[24..40]);
    let u = &mut pkt[ipv6::HEADER_LEN..];
    u[6] = 0;
    u[7] = 0;
    let c = checksum::upper_layer_v6(&a.into(), &b.into(), ipv6::NH_UDP, u);
    let c = if c == 0 { 0xffff } else { c };
    u[6..8].copy_from_slice(&c.to_be_bytes());
}

/// Writes an IPv6/UDP packet with `payload` zero bytes; returns its length.
fn emit_udp(
    out: &mut [u8],
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    sport: u16,
    dport: u16,
    payload: usize,
) -> gate64_wire::Result<usize> {
    let ulen = 8 + payload;
    let len = ipv6::HEADER_LEN + ulen;
    let plen = u16::try_from(ulen).map_err(|_| gate64_wire::Error::Malformed)?;
    let o = out.get_mut(..len).ok_or(gate64_wire::Error::Truncated)?;
    ipv6::emit_header(o, plen, ipv6::NH_UDP, 64, src, dst)?;
    let u = &mut o[ipv6::HEADER_LEN..];
    u.fill(0);
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&plen.to_be_bytes());
    fill_udp_checksum(o);
    Ok(len)
}

/// One emulated client: qualify, ping [`CORP_HOST`] (once a second until answered), then send
/// `rate` bytes/s to its discard port plus a UDP echo request every few ticks, until `end`.
async fn emulated_client(
    server: SocketAddrV4,
    seed: u64,
    rate: f64,
    end: Instant,
    totals: &Totals,
) -> io::Result<()> {
    let sock = tokio::net::UdpSocket::from_std({
        let s = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
        s.set_nonblocking(true)?;
        s
    })?;
    sock.connect(server).await?;
    let mut c = Client::new(server, seed);
    let mut rx = vec![0u8; 4096];
    let mut tx = vec![0u8; BULK_PACKET];
    let mut qualified = false;
    let mut pinged = false;
    let mut next_ping: Option<Instant> = None;
    let mut next_tick: Option<Instant> = None;
    let mut ticks = 0u32;
    let mut tokens = 0.0f64;
    let mut ident = (seed >> 16) as u16;
    let far = end + Duration::from_secs(1);
    loop {
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        while let Some(n) = c.poll_transmit(now, &mut tx) {
            sock.send(&tx[..n]).await?;
        }
        if let Some(me) = c.address() {
            if !pinged && next_ping.is_none_or(|t| now >= t) {
                ident = ident.wrapping_add(1);
                let n = icmpv6::emit_echo(&mut tx, true, &me, &CORP_HOST, ident, 1, b"gate64 demo")
                    .map_err(io::Error::other)?;
                sock.send(&tx[..n]).await?;
                next_ping = Some(now + Duration::from_secs(1));
            }
            if pinged && next_tick.is_none_or(|t| now >= t) {
                tokens = (tokens + rate * TICK.as_secs_f64()).min(rate * 0.2 + BULK_PACKET as f64);
                while tokens >= BULK_PACKET as f64 {
                    let n = emit_udp(
                        &mut tx,
                        &me,
                        &CORP_HOST,
                        DISCARD_PORT,
                        DISCARD_PORT,
                        BULK_PACKET - 48,
                    )
                    .map_err(io::Error::other)?;
                    sock.send(&tx[..n]).await?;
                    add(&totals.up_bytes, n as u64);
                    tokens -= BULK_PACKET as f64;
                }
                if ticks.is_multiple_of(ECHO_EVERY_TICKS) {
                    let n = emit_udp(
                        &mut tx,
                        &me,
                        &CORP_HOST,
                        40_000,
                        ECHO_PORT,
                        ECHO_PACKET - 48,
                    )
                    .map_err(io::Error::other)?;
                    sock.send(&tx[..n]).await?;
                    add(&totals.echo_sent, 1);
                }
                ticks = ticks.wrapping_add(1);
                next_tick = Some(next_tick.unwrap_or(now).max(now - TICK) + TICK);
            }
        }
        let mut deadline = c.poll_timeout().unwrap_or(now).min(end);
        if c.address().is_some() {
            let t = if pinged { next_tick } else { next_ping };
            deadline = deadline.min(t.unwrap_or(far));
        }
        tokio::select! {
            r = sock.recv(&mut rx) => {
                let n = r?;
                let now = Instant::now();
                match c.handle(now, &rx[..n]) {
                    Ok(Event::Qualified { .. }) => {
                        if !std::mem::replace(&mut qualified, true) {
                            add(&totals.qualified, 1);
                        }
                    }
                    Ok(Event::Packet { offset, len }) => {
                        if let Ok(p) = ipv6::Packet::new_checked(&rx[offset..offset + len]) {
                            match (p.next_header(), icmpv6::type_code(&p)) {
                                (ipv6::NH_ICMPV6, Some((icmpv6::TYPE_ECHO_REPLY, 0)))
                                    if !pinged =>
                                {
                                    pinged = true;
                                    add(&totals.pinged, 1);
                                }
                                (ipv6::NH_UDP, _) if p.payload().len() >= 8 => {
                                    let sport = u16::from_be_bytes([p.payload()[0], p.payload()[1]]);
                                    if sport == ECHO_PORT {
                                        add(&totals.echo_answered, 1);
                                    } else {
                                        add(&totals.down_bytes, len as u64);
                                    }
                                }
                                _ => {}
                            }
                        }
                    }
                    Ok(Event::Refreshed | Event::Bubble) => {}
                    Err(_) => add(&totals.client_errors, 1),
                }
            }
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {}
        }
    }
}

/// Sums of the daemon's byte counters, (corpnet, internet), both directions.
fn side_bytes(stats: &[Arc<Stats>]) -> (u64, u64) {
    let side = |s: Side| -> u64 {
        stats
            .iter()
            .map(|w| w.bytes(s, Direction::Rx) + w.bytes(s, Direction::Tx))
            .sum()
    };
    (side(Side::Corpnet), side(Side::Internet))
}

fn drop_counts(stats: &[Arc<Stats>]) -> Vec<(&'static str, u64)> {
    Drop::ALL
        .iter()
        .map(|d| (d.as_str(), stats.iter().map(|w| w.drops(*d)).sum()))
        .filter(|(_, c)| *c > 0)
        .collect()
}

fn mbit(bytes: u64, secs: f64) -> f64 {
    bytes as f64 * 8.0 / 1e6 / secs
}

/// CPU time used so far by the worker threads (`gate64-w*`) and by the whole process.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    workers: Duration,
    process: Duration,
}

impl Cpu {
    fn sample() -> Self {
        let mut workers = Duration::ZERO;
        if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
            for t in dir.flatten() {
                let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                if comm.starts_with("gate64-w") {
                    workers += stat_cpu(&t.path().join("stat").to_string_lossy());
                }
            }
        }
        Cpu {
            workers,
            process: stat_cpu("/proc/self/stat"),
        }
    }
}

/// utime + stime from a `/proc/.../stat` file (fields 14 and 15, after the `(comm)`).
fn stat_cpu(path: &str) -> Duration {
    let Ok(s) = std::fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    let Some(rest) = s.rfind(')').map(|i| &s[i + 1..]) else {
        return Duration::ZERO;
    };
    // After ')': field 3 (state) is index 0, so utime (14) is index 11, stime (15) index 12.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    Duration::from_secs_f64(ticks as f64 / hz as f64)
}

/// VmRSS of this process in bytes.
fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Random seeds without a dependency: the standard library's per-process random hash keys.
#[derive(Default)]
struct RandomSeed(std::collections::hash_map::RandomState);

impl RandomSeed {
    fn next(&self, i: u64) -> u64 {
        let mut h = self.0.build_hasher();
        h.write_u64(i);
        h.finish()
    }
}

fn print_table(rows: &[[String; 7]]) {
    let header = [
        "",
        "clients",
        "corpnet Mbit/s",
        "internet Mbit/s",
        "CPU (workers)",
        "CPU (process)",
        "memory (RSS)",
    ]
    .map(String::from);
    let mut width = header.each_ref().map(String::len);
    for r in rows {
        for (w, s) in width.iter_mut().zip(r) {
            *w = (*w).max(s.len());
        }
    }
    let line = |c: &[String; 7]| {
        let v: Vec<String> = c
            .iter()
            .zip(width)
            .map(|(s, w)| format!("{s:<w$}"))
            .collect();
        println!("{}", v.join("  ").trim_end());
    };
    line(&header);
    line(&width.map(|w| "-".repeat(w)));
    for r in rows {
        line(r);
    }
}
