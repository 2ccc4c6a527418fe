//! `authorize_certificates = "radius"`: a certificate client, once verified, waits for the
//! driver's RADIUS authorization, given here as verdicts.

use super::*;

fn authz_lab(now: Instant, edit: impl FnOnce(&mut EapPolicy)) -> (Lab, Responder) {
    let lab = Lab::new();
    let mut policy = EapPolicy::default();
    edit(&mut policy);
    let r = lab.responder(now, |c| {
        c.eap = Some(policy);
        c.authorize_certificates = true;
    });
    (lab, r)
}

/// Runs the exchange up to the authorization job: nothing answered the IKE_AUTH yet.
fn up_to_job(r: &mut Responder, i: &mut Initiator, now: Instant) -> AuthzJob {
    let before = r.established();
    i.start(now);
    let sent = exchange_all(r, i, now);
    assert_eq!(
        sent.len(),
        1,
        "only the IKE_SA_INIT response before the verdict"
    );
    assert_eq!(r.established(), before);
    let job = r.poll_authz_job().expect("an authorization job");
    assert!(r.poll_authz_job().is_none());
    job
}

fn refused_radius(ev: &[Event]) -> bool {
    ev.iter().any(|e| {
        matches!(
            e,
            Event::Refused {
                reason: Refusal::Radius,
                ..
            }
        )
    }) && ev.iter().any(|e| {
        matches!(e, Event::AuthRefused { reason: Refusal::Radius, identity: Some(id), .. }
            if id.contains("client1.gate64.lab"))
    })
}

fn failed_authentication(i: &mut Initiator) -> bool {
    matches!(
        i.poll_event(),
        Some(InitiatorEvent::Failed(
            crate::initiator::InitiatorError::Notify(notify::AUTHENTICATION_FAILED)
        ))
    )
}

/// An Access-Accept grants what it carries as EAP's does: the Filter-Id and Class go out with
/// the IKE SA, the framed address is the inner one, status shows method, user and Filter-Id.
#[test]
fn access_accept_grants_the_certificate_client() {
    let now = Instant::now();
    let (lab, mut r) = authz_lab(now, |_| {});
    let mut i = lab.intranet(now);
    let job = up_to_job(&mut r, &mut i, now);
    assert!(job.user.contains("client1.gate64.lab"), "{}", job.user);
    assert_eq!(job.peer, addr(CLIENT));
    assert_eq!(job.deadline, now + EapPolicy::default().timeout);
    let framed: std::net::Ipv6Addr = "fd00:c1::177".parse().expect("addr");
    let user = job.user.clone();
    r.handle_authz_verdict(
        now,
        job.verdict(AuthzOutcome::Accept(Authorization {
            framed_ipv6: Some(framed),
            session_timeout: Some(60),
            filter_id: Some("contractors".into()),
            class: vec![b"grp-a".to_vec()],
            ..Authorization::default()
        })),
    );
    exchange_all(&mut r, &mut i, now);
    let (inner, _) = established(&mut i);
    assert_eq!(inner, Some(IpAddr::V6(framed)));
    let ev = events(&mut r);
    assert!(
        ev.iter().any(
            |e| matches!(e, Event::IkeSaUp { filter_id: Some(f), class, radius_user: Some(u), eap_user: None, .. }
            if f == "contractors" && class == &[b"grp-a".to_vec()] && *u == user)
        ),
        "{ev:?}"
    );
    let sas = r.ike_sas(now);
    assert_eq!(sas.len(), 1);
    assert_eq!(sas[0].auth_method, Some("certificate"));
    assert_eq!(sas[0].radius_user.as_deref(), Some(user.as_str()));
    assert_eq!(sas[0].filter_id.as_deref(), Some("contractors"));
    // Session-Timeout applies as for EAP.
    r.handle_timeout(now + Duration::from_secs(61));
    assert!(events(&mut r).iter().any(|e| matches!(
        e,
        Event::IkeSaEnded {
            reason: EndReason::SessionTimeout,
            ..
        }
    )));
}

/// An Access-Reject refuses the IKE_AUTH with AUTHENTICATION_FAILED under `radius`, naming the
/// identity; nothing is left behind.
#[test]
fn access_reject_refuses_under_radius() {
    let now = Instant::now();
    let (lab, mut r) = authz_lab(now, |_| {});
    let mut i = lab.intranet(now);
    let job = up_to_job(&mut r, &mut i, now);
    r.handle_authz_verdict(now, job.verdict(AuthzOutcome::Reject));
    exchange_all(&mut r, &mut i, now);
    assert!(failed_authentication(&mut i));
    let ev = events(&mut r);
    assert!(refused_radius(&ev), "{ev:?}");
    assert!(child_ups(&ev).is_empty());
    assert_eq!(
        (r.ike_sas(now).len(), r.half_open(), r.pool.leased()),
        (0, 0, 0)
    );
}

