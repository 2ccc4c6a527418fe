//! The Teredo relay role (RFC 4380 §5.4): the peer table, the bubble procedure and its pacing.
//!
//! The table is keyed by the peer's mapping (its NAT's IPv4 address and UDP port), never by
//! its whole Teredo address: the RFC 5991 flag bits are random and carry no meaning, so 65,536
//! flag values from one socket are one peer. It is bounded three ways, so that no single host
//! can fill it (RFC 4380 §7.5: relays must limit the state others can make them keep):
//!
//! - at most [`RelayConfig::max_peers_per_ipv4`] entries per IPv4 address: a new entry of an
//!   address at its cap replaces that address's oldest unverified entry (a verified one, when
//!   the newcomer itself is verified);
//! - at most [`RelayConfig::max_peers`] in all, split evenly over the shards; a full shard
//!   evicts among its [`EVICTION_CANDIDATES`] least recently scanned entries, an unverified
//!   one first, else (for a verified newcomer) the longest idle one;
//! - entries idle for [`RelayConfig::peer_lifetime`] (`peer_idle_timeout_secs`) are deleted.
//!
//! An unverified entry (created for a packet towards a peer not heard from yet) never
//! displaces a verified one, so traffic towards arbitrary mappings cannot push real clients
//! out. Housekeeping visits at most [`RelayConfig::scan_per_tick`] entries per shard per call.
//!
//! The table is shared by all workers and sharded by the mapping's IPv4 address (so an
//! address's entries, and its count, live in one shard): one shard lock per lookup, never a
//! global one. Time is always a parameter; [`Peers::handle_timeout`] is called by the driver
//! for the shards it owns.

use crate::addr::Address;
use gate64_wire::{ipv6, teredo as tw};
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Number of shards; a power of two well above the worker count keeps contention negligible.
pub const SHARDS: usize = 64;
/// Entries a full shard looks at to choose one to evict: bounded work per insertion.
pub const EVICTION_CANDIDATES: usize = 8;

/// Relay timers and limits.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// A trusted peer stays valid this long after its last packet (§5.2.4: 30 s), and an entry
    /// idle this long is deleted (`limits.peer_idle_timeout_secs`).
    pub peer_lifetime: Duration,
    /// Bubble retry interval (§5.4.1: 2 s).
    pub bubble_interval: Duration,
    /// Bubbles sent before giving up on a pending peer (§5.4.1: 3 repeats).
    pub bubble_attempts: u8,
    /// At most this many bubbles per [`RelayConfig::bubble_window`] without an answer
    /// (§5.2.6: 4 per 300 s).
    pub bubble_window_max: u8,
    /// See [`RelayConfig::bubble_window_max`].
    pub bubble_window: Duration,
    /// Packets queued per pending peer.
    pub queue_packets: usize,
    /// Peer table capacity.
    pub max_peers: usize,
    /// Entries per IPv4 address (one per mapping: a NAT's clients share its address).
    pub max_peers_per_ipv4: usize,
    /// Entries each shard's housekeeping visits per [`Peers::handle_timeout`] call.
    pub scan_per_tick: usize,
    /// Bubbles and relayed packets per second the server role sends on behalf of one IPv4
    /// source (`limits.teredo_relay_per_source_per_sec`).
    pub relay_per_source_per_sec: u32,
    /// Bubbles per second gate64 sends towards one IPv4 destination that is not a verified
    /// peer (`limits.teredo_relay_per_destination_per_sec`).
    pub relay_per_destination_per_sec: u32,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            peer_lifetime: Duration::from_secs(30),
            bubble_interval: Duration::from_secs(2),
            bubble_attempts: 4,
            bubble_window_max: 4,
            bubble_window: Duration::from_secs(300),
            queue_packets: 8,
            max_peers: 1_000_000,
            max_peers_per_ipv4: 256,
            scan_per_tick: 256,
            relay_per_source_per_sec: 10,
            relay_per_destination_per_sec: 10,
        }
    }
}

/// What to do with a packet for a Teredo peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxDecision {
    /// Trusted and valid: send straight to this mapping.
    Send(SocketAddrV4),
    /// Queued; when `bubble` is set, send a bubble to `mapping` now.
    Queued {
        /// Send a bubble now.
        bubble: bool,
        /// Where the bubble goes.
        mapping: SocketAddrV4,
    },
    /// Not sent.
    Drop(TxDrop),
}

