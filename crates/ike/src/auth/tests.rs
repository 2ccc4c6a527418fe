//! Tests of the auth module: keys and certificates from rcgen, cross-checks with strongSwan's
//! `pki` and `openssl` where they are installed.

use super::algid::{self, Scheme};
use super::*;
use aws_lc_rs::digest;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, PublicKeyData, RsaKeySize, SanType, SignatureAlgorithm,
};
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const IPSEC_IKE: [u64; 9] = [1, 3, 6, 1, 5, 5, 7, 3, 17];
const OCTETS: &[u8] = b"IKE_SA_INIT response | Nr | prf(SK_pr, IDr')";

pub(super) struct Ca {
    pub(super) pem: String,
    pub(super) issuer: Issuer<'static, KeyPair>,
}

pub(super) fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

impl Ca {
    /// An intermediate CA under this one, and its certificate's DER.
    pub(super) fn intermediate(&self, name: &str) -> (Ca, Vec<u8>) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let der = cert.der().to_vec();
        let ca = Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        };
        (ca, der)
    }
}

pub(super) struct Leaf {
    pem: String,
    key_pem: String,
    pub(super) der: Vec<u8>,
}

pub(super) fn key(alg: &'static SignatureAlgorithm) -> KeyPair {
    if alg == &rcgen::PKCS_RSA_SHA256 {
        KeyPair::generate_rsa_for(alg, RsaKeySize::_2048).unwrap()
    } else {
        KeyPair::generate_for(alg).unwrap()
    }
}

/// A client leaf as `gate64 certs` makes it: DN and SAN client1.gate64.lab, an IPv6 address and
/// an email SAN, digitalSignature, EKU clientAuth + ipsecIKE; `edit` changes it.
pub(super) fn leaf_with(ca: &Ca, key: &KeyPair, edit: impl FnOnce(&mut CertificateParams)) -> Leaf {
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "client1.gate64.lab");
    params.subject_alt_names = vec![
        SanType::DnsName("client1.gate64.lab".try_into().unwrap()),
        SanType::IpAddress("2001:db8::7".parse().unwrap()),
        SanType::Rfc822Name("alice@gate64.lab".try_into().unwrap()),
    ];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![Eku::ClientAuth, Eku::Other(IPSEC_IKE.to_vec())];
    params.use_authority_key_identifier_extension = true;
    edit(&mut params);
    let cert = params.signed_by(key, &ca.issuer).unwrap();
    Leaf {
        pem: cert.pem(),
        key_pem: key.serialize_pem(),
        der: cert.der().to_vec(),
    }
}

fn leaf(ca: &Ca, alg: &'static SignatureAlgorithm) -> Leaf {
    leaf_with(ca, &key(alg), |_| {})
}

fn now() -> SystemTime {
    SystemTime::now()
}

fn at(year: i32) -> SystemTime {
    let secs = rcgen::date_time_ymd(year, 6, 1).unix_timestamp();
    UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap())
}

fn anchors(ca: &Ca) -> TrustAnchors {
    TrustAnchors::from_pem(ca.pem.as_bytes()).unwrap()
}

fn verified(ca: &Ca, leaf: &Leaf) -> PeerCert {
    anchors(ca).verify_peer(&leaf.der, &[], now()).unwrap()
}

fn creds(leaf: &Leaf) -> Credentials {
    Credentials::from_pem(leaf.pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap()
}

/// Signs with `method`, checks the method used and that the peer side verifies it, and that
/// other octets or a flipped signature byte do not.
fn round_trip(leaf: &Leaf, peer: &PeerCert, method: AuthMethod, hashes: &[SigHash]) -> Vec<u8> {
    let (used, data) = creds(leaf).sign(method, OCTETS, hashes).unwrap();
    assert_eq!(used, method);
    peer.verify_auth(method, &data, OCTETS).unwrap();
    assert_eq!(
        peer.verify_auth(method, &data, b"other octets"),
        Err(AuthError::BadSignature)
    );
    let mut tampered = data.clone();
    *tampered.last_mut().unwrap() ^= 0x01;
    assert_eq!(
        peer.verify_auth(method, &tampered, OCTETS),
        Err(AuthError::BadSignature)
    );
    data
}

#[test]
fn ecdsa_p256_rfc4754_method_9_round_trip() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_ECDSA_P256_SHA256);
    let data = round_trip(
        &leaf,
        &verified(&ca, &leaf),
        AuthMethod::EcdsaP256Sha256,
        &[],
    );
    // RFC 4754 §7: r and s, 32 bytes each, no DER.
    assert_eq!(data.len(), 64);
}

