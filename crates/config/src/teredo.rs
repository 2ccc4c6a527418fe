//! `[teredo]`: the Teredo server and relay (RFC 4380): server addresses, port, relay.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use serde::Deserialize;

use crate::error::{invalid, missing, quote};
use crate::{Config, ConfigError, defaults};

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
    /// Deprecated, always `true`: gate64 always relays for its own Teredo clients (RFC 4380
    /// §5.3); `relay = false` is refused by validation rather than silently ignored.
    pub relay: bool,
    /// Lab and demo only: accept 127.0.0.0/8 as server addresses and client sources.
    pub lab_allow_loopback: bool,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTeredo {
    enabled: Option<bool>,
    server_addresses: Option<[Ipv4Addr; 2]>,
    port: Option<u16>,
    relay: Option<bool>,
    lab_allow_loopback: Option<bool>,
}

impl RawTeredo {
    /// `teredo.server_addresses` is required while Teredo is enabled (the default).
    pub(crate) fn build(self) -> Result<Teredo, ConfigError> {
        let enabled = self.enabled.unwrap_or(true);
        let server_addresses = match self.server_addresses {
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
        Ok(Teredo {
            enabled,
            server_addresses,
            port: self.port.unwrap_or(defaults::TEREDO_PORT),
            relay: self.relay.unwrap_or(true),
            lab_allow_loopback: self.lab_allow_loopback.unwrap_or(false),
        })
    }
}

impl Config {
    /// The primary Teredo server address (`teredo.server_addresses[0]`).
    pub fn teredo_primary(&self) -> Ipv4Addr {
        self.teredo.server_addresses[0]
    }

    /// The secondary Teredo server address (`teredo.server_addresses[1]`).
    pub fn teredo_secondary(&self) -> Ipv4Addr {
        self.teredo.server_addresses[1]
    }

    pub(crate) fn validate_teredo(&self) -> Result<(), ConfigError> {
        let t = &self.teredo;
        if t.port == 0 {
            return Err(invalid("teredo.port", 0, "must be 1..=65535"));
        }
        if !t.relay {
            return Err(invalid(
                "teredo.relay",
                false,
                "cannot be turned off: gate64 is a Teredo server only to carry its own \
                 clients' traffic (RFC 4380 §5.3), which is the relay role; to serve no Teredo \
                 clients set teredo.enabled = false. The key is deprecated: leave it out",
            ));
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

    /// Advice about `[teredo]`; when Teredo is off, whether any client transport is left.
    pub(crate) fn teredo_warnings(&self, out: &mut Vec<String>) {
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
        } else if !self.iphttps.enabled && self.gre.tunnels.is_empty() {
            out.push(
                "teredo.enabled = false: no client transport is enabled (iphttps.enabled is \
                 false too), so no client can connect"
                    .to_owned(),
            );
        }
    }
}

/// Why `addr` cannot be a Teredo server address, or `None` if it can (RFC 6890 special-purpose
/// ranges that are not reachable from the internet, plus 192.88.99.0/24, the 6to4 relay
/// anycast range of RFC 3068).
pub(crate) fn teredo_unusable(addr: Ipv4Addr, lab_allow_loopback: bool) -> Option<&'static str> {
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
pub(crate) fn teredo_prefix() -> Ipv6Net {
    Ipv6Net::new(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32)
        .expect("32 is a valid IPv6 prefix length")
}
