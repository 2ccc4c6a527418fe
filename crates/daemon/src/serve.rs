//! `gate64 serve` and `gate64 check-config`: logging, signals, reload, shutdown.

use crate::daemon;
use crate::privilege;
use anyhow::{Context, Result};
use gate64_config::{Config, LogFormat};
use std::path::Path;
use std::time::Duration;
use tracing::{info, warn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// `gate64 check-config`: the file parsed and its files read as `serve` would; its warnings.
pub fn check_config(file: &Path) -> Result<()> {
    let cfg = Config::load(file)?;
    let ike = read_files(&cfg)?;
    if let Some(ike) = &ike {
        let endpoint = cfg.ipsec_endpoint();
        if cfg.ipsec_endpoint_is_default() {
            println!(
                "IKE endpoint: {endpoint} (the default: the first address of ipsec.pool6; \
                 clients connect to it)"
            );
        } else {
            println!("IKE endpoint: {endpoint} (ipsec.endpoint; clients connect to it)");
        }
        if let Some(w) = ike.endpoint_warning(&cfg) {
            println!("warning: {w}");
        }
    }
    for w in cfg.warnings() {
        println!("warning: {w}");
    }
    println!("{}: ok", file.display());
    Ok(())
}

/// The files the configuration names are there and readable ([`Config::check_files`]), and the
/// RADIUS secret files belong to root or to the user gate64 runs as.
fn check_files(cfg: &Config) -> Result<()> {
    cfg.check_files()?;
    if !cfg.accounting.radius.is_empty() {
        cfg.check_secret_file_owners(&privilege::daemon_uids(&cfg.server)?)?;
    }
    Ok(())
}

/// Reads and parses every file `cfg` names that the daemon loads when it starts, with the
/// functions the daemon loads them with, so that `check-config` refuses what `serve` would:
/// the files' presence and owners ([`check_files`]), the IP-HTTPS certificate, key, client CA
/// and CRLs (as the listener builds its TLS configuration), the IKE certificate, key, CAs and
/// CRLs with `ipsec.identity` checked against the certificate (as the responder takes them),
/// and the RADIUS secrets. Returns the IKE credentials, `None` while IPsec is not configured.
fn read_files(cfg: &Config) -> Result<Option<crate::ike::Reloaded>> {
    check_files(cfg)?;
    if crate::settings::iphttps_settings(cfg).is_some() {
        crate::crl_files::iphttps_tls(cfg)?;
    }
    let ike = crate::ike::Reloaded::read(cfg)?;
    if cfg.accounting.enabled() {
        crate::accounting::radius_servers(cfg)?;
        crate::dae::clients(cfg)?;
    }
    crate::accounting::eap_radius_servers(cfg)?;
    Ok(ike)
}

/// How long SIGTERM (or SIGINT) waits for the IP-HTTPS links to close and the workers to stop
/// before the process exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The filter of the running log subscriber, replaceable by a reload.
struct LogControl {
    handle: reload::Handle<EnvFilter, Registry>,
    /// `RUST_LOG` set at start: it wins over `log.level`, then and on every reload.
    from_env: bool,
}

impl LogControl {
    /// The filter `cfg` asks for; `None` while `RUST_LOG` rules.
    fn filter_for(&self, cfg: &Config) -> Result<Option<EnvFilter>> {
        if self.from_env {
            return Ok(None);
        }
        level_filter(&cfg.log.level).map(Some)
    }

    fn apply(&self, filter: EnvFilter) -> Result<()> {
        self.handle
            .reload(filter)
            .context("replacing the log filter")
    }
}

fn level_filter(level: &str) -> Result<EnvFilter> {
    EnvFilter::try_new(level)
        .with_context(|| format!("`log.level` = {level:?}: not a valid filter"))
}

fn init_logging(cfg: &Config) -> Result<LogControl> {
    let (filter, from_env) = match EnvFilter::try_from_default_env() {
        Ok(f) => (f, true),
        Err(_) => (level_filter(&cfg.log.level)?, false),
    };
    let (filter, handle) = reload::Layer::new(filter);
    let text = (cfg.log.format == LogFormat::Text)
        .then(|| tracing_subscriber::fmt::layer().with_writer(std::io::stderr));
    let json = (cfg.log.format == LogFormat::Json).then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .try_init()
        .context("starting the logger")?;
    Ok(LogControl { handle, from_env })
}

/// A panic in a worker thread leaves its share of the clients (its SO_REUSEPORT socket, its
/// TUN queue, its relay timers; a DNS64 UDP thread's share of the queries; a GRE worker's
/// tunnels and TUN queues) without service while the others run on, which is worse than
/// a restart: the panic is logged, then the process aborts and the service manager restarts
/// it (`Restart=on-failure` in the systemd unit). Panics elsewhere (a connection task) stay
/// with their task.
fn abort_on_worker_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        tracing::error!(thread = name, panic = %info, "panic");
        default(info);
        if is_worker_thread(name) {
            tracing::error!(
                thread = name,
                "a worker thread panicked: aborting so that the service manager restarts gate64"
            );
            std::process::abort();
        }
    }));
}

