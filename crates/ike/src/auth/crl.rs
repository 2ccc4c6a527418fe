//! Certificate revocation lists: the client certificates their CAs have revoked.
//!
//! The caller reads the files and hands their bytes (PEM or DER) to [`Crl::parse`]; the
//! lists go with the trust anchors ([`super::TrustAnchors::with_crls`]), whose chain check
//! then refuses a revoked certificate. A certificate whose issuer has no list here is not
//! checked (webpki's `UnknownStatusPolicy::Allow`): configuring a CRL for one CA does not lock
//! out the clients of another. [`Crls::revokes`] answers the same question later, for a
//! certificate that was accepted before the lists changed.

use super::AuthError;
use aws_lc_rs::digest;
use rustls_pki_types::CertificateRevocationListDer;
use rustls_pki_types::pem::PemObject;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use webpki::{
    CertRevocationList, ExpirationPolicy, OwnedCertRevocationList, RevocationCheckDepth,
    RevocationOptions, RevocationOptionsBuilder, UnknownStatusPolicy,
};
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

/// One parsed CRL.
#[derive(Debug, Clone)]
pub struct Crl {
    list: OwnedCertRevocationList,
    /// SHA-256 of the issuer Name, compared with [`RevocationKey::issuer_sha256`].
    issuer_sha256: [u8; 32],
    next_update: SystemTime,
}

impl Crl {
    /// Parses every CRL in `data`: PEM (one or more `X509 CRL` blocks) or one DER CRL.
    pub fn parse(data: &[u8]) -> Result<Vec<Crl>, AuthError> {
        if data.trim_ascii_start().starts_with(b"-----BEGIN") {
            let ders = CertificateRevocationListDer::pem_slice_iter(data)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| AuthError::Malformed("CRL PEM"))?;
            if ders.is_empty() {
                return Err(AuthError::Malformed("no X509 CRL block in the PEM input"));
            }
            ders.iter().map(|d| Crl::from_der(d.as_ref())).collect()
        } else {
            Ok(vec![Crl::from_der(data)?])
        }
    }

    fn from_der(der: &[u8]) -> Result<Crl, AuthError> {
        let list =
            OwnedCertRevocationList::from_der(der).map_err(|_| AuthError::Malformed("CRL"))?;
        // webpki keeps nextUpdate to itself; x509-parser reads it for the expiry warning.
        let (_, parsed) =
            CertificateRevocationList::from_der(der).map_err(|_| AuthError::Malformed("CRL"))?;
        let next_update = parsed
            .next_update()
            .map(|t| UNIX_EPOCH + Duration::from_secs(u64::try_from(t.timestamp()).unwrap_or(0)))
            .unwrap_or(UNIX_EPOCH);
        let wrapped = CertRevocationList::from(list.clone());
        let issuer_sha256 = sha256(wrapped.issuer());
        Ok(Crl {
            list,
            issuer_sha256,
            next_update,
        })
    }

    /// The CRL's nextUpdate: past it the CA has published, or should have published, a newer
    /// one.
    pub fn next_update(&self) -> SystemTime {
        self.next_update
    }

    /// Whether nextUpdate is before `now`.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.next_update < now
    }
}

/// The CRLs the chain check consults, and what an expired one does.
///
/// A CRL's signature covers every entry, so checking it costs time in proportion to the
/// list (a 100,000-entry CRL is ~3 MB to hash): webpki checks it on every chain it verifies.
/// Here each list's signature is checked on its own, once per issuer key, and remembered per
/// list ([`Crls::unverified`], [`Crls::remember_signature`]); later chains look their
/// certificates' serial numbers up in the lists' ordered maps, O(log n). webpki, given several
/// lists of one issuer, checks only the first (and trusts none of the others), so each list
/// is given to it alone; a list whose signature does not verify refuses the chain as the
/// first one would.
#[derive(Debug, Clone, Default)]
pub struct Crls {
    lists: Arc<[CertRevocationList<'static>]>,
    issuers: Arc<[[u8; 32]]>,
    next_updates: Arc<[SystemTime]>,
    /// Per list: the SHA-256 of the issuer key its signature verified under (set once).
    pub(crate) verified_under: Arc<[OnceLock<[u8; 32]>]>,
    refuse_expired: bool,
}

/// One certificate of a verified chain, as revocation sees it: its issuer Name and serial, and
/// what identifies its issuer's key (a hash of its SubjectPublicKeyInfo).
pub(crate) struct PathCert<'a> {
    pub(crate) issuer: &'a [u8],
    pub(crate) serial: &'a [u8],
    pub(crate) issuer_key: [u8; 32],
}

impl Crls {
    /// `crls`, with an expired one either still used (`refuse_expired` false: a CA that
    /// publishes late does not lock every client out) or refusing the certificates it covers.
    pub fn new(crls: Vec<Crl>, refuse_expired: bool) -> Crls {
        let issuers = crls.iter().map(|c| c.issuer_sha256).collect();
        let next_updates = crls.iter().map(|c| c.next_update).collect();
        let verified_under = crls.iter().map(|_| OnceLock::new()).collect();
        let lists = crls
            .into_iter()
            .map(|c| CertRevocationList::from(c.list))
            .collect();
        Crls {
            lists,
            issuers,
            next_updates,
            verified_under,
            refuse_expired,
        }
    }

