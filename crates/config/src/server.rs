//! `[server]`: process-wide settings: worker and TLS thread counts, and the user to run as
//! after start-up.

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
    /// The user `gate64 serve` switches to after start-up, when started as root; `None` keeps
    /// the uid it was started with (the systemd unit starts it as its own dynamic user).
    pub user: Option<String>,
    /// The group to switch to with `user`; `None` means the user's primary group.
    pub group: Option<String>,
}

impl Default for Server {
    fn default() -> Self {
        Self {
            workers: defaults::WORKERS,
            tls_threads: defaults::TLS_THREADS,
            user: None,
            group: None,
        }
    }
}

/// Upper bound of `server.workers`: a typo must not start thousands of threads.
const MAX_WORKERS: usize = 1024;
/// useradd(8) and groupadd(8) refuse longer names.
const MAX_NAME_LEN: usize = 32;

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    workers: Option<usize>,
    tls_threads: Option<usize>,
    user: Option<String>,
    group: Option<String>,
}

impl RawServer {
    pub(crate) fn build(self) -> Server {
        Server {
            workers: self.workers.unwrap_or(defaults::WORKERS),
            tls_threads: self.tls_threads.unwrap_or(defaults::TLS_THREADS),
            user: self.user,
            group: self.group,
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
        self.validate_identity()
    }

    fn validate_identity(&self) -> Result<(), ConfigError> {
        let s = &self.server;
        if let Some(user) = &s.user {
            check_name("server.user", user, "user")?;
            if user == "root" {
                return Err(invalid(
                    "server.user",
                    format!("{user:?}"),
                    "gate64 switches to this user after start-up to give up uid 0, which owns \
                     most of the file system even without capabilities; name an unprivileged \
                     user, or leave the key out to keep the uid gate64 was started with",
                ));
            }
        }
        if let Some(group) = &s.group {
            check_name("server.group", group, "group")?;
            if s.user.is_none() {
                return Err(invalid(
                    "server.group",
                    format!("{group:?}"),
                    "a group is switched to only together with a user: set `server.user` too, \
                     or leave the group out",
                ));
            }
        }
        Ok(())
    }
}

/// A user or group name as useradd(8) takes it: not empty, at most [`MAX_NAME_LEN`] bytes of
/// letters, digits, `_`, `.` and `-`, not starting with `-`, and not all digits (numeric ids
/// would be ambiguous with names).
fn check_name(key: &str, name: &str, what: &str) -> Result<(), ConfigError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    let reason = if name.is_empty() || name.len() > MAX_NAME_LEN {
        format!("a {what} name is 1 to {MAX_NAME_LEN} characters long")
    } else if !name.chars().all(allowed) || name.starts_with('-') {
        format!("a {what} name has only letters, digits, `_`, `.` and `-`, and no leading `-`")
    } else if name.chars().all(|c| c.is_ascii_digit()) {
        format!("give the {what}'s name, not a numeric id")
    } else {
        return Ok(());
    };
    Err(invalid(key, format!("{name:?}"), reason))
}
