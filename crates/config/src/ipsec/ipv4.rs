//! IPv4 inside the tunnels: `ipsec.pool4`, the tunnels' IPv4 prefixes
//! (`ipsec.infrastructure_prefixes4`, `ipsec.intranet_prefixes4`) and the corporate IPv4
//! networks they lie in (`corpnet.ipv4_prefixes`). Each refusal names its key.

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

impl Config {
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
        let value = quote(&pool.to_string());
        if pool.addr() != pool.network() {
            return Err(invalid(
                "ipsec.pool4",
                value,
                format!("host bits are set; did you mean {}?", pool.trunc()),
            ));
        }
        if let Some(why) = special_ipv4(pool.network()) {
            return Err(invalid(
                "ipsec.pool4",
                value,
                format!("is {why}, not a routable unicast network"),
            ));
        }
        if pool.prefix_len() > MAX_POOL4_LEN {
            return Err(invalid(
                "ipsec.pool4",
                value,
                format!(
                    "is too small: must be a /{MAX_POOL4_LEN} or shorter (its network and \
                     broadcast addresses are never handed out)"
                ),
            ));
        }
        if pool.prefix_len() < MIN_POOL4_LEN {
            return Err(invalid(
                "ipsec.pool4",
                value,
                format!("must be a /{MIN_POOL4_LEN} or longer"),
            ));
        }
        let mut taken: Vec<(Ipv4Net, &str)> = Vec::new();
        if self.nat64.enabled {
            taken.extend(self.nat64.pool4.iter().map(|p| (*p, "nat64.pool4")));
        }
        taken.extend(
            self.corpnet
                .ipv4_prefixes
                .iter()
                .map(|p| (*p, "corpnet.ipv4_prefixes")),
        );
        taken.extend(
            self.ipsec_infrastructure_prefixes4()
                .into_iter()
                .map(|p| (p, "ipsec.infrastructure_prefixes4")),
        );
        taken.extend(
            self.ipsec_intranet_prefixes4()
                .into_iter()
                .map(|p| (p, "ipsec.intranet_prefixes4")),
        );
        if let Some((p, what)) = taken.iter().find(|(p, _)| overlaps4(p, pool)) {
            return Err(invalid(
                "ipsec.pool4",
                value,
                format!(
                    "overlaps {p} ({what}); the pool must be disjoint from NAT64's pool and \
                     from the corporate IPv4 networks the tunnels reach"
                ),
            ));
        }
        Ok(())
    }
}
