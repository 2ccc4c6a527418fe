//! Our side: certificate chain, private key, identity, AUTH signatures.

use super::algid::{self, Scheme};
use super::peer::{PeerCert, parse_leaf};
use super::public_key::PublicKey;
use super::{AuthError, AuthMethod, Identity, SigHash};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::fmt;
use std::sync::Arc;

/// gate64's IKE credentials: the certificate chain (leaf first) sent in CERT payloads, the
/// private key that signs AUTH, and the identity sent in IDr/IDi. A clone shares the loaded
/// key (loading one checks it, which costs about as much as a signature).
#[derive(Clone)]
pub struct Credentials {
    chain: Vec<CertificateDer<'static>>,
    key: Arc<SigningKey>,
    id: Identity,
    /// The leaf, parsed: which identities it holds.
    leaf: PeerCert,
    /// RSA keys sign method 14 with RSASSA-PSS instead of PKCS#1 v1.5.
    rsa_pss: bool,
    /// Signs method 1 (SHA-1) with the RSA key, when the caller gave a loader for it.
    sha1: Option<Arc<dyn Sha1RsaSigner>>,
}

/// Makes RSASSA-PKCS1-v1_5 signatures over SHA-1 with the credentials' RSA key, for AUTH
/// method 1 (RFC 7296 §3.8). aws-lc-rs, which makes every other signature here, has no SHA-1
/// RSA signing encoding, and this crate makes no foreign calls, so the caller supplies it
/// (gate64's daemon and `gate64 connect` pass aws-lc's `RSA_sign` from gate64-sys) through
/// [`Credentials::from_pem_with_sha1`].
pub trait Sha1RsaSigner: Send + Sync {
    /// The signature of `octets` (SHA-1, PKCS#1 v1.5 padding), as long as the modulus;
    /// `None` when the library refuses.
    fn sign_sha1(&self, octets: &[u8]) -> Option<Vec<u8>>;
}

/// Loads a [`Sha1RsaSigner`] from an RSA private key's DER: PKCS#1 `RSAPrivateKey` when the
/// flag is true, else PKCS#8. `None` when it cannot.
pub type Sha1SignerLoader = fn(&[u8], bool) -> Option<Box<dyn Sha1RsaSigner>>;

/// RSA moduli we sign with, in bits (what aws-lc-rs loads, and what peers verify: RFC 8247
/// §3 wants at least 2048).
const RSA_BITS: std::ops::RangeInclusive<usize> = 2048..=8192;

enum SigningKey {
    /// ECDSA: one key pair per signature encoding aws-lc-rs binds at load time.
    Ecdsa {
        curve: Curve,
        /// r‖s, for methods 9 and 10 (RFC 4754).
        fixed: EcdsaKeyPair,
        /// DER `Ecdsa-Sig-Value`, for method 14 (RFC 7427 §3).
        asn1: EcdsaKeyPair,
    },
    Rsa(RsaKeyPair),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
}

impl Curve {
    /// The only hash aws-lc-rs signs with on this curve (and what RFC 4754 pairs with it).
    fn hash(self) -> SigHash {
        match self {
            Curve::P256 => SigHash::Sha256,
            Curve::P384 => SigHash::Sha384,
        }
    }

    fn classic_method(self) -> AuthMethod {
        match self {
            Curve::P256 => AuthMethod::EcdsaP256Sha256,
            Curve::P384 => AuthMethod::EcdsaP384Sha384,
        }
    }
}

impl fmt::Debug for Credentials {
    /// Never prints key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("chain_len", &self.chain.len())
            .field("key", &self.key_name())
            .field("id", &self.id.to_string())
            .finish()
    }
}

