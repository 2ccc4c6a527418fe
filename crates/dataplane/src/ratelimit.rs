//! Per-address token buckets in a fixed-size table: O(1) per packet, no allocation after
//! creation, and no table a flood of sources can grow. Each worker keeps its own limiters: no
//! sharing, no lock. The kernel spreads a source's flows by 4-tuple hash, so the effective
//! limit per address is at most `workers ×` the configured rate.
//!
//! An address's bucket is the slot its keyed hash selects. Addresses that share a slot share
//! its tokens: a collision can only make the limit stricter, never reset or skip a bucket, so
//! no sequence of other addresses lets one exceed its rate. The hash key (chosen per worker)
//! keeps a sender from aiming its addresses at someone else's slot.

use std::net::Ipv4Addr;
use std::time::Instant;

/// A fixed-size table of token buckets keyed by IPv4 address.
#[derive(Debug)]
pub struct RateLimiter {
    per_sec: f32,
    burst: f32,
    key: u64,
    mask: usize,
    /// Time 0 of the slots' millisecond stamps.
    epoch: Option<Instant>,
    slots: Box<[Slot]>,
}

/// One bucket: tokens left and when they were counted (ms since the epoch, wrapping).
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    tokens: f32,
    stamp_ms: u32,
    used: bool,
}

impl RateLimiter {
    /// `per_sec` tokens per second, at most `burst` saved, in at least `slots` buckets (rounded
    /// up to a power of two), with hash key `key`.
    pub fn new(per_sec: u32, burst: u32, slots: usize, key: u64) -> Self {
        let n = slots.max(1).next_power_of_two();
        RateLimiter {
            per_sec: per_sec.max(1) as f32,
            burst: burst.max(1) as f32,
            key,
            mask: n - 1,
            epoch: None,
            slots: vec![Slot::default(); n].into_boxed_slice(),
        }
    }

    /// Takes one token for `src`; false when it has none left.
    pub fn allow(&mut self, now: Instant, src: Ipv4Addr) -> bool {
        let epoch = *self.epoch.get_or_insert(now);
        // Wrapping milliseconds: a slot idle for 49 days refills less than it may, never more.
        let now_ms = now.saturating_duration_since(epoch).as_millis() as u32;
        let i = self.slot_of(src);
        let (rate, burst) = (self.per_sec, self.burst);
        let slot = &mut self.slots[i];
        let tokens = if slot.used {
            let elapsed = now_ms.wrapping_sub(slot.stamp_ms) as f32 / 1000.0;
            (slot.tokens + elapsed * rate).min(burst)
        } else {
            burst
        };
        slot.used = true;
        slot.stamp_ms = now_ms;
        if tokens >= 1.0 {
            slot.tokens = tokens - 1.0;
            true
        } else {
            slot.tokens = tokens;
            false
        }
    }

    /// The slot of `src`: SplitMix64's finalizer over the keyed address (a bijection on u64,
    /// so distinct addresses differ in every output bit with even odds).
    fn slot_of(&self, src: Ipv4Addr) -> usize {
        let mut z = u64::from(u32::from(src)) ^ self.key;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as usize & self.mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_rate() {
        let mut l = RateLimiter::new(2, 4, 16, 0);
        let t0 = Instant::now();
        let a = Ipv4Addr::new(192, 0, 2, 9);
        let b = Ipv4Addr::new(192, 0, 2, 10);
        assert_ne!(l.slot_of(a), l.slot_of(b), "fixture: no collision");
        assert_eq!((0..10).filter(|_| l.allow(t0, a)).count(), 4);
        assert!(l.allow(t0 + Duration::from_millis(500), a));
        assert!(!l.allow(t0 + Duration::from_millis(500), a));
        // Other sources are unaffected.
        assert!(l.allow(t0, b));
    }

    // Issue 12: the table neither grows nor forgets a flooding source's bucket, however many
    // other sources pass; the work per packet is one slot.
    #[test]
    fn table_is_fixed_size_and_many_sources_do_not_reset_a_bucket() {
        let mut l = RateLimiter::new(1, 2, 64, 7);
        let t0 = Instant::now();
        let a = Ipv4Addr::new(198, 51, 100, 10);
        assert!(l.allow(t0, a) && l.allow(t0, a));
        assert!(!l.allow(t0, a));
        for i in 0..100_000u32 {
            l.allow(t0, Ipv4Addr::from(0x0a00_0000 + i));
        }
        assert_eq!(l.slots.len(), 64);
        assert!(!l.allow(t0, a), "still empty after 100,000 other sources");
        assert!(
            l.allow(t0 + Duration::from_secs(1), a),
            "refilled at its rate"
        );
    }

    #[test]
    fn keys_place_addresses_differently() {
        let a = RateLimiter::new(1, 1, 1 << 16, 1);
        let b = RateLimiter::new(1, 1, 1 << 16, 2);
        let moved = (0..64u32)
            .filter(|i| {
                let ip = Ipv4Addr::from(0xc000_0200 + i);
                a.slot_of(ip) != b.slot_of(ip)
            })
            .count();
        assert!(moved > 60, "{moved}");
    }
}
