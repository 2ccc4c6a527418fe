//! The query/answer logic of the resolver, without I/O: [`Resolver`] answers from the cache
//! or opens an [`Exchange`], which names the questions for upstream and, once they are
//! answered, yields the [`Reply`] in wire form (cached, truncated for UDP).
//!
//! The driver (`gate64-io`) asks upstream, reads the clock and counts each [`Reply`]'s
//! [`Outcome`]:
//!
//! ```text
//! let mut exchange = resolver.exchange(request, udp)?;   // Err(reply): answer at once
//! while let Some(ask) = exchange.ask() {
//!     let answer = upstreams.ask(ask).await;
//!     exchange.handle(resolver, answer);
//! }
//! let reply = exchange.finish(resolver, now);
//! ```

use std::time::Instant;

use hickory_proto::op::{Message, ResponseCode};
use tracing::debug;

use crate::Outcome;
use crate::cache::{CLASSIC_UDP, Cache, MAX_KEY, parse_query};
use crate::synth::{Ask, EDNS_PAYLOAD, Plan, Step, Synthesizer, UpstreamError};

/// Upstream questions one exchange may ask. A plan asks at most twice (AAAA, then A); the
/// bound keeps a bug from looping forever.
const MAX_ASKS: u8 = 4;

/// What to send the client, and how the query ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The answer in wire form; `None` means send nothing (a response sent to us, fewer than
    /// 12 bytes, or a plan that gave up).
    pub wire: Option<Vec<u8>>,
    /// How the query ended, to be counted once.
    pub outcome: Outcome,
}

/// The synthesis rules and the answer cache, shared by every listener and thread.
#[derive(Debug)]
pub struct Resolver {
    syn: Synthesizer,
    cache: Cache,
}

impl Resolver {
    /// A resolver synthesizing with `syn` and caching up to `cache_entries` answers (0 = no
    /// cache).
    pub fn new(syn: Synthesizer, cache_entries: usize) -> Resolver {
        Resolver {
            syn,
            cache: Cache::new(cache_entries),
        }
    }

    /// The synthesis rules.
    pub fn synthesizer(&self) -> &Synthesizer {
        &self.syn
    }

    /// The cache.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Answers `request` from the cache into `out` when it can: no allocation, no full parse.
    /// For UDP (`udp`) the answer must fit the client's size limit. Returns the answer's
    /// length and outcome.
    pub fn answer_cached(
        &self,
        request: &[u8],
        udp: bool,
        now: Instant,
        out: &mut [u8],
    ) -> Option<(usize, Outcome)> {
        if !self.cache.enabled() {
            return None;
        }
        let mut key = [0u8; MAX_KEY];
        let info = parse_query(request, &mut key, EDNS_PAYLOAD)?;
        let limit = if udp {
            info.max_udp
        } else {
            usize::from(u16::MAX)
        };
        self.cache
            .answer(&key[..info.key_len], request, &info, limit, now, out)
    }

    /// Starts answering `request` (wire form) through upstream. A query that cannot be
    /// decoded is answered at once: `Err` holds its FORMERR (or nothing, RFC 1035 §4.1.1).
    pub fn exchange<'r>(&self, request: &'r [u8], udp: bool) -> Result<Exchange<'r>, Reply> {
        let msg = match Message::from_vec(request) {
            Ok(m) => m,
            Err(e) => {
                debug!(error = %e, len = request.len(), "malformed DNS query");
                return Err(Reply {
                    wire: formerr(request),
                    outcome: Outcome::Malformed,
                });
            }
        };
        let (plan, step) = Plan::start(&self.syn, &msg);
        Ok(Exchange {
            request,
            udp,
            parsed_udp_limit: udp_limit(&msg),
            plan,
            step,
            asked: 0,
        })
    }
}

/// One client query between [`Resolver::exchange`] and [`Exchange::finish`].
#[derive(Debug)]
pub struct Exchange<'r> {
    request: &'r [u8],
    udp: bool,
    /// The client's UDP limit from the decoded query, for when the cache key parser refuses
    /// it (then the answer is not cached either).
    parsed_udp_limit: usize,
    plan: Plan,
    step: Step,
    asked: u8,
}

impl Exchange<'_> {
    /// The question to ask upstream next, if any; its answer goes to [`Exchange::handle`].
    pub fn ask(&self) -> Option<&Ask> {
        match &self.step {
            Step::Ask(ask) if self.asked < MAX_ASKS => Some(ask),
            _ => None,
        }
    }

    /// Feeds upstream's answer to the question [`Exchange::ask`] named.
    pub fn handle(&mut self, resolver: &Resolver, answer: Result<Message, UpstreamError>) {
        self.asked = self.asked.saturating_add(1);
        self.step = self.plan.handle(&resolver.syn, answer);
    }

    /// The answer for the client once [`Exchange::ask`] has nothing more to ask: encoded,
    /// cached (stamped `now`) and, for UDP, truncated to the client's limit (TC=1, RFC 1035
    /// §4.2.1; RFC 6891 §6.2.5 for the limit).
    pub fn finish(self, resolver: &Resolver, now: Instant) -> Reply {
        let (m, outcome) = match self.step {
            Step::Answer(m, outcome) => (m, outcome),
            Step::Drop(outcome) => {
                return Reply {
                    wire: None,
                    outcome,
                };
            }
            Step::Ask(_) => {
                debug_assert!(false, "a plan asked more than {MAX_ASKS} times");
                return Reply {
                    wire: None,
                    outcome: Outcome::Error,
                };
            }
        };
        let wire = match m.to_vec() {
            Ok(w) => w,
            Err(e) => {
                debug!(error = %e, "cannot encode an answer; SERVFAIL");
                let mut fail =
                    Message::error_msg(m.metadata.id, m.metadata.op_code, ResponseCode::ServFail);
                fail.queries = m.queries.clone();
                return Reply {
                    wire: fail.to_vec().ok(),
                    outcome,
                };
            }
        };
        let mut key = [0u8; MAX_KEY];
        let info = parse_query(self.request, &mut key, EDNS_PAYLOAD);
        if let Some(info) = &info {
            resolver
                .cache
                .insert(&key[..info.key_len], &wire, outcome, now);
        }
        if self.udp {
            let limit = info.map_or(self.parsed_udp_limit, |i| i.max_udp);
            if wire.len() > limit {
                return Reply {
                    wire: m.truncate().to_vec().ok(),
                    outcome,
                };
            }
        }
        Reply {
            wire: Some(wire),
            outcome,
        }
    }
}

/// The client's UDP size limit from a decoded request (RFC 6891 §6.2.5).
fn udp_limit(m: &Message) -> usize {
    m.edns.as_ref().map_or(CLASSIC_UDP, |e| {
        usize::from(e.max_payload()).clamp(CLASSIC_UDP, usize::from(EDNS_PAYLOAD))
    })
}

/// FORMERR for a query whose header is readable (RFC 1035 §4.1.1), else nothing.
pub fn formerr(request: &[u8]) -> Option<Vec<u8>> {
    let h = request.get(..12)?;
    if h[2] & 0x80 != 0 {
        return None; // a response: never answer one
    }
    let mut out = vec![0u8; 12];
    out[..2].copy_from_slice(&h[..2]);
    out[2] = 0x80 | (h[2] & 0x79); // QR, the opcode and RD of the query
    out[3] = ResponseCode::FormErr.low();
    Some(out)
}
