//! The caps on IKE state: IKE SAs in all, per identity, child SAs per IKE SA; half-open SAs
//! per /64 and per Teredo mapping, and the bytes they hold.

use super::*;

fn ecp256_init(spi: u64) -> Vec<u8> {
    let mut t = gcm_prf();
    t.push(Transform::new(transform::KE, 19));
    raw_init(spi, t, 19, 64)
}

/// Sends one IKE_SA_INIT per source; returns how many were answered.
fn inits_from(r: &mut Responder, now: Instant, sources: &[&str]) -> usize {
    for (spi, source) in (1u64..).zip(sources) {
        r.handle(now, addr(SERVER), addr(source), &ecp256_init(spi));
    }
    std::iter::from_fn(|| r.poll_transmit()).count()
}

fn refused(ev: &[Event], reason: Refusal) -> usize {
    ev.iter()
        .filter(|e| matches!(e, Event::Refused { reason: why, .. } if *why == reason))
        .count()
}

#[test]
fn max_ike_sas_refuses_ike_sa_init_beyond_it() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |c| c.max_ike_sas = 2);
    let sources = [
        "[2001:db8:1::1]:500",
        "[2001:db8:2::1]:500",
        "[2001:db8:3::1]:500",
    ];
    assert_eq!(inits_from(&mut r, now, &sources), 2);
    assert_eq!(refused(&events(&mut r), Refusal::IkeSaCap), 1);
    assert_eq!(Refusal::IkeSaCap.label(), "ike_sa_cap");
}

/// An IP-HTTPS client owns a /64: rotating addresses inside it does not get it more half-open
/// IKE SAs; another /64 is another source.
#[test]
fn half_open_cap_counts_an_ipv6_64_as_one_source() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |c| c.max_half_open_per_source = 2);
    let same_64 = [
        "[2001:db8:1:2::1]:500",
        "[2001:db8:1:2::2]:500",
        "[2001:db8:1:2:ffff::3]:4500",
    ];
    assert_eq!(inits_from(&mut r, now, &same_64), 2);
    assert_eq!(refused(&events(&mut r), Refusal::HalfOpenCap), 1);
    assert_eq!(inits_from(&mut r, now, &["[2001:db8:1:3::1]:500"]), 1);
}

/// RFC 4380 §4: a Teredo address embeds the client's NAT mapping; other server or flag bits
/// with the same mapping are the same source, another mapping (port) is another.
#[test]
fn half_open_cap_counts_a_teredo_mapping_as_one_source() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |c| c.max_half_open_per_source = 2);
    let same_mapping = [
        "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:500",
        "[2001:0:c000:201:1234:63bf:3fff:fdd2]:500",
        "[2001:0:c000:202:0:63bf:3fff:fdd2]:500",
    ];
    assert_eq!(inits_from(&mut r, now, &same_mapping), 2);
    assert_eq!(refused(&events(&mut r), Refusal::HalfOpenCap), 1);
    let other_port = "[2001:0:4136:e378:8000:63be:3fff:fdd2]:500";
    assert_eq!(inits_from(&mut r, now, &[other_port]), 1);
}

/// The bytes half-open SAs hold are budgeted: beyond `max_half_open_bytes` IKE_SA_INIT is
/// refused; the budget comes back when they time out or are established.
#[test]
fn half_open_bytes_budget_refuses_new_sas_and_comes_back() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| c.max_half_open_bytes = 2_500);
    let sources = ["[2001:db8:1::1]:500", "[2001:db8:2::1]:500"];
    assert_eq!(inits_from(&mut r, now, &sources), 1);
    assert!(r.half_open.bytes() > half_open::FIXED_BYTES);
    assert!(r.half_open.bytes() <= 2_500, "{}", r.half_open.bytes());
    assert_eq!(refused(&events(&mut r), Refusal::HalfOpenBytes), 1);
    assert_eq!(Refusal::HalfOpenBytes.label(), "half_open_bytes");
    r.handle_timeout(now + Duration::from_secs(31));
    assert_eq!((r.half_open(), r.half_open.bytes()), (0, 0));
    // A whole handshake fits, and leaves nothing charged once established.
    let mut i = lab.intranet(now);
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    established(&mut i);
    assert_eq!((r.half_open(), r.half_open.bytes()), (0, 0));
}

