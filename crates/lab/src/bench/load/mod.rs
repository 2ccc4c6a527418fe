//! `gate64 bench load`: the capacity harness's load generator (its contract is
//! `capacity-contract.md`). N emulated clients in one process, each a real client: Teredo
//! (qualification, RFC 4380 §5.2) or IP-HTTPS (TLS, POST, RS/RA), from its own source address
//! and port, then both IPsec tunnels (infrastructure and intranet: an IKE SA and a child SA
//! each, a certificate of its own, CFG_REQUEST for the inner address), answering gate64's
//! liveness checks and renewing the tunnels for as long as it runs.
//!
//! Each client is the client session of `gate64 connect` ([`gate64_client`]) with the IPsec
//! layer in front of a [`fleet::LoadHost`]: one TUN device carries every client's inner
//! traffic, demultiplexed by inner source address ([`fleet::Fleet::demux`]); what the SAs
//! open is written back to the device. Kernel sockets in the namespace bind the inner
//! addresses listed in the ADDRESSES file (the pool is routed local, [`tun`]).
//!
//! The Teredo clients' outer datagrams go through a second TUN device, the underlay
//! ([`underlay`]): a client is an address and port on it, not a socket, so file descriptors
//! do not bound their number. IP-HTTPS clients hold a TCP socket each.
//!
//! With `probe` in SPEC.json each client up makes round trips through its tunnels and
//! STATUS.json carries the distribution of the per-client gap between two echoes
//! ([`probe`]); SIGUSR1 starts a new measuring window.
//!
//! STATUS.json is rewritten every second ([`status`]); SIGTERM or SIGINT stops the run.

mod clients;
mod fleet;
mod probe;
mod spec;
mod status;
mod tun;
mod underlay;

use anyhow::{Context, Result};
use fleet::{Fleet, Transport};
use spec::Spec;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

/// How often STATUS.json is rewritten.
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// The ramp's tick: clients due by then are started together.
const RAMP_TICK: Duration = Duration::from_millis(10);
/// File descriptors beyond the clients' (TUN, runtime, logs).
const SPARE_FDS: u64 = 1024;

/// Arguments of `gate64 bench load`.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// The workload (SPEC.json, see the contract).
    #[arg(long, value_name = "SPEC.json")]
    pub spec: PathBuf,
    /// Where to write the status every second (and `<STATUS>.addresses` once ready).
    #[arg(long, value_name = "STATUS.json")]
    pub status: PathBuf,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Runs `gate64 bench load` until SIGTERM or SIGINT.
pub fn run(args: &LoadArgs) -> Result<()> {
    init_logging();
    let spec = Arc::new(Spec::load(&args.spec)?);
    // A descriptor per client with a socket of its own: IP-HTTPS clients, and Teredo ones
    // without the underlay.
    let sockets = match spec.teredo_sockets {
        true => spec.clients,
        false => spec.iphttps_clients(),
    } as u64;
    let limit = gate64_sys::resource::raise_nofile(sockets + SPARE_FDS);
    if limit < sockets + SPARE_FDS {
        tracing::warn!(limit, sockets, "RLIMIT_NOFILE too low for every client");
    }
    let shared = Arc::new(clients::Shared::load(&spec)?);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.enable_all().build().context("starting a runtime")?;
    let underlay = shared.underlay.is_some();
    let r = rt.block_on(drive(&spec, shared, args));
    tun::tear_down(&spec);
    if underlay {
        underlay::tear_down();
    }
    rt.shutdown_background();
    r
}

