//! The IKE_AUTH certificate flood (`ike-auth-flood` and the `ike_auth_flood` acceptance test):
//! one thread completes IKE_SA_INIT with a responder (its own key exchange, so its IKE_AUTH
//! decrypts there) and sends IKE_AUTH carrying its leaf and dozens of self-issued certificates
//! all named like the leaf's issuer, one CERT payload each, again and again with a fresh IKE SA
//! each time. Without a bound on the certificates a peer may send, each such message makes a
//! path builder try candidate after candidate before anything is authenticated.
//!
//! The message is one large UDP datagram (gate64's initiator does not fragment, RFC 7383): the
//! kernel IP-fragments it on the way and reassembles it at the responder.
//!
//! Each round waits for the IKE_SA_INIT response and for the answer to IKE_AUTH (at most
//! [`FloodConfig::answer_timeout`] each), so that every IKE_AUTH reaches the responder's
//! verification alone and the counts below say what the responder answered.
//!
//! [`control`] is the same loop aimed at a port nobody serves: per round a fresh initiator and
//! its IKE_SA_INIT (the attacker's key exchange) and the IKE_AUTH datagram a flood recorded,
//! paced to the flood's rate, so that the machine bears the flood's cost without the responder.

use std::fmt;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use gate64_ike::auth::{Credentials, TrustAnchors};
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::initiator::{Initiator, InitiatorConfig};
use gate64_ike::keys::Group;
use gate64_ike::message::TrafficSelector;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The name of the attacker's CA, and of every self-issued certificate sent with the leaf.
pub const ISSUER_NAME: &str = "gate64 ike-auth-flood CA";
/// IKEv2 exchange types (RFC 7296 §3.1).
const IKE_SA_INIT: u8 = 34;
const IKE_AUTH: u8 = 35;
/// The response flag of the IKE header's flags octet.
const RESPONSE: u8 = 0x20;
/// The RFC 3948 non-ESP marker before IKE messages on port 4500.
const NON_ESP_MARKER: [u8; 4] = [0; 4];

/// The attacker's certificates: a leaf issued by a CA named [`ISSUER_NAME`], then `extra`
/// self-issued CA certificates with that same subject (and issuer), each under its own key;
/// PEM, leaf first, and the leaf's key. Also the CA's PEM, for an initiator's trust anchors
/// (never used: the exchange ends before the responder authenticates itself).
pub struct AttackChain {
    /// Leaf first, then the self-issued certificates.
    pub chain_pem: String,
    /// The leaf's private key (PKCS#8 PEM).
    pub key_pem: String,
    /// The issuing CA's certificate.
    pub ca_pem: String,
}

impl AttackChain {
    /// Generates the chain (ECDSA P-256 keys throughout).
    pub fn generate(extra: usize) -> Result<AttackChain> {
        let ca_params = || {
            let mut p = CertificateParams::default();
            p.distinguished_name.push(DnType::CommonName, ISSUER_NAME);
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            p
        };
        let ca_key = KeyPair::generate().context("CA key")?;
        let ca = ca_params().self_signed(&ca_key).context("CA certificate")?;
        let issuer = Issuer::new(ca_params(), ca_key);
        let leaf_key = KeyPair::generate().context("leaf key")?;
        let name = "attacker.ike-auth-flood.lab";
        let mut params = CertificateParams::new(vec![name.to_owned()]).context("SAN")?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let leaf = params.signed_by(&leaf_key, &issuer).context("leaf")?;
        let mut chain_pem = leaf.pem();
        for _ in 0..extra {
            let key = KeyPair::generate().context("self-issued key")?;
            chain_pem.push_str(&ca_params().self_signed(&key).context("self-issued")?.pem());
        }
        Ok(AttackChain {
            chain_pem,
            key_pem: leaf_key.serialize_pem(),
            ca_pem: ca.pem(),
        })
    }

    /// A fresh initiator configuration with these credentials (an intranet tunnel asking for
    /// everything: the responder never gets as far as the selectors).
    fn initiator_config(&self) -> Result<InitiatorConfig> {
        let all = TrafficSelector::range(
            std::net::Ipv6Addr::UNSPECIFIED.into(),
            std::net::Ipv6Addr::from(u128::MAX).into(),
        );
        Ok(InitiatorConfig {
            credentials: Credentials::from_pem(self.chain_pem.as_bytes(), self.key_pem.as_bytes())
                .context("attack credentials")?,
            anchors: TrustAnchors::from_pem(self.ca_pem.as_bytes()).context("anchors")?,
            group: Group::Ecp256,
            request_address: true,
            tsi: vec![all],
            tsr: vec![all],
            tunnel: TunnelKind::Intranet,
            retransmit_after: Duration::from_secs(60),
            max_retransmits: 0,
            integrity_only: false,
        })
    }
}

/// Where and how long to flood.
pub struct FloodConfig {
    /// Local address (port 0: an ephemeral one).
    pub bind: SocketAddr,
    /// The responder's IKE endpoint (or, for [`control`], a port nobody serves).
    pub server: SocketAddr,
    /// Stop after this long (or when the stop flag is set).
    pub duration: Duration,
    /// How long to wait for each answer before starting the next round.
    pub answer_timeout: Duration,
}

/// What a flood sent and what came back.
#[derive(Debug, Default, Clone)]
pub struct FloodReport {
    /// Rounds begun (each a fresh initiator and IKE SA).
    pub rounds: u64,
    /// IKE_SA_INIT requests sent (a cookie makes two in one round).
    pub inits_sent: u64,
    /// IKE_SA_INIT responses received.
    pub inits_answered: u64,
    /// IKE_AUTH requests sent.
    pub auths_sent: u64,
    /// Answers to them received (the responder's refusal).
    pub auths_answered: u64,
    /// Bytes of the last IKE_AUTH request (one UDP payload).
    pub auth_bytes: usize,
    /// Rounds that ended waiting for an answer.
    pub timeouts: u64,
    /// Seconds the flood ran.
    pub secs: f64,
    /// The last IKE_AUTH request sent (for [`control`]).
    pub last_auth: Vec<u8>,
}

