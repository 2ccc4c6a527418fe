//! `gate64 connect`: Linux clients for gate64's transports, for labs and CI (there is no
//! open-source IP-HTTPS client, teredo-iphttps.md §2.6).
//!
//! - `connect iphttps`: the IP-HTTPS session of [`crate::iphttps`] and a TUN device
//!   with `prefix::iid/64`. Packets from the TUN are written to the stream as they are (the
//!   protocol has no framing, [MS-IPHTTPS] §2.2); the stream is deframed into the TUN.
//! - `connect teredo`: the Teredo session of [`crate::teredo`] (qualification, RFC 4380
//!   §5.2), a TUN device with the Teredo address/32 (so `2001::/32` goes into the tunnel, as
//!   Miredo does) and data sent bare to the server (gate64's, also the relay of the networks
//!   behind it) or to the relay the direct IPv6 connectivity test (§5.2.9) found for a native
//!   destination (Miredo's server relays only that test's echo requests).
//!
//! The TUN device is opened with offload (virtio-net headers, as the server's): one read takes
//! a TCP super-packet from the local stack (TSO) and splits it into MTU-sized packets, which
//! go into one TLS write (IP-HTTPS) or one datagram each (Teredo); packets from the tunnel are
//! gathered per TLS read or per burst of datagrams and written with GRO, so a flow's segments
//! enter the local stack as one super-packet.
//!
//! Over either transport the client is a DirectAccess-style IPsec client by default
//! ([`crate::ipsec`]): once the transport is up, two IKEv2 initiators build
//! the `infrastructure` and `intranet` tunnels (one IKE SA and one child SA each, certificate
//! authentication with `--ipsec-cert/--ipsec-key`, the responder checked against `--ipsec-ca`;
//! with `--user-cert/--user-key` the intranet tunnel adds an RFC 4739 second round proving
//! the user certificate)
//! to `--ipsec-endpoint`, riding the transport as IPv6/UDP 4500 built by the client itself (no
//! kernel socket, no kernel ESP). The inner address comes from the configuration payload
//! (CFG_REQUEST) and the corporate routes from the narrowed traffic selectors, routed into
//! the TUN device with the inner address as source and a TCP MSS that keeps a sealed segment
//! within the transport's MTU; `--route` is then only for extra prefixes. The endpoint has no
//! default: neither transport tells the client gate64's IKE address (its `[ipsec] endpoint`,
//! by default the first address of its `ipsec.pool6`). `--no-ipsec` keeps the clear-text
//! client of earlier releases, for labs.
//!
//! The TUN device is created on the first configuration and survives reconnects; `--route`
//! prefixes are routed into it (`ip -6 route replace`). On a lost IP-HTTPS connection the
//! client reconnects after 1 s, doubling up to 60 s, and resets after a successful link. (The
//! spec's schedule, 30 s then growing to 15 min, §3.1.2.1, suits Windows fleets hitting one
//! server; a lab client wants to come back quickly.) Ctrl-C / SIGTERM exit cleanly; the TUN
//! device disappears with the process.

mod tun;

use crate::Host;
use crate::iphttps::{Server, Url};
use crate::ipsec::{IpsecHost, IpsecSettings};
use anyhow::{Context, Result};
use gate64_esp::TunnelKind;
use gate64_ike::auth::Identity;
use gate64_teredo::client::Client as TeredoClient;
use ipnet::Ipv6Net;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tracing::{info, warn};
use tun::TunLink;

/// First reconnect delay.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Longest reconnect delay.
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// TCP connect + TLS handshake + HTTP response must complete within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The CA bundle used when `--ca` is not given (Debian's `ca-certificates`).
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Arguments of `gate64 connect`.
#[derive(clap::Args, Debug)]
pub struct ConnectArgs {
    // Boxed: the IPsec options make the transports' arguments the largest command.
    #[command(subcommand)]
    transport: Box<Transport>,
}

#[derive(clap::Subcommand, Debug)]
enum Transport {
    /// IPv6 over HTTPS ([MS-IPHTTPS]).
    Iphttps(IphttpsArgs),
    /// IPv6 over UDP/IPv4 (RFC 4380), with gate64 (or Miredo's server and a relay) as Teredo
    /// server and relay.
    Teredo(TeredoArgs),
}

