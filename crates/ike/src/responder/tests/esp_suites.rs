//! ESP suites of child SAs: AES-GCM-16 and AES-CBC + HMAC-SHA2-256-128 (what macOS, iOS and
//! Windows propose), gate64's preference among them, `esp_suites` narrowing them, and KEYMAT
//! split per RFC 7296 §2.17 for AES-CBC.

use super::*;
use crate::message::find_notify;
use crate::responder::child::{KeRule, choose_esp_proposal};
use gate64_esp::{Inbound, Outbound};

const AUTH_HMAC_SHA1_96: u16 = 2;

fn gcm(bits: u16) -> Vec<Transform> {
    vec![
        Transform::with_key_length(transform::ENCR, transform::ENCR_AES_GCM_16, bits),
        Transform::new(transform::ESN, transform::ESN_NONE),
    ]
}

fn cbc(bits: u16, integ: u16) -> Vec<Transform> {
    vec![
        Transform::with_key_length(transform::ENCR, transform::ENCR_AES_CBC, bits),
        Transform::new(transform::INTEG, integ),
        Transform::new(transform::ESN, transform::ESN_NONE),
    ]
}

fn proposals(list: Vec<Vec<Transform>>) -> Vec<Proposal> {
    list.into_iter()
        .enumerate()
        .map(|(n, transforms)| Proposal {
            number: n as u8 + 1,
            protocol: transform::PROTO_ESP,
            spi: 0x7000_0000u32.to_be_bytes().to_vec(),
            transforms,
        })
        .collect()
}

fn chosen(list: Vec<Vec<Transform>>, accepted: &[Cipher]) -> Result<(u8, Cipher), u16> {
    choose_esp_proposal(&proposals(list), KeRule::Ignore, accepted)
        .map(|c| (c.number, c.cipher))
        .map_err(|(n, _)| n)
}

#[test]
fn macos_aes_cbc_sha256_is_accepted_in_both_key_sizes() {
    let all = &DEFAULT_ESP_SUITES;
    let sha256 = transform::AUTH_HMAC_SHA2_256_128;
    assert_eq!(
        chosen(vec![cbc(256, sha256)], all),
        Ok((1, Cipher::AesCbc256HmacSha256))
    );
    assert_eq!(
        chosen(vec![cbc(128, sha256)], all),
        Ok((1, Cipher::AesCbc128HmacSha256))
    );
    assert_eq!(chosen(vec![gcm(128)], all), Ok((1, Cipher::AesGcm16_128)));
    assert_eq!(chosen(vec![gcm(256)], all), Ok((1, Cipher::AesGcm16_256)));
}

#[test]
fn aes_gcm_is_preferred_whatever_the_clients_order() {
    let sha256 = transform::AUTH_HMAC_SHA2_256_128;
    let list = || vec![cbc(256, sha256), cbc(128, sha256), gcm(128), gcm(256)];
    assert_eq!(
        chosen(list(), &DEFAULT_ESP_SUITES),
        Ok((4, Cipher::AesGcm16_256))
    );
    // One proposal listing both CBC key sizes: the larger, as gate64 prefers it.
    let mut both = cbc(128, sha256);
    both.push(Transform::with_key_length(
        transform::ENCR,
        transform::ENCR_AES_CBC,
        256,
    ));
    assert_eq!(
        chosen(vec![both], &DEFAULT_ESP_SUITES),
        Ok((1, Cipher::AesCbc256HmacSha256))
    );
    // Narrowed to CBC: the CBC proposal, though GCM is offered.
    assert_eq!(
        chosen(list(), &[Cipher::AesCbc128HmacSha256]),
        Ok((2, Cipher::AesCbc128HmacSha256))
    );
}

#[test]
fn sha1_no_integrity_aes192_and_narrowed_out_suites_are_no_proposal_chosen() {
    let all = &DEFAULT_ESP_SUITES;
    let none = notify::NO_PROPOSAL_CHOSEN;
    assert_eq!(chosen(vec![cbc(256, AUTH_HMAC_SHA1_96)], all), Err(none));
    assert_eq!(
        chosen(vec![cbc(256, 0)], all),
        Err(none),
        "CBC needs integrity"
    );
    let mut no_integ = cbc(256, 0);
    no_integ.remove(1);
    assert_eq!(chosen(vec![no_integ], all), Err(none));
    assert_eq!(
        chosen(vec![cbc(192, transform::AUTH_HMAC_SHA2_256_128)], all),
        Err(none)
    );
    let mut gcm_with_hmac = gcm(256);
    gcm_with_hmac.push(Transform::new(
        transform::INTEG,
        transform::AUTH_HMAC_SHA2_256_128,
    ));
    assert_eq!(chosen(vec![gcm_with_hmac], all), Err(none));
    assert_eq!(
        chosen(
            vec![cbc(256, transform::AUTH_HMAC_SHA2_256_128)],
            &[Cipher::AesGcm16_256]
        ),
        Err(none)
    );
    assert_eq!(chosen(vec![gcm(256)], &[]), Err(none));
}