#[test]
fn ecdsa_p256_rfc7427_method_14_round_trip() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_ECDSA_P256_SHA256);
    let peer = verified(&ca, &leaf);
    for hashes in [&[][..], &[SigHash::Sha512, SigHash::Sha256][..]] {
        let data = round_trip(&leaf, &peer, AuthMethod::DigitalSignature, hashes);
        // RFC 7427 Appendix A.3.1: ecdsa-with-SHA256, then a DER Ecdsa-Sig-Value.
        assert_eq!(
            &data[..13],
            &[
                0x0c, 0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02
            ]
        );
        assert_eq!(data[13], 0x30, "DER SEQUENCE");
    }
}

#[test]
fn ecdsa_p384_methods_10_and_14_round_trip() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_ECDSA_P384_SHA384);
    let peer = verified(&ca, &leaf);
    let data = round_trip(&leaf, &peer, AuthMethod::EcdsaP384Sha384, &[]);
    assert_eq!(data.len(), 96);
    let data = round_trip(
        &leaf,
        &peer,
        AuthMethod::DigitalSignature,
        &[SigHash::Sha384],
    );
    assert_eq!(
        &data[1..1 + data[0] as usize],
        algid::encode(Scheme::Ecdsa(SigHash::Sha384))
    );
}

#[test]
fn ecdsa_without_a_common_hash_falls_back_to_the_classic_method() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_ECDSA_P384_SHA384);
    let (used, data) = creds(&leaf)
        .sign(AuthMethod::DigitalSignature, OCTETS, &[SigHash::Sha256])
        .unwrap();
    assert_eq!(used, AuthMethod::EcdsaP384Sha384);
    verified(&ca, &leaf)
        .verify_auth(used, &data, OCTETS)
        .unwrap();
}

#[test]
fn rsa_method_14_round_trip_picks_a_peer_hash() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_RSA_SHA256);
    let peer = verified(&ca, &leaf);
    let data = round_trip(&leaf, &peer, AuthMethod::DigitalSignature, &[]);
    assert_eq!(
        &data[1..1 + data[0] as usize],
        algid::encode(Scheme::RsaPkcs1(SigHash::Sha256))
    );
    let data = round_trip(
        &leaf,
        &peer,
        AuthMethod::DigitalSignature,
        &[SigHash::Sha512, SigHash::Sha384],
    );
    assert_eq!(
        &data[1..1 + data[0] as usize],
        algid::encode(Scheme::RsaPkcs1(SigHash::Sha384))
    );
    assert_eq!(data.len() - 1 - data[0] as usize, 256, "2048-bit signature");
}

#[test]
fn rsa_pss_in_method_14_verifies() {
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{RSA_PSS_SHA256, RSA_PSS_SHA384, RsaKeyPair};
    let ca = ca("lab CA");
    let key = key(&rcgen::PKCS_RSA_SHA256);
    let leaf = leaf_with(&ca, &key, |_| {});
    let peer = verified(&ca, &leaf);
    let pair = RsaKeyPair::from_pkcs8(&key.serialize_der()).unwrap();
    for (hash, encoding) in [
        (SigHash::Sha256, &RSA_PSS_SHA256),
        (SigHash::Sha384, &RSA_PSS_SHA384),
    ] {
        let mut sig = vec![0; pair.public_modulus_len()];
        pair.sign(encoding, &SystemRandom::new(), OCTETS, &mut sig)
            .unwrap();
        let data = algid::auth_data(Scheme::RsaPss(hash), &sig);
        peer.verify_auth(AuthMethod::DigitalSignature, &data, OCTETS)
            .unwrap();
        sig[0] ^= 0x80;
        let data = algid::auth_data(Scheme::RsaPss(hash), &sig);
        assert_eq!(
            peer.verify_auth(AuthMethod::DigitalSignature, &data, OCTETS),
            Err(AuthError::BadSignature)
        );
    }
}

