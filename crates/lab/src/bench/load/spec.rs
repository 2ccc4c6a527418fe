//! SPEC.json of `gate64 bench load` (the contract in docs: `capacity-contract.md`): what the
//! generator runs and against which gate64.

use anyhow::{Context, Result, ensure};
use ipnet::{Ipv4Net, Ipv6Net};
use serde::Deserialize;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// The workload: the clients and the gate64 they connect to.
#[derive(Debug, Clone, Deserialize)]
pub struct Spec {
    /// Emulated clients, Teredo and IP-HTTPS together.
    pub clients: usize,
    /// The share of the clients on IP-HTTPS (0 to 1); the rest run Teredo.
    #[serde(default)]
    pub iphttps_share: f64,
    /// gate64's primary Teredo server address (RFC 4380 §5.2).
    pub teredo_server: Ipv4Addr,
    /// `https://host[:port]/path` of gate64's IP-HTTPS listener; required with IP-HTTPS
    /// clients.
    #[serde(default)]
    pub iphttps_url: Option<String>,
    /// The CA (PEM) gate64's IP-HTTPS certificate chains to.
    #[serde(default)]
    pub iphttps_ca: Option<PathBuf>,
    /// The name gate64's IP-HTTPS certificate carries, when the URL's host is an address.
    #[serde(default)]
    pub iphttps_server_name: Option<String>,
    /// Local IPv4 addresses the clients connect from: client `i` binds host `i % hosts` of
    /// this prefix, with a port of its own.
    pub source_v4: Ipv4Net,
    /// Where the IKE responder is and the PKI on both sides.
    pub ipsec: IpsecSpec,
    /// gate64's `[ipsec] pool6`: the clients' inner addresses, routed local (AnyIP).
    pub pool6: Ipv6Net,
    /// Corporate prefixes routed into the TUN device.
    pub corp_prefixes: Vec<Ipv6Net>,
    /// The TUN device carrying every client's inner traffic.
    pub tun: String,
    /// The TUN device carrying the Teredo clients' outer IPv4/UDP traffic (the underlay);
    /// default: `tun` with a `u` after it.
    #[serde(default)]
    pub underlay_tun: Option<String>,
    /// Each Teredo client on a kernel UDP socket of its own (one file descriptor per
    /// client), instead of the underlay device: for comparison.
    #[serde(default)]
    pub teredo_sockets: bool,
    /// Clients started per second (transport, then both IKE negotiations).
    #[serde(default = "default_connect_per_sec")]
    pub connect_per_sec: u32,
    /// Clients started and not yet up at most: the ramp waits below this, so that a slow
    /// gate64 is not flooded with set-ups that time out and retry (at most
    /// `setup_timeout_secs` per wait).
    #[serde(default = "default_max_setups_in_flight")]
    pub max_setups_in_flight: usize,
    /// A client not up (transport and both tunnels) this long after its start counts as
    /// failed (it keeps trying, and counts as up if it comes up later).
    #[serde(default = "default_setup_timeout_secs")]
    pub setup_timeout_secs: u64,
    /// Round trips each client makes through its tunnels once up, and the per-client gap
    /// they measure (STATUS.json's `probe_*` and `gap_*` fields); none without it.
    #[serde(default)]
    pub probe: Option<ProbeSpec>,
}

/// Targets a probe spec may name at most.
pub const MAX_PROBE_TARGETS: usize = 4;

/// The probes of [`Spec`]: a UDP datagram from each client's inner address to each target's
/// echo `port` every `interval_ms`.
#[derive(Debug, Clone, Deserialize)]
pub struct ProbeSpec {
    /// Corporate hosts answering UDP echo, one per tunnel to measure (at most 4).
    pub targets: Vec<Ipv6Addr>,
    /// Their echo port.
    #[serde(default = "default_probe_port")]
    pub port: u16,
    /// Milliseconds between two probes of one client to one target (at least 10).
    #[serde(default = "default_probe_interval_ms")]
    pub interval_ms: u64,
}

fn default_probe_port() -> u16 {
    7007
}

fn default_probe_interval_ms() -> u64 {
    500
}

/// The IPsec side of [`Spec`].
#[derive(Debug, Clone, Deserialize)]
pub struct IpsecSpec {
    /// gate64's IKE/ESP address (`[ipsec] endpoint`).
    pub endpoint: Ipv6Addr,
    /// The CA (PEM) gate64's IKE certificate chains to.
    pub ca: PathBuf,
    /// The CA gate64's `[ipsec] ca` trusts: each client gets a certificate of its own from it.
    pub client_ca_cert: PathBuf,
    /// That CA's private key (PEM).
    pub client_ca_key: PathBuf,
    /// Corporate prefixes asked for in the infrastructure tunnel (TSr); empty: `::/0`.
    /// gate64 tells the tunnels apart by them (its `infrastructure_prefixes`).
    #[serde(default)]
    pub infrastructure_ts: Vec<Ipv6Net>,
    /// Corporate prefixes asked for in the intranet tunnel; empty: `::/0`.
    #[serde(default)]
    pub intranet_ts: Vec<Ipv6Net>,
}

