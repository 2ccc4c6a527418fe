//! The IKEv2 responder's `handle` and `handle_timeout`: a program of datagrams (2-byte length,
//! 1 flag byte: bit 0 = NAT-T port, bit 1 = another source address, bit 2 = advance the clock
//! past the half-open timeout first) from one or two clients. Whatever the responder sends
//! must parse as an IKE response, and the half-open count must match its SA table.
#![no_main]

use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use gate64_ike::auth::{Credentials, TrustAnchors};
use gate64_ike::message::Message;
use gate64_ike::responder::{Responder, ResponderConfig};
use libfuzzer_sys::fuzz_target;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

fn responder() -> Responder {
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "fuzz CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_pem = ca.self_signed(&ca_key).expect("CA").pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("key");
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name
        .push(DnType::CommonName, "gate64.fuzz");
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // Both purposes: the same helper makes clients' and servers' certificates.
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ClientAuth,
        ExtendedKeyUsagePurpose::ServerAuth,
    ];
    let cert = leaf.signed_by(&key, &issuer).expect("leaf");
    let credentials = Credentials::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
        .expect("credentials");
    let anchors = TrustAnchors::from_pem(ca_pem.as_bytes()).expect("anchors");
    let mut config = ResponderConfig::new(
        credentials,
        anchors,
        "fd00:c1::100/120".parse().expect("pool"),
        vec!["fd00:c0::53/128".parse().expect("prefix")],
        vec!["fd00:c0::/64".parse().expect("prefix")],
    );
    config.half_open_cookie_threshold = 4;
    config.max_half_open_per_source = 3;
    Responder::new(config, Instant::now(), SystemTime::now()).expect("responder")
}

static STATE: OnceLock<Mutex<(Responder, Instant)>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let state = STATE.get_or_init(|| Mutex::new((responder(), Instant::now())));
    let Ok(mut guard) = state.lock() else { return };
    let (r, now) = &mut *guard;
    let server_500: SocketAddr = "[2001:db8:ffff::1]:500".parse().expect("addr");
    let server_4500: SocketAddr = "[2001:db8:ffff::1]:4500".parse().expect("addr");
    let clients: [SocketAddr; 2] = [
        "[2001:db8::7]:500".parse().expect("addr"),
        "[2001:db8::8]:4500".parse().expect("addr"),
    ];
    let mut rest = data;
    while rest.len() >= 3 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let flags = rest[2];
        rest = &rest[3..];
        let take = len.min(rest.len());
        let (datagram, tail) = rest.split_at(take);
        rest = tail;
        if flags & 4 != 0 {
            *now += Duration::from_secs(31);
            r.handle_timeout(*now);
        }
        let local = if flags & 1 != 0 {
            server_4500
        } else {
            server_500
        };
        let remote = clients[usize::from(flags >> 1 & 1)];
        r.handle(*now, local, remote, datagram);
        while let Some(t) = r.poll_transmit() {
            if let Ok(m) = Message::parse(&t.bytes) {
                assert!(m.header.is_response(), "the responder only responds");
            } else {
                panic!("the responder sent bytes that do not parse");
            }
        }
        while r.poll_event().is_some() {}
        let half_open = r.ike_sas(*now).iter().filter(|s| !s.established).count();
        assert_eq!(
            half_open,
            r.half_open(),
            "half-open count matches the SA table"
        );
    }
});
