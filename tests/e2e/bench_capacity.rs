//! `gate64 bench capacity` end to end: a short run of the harness — 1,000 emulated
//! clients (70% Teredo, 30% IP-HTTPS, both IPsec tunnels each) plus Debian's miredo client
//! with strongSwan over it, one 20-second load step — must connect every client, pass a probe
//! through every client's tunnels, and write the JSON rows of the contract. Outcomes only:
//! the figures are printed, never asserted.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::{gate64_binary, netns_or_skip, wait_until};

const CLIENTS: u64 = 1000;
/// Connect, probe, one step, tear down; generous for a shared, busy machine.
const RUN_TIMEOUT: Duration = Duration::from_secs(480);

#[test]
#[ignore = "netns: needs root"]
fn netns_bench_capacity_short() {
    let name = "netns_bench_capacity_short";
    if !netns_or_skip(name) {
        return;
    }
    if let Err(e) = short_run() {
        panic!("{name}: {e:#}");
    }
}

/// DNS64 pointed at an upstream nobody serves: the run exits non-zero, its error names
/// DNS64, and the JSON records DNS64 as failed (and no silent fallback to the synthesized
/// address).
#[test]
#[ignore = "netns: needs root"]
fn netns_bench_capacity_fails_when_dns64_is_broken() {
    let name = "netns_bench_capacity_fails_when_dns64_is_broken";
    if !netns_or_skip(name) {
        return;
    }
    if let Err(e) = broken_dns64_run() {
        panic!("{name}: {e:#}");
    }
}

