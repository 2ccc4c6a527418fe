//! IPv4 inside the tunnels (`ipsec.pool4`): IPv4 opened from ESP (next header 4) takes the
//! road to the TUN when its destination is a corporate IPv4 network, and IPv4 from the TUN to
//! a client's inner IPv4 address is sealed under its SA; everything else is a counted drop.

use super::*;
use crate::{Ipsec4, Prefix4};
use gate64_wire::ipv4;

/// The client's inner IPv4 address, from `ipsec.pool4`.
const INNER4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// A corporate IPv4 host, inside `corpnet.ipv4_prefixes`.
const CORP4_HOST: Ipv4Addr = Ipv4Addr::new(10, 1, 2, 3);
/// NAT64's pool4 (never the client's to reach over IPv4).
const NAT64_POOL_HOST: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 77);
const ESP_NH_IPV4: u8 = gate64_esp::NEXT_HEADER_IPV4;

fn v4_config() -> DataplaneConfig {
    let mut cfg = ipsec_config(false);
    cfg.ipsec4 = Some(Ipsec4 {
        pool: Prefix4::new(Ipv4Addr::new(10, 77, 0, 0), 16),
        peer_pool: None,
        corp_prefixes: vec![Prefix4::new(Ipv4Addr::new(10, 1, 0, 0), 16)],
    });
    cfg.self_addresses.push(Ipv4Addr::new(10, 1, 0, 1).into());
    cfg
}

/// An ICMP echo request from `src` to `dst` with `data` bytes of payload.
fn echo4(src: Ipv4Addr, dst: Ipv4Addr, data: usize) -> Vec<u8> {
    let total = ipv4::HEADER_LEN + 8 + data;
    let mut b = vec![0u8; total];
    b[0] = 0x45;
    b[2..4].copy_from_slice(&u16::try_from(total).unwrap().to_be_bytes());
    b[8] = 64;
    b[9] = ipv4::PROTO_ICMP;
    b[12..16].copy_from_slice(&src.octets());
    b[16..20].copy_from_slice(&dst.octets());
    ipv4::Packet::new_unchecked(&mut b[..]).fill_checksum();
    b[ipv4::HEADER_LEN] = 8;
    b
}

/// A worker from `cfg` with one child SA for the Teredo client at `CLIENT` (or the native
/// one at `native`) whose selectors carry both families: its inner addresses `INNER` and
/// `INNER4`, gate64's side `local4` beside the corporate IPv6 prefix.
fn with_dual_sa(
    cfg: DataplaneConfig,
    local4: &str,
    udp: bool,
    native: Option<(Ipv6Addr, SocketAddr)>,
) -> (Worker, Outbound, Inbound) {
    let mut cfg = cfg;
    let sadb = Arc::new(SaDb::new());
    cfg.ipsec_pool = Some(Prefix::new("fd00:c1::".parse().unwrap(), 120));
    cfg.sadb = Some(Arc::clone(&sadb));
    let both = |spi, key| {
        let mut p = params(Cipher::AesGcm16_256, spi, key, INNER.into());
        p.local_ts.push(Selector::prefix(local4.parse().unwrap()));
        p.remote_ts.push(Selector::address(INNER4.into()));
        p
    };
    let (inbound, outbound) = (both(SPI_IN, 0x11), both(SPI_OUT, 0x22));
    let client_seal = Outbound::new(&inbound).unwrap();
    let client_open = Inbound::new(&outbound).unwrap();
    sadb.install(ChildSaPair {
        inbound,
        outbound,
        peer: Peer {
            outer: native.map_or(teredo(CLIENT).encode(), |(o, _)| o),
            native: native.map(|(_, local)| local),
            udp_encap: udp.then_some(NAT_T_CLIENT_PORT),
            inner: vec![INNER.into(), INNER4.into()],
        },
        tunnel: TunnelKind::Intranet,
        ike_spi: 7,
    })
    .unwrap();
    let w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
    (w, client_seal, client_open)
}

/// `inner` (IPv4) sealed by the client under `sa` (ESP next header 4), in an outer IPv6
/// packet from its Teredo address to the endpoint.
fn sealed4(sa: &Outbound, inner: &[u8], udp: bool) -> Vec<u8> {
    let front = ipv6::HEADER_LEN + if udp { 8 } else { 0 };
    let h = sa.header_len();
    let mut b = vec![0u8; front + h + inner.len() + sa.cipher().max_trailer()];
    b[front + h..][..inner.len()].copy_from_slice(inner);
    let n = sa.seal(&mut b, front, inner.len(), ESP_NH_IPV4).unwrap();
    b.truncate(front + n);
    let plen = u16::try_from(b.len() - ipv6::HEADER_LEN).unwrap();
    let nh = if udp {
        ipv6::NH_UDP
    } else {
        crate::ipsec::NH_ESP
    };
    let me = teredo(CLIENT).encode();
    ipv6::emit_header(&mut b, plen, nh, 64, &me, &ENDPOINT).unwrap();
    if udp {
        b[40..42].copy_from_slice(&NAT_T_CLIENT_PORT.to_be_bytes());
        b[42..44].copy_from_slice(&4500u16.to_be_bytes());
        b[44..46].copy_from_slice(&plen.to_be_bytes());
    }
    b
}

