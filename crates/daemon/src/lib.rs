//! gate64's daemon: `serve` (the workers, TUN, IKE, IP-HTTPS, DNS64, GRE, metrics and control
//! socket started from one configuration, reloaded on SIGHUP, stopped on SIGTERM) and the
//! admin commands beside it (`check-config`, `status`, `disconnect`, `sessions`, `certs`), with
//! the privilege drop. The `gate64` binary puts these behind its CLI; the lab starts the same
//! [`Daemon`] in-process.
#![forbid(unsafe_code)]

mod accounting;
pub mod certs;
mod crl_files;
mod daemon;
pub mod disconnect;
mod fd_limit;
mod gre;
mod ike;
mod privilege;
mod serve;
pub mod sessions;
mod settings;
mod status;
mod status_page;

pub use daemon::{Daemon, start_metrics};
pub use serve::{check_config, serve, status};
