//! MOBIKE (RFC 4555): MOBIKE_SUPPORTED answered only to a native client that announced it;
//! UPDATE_SA_ADDRESSES moves the IKE SA and its child SAs only after the COOKIE2
//! return-routability check is answered at the new address.

use super::*;
use crate::message::find_notify;

/// Where the client moves to.
const NEW: &str = "[2001:db8:9::5]:4500";

/// A client that established its IKE SA (announcing MOBIKE_SUPPORTED when `announce`) with a
/// responder whose `native_addresses` hold the server's address when `native`. Returns the
/// responder, the initiator, the child SA, the server's socket and whether the IKE_AUTH
/// response announced MOBIKE_SUPPORTED.
fn mobike_pair(
    lab: &Lab,
    now: Instant,
    native: bool,
    announce: bool,
) -> (Responder, Initiator, ChildSaPair, SocketAddr, bool) {
    let mut i = lab.intranet(now);
    i.start(now);
    let (client, server, init) = i.poll_transmit().expect("IKE_SA_INIT");
    let mut r = lab.responder(now, |c| {
        if native {
            c.native_addresses = vec![server.ip()];
        }
    });
    r.handle(now, server, client, &init);
    i.handle(now, &r.poll_transmit().expect("IKE_SA_INIT response").bytes);
    let (client, server, mut auth) = i.poll_transmit().expect("IKE_AUTH");
    if announce {
        // gate64's initiator does not speak MOBIKE: add the notify as a native client would.
        let keys = i.keys.clone().expect("keys");
        let (header, mut inner) = keys::open_message(&auth, &keys.sk_ei).expect("opens");
        inner.push(Payload::Notify(Notify::new(
            notify::MOBIKE_SUPPORTED,
            Vec::new(),
        )));
        auth = keys::seal_message(&header, &inner, &keys.sk_ei).expect("seal");
    }
    r.handle(now, server, client, &auth);
    let t = r.poll_transmit().expect("IKE_AUTH response");
    let announced = find_notify(&open_response(&i, &t), notify::MOBIKE_SUPPORTED).is_some();
    i.handle(now, &t.bytes);
    established(&mut i);
    let ev = events(&mut r);
    let pair = child_ups(&ev)[0].clone();
    (r, i, pair, server, announced)
}

/// The COOKIE2 a client puts in its UPDATE_SA_ADDRESSES (strongSwan does, RFC 4555 §3.5).
const CLIENT_COOKIE2: [u8; 8] = *b"client-c";

/// An UPDATE_SA_ADDRESSES request whose NAT detection describes `from` → `to` (no NAT),
/// with the client's own COOKIE2.
fn update(i: &mut Initiator, from: SocketAddr, to: SocketAddr) -> Vec<u8> {
    let (spi_i, spi_r) = (i.spi_i, i.spi_r);
    request(
        i,
        exchange::INFORMATIONAL,
        &[
            Payload::Notify(Notify::new(notify::UPDATE_SA_ADDRESSES, Vec::new())),
            Payload::Notify(Notify::new(notify::COOKIE2, CLIENT_COOKIE2.to_vec())),
            Payload::Notify(Notify::new(
                notify::NAT_DETECTION_SOURCE_IP,
                nat_detection_hash(spi_i, spi_r, from),
            )),
            Payload::Notify(Notify::new(
                notify::NAT_DETECTION_DESTINATION_IP,
                nat_detection_hash(spi_i, spi_r, to),
            )),
        ],
    )
}

/// The client's response to the responder's request `t`, with `payloads`.
fn answer(i: &Initiator, t: &Transmit, payloads: &[Payload]) -> Vec<u8> {
    let keys = i.keys.clone().expect("keys");
    let m = Message::parse(&t.bytes).expect("parses");
    let header = Header {
        flags: flags::RESPONSE | flags::INITIATOR,
        ..m.header
    };
    keys::seal_message(&header, payloads, &keys.sk_ei).expect("seal")
}

/// The COOKIE2 of the responder's check `t`.
fn cookie2(i: &Initiator, t: &Transmit) -> Vec<u8> {
    let inner = open_response(i, t);
    find_notify(&inner, notify::COOKIE2)
        .expect("a COOKIE2")
        .data
        .clone()
}

fn mobike_results(ev: &[Event]) -> Vec<MobikeResult> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Mobike { result, .. } => Some(*result),
            _ => None,
        })
        .collect()
}

