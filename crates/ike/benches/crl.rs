//! What revocation costs an IKE set-up: the responder's share of IKE_SA_INIT and IKE_AUTH
//! (key exchange, chain and AUTH verification, our AUTH, the child SA) for a client whose CA
//! has no CRL configured, and for one whose CA's CRL lists 100,000 other serial numbers (a
//! large enterprise CA after years of lost laptops). The CRL's own signature, whose check
//! hashes the whole list, is checked once per issuer key, with the first chain that needs it
//! (before the measurement here); after that revocation is a lookup in webpki's ordered map of
//! the entries, O(log n). Only the responder's calls are timed (the initiator's work runs
//! between them, outside the measurement); each set-up is a fresh client of one identity, whose
//! new IKE SA replaces the previous one.
//!
//! `cargo bench -p gate64-ike --bench crl`: the two medians side by side give the ratio.

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

mod common;

use common::{Ca, ca, leaf};
use criterion::{Criterion, criterion_group, criterion_main};
use gate64_ike::auth::{Credentials, Crl, Crls, TrustAnchors};
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::initiator::{Initiator, InitiatorConfig, InitiatorEvent};
use gate64_ike::keys::Group;
use gate64_ike::message::TrafficSelector;
use gate64_ike::responder::{Responder, ResponderConfig};
use rcgen::{CertificateRevocationListParams, KeyIdMethod, RevokedCertParams, SerialNumber};

/// Entries of the large CRL.
const REVOKED: u64 = 100_000;

/// `ca`'s CRL listing serial numbers 1..=`REVOKED` (the client's is above them).
fn large_crl(ca: &Ca) -> Crls {
    let params = CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2026, 1, 1),
        next_update: rcgen::date_time_ymd(2099, 1, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: (1..=REVOKED)
            .map(|s| RevokedCertParams {
                serial_number: SerialNumber::from(s),
                revocation_time: rcgen::date_time_ymd(2026, 6, 1),
                reason_code: None,
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: KeyIdMethod::Sha256,
    };
    let der = params.signed_by(&ca.issuer).unwrap().der().to_vec();
    Crls::new(Crl::parse(&der).unwrap(), false)
}

struct Lab {
    clients: Ca,
    servers: Ca,
    client: (String, String),
    server: SocketAddr,
}

impl Lab {
    fn responder(&self, crls: Option<Crls>) -> Responder {
        let (chain, key) = leaf(&self.servers, "gate64.lab", Some(2));
        let credentials = Credentials::from_pem(chain.as_bytes(), key.as_bytes()).unwrap();
        let mut anchors = TrustAnchors::from_pem(self.clients.pem.as_bytes()).unwrap();
        if let Some(crls) = crls {
            anchors = anchors.with_crls(crls);
        }
        let config = ResponderConfig::new(
            credentials,
            anchors,
            "fd00:c1::/112".parse().unwrap(),
            vec!["fd00:c0::53/128".parse().unwrap()],
            vec!["fd00:c0::/64".parse().unwrap()],
        );
        Responder::new(config, Instant::now(), SystemTime::now()).unwrap()
    }

    fn initiator(&self, now: Instant) -> Initiator {
        let (chain, key) = &self.client;
        let config = InitiatorConfig {
            credentials: Credentials::from_pem(chain.as_bytes(), key.as_bytes()).unwrap(),
            anchors: TrustAnchors::from_pem(self.servers.pem.as_bytes()).unwrap(),
            group: Group::Ecp256,
            request_address: true,
            tsi: vec![TrafficSelector::range(
                IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                IpAddr::V6(Ipv6Addr::from(u128::MAX)),
            )],
            tsr: vec![TrafficSelector::range(
                "fd00:c0::".parse().unwrap(),
                "fd00:c0::ffff:ffff:ffff:ffff".parse().unwrap(),
            )],
            tunnel: TunnelKind::Intranet,
            retransmit_after: Duration::from_secs(2),
            max_retransmits: 3,
            integrity_only: false,
        };
        let local = SocketAddr::new(IpAddr::V6("2001:db8:1::7".parse().unwrap()), 500);
        Initiator::new(config, now, SystemTime::now(), local, self.server).unwrap()
    }
}

/// One IKE set-up of a fresh client against `r`; returns the time spent in the responder.
fn set_up(lab: &Lab, r: &mut Responder) -> Duration {
    let now = Instant::now();
    let mut i = lab.initiator(now);
    i.start(now);
    let mut in_responder = Duration::ZERO;
    loop {
        let mut moved = false;
        while let Some((local, remote, bytes)) = i.poll_transmit() {
            let t = Instant::now();
            r.handle(now, remote, local, black_box(&bytes));
            in_responder += t.elapsed();
            moved = true;
        }
        while let Some(t) = r.poll_transmit() {
            i.handle(now, &t.bytes);
            moved = true;
        }
        while r.poll_event().is_some() {}
        if !moved {
            break;
        }
    }
    assert!(matches!(
        i.poll_event(),
        Some(InitiatorEvent::Established { .. })
    ));
    in_responder
}

fn bench(c: &mut Criterion) {
    let clients = ca("gate64 clients CA");
    let lab = Lab {
        client: leaf(&clients, "client1.gate64.lab", Some(REVOKED + 1)),
        servers: ca("gate64 servers CA"),
        clients,
        server: "[2001:db8:ffff::1]:500".parse().unwrap(),
    };
    let crls = large_crl(&lab.clients);
    let mut g = c.benchmark_group("ike_setup_responder");
    g.sample_size(30);
    for (name, crls) in [("no_crl", None), ("crl_100000_entries", Some(crls))] {
        let mut r = lab.responder(crls);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| set_up(&lab, &mut r)).sum())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
