//! Handing a child SA from one node's database to another's: [`SaDb::export_sa`] and
//! [`SaDb::install_synced`].

use std::net::IpAddr;

use crate::tests::{keymat, params, seal};
use crate::*;

const IN: u32 = 0x0000_1000;
const OUT: u32 = 0x0000_2000;

fn addr_of_client() -> IpAddr {
    "fd00:c1::100".parse().unwrap()
}

fn child(cipher: Cipher, esn: bool) -> ChildSaPair {
    let client = addr_of_client();
    let mut inbound = params(cipher, keymat(cipher, 3), IN, esn);
    inbound.remote_ts = vec![Selector::address(client)];
    let mut outbound = params(cipher, keymat(cipher, 77), OUT, esn);
    outbound.remote_ts = vec![Selector::address(client)];
    ChildSaPair {
        inbound,
        outbound,
        peer: Peer {
            outer: "2001:db8::7".parse().unwrap(),
            native: Some("[2001:db8::1]:4500".parse().unwrap()),
            udp_encap: Some(4500),
            inner: vec![client],
        },
        tunnel: TunnelKind::Intranet,
        ike_spi: 0xabcd_0001,
    }
}

/// The ESP bytes of one sealed packet, starting at the SPI.
fn packet(out: &Outbound, n: u8) -> Vec<u8> {
    let (buf, len) = seal(out, &[0x60, n, n, n, n, n, n, n], 8, NEXT_HEADER_IPV6);
    buf[8..8 + len].to_vec()
}

fn takeover(cipher: Cipher, esn: bool) {
    let pair = child(cipher, esn);
    // The client's halves: it seals under gate64's inbound SA and opens its outbound one.
    let client_tx = Outbound::new(&pair.inbound).unwrap();
    let client_rx = Inbound::new(&pair.outbound).unwrap();
    let active = SaDb::new();
    active.install(pair.clone()).unwrap();
    let a = active.inbound(IN).unwrap();
    let sent: Vec<Vec<u8>> = (0..5).map(|n| packet(&client_tx, n)).collect();
    for p in &sent {
        a.sa.open(&mut p.clone()).unwrap();
    }
    for n in 0..10 {
        client_rx
            .open(&mut packet(&a.outbound.sa, n))
            .expect("the client opens the active node's packets");
    }

    let synced = active.export_sa(IN).expect("installed");
    assert_eq!(
        synced.pair, pair,
        "keys, selectors, peer and lifetimes carry over"
    );
    assert_eq!(synced.outbound_next_seq, a.outbound.sa.next_seq());
    let high = a.sa.highest_seq();
    assert_eq!(synced.inbound_highest_seq, high);
    assert!(active.export_sa(0x9999).is_none());
    assert_eq!(
        active.export_counters(IN),
        Some((synced.outbound_next_seq, high))
    );
    assert!(active.export_counters(0x9999).is_none());

    let standby = SaDb::new();
    standby
        .install_synced(synced.clone(), TAKEOVER_SEQ_MARGIN)
        .unwrap();
    let b = standby.inbound(IN).unwrap();
    for p in &sent {
        assert_eq!(
            b.sa.open(&mut p.clone()),
            Err(OpenError::Replay),
            "ESP from before the takeover is a replay"
        );
    }
    let fresh = packet(&client_tx, 5);
    b.sa.open(&mut fresh.clone())
        .expect("the client's next packet opens on the standby");
    assert_eq!(b.sa.open(&mut fresh.clone()), Err(OpenError::Replay));
    assert!(b.sa.highest_seq() > high);

    let out = &b.outbound.sa;
    assert_eq!(
        out.next_seq(),
        synced.outbound_next_seq + TAKEOVER_SEQ_MARGIN
    );
    let first = packet(out, 1);
    let seq_lo = u32::from_be_bytes(first[4..8].try_into().unwrap());
    assert_eq!(u64::from(seq_lo), 11 + TAKEOVER_SEQ_MARGIN);
    client_rx
        .open(&mut first.clone())
        .expect("the client opens the standby's packets");
    assert!(client_rx.highest_seq() > 10 + TAKEOVER_SEQ_MARGIN);
    assert!(
        standby
            .outbound_for(pair.peer.inner[0], "fd00:c0::1".parse().unwrap())
            .is_some()
    );
    assert_eq!(
        standby.install_synced(synced, TAKEOVER_SEQ_MARGIN),
        Err(InstallError::DuplicateSpi(IN))
    );
}

#[test]
fn takeover_gcm_resumes_counters_and_refuses_old_packets() {
    takeover(Cipher::AesGcm16_256, false);
    takeover(Cipher::AesGcm16_128, true);
}

#[test]
fn takeover_cbc_resumes_counters_and_refuses_old_packets() {
    takeover(Cipher::AesCbc256HmacSha256, false);
    takeover(Cipher::AesCbc128HmacSha256, true);
}

#[test]
fn takeover_gmac_resumes_counters_and_refuses_old_packets() {
    takeover(Cipher::NullAesGmac256, false);
    takeover(Cipher::NullAesGmac192, true);
    takeover(Cipher::NullAesGmac128, false);
}

#[test]
fn takeover_past_the_sequence_space_expires_instead_of_reusing_numbers() {
    let pair = child(Cipher::AesGcm16_256, false);
    let synced = SyncedChildSa {
        pair: pair.clone(),
        outbound_next_seq: u64::from(u32::MAX) - 5,
        inbound_highest_seq: 0,
    };
    let db = SaDb::new();
    db.install_synced(synced, TAKEOVER_SEQ_MARGIN).unwrap();
    let e = db.inbound(IN).unwrap();
    assert!(e.outbound.sa.is_expired());
    assert!(
        db.outbound_for(addr_of_client(), "fd00:c0::1".parse().unwrap())
            .is_none()
    );
    let (mut buf, at) = (vec![0u8; 256], 0);
    let h = e.outbound.sa.header_len();
    buf[h] = 0x60;
    assert_eq!(
        e.outbound.sa.seal(&mut buf, at, 40, NEXT_HEADER_IPV6),
        Err(SealError::Expired)
    );
    // With ESN, a counter at the very end of the 64-bit space is expired as well.
    let mut esn = pair;
    esn.inbound.spi = IN + 1;
    esn.inbound.esn = true;
    esn.outbound.esn = true;
    let synced = SyncedChildSa {
        pair: esn,
        outbound_next_seq: u64::MAX - 2,
        inbound_highest_seq: 0,
    };
    db.install_synced(synced, TAKEOVER_SEQ_MARGIN).unwrap();
    let esn = db.inbound(IN + 1).unwrap();
    assert!(esn.outbound.sa.is_expired());
    assert_eq!(
        esn.outbound.sa.seal(&mut buf, at, 40, NEXT_HEADER_IPV6),
        Err(SealError::Expired)
    );
    // An inbound high-water mark of 0 (nothing received) accepts the first packet.
    let client_tx = Outbound::new(&child(Cipher::AesGcm16_256, false).inbound).unwrap();
    e.sa.open(&mut packet(&client_tx, 1)).unwrap();
}

#[test]
fn exported_keys_do_not_show_in_debug() {
    let db = SaDb::new();
    db.install(child(Cipher::AesGcm16_256, false)).unwrap();
    let text = format!("{:?}", db.export_sa(IN).unwrap());
    assert!(text.contains("redacted"));
    let key = keymat(Cipher::AesGcm16_256, 3);
    assert!(!text.contains(&format!("{:?}", &key[..4])), "{text}");
}
