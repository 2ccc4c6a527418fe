//! What an unauthenticated initiator can make the responder do: certificate chains held to a
//! shape before any path building.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

use super::*;

/// A self-signed "CA" certificate named `name` (the attacker's filler).
fn self_issued(name: &str) -> Vec<u8> {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    params
        .self_signed(&key)
        .expect("self-signed")
        .der()
        .to_vec()
}

/// Runs IKE_SA_INIT, then sends the initiator's own IKE_AUTH with `fillers` added after its
/// leaf (and nothing but IDi, the CERTs, AUTH, SA, TSi and TSr, so 59 CERTs fit the 64
/// payloads of a chain). Returns the responder, what it reported, and how long the IKE_AUTH
/// took to handle.
fn auth_with_fillers(fillers: &[Vec<u8>]) -> (Responder, Vec<Event>, Duration, Vec<Transmit>) {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut i = lab.intranet(now);
    i.start(now);
    let (l, rem, init) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, rem, l, &init);
    i.handle(now, &r.poll_transmit().expect("IKE_SA_INIT response").bytes);
    let (l, rem, auth) = i.poll_transmit().expect("IKE_AUTH");
    let sk_ei = i.keys.clone().expect("keys").sk_ei;
    let (header, inner) = keys::open_message(&auth, &sk_ei).expect("own IKE_AUTH opens");
    let mut payloads = Vec::new();
    for p in inner {
        match p {
            Payload::Cert { .. } => {
                payloads.push(p);
                payloads.extend(fillers.iter().map(|der| Payload::Cert {
                    encoding: 4,
                    data: der.clone(),
                }));
            }
            Payload::IdI(_) | Payload::Auth { .. } | Payload::Sa(_) => payloads.push(p),
            Payload::TsI(_) | Payload::TsR(_) => payloads.push(p),
            _ => {}
        }
    }
    let bytes = keys::seal_message(&header, &payloads, &sk_ei).expect("seal");
    let _ = events(&mut r);
    let started = Instant::now();
    r.handle(now, rem, l, &bytes);
    let took = started.elapsed();
    let sent = std::iter::from_fn(|| r.poll_transmit()).collect();
    let ev = events(&mut r);
    (r, ev, took, sent)
}

fn refused_with(ev: &[Event], reason: Refusal) -> bool {
    ev.iter()
        .any(|e| matches!(e, Event::Negotiation { result: Err(why), .. } if *why == reason))
}

/// The attack of 59 same-name CA certificates after the leaf (webpki's path search over them
/// took 100-155 ms in a release build): refused by count, AUTHENTICATION_FAILED, no SA left,
/// and the whole IKE_AUTH (decryption and parse included) is handled in well under webpki's
/// time even in a debug build.
#[test]
fn ike_auth_with_59_same_name_certificates_is_refused_by_count() {
    let fillers: Vec<Vec<u8>> = (0..58).map(|_| self_issued("gate64 clients CA")).collect();
    let (r, ev, took, sent) = auth_with_fillers(&fillers);
    assert!(refused_with(&ev, Refusal::TooManyCerts), "{ev:?}");
    assert_eq!(Refusal::TooManyCerts.label(), "too_many_certs");
    assert_eq!(sent.len(), 1, "one AUTHENTICATION_FAILED answer");
    assert_eq!((r.half_open(), r.established()), (0, 0));
    // Printed, not asserted: a timing depends on the machine's load.
    println!("refused in {took:?}");
}

/// Within the count, three same-name self-issued certificates are refused by shape.
#[test]
fn ike_auth_with_same_name_certificates_within_the_count_is_not_linear() {
    let fillers: Vec<Vec<u8>> = (0..3).map(|_| self_issued("gate64 clients CA")).collect();
    let (r, ev, took, _) = auth_with_fillers(&fillers);
    assert!(refused_with(&ev, Refusal::ChainNotLinear), "{ev:?}");
    assert_eq!(Refusal::ChainNotLinear.label(), "chain_not_linear");
    assert_eq!((r.half_open(), r.established()), (0, 0));
    // Printed, not asserted: a timing depends on the machine's load.
    println!("refused in {took:?}");
}

/// The initiator's own IKE_AUTH, re-sealed without fillers, still gets in.
#[test]
fn ike_auth_with_the_leaf_alone_is_established() {
    let (r, ev, _, _) = auth_with_fillers(&[]);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Negotiation { result: Ok(()), .. })),
        "{ev:?}"
    );
    assert_eq!(r.established(), 1);
}
