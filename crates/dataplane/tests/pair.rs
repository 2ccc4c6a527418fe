//! A Teredo client and an IP-HTTPS client (their sans-IO client roles), the dataplane, a
//! fake TUN and, with IPsec, gate64's IKE endpoint, driven in one process under a clock the
//! tests move from deadline to deadline, in the style of quinn's `Pair` (quinn-proto
//! `tests/util.rs`). The harness does what the `gate64-io` drivers do around the dataplane
//! (a UDP worker's `handle_teredo`/`handle_tun`/`handle_timeout`, an IP-HTTPS thread's
//! `handle_iphttps`, the connection's egress filter and timers, the IKE driver's responder
//! and SA installs) and executes the verdicts by handing the bytes to the other side, so the
//! decisions are tested without sockets, root or sleeps.
#![allow(missing_docs)]

#[path = "pair/harness.rs"]
mod harness;
#[path = "pair/ipsec.rs"]
mod ipsec;

use gate64_dataplane::{DropReason, Verdict};
use gate64_iphttps::server::{CloseReason, ServerConfig as LinkConfig};
use harness::*;

// RFC 4380 §5.2.1 / §5.3.2: RS with a nonce, RA from the primary with the origin indication.
#[test]
fn teredo_client_qualifies() {
    let mut p = Pair::new(false);
    p.qualify_teredo();
    let a = gate64_teredo::Address::decode(&p.teredo_address()).unwrap();
    assert_eq!((a.server, a.mapped), (PRIMARY, MAPPING));
    assert_eq!(p.udp.stats().teredo_qualifications.get(), 1);
    // The refresh 30 s later confirms the address.
    p.run_until(p.now + secs(30));
    p.qualify_teredo();
    assert_eq!(p.udp.stats().teredo_qualifications.get(), 2);
}

#[test]
fn teredo_client_reaches_corpnet_and_the_reply_comes_back_without_ipsec() {
    let mut p = Pair::new(true);
    p.qualify_teredo();
    let me = p.teredo_address();
    let out = udp(me, CORP_HOST, 300);
    assert!(matches!(p.teredo_send(&out), Verdict::Tun { .. }));
    assert_eq!(p.tun, vec![out]);
    // Its packet made it a trusted peer (§5.4.2): the reply goes straight to its mapping.
    let back = udp(CORP_HOST, me, 500);
    assert!(matches!(p.corp_send(&back), Verdict::Udp { .. }));
    assert_eq!(p.teredo.inbox, vec![back]);
}

// RFC 4380 §5.4.1: to a client not heard from, the relay bubbles first and sends once the
// client answered.
#[test]
fn corp_to_a_silent_teredo_client_waits_for_its_bubble_without_ipsec() {
    let mut p = Pair::new(true);
    p.qualify_teredo();
    p.run_until(p.now + secs(40));
    let me = p.teredo_address();
    let pkt = udp(CORP_HOST, me, 200);
    // Trust has lapsed after 30 s; the client's answer to the bubble releases the packet.
    assert_eq!(p.corp_send(&pkt), Verdict::Consumed);
    assert_eq!(p.teredo.inbox, vec![pkt]);
    // Trusted again: the next one goes straight out.
    let next = udp(CORP_HOST, me, 300);
    assert!(matches!(p.corp_send(&next), Verdict::Udp { .. }));
    assert_eq!(p.teredo.inbox.len(), 2);
}

#[test]
fn iphttps_client_reaches_corpnet_and_the_reply_comes_back_without_ipsec() {
    let mut p = Pair::new(true);
    p.iphttps_link_up();
    let me = p.iphttps_address();
    let out = udp(me, CORP_HOST, 300);
    assert!(matches!(p.iphttps_send(&out), Verdict::Tun { .. }));
    assert_eq!(p.tun, vec![out]);
    let back = udp(CORP_HOST, me, 400);
    assert_eq!(p.corp_send(&back), Verdict::Consumed);
    p.iphttps_deliver();
    assert_eq!(p.iphttps.inbox, vec![back]);
}

