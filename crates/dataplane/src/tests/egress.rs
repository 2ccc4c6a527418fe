//! From the TUN to the clients: the Teredo relay (RFC 4380 §5.4.1) with the lab switch on,
//! so that no SA is needed; what `require = true` lets through without one is in `ipsec.rs`.

use super::*;

// RFC 4380 §5.4.1 case 1: trusted peer, send straight to its mapping, packet untouched.
#[test]
fn rfc4380_5_4_1_tun_to_trusted_client_is_sent_untouched() {
    let mut w = worker(true);
    let now = Instant::now();
    let me = teredo(CLIENT).encode();
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &bubble(me, server_link_local())),
        Verdict::Consumed
    );
    let pkt = udp(CORP_HOST, me, 1280);
    let (mut buf, start, end) = framed(&pkt);
    let v = w.handle_tun(now, &mut buf, start, end);
    assert_eq!(
        v,
        Verdict::Udp {
            from: PRIMARY,
            to: CLIENT,
            start,
            end,
            gso: Gso::Start,
        }
    );
    assert_eq!(&buf[start..end], &pkt[..]);
    assert!(w.poll_transmit().is_none());
    let s = w.stats();
    assert_eq!(s.packets(Side::Corpnet, Direction::Rx), 1);
    assert_eq!(s.bytes(Side::Corpnet, Direction::Rx), 1280);
    assert_eq!(total_drops(s), 0);
}

// RFC 4380 §5.4.1 case 3 and §5.4.2: queue, bubble, and flush on the client's bubble.
#[test]
fn rfc4380_5_4_1_tun_to_unknown_client_bubbles_then_flushes() {
    let mut w = worker(true);
    let now = Instant::now();
    let me = teredo(CLIENT).encode();
    let pkt = udp(CORP_HOST, me, 300);
    assert_eq!(from_tun(&mut w, now, &pkt), Verdict::Consumed);
    let t = w.poll_transmit().expect("bubble");
    assert!(w.poll_transmit().is_none());
    assert_eq!(t.from, PRIMARY);
    assert_eq!(t.to, CLIENT);
    assert_eq!(t.data.len(), tw::ORIGIN_LEN + ipv6::HEADER_LEN);
    let p = tw::Packet::parse(&t.data).unwrap();
    assert_eq!(
        p.origin.unwrap().0,
        SocketAddrV4::new(PRIMARY, 3544),
        "the client answers the origin indication with a direct bubble"
    );
    assert!(p.ipv6.is_bubble());
    assert_eq!(p.ipv6.src(), server_link_local());
    assert_eq!(p.ipv6.dst(), me);

    // The client's direct bubble makes it trusted and releases the queue.
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &bubble(me, server_link_local())),
        Verdict::Consumed
    );
    let t = w.poll_transmit().expect("queued packet");
    assert_eq!(
        t,
        Transmit {
            from: PRIMARY,
            to: CLIENT,
            data: pkt.clone()
        }
    );
    assert!(w.poll_transmit().is_none());
    assert!(matches!(
        from_tun(&mut w, now, &pkt),
        Verdict::Udp { to: CLIENT, .. }
    ));
    assert_eq!(total_drops(w.stats()), 0);
}

// RFC 4380 §5.4.1: repeat the bubble every 2 s, then drop the queue.
#[test]
fn rfc4380_5_4_1_bubble_retries_then_bubble_timeout() {
    let mut w = worker(true);
    let t0 = Instant::now();
    let me = teredo(CLIENT).encode();
    let pkt = udp(CORP_HOST, me, 100);
    assert_eq!(from_tun(&mut w, t0, &pkt), Verdict::Consumed);
    assert_eq!(from_tun(&mut w, t0, &pkt), Verdict::Consumed);
    let first: Vec<_> = std::iter::from_fn(|| w.poll_transmit()).collect();
    assert_eq!(first.len(), 1, "one bubble for two queued packets");

    let mut retries = Vec::new();
    for ms in (500..=7500).step_by(500) {
        w.handle_timeout(t0 + Duration::from_millis(ms), 0, 1);
        while let Some(t) = w.poll_transmit() {
            assert_eq!(t.data, first[0].data);
            assert_eq!(t.to, CLIENT);
            retries.push(ms);
        }
    }
    assert_eq!(retries, vec![2000, 4000, 6000]);
    assert_eq!(w.stats().drops(DropReason::BubbleTimeout), 0);
    w.handle_timeout(t0 + Duration::from_secs(8), 0, 1);
    assert!(w.poll_transmit().is_none());
    assert_eq!(w.stats().drops(DropReason::BubbleTimeout), 2);
    assert_eq!(total_drops(w.stats()), 2);
    // The untrusted entry is gone: the next packet starts over with a bubble.
    assert_eq!(w.shared.gauges(t0 + Duration::from_secs(8)).teredo_peers, 0);
    assert_eq!(
        from_tun(&mut w, t0 + Duration::from_secs(9), &pkt),
        Verdict::Consumed
    );
    assert!(w.poll_transmit().is_some());
}

