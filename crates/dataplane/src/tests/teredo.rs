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

// RFC 4380 §5.3.1: the server forwards to its own client with an origin indication naming
// the sender, prepended in the headroom.
#[test]
fn rfc4380_5_3_1_client_to_own_client_gets_origin_indication() {
    let mut w = worker(false);
    let pkt = echo(teredo(CLIENT).encode(), teredo(OTHER).encode(), 16);
    let (mut buf, start, end) = framed(&pkt);
    let v = w.handle_teredo(Instant::now(), PRIMARY, CLIENT, &mut buf, start, end);
    assert_eq!(
        v,
        Verdict::Udp {
            from: PRIMARY,
            to: OTHER,
            start: HEADROOM - tw::ORIGIN_LEN,
            end: HEADROOM + pkt.len(),
            gso: Gso::Start,
        }
    );
    let mut origin = [0u8; 8];
    tw::Origin(CLIENT).emit(&mut origin).unwrap();
    assert_eq!(&buf[HEADROOM - 8..HEADROOM], &origin);
    assert_eq!(&buf[HEADROOM..HEADROOM + pkt.len()], &pkt[..]);
    let p = tw::Packet::parse(&buf[HEADROOM - 8..HEADROOM + pkt.len()]).unwrap();
    assert_eq!(p.origin.unwrap().0, CLIENT);
    assert_eq!(p.ipv6.src(), teredo(CLIENT).encode());
    assert_eq!(total_drops(w.stats()), 0);

    // An indirect bubble to the other client is relayed the same way (§5.2.9).
    let b = bubble(teredo(CLIENT).encode(), teredo(OTHER).encode());
    assert!(matches!(
        from_teredo(&mut w, Instant::now(), CLIENT, &b),
        Verdict::Udp { to: OTHER, .. }
    ));
    // A client whose embedded mapping is not global is never sent to.
    let private = teredo("10.1.2.3:5000".parse().unwrap()).encode();
    assert_eq!(
        from_teredo(
            &mut w,
            Instant::now(),
            CLIENT,
            &echo(teredo(CLIENT).encode(), private, 0)
        ),
        Verdict::Drop(DropReason::NonGlobalMapping)
    );
}

// Brief §1.3 and §1.8: RFC 6081 puts trailers after a bubble's IPv6 header; a relayed
// bubble keeps every byte after it, as Miredo forwards the whole received length.
#[test]
fn rfc6081_relayed_bubbles_keep_their_trailers() {
    let mut w = worker(false);
    let now = Instant::now();
    let trailer = [0x01, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];
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