// The security step sits on the one road: both transports meet it the same way.
#[test]
fn policy_without_ipsec_drops_corp_traffic_from_both_transports() {
    let mut p = Pair::new(false);
    p.qualify_teredo();
    p.iphttps_link_up();
    let (t, i) = (p.teredo_address(), p.iphttps_address());
    assert_eq!(
        p.teredo_send(&udp(t, CORP_HOST, 100)),
        Verdict::Drop(DropReason::NoSa)
    );
    assert_eq!(
        p.iphttps_send(&udp(i, CORP_HOST, 100)),
        Verdict::Drop(DropReason::NoSa)
    );
    // Echo to gate64 itself passes, from either.
    assert!(matches!(
        p.teredo_send(&echo(t, CORP_ADDRESS)),
        Verdict::Tun { .. }
    ));
    assert!(matches!(
        p.iphttps_send(&echo(i, CORP_ADDRESS)),
        Verdict::Tun { .. }
    ));
    assert_eq!(p.udp.stats().drops(DropReason::NoSa), 1);
    assert_eq!(p.tls.stats().drops(DropReason::NoSa), 1);
    assert_eq!(p.tun.len(), 2);
}

// Client to client across transports, with `require = false` (with IPsec required, only out
// of an SA: `src/tests/ipsec.rs`).
#[test]
fn teredo_and_iphttps_clients_reach_each_other_without_ipsec() {
    let mut p = Pair::new(true);
    p.qualify_teredo();
    p.iphttps_link_up();
    let (t, i) = (p.teredo_address(), p.iphttps_address());
    let hello = udp(t, i, 200);
    assert_eq!(p.teredo_send(&hello), Verdict::Consumed);
    p.iphttps_deliver();
    assert_eq!(p.iphttps.inbox, vec![hello]);
    // The Teredo client just sent, so it is trusted: the answer leaves the IP-HTTPS thread
    // as a datagram to its mapping.
    let answer = udp(i, t, 300);
    assert!(matches!(p.iphttps_send(&answer), Verdict::Udp { .. }));
    assert_eq!(p.teredo.inbox, vec![answer]);
    assert!(p.tun.is_empty());
}

// docs/config.md: an IP-HTTPS link closes after `idle_timeout` with no packet in either
// direction; our own RAs (sent at their deadlines on the way) do not count.
#[test]
fn iphttps_idle_timeout_counts_traffic_both_ways_without_ipsec() {
    let mut p = Pair::new(true);
    let t0 = p.now;
    p.iphttps_link_up();
    let idle = LinkConfig::default().idle_timeout;
    let me = p.iphttps_address();
    // Only towards the client, 10 minutes in: that keeps the link up.
    let stops = p.run_until(t0 + secs(600));
    assert!(stops > 1, "the timers ran on the way ({stops} deadlines)");
    assert_eq!(p.iphttps.closed, None);
    assert_eq!(p.corp_send(&udp(CORP_HOST, me, 100)), Verdict::Consumed);
    p.iphttps_deliver();
    p.run_until(t0 + secs(600) + idle - secs(1));
    assert_eq!(p.iphttps.closed, None, "traffic to the client counts");
    // Then nothing but our RAs until the timer runs out, at its deadline exactly.
    p.run_until(t0 + secs(600) + idle + secs(30));
    assert_eq!(p.iphttps.closed, Some(CloseReason::IdleTimeout));
    assert_eq!(
        p.iphttps.conn.close_reason(),
        Some(CloseReason::IdleTimeout)
    );
    assert_eq!(
        p.iphttps_send(&udp(me, CORP_HOST, 100)),
        Verdict::Drop(DropReason::NoRoute),
        "a closed link forwards nothing"
    );
}

// The UDP worker's timers run at the deadlines it names, never more than TIMER_INTERVAL
// apart, so the pair stops at each of them.
#[test]
fn the_workers_timers_are_stepped_by_deadline_without_ipsec() {
    let mut p = Pair::new(true);
    let t0 = p.now;
    assert_eq!(
        p.udp.poll_timeout(),
        Some(t0 + gate64_dataplane::TIMER_INTERVAL)
    );
    p.run_until(t0 + secs(5));
    let next = p.udp.poll_timeout().expect("armed");
    assert!(next > p.now && next <= p.now + gate64_dataplane::TIMER_INTERVAL);
}
