//! RFC 4478 reauthentication: the lifetime announced in IKE_AUTH, and the IKE SA of a client
//! that does not authenticate anew deleted a tenth after it, a rekey notwithstanding.

use super::*;

const LIFETIME: Duration = Duration::from_secs(3600);

/// A responder with `reauth` and liveness checks far away, so that only the reauthentication
/// deadline ends an IKE SA; the client's IKE_AUTH response and its Established event.
fn with_reauth(
    lab: &Lab,
    now: Instant,
    reauth: Option<Duration>,
) -> (Responder, Initiator, Vec<Payload>, Option<Duration>) {
    let mut r = lab.responder(now, |c| {
        c.reauth = reauth;
        c.dpd = Duration::from_secs(100_000);
        c.ike_idle_timeout = Duration::from_secs(200_000);
    });
    let mut i = lab.intranet(now);
    i.start(now);
    let sent = exchange_all(&mut r, &mut i, now);
    let auth = open_response(&i, sent.last().expect("the IKE_AUTH response"));
    let lifetime = match i.poll_event() {
        Some(InitiatorEvent::Established { auth_lifetime, .. }) => auth_lifetime,
        other => panic!("not established: {other:?}"),
    };
    (r, i, auth, lifetime)
}

fn announced(payloads: &[Payload]) -> Option<Vec<u8>> {
    payloads.iter().find_map(|p| match p {
        Payload::Notify(n) if n.kind == notify::AUTH_LIFETIME => Some(n.data.clone()),
        _ => None,
    })
}

fn ended_for_reauth(ev: &[Event]) -> usize {
    ev.iter()
        .filter(|e| {
            matches!(
                e,
                Event::IkeSaEnded {
                    reason: EndReason::Reauth,
                    ..
                }
            )
        })
        .count()
}

#[test]
fn rfc4478_ike_auth_announces_the_lifetime() {
    let lab = Lab::new();
    let now = Instant::now();
    let (_, _, auth, lifetime) = with_reauth(&lab, now, Some(LIFETIME));
    assert_eq!(announced(&auth), Some(3600u32.to_be_bytes().to_vec()));
    assert_eq!(lifetime, Some(LIFETIME), "gate64's initiator reads it");
    let (_, _, auth, lifetime) = with_reauth(&lab, now, None);
    assert_eq!((announced(&auth), lifetime), (None, None));
}

#[test]
fn an_ike_sa_not_authenticated_anew_is_deleted_a_tenth_after_its_lifetime() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let (mut r, i, _, _) = with_reauth(&lab, t0, Some(LIFETIME));
    let _ = events(&mut r);
    let grace_end = t0 + LIFETIME + LIFETIME / 10;
    assert!(r.poll_timeout().is_some_and(|t| t <= grace_end));
    r.handle_timeout(grace_end - Duration::from_secs(1));
    assert_eq!(r.established(), 1, "kept until the grace ends");
    assert_eq!(ended_for_reauth(&events(&mut r)), 0);
    r.handle_timeout(grace_end);
    let ev = events(&mut r);
    assert_eq!(ended_for_reauth(&ev), 1, "{ev:?}");
    assert!(ev.iter().any(|e| matches!(e, Event::IkeSaDown { .. })));
    assert_eq!((r.established(), r.pool.leased()), (0, 0));
    let delete = r.poll_transmit().expect("a Delete to the client");
    let payloads = open_response(&i, &delete);
    assert!(
        payloads
            .iter()
            .any(|p| matches!(p, Payload::Delete(d) if d.protocol == transform::PROTO_IKE)),
        "{payloads:?}"
    );
}

/// A rekey is not an authentication: the IKE SA that replaced the first one is deleted at the
/// first one's deadline.
#[test]
fn an_ike_sa_rekey_keeps_the_reauthentication_deadline() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let (mut r, mut i, _, _) = with_reauth(&lab, t0, Some(LIFETIME));
    let later = t0 + Duration::from_secs(1800);
    let new_spi_r = rekey_ike(&mut r, &mut i, later);
    let del = request(
        &mut i,
        exchange::INFORMATIONAL,
        &[Payload::Delete(Delete {
            protocol: transform::PROTO_IKE,
            spi_size: 0,
            spis: vec![],
        })],
    );
    r.handle(later, addr(SERVER), addr(CLIENT), &del);
    let _ = events(&mut r);
    assert_eq!(r.ike_sas(later)[0].spi_r, new_spi_r);
    r.handle_timeout(t0 + LIFETIME + LIFETIME / 10);
    assert_eq!(ended_for_reauth(&events(&mut r)), 1);
    assert_eq!(r.established(), 0);
}

#[test]
fn without_reauth_nothing_is_deleted() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let (mut r, _, _, _) = with_reauth(&lab, t0, None);
    let _ = events(&mut r);
    r.handle_timeout(t0 + Duration::from_secs(50_000));
    assert_eq!(r.established(), 1);
    assert_eq!(ended_for_reauth(&events(&mut r)), 0);
}

/// An IKE SA whose client's certificate passes its notAfter is ended then, with a Delete,
/// reauthentication or not.
#[test]
fn an_ike_sa_ends_when_its_certificate_expires() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let wall = SystemTime::now();
    let mut r = lab.responder(t0, |c| {
        c.reauth = None;
        c.dpd = Duration::from_secs(100_000);
        c.ike_idle_timeout = Duration::from_secs(200_000);
    });
    // A client certificate valid for 100 s more (whole seconds, as X.509 times are).
    let until = wall
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        + 100;
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "short.gate64.lab");
    params.subject_alt_names = vec![SanType::DnsName(
        "short.gate64.lab".try_into().expect("dns name"),
    )];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(until);
    let cert = params
        .signed_by(&key, &lab.clients_ca.issuer)
        .expect("signed");
    let (chain, key) = (cert.pem(), key.serialize_pem());
    let mut i = lab.initiator_as(
        t0,
        TunnelKind::Intranet,
        "fd00:c0::/64",
        (&chain, &key),
        Group::Ecp256,
    );
    i.start(t0);
    exchange_all(&mut r, &mut i, t0);
    established(&mut i);
    let _ = events(&mut r);
    let ended = |ev: &[Event]| {
        ev.iter()
            .filter(|e| {
                matches!(
                    e,
                    Event::IkeSaEnded {
                        reason: EndReason::Expired,
                        ..
                    }
                )
            })
            .count()
    };
    r.handle_timeout(t0 + Duration::from_secs(90));
    assert_eq!((r.established(), ended(&events(&mut r))), (1, 0));
    r.handle_timeout(t0 + Duration::from_secs(101));
    assert_eq!(ended(&events(&mut r)), 1);
    assert_eq!(r.established(), 0);
    assert!(r.poll_transmit().is_some(), "a Delete to the client");
}
