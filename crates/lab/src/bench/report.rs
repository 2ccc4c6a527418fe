//! What `gate64 bench capacity` reports: one [`Row`] per measured client count (the JSON
//! fields readers of `--json` rely on: `clients`, `teredo`, `iphttps`, `corpnet_mbps`,
//! `internet_mbps`, `cpu_percent`, `gate64_rss_bytes`, `qmsa`, `mmsa`, and more), printed as
//! a table in the columns of the Windows Server 2012 DirectAccess reference, beside its rows.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

use super::traffic::Paths;

/// One load step of the capacity search.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Step {
    /// Offered load of the bulk flows, Mbit/s.
    pub offered_mbps: f64,
    /// Loss < the bound, latency bounded, every TCP flow done and on schedule.
    pub passed: bool,
    /// Why it did not pass.
    pub failure: Option<String>,
    /// Bytes through gate64's corporate interface (both directions) per second, Mbit/s.
    pub corpnet_mbps: f64,
    /// Bytes through gate64's client-facing interfaces (both directions), Mbit/s.
    pub internet_mbps: f64,
    /// Payload the flows moved, Mbit/s.
    pub goodput_mbps: f64,
    /// gate64's own CPU, percent of one core.
    pub cpu_percent: f64,
    /// The load generator's CPU, percent of one core.
    pub generator_cpu_percent: f64,
    /// The kernel threads that receive for gate64's host: GRO and forwarding of what gate64
    /// writes to its TUN (`napi/gate64-N`) and of what reaches its veths (`napi/vload-N`,
    /// `napi/vcorp-N`): softirq of gate64's host, outside its own CPU. Percent of one core.
    pub napi_cpu_percent: f64,
    /// The kernel threads that receive for the lab's clients and corporate host
    /// (`napi/vsrv-N`), not gate64's. Percent of one core.
    pub lab_napi_cpu_percent: f64,
    /// The whole machine, percent of one core (200 = both cores busy).
    pub machine_cpu_percent: f64,
    /// Of which softirq.
    pub softirq_percent: f64,
    /// UDP round-trip loss, percent.
    pub loss_percent: f64,
    /// UDP round trip, median, ms.
    pub rtt_p50_ms: f64,
    /// UDP round trip, 99th percentile, ms.
    pub rtt_p99_ms: f64,
    /// TCP bytes delivered over bytes offered.
    pub tcp_completion: f64,
    /// gate64's RSS at the end of the step.
    pub gate64_rss_bytes: u64,
    /// Packets dropped during the step and where: the kernel's UDP buffer errors and
    /// interface drops per namespace (`tload/...`, `tsrv/...`, `tcorp/...`), gate64's
    /// `gate64_drops_total` by reason (`gate64/REASON`) and the generator's own
    /// (`generator/...`); only what grew.
    pub drops: BTreeMap<String, u64>,
    /// What each claimed path (DNS64, NAT64, native IPv6, each transport) carried in the step.
    pub paths: Paths,
    /// The claimed paths that did not work in the step (empty when all did).
    pub path_failures: Vec<String>,
}

