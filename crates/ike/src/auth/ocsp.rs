//! OCSP (RFC 6960) without I/O: the request to send about a client certificate, and the
//! check of the responder's answer.
//!
//! The daemon fetches answers over HTTP and caches them; this module only turns a verified
//! chain's leaf and issuer into a [`CertId`], a [`request`] and a [`responder_url`], and turns
//! a response body into an [`OcspAnswer`] or an [`OcspError`] ([`verify_response`]). No clock is
//! read here: the caller passes `now`.
//!
//! The rules [`verify_response`] enforces:
//!
//! - **Shape**: an OCSPResponse whose responseStatus is successful (else
//!   [`OcspError::Unsuccessful`]) and whose responseType is id-pkix-ocsp-basic (else
//!   [`OcspError::NotBasic`]), read by a small DER reader of its own: definite lengths only,
//!   each element inside its parent, one pass over the input, no recursion (the depth is the
//!   schema's), and every defect an [`OcspError::Malformed`], never a panic.
//! - **Which certificate**: the first SingleResponse whose CertID equals the one asked about:
//!   SHA-1 CertIDs compare with [`CertId`] as is, SHA-256 ones with the issuer's Name and key
//!   hashed again (responders answer in the hash of the request, and some are configured for
//!   SHA-256). None: [`OcspError::NoMatchingResponse`]; that is also the answer when the
//!   [`CertId`] was not made under the [`Issuer`] given, since the issuer's key is what decides
//!   who may sign.
//! - **Who signed** (RFC 6960 §4.2.2.2): the issuer's own key, or a delegated responder
//!   certificate included in the response (of which the first [`MAX_RESPONSE_CERTS`] are looked
//!   at) that the issuer signed, that lists id-kp-OCSPSigning and whose validity covers `now`.
//!   The responderID picks the candidates; a signature that none of them verifies is
//!   [`OcspError::BadSignature`], a responder that is not one of them, or a certificate that
//!   is not authorized, [`OcspError::UnauthorizedSigner`]. The signed data is the
//!   tbsResponseData exactly as received.
//! - **Algorithms**: ECDSA (P-256, P-384, P-521) with SHA-256/384/512, RSA PKCS#1 v1.5 and
//!   RSASSA-PSS with SHA-256/384/512, for the response and for a delegated responder's
//!   certificate alike (the rules of IKE's method 14). SHA-1 and unknown algorithms are
//!   [`OcspError::UnsupportedAlgorithm`].
//! - **Time**: thisUpdate no later than `now` + [`CLOCK_SKEW`] (else
//!   [`OcspError::NotYetValid`]), nextUpdate, when given, no earlier than `now` -
//!   [`CLOCK_SKEW`] (else [`OcspError::Expired`]). An answer without nextUpdate has no end of
//!   its own: it is taken only while its thisUpdate is no older than the caller's `max_age`
//!   (plus [`CLOCK_SKEW`]), else [`OcspError::TooOld`], and is returned with `next_update:
//!   None`, for the caller to keep only briefly.
//!
//! Requests carry no nonce and no signature (as `openssl ocsp -no_nonce` sends them): the
//! answers can then be precomputed and cached by the responder, and a replayed answer is
//! bounded by its own validity, which is checked here: its nextUpdate, or `max_age` when it
//! has none (else a `good` answer captured once would keep a revoked certificate in forever).

use super::AuthError;
use super::algid;
use super::public_key::{method14_alg, public_key};
use aws_lc_rs::digest;
use aws_lc_rs::signature::UnparsedPublicKey;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

/// How far the responder's clock may be from ours, either way.
pub const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// How many certificates of a response's `certs` are considered as its signer.
pub const MAX_RESPONSE_CERTS: usize = 4;

// OID contents (without tag and length).
/// id-sha1 (1.3.14.3.2.26).
const OID_SHA1: &[u8] = &[0x2b, 0x0e, 0x03, 0x02, 0x1a];
/// id-sha256 (2.16.840.1.101.3.4.2.1).
const OID_SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
/// id-pkix-ocsp-basic (1.3.6.1.5.5.7.48.1.1).
const OID_OCSP_BASIC: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01, 0x01];
/// id-ad-ocsp (1.3.6.1.5.5.7.48.1).
const OID_AD_OCSP: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01];

