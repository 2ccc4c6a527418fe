//! AES-CBC + HMAC-SHA2-256-128: known-answer vectors for the primitives (RFC 3602, NIST SP
//! 800-38A, RFC 4868), the packet layout against aws-lc used directly, round trips for every
//! cipher, tampering, truncation and bad padding.

use aws_lc_rs::cipher::{AES_128, AES_256, DecryptingKey, EncryptingKey, UnboundCipherKey};
use aws_lc_rs::hmac;
use proptest::prelude::*;

use crate::sa::{cbc_decrypt, cbc_encrypt, icv_of};
use crate::tests::{hex, keymat, pair, params, seal};
use crate::*;

const CBC: [Cipher; 2] = [Cipher::AesCbc128HmacSha256, Cipher::AesCbc256HmacSha256];
const ALL: [Cipher; 4] = [
    Cipher::AesGcm16_128,
    Cipher::AesGcm16_256,
    Cipher::AesCbc128HmacSha256,
    Cipher::AesCbc256HmacSha256,
];

fn aes(key: &[u8]) -> &'static aws_lc_rs::cipher::Algorithm {
    if key.len() == 16 { &AES_128 } else { &AES_256 }
}

#[test]
fn aes_cbc_known_answers() {
    // RFC 3602 §4 cases 1 and 2 (AES-128), NIST SP 800-38A F.2.5 block 1 (AES-256).
    let cases = [
        (
            "06a9214036b8a15b512e03d534120006",
            "3dafba429d9eb430b422da802c9fac41",
            hex_of(b"Single block msg"),
            "e353779c1079aeb82708942dbe77181a",
        ),
        (
            "c286696d887c9aa0611bbb3e2025a45a",
            "562e17996d093d28ddb3ba695a2e6f58",
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f".to_string(),
            "d296cd94c2cccf8a3a863028b5e1dc0a7586602d253cfff91b8266bea6d61ab1",
        ),
        (
            "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
            "000102030405060708090a0b0c0d0e0f",
            "6bc1bee22e409f96e93d7e117393172a".to_string(),
            "f58c4c04d6e5f1ba779eabfb5f7bfbd6",
        ),
    ];
    for (key, iv, plain, cipher) in cases {
        let key = hex(key);
        let iv: [u8; 16] = hex(iv).try_into().unwrap();
        let enc = EncryptingKey::cbc(UnboundCipherKey::new(aes(&key), &key).unwrap()).unwrap();
        let dec = DecryptingKey::cbc(UnboundCipherKey::new(aes(&key), &key).unwrap()).unwrap();
        let mut data = hex(&plain);
        cbc_encrypt(&enc, iv, &mut data).unwrap();
        assert_eq!(hex_of(&data), cipher);
        cbc_decrypt(&dec, iv, &mut data).unwrap();
        assert_eq!(hex_of(&data), plain);
    }
}

