//! `[ipsec] iphttps_integrity_only`: AES-GMAC (ENCR_NULL_AUTH_AES_GMAC, RFC 4543) for child
//! SAs of IP-HTTPS clients alone. Accepted (and preferred) for an address in the prefix with
//! the setting on; refused for Teredo and native clients even when the prefix covers them,
//! and for everyone with the setting off.

use super::*;
use crate::message::find_notify;
use crate::responder::child::{KeRule, choose_esp_proposal, esp_suites_for};
use gate64_esp::{Inbound, Outbound};

const IPHTTPS_CLIENT: &str = "[2001:db8:1:2::7]:500";

fn gmac(bits: u16) -> Vec<Transform> {
    vec![
        Transform::with_key_length(transform::ENCR, transform::ENCR_NULL_AUTH_AES_GMAC, bits),
        Transform::new(transform::ESN, transform::ESN_NONE),
    ]
}

fn gcm(bits: u16) -> Vec<Transform> {
    vec![
        Transform::with_key_length(transform::ENCR, transform::ENCR_AES_GCM_16, bits),
        Transform::new(transform::ESN, transform::ESN_NONE),
    ]
}

fn offer(list: Vec<Vec<Transform>>) -> Vec<Proposal> {
    list.into_iter()
        .enumerate()
        .map(|(n, transforms)| Proposal {
            number: n as u8 + 1,
            protocol: transform::PROTO_ESP,
            spi: 0x7100_0000u32.to_be_bytes().to_vec(),
            transforms,
        })
        .collect()
}

/// The cipher chosen for `list` from an IKE SA between `local` and `remote`, or the notify.
fn chosen(
    config: &ResponderConfig,
    local: &str,
    remote: &str,
    list: Vec<Vec<Transform>>,
) -> Result<Cipher, u16> {
    let suites = esp_suites_for(config, addr(local), addr(remote));
    choose_esp_proposal(&offer(list), KeRule::Ignore, &suites)
        .map(|c| c.cipher)
        .map_err(|(n, _)| n)
}

fn config(prefix: Option<&str>) -> ResponderConfig {
    let r = Lab::new().responder(Instant::now(), |c| {
        c.integrity_only_prefix = prefix.map(|p| p.parse().expect("prefix"));
        c.native_addresses = vec!["2001:db8:ffff::2".parse().expect("address")];
    });
    r.config
}

#[test]
fn gmac_is_chosen_for_an_iphttps_client_with_the_setting_on_and_preferred_to_gcm() {
    let c = config(Some("2001:db8:1::/48"));
    for (bits, cipher) in [
        (128, Cipher::NullAesGmac128),
        (192, Cipher::NullAesGmac192),
        (256, Cipher::NullAesGmac256),
    ] {
        assert_eq!(
            chosen(&c, SERVER, IPHTTPS_CLIENT, vec![gmac(bits)]),
            Ok(cipher)
        );
    }
    // Offered after AES-GCM, it is still taken: not encrypting twice is the point.
    assert_eq!(
        chosen(&c, SERVER, IPHTTPS_CLIENT, vec![gcm(256), gmac(256)]),
        Ok(Cipher::NullAesGmac256)
    );
    // A client that offers no GMAC keeps AES-GCM.
    assert_eq!(
        chosen(&c, SERVER, IPHTTPS_CLIENT, vec![gcm(256)]),
        Ok(Cipher::AesGcm16_256)
    );
    // With an integrity transform besides it, the proposal is not one gate64 takes.
    let mut with_integ = gmac(256);
    with_integ.push(Transform::new(
        transform::INTEG,
        transform::AUTH_HMAC_SHA2_256_128,
    ));
    assert_eq!(
        chosen(&c, SERVER, IPHTTPS_CLIENT, vec![with_integ]),
        Err(notify::NO_PROPOSAL_CHOSEN)
    );
}

#[test]
fn gmac_is_refused_for_teredo_native_and_outside_clients_even_with_the_setting_on() {
    // A prefix wide enough to hold a Teredo address, gate64's native address's clients and
    // the IP-HTTPS ones: only the IP-HTTPS client gets GMAC.
    let c = config(Some("2001::/16"));
    let no = Err(notify::NO_PROPOSAL_CHOSEN);
    assert_eq!(chosen(&c, SERVER, CLIENT, vec![gmac(256)]), no, "Teredo");
    assert_eq!(
        chosen(
            &c,
            "[2001:db8:ffff::2]:4500",
            IPHTTPS_CLIENT,
            vec![gmac(256)]
        ),
        no,
        "an IKE SA on a native address"
    );
    assert_eq!(
        chosen(&c, "192.0.2.1:4500", "198.51.100.7:4500", vec![gmac(256)]),
        no,
        "IPv4"
    );
    assert_eq!(
        chosen(&c, SERVER, "[::ffff:198.51.100.7]:4500", vec![gmac(256)]),
        no,
        "IPv4-mapped"
    );
    assert_eq!(
        chosen(&c, SERVER, IPHTTPS_CLIENT, vec![gmac(256)]),
        Ok(Cipher::NullAesGmac256)
    );
    let narrow = config(Some("2001:db8:1::/48"));
    assert_eq!(
        chosen(&narrow, SERVER, "[2001:db8:2::7]:500", vec![gmac(256)]),
        no,
        "outside the prefix"
    );
    // Teredo and native clients keep their encrypting suites.
    assert_eq!(
        chosen(&c, SERVER, CLIENT, vec![gmac(256), gcm(128)]),
        Ok(Cipher::AesGcm16_128)
    );
}

