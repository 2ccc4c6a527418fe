//! `[[gre.tunnel]]` and `[[gre.tenant]]`: GRE site-to-site tunnels (RFC 2784, RFC 2890) and
//! the tenants (routing domains) their inner packets belong to.
//!
//! Tenant separation: each tenant has its own TUN device (`gre.tenant.tun`) and its tunnels'
//! `routes` go into it, in the tenant's routing table (`gre.tenant.table`, default the main
//! table). Two tenants may thus route the same inner prefix: their packets enter and leave
//! the host through different devices, so the kernel and gate64 never confuse them.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Deserialize;

use crate::corpnet::bad_ifname;
use crate::error::{ConfigError, ErrorKind, invalid, missing, quote};

/// The tenant of a tunnel that names none.
pub const DEFAULT_TENANT: &str = "default";
/// Link MTU the inner MTU defaults are computed from (Ethernet).
pub const UNDERLAY_MTU: u16 = 1500;
/// Unanswered keepalives before a tunnel is down, when `keepalive_secs` is set and
/// `keepalive_retries` is not (Cisco's default).
pub const KEEPALIVE_RETRIES: u32 = 3;
/// The main routing table.
pub const MAIN_TABLE: u32 = 254;

/// `[gre]`: the GRE tunnels and tenants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Gre {
    /// `[[gre.tunnel]]`, in file order.
    pub tunnels: Vec<GreTunnel>,
    /// `[[gre.tenant]]`, in file order, plus the `default` tenant when a tunnel uses it and
    /// the file does not describe it.
    pub tenants: Vec<GreTenant>,
    /// `gre.outer_path`: how outer packets leave.
    pub outer_path: OuterPath,
}

/// `[gre] outer_path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OuterPath {
    /// `"packet"`: whole frames on a packet socket of the underlay interface, for each tunnel
    /// whose next hop is an Ethernet neighbour; the raw socket for the others.
    Packet,
    /// `"raw"` (the default): every outer packet through the raw IP socket. The packet path
    /// measured no more throughput, and the raw one keeps the kernel's routing, neighbour
    /// handling and packet filters on every packet.
    #[default]
    Raw,
}

/// One `[[gre.tunnel]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GreTunnel {
    /// Unique name (logs, metric label `tunnel`).
    pub name: String,
    /// gate64's outer address.
    pub local: IpAddr,
    /// The peer's outer address (the family of `local`).
    pub remote: IpAddr,
    /// RFC 2890 key, sent and required.
    pub key: Option<u32>,
    /// Name of the tenant (a `[[gre.tenant]]`, or `default`).
    pub tenant: String,
    /// Inner prefixes reached through the tunnel, routed into the tenant's TUN.
    pub routes: Vec<IpNet>,
    /// Inner MTU: the route MTU of `routes`.
    pub mtu: u16,
    /// Seconds between keepalives; `None` = no keepalives (the tunnel is always up).
    pub keepalive_secs: Option<u64>,
    /// Unanswered keepalives before the tunnel is down.
    pub keepalive_retries: u32,
    /// Send RFC 2784 checksums.
    pub checksum: bool,
    /// Send RFC 2890 sequence numbers.
    pub sequence: bool,
}

/// One `[[gre.tenant]]`: a routing domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GreTenant {
    /// Unique name.
    pub name: String,
    /// The tenant's TUN device (default `gre-` and the name, cut to 15 bytes).
    pub tun: String,
    /// The routing table the tenant's routes go into (default 254, main).
    pub table: u32,
}

