//! IPv4 inside the tunnels (`[ipsec] pool4`): a client whose CFG_REQUEST asks for
//! INTERNAL_IP4_ADDRESS gets an IPv4 lease beside its IPv6 one, its selectors narrowed in
//! both families; a client that does not ask gets no IPv4 and no IPv4 selectors.

use std::net::Ipv4Addr;

use super::*;
use crate::message::{CfgAttribute, Configuration, cfg};

const POOL4: &str = "10.77.0.0/29";
const CORP4: &str = "10.1.0.0/16";
const DNS4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 53);

fn any4() -> TrafficSelector {
    TrafficSelector::range(
        "0.0.0.0".parse().expect("any"),
        "255.255.255.255".parse().expect("all"),
    )
}

fn any6() -> TrafficSelector {
    TrafficSelector::range(
        "::".parse().expect("any"),
        IpAddr::V6(Ipv6Addr::from(u128::MAX)),
    )
}

fn with_ipv4(c: &mut ResponderConfig) {
    c.pool4 = Some(POOL4.parse().expect("pool4"));
    c.intranet_prefixes.push(CORP4.parse().expect("prefix"));
    c.dns4 = vec![DNS4];
}

/// A client of the lab's clients CA proposing `tsi` and `tsr` for `tunnel` and asking for an
/// inner address (of each family its TSi covers).
fn client(
    lab: &Lab,
    now: Instant,
    tunnel: TunnelKind,
    tsi: Vec<TrafficSelector>,
    tsr: Vec<TrafficSelector>,
) -> Initiator {
    let (chain, key) = leaf(&lab.clients_ca, "client1.gate64.lab");
    let config = InitiatorConfig {
        credentials: Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("creds"),
        anchors: TrustAnchors::from_pem(lab.servers_ca.pem.as_bytes()).expect("servers CA"),
        group: Group::Ecp256,
        request_address: true,
        tsi,
        tsr,
        tunnel,
        retransmit_after: Duration::from_secs(2),
        max_retransmits: 3,
        integrity_only: false,
    };
    Initiator::new(config, now, SystemTime::now(), addr(CLIENT), addr(SERVER)).expect("initiator")
}

/// The CP payload of the responder's IKE_AUTH response among `sent`.
fn cp_reply(i: &Initiator, sent: &[Transmit]) -> Configuration {
    let keys = i.keys.clone().expect("keys");
    sent.iter()
        .filter_map(|t| keys::open_message(&t.bytes, &keys.sk_er).ok())
        .flat_map(|(_, payloads)| payloads)
        .find_map(|p| match p {
            Payload::Cp(c) => Some(c),
            _ => None,
        })
        .expect("a CP reply")
}

/// An intranet client proposing `tsi` and `tsr` to a responder with `edit` applied, run
/// through IKE_AUTH: the responder, the client and the responder's CP reply.
struct Intranet {
    r: Responder,
    i: Initiator,
    cp: Configuration,
    now: Instant,
}

fn intranet(
    edit: impl FnOnce(&mut ResponderConfig),
    tsi: Vec<TrafficSelector>,
    tsr: Vec<TrafficSelector>,
) -> Intranet {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, edit);
    let mut i = client(&lab, now, TunnelKind::Intranet, tsi, tsr);
    i.start(now);
    let sent = exchange_all(&mut r, &mut i, now);
    let cp = cp_reply(&i, &sent);
    Intranet { r, i, cp, now }
}

/// The client of `run` is established with IPv6 alone: the CP reply names no IPv4 address
/// nor IPv4 DNS server, the child SA's inner addresses and TSr are IPv6. Returns the child
/// SA.
fn ipv6_only(run: &mut Intranet) -> ChildSaPair {
    assert!(values(&run.cp, cfg::INTERNAL_IP4_ADDRESS).is_empty());
    assert!(values(&run.cp, cfg::INTERNAL_IP4_DNS).is_empty());
    established(&mut run.i);
    let ev = events(&mut run.r);
    let pair = child_ups(&ev)[0].clone();
    assert!(pair.peer.inner.iter().all(IpAddr::is_ipv6));
    assert!(pair.inbound.local_ts.iter().all(|s| s.start.is_ipv6()));
    pair
}

