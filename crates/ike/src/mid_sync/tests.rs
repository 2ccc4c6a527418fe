use super::*;
use crate::message::Notify;

fn with(data: Vec<u8>) -> Vec<Payload> {
    vec![Payload::Notify(Notify::new(
        notify::IKEV2_MESSAGE_ID_SYNC,
        data,
    ))]
}

#[test]
fn the_notify_round_trips_in_twelve_octets() {
    let m = MidSync {
        nonce: [1, 2, 3, 4],
        send: 0x0506_0708,
        recv: 0x090a_0b0c,
    };
    assert_eq!(m.encode(), (1..=12).collect::<Vec<u8>>());
    assert_eq!(MidSync::parse(&m.encode()), Ok(m));
    assert_eq!(MidSync::find(&[m.notify()]), Ok(m));
}

#[test]
fn a_notify_of_the_wrong_length_or_naming_an_sa_is_malformed() {
    for len in [0, 4, 8, 11, 13, 16] {
        assert_eq!(
            MidSync::find(&with(vec![7; len])),
            Err(MidSyncError::Malformed),
            "{len}"
        );
    }
    let mut n = Notify::new(notify::IKEV2_MESSAGE_ID_SYNC, vec![0; DATA_LEN]);
    n.protocol = 3;
    n.spi = vec![0, 0, 0, 1];
    assert_eq!(
        MidSync::find(&[Payload::Notify(n)]),
        Err(MidSyncError::Malformed)
    );
    assert_eq!(MidSync::find(&[]), Err(MidSyncError::Missing));
}

/// RFC 6311 §4.2: the peer answers with the larger IDs, and both sides end on them.
#[test]
fn both_sides_end_on_the_larger_ids() {
    // The taken-over node synced: next send 5, expects 9. The peer really expects 7 from us
    // (the old node sent two requests after the record left) and sends 12 next.
    let req = request([9, 8, 7, 6], 5, 9);
    assert_eq!(req.send, 5 + SEND_MARGIN);
    let ans = answer(true, 0, &[req.notify()], (12, 7)).unwrap();
    assert_eq!(ans.nonce, [9, 8, 7, 6]);
    assert_eq!((ans.send, ans.recv), (12, 5 + SEND_MARGIN));
    let (next_send, expected) = adopt(&req, &[ans.notify()]).unwrap();
    assert_eq!((next_send, expected), (5 + SEND_MARGIN, 12));
    // Nothing lost on the other side either: its own larger IDs stay.
    let ans = answer(true, 0, &[req.notify()], (3, 7)).unwrap();
    assert_eq!((ans.send, ans.recv), (9, 5 + SEND_MARGIN));
}

#[test]
fn a_response_with_another_nonce_is_refused() {
    let req = request([1, 1, 1, 1], 0, 0);
    let mut ans = answer(true, 0, &[req.notify()], (0, 0)).unwrap();
    ans.nonce = [1, 1, 1, 2];
    assert_eq!(adopt(&req, &[ans.notify()]), Err(MidSyncError::Nonce));
    assert_eq!(adopt(&req, &[]), Err(MidSyncError::Missing));
    assert_eq!(
        adopt(&req, &with(vec![1; 11])),
        Err(MidSyncError::Malformed)
    );
}

#[test]
fn a_request_off_message_id_zero_unannounced_or_behind_is_refused() {
    let req = request([1, 2, 3, 4], 10, 0);
    let p = [req.notify()];
    assert_eq!(answer(true, 1, &p, (0, 0)), Err(MidSyncError::MessageId));
    assert_eq!(answer(false, 0, &p, (0, 0)), Err(MidSyncError::Unsupported));
    // Our side expects the sender's request 30 next: a sync claiming 26 is stale.
    assert_eq!(answer(true, 0, &p, (0, 30)), Err(MidSyncError::Behind));
    assert_eq!(
        answer(true, 0, &with(vec![0; 3]), (0, 0)),
        Err(MidSyncError::Malformed)
    );
}

#[test]
fn the_margin_wraps_instead_of_overflowing() {
    assert_eq!(request([0; 4], u32::MAX, 0).send, SEND_MARGIN - 1);
}

#[test]
fn support_is_announced_by_its_own_notify() {
    assert!(announced(&[supported_notify()]));
    assert!(!announced(&with(vec![0; DATA_LEN])));
}
