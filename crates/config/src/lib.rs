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
//!   silently ignored; a replaced key (`corpnet.lab_allow_without_ipsec`, and the older
//!   `corpnet.allow_without_ipsec`) is refused with the key that replaced it (`ipsec.require`).
//! - The security step is on unless `[ipsec] require = false`, which draws a warning
//!   ([`Ipsec::open_to_unauthenticated_warning`]); so does `require = true` without IPsec
//!   configured (`ipsec.certificate`, `ipsec.private_key` and `ipsec.ca` together: no client
//!   can reach the corporate network), and a section with a switch
//!   (`[teredo]`, `[iphttps]`, `[nat64]`, `[dns64]`, `[metrics]`) that the file filled in but
//!   did not enable.
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

use std::path::Path;
use std::sync::Arc;

mod accounting;
mod control;
mod corpnet;
pub mod defaults;
mod dns64;
mod error;
mod gre;
mod ha;
mod iphttps;
mod ipsec;
mod lab;
mod limits;
mod log;
mod metrics;
mod nat64;
mod parse;
mod policy;
mod reload;
mod server;
mod teredo;
mod unused;

pub use accounting::{Accounting, Dae, DaeClient, RadiusServer};
pub use control::Control;
pub use corpnet::Corpnet;
pub use dns64::Dns64;
pub use error::{ConfigError, ErrorKind};
pub use gre::{Gre, GreTenant, GreTunnel, OuterPath};
pub use ha::{HA_MAX_SECRET_LEN, HA_MIN_SECRET_LEN, Ha};
pub use iphttps::Iphttps;
pub use ipsec::{
    AuthorizeCertificates as IpsecAuthorizeCertificates, ClientEku as IpsecClientEku,
    CrlExpired as IpsecCrlExpired, EspProposal, IkeProposal, Ipsec, Ocsp as IpsecOcsp, RuleTunnel,
    SecondAuth as IpsecSecondAuth, TunnelRule as IpsecTunnelRule, UniqueIds as IpsecUniqueIds,
    pool6_endpoint,
};
pub use limits::Limits;
pub use log::{Log, LogFormat};
pub use metrics::Metrics;
pub use nat64::{Filtering as Nat64Filtering, Nat64};
pub use policy::Policy;
pub use reload::LIVE_KEYS;
pub use server::Server;
pub use teredo::Teredo;

use error::syntax_error;
use parse::from_table;

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
    /// `[ipsec]`: the security step and the IKEv2/ESP responder.
    pub ipsec: Ipsec,
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
    /// `[[gre.tunnel]]`, `[[gre.tenant]]`: GRE site-to-site tunnels.
    pub gre: Gre,
    /// `[control]`: the local control socket (`gate64 status`).
    pub control: Control,
    /// `[accounting]`: the session log.
    pub accounting: Accounting,
    /// `[[policy]]`: per-user policies named by RADIUS's Filter-Id, in file order.
    pub policy: Vec<Policy>,
    /// `[ha]`: the state sync channel of an active/standby pair; `None` without the section.
    pub ha: Option<Ha>,
    /// The keys the file wrote, for the warnings about sections filled in but not enabled.
    /// Empty for a configuration built in memory. Private, so only this crate builds a
    /// `Config` literally ([`Config::lab`] is the way to start one elsewhere). Part of `==`:
    /// two files that spell out different keys compare unequal even when their values agree.
    written: unused::Written,
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

    /// Checks every semantic rule (ranges, address classes, names). [`Config::from_toml_str`]
    /// and [`Config::load`] call it; call it yourself on a configuration built in memory.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_server()?;
        self.validate_teredo()?;
        self.validate_corpnet()?;
        self.validate_iphttps()?;
        self.validate_ipsec()?;
        self.validate_nat64()?;
        self.validate_dns64()?;
        self.validate_limits()?;
        self.validate_gre()?;
        self.validate_control()?;
        self.validate_accounting()?;
        self.validate_ha()?;
        self.validate_metrics()?;
        self.validate_log()
    }

    /// Advice about a valid configuration that the operator should see but that does not stop
    /// the daemon, one sentence per entry, each naming its key.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.teredo_warnings(&mut out);
        self.iphttps_warnings(&mut out);
        self.corpnet_warnings(&mut out);
        self.ipsec_warnings(&mut out);
        self.nat64_warnings(&mut out);
        self.dns64_warnings(&mut out);
        self.limits_warnings(&mut out);
        self.metrics_warnings(&mut out);
        self.unused_section_warnings(&mut out);
        out
    }
}

#[cfg(test)]
mod tests;