#[test]
fn rsa_pss_credentials_round_trip() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_RSA_SHA256);
    let peer = verified(&ca, &leaf);
    let creds = creds(&leaf).with_rsa_pss();
    for (hashes, hash) in [
        (&[][..], SigHash::Sha256),
        (&[SigHash::Sha512][..], SigHash::Sha512),
    ] {
        let (used, data) = creds
            .sign(AuthMethod::DigitalSignature, OCTETS, hashes)
            .unwrap();
        assert_eq!(used, AuthMethod::DigitalSignature);
        assert_eq!(
            &data[1..1 + data[0] as usize],
            algid::encode(Scheme::RsaPss(hash))
        );
        peer.verify_auth(used, &data, OCTETS).unwrap();
        assert_eq!(
            peer.verify_auth(used, &data, b"other octets"),
            Err(AuthError::BadSignature)
        );
    }
}

#[test]
fn rsa_method_1_is_not_signed_without_a_sha1_signer() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_RSA_SHA256);
    assert_eq!(creds(&leaf).classic_method(), AuthMethod::RsaPkcs1);
    assert_eq!(
        creds(&leaf).sign(AuthMethod::RsaPkcs1, OCTETS, &[]),
        Err(AuthError::UnsupportedMethod(1))
    );
}

/// gate64-sys's aws-lc SHA-1 signer, as the daemon and the client hand it over.
struct SysSha1(gate64_sys::rsa_sha1::RsaSha1Signer);

impl Sha1RsaSigner for SysSha1 {
    fn sign_sha1(&self, octets: &[u8]) -> Option<Vec<u8>> {
        self.0.sign(octets).ok()
    }
}

pub(crate) fn sys_sha1(der: &[u8], pkcs1: bool) -> Option<Box<dyn Sha1RsaSigner>> {
    let signer = gate64_sys::rsa_sha1::RsaSha1Signer::from_der(der, pkcs1).ok()?;
    Some(Box::new(SysSha1(signer)))
}

fn creds_sha1(leaf: &Leaf) -> Credentials {
    Credentials::from_pem_with_sha1(leaf.pem.as_bytes(), leaf.key_pem.as_bytes(), sys_sha1).unwrap()
}

#[test]
fn rsa_method_1_round_trip_with_a_sha1_signer() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_RSA_SHA256);
    let peer = verified(&ca, &leaf);
    let creds = creds_sha1(&leaf);
    let (used, data) = creds.sign(AuthMethod::RsaPkcs1, OCTETS, &[]).unwrap();
    assert_eq!(used, AuthMethod::RsaPkcs1);
    // RFC 7296 §3.8: the bare signature, as long as the modulus, no AlgorithmIdentifier.
    assert_eq!(data.len(), 256);
    peer.verify_auth(AuthMethod::RsaPkcs1, &data, OCTETS)
        .unwrap();
    assert_eq!(
        peer.verify_auth(AuthMethod::RsaPkcs1, &data, b"other octets"),
        Err(AuthError::BadSignature)
    );
    // PKCS#1 v1.5 is deterministic: the same octets, the same signature.
    assert_eq!(
        creds.sign(AuthMethod::RsaPkcs1, OCTETS, &[]).unwrap().1,
        data
    );
    // A SHA-1 signature is no method-14 SHA-256 one.
    let as14 = algid::auth_data(Scheme::RsaPkcs1(SigHash::Sha256), &data);
    assert_eq!(
        peer.verify_auth(AuthMethod::DigitalSignature, &as14, OCTETS),
        Err(AuthError::BadSignature)
    );
    // Method 14 is unchanged by the signer.
    let (used, data) = creds
        .sign(AuthMethod::DigitalSignature, OCTETS, &SigHash::ALL)
        .unwrap();
    assert_eq!(used, AuthMethod::DigitalSignature);
    assert_eq!(
        &data[1..1 + data[0] as usize],
        algid::encode(Scheme::RsaPkcs1(SigHash::Sha256))
    );
}

