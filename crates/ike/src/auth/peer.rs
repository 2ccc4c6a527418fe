//! The peer's side: trust anchors, chain verification, the verified leaf and its AUTH
//! signature.

use super::algid;
use super::chain_cache::{self, ChainCache, ChainFacts, Entry, OwnedPathCert};
use super::crl::{Crls, PathCert, RevocationKey};
use super::public_key::{PublicKey, method14_alg, public_key};
use super::{AuthError, AuthMethod, IdType, Identity, IdentityKey};
use aws_lc_rs::digest;
use aws_lc_rs::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, SignatureVerificationAlgorithm, TrustAnchor, UnixTime};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use webpki::{
    EndEntityCert, ExtendedKeyUsageValidator, KeyPurposeId, KeyPurposeIdIter, KeyUsage,
    RequiredEkuNotFoundContext,
};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

/// The CAs whose certificates authenticate peers (`[ipsec] ca`).
#[derive(Debug, Clone)]
pub struct TrustAnchors {
    /// Shared by clones: a verification job takes a clone of the responder's anchors.
    anchors: Arc<[TrustAnchor<'static>]>,
    certreq: Vec<u8>,
    /// The rule a client's leaf is held to, when these anchors authenticate clients; `None`
    /// for anchors that authenticate a server (the initiator's).
    client_eku: Option<ClientEku>,
    /// The CRLs a chain is checked against ([`TrustAnchors::with_crls`]); none by default.
    crls: Crls,
    /// Chains these anchors verified and whose holders proved their key
    /// ([`TrustAnchors::remember_verified`]); shared by clones, empty again after
    /// [`TrustAnchors::for_clients`] or [`TrustAnchors::with_crls`] (its counters kept).
    pub(super) cache: Arc<ChainCache<PeerCert>>,
}

/// Chains of at most this many certificates and bytes are looked up in the cache; longer ones
/// (no honest client's) go straight to verification, unhashed.
const CACHED_CERTS: usize = 4;
const CACHED_BYTES: usize = 8 * 1024;

/// Which extended key usages a client's certificate must list (`[ipsec] client_eku`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientEku {
    /// The leaf lists clientAuth or id-kp-ipsecIKE (RFC 4945 §5.1.3.12): a server's
    /// certificate (serverAuth alone), one for any purpose, or one without the extension
    /// does not authenticate a client.
    #[default]
    Strict,
    /// Any of the purposes the chain rule accepts, or none: the extension absent, ipsecIKE,
    /// anyExtendedKeyUsage, serverAuth or clientAuth.
    Any,
}

