//! The responder answering IKE_SA_INIT while IKE_AUTH verifications are out as jobs
//! (`offload_auth`, as `gate64 serve` runs it): the cost of one IKE_SA_INIT (parse, proposal
//! choice, ECP-256 key exchange, key schedule, response) with no job out and with 32 jobs
//! handed out and not yet answered (what 2 auth threads hold when their queues are full);
//! and, with no job out, the same under macOS's set (AES-CBC-256, HMAC-SHA2-256, MODP-2048:
//! two 2048-bit modular exponentiations with 512-bit exponents instead of two ECP-256
//! multiplications).
//! With `offload_init` (the key exchange as a job, as `gate64 serve` runs it), the IKE
//! task's share of one IKE_SA_INIT, ECP-256 and MODP-2048: the request handled up to its
//! queued job, and the verdict turned into the response and the half-open IKE SA; the job
//! itself runs between the two, outside the timing (on a worker thread in the daemon).
//! Each request comes from a fresh initiator (made outside the timing) in its own /64, so no
//! per-source cap or cookie engages.

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

mod common;

use common::{Ca, ca, leaf};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use gate64_ike::auth::{Credentials, TrustAnchors};
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::initiator::{Initiator, InitiatorConfig};
use gate64_ike::keys::{Encr, Group, Integ, Prf, Suite};
use gate64_ike::message::TrafficSelector;
use gate64_ike::responder::{AuthJob, Responder, ResponderConfig};

/// gate64's own set: AES-GCM-16-256, PRF-HMAC-SHA2-256, ECP-256.
const ECP256: (Suite, Group) = (Suite::GCM256_SHA256, Group::Ecp256);
/// macOS's set: AES-CBC-256, HMAC-SHA2-256-128, PRF-HMAC-SHA2-256, MODP-2048.
const MODP2048: (Suite, Group) = (
    Suite {
        encr: Encr::AesCbc256,
        integ: Some(Integ::HmacSha256_128),
        prf: Prf::HmacSha256,
    },
    Group::Modp2048,
);

/// Auth jobs out in the loaded case: 2 threads x 16 in flight each.
const JOBS_OUT: usize = 32;

struct Lab {
    clients: Ca,
    servers: Ca,
    client_leaf: (String, String),
    server: SocketAddr,
}

impl Lab {
    fn responder(&self, now: Instant, offload_init: bool) -> Responder {
        let (chain, key) = leaf(&self.servers, "gate64.lab", None);
        let credentials = Credentials::from_pem(chain.as_bytes(), key.as_bytes()).unwrap();
        let anchors = TrustAnchors::from_pem(self.clients.pem.as_bytes()).unwrap();
        let mut config = ResponderConfig::new(
            credentials,
            anchors,
            "fd00:c1::/112".parse().unwrap(),
            vec!["fd00:c0::53/128".parse().unwrap()],
            vec!["fd00:c0::/64".parse().unwrap()],
        );
        config.offload_auth = true;
        config.offload_init = offload_init;
        // The timed requests pile up as half-open SAs (the clock does not move): no cookies,
        // no memory cap within a bench run, and no per-source or per-host cap: each initiator
        // has a /64 of its own, but all of them share one /48, which the host cap counts as
        // one site. The caps' counting still runs.
        config.half_open_cookie_threshold = usize::MAX;
        config.max_half_open_bytes = usize::MAX;
        config.max_half_open_per_source = usize::MAX;
        config.max_ike_sas = usize::MAX;
        Responder::new(config, now, SystemTime::now()).unwrap()
    }