fn broken_dns64_run() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("gate64-bench-dns64-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (json, log) = (dir.join("capacity.json"), dir.join("capacity.log"));
    // 10.20.0.99 is on the corporate link, where no host answers.
    let args = [
        "--clients",
        "200",
        "--no-third-party",
        "--dns64-upstream",
        "10.20.0.99",
    ];
    let outcome = run_capacity(&args, &json, &log);
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let result = (|| {
        let err = match outcome {
            Ok(()) => anyhow::bail!("gate64 bench capacity passed with DNS64 broken"),
            Err(e) => format!("{e:#}"),
        };
        ensure!(err.contains("exit status"), "not a failed exit: {err}");
        let last = output.lines().rev().take(5).collect::<Vec<_>>().join("\n");
        ensure!(
            last.contains("DNS64"),
            "the run's error does not name DNS64:\n{last}"
        );
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
        let row = &v["rows"][0];
        ensure!(
            row["probe_paths"]["dns64"]["ok"].as_bool() == Some(false)
                && row["probe_paths"]["dns64"]["fallback_used"].as_bool() == Some(false),
            "DNS64 not recorded as failed: {row}"
        );
        let failures = row["path_failures"].as_array().cloned().unwrap_or_default();
        ensure!(
            failures
                .iter()
                .any(|f| f.as_str().is_some_and(|f| f.contains("DNS64"))),
            "path_failures does not name DNS64: {row}"
        );
        Ok(())
    })();
    if result.is_err() {
        eprintln!("gate64 bench capacity output:\n{output}");
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn short_run() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("gate64-bench-capacity-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let json = dir.join("capacity.json");
    let log = dir.join("capacity.log");
    let args = ["--clients", &CLIENTS.to_string(), "--max-mbps", "10"];
    let result = run_capacity(&args, &json, &log).and_then(|()| check(&json));
    if result.is_err() {
        eprintln!(
            "gate64 bench capacity output:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn run_capacity(args: &[&str], json: &Path, log: &Path) -> Result<()> {
    let bin = gate64_binary()?;
    let out = std::fs::File::create(log)?;
    let mut child = Command::new(&bin)
        .args(["bench", "capacity"])
        .args(args)
        .args(["--seconds", "20", "--start-mbps", "10"])
        .args(["--refine", "0", "--connect-per-sec", "200", "--json"])
        .arg(json)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("spawning {}", bin.display()))?;
    let done = wait_until(RUN_TIMEOUT, || matches!(child.try_wait(), Ok(Some(_))));
    if !done {
        // SIGTERM: the harness tears its namespaces down on the way out.
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        let _ = wait_until(Duration::from_secs(30), || {
            matches!(child.try_wait(), Ok(Some(_)))
        });
        let _ = child.kill();
        let _ = child.wait();
    }
    ensure!(
        done,
        "gate64 bench capacity did not finish within {RUN_TIMEOUT:?}"
    );
    let status = child.wait()?;
    ensure!(status.success(), "gate64 bench capacity: {status}");
    Ok(())
}

fn check(json: &Path) -> Result<()> {
    let text = std::fs::read_to_string(json).with_context(|| format!("{}", json.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let row = v["rows"]
        .get(0)
        .with_context(|| format!("no rows in {text}"))?;
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
        ensure!(row.get(key).is_some(), "row lacks {key}: {row}");
    }
    let n = |key: &str| row[key].as_u64().unwrap_or(0);
    ensure!(n("clients_failed") == 0, "clients failed: {row}");
    ensure!(
        n("clients_probed") == CLIENTS && n("clients_passed_traffic") == CLIENTS,
        "not every client passed traffic through its tunnels: {row}"
    );
    // The emulated clients plus the miredo + strongSwan one.
    ensure!(n("clients") == CLIENTS + 1, "clients connected: {row}");
    ensure!(
        n("teredo") > 0 && n("iphttps") > 0,
        "both transports in the mix: {row}"
    );
    ensure!(
        n("mmsa") >= 2 * (CLIENTS + 1) && n("qmsa") >= 2 * (CLIENTS + 1),
        "both tunnels of every client: {row}"
    );
    ensure!(
        row["third_party_ok"].as_bool() == Some(true),
        "the strongSwan client over miredo reached the corporate host: {row}"
    );
    ensure!(n("gate64_rss_bytes") > 0, "no RSS: {row}");
    // Every claimed path worked, in the probe and in every step: DNS64 answered with the
    // synthesized address (no fallback), NAT64 and native IPv6 traffic and both transports'
    // clients were answered or delivered bytes.
    ensure!(
        row["path_failures"].as_array().is_some_and(Vec::is_empty)
            && row["nat64_fallback"].as_bool() == Some(false),
        "claimed paths failed: {row}"
    );
    let path_ok = |paths: &serde_json::Value, key: &str| -> bool {
        let p = &paths[key];
        p["probes"].as_u64() == p["probes_ok"].as_u64() && p["flows"].as_u64().is_some()
    };
    let probe = &row["probe_paths"];
    ensure!(
        probe["dns64"]["ok"].as_bool() == Some(true)
            && ["nat64", "ipv6", "teredo", "iphttps"]
                .iter()
                .all(|k| path_ok(probe, k) && probe[k]["probes"].as_u64() > Some(0)),
        "a path of the probe did not work: {probe}"
    );
    // Every step says where packets were dropped (an empty object when nowhere), and no
    // client of this light load reached a per-client NAT64 limit: each IPsec client is a
    // NAT64 client of its own, not one shared /64.
    let steps = row["steps"]
        .as_array()
        .filter(|s| !s.is_empty())
        .with_context(|| format!("no steps: {row}"))?;
    for step in steps {
        let paths = &step["paths"];
        ensure!(
            paths["dns64"]["ok"].as_bool() == Some(true)
                && ["nat64", "ipv6", "teredo", "iphttps"]
                    .iter()
                    .all(|k| paths[k]["bytes"].as_u64() > Some(0)),
            "a path carried nothing in a step: {step}"
        );
        let drops = step["drops"]
            .as_object()
            .with_context(|| format!("a step without drops: {step}"))?;
        ensure!(
            drops.values().all(serde_json::Value::is_u64),
            "drops are counts: {step}"
        );
        for reason in ["nat64_client_port_limit", "nat64_client_session_limit"] {
            ensure!(
                !drops.contains_key(&format!("gate64/{reason}")),
                "clients hit a per-client NAT64 limit at a light load: {step}"
            );
        }
    }
    println!(
        "capacity, {} clients: corpnet {:.1} Mbit/s, gate64 CPU {:.0}%, RSS {} bytes, \
         QMSA {}, MMSA {}",
        n("clients"),
        row["corpnet_mbps"].as_f64().unwrap_or(0.0),
        row["cpu_percent"].as_f64().unwrap_or(0.0),
        n("gate64_rss_bytes"),
        n("qmsa"),
        n("mmsa")
    );
    Ok(())
}
