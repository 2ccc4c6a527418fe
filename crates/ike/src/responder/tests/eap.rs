//! EAP (RFC 7296 §2.16) relayed through the driver: hand-built IKE_AUTH requests on an IKE
//! SA that gate64's initiator set up, and RADIUS answers given as verdicts.

use super::*;
use crate::message::Identification;

const MSK: [u8; 64] = [0x5a; 64];

fn eap_lab(now: Instant, edit: impl FnOnce(&mut EapPolicy)) -> (Lab, Responder) {
    let lab = Lab::new();
    let mut policy = EapPolicy::default();
    edit(&mut policy);
    let r = lab.responder(now, |c| c.eap = Some(policy));
    (lab, r)
}

/// IKE_SA_INIT by the initiator; its own IKE_AUTH is dropped.
fn init(r: &mut Responder, i: &mut Initiator, now: Instant) {
    i.start(now);
    let (local, remote, bytes) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, remote, local, &bytes);
    let t = r.poll_transmit().expect("IKE_SA_INIT response");
    i.handle(now, &t.bytes);
    while i.poll_transmit().is_some() {}
    i.next_id = 1;
}

fn idi() -> Identification {
    Identification {
        kind: 2,
        data: b"laptop.gate64.lab".to_vec(),
    }
}

/// The first IKE_AUTH, without AUTH: IDi, SA, TSi, TSr, CP.
fn first_request(i: &mut Initiator) -> Vec<u8> {
    let net: ipnet::IpNet = "fd00:c0::/64".parse().expect("net");
    request(
        i,
        exchange::IKE_AUTH,
        &[
            Payload::IdI(idi()),
            Payload::Cp(crate::message::Configuration {
                kind: crate::message::cfg::REQUEST,
                attributes: vec![crate::message::CfgAttribute {
                    kind: crate::message::cfg::INTERNAL_IP6_ADDRESS,
                    value: Vec::new(),
                }],
            }),
            esp_proposal(0x1000, None),
            Payload::TsI(vec![TrafficSelector::range(
                "::".parse().expect("any"),
                IpAddr::V6(std::net::Ipv6Addr::from(u128::MAX)),
            )]),
            Payload::TsR(vec![TrafficSelector::range(net.network(), net.broadcast())]),
        ],
    )
}

fn eap(body: Vec<u8>) -> Payload {
    Payload::Other {
        kind: kind::EAP,
        body,
    }
}

fn eap_of(payloads: &[Payload]) -> Option<Vec<u8>> {
    payloads.iter().find_map(|p| match p {
        Payload::Other { kind: k, body } if *k == kind::EAP => Some(body.clone()),
        _ => None,
    })
}

/// Sends `bytes` and returns the one response, opened.
fn send(r: &mut Responder, i: &Initiator, now: Instant, bytes: &[u8]) -> Vec<Payload> {
    r.handle(now, addr(SERVER), addr(CLIENT), bytes);
    let t = r.poll_transmit().expect("a response");
    open_response(i, &t)
}

/// Runs the exchange up to the first job (the client's identity), returning the job.
fn up_to_identity(r: &mut Responder, i: &mut Initiator, now: Instant) -> (Vec<Payload>, EapJob) {
    init(r, i, now);
    let bytes = first_request(i);
    let first = send(r, i, now, &bytes);
    assert_eq!(
        eap_of(&first),
        Some(vec![1, 1, 0, 5, 1]),
        "EAP-Request/Identity"
    );
    let bytes = request(
        i,
        exchange::IKE_AUTH,
        &[eap(b"\x02\x01\x00\x0a\x01alice".to_vec())],
    );
    r.handle(now, addr(SERVER), addr(CLIENT), &bytes);
    assert!(
        r.poll_transmit().is_none(),
        "nothing before the server answers"
    );
    let job = r.poll_eap_job().expect("a job for the relay");
    (first, job)
}

