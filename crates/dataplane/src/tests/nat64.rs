use super::*;

const POOL4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
const V4HOST: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 5);

fn pref64() -> gate64_nat64::Prefix {
    gate64_nat64::Prefix::new("2001:db8:64::".parse().unwrap(), 96).unwrap()
}

fn nat_worker(open: bool) -> Worker {
    nat_worker_with(open, |_| {})
}

fn nat_worker_with(open: bool, tune: impl FnOnce(&mut gate64_nat64::state::Config)) -> Worker {
    let mut cfg = config(open);
    let mut table = gate64_nat64::state::Config::new(vec![POOL4]);
    table.shards = 4;
    tune(&mut table);
    let nat = Nat64::new(gate64_nat64::Settings {
        prefix: pref64(),
        table,
        translate: gate64_nat64::translate::Config::default(),
    })
    .unwrap();
    cfg.nat64 = Some(Arc::new(nat));
    Worker::new(Shared::new(cfg), Arc::new(Stats::default()))
}

/// An IPv4 UDP packet with a valid header checksum and no UDP checksum.
fn udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, data: usize) -> Vec<u8> {
    let total = 28 + data;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum::finish(checksum::sum(&p[..20], 0));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + data) as u16).to_be_bytes());
    p
}

#[test]
fn rfc6146_client_reaches_ipv4_host_through_nat64_and_back_without_ipsec() {
    let mut w = nat_worker(true);
    let now = Instant::now();
    let client = teredo(CLIENT).encode();
    let pkt = udp(client, pref64().embed(V4HOST).unwrap(), 100);
    let (mut buf, start, end) = framed(&pkt);
    let v = w.handle_teredo(now, PRIMARY, CLIENT, &mut buf, start, end);
    // In place: the IPv4 header sits where the IPv6 header ended.
    let at = HEADROOM + 20;
    assert_eq!(
        v,
        Verdict::Tun {
            start: at,
            end: at + 80
        }
    );
    let v4 = &buf[at..at + 80];
    assert_eq!(v4[0], 0x45);
    assert_eq!(&v4[12..16], &POOL4.octets());
    assert_eq!(&v4[16..20], &V4HOST.octets());
    let t = u16::from_be_bytes([v4[20], v4[21]]);
    // The host answers; the reply goes to the client's Teredo mapping as IPv6.
    let reply = udp4(V4HOST, POOL4, 0x5a5a, t, 12);
    let (mut buf, start, end) = framed(&reply);
    let v = w.handle_tun(now, &mut buf, start, end);
    let Verdict::Udp { to, start, end, .. } = v else {
        panic!("expected a datagram to the client, got {v:?}");
    };
    assert_eq!(to, CLIENT);
    let back = ipv6::Packet::new_checked(&buf[start..end]).unwrap();
    assert_eq!(back.dst(), client);
    assert_eq!(back.src(), pref64().embed(V4HOST).unwrap());
    assert_eq!(
        u16::from_be_bytes([buf[start + 42], buf[start + 43]]),
        0x5a5a
    );
    let s = w.stats();
    assert_eq!(s.nat64_translations(Nat64Direction::V6ToV4), 1);
    assert_eq!(s.nat64_translations(Nat64Direction::V4ToV6), 1);
    assert_eq!(total_drops(s), 0);
}

#[test]
fn corporate_ipv6_host_uses_nat64_through_the_kernel_both_ways() {
    let mut w = nat_worker(false);
    let now = Instant::now();
    // From the TUN (route_prefix): no client, no policy step, IPv4 back to the kernel.
    let pkt = udp(CORP_HOST, pref64().embed(V4HOST).unwrap(), 100);
    let (mut buf, start, end) = framed(&pkt);
    let v = w.handle_tun(now, &mut buf, start, end);
    let at = HEADROOM + 20;
    assert_eq!(
        v,
        Verdict::Tun {
            start: at,
            end: at + 80
        }
    );
    let t = u16::from_be_bytes([buf[at + 20], buf[at + 21]]);
    // The reply's mapping is the corporate host's: the IPv6 packet goes to the kernel too.
    let (mut buf, start, end) = framed(&udp4(V4HOST, POOL4, 0x5a5a, t, 12));
    let Verdict::Tun { start, end } = w.handle_tun(now, &mut buf, start, end) else {
        panic!("expected the translated reply back into the TUN");
    };
    let back = ipv6::Packet::new_checked(&buf[start..end]).unwrap();
    assert_eq!(back.dst(), CORP_HOST);
    assert_eq!(total_drops(w.stats()), 0);
}

#[test]
fn nat64_traffic_passes_the_policy_step_like_corporate_traffic() {
    let mut w = nat_worker(false);
    let pkt = udp(
        teredo(CLIENT).encode(),
        pref64().embed(V4HOST).unwrap(),
        100,
    );
    let v = from_teredo(&mut w, Instant::now(), CLIENT, &pkt);
    assert_eq!(v, Verdict::Drop(DropReason::NoSa));
    assert_eq!(w.stats().nat64_translations(Nat64Direction::V6ToV4), 0);
}

