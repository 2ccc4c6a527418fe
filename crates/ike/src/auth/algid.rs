//! The AlgorithmIdentifier that opens a method-14 AUTH payload (RFC 7427 §3, encodings as in
//! its Appendix A).

use super::{AuthError, SigHash};
use x509_parser::asn1_rs::Tag;
use x509_parser::prelude::FromDer;
use x509_parser::signature_algorithm::RsaSsaPssParams;
use x509_parser::x509::AlgorithmIdentifier;

/// A signature scheme allowed inside method 14.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// ECDSA, DER-encoded `Ecdsa-Sig-Value` (RFC 3279 §2.2.3).
    Ecdsa(SigHash),
    /// RSASSA-PKCS1-v1_5.
    RsaPkcs1(SigHash),
    /// RSASSA-PSS, MGF1 with the same hash, salt as long as the hash.
    RsaPss(SigHash),
}

// OID contents (without tag and length).
const OID_ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const OID_ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const OID_ECDSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04];
const PKCS1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
const PKCS1_SHA1_RSA: u8 = 0x05;
const PKCS1_MGF1: u8 = 0x08;
const PKCS1_RSASSA_PSS: u8 = 0x0a;
const PKCS1_SHA256_RSA: u8 = 0x0b;
const PKCS1_SHA384_RSA: u8 = 0x0c;
const PKCS1_SHA512_RSA: u8 = 0x0d;
const OID_SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
const OID_SHA384: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02];
const OID_SHA512: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03];

/// The DER AlgorithmIdentifier we send for `scheme` (RFC 7427 Appendix A; parameters absent
/// for ECDSA per RFC 5758 §3.2, NULL for PKCS#1 v1.5 per RFC 4055 §5).
pub(crate) fn encode(scheme: Scheme) -> &'static [u8] {
    match scheme {
        Scheme::Ecdsa(SigHash::Sha256) => &[
            0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02,
        ],
        Scheme::Ecdsa(SigHash::Sha384) => &[
            0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03,
        ],
        Scheme::Ecdsa(SigHash::Sha512) => &[
            0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04,
        ],
        Scheme::RsaPkcs1(SigHash::Sha256) => &[
            0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b, 0x05,
            0x00,
        ],
        Scheme::RsaPkcs1(SigHash::Sha384) => &[
            0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c, 0x05,
            0x00,
        ],
        Scheme::RsaPkcs1(SigHash::Sha512) => &[
            0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d, 0x05,
            0x00,
        ],
        // RSASSA-PSS-params { sha-N, mgf1(sha-N), saltLength N/8 } (RFC 4055 §3.1).
        Scheme::RsaPss(SigHash::Sha256) => &PSS_SHA256,
        Scheme::RsaPss(SigHash::Sha384) => &PSS_SHA384,
        Scheme::RsaPss(SigHash::Sha512) => &PSS_SHA512,
    }
}

const fn pss(hash_last: u8, salt: u8) -> [u8; 67] {
    [
        0x30, 0x41, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a, 0x30, 0x34,
        0xa0, 0x0f, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02,
        hash_last, 0x05, 0x00, 0xa1, 0x1c, 0x30, 0x1a, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7,
        0x0d, 0x01, 0x01, 0x08, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04,
        0x02, hash_last, 0x05, 0x00, 0xa2, 0x03, 0x02, 0x01, salt,
    ]
}
static PSS_SHA256: [u8; 67] = pss(0x01, 32);
static PSS_SHA384: [u8; 67] = pss(0x02, 48);
static PSS_SHA512: [u8; 67] = pss(0x03, 64);

/// Builds method-14 AUTH data: the AlgorithmIdentifier's length, the AlgorithmIdentifier, the
/// signature (RFC 7427 §3).
pub(crate) fn auth_data(scheme: Scheme, signature: &[u8]) -> Vec<u8> {
    let algid = encode(scheme);
    let mut out = Vec::with_capacity(1 + algid.len() + signature.len());
    // Every encoding above is shorter than 256 bytes.
    out.push(algid.len() as u8);
    out.extend_from_slice(algid);
    out.extend_from_slice(signature);
    out
}

/// The scheme a DER signature AlgorithmIdentifier names, nothing after it.
pub(crate) fn scheme_of_der(der: &[u8]) -> Result<Scheme, AuthError> {
    let (trailing, alg) = AlgorithmIdentifier::from_der(der)
        .map_err(|_| AuthError::Malformed("AlgorithmIdentifier is not DER"))?;
    if !trailing.is_empty() {
        return Err(AuthError::Malformed("bytes after the AlgorithmIdentifier"));
    }
    scheme_of(&alg)
}

