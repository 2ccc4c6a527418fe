//! AES-GMAC (ENCR_NULL_AUTH_AES_GMAC, RFC 4543): the primitive against NIST CAVP GMAC vectors
//! (AES-GCM with an empty plaintext), the packet layout against aws-lc used directly, round
//! trips with and without ESN, the payload left in clear, and tampering anywhere.

use aws_lc_rs::aead::{AES_128_GCM, AES_192_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};

use crate::sa::gmac_verify_for_tests as gmac_verify;
use crate::tests::{hex, keymat, pair, params, seal};
use crate::*;

const GMAC: [Cipher; 3] = [
    Cipher::NullAesGmac128,
    Cipher::NullAesGmac192,
    Cipher::NullAesGmac256,
];

fn aead(cipher: Cipher) -> &'static aws_lc_rs::aead::Algorithm {
    match cipher.aes_key_len() {
        16 => &AES_128_GCM,
        24 => &AES_192_GCM,
        _ => &AES_256_GCM,
    }
}

#[test]
fn gmac_known_answers_from_nist_cavp() {
    // gcmEncryptExtIV128.rsp, PTlen = 0: (key, IV, AAD, tag).
    let cases = [
        (
            "fbe3467cc254f81be8e78d765a2e6333",
            "c6697351ff4aec29cdbaabf2",
            "67",
            "3659cdc25288bf499ac736c03bfc1159",
        ),
        (
            "051758e95ed4abb2cdc69bb454110e82",
            "c99a66320db73158a35a255d",
            "67c6697351ff4aec29cdbaabf2fbe3467cc254f81be8e78d765a2e63339f",
            "6ce77f1a5616c505b6aec09420234036",
        ),
    ];
    for (key, iv, aad, tag) in cases {
        let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &hex(key)).unwrap());
        let nonce = || <[u8; 12]>::try_from(hex(iv).as_slice()).unwrap();
        let (aad, tag) = (hex(aad), hex(tag));
        assert!(gmac_verify(&key, nonce(), &aad, None, &tag));
        // With ESN the high half goes after the first 4 bytes and is not in `authed`.
        if aad.len() >= 8 {
            let hi = u32::from_be_bytes(aad[4..8].try_into().unwrap());
            let authed: Vec<u8> = aad[..4].iter().chain(&aad[8..]).copied().collect();
            assert!(gmac_verify(&key, nonce(), &authed, Some(hi), &tag));
            assert!(!gmac_verify(&key, nonce(), &authed, Some(hi ^ 1), &tag));
        }
        let mut bad = tag.clone();
        bad[15] ^= 1;
        assert!(!gmac_verify(&key, nonce(), &aad, None, &bad));
    }
}

#[test]
fn sealed_gmac_packet_is_clear_and_its_icv_is_aws_lc_gcm_over_the_whole_packet() {
    // RFC 4543 §3: nonce = salt || IV, AAD = SPI .. Next Header (with ESN: SPI || seq high ||
    // seq low || IV ..), plaintext empty, ICV = the tag.
    for cipher in GMAC {
        for esn in [false, true] {
            let km = keymat(cipher, 5);
            let p = params(cipher, km.clone(), 0xabcd_0002, esn);
            let out = Outbound::new(&p).unwrap();
            let start = if esn { (7u64 << 32) | 0xffff_fff0 } else { 1 };
            out.set_next_seq(start);
            let inner: Vec<u8> = (0..101u8).collect();
            let (buf, len) = seal(&out, &inner, 0, 41);
            let esp = &buf[..len];
            assert_eq!(len, cipher.esp_len(101));
            assert_eq!(esp[..4], 0xabcd_0002u32.to_be_bytes());
            assert_eq!(esp[4..8], (start as u32).to_be_bytes());
            assert_eq!(esp[8..16], start.to_be_bytes());
            assert_eq!(&esp[16..117], &inner[..], "the payload travels in clear");
            assert_eq!(
                esp[117..120],
                [1, 1, 41],
                "padding 1, pad length 1, next header"
            );
            let (key, salt) = km.split_at(km.len() - 4);
            let key = LessSafeKey::new(UnboundKey::new(aead(cipher), key).unwrap());
            let mut nonce = [0u8; 12];
            nonce[..4].copy_from_slice(salt);
            nonce[4..].copy_from_slice(&esp[8..16]);
            let mut aad = esp[..4].to_vec();
            if esn {
                aad.extend_from_slice(&((start >> 32) as u32).to_be_bytes());
            }
            aad.extend_from_slice(&esp[4..len - 16]);
            let tag = key
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(&aad),
                    &mut [],
                )
                .unwrap();
            assert_eq!(tag.as_ref(), &esp[len - 16..], "{cipher:?} esn={esn}");
        }
    }
}

