//! What the demo reports: a live progress line, and at the end the capacity table in the
//! columns of the Windows Server 2012 DirectAccess reference, the clients' and the corporate
//! network's counts, and the verdict.

use super::{Totals, Transport, both, get};
use anyhow::{Result, bail};
use gate64_daemon::Daemon;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::time::{Duration, Instant};

/// Columns of the capacity table.
const COLUMNS: usize = 11;

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
        "~1500 (~2/client)",
        "~1500 (~2/client)",
    ]
    .map(String::from)
}

/// The daemon's counters and the process' CPU time at one moment of the run.
pub struct Sample {
    at: Instant,
    cpu: Cpu,
    exported: Exported,
    pub sas: Sas,
}

/// IKE SAs (MMSA) and child SAs (QMSA): gate64's `gate64_ipsec_mmsa`/`gate64_ipsec_qmsa`
/// gauges when the daemon counts SAs, the demo responder's counts otherwise
/// ([`super::gateway`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sas {
    /// IKE SAs established.
    pub mmsa: u64,
    /// Child SAs installed.
    pub qmsa: u64,
}

impl Sas {
    /// The daemon exports the gauges whether or not it runs IKE itself (the demo's daemon
    /// does not yet), so its figures count once they are not zero.
    fn read(exported: &Exported, totals: &Totals) -> Sas {
        let pick = |daemon: Option<u64>, demo: &std::sync::atomic::AtomicU64| {
            daemon.filter(|&v| v > 0).unwrap_or_else(|| get(demo))
        };
        Sas {
            mmsa: pick(exported.mmsa, &totals.sas.mmsa),
            qmsa: pick(exported.qmsa, &totals.sas.qmsa),
        }
    }
}

impl Sample {
    /// Takes a sample now.
    pub fn take(daemon: &Daemon, totals: &Totals) -> Sample {
        let cpu = Cpu::sample();
        let exported = Exported::read(daemon);
        Sample {
            at: Instant::now(),
            cpu,
            sas: Sas::read(&exported, totals),
            exported,
        }
    }
}

/// The live progress line: rates since the previous line, counts so far.
pub struct Progress {
    start: Instant,
    last: (Instant, (u64, u64)),
    tty: bool,
}

impl Progress {
    /// Progress from `start` on.
    pub fn new(start: &Sample) -> Progress {
        Progress {
            start: start.at,
            last: (start.at, start.exported.bytes),
            tty: io::IsTerminal::is_terminal(&io::stderr()),
        }
    }

