//! Round trips through each client's tunnels (`probe` in SPEC.json): once a client is up, a
//! UDP datagram from its inner address to each target's echo port every `interval_ms`,
//! queued like a packet read from the TUN device (so it is sealed in the child SA whose
//! selectors hold the target); the echo, opened by that SA, is recognised and not written
//! to the device.
//!
//! Per client, [`Track`] keeps when each target last answered and the longest wait between
//! two answers of one target since the measuring window started (the run's start, or the
//! last SIGUSR1). A client's gap is that longest wait or, if longer, the silence now (a
//! target that stopped answering). [`summarize`] makes the distribution over the clients
//! for STATUS.json: how many were measured, how many never had an answer from every
//! target, how many are silent now, and the gaps' minimum, quantiles and maximum.

pub use super::spec::MAX_PROBE_TARGETS as MAX_TARGETS;
use super::spec::ProbeSpec;
use crate::bench::spec::Status;
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The UDP source port of every probe (the echo comes back to it).
pub const SOURCE_PORT: u16 = 47007;
/// Bytes of IPv6 header, UDP header and payload (the sequence number).
pub const PROBE_LEN: usize = 40 + 8 + 8;

/// One client's answers, in milliseconds since the run's start.
#[derive(Default)]
pub struct Track {
    /// When each target last answered, plus one (0: never).
    last: [AtomicU64; MAX_TARGETS],
    /// The longest wait between two answers of one target in the window.
    longest: AtomicU64,
}

/// A client's gap, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// Some target has not answered yet.
    Never,
    /// Every target answered: the longest wait (`gap`) and the silence now (`silent`).
    Measured { gap: u64, silent: u64 },
}

impl Track {
    /// Target `target` answered at `now_ms`; an index past [`MAX_TARGETS`] is ignored.
    pub fn answered(&self, target: usize, now_ms: u64) {
        let Some(last) = self.last.get(target) else {
            return;
        };
        let previous = last.swap(now_ms + 1, Relaxed);
        if let Some(wait) = (now_ms + 1).checked_sub(previous).filter(|_| previous > 0) {
            self.longest.fetch_max(wait, Relaxed);
        }
    }

    /// Starts a new window: waits before it no longer count (a silence that lasts into it
    /// does, from its start).
    pub fn reset(&self) {
        self.longest.store(0, Relaxed);
    }

    /// The gap at `now_ms` over the first `targets` targets.
    pub fn gap(&self, targets: usize, now_ms: u64) -> Gap {
        let mut silent = 0u64;
        for last in self.last.iter().take(targets.clamp(1, MAX_TARGETS)) {
            match last.load(Relaxed) {
                0 => return Gap::Never,
                at => silent = silent.max((now_ms + 1).saturating_sub(at)),
            }
        }
        Gap::Measured {
            gap: self.longest.load(Relaxed).max(silent),
            silent,
        }
    }
}

/// A client is silent when no answer came from some target for this long: two intervals
/// and a second (an echo may be lost, or late on a loaded machine).
pub fn silent_after_ms(spec: &ProbeSpec) -> u64 {
    2 * spec.interval_ms + 1000
}

/// Writes the probe from `src` to `dst:port` with sequence number `seq` into `out`
/// (cleared first).
pub fn build(out: &mut Vec<u8>, src: Ipv6Addr, dst: Ipv6Addr, port: u16, seq: u64) {
    out.clear();
    out.resize(PROBE_LEN, 0);
    let udp_len = (PROBE_LEN - 40) as u16;
    // Both writes fit: the buffer has the exact length they need.
    let _ = gate64_wire::ipv6::emit_header(out, udp_len, gate64_wire::ipv6::NH_UDP, 64, &src, &dst);
    if let Some(dgram) = out.get_mut(40..) {
        if let Some(payload) = dgram.get_mut(8..16) {
            payload.copy_from_slice(&seq.to_be_bytes());
        }
        let _ = gate64_wire::udp::emit_over_v6(dgram, (&src, &dst), SOURCE_PORT, port);
    }
}