/// Why the relay refused a packet towards a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxDrop {
    /// The pending queue of this peer is full.
    QueueFull,
    /// The table (or the peer's shard) is full of verified peers.
    TableFull,
    /// The peer's IPv4 address holds its cap of entries, all verified.
    Ipv4Full,
}

/// Something [`Peers::handle_timeout`] asks the driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerEvent {
    /// Send a bubble to a pending peer.
    Bubble {
        /// The peer's Teredo address.
        peer: Ipv6Addr,
        /// Its mapping.
        mapping: SocketAddrV4,
    },
    /// A pending peer never answered: its queued packets are discarded.
    GaveUp {
        /// How many packets were discarded.
        dropped: usize,
    },
}

#[derive(Debug)]
struct Peer {
    /// Tells this entry from an older one of the same mapping in [`Shard::order`].
    id: u64,
    /// The Teredo address last seen for the mapping (bubbles go to it).
    address: Ipv6Addr,
    trusted: bool,
    last_rx: Option<Instant>,
    last_activity: Instant,
    last_bubble: Option<Instant>,
    attempts: u8,
    window_start: Instant,
    window_bubbles: u8,
    queue: Vec<Vec<u8>>,
}

/// One IPv4 address's entries.
#[derive(Debug, Default)]
struct Address4 {
    /// Ports, oldest entry first (at most `max_peers_per_ipv4`).
    ports: VecDeque<u16>,
    /// How many of them are unverified.
    unverified: usize,
}

#[derive(Debug, Default)]
struct Shard {
    /// Boxed, like `by_ipv4`'s values: the maps' room is reserved up front (below), and a
    /// reserved map's slots are written where the keys hash, so with a few peers per shard
    /// each new one touches a page of its own; a ~140-byte inline entry made those pages
    /// (and the reserved address space) 9x larger than a pointer does.
    peers: HashMap<SocketAddrV4, Box<Peer>>,
    by_ipv4: HashMap<Ipv4Addr, Box<Address4>>,
    /// The housekeeping cursor: entries in the order they are next visited. Holds stale
    /// `(mapping, id)` pairs of deleted entries until they reach the front.
    order: VecDeque<(SocketAddrV4, u64)>,
    next_id: u64,
}

/// Entries per shard whose room is reserved when the table is made: a shard whose maps had
/// to grow would rehash every entry while its lock stops the workers that need it. Up to
/// here (131,072 peers over [`SHARDS`] shards: 100,000 clients fit) the configured
/// maximum is reserved; past it the maps grow as usual, a rehash of one shard's few thousand
/// entries under that shard's lock. Reserving all of the default million cost RSS without
/// holding anything: a reserved map's slots are written where keys hash, so a sparse one
/// touches a page per entry (at 18,500 clients ~50 MB, ~2.8 KB per client, in pages of the
/// two maps, and the housekeeping ring's rotation touched all of its 32 MB).
const RESERVED_PER_SHARD: usize = 1 << 11;

impl Shard {
    fn with_capacity(cap: usize) -> Self {
        let cap = cap.min(RESERVED_PER_SHARD);
        // Twice the room (plus the one being inserted): deletions leave tombstones that use
        // up the room, and hashbrown then rehashes in place only while the live entries fill
        // at most half of it; past half it allocates a table twice as large instead.
        let room = 2 * cap + 2;
        Shard {
            peers: HashMap::with_capacity(room),
            by_ipv4: HashMap::with_capacity(room),
            // `insert` keeps the cursor within twice the live entries plus the candidates.
            order: VecDeque::with_capacity(2 * cap + EVICTION_CANDIDATES + 1),
            next_id: 0,
        }
    }

    /// Entries the maps hold without growing.
    #[cfg(test)]
    fn reserved(&self) -> usize {
        self.peers.capacity().min(self.by_ipv4.capacity())
    }
}

/// The sharded peer table.
#[derive(Debug)]
pub struct Peers {
    cfg: RelayConfig,
    shards: Box<[Mutex<Shard>]>,
    shard_cap: usize,
    len: AtomicUsize,
}

