//! DNS64 on untrusted bytes: an arbitrary query goes through the cache key parser, FORMERR
//! building and the RFC 6147 plan, with arbitrary upstream answers (for AAAA, then A, or PTR).
//! Nothing may panic; a synthesized answer holds only addresses under the prefix; the resolver
//! the server drives ends with the plan's outcome; an answer that encodes round-trips through
//! the answer cache.
//!
//! Input: `[len_q u16][query][len_a u16][first upstream answer][rest: second answer]`.
#![no_main]

use std::time::Instant;

use gate64_dns64::cache::{Cache, MAX_KEY, parse_query, ttls};
use gate64_dns64::resolver::formerr;
use gate64_dns64::synth::{EDNS_PAYLOAD, Step, Synthesizer, UpstreamError, run_with};
use gate64_dns64::{Outcome, Resolver};
use gate64_nat64::Prefix;
use hickory_proto::op::Message;
use hickory_proto::rr::RData;
use libfuzzer_sys::fuzz_target;

fn take<'a>(data: &mut &'a [u8]) -> &'a [u8] {
    if data.len() < 2 {
        let all = *data;
        *data = &[];
        return all;
    }
    let n = usize::from(u16::from_be_bytes([data[0], data[1]])).min(data.len() - 2);
    let part = &data[2..2 + n];
    *data = &data[2 + n..];
    part
}

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    let query = take(&mut rest);
    let first = take(&mut rest);
    let second = rest;

    let mut key = [0u8; MAX_KEY];
    let info = parse_query(query, &mut key, EDNS_PAYLOAD);
    let _ = ttls(query);
    let _ = formerr(query);
    let Ok(request) = Message::from_vec(query) else {
        return;
    };

    let prefix = Prefix::new("2001:db8:64::".parse().unwrap(), 96).unwrap();
    let syn = Synthesizer::new(prefix, &["2001:db8:dead::/48".parse().unwrap()]);
    let mut answers = [first, second].into_iter();
    let step = run_with(&syn, &request, |_ask| {
        answers
            .next()
            .and_then(|b| Message::from_vec(b).ok())
            .ok_or(UpstreamError::NoAnswer)
    });
    // The resolver the server drives ends the same way as the bare plan.
    let resolver = Resolver::new(syn.clone(), 64);
    if let Ok(mut exchange) = resolver.exchange(query, true) {
        let mut answers = [first, second].into_iter();
        while exchange.ask().is_some() {
            let answer = answers
                .next()
                .and_then(|b| Message::from_vec(b).ok())
                .ok_or(UpstreamError::NoAnswer);
            exchange.handle(&resolver, answer);
        }
        let reply = exchange.finish(&resolver, Instant::now());
        if let Step::Answer(_, outcome) | Step::Drop(outcome) = &step {
            assert_eq!(reply.outcome, *outcome);
        }
    }
    let Step::Answer(msg, result) = step else {
        return;
    };
    if result == Outcome::Synthesized {
        for r in &msg.answers {
            if let RData::AAAA(a) = &r.data {
                assert!(
                    prefix.contains(&a.0),
                    "synthesized {} outside the prefix",
                    a.0
                );
            }
        }
    }
    assert_eq!(msg.metadata.id, request.metadata.id);
    let Ok(wire) = msg.to_vec() else {
        return;
    };
    let _ = ttls(&wire);
    if let Some(info) = info {
        let cache = Cache::new(64);
        let now = Instant::now();
        cache.insert(&key[..info.key_len], &wire, result, now);
        let mut out = [0u8; 4096];
        if let Some((n, r)) = cache.answer(&key[..info.key_len], query, &info, 4096, now, &mut out)
        {
            assert_eq!(r, result);
            assert_eq!(n, wire.len());
            assert_eq!(out[..2], query[..2], "the client's ID");
        }
    }
});
