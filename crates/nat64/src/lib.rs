//! NAT64 for gate64, sans-IO: IPv4-embedded IPv6 addresses and stateless IP/ICMP translation.
//!
//! Covered:
//! - [`addr`]: RFC 6052 §2.2 address embedding and extraction for prefix lengths 32, 40, 48,
//!   56, 64 and 96 (the u octet, bits 64–71, is always zero), and the §3.1 rule that the
//!   Well-Known Prefix 64:ff9b::/96 carries only global IPv4 addresses.
//! - [`translate`]: RFC 7915 stateless IP/ICMP translation: §4.1/§5.1 header fields (Traffic
//!   Class/TOS, hop limit/TTL decrement, DF and identification, Fragment header ↔ IPv4
//!   fragment fields, extension headers skipped, Routing header with Segments Left ≠ 0 and
//!   unexpired source routes refused), §4.2/§5.2 ICMP type/code, MTU and pointer mapping,
//!   §4.3/§5.3 translation of the packet quoted in an ICMP error, §4.5/§5.5 TCP/UDP checksum
//!   updates (RFC 1624 incremental; zero IPv4 UDP checksums computed afresh).
//!   [`translate::v4_to_v6_fragments`] splits IPv4 packets without DF into IPv6 fragments
//!   (§4.1). Not yet: RFC 4884 ICMP extensions (treated as part of the quoted packet).
//! - [`state`]: RFC 6146 §3 stateful tables: BIB and sessions per protocol,
//!   endpoint-independent mapping, endpoint-independent or address-dependent filtering, paired
//!   pooling with port range and parity preservation, the §3.5.2.2 TCP state machine, §4
//!   timers as parameters, RFC 6888 §4 BIB events; sharded by IPv6 client.
//! - [`stateful`]: the two together on whole packets for multi-threaded drivers: one lock per
//!   shard, in-place translation of TCP/UDP/ICMP echo with the port rewrite, ICMP errors with
//!   their quoted packet mapped through the BIB, hairpinning (RFC 6146 §3.8), and builders
//!   for the ICMP errors the NAT64 itself sends (from `gate64_wire`'s `ErrorRepr`s).
//!
//! Header layouts are `gate64_wire`'s checked views and `Repr`s; this crate holds the
//! translation and table rules only.
//!
//! Contract: nothing here opens a socket, reads a clock or draws random numbers. Every function
//! taking packet bytes treats them as untrusted and returns an error instead of panicking.
//! The translate path does not allocate: callers pass the output buffer and get its used
//! length back. Conditions where RFC 7915 wants an ICMP error sent back are error variants
//! naming that ICMP message; building and sending it is the caller's job.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod state;
pub mod stateful;
pub mod translate;

pub use addr::{Prefix, PrefixError};
pub use stateful::{Nat64, Settings, Translated};
pub use translate::{Config, TranslateError, v4_to_v6, v4_to_v6_fragments, v6_to_v4};