#[cfg(test)]
thread_local! {
    /// Calls of [`Credentials::sign`] on this thread: the responder's tests check which
    /// thread signs.
    static SIGNATURES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many times [`Credentials::sign`] was called on this thread.
#[cfg(test)]
pub(crate) fn signatures_on_this_thread() -> usize {
    SIGNATURES.with(std::cell::Cell::get)
}

impl Credentials {
    /// Loads the chain (PEM CERTIFICATE blocks, leaf first) and the private key (PKCS#8
    /// `PRIVATE KEY`, SEC1 `EC PRIVATE KEY` or PKCS#1 `RSA PRIVATE KEY`; ECDSA P-256/P-384 or
    /// RSA). The key must belong to the leaf. The identity is the leaf's subject as DER_ASN1_DN.
    ///
    /// An RSA key loaded this way signs method 14 only; [`Credentials::from_pem_with_sha1`]
    /// makes it sign method 1 too.
    pub fn from_pem(chain: &[u8], key: &[u8]) -> Result<Self, AuthError> {
        Self::load(chain, key, None)
    }

    /// As [`Credentials::from_pem`], and an RSA key also signs method 1 (RSASSA-PKCS1-v1_5
    /// with SHA-1, for peers that send no SIGNATURE_HASH_ALGORITHMS) through the signer
    /// `sha1` loads from the same key. The signer is checked to be the key's: a test
    /// signature must verify under the leaf's public key ([`AuthError::KeyMismatch`] if not).
    /// No effect on ECDSA keys.
    pub fn from_pem_with_sha1(
        chain: &[u8],
        key: &[u8],
        sha1: Sha1SignerLoader,
    ) -> Result<Self, AuthError> {
        Self::load(chain, key, Some(sha1))
    }

    fn load(chain: &[u8], key: &[u8], sha1: Option<Sha1SignerLoader>) -> Result<Self, AuthError> {
        let chain = CertificateDer::pem_slice_iter(chain)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| AuthError::Malformed("certificate PEM"))?;
        let leaf = chain.first().ok_or(AuthError::NoCertificate)?;
        let parsed = parse_leaf(leaf)?;
        let key_der = PrivateKeyDer::from_pem_slice(key).map_err(|_| {
            AuthError::BadPrivateKey("no unencrypted PKCS#8, SEC1 or PKCS#1 PEM block")
        })?;
        let key = load_key(&parsed.key, &key_der)?;
        let sha1 = match (&key, sha1) {
            (SigningKey::Rsa(_), Some(loader)) => {
                Some(Arc::from(load_sha1(&parsed.key, &key_der, loader)?))
            }
            _ => None,
        };
        let id = Identity::der_dn(&parsed.subject_der);
        Ok(Self {
            chain,
            key: Arc::new(key),
            id,
            leaf: parsed,
            rsa_pss: false,
            sha1,
        })
    }

    /// Replaces the identity sent in the ID payload (e.g. an FQDN or IP address ID instead of
    /// the DN). The certificate must vouch for it (subjectAltName, see
    /// [`super::PeerCert::matches_id`]), else [`AuthError::IdMismatch`]: the peer would refuse it.
    pub fn with_id(mut self, id: Identity) -> Result<Self, AuthError> {
        if !self.holds_id(&id) {
            return Err(AuthError::IdMismatch);
        }
        self.id = id;
        Ok(self)
    }

    /// Whether the leaf vouches for `id` (subjectAltName, subject DN or key ID, as a peer's
    /// certificate is matched).
    pub fn holds_id(&self, id: &Identity) -> bool {
        self.leaf.matches_id(id)
    }

    /// The leaf's subject DN as text (as `gate64 status` shows identities).
    pub fn subject(&self) -> String {
        self.leaf.subject()
    }

    /// The leaf's subject DN as an identity (DER_ASN1_DN).
    pub fn id_dn(&self) -> Identity {
        Identity::der_dn(&self.leaf.subject_der)
    }

    /// The leaf's first subjectAltName an ID payload can carry, else its subject DN.
    pub fn first_san_or_dn(&self) -> Identity {
        self.leaf.first_san_or_dn()
    }

    /// Makes an RSA key sign method 14 with RSASSA-PSS (MGF1 with the same hash, salt as long
    /// as the hash, RFC 7427 Appendix A.4) instead of PKCS#1 v1.5, as strongSwan does with
    /// `rsa_pss = yes`. No effect on ECDSA keys.
    pub fn with_rsa_pss(mut self) -> Self {
        self.rsa_pss = true;
        self
    }

    /// The leaf certificate's DER, for the first CERT payload.
    pub fn leaf_der(&self) -> &[u8] {
        self.leaf()
    }

    /// Every certificate's DER, leaf first, one CERT payload (encoding 4) each.
    pub fn chain_der(&self) -> impl Iterator<Item = &[u8]> {
        self.chain.iter().map(|c| c.as_ref())
    }

    /// The identity for the ID payload (DER_ASN1_DN of the leaf's subject unless replaced with
    /// [`Credentials::with_id`]).
    pub fn id(&self) -> Identity {
        self.id.clone()
    }

    /// The classic (RFC 7296 §3.8) method that fits our key: 9 for P-256, 10 for P-384, 1 for
    /// RSA (which [`Credentials::sign`] produces only with a SHA-1 signer,
    /// [`Credentials::from_pem_with_sha1`]).
    pub fn classic_method(&self) -> AuthMethod {
        match &*self.key {
            SigningKey::Ecdsa { curve, .. } => curve.classic_method(),
            SigningKey::Rsa(_) => AuthMethod::RsaPkcs1,
        }
    }

    /// Signs `octets` (RFC 7296 §2.15: the caller builds them) for the AUTH payload and returns
    /// the method actually used with the AUTH data.
    ///
    /// - [`AuthMethod::DigitalSignature`]: the hash is the first one we can sign with that the
    ///   peer listed in SIGNATURE_HASH_ALGORITHMS (`peer_hashes`): for ECDSA the curve's own hash
    ///   (SHA-256 for P-256, SHA-384 for P-384), for RSA SHA-256, SHA-384, SHA-512 in that order
    ///   (PKCS#1 v1.5, or RSASSA-PSS after [`Credentials::with_rsa_pss`]). An empty
    ///   `peer_hashes` means the default: SHA-256 (SHA-384 on P-384).
    ///   When the peer lists hashes but none fits, an ECDSA key falls back to its classic method
    ///   (9 or 10), which the returned method says; an RSA key signs with every hash
    ///   [`SigHash`] names, so some always fits.
    /// - [`AuthMethod::EcdsaP256Sha256`], [`AuthMethod::EcdsaP384Sha384`]: r‖s, the key must be
    ///   on that curve ([`AuthError::MethodKeyMismatch`]).
    /// - [`AuthMethod::RsaPkcs1`]: PKCS#1 v1.5 over SHA-1 (RFC 7296 §3.8, as RFC 7427 §1
    ///   reads it) through the SHA-1 signer; without one, or with an ECDSA key,
    ///   [`AuthError::UnsupportedMethod`].
    pub fn sign(
        &self,
        method: AuthMethod,
        octets: &[u8],
        peer_hashes: &[SigHash],
    ) -> Result<(AuthMethod, Vec<u8>), AuthError> {
        #[cfg(test)]
        SIGNATURES.with(|n| n.set(n.get() + 1));
        match (method, &*self.key) {
            (AuthMethod::DigitalSignature, SigningKey::Ecdsa { curve, asn1, .. }) => {
                let hash = curve.hash();
                if peer_hashes.is_empty() || peer_hashes.contains(&hash) {
                    let sig = ecdsa_sign(asn1, octets)?;
                    Ok((method, algid::auth_data(Scheme::Ecdsa(hash), &sig)))
                } else {
                    self.sign(curve.classic_method(), octets, &[])
                }
            }
            (AuthMethod::DigitalSignature, SigningKey::Rsa(key)) => {
                let hash = if peer_hashes.is_empty() {
                    SigHash::Sha256
                } else {
                    *SigHash::ALL
                        .iter()
                        .find(|h| peer_hashes.contains(h))
                        .ok_or(AuthError::NoCommonHash)?
                };
                let scheme = if self.rsa_pss {
                    Scheme::RsaPss(hash)
                } else {
                    Scheme::RsaPkcs1(hash)
                };
                let sig = rsa_sign(key, scheme, octets)?;
                Ok((method, algid::auth_data(scheme, &sig)))
            }
            (
                AuthMethod::EcdsaP256Sha256 | AuthMethod::EcdsaP384Sha384,
                SigningKey::Ecdsa { curve, fixed, .. },
            ) if curve.classic_method() == method => Ok((method, ecdsa_sign(fixed, octets)?)),
            (AuthMethod::EcdsaP256Sha256 | AuthMethod::EcdsaP384Sha384, _) => {
                Err(AuthError::MethodKeyMismatch {
                    method: method.code(),
                    key: self.key_name(),
                })
            }
            (AuthMethod::RsaPkcs1, SigningKey::Rsa(_)) => match &self.sha1 {
                Some(signer) => Ok((
                    method,
                    signer.sign_sha1(octets).ok_or(AuthError::SigningFailed)?,
                )),
                None => Err(AuthError::UnsupportedMethod(method.code())),
            },
            (AuthMethod::RsaPkcs1, SigningKey::Ecdsa { .. }) => {
                Err(AuthError::UnsupportedMethod(method.code()))
            }
        }
    }

    fn leaf(&self) -> &[u8] {
        // `from_pem` refuses an empty chain.
        self.chain.first().map_or(&[], |c| c.as_ref())
    }

    fn key_name(&self) -> &'static str {
        match &*self.key {
            SigningKey::Ecdsa {
                curve: Curve::P256, ..
            } => "ECDSA P-256",
            SigningKey::Ecdsa {
                curve: Curve::P384, ..
            } => "ECDSA P-384",
            SigningKey::Rsa(_) => "RSA",
        }
    }
}

