//! The Grafana dashboard and the Prometheus alerting rules in `contrib/`, against gate64's
//! metrics and a real Prometheus.
//!
//! - `contrib_names_only_metrics_gate64_exports`: every `gate64_*` name in the dashboard's
//!   queries, the rules and the rules' tests is one `gate64_metrics::names` defines (a
//!   misspelt name would draw an empty panel, or, behind `or on() vector(0)`, a flat zero).
//! - `promtool_checks_and_tests_the_alerting_rules`: `promtool check rules` and `promtool
//!   test rules` (a case for every alert, firing and not firing).
//! - `netns_prometheus_scrapes_gate64_and_every_dashboard_query_returns_data`: Debian's
//!   `prometheus` in `tsrv` scrapes `gate64 serve` every second with the rules loaded, while
//!   `gate64 connect teredo` builds both IPsec tunnels to it and pings through them; then
//!   every panel query of the dashboard returns at least one series, the panels for clients,
//!   SAs, IKE and throughput show the lab's client, every rule evaluates without error and
//!   no alert is pending or firing.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::{CORP_HOST, METRICS_ADDR, Process, Topology, find_tool, wait_for};
use serde_json::Value;

use crate::common::{gate64_lines, netns_test, path_str, wait_routes};
use crate::ipsec_connect::{
    ESTABLISH_TIMEOUT, GATE64_ADDRESS6, IFNAME, POOL6, gate64_with_lab_ike, spawn_client,
};

/// Where Prometheus listens inside `tsrv`.
const PROMETHEUS_ADDR: &str = "127.0.0.1:9090";
/// Prometheus' start, first scrapes and first rule evaluations.
const PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(30);
/// What the dashboard's template variables stand for in the test: every instance of the job
/// the rules expect, rates over 5 minutes (every sample of the test is in the window).
const VARIABLES: &[(&str, &str)] = &[
    ("$__rate_interval", "5m"),
    ("$job", "gate64"),
    ("$instance", ".+"),
];

fn contrib(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../contrib")
        .join(file)
}

/// One query of the dashboard: its panel's title, its refId, and the PromQL with the template
/// variables substituted.
struct PanelQuery {
    panel: String,
    ref_id: String,
    expr: String,
}

impl PanelQuery {
    fn name(&self) -> String {
        format!("panel {:?} query {}", self.panel, self.ref_id)
    }
}

/// Every target `expr` of `contrib/grafana/gate64.json` (rows' panels included) and every
/// query of its template variables.
fn dashboard_queries() -> Result<Vec<PanelQuery>> {
    let path = contrib("grafana/gate64.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let dash: Value = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let schema = dash["schemaVersion"].as_u64().unwrap_or(0);
    ensure!(schema >= 36, "schemaVersion {schema}, want at least 36");
    let mut out = Vec::new();
    collect_panels(&dash["panels"], &mut out)?;
    for var in dash["templating"]["list"].as_array().into_iter().flatten() {
        if var["type"] == "query" {
            let expr = var["query"]["query"]
                .as_str()
                .or_else(|| var["query"].as_str())
                .context("a query variable without a query")?;
            let name = var["name"].as_str().unwrap_or("?");
            out.push(PanelQuery {
                panel: format!("variable ${name}"),
                ref_id: "query".to_owned(),
                expr: substitute(&label_values_as_promql(expr))
                    .with_context(|| format!("variable ${name}: {expr}"))?,
            });
        }
    }
    ensure!(!out.is_empty(), "no queries in {}", path.display());
    Ok(out)
}

fn collect_panels(panels: &Value, out: &mut Vec<PanelQuery>) -> Result<()> {
    for panel in panels.as_array().into_iter().flatten() {
        collect_panels(&panel["panels"], out)?;
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .with_context(|| format!("panel {title:?}: a target without expr"))?;
            out.push(PanelQuery {
                panel: title.to_owned(),
                ref_id: target["refId"].as_str().unwrap_or("?").to_owned(),
                expr: substitute(expr).with_context(|| format!("panel {title:?}: {expr}"))?,
            });
        }
    }
    Ok(())
}

fn substitute(expr: &str) -> Result<String> {
    let mut s = expr.to_owned();
    for (var, value) in VARIABLES {
        s = s.replace(var, value);
    }
    ensure!(
        !s.contains('$'),
        "a template variable the test does not know: {s}"
    );
    Ok(s)
}

