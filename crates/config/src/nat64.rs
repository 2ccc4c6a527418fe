//! `[nat64]`: stateful NAT64 (RFC 6146) towards IPv4-only corporate hosts.

use std::net::Ipv6Addr;
use std::path::PathBuf;

use ipnet::{Ipv4Net, Ipv6Net};
use serde::Deserialize;

use crate::corpnet::overlaps;
use crate::error::{invalid, missing, quote};
use crate::teredo::teredo_prefix;
use crate::{Config, ConfigError};

/// Defaults of `[nat64]`, as documented in `docs/config.md`.
pub mod defaults {
    use std::net::Ipv6Addr;

    /// `nat64.prefix`: the Well-Known Prefix 64:ff9b::/96 (RFC 6052 §2.1). Corporate IPv4 is
    /// mostly private, which the Well-Known Prefix may not carry; deployments set a
    /// network-specific prefix.
    pub const PREFIX: (Ipv6Addr, u8) = (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96);
    /// `nat64.ports`: every non-zero port from 1024 (RFC 6146 §3.5.1.1 keeps the
    /// well-known range for clients whose own port is in it).
    pub const PORTS: [u16; 2] = [1024, 65535];
    /// `nat64.udp_timeout_secs`: UDP_DEFAULT, 5 min (RFC 6146 §4).
    pub const UDP_TIMEOUT_SECS: u64 = 300;
    /// RFC 6146 §4 UDP_MIN: 2 min.
    pub const UDP_MIN_SECS: u64 = 120;
    /// `nat64.tcp_established_timeout_secs`: TCP_EST, 2 h 4 min (RFC 6146 §4, RFC 5382).
    pub const TCP_EST_SECS: u64 = 7440;
    /// `nat64.tcp_transitory_timeout_secs`: TCP_TRANS, 4 min (RFC 6146 §4).
    pub const TCP_TRANS_SECS: u64 = 240;
    /// `nat64.icmp_timeout_secs`: ICMP_DEFAULT, 60 s (RFC 6146 §4).
    pub const ICMP_TIMEOUT_SECS: u64 = 60;
    /// `nat64.ipv4_mtu`: the corporate IPv4 network's MTU.
    pub const IPV4_MTU: u16 = 1500;
    /// `nat64.max_sessions`: sessions held at most, over all protocols.
    pub const MAX_SESSIONS: usize = 4_000_000;
    /// `nat64.max_sessions_per_client`: sessions one client holds at most (RFC 6888 REQ-4
    /// leaves the number to the operator): room for a busy host with many tabs and peers,
    /// a thousandth of the table budget, so no client can fill it.
    pub const MAX_SESSIONS_PER_CLIENT: usize = 4_096;
    /// `nat64.max_ports_per_client`: pool4 ports (ICMP identifiers) one client holds at most
    /// per protocol (RFC 6888 REQ-3); a thirty-second of one pool4 address's ports.
    pub const MAX_PORTS_PER_CLIENT: usize = 2_048;
}

/// `nat64.filtering`: which IPv4 hosts may use a client's mapping (RFC 6146 §3.5.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Filtering {
    /// Any IPv4 host may send to an existing mapping (`"endpoint-independent"`, the default;
    /// RFC 4787 REQ-8 recommends it for application transparency).
    #[default]
    EndpointIndependent,
    /// Only IPv4 hosts the client has already sent to (`"address-dependent"`).
    AddressDependent,
}

