//! The files between the harness and the load generator (`gate64 bench load`), as the
//! contract between branches `capbench` and `capload` defines them: the harness writes
//! SPEC.json, the generator rewrites STATUS.json every second and, once ready, writes the
//! clients' inner addresses next to it (`STATUS.json.addresses`).

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

/// SPEC.json: what the generator builds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spec {
    /// Emulated clients in all.
    pub clients: usize,
    /// Share of them on IP-HTTPS (the rest on Teredo).
    pub iphttps_share: f64,
    /// gate64's primary Teredo server address (the secondary is the next address).
    pub teredo_server: String,
    /// The IP-HTTPS URL, e.g. `https://192.0.2.1:443/IPHTTPS`.
    pub iphttps_url: String,
    /// The CA that signed gate64's IP-HTTPS certificate.
    pub iphttps_ca: PathBuf,
    /// The TLS server name for IP-HTTPS.
    pub iphttps_server_name: String,
    /// The IPv4 prefix the clients' transport addresses come from (routed local in the
    /// generator's namespace).
    pub source_v4: String,
    /// IKEv2 settings.
    pub ipsec: SpecIpsec,
    /// gate64's `[ipsec] pool6`, routed local (AnyIP) in the generator's namespace.
    pub pool6: String,
    /// Prefixes the generator routes into its TUN.
    pub corp_prefixes: Vec<String>,
    /// The generator's TUN device.
    pub tun: String,
    /// Transport and IKE set-ups started per second.
    pub connect_per_sec: u32,
}

/// The `ipsec` object of [`Spec`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpecIpsec {
    /// gate64's IKE/ESP address.
    pub endpoint: String,
    /// The CA of gate64's IKE certificate.
    pub ca: PathBuf,
    /// The CA the generator issues client certificates under (`[ipsec] ca` trusts it).
    pub client_ca_cert: PathBuf,
    /// That CA's private key (PKCS#8 PEM).
    pub client_ca_key: PathBuf,
    /// What the infrastructure tunnel asks for (its TSr); gate64 tells the tunnels apart by
    /// them (its `infrastructure_prefixes`).
    #[serde(default)]
    pub infrastructure_ts: Vec<String>,
    /// What the intranet tunnel asks for.
    #[serde(default)]
    pub intranet_ts: Vec<String>,
}

