//! Our AUTH signed inside the IKE_AUTH verification job (`offload_auth`): the responder (the
//! IKE task) signs nothing itself, the answer carries what the inline path's does, a client
//! that does not verify gets no signature made, and one request is signed once however many
//! copies of it arrive.

use super::*;
use crate::auth::signatures_on_this_thread;

fn intranet(lab: &Lab, now: Instant, ca: &Ca) -> Initiator {
    lab.initiator(now, TunnelKind::Intranet, "fd00:c0::/64", ca, Group::Ecp256)
}

/// IKE_SA_INIT both ways; returns the initiator's IKE_AUTH request, not yet handed over.
fn auth_request(r: &mut Responder, i: &mut Initiator, now: Instant) -> Vec<u8> {
    i.start(now);
    let (l, rem, init) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, rem, l, &init);
    i.handle(now, &r.poll_transmit().expect("IKE_SA_INIT response").bytes);
    let (_, _, auth) = i.poll_transmit().expect("IKE_AUTH");
    auth
}

/// How many signatures `f` made on this thread, and its result.
fn signing<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = signatures_on_this_thread();
    let out = f();
    (signatures_on_this_thread() - before, out)
}

#[test]
fn the_responder_signs_nothing_itself_when_a_job_signs() {
    let lab = Lab::new();
    let now = Instant::now();
    // Inline: the responder signs once, on its own thread (what the probe below counts).
    let mut inline = lab.responder(now, |_| {});
    let mut i = intranet(&lab, now, &lab.clients_ca);
    let auth = auth_request(&mut inline, &mut i, now);
    let (signed, response) = signing(|| {
        inline.handle(now, addr(SERVER), addr(CLIENT), &auth);
        inline.poll_transmit().expect("IKE_AUTH response")
    });
    assert_eq!(signed, 1, "the inline path signs on the responder's thread");
    i.handle(now, &response.bytes);
    established(&mut i);

    // Offloaded: the job, on another thread, signs; the responder's thread does not.
    let mut r = lab.responder(now, |c| c.offload_auth = true);
    let mut i = intranet(&lab, now, &lab.clients_ca);
    let auth = auth_request(&mut r, &mut i, now);
    let (signed, job) = signing(|| {
        r.handle(now, addr(SERVER), addr(CLIENT), &auth);
        r.poll_auth_job().expect("a job")
    });
    assert_eq!(
        signed, 0,
        "nothing signed before the client's AUTH verified"
    );
    let (on_worker, verdict) = std::thread::spawn(move || signing(|| job.run()))
        .join()
        .expect("worker");
    assert_eq!(on_worker, 1, "the job signs our AUTH");
    let (signed, response) = signing(|| {
        r.handle_auth_verdict(now, verdict);
        r.poll_transmit().expect("IKE_AUTH response")
    });
    assert_eq!(
        signed, 0,
        "the responder only builds and encrypts the answer"
    );
    // The client verifies our AUTH over its IKE SA's octets.
    i.handle(now, &response.bytes);
    established(&mut i);
    assert_eq!(r.established(), 1);
}

/// What the answer to a first IKE_AUTH says, minus what differs between two IKE SAs anyway
/// (AUTH data, SPIs, the inner address): each payload's kind in order, IDr, our certificates
/// and the AUTH method.
fn shape(payloads: &[Payload]) -> (Vec<u8>, Vec<Payload>, u8) {
    let kinds = payloads.iter().map(Payload::kind).collect();
    let ours = payloads
        .iter()
        .filter(|p| matches!(p, Payload::IdR(_) | Payload::Cert { .. }))
        .cloned()
        .collect();
    let method = payloads
        .iter()
        .find_map(|p| match p {
            Payload::Auth { method, .. } => Some(*method),
            _ => None,
        })
        .expect("AUTH");
    (kinds, ours, method)
}

#[test]
fn a_jobs_answer_carries_what_the_inline_answer_does() {
    let lab = Lab::new();
    let now = Instant::now();
    // One responder, so one certificate of ours: jobs on for the first client, off for the
    // second.
    let mut r = lab.responder(now, |_| {});
    let mut answer = |offload: bool| {
        r.set_offload_auth(offload);
        let mut i = intranet(&lab, now, &lab.clients_ca);
        let auth = auth_request(&mut r, &mut i, now);
        r.handle(now, addr(SERVER), addr(CLIENT), &auth);
        if let Some(job) = r.poll_auth_job() {
            r.handle_auth_verdict(now, job.run());
        }
        let response = r.poll_transmit().expect("IKE_AUTH response");
        let payloads = open_response(&i, &response);
        i.handle(now, &response.bytes);
        established(&mut i);
        payloads
    };
    let offloaded = answer(true);
    let inline = answer(false);
    assert_eq!(shape(&offloaded), shape(&inline));
    assert!(shape(&inline).1.len() >= 2, "IDr and our certificate");
}

#[test]
fn a_client_that_does_not_verify_gets_no_signature_made() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| c.offload_auth = true);
    let rogue = ca("rogue CA");
    let mut i = intranet(&lab, now, &rogue);
    let auth = auth_request(&mut r, &mut i, now);
    r.handle(now, addr(SERVER), addr(CLIENT), &auth);
    let job = r.poll_auth_job().expect("a job");
    let (signed, verdict) = signing(|| job.run());
    assert_eq!(signed, 0);
    let (signed, response) = signing(|| {
        r.handle_auth_verdict(now, verdict);
        r.poll_transmit().expect("the refusal")
    });
    assert_eq!(signed, 0);
    i.handle(now, &response.bytes);
    assert!(matches!(
        i.poll_event(),
        Some(InitiatorEvent::Failed(
            crate::initiator::InitiatorError::Notify(notify::AUTHENTICATION_FAILED)
        ))
    ));
}

/// Copies while the job is out start nothing; once answered, a copy gets the same bytes from
/// the response cache; a shed job signed nothing and the retransmission's job signs once.
#[test]
fn one_request_is_signed_once_whatever_its_copies() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| c.offload_auth = true);
    let mut i = intranet(&lab, now, &lab.clients_ca);
    let auth = auth_request(&mut r, &mut i, now);
    let (signed, ()) = signing(|| {
        r.handle(now, addr(SERVER), addr(CLIENT), &auth);
        let job = r.poll_auth_job().expect("a job");
        r.handle_auth_shed(job);
    });
    assert_eq!(signed, 0, "a shed job signed nothing");
    let (signed, response) = signing(|| {
        r.handle(now, addr(SERVER), addr(CLIENT), &auth);
        let job = r.poll_auth_job().expect("the retransmission's job");
        for _ in 0..3 {
            r.handle(now, addr(SERVER), addr(CLIENT), &auth);
            assert!(
                r.poll_auth_job().is_none(),
                "a copy in flight starts no job"
            );
            assert!(r.poll_transmit().is_none(), "nor is it answered yet");
        }
        let (in_job, verdict) = signing(|| job.run());
        assert_eq!(in_job, 1, "the job signs");
        r.handle_auth_verdict(now, verdict);
        let response = r.poll_transmit().expect("IKE_AUTH response");
        assert!(r.poll_transmit().is_none(), "answered once");
        r.handle(now, addr(SERVER), addr(CLIENT), &auth);
        assert!(r.poll_auth_job().is_none());
        let again = r.poll_transmit().expect("the cached answer");
        assert_eq!(again.bytes, response.bytes);
        response
    });
    assert_eq!(signed, 1, "one signature in all, the job's");
    i.handle(now, &response.bytes);
    established(&mut i);
}