fn prf_key(i: &Initiator) -> (crate::keys::Prf, Vec<u8>) {
    let prf = i.keys.as_ref().expect("keys").sk_pi.prf;
    (prf, prf.prf(&MSK, &[b"Key Pad for IKEv2"]))
}

/// The initiator's AUTH data after EAP (RFC 7296 §2.16): its signed octets (its IKE_SA_INIT
/// request, Nr, prf(SK_pi, IDi) for `idi`) under the key derived from [`MSK`].
fn msk_auth(i: &Initiator, idi: &Identification) -> Vec<u8> {
    let (prf, key) = prf_key(i);
    let keys = i.keys.as_ref().expect("keys");
    let octets = [&i.init_request[..], &i.nr, &keys.sk_pi.prf(&[&idi.body()])].concat();
    prf.prf(&key, &[&octets])
}

/// The responder's AUTH data after EAP: its signed octets (its IKE_SA_INIT response, Ni,
/// prf(SK_pr, IDr) for the IDr of `first`) under the key derived from [`MSK`].
fn msk_auth_of_responder(i: &Initiator, first: &[Payload]) -> Vec<u8> {
    let (prf, key) = prf_key(i);
    let keys = i.keys.as_ref().expect("keys");
    let idr = first
        .iter()
        .find_map(|p| match p {
            Payload::IdR(id) => Some(id.body()),
            _ => None,
        })
        .expect("IDr");
    let ours = [&i.init_response[..], &i.ni, &keys.sk_pr.prf(&[&idr])].concat();
    prf.prf(&key, &[&ours])
}

/// RFC 7296 §2.16: identity, a challenge round with State, Accept with the MSK, both AUTHs
/// keyed by it, the intranet tunnel.
#[test]
fn rfc7296_2_16_eap_relayed_to_the_server() {
    let now = Instant::now();
    let (lab, mut r) = eap_lab(now, |_| {});
    let mut i = lab.intranet(now);
    let (first, job) = up_to_identity(&mut r, &mut i, now);
    assert!(
        first
            .iter()
            .any(|p| matches!(p, Payload::Auth { method, .. } if *method != 2))
    );
    assert_eq!(job.user, "alice");
    assert_eq!(job.peer, addr(CLIENT));
    assert_eq!(job.state, None);
    assert_eq!(job.eap_message, b"\x02\x01\x00\x0a\x01alice");
    let challenge = vec![1, 2, 0, 6, 26, 1];
    r.handle_eap_verdict(
        now,
        job.verdict(EapOutcome::Challenge {
            eap_message: challenge.clone(),
            state: Some(vec![7, 7]),
        }),
    );
    let t = r.poll_transmit().expect("challenge to the client");
    assert_eq!(eap_of(&open_response(&i, &t)), Some(challenge));
    let bytes = request(&mut i, exchange::IKE_AUTH, &[eap(vec![2, 2, 0, 6, 26, 1])]);
    r.handle(now, addr(SERVER), addr(CLIENT), &bytes);
    let job = r.poll_eap_job().expect("second job");
    assert_eq!(job.state, Some(vec![7, 7]), "State is echoed");
    r.handle_eap_verdict(
        now,
        job.verdict(EapOutcome::Accept {
            eap_message: vec![3, 2, 0, 4],
            msk: MSK.to_vec(),
            authorization: Authorization::default(),
        }),
    );
    let t = r.poll_transmit().expect("EAP-Success");
    assert_eq!(eap_of(&open_response(&i, &t)), Some(vec![3, 2, 0, 4]));
    let auth = msk_auth(&i, &idi());
    let bytes = request(
        &mut i,
        exchange::IKE_AUTH,
        &[Payload::Auth {
            method: 2,
            data: auth,
        }],
    );
    let last = send(&mut r, &i, now, &bytes);
    assert!(last.contains(&Payload::Auth {
        method: 2,
        data: msk_auth_of_responder(&i, &first),
    }));
    assert!(last.iter().any(|p| matches!(p, Payload::Sa(_))));
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::IkeSaUp { identity, eap_user: None, tunnel: Some(TunnelKind::Intranet), .. } if identity == "eap:alice")),
        "{ev:?}"
    );
    assert_eq!(r.eap_in_flight(), 0);
    assert_eq!(r.established(), 1);
}

