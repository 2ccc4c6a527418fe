//! The connection task's clean-up, over loopback TLS: a panic after link-up, and a client
//! that stops reading.

use super::lease::lock_pool;
use super::*;
use gate64_dataplane::{DataplaneConfig, Gauges, Prefix};
use gate64_wire::ipv6;
use std::net::{Ipv4Addr, TcpListener as StdTcpListener};
use std::path::PathBuf;
use tokio_rustls::client::TlsStream;

const PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0);

struct Lab {
    server: Arc<IphttpsServer>,
    addr: SocketAddr,
    connector: tokio_rustls::TlsConnector,
    _stop: watch::Sender<bool>,
    dir: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn settings(write_timeout: Duration) -> Settings {
    Settings {
        proto: ServerConfig::default(),
        max_handshakes: 4,
        handshake_timeout: Duration::from_secs(5),
        max_connections: 16,
        send_queue_bytes: 1 << 20,
        queue_budget_bytes: 8 << 20,
        write_timeout,
        client_hello_timeout: Duration::from_secs(2),
        max_handshakes_per_source: 2,
        max_handshakes_per_network: 64,
        max_connections_per_source: 1,
        lease_hints: None,
        peer_prefix: None,
    }
}

async fn lab(tag: &str, write_timeout: Duration) -> Lab {
    let dir = std::env::temp_dir().join(format!("gate64-io-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let tls = crate::tls::server_config(
        &cert,
        &key,
        None,
        (&[], false),
        gate64_ike::auth::ClientEku::Strict,
    )
    .unwrap();
    let connector =
        tokio_rustls::TlsConnector::from(crate::tls::client_config(&cert, None).unwrap());
    let shared = Shared::new(DataplaneConfig {
        teredo: None,
        relay: gate64_teredo::RelayConfig::default(),
        corp_prefixes: Vec::new(),
        corp_address: "2001:db8:100::1".parse().unwrap(),
        require_ipsec: true,
        ipsec_endpoint: None,
        ipsec4: None,
        ipsec_pool: None,
        sadb: None,
        ike_per_client_per_sec: 1_000,
        rs_per_sec: 20,
        rs_burst: 40,
        iphttps_prefix: Some(Prefix::new(PREFIX, 48)),
        iphttps_peer_prefix: None,
        nat64: None,
        binding_log: None,
        self_addresses: Vec::new(),
        dns64_listen: Vec::new(),
    });
    let corp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    corp.connect(corp.local_addr().unwrap()).unwrap();
    let exporter = Exporter::new(Vec::new(), Arc::new(Gauges::default));
    let server = IphttpsServer::new(
        tls,
        settings(write_timeout),
        shared,
        vec![Arc::new(CorpLink::Socket(corp))],
        Vec::new(),
        exporter,
    )
    .unwrap();
    let std_listener = StdTcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let listener = TcpListener::from_std(std_listener).unwrap();
    let (stop, rx) = watch::channel(false);
    tokio::spawn(Arc::clone(&server).run(listener, rx));
    Lab {
        server,
        addr,
        connector,
        _stop: stop,
        dir,
    }
}

/// TLS, the POST and its answer's status.
async fn link_up(lab: &Lab) -> (u16, TlsStream<TcpStream>) {
    let tcp = TcpStream::connect(lab.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = lab.connector.connect(name, tcp).await.unwrap();
    tls.write_all(&http::request("/IPHTTPS", "localhost"))
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let n = tls.read(&mut chunk).await.unwrap_or(0);
        assert!(n > 0, "closed before the response head");
        head.extend_from_slice(&chunk[..n]);
        if let Ok(Some((status, _))) = http::parse_response(&head) {
            return (status, tls);
        }
    }
}

/// Waits (≤ 10 s) until the server holds nothing for any connection.
async fn wait_all_freed(lab: &Lab) -> bool {
    for _ in 0..200 {
        let s = &lab.server;
        if s.connections() == 0
            && lock_pool(&s.pool).in_use() == 0
            && s.shared.iphttps_clients().is_empty()
            && s.shared.iphttps_clients().budget().used() == 0
            && s.handshakes.available_permits() == 4
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn pool_in_use(lab: &Lab) -> usize {
    lock_pool(&lab.server.pool).in_use()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_connection_task_frees_its_slot_and_64() {
    let lab = lab("panic", Duration::from_secs(30)).await;
    lab.server
        .panic_after_link_up
        .store(true, Ordering::Relaxed);
    let (status, mut tls) = link_up(&lab).await;
    assert_eq!(status, 200);
    // The task panicked after link-up: the client sees its connection end.
    let mut b = [0u8; 256];
    while matches!(tls.read(&mut b).await, Ok(n) if n > 0) {}
    assert!(
        wait_all_freed(&lab).await,
        "after the panic: {} connections, {} /64s in use, {} clients",
        lab.server.connections(),
        pool_in_use(&lab),
        lab.server.shared.iphttps_clients().len()
    );
    // With max_connections_per_source = 1 the source's slot must be free for this one.
    lab.server
        .panic_after_link_up
        .store(false, Ordering::Relaxed);
    let (status, _tls) = link_up(&lab).await;
    assert_eq!(status, 200);
    assert_eq!(lab.server.connections(), 1);
    assert_eq!(pool_in_use(&lab), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_and_returns_its_budget() {
    let lab = lab("stall", Duration::from_millis(500)).await;
    let (status, _tls) = link_up(&lab).await;
    assert_eq!(status, 200);
    // The first /64 of the pool is this client's; it never reads again.
    let dst = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0xa);
    let mut pkt = vec![0x5a; 1280];
    let plen = u16::try_from(1280 - ipv6::HEADER_LEN).unwrap();
    ipv6::emit_header(
        &mut pkt,
        plen,
        ipv6::NH_UDP,
        64,
        &"2001:db8:100::5".parse().unwrap(),
        &dst,
    )
    .unwrap();
    let clients = lab.server.shared.iphttps_clients();
    let mut closed = false;
    for _ in 0..400 {
        for _ in 0..64 {
            clients.deliver(&dst, &pkt);
        }
        if lab.server.connections() == 0 {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(closed, "a client that stopped reading was not closed");
    assert!(
        wait_all_freed(&lab).await,
        "the stalled link kept something"
    );
    let text = lab.server.exporter.encode();
    let timeouts = text
        .lines()
        .find_map(|l| l.strip_prefix("gate64_iphttps_write_timeouts_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert_eq!(timeouts, Some(1.0), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tcp_connection_takes_no_handshake_slot_and_is_cut() {
    let lab = lab("idle", Duration::from_secs(30)).await;
    // An idle TCP connection, then one more from the same source, over its limit of 1.
    let idle = std::net::TcpStream::connect(lab.addr).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = std::net::TcpStream::connect(lab.addr).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        lab.server.handshakes.available_permits(),
        4,
        "an idle TCP connection holds no handshake permit"
    );
    assert_eq!(
        lab.server.connections(),
        1,
        "the second is refused at accept"
    );
    // Cut after the ClientHello deadline (2 s).
    assert!(
        wait_all_freed(&lab).await,
        "the idle connection was not cut"
    );
    drop((idle, refused));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_raises_the_per_source_limit_for_new_connections() {
    let lab = lab("reload", Duration::from_secs(30)).await;
    let (status, _first) = link_up(&lab).await;
    assert_eq!(status, 200);
    // max_connections_per_source = 1: a second connection from 127.0.0.1 is closed at accept.
    let refused = std::net::TcpStream::connect(lab.addr).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(lab.server.connections(), 1);
    drop(refused);
    lab.server.apply(&Settings {
        max_connections_per_source: 2,
        ..settings(Duration::from_secs(30))
    });
    let (status, _second) = link_up(&lab).await;
    assert_eq!(status, 200);
    assert_eq!(lab.server.connections(), 2, "the first stayed up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_setups_holding_every_handshake_slot_are_cut_oldest_first_for_a_newcomer() {
    let lab = lab("reclaim", Duration::from_secs(30)).await;
    lab.server.apply(&Settings {
        max_handshakes_per_source: 8,
        max_handshakes_per_network: 8,
        max_connections_per_source: 8,
        ..settings(Duration::from_secs(30))
    });
    // Four set-ups that start a ClientHello and stall hold all 4 slots for their 5 s deadline.
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut s = std::net::TcpStream::connect(lab.addr).unwrap();
        std::io::Write::write_all(&mut s, &[0x16]).unwrap();
        stalled.push(s);
    }
    let mut full = false;
    for _ in 0..100 {
        if lab.server.handshakes.available_permits() == 0 {
            full = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(full, "the stalled set-ups took every slot");
    // Past the reclaim age (a quarter of the 5 s deadline), a newcomer gets the oldest's slot
    // and links up, long before the stalled ones' deadline would have freed one.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, _tls) = link_up(&lab).await;
    assert_eq!(status, 200);
    let text = lab.server.exporter.encode();
    let reclaimed = text
        .lines()
        .find_map(|l| l.strip_prefix("gate64_tls_handshakes_total{result=\"reclaimed\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(reclaimed.is_some_and(|n| n >= 1.0), "{text}");
    drop(stalled);
}

/// Sends a Router Solicitation from `fe80::<iid>` and returns the prefix of the first Router
/// Advertisement the link sends back.
async fn solicit(tls: &mut TlsStream<TcpStream>, iid: u64) -> Ipv6Addr {
    let mut rs = [0u8; 48];
    let ll = Ipv6Addr::from((0xfe80u128 << 112) | u128::from(iid));
    gate64_wire::icmpv6::emit_router_solicitation(&mut rs, &ll).unwrap();
    tls.write_all(&rs).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        while let Ok(Some(len)) = gate64_iphttps::framing::next_packet(&buf) {
            let pkt: Vec<u8> = buf.drain(..len).collect();
            let p = ipv6::Packet::new_checked(&pkt[..]).unwrap();
            if let Ok(ra) = gate64_wire::icmpv6::RouterAdvert::parse(&p) {
                return ra.prefix;
            }
        }
        let n = tls.read(&mut chunk).await.unwrap_or(0);
        assert!(n > 0, "closed before a router advertisement");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_client_gets_its_64_back_by_its_interface_id() {
    let lab = lab("lease", Duration::from_secs(30)).await;
    let (status, mut tls) = link_up(&lab).await;
    assert_eq!(status, 200);
    let first = solicit(&mut tls, 0x5).await;
    drop(tls);
    assert!(wait_all_freed(&lab).await);
    // The reconnect is handed the next fresh /64 at TLS time; its solicitation moves it back.
    let (_, mut tls) = link_up(&lab).await;
    assert_eq!(solicit(&mut tls, 0x5).await, first);
    assert_eq!(pool_in_use(&lab), 1);
    let text = lab.server.exporter.encode();
    assert!(
        text.contains("gate64_iphttps_prefix_reclaims_total{result=\"reclaimed\"} 1"),
        "{text}"
    );
    drop(tls);
    assert!(wait_all_freed(&lab).await);
    // Another interface id does not get it.
    let (_, mut tls) = link_up(&lab).await;
    assert_ne!(solicit(&mut tls, 0x6).await, first);
}