#[derive(clap::Args, Debug)]
struct IphttpsArgs {
    /// The IP-HTTPS URL, `https://host[:port]/path` (host: a name or an IP literal).
    #[arg(long)]
    server: String,
    /// CA certificate(s) to trust (PEM); default: the system bundle.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Client certificate (PEM), for servers with `client_ca`.
    #[arg(long, requires = "client_key")]
    client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "client_cert")]
    client_key: Option<PathBuf>,
    /// Name of the TUN device.
    #[arg(long, default_value = "gate64c")]
    ifname: String,
    /// A prefix to route into the tunnel (repeatable), e.g. the corporate /48. With IPsec the
    /// corporate routes come from the traffic selectors and this is rarely needed.
    #[arg(long = "route")]
    routes: Vec<Ipv6Net>,
    #[command(flatten)]
    ipsec: IpsecArgs,
}

#[derive(clap::Args, Debug)]
struct TeredoArgs {
    /// The Teredo server's IPv4 address (port 3544).
    #[arg(long)]
    server: Ipv4Addr,
    /// Local UDP address to bind.
    #[arg(long, default_value = "0.0.0.0:0")]
    bind: SocketAddrV4,
    /// Name of the TUN device.
    #[arg(long, default_value = "gate64t")]
    ifname: String,
    /// A prefix to route into the tunnel besides `2001::/32` (repeatable). With IPsec the
    /// corporate routes come from the traffic selectors and this is rarely needed.
    #[arg(long = "route")]
    routes: Vec<Ipv6Net>,
    #[command(flatten)]
    ipsec: IpsecArgs,
}

/// The IPsec half of `gate64 connect` (DirectAccess's two tunnels, see the module docs).
#[derive(clap::Args, Debug)]
struct IpsecArgs {
    /// No IKE and no ESP: the host's packets cross the transport in the clear. For labs only
    /// (a gate64 with `[ipsec] require = false`, or another IKE client such as strongSwan
    /// riding this tunnel); a gate64 with the default `require = true` lets such a client
    /// reach nothing but gate64 itself.
    #[arg(long)]
    no_ipsec: bool,
    /// gate64's IKE/ESP address: its `[ipsec] endpoint`, by default the first address of its
    /// `ipsec.pool6` (`gate64 check-config` on the server prints it).
    /// Required with IPsec: neither transport tells the client this address.
    #[arg(long, value_name = "IPV6", required_unless_present = "no_ipsec")]
    ipsec_endpoint: Option<Ipv6Addr>,
    /// Our IPsec certificate chain, leaf first (PEM; `gate64 certs` writes
    /// ipsec-client.pem).
    #[arg(long, value_name = "PEM", required_unless_present = "no_ipsec")]
    ipsec_cert: Option<PathBuf>,
    /// The certificate's private key (PEM; `gate64 certs` writes ipsec-client.key).
    #[arg(long, value_name = "PEM", required_unless_present = "no_ipsec")]
    ipsec_key: Option<PathBuf>,
    /// The CA(s) gate64's IKE certificate must chain to (PEM; `gate64 certs` writes
    /// ca.pem).
    #[arg(long, value_name = "PEM", required_unless_present = "no_ipsec")]
    ipsec_ca: Option<PathBuf>,
    /// The identity gate64's IKE certificate must hold, asked for in IDr: an IP address, an
    /// email address (with `@`) or a DNS name, matched against the certificate's
    /// subjectAltNames. A server whose certificate does not hold it gets no tunnel. Default:
    /// the `--ipsec-endpoint` address, so that no other certificate of the CA can pose as
    /// gate64.
    #[arg(long, value_name = "ID")]
    ipsec_server_id: Option<String>,
    /// A user certificate chain, leaf first (PEM), proven in a second authentication round on
    /// the intranet tunnel (RFC 4739), after the machine certificate of `--ipsec-cert`, when
    /// the responder supports it (gate64: `[ipsec] intranet_second_auth`). Under the same CA
    /// as the machine certificate. Needs `--user-key`.
    #[arg(long, value_name = "PEM", requires = "user_key")]
    user_cert: Option<PathBuf>,
    /// The user certificate's private key (PEM).
    #[arg(long, value_name = "PEM", requires = "user_cert")]
    user_key: Option<PathBuf>,
    /// Corporate prefix asked for in the infrastructure tunnel (repeatable; the responder
    /// narrows it). Default `::/0`, with the tunnel named in IKE_AUTH: gate64 narrows it into
    /// its `infrastructure_prefixes`. Give it for a responder that picks the tunnel by the
    /// selectors alone (strongSwan), e.g. the DNS64 server's /128.
    #[arg(long = "infrastructure-ts", value_name = "PREFIX")]
    infrastructure_ts: Vec<Ipv6Net>,
    /// Corporate prefix asked for in the intranet tunnel (repeatable). Default `::/0`, with
    /// the tunnel named in IKE_AUTH: gate64 narrows it into its `intranet_prefixes`.
    #[arg(long = "intranet-ts", value_name = "PREFIX")]
    intranet_ts: Vec<Ipv6Net>,
    /// Negotiate each tunnel afresh after this many seconds (make before break; this client
    /// does not rekey in place). Keep it below the responder's child SA lifetime.
    #[arg(long, value_name = "SECS", default_value_t = 2700,
          value_parser = clap::value_parser!(u64).range(5..))]
    ipsec_renew_secs: u64,
    /// Over IP-HTTPS: start IKE on UDP 4500, so that ESP is UDP-encapsulated (RFC 3948) as
    /// over Teredo, for a responder whose user-space ESP takes nothing else (strongSwan's
    /// kernel-libipsec). Without it IKE starts on port 500 and ESP is plain IPv6 next header
    /// 50, as there is no NAT inside the IP-HTTPS tunnel: 8 bytes and a UDP checksum less per
    /// packet. Teredo always uses 4500.
    #[arg(long)]
    ipsec_udp_encap: bool,
}

