//! IKE SA proposal choice: every cipher, integrity, PRF and group gate64 implements builds an
//! IKE SA and its child end to end; AES-GCM is preferred; `legacy_proposals` and
//! `ike_proposals` narrow the choice.

use super::*;
use crate::keys::{Encr, Integ, Prf, Suite};
use crate::responder::{IkePolicy, IkeProposalRule};

/// A client proposing `suite` with `group` first, against a responder configured by `edit`;
/// returns the responder, the initiator and what the responder sent.
fn handshake(
    suite: Suite,
    group: Group,
    edit: impl FnOnce(&mut ResponderConfig),
) -> (Responder, Initiator, Vec<Transmit>) {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, edit);
    let mut i = lab.initiator(
        now,
        TunnelKind::Intranet,
        "fd00:c0::/64",
        &lab.clients_ca,
        group,
    );
    i.set_ike_suite(suite);
    i.start(now);
    let sent = exchange_all(&mut r, &mut i, now);
    (r, i, sent)
}

/// The transforms the IKE_SA_INIT response chose.
fn chosen(sent: &[Transmit]) -> Vec<Transform> {
    let m = Message::parse(&sent[0].bytes).expect("parses");
    match m.payloads.first() {
        Some(Payload::Sa(p)) => p[0].transforms.clone(),
        other => panic!("no SA payload: {other:?}"),
    }
}

fn cbc(encr: Encr, integ: Integ, prf: Prf) -> Suite {
    Suite {
        encr,
        integ: Some(integ),
        prf,
    }
}

/// Each IKE SA transform gate64 implements, alone: the responder echoes it, both sides derive
/// the same keys (IKE_AUTH is protected with them, the AUTH payloads use the PRF), and the
/// child SA comes up.
#[test]
fn every_transform_builds_an_ike_sa() {
    let cases = [
        (Suite::GCM256_SHA256, Group::Ecp256),
        (
            Suite {
                encr: Encr::AesGcm16_128,
                integ: None,
                prf: Prf::HmacSha384,
            },
            Group::Ecp384,
        ),
        (
            Suite {
                encr: Encr::AesGcm16_256,
                integ: None,
                prf: Prf::HmacSha512,
            },
            Group::Curve25519,
        ),
        (
            cbc(Encr::AesCbc256, Integ::HmacSha256_128, Prf::HmacSha256),
            Group::Modp2048,
        ),
        (
            cbc(Encr::AesCbc128, Integ::HmacSha384_192, Prf::HmacSha384),
            Group::Modp3072,
        ),
        (
            cbc(Encr::AesCbc256, Integ::HmacSha512_256, Prf::HmacSha512),
            Group::Modp4096,
        ),
    ];
    for (suite, group) in cases {
        let (mut r, mut i, sent) = handshake(suite, group, |_| {});
        let mut expected = suite.transforms();
        expected.push(Transform::new(transform::KE, group.id()));
        assert_eq!(chosen(&sent), expected, "{suite:?} {group:?}");
        established(&mut i);
        assert_eq!(child_ups(&events(&mut r)).len(), 1, "{suite:?} {group:?}");
        let sa = r.sas.values().next().expect("IKE SA");
        assert_eq!(sa.keys.suite, suite);
    }
}

/// Windows' default set (AES-CBC, SHA1, MODP-1024) is refused with NO_PROPOSAL_CHOSEN
/// unless `legacy_proposals` is set, and then builds an IKE SA.
#[test]
fn legacy_proposals_gate_sha1_and_modp1024() {
    let windows = cbc(Encr::AesCbc256, Integ::HmacSha1_96, Prf::HmacSha1);
    let (mut r, mut i, sent) = handshake(windows, Group::Modp1024, |_| {});
    // The initiator also offers ECP-256 and Curve25519 with SHA1: all need the key.
    assert_eq!(only_notify(&sent[0]).0, notify::NO_PROPOSAL_CHOSEN);
    assert!(matches!(i.poll_event(), Some(InitiatorEvent::Failed(_))));
    assert!(events(&mut r).contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::NoProposal
    }));
    let (mut r, mut i, sent) = handshake(windows, Group::Modp1024, |c| {
        c.ike_policy.legacy = true;
    });
    let mut expected = windows.transforms();
    expected.push(Transform::new(transform::KE, 2));
    assert_eq!(chosen(&sent), expected);
    established(&mut i);
    assert_eq!(child_ups(&events(&mut r)).len(), 1);
}

/// A proposal with SHA2 and MODP-1024 beside MODP-2048 gets INVALID_KE_PAYLOAD asking for
/// MODP-2048 when legacy algorithms are off: the legacy group is never asked for.
#[test]
fn legacy_group_is_passed_over_for_a_modern_one() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |_| {});
    let t = vec![
        Transform::with_key_length(transform::ENCR, keys::ENCR_AES_CBC, 256),
        Transform::new(transform::PRF, transform::PRF_HMAC_SHA2_256),
        Transform::new(transform::INTEG, 12),
        Transform::new(transform::KE, 2),
        Transform::new(transform::KE, 14),
    ];
    r.handle(now, addr(SERVER), addr(CLIENT), &raw_init(7, t, 2, 128));
    assert_eq!(
        only_notify(&r.poll_transmit().expect("reply")),
        (notify::INVALID_KE_PAYLOAD, vec![0, 14])
    );
}

