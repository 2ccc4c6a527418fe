//! gate64-ike's certificate authentication on arbitrary bytes: AUTH payloads (method-14
//! AlgorithmIdentifier parsing and every method's verification) against verified ECDSA P-256,
//! P-384 and RSA certificates, trust anchors and credentials from arbitrary PEM/DER, chain
//! verification of arbitrary and of mutated valid certificates, ID payloads and the
//! SIGNATURE_HASH_ALGORITHMS notification. No panic; nothing forged verifies; what we sign
//! verifies.
//! Input: `[selector][bytes]`; the selector's low three bits pick the case (see `run`).
#![no_main]

use gate64_ike::auth::{
    AuthError, AuthMethod, Credentials, Identity, PeerCert, SigHash, TrustAnchors,
};
use libfuzzer_sys::fuzz_target;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
    SignatureAlgorithm,
};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const OCTETS: &[u8] = b"IKE_SA_INIT | nonce | prf(SK_p, ID')";

struct Lab {
    anchors: TrustAnchors,
    /// Verified peers with their credentials: ECDSA P-256, ECDSA P-384, RSA 2048.
    peers: Vec<(Credentials, PeerCert)>,
    /// A valid leaf's DER, for mutation.
    leaf_der: Vec<u8>,
}

fn now() -> SystemTime {
    // 2026-11-30: fixed, so runs repeat.
    UNIX_EPOCH + Duration::from_secs(1_796_000_000)
}

fn lab() -> &'static Lab {
    static LAB: OnceLock<Lab> = OnceLock::new();
    LAB.get_or_init(|| {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.distinguished_name.push(DnType::CommonName, "fuzz CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let anchors = TrustAnchors::from_pem(ca_pem.as_bytes()).unwrap();
        let mut peers = Vec::new();
        let mut leaf_der = Vec::new();
        let algs: [&'static SignatureAlgorithm; 3] = [
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
            &rcgen::PKCS_RSA_SHA256,
        ];
        for alg in algs {
            let key = if alg == &rcgen::PKCS_RSA_SHA256 {
                KeyPair::generate_rsa_for(alg, rcgen::RsaKeySize::_2048).unwrap()
            } else {
                KeyPair::generate_for(alg).unwrap()
            };
            let mut leaf = CertificateParams::default();
            leaf.distinguished_name
                .push(DnType::CommonName, "peer.fuzz");
            leaf.subject_alt_names = vec![
                SanType::DnsName("peer.fuzz".try_into().unwrap()),
                SanType::IpAddress("2001:db8::1".parse().unwrap()),
            ];
            let cert = leaf.signed_by(&key, &issuer).unwrap();
            let creds =
                Credentials::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
                    .unwrap();
            let peer = anchors.verify_peer(cert.der(), &[], now()).unwrap();
            if leaf_der.is_empty() {
                leaf_der = cert.der().to_vec();
            }
            peers.push((creds, peer));
        }
        Lab {
            anchors,
            peers,
            leaf_der,
        }
    })
}

fn run(selector: u8, data: &[u8]) {
    let lab = lab();
    match selector & 7 {
        // [method][peer][AUTH data]: nothing forged verifies.
        0 => {
            let [code, who, auth @ ..] = data else { return };
            let (_, peer) = &lab.peers[usize::from(*who) % lab.peers.len()];
            match AuthMethod::try_from(*code) {
                Ok(method) => assert!(peer.verify_auth(method, auth, OCTETS).is_err()),
                Err(e) => assert_eq!(e, AuthError::UnsupportedMethod(*code)),
            }
        }
        // [peer][hashes...][0xff][octets]: what we sign verifies.
        1 => {
            let [who, rest @ ..] = data else { return };
            let split = rest.iter().position(|&b| b == 0xff).unwrap_or(rest.len());
            let hashes: Vec<SigHash> = rest[..split]
                .iter()
                .filter_map(|&b| SigHash::from_code(b.into()))
                .collect();
            let octets = rest.get(split + 1..).unwrap_or(&[]);
            // The RSA peer only for `who == 7`: RSA signing is slow.
            let (creds, peer) = &lab.peers[usize::from(*who) % 2 + usize::from(*who == 7)];
            for method in [creds.classic_method(), AuthMethod::DigitalSignature] {
                if let Ok((used, sig)) = creds.sign(method, octets, &hashes) {
                    peer.verify_auth(used, &sig, octets)
                        .expect("own signature verifies");
                    let mut other = octets.to_vec();
                    other.push(0);
                    assert_eq!(
                        peer.verify_auth(used, &sig, &other),
                        Err(AuthError::BadSignature)
                    );
                }
            }
        }
        // Trust anchors and credentials from arbitrary PEM/DER.
        2 => {
            if let Ok(a) = TrustAnchors::from_pem(data) {
                assert_eq!(a.certreq_data().len(), 20 * a.len());
            }
            if let Ok(a) = TrustAnchors::from_der([data]) {
                assert_eq!(a.certreq_data().len(), 20);
            }
            let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
            let _ = Credentials::from_pem(&data[..split], data.get(split + 1..).unwrap_or(&[]));
        }
        // An arbitrary leaf, with arbitrary intermediates after a 0xff 0xff separator.
        3 => {
            let mut parts = data.split(|&b| b == 0xff);
            let leaf = parts.next().unwrap_or(&[]);
            let intermediates: Vec<&[u8]> = parts.take(3).collect();
            check_peer(lab, leaf, &intermediates);
        }
        // A valid leaf mutated by (offset u16, xor u8) triples.
        4 => {
            let mut der = lab.leaf_der.clone();
            for t in data.chunks_exact(3) {
                let at = usize::from(u16::from_be_bytes([t[0], t[1]])) % der.len();
                der[at] ^= t[2];
            }
            check_peer(lab, &der, &[]);
        }
        // ID payload bodies and SIGNATURE_HASH_ALGORITHMS data.
        _ => {
            if let Ok(id) = Identity::from_payload_body(data) {
                let _ = id.to_string();
                assert_eq!(id.payload_body()[4..], data[4..]);
                for (_, peer) in &lab.peers {
                    let _ = peer.matches_id(&id);
                }
            }
            if let Ok(hashes) = SigHash::parse_notify(data) {
                assert!(hashes.len() <= data.len() / 2);
            }
        }
    }
}

fn check_peer(lab: &Lab, leaf: &[u8], intermediates: &[&[u8]]) {
    if let Ok(peer) = lab.anchors.verify_peer(leaf, intermediates, now()) {
        let _ = (
            peer.subject(),
            peer.matches_id(&Identity::fqdn("peer.fuzz")),
        );
        let _ = peer.verify_auth(AuthMethod::DigitalSignature, leaf, OCTETS);
    }
}

fuzz_target!(|data: &[u8]| {
    if let [selector, rest @ ..] = data {
        run(*selector, rest);
    }
});