// Universal tags, and the context-specific ones of RFC 6960's ASN.1.
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const NULL: u8 = 0x05;
const OID: u8 = 0x06;
const ENUMERATED: u8 = 0x0a;
const GENERALIZED_TIME: u8 = 0x18;
const SEQUENCE: u8 = 0x30;
/// `[0]` constructed: responseBytes, version, certs, nextUpdate.
const CTX0: u8 = 0xa0;
/// `[1]` constructed: responderID byName, revoked, responseExtensions, singleExtensions.
const CTX1: u8 = 0xa1;
/// `[2]` constructed: responderID byKey.
const CTX2: u8 = 0xa2;
/// `[0]` primitive: certStatus good (IMPLICIT NULL).
const GOOD: u8 = 0x80;
/// `[2]` primitive: certStatus unknown (IMPLICIT NULL).
const UNKNOWN: u8 = 0x82;

/// What identifies the certificate asked about (RFC 6960 §4.1.1 CertID, SHA-1 as every
/// responder accepts): hash of the issuer's Name DER, hash of the issuer's public key (the
/// BIT STRING contents of its SubjectPublicKeyInfo), and the serial number.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CertId {
    issuer_name_sha1: [u8; 20],
    issuer_key_sha1: [u8; 20],
    serial: Vec<u8>,
}

/// The issuer of the certificate asked about, as the chain verification found it.
#[derive(Clone, Copy, Debug)]
pub struct Issuer<'a> {
    /// Its subject Name, DER (= the leaf's issuer Name).
    pub name: &'a [u8],
    /// Its SubjectPublicKeyInfo, DER (the whole SEQUENCE).
    pub spki: &'a [u8],
}

impl CertId {
    /// The CertID of `leaf_der` (a DER certificate) under `issuer`. The issuer Name hashed is
    /// `issuer.name`, which the chain verification matched to the leaf's issuer field.
    pub fn new(leaf_der: &[u8], issuer: Issuer<'_>) -> Result<CertId, AuthError> {
        let (_, leaf) =
            X509Certificate::from_der(leaf_der).map_err(|_| AuthError::Malformed("certificate"))?;
        let key = spki(issuer.spki).ok_or(AuthError::Malformed("issuer SubjectPublicKeyInfo"))?;
        Ok(CertId {
            issuer_name_sha1: sha1(issuer.name),
            issuer_key_sha1: sha1(&key.subject_public_key.data),
            serial: leaf.raw_serial().to_vec(),
        })
    }

    /// The serial number's content octets.
    pub fn serial(&self) -> &[u8] {
        &self.serial
    }
}

/// A DER OCSPRequest for `id` (one Request, no nonce, unsigned: RFC 6960 §4.1.1, as `openssl
/// ocsp` sends by default with -no_nonce).
pub fn request(id: &CertId) -> Vec<u8> {
    // AlgorithmIdentifier { id-sha1, NULL }, as openssl writes it.
    let mut alg = tlv(OID, OID_SHA1);
    alg.extend_from_slice(&[NULL, 0]);
    let mut cert_id = tlv(SEQUENCE, &alg);
    cert_id.extend(tlv(OCTET_STRING, &id.issuer_name_sha1));
    cert_id.extend(tlv(OCTET_STRING, &id.issuer_key_sha1));
    cert_id.extend(tlv(INTEGER, &id.serial));
    // OCSPRequest { TBSRequest { requestList { Request { CertID } } } }
    let request = tlv(SEQUENCE, &tlv(SEQUENCE, &cert_id));
    let request_list = tlv(SEQUENCE, &request);
    tlv(SEQUENCE, &tlv(SEQUENCE, &request_list))
}

