//! `gate64 bench capacity`: builds the lab ([`super::lab`]), probes every client through its
//! tunnels, then searches the capacity: the offered load doubles while a step passes (UDP
//! loss below `--max-loss-percent`, 99th-percentile round trip below `--max-rtt-ms`, every
//! TCP flow done with ≥ 99% of its bytes on schedule), then bisects between the last pass and
//! the first failure. The reported figures are those measured at the highest passing step,
//! never the offered load of a failing one.

use super::lab::{
    GATE_ADDRESS6, GATE64_NAPI_THREADS, LAB_NAPI_THREADS, Lab, LabOptions, NAT64_TARGET, SINK_PORT,
    V4ONLY, path_str,
};
use super::measure::{
    CpuClock, KernelThreadsClock, MachineCpu, MachineLoad, cores, drop_counters, grown, hardware,
    interface_bytes,
};
use super::report::{Report, Row, Step, table};
use super::spec::{Status, unix_ms};
use super::traffic::FlowsResult;
use anyhow::{Context, Result, bail};
use gate64_testkit::{CORP_HOST, Topology};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Share of its offered TCP bytes a flow must deliver for its step to pass.
const TCP_COMPLETION: f64 = 0.99;
/// The lowest offered load the search tries, Mbit/s.
const MIN_MBPS: f64 = 1.0;
/// How long the background traffic is sampled with every client connected.
const IDLE_SAMPLE: Duration = Duration::from_secs(5);
/// Halvings of the offered load while no step has passed.
const MAX_HALVINGS: u32 = 4;

/// Options of `gate64 bench capacity`.
#[derive(Debug, Clone, clap::Args)]
pub struct CapacityArgs {
    /// Emulated clients (plus the third-party one).
    #[arg(long, default_value_t = 1500)]
    pub clients: usize,
    /// Duration of each load step, seconds.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Measure every count of `--sweep-clients` (a fresh lab each) and write SVG plots.
    #[arg(long)]
    pub sweep: bool,
    /// The client counts of `--sweep`, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,1000,1500,10000,30000,100000"
    )]
    pub sweep_clients: Vec<usize>,
    /// Write the figures here (`{"rows": [...]}`).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Directory of the `--sweep` plots (default: the JSON file's, else the current one).
    #[arg(long)]
    pub svg_dir: Option<PathBuf>,
    /// Share of the emulated clients on IP-HTTPS (the reference: 30%).
    #[arg(long, default_value_t = 0.3)]
    pub iphttps_share: f64,
    /// Hold every client connected this long (keepalives, DPD) before measuring, seconds.
    #[arg(long, default_value_t = 0)]
    pub hold: u64,
    /// The first offered load of the search, Mbit/s.
    #[arg(long, default_value_t = 100.0)]
    pub start_mbps: f64,
    /// The highest offered load tried, Mbit/s.
    #[arg(long, default_value_t = 20_000.0)]
    pub max_mbps: f64,
    /// Bisection steps after the first failure.
    #[arg(long, default_value_t = 2)]
    pub refine: u32,
    /// Bulk flows per step, spread evenly over the clients.
    #[arg(long, default_value_t = 64)]
    pub flows: usize,
    /// Share of the bulk flows that are UDP (loss and latency are measured on them).
    #[arg(long, default_value_t = 0.3)]
    pub udp_share: f64,
    /// Share of the traffic to the IPv4-only host through DNS64 and NAT64.
    #[arg(long, default_value_t = 1.0 / 3.0)]
    pub nat64_share: f64,
    /// A step fails at this UDP loss or more, percent.
    #[arg(long, default_value_t = 1.0)]
    pub max_loss_percent: f64,
    /// A step fails when the 99th-percentile UDP round trip exceeds this, ms. The path
    /// holds two user-space ESP ends (gate64 and the generator) on the same cores as
    /// everything else, so the default is a bound against queues that only grow, not a
    /// latency target.
    #[arg(long, default_value_t = 1000.0)]
    pub max_rtt_ms: f64,
    /// Only connect and probe every client: no capacity search.
    #[arg(long)]
    pub probe_only: bool,
    /// Leave out Debian's miredo client and strongSwan.
    #[arg(long)]
    pub no_third_party: bool,
    /// Answer the IPv4-only host's name with gate64's own `bench zone` instead of Debian's
    /// Unbound (for machines without it; `gate64 demo` does this).
    #[arg(long)]
    pub builtin_dns: bool,
    /// Give each end of the veths to the clients and to the corporate host a NIC's receive
    /// path (GRO, a NAPI kernel thread): gate64's host's receive is then counted with it
    /// (host NAPI), the lab's apart (lab NAPI), instead of each in its sender's system call.
    #[arg(long)]
    pub nic_receive: bool,
    /// gate64's TUN hands its writes to NAPI kernel threads (`corpnet.tun_napi = true`),
    /// counted as host NAPI; without it the forwarding runs in gate64's own writes.
    #[arg(long)]
    pub tun_napi: bool,
    /// Lab use only: when DNS64 fails, send the NAT64 share to the address DNS64 should
    /// have synthesized, so NAT64 can still be measured. DNS64 is still reported failed and
    /// the run still exits non-zero; the report records that the fallback was on.
    #[arg(long)]
    pub nat64_fallback: bool,
    /// gate64's `dns64.upstream` instead of the lab's corporate DNS server (to show that a
    /// broken DNS64 fails the run).
    #[arg(long, hide = true, value_name = "IPV4")]
    pub dns64_upstream: Option<std::net::Ipv4Addr>,
    /// Client set-ups (transport and IKE) the generator starts per second.
    #[arg(long, default_value_t = 500)]
    pub connect_per_sec: u32,
    /// gate64's worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub workers: u32,
    /// Measure nothing: write the plots of an earlier run's JSON file (no root needed).
    #[arg(long, value_name = "JSON")]
    pub replot: Option<PathBuf>,
}