impl TrustAnchors {
    /// Loads one or more CA certificates from PEM.
    pub fn from_pem(pem: &[u8]) -> Result<Self, AuthError> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| AuthError::Malformed("CA certificate PEM"))?;
        if certs.is_empty() {
            return Err(AuthError::NoCertificate);
        }
        Self::from_der(certs.iter().map(|c| c.as_ref()))
    }

    /// Loads CA certificates from DER.
    pub fn from_der<'a>(certs: impl IntoIterator<Item = &'a [u8]>) -> Result<Self, AuthError> {
        let mut anchors = Vec::new();
        let mut certreq = Vec::new();
        for der in certs {
            let cert = CertificateDer::from(der);
            let anchor = webpki::anchor_from_trusted_cert(&cert)
                .map_err(|_| AuthError::Malformed("CA certificate"))?;
            anchors.push(anchor.to_owned());
            let (_, parsed) = X509Certificate::from_der(der)
                .map_err(|_| AuthError::Malformed("CA certificate"))?;
            // RFC 7296 §3.7: each CA is named by the SHA-1 hash of its SubjectPublicKeyInfo.
            let hash = digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, parsed.public_key().raw);
            certreq.extend_from_slice(hash.as_ref());
        }
        Ok(Self {
            anchors: anchors.into(),
            certreq,
            client_eku: None,
            crls: Crls::default(),
            cache: Arc::default(),
        })
    }

    /// These anchors authenticate clients, whose leaf must then meet `eku`.
    pub fn for_clients(mut self, eku: ClientEku) -> Self {
        self.client_eku = Some(eku);
        self.cache = Arc::new(self.cache.emptied());
        self
    }

    /// Chains are checked against `crls` too: a certificate one of them revokes (leaf or
    /// intermediate) is [`AuthError::Revoked`].
    pub fn with_crls(mut self, crls: Crls) -> Self {
        self.crls = crls;
        self.cache = Arc::new(self.cache.emptied());
        self
    }

    /// [`TrustAnchors::with_crls`] keeping the cache: for tests of what a hit checks.
    #[cfg(test)]
    pub(crate) fn with_crls_keeping_cache(mut self, crls: Crls) -> Self {
        self.crls = crls;
        self
    }

    /// The CRLs set by [`TrustAnchors::with_crls`].
    pub fn crls(&self) -> &Crls {
        &self.crls
    }

    /// The client rule set by [`TrustAnchors::for_clients`], if any.
    pub fn client_eku(&self) -> Option<ClientEku> {
        self.client_eku
    }

    /// How many CAs are configured.
    pub fn len(&self) -> usize {
        self.anchors.len()
    }

    /// Whether no CA is configured (never after a successful load).
    pub fn is_empty(&self) -> bool {
        self.anchors.is_empty()
    }

    /// The Certification Authority field of a CERTREQ payload with encoding 4 (X.509
    /// signature): the SHA-1 of each CA's SubjectPublicKeyInfo, concatenated (RFC 7296 §3.7).
    pub fn certreq_data(&self) -> Vec<u8> {
        self.certreq.clone()
    }

    /// Verifies the peer's leaf certificate (first CERT payload) and the intermediates it sent,
    /// at `now`, with the extended key usage and key usage rules of the module docs. A chain
    /// remembered by [`TrustAnchors::remember_verified`] skips the signatures and parsing
    /// (see [`super::chain_cache`]); its validity period and revocation are checked anew.
    pub fn verify_peer(
        &self,
        leaf: &[u8],
        intermediates: &[&[u8]],
        now: SystemTime,
    ) -> Result<PeerCert, AuthError> {
        let size = leaf.len() + intermediates.iter().map(|c| c.len()).sum::<usize>();
        if 1 + intermediates.len() > CACHED_CERTS || size > CACHED_BYTES {
            return self.verify_uncached(leaf, intermediates, now, None);
        }
        let chain = chain_cache::chain_bytes(leaf, intermediates);
        let key = chain_cache::chain_key(&chain);
        if let Some(entry) = self.cache.get(&key, &chain)
            && let Some(peer) = self.cached(&entry, now)?
        {
            return Ok(peer);
        }
        self.verify_uncached(leaf, intermediates, now, Some(chain))
    }

    /// Keeps the chain `peer` was verified from (by these anchors' [`TrustAnchors::verify_peer`])
    /// for later handshakes: to be called once its holder proved its key, the AUTH signature
    /// verified. Nothing happens for a peer from other anchors or from the cache itself.
    pub fn remember_verified(&self, peer: &PeerCert) {
        if let Some(facts) = peer.chain.as_deref() {
            let mut leaf = peer.clone();
            leaf.chain = None;
            self.cache.insert(facts, leaf);
        }
    }

    /// The leaf of a cached chain, if `now` is inside the validity of every certificate of its
    /// path and no CRL whose signature is known to verify revokes one; `None` when the chain
    /// must go through webpki again (outside the window, or a list not yet checked).
    fn cached(
        &self,
        entry: &Entry<PeerCert>,
        now: SystemTime,
    ) -> Result<Option<PeerCert>, AuthError> {
        let Ok(since) = now.duration_since(UNIX_EPOCH) else {
            return Ok(None);
        };
        let secs = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
        if secs < entry.facts.not_before || secs > entry.facts.not_after {
            return Ok(None);
        }
        if !self.crls.is_empty() {
            let path: Vec<PathCert<'_>> = entry.facts.path.iter().map(|c| c.borrowed()).collect();
            if !self.crls.unverified(&path).is_empty() {
                return Ok(None);
            }
            self.crls.check_path(&path, now)?;
        }
        Ok(Some(entry.leaf.clone()))
    }

    /// [`TrustAnchors::verify_peer`] without the cache; `chain` ([`chain_cache::chain_bytes`]),
    /// when given, is kept in the result for [`TrustAnchors::remember_verified`].
    fn verify_uncached(
        &self,
        leaf: &[u8],
        intermediates: &[&[u8]],
        now: SystemTime,
        chain: Option<Vec<u8>>,
    ) -> Result<PeerCert, AuthError> {
        // Before webpki sees anything: its path search is what a hostile chain makes costly.
        super::check_chain_shape(leaf, intermediates)?;
        let leaf_der = CertificateDer::from(leaf);
        let end_entity = EndEntityCert::try_from(&leaf_der)
            .map_err(|_| AuthError::Malformed("peer certificate"))?;
        let intermediates: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .map(|c| CertificateDer::from(*c))
            .collect();
        let time = UnixTime::since_unix_epoch(now.duration_since(UNIX_EPOCH).unwrap_or_default());
        let path = end_entity
            .verify_for_usage(
                CHAIN_SIGNATURE_ALGS,
                &self.anchors,
                &intermediates,
                time,
                IkeEku,
                None,
                None,
            )
            .map_err(chain_error)?;
        let certs = path_certs(&path);
        if !self.crls.is_empty() {
            // Once per list and issuer key: webpki checks the list's signature (and the
            // issuer's cRLSign) with the chain, that list alone, since of several lists of one
            // issuer it would check only the first; from then on the lookups below suffice.
            for (i, key) in self.crls.unverified(&certs) {
                let Some(list) = self.crls.list(i) else {
                    continue;
                };
                let one = [list];
                end_entity
                    .verify_for_usage(
                        CHAIN_SIGNATURE_ALGS,
                        &self.anchors,
                        &intermediates,
                        time,
                        IkeEku,
                        self.crls.options(&one),
                        None,
                    )
                    .map_err(chain_error)?;
                self.crls.remember_signature(i, key);
            }
            self.crls.check_path(&certs, now)?;
        }
        let mut peer = parse_leaf(leaf)?;
        peer.issuers = path_issuers(&path);
        peer.revocation = Some(RevocationKey::new(end_entity.issuer(), end_entity.serial()));
        peer.ocsp = Some(OcspQuery {
            leaf: leaf.to_vec(),
            // The whole Name, as CertID hashes it (webpki's `issuer()` is its contents).
            issuer_name: peer.issuer_der.clone(),
            issuer_spki: path.issuer_spki().as_ref().to_vec(),
        });
        if !peer.may_sign {
            return Err(AuthError::BadKeyUsage(
                "key usage lacks digitalSignature and nonRepudiation",
            ));
        }
        if self.client_eku == Some(ClientEku::Strict) && !peer.client_eku {
            return Err(AuthError::BadKeyUsage(
                "extended key usage lacks clientAuth and ipsecIKE",
            ));
        }
        peer.chain = chain.and_then(|chain| self.chain_facts(chain, leaf, &path, &certs));
        Ok(peer)
    }

    /// What the cache keeps of a chain these anchors verified; `None` when a certificate's
    /// validity does not parse (the chain is then not cached).
    fn chain_facts(
        &self,
        chain: Vec<u8>,
        leaf: &[u8],
        path: &webpki::VerifiedPath<'_>,
        certs: &[PathCert<'_>],
    ) -> Option<Box<ChainFacts>> {
        let (not_before, not_after) = chain_cache::path_validity(leaf, path)?;
        let owned = certs.iter().map(OwnedPathCert::from).collect();
        Some(Box::new(
            self.cache.facts(chain, not_before, not_after, owned),
        ))
    }
}

