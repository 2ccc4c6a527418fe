//! IPv4 inside the tunnels: `ipsec.pool4`, the tunnels' IPv4 prefixes
//! (`ipsec.infrastructure_prefixes4`, `ipsec.intranet_prefixes4`) and the corporate IPv4
//! networks they lie in (`corpnet.ipv4_prefixes`). Each refusal names its key.

use super::pool::{self, PoolRules};
use super::*;

/// Shortest `ipsec.pool4` prefix: a /8 is more clients than one gate64 serves.
const MIN_POOL4_LEN: u8 = 8;
/// Longest `ipsec.pool4` prefix: its network and broadcast addresses are never handed out,
/// so a /30 leaves two addresses for clients.
const MAX_POOL4_LEN: u8 = 30;

/// Why `addr` cannot start a unicast IPv4 network gate64 routes, or `None`.
pub(crate) fn special_ipv4(addr: Ipv4Addr) -> Option<&'static str> {
    let first = addr.octets()[0];
    if first == 0 {
        Some("in 0.0.0.0/8 (unspecified, \"this network\")")
    } else if addr.is_loopback() {
        Some("loopback (127.0.0.0/8)")
    } else if addr.is_link_local() {
        Some("link-local (169.254.0.0/16)")
    } else if addr.is_multicast() {
        Some("multicast (224.0.0.0/4)")
    } else if first >= 240 {
        Some("reserved (240.0.0.0/4, class E) or the broadcast address")
    } else {
        None
    }
}

