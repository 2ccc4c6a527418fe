//! Per-source token buckets for Router Solicitations. Each worker keeps its own table: no
//! sharing, no lock. The kernel spreads a source's flows by 4-tuple hash, so the effective
//! limit per source address is at most `workers ×` the configured rate.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Instant;

/// A bounded table of token buckets keyed by source address.
#[derive(Debug)]
pub struct RateLimiter {
    per_sec: f64,
    burst: f64,
    cap: usize,
    buckets: HashMap<Ipv4Addr, (f64, Instant)>,
}

impl RateLimiter {
    /// `per_sec` tokens per second, at most `burst` saved, at most `cap` sources tracked.
    pub fn new(per_sec: u32, burst: u32, cap: usize) -> Self {
        RateLimiter {
            per_sec: f64::from(per_sec.max(1)),
            burst: f64::from(burst.max(1)),
            cap: cap.max(1),
            buckets: HashMap::new(),
        }
    }

    /// Takes one token for `src`; false when it has none left.
    pub fn allow(&mut self, now: Instant, src: Ipv4Addr) -> bool {
        if self.buckets.len() >= self.cap && !self.buckets.contains_key(&src) {
            // Full: forget buckets that have refilled completely (they hold no information).
            let (rate, burst) = (self.per_sec, self.burst);
            self.buckets.retain(|_, (tokens, t)| {
                *tokens + now.saturating_duration_since(*t).as_secs_f64() * rate < burst
            });
            if self.buckets.len() >= self.cap {
                return false;
            }
        }
        let (tokens, last) = self.buckets.entry(src).or_insert((self.burst, now));
        let refill = now.saturating_duration_since(*last).as_secs_f64() * self.per_sec;
        *tokens = (*tokens + refill).min(self.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_rate() {
        let mut l = RateLimiter::new(2, 4, 16);
        let t0 = Instant::now();
        let a = Ipv4Addr::new(192, 0, 2, 9);
        assert_eq!((0..10).filter(|_| l.allow(t0, a)).count(), 4);
        assert!(l.allow(t0 + Duration::from_millis(500), a));
        assert!(!l.allow(t0 + Duration::from_millis(500), a));
        // Other sources are unaffected.
        assert!(l.allow(t0, Ipv4Addr::new(192, 0, 2, 10)));
    }

    #[test]
    fn table_is_bounded() {
        let mut l = RateLimiter::new(1, 1, 2);
        let t0 = Instant::now();
        assert!(l.allow(t0, Ipv4Addr::new(1, 0, 0, 1)));
        assert!(l.allow(t0, Ipv4Addr::new(1, 0, 0, 2)));
        assert!(
            !l.allow(t0, Ipv4Addr::new(1, 0, 0, 3)),
            "full of active sources"
        );
        assert!(
            l.allow(t0 + Duration::from_secs(5), Ipv4Addr::new(1, 0, 0, 3)),
            "refilled ones evicted"
        );
    }
}