/// STATUS.json: the generator's progress. The generator (`bench load`) writes it, the
/// harness reads it: one type for both ends, so a field cannot drift between them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Status {
    /// Clients asked for.
    pub clients: u64,
    /// Teredo clients qualified.
    pub teredo_up: u64,
    /// IP-HTTPS clients linked.
    pub iphttps_up: u64,
    /// IKE SAs established (main mode SAs in the reference's words).
    pub mmsa: u64,
    /// Child SAs established (quick mode SAs).
    pub qmsa: u64,
    /// Clients not up within the setup timeout (still trying).
    pub failed: u64,
    /// Every client is done (up or failed).
    pub ready: bool,
    /// Packets read from gate64 and written to the generator's TUN device.
    pub rx_packets: u64,
    /// Packets read from the generator's TUN device and sent to gate64.
    pub tx_packets: u64,
    /// ESP packets that failed to open.
    pub esp_errors: u64,
    /// Packets from the generator's TUN device dropped because their client's queue was full.
    pub uplink_dropped: u64,
    /// Packets a client's SAs opened that the kernel did not take from the TUN device.
    pub tun_write_failed: u64,
    /// The generator's resident memory.
    pub rss_bytes: u64,
    /// The generator's CPU time, user and system.
    pub cpu_seconds: f64,
    /// Clients started so far.
    pub started: u64,
    /// Clients with transport and both tunnels up.
    pub up: u64,
    /// Packets from the generator's TUN device whose source is no client's.
    pub unknown_source: u64,
    /// Client sessions that ended (and were started again).
    pub session_errors: u64,
    /// Packets from the generator's underlay device (the Teredo clients' outer datagrams)
    /// that were no whole IPv4/UDP datagram or were for no client's address and port.
    pub underlay_refused: u64,
    /// Datagrams the underlay dropped: a client's queue full, or a write to the device
    /// failed.
    pub underlay_dropped: u64,
    /// Seconds since the generator started.
    pub elapsed_seconds: f64,
    /// The generator's resident memory before the first client started: `rss_bytes` minus
    /// this, over the clients, is its memory per client.
    pub rss_start_bytes: u64,
    /// Seconds from the start until `ready` first held (0 before).
    pub ready_seconds: f64,
    /// IKE negotiations (IKE_SA_INIT and IKE_AUTH) the clients completed, two per client
    /// set-up; more when a client negotiated again (a lost SA, a new session, a renewal).
    pub ike_negotiations: u64,
    /// Probes (SPEC.json's `probe`) sent through the clients' tunnels.
    pub probe_sent: u64,
    /// Probe echoes received through the clients' tunnels.
    pub probe_received: u64,
    /// Clients whose every probe target answered at least once: the gap figures are theirs.
    pub probe_clients: u64,
    /// Clients started and not yet answered by every probe target.
    pub probe_never: u64,
    /// Measured clients with a target silent now for longer than two probe intervals and a
    /// second.
    pub probe_silent: u64,
    /// Seconds since the probes' measuring window started (the start, or the last SIGUSR1).
    pub probe_window_seconds: f64,
    /// Per client, the longest wait between two echoes of one target in the window (or the
    /// silence now, if longer), in seconds: the smallest over the measured clients.
    pub gap_min_seconds: f64,
    /// The median of the clients' gaps.
    pub gap_p50_seconds: f64,
    /// The 90th percentile of the clients' gaps.
    pub gap_p90_seconds: f64,
    /// The 99th percentile of the clients' gaps.
    pub gap_p99_seconds: f64,
    /// The largest of the clients' gaps.
    pub gap_max_seconds: f64,
    /// Times a client's task took its queued uplink (packets from the generator's TUN
    /// device, probes included) [`SLOW_UPLINK_MS`] or more after the first of them was
    /// queued: the generator itself was behind for that client.
    pub uplink_slow: u64,
    /// The longest such wait, in milliseconds.
    pub uplink_longest_wait_ms: u64,
    /// Clients whose queued uplink has waited [`SLOW_UPLINK_MS`] or more now, untaken.
    pub uplink_waiting: u64,
    /// The last [`SLOW_UPLINKS_KEPT`] slow takes, oldest first.
    pub slow_uplinks: Vec<SlowUplink>,
}

/// Milliseconds since the Unix epoch: the clock the generator's slow uplinks and the
/// harness's probe share.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A wait of a client's queued uplink that counts as slow, in milliseconds.
pub const SLOW_UPLINK_MS: u64 = 1000;
/// Slow takes [`Status::slow_uplinks`] lists.
pub const SLOW_UPLINKS_KEPT: usize = 32;

/// One slow take of a client's queued uplink ([`Status::slow_uplinks`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SlowUplink {
    /// The client's inner address, if it had one.
    pub inner: Option<Ipv6Addr>,
    /// Its transport.
    pub transport: Transport,
    /// When its task took the uplink, in milliseconds since the Unix epoch (to line it up
    /// with a probe failure's time).
    pub taken_unix_ms: u64,
    /// How long the first packet waited.
    pub waited_ms: u64,
    /// How long before the take its session last handed it a packet (`None`: never), to
    /// within the generator's status interval (one second): the per-packet stamp reads a
    /// clock that the status write moves.
    pub since_delivery_ms: Option<u64>,
}

impl Status {
    /// Reads STATUS.json; `None` while the generator has not written it yet.
    pub fn read(path: &Path) -> Result<Option<Status>> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("parsing {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
}

/// Which transport a client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Teredo (RFC 4380).
    Teredo,
    /// IP-HTTPS.
    Iphttps,
}

impl Transport {
    /// The name in the ADDRESSES file ([`parse_addresses`] reads it back).
    pub fn label(self) -> &'static str {
        match self {
            Transport::Teredo => "teredo",
            Transport::Iphttps => "iphttps",
        }
    }
}

