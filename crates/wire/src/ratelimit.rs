//! Per-address token buckets (IPv4 or IPv6) in a fixed-size table: O(1) per packet, no allocation after
//! creation, and no table a flood of sources can grow. Sans-IO (`now` is a parameter), used
//! by every per-source bound: the data plane's RS, relay and IKE limits (each worker keeps
//! its own limiters: no sharing, no lock; the kernel spreads a source's flows by 4-tuple
//! hash, so the effective limit per address is at most `workers ×` the configured rate), the
//! IKE driver's shedding and the IKE responder's QCD answers.
//!
//! An address's bucket is the slot its keyed hash selects. Addresses that share a slot share
//! its tokens: a collision can only make the limit stricter, never reset or skip a bucket, so
//! no sequence of other addresses lets one exceed its rate. The hash key (chosen per worker)
//! keeps a sender from aiming its addresses at someone else's slot.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

/// A fixed-size table of token buckets keyed by source address.
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
        self.allow_key(now, u64::from(u32::from(src)))
    }

    /// Takes one token for the IPv6 source `src`; false when it has none left. The upper half
    /// goes through the keyed mix before the lower half joins it, so a sender who picks both
    /// halves still cannot aim at another address's slot.
    pub fn allow_v6(&mut self, now: Instant, src: Ipv6Addr) -> bool {
        let bits = u128::from(src);
        let folded = mix((bits >> 64) as u64 ^ self.key.rotate_left(32)) ^ bits as u64;
        self.allow_key(now, folded)
    }

    /// Takes one token for the source named by `id`; false when it has none left.
    fn allow_key(&mut self, now: Instant, id: u64) -> bool {
        let epoch = *self.epoch.get_or_insert(now);
        // Wrapping milliseconds: a slot idle for 49 days refills less than it may, never more.
        let now_ms = now.saturating_duration_since(epoch).as_millis() as u32;
        let i = self.slot_of(id);
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

    /// The slot of source `id`: SplitMix64's finalizer over the keyed id (a bijection on u64,
    /// so distinct addresses differ in every output bit with even odds).
    fn slot_of(&self, id: u64) -> usize {
        mix(id ^ self.key) as usize & self.mask
    }
}

/// SplitMix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn v4(a: Ipv4Addr) -> u64 {
        u64::from(u32::from(a))
    }

    #[test]
    fn burst_then_rate() {
        let mut l = RateLimiter::new(2, 4, 16, 0);
        let t0 = Instant::now();
        let a = Ipv4Addr::new(192, 0, 2, 9);
        let b = Ipv4Addr::new(192, 0, 2, 10);
        assert_ne!(l.slot_of(v4(a)), l.slot_of(v4(b)), "fixture: no collision");
        assert_eq!((0..10).filter(|_| l.allow(t0, a)).count(), 4);
        assert!(l.allow(t0 + Duration::from_millis(500), a));
        assert!(!l.allow(t0 + Duration::from_millis(500), a));
        // Other sources are unaffected.
        assert!(l.allow(t0, b));
    }

    // The table neither grows nor forgets a flooding source's bucket, however many
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
                a.slot_of(v4(ip)) != b.slot_of(v4(ip))
            })
            .count();
        assert!(moved > 60, "{moved}");
    }

    // IPv6 sources (the IKE limits): one bucket per address, whatever the other addresses
    // of its /64 do, and the upper half alone does not pick the slot.
    #[test]
    fn ipv6_sources_have_their_own_buckets() {
        let mut l = RateLimiter::new(1, 3, 1 << 16, 11);
        let t0 = Instant::now();
        let a: Ipv6Addr = "2001:db8:100:1::2".parse().expect("address");
        assert_eq!((0..10).filter(|_| l.allow_v6(t0, a)).count(), 3);
        let neighbours = (3..200u128).map(|i| Ipv6Addr::from(u128::from(a) + i));
        assert!(
            neighbours.filter(|n| l.allow_v6(t0, *n)).count() >= 190,
            "addresses of the same /64 collide only by chance"
        );
        assert!(!l.allow_v6(t0, a), "a's bucket is still empty");
        assert!(l.allow_v6(t0 + Duration::from_secs(1), a));
    }
}
