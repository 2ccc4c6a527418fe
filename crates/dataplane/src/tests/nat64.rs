use super::*;

const POOL4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
const V4HOST: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 5);

fn pref64() -> gate64_nat64::Prefix {
    gate64_nat64::Prefix::new("2001:db8:64::".parse().unwrap(), 96).unwrap()
}

fn nat_worker(allow_without_ipsec: bool) -> Worker {
    let mut cfg = config(allow_without_ipsec);
    let mut table = gate64_nat64::state::Config::new(vec![POOL4]);
    table.shards = 4;
    let nat = Nat64::new(gate64_nat64::Settings {
        prefix: pref64(),
        table,
        translate: gate64_nat64::translate::Config::default(),
    })
    .unwrap();
    cfg.nat64 = Some(Arc::new(nat));
    Worker::new(Shared::new(cfg), Arc::new(Stats::default()))
}

/// An IPv4 UDP packet with a valid header checksum and no UDP checksum.
fn udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, data: usize) -> Vec<u8> {
    let total = 28 + data;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum::finish(checksum::sum(&p[..20], 0));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + data) as u16).to_be_bytes());
    p
}

#[test]
fn rfc6146_client_reaches_ipv4_host_through_nat64_and_back_without_ipsec() {
    let mut w = nat_worker(true);
    let now = Instant::now();
    let client = teredo(CLIENT).encode();
    let pkt = udp(client, pref64().embed(V4HOST).unwrap(), 100);
    let (mut buf, start, end) = framed(&pkt);
    let v = w.handle_teredo(now, PRIMARY, CLIENT, &mut buf, start, end);
    // In place: the IPv4 header sits where the IPv6 header ended.
    let at = HEADROOM + 20;
    assert_eq!(
        v,
        Verdict::Tun {
            start: at,
            end: at + 80
        }
    );
    let v4 = &buf[at..at + 80];
    assert_eq!(v4[0], 0x45);
    assert_eq!(&v4[12..16], &POOL4.octets());
    assert_eq!(&v4[16..20], &V4HOST.octets());
    let t = u16::from_be_bytes([v4[20], v4[21]]);
    // The host answers; the reply goes to the client's Teredo mapping as IPv6.
    let reply = udp4(V4HOST, POOL4, 0x5a5a, t, 12);
    let (mut buf, start, end) = framed(&reply);
    let v = w.handle_tun(now, &mut buf, start, end);
    let Verdict::Udp { to, start, end, .. } = v else {
        panic!("expected a datagram to the client, got {v:?}");
    };
    assert_eq!(to, CLIENT);
    let back = ipv6::Packet::new_checked(&buf[start..end]).unwrap();
    assert_eq!(back.dst(), client);
    assert_eq!(back.src(), pref64().embed(V4HOST).unwrap());
    assert_eq!(
        u16::from_be_bytes([buf[start + 42], buf[start + 43]]),
        0x5a5a
    );
    let s = w.stats();
    assert_eq!(s.nat64_translations(Nat64Direction::V6ToV4), 1);
    assert_eq!(s.nat64_translations(Nat64Direction::V4ToV6), 1);
    assert_eq!(total_drops(s), 0);
}

#[test]
fn corporate_ipv6_host_uses_nat64_through_the_kernel_both_ways() {
    let mut w = nat_worker(false);
    let now = Instant::now();
    // From the TUN (route_prefix): no client, no policy step, IPv4 back to the kernel.
    let pkt = udp(CORP_HOST, pref64().embed(V4HOST).unwrap(), 100);
    let (mut buf, start, end) = framed(&pkt);
    let v = w.handle_tun(now, &mut buf, start, end);
    let at = HEADROOM + 20;
    assert_eq!(
        v,
        Verdict::Tun {
            start: at,
            end: at + 80
        }
    );
    let t = u16::from_be_bytes([buf[at + 20], buf[at + 21]]);
    // The reply's mapping is the corporate host's: the IPv6 packet goes to the kernel too.
    let (mut buf, start, end) = framed(&udp4(V4HOST, POOL4, 0x5a5a, t, 12));
    let Verdict::Tun { start, end } = w.handle_tun(now, &mut buf, start, end) else {
        panic!("expected the translated reply back into the TUN");
    };
    let back = ipv6::Packet::new_checked(&buf[start..end]).unwrap();
    assert_eq!(back.dst(), CORP_HOST);
    assert_eq!(total_drops(w.stats()), 0);
}

