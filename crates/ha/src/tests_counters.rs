//! The counters-only message: its encoding, how a record takes it, what the channel does to
//! a truncated, forged or replayed one, and what it saves on the sync link.

use std::time::Instant;

use gate64_esp::{Cipher, Inbound, OpenError, Outbound, SaDb, TAKEOVER_SEQ_MARGIN};

use crate::codec::{HEADER_LEN, TAG_LEN};
use crate::tests::{IN, child_record, ends, esp_packet, ike_record, pair, sealed};
use crate::*;

fn entry(spi: u32, out: u64, high: u64) -> ChildCounters {
    ChildCounters {
        spi,
        outbound_next_seq: out,
        inbound_highest_seq: high,
    }
}

#[test]
fn counters_round_trip_in_batches() {
    assert!(ChildCounters::encode_batches(&[]).is_empty());
    let entries: Vec<ChildCounters> = (0..150u32)
        .map(|i| entry(0xc000_0000 | i, u64::from(i) << 33, u64::MAX - u64::from(i)))
        .collect();
    let bodies = ChildCounters::encode_batches(&entries);
    assert_eq!(bodies.len(), 3, "64 + 64 + 22");
    assert_eq!(
        bodies[0].len(),
        2 + MAX_COUNTERS_PER_MESSAGE * COUNTERS_ENTRY_LEN
    );
    assert_eq!(bodies[2].len(), 2 + 22 * COUNTERS_ENTRY_LEN);
    let back: Vec<ChildCounters> = bodies
        .iter()
        .flat_map(|b| ChildCounters::decode_batch(b).unwrap())
        .collect();
    assert_eq!(back, entries);
    // A full batch, sealed, fits a 1,500-byte MTU with its IPv6 and UDP headers.
    assert!(HEADER_LEN + bodies[0].len() + TAG_LEN + 40 + 8 <= 1500);
}

#[test]
fn counters_refuse_truncation_trailing_bytes_versions_and_bad_counts() {
    let body = ChildCounters::encode_batches(&[entry(1, 2, 3), entry(4, 5, 6)]).remove(0);
    for len in 0..body.len() {
        assert!(
            ChildCounters::decode_batch(&body[..len]).is_err(),
            "{len} bytes"
        );
    }
    assert_eq!(
        ChildCounters::decode_batch(&body[..body.len() - 1]),
        Err(DecodeError::Truncated)
    );
    let mut longer = body.clone();
    longer.push(0);
    assert_eq!(
        ChildCounters::decode_batch(&longer),
        Err(DecodeError::Trailing)
    );
    for v in [0, 2, 255] {
        let mut other = body.clone();
        other[0] = v;
        assert_eq!(
            ChildCounters::decode_batch(&other),
            Err(DecodeError::Version(v))
        );
    }
    let mut count = body.clone();
    count[1] = 3;
    assert_eq!(
        ChildCounters::decode_batch(&count),
        Err(DecodeError::Truncated),
        "a count the bytes do not hold"
    );
    count[1] = (MAX_COUNTERS_PER_MESSAGE + 1) as u8;
    assert_eq!(
        ChildCounters::decode_batch(&count),
        Err(DecodeError::Invalid("count"))
    );
    assert_eq!(
        ChildCounters::decode_batch(&[COUNTERS_VERSION, 0]),
        Err(DecodeError::Invalid("count")),
        "an empty batch"
    );
}

#[test]
fn counters_only_raise_a_record() {
    let mut record = child_record();
    record.outbound_next_seq = 100;
    record.inbound_highest_seq = 50;
    let keys = record.inbound.keys.clone();
    assert_eq!(record.counters(), entry(IN, 100, 50));
    assert!(record.apply_counters(&entry(IN, 200, 60)));
    assert_eq!(record.counters(), entry(IN, 200, 60));
    assert!(
        !record.apply_counters(&entry(IN, 150, 10)),
        "an older message lowers nothing"
    );
    assert_eq!(record.counters(), entry(IN, 200, 60));
    assert!(
        record.apply_counters(&entry(IN, 0, 70)),
        "each counter alone"
    );
    assert_eq!(record.counters(), entry(IN, 200, 70));
    assert_eq!(record.inbound.keys, keys, "nothing but the counters moved");
}

/// A forged counters message does not open, a replayed one opens once, a truncated one is
/// malformed; only one that opens reaches the decoder.
#[test]
fn the_channel_refuses_forged_replayed_and_truncated_counters() {
    let (mut tx, mut rx) = ends(4);
    let body = ChildCounters::encode_batches(&[entry(IN, 9, 9)]).remove(0);
    let m = sealed(&mut tx, MessageType::ChildCounters, &body);
    for len in 0..m.len() {
        assert_eq!(
            rx.open(&mut m[..len].to_vec()).err(),
            Some(Refusal::Malformed),
            "{len} bytes"
        );
    }
    for at in HEADER_LEN..m.len() {
        let mut forged = m.clone();
        forged[at] ^= 0x80;
        assert_eq!(
            rx.open(&mut forged),
            Err(Refusal::Unauthenticated),
            "byte {at}"
        );
    }
    let mut first = m.clone();
    let o = rx.open(&mut first).unwrap();
    assert_eq!(o.kind, MessageType::ChildCounters);
    assert_eq!(
        ChildCounters::decode_batch(o.plaintext),
        Ok(vec![entry(IN, 9, 9)])
    );
    assert_eq!(rx.open(&mut m.clone()), Err(Refusal::Replayed));
}

