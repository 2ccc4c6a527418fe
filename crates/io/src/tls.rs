//! TLS configuration for IP-HTTPS from PEM files: TLS 1.2 and 1.3 only (rustls implements
//! nothing older), aws-lc-rs as the one crypto provider, optional client certificates.
//!
//! Client certificate chains are held to the shape IKE holds them to
//! ([`gate64_ike::auth::check_chain_shape`]: at most four certificates, one linear chain) before
//! webpki builds a path, so a client cannot make one TLS handshake cost a path search over
//! dozens of same-name intermediates.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::UnixTime;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::io;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use gate64_ike::auth::ClientEku;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn bad(key: &str, path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("`{key}` = {:?}: {what}", path.display().to_string()),
    )
}

/// Reads every certificate of a PEM file; `key` names the config key in errors.
pub fn load_certs(key: &str, path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(key, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(key, path, e))?;
    if certs.is_empty() {
        return Err(bad(key, path, "no certificate in the file"));
    }
    Ok(certs)
}

/// Builds the server configuration. With `client_ca`, clients must present a certificate
/// chaining to it (DirectAccess' "Certificates" authentication mode) whose extended key usage
/// meets `client_eku` (`ipsec.client_eku`, the rule IKE holds clients to); without, none is
/// asked.
pub fn server_config(
    certificate: &Path,
    private_key: &Path,
    client_ca: Option<&Path>,
    client_eku: ClientEku,
) -> io::Result<Arc<rustls::ServerConfig>> {
    let certs = load_certs("iphttps.certificate", certificate)?;
    let key = PrivateKeyDer::from_pem_file(private_key)
        .map_err(|e| bad("iphttps.private_key", private_key, e))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| io::Error::other(format!("TLS versions: {e}")))?;
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in load_certs("iphttps.client_ca", ca)? {
                roots.add(c).map_err(|e| bad("iphttps.client_ca", ca, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| bad("iphttps.client_ca", ca, e))?;
            builder.with_client_cert_verifier(Arc::new(ShapedClientVerifier {
                inner: verifier,
                client_eku,
            }))
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_single_cert(certs, key).map_err(|e| {
        bad(
            "iphttps.private_key",
            private_key,
            format!("does not match the certificate: {e}"),
        )
    })?;
    // The stream after the HTTP head is raw IPv6; no ALPN, no session tickets needed.
    cfg.ignore_client_order = false;
    Ok(Arc::new(cfg))
}

/// webpki's client verifier behind the chain-shape check: what fails the shape never reaches
/// path building. webpki itself takes a leaf without the extended key usage extension; with
/// [`ClientEku::Strict`] the leaf must list clientAuth (webpki refuses a listed EKU without
/// it), as IKE requires.
#[derive(Debug)]
struct ShapedClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    client_eku: ClientEku,
}

impl ClientCertVerifier for ShapedClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let rest: Vec<&[u8]> = intermediates.iter().map(|c| c.as_ref()).collect();
        if let Err(e) = gate64_ike::auth::check_chain_shape(end_entity, &rest) {
            tracing::debug!(error = %e, "IP-HTTPS client certificate chain refused");
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ));
        }
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if self.client_eku == ClientEku::Strict
            && !gate64_ike::auth::leaf_has_client_eku(end_entity).unwrap_or(false)
        {
            tracing::debug!("IP-HTTPS client certificate lists no clientAuth");
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::InvalidPurpose,
            ));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The server configuration new IP-HTTPS connections are accepted with, replaceable while
/// the server runs (SIGHUP with a new certificate or key). Each accept takes the current one
/// ([`ReloadableServerConfig::current`]); a connection keeps the configuration it was
/// accepted with, so established connections are untouched by a replacement.
#[derive(Debug, Clone)]
pub struct ReloadableServerConfig(Arc<RwLock<Arc<rustls::ServerConfig>>>);

impl ReloadableServerConfig {
    /// Starts with `cfg`.
    pub fn new(cfg: Arc<rustls::ServerConfig>) -> Self {
        ReloadableServerConfig(Arc::new(RwLock::new(cfg)))
    }

