//! RFC 6311 Message ID synchronization as the node that took an IKE SA over: announced in
//! IKE_AUTH only to a client that announced it, carried in the synced record, and run at the
//! install against gate64's own initiator (which answers it), with the IDs adopted from the
//! answer; clients without support, wrong answers and no answer keep the synced IDs.

use super::*;
use crate::mid_sync::{self, MidSync, SEND_MARGIN};

/// A client (announcing RFC 6311 when `announce`) established on an active responder, and a
/// standby built the same way.
fn pair(lab: &Lab, now: Instant, announce: bool) -> (Responder, Responder, Initiator) {
    let mut r = lab.responder(now, |c| c.dpd = DPD);
    let mut i = lab.intranet(now);
    if announce {
        i = i.with_mid_sync();
    }
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    established(&mut i);
    events(&mut r);
    (r, lab.responder(now, |c| c.dpd = DPD), i)
}

const DPD: Duration = Duration::from_secs(30);

#[test]
fn support_is_answered_only_to_a_client_that_announced_it_and_is_synced() {
    let lab = Lab::new();
    let now = Instant::now();
    for announce in [false, true] {
        let (r, _, i) = pair(&lab, now, announce);
        assert_eq!(i.mid_sync_negotiated(), announce);
        let synced = r.export_ike_sa(i.spi_r, now).expect("established");
        assert_eq!(synced.mid_sync, announce);
    }
}

/// The old node sent two liveness checks after its last record left: the client expects our
/// request ID +2, and the sync request (ID 0, nonce, synced IDs with the margin) sets both
/// sides to the larger IDs; the next liveness check is answered.
#[test]
fn a_takeover_syncs_the_ids_with_a_client_that_supports_it() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut active, mut standby, mut i) = pair(&lab, now, true);
    let synced = active.export_ike_sa(i.spi_r, now).expect("established");
    let synced_out = synced.next_id_out;
    // Two requests of the old node that the record does not hold.
    for round in 1..=2 {
        let at = now + DPD * round;
        active.handle_timeout(at);
        let t = active.poll_transmit().expect("liveness check");
        i.handle(at, &t.bytes);
        let (l, rem, bytes) = i.poll_transmit().expect("answer");
        active.handle(at, rem, l, &bytes);
    }
    drop(active);
    standby
        .install_synced_ike_sa(now, synced)
        .expect("installed");
    events(&mut standby);
    assert!(
        standby.poll_transmit().is_none(),
        "sent at the next timeout"
    );
    standby.handle_timeout(now);
    let t = standby.poll_transmit().expect("sync request");
    let m = Message::parse(&t.bytes).expect("parses");
    assert_eq!(
        (m.header.message_id, m.header.exchange),
        (0, exchange::INFORMATIONAL)
    );
    assert!(!m.header.is_response());
    let keys = i.keys.clone().expect("keys");
    let inner = keys::open_message(&t.bytes, &keys.sk_er).expect("opens").1;
    let sent = MidSync::find(&inner).expect("the notify");
    assert_eq!(inner.len(), 1, "the notify alone");
    assert_eq!(sent.send, synced_out + SEND_MARGIN);
    i.handle(now, &t.bytes);
    let (l, rem, bytes) = i.poll_transmit().expect("sync answer");
    standby.handle(now, rem, l, &bytes);
    assert_eq!(i.mid_syncs_answered(), 1);
    assert_eq!(standby.stats().mid_sync_synced, 1);
    assert_eq!(standby.stats().mid_sync_failed, 0);
    // gate64's next request carries the agreed ID and the client answers it.
    let later = now + DPD;
    standby.handle_timeout(later);
    let check = standby.poll_transmit().expect("liveness check");
    let h = Message::parse(&check.bytes).expect("parses").header;
    assert_eq!(h.message_id, synced_out + SEND_MARGIN);
    i.handle(later, &check.bytes);
    let (l, rem, bytes) = i.poll_transmit().expect("answer");
    standby.handle(later, rem, l, &bytes);
    assert_eq!(standby.ike_sas(later).len(), 1);
    // And the client's own requests go on at its IDs.
    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    standby.handle(later, addr(SERVER), addr(CLIENT), &probe);
    assert_eq!(
        open_response(&i, &standby.poll_transmit().expect("answer")),
        vec![]
    );
}

