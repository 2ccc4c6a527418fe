//! ESP seal and open of 1,400-byte inner packets under AES-256-GCM, in place, one core.
//! Throughput is in inner bytes (the aim is >= 3 Gbit/s per core for seal + encapsulate).

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gate64_esp::{
    Cipher, Inbound, Lifetime, MAX_TRAILER, Outbound, SPI_SEQ_IV_LEN, SaKeys, SaParams, Selector,
};

const INNER: usize = 1400;
/// Room for an outer IPv6 + UDP header in front, as the dataplane's headroom holds.
const AT: usize = 48;

fn params(esn: bool) -> SaParams {
    SaParams {
        spi: 0x0102_0304,
        keys: SaKeys {
            cipher: Cipher::AesGcm16_256,
            key: (0..36).collect(),
        },
        esn,
        lifetime: Lifetime::UNLIMITED,
        created: Instant::now(),
        local_ts: vec![Selector::prefix("fd00:c0::/64".parse().unwrap())],
        remote_ts: vec![Selector::prefix("fd00:c1::/64".parse().unwrap())],
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("esp_aes256gcm_1400");
    g.throughput(Throughput::Bytes(INNER as u64));

    let out = Outbound::new(&params(false)).unwrap();
    let mut buf = vec![0x45u8; AT + SPI_SEQ_IV_LEN + INNER + MAX_TRAILER];
    g.bench_function("seal", |b| {
        b.iter(|| {
            // Sealing in place turns the inner packet into ciphertext; re-sealing that
            // ciphertext costs the same, so the buffer is not reset between iterations.
            let len = out.seal(black_box(&mut buf), AT, INNER, 41).unwrap();
            black_box(len)
        })
    });

    // Open needs a fresh sequence number per packet (the window refuses replays), so each
    // iteration opens the next of a batch sealed beforehand, copied into a work buffer (the
    // 1.4 kB copy is measured too, so the figure is a lower bound); at the end of the batch
    // a new receiver starts over (its key setup amortised over the batch).
    const BATCH: usize = 16 * 1024;
    let out = Outbound::new(&params(true)).unwrap();
    let mut inbound = Inbound::new(&params(true)).unwrap();
    let batch: Vec<Vec<u8>> = (0..BATCH)
        .map(|_| {
            let mut b = vec![0x60u8; SPI_SEQ_IV_LEN + INNER + MAX_TRAILER];
            let n = out.seal(&mut b, 0, INNER, 41).unwrap();
            b.truncate(n);
            b
        })
        .collect();
    let mut work = vec![0u8; gate64_esp::esp_len(INNER)];
    let mut next = 0usize;
    g.bench_function("open", |b| {
        b.iter(|| {
            if next == BATCH {
                next = 0;
                inbound = Inbound::new(&params(true)).unwrap();
            }
            work.copy_from_slice(&batch[next]);
            next += 1;
            let opened = inbound.open(black_box(&mut work)).unwrap();
            black_box(opened)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
