//! The lab around the emulated clients: a throw-away PKI, the daemon on loopback with its
//! control runtime, and the corporate network behind it on a thread of its own.

use super::corp::corpnet;
use super::gateway::{ENDPOINT, Gateway, INFRASTRUCTURE_TS, INTRANET_TS};
use super::identities::ClientCa;
use super::{DemoArgs, Totals};
use anyhow::{Context, Result};
use gate64_client::iphttps::{Server, Url};
use gate64_client::ipsec::IpsecSettings;
use gate64_config::Config;
use gate64_daemon::Daemon;
use gate64_esp::TunnelKind;
use gate64_io::CorpLink;
use socket2::{Domain, Protocol, Socket, Type};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Socket buffers: generous, so loopback bursts are not lost in the kernel.
const SOCKET_BUFFER: usize = 4 << 20;

/// The running lab.
pub struct Lab {
    /// The daemon under test.
    pub daemon: Daemon,
    /// The Teredo server's address the clients qualify with (the daemon also serves
    /// 127.0.0.2 on the same port, its second address).
    pub teredo: SocketAddrV4,
    /// The IP-HTTPS server, when the population has IP-HTTPS clients.
    pub iphttps: Option<Arc<Server>>,
    /// The IP-HTTPS URL, for the banner.
    pub iphttps_url: Option<String>,
    /// The daemon's UDP workers.
    pub workers: usize,
    /// What the clients need for their two IPsec tunnels (none with `--no-ipsec`): the
    /// settings they share and the CA that issues each its certificate.
    pub ipsec: Option<(Arc<IpsecSettings>, Arc<ClientCa>)>,
    /// The daemon's TLS side, as in `gate64 serve`.
    ctl: tokio::runtime::Runtime,
    corp: JoinHandle<()>,
    stop: Arc<AtomicBool>,
    certs: Option<LabCerts>,
}

impl Lab {
    /// Starts the lab for `args`, with IP-HTTPS when `with_iphttps`; the corporate network
    /// counts into `totals`.
    pub fn start(args: &DemoArgs, with_iphttps: bool, totals: &Arc<Totals>) -> Result<Lab> {
        let with_ipsec = !args.no_ipsec;
        let certs = (with_iphttps || with_ipsec)
            .then(LabCerts::generate)
            .transpose()?;
        let (gateway, ipsec) = match certs.as_ref().filter(|_| with_ipsec) {
            Some(c) => {
                let ca = ClientCa::generate()?;
                let gateway = Gateway::new(&c.dir, ca.pem(), std::time::Instant::now())?;
                let settings = Arc::new(client_settings(c)?);
                (Some(gateway), Some((settings, Arc::new(ca))))
            }
            None => (None, None),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let corp_sock = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
            .context("binding the corporate network's socket")?;
        corp_sock.set_read_timeout(Some(Duration::from_millis(5)))?;
        let corp_addr = corp_sock.local_addr()?;

        let (daemon, cfg, port) = start_daemon(args, corp_addr, certs.as_ref())?;
        let workers = cfg.effective_workers();
        let ctl = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("gate64-ctl")
            .enable_all()
            .build()
            .context("starting the control runtime")?;
        let listen = match ctl.block_on(daemon.start_iphttps(&cfg)) {
            Ok(a) => a,
            Err(e) => {
                let _ = daemon.stop();
                return Err(e.context("starting the IP-HTTPS listener"));
            }
        };
        let (iphttps, iphttps_url) = match (certs.as_ref().filter(|_| with_iphttps), listen) {
            (Some(c), Some(addr)) => {
                let tls = gate64_io::tls::client_config(&c.file("ca.pem"), None)?;
                let server = Server::new(Url::for_address(addr, &cfg.iphttps.path), tls)?;
                let url = format!("https://{addr}{}", cfg.iphttps.path);
                (Some(Arc::new(server)), Some(url))
            }
            _ => (None, None),
        };

        let corp = {
            let (totals, stop) = (Arc::clone(totals), Arc::clone(&stop));
            let down = args.down_mbit() * 1e6 / 8.0;
            std::thread::Builder::new()
                .name("demo-corpnet".into())
                .spawn(move || corpnet(corp_sock, down, &totals, &stop, gateway))?
        };
        Ok(Lab {
            daemon,
            teredo: SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
            iphttps,
            iphttps_url,
            workers,
            ipsec,
            ctl,
            corp,
            stop,
            certs,
        })
    }

    /// Stops the corporate network and the daemon, and removes the lab PKI.
    pub fn stop(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.corp.join();
        let stopped = self.daemon.stop();
        self.ctl.shutdown_timeout(Duration::from_secs(1));
        drop(self.certs);
        stopped
    }
}

/// The clients' side of the demo's tunnels: the lab CA for the responder and the gateway's
/// selectors (`gate64 certs`' client certificate stands in until each client gets its own,
/// [`ClientCa`]). The clients do not ask for an
/// inner address (their transport address is their inner address), so the responder's
/// tables show one inner address per client.
fn client_settings(certs: &LabCerts) -> Result<IpsecSettings> {
    let mut s = IpsecSettings::load(
        ENDPOINT,
        &certs.file("ipsec-client.pem"),
        &certs.file("ipsec-client.key"),
        &certs.file("ca.pem"),
        vec![
            (TunnelKind::Infrastructure, vec![INFRASTRUCTURE_TS.parse()?]),
            (TunnelKind::Intranet, vec![INTRANET_TS.parse()?]),
        ],
    )?;
    s.request_address = false;
    Ok(s)
}

/// A lab PKI in a temporary directory, removed on drop.
struct LabCerts {
    dir: PathBuf,
}

impl LabCerts {
    fn generate() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "gate64-demo-{}-{:x}",
            std::process::id(),
            RandomSeed::default().next(0) as u32
        ));
        gate64_daemon::certs::generate(
            &dir,
            &["localhost".to_owned()],
            &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        )
        .context("generating the lab certificates")?;
        Ok(LabCerts { dir })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for LabCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
