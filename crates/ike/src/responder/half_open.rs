//! The count of half-open IKE SAs (IKE_SA_INIT answered, IKE_AUTH not yet), in total and per
//! source.
//!
//! Each half-open IKE SA keeps the [`Charge`] it was counted under and is released against it,
//! not against the address its later requests come from: IKE_AUTH may move it (to port 4500,
//! or through another NAT mapping), and releasing against the new address would leave the
//! first source's count up for good, until that source could open no IKE SA at all.

use std::collections::HashMap;
use std::net::IpAddr;

/// Whom a half-open IKE SA is counted against.
pub(crate) type SourceKey = IpAddr;

/// What one half-open IKE SA was counted under; released exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Charge {
    key: SourceKey,
}

/// The half-open IKE SAs of one responder.
#[derive(Debug, Default)]
pub(crate) struct HalfOpen {
    count: usize,
    by_source: HashMap<SourceKey, usize>,
}

impl HalfOpen {
    /// Half-open IKE SAs in all.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Half-open IKE SAs counted against `ip`'s source key.
    pub(crate) fn of_source(&self, ip: IpAddr) -> usize {
        self.by_source.get(&ip).copied().unwrap_or(0)
    }

    /// Counts a new half-open IKE SA from `ip`.
    pub(crate) fn charge(&mut self, ip: IpAddr) -> Charge {
        self.count += 1;
        *self.by_source.entry(ip).or_insert(0) += 1;
        Charge { key: ip }
    }

    /// Uncounts the half-open IKE SA that was charged `charge`.
    pub(crate) fn release(&mut self, charge: Charge) {
        self.count = self.count.saturating_sub(1);
        if let Some(n) = self.by_source.get_mut(&charge.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_source.remove(&charge.key);
            }
        }
    }

    /// Source keys with a count (the table holds none at zero).
    #[cfg(test)]
    pub(crate) fn sources(&self) -> usize {
        self.by_source.len()
    }
}
