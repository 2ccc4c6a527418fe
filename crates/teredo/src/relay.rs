//! The Teredo relay role (RFC 4380 §5.4): the peer table, the bubble procedure and its pacing.
//!
//! The table is shared by all workers and sharded: one shard lock per lookup, never a global
//! one. Time is always a parameter; [`Peers::handle_timeout`] is called by the driver for the
//! shards it owns.

use crate::addr::Address;
use gate64_wire::{ipv6, teredo as tw};
use std::collections::HashMap;
use std::net::{Ipv6Addr, SocketAddrV4};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Number of shards; a power of two well above the worker count keeps contention negligible.
pub const SHARDS: usize = 64;

/// Relay timers and limits.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// A trusted peer stays valid this long after its last packet (§5.2.4: 30 s).
    pub peer_lifetime: Duration,
    /// Entries idle this long are deleted.
    pub entry_expiry: Duration,
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
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            peer_lifetime: Duration::from_secs(30),
            entry_expiry: Duration::from_secs(300),
            bubble_interval: Duration::from_secs(2),
            bubble_attempts: 4,
            bubble_window_max: 4,
            bubble_window: Duration::from_secs(300),
            queue_packets: 8,
            max_peers: 1_000_000,
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
    /// The table is full.
    TableFull,
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
    mapping: SocketAddrV4,
    trusted: bool,
    last_rx: Option<Instant>,
    last_activity: Instant,
    last_bubble: Option<Instant>,
    attempts: u8,
    window_start: Instant,
    window_bubbles: u8,
    queue: Vec<Vec<u8>>,
}

/// The sharded peer table.
#[derive(Debug)]
pub struct Peers {
    cfg: RelayConfig,
    shards: Box<[Mutex<HashMap<Ipv6Addr, Peer>>]>,
    len: AtomicUsize,
}