impl FloodReport {
    /// IKE_AUTH requests sent per second.
    pub fn auth_rate(&self) -> f64 {
        self.auths_sent as f64 / self.secs.max(0.001)
    }
}

impl fmt::Display for FloodReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rounds={} inits_sent={} inits_answered={} auths_sent={} auths_answered={} \
             auth_bytes={} timeouts={} secs={:.1} auths_per_s={:.0}",
            self.rounds,
            self.inits_sent,
            self.inits_answered,
            self.auths_sent,
            self.auths_answered,
            self.auth_bytes,
            self.timeouts,
            self.secs,
            self.auth_rate()
        )
    }
}

/// The IKE header's exchange type and whether it is a response; `None` when too short.
fn kind(ike: &[u8]) -> Option<(u8, bool)> {
    Some((*ike.get(18)?, ike.get(19)? & RESPONSE != 0))
}

fn send(socket: &UdpSocket, to: SocketAddr, bytes: &[u8]) {
    // A full socket buffer or an ICMP error from an earlier datagram is the flood's concern,
    // not an error: the round times out and the next one begins.
    let _ = if to.port() == 4500 {
        socket.send_to(&[&NON_ESP_MARKER[..], bytes].concat(), to)
    } else {
        socket.send_to(bytes, to)
    };
}

/// Floods `cfg.server` from one socket until `cfg.duration` passed or `stop` is set.
pub fn flood(chain: &AttackChain, cfg: &FloodConfig, stop: &AtomicBool) -> Result<FloodReport> {
    let socket = UdpSocket::bind(cfg.bind).with_context(|| format!("bind {}", cfg.bind))?;
    socket.set_read_timeout(Some(Duration::from_millis(20)))?;
    let local = socket.local_addr()?;
    let mut report = FloodReport::default();
    let mut buf = vec![0u8; 65_535];
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < cfg.duration {
        report.rounds += 1;
        // No QCD_TOKEN notify: the chain fills the responder's payload cap exactly, and one
        // payload more would make every IKE_AUTH malformed instead of too_many_certs.
        let mut initiator = Initiator::new(
            chain.initiator_config()?,
            Instant::now(),
            SystemTime::now(),
            local,
            cfg.server,
        )?
        .without_qcd();
        initiator.start(Instant::now());
        let mut deadline = Instant::now() + cfg.answer_timeout;
        let mut spi_i = None;
        let mut done = false;
        while !done {
            while let Some((_, to, bytes)) = initiator.poll_transmit() {
                spi_i = bytes.get(..8).map(<[u8]>::to_vec);
                match kind(&bytes) {
                    Some((IKE_SA_INIT, false)) => report.inits_sent += 1,
                    Some((IKE_AUTH, false)) => {
                        report.auths_sent += 1;
                        report.auth_bytes = bytes.len();
                        report.last_auth.clone_from(&bytes);
                    }
                    _ => {}
                }
                send(&socket, to, &bytes);
                deadline = Instant::now() + cfg.answer_timeout;
            }
            if Instant::now() >= deadline || stop.load(Ordering::Relaxed) {
                report.timeouts += 1;
                break;
            }
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                continue;
            };
            let ike = match &buf[..n] {
                [0, 0, 0, 0, ike @ ..] if from.port() == 4500 => ike,
                ike => ike,
            };
            if ike.get(..8) != spi_i.as_deref() {
                continue; // a late answer to an earlier round
            }
            match kind(ike) {
                Some((IKE_SA_INIT, true)) => report.inits_answered += 1,
                Some((IKE_AUTH, true)) => {
                    report.auths_answered += 1;
                    done = true;
                }
                _ => {}
            }
            initiator.handle(Instant::now(), ike);
            // Anything the initiator reports (it fails on the refusal) ends nothing else.
            while initiator.poll_event().is_some() {}
        }
    }
    report.secs = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The control: per round a fresh initiator's IKE_SA_INIT and `auth` (a flood's recorded
/// IKE_AUTH), both to `cfg.server` (a port nobody serves), at most `rounds_per_sec` rounds a
/// second, until `cfg.duration` or `stop`.
pub fn control(
    chain: &AttackChain,
    cfg: &FloodConfig,
    auth: &[u8],
    rounds_per_sec: f64,
    stop: &AtomicBool,
) -> Result<FloodReport> {
    let socket = UdpSocket::bind(cfg.bind).with_context(|| format!("bind {}", cfg.bind))?;
    let local = socket.local_addr()?;
    let mut report = FloodReport::default();
    let interval = Duration::from_secs_f64(1.0 / rounds_per_sec.max(1.0));
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < cfg.duration {
        report.rounds += 1;
        // No QCD_TOKEN notify: the chain fills the responder's payload cap exactly, and one
        // payload more would make every IKE_AUTH malformed instead of too_many_certs.
        let mut initiator = Initiator::new(
            chain.initiator_config()?,
            Instant::now(),
            SystemTime::now(),
            local,
            cfg.server,
        )?
        .without_qcd();
        initiator.start(Instant::now());
        if let Some((_, to, bytes)) = initiator.poll_transmit() {
            report.inits_sent += 1;
            send(&socket, to, &bytes);
        }
        report.auths_sent += 1;
        report.auth_bytes = auth.len();
        send(&socket, cfg.server, auth);
        let next = started + interval.mul_f64(report.rounds as f64);
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    report.secs = started.elapsed().as_secs_f64();
    Ok(report)
}
