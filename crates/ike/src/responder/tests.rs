//! The responder driven by gate64's own initiator (and hand-built requests) on a fake clock.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use super::*;
use crate::child_sa::{ChildSaPair, TunnelKind};
use crate::initiator::{Initiator, InitiatorConfig, InitiatorEvent};
use crate::keys::Group;
use crate::message::{Delete, Proposal, TrafficSelector, Transform, kind, transform};

const SERVER: &str = "[2001:db8:ffff::1]:500";
const CLIENT: &str = "[2001:0:c000:201::7]:500";

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).expect("self-signed");
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// Both purposes: the same helper makes clients' and servers' certificates.
const BOTH_PURPOSES: [ExtendedKeyUsagePurpose; 2] = [
    ExtendedKeyUsagePurpose::ClientAuth,
    ExtendedKeyUsagePurpose::ServerAuth,
];

/// A leaf (ECDSA P-256, digitalSignature, clientAuth and serverAuth) under `ca`: (chain PEM,
/// key PEM).
fn leaf(ca: &Ca, name: &str) -> (String, String) {
    leaf_for(ca, name, &BOTH_PURPOSES)
}

/// [`leaf`] with the extended key usages `ekus`.
fn leaf_for(ca: &Ca, name: &str, ekus: &[ExtendedKeyUsagePurpose]) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = vec![SanType::DnsName(name.try_into().expect("dns name"))];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = ekus.to_vec();
    let cert = params.signed_by(&key, &ca.issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

struct Lab {
    clients_ca: Ca,
    servers_ca: Ca,
}

impl Lab {
    fn new() -> Self {
        Lab {
            clients_ca: ca("gate64 clients CA"),
            servers_ca: ca("gate64 servers CA"),
        }
    }

    fn responder(&self, now: Instant, edit: impl FnOnce(&mut ResponderConfig)) -> Responder {
        let (chain, key) = leaf(&self.servers_ca, "gate64.lab");
        let credentials =
            Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("server credentials");
        let anchors = TrustAnchors::from_pem(self.clients_ca.pem.as_bytes()).expect("clients CA");
        let mut config = ResponderConfig::new(
            credentials,
            anchors,
            "fd00:c1::100/120".parse().expect("pool"),
            vec!["fd00:c0::53/128".parse().expect("prefix")],
            vec!["fd00:c0::/64".parse().expect("prefix")],
        );
        edit(&mut config);
        Responder::new(config, now, SystemTime::now()).expect("responder")
    }

    fn initiator(
        &self,
        now: Instant,
        tunnel: TunnelKind,
        tsr: &str,
        ca: &Ca,
        group: Group,
    ) -> Initiator {
        self.initiator_with(now, tunnel, tsr, ca, group, &BOTH_PURPOSES)
    }

    /// A client of the clients CA asking for the intranet tunnel (ECP-256).
    fn intranet(&self, now: Instant) -> Initiator {
        self.initiator(
            now,
            TunnelKind::Intranet,
            "fd00:c0::/64",
            &self.clients_ca,
            Group::Ecp256,
        )
    }

    /// A client of the clients CA asking for the infrastructure tunnel (ECP-256).
    fn infrastructure(&self, now: Instant) -> Initiator {
        self.initiator(
            now,
            TunnelKind::Infrastructure,
            "fd00:c0::53/128",
            &self.clients_ca,
            Group::Ecp256,
        )
    }

    /// [`Lab::initiator`] whose certificate lists the extended key usages `ekus`.
    fn initiator_with(
        &self,
        now: Instant,
        tunnel: TunnelKind,
        tsr: &str,
        ca: &Ca,
        group: Group,
        ekus: &[ExtendedKeyUsagePurpose],
    ) -> Initiator {
        let (chain, key) = leaf_for(ca, "client1.gate64.lab", ekus);
        self.initiator_as(now, tunnel, tsr, (&chain, &key), group)
    }

    /// [`Lab::initiator`] with the client certificate chain and key `chain_key` (PEM).
    fn initiator_as(
        &self,
        now: Instant,
        tunnel: TunnelKind,
        tsr: &str,
        (chain, key): (&str, &str),
        group: Group,
    ) -> Initiator {
        let credentials =
            Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("client credentials");
        let anchors = TrustAnchors::from_pem(self.servers_ca.pem.as_bytes()).expect("servers CA");
        let net: ipnet::IpNet = tsr.parse().expect("tsr");
        let config = InitiatorConfig {
            credentials,
            anchors,
            group,
            request_address: true,
            tsi: vec![TrafficSelector::range(
                "::".parse().expect("any"),
                IpAddr::V6(std::net::Ipv6Addr::from(u128::MAX)),
            )],
            tsr: vec![TrafficSelector::range(net.network(), net.broadcast())],
            tunnel,
            retransmit_after: Duration::from_secs(2),
            max_retransmits: 3,
            integrity_only: false,
        };
        Initiator::new(config, now, SystemTime::now(), addr(CLIENT), addr(SERVER))
            .expect("initiator")
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

/// Moves datagrams both ways until both sides are quiet; returns what the responder sent.
fn exchange_all(r: &mut Responder, i: &mut Initiator, now: Instant) -> Vec<Transmit> {
    let mut sent = Vec::new();
    loop {
        let mut moved = false;
        while let Some((local, remote, bytes)) = i.poll_transmit() {
            r.handle(now, remote, local, &bytes);
            moved = true;
        }
        while let Some(t) = r.poll_transmit() {
            i.handle(now, &t.bytes);
            sent.push(t);
            moved = true;
        }
        if !moved {
            return sent;
        }
    }
}

fn events(r: &mut Responder) -> Vec<Event> {
    std::iter::from_fn(|| r.poll_event()).collect()
}

/// The events say `pair` and its IKE SA went down, and nothing is left: no IKE SA, no lease.
fn assert_all_torn_down(r: &mut Responder, pair: &ChildSaPair, now: Instant) {
    let ev = events(r);
    assert!(
        ev.contains(&Event::ChildSaDown {
            inbound_spi: pair.inbound.spi
        }),
        "{ev:?}"
    );
    assert!(ev.iter().any(|e| matches!(e, Event::IkeSaDown { .. })));
    assert_eq!((r.ike_sas(now).len(), r.pool.leased()), (0, 0));
}

fn established(i: &mut Initiator) -> (Option<IpAddr>, ChildSaPair) {
    match i.poll_event() {
        Some(InitiatorEvent::Established { inner, child, .. }) => (inner, *child),
        Some(InitiatorEvent::Failed(e)) => panic!("initiator failed: {e}"),
        other => panic!("initiator not established: {other:?}"),
    }
}

fn child_ups(ev: &[Event]) -> Vec<&ChildSaPair> {
    ev.iter()
        .filter_map(|e| match e {
            Event::ChildSaUp(p) => Some(&**p),
            _ => None,
        })
        .collect()
}

/// An encrypted request from the initiator on its IKE SA.
fn request(i: &mut Initiator, exchange_type: u8, payloads: &[Payload]) -> Vec<u8> {
    let keys = i.keys.clone().expect("keys");
    let header = Header {
        spi_i: i.spi_i,
        spi_r: i.spi_r,
        exchange: exchange_type,
        flags: flags::INITIATOR,
        message_id: i.next_id,
    };
    i.next_id += 1;
    keys::seal_message(&header, payloads, &keys.sk_ei).expect("seal")
}

fn open_response(i: &Initiator, t: &Transmit) -> Vec<Payload> {
    let keys = i.keys.clone().expect("keys");
    keys::open_message(&t.bytes, &keys.sk_er)
        .expect("response opens")
        .1
}

/// A CFG_REQUEST asking for DNS servers and split-DNS domains (RFC 8598) gets the configured
/// ones beside the inner address; without any configured, only the address.
#[test]
fn cfg_reply_carries_dns_servers_and_domains_when_asked() {
    let lab = Lab::new();
    let now = Instant::now();
    let dns: Ipv6Addr = "fd00:c0::53".parse().expect("addr");
    let mut r = lab.responder(now, |c| {
        c.dns = vec![dns];
        c.dns_domains = vec!["corp.example.com".into(), "lab.example".into()];
    });
    let mut i = lab.infrastructure(now);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    match i.poll_event() {
        Some(InitiatorEvent::Established {
            inner,
            dns: got,
            dns_domains,
            ..
        }) => {
            assert!(inner.is_some());
            assert_eq!(got, [dns]);
            assert_eq!(dns_domains, ["corp.example.com", "lab.example"]);
        }
        other => panic!("not established: {other:?}"),
    }

    let mut r = lab.responder(now, |_| {});
    let mut i = lab.infrastructure(now);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    match i.poll_event() {
        Some(InitiatorEvent::Established {
            inner,
            dns,
            dns_domains,
            ..
        }) => {
            assert!(inner.is_some());
            assert!(dns.is_empty() && dns_domains.is_empty());
        }
        other => panic!("not established: {other:?}"),
    }
}

/// INTERNAL_IP6_SUBNET, when asked for, lists the prefixes of the tunnel the child SA is, and
/// nothing is said about what is not asked for.
#[test]
fn cfg_reply_lists_the_tunnels_subnets_when_asked() {
    use crate::message::{CfgAttribute, Configuration, cfg};
    let lab = Lab::new();
    let r = lab.responder(Instant::now(), |_| {});
    let ask = |kinds: &[u16]| Configuration {
        kind: cfg::REQUEST,
        attributes: kinds
            .iter()
            .map(|&kind| CfgAttribute {
                kind,
                value: Vec::new(),
            })
            .collect(),
    };
    let subnets = |tunnel| match cp::cfg_reply(
        &ask(&[cfg::INTERNAL_IP6_SUBNET]),
        (None, None),
        tunnel,
        &r.config,
    ) {
        Some(Payload::Cp(c)) => c
            .attributes
            .iter()
            .map(|a| {
                assert_eq!(a.kind, cfg::INTERNAL_IP6_SUBNET);
                let octets: [u8; 16] = a.value[..16].try_into().expect("16 bytes");
                format!("{}/{}", Ipv6Addr::from(octets), a.value[16])
            })
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(subnets(TunnelKind::Infrastructure), ["fd00:c0::53/128"]);
    assert_eq!(subnets(TunnelKind::Intranet), ["fd00:c0::/64"]);
    assert_eq!(
        cp::cfg_reply(
            &ask(&[cfg::INTERNAL_IP4_DNS]),
            (None, None),
            TunnelKind::Intranet,
            &r.config
        ),
        None,
        "nothing asked for that gate64 has"
    );
}

/// One client, two IKE SAs (infrastructure and intranet), one child SA each, one inner
/// address from the pool for both; the child keys agree on both ends (RFC 7296 §2.17 order).
#[test]
fn rfc7296_1_2_two_tunnels_with_cfg_and_narrowing() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut infra = lab.infrastructure(now);
    let mut intra = lab.initiator(
        now,
        TunnelKind::Intranet,
        "fd00:c0::/48",
        &lab.clients_ca,
        Group::Curve25519,
    );
    infra.start(now);
    exchange_all(&mut r, &mut infra, now);
    intra.start(now);
    exchange_all(&mut r, &mut intra, now);
    let (inner_a, child_a) = established(&mut infra);
    let (inner_b, child_b) = established(&mut intra);
    let ev = events(&mut r);
    let ups = child_ups(&ev);
    assert_eq!(ups.len(), 2);
    assert_eq!(
        (ups[0].tunnel, ups[1].tunnel),
        (TunnelKind::Infrastructure, TunnelKind::Intranet)
    );
    // The pool's first address (fd00:c1::101) is gate64's own; clients start after it.
    let pool_addr: IpAddr = "fd00:c1::102".parse().expect("addr");
    assert_eq!((inner_a, inner_b), (Some(pool_addr), Some(pool_addr)));
    assert_eq!(ups[0].peer.inner, vec![pool_addr]);
    // TSr narrowed into the intranet prefix; TSi narrowed to the inner address.
    assert_eq!(
        ups[1].inbound.local_ts[0].start,
        "fd00:c0::".parse::<IpAddr>().expect("addr")
    );
    assert_eq!(
        ups[1].inbound.local_ts[0].end,
        "fd00:c0::ffff:ffff:ffff:ffff"
            .parse::<IpAddr>()
            .expect("addr")
    );
    assert_eq!(ups[0].inbound.remote_ts[0].start, pool_addr);
    for (ours, theirs) in [(ups[0], &child_a), (ups[1], &child_b)] {
        assert_eq!(ours.inbound.spi, theirs.outbound.spi);
        assert_eq!(ours.inbound.keys, theirs.outbound.keys);
        assert_eq!(ours.outbound.keys, theirs.inbound.keys);
        assert_eq!(ours.ike_spi, theirs.ike_spi);
    }
    // The pairs are what gate64-esp installs.
    let sadb = gate64_esp::SaDb::new();
    for pair in child_ups(&ev) {
        sadb.install(pair.clone()).expect("installs");
    }
    assert_eq!(sadb.len(), 2);
    let ups = ev
        .iter()
        .filter(|e| matches!(e, Event::IkeSaUp { .. }))
        .count();
    let ok = ev
        .iter()
        .filter(|e| matches!(e, Event::Negotiation { result: Ok(()), .. }))
        .count();
    assert_eq!((ups, ok, r.half_open()), (2, 2, 0));
    let sas = r.ike_sas(now);
    assert_eq!(sas.len(), 2);
    assert!(
        sas.iter()
            .all(|s| s.established && s.identity.as_deref() == Some("CN=client1.gate64.lab"))
    );
}

#[test]
fn rfc7296_2_1_duplicate_request_gets_the_same_response() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut i = lab.intranet(now);
    i.start(now);
    let (l, rem, init) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, rem, l, &init);
    r.handle(now, rem, l, &init);
    let first = r.poll_transmit().expect("response");
    assert_eq!(
        r.poll_transmit().expect("retransmitted response").bytes,
        first.bytes
    );
    i.handle(now, &first.bytes);
    let (l, rem, auth) = i.poll_transmit().expect("IKE_AUTH");
    r.handle(now, rem, l, &auth);
    let response = r.poll_transmit().expect("IKE_AUTH response");
    r.handle(now, rem, l, &auth);
    assert_eq!(r.poll_transmit().expect("cached"), response);
    assert_eq!(r.stats().retransmits, 2);
    assert_eq!(
        child_ups(&events(&mut r)).len(),
        1,
        "a duplicate builds nothing twice"
    );
}

fn raw_init(spi_i: u64, transforms: Vec<Transform>, group: u16, ke_len: usize) -> Vec<u8> {
    let proposal = Proposal {
        number: 1,
        protocol: transform::PROTO_IKE,
        spi: vec![],
        transforms,
    };
    let kex =
        keys::KeyExchange::generate(Group::from_id(group).unwrap_or(Group::Ecp256)).expect("kex");
    let mut data = kex.public_data().expect("public");
    data.resize(ke_len, 0);
    Message {
        header: Header {
            spi_i,
            spi_r: 0,
            exchange: exchange::IKE_SA_INIT,
            flags: flags::INITIATOR,
            message_id: 0,
        },
        payloads: vec![
            Payload::Sa(vec![proposal]),
            Payload::Ke { group, data },
            Payload::Nonce(vec![3; 32]),
        ],
    }
    .emit()
}

fn gcm_prf() -> Vec<Transform> {
    vec![
        Transform::with_key_length(transform::ENCR, transform::ENCR_AES_GCM_16, 256),
        Transform::new(transform::PRF, transform::PRF_HMAC_SHA2_256),
    ]
}

fn only_notify(t: &Transmit) -> (u16, Vec<u8>) {
    let m = Message::parse(&t.bytes).expect("response parses");
    match m.payloads.as_slice() {
        [Payload::Notify(n)] => (n.kind, n.data.clone()),
        other => panic!("expected one notify, got {other:?}"),
    }
}

#[test]
fn rfc7296_1_2_invalid_ke_payload_names_the_wanted_group() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |_| {});
    let mut t = gcm_prf();
    t.push(Transform::new(transform::KE, 19));
    r.handle(now, addr(SERVER), addr(CLIENT), &raw_init(7, t, 31, 32));
    let reply = r.poll_transmit().expect("reply");
    assert_eq!(
        only_notify(&reply),
        (notify::INVALID_KE_PAYLOAD, vec![0, 19])
    );
    assert!(events(&mut r).contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::InvalidKe
    }));
    assert_eq!(r.half_open(), 0, "no state kept");
}

