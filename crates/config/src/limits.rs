//! `[limits]`: rate limits, table sizes, queue lengths and timeouts.

use serde::Deserialize;

use crate::error::invalid;
use crate::{Config, ConfigError, defaults};

/// `[limits]`: rate limits, table sizes and queue lengths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Router solicitations accepted per client source (IPv4 address and port) per second.
    pub rs_per_source_per_sec: u32,
    /// Burst size of the router solicitation token bucket, in solicitations.
    pub rs_burst: u32,
    /// Maximum number of entries in the Teredo relay's peer table.
    pub max_teredo_peers: usize,
    /// Packets queued per Teredo peer while the relay waits for its bubble answer.
    pub relay_queue_packets: usize,
    /// Seconds without traffic after which a Teredo peer entry is forgotten.
    pub peer_idle_timeout_secs: u64,
    /// Teredo peer entries per IPv4 address (one per mapping).
    pub max_teredo_peers_per_ipv4: usize,
    /// Bubbles the Teredo server relays per sender IPv4 address per second.
    pub teredo_relay_per_source_per_sec: u32,
    /// Bubbles sent per second towards one IPv4 address that is not a verified peer.
    pub teredo_relay_per_destination_per_sec: u32,
    /// TLS handshakes in progress at the same time; more connections are not served until one
    /// finishes.
    pub max_tls_handshakes: usize,
    /// Maximum number of established IP-HTTPS connections.
    pub max_iphttps_connections: usize,
    /// Seconds from TCP accept until the TLS handshake must be complete.
    pub tls_handshake_timeout_secs: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            rs_per_source_per_sec: defaults::RS_PER_SOURCE_PER_SEC,
            rs_burst: defaults::RS_BURST,
            max_teredo_peers: defaults::MAX_TEREDO_PEERS,
            relay_queue_packets: defaults::RELAY_QUEUE_PACKETS,
            peer_idle_timeout_secs: defaults::PEER_IDLE_TIMEOUT_SECS,
            max_teredo_peers_per_ipv4: defaults::MAX_TEREDO_PEERS_PER_IPV4,
            teredo_relay_per_source_per_sec: defaults::TEREDO_RELAY_PER_SOURCE_PER_SEC,
            teredo_relay_per_destination_per_sec: defaults::TEREDO_RELAY_PER_DESTINATION_PER_SEC,
            max_tls_handshakes: defaults::MAX_TLS_HANDSHAKES,
            max_iphttps_connections: defaults::MAX_IPHTTPS_CONNECTIONS,
            tls_handshake_timeout_secs: defaults::TLS_HANDSHAKE_TIMEOUT_SECS,
        }
    }
}

/// Upper bound of `limits.relay_queue_packets`.
const MAX_RELAY_QUEUE_PACKETS: usize = 1024;

/// Allowed `limits.peer_idle_timeout_secs`.
const PEER_IDLE_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 10..=3600;

/// Allowed `limits.tls_handshake_timeout_secs`.
const TLS_HANDSHAKE_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=300;

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    rs_per_source_per_sec: Option<u32>,
    rs_burst: Option<u32>,
    max_teredo_peers: Option<usize>,
    relay_queue_packets: Option<usize>,
    peer_idle_timeout_secs: Option<u64>,
    max_teredo_peers_per_ipv4: Option<usize>,
    teredo_relay_per_source_per_sec: Option<u32>,
    teredo_relay_per_destination_per_sec: Option<u32>,
    max_tls_handshakes: Option<usize>,
    max_iphttps_connections: Option<usize>,
    tls_handshake_timeout_secs: Option<u64>,
}

impl RawLimits {
    pub(crate) fn build(self) -> Limits {
        let rs_per_source_per_sec = self
            .rs_per_source_per_sec
            .unwrap_or(defaults::RS_PER_SOURCE_PER_SEC);
        // The burst follows a configured rate (twice it) unless set itself.
        let rs_burst = self.rs_burst.unwrap_or(match self.rs_per_source_per_sec {
            None => defaults::RS_BURST,
            Some(rate) => rate.saturating_mul(2),
        });
        Limits {
            rs_per_source_per_sec,
            rs_burst,
            max_teredo_peers: self.max_teredo_peers.unwrap_or(defaults::MAX_TEREDO_PEERS),
            relay_queue_packets: self
                .relay_queue_packets
                .unwrap_or(defaults::RELAY_QUEUE_PACKETS),
            peer_idle_timeout_secs: self
                .peer_idle_timeout_secs
                .unwrap_or(defaults::PEER_IDLE_TIMEOUT_SECS),
            max_teredo_peers_per_ipv4: self
                .max_teredo_peers_per_ipv4
                .unwrap_or(defaults::MAX_TEREDO_PEERS_PER_IPV4),
            teredo_relay_per_source_per_sec: self
                .teredo_relay_per_source_per_sec
                .unwrap_or(defaults::TEREDO_RELAY_PER_SOURCE_PER_SEC),
            teredo_relay_per_destination_per_sec: self
                .teredo_relay_per_destination_per_sec
                .unwrap_or(defaults::TEREDO_RELAY_PER_DESTINATION_PER_SEC),
            max_tls_handshakes: self
                .max_tls_handshakes
                .unwrap_or(defaults::MAX_TLS_HANDSHAKES),
            max_iphttps_connections: self
                .max_iphttps_connections
                .unwrap_or(defaults::MAX_IPHTTPS_CONNECTIONS),
            tls_handshake_timeout_secs: self
                .tls_handshake_timeout_secs
                .unwrap_or(defaults::TLS_HANDSHAKE_TIMEOUT_SECS),
        }
    }
}

