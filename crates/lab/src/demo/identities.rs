//! One IKE identity per emulated client. The demo's responder, like gate64's, honours
//! INITIAL_CONTACT (RFC 7296 §2.4): a new IKE SA for an identity replaces that identity's older
//! one in the same tunnel, so clients sharing `gate64 certs`' one client certificate would
//! replace each other. A throw-away CA, in memory only, issues each client its own ECDSA P-256
//! certificate (CN `client<N>.demo.gate64.lab`) when it starts.

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// id-kp-ipsecIKE (RFC 4945 §5.1.3.12).
const EKU_IPSEC_IKE: [u64; 9] = [1, 3, 6, 1, 5, 5, 7, 3, 17];

/// The demo clients' CA.
pub struct ClientCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl ClientCa {
    /// A new self-signed CA.
    pub fn generate() -> Result<Self> {
        let key = KeyPair::generate().context("generating the demo clients CA key")?;
        let mut ca = CertificateParams::default();
        ca.distinguished_name
            .push(DnType::CommonName, "gate64 demo clients CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let pem = ca
            .self_signed(&key)
            .context("signing the demo clients CA")?
            .pem();
        Ok(ClientCa {
            issuer: Issuer::new(ca, key),
            pem,
        })
    }

    /// The CA certificate (what the responder trusts).
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// Client `n`'s certificate and key (PEM).
    pub fn issue(&self, n: usize) -> Result<(Vec<u8>, Vec<u8>)> {
        let mut leaf = CertificateParams::default();
        leaf.distinguished_name
            .push(DnType::CommonName, format!("client{n}.demo.gate64.lab"));
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::Other(EKU_IPSEC_IKE.to_vec()),
        ];
        leaf.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().context("generating a client key")?;
        let cert = leaf
            .signed_by(&key, &self.issuer)
            .context("signing a client certificate")?;
        Ok((cert.pem().into_bytes(), key.serialize_pem().into_bytes()))
    }
}
