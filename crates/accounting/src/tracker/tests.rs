use super::*;
use std::time::{Duration, UNIX_EPOCH};

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_796_083_200 + secs)
}

fn peer(last: u16, port: u16) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V6(Ipv6Addr::new(
            0x2001, 0, 0x4136, 0xe378, 0x8000, 0x63bf, 0x3fff, last,
        )),
        port,
    )
}

fn inner(last: u16) -> Vec<IpAddr> {
    vec![IpAddr::V6(Ipv6Addr::new(0xfd00, 0xc1, 0, 0, 0, 0, 0, last))]
}

fn counts(n: u64) -> Counts {
    Counts {
        bytes_in: 100 * n,
        bytes_out: 200 * n,
        packets_in: n,
        packets_out: 2 * n,
    }
}

/// One IKE SA and its child SA, brought up at once as a client builds a tunnel:
/// `Sa::new(peer, identity)`, at `at(0)` over Teredo with inner address `inner(1)` in the
/// infrastructure tunnel unless a method says otherwise, then [`Sa::up`].
struct Sa<'a> {
    when: SystemTime,
    spi_r: u64,
    child_spi: u32,
    peer: SocketAddr,
    identity: &'a str,
    transport: Transport,
    inner: u16,
    tunnel: Tunnel,
}

