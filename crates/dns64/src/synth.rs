//! RFC 6147 synthesis as pure functions, and [`Plan`], the sans-IO state machine that turns
//! one client query into upstream questions and one answer.
//!
//! Nothing here does I/O, reads a clock or draws random numbers: the caller asks upstream what
//! a [`Step::Ask`] names and feeds the result back with [`Plan::handle`]. Every input is
//! untrusted; nothing panics on it (checked by the `dns64_handler` fuzz target).
//!
//! Rules (RFC 6147 §5; the brief in `nat64-dns64-ipsec-gre.md` §7):
//! - AAAA answers with at least one AAAA outside the exclusions (always `::ffff:0:0/96`, plus
//!   `dns64.exclude`) are returned as they are, the excluded records removed (§5.1.4).
//! - NXDOMAIN is returned as is (§5.1.2). NOERROR without (non-excluded) AAAA, or any other
//!   error code such as SERVFAIL, makes the plan ask for A (§5.1.2, §5.1.3).
//! - Each A record of the A answer becomes a AAAA under the NAT64 prefix (RFC 6052), owned by
//!   the A record's owner (the end of the CNAME chain, which is kept, §5.1.7). Its TTL is
//!   `min(A TTL, negative TTL of the AAAA NODATA)` where the negative TTL is
//!   `min(SOA TTL, SOA MINIMUM)` (RFC 2308 §5), or `min(A TTL, 600)` without an SOA (§5.1.7).
//! - Synthetic answers never carry AD, nor RRSIGs (§5.5). With CD=1 and DO=1 the client
//!   validates itself, so nothing is synthesized or rewritten: the real answer is returned.
//! - PTR for an `ip6.arpa` name inside the prefix asks for the `in-addr.arpa` name of the
//!   embedded IPv4 address and answers with the owner set back to the `ip6.arpa` name (§5.3.1,
//!   Unbound's approach).
//! - `ipv4only.arpa` AAAA is answered locally from 192.0.0.170 and 192.0.0.171 under the
//!   prefix (RFC 7050 §2.2, RFC 8880 §7.2).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::Outcome;
use gate64_nat64::Prefix;
use hickory_proto::op::{Edns, Message, MessageType, Metadata, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::AAAA;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use ipnet::Ipv6Net;

/// TTL cap of synthetic AAAA records when the AAAA answer carried no SOA (RFC 6147 §5.1.7).
pub const NO_SOA_TTL_CAP: u32 = 600;
/// TTL of the local `ipv4only.arpa` answer: the same cap as a synthesis without SOA, so a
/// change of the NAT64 prefix reaches clients within ten minutes.
pub const IPV4ONLY_TTL: u32 = NO_SOA_TTL_CAP;
/// The well-known IPv4 addresses of `ipv4only.arpa` (RFC 7050 §2.2).
pub const IPV4ONLY_ADDRESSES: [Ipv4Addr; 2] =
    [Ipv4Addr::new(192, 0, 0, 170), Ipv4Addr::new(192, 0, 0, 171)];
/// The EDNS UDP payload size gate64 advertises and asks with (the DNS flag day 2020 value).
pub const EDNS_PAYLOAD: u16 = 1232;

/// `::ffff:0:0/96`, IPv4-mapped addresses, which are never native (RFC 6147 §5.1.4).
const MAPPED: Ipv6Net = match Ipv6Net::new(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96) {
    Ok(n) => n,
    Err(_) => panic!("96 is a valid prefix length"),
};

/// The synthesis settings: the NAT64 prefix and the excluded AAAA ranges.
#[derive(Debug, Clone)]
pub struct Synthesizer {
    prefix: Prefix,
    exclude: Vec<Ipv6Net>,
}

/// What an AAAA answer calls for (RFC 6147 §5.1.1–§5.1.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AaaaVerdict {
    /// At least one AAAA record is outside the exclusions: return the answer.
    Native,
    /// The name does not exist: return the answer, no synthesis.
    NxDomain,
    /// No usable AAAA (NODATA, all excluded, or an error code): ask for A. `negative_ttl` is
    /// the NODATA answer's `min(SOA TTL, SOA MINIMUM)` when it carried an SOA.
    QueryA {
        /// The negative-caching TTL of the AAAA answer, if it had an SOA.
        negative_ttl: Option<u32>,
    },
}

impl Synthesizer {
    /// Synthesis under `prefix`; `exclude` lists AAAA ranges treated as absent, to which
    /// `::ffff:0:0/96` is always added.
    pub fn new(prefix: Prefix, exclude: &[Ipv6Net]) -> Synthesizer {
        let mut all = vec![MAPPED];
        for n in exclude {
            if !all.contains(&n.trunc()) {
                all.push(n.trunc());
            }
        }
        Synthesizer {
            prefix,
            exclude: all,
        }
    }

    /// The NAT64 prefix synthetic addresses are built under.
    pub fn prefix(&self) -> &Prefix {
        &self.prefix
    }

    /// The excluded ranges, `::ffff:0:0/96` first.
    pub fn exclude(&self) -> &[Ipv6Net] {
        &self.exclude
    }

    /// True when `a` lies in an excluded range.
    pub fn is_excluded(&self, a: &Ipv6Addr) -> bool {
        self.exclude.iter().any(|n| n.contains(a))
    }

