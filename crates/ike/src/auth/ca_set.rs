//! Which CAs a verified client certificate came through, for policies keyed by CA (the
//! responder's tunnel rules).
//!
//! A CA is known by its subject Name and its public key together ([`CaFingerprint`]): the
//! certificates above a verified leaf (its issuer, that one's issuer, up to the trust anchor)
//! are those chain verification found, so each one's key has verified the signature below it,
//! and a certificate that merely names a CA as its issuer (or carries its authority key
//! identifier) without that key's signature never gets here. A CA re-issued with the same
//! name and key (a renewed CA certificate) is the same CA.

use aws_lc_rs::digest;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::AuthError;

/// A CA as [`CaSet`] matches it: SHA-256 over its subject Name and SubjectPublicKeyInfo (both
/// DER, with their tags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CaFingerprint([u8; 32]);

impl CaFingerprint {
    /// From the contents (without the outer SEQUENCE tag and length) of a subject Name and a
    /// SubjectPublicKeyInfo, as webpki holds them.
    pub(crate) fn from_contents(subject: &[u8], spki: &[u8]) -> Self {
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(&sequence(subject));
        ctx.update(&sequence(spki));
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        CaFingerprint(out)
    }

    /// From a subject Name's contents and a whole SubjectPublicKeyInfo (tag included).
    pub(crate) fn from_name_and_spki(subject: &[u8], spki_der: &[u8]) -> Self {
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(&sequence(subject));
        ctx.update(spki_der);
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        CaFingerprint(out)
    }
}

/// `contents` wrapped in a DER SEQUENCE tag and length.
fn sequence(contents: &[u8]) -> Vec<u8> {
    let len = contents.len();
    let mut out = Vec::with_capacity(len + 6);
    out.push(0x30);
    if len < 0x80 {
        out.push(u8::try_from(len).unwrap_or(0));
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | u8::try_from(bytes.len() - skip).unwrap_or(0));
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
    out
}

/// The CA certificates of one PEM file, as a client certificate's chain is matched against
/// them ([`CaSet::issued`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaSet {
    cas: Vec<CaFingerprint>,
}

impl CaSet {
    /// The certificates of a PEM bundle (one or more CERTIFICATE blocks). Each must parse as a
    /// certificate; none is required to be a CA certificate, since only its name and key are
    /// compared.
    pub fn from_pem(pem: &[u8]) -> Result<Self, AuthError> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| AuthError::Malformed("CA certificate PEM"))?;
        if certs.is_empty() {
            return Err(AuthError::NoCertificate);
        }
        let cas = certs
            .iter()
            .map(|c| {
                let anchor = webpki::anchor_from_trusted_cert(c)
                    .map_err(|_| AuthError::Malformed("CA certificate"))?;
                Ok(CaFingerprint::from_contents(
                    anchor.subject.as_ref(),
                    anchor.subject_public_key_info.as_ref(),
                ))
            })
            .collect::<Result<Vec<_>, AuthError>>()?;
        Ok(CaSet { cas })
    }

    /// Whether one of the CAs above a verified leaf (`path`, its issuer first, the trust
    /// anchor last) is one of these: the leaf was issued by one of them, or by a CA under one.
    pub fn issued(&self, path: &[CaFingerprint]) -> bool {
        path.iter().any(|p| self.cas.contains(p))
    }

    /// How many certificates the file held.
    pub fn len(&self) -> usize {
        self.cas.len()
    }

    /// Whether the set is empty (never after [`CaSet::from_pem`]).
    pub fn is_empty(&self) -> bool {
        self.cas.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_lengths_are_der() {
        assert_eq!(sequence(&[1, 2]), vec![0x30, 2, 1, 2]);
        let long = vec![0u8; 0x1234];
        let s = sequence(&long);
        assert_eq!(&s[..4], &[0x30, 0x82, 0x12, 0x34]);
        assert_eq!(s.len(), 4 + 0x1234);
        let mid = vec![0u8; 0x80];
        assert_eq!(&sequence(&mid)[..3], &[0x30, 0x81, 0x80]);
    }

    #[test]
    fn pem_without_certificates_or_garbage_is_refused() {
        assert_eq!(CaSet::from_pem(b""), Err(AuthError::NoCertificate));
        let bad = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(CaSet::from_pem(bad).is_err());
    }
}
