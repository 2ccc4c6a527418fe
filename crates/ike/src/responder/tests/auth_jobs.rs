//! IKE_AUTH verification as jobs (`offload_auth`): the responder keeps serving while a job is
//! out, finishes the round on its verdict, and starts again from a retransmission after a
//! job is shed.

use super::*;

fn offloading(lab: &Lab, now: Instant) -> Responder {
    lab.responder(now, |c| c.offload_auth = true)
}

fn intranet(lab: &Lab, now: Instant, ca: &Ca) -> Initiator {
    lab.initiator(now, TunnelKind::Intranet, "fd00:c0::/64", ca, Group::Ecp256)
}

/// IKE_SA_INIT, then the initiator's IKE_AUTH handed to the responder; returns its bytes.
fn up_to_auth(r: &mut Responder, i: &mut Initiator, now: Instant) -> Vec<u8> {
    i.start(now);
    let (l, rem, init) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, rem, l, &init);
    i.handle(now, &r.poll_transmit().expect("IKE_SA_INIT response").bytes);
    let (l, rem, auth) = i.poll_transmit().expect("IKE_AUTH");
    r.handle(now, rem, l, &auth);
    auth
}

/// Moves datagrams and runs every job inline until both sides are quiet.
fn exchange_with_jobs(r: &mut Responder, i: &mut Initiator, now: Instant) {
    loop {
        exchange_all(r, i, now);
        let mut ran = false;
        while let Some(job) = r.poll_auth_job() {
            r.handle_auth_verdict(now, job.run());
            ran = true;
        }
        if !ran {
            return;
        }
    }
}

#[test]
fn offloaded_ike_auth_completes_on_its_verdict_and_ignores_copies_meanwhile() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = offloading(&lab, now);
    let mut i = intranet(&lab, now, &lab.clients_ca);
    let auth = up_to_auth(&mut r, &mut i, now);
    assert_eq!(r.poll_transmit(), None, "no answer before the verdict");
    let job = r.poll_auth_job().expect("a job");
    assert_eq!(job.peer(), addr(CLIENT));
    assert_eq!(job.source_key(), SourceKey::of(addr(CLIENT).ip()));
    // A copy while the job is out: nothing, and no second job.
    r.handle(now, addr(SERVER), addr(CLIENT), &auth);
    assert!(r.poll_transmit().is_none() && r.poll_auth_job().is_none());
    // Other clients are served meanwhile.
    let mut other = intranet(&lab, now, &lab.clients_ca);
    other.start(now);
    let (l, _, init) = other.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, addr(SERVER), l, &init);
    assert!(r.poll_transmit().is_some(), "IKE_SA_INIT answered");
    assert_eq!(r.half_open(), 2);
    r.handle_auth_verdict(now, job.run());
    let response = r.poll_transmit().expect("IKE_AUTH response");
    i.handle(now, &response.bytes);
    established(&mut i);
    assert_eq!((r.established(), r.half_open()), (1, 1));
}

#[test]
fn a_shed_job_is_started_again_by_the_retransmission() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = offloading(&lab, now);
    let mut i = intranet(&lab, now, &lab.clients_ca);
    let auth = up_to_auth(&mut r, &mut i, now);
    let job = r.poll_auth_job().expect("a job");
    r.handle_auth_shed(job);
    assert!(r.poll_transmit().is_none());
    r.handle(now, addr(SERVER), addr(CLIENT), &auth);
    let job = r.poll_auth_job().expect("the retransmission's job");
    r.handle_auth_verdict(now, job.run());
    i.handle(now, &r.poll_transmit().expect("response").bytes);
    established(&mut i);
}

/// A job's deadline is its half-open IKE SA's; once the IKE SA goes (here: it timed out),
/// the job says it is abandoned even before its deadline as the driver's clock sees it; a
/// skipped verdict finishes nothing.
#[test]
fn a_job_follows_its_ike_sas_deadline_and_knows_when_it_is_gone() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = offloading(&lab, now);
    let timeout = r.config.half_open_timeout;
    let mut i = intranet(&lab, now, &lab.clients_ca);
    let auth = up_to_auth(&mut r, &mut i, now);
    let job = r.poll_auth_job().expect("a job");
    let watch = job.watch();
    assert_eq!(watch.deadline(), now + timeout);
    assert!(!watch.is_abandoned(now));
    assert!(!watch.is_abandoned(now + timeout - Duration::from_millis(1)));
    assert!(watch.is_abandoned(now + timeout));

    // Skipped while its IKE SA waits: nothing is answered, and the IKE SA still waits.
    r.handle_auth_verdict(now, job.skip());
    assert_eq!(r.poll_transmit(), None);
    assert_eq!((r.established(), r.half_open()), (0, 1));
    r.handle(now, addr(SERVER), addr(CLIENT), &auth);
    assert!(
        r.poll_auth_job().is_none(),
        "a copy while it waits starts nothing"
    );

    // A second client's job; its IKE SA times out before the job runs.
    let later = now + Duration::from_secs(1);
    let mut other = intranet(&lab, later, &lab.clients_ca);
    up_to_auth(&mut r, &mut other, later);
    let job = r.poll_auth_job().expect("the second client's job");
    let watch = job.watch();
    assert_eq!(watch.deadline(), later + timeout);
    assert!(!watch.is_abandoned(later));
    r.handle_timeout(later + timeout);
    assert_eq!(r.half_open(), 0, "both IKE SAs timed out");
    assert!(watch.is_abandoned(later), "gone, whatever the clock says");
    // Its verdict, had it run, finds nothing to finish.
    r.handle_auth_verdict(later, job.run());
    assert_eq!(r.poll_transmit(), None);
    assert_eq!(r.established(), 0);
}

