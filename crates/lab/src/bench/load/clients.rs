//! One emulated client: its own IKE certificate, its transport session (the client sessions
//! of `gate64 connect`, [`gate64_client`]) with the IPsec layer in front of a [`LoadHost`],
//! started again after a pause when the session ends.

use super::fleet::{Fleet, LoadHost, Transport};
use super::spec::Spec;
use super::underlay::Underlay;
use anyhow::{Context, Result};
use gate64_client::iphttps::Server;
use gate64_client::ipsec::{IpsecHost, IpsecSettings};
use gate64_esp::TunnelKind;
use gate64_teredo::client::Client;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// id-kp-ipsecIKE (RFC 4945 §5.1.3.12).
const EKU_IPSEC_IKE: [u64; 9] = [1, 3, 6, 1, 5, 5, 7, 3, 17];
/// The pause before a client whose session ended starts again.
const RESTART_AFTER: Duration = Duration::from_secs(2);
/// How long an IP-HTTPS connection may take to come up (TCP, TLS, the server's 200).
const IPHTTPS_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// What every client shares: the spec's servers and the PKI.
pub struct Shared {
    /// gate64's Teredo server.
    pub teredo: SocketAddrV4,
    /// gate64's IP-HTTPS server, when some clients run IP-HTTPS.
    pub iphttps: Option<Server>,
    /// The IPsec settings without a certificate (each client issues its own).
    pub ipsec: IpsecSettings,
    /// The clients' CA, to issue their certificates.
    pub issuer: Issuer<'static, KeyPair>,
    /// Per-process random keys, for the seeds.
    pub random: std::collections::hash_map::RandomState,
    /// The underlay the Teredo clients send and receive on (its device is set once it
    /// exists); `None` when each has a kernel socket (`teredo_sockets`).
    pub underlay: Option<Arc<Underlay>>,
}

impl Shared {
    /// Reads the spec's PEM files and checks them.
    pub fn load(spec: &Spec) -> Result<Shared> {
        let ca_pem = |p: &std::path::Path| {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        };
        let issuer = Issuer::from_ca_cert_pem(
            &ca_pem(&spec.ipsec.client_ca_cert)?,
            KeyPair::from_pem(&ca_pem(&spec.ipsec.client_ca_key)?)
                .context("`ipsec.client_ca_key`: not a PEM private key")?,
        )
        .context("`ipsec.client_ca_cert`: not a PEM CA certificate")?;
        let (chain_pem, key_pem) = issue(&issuer, 0)?;
        let ipsec = IpsecSettings {
            endpoint: spec.ipsec.endpoint,
            chain_pem,
            key_pem,
            ca_pem: std::fs::read(&spec.ipsec.ca)
                .with_context(|| format!("`ipsec.ca`: reading {}", spec.ipsec.ca.display()))?,
            tunnels: vec![
                (
                    TunnelKind::Infrastructure,
                    spec.ipsec.infrastructure_ts.clone(),
                ),
                (TunnelKind::Intranet, spec.ipsec.intranet_ts.clone()),
            ],
            request_address: true,
            renew_after: gate64_client::ipsec::RENEW_AFTER,
            user_pem: None,
            server_id: None,
            integrity_only: false,
            udp_encap: true,
        };
        let iphttps = match (&spec.iphttps_url, spec.iphttps_clients()) {
            (Some(url), n) if n > 0 => Some(iphttps_server(spec, url)?),
            _ => None,
        };
        Ok(Shared {
            teredo: SocketAddrV4::new(spec.teredo_server, gate64_teredo::TEREDO_PORT),
            iphttps,
            ipsec,
            issuer,
            random: Default::default(),
            underlay: (!spec.teredo_sockets).then(Default::default),
        })
    }

    fn seed(&self, i: usize, attempt: u64) -> u64 {
        let mut h = self.random.build_hasher();
        h.write_usize(i);
        h.write_u64(attempt);
        h.finish()
    }

    /// Client `i`'s IPsec settings: the shared ones with a certificate of its own (distinct
    /// identities, so that INITIAL_CONTACT replaces no other client's SAs, RFC 7296 §2.4).
    fn settings_of(&self, i: usize) -> Result<IpsecSettings> {
        let (chain_pem, key_pem) = issue(&self.issuer, i)?;
        let base = &self.ipsec;
        Ok(IpsecSettings {
            endpoint: base.endpoint,
            chain_pem,
            key_pem,
            ca_pem: base.ca_pem.clone(),
            tunnels: base.tunnels.clone(),
            request_address: base.request_address,
            renew_after: base.renew_after,
            user_pem: None,
            server_id: base.server_id.clone(),
            integrity_only: base.integrity_only,
            udp_encap: base.udp_encap,
        })
    }
}

