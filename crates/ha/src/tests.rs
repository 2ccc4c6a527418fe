//! The sync channel against malformed, forged, reflected, replayed and stale messages; the
//! records' encodings; and a child SA carried from one SA database to another through them.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use gate64_esp::{
    ChildSaPair, Cipher, Inbound, Lifetime, NEXT_HEADER_IPV6, OpenError, Outbound, Peer, SaDb,
    SaKeys, SaParams, Selector, TAKEOVER_SEQ_MARGIN, TunnelKind,
};

use gate64_ike::keys::Secret;
use gate64_ike::responder::{SyncedChildRef, SyncedIkeKeys, SyncedIkeSa};

use crate::codec::{HEADER_LEN, TAG_LEN};
use crate::*;

const A: u32 = 1;
const B: u32 = 2;

pub(crate) fn secret() -> SharedSecret {
    SharedSecret::from_file_contents(b"0123456789abcdef0123456789abcdef-ha\n").unwrap()
}

pub(crate) fn sealed(sealer: &mut Sealer, kind: MessageType, plaintext: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    sealer.seal(kind, plaintext, &mut out).unwrap();
    out
}

pub(crate) fn ends(epoch: u32) -> (Sealer, Opener) {
    let s = secret();
    (
        Sealer::new(&s, A, B, epoch).unwrap(),
        Opener::new(&s, B, A).unwrap(),
    )
}

#[test]
fn secret_file_contents() {
    assert_eq!(
        SharedSecret::from_file_contents(b"short\n").unwrap_err(),
        SecretError::TooShort(5)
    );
    // 31 bytes and a newline: the newline is not part of the secret.
    let mut s = vec![b'x'; 31];
    s.push(b'\n');
    assert_eq!(
        SharedSecret::from_file_contents(&s).unwrap_err(),
        SecretError::TooShort(31)
    );
    let long = vec![b'x'; MAX_SECRET_LEN + 1];
    assert!(matches!(
        SharedSecret::from_file_contents(&long),
        Err(SecretError::TooLong(_))
    ));
    let text = format!("{:?}", secret());
    assert!(!text.contains("0123"), "{text}");
    // Trailing white space does not change the key.
    let (mut tx, _) = ends(1);
    let mut rx = Opener::new(
        &SharedSecret::from_file_contents(b"0123456789abcdef0123456789abcdef-ha \r\n\n").unwrap(),
        B,
        A,
    )
    .unwrap();
    assert!(
        rx.open(&mut sealed(&mut tx, MessageType::IkeSa, b"x"))
            .is_ok()
    );
}

#[test]
fn same_node_id_on_both_ends_is_refused() {
    assert_eq!(
        Sealer::new(&secret(), A, A, 1).err(),
        Some(ChannelError::SameNodeId(A))
    );
    assert!(Opener::new(&secret(), B, B).is_err());
}

#[test]
fn round_trip_in_order_and_reordered() {
    let (mut tx, mut rx) = ends(7);
    let m1 = sealed(&mut tx, MessageType::ChildSa, b"first");
    let m2 = sealed(&mut tx, MessageType::IkeSa, b"second");
    let m3 = sealed(&mut tx, MessageType::ChildSa, b"");
    assert_eq!(m1.len(), HEADER_LEN + 5 + TAG_LEN);
    assert!(!m1.windows(5).any(|w| w == b"first"), "encrypted");
    let mut b2 = m2.clone();
    let o = rx.open(&mut b2).unwrap();
    assert_eq!(
        (o.kind, o.epoch, o.seq, o.plaintext),
        (MessageType::IkeSa, 7, 2, &b"second"[..])
    );
    let mut b1 = m1.clone();
    assert_eq!(rx.open(&mut b1).unwrap().plaintext, b"first", "reordered");
    assert_eq!(rx.open(&mut m3.clone()).unwrap().plaintext, b"");
    assert_eq!(rx.peer_epoch(), Some(7));
}

#[test]
fn truncated_messages_are_malformed() {
    let (mut tx, mut rx) = ends(1);
    let m = sealed(&mut tx, MessageType::ChildSa, b"some record bytes");
    for len in 0..m.len() {
        let r = rx.open(&mut m[..len].to_vec()).err();
        assert_eq!(r, Some(Refusal::Malformed), "{len} bytes");
    }
    assert!(
        rx.open(&mut m.clone()).is_ok(),
        "the whole message still opens"
    );
}

