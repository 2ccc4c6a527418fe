use super::*;

// RFC 4380 §5.3.2, brief §1.9: Miredo's RS gets the 117-byte RA from the primary.
#[test]
fn rfc4380_5_3_2_rs_gets_117_byte_ra_from_primary() {
    let mut w = worker(false);
    let rs = miredo_rs("fe80::ffff:ffff:ffff");
    let (mut buf, start, end) = framed(&rs);
    let v = w.handle_teredo(Instant::now(), PRIMARY, CLIENT, &mut buf, start, end);
    assert_eq!(
        v,
        Verdict::Udp {
            from: PRIMARY,
            to: CLIENT,
            start: HEADROOM,
            end: HEADROOM + 117,
            gso: Gso::Start,
        }
    );
    let p = tw::Packet::parse(&buf[HEADROOM..HEADROOM + 117]).unwrap();
    assert_eq!(p.auth.unwrap().nonce, *b"nonce-01");
    assert_eq!(p.auth.unwrap().confirmation, 0);
    assert_eq!(p.origin.unwrap().0, CLIENT);
    assert_eq!(p.ipv6.src(), server_link_local());
    assert_eq!(
        p.ipv6.dst(),
        "fe80::ffff:ffff:ffff".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(p.ipv6.hop_limit(), 255);
    assert!(icmpv6::checksum_ok(&p.ipv6));
    let ra = icmpv6::RouterAdvert::parse(&p.ipv6).unwrap();
    assert_eq!(ra.prefix, "2001:0:c000:201::".parse::<Ipv6Addr>().unwrap());
    assert_eq!(ra.prefix_len, 64);
    assert_eq!(ra.mtu, Some(1280));

    let s = w.stats();
    assert_eq!(s.teredo_qualifications.get(), 1);
    assert_eq!(s.packets(Side::Internet, Direction::Rx), 1);
    assert_eq!(s.bytes(Side::Internet, Direction::Rx), 61);
    assert_eq!(total_drops(s), 0);
}

#[test]
fn rs_flood_from_one_source_is_rate_limited_after_burst() {
    let mut w = worker(false);
    let t0 = Instant::now();
    let rs = miredo_rs("fe80::ffff:ffff:ffff");
    let verdicts: Vec<_> = (0..10)
        .map(|_| from_teredo(&mut w, t0, CLIENT, &rs))
        .collect();
    assert!(
        verdicts[..3]
            .iter()
            .all(|v| matches!(v, Verdict::Udp { .. }))
    );
    assert!(
        verdicts[3..]
            .iter()
            .all(|v| *v == Verdict::Drop(DropReason::RsRateLimited))
    );
    let s = w.stats();
    assert_eq!(s.teredo_qualifications.get(), 3);
    assert_eq!(s.drops(DropReason::RsRateLimited), 7);
    assert_eq!(total_drops(s), 7);
    assert_eq!(s.packets(Side::Internet, Direction::Rx), 10);
    assert_eq!(s.bytes(Side::Internet, Direction::Rx), 610);
    // Another source is unaffected, and the flooding one gets a token back after 1 s.
    assert!(matches!(
        from_teredo(&mut w, t0, OTHER, &rs),
        Verdict::Udp { to: OTHER, .. }
    ));
    assert!(matches!(
        from_teredo(&mut w, t0 + Duration::from_secs(1), CLIENT, &rs),
        Verdict::Udp { to: CLIENT, .. }
    ));
}
// RFC 4380 §5.4.2: the source must encode the UDP source it came from.
#[test]
fn rfc4380_5_4_2_spoofed_source_is_dropped() {
    let mut w = worker(true);
    let pkt = udp(teredo(CLIENT).encode(), CORP_HOST, 100);
    let wrong_port = SocketAddrV4::new(*CLIENT.ip(), 9999);
    assert_eq!(
        from_teredo(&mut w, Instant::now(), wrong_port, &pkt),
        Verdict::Drop(DropReason::SpoofedSource)
    );
    assert_eq!(
        from_teredo(&mut w, Instant::now(), OTHER, &pkt),
        Verdict::Drop(DropReason::SpoofedSource)
    );
    // A native source sending data (not a bubble) to our client: spoofing the corpnet.
    let native = udp(CORP_HOST, teredo(OTHER).encode(), 100);
    assert_eq!(
        from_teredo(&mut w, Instant::now(), CLIENT, &native),
        Verdict::Drop(DropReason::SpoofedSource)
    );
    let s = w.stats();
    assert_eq!(s.drops(DropReason::SpoofedSource), 3);
    assert_eq!(total_drops(s), 3);
    assert_eq!(s.packets(Side::Internet, Direction::Rx), 3);
}

// RFC 4380 §5.2.9, §5.3.1: the server relays an indirect bubble to its own client with an
// origin indication naming the sender, prepended in the headroom.
#[test]
fn rfc4380_5_3_1_indirect_bubble_to_own_client_gets_origin_indication() {
    let mut w = worker(false);
    let b = bubble(teredo(CLIENT).encode(), teredo(OTHER).encode());
    let (mut buf, start, end) = framed(&b);
    let v = w.handle_teredo(Instant::now(), PRIMARY, CLIENT, &mut buf, start, end);
    assert_eq!(
        v,
        Verdict::Udp {
            from: PRIMARY,
            to: OTHER,
            start: HEADROOM - tw::ORIGIN_LEN,
            end: HEADROOM + b.len(),
            gso: Gso::Start,
        }
    );
    let mut origin = [0u8; 8];
    tw::Origin(CLIENT).emit(&mut origin).unwrap();
    assert_eq!(&buf[HEADROOM - 8..HEADROOM], &origin);
    assert_eq!(&buf[HEADROOM..HEADROOM + b.len()], &b[..]);
    assert_eq!(total_drops(w.stats()), 0);
    // A client whose embedded mapping is not global is never sent to.
    let private = teredo("10.1.2.3:5000".parse().unwrap()).encode();
    assert_eq!(
        from_teredo(
            &mut w,
            Instant::now(),
            CLIENT,
            &bubble(teredo(CLIENT).encode(), private)
        ),
        Verdict::Drop(DropReason::NonGlobalMapping)
    );
}

// RFC 4380 §5.4.1/§5.4.2: a client's data to another client takes the relay: it
// waits behind a bubble until the peer answers from its mapping, and is never sent to a
// mapping that did not.
#[test]
fn rfc4380_5_4_1_client_data_to_own_client_waits_for_a_verified_peer_without_ipsec() {
    let mut w = worker(true);
    let now = Instant::now();
    let pkt = echo(teredo(CLIENT).encode(), teredo(OTHER).encode(), 16);
    assert_eq!(from_teredo(&mut w, now, CLIENT, &pkt), Verdict::Consumed);
    let t = w.poll_transmit().expect("a bubble to the peer");
    assert!(w.poll_transmit().is_none());
    assert_eq!(t.to, OTHER);
    assert_eq!(
        t.data.len(),
        tw::ORIGIN_LEN + ipv6::HEADER_LEN,
        "a bare bubble"
    );
    // The peer's direct bubble verifies it and releases the packet, unchanged.
    let answer = bubble(teredo(OTHER).encode(), server_link_local());
    assert_eq!(from_teredo(&mut w, now, OTHER, &answer), Verdict::Consumed);
    let t = w.poll_transmit().expect("the queued packet");
    assert_eq!((t.to, t.data), (OTHER, pkt.clone()));
    // Verified: later packets go straight, in place.
    let (mut buf, start, end) = framed(&pkt);
    let v = w.handle_teredo(now, PRIMARY, CLIENT, &mut buf, start, end);
    assert_eq!(
        v,
        Verdict::Udp {
            from: PRIMARY,
            to: OTHER,
            start,
            end,
            gso: Gso::Start,
        }
    );
    assert_eq!(total_drops(w.stats()), 0);
}

// A sender naming a third party's mapping in a Teredo destination gets at most
// bare bubbles sent there; its payload, of any protocol or size, never leaves.
#[test]
fn issue12_payload_never_reaches_a_mapping_that_did_not_answer_without_ipsec() {
    let mut w = worker(true);
    let t0 = Instant::now();
    let victim = teredo("198.18.0.10:53".parse().unwrap()).encode();
    let me = teredo(CLIENT).encode();
    for (i, pkt) in [
        echo(me, victim, 16),
        echo(me, victim, 1000),
        udp(me, victim, 600),
    ]
    .iter()
    .enumerate()
    {
        let v = from_teredo(&mut w, t0 + Duration::from_millis(i as u64), CLIENT, pkt);
        assert_eq!(v, Verdict::Consumed);
    }
    let mut sent = Vec::new();
    for ms in (0..=10_000).step_by(500) {
        w.handle_timeout(t0 + Duration::from_millis(ms), 0, 1);
        sent.extend(std::iter::from_fn(|| w.poll_transmit()));
    }
    assert!(!sent.is_empty());
    for t in &sent {
        assert_eq!(t.data.len(), tw::ORIGIN_LEN + ipv6::HEADER_LEN, "{t:?}");
        assert!(tw::Packet::parse(&t.data).unwrap().ipv6.is_bubble());
    }
    assert_eq!(sent.len(), 4, "§5.4.1: a bubble and 3 retries");
    assert_eq!(w.stats().drops(DropReason::BubbleTimeout), 3);
}

// Brief §1.3 and §1.8: RFC 6081 puts trailers after a bubble's IPv6 header; a relayed
// bubble keeps well-formed ones, as Miredo forwards the whole received length.
#[test]
fn rfc6081_relayed_bubbles_keep_their_trailers() {
    let mut w = worker(false);
    let now = Instant::now();
    let trailer = [0x01, 0x04, 0xaa, 0xbb, 0xcc, 0xdd, 0x05, 0x02, 0xee, 0xff];
    // Indirect bubble from one client to another.
    let mut b = bubble(teredo(CLIENT).encode(), teredo(OTHER).encode());
    b.extend_from_slice(&trailer);
    let (mut buf, start, end) = framed(&b);
    let v = w.handle_teredo(now, PRIMARY, CLIENT, &mut buf, start, end);
    assert_eq!(
        v,
        Verdict::Udp {
            from: PRIMARY,
            to: OTHER,
            start: start - tw::ORIGIN_LEN,
            end,
            gso: Gso::Start,
        }
    );
    assert_eq!(&buf[end - trailer.len()..end], &trailer);
    // Another relay's bubble (native source) to our client (§5.3.1 rule 6).
    let mut b = bubble("2001:db8:7::1".parse().unwrap(), teredo(OTHER).encode());
    b.extend_from_slice(&trailer);
    let (mut buf, start, end) = framed(&b);
    let remote: SocketAddrV4 = "203.0.113.99:3545".parse().unwrap();
    // Another batch: the datagram starts its own GSO send.
    w.start_batch();
    let v = w.handle_teredo(now, PRIMARY, remote, &mut buf, start, end);
    assert_eq!(
        v,
        Verdict::Udp {
            from: PRIMARY,
            to: OTHER,
            start: start - tw::ORIGIN_LEN,
            end,
            gso: Gso::Start,
        }
    );
    let p = tw::Packet::parse(&buf[start - tw::ORIGIN_LEN..end]).unwrap();
    assert_eq!(p.origin.unwrap().0, remote);
}

// Trailing bytes that are not RFC 6081 trailers (an attacker's payload after a
// bubble) are never relayed: the bubble is dropped and counted.
#[test]
fn rfc6081_bubbles_with_anything_else_after_them_are_dropped() {
    let mut w = worker(false);
    let now = Instant::now();
    let bad: [&[u8]; 4] = [
        b"GET / HTTP/1.0\r\n\r\n",
        &[0x01, 0x02, 0xaa, 0xbb],
        &[0x01, 0x04, 1, 2, 3, 4, 0x01, 0x04, 1, 2, 3, 4],
        &[0x00],
    ];
    for tail in bad {
        let mut b = bubble(teredo(CLIENT).encode(), teredo(OTHER).encode());
        b.extend_from_slice(tail);
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &b),
            Verdict::Drop(DropReason::TeredoBadTrailer),
            "{tail:02x?}"
        );
        let mut b = bubble("2001:db8:7::1".parse().unwrap(), teredo(OTHER).encode());
        b.extend_from_slice(tail);
        assert_eq!(
            from_teredo(&mut w, now, "203.0.113.99:3545".parse().unwrap(), &b),
            Verdict::Drop(DropReason::TeredoBadTrailer)
        );
    }
    assert_eq!(w.stats().drops(DropReason::TeredoBadTrailer), 8);
    assert_eq!(total_drops(w.stats()), 8);
}

