//! gate64's configuration: the TOML schema, its defaults and its validation.
//!
//! One TOML file configures the daemon. [`Config::load`] reads it, [`Config::from_toml_str`]
//! parses it from memory; both return a [`Config`] that has passed every check in
//! [`Config::validate`], or a [`ConfigError`] whose message names the key (`teredo.port`), the
//! offending value and the reason. `docs/config.md` is the reference for administrators;
//! `config/gate64.toml` is a complete, commented example (a test parses every file under
//! `config/`).
//!
//! # Contract
//!
//! - Every section is optional and every key has a default, except the keys marked *required*
//!   (`teredo.server_addresses` while Teredo is enabled; `iphttps.certificate`,
//!   `iphttps.private_key` and `iphttps.prefix` while IP-HTTPS is enabled;
//!   `corpnet.ipv6_prefixes`, `corpnet.address6`). A missing required key is an error naming it.
//! - Unknown sections and unknown keys are errors (`deny_unknown_fields`), so a typo is never
//!   silently ignored.
//! - Nothing here panics on any input (checked by a property test), does I/O other than the one
//!   read in [`Config::load`] and the checks of [`Config::check_files`], or logs. Files that the
//!   configuration names (the IP-HTTPS certificate, key and client CA) are checked only by
//!   [`Config::check_files`], which the daemon and `check-config` call, so a file can be
//!   validated on a machine that does not hold them. Advice that should not stop the daemon
//!   (for example Teredo server addresses that are not consecutive) comes from
//!   [`Config::warnings`]; the caller decides how to show it.
//! - A [`Config`] built in memory (such as [`Config::lab`]) is not validated until the caller
//!   calls [`Config::validate`].
//!
//! RFCs whose rules are checked here: RFC 4380 §2.6 and §5.2 (Teredo server addresses, port
//! 3544, the 30 s peer timeout), RFC 8200 §5 (IPv6 minimum link MTU 1280), RFC 6890 (special
//! purpose IPv4 and IPv6 ranges). IP-HTTPS follows [MS-IPHTTPS] (the configured URI path, no
//! short idle timeouts, periodic router advertisements).
#![forbid(unsafe_code)]

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ipnet::{Ipv4Net, Ipv6Net};
use serde::Deserialize;
use serde::de::DeserializeOwned;

mod dns64;
mod nat64;
pub use dns64::Dns64;
pub use nat64::{Filtering as Nat64Filtering, Nat64};

/// Default values of the optional keys, as documented in `docs/config.md`.
pub mod defaults {
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

    /// `server.workers`: 0 means one worker per CPU core.
    pub const WORKERS: usize = 0;
    /// `server.tls_threads`: 0 means half the CPU cores, at least one.
    pub const TLS_THREADS: usize = 0;
    /// `teredo.port`: the Teredo UDP port (RFC 4380 §2.6 `Teredo_UDP_port`).
    pub const TEREDO_PORT: u16 = 3544;
    /// `corpnet.tun`: the name of the TUN interface towards the corporate network.
    pub const TUN: &str = "gate64";
    /// `corpnet.mtu`, in bytes: the IPv6 minimum link MTU (RFC 8200 §5).
    pub const MTU: u16 = 1280;
    /// `metrics.listen`: the Prometheus exporter's address (loopback only).
    pub const METRICS_LISTEN: SocketAddr =
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9164));
    /// `limits.rs_per_source_per_sec`: router solicitations accepted per source per second.
    pub const RS_PER_SOURCE_PER_SEC: u32 = 20;
    /// `limits.rs_burst`, when `rs_per_source_per_sec` is not set either. Otherwise the default
    /// burst is twice the configured rate.
    pub const RS_BURST: u32 = 40;
    /// `limits.max_teredo_peers`: entries in the Teredo relay's peer table.
    pub const MAX_TEREDO_PEERS: usize = 1_000_000;
    /// `limits.relay_queue_packets`: packets queued per peer while the relay bubbles it.
    pub const RELAY_QUEUE_PACKETS: usize = 8;
    /// `limits.peer_idle_timeout_secs`: RFC 4380 §5.2.4 keeps a peer 30 s after the last
    /// packet.
    pub const PEER_IDLE_TIMEOUT_SECS: u64 = 30;
    /// `limits.max_tls_handshakes`: TLS handshakes in progress at the same time.
    pub const MAX_TLS_HANDSHAKES: usize = 1024;
    /// `limits.max_iphttps_connections`: established IP-HTTPS connections.
    pub const MAX_IPHTTPS_CONNECTIONS: usize = 100_000;
    /// `limits.tls_handshake_timeout_secs`: time allowed from TCP accept to the end of the TLS
    /// handshake.
    pub const TLS_HANDSHAKE_TIMEOUT_SECS: u64 = 10;
    /// `iphttps.listen`: the HTTPS port on every IPv4 address.
    pub const IPHTTPS_LISTEN: SocketAddr =
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 443));
    /// `iphttps.path`: the URI path of the IP-HTTPS URL that Windows DirectAccess configures
    /// (`https://<name>:443/IPHTTPS`).
    pub const IPHTTPS_PATH: &str = "/IPHTTPS";
    /// `iphttps.idle_timeout_secs`: [MS-IPHTTPS] advises against short idle timeouts, since
    /// a quiet tunnel is normal.
    pub const IPHTTPS_IDLE_TIMEOUT_SECS: u64 = 900;
    /// `iphttps.ra_interval_secs`: seconds between unsolicited router advertisements.
    pub const IPHTTPS_RA_INTERVAL_SECS: u64 = 300;
    /// `iphttps.send_queue_bytes`: most bytes queued per connection towards the client (less
    /// while the connection drains slowly: about 10 ms of its drain rate).
    pub const IPHTTPS_SEND_QUEUE_BYTES: usize = 4 * 1024 * 1024;
    /// `log.level`.
    pub const LOG_LEVEL: &str = "info";
}

