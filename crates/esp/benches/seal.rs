//! ESP seal and open of 1,400-byte inner packets, in place, one core: AES-256-GCM,
//! AES-256-CBC with HMAC-SHA2-256-128 (what native clients propose by default), and
//! AES-256-GMAC (integrity only, what `[ipsec] iphttps_integrity_only` allows over IP-HTTPS). Throughput is
//! in inner bytes (the aim is >= 3 Gbit/s per core for seal + encapsulate under AES-GCM).

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gate64_esp::{Cipher, Inbound, Lifetime, Outbound, SaKeys, SaParams, Selector};

const INNER: usize = 1400;
/// Room for an outer IPv6 + UDP header in front, as the dataplane's headroom holds.
const AT: usize = 48;

fn params(cipher: Cipher, esn: bool) -> SaParams {
    SaParams {
        spi: 0x0102_0304,
        keys: SaKeys {
            cipher,
            key: (0..cipher.keymat_len() as u8).collect(),
        },
        esn,
        lifetime: Lifetime::UNLIMITED,
        created: Instant::now(),
        local_ts: vec![Selector::prefix("fd00:c0::/64".parse().unwrap())],
        remote_ts: vec![Selector::prefix("fd00:c1::/64".parse().unwrap())],
    }
}

fn bench(c: &mut Criterion) {
    bench_cipher(c, "esp_aes256gcm_1400", Cipher::AesGcm16_256);
    bench_cipher(c, "esp_aes256cbc_sha256_1400", Cipher::AesCbc256HmacSha256);
    bench_cipher(c, "esp_aes256gmac_1400", Cipher::NullAesGmac256);
}

fn bench_cipher(c: &mut Criterion, group: &str, cipher: Cipher) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Bytes(INNER as u64));
    let room = cipher.header_len() + INNER + cipher.max_trailer();

    let out = Outbound::new(&params(cipher, false)).unwrap();
    let mut buf = vec![0x45u8; AT + room];
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
    let out = Outbound::new(&params(cipher, true)).unwrap();
    let mut inbound = Inbound::new(&params(cipher, true)).unwrap();
    let batch: Vec<Vec<u8>> = (0..BATCH)
        .map(|_| {
            let mut b = vec![0x60u8; room];
            let n = out.seal(&mut b, 0, INNER, 41).unwrap();
            b.truncate(n);
            b
        })
        .collect();
    let mut work = vec![0u8; cipher.esp_len(INNER)];
    let mut next = 0usize;
    g.bench_function("open", |b| {
        b.iter(|| {
            if next == BATCH {
                next = 0;
                inbound = Inbound::new(&params(cipher, true)).unwrap();
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
