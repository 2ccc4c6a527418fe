//! Helpers shared by the e2e modules: the netns test wrapper, and the IP-HTTPS lab set-up
//! (certificates, `gate64 serve` with `[iphttps]`, `gate64 connect iphttps`) and metrics.

use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::strongswan::{Charon, INFRASTRUCTURE, LabCerts};
use gate64_testkit::{
    CLIENT_GW_V4, CORP_HOST, Gate64Options, Metrics, Process, Topology, TopologyBuilder,
    gate64_binary, netns_or_skip, wait_for, wait_until,
};

/// The IP-HTTPS client prefix gate64 hands /64s from.
pub(crate) const IPHTTPS_PREFIX: &str = "2001:db8:1::/48";
/// The corporate prefix the clients route into their tunnel.
pub(crate) const CORP_PREFIX: &str = "2001:db8:100::/48";
/// Connect + TLS + RS/RA normally takes well under a second.
pub(crate) const LINK_TIMEOUT: Duration = Duration::from_secs(15);
/// gate64's `corpnet.address6` in the lab configuration.
pub(crate) const GATE64_ADDRESS6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
/// gate64's inner-address pool (`[ipsec] pool6`) in the IPsec labs.
pub(crate) const POOL6: &str = "fd00:c1::100/120";
/// A corporate host on the intranet link that a policy admitting only [`CORP_HOST`] cuts off.
pub(crate) const OTHER_CORP_HOST: &str = "2001:db8:100:1::3";

/// The body of a `netns_*` test: skips without root and `ip netns`, otherwise builds the lab
/// topology from `builder` and runs `scenario` in it (on error: all logs, then a panic).
pub(crate) fn netns_test(
    name: &str,
    builder: TopologyBuilder,
    scenario: impl FnOnce(&Topology) -> Result<()>,
) {
    if !netns_or_skip(name) {
        return;
    }
    let topo = builder.build().expect("building the lab topology");
    topo.check(scenario(&topo));
}

/// `gate64 certs` output for the server's client-side address, in `tsrv`'s directory.
pub(crate) fn make_certs(topo: &Topology) -> Result<PathBuf> {
    let bin = gate64_binary()?;
    let dir = topo.srv.dir().join("certs");
    let ip = CLIENT_GW_V4.to_string();
    let out = topo.srv.exec_ok(&[
        path_str(&bin)?,
        "certs",
        "--out",
        path_str(&dir)?,
        "--server-ip",
        &ip,
        "--server-name",
        "gate64.lab.example",
    ])?;
    ensure!(dir.join("server.pem").is_file(), "gate64 certs: {out}");
    Ok(dir)
}

/// `gate64 serve` in `tsrv`: the standard lab configuration plus `[iphttps]` on
/// 198.51.100.1:443; with `client_ca`, clients need a certificate from the lab CA; with
/// `tls_handshake_timeout_secs`, `[limits]` sets that. Waits (≤ 15 s) for /metrics and the TLS
/// listener.
pub(crate) fn start_gate64(
    topo: &Topology,
    certs: &Path,
    client_ca: bool,
    tls_handshake_timeout_secs: Option<u64>,
) -> Result<Process> {
    start_gate64_with(topo, certs, client_ca, tls_handshake_timeout_secs, "")
}

/// [`start_gate64`] with `extra` TOML sections appended (e.g. `[nat64]`, `[dns64]`).
pub(crate) fn start_gate64_with(
    topo: &Topology,
    certs: &Path,
    client_ca: bool,
    tls_handshake_timeout_secs: Option<u64>,
    extra: &str,
) -> Result<Process> {
    let mut conf = Gate64Options {
        extra: extra.to_owned(),
        ..Gate64Options::default()
    }
    .config_toml();
    conf.push_str(&iphttps_section(certs)?);
    if client_ca {
        conf.push_str(&format!(
            "client_ca = {:?}\n",
            path_str(&certs.join("ca.pem"))?
        ));
    }
    if let Some(secs) = tls_handshake_timeout_secs {
        conf.push_str(&format!(
            "\n[limits]\ntls_handshake_timeout_secs = {secs}\n"
        ));
    }
    serve_iphttps(topo, "gate64-iphttps.toml", &conf)
}

