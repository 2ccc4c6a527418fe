//! `[metrics]`: the Prometheus exporter's listener.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::defaults;

/// `[metrics]`: the Prometheus exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metrics {
    /// Where the exporter listens (path `/metrics`); `None` when `metrics.enabled = false`.
    pub listen: Option<SocketAddr>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            listen: Some(defaults::METRICS_LISTEN),
        }
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    enabled: Option<bool>,
    listen: Option<SocketAddr>,
}

impl RawMetrics {
    pub(crate) fn build(self) -> Metrics {
        Metrics {
            listen: match self.enabled {
                Some(false) => None,
                _ => Some(self.listen.unwrap_or(defaults::METRICS_LISTEN)),
            },
        }
    }
}

impl crate::Config {
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