#[test]
fn rfc7296_2_7_no_proposal_chosen() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |_| {});
    // Windows' default set: SHA1 and MODP-1024 need `legacy_proposals`.
    let legacy = vec![
        Transform::with_key_length(transform::ENCR, 12, 256),
        Transform::new(transform::PRF, 2),
        Transform::new(transform::INTEG, 2),
        Transform::new(transform::KE, 2),
    ];
    r.handle(
        now,
        addr(SERVER),
        addr(CLIENT),
        &raw_init(7, legacy, 2, 128),
    );
    assert_eq!(
        only_notify(&r.poll_transmit().expect("reply")).0,
        notify::NO_PROPOSAL_CHOSEN
    );
    let ev = events(&mut r);
    assert!(ev.iter().any(|e| matches!(
        e,
        Event::Negotiation {
            result: Err(Refusal::NoProposal),
            ..
        }
    )));
}

#[test]
fn rfc7296_2_6_cookies_above_the_half_open_threshold() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| c.half_open_cookie_threshold = 0);
    let mut i = lab.intranet(now);
    i.start(now);
    let sent = exchange_all(&mut r, &mut i, now);
    assert_eq!(only_notify(&sent[0]).0, notify::COOKIE);
    established(&mut i);
    let ev = events(&mut r);
    assert!(ev.contains(&Event::CookieSent { peer: addr(CLIENT) }));
    assert_eq!(r.stats().cookies_sent, 1);
    // A forged cookie gets a fresh cookie, not state.
    let mut forged = raw_init(
        99,
        {
            let mut t = gcm_prf();
            t.push(Transform::new(transform::KE, 19));
            t
        },
        19,
        64,
    );
    let m = Message::parse(&forged).expect("parse");
    let mut payloads = vec![Payload::Notify(Notify::new(notify::COOKIE, vec![0; 17]))];
    payloads.extend(m.payloads);
    forged = Message {
        header: m.header,
        payloads,
    }
    .emit();
    r.handle(now, addr(SERVER), addr(CLIENT), &forged);
    assert_eq!(
        only_notify(&r.poll_transmit().expect("reply")).0,
        notify::COOKIE
    );
    assert_eq!(r.half_open(), 0);
}