/// Writes `conf` to `file` in `tsrv`, starts `gate64 serve` on it and waits (≤ 15 s) until it
/// listens on 198.51.100.1:443 and serves /metrics.
pub(crate) fn serve_iphttps(topo: &Topology, file: &str, conf: &str) -> Result<Process> {
    let bin = gate64_binary()?;
    let file = topo.srv.write_file(file, conf)?;
    let mut gate = topo.srv.spawn(
        "gate64",
        &[path_str(&bin)?, "serve", "--config", path_str(&file)?],
    )?;
    let ready = wait_until(Duration::from_secs(15), || {
        gate.is_running()
            && topo
                .srv
                .exec_ok(&["ss", "-Hntl", "sport = :443"])
                .is_ok_and(|s| !s.trim().is_empty())
            && topo.metrics_text().is_ok()
    });
    gate.ensure_running()
        .with_context(|| format!("gate64 serve with\n{conf}"))?;
    ensure!(
        ready,
        "gate64 did not listen on {CLIENT_GW_V4}:443 and serve /metrics within 15 s; log:\n{}",
        gate.log()
    );
    Ok(gate)
}

/// `[iphttps]` on 198.51.100.1:443 with the lab's TLS certificate from `tls` and the pool
/// [`IPHTTPS_PREFIX`].
pub(crate) fn iphttps_section(tls: &Path) -> Result<String> {
    Ok(format!(
        "\n[iphttps]\nenabled = true\nlisten = \"{CLIENT_GW_V4}:443\"\ncertificate = {:?}\n\
         private_key = {:?}\nprefix = \"{IPHTTPS_PREFIX}\"\n",
        path_str(&tls.join("server.pem"))?,
        path_str(&tls.join("server.key"))?,
    ))
}

/// `gate64 serve` in `tsrv` with IPsec (the `[ipsec]` keys of [`ipsec_keys`] plus `extra`)
/// and IP-HTTPS on 198.51.100.1:443, written to `file`; the corporate side routes the pool
/// back. Returns gate64, the TLS certificates' directory and the IKE credentials.
pub(crate) fn serve_iphttps_ipsec(
    topo: &Topology,
    file: &str,
    extra: &str,
) -> Result<(Process, PathBuf, LabCerts)> {
    let tls = make_certs(topo)?;
    let ike = LabCerts::generate(
        &topo.srv,
        &topo.srv.dir().join("ike-certs"),
        IpAddr::V6(GATE64_ADDRESS6),
    )?;
    let mut conf = Gate64Options {
        without_ipsec: false,
        extra: ipsec_keys(&ike, extra)?,
        ..Gate64Options::default()
    }
    .config_toml();
    conf.push_str(&iphttps_section(&tls)?);
    conf.push_str(&format!(
        "\n[control]\nsocket = {:?}\n",
        path_str(&topo.srv.dir().join("control.sock"))?,
    ));
    let gate = serve_iphttps(topo, file, &conf)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    Ok((gate, tls, ike))
}

/// Spawns `gate64 connect iphttps` in `tcli`, with the lab client certificate if `with_cert`.
pub(crate) fn spawn_iphttps_client(
    topo: &Topology,
    certs: &Path,
    with_cert: bool,
) -> Result<Process> {
    spawn_iphttps_client_routes(topo, certs, with_cert, &[])
}

/// [`spawn_iphttps_client`] routing `routes` into the tunnel besides the corporate prefix.
pub(crate) fn spawn_iphttps_client_routes(
    topo: &Topology,
    certs: &Path,
    with_cert: bool,
    routes: &[&str],
) -> Result<Process> {
    let lab_client = (certs.join("client.pem"), certs.join("client.key"));
    let identity = with_cert.then_some((lab_client.0.as_path(), lab_client.1.as_path()));
    spawn_iphttps_client_as(topo, certs, identity, routes)
}

/// `gate64 connect iphttps` in `tcli` trusting `certs`' CA, presenting `identity` (a
/// certificate and its key) when given, routing `routes` besides the corporate prefix.
pub(crate) fn spawn_iphttps_client_as(
    topo: &Topology,
    certs: &Path,
    identity: Option<(&Path, &Path)>,
    routes: &[&str],
) -> Result<Process> {
    let bin = gate64_binary()?;
    let url = format!("https://{CLIENT_GW_V4}/IPHTTPS");
    let ca = certs.join("ca.pem");
    let mut argv = vec![
        "env",
        "RUST_LOG=debug,rustls=info",
        path_str(&bin)?,
        "connect",
        "iphttps",
        "--no-ipsec",
        "--server",
        &url,
        "--ca",
        path_str(&ca)?,
        "--route",
        CORP_PREFIX,
    ];
    for r in routes {
        argv.extend(["--route", r]);
    }
    if let Some((cert, key)) = identity {
        argv.extend([
            "--client-cert",
            path_str(cert)?,
            "--client-key",
            path_str(key)?,
        ]);
    }
    topo.cli.spawn("gate64-connect-iphttps", &argv)
}

