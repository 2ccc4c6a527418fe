//! The security step with IPsec required, and the ESP stage: IKE to the endpoint without an
//! SA, everything corporate only out of one.

use super::*;
use gate64_esp::{
    ChildSaPair, Cipher, Inbound, Lifetime, Outbound, Peer, SaDb, SaKeys, SaParams, Selector,
    TunnelKind,
};
use std::net::{IpAddr, SocketAddr};

/// gate64's IPsec endpoint: another address than `corp_address`, as `ipsec.endpoint` allows.
pub(super) const ENDPOINT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x500);

pub(super) fn ipsec_config(open: bool) -> DataplaneConfig {
    let mut cfg = config(open);
    cfg.ipsec_endpoint = Some(ENDPOINT);
    cfg.self_addresses = vec![ENDPOINT.into()];
    cfg.dns64_listen = vec![std::net::SocketAddr::from((CORP_ADDRESS, 53))];
    cfg
}

pub(super) fn ipsec_worker(open: bool) -> Worker {
    Worker::new(Shared::new(ipsec_config(open)), Arc::new(Stats::default()))
}

/// The client's inner address, from `ipsec.pool6`.
pub(super) const INNER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc1, 0, 0, 0, 0, 0, 0x101);
/// The SPI gate64 chose (the client seals under it), and the client's.
const SPI_IN: u32 = 0x1000_0001;
const SPI_OUT: u32 = 0x2000_0002;
const NAT_T_CLIENT_PORT: u16 = 4501;

fn params(cipher: Cipher, spi: u32, key_byte: u8, remote: IpAddr) -> SaParams {
    SaParams {
        spi,
        keys: SaKeys {
            cipher,
            key: vec![key_byte; cipher.keymat_len()],
        },
        esn: false,
        lifetime: Lifetime::UNLIMITED,
        created: Instant::now(),
        local_ts: vec![Selector::prefix("2001:db8:100::/48".parse().unwrap())],
        remote_ts: vec![Selector::address(remote)],
    }
}

/// A worker with one intranet child SA for the Teredo client at `CLIENT`, its inner
/// address `inner`, UDP-encapsulated when `udp`; and the client's two halves of the SA
/// (what it seals with, what it opens with).
pub(super) fn with_sa(inner: Ipv6Addr, udp: bool) -> (Worker, Outbound, Inbound) {
    with_sa_for(
        teredo(CLIENT).encode(),
        inner,
        udp,
        ipsec_config(false),
        None,
    )
}

/// [`with_sa`] under `cipher`.
fn with_sa_cipher(inner: Ipv6Addr, udp: bool, cipher: Cipher) -> (Worker, Outbound, Inbound) {
    with_sa_in(
        teredo(CLIENT).encode(),
        inner,
        udp,
        ipsec_config(false),
        cipher,
        None,
    )
}

/// [`with_sa`] for the client at `outer`, on a worker built from `cfg`.
fn with_sa_for(
    outer: Ipv6Addr,
    inner: Ipv6Addr,
    udp: bool,
    cfg: DataplaneConfig,
    native: Option<SocketAddr>,
) -> (Worker, Outbound, Inbound) {
    with_sa_in(outer, inner, udp, cfg, Cipher::AesGcm16_256, native)
}

fn with_sa_in(
    outer: Ipv6Addr,
    inner: Ipv6Addr,
    udp: bool,
    mut cfg: DataplaneConfig,
    cipher: Cipher,
    native: Option<SocketAddr>,
) -> (Worker, Outbound, Inbound) {
    let sadb = Arc::new(SaDb::new());
    cfg.ipsec_pool = Some(Prefix::new("fd00:c1::".parse().unwrap(), 120));
    cfg.sadb = Some(Arc::clone(&sadb));
    let inbound = params(cipher, SPI_IN, 0x11, inner.into());
    let outbound = params(cipher, SPI_OUT, 0x22, inner.into());
    let client_seal = Outbound::new(&inbound).unwrap();
    let client_open = Inbound::new(&outbound).unwrap();
    sadb.install(ChildSaPair {
        inbound,
        outbound,
        peer: Peer {
            outer,
            native,
            udp_encap: udp.then_some(NAT_T_CLIENT_PORT),
            inner: vec![inner.into()],
        },
        tunnel: TunnelKind::Intranet,
        ike_spi: 7,
    })
    .unwrap();
    let w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
    (w, client_seal, client_open)
}

/// `inner` sealed by the client under `sa`, in an outer IPv6 packet from its Teredo address
/// to the endpoint: UDP 4500 (RFC 3948) or next header 50.
pub(super) fn sealed(sa: &Outbound, inner: &[u8], udp: bool) -> Vec<u8> {
    sealed_from(sa, inner, udp, teredo(CLIENT).encode())
}