impl Peers {
    /// Creates an empty table.
    pub fn new(cfg: RelayConfig) -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect();
        Peers {
            cfg,
            shards,
            len: AtomicUsize::new(0),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RelayConfig {
        &self.cfg
    }

    fn shard(&self, a: &Ipv6Addr) -> &Mutex<HashMap<Ipv6Addr, Peer>> {
        // The low bits carry the client's obfuscated IPv4 and port, which spread well.
        let o = a.octets();
        let h = u32::from_be_bytes([o[12], o[13], o[14], o[15]]) ^ u32::from(o[11]);
        &self.shards[h as usize % SHARDS]
    }

    fn lock<'a>(
        m: &'a Mutex<HashMap<Ipv6Addr, Peer>>,
    ) -> std::sync::MutexGuard<'a, HashMap<Ipv6Addr, Peer>> {
        // A worker that panicked while holding a shard left plain data behind; keep serving.
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a packet received from the verified client `peer` at `mapping` (§5.4.2): the
    /// peer becomes trusted. Returns the packets that were queued for it, to send now in the
    /// order they arrived.
    /// Returns `Err` when the table is full and the peer is new.
    pub fn handle_receive(
        &self,
        now: Instant,
        peer: &Ipv6Addr,
        mapping: SocketAddrV4,
    ) -> Result<Option<Vec<Vec<u8>>>, TxDrop> {
        let mut shard = Self::lock(self.shard(peer));
        if let Some(p) = shard.get_mut(peer) {
            p.mapping = mapping;
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
        if self.len.load(Ordering::Relaxed) >= self.cfg.max_peers {
            return Err(TxDrop::TableFull);
        }
        shard.insert(*peer, Peer::new(now, mapping, true));
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok(None)
    }

    /// Decides how to send `packet` to the Teredo peer `dst` (§5.4.1). The packet is copied only
    /// when it has to be queued while the peer is being bubbled.
    pub fn handle_transmit(&self, now: Instant, dst: &Address, packet: &[u8]) -> TxDecision {
        let key = dst.encode();
        let mut shard = Self::lock(self.shard(&key));
        let cfg = &self.cfg;
        let p = match shard.get_mut(&key) {
            Some(p) => p,
            None => {
                if self.len.load(Ordering::Relaxed) >= cfg.max_peers {
                    return TxDecision::Drop(TxDrop::TableFull);
                }
                self.len.fetch_add(1, Ordering::Relaxed);
                shard
                    .entry(key)
                    .or_insert_with(|| Peer::new(now, dst.mapped, false))
            }
        };
        p.last_activity = now;
        if p.trusted
            && p.last_rx
                .is_some_and(|t| now.saturating_duration_since(t) < cfg.peer_lifetime)
        {
            return TxDecision::Send(p.mapping);
        }
        // Untrusted or stale: queue and bubble (§5.4.1 case 3; the cone bit is ignored, as the
        // RFC now recommends).
        if p.queue.len() >= cfg.queue_packets {
            return TxDecision::Drop(TxDrop::QueueFull);
        }
        p.queue.push(packet.to_vec());
        let bubble = p.may_bubble(now, cfg);
        TxDecision::Queued {
            bubble,
            mapping: p.mapping,
        }
    }

    /// Runs the bubble retries and expiries of the shards `i` with `i % of == part`, so that
    /// `of` workers can share the work without overlapping.
    pub fn handle_timeout(
        &self,
        now: Instant,
        part: usize,
        of: usize,
        mut out: impl FnMut(TimerEvent),
    ) {
        let cfg = &self.cfg;
        for (i, m) in self.shards.iter().enumerate() {
            if of > 0 && i % of != part {
                continue;
            }
            let mut shard = Self::lock(m);
            let before = shard.len();
            shard.retain(|peer, p| {
                if !p.queue.is_empty() {
                    let due = p
                        .last_bubble
                        .is_none_or(|t| now.saturating_duration_since(t) >= cfg.bubble_interval);
                    if due {
                        if p.attempts >= cfg.bubble_attempts {
                            out(TimerEvent::GaveUp {
                                dropped: p.queue.len(),
                            });
                            p.queue.clear();
                            return p.trusted;
                        }
                        if p.may_bubble(now, cfg) {
                            out(TimerEvent::Bubble {
                                peer: *peer,
                                mapping: p.mapping,
                            });
                        }
                    }
                    return true;
                }
                now.saturating_duration_since(p.last_activity) < cfg.entry_expiry
            });
            let removed = before - shard.len();
            if removed > 0 {
                self.len.fetch_sub(removed, Ordering::Relaxed);
            }
        }
    }

    /// `(valid, total)`: peers heard from within the peer lifetime, and all entries.
    pub fn count(&self, now: Instant) -> (usize, usize) {
        let mut valid = 0;
        for m in self.shards.iter() {
            let shard = Self::lock(m);
            valid += shard
                .values()
                .filter(|p| {
                    p.last_rx
                        .is_some_and(|t| now.saturating_duration_since(t) < self.cfg.peer_lifetime)
                })
                .count();
        }
        (valid, self.len.load(Ordering::Relaxed))
    }
}

impl Peer {
    fn new(now: Instant, mapping: SocketAddrV4, trusted: bool) -> Self {
        Peer {
            mapping,
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

    #[test]
    fn queue_and_table_are_bounded() {
        let cfg = RelayConfig {
            queue_packets: 2,
            max_peers: 1,
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
        let other = Address {
            mapped: "198.51.100.11:1".parse().unwrap(),
            ..c
        };
        assert_eq!(
            peers.handle_transmit(t0, &other, b"1"),
            TxDecision::Drop(TxDrop::TableFull)
        );
        assert_eq!(
            peers.handle_receive(t0, &other.encode(), other.mapped),
            Err(TxDrop::TableFull)
        );
    }

    #[test]
    fn idle_entries_expire() {
        let peers = Peers::new(RelayConfig::default());
        let t0 = Instant::now();
        let c = client();
        peers.handle_receive(t0, &c.encode(), c.mapped).unwrap();
        peers.handle_timeout(t0 + Duration::from_secs(299), 0, 1, |_| {});
        assert_eq!(peers.count(t0).1, 1);
        peers.handle_timeout(t0 + Duration::from_secs(301), 0, 1, |_| {});
        assert_eq!(peers.count(t0).1, 0);
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
