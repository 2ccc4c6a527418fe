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
