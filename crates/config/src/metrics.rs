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
