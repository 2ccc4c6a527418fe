//! IKE per client, shed on the road: a client's IKE to the IPsec endpoint
//! passes the policy without an SA ([`crate::policy`]), then the TUN, the kernel's UDP socket
//! and the IKE responder, whose IKE_SA_INIT answers (a Diffie-Hellman share, or a cookie, RFC
//! 7296 §2.6) cost far more than this check. So each client gets
//! `[ipsec] ike_packets_per_source_per_sec` packets per second on each worker, as many again
//! at once, and the rest is dropped here as [`DropReason::IkeRateLimited`] before any of
//! that work. One client's flood then cannot fill the IKE socket's receive buffer, where the
//! kernel would drop every client's IKE alike.
//!
//! A client is what its transport stage vouched for: a Teredo address (its mapping, RFC 4380
//! §4), an IP-HTTPS connection's /64, an SA's peer. The buckets are a fixed table
//! ([`RateLimiter`]): O(1) per packet, nothing a flood of sources can grow.
//!
//! A second table holds each host to [`HOST_SHARE`] clients' worth: all Teredo mappings of
//! one public IPv4 address (one host behind one NAT can open a mapping per port). Shed as the
//! same [`DropReason::IkeRateLimited`]. An IP-HTTPS /64 is a lease of gate64's own pool, one
//! per connection: the /64s of one /48 are unrelated clients, not a site, so each is a host
//! of its own here, and how many one address holds is the listener's bound
//! (`iphttps.max_connections_per_source`).

use crate::ratelimit::{LIMITER_SLOTS, RateLimiter};
use crate::{ClientBinding, DropReason, Worker};
use std::net::Ipv6Addr;
use std::time::Instant;

/// The road's IKE limiter at `per_sec` packets per second per client, with hash key `key`.
pub(crate) fn limiter(per_sec: u32, key: u64) -> RateLimiter {
    // A full handshake for both tunnels with a fragmented certificate chain (RFC 7383) and a
    // cookie round trip is a dozen packets; the burst lets it through in one go.
    RateLimiter::new(
        per_sec,
        per_sec.saturating_mul(2),
        LIMITER_SLOTS,
        key.rotate_left(7),
    )
}

/// How many clients' worth of IKE one host (see [`host_key`]) may send.
pub(crate) const HOST_SHARE: u32 = 4;

/// The road's per-host IKE limiter, `per_sec` being the per-client rate.
pub(crate) fn host_limiter(per_sec: u32, key: u64) -> RateLimiter {
    let per_sec = per_sec.saturating_mul(HOST_SHARE);
    RateLimiter::new(
        per_sec,
        per_sec.saturating_mul(2),
        LIMITER_SLOTS,
        key.rotate_left(29),
    )
}

/// The host a client belongs to when it is narrower than one: a Teredo mapping's public
/// IPv4 address (IPv4-mapped); `None` for an IP-HTTPS /64 (a host of its own) and for an
/// SA's peer, already authenticated.
fn host_key(from: &ClientBinding) -> Option<Ipv6Addr> {
    match from {
        ClientBinding::Teredo { address, .. } => Some(address.mapped.ip().to_ipv6_mapped()),
        ClientBinding::Iphttps { .. } | ClientBinding::Ipsec { .. } => None,
    }
}

impl Worker {
    /// Admits one IKE packet to the endpoint from `from`, or sheds it.
    pub(crate) fn admit_ike(
        &mut self,
        now: Instant,
        from: &ClientBinding,
    ) -> Result<(), DropReason> {
        if !self.ike_limiter.allow_v6(now, client_key(from)) {
            return Err(DropReason::IkeRateLimited);
        }
        match host_key(from) {
            Some(host) if !self.ike_host_limiter.allow_v6(now, host) => {
                Err(DropReason::IkeRateLimited)
            }
            _ => Ok(()),
        }
    }
}

/// The address that names the client: every address of an IP-HTTPS /64 is one client.
fn client_key(from: &ClientBinding) -> Ipv6Addr {
    match from {
        ClientBinding::Teredo { address, .. } => address.encode(),
        ClientBinding::Iphttps { prefix } => *prefix,
        ClientBinding::Ipsec { outer, .. } => *outer,
    }
}
