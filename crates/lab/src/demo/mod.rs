//! `gate64 demo`: the no-root lab. Starts the daemon on loopback (Teredo on 127.0.0.1 and
//! 127.0.0.2, IP-HTTPS on 127.0.0.1:<free port> with a throw-away lab PKI), an in-process
//! corporate network behind it (corporate links are connected UDP sockets carrying raw IPv6
//! instead of TUN queues), and a population of emulated clients, 70% Teredo and 30% IP-HTTPS
//! by default as in the reference deployment, that qualify (Teredo) or connect and
//! autoconfigure (IP-HTTPS: POST, 200, RS, RA), ping a corporate host and then exchange
//! traffic with it. Prints live figures and, at the end, a capacity table in the columns of
//! the Windows Server 2012 DirectAccess reference.
//!
//! The emulated clients run the client sessions of `gate64 connect` ([`gate64_client`]) with
//! an emulated host behind the tunnel instead of a TUN device ([`population`]); the lab around
//! them is [`lab`] and [`corp`], the figures [`report`].
//!
//! Replies from the corporate host to IP-HTTPS clients take the real return path: the host
//! answers the worker socket the request came from, the worker's dataplane routes the
//! destination (in the lab IP-HTTPS prefix `2001:db8:c1::/48`) to that connection's send
//! queue, and the connection task writes it to the TLS stream.

mod corp;
mod gateway;
mod identities;
mod lab;
mod namespaced;
mod population;
mod report;

use anyhow::{Context, Result, bail, ensure};
use corp::CORP_HOST;
use lab::Lab;
use report::{Outcome, Progress, Sample};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Threads driving the emulated clients.
const CLIENT_THREADS: usize = 2;
/// How long the clients may go on after the latest end of the run, so that the end figures
/// are taken while every link is still up.
const HANG_UP_DELAY: Duration = Duration::from_millis(500);
/// How often the bring-up phase looks whether every client is up.
const BRING_UP_POLL: Duration = Duration::from_millis(100);

/// The longest the loopback lab waits for every client to come up before its measured run:
/// generous, as a loaded machine may take many times the usual second.
fn bring_up_bound(clients: usize) -> Duration {
    Duration::from_secs(30 + clients as u64 / 20)
}

/// Every client qualified (connected) and got its ping answered, and with IPsec both tunnels
/// of every client are counted.
fn all_up(
    totals: &Totals,
    sample: &Sample,
    n_teredo: usize,
    n_iphttps: usize,
    ipsec: bool,
) -> bool {
    let counts = [n_teredo as u64, n_iphttps as u64];
    let up = (0..2)
        .all(|t| get(&totals.qualified[t]) >= counts[t] && get(&totals.pinged[t]) >= counts[t]);
    let n = counts[0] + counts[1];
    up && (!ipsec || (sample.sas.mmsa >= 2 * n && sample.sas.qmsa >= 2 * n))
}

/// The two transports of the demo population.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Teredo = 0,
    Iphttps = 1,
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
    /// Length of each load step of the capacity search [default: 3]; with `--loopback`, of
    /// the measured run, which starts once every client is up [default: 10].
    #[arg(long)]
    pub seconds: Option<u64>,
    /// Worker threads of the daemon (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Run the older loopback lab instead of network namespaces: the daemon on loopback
    /// sockets, corporate links as UDP sockets instead of a TUN, offered load instead of
    /// capacity (also what runs when the kernel refuses an unprivileged user namespace).
    #[arg(long)]
    pub loopback: bool,
    /// With `--loopback`: total client → corporate network load (UDP to the discard port),
    /// Mbit/s [default: 200].
    #[arg(long, requires = "loopback")]
    pub rate_mbit: Option<f64>,
    /// With `--loopback`: total corporate network → clients load (a bulk stream to every
    /// client), Mbit/s [default: 50].
    #[arg(long, requires = "loopback")]
    pub down_mbit: Option<f64>,
    /// With `--loopback`: clients build no IPsec tunnels; their traffic crosses gate64 in
    /// the clear (the lab daemon's corporate side is open).
    #[arg(long, requires = "loopback")]
    pub no_ipsec: bool,
    /// gate64's `dns64.upstream` in the namespace lab instead of its DNS server (to show
    /// that a broken DNS64 fails the demo).
    #[arg(long, hide = true, conflicts_with = "loopback", value_name = "IPV4")]
    pub dns64_upstream: Option<std::net::Ipv4Addr>,
    /// The re-executed child that enters the user namespace (internal).
    #[arg(long, hide = true, conflicts_with = "loopback")]
    pub in_user_namespace: bool,
}

impl DemoArgs {
    pub(crate) fn loopback_seconds(&self) -> u64 {
        self.seconds.unwrap_or(10)
    }

    pub(crate) fn rate_mbit(&self) -> f64 {
        self.rate_mbit.unwrap_or(200.0)
    }

