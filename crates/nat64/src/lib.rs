//! NAT64 for gate64, sans-IO: IPv4-embedded IPv6 addresses and stateless IP/ICMP translation.
//!
//! Covered:
//! - [`addr`]: RFC 6052 §2.2 address embedding and extraction for prefix lengths 32, 40, 48,
//!   56, 64 and 96 (the u octet, bits 64–71, is always zero), and the §3.1 rule that the
//!   Well-Known Prefix 64:ff9b::/96 carries only global IPv4 addresses.
//!
//! Contract: nothing here opens a socket, reads a clock or draws random numbers. Every function
//! taking packet bytes treats them as untrusted and returns an error instead of panicking.
#![warn(missing_docs)]

pub mod addr;

pub use addr::{Prefix, PrefixError};