/// Loads the private key as the type the leaf's public key has, and checks they are a pair.
fn load_key(leaf_key: &PublicKey, der: &PrivateKeyDer<'_>) -> Result<SigningKey, AuthError> {
    let (curve, fixed_alg, asn1_alg) = match leaf_key {
        PublicKey::EcP256(_) => (
            Curve::P256,
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        ),
        PublicKey::EcP384(_) => (
            Curve::P384,
            &signature::ECDSA_P384_SHA384_FIXED_SIGNING,
            &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
        ),
        PublicKey::Rsa(public) => {
            let pair = match der {
                PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der()),
                PrivateKeyDer::Pkcs8(k) => RsaKeyPair::from_pkcs8(k.secret_pkcs8_der()),
                _ => return Err(AuthError::BadPrivateKey("the leaf has an RSA key")),
            }
            .map_err(|e| match e.description_() {
                "TooSmall" => AuthError::BadPrivateKey(
                    "RSA key shorter than 2048 bits (2048 to 8192 accepted)",
                ),
                "TooLarge" => AuthError::BadPrivateKey(
                    "RSA key longer than 8192 bits (2048 to 8192 accepted)",
                ),
                _ => AuthError::BadPrivateKey("not an RSA key"),
            })?;
            // aws-lc-rs holds the same bounds today; checked here so no version loosens them.
            if !RSA_BITS.contains(&(pair.public_modulus_len() * 8)) {
                return Err(AuthError::BadPrivateKey(
                    "RSA key outside 2048 to 8192 bits",
                ));
            }
            if pair.public_key().as_ref() != public.as_slice() {
                return Err(AuthError::KeyMismatch);
            }
            return Ok(SigningKey::Rsa(pair));
        }
        PublicKey::EcP521(_) => return Err(AuthError::UnsupportedKey("ECDSA P-521")),
        PublicKey::Other => return Err(AuthError::UnsupportedKey("not ECDSA P-256/P-384 or RSA")),
    };
    let raw = match der {
        PrivateKeyDer::Sec1(k) => k.secret_sec1_der(),
        PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der(),
        _ => return Err(AuthError::BadPrivateKey("the leaf has an ECDSA key")),
    };
    // `from_private_key_der` takes PKCS#8 and SEC1 (RFC 5915) alike.
    let fixed = EcdsaKeyPair::from_private_key_der(fixed_alg, raw)
        .map_err(|_| AuthError::BadPrivateKey("not an ECDSA key on the leaf's curve"))?;
    let asn1 = EcdsaKeyPair::from_private_key_der(asn1_alg, raw)
        .map_err(|_| AuthError::BadPrivateKey("not an ECDSA key on the leaf's curve"))?;
    if fixed.public_key().as_ref() != leaf_key.bytes() {
        return Err(AuthError::KeyMismatch);
    }
    Ok(SigningKey::Ecdsa { curve, fixed, asn1 })
}