/// No server answering, or the deadline passing before any verdict (the client's retransmit
/// finds it), refuses under `radius`; a late verdict finds nothing.
#[test]
fn no_answer_in_time_refuses_under_radius() {
    let now = Instant::now();
    let (lab, mut r) = authz_lab(now, |p| p.timeout = Duration::from_secs(5));
    let mut i = lab.intranet(now);
    let job = up_to_job(&mut r, &mut i, now);
    r.handle_authz_verdict(now, job.verdict(AuthzOutcome::Unreachable));
    exchange_all(&mut r, &mut i, now);
    assert!(failed_authentication(&mut i));
    assert!(refused_radius(&events(&mut r)));

    let mut i = lab.intranet(now);
    let job = up_to_job(&mut r, &mut i, now);
    // The initiator retransmits its IKE_AUTH: before the deadline it is ignored.
    let later = now + Duration::from_secs(2);
    i.handle_timeout(later);
    exchange_all(&mut r, &mut i, later);
    assert_eq!(r.ike_sas(now).len(), 1);
    let late = now + Duration::from_secs(6);
    i.handle_timeout(late);
    exchange_all(&mut r, &mut i, late);
    assert!(failed_authentication(&mut i));
    assert!(refused_radius(&events(&mut r)));
    r.handle_authz_verdict(
        late,
        job.verdict(AuthzOutcome::Accept(Authorization::default())),
    );
    assert_eq!((r.ike_sas(late).len(), r.pool.leased()), (0, 0));
}

/// Authorizations in flight are bounded per source (and in all): one more is refused under
/// `radius`; a verdict frees its slot.
#[test]
fn authorizations_in_flight_are_bounded() {
    let now = Instant::now();
    let (lab, mut r) = authz_lab(now, |p| p.max_per_source = 1);
    let mut first = lab.intranet(now);
    let job = up_to_job(&mut r, &mut first, now);
    let mut second = lab.infrastructure(now);
    second.start(now);
    exchange_all(&mut r, &mut second, now);
    assert!(failed_authentication(&mut second));
    assert!(r.poll_authz_job().is_none());
    assert!(refused_radius(&events(&mut r)));
    r.handle_authz_verdict(
        now,
        job.verdict(AuthzOutcome::Accept(Authorization::default())),
    );
    exchange_all(&mut r, &mut first, now);
    established(&mut first);
    let mut third = lab.infrastructure(now);
    let job = up_to_job(&mut r, &mut third, now);
    r.handle_authz_verdict(
        now,
        job.verdict(AuthzOutcome::Accept(Authorization::default())),
    );
    exchange_all(&mut r, &mut third, now);
    established(&mut third);
}

/// RFC 4739: the user certificate of the second round is what RADIUS authorizes, once.
#[test]
fn the_second_round_user_is_authorized() {
    let now = Instant::now();
    let (lab, mut r) = authz_lab(now, |_| {});
    let (chain, key) = leaf(&lab.clients_ca, "alice.gate64.lab");
    let user = Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("user");
    let mut i = lab.intranet(now).with_second_auth(user);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    let job = r.poll_authz_job().expect("one job, after the second round");
    assert!(r.poll_authz_job().is_none());
    assert!(job.user.contains("alice.gate64.lab"), "{}", job.user);
    let filter = Authorization {
        filter_id: Some("staff".into()),
        ..Authorization::default()
    };
    r.handle_authz_verdict(now, job.verdict(AuthzOutcome::Accept(filter)));
    exchange_all(&mut r, &mut i, now);
    established(&mut i);
    let sas = r.ike_sas(now);
    assert!(
        sas[0]
            .radius_user
            .as_deref()
            .is_some_and(|u| u.contains("alice.gate64.lab"))
    );
    assert_eq!(sas[0].filter_id.as_deref(), Some("staff"));
}

/// Off (the default): no job, the client is established at once.
#[test]
fn off_asks_nothing() {
    let now = Instant::now();
    let lab = Lab::new();
    let mut r = lab.responder(now, |c| c.eap = Some(EapPolicy::default()));
    let mut i = lab.intranet(now);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    established(&mut i);
    assert!(r.poll_authz_job().is_none());
    assert_eq!(r.ike_sas(now)[0].radius_user, None);
}
