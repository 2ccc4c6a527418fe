//! The per-packet cost of a session policy on the data path: the reach check (a two-entry
//! list of both families) and the lock-free rate limit, one core, and the limit shared by
//! two threads hammering one SA (the worst case of its compare-and-swap loop).

use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use gate64_esp::{RateLimit, Selector, SessionPolicy};

fn bench(c: &mut Criterion) {
    let epoch = Instant::now();
    let policy = SessionPolicy::new(
        "contractors".into(),
        vec![
            Selector::prefix("fd00:c1::10/128".parse().unwrap()),
            Selector::prefix("10.1.0.0/16".parse().unwrap()),
        ],
        // High enough that every packet is admitted: the cost measured is the admitting one.
        Some(100_000),
        epoch,
    );
    let dst: IpAddr = "fd00:c1::10".parse().unwrap();
    let limit = policy.to_client.as_ref().unwrap();
    // The workers pass the batch's `now`: a clock advancing 200 ns a packet, not a clock read.
    c.bench_function("policy_reach_and_rate_1400", |b| {
        let mut now = epoch;
        b.iter(|| {
            now += Duration::from_nanos(200);
            black_box(policy.reaches(black_box(dst)) && limit.allow(now, black_box(1400)))
        })
    });
    c.bench_function("policy_rate_refused_1400", |b| {
        let empty = RateLimit::new(1, epoch);
        while empty.allow(epoch, 1400) {}
        b.iter(|| black_box(empty.allow(black_box(epoch), black_box(1400))))
    });
    let shared = Arc::new(RateLimit::new(100_000, epoch));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (shared, stop) = (Arc::clone(&shared), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                black_box(shared.allow(Instant::now(), 1400));
            }
        })
    };
    c.bench_function("policy_rate_contended_1400", |b| {
        b.iter(|| black_box(shared.allow(Instant::now(), black_box(1400))))
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = other.join();
}

criterion_group!(benches, bench);
criterion_main!(benches);