    pub(crate) fn down_mbit(&self) -> f64 {
        self.down_mbit.unwrap_or(50.0)
    }
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
    /// IKE SAs and child SAs of the demo's responder ([`gateway`]).
    sas: gateway::SaCounts,
    /// The measured run has begun. Until then the clients send nothing but their pings and
    /// the corporate host no bulk stream: on a loaded machine the first clients' traffic
    /// would otherwise fill the sockets that the later clients' IKE and pings need, and the
    /// bring-up would measure the flood rather than the clients.
    running: AtomicBool,
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

/// Runs the demo: the capacity workload in network namespaces (see [`namespaced`]), or the
/// loopback lab with `--loopback` or where the kernel refuses an unprivileged user namespace.
pub fn run(args: &DemoArgs) -> Result<()> {
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    ensure!(
        (0.0..=1.0).contains(&args.iphttps_share),
        "--iphttps-share must be between 0 and 1, not {}",
        args.iphttps_share
    );
    if args.in_user_namespace {
        return namespaced::run_child(args);
    }
    if !args.loopback {
        match namespaced::run(args) {
            namespaced::Outcome::Ran(result) => return result,
            namespaced::Outcome::Unavailable => {}
        }
    }
    run_loopback(args)
}

/// The loopback lab. Errors (exit 1) when fewer than 95% of the clients of either transport
/// qualified (connected) or got their ping answered.
fn run_loopback(args: &DemoArgs) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .try_init();

    let n_iphttps = ((args.clients as f64 * args.iphttps_share).round() as usize).min(args.clients);
    let n_teredo = args.clients - n_iphttps;
    let totals = Arc::new(Totals::default());
    let lab = Lab::start(args, n_iphttps > 0, &totals)?;
    let port = lab.teredo.port();
    eprintln!(
        "gate64 demo: Teredo server on 127.0.0.1:{port} and 127.0.0.2:{port}, IP-HTTPS on {}, {} workers, corporate host {CORP_HOST}, {} clients ({n_teredo} Teredo, {n_iphttps} IP-HTTPS) for {} s",
        lab.iphttps_url.as_deref().unwrap_or("-"),
        lab.workers,
        args.clients,
        args.loopback_seconds()
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(CLIENT_THREADS)
        .thread_name("demo-clients")
        .enable_all()
        .build()
        .context("starting the client runtime")?;
    let run = Duration::from_secs(args.loopback_seconds());
    let bound = bring_up_bound(args.clients);
    // The clients go on until the latest the measured run can end; once the end figures are
    // taken they are stopped with their tasks.
    let clients_end = Instant::now() + bound + run + HANG_UP_DELAY;
    let tasks = population::spawn(&rt, &lab, args, n_iphttps, clients_end, &totals);

    // Bring-up: the measured run starts once every client is up (or the bound has passed, so
    // that a broken lab still ends), so that how fast a loaded machine brings clients up never
    // decides the verdict; the verdict is on what came up and what was answered.
    let mut progress = Progress::new(&Sample::take(&lab.daemon, &totals));
    let up_by = Instant::now() + bound;
    let mut next_line = Instant::now() + Duration::from_secs(1);
    loop {
        let sample = Sample::take(&lab.daemon, &totals);
        if all_up(&totals, &sample, n_teredo, n_iphttps, !args.no_ipsec) {
            break;
        }
        let now = Instant::now();
        if now >= up_by {
            eprintln!(
                "gate64 demo: not every client came up within {} s; measuring the ones that did",
                bound.as_secs()
            );
            break;
        }
        if now >= next_line {
            progress.print(&lab.daemon, &totals, n_teredo, n_iphttps);
            next_line = now + Duration::from_secs(1);
        }
        std::thread::sleep(BRING_UP_POLL);
    }

    // The measured run, with live progress once per second.
    totals.running.store(true, Ordering::Relaxed);
    let start = Sample::take(&lab.daemon, &totals);
    let end = Instant::now() + run;
    while Instant::now() < end {
        std::thread::sleep(
            Duration::from_secs(1).min(end.saturating_duration_since(Instant::now())),
        );
        progress.print(&lab.daemon, &totals, n_teredo, n_iphttps);
    }
    progress.finish();
    let at_end = Sample::take(&lab.daemon, &totals);
    let rss = report::rss_bytes();
    let gauges = lab.daemon.shared.gauges(Instant::now());
    let outcome = Outcome {
        n_teredo: n_teredo as u64,
        n_iphttps: n_iphttps as u64,
        start,
        end: at_end,
        rss,
        relay_peers: gauges.teredo_clients,
        iphttps_links: gauges.iphttps_clients,
        ipsec: !args.no_ipsec,
        totals: &totals,
    };
    rt.block_on(async {
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    lab.stop()?;

    outcome.print();
    outcome.check()
}
