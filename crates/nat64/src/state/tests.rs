use super::*;

const X1: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5);
const X2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 5);
const T1: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const T2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 3);
const Z1: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 24);
const Z2: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 25);
const NONE: TcpFlags = TcpFlags {
    syn: false,
    fin: false,
    rst: false,
};
const SYN: TcpFlags = TcpFlags {
    syn: true,
    fin: false,
    rst: false,
};
const FIN: TcpFlags = TcpFlags {
    syn: false,
    fin: true,
    rst: false,
};
const RST: TcpFlags = TcpFlags {
    syn: false,
    fin: false,
    rst: true,
};

fn table(shards: usize) -> Table {
    Table::new(Config {
        shards,
        hash_key: 7,
        ..Config::new(vec![T1, T2])
    })
    .unwrap()
}

#[test]
fn rfc6146_3_5_1_endpoint_independent_mapping() {
    let now = Instant::now();
    let mut t = table(1);
    let a = t
        .handle_v6(now, Proto::Udp, (X1, 2000), (Z1, 53), NONE)
        .unwrap();
    let b = t
        .handle_v6(now, Proto::Udp, (X1, 2000), (Z2, 4000), NONE)
        .unwrap();
    assert_eq!(a, b, "same BIB entry for every remote");
    assert_eq!(a.1, 2000, "port preserved when free");
    // The reply comes back to the client; an unrelated remote also may (EIF).
    assert_eq!(
        t.handle_v4(now, Proto::Udp, (Z1, 53), a, NONE),
        Ok((X1, 2000))
    );
    assert_eq!(
        t.handle_v4(
            now,
            Proto::Udp,
            (Ipv4Addr::new(198, 51, 100, 1), 9),
            a,
            NONE
        ),
        Ok((X1, 2000))
    );
    assert_eq!(
        t.handle_v4(now, Proto::Udp, (Z1, 53), (a.0, a.1 + 1), NONE),
        Err(TableError::NoBinding)
    );
    assert_eq!(
        t.poll_event(),
        Some(Event::BibCreated {
            proto: Proto::Udp,
            v6: (X1, 2000),
            v4: a
        })
    );
}

#[test]
fn rfc6146_3_5_1_1_address_dependent_filtering() {
    let now = Instant::now();
    let mut t = Table::new(Config {
        filtering: Filtering::AddressDependent,
        ..Config::new(vec![T1])
    })
    .unwrap();
    let a = t
        .handle_v6(now, Proto::Udp, (X1, 2000), (Z1, 53), NONE)
        .unwrap();
    assert_eq!(
        t.handle_v4(now, Proto::Udp, (Z1, 99), a, NONE),
        Ok((X1, 2000))
    );
    assert_eq!(
        t.handle_v4(now, Proto::Udp, (Z2, 53), a, NONE),
        Err(TableError::NoBinding)
    );
}

#[test]
fn rfc6146_3_5_1_1_paired_pooling_range_and_parity() {
    let now = Instant::now();
    let mut t = table(1);
    let a = t
        .handle_v6(now, Proto::Udp, (X1, 5000), (Z1, 1), NONE)
        .unwrap();
    // Same client, other port: same IPv4 address.
    let b = t
        .handle_v6(now, Proto::Udp, (X1, 5001), (Z1, 1), NONE)
        .unwrap();
    assert_eq!(a.0, b.0);
    // Another client wants the taken port: same parity and range, never 0.
    let c = t.handle_v6(now, Proto::Udp, (X2, a.1), (Z1, 1), NONE);
    let c = c.unwrap();
    assert_ne!(c, a);
    if c.0 == a.0 {
        assert_eq!(c.1 % 2, a.1 % 2);
    }
    assert!(c.1 >= 1024);
    // A low port is kept low when the pool has low ports.
    let mut low = Table::new(Config {
        ports: (0, 65535),
        ..Config::new(vec![T1])
    })
    .unwrap();
    low.add_static(Proto::Udp, (X2, 1), (T1, 123)).unwrap();
    let d = low
        .handle_v6(now, Proto::Udp, (X1, 123), (Z1, 1), NONE)
        .unwrap();
    assert!(d.1 < 1024 && d.1 != 0 && d.1 % 2 == 1, "{d:?}");
}