/// The OCSP responder URL of `leaf_der`'s Authority Information Access extension
/// (id-ad-ocsp, a uniformResourceIdentifier), when it has one with scheme `http://`.
pub fn responder_url(leaf_der: &[u8]) -> Option<String> {
    let (_, leaf) = X509Certificate::from_der(leaf_der).ok()?;
    leaf.extensions()
        .iter()
        .filter_map(|ext| match ext.parsed_extension() {
            ParsedExtension::AuthorityInfoAccess(aia) => Some(aia),
            _ => None,
        })
        .flat_map(|aia| aia.accessdescs.iter())
        .filter(|desc| desc.access_method.as_bytes() == OID_AD_OCSP)
        .find_map(|desc| match desc.access_location {
            GeneralName::URI(uri)
                if uri
                    .get(..7)
                    .is_some_and(|s| s.eq_ignore_ascii_case("http://")) =>
            {
                Some(uri.to_owned())
            }
            _ => None,
        })
}

/// The revocation status a responder gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertStatus {
    /// Not revoked (RFC 6960 §2.2: at least, not known to be).
    Good,
    /// Revoked.
    Revoked,
    /// The responder does not know the certificate.
    Unknown,
}

/// A response that verified: the status of the certificate asked about, and for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OcspAnswer {
    /// The certificate's status.
    pub status: CertStatus,
    /// When the responder knew the status to be so.
    pub this_update: SystemTime,
    /// When the answer stops being valid; `None` when the responder gave none (then the
    /// caller caches it for a short time of its own).
    pub next_update: Option<SystemTime>,
}

/// Why a response was not taken (each variant a metric label via [`OcspError::label`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OcspError {
    /// Bytes that are not an OCSPResponse as RFC 6960 §4.2.1 defines it.
    #[error("malformed OCSP response: {0}")]
    Malformed(&'static str),
    /// responseStatus other than successful (1 malformedRequest, 2 internalError, 3 tryLater,
    /// 5 sigRequired, 6 unauthorized).
    #[error("OCSP responder answered with status {0}")]
    Unsuccessful(u8),
    /// A responseType other than id-pkix-ocsp-basic.
    #[error("OCSP response is not a basic response")]
    NotBasic,
    /// No SingleResponse about the certificate asked about.
    #[error("OCSP response does not answer about the certificate")]
    NoMatchingResponse,
    /// The signature does not verify under the responder's key.
    #[error("OCSP response signature does not verify")]
    BadSignature,
    /// Signed by neither the issuer nor a responder it authorized.
    #[error("OCSP response signed by an unauthorized responder")]
    UnauthorizedSigner,
    /// A signature algorithm that is refused (SHA-1, unknown).
    #[error("OCSP response uses an unsupported algorithm: {0}")]
    UnsupportedAlgorithm(&'static str),
    /// thisUpdate is later than now plus the allowed skew.
    #[error("OCSP response not yet valid")]
    NotYetValid,
    /// nextUpdate is earlier than now minus the allowed skew.
    #[error("OCSP response expired")]
    Expired,
    /// No nextUpdate, and thisUpdate is older than the maximum age allowed (plus the skew).
    #[error("OCSP response without nextUpdate is older than the maximum age")]
    TooOld,
}

impl OcspError {
    /// A short name for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            OcspError::Malformed(_) => "malformed",
            OcspError::Unsuccessful(_) => "unsuccessful",
            OcspError::NotBasic => "not_basic",
            OcspError::NoMatchingResponse => "no_matching_response",
            OcspError::BadSignature => "bad_signature",
            OcspError::UnauthorizedSigner => "unauthorized_signer",
            OcspError::UnsupportedAlgorithm(_) => "unsupported_algorithm",
            OcspError::NotYetValid => "not_yet_valid",
            OcspError::Expired => "expired",
            OcspError::TooOld => "too_old",
        }
    }
}