/// [`sealed`] from the outer address `me`.
fn sealed_from(sa: &Outbound, inner: &[u8], udp: bool, me: Ipv6Addr) -> Vec<u8> {
    let front = ipv6::HEADER_LEN + if udp { 8 } else { 0 };
    let h = sa.header_len();
    let mut b = vec![0u8; front + h + inner.len() + sa.cipher().max_trailer()];
    b[front + h..][..inner.len()].copy_from_slice(inner);
    let n = sa.seal(&mut b, front, inner.len(), 41).unwrap();
    b.truncate(front + n);
    let plen = u16::try_from(b.len() - ipv6::HEADER_LEN).unwrap();
    let nh = if udp {
        ipv6::NH_UDP
    } else {
        crate::ipsec::NH_ESP
    };
    ipv6::emit_header(&mut b, plen, nh, 64, &me, &ENDPOINT).unwrap();
    if udp {
        b[40..42].copy_from_slice(&NAT_T_CLIENT_PORT.to_be_bytes());
        b[42..44].copy_from_slice(&4500u16.to_be_bytes());
        b[44..46].copy_from_slice(&plen.to_be_bytes());
    }
    b
}

/// Runs `outer` through `w` as a Teredo datagram from `CLIENT`; returns the verdict and the
/// bytes it names.
pub(super) fn teredo_in(w: &mut Worker, outer: &[u8]) -> (Verdict, Vec<u8>) {
    let (mut buf, start, end) = framed(outer);
    let v = w.handle_teredo(Instant::now(), PRIMARY, CLIENT, &mut buf, start, end);
    let bytes = match v {
        Verdict::Tun { start, end } | Verdict::Udp { start, end, .. } => buf[start..end].to_vec(),
        _ => Vec::new(),
    };
    (v, bytes)
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
fn ike_to_an_endpoint_at_the_pools_first_address_is_gate64s() {
    // The default `ipsec.endpoint`: the first address of `pool6`, the rest of which routes
    // to clients.
    let endpoint: Ipv6Addr = "fd00:c1::1".parse().unwrap();
    let mut cfg = config(false);
    cfg.ipsec_endpoint = Some(endpoint);
    cfg.self_addresses = vec![endpoint.into()];
    cfg.ipsec_pool = Some(Prefix::new("fd00:c1::".parse().unwrap(), 120));
    cfg.sadb = Some(Arc::new(SaDb::new()));
    let mut w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
    let me = teredo(CLIENT).encode();
    let now = Instant::now();
    for pkt in [
        udp_with(me, endpoint, 500, &[0x11u8; 28]),
        echo(me, endpoint, 8),
    ] {
        let v = from_teredo(&mut w, now, CLIENT, &pkt);
        assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
    }
    // Another address of the pool is a client's: nothing reaches it without an SA.
    let other: Ipv6Addr = "fd00:c1::2".parse().unwrap();
    assert_eq!(
        from_teredo(&mut w, now, CLIENT, &echo(me, other, 8)),
        Verdict::Drop(DropReason::NoSa)
    );
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

/// ESP that finds no SA is offered to the HA takeover only when its SPI awaits one (as
/// last published), through a transport or natively, and is still dropped as
/// `esp_unknown_spi`; other SPIs and oversize packets are not offered.
#[test]
fn esp_for_an_spi_awaiting_a_takeover_is_offered_and_dropped() {
    let sadb = Arc::new(SaDb::new());
    let mut cfg = ipsec_config(false);
    cfg.sadb = Some(Arc::clone(&sadb));
    let mut w = Worker::new(Shared::new(cfg), Arc::new(Stats::default()));
    let me = teredo(CLIENT).encode();
    let now = Instant::now();
    let (tx, rx) = std::sync::mpsc::sync_channel(8);
    assert!(sadb.awaiting().set_sink(move |remote, esp| {
        let esp = esp.to_vec();
        tx.try_send(gate64_esp::EspCandidate { remote, esp })
            .is_ok()
    }));
    let packet = |spi: u32, len: usize| {
        let mut esp = vec![0u8; len];
        esp[..4].copy_from_slice(&spi.to_be_bytes());
        esp[7] = 1;
        esp
    };
    let awaiting = packet(0xdead_beef, 64);
    let other = packet(0xdead_bee0, 64);
    let from_teredo_udp = |w: &mut Worker, esp: &[u8]| {
        from_teredo(w, now, CLIENT, &udp_with(me, ENDPOINT, 4500, esp))
    };
    assert_eq!(
        from_teredo_udp(&mut w, &awaiting),
        Verdict::Drop(DropReason::EspUnknownSpi)
    );
    assert!(rx.try_recv().is_err(), "nothing published yet");
    sadb.awaiting().publish([0xdead_beef].into_iter().collect());
    for esp in [&awaiting, &other] {
        assert_eq!(
            from_teredo_udp(&mut w, esp),
            Verdict::Drop(DropReason::EspUnknownSpi)
        );
    }
    let got = rx.try_recv().expect("offered");
    assert_eq!(got.esp, awaiting);
    assert_eq!(got.remote.ip(), std::net::IpAddr::V6(me));
    assert!(rx.try_recv().is_err(), "the other SPI is not offered");
    let local: SocketAddr = "192.0.2.10:4500".parse().unwrap();
    let remote: SocketAddr = "198.51.100.10:4500".parse().unwrap();
    for esp in [
        awaiting.clone(),
        packet(0xdead_beef, gate64_esp::MAX_ESP_CANDIDATE + 1),
    ] {
        let (mut buf, start, end) = framed(&esp);
        let v = w.handle_native_esp(now, local, remote, &mut buf, start, end);
        assert_eq!(v, Verdict::Drop(DropReason::EspUnknownSpi));
    }
    let native = rx.try_recv().expect("offered natively");
    assert_eq!((native.remote, native.esp), (remote, awaiting));
    assert!(rx.try_recv().is_err(), "an oversize packet is not offered");
    assert_eq!(w.stats().drops(DropReason::EspUnknownSpi), 5);
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

#[test]
fn a_sealed_ping_reaches_the_tun_and_the_reply_is_sealed_back() {
    for cipher in [
        Cipher::AesGcm16_256,
        Cipher::AesGcm16_128,
        Cipher::AesCbc256HmacSha256,
        Cipher::AesCbc128HmacSha256,
    ] {
        sealed_ping_round_trip(cipher);
    }
}

fn sealed_ping_round_trip(cipher: Cipher) {
    for udp in [true, false] {
        let (mut w, client_seal, client_open) = with_sa_cipher(INNER, udp, cipher);
        let ping = echo(INNER, CORP_HOST, 32);
        let (v, bytes) = teredo_in(&mut w, &sealed(&client_seal, &ping, udp));
        assert!(matches!(v, Verdict::Tun { .. }), "udp = {udp}: {v:?}");
        assert_eq!(bytes, ping, "the inner packet, opened in place");
        // The corporate host answers; the client is a verified peer by now.
        let reply = echo(CORP_HOST, INNER, 32);
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
        if udp {
            assert_eq!(outer.next_header(), ipv6::NH_UDP);
            let d = gate64_wire::udp::Packet::new_checked(outer.payload()).unwrap();
            assert_eq!((d.src_port(), d.dst_port()), (4500, NAT_T_CLIENT_PORT));
            let pseudo = checksum::pseudo_header_v6(
                &ENDPOINT,
                &teredo(CLIENT).encode(),
                ipv6::NH_UDP,
                u32::from(d.len()),
            );
            assert!(d.verify_checksum(pseudo), "UDP checksum");
        } else {
            assert_eq!(outer.next_header(), crate::ipsec::NH_ESP);
        }
        let opened = client_open.open(&mut buf[esp_at..end]).unwrap();
        assert_eq!(opened.inner.start, cipher.header_len());
        assert_eq!(
            &buf[esp_at..][opened.inner],
            &reply[..],
            "{cipher:?} udp = {udp}"
        );
        assert_eq!(total_drops(w.stats()), 0);
    }
}

#[test]
fn replay_bad_icv_unknown_spi_and_selector_violations_are_dropped_under_their_reason() {
    for cipher in [Cipher::AesGcm16_256, Cipher::AesCbc256HmacSha256] {
        esp_drops_under_their_reason(cipher);
    }
}

fn esp_drops_under_their_reason(cipher: Cipher) {
    let (mut w, client_seal, _) = with_sa_cipher(INNER, true, cipher);
    let good = sealed(&client_seal, &echo(INNER, CORP_HOST, 8), true);
    assert!(matches!(teredo_in(&mut w, &good).0, Verdict::Tun { .. }));
    assert_eq!(
        teredo_in(&mut w, &good).0,
        Verdict::Drop(DropReason::EspReplay)
    );
    let mut forged = sealed(&client_seal, &echo(INNER, CORP_HOST, 8), true);
    let last = forged.len() - 1;
    forged[last] ^= 1;
    assert_eq!(
        teredo_in(&mut w, &forged).0,
        Verdict::Drop(DropReason::EspAuth)
    );
    let mut unknown = sealed(&client_seal, &echo(INNER, CORP_HOST, 8), true);
    unknown[48..52].copy_from_slice(&0x3333_3333u32.to_be_bytes());
    assert_eq!(
        teredo_in(&mut w, &unknown).0,
        Verdict::Drop(DropReason::EspUnknownSpi)
    );
    // The inner source outside the SA's remote selector, the destination outside its local
    // one.
    for inner in [
        echo("fd00:c1::102".parse().unwrap(), CORP_HOST, 8),
        echo(INNER, "2001:db8:200::5".parse().unwrap(), 8),
    ] {
        let pkt = sealed(&client_seal, &inner, true);
        assert_eq!(
            teredo_in(&mut w, &pkt).0,
            Verdict::Drop(DropReason::EspSelector)
        );
    }
    for (reason, n) in [
        (DropReason::EspReplay, 1),
        (DropReason::EspAuth, 1),
        (DropReason::EspUnknownSpi, 1),
        (DropReason::EspSelector, 2),
    ] {
        assert_eq!(w.stats().drops(reason), n, "{reason:?}");
    }
    assert_eq!(total_drops(w.stats()), 5);
}

#[test]
fn esp_from_another_client_than_the_sas_peer_is_refused() {
    let (mut w, client_seal, _) = with_sa(INNER, true);
    let mut pkt = sealed(&client_seal, &echo(INNER, CORP_HOST, 8), true);
    let other = teredo(OTHER).encode();
    pkt[8..24].copy_from_slice(&other.octets());
    let (mut buf, start, end) = framed(&pkt);
    let v = w.handle_teredo(Instant::now(), PRIMARY, OTHER, &mut buf, start, end);
    assert_eq!(v, Verdict::Drop(DropReason::SpoofedSource));
}

#[test]
fn the_sa_opens_the_corporate_network_its_tunnel_covers_and_nothing_else() {
    // The client's own outer address as its inner one (no pool6), as Windows does.
    let me = teredo(CLIENT).encode();
    let (mut w, client_seal, _) = with_sa(me, false);
    // Without ESP the same client still reaches nothing corporate.
    assert_eq!(
        teredo_in(&mut w, &echo(me, CORP_HOST, 8)).0,
        Verdict::Drop(DropReason::NoSa)
    );
    let (v, _) = teredo_in(
        &mut w,
        &sealed(&client_seal, &echo(me, CORP_HOST, 8), false),
    );
    assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
    // IKE replies from the endpoint go out in the clear, whatever SA covers the client.
    let mut ike = udp_ports(ENDPOINT, me, 500, 500, 80);
    ike[48..52].copy_from_slice(&[0x11; 4]);
    let (mut buf, start, end) = framed(&ike);
    let v = w.handle_tun(Instant::now(), &mut buf, start, end);
    let Verdict::Udp { start, end, .. } = v else {
        panic!("{v:?}");
    };
    assert_eq!(&buf[start..end], &ike[..]);
}

/// `outer` (an IPv6 packet without extension headers) cut into fragments of at most
/// `chunk` payload bytes (a multiple of 8), as the client's kernel sends it over a 1280-byte
/// link (RFC 8200 §4.5).
pub(super) fn fragments(outer: &[u8], chunk: usize, id: u32) -> Vec<Vec<u8>> {
    let (header, payload) = outer.split_at(ipv6::HEADER_LEN);
    payload
        .chunks(chunk)
        .enumerate()
        .map(|(i, part)| {
            let offset = i * chunk;
            let more = offset + part.len() < payload.len();
            let mut f = header.to_vec();
            f[4..6].copy_from_slice(&u16::try_from(8 + part.len()).unwrap().to_be_bytes());
            f[6] = 44;
            let field = u16::try_from(offset / 8).unwrap() << 3 | u16::from(more);
            f.extend_from_slice(&[header[6], 0]);
            f.extend_from_slice(&field.to_be_bytes());
            f.extend_from_slice(&id.to_be_bytes());
            f.extend_from_slice(part);
            f
        })
        .collect()
}

#[test]
fn fragmented_esp_is_reassembled_opened_and_written_to_the_tun() {
    let (mut w, client_seal, _) = with_sa(INNER, true);
    let ping = echo(INNER, CORP_HOST, 1300);
    let outer = sealed(&client_seal, &ping, true);
    assert!(outer.len() > 1280);
    let mut parts = fragments(&outer, 1232, 0x1234);
    assert_eq!(parts.len(), 2);
    // Out of order, as a network may deliver them.
    parts.reverse();
    for part in &parts {
        assert_eq!(teredo_in(&mut w, part).0, Verdict::Consumed);
    }
    assert_eq!(w.poll_tun_write(), Some(ping));
    assert_eq!(w.poll_tun_write(), None);
    assert_eq!(total_drops(w.stats()), 0);
    // An exact duplicate is dropped alone; the datagram still completes.
    let ping = echo(INNER, CORP_HOST, 1300);
    let outer = sealed(&client_seal, &ping, true);
    let parts = fragments(&outer, 1232, 0x1235);
    assert_eq!(teredo_in(&mut w, &parts[0]).0, Verdict::Consumed);
    assert_eq!(
        teredo_in(&mut w, &parts[0]).0,
        Verdict::Drop(DropReason::FragDuplicate)
    );
    assert_eq!(teredo_in(&mut w, &parts[1]).0, Verdict::Consumed);
    assert_eq!(w.poll_tun_write(), Some(ping));
    assert_eq!(total_drops(w.stats()), 1);
}

/// An IP-HTTPS connection's send queue that keeps what it is given.
#[derive(Default)]
struct Queue(std::sync::Mutex<Vec<Vec<u8>>>);

impl ClientQueue for Queue {
    fn push(&self, packet: &[u8]) -> bool {
        self.0.lock().unwrap().push(packet.to_vec());
        true
    }
}

#[test]
fn an_iphttps_client_sends_esp_as_next_header_50_and_gets_sealed_replies_in_its_queue() {
    // Windows' way: ESP straight in IPv6 (no UDP), the client's own address inside.
    let me: Ipv6Addr = "2001:db8:1:6::b".parse().unwrap();
    let mut cfg = ipsec_config(false);
    cfg.iphttps_prefix = Some(Prefix::new("2001:db8:1::".parse().unwrap(), 48));
    let (mut w, client_seal, client_open) = with_sa_for(me, me, false, cfg, None);
    let queue = Arc::new(Queue::default());
    w.shared().iphttps_clients().insert(
        "2001:db8:1:6::".parse().unwrap(),
        Arc::clone(&queue) as Arc<dyn ClientQueue>,
    );
    let ping = echo(me, CORP_HOST, 40);
    // IP-HTTPS packets lie back to back in the stream buffer: no headroom before this one.
    let mut stream = sealed_from(&client_seal, &ping, false, me);
    let end = stream.len();
    let v = iphttps_packet(
        &mut w,
        Instant::now(),
        "2001:db8:1:6::".parse().unwrap(),
        &mut stream,
        0,
        end,
    );
    let Verdict::Tun { start, end } = v else {
        panic!("{v:?}");
    };
    assert_eq!(&stream[start..end], &ping[..]);
    let reply = echo(CORP_HOST, me, 40);
    assert_eq!(from_tun(&mut w, Instant::now(), &reply), Verdict::Consumed);
    let mut sent = queue
        .0
        .lock()
        .unwrap()
        .pop()
        .expect("the sealed reply is queued");
    let outer = ipv6::Packet::new_checked(&sent).unwrap();
    assert_eq!((outer.src(), outer.dst()), (ENDPOINT, me));
    assert_eq!(outer.next_header(), crate::ipsec::NH_ESP);
    let opened = client_open.open(&mut sent[ipv6::HEADER_LEN..]).unwrap();
    assert_eq!(&sent[ipv6::HEADER_LEN..][opened.inner], &reply[..]);
    assert_eq!(total_drops(w.stats()), 0);
}

// An IKE flood, on the road: one client's IKE beyond its budget is shed before the TUN
// (`ike_rate_limited`); another client's IKE still passes, and the budget refills.
#[test]
fn ike_beyond_a_clients_budget_is_ike_rate_limited_and_others_still_pass() {
    let mut w = ike_limited_worker(3);
    let (me, other) = (teredo(CLIENT).encode(), teredo(OTHER).encode());
    let t0 = Instant::now();
    let init = udp_with(me, ENDPOINT, 500, &[0x11; 28]);
    let verdicts: Vec<Verdict> = (0..10)
        .map(|_| from_teredo(&mut w, t0, CLIENT, &init))
        .collect();
    let passed = verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::Tun { .. }))
        .count();
    assert_eq!(passed, 6, "the burst is twice the rate: {verdicts:?}");
    assert_eq!(w.stats().drops(DropReason::IkeRateLimited), 4);
    // Only IKE counts: the client's ping to the endpoint still passes.
    let v = from_teredo(&mut w, t0, CLIENT, &echo(me, ENDPOINT, 8));
    assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
    let theirs = udp_with(other, ENDPOINT, 4500, &[0, 0, 0, 0, 0x11, 0x22]);
    let v = from_teredo(&mut w, t0, OTHER, &theirs);
    assert!(matches!(v, Verdict::Tun { .. }), "another client: {v:?}");
    let later = t0 + Duration::from_secs(1);
    let v = from_teredo(&mut w, later, CLIENT, &init);
    assert!(matches!(v, Verdict::Tun { .. }), "refilled: {v:?}");
    assert_eq!(total_drops(w.stats()), 4);
}

// One host behind one IPv4 address opens a Teredo mapping per port: 200 ports of it get no
// more IKE through than the per-host budget; a client of another address still gets in.
#[test]
fn all_teredo_ports_of_one_ipv4_share_one_host_ike_budget() {
    let mut w = ike_limited_worker(3);
    let t0 = Instant::now();
    let passed = (40_000..40_200u16)
        .filter(|&port| {
            let mapping = SocketAddrV4::new(*CLIENT.ip(), port);
            let init = udp_with(teredo(mapping).encode(), ENDPOINT, 500, &[0x11; 28]);
            matches!(from_teredo(&mut w, t0, mapping, &init), Verdict::Tun { .. })
        })
        .count();
    let host_burst = 2 * 3 * crate::ike_limit::HOST_SHARE as usize;
    assert_eq!(passed, host_burst);
    assert_eq!(
        w.stats().drops(DropReason::IkeRateLimited),
        (200 - host_burst) as u64
    );
    let theirs = udp_with(teredo(OTHER).encode(), ENDPOINT, 500, &[0x11; 28]);
    let v = from_teredo(&mut w, t0, OTHER, &theirs);
    assert!(matches!(v, Verdict::Tun { .. }), "another address: {v:?}");
}

// Every address of an IP-HTTPS connection's /64 is one client: rotating the interface
// identifier does not buy a new budget.
#[test]
fn an_iphttps_64_shares_one_ike_budget() {
    let mut w = ike_limited_worker(1);
    let prefix: Ipv6Addr = "2001:db8:5::".parse().unwrap();
    let now = Instant::now();
    let passed = (1..=5u128)
        .filter(|i| iphttps_ike_passes(&mut w, now, prefix, Ipv6Addr::from(u128::from(prefix) + i)))
        .count();
    assert_eq!(passed, 2);
    assert_eq!(w.stats().drops(DropReason::IkeRateLimited), 3);
}

// IP-HTTPS /64s are leases of gate64's pool, one per connection: many of one /48 are many
// clients, and one of them at its limit takes nothing from the others' budgets.
#[test]
fn iphttps_64s_of_one_48_keep_their_own_ike_budgets() {
    let mut w = ike_limited_worker(1);
    let now = Instant::now();
    let send = |w: &mut Worker, net: u128| {
        let prefix = Ipv6Addr::from((0x2001_0db8_0005_0000u128 + net) << 64);
        iphttps_ike_passes(w, now, prefix, Ipv6Addr::from(u128::from(prefix) + 1))
    };
    // The first client spends its burst and is then shed.
    assert_eq!((0..5).filter(|_| send(&mut w, 0)).count(), 2);
    // 64 other /64s of the same /48 each still get their own burst.
    let others = (1..=64u128)
        .filter(|&n| send(&mut w, n) && send(&mut w, n))
        .count();
    assert_eq!(others, 64);
    assert_eq!(w.stats().drops(DropReason::IkeRateLimited), 3);
}

/// A worker whose road lets each client `per_sec` IKE packets a second (as many again at once).
fn ike_limited_worker(per_sec: u32) -> Worker {
    let mut cfg = ipsec_config(false);
    cfg.ike_per_client_per_sec = per_sec;
    Worker::new(Shared::new(cfg), Arc::new(Stats::default()))
}

/// Whether an IKE packet from `src` over the IP-HTTPS connection of `prefix` reaches the TUN.
fn iphttps_ike_passes(w: &mut Worker, now: Instant, prefix: Ipv6Addr, src: Ipv6Addr) -> bool {
    let (mut buf, start, end) = framed(&udp_with(src, ENDPOINT, 500, &[0x11; 28]));
    matches!(
        iphttps_packet(w, now, prefix, &mut buf, start, end),
        Verdict::Tun { .. }
    )
}

/// `pkt` as an ICMPv6 message of `msg_type` (code 0); the body is whatever `pkt` carried.
fn as_icmpv6(mut pkt: Vec<u8>, msg_type: u8) -> Vec<u8> {
    pkt[6] = ipv6::NH_ICMPV6;
    pkt[ipv6::HEADER_LEN] = msg_type;
    pkt[ipv6::HEADER_LEN + 1] = 0;
    pkt
}

/// A worker with the Teredo client at `CLIENT` verified (its bubble answered), so that the
/// relay sends to it at once; and the client's address.
fn with_trusted_client(open: bool) -> (Worker, Ipv6Addr) {
    let mut w = ipsec_worker(open);
    let me = teredo(CLIENT).encode();
    let v = from_teredo(
        &mut w,
        Instant::now(),
        CLIENT,
        &bubble(me, server_link_local()),
    );
    assert_eq!(v, Verdict::Consumed);
    (w, me)
}

#[test]
fn with_require_only_ike_icmpv6_errors_nd_and_own_echo_replies_reach_a_client_outside_an_sa() {
    let (mut w, me) = with_trusted_client(false);
    let now = Instant::now();
    let marked = [0u8, 0, 0, 0, 0x11, 0x22];
    let admitted = [
        udp_ports(ENDPOINT, me, 500, 500, 100),
        udp_with(ENDPOINT, me, 4500, &marked),
        as_icmpv6(udp(CORP_HOST, me, 100), icmpv6::TYPE_DEST_UNREACHABLE),
        as_icmpv6(udp(CORP_HOST, me, 100), icmpv6::TYPE_PACKET_TOO_BIG),
        as_icmpv6(
            udp(CORP_ADDRESS, me, 100),
            icmpv6::TYPE_ROUTER_ADVERTISEMENT,
        ),
        as_icmpv6(udp(CORP_ADDRESS, me, 100), 136),
        as_icmpv6(udp(CORP_ADDRESS, me, 100), icmpv6::TYPE_ECHO_REPLY),
        as_icmpv6(udp(ENDPOINT, me, 100), icmpv6::TYPE_ECHO_REPLY),
    ];
    for pkt in &admitted {
        let v = from_tun(&mut w, now, pkt);
        assert!(matches!(v, Verdict::Udp { to: CLIENT, .. }), "{v:?}");
    }
    let refused = [
        udp(CORP_HOST, me, 100),
        tcp_syn(CORP_HOST, me, 443),
        // IKE ports from anyone but the endpoint; 4500 from the endpoint without the marker.
        udp_ports(CORP_HOST, me, 500, 500, 100),
        udp_with(ENDPOINT, me, 4500, &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1]),
        // Echo from a corporate host: a request, and a reply gate64 never asked for.
        echo(CORP_HOST, me, 8),
        as_icmpv6(udp(CORP_HOST, me, 100), icmpv6::TYPE_ECHO_REPLY),
    ];
    for pkt in &refused {
        let v = from_tun(&mut w, now, pkt);
        assert_eq!(v, Verdict::Drop(DropReason::NoSaToClient));
    }
    assert_eq!(
        w.stats().drops(DropReason::NoSaToClient),
        refused.len() as u64
    );
    assert_eq!(total_drops(w.stats()), refused.len() as u64);
}