#[test]
fn hmac_sha256_128_known_answers() {
    // RFC 4868 §2.7.2.1 test cases 1 and 2 (AUTH_HMAC_SHA256_128 keeps the first 128 bits).
    let key = hmac::Key::new(hmac::HMAC_SHA256, &[0x0b; 32]);
    assert_eq!(
        hex_of(&icv_of(&key, &[b"Hi ", b"There"], None)),
        "198a607eb44bfbc69903a0f1cf2bbdc5"
    );
    let key = hmac::Key::new(hmac::HMAC_SHA256, b"JefeJefeJefeJefeJefeJefeJefeJefe");
    assert_eq!(
        hex_of(&icv_of(&key, &[b"what do ya want for nothing?"], None)),
        "167f928588c5cc2eef8e3093caa0e87c"
    );
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn sealed_packet_checks_out_with_aws_lc_directly() {
    // Layout cross-check: IV = AES_K(seq || 0), ICV = HMAC-SHA256(integrity key, SPI ..
    // ciphertext) truncated to 16 bytes, ciphertext = AES-CBC(inner || 1, 2, .. || pad len
    // || next header), KEYMAT = AES key || HMAC key.
    for cipher in CBC {
        let km = keymat(cipher, 5);
        let p = params(cipher, km.clone(), 0xabcd_0002, false);
        let out = Outbound::new(&p).unwrap();
        let inner: Vec<u8> = (0..100u8).collect();
        seal(&out, &inner, 0, 41);
        let (mut buf, len) = seal(&out, &inner, 0, 41);
        assert_eq!(len, 24 + 112 + 16, "100 + 2 rounded up to 7 blocks");
        assert_eq!(len, cipher.esp_len(100));
        let esp = &mut buf[..len];
        assert_eq!(esp[..8], [0xab, 0xcd, 0, 2, 0, 0, 0, 2]);
        let (aes_key, mac_key) = km.split_at(cipher.aes_key_len());
        assert_eq!(mac_key.len(), 32);
        let mut iv = [0u8; 16];
        iv[..8].copy_from_slice(&2u64.to_be_bytes());
        EncryptingKey::ecb(UnboundCipherKey::new(aes(aes_key), aes_key).unwrap())
            .unwrap()
            .less_safe_encrypt(&mut iv, aws_lc_rs::cipher::EncryptionContext::None)
            .unwrap();
        assert_eq!(esp[8..24], iv, "IV = AES_K(seq || 0^64)");
        let tag = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, mac_key),
            &esp[..len - 16],
        );
        assert_eq!(esp[len - 16..], tag.as_ref()[..16], "ICV");
        let dec =
            DecryptingKey::cbc(UnboundCipherKey::new(aes(aes_key), aes_key).unwrap()).unwrap();
        let plain = dec
            .decrypt(
                &mut esp[24..len - 16],
                aws_lc_rs::cipher::DecryptionContext::Iv128(iv.into()),
            )
            .unwrap();
        assert_eq!(&plain[..100], &inner[..]);
        assert_eq!(
            plain[100..],
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 41],
            "RFC 4303 §2.4 padding to the AES block"
        );
    }
}

#[test]
fn ivs_differ_per_packet_and_are_not_the_sequence_number() {
    let (out, _) = pair(Cipher::AesCbc256HmacSha256, false);
    let ivs: Vec<Vec<u8>> = (0..64)
        .map(|_| seal(&out, &[1; 20], 0, 41).0[8..24].to_vec())
        .collect();
    for (i, iv) in ivs.iter().enumerate() {
        assert!(ivs[i + 1..].iter().all(|o| o != iv), "IV {i} repeats");
        assert_ne!(iv[..8], (i as u64 + 1).to_be_bytes());
    }
}

#[test]
fn esn_high_half_is_in_the_icv_and_opens_across_2_pow_32() {
    for cipher in CBC {
        let km = keymat(cipher, 9);
        let (out, inbound) = pair(cipher, true);
        let start = (1u64 << 32) - 2;
        out.set_next_seq(start);
        assert!(inbound.lock().mark(start - 10));
        let packets: Vec<_> = (0..4u8).map(|i| seal(&out, &[i; 33], 0, 41)).collect();
        let (buf, len) = &packets[2];
        assert_eq!(buf[4..8], [0, 0, 0, 0], "only the low half travels");
        let mac = hmac::Key::new(hmac::HMAC_SHA256, &km[cipher.aes_key_len()..]);
        let mut ctx = hmac::Context::with_key(&mac);
        ctx.update(&buf[..len - 16]);
        ctx.update(&1u32.to_be_bytes());
        assert_eq!(buf[len - 16..*len], ctx.sign().as_ref()[..16]);
        for i in [2usize, 0, 3, 1] {
            let (mut b, l) = packets[i].clone();
            let opened = inbound.open(&mut b[..l]).unwrap();
            assert_eq!(b[opened.inner][0], i as u8);
        }
        assert_eq!(inbound.highest_seq(), start + 3);
    }
}

#[test]
fn tampered_icv_is_refused_before_decrypting_and_not_marked() {
    for cipher in CBC {
        let (out, inbound) = pair(cipher, false);
        let (good, len) = seal(&out, &[0x60; 80], 0, 41);
        let mut bad = good.clone();
        bad[len - 1] ^= 1;
        let before = bad.clone();
        assert_eq!(inbound.open(&mut bad[..len]), Err(OpenError::Auth));
        assert_eq!(bad, before, "nothing decrypted in place");
        assert_eq!(inbound.auth_failures(), 1);
        assert_eq!(inbound.highest_seq(), 0, "window not moved");
        let mut good = good;
        assert!(
            inbound.open(&mut good[..len]).is_ok(),
            "the genuine one still opens"
        );
    }
}