/// Checks an OCSPResponse (DER, the HTTP body) about `id`, whose issuer is `issuer`, at `now`,
/// by the rules of the module docs; an answer without nextUpdate is taken while its
/// thisUpdate is at most `max_age` old.
pub fn verify_response(
    der: &[u8],
    id: &CertId,
    issuer: Issuer<'_>,
    now: SystemTime,
    max_age: Duration,
) -> Result<OcspAnswer, OcspError> {
    let basic = basic_response(der)?;
    let issuer_spki =
        spki(issuer.spki).ok_or(OcspError::Malformed("issuer SubjectPublicKeyInfo"))?;
    let issuer_key_bits: &[u8] = &issuer_spki.subject_public_key.data;
    if id.issuer_name_sha1 != sha1(issuer.name) || id.issuer_key_sha1 != sha1(issuer_key_bits) {
        return Err(OcspError::NoMatchingResponse);
    }
    let answer = find_single(basic.responses, id, issuer.name, issuer_key_bits)?;
    check_signer(&basic, issuer.name, &issuer_spki, now)?;
    if answer.this_update > now + CLOCK_SKEW {
        return Err(OcspError::NotYetValid);
    }
    if answer
        .next_update
        .is_some_and(|next| next + CLOCK_SKEW < now)
    {
        return Err(OcspError::Expired);
    }
    if answer.next_update.is_none()
        && now
            .duration_since(answer.this_update)
            .is_ok_and(|age| age > max_age.saturating_add(CLOCK_SKEW))
    {
        return Err(OcspError::TooOld);
    }
    Ok(answer)
}

/// The parts of a BasicOCSPResponse the checks use, borrowed from the input.
struct Basic<'a> {
    /// tbsResponseData, the whole TLV: what is signed.
    tbs: &'a [u8],
    responder: ResponderId<'a>,
    /// The contents of `responses` (SingleResponses).
    responses: &'a [u8],
    /// signatureAlgorithm, the whole TLV.
    signature_algorithm: &'a [u8],
    signature: &'a [u8],
    /// The first [`MAX_RESPONSE_CERTS`] certificates of `certs`, whole TLVs.
    certs: Vec<&'a [u8]>,
}

/// ResponderID (RFC 6960 §4.2.1).
enum ResponderId<'a> {
    /// A Name, DER.
    ByName(&'a [u8]),
    /// SHA-1 of the responder's public key (BIT STRING contents).
    ByKey(&'a [u8]),
}

/// Reads OCSPResponse down to its BasicOCSPResponse.
fn basic_response(der: &[u8]) -> Result<Basic<'_>, OcspError> {
    let mut r = Der::new(one(der, SEQUENCE, "OCSPResponse")?);
    let code = match r.value(ENUMERATED, "responseStatus")? {
        [code] if *code < 0x80 => *code,
        _ => return Err(OcspError::Malformed("responseStatus")),
    };
    if code != 0 {
        return Err(OcspError::Unsuccessful(code));
    }
    let bytes = r.value(CTX0, "responseBytes")?;
    r.end("OCSPResponse")?;
    let mut rb = Der::new(one(bytes, SEQUENCE, "ResponseBytes")?);
    if rb.value(OID, "responseType")? != OID_OCSP_BASIC {
        return Err(OcspError::NotBasic);
    }
    let response = rb.value(OCTET_STRING, "response")?;
    rb.end("ResponseBytes")?;

    let mut b = Der::new(one(response, SEQUENCE, "BasicOCSPResponse")?);
    let tbs = b.tlv(SEQUENCE, "tbsResponseData")?;
    let signature_algorithm = b.tlv(SEQUENCE, "signatureAlgorithm")?.raw;
    let signature = match b.value(BIT_STRING, "signature")? {
        [0, bits @ ..] => bits,
        _ => return Err(OcspError::Malformed("signature")),
    };
    let mut certs = Vec::new();
    if let Some(list) = b.optional(CTX0, "certs")? {
        let mut list = Der::new(one(list, SEQUENCE, "certs")?);
        while !list.is_empty() && certs.len() < MAX_RESPONSE_CERTS {
            certs.push(list.tlv(SEQUENCE, "certificate")?.raw);
        }
    }
    b.end("BasicOCSPResponse")?;

    let mut t = Der::new(tbs.value);
    if let Some(version) = t.optional(CTX0, "version")? {
        // v1 is the DEFAULT, so DER leaves it out; a v1 written anyway is tolerated.
        if one(version, INTEGER, "version")? != [0] {
            return Err(OcspError::Malformed("version is not v1"));
        }
    }
    let responder = match t.any("responderID")? {
        Tlv {
            tag: CTX1, value, ..
        } => ResponderId::ByName(Der::new(value).whole(SEQUENCE, "responderID byName")?),
        Tlv {
            tag: CTX2, value, ..
        } => ResponderId::ByKey(one(value, OCTET_STRING, "responderID byKey")?),
        _ => return Err(OcspError::Malformed("responderID")),
    };
    t.value(GENERALIZED_TIME, "producedAt")?;
    let responses = t.value(SEQUENCE, "responses")?;
    t.optional(CTX1, "responseExtensions")?;
    t.end("tbsResponseData")?;
    Ok(Basic {
        tbs: tbs.raw,
        responder,
        responses,
        signature_algorithm,
        signature,
        certs,
    })
}

