//! Reassembly of fragments to the IPsec endpoint: what is put together, what is refused and
//! under which reason, and that one client's fragments never cost another client its own.

use super::ipsec::{ENDPOINT, fragments, ipsec_worker};
use super::*;
use crate::reassembly::{MAX_FRAGMENTS, MIN_FRAGMENT, PER_CLIENT, SLOTS, TIMEOUT};

/// The Teredo client with NAT mapping `198.51.100.10:port`.
fn mapping(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(*CLIENT.ip(), port)
}

/// A fragment from the Teredo client at `from` to the endpoint: bytes `offset..offset + len`
/// of datagram `id`'s fragmentable part (UDP), M = `more`. Each data byte is its offset in the
/// datagram, so what is put together can be checked, except the UDP destination port: 500, so
/// the whole datagram is IKE, which the road sends to the TUN without an SA.
fn frag(from: SocketAddrV4, id: u32, offset: usize, len: usize, more: bool) -> Vec<u8> {
    let mut b = vec![0u8; ipv6::HEADER_LEN + ipv6::FRAG_HEADER_LEN + len];
    let plen = u16::try_from(ipv6::FRAG_HEADER_LEN + len).unwrap();
    let src = teredo(from).encode();
    ipv6::emit_header(&mut b, plen, ipv6::NH_FRAGMENT, 64, &src, &ENDPOINT).unwrap();
    ipv6::FragmentRepr {
        next_header: ipv6::NH_UDP,
        offset: u16::try_from(offset / 8).unwrap(),
        more,
        ident: id,
    }
    .emit(&mut b[ipv6::HEADER_LEN..])
    .unwrap();
    for (i, d) in b[ipv6::HEADER_LEN + ipv6::FRAG_HEADER_LEN..]
        .iter_mut()
        .enumerate()
    {
        *d = match offset + i {
            2 => 0x01,
            3 => 0xf4,
            n => n as u8,
        };
    }
    b
}

/// IKE from the Teredo client at `from` to the endpoint with `len` bytes of UDP payload: a
/// packet the road sends to the TUN without an SA, so a reassembled one shows up in
/// `poll_tun_write`.
fn ike(from: SocketAddrV4, len: usize) -> Vec<u8> {
    let total = ipv6::HEADER_LEN + 8 + len;
    let mut b = udp_ports(teredo(from).encode(), ENDPOINT, 500, 500, total);
    for (i, d) in b[ipv6::HEADER_LEN + 8..].iter_mut().enumerate() {
        *d = (i % 251) as u8;
    }
    b
}

fn send(w: &mut Worker, now: Instant, from: SocketAddrV4, pkt: &[u8]) -> Verdict {
    from_teredo(w, now, from, pkt)
}

/// Starts datagram `id` of the client at `from`: one non-final fragment of 1232 bytes.
fn start(w: &mut Worker, now: Instant, from: SocketAddrV4, id: u32) -> Verdict {
    send(w, now, from, &frag(from, id, 0, 1232, true))
}

#[test]
fn fragments_in_order_and_out_of_order_make_the_original_packet() {
    let mut w = ipsec_worker(false);
    let now = Instant::now();
    let whole = ike(CLIENT, 1400);
    for (id, reorder) in [(1, false), (2, true)] {
        let mut parts = fragments(&whole, 1232, id);
        assert_eq!(parts.len(), 2);
        if reorder {
            parts.reverse();
        }
        for p in &parts {
            assert_eq!(send(&mut w, now, CLIENT, p), Verdict::Consumed);
        }
        assert_eq!(w.poll_tun_write().as_deref(), Some(&whole[..]));
    }
    // Three fragments, the middle one last.
    let whole = ike(CLIENT, 3000);
    let parts = fragments(&whole, 1232, 3);
    for i in [0, 2, 1] {
        assert_eq!(send(&mut w, now, CLIENT, &parts[i]), Verdict::Consumed);
    }
    assert_eq!(w.poll_tun_write().as_deref(), Some(&whole[..]));
    assert_eq!(w.poll_tun_write(), None);
    assert_eq!(total_drops(w.stats()), 0);
    assert_eq!(w.reassembly.in_progress(), 0);
}