#[test]
fn pool_exhaustion() {
    let now = Instant::now();
    let mut t = Table::new(Config {
        ports: (2000, 2001),
        ..Config::new(vec![T1])
    })
    .unwrap();
    for p in [10, 11] {
        t.handle_v6(now, Proto::Udp, (X1, p), (Z1, 1), NONE)
            .unwrap();
    }
    assert_eq!(
        t.handle_v6(now, Proto::Udp, (X1, 12), (Z1, 1), NONE),
        Err(TableError::PoolExhausted)
    );
    assert_eq!(t.stats().pool_exhausted, 1);
    // Protocols have separate tables.
    assert!(
        t.handle_v6(now, Proto::Icmp, (X1, 12), (Z1, 12), NONE)
            .is_ok()
    );
}

#[test]
fn rfc6146_4_udp_and_icmp_lifetimes() {
    let now = Instant::now();
    let mut t = table(1);
    let a = t
        .handle_v6(now, Proto::Udp, (X1, 2000), (Z1, 53), NONE)
        .unwrap();
    t.handle_v6(now, Proto::Icmp, (X1, 77), (Z1, 77), NONE)
        .unwrap();
    assert_eq!(t.poll_timeout(), Some(now + Duration::from_secs(60)));
    t.handle_timeout(now + Duration::from_secs(61));
    assert_eq!(t.stats().sessions, 1, "ICMP gone after 60 s");
    // Inbound traffic refreshes the UDP session.
    let later = now + Duration::from_secs(200);
    t.handle_v4(later, Proto::Udp, (Z1, 53), a, NONE).unwrap();
    t.handle_timeout(now + Duration::from_secs(301));
    assert_eq!(t.stats().sessions, 1);
    t.handle_timeout(later + Duration::from_secs(300));
    assert_eq!(t.stats(), Stats::default());
    let ev: Vec<_> = std::iter::from_fn(|| t.poll_event()).collect();
    assert_eq!(ev.len(), 4, "two created, two deleted: {ev:?}");
    assert!(matches!(
        ev[3],
        Event::BibDeleted {
            proto: Proto::Udp,
            ..
        }
    ));
}

#[test]
fn rfc6146_3_5_2_2_tcp_state_machine() {
    let now = Instant::now();
    let mut t = table(1);
    let x = (X1, 40000);
    let z = (Z1, 443);
    assert_eq!(
        t.handle_v6(now, Proto::Tcp, x, z, NONE),
        Err(TableError::NoSession),
        "only SYN opens"
    );
    let tt = t.handle_v6(now, Proto::Tcp, x, z, SYN).unwrap();
    let sh = t.shard_of_v6(&X1);
    let st = |t: &mut Table| t.shard_mut(sh).unwrap().tcp_state(x, z);
    assert_eq!(st(&mut t), Some(TcpState::V6Init));
    t.handle_v4(now, Proto::Tcp, z, tt, SYN).unwrap();
    assert_eq!(st(&mut t), Some(TcpState::Established));
    // The V6 INIT deadline is stale now; the session lives on with TCP_EST.
    assert!(t.poll_timeout() <= Some(now + Duration::from_secs(7440)));
    t.handle_timeout(now + Duration::from_secs(241));
    assert_eq!(st(&mut t), Some(TcpState::Established));
    let now = now + Duration::from_secs(241);
    t.handle_v6(now, Proto::Tcp, x, z, RST).unwrap();
    assert_eq!(st(&mut t), Some(TcpState::Trans));
    t.handle_v4(now, Proto::Tcp, z, tt, NONE).unwrap();
    assert_eq!(st(&mut t), Some(TcpState::Established));
    t.handle_v4(now, Proto::Tcp, z, tt, FIN).unwrap();
    assert_eq!(st(&mut t), Some(TcpState::V4FinRcv));
    t.handle_v6(now, Proto::Tcp, x, z, FIN).unwrap();
    assert_eq!(st(&mut t), Some(TcpState::V4V6FinRcv));
    // Not refreshed any more: gone after TCP_TRANS.
    t.handle_v6(now + Duration::from_secs(100), Proto::Tcp, x, z, NONE)
        .unwrap();
    t.handle_timeout(now + Duration::from_secs(241));
    assert_eq!(t.stats(), Stats::default());
}

