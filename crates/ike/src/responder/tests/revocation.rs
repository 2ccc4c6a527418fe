//! Revoked client certificates: refused in IKE_AUTH under the CRLs the anchors carry.

use super::*;
use crate::auth::crl_tests::crl_of;
use crate::auth::{Crl, Crls};

/// The serial number of the initiator's leaf.
fn serial_of(i: &Initiator) -> rcgen::SerialNumber {
    use x509_parser::prelude::FromDer;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(i.credentials().leaf_der())
        .expect("leaf parses");
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
    let mut lost = lab.initiator(
        now,
        TunnelKind::Intranet,
        "fd00:c0::/64",
        &lab.clients_ca,
        Group::Ecp256,
    );
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
    assert_eq!(Refusal::Revoked.label(), "revoked");
    assert!(r.ike_sas(now).is_empty());

    let mut other = lab.initiator(
        now,
        TunnelKind::Intranet,
        "fd00:c0::/64",
        &lab.clients_ca,
        Group::Ecp256,
    );
    other.start(now);
    exchange_all(&mut r, &mut other, now);
    established(&mut other);
}