#[test]
fn half_open_cap_per_source_and_timeout() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |c| c.max_half_open_per_source = 2);
    let mut t = gcm_prf();
    t.push(Transform::new(transform::KE, 19));
    for spi in 1..=3 {
        r.handle(
            now,
            addr(SERVER),
            addr(CLIENT),
            &raw_init(spi, t.clone(), 19, 64),
        );
    }
    assert_eq!(std::iter::from_fn(|| r.poll_transmit()).count(), 2);
    assert_eq!(r.half_open(), 2);
    assert!(events(&mut r).contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::HalfOpenCap
    }));
    let deadline = r.poll_timeout().expect("deadline");
    assert!(deadline <= now + Duration::from_secs(30));
    r.handle_timeout(now + Duration::from_secs(31));
    assert_eq!((r.half_open(), r.ike_sas(now).len()), (0, 0));
    let ev = events(&mut r);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(
                e,
                Event::Negotiation {
                    result: Err(Refusal::Timeout),
                    ..
                }
            ))
            .count(),
        2
    );
}

#[test]
fn rfc7296_2_5_unknown_critical_payload_is_answered() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |_| {});
    let m = Message {
        header: Header {
            spi_i: 5,
            spi_r: 0,
            exchange: exchange::IKE_SA_INIT,
            flags: flags::INITIATOR,
            message_id: 0,
        },
        payloads: vec![Payload::Other {
            kind: 200,
            body: vec![],
        }],
    };
    let mut bytes = m.emit();
    bytes[crate::message::HEADER_LEN + 1] = 0x80;
    r.handle(now, addr(SERVER), addr(CLIENT), &bytes);
    assert_eq!(
        only_notify(&r.poll_transmit().expect("reply")).0,
        notify::UNSUPPORTED_CRITICAL_PAYLOAD
    );
    r.handle(now, addr(SERVER), addr(CLIENT), &bytes[..20]);
    assert!(r.poll_transmit().is_none());
    let ev = events(&mut r);
    assert!(ev.contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::Malformed
    }));
}

#[test]
fn rfc7296_2_21_2_client_from_another_ca_fails_authentication() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let rogue = ca("rogue CA");
    let mut i = lab.initiator(
        now,
        TunnelKind::Intranet,
        "fd00:c0::/64",
        &rogue,
        Group::Ecp256,
    );
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    assert!(matches!(
        i.poll_event(),
        Some(InitiatorEvent::Failed(
            crate::initiator::InitiatorError::Notify(notify::AUTHENTICATION_FAILED)
        ))
    ));
    let ev = events(&mut r);
    // What the daemon's "IKE negotiation failed" line prints: the cause, the client's
    // address and the identity it claimed.
    let (cause, peer, identity) = ev
        .iter()
        .find_map(|e| match e {
            Event::Negotiation {
                result: Err(why @ Refusal::Authentication(_)),
                peer,
                identity,
                ..
            } => Some((why.cause().to_owned(), *peer, identity.clone())),
            _ => None,
        })
        .expect("an auth_failed negotiation");
    assert_eq!(cause, "certificate not issued by a trusted CA");
    assert!(peer.is_some(), "no peer address");
    let identity = identity.expect("the claimed IDi");
    assert!(identity.contains(':'), "{identity}");
    assert!(child_ups(&ev).is_empty());
    assert_eq!(
        (r.ike_sas(now).len(), r.half_open(), r.pool.leased()),
        (0, 0, 0)
    );
}

#[test]
fn rfc7296_2_15_idr_the_client_asks_for_is_answered_when_the_certificate_holds_it() {
    // The server leaf is CN=gate64.lab with SAN dNSName gate64.lab.
    let lab = Lab::new();
    let now = Instant::now();
    let client = |server_id: crate::auth::Identity| {
        let mut i = lab
            .initiator(
                now,
                TunnelKind::Intranet,
                "fd00:c0::/64",
                &lab.clients_ca,
                Group::Ecp256,
            )
            .with_server_id(server_id);
        i.start(now);
        i
    };
    let mut r = lab.responder(now, |_| {});
    let mut i = client(crate::auth::Identity::fqdn("gate64.lab"));
    exchange_all(&mut r, &mut i, now);
    established(&mut i);
    // A name the certificate does not hold: gate64 answers with its own identity, and the
    // client, which wanted that name, refuses the answer.
    let mut r = lab.responder(now, |_| {});
    let mut i = client(crate::auth::Identity::fqdn("elsewhere.lab"));
    exchange_all(&mut r, &mut i, now);
    let Some(InitiatorEvent::Failed(crate::initiator::InitiatorError::Auth(e))) = i.poll_event()
    else {
        panic!("the client accepted a certificate without the identity it expects");
    };
    assert!(
        matches!(e, crate::auth::AuthError::ExpectedIdMismatch { .. }),
        "{e:?}"
    );
    // The identity expected and the ones the certificate carries.
    let text = e.to_string();
    assert!(text.contains("expected fqdn:elsewhere.lab"), "{text}");
    assert!(
        text.contains("the certificate carries fqdn:gate64.lab"),
        "{text}"
    );
    assert!(text.contains("dn:"), "{text}");
}