/// Runs `gate64 bench capacity`.
pub fn run(args: &CapacityArgs) -> Result<()> {
    if let Some(json) = &args.replot {
        let text =
            std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
        let report: Report =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", json.display()))?;
        print!("{}", table(&report.rows));
        return write_plots(args, &report.rows);
    }
    if gate64_sys::process::geteuid() != 0 {
        bail!(
            "gate64 bench capacity needs root (network namespaces, TUN devices); `gate64 demo` \
             runs a short version without root"
        );
    }
    let report = measure(args)?;
    print!("{}", table(&report.rows));
    if args.sweep {
        write_plots(args, &report.rows)?;
    }
    let broken: Vec<String> = report
        .rows
        .iter()
        .flat_map(|r| {
            let n = r.clients_requested;
            r.path_failures
                .iter()
                .map(move |f| format!("{n} clients, {f}"))
        })
        .collect();
    if !broken.is_empty() {
        bail!("claimed paths did not work:\n  {}", broken.join("\n  "));
    }
    Ok(())
}

/// Measures every client count of `args` (one lab each), writing `--json` after each; the
/// caller prints the table. Needs CAP_SYS_ADMIN and CAP_NET_ADMIN (root, or the user
/// namespace `gate64 demo` makes).
pub fn measure(args: &CapacityArgs) -> Result<Report> {
    let stop = stop_on_signal()?;
    let counts = if args.sweep {
        args.sweep_clients.clone()
    } else {
        vec![args.clients]
    };
    let mut report = Report {
        rows: Vec::new(),
        note: format!(
            "gate64 bench capacity, {} s steps, on {} shared with the load generator (and \
             possibly other work); cpu_percent is gate64's own CPU in percent of one core",
            args.seconds,
            hardware()
        ),
    };
    for &clients in &counts {
        eprintln!("== {clients} clients ==");
        let row = match measure_point(args, clients, &stop) {
            Ok(row) => row,
            // A sweep goes on past a point that breaks; the row says why.
            Err(e) if args.sweep && !stop.load(Ordering::Relaxed) => {
                eprintln!("measuring {clients} clients: {e:#}");
                Row {
                    hardware: hardware(),
                    clients_requested: clients as u64,
                    error: Some(format!("{e:#}")),
                    ..Row::default()
                }
            }
            Err(e) => return Err(e.context(format!("measuring {clients} clients"))),
        };
        report.rows.push(row);
        if let Some(path) = &args.json {
            report.write(path)?;
        }
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
    }
    Ok(report)
}