/// Access-Reject refuses the IKE SA under `eap`, naming the user; nothing stays held.
#[test]
fn access_reject_refuses_under_eap_with_the_user() {
    let now = Instant::now();
    let (lab, mut r) = eap_lab(now, |_| {});
    let mut i = lab.intranet(now);
    let (_, job) = up_to_identity(&mut r, &mut i, now);
    r.handle_eap_verdict(now, job.verdict(EapOutcome::Reject));
    let t = r.poll_transmit().expect("refusal");
    let payloads = open_response(&i, &t);
    assert!(crate::message::find_notify(&payloads, notify::AUTHENTICATION_FAILED).is_some());
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::AuthRefused { reason: Refusal::Eap, identity: Some(id), .. } if id == "eap:alice")),
        "{ev:?}"
    );
    assert_eq!(Refusal::Eap.label(), "eap");
    assert_eq!((r.ike_sas(now).len(), r.eap_in_flight()), (0, 0));
}

/// A client AUTH not keyed by the MSK is refused.
#[test]
fn a_wrong_msk_auth_is_refused() {
    let now = Instant::now();
    let (lab, mut r) = eap_lab(now, |_| {});
    let mut i = lab.intranet(now);
    let (_, job) = up_to_identity(&mut r, &mut i, now);
    r.handle_eap_verdict(
        now,
        job.verdict(EapOutcome::Accept {
            eap_message: Vec::new(),
            msk: MSK.to_vec(),
            authorization: Authorization::default(),
        }),
    );
    let t = r.poll_transmit().expect("EAP-Success");
    assert_eq!(eap_of(&open_response(&i, &t)), Some(vec![3, 0, 0, 4]));
    let bytes = request(
        &mut i,
        exchange::IKE_AUTH,
        &[Payload::Auth {
            method: 2,
            data: vec![0; 32],
        }],
    );
    let last = send(&mut r, &i, now, &bytes);
    assert!(crate::message::find_notify(&last, notify::AUTHENTICATION_FAILED).is_some());
    assert_eq!((r.established(), r.eap_in_flight()), (0, 0));
}

/// Bounds: exchanges per source, round trips, and the server's silence.
#[test]
fn eap_bounds_refuse_under_eap_cap() {
    let now = Instant::now();
    let (lab, mut r) = eap_lab(now, |p| {
        p.max_per_source = 1;
        p.max_rounds = 2;
    });
    let mut a = lab.intranet(now);
    let (_, job) = up_to_identity(&mut r, &mut a, now);
    // A second exchange from the same address is refused while the first is in progress.
    let mut b = lab.intranet(now);
    init(&mut r, &mut b, now);
    let bytes = first_request(&mut b);
    let refused = send(&mut r, &b, now, &bytes);
    assert!(crate::message::find_notify(&refused, notify::AUTHENTICATION_FAILED).is_some());
    assert!(events(&mut r).iter().any(|e| matches!(
        e,
        Event::Refused {
            reason: Refusal::EapCap,
            ..
        }
    )));
    // Round trips: the identity was the first; the third EAP message is one too many.
    let c = vec![1, 2, 0, 6, 26, 1];
    r.handle_eap_verdict(
        now,
        job.verdict(EapOutcome::Challenge {
            eap_message: c.clone(),
            state: None,
        }),
    );
    r.poll_transmit().expect("challenge");
    let bytes = request(&mut a, exchange::IKE_AUTH, &[eap(vec![2, 2, 0, 6, 26, 1])]);
    r.handle(now, addr(SERVER), addr(CLIENT), &bytes);
    let job = r.poll_eap_job().expect("second job");
    r.handle_eap_verdict(
        now,
        job.verdict(EapOutcome::Challenge {
            eap_message: c,
            state: None,
        }),
    );
    r.poll_transmit().expect("challenge");
    let bytes = request(&mut a, exchange::IKE_AUTH, &[eap(vec![2, 3, 0, 6, 26, 1])]);
    let refused = send(&mut r, &a, now, &bytes);
    assert!(crate::message::find_notify(&refused, notify::AUTHENTICATION_FAILED).is_some());
    assert!(r.poll_eap_job().is_none());
    assert_eq!(r.eap_in_flight(), 0);
    // An unreachable server refuses under `eap`.
    let mut d = lab.intranet(now);
    let (_, job) = up_to_identity(&mut r, &mut d, now);
    events(&mut r);
    r.handle_eap_verdict(now, job.verdict(EapOutcome::Unreachable));
    assert!(events(&mut r).iter().any(|e| matches!(
        e,
        Event::Refused {
            reason: Refusal::Eap,
            ..
        }
    )));
}