#[test]
fn length_field_lies_and_limits() {
    let (mut tx, mut rx) = ends(1);
    let m = sealed(&mut tx, MessageType::ChildSa, b"0123456789");
    let len = u16::from_be_bytes([m[2], m[3]]);
    for lie in [len - 1, len + 1, 0, (TAG_LEN - 1) as u16] {
        let mut bad = m.clone();
        bad[2..4].copy_from_slice(&lie.to_be_bytes());
        assert_eq!(rx.open(&mut bad), Err(Refusal::Malformed), "length {lie}");
    }
    // A length field above the limit is refused before the bytes are even compared.
    let mut bad = m.clone();
    bad[2..4].copy_from_slice(&u16::MAX.to_be_bytes());
    assert_eq!(rx.open(&mut bad), Err(Refusal::TooLong));
    let mut huge = m.clone();
    huge.resize(MAX_MESSAGE + 1, 0);
    assert_eq!(rx.open(&mut huge), Err(Refusal::TooLong));
    // Unknown version or type.
    for (at, v) in [(0, 2), (0, 0), (1, 0), (1, 9)] {
        let mut bad = m.clone();
        bad[at] = v;
        assert_eq!(
            rx.open(&mut bad),
            Err(Refusal::Malformed),
            "byte {at} = {v}"
        );
    }
    assert!(rx.open(&mut m.clone()).is_ok());
    // The sender refuses what the receiver would.
    let mut out = Vec::new();
    assert_eq!(
        tx.seal(MessageType::ChildSa, &vec![0; MAX_PLAINTEXT + 1], &mut out),
        Err(SealError::TooLong)
    );
    assert!(out.is_empty());
    let max = sealed(&mut tx, MessageType::ChildSa, &vec![7; MAX_PLAINTEXT]);
    assert_eq!(max.len(), MAX_MESSAGE);
    assert_eq!(
        rx.open(&mut max.clone()).unwrap().plaintext.len(),
        MAX_PLAINTEXT
    );
}

#[test]
fn any_flipped_bit_fails_authentication_and_moves_nothing() {
    let (mut tx, mut rx) = ends(3);
    // Sequence number 2, so no flip makes it 0 (refused as a replay before the tag).
    sealed(&mut tx, MessageType::ChildSa, b"");
    let m = sealed(&mut tx, MessageType::ChildSa, b"payload");
    // Type and length are checked before the tag; every other byte only by it. Bytes 4..8
    // are the sender, refused as not the peer.
    for at in (4..m.len()).filter(|&at| at != 1) {
        let mut bad = m.clone();
        bad[at] ^= 0x01;
        let r = rx.open(&mut bad);
        assert!(
            matches!(r, Err(Refusal::Unauthenticated)),
            "byte {at}: {r:?}"
        );
    }
    assert_eq!(rx.peer_epoch(), None, "no forged epoch was taken");
    assert!(rx.open(&mut m.clone()).is_ok());
}

#[test]
fn wrong_direction_key_or_secret_does_not_authenticate() {
    let s = secret();
    // B's message reflected back to B.
    let mut b_tx = Sealer::new(&s, B, A, 1).unwrap();
    let mut b_rx = Opener::new(&s, B, A).unwrap();
    let mut reflected = sealed(&mut b_tx, MessageType::ChildSa, b"from B");
    assert_eq!(
        b_rx.open(&mut reflected.clone()),
        Err(Refusal::Unauthenticated)
    );
    // With the sender id rewritten to A's, it opens under the A -> B key, which it was not
    // sealed with.
    reflected[4..8].copy_from_slice(&A.to_be_bytes());
    assert_eq!(b_rx.open(&mut reflected), Err(Refusal::Unauthenticated));
    // The right direction opens.
    let mut a_tx = Sealer::new(&s, A, B, 1).unwrap();
    assert!(
        b_rx.open(&mut sealed(&mut a_tx, MessageType::ChildSa, b"x"))
            .is_ok()
    );
    // Another secret.
    let other = SharedSecret::from_file_contents(&[b'z'; 40]).unwrap();
    let mut rx = Opener::new(&other, B, A).unwrap();
    let mut m = sealed(&mut a_tx, MessageType::ChildSa, b"x");
    assert_eq!(rx.open(&mut m), Err(Refusal::Unauthenticated));
    // A third node's message, even under the shared secret.
    let mut c_tx = Sealer::new(&s, 3, B, 1).unwrap();
    let mut m = sealed(&mut c_tx, MessageType::ChildSa, b"x");
    assert_eq!(b_rx.open(&mut m), Err(Refusal::Unauthenticated));
}