/// Sets a flag on SIGINT or SIGTERM, so the run stops at the next check and every namespace
/// and process is torn down by the destructors on the way out.
fn stop_on_signal() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime")?;
    std::thread::Builder::new()
        .name("bench-signals".into())
        .spawn(move || {
            rt.block_on(async {
                let Ok(mut term) =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                else {
                    return;
                };
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                eprintln!("gate64 bench capacity: stopping, cleaning up");
                flag.store(true, Ordering::Relaxed);
            });
        })
        .context("spawning the signal thread")?;
    Ok(stop)
}

fn measure_point(args: &CapacityArgs, clients: usize, stop: &AtomicBool) -> Result<Row> {
    let topo = Topology::builder().corp_ipv4(true).build()?;
    let opts = LabOptions {
        clients,
        iphttps_share: args.iphttps_share,
        third_party: !args.no_third_party,
        connect_per_sec: args.connect_per_sec,
        workers: args.workers,
        builtin_dns: args.builtin_dns,
        dns64_upstream: args.dns64_upstream,
        nic_receive: args.nic_receive,
        tun_napi: args.tun_napi,
    };
    let mut lab = match Lab::start(&topo, &opts, stop) {
        Ok(lab) => lab,
        Err(e) => {
            topo.print_logs();
            return Err(e);
        }
    };
    let result = search(args, &mut lab, stop);
    if result.is_err() {
        eprintln!("{}", lab.logs());
    }
    result
}

fn search(args: &CapacityArgs, lab: &mut Lab<'_>, stop: &AtomicBool) -> Result<Row> {
    hold(args.hold, stop)?;
    let gate_pid = lab.gate.pid();
    let mut row = Row {
        hardware: hardware(),
        clients_requested: lab.status.clients,
        clients_failed: lab.status.failed,
        hold_seconds: args.hold,
        ..Row::default()
    };
    row.gate64_rss_idle_bytes = super::measure::process_rss_bytes(gate_pid)?;
    let idle = Counters::read(lab)?;
    std::thread::sleep(IDLE_SAMPLE);
    let busy = Counters::read(lab)?;
    let secs = busy.at.duration_since(idle.at).as_secs_f64().max(1e-3);
    row.idle_corpnet_mbps = mbit_per_sec(idle.corpnet, busy.corpnet, secs);
    row.idle_internet_mbps = mbit_per_sec(idle.internet, busy.internet, secs);
    row.idle_cpu_percent = idle.gate.since(&busy.gate).1;
    let before_probe = probe_counters(lab)?;
    let probe_start_unix_ms = unix_ms();
    let probe = run_flows(args, lab, 0.0, true, stop).context("probing every client")?;
    row.probe_drops = grown(&before_probe, &probe_counters(lab)?);
    if let Some(s) = Status::read(&lab.status_path)? {
        row.probe_slow_uplinks = (s.slow_uplinks.into_iter())
            .filter(|u| u.taken_unix_ms >= probe_start_unix_ms)
            .collect();
    }
    row.clients_probed = probe.probed as u64;
    row.clients_passed_traffic = probe.probe_ok as u64;
    row.clients_passed_first_round = probe.probe_ok_first_round as u64;
    row.probe_answered_at_try = probe.probe_answered_at_try.clone();
    row.clients_reprobed = probe.reprobed as u64;
    row.probe_failures = probe.probe_failures.clone();
    row.dns64_error = probe.dns64_error;
    row.nat64_fallback = args.nat64_fallback;
    row.nic_receive = args.nic_receive;
    row.tun_napi = args.tun_napi;
    row.path_failures = (probe.paths.failures().into_iter())
        .map(|f| format!("probe: {f}"))
        .collect();
    row.probe_paths = probe.paths;
    if probe.reprobed > 0 {
        eprintln!(
            "{} clients got no echo among 512 probed at once; probed again a few at a time, {} answered",
            probe.reprobed, probe.reprobe_ok
        );
    }
    if !probe.probe_failed.is_empty() {
        eprintln!(
            "clients whose probe got no echo in either round (first 20): {:?}",
            probe.probe_failed
        );
    }
    for line in row.probe_failures_explained() {
        eprintln!("{line}");
    }
    // With a claimed path broken in the probe there is no capacity to search for.
    if !args.probe_only && row.path_failures.is_empty() {
        capacity_search(args, lab, stop, &mut row)?;
    }
    let third = lab.third_party_ping().transpose()?;
    row.third_party_ok = third;
    let m = lab.metrics()?;
    row.qmsa = m.sum("gate64_ipsec_qmsa", &[]) as u64;
    row.mmsa = m.sum("gate64_ipsec_mmsa", &[]) as u64;
    let status = lab.refresh_status()?.clone();
    let third_party = u64::from(lab.has_third_party());
    (row.generator_qmsa, row.generator_mmsa) = (status.qmsa, status.mmsa);
    row.teredo = status.teredo_up + third_party;
    row.iphttps = status.iphttps_up;
    row.clients = row.teredo + row.iphttps;
    row.rss_per_client_bytes = row.gate64_rss_idle_bytes / row.clients.max(1);
    if row.gate64_rss_bytes == 0 {
        row.gate64_rss_bytes = super::measure::process_rss_bytes(gate_pid)?;
    }
    lab.gate.ensure_running()?;
    Ok(row)
}

