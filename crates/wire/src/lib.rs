//! Zero-copy packet views shared by gate64's protocol cores: every header layout gate64
//! reads or writes lives here.
//!
//! Covered, each as a checked view (`Packet`: `new_checked` validates lengths once, then the
//! field accessors cannot panic; `field` names the byte ranges) and a `Repr` to parse and
//! emit, in the style of smoltcp's `wire`:
//! - [`ipv4`]: the IPv4 header (RFC 791 §3.1) and the RFC 4380 §5.2.4 "global" test;
//! - [`ipv6`]: the fixed header (RFC 8200 §3), the extension-header walker (§4) and the
//!   Fragment header (§4.5);
//! - [`tcp`] (RFC 9293 §3.1), [`udp`] (RFC 768);
//! - [`icmpv4`] (RFC 792) and [`icmpv6`] (RFC 4443, RFC 4861 §4.1–4.2, §4.6), with an
//!   `ErrorRepr` for the error messages;
//! - [`gre`]: the GRE header (RFC 2784, RFC 2890 key and sequence) and the Cisco-style
//!   keepalive;
//! - [`teredo`]: the authentication and origin-indication headers (RFC 4380 §5.1.1);
//! - [`virtio_net`]: the TUN's virtio-net header, and [`offload`]: GSO/GRO on top of it;
//! - [`checksum`]: the Internet checksum (RFC 1071), its incremental update (RFC 1624) and
//!   the pseudo-headers: the only checksum code in gate64.
//!
//! For the standard headers the proptests check the views against etherparse's zero-copy
//! header slices (a dev-dependency); the views themselves are hand-written because they are
//! the hot path and measured as fast or faster (`benches/views.rs`; numbers and reasons in
//! `docs/architecture.md`, "Header views are hand-written, checked against etherparse").
//!
//! Contract: every parser takes untrusted bytes and returns [`Error`] instead of panicking;
//! nothing here allocates. `new_unchecked` views may panic on short buffers and are for
//! buffers the caller has checked. Emitters write into a caller-owned buffer and return the
//! number of bytes written, or [`Error::Truncated`] when the buffer is too small. Checksum
//! verification is skipped under `cfg(fuzzing)` so fuzzers reach deeper code.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod checksum;
pub mod gre;
mod icmp;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod offload;
pub mod ratelimit;
pub mod tcp;
pub mod teredo;
pub mod udp;
pub mod virtio_net;

/// Why a packet could not be parsed. `Copy` so the hot path never allocates on errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer bytes than the header or the length fields announce.
    #[error("truncated packet")]
    Truncated,
    /// A field holds a value the protocol forbids.
    #[error("malformed packet")]
    Malformed,
    /// Well-formed but a feature we do not implement (e.g. jumbograms).
    #[error("unsupported packet")]
    Unsupported,
}

/// Result alias for wire parsing.
pub type Result<T> = core::result::Result<T, Error>;
