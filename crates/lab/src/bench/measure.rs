//! Figures read from the kernel: a process's CPU time and RSS (`/proc/PID/stat`,
//! `/proc/PID/status`), the whole machine's CPU including softirq (`/proc/stat`), a
//! namespace's interface byte counters (`/proc/thread-self/net/dev`) and where its kernel
//! dropped packets, the hardware.

use anyhow::{Context, Result, bail};
use gate64_testkit::Netns;
use std::collections::BTreeMap;
use std::time::Instant;

/// Clock ticks per second of `/proc` CPU times.
fn ticks_per_sec() -> f64 {
    gate64_sys::resource::clock_ticks_per_sec().map_or(100.0, |t| t as f64)
}

/// CPU seconds (user + system, all threads) of process `pid`.
pub fn process_cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    parse_stat_cpu(&stat)
        .map(|ticks| ticks as f64 / ticks_per_sec())
        .with_context(|| format!("parsing /proc/{pid}/stat"))
}

/// utime + stime from a `/proc/PID/stat` line (fields 14 and 15, counted after the command
/// name, which may itself hold spaces and parentheses).
fn parse_stat_cpu(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Resident memory of process `pid` (`VmRSS`).
pub fn process_rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    parse_vmrss(&status).with_context(|| format!("no VmRSS in /proc/{pid}/status"))
}

fn parse_vmrss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The aggregate `cpu` line of `/proc/stat`, in ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineCpu {
    total: u64,
    idle: u64,
    softirq: u64,
}

impl MachineCpu {
    /// Reads `/proc/stat`.
    pub fn read() -> Result<MachineCpu> {
        let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        parse_proc_stat(&text).context("parsing /proc/stat")
    }
}

fn parse_proc_stat(text: &str) -> Option<MachineCpu> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice, already in user].
    let total = v.iter().take(8).sum();
    Some(MachineCpu {
        total,
        idle: v.get(3)? + v.get(4)?,
        softirq: *v.get(6)?,
    })
}

/// Whole-machine CPU between two readings, in percent of one core (200 = two cores busy).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MachineLoad {
    /// Busy (everything but idle and iowait).
    pub busy_percent: f64,
    /// Of which softirq (packet processing in the kernel, attributed to no process).
    pub softirq_percent: f64,
}

impl MachineLoad {
    /// The load between `before` and `after` on a machine of `cores` cores.
    pub fn between(before: MachineCpu, after: MachineCpu, cores: usize) -> MachineLoad {
        let total = after.total.saturating_sub(before.total);
        if total == 0 {
            return MachineLoad::default();
        }
        let scale = 100.0 * cores as f64 / total as f64;
        let idle = after.idle.saturating_sub(before.idle);
        MachineLoad {
            busy_percent: total.saturating_sub(idle) as f64 * scale,
            softirq_percent: after.softirq.saturating_sub(before.softirq) as f64 * scale,
        }
    }
}

/// CPU cores online.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// "2 cores, <model name>" from `/proc/cpuinfo`.
pub fn hardware() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{} cores, {model}", cores())
}

/// The CPU time of the kernel threads whose name starts with one of some prefixes (NAPI
/// threads, `napi/gate64-N` for gate64's TUN), per thread, and the wall clock.
#[derive(Debug, Clone)]
pub struct KernelThreadsClock {
    ticks: BTreeMap<u32, u64>,
    at: Instant,
}

impl KernelThreadsClock {
    /// Reads every kernel thread named `prefix...` for one of `prefixes` now (none found:
    /// empty, not an error).
    pub fn read(prefixes: &[&str]) -> KernelThreadsClock {
        let mut ticks = BTreeMap::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            if let Some(t) = prefixes.iter().find_map(|p| kernel_thread_ticks(&stat, p)) {
                ticks.insert(pid, t);
            }
        }
        KernelThreadsClock {
            ticks,
            at: Instant::now(),
        }
    }

    /// CPU of the threads present at both readings since `self`, percent of one core.
    pub fn percent_since(&self, now: &KernelThreadsClock) -> f64 {
        let used: u64 = now
            .ticks
            .iter()
            .filter_map(|(pid, t)| Some(t.saturating_sub(*self.ticks.get(pid)?)))
            .sum();
        percent_of_core(
            used as f64 / ticks_per_sec(),
            now.at.duration_since(self.at),
        )
    }
}

/// utime + stime of a `/proc/PID/stat` line whose command name starts with `prefix`.
fn kernel_thread_ticks(stat: &str, prefix: &str) -> Option<u64> {
    let name = &stat[stat.find('(')? + 1..stat.rfind(')')?];
    if !name.starts_with(prefix) {
        return None;
    }
    parse_stat_cpu(stat)
}

