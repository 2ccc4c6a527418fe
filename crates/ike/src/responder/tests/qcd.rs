//! Quick Crash Detection (RFC 6290): gate64 as token maker, its own initiator as taker.

use super::*;
use crate::initiator::{InitiatorError, QCD_ANSWER_LEN};

const SECRET: [u8; 32] = [0x5a; 32];

fn secret() -> QcdSecret {
    QcdSecret::new(&SECRET).expect("secret")
}

fn with_qcd(c: &mut ResponderConfig) {
    c.qcd_secret = Some(secret());
}

/// The notifies of an unprotected message.
fn notifies(bytes: &[u8]) -> (Header, Vec<Notify>) {
    let m = Message::parse(bytes).expect("parses");
    let n = m
        .payloads
        .iter()
        .map(|p| match p {
            Payload::Notify(n) => n.clone(),
            other => panic!("only notifies: {other:?}"),
        })
        .collect();
    (m.header, n)
}

/// The initiator's liveness check, as sent.
fn liveness_check(i: &mut Initiator, now: Instant) -> Vec<u8> {
    assert!(i.check_liveness(now));
    let (_, _, bytes) = i.poll_transmit().expect("liveness check");
    bytes
}

fn qcd_events(r: &mut Responder) -> (usize, usize) {
    let ev = events(r);
    let sent = ev
        .iter()
        .filter(|e| matches!(e, Event::Qcd { sent: true, .. }))
        .count();
    let capped = ev
        .iter()
        .filter(|e| matches!(e, Event::Qcd { sent: false, .. }))
        .count();
    (sent, capped)
}

#[test]
fn rfc6290_4_2_the_token_comes_in_ike_auth_only_when_asked_and_configured() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, _) = established_pair(&lab, now, with_qcd);
    let expected = secret().token(i.spi_i, i.spi_r).to_vec();
    assert_eq!(i.qcd_token.as_ref(), Some(&expected));
    // The padded liveness check is an ordinary request to the responder that has the SA.
    let check = liveness_check(&mut i, now);
    r.handle(now, addr(SERVER), addr(CLIENT), &check);
    let answer = r.poll_transmit().expect("liveness answer");
    i.handle(now, &answer.bytes);
    assert_eq!((i.poll_timeout(), i.poll_event()), (None, None));
    assert!(i.is_established());

    let (_, i, _) = established_pair(&lab, now, |_| {});
    assert!(!i.has_qcd_token(), "QCD off: no token");

    let mut r = lab.responder(now, with_qcd);
    let mut i = lab.intranet(now).without_qcd();
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    established(&mut i);
    assert!(!i.has_qcd_token(), "not asked: no token");
}

/// gate64 restarted (a fresh responder with the same secret): the client's next protected
/// request gets the unprotected INVALID_IKE_SPI with the token, and the client drops its
/// IKE SA at once.
#[test]
fn rfc6290_4_3_an_unknown_ike_sa_is_answered_with_its_token_and_the_client_drops_it() {
    let lab = Lab::new();
    let now = Instant::now();
    let (_, mut i, _) = established_pair(&lab, now, with_qcd);
    let mut restarted = lab.responder(now, with_qcd);
    let check = liveness_check(&mut i, now);
    assert!(check.len() >= QCD_ANSWER_LEN, "padded: {}", check.len());
    restarted.handle(now, addr(SERVER), addr(CLIENT), &check);
    let t = restarted.poll_transmit().expect("QCD answer");
    assert_eq!((t.local, t.remote), (addr(SERVER), addr(CLIENT)));
    assert!(t.bytes.len() <= check.len(), "no amplification");
    let (h, n) = notifies(&t.bytes);
    let request = Message::parse(&check).expect("request").header;
    assert_eq!(
        (h.spi_i, h.spi_r, h.exchange, h.flags, h.message_id),
        (
            i.spi_i,
            i.spi_r,
            exchange::INFORMATIONAL,
            flags::RESPONSE,
            request.message_id
        )
    );
    let kinds: Vec<u16> = n.iter().map(|n| n.kind).collect();
    assert_eq!(kinds, [notify::INVALID_IKE_SPI, notify::QCD_TOKEN]);
    assert_eq!(n[1].data, secret().token(i.spi_i, i.spi_r));
    assert_eq!(qcd_events(&mut restarted), (1, 0));

    i.handle(now, &t.bytes);
    assert_eq!(
        i.poll_event(),
        Some(InitiatorEvent::Failed(InitiatorError::ResponderLost))
    );
    assert_eq!(i.poll_timeout(), None, "nothing outstanding any more");
}

/// A standby that holds the client's IKE SA from its HA peer but has not taken it over yet
/// drops the client's request unanswered (no token that would end the IKE SA); installed, the
/// retransmission is answered under the synced keys, and once the set is emptied an unknown
/// SPI is answered with the token again.
#[test]
fn a_synced_ike_sa_awaiting_takeover_gets_no_qcd_answer_and_its_retransmission_is_answered() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut active, mut i, _) = established_pair(&lab, now, with_qcd);
    active.set_sync_tracking(true);
    let synced = active.export_ike_sa(i.spi_r, now).expect("exported");
    let mut standby = lab.responder(now, with_qcd);
    standby.set_awaiting_takeover([(i.spi_i, i.spi_r)].into_iter().collect());
    let check = liveness_check(&mut i, now);
    standby.handle(now, addr(SERVER), addr(CLIENT), &check);
    assert!(
        standby.poll_transmit().is_none(),
        "no answer before the takeover"
    );
    assert_eq!(qcd_events(&mut standby), (0, 0));

    standby
        .install_synced_ike_sa(now, synced)
        .expect("installed");
    standby.set_awaiting_takeover(Default::default());
    standby.handle(now, addr(SERVER), addr(CLIENT), &check);
    let answer = standby
        .poll_transmit()
        .expect("the retransmission is answered");
    i.handle(now, &answer.bytes);
    assert_eq!(i.poll_event(), None);
    assert!(i.is_established());

    // Another client's IKE SA, not in the set: answered with its token as before.
    let (_, mut other, _) = established_pair(&lab, now, with_qcd);
    let check = liveness_check(&mut other, now);
    standby.handle(now, addr(SERVER), addr(CLIENT), &check);
    assert!(standby.poll_transmit().is_some(), "QCD answer");
    assert_eq!(qcd_events(&mut standby).0, 1);
}