fn iphttps_server(spec: &Spec, url: &str) -> Result<Server> {
    let url = gate64_client::iphttps::Url::parse(url).context("`iphttps_url`")?;
    let ca = spec
        .iphttps_ca
        .as_deref()
        .context("`iphttps_ca`: required with IP-HTTPS clients")?;
    let tls = gate64_io::tls::client_config(ca, None).context("`iphttps_ca`")?;
    let server = Server::new(url, tls)?;
    match &spec.iphttps_server_name {
        Some(name) => server
            .with_server_name(name)
            .context("`iphttps_server_name`"),
        None => Ok(server),
    }
}

/// Client `n`'s certificate and key (PEM) from `issuer`: CN and SAN
/// `client<n>.load.gate64.lab`, EKU clientAuth + ipsecIKE.
fn issue(issuer: &Issuer<'static, KeyPair>, n: usize) -> Result<(Vec<u8>, Vec<u8>)> {
    let name = format!("client{n}.load.gate64.lab");
    let mut leaf = CertificateParams::new(vec![name.clone()]).context("client SAN")?;
    leaf.distinguished_name.push(DnType::CommonName, name);
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ClientAuth,
        ExtendedKeyUsagePurpose::Other(EKU_IPSEC_IKE.to_vec()),
    ];
    leaf.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().context("generating a client key")?;
    let cert = leaf
        .signed_by(&key, issuer)
        .context("signing a client certificate")?;
    Ok((cert.pem().into_bytes(), key.serialize_pem().into_bytes()))
}

/// Runs client `i` for as long as the process runs: a session, then after a pause another.
pub async fn run(fleet: Arc<Fleet>, shared: Arc<Shared>, spec: Arc<Spec>, i: usize) {
    let settings = match shared.settings_of(i) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            tracing::warn!(client = i, error = %format!("{e:#}"), "client not started");
            return;
        }
    };
    let source = spec.source_of(i);
    let transport = fleet
        .transports
        .get(i)
        .copied()
        .unwrap_or(Transport::Teredo);
    for attempt in 0u64.. {
        let mut host = IpsecHost::new(LoadHost::new(Arc::clone(&fleet), i), Arc::clone(&settings));
        let seed = shared.seed(i, attempt);
        let r = match (transport, &shared.iphttps) {
            (Transport::Iphttps, Some(server)) => {
                let server = server.clone().with_source(IpAddr::V4(source));
                let deadline = tokio::time::Instant::now() + IPHTTPS_CONNECT_TIMEOUT;
                let mut linked = false;
                server.session(seed, deadline, &mut host, &mut linked).await
            }
            _ => match &shared.underlay {
                Some(underlay) => {
                    let local = SocketAddrV4::new(source, spec.port_of(i, attempt));
                    underlay_session(underlay, shared.teredo, local, seed, &mut host).await
                }
                None => teredo_session(shared.teredo, source, seed, &mut host).await,
            },
        };
        host.host_mut().retire();
        fleet.counters.session_errors.fetch_add(1, Relaxed);
        if let Err(e) = r {
            tracing::info!(client = i, error = %format!("{e:#}"), "client session ended");
        }
        tokio::time::sleep(RESTART_AFTER).await;
    }
}

/// One Teredo session from `local` on the underlay (no file descriptor of its own).
async fn underlay_session(
    underlay: &Arc<Underlay>,
    server: SocketAddrV4,
    local: SocketAddrV4,
    seed: u64,
    host: &mut IpsecHost<LoadHost>,
) -> Result<()> {
    let endpoint = underlay
        .bind(local)
        .with_context(|| format!("binding {local}"))?;
    let mut client = Client::new(server, seed);
    gate64_client::teredo::run(&endpoint, &mut client, host).await
}

/// One Teredo session on a kernel socket from `source` (a port of its own: gate64 tells clients apart by their
/// mapped address and port, RFC 4380 §4).
async fn teredo_session(
    server: SocketAddrV4,
    source: std::net::Ipv4Addr,
    seed: u64,
    host: &mut IpsecHost<LoadHost>,
) -> Result<()> {
    let sock = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    sock.set_nonblocking(true)?;
    // gate64 sends a client's downlink in GSO bursts; the default buffer overflowed
    // (`UdpRcvbufErrors`) while the client's task waited for a core.
    let _ = sock.set_recv_buffer_size(1 << 20);
    sock.bind(&SocketAddrV4::new(source, 0).into())
        .with_context(|| format!("binding {source}"))?;
    let sock = tokio::net::UdpSocket::from_std(sock.into())?;
    sock.connect(server).await?;
    let mut client = Client::new(server, seed);
    gate64_client::teredo::run(&sock, &mut client, host).await
}