fn overlaps4(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// The IPv6 entries of `ipsec.dns` as written (`None`: not written, the default applies).
pub(crate) fn dns6(dns: Option<&[IpAddr]>) -> Option<Vec<Ipv6Addr>> {
    dns.map(|d| {
        d.iter()
            .filter_map(|a| match a {
                IpAddr::V6(v6) => Some(*v6),
                IpAddr::V4(_) => None,
            })
            .collect()
    })
}

/// The IPv4 entries of `ipsec.dns`.
pub(crate) fn dns4(dns: Option<&[IpAddr]>) -> Vec<Ipv4Addr> {
    dns.unwrap_or_default()
        .iter()
        .filter_map(|a| match a {
            IpAddr::V4(v4) => Some(*v4),
            IpAddr::V6(_) => None,
        })
        .collect()
}

impl Config {
    /// What the infrastructure tunnel reaches over IPv4: `ipsec.infrastructure_prefixes4`,
    /// by default nothing (DNS64, the infrastructure tunnel's default, answers over IPv6).
    pub fn ipsec_infrastructure_prefixes4(&self) -> Vec<Ipv4Net> {
        self.ipsec
            .infrastructure_prefixes4
            .clone()
            .unwrap_or_default()
    }

    /// What the intranet tunnel reaches over IPv4: `ipsec.intranet_prefixes4`, by default
    /// every `corpnet.ipv4_prefixes` entry (as the IPv6 list defaults to every corporate
    /// IPv6 prefix).
    pub fn ipsec_intranet_prefixes4(&self) -> Vec<Ipv4Net> {
        self.ipsec
            .intranet_prefixes4
            .clone()
            .unwrap_or_else(|| self.corpnet.ipv4_prefixes.clone())
    }

    /// The IPv4 DNS servers clients with an inner IPv4 address are given: the IPv4 entries
    /// of `ipsec.dns` (none by default).
    pub fn ipsec_dns4(&self) -> Vec<Ipv4Addr> {
        self.ipsec.dns4.clone()
    }

    /// Advice about IPv4 inside the tunnels, while IPsec is configured: IPv4 DNS servers no
    /// tunnel reaches or no client gets, a pool whose clients reach no IPv4 network.
    pub(crate) fn ipsec_ipv4_warnings(&self, out: &mut Vec<String>) {
        let reached4: Vec<Ipv4Net> = self
            .ipsec_infrastructure_prefixes4()
            .into_iter()
            .chain(self.ipsec_intranet_prefixes4())
            .collect();
        for a in self.ipsec_dns4() {
            if !reached4.iter().any(|p| p.contains(&a)) {
                out.push(format!(
                    "ipsec.dns: {a} lies in neither tunnel's IPv4 prefixes \
                     (ipsec.infrastructure_prefixes4, ipsec.intranet_prefixes4): clients are \
                     told to ask it, but their queries leave outside the tunnels and gate64 \
                     drops them"
                ));
            }
        }
        if let Some(pool) = self.ipsec.pool4
            && reached4.is_empty()
        {
            out.push(format!(
                "ipsec.pool4 = \"{pool}\": clients get an IPv4 address but neither tunnel \
                 reaches an IPv4 network (corpnet.ipv4_prefixes, ipsec.intranet_prefixes4, \
                 ipsec.infrastructure_prefixes4 are empty), so their IPv4 goes nowhere"
            ));
        }
        if !self.ipsec.dns4.is_empty() && self.ipsec.pool4.is_none() {
            out.push(
                "ipsec.dns: the IPv4 servers are handed to no client: clients get an IPv4 \
                 address inside the tunnel only with ipsec.pool4 set"
                    .to_owned(),
            );
        }
    }

    /// `corpnet.ipv4_prefixes`: unicast networks, host bits zero, disjoint from NAT64's
    /// pool (whose addresses the corporate network routes back to gate64's NAT64).
    pub(crate) fn validate_corpnet_ipv4(&self) -> Result<(), ConfigError> {
        for p in &self.corpnet.ipv4_prefixes {
            let value = quote(&p.to_string());
            if p.addr() != p.network() {
                return Err(invalid(
                    "corpnet.ipv4_prefixes",
                    value,
                    format!("host bits are set; did you mean {}?", p.trunc()),
                ));
            }
            if let Some(why) = special_ipv4(p.network()) {
                return Err(invalid(
                    "corpnet.ipv4_prefixes",
                    value,
                    format!("is {why}, not a routable unicast network"),
                ));
            }
            if self.nat64.enabled
                && let Some(n) = self.nat64.pool4.iter().find(|n| overlaps4(p, n))
            {
                return Err(invalid(
                    "corpnet.ipv4_prefixes",
                    value,
                    format!(
                        "overlaps {n} (nat64.pool4): NAT64's addresses are routed back to \
                         gate64, not reached through it"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `ipsec.pool4` and the tunnels' IPv4 prefixes.
    pub(crate) fn validate_ipsec_ipv4(&self) -> Result<(), ConfigError> {
        for (key, prefixes) in [
            (
                "ipsec.infrastructure_prefixes4",
                &self.ipsec.infrastructure_prefixes4,
            ),
            ("ipsec.intranet_prefixes4", &self.ipsec.intranet_prefixes4),
        ] {
            for p in prefixes.iter().flatten() {
                let value = quote(&p.to_string());
                if p.addr() != p.network() {
                    return Err(invalid(
                        key,
                        value,
                        format!("host bits are set; did you mean {}?", p.trunc()),
                    ));
                }
                if !self.corpnet.ipv4_prefixes.iter().any(|c| c.contains(p)) {
                    return Err(invalid(
                        key,
                        value,
                        "lies outside every corpnet.ipv4_prefixes entry; a tunnel reaches only \
                         the corporate IPv4 networks gate64 routes into its TUN",
                    ));
                }
            }
        }
        if let Some(pool) = &self.ipsec.pool4 {
            self.validate_pool4(pool)?;
        }
        Ok(())
    }

    /// The pool hands out client addresses: unicast, room for clients, and disjoint from
    /// everything routed elsewhere (NAT64's pool, the corporate IPv4 networks the tunnels
    /// reach).
    fn validate_pool4(&self, pool: &Ipv4Net) -> Result<(), ConfigError> {
        let mut taken: Vec<(IpNet, &str)> = Vec::new();
        if self.nat64.enabled {
            taken.extend(
                self.nat64
                    .pool4
                    .iter()
                    .map(|p| (IpNet::V4(*p), "nat64.pool4")),
            );
        }
        taken.extend(
            self.corpnet
                .ipv4_prefixes
                .iter()
                .map(|p| (IpNet::V4(*p), "corpnet.ipv4_prefixes")),
        );
        taken.extend(
            self.ipsec_infrastructure_prefixes4()
                .into_iter()
                .map(|p| (IpNet::V4(p), "ipsec.infrastructure_prefixes4")),
        );
        taken.extend(
            self.ipsec_intranet_prefixes4()
                .into_iter()
                .map(|p| (IpNet::V4(p), "ipsec.intranet_prefixes4")),
        );
        pool::check_pool(
            IpNet::V4(*pool),
            PoolRules {
                key: "ipsec.pool4",
                min_len: (
                    MIN_POOL4_LEN,
                    format!("must be a /{MIN_POOL4_LEN} or longer"),
                ),
                max_len: (
                    MAX_POOL4_LEN,
                    format!(
                        "is too small: must be a /{MAX_POOL4_LEN} or shorter (its network and \
                         broadcast addresses are never handed out)"
                    ),
                ),
                special: special_ipv4(pool.network())
                    .map(|why| format!("is {why}, not a routable unicast network")),
                taken: &taken,
                disjoint_from: "the pool must be disjoint from NAT64's pool and from the \
                                corporate IPv4 networks the tunnels reach",
            },
        )
    }
}