#[test]
fn replayed_and_too_old_messages_are_refused() {
    let (mut tx, mut rx) = ends(1);
    let msgs: Vec<Vec<u8>> = (0..RECEIVE_WINDOW + 2)
        .map(|_| sealed(&mut tx, MessageType::ChildSa, b"r"))
        .collect();
    assert!(rx.open(&mut msgs[1].clone()).is_ok());
    assert_eq!(rx.open(&mut msgs[1].clone()), Err(Refusal::Replayed));
    let last = msgs.last().unwrap();
    assert!(rx.open(&mut last.clone()).is_ok());
    assert_eq!(
        rx.open(&mut msgs[0].clone()),
        Err(Refusal::Replayed),
        "older than the window"
    );
    assert!(
        rx.open(&mut msgs[2].clone()).is_ok(),
        "at the window's edge"
    );
    // Sequence number 0 is never sent.
    let mut zero = msgs[3].clone();
    zero[12..20].fill(0);
    assert_eq!(rx.open(&mut zero), Err(Refusal::Replayed));
}

#[test]
fn a_restarted_sender_needs_a_higher_epoch() {
    let s = secret();
    let (mut old, mut rx) = ends(5);
    let before = sealed(&mut old, MessageType::ChildSa, b"old 1");
    let late = sealed(&mut old, MessageType::ChildSa, b"old 2");
    assert!(rx.open(&mut before.clone()).is_ok());
    // Restarted with the same epoch: its first message is a replay of the old first one.
    let mut same = Sealer::new(&s, A, B, 5).unwrap();
    assert_eq!(
        rx.open(&mut sealed(&mut same, MessageType::ChildSa, b"again")),
        Err(Refusal::Replayed)
    );
    let mut lower = Sealer::new(&s, A, B, 4).unwrap();
    assert_eq!(
        rx.open(&mut sealed(&mut lower, MessageType::ChildSa, b"older boot")),
        Err(Refusal::StaleEpoch)
    );
    let mut new = Sealer::new(&s, A, B, 6).unwrap();
    let mut first = sealed(&mut new, MessageType::ChildSa, b"new boot");
    let o = rx.open(&mut first).unwrap();
    assert_eq!((o.epoch, o.seq), (6, 1));
    assert_eq!(rx.peer_epoch(), Some(6));
    assert_eq!(rx.open(&mut late.clone()), Err(Refusal::StaleEpoch));
    assert_eq!(rx.open(&mut before.clone()), Err(Refusal::StaleEpoch));
    assert_eq!(Refusal::StaleEpoch.as_str(), "stale_epoch");
}

// ---- records ----

pub(crate) const IN: u32 = 0x0000_5001;
const OUT: u32 = 0xc000_0002;

fn direction(cipher: Cipher, spi: u32, seed: u8, created: Instant) -> SaParams {
    let client: IpAddr = "fd00:c1::100".parse().unwrap();
    SaParams {
        spi,
        keys: SaKeys {
            cipher,
            key: (0..cipher.keymat_len() as u8).map(|i| i ^ seed).collect(),
        },
        esn: seed.is_multiple_of(2),
        lifetime: Lifetime {
            soft_bytes: 1 << 30,
            hard_bytes: 1 << 31,
            soft_after: Duration::from_secs(3000),
            hard_after: Duration::MAX,
        },
        created,
        local_ts: vec![
            Selector::prefix("fd00:c0::/64".parse().unwrap()),
            Selector {
                start: "10.0.0.1".parse().unwrap(),
                end: "10.0.0.9".parse().unwrap(),
                protocol: 17,
                ports: 53..=53,
            },
        ],
        remote_ts: vec![Selector::address(client)],
    }
}

pub(crate) fn pair(cipher: Cipher, created: Instant) -> ChildSaPair {
    ChildSaPair {
        inbound: direction(cipher, IN, 0x11, created),
        outbound: direction(cipher, OUT, 0x22, created),
        peer: Peer {
            outer: "::ffff:198.51.100.7".parse().unwrap(),
            native: Some("192.0.2.1:4500".parse().unwrap()),
            udp_encap: Some(61_000),
            inner: vec![
                "fd00:c1::100".parse().unwrap(),
                "100.64.0.9".parse().unwrap(),
            ],
        },
        tunnel: TunnelKind::Infrastructure,
        ike_spi: 0x0102_0304_0506_0708,
    }
}