#[test]
fn rfc6146_3_5_2_2_established_expiry_goes_to_trans() {
    let now = Instant::now();
    let mut t = table(1);
    let (x, z) = ((X1, 40000), (Z1, 443));
    let tt = t.handle_v6(now, Proto::Tcp, x, z, SYN).unwrap();
    t.handle_v4(now, Proto::Tcp, z, tt, SYN).unwrap();
    let est = now + Duration::from_secs(7440);
    t.handle_timeout(est);
    let sh = t.shard_of_v6(&X1);
    assert_eq!(
        t.shard_mut(sh).unwrap().tcp_state(x, z),
        Some(TcpState::Trans)
    );
    t.handle_timeout(est + Duration::from_secs(240));
    assert_eq!(t.stats().sessions, 0);
}

#[test]
fn rfc6146_tcp_v4_syn_needs_a_binding() {
    let now = Instant::now();
    let mut t = table(1);
    assert_eq!(
        t.handle_v4(now, Proto::Tcp, (Z1, 50000), (T1, 1500), SYN),
        Err(TableError::NoBinding)
    );
    // With a static binding (port forwarding) the v4 SYN opens V4 INIT.
    t.add_static(Proto::Tcp, (X1, 80), (T1, 8080)).unwrap();
    assert_eq!(
        t.handle_v4(now, Proto::Tcp, (Z1, 50000), (T1, 8080), SYN),
        Ok((X1, 80))
    );
    let sh = t.shard_of_v6(&X1);
    assert_eq!(
        t.shard_mut(sh).unwrap().tcp_state((X1, 80), (Z1, 50000)),
        Some(TcpState::V4Init)
    );
    t.handle_v6(now, Proto::Tcp, (X1, 80), (Z1, 50000), SYN)
        .unwrap();
    assert_eq!(
        t.shard_mut(sh).unwrap().tcp_state((X1, 80), (Z1, 50000)),
        Some(TcpState::Established)
    );
    // Static entries outlive their sessions.
    t.handle_timeout(now + Duration::from_secs(100_000));
    assert_eq!(t.stats().bib_entries, 1);
}

#[test]
fn sharding_routes_both_directions() {
    let now = Instant::now();
    let mut t = table(4);
    for i in 0..200u16 {
        let x6 = Ipv6Addr::new(0x2001, 0xdb8, i, 0, 0, 0, 0, 1);
        let a = t
            .handle_v6(now, Proto::Udp, (x6, 1000 + i), (Z1, 53), NONE)
            .unwrap();
        assert_eq!(t.shard_of_v4(a.1), t.shard_of_v6(&x6));
        assert_eq!(
            t.handle_v4(now, Proto::Udp, (Z1, 53), a, NONE),
            Ok((x6, 1000 + i))
        );
    }
    // A static entry pins its client to the port's shard.
    let x6 = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
    t.add_static(Proto::Udp, (x6, 53), (T1, 5353)).unwrap();
    assert_eq!(t.shard_of_v6(&x6), t.shard_of_v4(5353));
    let b = t
        .handle_v6(now, Proto::Udp, (x6, 54), (Z1, 53), NONE)
        .unwrap();
    assert_eq!(t.shard_of_v4(b.1), t.shard_of_v4(5353));
}