impl GreTunnel {
    /// The header bytes this tunnel adds to an inner packet: outer IP (20 or 40), the GRE
    /// base header (4), and 4 each for key, checksum and sequence.
    pub fn overhead(&self) -> u16 {
        let outer = if self.local.is_ipv4() { 20 } else { 40 };
        outer
            + 4
            + 4 * (u16::from(self.key.is_some())
                + u16::from(self.checksum)
                + u16::from(self.sequence))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTunnel {
    name: Option<String>,
    local: Option<IpAddr>,
    remote: Option<IpAddr>,
    key: Option<u32>,
    tenant: Option<String>,
    routes: Option<Vec<IpNet>>,
    mtu: Option<u16>,
    keepalive_secs: Option<u64>,
    keepalive_retries: Option<u32>,
    checksum: Option<bool>,
    sequence: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    name: Option<String>,
    tun: Option<String>,
    table: Option<u32>,
}

/// True when the file has at least one `[[gre.tunnel]]`.
pub(crate) fn has_tunnels(table: &toml::Table) -> bool {
    table
        .get("gre")
        .and_then(|g| g.get("tunnel"))
        .and_then(toml::Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

/// Parses `[gre]` of the whole file `table` (empty when absent).
pub(crate) fn parse(table: &toml::Table) -> Result<Gre, ConfigError> {
    let Some(gre) = table.get("gre") else {
        return Ok(Gre::default());
    };
    let gre = gre
        .as_table()
        .ok_or_else(|| wrong_type("gre", gre, "a [gre] table"))?;
    if let Some(k) = gre
        .keys()
        .find(|k| !["tunnel", "tenant", "outer_path"].contains(&k.as_str()))
    {
        return Err(ConfigError::new(
            ErrorKind::UnknownKey,
            &format!("gre.{k}"),
            None,
            "[gre] has no such key; expected outer_path, [[gre.tunnel]] or [[gre.tenant]]",
        ));
    }
    let outer_path = match gre.get("outer_path") {
        None => OuterPath::default(),
        Some(toml::Value::String(v)) if v == "packet" => OuterPath::Packet,
        Some(toml::Value::String(v)) if v == "raw" => OuterPath::Raw,
        Some(toml::Value::String(v)) => {
            return Err(invalid(
                "gre.outer_path",
                quote(v),
                "expected \"packet\" or \"raw\"",
            ));
        }
        Some(v) => return Err(wrong_type("gre.outer_path", v, "a string")),
    };
    let mut tenants = Vec::new();
    for (i, v) in entries(gre, "tenant")?.iter().enumerate() {
        tenants.push(build_tenant(
            &format!("gre.tenant[{i}]"),
            raw(v, i, "tenant")?,
        )?);
    }
    let mut tunnels = Vec::new();
    for (i, v) in entries(gre, "tunnel")?.iter().enumerate() {
        tunnels.push(build_tunnel(
            &format!("gre.tunnel[{i}]"),
            raw(v, i, "tunnel")?,
        )?);
    }
    if tunnels.iter().any(|t| t.tenant == DEFAULT_TENANT)
        && !tenants.iter().any(|t| t.name == DEFAULT_TENANT)
    {
        tenants.push(GreTenant {
            name: DEFAULT_TENANT.to_owned(),
            tun: default_tun(DEFAULT_TENANT),
            table: MAIN_TABLE,
        });
    }
    Ok(Gre {
        tunnels,
        tenants,
        outer_path,
    })
}

fn entries<'a>(gre: &'a toml::Table, name: &str) -> Result<&'a [toml::Value], ConfigError> {
    match gre.get(name) {
        None => Ok(&[]),
        Some(toml::Value::Array(a)) => Ok(a),
        Some(v) => Err(wrong_type(
            &format!("gre.{name}"),
            v,
            &format!("an array of tables, written [[gre.{name}]]"),
        )),
    }
}

fn raw<T: serde::de::DeserializeOwned>(
    v: &toml::Value,
    i: usize,
    what: &str,
) -> Result<T, ConfigError> {
    raw_at(v, &format!("gre.{what}[{i}]"))
}

/// Deserializes the table `v` of an array of tables, whose place in the file is `path`
/// (e.g. `policy[0]`); an error names the key at fault under it.
pub(crate) fn raw_at<T: serde::de::DeserializeOwned>(
    v: &toml::Value,
    path: &str,
) -> Result<T, ConfigError> {
    let t = v.as_table().ok_or_else(|| wrong_type(path, v, "a table"))?;
    T::deserialize(t.clone()).map_err(|e| {
        // Name the key at fault: deserialize one key at a time (every key is optional).
        for (key, value) in t {
            let single: toml::Table = std::iter::once((key.clone(), value.clone())).collect();
            if let Err(e) = T::deserialize(single) {
                let kind = if e.message().starts_with("unknown field") {
                    ErrorKind::UnknownKey
                } else {
                    ErrorKind::WrongType
                };
                return ConfigError::new(
                    kind,
                    &format!("{path}.{key}"),
                    Some(value.to_string()),
                    e.message().trim_end(),
                );
            }
        }
        ConfigError::new(ErrorKind::WrongType, path, None, e.message().trim_end())
    })
}

pub(crate) fn wrong_type(key: &str, v: &toml::Value, form: &str) -> ConfigError {
    ConfigError::new(
        ErrorKind::WrongType,
        key,
        Some(v.to_string()),
        format!("must be {form}"),
    )
}

fn default_tun(tenant: &str) -> String {
    let mut s = format!("gre-{tenant}");
    while s.len() > 15 {
        s.pop();
    }
    s
}

fn build_tenant(path: &str, r: RawTenant) -> Result<GreTenant, ConfigError> {
    let name = r
        .name
        .ok_or_else(|| missing(&format!("{path}.name"), "give the tenant a name"))?;
    let tun = r.tun.unwrap_or_else(|| default_tun(&name));
    if let Some(why) = bad_ifname(&tun) {
        return Err(invalid(&format!("{path}.tun"), quote(&tun), why));
    }
    let table = r.table.unwrap_or(MAIN_TABLE);
    if table == 0 || table == 255 {
        return Err(invalid(
            &format!("{path}.table"),
            table,
            "table 0 is unspecified and 255 is the kernel's local table; use 254 (main) or a table of your own",
        ));
    }
    Ok(GreTenant { name, tun, table })
}

fn build_tunnel(path: &str, r: RawTunnel) -> Result<GreTunnel, ConfigError> {
    let key = |k: &str| format!("{path}.{k}");
    let name = r
        .name
        .ok_or_else(|| missing(&key("name"), "give the tunnel a name, e.g. \"site2\""))?;
    let local = r.local.ok_or_else(|| {
        missing(
            &key("local"),
            "give gate64's outer address, e.g. \"203.0.113.1\"",
        )
    })?;
    let remote = r.remote.ok_or_else(|| {
        missing(
            &key("remote"),
            "give the peer's outer address, e.g. \"203.0.113.2\"",
        )
    })?;
    if local.is_ipv4() != remote.is_ipv4() {
        return Err(invalid(
            &key("remote"),
            quote(&remote.to_string()),
            format!(
                "is not of the family of local = {}; a tunnel's outer addresses are both IPv4 or both IPv6",
                quote(&local.to_string())
            ),
        ));
    }
    for (k, a) in [("local", local), ("remote", remote)] {
        if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
            return Err(invalid(
                &key(k),
                quote(&a.to_string()),
                "must be a unicast address",
            ));
        }
    }
    let routes = r.routes.unwrap_or_default();
    for net in &routes {
        if net.addr() != net.network() {
            return Err(invalid(
                &key("routes"),
                quote(&net.to_string()),
                format!("host bits are set; did you mean {}?", net.trunc()),
            ));
        }
    }
    let mut t = GreTunnel {
        name,
        local,
        remote,
        key: r.key,
        tenant: r.tenant.unwrap_or_else(|| DEFAULT_TENANT.to_owned()),
        routes,
        mtu: 0,
        keepalive_secs: r.keepalive_secs,
        keepalive_retries: r.keepalive_retries.unwrap_or(KEEPALIVE_RETRIES),
        checksum: r.checksum.unwrap_or(false),
        sequence: r.sequence.unwrap_or(false),
    };
    if r.keepalive_retries.is_some() && r.keepalive_secs.is_none() {
        return Err(invalid(
            &key("keepalive_retries"),
            t.keepalive_retries,
            "has no effect without keepalive_secs; set both or neither",
        ));
    }
    if t.keepalive_secs == Some(0) || (t.keepalive_secs.is_some() && t.keepalive_retries == 0) {
        return Err(invalid(
            &key("keepalive_secs"),
            t.keepalive_secs.unwrap_or(0),
            "keepalive_secs and keepalive_retries must be at least 1 (leave keepalive_secs out to turn keepalives off)",
        ));
    }
    t.mtu = r.mtu.unwrap_or(UNDERLAY_MTU - t.overhead());
    let min = if t.routes.iter().any(|n| matches!(n, IpNet::V6(_))) {
        1280
    } else {
        576
    };
    if t.mtu < min {
        return Err(invalid(
            &key("mtu"),
            t.mtu,
            format!(
                "must be {min}..=65535 bytes (1280: RFC 8200 §5 minimum for IPv6 routes; 576: RFC 791)"
            ),
        ));
    }
    Ok(t)
}

impl crate::Config {
    /// Rules across tunnels and tenants: unique names, one tunnel per (local, remote, key),
    /// known tenants, no overlapping routes within a tenant, distinct TUN names.
    pub(crate) fn validate_gre(&self) -> Result<(), ConfigError> {
        let g = &self.gre;
        let mut tenant_names = HashMap::new();
        let mut tuns = HashMap::new();
        for (i, t) in g.tenants.iter().enumerate() {
            if let Some(j) = tenant_names.insert(t.name.as_str(), i) {
                return Err(invalid(
                    &format!("gre.tenant[{i}].name"),
                    quote(&t.name),
                    format!("is also the name of gre.tenant[{j}]; names must be unique"),
                ));
            }
            if t.tun == self.corpnet.tun {
                return Err(invalid(
                    &format!("gre.tenant[{i}].tun"),
                    quote(&t.tun),
                    "is corpnet.tun, the clients' TUN; give the tenant a device of its own",
                ));
            }
            if let Some(other) = tuns.insert(t.tun.as_str(), t.name.as_str()) {
                return Err(invalid(
                    &format!("gre.tenant[{i}].tun"),
                    quote(&t.tun),
                    format!(
                        "is also the TUN of tenant {}; each tenant has its own device",
                        quote(other)
                    ),
                ));
            }
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut endpoints: HashMap<(IpAddr, IpAddr, Option<u32>), usize> = HashMap::new();
        for (i, t) in g.tunnels.iter().enumerate() {
            if let Some(j) = names.insert(t.name.as_str(), i) {
                return Err(invalid(
                    &format!("gre.tunnel[{i}].name"),
                    quote(&t.name),
                    format!("is also the name of gre.tunnel[{j}]; names must be unique"),
                ));
            }
            if let Some(j) = endpoints.insert((t.local, t.remote, t.key), i) {
                return Err(invalid(
                    &format!("gre.tunnel[{i}].key"),
                    t.key.map_or_else(|| "(none)".to_owned(), |k| k.to_string()),
                    format!(
                        "gre.tunnel[{j}] ({}) has the same local, remote and key: a received packet could not tell them apart; give one another key",
                        quote(&g.tunnels[j].name)
                    ),
                ));
            }
            if !tenant_names.contains_key(t.tenant.as_str()) {
                return Err(invalid(
                    &format!("gre.tunnel[{i}].tenant"),
                    quote(&t.tenant),
                    "no [[gre.tenant]] has this name",
                ));
            }
        }
        self.validate_gre_routes()
    }

    fn validate_gre_routes(&self) -> Result<(), ConfigError> {
        let mut seen: Vec<(&str, IpNet, usize)> = Vec::new();
        for (i, t) in self.gre.tunnels.iter().enumerate() {
            for net in &t.routes {
                if let Some((_, other, j)) = seen.iter().find(|(tenant, other, _)| {
                    *tenant == t.tenant && (other.contains(net) || net.contains(other))
                }) {
                    return Err(invalid(
                        &format!("gre.tunnel[{i}].routes"),
                        quote(&net.to_string()),
                        format!(
                            "overlaps {other} of gre.tunnel[{j}] in the same tenant {}; a tenant routes each prefix through one tunnel (put overlapping sites in different tenants)",
                            quote(&t.tenant)
                        ),
                    ));
                }
                seen.push((t.tenant.as_str(), *net, i));
            }
        }
        Ok(())
    }

    /// True when Teredo or IP-HTTPS serves clients.
    pub fn client_transport_enabled(&self) -> bool {
        self.teredo.enabled || self.iphttps.enabled
    }
}

#[cfg(test)]
mod tests;
