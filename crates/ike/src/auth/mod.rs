//! IKEv2 certificate authentication: our credentials, the peer's certificate chain, the AUTH
//! payload's signature and the identities around it.
//!
//! Covers RFC 7296 §2.15 (what is signed is built by the caller: the octets passed to
//! [`Credentials::sign`] and [`PeerCert::verify_auth`]), §3.5 (ID payload types), §3.6/§3.7
//! (CERT and CERTREQ with encoding 4, X.509 signature), §3.8 (AUTH methods 1, 9 and 10, with
//! RFC 4754 for the ECDSA ones), RFC 7427 (method 14, Digital Signature, and the hashes of
//! SIGNATURE_HASH_ALGORITHMS) and the certificate profile of RFC 4945 §5.
//!
//! The rules, all enforced here and nowhere else:
//!
//! - **Chain**: [`TrustAnchors::verify_peer`] builds a path from the peer's leaf through the
//!   intermediates it sent to one of the configured CAs with rustls-webpki, at the time the caller
//!   passes (no clock is read here). Certificate signatures must use SHA-256 or better (webpki
//!   refuses SHA-1-signed certificates).
//! - **Shape**: before that, [`check_chain_shape`] refuses more than [`MAX_PEER_CERTS`]
//!   certificates, or intermediates that do not form one linear chain above the leaf (two with
//!   one subject, a self-issued one, one off the leaf's path), so path building tries at most
//!   one candidate per step whatever an unauthenticated peer sends.
//! - **Extended key usage**: accepted when the extension is absent, or when it lists
//!   id-kp-ipsecIKE (1.3.6.1.5.5.7.3.17, RFC 4945 §5.1.3.12), anyExtendedKeyUsage, serverAuth or
//!   clientAuth (strongSwan's `pki --issue` writes the last two). Anything else is
//!   [`AuthError::BadKeyUsage`]. The same rule applies to intermediates that carry the extension.
//!   Anchors that authenticate clients ([`TrustAnchors::for_clients`], which the responder
//!   applies) hold the leaf to [`ClientEku`]: by default it must list clientAuth or
//!   id-kp-ipsecIKE, so a server certificate or one without the extension is no client's.
//! - **Revocation**: with CRLs ([`TrustAnchors::with_crls`]) a certificate of the chain that
//!   its issuer's CRL lists is [`AuthError::Revoked`]; one whose issuer has no CRL is not
//!   checked.
//! - **OCSP**: [`ocsp`] builds the request about a verified leaf and checks the responder's
//!   answer (RFC 6960); fetching and caching answers is the caller's.
//! - **Key usage**: when the leaf has the extension it must allow digitalSignature or
//!   nonRepudiation (RFC 4945 §5.1.3.2), else [`AuthError::BadKeyUsage`].
//! - **AUTH methods**: 1 (RSA PKCS#1 v1.5 with SHA-1; aws-lc-rs has no SHA-1 RSA signing
//!   encoding, so [`Credentials::sign`] makes it only through the [`Sha1RsaSigner`] the caller
//!   gives [`Credentials::from_pem_with_sha1`]), 9 (ECDSA P-256/SHA-256, r‖s in 64
//!   bytes), 10 (ECDSA P-384/SHA-384, r‖s in 96 bytes) and 14. Inside method 14 only
//!   ecdsa-with-SHA256/384/512, sha256/384/512WithRSAEncryption and RSASSA-PSS with SHA-256 or
//!   better (MGF1 with the same hash, salt as long as the hash) are accepted; SHA-1 is refused.
//!   We sign method 14 with ECDSA on the key's own curve hash, or with RSA PKCS#1 v1.5
//!   (RSASSA-PSS after [`Credentials::with_rsa_pss`]).
//! - **Identities**: the ID payload must match the certificate ([`PeerCert::matches_id`]): a DER
//!   DN equals the subject, an FQDN, email address or IP address is among the subjectAltNames,
//!   a KEY_ID equals the subjectKeyIdentifier or the SHA-1 of the SubjectPublicKeyInfo.
//!   Clients are told apart by [`IdentityKey`] (issuer and subject DER), never by the
//!   rendered name, which is escaped as RFC 4514 says ([`dn`]).
//!
//! Nothing here panics on input; every refusal is an [`AuthError`] variant naming it (the IKE
//! state machine answers them all with AUTHENTICATION_FAILED, RFC 7296 §2.21.2). All
//! cryptography is aws-lc-rs, chain building rustls-webpki and certificate parsing
//! x509-parser.