fn client(lab: &Lab, now: Instant, tunnel: TunnelKind) -> Initiator {
    let tsr = match tunnel {
        TunnelKind::Infrastructure => "fd00:c0::53/128",
        _ => "fd00:c0::/64",
    };
    lab.initiator(now, tunnel, tsr, &lab.clients_ca, Group::Ecp256)
}

/// One identity holds at most `max_ike_sas_per_identity` IKE SAs; refused before we sign,
/// with AUTHENTICATION_FAILED. A restart (INITIAL_CONTACT on the same tunnel) replaces its
/// old SA and is not refused.
#[test]
fn max_ike_sas_per_identity_refuses_one_more_but_not_a_restart() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |c| c.max_ike_sas_per_identity = 1);
    let mut first = client(&lab, now, TunnelKind::Intranet);
    first.start(now);
    exchange_all(&mut r, &mut first, now);
    established(&mut first);
    let mut restarted = client(&lab, now, TunnelKind::Intranet);
    restarted.start(now);
    exchange_all(&mut r, &mut restarted, now);
    established(&mut restarted);
    assert_eq!(r.established(), 1, "the restart replaced the old SA");
    let _ = events(&mut r);
    let mut other = client(&lab, now, TunnelKind::Infrastructure);
    other.start(now);
    exchange_all(&mut r, &mut other, now);
    assert!(matches!(
        other.poll_event(),
        Some(InitiatorEvent::Failed(
            crate::initiator::InitiatorError::Notify(notify::AUTHENTICATION_FAILED)
        ))
    ));
    assert!(events(&mut r).iter().any(|e| matches!(
        e,
        Event::Negotiation {
            result: Err(Refusal::IdentityCap),
            ..
        }
    )));
    assert_eq!((r.established(), r.half_open()), (1, 0));
    assert_eq!(Refusal::IdentityCap.label(), "identity_cap");
}

/// RFC 7296 §3.10.1: beyond `max_child_sas_per_ike_sa`, CREATE_CHILD_SA gets
/// NO_ADDITIONAL_SAS and nothing is built.
#[test]
fn max_child_sas_per_ike_sa_answers_no_additional_sas() {
    let lab = Lab::new();
    let now = Instant::now();
    let (mut r, mut i, old) = established_pair(&lab, now, |c| c.max_child_sas_per_ike_sa = 1);
    let tsi = vec![TrafficSelector::range(old.peer.inner[0], old.peer.inner[0])];
    let tsr = vec![TrafficSelector::range(
        "fd00:c0::".parse().expect("a"),
        "fd00:c0::ffff".parse().expect("a"),
    )];
    let payloads = [
        esp_proposal(0x5000, None),
        Payload::Nonce(vec![4; 32]),
        Payload::TsI(tsi),
        Payload::TsR(tsr),
    ];
    let req = request(&mut i, exchange::CREATE_CHILD_SA, &payloads);
    r.handle(now, addr(SERVER), addr(CLIENT), &req);
    let answer = open_response(&i, &r.poll_transmit().expect("answer"));
    assert!(
        matches!(answer.as_slice(), [Payload::Notify(n)] if n.kind == notify::NO_ADDITIONAL_SAS),
        "{answer:?}"
    );
    let ev = events(&mut r);
    assert!(child_ups(&ev).is_empty());
    assert_eq!(refused(&ev, Refusal::ChildSaCap), 1);
    assert_eq!(r.ike_sas(now)[0].child_spis, vec![old.inbound.spi]);
}