/// One measured point: the figures of the highest passing step at this client count.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Row {
    /// The machine.
    pub hardware: String,
    /// Clients connected (transport up; the generator's count plus the third-party client).
    /// Whether their tunnels carry traffic: `clients_passed_traffic`, `qmsa`.
    pub clients: u64,
    /// Of which on Teredo.
    pub teredo: u64,
    /// Of which on IP-HTTPS.
    pub iphttps: u64,
    /// Emulated clients asked for.
    pub clients_requested: u64,
    /// Clients the generator gave up on.
    pub clients_failed: u64,
    /// Capacity: corporate-side Mbit/s of the highest passing step (0 if none passed).
    pub corpnet_mbps: f64,
    /// Client-side (outer, encapsulated) Mbit/s of that step.
    pub internet_mbps: f64,
    /// Offered load of that step, Mbit/s.
    pub offered_mbps: f64,
    /// gate64's own CPU during that step, percent of one core (200 = both cores).
    pub cpu_percent: f64,
    /// Corporate Mbit/s per busy core of gate64's own (its CPU-seconds).
    pub corpnet_mbps_per_gate64_core: f64,
    /// CPU of the kernel threads that receive for gate64's host (its TUN's NAPI and its
    /// veths'), during that step, percent of one core: stated beside its own.
    pub napi_cpu_percent: f64,
    /// CPU of the kernel threads that receive for the lab's clients and corporate host
    /// during that step, percent of one core: the machine's, not gate64's.
    pub lab_napi_cpu_percent: f64,
    /// Corporate Mbit/s per core of gate64's own CPU and its host's NAPI threads together.
    pub corpnet_mbps_per_core_with_napi: f64,
    /// Whole-machine CPU during that step, percent of one core.
    pub machine_cpu_percent: f64,
    /// Of which softirq.
    pub softirq_percent: f64,
    /// The load generator's CPU during that step, percent of one core.
    pub generator_cpu_percent: f64,
    /// gate64's RSS at the end of that step.
    pub gate64_rss_bytes: u64,
    /// gate64's RSS with every client connected, before any bulk traffic.
    pub gate64_rss_idle_bytes: u64,
    /// `gate64_rss_idle_bytes` / clients.
    pub rss_per_client_bytes: u64,
    /// Background with every client connected and no bulk traffic (keepalives, liveness
    /// checks, rekeying): corporate-side Mbit/s.
    pub idle_corpnet_mbps: f64,
    /// The same on the client-facing side.
    pub idle_internet_mbps: f64,
    /// gate64's own CPU meanwhile, percent of one core.
    pub idle_cpu_percent: f64,
    /// Child SAs (`gate64_ipsec_qmsa`).
    pub qmsa: u64,
    /// IKE SAs (`gate64_ipsec_mmsa`).
    pub mmsa: u64,
    /// Child SAs the load generator counts up on its side (they should match gate64's,
    /// minus the third-party client's).
    pub generator_qmsa: u64,
    /// IKE SAs the load generator counts up on its side.
    pub generator_mmsa: u64,
    /// UDP loss and latency of that step.
    pub loss_percent: f64,
    /// UDP round trip, 99th percentile, ms.
    pub rtt_p99_ms: f64,
    /// Emulated clients that sent a probe.
    pub clients_probed: u64,
    /// Emulated clients whose probe came back through their tunnel (in the first round, 512
    /// clients probed at once, or in the second, the first round's failures probed again a
    /// few at a time).
    pub clients_passed_traffic: u64,
    /// Of which in the first round.
    pub clients_passed_first_round: u64,
    /// Of the first round's echoes, how many came on the first, second, third try (each try
    /// waits 2 s): echoes after the first try are probes lost on the way.
    pub probe_answered_at_try: Vec<u64>,
    /// Clients probed again in the second round.
    pub clients_reprobed: u64,
    /// Up to 20 clients the first round did not reach: which, why, and whether the second did.
    pub probe_failures: Vec<super::traffic::ProbeFailure>,
    /// Counters that grew while every client was probed: the keys of `Step::drops`, gate64's
    /// counters of drops, errors, refusals and IKE events (`gate64/NAME{LABELS}`), and the
    /// generator's packets from an unknown source, session errors, IKE negotiations and
    /// slow takes of a client's queued uplink.
    pub probe_drops: BTreeMap<String, u64>,
    /// The generator's slow takes of a client's queued uplink (the probe's datagram, for
    /// one) while every client was probed, up to the last 32: a probe failure with one of
    /// its client's here was the generator's own delay, not gate64's.
    pub probe_slow_uplinks: Vec<super::spec::SlowUplink>,
    /// The third-party client (miredo + strongSwan) pinged the corporate host through its
    /// tunnel; `None` when not run.
    pub third_party_ok: Option<bool>,
    /// Why the DNS64 lookup from inside a tunnel failed.
    pub dns64_error: Option<String>,
    /// `--nat64-fallback` was given: a NAT64 share whose DNS64 lookup failed went to the
    /// synthesized address directly (DNS64 is still reported failed).
    pub nat64_fallback: bool,
    /// `--nic-receive` was given: the veths had a NIC's receive path, and `napi_cpu_percent`
    /// includes `tsrv`'s veths' receive as well as the TUN's.
    pub nic_receive: bool,
    /// `--tun-napi` was given: gate64's TUN handed its writes to NAPI kernel threads
    /// (`corpnet.tun_napi`), whose CPU is in `napi_cpu_percent`.
    pub tun_napi: bool,
    /// What each claimed path carried when every client was probed.
    pub probe_paths: Paths,
    /// Every claimed path that did not work, in the probe (`probe: ...`) or a step
    /// (`step N Mbit/s: ...`); empty when all did. The run exits non-zero when it is not.
    pub path_failures: Vec<String>,
    /// Why this point could not be measured (a `--sweep` goes on to the next).
    pub error: Option<String>,
    /// Seconds every client was held connected before the measurement.
    pub hold_seconds: u64,
    /// Every step of the search, in order.
    pub steps: Vec<Step>,
}

