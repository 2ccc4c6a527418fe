//! The DNS64 server on loopback sockets against tiny fake upstreams: synthesis over real UDP and
//! TCP, the cache, truncation and the TCP retry upstream, failover on timeout and refusal,
//! SERVFAIL when every upstream is down, and malformed queries.
#![allow(missing_docs)]

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gate64_dataplane::{Dns64Result, Dns64Stats};
use gate64_io::dns64::{Server, Settings};
use gate64_nat64::Prefix;
use hickory_proto::op::{Edns, Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, PTR, SOA, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How a fake upstream behaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Answers from the little zone in `zone_answer`.
    Zone,
    /// Answers every query REFUSED.
    Refuse,
    /// Never answers.
    Silent,
}

fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

fn soa() -> Record {
    let soa = SOA::new(
        name("ns.example."),
        name("h.example."),
        1,
        3600,
        600,
        86400,
        300,
    );
    Record::from_rdata(name("example."), 3600, RData::SOA(soa))
}

/// The fake zone: `v4.example` has only A, `v6.example` has AAAA, `nx.example` does not exist,
/// `big.example` TXT is too big for UDP, and 192.0.2.1's PTR is `v4.example`.
fn zone_answer(req: &Message, tcp: bool) -> Message {
    let q = &req.queries[0];
    let mut m = Message::response(req.metadata.id, OpCode::Query);
    m.metadata.recursion_available = true;
    m.queries = req.queries.clone();
    let owner = q.name().clone();
    let n = q.name().to_lowercase().to_ascii();
    match (n.as_str(), q.query_type()) {
        ("v4.example.", RecordType::A) => {
            m.add_answer(Record::from_rdata(
                owner,
                3600,
                RData::A(A::new(192, 0, 2, 1)),
            ));
        }
        ("v6.example.", RecordType::AAAA) => {
            m.add_answer(Record::from_rdata(
                owner,
                100,
                RData::AAAA(AAAA("2001:db8::6".parse().unwrap())),
            ));
        }
        ("1.2.0.192.in-addr.arpa.", RecordType::PTR) => {
            m.add_answer(Record::from_rdata(
                owner,
                100,
                RData::PTR(PTR(name("v4.example."))),
            ));
        }
        ("big.example.", RecordType::TXT) if !tcp => {
            m.metadata.truncation = true;
        }
        ("big.example.", RecordType::TXT) => {
            for i in 0..20 {
                let text = format!("{i:02}{}", "x".repeat(200));
                m.add_answer(Record::from_rdata(
                    owner.clone(),
                    100,
                    RData::TXT(TXT::new(vec![text])),
                ));
            }
        }
        ("nx.example.", _) => {
            m.metadata.response_code = ResponseCode::NXDomain;
            m.add_authority(soa());
        }
        _ => {
            m.add_authority(soa());
        }
    }
    m
}

/// A fake upstream on loopback (UDP and TCP on the same port). Returns its address and a
/// counter of the UDP queries it received.
async fn upstream(mode: Mode) -> (SocketAddr, Arc<AtomicUsize>) {
    let (udp, addr, tcp) = udp_and_tcp_on_one_port().await;
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        loop {
            let Ok((n, from)) = udp.recv_from(&mut buf).await else {
                return;
            };
            count.fetch_add(1, Ordering::Relaxed);
            let Ok(req) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let reply = match mode {
                Mode::Silent => continue,
                Mode::Refuse => {
                    let mut m =
                        Message::error_msg(req.metadata.id, OpCode::Query, ResponseCode::Refused);
                    m.queries = req.queries.clone();
                    m
                }
                Mode::Zone => zone_answer(&req, false),
            };
            let _ = udp.send_to(&reply.to_vec().unwrap(), from).await;
        }
    });
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = tcp.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let Ok(len) = s.read_u16().await else { return };
                let mut buf = vec![0u8; usize::from(len)];
                if s.read_exact(&mut buf).await.is_err() {
                    return;
                }
                let req = Message::from_vec(&buf).unwrap();
                let wire = zone_answer(&req, true).to_vec().unwrap();
                let _ = s.write_u16(wire.len() as u16).await;
                let _ = s.write_all(&wire).await;
            });
        }
    });
    (addr, seen)
}

