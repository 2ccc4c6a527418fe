//! The IP-HTTPS /64 lease-back: `server::solicitation_interface_id` on an arbitrary first
//! packet, and `PrefixPool` (allocate, claim, release) driven by a program over a 16-/64 pool
//! with short bounds, a 16-/64 HA peer prefix beside it, a forward-only clock and hints of
//! several ages. Checks that
//! no /64 is held by two links, that a claim moves a link only to a /64 of the pool or the
//! peer's prefix that no link holds, that allocate never hands out one of the peer's, and the
//! binding bound.
#![no_main]

use gate64_iphttps::pool::{Claim, Hint, PrefixPool};
use gate64_iphttps::server::solicitation_interface_id;
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

const MAX_RELEASED: usize = 4;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let (program, packet) = rest.split_at(usize::from(split).min(rest.len()));
    let from_packet = solicitation_interface_id(packet);
    let base: Ipv6Addr = "2001:db8:1:f0::".parse().expect("literal");
    let peer: Ipv6Addr = "2001:db8:1:100::".parse().expect("literal");
    let Ok(mut pool) = PrefixPool::with_bounds(base, 60, Duration::from_secs(8), MAX_RELEASED)
        .and_then(|p| p.with_peer(peer, 60))
    else {
        return;
    };
    let in_own = |p: Ipv6Addr| u128::from(p) >> 68 == u128::from(base) >> 68;
    let in_peer = |p: Ipv6Addr| u128::from(p) >> 68 == u128::from(peer) >> 68;
    let mut now = Instant::now();
    let mut held: Vec<Ipv6Addr> = Vec::new();
    for op in program.chunks(2) {
        let (a, b) = (op[0], op.get(1).copied().unwrap_or(0));
        match a % 4 {
            0 => {
                if let Some(p) = pool.allocate() {
                    assert!(!held.contains(&p), "{p} handed out twice");
                    assert!(in_own(p), "{p} allocated outside the pool");
                    held.push(p);
                }
            }
            1 if !held.is_empty() => {
                let p = held.swap_remove(usize::from(b) % held.len());
                assert!(pool.release(p, now));
            }
            2 if !held.is_empty() => {
                let i = usize::from(b) % held.len();
                let iid = from_packet
                    .filter(|_| a & 8 != 0)
                    .unwrap_or(u64::from(b % 8) + 1);
                // Hints inside and outside the pool and the peer's prefix.
                let from = if a & 32 != 0 { peer } else { base };
                // Hints first published up to 3 s ago, older or newer than a binding.
                let since = now
                    .checked_sub(Duration::from_secs(u64::from(a >> 6)))
                    .unwrap_or(now);
                let hint = (a & 16 != 0).then(|| Hint {
                    prefix: Ipv6Addr::from(u128::from(from) + (u128::from(b % 20) << 64)),
                    since,
                });
                match pool.claim(held[i], iid, hint, now) {
                    Claim::Reclaimed(p) => {
                        assert!(!held.contains(&p), "{p} claimed while held");
                        assert!(in_own(p) || in_peer(p), "{p}");
                        held[i] = p;
                    }
                    Claim::Kept | Claim::InUse => {}
                }
            }
            _ => now += Duration::from_secs(u64::from(b % 16)),
        }
        let distinct: HashSet<_> = held.iter().collect();
        assert_eq!(distinct.len(), held.len());
        assert_eq!(pool.in_use(), held.len());
        assert!(pool.bindings() <= held.len() + MAX_RELEASED);
    }
});