fn default_connect_per_sec() -> u32 {
    2000
}

fn default_max_setups_in_flight() -> usize {
    256
}

fn default_setup_timeout_secs() -> u64 {
    120
}

impl Spec {
    /// Reads and checks SPEC.json.
    pub fn load(path: &Path) -> Result<Spec> {
        let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let spec: Spec =
            serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))?;
        spec.check()
            .with_context(|| format!("checking {}", path.display()))?;
        Ok(spec)
    }

    /// Rejects values the generator cannot run with, naming the key.
    pub fn check(&self) -> Result<()> {
        ensure!(self.clients > 0, "`clients`: must be at least 1");
        ensure!(
            (0.0..=1.0).contains(&self.iphttps_share),
            "`iphttps_share`: {} is not between 0 and 1",
            self.iphttps_share
        );
        if self.iphttps_clients() > 0 {
            ensure!(
                self.iphttps_url.is_some(),
                "`iphttps_url`: required with iphttps_share > 0"
            );
        }
        ensure!(
            self.connect_per_sec > 0,
            "`connect_per_sec`: must be at least 1"
        );
        ensure!(!self.tun.is_empty(), "`tun`: empty device name");
        let underlay = self.underlay_name();
        ensure!(
            !underlay.is_empty() && underlay.len() < 16 && underlay != self.tun,
            "`underlay_tun`: {underlay:?} is no device name of its own (at most 15 bytes)"
        );
        ensure!(
            self.max_setups_in_flight > 0,
            "`max_setups_in_flight`: must be at least 1"
        );
        ensure!(
            self.setup_timeout_secs > 0,
            "`setup_timeout_secs`: must be at least 1"
        );
        if let Some(p) = &self.probe {
            ensure!(
                (1..=MAX_PROBE_TARGETS).contains(&p.targets.len()),
                "`probe.targets`: {} targets, want 1 to {}",
                p.targets.len(),
                MAX_PROBE_TARGETS
            );
            ensure!(
                p.interval_ms >= 10,
                "`probe.interval_ms`: must be at least 10"
            );
            ensure!(p.port > 0, "`probe.port`: must not be 0");
        }
        Ok(())
    }

    /// How many clients run IP-HTTPS.
    pub fn iphttps_clients(&self) -> usize {
        (self.clients as f64 * self.iphttps_share).round() as usize
    }

    /// Whether client `i` runs IP-HTTPS: spread evenly over the population, so both
    /// transports start together.
    pub fn is_iphttps(&self, i: usize) -> bool {
        let (n, k) = (self.clients, self.iphttps_clients());
        (i + 1) * k / n > i * k / n
    }

    /// The underlay device's name.
    pub fn underlay_name(&self) -> String {
        self.underlay_tun
            .clone()
            .unwrap_or_else(|| format!("{}u", self.tun))
    }

    /// The first host of `source_v4` and how many there are (all of a /31 or /32, otherwise
    /// without the network and broadcast addresses).
    fn source_hosts(&self) -> (u32, u64) {
        let net = self.source_v4;
        let (first, hosts) = match net.prefix_len() {
            31 | 32 => (0u32, 1u64 << (32 - net.prefix_len())),
            len => (1, (1u64 << (32 - len)) - 2),
        };
        (u32::from(net.network()) + first, hosts)
    }

    /// The source address of client `i`: host `i % hosts` of `source_v4`.
    pub fn source_of(&self, i: usize) -> Ipv4Addr {
        let (first, hosts) = self.source_hosts();
        Ipv4Addr::from(first + (i as u64 % hosts) as u32)
    }

    /// The UDP port of client `i`'s session number `attempt` on the underlay: the clients
    /// that share an address (`rounds` of them at most) have ports of their own, and a new
    /// session moves to another port (as a new socket would), so that no two sessions of the
    /// run hold the same address and port at once.
    pub fn port_of(&self, i: usize, attempt: u64) -> u16 {
        const FIRST: u64 = 1024;
        let span = u64::from(u16::MAX) + 1 - FIRST;
        let (_, hosts) = self.source_hosts();
        let rounds = (self.clients as u64).div_ceil(hosts).clamp(1, span);
        let round = (i as u64 / hosts) % rounds;
        let turns = span / rounds;
        u16::try_from(FIRST + round + (attempt % turns) * rounds).unwrap_or(u16::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{ "clients": 10, "iphttps_share": 0.3,
        "teredo_server": "192.0.2.1",
        "iphttps_url": "https://192.0.2.1:443/IPHTTPS", "iphttps_ca": "/ca.pem",
        "iphttps_server_name": "gate64.lab",
        "source_v4": "10.64.0.0/16",
        "ipsec": { "endpoint": "fd00:c0::1", "ca": "/ipsec-ca.pem",
                   "client_ca_cert": "/clients-ca.pem", "client_ca_key": "/clients-ca.key" },
        "pool6": "fd00:c1::/104",
        "corp_prefixes": ["fd00:c0::/64", "64:ff9b::/96"],
        "tun": "load0",
        "connect_per_sec": 2000 }"#;

    fn example() -> Spec {
        serde_json::from_str(EXAMPLE).unwrap()
    }

    #[test]
    fn the_contract_example_parses() {
        let s = example();
        s.check().unwrap();
        assert_eq!(s.clients, 10);
        assert_eq!(s.iphttps_clients(), 3);
        assert_eq!(s.setup_timeout_secs, 120);
        assert_eq!(s.max_setups_in_flight, 256);
        assert_eq!(s.corp_prefixes.len(), 2);
    }

    #[test]
    fn iphttps_clients_are_spread_and_counted_exactly() {
        let s = example();
        let picked: Vec<usize> = (0..s.clients).filter(|&i| s.is_iphttps(i)).collect();
        assert_eq!(picked.len(), 3);
        assert!(picked.windows(2).all(|w| w[1] - w[0] >= 3), "{picked:?}");
    }

    #[test]
    fn sources_skip_network_and_broadcast_and_wrap() {
        let mut s = example();
        s.source_v4 = "10.64.0.0/30".parse().unwrap();
        let got: Vec<Ipv4Addr> = (0..3).map(|i| s.source_of(i)).collect();
        let want: Vec<Ipv4Addr> = ["10.64.0.1", "10.64.0.2", "10.64.0.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(got, want);
        s.source_v4 = "10.64.0.7/32".parse().unwrap();
        assert_eq!(s.source_of(5), "10.64.0.7".parse::<Ipv4Addr>().unwrap());
    }

    #[test]
    fn ports_are_unique_per_address_across_clients_and_sessions() {
        let mut s = example();
        s.source_v4 = "10.64.0.0/30".parse().unwrap();
        s.clients = 7;
        let mut owner = std::collections::HashMap::new();
        for i in 0..s.clients {
            for attempt in [0, 1, 2, 9000] {
                let at = (s.source_of(i), s.port_of(i, attempt));
                assert!(at.1 >= 1024, "{at:?}");
                assert_eq!(*owner.entry(at).or_insert(i), i, "{at:?} of two clients");
            }
        }
        // Each client's four sessions have four ports.
        assert_eq!(owner.len(), 4 * s.clients);
        // Session 1 of a client moves off session 0's port.
        assert_ne!(s.port_of(0, 0), s.port_of(0, 1));
    }

    #[test]
    fn the_underlay_device_is_named_after_tun_unless_given() {
        let mut s = example();
        assert_eq!(s.underlay_name(), "load0u");
        s.underlay_tun = Some("outer0".into());
        assert_eq!(s.underlay_name(), "outer0");
        s.check().unwrap();
        s.underlay_tun = Some("load0".into());
        assert!(format!("{:#}", s.check().unwrap_err()).contains("underlay_tun"));
        s.underlay_tun = None;
        s.tun = "a-fifteen-byte0".into();
        assert!(format!("{:#}", s.check().unwrap_err()).contains("underlay_tun"));
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut s = example();
        s.iphttps_share = 1.5;
        assert!(format!("{:#}", s.check().unwrap_err()).contains("iphttps_share"));
        let mut s = example();
        s.iphttps_url = None;
        assert!(format!("{:#}", s.check().unwrap_err()).contains("iphttps_url"));
        let mut s = example();
        s.clients = 0;
        assert!(format!("{:#}", s.check().unwrap_err()).contains("clients"));
        let probe = |json: &str| {
            let mut s = example();
            s.probe = Some(serde_json::from_str(json).unwrap());
            s.check().map_err(|e| format!("{e:#}"))
        };
        assert!(
            probe(r#"{ "targets": [] }"#)
                .unwrap_err()
                .contains("probe.targets")
        );
        let five = r#"{ "targets": ["::1", "::2", "::3", "::4", "::5"] }"#;
        assert!(probe(five).unwrap_err().contains("probe.targets"));
        let fast = r#"{ "targets": ["::1"], "interval_ms": 5 }"#;
        assert!(probe(fast).unwrap_err().contains("probe.interval_ms"));
        probe(r#"{ "targets": ["::1", "::2"] }"#).unwrap();
    }
}