#[test]
fn an_exact_duplicate_is_dropped_alone_and_the_datagram_completes() {
    let mut w = ipsec_worker(false);
    let now = Instant::now();
    let whole = ike(CLIENT, 3000);
    let parts = fragments(&whole, 1232, 7);
    for i in [0, 1, 1, 0, 2] {
        let _ = send(&mut w, now, CLIENT, &parts[i]);
    }
    assert_eq!(w.poll_tun_write().as_deref(), Some(&whole[..]));
    assert_eq!(w.stats().drops(DropReason::FragDuplicate), 2);
    assert_eq!(total_drops(w.stats()), 2);
}

#[test]
fn an_overlap_drops_the_datagram_and_counts_every_fragment_it_kept() {
    let mut w = ipsec_worker(false);
    let now = Instant::now();
    // Behind the first fragment, overlapping its end (its predecessor).
    assert_eq!(start(&mut w, now, CLIENT, 1), Verdict::Consumed);
    assert_eq!(
        send(&mut w, now, CLIENT, &frag(CLIENT, 1, 1224, 600, false)),
        Verdict::Drop(DropReason::FragOverlap)
    );
    assert_eq!(w.stats().drops(DropReason::FragOverlap), 2);
    // In front of a kept fragment, running into it (its successor), same offset other
    // length too.
    let late = frag(CLIENT, 2, 1232, 1232, true);
    for (id, early) in [
        (2u32, frag(CLIENT, 2, 0, 1240, true)),
        (3, frag(CLIENT, 3, 1232, 512, true)),
    ] {
        let mut late = late.clone();
        late[44..48].copy_from_slice(&id.to_be_bytes());
        assert_eq!(send(&mut w, now, CLIENT, &late), Verdict::Consumed);
        assert_eq!(
            send(&mut w, now, CLIENT, &early),
            Verdict::Drop(DropReason::FragOverlap)
        );
    }
    assert_eq!(w.stats().drops(DropReason::FragOverlap), 6);
    // The rest of a dropped datagram alone is no datagram.
    assert_eq!(
        send(&mut w, now, CLIENT, &frag(CLIENT, 1, 1232, 100, false)),
        Verdict::Consumed
    );
    assert_eq!(w.poll_tun_write(), None);
    assert_eq!(total_drops(w.stats()), 6);
    assert_eq!(w.reassembly.in_progress(), 1);
}

#[test]
fn tiny_and_empty_fragments_are_refused_without_state() {
    let mut w = ipsec_worker(false);
    let now = Instant::now();
    for (len, more) in [(8, true), (MIN_FRAGMENT - 8, true), (0, true), (0, false)] {
        for offset in [0, 1232] {
            assert_eq!(
                send(&mut w, now, CLIENT, &frag(CLIENT, 1, offset, len, more)),
                Verdict::Drop(DropReason::FragTooSmall),
                "{len} bytes at {offset}, more: {more}"
            );
        }
    }
    assert_eq!(w.reassembly.in_progress(), 0);
    assert_eq!(w.stats().drops(DropReason::FragTooSmall), 8);
    // The floor itself is accepted, and a short last fragment.
    for (offset, len, more) in [(0, MIN_FRAGMENT, true), (MIN_FRAGMENT, 1, false)] {
        let f = frag(CLIENT, 2, offset, len, more);
        assert_eq!(send(&mut w, now, CLIENT, &f), Verdict::Consumed);
    }
    assert_eq!(total_drops(w.stats()), 8);
    assert_eq!(
        w.poll_tun_write().map(|p| p.len()),
        Some(40 + MIN_FRAGMENT + 1)
    );
}