impl Peers {
    /// Creates an empty table.
    pub fn new(cfg: RelayConfig) -> Self {
        let shard_cap = cfg.max_peers.div_ceil(SHARDS).max(1);
        let shards = (0..SHARDS)
            .map(|_| Mutex::new(Shard::with_capacity(shard_cap)))
            .collect();
        Peers {
            cfg,
            shards,
            shard_cap,
            len: AtomicUsize::new(0),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RelayConfig {
        &self.cfg
    }

    fn shard(&self, ip: &Ipv4Addr) -> std::sync::MutexGuard<'_, Shard> {
        // Multiplicative hashing spreads neighbouring addresses over the shards.
        let h = u32::from(*ip).wrapping_mul(0x9e37_79b1) >> 26;
        // A worker that panicked while holding a shard left plain data behind; keep serving.
        self.shards[h as usize % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Records a packet received from the verified client `peer` at `mapping` (§5.4.2): the
    /// peer becomes trusted. Returns the packets that were queued for it, to send now in the
    /// order they arrived.
    /// Returns `Err` only when the peer is new and its shard holds no entry it may replace.
    pub fn handle_receive(
        &self,
        now: Instant,
        peer: &Ipv6Addr,
        mapping: SocketAddrV4,
    ) -> Result<Option<Vec<Vec<u8>>>, TxDrop> {
        let mut shard = self.shard(mapping.ip());
        // One probe for a known peer, the common case on the data path.
        let Shard { peers, by_ipv4, .. } = &mut *shard;
        if let Some(p) = peers.get_mut(&mapping) {
            if !p.trusted
                && let Some(a) = by_ipv4.get_mut(mapping.ip())
            {
                a.unverified = a.unverified.saturating_sub(1);
            }
            p.address = *peer;
            p.trusted = true;
            p.last_rx = Some(now);
            p.last_activity = now;
            p.attempts = 0;
            p.window_bubbles = 0;
            p.last_bubble = None;
            if p.queue.is_empty() {
                return Ok(None);
            }
            return Ok(Some(std::mem::take(&mut p.queue)));
        }
        self.make_room(&mut shard, mapping, true)?;
        let p = Peer::new(now, *peer, true);
        self.insert(&mut shard, mapping, p);
        Ok(None)
    }

    /// Decides how to send `packet` to the Teredo peer `dst` (§5.4.1). The packet is copied only
    /// when it has to be queued while the peer is being bubbled.
    pub fn handle_transmit(&self, now: Instant, dst: &Address, packet: &[u8]) -> TxDecision {
        let mapping = dst.mapped;
        let mut shard = self.shard(mapping.ip());
        let cfg = &self.cfg;
        // A trusted, valid peer (the common case on the data path) takes one probe.
        if let Some(p) = shard.peers.get_mut(&mapping)
            && p.trusted
            && p.last_rx
                .is_some_and(|t| now.saturating_duration_since(t) < cfg.peer_lifetime)
        {
            p.last_activity = now;
            return TxDecision::Send(mapping);
        }
        if !shard.peers.contains_key(&mapping) {
            if let Err(d) = self.make_room(&mut shard, mapping, false) {
                return TxDecision::Drop(d);
            }
            let p = Peer::new(now, dst.encode(), false);
            self.insert(&mut shard, mapping, p);
        }
        let Some(p) = shard.peers.get_mut(&mapping) else {
            return TxDecision::Drop(TxDrop::TableFull);
        };
        p.last_activity = now;
        // Untrusted or stale: queue and bubble (§5.4.1 case 3; the cone bit is ignored, as the
        // RFC now recommends).
        if p.queue.len() >= cfg.queue_packets {
            return TxDecision::Drop(TxDrop::QueueFull);
        }
        p.queue.push(packet.to_vec());
        let bubble = p.may_bubble(now, cfg);
        TxDecision::Queued { bubble, mapping }
    }

    /// Runs the bubble retries and expiries of the shards `i` with `i % of == part`, so that
    /// `of` workers can share the work without overlapping; visits at most
    /// [`RelayConfig::scan_per_tick`] entries per shard.
    pub fn handle_timeout(
        &self,
        now: Instant,
        part: usize,
        of: usize,
        mut out: impl FnMut(TimerEvent),
    ) {
        for i in 0..SHARDS {
            if of > 0 && i % of != part {
                continue;
            }
            let mut shard = self.shards[i].lock().unwrap_or_else(|p| p.into_inner());
            let visits = self.cfg.scan_per_tick.min(shard.order.len());
            for _ in 0..visits {
                let Some((mapping, id)) = shard.order.pop_front() else {
                    break;
                };
                let Some(p) = shard.peers.get_mut(&mapping).filter(|p| p.id == id) else {
                    continue;
                };
                if p.tick(now, &self.cfg, mapping, &mut out) {
                    shard.order.push_back((mapping, id));
                } else {
                    self.remove(&mut shard, mapping);
                }
            }
        }
    }

    /// `(valid, total)`: peers heard from within the peer lifetime, and all entries.
    pub fn count(&self, now: Instant) -> (usize, usize) {
        let mut valid = 0;
        for m in self.shards.iter() {
            let shard = m.lock().unwrap_or_else(|p| p.into_inner());
            valid += shard
                .peers
                .values()
                .filter(|p| {
                    p.last_rx
                        .is_some_and(|t| now.saturating_duration_since(t) < self.cfg.peer_lifetime)
                })
                .count();
        }
        (valid, self.len.load(Ordering::Relaxed))
    }

    /// Frees a place for the new entry `mapping` (`verified`: it proved its mapping) in
    /// `shard`: first under its address's cap, then under the shard's and the table's.
    fn make_room(
        &self,
        shard: &mut Shard,
        mapping: SocketAddrV4,
        verified: bool,
    ) -> Result<(), TxDrop> {
        let ip = *mapping.ip();
        let ports = shard.by_ipv4.get(&ip).map_or(0, |a| a.ports.len());
        if ports >= self.cfg.max_peers_per_ipv4.max(1) {
            let victim = shard.by_ipv4.get(&ip).and_then(|a| {
                // Bounded: only the oldest few, and only when there is one to find.
                let unverified = (a.unverified > 0)
                    .then(|| {
                        a.ports.iter().take(EVICTION_CANDIDATES).find(|port| {
                            let m = SocketAddrV4::new(ip, **port);
                            shard.peers.get(&m).is_some_and(|p| !p.trusted)
                        })
                    })
                    .flatten();
                unverified
                    .or(verified.then(|| a.ports.front()).flatten())
                    .copied()
            });
            let port = victim.ok_or(TxDrop::Ipv4Full)?;
            self.remove(shard, SocketAddrV4::new(ip, port));
        }
        if shard.peers.len() >= self.shard_cap
            || self.len.load(Ordering::Relaxed) >= self.cfg.max_peers
        {
            let victim = self.eviction_candidate(shard, verified);
            self.remove(shard, victim.ok_or(TxDrop::TableFull)?);
        }
        Ok(())
    }

    /// Among the next [`EVICTION_CANDIDATES`] entries of the housekeeping order: the first
    /// unverified one, else (only for a verified newcomer) the longest idle.
    fn eviction_candidate(&self, shard: &mut Shard, verified: bool) -> Option<SocketAddrV4> {
        let mut oldest: Option<(Instant, SocketAddrV4)> = None;
        let mut seen = 0;
        let mut at = 0;
        while seen < EVICTION_CANDIDATES && at < shard.order.len() {
            let (mapping, id) = shard.order[at];
            at += 1;
            let Some(p) = shard.peers.get(&mapping).filter(|p| p.id == id) else {
                continue;
            };
            seen += 1;
            if !p.trusted {
                return Some(mapping);
            }
            if oldest.is_none_or(|(t, _)| p.last_activity < t) {
                oldest = Some((p.last_activity, mapping));
            }
        }
        if verified {
            oldest.map(|(_, m)| m)
        } else {
            None
        }
    }

    fn insert(&self, shard: &mut Shard, mapping: SocketAddrV4, mut p: Peer) {
        shard.next_id += 1;
        p.id = shard.next_id;
        shard.order.push_back((mapping, p.id));
        let a = shard.by_ipv4.entry(*mapping.ip()).or_default();
        a.ports.push_back(mapping.port());
        a.unverified += usize::from(!p.trusted);
        shard.peers.insert(mapping, Box::new(p));
        self.len.fetch_add(1, Ordering::Relaxed);
        // Evictions leave stale pairs in the order; keep it within twice the live entries.
        if shard.order.len() > 2 * shard.peers.len() + EVICTION_CANDIDATES {
            let Shard { order, peers, .. } = shard;
            order.retain(|(m, id)| peers.get(m).is_some_and(|p| p.id == *id));
        }
    }

    fn remove(&self, shard: &mut Shard, mapping: SocketAddrV4) {
        let Some(p) = shard.peers.remove(&mapping) else {
            return;
        };
        self.len.fetch_sub(1, Ordering::Relaxed);
        let ip = *mapping.ip();
        if let Some(a) = shard.by_ipv4.get_mut(&ip) {
            // The oldest goes first in the common case (an address at its cap): O(1).
            if a.ports.front() == Some(&mapping.port()) {
                a.ports.pop_front();
            } else if let Some(i) = a.ports.iter().position(|q| *q == mapping.port()) {
                a.ports.remove(i);
            }
            a.unverified -= usize::from(!p.trusted).min(a.unverified);
            if a.ports.is_empty() {
                shard.by_ipv4.remove(&ip);
            }
        }
    }
}

impl Peer {
    fn new(now: Instant, address: Ipv6Addr, trusted: bool) -> Self {
        Peer {
            id: 0,
            address,
            trusted,
            last_rx: trusted.then_some(now),
            last_activity: now,
            last_bubble: None,
            attempts: 0,
            window_start: now,
            window_bubbles: 0,
            queue: Vec::new(),
        }
    }

    /// One housekeeping visit: bubble retries of a pending peer (§5.4.1), expiry of an idle
    /// one. False when the entry is to be deleted.
    fn tick(
        &mut self,
        now: Instant,
        cfg: &RelayConfig,
        mapping: SocketAddrV4,
        out: &mut impl FnMut(TimerEvent),
    ) -> bool {
        if self.queue.is_empty() {
            return now.saturating_duration_since(self.last_activity) < cfg.peer_lifetime;
        }
        let due = self
            .last_bubble
            .is_none_or(|t| now.saturating_duration_since(t) >= cfg.bubble_interval);
        if !due {
            return true;
        }
        if self.attempts >= cfg.bubble_attempts {
            out(TimerEvent::GaveUp {
                dropped: self.queue.len(),
            });
            self.queue.clear();
            return self.trusted
                && now.saturating_duration_since(self.last_activity) < cfg.peer_lifetime;
        }
        if self.may_bubble(now, cfg) {
            out(TimerEvent::Bubble {
                peer: self.address,
                mapping,
            });
        }
        true
    }

    /// §5.2.6 pacing: no bubble within the retry interval of the last one, and at most
    /// `bubble_window_max` per window without an answer. Records the bubble when allowed.
    fn may_bubble(&mut self, now: Instant, cfg: &RelayConfig) -> bool {
        if self
            .last_bubble
            .is_some_and(|t| now.saturating_duration_since(t) < cfg.bubble_interval)
        {
            return false;
        }
        if now.saturating_duration_since(self.window_start) >= cfg.bubble_window {
            self.window_start = now;
            self.window_bubbles = 0;
        }
        if self.window_bubbles >= cfg.bubble_window_max {
            return false;
        }
        self.window_bubbles += 1;
        self.attempts = self.attempts.saturating_add(1);
        self.last_bubble = Some(now);
        true
    }
}

/// Writes the datagram of a bubble from `src` to the Teredo peer `dst`, preceded by an origin
/// indication naming `origin` (§5.2.9: a bubble relayed by the client's server carries one, and
/// the client answers with a direct bubble to it). Returns its length.
pub fn emit_bubble(
    out: &mut [u8],
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    origin: Option<SocketAddrV4>,
) -> gate64_wire::Result<usize> {
    let mut at = 0;
    if let Some(o) = origin {
        at += tw::Origin(o).emit(out)?;
    }
    ipv6::emit_header(
        out.get_mut(at..).ok_or(gate64_wire::Error::Truncated)?,
        0,
        ipv6::NH_NONE,
        255,
        src,
        dst,
    )?;
    Ok(at + ipv6::HEADER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn client() -> Address {
        Address {
            server: Ipv4Addr::new(192, 0, 2, 1),
            flags: 0,
            mapped: "198.51.100.10:3546".parse().unwrap(),
        }
    }

    /// Room for the configured maximum is reserved up front: filling the table to it, with
    /// evictions once shards are full, never grows a shard's maps.
    #[test]
    fn a_full_table_never_grows_its_shards() {
        let cfg = RelayConfig {
            max_peers: SHARDS * 40,
            ..RelayConfig::default()
        };
        let peers = Peers::new(cfg);
        let lock = |i: usize| peers.shards[i].lock().unwrap();
        let before: Vec<usize> = (0..SHARDS).map(|i| lock(i).reserved()).collect();
        assert!(before.iter().all(|&r| r >= 40));
        let t0 = Instant::now();
        for i in 0..(SHARDS * 80) as u32 {
            let mapping = SocketAddrV4::new(Ipv4Addr::from(0xc633_0000 + i), 3544);
            let a = Address {
                mapped: mapping,
                ..client()
            };
            let _ = peers.handle_receive(t0, &a.encode(), mapping);
        }
        assert_eq!(peers.count(t0).1, SHARDS * 40);
        // Deleted entries leave tombstones that count against the room left, so the room
        // may shrink; it never grows, which would mean a larger table was built.
        for (i, &room) in before.iter().enumerate() {
            assert!(lock(i).reserved() <= room, "shard {i} grew");
        }
    }

    #[test]
    fn rfc4380_5_4_2_receive_makes_peer_trusted() {
        let peers = Peers::new(RelayConfig::default());
        let t0 = Instant::now();
        let c = client();
        assert_eq!(peers.handle_receive(t0, &c.encode(), c.mapped), Ok(None));
        assert_eq!(
            peers.handle_transmit(t0, &c, b"x"),
            TxDecision::Send(c.mapped)
        );
        assert_eq!(peers.count(t0), (1, 1));
        // Stale after 30 s: queue and bubble again.
        let t1 = t0 + Duration::from_secs(31);
        assert_eq!(
            peers.handle_transmit(t1, &c, b"x"),
            TxDecision::Queued {
                bubble: true,
                mapping: c.mapped
            }
        );
        assert_eq!(peers.count(t1), (0, 1));
    }

    #[test]
    fn rfc4380_5_4_1_unknown_peer_is_queued_bubbled_then_flushed() {
        let peers = Peers::new(RelayConfig::default());
        let t0 = Instant::now();
        let c = client();
        assert_eq!(
            peers.handle_transmit(t0, &c, b"one"),
            TxDecision::Queued {
                bubble: true,
                mapping: c.mapped
            }
        );
        // A second packet within 2 s: queued, no new bubble (§5.2.6 pacing).
        assert_eq!(
            peers.handle_transmit(t0, &c, b"two"),
            TxDecision::Queued {
                bubble: false,
                mapping: c.mapped
            }
        );
        // The client's direct bubble arrives: trusted, queue flushed in order.
        let flushed = peers
            .handle_receive(t0, &c.encode(), c.mapped)
            .unwrap()
            .unwrap();
        assert_eq!(flushed, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(
            peers.handle_transmit(t0, &c, b"x"),
            TxDecision::Send(c.mapped)
        );
    }

    #[test]
    fn rfc4380_5_4_1_bubbles_every_2s_then_give_up() {
        let peers = Peers::new(RelayConfig::default());
        let t0 = Instant::now();
        let c = client();
        peers.handle_transmit(t0, &c, b"one");
        let mut events = Vec::new();
        for s in 0..=12 {
            peers.handle_timeout(t0 + Duration::from_millis(500 * s), 0, 1, |e| {
                events.push((s, e))
            });
        }
        let bubbles: Vec<_> = events
            .iter()
            .filter(|(_, e)| matches!(e, TimerEvent::Bubble { .. }))
            .map(|(s, _)| *s)
            .collect();
        // First bubble at t0 from handle_transmit, then one every 2 s: at 2, 4 and 6 s.
        assert_eq!(bubbles, vec![4, 8, 12]);
        let gave_up: Vec<_> = events
            .iter()
            .filter(|(_, e)| matches!(e, TimerEvent::GaveUp { dropped: 1 }))
            .collect();
        assert!(
            gave_up.is_empty(),
            "gives up only after the 4th bubble's interval"
        );
        peers.handle_timeout(t0 + Duration::from_secs(8), 0, 1, |e| events.push((99, e)));
        assert!(
            events
                .iter()
                .any(|(s, e)| *s == 99 && *e == TimerEvent::GaveUp { dropped: 1 })
        );
        assert_eq!(
            peers.count(t0 + Duration::from_secs(8)).1,
            0,
            "untrusted entry deleted"
        );
    }

    #[test]
    fn rfc4380_5_4_1_full_queue_is_flushed_first_in_first_out() {
        let cfg = RelayConfig::default();
        let limit = cfg.queue_packets;
        assert_eq!(limit, 8);
        let peers = Peers::new(cfg);
        let t0 = Instant::now();
        let c = client();
        let packets: Vec<Vec<u8>> = (0..limit)
            .map(|i| format!("packet {i}").into_bytes())
            .collect();
        for p in &packets {
            assert!(matches!(
                peers.handle_transmit(t0, &c, p),
                TxDecision::Queued { .. }
            ));
        }
        assert_eq!(
            peers.handle_transmit(t0, &c, b"one too many"),
            TxDecision::Drop(TxDrop::QueueFull)
        );
        let flushed = peers
            .handle_receive(t0, &c.encode(), c.mapped)
            .unwrap()
            .unwrap();
        assert_eq!(flushed, packets);
    }

    fn at(ip: [u8; 4], port: u16, flags: u16) -> Address {
        Address {
            server: Ipv4Addr::new(192, 0, 2, 1),
            flags,
            mapped: SocketAddrV4::new(Ipv4Addr::from(ip), port),
        }
    }

    fn receive(peers: &Peers, now: Instant, a: &Address) -> Result<(), TxDrop> {
        peers.handle_receive(now, &a.encode(), a.mapped).map(|_| ())
    }

    fn is_trusted(peers: &Peers, now: Instant, a: &Address) -> bool {
        peers.handle_transmit(now, a, b"probe") == TxDecision::Send(a.mapped)
    }

    #[test]
    fn queue_is_bounded() {
        let cfg = RelayConfig {
            queue_packets: 2,
            ..RelayConfig::default()
        };
        let peers = Peers::new(cfg);
        let t0 = Instant::now();
        let c = client();
        peers.handle_transmit(t0, &c, b"1");
        peers.handle_transmit(t0, &c, b"2");
        assert_eq!(
            peers.handle_transmit(t0, &c, b"3"),
            TxDecision::Drop(TxDrop::QueueFull)
        );
    }

    // RFC 5991: the flag bits are random; only the mapping identifies a peer, so one
    // socket sending its mapping with 65,536 flag values makes one entry, not 65,536.
    #[test]
    fn rfc5991_flag_values_of_one_mapping_are_one_peer() {
        let peers = Peers::new(RelayConfig::default());
        let t0 = Instant::now();
        for flags in 0..=u16::MAX {
            receive(&peers, t0, &at([198, 51, 100, 10], 3546, flags)).unwrap();
        }
        assert_eq!(peers.count(t0), (1, 1));
        // Any flag value reaches the one trusted mapping.
        assert!(is_trusted(
            &peers,
            t0,
            &at([198, 51, 100, 10], 3546, 0x8000)
        ));
        assert_eq!(peers.count(t0).1, 1);
    }

    #[test]
    fn per_ipv4_cap_replaces_that_address_s_oldest_entry() {
        let cfg = RelayConfig {
            max_peers_per_ipv4: 4,
            ..RelayConfig::default()
        };
        let peers = Peers::new(cfg);
        let t0 = Instant::now();
        let other = at([203, 0, 113, 7], 1000, 0);
        receive(&peers, t0, &other).unwrap();
        for port in 1..=100u16 {
            receive(&peers, t0, &at([198, 51, 100, 10], port, port)).unwrap();
        }
        assert_eq!(peers.count(t0), (5, 5));
        // The newest four stay; the others were replaced; the other address is untouched.
        for port in 97..=100 {
            assert!(
                is_trusted(&peers, t0, &at([198, 51, 100, 10], port, 0)),
                "{port}"
            );
        }
        assert!(is_trusted(&peers, t0, &other));
        assert_eq!(peers.count(t0).1, 5);
    }

    // Packets towards unverified mappings (anyone can name any mapping) never push out a
    // verified peer; a verified newcomer replaces unverified entries first.
    #[test]
    fn unverified_entries_never_displace_verified_ones() {
        let cfg = RelayConfig {
            max_peers_per_ipv4: 2,
            ..RelayConfig::default()
        };
        let peers = Peers::new(cfg);
        let t0 = Instant::now();
        let ip = [198, 51, 100, 10];
        receive(&peers, t0, &at(ip, 1, 0)).unwrap();
        assert!(matches!(
            peers.handle_transmit(t0, &at(ip, 2, 0), b"x"),
            TxDecision::Queued { bubble: true, .. }
        ));
        // The address is at its cap: one verified, one unverified entry. Another unverified
        // one replaces the unverified entry, never the verified.
        assert!(matches!(
            peers.handle_transmit(t0, &at(ip, 3, 0), b"x"),
            TxDecision::Queued { bubble: true, .. }
        ));
        assert!(is_trusted(&peers, t0, &at(ip, 1, 0)));
        // A verified newcomer replaces the unverified entry.
        receive(&peers, t0, &at(ip, 4, 0)).unwrap();
        assert_eq!(peers.count(t0), (2, 2));
        // All verified now: unverified newcomers are refused, verified ones replace the oldest.
        assert_eq!(
            peers.handle_transmit(t0, &at(ip, 5, 0), b"x"),
            TxDecision::Drop(TxDrop::Ipv4Full)
        );
        receive(&peers, t0 + Duration::from_secs(1), &at(ip, 6, 0)).unwrap();
        assert!(is_trusted(&peers, t0, &at(ip, 4, 0)));
        assert!(is_trusted(&peers, t0, &at(ip, 6, 0)));
        assert_eq!(peers.count(t0).1, 2);
    }

    #[test]
    fn full_table_evicts_unverified_then_longest_idle() {
        // Two entries per shard; one address's entries share a shard.
        let cfg = RelayConfig {
            max_peers: 2 * SHARDS,
            ..RelayConfig::default()
        };
        let peers = Peers::new(cfg);
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let ip = [198, 51, 100, 10];
        receive(&peers, t0, &at(ip, 1, 0)).unwrap();
        peers.handle_transmit(t0, &at(ip, 2, 0), b"x");
        receive(&peers, t1, &at(ip, 3, 0)).unwrap();
        assert_eq!(peers.count(t1), (2, 2), "the unverified entry made room");
        assert_eq!(
            peers.handle_transmit(t1, &at(ip, 4, 0), b"x"),
            TxDecision::Drop(TxDrop::TableFull),
            "an unverified entry never evicts a verified one"
        );
        receive(&peers, t1, &at(ip, 5, 0)).unwrap();
        assert!(is_trusted(&peers, t1, &at(ip, 3, 0)));
        assert!(is_trusted(&peers, t1, &at(ip, 5, 0)));
        assert_eq!(peers.count(t1).1, 2, "port 1, idle longest, was evicted");
    }

    #[test]
    fn idle_entries_expire_after_the_configured_lifetime() {
        let cfg = RelayConfig {
            peer_lifetime: Duration::from_secs(60),
            ..RelayConfig::default()
        };
        let peers = Peers::new(cfg);
        let t0 = Instant::now();
        let c = client();
        peers.handle_receive(t0, &c.encode(), c.mapped).unwrap();
        peers.handle_timeout(t0 + Duration::from_secs(59), 0, 1, |_| {});
        assert_eq!(peers.count(t0).1, 1);
        peers.handle_timeout(t0 + Duration::from_secs(61), 0, 1, |_| {});
        assert_eq!(peers.count(t0).1, 0);
    }

    #[test]
    fn housekeeping_visits_a_bounded_number_of_entries_per_tick() {
        let cfg = RelayConfig {
            scan_per_tick: 10,
            max_peers_per_ipv4: 1000,
            ..RelayConfig::default()
        };
        let peers = Peers::new(cfg);
        let t0 = Instant::now();
        for port in 0..100 {
            receive(&peers, t0, &at([198, 51, 100, 10], port, 0)).unwrap();
        }
        let later = t0 + Duration::from_secs(31);
        for left in (0..10).rev() {
            peers.handle_timeout(later, 0, 1, |_| {});
            assert_eq!(peers.count(later).1, left * 10);
        }
    }

    #[test]
    fn bubble_layout() {
        let mut b = [0u8; 64];
        let n = emit_bubble(
            &mut b,
            &"fe80::1".parse().unwrap(),
            &client().encode(),
            Some("192.0.2.1:3544".parse().unwrap()),
        )
        .unwrap();
        assert_eq!(n, 48);
        let p = tw::Packet::parse(&b[..n]).unwrap();
        assert!(p.ipv6.is_bubble());
        assert_eq!(p.origin.unwrap().0, "192.0.2.1:3544".parse().unwrap());
    }
}
