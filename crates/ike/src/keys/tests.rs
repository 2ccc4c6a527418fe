use super::*;
use crate::message::{Notify, exchange};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex"))
        .collect()
}

/// RFC 4231 §4.3 (test case 2), HMAC-SHA-256.
#[test]
fn rfc4231_test_case_2_prf() {
    let out = Prf::HmacSha256.prf(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
    assert_eq!(
        out,
        hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    );
}

/// RFC 7296 §2.13, checked by construction: T1 = prf(K, S | 1), T2 = prf(K, T1 | S | 2).
#[test]
fn rfc7296_2_13_prf_plus() {
    let (k, s) = (b"key".as_slice(), b"seed".as_slice());
    for f in Prf::ALL {
        let t1 = f.prf(k, &[s, &[1]]);
        let t2 = f.prf(k, &[&t1, s, &[2]]);
        let t3 = f.prf(k, &[&t2, s, &[3]]);
        assert_eq!(t1.len(), f.output_len());
        let expected = [t1, t2, t3].concat();
        let len = 2 * f.output_len() + 5;
        assert_eq!(f.prf_plus(k, s, len), expected[..len], "{f:?}");
        assert_eq!(f.prf_plus(k, s, 0), Vec::<u8>::new());
    }
}

/// RFC 5903 §8.1: 256-bit random ECP group; KE data x | y, shared secret x only.
#[test]
fn rfc5903_8_1_ecp256() {
    let i = KeyExchange::from_private(
        Group::Ecp256,
        &hex("C88F01F5 10D9AC3F 70A292DA A2316DE5 44E9AAB8 AFE84049 C62A9C57 862D1433"),
    )
    .expect("valid scalar");
    let r = KeyExchange::from_private(
        Group::Ecp256,
        &hex("C6EF9C5D 78AE012A 011164AC B397CE20 88685D8F 06BF9BE0 B283AB46 476BEE53"),
    )
    .expect("valid scalar");
    let gi = hex(
        "DAD0B653 94221CF9 B051E1FE CA5787D0 98DFE637 FC90B9EF 945D0C37 72581180
         5271A046 1CDB8252 D61F1C45 6FA3E59A B1F45B33 ACCF5F58 389E0577 B8990BB3",
    );
    let gr = hex(
        "D12DFB52 89C8D4F8 1208B702 70398C34 2296970A 0BCCB74C 736FC755 4494BF63
         56FBF3CA 366CC23E 8157854C 13C58D6A AC23F046 ADA30F83 53E74F33 039872AB",
    );
    let girx = hex("D6840F6B 42F6EDAF D13116E0 E1256520 2FEF8E9E CE7DCE03 812464D0 4B9442DE");
    assert_eq!(i.public_data().expect("public"), gi);
    assert_eq!(r.public_data().expect("public"), gr);
    assert_eq!(i.agree(&gr).expect("agree").0, girx);
    assert_eq!(r.agree(&gi).expect("agree").0, girx);
    assert_eq!(i.agree(&gr[..63]), Err(CryptoError::PeerPublicValue));
    assert_eq!(i.agree(&[0; 64]), Err(CryptoError::PeerPublicValue));
}

/// RFC 7748 §6.1: X25519.
#[test]
fn rfc7748_6_1_x25519() {
    let alice = KeyExchange::from_private(
        Group::Curve25519,
        &hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"),
    )
    .expect("valid key");
    let bob_public = hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
    assert_eq!(
        alice.public_data().expect("public"),
        hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
    );
    assert_eq!(
        alice.agree(&bob_public).expect("agree").0,
        hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
    );
}

#[test]
fn generated_groups_agree() {
    for group in Group::ALL {
        let a = KeyExchange::generate(group).expect("generate");
        let b = KeyExchange::generate(group).expect("generate");
        let (pa, pb) = (
            a.public_data().expect("public"),
            b.public_data().expect("public"),
        );
        assert_eq!(pa.len(), group.public_len());
        assert_eq!(a.agree(&pb).expect("agree"), b.agree(&pa).expect("agree"));
    }
}

/// RFC 7296 §2.14: the key order SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr, with
/// empty SK_a* for an AEAD (RFC 5282 §7).
#[test]
fn rfc7296_2_14_key_order() {
    let shared = Secret(vec![7; 32]);
    let (ni, nr) = (vec![1; 32], vec![2; 32]);
    let keys =
        IkeKeys::derive(Suite::GCM256_SHA256, &shared, &ni, &nr, 0x1111, 0x2222).expect("derive");
    let skeyseed = Prf::HmacSha256.prf(&[ni.clone(), nr.clone()].concat(), &[&shared.0]);
    let seed = [
        &ni[..],
        &nr,
        &0x1111u64.to_be_bytes(),
        &0x2222u64.to_be_bytes(),
    ]
    .concat();
    let km = Prf::HmacSha256.prf_plus(&skeyseed, &seed, 32 + 36 + 36 + 32 + 32);
    assert_eq!(keys.sk_d.key.0, km[..32]);
    assert_eq!(keys.sk_pi.key.0, km[104..136]);
    assert_eq!(keys.sk_pr.key.0, km[136..168]);
    // SK_ei is the 36 bytes after SK_d: a message sealed with it opens with those bytes.
    let header = Header {
        spi_i: 0x1111,
        spi_r: 0x2222,
        exchange: exchange::INFORMATIONAL,
        flags: 8,
        message_id: 2,
    };
    let sealed = seal_message(&header, &[], &keys.sk_ei).expect("seal");
    let manual = SkCipher::new(Encr::AesGcm16_256, &km[32..68], None).expect("cipher");
    assert!(open_message(&sealed, &manual).is_ok());
    let (i_to_r, r_to_i) = child_keymat(&keys.sk_d, None, &ni, &nr, 36);
    let keymat = Prf::HmacSha256.prf_plus(&keys.sk_d.key.0, &[&ni[..], &nr].concat(), 72);
    assert_eq!(
        (i_to_r.into_bytes(), r_to_i.into_bytes()),
        (keymat[..36].to_vec(), keymat[36..].to_vec())
    );
}

/// RFC 5282 §5.1: the AAD covers the header and the SK payload header, so a flipped header
/// byte or ICV byte fails.
#[test]
fn rfc5282_sk_payload_seal_open() {
    let cipher = SkCipher::new(Encr::AesGcm16_256, &[9; 36], None).expect("cipher");
    let header = Header {
        spi_i: 1,
        spi_r: 2,
        exchange: exchange::IKE_AUTH,
        flags: 8,
        message_id: 1,
    };
    let inner = vec![
        Payload::Notify(Notify::new(crate::message::notify::INITIAL_CONTACT, vec![])),
        Payload::Nonce(vec![5; 32]),
    ];
    let sealed = seal_message(&header, &inner, &cipher).expect("seal");
    assert_eq!(sealed.len(), HEADER_LEN + 4 + IV_LEN + 8 + 36 + 1 + ICV_LEN);
    let (h, payloads) = open_message(&sealed, &cipher).expect("open");
    assert_eq!((h, payloads), (header, inner));
    for at in [3, HEADER_LEN + 1, sealed.len() - 1] {
        let mut bad = sealed.clone();
        bad[at] ^= 1;
        assert!(open_message(&bad, &cipher).is_err(), "flip at {at}");
    }
    let other = SkCipher::new(Encr::AesGcm16_256, &[8; 36], None).expect("cipher");
    assert_eq!(open_message(&sealed, &other), Err(OpenError::Integrity));
}

fn sha256(data: &[u8]) -> Vec<u8> {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data)
        .as_ref()
        .to_vec()
}

