//! The public-key operations every IKE set-up needs, alone, through aws-lc-rs (the library
//! gate64-ike calls for them): the key exchange's key generation and agreement (ECP-256 and
//! Curve25519) and one ECDSA P-256 signature and verification. An IKE SA costs its responder
//! one key generation, one agreement, one signature (its AUTH) and one verification (the
//! initiator's AUTH), and costs its initiator the same four; a client's first tunnel adds one
//! more verification at the responder (its certificate's CA signature; the second tunnel finds
//! the chain cached). Their sum is the floor below which no implementation on this CPU can
//! set up a client, whatever the rest of its code costs: docs/performance.md turns it into
//! set-ups per second per core.

use std::hint::black_box;

use aws_lc_rs::agreement::{self, PrivateKey, UnparsedPublicKey};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair};
use criterion::{Criterion, criterion_group, criterion_main};

/// Octets signed: about an IKE_SA_INIT message with the nonce and prf output appended.
const SIGNED_OCTETS: usize = 400;

fn key_exchange(c: &mut Criterion, name: &str, alg: &'static agreement::Algorithm) {
    let mine = PrivateKey::generate(alg).unwrap();
    let peer = PrivateKey::generate(alg).unwrap();
    let peer_public = peer.compute_public_key().unwrap();
    let mut g = c.benchmark_group("ike_crypto_floor");
    g.bench_function(format!("{name}_keygen_and_public"), |b| {
        b.iter(|| {
            let key = PrivateKey::generate(alg).unwrap();
            black_box(key.compute_public_key().unwrap());
        })
    });
    g.bench_function(format!("{name}_agree"), |b| {
        b.iter(|| {
            let theirs = UnparsedPublicKey::new(alg, peer_public.as_ref());
            agreement::agree(&mine, theirs, (), |secret| {
                black_box(secret);
                Ok(())
            })
            .unwrap()
        })
    });
    g.finish();
}

fn ecdsa_p256(c: &mut Criterion) {
    let rng = SystemRandom::new();
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let key = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref())
        .unwrap();
    let octets = vec![0x5a; SIGNED_OCTETS];
    let sig = key.sign(&rng, &octets).unwrap();
    let public =
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, key.public_key());
    public.verify(&octets, sig.as_ref()).unwrap();
    let mut g = c.benchmark_group("ike_crypto_floor");
    g.bench_function("ecdsa_p256_sign", |b| {
        b.iter(|| black_box(key.sign(&rng, black_box(&octets)).unwrap()))
    });
    g.bench_function("ecdsa_p256_verify", |b| {
        b.iter(|| public.verify(black_box(&octets), sig.as_ref()).unwrap())
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    key_exchange(c, "ecp256", &agreement::ECDH_P256);
    key_exchange(c, "curve25519", &agreement::X25519);
    ecdsa_p256(c);
}

criterion_group!(benches, bench);
criterion_main!(benches);