#[test]
fn a_sha1_signer_of_another_key_is_refused() {
    fn other_key(_: &[u8], pkcs1: bool) -> Option<Box<dyn Sha1RsaSigner>> {
        let other = key(&rcgen::PKCS_RSA_SHA256);
        assert!(!pkcs1, "rcgen writes PKCS#8");
        sys_sha1(&other.serialize_der(), false)
    }
    fn refusing(_: &[u8], _: bool) -> Option<Box<dyn Sha1RsaSigner>> {
        None
    }
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_RSA_SHA256);
    let load = |loader| {
        Credentials::from_pem_with_sha1(leaf.pem.as_bytes(), leaf.key_pem.as_bytes(), loader)
    };
    assert_eq!(load(other_key).unwrap_err(), AuthError::KeyMismatch);
    assert!(matches!(
        load(refusing).unwrap_err(),
        AuthError::BadPrivateKey(_)
    ));
    // ECDSA credentials never ask the loader.
    let p256 = leaf_with(&ca, &key(&rcgen::PKCS_ECDSA_P256_SHA256), |_| {});
    let creds =
        Credentials::from_pem_with_sha1(p256.pem.as_bytes(), p256.key_pem.as_bytes(), refusing)
            .unwrap();
    assert_eq!(creds.classic_method(), AuthMethod::EcdsaP256Sha256);
    assert_eq!(
        creds.sign(AuthMethod::RsaPkcs1, OCTETS, &[]),
        Err(AuthError::UnsupportedMethod(1))
    );
}

#[test]
fn method_and_key_must_agree() {
    let ca = ca("lab CA");
    let p256 = leaf(&ca, &rcgen::PKCS_ECDSA_P256_SHA256);
    let (_, data) = creds(&p256)
        .sign(AuthMethod::EcdsaP256Sha256, OCTETS, &[])
        .unwrap();
    let peer = verified(&ca, &p256);
    for method in [AuthMethod::EcdsaP384Sha384, AuthMethod::RsaPkcs1] {
        assert!(matches!(
            peer.verify_auth(method, &data, OCTETS),
            Err(AuthError::MethodKeyMismatch { .. })
        ));
    }
    assert!(matches!(
        creds(&p256).sign(AuthMethod::EcdsaP384Sha384, OCTETS, &[]),
        Err(AuthError::MethodKeyMismatch { method: 10, .. })
    ));
    // An RSA AlgorithmIdentifier around an ECDSA key.
    let (_, data) = creds(&p256)
        .sign(AuthMethod::DigitalSignature, OCTETS, &[])
        .unwrap();
    let sig = &data[1 + data[0] as usize..];
    let rsa = algid::auth_data(Scheme::RsaPkcs1(SigHash::Sha256), sig);
    assert!(matches!(
        peer.verify_auth(AuthMethod::DigitalSignature, &rsa, OCTETS),
        Err(AuthError::MethodKeyMismatch { .. })
    ));
}

#[test]
fn method_14_refuses_sha1_and_malformed_data() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_ECDSA_P256_SHA256);
    let peer = verified(&ca, &leaf);
    let sig = [0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01];
    let with_algid = |algid: &[u8]| {
        let mut d = vec![algid.len() as u8];
        d.extend_from_slice(algid);
        d.extend_from_slice(&sig);
        d
    };
    // ecdsa-with-SHA1 and sha1WithRSAEncryption (RFC 7427 Appendix A.1.1).
    let ecdsa_sha1 = [
        0x30, 0x09, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01,
    ];
    let rsa_sha1 = [
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05, 0x05, 0x00,
    ];
    // RSASSA-PSS with all parameters defaulted means SHA-1.
    let pss_sha1 = [
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a, 0x30, 0x00,
    ];
    for algid in [&ecdsa_sha1[..], &rsa_sha1, &pss_sha1] {
        assert!(matches!(
            peer.verify_auth(AuthMethod::DigitalSignature, &with_algid(algid), OCTETS),
            Err(AuthError::UnsupportedAlgorithm(_))
        ));
    }
    let ecdsa_sha256 = algid::encode(Scheme::Ecdsa(SigHash::Sha256));
    let mut trailing = ecdsa_sha256.to_vec();
    trailing.push(0);
    let mut long = with_algid(ecdsa_sha256);
    long[0] = 0xff;
    for bad in [
        vec![],
        vec![0x0c],
        ecdsa_sha256.to_vec(),
        long,
        with_algid(&trailing),
        with_algid(&[0x04, 0x02, 0x01, 0x02]),
    ] {
        assert!(matches!(
            peer.verify_auth(AuthMethod::DigitalSignature, &bad, OCTETS),
            Err(AuthError::Malformed(_))
        ));
    }
}

