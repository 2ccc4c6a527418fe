//! On-demand takeover: what a standby reports of a request for an IKE SA it holds from its
//! HA peer, and the integrity check that decides whether it may install it.

use super::*;

/// The initiator's liveness check, as sent.
fn liveness_check(i: &mut Initiator, now: Instant) -> Vec<u8> {
    assert!(i.check_liveness(now));
    let (_, _, bytes) = i.poll_transmit().expect("liveness check");
    bytes
}

fn candidates(r: &mut Responder) -> Vec<(u64, Vec<u8>)> {
    events(r)
        .into_iter()
        .filter_map(|e| match e {
            Event::TakeoverCandidate {
                spi_r, datagram, ..
            } => Some((spi_r, datagram)),
            _ => None,
        })
        .collect()
}

/// A standby reports a protected request for an IKE SA in its awaiting set (and nothing for
/// one outside it); the report checks as authentic under the synced keys, and a request with
/// one bit changed, another IKE SA's request, or the request under other keys does not.
#[test]
fn a_request_for_a_synced_ike_sa_is_reported_and_only_an_intact_one_checks() {
    let lab = Lab::new();
    let now = Instant::now();
    let (active, mut i, _) = established_pair(&lab, now, |_| {});
    let synced = active.export_ike_sa(i.spi_r, now).expect("exported");
    let (other_active, mut other, _) = established_pair(&lab, now, |_| {});
    let other_synced = (other_active.export_ike_sa(other.spi_r, now)).expect("exported");
    let mut standby = lab.responder(now, |_| {});
    standby.set_awaiting_takeover([(i.spi_i, i.spi_r)].into_iter().collect());

    let check = liveness_check(&mut i, now);
    standby.handle(now, addr(SERVER), addr(CLIENT), &check);
    let reported = candidates(&mut standby);
    assert_eq!(reported, [(i.spi_r, check.clone())]);
    assert!(standby.poll_transmit().is_none(), "nothing answered");

    let other_check = liveness_check(&mut other, now);
    standby.handle(now, addr(SERVER), addr(CLIENT), &other_check);
    assert!(
        candidates(&mut standby).is_empty(),
        "not awaiting: not reported"
    );

    assert!(synced_request_authentic(&synced, &check));
    let mut flipped = check.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert!(!synced_request_authentic(&synced, &flipped));
    assert!(
        !synced_request_authentic(&synced, &other_check),
        "other SPIs"
    );
    let mut wrong_keys = other_synced;
    (wrong_keys.spi_i, wrong_keys.spi_r) = (synced.spi_i, synced.spi_r);
    assert!(!synced_request_authentic(&wrong_keys, &check), "other keys");
    assert!(
        !synced_request_authentic(&synced, &check[..20]),
        "truncated"
    );
}
