//! The resolver: cache, [`Plan`] and [`Upstreams`] tied together, and the hickory-server
//! [`RequestHandler`] that serves it over TCP (and over UDP when the fast path is off).

use std::sync::Arc;
use std::time::Instant;

use gate64_dataplane::{Dns64Result, Dns64Stats};
use hickory_proto::op::{Message, ResponseCode};
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use tracing::debug;

use crate::cache::{CLASSIC_UDP, Cache, MAX_ENTRY, MAX_KEY, parse_query};
use crate::synth::{EDNS_PAYLOAD, Plan, Step, Synthesizer};
use crate::upstream::Upstreams;

/// The DNS64 resolver shared by every listener.
#[derive(Debug)]
pub struct Dns64 {
    syn: Synthesizer,
    upstreams: Upstreams,
    cache: Cache,
    stats: Arc<Dns64Stats>,
}

impl Dns64 {
    /// A resolver synthesizing with `syn`, asking `upstreams`, caching up to `cache_entries`
    /// answers (0 = no cache) and counting into `stats`.
    pub fn new(
        syn: Synthesizer,
        upstreams: Upstreams,
        cache_entries: usize,
        stats: Arc<Dns64Stats>,
    ) -> Dns64 {
        Dns64 {
            syn,
            upstreams,
            cache: Cache::new(cache_entries),
            stats,
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<Dns64Stats> {
        &self.stats
    }

    /// The cache.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Answers `request` from the cache into `out` when it can: no allocation, no task. For
    /// UDP (`udp`) the answer must fit the client's size limit. Counts the query when it
    /// answers; returns the answer's length.
    pub fn answer_cached(
        &self,
        request: &[u8],
        udp: bool,
        now: Instant,
        out: &mut [u8],
    ) -> Option<usize> {
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
        let (len, result) =
            self.cache
                .answer(&key[..info.key_len], request, &info, limit, now, out)?;
        self.stats.count(result);
        self.stats.cache_hit();
        Some(len)
    }

    /// Answers `request` (wire form): from the cache, or by asking upstream. For UDP (`udp`)
    /// an answer larger than the client takes is truncated (TC=1). `None` means send nothing
    /// (a response sent to us, or fewer than 12 bytes). Counts the query.
    pub async fn answer(&self, request: &[u8], udp: bool) -> Option<Vec<u8>> {
        // Cached answers are at most MAX_ENTRY bytes.
        let mut out = vec![0u8; MAX_ENTRY];
        if let Some(n) = self.answer_cached(request, udp, Instant::now(), &mut out) {
            out.truncate(n);
            return Some(out);
        }
        self.answer_uncached(request, udp).await
    }

    /// [`Dns64::answer`] for a query the caller already looked up in the cache: asks
    /// upstream (the answer is cached for the next query).
    pub async fn answer_uncached(&self, request: &[u8], udp: bool) -> Option<Vec<u8>> {
        let msg = match Message::from_vec(request) {
            Ok(m) => m,
            Err(e) => {
                debug!(error = %e, len = request.len(), "malformed DNS query");
                self.stats.count(Dns64Result::Malformed);
                return formerr(request);
            }
        };
        let (mut plan, mut step) = Plan::start(&self.syn, &msg);
        // A plan asks at most twice (AAAA, then A); the bound guards against a bug looping.
        for _ in 0..4 {
            let Step::Ask(ask) = &step else { break };
            let answer = self.upstreams.ask(ask).await;
            step = plan.handle(&self.syn, answer);
        }
        let (m, result) = match step {
            Step::Answer(m, r) => (m, r),
            Step::Drop(r) => {
                self.stats.count(r);
                return None;
            }
            Step::Ask(_) => {
                debug_assert!(false, "a plan asked more than four times");
                self.stats.count(Dns64Result::Error);
                return None;
            }
        };
        self.stats.count(result);
        let wire = match m.to_vec() {
            Ok(w) => w,
            Err(e) => {
                debug!(error = %e, "cannot encode an answer; SERVFAIL");
                let mut fail =
                    Message::error_msg(m.metadata.id, m.metadata.op_code, ResponseCode::ServFail);
                fail.queries = m.queries.clone();
                return fail.to_vec().ok();
            }
        };
        let mut key = [0u8; MAX_KEY];
        let info = parse_query(request, &mut key, EDNS_PAYLOAD);
        if let Some(info) = info {
            self.cache
                .insert(&key[..info.key_len], &wire, result, Instant::now());
        }
        if udp {
            let limit = info.map_or_else(|| udp_limit(&msg), |i| i.max_udp);
            if wire.len() > limit {
                return m.truncate().to_vec().ok();
            }
        }
        Some(wire)
    }
}

/// The client's UDP size limit from a parsed request (RFC 6891 §6.2.5).
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

/// hickory-server's view of [`Dns64`].
#[derive(Debug, Clone)]
pub struct Handler(pub Arc<Dns64>);

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let udp = request.protocol() == Protocol::Udp;
        let fail = || {
            let mut meta = hickory_proto::op::Metadata::response_from_request(&request.metadata);
            meta.response_code = ResponseCode::ServFail;
            ResponseInfo::from(hickory_proto::op::Header {
                metadata: meta,
                counts: Default::default(),
            })
        };
        let Some(wire) = self.0.answer(request.as_slice(), udp).await else {
            return fail();
        };
        // The answer is final; hickory-server wants records, so decode it once more (TCP and
        // the optional hickory UDP path only; the fast UDP path sends the bytes).
        let Ok(m) = Message::from_vec(&wire) else {
            return fail();
        };
        let mut builder = MessageResponseBuilder::new(&request.queries, None);
        if let Some(e) = &m.edns {
            builder.edns(e);
        }
        let response = builder.build(
            m.metadata,
            m.answers.iter(),
            m.authorities.iter(),
            std::iter::empty(),
            m.additionals.iter(),
        );
        match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(e) => {
                debug!(error = %e, "sending a DNS answer failed");
                fail()
            }
        }
    }
}