/// Starts `gate64 connect iphttps` in `tcli` and waits for its address and the route to the
/// corporate prefix.
pub(crate) fn connect_iphttps(
    topo: &Topology,
    certs: &Path,
    with_cert: bool,
) -> Result<(Process, Ipv6Addr)> {
    connect_iphttps_routes(topo, certs, with_cert, &[])
}

/// [`connect_iphttps`] routing `routes` into the tunnel besides the corporate prefix.
pub(crate) fn connect_iphttps_routes(
    topo: &Topology,
    certs: &Path,
    with_cert: bool,
    routes: &[&str],
) -> Result<(Process, Ipv6Addr)> {
    let mut client = spawn_iphttps_client_routes(topo, certs, with_cert, routes)?;
    let t = Instant::now();
    let prefix: Ipv6Addr = "2001:db8:1::".parse().expect("constant");
    let addr = wait_address(topo, &mut client, "gate64c", prefix, 48)?;
    // The client adds its routes one by one after the address: the first traffic to one of
    // them must not race the last.
    wait_routes(topo, &mut client, "gate64c", routes)?;
    println!(
        "gate64 connect iphttps: link up as {addr} in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    Ok((client, addr))
}

/// Waits until `client` (in `tcli`) has routed each of `routes` into its device `ifname`
/// (as `ip -6 route show dev IFNAME` prints them: a prefix, or a /128 as a bare address
/// followed by a space). A client installs its routes after its address, or after it read
/// the IKE answer that gave them: traffic sent before that finds no route.
pub(crate) fn wait_routes(
    topo: &Topology,
    client: &mut Process,
    ifname: &str,
    routes: &[&str],
) -> Result<()> {
    let routed = wait_for(Duration::from_secs(10), || {
        let r = topo.cli.ip(&["-6", "route", "show", "dev", ifname]).ok()?;
        routes.iter().all(|want| r.contains(want)).then_some(())
    });
    client.ensure_running()?;
    ensure!(
        routed.is_some(),
        "the client did not route {routes:?} into {ifname}: {}",
        topo.cli
            .ip(&["-6", "route", "show", "dev", ifname])
            .unwrap_or_else(|e| e.to_string())
    );
    Ok(())
}

/// Polls `ip -6 addr show dev <ifname>` in `tcli` for a usable (not tentative) global address
/// within `prefix/len`, and for the route to the corporate prefix through the device.
pub(crate) fn wait_address(
    topo: &Topology,
    client: &mut Process,
    ifname: &str,
    prefix: Ipv6Addr,
    len: u32,
) -> Result<Ipv6Addr> {
    let found = wait_for(LINK_TIMEOUT, || {
        if !client.is_running() {
            return Some(None);
        }
        let routed = topo
            .cli
            .ip(&["-6", "route", "show", CORP_PREFIX])
            .is_ok_and(|r| r.contains(ifname));
        let addr = address_in(topo, ifname, prefix, len)?;
        routed.then_some(Some(addr))
    });
    match found {
        Some(Some(addr)) => Ok(addr),
        Some(None) => {
            client.ensure_running()?;
            unreachable!("ensure_running fails for an exited process")
        }
        None => bail!(
            "no {prefix}/{len} address on {ifname} within {LINK_TIMEOUT:?}; `ip -6 addr`: {}; \
             `ip -6 route`: {}; client log:\n{}",
            topo.cli
                .ip(&["-6", "addr"])
                .unwrap_or_else(|e| e.to_string()),
            topo.cli
                .ip(&["-6", "route"])
                .unwrap_or_else(|e| e.to_string()),
            client.log()
        ),
    }
}

/// The IP-HTTPS client's usable address in 2001:db8:1::/48 on `gate64c`, if any.
pub(crate) fn client_address(topo: &Topology) -> Option<Ipv6Addr> {
    address_in(topo, "gate64c", "2001:db8:1::".parse().ok()?, 48)
}

fn address_in(topo: &Topology, ifname: &str, prefix: Ipv6Addr, len: u32) -> Option<Ipv6Addr> {
    let out = topo.cli.ip(&["-6", "addr", "show", "dev", ifname]).ok()?;
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    out.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("inet6 ") && !l.contains("tentative"))
        .filter_map(|l| l.split_whitespace().nth(1)?.split('/').next()?.parse().ok())
        .find(|a: &Ipv6Addr| u128::from(*a) & mask == u128::from(prefix) & mask)
}