fn moves(ev: &[Event]) -> usize {
    ev.iter()
        .filter(|e| matches!(e, Event::PeerMoved { .. }))
        .count()
}

/// MOBIKE_SUPPORTED is answered to a native client that sent it, and to no other: not to a
/// native client that did not, not over a transport (no `native_addresses`).
#[test]
fn rfc4555_3_3_mobike_supported_only_for_native_clients_that_ask() {
    let lab = Lab::new();
    let now = Instant::now();
    assert!(mobike_pair(&lab, now, true, true).4);
    assert!(!mobike_pair(&lab, now, true, false).4, "not asked");
    assert!(!mobike_pair(&lab, now, false, true).4, "not native");
}

/// UPDATE_SA_ADDRESSES from a new address is answered there with NAT detection, then a
/// COOKIE2 check goes there; nothing moves until the cookie is echoed, then the IKE SA and
/// its child SA move (same SPIs) and later requests of ours go to the new address.
#[test]
fn rfc4555_3_5_update_moves_after_the_cookie2_echo() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, pair, server, _) = mobike_pair(&lab, now, true, true);
    let old = r.ike_sas(now)[0].peer;
    let new = addr(NEW);
    let local = SocketAddr::new(server.ip(), 4500);
    let req = update(&mut i, new, local);
    r.handle(now, local, new, &req);
    let response = r.poll_transmit().expect("the UPDATE is answered");
    assert_eq!((response.local, response.remote), (local, new));
    let inner = open_response(&i, &response);
    let (spi_i, spi_r) = (i.spi_i, i.spi_r);
    assert_eq!(
        find_notify(&inner, notify::NAT_DETECTION_DESTINATION_IP).map(|n| n.data.clone()),
        Some(nat_detection_hash(spi_i, spi_r, new))
    );
    assert_eq!(
        find_notify(&inner, notify::COOKIE2).map(|n| n.data.clone()),
        Some(CLIENT_COOKIE2.to_vec()),
        "the client's COOKIE2 is echoed (RFC 4555 §4.5)"
    );
    let check = r.poll_transmit().expect("a return-routability check");
    assert_eq!((check.local, check.remote), (local, new));
    let m = Message::parse(&check.bytes).unwrap();
    assert_eq!(
        (m.header.exchange, m.header.flags, m.header.message_id),
        (exchange::INFORMATIONAL, 0, 0)
    );
    let cookie = cookie2(&i, &check);
    assert!((8..=64).contains(&cookie.len()));
    let ev = events(&mut r);
    assert_eq!(moves(&ev), 0, "not before the check: {ev:?}");
    assert_eq!(r.ike_sas(now)[0].peer, old);
    // A retransmission of the UPDATE is answered from the cache, no second check.
    r.handle(now, local, new, &req);
    assert_eq!(r.poll_transmit().expect("cached").bytes, response.bytes);
    assert!(r.poll_transmit().is_none());

    let echo = answer(
        &i,
        &check,
        &[Payload::Notify(Notify::new(notify::COOKIE2, cookie))],
    );
    r.handle(now, local, new, &echo);
    let ev = events(&mut r);
    assert!(
        ev.contains(&Event::PeerMoved {
            spi_r: r.ike_sas(now)[0].spi_r,
            inbound_spis: vec![pair.inbound.spi],
            peer: new,
            native: Some(local),
        }),
        "{ev:?}"
    );
    assert_eq!(mobike_results(&ev), [MobikeResult::Moved]);
    let sa = &r.ike_sas(now)[0];
    assert_eq!(
        (sa.peer, sa.local, sa.child_spis.clone()),
        (new, local, vec![pair.inbound.spi])
    );
    // The next request of ours (a liveness check) goes there, with the next message ID.
    let later = now + r.config.dpd;
    r.handle_timeout(later);
    let probe = r.poll_transmit().expect("a liveness check");
    assert_eq!(probe.remote, new);
    assert_eq!(Message::parse(&probe.bytes).unwrap().header.message_id, 1);
}

