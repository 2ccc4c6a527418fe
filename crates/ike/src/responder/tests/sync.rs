//! HA sync: an IKE SA exported from one responder and installed into another (the standby
//! taking over) answers the client's next requests with the same SPIs and keys.

use super::*;

/// A client established on the active responder `r`, and a standby responder built the same
/// way at the same time.
fn pair_and_standby(lab: &Lab, now: Instant) -> (Responder, Responder, Initiator, ChildSaPair) {
    let (r, i, pair) = established_pair(lab, now, |_| {});
    let standby = lab.responder(now, |_| {});
    (r, standby, i, pair)
}

#[test]
fn a_taken_over_ike_sa_answers_the_client_and_rekeys_its_child() {
    let lab = Lab::new();
    let now = Instant::now();
    let (active, mut standby, mut i, pair) = pair_and_standby(&lab, now);
    let later = now + Duration::from_secs(30);
    let synced = active.export_ike_sa(i.spi_r, later).expect("established");
    assert_eq!((synced.spi_i, synced.spi_r), (i.spi_i, i.spi_r));
    assert_eq!(synced.children.len(), 1);
    assert_eq!(synced.children[0].inbound_spi, pair.inbound.spi);
    assert_eq!(synced.age, Duration::from_secs(30));
    assert!(!format!("{synced:?}").contains(&format!("{:?}", synced.keys.sk_d.0)));
    drop(active);

    standby
        .install_synced_ike_sa(later, synced)
        .expect("installed");
    let ev = events(&mut standby);
    assert!(
        matches!(ev.as_slice(), [Event::IkeSaUp { spi_r, tunnel: Some(TunnelKind::Intranet), .. }] if *spi_r == i.spi_r),
        "{ev:?}"
    );
    assert_eq!(
        standby.pool.leased(),
        1,
        "the inner address is leased here too"
    );
    let sas = standby.ike_sas(later);
    assert_eq!(sas[0].child_spis, vec![pair.inbound.spi]);
    assert_eq!(sas[0].age, Duration::from_secs(30));
    assert_eq!(sas[0].inner, pair.peer.inner.first().copied());

    // The client's next request, protected with the keys it always had, is answered.
    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    standby.handle(later, addr(SERVER), addr(CLIENT), &probe);
    let answer = standby.poll_transmit().expect("liveness answer");
    assert_eq!(open_response(&i, &answer), vec![]);

    // Its child SA is rekeyed through the new node, and the old one deleted there.
    assert!(i.rekey_child(later));
    exchange_all(&mut standby, &mut i, later);
    let new = match i.poll_event() {
        Some(InitiatorEvent::Rekeyed { child }) => *child,
        other => panic!("no rekey: {other:?}"),
    };
    let ev = events(&mut standby);
    assert!(
        ev.contains(&Event::ChildSaDown {
            inbound_spi: pair.inbound.spi
        }),
        "{ev:?}"
    );
    assert_eq!(standby.ike_sas(later)[0].child_spis, vec![new.outbound.spi]);
}

/// RFC 7296 §2.2 after a takeover: a record older than the client's last exchanges still
/// takes its next request (at or above the synced ID), once; then only the exact next ID.
#[test]
fn the_first_request_after_takeover_may_be_above_the_synced_id() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut active, mut standby, mut i, _) = pair_and_standby(&lab, now);
    let synced = active.export_ike_sa(i.spi_r, now).expect("established");
    let synced_id = synced.next_id_in;
    for _ in 0..2 {
        let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
        active.handle(now, addr(SERVER), addr(CLIENT), &probe);
        assert!(active.poll_transmit().is_some());
    }
    assert_eq!(i.next_id, synced_id + 2);
    standby
        .install_synced_ike_sa(now, synced)
        .expect("installed");
    events(&mut standby);

    // Far above the window: refused, and the exception stays for the real next request.
    let saved = i.next_id;
    i.next_id = synced_id + SYNCED_ID_WINDOW + 1;
    let far = request(&mut i, exchange::INFORMATIONAL, &[]);
    i.next_id = saved;
    standby.handle(now, addr(SERVER), addr(CLIENT), &far);
    assert!(standby.poll_transmit().is_none());
    assert!(events(&mut standby).contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::MessageId
    }));

    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    standby.handle(now, addr(SERVER), addr(CLIENT), &probe);
    assert_eq!(
        open_response(&i, &standby.poll_transmit().expect("answer")),
        vec![]
    );

    // Answered once: from now on the IDs are exact again (one above is refused).
    i.next_id += 1;
    let skipped = request(&mut i, exchange::INFORMATIONAL, &[]);
    standby.handle(now, addr(SERVER), addr(CLIENT), &skipped);
    assert!(standby.poll_transmit().is_none());
}

