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
    // gate64's own corporate address is routed too, for what a client needs there.
    let v = from_teredo(
        &mut w,
        Instant::now(),
        CLIENT,
        &echo(teredo(CLIENT).encode(), CORP_ADDRESS, 8),
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
        Verdict::Drop(DropReason::ToSelf),
        "non-echo to gate64 is not what a client needs there"
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
    assert_eq!(s.drops(DropReason::NoSa), 2);
    assert_eq!(s.drops(DropReason::ToSelf), 1);
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
    w.shared().set_require_ipsec(false);
    assert!(!w.shared().require_ipsec());
    assert_eq!(from_teredo(&mut w, now, CLIENT, &pkt), admitted);
    w.shared().set_require_ipsec(true);
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

// Traffic to gate64 itself: neighbour discovery (transport stage), ICMPv6 echo, DNS64; the
// metrics exporter and any other port on the host never, with or without IPsec.

/// Another address of gate64's, inside the corporate prefix (say the IP-HTTPS listener).
const SELF_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x443);
const SELF_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);

fn to_self_worker(open: bool, dns64: bool) -> Worker {
    let mut cfg = config(open);
    cfg.self_addresses = vec![SELF_V6.into(), SELF_V4.into()];
    if dns64 {
        cfg.dns64_listen = vec![std::net::SocketAddr::from((CORP_ADDRESS, 53))];
    }
    Worker::new(Shared::new(cfg), Arc::new(Stats::default()))
}

/// A TCP SYN-sized packet to `port` (only the ports matter to the policy).
fn tcp_to(src: Ipv6Addr, dst: Ipv6Addr, port: u16) -> Vec<u8> {
    let mut b = udp_ports(src, dst, 40000, port, 60);
    b[6] = ipv6::NH_TCP;
    b
}

#[test]
fn to_self_admits_echo_and_dns64_only() {
    for allow in [true, false] {
        let mut w = to_self_worker(allow, true);
        let me = teredo(CLIENT).encode();
        let now = Instant::now();
        let mut sent = 0;
        let mut send = |w: &mut Worker, pkt: Vec<u8>| {
            sent += 1;
            from_teredo(w, now, CLIENT, &pkt)
        };
        for dst in [CORP_ADDRESS, SELF_V6] {
            let v = send(&mut w, echo(me, dst, 8));
            assert!(matches!(v, Verdict::Tun { .. }), "echo to {dst}: {v:?}");
            // The metrics exporter, SSH, IKE without an IPsec endpoint and any UDP port: never.
            for port in [9164, 22, 443, 9100] {
                let v = send(&mut w, tcp_to(me, dst, port));
                assert_eq!(v, Verdict::Drop(DropReason::ToSelf), "tcp {dst} {port}");
            }
            for port in [
                gate64_esp::udp_encap::IKE_PORT,
                gate64_esp::udp_encap::NAT_T_PORT,
                123,
                9164,
            ] {
                let v = send(&mut w, udp_ports(me, dst, 40000, port, 60));
                assert_eq!(v, Verdict::Drop(DropReason::ToSelf), "udp {dst} {port}");
            }
        }
        // DNS64 where it is served, under the rule corporate traffic follows.
        let expect_dns = |v: Verdict| match allow {
            true => assert!(matches!(v, Verdict::Tun { .. }), "{v:?}"),
            false => assert_eq!(v, Verdict::Drop(DropReason::NoSa)),
        };
        expect_dns(send(&mut w, udp_ports(me, CORP_ADDRESS, 40000, 53, 60)));
        expect_dns(send(&mut w, tcp_to(me, CORP_ADDRESS, 53)));
        assert_eq!(
            send(&mut w, udp_ports(me, SELF_V6, 40000, 53, 60)),
            Verdict::Drop(DropReason::ToSelf),
            "no DNS64 at that address"
        );
        // Pref64 is not configured here: gate64's IPv4 address is no route, not a translation.
        assert_eq!(w.stats().drops(DropReason::ToSelf), 17, "allow = {allow}");
        assert_eq!(w.stats().packets(Side::Internet, Direction::Rx), sent);
    }
}

#[test]
fn to_self_without_dns64_refuses_port_53_and_leaves_corp_hosts_alone() {
    let mut w = to_self_worker(true, false);
    let me = teredo(CLIENT).encode();
    let now = Instant::now();
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &udp_ports(me, CORP_ADDRESS, 1, 53, 60)),
        Verdict::Drop(DropReason::ToSelf)
    );
    // A corporate host's ports are the corporate policy's business, not the to-self rule's.
    for port in [22, 53, 9164] {
        let v = from_teredo(&mut w, now, CLIENT, &tcp_to(me, CORP_HOST, port));
        assert!(matches!(v, Verdict::Tun { .. }), "{port}: {v:?}");
    }
}