#[test]
fn garbage_from_tun_is_malformed_or_truncated() {
    let mut w = worker(false);
    let now = Instant::now();
    // IPv4 from the TUN is NAT64's; without NAT64 nothing routes it.
    assert_eq!(
        from_tun(&mut w, now, &[0x45; 60]),
        Verdict::Drop(DropReason::NoRoute)
    );
    assert_eq!(
        from_tun(&mut w, now, &[0x75; 60]),
        Verdict::Drop(DropReason::Malformed)
    );
    assert_eq!(
        from_tun(&mut w, now, &[]),
        Verdict::Drop(DropReason::Truncated)
    );
    assert_eq!(
        from_tun(&mut w, now, &[0x60; 39]),
        Verdict::Drop(DropReason::Truncated)
    );
    let mut lying = udp(CORP_HOST, teredo(CLIENT).encode(), 100);
    lying[5] = 200;
    assert_eq!(
        from_tun(&mut w, now, &lying),
        Verdict::Drop(DropReason::Truncated)
    );
    // Out-of-range indices are a driver bug, but still only a drop.
    let mut buf = [0u8; 8];
    assert_eq!(
        w.handle_tun(now, &mut buf, 4, 100),
        Verdict::Drop(DropReason::Truncated)
    );
    assert_eq!(
        w.handle_tun(now, &mut buf, 6, 2),
        Verdict::Drop(DropReason::Truncated)
    );
    // Well-formed, but not for a Teredo client of ours.
    assert_eq!(
        from_tun(
            &mut w,
            now,
            &udp(CORP_HOST, "2001:db8:5::1".parse().unwrap(), 60)
        ),
        Verdict::Drop(DropReason::NoRoute)
    );
    let s = w.stats();
    assert_eq!(s.drops(DropReason::Malformed), 1);
    assert_eq!(s.drops(DropReason::Truncated), 5);
    assert_eq!(s.drops(DropReason::NoRoute), 2);
    assert_eq!(total_drops(s), 8);
    assert_eq!(s.packets(Side::Corpnet, Direction::Rx), 8);
}

// The segments of a TCP super-packet read from the TUN leave as one UDP GSO send: same
// socket and destination, equal sizes but a shorter last one, within the kernel's limits.
#[test]
fn datagrams_to_one_client_are_marked_for_one_gso_send() {
    let mut w = worker(true);
    let now = Instant::now();
    let me = teredo(CLIENT).encode();
    let other = teredo(OTHER).encode();
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &bubble(me, server_link_local())),
        Verdict::Consumed
    );
    assert_eq!(
        from_teredo(&mut w, now, OTHER, &bubble(other, server_link_local())),
        Verdict::Consumed
    );
    let gso = |v: Verdict| match v {
        Verdict::Udp { gso, .. } => gso,
        v => panic!("expected a datagram, got {v:?}"),
    };
    w.start_batch();
    let sizes = [1280, 1280, 1000, 1000];
    let got: Vec<Gso> = sizes
        .iter()
        .map(|&n| gso(from_tun(&mut w, now, &udp(CORP_HOST, me, n))))
        .collect();
    // After the shorter segment the send is complete.
    assert_eq!(got, [Gso::Start, Gso::Append, Gso::Append, Gso::Start]);
    // Another destination, or a larger datagram, starts a new send.
    assert_eq!(
        gso(from_tun(&mut w, now, &udp(CORP_HOST, other, 1000))),
        Gso::Start
    );
    assert_eq!(
        gso(from_tun(&mut w, now, &udp(CORP_HOST, other, 1200))),
        Gso::Start
    );
    // A new batch starts a new send.
    w.start_batch();
    assert_eq!(
        gso(from_tun(&mut w, now, &udp(CORP_HOST, other, 1200))),
        Gso::Start
    );
    // 65,000 bytes at most: 50 segments of 1280 bytes, then a new send.
    w.start_batch();
    let runs: Vec<Gso> = (0..52)
        .map(|_| gso(from_tun(&mut w, now, &udp(CORP_HOST, me, 1280))))
        .collect();
    let starts: Vec<usize> = (0..runs.len()).filter(|&i| runs[i] == Gso::Start).collect();
    assert_eq!(starts, [0, 50]);
    // 64 segments at most.
    w.start_batch();
    let runs: Vec<Gso> = (0..70)
        .map(|_| gso(from_tun(&mut w, now, &udp(CORP_HOST, me, 100))))
        .collect();
    let starts: Vec<usize> = (0..runs.len()).filter(|&i| runs[i] == Gso::Start).collect();
    assert_eq!(starts, [0, GSO_MAX_SEGMENTS]);
}