#[test]
fn config_validation() {
    assert_eq!(
        Table::new(Config::new(vec![])).err(),
        Some(TableError::Config)
    );
    let mut c = Config::new(vec![T1]);
    c.timers.udp = Duration::from_secs(60);
    assert_eq!(Table::new(c).err(), Some(TableError::Config));
    let mut c = Config::new(vec![T1]);
    c.ports = (0, 0);
    assert_eq!(Table::new(c).err(), Some(TableError::Config));
}

// RFC 6888 per-client limits.

fn limited(sessions: usize, ports: usize) -> Table {
    Table::new(Config {
        max_sessions_per_client: sessions,
        max_ports_per_client: ports,
        ..Config::new(vec![T1, T2])
    })
    .unwrap()
}

/// A second address in X1's /64: the same client.
const X1_OTHER_IID: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0xa, 0xb, 0xc, 0xd);

fn teredo_client(n: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0, 0xc000, 0x0201, 0x8000, n, 0xfbff, 0xfffe)
}

#[test]
fn rfc6888_req4_session_limit_per_client_leaves_others_alone() {
    let now = Instant::now();
    let mut t = limited(3, usize::MAX);
    for z in 1..=3 {
        t.handle_v6(now, Proto::Udp, (X1, 10), (Z1, z), NONE)
            .unwrap();
    }
    assert_eq!(
        t.handle_v6(now, Proto::Udp, (X1, 10), (Z1, 4), NONE),
        Err(TableError::ClientSessionLimit)
    );
    assert_eq!(
        t.handle_v6(now, Proto::Icmp, (X1_OTHER_IID, 7), (Z1, 0), NONE),
        Err(TableError::ClientSessionLimit),
        "every address of the /64 is the same client"
    );
    // Its existing sessions keep working, in both directions.
    assert!(
        t.handle_v6(now, Proto::Udp, (X1, 10), (Z1, 2), NONE)
            .is_ok()
    );
    let mapped = t
        .handle_v6(now, Proto::Udp, (X1, 10), (Z1, 3), NONE)
        .unwrap();
    assert_eq!(
        t.handle_v4(now, Proto::Udp, (Z1, 3), mapped, NONE),
        Ok((X1, 10))
    );
    // An IPv4 host opening a new session towards its mapping counts too.
    assert_eq!(
        t.handle_v4(now, Proto::Udp, (Z2, 9), mapped, NONE),
        Err(TableError::ClientSessionLimit)
    );
    // Others are untouched.
    for x in [X2, teredo_client(1), teredo_client(2)] {
        assert!(t.handle_v6(now, Proto::Udp, (x, 10), (Z1, 1), NONE).is_ok());
    }
    // Expiry gives the sessions back.
    t.handle_timeout(now + Duration::from_secs(301));
    assert_eq!(t.stats().sessions, 0);
    assert!(
        t.handle_v6(
            now + Duration::from_secs(302),
            Proto::Udp,
            (X1, 10),
            (Z1, 4),
            NONE
        )
        .is_ok()
    );
}

#[test]
fn rfc6888_req3_port_limit_per_client_and_protocol() {
    let now = Instant::now();
    let mut t = limited(usize::MAX, 2);
    for x in [10, 11] {
        t.handle_v6(now, Proto::Tcp, (X1, x), (Z1, 80), SYN)
            .unwrap();
    }
    assert_eq!(
        t.handle_v6(now, Proto::Tcp, (X1, 12), (Z1, 80), SYN),
        Err(TableError::ClientPortLimit)
    );
    // A new session on a mapping it holds needs no new port.
    assert!(
        t.handle_v6(now, Proto::Tcp, (X1, 10), (Z2, 80), SYN)
            .is_ok()
    );
    // Each protocol has its own ports, and other clients their own limit.
    assert!(
        t.handle_v6(now, Proto::Udp, (X1, 12), (Z1, 53), NONE)
            .is_ok()
    );
    assert!(
        t.handle_v6(now, Proto::Tcp, (X2, 12), (Z1, 80), SYN)
            .is_ok()
    );
    let s = t.shard_of_v6(&X1);
    let used = t.shard_mut(s).unwrap().client_use(&X1);
    assert_eq!(used, (4, [2, 1, 0]));
}

