use super::*;

#[test]
fn echo_checksum_helper_matches_wire() {
    // Guards the fixtures above: emit_echo's checksum verifies.
    let e = echo(teredo(CLIENT).encode(), CORP_ADDRESS, 8);
    let p = ipv6::Packet::new_checked(&e).unwrap();
    assert_eq!(
        checksum::upper_layer_v6(&p.src(), &p.dst(), ipv6::NH_ICMPV6, p.payload()),
        0
    );
}

/// Inputs that get past the outer parsers often: an optional auth header and origin
/// indication, then an IPv6 header with addresses drawn from the interesting classes.
fn teredo_ish() -> impl Strategy<Value = Vec<u8>> {
    let addr = prop_oneof![
        Just(teredo(CLIENT).encode()),
        Just(teredo(OTHER).encode()),
        Just(CORP_HOST),
        Just(CORP_ADDRESS),
        Just(icmpv6::ALL_ROUTERS),
        Just(server_link_local()),
        Just("fe80::ffff:ffff:ffff".parse().unwrap()),
        any::<u128>().prop_map(Ipv6Addr::from),
    ];
    (
        any::<bool>(),
        any::<bool>(),
        addr.clone(),
        addr,
        prop_oneof![Just(58u8), Just(59), Just(17), any::<u8>()],
        proptest::collection::vec(any::<u8>(), 0..200),
        0u16..300,
    )
        .prop_map(|(auth, origin, src, dst, nh, payload, plen)| {
            let mut b = Vec::new();
            if auth {
                b.extend_from_slice(&[0, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0]);
            }
            if origin {
                b.extend_from_slice(&[0, 0, 0xf2, 0x27, 0x3f, 0xff, 0xfd, 0xfe]);
            }
            let mut h = [0u8; 40];
            ipv6::emit_header(&mut h, plen, nh, 64, &src, &dst).unwrap();
            b.extend_from_slice(&h);
            b.extend_from_slice(&payload);
            b
        })
}

fn any_input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..2000),
        teredo_ish()
    ]
}

/// Forwarded verdicts stay inside the buffer; a drop counts exactly once, under its own
/// reason; anything else counts none.
fn check_accounting(before: &[u64], s: &Stats, v: Verdict, len: usize) {
    let after: Vec<u64> = DropReason::ALL.iter().map(|d| s.drops(*d)).collect();
    let delta: u64 = after.iter().zip(before).map(|(a, b)| a - b).sum();
    match v {
        Verdict::Drop(d) => {
            assert_eq!(delta, 1, "{v:?}");
            let i = DropReason::ALL.iter().position(|x| *x == d).unwrap();
            assert_eq!(after[i] - before[i], 1, "{v:?}");
        }
        Verdict::Tun { start, end }
        | Verdict::Udp { start, end, .. }
        | Verdict::Native { start, end, .. } => {
            assert_eq!(delta, 0, "{v:?}");
            assert!(start <= end && end <= len, "{v:?}");
        }
        Verdict::Consumed => assert_eq!(delta, 0),
    }
}

proptest! {
    #[test]
    fn handle_native_esp_never_panics_and_counts_each_drop_once(
        bytes in any_input(),
        ip in any::<u32>(),
        port in any::<u16>(),
        with_sadb in any::<bool>(),
    ) {
        let mut w = if with_sadb {
            super::ipsec::with_sa(super::ipsec::INNER, true).0
        } else {
            worker(false)
        };
        let remote = std::net::SocketAddr::from((Ipv4Addr::from(ip), port));
        let local = std::net::SocketAddr::from(([192, 0, 2, 10], 4500));
        let (mut buf, start, end) = framed(&bytes);
        let len = buf.len();
        let before: Vec<u64> = DropReason::ALL.iter().map(|d| w.stats().drops(*d)).collect();
        let v = w.handle_native_esp(Instant::now(), local, remote, &mut buf, start, end);
        check_accounting(&before, w.stats(), v, len);
        prop_assert_eq!(w.stats().packets(Side::Internet, Direction::Rx), 1);
    }

    #[test]
    fn handle_teredo_never_panics_and_counts_each_drop_once(
        bytes in any_input(),
        ip in any::<u32>(),
        port in any::<u16>(),
        remote_is_client in any::<bool>(),
        allow in any::<bool>(),
    ) {
        let mut w = worker(allow);
        let remote = if remote_is_client {
            CLIENT
        } else {
            SocketAddrV4::new(Ipv4Addr::from(ip), port)
        };
        let (mut buf, start, end) = framed(&bytes);
        let len = buf.len();
        let before: Vec<u64> = DropReason::ALL.iter().map(|d| w.stats().drops(*d)).collect();
        let v = w.handle_teredo(Instant::now(), PRIMARY, remote, &mut buf, start, end);
        check_accounting(&before, w.stats(), v, len);
        prop_assert_eq!(w.stats().packets(Side::Internet, Direction::Rx), 1);
        prop_assert_eq!(w.stats().bytes(Side::Internet, Direction::Rx), bytes.len() as u64);
    }

    #[test]
    fn handle_tun_never_panics_and_counts_each_drop_once(
        bytes in any_input(),
        trusted in any::<bool>(),
    ) {
        let mut w = worker(false);
        let now = Instant::now();
        if trusted {
            from_teredo(&mut w, now, CLIENT, &bubble(teredo(CLIENT).encode(), server_link_local()));
        }
        let (mut buf, start, end) = framed(&bytes);
        let len = buf.len();
        let before: Vec<u64> = DropReason::ALL.iter().map(|d| w.stats().drops(*d)).collect();
        let v = w.handle_tun(now, &mut buf, start, end);
        check_accounting(&before, w.stats(), v, len);
        // The packet is never modified on the way to a client.
        if let Verdict::Udp { start: s, end: e, .. } = v {
            prop_assert_eq!(&buf[s..e], &bytes[..e - s]);
        }
        while w.poll_transmit().is_some() {}
        w.handle_timeout(now + Duration::from_secs(60), 0, 1);
    }
}
