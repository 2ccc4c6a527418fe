//! Heap held by the responder per client (the aim: ≤ 16 KB of RSS per client with both
//! tunnels, transport included), counted by glibc's allocator statistics: `CLIENTS` clients,
//! each with its infrastructure and intranet IKE SA (one child SA each), negotiated by
//! gate64's own initiator on a fake clock; the initiators and the events are dropped before
//! the count, so only what the responder keeps is measured.
//!
//! Its own test binary: the allocator's count is process-wide.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use gate64_ike::auth::{Credentials, TrustAnchors};
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::initiator::{Initiator, InitiatorConfig};
use gate64_ike::keys::Group;
use gate64_ike::message::TrafficSelector;
use gate64_ike::responder::{Responder, ResponderConfig};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Bytes in use in malloc's chunks (glibc's count, chunk headers included): Rust's heap and
/// aws-lc's, whose key schedules are allocated in C.
fn live() -> isize {
    // Large blocks (big tables) are mapped apart from the arenas, and counted too.
    gate64_sys::resource::heap_in_use() as isize
}

const SERVER: &str = "[2001:db8:ffff::1]:500";
const CLIENTS: usize = 200;
/// The responder's share of the 16 KB per client once its IKE SAs were checked live:
/// both IKE SAs with their child SAs' bookkeeping (the ESP SAs themselves live in
/// gate64-esp's SA database). 4.2 KB with what identifies the client beyond doubt (issuer
/// and subject key; the names, subjectAltNames included, shared by its two IKE SAs; the
/// certificate's issuer, shared by every client of a CA, and notAfter; the authentication
/// time for reauthentication); 4.0 KB without them, 7.1 KB before this bound was set.
/// 4.5 KB (4,623 bytes measured) with the per-IKE-SA room for an inner IPv4 address, a
/// RADIUS session end, and the boxes an EAP exchange and a RADIUS authorization fill
/// (empty for these certificate clients): the bound leaves about 100 bytes above that.
const MAX_HEAP_PER_CLIENT: isize = 4736;

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).expect("self-signed");
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(issuer: &Issuer<'static, KeyPair>, name: &str) -> Credentials {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = vec![SanType::DnsName(name.try_into().expect("dns name"))];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // Both purposes: the same helper makes clients' and servers' certificates.
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ClientAuth,
        ExtendedKeyUsagePurpose::ServerAuth,
    ];
    let cert = params.signed_by(&key, issuer).expect("signed");
    Credentials::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
        .expect("credentials")
}

fn initiator(
    credentials: Credentials,
    servers_ca: &str,
    tunnel: TunnelKind,
    tsr: &str,
    local: SocketAddr,
    now: Instant,
) -> Initiator {
    let net: ipnet::IpNet = tsr.parse().expect("tsr");
    let config = InitiatorConfig {
        credentials,
        anchors: TrustAnchors::from_pem(servers_ca.as_bytes()).expect("servers CA"),
        group: Group::Ecp256,
        request_address: true,
        tsi: vec![TrafficSelector::range(
            "::".parse().expect("any"),
            IpAddr::V6(Ipv6Addr::from(u128::MAX)),
        )],
        tsr: vec![TrafficSelector::range(net.network(), net.broadcast())],
        tunnel,
        retransmit_after: Duration::from_secs(2),
        max_retransmits: 3,
        integrity_only: false,
    };
    let server = SERVER.parse().expect("server");
    Initiator::new(config, now, SystemTime::now(), local, server).expect("initiator")
}

/// Negotiates `i`'s IKE SA; returns the heap the responder kept from it: what its `handle`
/// calls allocated, less what the transmits and events it handed out gave back when dropped.
fn run(r: &mut Responder, i: &mut Initiator, now: Instant) -> isize {
    let mut kept = 0;
    i.start(now);
    loop {
        let mut moved = false;
        while let Some((local, remote, bytes)) = i.poll_transmit() {
            let before = live();
            r.handle(now, remote, local, &bytes);
            kept += live() - before;
            moved = true;
        }
        while let Some(t) = r.poll_transmit() {
            i.handle(now, &t.bytes);
            let before = live();
            drop(t);
            kept += live() - before;
            moved = true;
        }
        if !moved {
            break;
        }
    }
    assert!(i.is_established(), "the IKE SA came up");
    while let Some(event) = r.poll_event() {
        let before = live();
        drop(event);
        kept += live() - before;
    }
    kept
}

