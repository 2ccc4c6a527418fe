//! gate64's packet pipeline, sans-IO: transport decapsulation, client table and anti-spoofing,
//! the policy step where the IPsec check sits, routing, and the reverse path.
//!
//! Drivers (in `gate64-io`) own sockets, the TUN device and the clock; they hand each packet to
//! a [`Worker`] with `now` and send what the returned [`Verdict`] names. One file per stage,
//! each readable top to bottom:
//!
//! ```text
//! worker.rs   entry points: handle_teredo | handle_iphttps | handle_tun | handle_timeout
//! teredo.rs   Teredo transport: classify, RS/RA, bubbles, forwarding and relaying to clients
//! iphttps.rs  IP-HTTPS transport: into a connection's send queue
//! ingress.rs  the one road for a client's packet: route, then policy, then the next stage
//! ipsec.rs    ESP: opened at ingress (then the road again), sealed towards a client
//! policy.rs   the security step: corporate network, NAT64, other clients only out of an SA
//! ike_limit.rs  IKE to the endpoint per client, shed before the TUN
//! nat64.rs    RFC 6146 translation both ways
//! icmp.rs     ICMP errors gate64 sends
//! egress.rs   TUN -> clients
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clients;
mod config;
pub mod dns64;
mod drop;
mod egress;
mod icmp;
mod ike_limit;
mod ingress;
mod iphttps;
mod ipsec;
pub mod ipsec_stats;
mod nat64;
mod policy;
pub mod ratelimit;
mod reassembly;
mod shared;
pub mod stats;
mod teredo;
mod verdict;
mod worker;

pub use clients::{ClientQueue, ClientTable, Delivery, QueueBudget};
pub use config::{BindingLog, DataplaneConfig, HEADROOM, Ipsec4, MAX_PACKET, Prefix, Prefix4};
pub use dns64::{Dns64Result, Dns64Stats};
pub use drop::DropReason;
pub use ingress::ClientBinding;
pub use iphttps::IphttpsLink;
pub use ipsec_stats::{
    ChainCacheResult, DisconnectReason, IkeResult, IkeShedReason, IpsecStats, MobikeResult,
    OcspResult, RekeyKind,
};
pub use shared::Shared;
pub use stats::{Direction, Nat64Direction, Side, Stats, TlsResult};
pub use verdict::{GSO_MAX_BYTES, GSO_MAX_SEGMENTS, Gso, Transmit, Verdict};
pub use worker::{TIMER_INTERVAL, Worker};

/// Gauges computed at scrape time from shared tables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Teredo clients heard from within the peer lifetime (RFC 4380 §5.2.4: 30 s).
    pub teredo_clients: u64,
    /// Entries in the Teredo peer table, including stale and pending ones.
    pub teredo_peers: u64,
    /// IP-HTTPS connections with their link up.
    pub iphttps_clients: u64,
    /// Bytes waiting in all IP-HTTPS send queues (the one budget's use).
    pub iphttps_queued_bytes: u64,
    /// The budget of all IP-HTTPS send queues together (`iphttps.queue_budget_bytes`).
    pub iphttps_queue_budget_bytes: u64,
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

#[cfg(test)]
mod tests;