/// The whole configuration file, after parsing and validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `[server]`: process-wide settings.
    pub server: Server,
    /// `[teredo]`: the Teredo server and relay (RFC 4380).
    pub teredo: Teredo,
    /// `[iphttps]`: the IP-HTTPS server ([MS-IPHTTPS]): IPv6 over HTTPS.
    pub iphttps: Iphttps,
    /// `[corpnet]`: the corporate-network side (TUN interface, prefixes, routes).
    pub corpnet: Corpnet,
    /// `[nat64]`: stateful NAT64 towards IPv4-only corporate hosts (RFC 6146).
    pub nat64: Nat64,
    /// `[dns64]`: the DNS64 resolver (RFC 6147) clients ask through their tunnel.
    pub dns64: Dns64,
    /// `[metrics]`: the Prometheus exporter.
    pub metrics: Metrics,
    /// `[limits]`: rate limits, table sizes and queue lengths.
    pub limits: Limits,
    /// `[log]`: logging.
    pub log: Log,
}

/// `[server]`: process-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Number of worker threads; 0 means one per CPU core (see [`Config::effective_workers`]).
    pub workers: usize,
    /// Threads of the runtime that runs TLS (IP-HTTPS) and the control plane; 0 means half the
    /// CPU cores, at least one (see [`Config::effective_tls_threads`]).
    pub tls_threads: usize,
}

/// `[teredo]`: the Teredo server and relay (RFC 4380).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teredo {
    /// Whether gate64 serves Teredo at all.
    pub enabled: bool,
    /// The primary and secondary Teredo server addresses (RFC 4380 §5.2: the secondary is
    /// used for cone-NAT detection). Both `0.0.0.0` when Teredo is disabled and the key absent.
    pub server_addresses: [Ipv4Addr; 2],
    /// The UDP port served on both addresses.
    pub port: u16,
    /// Whether gate64 also relays between its Teredo clients and native IPv6 (RFC 4380 §5.4).
    pub relay: bool,
    /// Lab and demo only: accept 127.0.0.0/8 as server addresses and client sources.
    pub lab_allow_loopback: bool,
}

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
    /// Pool from which each client gets its own /64 (prefix length 1..=64). Required while
    /// enabled.
    pub prefix: Option<Ipv6Net>,
    /// Seconds without traffic after which a connection is closed; 0 = never.
    pub idle_timeout_secs: u64,
    /// Seconds between unsolicited router advertisements on each connection.
    pub ra_interval_secs: u64,
    /// Bound of each connection's send queue (towards the client), in bytes.
    pub send_queue_bytes: usize,
}

/// `[corpnet]`: the corporate-network side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corpnet {
    /// Name of the TUN interface that gate64 creates towards the corporate network.
    pub tun: String,
    /// IPv6 prefixes of the corporate network that clients reach through gate64.
    pub ipv6_prefixes: Vec<Ipv6Net>,
    /// gate64's own IPv6 address on the corporate network.
    pub address6: Ipv6Addr,
    /// MTU of the TUN interface, in bytes.
    pub mtu: u16,
    /// Whether gate64 installs the routes that send client-bound traffic into the TUN.
    pub manage_routes: bool,
    /// Let client traffic into the corporate network without IPsec. The IPsec layer is not
    /// built yet: while this is false (the secure default) clients reach only gate64 itself.
    pub allow_without_ipsec: bool,
}

/// `[metrics]`: the Prometheus exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metrics {
    /// Where the exporter listens (path `/metrics`); `None` when `metrics.enabled = false`.
    pub listen: Option<SocketAddr>,
}

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
    /// TLS handshakes in progress at the same time; more connections are not served until one
    /// finishes.
    pub max_tls_handshakes: usize,
    /// Maximum number of established IP-HTTPS connections.
    pub max_iphttps_connections: usize,
    /// Seconds from TCP accept until the TLS handshake must be complete.
    pub tls_handshake_timeout_secs: u64,
}

/// `[log]`: logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    /// A `tracing` EnvFilter directive, e.g. `info` or `info,gate64_teredo=debug`.
    pub level: String,
    /// Output format.
    pub format: LogFormat,
}

/// `log.format`: how log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable text (`"text"`), the default.
    #[default]
    Text,
    /// One JSON object per line (`"json"`).
    Json,
}

impl Default for Server {
    fn default() -> Self {
        Self {
            workers: defaults::WORKERS,
            tls_threads: defaults::TLS_THREADS,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            listen: Some(defaults::METRICS_LISTEN),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            rs_per_source_per_sec: defaults::RS_PER_SOURCE_PER_SEC,
            rs_burst: defaults::RS_BURST,
            max_teredo_peers: defaults::MAX_TEREDO_PEERS,
            relay_queue_packets: defaults::RELAY_QUEUE_PACKETS,
            peer_idle_timeout_secs: defaults::PEER_IDLE_TIMEOUT_SECS,
            max_tls_handshakes: defaults::MAX_TLS_HANDSHAKES,
            max_iphttps_connections: defaults::MAX_IPHTTPS_CONNECTIONS,
            tls_handshake_timeout_secs: defaults::TLS_HANDSHAKE_TIMEOUT_SECS,
        }
    }
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
            prefix: None,
            idle_timeout_secs: defaults::IPHTTPS_IDLE_TIMEOUT_SECS,
            ra_interval_secs: defaults::IPHTTPS_RA_INTERVAL_SECS,
            send_queue_bytes: defaults::IPHTTPS_SEND_QUEUE_BYTES,
        }
    }
}

