use super::*;

const IPHTTPS_POOL: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0, 0, 0, 0, 0);
const ALICE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0x5, 0, 0, 0, 0xa);
const BOB: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0x6, 0, 0, 0, 0xb);

fn slash64(a: Ipv6Addr) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(a) & !u128::from(u64::MAX))
}

/// A worker with IP-HTTPS on and BOB's connection registered.
fn iphttps_worker(open: bool) -> (Worker, Arc<Kept>) {
    let mut cfg = config(open);
    cfg.iphttps_prefix = Some(Prefix::new(IPHTTPS_POOL, 48));
    let w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
    let bob = Arc::new(Kept::default());
    w.shared()
        .iphttps_clients()
        .insert(slash64(BOB), Arc::clone(&bob) as Arc<dyn ClientQueue>);
    (w, bob)
}

fn from_iphttps(w: &mut Worker, now: Instant, bytes: &[u8]) -> (Verdict, Vec<u8>) {
    let (mut buf, start, end) = framed(bytes);
    let src = ipv6::Packet::new_checked(bytes).map_or(ALICE, |p| p.src());
    let v = iphttps_packet(w, now, slash64(src), &mut buf, start, end);
    (v, buf)
}

#[test]
fn iphttps_client_reaches_corpnet_through_the_same_policy_step() {
    let (mut w, _) = iphttps_worker(false);
    let now = Instant::now();
    let (v, _) = from_iphttps(&mut w, now, &udp(ALICE, CORP_HOST, 100));
    assert_eq!(v, Verdict::Drop(DropReason::NoSa));
    let ping = echo(ALICE, CORP_ADDRESS, 8);
    let (v, _) = from_iphttps(&mut w, now, &ping);
    assert_eq!(
        v,
        Verdict::Tun {
            start: HEADROOM,
            end: HEADROOM + ping.len()
        }
    );
    let (mut w, _) = iphttps_worker(true);
    let mut pkt = udp(ALICE, CORP_HOST, 100);
    pkt.extend_from_slice(b"trailing bytes are not the packet's");
    let (v, _) = from_iphttps(&mut w, now, &pkt);
    assert_eq!(
        v,
        Verdict::Tun {
            start: HEADROOM,
            end: HEADROOM + 100
        }
    );
    assert_eq!(w.stats().drops(DropReason::NoSa), 0);
}

#[test]
fn iphttps_to_iphttps_is_queued_for_the_owner_of_the_64_without_ipsec() {
    let (mut w, bob) = iphttps_worker(true);
    let now = Instant::now();
    let pkt = udp(ALICE, BOB, 120);
    let (v, _) = from_iphttps(&mut w, now, &pkt);
    assert_eq!(v, Verdict::Consumed);
    assert_eq!(*bob.0.lock().unwrap(), vec![pkt]);
    assert_eq!(w.stats().packets(Side::Internet, Direction::Tx), 1);
    // A /64 no connection owns.
    let nobody = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0x7, 0, 0, 0, 1);
    let (v, _) = from_iphttps(&mut w, now, &udp(ALICE, nobody, 60));
    assert_eq!(v, Verdict::Drop(DropReason::NoRoute));
    assert_eq!(total_drops(w.stats()), 1);
}

/// A link holding a /64 of the HA peer's IP-HTTPS prefix (a client of the dead peer given its
/// /64 back) is reached from the TUN and from another client, as a link of the node's own
/// prefix is; without `iphttps_peer_prefix` nothing is routed there.
#[test]
fn a_64_of_the_peers_prefix_is_routed_to_its_link() {
    let carol = Ipv6Addr::new(0x2001, 0xdb8, 0x2, 0x5, 0, 0, 0, 0xc);
    let now = Instant::now();
    for peer in [true, false] {
        let mut cfg = config(true);
        cfg.iphttps_prefix = Some(Prefix::new(IPHTTPS_POOL, 48));
        cfg.iphttps_peer_prefix =
            peer.then(|| Prefix::new(Ipv6Addr::new(0x2001, 0xdb8, 0x2, 0, 0, 0, 0, 0), 48));
        let mut w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
        let link = Arc::new(Kept::default());
        w.shared()
            .iphttps_clients()
            .insert(slash64(carol), Arc::clone(&link) as Arc<dyn ClientQueue>);
        let down = udp(CORP_HOST, carol, 120);
        let across = udp(ALICE, carol, 100);
        let (v, _) = from_iphttps(&mut w, now, &across);
        if peer {
            assert_eq!(from_tun(&mut w, now, &down), Verdict::Consumed);
            assert_eq!(v, Verdict::Consumed);
            assert_eq!(*link.0.lock().unwrap(), vec![across, down]);
            assert_eq!(total_drops(w.stats()), 0);
        } else {
            assert_eq!(v, Verdict::Drop(DropReason::NoRoute));
            assert!(link.0.lock().unwrap().is_empty());
        }
    }
}

