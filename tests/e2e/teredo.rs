//! Teredo against Debian's Miredo client in network namespaces (teredo-iphttps.md §3).
//!
//! - `netns_reference_miredo_pair`: Miredo's own server and relay; validates the harness.
//! - `netns_teredo_miredo_without_ipsec`: gate64 as Teredo server + relay, corpnet without
//!   IPsec: qualification, ping both ways, iperf3 both ways, metrics.
//! - `netns_teredo_flood_keeps_clients_working_without_ipsec`: the same while `teredo-flood` hammers
//!   192.0.2.1:3544 from a fourth namespace.
//! - `netns_tun_napi_refused_where_sys_cannot_switch_it`: `corpnet.tun_napi = true` where
//!   `/sys` shows another namespace: the start fails naming the key.

use std::net::{Ipv6Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::flood::{self, FloodConfig, FloodReport};
use gate64_testkit::{
    ATTACKER_V4, CORP_HOST, Gate64Options, Metrics, Process, SERVER_V4, TEREDO_PORT, Topology,
    find_binary, find_tool, gate64_binary,
};

use crate::common::{gate64_lines, netns_test};

/// RS retries every 4 s (teredo-iphttps.md §1.9): 15 s allows three attempts.
const QUALIFY_TIMEOUT: Duration = Duration::from_secs(15);
/// Datagrams the flood test sends (at most; it is also bounded in time).
const FLOOD_COUNT: u64 = 1_000_000;
/// Flood rate limit: high enough to hurt, low enough for two shared cores.
const FLOOD_PPS: u64 = 150_000;
/// Hard bound on the flood's duration, whatever rate is reached.
const FLOOD_MAX: Duration = Duration::from_secs(30);
/// A flood should make gate64 drop for at least this many distinct reasons.
const MIN_DROP_REASONS: usize = 3;

#[test]
#[ignore = "netns: needs root"]
fn netns_reference_miredo_pair() {
    netns_test(
        "netns_reference_miredo_pair",
        Topology::builder(),
        reference_pair,
    );
}

fn reference_pair(topo: &Topology) -> Result<()> {
    let _pair = topo.start_reference_pair()?;
    let _iperf = topo.start_iperf_server()?;
    let (_client, addr) = qualify(topo)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp via Miredo's relay")?;
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> the client's Teredo address")?;
    // Short runs: they validate the iperf3 helper the gate64 tests rely on.
    for reverse in [false, true] {
        let r = topo.iperf3(1, 1, reverse)?;
        ensure!(
            r.received_bytes > 0,
            "iperf3 (reverse: {reverse}) moved no data: {r:?}"
        );
        println!(
            "reference iperf3 reverse={reverse}: {:.0} Mbit/s",
            r.received_bps / 1e6
        );
    }
    Ok(())
}

#[test]
#[ignore = "netns: needs root"]
fn netns_teredo_miredo_without_ipsec() {
    netns_test(
        "netns_teredo_miredo_without_ipsec",
        Topology::builder(),
        without_ipsec,
    );
}

fn without_ipsec(topo: &Topology) -> Result<()> {
    // `corpnet.tun_napi = true`: gate64's TUN forwards in NAPI threads
    // (gate64_io::tun::TunQueue), not in its workers; every other Teredo test runs the
    // default, a plain TUN.
    let toml = Gate64Options::default().config_toml().replace(
        "address6 = \"2001:db8:100::1\"\n",
        "address6 = \"2001:db8:100::1\"\ntun_napi = true\n",
    );
    ensure!(toml.contains("tun_napi = true"), "the key was not written");
    let mut gate = topo.start_gate64_with(&toml)?;
    ensure_tun_threaded(topo, true)?;
    let _iperf = topo.start_iperf_server()?;
    let (_client, addr) = qualify(topo)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp through gate64")?;
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> the client's Teredo address")?;
    for reverse in [false, true] {
        let r = topo
            .iperf3(3, 1, reverse)
            .with_context(|| iperf_what(reverse))?;
        ensure!(
            r.sent_bytes > 0 && r.received_bytes > 0,
            "{}: no data: {r:?}",
            iperf_what(reverse)
        );
        println!(
            "{}: {:.0} Mbit/s",
            iperf_what(reverse),
            r.received_bps / 1e6
        );
    }
    gate.ensure_running()?;

    let text = topo.metrics_text()?;
    promtool_check(topo, &text)?;
    let m = Metrics::parse(&text);
    let clients = m.get("gate64_clients", &[("transport", "teredo")]);
    ensure!(
        clients == Some(1.0),
        "gate64_clients{{transport=\"teredo\"}} is {clients:?}, expected 1\n{}",
        gate64_lines(&m)
    );
    let quals = m.sum("gate64_teredo_qualifications_total", &[]);
    ensure!(
        quals >= 1.0,
        "gate64_teredo_qualifications_total is {quals}\n{}",
        gate64_lines(&m)
    );
    let tx = m.get(
        "gate64_bytes_total",
        &[("side", "corpnet"), ("direction", "tx")],
    );
    ensure!(
        tx.is_some_and(|b| b > 0.0),
        "gate64_bytes_total{{side=\"corpnet\",direction=\"tx\"}} is {tx:?}\n{}",
        gate64_lines(&m)
    );
    Ok(())
}

#[test]
#[ignore = "netns: needs root"]
fn netns_teredo_flood_keeps_clients_working_without_ipsec() {
    netns_test(
        "netns_teredo_flood_keeps_clients_working_without_ipsec",
        Topology::builder().attacker(true),
        flood_keeps_clients_working,
    );
}

fn flood_keeps_clients_working(topo: &Topology) -> Result<()> {
    let started = Instant::now();
    // Debug logging could write a line per dropped datagram; keep the log readable.
    let opts = Gate64Options {
        log_level: "info".to_owned(),
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    // The default (`corpnet.tun_napi = false`): a plain TUN, no NAPI thread.
    ensure_tun_threaded(topo, false)?;
    let _iperf = topo.start_iperf_server()?;
    let (_client, addr) = qualify(topo)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping before the flood")?;
    let before = topo.metrics()?;

    let mut flood = Flood::start(topo)?;
    thread::sleep(Duration::from_secs(1));
    let ping_during = topo.ping6(&topo.cli, CORP_HOST, 10);
    let iperf_during = topo.iperf3(3, 1, false);
    let report = flood.finish()?;
    println!("flood ({}):\n{report}", flood.how());
    println!("ping during the flood: {ping_during:?}");
    println!("iperf3 during the flood: {iperf_during:?}");

    gate.ensure_running()
        .context("gate64 died during the flood")?;
    let ping_during = ping_during.context("ping during the flood")?;
    ensure!(
        ping_during.received > 0,
        "no ping reply during the flood:\n{}",
        ping_during.output
    );
    let iperf_during = iperf_during.context("iperf3 during the flood")?;
    ensure!(
        iperf_during.received_bytes > 0,
        "iperf3 moved nothing during the flood"
    );

    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp after the flood")?;
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> client after the flood")?;

    let after = topo.metrics().context("gate64 /metrics after the flood")?;
    let drops = diff_by(&before, &after, "gate64_drops_total", "reason");
    println!("gate64_drops_total during the flood:");
    for (reason, n) in &drops {
        println!("  {reason:<22} {n}");
    }
    ensure!(
        drops.len() >= MIN_DROP_REASONS,
        "expected non-zero gate64_drops_total for at least {MIN_DROP_REASONS} reasons, got \
         {drops:?}\n{}",
        gate64_lines(&after)
    );
    println!("flood test took {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Starts the Miredo client and waits for its Teredo address.
pub(crate) fn qualify(topo: &Topology) -> Result<(Process, Ipv6Addr)> {
    let mut client = topo.start_miredo_client()?;
    let t = Instant::now();
    let addr = topo.wait_client_address(&mut client, QUALIFY_TIMEOUT)?;
    println!(
        "client qualified as {addr} in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    Ok((client, addr))
}

#[test]
#[ignore = "netns: needs root"]
fn netns_tun_napi_refused_where_sys_cannot_switch_it() {
    if let Err(e) = tun_napi_refused() {
        panic!("{e:#}");
    }
}

/// gate64 in a network namespace of its own (`unshare -n`) whose `/sys` is still the
/// host's, so `/sys/class/net/<tun>/threaded` does not exist there: with
/// `corpnet.tun_napi = true` the start must fail and name the key, not run without NAPI.
fn tun_napi_refused() -> Result<()> {
    let conf = std::env::temp_dir().join(format!("gate64-tun-napi-{}.toml", std::process::id()));
    let toml = Gate64Options::default().config_toml().replace(
        "address6 = \"2001:db8:100::1\"\n",
        "address6 = \"2001:db8:100::1\"\ntun_napi = true\n",
    );
    ensure!(toml.contains("tun_napi = true"), "the key was not written");
    std::fs::write(&conf, toml)?;
    let bin = gate64_binary()?;
    // `timeout` bounds the run should gate64 start after all.
    let out = std::process::Command::new("timeout")
        .arg("20")
        .args(["unshare", "-n"])
        .arg(&bin)
        .args(["serve", "--config"])
        .arg(&conf)
        .output();
    let _ = std::fs::remove_file(&conf);
    let out = out.context("running gate64 serve under unshare -n")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(1),
        "gate64 serve did not refuse the start ({:?}): {stderr}",
        out.status
    );
    ensure!(
        stderr.contains("corpnet.tun_napi = true") && stderr.contains("threaded"),
        "the refusal does not name the key and the switch: {stderr}"
    );
    Ok(())
}

/// Fails unless gate64's TUN has its NAPI in kernel threads exactly when `expected` says.
fn ensure_tun_threaded(topo: &Topology, expected: bool) -> Result<()> {
    let threaded = topo
        .srv
        .exec_ok(&["cat", "/sys/class/net/gate64/threaded"])?;
    ensure!(
        (threaded.trim() == "1") == expected,
        "the TUN's NAPI threaded = {threaded:?}, expected {expected}"
    );
    Ok(())
}

fn iperf_what(reverse: bool) -> &'static str {
    if reverse {
        "iperf3 -R (tcorp -> client)"
    } else {
        "iperf3 (client -> tcorp)"
    }
}

/// Lints the exposition with `promtool check metrics` (naming, units, help texts), when
/// promtool (Debian package `prometheus`) is installed; CI must have it.
pub(crate) fn promtool_check(topo: &Topology, text: &str) -> Result<()> {
    let Some(promtool) = find_tool("promtool") else {
        gate64_testkit::skip_or_fail(
            "promtool_check",
            "promtool not installed (Debian package prometheus): /metrics not linted",
        );
        return Ok(());
    };
    let file = topo.srv.write_file("metrics.txt", text)?;
    let cmd = format!("{} check metrics < {}", promtool.display(), file.display());
    let out = topo.srv.exec(&["sh", "-c", &cmd])?;
    ensure!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Non-zero increases of `name` between two scrapes, keyed by `label`.
fn diff_by(before: &Metrics, after: &Metrics, name: &str, label: &str) -> Vec<(String, f64)> {
    let base = before.nonzero_by(name, label);
    after
        .nonzero_by(name, label)
        .into_iter()
        .filter_map(|(k, v)| {
            let old = base.iter().find(|(b, _)| *b == k).map_or(0.0, |(_, o)| *o);
            (v > old).then_some((k, v - old))
        })
        .collect()
}

/// The flood, from `tatk`: the `teredo-flood` binary when it has been built, otherwise the
/// same generator on a thread inside the namespace.
enum Flood {
    Binary(Process),
    Thread(
        Arc<AtomicBool>,
        Option<JoinHandle<Result<std::io::Result<FloodReport>>>>,
    ),
}

impl Flood {
    fn config() -> FloodConfig {
        FloodConfig {
            target: SocketAddrV4::new(SERVER_V4, TEREDO_PORT),
            count: FLOOD_COUNT,
            pps: FLOOD_PPS,
            seed: 0x6a7e_6401,
            sources: 256,
            bind: ATTACKER_V4,
            max_duration: Some(FLOOD_MAX),
            ..FloodConfig::default()
        }
    }

    fn start(topo: &Topology) -> Result<Flood> {
        let atk = topo.atk()?;
        let cfg = Flood::config();
        if let Ok(bin) = find_binary("teredo-flood", "TEREDO_FLOOD_BIN") {
            let bin = bin.to_str().context("non-UTF-8 path")?.to_owned();
            let args = [
                ("--target", cfg.target.to_string()),
                ("--count", cfg.count.to_string()),
                ("--pps", cfg.pps.to_string()),
                ("--seed", cfg.seed.to_string()),
                ("--sources", cfg.sources.to_string()),
                ("--bind", cfg.bind.to_string()),
                ("--duration", FLOOD_MAX.as_secs().to_string()),
            ];
            let mut argv = vec![bin.as_str()];
            for (k, v) in &args {
                argv.push(k);
                argv.push(v);
            }
            return Ok(Flood::Binary(atk.spawn("teredo-flood", &argv)?));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = atk.spawn_thread("teredo-flood", move || flood::run(&cfg, &flag))?;
        Ok(Flood::Thread(stop, Some(handle)))
    }

    fn how(&self) -> &'static str {
        match self {
            Flood::Binary(_) => "teredo-flood binary",
            Flood::Thread(..) => "in-process generator; teredo-flood binary not built",
        }
    }

    /// Waits for the flood to end (bounded by `FLOOD_MAX` plus slack) and returns its report.
    fn finish(&mut self) -> Result<String> {
        let limit = FLOOD_MAX + Duration::from_secs(10);
        match self {
            Flood::Binary(p) => {
                let Some(status) = p.wait_timeout(limit) else {
                    bail!("teredo-flood still running after {limit:?}");
                };
                ensure!(
                    status.success(),
                    "teredo-flood failed ({status}):\n{}",
                    p.log()
                );
                Ok(p.log())
            }
            Flood::Thread(_, handle) => {
                let handle = handle.take().context("flood already finished")?;
                let t = Instant::now();
                while !handle.is_finished() && t.elapsed() < limit {
                    thread::sleep(Duration::from_millis(100));
                }
                ensure!(
                    handle.is_finished(),
                    "flood thread still running after {limit:?}"
                );
                let report = handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("flood thread panicked"))?;
                Ok(report??.to_string())
            }
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        // On an early error, stop the flood rather than leave it running into the next test.
        if let Flood::Thread(stop, _) = self {
            stop.store(true, Ordering::Relaxed);
        }
    }
}