/// Grafana's `label_values(SELECTOR, LABEL)` as the PromQL whose series carry the values
/// (`group by (LABEL) (SELECTOR)`); any other query as it is.
fn label_values_as_promql(query: &str) -> String {
    let inner = query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'));
    match inner.and_then(|q| q.rsplit_once(',')) {
        Some((selector, label)) => format!("group by ({}) ({selector})", label.trim()),
        None => query.to_owned(),
    }
}

/// The `gate64_*` names in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("gate64_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// Whether gate64 exports `name` (a histogram's `_bucket`, `_sum` and `_count` series
/// included).
fn exported(name: &str) -> bool {
    gate64_metrics::names::ALL.iter().any(|(n, _)| {
        *n == name
            || (*n == gate64_metrics::names::IKE_NEGOTIATION_DURATION_SECONDS
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| name.strip_prefix(n) == Some(suffix)))
    })
}

#[test]
fn contrib_names_only_metrics_gate64_exports() {
    let mut unknown = Vec::new();
    for q in dashboard_queries().expect("reading the dashboard") {
        for name in metric_names(&q.expr).into_iter().filter(|n| !exported(n)) {
            unknown.push(format!("{}: {name}", q.name()));
        }
    }
    for file in [
        "prometheus/gate64-rules.yml",
        "prometheus/gate64-rules.test.yml",
    ] {
        let text = std::fs::read_to_string(contrib(file)).expect("reading the rules");
        for name in metric_names(&text).into_iter().filter(|n| !exported(n)) {
            unknown.push(format!("contrib/{file}: {name}"));
        }
    }
    assert!(
        unknown.is_empty(),
        "names gate64 does not export (crates/metrics/src/names.rs):\n{}",
        unknown.join("\n")
    );
}

/// `promtool`, or `None` (with a message) where it is missing outside CI.
fn promtool() -> Option<PathBuf> {
    let found = find_tool("promtool");
    if found.is_none() {
        gate64_testkit::skip_or_fail(
            "promtool",
            "promtool not installed (Debian package prometheus)",
        );
    }
    found
}

