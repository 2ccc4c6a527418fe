//! Starting and stopping the daemon's parts: workers, TUN, routes, metrics. Shared by `serve`
//! (real TUN) and `demo` (an in-process corporate network instead of the TUN).

use anyhow::{Context, Result};
use gate64_config::Config;
use gate64_dataplane::Shared;
use gate64_io::iphttps::IphttpsServer;
use gate64_io::{CorpLink, Workers};
use gate64_metrics::Exporter;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::info;

use crate::settings::{dataplane_config, iphttps_pool, iphttps_settings, nat64_engine};

/// How long `gate64 status` waits for the IKE driver's list of SAs (it answers between two
/// datagrams; 200,000 SAs take tens of milliseconds).
const IKE_STATUS_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `gate64 ha promote` waits for the takeover to finish (the IKE driver installs
/// the IKE SAs between two datagrams; hundreds of thousands take seconds).
const HA_PROMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the daemon repeats the warning that `[ipsec] require = false` has opened the
/// corporate network to unauthenticated clients.
const OPEN_CORPNET_REMINDER: Duration = Duration::from_secs(3600);

/// A running daemon.
pub struct Daemon {
    /// Shared dataplane state.
    pub shared: Arc<Shared>,
    /// The worker threads.
    pub workers: Workers,
    /// The metrics exporter.
    pub exporter: Exporter,
    corp: Vec<Arc<CorpLink>>,
    /// Clones of the first worker's Teredo sockets, for the IP-HTTPS driver's datagrams to
    /// Teredo clients.
    teredo: Vec<(std::net::Ipv4Addr, std::net::UdpSocket)>,
    stop_tx: tokio::sync::watch::Sender<bool>,
    /// The IP-HTTPS server and its accept loop, once started.
    iphttps: Mutex<Option<(Arc<IphttpsServer>, tokio::task::JoinHandle<()>)>>,
    binding_log: Option<gate64_io::logs::binding::Handle>,
    /// The session log, while `[accounting] log` is set and IPsec is configured.
    sessions: Option<Arc<crate::accounting::Sessions>>,
    /// The GRE data path, while `[[gre.tunnel]]` has tunnels; stops on drop.
    _gre: Option<gate64_io::gre::Gateway>,
    /// The IKE driver's counters, while IPsec is configured (the SAs are in
    /// `shared.sadb()`).
    ipsec_stats: Option<Arc<gate64_dataplane::IpsecStats>>,
    /// Changes the running IKE responder (a reload's new credentials) and lists its SAs for
    /// `gate64 status`, once started.
    ike_control: Mutex<Option<gate64_io::ike::IkeControl>>,
    /// The HA sync channel (`[ha]`), once the responder runs.
    ha: Mutex<Option<crate::ha::HaHandle>>,
    /// The /64s of the HA peer's IP-HTTPS clients: the sync channel fills it, the IP-HTTPS
    /// server reads it.
    lease_hints: Arc<gate64_io::iphttps::LeaseHints>,
    /// The IKE driver's OCSP lookups, whose rule a reload changes.
    ocsp: Mutex<Option<Arc<gate64_io::ike::ocsp::OcspChecker>>>,
    /// What the CRL refresh looks at, while the IKE responder runs.
    crl_watch: Mutex<Option<Arc<Mutex<crate::crl_files::Watch>>>>,
    /// What the IP-HTTPS CRL refresh looks at, while the listener runs.
    tls_watch: Mutex<Option<Arc<Mutex<crate::crl_files::TlsWatch>>>>,
    /// The RADIUS Dynamic Authorization listener, while `[accounting.dae]` is set; stops on
    /// drop.
    dae: Mutex<Option<gate64_io::radius::dae::DaeListener>>,
    /// The control socket's file, once bound: removed by [`Daemon::shutdown`].
    control_socket: Mutex<Option<crate::control::Bound>>,
    /// The `[ipsec] listen` sockets, bound at start, until the IKE driver takes them.
    native: Mutex<Option<gate64_io::ike::NativeSockets>>,
}

impl Daemon {
    /// Starts the workers. `corp` gives one corporate link per worker; `None` creates the TUN
    /// device from `[corpnet]` (needs CAP_NET_ADMIN) and its routes.
    pub fn start(cfg: &Config, corp: Option<Vec<CorpLink>>) -> Result<Self> {
        let workers = cfg.effective_workers();
        let mut dp = dataplane_config(cfg);
        dp.nat64 = nat64_engine(cfg)?;
        let mut binding_log = None;
        if let (Some(path), Some(_)) = (&cfg.nat64.binding_log, &dp.nat64) {
            let (sink, handle) = gate64_io::logs::binding::open(path)
                .context("opening the NAT64 binding log (`nat64.binding_log`)")?;
            info!(path = %path.display(), "NAT64 binding log on");
            dp.binding_log = Some(sink);
            binding_log = Some(handle);
        }
        let shared = Shared::new(dp);
        let corp_is_tun = corp.is_none();
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
        let mut ios = ios;
        // UDP 500/4500 on `[ipsec] listen`, bound now so that every worker holds a clone of
        // the 4500 sockets to send ESP to native clients from; the IKE driver reads them.
        let native = match (&cfg.ipsec.listen[..], cfg.ipsec.configured()) {
            ([], _) | (_, false) => None,
            (listen, true) => {
                let sockets = gate64_io::ike::NativeSockets::bind(
                    listen,
                    gate64_io::ike::IKE_PORT,
                    gate64_io::ike::NAT_T_PORT,
                )
                .with_context(|| {
                    format!(
                        "binding IKE on {listen:?} ports {} and {} (`ipsec.listen`)",
                        gate64_io::ike::IKE_PORT,
                        gate64_io::ike::NAT_T_PORT
                    )
                })?;
                for io in &mut ios {
                    io.native = sockets
                        .senders()
                        .context("cloning an `ipsec.listen` socket")?;
                }
                Some(sockets)
            }
        };
        let teredo = match ios.first() {
            Some(io) => gate64_io::clone_sockets(&io.sockets).context("cloning a Teredo socket")?,
            None => Vec::new(),
        };
        let workers = Workers::spawn(&shared, ios).context("starting worker threads")?;
        let gauge_state = Arc::clone(&shared);
        let exporter = Exporter::new(
            workers.stats(),
            Arc::new(move || gauge_state.gauges(Instant::now())),
        );
        if let Some(handle) = &binding_log {
            let lost = handle.lost();
            exporter.add_binding_log_lost(Arc::new(move || lost.get()));
        }
        let ipsec_stats = shared.sadb().map(|_| {
            let stats = Arc::new(gate64_dataplane::IpsecStats::default());
            exporter.add_ipsec(Arc::clone(&stats));
            info!(endpoint = %cfg.ipsec_endpoint(), "IPsec configured");
            stats
        });
        // Sessions are IKE SAs: the configuration refuses `[accounting]` without IPsec.
        let sessions = match shared.sadb() {
            Some(_) => crate::accounting::Sessions::start(cfg, Arc::clone(&shared))?,
            None => None,
        };
        if let Some(sessions) = &sessions {
            if let (Some(lost), Some(path)) = (sessions.lost(), &cfg.accounting.log) {
                exporter.add_session_log_lost(Arc::new(move || lost.get()));
                let tracker = Arc::clone(sessions);
                exporter
                    .add_session_log_suppressed(Arc::new(move || tracker.refusals_suppressed()));
                info!(path = %path.display(), "session log on");
            }
            if let Some(stats) = sessions.radius_stats() {
                exporter.set_radius(Arc::new(move || gate64_metrics::RadiusCounts {
                    acked: stats.acked(),
                    timeout: stats.timeout(),
                    queue_full: stats.queue_full(),
                    retransmits: stats.retransmits(),
                }));
                info!(servers = ?cfg.accounting.radius.iter().map(|r| r.server).collect::<Vec<_>>(), interim_secs = cfg.accounting.interim_secs, "RADIUS accounting on");
            }
        }
        info!(workers = workers.stats().len(), teredo = ?addresses, port = cfg.teredo.port, "workers up");
        let gre = if corp_is_tun {
            crate::gre::start(cfg, &exporter)?
        } else {
            None
        };
        let (stop_tx, _) = tokio::sync::watch::channel(false);
        Ok(Daemon {
            shared,
            workers,
            exporter,
            corp,
            teredo,
            stop_tx,
            iphttps: Mutex::new(None),
            binding_log,
            sessions,
            _gre: gre,
            ipsec_stats,
            ike_control: Mutex::new(None),
            ha: Mutex::new(None),
            lease_hints: Arc::default(),
            ocsp: Mutex::new(None),
            crl_watch: Mutex::new(None),
            tls_watch: Mutex::new(None),
            control_socket: Mutex::new(None),
            dae: Mutex::new(None),
            native: Mutex::new(native),
        })
    }

    /// Starts the IP-HTTPS listener when `[iphttps]` is enabled; must run inside a tokio
    /// runtime. Returns the bound address.
    pub async fn start_iphttps(&self, cfg: &Config) -> Result<Option<SocketAddr>> {
        let Some(mut settings) = iphttps_settings(cfg) else {
            return Ok(None);
        };
        if cfg.ha.is_some() {
            settings.lease_hints = Some(Arc::clone(&self.lease_hints));
        }
        let Some(tls) = crate::crl_files::iphttps_tls(cfg)? else {
            return Ok(None);
        };
        crate::crl_files::note_iphttps_crls(&cfg.iphttps.client_crls, self.ipsec_stats.as_deref());
        let listen = cfg.iphttps.listen;
        let listener = listen_tcp(listen).with_context(|| {
            format!("binding the IP-HTTPS listener on {listen} (`iphttps.listen`)")
        })?;
        let bound = listener.local_addr()?;
        let server = IphttpsServer::new(
            tls,
            settings,
            Arc::clone(&self.shared),
            self.corp.clone(),
            gate64_io::clone_sockets(&self.teredo).context("cloning a Teredo socket")?,
            self.exporter.clone(),
        )?;
        let task = tokio::spawn(Arc::clone(&server).run(listener, self.stop_tx.subscribe()));
        let watch = Arc::new(Mutex::new(crate::crl_files::TlsWatch::new(cfg)));
        *lock(&self.tls_watch) = Some(Arc::clone(&watch));
        crate::crl_files::spawn_tls_refresh(
            watch,
            server.tls(),
            self.ipsec_stats.clone(),
            self.stop_tx.subscribe(),
        );
        *lock(&self.iphttps) = Some((server, task));
        Ok(Some(bound))
    }

    /// Takes over the SAs the HA peer synced (SIGUSR1); nothing without `[ha]`.
    pub fn ha_promote(&self) {
        match lock(&self.ha).as_ref() {
            Some(ha) => ha.promote(),
            None => tracing::warn!("SIGUSR1: no [ha] section, nothing to take over"),
        }
    }

    /// Starts the IKE responder when `[ipsec]` is configured (its sockets on
    /// `ipsec.endpoint` ports 500 and 4500: call before the privilege drop), installing child
    /// SAs into the database the workers share and counting into the IPsec metrics, and the
    /// HA sync channel with `[ha]` (its socket bound here too). Must run inside a tokio
    /// runtime.
    pub fn start_ike(&self, cfg: &Config) -> Result<()> {
        let (Some(sadb), Some(stats)) = (self.shared.sadb(), &self.ipsec_stats) else {
            return Ok(());
        };
        let native = match lock(&self.native).take() {
            Some(sockets) => {
                // ESP from native clients is opened by a dataplane worker of its own on the
                // IKE task, counted with the workers'.
                let esp_stats = Arc::new(gate64_dataplane::Stats::default());
                self.exporter.add_workers(vec![Arc::clone(&esp_stats)]);
                let corp = self
                    .corp
                    .first()
                    .cloned()
                    .context("no corporate link for `ipsec.listen`")?;
                let esp = gate64_io::ike::NativeEsp::new(
                    Arc::clone(&self.shared),
                    esp_stats,
                    corp,
                    sockets
                        .senders()
                        .context("cloning an `ipsec.listen` socket")?,
                );
                Some((sockets, esp))
            }
            None => None,
        };
        let (tap, ha) = crate::ha::prepare(cfg)?.unzip();
        let started = crate::ike::start(
            cfg,
            Arc::clone(sadb),
            Arc::clone(stats),
            self.sessions.clone(),
            native,
            tap,
            self.stop_tx.subscribe(),
        )?;
        if let (Some(ha), Some((control, _))) = (ha, &started) {
            let hints = Arc::clone(&self.lease_hints);
            let handle = ha.spawn(
                control.clone(),
                (Arc::clone(sadb), hints),
                self.stop_tx.subscribe(),
            )?;
            let counters = handle.counters();
            let held = Arc::clone(&counters);
            self.exporter.set_ha(Arc::new(move || counters.samples()));
            self.exporter.set_ha_store(Arc::new(move || held.held()));
            *lock(&self.ha) = Some(handle);
        }
        let (control, ocsp) = match started {
            Some((control, ocsp)) => (Some(control), Some(ocsp)),
            None => (None, None),
        };
        *lock(&self.ocsp) = ocsp;
        if let Some(control) = &control {
            let watch = Arc::new(Mutex::new(crate::crl_files::Watch::new(cfg)));
            *lock(&self.crl_watch) = Some(Arc::clone(&watch));
            let (control, stats) = (control.clone(), Arc::clone(stats));
            let links = Arc::clone(&self.shared);
            crate::crl_files::spawn_refresh(
                watch,
                control,
                (stats, links),
                self.stop_tx.subscribe(),
            );
        }
        *lock(&self.ike_control) = control;
        if let Some(sessions) = &self.sessions
            && !cfg.accounting.radius.is_empty()
        {
            let (sessions, shared) = (Arc::clone(sessions), Arc::clone(&self.shared));
            let period = Duration::from_secs(cfg.accounting.interim_secs);
            tokio::spawn(repeat_every(period, self.stop_tx.subscribe(), move || {
                sessions.interim(shared.sadb().map(|db| &**db));
            }));
        }
        Ok(())
    }

    /// Serves `gate64 status` on `control.socket` (created now, before the privilege drop,
    /// mode 0600) until the daemon stops; must run inside a tokio runtime. A socket that
    /// cannot be created (no root for /run, say) is a warning, not a reason to stop serving.
    pub fn start_control(&self, cfg: &Config) -> bool {
        let path = &cfg.control.socket;
        let listener = match crate::control::bind(path) {
            Ok((l, bound)) => {
                *lock(&self.control_socket) = Some(bound);
                l
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "no control socket: `gate64 status` will not answer");
                return false;
            }
        };
        info!(socket = %path.display(), "control socket up");
        let shared = Arc::clone(&self.shared);
        let ike = lock(&self.ike_control).clone();
        let read_ike = ike.clone();
        let read = Arc::new(move || {
            let sas = read_ike
                .as_ref()
                .and_then(|c| c.ike_sas(IKE_STATUS_TIMEOUT));
            crate::status::snapshot(&shared, sas.as_deref(), Instant::now())
        });
        let ha = lock(&self.ha).clone();
        let ha_status = ha.clone();
        let ha_promote = Arc::new(move || match &ha {
            Some(ha) => ha.promote_and_wait(HA_PROMOTE_TIMEOUT),
            None => gate64_control::Promoted::refused(
                "no [ha] section (or IPsec is not configured): nothing to take over",
            ),
        });
        let ha_status = Arc::new(move || match &ha_status {
            Some(ha) => ha.status(IKE_STATUS_TIMEOUT),
            None => gate64_control::HaState {
                error: Some("no [ha] section (or IPsec is not configured)".to_owned()),
                ..Default::default()
            },
        });
        let links = Arc::clone(&self.shared);
        // The ends are counted from the responder's events, as every end is.
        let disconnect = Arc::new(move |target| {
            let removed = ike.as_ref()?.disconnect(target, IKE_STATUS_TIMEOUT)?;
            let links_closed = crate::disconnect::close_iphttps_links(&links, &removed);
            Some(crate::disconnect::Ended {
                ike_sas: removed,
                links_closed,
            })
        });
        let handlers = crate::control::ControlHandlers {
            read,
            disconnect,
            ha_promote,
            ha_status,
        };
        tokio::spawn(crate::control::serve(
            listener,
            handlers,
            self.stop_tx.subscribe(),
        ));
        true
    }

    /// Starts the RADIUS Dynamic Authorization listener when `[accounting.dae]` is set, after
    /// the IKE driver (whose IKE SAs it ends) and before the privilege drop (it reads the
    /// clients' secret files).
    pub fn start_dae(&self, cfg: &Config) -> Result<()> {
        let Some(sessions) = &self.sessions else {
            return Ok(());
        };
        let ike = lock(&self.ike_control).clone();
        let started = crate::dae::start(cfg, Arc::clone(sessions), ike, Arc::clone(&self.shared))?;
        if let Some(listener) = started {
            let stats = listener.stats();
            self.exporter.set_dae(Arc::new(move || stats.read()));
            info!(listen = %listener.local_addr(), clients = cfg.accounting.dae.as_ref().map_or(0, |d| d.clients.len()), "RADIUS Dynamic Authorization on");
            *lock(&self.dae) = Some(listener);
        }
        Ok(())
    }

    /// Starts the DNS64 resolver when `[dns64]` is enabled; must run inside a tokio runtime.
    /// It serves on `dns64.listen` and, with `serve_on_corp_address`, on `corpnet.address6`
    /// port 53. That address lives on the TUN device, so the sockets are bound with
    /// IP(V6)_FREEBIND: duplicate address detection cannot make the bind fail. Counters go
    /// to the exporter. Returns the bound addresses (empty when disabled).
    pub async fn start_dns64(&self, cfg: &Config) -> Result<Vec<SocketAddr>> {
        let d = &cfg.dns64;
        let listen = d.listen_addresses(cfg.corpnet.address6);
        if listen.is_empty() {
            return Ok(Vec::new());
        }
        let n = &cfg.nat64;
        let prefix = gate64_nat64::Prefix::new(n.prefix.network(), n.prefix.prefix_len())
            .with_context(|| format!("`nat64.prefix` = {} cannot be used by DNS64", n.prefix))?
            .allow_private(n.allow_private_ipv4);
        let mut settings = gate64_io::dns64::Settings::new(d.upstream.clone(), prefix);
        settings.listen = listen.clone();
        settings.freebind = true;
        settings.exclude = d.exclude.clone();
        settings.timeout = Duration::from_millis(d.timeout_ms);
        settings.cache_entries = d.cache_entries;
        let stats = Arc::new(gate64_dataplane::Dns64Stats::default());
        self.exporter.add_dns64(Arc::clone(&stats));
        let server = gate64_io::dns64::Server::bind(settings, stats).with_context(|| {
            format!(
                "binding DNS64 on {listen:?} (`dns64.listen`, `dns64.serve_on_corp_address`; \
                 port 53 needs root or CAP_NET_BIND_SERVICE)"
            )
        })?;
        let bound = server.local_addrs().to_vec();
        let mut stop = self.stop_tx.subscribe();
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            };
            if let Err(e) = server.run(shutdown).await {
                tracing::error!(error = %e, "DNS64 server failed");
            }
        });
        Ok(bound)
    }

    /// While `[ipsec] require = false`, logs its warning every hour until the
    /// daemon stops (`serve` logs it once at start-up with the other warnings), so a lab
    /// switch left on in production keeps showing in the logs; a reload that turns the switch
    /// on or off is followed. Must run inside a tokio runtime. Returns whether the switch is
    /// on now.
    pub fn start_open_corpnet_reminder(&self, cfg: &Config) -> bool {
        let open = gate64_config::Ipsec {
            require: false,
            ..cfg.ipsec.clone()
        };
        let warning = open.open_to_unauthenticated_warning().unwrap_or_default();
        let stop = self.stop_tx.subscribe();
        let shared = Arc::clone(&self.shared);
        tokio::spawn(repeat_every(OPEN_CORPNET_REMINDER, stop, move || {
            if !shared.require_ipsec() {
                tracing::warn!("{warning}");
            }
        }));
        !self.shared.require_ipsec()
    }

    /// Applies the live keys of `new` ([`gate64_config::LIVE_KEYS`]; the caller has refused
    /// changes to any other): the IP-HTTPS certificate, key and client CA for connections
    /// accepted from now on, the IKE certificate, key and CA (and the RFC 4739 policy) for IKE
    /// SAs negotiated from now on, the IP-HTTPS connection cap, the security step's lab
    /// switch, and the binding log reopened (at its new path, or the same one after logrotate
    /// moved it). The certificate files are read again even when their paths did not change,
    /// so a renewed certificate at the same path is picked up.
    /// Everything that can fail (reading the certificate and key) happens before anything
    /// changes, so an error leaves the daemon as it was. Connections and IKE SAs up are not
    /// touched.
    pub fn reload(&self, new: &Config) -> Result<()> {
        let ike_control = lock(&self.ike_control).clone();
        let ike = match &ike_control {
            Some(_) => crate::ike::Reloaded::read(new)?,
            None => None,
        };
        let iphttps = lock(&self.iphttps).as_ref().map(|(s, _)| Arc::clone(s));
        let tls = match &iphttps {
            Some(_) => crate::crl_files::iphttps_tls(new)?,
            None => None,
        };
        if let Some(server) = &iphttps {
            if let Some(tls) = tls {
                server.tls().replace(tls);
                crate::crl_files::note_iphttps_crls(
                    &new.iphttps.client_crls,
                    self.ipsec_stats.as_deref(),
                );
            }
            if let Some(watch) = lock(&self.tls_watch).as_ref() {
                lock(watch).reset(new);
            }
            if let Some(settings) = iphttps_settings(new) {
                server.apply(&settings);
            }
        }
        if let (Some(ike), Some(control)) = (ike, &ike_control) {
            if let Some(ocsp) = lock(&self.ocsp).as_ref() {
                crate::ike::apply_ocsp(new, ocsp);
            }
            if ike.apply(control, self.ipsec_stats.clone(), Arc::clone(&self.shared)) {
                if let Some(watch) = lock(&self.crl_watch).as_ref() {
                    lock(watch).reset(new);
                }
            } else {
                tracing::warn!("the IKE responder has stopped: its credentials were not reloaded");
            }
        }
        self.shared.set_require_ipsec(new.ipsec.require);
        self.reopen_binding_log(new);
        Ok(())
    }

    /// Reopens the NAT64 binding log and the session log at `cfg`'s paths. Every SIGHUP
    /// does, even one whose reload is refused, so that logrotate's signal is never lost to an
    /// unrelated edit.
    pub fn reopen_binding_log(&self, cfg: &Config) {
        if let (Some(log), Some(path)) = (&self.binding_log, &cfg.nat64.binding_log) {
            log.reopen(path);
        }
        if let (Some(log), Some(path)) = (&self.sessions, &cfg.accounting.log) {
            log.reopen(path);
        }
    }

    /// What the status page reads (call after [`Daemon::start_ike`]).
    pub fn status_sources(&self) -> crate::status_page::Sources {
        crate::status_page::Sources {
            shared: Arc::clone(&self.shared),
            exporter: self.exporter.clone(),
            ike: lock(&self.ike_control).clone(),
            stop: self.stop_tx.subscribe(),
        }
    }

    /// Stops IP-HTTPS (links close with TLS close_notify), DNS64 and the workers.
    pub fn stop(self) -> Result<()> {
        let _ = self.stop_tx.send(true);
        // Sessions still up end with the daemon: their disconnect lines carry the counters
        // the SA database holds now.
        if let Some(sessions) = &self.sessions {
            sessions.end_all(self.shared.sadb().map(|db| &**db));
        }
        self.workers.stop().context("worker failed")
    }

    /// The graceful stop of `serve` (SIGTERM, SIGINT), bounded by `grace`: the IP-HTTPS
    /// listener closes and every link is closed with TLS close_notify (waited for, up to
    /// 5 s), DNS64 and the metrics stop, then the workers. The TUN device, and with it every
    /// route gate64 added to it, goes when the process closes its queues (the routes live on
    /// the device, so no privilege is needed to remove them). Whatever has not finished by
    /// `grace` is abandoned with a warning. The control socket's file is removed first.
    pub async fn shutdown(self, grace: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + grace;
        let _ = self.stop_tx.send(true);
        if let Some(socket) = lock(&self.control_socket).take()
            && let Err(e) = socket.remove()
        {
            tracing::warn!(
                socket = %socket.path().display(),
                error = %e,
                "the control socket could not be removed; the next start replaces it"
            );
        }
        if let Some(sessions) = self.sessions.clone() {
            let sadb = self.shared.sadb().cloned();
            let ended =
                tokio::task::spawn_blocking(move || sessions.end_all(sadb.as_deref())).await;
            if let Err(e) = ended {
                tracing::warn!(error = %e, "ending the sessions for the session log failed");
            }
        }
        let iphttps = lock(&self.iphttps).take();
        if let Some((server, task)) = iphttps {
            let links = server.connections();
            match tokio::time::timeout_at(deadline, task).await {
                Ok(_) => info!(links, "IP-HTTPS links closed"),
                Err(_) => tracing::warn!(
                    links = server.connections(),
                    "IP-HTTPS links still open after {grace:?}; closing them without close_notify"
                ),
            }
        }
        let workers = self.workers;
        let joined = tokio::task::spawn_blocking(move || workers.stop());
        match tokio::time::timeout_at(deadline, joined).await {
            Ok(Ok(r)) => r.context("worker failed"),
            Ok(Err(e)) => Err(anyhow::anyhow!("joining the workers: {e}")),
            Err(_) => Err(anyhow::anyhow!("the workers did not stop within {grace:?}")),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Calls `emit` every `period`, the first time one period from now, until `stop` turns true
/// or its sender is gone.
async fn repeat_every(
    period: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut emit: impl FnMut(),
) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => emit(),
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

fn create_tun(cfg: &Config, shared: &Shared, queues: usize) -> Result<Vec<CorpLink>> {
    let c = &cfg.corpnet;
    let links = gate64_io::tun::create(&c.tun, c.mtu, c.address6, queues, c.tun_napi)
        .with_context(|| {
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
    if let (true, true) = (c.manage_routes, cfg.nat64.enabled) {
        for net in &cfg.nat64.pool4 {
            gate64_io::tun::route_any(net.network().into(), net.prefix_len(), &c.tun)
                .context("routing the NAT64 pool (`nat64.pool4`) into the TUN device")?;
            info!(pool4 = %net, tun = %c.tun, "route added");
        }
        if cfg.nat64.route_prefix {
            let p = cfg.nat64.prefix;
            gate64_io::tun::route(p.network(), p.prefix_len(), &c.tun)
                .context("routing the NAT64 prefix (`nat64.prefix`) into the TUN device")?;
            info!(prefix = %p, tun = %c.tun, "route added");
        }
    }
    if cfg.ipsec.configured() {
        let endpoint = cfg.ipsec_endpoint();
        if endpoint != c.address6 {
            gate64_io::tun::add_address(endpoint, &c.tun)
                .context("adding the IPsec endpoint (`ipsec.endpoint`) to the TUN device")?;
            info!(endpoint = %endpoint, tun = %c.tun, "address added");
        }
        if let (true, Some(pool)) = (c.manage_routes, cfg.ipsec.pool6) {
            gate64_io::tun::route(pool.network(), pool.prefix_len(), &c.tun)
                .context("routing the IPsec inner-address pool (`ipsec.pool6`) into the TUN")?;
            info!(pool6 = %pool, tun = %c.tun, "route added");
        }
        if let (true, Some(pool)) = (c.manage_routes, cfg.ipsec.pool4) {
            gate64_io::tun::route_any(pool.network().into(), pool.prefix_len(), &c.tun)
                .context("routing the IPsec inner IPv4 pool (`ipsec.pool4`) into the TUN")?;
            info!(pool4 = %pool, tun = %c.tun, "route added");
        }
        route_peer_pools(cfg, &c.tun)?;
    }
    let ipsec4 = cfg.ipsec.configured() && cfg.ipsec.pool4.is_some();
    if (cfg.nat64.enabled || ipsec4) && gate64_io::ipv4_forwarding() == Some(false) {
        tracing::warn!(
            "IPv4 forwarding is off (net.ipv4.ip_forward = 0): translated packets and IPsec clients' IPv4 will not reach the corporate IPv4 network; enable it with `sysctl -w net.ipv4.ip_forward=1`"
        );
    }
    if gate64_io::ipv6_forwarding() == Some(false) {
        tracing::warn!(
            "IPv6 forwarding is off (net.ipv6.conf.all.forwarding = 0): the kernel will not route client traffic to the corporate network; enable it with `sysctl -w net.ipv6.conf.all.forwarding=1`"
        );
    }
    Ok(links)
}

/// Routes the `[ha]` peer's pools (`ha.peer_pool6`, `ha.peer_pool4`,
/// `ha.peer_iphttps_prefix`) into the TUN device when `corpnet.manage_routes` is on: the
/// router sends the inner addresses of a dead peer's clients here once the peer's own routes
/// are withdrawn (docs/scale-out.md), and this node's IKE SAs taken over from the peer carry
/// them; IKE from this node to a reconnected IP-HTTPS client's outer address takes it too. While the peer lives the router
/// prefers the peer's own announcement, so nothing arrives for them.
fn route_peer_pools(cfg: &Config, tun: &str) -> Result<()> {
    let (Some(ha), true) = (&cfg.ha, cfg.corpnet.manage_routes) else {
        return Ok(());
    };
    if let Some(pool) = ha.peer_pool6 {
        gate64_io::tun::route(pool.network(), pool.prefix_len(), tun)
            .context("routing the HA peer's pool (`ha.peer_pool6`) into the TUN")?;
        info!(peer_pool6 = %pool, tun = %tun, "route added");
    }
    if let Some(pool) = ha.peer_pool4 {
        gate64_io::tun::route_any(pool.network().into(), pool.prefix_len(), tun)
            .context("routing the HA peer's IPv4 pool (`ha.peer_pool4`) into the TUN")?;
        info!(peer_pool4 = %pool, tun = %tun, "route added");
    }
    if let Some((prefix, len)) = crate::settings::iphttps_peer_prefix(cfg) {
        gate64_io::tun::route(prefix, len, tun).context(
            "routing the HA peer's IP-HTTPS prefix (`ha.peer_iphttps_prefix`) into the TUN",
        )?;
        info!(peer_iphttps_prefix = %format!("{prefix}/{len}"), tun = %tun, "route added");
    }
    Ok(())
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

/// Serves metrics on `listen` until `shutdown` resolves; returns the bound address. Requests
/// may name the host as one of `allowed_hosts` (`metrics.allowed_hosts`) besides an IP
/// address or `localhost`.
pub async fn start_metrics(
    listen: SocketAddr,
    exporter: Exporter,
    status: Option<gate64_io::metrics_http::StatusJson>,
    allowed_hosts: Vec<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the metrics listener on {listen} (`metrics.listen`)"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let served = match status {
            Some(status) => {
                gate64_io::metrics_http::serve_with_status(
                    listener,
                    exporter,
                    status,
                    allowed_hosts,
                    shutdown,
                )
                .await
            }
            None => {
                gate64_io::metrics_http::serve(listener, exporter, allowed_hosts, shutdown).await
            }
        };
        if let Err(e) = served {
            tracing::error!(error = %e, "metrics server failed");
        }
    });
    info!(listen = %bound, "metrics on http://{bound}/metrics");
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn reminder_repeats_after_each_period_until_stopped() {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let count = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&count);
        let task = tokio::spawn(repeat_every(
            Duration::from_millis(50),
            stop_rx,
            move || {
                counter.fetch_add(1, Ordering::Relaxed);
            },
        ));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // Not at once: the start-up warnings already said it.
        assert_eq!(count.load(Ordering::Relaxed), 0);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(count.load(Ordering::Relaxed) >= 2, "{count:?}");
        stop_tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the reminder ends when the daemon stops")
            .unwrap();
        let stopped_at = count.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(count.load(Ordering::Relaxed), stopped_at);
    }
}
