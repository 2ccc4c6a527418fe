//! Traffic-selector narrowing into gate64's two tunnels (RFC 7296 §2.9), for both address
//! families, and the selectors a child SA's ESP checks packets against.

use std::net::{IpAddr, Ipv6Addr};

use ipnet::IpNet;

use crate::child_sa::{Selector, TunnelKind};
use crate::message::TrafficSelector;

/// An address as a number, with its family (true for IPv6).
fn num(a: IpAddr) -> (u128, bool) {
    match a {
        IpAddr::V4(v) => (u128::from(u32::from(v)), false),
        IpAddr::V6(v) => (u128::from(v), true),
    }
}

fn addr(n: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(n))
    } else {
        IpAddr::V4(std::net::Ipv4Addr::from(
            u32::try_from(n).unwrap_or(u32::MAX),
        ))
    }
}

/// The part of `ts` inside `net`, if any (RFC 7296 §2.9 narrowing).
fn intersect(ts: &TrafficSelector, net: &IpNet) -> Option<TrafficSelector> {
    let ((s, v6), (e, v6e)) = (num(ts.start), num(ts.end));
    let ((ns, nv6), (ne, _)) = (num(net.network()), num(net.broadcast()));
    if v6 != v6e || v6 != nv6 {
        return None;
    }
    let (start, end) = (s.max(ns), e.min(ne));
    (start <= end).then(|| TrafficSelector {
        start: addr(start, v6),
        end: addr(end, v6),
        ..*ts
    })
}

fn inside(ts: &TrafficSelector, nets: &[IpNet]) -> bool {
    nets.iter()
        .any(|n| intersect(ts, n).is_some_and(|i| i == *ts))
}

fn narrow(tsr: &[TrafficSelector], nets: &[IpNet]) -> Vec<TrafficSelector> {
    let mut out: Vec<TrafficSelector> = Vec::new();
    for ts in tsr {
        for n in nets {
            if let Some(i) = intersect(ts, n).filter(|i| !out.contains(i)) {
                out.push(i);
            }
        }
    }
    out
}

/// Which tunnel a TSr asks for. A tunnel the client named ([`crate::child_sa::named_tunnel`])
/// is that tunnel, TSr narrowed into its prefixes (none left: none). Otherwise the TSr alone
/// decides: wholly inside the infrastructure prefixes is the infrastructure tunnel; otherwise
/// narrowed into the intranet prefixes, or failing that into the infrastructure ones; else
/// none (TS_UNACCEPTABLE).
pub(crate) fn choose_tunnel(
    tsr: &[TrafficSelector],
    named: Option<TunnelKind>,
    infrastructure: &[IpNet],
    intranet: &[IpNet],
) -> Option<(TunnelKind, Vec<TrafficSelector>)> {
    if let Some(kind) = named {
        let nets = match kind {
            TunnelKind::Infrastructure => infrastructure,
            TunnelKind::Intranet => intranet,
        };
        let narrowed = narrow(tsr, nets);
        return (!narrowed.is_empty()).then_some((kind, narrowed));
    }
    if !tsr.is_empty() && tsr.iter().all(|ts| inside(ts, infrastructure)) {
        return Some((TunnelKind::Infrastructure, tsr.to_vec()));
    }
    let narrowed = narrow(tsr, intranet);
    if !narrowed.is_empty() {
        return Some((TunnelKind::Intranet, narrowed));
    }
    let narrowed = narrow(tsr, infrastructure);
    (!narrowed.is_empty()).then_some((TunnelKind::Infrastructure, narrowed))
}

/// A child SA's TSi and TSr for a client whose inner addresses are `inner` (its IPv6 lease,
/// or its outer address) and `inner4` (its IPv4 lease): TSi narrowed to each (one selector
/// per address), IPv4 TSr kept only beside an IPv4 TSi of the lease (a client without one
/// cannot use them), an IPv4 TSi only beside IPv4 TSr, and IPv6 TSr dropped when only IPv4
/// TSi are left. `None` when nothing usable is left (TS_UNACCEPTABLE).
pub(crate) fn fit_selectors(
    tsi: &[TrafficSelector],
    mut tsr: Vec<TrafficSelector>,
    inner: IpAddr,
    inner4: Option<std::net::Ipv4Addr>,
) -> Option<(Vec<TrafficSelector>, Vec<TrafficSelector>)> {
    let is4 = |ts: &TrafficSelector| ts.start.is_ipv4();
    let mut tsi_own = narrow_tsi(tsi, inner);
    let mut tsi4 = inner4.map_or_else(Vec::new, |a| narrow_tsi(tsi, IpAddr::V4(a)));
    if tsi4.is_empty() {
        tsr.retain(|ts| !is4(ts));
    } else if !tsr.iter().any(is4) {
        tsi4.clear();
    } else if tsi_own.is_empty() {
        tsr.retain(is4);
    }
    if inner.is_ipv4() && inner4.is_some() {
        tsi_own.clear();
    }
    tsi_own.extend(tsi4);
    (!tsi_own.is_empty() && !tsr.is_empty()).then_some((tsi_own, tsr))
}

/// TSi narrowed to the client's inner address (one selector per TSi that covers it).
fn narrow_tsi(tsi: &[TrafficSelector], inner: IpAddr) -> Vec<TrafficSelector> {
    let n = num(inner);
    tsi.iter()
        .filter(|ts| {
            let ((s, v6), (e, _)) = (num(ts.start), num(ts.end));
            v6 == n.1 && s <= n.0 && n.0 <= e
        })
        .map(|ts| TrafficSelector {
            start: inner,
            end: inner,
            ..*ts
        })
        .take(1)
        .collect()
}

pub(super) fn selectors(list: &[TrafficSelector]) -> Vec<Selector> {
    list.iter()
        .map(|ts| Selector {
            start: ts.start,
            end: ts.end,
            protocol: ts.protocol,
            ports: ts.start_port..=ts.end_port,
        })
        .collect()
}
