//! Cross-checks with tools nobody here wrote: certificates and keys made by strongSwan's `pki`,
//! signatures checked and made by `openssl`. A missing tool fails the test (`scripts/test`
//! installs both), unless the run opted out (`scripts/test --unit-only`, `GATE64_UNIT_ONLY`):
//! then it skips, writing a line to `GATE64_SKIP_LOG` for scripts/test to count.

use super::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

const OCTETS: &[u8] = b"IKE_SA_INIT request | Nr | prf(SK_pi, IDi')";

#[path = "../../../testkit/src/skip.rs"]
mod skip;

fn tool(name: &str) -> bool {
    let found = Command::new(name).arg("version").output().is_ok();
    if !found {
        skip::skip_or_fail("an ike interop test", &format!("`{name}` is not installed"));
    }
    found
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("gate64-ike-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cmd args` in `dir`, writes its stdout to `dir/out` when given, and panics with its
/// stderr when it fails.
fn run(dir: &Path, out: Option<&str>, cmd: &str, args: &[&str]) {
    let output = Command::new(cmd)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    if let Some(out) = out {
        std::fs::write(dir.join(out), &output.stdout).unwrap();
    }
}

/// A CA and a client certificate made with strongSwan's `pki` as interop-strongswan.md does.
fn pki_set(dir: &TempDir, prefix: &str, key_type: &str, size: &str) {
    let d = &dir.0;
    let (ca_key, ca_pem) = (format!("{prefix}ca.key"), format!("{prefix}ca.pem"));
    let gen_args = [
        "--gen",
        "--type",
        key_type,
        "--size",
        size,
        "--outform",
        "pem",
    ];
    run(d, Some(&ca_key), "pki", &gen_args);
    run(
        d,
        Some(&ca_pem),
        "pki",
        &[
            "--self",
            "--ca",
            "--lifetime",
            "30",
            "--in",
            &ca_key,
            "--type",
            key_type,
            "--dn",
            "C=CH, O=gate64, CN=gate64 strongSwan CA",
            "--outform",
            "pem",
        ],
    );
    let (key, pem) = (format!("{prefix}client.key"), format!("{prefix}client.pem"));
    run(d, Some(&key), "pki", &gen_args);
    run(
        d,
        Some(&pem),
        "pki",
        &[
            "--issue",
            "--in",
            &key,
            "--type",
            "priv",
            "--cacert",
            &ca_pem,
            "--cakey",
            &ca_key,
            "--dn",
            "C=CH, O=gate64, CN=client1.gate64.lab",
            "--san",
            "client1.gate64.lab",
            "--san",
            "2001:db8::7",
            "--flag",
            "clientAuth",
            "--flag",
            "serverAuth",
            "--outform",
            "pem",
        ],
    );
}

fn first_cert_der(pem: &[u8]) -> Vec<u8> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

#[test]
fn strongswan_pki_ecdsa_certificate_verifies_and_its_key_signs() {
    if !tool("pki") {
        return;
    }
    let dir = TempDir::new("pki-ecdsa");
    pki_set(&dir, "", "ecdsa", "256");
    pki_set(&dir, "other-", "ecdsa", "256");
    // pki writes SEC1 `EC PRIVATE KEY` blocks.
    assert!(
        dir.read("client.key")
            .starts_with(b"-----BEGIN EC PRIVATE KEY-----")
    );
    let anchors = TrustAnchors::from_pem(&dir.read("ca.pem")).unwrap();
    let leaf = first_cert_der(&dir.read("client.pem"));
    let peer = anchors.verify_peer(&leaf, &[], SystemTime::now()).unwrap();
    assert_eq!(peer.subject(), "C=CH, O=gate64, CN=client1.gate64.lab");
    assert!(peer.matches_id(&Identity::fqdn("client1.gate64.lab")));
    assert!(peer.matches_id(&Identity::ip("2001:db8::7".parse().unwrap())));

    let creds = Credentials::from_pem(&dir.read("client.pem"), &dir.read("client.key")).unwrap();
    assert!(
        peer.matches_id(&creds.id()),
        "strongSwan's default ID is the subject DN"
    );
    for method in [AuthMethod::EcdsaP256Sha256, AuthMethod::DigitalSignature] {
        let (used, data) = creds.sign(method, OCTETS, &SigHash::ALL).unwrap();
        assert_eq!(used, method);
        peer.verify_auth(used, &data, OCTETS).unwrap();
    }

    // The other CA has the same DN as the trusted one: its certificates must still be refused.
    let other = first_cert_der(&dir.read("other-client.pem"));
    assert_eq!(
        anchors
            .verify_peer(&other, &[], SystemTime::now())
            .unwrap_err(),
        AuthError::UnknownCa
    );

    strongswan_signatures_as_method_14(
        &dir,
        &peer,
        &[
            ("sha256", "pkcs1", Ok(())),
            ("sha384", "pkcs1", Ok(())),
            ("sha512", "pkcs1", Ok(())),
            (
                "sha1",
                "pkcs1",
                Err(AuthError::UnsupportedAlgorithm("SHA-1 (ecdsa-with-SHA1)")),
            ),
        ],
    );
}

/// strongSwan signs a PKCS#10 request with the client key for each (digest, RSA padding); its
/// AlgorithmIdentifier and signature, put into method-14 AUTH data over the request info, must
/// verify (or fail) as `expected` says. strongSwan encodes signature schemes with one encoder
/// for certificates, requests and IKE AUTH (RFC 7427), so this checks our parsing of what a
/// strongSwan peer sends, PSS parameters included.
fn strongswan_signatures_as_method_14(
    dir: &TempDir,
    peer: &PeerCert,
    cases: &[(&str, &str, Result<(), AuthError>)],
) {
    use x509_parser::certification_request::X509CertificationRequest;
    use x509_parser::prelude::FromDer;
    use x509_parser::x509::AlgorithmIdentifier;
    for (digest, padding, expected) in cases {
        let args = [
            "--req",
            "--in",
            "client.key",
            "--type",
            "priv",
            "--dn",
            "CN=client1.gate64.lab",
            "--digest",
            digest,
            "--rsa-padding",
            padding,
            "--outform",
            "der",
        ];
        run(&dir.0, Some("req.der"), "pki", &args);
        let der = dir.read("req.der");
        let (_, csr) = X509CertificationRequest::from_der(&der).unwrap();
        let info = csr.certification_request_info.raw;
        let after_info = info.as_ptr() as usize - der.as_ptr() as usize + info.len();
        let rest = &der[after_info..];
        let (after_algid, _) = AlgorithmIdentifier::from_der(rest).unwrap();
        let algid = &rest[..rest.len() - after_algid.len()];
        let mut auth = vec![u8::try_from(algid.len()).unwrap()];
        auth.extend_from_slice(algid);
        auth.extend_from_slice(&csr.signature_value.data);
        assert_eq!(
            &peer.verify_auth(AuthMethod::DigitalSignature, &auth, info),
            expected,
            "{digest} {padding}"
        );
        if expected.is_ok() {
            assert_eq!(
                peer.verify_auth(AuthMethod::DigitalSignature, &auth, &info[1..]),
                Err(AuthError::BadSignature)
            );
        }
    }
}

#[test]
fn strongswan_pki_rsa_certificate_verifies_and_its_key_signs() {
    if !tool("pki") {
        return;
    }
    let dir = TempDir::new("pki-rsa");
    pki_set(&dir, "", "rsa", "2048");
    // PKCS#1 `RSA PRIVATE KEY`.
    assert!(
        dir.read("client.key")
            .starts_with(b"-----BEGIN RSA PRIVATE KEY-----")
    );
    let anchors = TrustAnchors::from_pem(&dir.read("ca.pem")).unwrap();
    let leaf = first_cert_der(&dir.read("client.pem"));
    let peer = anchors.verify_peer(&leaf, &[], SystemTime::now()).unwrap();
    let creds = Credentials::from_pem(&dir.read("client.pem"), &dir.read("client.key")).unwrap();
    let (used, data) = creds
        .sign(AuthMethod::DigitalSignature, OCTETS, &[SigHash::Sha512])
        .unwrap();
    assert_eq!(used, AuthMethod::DigitalSignature);
    peer.verify_auth(used, &data, OCTETS).unwrap();

    strongswan_signatures_as_method_14(
        &dir,
        &peer,
        &[
            ("sha256", "pkcs1", Ok(())),
            ("sha512", "pkcs1", Ok(())),
            ("sha256", "pss", Ok(())),
            ("sha384", "pss", Ok(())),
            (
                "sha1",
                "pkcs1",
                Err(AuthError::UnsupportedAlgorithm(
                    "SHA-1 (sha1WithRSAEncryption)",
                )),
            ),
        ],
    );
}

/// An rcgen key and leaf certificate, written to `dir` as key.pem and cert.pem.
fn rcgen_leaf(dir: &TempDir, alg: &'static rcgen::SignatureAlgorithm) -> (TrustAnchors, PeerCert) {
    let ca = super::tests::ca("openssl CA");
    let key = if alg == &rcgen::PKCS_RSA_SHA256 {
        rcgen::KeyPair::generate_rsa_for(alg, rcgen::RsaKeySize::_2048).unwrap()
    } else {
        rcgen::KeyPair::generate_for(alg).unwrap()
    };
    let mut params = rcgen::CertificateParams::new(vec!["client1.gate64.lab".into()]).unwrap();
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    std::fs::write(dir.path("key.pem"), key.serialize_pem()).unwrap();
    std::fs::write(dir.path("cert.pem"), cert.pem()).unwrap();
    let anchors = TrustAnchors::from_pem(ca.pem.as_bytes()).unwrap();
    let peer = anchors
        .verify_peer(cert.der(), &[], SystemTime::now())
        .unwrap();
    (anchors, peer)
}

#[test]
fn openssl_verifies_our_method_14_ecdsa_signature() {
    if !tool("openssl") {
        return;
    }
    let dir = TempDir::new("openssl-ecdsa");
    rcgen_leaf(&dir, &rcgen::PKCS_ECDSA_P256_SHA256);
    let creds = Credentials::from_pem(&dir.read("cert.pem"), &dir.read("key.pem")).unwrap();
    let (_, data) = creds
        .sign(AuthMethod::DigitalSignature, OCTETS, &[SigHash::Sha256])
        .unwrap();
    let signature = &data[1 + usize::from(data[0])..];
    std::fs::write(dir.path("octets"), OCTETS).unwrap();
    std::fs::write(dir.path("sig.der"), signature).unwrap();
    let d = &dir.0;
    run(
        d,
        Some("pub.pem"),
        "openssl",
        &["x509", "-in", "cert.pem", "-pubkey", "-noout"],
    );
    run(
        d,
        None,
        "openssl",
        &[
            "dgst",
            "-sha256",
            "-verify",
            "pub.pem",
            "-signature",
            "sig.der",
            "octets",
        ],
    );
    std::fs::write(dir.path("octets"), b"other octets").unwrap();
    let refused = Command::new("openssl")
        .args([
            "dgst",
            "-sha256",
            "-verify",
            "pub.pem",
            "-signature",
            "sig.der",
            "octets",
        ])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(!refused.status.success());
}

#[test]
fn openssl_rsa_sha1_signature_verifies_as_method_1_and_key_formats_load() {
    if !tool("openssl") {
        return;
    }
    let dir = TempDir::new("openssl-rsa");
    let (_, peer) = rcgen_leaf(&dir, &rcgen::PKCS_RSA_SHA256);
    std::fs::write(dir.path("octets"), OCTETS).unwrap();
    let d = &dir.0;
    // RFC 7296 §3.8 method 1: RSASSA-PKCS1-v1_5 over SHA-1.
    run(
        d,
        None,
        "openssl",
        &[
            "dgst", "-sha1", "-sign", "key.pem", "-out", "sig.bin", "octets",
        ],
    );
    let mut sig = dir.read("sig.bin");
    peer.verify_auth(AuthMethod::RsaPkcs1, &sig, OCTETS)
        .unwrap();
    sig[10] ^= 0x01;
    assert_eq!(
        peer.verify_auth(AuthMethod::RsaPkcs1, &sig, OCTETS),
        Err(AuthError::BadSignature)
    );
    // The same key as PKCS#1 `RSA PRIVATE KEY`.
    run(
        d,
        Some("pkcs1.pem"),
        "openssl",
        &["rsa", "-in", "key.pem", "-traditional"],
    );
    assert!(
        dir.read("pkcs1.pem")
            .starts_with(b"-----BEGIN RSA PRIVATE KEY-----")
    );
    Credentials::from_pem(&dir.read("cert.pem"), &dir.read("pkcs1.pem")).unwrap();

    let ec = TempDir::new("openssl-sec1");
    rcgen_leaf(&ec, &rcgen::PKCS_ECDSA_P384_SHA384);
    run(
        &ec.0,
        Some("sec1.pem"),
        "openssl",
        &["ec", "-in", "key.pem"],
    );
    assert!(
        ec.read("sec1.pem")
            .starts_with(b"-----BEGIN EC PRIVATE KEY-----")
    );
    let creds = Credentials::from_pem(&ec.read("cert.pem"), &ec.read("sec1.pem")).unwrap();
    assert_eq!(creds.classic_method(), AuthMethod::EcdsaP384Sha384);
}

#[test]
fn our_method_1_signature_is_openssls_byte_for_byte() {
    if !tool("openssl") {
        return;
    }
    let dir = TempDir::new("openssl-method1");
    let (_, peer) = rcgen_leaf(&dir, &rcgen::PKCS_RSA_SHA256);
    std::fs::write(dir.path("octets"), OCTETS).unwrap();
    let d = &dir.0;
    // PKCS#1 v1.5 is deterministic: openssl's SHA-1 signature is the one method 1 must carry.
    run(
        d,
        None,
        "openssl",
        &[
            "dgst", "-sha1", "-sign", "key.pem", "-out", "sig.bin", "octets",
        ],
    );
    let expected = dir.read("sig.bin");
    run(
        d,
        Some("pkcs1.pem"),
        "openssl",
        &["rsa", "-in", "key.pem", "-traditional"],
    );
    for key in ["key.pem", "pkcs1.pem"] {
        let creds = Credentials::from_pem_with_sha1(
            &dir.read("cert.pem"),
            &dir.read(key),
            super::tests::sys_sha1,
        )
        .unwrap();
        let (used, data) = creds.sign(AuthMethod::RsaPkcs1, OCTETS, &[]).unwrap();
        assert_eq!(used, AuthMethod::RsaPkcs1);
        assert_eq!(data, expected, "{key}");
        peer.verify_auth(used, &data, OCTETS).unwrap();
    }
}

#[test]
fn openssl_verifies_our_method_14_rsa_signatures() {
    if !tool("openssl") {
        return;
    }
    let dir = TempDir::new("openssl-rsa14");
    rcgen_leaf(&dir, &rcgen::PKCS_RSA_SHA256);
    std::fs::write(dir.path("octets"), OCTETS).unwrap();
    let d = &dir.0;
    run(
        d,
        Some("pub.pem"),
        "openssl",
        &["x509", "-in", "cert.pem", "-pubkey", "-noout"],
    );
    let creds = Credentials::from_pem(&dir.read("cert.pem"), &dir.read("key.pem")).unwrap();
    for (creds, pss) in [
        (creds, false),
        (
            Credentials::from_pem(&dir.read("cert.pem"), &dir.read("key.pem"))
                .unwrap()
                .with_rsa_pss(),
            true,
        ),
    ] {
        let (_, data) = creds
            .sign(AuthMethod::DigitalSignature, OCTETS, &[SigHash::Sha256])
            .unwrap();
        let signature = &data[1 + usize::from(data[0])..];
        std::fs::write(dir.path("sig.bin"), signature).unwrap();
        let mut args = vec![
            "dgst",
            "-sha256",
            "-verify",
            "pub.pem",
            "-signature",
            "sig.bin",
        ];
        if pss {
            args.extend([
                "-sigopt",
                "rsa_padding_mode:pss",
                "-sigopt",
                "rsa_pss_saltlen:32",
            ]);
        }
        args.push("octets");
        run(d, None, "openssl", &args);
    }
}

#[test]
fn rsa_keys_below_2048_bits_are_refused_by_name() {
    if !tool("openssl") {
        return;
    }
    let dir = TempDir::new("openssl-rsa1024");
    let d = &dir.0;
    run(
        d,
        None,
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:1024",
            "-nodes",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
            "-subj",
            "/CN=small",
            "-days",
            "2",
        ],
    );
    run(
        d,
        Some("pkcs1.pem"),
        "openssl",
        &["rsa", "-in", "key.pem", "-traditional"],
    );
    for key in ["key.pem", "pkcs1.pem"] {
        let err = Credentials::from_pem(&dir.read("cert.pem"), &dir.read(key)).unwrap_err();
        assert_eq!(
            err,
            AuthError::BadPrivateKey("RSA key shorter than 2048 bits (2048 to 8192 accepted)"),
            "{key}"
        );
        assert!(err.to_string().contains("shorter than 2048 bits"));
    }
}