#[test]
fn chain_from_another_ca_is_unknown_ca() {
    let (ours, theirs) = (ca("lab CA"), ca("other CA"));
    let leaf = leaf(&theirs, &rcgen::PKCS_ECDSA_P256_SHA256);
    assert_eq!(
        anchors(&ours)
            .verify_peer(&leaf.der, &[], now())
            .unwrap_err(),
        AuthError::UnknownCa
    );
}

#[test]
fn validity_is_checked_at_the_given_time() {
    let ca = ca("lab CA");
    let leaf = leaf_with(&ca, &key(&rcgen::PKCS_ECDSA_P256_SHA256), |p| {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    let anchors = anchors(&ca);
    assert_eq!(
        anchors.verify_peer(&leaf.der, &[], now()).unwrap_err(),
        AuthError::Expired
    );
    assert_eq!(
        anchors.verify_peer(&leaf.der, &[], at(2019)).unwrap_err(),
        AuthError::NotYetValid
    );
    anchors.verify_peer(&leaf.der, &[], at(2020)).unwrap();
}

#[test]
fn chain_through_an_intermediate() {
    let root = ca("lab root");
    let (intermediate, intermediate_der) = root.intermediate("lab issuing CA");
    let leaf = leaf(&intermediate, &rcgen::PKCS_ECDSA_P256_SHA256);
    let anchors = anchors(&root);
    let peer = anchors
        .verify_peer(&leaf.der, &[&intermediate_der], now())
        .unwrap();
    assert_eq!(peer.subject(), "CN=client1.gate64.lab");
    assert_eq!(
        anchors.verify_peer(&leaf.der, &[], now()).unwrap_err(),
        AuthError::UnknownCa
    );
    // Trusting the intermediate alone is enough too.
    TrustAnchors::from_pem(intermediate.pem.as_bytes())
        .unwrap()
        .verify_peer(&leaf.der, &[], now())
        .unwrap();
}

#[test]
fn extended_key_usage_rule() {
    let ca = ca("lab CA");
    let anchors = anchors(&ca);
    let with_ekus = |ekus: Vec<Eku>| {
        let leaf = leaf_with(&ca, &key(&rcgen::PKCS_ECDSA_P256_SHA256), |p| {
            p.extended_key_usages = ekus;
        });
        anchors.verify_peer(&leaf.der, &[], now()).map(|_| ())
    };
    with_ekus(vec![]).unwrap();
    with_ekus(vec![Eku::Other(IPSEC_IKE.to_vec())]).unwrap();
    with_ekus(vec![Eku::ServerAuth]).unwrap();
    with_ekus(vec![Eku::ClientAuth]).unwrap();
    with_ekus(vec![Eku::CodeSigning, Eku::Any]).unwrap();
    assert!(matches!(
        with_ekus(vec![Eku::CodeSigning, Eku::EmailProtection]),
        Err(AuthError::BadKeyUsage(_))
    ));
}

#[test]
fn client_anchors_hold_the_leaf_to_client_auth_or_ipsec_ike_unless_any() {
    let ca = ca("lab CA");
    let check = |anchors: &TrustAnchors, ekus: Vec<Eku>| {
        let leaf = leaf_with(&ca, &key(&rcgen::PKCS_ECDSA_P256_SHA256), |p| {
            p.extended_key_usages = ekus;
        });
        anchors.verify_peer(&leaf.der, &[], now()).map(|_| ())
    };
    let strict = anchors(&ca).for_clients(ClientEku::Strict);
    check(&strict, vec![Eku::ClientAuth]).unwrap();
    check(&strict, vec![Eku::Other(IPSEC_IKE.to_vec())]).unwrap();
    check(&strict, vec![Eku::ServerAuth, Eku::ClientAuth]).unwrap();
    for refused in [
        vec![Eku::ServerAuth],
        vec![],
        vec![Eku::Any],
        vec![Eku::CodeSigning, Eku::Any],
    ] {
        assert_eq!(
            check(&strict, refused.clone()),
            Err(AuthError::BadKeyUsage(
                "extended key usage lacks clientAuth and ipsecIKE"
            )),
            "{refused:?}"
        );
    }
    // `any`: what the chain rule accepts, as for a server's anchors.
    let any = anchors(&ca).for_clients(ClientEku::Any);
    for accepted in [vec![Eku::ServerAuth], vec![], vec![Eku::Any]] {
        check(&any, accepted).unwrap();
    }
    assert_eq!(any.client_eku(), Some(ClientEku::Any));
    assert_eq!(anchors(&ca).client_eku(), None);
}

#[test]
fn key_usage_must_allow_signatures() {
    let ca = ca("lab CA");
    let anchors = anchors(&ca);
    let with_usages = |usages: Vec<KeyUsagePurpose>| {
        let leaf = leaf_with(&ca, &key(&rcgen::PKCS_ECDSA_P256_SHA256), |p| {
            p.key_usages = usages;
        });
        anchors.verify_peer(&leaf.der, &[], now()).map(|_| ())
    };
    with_usages(vec![]).unwrap();
    with_usages(vec![KeyUsagePurpose::ContentCommitment]).unwrap();
    assert!(matches!(
        with_usages(vec![KeyUsagePurpose::KeyEncipherment]),
        Err(AuthError::BadKeyUsage(_))
    ));
}

#[test]
fn identities_match_subject_and_alt_names() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_ECDSA_P256_SHA256);
    let peer = verified(&ca, &leaf);
    let own = creds(&leaf).id();
    assert_eq!(own.id_type, IdType::DerAsn1Dn);
    assert_eq!(own.to_string(), "dn:CN=client1.gate64.lab");
    let spki_sha1 = digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, &key_spki(&leaf.key_pem));
    for id in [
        own,
        Identity::fqdn("client1.gate64.lab"),
        Identity::fqdn("Client1.GATE64.lab."),
        Identity::email("Alice@gate64.lab"),
        Identity::ip("2001:db8::7".parse().unwrap()),
        Identity::key_id(spki_sha1.as_ref()),
    ] {
        assert!(peer.matches_id(&id), "{id}");
    }
    let other_dn = Credentials::from_pem(
        leaf_with(&ca, &key(&rcgen::PKCS_ECDSA_P256_SHA256), |p| {
            p.distinguished_name = rcgen::DistinguishedName::new();
            p.distinguished_name
                .push(DnType::CommonName, "client2.gate64.lab");
        })
        .pem
        .as_bytes(),
        leaf.key_pem.as_bytes(),
    );
    assert_eq!(other_dn.unwrap_err(), AuthError::KeyMismatch);
    for id in [
        Identity::fqdn("client2.gate64.lab"),
        Identity::fqdn("gate64.lab"),
        Identity::email("bob@gate64.lab"),
        Identity::ip("2001:db8::8".parse().unwrap()),
        Identity::ip("192.0.2.7".parse().unwrap()),
        Identity::key_id(b"not a key id"),
        Identity::der_dn(&[0x30, 0x00]),
    ] {
        assert!(!peer.matches_id(&id), "{id}");
    }
}

