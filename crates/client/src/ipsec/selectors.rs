//! Routes from narrowed traffic selectors: the client routes into its TUN what its tunnels'
//! selectors cover.

use gate64_esp::Selector;
use ipnet::Ipv6Net;
use std::net::{IpAddr, Ipv6Addr};

/// The number of addresses a selector spans minus one (`u128::MAX` for IPv4 or reversed).
pub(super) fn span_of(s: &Selector) -> u128 {
    match (s.start, s.end) {
        (IpAddr::V6(a), IpAddr::V6(b)) => u128::from(b).saturating_sub(u128::from(a)),
        _ => u128::MAX,
    }
}

/// The smallest set of IPv6 prefixes covering a selector's address range (IPv4 selectors
/// give none: the client's TUN routes IPv6).
pub(super) fn prefixes_of(s: &Selector) -> Vec<Ipv6Net> {
    let (IpAddr::V6(a), IpAddr::V6(b)) = (s.start, s.end) else {
        return Vec::new();
    };
    let (mut start, end) = (u128::from(a), u128::from(b));
    let mut out = Vec::new();
    while start <= end {
        // The largest aligned block starting at `start` that stays within `end`.
        let mut len = if start == 0 {
            0
        } else {
            128 - start.trailing_zeros()
        };
        while len < 128 && block_end(start, len) > end {
            len += 1;
        }
        let len8 = u8::try_from(len).unwrap_or(128);
        if let Ok(net) = Ipv6Net::new(Ipv6Addr::from(start), len8) {
            out.push(net);
        }
        match block_end(start, len).checked_add(1) {
            Some(next) => start = next,
            None => break,
        }
    }
    out
}

/// The last address of the block of prefix length `len` starting at `start`.
fn block_end(start: u128, len: u32) -> u128 {
    start | u128::MAX.checked_shr(len).unwrap_or(0)
}
