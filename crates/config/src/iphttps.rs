//! `[iphttps]`: the IP-HTTPS server ([MS-IPHTTPS]): listener, URI path, certificate files,
//! client prefix, idle timeout, router advertisements and the send queue.

use std::net::SocketAddr;
use std::path::PathBuf;

use ipnet::Ipv6Net;
use serde::Deserialize;

use crate::corpnet::{overlaps, special_ipv6};
use crate::error::{check_readable_file, invalid, missing, quote};
use crate::teredo::teredo_prefix;
use crate::{Config, ConfigError, defaults};

/// `[iphttps]`: the IP-HTTPS server ([MS-IPHTTPS]): clients send IPv6 packets inside one
/// long HTTPS POST and receive them in its endless response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iphttps {
    /// Whether gate64 serves IP-HTTPS at all.
    pub enabled: bool,
    /// TCP address and port of the HTTPS listener.
    pub listen: SocketAddr,
    /// The URI path clients POST to: starts with `/`, printable ASCII without spaces, at most
    /// 256 bytes.
    pub path: String,
    /// PEM file with the server certificate chain (leaf first). Required while enabled.
    pub certificate: Option<PathBuf>,
    /// PEM file with the server certificate's private key. Required while enabled.
    pub private_key: Option<PathBuf>,
    /// PEM CA bundle. When set, every client must present a certificate signed by one of these
    /// CAs (the DirectAccess "Certificates" authentication mode); when `None`, clients are not
    /// authenticated at the TLS layer.
    pub client_ca: Option<PathBuf>,
    /// CRL files (PEM or DER) whose revoked client certificates fail the TLS handshake;
    /// used only with `client_ca`. A certificate whose issuer has no CRL here is not checked.
    pub client_crls: Vec<PathBuf>,
    /// Pool from which each client gets its own /64 (prefix length 1..=64). Required while
    /// enabled.
    pub prefix: Option<Ipv6Net>,
    /// Seconds without traffic after which a connection is closed; 0 = never.
    pub idle_timeout_secs: u64,
    /// Seconds between unsolicited router advertisements on each connection.
    pub ra_interval_secs: u64,
    /// Bound of each connection's send queue (towards the client), in bytes.
    pub send_queue_bytes: usize,
    /// Bytes all send queues together may hold (one budget for every connection).
    pub queue_budget_bytes: usize,
    /// Seconds a write towards the client may make no progress before the connection is
    /// closed (also its TCP_USER_TIMEOUT).
    pub write_timeout_secs: u64,
    /// Seconds from TCP accept until the first byte of the TLS ClientHello.
    pub client_hello_timeout_secs: u64,
    /// Connections from one source (IPv4 /32, IPv6 /64) between accept and link-up at once.
    pub max_handshakes_per_source: usize,
    /// Connections from one network (IPv4 /24, IPv6 /48) between accept and link-up at once.
    pub max_handshakes_per_network: usize,
    /// Connections from one source (IPv4 /32, IPv6 /64) at once.
    pub max_connections_per_source: usize,
}

/// IP-HTTPS disabled, every key at its default (no files, no prefix).
impl Default for Iphttps {
    fn default() -> Self {
        Self {
            enabled: false,
            listen: defaults::IPHTTPS_LISTEN,
            path: defaults::IPHTTPS_PATH.to_owned(),
            certificate: None,
            private_key: None,
            client_ca: None,
            client_crls: Vec::new(),
            prefix: None,
            idle_timeout_secs: defaults::IPHTTPS_IDLE_TIMEOUT_SECS,
            ra_interval_secs: defaults::IPHTTPS_RA_INTERVAL_SECS,
            send_queue_bytes: defaults::IPHTTPS_SEND_QUEUE_BYTES,
            queue_budget_bytes: defaults::IPHTTPS_QUEUE_BUDGET_BYTES,
            write_timeout_secs: defaults::IPHTTPS_WRITE_TIMEOUT_SECS,
            client_hello_timeout_secs: defaults::IPHTTPS_CLIENT_HELLO_TIMEOUT_SECS,
            max_handshakes_per_source: defaults::IPHTTPS_MAX_HANDSHAKES_PER_SOURCE,
            max_handshakes_per_network: defaults::IPHTTPS_MAX_HANDSHAKES_PER_NETWORK,
            max_connections_per_source: defaults::IPHTTPS_MAX_CONNECTIONS_PER_SOURCE,
        }
    }
}

/// Upper bound of `iphttps.path`, in bytes.
const MAX_IPHTTPS_PATH_LEN: usize = 256;