#[test]
fn nat64_traffic_passes_the_policy_step_like_corporate_traffic() {
    let mut w = nat_worker(false);
    let pkt = udp(
        teredo(CLIENT).encode(),
        pref64().embed(V4HOST).unwrap(),
        100,
    );
    let v = from_teredo(&mut w, Instant::now(), CLIENT, &pkt);
    assert_eq!(v, Verdict::Drop(DropReason::NoSa));
    assert_eq!(w.stats().nat64_translations(Nat64Direction::V6ToV4), 0);
}

#[test]
fn rfc6146_ipv4_without_binding_gets_port_unreachable() {
    let mut w = nat_worker(true);
    let v = from_tun(&mut w, Instant::now(), &udp4(V4HOST, POOL4, 53, 5555, 4));
    assert_eq!(v, Verdict::Drop(DropReason::Nat64NoBinding));
    let icmp = w.poll_tun_write().expect("an ICMPv4 error into the TUN");
    assert_eq!(&icmp[12..16], &POOL4.octets());
    assert_eq!(&icmp[16..20], &V4HOST.octets());
    assert_eq!((icmp[20], icmp[21]), (3, 3));
    // Never an error about an error.
    let err_about = {
        let mut e = vec![0u8; 28 + 8];
        e[0] = 0x45;
        e[2..4].copy_from_slice(&36u16.to_be_bytes());
        e[8] = 64;
        e[9] = 1;
        e[12..16].copy_from_slice(&V4HOST.octets());
        e[16..20].copy_from_slice(&POOL4.octets());
        let c = checksum::finish(checksum::sum(&e[..20], 0));
        e[10..12].copy_from_slice(&c.to_be_bytes());
        e[20] = 3;
        e
    };
    let _ = from_tun(&mut w, Instant::now(), &err_about);
    assert!(w.poll_tun_write().is_none());
}

#[test]
fn nat64_bad_embedded_address_and_ipv4_without_nat64_are_dropped() {
    let mut w = nat_worker(true);
    let dst = pref64().embed(Ipv4Addr::new(127, 0, 0, 1)).unwrap();
    let v = from_teredo(
        &mut w,
        Instant::now(),
        CLIENT,
        &udp(teredo(CLIENT).encode(), dst, 60),
    );
    assert_eq!(v, Verdict::Drop(DropReason::Nat64BadAddress));
    let mut plain = worker(true);
    let v = from_tun(&mut plain, Instant::now(), &udp4(V4HOST, POOL4, 1, 2, 0));
    assert_eq!(v, Verdict::Drop(DropReason::NoRoute));
}

// NAT64 from an IP-HTTPS client is translated by the worker that took the packet, like a
// Teredo client's, instead of going round through the kernel and the TUN.
#[test]
fn rfc6146_iphttps_client_is_translated_directly() {
    let mut cfg = nat_worker(true).shared().config().clone();
    cfg.iphttps_prefix = Some(Prefix::new("2001:db8:1::".parse().unwrap(), 48));
    let mut w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
    let client: Ipv6Addr = "2001:db8:1:5::a".parse().unwrap();
    let pkt = udp(client, pref64().embed(V4HOST).unwrap(), 100);
    let (mut buf, start, end) = framed(&pkt);
    let prefix = "2001:db8:1:5::".parse().unwrap();
    let v = w.handle_iphttps(Instant::now(), prefix, &mut buf, start, end);
    let at = HEADROOM + 20;
    assert_eq!(
        v,
        Verdict::Tun {
            start: at,
            end: at + 80
        }
    );
    assert_eq!(&buf[at + 12..at + 16], &POOL4.octets());
    assert_eq!(w.stats().nat64_translations(Nat64Direction::V6ToV4), 1);
}