#[test]
fn a_server_certificate_does_not_authenticate_a_client() {
    // serverAuth alone under the clients' CA: refused by default (the strict client rule).
    let lab = Lab::new();
    let now = Instant::now();
    let server_only = [ExtendedKeyUsagePurpose::ServerAuth];
    let client = |lab: &Lab| {
        let mut i = lab.initiator_with(
            now,
            TunnelKind::Intranet,
            "fd00:c0::/64",
            &lab.clients_ca,
            Group::Ecp256,
            &server_only,
        );
        i.start(now);
        i
    };
    let mut r = lab.responder(now, |_| {});
    let mut i = client(&lab);
    exchange_all(&mut r, &mut i, now);
    assert!(matches!(
        i.poll_event(),
        Some(InitiatorEvent::Failed(
            crate::initiator::InitiatorError::Notify(notify::AUTHENTICATION_FAILED)
        ))
    ));
    assert!(child_ups(&events(&mut r)).is_empty());
    // With `client_eku = "any"` the same certificate authenticates.
    let mut r = lab.responder(now, |c| {
        c.anchors = TrustAnchors::from_pem(lab.clients_ca.pem.as_bytes())
            .expect("clients CA")
            .for_clients(crate::auth::ClientEku::Any);
    });
    let mut i = client(&lab);
    exchange_all(&mut r, &mut i, now);
    assert_eq!(child_ups(&events(&mut r)).len(), 1);
}

#[test]
fn rfc7296_2_9_selectors_outside_both_tunnels_are_refused() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut i = lab.initiator(
        now,
        TunnelKind::Intranet,
        "2001:db8:99::/64",
        &lab.clients_ca,
        Group::Ecp256,
    );
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    assert!(matches!(
        i.poll_event(),
        Some(InitiatorEvent::Failed(
            crate::initiator::InitiatorError::Notify(notify::TS_UNACCEPTABLE)
        ))
    ));
    let ev = events(&mut r);
    assert!(ev.contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::TsUnacceptable
    }));
    assert!(ev.iter().any(|e| matches!(
        e,
        Event::Negotiation {
            result: Err(Refusal::TsUnacceptable),
            ..
        }
    )));
    assert!(child_ups(&ev).is_empty());
    assert_eq!(r.pool.leased(), 0, "no lease without a child SA");
}

/// Asks for an IKE SA rekey (RFC 7296 §2.18) on `i`'s IKE SA, SPIi 0xabcd; returns the new
/// IKE SA's SPIr. The old IKE SA stays until the client deletes it.
fn rekey_ike(r: &mut Responder, i: &mut Initiator, now: Instant) -> u64 {
    let kex = keys::KeyExchange::generate(Group::Ecp256).expect("kex");
    let mut t = gcm_prf();
    t.push(Transform::new(transform::KE, 19));
    let sa = Payload::Sa(vec![Proposal {
        number: 1,
        protocol: transform::PROTO_IKE,
        spi: 0xabcdu64.to_be_bytes().to_vec(),
        transforms: t,
    }]);
    let payloads = [
        sa,
        Payload::Nonce(vec![6; 32]),
        Payload::Ke {
            group: 19,
            data: kex.public_data().expect("public"),
        },
    ];
    let req = request(i, exchange::CREATE_CHILD_SA, &payloads);
    r.handle(now, addr(SERVER), addr(CLIENT), &req);
    let answer = open_response(i, &r.poll_transmit().expect("answer"));
    let Some(Payload::Sa(p)) = answer.first() else {
        panic!("SA first: {answer:?}")
    };
    u64::from_be_bytes(p[0].spi.as_slice().try_into().expect("8-byte SPI"))
}

fn established_pair(
    lab: &Lab,
    now: Instant,
    edit: impl FnOnce(&mut ResponderConfig),
) -> (Responder, Initiator, ChildSaPair) {
    let mut r = lab.responder(now, edit);
    let mut i = lab.intranet(now);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    established(&mut i);
    let ev = events(&mut r);
    let pair = child_ups(&ev)[0].clone();
    (r, i, pair)
}

#[test]
fn rfc7296_1_4_liveness_and_deletes() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, pair) = established_pair(&lab, now, |_| {});
    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    r.handle(now, addr(SERVER), addr(CLIENT), &probe);
    assert_eq!(
        open_response(&i, &r.poll_transmit().expect("liveness answer")),
        vec![]
    );
    // Delete the child by the client's SPI: the answer names ours.
    let spis = vec![pair.outbound.spi.to_be_bytes().to_vec()];
    let delete = Payload::Delete(Delete {
        protocol: transform::PROTO_ESP,
        spi_size: 4,
        spis,
    });
    let del = request(&mut i, exchange::INFORMATIONAL, &[delete]);
    r.handle(now, addr(SERVER), addr(CLIENT), &del);
    let answer = open_response(&i, &r.poll_transmit().expect("delete answer"));
    let ours = vec![pair.inbound.spi.to_be_bytes().to_vec()];
    assert_eq!(
        answer,
        vec![Payload::Delete(Delete {
            protocol: transform::PROTO_ESP,
            spi_size: 4,
            spis: ours
        })]
    );
    assert_eq!(
        events(&mut r),
        vec![Event::ChildSaDown {
            inbound_spi: pair.inbound.spi
        }]
    );
    // A stale message ID is refused.
    let mut stale = i.next_id;
    std::mem::swap(&mut stale, &mut i.next_id);
    i.next_id = 1;
    let old = request(&mut i, exchange::INFORMATIONAL, &[]);
    i.next_id = stale;
    r.handle(now, addr(SERVER), addr(CLIENT), &old);
    assert!(r.poll_transmit().is_none());
    assert!(events(&mut r).contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::MessageId
    }));
    let ike = Payload::Delete(Delete {
        protocol: transform::PROTO_IKE,
        spi_size: 0,
        spis: vec![],
    });
    let del = request(&mut i, exchange::INFORMATIONAL, &[ike]);
    r.handle(now, addr(SERVER), addr(CLIENT), &del);
    assert_eq!(
        open_response(&i, &r.poll_transmit().expect("answer")),
        vec![]
    );
    let ev = events(&mut r);
    assert!(matches!(
        ev.as_slice(),
        [Event::IkeSaDown {
            tunnel: Some(TunnelKind::Intranet),
            ..
        }]
    ));
    assert_eq!((r.ike_sas(now).len(), r.pool.leased()), (0, 0));
}

fn esp_proposal(spi: u32, pfs: Option<u16>) -> Payload {
    let mut transforms = vec![
        Transform::with_key_length(transform::ENCR, transform::ENCR_AES_GCM_16, 256),
        Transform::new(transform::ESN, transform::ESN_NONE),
    ];
    transforms.extend(pfs.map(|g| Transform::new(transform::KE, g)));
    Payload::Sa(vec![Proposal {
        number: 1,
        protocol: transform::PROTO_ESP,
        spi: spi.to_be_bytes().to_vec(),
        transforms,
    }])
}