#[test]
fn credentials_identity_can_be_replaced_by_a_name_the_certificate_holds() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_ECDSA_P256_SHA256);
    let ip: IpAddr = "2001:db8::7".parse().unwrap();
    let creds = creds(&leaf).with_id(Identity::ip(ip)).unwrap();
    assert_eq!(creds.id(), Identity::ip(ip));
    assert_eq!(
        creds.with_id(Identity::fqdn("gw.example.net")).unwrap_err(),
        AuthError::IdMismatch
    );
}

#[test]
fn identity_payload_body_round_trip() {
    let id = Identity::fqdn("gw.gate64.lab");
    let body = id.payload_body();
    assert_eq!(&body[..4], &[2, 0, 0, 0]);
    assert_eq!(Identity::from_payload_body(&body).unwrap(), id);
    assert_eq!(Identity::new(4, b"x"), Err(AuthError::UnsupportedIdType(4)));
    assert!(matches!(
        Identity::new(1, &[1, 2, 3]),
        Err(AuthError::Malformed(_))
    ));
    assert!(matches!(
        Identity::from_payload_body(&[9, 0, 0]),
        Err(AuthError::Malformed(_))
    ));
    assert_eq!(Identity::new(5, &[0; 16]).unwrap().to_string(), "ip:::");
}