/// 3DES is never chosen, even with `legacy_proposals`: aws-lc-rs offers it only behind a
/// build feature gate64 does not enable.
#[test]
fn triple_des_is_refused_even_with_legacy_proposals() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |c| c.ike_policy.legacy = true);
    let t = vec![
        Transform::new(transform::ENCR, keys::ENCR_3DES),
        Transform::new(transform::PRF, 2),
        Transform::new(transform::INTEG, 2),
        Transform::new(transform::KE, 2),
    ];
    r.handle(now, addr(SERVER), addr(CLIENT), &raw_init(7, t, 2, 128));
    assert_eq!(
        only_notify(&r.poll_transmit().expect("reply")).0,
        notify::NO_PROPOSAL_CHOSEN
    );
}

/// AES-GCM is chosen over AES-CBC when the client offers both (here AES-CBC first).
#[test]
fn aes_gcm_preferred_over_cbc() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |_| {});
    let cbc = Proposal {
        number: 1,
        protocol: transform::PROTO_IKE,
        spi: vec![],
        transforms: vec![
            Transform::with_key_length(transform::ENCR, keys::ENCR_AES_CBC, 256),
            Transform::new(transform::PRF, transform::PRF_HMAC_SHA2_256),
            Transform::new(transform::INTEG, 12),
            Transform::new(transform::KE, 19),
        ],
    };
    let mut gcm = gcm_prf();
    gcm.push(Transform::new(transform::KE, 19));
    let gcm = Proposal {
        number: 2,
        transforms: gcm,
        ..cbc.clone()
    };
    let policy = IkePolicy::default();
    assert!(matches!(
        proposal::choose_ike_proposal(&[cbc.clone(), gcm.clone()], 19, &policy),
        proposal::Choice::Accept(2, s, Group::Ecp256) if s == Suite::GCM256_SHA256
    ));
    // A CBC proposal whose group is the KE payload's wins over a GCM one that needs another
    // round trip.
    let gcm_modp = Proposal {
        transforms: {
            let mut t = gcm_prf();
            t.push(Transform::new(transform::KE, 14));
            t
        },
        ..gcm
    };
    assert!(matches!(
        proposal::choose_ike_proposal(&[cbc, gcm_modp], 19, &policy),
        proposal::Choice::Accept(1, s, Group::Ecp256) if s.encr == Encr::AesCbc256
    ));
    r.handle_timeout(now);
}

/// `ike_proposals` narrows: only AES-CBC-256 + SHA2-256 + MODP-2048 allowed refuses
/// AES-GCM with ECP-256 and accepts the allowed set.
#[test]
fn ike_proposals_narrow_the_choice() {
    let rule = IkeProposalRule {
        encr: vec![Encr::AesCbc256],
        integ: vec![Integ::HmacSha256_128],
        prf: vec![Prf::HmacSha256],
        groups: vec![Group::Modp2048],
    };
    let narrow = |c: &mut ResponderConfig| c.ike_policy.rules = vec![rule.clone()];
    let (_, _, sent) = handshake(Suite::GCM256_SHA256, Group::Ecp256, narrow);
    assert_eq!(only_notify(&sent[0]).0, notify::NO_PROPOSAL_CHOSEN);
    let macos = cbc(Encr::AesCbc256, Integ::HmacSha256_128, Prf::HmacSha256);
    let (mut r, mut i, sent) = handshake(macos, Group::Modp2048, |c| {
        c.ike_policy.rules = vec![rule.clone()]
    });
    assert_eq!(chosen(&sent).len(), 4);
    established(&mut i);
    assert_eq!(child_ups(&events(&mut r)).len(), 1);
}

/// A malformed MODP public value (0, 1, p-1, all ones) in IKE_SA_INIT is refused as
/// INVALID_SYNTAX and counted, with no state kept.
#[test]
fn malformed_modp_public_values_refused() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |_| {});
    let t = vec![
        Transform::with_key_length(transform::ENCR, keys::ENCR_AES_CBC, 256),
        Transform::new(transform::PRF, transform::PRF_HMAC_SHA2_256),
        Transform::new(transform::INTEG, 12),
        Transform::new(transform::KE, 14),
    ];
    let mut one = vec![0; 256];
    one[255] = 1;
    for (spi, value) in [(1, vec![0; 256]), (2, one), (3, vec![0xff; 256])] {
        let mut init = raw_init(spi, t.clone(), 14, 256);
        let at = init.len() - 36 - 256;
        init[at..at + 256].copy_from_slice(&value);
        r.handle(now, addr(SERVER), addr(CLIENT), &init);
        assert_eq!(
            only_notify(&r.poll_transmit().expect("reply")).0,
            notify::INVALID_SYNTAX
        );
    }
    assert_eq!(r.half_open(), 0);
    let ev = events(&mut r);
    let malformed = ev
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Refused {
                    reason: Refusal::Malformed,
                    ..
                }
            )
        })
        .count();
    assert_eq!(malformed, 3);
}