#[test]
fn rfc7296_1_3_3_child_rekey_with_pfs() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, old) = established_pair(&lab, now, |_| {});
    let kex = keys::KeyExchange::generate(Group::Curve25519).expect("kex");
    let ni = vec![4; 32];
    let tsi = vec![TrafficSelector::range(old.peer.inner[0], old.peer.inner[0])];
    let tsr = vec![TrafficSelector::range(
        "fd00:c0::".parse().expect("a"),
        "fd00:c0::ffff".parse().expect("a"),
    )];
    let rekey = Notify {
        protocol: transform::PROTO_ESP,
        spi: old.outbound.spi.to_be_bytes().to_vec(),
        kind: notify::REKEY_SA,
        data: vec![],
    };
    let payloads = [
        Payload::Notify(rekey),
        esp_proposal(0x5000, Some(31)),
        Payload::Nonce(ni.clone()),
        Payload::Ke {
            group: 31,
            data: kex.public_data().expect("public"),
        },
        Payload::TsI(tsi),
        Payload::TsR(tsr.clone()),
    ];
    let req = request(&mut i, exchange::CREATE_CHILD_SA, &payloads);
    r.handle(now, addr(SERVER), addr(CLIENT), &req);
    let answer = open_response(&i, &r.poll_transmit().expect("answer"));
    let (mut nr, mut ke) = (None, None);
    for p in &answer {
        match p {
            Payload::Nonce(n) => nr = Some(n.clone()),
            Payload::Ke { data, .. } => ke = Some(data.clone()),
            Payload::TsR(t) => assert_eq!(t, &tsr, "already inside the intranet prefix"),
            _ => {}
        }
    }
    let shared = kex.agree(&ke.expect("KEr")).expect("agree");
    let sk_d = i.keys.clone().expect("keys").sk_d;
    let (i_to_r, _) = keys::child_keymat(&sk_d, Some(&shared), &ni, &nr.expect("Nr"), 36);
    let ev = events(&mut r);
    let new = child_ups(&ev)[0];
    assert_eq!(new.inbound.keys.key, i_to_r.0);
    assert_eq!(new.outbound.spi, 0x5000);
    assert!(ev.contains(&Event::Rekeyed {
        kind: RekeyKind::Child
    }));
    assert_eq!(
        r.ike_sas(now)[0].child_spis,
        vec![old.inbound.spi, new.inbound.spi]
    );
}

/// RFC 7296 §1.3.3 and §2.8 from the initiator's side: `rekey_child` asks for a new child SA
/// naming the old one, both ends derive the same keys, and the old SA is deleted on both.
#[test]
fn rfc7296_1_3_3_the_initiator_rekeys_its_child_and_deletes_the_old_one() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, old) = established_pair(&lab, now, |_| {});
    assert!(i.rekey_child(now));
    assert!(!i.rekey_child(now), "one request at a time");
    exchange_all(&mut r, &mut i, now);
    let new = match i.poll_event() {
        Some(InitiatorEvent::Rekeyed { child }) => *child,
        other => panic!("no rekey: {other:?}"),
    };
    let ev = events(&mut r);
    let ups = child_ups(&ev);
    assert_eq!(ups.len(), 1, "{ev:?}");
    let theirs = ups[0];
    // The two ends of each direction hold the same SPI and key.
    assert_eq!(theirs.inbound.spi, new.outbound.spi);
    assert_eq!(theirs.outbound.spi, new.inbound.spi);
    assert_eq!(theirs.inbound.keys.key, new.outbound.keys.key);
    assert_eq!(theirs.outbound.keys.key, new.inbound.keys.key);
    assert_ne!(new.inbound.spi, old.outbound.spi);
    assert_eq!(new.peer.inner, old.peer.inner, "the inner address stays");
    assert!(ev.contains(&Event::Rekeyed {
        kind: RekeyKind::Child
    }));
    // The old SA went with the initiator's Delete, on both ends.
    assert!(ev.contains(&Event::ChildSaDown {
        inbound_spi: old.inbound.spi
    }));
    assert_eq!(r.ike_sas(now)[0].child_spis, vec![theirs.inbound.spi]);
    assert_eq!(i.poll_timeout(), None, "the Delete was answered");
    // And it can rekey again.
    assert!(i.rekey_child(now));
}

#[test]
fn rfc7296_2_18_ike_rekey_moves_the_children() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, pair) = established_pair(&lab, now, |_| {});
    let new_spi_r = rekey_ike(&mut r, &mut i, now);
    let ev = events(&mut r);
    assert!(ev.contains(&Event::Rekeyed {
        kind: RekeyKind::Ike
    }));
    // Deleting the old IKE SA leaves the child on the new one.
    let ike = Payload::Delete(Delete {
        protocol: transform::PROTO_IKE,
        spi_size: 0,
        spis: vec![],
    });
    let del = request(&mut i, exchange::INFORMATIONAL, &[ike]);
    r.handle(now, addr(SERVER), addr(CLIENT), &del);
    let ev = events(&mut r);
    assert!(
        !ev.iter().any(|e| matches!(e, Event::ChildSaDown { .. })),
        "{ev:?}"
    );
    let sas = r.ike_sas(now);
    assert_eq!(sas.len(), 1);
    assert_eq!(
        (sas[0].spi_r, sas[0].spi_i, sas[0].child_spis.clone()),
        (new_spi_r, 0xabcd, vec![pair.inbound.spi])
    );
    assert_eq!(r.pool.leased(), 1, "the lease moved with the children");
    // INITIAL_CONTACT finds the client's SAs by identity: only the new one is filed.
    let filed: Vec<&Vec<u64>> = r.by_identity.values().collect();
    assert_eq!(filed, [&vec![new_spi_r]]);
}

#[test]
fn rfc7383_fragmented_request_and_response() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| c.fragment_size = 400);
    let mut i = lab.intranet(now);
    i.start(now);
    let (l, rem, init) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, rem, l, &init);
    i.handle(now, &r.poll_transmit().expect("reply").bytes);
    let (_, _, auth) = i.poll_transmit().expect("IKE_AUTH");
    // Re-send the IKE_AUTH request as fragments.
    let keys = i.keys.clone().expect("keys");
    let (header, inner) = keys::open_message(&auth, &keys.sk_ei).expect("own request");
    let fragments = keys::seal_fragments(&header, &inner, &keys.sk_ei, 300).expect("fragments");
    assert!(fragments.len() > 2);
    for f in fragments.iter().rev() {
        r.handle(now, rem, l, f);
    }
    let out: Vec<Transmit> = std::iter::from_fn(|| r.poll_transmit()).collect();
    assert!(out.len() > 1, "the IKE_AUTH response is fragmented");
    let mut chain = Vec::new();
    let mut first = 0;
    for t in &out {
        assert!(t.bytes.len() <= 400);
        let m = Message::parse(&t.bytes).expect("fragment parses");
        let Some(Payload::Skf {
            first: f,
            number,
            body,
            ..
        }) = m.payloads.last()
        else {
            panic!("SKF")
        };
        if *number == 1 {
            first = *f;
        }
        chain.extend(keys::open_fragment(&t.bytes, body, &keys.sk_er).expect("opens"));
    }
    // A retransmission of the fragmented request is answered once, on fragment 1.
    for f in &fragments {
        r.handle(now, rem, l, f);
    }
    assert_eq!(std::iter::from_fn(|| r.poll_transmit()).count(), out.len());
    let payloads = crate::message::parse_chain(first, &chain).expect("reassembled");
    assert_eq!(payloads.first().map(Payload::kind), Some(kind::IDR));
    assert_eq!(child_ups(&events(&mut r)).len(), 1);
}

#[test]
fn idle_ike_sa_is_forgotten_with_its_children() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, pair) =
        established_pair(&lab, now, |c| c.ike_idle_timeout = Duration::from_secs(600));
    // A liveness check keeps it.
    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    r.handle(
        now + Duration::from_secs(500),
        addr(SERVER),
        addr(CLIENT),
        &probe,
    );
    r.handle_timeout(now + Duration::from_secs(900));
    assert_eq!(r.ike_sas(now).len(), 1);
    r.handle_timeout(now + Duration::from_secs(1101));
    assert_all_torn_down(&mut r, &pair, now);
}