mod algid;
mod ca_set;
pub(crate) mod chain_cache;
#[cfg(test)]
mod chain_cache_tests;
mod chain_shape;
mod credentials;
mod crl;
#[cfg(test)]
pub(crate) mod crl_tests;
pub mod dn;
mod identity;
#[cfg(test)]
mod interop_tests;
pub mod ocsp;
#[cfg(test)]
mod ocsp_tests;
mod peer;
mod public_key;
#[cfg(test)]
pub(crate) mod tests;

pub use ca_set::{CaFingerprint, CaSet};
pub use chain_cache::{ChainCacheCounts, ChainCacheStats};
pub use chain_shape::{MAX_PEER_CERTS, check_chain_shape};
#[cfg(test)]
pub(crate) use credentials::signatures_on_this_thread;
pub use credentials::{Credentials, Sha1RsaSigner, Sha1SignerLoader};
pub use crl::{Crl, Crls, RevocationKey};
pub use dn::IdentityKey;
pub use identity::{IdType, Identity};
pub use peer::{
    CertSummary, ClientEku, OcspQuery, PeerCert, TrustAnchors, leaf_has_client_eku, serial_hex,
};

/// AUTH payload authentication methods with certificates (RFC 7296 §3.8, RFC 7427 §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AuthMethod {
    /// RSA Digital Signature: RSASSA-PKCS1-v1_5 with SHA-1 (RFC 7296 §3.8). Verified; produced
    /// only with a [`Sha1RsaSigner`].
    RsaPkcs1 = 1,
    /// ECDSA with SHA-256 on P-256, signature r‖s (RFC 4754 §7).
    EcdsaP256Sha256 = 9,
    /// ECDSA with SHA-384 on P-384, signature r‖s (RFC 4754 §7).
    EcdsaP384Sha384 = 10,
    /// Digital Signature: an ASN.1 AlgorithmIdentifier precedes the signature (RFC 7427 §3).
    DigitalSignature = 14,
}

impl AuthMethod {
    /// The Auth Method field value.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The method for an Auth Method field value, `None` for methods not handled here
    /// (shared keys, DSS, NULL, ...).
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::RsaPkcs1),
            9 => Some(Self::EcdsaP256Sha256),
            10 => Some(Self::EcdsaP384Sha384),
            14 => Some(Self::DigitalSignature),
            _ => None,
        }
    }
}

impl TryFrom<u8> for AuthMethod {
    type Error = AuthError;

    fn try_from(code: u8) -> Result<Self, AuthError> {
        Self::from_code(code).ok_or(AuthError::UnsupportedMethod(code))
    }
}

/// Hash algorithms of the SIGNATURE_HASH_ALGORITHMS notification (RFC 7427 §4, IANA "IKEv2
/// Hash Algorithms"). SHA-1 (1) and Identity (5) are deliberately absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum SigHash {
    /// SHA2-256.
    Sha256 = 2,
    /// SHA2-384.
    Sha384 = 3,
    /// SHA2-512.
    Sha512 = 4,
}

impl SigHash {
    /// Every hash we sign and verify with, in the order we announce them.
    pub const ALL: [SigHash; 3] = [SigHash::Sha256, SigHash::Sha384, SigHash::Sha512];