impl<'a> Sa<'a> {
    fn new(peer: SocketAddr, identity: &'a str) -> Sa<'a> {
        Sa {
            when: at(0),
            spi_r: 1,
            child_spi: 0x100,
            peer,
            identity,
            transport: Transport::Teredo,
            inner: 1,
            tunnel: Tunnel::Infrastructure,
        }
    }

    fn when(self, when: SystemTime) -> Self {
        Sa { when, ..self }
    }

    /// The IKE SA's responder SPI and the child SA's inbound SPI.
    fn spis(self, spi_r: u64, child_spi: u32) -> Self {
        Sa {
            spi_r,
            child_spi,
            ..self
        }
    }

    fn transport(self, transport: Transport) -> Self {
        Sa { transport, ..self }
    }

    fn inner(self, inner: u16) -> Self {
        Sa { inner, ..self }
    }

    fn tunnel(self, tunnel: Tunnel) -> Self {
        Sa { tunnel, ..self }
    }

    /// `ike_up` then `child_up`, the child keyed as `ike_up` keys the client.
    fn up(self, t: &mut Tracker) {
        let native = self.transport == Transport::Native;
        t.ike_up(
            self.when,
            self.spi_r,
            self.peer,
            self.identity,
            self.transport,
            None,
        );
        t.child_up(
            self.when,
            self.child_spi,
            ClientKey::of(self.peer, native),
            &inner(self.inner),
            self.tunnel,
        );
    }
}

fn drain(t: &mut Tracker) -> Vec<Line> {
    std::iter::from_fn(|| t.poll_line()).collect()
}

fn events(lines: &[Line]) -> Vec<EventKind> {
    lines.iter().map(|l| l.event).collect()
}

/// A client as DirectAccess builds it: an infrastructure IKE SA with its child SA, then an
/// intranet one; a child rekey on each; both deleted by the client.
#[test]
fn a_client_with_both_tunnels_and_rekeys_is_one_session_with_summed_counts() {
    let mut t = Tracker::new(0x6753_a1f0);
    let p = peer(1, 4500);
    let outer = outer_of(p);
    t.ike_up(at(0), 11, p, "CN=laptop-1", Transport::Teredo, None);
    assert!(
        drain(&mut t).is_empty(),
        "an IKE SA alone is no session yet"
    );
    t.child_up(at(0), 0x100, outer, &inner(5), Tunnel::Infrastructure);
    Sa::new(p, "CN=laptop-1")
        .when(at(1))
        .spis(12, 0x101)
        .inner(5)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    let lines = drain(&mut t);
    assert_eq!(events(&lines), [EventKind::Connect, EventKind::TunnelUp]);
    let connect = &lines[0];
    assert_eq!(connect.session.as_deref(), Some("6753a1f000000001"));
    assert_eq!(connect.identity.as_deref(), Some("CN=laptop-1"));
    assert_eq!(connect.transport, Some(Transport::Teredo));
    assert_eq!(connect.outer, Some(outer));
    assert_eq!(connect.port, Some(4500));
    assert_eq!(connect.inner, inner(5));
    assert_eq!(connect.tunnels, [Tunnel::Infrastructure]);
    assert_eq!(lines[1].tunnel, Some(Tunnel::Intranet));
    assert_eq!(lines[1].session, connect.session);

    // Child rekeys: the new SA comes before the old one goes; no tunnel flaps.
    t.child_up(at(30), 0x102, outer, &inner(5), Tunnel::Infrastructure);
    t.child_down(at(31), 0x100, counts(1));
    t.child_up(at(32), 0x103, outer, &inner(5), Tunnel::Intranet);
    t.child_down(at(33), 0x101, counts(2));
    assert!(drain(&mut t).is_empty());
    assert_eq!(t.connected(), 1);

    // The client deletes the intranet IKE SA (its child first), then the other.
    t.child_down(at(60), 0x103, counts(4));
    t.ike_down(at(60), 12);
    t.child_down(at(61), 0x102, counts(8));
    t.ike_down(at(61), 11);
    let lines = drain(&mut t);
    assert_eq!(
        events(&lines),
        [
            EventKind::TunnelDown,
            EventKind::TunnelDown,
            EventKind::Disconnect
        ]
    );
    assert_eq!(lines[0].tunnel, Some(Tunnel::Intranet));
    assert_eq!(lines[0].counts, Some(counts(6)));
    assert_eq!(lines[1].counts, Some(counts(9)));
    let gone = &lines[2];
    assert_eq!(gone.reason.as_deref(), Some(REASON_CLOSED));
    assert_eq!(gone.duration_secs, Some(61));
    assert_eq!(gone.counts, Some(counts(15)));
    assert_eq!(gone.per_tunnel[&Tunnel::Infrastructure], counts(9));
    assert_eq!(gone.per_tunnel[&Tunnel::Intranet], counts(6));
    assert_eq!(gone.identity.as_deref(), Some("CN=laptop-1"));
    assert_eq!(gone.inner, inner(5));
    assert_eq!(t.connected(), 0);
}

#[test]
fn an_ike_rekey_keeps_the_session() {
    let mut t = Tracker::new(1);
    let p = peer(2, 4500);
    Sa::new(p, "CN=b")
        .spis(1, 0x200)
        .transport(Transport::Iphttps)
        .inner(6)
        .up(&mut t);
    // The rekeyed IKE SA takes over the child SA; the old one goes.
    t.ike_up(at(100), 2, p, "CN=b", Transport::Iphttps, None);
    t.ike_down(at(100), 1);
    assert_eq!(events(&drain(&mut t)), [EventKind::Connect]);
    t.child_down(at(200), 0x200, counts(3));
    t.ike_down(at(200), 2);
    let lines = drain(&mut t);
    assert_eq!(
        events(&lines),
        [EventKind::TunnelDown, EventKind::Disconnect]
    );
    assert_eq!(lines[1].duration_secs, Some(200));
    assert_eq!(lines[1].transport, Some(Transport::Iphttps));
}

#[test]
fn the_reason_is_the_last_ike_sa_s() {
    let mut t = Tracker::new(1);
    let p = peer(3, 4500);
    Sa::new(p, "CN=c").spis(1, 0x300).inner(7).up(&mut t);
    t.ike_ended(1, "revoked");
    t.child_down(at(5), 0x300, counts(1));
    t.ike_down(at(5), 1);
    let lines = drain(&mut t);
    assert_eq!(
        events(&lines),
        [
            EventKind::Connect,
            EventKind::TunnelDown,
            EventKind::Disconnect
        ]
    );
    assert_eq!(
        lines[1].reason.as_deref(),
        Some("revoked"),
        "the tunnel's too"
    );
    assert_eq!(lines[2].reason.as_deref(), Some("revoked"));
}

#[test]
fn an_ike_sa_without_a_child_sa_leaves_no_line() {
    let mut t = Tracker::new(1);
    let p = peer(4, 4500);
    t.ike_up(at(0), 1, p, "CN=d", Transport::Teredo, None);
    t.ike_down(at(9), 1);
    assert!(drain(&mut t).is_empty());
    assert_eq!(t.connected(), 0);
}

#[test]
fn end_all_closes_every_session_with_the_live_counters() {
    let mut t = Tracker::new(1);
    for i in 0..3u16 {
        let p = peer(10 + i, 4500);
        Sa::new(p, "CN=e")
            .spis(u64::from(i), 0x400 + u32::from(i))
            .inner(i)
            .tunnel(Tunnel::Intranet)
            .up(&mut t);
    }
    drain(&mut t);
    t.end_all(at(50), "shutdown", |c| {
        counts(u64::from(c.inbound_spi - 0x3ff))
    });
    let lines = drain(&mut t);
    let gone: Vec<&Line> = lines
        .iter()
        .filter(|l| l.event == EventKind::Disconnect)
        .collect();
    assert_eq!(gone.len(), 3);
    assert!(gone.iter().all(|l| l.reason.as_deref() == Some("shutdown")));
    let bytes: u64 = gone
        .iter()
        .filter_map(|l| l.counts)
        .map(|c| c.bytes_in)
        .sum();
    assert_eq!(bytes, 100 * (1 + 2 + 3));
    let mut ids: Vec<_> = gone.iter().filter_map(|l| l.session.clone()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "every session has its own id");
}

#[test]
fn a_refusal_is_a_line_of_its_own() {
    let mut t = Tracker::new(1);
    t.auth_refused(at(0), peer(9, 4500), "revoked", Some("CN=lost laptop"));
    let lines = drain(&mut t);
    assert_eq!(events(&lines), [EventKind::AuthRefused]);
    assert_eq!(lines[0].source, Some(peer(9, 4500)));
    assert_eq!(lines[0].reason.as_deref(), Some("revoked"));
    assert_eq!(lines[0].identity.as_deref(), Some("CN=lost laptop"));
    assert_eq!(lines[0].session, None);
}

/// A claimed identity is kept to 256 bytes, cut between characters and marked; a short
/// one is kept whole.
#[test]
fn a_long_claimed_identity_is_cut_and_marked() {
    let mut t = Tracker::new(1);
    let long = format!("CN={}", "é".repeat(32 * 1024));
    t.auth_refused(at(0), peer(9, 4500), "auth_failed", Some(&long));
    t.auth_refused(at(0), peer(9, 4500), "auth_failed", Some("CN=short"));
    let lines = drain(&mut t);
    let kept = lines[0].identity.as_deref().unwrap();
    let (head, mark) = kept.split_once('…').unwrap();
    assert!(
        head.len() <= MAX_CLAIMED_IDENTITY && head.len() > 250,
        "{}",
        head.len()
    );
    assert!(long.starts_with(head));
    assert_eq!(mark, format!("[truncated, {} bytes]", long.len()));
    let mut json = String::new();
    lines[0].write_json(&mut json);
    assert!(json.len() < 512, "{} bytes", json.len());
    assert_eq!(lines[1].identity.as_deref(), Some("CN=short"));
    let exact = "x".repeat(MAX_CLAIMED_IDENTITY);
    assert_eq!(claimed_identity(&exact), exact);
}

/// A flood of refusals writes a burst, then 5 lines a second; the rest are counted.
#[test]
fn refusal_lines_are_rate_limited_and_the_rest_counted() {
    let mut t = Tracker::new(1);
    let ms = |n: u64| at(0) + Duration::from_millis(n);
    for _ in 0..1000 {
        t.auth_refused(ms(0), peer(1, 1), "auth_failed", None);
    }
    assert_eq!(drain(&mut t).len(), REFUSAL_BURST as usize);
    assert_eq!(t.refusals_suppressed(), 1000 - REFUSAL_BURST);
    // One second later: five more, whatever is asked.
    for i in 0..100 {
        t.auth_refused(ms(1000 + i), peer(1, 1), "auth_failed", None);
    }
    assert_eq!(drain(&mut t).len(), 5);
    assert_eq!(t.refusals_suppressed(), 1000 - REFUSAL_BURST + 95);
    // A clock stepped back refills nothing.
    t.auth_refused(ms(0), peer(1, 1), "auth_failed", None);
    assert!(drain(&mut t).is_empty());
    // A quiet minute refills the burst, no more.
    for _ in 0..1000 {
        t.auth_refused(ms(61_000), peer(1, 1), "auth_failed", None);
    }
    assert_eq!(drain(&mut t).len(), REFUSAL_BURST as usize);
    // Sessions' own lines are never held back.
    Sa::new(peer(2, 4500), "CN=a")
        .when(ms(61_000))
        .spis(1, 0x100)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    assert_eq!(events(&drain(&mut t)), [EventKind::Connect]);
}

#[test]
fn lines_nobody_reads_are_bounded_and_counted() {
    let mut t = Tracker::new(1);
    for i in 0..(MAX_PENDING as u64 + 10) {
        t.auth_refused(at(i), peer(1, 1), "auth_failed", None);
    }
    assert_eq!(t.dropped(), 10);
    assert_eq!(drain(&mut t).len(), MAX_PENDING);
}

/// Events in any order, repeated or about SAs the tracker never saw, never panic, never
/// write a disconnect without its connect, and at most one of each per session.
#[test]
fn events_in_any_order_keep_sessions_whole() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut t = Tracker::new(7);
    let mut lines = Vec::new();
    for step in 0..20_000u64 {
        let p = peer(next(4) as u16, 4500);
        let spi_r = next(8);
        let spi = 0x100 + next(16) as u32;
        let tunnel = Tunnel::ALL[next(2) as usize];
        match next(6) {
            0 => t.ike_up(at(step), spi_r, p, "CN=f", Transport::Teredo, None),
            1 => t.child_up(at(step), spi, outer_of(p), &inner(1), tunnel),
            2 => t.child_down(at(step), spi, counts(1)),
            3 => t.ike_ended(spi_r, "expired"),
            4 => t.ike_down(at(step), spi_r),
            _ => t.auth_refused(at(step), p, "auth_failed", None),
        }
        lines.extend(std::iter::from_fn(|| t.poll_line()));
    }
    t.end_all(at(30_000), "shutdown", |_| counts(1));
    lines.extend(std::iter::from_fn(|| t.poll_line()));
    let mut seen: HashMap<String, (u32, u32)> = HashMap::new();
    for l in &lines {
        let Some(id) = &l.session else { continue };
        let entry = seen.entry(id.clone()).or_default();
        match l.event {
            EventKind::Connect => entry.0 += 1,
            EventKind::Disconnect => {
                assert_eq!(entry.0, 1, "disconnect after its connect: {id}");
                entry.1 += 1;
            }
            _ => assert_eq!(
                (entry.0, entry.1),
                (1, 0),
                "{:?} inside its session",
                l.event
            ),
        }
    }
    assert!(!seen.is_empty());
    assert!(
        seen.values().all(|&c| c == (1, 1)),
        "every session ended once"
    );
    assert_eq!(t.connected(), 0);
}

