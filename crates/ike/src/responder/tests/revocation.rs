//! Revoked client certificates: refused in IKE_AUTH under the CRLs the anchors carry.

use super::*;
use crate::auth::crl_tests::crl_of;
use crate::auth::{Crl, Crls};

/// The serial number of the initiator's leaf.
fn serial_of(i: &Initiator) -> rcgen::SerialNumber {
    serial_of_credentials(i.credentials())
}

fn serial_of_credentials(c: &Credentials) -> rcgen::SerialNumber {
    use x509_parser::prelude::FromDer;
    let (_, cert) =
        x509_parser::certificate::X509Certificate::from_der(c.leaf_der()).expect("leaf parses");
    rcgen::SerialNumber::from_slice(cert.raw_serial())
}

fn crls(ca: &Ca, serials: &[rcgen::SerialNumber]) -> Crls {
    Crls::new(
        Crl::parse(&crl_of(&ca.issuer, serials, 2099)).expect("CRL"),
        false,
    )
}

#[test]
fn a_revoked_client_is_refused_as_revoked_and_another_gets_in() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut lost = lab.intranet(now);
    let revoked = crls(&lab.clients_ca, &[serial_of(&lost)]);
    let mut r = lab.responder(now, |c| c.anchors = c.anchors.clone().with_crls(revoked));
    lost.start(now);
    exchange_all(&mut r, &mut lost, now);
    assert!(matches!(
        lost.poll_event(),
        Some(InitiatorEvent::Failed(
            crate::initiator::InitiatorError::Notify(notify::AUTHENTICATION_FAILED)
        ))
    ));
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Negotiation {
                result: Err(Refusal::Revoked),
                ..
            }
        )),
        "{ev:?}"
    );
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Refused {
                reason: Refusal::Revoked,
                ..
            }
        )),
        "{ev:?}"
    );
    // For the session log: the refusal with the identity the client claimed.
    let claimed = ev.iter().find_map(|e| match e {
        Event::AuthRefused {
            reason: Refusal::Revoked,
            identity,
            ..
        } => Some(identity.clone()),
        _ => None,
    });
    assert!(
        claimed.flatten().is_some_and(|id| !id.is_empty()),
        "an AuthRefused with the claimed identity: {ev:?}"
    );
    assert_eq!(Refusal::Revoked.label(), "revoked");
    assert!(r.ike_sas(now).is_empty());

    let mut other = lab.intranet(now);
    other.start(now);
    exchange_all(&mut r, &mut other, now);
    established(&mut other);
}

/// A reload's CRL ends the IKE SA authenticated with the certificate it revokes (a Delete to
/// that client, its child SA down), and leaves one of another certificate alone, even with the
/// same subject.
#[test]
fn a_crl_brought_by_a_reload_ends_the_revoked_clients_sas_only() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut lost = lab.intranet(now);
    let mut kept = lab.infrastructure(now);
    lost.start(now);
    exchange_all(&mut r, &mut lost, now);
    // The initiator's outbound SPI is gate64's inbound one.
    let (_, lost_pair) = established(&mut lost);
    kept.start(now);
    exchange_all(&mut r, &mut kept, now);
    established(&mut kept);
    events(&mut r);
    assert_eq!(r.established(), 2);
    // Nothing is revoked yet: nothing ends.
    assert!(r.disconnect_revoked(now).is_empty());

    let (chain, key) = leaf(&lab.servers_ca, "gate64.lab");
    let credentials = Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("creds");
    let anchors = TrustAnchors::from_pem(lab.clients_ca.pem.as_bytes())
        .expect("anchors")
        .with_crls(crls(&lab.clients_ca, &[serial_of(&lost)]));
    r.replace_credentials(credentials, anchors);
    let removed = r.disconnect_revoked(now);
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0].spi_i, lost.spi_i);
    assert_eq!(removed[0].child_spis, vec![lost_pair.outbound.spi]);
    let delete = r.poll_transmit().expect("a Delete to the revoked client");
    assert_eq!(delete.remote, addr(CLIENT));
    let payloads = open_response(&lost, &delete);
    assert!(
        matches!(payloads.as_slice(), [Payload::Delete(d)] if d.protocol == transform::PROTO_IKE),
        "{payloads:?}"
    );
    let ev = events(&mut r);
    assert!(
        ev.contains(&Event::ChildSaDown {
            inbound_spi: lost_pair.outbound.spi
        }),
        "{ev:?}"
    );
    // The end is reported with its reason, before the IKE SA's down, as every end is.
    let ended = ev.iter().position(|e| {
        *e == Event::IkeSaEnded {
            spi_r: removed[0].spi_r,
            reason: EndReason::Revoked,
        }
    });
    let down = ev
        .iter()
        .position(|e| matches!(e, Event::IkeSaDown { spi_r, .. } if *spi_r == removed[0].spi_r));
    assert!(ended.is_some() && ended < down, "{ev:?}");
    let left = r.ike_sas(now);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].spi_i, kept.spi_i);
    assert!(r.disconnect_revoked(now).is_empty(), "done once");
}