/// The threads that own a share of the traffic: the UDP workers `gate64-w<N>`
/// (`gate64_io::Workers::spawn`), the DNS64 UDP threads `gate64-dns<N>` and the GRE workers
/// `gre-<N>`.
fn is_worker_thread(name: &str) -> bool {
    ["gate64-w", "gate64-dns", "gre-"].iter().any(|prefix| {
        name.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// SIGHUP: reads the file again and applies it, or refuses it as a whole (logged, counted);
/// the daemon keeps running either way.
fn reload(file: &Path, current: &mut Config, d: &daemon::Daemon, log: &LogControl) {
    info!(file = %file.display(), "SIGHUP: reloading the configuration");
    match try_reload(file, current, d, log) {
        Ok(changed) => {
            d.exporter.count_reload(true);
            info!(changed = ?changed, "configuration reloaded");
        }
        Err(e) => {
            d.reopen_binding_log(current);
            d.exporter.count_reload(false);
            tracing::error!(
                "configuration reload refused: {e:#}; still running on the previous configuration"
            );
        }
    }
}

/// The live keys that changed, once applied.
fn try_reload(
    file: &Path,
    current: &mut Config,
    d: &daemon::Daemon,
    log: &LogControl,
) -> Result<Vec<String>> {
    let new = Config::load(file)?;
    check_files(&new)?;
    let restart = current.restart_only_changes(&new);
    if !restart.is_empty() {
        anyhow::bail!(
            "these keys need a restart (see docs/config.md, \"Reloading\"): {}",
            restart.join(", ")
        );
    }
    let filter = log.filter_for(&new)?;
    d.reload(&new)?;
    if let Some(filter) = filter {
        log.apply(filter)?;
    }
    for w in new.warnings() {
        warn!("{w}");
    }
    let changed = current.changed_keys(&new);
    *current = new;
    Ok(changed)
}

/// `gate64 serve`: runs the daemon from `file` until SIGTERM or SIGINT.
pub fn serve(file: &Path) -> Result<()> {
    let cfg = Config::load(file)?;
    check_files(&cfg)?;
    let log = init_logging(&cfg)?;
    abort_on_worker_panic();
    for w in cfg.warnings() {
        warn!("{w}");
    }
    if let Some(w) = crate::fd_limit::raise(&cfg) {
        warn!("{w}");
    }
    let identity = privilege::identity(&cfg.server)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        // TLS connections (IP-HTTPS) and the control plane run here (`server.tls_threads`);
        // the UDP workers are their own threads.
        .worker_threads(cfg.effective_tls_threads())
        .thread_name("gate64-ctl")
        .enable_all()
        .build()
        .context("starting the control runtime")?;
    let outcome = rt.block_on(run(file, cfg, identity, &log));
    // Whatever `shutdown` gave up on must not hold the exit.
    rt.shutdown_timeout(Duration::from_secs(1));
    outcome
}

async fn run(
    file: &Path,
    cfg: Config,
    identity: Option<privilege::Identity>,
    log: &LogControl,
) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    // First: until a handler exists, SIGHUP ends the process.
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    // SIGUSR1: the keepalived notify script on MASTER, the HA takeover.
    let mut usr1 = signal(SignalKind::user_defined1()).context("installing the SIGUSR1 handler")?;
    let d = daemon::Daemon::start(&cfg, None)?;
    d.start_open_corpnet_reminder(&cfg);
    d.start_ike(&cfg)?;
    d.start_control(&cfg);
    d.start_dae(&cfg)?;
    if let Some(addr) = d.start_iphttps(&cfg).await? {
        info!(listen = %addr, "IP-HTTPS up");
    }
    let dns64 = d.start_dns64(&cfg).await?;
    if !dns64.is_empty() {
        info!(listen = ?dns64, upstream = ?cfg.dns64.upstream, "DNS64 up");
    }
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    if let Some(listen) = cfg.metrics.listen {
        let status = crate::status_page::start(d.status_sources(), &cfg);
        let hosts = cfg.metrics.allowed_hosts.clone();
        daemon::start_metrics(listen, d.exporter.clone(), Some(status), hosts, async {
            let _ = rx.await;
        })
        .await?;
    }
    // Everything privileged (TUN, routes, sockets, listeners) is done by now.
    privilege::drop_after_start(identity)?.log();
    info!(version = env!("CARGO_PKG_VERSION"), "gate64 serving");
    let mut current = cfg;
    let mut check = tokio::time::interval(Duration::from_secs(1));
    let outcome = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break Ok(()),
            _ = term.recv() => break Ok(()),
            _ = hup.recv() => reload(file, &mut current, &d, log),
            _ = usr1.recv() => {
                info!("SIGUSR1: HA takeover");
                d.ha_promote();
            }
            _ = check.tick() => if !d.workers.all_running() {
                break Err(anyhow::anyhow!("a worker stopped unexpectedly"));
            },
        }
    };
    info!(grace = ?SHUTDOWN_GRACE, "shutting down");
    let _ = tx.send(());
    let stopped = d.shutdown(SHUTDOWN_GRACE).await;
    if stopped.is_ok() {
        info!("stopped");
    }
    outcome.and(stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set for the child process of [`a_panicking_worker_aborts_the_process`].
    const PANIC_CHILD_ENV: &str = "GATE64_PANIC_CHILD";

    /// The hook runs in a child process (it aborts): a panic in a connection-like thread
    /// leaves it running, a panic in `gate64-w0` kills it with SIGABRT.
    #[test]
    fn a_panicking_worker_aborts_the_process() {
        use std::os::unix::process::ExitStatusExt;
        let exe = std::env::current_exe().expect("the test binary exists");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "serve::tests::panic_child",
                "--include-ignored",
                "--nocapture",
            ])
            .env(PANIC_CHILD_ENV, "1")
            .output()
            .expect("running the test binary");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "{:?}: {text}",
            out.status
        );
        assert!(text.contains("other thread survived"), "{text}");
        assert!(text.contains("panic in the worker"), "{text}");
    }

    #[test]
    #[ignore = "run in a child process by a_panicking_worker_aborts_the_process"]
    fn panic_child() {
        if std::env::var_os(PANIC_CHILD_ENV).is_none() {
            return;
        }
        abort_on_worker_panic();
        let other = std::thread::Builder::new()
            .name("gate64-ctl".into())
            .spawn(|| panic!("panic in a control thread"))
            .expect("spawn");
        assert!(other.join().is_err());
        println!("other thread survived");
        let worker = std::thread::Builder::new()
            .name("gate64-w0".into())
            .spawn(|| panic!("panic in the worker"))
            .expect("spawn");
        let _ = worker.join();
        println!("still alive after a worker panic");
        std::process::exit(0);
    }

    #[test]
    fn only_worker_threads_abort_the_process() {
        for name in ["gate64-w0", "gate64-w15", "gate64-dns1", "gre-0"] {
            assert!(is_worker_thread(name), "{name}");
        }
        for name in [
            "gate64-ctl",
            "gate64-bindlog",
            "gate64-w",
            "gate64-wx",
            "gate64-dns",
            "gre-x",
            "main",
        ] {
            assert!(!is_worker_thread(name), "{name}");
        }
    }
}
