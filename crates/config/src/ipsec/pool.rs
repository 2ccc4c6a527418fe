//! The checks `ipsec.pool6` and `ipsec.pool4` share: a pool hands out client addresses, so
//! it is a network (host bits clear), of a length within the family's bounds, routable
//! unicast, and disjoint from everything routed elsewhere. Each family says why in its own
//! words; the refusal names the pool's key.

use ipnet::IpNet;

use crate::ConfigError;
use crate::error::{invalid, quote};

/// One pool's bounds and the reasons its refusals give.
pub(super) struct PoolRules<'a> {
    /// `ipsec.pool6` or `ipsec.pool4`.
    pub key: &'static str,
    /// Shortest prefix length, and the reason a shorter one is refused.
    pub min_len: (u8, String),
    /// Longest prefix length, and the reason a longer one is refused.
    pub max_len: (u8, String),
    /// Why the pool's network is no routable unicast network (`None`: it is one).
    pub special: Option<String>,
    /// What is routed elsewhere, with the key that routes it.
    pub taken: &'a [(IpNet, &'a str)],
    /// What an overlap's refusal says after naming the prefix and its key.
    pub disjoint_from: &'static str,
}

/// Refuses `pool` under `rules`, in this order: host bits set, too short, too long, not
/// routable unicast, overlapping something taken.
pub(super) fn check_pool(pool: IpNet, rules: PoolRules<'_>) -> Result<(), ConfigError> {
    let value = || quote(&pool.to_string());
    if pool.addr() != pool.network() {
        return Err(invalid(
            rules.key,
            value(),
            format!("host bits are set; did you mean {}?", pool.trunc()),
        ));
    }
    let (min, too_short) = rules.min_len;
    if pool.prefix_len() < min {
        return Err(invalid(rules.key, value(), too_short));
    }
    let (max, too_long) = rules.max_len;
    if pool.prefix_len() > max {
        return Err(invalid(rules.key, value(), too_long));
    }
    if let Some(why) = rules.special {
        return Err(invalid(rules.key, value(), why));
    }
    if let Some((p, what)) = rules
        .taken
        .iter()
        .find(|(p, _)| p.contains(&pool.network()) || pool.contains(&p.network()))
    {
        return Err(invalid(
            rules.key,
            value(),
            format!("overlaps {p} ({what}); {}", rules.disjoint_from),
        ));
    }
    Ok(())
}