#[test]
fn tunnel_counts_add_removed_and_live_child_sas() {
    let mut t = Tracker::new(1);
    let p = peer(5, 4500);
    Sa::new(p, "CN=g").spis(1, 0x500).up(&mut t);
    t.child_up(at(1), 0x501, outer_of(p), &inner(1), Tunnel::Intranet);
    // A rekey of the infrastructure tunnel: the old SA's counts are kept.
    t.child_up(at(2), 0x502, outer_of(p), &inner(1), Tunnel::Infrastructure);
    t.child_down(at(2), 0x500, counts(4));
    let mut now = t.tunnel_counts(|c| counts(u64::from(c.inbound_spi - 0x500)));
    now.sort_by_key(|c| c.tunnel);
    assert_eq!(now.len(), 2);
    assert_eq!(now[0].tunnel, Tunnel::Infrastructure);
    assert_eq!(now[0].counts, counts(4 + 2));
    assert_eq!(now[1].counts, counts(1));
    assert!(now.iter().all(|c| c.session == "0000000100000001"));
}

#[test]
fn dynamic_authorization_finds_sessions_by_every_attribute_given() {
    use crate::dae::Criteria;
    let mut t = Tracker::new(1);
    Sa::new(peer(1, 4500), "CN=laptop")
        .spis(10, 0x100)
        .inner(5)
        .up(&mut t);
    Sa::new(peer(1, 4500), "CN=laptop")
        .spis(11, 0x101)
        .inner(5)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    Sa::new(peer(2, 4500), "CN=desktop")
        .when(at(1))
        .spis(20, 0x200)
        .inner(6)
        .up(&mut t);
    let by = |t: &Tracker, c: Criteria| -> Vec<(String, Option<Tunnel>, Vec<u64>)> {
        t.find(&c)
            .into_iter()
            .map(|f| (f.session, f.tunnel, f.ike_spis))
            .collect()
    };
    let laptop = || ("0000000100000001".to_owned(), None, vec![10, 11]);
    assert_eq!(
        by(
            &t,
            Criteria {
                user_name: Some("cn=LAPTOP".into()),
                ..Criteria::default()
            }
        ),
        [laptop()]
    );
    assert_eq!(
        by(
            &t,
            Criteria {
                framed: inner(5),
                calling_station: Some(peer(1, 0).ip().to_string()),
                multi_session_id: Some("0000000100000001".into()),
                ..Criteria::default()
            }
        ),
        [laptop()]
    );
    assert_eq!(
        by(
            &t,
            Criteria {
                session_id: Some("0000000100000001-intranet".into()),
                ..Criteria::default()
            }
        ),
        [(
            "0000000100000001".to_owned(),
            Some(Tunnel::Intranet),
            vec![10, 11]
        )]
    );
    // All must match: the desktop's address with the laptop's name finds nothing.
    assert!(
        by(
            &t,
            Criteria {
                user_name: Some("CN=laptop".into()),
                framed: inner(6),
                ..Criteria::default()
            }
        )
        .is_empty()
    );
    // A tunnel the session never had, an unknown id, no attribute at all.
    assert!(
        by(
            &t,
            Criteria {
                session_id: Some("0000000100000002-intranet".into()),
                ..Criteria::default()
            }
        )
        .is_empty()
    );
    assert!(
        by(
            &t,
            Criteria {
                session_id: Some("0000000100000001-other".into()),
                ..Criteria::default()
            }
        )
        .is_empty()
    );
    assert!(by(&t, Criteria::default()).is_empty());
    // An IKE SA the responder is ending is not ended twice.
    t.ike_ended(11, "admin");
    assert_eq!(
        by(
            &t,
            Criteria {
                user_name: Some("CN=laptop".into()),
                ..Criteria::default()
            }
        )[0]
        .2,
        [10]
    );
}