impl Default for Log {
    fn default() -> Self {
        Self {
            level: defaults::LOG_LEVEL.to_owned(),
            format: LogFormat::Text,
        }
    }
}

impl Config {
    /// Parses and validates a configuration from TOML text.
    pub fn from_toml_str(s: &str) -> Result<Config, ConfigError> {
        let table: toml::Table = s.parse().map_err(|e| syntax_error(s, &e))?;
        let config = from_table(&table)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads, parses and validates the configuration file at `path`. Every error names the file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: Some(path.to_owned()),
            kind: ErrorKind::Io,
            key: None,
            value: None,
            reason: e.to_string(),
            source: Some(Arc::new(e)),
        })?;
        Config::from_toml_str(&text).map_err(|mut e| {
            e.file = Some(path.to_owned());
            e
        })
    }

    /// A valid configuration for the lab (`gate64 demo`), which runs without root: Teredo on
    /// the given loopback addresses and port, corporate prefix `2001:db8:c0::/48` with
    /// gate64 at `2001:db8:c0::1`, no route management, no metrics listener, and client
    /// traffic allowed without IPsec. IP-HTTPS is disabled; the demo sets `iphttps` to
    /// [`Config::lab_iphttps`] when it wants it. Not validated: a `port` of 0 fails
    /// [`Config::validate`].
    pub fn lab(teredo_primary: Ipv4Addr, teredo_secondary: Ipv4Addr, port: u16) -> Config {
        Config {
            server: Server::default(),
            teredo: Teredo {
                enabled: true,
                server_addresses: [teredo_primary, teredo_secondary],
                port,
                relay: true,
                lab_allow_loopback: true,
            },
            iphttps: Iphttps::default(),
            corpnet: Corpnet {
                tun: defaults::TUN.to_owned(),
                ipv6_prefixes: vec![
                    Ipv6Net::new(Ipv6Addr::new(0x2001, 0xdb8, 0xc0, 0, 0, 0, 0, 0), 48)
                        .expect("48 is a valid IPv6 prefix length"),
                ],
                address6: Ipv6Addr::new(0x2001, 0xdb8, 0xc0, 0, 0, 0, 0, 1),
                mtu: defaults::MTU,
                manage_routes: false,
                allow_without_ipsec: true,
            },
            nat64: Nat64::default(),
            dns64: Dns64::default(),
            metrics: Metrics { listen: None },
            limits: Limits::default(),
            log: Log::default(),
        }
    }

    /// An enabled `[iphttps]` section for the lab: the given listener and PEM files, client
    /// prefix `2001:db8:c1::/48` (next to [`Config::lab`]'s corporate `2001:db8:c0::/48`), no
    /// client CA, every other key at its default.
    pub fn lab_iphttps(listen: SocketAddr, certificate: PathBuf, private_key: PathBuf) -> Iphttps {
        Iphttps {
            enabled: true,
            listen,
            certificate: Some(certificate),
            private_key: Some(private_key),
            prefix: Some(
                Ipv6Net::new(Ipv6Addr::new(0x2001, 0xdb8, 0xc1, 0, 0, 0, 0, 0), 48)
                    .expect("48 is a valid IPv6 prefix length"),
            ),
            ..Iphttps::default()
        }
    }

    /// Checks every semantic rule (ranges, address classes, names). [`Config::from_toml_str`]
    /// and [`Config::load`] call it; call it yourself on a configuration built in memory.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_server()?;
        self.validate_teredo()?;
        self.validate_corpnet()?;
        self.validate_iphttps()?;
        self.validate_nat64()?;
        self.validate_dns64()?;
        self.validate_limits()?;
        self.validate_log()
    }

    /// Advice about a valid configuration that the operator should see but that does not stop
    /// the daemon, one sentence per entry, each naming its key.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let t = &self.teredo;
        if t.enabled {
            let [primary, secondary] = t.server_addresses;
            if u32::from(primary).checked_add(1) != Some(u32::from(secondary)) {
                out.push(format!(
                    "teredo.server_addresses: the secondary address {secondary} does not follow \
                     the primary {primary}; Windows clients derive the secondary as primary + 1, \
                     so their qualification may fail"
                ));
            }
            if t.port != defaults::TEREDO_PORT {
                out.push(format!(
                    "teredo.port = {}: Teredo clients use port {} (RFC 4380 §2.6) unless \
                     reconfigured one by one",
                    t.port,
                    defaults::TEREDO_PORT
                ));
            }
            if t.lab_allow_loopback {
                out.push(
                    "teredo.lab_allow_loopback = true: loopback Teredo addresses are accepted; \
                     lab and demo use only"
                        .to_owned(),
                );
            }
        } else if !self.iphttps.enabled {
            out.push(
                "teredo.enabled = false: no client transport is enabled (iphttps.enabled is \
                 false too), so no client can connect"
                    .to_owned(),
            );
        }
        let h = &self.iphttps;
        if h.enabled && h.client_ca.is_none() {
            out.push(
                "iphttps.client_ca is not set: clients are not authenticated at TLS; \
                 DirectAccess relies on IPsec for that, which is not built yet"
                    .to_owned(),
            );
        }
        let c = &self.corpnet;
        if c.allow_without_ipsec {
            out.push(
                "corpnet.allow_without_ipsec = true: client traffic enters the corporate \
                 network WITHOUT IPsec; use this only in a lab or until the IPsec layer lands"
                    .to_owned(),
            );
        }
        if !c.ipv6_prefixes.iter().any(|p| p.contains(&c.address6)) {
            out.push(format!(
                "corpnet.address6 = {}: the address is outside every corpnet.ipv6_prefixes \
                 entry; make sure the corporate network routes it to gate64",
                quote(&c.address6.to_string())
            ));
        }
        for (i, a) in c.ipv6_prefixes.iter().enumerate() {
            for b in &c.ipv6_prefixes[i + 1..] {
                if overlaps(a, b) {
                    out.push(format!(
                        "corpnet.ipv6_prefixes: {a} and {b} overlap; list each range once"
                    ));
                }
            }
        }
        self.nat64_warnings(&mut out);
        self.dns64_warnings(&mut out);
        if self.limits.peer_idle_timeout_secs < defaults::PEER_IDLE_TIMEOUT_SECS {
            out.push(format!(
                "limits.peer_idle_timeout_secs = {}: shorter than the {} s of RFC 4380 §5.2.4; \
                 peers behind NATs may have to bubble again",
                self.limits.peer_idle_timeout_secs,
                defaults::PEER_IDLE_TIMEOUT_SECS
            ));
        }
        out
    }

    /// Checks that the files the configuration names exist and are readable regular files:
    /// `iphttps.certificate`, `iphttps.private_key` and `iphttps.client_ca`, while IP-HTTPS is
    /// enabled. Whether they hold valid PEM is for the daemon to find out when it loads them.
    /// [`Config::validate`] does not call this (so a file can be checked on another machine);
    /// `gate64 check-config` and `gate64 serve` do. The error ([`ErrorKind::Io`]) names the key
    /// and the path.
    pub fn check_files(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

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

    /// The primary Teredo server address (`teredo.server_addresses[0]`).
    pub fn teredo_primary(&self) -> Ipv4Addr {
        self.teredo.server_addresses[0]
    }

    /// The secondary Teredo server address (`teredo.server_addresses[1]`).
    pub fn teredo_secondary(&self) -> Ipv4Addr {
        self.teredo.server_addresses[1]
    }

    fn validate_server(&self) -> Result<(), ConfigError> {
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

    fn validate_teredo(&self) -> Result<(), ConfigError> {
        let t = &self.teredo;
        if t.port == 0 {
            return Err(invalid("teredo.port", 0, "must be 1..=65535"));
        }
        if !t.enabled {
            return Ok(());
        }
        let [primary, secondary] = t.server_addresses;
        let value = format!(
            "[{}, {}]",
            quote(&primary.to_string()),
            quote(&secondary.to_string())
        );
        for (role, addr) in [("primary", primary), ("secondary", secondary)] {
            if let Some(why) = teredo_unusable(addr, t.lab_allow_loopback) {
                return Err(invalid(
                    "teredo.server_addresses",
                    &value,
                    format!(
                        "the {role} address {addr} is {why}; Teredo server addresses must be \
                         global unicast IPv4 addresses that clients on the internet can reach"
                    ),
                ));
            }
        }
        if primary == secondary {
            return Err(invalid(
                "teredo.server_addresses",
                &value,
                format!(
                    "primary and secondary are both {primary}; they must differ, because clients \
                     detect cone NATs by comparing answers from the two (RFC 4380 §5.2.1)"
                ),
            ));
        }
        Ok(())
    }

    fn validate_corpnet(&self) -> Result<(), ConfigError> {
        let c = &self.corpnet;
        if let Some(why) = bad_ifname(&c.tun) {
            return Err(invalid("corpnet.tun", quote(&c.tun), why));
        }
        if c.ipv6_prefixes.is_empty() {
            return Err(invalid(
                "corpnet.ipv6_prefixes",
                "[]",
                "list at least one prefix of the corporate network",
            ));
        }
        let teredo = teredo_prefix();
        for p in &c.ipv6_prefixes {
            let value = quote(&p.to_string());
            if p.addr() != p.network() {
                return Err(invalid(
                    "corpnet.ipv6_prefixes",
                    value,
                    format!("host bits are set; did you mean {}?", p.trunc()),
                ));
            }
            if overlaps(p, &teredo) {
                return Err(invalid(
                    "corpnet.ipv6_prefixes",
                    value,
                    format!("overlaps {teredo}, the Teredo prefix where clients live"),
                ));
            }
            if let Some(why) = special_ipv6(p.network()) {
                return Err(invalid(
                    "corpnet.ipv6_prefixes",
                    value,
                    format!("is {why}, not a routable unicast prefix"),
                ));
            }
        }
        let a = c.address6;
        let why = special_ipv6(a).or_else(|| teredo.contains(&a).then_some("a Teredo address"));
        if let Some(why) = why {
            return Err(invalid(
                "corpnet.address6",
                quote(&a.to_string()),
                format!("is {why}; it must be a global (or unique-local) unicast address"),
            ));
        }
        if c.mtu < defaults::MTU {
            return Err(invalid(
                "corpnet.mtu",
                c.mtu,
                format!(
                    "must be {}..=65535 bytes (RFC 8200 §5 minimum IPv6 link MTU)",
                    defaults::MTU
                ),
            ));
        }
        Ok(())
    }

    fn validate_iphttps(&self) -> Result<(), ConfigError> {
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

    fn validate_limits(&self) -> Result<(), ConfigError> {
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

    fn validate_log(&self) -> Result<(), ConfigError> {
        let level = &self.log.level;
        if level.is_empty() {
            return Err(invalid(
                "log.level",
                "\"\"",
                "must not be empty; use e.g. \"info\"",
            ));
        }
        if let Some(c) = level
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "_=,:.-".contains(*c)))
        {
            return Err(invalid(
                "log.level",
                quote(level),
                format!(
                    "character {:?} is not allowed; a directive is made of letters, digits \
                     and _ = , : . - (e.g. \"info,gate64_teredo=debug\")",
                    c
                ),
            ));
        }
        Ok(())
    }
}

/// Upper bound of `server.workers`: a typo must not start thousands of threads.
const MAX_WORKERS: usize = 1024;
/// Upper bound of `limits.relay_queue_packets`.
const MAX_RELAY_QUEUE_PACKETS: usize = 1024;
/// Allowed `limits.peer_idle_timeout_secs`.
const PEER_IDLE_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 10..=3600;
/// Linux `IFNAMSIZ` minus the terminating NUL.
const MAX_IFNAME_LEN: usize = 15;
/// Upper bound of `iphttps.path`, in bytes.
const MAX_IPHTTPS_PATH_LEN: usize = 256;
/// Smallest non-zero `iphttps.idle_timeout_secs`.
const MIN_IPHTTPS_IDLE_TIMEOUT_SECS: u64 = 60;
/// Allowed `iphttps.ra_interval_secs`.
const IPHTTPS_RA_INTERVAL_RANGE: std::ops::RangeInclusive<u64> = 10..=86_400;
/// Allowed `iphttps.send_queue_bytes`.
const IPHTTPS_SEND_QUEUE_RANGE: std::ops::RangeInclusive<usize> = 16_384..=16_777_216;
/// Allowed `limits.tls_handshake_timeout_secs`.
const TLS_HANDSHAKE_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=300;

/// Why a configuration was refused. `Display` names the key (or the file for I/O errors and
/// the line for TOML syntax errors), the offending value when there is one, and the reason.
#[derive(Debug, Clone)]
pub struct ConfigError {
    file: Option<PathBuf>,
    kind: ErrorKind,
    key: Option<String>,
    value: Option<String>,
    reason: String,
    source: Option<Arc<std::io::Error>>,
}

/// The class of a [`ConfigError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The configuration file, or a file it names (see [`Config::check_files`]), could not be
    /// read.
    Io,
    /// The text is not valid TOML.
    Syntax,
    /// A section or key that gate64 does not know.
    UnknownKey,
    /// A required key is absent.
    MissingKey,
    /// A value has the wrong type or is out of its type's range (e.g. a string for a port).
    WrongType,
    /// A value of the right type that breaks a rule (range, address class, name syntax).
    InvalidValue,
}

