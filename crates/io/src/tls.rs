//! TLS configuration for IP-HTTPS from PEM files: TLS 1.2 and 1.3 only (rustls implements
//! nothing older), optional client certificates. aws-lc-rs does the handshake (key exchange,
//! signatures, randomness); the records' ciphers are ring's, whose AES-GCM has a VAES + AVX2
//! path that aws-lc 0.47 lacks (docs/architecture.md, "Crypto libraries"). Both offer the
//! same suites in the same order.
//!
//! Client certificate chains are held to the shape IKE holds them to
//! ([`gate64_ike::auth::check_chain_shape`]: at most four certificates, one linear chain) before
//! webpki builds a path, so a client cannot make one TLS handshake cost a path search over
//! dozens of same-name intermediates.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::UnixTime;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use gate64_ike::auth::ClientEku;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: rustls::crypto::ring::DEFAULT_CIPHER_SUITES.to_vec(),
        ..rustls::crypto::aws_lc_rs::default_provider()
    })
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

/// Reads the CRLs of a file: PEM (one or more `X509 CRL` blocks) or one DER CRL.
pub fn load_crls(key: &str, path: &Path) -> io::Result<Vec<CertificateRevocationListDer<'static>>> {
    let data = std::fs::read(path).map_err(|e| bad(key, path, e))?;
    if !data.trim_ascii_start().starts_with(b"-----BEGIN") {
        return Ok(vec![CertificateRevocationListDer::from(data)]);
    }
    let crls = CertificateRevocationListDer::pem_slice_iter(&data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(key, path, e))?;
    if crls.is_empty() {
        return Err(bad(key, path, "no X509 CRL block in the file"));
    }
    Ok(crls)
}

/// Whether a failed TLS handshake (as tokio-rustls reports it) failed because the client's
/// certificate is listed in a CRL of `iphttps.client_crls`: counted and logged apart from
/// other handshake errors, since an admin looks for exactly that after revoking a laptop.
pub fn is_revoked(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| {
            matches!(
                r,
                rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked)
            )
        })
}