/// `[nat64]`: stateful NAT64 towards IPv4-only hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nat64 {
    /// Whether gate64 translates at all. Default: on when `pool4` is given.
    pub enabled: bool,
    /// Pref64: clients reach IPv4 host `a.b.c.d` at this prefix + `a.b.c.d` (RFC 6052 §2.2);
    /// length 32, 40, 48, 56, 64 or 96.
    pub prefix: Ipv6Net,
    /// Let the Well-Known Prefix carry private IPv4 addresses, which RFC 6052 §3.1 forbids.
    pub allow_private_ipv4: bool,
    /// The IPv4 addresses clients' flows leave from. Required while enabled.
    pub pool4: Vec<Ipv4Net>,
    /// The port range used on each pool4 address, inclusive.
    pub ports: [u16; 2],
    /// UDP session lifetime, seconds (at least 120).
    pub udp_timeout_secs: u64,
    /// Established TCP session lifetime, seconds (at least 7440).
    pub tcp_established_timeout_secs: u64,
    /// Transitory TCP session lifetime, seconds (at least 240).
    pub tcp_transitory_timeout_secs: u64,
    /// ICMP query session lifetime, seconds (at least 1).
    pub icmp_timeout_secs: u64,
    /// Which IPv4 hosts may reach a client's mapping.
    pub filtering: Filtering,
    /// MTU of the corporate IPv4 network: larger translated packets get ICMPv6 Packet Too Big.
    pub ipv4_mtu: u16,
    /// Most sessions held; new flows beyond are dropped and counted.
    pub max_sessions: usize,
    /// Most sessions one client (a Teredo address, or an IPv6 /64) holds (RFC 6888 REQ-4).
    pub max_sessions_per_client: usize,
    /// Most pool4 ports one client holds per protocol (RFC 6888 REQ-3); never more than a
    /// quarter of its shard's share of pool4, so no client takes the pool.
    pub max_ports_per_client: usize,
    /// Route Pref64 into the TUN device too, so corporate IPv6 hosts and IP-HTTPS clients
    /// (whose packets reach the kernel first) are translated as well.
    pub route_prefix: bool,
    /// Write one JSON line per mapping creation and deletion here (RFC 6888 §4 compliance
    /// log). `None`: off, and nothing is queued.
    pub binding_log: Option<PathBuf>,
}

impl Default for Nat64 {
    fn default() -> Self {
        let (addr, len) = defaults::PREFIX;
        Nat64 {
            enabled: false,
            prefix: Ipv6Net::new(addr, len).unwrap_or_default(),
            allow_private_ipv4: false,
            pool4: Vec::new(),
            ports: defaults::PORTS,
            udp_timeout_secs: defaults::UDP_TIMEOUT_SECS,
            tcp_established_timeout_secs: defaults::TCP_EST_SECS,
            tcp_transitory_timeout_secs: defaults::TCP_TRANS_SECS,
            icmp_timeout_secs: defaults::ICMP_TIMEOUT_SECS,
            filtering: Filtering::default(),
            ipv4_mtu: defaults::IPV4_MTU,
            max_sessions: defaults::MAX_SESSIONS,
            max_sessions_per_client: defaults::MAX_SESSIONS_PER_CLIENT,
            max_ports_per_client: defaults::MAX_PORTS_PER_CLIENT,
            route_prefix: true,
            binding_log: None,
        }
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNat64 {
    enabled: Option<bool>,
    prefix: Option<Ipv6Net>,
    allow_private_ipv4: Option<bool>,
    pool4: Option<Vec<Pool4Entry>>,
    ports: Option<[u16; 2]>,
    udp_timeout_secs: Option<u64>,
    tcp_established_timeout_secs: Option<u64>,
    tcp_transitory_timeout_secs: Option<u64>,
    icmp_timeout_secs: Option<u64>,
    filtering: Option<Filtering>,
    ipv4_mtu: Option<u16>,
    max_sessions: Option<usize>,
    max_sessions_per_client: Option<usize>,
    max_ports_per_client: Option<usize>,
    route_prefix: Option<bool>,
    binding_log: Option<PathBuf>,
}

/// A pool4 entry: an IPv4 prefix, or a single address meaning its /32.
pub(crate) struct Pool4Entry(Ipv4Net);

impl<'de> Deserialize<'de> for Pool4Entry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if let Ok(net) = s.parse::<Ipv4Net>() {
            return Ok(Pool4Entry(net));
        }
        s.parse::<std::net::Ipv4Addr>()
            .map(|a| Pool4Entry(Ipv4Net::from(a)))
            .map_err(|_| {
                serde::de::Error::custom(format!(
                    "{s:?} is neither an IPv4 address nor an IPv4 prefix"
                ))
            })
    }
}

