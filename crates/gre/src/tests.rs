use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 2));
const C: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 3));

fn tunnel(
    name: &str,
    local: IpAddr,
    remote: IpAddr,
    key: Option<u32>,
    tenant: usize,
) -> TunnelConfig {
    TunnelConfig {
        name: name.into(),
        local,
        remote,
        key,
        tenant: TenantId(tenant),
        routes: vec![
            "172.16.0.0/24".parse().unwrap(),
            "2001:db8:16::/48".parse().unwrap(),
        ],
        send_checksum: false,
        send_sequence: false,
        keepalive: None,
    }
}

fn site2(now: Instant) -> Gre {
    Gre::new(vec![tunnel("site2", A, B, Some(42), 0)], now).unwrap()
}

/// An IPv4 ICMP echo 172.16.0.5 → 10.64.0.5 with `ttl`, 28 bytes.
fn inner_v4(ttl: u8) -> Vec<u8> {
    let mut b = vec![0u8; 28];
    ipv4::Repr {
        src: Ipv4Addr::new(172, 16, 0, 5),
        dst: Ipv4Addr::new(10, 64, 0, 5),
        protocol: 1,
        payload_len: 8,
        ttl,
        tos: 0,
        ident: 1,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    }
    .emit(&mut b)
    .unwrap();
    b[20] = 8;
    b
}

fn inner_v6(hop_limit: u8) -> Vec<u8> {
    let mut b = vec![0u8; 48];
    ipv6::Repr {
        src: "2001:db8:16::5".parse().unwrap(),
        dst: "2001:db8:64::5".parse().unwrap(),
        next_header: 58,
        payload_len: 8,
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut b)
    .unwrap();
    b
}

fn wrap(repr: gre::Repr, inner: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; repr.header_len() + inner.len()];
    let n = repr.emit(&mut b).unwrap();
    b[n..].copy_from_slice(inner);
    gre::fill_checksum(&mut b).unwrap();
    b
}

fn keyed(key: Option<u32>, protocol_type: u16, inner: &[u8]) -> Vec<u8> {
    wrap(
        gre::Repr {
            protocol_type,
            checksum: false,
            key,
            sequence: None,
        },
        inner,
    )
}