/// A CREATE_CHILD_SA for an AES-256-CBC + HMAC-SHA2-256-128 child SA: the reply echoes the
/// suite, each direction's KEYMAT is 64 bytes (AES key, then HMAC key) in RFC 7296 §2.17's
/// order, and what the client seals with its half the responder's SA opens.
#[test]
fn create_child_sa_with_aes_cbc_derives_keymat_and_carries_packets() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, old) = established_pair(&lab, now, |_| {});
    let ni = vec![5; 32];
    let tsi = vec![TrafficSelector::range(old.peer.inner[0], old.peer.inner[0])];
    let tsr = vec![TrafficSelector::range(
        "fd00:c0::".parse().expect("a"),
        "fd00:c0::ffff".parse().expect("a"),
    )];
    let payloads = [
        Payload::Sa(vec![Proposal {
            number: 1,
            protocol: transform::PROTO_ESP,
            spi: 0x5100u32.to_be_bytes().to_vec(),
            transforms: cbc(256, transform::AUTH_HMAC_SHA2_256_128),
        }]),
        Payload::Nonce(ni.clone()),
        Payload::TsI(tsi),
        Payload::TsR(tsr),
    ];
    let req = request(&mut i, exchange::CREATE_CHILD_SA, &payloads);
    r.handle(now, addr(SERVER), addr(CLIENT), &req);
    let answer = open_response(&i, &r.poll_transmit().expect("answer"));
    let mut nr = None;
    let mut sa = None;
    for p in &answer {
        match p {
            Payload::Nonce(n) => nr = Some(n.clone()),
            Payload::Sa(p) => sa = Some(p.clone()),
            _ => {}
        }
    }
    let sa = sa.expect("SA payload");
    assert_eq!(
        sa[0].transforms,
        vec![
            Transform::with_key_length(transform::ENCR, transform::ENCR_AES_CBC, 256),
            Transform::new(transform::INTEG, transform::AUTH_HMAC_SHA2_256_128),
            Transform::new(transform::ESN, transform::ESN_NONE),
        ]
    );
    let sk_d = i.keys.clone().expect("keys").sk_d;
    let (i_to_r, r_to_i) = keys::child_keymat(&sk_d, None, &ni, &nr.expect("Nr"), 64);
    let ev = events(&mut r);
    let new = child_ups(&ev)[0];
    assert_eq!(new.inbound.keys.cipher, Cipher::AesCbc256HmacSha256);
    assert_eq!(new.inbound.keys.key, i_to_r.0);
    assert_eq!(new.outbound.keys.key, r_to_i.0);
    // The client's halves, as a peer would build them from the same KEYMAT.
    let mut client_out = new.inbound.clone();
    client_out.keys.key = i_to_r.0.clone();
    let seal = Outbound::new(&client_out).expect("client SA");
    let open = Inbound::new(&new.inbound).expect("gate64 SA");
    let inner = [0x60u8; 48];
    let h = seal.header_len();
    let mut buf = vec![0u8; h + inner.len() + Cipher::AesCbc256HmacSha256.max_trailer()];
    buf[h..h + inner.len()].copy_from_slice(&inner);
    let n = seal.seal(&mut buf, 0, inner.len(), 41).expect("seal");
    let opened = open.open(&mut buf[..n]).expect("open");
    assert_eq!(&buf[opened.inner], &inner[..]);
}

/// `esp_suites` narrowed to AES-GCM: a CBC-only CREATE_CHILD_SA gets NO_PROPOSAL_CHOSEN.
#[test]
fn a_cbc_only_request_is_refused_when_esp_suites_is_gcm_only() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, old) = established_pair(&lab, now, |c| {
        c.esp_suites = vec![Cipher::AesGcm16_256];
    });
    let tsi = vec![TrafficSelector::range(old.peer.inner[0], old.peer.inner[0])];
    let tsr = vec![TrafficSelector::range(
        "fd00:c0::".parse().expect("a"),
        "fd00:c0::ffff".parse().expect("a"),
    )];
    let payloads = [
        Payload::Sa(vec![Proposal {
            number: 1,
            protocol: transform::PROTO_ESP,
            spi: 0x5200u32.to_be_bytes().to_vec(),
            transforms: cbc(256, transform::AUTH_HMAC_SHA2_256_128),
        }]),
        Payload::Nonce(vec![6; 32]),
        Payload::TsI(tsi),
        Payload::TsR(tsr),
    ];
    let req = request(&mut i, exchange::CREATE_CHILD_SA, &payloads);
    r.handle(now, addr(SERVER), addr(CLIENT), &req);
    let answer = open_response(&i, &r.poll_transmit().expect("answer"));
    assert!(
        find_notify(&answer, notify::NO_PROPOSAL_CHOSEN).is_some(),
        "{answer:?}"
    );
}
