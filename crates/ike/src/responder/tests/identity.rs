//! Identities are the issuer and subject together: names that render alike stay apart, and
//! `unique_ids` decides what a second IKE SA of one identity on one tunnel does.

use super::*;

/// A client leaf under `ca` whose subject is `dn` (in this order), with a DNS name as its
/// subjectAltName: (chain PEM, key PEM).
fn leaf_named(ca: &Ca, dn: &[(DnType, &str)]) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    for (kind, value) in dn {
        params.distinguished_name.push(kind.clone(), *value);
    }
    params.subject_alt_names = vec![SanType::DnsName(
        "client.gate64.lab".try_into().expect("dns name"),
    )];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &ca.issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

/// Builds the intranet tunnel (with INITIAL_CONTACT) for `leaf`; returns its inner address.
fn intranet(lab: &Lab, r: &mut Responder, now: Instant, leaf: &(String, String)) -> IpAddr {
    let mut i = lab.initiator_as(
        now,
        TunnelKind::Intranet,
        "fd00:c0::/64",
        (&leaf.0, &leaf.1),
        Group::Ecp256,
    );
    i.start(now);
    exchange_all(r, &mut i, now);
    established(&mut i).0.expect("an inner address")
}

fn identities(r: &Responder, now: Instant) -> Vec<String> {
    let mut ids: Vec<String> = r
        .ike_sas(now)
        .into_iter()
        .filter_map(|s| s.identity)
        .collect();
    ids.sort();
    ids
}

fn no_ike_sa_went_down(ev: &[Event]) -> bool {
    !ev.iter().any(|e| {
        matches!(
            e,
            Event::IkeSaDown { .. } | Event::IkeSaEnded { .. } | Event::ChildSaDown { .. }
        )
    })
}

/// A CN whose value is `a, O=b` and the two attributes CN=a, O=b: printed apart (RFC 4514
/// escaping), and two identities: each its own inner address, and neither's INITIAL_CONTACT
/// ends the other's IKE SA.
#[test]
fn subjects_that_print_alike_are_two_identities() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let one_value = leaf_named(&lab.clients_ca, &[(DnType::CommonName, "a, O=b")]);
    let two_values = leaf_named(
        &lab.clients_ca,
        &[(DnType::CommonName, "a"), (DnType::OrganizationName, "b")],
    );
    let first = intranet(&lab, &mut r, now, &one_value);
    let _ = events(&mut r);
    let second = intranet(&lab, &mut r, now, &two_values);
    assert_ne!(first, second, "each identity its own inner address");
    assert!(no_ike_sa_went_down(&events(&mut r)));
    assert_eq!(r.established(), 2);
    assert_eq!(
        identities(&r, now),
        ["CN=a, O=b".to_owned(), "CN=a\\, O=b".to_owned()]
    );
}

/// One subject from two CAs that gate64 both trusts: two identities, as above.
#[test]
fn one_subject_from_two_cas_is_two_identities() {
    let lab = Lab::new();
    let second_ca = ca("gate64 second clients CA");
    let both = format!("{}{}", lab.clients_ca.pem, second_ca.pem);
    let now = Instant::now();
    let mut r = lab.responder(now, |c| {
        c.anchors = TrustAnchors::from_pem(both.as_bytes())
            .expect("both CAs")
            .for_clients(ClientEku::Strict);
    });
    let dn = [(DnType::CommonName, "client1.gate64.lab")];
    let first = intranet(&lab, &mut r, now, &leaf_named(&lab.clients_ca, &dn));
    let _ = events(&mut r);
    let second = intranet(&lab, &mut r, now, &leaf_named(&second_ca, &dn));
    assert_ne!(first, second);
    assert!(no_ike_sa_went_down(&events(&mut r)));
    assert_eq!(r.established(), 2);
    let issuers: Vec<String> = r
        .ike_sas(now)
        .into_iter()
        .filter_map(|s| s.certificate.map(|c| c.issuer))
        .collect();
    assert!(
        issuers.contains(&"CN=gate64 clients CA".to_owned())
            && issuers.contains(&"CN=gate64 second clients CA".to_owned()),
        "{issuers:?}"
    );
}

