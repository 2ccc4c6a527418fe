//! gate64's metrics: metric names and descriptions ([`names`]), the [`Exporter`] that reads
//! the data plane's per-worker counters. The `/metrics` HTTP endpoint that serves it lives in
//! `gate64-io` (`metrics_http::serve`): this crate does no I/O.
//!
//! # Contract
//!
//! - Counters are per worker (`gate64_dataplane::Stats`, one writer each) and summed at
//!   scrape time, so counting costs the hot path no lock and no shared cache line. Scraping
//!   reads each counter once with a relaxed load; series of one scrape are therefore not an
//!   atomic snapshot of each other, but each is monotonic.
//! - The set of workers only grows ([`Exporter::add_workers`]), so every `_total` stays
//!   monotonic for the life of the process.
//! - Gauges come from a caller-supplied closure called once per scrape.
//! - Every `gate64_drops_total{reason}` series is always present, zero included.
//! - [`Exporter::encode`] writes the Prometheus text format 0.0.4 (what
//!   `promtool check metrics` checks); [`Exporter::encode_openmetrics`] writes OpenMetrics
//!   1.0.0. The HTTP endpoint picks by the request's `Accept` header.
//!
//! The exposed names are listed in [`names`]; labels are low-cardinality (never a client
//! address, SPI or port).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod encode;
mod exporter;
mod ipsec;
pub mod names;

pub use exporter::{
    DaeReader, GreReader, GreSnapshot, GreTunnelSample, HaStoreReader, RadiusCounts, RadiusReader,
};
pub use exporter::{
    Exporter, HttpRejected, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_TEXT_CONTENT_TYPE,
};