fn nat(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 7)), port)
}

/// Two machines behind one NAT: one public address, one port each. They are two sessions,
/// each with its own identity, inner address and counters.
#[test]
fn native_clients_behind_one_nat_are_separate_sessions() {
    let mut t = Tracker::new(1);
    let (a, b) = (nat(40001), nat(40002));
    Sa::new(a, "CN=alpha")
        .spis(1, 0x10)
        .transport(Transport::Native)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    Sa::new(b, "CN=beta")
        .when(at(1))
        .spis(2, 0x20)
        .transport(Transport::Native)
        .inner(2)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    let lines = drain(&mut t);
    assert_eq!(events(&lines), [EventKind::Connect, EventKind::Connect]);
    assert_ne!(lines[0].session, lines[1].session);
    assert_eq!(lines[0].identity.as_deref(), Some("CN=alpha"));
    assert_eq!(lines[1].identity.as_deref(), Some("CN=beta"));
    assert_eq!((lines[0].port, lines[1].port), (Some(40001), Some(40002)));
    assert_eq!(lines[0].outer, lines[1].outer);
    assert_eq!((&lines[0].inner, &lines[1].inner), (&inner(1), &inner(2)));
    assert_eq!(t.connected(), 2);
    t.child_down(at(5), 0x20, counts(3));
    t.ike_down(at(5), 2);
    let lines = drain(&mut t);
    assert_eq!(
        events(&lines),
        [EventKind::TunnelDown, EventKind::Disconnect]
    );
    assert_eq!(lines[1].identity.as_deref(), Some("CN=beta"));
    assert_eq!(lines[1].counts, Some(counts(3)));
    assert_eq!(t.connected(), 1, "the other machine stays connected");
}