/// New CRLs alone (a CRL file that changed) reach both the next handshake and, through
/// `disconnect_revoked`, the IKE SA already up.
#[test]
fn replaced_crls_refuse_new_handshakes_and_end_established_sas() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut up = lab.intranet(now);
    up.start(now);
    exchange_all(&mut r, &mut up, now);
    established(&mut up);
    let mut next = lab.infrastructure(now);
    r.replace_crls(crls(&lab.clients_ca, &[serial_of(&up), serial_of(&next)]));
    assert_eq!(r.disconnect_revoked(now).len(), 1);
    assert_eq!(r.established(), 0);
    next.start(now);
    exchange_all(&mut r, &mut next, now);
    assert!(matches!(
        next.poll_event(),
        Some(InitiatorEvent::Failed(
            crate::initiator::InitiatorError::Notify(notify::AUTHENTICATION_FAILED)
        ))
    ));
}

/// With verification offloaded to jobs (as the daemon runs it), a revoked client is refused
/// as revoked, and an IKE SA established through a job keeps its certificate's issuer and
/// serial: a later CRL ends it.
#[test]
fn offloaded_verification_refuses_revoked_and_remembers_the_certificate() {
    let lab = Lab::new();
    let now = Instant::now();
    let run_jobs = |r: &mut Responder, i: &mut Initiator| loop {
        exchange_all(r, i, now);
        let mut ran = false;
        while let Some(job) = r.poll_auth_job() {
            r.handle_auth_verdict(now, job.run());
            ran = true;
        }
        if !ran {
            return;
        }
    };
    let mut lost = lab.intranet(now);
    let revoked = crls(&lab.clients_ca, &[serial_of(&lost)]);
    let mut r = lab.responder(now, |c| {
        c.offload_auth = true;
        c.anchors = c.anchors.clone().with_crls(revoked);
    });
    lost.start(now);
    run_jobs(&mut r, &mut lost);
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Negotiation {
                result: Err(Refusal::Revoked),
                ..
            }
        )),
        "{ev:?}"
    );

    let mut up = lab.intranet(now);
    up.start(now);
    run_jobs(&mut r, &mut up);
    established(&mut up);
    r.replace_crls(crls(&lab.clients_ca, &[serial_of(&lost), serial_of(&up)]));
    let removed = r.disconnect_revoked(now);
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0].spi_i, up.spi_i);
}

/// RFC 4739: a revoked user certificate fails the second round as revoked, and a CRL that
/// lists the user certificate of an established IKE SA (its machine certificate still good)
/// ends it.
#[test]
fn a_revoked_user_certificate_fails_the_second_round_and_ends_an_established_sa() {
    let lab = Lab::new();
    let now = Instant::now();
    let user = |name: &str| {
        let (chain, key) = leaf(&lab.clients_ca, name);
        Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("user credentials")
    };
    let with_user = |credentials: Credentials| lab.intranet(now).with_second_auth(credentials);
    let (lost_user, kept_user) = (user("mallory.gate64.lab"), user("alice.gate64.lab"));
    let (lost_serial, kept_serial) = (
        serial_of_credentials(&lost_user),
        serial_of_credentials(&kept_user),
    );
    let mut r = lab.responder(now, |c| {
        c.anchors = c
            .anchors
            .clone()
            .with_crls(crls(&lab.clients_ca, std::slice::from_ref(&lost_serial)));
    });
    let mut lost = with_user(lost_user);
    lost.start(now);
    exchange_all(&mut r, &mut lost, now);
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Negotiation {
                result: Err(Refusal::Revoked),
                ..
            }
        )),
        "{ev:?}"
    );

    let mut kept = with_user(kept_user);
    kept.start(now);
    exchange_all(&mut r, &mut kept, now);
    established(&mut kept);
    assert!(r.disconnect_revoked(now).is_empty());
    r.replace_crls(crls(&lab.clients_ca, &[lost_serial, kept_serial]));
    let removed = r.disconnect_revoked(now);
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0].spi_i, kept.spi_i);
}