fn values(c: &Configuration, kind: u16) -> Vec<Vec<u8>> {
    c.attributes
        .iter()
        .filter(|a| a.kind == kind)
        .map(|a| a.value.clone())
        .collect()
}

fn ranges(list: &[gate64_esp::Selector]) -> Vec<(IpAddr, IpAddr)> {
    list.iter().map(|s| (s.start, s.end)).collect()
}

/// `0.0.0.0/0` and `::/0` both ways: an address of each family, TSi narrowed to both, TSr to
/// the tunnel's prefixes of both families; the CP reply carries the IPv4 address and DNS
/// server; the child SA is found for both families' destinations.
#[test]
fn a_client_proposing_both_families_gets_both_narrowed() {
    let Intranet {
        mut r,
        mut i,
        cp,
        now,
        ..
    } = intranet(with_ipv4, vec![any4(), any6()], vec![any4(), any6()]);
    let leased4 = Ipv4Addr::new(10, 77, 0, 1);
    assert_eq!(
        values(&cp, cfg::INTERNAL_IP4_ADDRESS),
        [leased4.octets().to_vec()]
    );
    assert_eq!(values(&cp, cfg::INTERNAL_IP4_DNS), [DNS4.octets().to_vec()]);
    let (inner, _) = established(&mut i);
    let inner6: IpAddr = "fd00:c1::102".parse().expect("addr");
    assert_eq!(inner, Some(inner6));

    let ev = events(&mut r);
    let ups = child_ups(&ev);
    assert_eq!(ups.len(), 1);
    let pair = ups[0];
    assert_eq!(pair.peer.inner, [inner6, IpAddr::V4(leased4)]);
    assert_eq!(
        ranges(&pair.inbound.remote_ts),
        [(inner6, inner6), (IpAddr::V4(leased4), IpAddr::V4(leased4))],
        "TSi narrowed to each inner address"
    );
    assert_eq!(
        ranges(&pair.inbound.local_ts),
        [
            (
                "10.1.0.0".parse().expect("addr"),
                "10.1.255.255".parse().expect("addr")
            ),
            (
                "fd00:c0::".parse().expect("addr"),
                "fd00:c0::ffff:ffff:ffff:ffff".parse().expect("addr")
            ),
        ],
        "TSr narrowed into the tunnel's prefixes of both families"
    );
    let sadb = gate64_esp::SaDb::new();
    sadb.install(pair.clone()).expect("installs");
    let corp4: IpAddr = "10.1.2.3".parse().expect("addr");
    assert!(sadb.outbound_for(IpAddr::V4(leased4), corp4).is_some());
    assert!(
        sadb.outbound_for(IpAddr::V4(leased4), "10.2.0.1".parse().expect("addr"))
            .is_none(),
        "outside the tunnel's IPv4 prefixes"
    );
    assert!(
        sadb.outbound_for(inner6, "fd00:c0::9".parse().expect("addr"))
            .is_some()
    );
    let sas = r.ike_sas(now);
    assert_eq!((sas[0].inner, sas[0].inner4), (Some(inner6), Some(leased4)));
}

/// A client whose TSi covers only IPv6 asks for no IPv4 address: it gets none, and the IPv4
/// part of its TSr is dropped.
#[test]
fn a_client_asking_no_ipv4_gets_none_and_no_ipv4_selectors() {
    let mut run = intranet(with_ipv4, vec![any6()], vec![any4(), any6()]);
    ipv6_only(&mut run);
    assert_eq!(run.r.pool4.as_ref().map(AddressPool4::leased), Some(0));
    assert_eq!(run.r.ike_sas(run.now)[0].inner4, None);
}

/// Without `pool4` a client that asks for IPv4 gets none: no address, no IPv4 selectors.
#[test]
fn without_pool4_nobody_gets_ipv4() {
    let mut run = intranet(
        |c| {
            c.intranet_prefixes.push(CORP4.parse().expect("prefix"));
            c.dns4 = vec![DNS4];
        },
        vec![any4(), any6()],
        vec![any4(), any6()],
    );
    let pair = ipv6_only(&mut run);
    assert!(pair.inbound.remote_ts.iter().all(|s| s.start.is_ipv6()));
}

