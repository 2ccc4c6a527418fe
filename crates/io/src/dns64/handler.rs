//! [`Dns64`], the driver of the sans-IO [`Resolver`]: cache hits, upstream exchanges and the
//! counters; and the hickory-server [`RequestHandler`] that serves it over TCP (and over UDP
//! when the fast path is off).

use std::sync::Arc;
use std::time::Instant;

use gate64_dataplane::{Dns64Result, Dns64Stats};
use gate64_dns64::cache::{Cache, MAX_ENTRY};
use gate64_dns64::{Outcome, Resolver, Synthesizer};
use hickory_proto::op::{Message, ResponseCode};
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use super::upstream::Upstreams;

/// The metrics label of an outcome. `Dns64Result` lives in `gate64-dataplane` so the exporter
/// needs no DNS crate; neither crate may depend on the other, hence a function, not `From`.
pub fn result_label(outcome: Outcome) -> Dns64Result {
    match outcome {
        Outcome::Synthesized => Dns64Result::Synthesized,
        Outcome::Native => Dns64Result::Native,
        Outcome::Nxdomain => Dns64Result::Nxdomain,
        Outcome::Error => Dns64Result::Error,
        Outcome::Malformed => Dns64Result::Malformed,
    }
}

/// The DNS64 resolver shared by every listener.
#[derive(Debug)]
pub struct Dns64 {
    resolver: Resolver,
    upstreams: Upstreams,
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
            resolver: Resolver::new(syn, cache_entries),
            upstreams,
            stats,
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<Dns64Stats> {
        &self.stats
    }

    /// Counts one finished query.
    pub fn count(&self, outcome: Outcome) {
        self.stats.count(result_label(outcome));
    }

    /// The cache.
    pub fn cache(&self) -> &Cache {
        self.resolver.cache()
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
        let (len, outcome) = self.resolver.answer_cached(request, udp, now, out)?;
        self.count(outcome);
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
        let mut exchange = match self.resolver.exchange(request, udp) {
            Ok(exchange) => exchange,
            Err(reply) => {
                self.count(reply.outcome);
                return reply.wire;
            }
        };
        while let Some(ask) = exchange.ask() {
            let answer = self.upstreams.ask(ask).await;
            exchange.handle(&self.resolver, answer);
        }
        let reply = exchange.finish(&self.resolver, Instant::now());
        self.count(reply.outcome);
        reply.wire
    }
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
                crate::log_limited!(debug, error = %e, "sending a DNS answer failed");
                fail()
            }
        }
    }
}