/// Smallest non-zero `iphttps.idle_timeout_secs`.
const MIN_IPHTTPS_IDLE_TIMEOUT_SECS: u64 = 60;

/// Allowed `iphttps.ra_interval_secs`.
const IPHTTPS_RA_INTERVAL_RANGE: std::ops::RangeInclusive<u64> = 10..=86_400;

/// Allowed `iphttps.send_queue_bytes`.
const IPHTTPS_SEND_QUEUE_RANGE: std::ops::RangeInclusive<usize> = 16_384..=16_777_216;

/// Allowed `iphttps.queue_budget_bytes` (1 MiB ..= 64 GiB).
const IPHTTPS_QUEUE_BUDGET_RANGE: std::ops::RangeInclusive<usize> = 1 << 20..=1 << 36;

/// Allowed `iphttps.write_timeout_secs`.
const IPHTTPS_WRITE_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 5..=600;

/// Allowed `iphttps.client_hello_timeout_secs`.
const IPHTTPS_CLIENT_HELLO_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=60;

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIphttps {
    enabled: Option<bool>,
    listen: Option<SocketAddr>,
    path: Option<String>,
    certificate: Option<PathBuf>,
    private_key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    client_crls: Option<Vec<PathBuf>>,
    prefix: Option<Ipv6Net>,
    idle_timeout_secs: Option<u64>,
    ra_interval_secs: Option<u64>,
    send_queue_bytes: Option<usize>,
    queue_budget_bytes: Option<usize>,
    write_timeout_secs: Option<u64>,
    client_hello_timeout_secs: Option<u64>,
    max_handshakes_per_source: Option<usize>,
    max_handshakes_per_network: Option<usize>,
    max_connections_per_source: Option<usize>,
}

impl RawIphttps {
    pub(crate) fn build(self) -> Iphttps {
        Iphttps {
            enabled: self.enabled.unwrap_or(false),
            listen: self.listen.unwrap_or(defaults::IPHTTPS_LISTEN),
            path: self
                .path
                .unwrap_or_else(|| defaults::IPHTTPS_PATH.to_owned()),
            certificate: self.certificate,
            private_key: self.private_key,
            client_ca: self.client_ca,
            client_crls: self.client_crls.unwrap_or_default(),
            prefix: self.prefix,
            idle_timeout_secs: self
                .idle_timeout_secs
                .unwrap_or(defaults::IPHTTPS_IDLE_TIMEOUT_SECS),
            ra_interval_secs: self
                .ra_interval_secs
                .unwrap_or(defaults::IPHTTPS_RA_INTERVAL_SECS),
            send_queue_bytes: self
                .send_queue_bytes
                .unwrap_or(defaults::IPHTTPS_SEND_QUEUE_BYTES),
            queue_budget_bytes: self
                .queue_budget_bytes
                .unwrap_or(defaults::IPHTTPS_QUEUE_BUDGET_BYTES),
            write_timeout_secs: self
                .write_timeout_secs
                .unwrap_or(defaults::IPHTTPS_WRITE_TIMEOUT_SECS),
            client_hello_timeout_secs: self
                .client_hello_timeout_secs
                .unwrap_or(defaults::IPHTTPS_CLIENT_HELLO_TIMEOUT_SECS),
            max_handshakes_per_source: self
                .max_handshakes_per_source
                .unwrap_or(defaults::IPHTTPS_MAX_HANDSHAKES_PER_SOURCE),
            max_handshakes_per_network: self
                .max_handshakes_per_network
                .unwrap_or(defaults::IPHTTPS_MAX_HANDSHAKES_PER_NETWORK),
            max_connections_per_source: self
                .max_connections_per_source
                .unwrap_or(defaults::IPHTTPS_MAX_CONNECTIONS_PER_SOURCE),
        }
    }
}

impl Config {
    /// Checks that the files the configuration names exist and are readable regular files:
    /// `ipsec.certificate`, `ipsec.private_key` and `ipsec.ca` while IPsec is configured;
    /// `iphttps.certificate`, `iphttps.private_key`, `iphttps.client_ca` and every
    /// `iphttps.client_crls` entry, while IP-HTTPS is
    /// enabled. Whether they hold valid PEM is for the daemon to find out when it loads them.
    /// [`Config::validate`] does not call this (so a file can be checked on another machine);
    /// `gate64 check-config` and `gate64 serve` do. The error ([`ErrorKind::Io`](crate::ErrorKind::Io)) names the key
    /// and the path.
    pub fn check_files(&self) -> Result<(), ConfigError> {
        self.check_ipsec_files()?;
        self.check_accounting_files()?;
        let h = &self.iphttps;
        if !h.enabled {
            return Ok(());
        }
        for (key, path) in [
            ("iphttps.certificate", &h.certificate),
            ("iphttps.private_key", &h.private_key),
            ("iphttps.client_ca", &h.client_ca),
        ] {
            if let Some(path) = path {
                check_readable_file(key, path)?;
            }
        }
        for path in &h.client_crls {
            check_readable_file("iphttps.client_crls", path)?;
        }
        Ok(())
    }

