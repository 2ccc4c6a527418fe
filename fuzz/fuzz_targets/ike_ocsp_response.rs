//! OCSP responses, which come from the network unauthenticated until their signature is
//! checked: `gate64_ike::auth::ocsp::verify_response` about a fixed certificate of a fixed CA,
//! on arbitrary bytes and on real `openssl ocsp` responses (the committed test fixtures under
//! `crates/ike/tests/data/ocsp/`) mutated byte by byte. No panic; an unmutated fixture gives
//! its known answer; a mutated one is refused or gives exactly the unmutated answer (only
//! unsigned bytes can change without the signature failing).
//! Input: `[selector][bytes]`; the selector's low bit picks the case (see `run`).
#![no_main]

use gate64_ike::auth::ocsp::{CertId, CertStatus, Issuer, OcspAnswer, OcspError, verify_response};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use x509_parser::prelude::{FromDer, X509Certificate};

const CA: &[u8] = include_bytes!("../../crates/ike/tests/data/ocsp/ca.der");
const GOOD: &[u8] = include_bytes!("../../crates/ike/tests/data/ocsp/good.der");
const REVOKED: &[u8] = include_bytes!("../../crates/ike/tests/data/ocsp/revoked.der");
/// How old an answer without nextUpdate may be (the daemon's default).
const MAX_AGE: Duration = Duration::from_secs(3600);
/// Real responses and the leaf each is checked about.
const RESPONSES: [(&[u8], &[u8]); 6] = [
    (
        include_bytes!("../../crates/ike/tests/data/ocsp/resp-good.der"),
        GOOD,
    ),
    (
        include_bytes!("../../crates/ike/tests/data/ocsp/resp-revoked.der"),
        REVOKED,
    ),
    (
        include_bytes!("../../crates/ike/tests/data/ocsp/resp-good-sha256.der"),
        GOOD,
    ),
    (
        include_bytes!("../../crates/ike/tests/data/ocsp/resp-good-delegated.der"),
        GOOD,
    ),
    (
        include_bytes!("../../crates/ike/tests/data/ocsp/resp-good-other-ca.der"),
        GOOD,
    ),
    // About `good`, checked about `revoked`: never matches.
    (
        include_bytes!("../../crates/ike/tests/data/ocsp/resp-good.der"),
        REVOKED,
    ),
];

struct Fixed {
    issuer: Issuer<'static>,
    ids: [CertId; 2],
    now: SystemTime,
    /// The unmutated answer of each of `RESPONSES`.
    expected: Vec<Result<OcspAnswer, OcspError>>,
}

fn fixed() -> &'static Fixed {
    static FIXED: OnceLock<Fixed> = OnceLock::new();
    FIXED.get_or_init(|| {
        let (_, ca) = X509Certificate::from_der(CA).expect("fixture CA");
        let issuer = Issuer {
            name: ca.tbs_certificate.subject.as_raw(),
            spki: ca.tbs_certificate.subject_pki.raw,
        };
        let ids = [GOOD, REVOKED].map(|leaf| CertId::new(leaf, issuer).expect("fixture CertID"));
        // A day after the fixtures were made (their notBefore): inside every 3650-day response,
        // fixed, so runs repeat.
        let (_, good) = X509Certificate::from_der(GOOD).expect("fixture");
        let made = u64::try_from(good.validity().not_before.timestamp()).expect("after 1970");
        let now = UNIX_EPOCH + Duration::from_secs(made + 86_400);
        let expected = RESPONSES
            .iter()
            .map(|(resp, leaf)| verify_response(resp, &ids[id_of(leaf)], issuer, now, MAX_AGE))
            .collect::<Vec<_>>();
        // What the fixtures are (as the unit tests check): a regenerated set that breaks this
        // fails here rather than fuzzing refusals only.
        let statuses: Vec<_> = expected
            .iter()
            .map(|r| r.as_ref().map(|a| a.status).map_err(OcspError::label))
            .collect();
        assert_eq!(
            statuses,
            [
                Ok(CertStatus::Good),
                Ok(CertStatus::Revoked),
                Ok(CertStatus::Good),
                Ok(CertStatus::Good),
                Err("unauthorized_signer"),
                Err("no_matching_response"),
            ]
        );
        Fixed {
            issuer,
            ids,
            now,
            expected,
        }
    })
}

fn id_of(leaf: &[u8]) -> usize {
    usize::from(leaf != GOOD)
}

fn run(selector: u8, data: &[u8]) {
    let f = fixed();
    match selector & 1 {
        // The bytes as a response body, about `good` (selector bit 1: about `revoked`).
        0 => {
            let id = &f.ids[usize::from(selector >> 1 & 1)];
            let _ = verify_response(data, id, f.issuer, f.now, MAX_AGE).map(|a| a.status);
        }
        // `[response][(offset u16, xor u8)...]`: one of `RESPONSES` mutated by the triples.
        _ => {
            let [pick, edits @ ..] = data else { return };
            let which = usize::from(*pick) % RESPONSES.len();
            let (resp, leaf) = RESPONSES[which];
            let mut der = resp.to_vec();
            let mut mutated = false;
            for t in edits.chunks_exact(3) {
                let at = usize::from(u16::from_be_bytes([t[0], t[1]])) % der.len();
                der[at] ^= t[2];
                mutated |= t[2] != 0;
            }
            let got = verify_response(&der, &f.ids[id_of(leaf)], f.issuer, f.now, MAX_AGE);
            let expected = &f.expected[which];
            if !mutated {
                assert_eq!(&got, expected, "response {which} unmutated");
            } else if let Ok(answer) = &got {
                assert_eq!(Ok(answer), expected.as_ref(), "response {which} mutated");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let [selector, rest @ ..] = data {
        run(*selector, rest);
    }
});