/// Teredo and IP-HTTPS clients keep their outer address as their key: another port of the
/// same address is the same client.
#[test]
fn a_tunnelled_client_is_its_outer_address_whatever_the_port() {
    let mut t = Tracker::new(1);
    Sa::new(peer(1, 500), "CN=laptop").spis(1, 0x10).up(&mut t);
    Sa::new(peer(1, 4500), "CN=laptop")
        .when(at(1))
        .spis(2, 0x11)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    assert_eq!(
        events(&drain(&mut t)),
        [EventKind::Connect, EventKind::TunnelUp]
    );
}

/// One machine behind a NAT with two IKE SAs (infrastructure and intranet) through one
/// socket, so one mapping: one session with two tunnels.
#[test]
fn one_native_client_with_two_ike_sas_on_one_port_is_one_session() {
    let mut t = Tracker::new(1);
    let a = nat(40001);
    Sa::new(a, "CN=alpha")
        .spis(1, 0x10)
        .transport(Transport::Native)
        .up(&mut t);
    Sa::new(a, "CN=alpha")
        .when(at(1))
        .spis(2, 0x11)
        .transport(Transport::Native)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    let lines = drain(&mut t);
    assert_eq!(events(&lines), [EventKind::Connect, EventKind::TunnelUp]);
    assert_eq!(lines[0].session, lines[1].session);
    assert_eq!(t.connected(), 1);
    assert_eq!(t.tunnel_counts(|_| counts(1)).len(), 2);
}