/// Splits method-14 AUTH data into the scheme it names and the signature.
pub(crate) fn parse(auth_data: &[u8]) -> Result<(Scheme, &[u8]), AuthError> {
    let (&len, rest) = auth_data
        .split_first()
        .ok_or(AuthError::Malformed("empty AUTH data"))?;
    let len = usize::from(len);
    if rest.len() <= len {
        return Err(AuthError::Malformed(
            "AUTH data ends inside its AlgorithmIdentifier",
        ));
    }
    let (der, signature) = rest.split_at(len);
    Ok((scheme_of_der(der)?, signature))
}

/// The scheme a parsed signature AlgorithmIdentifier names (also the signatureAlgorithm of an
/// OCSP response or a certificate, which allow the same algorithms).
pub(crate) fn scheme_of(alg: &AlgorithmIdentifier<'_>) -> Result<Scheme, AuthError> {
    let oid = alg.algorithm.as_bytes();
    let params_absent_or_null = alg.parameters.as_ref().is_none_or(|p| p.tag() == Tag::Null);
    let ecdsa = |hash| {
        params_absent_or_null
            .then_some(Scheme::Ecdsa(hash))
            .ok_or(AuthError::UnsupportedAlgorithm("ECDSA with parameters"))
    };
    let rsa = |hash| {
        params_absent_or_null
            .then_some(Scheme::RsaPkcs1(hash))
            .ok_or(AuthError::UnsupportedAlgorithm(
                "PKCS#1 v1.5 with parameters",
            ))
    };
    match oid {
        OID_ECDSA_SHA256 => ecdsa(SigHash::Sha256),
        OID_ECDSA_SHA384 => ecdsa(SigHash::Sha384),
        OID_ECDSA_SHA512 => ecdsa(SigHash::Sha512),
        OID_ECDSA_SHA1 => Err(AuthError::UnsupportedAlgorithm("SHA-1 (ecdsa-with-SHA1)")),
        [p @ .., last] if p == PKCS1 => match *last {
            PKCS1_SHA256_RSA => rsa(SigHash::Sha256),
            PKCS1_SHA384_RSA => rsa(SigHash::Sha384),
            PKCS1_SHA512_RSA => rsa(SigHash::Sha512),
            PKCS1_SHA1_RSA => Err(AuthError::UnsupportedAlgorithm(
                "SHA-1 (sha1WithRSAEncryption)",
            )),
            PKCS1_RSASSA_PSS => pss_scheme(alg),
            _ => Err(AuthError::UnsupportedAlgorithm("PKCS#1 algorithm")),
        },
        _ => Err(AuthError::UnsupportedAlgorithm(
            "unknown signature algorithm",
        )),
    }
}

/// RSASSA-PSS is accepted only in the shape aws-lc-rs verifies: the same SHA-2 hash for the
/// message and MGF1, salt length = hash length, trailer 1 (RFC 4055 §3.1 defaults are SHA-1,
/// so absent fields are refused).
fn pss_scheme(alg: &AlgorithmIdentifier<'_>) -> Result<Scheme, AuthError> {
    let params = alg
        .parameters
        .as_ref()
        .ok_or(AuthError::UnsupportedAlgorithm(
            "RSASSA-PSS without parameters (SHA-1)",
        ))?;
    let params = RsaSsaPssParams::try_from(params)
        .map_err(|_| AuthError::Malformed("RSASSA-PSS parameters"))?;
    let hash_oid = params.hash_algorithm_oid().as_bytes();
    let (hash, len) = match hash_oid {
        OID_SHA256 => (SigHash::Sha256, 32),
        OID_SHA384 => (SigHash::Sha384, 48),
        OID_SHA512 => (SigHash::Sha512, 64),
        _ => {
            return Err(AuthError::UnsupportedAlgorithm(
                "RSASSA-PSS hash (SHA-1 or unknown)",
            ));
        }
    };
    let mgf = params
        .mask_gen_algorithm()
        .map_err(|_| AuthError::Malformed("RSASSA-PSS mask generation algorithm"))?;
    let mgf1 = mgf.mgf.as_bytes().split_last() == Some((&PKCS1_MGF1, PKCS1));
    if !mgf1 || mgf.hash.as_bytes() != hash_oid {
        return Err(AuthError::UnsupportedAlgorithm(
            "RSASSA-PSS mask generation",
        ));
    }
    if params.salt_length() != len || params.trailer_field() != 1 {
        return Err(AuthError::UnsupportedAlgorithm(
            "RSASSA-PSS salt length or trailer",
        ));
    }
    Ok(Scheme::RsaPss(hash))
}
