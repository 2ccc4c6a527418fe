//! Test helpers for gate64: a network-namespace harness, the standard Teredo lab topology, a
//! tiny Prometheus text parser and a seeded Teredo flood generator.
//!
//! Contract:
//! - Everything that touches the system ([`Netns`], [`Topology`]) needs root and `ip netns`.
//!   Tests check [`netns_or_skip`] first: where namespaces are unavailable the test fails,
//!   naming what is missing, unless the run opted out (`scripts/test --unit-only`); a test
//!   missing a tool calls [`skip_or_fail`] the same way. No test passes by skipping unasked.
//! - Every external command runs with a timeout; every wait is bounded ([`wait_until`]).
//! - Cleanup happens on `Drop`, including while a test panics: spawned processes are stopped
//!   (SIGTERM, then SIGKILL), every process left in a namespace is killed and the namespace is
//!   deleted. Namespaces left behind by a test process that was killed outright are removed the
//!   next time a test creates one.
//! - Process output goes to log files in a per-namespace temporary directory. The directory is
//!   removed on a clean drop and kept (its path printed) when the test panicked.
//! - [`flood`] is pure packet generation plus a paced UDP sender; the `teredo-flood` binary
//!   is a thin command-line wrapper around it.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod bird;
pub mod capture;
pub mod flood;
pub mod freeradius;
pub mod ike_auth_flood;
pub mod keepalived;
pub mod metrics;
mod netns;
pub mod ovs;
mod skip;
pub mod strongswan;
mod topology;
mod wait;

pub use bird::{Bird, Neighbor};
pub use keepalived::{Keepalived, Vrrp, holds_address};
pub use metrics::Metrics;
pub use netns::{Netns, Process, find_tool, http_get, netns_available, netns_or_skip};
pub use ovs::{GrePeer, Ovs};
pub use skip::{SKIP_LOG_ENV, UNIT_ONLY_ENV, skip_or_fail};
pub use topology::{
    ATTACKER_GW_V4, ATTACKER_V4, CLIENT_GW_V4, CLIENT_PORT, CLIENT_V4, CORP_HOST, CORP_HOST_V4,
    CORP_ROUTER, CORP_ROUTER_V4, Gate64Options, IperfResult, METRICS_ADDR, PingStats,
    REFERENCE_RELAY_PORT, SERVER_V4, SERVER_V4_2, TEREDO_PORT, TEREDO_PREFIX, Topology,
    TopologyBuilder, find_binary, gate64_binary,
};
pub use wait::{wait_for, wait_until};
