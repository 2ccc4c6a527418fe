//! Starting and stopping the daemon's parts: workers, TUN, routes, metrics. Shared by `serve`
//! (real TUN) and `demo` (an in-process corporate network instead of the TUN).

use anyhow::{Context, Result};
use gate64_config::Config;
use gate64_dataplane::{DataplaneConfig, Prefix, Shared};
use gate64_io::{CorpLink, Workers};
use gate64_metrics::Exporter;
use gate64_teredo::{RelayConfig, ServerConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::info;

/// Maps the admin's configuration onto the dataplane's.
pub fn dataplane_config(cfg: &Config) -> DataplaneConfig {
    let teredo = cfg.teredo.enabled.then(|| ServerConfig {
        primary: cfg.teredo_primary(),
        secondary: cfg.teredo_secondary(),
        port: cfg.teredo.port,
        allow_loopback: cfg.teredo.lab_allow_loopback,
        mtu_option: Some(1280),
    });
    let relay = RelayConfig {
        peer_lifetime: Duration::from_secs(cfg.limits.peer_idle_timeout_secs),
        queue_packets: cfg.limits.relay_queue_packets,
        max_peers: cfg.limits.max_teredo_peers,
        ..RelayConfig::default()
    };
    DataplaneConfig {
        teredo,
        relay,
        corp_prefixes: cfg
            .corpnet
            .ipv6_prefixes
            .iter()
            .map(|n| Prefix::new(n.network(), n.prefix_len()))
            .collect(),
        corp_address: cfg.corpnet.address6,
        allow_without_ipsec: cfg.corpnet.allow_without_ipsec,
        rs_per_sec: cfg.limits.rs_per_source_per_sec,
        rs_burst: cfg.limits.rs_burst,
        iphttps_prefix: iphttps_pool(cfg).map(|(p, l)| Prefix::new(p, l)),
    }
}

fn iphttps_pool(cfg: &Config) -> Option<(std::net::Ipv6Addr, u8)> {
    let i = &cfg.iphttps;
    i.enabled
        .then_some(i.prefix)
        .flatten()
        .map(|n| (n.network(), n.prefix_len()))
}

/// The IP-HTTPS protocol settings from `[iphttps]` and `[limits]`.
fn iphttps_settings(cfg: &Config) -> Option<gate64_io::iphttps::Settings> {
    let (prefix, prefix_len) = iphttps_pool(cfg)?;
    let i = &cfg.iphttps;
    // 0 = never: a century is "never" for a connection and keeps Instant arithmetic safe.
    let idle = match i.idle_timeout_secs {
        0 => Duration::from_secs(100 * 365 * 86_400),
        s => Duration::from_secs(s),
    };
    let proto = gate64_iphttps::server::ServerConfig {
        path: i.path.clone(),
        prefix,
        prefix_len,
        idle_timeout: idle,
        request_timeout: Duration::from_secs(cfg.limits.tls_handshake_timeout_secs),
        ra_interval: Duration::from_secs(i.ra_interval_secs),
        ..gate64_iphttps::server::ServerConfig::default()
    };
    Some(gate64_io::iphttps::Settings {
        proto,
        max_handshakes: cfg.limits.max_tls_handshakes,
        handshake_timeout: Duration::from_secs(cfg.limits.tls_handshake_timeout_secs),
        max_connections: cfg.limits.max_iphttps_connections,
        send_queue_bytes: i.send_queue_bytes,
    })
}

/// A running daemon.
pub struct Daemon {
    /// Shared dataplane state.
    pub shared: Arc<Shared>,
    /// The worker threads.
    pub workers: Workers,
    /// The metrics exporter.
    pub exporter: Exporter,
    corp: Vec<Arc<CorpLink>>,
    stop_tx: tokio::sync::watch::Sender<bool>,
}

impl Daemon {
    /// Starts the workers. `corp` gives one corporate link per worker; `None` creates the TUN
    /// device from `[corpnet]` (needs CAP_NET_ADMIN) and its routes.
    pub fn start(cfg: &Config, corp: Option<Vec<CorpLink>>) -> Result<Self> {
        let workers = cfg.effective_workers();
        let shared = Shared::new(dataplane_config(cfg));
        let corp = match corp {
            Some(c) => c,
            None => create_tun(cfg, &shared, workers)?,
        };
        let addresses: Vec<_> = if cfg.teredo.enabled {
            vec![cfg.teredo_primary(), cfg.teredo_secondary()]
        } else {
            Vec::new()
        };
        let corp: Vec<Arc<CorpLink>> = corp.into_iter().map(Arc::new).collect();
        let ios = gate64_io::worker_ios(&addresses, cfg.teredo.port, corp.clone(), usize::from(cfg.corpnet.mtu))
            .with_context(|| {
                format!(
                    "binding the Teredo sockets on {addresses:?} port {} (are these addresses configured on this host? see `teredo.server_addresses`)",
                    cfg.teredo.port
                )
            })?;
        let workers = Workers::spawn(&shared, ios).context("starting worker threads")?;
        let gauge_state = Arc::clone(&shared);
        let exporter = Exporter::new(
            workers.stats(),
            Arc::new(move || gauge_state.gauges(Instant::now())),
        );
        info!(workers = workers.stats().len(), teredo = ?addresses, port = cfg.teredo.port, "workers up");
        let (stop_tx, _) = tokio::sync::watch::channel(false);
        Ok(Daemon {
            shared,
            workers,
            exporter,
            corp,
            stop_tx,
        })
    }

    /// Starts the IP-HTTPS listener when `[iphttps]` is enabled; must run inside a tokio
    /// runtime. Returns the bound address.
    pub async fn start_iphttps(&self, cfg: &Config) -> Result<Option<SocketAddr>> {
        let Some(settings) = iphttps_settings(cfg) else {
            return Ok(None);
        };
        let i = &cfg.iphttps;
        let (Some(cert), Some(key)) = (&i.certificate, &i.private_key) else {
            return Ok(None);
        };
        let tls = gate64_io::tls::server_config(cert, key, i.client_ca.as_deref())?;
        let listener = listen_tcp(i.listen).with_context(|| {
            format!(
                "binding the IP-HTTPS listener on {} (`iphttps.listen`)",
                i.listen
            )
        })?;
        let bound = listener.local_addr()?;
        let server = gate64_io::iphttps::IphttpsServer::new(
            tls,
            settings,
            Arc::clone(&self.shared),
            self.corp.clone(),
            self.exporter.clone(),
        )?;
        tokio::spawn(server.run(listener, self.stop_tx.subscribe()));
        Ok(Some(bound))
    }

    /// Stops IP-HTTPS (links close with TLS close_notify) and the workers.
    pub fn stop(self) -> Result<()> {
        let _ = self.stop_tx.send(true);
        self.workers.stop().context("worker failed")
    }
}

fn create_tun(cfg: &Config, shared: &Shared, queues: usize) -> Result<Vec<CorpLink>> {
    let c = &cfg.corpnet;
    let links = gate64_io::tun::create(&c.tun, c.mtu, c.address6, queues).with_context(|| {
        format!(
            "creating TUN device `{}` (`corpnet.tun`; needs CAP_NET_ADMIN and /dev/net/tun)",
            c.tun
        )
    })?;
    info!(tun = %c.tun, address6 = %c.address6, mtu = c.mtu, queues, "TUN device up");
    if let (true, Some((prefix, len))) = (c.manage_routes, iphttps_pool(cfg)) {
        gate64_io::tun::route(prefix, len, &c.tun)
            .context("routing the IP-HTTPS prefix into the TUN device")?;
        info!(prefix = %format!("{prefix}/{len}"), tun = %c.tun, "route added");
    }
    if let (true, Some(server)) = (c.manage_routes, shared.teredo()) {
        gate64_io::tun::route(server.prefix(), 64, &c.tun)
            .context("routing the Teredo prefix into the TUN device")?;
        info!(prefix = %format!("{}/64", server.prefix()), tun = %c.tun, "route added");
    }
    if gate64_io::ipv6_forwarding() == Some(false) {
        tracing::warn!(
            "IPv6 forwarding is off (net.ipv6.conf.all.forwarding = 0): the kernel will not route client traffic to the corporate network; enable it with `sysctl -w net.ipv6.conf.all.forwarding=1`"
        );
    }
    Ok(links)
}

/// A TCP listener with a deep accept queue: tokio's `bind` listens with a backlog of 128,
/// which overflows under connection storms (every overflow costs the client a 1 s SYN retry).
/// The kernel caps the backlog at `net.core.somaxconn`.
fn listen_tcp(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(addr)?;
    sock.listen(4096)
}

/// Serves metrics on `listen` until `shutdown` resolves; returns the bound address.
pub async fn start_metrics(
    listen: SocketAddr,
    exporter: Exporter,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the metrics listener on {listen} (`metrics.listen`)"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = gate64_metrics::serve(listener, exporter, shutdown).await {
            tracing::error!(error = %e, "metrics server failed");
        }
    });
    info!(listen = %bound, "metrics on http://{bound}/metrics");
    Ok(bound)
}
