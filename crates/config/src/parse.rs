//! Parsing: the file as written (every key optional, `Raw*` per section), then each
//! section's defaults and required keys (`build`), with errors that name the key at fault.

use serde::de::DeserializeOwned;

use crate::accounting::{self, RawAccounting};
use crate::control::RawControl;
use crate::corpnet::RawCorpnet;
use crate::dns64::RawDns64;
use crate::error::{ConfigError, ErrorKind};
use crate::ha::RawHa;
use crate::iphttps::RawIphttps;
use crate::ipsec::RawIpsec;
use crate::limits::RawLimits;
use crate::log::RawLog;
use crate::metrics::RawMetrics;
use crate::nat64::RawNat64;
use crate::server::RawServer;
use crate::teredo::RawTeredo;
use crate::unused::Written;
use crate::{Config, dns64, ipsec, nat64};

/// The sections a configuration file may hold.
pub(crate) const SECTIONS: &[&str] = &[
    "server",
    "teredo",
    "iphttps",
    "corpnet",
    "ipsec",
    "nat64",
    "dns64",
    "metrics",
    "limits",
    "log",
    "control",
    "gre",
    "accounting",
    "policy",
    "ha",
];

/// Keys refused under their old name: (old, new, why it changed). The error names both, so an
/// upgrade never silently drops a setting.
const RENAMED: &[(&str, &str, &str)] = &[
    (
        "corpnet.lab_allow_without_ipsec",
        "ipsec.require",
        "IPsec exists now; `lab_allow_without_ipsec = true` is `[ipsec] require = false`, which \
         lets unauthenticated clients into the corporate network (labs only); leave both out \
         in production, so the security step stays on",
    ),
    (
        "corpnet.allow_without_ipsec",
        "ipsec.require",
        "`allow_without_ipsec = true` is `[ipsec] require = false`, which lets \
         unauthenticated clients into the corporate network (labs only); leave both out in \
         production, so the security step stays on",
    ),
];

/// The configuration in `table`, before [`Config::validate`]. Every section is read (and a
/// type error reported) before any required key is looked for.
pub(crate) fn from_table(table: &toml::Table) -> Result<Config, ConfigError> {
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
    // A GRE gateway file without `[teredo]` serves no Teredo clients (the default otherwise).
    let teredo_off: toml::Table = toml::toml! { [teredo] enabled = false };
    let teredo: RawTeredo = match crate::gre::has_tunnels(table) && !table.contains_key("teredo") {
        true => section(&teredo_off, "teredo")?,
        false => teredo,
    };
    let gre = crate::gre::parse(table)?;
    let policy = crate::policy::parse(table)?;
    let iphttps: RawIphttps = section(table, "iphttps")?;
    let corpnet: RawCorpnet = section(table, "corpnet")?;
    let ipsec: RawIpsec = section(table, "ipsec")?;
    let nat64 = section::<RawNat64>(table, "nat64")?.build()?;
    let dns64 = section::<RawDns64>(table, "dns64")?.build()?;
    let metrics: RawMetrics = section(table, "metrics")?;
    let limits: RawLimits = section(table, "limits")?;
    let log: RawLog = section(table, "log")?;
    let control: RawControl = section(table, "control")?;
    let accounting: RawAccounting = section(table, "accounting")?;
    let ha = section::<RawHa>(table, "ha")?.build(table.contains_key("ha"))?;
    let teredo = teredo.build()?;
    let iphttps = iphttps.build();
    let corpnet = match teredo.enabled || iphttps.enabled || gre.tunnels.is_empty() {
        true => corpnet.build()?,
        false => corpnet.build_without_clients(),
    };
    Ok(Config {
        server: server.build(),
        teredo,
        iphttps,
        corpnet,
        ipsec: ipsec.build(),
        nat64,
        dns64,
        metrics: metrics.build(),
        limits: limits.build(),
        log: log.build(),
        gre,
        control: control.build(),
        accounting: accounting.build()?,
        policy,
        ha,
        written: Written::from_table(table),
    })
}

/// Deserializes section `name` of `table` (its default when absent). On failure, finds the key
/// at fault by deserializing the section one key at a time: every key is optional, so a table
/// holding only a well-formed key always succeeds.
pub(crate) fn section<T: DeserializeOwned + Default>(
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
            if let Some((_, new, why)) = RENAMED.iter().find(|(old, ..)| *old == path) {
                return Err(ConfigError::new(
                    ErrorKind::UnknownKey,
                    &path,
                    None,
                    format!("this key was replaced by `{new}`: {why}"),
                ));
            }
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
        | "corpnet.tun_napi"
        | "metrics.enabled" => "true or false",
        "iphttps.listen" => "an address and port in quotes, e.g. \"0.0.0.0:443\" or \"[::]:443\"",
        "iphttps.path" => "a URI path in quotes, e.g. \"/IPHTTPS\"",
        "iphttps.certificate" | "iphttps.private_key" | "iphttps.client_ca" => {
            "a file path in quotes, e.g. \"/etc/gate64/iphttps.crt\""
        }
        "iphttps.client_crls" => "a list of file paths, e.g. [\"/etc/gate64/clients-ca.crl\"]",
        "iphttps.prefix" => "an IPv6 prefix in quotes, e.g. \"2001:db8:1::/48\"",
        "teredo.server_addresses" => "two IPv4 addresses, e.g. [\"192.0.2.1\", \"192.0.2.2\"]",
        "teredo.port" => "a UDP port number 1..=65535",
        "corpnet.tun" => "an interface name in quotes, e.g. \"gate64\"",
        "corpnet.ipv6_prefixes" => "a list of IPv6 prefixes, e.g. [\"2001:db8:100::/48\"]",
        "corpnet.ipv4_prefixes" => "a list of IPv4 prefixes, e.g. [\"10.1.0.0/16\"]",
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
        | "limits.max_teredo_peers_per_ipv4"
        | "limits.teredo_relay_per_source_per_sec"
        | "limits.teredo_relay_per_destination_per_sec"
        | "limits.max_tls_handshakes"
        | "limits.max_iphttps_connections"
        | "limits.tls_handshake_timeout_secs"
        | "iphttps.idle_timeout_secs"
        | "iphttps.ra_interval_secs"
        | "iphttps.send_queue_bytes"
        | "iphttps.queue_budget_bytes"
        | "iphttps.write_timeout_secs"
        | "iphttps.client_hello_timeout_secs"
        | "iphttps.max_handshakes_per_source"
        | "iphttps.max_handshakes_per_network"
        | "iphttps.max_connections_per_source" => "a whole number",
        "log.level" => "a filter directive in quotes, e.g. \"info\"",
        "log.format" => "\"text\" or \"json\"",
        "control.socket" => "a file path in quotes, e.g. \"/run/gate64/control.sock\"",
        _ => {
            return nat64::expected_form(path)
                .or_else(|| dns64::expected_form(path))
                .or_else(|| ipsec::expected_form(path))
                .or_else(|| accounting::expected_form(path))
                .or_else(|| crate::metrics::expected_form(path))
                .or_else(|| crate::ha::expected_form(path));
        }
    })
}