/// Two initiators of one identity (the lab's client certificate, issued twice) on the intranet
/// tunnel, the second without INITIAL_CONTACT: (responder, events after the second, whether
/// the second was established, whether the first IKE SA was sent a message meanwhile).
fn same_identity_twice(rule: UniqueIds) -> (Responder, Vec<Event>, bool, bool) {
    same_identity_twice_after(rule, uniqueness::REPLACE_HOLDOFF)
}

/// [`same_identity_twice`], the second initiator coming `after` the first.
fn same_identity_twice_after(
    rule: UniqueIds,
    after: Duration,
) -> (Responder, Vec<Event>, bool, bool) {
    let lab = Lab::new();
    let start = Instant::now();
    let now = start;
    let mut r = lab.responder(now, |c| c.unique_ids = rule);
    let mut first = lab.intranet(now);
    first.start(now);
    exchange_all(&mut r, &mut first, now);
    established(&mut first);
    let _ = events(&mut r);
    let now = start + after;
    let mut second = lab
        .initiator(
            now,
            TunnelKind::Intranet,
            "fd00:c0::/64",
            &lab.clients_ca,
            Group::Ecp256,
        )
        .without_initial_contact();
    second.start(now);
    let sent = exchange_all(&mut r, &mut second, now);
    let up = matches!(
        second.poll_event(),
        Some(InitiatorEvent::Established { .. })
    );
    let to_first = sent
        .iter()
        .any(|t| t.bytes.get(..8) == Some(&first.spi_i.to_be_bytes()[..]));
    let ev = events(&mut r);
    (r, ev, up, to_first)
}

#[test]
fn unique_ids_replace_ends_the_old_ike_sa_without_initial_contact() {
    let (r, ev, up, to_first) = same_identity_twice(UniqueIds::Replace);
    assert!(up);
    assert!(to_first, "the old IKE SA's client is sent a Delete");
    assert_eq!(r.established(), 1, "the new IKE SA replaced the old one");
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(
                e,
                Event::IkeSaEnded {
                    reason: EndReason::Replaced,
                    ..
                }
            ))
            .count(),
        1,
        "{ev:?}"
    );
    assert_eq!(
        r.pool.leased(),
        1,
        "the inner address stays with the identity"
    );
}

/// Two IKE SAs of one client that end up as the same tunnel do not replace each other in
/// turn: the second, from the same address at once and without INITIAL_CONTACT, is refused
/// and the first stays.
#[test]
fn unique_ids_replace_refuses_the_same_tunnel_again_at_once() {
    let (r, ev, up, to_first) = same_identity_twice_after(UniqueIds::Replace, Duration::ZERO);
    assert!(!up, "the second IKE_AUTH is refused");
    assert!(!to_first, "the first IKE SA is left alone");
    assert_eq!(r.established(), 1);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Negotiation {
                result: Err(Refusal::SameTunnel),
                ..
            }
        )),
        "{ev:?}"
    );
    assert!(no_ike_sa_went_down(&ev));
    assert_eq!(Refusal::SameTunnel.label(), "same_tunnel");
}

/// Just short of [`uniqueness::REPLACE_HOLDOFF`] is still refused; INITIAL_CONTACT (a client
/// that restarted) replaces at once.
#[test]
fn unique_ids_replace_holdoff_ends_and_initial_contact_replaces_at_once() {
    let almost = uniqueness::REPLACE_HOLDOFF - Duration::from_secs(1);
    let (_, _, up, _) = same_identity_twice_after(UniqueIds::Replace, almost);
    assert!(!up);
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut first = lab.intranet(now);
    first.start(now);
    exchange_all(&mut r, &mut first, now);
    established(&mut first);
    let mut restarted = lab.intranet(now);
    restarted.start(now);
    exchange_all(&mut r, &mut restarted, now);
    established(&mut restarted);
    assert_eq!(
        r.established(),
        1,
        "the restarted client's IKE SA replaced the old one"
    );
}