#[test]
fn more_fragments_than_the_cap_drop_the_datagram() {
    let mut w = ipsec_worker(false);
    let now = Instant::now();
    for i in 0..MAX_FRAGMENTS {
        let f = frag(CLIENT, 9, i * MIN_FRAGMENT, MIN_FRAGMENT, true);
        assert_eq!(send(&mut w, now, CLIENT, &f), Verdict::Consumed, "{i}");
    }
    let f = frag(CLIENT, 9, MAX_FRAGMENTS * MIN_FRAGMENT, 8, false);
    assert_eq!(
        send(&mut w, now, CLIENT, &f),
        Verdict::Drop(DropReason::FragTooMany)
    );
    assert_eq!(
        w.stats().drops(DropReason::FragTooMany),
        MAX_FRAGMENTS as u64 + 1
    );
    assert_eq!(w.reassembly.in_progress(), 0);
}

#[test]
fn a_client_over_its_share_gives_up_its_own_oldest() {
    let mut w = ipsec_worker(false);
    let t0 = Instant::now();
    let other = mapping(50_000);
    assert_eq!(start(&mut w, t0, other, 1), Verdict::Consumed);
    for id in 0..PER_CLIENT as u32 + 2 {
        let now = t0 + Duration::from_millis(u64::from(id));
        assert_eq!(start(&mut w, now, CLIENT, id), Verdict::Consumed);
    }
    assert_eq!(w.stats().drops(DropReason::FragClientLimit), 2);
    assert_eq!(w.reassembly.in_progress(), PER_CLIENT + 1);
    // The two oldest were given up, the newer ones and the other client's kept.
    let rest = |id| frag(CLIENT, id, 1232, 8, false);
    assert_eq!(send(&mut w, t0, CLIENT, &rest(5)), Verdict::Consumed);
    assert!(w.poll_tun_write().is_some(), "datagram 5 was kept");
    assert_eq!(send(&mut w, t0, CLIENT, &rest(0)), Verdict::Consumed);
    assert!(w.poll_tun_write().is_none(), "datagram 0 was given up");
    let f = frag(other, 1, 1232, 8, false);
    assert_eq!(send(&mut w, t0, other, &f), Verdict::Consumed);
    assert!(w.poll_tun_write().is_some(), "the other client's was kept");
}

#[test]
fn a_full_table_refuses_newcomers_and_never_evicts_another_clients_datagram() {
    let mut w = ipsec_worker(false);
    let t0 = Instant::now();
    // Enough clients at their share to fill the table.
    let clients: Vec<_> = (0..SLOTS / PER_CLIENT)
        .map(|i| mapping(40_000 + i as u16))
        .collect();
    for (i, &c) in clients.iter().enumerate() {
        for id in 0..PER_CLIENT as u32 {
            let now = t0 + Duration::from_millis(i as u64);
            assert_eq!(start(&mut w, now, c, id), Verdict::Consumed);
        }
    }
    assert_eq!(w.reassembly.in_progress(), SLOTS);
    let newcomer = mapping(41_000);
    let now = t0 + TIMEOUT / 2;
    assert_eq!(
        start(&mut w, now, newcomer, 1),
        Verdict::Drop(DropReason::FragTableFull)
    );
    // A client with its share still starts a new one, in place of its own oldest.
    assert_eq!(start(&mut w, now, clients[1], 99), Verdict::Consumed);
    assert_eq!(w.stats().drops(DropReason::FragClientLimit), 1);
    assert_eq!(total_drops(w.stats()), 2);
    // Everyone else's datagrams are intact: each completes.
    for (i, &c) in clients.iter().enumerate() {
        let ids = if i == 1 {
            1..PER_CLIENT as u32
        } else {
            0..PER_CLIENT as u32
        };
        for id in ids {
            let f = frag(c, id, 1232, 8, false);
            assert_eq!(send(&mut w, now, c, &f), Verdict::Consumed);
            assert!(w.poll_tun_write().is_some(), "client {i} datagram {id}");
        }
    }
}

#[test]
fn a_newcomer_takes_the_place_of_an_expired_datagram() {
    let mut w = ipsec_worker(false);
    let t0 = Instant::now();
    for i in 0..SLOTS {
        let c = mapping(40_000 + i as u16);
        assert_eq!(start(&mut w, t0, c, 1), Verdict::Consumed);
    }
    let newcomer = mapping(41_000);
    assert_eq!(
        start(&mut w, t0 + TIMEOUT / 2, newcomer, 1),
        Verdict::Drop(DropReason::FragTableFull)
    );
    assert_eq!(start(&mut w, t0 + TIMEOUT, newcomer, 1), Verdict::Consumed);
    assert_eq!(w.stats().drops(DropReason::FragTimeout), SLOTS as u64);
    assert_eq!(w.reassembly.in_progress(), 1);
}

