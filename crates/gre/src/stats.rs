//! Counters: per tunnel and per drop reason. Single writer (the thread that owns the
//! [`crate::Gre`]; each [`crate::Gre::sender`] copy has counters of its own), read by the
//! metrics exporter from any thread, so each counter is an atomic updated with a load and a
//! store (no locked instruction), as gate64's other stats.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::DropReason;

/// Counters of one tunnel.
#[derive(Debug, Default)]
pub struct TunnelStats {
    /// Inner packets decapsulated from the peer.
    pub rx_packets: AtomicU64,
    /// Bytes of those inner packets.
    pub rx_bytes: AtomicU64,
    /// Inner packets encapsulated towards the peer.
    pub tx_packets: AtomicU64,
    /// Bytes of those inner packets.
    pub tx_bytes: AtomicU64,
    /// Keepalives sent.
    pub keepalives_sent: AtomicU64,
    /// Answers to our keepalives.
    pub keepalives_answered: AtomicU64,
    /// The peer's keepalives sent back to it.
    pub keepalives_reflected: AtomicU64,
    /// 1 while the tunnel is up (keepalives answered, or keepalives off), else 0.
    pub up: AtomicU64,
}

/// Drops by reason, indexed by [`DropReason::index`].
#[derive(Debug, Default)]
pub struct DropStats {
    counts: [AtomicU64; DropReason::ALL.len()],
}

impl DropStats {
    /// The count for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason.index()].load(Ordering::Relaxed)
    }

    /// Counts one drop; also for the driver's own refusals (a TUN read it cannot split).
    pub fn count(&self, reason: DropReason) {
        bump(&self.counts[reason.index()], 1);
    }
}

/// Adds `n` to a single-writer counter.
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}