#[test]
fn without_require_a_corporate_host_reaches_a_client_in_clear() {
    let (mut w, me) = with_trusted_client(true);
    let v = from_tun(&mut w, Instant::now(), &udp(CORP_HOST, me, 100));
    assert!(matches!(v, Verdict::Udp { to: CLIENT, .. }), "{v:?}");
    assert_eq!(total_drops(w.stats()), 0);
}

/// A client that reaches gate64 directly: its ESP (the UDP payload of the listen socket) is
/// opened and goes to the TUN; the corporate host's reply is sealed to its address and port
/// from the listen socket; ESP of its SA elsewhere (another listen address, through Teredo)
/// is spoofed; a forged packet from a new port moves nothing, an authentic one moves the SA.
#[test]
fn a_native_client_is_answered_from_its_socket_and_followed_to_its_new_port() {
    let local: SocketAddr = "192.0.2.10:4500".parse().unwrap();
    let public: std::net::Ipv4Addr = "198.51.100.10".parse().unwrap();
    let from = SocketAddr::new(public.into(), NAT_T_CLIENT_PORT);
    let (mut w, client_seal, client_open) = with_sa_for(
        public.to_ipv6_mapped(),
        INNER,
        true,
        ipsec_config(false),
        Some(local),
    );
    let esp =
        |sa: &Outbound, inner: &[u8]| sealed(sa, inner, true)[ipv6::HEADER_LEN + 8..].to_vec();
    let native_in = |w: &mut Worker, local: SocketAddr, from: SocketAddr, esp: &[u8]| {
        let (mut buf, start, end) = framed(esp);
        let v = w.handle_native_esp(Instant::now(), local, from, &mut buf, start, end);
        let bytes = match v {
            Verdict::Tun { start, end } => buf[start..end].to_vec(),
            _ => Vec::new(),
        };
        (v, bytes)
    };
    let reply_to = |w: &mut Worker, open: &Inbound| {
        let reply = echo(CORP_HOST, INNER, 32);
        let (mut buf, start, end) = framed(&reply);
        let v = w.handle_tun(Instant::now(), &mut buf, start, end);
        let Verdict::Native {
            from,
            to,
            start,
            end,
        } = v
        else {
            panic!("{v:?}");
        };
        let opened = open.open(&mut buf[start..end]).unwrap();
        assert_eq!(&buf[start..][opened.inner], &reply[..]);
        (from, to)
    };
    let ping = echo(INNER, CORP_HOST, 32);
    let (v, bytes) = native_in(&mut w, local, from, &esp(&client_seal, &ping));
    assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
    assert_eq!(bytes, ping);
    assert_eq!(reply_to(&mut w, &client_open), (local, from));
    let elsewhere: SocketAddr = "192.0.2.11:4500".parse().unwrap();
    let again = esp(&client_seal, &ping);
    assert_eq!(
        native_in(&mut w, elsewhere, from, &again).0,
        Verdict::Drop(DropReason::SpoofedSource)
    );
    assert_eq!(
        teredo_in(&mut w, &sealed(&client_seal, &ping, true)).0,
        Verdict::Drop(DropReason::SpoofedSource)
    );
    let rebound = SocketAddr::new(public.into(), 5000);
    let mut forged = esp(&client_seal, &ping);
    let last = forged.len() - 1;
    forged[last] ^= 1;
    assert_eq!(
        native_in(&mut w, local, rebound, &forged).0,
        Verdict::Drop(DropReason::EspAuth)
    );
    assert_eq!(reply_to(&mut w, &client_open), (local, from), "not moved");
    let (v, _) = native_in(&mut w, local, rebound, &esp(&client_seal, &ping));
    assert!(matches!(v, Verdict::Tun { .. }), "{v:?}");
    assert_eq!(reply_to(&mut w, &client_open), (local, rebound), "moved");
}