fn key_spki(key_pem: &str) -> Vec<u8> {
    KeyPair::from_pem(key_pem)
        .unwrap()
        .subject_public_key_info()
}

#[test]
fn certreq_data_is_sha1_of_each_ca_spki_rfc7296_3_7() {
    let (a, b) = (ca("CA one"), ca("CA two"));
    let bundle = format!("{}{}", a.pem, b.pem);
    let anchors = TrustAnchors::from_pem(bundle.as_bytes()).unwrap();
    assert_eq!(anchors.len(), 2);
    let mut expected = Vec::new();
    for ca in [&a, &b] {
        let spki = ca.issuer.key().subject_public_key_info();
        expected
            .extend_from_slice(digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, &spki).as_ref());
    }
    assert_eq!(anchors.certreq_data(), expected);
    assert_eq!(anchors.certreq_data().len(), 40);
}

#[test]
fn pem_errors_are_named() {
    let ca = ca("lab CA");
    let leaf = leaf(&ca, &rcgen::PKCS_ECDSA_P256_SHA256);
    assert_eq!(
        TrustAnchors::from_pem(b"").unwrap_err(),
        AuthError::NoCertificate
    );
    assert_eq!(
        Credentials::from_pem(b"", leaf.key_pem.as_bytes()).unwrap_err(),
        AuthError::NoCertificate
    );
    assert!(matches!(
        Credentials::from_pem(leaf.pem.as_bytes(), b"nothing"),
        Err(AuthError::BadPrivateKey(_))
    ));
    let rsa = key(&rcgen::PKCS_RSA_SHA256).serialize_pem();
    assert!(matches!(
        Credentials::from_pem(leaf.pem.as_bytes(), rsa.as_bytes()),
        Err(AuthError::BadPrivateKey(_))
    ));
    let p384 = key(&rcgen::PKCS_ECDSA_P384_SHA384).serialize_pem();
    assert!(matches!(
        Credentials::from_pem(leaf.pem.as_bytes(), p384.as_bytes()),
        Err(AuthError::BadPrivateKey(_))
    ));
    assert!(matches!(
        anchors(&ca).verify_peer(b"\x30\x03\x02\x01\x00", &[], now()),
        Err(AuthError::Malformed(_))
    ));
}

#[test]
fn credentials_chain_is_leaf_first() {
    let root = ca("lab root");
    let (intermediate, intermediate_der) = root.intermediate("lab issuing CA");
    let leaf = leaf(&intermediate, &rcgen::PKCS_ECDSA_P256_SHA256);
    let chain = format!("{}{}", leaf.pem, intermediate.pem);
    let creds = Credentials::from_pem(chain.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
    assert_eq!(creds.leaf_der(), leaf.der.as_slice());
    let all: Vec<&[u8]> = creds.chain_der().collect();
    assert_eq!(all, vec![leaf.der.as_slice(), intermediate_der.as_slice()]);
}

#[test]
fn signature_hash_algorithms_notify_rfc7427_4() {
    assert_eq!(SigHash::notify_data(), vec![0, 2, 0, 3, 0, 4]);
    // SHA-1 (1) and Identity (5) are skipped, order kept.
    assert_eq!(
        SigHash::parse_notify(&[0, 1, 0, 4, 0, 5, 0, 2]).unwrap(),
        vec![SigHash::Sha512, SigHash::Sha256]
    );
    assert!(matches!(
        SigHash::parse_notify(&[0, 2, 0]),
        Err(AuthError::Malformed(_))
    ));
    assert_eq!(
        AuthMethod::try_from(2),
        Err(AuthError::UnsupportedMethod(2))
    );
    assert_eq!(AuthMethod::try_from(14), Ok(AuthMethod::DigitalSignature));
}

#[test]
fn auth_types_can_be_shared_between_threads() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<Credentials>();
    shared::<TrustAnchors>();
    shared::<PeerCert>();
    shared::<AuthError>();
    let ca = ca("lab CA");
    let debug = format!("{:?}", creds(&leaf(&ca, &rcgen::PKCS_ECDSA_P256_SHA256)));
    assert!(
        debug.contains("ECDSA P-256") && !debug.contains("BEGIN"),
        "{debug}"
    );
}