    /// Judges the upstream AAAA answer.
    pub fn judge_aaaa(&self, aaaa: &Message) -> AaaaVerdict {
        match aaaa.metadata.response_code {
            ResponseCode::NXDomain => AaaaVerdict::NxDomain,
            ResponseCode::NoError => {
                let native = aaaa.answers.iter().any(|r| match &r.data {
                    RData::AAAA(AAAA(a)) => !self.is_excluded(a),
                    _ => false,
                });
                if native {
                    AaaaVerdict::Native
                } else {
                    AaaaVerdict::QueryA {
                        negative_ttl: negative_ttl(aaaa),
                    }
                }
            }
            _ => AaaaVerdict::QueryA { negative_ttl: None },
        }
    }

    /// Removes excluded AAAA records from a native answer's answer section.
    pub fn strip_excluded(&self, msg: &mut Message) {
        msg.answers.retain(|r| match &r.data {
            RData::AAAA(AAAA(a)) => !self.is_excluded(a),
            _ => true,
        });
    }

    /// The answer section synthesized from an A answer: its CNAME/DNAME chain as it is, then
    /// one AAAA per A record whose address the prefix may carry. `None` when the A answer is
    /// not NOERROR or yields no address.
    pub fn synthesize(&self, a: &Message, negative_ttl: Option<u32>) -> Option<Vec<Record>> {
        if a.metadata.response_code != ResponseCode::NoError {
            return None;
        }
        let cap = negative_ttl.unwrap_or(NO_SOA_TTL_CAP);
        let mut out = Vec::with_capacity(a.answers.len());
        let mut synthesized = false;
        for r in &a.answers {
            match &r.data {
                _ if is_chain(r) => out.push(r.clone()),
                RData::A(v4) if r.dns_class == DNSClass::IN => {
                    if let Some(v6) = self.prefix.embed(v4.0) {
                        let mut s = Record::from_rdata(r.name.clone(), r.ttl.min(cap), AAAA(v6));
                        s.dns_class = DNSClass::IN;
                        out.push(s.into_record_of_rdata());
                        synthesized = true;
                    }
                }
                _ => {}
            }
        }
        synthesized.then_some(out)
    }

    /// The `in-addr.arpa` name to ask for a PTR query on `qname`, when `qname` is the full
    /// `ip6.arpa` name of an address inside the prefix (RFC 6147 §5.3.1).
    pub fn ptr_target(&self, qname: &Name) -> Option<Name> {
        let v6 = parse_ip6_arpa(qname)?;
        let v4 = self.prefix.extract(&v6)?;
        let [a, b, c, d] = v4.octets();
        Name::from_ascii(format!("{d}.{c}.{b}.{a}.in-addr.arpa.")).ok()
    }

    /// The local answer to `ipv4only.arpa` AAAA (RFC 7050 §2.2), or `None` for other names.
    pub fn ipv4only(&self, qname: &Name) -> Option<Vec<Record>> {
        if !is_ipv4only_arpa(qname) {
            return None;
        }
        // 192.0.0.170/171 are special-purpose addresses: the Well-Known Prefix would refuse
        // them, but RFC 7050 wants exactly these under whatever prefix the network uses.
        let prefix = self.prefix.allow_private(true);
        Some(
            IPV4ONLY_ADDRESSES
                .iter()
                .filter_map(|&v4| prefix.embed(v4))
                .map(|v6| Record::from_rdata(qname.clone(), IPV4ONLY_TTL, RData::AAAA(AAAA(v6))))
                .collect(),
        )
    }
}

/// `min(SOA TTL, SOA MINIMUM)` of the first SOA in the authority section (RFC 2308 §5).
pub fn negative_ttl(msg: &Message) -> Option<u32> {
    msg.authorities.iter().find_map(|r| match &r.data {
        RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
        _ => None,
    })
}

/// True for the records of a CNAME/DNAME chain (DNAME is type 39, RFC 6672).
fn is_chain(r: &Record) -> bool {
    let t = u16::from(r.record_type());
    t == u16::from(RecordType::CNAME) || t == 39
}

/// True for `ipv4only.arpa.` in any letter case.
pub fn is_ipv4only_arpa(name: &Name) -> bool {
    let mut labels = name.iter();
    matches!(
        (labels.next(), labels.next(), labels.next()),
        (Some(a), Some(b), None)
            if a.eq_ignore_ascii_case(b"ipv4only") && b.eq_ignore_ascii_case(b"arpa")
    )
}

/// The address of a full `ip6.arpa` name (32 nibble labels, RFC 3596 §2.5), or `None`.
pub fn parse_ip6_arpa(name: &Name) -> Option<Ipv6Addr> {
    let mut labels = name.iter();
    let mut addr: u128 = 0;
    for i in 0..32 {
        let label = labels.next()?;
        let [c] = label else { return None };
        let nibble = (*c as char).to_digit(16)?;
        addr |= u128::from(nibble) << (4 * i);
    }
    match (labels.next(), labels.next(), labels.next()) {
        (Some(a), Some(b), None)
            if a.eq_ignore_ascii_case(b"ip6") && b.eq_ignore_ascii_case(b"arpa") =>
        {
            Some(Ipv6Addr::from(addr))
        }
        _ => None,
    }
}

/// A question for upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// The name, type and class to ask.
    pub query: Query,
    /// DO: ask for DNSSEC records (copied from the client).
    pub dnssec_ok: bool,
    /// CD: upstream should not validate (copied from the client).
    pub checking_disabled: bool,
    /// AD in the query: the client understands AD in the answer (RFC 6840 §5.7).
    pub authentic_data: bool,
}

