//! What each part of the daemon is built from: the configuration turned into the dataplane's
//! settings (gate64's own addresses, the corporate prefixes, the IPsec endpoint and pool),
//! the NAT64 engine and the IP-HTTPS server's settings and /64 pool.

use anyhow::Result;
use gate64_config::{Config, IpsecClientEku, IpsecCrlExpired};
use gate64_dataplane::{DataplaneConfig, Ipsec4, Prefix, Prefix4};
use gate64_ike::auth::ClientEku;
use gate64_teredo::{RelayConfig, ServerConfig};
use std::sync::Arc;
use std::time::Duration;

/// NAT64 table shards. Ports are dealt to shards in blocks, and a client's flows stay in its
/// shard, so each shard holds 1/16 of every pool4 address's ports (4,032 of 64,512): enough
/// for any one client, and 16 locks keep workers apart.
const NAT64_SHARDS: usize = 16;

/// Builds the NAT64 engine from `[nat64]` (None when off).
pub fn nat64_engine(cfg: &Config) -> Result<Option<Arc<gate64_nat64::Nat64>>> {
    use gate64_nat64::state;
    let n = &cfg.nat64;
    if !n.enabled {
        return Ok(None);
    }
    let prefix = gate64_nat64::Prefix::new(n.prefix.network(), n.prefix.prefix_len())
        .map_err(|e| anyhow::anyhow!("nat64.prefix = {}: {e:?}", n.prefix))?
        .allow_private(n.allow_private_ipv4);
    let pool4: Vec<std::net::Ipv4Addr> = n.pool4.iter().flat_map(|net| net.hosts()).collect();
    // A random key per process (RFC 6056 §3.3.3): port choices are not predictable.
    let hash_key = {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    let table = state::Config {
        pool4,
        ports: (n.ports[0], n.ports[1]),
        shards: NAT64_SHARDS,
        hash_key,
        max_iterations: 4096,
        timers: state::Timers {
            udp: Duration::from_secs(n.udp_timeout_secs),
            tcp_est: Duration::from_secs(n.tcp_established_timeout_secs),
            tcp_trans: Duration::from_secs(n.tcp_transitory_timeout_secs),
            icmp: Duration::from_secs(n.icmp_timeout_secs),
        },
        filtering: match n.filtering {
            gate64_config::Nat64Filtering::EndpointIndependent => {
                state::Filtering::EndpointIndependent
            }
            gate64_config::Nat64Filtering::AddressDependent => state::Filtering::AddressDependent,
        },
        max_sessions: n.max_sessions,
        max_sessions_per_client: n.max_sessions_per_client,
        max_ports_per_client: n.max_ports_per_client,
        clients_per_share: state::FAIR_CLIENTS_PER_SHARE,
        events: n.binding_log.is_some(),
        // Each IPsec client holds one /128 of the pool: a client of its own for the limits.
        address_pools: cfg
            .ipsec
            .pool6
            .iter()
            .map(|p| (p.network(), p.prefix_len()))
            .collect(),
    };
    let translate = gate64_nat64::translate::Config {
        ipv4_mtu: n.ipv4_mtu,
        // The TUN's MTU is the IPv6 link MTU gate64 offers; clients behind Teredo or IP-HTTPS
        // see 1280 and size their segments accordingly.
        ipv6_mtu: u32::from(cfg.corpnet.mtu),
        ..gate64_nat64::translate::Config::default()
    };
    let nat = gate64_nat64::Nat64::new(gate64_nat64::Settings {
        prefix,
        table,
        translate,
    })
    .map_err(|e| anyhow::anyhow!("building the NAT64 tables from [nat64]: {e}"))?;
    Ok(Some(Arc::new(nat)))
}

/// Maps the admin's configuration onto the dataplane's.
pub fn dataplane_config(cfg: &Config) -> DataplaneConfig {
    let teredo = cfg.teredo.enabled.then(|| ServerConfig {
        primary: cfg.teredo_primary(),
        secondary: cfg.teredo_secondary(),
        port: cfg.teredo.port,
        allow_loopback: cfg.teredo.lab_allow_loopback,
        mtu_option: Some(1280),
    });
    let relay = RelayConfig {
        peer_lifetime: Duration::from_secs(cfg.limits.peer_idle_timeout_secs),
        queue_packets: cfg.limits.relay_queue_packets,
        max_peers: cfg.limits.max_teredo_peers,
        max_peers_per_ipv4: cfg.limits.max_teredo_peers_per_ipv4,
        relay_per_source_per_sec: cfg.limits.teredo_relay_per_source_per_sec,
        relay_per_destination_per_sec: cfg.limits.teredo_relay_per_destination_per_sec,
        ..RelayConfig::default()
    };
    DataplaneConfig {
        teredo,
        relay,
        corp_prefixes: cfg
            .corpnet
            .ipv6_prefixes
            .iter()
            .map(|n| Prefix::new(n.network(), n.prefix_len()))
            .collect(),
        corp_address: cfg.corpnet.address6,
        self_addresses: self_addresses(cfg),
        dns64_listen: cfg.dns64.listen_addresses(cfg.corpnet.address6),
        require_ipsec: cfg.ipsec.require,
        ipsec_endpoint: cfg.ipsec.configured().then(|| cfg.ipsec_endpoint()),
        ipsec4: cfg
            .ipsec
            .pool4
            .filter(|_| cfg.ipsec.configured())
            .map(|n| Ipsec4 {
                pool: Prefix4::new(n.network(), n.prefix_len()),
                peer_pool: (cfg.ha.as_ref().and_then(|ha| ha.peer_pool4))
                    .map(|n| Prefix4::new(n.network(), n.prefix_len())),
                corp_prefixes: cfg
                    .corpnet
                    .ipv4_prefixes
                    .iter()
                    .map(|n| Prefix4::new(n.network(), n.prefix_len()))
                    .collect(),
            }),
        ipsec_pool: cfg
            .ipsec
            .pool6
            .filter(|_| cfg.ipsec.configured())
            .map(|n| Prefix::new(n.network(), n.prefix_len())),
        // One database for every thread that opens or seals (UDP workers, IP-HTTPS
        // threads) and the IKE driver that fills it.
        sadb: cfg
            .ipsec
            .configured()
            .then(|| Arc::new(gate64_esp::SaDb::new())),
        ike_per_client_per_sec: cfg.ipsec.ike_packets_per_source_per_sec,
        rs_per_sec: cfg.limits.rs_per_source_per_sec,
        rs_burst: cfg.limits.rs_burst,
        iphttps_prefix: iphttps_pool(cfg).map(|(p, l)| Prefix::new(p, l)),
        iphttps_peer_prefix: iphttps_peer_prefix(cfg).map(|(p, l)| Prefix::new(p, l)),
        nat64: None,
        binding_log: None,
    }
}

/// gate64's own addresses the config names besides `corpnet.address6`: a client's packet to
/// one of them is traffic to gate64 itself (the dataplane's to-self rule). Wildcard listeners
/// name none; `check-config` warns about a wildcard metrics listener.
pub(crate) fn self_addresses(cfg: &Config) -> Vec<std::net::IpAddr> {
    let mut out: Vec<std::net::IpAddr> = Vec::new();
    if cfg.teredo.enabled {
        out.extend(
            cfg.teredo
                .server_addresses
                .iter()
                .map(|a| std::net::IpAddr::V4(*a)),
        );
    }
    if cfg.iphttps.enabled {
        out.push(cfg.iphttps.listen.ip());
    }
    if cfg.dns64.enabled {
        out.extend(cfg.dns64.listen.iter().map(|l| l.ip()));
    }
    out.extend(cfg.metrics.listen.map(|l| l.ip()));
    if cfg.ipsec.configured() {
        out.push(cfg.ipsec_endpoint().into());
    }
    // Loopback is host-local: NAT64 refuses it as such (nat64_bad_address).
    out.retain(|a| !a.is_unspecified() && !a.is_loopback());
    out.sort_unstable();
    out.dedup();
    out
}

pub(crate) fn iphttps_pool(cfg: &Config) -> Option<(std::net::Ipv6Addr, u8)> {
    let i = &cfg.iphttps;
    i.enabled
        .then_some(i.prefix)
        .flatten()
        .map(|n| (n.network(), n.prefix_len()))
}

/// The HA peer's IP-HTTPS pool (`ha.peer_iphttps_prefix`) while this node's IP-HTTPS is on.
pub(crate) fn iphttps_peer_prefix(cfg: &Config) -> Option<(std::net::Ipv6Addr, u8)> {
    iphttps_pool(cfg)?;
    let n = cfg.ha.as_ref()?.peer_iphttps_prefix?;
    Some((n.network(), n.prefix_len()))
}

/// The IP-HTTPS protocol settings from `[iphttps]` and `[limits]`.
pub(crate) fn iphttps_settings(cfg: &Config) -> Option<gate64_io::iphttps::Settings> {
    let (prefix, prefix_len) = iphttps_pool(cfg)?;
    let i = &cfg.iphttps;
    // 0 = never: a century is "never" for a connection and keeps Instant arithmetic safe.
    let idle = match i.idle_timeout_secs {
        0 => Duration::from_secs(100 * 365 * 86_400),
        s => Duration::from_secs(s),
    };
    let proto = gate64_iphttps::server::ServerConfig {
        path: i.path.clone(),
        prefix,
        prefix_len,
        idle_timeout: idle,
        request_timeout: Duration::from_secs(cfg.limits.tls_handshake_timeout_secs),
        ra_interval: Duration::from_secs(i.ra_interval_secs),
        ..gate64_iphttps::server::ServerConfig::default()
    };
    Some(gate64_io::iphttps::Settings {
        proto,
        max_handshakes: cfg.limits.max_tls_handshakes,
        handshake_timeout: Duration::from_secs(cfg.limits.tls_handshake_timeout_secs),
        max_connections: cfg.limits.max_iphttps_connections,
        send_queue_bytes: i.send_queue_bytes,
        queue_budget_bytes: i.queue_budget_bytes,
        write_timeout: Duration::from_secs(i.write_timeout_secs),
        client_hello_timeout: Duration::from_secs(i.client_hello_timeout_secs),
        max_handshakes_per_source: i.max_handshakes_per_source,
        max_handshakes_per_network: i.max_handshakes_per_network,
        max_connections_per_source: i.max_connections_per_source,
        lease_hints: None,
        peer_prefix: iphttps_peer_prefix(cfg),
    })
}

/// Whether `ipsec.crl_expired` refuses the certificates of a CA whose CRL is past its
/// nextUpdate (IKE and IP-HTTPS alike).
pub fn crl_expired_refuses(cfg: &Config) -> bool {
    cfg.ipsec.crl_expired == IpsecCrlExpired::Refuse
}

/// `ipsec.client_eku` as the IKE crate's rule.
pub fn client_eku(cfg: &Config) -> ClientEku {
    match cfg.ipsec.client_eku {
        IpsecClientEku::Strict => ClientEku::Strict,
        IpsecClientEku::Any => ClientEku::Any,
    }
}
