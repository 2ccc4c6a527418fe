//! gate64's packet pipeline, sans-IO: transport decapsulation, client table and anti-spoofing,
//! the policy step where the IPsec check sits, routing, and the reverse path.
#![warn(missing_docs)]

mod drop;
pub mod stats;

pub use drop::Drop;
pub use stats::{Direction, Side, Stats};

/// Gauges computed at scrape time from shared tables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Teredo clients heard from within the peer lifetime (RFC 4380 §5.2.4: 30 s).
    pub teredo_clients: u64,
    /// Entries in the Teredo peer table, including stale and pending ones.
    pub teredo_peers: u64,
}