/// Why upstream gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// Every upstream timed out, refused or could not be reached.
    #[error("no upstream answered")]
    NoAnswer,
}

/// What the driver does next.
#[derive(Debug, Clone)]
pub enum Step {
    /// Ask upstream, then call [`Plan::handle`] with the outcome.
    Ask(Ask),
    /// Send this answer to the client; the query is done.
    Answer(Box<Message>, Outcome),
    /// Send nothing (a response sent to us, or an unreadable header); count the result.
    Drop(Outcome),
}

/// One client query on its way through DNS64.
#[derive(Debug, Clone)]
pub struct Plan {
    request: Metadata,
    queries: Vec<Query>,
    /// The client's EDNS, if any: the answer carries an OPT exactly when the query did.
    client_edns: Option<ClientEdns>,
    state: State,
}

#[derive(Debug, Clone, Copy)]
struct ClientEdns {
    dnssec_ok: bool,
}

#[derive(Debug, Clone)]
enum State {
    /// Pass upstream's answer on.
    Forward,
    /// Waiting for the AAAA answer.
    Aaaa,
    /// Waiting for the A answer after a AAAA answer without usable records.
    A {
        aaaa: Box<Message>,
        negative_ttl: Option<u32>,
    },
    /// Waiting for the PTR answer of `inaddr`, to be owned by the original `ip6.arpa` name.
    Ptr { inaddr: Name },
    /// Answered.
    Done,
}

impl Plan {
    /// Starts a query from a decoded request.
    pub fn start(syn: &Synthesizer, request: &Message) -> (Plan, Step) {
        let meta = request.metadata;
        let mut plan = Plan {
            request: meta,
            queries: request.queries.clone(),
            client_edns: request.edns.as_ref().map(|e| ClientEdns {
                dnssec_ok: e.flags().dnssec_ok,
            }),
            state: State::Done,
        };
        if meta.message_type != MessageType::Query {
            // Never answer a response: that would let anyone bounce traffic between resolvers.
            return (plan, Step::Drop(Outcome::Malformed));
        }
        if meta.op_code != OpCode::Query {
            let step = plan.error(ResponseCode::NotImp, Outcome::Error);
            return (plan, step);
        }
        if request.queries.len() != 1 {
            let step = plan.error(ResponseCode::FormErr, Outcome::Malformed);
            return (plan, step);
        }
        let q = &request.queries[0];
        let dnssec_ok = plan.client_edns.is_some_and(|e| e.dnssec_ok);
        // RFC 6147 §5.5: with CD=1 and DO=1 the client validates; synthetic data would fail.
        let client_validates = meta.checking_disabled && dnssec_ok;
        let ask = |query: Query| Ask {
            query,
            dnssec_ok,
            checking_disabled: meta.checking_disabled,
            authentic_data: meta.authentic_data,
        };
        let in_class = q.query_class() == DNSClass::IN;
        let step = match q.query_type() {
            RecordType::AAAA if in_class && !client_validates => {
                if let Some(records) = syn.ipv4only(q.name()) {
                    let mut m = plan.response(ResponseCode::NoError);
                    m.answers = records;
                    plan.state = State::Done;
                    return (plan, Step::Answer(Box::new(m), Outcome::Synthesized));
                }
                plan.state = State::Aaaa;
                Step::Ask(ask(q.clone()))
            }
            RecordType::PTR if in_class && !client_validates => match syn.ptr_target(q.name()) {
                Some(inaddr) => {
                    let mut query = q.clone();
                    query.set_name(inaddr.clone());
                    plan.state = State::Ptr { inaddr };
                    Step::Ask(ask(query))
                }
                None => {
                    plan.state = State::Forward;
                    Step::Ask(ask(q.clone()))
                }
            },
            _ => {
                plan.state = State::Forward;
                Step::Ask(ask(q.clone()))
            }
        };
        (plan, step)
    }