/// A UDP socket and a TCP listener on one free loopback port (`gate64_sys`'s retry when
/// another test holds the UDP port's number on TCP).
async fn udp_and_tcp_on_one_port() -> (tokio::net::UdpSocket, SocketAddr, tokio::net::TcpListener) {
    let (udp, addr, tcp) = gate64_sys::socket::udp_and_tcp_on_one_port(
        (Ipv4Addr::LOCALHOST, 0).into(),
        |a| {
            let s = UdpSocket::bind(a)?;
            let got = s.local_addr()?;
            Ok((s, got))
        },
        std::net::TcpListener::bind,
    )
    .unwrap();
    udp.set_nonblocking(true).unwrap();
    tcp.set_nonblocking(true).unwrap();
    (
        tokio::net::UdpSocket::from_std(udp).unwrap(),
        addr,
        tokio::net::TcpListener::from_std(tcp).unwrap(),
    )
}

struct Running {
    addr: SocketAddr,
    stats: Arc<Dns64Stats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("server stops within 5 s")
            .unwrap();
    }
}

async fn start(upstream: Vec<SocketAddr>, fast: bool) -> Running {
    let mut s = Settings::new(upstream, Prefix::WELL_KNOWN.allow_private(true));
    s.listen = vec![(Ipv4Addr::LOCALHOST, 0).into()];
    s.timeout = Duration::from_millis(300);
    s.udp_threads = 2;
    s.udp_fast_path = fast;
    let stats = Arc::new(Dns64Stats::default());
    let server = Server::bind(s, Arc::clone(&stats)).unwrap();
    let addr = server.local_addrs()[0];
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        server
            .run(async {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    Running {
        addr,
        stats,
        stop: Some(tx),
        task,
    }
}

fn query(qname: &str, t: RecordType, id: u16) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = id;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(name(qname), t));
    let mut e = Edns::new();
    e.set_max_payload(1232);
    m.set_edns(e);
    m.to_vec().unwrap()
}

/// Sends `wire` over UDP and returns the raw answer, or `None` after 3 s.
async fn ask_raw(server: SocketAddr, wire: Vec<u8>) -> Option<Vec<u8>> {
    tokio::task::spawn_blocking(move || {
        let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s.send_to(&wire, server).unwrap();
        let mut buf = [0u8; 65535];
        s.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
    })
    .await
    .unwrap()
}

async fn ask(server: SocketAddr, qname: &str, t: RecordType) -> Message {
    let wire = ask_raw(server, query(qname, t, 0x5151))
        .await
        .expect("an answer");
    let m = Message::from_vec(&wire).unwrap();
    assert_eq!(m.metadata.id, 0x5151);
    m
}

async fn ask_tcp(server: SocketAddr, qname: &str, t: RecordType) -> Message {
    let mut s = tokio::net::TcpStream::connect(server).await.unwrap();
    let wire = query(qname, t, 0x7171);
    s.write_u16(wire.len() as u16).await.unwrap();
    s.write_all(&wire).await.unwrap();
    let len = tokio::time::timeout(Duration::from_secs(3), s.read_u16())
        .await
        .unwrap()
        .unwrap();
    let mut buf = vec![0u8; usize::from(len)];
    s.read_exact(&mut buf).await.unwrap();
    Message::from_vec(&buf).unwrap()
}