/// A CRL that reached the responder without a reload's sweep (or between two): the revoked
/// client's next CREATE_CHILD_SA (here a child SA rekey's request) ends its IKE SA with a
/// Delete instead of an answer.
#[test]
fn a_create_child_sa_of_a_revoked_client_ends_its_ike_sa() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, pair) = established_pair(&lab, now, |_| {});
    let revoked = crls(&lab.clients_ca, &[serial_of(&i)]);
    r.replace_crls(revoked);
    let _ = events(&mut r);
    let rekey = [
        Payload::Notify(Notify::new(
            notify::REKEY_SA,
            pair.outbound.spi.to_be_bytes().to_vec(),
        )),
        esp_proposal(0x5eed_0001, None),
        Payload::Nonce(vec![5; 32]),
        Payload::TsI(vec![TrafficSelector::range(
            "fd00:c1::101".parse().expect("inner"),
            "fd00:c1::101".parse().expect("inner"),
        )]),
        Payload::TsR(vec![TrafficSelector::range(
            "fd00:c0::".parse().expect("net"),
            "fd00:c0::ffff:ffff:ffff:ffff".parse().expect("net"),
        )]),
    ];
    let req = request(&mut i, exchange::CREATE_CHILD_SA, &rekey);
    r.handle(now, addr(SERVER), addr(CLIENT), &req);
    let ev = events(&mut r);
    assert!(
        ev.contains(&Event::IkeSaEnded {
            spi_r: i.spi_r,
            reason: EndReason::Revoked
        }),
        "{ev:?}"
    );
    assert_eq!(r.established(), 0);
    let delete = r.poll_transmit().expect("a Delete, not an answer");
    let payloads = open_response(&i, &delete);
    assert!(
        matches!(payloads.as_slice(), [Payload::Delete(d)] if d.protocol == transform::PROTO_IKE),
        "{payloads:?}"
    );
}

/// A client's second tunnel takes its chain from the anchors' cache; once a CRL revokes the
/// certificate, the same chain is refused even though it was cached.
#[test]
fn a_client_whose_chain_is_cached_is_refused_once_a_crl_revokes_it() {
    let lab = Lab::new();
    let now = Instant::now();
    let (chain, key) = leaf(&lab.clients_ca, "client1.gate64.lab");
    let mut r = lab.responder(now, |_| {});
    let client = |tunnel, tsr| lab.initiator_as(now, tunnel, tsr, (&chain, &key), Group::Ecp256);
    let mut infra = client(TunnelKind::Infrastructure, "fd00:c0::53/128");
    infra.start(now);
    exchange_all(&mut r, &mut infra, now);
    established(&mut infra);
    assert_eq!(r.config.anchors.cached_chains(), 1);
    let mut intra = client(TunnelKind::Intranet, "fd00:c0::/64");
    intra.start(now);
    exchange_all(&mut r, &mut intra, now);
    established(&mut intra);
    assert_eq!(
        r.config.anchors.cache_hits(),
        1,
        "the second tunnel hit the cache"
    );
    r.replace_crls(crls(&lab.clients_ca, &[serial_of(&intra)]));
    let mut again = client(TunnelKind::Intranet, "fd00:c0::/64");
    again.start(now);
    exchange_all(&mut r, &mut again, now);
    assert!(matches!(
        again.poll_event(),
        Some(InitiatorEvent::Failed(
            crate::initiator::InitiatorError::Notify(notify::AUTHENTICATION_FAILED)
        ))
    ));
    assert!(events(&mut r).iter().any(|e| matches!(
        e,
        Event::Negotiation {
            result: Err(Refusal::Revoked),
            ..
        }
    )));
}