/// Loads the method-1 signer from the same key and checks it is the leaf's: a SHA-1 signature
/// of a fixed text must verify under the leaf's public key.
fn load_sha1(
    leaf_key: &PublicKey,
    der: &PrivateKeyDer<'_>,
    loader: Sha1SignerLoader,
) -> Result<Box<dyn Sha1RsaSigner>, AuthError> {
    const PROBE: &[u8] = b"gate64 method 1 signer check";
    let signer = match der {
        PrivateKeyDer::Pkcs1(k) => loader(k.secret_pkcs1_der(), true),
        PrivateKeyDer::Pkcs8(k) => loader(k.secret_pkcs8_der(), false),
        _ => None,
    }
    .ok_or(AuthError::BadPrivateKey(
        "the RSA key does not load for SHA-1 signing",
    ))?;
    let sig = signer.sign_sha1(PROBE).ok_or(AuthError::SigningFailed)?;
    signature::UnparsedPublicKey::new(
        &signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
        leaf_key.bytes(),
    )
    .verify(PROBE, &sig)
    .map_err(|_| AuthError::KeyMismatch)?;
    Ok(signer)
}

fn ecdsa_sign(key: &EcdsaKeyPair, octets: &[u8]) -> Result<Vec<u8>, AuthError> {
    key.sign(&SystemRandom::new(), octets)
        .map(|s| s.as_ref().to_vec())
        .map_err(|_| AuthError::SigningFailed)
}