/// A native client's NAT mapping moves (rebinding, or MOBIKE): its session follows, with no
/// line, its child SAs built at the new mapping join it, and a new machine at the old
/// mapping is a new session.
#[test]
fn a_native_client_that_moves_keeps_its_session() {
    let mut t = Tracker::new(1);
    let (old, new) = (nat(40001), nat(41999));
    Sa::new(old, "CN=alpha")
        .spis(1, 0x10)
        .transport(Transport::Native)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    let connect = drain(&mut t);
    t.peer_moved(1, new);
    assert!(drain(&mut t).is_empty(), "a move writes no line");
    // A child rekey at the new mapping, then the old child SA goes.
    t.child_up(
        at(2),
        0x11,
        ClientKey::of(new, true),
        &inner(1),
        Tunnel::Intranet,
    );
    t.child_down(at(2), 0x10, counts(1));
    assert!(
        drain(&mut t).is_empty(),
        "a rekey after a move keeps the tunnel"
    );
    // An IKE rekey at the new mapping keeps the session too.
    t.ike_up(at(3), 3, new, "CN=alpha", Transport::Native, None);
    t.ike_down(at(3), 1);
    // Another machine now at the old mapping is another client.
    Sa::new(old, "CN=beta")
        .when(at(4))
        .spis(9, 0x90)
        .transport(Transport::Native)
        .inner(9)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    let lines = drain(&mut t);
    assert_eq!(events(&lines), [EventKind::Connect]);
    assert_ne!(lines[0].session, connect[0].session);
    t.child_down(at(6), 0x11, counts(2));
    t.ike_down(at(6), 3);
    let lines = drain(&mut t);
    assert_eq!(
        events(&lines),
        [EventKind::TunnelDown, EventKind::Disconnect]
    );
    let end = &lines[1];
    assert_eq!(end.session, connect[0].session, "the same session ends");
    assert_eq!(end.identity.as_deref(), Some("CN=alpha"));
    assert_eq!(end.port, Some(41999), "where it was last");
    let mut total = counts(1);
    total.add(&counts(2));
    assert_eq!(end.counts, Some(total), "both mappings' bytes");
}