#[test]
fn gmac_round_trips_and_refuses_any_changed_byte() {
    for cipher in GMAC {
        for esn in [false, true] {
            let (out, inbound) = pair(cipher, esn);
            for n in [0usize, 1, 2, 3, 40, 1400] {
                let inner: Vec<u8> = (0..n).map(|i| i as u8).collect();
                let (mut buf, len) = seal(&out, &inner, 8, 4);
                let opened = inbound.open(&mut buf[8..8 + len]).unwrap();
                assert_eq!(opened.next_header, 4);
                assert_eq!(&buf[8..][opened.inner], &inner[..]);
            }
            // Flip each byte of one packet after the SPI and sequence number (which fail
            // earlier as Malformed or Replay): each is refused as Auth and counted.
            let inner = [0x60u8; 48];
            let (buf, len) = seal(&out, &inner, 0, 41);
            let before = inbound.auth_failures();
            for i in 8..len {
                let mut bad = buf[..len].to_vec();
                bad[i] ^= 0x01;
                assert_eq!(inbound.open(&mut bad), Err(OpenError::Auth), "byte {i}");
            }
            assert_eq!(inbound.auth_failures() - before, (len - 8) as u64);
            let mut good = buf[..len].to_vec();
            assert!(inbound.open(&mut good).is_ok(), "still opens once intact");
            assert_eq!(inbound.open(&mut good.clone()), Err(OpenError::Replay));
        }
    }
}

#[test]
fn gmac_refuses_a_gcm_packet_and_a_gcm_sa_refuses_a_gmac_one() {
    // Same key material, different transform: neither opens the other's packets.
    let km = keymat(Cipher::AesGcm16_256, 3);
    let gcm = params(Cipher::AesGcm16_256, km.clone(), 7, false);
    let gmac = params(Cipher::NullAesGmac256, km, 7, false);
    let (gcm_out, gcm_in) = (Outbound::new(&gcm).unwrap(), Inbound::new(&gcm).unwrap());
    let (gmac_out, gmac_in) = (Outbound::new(&gmac).unwrap(), Inbound::new(&gmac).unwrap());
    let (mut a, n) = seal(&gcm_out, &[1; 20], 0, 41);
    assert_eq!(gmac_in.open(&mut a[..n]), Err(OpenError::Auth));
    let (mut b, n) = seal(&gmac_out, &[1; 20], 0, 41);
    assert_eq!(gcm_in.open(&mut b[..n]), Err(OpenError::Auth));
}

#[test]
fn gmac_key_lengths_and_truncation() {
    assert_eq!(Cipher::NullAesGmac128.keymat_len(), 20);
    assert_eq!(Cipher::NullAesGmac192.keymat_len(), 28);
    assert_eq!(Cipher::NullAesGmac256.keymat_len(), 36);
    for cipher in GMAC {
        assert!(cipher.is_gmac() && !cipher.is_cbc());
        assert_eq!(cipher.header_len(), SPI_SEQ_IV_LEN);
        assert_eq!(cipher.max_trailer(), MAX_TRAILER);
        let short = params(cipher, vec![0; cipher.keymat_len() - 1], 1, false);
        assert!(matches!(
            Outbound::new(&short),
            Err(KeyError::Length { .. })
        ));
        let (_, inbound) = pair(cipher, false);
        for len in 0..SPI_SEQ_IV_LEN + 2 + ICV_LEN {
            let mut b = vec![0u8; len];
            assert_eq!(inbound.open(&mut b), Err(OpenError::Truncated));
        }
    }
}
