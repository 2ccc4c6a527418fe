//! The exposition passes `promtool check metrics` (format and Prometheus's naming lints).

use std::fs::File;
use std::io::ErrorKind;
use std::process::{Command, Stdio};
use std::sync::Arc;

use gate64_dataplane::{Direction, DropReason, Gauges, Side, Stats};
use gate64_metrics::Exporter;

/// A missing tool fails the test unless the run opted out (`scripts/test --unit-only`); the
/// test kit's rule, included by path since this crate sits below the test kit.
#[path = "../../testkit/src/skip.rs"]
mod skip;

#[test]
fn promtool_check_metrics_accepts_exposition() {
    let worker = Arc::new(Stats::default());
    worker.packet(Side::Corpnet, Direction::Tx, 1500);
    worker.packet(Side::Internet, Direction::Rx, 1528);
    worker.count_drops(DropReason::SpoofedSource, 1);
    worker.teredo_qualifications.inc();
    let exporter = Exporter::new(
        vec![worker, Arc::new(Stats::default())],
        Arc::new(|| Gauges {
            teredo_clients: 2,
            teredo_peers: 3,
            iphttps_clients: 1,
            nat64: Some(gate64_dataplane::Nat64Gauges {
                bib_entries: [1, 2, 3],
                sessions: [4, 5, 6],
                pool_capacity: 64512,
                pool_exhausted: 0,
            }),
            iphttps_queued_bytes: 65536,
            iphttps_queue_budget_bytes: 268_435_456,
        }),
    );
    let text = exporter.encode();

    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gate64-metrics-{}.prom", std::process::id()));
    std::fs::write(&path, &text).expect("write the exposition to the target tmp dir");
    let stdin = File::open(&path).expect("reopen the exposition file");

    let output = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::from(stdin))
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let _ = std::fs::remove_file(&path);
            skip::skip_or_fail(
                "promtool_check_metrics_accepts_exposition",
                "promtool not installed (Debian package prometheus)",
            );
            return;
        }
        Err(e) => panic!("running promtool: {e}"),
    };
    let _ = std::fs::remove_file(&path);
    assert!(
        output.status.success(),
        "promtool check metrics failed ({}):\nstdout:\n{}\nstderr:\n{}\ninput:\n{text}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}
