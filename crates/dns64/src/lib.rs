//! DNS64 for gate64 (RFC 6147), the protocol part: synthesizing AAAA records from A records
//! under the NAT64 prefix, so IPv6-only clients reach IPv4-only corporate hosts through
//! gate64's NAT64. No sockets, no threads, no clock: the server that drives this crate
//! (UDP fast path, TCP, upstream sockets) is `gate64_io::dns64`.
//!
//! Layers:
//! - [`synth`]: the RFC 6147 rules as pure functions, and [`synth::Plan`], the sans-IO state
//!   machine of one query (which upstream questions to ask, what to answer). Covers §5.1.1–
//!   §5.1.7 (when to synthesize, exclusions, TTL, CNAME chains), §5.3.1 (PTR for the prefix,
//!   answered from `in-addr.arpa`), §5.5 (CD and DO; never AD on synthetic data), RFC 7050 /
//!   RFC 8880 (`ipv4only.arpa`). Addresses are embedded by `gate64-nat64` (RFC 6052).
//! - [`cache`]: a bounded cache of final answers in wire form, answered without a full parse.
//! - [`resolver`]: [`Resolver`], the cache and the plan tied together: a cache hit, or an
//!   [`Exchange`] that names the upstream questions and yields the final [`Reply`].
//! - [`upstream`]: the query sent upstream for a question and the check that an answer
//!   belongs to it.
//!
//! # Contract
//!
//! - No input from the network panics: queries that cannot be parsed are answered FORMERR when
//!   their header can be read and dropped otherwise, with the [`Outcome`] `Malformed`.
//!   Responses sent to the server are never answered.
//! - Every finished query has exactly one [`Outcome`]; the driver counts it.
//! - Nothing here reads the clock except [`cache::Cache::new`] (its epoch): every operation
//!   that needs the time takes `now` as a parameter.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cache;
mod outcome;
pub mod resolver;
pub mod synth;
pub mod upstream;

pub use outcome::Outcome;
pub use resolver::{Exchange, Reply, Resolver, formerr};
pub use synth::{Synthesizer, UpstreamError};