/// Once its verdict was handled, a job's watch says abandoned: nothing waits for it any more.
#[test]
fn a_jobs_watch_is_abandoned_once_its_verdict_was_handled() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = offloading(&lab, now);
    let mut i = intranet(&lab, now, &lab.clients_ca);
    up_to_auth(&mut r, &mut i, now);
    let job = r.poll_auth_job().expect("a job");
    let watch = job.watch();
    r.handle_auth_verdict(now, job.run());
    assert!(r.poll_transmit().is_some(), "IKE_AUTH answered");
    assert_eq!(r.established(), 1);
    assert!(watch.is_abandoned(now));
}

#[test]
fn an_offloaded_refusal_is_authentication_failed() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = offloading(&lab, now);
    let rogue = ca("rogue CA");
    let mut i = intranet(&lab, now, &rogue);
    i.start(now);
    exchange_with_jobs(&mut r, &mut i, now);
    assert!(matches!(
        i.poll_event(),
        Some(InitiatorEvent::Failed(
            crate::initiator::InitiatorError::Notify(notify::AUTHENTICATION_FAILED)
        ))
    ));
    assert_eq!((r.established(), r.half_open()), (0, 0));
}

/// RFC 4739: both rounds offloaded; a verdict for an SA that has gone is ignored.
#[test]
fn rfc4739_both_rounds_offloaded() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = offloading(&lab, now);
    let (chain, key) = leaf(&lab.clients_ca, "alice.gate64.lab");
    let user = Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("user");
    let mut i = intranet(&lab, now, &lab.clients_ca).with_second_auth(user);
    i.start(now);
    exchange_with_jobs(&mut r, &mut i, now);
    assert!(i.second_auth_negotiated());
    established(&mut i);
    assert_eq!(
        r.ike_sas(now)[0].user_identity.as_deref(),
        Some("CN=alice.gate64.lab")
    );
    // A job whose SA timed out meanwhile.
    let mut late = intranet(&lab, now, &lab.clients_ca);
    up_to_auth(&mut r, &mut late, now);
    let job = r.poll_auth_job().expect("a job");
    r.handle_timeout(now + Duration::from_secs(31));
    r.handle_auth_verdict(now + Duration::from_secs(31), job.run());
    assert_eq!(r.half_open(), 0);
}

/// RFC 4739: a shed second-round job puts the first round's state back, so the client's
/// retransmission of the second round is verified and completes.
#[test]
fn rfc4739_a_shed_second_round_is_retried_from_the_retransmission() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = offloading(&lab, now);
    let (chain, key) = leaf(&lab.clients_ca, "alice.gate64.lab");
    let user = Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("user");
    let mut i = intranet(&lab, now, &lab.clients_ca).with_second_auth(user);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    let first = r.poll_auth_job().expect("first round");
    r.handle_auth_verdict(now, first.run());
    exchange_all(&mut r, &mut i, now);
    let second = r.poll_auth_job().expect("second round");
    r.handle_auth_shed(second);
    let later = now + Duration::from_secs(3);
    i.handle_timeout(later);
    exchange_with_jobs(&mut r, &mut i, later);
    established(&mut i);
    assert_eq!(
        r.ike_sas(later)[0].user_identity.as_deref(),
        Some("CN=alice.gate64.lab")
    );
}

/// An OCSP answer that the certificate is revoked (applied to the verdict by the driver's
/// thread) refuses the new IKE_AUTH and ends the IKE SA the same certificate already holds
/// (the client's other tunnel), with a Delete.
#[test]
fn an_ocsp_revoked_verdict_ends_the_certificates_established_ike_sas() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = offloading(&lab, now);
    let (chain, key) = leaf(&lab.clients_ca, "client1.gate64.lab");
    let mut infra = lab.initiator_as(
        now,
        TunnelKind::Infrastructure,
        "fd00:c0::53/128",
        (&chain, &key),
        Group::Ecp256,
    );
    infra.start(now);
    exchange_with_jobs(&mut r, &mut infra, now);
    established(&mut infra);
    let _ = events(&mut r);
    let mut intranet = lab.initiator_as(
        now,
        TunnelKind::Intranet,
        "fd00:c0::/64",
        (&chain, &key),
        Group::Ecp256,
    );
    up_to_auth(&mut r, &mut intranet, now);
    let mut verdict = r.poll_auth_job().expect("a job").run();
    assert!(verdict.ocsp_query().is_some(), "the chain verified");
    verdict.refuse(crate::auth::AuthError::Revoked);
    r.handle_auth_verdict(now, verdict);
    let ev = events(&mut r);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(
                e,
                Event::IkeSaEnded {
                    reason: EndReason::Revoked,
                    ..
                }
            ))
            .count(),
        1,
        "{ev:?}"
    );
    assert!(ev.iter().any(|e| matches!(
        e,
        Event::Negotiation {
            result: Err(Refusal::Revoked),
            ..
        }
    )));
    assert_eq!(r.established(), 0);
}