/// Which target `packet` (IPv6, opened by a client's SA) is the echo of: UDP from the
/// target's echo port to [`SOURCE_PORT`].
pub fn echo_of(spec: &ProbeSpec, packet: &[u8]) -> Option<usize> {
    let p = gate64_wire::ipv6::Packet::new_checked(packet).ok()?;
    if p.next_header() != gate64_wire::ipv6::NH_UDP {
        return None;
    }
    let (src_port, dst_port) = gate64_wire::udp::peek_ports(p.payload())?;
    if src_port != spec.port || dst_port != SOURCE_PORT {
        return None;
    }
    let src = p.src();
    spec.targets.iter().position(|t| *t == src)
}

/// The distribution of the clients' gaps and what it was made of.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Clients whose every target answered at least once.
    pub measured: u64,
    /// Clients started and not yet answered by every target.
    pub never: u64,
    /// Measured clients silent now ([`silent_after_ms`]).
    pub silent: u64,
    /// Gaps in seconds: minimum, median, 90th and 99th percentile, maximum (0 when none).
    pub quantiles: [f64; 5],
}

/// Summarises `gaps` (reordered), the clients' [`Gap`]s, with `silent_after` milliseconds
/// of silence making a client silent. Quantiles are nearest-rank.
pub fn summarize(gaps: &mut [Gap], silent_after: u64) -> Summary {
    let mut ms: Vec<u64> = Vec::with_capacity(gaps.len());
    let mut s = Summary::default();
    for g in gaps.iter() {
        match *g {
            Gap::Never => s.never += 1,
            Gap::Measured { gap, silent } => {
                ms.push(gap);
                s.silent += u64::from(silent > silent_after);
            }
        }
    }
    ms.sort_unstable();
    s.measured = ms.len() as u64;
    let rank = |q: f64| -> f64 {
        let n = ms.len();
        let i = ((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
        ms.get(i).map_or(0.0, |&v| v as f64 / 1000.0)
    };
    s.quantiles = [rank(0.0), rank(0.5), rank(0.9), rank(0.99), rank(1.0)];
    s
}

/// Writes `summary` into the status' probe fields.
pub fn add_to(status: &mut Status, summary: &Summary) {
    status.probe_clients = summary.measured;
    status.probe_never = summary.never;
    status.probe_silent = summary.silent;
    [
        status.gap_min_seconds,
        status.gap_p50_seconds,
        status.gap_p90_seconds,
        status.gap_p99_seconds,
        status.gap_max_seconds,
    ] = summary.quantiles;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ProbeSpec {
        ProbeSpec {
            targets: vec![
                "2001:db8::2".parse().unwrap(),
                "2001:db8::3".parse().unwrap(),
            ],
            port: 7007,
            interval_ms: 500,
        }
    }

    #[test]
    fn the_gap_is_the_longest_wait_of_any_target_or_the_silence_now() {
        let t = Track::default();
        assert_eq!(t.gap(2, 0), Gap::Never);
        t.answered(0, 1000);
        // Target 1 never answered.
        assert_eq!(t.gap(2, 1100), Gap::Never);
        t.answered(1, 1100);
        t.answered(0, 1500);
        t.answered(1, 1600);
        assert_eq!(
            t.gap(2, 1700),
            Gap::Measured {
                gap: 500,
                silent: 200
            }
        );
        // Target 0 silent for 3.2 s, then back: its wait is the gap.
        t.answered(1, 2100);
        t.answered(0, 4700);
        t.answered(1, 4700);
        assert_eq!(
            t.gap(2, 4800),
            Gap::Measured {
                gap: 3200,
                silent: 100
            }
        );
        // Silent for longer than any wait: the silence is the gap.
        assert_eq!(
            t.gap(2, 9700),
            Gap::Measured {
                gap: 5000,
                silent: 5000
            }
        );
        // Out of range targets change nothing.
        t.answered(MAX_TARGETS, 9800);
        assert_eq!(
            t.gap(2, 9700),
            Gap::Measured {
                gap: 5000,
                silent: 5000
            }
        );
    }

    #[test]
    fn a_new_window_forgets_earlier_waits_but_not_a_silence_into_it() {
        let t = Track::default();
        t.answered(0, 0);
        t.answered(0, 4000);
        assert_eq!(
            t.gap(1, 4000),
            Gap::Measured {
                gap: 4000,
                silent: 0
            }
        );
        t.reset();
        t.answered(0, 4500);
        assert_eq!(
            t.gap(1, 4600),
            Gap::Measured {
                gap: 500,
                silent: 100
            }
        );
        // Silent from 4500 across the next reset at 6000 until 7000.
        t.reset();
        t.answered(0, 7000);
        assert_eq!(
            t.gap(1, 7000),
            Gap::Measured {
                gap: 2500,
                silent: 0
            }
        );
    }

    #[test]
    fn the_summary_counts_never_and_silent_and_ranks_the_gaps() {
        let mut gaps: Vec<Gap> = (1..=100)
            .map(|i| Gap::Measured {
                gap: i * 100,
                silent: 0,
            })
            .collect();
        gaps.push(Gap::Never);
        gaps.push(Gap::Measured {
            gap: 20_000,
            silent: 20_000,
        });
        let s = summarize(&mut gaps, 2000);
        assert_eq!((s.measured, s.never, s.silent), (101, 1, 1));
        assert_eq!(s.quantiles, [0.1, 5.1, 9.1, 10.0, 20.0]);
        let empty = summarize(&mut [Gap::Never], 2000);
        assert_eq!((empty.measured, empty.never), (0, 1));
        assert_eq!(empty.quantiles, [0.0; 5]);
    }

    #[test]
    fn a_probe_and_its_echo_are_recognised_and_nothing_else() {
        let spec = spec();
        let inner: Ipv6Addr = "fd00:c1::7".parse().unwrap();
        let mut p = Vec::new();
        build(&mut p, inner, spec.targets[1], spec.port, 9);
        let ip = gate64_wire::ipv6::Packet::new_checked(&p).unwrap();
        assert_eq!((ip.src(), ip.dst()), (inner, spec.targets[1]));
        let udp = gate64_wire::udp::Packet::new_checked(ip.payload()).unwrap();
        let pseudo = gate64_wire::checksum::pseudo_header_v6(
            &inner,
            &spec.targets[1],
            gate64_wire::ipv6::NH_UDP,
            16,
        );
        assert!(udp.verify_checksum(pseudo));
        assert_eq!(udp.payload(), 9u64.to_be_bytes());
        // The probe itself is no echo; the echo (addresses and ports swapped) is target 1's.
        assert_eq!(echo_of(&spec, &p), None);
        let mut echo = Vec::new();
        build(&mut echo, spec.targets[1], inner, SOURCE_PORT, 9);
        // `build` sends from SOURCE_PORT: swap the ports by hand.
        echo[40..42].copy_from_slice(&spec.port.to_be_bytes());
        echo[42..44].copy_from_slice(&SOURCE_PORT.to_be_bytes());
        assert_eq!(echo_of(&spec, &echo), Some(1));
        // From an address that is no target, or truncated: not an echo.
        let mut other = echo.clone();
        other[8] ^= 1;
        assert_eq!(echo_of(&spec, &other), None);
        assert_eq!(echo_of(&spec, &echo[..30]), None);
        assert_eq!(echo_of(&spec, &[]), None);
    }

    #[test]
    fn a_client_is_silent_after_two_intervals_and_a_second() {
        assert_eq!(silent_after_ms(&spec()), 2000);
    }
}