#[test]
fn ipv4_out_of_esp_reaches_the_tun_and_the_reply_is_sealed_back_as_ipv4() {
    for udp in [true, false] {
        let (mut w, client_seal, client_open) = with_dual_sa(v4_config(), "10.1.0.0/16", udp, None);
        let ping = echo4(INNER4, CORP4_HOST, 32);
        let (v, bytes) = teredo_in(&mut w, &sealed4(&client_seal, &ping, udp));
        assert!(matches!(v, Verdict::Tun { .. }), "udp = {udp}: {v:?}");
        assert_eq!(bytes, ping, "the inner IPv4 packet, opened in place");
        // The IPv6 road still works under the same SA.
        let (v, _) = teredo_in(
            &mut w,
            &sealed(&client_seal, &echo(INNER, CORP_HOST, 8), udp),
        );
        assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");

        let reply = echo4(CORP4_HOST, INNER4, 32);
        let (mut buf, start, end) = framed(&reply);
        let v = w.handle_tun(Instant::now(), &mut buf, start, end);
        let Verdict::Udp { to, start, end, .. } = v else {
            panic!("udp = {udp}: {v:?}");
        };
        assert_eq!(to, CLIENT);
        let outer = ipv6::Packet::new_checked(&buf[start..end]).unwrap();
        assert_eq!(
            (outer.src(), outer.dst()),
            (ENDPOINT, teredo(CLIENT).encode())
        );
        let esp_at = start + ipv6::HEADER_LEN + if udp { 8 } else { 0 };
        let opened = client_open.open(&mut buf[esp_at..end]).unwrap();
        assert_eq!(opened.next_header, ESP_NH_IPV4);
        assert_eq!(&buf[esp_at..][opened.inner], &reply[..]);
        assert_eq!(total_drops(w.stats()), 0);
    }
}

#[test]
fn ipv4_towards_a_native_client_leaves_from_its_socket() {
    let local: SocketAddr = "192.0.2.10:4500".parse().unwrap();
    let public: Ipv4Addr = "198.51.100.10".parse().unwrap();
    let (mut w, client_seal, client_open) = with_dual_sa(
        v4_config(),
        "10.1.0.0/16",
        true,
        Some((public.to_ipv6_mapped(), local)),
    );
    let from = SocketAddr::new(public.into(), NAT_T_CLIENT_PORT);
    let ping = echo4(INNER4, CORP4_HOST, 16);
    let esp = sealed4(&client_seal, &ping, true)[ipv6::HEADER_LEN + 8..].to_vec();
    let (mut buf, start, end) = framed(&esp);
    let v = w.handle_native_esp(Instant::now(), local, from, &mut buf, start, end);
    let Verdict::Tun { start, end } = v else {
        panic!("{v:?}");
    };
    assert_eq!(&buf[start..end], &ping[..]);
    let reply = echo4(CORP4_HOST, INNER4, 16);
    let (mut buf, start, end) = framed(&reply);
    let v = w.handle_tun(Instant::now(), &mut buf, start, end);
    let Verdict::Native {
        from: sent_from,
        to,
        start,
        end,
    } = v
    else {
        panic!("{v:?}");
    };
    assert_eq!((sent_from, to), (local, from));
    let opened = client_open.open(&mut buf[start..end]).unwrap();
    assert_eq!(opened.next_header, ESP_NH_IPV4);
    assert_eq!(&buf[start..][opened.inner], &reply[..]);
}