fn aaaa_of(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::AAAA(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthesizes_over_udp_and_tcp_and_caches() {
    for fast in [true, false] {
        let (up, seen) = upstream(Mode::Zone).await;
        let s = start(vec![up], fast).await;

        let m = ask(s.addr, "v4.example.", RecordType::AAAA).await;
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(aaaa_of(&m), ["64:ff9b::c000:201"], "fast={fast}");
        assert_eq!(m.answers[0].ttl, 300, "min(A 3600, SOA minimum 300)");
        assert!(!m.metadata.authentic_data);
        assert_eq!(seen.load(Ordering::Relaxed), 2, "AAAA, then A");

        // Again, with other letter case: from the cache.
        let m = ask(s.addr, "V4.Example.", RecordType::AAAA).await;
        assert_eq!(aaaa_of(&m), ["64:ff9b::c000:201"]);
        assert_eq!(m.queries[0].name().to_ascii(), "V4.Example.");
        assert_eq!(seen.load(Ordering::Relaxed), 2, "no new upstream query");
        assert_eq!(s.stats.cache_hits(), 1);

        let m = ask_tcp(s.addr, "v4.example.", RecordType::AAAA).await;
        assert_eq!(aaaa_of(&m), ["64:ff9b::c000:201"]);

        let m = ask(s.addr, "v6.example.", RecordType::AAAA).await;
        assert_eq!(aaaa_of(&m), ["2001:db8::6"]);

        let m = ask(s.addr, "nx.example.", RecordType::AAAA).await;
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);

        let ip6 = "1.0.2.0.0.0.0.c.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.b.9.f.f.4.6.0.0.ip6.arpa.";
        let m = ask(s.addr, ip6, RecordType::PTR).await;
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.answers[0].name, name(ip6));
        assert_eq!(m.answers[0].data, RData::PTR(PTR(name("v4.example."))));

        let m = ask(s.addr, "ipv4only.arpa.", RecordType::AAAA).await;
        assert_eq!(aaaa_of(&m), ["64:ff9b::c000:aa", "64:ff9b::c000:ab"]);

        let st = &s.stats;
        assert_eq!(st.queries(Dns64Result::Synthesized), 5, "fast={fast}");
        assert_eq!(st.queries(Dns64Result::Native), 1);
        assert_eq!(st.queries(Dns64Result::Nxdomain), 1);
        assert_eq!(st.queries(Dns64Result::Error), 0);
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_upstream_answer_is_retried_over_tcp_and_truncated_for_the_client() {
    let (up, _) = upstream(Mode::Zone).await;
    let s = start(vec![up], true).await;
    // Over UDP the ~4 KB answer does not fit the client's 1232 bytes: TC=1.
    let m = ask(s.addr, "big.example.", RecordType::TXT).await;
    assert!(m.metadata.truncation);
    // Over TCP the client gets all of it (gate64 got it from upstream over TCP).
    let m = ask_tcp(s.addr, "big.example.", RecordType::TXT).await;
    assert!(!m.metadata.truncation);
    assert_eq!(m.answers.len(), 20);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_over_to_the_second_upstream_on_timeout_and_refusal() {
    for first in [Mode::Silent, Mode::Refuse] {
        let (bad, bad_seen) = upstream(first).await;
        let (good, good_seen) = upstream(Mode::Zone).await;
        let s = start(vec![bad, good], true).await;
        let m = ask(s.addr, "v4.example.", RecordType::AAAA).await;
        assert_eq!(aaaa_of(&m), ["64:ff9b::c000:201"]);
        assert_eq!(bad_seen.load(Ordering::Relaxed), 1);
        // Sticky: the A query (and later queries) go to the upstream that answered.
        assert_eq!(good_seen.load(Ordering::Relaxed), 2);
        let _ = ask(s.addr, "v6.example.", RecordType::AAAA).await;
        assert_eq!(bad_seen.load(Ordering::Relaxed), 1);
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_down_is_servfail_and_counted() {
    let (a, _) = upstream(Mode::Silent).await;
    let (b, _) = upstream(Mode::Refuse).await;
    let s = start(vec![a, b], true).await;
    let m = ask(s.addr, "v4.example.", RecordType::AAAA).await;
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    assert_eq!(s.stats.queries(Dns64Result::Error), 1);
    // Not cached: the next query asks again (and fails again).
    let m = ask(s.addr, "v4.example.", RecordType::AAAA).await;
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    assert_eq!(s.stats.queries(Dns64Result::Error), 2);
    assert_eq!(s.stats.cache_hits(), 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_queries_get_formerr_or_nothing() {
    let (up, _) = upstream(Mode::Zone).await;
    let s = start(vec![up], true).await;
    // A readable header with a broken question: FORMERR with the query's ID.
    let mut bad = query("v4.example.", RecordType::AAAA, 0x0bad);
    bad.truncate(20);
    let answer = ask_raw(s.addr, bad).await.expect("FORMERR");
    let m = Message::from_vec(&answer).unwrap();
    assert_eq!(m.metadata.id, 0x0bad);
    assert_eq!(m.metadata.response_code, ResponseCode::FormErr);
    // Too short for a header, or a response: no answer.
    assert!(ask_raw(s.addr, vec![1, 2, 3]).await.is_none());
    let mut resp = query("v4.example.", RecordType::AAAA, 1);
    resp[2] |= 0x80;
    assert!(ask_raw(s.addr, resp).await.is_none());
    assert_eq!(s.stats.queries(Dns64Result::Malformed), 3);
    // Still serving.
    let m = ask(s.addr, "v4.example.", RecordType::AAAA).await;
    assert_eq!(aaaa_of(&m), ["64:ff9b::c000:201"]);
    s.stop().await;
}