/// `gate64_tls_handshakes_total{result}`, summed.
pub(crate) fn handshakes(m: &Metrics, result: &str) -> f64 {
    m.sum("gate64_tls_handshakes_total", &[("result", result)])
}

pub(crate) fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("non-UTF-8 path {}", p.display()))
}

/// Starts `gate64 bench load` in `ns` on the generator spec `spec`, writing its STATUS.json
/// to `status`.
pub(crate) fn spawn_bench_load(
    ns: &gate64_testkit::Netns,
    spec: &Path,
    status: &Path,
) -> Result<Process> {
    let bin = gate64_binary()?;
    ns.spawn(
        "gate64-bench-load",
        &[
            "env",
            "RUST_LOG=info",
            path_str(&bin)?,
            "bench",
            "load",
            "--spec",
            path_str(spec)?,
            "--status",
            path_str(status)?,
        ],
    )
}

/// `gate64 status --json` of the lab's daemon (its control socket in `tsrv`'s directory).
pub(crate) fn status_json(topo: &Topology) -> Result<serde_json::Value> {
    let json = gate64_ctl(topo, &["status", "--json"])?;
    serde_json::from_str(&json).with_context(|| format!("gate64 status --json:\n{json}"))
}

/// `gate64 ARGS --socket SOCKET` in `tsrv` against the lab daemon's control socket (in
/// `tsrv`'s directory): its output.
pub(crate) fn gate64_ctl(topo: &Topology, args: &[&str]) -> Result<String> {
    let bin = gate64_binary()?;
    let socket = topo.srv.dir().join("control.sock");
    let mut argv = vec![path_str(&bin)?];
    argv.extend_from_slice(args);
    argv.extend(["--socket", path_str(&socket)?]);
    topo.srv.exec_ok(&argv)
}

/// All `gate64_*` samples, one per line, for failure messages.
pub(crate) fn gate64_lines(m: &Metrics) -> String {
    let lines: Vec<String> = m
        .samples()
        .iter()
        .filter(|s| s.name.starts_with("gate64_"))
        .map(ToString::to_string)
        .collect();
    format!("gate64 metrics:\n{}", lines.join("\n"))
}

