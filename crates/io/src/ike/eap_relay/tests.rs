use super::*;
use gate64_accounting::radius::access::{encrypt_mppe_key, hmac_md5};
use md5::{Digest, Md5};

const SECRET: &[u8] = b"relay-test-secret";

/// An Access-Accept to `request` (its identifier and authenticator), with MS-MPPE-Recv-Key
/// 0x11 × 16 and MS-MPPE-Send-Key 0x22 × 16, Filter-Id `contractors` and Class `grp-a`,
/// signed as a server holding `SECRET` signs it.
fn accept(request: &[u8]) -> Vec<u8> {
    let mut ra = [0u8; 16];
    ra.copy_from_slice(&request[4..20]);
    let mut attrs = vec![79, 6, 3, 1, 0, 4];
    attrs.extend([11, 13]);
    attrs.extend(b"contractors");
    attrs.extend([25, 7]);
    attrs.extend(b"grp-a");
    for (kind, byte, salt) in [(17u8, 0x11u8, [0x80, 1]), (16, 0x22, [0x80, 2])] {
        let value = encrypt_mppe_key(&[byte; 16], salt, SECRET, &ra);
        let mut vsa = 311u32.to_be_bytes().to_vec();
        vsa.extend([kind, value.len() as u8 + 2]);
        vsa.extend(value);
        attrs.extend([26, vsa.len() as u8 + 2]);
        attrs.extend(vsa);
    }
    let at = attrs.len();
    attrs.extend([80, 18]);
    attrs.extend([0; 16]);
    let mut pkt = vec![2, request[1]];
    pkt.extend(((20 + attrs.len()) as u16).to_be_bytes());
    pkt.extend(ra);
    pkt.extend(attrs);
    let mac = hmac_md5(SECRET, &[&pkt]);
    pkt[20 + at + 2..20 + at + 18].copy_from_slice(&mac);
    let mut md5 = Md5::new();
    md5.update(&pkt[..4]);
    md5.update(ra);
    md5.update(&pkt[20..]);
    md5.update(SECRET);
    let auth: [u8; 16] = md5.finalize().into();
    pkt[4..20].copy_from_slice(&auth);
    pkt
}

/// A silent first server costs its retries, then the second answers; the silent one is held
/// down for the next exchange.
#[tokio::test]
async fn a_silent_server_fails_over_to_the_next() {
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let live = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let servers = vec![
        Server {
            addr: silent.local_addr().unwrap(),
            secret: SECRET.to_vec(),
        },
        Server {
            addr: live.local_addr().unwrap(),
            secret: SECRET.to_vec(),
        },
    ];
    let shared = Shared {
        down: Mutex::new(vec![None; 2]),
        servers,
        nas_identifier: "gate64-test".into(),
        timing: Timing {
            retry_after: Duration::from_millis(100),
            tries: 2,
            hold_down: Duration::from_secs(30),
        },
    };
    let server = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        let (n, from) = live.recv_from(&mut buf).await.unwrap();
        let request = buf[..n].to_vec();
        live.send_to(&accept(&request), from).await.unwrap();
        request
    });
    let query = Query {
        peer: "[2001:db8::7]:4500".parse().unwrap(),
        user: "alice",
        eap: Some((&[2, 1, 0, 10, 1, b'a', b'l', b'i', b'c', b'e'], None)),
        deadline: Instant::now() + Duration::from_secs(10),
    };
    let outcome = relay(&shared, &query).await.map(outcome);
    let mut msk = vec![0x11; 16];
    msk.extend([0x22; 16]);
    assert_eq!(
        outcome,
        Some(EapOutcome::Accept {
            eap_message: vec![3, 1, 0, 4],
            msk,
            authorization: Authorization {
                filter_id: Some("contractors".into()),
                class: vec![b"grp-a".to_vec()],
                ..Authorization::default()
            },
        })
    );
    // The silent server got both tries.
    let mut buf = [0u8; 4096];
    for _ in 0..2 {
        let got = tokio::time::timeout(Duration::from_millis(50), silent.recv(&mut buf)).await;
        assert!(got.is_ok(), "the silent server got each try");
    }
    let request = server.await.unwrap();
    assert_eq!(request[0], 1, "an Access-Request");
    let text = String::from_utf8_lossy(&request);
    assert!(text.contains("alice") && text.contains("2001:db8::7") && text.contains("gate64-test"));
    // Held down: the next exchange asks the live server first.
    assert_eq!(order(&shared), [1, 0]);
}

/// An authorization asks with User-Name, Service-Type Authorize-Only and no EAP-Message or
/// password; the server's Accept comes back with its authorization.
#[tokio::test]
async fn an_authorization_asks_without_a_password() {
    let live = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let shared = Shared {
        down: Mutex::new(vec![None]),
        servers: vec![Server {
            addr: live.local_addr().unwrap(),
            secret: SECRET.to_vec(),
        }],
        nas_identifier: "gate64-test".into(),
        timing: Timing {
            retry_after: Duration::from_millis(500),
            tries: 2,
            hold_down: Duration::from_secs(30),
        },
    };
    let server = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        let (n, from) = live.recv_from(&mut buf).await.unwrap();
        let request = buf[..n].to_vec();
        live.send_to(&accept(&request), from).await.unwrap();
        request
    });
    let query = Query {
        peer: "192.0.2.7:4500".parse().unwrap(),
        user: "CN=carol.gate64.lab",
        eap: None,
        deadline: Instant::now() + Duration::from_secs(10),
    };
    let reply = relay(&shared, &query).await;
    assert!(
        matches!(&reply, Some(AccessReply::Accept { authorization, .. })
            if authorization.filter_id.as_deref() == Some("contractors")),
        "{:?}",
        reply.is_some()
    );
    let request = server.await.unwrap();
    assert_eq!(request[0], 1, "an Access-Request");
    // Attributes: User-Name (1), Service-Type (6) = 17; no User-Password (2), EAP-Message (79).
    let mut at = 20;
    let mut kinds = Vec::new();
    while at + 2 <= request.len() {
        let (kind, len) = (request[at], usize::from(request[at + 1]));
        if kind == 6 {
            assert_eq!(&request[at + 2..at + len], &17u32.to_be_bytes());
        }
        if kind == 1 {
            assert_eq!(&request[at + 2..at + len], b"CN=carol.gate64.lab");
        }
        kinds.push(kind);
        at += len.max(2);
    }
    assert!(
        kinds.contains(&1) && kinds.contains(&6) && kinds.contains(&80),
        "{kinds:?}"
    );
    assert!(!kinds.contains(&2) && !kinds.contains(&79), "{kinds:?}");
}