/// The CAs above the leaf of a verified chain, its issuer first and the trust anchor last
/// ([`super::CaSet::issued`]).
fn path_issuers(path: &webpki::VerifiedPath<'_>) -> Vec<super::CaFingerprint> {
    path.intermediate_certificates()
        .map(|c| {
            super::CaFingerprint::from_name_and_spki(
                c.subject(),
                c.subject_public_key_info().as_ref(),
            )
        })
        .chain(std::iter::once(super::CaFingerprint::from_contents(
            path.anchor().subject.as_ref(),
            path.anchor().subject_public_key_info.as_ref(),
        )))
        .collect()
}

/// The certificates of a verified chain with their issuers' keys, leaf first (webpki yields
/// the intermediates from the leaf's issuer up), for [`Crls::check_path`].
fn path_certs<'a>(path: &'a webpki::VerifiedPath<'a>) -> Vec<PathCert<'a>> {
    let key = |kind: &[u8], spki: &[u8]| {
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(kind);
        ctx.update(spki);
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        out
    };
    let intermediates: Vec<&webpki::Cert<'_>> = path.intermediate_certificates().collect();
    let anchor_key = key(b"anchor", path.anchor().subject_public_key_info.as_ref());
    let issuer_key = |i: usize| {
        intermediates.get(i).map_or(anchor_key, |c| {
            key(b"cert", c.subject_public_key_info().as_ref())
        })
    };
    let leaf = path.end_entity();
    let mut certs = vec![PathCert {
        issuer: leaf.issuer(),
        serial: leaf.serial(),
        issuer_key: issuer_key(0),
    }];
    for (i, c) in intermediates.iter().enumerate() {
        certs.push(PathCert {
            issuer: c.issuer(),
            serial: c.serial(),
            issuer_key: issuer_key(i + 1),
        });
    }
    certs
}