/// `dig <args>` run in `ns`: stdout and stderr together (dig reports errors such as
/// "connection refused" on either). Bounded to 20 s.
pub(crate) fn dig_in(ns: &gate64_testkit::Netns, args: &[&str]) -> Result<String> {
    let bin =
        gate64_testkit::find_tool("dig").context("`dig` not found: apt-get install dnsutils")?;
    let mut argv = vec![path_str(&bin)?];
    argv.extend_from_slice(args);
    let out = ns.exec_timeout(&argv, Duration::from_secs(20))?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The median of `values` (the upper middle one of an even count); NaN when there are none.
pub(crate) fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `$var` parsed as a `T`, else `default` (unset or not a `T`): a test's size, such as its
/// number of clients, set from the environment for a larger run.
pub(crate) fn env_or<T: std::str::FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A count from `$var` (a test's number of clients), else `default`.
pub(crate) fn env_count(var: &str, default: usize) -> usize {
    env_or(var, default)
}

/// The `gate64 bench load` status file at `status` as it is now; empty when unreadable.
pub(crate) fn status_text(status: &Path) -> String {
    std::fs::read_to_string(status).unwrap_or_default()
}

/// The clients' inner addresses from the generator's ADDRESSES file (beside `status`).
pub(crate) fn addresses(status: &Path) -> Result<Vec<Ipv6Addr>> {
    let mut path = status.as_os_str().to_owned();
    path.push(".addresses");
    let text = std::fs::read_to_string(&path).context("the ADDRESSES file")?;
    text.lines()
        .map(|line| {
            line.split(' ')
                .next()
                .and_then(|a| a.parse().ok())
                .with_context(|| format!("ADDRESSES line {line:?}"))
        })
        .collect()
}

/// Waits until the generator writing `status` counts all its `clients` up with both IKE SAs
/// and both child SAs each, and every one's probes answered (each client probed, none
/// silent): its status then, or an error with its status at `timeout`.
pub(crate) fn wait_all_up(status: &Path, clients: usize, timeout: Duration) -> Result<String> {
    let n = clients as f64;
    let up = wait_for(timeout, || {
        let s = std::fs::read_to_string(status).ok()?;
        let get = |k: &str| crate::bench_load::field(&s, k);
        (get("up")? == n
            && get("mmsa")? == 2.0 * n
            && get("qmsa")? == 2.0 * n
            && get("probe_clients")? == n
            && get("probe_silent")? == 0.0)
            .then_some(s)
    });
    up.with_context(|| {
        format!(
            "not every client up and answered within {timeout:?}: {}",
            status_text(status)
        )
    })
}

/// `gate64 status --json` of the daemon in `ns` whose `[control] socket` is `control.sock`
/// in `ns`'s directory.
pub(crate) fn status_json_in(ns: &gate64_testkit::Netns) -> Result<serde_json::Value> {
    let bin = gate64_binary()?;
    let socket = ns.dir().join("control.sock");
    let json = ns.exec_ok(&[
        path_str(&bin)?,
        "status",
        "--json",
        "--socket",
        path_str(&socket)?,
    ])?;
    serde_json::from_str(&json).with_context(|| format!("gate64 status --json:\n{json}"))
}

/// Rounds of a measuring test: `$var` when it is within `1..=max`, else 1 (what CI runs).
pub(crate) fn rounds_from_env(var: &str, max: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n: &usize| (1..=max).contains(n))
        .unwrap_or(1)
}

/// The `[ipsec]` section of the IPsec labs: `ike`'s responder certificate, key and CA, the
/// pool [`POOL6`], the endpoint [`GATE64_ADDRESS6`], the corporate host as the
/// infrastructure tunnel, then `extra` (TOML lines of their own, each ending in a newline).
pub(crate) fn ipsec_keys(ike: &LabCerts, extra: &str) -> Result<String> {
    Ok(format!(
        "[ipsec]\ncertificate = \"{}\"\nprivate_key = \"{}\"\nca = \"{}\"\n\
         pool6 = \"{POOL6}\"\nendpoint = \"{GATE64_ADDRESS6}\"\n\
         infrastructure_prefixes = [\"{CORP_HOST}/128\"]\n{extra}",
        path_str(&ike.responder_cert)?,
        path_str(&ike.responder_key)?,
        path_str(&ike.ca)?,
    ))
}

/// `initiator` asks for the infrastructure tunnel within `timeout`, which gate64 refuses:
/// charon fails and logs NO_PROPOSAL_CHOSEN, gate64 counts
/// `gate64_ike_refused_total{reason="no_proposal"}` and holds no child SA. `what` names the
/// client in the failure message.
pub(crate) fn expect_no_proposal(
    topo: &Topology,
    initiator: &Charon,
    timeout: Duration,
    what: &str,
) -> Result<()> {
    let outcome = initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, timeout);
    ensure!(outcome.is_err(), "{what} got a child SA: {outcome:?}");
    let log = std::fs::read_to_string(initiator.log_path()).unwrap_or_default();
    ensure!(
        log.contains("NO_PROPOSAL_CHOSEN"),
        "charon did not see NO_PROPOSAL_CHOSEN:\n{}",
        initiator.log_tail(60)
    );
    let m = topo.metrics()?;
    let refused = m.sum("gate64_ike_refused_total", &[("reason", "no_proposal")]);
    ensure!(
        refused >= 1.0,
        "gate64_ike_refused_total{{reason=\"no_proposal\"}} is {refused}\n{}",
        gate64_lines(&m)
    );
    let qmsa = m.sum("gate64_ipsec_qmsa", &[]);
    ensure!(
        qmsa == 0.0,
        "gate64_ipsec_qmsa is {qmsa}\n{}",
        gate64_lines(&m)
    );
    Ok(())
}

