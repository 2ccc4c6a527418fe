//! Tests of revocation: CRLs made with rcgen, checked by [`TrustAnchors::verify_peer`] and
//! [`Crls::revokes`].

use super::tests::{Ca, ca, key, leaf_with};
use super::*;
use rcgen::{
    CertificateRevocationListParams, Issuer, KeyIdMethod, KeyPair, RevokedCertParams, SerialNumber,
};
use std::time::SystemTime;

/// A CRL signed by `issuer` listing `serials`, valid from 2020 until `next_update_year`.
pub(crate) fn crl(issuer: &Issuer<'_, KeyPair>, serials: &[u64], next_update_year: i32) -> Vec<u8> {
    let serials: Vec<SerialNumber> = serials.iter().map(|s| SerialNumber::from(*s)).collect();
    crl_of(issuer, &serials, next_update_year)
}

/// [`crl`] with serial numbers as they are.
pub(crate) fn crl_of(
    issuer: &Issuer<'_, KeyPair>,
    serials: &[SerialNumber],
    next_update_year: i32,
) -> Vec<u8> {
    made(issuer, serials, next_update_year).der().to_vec()
}

fn made(
    issuer: &Issuer<'_, KeyPair>,
    serials: &[SerialNumber],
    next_update_year: i32,
) -> rcgen::CertificateRevocationList {
    let params = CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2020, 1, 1),
        next_update: rcgen::date_time_ymd(next_update_year, 1, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: serials
            .iter()
            .map(|s| RevokedCertParams {
                serial_number: s.clone(),
                revocation_time: rcgen::date_time_ymd(2021, 1, 1),
                reason_code: None,
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: KeyIdMethod::Sha256,
    };
    params.signed_by(issuer).unwrap()
}

fn leaf_der(ca: &Ca, serial: u64) -> Vec<u8> {
    leaf_with(ca, &key(&rcgen::PKCS_ECDSA_P256_SHA256), |p| {
        p.serial_number = Some(SerialNumber::from(serial));
    })
    .der
}

fn anchors_with(ca: &Ca, crls: &[Vec<u8>], refuse_expired: bool) -> TrustAnchors {
    let parsed = crls.iter().flat_map(|c| Crl::parse(c).unwrap()).collect();
    TrustAnchors::from_pem(ca.pem.as_bytes())
        .unwrap()
        .with_crls(Crls::new(parsed, refuse_expired))
}

#[test]
fn a_revoked_leaf_is_refused_and_others_pass() {
    let ca = ca("lab CA");
    let anchors = anchors_with(&ca, &[crl(&ca.issuer, &[7, 9], 2099)], false);
    assert_eq!(
        anchors
            .verify_peer(&leaf_der(&ca, 7), &[], SystemTime::now())
            .unwrap_err(),
        AuthError::Revoked
    );
    let peer = anchors
        .verify_peer(&leaf_der(&ca, 8), &[], SystemTime::now())
        .unwrap();
    let key = peer.revocation_key().unwrap();
    assert!(!anchors.crls().revokes(key));
    // The same certificate, checked later against a list that names it.
    let later = Crls::new(Crl::parse(&crl(&ca.issuer, &[8], 2099)).unwrap(), false);
    assert!(later.revokes(key));
}

#[test]
fn a_certificate_whose_issuer_has_no_crl_is_accepted() {
    let (ours, other) = (ca("lab CA"), ca("other CA"));
    // Only the other CA has a list, and it names the serial our leaf has.
    let mut anchors = anchors_with(&other, &[crl(&other.issuer, &[7], 2099)], false);
    let both = format!("{}{}", ours.pem, other.pem);
    anchors = TrustAnchors::from_pem(both.as_bytes())
        .unwrap()
        .with_crls(anchors.crls().clone());
    let peer = anchors
        .verify_peer(&leaf_der(&ours, 7), &[], SystemTime::now())
        .unwrap();
    assert!(!anchors.crls().revokes(peer.revocation_key().unwrap()));
    assert_eq!(
        anchors
            .verify_peer(&leaf_der(&other, 7), &[], SystemTime::now())
            .unwrap_err(),
        AuthError::Revoked
    );
}

#[test]
fn an_expired_crl_warns_or_refuses() {
    let ca = ca("lab CA");
    let old = crl(&ca.issuer, &[7], 2021);
    let parsed = Crl::parse(&old).unwrap();
    assert!(parsed[0].is_expired(SystemTime::now()));
    let leaf = leaf_der(&ca, 8);
    anchors_with(&ca, std::slice::from_ref(&old), false)
        .verify_peer(&leaf, &[], SystemTime::now())
        .unwrap();
    assert_eq!(
        anchors_with(&ca, std::slice::from_ref(&old), true)
            .verify_peer(&leaf, &[], SystemTime::now())
            .unwrap_err(),
        AuthError::CrlExpired
    );
    // Expired or not, a listed certificate stays revoked.
    assert_eq!(
        anchors_with(&ca, &[old], false)
            .verify_peer(&leaf_der(&ca, 7), &[], SystemTime::now())
            .unwrap_err(),
        AuthError::Revoked
    );
}

#[test]
fn crls_parse_from_pem_and_der_and_refuse_garbage() {
    let ca = ca("lab CA");
    let list = made(&ca.issuer, &[SerialNumber::from(7u64)], 2099);
    let der = list.der().to_vec();
    let text = list.pem().unwrap();
    let two = format!("{text}{text}");
    assert_eq!(Crl::parse(der.as_slice()).unwrap().len(), 1);
    assert_eq!(Crl::parse(two.as_bytes()).unwrap().len(), 2);
    assert!(matches!(
        Crl::parse(b"not a CRL"),
        Err(AuthError::Malformed(_))
    ));
    assert!(matches!(
        Crl::parse(b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
        Err(AuthError::Malformed(_))
    ));
}

/// The serial number of the certificate `der`, as a CRL entry names it.
fn serial_of(der: &[u8]) -> SerialNumber {
    use x509_parser::prelude::FromDer;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der).unwrap();
    SerialNumber::from_slice(cert.raw_serial())
}

/// A list's signature is checked with the first chain that needs it and remembered; later
/// chains are decided by lookups alone, and decide the same.
#[test]
fn a_lists_signature_is_checked_once_and_its_lookups_stay_exact() {
    let ca = ca("lab CA");
    let anchors = anchors_with(&ca, &[crl(&ca.issuer, &[7, 9], 2099)], false);
    let path_of = |serial| leaf_der(&ca, serial);
    assert!(anchors.crls().verified_under[0].get().is_none());
    anchors
        .verify_peer(&path_of(8), &[], SystemTime::now())
        .unwrap();
    assert!(
        anchors.crls().verified_under[0].get().is_some(),
        "remembered after the first chain"
    );
    for (serial, want) in [
        (7, Err(AuthError::Revoked)),
        (10, Ok(())),
        (9, Err(AuthError::Revoked)),
    ] {
        assert_eq!(
            anchors
                .verify_peer(&path_of(serial), &[], SystemTime::now())
                .map(drop),
            want,
            "serial {serial}"
        );
    }
    // An expired list refuses from the lookups too, once expired lists refuse.
    let old = anchors_with(&ca, &[crl(&ca.issuer, &[7], 2021)], true);
    let _ = old.verify_peer(&path_of(8), &[], SystemTime::now());
    assert_eq!(
        old.verify_peer(&path_of(8), &[], SystemTime::now())
            .unwrap_err(),
        AuthError::CrlExpired
    );
}

/// A list that names the CA but is signed by another key refuses the CA's clients, and is
/// never remembered as good.
#[test]
fn a_list_with_a_forged_signature_is_refused_and_never_remembered() {
    let ca = ca("lab CA");
    let impostor = super::tests::ca("lab CA");
    let anchors = anchors_with(&ca, &[crl(&impostor.issuer, &[7], 2099)], false);
    for serial in [8, 8, 7] {
        assert!(matches!(
            anchors.verify_peer(&leaf_der(&ca, serial), &[], SystemTime::now()),
            Err(AuthError::BadChain(_))
        ));
    }
    assert!(anchors.crls().verified_under[0].get().is_none());
}

/// Two lists of one issuer: a good one and one signed by another key under the same name.
/// Each list's signature is checked on its own: the good one is remembered, the forged one
/// never counts as verified, and it refuses the CA's clients as a lone forged list does,
/// whichever comes first.
#[test]
fn a_forged_list_beside_a_good_one_of_the_same_issuer_is_never_remembered() {
    let ca = ca("lab CA");
    let impostor = super::tests::ca("lab CA");
    let good = crl(&ca.issuer, &[7], 2099);
    let forged = crl(&impostor.issuer, &[8], 2099);
    for (lists, good_at, forged_at) in [
        ([good.clone(), forged.clone()], 0, 1),
        ([forged.clone(), good.clone()], 1, 0),
    ] {
        let anchors = anchors_with(&ca, &lists, false);
        for serial in [9, 9, 8, 7] {
            assert!(
                matches!(
                    anchors.verify_peer(&leaf_der(&ca, serial), &[], SystemTime::now()),
                    Err(AuthError::BadChain(_))
                ),
                "serial {serial}, forged list at {forged_at}"
            );
        }
        assert!(
            anchors.crls().verified_under[forged_at].get().is_none(),
            "forged list at {forged_at} counted as verified"
        );
        assert_eq!(
            anchors.crls().verified_under[good_at].get().is_some(),
            good_at == 0,
            "the good list is remembered once it was checked"
        );
    }
}

/// The root's list revokes an intermediate: a leaf under it is refused after a leaf under
/// another intermediate had the list's signature remembered.
#[test]
fn a_revoked_intermediate_is_refused_from_the_remembered_list() {
    let root = ca("lab root");
    let (good, good_der) = root.intermediate("issuing CA 1");
    let (bad, bad_der) = root.intermediate("issuing CA 2");
    let list = crl_of(&root.issuer, &[serial_of(&bad_der)], 2099);
    let anchors = anchors_with(&root, &[list], false);
    anchors
        .verify_peer(&leaf_der(&good, 8), &[&good_der], SystemTime::now())
        .unwrap();
    assert!(anchors.crls().verified_under[0].get().is_some());
    assert_eq!(
        anchors
            .verify_peer(&leaf_der(&bad, 8), &[&bad_der], SystemTime::now())
            .unwrap_err(),
        AuthError::Revoked
    );
}