#[test]
fn gmac_is_refused_for_everyone_with_the_setting_off_and_esp_suites_never_adds_it() {
    let mut c = config(None);
    let no = Err(notify::NO_PROPOSAL_CHOSEN);
    assert_eq!(chosen(&c, SERVER, IPHTTPS_CLIENT, vec![gmac(256)]), no);
    assert_eq!(chosen(&c, SERVER, CLIENT, vec![gmac(128)]), no);
    c.esp_suites = vec![Cipher::NullAesGmac256, Cipher::AesGcm16_256];
    assert_eq!(chosen(&c, SERVER, IPHTTPS_CLIENT, vec![gmac(256)]), no);
}

/// A CREATE_CHILD_SA for AES-256-GMAC.
fn create_child(
    r: &mut Responder,
    i: &mut Initiator,
    old: &ChildSaPair,
    from: &str,
    now: Instant,
) -> Vec<Payload> {
    let tsi = vec![TrafficSelector::range(old.peer.inner[0], old.peer.inner[0])];
    let tsr = vec![TrafficSelector::range(
        "fd00:c0::".parse().expect("a"),
        "fd00:c0::ffff".parse().expect("a"),
    )];
    let payloads = [
        Payload::Sa(offer(vec![gmac(256)])),
        Payload::Nonce(vec![7; 32]),
        Payload::TsI(tsi),
        Payload::TsR(tsr),
    ];
    let req = request(i, exchange::CREATE_CHILD_SA, &payloads);
    r.handle(now, addr(SERVER), addr(from), &req);
    open_response(i, &r.poll_transmit().expect("answer"))
}

#[test]
fn a_teredo_ike_sa_gets_no_proposal_chosen_for_gmac_and_an_iphttps_one_a_working_gmac_sa() {
    let lab = Lab::new();
    let now = Instant::now();
    let wide = |c: &mut ResponderConfig| {
        c.integrity_only_prefix = Some("2001::/16".parse().expect("prefix"));
    };
    // The lab client's address is a Teredo one.
    let (mut r, mut i, old) = established_pair(&lab, now, wide);
    let answer = create_child(&mut r, &mut i, &old, CLIENT, now);
    assert!(
        find_notify(&answer, notify::NO_PROPOSAL_CHOSEN).is_some(),
        "{answer:?}"
    );

    // The same IKE SA as if it had come over IP-HTTPS.
    let (mut r, mut i, old) = established_pair(&lab, now, wide);
    for sa in r.sas.values_mut() {
        sa.remote = addr(IPHTTPS_CLIENT);
    }
    let answer = create_child(&mut r, &mut i, &old, IPHTTPS_CLIENT, now);
    let sa = answer
        .iter()
        .find_map(|p| match p {
            Payload::Sa(p) => Some(p.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("SA payload in {answer:?}"));
    assert_eq!(
        sa[0].transforms[0],
        Transform::with_key_length(transform::ENCR, transform::ENCR_NULL_AUTH_AES_GMAC, 256)
    );
    assert!(sa[0].transforms.iter().all(|t| t.kind != transform::INTEG));
    let ev = events(&mut r);
    let new = child_ups(&ev)[0];
    assert_eq!(new.inbound.keys.cipher, Cipher::NullAesGmac256);
    assert_eq!(new.inbound.keys.key.len(), 36);
    // gate64's two directions carry packets (the outbound sealed, opened by a copy of it).
    let seal = Outbound::new(&new.outbound).expect("outbound");
    let open = Inbound::new(&new.outbound).expect("same keys");
    let inner = [0x60u8; 48];
    let mut buf = vec![0u8; 16 + inner.len() + Cipher::NullAesGmac256.max_trailer()];
    buf[16..64].copy_from_slice(&inner);
    let n = seal.seal(&mut buf, 0, inner.len(), 41).expect("seal");
    assert_eq!(&buf[16..64], &inner[..], "in clear");
    let opened = open.open(&mut buf[..n]).expect("open");
    assert_eq!(&buf[opened.inner], &inner[..]);
}
