//! RFC 4739 multiple authentication: machine certificate, then user certificate, against
//! gate64's own initiator.

use super::*;
use crate::initiator::InitiatorError;

/// User credentials (a leaf named `name`) under `ca`.
fn user(ca: &Ca, name: &str) -> Credentials {
    let (chain, key) = leaf(ca, name);
    Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("user credentials")
}

fn intranet_with_user(lab: &Lab, now: Instant, user_ca: &Ca) -> Initiator {
    lab.intranet(now)
        .with_second_auth(user(user_ca, "alice.gate64.lab"))
}

fn has_notify(payloads: &[Payload], kind: u16) -> bool {
    crate::message::find_notify(payloads, kind).is_some()
}

fn negotiation_failed_authentication(ev: &[Event]) -> bool {
    ev.iter().any(|e| {
        matches!(
            e,
            Event::Negotiation {
                result: Err(Refusal::Authentication(_)),
                ..
            }
        )
    })
}

fn failed_with(i: &mut Initiator, kind: u16) -> bool {
    matches!(
        i.poll_event(),
        Some(InitiatorEvent::Failed(InitiatorError::Notify(k))) if k == kind
    )
}

/// RFC 4739 §3: both rounds run; the first response carries IDr and AUTH but no SA or TS, the
/// child SA comes with the second, and both identities are kept on the IKE SA.
#[test]
fn rfc4739_3_machine_then_user_certificate() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut i = intranet_with_user(&lab, now, &lab.clients_ca);
    i.start(now);
    let sent = exchange_all(&mut r, &mut i, now);
    assert!(i.second_auth_negotiated());
    let (inner, child) = established(&mut i);
    assert!(inner.is_some());
    assert_eq!(sent.len(), 3, "IKE_SA_INIT and two IKE_AUTH responses");
    let init = Message::parse(&sent[0].bytes).expect("IKE_SA_INIT response");
    assert!(has_notify(&init.payloads, notify::MULTIPLE_AUTH_SUPPORTED));
    let first = open_response(&i, &sent[1]);
    assert!(first.iter().any(|p| matches!(p, Payload::Auth { .. })));
    assert!(
        !first
            .iter()
            .any(|p| matches!(p, Payload::Sa(_) | Payload::TsI(_) | Payload::TsR(_))),
        "{first:?}"
    );
    let last = open_response(&i, &sent[2]);
    assert!(last.iter().any(|p| matches!(p, Payload::Sa(_))));
    assert!(!last.iter().any(|p| matches!(p, Payload::Auth { .. })));
    let ev = events(&mut r);
    let ups = child_ups(&ev);
    assert_eq!(ups.len(), 1);
    assert_eq!(ups[0].tunnel, TunnelKind::Intranet);
    assert_eq!(ups[0].inbound.keys, child.outbound.keys);
    let sas = r.ike_sas(now);
    assert_eq!(sas.len(), 1);
    let machine = sas[0].identity.as_deref().expect("machine identity");
    let user = sas[0].user_identity.as_deref().expect("user identity");
    assert!(machine.contains("client1.gate64.lab"), "{machine}");
    assert!(user.contains("alice.gate64.lab"), "{user}");
    assert_eq!(r.half_open(), 0);
}

/// `required`: an intranet client that authenticates only once gets AUTHENTICATION_FAILED;
/// the infrastructure tunnel needs no second round.
#[test]
fn rfc4739_required_second_round_missing_fails_intranet_only() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| {
        c.intranet_second_auth = SecondAuthPolicy::Required;
    });
    let mut intra = lab.intranet(now);
    intra.start(now);
    exchange_all(&mut r, &mut intra, now);
    assert!(failed_with(&mut intra, notify::AUTHENTICATION_FAILED));
    let ev = events(&mut r);
    assert!(negotiation_failed_authentication(&ev));
    assert!(child_ups(&ev).is_empty());
    assert_eq!((r.ike_sas(now).len(), r.half_open()), (0, 0));

    let mut infra = lab.infrastructure(now);
    infra.start(now);
    exchange_all(&mut r, &mut infra, now);
    established(&mut infra);

    let mut both = intranet_with_user(&lab, now, &lab.clients_ca);
    both.start(now);
    exchange_all(&mut r, &mut both, now);
    established(&mut both);
}

/// A user certificate from another CA fails the second round: AUTHENTICATION_FAILED, no child
/// SA, nothing left behind (the machine round alone does not establish the IKE SA).
#[test]
fn rfc4739_second_certificate_from_another_ca_fails() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let rogue = ca("rogue CA");
    let mut i = intranet_with_user(&lab, now, &rogue);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    assert!(failed_with(&mut i, notify::AUTHENTICATION_FAILED));
    let ev = events(&mut r);
    assert!(negotiation_failed_authentication(&ev));
    assert!(child_ups(&ev).is_empty());
    assert!(!ev.iter().any(|e| matches!(e, Event::IkeSaUp { .. })));
    assert_eq!(
        (r.ike_sas(now).len(), r.half_open(), r.pool.leased()),
        (0, 0, 0)
    );
}