/// A RADIUS Disconnect-Request ends the IKE SAs it matched by SPIr, with its own reason; a
/// CoA-Request's Session-Timeout ends an IKE SA at the time set, whatever its client does.
#[test]
fn radius_disconnect_and_session_timeout_end_ike_sas() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, _, _) = established_pair(&lab, now, |_| {});
    let spi = r.ike_sas(now)[0].spi_r;
    assert!(
        r.disconnect_for(
            now,
            &DisconnectTarget::IkeSpis(vec![spi + 1]),
            EndReason::Radius
        )
        .is_empty()
    );
    let removed = r.disconnect_for(
        now,
        &DisconnectTarget::IkeSpis(vec![spi]),
        EndReason::Radius,
    );
    assert_eq!(removed.len(), 1);
    assert!(r.poll_transmit().is_some(), "a Delete to the client");
    assert!(r.events.contains(&Event::IkeSaEnded {
        spi_r: spi,
        reason: EndReason::Radius
    }));
    assert_eq!(r.established(), 0);

    let (mut r, mut i, pair) =
        established_pair(&lab, now, |c| c.ike_idle_timeout = Duration::from_secs(600));
    let spi = r.ike_sas(now)[0].spi_r;
    assert!(r.set_session_end(&[spi + 1], now).is_empty());
    assert_eq!(
        r.set_session_end(&[spi], now + Duration::from_secs(5)),
        [spi]
    );
    assert!(
        r.poll_timeout()
            .is_some_and(|t| t <= now + Duration::from_secs(5))
    );
    // A liveness check answered does not keep it past the end.
    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    r.handle(
        now + Duration::from_secs(4),
        addr(SERVER),
        addr(CLIENT),
        &probe,
    );
    r.handle_timeout(now + Duration::from_secs(4));
    assert_eq!(r.established(), 1);
    r.handle_timeout(now + Duration::from_secs(5));
    assert!(r.events.contains(&Event::IkeSaEnded {
        spi_r: spi,
        reason: EndReason::SessionTimeout
    }));
    assert_all_torn_down(&mut r, &pair, now);
}

/// RFC 7296 §2.23: the responder saw another source than the initiator used (a NAT), so the
/// initiator moves to 4500 and the responder builds a UDP-encapsulated child SA there.
#[test]
fn rfc7296_2_23_nat_moves_the_exchange_to_4500() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut i = lab.intranet(now);
    let mapped = addr("[2001:db8:7::1]:61000");
    i.start(now);
    let (_, server, init) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, server, mapped, &init);
    i.handle(now, &r.poll_transmit().expect("reply").bytes);
    let (local, remote, auth) = i.poll_transmit().expect("IKE_AUTH");
    assert_eq!((local.port(), remote.port()), (4500, 4500));
    let mapped_4500 = addr("[2001:db8:7::1]:61001");
    r.handle(now, SocketAddr::new(server.ip(), 4500), mapped_4500, &auth);
    let t = r.poll_transmit().expect("IKE_AUTH response");
    assert_eq!((t.local.port(), t.remote), (4500, mapped_4500));
    i.handle(now, &t.bytes);
    let (_, theirs) = established(&mut i);
    assert_eq!(theirs.peer.udp_encap, Some(4500));
    let ev = events(&mut r);
    assert_eq!(child_ups(&ev)[0].peer.udp_encap, Some(61001));
    assert_eq!(child_ups(&ev)[0].peer.native, None, "not a listen address");
}

/// A client that reaches gate64 on a `native_addresses` address gets child SAs marked with
/// that socket; when its NAT mapping changes, its next authenticated request moves the IKE
/// SA (answered at the new port) and reports the move for its child SAs; a request from the
/// same place reports nothing; one that arrives on another listen address reports the move
/// with that socket.
#[test]
fn rfc7296_2_23_a_native_client_is_followed_to_its_new_mapping() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut i = lab.intranet(now);
    i.start(now);
    let (_, server, init) = i.poll_transmit().expect("IKE_SA_INIT");
    let other_listen = addr("[2001:db8:ffff::99]:4500");
    let mut r = lab.responder(now, |c| {
        c.native_addresses = vec![server.ip(), other_listen.ip()];
    });
    let mapped = addr("[2001:db8:7::1]:61000");
    r.handle(now, server, mapped, &init);
    i.handle(now, &r.poll_transmit().expect("reply").bytes);
    let (_, _, auth) = i.poll_transmit().expect("IKE_AUTH");
    let local = SocketAddr::new(server.ip(), 4500);
    let mapped_4500 = addr("[2001:db8:7::1]:61001");
    r.handle(now, local, mapped_4500, &auth);
    i.handle(now, &r.poll_transmit().expect("IKE_AUTH response").bytes);
    established(&mut i);
    let ev = events(&mut r);
    let pair = child_ups(&ev)[0].clone();
    assert_eq!(pair.peer.native, Some(local));
    let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
    r.handle(now, local, mapped_4500, &probe);
    assert!(r.poll_transmit().is_some());
    assert!(
        !events(&mut r)
            .iter()
            .any(|e| matches!(e, Event::PeerMoved { .. })),
        "same mapping"
    );
    // A new mapping; then the same mapping to another listen address, where the native
    // socket moves.
    let rebound = addr("[2001:db8:7::1]:62000");
    for listen in [local, other_listen] {
        let probe = request(&mut i, exchange::INFORMATIONAL, &[]);
        r.handle(now, listen, rebound, &probe);
        let t = r.poll_transmit().expect("answered");
        assert_eq!((t.local, t.remote), (listen, rebound), "the IKE SA follows");
        let moved: Vec<Event> = events(&mut r)
            .into_iter()
            .filter(|e| matches!(e, Event::PeerMoved { .. }))
            .collect();
        assert_eq!(
            moved,
            [Event::PeerMoved {
                spi_r: r.ike_sas(now)[0].spi_r,
                inbound_spis: vec![pair.inbound.spi],
                peer: rebound,
                native: Some(listen),
            }]
        );
    }
}

/// RFC 7296 §2.4: a client that comes back with INITIAL_CONTACT replaces its stale IKE SA of
/// the same tunnel (and keeps its inner address); its other tunnel is left alone.
#[test]
fn rfc7296_2_4_initial_contact_replaces_the_same_tunnel_only() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, _, old) = established_pair(&lab, now, |_| {});
    let mut infra = lab.infrastructure(now);
    infra.start(now);
    exchange_all(&mut r, &mut infra, now);
    let mut again = lab.intranet(now);
    again.start(now);
    exchange_all(&mut r, &mut again, now);
    let (inner, _) = established(&mut again);
    assert_eq!(
        inner,
        Some(old.peer.inner[0]),
        "same identity, same inner address"
    );
    let ev = events(&mut r);
    assert!(
        ev.contains(&Event::ChildSaDown {
            inbound_spi: old.inbound.spi
        }),
        "{ev:?}"
    );
    let downs = ev.iter().filter(|e| {
        matches!(
            e,
            Event::IkeSaDown {
                tunnel: Some(TunnelKind::Intranet),
                ..
            }
        )
    });
    assert_eq!(downs.count(), 1);
    let tunnels: Vec<_> = r.ike_sas(now).iter().map(|s| s.tunnel).collect();
    assert_eq!(tunnels.len(), 2);
    assert!(
        tunnels.contains(&Some(TunnelKind::Infrastructure))
            && tunnels.contains(&Some(TunnelKind::Intranet))
    );
    assert_eq!(r.pool.leased(), 1);
}