/// The first SingleResponse of `responses` about `id`.
fn find_single(
    responses: &[u8],
    id: &CertId,
    issuer_name: &[u8],
    issuer_key_bits: &[u8],
) -> Result<OcspAnswer, OcspError> {
    // Computed on the first SHA-256 CertID only.
    let mut sha256_hashes = None;
    let mut list = Der::new(responses);
    while !list.is_empty() {
        let mut single = Der::new(list.value(SEQUENCE, "SingleResponse")?);
        let mut cert_id = Der::new(single.value(SEQUENCE, "CertID")?);
        let mut alg = Der::new(cert_id.value(SEQUENCE, "hashAlgorithm")?);
        let hash_oid = alg.value(OID, "hashAlgorithm")?;
        alg.optional(NULL, "hashAlgorithm parameters")?;
        alg.end("hashAlgorithm")?;
        let name_hash = cert_id.value(OCTET_STRING, "issuerNameHash")?;
        let key_hash = cert_id.value(OCTET_STRING, "issuerKeyHash")?;
        let serial = cert_id.value(INTEGER, "serialNumber")?;
        cert_id.end("CertID")?;
        let same_issuer = match hash_oid {
            OID_SHA1 => name_hash == id.issuer_name_sha1 && key_hash == id.issuer_key_sha1,
            OID_SHA256 => {
                let (name, key) = sha256_hashes
                    .get_or_insert_with(|| (sha256(issuer_name), sha256(issuer_key_bits)));
                name_hash == name.as_slice() && key_hash == key.as_slice()
            }
            _ => false,
        };
        if !same_issuer || serial != id.serial.as_slice() {
            continue;
        }
        let status = match single.any("certStatus")? {
            Tlv {
                tag: GOOD,
                value: [],
                ..
            } => CertStatus::Good,
            Tlv { tag: CTX1, .. } => CertStatus::Revoked,
            Tlv {
                tag: UNKNOWN,
                value: [],
                ..
            } => CertStatus::Unknown,
            _ => return Err(OcspError::Malformed("certStatus")),
        };
        let this_update = generalized_time(single.value(GENERALIZED_TIME, "thisUpdate")?)?;
        let next_update = match single.optional(CTX0, "nextUpdate")? {
            Some(next) => Some(generalized_time(one(
                next,
                GENERALIZED_TIME,
                "nextUpdate",
            )?)?),
            None => None,
        };
        single.optional(CTX1, "singleExtensions")?;
        single.end("SingleResponse")?;
        return Ok(OcspAnswer {
            status,
            this_update,
            next_update,
        });
    }
    Err(OcspError::NoMatchingResponse)
}

/// Checks that the response is signed by the issuer's key or by a responder it authorized.
fn check_signer(
    basic: &Basic<'_>,
    issuer_name: &[u8],
    issuer_spki: &SubjectPublicKeyInfo<'_>,
    now: SystemTime,
) -> Result<(), OcspError> {
    let alg = parse_algorithm(basic.signature_algorithm)?;
    // Whether the responderID names the holder of `name` and `key`.
    let names = |name: &[u8], key: &SubjectPublicKeyInfo<'_>| match basic.responder {
        ResponderId::ByName(n) => n == name,
        ResponderId::ByKey(k) => k == sha1(&key.subject_public_key.data),
    };
    let mut candidate = false;
    if names(issuer_name, issuer_spki) {
        candidate = true;
        if verifies(alg, issuer_spki, basic.tbs, basic.signature) {
            return Ok(());
        }
    }
    for der in &basic.certs {
        let Ok((_, cert)) = X509Certificate::from_der(der) else {
            continue;
        };
        if !names(cert.subject().as_raw(), cert.public_key()) {
            continue;
        }
        candidate = true;
        if verifies(alg, cert.public_key(), basic.tbs, basic.signature) {
            return authorized(&cert, issuer_name, issuer_spki, now);
        }
    }
    Err(if candidate {
        OcspError::BadSignature
    } else {
        OcspError::UnauthorizedSigner
    })
}

