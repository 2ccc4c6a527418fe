//! Configurations for the lab (`gate64 demo`), built in memory.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use ipnet::Ipv6Net;

use crate::{
    Config, Control, Corpnet, Dns64, Iphttps, Ipsec, Limits, Log, Metrics, Nat64, Server, Teredo,
    defaults,
};

impl Config {
    /// A valid configuration for the lab (`gate64 demo`), which runs without root: Teredo on
    /// the given loopback addresses and port, corporate prefix `2001:db8:c0::/48` with
    /// gate64 at `2001:db8:c0::1`, no route management, no metrics listener, and client
    /// traffic allowed without IPsec (`[ipsec] require = false`). IP-HTTPS is disabled; the
    /// demo sets `iphttps` to [`Config::lab_iphttps`] when it wants it. Not validated: a
    /// `port` of 0 fails [`Config::validate`].
    pub fn lab(teredo_primary: Ipv4Addr, teredo_secondary: Ipv4Addr, port: u16) -> Config {
        Config {
            server: Server::default(),
            teredo: Teredo {
                enabled: true,
                server_addresses: [teredo_primary, teredo_secondary],
                port,
                relay: true,
                lab_allow_loopback: true,
            },
            iphttps: Iphttps::default(),
            corpnet: Corpnet {
                tun: defaults::TUN.to_owned(),
                ipv6_prefixes: vec![
                    Ipv6Net::new(Ipv6Addr::new(0x2001, 0xdb8, 0xc0, 0, 0, 0, 0, 0), 48)
                        .expect("48 is a valid IPv6 prefix length"),
                ],
                ipv4_prefixes: Vec::new(),
                address6: Ipv6Addr::new(0x2001, 0xdb8, 0xc0, 0, 0, 0, 0, 1),
                mtu: defaults::MTU,
                manage_routes: false,
                tun_napi: defaults::TUN_NAPI,
            },
            ipsec: Ipsec {
                require: false,
                ..Ipsec::default()
            },
            nat64: Nat64::default(),
            dns64: Dns64::default(),
            metrics: Metrics {
                listen: None,
                allowed_hosts: Vec::new(),
            },
            limits: Limits::default(),
            log: Log::default(),
            gre: Default::default(),
            control: Control::default(),
            accounting: Default::default(),
            policy: Vec::new(),
            ha: None,
            written: Default::default(),
        }
    }

    /// An enabled `[iphttps]` section for the lab: the given listener and PEM files, client
    /// prefix `2001:db8:c1::/48` (next to [`Config::lab`]'s corporate `2001:db8:c0::/48`), no
    /// client CA, every other key at its default.
    pub fn lab_iphttps(listen: SocketAddr, certificate: PathBuf, private_key: PathBuf) -> Iphttps {
        Iphttps {
            enabled: true,
            listen,
            certificate: Some(certificate),
            private_key: Some(private_key),
            prefix: Some(
                Ipv6Net::new(Ipv6Addr::new(0x2001, 0xdb8, 0xc1, 0, 0, 0, 0, 0), 48)
                    .expect("48 is a valid IPv6 prefix length"),
            ),
            ..Iphttps::default()
        }
    }
}
