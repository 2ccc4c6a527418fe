//! The certificate chain a peer sends in IKE_AUTH, before anything it sent is authenticated:
//! `check_chain_shape` and `TrustAnchors::verify_peer` against a fixed anchor, on arbitrary
//! DER blobs and on real certificates (checked in under `certs/ike_cert_chain/`, made by
//! `make_seeds.py`) mutated byte by byte. No panic; verification never accepts what the shape
//! check refuses; the unmutated honest chains verify.
//! Input: `[selector][bytes]`; the selector's low bit picks the case (see `run`).
#![no_main]

use gate64_ike::auth::{AuthError, MAX_PEER_CERTS, TrustAnchors, check_chain_shape};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ROOT: &[u8] = include_bytes!("../certs/ike_cert_chain/root.der");
/// The real certificates the mutation case starts from: an issuing CA under `ROOT`, a client
/// leaf under it, and three self-issued certificates named like the issuing CA.
const CERTS: [&[u8]; 6] = [
    include_bytes!("../certs/ike_cert_chain/leaf.der"),
    include_bytes!("../certs/ike_cert_chain/issuing.der"),
    ROOT,
    include_bytes!("../certs/ike_cert_chain/fake0.der"),
    include_bytes!("../certs/ike_cert_chain/fake1.der"),
    include_bytes!("../certs/ike_cert_chain/fake2.der"),
];
/// Chains of `CERTS` indices (leaf first) for the mutation case, honest ones first.
const CHAINS: [&[usize]; 7] = [
    &[0, 1],
    &[0, 1, 2],
    &[0, 2, 1],
    &[0, 3, 4, 5],
    &[0, 1, 3],
    &[0, 1, 1],
    &[0, 1, 2, 3, 4],
];
const HONEST: usize = 3;
/// Blobs beyond this are not split off: the count check refuses anything past
/// `MAX_PEER_CERTS` alike, and a peer's IKE_AUTH holds at most about this many CERT payloads.
const MAX_BLOBS: usize = 64;

fn now() -> SystemTime {
    // 2026-11-30, inside the certificates' validity: fixed, so runs repeat.
    UNIX_EPOCH + Duration::from_secs(1_796_000_000)
}

fn anchors() -> &'static TrustAnchors {
    static ANCHORS: OnceLock<TrustAnchors> = OnceLock::new();
    ANCHORS.get_or_init(|| TrustAnchors::from_der([ROOT]).expect("checked-in root"))
}

/// Verifies `leaf` and `intermediates` both ways and checks they agree.
fn check(leaf: &[u8], intermediates: &[&[u8]]) -> bool {
    let shape = check_chain_shape(leaf, intermediates);
    let verified = anchors().verify_peer(leaf, intermediates, now());
    let count = intermediates.len() + 1;
    if count > MAX_PEER_CERTS {
        assert_eq!(shape, Err(AuthError::TooManyCertificates(count)));
    }
    match (&shape, &verified) {
        (Err(s), Err(v)) => assert_eq!(s, v, "verify_peer refuses as the shape check does"),
        (Err(s), Ok(_)) => panic!("verified a chain the shape check refuses: {s:?}"),
        (Ok(()), Ok(peer)) => {
            let _ = peer.subject();
        }
        (Ok(()), Err(_)) => {}
    }
    verified.is_ok()
}

fn run(selector: u8, data: &[u8]) {
    match selector & 1 {
        // Length-prefixed DER blobs, `[len u16][bytes]` each, the first the leaf; a truncated
        // last blob takes what is left.
        0 => {
            let mut blobs: Vec<&[u8]> = Vec::new();
            let mut rest = data;
            while let [hi, lo, tail @ ..] = rest {
                if blobs.len() == MAX_BLOBS {
                    break;
                }
                let len = usize::from(u16::from_be_bytes([*hi, *lo])).min(tail.len());
                let (blob, after) = tail.split_at(len);
                blobs.push(blob);
                rest = after;
            }
            if let [leaf, intermediates @ ..] = blobs.as_slice() {
                check(leaf, intermediates);
            }
        }
        // `[chain][(cert u8, offset u16, xor u8)...]`: one of `CHAINS`, its certificates
        // mutated by the quadruples (cert picks a position in the chain).
        _ => {
            let [pick, edits @ ..] = data else { return };
            let which = usize::from(*pick) % CHAINS.len();
            let chain = CHAINS[which];
            let mut certs: Vec<Vec<u8>> = chain.iter().map(|&i| CERTS[i].to_vec()).collect();
            let mut mutated = false;
            for q in edits.chunks_exact(4) {
                let der = &mut certs[usize::from(q[0]) % chain.len()];
                let at = usize::from(u16::from_be_bytes([q[1], q[2]])) % der.len();
                der[at] ^= q[3];
                mutated |= q[3] != 0;
            }
            let intermediates: Vec<&[u8]> = certs[1..].iter().map(Vec::as_slice).collect();
            let ok = check(&certs[0], &intermediates);
            if !mutated {
                assert_eq!(ok, which < HONEST, "chain {which} unmutated");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let [selector, rest @ ..] = data {
        run(*selector, rest);
    }
});
