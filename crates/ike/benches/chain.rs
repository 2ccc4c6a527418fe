//! What verifying a peer's certificate chain costs before IKE_AUTH is authenticated:
//! `TrustAnchors::verify_peer` (chain shape, then webpki's path building and signatures, then
//! the leaf's key usage) on an honest chain, the same chain from the anchors' cache of chains
//! whose holders proved their key, and the same-name flood it refuses by count and by shape.
//! Keys and certificates are made once with rcgen (ECDSA P-256).

use std::hint::black_box;
use std::time::SystemTime;

use criterion::{Criterion, criterion_group, criterion_main};
use gate64_ike::auth::{AuthError, TrustAnchors, check_chain_shape};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

/// A self-signed CA: its DER and what signs under it.
fn root(name: &str) -> (Vec<u8>, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let params = ca_params(name);
    let der = params.self_signed(&key).unwrap().der().to_vec();
    (der, Issuer::new(params, key))
}

fn leaf(issuer: &Issuer<'static, KeyPair>) -> Vec<u8> {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "client1.gate64.lab");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.signed_by(&key, issuer).unwrap().der().to_vec()
}

fn bench(c: &mut Criterion) {
    let now = SystemTime::now();
    let mut g = c.benchmark_group("ike_chain");

    // (a) An honest chain: leaf <- issuing CA <- root (the configured anchor).
    let (root_der, root_issuer) = root("gate64 lab root");
    let key = KeyPair::generate().unwrap();
    let params = ca_params("gate64 clients CA");
    let issuing_der = params.signed_by(&key, &root_issuer).unwrap().der().to_vec();
    let issuing = Issuer::new(params, key);
    let honest_leaf = leaf(&issuing);
    let anchors = TrustAnchors::from_der([root_der.as_slice()]).unwrap();
    let honest: [&[u8]; 1] = [&issuing_der];
    anchors.verify_peer(&honest_leaf, &honest, now).unwrap();
    g.bench_function("honest_leaf_and_intermediate", |b| {
        b.iter(|| {
            black_box(
                anchors
                    .verify_peer(black_box(&honest_leaf), black_box(&honest), now)
                    .is_ok(),
            )
        })
    });
    // (b) The same chain once its holder proved its key: a hit of the anchors' cache
    // (validity window and CRLs checked, no signature, no parsing).
    let cached = TrustAnchors::from_der([root_der.as_slice()]).unwrap();
    let peer = cached.verify_peer(&honest_leaf, &honest, now).unwrap();
    cached.remember_verified(&peer);
    g.bench_function("honest_leaf_and_intermediate_cached", |b| {
        b.iter(|| {
            black_box(
                cached
                    .verify_peer(black_box(&honest_leaf), black_box(&honest), now)
                    .is_ok(),
            )
        })
    });
    assert!(cached.cache_hits() > 0, "the cached case hit the cache");
    g.bench_function("honest_shape_only", |b| {
        b.iter(|| {
            black_box(check_chain_shape(
                black_box(&honest_leaf),
                black_box(&honest),
            ))
        })
    });

    // The attack: a leaf under a CA, then self-issued certificates all named like that CA.
    let (ca_der, ca_issuer) = root("gate64 clients CA");
    let attack_leaf = leaf(&ca_issuer);
    let attack_anchors = TrustAnchors::from_der([ca_der.as_slice()]).unwrap();
    let fakes: Vec<Vec<u8>> = (0..59).map(|_| root("gate64 clients CA").0).collect();
    let fakes: Vec<&[u8]> = fakes.iter().map(Vec::as_slice).collect();

    // (b) Leaf + 59: refused by count, before any certificate is parsed.
    assert_eq!(
        attack_anchors.verify_peer(&attack_leaf, &fakes, now).err(),
        Some(AuthError::TooManyCertificates(60))
    );
    g.bench_function("attack_leaf_and_59_same_name_refused_by_count", |b| {
        b.iter(|| {
            black_box(
                attack_anchors
                    .verify_peer(black_box(&attack_leaf), black_box(&fakes), now)
                    .is_err(),
            )
        })
    });

    // (c) Leaf + 3: within the count, refused by shape after four name parses.
    assert_eq!(
        attack_anchors
            .verify_peer(&attack_leaf, &fakes[..3], now)
            .err(),
        Some(AuthError::ChainNotLinear("two self-issued certificates"))
    );
    g.bench_function("attack_leaf_and_3_same_name_refused_by_shape", |b| {
        b.iter(|| {
            black_box(
                attack_anchors
                    .verify_peer(black_box(&attack_leaf), black_box(&fakes[..3]), now)
                    .is_err(),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