/// Builds the server configuration. With `client_ca`, clients must present a certificate
/// chaining to it (DirectAccess' "Certificates" authentication mode) whose extended key usage
/// meets `client_eku` (`ipsec.client_eku`, the rule IKE holds clients to), and that no CRL of
/// `client_crls` (`iphttps.client_crls`) revokes, a CRL past its nextUpdate refusing its CA's
/// clients under `crl_expired_refuses` (`ipsec.crl_expired = "refuse"`); without, none is
/// asked.
pub fn server_config(
    certificate: &Path,
    private_key: &Path,
    client_ca: Option<&Path>,
    (client_crls, crl_expired_refuses): (&[PathBuf], bool),
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
            let mut crls = Vec::new();
            for path in client_crls {
                crls.extend(load_crls("iphttps.client_crls", path)?);
            }
            let verifier = client_verifier(roots, (crls, crl_expired_refuses), client_eku)
                .map_err(|e| {
                    let key = if client_crls.is_empty() {
                        "iphttps.client_ca"
                    } else {
                        "iphttps.client_ca` / `iphttps.client_crls"
                    };
                    bad(key, ca, e)
                })?;
            builder.with_client_cert_verifier(Arc::new(verifier))
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

/// webpki's verifier over `roots` and `crls`, behind the chain-shape check. A certificate
/// (leaf or intermediate) whose issuer has no CRL is not checked, as in IKE; a CRL past its
/// nextUpdate is still used, unless `expired_refuses`.
fn client_verifier(
    roots: rustls::RootCertStore,
    (crls, expired_refuses): (Vec<CertificateRevocationListDer<'static>>, bool),
    client_eku: ClientEku,
) -> Result<ShapedClientVerifier, rustls::server::VerifierBuilderError> {
    let mut builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .with_crls(crls)
        .allow_unknown_revocation_status();
    if expired_refuses {
        builder = builder.enforce_revocation_expiration();
    }
    let inner = builder.build()?;
    Ok(ShapedClientVerifier { inner, client_eku })
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
        client_verifier(roots, (Vec::new(), false), client_eku).expect("verifier")
    }

    /// A handshake error is told apart as revoked only when rustls says the certificate is
    /// revoked, as tokio-rustls hands it over (an `io::Error` around the rustls error).
    #[test]
    fn is_revoked_sees_only_a_revoked_certificate() {
        let wrap = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        assert!(is_revoked(&wrap(rustls::Error::InvalidCertificate(
            rustls::CertificateError::Revoked
        ))));
        assert!(!is_revoked(&wrap(rustls::Error::InvalidCertificate(
            rustls::CertificateError::Expired
        ))));
        assert!(!is_revoked(&wrap(rustls::Error::DecryptError)));
        assert!(!is_revoked(&io::Error::other("revoked")));
        assert!(!is_revoked(&io::Error::from(io::ErrorKind::UnexpectedEof)));
    }

    /// A client certificate a CRL of its CA lists fails the handshake; another of the same CA
    /// passes, and so does one of a CA without a CRL.
    #[test]
    fn client_crls_refuse_revoked_certificates_only() {
        let (ca, issuer) = self_issued("gate64 lab CA");
        let (other_ca, other_issuer) = self_issued("gate64 other CA");
        let leaf = |issuer: &Issuer<'static, KeyPair>, serial: u64| {
            let key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::default();
            params
                .distinguished_name
                .push(DnType::CommonName, "client1");
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            params.serial_number = Some(rcgen::SerialNumber::from(serial));
            params.signed_by(&key, issuer).expect("leaf").der().clone()
        };
        let crl = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2020, 1, 1),
            next_update: rcgen::date_time_ymd(2099, 1, 1),
            crl_number: rcgen::SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: vec![rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from(7u64),
                revocation_time: rcgen::date_time_ymd(2021, 1, 1),
                reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                invalidity_date: None,
            }],
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        }
        .signed_by(&issuer)
        .expect("CRL");
        let dir = std::env::temp_dir().join(format!("gate64-tls-crl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (pem_path, der_path) = (dir.join("ca.crl.pem"), dir.join("ca.crl"));
        std::fs::write(&pem_path, crl.pem().expect("pem")).expect("write");
        std::fs::write(&der_path, crl.der().as_ref()).expect("write");
        let now = UnixTime::now();
        for path in [&pem_path, &der_path] {
            let crls = load_crls("iphttps.client_crls", path).expect("CRL loads");
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.clone()).expect("root");
            roots.add(other_ca.clone()).expect("root");
            let v = client_verifier(roots, (crls, false), ClientEku::Strict).expect("verifier");
            let e = v
                .verify_client_cert(&leaf(&issuer, 7), &[], now)
                .expect_err("revoked");
            assert!(
                matches!(
                    e,
                    rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked)
                ),
                "{e:?}"
            );
            v.verify_client_cert(&leaf(&issuer, 8), &[], now)
                .expect("not revoked");
            v.verify_client_cert(&leaf(&other_issuer, 7), &[], now)
                .expect("its CA has no CRL");
        }
        let garbage = dir.join("garbage.crl");
        std::fs::write(
            &garbage,
            "-----BEGIN X509 CRL-----\n!!\n-----END X509 CRL-----\n",
        )
        .expect("write");
        let e = load_crls("iphttps.client_crls", &garbage).expect_err("garbage");
        assert!(e.to_string().contains("iphttps.client_crls"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A CRL past its nextUpdate still counts (its revoked stay refused, the others pass)
    /// unless `crl_expired = "refuse"`, which then refuses its CA's clients.
    #[test]
    fn an_expired_client_crl_is_used_or_refuses_as_crl_expired_says() {
        let (ca, issuer) = self_issued("gate64 lab CA");
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "client1");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.serial_number = Some(rcgen::SerialNumber::from(8u64));
        let leaf = params.signed_by(&key, &issuer).expect("leaf").der().clone();
        let crl = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2020, 1, 1),
            next_update: rcgen::date_time_ymd(2021, 1, 1),
            crl_number: rcgen::SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: Vec::new(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        }
        .signed_by(&issuer)
        .expect("CRL");
        let crls = vec![CertificateRevocationListDer::from(crl.der().to_vec())];
        let roots = || {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.clone()).expect("root");
            roots
        };
        let now = UnixTime::now();
        client_verifier(roots(), (crls.clone(), false), ClientEku::Strict)
            .expect("verifier")
            .verify_client_cert(&leaf, &[], now)
            .expect("an expired CRL still counts under warn");
        let e = client_verifier(roots(), (crls, true), ClientEku::Strict)
            .expect("verifier")
            .verify_client_cert(&leaf, &[], now)
            .expect_err("refused under refuse");
        assert!(
            matches!(
                e,
                rustls::Error::InvalidCertificate(rustls::CertificateError::ExpiredRevocationList)
                    | rustls::Error::InvalidCertificate(
                        rustls::CertificateError::ExpiredRevocationListContext { .. }
                    )
            ),
            "{e:?}"
        );
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
        // The shape check's refusal, which webpki never returns: a refusal by path building
        // (an unknown issuer, a bad signature) is another error.
        let by_shape = |e: &rustls::Error| {
            matches!(
                e,
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::ApplicationVerificationFailure
                )
            )
        };
        let sixty = verifier
            .verify_client_cert(&leaf, &fillers, now)
            .expect_err("sixty certificates");
        let four = verifier
            .verify_client_cert(&leaf, &fillers[..3], now)
            .expect_err("three self-issued intermediates");
        let took = started.elapsed();
        assert!(by_shape(&sixty), "{sixty:?}");
        assert!(by_shape(&four), "{four:?}");
        // Which shape rule each breaks.
        let intermediates: Vec<&[u8]> = fillers.iter().map(|c| c.as_ref()).collect();
        assert!(matches!(
            gate64_ike::auth::check_chain_shape(&leaf, &intermediates),
            Err(gate64_ike::auth::AuthError::TooManyCertificates(60))
        ));
        assert!(matches!(
            gate64_ike::auth::check_chain_shape(&leaf, &intermediates[..3]),
            Err(gate64_ike::auth::AuthError::ChainNotLinear(_))
        ));
        // Printed, not asserted: a timing depends on the machine's load.
        println!("refused in {took:?}");
        verifier
            .verify_client_cert(&leaf, &[], now)
            .expect("the leaf alone");
    }
}