/// A process's CPU time and the wall clock, to turn into a CPU share later.
#[derive(Debug, Clone, Copy)]
pub struct CpuClock {
    cpu_seconds: f64,
    at: Instant,
}

impl CpuClock {
    /// Reads process `pid`'s CPU time now.
    pub fn read(pid: u32) -> Result<CpuClock> {
        Ok(CpuClock {
            cpu_seconds: process_cpu_seconds(pid)?,
            at: Instant::now(),
        })
    }

    /// CPU seconds used since `self`, and that in percent of one core.
    pub fn since(&self, now: &CpuClock) -> (f64, f64) {
        let cpu = (now.cpu_seconds - self.cpu_seconds).max(0.0);
        (cpu, percent_of_core(cpu, now.at.duration_since(self.at)))
    }
}

/// `cpu_seconds` used over `wall`, in percent of one core (0 for no time).
fn percent_of_core(cpu_seconds: f64, wall: std::time::Duration) -> f64 {
    let wall = wall.as_secs_f64();
    if wall > 0.0 {
        cpu_seconds * 100.0 / wall
    } else {
        0.0
    }
}

/// Received + transmitted bytes of interface `dev` in namespace `ns`.
pub fn interface_bytes(ns: &Netns, dev: &str) -> Result<u64> {
    let text = ns
        .run_in(|| std::fs::read_to_string("/proc/thread-self/net/dev"))?
        .context("reading /proc/thread-self/net/dev")?;
    match parse_net_dev(&text, dev) {
        Some(b) => Ok(b),
        None => bail!("no interface {dev} in {}'s /proc/net/dev", ns.name()),
    }
}

fn parse_net_dev(text: &str, dev: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (name, counters) = l.split_once(':')?;
        if name.trim() != dev {
            return None;
        }
        let v: Vec<u64> = counters
            .split_whitespace()
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        Some(v.first()? + v.get(8)?)
    })
}

/// Where `ns`'s kernel dropped packets so far: the UDP buffer, port and checksum errors of
/// both families (`/proc/net/snmp`, `/proc/net/snmp6`), IPv6's discards and missing routes,
/// the ICMPv6 unreachables sent and received (`snmp6`), and each interface's receive and
/// transmit drops (`/proc/net/dev`), keyed `NS/counter` and `NS/IFACE rx_drop|tx_drop`.
pub fn drop_counters(ns: &Netns) -> Result<BTreeMap<String, u64>> {
    let read = |f: &'static str| {
        ns.run_in(move || std::fs::read_to_string(format!("/proc/thread-self/net/{f}")))?
            .with_context(|| format!("reading {}'s /proc/net/{f}", ns.name()))
    };
    // `g64-tload-PID-N` -> `tload`: the same keys in every run.
    let role = ns.name().split('-').nth(1).unwrap_or(ns.name());
    let mut out = BTreeMap::new();
    for (name, v) in parse_snmp_drops(&read("snmp")?, &read("snmp6")?)
        .into_iter()
        .chain(parse_dev_drops(&read("dev")?))
    {
        out.insert(format!("{role}/{name}"), v);
    }
    Ok(out)
}

/// IPv6's own drops, and the unreachables that tell a sender its packet went nowhere.
const IP6_DROPS: [&str; 7] = [
    "Ip6InDiscards",
    "Ip6OutDiscards",
    "Ip6InNoRoutes",
    "Ip6OutNoRoutes",
    "Ip6InAddrErrors",
    "Icmp6InDestUnreachs",
    "Icmp6OutDestUnreachs",
];

/// `UdpRcvbufErrors`, `UdpSndbufErrors`, `UdpNoPorts` and `UdpInErrors` (the two-line table
/// of `snmp`), their `Udp6` twins and [`IP6_DROPS`] (one `name value` per line in `snmp6`).
fn parse_snmp_drops(snmp: &str, snmp6: &str) -> Vec<(String, u64)> {
    const WANTED: [&str; 4] = ["RcvbufErrors", "SndbufErrors", "NoPorts", "InErrors"];
    let mut out = Vec::new();
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    if let (Some(names), Some(values)) = (udp.next(), udp.next()) {
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let (true, Ok(v)) = (WANTED.contains(&n), v.parse()) {
                out.push((format!("Udp{n}"), v));
            }
        }
    }
    for l in snmp6.lines() {
        let mut f = l.split_whitespace();
        if let (Some(n), Some(v)) = (f.next(), f.next()) {
            let wanted = IP6_DROPS.contains(&n)
                || n.strip_prefix("Udp6")
                    .is_some_and(|rest| WANTED.contains(&rest));
            if let (true, Ok(v)) = (wanted, v.parse()) {
                out.push((n.to_owned(), v));
            }
        }
    }
    out
}

