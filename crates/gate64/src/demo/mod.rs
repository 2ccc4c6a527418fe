//! `gate64 demo`: the no-root lab. Starts the daemon on loopback (Teredo on 127.0.0.1 and
//! 127.0.0.2, IP-HTTPS on 127.0.0.1:<free port> with a throw-away lab PKI), an in-process
//! corporate network behind it (corporate links are connected UDP sockets carrying raw IPv6
//! instead of TUN queues), and a population of emulated clients, 70% Teredo and 30% IP-HTTPS
//! by default as in the reference deployment, that qualify (Teredo) or connect and
//! autoconfigure (IP-HTTPS: POST, 200, RS, RA), ping a corporate host and then exchange
//! traffic with it. Prints live figures and, at the end, a capacity table in the columns of
//! the Windows Server 2012 DirectAccess reference.
//!
//! Replies from the corporate host to IP-HTTPS clients take the real return path: the host
//! answers the worker socket the request came from, the worker's dataplane routes the
//! destination (in the lab IP-HTTPS prefix `2001:db8:c1::/48`) to that connection's send
//! queue, and the connection task writes it to the TLS stream.

use crate::daemon::Daemon;
use anyhow::{Context, Result, bail, ensure};
use gate64_config::Config;
use gate64_io::CorpLink;
use gate64_iphttps::ClientConnection;
use gate64_iphttps::framing::{Deframer, StreamBuffer};
use gate64_teredo::client::{Client, Event};
use gate64_wire::{checksum, icmpv6, ipv6};
use rustls::pki_types::ServerName;
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
/// Batches of packets an IP-HTTPS client may have queued for its TLS writer.
const IPHTTPS_WRITE_QUEUE: usize = 16;
/// First retry delay of an IP-HTTPS client whose connection failed before the link came up.
const IPHTTPS_RETRY: Duration = Duration::from_millis(100);

/// Columns of the capacity table.
const COLUMNS: usize = 9;

/// The two transports of the demo population.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Teredo = 0,
    Iphttps = 1,
}

