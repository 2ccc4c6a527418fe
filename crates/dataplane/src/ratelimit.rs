//! The data plane's rate limits: per-address token buckets in a fixed table
//! ([`RateLimiter`], shared with the IKE driver and responder through `gate64-wire`).

pub use gate64_wire::ratelimit::RateLimiter;

/// Buckets per rate limiter (8 bytes each): collisions stay rare at any realistic number of
/// simultaneous sources.
pub(crate) const LIMITER_SLOTS: usize = 1 << 16;