/// A peer certificate that chained to a trust anchor: its identities and public key.
#[derive(Clone, Debug)]
pub struct PeerCert {
    der: Vec<u8>,
    pub(crate) subject_der: Vec<u8>,
    subject: String,
    issuer_der: Vec<u8>,
    /// Issuer, serial and notAfter, for `gate64 status`.
    summary: CertSummary,
    dns_names: Vec<String>,
    emails: Vec<String>,
    ips: Vec<IpAddr>,
    subject_key_id: Option<Vec<u8>>,
    spki_sha1: Vec<u8>,
    pub(crate) key: PublicKey,
    may_sign: bool,
    /// The first subjectAltName that is an ID type (dNSName, rfc822Name, iPAddress).
    first_san: Option<Identity>,
    /// The leaf lists clientAuth or ipsecIKE ([`ClientEku::Strict`]).
    client_eku: bool,
    /// Issuer and serial, set once the chain verified ([`TrustAnchors::verify_peer`]).
    revocation: Option<RevocationKey>,
    /// What an OCSP lookup of the leaf needs, set once the chain verified.
    ocsp: Option<OcspQuery>,
    /// The subject's commonName values.
    common_names: Vec<String>,
    /// The CAs above the leaf as chain verification found them, its issuer first and the
    /// trust anchor last; empty for a certificate that did not come through
    /// [`TrustAnchors::verify_peer`].
    issuers: Vec<super::CaFingerprint>,
    /// What [`TrustAnchors::remember_verified`] keeps of the chain, set when webpki verified
    /// it (not for a leaf from the cache).
    chain: Option<Box<ChainFacts>>,
}

/// What an OCSP lookup of a verified leaf needs (RFC 6960 §4.1.1): the leaf, and its issuer's
/// Name and SubjectPublicKeyInfo as the chain verification found them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OcspQuery {
    /// The leaf certificate, DER.
    pub leaf: Vec<u8>,
    /// Its issuer's Name, DER.
    pub issuer_name: Vec<u8>,
    /// Its issuer's SubjectPublicKeyInfo, DER.
    pub issuer_spki: Vec<u8>,
}

impl OcspQuery {
    /// The issuer, as [`super::ocsp`] takes it.
    pub fn issuer(&self) -> super::ocsp::Issuer<'_> {
        super::ocsp::Issuer {
            name: &self.issuer_name,
            spki: &self.issuer_spki,
        }
    }
}

impl PeerCert {
    /// What an OCSP lookup of this certificate needs; `None` for a certificate that did not
    /// come through [`TrustAnchors::verify_peer`].
    pub fn ocsp_query(&self) -> Option<&OcspQuery> {
        self.ocsp.as_ref()
    }

    /// The issuer and serial a CRL names this certificate by; `None` for a certificate that
    /// did not come through [`TrustAnchors::verify_peer`].
    pub fn revocation_key(&self) -> Option<&RevocationKey> {
        self.revocation.as_ref()
    }

    /// Verifies an AUTH payload: `auth_data` is the Authentication Data field, `octets` what
    /// RFC 7296 §2.15 says the peer signed (built by the caller).
    pub fn verify_auth(
        &self,
        method: AuthMethod,
        auth_data: &[u8],
        octets: &[u8],
    ) -> Result<(), AuthError> {
        let mismatch = || AuthError::MethodKeyMismatch {
            method: method.code(),
            key: self.key.name(),
        };
        let (alg, signature): (&'static dyn VerificationAlgorithm, &[u8]) = match method {
            // RFC 7296 §3.8 method 1 is PKCS#1 v1.5; RFC 7427 §1 notes its hash is SHA-1.
            AuthMethod::RsaPkcs1 => match self.key {
                PublicKey::Rsa(_) => (
                    &signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
                    auth_data,
                ),
                _ => return Err(mismatch()),
            },
            AuthMethod::EcdsaP256Sha256 => match self.key {
                PublicKey::EcP256(_) => (&signature::ECDSA_P256_SHA256_FIXED, auth_data),
                _ => return Err(mismatch()),
            },
            AuthMethod::EcdsaP384Sha384 => match self.key {
                PublicKey::EcP384(_) => (&signature::ECDSA_P384_SHA384_FIXED, auth_data),
                _ => return Err(mismatch()),
            },
            AuthMethod::DigitalSignature => {
                let (scheme, signature) = algid::parse(auth_data)?;
                (
                    method14_alg(scheme, &self.key).ok_or_else(mismatch)?,
                    signature,
                )
            }
        };
        UnparsedPublicKey::new(alg, self.key.bytes())
            .verify(octets, signature)
            .map_err(|_| AuthError::BadSignature)
    }

