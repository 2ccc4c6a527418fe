//! gate64's own AUTH signature in IKE_AUTH (RFC 7296 §2.15), per server key: ECDSA P-256
//! (method 14, SHA-256), RSA-2048 in method 14 with PKCS#1 v1.5 and with RSASSA-PSS (SHA-256),
//! and RSA-2048 in method 1 (PKCS#1 v1.5, SHA-1, through aws-lc's RSA_sign in gate64-sys).
//! One signature per IKE SA a client sets up; the octets are as long as a typical
//! IKE_SA_INIT response with nonce and prf output.

use std::hint::black_box;

mod common;

use common::{ca, leaf, rsa_leaf};
use criterion::{Criterion, criterion_group, criterion_main};
use gate64_ike::auth::{AuthMethod, Credentials, Sha1RsaSigner, SigHash, TrustAnchors};

struct SysSha1(gate64_sys::rsa_sha1::RsaSha1Signer);

impl Sha1RsaSigner for SysSha1 {
    fn sign_sha1(&self, octets: &[u8]) -> Option<Vec<u8>> {
        self.0.sign(octets).ok()
    }
}

fn sys_sha1(der: &[u8], pkcs1: bool) -> Option<Box<dyn Sha1RsaSigner>> {
    let signer = gate64_sys::rsa_sha1::RsaSha1Signer::from_der(der, pkcs1).ok()?;
    Some(Box::new(SysSha1(signer)))
}

fn bench(c: &mut Criterion) {
    let servers = ca("gate64 servers CA");
    let (ec_chain, ec_key) = leaf(&servers, "gate64.lab", None);
    let (rsa_chain, rsa_key) = rsa_leaf(&servers, "gate64.lab");
    let ecdsa = Credentials::from_pem(ec_chain.as_bytes(), ec_key.as_bytes()).unwrap();
    let rsa = || {
        Credentials::from_pem_with_sha1(rsa_chain.as_bytes(), rsa_key.as_bytes(), sys_sha1).unwrap()
    };
    let (rsa_pkcs1, rsa_pss) = (rsa(), rsa().with_rsa_pss());
    let octets = vec![0x5a; 400];
    let anchors = TrustAnchors::from_pem(servers.pem.as_bytes()).unwrap();
    let cases = [
        ("ecdsa_p256_method14", &ecdsa, AuthMethod::DigitalSignature),
        (
            "rsa2048_pkcs1_method14",
            &rsa_pkcs1,
            AuthMethod::DigitalSignature,
        ),
        (
            "rsa2048_pss_method14",
            &rsa_pss,
            AuthMethod::DigitalSignature,
        ),
        ("rsa2048_sha1_method1", &rsa_pkcs1, AuthMethod::RsaPkcs1),
    ];
    let mut g = c.benchmark_group("ike_auth_sign");
    for (name, creds, method) in cases {
        let hashes: &[SigHash] = if method == AuthMethod::DigitalSignature {
            &SigHash::ALL
        } else {
            &[]
        };
        // The method asked for is the one used, and its signature verifies.
        let (used, data) = creds.sign(method, &octets, hashes).unwrap();
        assert_eq!(used, method);
        anchors
            .verify_peer(creds.leaf_der(), &[], std::time::SystemTime::now())
            .unwrap()
            .verify_auth(used, &data, &octets)
            .unwrap();
        g.bench_function(name, |b| {
            b.iter(|| black_box(creds.sign(method, black_box(&octets), hashes).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