// Relayed bubbles are limited per sender address and per destination address
// (10/s, burst 20 by default), each refusal counted.
#[test]
fn issue12_relayed_bubbles_are_rate_limited_per_source_and_destination() {
    let mut w = worker(false);
    let t0 = Instant::now();
    let relayed = |w: &mut Worker, from: SocketAddrV4, to: SocketAddrV4, at: Instant| {
        let b = bubble("2001:db8:7::1".parse().unwrap(), teredo(to).encode());
        matches!(from_teredo(w, at, from, &b), Verdict::Udp { .. })
    };
    // One sender towards 100 destinations: the burst, then nothing within the same instant.
    let sender: SocketAddrV4 = "203.0.113.99:3545".parse().unwrap();
    let sent = (0..100u16)
        .filter(|i| {
            relayed(
                &mut w,
                sender,
                SocketAddrV4::new(Ipv4Addr::new(198, 18, 1, *i as u8), 1000),
                t0,
            )
        })
        .count();
    assert_eq!(sent, 20);
    assert_eq!(w.stats().drops(DropReason::RelaySourceRateLimited), 80);
    // 100 senders towards one destination address (any ports).
    let sent = (0..100u16)
        .filter(|i| {
            let from = SocketAddrV4::new(Ipv4Addr::new(100, 64, 0, 1 + *i as u8), 3545);
            relayed(
                &mut w,
                from,
                SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 10), 1000 + i),
                t0,
            )
        })
        .count();
    assert_eq!(sent, 20);
    assert_eq!(w.stats().drops(DropReason::RelayDestinationRateLimited), 80);
    // One second later the destination has 10 more.
    let t1 = t0 + Duration::from_secs(1);
    let sent = (0..100u16)
        .filter(|i| {
            let from = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 1 + *i as u8), 3545);
            relayed(
                &mut w,
                from,
                SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 10), 2000 + i),
                t1,
            )
        })
        .count();
    assert_eq!(sent, 10);
}