/// RFC 4868 §2.7.1 (PRF test case 1, "Hi There" under a key of 0x0b bytes as long as the
/// output) and §2.7.2.1 (the same MACs truncated to half as AUTH_HMAC_SHA2_*).
#[test]
fn rfc4868_prf_and_integrity_vectors() {
    let cases = [
        (
            Prf::HmacSha256,
            Integ::HmacSha256_128,
            "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7",
        ),
        (
            Prf::HmacSha384,
            Integ::HmacSha384_192,
            "b6a8d5636f5c6a7224f9977dcf7ee6c7fb6d0c48cbdee9737a959796489bddbc
             4c5df61d5b3297b4fb68dab9f1b582c2",
        ),
        (
            Prf::HmacSha512,
            Integ::HmacSha512_256,
            "637edc6e01dce7e6742a99451aae82df23da3e92439e590e43e761b33e910fb8
             ac2878ebd5803f6f0b61dbce5e251ff8789a4722c1be65aea45fd464e89f8f5b",
        ),
    ];
    for (prf, integ, expected) in cases {
        let expected = hex(expected);
        let key = vec![0x0b; prf.output_len()];
        assert_eq!(prf.prf(&key, &[b"Hi There"]), expected, "{prf:?}");
        assert_eq!(integ.key_len(), prf.output_len());
        let icv = integ.mac(&key, &[b"Hi ", b"There"]);
        assert_eq!(icv, expected[..expected.len() / 2], "{integ:?}");
        assert_eq!(icv.len(), integ.icv_len());
    }
    // RFC 2202 §3 test case 2 for the legacy pair, truncated to 96 bits for the ICV.
    let sha1 = hex("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
    let data: [&[u8]; 1] = [b"what do ya want for nothing?"];
    assert_eq!(Prf::HmacSha1.prf(b"Jefe", &data), sha1);
    assert_eq!(Integ::HmacSha1_96.mac(b"Jefe", &data), sha1[..12]);
}

/// RFC 3602 §4 case #1 (AES-128-CBC) and NIST SP 800-38A F.2.5 (AES-256-CBC), one block
/// each, through the SK payload's cipher: the encrypted body is IV ‖ ciphertext ‖ ICV.
#[test]
fn rfc3602_cbc_vectors() {
    let cases = [
        (
            Encr::AesCbc128,
            "06a9214036b8a15b512e03d534120006",
            "3dafba429d9eb430b422da802c9fac41",
            b"Single block msg".to_vec(),
            "e353779c1079aeb82708942dbe77181a",
        ),
        (
            Encr::AesCbc256,
            "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
            "000102030405060708090a0b0c0d0e0f",
            hex("6bc1bee22e409f96e93d7e117393172a"),
            "f58c4c04d6e5f1ba779eabfb5f7bfbd6",
        ),
    ];
    for (encr, key, iv, plain, ct) in cases {
        let integ_key = [3; 32];
        let cipher = SkCipher::new(encr, &hex(key), Some((Integ::HmacSha256_128, &integ_key)))
            .expect("cipher");
        let aad = b"header".to_vec();
        let body = [hex(iv), hex(ct)].concat();
        let icv = Integ::HmacSha256_128.mac(&integ_key, &[&aad, &body]);
        let opened = cipher
            .open(&aad, &[body, icv].concat())
            .expect("known answer opens");
        assert_eq!(opened, plain, "{encr:?}");
    }
}

fn cbc_cipher(encr: Encr, integ: Integ, fill: u8) -> SkCipher {
    let key = vec![fill; encr.keymat_len()];
    let integ_key = vec![fill ^ 0x55; integ.key_len()];
    SkCipher::new(encr, &key, Some((integ, &integ_key))).expect("cipher")
}

/// RFC 7296 §3.14 with AES-CBC: IV ‖ ciphertext (payloads ‖ padding ‖ pad length, whole
/// blocks) ‖ ICV over the whole message; every combination round-trips, every flipped byte
/// (header, IV, ciphertext, ICV) fails the ICV, and truncated or misaligned bodies are refused
/// without a panic.
#[test]
fn cbc_hmac_sk_payload_round_trip_and_tamper() {
    let header = Header {
        spi_i: 1,
        spi_r: 2,
        exchange: exchange::IKE_AUTH,
        flags: 8,
        message_id: 1,
    };
    let inner = vec![
        Payload::Notify(Notify::new(crate::message::notify::INITIAL_CONTACT, vec![])),
        Payload::Nonce(vec![5; 32]),
    ];
    for encr in [Encr::AesCbc128, Encr::AesCbc256] {
        for integ in Integ::ALL {
            let cipher = cbc_cipher(encr, integ, 9);
            let sealed = seal_message(&header, &inner, &cipher).expect("seal");
            // 8 + 36 bytes of payloads + pad length = 45, padded to 48.
            assert_eq!(
                sealed.len(),
                HEADER_LEN + 4 + 16 + 48 + integ.icv_len(),
                "{encr:?} {integ:?}"
            );
            let (h, payloads) = open_message(&sealed, &cipher).expect("open");
            assert_eq!((h, &payloads), (header, &inner));
            for at in [
                3,
                HEADER_LEN + 1,
                HEADER_LEN + 4,
                HEADER_LEN + 30,
                sealed.len() - 1,
            ] {
                let mut bad = sealed.clone();
                bad[at] ^= 1;
                assert_eq!(
                    open_message(&bad, &cipher).err(),
                    Some(OpenError::Integrity),
                    "flip at {at}"
                );
            }
            let other = cbc_cipher(encr, integ, 8);
            assert_eq!(open_message(&sealed, &other), Err(OpenError::Integrity));
            // Bodies too short for IV and ICV, or not whole blocks even with a valid ICV.
            for len in [0, 15, 16 + integ.icv_len() - 1] {
                assert!(cipher.open(b"aad", &vec![0; len]).is_err());
            }
            let mut odd = vec![7; 16 + 17];
            odd.extend(integ.mac(&cipher_integ_key(integ, 9), &[b"aad", &odd]));
            assert_eq!(
                cipher.open(b"aad", &odd),
                Err(OpenError::Parse(ParseError::Malformed))
            );
        }
    }
}

fn cipher_integ_key(integ: Integ, fill: u8) -> Vec<u8> {
    vec![fill ^ 0x55; integ.key_len()]
}

/// RFC 7383 fragments with AES-CBC: each fragment fits the size with the worst-case padding
/// and the pieces reassemble into the chain.
#[test]
fn cbc_fragments_fit_and_open() {
    let header = Header {
        spi_i: 1,
        spi_r: 2,
        exchange: exchange::IKE_AUTH,
        flags: 8,
        message_id: 1,
    };
    let inner = vec![Payload::Nonce(vec![5; 900])];
    let cipher = cbc_cipher(Encr::AesCbc256, Integ::HmacSha512_256, 4);
    let fragments = seal_fragments(&header, &inner, &cipher, 300).expect("fragments");
    assert!(fragments.len() > 3);
    let mut chain = Vec::new();
    for f in &fragments {
        assert!(f.len() <= 300, "{}", f.len());
        let (_, first) = Header::parse(f).expect("header");
        let payloads = parse_chain(first, &f[HEADER_LEN..]).expect("chain");
        let Some(Payload::Skf { body, .. }) = payloads.last() else {
            panic!("not an SKF payload");
        };
        chain.extend(open_fragment(f, body, &cipher).expect("opens"));
    }
    let mut whole = Vec::new();
    emit_chain(&inner, &mut whole);
    assert_eq!(chain, whole);
}

/// Every suite derives keys of the right lengths, in the order of RFC 7296 §2.14:
/// SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr.
#[test]
fn key_schedule_lengths_per_suite() {
    let shared = Secret(vec![7; 256]);
    let (ni, nr) = (vec![1; 32], vec![2; 32]);
    let suite = Suite {
        encr: Encr::AesCbc128,
        integ: Some(Integ::HmacSha384_192),
        prf: Prf::HmacSha512,
    };
    let keys = IkeKeys::derive(suite, &shared, &ni, &nr, 5, 6).expect("derive");
    let skeyseed = Prf::HmacSha512.prf(&[ni.clone(), nr.clone()].concat(), &[&shared.0]);
    let seed = [&ni[..], &nr, &5u64.to_be_bytes(), &6u64.to_be_bytes()].concat();
    let km = Prf::HmacSha512.prf_plus(&skeyseed, &seed, 64 + 48 + 48 + 16 + 16 + 64 + 64);
    assert_eq!(keys.sk_d.key.0, km[..64]);
    assert_eq!(keys.sk_pi.key.0, km[192..256]);
    assert_eq!(keys.sk_pr.key.0, km[256..320]);
    let manual_ei = SkCipher::new(
        Encr::AesCbc128,
        &km[160..176],
        Some((Integ::HmacSha384_192, &km[64..112])),
    )
    .expect("cipher");
    let manual_er = SkCipher::new(
        Encr::AesCbc128,
        &km[176..192],
        Some((Integ::HmacSha384_192, &km[112..160])),
    )
    .expect("cipher");
    let header = Header {
        spi_i: 5,
        spi_r: 6,
        exchange: exchange::INFORMATIONAL,
        flags: 8,
        message_id: 2,
    };
    let ei = seal_message(&header, &[], &keys.sk_ei).expect("seal");
    assert!(open_message(&ei, &manual_ei).is_ok());
    let er = seal_message(&header, &[], &keys.sk_er).expect("seal");
    assert!(open_message(&er, &manual_er).is_ok());
    assert!(open_message(&er, &manual_ei).is_err());
    // The rekey takes SKEYSEED from the old SK_d with the old PRF, the rest with the new.
    let rekeyed = IkeKeys::derive_rekey(&keys.sk_d, Suite::GCM256_SHA256, &shared, &ni, &nr, 7, 8)
        .expect("rekey");
    let skeyseed = Prf::HmacSha512.prf(&keys.sk_d.key.0, &[&shared.0, &ni, &nr]);
    let seed = [&ni[..], &nr, &7u64.to_be_bytes(), &8u64.to_be_bytes()].concat();
    let km = Prf::HmacSha256.prf_plus(&skeyseed, &seed, 32);
    assert_eq!(rekeyed.sk_d.key.0, km);
    // An AEAD with an integrity algorithm, or AES-CBC without one, is refused.
    let bad = Suite {
        encr: Encr::AesGcm16_128,
        integ: Some(Integ::HmacSha256_128),
        prf: Prf::HmacSha256,
    };
    assert!(IkeKeys::derive(bad, &shared, &ni, &nr, 5, 6).is_err());
    assert!(SkCipher::new(Encr::AesCbc256, &[0; 32], None).is_err());
}

/// RFC 5903 §8.2: 384-bit random ECP group.
#[test]
fn rfc5903_8_2_ecp384() {
    let i = KeyExchange::from_private(
        Group::Ecp384,
        &hex(
            "099F3C70 34D4A2C6 99884D73 A375A67F 7624EF7C 6B3C0F16 0647B674 14DCE655
              E35B5380 41E649EE 3FAEF896 783AB194",
        ),
    )
    .expect("valid scalar");
    let r = KeyExchange::from_private(
        Group::Ecp384,
        &hex(
            "41CB0779 B4BDB85D 47846725 FBEC3C94 30FAB46C C8DC5060 855CC9BD A0AA2942
              E0308312 916B8ED2 960E4BD5 5A7448FC",
        ),
    )
    .expect("valid scalar");
    let gi = hex(
        "667842D7 D180AC2C DE6F74F3 7551F557 55C7645C 20EF73E3 1634FE72 B4C55EE6
         DE3AC808 ACB4BDB4 C88732AE E95F41AA 9482ED1F C0EEB9CA FC498462 5CCFC23F
         65032149 E0E144AD A0241815 35A0F38E EB9FCFF3 C2C947DA E69B4C63 4573A81C",
    );
    let gr = hex(
        "E558DBEF 53EECDE3 D3FCCFC1 AEA08A89 A987475D 12FD950D 83CFA417 32BC509D
         0D1AC43A 0336DEF9 6FDA41D0 774A3571 DCFBEC7A ACF31964 72169E83 8430367F
         66EEBE3C 6E70C416 DD5F0C68 759DD1FF F83FA401 42209DFF 5EAAD96D B9E6386C",
    );
    let girx = hex(
        "11187331 C279962D 93D60424 3FD592CB 9D0A926F 422E4718 7521287E 7156C5C4
         D6031355 69B9E9D0 9CF5D4A2 70F59746",
    );
    assert_eq!(i.public_data().expect("public"), gi);
    assert_eq!(r.public_data().expect("public"), gr);
    assert_eq!(i.agree(&gr).expect("agree").0, girx);
    assert_eq!(r.agree(&gi).expect("agree").0, girx);
    assert_eq!(i.agree(&gr[..95]), Err(CryptoError::PeerPublicValue));
    assert_eq!(i.agree(&[0; 96]), Err(CryptoError::PeerPublicValue));
}

/// MODP groups against an independent big-number implementation (Python's `pow`, with the
/// primes computed from RFC 3526's formula and checked to be safe primes): fixed exponents
/// x = 0x0123456789abcdef × 8 and y = 0xfedcba9876543210 × 8; the public value and the
/// shared secret are as long as the prime.
#[test]
fn rfc3526_modp_known_answers() {
    let x = hex(&"0123456789abcdef".repeat(8));
    let y = hex(&"fedcba9876543210".repeat(8));
    let cases = [
        (
            Group::Modp2048,
            "7b196797f9b0475c923a16e9b1d94e489c46edec10548adff6398b0c6576b301",
        ),
        (
            Group::Modp1024,
            "ea95530aedf802bcb851b7573c18edd57a3f9aa8dc14d2ba301ee035e55b5efd",
        ),
        (
            Group::Modp3072,
            "893b96baaeb9b07aefa884424ab9d42d4aa6efdd2b8267f269612c9d65fa45b0",
        ),
        (
            Group::Modp4096,
            "acb75dc9981587ebe4ba5df5ac6139e126af3c05b2ef60344c318d2bf45f8631",
        ),
    ];
    for (group, shared_sha256) in cases {
        let a = KeyExchange::from_private(group, &x).expect("exponent");
        let b = KeyExchange::from_private(group, &y).expect("exponent");
        let (pa, pb) = (
            a.public_data().expect("public"),
            b.public_data().expect("public"),
        );
        assert_eq!(pa.len(), group.public_len());
        if group == Group::Modp2048 {
            assert_eq!(
                sha256(&pa),
                hex("b080eff3757dd6efbf105cb4a93d8ef183e4fedfe22f9122cdb5f2ad14959407")
            );
        }
        let s = a.agree(&pb).expect("agree");
        assert_eq!(s.0.len(), group.public_len());
        assert_eq!(sha256(&s.0), hex(shared_sha256), "{group:?}");
        assert_eq!(b.agree(&pa).expect("agree"), s);
    }
}

/// RFC 7296 §5 / SP 800-56A: a MODP public value of 0, 1, p-1, p or above, or of the wrong
/// length is refused.
#[test]
fn modp_bad_peer_values_refused() {
    let kex = KeyExchange::generate(Group::Modp2048).expect("generate");
    let p = hex(&MODP_2048_FOR_TESTS.concat());
    let mut p_minus_1 = p.clone();
    p_minus_1[255] -= 1;
    let mut one = vec![0; 256];
    one[255] = 1;
    let mut two = vec![0; 256];
    two[255] = 2;
    for bad in [
        vec![0; 256],
        one,
        p_minus_1,
        p,
        vec![0xff; 256],
        vec![2; 255],
        vec![2; 257],
    ] {
        assert_eq!(kex.agree(&bad), Err(CryptoError::PeerPublicValue));
    }
    assert!(kex.agree(&two).is_ok());
}

/// The MODP-2048 prime as RFC 3526 §3 prints it, for the bound checks.
const MODP_2048_FOR_TESTS: [&str; 1] = [concat!(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED",
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05",
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB",
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B",
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718",
    "3995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
)];

/// Key material is wiped on drop: `Secret` is `ZeroizeOnDrop` (its `Drop` calls its
/// `Zeroize`, which overwrites the bytes and leaves none), and moving the bytes out leaves
/// nothing behind to wipe twice.
#[test]
fn secrets_are_wiped_on_drop() {
    fn wiped_on_drop<T: zeroize::ZeroizeOnDrop>() {}
    wiped_on_drop::<Secret>();
    let mut s = Secret(vec![0xa5; 32]);
    let copy = s.clone();
    zeroize::Zeroize::zeroize(&mut s);
    assert!(s.0.is_empty(), "zeroize leaves no byte");
    assert_eq!(copy.0, vec![0xa5; 32], "a clone is its own copy");
    let ptr = copy.0.as_ptr();
    let bytes = copy.into_bytes();
    assert_eq!(
        (bytes.as_ptr(), bytes.len()),
        (ptr, 32),
        "moved, not copied"
    );
}