fn hold(secs: u64, stop: &AtomicBool) -> Result<()> {
    if secs == 0 {
        return Ok(());
    }
    let bar = ProgressBar::new(secs);
    bar.set_style(
        ProgressStyle::with_template("holding every client connected [{bar:30}] {pos}/{len} s")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    for s in 0..secs {
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        bar.set_position(s);
        std::thread::sleep(Duration::from_secs(1));
    }
    bar.finish();
    Ok(())
}

/// Doubles the offered load while steps pass; while none has passed, halves it (at most
/// [`MAX_HALVINGS`] times); then bisects between the highest pass and the lowest failure
/// `--refine` times.
fn capacity_search(
    args: &CapacityArgs,
    lab: &mut Lab<'_>,
    stop: &AtomicBool,
    row: &mut Row,
) -> Result<()> {
    let (mut low, mut high): (Option<f64>, Option<f64>) = (None, None);
    let mut offered = args.start_mbps.clamp(MIN_MBPS, args.max_mbps);
    let (mut refinements, mut halvings) = (0, 0);
    loop {
        let step = run_step(args, lab, offered, stop)?;
        eprintln!(
            "step {:.0} Mbit/s offered: {} (corpnet {:.1} Mbit/s, gate64 {:.0}% CPU, loss {:.2}%, \
             p50 {:.1} ms, p99 {:.1} ms, TCP {:.1}%)",
            offered,
            step.failure.as_deref().unwrap_or("passed"),
            step.corpnet_mbps,
            step.cpu_percent,
            step.loss_percent,
            step.rtt_p50_ms,
            step.rtt_p99_ms,
            step.tcp_completion * 100.0
        );
        if !step.drops.is_empty() {
            let list: Vec<String> = step.drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
            eprintln!("  dropped: {}", list.join(", "));
        }
        if step.passed {
            low = Some(low.map_or(offered, |l: f64| l.max(offered)));
            adopt(row, &step);
        } else {
            high = Some(high.map_or(offered, |h: f64| h.min(offered)));
        }
        let at = step.offered_mbps;
        let broken = !step.path_failures.is_empty();
        (row.path_failures).extend(
            step.path_failures
                .iter()
                .map(|f| format!("step {at:.0} Mbit/s: {f}")),
        );
        row.steps.push(step);
        // A claimed path that does not work is no capacity figure: the search ends there.
        if broken {
            return Ok(());
        }
        let next = next_offer(low, high, &mut halvings, &mut refinements, args);
        match next {
            Some(n) => offered = n,
            None => return Ok(()),
        }
    }
}

/// The next offered load of the search, `None` when it is done: `low` is the highest load
/// that passed, `high` the lowest that failed.
fn next_offer(
    low: Option<f64>,
    high: Option<f64>,
    halvings: &mut u32,
    refinements: &mut u32,
    args: &CapacityArgs,
) -> Option<f64> {
    match (low, high) {
        (Some(l), None) => Some(l * 2.0).filter(|n| *n <= args.max_mbps),
        (None, Some(h)) => {
            *halvings += 1;
            Some(h / 2.0).filter(|n| *halvings <= MAX_HALVINGS && *n >= MIN_MBPS)
        }
        (Some(l), Some(h)) => {
            *refinements += 1;
            Some((l + h) / 2.0).filter(|_| *refinements <= args.refine)
        }
        (None, None) => None,
    }
}

/// Takes the figures of a passing step that carried more than the best so far.
fn adopt(row: &mut Row, step: &Step) {
    if step.corpnet_mbps < row.corpnet_mbps {
        return;
    }
    row.corpnet_mbps = step.corpnet_mbps;
    row.internet_mbps = step.internet_mbps;
    row.offered_mbps = step.offered_mbps;
    row.cpu_percent = step.cpu_percent;
    row.corpnet_mbps_per_gate64_core = per_core(step.corpnet_mbps, step.cpu_percent);
    row.machine_cpu_percent = step.machine_cpu_percent;
    row.softirq_percent = step.softirq_percent;
    row.generator_cpu_percent = step.generator_cpu_percent;
    row.napi_cpu_percent = step.napi_cpu_percent;
    row.lab_napi_cpu_percent = step.lab_napi_cpu_percent;
    row.corpnet_mbps_per_core_with_napi =
        per_core(step.corpnet_mbps, step.cpu_percent + step.napi_cpu_percent);
    row.gate64_rss_bytes = step.gate64_rss_bytes;
    row.loss_percent = step.loss_percent;
    row.rtt_p99_ms = step.rtt_p99_ms;
}

/// `mbps` per busy core, for a CPU share in percent of one core (0 when nothing was busy).
fn per_core(mbps: f64, cpu_percent: f64) -> f64 {
    if cpu_percent > 0.0 {
        mbps / (cpu_percent / 100.0)
    } else {
        0.0
    }
}

/// Mbit/s between two byte counters read `secs` apart.
fn mbit_per_sec(before: u64, after: u64, secs: f64) -> f64 {
    after.saturating_sub(before) as f64 * 8.0 / secs / 1e6
}

/// Counters read before and after a step.
struct Counters {
    gate: CpuClock,
    generator: CpuClock,
    napi: KernelThreadsClock,
    lab_napi: KernelThreadsClock,
    machine: MachineCpu,
    corpnet: u64,
    internet: u64,
    drops: BTreeMap<String, u64>,
    at: Instant,
}

impl Counters {
    fn read(lab: &Lab<'_>) -> Result<Counters> {
        let srv = &lab.topo.srv;
        Ok(Counters {
            gate: CpuClock::read(lab.gate.pid())?,
            generator: CpuClock::read(lab.generator.pid())?,
            napi: KernelThreadsClock::read(GATE64_NAPI_THREADS),
            lab_napi: KernelThreadsClock::read(LAB_NAPI_THREADS),
            machine: MachineCpu::read()?,
            corpnet: interface_bytes(srv, "vcorp")?,
            internet: interface_bytes(srv, "vload")? + interface_bytes(srv, "vcli")?,
            drops: drops(lab)?,
            at: Instant::now(),
        })
    }
}

/// Every drop counter of the lab: the kernel's in the generator's, gate64's and the
/// corporate namespaces, gate64's by reason, the generator's own.
fn drops(lab: &Lab<'_>) -> Result<BTreeMap<String, u64>> {
    let mut all = BTreeMap::new();
    for ns in [&lab.load, &lab.topo.srv, &lab.topo.corp] {
        all.extend(drop_counters(ns)?);
    }
    if let Ok(m) = lab.metrics() {
        for (reason, v) in m.nonzero_by("gate64_drops_total", "reason") {
            all.insert(format!("gate64/{reason}"), v as u64);
        }
    }
    if let Some(s) = Status::read(&lab.status_path)? {
        all.insert("generator/uplink_dropped".to_owned(), s.uplink_dropped);
        all.insert("generator/esp_errors".to_owned(), s.esp_errors);
    }
    Ok(all)
}

/// What may explain a probe that got no echo: every drop counter of [`drops`], gate64's
/// counters of drops, errors, refusals and IKE events (`gate64/NAME{LABELS}`), and the
/// generator's own.
fn probe_counters(lab: &Lab<'_>) -> Result<BTreeMap<String, u64>> {
    const TELLING: [&str; 12] = [
        "drop",
        "error",
        "refus",
        "fail",
        "unknown",
        "shed",
        "replay",
        "negotiation",
        "deferred",
        "retransmi",
        "timeout",
        "delete",
    ];
    let mut all = drops(lab)?;
    if let Ok(m) = lab.metrics() {
        for sample in m.samples() {
            let telling = TELLING.iter().any(|t| sample.name.contains(t));
            if !telling || !sample.name.ends_with("_total") || sample.value <= 0.0 {
                continue;
            }
            let labels: Vec<String> = (sample.labels.iter())
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let key = format!("gate64/{}{{{}}}", sample.name, labels.join(","));
            all.insert(key, sample.value as u64);
        }
    }
    if let Some(s) = Status::read(&lab.status_path)? {
        for (name, v) in [
            ("unknown_source", s.unknown_source),
            ("tun_write_failed", s.tun_write_failed),
            ("session_errors", s.session_errors),
            ("ike_negotiations", s.ike_negotiations),
            ("underlay_dropped", s.underlay_dropped),
            ("underlay_refused", s.underlay_refused),
            ("uplink_slow", s.uplink_slow),
        ] {
            all.insert(format!("generator/{name}"), v);
        }
    }
    Ok(all)
}

fn run_step(args: &CapacityArgs, lab: &mut Lab<'_>, mbps: f64, stop: &AtomicBool) -> Result<Step> {
    let before = Counters::read(lab)?;
    let flows = run_flows(args, lab, mbps, false, stop);
    let after = Counters::read(lab)?;
    let secs = after.at.duration_since(before.at).as_secs_f64().max(1e-3);
    let rate = |a: u64, b: u64| mbit_per_sec(a, b, secs);
    let machine = MachineLoad::between(before.machine, after.machine, cores());
    let mut step = Step {
        offered_mbps: mbps,
        corpnet_mbps: rate(before.corpnet, after.corpnet),
        internet_mbps: rate(before.internet, after.internet),
        cpu_percent: before.gate.since(&after.gate).1,
        generator_cpu_percent: before.generator.since(&after.generator).1,
        napi_cpu_percent: before.napi.percent_since(&after.napi),
        lab_napi_cpu_percent: before.lab_napi.percent_since(&after.lab_napi),
        machine_cpu_percent: machine.busy_percent,
        softirq_percent: machine.softirq_percent,
        gate64_rss_bytes: super::measure::process_rss_bytes(lab.gate.pid())?,
        drops: grown(&before.drops, &after.drops),
        ..Step::default()
    };
    match flows {
        Ok(f) => judge(args, &f, &mut step),
        Err(e) => step.failure = Some(format!("{e:#}")),
    }
    step.passed = step.failure.is_none();
    Ok(step)
}

/// Fills the step's traffic figures from the flows and says why it failed, if it did.
fn judge(args: &CapacityArgs, f: &FlowsResult, step: &mut Step) {
    step.goodput_mbps = f.goodput_mbps;
    step.loss_percent = f.loss_percent;
    step.rtt_p50_ms = f.rtt_p50_ms;
    step.rtt_p99_ms = f.rtt_p99_ms;
    step.tcp_completion = if f.tcp_offered_bytes > 0 {
        f.tcp_bytes as f64 / f.tcp_offered_bytes as f64
    } else {
        1.0
    };
    step.paths = f.paths.clone();
    step.path_failures = f.paths.failures();
    step.failure = if !step.path_failures.is_empty() {
        Some(step.path_failures.join("; "))
    } else if f.tcp_errors > 0 {
        Some(format!(
            "{} TCP flows failed: {}",
            f.tcp_errors,
            f.tcp_first_error.as_deref().unwrap_or("?")
        ))
    } else if f.udp_flows > 0 && f.udp_sent == 0 {
        Some("no UDP datagram sent".to_owned())
    } else if f.loss_percent >= args.max_loss_percent {
        Some(format!("loss {:.2}%", f.loss_percent))
    } else if f.rtt_p99_ms > args.max_rtt_ms {
        Some(format!("p99 round trip {:.1} ms", f.rtt_p99_ms))
    } else if step.tcp_completion < TCP_COMPLETION {
        Some(format!(
            "TCP delivered {:.1}% of its bytes",
            step.tcp_completion * 100.0
        ))
    } else {
        None
    };
}

/// Runs `gate64 bench flows` in the generator's namespace with a progress bar.
fn run_flows(
    args: &CapacityArgs,
    lab: &Lab<'_>,
    mbps: f64,
    probe_all: bool,
    stop: &AtomicBool,
) -> Result<FlowsResult> {
    let out = lab.load.dir().join("flows.json");
    let _ = std::fs::remove_file(&out);
    let addresses = super::spec::addresses_path(&lab.status_path);
    let bin = path_str(&lab.bin)?;
    let (seconds, port) = (args.seconds.to_string(), SINK_PORT.to_string());
    let (mbps_s, flows, udp, nat64) = (
        mbps.to_string(),
        args.flows.to_string(),
        args.udp_share.to_string(),
        args.nat64_share.to_string(),
    );
    let (v6, dns) = (CORP_HOST.to_string(), GATE_ADDRESS6.to_string());
    let expect = NAT64_TARGET.to_string();
    let mut argv = vec![
        bin,
        "bench",
        "flows",
        "--addresses",
        path_str(&addresses)?,
        "--v6-server",
        &v6,
        "--v4-name",
        V4ONLY,
        "--dns",
        &dns,
        "--dns64-expect",
        &expect,
        "--port",
        &port,
        "--mbps",
        &mbps_s,
        "--seconds",
        &seconds,
        "--flows",
        &flows,
        "--udp-share",
        &udp,
        "--nat64-share",
        &nat64,
        "--out",
        path_str(&out)?,
    ];
    if probe_all {
        argv.push("--probe-all");
    }
    if args.nat64_fallback {
        argv.extend(["--nat64-fallback", &expect]);
    }
    let label = if probe_all { "probe" } else { "flows" };
    let mut proc = lab.load.spawn(label, &argv)?;
    let what = if probe_all {
        format!(
            "probing {} clients",
            lab.status.teredo_up + lab.status.iphttps_up
        )
    } else {
        format!("{mbps:.0} Mbit/s offered")
    };
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(what);
    // Probes: 3 tries of 2 s for 512 clients at a time; steps: their duration plus drain.
    let clients = lab.status.teredo_up + lab.status.iphttps_up;
    let budget = Duration::from_secs(args.seconds + 120 + clients / 50);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = proc.try_status() {
            break s;
        }
        if stop.load(Ordering::Relaxed) {
            bar.abandon_with_message("interrupted");
            bail!("interrupted");
        }
        if start.elapsed() > budget {
            bar.abandon_with_message("timed out");
            bail!(
                "gate64 bench flows did not finish within {budget:?}: {}",
                proc.log()
            );
        }
        bar.tick();
        std::thread::sleep(Duration::from_millis(200));
    };
    bar.finish_and_clear();
    if !status.success() {
        bail!("gate64 bench flows failed ({status}): {}", proc.log());
    }
    let text =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", out.display()))
}

