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
                    wire: truncated(&m, limit),
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

/// `m` with TC=1 and no records, fitting `limit`: when its questions alone are too long (a
/// query with many long questions), without them too, so a UDP answer never exceeds what the
/// client takes (RFC 1035 §4.2.1).
fn truncated(m: &Message, limit: usize) -> Option<Vec<u8>> {
    let mut t = m.truncate();
    let wire = t.to_vec().ok()?;
    if wire.len() <= limit {
        return Some(wire);
    }
    t.queries.clear();
    t.to_vec().ok()
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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use gate64_nat64::Prefix;
    use hickory_proto::op::{Edns, OpCode, Query};
    use hickory_proto::rr::rdata::{A, AAAA, SOA, TXT};
    use hickory_proto::rr::{Name, RData, Record, RecordType};

    use super::*;
    use crate::upstream::{encode, matches};

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn resolver(cache_entries: usize) -> Resolver {
        Resolver::new(
            Synthesizer::new(Prefix::WELL_KNOWN.allow_private(true), &[]),
            cache_entries,
        )
    }

    fn query(qname: &str, t: RecordType, id: u16, edns: bool) -> Vec<u8> {
        let mut m = Message::query();
        m.metadata.id = id;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(name(qname), t));
        if edns {
            let mut e = Edns::new();
            e.set_max_payload(1232);
            m.set_edns(e);
        }
        m.to_vec().unwrap()
    }

    /// A fake upstream: `v4.example` has only A (192.0.2.1), `big.example` has ~4 KB of TXT,
    /// everything else is NODATA with an SOA.
    fn upstream(ask: &Ask) -> Message {
        let q = &ask.query;
        let mut m = Message::response(1, OpCode::Query);
        m.queries.push(q.clone());
        match (q.name().to_ascii().as_str(), q.query_type()) {
            ("v4.example.", RecordType::A) => {
                let a = RData::A(A(Ipv4Addr::new(192, 0, 2, 1)));
                m.add_answer(Record::from_rdata(q.name().clone(), 3600, a));
            }
            ("big.example.", RecordType::TXT) => {
                for i in 0..20 {
                    let txt = RData::TXT(TXT::new(vec![format!("{i:02}{}", "x".repeat(200))]));
                    m.add_answer(Record::from_rdata(q.name().clone(), 100, txt));
                }
            }
            _ => {
                let soa = SOA::new(
                    name("ns.example."),
                    name("h.example."),
                    1,
                    3600,
                    600,
                    86400,
                    300,
                );
                m.add_authority(Record::from_rdata(name("example."), 3600, RData::SOA(soa)));
            }
        }
        m
    }

    /// Drives one exchange as the io driver does, with [`upstream`] answering; returns the
    /// reply and the questions asked.
    fn drive(r: &Resolver, request: &[u8], udp: bool, now: Instant) -> (Reply, Vec<Ask>) {
        let mut asked = Vec::new();
        let mut exchange = match r.exchange(request, udp) {
            Ok(e) => e,
            Err(reply) => return (reply, asked),
        };
        while let Some(ask) = exchange.ask() {
            asked.push(ask.clone());
            let answer = Ok(upstream(ask));
            exchange.handle(r, answer);
        }
        (exchange.finish(r, now), asked)
    }

    #[test]
    fn synthesizes_then_answers_from_the_cache() {
        let r = resolver(16);
        let now = Instant::now();
        let request = query("v4.example.", RecordType::AAAA, 0x1111, true);
        assert_eq!(r.answer_cached(&request, true, now, &mut [0u8; 4096]), None);

        let (reply, asked) = drive(&r, &request, true, now);
        assert_eq!(reply.outcome, Outcome::Synthesized);
        let types: Vec<_> = asked.iter().map(|a| a.query.query_type()).collect();
        assert_eq!(types, [RecordType::AAAA, RecordType::A]);
        let m = Message::from_vec(&reply.wire.unwrap()).unwrap();
        assert_eq!(m.metadata.id, 0x1111);
        let want = RData::AAAA(AAAA("64:ff9b::c000:201".parse().unwrap()));
        assert_eq!(m.answers[0].data, want);

        let again = query("v4.example.", RecordType::AAAA, 0x2222, true);
        let mut out = [0u8; 4096];
        let (len, outcome) = r.answer_cached(&again, true, now, &mut out).unwrap();
        assert_eq!(outcome, Outcome::Synthesized);
        let m = Message::from_vec(&out[..len]).unwrap();
        assert_eq!(
            m.metadata.id, 0x2222,
            "the cached answer carries the new ID"
        );
        assert_eq!(m.answers[0].data, want);
    }

    #[test]
    fn a_disabled_cache_never_answers() {
        let r = resolver(0);
        let now = Instant::now();
        let request = query("v4.example.", RecordType::AAAA, 1, true);
        let (reply, _) = drive(&r, &request, true, now);
        assert_eq!(reply.outcome, Outcome::Synthesized);
        assert_eq!(r.answer_cached(&request, true, now, &mut [0u8; 4096]), None);
    }

    #[test]
    fn udp_answers_are_truncated_to_the_client_limit_and_tcp_ones_are_not() {
        let r = resolver(16);
        let now = Instant::now();
        // Without EDNS the client takes 512 bytes (RFC 1035 §4.2.1).
        let request = query("big.example.", RecordType::TXT, 7, false);
        let (reply, _) = drive(&r, &request, true, now);
        assert_eq!(reply.outcome, Outcome::Native);
        let wire = reply.wire.unwrap();
        assert!(wire.len() <= CLASSIC_UDP, "{} bytes", wire.len());
        assert!(Message::from_vec(&wire).unwrap().metadata.truncation);

        let (reply, _) = drive(&r, &request, false, now);
        let m = Message::from_vec(&reply.wire.unwrap()).unwrap();
        assert!(!m.metadata.truncation);
        assert_eq!(m.answers.len(), 20);
    }

    // Found by the dns64_udp_batch fuzz target: a STATUS query with seven long questions was
    // answered over UDP with 525 bytes to a client that takes 512, the questions kept by
    // the truncation.
    #[test]
    fn udp_answer_with_questions_longer_than_the_limit_still_fits() {
        let r = resolver(16);
        let mut m = Message::query();
        m.metadata.id = 9;
        m.metadata.op_code = OpCode::Status;
        // Distinct labels: name compression must not shorten them.
        for c in ['a', 'b', 'c', 'd', 'e', 'f', 'g'] {
            let label = c.to_string().repeat(60);
            let qname = format!("{label}.{label}.example.");
            m.add_query(Query::query(name(&qname), RecordType::AAAA));
        }
        let request = m.to_vec().unwrap();
        assert!(request.len() > CLASSIC_UDP);
        let (reply, _) = drive(&r, &request, true, Instant::now());
        let wire = reply.wire.expect("an answer");
        assert!(wire.len() <= CLASSIC_UDP, "{} bytes", wire.len());
        let back = Message::from_vec(&wire).unwrap();
        assert_eq!(back.metadata.id, 9);
        assert!(back.metadata.truncation);
    }

    #[test]
    fn malformed_queries_end_before_upstream() {
        let r = resolver(16);
        let now = Instant::now();
        let mut broken = query("v4.example.", RecordType::AAAA, 0x0bad, true);
        broken.truncate(20);
        let (reply, asked) = drive(&r, &broken, true, now);
        assert!(asked.is_empty());
        assert_eq!(reply.outcome, Outcome::Malformed);
        let m = Message::from_vec(&reply.wire.unwrap()).unwrap();
        assert_eq!(m.metadata.id, 0x0bad);
        assert_eq!(m.metadata.response_code, ResponseCode::FormErr);

        let (reply, _) = drive(&r, &[1, 2, 3], true, now);
        assert_eq!(
            reply,
            Reply {
                wire: None,
                outcome: Outcome::Malformed
            }
        );
        let mut response = query("v4.example.", RecordType::AAAA, 1, true);
        response[2] |= 0x80;
        assert_eq!(formerr(&response), None, "a response is never answered");
    }

    #[test]
    fn upstream_failure_is_servfail_and_not_cached() {
        let r = resolver(16);
        let now = Instant::now();
        let request = query("v4.example.", RecordType::AAAA, 3, true);
        let mut exchange = r.exchange(&request, true).unwrap();
        while exchange.ask().is_some() {
            exchange.handle(&r, Err(UpstreamError::NoAnswer));
        }
        let reply = exchange.finish(&r, now);
        assert_eq!(reply.outcome, Outcome::Error);
        let m = Message::from_vec(&reply.wire.unwrap()).unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
        assert_eq!(r.answer_cached(&request, true, now, &mut [0u8; 4096]), None);
    }

    #[test]
    fn upstream_queries_match_only_their_answer() {
        let r = resolver(16);
        let request = query("v4.example.", RecordType::AAAA, 3, true);
        let exchange = r.exchange(&request, true).unwrap();
        let ask = exchange.ask().unwrap();
        let sent = Message::from_vec(&encode(ask, 0x4242).unwrap()).unwrap();
        assert!(sent.metadata.recursion_desired);
        assert_eq!(
            sent.edns.as_ref().map(|e| e.max_payload()),
            Some(EDNS_PAYLOAD)
        );
        let mut answer = upstream(ask);
        answer.metadata.id = 0x4242;
        assert!(matches(&answer, 0x4242, ask));
        assert!(!matches(&answer, 0x4243, ask), "another ID");
        answer.queries[0].set_query_type(RecordType::A);
        assert!(!matches(&answer, 0x4242, ask), "another question");
    }
}
