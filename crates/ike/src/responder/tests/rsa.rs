//! RSA certificates on either side: gate64 signing its AUTH with an RSA key (method 14 when
//! the client announced SIGNATURE_HASH_ALGORITHMS, method 1 when it did not), and clients'
//! RSA signatures (PKCS#1 v1.5 and RSASSA-PSS in method 14, method 1) verified.

use super::*;
use crate::auth::tests::sys_sha1;
use rcgen::{PKCS_RSA_SHA256, RsaKeySize};

/// An RSA-2048 leaf under `ca` for `name` (both purposes): (chain PEM, PKCS#8 key PEM).
fn rsa_leaf(ca: &Ca, name: &str) -> (String, String) {
    let key = KeyPair::generate_rsa_for(&PKCS_RSA_SHA256, RsaKeySize::_2048).expect("rsa key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = vec![SanType::DnsName(name.try_into().expect("dns name"))];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = BOTH_PURPOSES.to_vec();
    let cert = params.signed_by(&key, &ca.issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

/// Credentials from PEM, with the SHA-1 signer (method 1) when `sha1`.
fn credentials((chain, key): &(String, String), sha1: bool) -> Credentials {
    if sha1 {
        Credentials::from_pem_with_sha1(chain.as_bytes(), key.as_bytes(), sys_sha1)
    } else {
        Credentials::from_pem(chain.as_bytes(), key.as_bytes())
    }
    .expect("credentials")
}

fn responder(lab: &Lab, server: Credentials, now: Instant) -> Responder {
    let anchors = TrustAnchors::from_pem(lab.clients_ca.pem.as_bytes()).expect("clients CA");
    let config = ResponderConfig::new(
        server,
        anchors,
        "fd00:c1::100/120".parse().expect("pool"),
        vec!["fd00:c0::53/128".parse().expect("prefix")],
        vec!["fd00:c0::/64".parse().expect("prefix")],
    );
    Responder::new(config, now, SystemTime::now()).expect("responder")
}

/// An intranet client of the clients CA with `client` credentials, announcing
/// SIGNATURE_HASH_ALGORITHMS when `hashes`.
fn client(lab: &Lab, client: Credentials, hashes: bool, now: Instant) -> Initiator {
    let anchors = TrustAnchors::from_pem(lab.servers_ca.pem.as_bytes()).expect("servers CA");
    let config = InitiatorConfig {
        credentials: client,
        anchors,
        group: Group::Ecp256,
        request_address: true,
        tsi: vec![TrafficSelector::range(
            "::".parse().expect("any"),
            IpAddr::V6(std::net::Ipv6Addr::from(u128::MAX)),
        )],
        tsr: vec![TrafficSelector::range(
            "fd00:c0::".parse().expect("start"),
            "fd00:c0::ffff:ffff:ffff:ffff".parse().expect("end"),
        )],
        tunnel: TunnelKind::Intranet,
        retransmit_after: Duration::from_secs(2),
        max_retransmits: 3,
        integrity_only: false,
    };
    let i = Initiator::new(config, now, SystemTime::now(), addr(CLIENT), addr(SERVER))
        .expect("initiator");
    if hashes {
        i
    } else {
        i.without_signature_hashes()
    }
}

/// Runs one IKE SA set-up; `Ok` with the server's identity as the client saw it, or the
/// responder's refusal.
fn set_up(r: &mut Responder, i: &mut Initiator, now: Instant) -> Result<String, String> {
    i.start(now);
    exchange_all(r, i, now);
    let refusal = events(r).into_iter().find_map(|e| match e {
        Event::Negotiation {
            result: Err(why), ..
        } => Some(format!("{why:?}")),
        _ => None,
    });
    match i.poll_event() {
        Some(InitiatorEvent::Established { identity, .. }) => {
            assert_eq!(refusal, None);
            Ok(identity)
        }
        other => Err(refusal.unwrap_or_else(|| format!("{other:?}"))),
    }
}

/// With hashes announced gate64 signs method 14, which needs no SHA-1 signer; without them it
/// signs method 1, which does: the one responder without the signer builds the first IKE SA
/// and fails the second, the one with it builds both, and our initiator verifies each.
#[test]
fn rsa_server_signs_method_14_with_hashes_and_method_1_without() {
    let lab = Lab::new();
    let now = Instant::now();
    let server = rsa_leaf(&lab.servers_ca, "gate64.lab");
    let ecdsa_client = || credentials(&leaf(&lab.clients_ca, "client1.gate64.lab"), false);

    let mut r = responder(&lab, credentials(&server, false), now);
    let mut i = client(&lab, ecdsa_client(), true, now);
    assert_eq!(set_up(&mut r, &mut i, now), Ok("CN=gate64.lab".to_owned()));
    let mut i = client(&lab, ecdsa_client(), false, now);
    assert!(
        set_up(&mut r, &mut i, now).is_err(),
        "method 1 without a signer"
    );

    let mut r = responder(&lab, credentials(&server, true), now);
    for hashes in [true, false] {
        let mut i = client(&lab, ecdsa_client(), hashes, now);
        assert_eq!(
            set_up(&mut r, &mut i, now),
            Ok("CN=gate64.lab".to_owned()),
            "hashes announced: {hashes}"
        );
    }
}

/// Clients with RSA certificates: method 14 with PKCS#1 v1.5 and with RSASSA-PSS, and method 1
/// from a client that announces no hashes, all verified by the responder (whose own key is
/// ECDSA here); a client signing method 1 with another key is refused.
#[test]
fn rsa_clients_are_verified_in_methods_14_and_1() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let user = rsa_leaf(&lab.clients_ca, "client1.gate64.lab");
    let cases = [
        ("pkcs1 v1.5, method 14", credentials(&user, false), true),
        (
            "pss, method 14",
            credentials(&user, false).with_rsa_pss(),
            true,
        ),
        ("method 1", credentials(&user, true), false),
    ];
    for (what, creds, hashes) in cases {
        let mut i = client(&lab, creds, hashes, now);
        assert_eq!(
            set_up(&mut r, &mut i, now),
            Ok("CN=gate64.lab".to_owned()),
            "{what}"
        );
    }
    let sas = r.ike_sas(now);
    assert!(
        sas.iter()
            .all(|s| s.established && s.identity.as_deref() == Some("CN=client1.gate64.lab"))
    );
    // Without the SHA-1 signer the client cannot prove itself without hashes.
    let mut i = client(&lab, credentials(&user, false), false, now);
    assert!(set_up(&mut r, &mut i, now).is_err());
}