    /// Continues with upstream's answer to the last [`Step::Ask`] (already checked by the
    /// caller to answer that question).
    pub fn handle(&mut self, syn: &Synthesizer, answer: Result<Message, UpstreamError>) -> Step {
        let state = std::mem::replace(&mut self.state, State::Done);
        let upstream = match answer {
            Ok(m) => m,
            Err(UpstreamError::NoAnswer) => {
                return self.error(ResponseCode::ServFail, Outcome::Error);
            }
        };
        match state {
            State::Done => self.error(ResponseCode::ServFail, Outcome::Error),
            State::Forward => self.pass(upstream, false),
            State::Ptr { inaddr } => {
                let mut m = upstream;
                let Some(original) = self.queries.first().map(|q| q.name().clone()) else {
                    return self.error(ResponseCode::ServFail, Outcome::Error);
                };
                for r in m.answers.iter_mut() {
                    if r.name.eq_ignore_root_case(&inaddr) || r.name == inaddr {
                        r.name = original.clone();
                    }
                }
                // Signatures of the in-addr.arpa data cannot cover the ip6.arpa owner.
                m.answers.retain(|r| r.record_type() != RecordType::RRSIG);
                let code = m.metadata.response_code;
                let result = match code {
                    ResponseCode::NoError => Outcome::Synthesized,
                    ResponseCode::NXDomain => Outcome::Nxdomain,
                    _ => Outcome::Error,
                };
                let mut out = self.response(code);
                out.answers = m.answers;
                out.authorities = m.authorities;
                Step::Answer(Box::new(out), result)
            }
            State::Aaaa => match syn.judge_aaaa(&upstream) {
                AaaaVerdict::Native => {
                    let mut m = upstream;
                    syn.strip_excluded(&mut m);
                    self.pass(m, false)
                }
                AaaaVerdict::NxDomain => self.pass(upstream, false),
                AaaaVerdict::QueryA { negative_ttl } => {
                    let Some(q) = self.queries.first() else {
                        return self.error(ResponseCode::ServFail, Outcome::Error);
                    };
                    let mut query = q.clone();
                    query.set_query_type(RecordType::A);
                    let dnssec_ok = self.client_edns.is_some_and(|e| e.dnssec_ok);
                    self.state = State::A {
                        aaaa: Box::new(upstream),
                        negative_ttl,
                    };
                    Step::Ask(Ask {
                        query,
                        dnssec_ok,
                        checking_disabled: self.request.checking_disabled,
                        authentic_data: self.request.authentic_data,
                    })
                }
            },
            State::A { aaaa, negative_ttl } => {
                if let Some(records) = syn.synthesize(&upstream, negative_ttl) {
                    // RFC 6147 §5.5: never AD on synthetic data; no authority section.
                    let mut m = self.response(ResponseCode::NoError);
                    m.answers = records;
                    return Step::Answer(Box::new(m), Outcome::Synthesized);
                }
                if aaaa.metadata.response_code == ResponseCode::NoError {
                    // No A either: the AAAA NODATA is the answer.
                    return self.pass(*aaaa, false);
                }
                // The AAAA query failed and A gave no address: answer with A's outcome, A
                // records (there are none usable) and their signatures removed.
                let mut m = upstream;
                m.answers.retain(is_chain);
                self.pass(m, true)
            }
        }
    }

    /// A response to the client with the request's ID, opcode, RD, CD and question.
    fn response(&self, code: ResponseCode) -> Message {
        let mut m = Message::new(self.request.id, MessageType::Response, self.request.op_code);
        m.metadata.recursion_desired = self.request.recursion_desired;
        m.metadata.recursion_available = true;
        m.metadata.checking_disabled = self.request.checking_disabled;
        m.metadata.response_code = code;
        m.queries = self.queries.clone();
        if let Some(e) = self.client_edns {
            let mut edns = Edns::new();
            edns.set_max_payload(EDNS_PAYLOAD);
            edns.set_dnssec_ok(e.dnssec_ok);
            m.set_edns(edns);
        }
        m
    }

    fn error(&mut self, code: ResponseCode, result: Outcome) -> Step {
        self.state = State::Done;
        let mut m = self.response(code);
        if code == ResponseCode::FormErr {
            m.queries.clear();
        }
        Step::Answer(Box::new(m), result)
    }

    /// Upstream's answer for the client: its code and sections, our header and OPT. AD
    /// passes only when the client asked for it with AD or DO (RFC 6840 §5.8) and the answer
    /// is upstream's own (`synthetic` = false).
    fn pass(&mut self, upstream: Message, synthetic: bool) -> Step {
        let code = upstream.metadata.response_code;
        let mut m = self.response(code);
        let dnssec_ok = self.client_edns.is_some_and(|e| e.dnssec_ok);
        m.metadata.authentic_data = !synthetic
            && upstream.metadata.authentic_data
            && (self.request.authentic_data || dnssec_ok);
        m.answers = upstream.answers;
        m.authorities = upstream.authorities;
        m.additionals = upstream.additionals;
        let result = match code {
            ResponseCode::NoError => Outcome::Native,
            ResponseCode::NXDomain => Outcome::Nxdomain,
            _ => Outcome::Error,
        };
        Step::Answer(Box::new(m.maybe_strip_dnssec_records(dnssec_ok)), result)
    }
}

