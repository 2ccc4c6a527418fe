//! The GRE gateway's series: tunnels by state, bytes and packets per tunnel and
//! direction, and the GRE drop reasons added to `gate64_drops_total`.

use std::sync::Arc;

use gate64_dataplane::DropReason;
use prometheus_client::encoding::DescriptorEncoder;

use crate::encode::{counter_family, gauge_family};
use crate::names;

/// One tunnel at scrape time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GreTunnelSample {
    /// The tunnel's configured name (`tunnel` label; operators name a handful of tunnels, so
    /// the label stays low-cardinality).
    pub name: String,
    /// Up (keepalives answered, or keepalives off) or down.
    pub up: bool,
    /// Inner bytes received from the peer / sent to it.
    pub bytes: [u64; 2],
    /// Inner packets received from the peer / sent to it.
    pub packets: [u64; 2],
}

/// What the GRE data path reports at each scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GreSnapshot {
    /// Every tunnel.
    pub tunnels: Vec<GreTunnelSample>,
    /// Drops by reason, added to `gate64_drops_total{reason}`.
    pub drops: Vec<(DropReason, u64)>,
}

/// Reads the GRE data path's counters.
pub type GreReader = Arc<dyn Fn() -> GreSnapshot + Send + Sync>;

/// Adds the snapshots' drops to the per-reason totals.
pub(super) fn add_drops(totals: &mut [u64; DropReason::COUNT], snapshots: &[GreSnapshot]) {
    for s in snapshots {
        for (reason, n) in &s.drops {
            let t = &mut totals[*reason as usize];
            *t = t.wrapping_add(*n);
        }
    }
}

pub(super) fn encode(enc: &mut DescriptorEncoder, snapshots: &[GreSnapshot]) -> std::fmt::Result {
    let tunnels = || snapshots.iter().flat_map(|s| s.tunnels.iter());
    let up = tunnels().filter(|t| t.up).count() as u64;
    let down = tunnels().count() as u64 - up;
    gauge_family(
        enc,
        names::GRE_TUNNELS,
        names::GRE_TUNNELS_HELP,
        [([("state", "up")], up), ([("state", "down")], down)],
    )?;
    const DIRECTIONS: [&str; 2] = ["rx", "tx"];
    counter_family(
        enc,
        names::GRE_BYTES_TOTAL,
        names::GRE_BYTES_TOTAL_HELP,
        tunnels().flat_map(|t| {
            DIRECTIONS.iter().zip(t.bytes).map(|(d, n)| {
                (
                    [("tunnel", t.name.clone()), ("direction", (*d).to_owned())],
                    n,
                )
            })
        }),
    )?;
    counter_family(
        enc,
        names::GRE_PACKETS_TOTAL,
        names::GRE_PACKETS_TOTAL_HELP,
        tunnels().flat_map(|t| {
            DIRECTIONS.iter().zip(t.packets).map(|(d, n)| {
                (
                    [("tunnel", t.name.clone()), ("direction", (*d).to_owned())],
                    n,
                )
            })
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Exporter;
    use gate64_dataplane::Gauges;

    fn sample<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    #[test]
    fn gre_series_and_drops_are_exported() {
        let e = Exporter::new(Vec::new(), Arc::new(Gauges::default));
        let text = e.encode();
        assert_eq!(sample(&text, "gate64_gre_tunnels{state=\"up\"}"), Some("0"));
        assert_eq!(
            sample(&text, "gate64_drops_total{reason=\"gre_bad_key\"}"),
            Some("0")
        );
        e.add_gre(Arc::new(|| GreSnapshot {
            tunnels: vec![
                GreTunnelSample {
                    name: "site2".into(),
                    up: true,
                    bytes: [100, 200],
                    packets: [1, 2],
                },
                GreTunnelSample {
                    name: "site3".into(),
                    up: false,
                    bytes: [0, 0],
                    packets: [0, 0],
                },
            ],
            drops: vec![(DropReason::GreBadKey, 5), (DropReason::GreTtl, 1)],
        }));
        let text = e.encode();
        assert_eq!(sample(&text, "gate64_gre_tunnels{state=\"up\"}"), Some("1"));
        assert_eq!(
            sample(&text, "gate64_gre_tunnels{state=\"down\"}"),
            Some("1")
        );
        assert_eq!(
            sample(
                &text,
                "gate64_gre_bytes_total{tunnel=\"site2\",direction=\"tx\"}"
            ),
            Some("200")
        );
        assert_eq!(
            sample(
                &text,
                "gate64_gre_packets_total{tunnel=\"site2\",direction=\"rx\"}"
            ),
            Some("1")
        );
        assert_eq!(
            sample(&text, "gate64_drops_total{reason=\"gre_bad_key\"}"),
            Some("5")
        );
        assert_eq!(
            sample(&text, "gate64_drops_total{reason=\"gre_ttl\"}"),
            Some("1")
        );
    }
}
