//! STATUS.json and its ADDRESSES file: what the harness reads while the generator runs,
//! rewritten atomically (a temporary file renamed over the old one).

use super::fleet::Fleet;
#[cfg(test)]
use super::fleet::Transport;
use super::probe;
use super::underlay::Underlay;
pub use crate::bench::spec::addresses_path;
use crate::bench::spec::{SLOW_UPLINK_MS, Status};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

/// The status now; a client started more than `setup_timeout_secs` ago and not up counts as
/// failed.
pub fn collect(fleet: &Fleet, setup_timeout_secs: u64) -> Status {
    let c = &fleet.counters;
    let now = fleet.epoch.elapsed();
    let mut s = Status {
        clients: fleet.slots.len() as u64,
        teredo_up: c.teredo_up.load(Relaxed),
        iphttps_up: c.iphttps_up.load(Relaxed),
        mmsa: c.mmsa.load(Relaxed),
        qmsa: c.qmsa.load(Relaxed),
        rx_packets: c.rx_packets.load(Relaxed),
        tx_packets: c.tx_packets.load(Relaxed),
        esp_errors: c.esp_errors.load(Relaxed),
        unknown_source: c.unknown_source.load(Relaxed),
        uplink_dropped: c.uplink_dropped.load(Relaxed),
        tun_write_failed: c.tun_write_failed.load(Relaxed),
        session_errors: c.session_errors.load(Relaxed),
        ike_negotiations: c.negotiations.load(Relaxed),
        probe_sent: c.probe_sent.load(Relaxed),
        probe_received: c.probe_received.load(Relaxed),
        uplink_slow: c.uplink_slow.load(Relaxed),
        uplink_longest_wait_ms: c.uplink_longest_wait_ms.load(Relaxed),
        slow_uplinks: (c.slow_uplinks.lock().unwrap_or_else(|e| e.into_inner()))
            .iter()
            .cloned()
            .collect(),
        rss_bytes: rss_bytes(),
        cpu_seconds: cpu_seconds(),
        elapsed_seconds: now.as_secs_f64(),
        ..Status::default()
    };
    let mut pending = 0u64;
    let now_ms = fleet.now_ms();
    let targets = fleet.probe.as_ref().map_or(0, |p| p.targets.len());
    let mut gaps = Vec::with_capacity(if targets > 0 { fleet.slots.len() } else { 0 });
    let waited_long = (now_ms + 1).saturating_sub(SLOW_UPLINK_MS);
    for slot in &fleet.slots {
        s.uplink_waiting += u64::from(slot.uplink_waiting_since(waited_long));
        let Some(at) = slot.started_at() else {
            pending += 1;
            continue;
        };
        s.started += 1;
        if targets > 0 {
            gaps.push(slot.probe.gap(targets, now_ms));
        }
        if slot.is_up() {
            s.up += 1;
        } else if now.as_secs() >= u64::from(at) + setup_timeout_secs {
            s.failed += 1;
        } else {
            pending += 1;
        }
    }
    s.ready = pending == 0;
    if let Some(p) = &fleet.probe {
        probe::add_to(
            &mut s,
            &probe::summarize(&mut gaps, probe::silent_after_ms(p)),
        );
    }
    s
}

/// Adds what the underlay dropped to `s`.
pub fn add_underlay(s: &mut Status, underlay: Option<&Underlay>) {
    if let Some(u) = underlay {
        let c = &u.counters;
        s.underlay_refused = c.malformed.load(Relaxed) + c.unknown_destination.load(Relaxed);
        s.underlay_dropped = c.dropped.load(Relaxed) + c.send_failed.load(Relaxed);
    }
}

/// One line per client with both tunnels up: `<inner IPv6> <teredo|iphttps>`.
pub fn addresses(fleet: &Fleet) -> String {
    let mut out = String::new();
    for (slot, t) in fleet.slots.iter().zip(&fleet.transports) {
        if let (true, Some(inner)) = (slot.is_up(), slot.inner()) {
            let _ = writeln!(out, "{inner} {}", t.label());
        }
    }
    out
}

/// Writes `contents` to `path` through a temporary file renamed over it, so a reader sees
/// the old or the new file, never a part.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, contents).with_context(|| format!("writing {}", path.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))
}

/// This process' resident memory (`VmRSS` of `/proc/self/status`, in kB).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// This process' CPU time, user plus system (`/proc/self/stat` fields 14 and 15, in clock
/// ticks of 1/100 s on Linux).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    cpu_seconds_of(&stat)
}

/// User plus system CPU seconds from a `/proc/PID/stat` line.
fn cpu_seconds_of(stat: &str) -> f64 {
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After ")": state is field 3, so utime (14) and stime (15) are at 11 and 12.
    (tick(11) + tick(12)) as f64 / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_figures_are_read() {
        assert!(rss_bytes() > 0);
        // Spin until the kernel has charged this process a tick more (bounded generously:
        // a loaded machine may give it little CPU).
        let (before, start) = (cpu_seconds(), std::time::Instant::now());
        let mut x = 0_u64;
        while cpu_seconds() <= before && start.elapsed() < std::time::Duration::from_secs(60) {
            for i in 0..100_000_u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
        }
        assert!(cpu_seconds() > before, "no CPU time counted");
    }

    #[test]
    fn cpu_seconds_are_utime_plus_stime_after_the_command_name() {
        // A command name with spaces and a parenthesis; utime 250 and stime 50 ticks.
        let stat = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(cpu_seconds_of(stat), 3.0);
        assert_eq!(cpu_seconds_of("garbage"), 0.0);
    }

    #[test]
    fn nothing_started_is_not_ready_and_rewrites_are_whole() {
        let fleet = Fleet::new(vec![Transport::Teredo; 3], "fd00:c1::/104".parse().unwrap());
        let s = collect(&fleet, 120);
        assert_eq!((s.clients, s.started, s.up, s.failed), (3, 0, 0, 0));
        assert!(!s.ready);
        assert!(addresses(&fleet).is_empty());
        let dir = std::env::temp_dir().join(format!("gate64-load-status-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("status.json");
        write_atomically(&path, b"{\"a\":1}").unwrap();
        write_atomically(&path, b"{}").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
