//! The per-client /64s: handed out fresh first, released ones reused FIFO, and a link's /64
//! given back to the same client when it reconnects ([`PrefixPool::claim`]).
//!
//! A client is known by the interface id of its first Router Solicitation's link-local source
//! (`fe80::<iid>`): a client that keeps its interface id across reconnects (`gate64 connect
//! iphttps` does, Windows' IP-HTTPS interface does) forms the same address in the same /64.
//! The pool remembers which interface id each /64 served ("bindings") and, when a link's
//! first solicitation names an interface id bound to another /64 that no link holds, moves
//! the link to that /64. On a standby that took over the client's IPsec SAs there is no
//! binding yet: the caller passes a hint instead (the /64 of a synced IKE SA's remote
//! address with that interface id, and when the peer made that IKE SA), used the same way.
//! Of a binding and a hint the newer wins ([`PrefixPool::claim`]): a client that took its
//! /64 here and then negotiated on the peer gets the peer's /64, also while this node still
//! holds the link the client left without a word.
//!
//! The HA peer's prefix ([`PrefixPool::with_peer`]): two active nodes behind ECMP, each the
//! other's `[ha]` peer, hand out /64s of their own prefixes. When one dies its clients
//! reconnect to the other, whose pool also knows the dead node's prefix: a /64 of it is
//! leased only by a claim whose hint names it (a synced IKE SA of the peer's with that
//! interface id), or later by the binding that claim made; never by [`PrefixPool::allocate`],
//! and a released one never queues for reuse.
//!
//! Safety: a /64 is given back only when no link holds it: a host claiming another client's
//! interface id while that client is up here gets a fresh /64 and no binding (or, when the HA
//! peer has seen the interface id since, the peer's /64, which no link here holds).
//!
//! Bounds: one binding per /64 a link holds, plus at most [`MAX_RELEASED_BINDINGS`] of
//! released /64s, each kept at most [`RELEASED_HOLD`] and dropped as soon as the /64 goes to
//! another link.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

/// How long the binding of a released /64 is kept: a client reconnecting within this gets
/// it back (unless the pool gave the /64 to another link meanwhile). Covers the client's
/// reconnect backoff (at most 60 s for `gate64 connect`) and a short loss of its network.
pub const RELEASED_HOLD: Duration = Duration::from_secs(600);
/// Most bindings of released /64s kept at once; the oldest goes first. Live links hold one
/// binding each besides (bounded by `limits.max_iphttps_connections`).
pub const MAX_RELEASED_BINDINGS: usize = 65_536;

/// Hands out per-client /64s from the configured pool. Never-used prefixes go first; released
/// ones queue up (FIFO) behind them, so a prefix just released is reused as late as possible
/// and a reconnecting client's old address does not reach another client at once.
#[derive(Debug, Clone)]
pub struct PrefixPool {
    /// The pool's upper 64 bits.
    base: u64,
    /// Number of /64s in the pool (up to 2^64).
    size: u128,
    /// Index of the next never-used /64.
    fresh: u128,
    /// Released /64s in release order, each once; one a link claimed back since is skipped.
    free: VecDeque<u64>,
    /// The /64s in `free`.
    queued: HashSet<u64>,
    in_use: HashSet<u64>,
    /// Interface id → the /64 it was last seen on.
    by_iid: HashMap<u64, u64>,
    /// /64 → its binding (the inverse of `by_iid`).
    by_prefix: HashMap<u64, Binding>,
    /// Released bound /64s, oldest first, with when they were released.
    released: VecDeque<(u64, Instant)>,
    hold: Duration,
    max_released: usize,
    /// The HA peer's prefix (upper 64 bits, number of /64s): leased only by a claim.
    peer: Option<(u64, u128)>,
}

#[derive(Debug, Clone, Copy)]
struct Binding {
    iid: u64,
    /// When a link last took the /64 for the interface id.
    bound: Instant,
    /// When the /64 was released; `None` while a link holds it.
    released: Option<Instant>,
}

/// The pool prefix is longer than /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("IP-HTTPS pool prefix /{0} is longer than /64")]
pub struct PrefixTooLong(pub u8);