    /// Prints the line for now: rewritten in place on a terminal, one line each otherwise.
    pub fn print(&mut self, daemon: &Daemon, totals: &Totals, n_teredo: usize, n_iphttps: usize) {
        let now = Instant::now();
        let b = Exported::read(daemon).bytes;
        let last = self.last;
        let dt = now.duration_since(last.0).as_secs_f64().max(1e-3);
        let line = format!(
            "[{:>3.0}s] Teredo qualified {}/{n_teredo}  IP-HTTPS connected {}/{n_iphttps}  IKE SAs {}  pings answered {}  corpnet {:.1} Mbit/s  internet {:.1} Mbit/s",
            now.duration_since(self.start).as_secs_f64(),
            get(&totals.qualified[Transport::Teredo as usize]),
            get(&totals.qualified[Transport::Iphttps as usize]),
            get(&totals.sas.mmsa),
            both(&totals.pinged),
            mbit(b.0.saturating_sub(last.1.0), dt),
            mbit(b.1.saturating_sub(last.1.1), dt),
        );
        if self.tty {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
        let _ = io::stderr().flush();
        self.last = (now, b);
    }

    /// Ends the line on a terminal.
    pub fn finish(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

/// What the run ended with, taken before the clients hang up: IP-HTTPS links closing and the
/// corporate stream to clients that are gone are not part of the run.
pub struct Outcome<'a> {
    /// The clients build IPsec tunnels (two IKE SAs and two child SAs each are expected).
    pub ipsec: bool,
    /// Teredo clients in the population.
    pub n_teredo: u64,
    /// IP-HTTPS clients in the population.
    pub n_iphttps: u64,
    /// At the start of the run.
    pub start: Sample,
    /// At the end of the run.
    pub end: Sample,
    /// VmRSS at the end.
    pub rss: Option<u64>,
    /// Valid Teredo relay peers at the end (the daemon's gauge).
    pub relay_peers: u64,
    /// IP-HTTPS links up at the end (the daemon's gauge).
    pub iphttps_links: u64,
    /// The clients' and the corporate network's counters.
    pub totals: &'a Totals,
}

impl Outcome<'_> {
    /// Prints the capacity table and the counts.
    pub fn print(&self) {
        let totals = self.totals;
        let (nt, ni) = (self.n_teredo, self.n_iphttps);
        let qualified = self.qualified();
        let pinged = self.pinged();
        let exported = &self.end.exported;
        println!();
        print_table(&[self.row(), reference_row()]);
        println!();
        println!(
            "clients: Teredo {}/{nt} qualified, {}/{nt} pings answered; IP-HTTPS {}/{ni} connected, {}/{ni} pings answered; UDP echo {}/{} answered; {} relay peers valid, {} IP-HTTPS links",
            qualified[0],
            pinged[0],
            qualified[1],
            pinged[1],
            get(&totals.echo_answered),
            get(&totals.echo_sent),
            self.relay_peers,
            self.iphttps_links,
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
        let sas = self.end.sas;
        let rate = match totals.sas.handshake_rate() {
            Some((rate, span)) => format!(
                "; from the first IKE SA to the last {span:.2} s: {rate:.0} IKE handshakes/s"
            ),
            None => String::new(),
        };
        println!(
            "IPsec: {} IKE SAs (MMSA) and {} child SAs (QMSA) for {} clients{rate}",
            sas.mmsa,
            sas.qmsa,
            nt + ni
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
    }

    /// Errors unless at least 95% of the clients of each transport qualified (connected) and
    /// got their ping answered; prints the verdict.
    pub fn check(&self) -> Result<()> {
        let (nt, ni) = (self.n_teredo, self.n_iphttps);
        let n = nt + ni;
        let qualified = self.qualified();
        let pinged = self.pinged();
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
        let sas = self.end.sas;
        let need = (n * 2 * 95).div_ceil(100);
        if self.ipsec && (sas.mmsa < need || sas.qmsa < need) {
            failed.push(format!(
                "only {} IKE SAs and {} child SAs for {n} clients (need {need} of each)",
                sas.mmsa, sas.qmsa
            ));
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

    fn qualified(&self) -> [u64; 2] {
        [0, 1].map(|t| get(&self.totals.qualified[t]))
    }

    fn pinged(&self) -> [u64; 2] {
        [0, 1].map(|t| get(&self.totals.pinged[t]))
    }

    /// This run's row of the capacity table.
    fn row(&self) -> [String; COLUMNS] {
        let (nt, ni) = (self.n_teredo, self.n_iphttps);
        let n = nt + ni;
        let qualified = self.qualified();
        let wall = self.end.at.duration_since(self.start.at).as_secs_f64();
        let (cpu0, cpu1) = (self.start.cpu, self.end.cpu);
        let (bytes0, bytes1) = (self.start.exported.bytes, self.end.exported.bytes);
        let rss = self.rss;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers_pct = cpu1.workers.saturating_sub(cpu0.workers).as_secs_f64() / wall * 100.0;
        let process_pct = cpu1.process.saturating_sub(cpu0.process).as_secs_f64() / wall * 100.0;
        [
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
            per_client(self.end.sas.qmsa, n),
            per_client(self.end.sas.mmsa, n),
        ]
    }
}

/// The daemon's counters as exported (UDP workers and IP-HTTPS tasks alike).
struct Exported {
    /// Bytes (corpnet, internet), both directions.
    bytes: (u64, u64),
    /// Non-zero drop counters by reason.
    drops: BTreeMap<String, u64>,
    /// `gate64_ipsec_mmsa`, when exported.
    mmsa: Option<u64>,
    /// `gate64_ipsec_qmsa`, when exported.
    qmsa: Option<u64>,
}

impl Exported {
    fn read(daemon: &Daemon) -> Self {
        let text = daemon.exporter.encode();
        let mut e = Exported {
            bytes: (0, 0),
            drops: BTreeMap::new(),
            mmsa: None,
            qmsa: None,
        };
        for line in text.lines() {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(v) = value.parse::<f64>() else {
                continue;
            };
            let v = v as u64;
            match series {
                "gate64_ipsec_mmsa" => e.mmsa = Some(v),
                "gate64_ipsec_qmsa" => e.qmsa = Some(v),
                _ => {}
            }
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

/// `count (x.x/client)`.
fn per_client(count: u64, clients: u64) -> String {
    format!(
        "{count} ({:.1}/client)",
        count as f64 / clients.max(1) as f64
    )
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
    let hz = gate64_sys::resource::clock_ticks_per_sec().unwrap_or(100);
    Duration::from_secs_f64(ticks as f64 / hz as f64)
}

/// VmRSS of this process in bytes.
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
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
        "QMSA",
        "MMSA",
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
