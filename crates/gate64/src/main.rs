//! The gate64 binary: CLI, configuration, logging, signals.

mod certs;
mod client;
mod connect;
mod daemon;
mod demo;
mod privilege;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gate64_config::{Config, LogFormat};
use std::path::PathBuf;
use std::process::ExitCode;
use tracing::{info, warn};

/// gate64: a remote-access concentrator (Teredo today; IP-HTTPS, IPsec, NAT64 and GRE to come).
#[derive(Parser)]
#[command(name = "gate64", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon from a TOML configuration file.
    Serve {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Validate a configuration file: exit 0 when valid, 1 with the offending key otherwise.
    CheckConfig {
        /// The configuration file.
        file: PathBuf,
    },
    /// The no-root lab: daemon on loopback, an in-process corporate network and emulated
    /// Teredo clients; prints live figures and a capacity table.
    Demo(demo::DemoArgs),
    /// Write a lab CA, an IP-HTTPS server certificate and a client certificate (PEM).
    Certs(certs::CertsArgs),
    /// Connect this host to a gate64 server as a client (IP-HTTPS or Teredo), with a TUN device.
    Connect(connect::ConnectArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { config } => serve(&config),
        Command::CheckConfig { file } => check_config(&file),
        Command::Demo(args) => demo::run(&args),
        Command::Certs(args) => certs::run(&args),
        Command::Connect(args) => connect::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gate64: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn check_config(file: &std::path::Path) -> Result<()> {
    let cfg = Config::load(file)?;
    cfg.check_files()?;
    for w in cfg.warnings() {
        println!("warning: {w}");
    }
    println!("{}: ok", file.display());
    Ok(())
}

fn init_logging(cfg: &Config) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&cfg.log.level))
        .with_context(|| format!("`log.level` = {:?}: not a valid filter", cfg.log.level))?;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cfg.log.format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
    Ok(())
}

fn serve(file: &std::path::Path) -> Result<()> {
    let cfg = Config::load(file)?;
    cfg.check_files()?;
    init_logging(&cfg)?;
    for w in cfg.warnings() {
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
    rt.block_on(async {
        let d = daemon::Daemon::start(&cfg, None)?;
        d.start_open_corpnet_reminder(&cfg);
        if let Some(addr) = d.start_iphttps(&cfg).await? {
            info!(listen = %addr, "IP-HTTPS up");
        }
        let dns64 = d.start_dns64(&cfg).await?;
        if !dns64.is_empty() {
            info!(listen = ?dns64, upstream = ?cfg.dns64.upstream, "DNS64 up");
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        if let Some(listen) = cfg.metrics.listen {
            daemon::start_metrics(listen, d.exporter.clone(), async {
                let _ = rx.await;
            })
            .await?;
        }
        // Everything privileged (TUN, routes, sockets, listeners) is done by now.
        privilege::drop_after_start(identity)?.log();
        info!(version = env!("CARGO_PKG_VERSION"), "gate64 serving");
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut check = tokio::time::interval(std::time::Duration::from_secs(1));
        let outcome = loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break Ok(()),
                _ = term.recv() => break Ok(()),
                _ = check.tick() => if !d.workers.all_running() {
                    break Err(anyhow::anyhow!("a worker stopped unexpectedly"));
                },
            }
        };
        info!("shutting down");
        let _ = tx.send(());
        let stopped = d.stop();
        outcome.and(stopped)
    })
}