#[test]
fn a_client_without_support_gets_no_sync_request_and_is_counted() {
    let lab = Lab::new();
    let now = Instant::now();
    let (active, mut standby, i) = pair(&lab, now, false);
    let synced = active.export_ike_sa(i.spi_r, now).expect("established");
    standby
        .install_synced_ike_sa(now, synced)
        .expect("installed");
    standby.handle_timeout(now);
    assert!(standby.poll_transmit().is_none());
    assert_eq!(standby.stats().mid_sync_unsupported, 1);
    assert_eq!(standby.stats().mid_sync_synced, 0);
}

/// Answers that do not echo the nonce, or carry no notify, leave the synced IDs and count as
/// failed; the IKE SA stays.
#[test]
fn a_wrong_answer_keeps_the_synced_ids() {
    let lab = Lab::new();
    let now = Instant::now();
    for wrong in [
        |m: MidSync| {
            vec![
                MidSync {
                    nonce: [m.nonce[0] ^ 1, 0, 0, 0],
                    ..m
                }
                .notify(),
            ]
        },
        |_: MidSync| Vec::new(),
        |m: MidSync| {
            vec![Payload::Notify(Notify::new(
                notify::IKEV2_MESSAGE_ID_SYNC,
                m.encode()[..11].to_vec(),
            ))]
        },
    ] {
        let (active, mut standby, i) = pair(&lab, now, true);
        let synced = active.export_ike_sa(i.spi_r, now).expect("established");
        let out = synced.next_id_out;
        standby
            .install_synced_ike_sa(now, synced)
            .expect("installed");
        standby.handle_timeout(now);
        let t = standby.poll_transmit().expect("sync request");
        let keys = i.keys.clone().expect("keys");
        let sent = MidSync::find(&keys::open_message(&t.bytes, &keys.sk_er).unwrap().1).unwrap();
        let answer = mid_sync::answer(true, 0, &[sent.notify()], (40, 0)).unwrap();
        let header = Header {
            flags: flags::RESPONSE | flags::INITIATOR,
            ..Message::parse(&t.bytes).unwrap().header
        };
        let bytes = keys::seal_message(&header, &wrong(answer), &keys.sk_ei).unwrap();
        standby.handle(now, addr(SERVER), addr(CLIENT), &bytes);
        assert_eq!(standby.stats().mid_sync_failed, 1);
        assert_eq!(standby.stats().mid_sync_synced, 0);
        let later = now + DPD;
        standby.handle_timeout(later);
        let check = standby.poll_transmit().expect("liveness check");
        assert_eq!(Message::parse(&check.bytes).unwrap().header.message_id, out);
    }
}

/// A client that ignores the sync request (as strongSwan does when its M1 is too low) does
/// not lose its IKE SA: the request is retransmitted, then given up and counted.
#[test]
fn an_unanswered_sync_is_given_up_without_deleting_the_ike_sa() {
    let lab = Lab::new();
    let now = Instant::now();
    let (active, mut standby, i) = pair(&lab, now, true);
    let synced = active.export_ike_sa(i.spi_r, now).expect("established");
    standby
        .install_synced_ike_sa(now, synced)
        .expect("installed");
    standby.handle_timeout(now);
    let first = standby.poll_transmit().expect("sync request").bytes;
    let mut at = now;
    let mut resent = 0;
    while standby.stats().mid_sync_failed == 0 && resent < 20 {
        at += DPD_RETRANSMIT;
        standby.handle_timeout(at);
        if let Some(t) = standby.poll_transmit() {
            assert_eq!(t.bytes, first);
            resent += 1;
        }
    }
    assert_eq!(standby.stats().mid_sync_failed, 1);
    assert!(resent >= 1);
    assert_eq!(standby.ike_sas(at).len(), 1);
}