    pub(crate) fn validate_iphttps(&self) -> Result<(), ConfigError> {
        let h = &self.iphttps;
        if h.enabled {
            if h.certificate.is_none() {
                return Err(missing(
                    "iphttps.certificate",
                    "give the PEM file with the server certificate chain, e.g. \
                     \"/etc/gate64/iphttps.crt\" (or set iphttps.enabled = false)",
                ));
            }
            if h.private_key.is_none() {
                return Err(missing(
                    "iphttps.private_key",
                    "give the PEM file with the certificate's private key, e.g. \
                     \"/etc/gate64/iphttps.key\" (or set iphttps.enabled = false)",
                ));
            }
            if h.prefix.is_none() {
                return Err(missing(
                    "iphttps.prefix",
                    "give the IPv6 prefix from which each client gets a /64, e.g. \
                     \"2001:db8:1::/48\" (or set iphttps.enabled = false)",
                ));
            }
        }
        if let Some(why) = bad_uri_path(&h.path) {
            return Err(invalid("iphttps.path", quote(&h.path), why));
        }
        for (key, path) in [
            ("iphttps.certificate", &h.certificate),
            ("iphttps.private_key", &h.private_key),
            ("iphttps.client_ca", &h.client_ca),
        ] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(invalid(
                    key,
                    "\"\"",
                    "must not be empty; give the path of a PEM file (or leave the key out)",
                ));
            }
        }
        if !h.client_crls.is_empty() && h.client_ca.is_none() {
            return Err(invalid(
                "iphttps.client_crls",
                format!("{:?}", h.client_crls),
                "needs iphttps.client_ca: without it no client certificate is asked for",
            ));
        }
        if h.client_crls.iter().any(|p| p.as_os_str().is_empty()) {
            return Err(invalid(
                "iphttps.client_crls",
                "\"\"",
                "must not hold an empty path; give CRL files (PEM or DER)",
            ));
        }
        if let Some(p) = &h.prefix {
            self.validate_iphttps_prefix(p)?;
        }
        let t = h.idle_timeout_secs;
        if t != 0 && t < MIN_IPHTTPS_IDLE_TIMEOUT_SECS {
            return Err(invalid(
                "iphttps.idle_timeout_secs",
                t,
                format!(
                    "must be 0 (never) or at least {MIN_IPHTTPS_IDLE_TIMEOUT_SECS} seconds; \
                     [MS-IPHTTPS] advises against short idle timeouts, since a quiet tunnel \
                     is normal"
                ),
            ));
        }
        if !IPHTTPS_RA_INTERVAL_RANGE.contains(&h.ra_interval_secs) {
            return Err(invalid(
                "iphttps.ra_interval_secs",
                h.ra_interval_secs,
                format!(
                    "must be {}..={} seconds",
                    IPHTTPS_RA_INTERVAL_RANGE.start(),
                    IPHTTPS_RA_INTERVAL_RANGE.end()
                ),
            ));
        }
        if !IPHTTPS_SEND_QUEUE_RANGE.contains(&h.send_queue_bytes) {
            return Err(invalid(
                "iphttps.send_queue_bytes",
                h.send_queue_bytes,
                format!(
                    "must be {}..={} bytes",
                    IPHTTPS_SEND_QUEUE_RANGE.start(),
                    IPHTTPS_SEND_QUEUE_RANGE.end()
                ),
            ));
        }
        self.validate_iphttps_limits()
    }

    /// The keys that bound what one client, one source and all clients together can take.
    fn validate_iphttps_limits(&self) -> Result<(), ConfigError> {
        let h = &self.iphttps;
        let b = h.queue_budget_bytes;
        if !IPHTTPS_QUEUE_BUDGET_RANGE.contains(&b) || b < h.send_queue_bytes {
            return Err(invalid(
                "iphttps.queue_budget_bytes",
                b,
                format!(
                    "must be {}..={} bytes and at least iphttps.send_queue_bytes ({})",
                    IPHTTPS_QUEUE_BUDGET_RANGE.start(),
                    IPHTTPS_QUEUE_BUDGET_RANGE.end(),
                    h.send_queue_bytes
                ),
            ));
        }
        for (key, value, range) in [
            (
                "iphttps.write_timeout_secs",
                h.write_timeout_secs,
                IPHTTPS_WRITE_TIMEOUT_RANGE,
            ),
            (
                "iphttps.client_hello_timeout_secs",
                h.client_hello_timeout_secs,
                IPHTTPS_CLIENT_HELLO_TIMEOUT_RANGE,
            ),
        ] {
            if !range.contains(&value) {
                return Err(invalid(
                    key,
                    value,
                    format!("must be {}..={} seconds", range.start(), range.end()),
                ));
            }
        }
        for (key, value) in [
            (
                "iphttps.max_handshakes_per_source",
                h.max_handshakes_per_source,
            ),
            (
                "iphttps.max_handshakes_per_network",
                h.max_handshakes_per_network,
            ),
            (
                "iphttps.max_connections_per_source",
                h.max_connections_per_source,
            ),
        ] {
            if value == 0 {
                return Err(invalid(
                    key,
                    0,
                    "must be at least 1, or no IP-HTTPS client could ever connect",
                ));
            }
        }
        // Each connection holds one /64 for its life: a smaller pool refuses clients that
        // the connection limit admits (`pool_exhausted`) and reuses freed /64s at once.
        if let (true, Some(p)) = (h.enabled, &h.prefix) {
            let pool = 1u128 << (64 - u32::from(p.prefix_len().min(64)));
            let max = self.limits.max_iphttps_connections;
            if pool < max as u128 {
                return Err(invalid(
                    "iphttps.prefix",
                    quote(&p.to_string()),
                    format!(
                        "holds {pool} /64s, fewer than limits.max_iphttps_connections ({max}); \
                         give a shorter prefix or lower the limit"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_iphttps_prefix(&self, p: &Ipv6Net) -> Result<(), ConfigError> {
        let value = quote(&p.to_string());
        let err = |why: String| Err(invalid("iphttps.prefix", &value, why));
        if !(1..=64).contains(&p.prefix_len()) {
            return err(format!(
                "the length must be 1..=64, since each client gets a /64 from it; did you \
                 mean {}?",
                Ipv6Net::new(p.addr(), 64).map_or(*p, |n| n.trunc())
            ));
        }
        if p.addr() != p.network() {
            return err(format!("host bits are set; did you mean {}?", p.trunc()));
        }
        let teredo = teredo_prefix();
        if overlaps(p, &teredo) {
            return err(format!(
                "overlaps {teredo}, the Teredo prefix; IP-HTTPS clients need their own prefix"
            ));
        }
        if let Some(why) = special_ipv6(p.network()) {
            return err(format!("is {why}, not a routable unicast prefix"));
        }
        if let Some(c) = self.corpnet.ipv6_prefixes.iter().find(|c| overlaps(p, c)) {
            return err(format!(
                "overlaps {c} in corpnet.ipv6_prefixes; client addresses must lie outside the \
                 corporate network"
            ));
        }
        let a = self.corpnet.address6;
        if p.contains(&a) {
            return err(format!(
                "contains corpnet.address6 ({a}), gate64's own address; it would be handed to \
                 a client"
            ));
        }
        Ok(())
    }

    /// Advice about `[iphttps]`.
    pub(crate) fn iphttps_warnings(&self, out: &mut Vec<String>) {
        let h = &self.iphttps;
        if h.enabled && h.client_ca.is_none() {
            out.push(
                "iphttps.client_ca is not set: clients are not authenticated at TLS, so any \
                 host may hold a link and its /64 (within the per-source limits); only IPsec \
                 (`ipsec.require`) authenticates them, as in DirectAccess"
                    .to_owned(),
            );
        }
    }
}

/// Why `path` is not a valid `iphttps.path`, or `None`.
fn bad_uri_path(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return Some("must start with '/', e.g. \"/IPHTTPS\"".to_owned());
    }
    if path.len() > MAX_IPHTTPS_PATH_LEN {
        return Some(format!(
            "is {} bytes; at most {MAX_IPHTTPS_PATH_LEN} are allowed",
            path.len()
        ));
    }
    if let Some(c) = path.chars().find(|c| !c.is_ascii_graphic()) {
        return Some(format!(
            "character {c:?} is not allowed; the path is printable ASCII without spaces \
             (percent-encode anything else)"
        ));
    }
    None
}
