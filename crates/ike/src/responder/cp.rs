//! The configuration payload's reply (RFC 7296 §3.15.1): the inner addresses a client was
//! leased, and what else its CFG_REQUEST asks for that the configuration has.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::child_sa::TunnelKind;
use crate::message::{CfgAttribute, Configuration, Payload, cfg};

/// The CP reply for a CFG_REQUEST (RFC 7296 §3.15.1): the leased inner address (`leased`,
/// with prefix length 128) when asked for, and what else the request asks for that the
/// configuration has: INTERNAL_IP6_DNS, one per server; INTERNAL_DNS_DOMAIN (RFC 8598), one
/// per domain, only beside DNS servers; INTERNAL_IP6_SUBNET, one per IPv6 prefix of
/// `tunnel`. With an IPv4 lease (`leased4`): INTERNAL_IP4_ADDRESS, and when asked
/// INTERNAL_IP4_DNS (the IPv4 servers) and INTERNAL_IP4_SUBNET (address and netmask, one
/// per IPv4 prefix of `tunnel`). `None` when there is nothing to say.
pub(crate) fn cfg_reply(
    request: &Configuration,
    (leased, leased4): (Option<IpAddr>, Option<std::net::Ipv4Addr>),
    tunnel: TunnelKind,
    config: &super::ResponderConfig,
) -> Option<Payload> {
    let mut attributes = Vec::new();
    let dns4: &[std::net::Ipv4Addr] = if leased4.is_some() { &config.dns4 } else { &[] };
    if let Some(a) = leased4 {
        attributes.push(CfgAttribute {
            kind: cfg::INTERNAL_IP4_ADDRESS,
            value: a.octets().to_vec(),
        });
        if request.has(cfg::INTERNAL_IP4_DNS) {
            attributes.extend(dns4.iter().map(|d| CfgAttribute {
                kind: cfg::INTERNAL_IP4_DNS,
                value: d.octets().to_vec(),
            }));
        }
    }
    if let Some(IpAddr::V6(a)) = leased {
        let mut value = a.octets().to_vec();
        value.push(128);
        attributes.push(CfgAttribute {
            kind: cfg::INTERNAL_IP6_ADDRESS,
            value,
        });
    }
    if request.has(cfg::INTERNAL_IP6_DNS) {
        attributes.extend(config.dns.iter().map(|d| CfgAttribute {
            kind: cfg::INTERNAL_IP6_DNS,
            value: d.octets().to_vec(),
        }));
    }
    if request.has(cfg::INTERNAL_DNS_DOMAIN) && !(config.dns.is_empty() && dns4.is_empty()) {
        attributes.extend(config.dns_domains.iter().map(|d| CfgAttribute {
            kind: cfg::INTERNAL_DNS_DOMAIN,
            value: d.as_bytes().to_vec(),
        }));
    }
    if request.has(cfg::INTERNAL_IP6_SUBNET) {
        let prefixes = match tunnel {
            TunnelKind::Infrastructure => &config.infrastructure_prefixes,
            TunnelKind::Intranet => &config.intranet_prefixes,
        };
        attributes.extend(prefixes.iter().filter_map(|p| match p {
            IpNet::V6(p) => {
                let mut value = p.network().octets().to_vec();
                value.push(p.prefix_len());
                Some(CfgAttribute {
                    kind: cfg::INTERNAL_IP6_SUBNET,
                    value,
                })
            }
            IpNet::V4(_) => None,
        }));
    }
    if leased4.is_some() && request.has(cfg::INTERNAL_IP4_SUBNET) {
        let prefixes = match tunnel {
            TunnelKind::Infrastructure => &config.infrastructure_prefixes,
            TunnelKind::Intranet => &config.intranet_prefixes,
        };
        attributes.extend(prefixes.iter().filter_map(|p| match p {
            IpNet::V4(p) => {
                let mut value = p.network().octets().to_vec();
                value.extend(p.netmask().octets());
                Some(CfgAttribute {
                    kind: cfg::INTERNAL_IP4_SUBNET,
                    value,
                })
            }
            IpNet::V6(_) => None,
        }));
    }
    (!attributes.is_empty()).then_some(Payload::Cp(Configuration {
        kind: cfg::REPLY,
        attributes,
    }))
}
