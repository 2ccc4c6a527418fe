//! The certificates the IKE benches make with rcgen (ECDSA P-256, or RSA-2048 where asked),
//! outside any measurement.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};

/// A self-signed CA: its certificate (PEM) and what signs under it.
pub struct Ca {
    pub pem: String,
    pub issuer: Issuer<'static, KeyPair>,
}

/// A CA named `name` (keyCertSign, cRLSign).
pub fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let pem = params.self_signed(&key).unwrap().pem();
    Ca {
        pem,
        issuer: Issuer::new(params, key),
    }
}

/// A leaf under `ca` for `name` (its DNS name too; digitalSignature; clientAuth and
/// serverAuth, so one helper makes clients' and servers' certificates), with serial number
/// `serial` when given: (certificate PEM, key PEM).
pub fn leaf(ca: &Ca, name: &str, serial: Option<u64>) -> (String, String) {
    leaf_with_key(ca, name, serial, KeyPair::generate().unwrap())
}

/// [`leaf`] with an RSA-2048 key.
#[allow(dead_code)] // Not every bench that includes this module uses it.
pub fn rsa_leaf(ca: &Ca, name: &str) -> (String, String) {
    let key = KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048);
    leaf_with_key(ca, name, None, key.unwrap())
}

fn leaf_with_key(ca: &Ca, name: &str, serial: Option<u64>, key: KeyPair) -> (String, String) {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = vec![SanType::DnsName(name.try_into().unwrap())];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ClientAuth,
        ExtendedKeyUsagePurpose::ServerAuth,
    ];
    params.serial_number = serial.map(SerialNumber::from);
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}
