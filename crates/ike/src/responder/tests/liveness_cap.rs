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