#[test]
fn rfc6146_ipv4_without_binding_gets_port_unreachable() {
    let mut w = nat_worker(true);
    let v = from_tun(&mut w, Instant::now(), &udp4(V4HOST, POOL4, 53, 5555, 4));
    assert_eq!(v, Verdict::Drop(DropReason::Nat64NoBinding));
    let icmp = w.poll_tun_write().expect("an ICMPv4 error into the TUN");
    assert_eq!(&icmp[12..16], &POOL4.octets());
    assert_eq!(&icmp[16..20], &V4HOST.octets());
    assert_eq!((icmp[20], icmp[21]), (3, 3));
    // Never an error about an error.
    let err_about = {
        let mut e = vec![0u8; 28 + 8];
        e[0] = 0x45;
        e[2..4].copy_from_slice(&36u16.to_be_bytes());
        e[8] = 64;
        e[9] = 1;
        e[12..16].copy_from_slice(&V4HOST.octets());
        e[16..20].copy_from_slice(&POOL4.octets());
        let c = checksum::finish(checksum::sum(&e[..20], 0));
        e[10..12].copy_from_slice(&c.to_be_bytes());
        e[20] = 3;
        e
    };
    let _ = from_tun(&mut w, Instant::now(), &err_about);
    assert!(w.poll_tun_write().is_none());
}

#[test]
fn nat64_bad_embedded_address_and_ipv4_without_nat64_are_dropped() {
    let mut w = nat_worker(true);
    let dst = pref64().embed(Ipv4Addr::new(127, 0, 0, 1)).unwrap();
    let v = from_teredo(
        &mut w,
        Instant::now(),
        CLIENT,
        &udp(teredo(CLIENT).encode(), dst, 60),
    );
    assert_eq!(v, Verdict::Drop(DropReason::Nat64BadAddress));
    let mut plain = worker(true);
    let v = from_tun(&mut plain, Instant::now(), &udp4(V4HOST, POOL4, 1, 2, 0));
    assert_eq!(v, Verdict::Drop(DropReason::NoRoute));
}

// NAT64 from an IP-HTTPS client is translated by the worker that took the packet, like a
// Teredo client's, instead of going round through the kernel and the TUN.
#[test]
fn rfc6146_iphttps_client_is_translated_directly() {
    let mut cfg = nat_worker(true).shared().config().clone();
    cfg.iphttps_prefix = Some(Prefix::new("2001:db8:1::".parse().unwrap(), 48));
    let mut w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
    let client: Ipv6Addr = "2001:db8:1:5::a".parse().unwrap();
    let pkt = udp(client, pref64().embed(V4HOST).unwrap(), 100);
    let (mut buf, start, end) = framed(&pkt);
    let prefix = "2001:db8:1:5::".parse().unwrap();
    let v = iphttps_packet(&mut w, Instant::now(), prefix, &mut buf, start, end);
    let at = HEADROOM + 20;
    assert_eq!(
        v,
        Verdict::Tun {
            start: at,
            end: at + 80
        }
    );
    assert_eq!(&buf[at + 12..at + 16], &POOL4.octets());
    assert_eq!(w.stats().nat64_translations(Nat64Direction::V6ToV4), 1);
}

// RFC 6888: per-client limits. A client at its limit hears why (ICMPv6 1/1, within the ICMP
// error budget); the others are untouched.

fn client_at(mapped: SocketAddrV4) -> Ipv6Addr {
    teredo(mapped).encode()
}

/// ICMPv6 errors queued for the TUN: (source, destination, type, code).
fn queued_icmpv6_errors(w: &mut Worker) -> Vec<(Ipv6Addr, Ipv6Addr, u8, u8)> {
    std::iter::from_fn(|| w.poll_tun_write())
        .filter_map(|b| {
            let p = ipv6::Packet::new_checked(&b[..]).ok()?;
            let icmp = p.payload();
            Some((p.src(), p.dst(), *icmp.first()?, *icmp.get(1)?))
        })
        .collect()
}

#[test]
fn rfc6888_client_at_its_port_limit_is_refused_others_are_not() {
    let mut w = nat_worker_with(true, |t| t.max_ports_per_client = 3);
    let now = Instant::now();
    let host = pref64().embed(V4HOST).unwrap();
    let greedy = client_at(CLIENT);
    for port in 1..=3 {
        let v = from_teredo(&mut w, now, CLIENT, &udp_ports(greedy, host, port, 9, 60));
        assert!(matches!(v, Verdict::Tun { .. }), "port {port}: {v:?}");
    }
    let v = from_teredo(&mut w, now, CLIENT, &udp_ports(greedy, host, 4, 9, 60));
    assert_eq!(v, Verdict::Drop(DropReason::Nat64ClientPortLimit));
    // From the destination, a peer the client trusts (a Teredo client drops the rest).
    assert_eq!(queued_icmpv6_errors(&mut w), vec![(host, greedy, 1, 1)]);
    // Its existing mappings still work; another client gets new ones.
    let v = from_teredo(&mut w, now, CLIENT, &udp_ports(greedy, host, 2, 9, 60));
    assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
    let other = client_at(OTHER);
    for port in 1..=3 {
        let v = from_teredo(&mut w, now, OTHER, &udp_ports(other, host, port, 9, 60));
        assert!(
            matches!(v, Verdict::Tun { .. }),
            "other, port {port}: {v:?}"
        );
    }
    let s = w.stats();
    assert_eq!(s.drops(DropReason::Nat64ClientPortLimit), 1);
    assert_eq!(total_drops(s), 1);
    assert_eq!(s.nat64_translations(Nat64Direction::V6ToV4), 7);
}