/// A /64 the caller knows an interface id used elsewhere (e.g. the remote address of an IKE
/// SA synced from the HA peer), and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    /// An address in the /64 (its lower 64 bits ignored).
    pub prefix: Ipv6Addr,
    /// When the interface id was last known to use it, e.g. when the peer made the newest
    /// IKE SA naming it: a binding a link here took before then is older news.
    pub since: Instant,
}

/// What [`PrefixPool::claim`] decided for a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The link keeps the /64 it holds (no other /64 is bound to the interface id, or it is
    /// that one); the /64 is now bound to the interface id.
    Kept,
    /// The link moves to this /64, bound to the interface id and held by no link; the one it
    /// held goes back to the pool.
    Reclaimed(Ipv6Addr),
    /// The /64 bound to the interface id is held by another link: the link keeps its own and
    /// nothing is bound.
    InUse,
}

impl PrefixPool {
    /// A pool over `prefix/len` (`len` ≤ 64; host bits of `prefix` are ignored). E.g.
    /// `2001:db8:1::/48` holds 65536 /64s.
    pub fn new(prefix: Ipv6Addr, len: u8) -> Result<Self, PrefixTooLong> {
        Self::with_bounds(prefix, len, RELEASED_HOLD, MAX_RELEASED_BINDINGS)
    }

    /// [`PrefixPool::new`] keeping the bindings of released /64s for `hold`, at most `max`.
    pub fn with_bounds(
        prefix: Ipv6Addr,
        len: u8,
        hold: Duration,
        max: usize,
    ) -> Result<Self, PrefixTooLong> {
        let (base, size) = span(prefix, len)?;
        Ok(PrefixPool {
            base,
            size,
            fresh: 0,
            free: VecDeque::new(),
            queued: HashSet::new(),
            in_use: HashSet::new(),
            by_iid: HashMap::new(),
            by_prefix: HashMap::new(),
            released: VecDeque::new(),
            hold,
            max_released: max,
            peer: None,
        })
    }

    /// The pool also takes back /64s of `prefix/len`, the HA peer's pool (`len` ≤ 64; host
    /// bits ignored): only by a [`PrefixPool::claim`] whose hint names one, or by the binding
    /// such a claim made; [`PrefixPool::allocate`] never hands one out. The caller keeps it
    /// apart from this pool's own prefix (the configuration check does).
    pub fn with_peer(mut self, prefix: Ipv6Addr, len: u8) -> Result<Self, PrefixTooLong> {
        let (base, size) = span(prefix, len)?;
        self.peer = Some((base, size));
        Ok(self)
    }

    /// A free /64 (its first address), or `None` when all are in use. A /64 bound to an
    /// interface id loses its binding.
    pub fn allocate(&mut self) -> Option<Ipv6Addr> {
        let hi = self.next_free()?;
        self.in_use.insert(hi);
        self.unbind(hi);
        Some(Ipv6Addr::from(u128::from(hi) << 64))
    }

    fn next_free(&mut self) -> Option<u64> {
        while self.fresh < self.size {
            // fresh < size ≤ 2^64, so it fits; base has zero bits where the index goes.
            let hi = self.base | self.fresh as u64;
            self.fresh += 1;
            // One claimed back out of order (a hint) is skipped here.
            if !self.in_use.contains(&hi) && !self.queued.contains(&hi) {
                return Some(hi);
            }
        }
        while let Some(hi) = self.free.pop_front() {
            self.queued.remove(&hi);
            if !self.in_use.contains(&hi) {
                return Some(hi);
            }
        }
        None
    }

    /// Returns a /64 to the pool at `now`; false when it was not allocated from it. Its
    /// binding, if any, is kept for [`RELEASED_HOLD`].
    pub fn release(&mut self, prefix: Ipv6Addr, now: Instant) -> bool {
        let hi = hi64(prefix);
        if !self.in_use.remove(&hi) {
            return false;
        }
        // A /64 of the peer's prefix goes back to no queue: only its binding brings it back.
        if self.is_own(hi) && self.queued.insert(hi) {
            self.free.push_back(hi);
        }
        if let Some(b) = self.by_prefix.get_mut(&hi) {
            b.released = Some(now);
            self.released.push_back((hi, now));
            while self.released.len() > self.max_released {
                if let Some((old, at)) = self.released.pop_front() {
                    self.forget_released(old, at);
                }
            }
        }
        true
    }

