//! DNS64 hot paths: a cache hit as the fast UDP path serves it (parse the question, copy the
//! answer, rewrite ID and TTLs), and a full miss through the synthesis plan with a canned
//! upstream (decode the query, AAAA NODATA, A, synthesize, encode).
//!
//! `cargo bench -p gate64-dns64` (add `-- --quick` for a short run).
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gate64_dns64::Outcome;
use gate64_dns64::cache::{Cache, MAX_KEY, parse_query};
use gate64_dns64::synth::{EDNS_PAYLOAD, Step, Synthesizer, run_with};
use gate64_nat64::Prefix;
use hickory_proto::op::{Edns, Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn query(name: &str) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = 0x4242;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(
        Name::from_ascii(name).unwrap(),
        RecordType::AAAA,
    ));
    let mut e = Edns::new();
    e.set_max_payload(1232);
    m.set_edns(e);
    m.to_vec().unwrap()
}

fn upstream(q: &Query) -> Message {
    let mut m = Message::response(1, OpCode::Query);
    m.queries.push(q.clone());
    match q.query_type() {
        RecordType::A => {
            m.add_answer(Record::from_rdata(
                q.name().clone(),
                3600,
                RData::A(A::new(198, 51, 100, 10)),
            ));
        }
        _ => {
            let soa = SOA::new(
                Name::from_ascii("ns.corp.example.").unwrap(),
                Name::from_ascii("h.corp.example.").unwrap(),
                1,
                3600,
                600,
                86400,
                300,
            );
            m.add_authority(Record::from_rdata(
                Name::from_ascii("corp.example.").unwrap(),
                3600,
                RData::SOA(soa),
            ));
        }
    }
    m.metadata.response_code = ResponseCode::NoError;
    m
}

fn bench(c: &mut Criterion) {
    let syn = Synthesizer::new(Prefix::WELL_KNOWN.allow_private(true), &[]);
    let wire = query("app.corp.example.");

    let mut g = c.benchmark_group("dns64");
    g.throughput(Throughput::Elements(1));
    g.bench_function("miss_synthesize_aaaa", |b| {
        b.iter(|| {
            let req = Message::from_vec(black_box(&wire)).unwrap();
            let step = run_with(&syn, &req, |ask| Ok(upstream(&ask.query)));
            let Step::Answer(m, Outcome::Synthesized) = step else {
                panic!("not synthesized")
            };
            black_box(m.to_vec().unwrap())
        })
    });

    let cache = Cache::new(65_536);
    let now = Instant::now();
    let mut key = [0u8; MAX_KEY];
    for i in 0..50_000 {
        let q = query(&format!("h{i}.corp.example."));
        let req = Message::from_vec(&q).unwrap();
        let Step::Answer(m, r) = run_with(&syn, &req, |ask| Ok(upstream(&ask.query))) else {
            unreachable!()
        };
        let info = parse_query(&q, &mut key, EDNS_PAYLOAD).unwrap();
        cache.insert(&key[..info.key_len], &m.to_vec().unwrap(), r, now);
    }
    let hit = query("h777.corp.example.");
    let later = now + Duration::from_secs(5);
    let mut out = [0u8; EDNS_PAYLOAD as usize];
    g.bench_function("cache_hit", |b| {
        b.iter(|| {
            let mut key = [0u8; MAX_KEY];
            let info = parse_query(black_box(&hit), &mut key, EDNS_PAYLOAD).unwrap();
            let (n, _) = cache
                .answer(
                    &key[..info.key_len],
                    &hit,
                    &info,
                    info.max_udp,
                    later,
                    &mut out,
                )
                .unwrap();
            black_box(n)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
