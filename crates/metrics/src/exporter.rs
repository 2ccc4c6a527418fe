//! The [`Exporter`]: sums the per-worker [`Stats`] at scrape time and encodes the result.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use gate64_dataplane::{
    Direction, Dns64Result, Dns64Stats, DropReason, Gauges, Nat64Direction, Side, Stats, TlsResult,
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::encode::{counter, counter_family, gauge, gauge_family};
use crate::names;

mod gre;
pub use gre::{GreReader, GreSnapshot, GreTunnelSample};

/// `Content-Type` of [`Exporter::encode`]'s output: the Prometheus text format 0.0.4.
pub const PROMETHEUS_TEXT_CONTENT_TYPE: &str =
    prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// `Content-Type` of [`Exporter::encode_openmetrics`]'s output: OpenMetrics text 1.0.0.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Reads gate64's counters and gauges and encodes them for Prometheus.
///
/// Cloning is cheap (an `Arc`); all clones share the same set of workers. Scrapes take a short
/// lock on the worker list and call the gauges closure; the data plane's hot path is never
/// involved (each worker only stores into its own [`Stats`]).
///
/// Registered [`Stats`] are never removed: the exported counters are sums over them, and
/// dropping one would make the sums go backwards, which Prometheus reads as a counter reset.
#[derive(Clone)]
pub struct Exporter {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    source: Arc<Source>,
}

/// What a scrape reads.
struct Source {
    workers: Mutex<Vec<Arc<Stats>>>,
    gauges: Arc<dyn Fn() -> Gauges + Send + Sync>,
    dns64: Mutex<Vec<Arc<Dns64Stats>>>,
    /// `gate64_config_reloads_total`: applied, refused.
    reloads: [AtomicU64; 2],
    /// Readers of the NAT64 binding log's lost-record counters.
    binding_log_lost: Mutex<Vec<CounterReader>>,
    session_log_lost: Mutex<Vec<CounterReader>>,
    /// Readers of the session trackers' suppressed-refusal counters.
    session_log_suppressed: Mutex<Vec<CounterReader>>,
    /// `gate64_metrics_http_rejected_total`, by [`HttpRejected`].
    http_rejected: [AtomicU64; 2],
    radius: Mutex<Option<RadiusReader>>,
    /// The Dynamic Authorization listener's counters, when it runs.
    dae: Mutex<Option<DaeReader>>,
    /// The HA sync channel's counters, with `[ha]`.
    ha: Mutex<Option<DaeReader>>,
    /// The records the HA standby's store holds, with `[ha]`.
    ha_store: Mutex<Option<HaStoreReader>>,
    /// Readers of the GRE data path's counters.
    gre: Mutex<Vec<GreReader>>,
    /// The IKE driver's counters and the child-SA count, once IPsec runs.
    ipsec: Mutex<Option<crate::ipsec::IpsecSource>>,
}

/// Why the metrics listener turned a client away (`gate64_metrics_http_rejected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpRejected {
    /// A request whose `Host` the listener does not answer for (DNS rebinding).
    ForeignHost = 0,
    /// A connection whose client did not read the answer in time.
    WriteTimeout = 1,
}

impl HttpRejected {
    /// Every reason, in label order.
    pub const ALL: [HttpRejected; 2] = [HttpRejected::ForeignHost, HttpRejected::WriteTimeout];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpRejected::ForeignHost => "foreign_host",
            HttpRejected::WriteTimeout => "write_timeout",
        }
    }
}

/// Reads a counter kept elsewhere (e.g. by the binding log's writer).
pub type CounterReader = Arc<dyn Fn() -> u64 + Send + Sync>;

/// What became of RADIUS accounting requests, read at scrape time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RadiusCounts {
    /// Acknowledged by a server.
    pub acked: u64,
    /// No server acknowledged them.
    pub timeout: u64,
    /// Dropped because the sender's queue was full.
    pub queue_full: u64,
    /// Sent again.
    pub retransmits: u64,
}

/// Reads the RADIUS sender's counters.
pub type RadiusReader = Arc<dyn Fn() -> RadiusCounts + Send + Sync>;

/// Reads the Dynamic Authorization listener's counters: `(code, result, requests)` for every
/// pair of labels (`gate64_radius_dae_requests_total`).
pub type DaeReader = Arc<dyn Fn() -> Vec<(&'static str, &'static str, u64)> + Send + Sync>;

