//! gate64's daemon: `serve` (the workers, TUN, IKE, IP-HTTPS, DNS64, GRE, metrics and control
//! socket started from one configuration, reloaded on SIGHUP, stopped on SIGTERM) and the
//! commands that read its configuration as it does (`check-config`, `certs`), with the
//! privilege drop. Its control socket serves the protocol of `gate64-control`, through which
//! the admin commands (`gate64-admin`) reach it. The `gate64` binary puts these behind its
//! CLI; the lab starts the same [`Daemon`] in-process.
#![forbid(unsafe_code)]

mod accounting;
pub mod certs;
mod control;
mod crl_files;
mod dae;
mod daemon;
mod disconnect;
mod fd_limit;
mod gre;
mod ha;
mod ike;
mod policy;
mod privilege;
mod serve;
mod settings;
mod status;
mod status_page;

pub use daemon::{Daemon, start_metrics};
pub use serve::{check_config, serve};