/// A forged request above the synced ID does not decrypt, so it does not end the exception
/// and the client's real request is still taken.
#[test]
fn a_forged_request_after_takeover_changes_nothing() {
    let lab = Lab::new();
    let now = Instant::now();
    let (active, mut standby, mut i, _) = pair_and_standby(&lab, now);
    let synced = active.export_ike_sa(i.spi_r, now).expect("established");
    standby
        .install_synced_ike_sa(now, synced)
        .expect("installed");
    events(&mut standby);
    let mut forged = request(&mut i, exchange::INFORMATIONAL, &[]);
    i.next_id -= 1;
    let n = forged.len();
    forged[n - 1] ^= 1;
    standby.handle(now, addr(SERVER), addr(CLIENT), &forged);
    assert!(standby.poll_transmit().is_none());
    assert!(events(&mut standby).contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::Integrity
    }));
    i.next_id += 3;
    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    standby.handle(now, addr(SERVER), addr(CLIENT), &probe);
    assert_eq!(
        open_response(&i, &standby.poll_transmit().expect("answer")),
        vec![]
    );
}

#[test]
fn installs_are_refused_whole_when_spis_are_taken_or_keys_do_not_fit() {
    let lab = Lab::new();
    let now = Instant::now();
    let (active, mut standby, i, _) = pair_and_standby(&lab, now);
    let synced = active.export_ike_sa(i.spi_r, now).expect("established");
    assert_eq!(active.export_ike_sa(i.spi_r ^ 1, now), None, "unknown SPI");

    let mut short = synced.clone();
    short.keys.sk_d.0.pop();
    assert_eq!(
        standby.install_synced_ike_sa(now, short),
        Err(InstallError::Keys)
    );
    let mut cipher = synced.clone();
    cipher.encr_key_bits = 192;
    assert_eq!(
        standby.install_synced_ike_sa(now, cipher),
        Err(InstallError::Keys)
    );
    let mut outside = synced.clone();
    outside.inner = Some("fd00:99::1".parse().expect("addr"));
    assert!(matches!(
        standby.install_synced_ike_sa(now, outside),
        Err(InstallError::Lease(ClaimError::OutsidePool))
    ));
    assert_eq!((standby.ike_sas(now).len(), standby.pool.leased()), (0, 0));
    assert!(events(&mut standby).is_empty());

    standby
        .install_synced_ike_sa(now, synced.clone())
        .expect("installed");
    assert_eq!(
        standby.install_synced_ike_sa(now, synced),
        Err(InstallError::Exists)
    );
    assert_eq!((standby.ike_sas(now).len(), standby.pool.leased()), (1, 1));
}

/// A client that moved to the peer and negotiated there with another inner address: its
/// synced IKE SA, newer than the identity's IKE SA here, ends that one (its lease goes) and
/// takes its place; one older than the identity's IKE SA here is refused, nothing changed.
#[test]
fn a_newer_synced_ike_sa_of_the_identity_replaces_its_older_one_here() {
    let lab = Lab::new();
    let now = Instant::now();
    let (active, mut standby, i, _) = pair_and_standby(&lab, now);
    let synced = active.export_ike_sa(i.spi_r, now).expect("established");
    let Some(IpAddr::V6(inner)) = synced.inner else {
        panic!("no inner IPv6 address: {synced:?}");
    };
    // Another IKE SA of the same identity, with its own SPIs and inner address.
    let other = |n: u64, age: Duration| {
        let mut s = synced.clone();
        (s.spi_i, s.spi_r) = (s.spi_i ^ n, s.spi_r ^ n);
        for c in &mut s.children {
            c.inbound_spi ^= n as u32;
        }
        s.inner = Some(IpAddr::V6(Ipv6Addr::from(
            u128::from(inner) + u128::from(n),
        )));
        s.age = age;
        s
    };
    standby
        .install_synced_ike_sa(now, synced.clone())
        .expect("installed");
    let _ = events(&mut standby);
    let later = now + Duration::from_secs(10);

    // Made 50 s before `now`: older than the one here.
    let stale = other(2, Duration::from_secs(60));
    assert_eq!(
        standby.install_synced_ike_sa(later, stale),
        Err(InstallError::Lease(ClaimError::HoldsAnother))
    );
    assert!(events(&mut standby).is_empty());
    assert!(standby.poll_transmit().is_none());

    // Made 5 s after `now`: newer.
    let newer = other(1, Duration::from_secs(5));
    let newer_spi = newer.spi_r;
    standby
        .install_synced_ike_sa(later, newer)
        .expect("installed");
    let ev = events(&mut standby);
    assert!(
        ev.contains(&Event::IkeSaEnded {
            spi_r: synced.spi_r,
            reason: EndReason::Replaced
        }),
        "{ev:?}"
    );
    assert!(
        standby.poll_transmit().is_some(),
        "a Delete for the old one"
    );
    let sas = standby.ike_sas(later);
    assert_eq!(sas.len(), 1);
    assert_eq!(sas[0].spi_r, newer_spi);
    assert_eq!(standby.pool.leased(), 1);
}

#[test]
fn message_id_changes_are_reported_once_and_only_when_tracking() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, _, mut i, _) = pair_and_standby(&lab, now);
    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    r.handle(now, addr(SERVER), addr(CLIENT), &probe);
    assert!(r.take_sync_changes().is_empty(), "tracking is off");
    r.set_sync_tracking(true);
    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    r.handle(now, addr(SERVER), addr(CLIENT), &probe);
    assert_eq!(r.take_sync_changes(), vec![i.spi_r]);
    assert!(r.take_sync_changes().is_empty());
    assert_eq!(
        r.export_ike_sa(i.spi_r, now).expect("up").next_id_in,
        i.next_id
    );
}