    /// The configuration for the next accept.
    pub fn current(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Serves `cfg` to connections accepted from now on.
    pub fn replace(&self, cfg: Arc<rustls::ServerConfig>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = cfg;
    }
}

/// Builds a client configuration trusting `ca` (or the PEM bundle given), optionally with a
/// client certificate.
pub fn client_config(
    ca: &Path,
    client_cert: Option<(&Path, &Path)>,
) -> io::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in load_certs("--ca", ca)? {
        roots.add(c).map_err(|e| bad("--ca", ca, e))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| io::Error::other(format!("TLS versions: {e}")))?
        .with_root_certificates(roots);
    let cfg = match client_cert {
        Some((cert, key)) => {
            let certs = load_certs("--client-cert", cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("--client-key", key, e))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| io::Error::other(format!("client certificate: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    use std::time::Instant;

    fn ca_params(name: &str) -> CertificateParams {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
    }

    fn client_leaf(
        issuer: &Issuer<'static, KeyPair>,
        ekus: Vec<ExtendedKeyUsagePurpose>,
    ) -> CertificateDer<'static> {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "client1");
        params.extended_key_usages = ekus;
        params.signed_by(&key, issuer).expect("leaf").der().clone()
    }

    fn verifier(ca: CertificateDer<'static>, client_eku: ClientEku) -> ShapedClientVerifier {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).expect("root");
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .expect("verifier");
        ShapedClientVerifier { inner, client_eku }
    }

    #[test]
    fn strict_client_eku_wants_client_auth_and_any_takes_what_webpki_takes() {
        let (ca, issuer) = self_issued("gate64 lab CA");
        let strict = verifier(ca.clone(), ClientEku::Strict);
        let any = verifier(ca, ClientEku::Any);
        let now = UnixTime::now();
        let client = client_leaf(&issuer, vec![ExtendedKeyUsagePurpose::ClientAuth]);
        let bare = client_leaf(&issuer, vec![]);
        let server = client_leaf(&issuer, vec![ExtendedKeyUsagePurpose::ServerAuth]);
        strict
            .verify_client_cert(&client, &[], now)
            .expect("clientAuth");
        assert!(strict.verify_client_cert(&bare, &[], now).is_err());
        assert!(strict.verify_client_cert(&server, &[], now).is_err());
        any.verify_client_cert(&bare, &[], now)
            .expect("no EKU extension");
        // webpki itself refuses a listed purpose without clientAuth.
        assert!(any.verify_client_cert(&server, &[], now).is_err());
    }

    fn self_issued(name: &str) -> (CertificateDer<'static>, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().expect("key");
        let params = ca_params(name);
        let der = params.self_signed(&key).expect("self-signed").der().clone();
        (der, Issuer::new(params, key))
    }

    /// A client leaf with 59 same-name self-issued "CA" certificates is refused before webpki
    /// (microseconds); the leaf alone verifies.
    #[test]
    fn client_chain_of_sixty_same_name_certificates_is_refused_by_shape() {
        let (ca, issuer) = self_issued("gate64 lab CA");
        let verifier = verifier(ca, ClientEku::Strict);
        let leaf = client_leaf(&issuer, vec![ExtendedKeyUsagePurpose::ClientAuth]);
        let fillers: Vec<CertificateDer<'static>> =
            (0..59).map(|_| self_issued("gate64 lab CA").0).collect();
        let now = UnixTime::now();
        let started = Instant::now();
        assert!(verifier.verify_client_cert(&leaf, &fillers, now).is_err());
        assert!(
            verifier
                .verify_client_cert(&leaf, &fillers[..3], now)
                .is_err()
        );
        let took = started.elapsed();
        // Printed, not asserted: a timing depends on the machine's load.
        println!("refused in {took:?}");
        verifier
            .verify_client_cert(&leaf, &[], now)
            .expect("the leaf alone");
    }
}
