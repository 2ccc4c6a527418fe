//! The DNS64 server: the driver of `gate64_dns64`'s sans-IO resolver.
//!
//! - [`upstream`]: UDP to the upstream resolvers, TCP after truncation, failover.
//! - [`handler`]: [`Dns64`], which drives a [`gate64_dns64::Resolver`] against the upstreams
//!   and counts every query, and the hickory-server `RequestHandler`.
//! - [`server`]: [`serve`]: UDP through a fast path of plain threads (`recvmmsg` through
//!   [`crate::sys`], cache hits answered in place), TCP and cache misses through tokio and
//!   hickory-server.
//!
//! # Contract
//!
//! - Each query is counted once in [`gate64_dataplane::Dns64Stats`] by its
//!   [`gate64_dns64::Outcome`] (`synthesized`, `native`, `nxdomain`, `error`, `malformed`).
//! - The clock is read here (cache ages), never in `gate64_dns64`.

pub mod handler;
pub mod server;
pub mod upstream;

pub use handler::{Dns64, Handler};
pub use server::{Server, Settings, serve};