/// Without EAP configured, a request without AUTH is refused as before.
#[test]
fn without_eap_a_request_without_auth_is_refused() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut i = lab.intranet(now);
    init(&mut r, &mut i, now);
    let bytes = first_request(&mut i);
    let refused = send(&mut r, &i, now, &bytes);
    assert!(crate::message::find_notify(&refused, notify::INVALID_SYNTAX).is_some());
    assert!(r.poll_eap_job().is_none());
}

/// Accepts `job` with `authorization` and sends the client's AUTH keyed by the MSK; the last
/// response.
fn accept_with(
    r: &mut Responder,
    i: &mut Initiator,
    now: Instant,
    job: EapJob,
    authorization: Authorization,
) -> Vec<Payload> {
    r.handle_eap_verdict(
        now,
        job.verdict(EapOutcome::Accept {
            eap_message: Vec::new(),
            msk: MSK.to_vec(),
            authorization,
        }),
    );
    r.poll_transmit().expect("EAP-Success");
    let auth = msk_auth(i, &idi());
    let bytes = request(
        i,
        exchange::IKE_AUTH,
        &[Payload::Auth {
            method: 2,
            data: auth,
        }],
    );
    send(r, i, now, &bytes)
}

/// The Access-Accept's Framed-IPv6-Address is the client's inner address, its Filter-Id and
/// Class go out with the IKE SA, status shows the method, user and Filter-Id, and its
/// Session-Timeout ends the IKE SA with a Delete, counted as `session_timeout`.
#[test]
fn access_accept_authorizes_address_timeout_filter_and_class() {
    let now = Instant::now();
    let (lab, mut r) = eap_lab(now, |_| {});
    let mut i = lab.intranet(now);
    let (_, job) = up_to_identity(&mut r, &mut i, now);
    let framed: std::net::Ipv6Addr = "fd00:c1::177".parse().expect("addr");
    let last = accept_with(
        &mut r,
        &mut i,
        now,
        job,
        Authorization {
            framed_ipv6: Some(framed),
            session_timeout: Some(8),
            filter_id: Some("contractors".into()),
            class: vec![b"grp-a".to_vec(), b"grp-b".to_vec()],
            ..Authorization::default()
        },
    );
    let cp = last
        .iter()
        .find_map(|p| match p {
            Payload::Cp(c) => Some(c.clone()),
            _ => None,
        })
        .expect("CFG_REPLY");
    assert!(
        cp.attributes
            .iter()
            .any(|a| a.kind == crate::message::cfg::INTERNAL_IP6_ADDRESS
                && a.value.starts_with(&framed.octets())),
        "{cp:?}"
    );
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::IkeSaUp { filter_id: Some(f), class, radius_user: Some(u), .. }
            if f == "contractors" && class == &[b"grp-a".to_vec(), b"grp-b".to_vec()] && u == "alice")),
        "{ev:?}"
    );
    let sas = r.ike_sas(now);
    assert_eq!(sas.len(), 1);
    assert_eq!(sas[0].inner, Some(IpAddr::V6(framed)));
    assert_eq!(sas[0].auth_method, Some("eap"));
    assert_eq!(sas[0].radius_user.as_deref(), Some("alice"));
    assert_eq!(sas[0].filter_id.as_deref(), Some("contractors"));
    assert_eq!(r.pool.leased(), 1);
    // Before the timeout nothing ends; after it the client hears a Delete.
    r.handle_timeout(now + Duration::from_secs(7));
    assert_eq!(r.established(), 1);
    r.handle_timeout(now + Duration::from_secs(9));
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::IkeSaEnded {
                reason: EndReason::SessionTimeout,
                ..
            }
        )),
        "{ev:?}"
    );
    let t = r.poll_transmit().expect("a Delete to the client");
    assert!(
        open_response(&i, &t)
            .iter()
            .any(|p| matches!(p, Payload::Delete(_))),
    );
}