impl Config {
    pub(crate) fn validate_limits(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
        if l.rs_per_source_per_sec == 0 {
            return Err(invalid(
                "limits.rs_per_source_per_sec",
                0,
                "must be at least 1, or no client could ever qualify",
            ));
        }
        if l.rs_burst < l.rs_per_source_per_sec {
            return Err(invalid(
                "limits.rs_burst",
                l.rs_burst,
                format!(
                    "must be at least limits.rs_per_source_per_sec ({})",
                    l.rs_per_source_per_sec
                ),
            ));
        }
        if l.max_teredo_peers == 0 {
            return Err(invalid("limits.max_teredo_peers", 0, "must be at least 1"));
        }
        if !(1..=MAX_RELAY_QUEUE_PACKETS).contains(&l.relay_queue_packets) {
            return Err(invalid(
                "limits.relay_queue_packets",
                l.relay_queue_packets,
                format!("must be 1..={MAX_RELAY_QUEUE_PACKETS} packets"),
            ));
        }
        if !PEER_IDLE_TIMEOUT_RANGE.contains(&l.peer_idle_timeout_secs) {
            return Err(invalid(
                "limits.peer_idle_timeout_secs",
                l.peer_idle_timeout_secs,
                format!(
                    "must be {}..={} seconds",
                    PEER_IDLE_TIMEOUT_RANGE.start(),
                    PEER_IDLE_TIMEOUT_RANGE.end()
                ),
            ));
        }
        if l.max_teredo_peers_per_ipv4 == 0 {
            return Err(invalid(
                "limits.max_teredo_peers_per_ipv4",
                0,
                "must be at least 1, or no Teredo client could ever be relayed to",
            ));
        }
        for (key, rate) in [
            (
                "limits.teredo_relay_per_source_per_sec",
                l.teredo_relay_per_source_per_sec,
            ),
            (
                "limits.teredo_relay_per_destination_per_sec",
                l.teredo_relay_per_destination_per_sec,
            ),
        ] {
            if rate == 0 {
                return Err(invalid(
                    key,
                    0,
                    "must be at least 1, or no bubble could open a path between peers",
                ));
            }
        }
        if l.max_tls_handshakes == 0 {
            return Err(invalid(
                "limits.max_tls_handshakes",
                0,
                "must be at least 1, or no IP-HTTPS client could ever connect",
            ));
        }
        if l.max_iphttps_connections == 0 {
            return Err(invalid(
                "limits.max_iphttps_connections",
                0,
                "must be at least 1, or no IP-HTTPS client could ever connect",
            ));
        }
        if !TLS_HANDSHAKE_TIMEOUT_RANGE.contains(&l.tls_handshake_timeout_secs) {
            return Err(invalid(
                "limits.tls_handshake_timeout_secs",
                l.tls_handshake_timeout_secs,
                format!(
                    "must be {}..={} seconds",
                    TLS_HANDSHAKE_TIMEOUT_RANGE.start(),
                    TLS_HANDSHAKE_TIMEOUT_RANGE.end()
                ),
            ));
        }
        Ok(())
    }

    /// Advice about `[limits]`.
    pub(crate) fn limits_warnings(&self, out: &mut Vec<String>) {
        if self.limits.peer_idle_timeout_secs < defaults::PEER_IDLE_TIMEOUT_SECS {
            out.push(format!(
                "limits.peer_idle_timeout_secs = {}: shorter than the {} s of RFC 4380 §5.2.4; \
                 peers behind NATs may have to bubble again",
                self.limits.peer_idle_timeout_secs,
                defaults::PEER_IDLE_TIMEOUT_SECS
            ));
        }
    }
}
