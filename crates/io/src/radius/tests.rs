//! The sender against servers on loopback: one that answers as RFC 2866 says, one that is
//! silent, one that answers under another secret.

use super::*;
use gate64_accounting::radius::{ACCOUNTING_RESPONSE, StatusType};
use md5::{Digest, Md5};

fn request(n: u32) -> Request {
    Request {
        status: StatusType::Start,
        session_id: format!("s{n}"),
        multi_session_id: "m".into(),
        user_name: "CN=x".into(),
        calling_station: "2001:db8::1".into(),
        framed: Vec::new(),
        class: Vec::new(),
        session_time: None,
        counts: None,
        terminate: None,
        event_time: n,
    }
}

/// A server on loopback that answers every request it receives under `secret` (or stays
/// silent when `None`) until `stop` datagrams arrived; returns its address and the
/// session ids it saw.
fn server(secret: Option<&'static [u8]>) -> (SocketAddr, std::sync::mpsc::Receiver<String>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        socket
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let req = &buf[..n];
            // Acct-Session-Id (44) for the test's bookkeeping.
            let mut at = 20;
            while at + 1 < n {
                let len = usize::from(req[at + 1]);
                if req[at] == 44 {
                    let _ = tx.send(String::from_utf8_lossy(&req[at + 2..at + len]).into_owned());
                }
                at += len.max(2);
            }
            let Some(secret) = secret else { continue };
            let mut resp = vec![ACCOUNTING_RESPONSE, req[1], 0, 20];
            let mut md5 = Md5::new();
            md5.update(&resp);
            md5.update(&req[4..20]);
            md5.update(secret);
            let auth: [u8; 16] = md5.finalize().into();
            resp.extend_from_slice(&auth);
            let _ = socket.send_to(&resp, from);
        }
    });
    (addr, rx)
}

/// A server entry under the tests' secret.
fn at(addr: SocketAddr) -> Server {
    Server {
        addr,
        secret: b"k".to_vec(),
    }
}

fn fast() -> Timing {
    Timing {
        retry_after: Duration::from_millis(50),
        tries: 2,
        hold_down: Duration::from_secs(30),
    }
}

fn wait(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..400 {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    done()
}

#[test]
fn requests_are_acknowledged_by_a_server_that_answers() {
    let (addr, seen) = server(Some(b"k"));
    let s = start(vec![at(addr)], "gate64".into(), fast()).unwrap();
    for n in 0..100 {
        s.send(request(n));
    }
    let stats = s.stats();
    assert!(s.flush(Duration::from_secs(10)), "every request answered");
    assert_eq!(stats.pending(), 0);
    assert!(wait(|| stats.acked() == 100), "acked {}", stats.acked());
    assert_eq!((stats.timeout(), stats.queue_full()), (0, 0));
    let ids: std::collections::HashSet<String> = seen.try_iter().collect();
    assert_eq!(ids.len(), 100);
}

#[test]
fn a_silent_server_fails_over_to_the_next() {
    let (silent, tried) = server(None);
    let (answering, seen) = server(Some(b"k"));
    let s = start(vec![at(silent), at(answering)], "gate64".into(), fast()).unwrap();
    for n in 0..5 {
        s.send(request(n));
    }
    let stats = s.stats();
    assert!(wait(|| stats.acked() == 5), "acked {}", stats.acked());
    assert!(stats.failovers() >= 1 && stats.retransmits() >= 1);
    assert!(
        tried.try_iter().count() >= 2,
        "the first server was tried, twice"
    );
    assert_eq!(seen.try_iter().count(), 5);
    // Held down: the next request goes straight to the second server.
    s.send(request(9));
    assert!(wait(|| stats.acked() == 6));
    assert_eq!(tried.try_iter().count(), 0);
}

#[test]
fn answers_under_another_secret_are_not_acknowledgements() {
    let (addr, _seen) = server(Some(b"wrong"));
    let s = start(vec![at(addr)], "gate64".into(), fast()).unwrap();
    s.send(request(1));
    let stats = s.stats();
    assert!(wait(|| stats.timeout() == 1), "timeout {}", stats.timeout());
    assert_eq!(stats.acked(), 0);
}

#[test]
fn a_server_that_is_not_there_costs_a_count_not_a_hang() {
    // A bound and closed port: ICMP port unreachable, or silence.
    let addr = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let s = start(vec![at(addr)], "gate64".into(), fast()).unwrap();
    for n in 0..3 {
        s.send(request(n));
    }
    let stats = s.stats();
    assert!(wait(|| stats.timeout() == 3), "timeout {}", stats.timeout());
}
