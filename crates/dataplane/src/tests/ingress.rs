use super::*;

#[test]
fn client_to_corp_goes_to_tun_in_place_without_ipsec() {
    let mut w = worker(true);
    let pkt = udp(teredo(CLIENT).encode(), CORP_HOST, 200);
    // Auth header and origin indication before the IPv6 packet are skipped, not copied.
    let mut dgram = vec![0u8, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0];
    dgram.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
    dgram.extend_from_slice(&pkt);
    dgram.extend_from_slice(b"trailer");
    let (mut buf, start, end) = framed(&dgram);
    let v = w.handle_teredo(Instant::now(), PRIMARY, CLIENT, &mut buf, start, end);
    let at = HEADROOM + 21;
    assert_eq!(
        v,
        Verdict::Tun {
            start: at,
            end: at + 200
        }
    );
    assert_eq!(&buf[at..at + 200], &pkt[..]);
    let s = w.stats();
    assert_eq!(s.packets(Side::Internet, Direction::Rx), 1);
    assert_eq!(s.bytes(Side::Internet, Direction::Rx), dgram.len() as u64);
    assert_eq!(total_drops(s), 0);
    // gate64's own corporate address is routed too.
    let v = from_teredo(
        &mut w,
        Instant::now(),
        CLIENT,
        &udp(teredo(CLIENT).encode(), CORP_ADDRESS, 60),
    );
    assert!(matches!(v, Verdict::Tun { .. }));
}
// The policy step: without IPsec only ICMPv6 echo to gate64 itself passes.
#[test]
fn policy_without_sa_drops_corp_traffic_but_passes_echo_to_gate64() {
    let mut w = worker(false);
    let me = teredo(CLIENT).encode();
    let now = Instant::now();
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &udp(me, CORP_HOST, 100)),
        Verdict::Drop(DropReason::NoSa)
    );
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &echo(me, CORP_HOST, 8)),
        Verdict::Drop(DropReason::NoSa),
        "echo to another corp host needs an SA"
    );
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &udp(me, CORP_ADDRESS, 100)),
        Verdict::Drop(DropReason::NoSa),
        "non-echo to gate64 needs an SA"
    );
    let ping = echo(me, CORP_ADDRESS, 8);
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &ping),
        Verdict::Tun {
            start: HEADROOM,
            end: HEADROOM + ping.len()
        }
    );
    let s = w.stats();
    assert_eq!(s.drops(DropReason::NoSa), 3);
    assert_eq!(total_drops(s), 3);
    assert_eq!(s.packets(Side::Internet, Direction::Rx), 4);
}

#[test]
fn corp_traffic_passes_policy_without_ipsec() {
    let mut w = worker(true);
    let me = teredo(CLIENT).encode();
    let pkt = echo(me, CORP_HOST, 8);
    assert_eq!(
        from_teredo(&mut w, Instant::now(), CLIENT, &pkt),
        Verdict::Tun {
            start: HEADROOM,
            end: HEADROOM + pkt.len()
        }
    );
    assert_eq!(w.stats().drops(DropReason::NoSa), 0);
}

// A reload (SIGHUP) flips the lab switch for the packets routed from then on.
#[test]
fn policy_follows_the_lab_switch_when_it_changes() {
    let mut w = worker(false);
    let me = teredo(CLIENT).encode();
    let pkt = echo(me, CORP_HOST, 8);
    let now = Instant::now();
    let admitted = Verdict::Tun {
        start: HEADROOM,
        end: HEADROOM + pkt.len(),
    };
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &pkt),
        Verdict::Drop(DropReason::NoSa)
    );
    w.shared().set_allow_without_ipsec(true);
    assert!(w.shared().allow_without_ipsec());
    assert_eq!(from_teredo(&mut w, now, CLIENT, &pkt), admitted);
    w.shared().set_allow_without_ipsec(false);
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &pkt),
        Verdict::Drop(DropReason::NoSa)
    );
    assert_eq!(w.stats().drops(DropReason::NoSa), 2);
}

#[test]
fn destination_outside_prefixes_is_no_route_without_ipsec() {
    let mut w = worker(true);
    let me = teredo(CLIENT).encode();
    let now = Instant::now();
    for dst in ["2001:db8:101::1", "2001:db8:99::1", "2a00::1"] {
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &udp(me, dst.parse().unwrap(), 80)),
            Verdict::Drop(DropReason::NoRoute),
            "{dst}"
        );
    }
    // A client of another Teredo server.
    let foreign = Address {
        server: Ipv4Addr::new(203, 0, 113, 9),
        ..teredo(OTHER)
    };
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &udp(me, foreign.encode(), 80)),
        Verdict::Drop(DropReason::NoRoute)
    );
    assert_eq!(w.stats().drops(DropReason::NoRoute), 4);
    assert_eq!(total_drops(w.stats()), 4);
}

// RFC 4380 §5.3.1: link-local, multicast, loopback and unspecified: MUST NOT forward.
#[test]
fn rfc4380_5_3_1_non_global_destination_is_bad_destination_without_ipsec() {
    let mut w = worker(true);
    let me = teredo(CLIENT).encode();
    let now = Instant::now();
    let dsts = [
        "fe80::1",
        "ff02::1",
        "ff05::2",
        "ff0e::1",
        "::1",
        "::",
        "::ffff:1.2.3.4",
    ];
    for dst in dsts {
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &udp(me, dst.parse().unwrap(), 80)),
            Verdict::Drop(DropReason::BadDestination),
            "{dst}"
        );
    }
    assert_eq!(
        w.stats().drops(DropReason::BadDestination),
        dsts.len() as u64
    );
    assert_eq!(total_drops(w.stats()), dsts.len() as u64);
}