// Nothing goes to gate64's own server addresses, whatever a Teredo address embeds.
#[test]
fn issue12_nothing_is_sent_to_our_own_server_addresses() {
    let mut w = worker(true);
    let now = Instant::now();
    for own in [PRIMARY, SECONDARY] {
        let dst = teredo(SocketAddrV4::new(own, 3544)).encode();
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &bubble(teredo(CLIENT).encode(), dst)),
            Verdict::Drop(DropReason::LoopGuard)
        );
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &echo(teredo(CLIENT).encode(), dst, 8)),
            Verdict::Drop(DropReason::LoopGuard)
        );
        assert_eq!(
            from_tun(&mut w, now, &udp(CORP_HOST, dst, 100)),
            Verdict::Drop(DropReason::LoopGuard)
        );
    }
    assert!(w.poll_transmit().is_none());
    assert_eq!(w.stats().drops(DropReason::LoopGuard), 6);
}

// One socket sending its own mapping with every flag value makes one peer entry.
#[test]
fn rfc5991_flag_variants_from_one_socket_make_one_peer() {
    let mut w = worker(false);
    let now = Instant::now();
    for flags in (0..=u16::MAX).step_by(7) {
        let me = Address {
            flags,
            ..teredo(CLIENT)
        };
        let v = from_teredo(
            &mut w,
            now,
            CLIENT,
            &bubble(me.encode(), server_link_local()),
        );
        assert_eq!(v, Verdict::Consumed);
    }
    let g = w.shared.gauges(now);
    assert_eq!((g.teredo_clients, g.teredo_peers), (1, 1));
}