#[test]
fn teredo_clients_are_one_client_each_other_sources_by_their_64() {
    let none = AddressPools::default();
    assert_ne!(
        none.client_of(&teredo_client(1)),
        none.client_of(&teredo_client(2))
    );
    assert_eq!(none.client_of(&X1), none.client_of(&X1_OTHER_IID));
    assert_ne!(none.client_of(&X1), none.client_of(&X2));
    let t = table(16);
    assert_eq!(t.shard_of_v6(&X1), t.shard_of_v6(&X1_OTHER_IID));
}

/// The precomputed masks match as the prefixes say: inside a pool an address is its own
/// client, outside it falls back to its /64. /0, /128 and >128 are the edge shifts.
#[test]
fn address_pools_match_their_prefixes_only() {
    let inside: Ipv6Addr = "fd00:c1::2".parse().unwrap();
    let outside: Ipv6Addr = "fd00:c1::1:0:2".parse().unwrap();
    let slash64 = |a: Ipv6Addr| u128::from(a) & (u128::MAX << 64);
    // Host bits in the configured network are ignored, as before.
    let pools = AddressPools::new(&[("fd00:c1::ff".parse().unwrap(), 104)]);
    assert_eq!(pools.client_of(&inside), u128::from(inside));
    assert_eq!(pools.client_of(&outside), slash64(outside));
    let host = AddressPools::new(&[(inside, 128)]);
    assert_eq!(host.client_of(&inside), u128::from(inside));
    let next = Ipv6Addr::from(u128::from(inside) + 1);
    assert_eq!(host.client_of(&next), slash64(next));
    let all = AddressPools::new(&[(Ipv6Addr::UNSPECIFIED, 0)]);
    assert_eq!(all.client_of(&outside), u128::from(outside));
    let beyond = AddressPools::new(&[(inside, 200)]);
    assert_eq!(beyond.client_of(&inside), u128::from(inside));
    assert_eq!(beyond.client_of(&next), slash64(next));
}

/// IPsec clients hold one /128 each of one pool inside a /64: each is a client of its own,
/// so one at its port limit leaves the others their bindings, and they spread
/// over the shards.
#[test]
fn each_address_of_an_address_pool_is_a_client() {
    let pool: Ipv6Addr = "fd00:c1::".parse().unwrap();
    let (a, b): (Ipv6Addr, Ipv6Addr) =
        ("fd00:c1::2".parse().unwrap(), "fd00:c1::3".parse().unwrap());
    let pools = [(pool, 104)];
    let (with, none) = (AddressPools::new(&pools), AddressPools::default());
    assert_ne!(with.client_of(&a), with.client_of(&b));
    assert_eq!(
        none.client_of(&a),
        none.client_of(&b),
        "one /64 without the pool"
    );
    let outside: Ipv6Addr = "fd00:c1::1:0:2".parse().unwrap();
    assert_eq!(with.client_of(&outside), none.client_of(&a));
    let now = Instant::now();
    let mut t = Table::new(Config {
        max_ports_per_client: 2,
        address_pools: pools.to_vec(),
        ..Config::new(vec![T1])
    })
    .unwrap();
    for p in [10, 11] {
        t.handle_v6(now, Proto::Udp, (a, p), (Z1, 1), NONE).unwrap();
    }
    assert_eq!(
        t.handle_v6(now, Proto::Udp, (a, 12), (Z1, 1), NONE),
        Err(TableError::ClientPortLimit)
    );
    assert!(t.handle_v6(now, Proto::Udp, (b, 10), (Z1, 1), NONE).is_ok());
    let shards = Table::new(Config {
        shards: 16,
        address_pools: pools.to_vec(),
        ..Config::new(vec![T1])
    })
    .unwrap();
    let used: std::collections::HashSet<usize> = (2..100u128)
        .map(|i| shards.shard_of_v6(&Ipv6Addr::from(u128::from(pool) | i)))
        .collect();
    assert!(used.len() > 8, "pool clients spread over shards: {used:?}");
}

