//! Zero-copy packet views shared by gate64's protocol cores.
//!
//! Covered: the IPv6 fixed header (RFC 8200 §3), the Internet checksum with the IPv6
//! pseudo-header (RFC 8200 §8.1), the Teredo authentication and origin-indication headers
//! (RFC 4380 §5.1.1) and the "global unicast" IPv4 test Teredo relies on (RFC 4380 §5.2.4).
//!
//! Contract: every parser takes untrusted bytes and returns [`Error`] instead of panicking;
//! nothing here allocates. Emitters write into a caller-owned buffer and return the number of
//! bytes written, or [`Error::Truncated`] when the buffer is too small.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod checksum;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod offload;
pub mod teredo;

/// Why a packet could not be parsed. `Copy` so the hot path never allocates on errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Fewer bytes than the header or the length fields announce.
    Truncated,
    /// A field holds a value the protocol forbids.
    Malformed,
    /// Well-formed but a feature we do not implement (e.g. jumbograms).
    Unsupported,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated packet",
            Error::Malformed => "malformed packet",
            Error::Unsupported => "unsupported packet",
        })
    }
}

impl std::error::Error for Error {}

/// Result alias for wire parsing.
pub type Result<T> = core::result::Result<T, Error>;