#[test]
fn ipv4_out_of_esp_elsewhere_is_dropped_under_its_reason() {
    // An SA whose gate64 side reaches all of IPv4 (wider than any tunnel gate64 narrows
    // to), so the route and policy steps decide, not the selectors.
    let (mut w, client_seal, _) = with_dual_sa(v4_config(), "0.0.0.0/0", true, None);
    for (pkt, reason) in [
        (echo4(INNER4, NAT64_POOL_HOST, 8), DropReason::NoRoute),
        (
            echo4(INNER4, Ipv4Addr::new(10, 2, 0, 1), 8),
            DropReason::NoRoute,
        ),
        (
            echo4(INNER4, Ipv4Addr::new(10, 1, 0, 1), 8),
            DropReason::ToSelf,
        ),
        (
            echo4(INNER4, Ipv4Addr::new(224, 0, 0, 1), 8),
            DropReason::BadDestination,
        ),
        (
            echo4(Ipv4Addr::new(10, 77, 0, 9), CORP4_HOST, 8),
            DropReason::EspSelector,
        ),
    ] {
        let (v, _) = teredo_in(&mut w, &sealed4(&client_seal, &pkt, true));
        assert_eq!(v, Verdict::Drop(reason), "{pkt:?}");
        assert!(w.stats().drops(reason) > 0);
    }
    assert_eq!(total_drops(w.stats()), 5);
    // Narrowed to the tunnel's network, the SA itself refuses the rest.
    let (mut w, client_seal, _) = with_dual_sa(v4_config(), "10.1.0.0/16", true, None);
    let (v, _) = teredo_in(
        &mut w,
        &sealed4(&client_seal, &echo4(INNER4, NAT64_POOL_HOST, 8), true),
    );
    assert_eq!(v, Verdict::Drop(DropReason::EspSelector));
}

#[test]
fn without_pool4_ipv4_out_of_esp_is_unsupported() {
    let (mut w, client_seal, _) = with_dual_sa(ipsec_config(false), "10.1.0.0/16", true, None);
    let (v, _) = teredo_in(
        &mut w,
        &sealed4(&client_seal, &echo4(INNER4, CORP4_HOST, 8), true),
    );
    assert_eq!(v, Verdict::Drop(DropReason::Unsupported));
    assert_eq!(w.stats().drops(DropReason::Unsupported), 1);
}

#[test]
fn tun_ipv4_to_pool4_without_an_sa_is_dropped_and_other_ipv4_still_goes_to_nat64() {
    let mut w = Worker::new(Shared::new(v4_config()), Arc::new(Stats::default()));
    let now = Instant::now();
    assert_eq!(
        from_tun(&mut w, now, &echo4(CORP4_HOST, INNER4, 8)),
        Verdict::Drop(DropReason::NoSaToClient)
    );
    assert_eq!(w.stats().drops(DropReason::NoSaToClient), 1);
    // Outside pool4: what a worker without IPv4 in the tunnels does with it (NAT64's road).
    let mut plain = Worker::new(Shared::new(ipsec_config(false)), Arc::new(Stats::default()));
    let to_nat64 = echo4(CORP4_HOST, NAT64_POOL_HOST, 8);
    assert_eq!(
        from_tun(&mut w, now, &to_nat64),
        from_tun(&mut plain, now, &to_nat64)
    );
}

#[test]
fn ipv4_to_an_address_of_the_peers_pool_is_sealed_under_the_taken_over_sa() {
    // This node's own pool4 lies elsewhere; INNER4 is in the `[ha]` peer's (a client taken
    // over from it keeps its address).
    let mut cfg = v4_config();
    let v4 = cfg.ipsec4.as_mut().unwrap();
    v4.pool = Prefix4::new(Ipv4Addr::new(10, 78, 0, 0), 16);
    v4.peer_pool = Some(Prefix4::new(Ipv4Addr::new(10, 77, 0, 0), 16));
    let (mut w, client_seal, client_open) = with_dual_sa(cfg, "10.1.0.0/16", false, None);
    // The client speaks first (its Teredo peer entry is then verified).
    let ping = echo4(INNER4, CORP4_HOST, 32);
    let (v, _) = teredo_in(&mut w, &sealed4(&client_seal, &ping, false));
    assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
    let reply = echo4(CORP4_HOST, INNER4, 32);
    let (mut buf, start, end) = framed(&reply);
    let v = w.handle_tun(Instant::now(), &mut buf, start, end);
    let Verdict::Udp { to, start, end, .. } = v else {
        panic!("{v:?}");
    };
    assert_eq!(to, CLIENT);
    let esp_at = start + ipv6::HEADER_LEN;
    let opened = client_open.open(&mut buf[esp_at..end]).unwrap();
    assert_eq!(&buf[esp_at..][opened.inner], &reply[..]);
    assert_eq!(total_drops(w.stats()), 0);

    // Without the peer's pool the same packet is not a client's: NAT64's road.
    let mut cfg = v4_config();
    cfg.ipsec4.as_mut().unwrap().pool = Prefix4::new(Ipv4Addr::new(10, 78, 0, 0), 16);
    let (mut w, _, _) = with_dual_sa(cfg, "10.1.0.0/16", false, None);
    let mut plain = Worker::new(Shared::new(ipsec_config(false)), Arc::new(Stats::default()));
    let now = Instant::now();
    assert_eq!(
        from_tun(&mut w, now, &reply),
        from_tun(&mut plain, now, &reply)
    );
}
