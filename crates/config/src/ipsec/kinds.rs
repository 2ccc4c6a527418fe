//! The `[ipsec]` keys that take one of a few words.

use serde::Deserialize;

/// `ipsec.authorize_certificates`: whether RADIUS authorizes certificate clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthorizeCertificates {
    /// The certificate alone admits the client (the default).
    #[default]
    Off,
    /// An Access-Accept for the certificate identity admits it, with what it grants.
    Radius,
}

/// `ipsec.ocsp`: OCSP lookups of client certificates (RFC 6960).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ocsp {
    /// No lookups (the default): revocation comes from `crls` alone.
    #[default]
    Off,
    /// A `revoked` answer refuses the client; no answer lets it in.
    Soft,
    /// Only a verified `good` answer lets the client in.
    Require,
}

/// `ipsec.unique_ids`: one IKE SA per identity and tunnel, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UniqueIds {
    /// The new IKE SA replaces the old ones, which are deleted (the default).
    #[default]
    Replace,
    /// The new IKE_AUTH is refused while the old IKE SA stands.
    Keep,
    /// Nothing is replaced, not even on INITIAL_CONTACT.
    Never,
}

/// `ipsec.client_eku`: the extended key usages a client's certificate must list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientEku {
    /// clientAuth or id-kp-ipsecIKE (RFC 4945): a server certificate, one for any purpose or
    /// one without the extension is no client's (the default).
    #[default]
    Strict,
    /// Also serverAuth, anyExtendedKeyUsage, or no extension at all: for a CA that issues
    /// client certificates without the purpose.
    Any,
}

/// `ipsec.crl_expired`: what a CRL whose nextUpdate has passed does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CrlExpired {
    /// The CRL is still used as it stands, and the daemon warns (the default): a CA that
    /// publishes late does not lock every client out.
    #[default]
    Warn,
    /// A certificate whose issuer's CRL has expired is refused.
    Refuse,
}

/// `ipsec.intranet_second_auth`: when gate64 runs an RFC 4739 second authentication round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecondAuth {
    /// Never offered; a client that announces one anyway is refused.
    Off,
    /// Offered to every client and run when the client asks (the default).
    #[default]
    Optional,
    /// As `optional`, and the intranet tunnel is refused to a client that authenticates only
    /// once (its machine certificate).
    Required,
}