impl RawNat64 {
    pub(crate) fn build(self) -> Result<Nat64, ConfigError> {
        let d = Nat64::default();
        let enabled = self.enabled.unwrap_or(self.pool4.is_some());
        let pool4 = match self.pool4 {
            Some(p) => p.into_iter().map(|e| e.0).collect(),
            None if enabled => {
                return Err(missing(
                    "nat64.pool4",
                    "list the IPv4 addresses translated flows leave from, e.g. \
                     [\"192.0.2.64/28\"] (or set nat64.enabled = false)",
                ));
            }
            None => Vec::new(),
        };
        Ok(Nat64 {
            enabled,
            prefix: self.prefix.unwrap_or(d.prefix),
            allow_private_ipv4: self.allow_private_ipv4.unwrap_or(false),
            pool4,
            ports: self.ports.unwrap_or(d.ports),
            udp_timeout_secs: self.udp_timeout_secs.unwrap_or(d.udp_timeout_secs),
            tcp_established_timeout_secs: self
                .tcp_established_timeout_secs
                .unwrap_or(d.tcp_established_timeout_secs),
            tcp_transitory_timeout_secs: self
                .tcp_transitory_timeout_secs
                .unwrap_or(d.tcp_transitory_timeout_secs),
            icmp_timeout_secs: self.icmp_timeout_secs.unwrap_or(d.icmp_timeout_secs),
            filtering: self.filtering.unwrap_or_default(),
            ipv4_mtu: self.ipv4_mtu.unwrap_or(d.ipv4_mtu),
            max_sessions: self.max_sessions.unwrap_or(d.max_sessions),
            max_sessions_per_client: self
                .max_sessions_per_client
                .unwrap_or(d.max_sessions_per_client),
            max_ports_per_client: self.max_ports_per_client.unwrap_or(d.max_ports_per_client),
            route_prefix: self.route_prefix.unwrap_or(true),
            binding_log: self.binding_log,
        })
    }
}

/// pool4 holds at most this many addresses (a /16): each needs its own port bookkeeping.
const MAX_POOL_ADDRESSES: u64 = 65_536;

impl Config {
    pub(crate) fn validate_nat64(&self) -> Result<(), ConfigError> {
        let n = &self.nat64;
        if !n.enabled {
            return Ok(());
        }
        let p = n.prefix;
        let value = quote(&p.to_string());
        if ![32, 40, 48, 56, 64, 96].contains(&p.prefix_len()) {
            return Err(invalid(
                "nat64.prefix",
                value,
                "the length must be 32, 40, 48, 56, 64 or 96 (RFC 6052 §2.2)",
            ));
        }
        if p.addr() != p.network() {
            return Err(invalid(
                "nat64.prefix",
                value,
                format!("host bits are set; did you mean {}?", p.trunc()),
            ));
        }
        if p.prefix_len() > 64 && p.network().octets()[8] != 0 {
            return Err(invalid(
                "nat64.prefix",
                value,
                "bits 64 to 71 (the \"u\" octet) must be zero (RFC 6052 §2.2)",
            ));
        }
        let teredo = teredo_prefix();
        let clash = if overlaps(&p, &teredo) {
            Some(format!("overlaps {teredo}, the Teredo prefix"))
        } else if let Some(c) = self.corpnet.ipv6_prefixes.iter().find(|c| overlaps(&p, c)) {
            Some(format!(
                "overlaps corpnet.ipv6_prefixes entry {c}: corporate IPv6 destinations are \
                 forwarded untranslated"
            ))
        } else {
            self.iphttps
                .prefix
                .filter(|i| overlaps(&p, i))
                .map(|i| format!("overlaps iphttps.prefix {i}, where IP-HTTPS clients live"))
        };
        if let Some(why) = clash {
            return Err(invalid("nat64.prefix", value, why));
        }
        if n.pool4.is_empty() {
            return Err(invalid(
                "nat64.pool4",
                "[]",
                "list at least one IPv4 address or prefix",
            ));
        }
        let mut total = 0u64;
        for net in &n.pool4 {
            let value = quote(&net.to_string());
            if net.addr() != net.network() {
                return Err(invalid(
                    "nat64.pool4",
                    value,
                    format!("host bits are set; did you mean {}?", net.trunc()),
                ));
            }
            let a = net.network();
            if a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.octets()[0] >= 240 {
                return Err(invalid(
                    "nat64.pool4",
                    value,
                    "must be unicast IPv4 (not 0/8, loopback, multicast or class E)",
                ));
            }
            if self.teredo.enabled && self.teredo.server_addresses.iter().any(|s| net.contains(s)) {
                return Err(invalid(
                    "nat64.pool4",
                    value,
                    "contains a teredo.server_addresses address; the pool must be addresses \
                     the corporate network routes to gate64 and nothing else uses",
                ));
            }
            total += 1u64 << (32 - u32::from(net.prefix_len()));
        }
        if total > MAX_POOL_ADDRESSES {
            return Err(invalid(
                "nat64.pool4",
                format!("{} addresses", total),
                format!("at most {MAX_POOL_ADDRESSES} addresses"),
            ));
        }
        let [lo, hi] = n.ports;
        if lo == 0 || lo > hi {
            return Err(invalid(
                "nat64.ports",
                format!("[{lo}, {hi}]"),
                "must be [first, last] with 1 <= first <= last <= 65535",
            ));
        }
        for (key, v, min) in [
            (
                "nat64.udp_timeout_secs",
                n.udp_timeout_secs,
                defaults::UDP_MIN_SECS,
            ),
            (
                "nat64.tcp_established_timeout_secs",
                n.tcp_established_timeout_secs,
                defaults::TCP_EST_SECS,
            ),
            (
                "nat64.tcp_transitory_timeout_secs",
                n.tcp_transitory_timeout_secs,
                defaults::TCP_TRANS_SECS,
            ),
            ("nat64.icmp_timeout_secs", n.icmp_timeout_secs, 1),
        ] {
            if v < min {
                return Err(invalid(
                    key,
                    v,
                    format!("at least {min} s (the minimum of RFC 6146 §4)"),
                ));
            }
        }
        if n.ipv4_mtu < 68 {
            return Err(invalid(
                "nat64.ipv4_mtu",
                n.ipv4_mtu,
                "at least 68 bytes (RFC 791)",
            ));
        }
        if n.max_sessions == 0 {
            return Err(invalid("nat64.max_sessions", 0, "must be at least 1"));
        }
        self.validate_nat64_client_limits()
    }