fn rsa_sign(key: &RsaKeyPair, scheme: Scheme, octets: &[u8]) -> Result<Vec<u8>, AuthError> {
    let encoding: &'static dyn signature::RsaEncoding = match scheme {
        Scheme::RsaPkcs1(SigHash::Sha256) => &signature::RSA_PKCS1_SHA256,
        Scheme::RsaPkcs1(SigHash::Sha384) => &signature::RSA_PKCS1_SHA384,
        Scheme::RsaPkcs1(SigHash::Sha512) => &signature::RSA_PKCS1_SHA512,
        // aws-lc-rs's PSS encodings use a salt as long as the hash, as algid::encode states.
        Scheme::RsaPss(SigHash::Sha256) => &signature::RSA_PSS_SHA256,
        Scheme::RsaPss(SigHash::Sha384) => &signature::RSA_PSS_SHA384,
        Scheme::RsaPss(SigHash::Sha512) => &signature::RSA_PSS_SHA512,
        Scheme::Ecdsa(_) => return Err(AuthError::SigningFailed),
    };
    let mut sig = vec![0; key.public_modulus_len()];
    key.sign(encoding, &SystemRandom::new(), octets, &mut sig)
        .map_err(|_| AuthError::SigningFailed)?;
    Ok(sig)
}
