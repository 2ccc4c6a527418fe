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
    let out = prf(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
    assert_eq!(
        out,
        hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    );
}

/// RFC 7296 §2.13, checked by construction: T1 = prf(K, S | 1), T2 = prf(K, T1 | S | 2).
#[test]
fn rfc7296_2_13_prf_plus() {
    let (k, s) = (b"key".as_slice(), b"seed".as_slice());
    let t1 = prf(k, &[s, &[1]]);
    let t2 = prf(k, &[&t1, s, &[2]]);
    let t3 = prf(k, &[&t2, s, &[3]]);
    let expected = [t1, t2, t3].concat();
    assert_eq!(prf_plus(k, s, 80).0, expected[..80]);
    assert_eq!(prf_plus(k, s, 0).0, Vec::<u8>::new());
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
    for group in [Group::Ecp256, Group::Curve25519] {
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
    let keys = IkeKeys::derive(&shared, &ni, &nr, 0x1111, 0x2222).expect("derive");
    let skeyseed = prf(&[ni.clone(), nr.clone()].concat(), &[&shared.0]);
    let seed = [
        &ni[..],
        &nr,
        &0x1111u64.to_be_bytes(),
        &0x2222u64.to_be_bytes(),
    ]
    .concat();
    let km = prf_plus(&skeyseed, &seed, 32 + 36 + 36 + 32 + 32).0;
    assert_eq!(keys.sk_d.0, km[..32]);
    assert_eq!(keys.sk_pi.0, km[104..136]);
    assert_eq!(keys.sk_pr.0, km[136..168]);
    // SK_ei is the 36 bytes after SK_d: a message sealed with it opens with those bytes.
    let header = Header {
        spi_i: 0x1111,
        spi_r: 0x2222,
        exchange: exchange::INFORMATIONAL,
        flags: 8,
        message_id: 2,
    };
    let sealed = seal_message(&header, &[], &keys.sk_ei).expect("seal");
    let manual = SkCipher::new(&km[32..68]).expect("cipher");
    assert!(open_message(&sealed, &manual).is_ok());
    let (i_to_r, r_to_i) = child_keymat(&keys.sk_d, None, &ni, &nr, 36);
    let keymat = prf_plus(&keys.sk_d.0, &[&ni[..], &nr].concat(), 72).0;
    assert_eq!(
        (i_to_r.0, r_to_i.0),
        (keymat[..36].to_vec(), keymat[36..].to_vec())
    );
}

/// RFC 5282 §5.1: the AAD covers the header and the SK payload header, so a flipped header
/// byte or ICV byte fails.
#[test]
fn rfc5282_sk_payload_seal_open() {
    let cipher = SkCipher::new(&[9; 36]).expect("cipher");
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
    let other = SkCipher::new(&[8; 36]).expect("cipher");
    assert_eq!(open_message(&sealed, &other), Err(OpenError::Integrity));
}