#[test]
fn rfc6290_a_wrong_or_missing_token_is_ignored_by_the_client() {
    let lab = Lab::new();
    let now = Instant::now();
    let (_, mut i, _) = established_pair(&lab, now, with_qcd);
    let check = liveness_check(&mut i, now);
    let request = Message::parse(&check).expect("request").header;
    let other = QcdSecret::new(&[1; 32]).expect("secret");
    i.handle(now, &unknown_spi_answer(&other, request));
    let bare = Message {
        header: Header {
            exchange: exchange::INFORMATIONAL,
            flags: flags::RESPONSE,
            ..request
        },
        payloads: vec![Payload::Notify(Notify::new(
            notify::INVALID_IKE_SPI,
            Vec::new(),
        ))],
    }
    .emit();
    i.handle(now, &bare);
    assert_eq!(i.poll_event(), None);
    assert_eq!(i.qcd_ignored(), 2);
    assert!(i.is_established());
    assert!(
        i.poll_timeout().is_some(),
        "the liveness check is still outstanding"
    );

    // Without a kept token even the right one proves nothing.
    let (_, mut i, _) = established_pair(&lab, now, |_| {});
    let check = liveness_check(&mut i, now);
    let request = Message::parse(&check).expect("request").header;
    i.handle(now, &unknown_spi_answer(&secret(), request));
    assert_eq!((i.poll_event(), i.qcd_ignored()), (None, 1));
}

#[test]
fn rfc6290_no_answer_when_qcd_is_off() {
    let lab = Lab::new();
    let now = Instant::now();
    let (_, mut i, _) = established_pair(&lab, now, with_qcd);
    let mut restarted = lab.responder(now, |_| {});
    restarted.handle(
        now,
        addr(SERVER),
        addr(CLIENT),
        &liveness_check(&mut i, now),
    );
    assert!(restarted.poll_transmit().is_none());
    let ev = events(&mut restarted);
    assert_eq!(
        ev,
        [Event::Refused {
            peer: addr(CLIENT),
            reason: Refusal::UnknownSpi
        }]
    );
}

/// Only protected requests are answered, and only when the answer is no longer than they are.
#[test]
fn rfc6290_unprotected_short_or_response_messages_get_no_answer() {
    let lab = Lab::new();
    let now = Instant::now();
    let (_, mut i, _) = established_pair(&lab, now, with_qcd);
    let mut restarted = lab.responder(now, with_qcd);
    let short = request(&mut i, exchange::INFORMATIONAL, &[]);
    assert!(short.len() < QCD_ANSWER_LEN, "{}", short.len());
    restarted.handle(now, addr(SERVER), addr(CLIENT), &short);
    assert!(restarted.poll_transmit().is_none());
    assert_eq!(qcd_events(&mut restarted), (0, 1));

    let header = Header {
        spi_i: i.spi_i,
        spi_r: i.spi_r,
        exchange: exchange::INFORMATIONAL,
        flags: flags::INITIATOR,
        message_id: 9,
    };
    let padding = Payload::Notify(Notify::new(notify::INITIAL_CONTACT, vec![0; 200]));
    let plain = Message {
        header,
        payloads: vec![padding.clone()],
    }
    .emit();
    restarted.handle(now, addr(SERVER), addr(CLIENT), &plain);
    let response = Message {
        header: Header {
            flags: flags::INITIATOR | flags::RESPONSE,
            ..header
        },
        payloads: vec![padding],
    }
    .emit();
    restarted.handle(now, addr(SERVER), addr(CLIENT), &response);
    assert!(restarted.poll_transmit().is_none());
    assert_eq!(qcd_events(&mut restarted), (0, 0));
}

#[test]
fn rfc6290_answers_are_capped_per_source() {
    let lab = Lab::new();
    let now = Instant::now();
    let (_, mut i, _) = established_pair(&lab, now, with_qcd);
    let mut restarted = lab.responder(now, with_qcd);
    let check = liveness_check(&mut i, now);
    let burst = (qcd_per_source_burst() + 5) as usize;
    for _ in 0..burst {
        restarted.handle(now, addr(SERVER), addr(CLIENT), &check);
    }
    let answers = std::iter::from_fn(|| restarted.poll_transmit()).count();
    assert_eq!(answers, qcd_per_source_burst() as usize);
    assert_eq!(qcd_events(&mut restarted), (answers, burst - answers));
    // Another source still gets its answer; the capped one gets more a second later.
    restarted.handle(now, addr(SERVER), addr("192.0.2.9:4500"), &check);
    assert!(restarted.poll_transmit().is_some());
    let later = now + Duration::from_secs(1);
    restarted.handle(later, addr(SERVER), addr(CLIENT), &check);
    assert!(restarted.poll_transmit().is_some());
}

fn qcd_per_source_burst() -> u32 {
    2 * super::super::qcd::PER_SOURCE_PER_SEC
}
