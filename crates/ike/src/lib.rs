//! gate64's IKEv2 (RFC 7296): sans-IO, time passed in by the caller.
#![forbid(unsafe_code)]

pub mod auth;