pub(crate) fn esp_packet(out: &Outbound, n: u8) -> Vec<u8> {
    let h = out.header_len();
    let inner = [0x60, n, n, n];
    let mut buf = vec![0; h + inner.len() + out.cipher().max_trailer()];
    buf[h..h + inner.len()].copy_from_slice(&inner);
    let len = out
        .seal(&mut buf, 0, inner.len(), NEXT_HEADER_IPV6)
        .unwrap();
    buf.truncate(len);
    buf
}

/// export -> record -> encode -> seal -> open -> decode -> install, for one cipher.
fn carried_over(cipher: Cipher) {
    let now = Instant::now();
    let created = now.checked_sub(Duration::from_secs(90)).unwrap_or(now);
    let pair = pair(cipher, created);
    let client_tx = Outbound::new(&pair.inbound).unwrap();
    let client_rx = Inbound::new(&pair.outbound).unwrap();
    let active = SaDb::new();
    active.install(pair.clone()).unwrap();
    let a = active.inbound(IN).unwrap();
    let old: Vec<Vec<u8>> = (0..4).map(|n| esp_packet(&client_tx, n)).collect();
    for p in &old {
        a.sa.open(&mut p.clone()).unwrap();
    }
    for n in 0..6 {
        client_rx.open(&mut esp_packet(&a.outbound.sa, n)).unwrap();
    }
    let old_next = a.outbound.sa.next_seq();

    let record = ChildSaRecord::from_synced(&active.export_sa(IN).unwrap(), now);
    assert_eq!(
        record.inbound.age,
        Duration::from_secs(90).min(now - created)
    );
    let (mut tx, mut rx) = ends(1);
    let mut wire = sealed(&mut tx, MessageType::ChildSa, &record.encode());
    let opened = rx.open(&mut wire).unwrap();
    assert_eq!(opened.kind, MessageType::ChildSa);
    let decoded = ChildSaRecord::decode(opened.plaintext).unwrap();
    assert_eq!(decoded, record);

    let later = now + Duration::from_secs(5);
    let synced = decoded.into_synced(later);
    assert_eq!(synced.pair.peer, pair.peer);
    assert_eq!(synced.pair.inbound.keys, pair.inbound.keys);
    assert_eq!(synced.pair.outbound.local_ts, pair.outbound.local_ts);
    assert_eq!(synced.pair.inbound.lifetime, pair.inbound.lifetime);
    assert_eq!(
        later - synced.pair.inbound.created,
        now - created,
        "age kept"
    );
    let standby = SaDb::new();
    standby.install_synced(synced, TAKEOVER_SEQ_MARGIN).unwrap();
    let b = standby.inbound(IN).unwrap();
    for p in &old {
        assert_eq!(b.sa.open(&mut p.clone()), Err(OpenError::Replay));
    }
    let next = esp_packet(&client_tx, 9);
    b.sa.open(&mut next.clone())
        .expect("opens above the high-water mark");
    assert_eq!(b.sa.open(&mut next.clone()), Err(OpenError::Replay));
    assert!(b.outbound.sa.next_seq() >= old_next + TAKEOVER_SEQ_MARGIN);
    client_rx
        .open(&mut esp_packet(&b.outbound.sa, 1))
        .expect("the client opens the standby's packets");
    assert!(client_rx.highest_seq() > old_next + TAKEOVER_SEQ_MARGIN - 1);
}

#[test]
fn child_sa_carried_to_the_standby_resumes_every_cipher() {
    for c in [
        Cipher::AesGcm16_128,
        Cipher::AesGcm16_256,
        Cipher::AesCbc128HmacSha256,
        Cipher::AesCbc256HmacSha256,
        Cipher::NullAesGmac128,
        Cipher::NullAesGmac192,
        Cipher::NullAesGmac256,
    ] {
        carried_over(c);
    }
}

pub(crate) fn child_record() -> ChildSaRecord {
    let now = Instant::now();
    let active = SaDb::new();
    active.install(pair(Cipher::AesGcm16_256, now)).unwrap();
    ChildSaRecord::from_synced(&active.export_sa(IN).unwrap(), now)
}

