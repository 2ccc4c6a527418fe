//! `[server]`: process-wide settings: worker and TLS thread counts.

use serde::Deserialize;

use crate::error::invalid;
use crate::{Config, ConfigError, defaults};

/// `[server]`: process-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Number of worker threads; 0 means one per CPU core (see [`Config::effective_workers`]).
    pub workers: usize,
    /// Threads of the runtime that runs TLS (IP-HTTPS) and the control plane; 0 means half the
    /// CPU cores, at least one (see [`Config::effective_tls_threads`]).
    pub tls_threads: usize,
}

impl Default for Server {
    fn default() -> Self {
        Self {
            workers: defaults::WORKERS,
            tls_threads: defaults::TLS_THREADS,
        }
    }
}

/// Upper bound of `server.workers`: a typo must not start thousands of threads.
const MAX_WORKERS: usize = 1024;

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    workers: Option<usize>,
    tls_threads: Option<usize>,
}

impl RawServer {
    pub(crate) fn build(self) -> Server {
        Server {
            workers: self.workers.unwrap_or(defaults::WORKERS),
            tls_threads: self.tls_threads.unwrap_or(defaults::TLS_THREADS),
        }
    }
}

impl Config {
    /// The number of workers to start: `server.workers`, or the number of CPUs the process may
    /// use when it is 0 (1 if that cannot be determined).
    pub fn effective_workers(&self) -> usize {
        match self.server.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// The number of TLS/control runtime threads: `server.tls_threads`, or half the CPUs the
    /// process may use (at least 1) when it is 0. The UDP workers already take one thread per
    /// core; on a small machine more TLS threads than that only add context switches (measured
    /// with bench/iphttps.sh on 2 cores: one thread carried 10–15% more than two).
    pub fn effective_tls_threads(&self) -> usize {
        match self.server.tls_threads {
            0 => (std::thread::available_parallelism().map_or(1, |n| n.get()) / 2).max(1),
            n => n,
        }
    }

    pub(crate) fn validate_server(&self) -> Result<(), ConfigError> {
        let w = self.server.workers;
        if w > MAX_WORKERS {
            return Err(invalid(
                "server.workers",
                w,
                format!("at most {MAX_WORKERS} workers (0 = one per core)"),
            ));
        }
        let t = self.server.tls_threads;
        if t > MAX_WORKERS {
            return Err(invalid(
                "server.tls_threads",
                t,
                format!("at most {MAX_WORKERS} threads (0 = half the cores)"),
            ));
        }
        Ok(())
    }
}
