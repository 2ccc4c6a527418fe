//! A session's policy as the data path enforces it on every child SA of an IKE SA: the
//! addresses it may reach on the corporate side (narrower than its tunnel's selectors) and
//! a rate limit per direction.
//!
//! The rate limit is a token bucket in its GCRA form (the "virtual scheduling" of ITU-T
//! I.371): one `AtomicU64`, the theoretical arrival time of the next byte, advanced by each
//! admitted packet's cost. A packet is admitted while that time runs at most the burst
//! tolerance ahead of now. Several workers may admit packets of one SA at once: a
//! compare-and-swap loop on the one word, no lock.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::selector::{Selector, any_covers};

/// The least burst a limit lets through at once: 50 ms at its rate, and never less than
/// 64 KiB, so a TCP window's worth of back-to-back segments is not cut at low rates.
const MIN_BURST: Duration = Duration::from_millis(50);
/// Bytes always allowed in one burst.
const MIN_BURST_BYTES: u64 = 64 * 1024;

/// A byte rate limit for one direction of a session: lock-free, shared by every worker.
#[derive(Debug)]
pub struct RateLimit {
    /// The rate in Mbit/s, as configured (at least 1).
    mbps: u32,
    /// Nanoseconds one byte costs at the rate, times 1,024 (fixed point).
    ns_per_kbyte: u64,
    /// How far the bucket's clock may run ahead of now, in nanoseconds.
    tolerance: u64,
    /// Time 0 of `tat`.
    epoch: Instant,
    /// Theoretical arrival time of the next byte, in nanoseconds since `epoch`.
    tat: AtomicU64,
}

impl RateLimit {
    /// A limit of `mbps` megabits per second (10^6 bit/s), at least 1.
    pub fn new(mbps: u32, epoch: Instant) -> RateLimit {
        // 1 Mbit/s = one bit per microsecond: a byte costs 8,000 ns / mbps.
        let ns_per_kbyte = 8_000 * 1024 / u64::from(mbps.max(1));
        let tolerance = (MIN_BURST.as_nanos() as u64).max(MIN_BURST_BYTES * ns_per_kbyte / 1024);
        RateLimit {
            mbps: mbps.max(1),
            ns_per_kbyte,
            tolerance,
            epoch,
            tat: AtomicU64::new(0),
        }
    }

    /// The rate in Mbit/s.
    pub fn mbps(&self) -> u32 {
        self.mbps
    }