/// The client in `tcli` has a policy that admits only [`CORP_HOST`]: its ping to
/// [`OTHER_CORP_HOST`] goes unanswered and gate64's `gate64_drops_total{reason="policy"}`
/// rose above `drops_before`. `who` names the policy in the failure message.
pub(crate) fn assert_policy_cuts(topo: &Topology, who: &str, drops_before: f64) -> Result<()> {
    let other = topo
        .cli
        .exec(&["ping", "-6", "-c", "2", "-W", "1", OTHER_CORP_HOST])?;
    ensure!(
        !other.status.success(),
        "{who} reaches only {CORP_HOST}, yet {OTHER_CORP_HOST} answered"
    );
    let m = topo.metrics()?;
    let dropped = m.sum("gate64_drops_total", &[("reason", "policy")]);
    ensure!(
        dropped > drops_before,
        "no drop counted under reason=\"policy\" (before {drops_before}, now {dropped})\n{}",
        gate64_lines(&m)
    );
    Ok(())
}

/// gate64's `gate64_drops_total{reason="policy"}` now.
pub(crate) fn policy_drops(topo: &Topology) -> Result<f64> {
    Ok(topo
        .metrics()?
        .sum("gate64_drops_total", &[("reason", "policy")]))
}

/// Runs a namespace test's lab `lab`, prints how long it took ("`what` test took … s") and
/// panics with the error chain when it failed.
pub(crate) fn run_timed(what: &str, lab: impl FnOnce() -> Result<()>) {
    let started = Instant::now();
    let r = lab();
    println!("{what} test took {:.1} s", started.elapsed().as_secs_f64());
    if let Err(e) = r {
        panic!("{e:#}");
    }
}

/// `gate64 certs --out <out> --server-ip <server_ip> --server-name <server_name>` in `ns`: the
/// lab's TLS CA and server certificate; returns the command's output.
pub(crate) fn gate64_certs(
    ns: &gate64_testkit::Netns,
    out: &Path,
    server_ip: &str,
    server_name: &str,
) -> Result<String> {
    let bin = gate64_binary()?;
    ns.exec_ok(&[
        path_str(&bin)?,
        "certs",
        "--out",
        path_str(out)?,
        "--server-ip",
        server_ip,
        "--server-name",
        server_name,
    ])
}

/// In `router`: `ip nexthop <verb> id <id> group <members, "/"-joined> type resilient`, and
/// with `add` also `buckets <buckets> idle_timer <idle_timer> unbalanced_timer 0` (a busy
/// bucket keeps its next hop until idle for `idle_timer` seconds, however unbalanced).
/// `replace` changes the members and keeps the group's buckets and timers.
pub(crate) fn resilient_group(
    router: &gate64_testkit::Netns,
    verb: &str,
    id: u32,
    members: &[u32],
    buckets: u32,
    idle_timer: u64,
) -> Result<()> {
    let members: Vec<String> = members.iter().map(u32::to_string).collect();
    let (buckets, idle) = (buckets.to_string(), idle_timer.to_string());
    let id = id.to_string();
    let mut args = vec!["nexthop", verb, "id", &id, "group"];
    let members = members.join("/");
    args.push(&members);
    args.extend(["type", "resilient"]);
    if verb == "add" {
        args.extend([
            "buckets",
            &buckets,
            "idle_timer",
            &idle,
            "unbalanced_timer",
            "0",
        ]);
    }
    router.ip(&args)?;
    Ok(())
}

/// The argv of `gate64 connect iphttps` with IPsec: `<bin> connect iphttps --server <url> --ca
/// <ca> --ipsec-endpoint <endpoint> --ipsec-cert <cert> --ipsec-key <key> --ipsec-ca <ike_ca>
/// --infrastructure-ts <infrastructure> --intranet-ts <intranet>`, from `server` (url, ca),
/// `ipsec` (cert, key, ike_ca) and `ts` (infrastructure, intranet).
pub(crate) fn iphttps_ipsec_argv<'a>(
    bin: &'a Path,
    (url, ca): (&'a str, &'a Path),
    endpoint: &'a str,
    (cert, key, ike_ca): (&'a Path, &'a Path, &'a Path),
    (infrastructure, intranet): (&'a str, &'a str),
) -> Result<Vec<&'a str>> {
    Ok(vec![
        path_str(bin)?,
        "connect",
        "iphttps",
        "--server",
        url,
        "--ca",
        path_str(ca)?,
        "--ipsec-endpoint",
        endpoint,
        "--ipsec-cert",
        path_str(cert)?,
        "--ipsec-key",
        path_str(key)?,
        "--ipsec-ca",
        path_str(ike_ca)?,
        "--infrastructure-ts",
        infrastructure,
        "--intranet-ts",
        intranet,
    ])
}