/// A check never answered is retransmitted on the liveness schedule to the new address, then
/// given up and counted: the SA stays where it was (and alive); so does one answered with
/// the wrong cookie.
#[test]
fn rfc4555_3_5_a_failed_check_leaves_the_sa_where_it_was() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, _pair, server, _) = mobike_pair(&lab, now, true, true);
    let old = r.ike_sas(now)[0].peer;
    let new = addr(NEW);
    let local = SocketAddr::new(server.ip(), 4500);
    let req = update(&mut i, new, local);
    r.handle(now, local, new, &req);
    r.poll_transmit().expect("response");
    let check = r.poll_transmit().expect("check");
    let mut at = now;
    for _ in 0..r.config.dpd_retransmits {
        at += DPD_RETRANSMIT;
        r.handle_timeout(at);
        let again = r.poll_transmit().expect("retransmitted");
        assert_eq!(
            (again.remote, again.bytes.clone()),
            (new, check.bytes.clone())
        );
    }
    at += DPD_RETRANSMIT;
    r.handle_timeout(at);
    assert!(r.poll_transmit().is_none(), "given up");
    let ev = events(&mut r);
    assert_eq!(mobike_results(&ev), [MobikeResult::CheckFailed]);
    assert_eq!(moves(&ev), 0);
    assert_eq!(r.ike_sas(at)[0].peer, old);

    // Asked again; the client answers without the cookie.
    let req = update(&mut i, new, local);
    r.handle(at, local, new, &req);
    r.poll_transmit().expect("response");
    let check = r.poll_transmit().expect("check");
    assert_eq!(
        Message::parse(&check.bytes).unwrap().header.message_id,
        0,
        "the unanswered check's message ID is used again"
    );
    let wrong = answer(
        &i,
        &check,
        &[Payload::Notify(Notify::new(notify::COOKIE2, vec![0; 16]))],
    );
    r.handle(at, local, new, &wrong);
    let ev = events(&mut r);
    assert_eq!(mobike_results(&ev), [MobikeResult::CheckFailed]);
    assert_eq!(moves(&ev), 0);
    assert_eq!(r.ike_sas(at)[0].peer, old);
}

/// MOBIKE notifies of the wrong length are refused with INVALID_SYNTAX and counted; nothing
/// is checked or moved and the IKE SA carries on.
#[test]
fn rfc4555_malformed_update_notifies_are_refused_and_counted() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, _pair, server, _) = mobike_pair(&lab, now, true, true);
    let new = addr(NEW);
    let local = SocketAddr::new(server.ip(), 4500);
    let bad: [Vec<Payload>; 4] = [
        vec![Payload::Notify(Notify::new(
            notify::UPDATE_SA_ADDRESSES,
            vec![1, 2, 3],
        ))],
        vec![
            Payload::Notify(Notify::new(notify::UPDATE_SA_ADDRESSES, Vec::new())),
            Payload::Notify(Notify::new(notify::NAT_DETECTION_SOURCE_IP, vec![0; 19])),
        ],
        vec![
            Payload::Notify(Notify::new(notify::UPDATE_SA_ADDRESSES, Vec::new())),
            Payload::Notify(Notify::new(notify::NO_NATS_ALLOWED, vec![0; 5])),
        ],
        vec![
            Payload::Notify(Notify::new(notify::UPDATE_SA_ADDRESSES, Vec::new())),
            Payload::Notify(Notify::new(notify::COOKIE2, vec![0; 7])),
        ],
    ];
    for payloads in bad {
        let req = request(&mut i, exchange::INFORMATIONAL, &payloads);
        r.handle(now, local, new, &req);
        let t = r.poll_transmit().expect("answered");
        let inner = open_response(&i, &t);
        assert!(find_notify(&inner, notify::INVALID_SYNTAX).is_some());
        assert!(r.poll_transmit().is_none(), "no check");
        let ev = events(&mut r);
        assert_eq!(mobike_results(&ev), [MobikeResult::Malformed]);
        assert!(ev.iter().any(|e| matches!(
            e,
            Event::Refused {
                reason: Refusal::Malformed,
                ..
            }
        )));
        assert_eq!(moves(&ev), 0);
    }
    assert_ne!(r.ike_sas(now)[0].peer, new);
}

/// A COOKIE2 in a plain INFORMATIONAL request (a MOBIKE client checking a path) is echoed.
#[test]
fn rfc4555_4_5_cookie2_is_echoed() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, _pair, _server, _) = mobike_pair(&lab, now, true, true);
    let sa = r.ike_sas(now)[0].clone();
    let req = request(
        &mut i,
        exchange::INFORMATIONAL,
        &[Payload::Notify(Notify::new(notify::COOKIE2, vec![5; 32]))],
    );
    r.handle(now, sa.local, sa.peer, &req);
    let inner = open_response(&i, &r.poll_transmit().expect("answered"));
    assert_eq!(
        find_notify(&inner, notify::COOKIE2).map(|n| n.data.clone()),
        Some(vec![5; 32])
    );
}

