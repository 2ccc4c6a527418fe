//! The OCSP codec against real `openssl ocsp` requests and responses (made by
//! `crates/ike/tests/data/ocsp/make.sh`, described in the README there). The clock is derived
//! from the fixtures' certificates, never read, so the tests do not expire.

use super::ocsp::{
    CertId, CertStatus, Issuer, OcspAnswer, OcspError, request, responder_url, verify_response,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/ocsp/",
            $name
        ))
        .as_slice()
    };
}

const CA: &[u8] = fixture!("ca.der");
const CA_RSA: &[u8] = fixture!("ca-rsa.der");
const OTHER_CA: &[u8] = fixture!("other-ca.der");
const GOOD: &[u8] = fixture!("good.der");
const GOOD_RSA: &[u8] = fixture!("good-rsa.der");
const REVOKED: &[u8] = fixture!("revoked.der");
const REQ_GOOD: &[u8] = fixture!("req-good.der");
const REQ_REVOKED: &[u8] = fixture!("req-revoked.der");
const REQ_GOOD_RSA: &[u8] = fixture!("req-good-rsa.der");
const RESP_GOOD: &[u8] = fixture!("resp-good.der");
const RESP_REVOKED: &[u8] = fixture!("resp-revoked.der");
const RESP_GOOD_SHA256: &[u8] = fixture!("resp-good-sha256.der");
const RESP_DELEGATED: &[u8] = fixture!("resp-good-delegated.der");
const RESP_OTHER_CA: &[u8] = fixture!("resp-good-other-ca.der");
const RESP_SHORT: &[u8] = fixture!("resp-good-short.der");
const RESP_RSA: &[u8] = fixture!("resp-good-rsa.der");
const RESP_NO_NEXT: &[u8] = fixture!("resp-good-no-next.der");

const DAY: Duration = Duration::from_secs(86_400);
/// How old an answer without nextUpdate may be, in these tests.
const MAX_AGE: Duration = Duration::from_secs(3600);

/// The issuer of a DER CA certificate.
fn issuer(ca_der: &[u8]) -> Issuer<'_> {
    let (_, ca) = X509Certificate::from_der(ca_der).expect("fixture CA");
    Issuer {
        name: ca.tbs_certificate.subject.as_raw(),
        spki: ca.tbs_certificate.subject_pki.raw,
    }
}