#[test]
fn an_expired_datagram_is_counted_on_the_tick_without_another_fragment() {
    let mut w = ipsec_worker(false);
    let t0 = Instant::now();
    let parts = fragments(&ike(CLIENT, 3000), 1232, 4);
    for p in &parts[..2] {
        assert_eq!(send(&mut w, t0, CLIENT, p), Verdict::Consumed);
    }
    w.handle_timeout(t0 + TIMEOUT - Duration::from_millis(1), 0, 1);
    assert_eq!(total_drops(w.stats()), 0);
    assert_eq!(w.reassembly.in_progress(), 1);
    w.handle_timeout(t0 + TIMEOUT, 0, 1);
    assert_eq!(w.stats().drops(DropReason::FragTimeout), 2);
    assert_eq!(w.reassembly.in_progress(), 0);
    // The last fragment, late, starts a datagram of its own that never completes.
    let late = t0 + TIMEOUT + Duration::from_millis(1);
    assert_eq!(send(&mut w, late, CLIENT, &parts[2]), Verdict::Consumed);
    assert_eq!(w.poll_tun_write(), None);
    // Expired on the next fragment too, without a tick.
    let f = frag(CLIENT, 5, 0, 1232, true);
    assert_eq!(send(&mut w, late + TIMEOUT, CLIENT, &f), Verdict::Consumed);
    assert_eq!(w.stats().drops(DropReason::FragTimeout), 3);
    assert_eq!(total_drops(w.stats()), 3);
}

#[test]
fn an_iphttps_clients_expired_datagram_is_counted_on_its_next_packet() {
    let mut cfg = super::ipsec::ipsec_config(false);
    cfg.iphttps_prefix = Some(Prefix::new("2001:db8:1::".parse().unwrap(), 48));
    let mut w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
    let prefix: Ipv6Addr = "2001:db8:1:6::".parse().unwrap();
    let me: Ipv6Addr = "2001:db8:1:6::b".parse().unwrap();
    let mut f = frag(CLIENT, 1, 0, 1232, true);
    f[8..24].copy_from_slice(&me.octets());
    let t0 = Instant::now();
    let end = f.len();
    let v = iphttps_packet(&mut w, t0, prefix, &mut f.clone(), 0, end);
    assert_eq!(v, Verdict::Consumed);
    let other = udp_ports(me, CORP_HOST, 1, 80, 60);
    let end = other.len();
    let _ = iphttps_packet(&mut w, t0 + TIMEOUT, prefix, &mut other.clone(), 0, end);
    assert_eq!(w.stats().drops(DropReason::FragTimeout), 1);
}

#[test]
fn the_largest_datagram_is_put_together_and_one_byte_more_is_refused() {
    let mut w = ipsec_worker(false);
    let now = Instant::now();
    let whole = ike(CLIENT, 65_535 - 8);
    let parts = fragments(&whole, 1232, 11);
    assert_eq!(parts.len(), 54);
    for p in parts.iter().rev() {
        assert_eq!(send(&mut w, now, CLIENT, p), Verdict::Consumed);
    }
    assert_eq!(w.poll_tun_write().as_deref(), Some(&whole[..]));
    assert_eq!(total_drops(w.stats()), 0);
    // The last offset there is, with more than 7 bytes behind it.
    let f = frag(CLIENT, 12, 65_528, 8, false);
    assert_eq!(
        send(&mut w, now, CLIENT, &f),
        Verdict::Drop(DropReason::Malformed)
    );
}

