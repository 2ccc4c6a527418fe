//! The IKE/IPsec families: SA counts, negotiations, rekeys, cookies and the negotiation
//! duration histogram from the IKE driver's [`IpsecStats`]; ESP failures from the workers'
//! drop counters. Exported at zero while IPsec does not run, so dashboards and alerts see
//! every family on every gate64.

use std::fmt;
use std::sync::Arc;

use gate64_dataplane::{
    ChainCacheResult, DisconnectReason, IkeResult, IkeShedReason, IpsecStats, MobikeResult,
    OcspResult, RekeyKind,
};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;

use crate::encode::{counter, counter_family, gauge, gauge_family};
use crate::names;

/// What a scrape reads for IPsec.
#[derive(Clone)]
pub(crate) struct IpsecSource {
    pub(crate) stats: Arc<IpsecStats>,
}

/// Encodes every IPsec family; `esp` = the summed `esp_auth` and `esp_replay` drops.
pub(crate) fn encode(
    enc: &mut DescriptorEncoder,
    source: Option<&IpsecSource>,
    esp: [u64; 2],
) -> fmt::Result {
    let zero = IpsecStats::default();
    let stats = source.map_or(&zero, |s| &*s.stats);
    // One read of both: the child SAs counted belong to IKE SAs counted.
    let (mmsa, qmsa) = stats.sa_counts();
    gauge(enc, names::IPSEC_MMSA, names::IPSEC_MMSA_HELP, mmsa)?;
    gauge(enc, names::IPSEC_QMSA, names::IPSEC_QMSA_HELP, qmsa)?;
    counter_family(
        enc,
        names::IKE_NEGOTIATIONS_TOTAL,
        names::IKE_NEGOTIATIONS_TOTAL_HELP,
        IkeResult::ALL.map(|r| ([("result", r.as_str())], stats.negotiations(r))),
    )?;
    counter_family(
        enc,
        names::IPSEC_REKEYS_TOTAL,
        names::IPSEC_REKEYS_TOTAL_HELP,
        RekeyKind::ALL.map(|k| ([("kind", k.as_str())], stats.rekeys(k))),
    )?;
    counter_family(
        enc,
        names::IPSEC_DISCONNECTS_TOTAL,
        names::IPSEC_DISCONNECTS_TOTAL_HELP,
        DisconnectReason::ALL.map(|r| ([("reason", r.as_str())], stats.disconnects(r))),
    )?;
    counter(
        enc,
        names::ESP_AUTH_FAILURES_TOTAL,
        names::ESP_AUTH_FAILURES_TOTAL_HELP,
        esp[0],
    )?;
    counter(
        enc,
        names::ESP_REPLAY_DROPS_TOTAL,
        names::ESP_REPLAY_DROPS_TOTAL_HELP,
        esp[1],
    )?;
    let (sum, count, buckets) = stats.durations();
    let histogram = ConstHistogram {
        sum,
        count,
        buckets,
    };
    histogram.encode(enc.encode_descriptor(
        names::IKE_NEGOTIATION_DURATION_SECONDS,
        names::IKE_NEGOTIATION_DURATION_SECONDS_HELP,
        None,
        histogram.metric_type(),
    )?)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    gauge_family(
        enc,
        names::IPSEC_CRLS_EXPIRED,
        names::IPSEC_CRLS_EXPIRED_HELP,
        [
            ([("crls", "ipsec")], stats.crls_expired(now)),
            ([("crls", "iphttps")], stats.iphttps_crls_expired(now)),
        ],
    )?;
    gauge(
        enc,
        names::IPSEC_CRL_NEXT_UPDATE,
        names::IPSEC_CRL_NEXT_UPDATE_HELP,
        stats.crl_next_update(),
    )?;
    gauge(
        enc,
        names::IKE_HALF_OPEN,
        names::IKE_HALF_OPEN_HELP,
        stats.half_open(),
    )?;
    counter(
        enc,
        names::IKE_COOKIES_SENT_TOTAL,
        names::IKE_COOKIES_SENT_TOTAL_HELP,
        stats.cookies_sent(),
    )?;
    counter_family(
        enc,
        names::IKE_MOBIKE_UPDATES_TOTAL,
        names::IKE_MOBIKE_UPDATES_TOTAL_HELP,
        MobikeResult::ALL.map(|r| ([("result", r.as_str())], stats.mobike_updates(r))),
    )?;
    counter_family(
        enc,
        names::IKE_QCD_TOTAL,
        names::IKE_QCD_TOTAL_HELP,
        [
            ([("result", "sent")], stats.qcd_answers(true)),
            ([("result", "capped")], stats.qcd_answers(false)),
        ],
    )?;
    counter(
        enc,
        names::IKE_KEEPALIVES_TOTAL,
        names::IKE_KEEPALIVES_TOTAL_HELP,
        stats.keepalives(),
    )?;
    counter(
        enc,
        names::IKE_SOCKET_DROPS_TOTAL,
        names::IKE_SOCKET_DROPS_TOTAL_HELP,
        stats.socket_drops(),
    )?;
    counter(
        enc,
        names::IKE_LIVENESS_EXTENDED_TOTAL,
        names::IKE_LIVENESS_EXTENDED_TOTAL_HELP,
        stats.liveness_extended(),
    )?;
    counter(
        enc,
        names::IKE_LIVENESS_DEFERRED_TOTAL,
        names::IKE_LIVENESS_DEFERRED_TOTAL_HELP,
        stats.liveness_deferred(),
    )?;
    counter_family(
        enc,
        names::HA_MID_SYNC_TOTAL,
        names::HA_MID_SYNC_TOTAL_HELP,
        stats.mid_sync().map(|(r, n)| ([("result", r)], n)),
    )?;
    counter_family(
        enc,
        names::IKE_SHED_TOTAL,
        names::IKE_SHED_TOTAL_HELP,
        IkeShedReason::ALL.map(|r| ([("reason", r.as_str())], stats.shed(r))),
    )?;
    counter_family(
        enc,
        names::IKE_OCSP_TOTAL,
        names::IKE_OCSP_TOTAL_HELP,
        OcspResult::ALL.map(|r| ([("result", r.as_str())], stats.ocsp(r))),
    )?;
    gauge(
        enc,
        names::IKE_CHAIN_CACHE_ENTRIES,
        names::IKE_CHAIN_CACHE_ENTRIES_HELP,
        stats.chain_cache_entries(),
    )?;
    counter_family(
        enc,
        names::IKE_CHAIN_CACHE_TOTAL,
        names::IKE_CHAIN_CACHE_TOTAL_HELP,
        ChainCacheResult::ALL.map(|r| ([("result", r.as_str())], stats.chain_cache(r))),
    )?;
    counter_family(
        enc,
        names::IKE_REFUSED_TOTAL,
        names::IKE_REFUSED_TOTAL_HELP,
        stats
            .refusals()
            .into_iter()
            .map(|(r, n)| ([("reason", r)], n)),
    )
}