    /// The lists whose issuer is `issuer` (a certificate's issuer Name, DER).
    fn of_issuer(&self, issuer: &[u8]) -> impl Iterator<Item = usize> + '_ {
        let hash = sha256(issuer);
        (0..self.lists.len()).filter(move |&i| self.issuers[i] == hash)
    }

    /// Whether list `i`'s signature is known to verify under the issuer key `key`.
    fn verified(&self, i: usize, key: &[u8; 32]) -> bool {
        self.verified_under[i].get() == Some(key)
    }

    /// The lists covering a certificate of `path` whose signature is not known to verify
    /// under that certificate's issuer key, each once, with that key: each is for webpki to
    /// check alone ([`Crls::list`]) before [`Crls::check_path`] counts it. None: the lookups
    /// alone decide, and no list is hashed again.
    pub(crate) fn unverified(&self, path: &[PathCert<'_>]) -> Vec<(usize, [u8; 32])> {
        let mut out: Vec<(usize, [u8; 32])> = Vec::new();
        for c in path {
            for i in self.of_issuer(c.issuer) {
                if !self.verified(i, &c.issuer_key) && !out.contains(&(i, c.issuer_key)) {
                    out.push((i, c.issuer_key));
                }
            }
        }
        out
    }

    /// List `i`, for a webpki verification that checks its signature alone.
    pub(crate) fn list(&self, i: usize) -> Option<&CertRevocationList<'static>> {
        self.lists.get(i)
    }

    /// Records that list `i`'s own signature verified under the issuer key `key` (webpki
    /// checked the chain with that list alone). A list with an issuing distribution point is
    /// not remembered: webpki skips a list whose scope does not cover the certificate, so
    /// its passing says nothing of the signature; such a list is then given to webpki with
    /// every chain, as correct, only slower. So is a second key for one issuer name (a CA
    /// key rollover): only the first is remembered.
    pub(crate) fn remember_signature(&self, i: usize, key: [u8; 32]) {
        if let Some(list) = self.lists.get(i)
            && list.issuing_distribution_point().is_none()
        {
            let _ = self.verified_under[i].set(key);
        }
    }

    /// Revocation of the certificates of a chain, by the lists whose own signature is known to
    /// verify under the certificate's issuer key (the others were checked by webpki with the
    /// chain, or cover nothing of it): a serial that such a list of its issuer names is
    /// [`AuthError::Revoked`]; such a list past its nextUpdate is [`AuthError::CrlExpired`]
    /// when expired lists refuse. O(log n) per list.
    pub(crate) fn check_path(
        &self,
        path: &[PathCert<'_>],
        now: SystemTime,
    ) -> Result<(), AuthError> {
        for c in path {
            for i in self.of_issuer(c.issuer) {
                if !self.verified(i, &c.issuer_key) {
                    continue;
                }
                if self.refuse_expired && self.next_updates[i] < now {
                    return Err(AuthError::CrlExpired);
                }
                match self.lists[i].find_serial(c.serial) {
                    Ok(None) => {}
                    Ok(Some(_)) => return Err(AuthError::Revoked),
                    Err(_) => return Err(AuthError::Malformed("CRL entry")),
                }
            }
        }
        Ok(())
    }

    /// Each list's nextUpdate.
    pub fn next_updates(&self) -> &[SystemTime] {
        &self.next_updates
    }

    /// How many CRLs there are.
    pub fn len(&self) -> usize {
        self.lists.len()
    }

    /// Whether there is none (nothing is checked then).
    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// Whether a list from the certificate's issuer names its serial. The lists' signatures
    /// are not checked here (that needs the issuer's certificate, which only a handshake's
    /// chain has): the lists come from the operator's own files, and the next handshake of
    /// that CA's clients checks them.
    pub fn revokes(&self, key: &RevocationKey) -> bool {
        self.lists
            .iter()
            .zip(self.issuers.iter())
            .any(|(list, issuer)| {
                *issuer == key.issuer_sha256 && matches!(list.find_serial(&key.serial), Ok(Some(_)))
            })
    }

    /// The webpki options over `refs` (the lists borrowed by [`Crls::refs`]); `None` when there
    /// is no list.
    pub(crate) fn options<'a>(
        &self,
        refs: &'a [&'a CertRevocationList<'a>],
    ) -> Option<RevocationOptions<'a>> {
        let builder = RevocationOptionsBuilder::new(refs).ok()?;
        let expiry = if self.refuse_expired {
            ExpirationPolicy::Enforce
        } else {
            ExpirationPolicy::Ignore
        };
        Some(
            builder
                .with_depth(RevocationCheckDepth::Chain)
                .with_status_policy(UnknownStatusPolicy::Allow)
                .with_expiration_policy(expiry)
                .build(),
        )
    }
}

/// What names a certificate in a CRL: its issuer (hashed) and serial number. Kept with an
/// IKE SA so that lists loaded later can be checked against a certificate accepted before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevocationKey {
    issuer_sha256: [u8; 32],
    serial: Vec<u8>,
}

impl RevocationKey {
    /// `issuer` is the certificate's issuer Name and `serial` its serial number, both as webpki
    /// gives them.
    pub(crate) fn new(issuer: &[u8], serial: &[u8]) -> RevocationKey {
        RevocationKey {
            issuer_sha256: sha256(issuer),
            serial: serial.to_vec(),
        }
    }

    /// The serial number's content octets.
    pub fn serial(&self) -> &[u8] {
        &self.serial
    }
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}
