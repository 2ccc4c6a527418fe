//! DNS64 for gate64 (RFC 6147): a forwarding resolver that synthesizes AAAA records from A
//! records under the NAT64 prefix, so IPv6-only clients reach IPv4-only corporate hosts
//! through gate64's NAT64.
//!
//! Layers, from pure to I/O:
//! - [`synth`]: the RFC 6147 rules as pure functions, and [`synth::Plan`], the sans-IO state
//!   machine of one query (which upstream questions to ask, what to answer). Covers §5.1.1–
//!   §5.1.7 (when to synthesize, exclusions, TTL, CNAME chains), §5.3.1 (PTR for the prefix,
//!   answered from `in-addr.arpa`), §5.5 (CD and DO; never AD on synthetic data), RFC 7050 /
//!   RFC 8880 (`ipv4only.arpa`). Addresses are embedded by `gate64-nat64` (RFC 6052).
//! - [`cache`]: a bounded cache of final answers in wire form, answered without a full parse.
//! - [`upstream`]: UDP to the upstream resolvers, TCP after truncation, failover.
//! - [`handler`]: [`Dns64`], which ties them together, and the hickory-server
//!   `RequestHandler`.
//! - [`server`]: [`serve`]: UDP through a fast path of plain threads (`recvmmsg`, cache hits
//!   answered in place), TCP and cache misses through tokio and hickory-server.
//!
//! # Contract
//!
//! - No input from the network panics: queries that cannot be parsed are answered FORMERR when
//!   their header can be read and dropped otherwise, and counted as `malformed`. Responses sent
//!   to the server are never answered.
//! - Each query is counted once in [`gate64_dataplane::Dns64Stats`] by how it ended
//!   (`synthesized`, `native`, `nxdomain`, `error`, `malformed`).
//! - Time is read only in [`server`] and [`handler`] (cache ages); [`synth`] and [`cache`] take
//!   `now` as a parameter.
#![warn(missing_docs)]

pub mod cache;
pub mod handler;
pub mod server;
pub mod synth;
pub mod upstream;

pub use handler::{Dns64, Handler};
pub use server::{Server, Settings, serve};
pub use synth::{Synthesizer, UpstreamError};