/// The Windows Server 2012 DirectAccess reference row.
fn reference_row() -> [String; COLUMNS] {
    [
        "reference: WS2012 DirectAccess",
        "750",
        "~525 (70%)",
        "~225 (30%)",
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
    /// Number of emulated clients (Teredo and IP-HTTPS together).
    #[arg(long, default_value_t = 200)]
    pub clients: usize,
    /// Share of the clients that use IP-HTTPS instead of Teredo (0..=1).
    #[arg(long, default_value_t = 0.3)]
    pub iphttps_share: f64,
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
    /// Per [`Transport`]: Teredo clients qualified, IP-HTTPS clients connected (200 + RA).
    qualified: [AtomicU64; 2],
    /// Per [`Transport`]: clients whose first ping was answered.
    pinged: [AtomicU64; 2],
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

fn both(c: &[AtomicU64; 2]) -> u64 {
    get(&c[0]) + get(&c[1])
}

/// Whether client `i` of `n` is one of the `n_iphttps` IP-HTTPS clients: spread evenly over
/// the population, so both transports start together.
fn is_iphttps(i: usize, n: usize, n_iphttps: usize) -> bool {
    (i + 1) * n_iphttps / n > i * n_iphttps / n
}

/// A lab PKI in a temporary directory, removed on drop.
struct LabCerts {
    dir: PathBuf,
}

impl LabCerts {
    fn generate() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "gate64-demo-{}-{:x}",
            std::process::id(),
            RandomSeed::default().next(0) as u32
        ));
        crate::certs::generate(
            &dir,
            &["localhost".to_owned()],
            &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        )
        .context("generating the lab certificates")?;
        Ok(LabCerts { dir })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for LabCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the demo. Errors (exit 1) when fewer than 95% of the clients of either transport
/// qualified (connected) or got their ping answered.
pub fn run(args: &DemoArgs) -> Result<()> {
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    ensure!(
        (0.0..=1.0).contains(&args.iphttps_share),
        "--iphttps-share must be between 0 and 1, not {}",
        args.iphttps_share
    );
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .try_init();

    let n_iphttps = ((args.clients as f64 * args.iphttps_share).round() as usize).min(args.clients);
    let n_teredo = args.clients - n_iphttps;
    let certs = (n_iphttps > 0).then(LabCerts::generate).transpose()?;

    let totals = Arc::new(Totals::default());
    let stop = Arc::new(AtomicBool::new(false));
    let corp_sock = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .context("binding the corporate network's socket")?;
    corp_sock.set_read_timeout(Some(Duration::from_millis(5)))?;
    let corp_addr = corp_sock.local_addr()?;

    let (daemon, cfg, port) = start_daemon(args, corp_addr, certs.as_ref())?;
    let workers = cfg.effective_workers();
    // The daemon's TLS side runs on its own runtime, as in `gate64 serve`.
    let ctl = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("gate64-ctl")
        .enable_all()
        .build()
        .context("starting the control runtime")?;
    let iphttps = match ctl.block_on(daemon.start_iphttps(&cfg)) {
        Ok(a) => a,
        Err(e) => {
            let _ = daemon.stop();
            return Err(e.context("starting the IP-HTTPS listener"));
        }
    };
    let server = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    eprintln!(
        "gate64 demo: Teredo server on 127.0.0.1:{port} and 127.0.0.2:{port}, IP-HTTPS on {}, {workers} workers, corporate host {CORP_HOST}, {} clients ({n_teredo} Teredo, {n_iphttps} IP-HTTPS) for {} s",
        iphttps.map_or_else(
            || "-".to_owned(),
            |a| format!("https://{a}{}", cfg.iphttps.path)
        ),
        args.clients,
        args.seconds
    );
    let tls = match &certs {
        Some(c) if iphttps.is_some() => {
            Some(gate64_io::tls::client_config(&c.file("ca.pem"), None)?)
        }
        _ => None,
    };

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
    let bytes0 = Exported::read(&daemon).bytes;
    let end = t0 + Duration::from_secs(args.seconds);
    let per_client = args.rate_mbit * 1e6 / 8.0 / args.clients as f64;
    let seed = RandomSeed::default();
    let path = cfg.iphttps.path.clone();
    let tasks: Vec<_> = (0..args.clients)
        .map(|i| {
            let totals = Arc::clone(&totals);
            let seed = seed.next(i as u64);
            let ip = match (&tls, iphttps) {
                (Some(tls), Some(addr)) if is_iphttps(i, args.clients, n_iphttps) => {
                    Some((Arc::clone(tls), addr, path.clone()))
                }
                _ => None,
            };
            rt.spawn(async move {
                let r = match ip {
                    Some((tls, addr, path)) => {
                        emulated_iphttps_client(addr, tls, &path, seed, per_client, end, &totals)
                            .await
                    }
                    None => emulated_client(server, seed, per_client, end, &totals).await,
                };
                if let Err(e) = r {
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
        let b = Exported::read(&daemon).bytes;
        let dt = now.duration_since(last.0).as_secs_f64().max(1e-3);
        let line = format!(
            "[{:>3.0}s] Teredo qualified {}/{n_teredo}  IP-HTTPS connected {}/{n_iphttps}  pings answered {}  corpnet {:.1} Mbit/s  internet {:.1} Mbit/s",
            now.duration_since(t0).as_secs_f64(),
            get(&totals.qualified[Transport::Teredo as usize]),
            get(&totals.qualified[Transport::Iphttps as usize]),
            both(&totals.pinged),
            mbit(b.0.saturating_sub(last.1.0), dt),
            mbit(b.1.saturating_sub(last.1.1), dt),
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
    // The figures are taken at the end of the run, before the clients hang up: IP-HTTPS links
    // closing and the corporate stream to clients that are gone are not part of the run.
    let wall = t0.elapsed().as_secs_f64();
    let cpu1 = Cpu::sample();
    let exported = Exported::read(&daemon);
    let bytes1 = exported.bytes;
    let rss = rss_bytes();
    let gauges = daemon.shared.gauges(Instant::now());
    rt.block_on(async {
        for t in tasks {
            let _ = t.await;
        }
    });
    stop.store(true, Ordering::Relaxed);
    rt.shutdown_timeout(Duration::from_secs(1));
    let _ = corp.join();
    let stopped = daemon.stop();
    ctl.shutdown_timeout(Duration::from_secs(1));
    stopped?;
    drop(certs);

    let n = args.clients as u64;
    let (nt, ni) = (n_teredo as u64, n_iphttps as u64);
    let qualified = [0, 1].map(|t| get(&totals.qualified[t]));
    let pinged = [0, 1].map(|t| get(&totals.pinged[t]));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers_pct = cpu1.workers.saturating_sub(cpu0.workers).as_secs_f64() / wall * 100.0;
    let process_pct = cpu1.process.saturating_sub(cpu0.process).as_secs_f64() / wall * 100.0;
    let ours = [
        "gate64 demo (this run)".to_owned(),
        format!("{}/{n}", qualified[0] + qualified[1]),
        format!("{}/{nt} qualified", qualified[0]),
        format!("{}/{ni} connected", qualified[1]),
        format!("{:.1}", mbit(bytes1.0.saturating_sub(bytes0.0), wall)),
        format!("{:.1}", mbit(bytes1.1.saturating_sub(bytes0.1), wall)),
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
        "clients: Teredo {}/{nt} qualified, {}/{nt} pings answered; IP-HTTPS {}/{ni} connected, {}/{ni} pings answered; UDP echo {}/{} answered; {} relay peers valid, {} IP-HTTPS links",
        qualified[0],
        pinged[0],
        qualified[1],
        pinged[1],
        get(&totals.echo_answered),
        get(&totals.echo_sent),
        gauges.teredo_clients,
        gauges.iphttps_clients,
    );
    println!(
        "traffic: clients sent {:.1} MB to the discard port (corpnet received {:.1} MB), corpnet sent {:.1} MB (clients received {:.1} MB)",
        get(&totals.up_bytes) as f64 / 1e6,
        get(&totals.corp_discarded) as f64 / 1e6,
        get(&totals.corp_sent) as f64 / 1e6,
        get(&totals.down_bytes) as f64 / 1e6,
    );
    println!(
        "CPU: workers = the daemon's threads (gate64-w* UDP workers, gate64-ctl TLS/IP-HTTPS), process = everything in this process (daemon, emulated clients and their TLS, corporate network)"
    );
    if exported.drops.is_empty() {
        println!("drops: none");
    } else {
        let d: Vec<_> = exported
            .drops
            .iter()
            .map(|(r, c)| format!("{r}={c}"))
            .collect();
        println!("drops: {}", d.join(" "));
    }
    if get(&totals.client_errors) > 0 {
        println!(
            "client errors: {} (failed tasks or refused datagrams)",
            get(&totals.client_errors)
        );
    }
    let mut failed = Vec::new();
    for (t, name, count, verb) in [
        (0, "Teredo", nt, "qualified"),
        (1, "IP-HTTPS", ni, "connected"),
    ] {
        let need = (count * 95).div_ceil(100);
        if qualified[t] < need {
            failed.push(format!(
                "only {}/{count} {name} clients {verb} (need {need})",
                qualified[t]
            ));
        }
        if pinged[t] < need {
            failed.push(format!(
                "only {}/{count} {name} clients got their ping answered (need {need})",
                pinged[t]
            ));
        }
    }
    if !failed.is_empty() {
        bail!("demo failed: {} (need at least 95%)", failed.join(", "));
    }
    println!(
        "demo ok: {}/{n} up (Teredo {}/{nt} qualified, IP-HTTPS {}/{ni} connected), {}/{n} pings answered",
        qualified[0] + qualified[1],
        qualified[0],
        qualified[1],
        pinged[0] + pinged[1]
    );
    Ok(())
}

/// Starts the daemon on a free port bound on both 127.0.0.1 and 127.0.0.2, with one corporate
/// link per worker connected to the corporate network at `corp`; with `certs`, the
/// configuration has IP-HTTPS on 127.0.0.1 (port 0: the listener picks a free one).
fn start_daemon(
    args: &DemoArgs,
    corp: SocketAddr,
    certs: Option<&LabCerts>,
) -> Result<(Daemon, Config, u16)> {
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
        if let Some(c) = certs {
            cfg.iphttps = Config::lab_iphttps(
                SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                c.file("server.pem"),
                c.file("server.key"),
            );
        }
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
            Ok(d) => return Ok((d, cfg, port)),
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

/// Packets gathered for sending: one buffer, with the end of each packet.
#[derive(Default)]
struct Batch {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl Batch {
    /// Appends one packet written by `emit` into at most `max` bytes.
    fn push_with(
        &mut self,
        max: usize,
        emit: impl FnOnce(&mut [u8]) -> gate64_wire::Result<usize>,
    ) -> io::Result<usize> {
        let start = self.buf.len();
        self.buf.resize(start + max, 0);
        match emit(&mut self.buf[start..]) {
            Ok(n) => {
                self.buf.truncate(start + n);
                self.ends.push(self.buf.len());
                Ok(n)
            }
            Err(e) => {
                self.buf.truncate(start);
                Err(io::Error::other(e))
            }
        }
    }

    fn push(&mut self, pkt: &[u8]) {
        self.buf.extend_from_slice(pkt);
        self.ends.push(self.buf.len());
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn packets(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(s, &e)| &self.buf[s..e])
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }
}

/// What every emulated client does once it has an address, whatever the transport: ping
/// [`CORP_HOST`] (once a second until answered), then send `rate` bytes/s to its discard port
/// plus a UDP echo request every few ticks.
struct Traffic {
    transport: Transport,
    rate: f64,
    pinged: bool,
    next_ping: Option<Instant>,
    next_tick: Option<Instant>,
    ticks: u32,
    tokens: f64,
    ident: u16,
}

impl Traffic {
    fn new(transport: Transport, seed: u64, rate: f64) -> Self {
        Traffic {
            transport,
            rate,
            pinged: false,
            next_ping: None,
            next_tick: None,
            ticks: 0,
            tokens: 0.0,
            ident: (seed >> 16) as u16,
        }
    }

    /// Appends what is due at `now` from address `me` to `out`. Bytes are counted as sent by
    /// the caller's transport, so that a refused send is not counted.
    fn poll(
        &mut self,
        now: Instant,
        me: &Ipv6Addr,
        totals: &Totals,
        out: &mut Batch,
    ) -> io::Result<()> {
        if !self.pinged && self.next_ping.is_none_or(|t| now >= t) {
            self.ident = self.ident.wrapping_add(1);
            let ident = self.ident;
            out.push_with(BULK_PACKET, |b| {
                icmpv6::emit_echo(b, true, me, &CORP_HOST, ident, 1, b"gate64 demo")
            })?;
            self.next_ping = Some(now + Duration::from_secs(1));
        }
        if self.pinged && self.next_tick.is_none_or(|t| now >= t) {
            let rate = self.rate;
            self.tokens =
                (self.tokens + rate * TICK.as_secs_f64()).min(rate * 0.2 + BULK_PACKET as f64);
            while self.tokens >= BULK_PACKET as f64 {
                let n = out.push_with(BULK_PACKET, |b| {
                    emit_udp(
                        b,
                        me,
                        &CORP_HOST,
                        DISCARD_PORT,
                        DISCARD_PORT,
                        BULK_PACKET - 48,
                    )
                })?;
                add(&totals.up_bytes, n as u64);
                self.tokens -= BULK_PACKET as f64;
            }
            if self.ticks.is_multiple_of(ECHO_EVERY_TICKS) {
                out.push_with(BULK_PACKET, |b| {
                    emit_udp(b, me, &CORP_HOST, 40_000, ECHO_PORT, ECHO_PACKET - 48)
                })?;
                add(&totals.echo_sent, 1);
            }
            self.ticks = self.ticks.wrapping_add(1);
            self.next_tick = Some(self.next_tick.unwrap_or(now).max(now - TICK) + TICK);
        }
        Ok(())
    }

    /// When [`Traffic::poll`] has something to do next.
    fn wake(&self) -> Option<Instant> {
        if self.pinged {
            self.next_tick
        } else {
            self.next_ping
        }
    }

    /// An IPv6 packet delivered to the client.
    fn received(&mut self, pkt: &[u8], totals: &Totals) {
        let Ok(p) = ipv6::Packet::new_checked(pkt) else {
            return;
        };
        match (p.next_header(), icmpv6::type_code(&p)) {
            (ipv6::NH_ICMPV6, Some((icmpv6::TYPE_ECHO_REPLY, 0))) if !self.pinged => {
                self.pinged = true;
                add(&totals.pinged[self.transport as usize], 1);
            }
            (ipv6::NH_UDP, _) if p.payload().len() >= 8 => {
                let sport = u16::from_be_bytes([p.payload()[0], p.payload()[1]]);
                if sport == ECHO_PORT {
                    add(&totals.echo_answered, 1);
                } else {
                    add(&totals.down_bytes, pkt.len() as u64);
                }
            }
            _ => {}
        }
    }
}

/// One emulated Teredo client: qualify, then [`Traffic`] until `end`.
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
    let mut traffic = Traffic::new(Transport::Teredo, seed, rate);
    let mut batch = Batch::default();
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
            traffic.poll(now, &me, totals, &mut batch)?;
            for pkt in batch.packets() {
                sock.send(pkt).await?;
            }
            batch.clear();
        }
        let mut deadline = c.poll_timeout().unwrap_or(now).min(end);
        if c.address().is_some() {
            deadline = deadline.min(traffic.wake().unwrap_or(far));
        }
        tokio::select! {
            r = sock.recv(&mut rx) => {
                let n = r?;
                let now = Instant::now();
                match c.handle(now, &rx[..n]) {
                    Ok(Event::Qualified { .. }) => {
                        if !std::mem::replace(&mut qualified, true) {
                            add(&totals.qualified[Transport::Teredo as usize], 1);
                        }
                    }
                    Ok(Event::Packet { offset, len }) => {
                        traffic.received(&rx[offset..offset + len], totals);
                    }
                    Ok(Event::Refreshed | Event::Bubble) => {}
                    Err(_) => add(&totals.client_errors, 1),
                }
            }
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {}
        }
    }
}

/// One emulated IP-HTTPS client: TCP + TLS to `server`, the POST, the 200, RS/RA, then
/// [`Traffic`] as raw IPv6 on the TLS stream until `end`. A connection failing before the link
/// is up is retried (100 ms, doubling); a link lost afterwards is an error.
async fn emulated_iphttps_client(
    server: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    path: &str,
    seed: u64,
    rate: f64,
    end: Instant,
    totals: &Totals,
) -> io::Result<()> {
    let mut retry = IPHTTPS_RETRY;
    loop {
        let mut linked = false;
        match iphttps_session(server, &tls, path, seed, rate, end, totals, &mut linked).await {
            Ok(()) => return Ok(()),
            Err(e) if linked || Instant::now() + retry >= end => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, retry = ?retry, "IP-HTTPS connection failed");
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(Duration::from_secs(2));
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn iphttps_session(
    server: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    path: &str,
    seed: u64,
    rate: f64,
    end: Instant,
    totals: &Totals,
    linked: &mut bool,
) -> io::Result<()> {
    let until = tokio::time::Instant::from_std(end);
    let timed_out =
        |what: &str| io::Error::new(io::ErrorKind::TimedOut, format!("{what}: timed out"));
    let tcp = tokio::time::timeout_at(until, tokio::net::TcpStream::connect(server))
        .await
        .map_err(|_| timed_out("TCP connect"))??;
    let _ = tcp.set_nodelay(true);
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(tls));
    let stream = tokio::time::timeout_at(
        until,
        connector.connect(ServerName::IpAddress(server.ip().into()), tcp),
    )
    .await
    .map_err(|_| timed_out("TLS handshake"))??;
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut conn = ClientConnection::new(path, &server.to_string(), seed);
    wr.write_all(&conn.request()).await?;
    wr.flush().await?;
    let mut rx = StreamBuffer::default();
    loop {
        let n = tokio::time::timeout_at(until, rd.read(rx.spare()))
            .await
            .map_err(|_| timed_out("HTTP response"))??;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before the HTTP response",
            ));
        }
        rx.commit(n);
        if let Some(consumed) = conn
            .handle_input(Instant::now(), rx.data())
            .map_err(io::Error::other)?
        {
            rx.consume(consumed);
            break;
        }
    }
    *linked = true;

    // Writes go through their own task, so that a slow TLS write never stops the reads.
    let (tx, mut queue) = tokio::sync::mpsc::channel::<Vec<u8>>(IPHTTPS_WRITE_QUEUE);
    let writer = tokio::spawn(async move {
        while let Some(b) = queue.recv().await {
            wr.write_all(&b).await?;
            while let Ok(b) = queue.try_recv() {
                wr.write_all(&b).await?;
            }
            wr.flush().await?;
        }
        let _ = wr.shutdown().await;
        io::Result::Ok(())
    });
    let deframer = Deframer::default();
    let mut rs = [0u8; gate64_iphttps::client::RS_LEN];
    let mut traffic = Traffic::new(Transport::Iphttps, seed, rate);
    let mut batch = Batch::default();
    let mut configured = false;
    let far = end + Duration::from_secs(1);
    let result = loop {
        let now = Instant::now();
        if now >= end {
            break Ok(());
        }
        loop {
            let pkt = match rx.next_packet(&deframer) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => return Err(io::Error::other(format!("server stream: {e}"))),
            };
            match conn.handle_packet(now, pkt) {
                Ok(gate64_iphttps::Event::Configured { .. }) => {
                    if !std::mem::replace(&mut configured, true) {
                        add(&totals.qualified[Transport::Iphttps as usize], 1);
                    }
                }
                Ok(gate64_iphttps::Event::Refreshed) => {}
                Ok(gate64_iphttps::Event::Packet) => traffic.received(pkt, totals),
                Err(_) => add(&totals.client_errors, 1),
            }
        }
        while let Some(n) = conn.poll_transmit(now, &mut rs) {
            batch.push(&rs[..n]);
        }
        if let Some(me) = conn.address() {
            traffic.poll(now, &me, totals, &mut batch)?;
        }
        if !batch.is_empty() {
            let buf = std::mem::take(&mut batch.buf);
            batch.clear();
            if tx.send(buf).await.is_err() {
                break Err(io::Error::other("the TLS writer stopped"));
            }
        }
        let mut deadline = conn.poll_timeout().unwrap_or(far).min(end);
        if conn.address().is_some() {
            deadline = deadline.min(traffic.wake().unwrap_or(far));
        }
        tokio::select! {
            r = rd.read(rx.spare()) => {
                let n = r?;
                if n == 0 {
                    break Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed by the server"));
                }
                rx.commit(n);
            }
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {}
        }
    };
    drop(tx);
    match writer.await {
        Ok(Err(e)) if result.is_ok() => Err(e),
        _ => result,
    }
}

/// The daemon's counters as exported (UDP workers and IP-HTTPS tasks alike).
struct Exported {
    /// Bytes (corpnet, internet), both directions.
    bytes: (u64, u64),
    /// Non-zero drop counters by reason.
    drops: BTreeMap<String, u64>,
}

impl Exported {
    fn read(daemon: &Daemon) -> Self {
        let text = daemon.exporter.encode();
        let mut e = Exported {
            bytes: (0, 0),
            drops: BTreeMap::new(),
        };
        for line in text.lines() {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(v) = value.parse::<f64>() else {
                continue;
            };
            let v = v as u64;
            if let Some(labels) = series.strip_prefix("gate64_bytes_total{") {
                if labels.contains(r#"side="corpnet""#) {
                    e.bytes.0 += v;
                } else if labels.contains(r#"side="internet""#) {
                    e.bytes.1 += v;
                }
            } else if let Some(labels) = series.strip_prefix("gate64_drops_total{")
                && v > 0
                && let Some(reason) = labels
                    .strip_prefix(r#"reason=""#)
                    .and_then(|r| r.split('"').next())
            {
                *e.drops.entry(reason.to_owned()).or_default() += v;
            }
        }
        e
    }
}

fn mbit(bytes: u64, secs: f64) -> f64 {
    bytes as f64 * 8.0 / 1e6 / secs
}

/// CPU time used so far by the daemon's threads (`gate64-w*`, `gate64-ctl`) and by the whole
/// process.
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
                // UDP workers (gate64-w*) and the TLS runtime (gate64-ctl).
                if comm.starts_with("gate64-") {
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

fn print_table(rows: &[[String; COLUMNS]]) {
    let header = [
        "",
        "clients",
        "Teredo",
        "IP-HTTPS",
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
    let line = |c: &[String; COLUMNS]| {
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
