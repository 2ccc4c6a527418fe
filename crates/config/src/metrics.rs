//! `[metrics]`: the Prometheus exporter's listener.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::defaults;
use crate::error::{ConfigError, invalid, quote};

/// `[metrics]`: the Prometheus exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metrics {
    /// Where the exporter listens (path `/metrics`); `None` when `metrics.enabled = false`.
    pub listen: Option<SocketAddr>,
    /// Host names a request's `Host` may carry besides an IP address and `localhost`, in
    /// lower case without a trailing dot (`metrics.allowed_hosts`).
    pub allowed_hosts: Vec<String>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            listen: Some(defaults::METRICS_LISTEN),
            allowed_hosts: Vec::new(),
        }
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    enabled: Option<bool>,
    listen: Option<SocketAddr>,
    allowed_hosts: Option<Vec<String>>,
}

impl RawMetrics {
    pub(crate) fn build(self) -> Metrics {
        Metrics {
            listen: match self.enabled {
                Some(false) => None,
                _ => Some(self.listen.unwrap_or(defaults::METRICS_LISTEN)),
            },
            allowed_hosts: self
                .allowed_hosts
                .unwrap_or_default()
                .into_iter()
                .map(|h| {
                    let h = h.strip_suffix('.').unwrap_or(&h);
                    h.to_ascii_lowercase()
                })
                .collect(),
        }
    }
}

/// Names `metrics.allowed_hosts` may list.
const MAX_ALLOWED_HOSTS: usize = 64;

/// What a `metrics.*` key's value looks like, for type errors.
pub(crate) fn expected_form(path: &str) -> Option<&'static str> {
    Some(match path {
        "metrics.allowed_hosts" => {
            "a list of host names in quotes, e.g. [\"gate64-mgmt.example.net\"]"
        }
        _ => return None,
    })
}

/// A DNS name as a `Host` header carries it: dot-separated labels of 1 to 63 letters, digits
/// and hyphens, not starting or ending with a hyphen, 253 bytes at most, and a last label
/// that is not all digits (so that no IPv4 address, however written, passes for a name).
fn is_host_name(name: &str) -> bool {
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    (1..=253).contains(&name.len())
        && name.split('.').all(label_ok)
        && !name
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
}

impl crate::Config {
    /// `metrics.allowed_hosts` holds names only: IP addresses and `localhost` are always
    /// answered.
    pub(crate) fn validate_metrics(&self) -> Result<(), ConfigError> {
        let hosts = &self.metrics.allowed_hosts;
        if hosts.len() > MAX_ALLOWED_HOSTS {
            return Err(invalid(
                "metrics.allowed_hosts",
                hosts.len(),
                format!("at most {MAX_ALLOWED_HOSTS} names"),
            ));
        }
        for h in hosts {
            if !is_host_name(h) {
                return Err(invalid(
                    "metrics.allowed_hosts",
                    quote(h),
                    "must be a host name (letters, digits, hyphens and dots, e.g. \
                     \"gate64-mgmt.example.net\"); IP addresses and localhost are always \
                     answered and need no entry",
                ));
            }
        }
        Ok(())
    }

    /// The exporter has no authentication, and the security step only keeps clients off the
    /// addresses gate64 knows as its own: a wildcard listener also answers on every other
    /// address of the host, including the internet side.
    pub(crate) fn metrics_warnings(&self, out: &mut Vec<String>) {
        if let Some(listen) = self.metrics.listen
            && listen.ip().is_unspecified()
        {
            out.push(format!(
                "metrics.listen = \"{listen}\" is a wildcard address: the unauthenticated \
                 exporter answers on every address of the host, the internet side included; \
                 listen on loopback or a management address"
            ));
        }
    }
}