/// Whether `cert` may sign responses for the issuer (RFC 6960 §4.2.2.2): issued by it (its
/// Name, and its key's signature), listing id-kp-OCSPSigning, valid at `now`.
fn authorized(
    cert: &X509Certificate<'_>,
    issuer_name: &[u8],
    issuer_spki: &SubjectPublicKeyInfo<'_>,
    now: SystemTime,
) -> Result<(), OcspError> {
    if cert.issuer().as_raw() != issuer_name {
        return Err(OcspError::UnauthorizedSigner);
    }
    let alg = algid::scheme_of(&cert.signature_algorithm).map_err(unsupported)?;
    let tbs: &[u8] = cert.tbs_certificate.as_ref();
    if !verifies(alg, issuer_spki, tbs, &cert.signature_value.data) {
        return Err(OcspError::UnauthorizedSigner);
    }
    let eku = cert
        .extended_key_usage()
        .map_err(|_| OcspError::Malformed("responder extendedKeyUsage"))?;
    if !eku.is_some_and(|e| e.value.ocsp_signing) {
        return Err(OcspError::UnauthorizedSigner);
    }
    let validity = cert.validity();
    let not_before = from_unix(validity.not_before.timestamp());
    let not_after = from_unix(validity.not_after.timestamp());
    if now < not_before || now > not_after {
        return Err(OcspError::UnauthorizedSigner);
    }
    Ok(())
}

fn parse_algorithm(der: &[u8]) -> Result<algid::Scheme, OcspError> {
    algid::scheme_of_der(der).map_err(unsupported)
}

/// A refused algorithm keeps its reason; anything else about it is malformed.
fn unsupported(e: AuthError) -> OcspError {
    match e {
        AuthError::UnsupportedAlgorithm(why) => OcspError::UnsupportedAlgorithm(why),
        _ => OcspError::Malformed("signature algorithm"),
    }
}

/// Whether `signature` over `data` verifies under `key` with `scheme`; a scheme that does not
/// fit the key's type or curve does not verify.
fn verifies(
    scheme: algid::Scheme,
    key: &SubjectPublicKeyInfo<'_>,
    data: &[u8],
    signature: &[u8],
) -> bool {
    let key = public_key(key);
    method14_alg(scheme, &key).is_some_and(|alg| {
        UnparsedPublicKey::new(alg, key.bytes())
            .verify(data, signature)
            .is_ok()
    })
}

/// A DER SubjectPublicKeyInfo, nothing after it.
fn spki(der: &[u8]) -> Option<SubjectPublicKeyInfo<'_>> {
    match SubjectPublicKeyInfo::from_der(der) {
        Ok(([], spki)) => Some(spki),
        _ => None,
    }
}

fn sha1(data: &[u8]) -> [u8; 20] {
    let mut out = [0; 20];
    out.copy_from_slice(digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, data).as_ref());
    out
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

fn from_unix(secs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

/// A GeneralizedTime's contents, `YYYYMMDDHHMMSSZ` with optional fractional seconds (ignored),
/// as RFC 6960 §4.2.2.1 has it (UTC, with seconds).
fn generalized_time(s: &[u8]) -> Result<SystemTime, OcspError> {
    const BAD: OcspError = OcspError::Malformed("GeneralizedTime");
    let (digits, rest) = s.split_at_checked(14).ok_or(BAD)?;
    match rest {
        [b'Z'] => {}
        [b'.', frac @ .., b'Z'] if !frac.is_empty() && frac.iter().all(u8::is_ascii_digit) => {}
        _ => return Err(BAD),
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(BAD);
    }
    let num = |range: std::ops::Range<usize>| {
        digits[range]
            .iter()
            .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'))
    };
    let (year, month, day) = (num(0..4), num(4..6), num(6..8));
    let (hour, minute, second) = (num(8..10), num(10..12), num(12..14));
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(BAD),
    };
    if day == 0 || day > month_days || hour > 23 || minute > 59 || second > 59 {
        return Err(BAD);
    }
    // Days from 1970-01-01 to the date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(from_unix(
        days * 86_400 + hour * 3600 + minute * 60 + second,
    ))
}

