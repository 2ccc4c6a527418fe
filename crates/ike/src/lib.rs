//! gate64's IKEv2 (RFC 7296), sans-IO: the message codec ([`message`]), the key schedule and
//! the encrypted payload ([`keys`], RFC 5282 AES-GCM, RFC 5903 / RFC 8031 key exchange),
//! certificate authentication ([`auth`]) and the responder state machine ([`responder`]).
//!
//! Nothing here opens a socket or reads a clock: the caller passes datagrams and `now`, and
//! polls transmits, events and the next deadline (the quinn shape). Parsers never panic on
//! input; every refusal is reported as an event with its reason. All cryptography comes from
//! aws-lc-rs.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
pub mod child_sa;
pub mod initiator;
pub mod keys;
pub mod message;
pub mod mid_sync;
pub mod responder;
/// RFC 3948's UDP encapsulation rules and ports, shared with the ESP data path.
pub use gate64_esp::udp_encap;