impl Row {
    /// One line per client the probe's first round missed: whether the generator was late
    /// taking its uplink (a slow take of that client in `probe_slow_uplinks`) or took it on
    /// time, so that the datagram left the generator.
    pub fn probe_failures_explained(&self) -> Vec<String> {
        let explain = |f: &super::traffic::ProbeFailure| {
            let slow = (self.probe_slow_uplinks.iter()).filter(|u| u.inner == Some(f.inner));
            let waits: Vec<String> = slow.map(|u| format!("{} ms", u.waited_ms)).collect();
            let why = if waits.is_empty() {
                "the generator took its uplink on time (no slow take)".to_owned()
            } else {
                format!(
                    "the generator was late taking its uplink: {}",
                    waits.join(", ")
                )
            };
            format!(
                "probe of {} ({:?}) failed in the first round: {why}",
                f.inner, f.transport
            )
        };
        self.probe_failures.iter().map(explain).collect()
    }
}

/// The JSON file: `{"rows": [...], ...}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    /// One row per measured point.
    pub rows: Vec<Row>,
    /// How the figures came about.
    pub note: String,
}

impl Report {
    /// Writes the report as pretty JSON (atomically: temporary file, then rename).
    pub fn write(&self, path: &Path) -> Result<()> {
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
    }
}

const HEADER: [&str; 10] = [
    "hardware",
    "clients",
    "Teredo",
    "IP-HTTPS",
    "corpnet Mbit/s",
    "internet Mbit/s",
    "CPU",
    "memory",
    "QMSA",
    "MMSA",
];

/// The Windows Server 2012 DirectAccess reference rows (`docs/architecture.md`, "The reference
/// figures we must beat").
fn reference_rows() -> Vec<[String; 10]> {
    [
        [
            "WS2012 DirectAccess, 4 cores",
            "750",
            "~525 (70%)",
            "~225 (30%)",
            "84.2",
            "118.8",
            "46.4% of 4 cores",
            "~750 MB (~1 MB/client)",
            "~1500 (~2/client)",
            "~1500 (~2/client)",
        ],
        [
            "WS2012 DirectAccess, 8 cores",
            "1500",
            "~1050 (70%)",
            "~450 (30%)",
            "153",
            "-",
            "51% of 8 cores",
            "~1.5 GB (~1 MB/client)",
            "~3000 (~2/client)",
            "~3000 (~2/client)",
        ],
    ]
    .into_iter()
    .map(|r| r.map(String::from))
    .collect()
}

