use super::*;
use gate64_accounting::dae::Client;
use std::sync::Mutex;

const SECRET: &[u8] = b"s3cret";

fn request(code: u8, id: u8, attrs: &[(u8, &[u8])], secret: &[u8]) -> Vec<u8> {
    let mut out = vec![code, id, 0, 0];
    out.extend_from_slice(&[0; 16]);
    for (t, v) in attrs {
        out.push(*t);
        out.push(v.len() as u8 + 2);
        out.extend_from_slice(v);
    }
    let len = out.len() as u16;
    out[2..4].copy_from_slice(&len.to_be_bytes());
    let mut md5 = <md5::Md5 as md5::Digest>::new();
    md5::Digest::update(&mut md5, &out);
    md5::Digest::update(&mut md5, secret);
    let a: [u8; 16] = md5::Digest::finalize(md5).into();
    out[4..20].copy_from_slice(&a);
    out
}

fn listener(client: &str, prefix_len: u8, seen: Arc<Mutex<Vec<Request>>>) -> DaeListener {
    let core = Dae::new(
        vec![Client {
            address: client.parse().unwrap(),
            prefix_len,
            secret: SECRET.to_vec(),
        }],
        300,
    );
    let handler: Handler = Box::new(move |req, _| {
        seen.lock().unwrap().push(req.clone());
        match req.criteria.user_name.as_deref() {
            Some("known") => None,
            _ => Some(ErrorCause::SessionContextNotFound),
        }
    });
    start("127.0.0.1:0".parse().unwrap(), core, handler).unwrap()
}

fn ask(to: SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    s.send_to(bytes, to).unwrap();
    let mut buf = [0u8; 4096];
    s.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
}

#[test]
fn answers_verified_requests_and_counts_the_rest() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let l = listener("127.0.0.0", 8, Arc::clone(&seen));
    let to = l.local_addr();
    let known = request(40, 1, &[(1, b"known")], SECRET);
    let answer = ask(to, &known).expect("an answer");
    assert_eq!((answer[0], answer[1]), (dae::code::DISCONNECT_ACK, 1));
    let unknown = request(40, 2, &[(1, b"nobody")], SECRET);
    let answer = ask(to, &unknown).expect("an answer");
    assert_eq!(answer[0], dae::code::DISCONNECT_NAK);
    assert_eq!(&answer[20..], &[101, 6, 0, 0, 0x01, 0xf7]);
    // Unanswered: a replay, another secret, an unsupported attribute (answered, NAK 401,
    // without reaching the handler).
    assert_eq!(ask(to, &known), None);
    assert_eq!(ask(to, &request(40, 3, &[(1, b"known")], b"wrong")), None);
    let filter = request(
        43,
        4,
        &[(1, b"known"), (26, &[0, 0, 0, 9, 1, 3, 0])],
        SECRET,
    );
    let answer = ask(to, &filter).expect("an answer");
    assert_eq!(answer[0], dae::code::COA_NAK);
    assert_eq!(&answer[24..26], &401u16.to_be_bytes());
    assert_eq!(seen.lock().unwrap().len(), 2);
    let stats = l.stats();
    assert_eq!(stats.get("disconnect", "ack"), 1);
    assert_eq!(stats.get("disconnect", "nak_session_not_found"), 1);
    assert_eq!(stats.get("disconnect", "replay"), 1);
    assert_eq!(stats.get("disconnect", "bad_authenticator"), 1);
    assert_eq!(stats.get("coa", "nak_unsupported_attribute"), 1);
}

#[test]
fn an_unlisted_source_gets_no_answer() {
    let l = listener("10.0.0.0", 8, Arc::new(Mutex::new(Vec::new())));
    let known = request(40, 1, &[(1, b"known")], SECRET);
    assert_eq!(ask(l.local_addr(), &known), None);
    assert_eq!(ask(l.local_addr(), &[0xff; 3]), None);
    let stats = l.stats();
    assert_eq!(stats.get("disconnect", "unknown_client"), 1);
    assert_eq!(stats.get("other", "unknown_client"), 1);
}