    /// RFC 6888 REQ-3/REQ-4: per-client limits that leave room for other clients.
    fn validate_nat64_client_limits(&self) -> Result<(), ConfigError> {
        let n = &self.nat64;
        let (per_client, total) = (n.max_sessions_per_client, n.max_sessions);
        if per_client == 0 {
            return Err(invalid(
                "nat64.max_sessions_per_client",
                0,
                "must be at least 1",
            ));
        }
        if per_client > total {
            return Err(invalid(
                "nat64.max_sessions_per_client",
                per_client,
                format!(
                    "larger than nat64.max_sessions = {total}: one client could take every \
                     session"
                ),
            ));
        }
        let [lo, hi] = n.ports;
        let ports = usize::from(hi - lo) + 1;
        if n.max_ports_per_client == 0 {
            return Err(invalid(
                "nat64.max_ports_per_client",
                0,
                "must be at least 1",
            ));
        }
        if n.max_ports_per_client > ports {
            return Err(invalid(
                "nat64.max_ports_per_client",
                n.max_ports_per_client,
                format!("larger than the {ports} ports of nat64.ports"),
            ));
        }
        Ok(())
    }

    pub(crate) fn nat64_warnings(&self, out: &mut Vec<String>) {
        let n = &self.nat64;
        if !n.enabled {
            return;
        }
        let wkp = n.prefix.network() == Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0)
            && n.prefix.prefix_len() == 96;
        if wkp && !n.allow_private_ipv4 {
            out.push(
                "nat64.prefix is the Well-Known Prefix 64:ff9b::/96, which may not carry \
                 private IPv4 addresses (RFC 6052 §3.1): clients cannot reach 10/8, 172.16/12 \
                 or 192.168/16 hosts; use a network-specific prefix for a corporate network"
                    .to_owned(),
            );
        }
    }
}

/// What a `[nat64]` key's value looks like, for type errors.
pub(crate) fn expected_form(path: &str) -> Option<&'static str> {
    Some(match path {
        "nat64.enabled" | "nat64.allow_private_ipv4" | "nat64.route_prefix" => "true or false",
        "nat64.prefix" => "an IPv6 prefix in quotes, e.g. \"2001:db8:64::/96\"",
        "nat64.pool4" => "a list of IPv4 addresses or prefixes, e.g. [\"192.0.2.64/28\"]",
        "nat64.ports" => "two port numbers, e.g. [1024, 65535]",
        "nat64.filtering" => "\"endpoint-independent\" or \"address-dependent\"",
        "nat64.binding_log" => "a file path in quotes, e.g. \"/var/log/gate64/bindings.jsonl\"",
        "nat64.udp_timeout_secs"
        | "nat64.tcp_established_timeout_secs"
        | "nat64.tcp_transitory_timeout_secs"
        | "nat64.icmp_timeout_secs"
        | "nat64.ipv4_mtu"
        | "nat64.max_sessions"
        | "nat64.max_sessions_per_client"
        | "nat64.max_ports_per_client" => "a whole number",
        _ => return None,
    })
}