/// A framed address outside `ipsec.pool6`, or held by another identity, refuses the
/// IKE_AUTH under `framed_address`; nothing stays held.
#[test]
fn a_framed_address_the_pool_cannot_give_refuses_the_ike_auth() {
    let now = Instant::now();
    let (lab, mut r) = eap_lab(now, |_| {});
    let mut i = lab.intranet(now);
    let (_, job) = up_to_identity(&mut r, &mut i, now);
    let last = accept_with(
        &mut r,
        &mut i,
        now,
        job,
        Authorization {
            framed_ipv6: Some("fd00:c2::5".parse().expect("addr")),
            ..Authorization::default()
        },
    );
    assert!(crate::message::find_notify(&last, notify::AUTHENTICATION_FAILED).is_some());
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::AuthRefused { reason: Refusal::FramedAddress, identity: Some(id), .. } if id == "eap:alice")),
        "{ev:?}"
    );
    assert_eq!(Refusal::FramedAddress.label(), "framed_address");
    assert_eq!((r.ike_sas(now).len(), r.pool.leased()), (0, 0));

    // The address held by another identity.
    let bob = crate::auth::IdentityKey::new(b"eap", b"bob");
    let held: std::net::Ipv6Addr = "fd00:c1::150".parse().expect("addr");
    r.pool.claim(&bob, held).expect("free");
    let mut i = lab.intranet(now);
    let (_, job) = up_to_identity(&mut r, &mut i, now);
    let prefix = Authorization {
        framed_ipv6_prefix: Some(("fd00:c1::150".parse().expect("addr"), 128)),
        ..Authorization::default()
    };
    assert_eq!(prefix.inner6(), Some(held));
    let last = accept_with(&mut r, &mut i, now, job, prefix);
    assert!(crate::message::find_notify(&last, notify::AUTHENTICATION_FAILED).is_some());
    assert_eq!(r.pool.leased(), 1, "bob's only");
}

/// The EAP identity of an RFC 4739 second round's IDi.
fn user_idi() -> Identification {
    Identification {
        kind: 3,
        data: b"alice@gate64.lab".to_vec(),
    }
}

/// RFC 4739 with EAP second: the initiator's machine-certificate round (with
/// ANOTHER_AUTH_FOLLOWS) and its answer, then a hand-built second round of IDi without AUTH.
/// Returns the first round's answer and the second's.
fn up_to_second_round(
    r: &mut Responder,
    i: &mut Initiator,
    now: Instant,
) -> (Vec<Payload>, Vec<Payload>) {
    i.start(now);
    let (local, remote, bytes) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, remote, local, &bytes);
    let t = r.poll_transmit().expect("IKE_SA_INIT response");
    i.handle(now, &t.bytes);
    let (local, remote, bytes) = i.poll_transmit().expect("first IKE_AUTH");
    r.handle(now, remote, local, &bytes);
    let t = r.poll_transmit().expect("first IKE_AUTH response");
    let first = open_response(i, &t);
    i.handle(now, &t.bytes);
    // The initiator's own (certificate) second round is dropped for an EAP one.
    while i.poll_transmit().is_some() {}
    i.next_id = 2;
    let bytes = request(i, exchange::IKE_AUTH, &[Payload::IdI(user_idi())]);
    let second = send(r, i, now, &bytes);
    (first, second)
}