fn write_plots(args: &CapacityArgs, rows: &[Row]) -> Result<()> {
    let dir = match (&args.svg_dir, &args.json) {
        (Some(d), _) => d.clone(),
        (None, Some(j)) => j.parent().map(Path::to_path_buf).unwrap_or_default(),
        (None, None) => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let per = |f: &dyn Fn(&Row) -> f64| -> Vec<(f64, f64)> {
        rows.iter().map(|r| (r.clients as f64, f(r))).collect()
    };
    let plots = [
        (
            "capacity-throughput.svg",
            super::svg::plot(
                "Capacity: corpnet throughput",
                "Mbit/s",
                &per(&|r| r.corpnet_mbps),
            ),
        ),
        (
            "capacity-cpu-per-client.svg",
            super::svg::plot(
                "gate64 CPU per client at capacity",
                "% of one core per 1000 clients",
                &per(&|r| r.cpu_percent * 1000.0 / (r.clients.max(1) as f64)),
            ),
        ),
        (
            "capacity-memory-per-client.svg",
            super::svg::plot(
                "gate64 memory per client (idle, all connected)",
                "KB per client",
                &per(&|r| r.rss_per_client_bytes as f64 / 1024.0),
            ),
        ),
    ];
    for (name, svg) in plots {
        let path = dir.join(name);
        std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CapacityArgs,
    }

    fn args(argv: &[&str]) -> CapacityArgs {
        Cli::parse_from(std::iter::once("capacity").chain(argv.iter().copied())).args
    }

    #[test]
    fn contract_flags_parse() {
        let a = args(&[
            "--clients",
            "200",
            "--seconds",
            "5",
            "--sweep",
            "--json",
            "/t/x.json",
        ]);
        assert_eq!((a.clients, a.seconds, a.sweep), (200, 5, true));
        assert_eq!(a.json.as_deref(), Some(Path::new("/t/x.json")));
        assert_eq!(a.sweep_clients, vec![100, 1000, 1500, 10000, 30000, 100000]);
        let a = args(&["--sweep-clients", "10,20"]);
        assert_eq!(a.sweep_clients, vec![10, 20]);
    }

    #[test]
    fn a_step_fails_on_loss_latency_errors_or_lag() {
        let a = args(&[]);
        let ok = FlowsResult {
            udp_flows: 1,
            udp_sent: 1000,
            udp_received: 999,
            loss_percent: 0.1,
            rtt_p99_ms: 5.0,
            tcp_offered_bytes: 100,
            tcp_bytes: 100,
            ..FlowsResult::default()
        };
        let mut step = Step::default();
        judge(&a, &ok, &mut step);
        assert_eq!(step.failure, None);
        for bad in [
            FlowsResult {
                loss_percent: 1.0,
                ..ok.clone()
            },
            FlowsResult {
                rtt_p99_ms: 5000.0,
                ..ok.clone()
            },
            FlowsResult {
                tcp_bytes: 90,
                ..ok.clone()
            },
            FlowsResult {
                tcp_errors: 1,
                ..ok.clone()
            },
        ] {
            let mut step = Step::default();
            judge(&a, &bad, &mut step);
            assert!(step.failure.is_some(), "{bad:?}");
        }
    }

    #[test]
    fn the_search_doubles_halves_and_bisects() {
        let a = args(&["--max-mbps", "1000", "--refine", "2"]);
        let (mut h, mut r) = (0, 0);
        assert_eq!(
            next_offer(Some(100.0), None, &mut h, &mut r, &a),
            Some(200.0)
        );
        assert_eq!(next_offer(Some(800.0), None, &mut h, &mut r, &a), None);
        assert_eq!(
            next_offer(None, Some(100.0), &mut h, &mut r, &a),
            Some(50.0)
        );
        assert_eq!(
            next_offer(Some(50.0), Some(100.0), &mut h, &mut r, &a),
            Some(75.0)
        );
        assert_eq!(
            next_offer(Some(75.0), Some(100.0), &mut h, &mut r, &a),
            Some(87.5)
        );
        assert_eq!(
            next_offer(Some(87.5), Some(100.0), &mut h, &mut r, &a),
            None
        );
        let (mut h, mut r) = (0, 0);
        let halved: Vec<_> =
            std::iter::from_fn(|| next_offer(None, Some(64.0), &mut h, &mut r, &a))
                .take(10)
                .collect();
        assert_eq!(halved.len() as u32, MAX_HALVINGS);
    }

    #[test]
    fn the_row_keeps_the_best_passing_step() {
        let mut row = Row::default();
        let step = |mbps: f64, cpu: f64| Step {
            corpnet_mbps: mbps,
            cpu_percent: cpu,
            passed: true,
            ..Step::default()
        };
        adopt(&mut row, &step(300.0, 50.0));
        adopt(&mut row, &step(200.0, 20.0));
        assert_eq!(row.corpnet_mbps, 300.0);
        assert_eq!(row.corpnet_mbps_per_gate64_core, 600.0);
    }
}
