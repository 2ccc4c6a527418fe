//! The NAT64 stage (RFC 6146 stateful, RFC 7915 translation, in place): IPv6 to Pref64 from a
//! client or a corporate IPv6 host becomes IPv4 for the TUN; IPv4 from the TUN to pool4
//! becomes IPv6 for the client that holds the binding. Refusals that RFC 7915 / RFC 6146
//! answer get an ICMP error ([`crate::icmp`]).

use crate::egress::Elsewhere;
use crate::stats::Nat64Direction;
use crate::{DropReason, Verdict, Worker};
use gate64_nat64::TranslateError;
use gate64_nat64::state::TableError;
use gate64_nat64::stateful::Error as NatError;
use std::sync::Arc;
use std::time::Instant;

impl Worker {
    /// NAT64 of the IPv6 packet `buf[start..end]` to Pref64: the IPv4 result goes to the TUN;
    /// a hairpinned one (RFC 6146 §3.8) to the client that owns the destination.
    pub(crate) fn nat64_from_v6(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let shared = Arc::clone(&self.shared);
        let nat = shared.cfg.nat64.as_ref().ok_or(DropReason::NoRoute)?;
        match nat.v6_to_v4(now, buf, start, end, &mut self.scratch) {
            Ok(t) => {
                self.stats.nat64_translation(Nat64Direction::V6ToV4);
                if t.hairpin {
                    self.stats.nat64_translation(Nat64Direction::V4ToV6);
                    return self.deliver_to_client(now, buf, t.start, t.end, Elsewhere::Drop);
                }
                Ok(Verdict::Tun {
                    start: t.start,
                    end: t.end,
                })
            }
            Err(e) => {
                let offending = buf.get(start..end).unwrap_or_default();
                self.icmpv6_error_for(nat, now, &e, offending);
                Err(e.into())
            }
        }
    }

    /// NAT64 of the IPv4 packet `buf[start..end]` read from the TUN: the IPv6 result goes to
    /// the client holding the binding.
    pub(crate) fn nat64_from_v4(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let shared = Arc::clone(&self.shared);
        let nat = shared.cfg.nat64.as_ref().ok_or(DropReason::NoRoute)?;
        match nat.v4_to_v6(now, buf, start, end, &mut self.scratch) {
            Ok(t) => {
                self.stats.nat64_translation(Nat64Direction::V4ToV6);
                // A mapping of a corporate IPv6 host (`route_prefix`) is not a client's: the
                // IPv6 packet goes back to the kernel, which routes it there.
                self.deliver_to_client(now, buf, t.start, t.end, Elsewhere::Tun)
            }
            Err(e) => {
                let offending = buf.get(start..end).unwrap_or_default();
                self.icmpv4_error_for(nat, now, &e, offending);
                Err(e.into())
            }
        }
    }
}

impl From<NatError> for DropReason {
    fn from(e: NatError) -> Self {
        match e {
            NatError::Translate(t) => t.into(),
            NatError::Table(t) => t.into(),
            NatError::NotOurs => DropReason::NoRoute,
            NatError::BadAddress => DropReason::Nat64BadAddress,
            NatError::Fragment => DropReason::Nat64Fragment,
            NatError::Protocol => DropReason::Nat64Untranslatable,
        }
    }
}

impl From<TranslateError> for DropReason {
    fn from(e: TranslateError) -> Self {
        match e {
            TranslateError::Truncated => DropReason::Truncated,
            TranslateError::Malformed | TranslateError::BadHeaderChecksum => DropReason::Malformed,
            TranslateError::TimeExceeded => DropReason::TtlExceeded,
            TranslateError::PacketTooBig { .. } | TranslateError::FragmentationNeeded { .. } => {
                DropReason::PacketTooBig
            }
            // Nothing the translator builds an equivalent for; the ICMP errors some of these
            // call for went out (`icmpv6_error_for`, `icmpv4_error_for`) before the drop.
            TranslateError::Unsupported
            | TranslateError::BufferTooSmall
            | TranslateError::NeedsFragmentation { .. }
            | TranslateError::ParameterProblem { .. }
            | TranslateError::HeaderAfterFragment
            | TranslateError::SourceRoute
            | TranslateError::UdpZeroChecksum
            | TranslateError::BadChecksum
            | TranslateError::NotInPlace
            | TranslateError::Untranslatable => DropReason::Nat64Untranslatable,
        }
    }
}

impl From<TableError> for DropReason {
    fn from(e: TableError) -> Self {
        match e {
            TableError::NoBinding => DropReason::Nat64NoBinding,
            TableError::NoSession => DropReason::Nat64NoSession,
            TableError::PoolExhausted => DropReason::Nat64PoolExhausted,
            TableError::SessionLimit => DropReason::Nat64SessionLimit,
            TableError::ClientSessionLimit => DropReason::Nat64ClientSessionLimit,
            TableError::ClientPortLimit => DropReason::Nat64ClientPortLimit,
            // Errors of setting the table up, never of a packet.
            TableError::StaticConflict | TableError::Config => DropReason::Nat64Untranslatable,
        }
    }
}
