//! The DNS64 UDP fast path, per datagram, without its sockets: what `UdpThread::serve` in
//! `gate64-io` does with each datagram of a `recvmmsg` batch (the cache answer into a fixed
//! `EDNS_PAYLOAD`-byte tx slot; on a miss, the exchange), and what the upstream driver does with
//! each answer it reads (`upstream::encode` the ask, `upstream::matches` the reply, else it is
//! ignored and the ask ends as `NoAnswer`). The resolver and its cache live across runs, as in
//! the daemon; the clock only moves forward.
//!
//! The batch loop itself (`recv_batch_from`, `send_batch_to`, the task per miss) is socket
//! code and is not run here; everything it calls per datagram is.
//!
//! Input: a batch of datagrams, each `[flags][len u16][query]` then, for each upstream ask,
//! `[how][len u16][answer]`. `flags`: bit 0 marks the datagram truncated by `recvmmsg`, bits
//! 1-7 advance the clock in seconds. `how`: 0 no answer, 1 the bytes as read, 2 the bytes with
//! the ID, QR and question set to match the ask (so upstream content, not the match, is fuzzed).
//!
//! Checked: no panic; a cached answer fits the client's UDP limit and the tx slot, carries the
//! client's ID and its question; an uncached answer carries the client's ID and fits its UDP
//! limit; a matched answer is one `matches` accepts; `encode` of an ask decodes as a query
//! for the same question.
#![no_main]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gate64_dns64::cache::{MAX_KEY, parse_query};
use gate64_dns64::synth::EDNS_PAYLOAD;
use gate64_dns64::upstream::{encode, matches};
use gate64_dns64::{Outcome, Resolver, Synthesizer, UpstreamError};
use gate64_nat64::Prefix;
use hickory_proto::op::{Message, MessageType};
use libfuzzer_sys::fuzz_target;

fn resolver() -> &'static Resolver {
    static R: OnceLock<Resolver> = OnceLock::new();
    R.get_or_init(|| {
        let prefix = Prefix::new("2001:db8:64::".parse().unwrap(), 96).unwrap();
        let syn = Synthesizer::new(prefix, &["2001:db8:dead::/48".parse().unwrap()]);
        Resolver::new(syn, 256)
    })
}

/// A clock shared by every run that never goes back, so cache entries age and expire.
fn now(advance: Duration) -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    static OFFSET_S: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(Instant::now);
    let s = OFFSET_S.fetch_add(advance.as_secs(), Ordering::Relaxed);
    base + Duration::from_secs(s) + advance
}

fn byte(data: &mut &[u8]) -> u8 {
    match data.split_first() {
        Some((&b, rest)) => {
            *data = rest;
            b
        }
        None => 0,
    }
}

fn chunk<'a>(data: &mut &'a [u8]) -> &'a [u8] {
    let n = match data {
        [a, b, ..] => usize::from(u16::from_be_bytes([*a, *b])).min(data.len() - 2),
        _ => return std::mem::take(data),
    };
    let part = &data[2..2 + n];
    *data = &data[2 + n..];
    part
}

/// The client's UDP limit: 512 without EDNS, else its payload size clamped to 512..=ours
/// (RFC 6891 §6.2.5).
fn udp_limit(query: &Message) -> usize {
    query.edns.as_ref().map_or(512, |e| {
        usize::from(e.max_payload().clamp(512, EDNS_PAYLOAD))
    })
}

fuzz_target!(|input: &[u8]| {
    let r = resolver();
    let mut data = input;
    let mut tx = [0u8; EDNS_PAYLOAD as usize];
    let mut datagrams = 0;
    while !data.is_empty() && datagrams < 8 {
        datagrams += 1;
        let flags = byte(&mut data);
        let request = chunk(&mut data);
        let t = now(Duration::from_secs(u64::from(flags >> 1)));
        if flags & 1 == 1 {
            // Truncated by recvmmsg: counted Malformed, never parsed.
            continue;
        }
        if let Some((n, _outcome)) = r.answer_cached(request, true, t, &mut tx) {
            let mut key = [0u8; MAX_KEY];
            let info = parse_query(request, &mut key, EDNS_PAYLOAD).expect("a hit parsed");
            assert!(n <= info.max_udp && n <= tx.len());
            assert!(n >= info.question_end);
            assert_eq!(tx[..2], request[..2], "the client's ID");
            assert_eq!(tx[12..info.question_end], request[12..info.question_end]);
            assert_eq!(tx[2] & 0x80, 0x80, "a response");
            continue;
        }
        let mut exchange = match r.exchange(request, true) {
            Ok(e) => e,
            Err(reply) => {
                assert_eq!(reply.outcome, Outcome::Malformed);
                if let Some(w) = reply.wire {
                    assert_eq!(w[..2], request[..2], "FORMERR carries the client's ID");
                }
                continue;
            }
        };
        let client = Message::from_vec(request).expect("exchange decoded it");
        let id = u16::from_be_bytes([byte(&mut data), byte(&mut data)]);
        while let Some(ask) = exchange.ask() {
            if let Ok(wire) = encode(ask, id) {
                let q = Message::from_vec(&wire).expect("our upstream query decodes");
                assert_eq!(q.metadata.id, id);
                assert_eq!(q.queries.len(), 1);
                assert_eq!(q.queries[0].query_type(), ask.query.query_type());
            }
            let how = byte(&mut data) % 3;
            let bytes = chunk(&mut data);
            let answer = match (how, Message::from_vec(bytes)) {
                (0, _) | (_, Err(_)) => Err(UpstreamError::NoAnswer),
                (1, Ok(m)) if matches(&m, id, ask) => Ok(m),
                (1, Ok(_)) => Err(UpstreamError::NoAnswer),
                (_, Ok(mut m)) => {
                    m.metadata.id = id;
                    m.metadata.message_type = MessageType::Response;
                    m.queries = vec![ask.query.clone()];
                    assert!(matches(&m, id, ask), "a fixed-up answer matches");
                    Ok(m)
                }
            };
            exchange.handle(r, answer);
        }
        let reply = exchange.finish(r, t);
        if let Some(w) = reply.wire {
            assert_eq!(w[..2], request[..2], "the client's ID");
            assert!(w.len() <= udp_limit(&client), "{} > UDP limit", w.len());
        }
    }
});