#[test]
fn decap_finds_the_tunnel_and_the_inner_packet_both_families() {
    let mut g = site2(Instant::now());
    let v4 = inner_v4(64);
    let d = g
        .decap(B, A, &keyed(Some(42), gre::PROTO_IPV4, &v4))
        .unwrap();
    assert_eq!(
        (d.tunnel, d.tenant, d.inner),
        (TunnelId(0), TenantId(0), Inner::Ipv4)
    );
    assert_eq!(d.range, 8..8 + v4.len());
    let v6 = inner_v6(64);
    // Trailing padding after the inner packet is not forwarded.
    let mut padded = keyed(Some(42), gre::PROTO_IPV6, &v6);
    padded.extend_from_slice(&[0; 6]);
    let d = g.decap(B, A, &padded).unwrap();
    assert_eq!((d.inner, d.range), (Inner::Ipv6, 8..8 + v6.len()));
    let (_, _, stats) = g.tunnels().next().unwrap();
    assert_eq!(
        stats.rx_packets.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

#[test]
fn ipv6_delivery_rfc7676() {
    let l: IpAddr = "2001:db8::1".parse::<Ipv6Addr>().unwrap().into();
    let r: IpAddr = "2001:db8::2".parse::<Ipv6Addr>().unwrap().into();
    let mut g = Gre::new(vec![tunnel("v6", l, r, None, 0)], Instant::now()).unwrap();
    let d = g
        .decap(r, l, &keyed(None, gre::PROTO_IPV4, &inner_v4(9)))
        .unwrap();
    assert_eq!(d.inner, Inner::Ipv4);
}

fn drop_of(g: &mut Gre, src: IpAddr, bytes: &[u8]) -> DropReason {
    let reason = g.decap(src, A, bytes).unwrap_err();
    assert_eq!(g.drops().get(reason), 1, "counted once: {reason:?}");
    reason
}

#[test]
fn unknown_peer_and_bad_key_are_told_apart() {
    let now = Instant::now();
    let pkt = keyed(Some(42), gre::PROTO_IPV4, &inner_v4(64));
    assert_eq!(drop_of(&mut site2(now), C, &pkt), DropReason::UnknownPeer);
    let wrong = keyed(Some(43), gre::PROTO_IPV4, &inner_v4(64));
    assert_eq!(drop_of(&mut site2(now), B, &wrong), DropReason::BadKey);
    let missing = keyed(None, gre::PROTO_IPV4, &inner_v4(64));
    assert_eq!(drop_of(&mut site2(now), B, &missing), DropReason::BadKey);
    // To another local address of ours: not this tunnel.
    let mut g = site2(now);
    assert_eq!(g.decap(B, C, &pkt), Err(DropReason::UnknownPeer));
}

#[test]
fn rfc2784_discard_rules() {
    let now = Instant::now();
    let pkt = keyed(Some(42), gre::PROTO_IPV4, &inner_v4(64));
    assert_eq!(
        drop_of(&mut site2(now), B, &pkt[..6]),
        DropReason::Truncated
    );
    let mut v1 = pkt.clone();
    v1[1] |= 1;
    assert_eq!(drop_of(&mut site2(now), B, &v1), DropReason::BadVersion);
    let mut routing = pkt.clone();
    routing[0] |= 0x40;
    assert_eq!(drop_of(&mut site2(now), B, &routing), DropReason::Malformed);
    // Inner packet cut short, and Ethernet (not carried by an L3 tunnel).
    assert_eq!(
        drop_of(&mut site2(now), B, &pkt[..20]),
        DropReason::Truncated
    );
    let eth = keyed(Some(42), gre::PROTO_TRANSPARENT_ETHERNET, &inner_v4(64));
    assert_eq!(drop_of(&mut site2(now), B, &eth), DropReason::Malformed);
    let mut v4_as_v6 = inner_v4(64);
    v4_as_v6.resize(60, 0);
    let liar = keyed(Some(42), gre::PROTO_IPV6, &v4_as_v6);
    assert_eq!(drop_of(&mut site2(now), B, &liar), DropReason::Malformed);
}

#[test]
fn bad_checksum_is_dropped_good_one_passes() {
    let now = Instant::now();
    let r = gre::Repr {
        protocol_type: gre::PROTO_IPV4,
        checksum: true,
        key: Some(42),
        sequence: None,
    };
    let good = wrap(r, &inner_v4(64));
    assert!(site2(now).decap(B, A, &good).is_ok());
    let mut bad = good.clone();
    bad[4] ^= 0x55;
    assert_eq!(drop_of(&mut site2(now), B, &bad), DropReason::Checksum);
}

#[test]
fn inner_ttl_of_one_or_less_is_dropped() {
    let now = Instant::now();
    for ttl in [0, 1] {
        let v4 = keyed(Some(42), gre::PROTO_IPV4, &inner_v4(ttl));
        assert_eq!(drop_of(&mut site2(now), B, &v4), DropReason::Ttl);
        let v6 = keyed(Some(42), gre::PROTO_IPV6, &inner_v6(ttl));
        assert_eq!(drop_of(&mut site2(now), B, &v6), DropReason::Ttl);
    }
    assert!(
        site2(now)
            .decap(B, A, &keyed(Some(42), gre::PROTO_IPV4, &inner_v4(2)))
            .is_ok()
    );
}

fn sequenced(seq: u32) -> Vec<u8> {
    wrap(
        gre::Repr {
            protocol_type: gre::PROTO_IPV4,
            checksum: false,
            key: Some(42),
            sequence: Some(seq),
        },
        &inner_v4(64),
    )
}

/// RFC 2890 §2.2: in-order and gapped numbers pass, repeated and earlier ones do not.
#[test]
fn rfc2890_sequence_window_gaps_never_stall() {
    let mut g = site2(Instant::now());
    for seq in [5, 6, 100, 1 << 30] {
        assert!(g.decap(B, A, &sequenced(seq)).is_ok(), "{seq}");
    }
    assert_eq!(
        g.decap(B, A, &sequenced(1 << 30)),
        Err(DropReason::Sequence)
    );
    assert_eq!(g.decap(B, A, &sequenced(99)), Err(DropReason::Sequence));
    assert_eq!(g.drops().get(DropReason::Sequence), 2);
    // Wrap-around: u32::MAX then 0 are in order.
    let mut g = site2(Instant::now());
    assert!(g.decap(B, A, &sequenced(u32::MAX)).is_ok());
    assert!(g.decap(B, A, &sequenced(0)).is_ok());
}

#[test]
fn a_restarted_peer_counter_is_followed() {
    let mut g = site2(Instant::now());
    assert!(g.decap(B, A, &sequenced(1_000_000)).is_ok());
    let mut refused = 0;
    let mut seq = 0;
    while g.decap(B, A, &sequenced(seq)).is_err() {
        refused += 1;
        seq += 1;
        assert!(refused <= sequence::RESYNC_AFTER, "stalled");
    }
    assert_eq!(refused, sequence::RESYNC_AFTER);
    assert!(g.decap(B, A, &sequenced(seq + 1)).is_ok());
}

#[test]
fn encap_then_decap_round_trip_with_checksum_and_sequence() {
    let now = Instant::now();
    let mut cfg = tunnel("site2", A, B, Some(42), 0);
    cfg.send_checksum = true;
    cfg.send_sequence = true;
    let mut ours = Gre::new(vec![cfg.clone()], now).unwrap();
    let mut peer_cfg = cfg;
    (peer_cfg.local, peer_cfg.remote) = (B, A);
    let mut peer = Gre::new(vec![peer_cfg], now).unwrap();
    let v4 = inner_v4(64);
    for _ in 0..3 {
        let mut buf = vec![0u8; 64 + v4.len()];
        buf[64..].copy_from_slice(&v4);
        let at = ours
            .encap(TunnelId(0), &mut buf, 64, 64 + v4.len())
            .unwrap();
        assert_eq!(at, 64 - 16);
        let d = peer.decap(A, B, &buf[at..]).unwrap();
        assert_eq!(&buf[at..][d.range], &v4[..]);
    }
    let mut tight = vec![0u8; 8 + v4.len()];
    tight[8..].copy_from_slice(&v4);
    assert_eq!(
        ours.encap(TunnelId(0), &mut tight, 8, 8 + v4.len()),
        Err(DropReason::NoRoom)
    );
    assert_eq!(ours.drops().get(DropReason::NoRoom), 1);
}

#[test]
fn two_tenants_may_route_the_same_prefix() {
    let now = Instant::now();
    let g = Gre::new(
        vec![
            tunnel("red", A, B, Some(1), 0),
            tunnel("blue", A, C, Some(2), 1),
        ],
        now,
    )
    .unwrap();
    let dst: IpAddr = "172.16.0.9".parse().unwrap();
    assert_eq!(g.route(TenantId(0), dst), Some(TunnelId(0)));
    assert_eq!(g.route(TenantId(1), dst), Some(TunnelId(1)));
    assert_eq!(g.route(TenantId(2), dst), None);
    assert_eq!(g.route(TenantId(0), "172.16.1.1".parse().unwrap()), None);
}

#[test]
fn longest_prefix_wins() {
    let mut r = Routes::default();
    r.insert(TenantId(0), "10.0.0.0/8".parse().unwrap(), TunnelId(0));
    r.insert(TenantId(0), "10.1.0.0/16".parse().unwrap(), TunnelId(1));
    assert_eq!(
        r.lookup(TenantId(0), "10.1.2.3".parse().unwrap()),
        Some(TunnelId(1))
    );
    assert_eq!(
        r.lookup(TenantId(0), "10.2.2.3".parse().unwrap()),
        Some(TunnelId(0))
    );
}

#[test]
fn table_refuses_duplicates_and_mixed_families() {
    let now = Instant::now();
    let dup = Gre::new(
        vec![tunnel("x", A, B, Some(1), 0), tunnel("y", A, B, Some(1), 1)],
        now,
    );
    assert_eq!(
        dup.err(),
        Some(TableError::Duplicate("x".into(), "y".into()))
    );
    let v6: IpAddr = "2001:db8::2".parse().unwrap();
    let mixed = Gre::new(vec![tunnel("z", A, v6, None, 0)], now);
    assert_eq!(mixed.err(), Some(TableError::FamilyMismatch("z".into())));
    // Same pair, different keys: two tunnels.
    assert!(
        Gre::new(
            vec![tunnel("x", A, B, Some(1), 0), tunnel("y", A, B, Some(2), 1)],
            now
        )
        .is_ok()
    );
}

fn with_keepalive(local: IpAddr, remote: IpAddr, now: Instant) -> Gre {
    let mut c = tunnel("site2", local, remote, Some(42), 0);
    c.keepalive = Some(Keepalive {
        interval: Duration::from_secs(10),
        retries: 3,
    });
    Gre::new(vec![c], now).unwrap()
}

/// Cisco's form end to end: our keepalive, decapsulated by a peer that only reflects it,
/// comes back as GRE type 0 and keeps the tunnel up; silence takes it down after `retries`.
#[test]
fn keepalive_state_machine() {
    let t0 = Instant::now();
    let mut ours = with_keepalive(A, B, t0);
    let mut peer = site2_reversed(t0);
    assert_eq!(ours.poll_timeout(), Some(t0 + Duration::from_secs(10)));
    assert!(ours.is_up(TunnelId(0)));
    let mut buf = [0u8; 128];
    assert_eq!(ours.poll_transmit(&mut buf), None);
    // Three keepalives unanswered: still up (Cisco: down after `retries` misses).
    for i in 1..=3u64 {
        ours.handle_timeout(t0 + Duration::from_secs(10 * i));
        assert!(ours.poll_transmit(&mut buf).is_some());
        assert!(ours.is_up(TunnelId(0)), "after {i}");
    }
    ours.handle_timeout(t0 + Duration::from_secs(40));
    assert!(!ours.is_up(TunnelId(0)));
    let (id, n) = ours.poll_transmit(&mut buf).unwrap();
    assert_eq!(id, TunnelId(0));
    // The peer reflects it: the reply's GRE bytes go back to us as they are.
    let d = peer.decap(A, B, &buf[..n]).unwrap();
    assert_eq!(d.inner, Inner::KeepaliveReflect);
    let reply = buf[d.range].to_vec();
    let answer = ours.decap(B, A, &reply).unwrap();
    assert_eq!(answer.inner, Inner::KeepaliveAnswer);
    assert!(ours.is_up(TunnelId(0)));
    let (_, _, s) = ours.tunnels().next().unwrap();
    assert_eq!(s.up.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(
        s.keepalives_sent.load(std::sync::atomic::Ordering::Relaxed),
        4
    );
    // A late wake-up sends one keepalive, not a burst.
    ours.handle_timeout(t0 + Duration::from_secs(500));
    assert!(ours.poll_transmit(&mut buf).is_some());
    assert_eq!(ours.poll_transmit(&mut buf), None);
    assert_eq!(ours.poll_timeout(), Some(t0 + Duration::from_secs(510)));
}

fn site2_reversed(now: Instant) -> Gre {
    Gre::new(vec![tunnel("site1", B, A, Some(42), 0)], now).unwrap()
}

#[test]
fn keepalive_over_ipv6() {
    let l: IpAddr = "2001:db8::1".parse().unwrap();
    let r: IpAddr = "2001:db8::2".parse().unwrap();
    let t0 = Instant::now();
    let mut ours = with_keepalive(l, r, t0);
    let mut peer = Gre::new(vec![tunnel("p", r, l, Some(42), 0)], t0).unwrap();
    ours.handle_timeout(t0 + Duration::from_secs(10));
    let mut buf = [0u8; 128];
    let (_, n) = ours.poll_transmit(&mut buf).unwrap();
    let d = peer.decap(l, r, &buf[..n]).unwrap();
    assert_eq!(d.inner, Inner::KeepaliveReflect);
    let d = ours.decap(r, l, &buf[d.range]).unwrap();
    assert_eq!(d.inner, Inner::KeepaliveAnswer);
}

#[test]
fn labels_are_the_metrics_contract() {
    let labels: Vec<_> = DropReason::ALL.iter().map(|r| r.label()).collect();
    for l in [
        "gre_bad_key",
        "gre_unknown_peer",
        "gre_sequence",
        "gre_checksum",
        "gre_ttl",
        "gre_malformed",
    ] {
        assert!(labels.contains(&l), "{l}");
    }
    for (i, r) in DropReason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
    }
}

#[test]
fn route_packet_counts_what_it_refuses() {
    let g = site2(Instant::now());
    // inner_v4 goes to 10.64.0.5, behind gate64: towards the site it is 172.16.0.9.
    let mut to_site = inner_v4(64);
    to_site[16..20].copy_from_slice(&[172, 16, 0, 9]);
    assert_eq!(g.route_packet(TenantId(0), &to_site), Ok(TunnelId(0)));
    let elsewhere = inner_v4(64);
    assert_eq!(
        g.route_packet(TenantId(0), &elsewhere),
        Err(DropReason::NoRoute)
    );
    assert_eq!(
        g.route_packet(TenantId(0), &[0x45, 0]),
        Err(DropReason::Malformed)
    );
    assert_eq!(g.drops().get(DropReason::NoRoute), 1);
    assert_eq!(g.drops().get(DropReason::Malformed), 1);
    let v6 = inner_v6(64);
    // 2001:db8:64::5 is not routed; 2001:db8:16::/48 is.
    assert_eq!(g.route_packet(TenantId(0), &v6), Err(DropReason::NoRoute));
}

/// Keepalive loss withdraws the tunnel's routes: packets for it are dropped and counted
/// `gre_tunnel_down` while it is down, and carried again once the peer answers.
#[test]
fn a_down_tunnel_withdraws_its_routes() {
    let t0 = Instant::now();
    let mut ours = with_keepalive(A, B, t0);
    let mut peer = site2_reversed(t0);
    let mut to_site = inner_v4(64);
    to_site[16..20].copy_from_slice(&[172, 16, 0, 9]);
    assert_eq!(ours.route_packet(TenantId(0), &to_site), Ok(TunnelId(0)));
    let mut buf = [0u8; 128];
    let mut last = 0;
    for i in 1..=4u64 {
        ours.handle_timeout(t0 + Duration::from_secs(10 * i));
        last = ours.poll_transmit(&mut buf).map_or(0, |(_, n)| n);
    }
    assert!(!ours.is_up(TunnelId(0)));
    assert_eq!(
        ours.route_packet(TenantId(0), &to_site),
        Err(DropReason::TunnelDown)
    );
    assert_eq!(ours.drops().get(DropReason::TunnelDown), 1);
    assert_eq!(DropReason::TunnelDown.label(), "gre_tunnel_down");
    let d = peer.decap(A, B, &buf[..last]).unwrap();
    let reply = buf[d.range].to_vec();
    assert_eq!(
        ours.decap(B, A, &reply).unwrap().inner,
        Inner::KeepaliveAnswer
    );
    assert_eq!(ours.route_packet(TenantId(0), &to_site), Ok(TunnelId(0)));
    assert_eq!(ours.drops().get(DropReason::TunnelDown), 1);
}

/// A sender copy routes and encapsulates into counters of its own, follows the original's
/// up/down state (the original runs the timers), and sends no keepalives of its own.
#[test]
fn sender_copy_counts_apart_and_shares_state() {
    let t0 = Instant::now();
    let mut ours = with_keepalive(A, B, t0);
    let mut sender = ours.sender(t0).unwrap();
    assert_eq!(sender.poll_timeout(), None);
    let mut inner = inner_v4(64);
    inner[16..20].copy_from_slice(&[172, 16, 0, 9]);
    let mut buf = vec![0u8; gre::MAX_HEADER_LEN + inner.len()];
    buf[gre::MAX_HEADER_LEN..].copy_from_slice(&inner);
    let id = sender.route_packet(TenantId(0), &inner).unwrap();
    let end = buf.len();
    let at = sender
        .encap(id, &mut buf, gre::MAX_HEADER_LEN, end)
        .unwrap();
    let mut peer = site2_reversed(t0);
    assert_eq!(peer.decap(A, B, &buf[at..]).unwrap().inner, Inner::Ipv4);
    // Each table counts in its own counters: two threads never write one counter.
    let (_, _, s) = sender.tunnels().next().unwrap();
    assert_eq!(s.tx_packets.load(std::sync::atomic::Ordering::Relaxed), 1);
    let (_, _, s) = ours.tunnels().next().unwrap();
    assert_eq!(s.tx_packets.load(std::sync::atomic::Ordering::Relaxed), 0);
    // Four keepalives unanswered take the tunnel down for the copy too.
    for i in 1..=4u64 {
        ours.handle_timeout(t0 + Duration::from_secs(10 * i));
    }
    assert!(!sender.is_up(id));
    assert_eq!(
        sender.route_packet(TenantId(0), &inner),
        Err(DropReason::TunnelDown)
    );
    assert_eq!(sender.drops().get(DropReason::TunnelDown), 1);
    assert_eq!(ours.drops().get(DropReason::TunnelDown), 0);
}

/// Sequence numbers must come from one thread in send order: no sender copy then.
#[test]
fn no_sender_copy_with_sequence_numbers() {
    let t0 = Instant::now();
    let mut c = tunnel("site2", A, B, Some(42), 0);
    c.send_sequence = true;
    let gre = Gre::new(vec![c], t0).unwrap();
    assert!(gre.sender(t0).is_none());
    assert!(site2(t0).sender(t0).is_some());
}