#[test]
fn truncated_and_ragged_packets_are_refused() {
    let (out, inbound) = pair(Cipher::AesCbc128HmacSha256, false);
    let (buf, len) = seal(&out, &[7; 10], 0, 41);
    assert_eq!(len, 24 + 16 + 16);
    for cut in 0..len {
        let mut b = buf[..cut].to_vec();
        let want = if cut < 56 {
            OpenError::Truncated
        } else {
            OpenError::Malformed
        };
        assert_eq!(inbound.open(&mut b), Err(want), "{cut} bytes");
    }
    // Whole blocks but a block short of what was sealed: the ICV no longer matches.
    let mut longer = buf[..len].to_vec();
    longer.splice(24..24, [0u8; 16]);
    assert_eq!(inbound.open(&mut longer), Err(OpenError::Auth));
    assert_eq!(inbound.auth_failures(), 1);
}

/// Builds an authentic CBC packet (sequence number 1) around `plain`, which must be whole
/// blocks and carry its own trailer.
fn authentic(cipher: Cipher, km: &[u8], spi: u32, plain: &[u8]) -> Vec<u8> {
    let (aes_key, mac_key) = km.split_at(cipher.aes_key_len());
    let iv = [0x5a; 16];
    let mut esp = spi.to_be_bytes().to_vec();
    esp.extend_from_slice(&1u32.to_be_bytes());
    esp.extend_from_slice(&iv);
    let mut body = plain.to_vec();
    let enc = EncryptingKey::cbc(UnboundCipherKey::new(aes(aes_key), aes_key).unwrap()).unwrap();
    cbc_encrypt(&enc, iv, &mut body).unwrap();
    esp.extend_from_slice(&body);
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, mac_key), &esp);
    esp.extend_from_slice(&tag.as_ref()[..16]);
    esp
}

#[test]
fn authentic_packets_with_bad_padding_are_malformed() {
    let cipher = Cipher::AesCbc256HmacSha256;
    let km = keymat(cipher, 9);
    let (_, inbound) = pair(cipher, false);
    let mut plain = vec![0x60u8; 16];
    // Pad bytes 1, 2, 9 instead of 1, 2, 3; then pad length 3 and next header 41.
    plain.extend_from_slice(&[0xaa; 11]);
    plain.extend_from_slice(&[1, 2, 9, 3, 41]);
    let mut esp = authentic(cipher, &km, 0x1234_5678, &plain);
    assert_eq!(inbound.open(&mut esp), Err(OpenError::Malformed));
    // Pad length beyond the payload.
    let (_, inbound) = pair(cipher, false);
    let mut plain = vec![0u8; 14];
    plain.extend_from_slice(&[200, 41]);
    let mut esp = authentic(cipher, &km, 0x1234_5678, &plain);
    assert_eq!(inbound.open(&mut esp), Err(OpenError::Malformed));
    // The same construction with a correct trailer opens: the helper is sound.
    let (_, inbound) = pair(cipher, false);
    let mut plain = vec![0x60u8; 12];
    plain.extend_from_slice(&[1, 2, 2, 41]);
    let mut esp = authentic(cipher, &km, 0x1234_5678, &plain);
    let opened = inbound.open(&mut esp).unwrap();
    assert_eq!(opened.inner, 24..36);
    assert_eq!(opened.next_header, 41);
}

#[test]
fn cbc_keymat_of_the_wrong_length_is_refused() {
    for cipher in CBC {
        let p = params(cipher, vec![0; cipher.keymat_len() - 4], 300, false);
        assert!(matches!(
            Outbound::new(&p),
            Err(KeyError::Length { expected, .. }) if expected == cipher.aes_key_len() + 32
        ));
    }
    assert_eq!(Cipher::AesCbc128HmacSha256.keymat_len(), 48);
    assert_eq!(Cipher::AesCbc256HmacSha256.keymat_len(), 64);
    assert_eq!(LARGEST_HEADER, 24);
    assert_eq!(LARGEST_TRAILER, 15 + 2 + 16);
}