    /// Takes `bytes` from the bucket at `now`; false (and nothing taken) when the bucket
    /// holds too few.
    pub fn allow(&self, now: Instant, bytes: usize) -> bool {
        let now = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        let cost = (bytes as u64).saturating_mul(self.ns_per_kbyte) / 1024;
        let mut tat = self.tat.load(Relaxed);
        loop {
            let base = tat.max(now);
            if base - now > self.tolerance {
                return false;
            }
            match self
                .tat
                .compare_exchange_weak(tat, base.saturating_add(cost), Relaxed, Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }
}

/// What a session's policy allows, as every child SA of its IKE SA carries it
/// ([`crate::SaDb::apply_policy`]).
#[derive(Debug)]
pub struct SessionPolicy {
    /// The policy's name (for `gate64 status` and logs).
    pub name: String,
    /// The corporate addresses the session may reach, of both families. A packet must be
    /// inside its SA's selectors too: the session reaches their intersection.
    pub reach: Vec<Selector>,
    /// Limit on what the client sends (ESP opened from it).
    pub from_client: Option<RateLimit>,
    /// Limit on what gate64 sends it (ESP sealed to it).
    pub to_client: Option<RateLimit>,
}

impl SessionPolicy {
    /// A policy named `name` reaching `reach`, limited to `rate_mbps` each way when given.
    pub fn new(
        name: String,
        reach: Vec<Selector>,
        rate_mbps: Option<u32>,
        epoch: Instant,
    ) -> SessionPolicy {
        SessionPolicy {
            name,
            reach,
            from_client: rate_mbps.map(|r| RateLimit::new(r, epoch)),
            to_client: rate_mbps.map(|r| RateLimit::new(r, epoch)),
        }
    }

    /// The rate limit in Mbit/s, when one applies (the same each way).
    pub fn rate_mbps(&self) -> Option<u32> {
        self.from_client
            .as_ref()
            .or(self.to_client.as_ref())
            .map(RateLimit::mbps)
    }

    /// Whether the corporate address `addr` (a packet's destination from the client, or
    /// source towards it) is one the session may reach.
    pub fn reaches(&self, addr: IpAddr) -> bool {
        any_covers(&self.reach, addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_the_burst_then_the_rate() {
        let t0 = Instant::now();
        // 8 Mbit/s = 1 byte per microsecond; burst tolerance 65,536 us.
        let r = RateLimit::new(8, t0);
        let mut sent = 0;
        while r.allow(t0, 1000) {
            sent += 1000;
            assert!(sent < 1_000_000, "never refused");
        }
        assert!((65_000..=68_000).contains(&sent), "burst {sent}");
        // Over one more second, about 1,000,000 bytes more.
        let mut later = 0;
        for ms in 1..=1000u64 {
            let now = t0 + Duration::from_millis(ms);
            while r.allow(now, 1000) {
                later += 1000;
            }
        }
        assert!((990_000..=1_010_000).contains(&later), "{later} in 1 s");
    }

    #[test]
    fn refusal_takes_nothing_and_idle_time_refills_only_the_burst() {
        let t0 = Instant::now();
        let r = RateLimit::new(1, t0);
        while r.allow(t0, 1500) {}
        assert!(!r.allow(t0, 1), "empty");
        // An hour idle: the burst again, not an hour's worth.
        let t1 = t0 + Duration::from_secs(3600);
        let mut sent = 0usize;
        while r.allow(t1, 1500) {
            sent += 1500;
        }
        assert!(sent <= 2 * 65_536, "{sent}");
        // A time before the epoch counts as the epoch (never panics).
        let early = RateLimit::new(100, t1);
        assert!(early.allow(t0, 1500));
        assert!(RateLimit::new(u32::MAX, t0).allow(t0, usize::MAX));
    }

    #[test]
    fn shared_between_threads_admits_the_rate_once() {
        let t0 = Instant::now();
        let r = std::sync::Arc::new(RateLimit::new(8, t0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let r = std::sync::Arc::clone(&r);
                std::thread::spawn(move || (0..1000).filter(|_| r.allow(t0, 100)).count())
            })
            .collect();
        let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        // 65,536 us of tolerance at 1 byte/us: 655 or 656 packets of 100 bytes in all.
        assert!((655..=657).contains(&total), "{total}");
    }

    #[test]
    fn reach_covers_both_families() {
        let p = SessionPolicy::new(
            "contractors".into(),
            vec![
                Selector::prefix("fd00:c1::10/128".parse().unwrap()),
                Selector::prefix("10.1.0.0/16".parse().unwrap()),
            ],
            None,
            Instant::now(),
        );
        assert!(p.reaches("fd00:c1::10".parse().unwrap()));
        assert!(!p.reaches("fd00:c1::11".parse().unwrap()));
        assert!(p.reaches("10.1.2.3".parse().unwrap()));
        assert!(!p.reaches("10.2.0.1".parse().unwrap()));
        assert!(p.from_client.is_none() && p.to_client.is_none());
        assert_eq!(p.rate_mbps(), None);
        let limited = SessionPolicy::new("slow".into(), Vec::new(), Some(2), Instant::now());
        assert_eq!(limited.rate_mbps(), Some(2));
        assert_eq!(RateLimit::new(0, Instant::now()).mbps(), 1, "at least 1");
    }
}