impl IpsecArgs {
    /// The IPsec settings, or `None` with `--no-ipsec`; `over_iphttps` offers AES-GMAC child
    /// SAs, which gate64 takes with `[ipsec] iphttps_integrity_only`, and leaves ESP
    /// unencapsulated unless `--ipsec-udp-encap` is given.
    fn settings(&self, over_iphttps: bool) -> Result<Option<Arc<IpsecSettings>>> {
        if self.no_ipsec {
            return Ok(None);
        }
        let missing = |flag: &str| anyhow::anyhow!("{flag} is required (or --no-ipsec)");
        let endpoint = self
            .ipsec_endpoint
            .ok_or_else(|| missing("--ipsec-endpoint"))?;
        let cert = self
            .ipsec_cert
            .as_deref()
            .ok_or_else(|| missing("--ipsec-cert"))?;
        let key = self
            .ipsec_key
            .as_deref()
            .ok_or_else(|| missing("--ipsec-key"))?;
        let ca = self
            .ipsec_ca
            .as_deref()
            .ok_or_else(|| missing("--ipsec-ca"))?;
        let tunnels = vec![
            (TunnelKind::Infrastructure, self.infrastructure_ts.clone()),
            (TunnelKind::Intranet, self.intranet_ts.clone()),
        ];
        let mut settings = IpsecSettings::load(endpoint, cert, key, ca, tunnels)?;
        settings.server_id = Some(server_identity(self.ipsec_server_id.as_deref(), endpoint)?);
        settings.renew_after = std::time::Duration::from_secs(self.ipsec_renew_secs);
        settings.integrity_only = over_iphttps;
        settings.udp_encap = !over_iphttps || self.ipsec_udp_encap;
        if let (Some(cert), Some(key)) = (&self.user_cert, &self.user_key) {
            settings.load_user(cert, key)?;
        }
        Ok(Some(Arc::new(settings)))
    }
}

/// `--ipsec-server-id` as an IKE identity: an IP address, an email address (`@`) or a DNS
/// name; without it the endpoint's address.
fn server_identity(given: Option<&str>, endpoint: Ipv6Addr) -> Result<Identity> {
    let Some(text) = given else {
        return Ok(Identity::ip(IpAddr::V6(endpoint)));
    };
    let text = text.trim();
    anyhow::ensure!(
        !text.is_empty() && !text.contains('='),
        "--ipsec-server-id {text:?}: give an IP address, an email address or a DNS name that \
         gate64's certificate holds as a subjectAltName"
    );
    Ok(if let Ok(ip) = text.parse::<IpAddr>() {
        Identity::ip(ip)
    } else if text.contains('@') {
        Identity::email(text)
    } else {
        Identity::fqdn(text)
    })
}