#[test]
fn teredo_client_reaches_an_iphttps_client_without_ipsec() {
    let (mut w, bob) = iphttps_worker(true);
    let pkt = udp(teredo(CLIENT).encode(), BOB, 200);
    assert_eq!(
        from_teredo(&mut w, Instant::now(), CLIENT, &pkt),
        Verdict::Consumed
    );
    assert_eq!(*bob.0.lock().unwrap(), vec![pkt]);
    assert_eq!(total_drops(w.stats()), 0);
}

// RFC 4380 §5.4.1: to a Teredo client an IP-HTTPS client is a native source, relayed like
// corporate traffic: straight to a trusted peer, else queued behind a bubble.
#[test]
fn rfc4380_5_4_1_iphttps_client_reaches_a_teredo_client_through_the_relay_without_ipsec() {
    let (mut w, _) = iphttps_worker(true);
    let now = Instant::now();
    let client = teredo(CLIENT).encode();
    let pkt = udp(ALICE, client, 300);
    let (v, _) = from_iphttps(&mut w, now, &pkt);
    assert_eq!(v, Verdict::Consumed);
    let t = w.poll_transmit().expect("a bubble to the client");
    assert!(tw::Packet::parse(&t.data).unwrap().ipv6.is_bubble());
    assert_eq!(t.to, CLIENT);
    // The client's bubble releases the queued packet as it was.
    let b = bubble(client, server_link_local());
    assert_eq!(from_teredo(&mut w, now, CLIENT, &b), Verdict::Consumed);
    assert_eq!(w.poll_transmit().map(|t| t.data), Some(pkt.clone()));
    assert!(w.poll_transmit().is_none());
    // Trusted now: sent in place, untouched.
    w.start_batch();
    let (v, buf) = from_iphttps(&mut w, now, &pkt);
    assert_eq!(
        v,
        Verdict::Udp {
            from: PRIMARY,
            to: CLIENT,
            start: HEADROOM,
            end: HEADROOM + pkt.len(),
            gso: Gso::Start,
        }
    );
    assert_eq!(&buf[HEADROOM..HEADROOM + pkt.len()], &pkt[..]);
    assert_eq!(total_drops(w.stats()), 0);
}

#[test]
fn iphttps_bad_destinations_and_garbage_are_dropped_once() {
    let (mut w, _) = iphttps_worker(true);
    let now = Instant::now();
    let (v, _) = from_iphttps(&mut w, now, &udp(ALICE, "ff02::1".parse().unwrap(), 60));
    assert_eq!(v, Verdict::Drop(DropReason::BadDestination));
    // The connection judges first: 20 bytes are no IPv6 header.
    let (v, _) = from_iphttps(&mut w, now, &[0x60; 20]);
    assert_eq!(v, Verdict::Drop(DropReason::Malformed));
    let (v, _) = from_iphttps(&mut w, now, &udp(ALICE, "2a00::1".parse().unwrap(), 60));
    assert_eq!(v, Verdict::Drop(DropReason::NoRoute));
    assert_eq!(total_drops(w.stats()), 3);
    // Counted as received by the worker, as a Teredo datagram is, whatever became of it.
    assert_eq!(w.stats().packets(Side::Internet, Direction::Rx), 3);
}

#[test]
fn connection_drops_map_to_their_labels() {
    use gate64_iphttps::server::DropReason as C;
    let cases = [
        (C::SpoofedSource, "spoofed_source"),
        (C::Malformed, "malformed"),
        (C::Multicast, "bad_destination"),
        (C::LinkLocal, "bad_destination"),
        (C::NotForwardable, "bad_destination"),
        (C::UnspecifiedSource, "bad_destination"),
        (C::InvalidRouterSolicitation, "unhandled_icmpv6"),
        (C::InvalidNeighborSolicitation, "unhandled_icmpv6"),
        (C::NotLinkUp, "no_route"),
        (C::NotForClient, "no_route"),
        (C::ReplyBuffer, "tx_error"),
    ];
    for (c, label) in cases {
        assert_eq!(DropReason::from(c).as_str(), label, "{c:?}");
    }
}