#[test]
fn promtool_checks_and_tests_the_alerting_rules() {
    let Some(promtool) = promtool() else { return };
    for (cmd, file) in [
        ("check", "prometheus/gate64-rules.yml"),
        ("test", "prometheus/gate64-rules.test.yml"),
    ] {
        let out = Command::new(&promtool)
            .args([cmd, "rules"])
            .arg(contrib(file))
            .output()
            .expect("running promtool");
        assert!(
            out.status.success(),
            "promtool {cmd} rules contrib/{file} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
#[ignore = "netns: needs root"]
fn netns_prometheus_scrapes_gate64_and_every_dashboard_query_returns_data() {
    netns_test(
        "netns_prometheus_scrapes_gate64_and_every_dashboard_query_returns_data",
        Topology::builder(),
        scrape_and_query,
    );
}

fn scrape_and_query(topo: &Topology) -> Result<()> {
    let Some(prometheus) = find_tool("prometheus") else {
        gate64_testkit::skip_or_fail(
            "netns_prometheus_scrapes_gate64_and_every_dashboard_query_returns_data",
            "prometheus not installed (Debian package prometheus)",
        );
        return Ok(());
    };
    let queries = dashboard_queries()?;
    let (ike, infrastructure_ts, mut gate) = gate64_with_lab_ike(topo)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    // Prometheus first, so it sees the client's negotiations and traffic as increases.
    let mut prom = start_prometheus(topo, &prometheus)?;
    wait_scraped(topo, &mut prom)?;
    let mut client = spawn_client(
        topo,
        &ike,
        GATE64_ADDRESS6,
        &infrastructure_ts,
        "2001:db8:100::/48",
        3600,
    )?;
    let up = wait_for(ESTABLISH_TIMEOUT, || {
        let m = topo.metrics().ok()?;
        (m.sum("gate64_ipsec_qmsa", &[]) == 2.0 && m.sum("gate64_ipsec_mmsa", &[]) == 2.0)
            .then_some(())
    });
    client.ensure_running()?;
    ensure!(
        up.is_some(),
        "gate64 did not count 2 IKE SAs and 2 child SAs within {ESTABLISH_TIMEOUT:?}\n{}",
        gate64_lines(&topo.metrics()?)
    );
    // gate64 counts the SAs before the client has read its last answer and routed the
    // selectors.
    wait_routes(
        topo,
        &mut client,
        IFNAME,
        &[&format!("{CORP_HOST} "), "2001:db8:100::/48"],
    )?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping the corporate host through the tunnels")?;

    check_lab_values(topo, &queries)?;
    every_query_returns_data(topo, &queries)?;
    names_reach_prometheus(topo, &queries)?;
    rules_evaluate_quietly(topo)?;
    gate.ensure_running()?;
    client.ensure_running()?;
    prom.ensure_running()
}

/// `prometheus` in `tsrv` with its configuration and storage in `tsrv`'s directory, scraping
/// gate64's `/metrics` every second and evaluating `contrib/prometheus/gate64-rules.yml`.
fn start_prometheus(topo: &Topology, bin: &Path) -> Result<Process> {
    let rules = contrib("prometheus/gate64-rules.yml");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {:?}\n\
         scrape_configs:\n  - job_name: gate64\n    static_configs:\n      - targets: [\"{METRICS_ADDR}\"]\n",
        path_str(&rules)?,
    );
    let file = topo.srv.write_file("prometheus.yml", &config)?;
    let tsdb = topo.srv.dir().join("prometheus-tsdb");
    let (config_arg, tsdb_arg) = (
        format!("--config.file={}", path_str(&file)?),
        format!("--storage.tsdb.path={}", path_str(&tsdb)?),
    );
    let listen = format!("--web.listen-address={PROMETHEUS_ADDR}");
    topo.srv.spawn(
        "prometheus",
        &[path_str(bin)?, &config_arg, &tsdb_arg, &listen],
    )
}

/// Waits until Prometheus has scraped gate64 (up == 1) a few times.
fn wait_scraped(topo: &Topology, prom: &mut Process) -> Result<()> {
    let query = "count_over_time(up{job=\"gate64\"}[1m]) >= 3 and up{job=\"gate64\"} == 1";
    let scraped = wait_for(PROMETHEUS_TIMEOUT, || {
        let result = query_vector(topo, query).ok()?;
        (!result.is_empty()).then_some(())
    });
    prom.ensure_running()?;
    ensure!(
        scraped.is_some(),
        "Prometheus did not scrape gate64 three times within {PROMETHEUS_TIMEOUT:?}; targets: \
         {}\nlog:\n{}",
        api_get(topo, "/api/v1/targets").map_or_else(|e| format!("{e:#}"), |v| v.to_string()),
        prom.log()
    );
    Ok(())
}

/// The panels that must show the lab: one Teredo client, two IKE SAs and two child SAs,
/// successful negotiations with a duration, traffic on both sides, the target up. Prometheus
/// scrapes every second, so each is polled until it shows (bounded).
fn check_lab_values(topo: &Topology, queries: &[PanelQuery]) -> Result<()> {
    type Check = fn(&[(Value, f64)]) -> bool;
    let checks: [(&str, &str, Check); 7] = [
        ("gate64 targets up", "A", |r| {
            r.iter().any(|(_, v)| *v == 1.0)
        }),
        ("Clients by transport", "A", |r| {
            r.iter()
                .any(|(m, v)| m["transport"] == "teredo" && *v == 1.0)
        }),
        ("IPsec SAs: MMSA and QMSA", "A", |r| {
            r.iter().any(|(_, v)| *v == 2.0)
        }),
        ("IPsec SAs: MMSA and QMSA", "B", |r| {
            r.iter().any(|(_, v)| *v == 2.0)
        }),
        ("IKE negotiations by result", "A", |r| {
            r.iter().any(|(m, v)| m["result"] == "ok" && *v > 0.0)
        }),
        ("IKE negotiation duration", "A", |r| {
            r.iter().any(|(_, v)| v.is_finite() && *v > 0.0)
        }),
        ("Throughput by side (bytes/s)", "A", |r| {
            ["internet", "corpnet"]
                .iter()
                .all(|side| r.iter().any(|(m, v)| m["side"] == *side && *v > 0.0))
        }),
    ];
    for (panel, ref_id, check) in checks {
        let q = queries
            .iter()
            .find(|q| q.panel == panel && q.ref_id == ref_id)
            .with_context(|| format!("the dashboard has no panel {panel:?} query {ref_id}"))?;
        let shown = wait_for(PROMETHEUS_TIMEOUT, || {
            let r = query_vector(topo, &q.expr).ok()?;
            check(&r).then_some(())
        });
        ensure!(
            shown.is_some(),
            "{} does not show the lab within {PROMETHEUS_TIMEOUT:?}: {} returns {:?}\n{}",
            q.name(),
            q.expr,
            query_vector(topo, &q.expr),
            gate64_lines(&topo.metrics()?)
        );
    }
    Ok(())
}

/// Every panel query returns at least one series; the failures are listed together.
fn every_query_returns_data(topo: &Topology, queries: &[PanelQuery]) -> Result<()> {
    let mut failures = Vec::new();
    for q in queries {
        match query_vector(topo, &q.expr) {
            Ok(r) if !r.is_empty() => println!("{}: {} series", q.name(), r.len()),
            Ok(_) => failures.push(format!("{}: no series from {}", q.name(), q.expr)),
            Err(e) => failures.push(format!("{}: {e:#}", q.name())),
        }
    }
    ensure!(
        failures.is_empty(),
        "{} of {} dashboard queries return nothing:\n{}",
        failures.len(),
        queries.len(),
        failures.join("\n")
    );
    Ok(())
}

/// Every `gate64_*` name the dashboard reads that gate64 exposes here is in Prometheus too;
/// the others (families whose series appear once something happened) must be gate64's names.
fn names_reach_prometheus(topo: &Topology, queries: &[PanelQuery]) -> Result<()> {
    let stored = api_get(topo, "/api/v1/label/__name__/values")?;
    let stored: BTreeSet<&str> = stored
        .as_array()
        .context("label values: not an array")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let exposition = topo.metrics()?;
    let mut failures = Vec::new();
    for q in queries {
        for name in metric_names(&q.expr) {
            if stored.contains(name.as_str()) {
                continue;
            }
            if exposition.has(&name) || !exported(&name) {
                failures.push(format!("{}: {name} is not in Prometheus", q.name()));
            } else {
                println!("{}: {name} has no series in this lab", q.name());
            }
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// Every rule of `gate64-rules.yml` is loaded and evaluates without error, and in this
/// healthy lab no alert is pending or firing (polled: `Gate64MetricsAbsent` may be pending
/// from an evaluation before the first scrape until the next one).
fn rules_evaluate_quietly(topo: &Topology) -> Result<()> {
    let file = std::fs::read_to_string(contrib("prometheus/gate64-rules.yml"))?;
    let alerts = file
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    let healthy = wait_for(PROMETHEUS_TIMEOUT, || {
        let groups = api_get(topo, "/api/v1/rules").ok()?;
        let rules: Vec<&Value> = groups["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        let ok = rules.len() == alerts && rules.iter().all(|r| r["health"] == "ok");
        let quiet = rules.iter().all(|r| r["state"] == "inactive");
        (ok && quiet).then_some(rules.len())
    });
    ensure!(
        healthy.is_some(),
        "the {alerts} rules did not all load, evaluate without error and stay inactive \
         within {PROMETHEUS_TIMEOUT:?}: {}",
        api_get(topo, "/api/v1/rules").map_or_else(|e| format!("{e:#}"), |v| v.to_string())
    );
    println!(
        "{} alerting rules loaded, healthy and inactive",
        healthy.unwrap_or(0)
    );
    Ok(())
}

/// `/api/v1/query` at the current time: each sample's labels and value (NaN included).
fn query_vector(topo: &Topology, expr: &str) -> Result<Vec<(Value, f64)>> {
    let data = api_get(topo, &format!("/api/v1/query?query={}", url_encode(expr)))?;
    let result = match data["resultType"].as_str() {
        Some("vector") => data["result"].as_array().cloned().unwrap_or_default(),
        Some("scalar") => vec![serde_json::json!({ "metric": {}, "value": data["result"] })],
        other => bail!("{expr}: result type {other:?}"),
    };
    result
        .into_iter()
        .map(|s| {
            let v = s["value"][1].as_str().context("sample without a value")?;
            let v = match v {
                "NaN" => f64::NAN,
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().with_context(|| format!("sample value {v:?}"))?,
            };
            Ok((s["metric"].clone(), v))
        })
        .collect()
}

/// GET `path` from Prometheus' HTTP API inside `tsrv`; its `data` on success, its error
/// (PromQL parse errors included) otherwise.
fn api_get(topo: &Topology, path: &str) -> Result<Value> {
    let addr: SocketAddr = PROMETHEUS_ADDR.parse()?;
    let body = topo.srv.run_in(|| -> Result<String> {
        let timeout = Duration::from_secs(5);
        let mut s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (_, body) = text
            .split_once("\r\n\r\n")
            .context("no end of HTTP headers")?;
        Ok(body.to_owned())
    })??;
    let v: Value = serde_json::from_str(&body).with_context(|| format!("GET {path}: {body}"))?;
    ensure!(
        v["status"] == "success",
        "GET {path}: {} {}",
        v["errorType"],
        v["error"]
    );
    Ok(v["data"].clone())
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}
