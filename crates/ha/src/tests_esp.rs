//! The integrity check a standby runs on ESP for a synced child SA before that ESP takes
//! its client over ([`ChildSaRecord::esp_authentic`]): one ICV check under the record's
//! inbound keys, above its replay mark, that changes nothing.

use std::time::Instant;

use gate64_esp::{Cipher, Outbound, SaDb};

use crate::ChildSaRecord;
use crate::tests::{IN, esp_packet, pair};

const CIPHERS: [Cipher; 7] = [
    Cipher::AesGcm16_128,
    Cipher::AesGcm16_256,
    Cipher::AesCbc128HmacSha256,
    Cipher::AesCbc256HmacSha256,
    Cipher::NullAesGmac128,
    Cipher::NullAesGmac192,
    Cipher::NullAesGmac256,
];

/// The record of a child SA with `cipher` whose inbound side saw `seen` packets, and the
/// client's sealing side of it.
fn record_and_client(cipher: Cipher, seen: u8) -> (ChildSaRecord, Outbound) {
    let now = Instant::now();
    let pair = pair(cipher, now);
    let client = Outbound::new(&pair.inbound).unwrap();
    let active = SaDb::new();
    active.install(pair).unwrap();
    let a = active.inbound(IN).unwrap();
    for n in 0..seen {
        a.sa.open(&mut esp_packet(&client, n)).unwrap();
    }
    (
        ChildSaRecord::from_synced(&active.export_sa(IN).unwrap(), now),
        client,
    )
}

#[test]
fn intact_esp_authenticates_under_every_cipher_and_changes_nothing() {
    for cipher in CIPHERS {
        let (record, client) = record_and_client(cipher, 3);
        let packet = esp_packet(&client, 7);
        let before = record.clone();
        assert!(
            record.esp_authentic(&mut packet.clone(), Instant::now()),
            "{cipher:?}"
        );
        assert!(
            record.esp_authentic(&mut packet.clone(), Instant::now()),
            "{cipher:?}: the check marks no sequence number"
        );
        assert_eq!(record, before, "{cipher:?}: the record is unchanged");
    }
}

#[test]
fn any_flipped_bit_fails() {
    for cipher in CIPHERS {
        let (record, client) = record_and_client(cipher, 0);
        let packet = esp_packet(&client, 1);
        for bit in 0..packet.len() * 8 {
            let mut p = packet.clone();
            p[bit / 8] ^= 1 << (bit % 8);
            assert!(
                !record.esp_authentic(&mut p, Instant::now()),
                "{cipher:?}: bit {bit} flipped"
            );
        }
    }
}

#[test]
fn other_spi_other_keys_truncated_and_replayed_fail() {
    let (record, client) = record_and_client(Cipher::AesGcm16_256, 2);
    let good = esp_packet(&client, 9);
    // Another SA's packet: its own SPI, its own keys.
    let mut other_pair = pair(Cipher::AesGcm16_256, Instant::now());
    other_pair.inbound.spi = IN + 1;
    let other = Outbound::new(&other_pair.inbound).unwrap();
    assert!(!record.esp_authentic(&mut esp_packet(&other, 9), Instant::now()));
    // This SA's SPI, sealed under other keys.
    other_pair.inbound.spi = IN;
    for k in other_pair.inbound.keys.key.iter_mut() {
        *k ^= 0x5a;
    }
    let forged = Outbound::new(&other_pair.inbound).unwrap();
    assert!(!record.esp_authentic(&mut esp_packet(&forged, 9), Instant::now()));
    // Cut anywhere.
    for len in 0..good.len() {
        assert!(
            !record.esp_authentic(&mut good[..len].to_vec(), Instant::now()),
            "truncated to {len}"
        );
    }
    // The client's first two packets, which the active node received (the record's mark).
    let (record, client) = record_and_client(Cipher::AesCbc128HmacSha256, 0);
    let first = esp_packet(&client, 0);
    let mut synced_after = record.clone();
    synced_after.inbound_highest_seq = 1;
    assert!(record.esp_authentic(&mut first.clone(), Instant::now()));
    assert!(
        !synced_after.esp_authentic(&mut first.clone(), Instant::now()),
        "at or below the synced replay mark"
    );
    assert!(record.esp_authentic(&mut first.clone(), Instant::now()));
}