#[test]
fn rfc6888_client_at_its_session_limit_gets_rate_limited_errors() {
    let mut w = nat_worker_with(true, |t| t.max_sessions_per_client = 2);
    let now = Instant::now();
    let greedy = client_at(CLIENT);
    let to = |dport: u16| udp_ports(greedy, pref64().embed(V4HOST).unwrap(), 7, dport, 60);
    for dport in [1, 2] {
        assert!(matches!(
            from_teredo(&mut w, now, CLIENT, &to(dport)),
            Verdict::Tun { .. }
        ));
    }
    // A flood beyond the limit: every packet counted, errors only within the budget.
    for dport in 3..203 {
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &to(dport)),
            Verdict::Drop(DropReason::Nat64ClientSessionLimit)
        );
    }
    let errors = queued_icmpv6_errors(&mut w);
    assert!(!errors.is_empty() && errors.len() < 200, "{}", errors.len());
    let host = pref64().embed(V4HOST).unwrap();
    assert!(
        errors.iter().all(|e| *e == (host, greedy, 1, 1)),
        "{errors:?}"
    );
    assert_eq!(w.stats().drops(DropReason::Nat64ClientSessionLimit), 200);
    let other = client_at(OTHER);
    let v = from_teredo(
        &mut w,
        now,
        OTHER,
        &udp_ports(other, pref64().embed(V4HOST).unwrap(), 7, 3, 60),
    );
    assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
}

#[test]
fn nat64_never_translates_to_host_local_ranges_or_gate64_itself() {
    let mut w = nat_worker(true);
    let now = Instant::now();
    let me = client_at(CLIENT);
    for v4 in [
        "0.1.2.3",
        "127.0.0.1",
        "169.254.1.1",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "255.255.255.255",
    ] {
        let dst = pref64().embed(v4.parse().unwrap()).unwrap();
        let v = from_teredo(&mut w, now, CLIENT, &udp(me, dst, 60));
        assert_eq!(v, Verdict::Drop(DropReason::Nat64BadAddress), "{v4}");
    }
    // pool4 itself only as a hairpin (RFC 6146 §3.8): no binding, nothing delivered.
    let v = from_teredo(
        &mut w,
        now,
        CLIENT,
        &udp(me, pref64().embed(POOL4).unwrap(), 60),
    );
    assert_eq!(v, Verdict::Drop(DropReason::Nat64NoBinding));
    // gate64's own IPv4 addresses (the Teredo server's here): traffic to itself, refused
    // even as echo.
    for own in [PRIMARY, SECONDARY] {
        let dst = pref64().embed(own).unwrap();
        for pkt in [udp(me, dst, 60), echo(me, dst, 8)] {
            let v = from_teredo(&mut w, now, CLIENT, &pkt);
            assert_eq!(v, Verdict::Drop(DropReason::ToSelf), "{own}");
        }
    }
    assert_eq!(w.stats().drops(DropReason::ToSelf), 4);
}

/// An IP-HTTPS connection owns a /64: changing interface identifiers does not buy it more
/// ports, and another connection's /64 is another client.
#[test]
fn rfc6888_iphttps_client_is_its_64() {
    let mut cfg = nat_worker_with(true, |t| t.max_ports_per_client = 2)
        .shared()
        .config()
        .clone();
    cfg.iphttps_prefix = Some(Prefix::new("2001:db8:1::".parse().unwrap(), 48));
    let mut w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
    let host = pref64().embed(V4HOST).unwrap();
    let now = Instant::now();
    let mut send = |prefix: &str, src: &str, sport: u16| {
        let pkt = udp_ports(src.parse().unwrap(), host, sport, 9, 60);
        let (mut buf, start, end) = framed(&pkt);
        iphttps_packet(&mut w, now, prefix.parse().unwrap(), &mut buf, start, end)
    };
    let mine = "2001:db8:1:5::";
    assert!(matches!(
        send(mine, "2001:db8:1:5::a", 1),
        Verdict::Tun { .. }
    ));
    assert!(matches!(
        send(mine, "2001:db8:1:5::b", 1),
        Verdict::Tun { .. }
    ));
    assert_eq!(
        send(mine, "2001:db8:1:5:1:2:3:4", 1),
        Verdict::Drop(DropReason::Nat64ClientPortLimit)
    );
    let theirs = "2001:db8:1:6::";
    assert!(matches!(
        send(theirs, "2001:db8:1:6::a", 1),
        Verdict::Tun { .. }
    ));
}