/// One IKE SA of a client moves before its other one does: the other's child SAs, rekeyed
/// at the old mapping meanwhile, still count in the one session.
#[test]
fn a_move_of_one_ike_sa_leaves_the_other_at_the_old_mapping_in_the_session() {
    let mut t = Tracker::new(1);
    let (old, new) = (nat(40001), nat(41999));
    Sa::new(old, "CN=alpha")
        .spis(1, 0x10)
        .transport(Transport::Native)
        .up(&mut t);
    Sa::new(old, "CN=alpha")
        .spis(2, 0x20)
        .transport(Transport::Native)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    drain(&mut t);
    t.peer_moved(1, new);
    t.child_up(
        at(1),
        0x21,
        ClientKey::of(old, true),
        &inner(1),
        Tunnel::Intranet,
    );
    t.child_down(at(1), 0x20, counts(1));
    t.peer_moved(2, new);
    t.child_up(
        at(2),
        0x22,
        ClientKey::of(new, true),
        &inner(1),
        Tunnel::Intranet,
    );
    t.child_down(at(2), 0x21, counts(1));
    assert!(drain(&mut t).is_empty());
    assert_eq!(t.connected(), 1);
    // Nothing is at the old mapping any more: a new IKE SA there is a new client.
    Sa::new(old, "CN=beta")
        .when(at(3))
        .spis(3, 0x30)
        .transport(Transport::Native)
        .inner(3)
        .tunnel(Tunnel::Intranet)
        .up(&mut t);
    assert_eq!(events(&drain(&mut t)), [EventKind::Connect]);
    assert_eq!(t.connected(), 2);
}

/// Windows' two tunnels from one host: the device tunnel's IKE SA is the machine
/// certificate's, the user tunnel's an EAP user's. Each tunnel's lines name its own IKE SA's
/// identity (RADIUS accounting's User-Name follows them), the session stays one.
#[test]
fn tunnels_of_one_client_name_the_identity_of_their_own_ike_sa() {
    let mut t = Tracker::new(1);
    let p = peer(7, 4500);
    // A native client's key is its mapping: address and port.
    let client = ClientKey::of(p, true);
    let machine = "CN=pc7.example.com";
    t.ike_up(
        at(0),
        21,
        p,
        machine,
        Transport::Native,
        Some(Tunnel::Infrastructure),
    );
    t.child_up(at(0), 0x700, client, &inner(7), Tunnel::Infrastructure);
    t.ike_up(
        at(2),
        22,
        p,
        "eap:alice",
        Transport::Native,
        Some(Tunnel::Intranet),
    );
    t.child_up(at(2), 0x701, client, &inner(7), Tunnel::Intranet);
    t.child_down(at(5), 0x701, counts(1));
    t.ike_down(at(5), 22);
    t.child_down(at(6), 0x700, counts(2));
    t.ike_down(at(6), 21);
    let lines = drain(&mut t);
    let seen: Vec<(EventKind, Option<&str>)> = lines
        .iter()
        .map(|l| (l.event, l.identity.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (EventKind::Connect, Some(machine)),
            (EventKind::TunnelUp, Some("eap:alice")),
            (EventKind::TunnelDown, Some("eap:alice")),
            (EventKind::TunnelDown, Some(machine)),
            (EventKind::Disconnect, Some(machine)),
        ]
    );
    assert!(lines.iter().all(|l| l.session == lines[0].session));
}