/// RFC 7296 §1.4: an IKE SA idle for `dpd` gets an empty INFORMATIONAL request from the
/// responder (its own message IDs, from 0); a client that answers keeps its SAs.
#[test]
fn rfc7296_1_4_answered_liveness_check_keeps_the_sas() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let dpd = Duration::from_secs(30);
    let (mut r, mut i, _pair) = established_pair(&lab, t0, |c| c.dpd = dpd);
    assert!(r.poll_timeout().is_some_and(|t| t <= t0 + dpd));
    r.handle_timeout(t0 + dpd - Duration::from_secs(1));
    assert!(r.poll_transmit().is_none(), "not idle long enough yet");
    for (round, message_id) in [(1u32, 0u32), (2, 1)] {
        let at = t0 + dpd * round;
        r.handle_timeout(at);
        let probe = r.poll_transmit().expect("a liveness check");
        let m = Message::parse(&probe.bytes).unwrap();
        assert_eq!(
            (m.header.exchange, m.header.flags, m.header.message_id),
            (exchange::INFORMATIONAL, 0, message_id)
        );
        assert!(matches!(m.payloads.last(), Some(Payload::Sk { .. })));
        i.handle(at, &probe.bytes);
        let (local, remote, answer) = i.poll_transmit().expect("the client answers");
        r.handle(at, remote, local, &answer);
        // Answered: nothing is retransmitted, nothing goes down.
        r.handle_timeout(at + DPD_RETRANSMIT * 3);
        assert!(r.poll_transmit().is_none());
        assert!(events(&mut r).is_empty());
        assert_eq!(r.ike_sas(at).len(), 1);
    }
    // A second copy of an answer is refused as late, not taken as an answer; once a later
    // check went out and was answered, the same copy is outside the window.
    let refusals = |r: &mut Responder| -> Vec<Refusal> {
        events(r)
            .into_iter()
            .filter_map(|e| match e {
                Event::Refused { reason, .. } => Some(reason),
                _ => None,
            })
            .collect()
    };
    r.handle_timeout(t0 + dpd * 3);
    let probe = r.poll_transmit().expect("a third liveness check");
    i.handle(t0 + dpd * 3, &probe.bytes);
    let (local, remote, third) = i.poll_transmit().expect("the client answers");
    r.handle(t0 + dpd * 3, remote, local, &third);
    assert!(refusals(&mut r).is_empty());
    r.handle(t0 + dpd * 3, remote, local, &third);
    assert_eq!(refusals(&mut r), [Refusal::LateResponse]);
    // A copy whose integrity check fails is not late, whatever its message ID.
    let mut forged = third.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    r.handle(t0 + dpd * 3, remote, local, &forged);
    assert_eq!(refusals(&mut r), [Refusal::MessageId]);
    r.handle_timeout(t0 + dpd * 4);
    let probe = r.poll_transmit().expect("a fourth liveness check");
    i.handle(t0 + dpd * 4, &probe.bytes);
    let (local, remote, fourth) = i.poll_transmit().expect("the client answers");
    r.handle(t0 + dpd * 4, remote, local, &fourth);
    r.handle(t0 + dpd * 4, remote, local, &third);
    assert_eq!(refusals(&mut r), [Refusal::MessageId]);
    assert_eq!(r.ike_sas(t0 + dpd * 4).len(), 1);
}

/// The responder's timers: a message heard moves an IKE SA's liveness check later
/// without a new timer entry; the early entry fires, finds nothing due and reschedules; the
/// next deadline is then exact. Half-open SAs among established ones expire on their own
/// deadline without touching the others.
#[test]
fn a_message_heard_moves_the_liveness_check_later() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let dpd = Duration::from_secs(30);
    let (mut r, mut i, _pair) = established_pair(&lab, t0, |c| c.dpd = dpd);
    assert_eq!(r.poll_timeout(), Some(t0 + dpd));
    let heard = t0 + Duration::from_secs(20);
    let keepalive = request(&mut i, exchange::INFORMATIONAL, &[]);
    r.handle(heard, addr(SERVER), addr(CLIENT), &keepalive);
    assert!(r.poll_transmit().is_some(), "the request is answered");
    // The entry set before the message still fires first.
    assert_eq!(r.poll_timeout(), Some(t0 + dpd));
    r.handle_timeout(t0 + dpd);
    assert!(r.poll_transmit().is_none(), "heard 10 s ago: no check yet");
    assert_eq!(r.poll_timeout(), Some(heard + dpd));
    // A half-open SA from another client expires on its own deadline.
    let mut t = gcm_prf();
    t.push(Transform::new(transform::KE, 19));
    let other = addr("192.0.2.99:500");
    r.handle(t0 + dpd, addr(SERVER), other, &raw_init(7, t, 19, 64));
    assert!(r.poll_transmit().is_some(), "IKE_SA_INIT answered");
    assert_eq!(r.half_open(), 1);
    r.handle_timeout(heard + dpd);
    let probe = r.poll_transmit().expect("the liveness check, on time");
    assert_eq!(probe.remote, addr(CLIENT));
    assert_eq!(r.half_open(), 1, "not yet 30 s half-open");
    r.handle_timeout(t0 + dpd * 2);
    assert_eq!((r.half_open(), r.ike_sas(t0).len()), (0, 1));
}

/// RFC 7296 §2.4: a client that answers none of the retransmissions is dead: its IKE SA and
/// child SAs are deleted (the driver's SA database and gauges follow the events).
#[test]
fn rfc7296_2_4_unanswered_liveness_checks_delete_the_sas() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let dpd = Duration::from_secs(30);
    let (mut r, _i, pair) = established_pair(&lab, t0, |c| {
        c.dpd = dpd;
        c.dpd_retransmits = 3;
    });
    let mut at = t0 + dpd;
    r.handle_timeout(at);
    let first = r.poll_transmit().expect("a liveness check").bytes;
    for _ in 0..3 {
        assert_eq!(r.poll_timeout(), Some(at + DPD_RETRANSMIT));
        r.handle_timeout(at + DPD_RETRANSMIT - Duration::from_millis(1));
        assert!(r.poll_transmit().is_none(), "retransmitted too early");
        at += DPD_RETRANSMIT;
        r.handle_timeout(at);
        let again = r.poll_transmit().expect("a retransmission").bytes;
        assert_eq!(again, first, "a retransmission repeats the request (§2.1)");
        assert_eq!(r.ike_sas(at).len(), 1);
    }
    at += DPD_RETRANSMIT;
    r.handle_timeout(at);
    assert!(r.poll_transmit().is_none());
    assert_all_torn_down(&mut r, &pair, at);
}

/// Input dropped by gate64 itself (the driver's sockets overflowed) while a liveness check
/// was outstanding: the check gets more retransmissions instead of its peer being declared
/// dead, one at a time and at most `OVERFLOW_EXTENSIONS`; a client that answers one keeps
/// its SAs.
#[test]
fn overflow_while_a_check_is_outstanding_extends_it_and_an_answer_keeps_the_sas() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let dpd = Duration::from_secs(30);
    let (mut r, mut i, _pair) = established_pair(&lab, t0, |c| {
        c.dpd = dpd;
        c.dpd_retransmits = 2;
    });
    let mut at = t0 + dpd;
    r.handle_timeout(at);
    let first = r.poll_transmit().expect("a liveness check").bytes;
    // Drops reported before the check went out say nothing about its answer.
    r.note_input_overflow(at - Duration::from_secs(1));
    for _ in 0..2 {
        at += DPD_RETRANSMIT;
        r.handle_timeout(at);
        assert!(r.poll_transmit().is_some(), "a retransmission");
    }
    r.note_input_overflow(at);
    // Out of ordinary retransmissions: the drops since the check went out extend it.
    at += DPD_RETRANSMIT;
    r.handle_timeout(at);
    let again = r.poll_transmit().expect("an extra retransmission").bytes;
    assert_eq!(again, first);
    assert!(events(&mut r).is_empty(), "nothing goes down");
    assert_eq!(r.stats().liveness_extended, 1);
    // The client's answer to it arrives: the SAs stay, nothing more is sent.
    i.handle(at, &again);
    let (local, remote, answer) = i.poll_transmit().expect("the client answers");
    r.handle(at, remote, local, &answer);
    r.handle_timeout(at + DPD_RETRANSMIT * 5);
    assert!(r.poll_transmit().is_none());
    assert!(events(&mut r).is_empty());
    assert_eq!(r.ike_sas(at).len(), 1);
}