impl ConfigError {
    /// The class of error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The dotted key path, e.g. `teredo.server_addresses`; `None` for syntax errors and for
    /// I/O errors about the configuration file itself.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The offending value as written in TOML (strings quoted), when there is one.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// Why the value or file was refused.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The file the error is about, when it came from [`Config::load`].
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            if self.kind == ErrorKind::Io {
                return write!(f, "cannot read {}: {}", file.display(), self.reason);
            }
            write!(f, "{}: ", file.display())?;
        }
        let key = self.key.as_deref().unwrap_or("");
        match (self.kind, &self.value) {
            (ErrorKind::Io, _) if self.key.is_none() => {
                write!(f, "cannot read configuration: {}", self.reason)
            }
            (ErrorKind::Syntax, _) => write!(f, "invalid TOML: {}", self.reason),
            (ErrorKind::UnknownKey, _) => write!(f, "unknown key `{key}`: {}", self.reason),
            (ErrorKind::MissingKey, _) => {
                write!(f, "missing required key `{key}`: {}", self.reason)
            }
            (_, Some(value)) => write!(f, "`{key}` = {value}: {}", self.reason),
            (_, None) => write!(f, "`{key}`: {}", self.reason),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing: the file as written (every key optional), then defaults and required keys.

const SECTIONS: &[&str] = &[
    "server", "teredo", "iphttps", "corpnet", "nat64", "dns64", "metrics", "limits", "log",
];

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    workers: Option<usize>,
    tls_threads: Option<usize>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTeredo {
    enabled: Option<bool>,
    server_addresses: Option<[Ipv4Addr; 2]>,
    port: Option<u16>,
    relay: Option<bool>,
    lab_allow_loopback: Option<bool>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIphttps {
    enabled: Option<bool>,
    listen: Option<SocketAddr>,
    path: Option<String>,
    certificate: Option<PathBuf>,
    private_key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    prefix: Option<Ipv6Net>,
    idle_timeout_secs: Option<u64>,
    ra_interval_secs: Option<u64>,
    send_queue_bytes: Option<usize>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCorpnet {
    tun: Option<String>,
    ipv6_prefixes: Option<Vec<Ipv6Net>>,
    address6: Option<Ipv6Addr>,
    mtu: Option<u16>,
    manage_routes: Option<bool>,
    allow_without_ipsec: Option<bool>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    enabled: Option<bool>,
    listen: Option<SocketAddr>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    rs_per_source_per_sec: Option<u32>,
    rs_burst: Option<u32>,
    max_teredo_peers: Option<usize>,
    relay_queue_packets: Option<usize>,
    peer_idle_timeout_secs: Option<u64>,
    max_tls_handshakes: Option<usize>,
    max_iphttps_connections: Option<usize>,
    tls_handshake_timeout_secs: Option<u64>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    level: Option<String>,
    format: Option<LogFormat>,
}

fn from_table(table: &toml::Table) -> Result<Config, ConfigError> {
    if let Some(name) = table.keys().find(|k| !SECTIONS.contains(&k.as_str())) {
        return Err(ConfigError::new(
            ErrorKind::UnknownKey,
            name,
            None,
            format!(
                "expected one of the sections {} (this version of gate64 has no other)",
                SECTIONS
                    .iter()
                    .map(|s| format!("[{s}]"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let server: RawServer = section(table, "server")?;
    let teredo: RawTeredo = section(table, "teredo")?;
    let iphttps: RawIphttps = section(table, "iphttps")?;
    let corpnet: RawCorpnet = section(table, "corpnet")?;
    let nat64 = section::<nat64::RawNat64>(table, "nat64")?.build()?;
    let dns64 = section::<dns64::RawDns64>(table, "dns64")?.build()?;
    let metrics: RawMetrics = section(table, "metrics")?;
    let limits: RawLimits = section(table, "limits")?;
    let log: RawLog = section(table, "log")?;

    let enabled = teredo.enabled.unwrap_or(true);
    let server_addresses = match teredo.server_addresses {
        Some(a) => a,
        None if enabled => {
            return Err(missing(
                "teredo.server_addresses",
                "list the primary and secondary Teredo server addresses, e.g. \
                 [\"192.0.2.1\", \"192.0.2.2\"] (or set teredo.enabled = false)",
            ));
        }
        None => [Ipv4Addr::UNSPECIFIED; 2],
    };
    let ipv6_prefixes = corpnet.ipv6_prefixes.ok_or_else(|| {
        missing(
            "corpnet.ipv6_prefixes",
            "list the corporate network's IPv6 prefixes, e.g. [\"2001:db8:100::/48\"]",
        )
    })?;
    let address6 = corpnet.address6.ok_or_else(|| {
        missing(
            "corpnet.address6",
            "give gate64's IPv6 address on the corporate network, e.g. \"2001:db8:100::1\"",
        )
    })?;
    let rs_per_source_per_sec = limits
        .rs_per_source_per_sec
        .unwrap_or(defaults::RS_PER_SOURCE_PER_SEC);
    let rs_burst = limits
        .rs_burst
        .unwrap_or(match limits.rs_per_source_per_sec {
            None => defaults::RS_BURST,
            Some(rate) => rate.saturating_mul(2),
        });

    Ok(Config {
        server: Server {
            workers: server.workers.unwrap_or(defaults::WORKERS),
            tls_threads: server.tls_threads.unwrap_or(defaults::TLS_THREADS),
        },
        teredo: Teredo {
            enabled,
            server_addresses,
            port: teredo.port.unwrap_or(defaults::TEREDO_PORT),
            relay: teredo.relay.unwrap_or(true),
            lab_allow_loopback: teredo.lab_allow_loopback.unwrap_or(false),
        },
        iphttps: Iphttps {
            enabled: iphttps.enabled.unwrap_or(false),
            listen: iphttps.listen.unwrap_or(defaults::IPHTTPS_LISTEN),
            path: iphttps
                .path
                .unwrap_or_else(|| defaults::IPHTTPS_PATH.to_owned()),
            certificate: iphttps.certificate,
            private_key: iphttps.private_key,
            client_ca: iphttps.client_ca,
            prefix: iphttps.prefix,
            idle_timeout_secs: iphttps
                .idle_timeout_secs
                .unwrap_or(defaults::IPHTTPS_IDLE_TIMEOUT_SECS),
            ra_interval_secs: iphttps
                .ra_interval_secs
                .unwrap_or(defaults::IPHTTPS_RA_INTERVAL_SECS),
            send_queue_bytes: iphttps
                .send_queue_bytes
                .unwrap_or(defaults::IPHTTPS_SEND_QUEUE_BYTES),
        },
        corpnet: Corpnet {
            tun: corpnet.tun.unwrap_or_else(|| defaults::TUN.to_owned()),
            ipv6_prefixes,
            address6,
            mtu: corpnet.mtu.unwrap_or(defaults::MTU),
            manage_routes: corpnet.manage_routes.unwrap_or(true),
            allow_without_ipsec: corpnet.allow_without_ipsec.unwrap_or(false),
        },
        nat64,
        dns64,
        metrics: Metrics {
            listen: match metrics.enabled {
                Some(false) => None,
                _ => Some(metrics.listen.unwrap_or(defaults::METRICS_LISTEN)),
            },
        },
        limits: Limits {
            rs_per_source_per_sec,
            rs_burst,
            max_teredo_peers: limits
                .max_teredo_peers
                .unwrap_or(defaults::MAX_TEREDO_PEERS),
            relay_queue_packets: limits
                .relay_queue_packets
                .unwrap_or(defaults::RELAY_QUEUE_PACKETS),
            peer_idle_timeout_secs: limits
                .peer_idle_timeout_secs
                .unwrap_or(defaults::PEER_IDLE_TIMEOUT_SECS),
            max_tls_handshakes: limits
                .max_tls_handshakes
                .unwrap_or(defaults::MAX_TLS_HANDSHAKES),
            max_iphttps_connections: limits
                .max_iphttps_connections
                .unwrap_or(defaults::MAX_IPHTTPS_CONNECTIONS),
            tls_handshake_timeout_secs: limits
                .tls_handshake_timeout_secs
                .unwrap_or(defaults::TLS_HANDSHAKE_TIMEOUT_SECS),
        },
        log: Log {
            level: log.level.unwrap_or_else(|| defaults::LOG_LEVEL.to_owned()),
            format: log.format.unwrap_or_default(),
        },
    })
}

/// Deserializes section `name` of `table` (its default when absent). On failure, finds the key
/// at fault by deserializing the section one key at a time: every key is optional, so a table
/// holding only a well-formed key always succeeds.
fn section<T: DeserializeOwned + Default>(
    table: &toml::Table,
    name: &str,
) -> Result<T, ConfigError> {
    let Some(value) = table.get(name) else {
        return Ok(T::default());
    };
    let toml::Value::Table(section) = value else {
        return Err(ConfigError::new(
            ErrorKind::WrongType,
            name,
            Some(value.to_string()),
            format!("must be a table (a [{name}] section)"),
        ));
    };
    let whole_err = match T::deserialize(section.clone()) {
        Ok(t) => return Ok(t),
        Err(e) => e,
    };
    for (key, value) in section {
        let single: toml::Table = std::iter::once((key.clone(), value.clone())).collect();
        let Err(e) = T::deserialize(single) else {
            continue;
        };
        let path = format!("{name}.{key}");
        let message = e.message().trim_end();
        if message.starts_with("unknown field") {
            let expected = message
                .split_once(", expected ")
                .map_or("", |(_, rest)| rest);
            return Err(ConfigError::new(
                ErrorKind::UnknownKey,
                &path,
                None,
                format!("[{name}] has no such key; expected {expected}"),
            ));
        }
        let reason = match expected_form(&path) {
            Some(form) => format!("{message}; must be {form}"),
            None => message.to_owned(),
        };
        return Err(ConfigError::new(
            ErrorKind::WrongType,
            &path,
            Some(value.to_string()),
            reason,
        ));
    }
    // Not reached with the Raw* types (every key optional); kept so no input can panic.
    Err(ConfigError::new(
        ErrorKind::WrongType,
        name,
        None,
        whole_err.message().trim_end(),
    ))
}

/// What a key's value looks like, for type errors whose serde message alone is terse.
fn expected_form(path: &str) -> Option<&'static str> {
    Some(match path {
        "server.workers" => "a whole number, 0 = one worker per core",
        "server.tls_threads" => "a whole number, 0 = half the cores",
        "teredo.enabled"
        | "teredo.relay"
        | "teredo.lab_allow_loopback"
        | "iphttps.enabled"
        | "corpnet.manage_routes"
        | "corpnet.allow_without_ipsec"
        | "metrics.enabled" => "true or false",
        "iphttps.listen" => "an address and port in quotes, e.g. \"0.0.0.0:443\" or \"[::]:443\"",
        "iphttps.path" => "a URI path in quotes, e.g. \"/IPHTTPS\"",
        "iphttps.certificate" | "iphttps.private_key" | "iphttps.client_ca" => {
            "a file path in quotes, e.g. \"/etc/gate64/iphttps.crt\""
        }
        "iphttps.prefix" => "an IPv6 prefix in quotes, e.g. \"2001:db8:1::/48\"",
        "teredo.server_addresses" => "two IPv4 addresses, e.g. [\"192.0.2.1\", \"192.0.2.2\"]",
        "teredo.port" => "a UDP port number 1..=65535",
        "corpnet.tun" => "an interface name in quotes, e.g. \"gate64\"",
        "corpnet.ipv6_prefixes" => "a list of IPv6 prefixes, e.g. [\"2001:db8:100::/48\"]",
        "corpnet.address6" => "an IPv6 address in quotes, e.g. \"2001:db8:100::1\"",
        "corpnet.mtu" => "a number of bytes 1280..=65535",
        "metrics.listen" => {
            "an address and port in quotes, e.g. \"127.0.0.1:9164\" or \"[::1]:9164\"; \
             set metrics.enabled = false to turn the exporter off"
        }
        "limits.rs_per_source_per_sec"
        | "limits.rs_burst"
        | "limits.max_teredo_peers"
        | "limits.relay_queue_packets"
        | "limits.peer_idle_timeout_secs"
        | "limits.max_tls_handshakes"
        | "limits.max_iphttps_connections"
        | "limits.tls_handshake_timeout_secs"
        | "iphttps.idle_timeout_secs"
        | "iphttps.ra_interval_secs"
        | "iphttps.send_queue_bytes" => "a whole number",
        "log.level" => "a filter directive in quotes, e.g. \"info\"",
        "log.format" => "\"text\" or \"json\"",
        _ => return nat64::expected_form(path).or_else(|| dns64::expected_form(path)),
    })
}

fn syntax_error(input: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim_end().replace('\n', "; ");
    let reason = match e.span() {
        Some(span) => {
            let (line, column) = line_column(input, span.start);
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    };
    ConfigError {
        file: None,
        kind: ErrorKind::Syntax,
        key: None,
        value: None,
        reason,
        source: None,
    }
}

/// 1-based line and column (in characters) of byte offset `at`.
fn line_column(input: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(input.len());
    while !input.is_char_boundary(at) {
        at -= 1;
    }
    let before = &input[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

impl ConfigError {
    fn new(
        kind: ErrorKind,
        key: &str,
        value: Option<String>,
        reason: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: None,
            kind,
            key: Some(key.to_owned()),
            value,
            reason: reason.into(),
            source: None,
        }
    }
}

/// Checks that `path` (the value of `key`) is a regular file this process can open for reading.
fn check_readable_file(key: &str, path: &Path) -> Result<(), ConfigError> {
    let io_error = |reason: String, source: Option<std::io::Error>| ConfigError {
        file: None,
        kind: ErrorKind::Io,
        key: Some(key.to_owned()),
        value: Some(quote(&path.to_string_lossy())),
        reason,
        source: source.map(Arc::new),
    };
    let file = std::fs::File::open(path)
        .map_err(|e| io_error(format!("cannot read the file: {e}"), Some(e)))?;
    let meta = file
        .metadata()
        .map_err(|e| io_error(format!("cannot read the file: {e}"), Some(e)))?;
    if !meta.is_file() {
        return Err(io_error(
            "is not a regular file; give the path of a PEM file".to_owned(),
            None,
        ));
    }
    Ok(())
}

fn missing(key: &str, reason: &str) -> ConfigError {
    ConfigError::new(ErrorKind::MissingKey, key, None, reason)
}

fn invalid(key: &str, value: impl fmt::Display, reason: impl Into<String>) -> ConfigError {
    ConfigError::new(
        ErrorKind::InvalidValue,
        key,
        Some(value.to_string()),
        reason,
    )
}

/// A string as TOML writes it, quotes and escapes included.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

// ---------------------------------------------------------------------------------------------
// Address and name rules.

/// Why `addr` cannot be a Teredo server address, or `None` if it can (RFC 6890 special-purpose
/// ranges that are not reachable from the internet, plus 192.88.99.0/24, the 6to4 relay
/// anycast range of RFC 3068).
fn teredo_unusable(addr: Ipv4Addr, lab_allow_loopback: bool) -> Option<&'static str> {
    const RANGES: &[([u8; 4], u8, &str)] = &[
        ([0, 0, 0, 0], 8, "in 0.0.0.0/8 (\"this network\")"),
        ([10, 0, 0, 0], 8, "in 10.0.0.0/8 (private, RFC 1918)"),
        ([127, 0, 0, 0], 8, "in 127.0.0.0/8 (loopback)"),
        ([169, 254, 0, 0], 16, "in 169.254.0.0/16 (link-local)"),
        ([172, 16, 0, 0], 12, "in 172.16.0.0/12 (private, RFC 1918)"),
        (
            [192, 168, 0, 0],
            16,
            "in 192.168.0.0/16 (private, RFC 1918)",
        ),
        (
            [192, 88, 99, 0],
            24,
            "in 192.88.99.0/24 (6to4 relay anycast)",
        ),
        ([224, 0, 0, 0], 4, "in 224.0.0.0/4 (multicast)"),
        ([240, 0, 0, 0], 4, "in 240.0.0.0/4 (reserved or broadcast)"),
    ];
    if lab_allow_loopback && addr.is_loopback() {
        return None;
    }
    RANGES.iter().find_map(|&(net, len, why)| {
        Ipv4Net::new(Ipv4Addr::from(net), len)
            .ok()
            .filter(|n| n.contains(&addr))
            .map(|_| why)
    })
}

/// 2001::/32, the Teredo prefix (RFC 4380 §2.6).
fn teredo_prefix() -> Ipv6Net {
    Ipv6Net::new(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32)
        .expect("32 is a valid IPv6 prefix length")
}

/// Why `addr` is not a usable unicast address for the corporate side, or `None`.
fn special_ipv6(addr: Ipv6Addr) -> Option<&'static str> {
    let first = addr.segments()[0];
    if addr.is_unspecified() {
        Some("the unspecified address ::")
    } else if addr.is_loopback() {
        Some("the loopback address ::1")
    } else if addr.is_multicast() {
        Some("multicast (ff00::/8)")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local (fe80::/10)")
    } else if first & 0xffc0 == 0xfec0 {
        Some("site-local (fec0::/10, deprecated by RFC 3879)")
    } else if addr.to_ipv4_mapped().is_some() {
        Some("IPv4-mapped (::ffff:0:0/96)")
    } else {
        None
    }
}

fn overlaps(a: &Ipv6Net, b: &Ipv6Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
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

/// Why `name` is not a valid Linux interface name (`dev_valid_name` in net/core/dev.c), or
/// `None`.
fn bad_ifname(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("an interface name must not be empty".to_owned());
    }
    if name.len() > MAX_IFNAME_LEN {
        return Some(format!(
            "is {} bytes; Linux interface names are at most {MAX_IFNAME_LEN} bytes",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Some("\".\" and \"..\" are not valid interface names".to_owned());
    }
    if let Some(c) = name
        .chars()
        .find(|c| *c == '/' || *c == ':' || *c == '\0' || c.is_whitespace())
    {
        return Some(format!(
            "character {c:?} is not allowed in a Linux interface name (no '/', ':' or whitespace)"
        ));
    }
    None
}

#[cfg(test)]
mod tests;
