//! IKE_SA_INIT's key exchange as jobs (`offload_init`): the request is counted half-open and
//! answered on its verdict, copies meanwhile start nothing, a shed job gives its charge back,
//! and the cheap limits (half-open per source, cookies, the IKE SA cap) apply before a job is
//! queued.

use super::*;

fn offloading(lab: &Lab, now: Instant, edit: impl FnOnce(&mut ResponderConfig)) -> Responder {
    lab.responder(now, |c| {
        c.offload_init = true;
        c.offload_auth = true;
        edit(c);
    })
}

fn ecp256_init(spi_i: u64, ke_len: usize) -> Vec<u8> {
    let mut t = gcm_prf();
    t.push(Transform::new(transform::KE, 19));
    raw_init(spi_i, t, 19, ke_len)
}

/// Moves datagrams and runs every job (key exchanges and verifications) inline until both
/// sides are quiet.
fn exchange_with_jobs(r: &mut Responder, i: &mut Initiator, now: Instant) {
    loop {
        exchange_all(r, i, now);
        let mut ran = false;
        while let Some(job) = r.poll_init_job() {
            r.handle_init_verdict(now, job.run());
            ran = true;
        }
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
fn an_offloaded_ike_sa_init_is_answered_on_its_verdict_and_copies_start_nothing() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = offloading(&lab, now, |_| {});
    let mut i = lab.intranet(now);
    i.start(now);
    let (l, rem, init) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, rem, l, &init);
    assert_eq!(r.poll_transmit(), None, "no answer before the verdict");
    assert_eq!(
        (r.half_open(), r.established()),
        (1, 0),
        "counted half-open"
    );
    let job = r.poll_init_job().expect("a job");
    assert_eq!(job.peer(), addr(CLIENT));
    assert_eq!(job.source_key(), SourceKey::of(addr(CLIENT).ip()));
    r.handle(now, rem, l, &init);
    assert!(
        r.poll_transmit().is_none() && r.poll_init_job().is_none(),
        "a copy while the job is out: nothing"
    );
    r.handle_init_verdict(now, job.run());
    let response = r.poll_transmit().expect("IKE_SA_INIT response");
    assert_eq!((r.half_open(), r.established()), (1, 0));
    // The copy now gets the same response (RFC 7296 §2.1).
    r.handle(now, rem, l, &init);
    assert_eq!(r.poll_transmit().expect("again").bytes, response.bytes);
    i.handle(now, &response.bytes);
    exchange_with_jobs(&mut r, &mut i, now);
    established(&mut i);
    assert_eq!((r.half_open(), r.established()), (0, 1));
}

#[test]
fn a_shed_init_job_gives_its_charge_back_and_the_retransmission_starts_again() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = offloading(&lab, now, |_| {});
    let mut i = lab.intranet(now);
    i.start(now);
    let (l, rem, init) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, rem, l, &init);
    let job = r.poll_init_job().expect("a job");
    r.handle_init_shed(job);
    assert_eq!((r.half_open(), r.ike_sas(now).len()), (0, 0));
    assert!(r.poll_transmit().is_none());
    r.handle(now, rem, l, &init);
    let job = r.poll_init_job().expect("the retransmission's job");
    r.handle_init_verdict(now, job.run());
    i.handle(now, &r.poll_transmit().expect("response").bytes);
    exchange_with_jobs(&mut r, &mut i, now);
    established(&mut i);
}

#[test]
fn a_ke_payload_that_does_not_agree_is_refused_on_its_verdict() {
    let now = Instant::now();
    let mut r = offloading(&Lab::new(), now, |_| {});
    r.handle(now, addr(SERVER), addr(CLIENT), &ecp256_init(7, 65));
    let job = r.poll_init_job().expect("a job");
    r.handle_init_verdict(now, job.run());
    assert_eq!(
        only_notify(&r.poll_transmit().expect("reply")).0,
        notify::INVALID_SYNTAX
    );
    assert!(events(&mut r).contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::Malformed
    }));
    assert_eq!((r.half_open(), r.ike_sas(now).len()), (0, 0));
}

/// The per-source half-open cap counts requests whose jobs are out, so one source cannot
/// queue more key exchanges than it may hold half-open IKE SAs.
#[test]
fn the_half_open_cap_per_source_applies_before_a_job_is_queued() {
    let now = Instant::now();
    let mut r = offloading(&Lab::new(), now, |c| c.max_half_open_per_source = 2);
    for spi in 1..=3 {
        r.handle(now, addr(SERVER), addr(CLIENT), &ecp256_init(spi, 64));
    }
    let jobs: Vec<InitJob> = std::iter::from_fn(|| r.poll_init_job()).collect();
    assert_eq!(jobs.len(), 2);
    assert!(events(&mut r).contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::HalfOpenCap
    }));
    for job in jobs {
        r.handle_init_verdict(now, job.run());
    }
    assert_eq!(std::iter::from_fn(|| r.poll_transmit()).count(), 2);
    assert_eq!(r.half_open(), 2);
}

/// Above the threshold a request without a cookie gets one, even when the half-open ones are
/// still waiting for their key exchange; the IKE SA cap counts them too.
#[test]
fn cookies_and_the_ike_sa_cap_count_requests_whose_jobs_are_out() {
    let now = Instant::now();
    let mut r = offloading(&Lab::new(), now, |c| c.half_open_cookie_threshold = 1);
    r.handle(now, addr(SERVER), addr(CLIENT), &ecp256_init(1, 64));
    assert!(r.poll_init_job().is_some());
    r.handle(now, addr(SERVER), addr(CLIENT), &ecp256_init(2, 64));
    assert_eq!(
        only_notify(&r.poll_transmit().expect("reply")).0,
        notify::COOKIE
    );
    assert!(r.poll_init_job().is_none());

    let mut r = offloading(&Lab::new(), now, |c| c.max_ike_sas = 1);
    r.handle(now, addr(SERVER), addr(CLIENT), &ecp256_init(1, 64));
    r.handle(now, addr(SERVER), addr(CLIENT), &ecp256_init(2, 64));
    assert_eq!(std::iter::from_fn(|| r.poll_init_job()).count(), 1);
    assert!(events(&mut r).contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::IkeSaCap
    }));
}