/// A DER TLV: its tag, its contents, and the whole encoding.
#[derive(Clone, Copy)]
struct Tlv<'a> {
    tag: u8,
    value: &'a [u8],
    raw: &'a [u8],
}

/// A reader over the elements of one DER contents: low-tag-number form, definite lengths in
/// their shortest form, each element inside the input. Elements are read one after another and
/// their contents only sliced, so the input is walked once.
struct Der<'a> {
    rest: &'a [u8],
}

impl<'a> Der<'a> {
    fn new(input: &'a [u8]) -> Self {
        Der { rest: input }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next element, whatever its tag.
    fn any(&mut self, what: &'static str) -> Result<Tlv<'a>, OcspError> {
        let bad = OcspError::Malformed(what);
        let input = self.rest;
        let [tag, first, after @ ..] = input else {
            return Err(bad);
        };
        // Tag number 31 announces a multi-byte tag, which nothing here uses.
        if tag & 0x1f == 0x1f {
            return Err(bad);
        }
        let (len, after) = match *first {
            short @ 0..=0x7f => (usize::from(short), after),
            0x81..=0x83 => {
                let n = usize::from(first & 0x7f);
                let (bytes, after) = after.split_at_checked(n).ok_or(bad.clone())?;
                // Shortest form: no leading zero, and 0x81 only for lengths past 127.
                if bytes[0] == 0 || (n == 1 && bytes[0] < 0x80) {
                    return Err(bad);
                }
                let len = bytes.iter().fold(0usize, |l, b| (l << 8) | usize::from(*b));
                (len, after)
            }
            // Indefinite (0x80), or longer than any input here.
            _ => return Err(bad),
        };
        let value = after.get(..len).ok_or(bad)?;
        let header = input.len() - after.len();
        let (raw, rest) = input.split_at(header + len);
        self.rest = rest;
        Ok(Tlv {
            tag: *tag,
            value,
            raw,
        })
    }

    /// The next element, which must have `tag`.
    fn tlv(&mut self, tag: u8, what: &'static str) -> Result<Tlv<'a>, OcspError> {
        let tlv = self.any(what)?;
        if tlv.tag != tag {
            return Err(OcspError::Malformed(what));
        }
        Ok(tlv)
    }

    /// The contents of the next element, which must have `tag`.
    fn value(&mut self, tag: u8, what: &'static str) -> Result<&'a [u8], OcspError> {
        Ok(self.tlv(tag, what)?.value)
    }

    /// The contents of the next element if it has `tag` (an OPTIONAL field).
    fn optional(&mut self, tag: u8, what: &'static str) -> Result<Option<&'a [u8]>, OcspError> {
        if self.rest.first() == Some(&tag) {
            self.value(tag, what).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The whole input as one element with `tag`, its encoding returned.
    fn whole(mut self, tag: u8, what: &'static str) -> Result<&'a [u8], OcspError> {
        let raw = self.tlv(tag, what)?.raw;
        self.end(what)?;
        Ok(raw)
    }

    /// Checks nothing is left.
    fn end(&self, what: &'static str) -> Result<(), OcspError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(OcspError::Malformed(what))
        }
    }
}

/// The contents of `input`, which must be exactly one element with `tag`.
fn one<'a>(input: &'a [u8], tag: u8, what: &'static str) -> Result<&'a [u8], OcspError> {
    let mut der = Der::new(input);
    let value = der.value(tag, what)?;
    der.end(what)?;
    Ok(value)
}

/// A DER TLV with `tag` around `contents` (request encoding).
fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let len = contents.len();
    let mut out = Vec::with_capacity(contents.len() + 4);
    out.push(tag);
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
    out
}