/// [`up_to_second_round`], then the client's EAP identity, up to the first job.
fn up_to_second_round_job(
    r: &mut Responder,
    i: &mut Initiator,
    now: Instant,
) -> (Vec<Payload>, Vec<Payload>, EapJob) {
    let (first, second) = up_to_second_round(r, i, now);
    let bytes = request(
        i,
        exchange::IKE_AUTH,
        &[eap(b"\x02\x01\x00\x0a\x01alice".to_vec())],
    );
    r.handle(now, addr(SERVER), addr(CLIENT), &bytes);
    let job = r.poll_eap_job().expect("a job for the relay");
    (first, second, job)
}

fn machine_then_eap(lab: &Lab, now: Instant) -> Initiator {
    let (chain, key) = leaf(&lab.clients_ca, "alice.gate64.lab");
    let user = Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("user");
    lab.intranet(now).with_second_auth(user)
}

/// RFC 4739 §3 with RFC 7296 §2.16: a machine certificate, then EAP. The second round is
/// answered with the EAP-Request/Identity alone, both AUTHs are keyed by the MSK over the
/// second round's IDi and the first round's IDr, the child SA of the first request comes
/// last, and the IKE SA carries both identities and the Access-Accept's authorization;
/// `intranet_second_auth = "required"` takes the EAP round as the user's.
#[test]
fn rfc4739_machine_certificate_then_eap() {
    let now = Instant::now();
    let lab = Lab::new();
    let mut r = lab.responder(now, |c| {
        c.eap = Some(EapPolicy::default());
        c.intranet_second_auth = SecondAuthPolicy::Required;
    });
    let mut i = machine_then_eap(&lab, now);
    let (first, second, job) = up_to_second_round_job(&mut r, &mut i, now);
    assert!(first.iter().any(|p| matches!(p, Payload::Auth { .. })));
    assert!(!first.iter().any(|p| matches!(p, Payload::Sa(_))));
    assert_eq!(
        second,
        vec![eap(vec![1, 1, 0, 5, 1])],
        "EAP-Request/Identity alone"
    );
    assert_eq!((job.user.as_str(), r.eap_in_flight()), ("alice", 1));
    let authorization = Authorization {
        filter_id: Some("staff".into()),
        session_timeout: Some(600),
        class: vec![b"c1".to_vec()],
        ..Authorization::default()
    };
    r.handle_eap_verdict(
        now,
        job.verdict(EapOutcome::Accept {
            eap_message: vec![3, 1, 0, 4],
            msk: MSK.to_vec(),
            authorization,
        }),
    );
    let t = r.poll_transmit().expect("EAP-Success");
    assert_eq!(eap_of(&open_response(&i, &t)), Some(vec![3, 1, 0, 4]));
    let auth = msk_auth(&i, &user_idi());
    let bytes = request(
        &mut i,
        exchange::IKE_AUTH,
        &[Payload::Auth {
            method: 2,
            data: auth,
        }],
    );
    let last = send(&mut r, &i, now, &bytes);
    assert!(
        last.contains(&Payload::Auth {
            method: 2,
            data: msk_auth_of_responder(&i, &first),
        }),
        "{last:?}"
    );
    assert!(last.iter().any(|p| matches!(p, Payload::Sa(_))));
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::IkeSaUp {
            identity,
            eap_user: Some(user),
            tunnel: Some(TunnelKind::Intranet),
            radius_user: Some(u),
            filter_id: Some(f),
            class,
            ..
        } if identity.contains("client1.gate64.lab") && user == "eap:alice" && u == "alice" && f == "staff" && class == &vec![b"c1".to_vec()])),
        "{ev:?}"
    );
    assert_eq!(child_ups(&ev).len(), 1);
    let sas = r.ike_sas(now);
    assert_eq!(sas.len(), 1);
    assert_eq!(sas[0].user_identity.as_deref(), Some("eap:alice"));
    assert_eq!(sas[0].auth_method, Some("certificate+eap"));
    assert_eq!(sas[0].radius_user.as_deref(), Some("alice"));
    assert_eq!(
        r.sas.values().next().and_then(|s| s.session_end),
        Some(now + Duration::from_secs(600))
    );
    assert_eq!(
        (r.eap_in_flight(), r.half_open(), r.established()),
        (0, 0, 1)
    );
}