/// gate64's initiator refuses, unanswered and counted, a sync request from a responder that
/// never announced support, one off Message ID 0, and one that names an older ID than the
/// client expects.
#[test]
fn the_initiator_refuses_sync_requests_it_should_not_take() {
    let lab = Lab::new();
    let now = Instant::now();
    let send = |i: &mut Initiator, id: u32, m: MidSync| {
        let keys = i.keys.clone().expect("keys");
        let header = Header {
            spi_i: i.spi_i,
            spi_r: i.spi_r,
            exchange: exchange::INFORMATIONAL,
            flags: 0,
            message_id: id,
        };
        let bytes = keys::seal_message(&header, &[m.notify()], &keys.sk_er).unwrap();
        i.handle(now, &bytes);
        i.poll_transmit()
    };
    let m = mid_sync::request([1, 2, 3, 4], 0, 0);
    // Never negotiated (the client did not announce it, so neither did the responder).
    let (_, _, mut plain) = pair(&lab, now, false);
    assert!(send(&mut plain, 0, m).is_none());
    assert_eq!(plain.mid_sync_refused(), 1);
    let (_, _, mut i) = pair(&lab, now, true);
    assert!(send(&mut i, 5, m).is_none());
    assert_eq!(i.mid_sync_refused(), 1);
    // A liveness check with ID 40 moves what the client expects next: a sync naming 16 is
    // behind it.
    let keys = i.keys.clone().expect("keys");
    let h = Header {
        spi_i: i.spi_i,
        spi_r: i.spi_r,
        exchange: exchange::INFORMATIONAL,
        flags: 0,
        message_id: 40,
    };
    i.handle(now, &keys::seal_message(&h, &[], &keys.sk_er).unwrap());
    assert!(i.poll_transmit().is_some());
    assert!(send(&mut i, 0, m).is_none());
    assert_eq!(i.mid_sync_refused(), 2);
    assert_eq!(i.mid_syncs_answered(), 0);
    let fine = mid_sync::request([5; 4], 41 - SEND_MARGIN, 0);
    assert!(send(&mut i, 0, fine).is_some());
    assert_eq!(i.mid_syncs_answered(), 1);
}

/// A takeover of more IKE SAs than a slice's share of requests sends their sync requests
/// over later slices, like liveness checks: every one goes, none is dropped.
#[test]
fn sync_requests_of_a_large_takeover_are_spread_over_slices() {
    use super::super::liveness::{LIVENESS_MIN_PER_SEC, LIVENESS_SLICE};
    let lab = Lab::new();
    let now = Instant::now();
    let (active, mut standby, i) = pair(&lab, now, true);
    let synced = active.export_ike_sa(i.spi_r, now).expect("established");
    let per_slice = LIVENESS_MIN_PER_SEC.div_ceil(10) as u64;
    let n = per_slice + 5;
    for k in 0..n {
        let mut s = synced.clone();
        (s.spi_i, s.spi_r, s.children, s.leased, s.inner, s.inner4) =
            (1000 + k, 2000 + k, Vec::new(), false, None, None);
        standby.install_synced_ike_sa(now, s).expect("installed");
    }
    standby.handle_timeout(now);
    let first = std::iter::from_fn(|| standby.poll_transmit()).count() as u64;
    assert_eq!(first, per_slice);
    assert_eq!(standby.stats().liveness_deferred, 5);
    standby.handle_timeout(now + LIVENESS_SLICE);
    let second = std::iter::from_fn(|| standby.poll_transmit()).count() as u64;
    assert_eq!(second, 5);
}

/// gate64 as a responder never takes a sync request from its client (it is the cluster
/// side): one on Message ID 0 is refused as off the window and counted, unanswered, and the
/// client's next request is still taken.
#[test]
fn the_responder_refuses_a_clients_sync_request() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, _, mut i) = pair(&lab, now, true);
    let saved = i.next_id;
    i.next_id = 0;
    let sync = request(
        &mut i,
        exchange::INFORMATIONAL,
        &[mid_sync::request([3; 4], 50, 50).notify()],
    );
    i.next_id = saved;
    r.handle(now, addr(SERVER), addr(CLIENT), &sync);
    assert!(r.poll_transmit().is_none());
    assert!(events(&mut r).contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::MessageId
    }));
    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    r.handle(now, addr(SERVER), addr(CLIENT), &probe);
    assert_eq!(
        open_response(&i, &r.poll_transmit().expect("answer")),
        vec![]
    );
}
