//! ICMP errors gate64 itself sends when NAT64 refuses a packet (RFC 7915 §4-5, RFC 6146
//! §3.5), rate-limited per worker (RFC 4443 §2.4 (f), RFC 1812 §4.3.2.8) and never in answer
//! to another error. They leave through the TUN: the kernel routes them like any packet.

use crate::Worker;
use gate64_nat64::state::TableError;
use gate64_nat64::stateful::{self, Error as NatError};
use gate64_nat64::{Nat64, TranslateError};
use gate64_wire::ipv6;
use std::net::Ipv4Addr;
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
        let (kind, param) = match e {
            NatError::Translate(TranslateError::TimeExceeded) => ((3, 0), 0),
            NatError::Translate(TranslateError::PacketTooBig { mtu }) => ((2, 0), *mtu),
            NatError::Translate(TranslateError::ParameterProblem { pointer }) => ((4, 0), *pointer),
            NatError::Translate(TranslateError::HeaderAfterFragment) => ((1, 1), 0),
            NatError::Table(TableError::PoolExhausted) => ((1, 3), 0),
            _ => return,
        };
        if is_icmpv6_error(offending) || !self.icmp_budget.take(now) {
            return;
        }
        let Ok(p) = ipv6::Packet::new_checked(offending) else {
            return;
        };
        let src = nat
            .pool()
            .first()
            .and_then(|a| nat.prefix().embed(*a))
            .unwrap_or(self.shared.cfg.corp_address);
        let mut out = vec![0u8; 1280];
        let n = stateful::icmpv6_error(&mut out, src, p.src(), kind, param, offending);
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
        let (kind, rest) = match e {
            NatError::Translate(TranslateError::TimeExceeded) => ((11, 0), 0),
            NatError::Translate(TranslateError::FragmentationNeeded { mtu }) => {
                ((3, 4), u32::from(*mtu))
            }
            NatError::Translate(TranslateError::SourceRoute) => ((3, 5), 0),
            NatError::Translate(TranslateError::UdpZeroChecksum) => ((3, 13), 0),
            NatError::Table(TableError::NoBinding) => ((3, 3), 0),
            _ => return,
        };
        if is_icmpv4_error(offending) || !self.icmp_budget.take(now) {
            return;
        }
        let (Some(&from), Some(src)) = (nat.pool().first(), offending.get(12..16)) else {
            return;
        };
        let to = Ipv4Addr::new(src[0], src[1], src[2], src[3]);
        if to.is_broadcast() || to.is_multicast() || to.is_unspecified() {
            return;
        }
        let mut out = vec![0u8; 576];
        let n = stateful::icmpv4_error(&mut out, from, to, kind, rest, offending);
        if n > 0 {
            out.truncate(n);
            self.tun_writes.push_back(out);
        }
    }
}

/// True for an ICMPv6 error message (never answered with another error, RFC 4443 §2.4 (e)).
fn is_icmpv6_error(p: &[u8]) -> bool {
    p.get(6) == Some(&58) && p.get(40).is_some_and(|&t| t < 128)
}

/// True for an ICMPv4 error message (RFC 1812 §4.3.2.7: never answered with an error).
fn is_icmpv4_error(p: &[u8]) -> bool {
    let ihl = usize::from(p.first().map_or(5, |b| b & 0x0f)) * 4;
    p.get(9) == Some(&1)
        && p.get(ihl)
            .is_some_and(|&t| matches!(t, 3 | 4 | 5 | 11 | 12))
}