mod ipv4_inside;

/// The SA database of a worker built by [`with_sa`].
fn sadb_of(w: &Worker) -> Arc<SaDb> {
    Arc::clone(w.shared.cfg.sadb.as_ref().unwrap())
}

#[test]
fn a_session_policy_narrows_reach_both_ways_from_the_next_packet() {
    let (mut w, client_seal, _) = with_sa(INNER, true);
    let other: Ipv6Addr = "2001:db8:100::6".parse().unwrap();
    let ok = sealed(&client_seal, &echo(INNER, other, 8), true);
    assert!(matches!(teredo_in(&mut w, &ok).0, Verdict::Tun { .. }));
    let policy = gate64_esp::SessionPolicy::new(
        "contractors".into(),
        vec![
            Selector::address(CORP_HOST.into()),
            Selector::prefix("10.0.0.0/8".parse().unwrap()),
        ],
        None,
        Instant::now(),
    );
    assert_eq!(sadb_of(&w).apply_policy(7, Some(Arc::new(policy))), 1);
    let to_host = sealed(&client_seal, &echo(INNER, CORP_HOST, 8), true);
    assert!(matches!(teredo_in(&mut w, &to_host).0, Verdict::Tun { .. }));
    let to_other = sealed(&client_seal, &echo(INNER, other, 8), true);
    assert_eq!(
        teredo_in(&mut w, &to_other).0,
        Verdict::Drop(DropReason::Policy)
    );
    // Towards the client: from the host the policy reaches, sealed; from the other, dropped.
    assert!(matches!(
        from_tun(&mut w, Instant::now(), &echo(CORP_HOST, INNER, 8)),
        Verdict::Udp { .. }
    ));
    assert_eq!(
        from_tun(&mut w, Instant::now(), &echo(other, INNER, 8)),
        Verdict::Drop(DropReason::Policy)
    );
    assert_eq!(w.stats().drops(DropReason::Policy), 2);
    // Cleared: the other host again.
    sadb_of(&w).apply_policy(7, None);
    let again = sealed(&client_seal, &echo(INNER, other, 8), true);
    assert!(matches!(teredo_in(&mut w, &again).0, Verdict::Tun { .. }));
    assert_eq!(total_drops(w.stats()), 2);
}