/// Sets up the TUN device, starts the clients at `connect_per_sec` and keeps the status file
/// until a signal.
async fn drive(spec: &Arc<Spec>, shared: Arc<clients::Shared>, args: &LoadArgs) -> Result<()> {
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let mut usr1 = signal(SignalKind::user_defined1()).context("SIGUSR1 handler")?;
    let dev = tun::set_up(spec)?;
    let transports = (0..spec.clients)
        .map(|i| match spec.is_iphttps(i) {
            true => Transport::Iphttps,
            false => Transport::Teredo,
        })
        .collect();
    let fleet = Arc::new(Fleet::new(transports, spec.pool6).with_probe(spec.probe.clone()));
    fleet.set_tun(Arc::clone(&dev));
    let reader = tokio::spawn(fleet::read_loop(dev, Arc::clone(&fleet)));
    let mut outer_reader = match &shared.underlay {
        Some(underlay) => {
            let dev = underlay::set_up(spec)?;
            underlay.set_device(Arc::clone(&dev));
            Some(tokio::spawn(underlay::read_loop(dev, Arc::clone(underlay))))
        }
        None => None,
    };
    let outer = shared.underlay.clone();
    let rss_start_bytes = status::rss_bytes();
    tokio::spawn(ramp(Arc::clone(&fleet), shared, Arc::clone(spec)));
    tokio::spawn(probe_loop(Arc::clone(&fleet)));
    let mut window_start = 0.0;
    let addresses = status::addresses_path(&args.status);
    let mut tick = tokio::time::interval(STATUS_EVERY);
    let mut wrote_addresses = None;
    let mut ready_seconds = 0.0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = usr1.recv() => {
                fleet.reset_probe_window();
                window_start = fleet.epoch.elapsed().as_secs_f64();
                tracing::info!("SIGUSR1: a new probe window");
            }
        }
        if reader.is_finished() {
            return match reader.await {
                Ok(Err(e)) => Err(e),
                _ => Err(anyhow::anyhow!("the TUN reader stopped")),
            };
        }
        if let Some(r) = outer_reader.take_if(|r| r.is_finished()) {
            return match r.await {
                Ok(Err(e)) => Err(e),
                _ => Err(anyhow::anyhow!("the underlay reader stopped")),
            };
        }
        fleet.tick_clock();
        let mut s = status::collect(&fleet, spec.setup_timeout_secs);
        status::add_underlay(&mut s, outer.as_deref());
        fleet.counters.failed.store(s.failed, Relaxed);
        s.rss_start_bytes = rss_start_bytes;
        if s.ready && ready_seconds == 0.0 {
            ready_seconds = s.elapsed_seconds;
            tracing::info!(
                up = s.up,
                failed = s.failed,
                seconds = ready_seconds,
                rss_per_client = s.rss_bytes.saturating_sub(rss_start_bytes) / s.clients.max(1),
                "every client up or failed"
            );
        }
        s.ready_seconds = ready_seconds;
        s.probe_window_seconds = s.elapsed_seconds - window_start;
        if s.ready {
            // The ADDRESSES file first: a reader that sees `ready` finds it.
            let list = status::addresses(&fleet);
            if wrote_addresses.as_ref() != Some(&list) {
                status::write_atomically(&addresses, list.as_bytes())?;
                wrote_addresses = Some(list);
            }
        }
        let json = serde_json::to_vec(&s).context("status")?;
        status::write_atomically(&args.status, &json)?;
    }
    let mut s = status::collect(&fleet, spec.setup_timeout_secs);
    status::add_underlay(&mut s, outer.as_deref());
    (s.rss_start_bytes, s.ready_seconds) = (rss_start_bytes, ready_seconds);
    s.probe_window_seconds = s.elapsed_seconds - window_start;
    status::write_atomically(&args.status, &serde_json::to_vec(&s)?)?;
    tracing::info!(up = s.up, failed = s.failed, "stopping");
    Ok(())
}

/// Starts the clients, `connect_per_sec` of them per second, with at most
/// `max_setups_in_flight` started and neither up nor failed (failed: not up within
/// `setup_timeout_secs`, counted by the status loop).
async fn ramp(fleet: Arc<Fleet>, shared: Arc<clients::Shared>, spec: Arc<Spec>) {
    let mut tick = tokio::time::interval(RAMP_TICK);
    let mut next = 0usize;
    // The rate applies from the last pause for room on, not from the start.
    let (mut since, mut started_since) = (tokio::time::Instant::now(), 0usize);
    while next < spec.clients {
        tick.tick().await;
        let due = (since.elapsed().as_secs_f64() * f64::from(spec.connect_per_sec)) as usize + 1;
        while next < spec.clients && started_since < due {
            let c = &fleet.counters;
            let settled = c.up.load(Relaxed) + c.failed.load(Relaxed);
            let settled = usize::try_from(settled).unwrap_or(usize::MAX);
            if next.saturating_sub(settled) >= spec.max_setups_in_flight {
                (since, started_since) = (tokio::time::Instant::now(), 0);
                break;
            }
            fleet.mark_started(next);
            tokio::spawn(clients::run(
                Arc::clone(&fleet),
                Arc::clone(&shared),
                Arc::clone(&spec),
                next,
            ));
            next += 1;
            started_since += 1;
        }
    }
}

/// The sender's tick: each tick probes the clients whose turn it is, so that the probes of
/// one interval are spread over it rather than sent in one burst.
const PROBE_TICK: Duration = Duration::from_millis(10);

/// Sends the probes for as long as the process runs: every client up with an inner address,
/// each target, once per interval.
async fn probe_loop(fleet: Arc<Fleet>) {
    let Some(spec) = fleet.probe.clone() else {
        return;
    };
    let turns = (spec.interval_ms / PROBE_TICK.as_millis() as u64).max(1) as usize;
    let mut tick = tokio::time::interval(PROBE_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut packet = Vec::with_capacity(probe::PROBE_LEN);
    for round in 0u64.. {
        tick.tick().await;
        let turn = (round % turns as u64) as usize;
        let seq = round / turns as u64;
        for slot in fleet.slots.iter().skip(turn).step_by(turns) {
            let Some(inner) = slot.inner().filter(|_| slot.is_up()) else {
                continue;
            };
            for &target in &spec.targets {
                probe::build(&mut packet, inner, target, spec.port, seq);
                if fleet.demux(&packet) {
                    fleet.counters.probe_sent.fetch_add(1, Relaxed);
                }
            }
        }
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