/// One client's two initiators, infrastructure (with INITIAL_CONTACT) then intranet, both
/// asking for `::/0`, their tunnel named in IKE_AUTH when `named`. Returns the responder and,
/// per initiator, its child SA when it got one.
fn two_initiators_asking_for_any(named: bool) -> (Responder, Vec<Option<ChildSaPair>>) {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut children = Vec::new();
    for (kind, initial_contact) in [
        (TunnelKind::Infrastructure, true),
        (TunnelKind::Intranet, false),
    ] {
        let mut i = lab.initiator(now, kind, "::/0", &lab.clients_ca, Group::Ecp256);
        if named {
            i = i.naming_tunnel();
        }
        if !initial_contact {
            i = i.without_initial_contact();
        }
        i.start(now);
        exchange_all(&mut r, &mut i, now);
        children.push(match i.poll_event() {
            Some(InitiatorEvent::Established { child, .. }) => Some(*child),
            _ => None,
        });
    }
    (r, children)
}

/// A client that names its tunnels may ask for `::/0` in both: each IKE SA gets its own tunnel,
/// its TSr narrowed into that tunnel's prefixes, and neither replaces the other.
#[test]
fn named_tunnels_asking_for_any_get_both_tunnels() {
    let (r, children) = two_initiators_asking_for_any(true);
    let ip = |s: &str| -> IpAddr { s.parse().expect("address") };
    let expected = [
        (
            TunnelKind::Infrastructure,
            vec![(ip("fd00:c0::53"), ip("fd00:c0::53"))],
        ),
        (
            TunnelKind::Intranet,
            vec![(ip("fd00:c0::"), ip("fd00:c0::ffff:ffff:ffff:ffff"))],
        ),
    ];
    for (child, (kind, corporate)) in children.iter().zip(expected) {
        let child = child.as_ref().expect("both tunnels up");
        assert_eq!(child.tunnel, kind);
        let got: Vec<_> = child
            .outbound
            .remote_ts
            .iter()
            .map(|t| (t.start, t.end))
            .collect();
        assert_eq!(got, corporate, "{kind:?}");
    }
    assert_eq!(r.established(), 2, "neither replaced the other");
}

/// The same two initiators without naming their tunnels: both ask for the intranet, and the
/// second is refused as the same tunnel.
#[test]
fn unnamed_tunnels_asking_for_any_are_one_tunnel() {
    let (mut r, children) = two_initiators_asking_for_any(false);
    let ups: Vec<bool> = children.iter().map(Option::is_some).collect();
    assert_eq!(ups, [true, false]);
    assert!(events(&mut r).iter().any(|e| matches!(
        e,
        Event::Negotiation {
            result: Err(Refusal::SameTunnel),
            ..
        }
    )));
}

/// A tunnel name that is not one octet gate64 knows is no name: the selectors decide.
#[test]
fn a_malformed_tunnel_name_is_ignored() {
    use crate::child_sa::{named_tunnel, tunnel_notify};
    use crate::message::{Notify, Payload, notify};
    for data in [vec![], vec![0], vec![3], vec![1, 2]] {
        let p = [Payload::Notify(Notify::new(
            notify::GATE64_TUNNEL,
            data.clone(),
        ))];
        assert_eq!(named_tunnel(&p), None, "{data:?}");
    }
    for kind in [TunnelKind::Infrastructure, TunnelKind::Intranet] {
        assert_eq!(
            named_tunnel(&[Payload::Notify(tunnel_notify(kind))]),
            Some(kind)
        );
    }
}

#[test]
fn unique_ids_keep_refuses_the_new_ike_sa() {
    let (r, ev, up, to_first) = same_identity_twice(UniqueIds::Keep);
    assert!(!to_first);
    assert!(!up, "the second IKE_AUTH is refused");
    assert_eq!(r.established(), 1);
    assert!(ev.iter().any(|e| matches!(
        e,
        Event::Negotiation {
            result: Err(Refusal::DuplicateIdentity),
            ..
        }
    )));
    assert!(no_ike_sa_went_down(&ev));
    assert_eq!(Refusal::DuplicateIdentity.label(), "duplicate_identity");
}