/// A client asking only for IPv4 selectors it has no address for is refused
/// (TS_UNACCEPTABLE), and holds no lease afterwards.
#[test]
fn ipv4_only_selectors_without_an_ipv4_address_are_unacceptable() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| {
        c.intranet_prefixes.push(CORP4.parse().expect("prefix"));
    });
    let mut i = client(&lab, now, TunnelKind::Intranet, vec![any6()], vec![any4()]);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    assert!(child_ups(&events(&mut r)).is_empty());
    assert_eq!(r.pool.leased(), 0);
}

/// Both tunnels of one identity share one IPv4 address; it returns to the pool when the
/// last IKE SA goes.
#[test]
fn one_ipv4_lease_per_identity_freed_with_the_last_ike_sa() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, with_ipv4);
    let mut infra = client(
        &lab,
        now,
        TunnelKind::Infrastructure,
        vec![any4(), any6()],
        vec![TrafficSelector::range(
            "fd00:c0::53".parse().expect("addr"),
            "fd00:c0::53".parse().expect("addr"),
        )],
    );
    let mut intra = client(
        &lab,
        now,
        TunnelKind::Intranet,
        vec![any4(), any6()],
        vec![any4(), any6()],
    );
    infra.start(now);
    exchange_all(&mut r, &mut infra, now);
    intra.start(now);
    exchange_all(&mut r, &mut intra, now);
    established(&mut infra);
    established(&mut intra);
    let ev = events(&mut r);
    let ups = child_ups(&ev);
    assert_eq!(ups.len(), 2);
    assert!(
        ups[0].inbound.remote_ts.iter().all(|s| s.start.is_ipv6()),
        "no IPv4 TSr in the infrastructure tunnel, so no IPv4 TSi either"
    );
    let pool4 = |r: &Responder| r.pool4.as_ref().map(AddressPool4::leased);
    assert_eq!(pool4(&r), Some(1));
    let sas = r.ike_sas(now);
    assert!(
        sas.iter()
            .all(|s| s.inner4 == Some(Ipv4Addr::new(10, 77, 0, 1)))
    );
    r.remove_sa(sas[0].spi_r);
    assert_eq!(pool4(&r), Some(1), "the other IKE SA still holds it");
    r.remove_sa(sas[1].spi_r);
    assert_eq!(pool4(&r), Some(0));
}

/// INTERNAL_IP4_SUBNET lists the tunnel's IPv4 prefixes as address and netmask, only for a
/// client with an IPv4 address.
#[test]
fn cfg_reply_lists_ipv4_subnets_with_netmasks_for_an_ipv4_client() {
    let lab = Lab::new();
    let r = lab.responder(Instant::now(), with_ipv4);
    let ask = Configuration {
        kind: cfg::REQUEST,
        attributes: [cfg::INTERNAL_IP4_ADDRESS, cfg::INTERNAL_IP4_SUBNET]
            .into_iter()
            .map(|kind| CfgAttribute {
                kind,
                value: Vec::new(),
            })
            .collect(),
    };
    let leased4 = Ipv4Addr::new(10, 77, 0, 3);
    let Some(Payload::Cp(c)) =
        cp::cfg_reply(&ask, (None, Some(leased4)), TunnelKind::Intranet, &r.config)
    else {
        panic!("a CP reply");
    };
    assert_eq!(
        values(&c, cfg::INTERNAL_IP4_SUBNET),
        [vec![10, 1, 0, 0, 255, 255, 0, 0]]
    );
    assert_eq!(
        values(&c, cfg::INTERNAL_IP4_ADDRESS),
        [leased4.octets().to_vec()]
    );
    assert_eq!(
        cp::cfg_reply(&ask, (None, None), TunnelKind::Intranet, &r.config),
        None,
        "no IPv4 lease, nothing IPv4 to say"
    );
}