#[test]
fn child_record_refuses_truncation_trailing_bytes_and_bad_fields() {
    let record = child_record();
    let bytes = record.encode();
    for len in 0..bytes.len() {
        assert!(ChildSaRecord::decode(&bytes[..len]).is_err(), "{len} bytes");
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert_eq!(ChildSaRecord::decode(&longer), Err(DecodeError::Trailing));
    let mut v2 = bytes.to_vec();
    v2[0] = 2;
    assert_eq!(ChildSaRecord::decode(&v2), Err(DecodeError::Version(2)));
    // Offsets: version 1, IKE SA 8, tunnel 1, outer 16, native flag 1 and family 1, address
    // 4, port 2, UDP flag 1 and port 2: the inner count at 37.
    let mut tunnel = bytes.to_vec();
    tunnel[9] = 7;
    assert_eq!(
        ChildSaRecord::decode(&tunnel),
        Err(DecodeError::Invalid("tunnel"))
    );
    let mut count = bytes.to_vec();
    assert_eq!(count[37], 2);
    count[37] = 200;
    assert_eq!(
        ChildSaRecord::decode(&count),
        Err(DecodeError::Invalid("inner"))
    );
    count[37] = 16;
    assert!(
        ChildSaRecord::decode(&count).is_err(),
        "a count the bytes do not hold"
    );
    // The inbound direction starts after the two inner addresses (17 + 5 bytes): SPI 4,
    // algorithm 1, ESN 1, key length.
    let dir = 38 + 17 + 5;
    let mut alg = bytes.to_vec();
    assert_eq!(alg[dir + 4], 2);
    alg[dir + 4] = 9;
    assert_eq!(
        ChildSaRecord::decode(&alg),
        Err(DecodeError::Invalid("algorithm"))
    );
    let mut key = bytes.to_vec();
    assert_eq!(usize::from(key[dir + 6]), Cipher::AesGcm16_256.keymat_len());
    key[dir + 6] -= 1;
    assert_eq!(
        ChildSaRecord::decode(&key),
        Err(DecodeError::Invalid("key"))
    );
    key[dir + 6] = 255;
    assert_eq!(
        ChildSaRecord::decode(&key),
        Err(DecodeError::Invalid("key"))
    );
    assert_eq!(ChildSaRecord::decode(&bytes).unwrap(), record);
}

#[test]
fn records_print_no_key() {
    let text = format!("{:?}", child_record());
    assert!(text.contains("redacted"));
    assert!(!text.contains("key: ["), "{text}");
    let text = format!("{:?}", ike_record());
    assert!(
        !text.contains("170, 170"),
        "SK_d's bytes (0xaa) do not show: {text}"
    );
    assert!(text.contains("redacted"));
}

pub(crate) fn ike_record() -> SyncedIkeSa {
    let key = |b: u8, n: usize| Secret(vec![b; n]);
    SyncedIkeSa {
        spi_i: 0x1111_2222_3333_4444,
        spi_r: 0x5555_6666_7777_8888,
        prf: 5,
        integ: 0,
        encr: 20,
        encr_key_bits: 256,
        keys: SyncedIkeKeys {
            sk_d: key(0xaa, 32),
            sk_ai: key(0, 0),
            sk_ar: key(0, 0),
            sk_ei: key(0xbb, 36),
            sk_er: key(0xcc, 36),
            sk_pi: key(0xdd, 32),
            sk_pr: key(0xee, 32),
        },
        next_id_in: 7,
        next_id_out: 3,
        identity: "CN=client-7.corp.example, O=Ωmega".to_owned(),
        alt_names: vec!["client-7.corp.example".to_owned(), "2001:db8::7".to_owned()],
        identity_key: [0x42; 32],
        peer_id: Some("fqdn:client-7.corp.example".to_owned()),
        tunnel: TunnelKind::Intranet,
        intranet_allowed: true,
        mobike: false,
        fragmentation: true,
        leased: true,
        local: "[2001:db8:ffff::1]:4500".parse().unwrap(),
        remote: "[2001:db8::7]:4500".parse().unwrap(),
        inner: Some("fd00:c1::101".parse().unwrap()),
        inner4: Some("10.77.0.9".parse().unwrap()),
        children: vec![
            SyncedChildRef {
                inbound_spi: 0xc000_0001,
                outbound_spi: 0x0bad_cafe,
                age: Duration::from_secs(60),
            },
            SyncedChildRef {
                inbound_spi: 0xc000_0002,
                outbound_spi: 0x0bad_d00d,
                age: Duration::MAX,
            },
        ],
        age: Duration::from_millis(1234),
        authenticated_age: Some(Duration::from_millis(1000)),
        rekeys: 3,
        mid_sync: true,
    }
}

#[test]
fn ike_record_round_trip_and_malformed_input() {
    let record = ike_record();
    let bytes = encode_ike_sa(&record);
    assert_eq!(decode_ike_sa(&bytes).unwrap(), record);
    for len in 0..bytes.len() {
        assert!(decode_ike_sa(&bytes[..len]).is_err(), "{len} bytes");
    }
    let mut longer = bytes.to_vec();
    longer.extend_from_slice(&[1, 2]);
    assert_eq!(decode_ike_sa(&longer), Err(DecodeError::Trailing));
    // SK_d's length at 1 + 16 + 8.
    let mut sk_d = bytes.to_vec();
    assert_eq!(sk_d[25], 32);
    sk_d[25] = 65;
    assert_eq!(decode_ike_sa(&sk_d), Err(DecodeError::Invalid("key")));
    sk_d[25] = 0;
    assert!(decode_ike_sa(&sk_d).is_err());
    // The identity must be UTF-8: break the Ω (its first byte, 0xce).
    let omega = bytes.iter().position(|&b| b == 0xce).unwrap();
    let mut id = bytes.to_vec();
    id[omega] = 0xff;
    assert_eq!(decode_ike_sa(&id), Err(DecodeError::Invalid("identity")));
    let mut v0 = bytes.to_vec();
    v0[0] = 0;
    assert_eq!(decode_ike_sa(&v0), Err(DecodeError::Version(0)));
    // Unknown flag bits are refused. Behind the flags byte: two IPv6 sockets (19 bytes
    // each), the inner address (18), the IPv4 one (5), two child SAs (1 + 2 * 16), the age
    // (8), the time since authentication (9) and the rekeys (4).
    let tail = 2 * 19 + 18 + 5 + (1 + 2 * 16) + 8 + 9 + 4;
    let flags_at = bytes.len() - tail - 1;
    assert_eq!(bytes[flags_at], 1 | 4 | 8 | 16);
    for bit in [0x20, 0x40, 0x80] {
        let mut flags = bytes.to_vec();
        flags[flags_at] |= bit;
        assert_eq!(decode_ike_sa(&flags), Err(DecodeError::Invalid("flags")));
    }
    // Without the RFC 6311 flag the record is the one a build without it writes: the flags
    // byte is all that differs, and the peer's support survives the round trip either way.
    let mut without = ike_record();
    without.mid_sync = false;
    let plain = encode_ike_sa(&without);
    assert_eq!(plain.len(), bytes.len());
    let differ: Vec<usize> = (0..plain.len()).filter(|&i| plain[i] != bytes[i]).collect();
    assert_eq!(differ, [flags_at]);
    assert_eq!(plain[flags_at], 1 | 4 | 8);
    assert!(!decode_ike_sa(&plain).unwrap().mid_sync);
    assert!(decode_ike_sa(&bytes).unwrap().mid_sync);
    // An absent optional field and no child SAs round-trip too.
    let mut bare = ike_record();
    (
        bare.peer_id,
        bare.inner,
        bare.inner4,
        bare.authenticated_age,
    ) = (None, None, None, None);
    bare.children.clear();
    bare.alt_names.clear();
    assert_eq!(decode_ike_sa(&encode_ike_sa(&bare)).unwrap(), bare);
    // More child SAs than a record holds are cut when encoding.
    let mut many = ike_record();
    many.children = vec![many.children[0]; MAX_CHILDREN + 3];
    assert_eq!(
        decode_ike_sa(&encode_ike_sa(&many)).unwrap().children.len(),
        MAX_CHILDREN
    );
    // An identity over the limit is cut on a character boundary when encoding.
    let mut long = ike_record();
    long.identity = "é".repeat(MAX_IDENTITY_LEN);
    let cut = decode_ike_sa(&encode_ike_sa(&long)).unwrap();
    assert_eq!(cut.identity, "é".repeat(MAX_IDENTITY_LEN / 2));
}