    /// Decides the /64 of a link holding `current` whose first Router Solicitation came from
    /// `fe80::<iid>`: the /64 bound to `iid`, or `hint` (a /64 of the pool or of the peer's
    /// prefix the caller knows `iid` used, e.g. from a synced IKE SA), when no link holds it;
    /// otherwise the link keeps `current`. Of a binding and a hint the newer wins: a binding
    /// a link took here after the hint's time beats it, held or released; one taken before
    /// does not, held or released: the client left this node since, and the hint is what it
    /// did elsewhere (e.g. on the peer that has now died). A link still open here then is one
    /// whose client went away without a word (its packets went to the peer) and that this
    /// node has not timed out yet; its /64 stays with it. See [`Claim`].
    pub fn claim(
        &mut self,
        current: Ipv6Addr,
        iid: u64,
        hint: Option<Hint>,
        now: Instant,
    ) -> Claim {
        self.expire(now);
        let cur = hi64(current);
        let hinted = hint
            .map(|h| (hi64(h.prefix), h.since))
            .filter(|&(h, _)| self.contains(h) || self.is_peer(h));
        let bound = self.by_iid.get(&iid).copied();
        let target = match (bound, hinted) {
            (Some(b), Some((h, since))) => {
                let bound = self.by_prefix.get(&b).map(|x| x.bound);
                if bound.is_some_and(|at| at < since) {
                    Some(h)
                } else {
                    Some(b)
                }
            }
            (Some(b), None) => Some(b),
            (None, h) => h.map(|(h, _)| h),
        };
        match target {
            Some(t) if t != cur && self.in_use.contains(&t) => Claim::InUse,
            Some(t) if t != cur && self.in_use.contains(&cur) => {
                self.in_use.insert(t);
                // `cur` was never advertised: it goes first among the released ones.
                self.in_use.remove(&cur);
                if self.is_own(cur) && self.queued.insert(cur) {
                    self.free.push_front(cur);
                }
                self.unbind(cur);
                self.bind(t, iid, now);
                Claim::Reclaimed(Ipv6Addr::from(u128::from(t) << 64))
            }
            _ => {
                if self.in_use.contains(&cur) {
                    self.bind(cur, iid, now);
                }
                Claim::Kept
            }
        }
    }

    /// /64s allocated and not released.
    pub fn in_use(&self) -> usize {
        self.in_use.len()
    }

    /// Number of /64s in the pool.
    pub fn capacity(&self) -> u128 {
        self.size
    }

    /// Interface ids bound to a /64 (held or released).
    pub fn bindings(&self) -> usize {
        self.by_iid.len()
    }

    fn contains(&self, hi: u64) -> bool {
        hi >= self.base && u128::from(hi - self.base) < self.size
    }

    /// In the peer's prefix and not in this pool's own.
    fn is_peer(&self, hi: u64) -> bool {
        !self.contains(hi)
            && self
                .peer
                .is_some_and(|(base, size)| hi >= base && u128::from(hi - base) < size)
    }

    fn is_own(&self, hi: u64) -> bool {
        !self.is_peer(hi)
    }

    fn bind(&mut self, hi: u64, iid: u64, now: Instant) {
        if let Some(old) = self.by_iid.insert(iid, hi)
            && old != hi
        {
            self.by_prefix.remove(&old);
        }
        let b = Binding {
            iid,
            bound: now,
            released: None,
        };
        if let Some(prev) = self.by_prefix.insert(hi, b)
            && prev.iid != iid
        {
            self.by_iid.remove(&prev.iid);
        }
    }

    fn unbind(&mut self, hi: u64) {
        if let Some(b) = self.by_prefix.remove(&hi) {
            self.by_iid.remove(&b.iid);
        }
    }

