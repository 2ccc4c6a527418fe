//! One gauge or counter, or a family of them by label set, written as prometheus-client
//! encodes it: the exporter's collectors and the IPsec source all describe their series
//! through these.

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::fmt;

/// prometheus-client appends `_total` to counters, so it gets the name without it.
fn counter_base(name: &str) -> &str {
    let base = name.strip_suffix("_total");
    debug_assert!(base.is_some(), "counter name {name} must end in _total");
    base.unwrap_or(name)
}

pub(crate) fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let m = ConstGauge::new(v);
    m.encode(enc.encode_descriptor(name, help, None, m.metric_type())?)
}

pub(crate) fn gauge_family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

pub(crate) fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let m = ConstCounter::new(v);
    m.encode(enc.encode_descriptor(counter_base(name), help, None, m.metric_type())?)
}

pub(crate) fn counter_family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(counter_base(name), help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}