/// One line of the addresses file: a client with both tunnels up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress {
    /// Its inner address (from `pool6`).
    pub inner: Ipv6Addr,
    /// Its transport.
    pub transport: Transport,
}

/// The addresses file of a STATUS.json path.
pub fn addresses_path(status: &Path) -> PathBuf {
    let mut s = status.as_os_str().to_owned();
    s.push(".addresses");
    PathBuf::from(s)
}

/// Parses the addresses file: `<inner IPv6> <teredo|iphttps>` per line; blank lines are
/// skipped.
pub fn parse_addresses(text: &str) -> Result<Vec<ClientAddress>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        let Some(addr) = words.next() else { continue };
        let inner: Ipv6Addr = addr
            .parse()
            .with_context(|| format!("line {}: {addr:?} is not an IPv6 address", n + 1))?;
        let transport = match words.next() {
            Some("teredo") => Transport::Teredo,
            Some("iphttps") => Transport::Iphttps,
            other => bail!(
                "line {}: transport {other:?}: expected teredo or iphttps",
                n + 1
            ),
        };
        out.push(ClientAddress { inner, transport });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_of_the_contract_parses() {
        let json = r#"{ "clients": 3, "teredo_up": 2, "iphttps_up": 1, "mmsa": 6, "qmsa": 6,
            "failed": 0, "ready": true, "rx_packets": 10, "tx_packets": 12, "esp_errors": 0,
            "rss_bytes": 4096, "cpu_seconds": 0.5 }"#;
        let s: Status = serde_json::from_str(json).unwrap();
        assert_eq!((s.teredo_up, s.iphttps_up, s.mmsa, s.qmsa), (2, 1, 6, 6));
        assert!(s.ready);
        assert_eq!(s.cpu_seconds, 0.5);
    }

    #[test]
    fn spec_serializes_the_contract_fields() {
        let spec = Spec {
            clients: 10,
            iphttps_share: 0.3,
            teredo_server: "192.0.2.1".into(),
            iphttps_url: "https://192.0.2.1:443/IPHTTPS".into(),
            iphttps_ca: "/x/ca.pem".into(),
            iphttps_server_name: "gate64.lab".into(),
            source_v4: "100.64.0.0/16".into(),
            ipsec: SpecIpsec {
                endpoint: "2001:db8:100::1".into(),
                ca: "/x/ca.pem".into(),
                client_ca_cert: "/x/clients-ca.pem".into(),
                client_ca_key: "/x/clients-ca.key".into(),
                infrastructure_ts: vec!["2001:db8:100:1::2/128".into()],
                intranet_ts: vec!["2001:db8:100::/48".into()],
            },
            pool6: "fd00:c1::/104".into(),
            corp_prefixes: vec!["2001:db8:100::/48".into()],
            tun: "load0".into(),
            connect_per_sec: 2000,
        };
        let v: serde_json::Value = serde_json::to_value(&spec).unwrap();
        for key in [
            "clients",
            "iphttps_share",
            "teredo_server",
            "iphttps_url",
            "iphttps_ca",
            "iphttps_server_name",
            "source_v4",
            "pool6",
            "corp_prefixes",
            "tun",
            "connect_per_sec",
        ] {
            assert!(v.get(key).is_some(), "{key} missing: {v}");
        }
        for key in ["endpoint", "ca", "client_ca_cert", "client_ca_key"] {
            assert!(v["ipsec"].get(key).is_some(), "ipsec.{key} missing: {v}");
        }
    }

    #[test]
    fn addresses_parse_and_refuse_garbage() {
        let a = parse_addresses("fd00:c1::2 teredo\n\nfd00:c1::3 iphttps\n").unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].transport, Transport::Iphttps);
        assert!(parse_addresses("fd00:c1::2 gre\n").is_err());
        assert!(parse_addresses("nonsense teredo\n").is_err());
        assert_eq!(
            addresses_path(Path::new("/t/STATUS.json")),
            PathBuf::from("/t/STATUS.json.addresses")
        );
    }
}