    /// Drops the binding of `hi` if it is still the one released at `at`.
    fn forget_released(&mut self, hi: u64, at: Instant) {
        if self
            .by_prefix
            .get(&hi)
            .is_some_and(|b| b.released == Some(at))
        {
            self.unbind(hi);
        }
    }

    /// Drops the bindings of /64s released [`RELEASED_HOLD`] ago or more.
    fn expire(&mut self, now: Instant) {
        while let Some(&(hi, at)) = self.released.front() {
            if now.saturating_duration_since(at) < self.hold {
                break;
            }
            self.released.pop_front();
            self.forget_released(hi, at);
        }
    }
}

/// The upper 64 bits and the number of /64s of `prefix/len`.
fn span(prefix: Ipv6Addr, len: u8) -> Result<(u64, u128), PrefixTooLong> {
    if len > 64 {
        return Err(PrefixTooLong(len));
    }
    let hi = (u128::from(prefix) >> 64) as u64;
    let base = if len == 0 {
        0
    } else {
        hi & (u64::MAX << (64 - u32::from(len)))
    };
    Ok((base, 1u128 << (64 - u32::from(len))))
}

fn hi64(a: Ipv6Addr) -> u64 {
    (u128::from(a) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// A pool of `2001:db8:1::/48` beside the peer's `2001:db8:1:8000::/49`.
    fn beside_peer() -> PrefixPool {
        PrefixPool::new(p("2001:db8:1::"), 48)
            .unwrap()
            .with_peer(p("2001:db8:1:8000::"), 49)
            .unwrap()
    }

    fn hint(prefix: Ipv6Addr, since: Instant) -> Option<Hint> {
        Some(Hint { prefix, since })
    }

    #[test]
    fn pool_allocates_fresh_then_fifo() {
        let now = Instant::now();
        let mut pool = PrefixPool::new(p("2001:db8:1::"), 48).unwrap();
        assert_eq!(pool.capacity(), 65_536);
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_eq!(a, p("2001:db8:1::"));
        assert_eq!(b, p("2001:db8:1:1::"));
        assert_eq!(pool.in_use(), 2);
        assert!(pool.release(a, now));
        assert!(!pool.release(a, now), "double release");
        assert!(!pool.release(p("2001:db8:2::"), now), "not ours");
        assert_eq!(pool.in_use(), 1);
        // A just-released prefix waits behind the fresh ones.
        assert_eq!(pool.allocate(), Some(p("2001:db8:1:2::")));
    }

    #[test]
    fn pool_exhaustion_and_reuse_order() {
        let now = Instant::now();
        let mut pool = PrefixPool::new(p("2001:db8:1:ff00::"), 62).unwrap();
        let all: Vec<_> = std::iter::from_fn(|| pool.allocate()).collect();
        assert_eq!(all.len(), 4);
        assert_eq!(all[3], p("2001:db8:1:ff03::"));
        assert_eq!(pool.allocate(), None);
        assert!(pool.release(all[2], now));
        assert!(pool.release(all[0], now));
        assert_eq!(pool.allocate(), Some(all[2]));
        assert_eq!(pool.allocate(), Some(all[0]));
        assert_eq!(pool.allocate(), None);
        assert_eq!(pool.in_use(), 4);
    }

    #[test]
    fn pool_bounds() {
        assert_eq!(
            PrefixPool::new(Ipv6Addr::UNSPECIFIED, 65).unwrap_err(),
            PrefixTooLong(65)
        );
        let mut one = PrefixPool::new(p("2001:db8::1"), 64).unwrap();
        assert_eq!(one.capacity(), 1);
        assert_eq!(one.allocate(), Some(p("2001:db8::")));
        assert_eq!(one.allocate(), None);
        let mut all = PrefixPool::new(Ipv6Addr::UNSPECIFIED, 0).unwrap();
        assert_eq!(all.capacity(), 1u128 << 64);
        assert_eq!(all.allocate(), Some(Ipv6Addr::UNSPECIFIED));
    }

    const IID: u64 = 0x1234_5678_9abc_def0;
    const OTHER: u64 = 0x0fed_cba9_8765_4321;

    #[test]
    fn a_reconnecting_client_gets_its_64_back() {
        let t0 = Instant::now();
        let mut pool = PrefixPool::new(p("2001:db8:1::"), 48).unwrap();
        let first = pool.allocate().unwrap();
        assert_eq!(pool.claim(first, IID, None, t0), Claim::Kept);
        assert!(pool.release(first, t0));
        // The reconnect gets a fresh /64 at TLS time, then its solicitation moves it back.
        let fresh = pool.allocate().unwrap();
        assert_ne!(fresh, first);
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(pool.claim(fresh, IID, None, t1), Claim::Reclaimed(first));
        assert_eq!(pool.in_use(), 1);
        let next = pool.allocate().unwrap();
        assert!(next != first && next != fresh);
        // Kept on the /64 it holds: a second claim changes nothing.
        assert_eq!(pool.claim(first, IID, None, t1), Claim::Kept);
    }

    #[test]
    fn a_claimed_64_is_handed_out_to_no_one_else() {
        let t0 = Instant::now();
        let mut pool = PrefixPool::new(p("2001:db8:1:fe00::"), 63).unwrap();
        let a = pool.allocate().unwrap();
        assert_eq!(pool.claim(a, IID, None, t0), Claim::Kept);
        assert!(pool.release(a, t0));
        let b = pool.allocate().unwrap();
        assert_eq!(pool.claim(b, IID, None, t0), Claim::Reclaimed(a));
        // The /64 the link did not keep goes out next; the claimed one never does.
        assert_eq!(pool.allocate(), Some(b));
        assert_eq!(pool.allocate(), None);
        assert_eq!(pool.in_use(), 2);
    }

    #[test]
    fn a_64_held_by_another_link_is_refused_and_not_rebound() {
        let t0 = Instant::now();
        let mut pool = PrefixPool::new(p("2001:db8:1::"), 48).unwrap();
        let victim = pool.allocate().unwrap();
        assert_eq!(pool.claim(victim, IID, None, t0), Claim::Kept);
        // Another host claims the victim's interface id while the victim is up.
        let attacker = pool.allocate().unwrap();
        assert_eq!(pool.claim(attacker, IID, None, t0), Claim::InUse);
        // A hint naming a held /64 is refused the same way.
        let third = pool.allocate().unwrap();
        assert_eq!(pool.claim(third, OTHER, hint(victim, t0), t0), Claim::InUse);
        // The victim's binding survives: after its drop it still gets its /64 back.
        assert!(pool.release(victim, t0));
        assert!(pool.release(attacker, t0));
        let again = pool.allocate().unwrap();
        assert_eq!(pool.claim(again, IID, None, t0), Claim::Reclaimed(victim));
    }

    #[test]
    fn a_hint_moves_a_link_to_a_64_never_handed_out_here() {
        let t0 = Instant::now();
        let mut pool = PrefixPool::new(p("2001:db8:1::"), 48).unwrap();
        let fresh = pool.allocate().unwrap();
        let synced = p("2001:db8:1:7::");
        assert_eq!(
            pool.claim(fresh, IID, hint(synced, t0), t0),
            Claim::Reclaimed(synced)
        );
        // Fresh allocation skips it; a hint outside the pool is ignored.
        let handed: Vec<_> = (0..10).filter_map(|_| pool.allocate()).collect();
        assert!(!handed.contains(&synced), "{handed:?}");
        let other = pool.allocate().unwrap();
        assert_eq!(
            pool.claim(other, OTHER, hint(p("2001:db8:2::"), t0), t0),
            Claim::Kept
        );
        // A binding released when the hint came, or after, beats it.
        assert!(pool.release(synced, t0));
        let next = pool.allocate().unwrap();
        assert_eq!(
            pool.claim(next, IID, hint(p("2001:db8:1:99::"), t0), t0),
            Claim::Reclaimed(synced)
        );
    }

    #[test]
    fn a_hint_newer_than_a_released_binding_beats_it() {
        // The client took its /64 here at t0 and left (released at `released`), negotiated
        // anew on the peer at t1; the peer died and the client is back at t2: the peer's IKE
        // SA is what it did last, whether this node let go of the old link before t1 or after.
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(30);
        let t2 = t1 + Duration::from_secs(5);
        let theirs = p("2001:db8:1:8005::");
        // A pool beside the peer's prefix where IID's first /64 was bound at `bound` and
        // released at `released`; the /64 of its link now, and that first one.
        let bound_then_released = |bound: Instant, released: Instant| {
            let mut pool = beside_peer();
            let ours = pool.allocate().unwrap();
            assert_eq!(pool.claim(ours, IID, None, bound), Claim::Kept);
            assert!(pool.release(ours, released));
            let fresh = pool.allocate().unwrap();
            (pool, fresh, ours)
        };
        for released in [t0, t2] {
            let (mut pool, fresh, ours) = bound_then_released(t0, released);
            assert_eq!(
                pool.claim(fresh, IID, hint(theirs, t1), t2),
                Claim::Reclaimed(theirs)
            );
            // The interface id is now bound to the peer's /64, and its old one is free for
            // another interface id.
            assert!(pool.release(theirs, t2));
            let again = pool.allocate().unwrap();
            assert_eq!(pool.claim(again, IID, None, t2), Claim::Reclaimed(theirs));
            let other = pool.allocate().unwrap();
            assert_eq!(
                pool.claim(other, OTHER, hint(ours, t2), t2),
                Claim::Reclaimed(ours)
            );
        }

        // The other way round: a binding a link took after the peer's IKE SA was made is the
        // newer one (the client came here after it, then dropped).
        let (mut pool, fresh, ours) = bound_then_released(t1, t2);
        assert_eq!(
            pool.claim(fresh, IID, hint(theirs, t0), t2),
            Claim::Reclaimed(ours)
        );
        // That claim bound it again at t2: a link holds it, so a claim with a hint older than
        // t2 is refused and nothing moves.
        let another = pool.allocate().unwrap();
        assert_eq!(pool.claim(another, IID, hint(theirs, t1), t2), Claim::InUse);
        assert_eq!(pool.claim(another, IID, hint(theirs, t2), t2), Claim::InUse);
    }

    #[test]
    fn a_hint_newer_than_a_held_binding_beats_it_and_leaves_the_64_to_its_link() {
        // The client's link here took its /64 at t0; the client went to the peer without a
        // word (the router sent its packets there) and negotiated anew at t1; the peer died
        // and the client is back at t2, before this node timed the old link out.
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(30);
        let t2 = t1 + Duration::from_secs(5);
        let theirs = p("2001:db8:1:8005::");
        let mut pool = beside_peer();
        let stale = pool.allocate().unwrap();
        assert_eq!(pool.claim(stale, IID, None, t0), Claim::Kept);
        let fresh = pool.allocate().unwrap();
        assert_eq!(
            pool.claim(fresh, IID, hint(theirs, t1), t2),
            Claim::Reclaimed(theirs)
        );
        // The old link keeps its /64 until it goes; no other link gets it meanwhile, and its
        // release is the /64's, not the interface id's.
        assert_eq!(pool.in_use(), 2);
        let other = pool.allocate().unwrap();
        assert_eq!(pool.claim(other, OTHER, hint(stale, t2), t2), Claim::InUse);
        assert!(pool.release(stale, t2));
        assert!(pool.release(theirs, t2));
        let again = pool.allocate().unwrap();
        assert_eq!(pool.claim(again, IID, None, t2), Claim::Reclaimed(theirs));
    }

    #[test]
    fn the_peer_prefix_is_leased_only_by_a_hint_or_the_binding_it_made() {
        let t0 = Instant::now();
        // Two /64s of this node's own and the peer's /49 beside them.
        let own = p("2001:db8:1::");
        let theirs = p("2001:db8:1:8005::");
        let mut pool = PrefixPool::with_bounds(own, 63, Duration::from_secs(60), 8)
            .unwrap()
            .with_peer(p("2001:db8:1:8000::"), 49)
            .unwrap();
        // No hint: the link keeps the fresh /64 of the node's own.
        let first = pool.allocate().unwrap();
        assert_eq!(pool.claim(first, IID, None, t0), Claim::Kept);
        // A hint naming the peer's /64 for this interface id moves the link there.
        let fresh = pool.allocate().unwrap();
        assert_eq!(
            pool.claim(fresh, OTHER, hint(theirs, t0), t0),
            Claim::Reclaimed(theirs)
        );
        // Another link naming the same /64 while it is held gets nothing.
        let other = pool.allocate().unwrap();
        assert_eq!(other, fresh, "the /64 the link left goes out first");
        assert_eq!(pool.claim(other, 7, hint(theirs, t0), t0), Claim::InUse);
        // Released, the peer's /64 never comes out of allocate, nor goes to a hint-less
        // claim of another interface id: only the node's own two go round.
        for a in [first, other, theirs] {
            assert!(pool.release(a, t0));
        }
        let all: Vec<_> = std::iter::from_fn(|| pool.allocate()).collect();
        assert_eq!(all, [first, other]);
        assert_eq!(pool.claim(first, 9, None, t0), Claim::Kept);
        assert_eq!(pool.in_use(), 2);
        // The binding the hinted claim made brings it back to the same interface id.
        assert_eq!(pool.claim(other, OTHER, None, t0), Claim::Reclaimed(theirs));
        // Without a peer prefix the same hint lies outside the pool: ignored.
        let mut alone = PrefixPool::new(own, 63).unwrap();
        let x = alone.allocate().unwrap();
        assert_eq!(alone.claim(x, OTHER, hint(theirs, t0), t0), Claim::Kept);
        assert_eq!(
            PrefixPool::new(own, 63)
                .unwrap()
                .with_peer(theirs, 65)
                .unwrap_err(),
            PrefixTooLong(65)
        );
    }

    #[test]
    fn released_bindings_expire_go_with_reuse_and_are_bounded() {
        let t0 = Instant::now();
        let hold = Duration::from_secs(60);
        let mut pool = PrefixPool::with_bounds(p("2001:db8:1:ff00::"), 62, hold, 2).unwrap();
        // Expiry: a reconnect after the hold gets no /64 back.
        let a = pool.allocate().unwrap();
        pool.claim(a, IID, None, t0);
        assert!(pool.release(a, t0));
        let b = pool.allocate().unwrap();
        assert_eq!(pool.claim(b, IID, None, t0 + hold), Claim::Kept);
        assert_eq!(pool.bindings(), 1);
        // Reuse: once the pool hands the /64 to another link, the binding is gone.
        assert!(pool.release(b, t0 + hold));
        let rest: Vec<_> = std::iter::from_fn(|| pool.allocate()).collect();
        assert_eq!(rest.len(), 4, "{rest:?}");
        assert_eq!(pool.bindings(), 0);
        let c = rest[0];
        assert_eq!(pool.claim(c, IID, None, t0 + hold), Claim::Kept);
        // Bound: many interface ids cycling through leave at most `max` released bindings
        // besides the live ones.
        let mut pool = PrefixPool::with_bounds(p("2001:db8:1::"), 48, hold, 2).unwrap();
        for iid in 1..=100u64 {
            let x = pool.allocate().unwrap();
            pool.claim(x, iid, None, t0);
            pool.release(x, t0);
        }
        assert_eq!(pool.bindings(), 2);
        assert_eq!(pool.released.len(), 2);
        let live = pool.allocate().unwrap();
        pool.claim(live, 1000, None, t0);
        assert_eq!(pool.bindings(), 3);
        // The two kept are the latest; an older one gets nothing back.
        let y = pool.allocate().unwrap();
        assert_eq!(pool.claim(y, 1, None, t0), Claim::Kept);
        let z = pool.allocate().unwrap();
        assert!(matches!(pool.claim(z, 100, None, t0), Claim::Reclaimed(_)));
    }
}