    /// Whether the ID payload `id` names this certificate: a DER DN equal to the subject; an
    /// FQDN (ASCII case-insensitive, trailing dot ignored), email address (case-insensitive)
    /// or IP address among the subjectAltNames; a KEY_ID equal to the subjectKeyIdentifier or
    /// to the SHA-1 of the SubjectPublicKeyInfo.
    pub fn matches_id(&self, id: &Identity) -> bool {
        match id.id_type {
            IdType::DerAsn1Dn => id.data == self.subject_der,
            IdType::Fqdn => {
                let want = id.data.strip_suffix(b".").unwrap_or(&id.data);
                self.dns_names.iter().any(|n| {
                    let n = n.strip_suffix('.').unwrap_or(n);
                    n.as_bytes().eq_ignore_ascii_case(want)
                })
            }
            IdType::Rfc822Addr => self
                .emails
                .iter()
                .any(|e| e.as_bytes().eq_ignore_ascii_case(&id.data)),
            IdType::Ipv4Addr | IdType::Ipv6Addr => {
                id.ip_addr().is_some_and(|a| self.ips.contains(&a))
            }
            IdType::KeyId => {
                self.subject_key_id.as_deref() == Some(id.data.as_slice())
                    || id.data == self.spki_sha1
            }
        }
    }

    /// The certificate's first subjectAltName that an ID payload can carry (dNSName,
    /// rfc822Name, iPAddress), else its subject DN: the identity a responder answers with
    /// when nothing else is asked or configured.
    pub fn first_san_or_dn(&self) -> Identity {
        self.first_san
            .clone()
            .unwrap_or_else(|| Identity::der_dn(&self.subject_der))
    }

    /// The subject DN as text, escaped as RFC 4514 says (e.g. `CN=client1.gate64.lab`,
    /// `C=CH, O=Example, CN=a\, O=b`), for logs and `gate64 status`; see [`super::dn`].
    pub fn subject(&self) -> String {
        self.subject.clone()
    }

    /// What tells this client apart from every other: its issuer and subject together
    /// ([`IdentityKey`]), never the rendered text, which two names can share.
    pub fn identity_key(&self) -> IdentityKey {
        IdentityKey::new(&self.issuer_der, &self.subject_der)
    }

    /// The certificate's issuer, serial and notAfter.
    pub fn summary(&self) -> &CertSummary {
        &self.summary
    }

    /// The leaf certificate's DER.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// Every subjectAltName an ID payload can carry, as text: DNS names, email addresses, IP
    /// addresses.
    pub fn alt_names(&self) -> Vec<String> {
        self.dns_names
            .iter()
            .chain(&self.emails)
            .cloned()
            .chain(self.ips.iter().map(IpAddr::to_string))
            .collect()
    }

    /// Every identity an ID payload can name this certificate by, in the spelling of
    /// [`Identity`]'s `Display`: its subjectAltNames (`fqdn:`, `email:`, `ip:`), then its
    /// subject DN (`dn:`, RFC 4514 escaping). For errors that say what a certificate holds.
    pub fn held_ids(&self) -> Vec<String> {
        let dns = self.dns_names.iter().map(|n| format!("fqdn:{n}"));
        let emails = self.emails.iter().map(|e| format!("email:{e}"));
        let ips = self.ips.iter().map(|a| format!("ip:{a}"));
        dns.chain(emails)
            .chain(ips)
            .chain(std::iter::once(format!("dn:{}", self.subject)))
            .collect()
    }

    /// The DNS names of the subjectAltName extension.
    pub fn dns_names(&self) -> &[String] {
        &self.dns_names
    }