/// `off`: no MULTIPLE_AUTH_SUPPORTED, so the initiator authenticates once and still gets its
/// tunnel; an ANOTHER_AUTH_FOLLOWS the responder never agreed to is refused (RFC 4739 §3.2).
#[test]
fn rfc4739_off_is_not_offered_and_refuses_another_auth() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| c.intranet_second_auth = SecondAuthPolicy::Off);
    let mut i = intranet_with_user(&lab, now, &lab.clients_ca);
    i.start(now);
    let sent = exchange_all(&mut r, &mut i, now);
    let init = Message::parse(&sent[0].bytes).expect("IKE_SA_INIT response");
    assert!(!has_notify(&init.payloads, notify::MULTIPLE_AUTH_SUPPORTED));
    assert!(!i.second_auth_negotiated());
    established(&mut i);
    let sas = r.ike_sas(now);
    assert_eq!(sas[0].user_identity, None);

    // A hand-made IKE_AUTH with ANOTHER_AUTH_FOLLOWS on an SA that did not negotiate it.
    let mut r = lab.responder(now, |c| c.intranet_second_auth = SecondAuthPolicy::Off);
    let mut i = intranet_with_user(&lab, now, &lab.clients_ca);
    i.start(now);
    let (local, remote, bytes) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, remote, local, &bytes);
    let init = r.poll_transmit().expect("IKE_SA_INIT response");
    i.handle(now, &init.bytes);
    let (local, remote, auth) = i.poll_transmit().expect("IKE_AUTH");
    let keys = i.keys.clone().expect("keys");
    let (header, mut payloads) = keys::open_message(&auth, &keys.sk_ei).expect("opens");
    payloads.push(Payload::Notify(Notify::new(
        notify::ANOTHER_AUTH_FOLLOWS,
        Vec::new(),
    )));
    let forged = keys::seal_message(&header, &payloads, &keys.sk_ei).expect("seal");
    r.handle(now, remote, local, &forged);
    let reply = r.poll_transmit().expect("IKE_AUTH response");
    let answer = open_response(&i, &reply);
    assert!(
        has_notify(&answer, notify::AUTHENTICATION_FAILED),
        "{answer:?}"
    );
    assert!(negotiation_failed_authentication(&events(&mut r)));
    assert_eq!(r.ike_sas(now).len(), 0);
}

/// `required`: an IKE SA whose first child was refused (selectors in neither tunnel) stands
/// without a tunnel; a later CREATE_CHILD_SA for the intranet does not get what IKE_AUTH
/// would have refused: the intranet was never allowed for it.
#[test]
fn rfc4739_required_intranet_is_refused_to_a_later_create_child_sa() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| {
        c.intranet_second_auth = SecondAuthPolicy::Required;
    });
    let mut i = lab.initiator(
        now,
        TunnelKind::Intranet,
        "2001:db8:99::/64",
        &lab.clients_ca,
        Group::Ecp256,
    );
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    assert!(failed_with(&mut i, notify::TS_UNACCEPTABLE));
    assert_eq!(r.established(), 1, "the IKE SA stands without a child SA");
    let _ = events(&mut r);
    let any = TrafficSelector::range("::".parse().expect("a"), "ffff::".parse().expect("a"));
    let intranet = TrafficSelector::range(
        "fd00:c0::".parse().expect("a"),
        "fd00:c0::ffff".parse().expect("a"),
    );
    let payloads = [
        esp_proposal(0x6000, None),
        Payload::Nonce(vec![5; 32]),
        Payload::TsI(vec![any]),
        Payload::TsR(vec![intranet]),
    ];
    let req = request(&mut i, exchange::CREATE_CHILD_SA, &payloads);
    r.handle(now, addr(SERVER), addr(CLIENT), &req);
    let answer = open_response(&i, &r.poll_transmit().expect("answer"));
    assert!(
        matches!(answer.as_slice(), [Payload::Notify(n)] if n.kind == notify::TS_UNACCEPTABLE),
        "{answer:?}"
    );
    assert!(child_ups(&events(&mut r)).is_empty());
}

/// The second round must prove a user: the machine's identity again is refused.
#[test]
fn rfc4739_a_second_round_with_the_machine_identity_is_refused() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| {
        c.intranet_second_auth = SecondAuthPolicy::Required;
    });
    let mut i = lab
        .initiator(
            now,
            TunnelKind::Intranet,
            "fd00:c0::/64",
            &lab.clients_ca,
            Group::Ecp256,
        )
        .with_second_auth(user(&lab.clients_ca, "client1.gate64.lab"));
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    assert!(failed_with(&mut i, notify::AUTHENTICATION_FAILED));
    assert!(child_ups(&events(&mut r)).is_empty());
}

/// `[ipsec] user_ca`: the second round verifies against it, not against the machines' CA.
#[test]
fn rfc4739_the_second_round_verifies_against_the_user_ca() {
    let lab = Lab::new();
    let now = Instant::now();
    let users = ca("gate64 users CA");
    let with_user_ca = |c: &mut ResponderConfig| {
        c.intranet_second_auth = SecondAuthPolicy::Required;
        c.user_anchors = Some(TrustAnchors::from_pem(users.pem.as_bytes()).expect("users CA"));
    };
    // A user certificate from the machines' CA: refused.
    let mut r = lab.responder(now, with_user_ca);
    let mut i = intranet_with_user(&lab, now, &lab.clients_ca);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    assert!(failed_with(&mut i, notify::AUTHENTICATION_FAILED));
    // One from the users' CA: both rounds pass.
    let mut r = lab.responder(now, with_user_ca);
    let mut i = intranet_with_user(&lab, now, &users);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    established(&mut i);
}
