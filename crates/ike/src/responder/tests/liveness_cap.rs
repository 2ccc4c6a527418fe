//! The cap on liveness checks started per second: IKE SAs whose checks come due together
//! (taken over from an HA peer at once, here) get them a slice's share at a time, the rest
//! put off to later slices and sent there, none dropped and no SA lost.

use super::*;

const DPD: Duration = Duration::from_secs(30);

/// A responder holding `n` established IKE SAs (copies of one client's, each with its own
/// SPIs and no child SAs), all last heard from at `now`; returns their responder SPIs.
fn responder_with(lab: &Lab, now: Instant, n: u64) -> (Responder, Vec<u64>) {
    let (active, i, _) = established_pair(lab, now, |_| {});
    let synced = active.export_ike_sa(i.spi_r, now).expect("established");
    let mut r = lab.responder(now, |c| c.dpd = DPD);
    let mut spis = Vec::new();
    for k in 0..n {
        let mut s = synced.clone();
        s.spi_i = 0x1000_0000_0000 + k;
        s.spi_r = 0x2000_0000_0000 + k;
        s.children = Vec::new();
        (s.inner, s.leased, s.inner4) = (None, false, None);
        r.install_synced_ike_sa(now, s).expect("installed");
        spis.push(0x2000_0000_0000 + k);
    }
    events(&mut r);
    (r, spis)
}

/// The responder SPIs of the liveness checks `r` queued.
fn checks_sent(r: &mut Responder) -> Vec<u64> {
    std::iter::from_fn(|| r.poll_transmit())
        .map(|t| {
            let (h, _) = Header::parse(&t.bytes).expect("an IKE header");
            assert_eq!(h.exchange, exchange::INFORMATIONAL);
            h.spi_r
        })
        .collect()
}

#[test]
fn bunched_liveness_checks_go_out_a_slice_share_at_a_time_and_none_is_dropped() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let (mut r, spis) = responder_with(&lab, t0, 250);
    // 250 IKE SAs ask for fewer than the floor: 100 per second, 10 per slice.
    assert_eq!(checks_per_sec(250, DPD), LIVENESS_MIN_PER_SEC);
    let per_slice = 10;
    let mut at = t0 + DPD;
    r.handle_timeout(at);
    let mut sent = checks_sent(&mut r);
    assert_eq!(sent.len(), per_slice, "one slice's share, not all 250");
    assert_eq!(r.stats().liveness_deferred, 240);
    assert_eq!(
        r.poll_timeout(),
        Some(at + LIVENESS_SLICE),
        "the rest is due in the next slice, not now"
    );
    // Each following slice sends its share, in the order they were put off, until all
    // have gone (before the first checks' retransmissions, 5 s later).
    while sent.len() < spis.len() {
        at += LIVENESS_SLICE;
        assert!(at < t0 + DPD + DPD_RETRANSMIT, "{} sent", sent.len());
        r.handle_timeout(at);
        let slice = checks_sent(&mut r);
        assert_eq!(slice.len(), per_slice, "at {:?}", at - t0);
        sent.extend(slice);
    }
    sent.sort_unstable();
    assert_eq!(sent, spis, "every IKE SA got its check, once");
    assert_eq!(r.stats().liveness_deferred, 240, "each put off once");
    assert_eq!(r.ike_sas(at).len(), 250, "no IKE SA lost");
    assert!(events(&mut r).is_empty());
}

/// Drops on gate64's own IKE sockets halve the checks a slice starts (once a second at
/// most, never below the floor's share); a second without drops, and the cap comes back a
/// little each slice.
#[test]
fn dropped_input_backs_the_cap_off_and_it_comes_back() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let (mut r, _) = responder_with(&lab, t0, 6_000);
    // 6,000 IKE SAs: 400 checks a second, 40 a slice.
    assert_eq!(checks_per_sec(6_000, DPD), 400);
    let slice = |r: &mut Responder, at: Instant| {
        r.handle_timeout(at);
        checks_sent(r).len()
    };
    let start = t0 + DPD;
    let at = |n: u32| start + LIVENESS_SLICE * n;
    assert_eq!(slice(&mut r, at(0)), 40);
    r.note_input_overflow(at(0));
    assert_eq!(r.liveness_budget.share(), 500);
    assert_eq!(slice(&mut r, at(1)), 20, "halved");
    // Again within the second: no second halving, and no recovery either.
    r.note_input_overflow(at(5));
    for n in 2..10 {
        assert_eq!(slice(&mut r, at(n)), 20, "slice {n}");
    }
    // A second after the first halving: halved again, down to the floor's 10 a slice.
    r.note_input_overflow(at(10));
    assert_eq!(slice(&mut r, at(10)), 10);
    let last_drop = at(10) + BACKOFF_HOLD * 2;
    r.note_input_overflow(at(10) + BACKOFF_HOLD);
    r.note_input_overflow(last_drop);
    assert_eq!(r.liveness_budget.share(), 62, "halved twice more");
    assert_eq!(
        slice(&mut r, last_drop),
        10,
        "never below the floor's share"
    );
    // Without drops it comes back a little each slice once the hold has passed (checks are
    // due in every slice here, so each slice passes through the budget).
    let quiet_from = last_drop + BACKOFF_HOLD;
    let before = r.liveness_budget.share();
    r.handle_timeout(quiet_from);
    r.handle_timeout(quiet_from + LIVENESS_SLICE);
    assert_eq!(r.liveness_budget.share(), before + 2 * RECOVERY_PER_SLICE);
    for n in 2..200 {
        r.handle_timeout(quiet_from + LIVENESS_SLICE * n);
    }
    assert_eq!(r.liveness_budget.share(), 1_000, "back to the full cap");
    let _ = checks_sent(&mut r);
    assert_eq!(r.ike_sas(quiet_from).len(), 6_000, "no IKE SA lost");
}

/// Below a slice's share nothing is put off: small deployments see no change.
#[test]
fn checks_within_the_share_all_go_at_once() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let (mut r, spis) = responder_with(&lab, t0, 10);
    r.handle_timeout(t0 + DPD);
    let mut sent = checks_sent(&mut r);
    sent.sort_unstable();
    assert_eq!(sent, spis);
    assert_eq!(r.stats().liveness_deferred, 0);
}

/// The cap follows the IKE SA count and `dpd` (twice the steady state's rate) between the
/// floor and the ceiling.
#[test]
fn the_cap_is_twice_the_steady_state_within_its_bounds() {
    assert_eq!(checks_per_sec(0, DPD), LIVENESS_MIN_PER_SEC);
    // 200,000 IKE SAs would ask for 13,334 a second: the ceiling holds it.
    assert_eq!(checks_per_sec(200_000, DPD), LIVENESS_MAX_PER_SEC);
    assert_eq!(checks_per_sec(140_000, DPD), 9_334);
    assert_eq!(checks_per_sec(60_000, DPD), 4_000);
    assert_eq!(checks_per_sec(60_000, Duration::from_secs(60)), 2_000);
    assert_eq!(checks_per_sec(usize::MAX, DPD), LIVENESS_MAX_PER_SEC);
    assert_eq!(checks_per_sec(60_000, Duration::ZERO), LIVENESS_MAX_PER_SEC);
}