    /// The IP addresses of the subjectAltName extension.
    pub fn ip_addrs(&self) -> &[IpAddr] {
        &self.ips
    }

    /// The email addresses of the subjectAltName extension.
    pub fn emails(&self) -> &[String] {
        &self.emails
    }

    /// The subject's commonName values (those that are text).
    pub fn common_names(&self) -> &[String] {
        &self.common_names
    }

    /// The CAs above this certificate as chain verification found them, its issuer first and
    /// the trust anchor last ([`super::CaSet::issued`]); empty for a certificate that did not
    /// come through [`TrustAnchors::verify_peer`].
    pub fn issuers(&self) -> &[super::CaFingerprint] {
        &self.issuers
    }
}

/// What `gate64 status` shows of a client's certificate.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CertSummary {
    /// The issuer DN, escaped as the subject is ([`super::dn::name_to_text`]).
    pub issuer: String,
    /// The serial number in hex, as `openssl x509 -serial` and strongSwan's `pki --print`
    /// show it (upper case, no separators).
    pub serial: String,
    /// notAfter, in seconds since the Unix epoch (negative before it).
    pub not_after: i64,
}

/// Reads what authentication needs from a certificate (no trust decision).
pub(crate) fn parse_leaf(der: &[u8]) -> Result<PeerCert, AuthError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|_| AuthError::Malformed("certificate"))?;
    let spki = cert.public_key();
    let key = public_key(spki);
    let (mut dns_names, mut emails, mut ips) = (Vec::new(), Vec::new(), Vec::new());
    let mut first_san = None;
    let san = cert
        .subject_alternative_name()
        .map_err(|_| AuthError::Malformed("subjectAltName extension"))?;
    for name in san.iter().flat_map(|san| san.value.general_names.iter()) {
        let id = match name {
            GeneralName::DNSName(n) => {
                dns_names.push((*n).to_owned());
                Some(Identity::fqdn(n))
            }
            GeneralName::RFC822Name(e) => {
                emails.push((*e).to_owned());
                Some(Identity::email(e))
            }
            GeneralName::IPAddress(a) => {
                let ip = <[u8; 4]>::try_from(*a)
                    .map(IpAddr::from)
                    .or_else(|_| <[u8; 16]>::try_from(*a).map(IpAddr::from))
                    .ok();
                ips.extend(ip);
                ip.map(Identity::ip)
            }
            _ => None,
        };
        if first_san.is_none() {
            first_san = id;
        }
    }
    let subject_key_id = cert
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(ki) => Some(ki.0.to_vec()),
            _ => None,
        });
    let key_usage = cert
        .key_usage()
        .map_err(|_| AuthError::Malformed("keyUsage extension"))?;
    // RFC 4945 §5.1.3.2: digitalSignature or nonRepudiation when the extension is present.
    let may_sign =
        key_usage.is_none_or(|ku| ku.value.digital_signature() || ku.value.non_repudiation());
    let client_eku = has_client_eku(&cert)?;
    Ok(PeerCert {
        der: der.to_vec(),
        subject_der: cert.subject().as_raw().to_vec(),
        subject: super::dn::name_to_text(cert.subject()),
        issuer_der: cert.issuer().as_raw().to_vec(),
        summary: CertSummary {
            issuer: super::dn::name_to_text(cert.issuer()),
            serial: serial_hex(cert.raw_serial()),
            not_after: cert.validity().not_after.timestamp(),
        },
        dns_names,
        emails,
        ips,
        subject_key_id,
        spki_sha1: digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, spki.raw)
            .as_ref()
            .to_vec(),
        key,
        may_sign,
        first_san,
        client_eku,
        revocation: None,
        ocsp: None,
        common_names: cert
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
            .collect(),
        issuers: Vec::new(),
        chain: None,
    })
}

/// A serial's content octets in upper-case hex without the sign octet DER adds before a
/// high bit, as OpenSSL prints it.
pub fn serial_hex(raw: &[u8]) -> String {
    let start = raw
        .iter()
        .position(|&b| b != 0)
        .unwrap_or(raw.len().saturating_sub(1));
    raw.get(start..)
        .unwrap_or_default()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// id-kp-ipsecIKE, 1.3.6.1.5.5.7.3.17.
const OID_IPSEC_IKE: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 17];