    /// An intranet-tunnel initiator from `[2001:db8:<n>::7]:500`, one /64 per `n`.
    fn initiator(&self, now: Instant, n: u64, (suite, group): (Suite, Group)) -> Initiator {
        let (chain, key) = &self.client_leaf;
        let credentials = Credentials::from_pem(chain.as_bytes(), key.as_bytes()).unwrap();
        let anchors = TrustAnchors::from_pem(self.servers.pem.as_bytes()).unwrap();
        let config = InitiatorConfig {
            credentials,
            anchors,
            group,
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
        let net = (0x2001_0db8u128 << 96) | (u128::from(n) << 64) | 7;
        let local = SocketAddr::new(IpAddr::V6(Ipv6Addr::from(net)), 500);
        let mut i = Initiator::new(config, now, SystemTime::now(), local, self.server).unwrap();
        i.set_ike_suite(suite);
        i
    }

    /// The IKE_SA_INIT request of a fresh initiator: (its source, the responder, bytes).
    fn sa_init(
        &self,
        now: Instant,
        n: u64,
        set: (Suite, Group),
    ) -> (SocketAddr, SocketAddr, Vec<u8>) {
        let mut i = self.initiator(now, n, set);
        i.start(now);
        i.poll_transmit().unwrap()
    }
}

/// Runs `JOBS_OUT` clients up to their IKE_AUTH and keeps the jobs the responder hands out.
fn jobs_out(lab: &Lab, r: &mut Responder, now: Instant) -> Vec<AuthJob> {
    let mut jobs = Vec::new();
    for n in 0..JOBS_OUT as u64 {
        let mut i = lab.initiator(now, 1_000_000 + n, ECP256);
        i.start(now);
        let (local, remote, init) = i.poll_transmit().unwrap();
        r.handle(now, remote, local, &init);
        i.handle(now, &r.poll_transmit().unwrap().bytes);
        let (local, remote, auth) = i.poll_transmit().unwrap();
        r.handle(now, remote, local, &auth);
        jobs.push(r.poll_auth_job().unwrap());
    }
    assert!(
        r.poll_transmit().is_none(),
        "no IKE_AUTH answered before its verdict"
    );
    jobs
}

fn bench(c: &mut Criterion) {
    let clients = ca("gate64 clients CA");
    let lab = Lab {
        client_leaf: leaf(&clients, "client1.gate64.lab", None),
        clients,
        servers: ca("gate64 servers CA"),
        server: "[2001:db8:100::1]:500".parse().unwrap(),
    };
    let now = Instant::now();
    let mut g = c.benchmark_group("ike_sa_init");
    for (name, out, set) in [
        ("no_auth_jobs_out", false, ECP256),
        ("32_auth_jobs_out", true, ECP256),
        ("modp2048_aes256_sha256", false, MODP2048),
    ] {
        let mut r = lab.responder(now, false);
        let jobs = if out {
            jobs_out(&lab, &mut r, now)
        } else {
            Vec::new()
        };
        let mut n = 0u64;
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    n += 1;
                    lab.sa_init(now, n, set)
                },
                |(local, remote, bytes)| {
                    r.handle(now, remote, local, &bytes);
                    black_box(r.poll_transmit().unwrap())
                },
                BatchSize::SmallInput,
            )
        });
        // The jobs were out for the whole measurement; each still verifies.
        for job in jobs {
            r.handle_auth_verdict(now, job.run());
            assert!(
                r.poll_transmit().is_some(),
                "IKE_AUTH answered on its verdict"
            );
        }
    }
    for (name, set) in [
        ("task_share_offloaded_ecp256", ECP256),
        ("task_share_offloaded_modp2048", MODP2048),
    ] {
        let mut r = lab.responder(now, true);
        let mut n = 0u64;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    let (local, remote, bytes) = lab.sa_init(now, n, set);
                    let t = Instant::now();
                    r.handle(now, remote, local, &bytes);
                    let job = r.poll_init_job().unwrap();
                    spent += t.elapsed();
                    let verdict = job.run();
                    let t = Instant::now();
                    r.handle_init_verdict(now, verdict);
                    black_box(r.poll_transmit().unwrap());
                    spent += t.elapsed();
                }
                spent
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
