//! ICMP errors gate64 itself sends when NAT64 refuses a packet (RFC 7915 §4-5, RFC 6146
//! §3.5), rate-limited per worker (RFC 4443 §2.4 (f), RFC 1812 §4.3.2.8) and never in answer
//! to another error. They leave through the TUN: the kernel routes them like any packet.

use crate::Worker;
use gate64_nat64::Nat64;
use gate64_nat64::stateful::{self, Error as NatError};
use gate64_wire::{icmpv4, icmpv6, ipv4, ipv6};
use std::time::Instant;

/// ICMP errors gate64 itself sends per worker per second, and the burst allowed.
const ICMP_ERRORS_PER_SEC: f64 = 200.0;
const ICMP_ERROR_BURST: f64 = 50.0;

/// A plain token bucket for the ICMP errors one worker sends.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    tokens: f64,
    last: Option<Instant>,
}

impl Default for TokenBucket {
    fn default() -> Self {
        TokenBucket {
            tokens: ICMP_ERROR_BURST,
            last: None,
        }
    }
}

impl TokenBucket {
    fn take(&mut self, now: Instant) -> bool {
        let elapsed = self
            .last
            .map_or(1.0, |l| now.saturating_duration_since(l).as_secs_f64());
        self.last = Some(now);
        self.tokens = (self.tokens + elapsed * ICMP_ERRORS_PER_SEC).min(ICMP_ERROR_BURST);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Worker {
    /// Sends the ICMPv6 error RFC 7915 / RFC 6146 ask for when `e` stopped `offending`.
    pub(crate) fn icmpv6_error_for(
        &mut self,
        nat: &Nat64,
        now: Instant,
        e: &NatError,
        offending: &[u8],
    ) {
        let Some(error) = e.icmpv6_reply() else {
            return;
        };
        if is_icmpv6_error(offending) || !self.icmp_budget.take(now) {
            return;
        }
        let Ok(p) = ipv6::Packet::new_checked(offending) else {
            return;
        };
        let src = match error {
            // "Unreachable for you" (pool exhausted, the client's own limit) comes from the
            // destination itself: the NAT64 answers for every Pref64 address, and a Teredo
            // client accepts native packets only from peers it has tested (RFC 4380 §5.2.4,
            // Miredo), which the destination is and Pref64 + pool4 is not.
            icmpv6::ErrorRepr::DstUnreachable { .. } => p.dst(),
            _ => nat
                .pool()
                .first()
                .and_then(|a| nat.prefix().embed(*a))
                .unwrap_or(self.shared.cfg.corp_address),
        };
        let mut out = vec![0u8; 1280];
        let n = stateful::emit_icmpv6_error(&mut out, src, p.src(), &error, offending);
        if n > 0 {
            out.truncate(n);
            self.tun_writes.push_back(out);
        }
    }

    /// The ICMPv4 error for an IPv4 packet NAT64 could not take.
    pub(crate) fn icmpv4_error_for(
        &mut self,
        nat: &Nat64,
        now: Instant,
        e: &NatError,
        offending: &[u8],
    ) {
        let Some(error) = e.icmpv4_reply() else {
            return;
        };
        if is_icmpv4_error(offending) || !self.icmp_budget.take(now) {
            return;
        }
        let Ok(p) = ipv4::Packet::new_checked(offending) else {
            return;
        };
        let (Some(&from), to) = (nat.pool().first(), p.src()) else {
            return;
        };
        if to.is_broadcast() || to.is_multicast() || to.is_unspecified() {
            return;
        }
        let mut out = vec![0u8; 576];
        let n = stateful::emit_icmpv4_error(&mut out, from, to, &error, offending);
        if n > 0 {
            out.truncate(n);
            self.tun_writes.push_back(out);
        }
    }
}

/// True for an ICMPv6 error message (never answered with another error, RFC 4443 §2.4 (e)).
fn is_icmpv6_error(p: &[u8]) -> bool {
    ipv6::Packet::new_checked(p).is_ok_and(|p| {
        p.next_header() == ipv6::NH_ICMPV6
            && p.payload().first().is_some_and(|&t| icmpv6::is_error(t))
    })
}

/// True for an ICMPv4 error message (RFC 1812 §4.3.2.7: never answered with an error).
fn is_icmpv4_error(p: &[u8]) -> bool {
    ipv4::Packet::new_checked(p).is_ok_and(|p| {
        p.protocol() == ipv4::PROTO_ICMP
            && p.payload().first().is_some_and(|&t| icmpv4::is_error(t))
    })
}
