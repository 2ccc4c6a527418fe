//! The security step with IPsec required, and the ESP stage: IKE to the endpoint without an
//! SA, everything corporate only out of one.

use super::*;

/// gate64's IPsec endpoint: another address than `corp_address`, as `ipsec.endpoint` allows.
const ENDPOINT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x500);

fn ipsec_config(open: bool) -> DataplaneConfig {
    let mut cfg = config(open);
    cfg.ipsec_endpoint = Some(ENDPOINT);
    cfg.self_addresses = vec![ENDPOINT.into()];
    cfg.dns64_listen = vec![std::net::SocketAddr::from((CORP_ADDRESS, 53))];
    cfg
}

fn ipsec_worker(open: bool) -> Worker {
    Worker::new(Shared::new(ipsec_config(open)), Arc::new(Stats::default()))
}

/// UDP from `src` to `[dst]:dport` whose payload starts with `payload`.
fn udp_with(src: Ipv6Addr, dst: Ipv6Addr, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = udp_ports(src, dst, 4500, dport, ipv6::HEADER_LEN + 8 + payload.len());
    b[ipv6::HEADER_LEN + 8..].copy_from_slice(payload);
    b
}

#[test]
fn without_an_sa_the_corporate_network_nat64_dns64_and_other_clients_are_no_sa() {
    let mut w = ipsec_worker(false);
    let me = teredo(CLIENT).encode();
    let now = Instant::now();
    for pkt in [
        echo(me, CORP_HOST, 8),
        udp_ports(me, CORP_HOST, 1, 80, 60),
        udp_ports(me, CORP_ADDRESS, 1, 53, 60),
        udp_ports(me, teredo(OTHER).encode(), 1, 80, 60),
    ] {
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &pkt),
            Verdict::Drop(DropReason::NoSa)
        );
    }
    assert_eq!(w.stats().drops(DropReason::NoSa), 4);
    assert_eq!(total_drops(w.stats()), 4);
}

#[test]
fn ike_to_the_endpoint_is_admitted_without_an_sa() {
    let mut w = ipsec_worker(false);
    let me = teredo(CLIENT).encode();
    let now = Instant::now();
    let ike_sa_init = [0x11u8; 28];
    let mut marked = vec![0u8; 4];
    marked.extend_from_slice(&ike_sa_init);
    for pkt in [
        udp_with(me, ENDPOINT, 500, &ike_sa_init),
        udp_with(me, ENDPOINT, 4500, &marked),
        echo(me, ENDPOINT, 8),
    ] {
        let v = from_teredo(&mut w, now, CLIENT, &pkt);
        assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
    }
    // IKE ports elsewhere on gate64, and other ports at the endpoint: to_self.
    for pkt in [
        udp_with(me, CORP_ADDRESS, 500, &ike_sa_init),
        udp_with(me, ENDPOINT, 501, &ike_sa_init),
        tcp_syn(me, ENDPOINT, 500),
    ] {
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &pkt),
            Verdict::Drop(DropReason::ToSelf)
        );
    }
    assert_eq!(total_drops(w.stats()), 3);
}

#[test]
fn a_nat_keepalive_on_4500_is_consumed() {
    let mut w = ipsec_worker(false);
    let me = teredo(CLIENT).encode();
    let v = from_teredo(
        &mut w,
        Instant::now(),
        CLIENT,
        &udp_with(me, ENDPOINT, 4500, &[0xff]),
    );
    assert_eq!(v, Verdict::Consumed);
    assert_eq!(total_drops(w.stats()), 0);
}

#[test]
fn esp_with_an_spi_gate64_never_gave_is_esp_unknown_spi() {
    let mut w = ipsec_worker(false);
    let me = teredo(CLIENT).encode();
    let now = Instant::now();
    let esp = [0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    let in_udp = udp_with(me, ENDPOINT, 4500, &esp);
    let mut raw = udp_with(me, ENDPOINT, 4500, &esp);
    raw[6] = crate::ipsec::NH_ESP;
    for pkt in [in_udp, raw] {
        assert_eq!(
            from_teredo(&mut w, now, CLIENT, &pkt),
            Verdict::Drop(DropReason::EspUnknownSpi)
        );
    }
}

#[test]
fn require_false_is_the_old_open_behaviour() {
    let mut w = ipsec_worker(true);
    let me = teredo(CLIENT).encode();
    let now = Instant::now();
    for pkt in [
        echo(me, CORP_HOST, 8),
        udp_ports(me, CORP_ADDRESS, 1, 53, 60),
        udp_with(me, ENDPOINT, 500, &[0x11; 28]),
    ] {
        let v = from_teredo(&mut w, now, CLIENT, &pkt);
        assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
    }
    // Still nothing else on gate64 itself.
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &tcp_syn(me, ENDPOINT, 22)),
        Verdict::Drop(DropReason::ToSelf)
    );
}

fn tcp_syn(src: Ipv6Addr, dst: Ipv6Addr, port: u16) -> Vec<u8> {
    let mut b = udp_ports(src, dst, 40000, port, 60);
    b[6] = ipv6::NH_TCP;
    b
}