/// RFC 7383 fragments of an IKE_AUTH count against `max_half_open_bytes` while they wait:
/// beyond it a fragment is refused (and the rest never completes the request); the bytes
/// held come back when the SA goes.
#[test]
fn rfc7383_fragments_count_against_the_half_open_bytes() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut i = client(&lab, now, TunnelKind::Intranet);
    i.start(now);
    let (l, rem, init) = i.poll_transmit().expect("IKE_SA_INIT");
    r.handle(now, rem, l, &init);
    i.handle(now, &r.poll_transmit().expect("reply").bytes);
    let (_, _, auth) = i.poll_transmit().expect("IKE_AUTH");
    let keys = i.keys.clone().expect("keys");
    let (header, inner) = keys::open_message(&auth, &keys.sk_ei).expect("own request");
    let fragments = keys::seal_fragments(&header, &inner, &keys.sk_ei, 300).expect("fragments");
    let before = r.half_open.bytes();
    // Room for one of the (at most 300-byte) fragments, not two.
    assert!(fragments.len() > 2);
    r.config.max_half_open_bytes = before + 300;
    let _ = events(&mut r);
    for f in fragments.iter().skip(1) {
        r.handle(now, rem, l, f);
    }
    assert!(r.half_open.bytes() > before, "fragments are counted");
    assert!(
        r.half_open.bytes() <= before + 300,
        "{}",
        r.half_open.bytes()
    );
    assert!(refused(&events(&mut r), Refusal::HalfOpenBytes) > 0);
    r.handle(now, rem, l, &fragments[0]);
    assert_eq!(
        r.established(),
        0,
        "a refused fragment leaves the request incomplete"
    );
    r.handle_timeout(now + Duration::from_secs(31));
    assert_eq!((r.half_open(), r.half_open.bytes()), (0, 0));
}

/// The Teredo address of mapping `192.0.2.45:port` (RFC 4380 §4: port and IPv4 inverted).
fn teredo_of_port(port: u16) -> String {
    let p = !port;
    format!("[2001:0:4136:e378:8000:{p:x}:3fff:fdd2]:500")
}

/// One host behind one public IPv4 address opens a Teredo mapping per port: 200 ports of it
/// get no more half-open IKE SAs than the per-host cap, and a client of another address
/// still gets in.
#[test]
fn half_open_host_cap_bounds_all_teredo_ports_of_one_ipv4() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |c| c.max_half_open_per_source = 2);
    let host_cap = 2 * super::half_open::HOST_SHARE;
    let ports: Vec<String> = (40_000..40_200).map(teredo_of_port).collect();
    let ports: Vec<&str> = ports.iter().map(String::as_str).collect();
    assert_eq!(inits_from(&mut r, now, &ports), host_cap);
    assert_eq!(
        refused(&events(&mut r), Refusal::HalfOpenHostCap),
        200 - host_cap
    );
    assert_eq!(Refusal::HalfOpenHostCap.label(), "half_open_host_cap");
    // Another public IPv4 address (198.51.100.7 → inverted 39cc:9bf8).
    let other = "[2001:0:4136:e378:8000:63bf:39cc:9bf8]:500";
    assert_eq!(inits_from(&mut r, now, &[other]), 1);
}

/// A native IPv6 site: its /64s are sources of their own, its /48 a host.
#[test]
fn half_open_host_cap_bounds_the_64s_of_one_48() {
    let now = Instant::now();
    let mut r = Lab::new().responder(now, |c| c.max_half_open_per_source = 2);
    let host_cap = 2 * super::half_open::HOST_SHARE;
    let nets: Vec<String> = (1..=50)
        .map(|n| format!("[2001:db8:1:{n:x}::1]:500"))
        .collect();
    let nets: Vec<&str> = nets.iter().map(String::as_str).collect();
    assert_eq!(inits_from(&mut r, now, &nets), host_cap);
    assert_eq!(
        refused(&events(&mut r), Refusal::HalfOpenHostCap),
        50 - host_cap
    );
    assert_eq!(inits_from(&mut r, now, &["[2001:db8:2:1::1]:500"]), 1);
}
