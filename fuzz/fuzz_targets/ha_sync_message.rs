//! gate64-ha's sync channel and records on arbitrary bytes: `Opener::open` under a fixed
//! secret (the AEAD is real, so a forged message must never open), the child SA and IKE SA
//! record decoders, and seal -> one flipped byte -> open round trips.
//! Input: `[mode][bytes]`. Mode 0: open `bytes` as a message with the persistent receiver
//! (its epoch and window move only on authentic messages). Mode 1: decode `bytes` as a child
//! SA record, as an IKE SA record, as both kinds of `Gone` and as a counters batch; what
//! decodes must encode and decode back to itself (a counters batch to the same bytes), and
//! a batch's counters applied to a child SA record only raise it.
//! Mode 2: seal `bytes[2..]` (type by `bytes[0]`: child SA, IKE SA or counters) with the
//! persistent sender, flip byte
//! `bytes[0]` with mask `bytes[1]` (mask 0 = untouched), open with the persistent receiver,
//! and decode the plaintext as records. An untouched message must open to what was sealed; a
//! touched one must not open.
#![no_main]

use std::sync::{LazyLock, Mutex};

use gate64_ha::{
    ChildCounters, ChildSaRecord, Gone, MessageType, Opener, Refusal, Sealer, SharedSecret,
    decode_ike_sa, encode_ike_sa,
};
use libfuzzer_sys::fuzz_target;

const LOCAL: u32 = 2;
const PEER: u32 = 1;

fn secret() -> SharedSecret {
    SharedSecret::from_file_contents(b"gate64-ha fuzz secret: 32 bytes or more\n").unwrap()
}

struct Ends {
    sealer: Sealer,
    opener: Opener,
}

static ENDS: LazyLock<Mutex<Ends>> = LazyLock::new(|| {
    let s = secret();
    Mutex::new(Ends {
        sealer: Sealer::new(&s, PEER, LOCAL, 1).unwrap(),
        opener: Opener::new(&s, LOCAL, PEER).unwrap(),
    })
});

/// A child SA record for counters to apply to: no SA database, so decoded from fixed bytes
/// (version 1, an AES-GCM-128 SA with no selectors, counters at 1000 and 500).
static RECORD: LazyLock<ChildSaRecord> = LazyLock::new(|| {
    let mut b = vec![1];
    b.extend_from_slice(&7u64.to_be_bytes());
    b.push(0);
    b.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
    b.extend_from_slice(&[0, 0, 0]);
    for spi in [0xc000_0001u32, 0xc000_0002] {
        b.extend_from_slice(&spi.to_be_bytes());
        b.extend_from_slice(&[1, 0, 20]);
        b.extend_from_slice(&[9; 20]);
        for v in [1u64 << 30, 1 << 31, 3_000_000, u64::MAX, 1000] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend_from_slice(&[0, 0]);
    }
    b.extend_from_slice(&1000u64.to_be_bytes());
    b.extend_from_slice(&500u64.to_be_bytes());
    ChildSaRecord::decode(&b).unwrap()
});

fn records(bytes: &[u8]) {
    if let Ok(r) = ChildSaRecord::decode(bytes) {
        assert_eq!(ChildSaRecord::decode(&r.encode()).as_ref(), Ok(&r));
    }
    if let Ok(r) = decode_ike_sa(bytes) {
        assert_eq!(decode_ike_sa(&encode_ike_sa(&r)).as_ref(), Ok(&r));
    }
    if let Ok(batch) = ChildCounters::decode_batch(bytes) {
        assert_eq!(ChildCounters::encode_batches(&batch), vec![bytes.to_vec()]);
        let mut record = RECORD.clone();
        for c in &batch {
            let before = record.counters();
            let moved = record.apply_counters(c);
            let after = record.counters();
            assert!(after.outbound_next_seq >= before.outbound_next_seq);
            assert!(after.inbound_highest_seq >= before.inbound_highest_seq);
            assert_eq!(moved, after != before);
            assert_eq!(after.spi, before.spi);
        }
    }
    for kind in [MessageType::IkeSaGone, MessageType::ChildSaGone] {
        if let Some(Ok(g)) = Gone::decode(kind, bytes) {
            let (k, body) = g.encode();
            assert_eq!((k, body.as_slice()), (kind, bytes));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let mut ends = ENDS.lock().unwrap_or_else(|e| e.into_inner());
    match mode % 3 {
        0 => {
            let before = ends.opener.peer_epoch();
            let mut msg = bytes.to_vec();
            // Nothing but the sender's seals authenticates under the secret.
            assert!(ends.opener.open(&mut msg).is_err());
            assert_eq!(ends.opener.peer_epoch(), before);
        }
        1 => records(bytes),
        _ => {
            let [at, mask, plaintext @ ..] = bytes else {
                return;
            };
            let kind = match at % 3 {
                0 => MessageType::ChildSa,
                1 => MessageType::IkeSa,
                _ => MessageType::ChildCounters,
            };
            let mut msg = Vec::new();
            if ends.sealer.seal(kind, plaintext, &mut msg).is_err() {
                return;
            }
            let i = usize::from(*at) % msg.len();
            msg[i] ^= mask;
            match ends.opener.open(&mut msg) {
                Ok(o) => {
                    assert_eq!(*mask, 0, "a touched message opened");
                    assert_eq!((o.kind, o.plaintext), (kind, plaintext));
                    records(o.plaintext);
                }
                Err(r) => {
                    assert_ne!(*mask, 0, "an untouched message was refused: {r:?}");
                    let _: Refusal = r;
                }
            }
        }
    }
});
