//! Duplicates answered only where the original came from; half-open counts released against
//! the source they were charged to.

use super::*;

const ELSEWHERE: &str = "[2001:db8:bad::1]:500";
/// The same client after IKE_AUTH moved it (NAT-T port, another mapping).
const MOVED: &str = "[2001:0:c000:201::8]:4500";

fn intranet_initiator(lab: &Lab, now: Instant, ca: &Ca) -> Initiator {
    lab.initiator(now, TunnelKind::Intranet, "fd00:c0::/64", ca, Group::Ecp256)
}

/// IKE_SA_INIT from `CLIENT`, then the initiator's IKE_AUTH from `auth_from`; returns the
/// IKE_AUTH request bytes. What the responder sent before is dropped.
fn handshake_moving_to(
    r: &mut Responder,
    i: &mut Initiator,
    now: Instant,
    auth_from: SocketAddr,
) -> Vec<u8> {
    while r.poll_transmit().is_some() {}
    i.start(now);
    let (l, rem, init) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, rem, l, &init);
    i.handle(now, &r.poll_transmit().expect("IKE_SA_INIT response").bytes);
    let (_, rem, auth) = i.poll_transmit().expect("IKE_AUTH");
    r.handle(now, rem, auth_from, &auth);
    auth
}

/// RFC 7296 §2.1 with a forged source: a copy of the IKE_AUTH request from a third party gets
/// nothing (no reflected certificate chain) and is counted; the client's own retransmission
/// still gets the cached response.
#[test]
fn rfc7296_2_1_duplicate_from_a_third_party_gets_nothing() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut i = intranet_initiator(&lab, now, &lab.clients_ca);
    let auth = handshake_moving_to(&mut r, &mut i, now, addr(CLIENT));
    let response = r.poll_transmit().expect("IKE_AUTH response");
    assert_eq!(response.remote, addr(CLIENT));
    let _ = events(&mut r);
    r.handle(now, addr(SERVER), addr(ELSEWHERE), &auth);
    assert_eq!(r.poll_transmit(), None, "nothing reflected");
    assert!(events(&mut r).contains(&Event::Refused {
        peer: addr(ELSEWHERE),
        reason: Refusal::RetransmitElsewhere
    }));
    assert_eq!(Refusal::RetransmitElsewhere.label(), "retransmit_elsewhere");
    assert_eq!(
        (r.stats().retransmits_elsewhere, r.stats().retransmits),
        (1, 0)
    );
    r.handle(now, addr(SERVER), addr(CLIENT), &auth);
    assert_eq!(r.poll_transmit(), Some(response));
    assert_eq!(r.stats().retransmits, 1);
    assert_eq!(r.established(), 1, "the copy changed nothing");
}

/// The half-open count is released against the source IKE_SA_INIT was charged to, although
/// IKE_AUTH came from another address: nothing stays counted against the first source.
#[test]
fn half_open_count_returns_to_zero_after_ike_auth_moves_the_initiator() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| c.max_half_open_per_source = 1);
    let mut i = intranet_initiator(&lab, now, &lab.clients_ca);
    handshake_moving_to(&mut r, &mut i, now, addr(MOVED));
    let sent: Vec<Transmit> = std::iter::from_fn(|| r.poll_transmit()).collect();
    assert!(sent.iter().all(|t| t.remote == addr(MOVED)), "{sent:?}");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(r.established(), 1);
    assert_eq!((r.half_open(), r.half_open.sources()), (0, 0));
    assert_eq!(r.half_open.of_source(addr(CLIENT).ip()), 0);
    // A failed IKE_AUTH from a moved address releases the first source's count too.
    let rogue = ca("rogue CA");
    let mut other = intranet_initiator(&lab, now, &rogue);
    handshake_moving_to(&mut r, &mut other, now, addr(MOVED));
    assert!(events(&mut r).iter().any(|e| matches!(
        e,
        Event::Negotiation {
            result: Err(Refusal::Authentication(_)),
            ..
        }
    )));
    assert_eq!((r.half_open(), r.half_open.sources()), (0, 0));
    // With a cap of one, the first source can still start another IKE SA.
    let mut again = intranet_initiator(&lab, now, &lab.clients_ca);
    handshake_moving_to(&mut r, &mut again, now, addr(MOVED));
    assert!(
        events(&mut r)
            .iter()
            .any(|e| matches!(e, Event::Negotiation { result: Ok(()), .. }))
    );
}
