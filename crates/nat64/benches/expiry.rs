//! How long one expiry call holds a NAT64 shard (its lock, in the daemon) when 50,000 UDP
//! sessions run out at once, as after a mass of clients leaves: `all` is the unbounded
//! [`Shard::handle_timeout`] every tick used to run, `bounded` one call of
//! [`Shard::handle_timeout_bounded`] with the per-tick bound the daemon now uses
//! ([`gate64_nat64::stateful::EXPIRY_VISITS_PER_TICK`]). Both in the same run; each iteration
//! first fills a fresh shard (not timed).
//!
//! `cargo bench -p gate64-nat64 --bench expiry -- --warm-up-time 1 --measurement-time 5`
#![allow(missing_docs)]

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use gate64_nat64::state::{Config, Proto, Shard, Table, TcpFlags};
use gate64_nat64::stateful::EXPIRY_VISITS_PER_TICK;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

const SESSIONS: u32 = 50_000;
const NONE: TcpFlags = TcpFlags {
    syn: false,
    fin: false,
    rst: false,
};

fn full_table(t0: Instant) -> Table {
    let pool: Vec<Ipv4Addr> = (1..=4).map(|i| Ipv4Addr::new(192, 0, 2, i)).collect();
    let mut t = Table::new(Config {
        max_sessions: SESSIONS as usize,
        ..Config::new(pool)
    })
    .unwrap();
    let shard = t.shard_mut(0).unwrap();
    for i in 0..SESSIONS {
        let x = Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i / 8) << 64 | 5);
        let z = (Ipv4Addr::new(203, 0, 113, 24), 1000 + (i % 8) as u16);
        shard.handle_v6(t0, Proto::Udp, (x, 2000), z, NONE).unwrap();
    }
    assert_eq!(shard.stats().sessions, SESSIONS as usize);
    t
}

fn shard(t: &mut Table) -> &mut Shard {
    t.shard_mut(0).unwrap()
}

fn expiry(c: &mut Criterion) {
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(3600);
    let mut g = c.benchmark_group("nat64_expiry_one_call");
    g.sample_size(10);
    g.bench_function("all", |b| {
        b.iter_batched_ref(
            || full_table(t0),
            |t| shard(t).handle_timeout(later),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("bounded", |b| {
        b.iter_batched_ref(
            || full_table(t0),
            |t| shard(t).handle_timeout_bounded(later, EXPIRY_VISITS_PER_TICK),
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, expiry);
criterion_main!(benches);