/// glibc keeps freed chunks in per-thread caches that its statistics count as in use; the
/// measurement runs in a child process of this test binary with those caches off.
const TUNABLES: &str = "glibc.malloc.tcache_count=0";

#[test]
fn responder_heap_per_client_with_both_tunnels() {
    if std::env::var("GLIBC_TUNABLES").as_deref() != Ok(TUNABLES) {
        let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "responder_heap_per_client_with_both_tunnels",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("GLIBC_TUNABLES", TUNABLES)
            .status()
            .expect("the measuring child runs");
        assert!(status.success(), "the measuring child failed: {status}");
        return;
    }
    let (clients_pem, clients_ca) = ca("gate64 clients CA");
    let (servers_pem, servers_ca) = ca("gate64 servers CA");
    let now = Instant::now();
    let config = ResponderConfig::new(
        leaf(&servers_ca, "gate64.lab"),
        // Without the cache of verified chains: a fixed cost, at most 4,096 chains however
        // many clients, which a few hundred clients would otherwise charge to each of them.
        TrustAnchors::from_pem(clients_pem.as_bytes())
            .expect("clients CA")
            .with_cache_capacity(0),
        "fd00:c1::/64".parse().expect("pool"),
        vec!["fd00:c0::53/128".parse().expect("prefix")],
        vec!["fd00:c0::/64".parse().expect("prefix")],
    );
    let mut r = Responder::new(config, now, SystemTime::now()).expect("responder");
    let credentials: Vec<(Credentials, Credentials)> = (0..CLIENTS)
        .map(|n| {
            let name = format!("client{n}.gate64.lab");
            (leaf(&clients_ca, &name), leaf(&clients_ca, &name))
        })
        .collect();
    // One client first, so one-time allocations (tables' first buckets, caches) are not
    // charged to the measured ones.
    let mut credentials = credentials.into_iter();
    let mut initiators = HashMap::new();
    let mut client = |r: &mut Responder, n: usize, (infra, intra): (Credentials, Credentials)| {
        let mut kept = 0;
        let address = format!("2001:0:c000:201::{:x}", n + 1);
        let tunnels = [
            (infra, TunnelKind::Infrastructure, "fd00:c0::53/128"),
            (intra, TunnelKind::Intranet, "fd00:c0::/64"),
        ];
        for (port, (creds, tunnel, tsr)) in tunnels.into_iter().enumerate() {
            let local = SocketAddr::new(address.parse().expect("address"), 500 + port as u16);
            let mut i = initiator(creds, &servers_pem, tunnel, tsr, local, now);
            kept += run(r, &mut i, now);
            initiators.insert(local, i);
        }
        kept
    };
    client(&mut r, 0, credentials.next().expect("one client"));
    let up: isize = credentials
        .enumerate()
        .map(|(n, creds)| client(&mut r, n + 1, creds))
        .sum();
    let measured = CLIENTS as isize - 1;
    println!(
        "responder heap per client (2 IKE SAs + 2 child SAs): {} bytes ({measured} clients)",
        up / measured
    );
    // Every IKE SA then gets its first liveness check (RFC 7296 §2.4), which the initiators
    // answer. The responder starts a capped number of checks per 100 ms slice and puts the
    // rest off, so time moves on slice by slice until every check has gone and been answered.
    let first_check = now + Duration::from_secs(31);
    let mut later = first_check;
    let mut checked = 0;
    while later < first_check + Duration::from_secs(10) {
        let before = live();
        r.handle_timeout(later);
        checked += live() - before;
        loop {
            let mut moved = false;
            while let Some(t) = r.poll_transmit() {
                if let Some(i) = initiators.get_mut(&t.remote) {
                    i.handle(later, &t.bytes);
                }
                let before = live();
                drop(t);
                checked += live() - before;
                moved = true;
            }
            for i in initiators.values_mut() {
                while let Some((local, remote, bytes)) = i.poll_transmit() {
                    let before = live();
                    r.handle(later, remote, local, &bytes);
                    checked += live() - before;
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        later += Duration::from_millis(100);
    }
    while let Some(event) = r.poll_event() {
        let before = live();
        drop(event);
        checked += live() - before;
    }
    let held = (up + checked) / measured;
    println!("... after the first liveness check: {held} bytes");
    assert_eq!(
        r.ike_sas(later).len(),
        2 * CLIENTS,
        "every IKE SA is still up"
    );
    assert!(
        held <= MAX_HEAP_PER_CLIENT,
        "{held} bytes per client, more than {MAX_HEAP_PER_CLIENT}"
    );
}