#[test]
fn a_session_rate_limit_drops_beyond_its_burst_each_way() {
    let (mut w, client_seal, _) = with_sa(INNER, true);
    // 1 Mbit/s: a burst of about 64 KiB each way, then nothing more at one instant (the
    // test runs well within the 0.5 s the burst takes to refill).
    let policy = gate64_esp::SessionPolicy::new(
        "slow".into(),
        vec![Selector::prefix("::/0".parse().unwrap())],
        Some(1),
        Instant::now(),
    );
    sadb_of(&w).apply_policy(7, Some(Arc::new(policy)));
    let (mut passed, mut limited) = (0, 0);
    for _ in 0..100 {
        let pkt = sealed(&client_seal, &echo(INNER, CORP_HOST, 1200), true);
        match teredo_in(&mut w, &pkt).0 {
            Verdict::Tun { .. } => passed += 1,
            Verdict::Drop(DropReason::RateLimit) => limited += 1,
            v => panic!("{v:?}"),
        }
    }
    assert!((40..=60).contains(&passed), "{passed} passed");
    assert_eq!(passed + limited, 100);
    let (mut out, mut out_limited) = (0, 0);
    for _ in 0..100 {
        match from_tun(&mut w, Instant::now(), &echo(CORP_HOST, INNER, 1200)) {
            Verdict::Udp { .. } => out += 1,
            Verdict::Drop(DropReason::RateLimit) => out_limited += 1,
            v => panic!("{v:?}"),
        }
    }
    assert!(
        (40..=60).contains(&out),
        "{out} sent: the other direction's own bucket"
    );
    assert_eq!(
        w.stats().drops(DropReason::RateLimit),
        limited + out_limited
    );
}
