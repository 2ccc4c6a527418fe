//! `[corpnet]`: the corporate-network side: TUN interface, prefixes, gate64's address, MTU,
//! routes; and the IPv6 address rules other sections share.

use std::net::Ipv6Addr;

use ipnet::{Ipv4Net, Ipv6Net};
use serde::Deserialize;

use crate::error::{invalid, missing, quote};
use crate::teredo::teredo_prefix;
use crate::{Config, ConfigError, defaults};

/// `[corpnet]`: the corporate-network side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corpnet {
    /// Name of the TUN interface that gate64 creates towards the corporate network.
    pub tun: String,
    /// IPv6 prefixes of the corporate network that clients reach through gate64.
    pub ipv6_prefixes: Vec<Ipv6Net>,
    /// IPv4 networks of the corporate network that IPsec clients with an inner IPv4 address
    /// (`ipsec.pool4`) reach directly through the TUN, untranslated. Empty: none.
    pub ipv4_prefixes: Vec<Ipv4Net>,
    /// gate64's own IPv6 address on the corporate network.
    pub address6: Ipv6Addr,
    /// MTU of the TUN interface, in bytes.
    pub mtu: u16,
    /// Whether gate64 installs the routes that send client-bound traffic into the TUN.
    pub manage_routes: bool,
    /// Whether the TUN's writes go to a kernel NAPI thread per queue (`IFF_NAPI`, threaded
    /// NAPI) instead of being forwarded within the writing worker's system call.
    pub tun_napi: bool,
}

/// Linux `IFNAMSIZ` minus the terminating NUL.
const MAX_IFNAME_LEN: usize = 15;

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCorpnet {
    tun: Option<String>,
    ipv6_prefixes: Option<Vec<Ipv6Net>>,
    ipv4_prefixes: Option<Vec<Ipv4Net>>,
    address6: Option<Ipv6Addr>,
    mtu: Option<u16>,
    manage_routes: Option<bool>,
    tun_napi: Option<bool>,
}

impl RawCorpnet {
    /// `corpnet.ipv6_prefixes` and `corpnet.address6` are required.
    pub(crate) fn build(self) -> Result<Corpnet, ConfigError> {
        let ipv6_prefixes = self.ipv6_prefixes.ok_or_else(|| {
            missing(
                "corpnet.ipv6_prefixes",
                "list the corporate network's IPv6 prefixes, e.g. [\"2001:db8:100::/48\"]",
            )
        })?;
        let address6 = self.address6.ok_or_else(|| {
            missing(
                "corpnet.address6",
                "give gate64's IPv6 address on the corporate network, e.g. \"2001:db8:100::1\"",
            )
        })?;
        Ok(Corpnet {
            tun: self.tun.unwrap_or_else(|| defaults::TUN.to_owned()),
            ipv6_prefixes,
            ipv4_prefixes: self.ipv4_prefixes.unwrap_or_default(),
            address6,
            mtu: self.mtu.unwrap_or(defaults::MTU),
            manage_routes: self.manage_routes.unwrap_or(true),
            tun_napi: self.tun_napi.unwrap_or(defaults::TUN_NAPI),
        })
    }
}

impl RawCorpnet {
    /// A GRE gateway without client transports: gate64 has no corporate prefix or address
    /// to serve clients, so neither key is required (an absent one is empty / `::`).
    pub(crate) fn build_without_clients(self) -> Corpnet {
        Corpnet {
            tun: self.tun.unwrap_or_else(|| defaults::TUN.to_owned()),
            ipv6_prefixes: self.ipv6_prefixes.unwrap_or_default(),
            ipv4_prefixes: self.ipv4_prefixes.unwrap_or_default(),
            address6: self.address6.unwrap_or(Ipv6Addr::UNSPECIFIED),
            mtu: self.mtu.unwrap_or(defaults::MTU),
            manage_routes: self.manage_routes.unwrap_or(true),
            tun_napi: self.tun_napi.unwrap_or(defaults::TUN_NAPI),
        }
    }
}

impl Config {
    pub(crate) fn validate_corpnet(&self) -> Result<(), ConfigError> {
        let c = &self.corpnet;
        if let Some(why) = bad_ifname(&c.tun) {
            return Err(invalid("corpnet.tun", quote(&c.tun), why));
        }
        if !self.client_transport_enabled()
            && !self.gre.tunnels.is_empty()
            && c.ipv6_prefixes.is_empty()
            && c.address6.is_unspecified()
        {
            return Ok(());
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
        self.validate_corpnet_ipv4()?;
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

    /// Advice about `[corpnet]`.
    pub(crate) fn corpnet_warnings(&self, out: &mut Vec<String>) {
        let c = &self.corpnet;
        if !c.ipv6_prefixes.iter().any(|p| p.contains(&c.address6)) && !c.address6.is_unspecified()
        {
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
    }
}

/// Why `addr` is not a usable unicast address for the corporate side, or `None`.
pub(crate) fn special_ipv6(addr: Ipv6Addr) -> Option<&'static str> {
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

/// True when one prefix contains the other.
pub(crate) fn overlaps(a: &Ipv6Net, b: &Ipv6Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Why `name` is not a valid Linux interface name (`dev_valid_name` in net/core/dev.c), or
/// `None`.
pub(crate) fn bad_ifname(name: &str) -> Option<String> {
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