/// Access-Reject in the second round refuses under `eap`, naming the EAP user; nothing of
/// the first round stays.
#[test]
fn rfc4739_eap_second_round_rejected_names_the_user() {
    let now = Instant::now();
    let (lab, mut r) = eap_lab(now, |_| {});
    let mut i = machine_then_eap(&lab, now);
    let (_, _, job) = up_to_second_round_job(&mut r, &mut i, now);
    events(&mut r);
    r.handle_eap_verdict(now, job.verdict(EapOutcome::Reject));
    let t = r.poll_transmit().expect("refusal");
    let payloads = open_response(&i, &t);
    assert!(crate::message::find_notify(&payloads, notify::AUTHENTICATION_FAILED).is_some());
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::AuthRefused { reason: Refusal::Eap, identity: Some(id), .. } if id == "eap:alice")),
        "{ev:?}"
    );
    assert!(child_ups(&ev).is_empty());
    assert_eq!(
        (r.ike_sas(now).len(), r.eap_in_flight(), r.half_open()),
        (0, 0, 0)
    );
}

/// A second-round EAP exchange counts against the EAP bounds as a first-round one: refused
/// under `eap_cap` while the source's only slot is taken, and its round trips are counted.
#[test]
fn rfc4739_eap_second_round_counts_against_the_bounds() {
    let now = Instant::now();
    let (lab, mut r) = eap_lab(now, |p| {
        p.max_per_source = 1;
        p.max_rounds = 1;
    });
    let mut a = lab.intranet(now);
    let (_, job_a) = up_to_identity(&mut r, &mut a, now);
    let mut b = machine_then_eap(&lab, now);
    events(&mut r);
    let (_, refused) = up_to_second_round(&mut r, &mut b, now);
    assert!(crate::message::find_notify(&refused, notify::AUTHENTICATION_FAILED).is_some());
    assert!(events(&mut r).iter().any(|e| matches!(
        e,
        Event::Refused {
            reason: Refusal::EapCap,
            ..
        }
    )));
    assert_eq!((r.eap_in_flight(), r.ike_sas(now).len()), (1, 1));
    // With the slot free again, the second round runs; its second EAP message is one round
    // trip too many.
    r.handle_eap_verdict(now, job_a.verdict(EapOutcome::Reject));
    r.poll_transmit().expect("the first exchange's refusal");
    assert_eq!(r.eap_in_flight(), 0);
    let mut c = machine_then_eap(&lab, now);
    let (_, _, job) = up_to_second_round_job(&mut r, &mut c, now);
    assert_eq!(r.eap_in_flight(), 1);
    r.handle_eap_verdict(
        now,
        job.verdict(EapOutcome::Challenge {
            eap_message: vec![1, 2, 0, 6, 26, 1],
            state: None,
        }),
    );
    r.poll_transmit().expect("challenge");
    events(&mut r);
    let bytes = request(&mut c, exchange::IKE_AUTH, &[eap(vec![2, 2, 0, 6, 26, 1])]);
    let refused = send(&mut r, &c, now, &bytes);
    assert!(crate::message::find_notify(&refused, notify::AUTHENTICATION_FAILED).is_some());
    assert!(events(&mut r).iter().any(|e| matches!(
        e,
        Event::Refused {
            reason: Refusal::EapCap,
            ..
        }
    )));
    assert_eq!((r.eap_in_flight(), r.poll_eap_job().is_none()), (0, true));
}