/// A histogram read at scrape time (prometheus-client has const counters and gauges only).
struct ConstHistogram {
    sum: f64,
    count: u64,
    /// Upper bound and cumulative count, `+Inf` last.
    buckets: Vec<(f64, u64)>,
}

impl EncodeMetric for ConstHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.sum,
            self.count,
            &self.buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use crate::Exporter;
    use gate64_dataplane::{
        ChainCacheResult, Gauges, IkeResult, IkeShedReason, IpsecStats, MobikeResult, OcspResult,
        RekeyKind,
    };
    use std::sync::Arc;
    use std::time::Duration;

    fn sample<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    #[test]
    fn ipsec_families_are_zero_until_added_then_read_from_the_driver() {
        let e = Exporter::new(Vec::new(), Arc::new(Gauges::default));
        let text = e.encode();
        for series in [
            "gate64_ipsec_mmsa",
            "gate64_ipsec_qmsa",
            "gate64_ike_negotiations_total{result=\"ok\"}",
            "gate64_ipsec_rekeys_total{kind=\"child\"}",
            "gate64_esp_auth_failures_total",
            "gate64_esp_replay_drops_total",
            "gate64_ike_negotiation_duration_seconds_count",
            "gate64_ike_half_open",
            "gate64_ike_cookies_sent_total",
            "gate64_ike_mobike_updates_total{result=\"moved\"}",
            "gate64_ike_qcd_total{result=\"sent\"}",
            "gate64_ike_qcd_total{result=\"capped\"}",
            "gate64_ike_keepalives_total",
            "gate64_ike_socket_drops_total",
            "gate64_ike_liveness_extended_total",
            "gate64_ike_liveness_deferred_total",
            "gate64_ha_mid_sync_total{result=\"synced\"}",
            "gate64_ha_mid_sync_total{result=\"unsupported\"}",
            "gate64_ha_mid_sync_total{result=\"failed\"}",
            "gate64_ike_shed_total{reason=\"source_rate\"}",
            "gate64_ike_shed_total{reason=\"batch_share\"}",
            "gate64_ike_chain_cache_entries",
            "gate64_ike_chain_cache_total{result=\"hit\"}",
            "gate64_ike_chain_cache_total{result=\"miss\"}",
            "gate64_ike_chain_cache_total{result=\"evicted\"}",
        ] {
            assert_eq!(sample(&text, series), Some("0"), "{series} in\n{text}");
        }
        let stats = Arc::new(IpsecStats::default());
        stats.set_sa_counts(4, 5);
        stats.set_half_open(2);
        stats.negotiation(IkeResult::Ok, Duration::from_millis(20));
        stats.negotiation(IkeResult::AuthFailed, Duration::from_millis(2));
        stats.rekey(RekeyKind::Child);
        stats.cookie_sent();
        stats.mobike_update(MobikeResult::CheckFailed);
        stats.qcd_answer(true);
        stats.qcd_answer(false);
        stats.qcd_answer(false);
        stats.set_keepalives(6);
        stats.set_socket_drops(8);
        stats.set_liveness_extended(9);
        stats.set_liveness_deferred(11);
        stats.set_mid_sync([12, 13, 14]);
        stats.set_shed(IkeShedReason::SourceRate, 7);
        stats.refused("too_many_certs");
        stats.refused("too_many_certs");
        stats.refused("retransmit_elsewhere");
        stats.set_ocsp(OcspResult::Cached, 3);
        stats.set_chain_cache_entries(12);
        stats.set_chain_cache(ChainCacheResult::Hit, 30);
        stats.set_chain_cache(ChainCacheResult::Miss, 14);
        stats.set_chain_cache(ChainCacheResult::Evicted, 2);
        let day = Duration::from_secs(86_400);
        let now = std::time::SystemTime::now();
        stats.set_crl_next_updates(&[now + day, now - day, now + 2 * day]);
        stats.set_iphttps_crl_next_updates(&[now - day, now - 2 * day, now + day]);
        e.add_ipsec(Arc::clone(&stats));
        let text = e.encode();
        for (series, value) in [
            ("gate64_ipsec_mmsa", "4"),
            ("gate64_ipsec_qmsa", "5"),
            ("gate64_ipsec_crls_expired{crls=\"ipsec\"}", "1"),
            ("gate64_ipsec_crls_expired{crls=\"iphttps\"}", "2"),
            ("gate64_ike_ocsp_total{result=\"cached\"}", "3"),
            ("gate64_ike_qcd_total{result=\"sent\"}", "1"),
            ("gate64_ike_qcd_total{result=\"capped\"}", "2"),
            ("gate64_ike_ocsp_total{result=\"good\"}", "0"),
            ("gate64_ike_chain_cache_entries", "12"),
            ("gate64_ike_chain_cache_total{result=\"hit\"}", "30"),
            ("gate64_ike_chain_cache_total{result=\"miss\"}", "14"),
            ("gate64_ike_chain_cache_total{result=\"evicted\"}", "2"),
            ("gate64_ike_negotiations_total{result=\"ok\"}", "1"),
            ("gate64_ike_negotiations_total{result=\"auth_failed\"}", "1"),
            ("gate64_ipsec_rekeys_total{kind=\"child\"}", "1"),
            ("gate64_ipsec_rekeys_total{kind=\"ike\"}", "0"),
            ("gate64_ike_half_open", "2"),
            ("gate64_ike_cookies_sent_total", "1"),
            ("gate64_ike_keepalives_total", "6"),
            ("gate64_ike_socket_drops_total", "8"),
            ("gate64_ike_liveness_extended_total", "9"),
            ("gate64_ike_liveness_deferred_total", "11"),
            ("gate64_ha_mid_sync_total{result=\"synced\"}", "12"),
            ("gate64_ha_mid_sync_total{result=\"unsupported\"}", "13"),
            ("gate64_ha_mid_sync_total{result=\"failed\"}", "14"),
            (
                "gate64_ike_mobike_updates_total{result=\"check_failed\"}",
                "1",
            ),
            ("gate64_ike_mobike_updates_total{result=\"moved\"}", "0"),
            ("gate64_ike_shed_total{reason=\"source_rate\"}", "7"),
            ("gate64_ike_shed_total{reason=\"batch_share\"}", "0"),
            ("gate64_ike_refused_total{reason=\"too_many_certs\"}", "2"),
            (
                "gate64_ike_refused_total{reason=\"retransmit_elsewhere\"}",
                "1",
            ),
            ("gate64_ike_negotiation_duration_seconds_count", "2"),
            (
                "gate64_ike_negotiation_duration_seconds_bucket{le=\"0.005\"}",
                "1",
            ),
            (
                "gate64_ike_negotiation_duration_seconds_bucket{le=\"+Inf\"}",
                "2",
            ),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        for line in [
            "# TYPE gate64_ike_chain_cache_entries gauge",
            "# TYPE gate64_ike_chain_cache_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