/// The outcome of a whole query with a fake upstream, for tests, the fuzz target and the
/// benchmark: runs the plan, answering each [`Step::Ask`] with `upstream`.
pub fn run_with(
    syn: &Synthesizer,
    request: &Message,
    mut upstream: impl FnMut(&Ask) -> Result<Message, UpstreamError>,
) -> Step {
    let (mut plan, mut step) = Plan::start(syn, request);
    // A plan asks at most twice (AAAA then A); the bound keeps a bug from looping forever.
    for _ in 0..4 {
        let Step::Ask(ask) = &step else { return step };
        let answer = upstream(ask);
        step = plan.handle(syn, answer);
    }
    debug_assert!(false, "a plan asked more than four times");
    Step::Drop(Outcome::Error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::rdata::{A, CNAME, PTR, SOA};

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn wkp() -> Synthesizer {
        // The documentation addresses used below are not global: let the WKP carry them.
        Synthesizer::new(Prefix::WELL_KNOWN.allow_private(true), &[])
    }

    fn query(qname: &str, t: RecordType) -> Message {
        let mut m = Message::query();
        m.metadata.id = 0x1234;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(name(qname), t));
        m
    }

    fn with_edns(mut m: Message, dnssec_ok: bool) -> Message {
        let mut e = Edns::new();
        e.set_max_payload(1232);
        e.set_dnssec_ok(dnssec_ok);
        m.set_edns(e);
        m
    }

    fn answer(code: ResponseCode, answers: Vec<Record>, authorities: Vec<Record>) -> Message {
        let mut m = Message::response(7, OpCode::Query);
        m.metadata.response_code = code;
        m.answers = answers;
        m.authorities = authorities;
        m
    }

    fn a(owner: &str, ttl: u32, v4: [u8; 4]) -> Record {
        Record::from_rdata(name(owner), ttl, RData::A(A(Ipv4Addr::from(v4))))
    }

    fn aaaa(owner: &str, ttl: u32, v6: &str) -> Record {
        Record::from_rdata(name(owner), ttl, RData::AAAA(AAAA(v6.parse().unwrap())))
    }

    fn cname(owner: &str, ttl: u32, target: &str) -> Record {
        Record::from_rdata(name(owner), ttl, RData::CNAME(CNAME(name(target))))
    }

    fn soa(zone: &str, ttl: u32, minimum: u32) -> Record {
        let soa = SOA::new(name("ns.x."), name("h.x."), 1, 3600, 600, 86400, minimum);
        Record::from_rdata(name(zone), ttl, RData::SOA(soa))
    }

    /// Runs `request` against an upstream that answers AAAA with `aaaa_answer` and A with
    /// `a_answer`, recording what was asked.
    fn run(
        syn: &Synthesizer,
        request: &Message,
        aaaa_answer: Result<Message, UpstreamError>,
        a_answer: Result<Message, UpstreamError>,
    ) -> (Step, Vec<Ask>) {
        let mut asked = Vec::new();
        let step = run_with(syn, request, |ask| {
            asked.push(ask.clone());
            match ask.query.query_type() {
                RecordType::AAAA => aaaa_answer.clone(),
                _ => a_answer.clone(),
            }
        });
        (step, asked)
    }

    fn expect_answer(step: Step) -> (Message, Outcome) {
        match step {
            Step::Answer(m, r) => (*m, r),
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    /// The worked example of the brief: NODATA with SOA minimum 300, A TTL 3600.
    #[test]
    fn rfc6147_5_1_7_worked_example() {
        let syn = wkp();
        let req = query("app.corp.example.", RecordType::AAAA);
        let nodata = answer(
            ResponseCode::NoError,
            vec![],
            vec![soa("corp.example.", 3600, 300)],
        );
        let a_ans = answer(
            ResponseCode::NoError,
            vec![a("app.corp.example.", 3600, [198, 51, 100, 10])],
            vec![],
        );
        let (step, asked) = run(&syn, &req, Ok(nodata), Ok(a_ans));
        assert_eq!(asked.len(), 2);
        assert_eq!(asked[1].query.query_type(), RecordType::A);
        let (m, r) = expect_answer(step);
        assert_eq!(r, Outcome::Synthesized);
        assert_eq!(m.metadata.id, 0x1234);
        assert_eq!(m.metadata.message_type, MessageType::Response);
        assert!(m.metadata.recursion_desired && m.metadata.recursion_available);
        assert!(!m.metadata.authentic_data);
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(
            m.answers,
            vec![aaaa("app.corp.example.", 300, "64:ff9b::c633:640a")]
        );
        assert!(m.authorities.is_empty());
        assert_eq!(m.queries, req.queries);
    }

    #[test]
    fn rfc6147_5_1_7_ttl_without_soa_is_capped_at_600() {
        let syn = wkp();
        let req = query("a.example.", RecordType::AAAA);
        let nodata = answer(ResponseCode::NoError, vec![], vec![]);
        let long = answer(
            ResponseCode::NoError,
            vec![a("a.example.", 3600, [192, 0, 2, 1])],
            vec![],
        );
        let (m, _) = expect_answer(run(&syn, &req, Ok(nodata.clone()), Ok(long)).0);
        assert_eq!(m.answers[0].ttl, 600);
        let short = answer(
            ResponseCode::NoError,
            vec![a("a.example.", 30, [192, 0, 2, 1])],
            vec![],
        );
        let (m, _) = expect_answer(run(&syn, &req, Ok(nodata), Ok(short)).0);
        assert_eq!(m.answers[0].ttl, 30);
    }

    #[test]
    fn rfc2308_negative_ttl_is_min_of_soa_ttl_and_minimum() {
        let m = answer(ResponseCode::NoError, vec![], vec![soa("x.", 120, 300)]);
        assert_eq!(negative_ttl(&m), Some(120));
        let m = answer(ResponseCode::NoError, vec![], vec![soa("x.", 900, 300)]);
        assert_eq!(negative_ttl(&m), Some(300));
        assert_eq!(
            negative_ttl(&answer(ResponseCode::NoError, vec![], vec![])),
            None
        );
    }

    #[test]
    fn rfc6147_5_1_1_native_aaaa_passes_through() {
        let syn = wkp();
        let req = query("v6.example.", RecordType::AAAA);
        let native = answer(
            ResponseCode::NoError,
            vec![aaaa("v6.example.", 100, "2001:db8::1")],
            vec![],
        );
        let (step, asked) = run(&syn, &req, Ok(native), Err(UpstreamError::NoAnswer));
        assert_eq!(asked.len(), 1, "no A query for a native answer");
        let (m, r) = expect_answer(step);
        assert_eq!(r, Outcome::Native);
        assert_eq!(m.answers, vec![aaaa("v6.example.", 100, "2001:db8::1")]);
    }

    #[test]
    fn rfc6147_5_1_4_mapped_aaaa_is_excluded() {
        let syn = wkp();
        let req = query("m.example.", RecordType::AAAA);
        let mapped = answer(
            ResponseCode::NoError,
            vec![aaaa("m.example.", 100, "::ffff:192.0.2.7")],
            vec![],
        );
        let a_ans = answer(
            ResponseCode::NoError,
            vec![a("m.example.", 100, [192, 0, 2, 7])],
            vec![],
        );
        let (m, r) = expect_answer(run(&syn, &req, Ok(mapped), Ok(a_ans)).0);
        assert_eq!(r, Outcome::Synthesized);
        assert_eq!(
            m.answers,
            vec![aaaa("m.example.", 100, "64:ff9b::c000:207")]
        );
    }

    #[test]
    fn rfc6147_5_1_4_configured_exclusions() {
        let excl: Ipv6Net = "2001:db8:dead::/48".parse().unwrap();
        let syn = Synthesizer::new(Prefix::WELL_KNOWN.allow_private(true), &[excl]);
        assert_eq!(syn.exclude().len(), 2);
        let req = query("e.example.", RecordType::AAAA);
        // All excluded: synthesize.
        let all = answer(
            ResponseCode::NoError,
            vec![aaaa("e.example.", 100, "2001:db8:dead::1")],
            vec![],
        );
        let a_ans = answer(
            ResponseCode::NoError,
            vec![a("e.example.", 100, [192, 0, 2, 9])],
            vec![],
        );
        let (_, r) = expect_answer(run(&syn, &req, Ok(all), Ok(a_ans.clone())).0);
        assert_eq!(r, Outcome::Synthesized);
        // Some excluded: native, with the excluded ones removed.
        let some = answer(
            ResponseCode::NoError,
            vec![
                aaaa("e.example.", 100, "2001:db8:dead::1"),
                aaaa("e.example.", 100, "2001:db8:beef::1"),
            ],
            vec![],
        );
        let (m, r) = expect_answer(run(&syn, &req, Ok(some), Ok(a_ans)).0);
        assert_eq!(r, Outcome::Native);
        assert_eq!(m.answers, vec![aaaa("e.example.", 100, "2001:db8:beef::1")]);
    }

    #[test]
    fn rfc6147_5_1_2_nxdomain_is_returned_as_is() {
        let syn = wkp();
        let req = query("nx.example.", RecordType::AAAA);
        let nx = answer(
            ResponseCode::NXDomain,
            vec![],
            vec![soa("example.", 60, 60)],
        );
        let (step, asked) = run(&syn, &req, Ok(nx), Err(UpstreamError::NoAnswer));
        assert_eq!(asked.len(), 1, "no A query after NXDOMAIN");
        let (m, r) = expect_answer(step);
        assert_eq!(r, Outcome::Nxdomain);
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
        assert_eq!(m.authorities.len(), 1);
    }

    #[test]
    fn rfc6147_5_1_3_servfail_on_aaaa_queries_a() {
        let syn = wkp();
        let req = query("sf.example.", RecordType::AAAA);
        let sf = answer(ResponseCode::ServFail, vec![], vec![]);
        let a_ans = answer(
            ResponseCode::NoError,
            vec![a("sf.example.", 100, [192, 0, 2, 1])],
            vec![],
        );
        let (m, r) = expect_answer(run(&syn, &req, Ok(sf.clone()), Ok(a_ans)).0);
        assert_eq!(r, Outcome::Synthesized);
        assert_eq!(m.answers.len(), 1);
        // SERVFAIL for AAAA and A: SERVFAIL.
        let (m, r) = expect_answer(run(&syn, &req, Ok(sf.clone()), Ok(sf)).0);
        assert_eq!(r, Outcome::Error);
        assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    }

    #[test]
    fn nodata_for_both_returns_the_aaaa_nodata() {
        let syn = wkp();
        let req = query("none.example.", RecordType::AAAA);
        let nodata = answer(ResponseCode::NoError, vec![], vec![soa("example.", 60, 60)]);
        let (m, r) = expect_answer(run(&syn, &req, Ok(nodata.clone()), Ok(nodata)).0);
        assert_eq!(r, Outcome::Native);
        assert!(m.answers.is_empty());
        assert_eq!(m.authorities.len(), 1);
    }

    #[test]
    fn rfc6147_5_1_7_cname_chain_is_kept_and_owner_is_the_final_name() {
        let syn = wkp();
        let req = query("www.example.", RecordType::AAAA);
        let nodata = answer(
            ResponseCode::NoError,
            vec![cname("www.example.", 500, "host.example.")],
            vec![soa("example.", 3600, 900)],
        );
        let a_ans = answer(
            ResponseCode::NoError,
            vec![
                cname("www.example.", 500, "host.example."),
                a("host.example.", 1000, [192, 0, 2, 5]),
                a("host.example.", 1000, [192, 0, 2, 6]),
            ],
            vec![],
        );
        let (m, r) = expect_answer(run(&syn, &req, Ok(nodata), Ok(a_ans)).0);
        assert_eq!(r, Outcome::Synthesized);
        assert_eq!(
            m.answers,
            vec![
                cname("www.example.", 500, "host.example."),
                aaaa("host.example.", 900, "64:ff9b::c000:205"),
                aaaa("host.example.", 900, "64:ff9b::c000:206"),
            ]
        );
    }

    #[test]
    fn rfc6052_3_1_well_known_prefix_refuses_private_ipv4() {
        let syn = Synthesizer::new(Prefix::WELL_KNOWN, &[]);
        let req = query("p.example.", RecordType::AAAA);
        let nodata = answer(ResponseCode::NoError, vec![], vec![soa("example.", 60, 60)]);
        let a_ans = answer(
            ResponseCode::NoError,
            vec![a("p.example.", 100, [10, 1, 2, 3])],
            vec![],
        );
        let (m, r) = expect_answer(run(&syn, &req, Ok(nodata), Ok(a_ans)).0);
        assert_eq!(r, Outcome::Native, "NODATA, not a forbidden synthesis");
        assert!(m.answers.is_empty());
        // A Network-Specific Prefix carries it.
        let nsp = Prefix::new("2001:db8:64::".parse().unwrap(), 96).unwrap();
        let syn = Synthesizer::new(nsp, &[]);
        let a_ans = answer(
            ResponseCode::NoError,
            vec![a("p.example.", 100, [10, 1, 2, 3])],
            vec![],
        );
        let out = syn.synthesize(&a_ans, None).unwrap();
        assert_eq!(out, vec![aaaa("p.example.", 100, "2001:db8:64::a01:203")]);
    }

    #[test]
    fn rfc6147_5_5_cd_and_do_means_no_synthesis() {
        let syn = wkp();
        let mut req = with_edns(query("s.example.", RecordType::AAAA), true);
        req.metadata.checking_disabled = true;
        let nodata = answer(ResponseCode::NoError, vec![], vec![soa("example.", 60, 60)]);
        let a_ans = answer(
            ResponseCode::NoError,
            vec![a("s.example.", 100, [192, 0, 2, 1])],
            vec![],
        );
        let (step, asked) = run(&syn, &req, Ok(nodata.clone()), Ok(a_ans.clone()));
        assert_eq!(asked.len(), 1);
        assert!(asked[0].dnssec_ok && asked[0].checking_disabled);
        let (m, r) = expect_answer(step);
        assert_eq!(r, Outcome::Native);
        assert!(m.answers.is_empty());
        assert!(m.metadata.checking_disabled);
        assert!(m.edns.as_ref().unwrap().flags().dnssec_ok);
        // CD alone (DO=0) or DO alone: synthesize.
        for (cd, dnssec_ok) in [(true, false), (false, true)] {
            let mut req = with_edns(query("s.example.", RecordType::AAAA), dnssec_ok);
            req.metadata.checking_disabled = cd;
            let (m, r) = expect_answer(run(&syn, &req, Ok(nodata.clone()), Ok(a_ans.clone())).0);
            assert_eq!(r, Outcome::Synthesized, "cd={cd} do={dnssec_ok}");
            assert!(!m.metadata.authentic_data);
        }
    }

    #[test]
    fn rfc6147_5_5_never_ad_on_synthetic_answers() {
        let syn = wkp();
        let mut req = with_edns(query("ad.example.", RecordType::AAAA), true);
        req.metadata.authentic_data = true;
        let mut nodata = answer(ResponseCode::NoError, vec![], vec![soa("example.", 60, 60)]);
        nodata.metadata.authentic_data = true;
        let mut a_ans = answer(
            ResponseCode::NoError,
            vec![a("ad.example.", 100, [192, 0, 2, 1])],
            vec![],
        );
        a_ans.metadata.authentic_data = true;
        let (m, r) = expect_answer(run(&syn, &req, Ok(nodata), Ok(a_ans)).0);
        assert_eq!(r, Outcome::Synthesized);
        assert!(!m.metadata.authentic_data);
        // A native answer keeps upstream's AD when the client asked for it.
        let mut native = answer(
            ResponseCode::NoError,
            vec![aaaa("ad.example.", 100, "2001:db8::1")],
            vec![],
        );
        native.metadata.authentic_data = true;
        let (m, _) = expect_answer(run(&syn, &req, Ok(native), Err(UpstreamError::NoAnswer)).0);
        assert!(m.metadata.authentic_data);
    }

    #[test]
    fn rfc6147_5_3_1_ptr_is_rewritten_to_in_addr_arpa() {
        let syn = wkp();
        let ip6 = "a.0.4.6.3.3.6.c.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.b.9.f.f.4.6.0.0.ip6.arpa.";
        assert_eq!(
            syn.ptr_target(&name(ip6)).unwrap(),
            name("10.100.51.198.in-addr.arpa.")
        );
        let req = query(ip6, RecordType::PTR);
        let mut asked = Vec::new();
        let step = run_with(&syn, &req, |ask| {
            asked.push(ask.query.clone());
            let ptr = Record::from_rdata(
                name("10.100.51.198.in-addr.arpa."),
                3600,
                RData::PTR(PTR(name("app.corp.example."))),
            );
            Ok(answer(ResponseCode::NoError, vec![ptr], vec![]))
        });
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].name(), &name("10.100.51.198.in-addr.arpa."));
        assert_eq!(asked[0].query_type(), RecordType::PTR);
        let (m, r) = expect_answer(step);
        assert_eq!(r, Outcome::Synthesized);
        assert_eq!(m.queries, req.queries);
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.answers[0].name, name(ip6));
        assert_eq!(
            m.answers[0].data,
            RData::PTR(PTR(name("app.corp.example.")))
        );
    }

    #[test]
    fn ptr_outside_the_prefix_or_partial_is_forwarded_as_is() {
        let syn = wkp();
        let outside = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.";
        assert_eq!(syn.ptr_target(&name(outside)), None);
        assert_eq!(syn.ptr_target(&name("b.9.f.f.4.6.0.0.ip6.arpa.")), None);
        assert_eq!(
            syn.ptr_target(&name(
                "x.0.4.6.3.3.6.c.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.b.9.f.f.4.6.0.0.ip6.arpa."
            )),
            None
        );
        let req = query(outside, RecordType::PTR);
        let (step, asked) = run(
            &syn,
            &req,
            Err(UpstreamError::NoAnswer),
            Ok(answer(ResponseCode::NXDomain, vec![], vec![])),
        );
        assert_eq!(asked[0].query.name(), &name(outside));
        let (_, r) = expect_answer(step);
        assert_eq!(r, Outcome::Nxdomain);
    }

    #[test]
    fn rfc7050_ipv4only_arpa_is_answered_locally() {
        let nsp = Prefix::new("2001:db8:64::".parse().unwrap(), 96).unwrap();
        for (syn, expect) in [
            (
                Synthesizer::new(Prefix::WELL_KNOWN, &[]),
                ["64:ff9b::c000:aa", "64:ff9b::c000:ab"],
            ),
            (
                Synthesizer::new(nsp, &[]),
                ["2001:db8:64::c000:aa", "2001:db8:64::c000:ab"],
            ),
        ] {
            let req = query("IPv4only.ARPA.", RecordType::AAAA);
            let (step, asked) = run(
                &syn,
                &req,
                Err(UpstreamError::NoAnswer),
                Err(UpstreamError::NoAnswer),
            );
            assert!(asked.is_empty(), "answered without upstream");
            let (m, r) = expect_answer(step);
            assert_eq!(r, Outcome::Synthesized);
            let got: Vec<_> = m.answers.iter().map(|r| r.data.clone()).collect();
            let want: Vec<_> = expect
                .iter()
                .map(|a| RData::AAAA(AAAA(a.parse().unwrap())))
                .collect();
            assert_eq!(got, want);
            assert_eq!(m.answers[0].ttl, IPV4ONLY_TTL);
        }
        assert!(!is_ipv4only_arpa(&name("x.ipv4only.arpa.")));
    }

    #[test]
    fn upstream_failure_is_servfail() {
        let syn = wkp();
        for t in [RecordType::AAAA, RecordType::A, RecordType::MX] {
            let req = with_edns(query("down.example.", t), false);
            let (m, r) = expect_answer(
                run(
                    &syn,
                    &req,
                    Err(UpstreamError::NoAnswer),
                    Err(UpstreamError::NoAnswer),
                )
                .0,
            );
            assert_eq!(r, Outcome::Error);
            assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
            assert!(m.edns.is_some(), "OPT in the answer when the query had one");
        }
        // AAAA NODATA, then the A query fails: SERVFAIL, not a cacheable NODATA.
        let req = query("half.example.", RecordType::AAAA);
        let nodata = answer(ResponseCode::NoError, vec![], vec![]);
        let (m, r) = expect_answer(run(&syn, &req, Ok(nodata), Err(UpstreamError::NoAnswer)).0);
        assert_eq!(r, Outcome::Error);
        assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    }

    #[test]
    fn other_types_are_forwarded_unchanged() {
        let syn = wkp();
        let req = query("a.example.", RecordType::A);
        let a_ans = answer(
            ResponseCode::NoError,
            vec![a("a.example.", 100, [192, 0, 2, 1])],
            vec![],
        );
        let (step, asked) = run(&syn, &req, Err(UpstreamError::NoAnswer), Ok(a_ans.clone()));
        assert_eq!(asked.len(), 1);
        let (m, r) = expect_answer(step);
        assert_eq!(r, Outcome::Native);
        assert_eq!(m.answers, a_ans.answers);
        assert!(
            m.edns.is_none(),
            "no OPT in the answer when the query had none"
        );
    }

    #[test]
    fn bad_requests() {
        let syn = wkp();
        // A response sent to us is dropped.
        let mut resp = query("x.example.", RecordType::A);
        resp.metadata.message_type = MessageType::Response;
        assert!(matches!(
            Plan::start(&syn, &resp).1,
            Step::Drop(Outcome::Malformed)
        ));
        // Two questions: FORMERR.
        let mut two = query("x.example.", RecordType::A);
        two.add_query(Query::query(name("y.example."), RecordType::A));
        let (m, r) = expect_answer(Plan::start(&syn, &two).1);
        assert_eq!(
            (m.metadata.response_code, r),
            (ResponseCode::FormErr, Outcome::Malformed)
        );
        // No question: FORMERR.
        let mut none = Message::query();
        none.metadata.id = 9;
        let (m, _) = expect_answer(Plan::start(&syn, &none).1);
        assert_eq!(m.metadata.response_code, ResponseCode::FormErr);
        // Another opcode: NOTIMP.
        let mut notify = query("x.example.", RecordType::SOA);
        notify.metadata.op_code = OpCode::Notify;
        let (m, r) = expect_answer(Plan::start(&syn, &notify).1);
        assert_eq!(
            (m.metadata.response_code, r),
            (ResponseCode::NotImp, Outcome::Error)
        );
    }
}