/// Runs `gate64 connect`.
pub fn run(args: ConnectArgs) -> Result<()> {
    init_logging();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let client = async {
            match *args.transport {
                Transport::Iphttps(a) => iphttps(a).await,
                Transport::Teredo(a) => teredo(a).await,
            }
        };
        // Dropping the client future closes the connection and removes the TUN device.
        tokio::select! {
            r = client => r,
            _ = tokio::signal::ctrl_c() => { info!("interrupted, exiting"); Ok(()) }
            _ = term.recv() => { info!("terminated, exiting"); Ok(()) }
        }
    })
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

// ---------------------------------------------------------------------------------------------
// The transports

async fn iphttps(args: IphttpsArgs) -> Result<()> {
    let url = Url::parse(&args.server)?;
    let ca = args
        .ca
        .clone()
        .unwrap_or_else(|| PathBuf::from(SYSTEM_CA_BUNDLE));
    let client_cert = args.client_cert.as_deref().zip(args.client_key.as_deref());
    let tls = gate64_io::tls::client_config(&ca, client_cert)?;
    let server = Server::new(url, tls)?;
    let link = TunLink::new(args.ifname.clone(), args.routes.clone());
    // TLS already encrypts this hop: offer ESP without a second encryption too.
    match args.ipsec.settings(true)? {
        Some(settings) => iphttps_sessions(&args, &server, IpsecHost::new(link, settings)).await,
        None => iphttps_sessions(&args, &server, link).await,
    }
}

/// IP-HTTPS sessions for `link`, reconnecting with backoff.
async fn iphttps_sessions<H: Host>(args: &IphttpsArgs, server: &Server, mut link: H) -> Result<()> {
    // One seed per run: the interface id, and so the address, stays the same across
    // reconnects that get the same /64.
    let seed = random_u64();
    let mut backoff = BACKOFF_MIN;
    loop {
        let mut linked = false;
        let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
        let err = match server.session(seed, deadline, &mut link, &mut linked).await {
            // The TUN device is never done with the tunnel.
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if linked {
            backoff = BACKOFF_MIN;
        }
        warn!(server = %args.server, error = %format!("{err:#}"), retry_in = ?backoff, "IP-HTTPS connection lost");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn teredo(args: TeredoArgs) -> Result<()> {
    let server = SocketAddrV4::new(args.server, gate64_teredo::TEREDO_PORT);
    let sock = UdpSocket::bind(args.bind)
        .await
        .with_context(|| format!("binding UDP {}", args.bind))?;
    let mut client = TeredoClient::with_random(server, os_random);
    let link = TunLink::new(args.ifname.clone(), args.routes.clone());
    info!(%server, local = ?sock.local_addr().ok(), "Teredo: qualifying");
    match args.ipsec.settings(false)? {
        Some(settings) => {
            let mut host = IpsecHost::new(link, settings);
            let ended = crate::teredo::run(&sock, &mut client, &mut host).await;
            info!(stats = ?host.stats(), "IPsec");
            ended
        }
        None => {
            let mut link = link;
            crate::teredo::run(&sock, &mut client, &mut link).await
        }
    }
}

/// The Teredo client's nonces and probe tokens: the kernel's generator (`getrandom(2)`), or,
/// should that ever fail, the clock and the process id (see [`random_u64`]).
fn os_random(out: &mut [u8; 8]) {
    if gate64_sys::random::getrandom(out).is_err() {
        *out = clock_and_pid().to_ne_bytes();
    }
}

/// 64 random bits from the kernel (the seed of the IP-HTTPS interface id). Should
/// `getrandom(2)` fail, the clock and the process id keep the seed distinct per process and
/// run, which is all the interface id needs.
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    os_random(&mut b);
    u64::from_ne_bytes(b)
}

fn clock_and_pid() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ u64::from(std::process::id()).rotate_left(32)
}