/// When make.sh ran: the certificates' notBefore; the responses' thisUpdate is a few seconds
/// later at most.
fn made_at() -> SystemTime {
    let (_, good) = X509Certificate::from_der(GOOD).expect("fixture");
    let secs = u64::try_from(good.validity().not_before.timestamp()).expect("after 1970");
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// A day after the fixtures were made: inside the 3650-day responses and certificates.
fn now() -> SystemTime {
    made_at() + DAY
}

fn id(leaf: &[u8], ca: &[u8]) -> CertId {
    CertId::new(leaf, issuer(ca)).expect("fixture CertID")
}

fn verify(resp: &[u8], leaf: &[u8], ca: &[u8], now: SystemTime) -> Result<OcspAnswer, OcspError> {
    verify_response(resp, &id(leaf, ca), issuer(ca), now, MAX_AGE)
}

#[test]
fn request_equals_openssls() {
    assert_eq!(request(&id(GOOD, CA)), REQ_GOOD);
    assert_eq!(request(&id(REVOKED, CA)), REQ_REVOKED);
    assert_eq!(request(&id(GOOD_RSA, CA_RSA)), REQ_GOOD_RSA);
}

#[test]
fn cert_id_serial_and_identity() {
    let (_, good) = X509Certificate::from_der(GOOD).expect("fixture");
    let good_id = id(GOOD, CA);
    assert_eq!(good_id.serial(), good.raw_serial());
    assert_eq!(good_id, id(GOOD, CA));
    assert_ne!(good_id, id(REVOKED, CA));
    assert_ne!(good_id, id(GOOD, OTHER_CA));
    assert!(CertId::new(&GOOD[..100], issuer(CA)).is_err());
    let bad_issuer = Issuer {
        name: issuer(CA).name,
        spki: &[0x30, 0x00],
    };
    assert!(CertId::new(GOOD, bad_issuer).is_err());
}

#[test]
fn responder_url_of_client_certificate() {
    assert_eq!(
        responder_url(GOOD).as_deref(),
        Some("http://[2001:db8:100::99]:8888")
    );
    assert_eq!(responder_url(CA), None);
    assert_eq!(responder_url(&GOOD[..200]), None);
    assert_eq!(responder_url(b""), None);
}

#[test]
fn good_response() {
    let answer = verify(RESP_GOOD, GOOD, CA, now()).expect("good");
    assert_eq!(answer.status, CertStatus::Good);
    let this = answer.this_update;
    assert!(this >= made_at() && this < made_at() + Duration::from_secs(600));
    assert_eq!(answer.next_update, Some(this + 3650 * DAY));
}

#[test]
fn revoked_response() {
    let answer = verify(RESP_REVOKED, REVOKED, CA, now()).expect("revoked");
    assert_eq!(answer.status, CertStatus::Revoked);
}

#[test]
fn sha256_cert_id_response() {
    let answer = verify(RESP_GOOD_SHA256, GOOD, CA, now()).expect("SHA-256 CertID");
    assert_eq!(answer.status, CertStatus::Good);
}

#[test]
fn delegated_responder() {
    let answer = verify(RESP_DELEGATED, GOOD, CA, now()).expect("delegated");
    assert_eq!(answer.status, CertStatus::Good);
}

#[test]
fn rsa_ca_response() {
    let answer = verify(RESP_RSA, GOOD_RSA, CA_RSA, now()).expect("RSA CA");
    assert_eq!(answer.status, CertStatus::Good);
}

#[test]
fn response_about_another_certificate() {
    assert_eq!(
        verify(RESP_REVOKED, GOOD, CA, now()),
        Err(OcspError::NoMatchingResponse)
    );
    assert_eq!(
        verify(RESP_GOOD, REVOKED, CA, now()),
        Err(OcspError::NoMatchingResponse)
    );
    // A CertID under another issuer than the one that decides who may sign.
    assert_eq!(
        verify_response(RESP_GOOD, &id(GOOD, CA), issuer(OTHER_CA), now(), MAX_AGE),
        Err(OcspError::NoMatchingResponse)
    );
}

#[test]
fn signed_by_another_ca() {
    assert_eq!(
        verify(RESP_OTHER_CA, GOOD, CA, now()),
        Err(OcspError::UnauthorizedSigner)
    );
}

/// The offset of the first DER GeneralizedTime's contents (in tbsResponseData: producedAt).
fn produced_at(resp: &[u8]) -> usize {
    resp.windows(2)
        .position(|w| w == [0x18, 0x0f])
        .expect("a GeneralizedTime")
        + 2
}

#[test]
fn altered_signed_data() {
    let mut resp = RESP_GOOD.to_vec();
    // The year's last digit of producedAt: still a valid time, no longer what was signed.
    resp[produced_at(RESP_GOOD) + 3] ^= 0x01;
    assert_eq!(verify(&resp, GOOD, CA, now()), Err(OcspError::BadSignature));
    let mut resp = RESP_DELEGATED.to_vec();
    resp[produced_at(RESP_DELEGATED) + 3] ^= 0x01;
    assert_eq!(verify(&resp, GOOD, CA, now()), Err(OcspError::BadSignature));
}

#[test]
fn sha1_signature_refused() {
    // sha256WithRSAEncryption → sha1WithRSAEncryption in the (unsigned) signatureAlgorithm.
    const SHA256_RSA: [u8; 9] = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
    let at = RESP_RSA
        .windows(SHA256_RSA.len())
        .position(|w| w == SHA256_RSA)
        .expect("signatureAlgorithm");
    let mut resp = RESP_RSA.to_vec();
    resp[at + 8] = 0x05;
    assert!(matches!(
        verify(&resp, GOOD_RSA, CA_RSA, now()),
        Err(OcspError::UnsupportedAlgorithm(_))
    ));
}

#[test]
fn validity_window() {
    let answer = verify(RESP_SHORT, GOOD, CA, made_at()).expect("fresh");
    let next = answer.next_update.expect("nextUpdate");
    assert_eq!(next, answer.this_update + Duration::from_secs(60));
    // Five minutes of skew either way.
    assert!(verify(RESP_SHORT, GOOD, CA, next + Duration::from_secs(299)).is_ok());
    assert_eq!(
        verify(RESP_SHORT, GOOD, CA, next + Duration::from_secs(301)),
        Err(OcspError::Expired)
    );
    assert_eq!(
        verify(RESP_SHORT, GOOD, CA, made_at() + 2 * DAY),
        Err(OcspError::Expired)
    );
    let this = answer.this_update;
    assert!(verify(RESP_GOOD, GOOD, CA, this - Duration::from_secs(299)).is_ok());
    assert_eq!(
        verify(RESP_GOOD, GOOD, CA, this - Duration::from_secs(301)),
        Err(OcspError::NotYetValid)
    );
}

/// An answer without nextUpdate is taken while its thisUpdate is at most the maximum age
/// (and the clock skew) old, and refused after: a captured `good` answer replayed later does
/// not keep a certificate in that has been revoked since.
#[test]
fn an_answer_without_next_update_ages_out() {
    // Its thisUpdate is when make.sh ran; with no age limit it verifies whenever.
    let answer = verify_response(
        RESP_NO_NEXT,
        &id(GOOD, CA),
        issuer(CA),
        made_at() + 3000 * DAY,
        Duration::MAX,
    )
    .expect("no age limit");
    assert_eq!(answer.status, CertStatus::Good);
    assert_eq!(answer.next_update, None);
    let this = answer.this_update;
    let skew = Duration::from_secs(300);
    assert!(verify(RESP_NO_NEXT, GOOD, CA, this).is_ok());
    assert!(
        verify(
            RESP_NO_NEXT,
            GOOD,
            CA,
            this + MAX_AGE + skew - Duration::from_secs(1)
        )
        .is_ok()
    );
    for late in [
        this + MAX_AGE + skew + Duration::from_secs(1),
        this + 30 * DAY,
    ] {
        assert_eq!(verify(RESP_NO_NEXT, GOOD, CA, late), Err(OcspError::TooOld));
    }
    // A shorter maximum age refuses it sooner; an answer with nextUpdate is not aged.
    let id = id(GOOD, CA);
    let hour = Duration::from_secs(3600);
    assert_eq!(
        verify_response(
            RESP_NO_NEXT,
            &id,
            issuer(CA),
            this + hour,
            Duration::from_secs(60)
        ),
        Err(OcspError::TooOld)
    );
    let with_next = verify(RESP_GOOD, GOOD, CA, now())
        .expect("good")
        .this_update;
    assert!(
        verify_response(
            RESP_GOOD,
            &id,
            issuer(CA),
            with_next + 300 * DAY,
            Duration::ZERO
        )
        .is_ok()
    );
}

#[test]
fn delegated_responder_outside_its_validity() {
    // Past the responder certificate's notAfter (3650 days): no longer authorized, whatever
    // the response says of itself.
    assert_eq!(
        verify(RESP_DELEGATED, GOOD, CA, made_at() + 3700 * DAY),
        Err(OcspError::UnauthorizedSigner)
    );
}

/// A DER OCSPResponse around `status` and, if given, ResponseBytes with `oid` and an empty
/// response.
fn outer(status: u8, oid: Option<&[u8]>) -> Vec<u8> {
    let mut inner = vec![0x0a, 0x01, status];
    if let Some(oid) = oid {
        let mut rb = vec![0x06, oid.len() as u8];
        rb.extend_from_slice(oid);
        rb.extend_from_slice(&[0x04, 0x00]);
        let mut seq = vec![0x30, rb.len() as u8];
        seq.extend(rb);
        inner.extend_from_slice(&[0xa0, seq.len() as u8]);
        inner.extend(seq);
    }
    let mut out = vec![0x30, inner.len() as u8];
    out.extend(inner);
    out
}

#[test]
fn unsuccessful_and_not_basic() {
    let good_id = id(GOOD, CA);
    let check = |der: &[u8]| verify_response(der, &good_id, issuer(CA), now(), MAX_AGE);
    for code in [1, 2, 3, 5, 6] {
        assert_eq!(
            check(&outer(code, None)),
            Err(OcspError::Unsuccessful(code))
        );
    }
    // Successful without responseBytes.
    assert!(matches!(
        check(&outer(0, None)),
        Err(OcspError::Malformed(_))
    ));
    // id-pkix-ocsp-nonce is no response type.
    let nonce = [0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01, 0x02];
    assert_eq!(check(&outer(0, Some(&nonce))), Err(OcspError::NotBasic));
    // Basic, with an empty response.
    let basic = [0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01, 0x01];
    assert!(matches!(
        check(&outer(0, Some(&basic))),
        Err(OcspError::Malformed(_))
    ));
}

#[test]
fn every_truncation_and_trailing_bytes_refused() {
    let good_id = id(GOOD, CA);
    for resp in [RESP_GOOD, RESP_DELEGATED, RESP_REVOKED] {
        for len in 0..resp.len() {
            assert!(
                verify_response(&resp[..len], &good_id, issuer(CA), now(), MAX_AGE).is_err(),
                "prefix of {len} bytes"
            );
        }
        let mut longer = resp.to_vec();
        longer.push(0);
        assert!(matches!(
            verify_response(&longer, &good_id, issuer(CA), now(), MAX_AGE),
            Err(OcspError::Malformed(_))
        ));
    }
}

#[test]
fn garbage_refused() {
    let good_id = id(GOOD, CA);
    let check = |der: &[u8]| verify_response(der, &good_id, issuer(CA), now(), MAX_AGE);
    let cases: [&[u8]; 9] = [
        &[],
        &[0x30],
        &[0x30, 0x80, 0x0a, 0x01, 0x00, 0x00, 0x00],
        &[0x30, 0x84, 0xff, 0xff, 0xff, 0xff],
        &[0x30, 0x81, 0x03, 0x0a, 0x01, 0x00],
        &[0x3f, 0x01, 0x00],
        &[0x30, 0x03, 0x0a, 0x02, 0x00],
        &[0x30, 0x03, 0x02, 0x01, 0x00],
        &[0xff; 64],
    ];
    for der in cases {
        assert!(check(der).is_err(), "{der:02x?}");
    }
    // 64 KiB of pseudo-random bytes (xorshift), whole and as a sequence's contents.
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let noise: Vec<u8> = (0..65_536)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    assert!(check(&noise).is_err());
    let mut seq = vec![0x30, 0x83, 0x01, 0x00, 0x00];
    seq.extend_from_slice(&noise);
    assert!(check(&seq).is_err());
}

#[test]
fn bit_flips_never_change_the_answer() {
    let good_id = id(GOOD, CA);
    for resp in [RESP_GOOD, RESP_DELEGATED] {
        let expected = verify(resp, GOOD, CA, now()).expect("unflipped");
        for at in 0..resp.len() {
            for bit in 0..8 {
                let mut der = resp.to_vec();
                der[at] ^= 1 << bit;
                match verify_response(&der, &good_id, issuer(CA), now(), MAX_AGE) {
                    Err(_) => {}
                    // Only bytes outside the signed data and the signer's certificate can
                    // change without changing the answer.
                    Ok(answer) => assert_eq!(answer, expected, "{at}/{bit}"),
                }
            }
        }
    }
}

#[test]
fn labels() {
    let all = [
        OcspError::Malformed("x"),
        OcspError::Unsuccessful(3),
        OcspError::NotBasic,
        OcspError::NoMatchingResponse,
        OcspError::BadSignature,
        OcspError::UnauthorizedSigner,
        OcspError::UnsupportedAlgorithm("x"),
        OcspError::NotYetValid,
        OcspError::Expired,
        OcspError::TooOld,
    ];
    let labels: Vec<_> = all.iter().map(OcspError::label).collect();
    assert_eq!(
        labels,
        [
            "malformed",
            "unsuccessful",
            "not_basic",
            "no_matching_response",
            "bad_signature",
            "unauthorized_signer",
            "unsupported_algorithm",
            "not_yet_valid",
            "expired",
            "too_old",
        ]
    );
}