/// The record goes once; later counters raise it on the standby; a takeover resumes above
/// them, the install margin on top.
#[test]
fn counters_carry_the_sequence_numbers_to_a_takeover() {
    let now = Instant::now();
    let pair = pair(Cipher::AesGcm16_128, now);
    let client_tx = Outbound::new(&pair.inbound).unwrap();
    let client_rx = Inbound::new(&pair.outbound).unwrap();
    let active = SaDb::new();
    active.install(pair).unwrap();
    let (mut tx, mut rx) = ends(1);
    let record = ChildSaRecord::from_synced(&active.export_sa(IN).unwrap(), now);
    let mut wire = sealed(&mut tx, MessageType::ChildSa, &record.encode());
    let mut stored = ChildSaRecord::decode(rx.open(&mut wire).unwrap().plaintext).unwrap();

    let a = active.inbound(IN).unwrap();
    let old: Vec<Vec<u8>> = (0..5).map(|n| esp_packet(&client_tx, n)).collect();
    for p in &old {
        a.sa.open(&mut p.clone()).unwrap();
    }
    for n in 0..7 {
        client_rx.open(&mut esp_packet(&a.outbound.sa, n)).unwrap();
    }
    let synced = active.export_sa(IN).unwrap();
    let moved = entry(IN, synced.outbound_next_seq, synced.inbound_highest_seq);
    assert_eq!(moved, entry(IN, 8, 5));
    let body = ChildCounters::encode_batches(&[moved]).remove(0);
    let mut wire = sealed(&mut tx, MessageType::ChildCounters, &body);
    for c in ChildCounters::decode_batch(rx.open(&mut wire).unwrap().plaintext).unwrap() {
        assert_eq!(c.spi, stored.inbound.spi);
        assert!(stored.apply_counters(&c));
    }

    let standby = SaDb::new();
    standby
        .install_synced(stored.into_synced(now), TAKEOVER_SEQ_MARGIN)
        .unwrap();
    let b = standby.inbound(IN).unwrap();
    for p in &old {
        assert_eq!(b.sa.open(&mut p.clone()), Err(OpenError::Replay));
    }
    assert_eq!(b.outbound.sa.next_seq(), 8 + TAKEOVER_SEQ_MARGIN);
    client_rx
        .open(&mut esp_packet(&b.outbound.sa, 1))
        .expect("the client opens the standby's packets");
}

/// Bytes a second on the sync link for `n` child SAs whose counters all moved each second:
/// every record whole every second before; now the counters in full batches, and each
/// record once per refresh period (`refresh` seconds). IPv6 and UDP headers counted.
fn link_bytes_per_second(n: usize, refresh: usize) -> (usize, usize) {
    const IP_UDP: usize = 40 + 8;
    let frame = HEADER_LEN + TAG_LEN + IP_UDP;
    let record = child_record().encode().len() + frame;
    let before = n * record;
    let full = n / MAX_COUNTERS_PER_MESSAGE;
    let rest = n % MAX_COUNTERS_PER_MESSAGE;
    let counters = full * (2 + MAX_COUNTERS_PER_MESSAGE * COUNTERS_ENTRY_LEN + frame)
        + if rest > 0 {
            2 + rest * COUNTERS_ENTRY_LEN + frame
        } else {
            0
        };
    (before, counters + n * record / refresh)
}

#[test]
fn counters_cut_the_sync_link_bytes() {
    let record = child_record().encode().len();
    for n in [1_000, 100_000] {
        let (before, after) = link_bytes_per_second(n, 30);
        println!(
            "{n} child SAs ({record}-byte record): {before} B/s before, {after} B/s after \
             ({:.1}x less)",
            before as f64 / after as f64
        );
        assert!(after * 5 < before, "{n}: {before} -> {after}");
    }
}

/// An IKE SA's whole record every 30 s (its refresh) costs the sync link a few bytes a
/// second, whatever the SA does: the record, with a long identity, two alternative names and
/// two child SAs, plus the sync header, tag, IPv6 and UDP, fits one datagram and stays under
/// 20 bytes a second.
#[test]
fn an_ike_sa_refresh_costs_the_link_little() {
    const IP_UDP: usize = 40 + 8;
    let record = encode_ike_sa(&ike_record()).len();
    let datagram = record + HEADER_LEN + TAG_LEN + IP_UDP;
    let per_second = datagram as f64 / 30.0;
    println!("{record}-byte IKE SA record, {datagram}-byte datagram: {per_second:.1} B/s per SA");
    assert!(datagram <= 1500, "{datagram}");
    assert!(per_second < 20.0, "{per_second}");
}
