//! gate64's packet pipeline, sans-IO: transport decapsulation, client table and anti-spoofing,
//! the policy step where the IPsec check sits, routing, and the reverse path.
//!
//! Drivers (in `gate64-io`) own sockets, the TUN device and the clock; they hand each packet to
//! a [`Worker`] with `now` and send what the returned [`Verdict`] names.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clients;
pub mod dns64;
mod drop;
pub mod pipeline;
pub mod ratelimit;
pub mod stats;

pub use clients::{ClientQueue, ClientTable, Delivery};
pub use dns64::{Dns64Result, Dns64Stats};
pub use drop::Drop;
pub use pipeline::IphttpsEgress;
pub use pipeline::{
    BindingLog, DataplaneConfig, HEADROOM, MAX_PACKET, Prefix, Shared, Transmit, Verdict, Worker,
};
pub use stats::{Direction, Nat64Direction, Side, Stats, TlsResult};

/// Gauges computed at scrape time from shared tables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Teredo clients heard from within the peer lifetime (RFC 4380 §5.2.4: 30 s).
    pub teredo_clients: u64,
    /// Entries in the Teredo peer table, including stale and pending ones.
    pub teredo_peers: u64,
    /// IP-HTTPS connections with their link up.
    pub iphttps_clients: u64,
    /// NAT64 tables; `None` when NAT64 is off.
    pub nat64: Option<Nat64Gauges>,
}

/// NAT64 table sizes, per protocol in the order TCP, UDP, ICMP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Nat64Gauges {
    /// BIB entries (each holds one pool4 transport address).
    pub bib_entries: [u64; 3],
    /// Sessions.
    pub sessions: [u64; 3],
    /// pool4 transport addresses per protocol (addresses × ports).
    pub pool_capacity: u64,
    /// Allocations that found pool4 exhausted, since start.
    pub pool_exhausted: u64,
}