/// UPDATE_SA_ADDRESSES from the SA's current addresses is answered and changes nothing: no
/// check, no move.
#[test]
fn rfc4555_update_from_the_same_address_changes_nothing() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, _pair, _server, _) = mobike_pair(&lab, now, true, true);
    let sa = r.ike_sas(now)[0].clone();
    let req = update(&mut i, sa.peer, sa.local);
    r.handle(now, sa.local, sa.peer, &req);
    let t = r.poll_transmit().expect("answered");
    assert_eq!(t.remote, sa.peer);
    assert!(r.poll_transmit().is_none(), "no check");
    let ev = events(&mut r);
    assert_eq!(mobike_results(&ev), [MobikeResult::Unchanged]);
    assert_eq!(moves(&ev), 0);
}

/// With MOBIKE, another request from a new address is answered there but does not move the
/// SA (RFC 4555 §3.8: moves are announced); without MOBIKE it does (RFC 7296 §2.23).
#[test]
fn rfc4555_3_8_only_announced_moves() {
    let lab = Lab::new();
    let now = Instant::now();
    let new = addr(NEW);
    for (announce, moved) in [(true, 0), (false, 1)] {
        let (mut r, mut i, _pair, server, _) = mobike_pair(&lab, now, true, announce);
        let local = SocketAddr::new(server.ip(), 4500);
        let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
        r.handle(now, local, new, &probe);
        assert_eq!(r.poll_transmit().expect("answered").remote, new);
        assert_eq!(moves(&events(&mut r)), moved, "MOBIKE: {announce}");
    }
}

/// NO_NATS_ALLOWED with a NAT found is answered UNEXPECTED_NAT_DETECTED; nothing moves.
#[test]
fn rfc4555_3_9_no_nats_allowed_with_a_nat_is_refused() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, _pair, server, _) = mobike_pair(&lab, now, true, true);
    let local = SocketAddr::new(server.ip(), 4500);
    let new = addr(NEW);
    let (spi_i, spi_r) = (i.spi_i, i.spi_r);
    let req = request(
        &mut i,
        exchange::INFORMATIONAL,
        &[
            Payload::Notify(Notify::new(notify::UPDATE_SA_ADDRESSES, Vec::new())),
            Payload::Notify(Notify::new(notify::NO_NATS_ALLOWED, vec![0; 12])),
            Payload::Notify(Notify::new(
                notify::NAT_DETECTION_SOURCE_IP,
                nat_detection_hash(spi_i, spi_r, addr("192.0.2.7:4500")),
            )),
        ],
    );
    r.handle(now, local, new, &req);
    let inner = open_response(&i, &r.poll_transmit().expect("answered"));
    assert!(find_notify(&inner, notify::UNEXPECTED_NAT_DETECTED).is_some());
    assert!(r.poll_transmit().is_none());
    let ev = events(&mut r);
    assert_eq!(mobike_results(&ev), [MobikeResult::NatRefused]);
    assert_eq!(moves(&ev), 0);
}

/// The parser refuses each wrong length and takes the right ones.
#[test]
fn parse_update_lengths() {
    let n = |kind, len| Payload::Notify(Notify::new(kind, vec![0; len]));
    let u = n(notify::UPDATE_SA_ADDRESSES, 0);
    assert_eq!(parse_update(&[]), Ok(None));
    assert_eq!(
        parse_update(&[n(notify::NAT_DETECTION_SOURCE_IP, 20)]),
        Ok(None),
        "no UPDATE_SA_ADDRESSES"
    );
    let ok = [
        u.clone(),
        n(notify::NAT_DETECTION_SOURCE_IP, 20),
        n(notify::NAT_DETECTION_DESTINATION_IP, 20),
        n(notify::NO_NATS_ALLOWED, 36),
    ];
    let parsed = parse_update(&ok).expect("well formed").expect("an update");
    assert_eq!((parsed.sources.len(), parsed.destinations.len()), (1, 1));
    assert!(parsed.no_nats_allowed);
    for bad in [
        n(notify::UPDATE_SA_ADDRESSES, 1),
        n(notify::NAT_DETECTION_SOURCE_IP, 0),
        n(notify::NAT_DETECTION_DESTINATION_IP, 21),
        n(notify::NO_NATS_ALLOWED, 13),
        n(notify::COOKIE2, 65),
    ] {
        assert_eq!(parse_update(&[u.clone(), bad]), Err(MalformedMobike));
    }
}