#[test]
fn rfc6888_req3_pool4_split_fairly_within_a_shard() {
    let now = Instant::now();
    // One shard owning 8 ports of one address: a client gets at most a quarter.
    let mut t = Table::new(Config {
        ports: (2000, 2007),
        clients_per_share: FAIR_CLIENTS_PER_SHARE,
        ..Config::new(vec![T1])
    })
    .unwrap();
    for n in 1..=4 {
        let x = teredo_client(n);
        for p in [10, 11] {
            t.handle_v6(now, Proto::Udp, (x, p), (Z1, 1), NONE).unwrap();
        }
        assert_eq!(
            t.handle_v6(now, Proto::Udp, (x, 12), (Z1, 1), NONE),
            Err(TableError::ClientPortLimit),
            "client {n}"
        );
    }
    assert_eq!(t.stats().bib_entries, 8);
}

proptest::proptest! {
    /// Whatever clients do, none exceeds its limits, and the per-client counters add up to the
    /// table's (so expiry returns exactly what creation took).
    #[test]
    fn client_counters_match_the_tables(
        ops in proptest::collection::vec((0u16..3, 0u16..6, 0u16..4, 0u64..400), 1..120)
    ) {
        let start = Instant::now();
        let mut t = limited(5, 3);
        for (client, port, remote, at) in ops {
            let now = start + Duration::from_secs(at);
            let x = teredo_client(client);
            let _ = t.handle_v6(now, Proto::Udp, (x, 1000 + port), (Z1, remote), NONE);
            t.handle_timeout(now);
        }
        let (mut sessions, mut ports) = (0, 0);
        for client in 0..3 {
            let x = teredo_client(client);
            let s = t.shard_of_v6(&x);
            let (n, p) = t.shard_mut(s).unwrap().client_use(&x);
            proptest::prop_assert!(n <= 5 && p[1] <= 3, "{n} {p:?}");
            sessions += n;
            ports += p[1];
        }
        proptest::prop_assert_eq!(sessions, t.stats().sessions);
        proptest::prop_assert_eq!(ports, t.stats().bib_entries);
    }
}

/// A mass of sessions running out at once is expired in bounded slices, and a shard filled
/// to its configured share never grows (rehashes) its session maps.
#[test]
fn expiry_is_bounded_per_call_and_reserved_maps_do_not_grow() {
    let t0 = Instant::now();
    let mut t = Table::new(Config {
        max_sessions: 1000,
        ..Config::new(vec![T1, T2])
    })
    .unwrap();
    let shard = t.shard_mut(0).unwrap();
    let before = shard.reserved_sessions();
    assert!(before[Proto::Udp.index()] >= 1000);
    for i in 0..1000u16 {
        let x = (Ipv6Addr::new(0x2001, 0xdb8, i, 0, 0, 0, 0, 5), 2000);
        shard.handle_v6(t0, Proto::Udp, x, (Z1, 53), NONE).unwrap();
    }
    assert_eq!(shard.stats().sessions, 1000);
    assert_eq!(shard.reserved_sessions(), before);
    let later = t0 + Duration::from_secs(3600);
    let mut calls = 0;
    while shard.handle_timeout_bounded(later, 300) {
        calls += 1;
        assert_eq!(shard.stats().sessions, 1000 - 300 * calls);
    }
    assert_eq!((calls, shard.stats().sessions), (3, 0));
    assert!(!shard.handle_timeout_bounded(later, 300));
}
