//! DNS64 counters: plain atomics, so the metrics exporter can read them without depending on
//! the DNS crates. The DNS64 server (`gate64_io::dns64`) counts into one shared [`Dns64Stats`]
//! from its UDP threads and resolver tasks.

use std::sync::atomic::{AtomicU64, Ordering};

/// How a DNS64 query was answered: the `result` label of `gate64_dns64_queries_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dns64Result {
    /// AAAA records synthesized from A records (RFC 6147 §5.1.7), including the local
    /// `ipv4only.arpa` answer (RFC 7050), or a PTR answer translated from `in-addr.arpa`
    /// (RFC 6147 §5.3.1).
    Synthesized = 0,
    /// The upstream answer passed on with NOERROR: real AAAA records, other query types,
    /// empty answers.
    Native = 1,
    /// The name does not exist (NXDOMAIN), passed on as is.
    Nxdomain = 2,
    /// SERVFAIL or another error code: every upstream failed, timed out or refused, or the
    /// query was not supported (e.g. NOTIMP for other opcodes).
    Error = 3,
    /// A query that could not be parsed: answered FORMERR when its header was readable,
    /// dropped otherwise.
    Malformed = 4,
}

impl Dns64Result {
    /// Every result, in label order.
    pub const ALL: [Dns64Result; 5] = [
        Dns64Result::Synthesized,
        Dns64Result::Native,
        Dns64Result::Nxdomain,
        Dns64Result::Error,
        Dns64Result::Malformed,
    ];

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Dns64Result::Synthesized => "synthesized",
            Dns64Result::Native => "native",
            Dns64Result::Nxdomain => "nxdomain",
            Dns64Result::Error => "error",
            Dns64Result::Malformed => "malformed",
        }
    }
}

/// The DNS64 server's counters. Several threads write (UDP threads and resolver tasks), so
/// these use `fetch_add`; at DNS rates the shared cache line costs nothing measurable.
#[derive(Debug, Default)]
pub struct Dns64Stats {
    queries: [AtomicU64; Dns64Result::ALL.len()],
    cache_hits: AtomicU64,
}

impl Dns64Stats {
    /// Counts one answered (or dropped) query.
    #[inline]
    pub fn count(&self, r: Dns64Result) {
        self.queries[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one query answered from the cache (also counted by [`Dns64Stats::count`]).
    #[inline]
    pub fn cache_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Queries counted for a result.
    pub fn queries(&self, r: Dns64Result) -> u64 {
        self.queries[r as usize].load(Ordering::Relaxed)
    }

    /// Queries answered from the cache.
    pub fn cache_hits(&self) -> u64 {
        self.cache_hits.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_result() {
        let s = Dns64Stats::default();
        s.count(Dns64Result::Synthesized);
        s.count(Dns64Result::Synthesized);
        s.count(Dns64Result::Malformed);
        s.cache_hit();
        assert_eq!(s.queries(Dns64Result::Synthesized), 2);
        assert_eq!(s.queries(Dns64Result::Native), 0);
        assert_eq!(s.queries(Dns64Result::Malformed), 1);
        assert_eq!(s.cache_hits(), 1);
        let labels: Vec<_> = Dns64Result::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            labels,
            ["synthesized", "native", "nxdomain", "error", "malformed"]
        );
    }
}