#[test]
fn malformed_fragment_headers_are_refused() {
    let mut w = ipsec_worker(false);
    let now = Instant::now();
    // The Fragment header cut short.
    let mut short = frag(CLIENT, 1, 0, 0, false);
    short.truncate(ipv6::HEADER_LEN + 4);
    short[4..6].copy_from_slice(&4u16.to_be_bytes());
    assert_eq!(
        send(&mut w, now, CLIENT, &short),
        Verdict::Drop(DropReason::Truncated)
    );
    // A non-final fragment whose length is no multiple of 8.
    assert_eq!(
        send(&mut w, now, CLIENT, &frag(CLIENT, 1, 0, 1236, true)),
        Verdict::Drop(DropReason::Malformed)
    );
    // Lengths that contradict the last fragment: data past its end, a second last fragment
    // ending elsewhere, a last fragment ending short of data received.
    for (id, first, second) in [
        (2, (1232, 100, false), (0, 2464, true)),
        (3, (1232, 100, false), (0, 1240, false)),
        (4, (1232, 1232, true), (0, 1232, false)),
    ] {
        let a = frag(CLIENT, id, first.0, first.1, first.2);
        assert_eq!(send(&mut w, now, CLIENT, &a), Verdict::Consumed);
        let b = frag(CLIENT, id, second.0, second.1, second.2);
        assert_eq!(
            send(&mut w, now, CLIENT, &b),
            Verdict::Drop(DropReason::Malformed),
            "datagram {id}"
        );
    }
    assert_eq!(w.reassembly.in_progress(), 0);
    assert_eq!(w.stats().drops(DropReason::Malformed), 1 + 3 * 2);
}

#[test]
fn a_fragment_inside_a_fragment_is_refused() {
    let mut w = ipsec_worker(false);
    let now = Instant::now();
    let mut f = frag(CLIENT, 1, 0, 1232, true);
    f[ipv6::HEADER_LEN] = ipv6::NH_FRAGMENT;
    assert_eq!(
        send(&mut w, now, CLIENT, &f),
        Verdict::Drop(DropReason::Malformed)
    );
    assert_eq!(w.reassembly.in_progress(), 0);
}

#[test]
fn an_atomic_fragment_takes_the_road_at_once() {
    let mut w = ipsec_worker(false);
    let whole = ike(CLIENT, 200);
    let parts = fragments(&whole, 1232, 21);
    assert_eq!(parts.len(), 1);
    assert_eq!(
        send(&mut w, Instant::now(), CLIENT, &parts[0]),
        Verdict::Consumed
    );
    assert_eq!(w.poll_tun_write().as_deref(), Some(&whole[..]));
    assert_eq!(w.reassembly.in_progress(), 0);
}

proptest! {
    /// Whatever fragments arrive, in whatever order: nothing panics, each is either kept
    /// (`Consumed`) or counted once, and every fragment of a datagram given up is counted.
    #[test]
    fn any_fragments_are_kept_or_counted(
        frags in prop::collection::vec(
            (0u32..3, 0usize..200, prop::sample::select(vec![0usize, 8, 512, 1232, 1300]),
                any::<bool>(), 0u64..7000),
            1..120,
        )
    ) {
        let mut w = ipsec_worker(false);
        let t0 = Instant::now();
        let (mut consumed, mut delivered) = (0u64, 0u64);
        for (id, offset8, len, more, ms) in frags {
            let now = t0 + Duration::from_millis(ms);
            let f = frag(CLIENT, id, offset8 * 8, len, more);
            match send(&mut w, now, CLIENT, &f) {
                Verdict::Consumed => consumed += 1,
                Verdict::Drop(_) => {}
                v => prop_assert!(false, "{v:?}"),
            }
            while w.poll_tun_write().is_some() {
                delivered += 1;
            }
        }
        w.handle_timeout(t0 + Duration::from_secs(60), 0, 1);
        prop_assert_eq!(w.reassembly.in_progress(), 0);
        // Kept fragments either went out in a datagram or are counted as dropped now.
        let dropped_later: u64 = [
            DropReason::FragTimeout,
            DropReason::FragClientLimit,
        ]
        .iter()
        .map(|r| w.stats().drops(*r))
        .sum();
        prop_assert!(delivered <= consumed);
        prop_assert!(dropped_later <= consumed);
    }
}