#[test]
fn a_gcm_packet_does_not_open_under_cbc_keys() {
    let (gcm, _) = pair(Cipher::AesGcm16_256, false);
    let (_, cbc) = pair(Cipher::AesCbc256HmacSha256, false);
    let (mut buf, len) = seal(&gcm, &[1; 64], 0, 41);
    let err = cbc.open(&mut buf[..len]).unwrap_err();
    assert!(
        matches!(err, OpenError::Auth | OpenError::Malformed),
        "{err:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Seal then open gives back the inner packet under every cipher, for lengths up to
    /// 2,000, offsets into the buffer, with and without ESN; the encrypted part is padded to
    /// the cipher's boundary and the trailer stays within `max_trailer`.
    #[test]
    fn round_trip_every_cipher(
        len in 0usize..=2000,
        at in 0usize..64,
        nh in any::<u8>(),
        which in 0usize..4,
        esn in any::<bool>(),
        seed in any::<u8>(),
    ) {
        let cipher = ALL[which];
        let (out, inbound) = pair(cipher, esn);
        let h = cipher.header_len();
        let inner: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
        let (mut buf, esp) = seal(&out, &inner, at, nh);
        prop_assert_eq!(esp, cipher.esp_len(len));
        let align = if cipher.is_cbc() { 16 } else { 4 };
        prop_assert_eq!((esp - h - ICV_LEN) % align, 0);
        prop_assert!(esp <= h + len + cipher.max_trailer());
        prop_assert!(esp <= LARGEST_HEADER + len + LARGEST_TRAILER);
        prop_assert!(buf[..at].iter().all(|&b| b == 0xee), "headroom untouched");
        if len >= 16 {
            prop_assert_ne!(&buf[at + h..at + h + 16], &inner[..16], "encrypted");
        }
        let opened = inbound.open(&mut buf[at..at + esp]).unwrap();
        prop_assert_eq!(opened.next_header, nh);
        prop_assert_eq!(opened.inner.clone(), h..h + len);
        prop_assert_eq!(&buf[at..][opened.inner], &inner[..]);
    }

    /// Changing any one byte of a sealed CBC packet makes it fail to open, and every
    /// failure is counted where it belongs.
    #[test]
    fn tampering_any_cbc_byte_fails(
        len in 0usize..300,
        pos in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        aes256 in any::<bool>(),
    ) {
        let cipher = CBC[usize::from(aes256)];
        let (out, inbound) = pair(cipher, false);
        let (mut buf, esp) = seal(&out, &vec![0x42; len], 0, 41);
        let i = pos.index(esp);
        buf[i] ^= flip;
        let err = inbound.open(&mut buf[..esp]).unwrap_err();
        match i {
            0..4 => prop_assert_eq!(err, OpenError::Malformed, "SPI changed"),
            4..8 if buf[4..8] == [0; 4] => prop_assert_eq!(err, OpenError::Replay),
            _ => {
                prop_assert_eq!(err, OpenError::Auth);
                prop_assert_eq!(inbound.auth_failures(), 1);
            }
        }
    }

    /// Any bytes given to a CBC SA's `open` come back as an error, never a panic, whatever
    /// their length; packets that carry the SA's SPI get to the ICV check.
    #[test]
    fn random_input_never_opens(
        mut bytes in prop::collection::vec(any::<u8>(), 0..400),
        own_spi in any::<bool>(),
        aes256 in any::<bool>(),
        esn in any::<bool>(),
    ) {
        let cipher = CBC[usize::from(aes256)];
        let (_, inbound) = pair(cipher, esn);
        if own_spi && bytes.len() >= 4 {
            bytes[..4].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        }
        let r = inbound.open(&mut bytes);
        prop_assert!(r.is_err());
        let counted = inbound.auth_failures() + inbound.replay_drops();
        if matches!(r, Err(OpenError::Auth | OpenError::Replay)) {
            prop_assert_eq!(counted, 1);
        } else {
            prop_assert_eq!(counted, 0);
        }
    }
}