/// Starts the daemon on a free port bound on both 127.0.0.1 and 127.0.0.2, with one corporate
/// link per worker connected to the corporate network at `corp`; with `certs`, the
/// configuration has IP-HTTPS on 127.0.0.1 (port 0: the listener picks a free one).
fn start_daemon(
    args: &DemoArgs,
    corp: SocketAddr,
    certs: Option<&LabCerts>,
) -> Result<(Daemon, Config, u16)> {
    let seed = RandomSeed::default();
    let mut last_err = None;
    for attempt in 0..20u64 {
        let port = 20_000 + (seed.next(attempt) % 40_000) as u16;
        // A plain bind (no SO_REUSEPORT) fails if anything holds the port.
        let probe = (
            UdpSocket::bind((Ipv4Addr::LOCALHOST, port)),
            UdpSocket::bind((Ipv4Addr::new(127, 0, 0, 2), port)),
        );
        if probe.0.is_err() || probe.1.is_err() {
            continue;
        }
        drop(probe);
        let mut cfg = Config::lab(Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 2), port);
        cfg.server.workers = args.workers;
        // Every emulated client comes from 127.0.0.1: the per-source RS limit would hold them
        // back.
        cfg.limits.rs_per_source_per_sec = 1_000_000;
        cfg.limits.rs_burst = 1_000_000;
        // And the relay's peers per IPv4 address: one per emulated Teredo client.
        cfg.limits.max_teredo_peers_per_ipv4 = 1_000_000;
        if let Some(c) = certs {
            cfg.iphttps = Config::lab_iphttps(
                SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                c.file("server.pem"),
                c.file("server.key"),
            );
            // Likewise the IP-HTTPS per-source limits.
            cfg.iphttps.max_handshakes_per_source = 1_000_000;
            cfg.iphttps.max_handshakes_per_network = 1_000_000;
            cfg.iphttps.max_connections_per_source = 1_000_000;
        }
        cfg.validate().context("the lab configuration")?;
        let workers = cfg.effective_workers();
        let links = (0..workers)
            .map(|_| {
                let s = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
                s.connect(corp)?;
                s.set_nonblocking(true)?;
                Ok(CorpLink::Socket(s))
            })
            .collect::<io::Result<Vec<_>>>()
            .context("creating the corporate links")?;
        match Daemon::start(&cfg, Some(links)) {
            Ok(d) => return Ok((d, cfg, port)),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no free UDP port on 127.0.0.1 and 127.0.0.2")))
        .context("starting the daemon on loopback")
}

pub fn udp_socket(addr: SocketAddrV4) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// Random seeds without a dependency: the standard library's per-process random hash keys.
#[derive(Default)]
pub struct RandomSeed(std::collections::hash_map::RandomState);

impl RandomSeed {
    /// The seed of client (or attempt) `i`.
    pub fn next(&self, i: u64) -> u64 {
        let mut h = self.0.build_hasher();
        h.write_u64(i);
        h.finish()
    }
}