#[test]
fn unique_ids_never_keeps_both() {
    let (r, ev, up, to_first) = same_identity_twice(UniqueIds::Never);
    assert!(!to_first);
    assert!(up);
    assert_eq!(r.established(), 2);
    assert!(no_ike_sa_went_down(&ev));
}

/// `keep` refuses only the tunnel the identity holds: its other tunnel is built.
#[test]
fn unique_ids_keep_admits_the_other_tunnel() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, _, _) = established_pair(&lab, now, |c| c.unique_ids = UniqueIds::Keep);
    let mut infra = lab.infrastructure(now);
    infra.start(now);
    exchange_all(&mut r, &mut infra, now);
    established(&mut infra);
    assert_eq!(r.established(), 2);
}

/// `gate64 status` sees the certificate: issuer, serial as OpenSSL prints it, notAfter.
#[test]
fn the_snapshot_names_the_certificate() {
    let lab = Lab::new();
    let now = Instant::now();
    let (r, _, _) = established_pair(&lab, now, |_| {});
    let sa = r.ike_sas(now).pop().expect("one IKE SA");
    let cert = sa.certificate.expect("its certificate");
    assert_eq!(cert.issuer, "CN=gate64 clients CA");
    assert!(
        !cert.serial.is_empty() && cert.serial.chars().all(|c| c.is_ascii_hexdigit()),
        "{}",
        cert.serial
    );
    assert!(
        !cert.serial.starts_with("00"),
        "no sign octet: {}",
        cert.serial
    );
    let now_secs = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64;
    assert!(cert.not_after > now_secs, "{}", cert.not_after);
}

/// Two initiators of one identity on the intranet tunnel, the second at once and without
/// INITIAL_CONTACT, both reaching a native listen address from one NAT address, at the
/// ports `ports`: whether the second was established, and the events after it.
fn native_twice_behind_one_nat(ports: [u16; 2]) -> (bool, Vec<Event>) {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r: Option<Responder> = None;
    let mut up = false;
    for (n, port) in ports.into_iter().enumerate() {
        let mut i = lab.intranet(now);
        if n > 0 {
            i = i.without_initial_contact();
        }
        i.start(now);
        let mapped = SocketAddr::new(addr("[2001:db8:7::1]:1").ip(), port);
        loop {
            let mut moved = false;
            while let Some((_, server, bytes)) = i.poll_transmit() {
                let r = r.get_or_insert_with(|| {
                    lab.responder(now, |c| c.native_addresses = vec![server.ip()])
                });
                r.handle(now, server, mapped, &bytes);
                moved = true;
            }
            if let Some(r) = r.as_mut() {
                while let Some(t) = r.poll_transmit() {
                    i.handle(now, &t.bytes);
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        up = matches!(i.poll_event(), Some(InitiatorEvent::Established { .. }));
        if n == 0 {
            assert!(up, "the first is up");
            let _ = r.as_mut().map(events);
        }
    }
    let ev = r.as_mut().map(events).unwrap_or_default();
    (up, ev)
}

/// Two machines behind one NAT (one address, two ports) with one certificate are two
/// clients: the second is not refused as `same_tunnel` (it replaces the first, as a second
/// machine with a copied certificate does); from the same port it is one client's second
/// IKE SA and is refused.
#[test]
fn native_clients_behind_one_nat_are_told_apart_by_port() {
    let (up, ev) = native_twice_behind_one_nat([61001, 61002]);
    assert!(up, "{ev:?}");
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::IkeSaEnded {
                reason: EndReason::Replaced,
                ..
            }
        )),
        "{ev:?}"
    );
    let (up, ev) = native_twice_behind_one_nat([61001, 61001]);
    assert!(!up);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Negotiation {
                result: Err(Refusal::SameTunnel),
                ..
            }
        )),
        "{ev:?}"
    );
}