/// The extension is bounded: a peer that is really gone is still declared dead while drops
/// go on, `OVERFLOW_EXTENSIONS` retransmissions later; without drops it goes on time.
#[test]
fn overflow_extensions_are_bounded_and_a_dead_peer_still_goes() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let dpd = Duration::from_secs(30);
    for overflowing in [false, true] {
        let (mut r, _i, pair) = established_pair(&lab, t0, |c| {
            c.dpd = dpd;
            c.dpd_retransmits = 2;
        });
        let mut at = t0 + dpd;
        r.handle_timeout(at);
        assert!(r.poll_transmit().is_some(), "a liveness check");
        let extra = if overflowing { OVERFLOW_EXTENSIONS } else { 0 };
        for _ in 0..2 + extra {
            if overflowing {
                r.note_input_overflow(at + Duration::from_secs(1));
            }
            at += DPD_RETRANSMIT;
            r.handle_timeout(at);
            assert!(r.poll_transmit().is_some(), "a retransmission");
            assert_eq!(r.ike_sas(at).len(), 1);
        }
        if overflowing {
            r.note_input_overflow(at);
        }
        at += DPD_RETRANSMIT;
        r.handle_timeout(at);
        assert!(
            r.poll_transmit().is_none(),
            "no retransmission past the bound"
        );
        assert_all_torn_down(&mut r, &pair, at);
        assert_eq!(r.stats().liveness_extended, u64::from(extra));
    }
}

/// RFC 7296 §2.8: the client rekeys child SAs; one it leaves past the soft lifetime is
/// counted, and at the hard lifetime (10% later) gate64 deletes it and says so with a
/// Delete payload naming its inbound SPI (§1.4.1). The IKE SA stays.
#[test]
fn rfc7296_2_8_child_sa_past_its_hard_lifetime_is_deleted() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let (mut r, mut i, pair) = established_pair(&lab, t0, |c| {
        c.child_lifetime = Duration::from_secs(100);
        c.dpd = Duration::from_secs(10_000);
    });
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(100)));
    r.handle_timeout(t0 + Duration::from_secs(100));
    assert!(r.poll_transmit().is_none() && events(&mut r).is_empty());
    assert_eq!(r.stats().children_past_soft_lifetime, 1);
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(110)));
    let at = t0 + Duration::from_secs(110);
    r.handle_timeout(at);
    assert_eq!(
        events(&mut r),
        [Event::ChildSaDown {
            inbound_spi: pair.inbound.spi
        }]
    );
    let delete = r.poll_transmit().expect("a Delete request");
    let sa = r.sas.values().next().expect("the IKE SA stays");
    let (_, inner) = keys::open_message(&delete.bytes, &sa.keys.sk_er).unwrap();
    assert!(
        matches!(&inner[..], [Payload::Delete(d)]
            if d.protocol == transform::PROTO_ESP
                && d.spis == [pair.inbound.spi.to_be_bytes().to_vec()]),
        "{inner:?}"
    );
    i.handle(at, &delete.bytes);
    let (local, remote, answer) = i.poll_transmit().expect("the client answers");
    r.handle(at, remote, local, &answer);
    r.handle_timeout(at + DPD_RETRANSMIT * 5);
    assert!(r.poll_transmit().is_none(), "answered: no retransmission");
    let sas = r.ike_sas(at);
    assert_eq!((sas.len(), sas[0].child_spis.len()), (1, 0));
    assert_eq!(r.stats().children_expired, 1);
}

/// RFC 7296 §1.4.1: at shutdown every established IKE SA is deleted with a Delete payload
/// the client accepts (it tears the IKE SA down), and the driver sees the downs.
#[test]
fn shutdown_deletes_every_ike_sa() {
    let lab = Lab::new();
    let t0 = Instant::now();
    let (mut r, mut i, pair) = established_pair(&lab, t0, |_| {});
    r.shutdown();
    let delete = r.poll_transmit().expect("a Delete");
    let ev = events(&mut r);
    assert!(ev.contains(&Event::ChildSaDown {
        inbound_spi: pair.inbound.spi
    }));
    assert!(ev.iter().any(|e| matches!(e, Event::IkeSaDown { .. })));
    assert!(r.ike_sas(t0).is_empty());
    i.handle(t0, &delete.bytes);
    assert!(
        std::iter::from_fn(|| i.poll_event()).any(|e| matches!(e, InitiatorEvent::Failed(_))),
        "the client takes the Delete"
    );
}

mod auth_jobs;
mod bounds;
mod caps;
mod cert_authz;
mod eap;
mod esp_suites;
mod identity;
mod init_jobs;
mod integrity_only;
mod ipv4;
mod liveness_cap;
mod mid_sync;
mod mobike;
mod own_auth;
mod proposals;
mod qcd;
mod reauth;
mod reload;
mod retransmit;
mod revocation;
mod rsa;
mod second_auth;
mod sync;
mod takeover;
mod tunnel_rules;

/// `gate64 disconnect`: by identity (any case), by SPI, or all; each removed IKE SA's client
/// is sent a Delete of the IKE SA, and its child SAs go down with it.
#[test]
fn disconnect_sends_a_delete_and_removes_the_sas_it_names() {
    use super::DisconnectTarget;
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, pair) = established_pair(&lab, now, |_| {});
    assert!(
        r.disconnect(now, &DisconnectTarget::Identity("CN=nobody".into()))
            .is_empty()
    );
    assert!(
        r.disconnect(now, &DisconnectTarget::IkeSpi(0x1234))
            .is_empty()
    );
    assert_eq!(r.established(), 1);
    let removed = r.disconnect(
        now,
        &DisconnectTarget::Identity("cn=CLIENT1.gate64.lab".into()),
    );
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].child_spis, vec![pair.inbound.spi]);
    let delete = r.poll_transmit().expect("a Delete to the client");
    let payloads = keys::open_message(&delete.bytes, &i.keys.clone().expect("keys").sk_er)
        .expect("opens")
        .1;
    assert!(
        matches!(payloads.as_slice(), [Payload::Delete(d)] if d.protocol == transform::PROTO_IKE),
        "{payloads:?}"
    );
    // The client is told its IKE SA was deleted, as such (not as an error notify).
    i.handle(now, &delete.bytes);
    assert!(
        matches!(
            i.poll_event(),
            Some(InitiatorEvent::Failed(
                crate::initiator::InitiatorError::Deleted
            ))
        ),
        "the initiator reports the Delete"
    );
    let ended = Event::IkeSaEnded {
        spi_r: removed[0].spi_r,
        reason: EndReason::Administrator,
    };
    assert_eq!(
        r.events.iter().filter(|e| **e == ended).count(),
        1,
        "the end is reported with its reason: {:?}",
        r.events
    );
    assert_all_torn_down(&mut r, &pair, now);

    let (mut r, _, _) = established_pair(&lab, now, |_| {});
    let spi = r.ike_sas(now)[0].spi_r;
    assert_eq!(r.disconnect(now, &DisconnectTarget::IkeSpi(spi)).len(), 1);
    let (mut r, _, _) = established_pair(&lab, now, |_| {});
    assert_eq!(r.disconnect(now, &DisconnectTarget::All).len(), 1);
    assert_eq!(r.established(), 0);
}