fn cells(row: &Row) -> [String; 10] {
    let per_client = row.rss_per_client_bytes as f64 / 1024.0;
    [
        format!("gate64: {}", row.hardware),
        row.clients.to_string(),
        row.teredo.to_string(),
        row.iphttps.to_string(),
        format!("{:.1}", row.corpnet_mbps),
        format!("{:.1}", row.internet_mbps),
        format!(
            "{:.0}% of 1 core (+{:.0}% host NAPI; machine {:.0}%, softirq {:.0}%, lab NAPI {:.0}%, generator {:.0}%)",
            row.cpu_percent,
            row.napi_cpu_percent,
            row.machine_cpu_percent,
            row.softirq_percent,
            row.lab_napi_cpu_percent,
            row.generator_cpu_percent
        ),
        // The RSS under the last load step beside the idle one the per-client figure comes
        // from, each named, so neither passes for the other.
        format!(
            "{:.1} MB loaded; {:.1} MB idle ({per_client:.1} KB/client)",
            row.gate64_rss_bytes as f64 / 1e6,
            row.gate64_rss_idle_bytes as f64 / 1e6
        ),
        row.qmsa.to_string(),
        row.mmsa.to_string(),
    ]
}

/// The table: the reference rows, then gate64's.
pub fn table(rows: &[Row]) -> String {
    let mut all = reference_rows();
    all.extend(rows.iter().map(cells));
    let header = HEADER.map(String::from);
    let mut width = header.each_ref().map(String::len);
    for r in &all {
        for (w, s) in width.iter_mut().zip(r) {
            *w = (*w).max(s.chars().count());
        }
    }
    let line = |c: &[String; 10]| {
        let v: Vec<String> = c
            .iter()
            .zip(width)
            .map(|(s, w)| format!("{s:<w$}"))
            .collect();
        format!("{}\n", v.join(" | ").trim_end())
    };
    let mut out = line(&header);
    out.push_str(&line(&width.map(|w| "-".repeat(w))));
    for r in &all {
        out.push_str(&line(r));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missed_client_is_explained_by_its_own_slow_take_only() {
        use super::super::spec::{SlowUplink, Transport};
        use super::super::traffic::ProbeFailure;
        let failure = |inner: &str| ProbeFailure {
            inner: inner.parse().unwrap(),
            transport: Transport::Teredo,
            nat64: false,
            error: "no echo".to_owned(),
            sent_at_ms: 0,
            reprobe_ok: Some(true),
        };
        let row = Row {
            probe_failures: vec![failure("fd00:c1::1"), failure("fd00:c1::2")],
            probe_slow_uplinks: vec![SlowUplink {
                inner: Some("fd00:c1::2".parse().unwrap()),
                transport: Transport::Teredo,
                taken_unix_ms: 0,
                waited_ms: 2500,
                since_delivery_ms: None,
            }],
            ..Row::default()
        };
        let lines = row.probe_failures_explained();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].contains("fd00:c1::1") && lines[0].contains("on time"),
            "{lines:?}"
        );
        assert!(
            lines[1].contains("late") && lines[1].contains("2500 ms"),
            "{lines:?}"
        );
    }

    #[test]
    fn json_has_the_contract_fields() {
        let report = Report {
            rows: vec![Row {
                clients: 10,
                ..Row::default()
            }],
            note: String::new(),
        };
        let v: serde_json::Value = serde_json::to_value(&report).unwrap();
        let row = &v["rows"][0];
        for key in [
            "clients",
            "teredo",
            "iphttps",
            "corpnet_mbps",
            "internet_mbps",
            "cpu_percent",
            "gate64_rss_bytes",
            "qmsa",
            "mmsa",
        ] {
            assert!(row.get(key).is_some(), "{key} missing: {row}");
        }
    }

    #[test]
    fn table_puts_the_reference_beside_gate64() {
        let row = Row {
            hardware: "2 cores".into(),
            clients: 1500,
            corpnet_mbps: 420.25,
            ..Row::default()
        };
        let t = table(&[row]);
        assert!(t.contains("WS2012 DirectAccess, 8 cores"), "{t}");
        assert!(t.contains("gate64: 2 cores"), "{t}");
        assert!(t.contains("420.2") || t.contains("420.3"), "{t}");
        assert_eq!(t.lines().count(), 5, "{t}");
    }
}