/// Each interface's receive and transmit drops (fields 4 and 12 of `/proc/net/dev`).
fn parse_dev_drops(text: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for l in text.lines() {
        let Some((name, counters)) = l.split_once(':') else {
            continue;
        };
        let v: Vec<u64> = counters
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        if let (Some(&rx), Some(&tx)) = (v.get(3), v.get(11)) {
            out.push((format!("{} rx_drop", name.trim()), rx));
            out.push((format!("{} tx_drop", name.trim()), tx));
        }
    }
    out
}

/// What grew from `before` to `after`, leaving out what did not.
pub fn grown(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(k, &a)| {
            let d = a.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snmp_drops_of_both_families() {
        let snmp = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 10 2 3 9 3 1\nUdpLite: InDatagrams\nUdpLite: 0\n";
        let snmp6 = "Ip6InReceives 40\nIp6OutNoRoutes 6\nIcmp6OutDestUnreachs 2\n\
                     Icmp6OutEchoReplies 8\nUdp6InDatagrams                 \t5\n\
                     Udp6NoPorts 1\nUdp6RcvbufErrors                \t7\n\
                     Udp6SndbufErrors 0\nUdpLite6RcvbufErrors 4\n";
        let got = parse_snmp_drops(snmp, snmp6);
        assert_eq!(
            got,
            [
                ("UdpNoPorts".to_owned(), 2),
                ("UdpInErrors".to_owned(), 3),
                ("UdpRcvbufErrors".to_owned(), 3),
                ("UdpSndbufErrors".to_owned(), 1),
                ("Ip6OutNoRoutes".to_owned(), 6),
                ("Icmp6OutDestUnreachs".to_owned(), 2),
                ("Udp6NoPorts".to_owned(), 1),
                ("Udp6RcvbufErrors".to_owned(), 7),
                ("Udp6SndbufErrors".to_owned(), 0),
            ]
        );
        assert!(parse_snmp_drops("garbage", "Udp6RcvbufErrors x\n").is_empty());
    }

    #[test]
    fn interface_drops_and_what_grew() {
        let dev = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame \
                   compressed multicast|bytes packets errs drop fifo colls carrier compressed\n\
                   tun0: 100 2 0 5 0 0 0 0 200 3 0 9 0 0 0 0\n";
        let drops = parse_dev_drops(dev);
        assert_eq!(
            drops,
            [
                ("tun0 rx_drop".to_owned(), 5),
                ("tun0 tx_drop".to_owned(), 9)
            ]
        );
        let before: BTreeMap<String, u64> = drops.into_iter().collect();
        let mut after = before.clone();
        after.insert("tun0 tx_drop".to_owned(), 12);
        assert_eq!(
            grown(&before, &after),
            BTreeMap::from([("tun0 tx_drop".to_owned(), 3)])
        );
    }

    #[test]
    fn stat_with_spaces_in_the_name() {
        let stat = "42 (gate64 w) x) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0";
        assert_eq!(parse_stat_cpu(stat), Some(300));
        assert_eq!(parse_stat_cpu("garbage"), None);
        let napi = "77 (napi/gate64-8193) S 2 0 0 0 -1 0 0 0 0 0 40 60 0 0 20 0 1 0 5 0 0";
        assert_eq!(kernel_thread_ticks(napi, "napi/gate64-"), Some(100));
        assert_eq!(kernel_thread_ticks(napi, "napi/vcorp-"), None);
    }

    #[test]
    fn own_process_figures_are_readable() {
        let pid = std::process::id();
        assert!(process_rss_bytes(pid).unwrap() > 0);
        assert!(process_cpu_seconds(pid).unwrap() >= 0.0);
        assert_eq!(parse_vmrss("VmRSS:\t  1024 kB\n"), Some(1024 * 1024));
    }

    #[test]
    fn machine_load_counts_softirq() {
        let a = parse_proc_stat("cpu  100 0 100 700 0 0 100 0 0 0\ncpu0 1\n").unwrap();
        let b = parse_proc_stat("cpu  200 0 200 800 0 0 200 0 0 0\ncpu0 1\n").unwrap();
        let load = MachineLoad::between(a, b, 2);
        assert!((load.busy_percent - 150.0).abs() < 1e-9, "{load:?}");
        assert!((load.softirq_percent - 50.0).abs() < 1e-9, "{load:?}");
    }

    #[test]
    fn net_dev_sums_both_directions() {
        let text =
            "Inter-|   Receive\n face |bytes\n  vcorp: 1000 5 0 0 0 0 0 0 2000 6 0 0 0 0 0 0\n";
        assert_eq!(parse_net_dev(text, "vcorp"), Some(3000));
        assert_eq!(parse_net_dev(text, "lo"), None);
    }
}