    /// The 16-bit hash algorithm identifier.
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// The hash for an identifier, `None` for the ones we do not use.
    pub const fn from_code(code: u16) -> Option<Self> {
        match code {
            2 => Some(Self::Sha256),
            3 => Some(Self::Sha384),
            4 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// The hashes a peer's SIGNATURE_HASH_ALGORITHMS notification data lists (a sequence of
    /// 16-bit identifiers), in its order, skipping those we do not use.
    pub fn parse_notify(data: &[u8]) -> Result<Vec<SigHash>, AuthError> {
        if !data.len().is_multiple_of(2) {
            return Err(AuthError::Malformed(
                "SIGNATURE_HASH_ALGORITHMS data has an odd length",
            ));
        }
        Ok(data
            .chunks_exact(2)
            .filter_map(|c| Self::from_code(u16::from_be_bytes([c[0], c[1]])))
            .collect())
    }

    /// The notification data announcing [`SigHash::ALL`].
    pub fn notify_data() -> Vec<u8> {
        Self::ALL
            .iter()
            .flat_map(|h| h.code().to_be_bytes())
            .collect()
    }
}

/// Why a credential, a certificate, an identity or an AUTH payload was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// Bytes that do not parse: PEM, DER, an AUTH payload or a notification.
    #[error("malformed input: {0}")]
    Malformed(&'static str),
    /// PEM input without any CERTIFICATE block.
    #[error("no certificate in the PEM input")]
    NoCertificate,
    /// The private key PEM holds no key we can load (encrypted, wrong type, corrupt).
    #[error("unusable private key: {0}")]
    BadPrivateKey(&'static str),
    /// The private key does not belong to the leaf certificate.
    #[error("the private key does not belong to the leaf certificate")]
    KeyMismatch,
    /// A public key type this module does not sign or verify with.
    #[error("unsupported key type: {0}")]
    UnsupportedKey(&'static str),
    /// The chain does not lead to any configured CA (also when a certificate names a trusted
    /// CA as its issuer but that CA's key does not verify its signature).
    #[error("certificate not issued by a trusted CA")]
    UnknownCa,
    /// A certificate of the chain is past its notAfter.
    #[error("certificate expired")]
    Expired,
    /// A certificate of the chain is before its notBefore.
    #[error("certificate not yet valid")]
    NotYetValid,
    /// A CRL of the certificate's issuer lists it ([`TrustAnchors::with_crls`]).
    #[error("certificate revoked")]
    Revoked,
    /// The issuer's CRL is past its nextUpdate, and expired CRLs refuse
    /// ([`Crls::new`]).
    #[error("the issuer's CRL has expired")]
    CrlExpired,
    /// OCSP is required and gave no answer that the certificate is good: the responder could
    /// not be reached, its answer did not verify, or it said `unknown`.
    #[error("no OCSP answer that the certificate is good: {0}")]
    OcspUnavailable(String),
    /// The peer sent more certificates than [`MAX_PEER_CERTS`] (refused before any is parsed).
    #[error("{0} certificates sent, at most {max} accepted", max = MAX_PEER_CERTS)]
    TooManyCertificates(usize),
    /// The certificates sent do not form one linear chain from the leaf
    /// ([`check_chain_shape`]); refused before any path building.
    #[error("certificates do not form a linear chain: {0}")]
    ChainNotLinear(&'static str),
    /// The chain is refused for another reason (webpki's reason as text).
    #[error("certificate chain refused: {0}")]
    BadChain(String),
    /// Key usage or extended key usage does not allow IKE signatures.
    #[error("certificate key usage does not allow IKE: {0}")]
    BadKeyUsage(&'static str),
    /// The AUTH signature does not verify with the peer's key.
    #[error("AUTH signature does not verify")]
    BadSignature,
    /// The ID payload names something the certificate does not vouch for.
    #[error("identity does not match the certificate")]
    IdMismatch,
    /// The responder's certificate (which verified) does not hold the identity the initiator
    /// was configured to expect of it ([`crate::initiator::Initiator::with_server_id`]).
    #[error(
        "identity does not match the certificate: expected {expected}, the certificate \
         carries {carried}"
    )]
    ExpectedIdMismatch {
        /// The identity expected, as [`Identity`]'s `Display` writes it (`ip:…`, `fqdn:…`).
        expected: String,
        /// Every identity the certificate holds ([`PeerCert::held_ids`]), comma-separated.
        carried: String,
    },
    /// An AUTH method this module does not handle (or does not produce, for signing).
    #[error("unsupported AUTH method {0}")]
    UnsupportedMethod(u8),
    /// A method that needs another key type or curve than the certificate's.
    #[error("AUTH method {method} does not fit a {key} key")]
    MethodKeyMismatch {
        /// The Auth Method field value.
        method: u8,
        /// The certificate's key type.
        key: &'static str,
    },
    /// A signature algorithm inside method 14 that is refused (SHA-1, unknown OID, odd PSS
    /// parameters).
    #[error("unsupported signature algorithm: {0}")]
    UnsupportedAlgorithm(&'static str),
    /// No hash both sides support for method 14, and no classic method for our key.
    #[error("no signature hash in common with the peer")]
    NoCommonHash,
    /// An ID type this module does not handle.
    #[error("unsupported ID type {0}")]
    UnsupportedIdType(u8),
    /// The crypto library refused to sign.
    #[error("signing failed")]
    SigningFailed,
}