/// Whether the certificate's extended key usage lists clientAuth or ipsecIKE (absent: no).
fn has_client_eku(cert: &X509Certificate<'_>) -> Result<bool, AuthError> {
    let eku = cert
        .extended_key_usage()
        .map_err(|_| AuthError::Malformed("extendedKeyUsage extension"))?;
    Ok(eku.is_some_and(|e| {
        e.value.client_auth
            || e.value.other.iter().any(|oid| {
                oid.iter()
                    .is_some_and(|arcs| arcs.eq(OID_IPSEC_IKE.iter().copied()))
            })
    }))
}

/// Whether the DER certificate `der` lists clientAuth or ipsecIKE in its extended key usage:
/// [`ClientEku::Strict`]'s rule, for the IP-HTTPS client verifier too.
pub fn leaf_has_client_eku(der: &[u8]) -> Result<bool, AuthError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|_| AuthError::Malformed("certificate"))?;
    has_client_eku(&cert)
}

/// Signature algorithms accepted on the certificates of a chain (webpki refuses SHA-1).
static CHAIN_SIGNATURE_ALGS: &[&dyn SignatureVerificationAlgorithm] = &[
    webpki::aws_lc_rs::ECDSA_P256_SHA256,
    webpki::aws_lc_rs::ECDSA_P256_SHA384,
    webpki::aws_lc_rs::ECDSA_P256_SHA512,
    webpki::aws_lc_rs::ECDSA_P384_SHA256,
    webpki::aws_lc_rs::ECDSA_P384_SHA384,
    webpki::aws_lc_rs::ECDSA_P384_SHA512,
    webpki::aws_lc_rs::ECDSA_P521_SHA256,
    webpki::aws_lc_rs::ECDSA_P521_SHA384,
    webpki::aws_lc_rs::ECDSA_P521_SHA512,
    webpki::aws_lc_rs::ED25519,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA256,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA384,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA512,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA256_ABSENT_PARAMS,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA384_ABSENT_PARAMS,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA512_ABSENT_PARAMS,
    webpki::aws_lc_rs::RSA_PKCS1_3072_8192_SHA384,
    webpki::aws_lc_rs::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
    webpki::aws_lc_rs::RSA_PSS_2048_8192_SHA384_LEGACY_KEY,
    webpki::aws_lc_rs::RSA_PSS_2048_8192_SHA512_LEGACY_KEY,
];

/// The extended key usage rule of the module docs: absent, or one of these purposes.
struct IkeEku;

/// id-kp-ipsecIKE (RFC 4945 §5.1.3.12), anyExtendedKeyUsage (RFC 5280 §4.2.1.12), serverAuth,
/// clientAuth, as OID contents.
const ACCEPTED_EKUS: [&[u8]; 4] = [
    &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x11],
    &[0x55, 0x1d, 0x25, 0x00],
    &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01],
    &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02],
];

impl ExtendedKeyUsageValidator for IkeEku {
    fn validate(&self, purposes: KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        let mut present = Vec::new();
        for purpose in purposes {
            let purpose = purpose?;
            if ACCEPTED_EKUS
                .iter()
                .any(|oid| KeyPurposeId::new(oid) == purpose)
            {
                return Ok(());
            }
            present.push(purpose.to_decoded_oid());
        }
        if present.is_empty() {
            return Ok(());
        }
        Err(webpki::Error::RequiredEkuNotFoundContext(
            RequiredEkuNotFoundContext {
                required: KeyUsage::required(ACCEPTED_EKUS[0]),
                present,
            },
        ))
    }
}

fn chain_error(e: webpki::Error) -> AuthError {
    use webpki::Error as E;
    match e {
        // A signature that does not verify under the CA whose name the certificate gives as its
        // issuer (another CA with the same DN, or a forged certificate): not issued by a trusted
        // CA either.
        E::UnknownIssuer | E::InvalidSignatureForPublicKey => AuthError::UnknownCa,
        E::CertExpired { .. } => AuthError::Expired,
        E::CertNotValidYet { .. } => AuthError::NotYetValid,
        E::CertRevoked => AuthError::Revoked,
        E::CrlExpired { .. } => AuthError::CrlExpired,
        E::RequiredEkuNotFoundContext(_) => {
            AuthError::BadKeyUsage("extended key usage lacks ipsecIKE, serverAuth and clientAuth")
        }
        E::BadDer | E::BadDerTime | E::TrailingData(_) => AuthError::Malformed("certificate chain"),
        other => AuthError::BadChain(format!("{other:?}")),
    }
}