// RFC 4380 §5.3.1 rule 3: the IPv4 source must be global unicast.
#[test]
fn rfc4380_5_3_1_non_global_source_is_dropped() {
    let mut w = worker(true);
    let rs = miredo_rs("fe80::ffff:ffff:ffff");
    for src in [
        "10.0.0.1:3546",
        "127.0.0.1:3546",
        "192.168.1.1:1",
        "224.0.0.253:3544",
    ] {
        let src: SocketAddrV4 = src.parse().unwrap();
        assert_eq!(
            from_teredo(&mut w, Instant::now(), src, &rs),
            Verdict::Drop(DropReason::NonGlobalSource)
        );
        let data = udp(teredo(src).encode(), CORP_HOST, 60);
        assert_eq!(
            from_teredo(&mut w, Instant::now(), src, &data),
            Verdict::Drop(DropReason::NonGlobalSource)
        );
    }
    assert_eq!(w.stats().drops(DropReason::NonGlobalSource), 8);
    assert_eq!(w.stats().teredo_qualifications.get(), 0);
}

// The relay's own bubbles towards mappings that never answered (one per new
// unverified peer) share the per-destination budget: many ports of one address get at most
// its burst at once.
#[test]
fn issue12_relay_bubbles_to_one_address_are_rate_limited() {
    let mut w = worker(true);
    let now = Instant::now();
    for port in 0..100u16 {
        let victim = teredo(SocketAddrV4::new(
            Ipv4Addr::new(198, 18, 0, 10),
            1000 + port,
        ));
        let v = from_tun(&mut w, now, &udp(CORP_HOST, victim.encode(), 100));
        assert_eq!(v, Verdict::Consumed);
    }
    let bubbles = std::iter::from_fn(|| w.poll_transmit()).count();
    assert_eq!(bubbles, 20);
    assert_eq!(w.stats().drops(DropReason::RelayDestinationRateLimited), 80);
    // Their retries 2 s later: 2 s of budget at 10/s.
    w.handle_timeout(now + Duration::from_secs(2), 0, 1);
    assert_eq!(std::iter::from_fn(|| w.poll_transmit()).count(), 20);
}
