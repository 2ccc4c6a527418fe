//! A certificate's public key in the form aws-lc-rs verifies with, and the algorithm that
//! checks a signature of a given scheme under it: the peer's AUTH payload and an OCSP
//! response are both verified this way.

use super::SigHash;
use super::algid::Scheme;
use aws_lc_rs::signature::{self, VerificationAlgorithm};

/// A certificate's public key, as aws-lc-rs takes it.
#[derive(Clone, Debug)]
pub(crate) enum PublicKey {
    /// Uncompressed point (SEC1 0x04‖x‖y).
    EcP256(Vec<u8>),
    EcP384(Vec<u8>),
    EcP521(Vec<u8>),
    /// DER RSAPublicKey (PKCS#1).
    Rsa(Vec<u8>),
    Other,
}

impl PublicKey {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            PublicKey::EcP256(b) | PublicKey::EcP384(b) | PublicKey::EcP521(b) => b,
            PublicKey::Rsa(b) => b,
            PublicKey::Other => &[],
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            PublicKey::EcP256(_) => "ECDSA P-256",
            PublicKey::EcP384(_) => "ECDSA P-384",
            PublicKey::EcP521(_) => "ECDSA P-521",
            PublicKey::Rsa(_) => "RSA",
            PublicKey::Other => "unsupported",
        }
    }
}

/// The aws-lc-rs algorithm verifying `scheme` under `key` (DER ECDSA signatures, as method 14
/// and X.509/OCSP carry them); `None` when they do not fit.
pub(crate) fn method14_alg(
    scheme: Scheme,
    key: &PublicKey,
) -> Option<&'static dyn VerificationAlgorithm> {
    use SigHash::{Sha256, Sha384, Sha512};
    use signature as s;
    Some(match (scheme, key) {
        (Scheme::Ecdsa(Sha256), PublicKey::EcP256(_)) => &s::ECDSA_P256_SHA256_ASN1,
        (Scheme::Ecdsa(Sha384), PublicKey::EcP256(_)) => &s::ECDSA_P256_SHA384_ASN1,
        (Scheme::Ecdsa(Sha512), PublicKey::EcP256(_)) => &s::ECDSA_P256_SHA512_ASN1,
        (Scheme::Ecdsa(Sha256), PublicKey::EcP384(_)) => &s::ECDSA_P384_SHA256_ASN1,
        (Scheme::Ecdsa(Sha384), PublicKey::EcP384(_)) => &s::ECDSA_P384_SHA384_ASN1,
        (Scheme::Ecdsa(Sha512), PublicKey::EcP384(_)) => &s::ECDSA_P384_SHA512_ASN1,
        (Scheme::Ecdsa(Sha256), PublicKey::EcP521(_)) => &s::ECDSA_P521_SHA256_ASN1,
        (Scheme::Ecdsa(Sha384), PublicKey::EcP521(_)) => &s::ECDSA_P521_SHA384_ASN1,
        (Scheme::Ecdsa(Sha512), PublicKey::EcP521(_)) => &s::ECDSA_P521_SHA512_ASN1,
        (Scheme::RsaPkcs1(Sha256), PublicKey::Rsa(_)) => &s::RSA_PKCS1_2048_8192_SHA256,
        (Scheme::RsaPkcs1(Sha384), PublicKey::Rsa(_)) => &s::RSA_PKCS1_2048_8192_SHA384,
        (Scheme::RsaPkcs1(Sha512), PublicKey::Rsa(_)) => &s::RSA_PKCS1_2048_8192_SHA512,
        (Scheme::RsaPss(Sha256), PublicKey::Rsa(_)) => &s::RSA_PSS_2048_8192_SHA256,
        (Scheme::RsaPss(Sha384), PublicKey::Rsa(_)) => &s::RSA_PSS_2048_8192_SHA384,
        (Scheme::RsaPss(Sha512), PublicKey::Rsa(_)) => &s::RSA_PSS_2048_8192_SHA512,
        _ => return None,
    })
}

/// The key of a SubjectPublicKeyInfo, in the form aws-lc-rs verifies with.
pub(crate) fn public_key(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> PublicKey {
    const ID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    const RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
    const P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    const P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
    const P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
    let bits = spki.subject_public_key.data.to_vec();
    match spki.algorithm.algorithm.as_bytes() {
        RSA_ENCRYPTION => PublicKey::Rsa(bits),
        ID_EC_PUBLIC_KEY => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok());
            match curve.as_ref().map(|c| c.as_bytes()) {
                Some(P256) => PublicKey::EcP256(bits),
                Some(P384) => PublicKey::EcP384(bits),
                Some(P521) => PublicKey::EcP521(bits),
                _ => PublicKey::Other,
            }
        }
        _ => PublicKey::Other,
    }
}