/// Reads the HA store's distinct records: `(kind, records)` for each kind
/// (`gate64_ha_store_records`).
pub type HaStoreReader = Arc<dyn Fn() -> Vec<(&'static str, u64)> + Send + Sync>;

impl Exporter {
    /// An exporter over `workers` (one [`Stats`] per data-plane worker) and `gauges`, which is
    /// called once per scrape to read the shared tables. `gauges` runs on the scraping task, so
    /// it should be quick and must not block on the data plane for long.
    pub fn new(workers: Vec<Arc<Stats>>, gauges: Arc<dyn Fn() -> Gauges + Send + Sync>) -> Self {
        let source = Arc::new(Source {
            workers: Mutex::new(workers),
            gauges,
            dns64: Mutex::new(Vec::new()),
            reloads: [AtomicU64::new(0), AtomicU64::new(0)],
            binding_log_lost: Mutex::new(Vec::new()),
            session_log_lost: Mutex::new(Vec::new()),
            session_log_suppressed: Mutex::new(Vec::new()),
            http_rejected: [AtomicU64::new(0), AtomicU64::new(0)],
            radius: Mutex::new(None),
            dae: Mutex::new(None),
            ha: Mutex::new(None),
            ha_store: Mutex::new(None),
            gre: Mutex::new(Vec::new()),
            ipsec: Mutex::new(None),
        });
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Scrape(Arc::clone(&source))));
        Exporter {
            inner: Arc::new(Inner { registry, source }),
        }
    }

    /// Adds more per-worker [`Stats`] (e.g. those of later transports' tasks) to the sums.
    pub fn add_workers(&self, more: Vec<Arc<Stats>>) {
        self.inner.source.lock_workers().extend(more);
    }

    /// Everything, in the Prometheus text format 0.0.4 ([`PROMETHEUS_TEXT_CONTENT_TYPE`]).
    ///
    /// This is the format `promtool check metrics` validates and that every Prometheus version
    /// scrapes. The sample names are the same as in [`Exporter::encode_openmetrics`]; only the
    /// `# HELP`/`# TYPE` lines of counters differ (`gate64_bytes_total` here, `gate64_bytes` in
    /// OpenMetrics).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.inner.registry)
            .expect("writing to a String cannot fail and the collector only fails on write");
        out
    }

    /// Everything, in the OpenMetrics text format 1.0.0 ([`OPENMETRICS_CONTENT_TYPE`]),
    /// ending in `# EOF`.
    pub fn encode_openmetrics(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.registry)
            .expect("writing to a String cannot fail and the collector only fails on write");
        out
    }

    /// Adds the DNS64 server's counters to `gate64_dns64_queries_total` and
    /// `gate64_dns64_cache_hits_total` (summed when several are added).
    pub fn add_dns64(&self, stats: Arc<Dns64Stats>) {
        self.inner
            .source
            .dns64
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(stats);
    }

    /// Exports the RADIUS sender's counters (`gate64_radius_accounting_total{result}`,
    /// `gate64_radius_retransmits_total`); without one, both families stay at zero.
    pub fn set_radius(&self, read: RadiusReader) {
        *self
            .inner
            .source
            .radius
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(read);
    }

    /// Exports the HA sync channel's counters (`gate64_ha_sync_total{direction,result}`,
    /// read as `(direction, result, count)`); without `[ha]` the family is empty.
    pub fn set_ha(&self, read: DaeReader) {
        *self
            .inner
            .source
            .ha
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(read);
    }

    /// Exports the records the HA store holds (`gate64_ha_store_records{kind}`, read as
    /// `(kind, records)`); without `[ha]` the family is empty.
    pub fn set_ha_store(&self, read: HaStoreReader) {
        *self
            .inner
            .source
            .ha_store
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(read);
    }

    /// Exports the Dynamic Authorization listener's counters
    /// (`gate64_radius_dae_requests_total{code,result}`); without one the family is empty.
    pub fn set_dae(&self, read: DaeReader) {
        *self
            .inner
            .source
            .dae
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(read);
    }

    /// Adds a session log's lost-record counter to `gate64_session_log_lost_total`.
    pub fn add_session_log_lost(&self, read: CounterReader) {
        self.inner
            .source
            .session_log_lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(read);
    }

    /// Adds a session tracker's count of refusal lines left out by its rate limit to
    /// `gate64_session_log_refusals_suppressed_total`.
    pub fn add_session_log_suppressed(&self, read: CounterReader) {
        self.inner
            .source
            .session_log_suppressed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(read);
    }

    /// Counts a client the metrics listener turned away.
    pub fn count_http_rejected(&self, reason: HttpRejected) {
        self.inner.source.http_rejected[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes by side and direction, summed over every worker now (what
    /// `gate64_bytes_total` shows), for the status page's throughput chart.
    pub fn bytes_total(&self, side: Side, dir: Direction) -> u64 {
        let workers = self.inner.source.lock_workers().clone();
        Totals::sum(&workers).bytes[side as usize][dir as usize]
    }

    /// The GRE tunnels up and configured, over every GRE data path.
    pub fn gre_tunnels_up(&self) -> (usize, usize) {
        let readers = self
            .inner
            .source
            .gre
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        readers
            .iter()
            .map(|read| read())
            .fold((0, 0), |(up, all), s| {
                let tunnels = &s.tunnels;
                (
                    up + tunnels.iter().filter(|t| t.up).count(),
                    all + tunnels.len(),
                )
            })
    }

    /// Counts one configuration reload (SIGHUP): applied (`ok`) or refused.
    pub fn count_reload(&self, applied: bool) {
        let i = usize::from(!applied);
        self.inner.source.reloads[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a binding log's lost-record counter to `gate64_nat64_binding_log_lost_total`.
    pub fn add_binding_log_lost(&self, read: CounterReader) {
        self.inner
            .source
            .binding_log_lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(read);
    }

    /// Adds the GRE data path's counters: `gate64_gre_*` and its drop reasons in
    /// `gate64_drops_total`.
    pub fn add_gre(&self, read: GreReader) {
        self.inner
            .source
            .gre
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(read);
    }

    /// Exports the IKE driver's `stats` (its SA counts included, which the driver sets
    /// together) under the `gate64_ipsec_*`, `gate64_ike_*` names; until called they are zero.
    pub fn add_ipsec(&self, stats: Arc<gate64_dataplane::IpsecStats>) {
        *self
            .inner
            .source
            .ipsec
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(crate::ipsec::IpsecSource { stats });
    }

    /// Number of registered per-worker [`Stats`].
    pub fn workers(&self) -> usize {
        self.inner.source.lock_workers().len()
    }
}

impl fmt::Debug for Exporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exporter")
            .field("workers", &self.workers())
            .finish_non_exhaustive()
    }
}

impl Source {
    fn lock_workers(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Stats>>> {
        // The list is only ever extended, so a panic elsewhere cannot leave it inconsistent.
        self.workers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Sums of all workers' counters at one instant.
struct Totals {
    workers: usize,
    bytes: [[u64; 2]; 2],
    packets: [[u64; 2]; 2],
    drops: [u64; DropReason::COUNT],
    teredo_qualifications: u64,
    tls_handshakes: [u64; TlsResult::ALL.len()],
    nat64_translations: [u64; 2],
    iphttps_write_timeouts: u64,
    /// `[reclaimed, in_use]`.
    iphttps_prefix_reclaims: [u64; 2],
    esp_bytes: [u64; 2],
    esp_packets: [u64; 2],
}

impl Totals {
    fn sum(workers: &[Arc<Stats>]) -> Totals {
        let mut t = Totals {
            workers: workers.len(),
            bytes: [[0; 2]; 2],
            packets: [[0; 2]; 2],
            drops: [0; DropReason::COUNT],
            teredo_qualifications: 0,
            tls_handshakes: [0; TlsResult::ALL.len()],
            nat64_translations: [0; 2],
            iphttps_write_timeouts: 0,
            iphttps_prefix_reclaims: [0; 2],
            esp_bytes: [0; 2],
            esp_packets: [0; 2],
        };
        // Each worker's counter wraps at 2^64, so the sum does too rather than panicking.
        for w in workers {
            for side in Side::ALL {
                for dir in Direction::ALL {
                    let (s, d) = (side as usize, dir as usize);
                    t.bytes[s][d] = t.bytes[s][d].wrapping_add(w.bytes(side, dir));
                    t.packets[s][d] = t.packets[s][d].wrapping_add(w.packets(side, dir));
                }
            }
            for (total, &reason) in t.drops.iter_mut().zip(DropReason::ALL) {
                *total = total.wrapping_add(w.drops(reason));
            }
            t.teredo_qualifications = t
                .teredo_qualifications
                .wrapping_add(w.teredo_qualifications.get());
            for (total, &r) in t.tls_handshakes.iter_mut().zip(TlsResult::ALL.iter()) {
                *total = total.wrapping_add(w.tls_handshakes(r));
            }
            for (total, d) in t.nat64_translations.iter_mut().zip(Nat64Direction::ALL) {
                *total = total.wrapping_add(w.nat64_translations(d));
            }
            t.iphttps_write_timeouts = t
                .iphttps_write_timeouts
                .wrapping_add(w.iphttps_write_timeouts.get());
            let claims = [&w.iphttps_prefix_reclaimed, &w.iphttps_prefix_in_use];
            for (total, c) in t.iphttps_prefix_reclaims.iter_mut().zip(claims) {
                *total = total.wrapping_add(c.get());
            }
            for dir in Direction::ALL {
                let d = dir as usize;
                t.esp_bytes[d] = t.esp_bytes[d].wrapping_add(w.esp_bytes(dir));
                t.esp_packets[d] = t.esp_packets[d].wrapping_add(w.esp_packets(dir));
            }
        }
        t
    }
}

/// The prometheus-client [`Collector`]: reads everything afresh on each scrape.
struct Scrape(Arc<Source>);

impl fmt::Debug for Scrape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrape").finish_non_exhaustive()
    }
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        // Clone the list so neither the summing nor the gauges closure (which may take the
        // shared tables' locks) runs under the worker-list lock.
        let workers = self.0.lock_workers().clone();
        let mut totals = Totals::sum(&workers);
        let gauges = (self.0.gauges)();
        let gre_readers = self
            .0
            .gre
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let gre: Vec<GreSnapshot> = gre_readers.iter().map(|read| read()).collect();
        gre::add_drops(&mut totals.drops, &gre);

        gauge_family(
            &mut enc,
            names::CLIENTS,
            names::CLIENTS_HELP,
            [
                ([("transport", "teredo")], gauges.teredo_clients),
                ([("transport", "iphttps")], gauges.iphttps_clients),
            ],
        )?;
        gauge(
            &mut enc,
            names::TEREDO_PEERS,
            names::TEREDO_PEERS_HELP,
            gauges.teredo_peers,
        )?;
        counter_family(
            &mut enc,
            names::BYTES_TOTAL,
            names::BYTES_TOTAL_HELP,
            side_dir_series(&totals.bytes),
        )?;
        counter_family(
            &mut enc,
            names::PACKETS_TOTAL,
            names::PACKETS_TOTAL_HELP,
            side_dir_series(&totals.packets),
        )?;
        counter_family(
            &mut enc,
            names::DROPS_TOTAL,
            names::DROPS_TOTAL_HELP,
            DropReason::ALL
                .iter()
                .zip(totals.drops)
                .map(|(reason, n)| ([("reason", reason.as_str())], n)),
        )?;
        counter(
            &mut enc,
            names::TEREDO_QUALIFICATIONS_TOTAL,
            names::TEREDO_QUALIFICATIONS_TOTAL_HELP,
            totals.teredo_qualifications,
        )?;
        counter_family(
            &mut enc,
            names::TLS_HANDSHAKES_TOTAL,
            names::TLS_HANDSHAKES_TOTAL_HELP,
            TlsResult::ALL
                .iter()
                .zip(totals.tls_handshakes)
                .map(|(r, n)| ([("result", r.as_str())], n)),
        )?;
        counter(
            &mut enc,
            names::IPHTTPS_WRITE_TIMEOUTS_TOTAL,
            names::IPHTTPS_WRITE_TIMEOUTS_TOTAL_HELP,
            totals.iphttps_write_timeouts,
        )?;
        counter_family(
            &mut enc,
            names::IPHTTPS_PREFIX_RECLAIMS_TOTAL,
            names::IPHTTPS_PREFIX_RECLAIMS_TOTAL_HELP,
            ["reclaimed", "in_use"]
                .into_iter()
                .zip(totals.iphttps_prefix_reclaims)
                .map(|(r, n)| ([("result", r)], n)),
        )?;
        gauge(
            &mut enc,
            names::IPHTTPS_QUEUED_BYTES,
            names::IPHTTPS_QUEUED_BYTES_HELP,
            gauges.iphttps_queued_bytes,
        )?;
        gauge(
            &mut enc,
            names::IPHTTPS_QUEUE_BUDGET_BYTES,
            names::IPHTTPS_QUEUE_BUDGET_BYTES_HELP,
            gauges.iphttps_queue_budget_bytes,
        )?;
        let nat = gauges.nat64.unwrap_or_default();
        const PROTOS: [&str; 3] = ["tcp", "udp", "icmp"];
        gauge_family(
            &mut enc,
            names::NAT64_BIB_ENTRIES,
            names::NAT64_BIB_ENTRIES_HELP,
            PROTOS
                .iter()
                .zip(nat.bib_entries)
                .map(|(p, n)| ([("proto", *p)], n)),
        )?;
        gauge_family(
            &mut enc,
            names::NAT64_SESSIONS,
            names::NAT64_SESSIONS_HELP,
            PROTOS
                .iter()
                .zip(nat.sessions)
                .map(|(p, n)| ([("proto", *p)], n)),
        )?;
        for (name, help, values) in [
            (
                names::IPSEC_BYTES_TOTAL,
                names::IPSEC_BYTES_TOTAL_HELP,
                totals.esp_bytes,
            ),
            (
                names::IPSEC_PACKETS_TOTAL,
                names::IPSEC_PACKETS_TOTAL_HELP,
                totals.esp_packets,
            ),
        ] {
            counter_family(
                &mut enc,
                name,
                help,
                Direction::ALL
                    .iter()
                    .zip(values)
                    .map(|(d, n)| ([("direction", d.as_str())], n)),
            )?;
        }
        counter_family(
            &mut enc,
            names::NAT64_TRANSLATIONS_TOTAL,
            names::NAT64_TRANSLATIONS_TOTAL_HELP,
            Nat64Direction::ALL
                .iter()
                .zip(totals.nat64_translations)
                .map(|(d, n)| ([("direction", d.as_str())], n)),
        )?;
        gauge(
            &mut enc,
            names::NAT64_POOL_CAPACITY,
            names::NAT64_POOL_CAPACITY_HELP,
            nat.pool_capacity,
        )?;
        counter(
            &mut enc,
            names::NAT64_POOL_EXHAUSTED_TOTAL,
            names::NAT64_POOL_EXHAUSTED_TOTAL_HELP,
            nat.pool_exhausted,
        )?;
        let dns64 = self
            .0
            .dns64
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        counter_family(
            &mut enc,
            names::DNS64_QUERIES_TOTAL,
            names::DNS64_QUERIES_TOTAL_HELP,
            Dns64Result::ALL.iter().map(|&r| {
                let n = dns64.iter().fold(0u64, |t, s| t.wrapping_add(s.queries(r)));
                ([("result", r.as_str())], n)
            }),
        )?;
        counter(
            &mut enc,
            names::DNS64_CACHE_HITS_TOTAL,
            names::DNS64_CACHE_HITS_TOTAL_HELP,
            dns64
                .iter()
                .fold(0u64, |t, s| t.wrapping_add(s.cache_hits())),
        )?;
        let lost = self
            .0
            .binding_log_lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        counter(
            &mut enc,
            names::NAT64_BINDING_LOG_LOST_TOTAL,
            names::NAT64_BINDING_LOG_LOST_TOTAL_HELP,
            lost.iter().fold(0u64, |t, read| t.wrapping_add(read())),
        )?;
        let lost = self
            .0
            .session_log_lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        counter(
            &mut enc,
            names::SESSION_LOG_LOST_TOTAL,
            names::SESSION_LOG_LOST_TOTAL_HELP,
            lost.iter().fold(0u64, |t, read| t.wrapping_add(read())),
        )?;
        let suppressed = self
            .0
            .session_log_suppressed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        counter(
            &mut enc,
            names::SESSION_LOG_REFUSALS_SUPPRESSED_TOTAL,
            names::SESSION_LOG_REFUSALS_SUPPRESSED_TOTAL_HELP,
            suppressed
                .iter()
                .fold(0u64, |t, read| t.wrapping_add(read())),
        )?;
        let rejected = &self.0.http_rejected;
        counter_family(
            &mut enc,
            names::METRICS_HTTP_REJECTED_TOTAL,
            names::METRICS_HTTP_REJECTED_TOTAL_HELP,
            HttpRejected::ALL.map(|r| {
                (
                    [("reason", r.as_str())],
                    rejected[r as usize].load(Ordering::Relaxed),
                )
            }),
        )?;
        let radius = self
            .0
            .radius
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .map(|read| read())
            .unwrap_or_default();
        counter_family(
            &mut enc,
            names::RADIUS_ACCOUNTING_TOTAL,
            names::RADIUS_ACCOUNTING_TOTAL_HELP,
            [
                ("acked", radius.acked),
                ("timeout", radius.timeout),
                ("queue_full", radius.queue_full),
            ]
            .map(|(r, n)| ([("result", r)], n)),
        )?;
        counter(
            &mut enc,
            names::RADIUS_RETRANSMITS_TOTAL,
            names::RADIUS_RETRANSMITS_TOTAL_HELP,
            radius.retransmits,
        )?;
        let dae = self
            .0
            .dae
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .map(|read| read())
            .unwrap_or_default();
        counter_family(
            &mut enc,
            names::RADIUS_DAE_REQUESTS_TOTAL,
            names::RADIUS_DAE_REQUESTS_TOTAL_HELP,
            dae.into_iter()
                .map(|(code, result, n)| ([("code", code), ("result", result)], n)),
        )?;
        let ha = (self.0.ha.lock().unwrap_or_else(PoisonError::into_inner))
            .as_ref()
            .map(|read| read())
            .unwrap_or_default();
        counter_family(
            &mut enc,
            names::HA_SYNC_TOTAL,
            names::HA_SYNC_TOTAL_HELP,
            ha.into_iter()
                .map(|(direction, result, n)| ([("direction", direction), ("result", result)], n)),
        )?;
        let held = (self
            .0
            .ha_store
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .as_ref()
        .map(|read| read())
        .unwrap_or_default();
        gauge_family(
            &mut enc,
            names::HA_STORE_RECORDS,
            names::HA_STORE_RECORDS_HELP,
            held.into_iter().map(|(kind, n)| ([("kind", kind)], n)),
        )?;
        let reloads = &self.0.reloads;
        counter_family(
            &mut enc,
            names::CONFIG_RELOADS_TOTAL,
            names::CONFIG_RELOADS_TOTAL_HELP,
            [("ok", 0), ("refused", 1)]
                .map(|(result, i)| ([("result", result)], reloads[i].load(Ordering::Relaxed))),
        )?;
        gre::encode(&mut enc, &gre)?;
        let ipsec = self
            .0
            .ipsec
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let esp = [DropReason::EspAuth, DropReason::EspReplay].map(|r| totals.drops[r as usize]);
        crate::ipsec::encode(&mut enc, ipsec.as_ref(), esp)?;
        gauge(
            &mut enc,
            names::WORKERS,
            names::WORKERS_HELP,
            totals.workers as u64,
        )?;
        gauge_family(
            &mut enc,
            names::BUILD_INFO,
            names::BUILD_INFO_HELP,
            [([("version", env!("CARGO_PKG_VERSION"))], 1u64)],
        )
    }
}

type SideDirLabels = [(&'static str, &'static str); 2];

/// One series per side and direction, in label order.
fn side_dir_series(v: &[[u64; 2]; 2]) -> impl Iterator<Item = (SideDirLabels, u64)> + '_ {
    Side::ALL.into_iter().flat_map(move |side| {
        Direction::ALL.into_iter().map(move |dir| {
            (
                [("side", side.as_str()), ("direction", dir.as_str())],
                v[side as usize][dir as usize],
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line `series` (name plus label set, as exposed) in `text`.
    fn sample<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
    }

    fn two_workers() -> (Arc<Stats>, Arc<Stats>) {
        let a = Arc::new(Stats::default());
        a.packet(Side::Corpnet, Direction::Rx, 100);
        a.packet(Side::Corpnet, Direction::Rx, 100);
        a.packet(Side::Internet, Direction::Tx, 1280);
        a.count_drops(DropReason::NoRoute, 1);
        a.teredo_qualifications.add(3);
        let b = Arc::new(Stats::default());
        b.packet(Side::Corpnet, Direction::Rx, 50);
        b.count_drops(DropReason::NoRoute, 2);
        b.count_drops(DropReason::Truncated, 1);
        b.teredo_qualifications.inc();
        (a, b)
    }

    fn exporter(workers: Vec<Arc<Stats>>) -> Exporter {
        Exporter::new(
            workers,
            Arc::new(|| Gauges {
                teredo_clients: 7,
                teredo_peers: 11,
                iphttps_clients: 0,
                nat64: None,
                ..Default::default()
            }),
        )
    }

    #[test]
    fn exporter_is_cheap_to_share() {
        fn shareable<T: Clone + Send + Sync + 'static>() {}
        shareable::<Exporter>();
    }

    #[test]
    fn sums_workers_with_exact_names_and_labels() {
        let (a, b) = two_workers();
        let text = exporter(vec![a, b]).encode();
        let expect = [
            (
                r#"gate64_bytes_total{side="corpnet",direction="rx"}"#,
                "250",
            ),
            (r#"gate64_bytes_total{side="corpnet",direction="tx"}"#, "0"),
            (r#"gate64_bytes_total{side="internet",direction="rx"}"#, "0"),
            (
                r#"gate64_bytes_total{side="internet",direction="tx"}"#,
                "1280",
            ),
            (
                r#"gate64_packets_total{side="corpnet",direction="rx"}"#,
                "3",
            ),
            (
                r#"gate64_packets_total{side="corpnet",direction="tx"}"#,
                "0",
            ),
            (
                r#"gate64_packets_total{side="internet",direction="rx"}"#,
                "0",
            ),
            (
                r#"gate64_packets_total{side="internet",direction="tx"}"#,
                "1",
            ),
            (r#"gate64_drops_total{reason="no_route"}"#, "3"),
            (r#"gate64_drops_total{reason="truncated"}"#, "1"),
            (r#"gate64_drops_total{reason="no_sa"}"#, "0"),
            ("gate64_teredo_qualifications_total", "4"),
            ("gate64_workers", "2"),
            (r#"gate64_clients{transport="teredo"}"#, "7"),
            ("gate64_teredo_peers", "11"),
            (
                &format!(
                    r#"gate64_build_info{{version="{}"}}"#,
                    env!("CARGO_PKG_VERSION")
                ),
                "1",
            ),
        ];
        for (series, value) in expect {
            assert_eq!(sample(&text, series), Some(value), "{series} in:\n{text}");
        }
    }

    #[test]
    fn every_drop_reason_present_even_at_zero() {
        let text = exporter(vec![Arc::new(Stats::default())]).encode();
        for reason in DropReason::ALL {
            let series = format!(r#"gate64_drops_total{{reason="{}"}}"#, reason.as_str());
            assert_eq!(sample(&text, &series), Some("0"), "{series} in:\n{text}");
        }
        let series = text
            .lines()
            .filter(|l| l.starts_with("gate64_drops_total{"))
            .count();
        assert_eq!(series, DropReason::COUNT);
    }

    #[test]
    fn every_name_has_help_and_type() {
        let text = exporter(Vec::new()).encode();
        for (name, help) in names::ALL {
            assert!(name.starts_with("gate64_"), "{name}");
            assert!(help.len() > 20 && help.ends_with('.'), "{name}: {help:?}");
            assert!(
                text.contains(&format!("# HELP {name} {help}\n")),
                "{name} in:\n{text}"
            );
            let kind = if name.ends_with("_total") {
                "counter"
            } else if name.ends_with("_seconds") && !name.ends_with("_timestamp_seconds") {
                "histogram"
            } else {
                "gauge"
            };
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "{name} in:\n{text}"
            );
        }
        let families = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(
            families,
            names::ALL.len(),
            "a metric is missing from names::ALL"
        );
    }

    /// The HA store's gauge is empty without `[ha]` and reads its reader at each scrape.
    #[test]
    fn the_ha_store_gauge_reads_its_reader() {
        let e = Exporter::new(Vec::new(), Arc::new(Gauges::default));
        assert_eq!(
            sample(&e.encode(), "gate64_ha_store_records{kind=\"ike\"}"),
            None
        );
        let held = Arc::new(AtomicU64::new(3));
        let read = Arc::clone(&held);
        e.set_ha_store(Arc::new(move || {
            vec![("ike", read.load(Ordering::Relaxed)), ("child", 6)]
        }));
        held.store(2, Ordering::Relaxed);
        let text = e.encode();
        assert!(
            text.contains("# TYPE gate64_ha_store_records gauge\n"),
            "{text}"
        );
        assert_eq!(
            sample(&text, "gate64_ha_store_records{kind=\"ike\"}"),
            Some("2")
        );
        assert_eq!(
            sample(&text, "gate64_ha_store_records{kind=\"child\"}"),
            Some("6")
        );
    }

    #[test]
    fn lifecycle_counters_start_at_zero_and_sum() {
        let e = Exporter::new(Vec::new(), Arc::new(Gauges::default));
        let text = e.encode();
        assert_eq!(
            sample(&text, "gate64_nat64_binding_log_lost_total"),
            Some("0")
        );
        assert_eq!(
            sample(&text, "gate64_config_reloads_total{result=\"refused\"}"),
            Some("0")
        );
        assert_eq!(
            sample(
                &text,
                "gate64_metrics_http_rejected_total{reason=\"foreign_host\"}"
            ),
            Some("0")
        );
        e.add_binding_log_lost(Arc::new(|| 3));
        e.add_binding_log_lost(Arc::new(|| 4));
        e.add_session_log_suppressed(Arc::new(|| 5));
        e.count_http_rejected(HttpRejected::ForeignHost);
        e.count_http_rejected(HttpRejected::WriteTimeout);
        e.count_http_rejected(HttpRejected::WriteTimeout);
        e.count_reload(true);
        e.count_reload(false);
        e.count_reload(false);
        let text = e.encode();
        assert_eq!(
            sample(&text, "gate64_nat64_binding_log_lost_total"),
            Some("7")
        );
        assert_eq!(
            sample(&text, "gate64_config_reloads_total{result=\"ok\"}"),
            Some("1")
        );
        assert_eq!(
            sample(&text, "gate64_session_log_refusals_suppressed_total"),
            Some("5")
        );
        assert_eq!(
            sample(
                &text,
                "gate64_metrics_http_rejected_total{reason=\"foreign_host\"}"
            ),
            Some("1")
        );
        assert_eq!(
            sample(
                &text,
                "gate64_metrics_http_rejected_total{reason=\"write_timeout\"}"
            ),
            Some("2")
        );
        assert_eq!(
            sample(&text, "gate64_config_reloads_total{result=\"refused\"}"),
            Some("2")
        );
    }

    #[test]
    fn dns64_counters_every_result_and_summed() {
        let e = exporter(Vec::new());
        let text = e.encode();
        for r in Dns64Result::ALL {
            let series = format!("gate64_dns64_queries_total{{result=\"{}\"}}", r.as_str());
            assert_eq!(sample(&text, &series), Some("0"), "{series} in:\n{text}");
        }
        let (a, b) = (
            Arc::new(Dns64Stats::default()),
            Arc::new(Dns64Stats::default()),
        );
        a.count(Dns64Result::Synthesized);
        b.count(Dns64Result::Synthesized);
        b.count(Dns64Result::Error);
        b.cache_hit();
        e.add_dns64(a);
        e.add_dns64(b);
        let text = e.encode();
        let q = |r: &str| format!("gate64_dns64_queries_total{{result=\"{r}\"}}");
        assert_eq!(sample(&text, &q("synthesized")), Some("2"));
        assert_eq!(sample(&text, &q("error")), Some("1"));
        assert_eq!(sample(&text, "gate64_dns64_cache_hits_total"), Some("1"));
    }

    #[test]
    fn workers_added_later_count_and_are_summed() {
        let (a, b) = two_workers();
        let exporter = exporter(vec![a]);
        let clone = exporter.clone();
        assert_eq!(sample(&exporter.encode(), "gate64_workers"), Some("1"));
        clone.add_workers(vec![b]);
        let text = exporter.encode();
        assert_eq!(exporter.workers(), 2);
        assert_eq!(sample(&text, "gate64_workers"), Some("2"));
        assert_eq!(
            sample(&text, "gate64_teredo_qualifications_total"),
            Some("4")
        );
    }

    #[test]
    fn gauges_read_on_every_scrape() {
        let n = Arc::new(std::sync::atomic::AtomicU64::new(1));
        let seen = Arc::clone(&n);
        let exporter = Exporter::new(
            Vec::new(),
            Arc::new(move || Gauges {
                teredo_clients: seen.load(std::sync::atomic::Ordering::Relaxed),
                teredo_peers: 0,
                iphttps_clients: 0,
                nat64: None,
                ..Default::default()
            }),
        );
        let series = r#"gate64_clients{transport="teredo"}"#;
        assert_eq!(sample(&exporter.encode(), series), Some("1"));
        n.store(5, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(sample(&exporter.encode(), series), Some("5"));
    }

    /// A Teredo client has no disconnect: the scrape's HELP says it is counted until its
    /// idle timeout, and names the key that sets it.
    #[test]
    fn clients_help_says_a_gone_teredo_client_counts_until_its_idle_timeout() {
        let (a, b) = two_workers();
        let text = exporter(vec![a, b]).encode();
        let help = text
            .lines()
            .find(|l| l.starts_with("# HELP gate64_clients "))
            .expect("a HELP line for gate64_clients");
        for needle in [
            "limits.peer_idle_timeout_secs",
            "has gone still counts",
            "iphttps",
        ] {
            assert!(help.contains(needle), "{help:?} lacks {needle:?}");
        }
    }

    #[test]
    fn openmetrics_has_same_samples_and_eof() {
        let (a, b) = two_workers();
        let exporter = exporter(vec![a, b]);
        let om = exporter.encode_openmetrics();
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE gate64_bytes counter\n"), "{om}");
        // Histograms differ in order (sum and count first in one) and in how `le` prints
        // (1.0 or 1); tested on their own in ipsec.rs.
        let histogram = names::IKE_NEGOTIATION_DURATION_SECONDS;
        let samples = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.starts_with('#') && !l.starts_with(histogram))
                .map(String::from)
                .collect()
        };
        assert_eq!(samples(&om), samples(&exporter.encode()));
        for text in [&om, &exporter.encode()] {
            let count = format!("{histogram}_count 0");
            assert!(text.contains(&count), "{text}");
        }
    }
}
