//! The shape of the certificates a peer sends, checked before any path building or signature.
//!
//! webpki builds a path by trying, at each step, every certificate whose subject equals the
//! issuer name it looks for. A peer that sends its leaf with dozens of self-issued "CA"
//! certificates sharing one name makes that search try path after path (100-155 ms of CPU per
//! message with 63 of them), before anything it sent is authenticated. So the chain is held to
//! a shape in which webpki has at most one candidate per step, at a cost of parsing at most
//! [`MAX_PEER_CERTS`] certificates' names:
//!
//! - at most [`MAX_PEER_CERTS`] certificates: the leaf and up to three intermediates (a
//!   client certificate under an issuing CA under a policy CA under the root is three levels;
//!   the root itself is configured, never taken from the peer);
//! - no two certificates with the same subject name (so each issuer name has one candidate);
//! - at most one self-issued certificate (subject equal to issuer), and only at the top of the
//!   path: a peer may send its root along (TLS 1.3 and IKEv2 allow it; OpenSSL's and other
//!   clients do), which is harmless with unique subjects and never trusted as such, since
//!   trust anchors are configured locally; key-rollover certificates are not supported;
//! - every intermediate lies on the one path from the leaf: following issuer names from the
//!   leaf through the intermediates visits each of them once (in any order they were sent).
//!
//! Names are compared as DER bytes, as webpki compares them.

use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use super::AuthError;

/// The most certificates (leaf and intermediates together) accepted from a peer.
pub const MAX_PEER_CERTS: usize = 4;

/// Checks that `leaf` and `intermediates` have the shape of the module docs. Costs at most
/// [`MAX_PEER_CERTS`] certificate parses and a few name comparisons; more certificates are
/// refused before any is parsed.
pub fn check_chain_shape(leaf: &[u8], intermediates: &[&[u8]]) -> Result<(), AuthError> {
    let count = intermediates.len().saturating_add(1);
    if count > MAX_PEER_CERTS {
        return Err(AuthError::TooManyCertificates(count));
    }
    let leaf = names(leaf)?;
    let mut rest = Vec::with_capacity(intermediates.len());
    for der in intermediates {
        rest.push(names(der)?);
    }
    if rest.iter().filter(|n| n.subject == n.issuer).count() > 1 {
        return Err(AuthError::ChainNotLinear("two self-issued certificates"));
    }
    let all_subjects = std::iter::once(&leaf).chain(&rest).map(|n| n.subject);
    for (i, subject) in all_subjects.clone().enumerate() {
        if all_subjects.clone().skip(i + 1).any(|s| s == subject) {
            return Err(AuthError::ChainNotLinear(
                "two certificates with one subject",
            ));
        }
    }
    // Walk from the leaf up through the issuers it names: with unique subjects each step has
    // at most one candidate, and the walk ends within `rest.len()` steps.
    // A self-issued certificate ends the walk: nothing can come after the root.
    let mut visited = 0;
    let mut wanted = leaf.issuer;
    while let Some(next) = rest.iter().find(|n| n.subject == wanted) {
        visited += 1;
        if next.subject == next.issuer || visited > rest.len() {
            break;
        }
        wanted = next.issuer;
    }
    if visited != rest.len() {
        return Err(AuthError::ChainNotLinear(
            "an intermediate off the leaf's path",
        ));
    }
    Ok(())
}

/// The subject and issuer names of one certificate, as DER.
struct Names<'a> {
    subject: &'a [u8],
    issuer: &'a [u8],
}

fn names(der: &[u8]) -> Result<Names<'_>, AuthError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|_| AuthError::Malformed("peer certificate"))?;
    // The raw names borrow `der`, not the parsed certificate.
    let subject = cert.tbs_certificate.subject.as_raw();
    let issuer = cert.tbs_certificate.issuer.as_raw();
    Ok(Names { subject, issuer })
}

#[cfg(test)]
mod tests;
