//! The capacity lab: the standard namespaces of `gate64_testkit::Topology` (`tcli`, `tsrv`,
//! `tcorp` with IPv4) plus `tload`, the load generator's namespace, linked to `tsrv`.
//!
//! ```text
//!  tload  203.0.113.20/24 ─ vsrv ══ vload ─ tsrv 203.0.113.1/24       (emulated clients,
//!         100.64.0.0/16: the clients' transport sources, routed local   TUN load0)
//!         for IP-HTTPS's TCP; the generator routes UDP to them into its
//!         underlay TUN load0u, where the Teredo clients are)
//!  tcli   Debian's miredo client + strongSwan over it (the real third-party clients)
//!  tsrv   gate64 serve: Teredo 192.0.2.1/.2, IP-HTTPS 192.0.2.1:443, IKE at 2001:db8:100::1,
//!         pool6 fd00:c1::/104, NAT64 2001:db8:64::/96 -> pool4 198.19.64.0/24, DNS64
//!  tcorp  2001:db8:100:1::2 and 10.20.0.2 (the IPv4-only host, v4only.corp.example):
//!         `gate64 bench sink` on port 9000, unbound (the DNS64 upstream)
//! ```
//!
//! The client sources come from 100.64.0.0/16 because gate64's Teredo server refuses RFC 1918
//! client addresses (`is_teredo_global`). Everything is torn down on drop, including on error
//! and, through the caller's signal handling, on Ctrl-C.

use super::spec::{Spec, SpecIpsec, Status, addresses_path};
use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::strongswan::{
    CertPaths, Charon, CharonConfig, INFRASTRUCTURE, INTRANET, Tunnel,
};
use gate64_testkit::{
    CORP_HOST, CORP_HOST_V4, Gate64Options, Metrics, Netns, Process, SERVER_V4, Topology,
    wait_until,
};
use indicatif::{ProgressBar, ProgressStyle};
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// gate64's corporate address (`corpnet.address6`), where DNS64 answers.
pub const GATE_ADDRESS6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
/// gate64's IKE/ESP address: the default `ipsec.endpoint`, the first address of [`POOL6`].
/// It lies outside everything the tunnels reach, so clients that route the tunnels'
/// prefixes into the tunnel still reach DNS64 at [`GATE_ADDRESS6`] through it.
const IKE_ENDPOINT: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc1, 0, 0, 0, 0, 0, 1);
/// The IPv4-only host's name (an A record only, at unbound).
pub const V4ONLY: &str = "v4only.corp.example";
/// What DNS64 synthesizes for [`V4ONLY`]: 10.20.0.2 in Pref64 `2001:db8:64::/96`
/// (RFC 6052 §2.2).
pub const NAT64_TARGET: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0x0a14, 0x0002);
/// Port of `gate64 bench sink`, TCP and UDP.
pub const SINK_PORT: u16 = 9000;
const CORP_PREFIX: &str = "2001:db8:100::/48";
const PREF64: &str = "2001:db8:64::/96";
const POOL4: &str = "198.19.64.0/24";
/// Inner addresses: 16 M of them, for 100,000 clients with two tunnels each.
const POOL6: &str = "fd00:c1::/104";
const IPHTTPS_PREFIX: &str = "2001:db8:8000::/40";
const SOURCE_V4: &str = "100.64.0.0/16";
const LOAD_GW_V4: &str = "203.0.113.1";
const LOAD_V4: &str = "203.0.113.20";
const LOAD_TUN: &str = "load0";
const SERVER_NAME: &str = "gate64.lab";
const DAEMON_START: Duration = Duration::from_secs(30);
const IKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The slowest set-up rate the readiness budget allows for, clients per second: a debug
/// build on a machine shared with other builds set up 25,000 clients at ~27 per second.
const SLOWEST_SETUPS_PER_SEC: u64 = 20;
/// How long the generator may settle no client (bring none up, count none failed) before the
/// wait gives up: a client not up within its set-up timeout (120 s) counts as failed, so a
/// generator that works settles some within this.
const READY_STALL: Duration = Duration::from_secs(300);

/// How long the generator may take to bring `clients` up: two minutes for the lab, then per
/// client the longer of four times its start interval (`connect_per_sec`: a transport and two
/// IKE SAs each) and the time at [`SLOWEST_SETUPS_PER_SEC`] (the machine, not the start
/// rate, bounds the set-ups of a large run). [`READY_STALL`] ends a wait that stopped
/// progressing long before this.
fn ready_budget(clients: usize, connect_per_sec: u32) -> Duration {
    let clients = clients as u64;
    let by_rate = 4 * clients / u64::from(connect_per_sec.max(1));
    let by_machine = clients.div_ceil(SLOWEST_SETUPS_PER_SEC);
    Duration::from_secs(120 + by_rate.max(by_machine))
}

/// How far the generator got: transports up, IKE SAs, clients up and clients failed (not up
/// within the set-up timeout). It grows while set-ups succeed or time out.
fn settled(s: &Status) -> u64 {
    s.teredo_up + s.iphttps_up + s.mmsa + s.up + s.failed
}

/// When the generator's progress ([`settled`]) last reached a new high.
struct Progress {
    best: u64,
    since: Instant,
}

impl Progress {
    fn new(now: Instant) -> Self {
        Progress {
            best: 0,
            since: now,
        }
    }

    /// Notes the progress `n` seen at `now`.
    fn saw(&mut self, n: u64, now: Instant) {
        if n > self.best {
            (self.best, self.since) = (n, now);
        }
    }

    /// Whether the progress reached no new high for [`READY_STALL`].
    fn stalled(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) > READY_STALL
    }
}

/// What the lab is built for.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// Emulated clients.
    pub clients: usize,
    /// Share of them on IP-HTTPS.
    pub iphttps_share: f64,
    /// Also run Debian's miredo client with strongSwan over it.
    pub third_party: bool,
    /// The generator's set-ups per second.
    pub connect_per_sec: u32,
    /// gate64's `[server] workers`.
    pub workers: u32,
    /// The corporate DNS server is `gate64 bench zone` instead of Debian's Unbound (which a
    /// fresh machine lacks: `gate64 demo`).
    pub builtin_dns: bool,
    /// gate64's `dns64.upstream`, when not the corporate DNS server.
    pub dns64_upstream: Option<std::net::Ipv4Addr>,
    /// Give the veths a NIC's receive path ([`nic_receive_paths`]).
    pub nic_receive: bool,
    /// gate64's `corpnet.tun_napi`.
    pub tun_napi: bool,
}

/// Debian's miredo client and strongSwan (both tunnels) over it, in `tcli`.
struct ThirdParty<'t> {
    _charon: Charon<'t>,
    _miredo: Process,
}

/// The running lab.
pub struct Lab<'t> {
    /// The standard namespaces.
    pub topo: &'t Topology,
    /// The load generator's namespace.
    pub load: Netns,
    /// `gate64 serve`.
    pub gate: Process,
    /// `gate64 bench load`.
    pub generator: Process,
    /// The generator's STATUS.json.
    pub status_path: PathBuf,
    /// The gate64 binary (this one).
    pub bin: PathBuf,
    /// The generator's last status.
    pub status: Status,
    third_party: Option<ThirdParty<'t>>,
    _sink: Process,
    /// Unbound or `gate64 bench zone`.
    _dns: Process,
}

impl<'t> Lab<'t> {
    /// Builds the lab in `topo` (built with IPv4 on the corporate link) and waits until the
    /// generator is ready; `stop` aborts the wait (Ctrl-C).
    pub fn start(topo: &'t Topology, opts: &LabOptions, stop: &AtomicBool) -> Result<Lab<'t>> {
        let bin = std::env::current_exe().context("finding the gate64 binary")?;
        let pki = topo.srv.dir().join("pki");
        gate64_daemon::certs::generate(
            &pki,
            &[SERVER_NAME.to_owned()],
            &[IpAddr::V4(SERVER_V4), IpAddr::V6(IKE_ENDPOINT)],
        )?;
        let dns = if opts.builtin_dns {
            start_zone(topo, &bin)?
        } else {
            let v4 = CORP_HOST_V4.to_string();
            topo.start_unbound(
                &topo.corp,
                IpAddr::V4(CORP_HOST_V4),
                &[&format!("{V4ONLY}. 300 IN A {v4}")],
            )?
        };
        let sink = start_sink(topo, &bin)?;
        let gate = start_gate64(topo, &bin, &pki, opts)?;
        let load = Netns::new("tload")?;
        wire_load_namespace(topo, &load)?;
        if opts.nic_receive {
            nic_receive_paths(topo, &load)?;
        }
        let third_party = if opts.third_party {
            Some(start_third_party(topo, &pki).context("the third-party clients")?)
        } else {
            None
        };
        let status_path = load.dir().join("STATUS.json");
        let spec_path = load.write_file(
            "SPEC.json",
            &serde_json::to_string_pretty(&spec(opts, &pki))?,
        )?;
        let generator = load.spawn(
            "generator",
            &[
                path_str(&bin)?,
                "bench",
                "load",
                "--spec",
                path_str(&spec_path)?,
                "--status",
                path_str(&status_path)?,
            ],
        )?;
        let mut lab = Lab {
            topo,
            load,
            gate,
            generator,
            status_path,
            bin,
            status: Status::default(),
            third_party,
            _sink: sink,
            _dns: dns,
        };
        lab.wait_ready(opts, stop)?;
        Ok(lab)
    }

    /// Whether the real third-party clients run.
    pub fn has_third_party(&self) -> bool {
        self.third_party.is_some()
    }

    /// Polls STATUS.json, with a progress bar, until every client is done.
    fn wait_ready(&mut self, opts: &LabOptions, stop: &AtomicBool) -> Result<()> {
        let bar = ProgressBar::new(opts.clients as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} connecting {pos}/{len} clients [{bar:30}] {elapsed} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let budget = ready_budget(opts.clients, opts.connect_per_sec);
        let start = Instant::now();
        let mut progress = Progress::new(start);
        loop {
            if stop.load(Ordering::Relaxed) {
                bar.abandon_with_message("interrupted");
                bail!("interrupted");
            }
            self.generator
                .ensure_running()
                .context("gate64 bench load (the load generator, branch capload)")?;
            self.gate.ensure_running()?;
            if let Some(s) = Status::read(&self.status_path)? {
                bar.set_position(s.teredo_up + s.iphttps_up + s.failed);
                bar.set_message(format!(
                    "Teredo {} IP-HTTPS {} MMSA {} QMSA {} failed {}",
                    s.teredo_up, s.iphttps_up, s.mmsa, s.qmsa, s.failed
                ));
                let ready = s.ready && addresses_path(&self.status_path).is_file();
                progress.saw(settled(&s), Instant::now());
                self.status = s;
                if ready {
                    bar.finish();
                    return Ok(());
                }
            }
            if progress.stalled(Instant::now()) {
                bar.abandon_with_message("stalled");
                bail!(
                    "the load generator made no progress (transports, IKE SAs, clients up or \
                     failed) for {READY_STALL:?}: {:?}",
                    self.status
                );
            }
            if start.elapsed() > budget {
                bar.abandon_with_message("timed out");
                bail!(
                    "the load generator was not ready within {budget:?}: {:?}",
                    self.status
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Reads STATUS.json again.
    pub fn refresh_status(&mut self) -> Result<&Status> {
        if let Some(s) = Status::read(&self.status_path)? {
            self.status = s;
        }
        Ok(&self.status)
    }

    /// gate64's metrics.
    pub fn metrics(&self) -> Result<Metrics> {
        self.topo.metrics()
    }

    /// Pings the corporate host from the third-party client through its tunnel (3 echoes);
    /// `None` without third-party clients.
    pub fn third_party_ping(&self) -> Option<Result<bool>> {
        self.third_party.as_ref()?;
        Some(
            self.topo
                .ping6(&self.topo.cli, CORP_HOST, 3)
                .map(|p| p.received > 0),
        )
    }

    /// The last lines of every process log of the lab.
    pub fn logs(&self) -> String {
        format!("{}{}", self.topo.logs_report(), self.load.logs_report())
    }
}

/// The generator's spec for this lab.
fn spec(opts: &LabOptions, pki: &Path) -> Spec {
    Spec {
        clients: opts.clients,
        iphttps_share: opts.iphttps_share,
        teredo_server: SERVER_V4.to_string(),
        iphttps_url: format!("https://{SERVER_V4}:443/IPHTTPS"),
        iphttps_ca: pki.join("ca.pem"),
        iphttps_server_name: SERVER_NAME.to_owned(),
        source_v4: SOURCE_V4.to_owned(),
        ipsec: SpecIpsec {
            endpoint: IKE_ENDPOINT.to_string(),
            ca: pki.join("ca.pem"),
            client_ca_cert: pki.join("clients-ca.pem"),
            client_ca_key: pki.join("clients-ca.key"),
            infrastructure_ts: vec![format!("{CORP_HOST}/128")],
            intranet_ts: vec![CORP_PREFIX.to_owned(), PREF64.to_owned()],
        },
        pool6: POOL6.to_owned(),
        corp_prefixes: vec![CORP_PREFIX.to_owned(), PREF64.to_owned()],
        tun: LOAD_TUN.to_owned(),
        connect_per_sec: opts.connect_per_sec,
    }
}

/// gate64's configuration: the standard lab's plus IP-HTTPS, IPsec required, NAT64, DNS64
/// and limits raised for `clients`.
fn gate64_toml(pki: &Path, control: &Path, opts: &LabOptions) -> Result<String> {
    let p = |f: &str| -> Result<String> { Ok(path_str(&pki.join(f))?.to_owned()) };
    let iphttps_max = opts.clients.max(50_000) + 1_000;
    // Both tunnels of every client and the third-party one, a tenth more for set-ups in
    // flight; never below the default.
    let ike_sas_max = (2 * (opts.clients + 1) * 11 / 10).max(gate64_config::defaults::IKE_MAX_SAS);
    let upstream = opts.dns64_upstream.unwrap_or(CORP_HOST_V4);
    let extra = format!(
        "[iphttps]\nenabled = true\nlisten = \"{SERVER_V4}:443\"\ncertificate = \"{}\"\n\
         private_key = \"{}\"\nprefix = \"{IPHTTPS_PREFIX}\"\n\n\
         [ipsec]\nrequire = true\ncertificate = \"{}\"\nprivate_key = \"{}\"\nca = \"{}\"\n\
         pool6 = \"{POOL6}\"\n\
         infrastructure_prefixes = [\"{CORP_HOST}/128\"]\n\
         half_open_cookie_threshold = 1000000\nmax_ike_sas = {ike_sas_max}\n\n\
         [nat64]\nprefix = \"{PREF64}\"\npool4 = [\"{POOL4}\"]\n\n\
         [dns64]\nupstream = [\"{upstream}\"]\n\n\
         [limits]\nmax_iphttps_connections = {iphttps_max}\nmax_tls_handshakes = 4096\n\n\
         [control]\nsocket = \"{}\"\n",
        p("server.pem")?,
        p("server.key")?,
        p("ipsec.pem")?,
        p("ipsec.key")?,
        p("clients-ca.pem")?,
        path_str(control)?,
    );
    let options = Gate64Options {
        log_level: "warn".to_owned(),
        workers: opts.workers,
        extra,
        without_ipsec: false,
    };
    Ok(options.config_toml().replace(
        "ipv6_prefixes = [\"2001:db8:100::/48\"]",
        &format!(
            "ipv6_prefixes = [\"{CORP_PREFIX}\"]\ntun_napi = {}",
            opts.tun_napi
        ),
    ))
}

fn start_gate64(topo: &Topology, bin: &Path, pki: &Path, opts: &LabOptions) -> Result<Process> {
    let control = topo.srv.dir().join("control.sock");
    let conf = topo
        .srv
        .write_file("gate64.toml", &gate64_toml(pki, &control, opts)?)?;
    let mut gate = topo.srv.spawn(
        "gate64",
        &[path_str(bin)?, "serve", "--config", path_str(&conf)?],
    )?;
    let up = wait_until(DAEMON_START, || {
        gate.is_running() && topo.metrics_text().is_ok()
    });
    gate.ensure_running()?;
    ensure!(
        up,
        "gate64 serve did not serve /metrics within {DAEMON_START:?}: {}",
        gate.log()
    );
    Ok(gate)
}

/// `gate64 bench zone` on the corporate host's IPv4 address, serving [`V4ONLY`] as Unbound
/// does in the capacity lab.
fn start_zone(topo: &Topology, bin: &Path) -> Result<Process> {
    let listen = format!("{CORP_HOST_V4}:53");
    let record = format!("{V4ONLY}={CORP_HOST_V4}");
    let mut zone = topo.corp.spawn(
        "zone",
        &[
            path_str(bin)?,
            "bench",
            "zone",
            "--listen",
            &listen,
            "--a",
            &record,
        ],
    )?;
    let up = wait_until(Duration::from_secs(10), || {
        zone.is_running()
            && topo
                .corp
                .exec_ok(&["ss", "-Hnul", "sport = :53"])
                .is_ok_and(|s| !s.trim().is_empty())
    });
    zone.ensure_running()?;
    ensure!(up, "gate64 bench zone not listening: {}", zone.log());
    Ok(zone)
}

fn start_sink(topo: &Topology, bin: &Path) -> Result<Process> {
    let v6 = format!("[::]:{SINK_PORT}");
    let v4 = format!("0.0.0.0:{SINK_PORT}");
    let mut sink = topo.corp.spawn(
        "sink",
        &[
            path_str(bin)?,
            "bench",
            "sink",
            "--listen",
            &v6,
            "--listen",
            &v4,
        ],
    )?;
    let filter = format!("sport = :{SINK_PORT}");
    let up = wait_until(Duration::from_secs(10), || {
        sink.is_running()
            && topo
                .corp
                .exec_ok(&["ss", "-Hntl", &filter])
                .is_ok_and(|s| s.lines().count() >= 2)
    });
    sink.ensure_running()?;
    ensure!(up, "gate64 bench sink not listening: {}", sink.log());
    Ok(sink)
}

/// `tload` behind `tsrv`, with the client sources routed local (AnyIP) so each emulated
/// client binds its own address without one `ip addr` per client.
fn wire_load_namespace(topo: &Topology, load: &Netns) -> Result<()> {
    topo.srv.veth("vload", load, "vsrv")?;
    topo.srv.addr_add("vload", &format!("{LOAD_GW_V4}/24"))?;
    load.addr_add("vsrv", &format!("{LOAD_V4}/24"))?;
    load.ip(&["route", "add", "default", "via", LOAD_GW_V4])?;
    load.ip(&["route", "add", "local", SOURCE_V4, "dev", "lo"])?;
    topo.srv.ip(&["route", "add", SOURCE_V4, "via", LOAD_V4])?;
    for ns in [&topo.srv, load] {
        ns.sysctl("net.ipv4.conf.all.rp_filter", "0")?;
        ns.sysctl("net.ipv4.conf.default.rp_filter", "0")?;
    }
    Ok(())
}

/// The kernel threads that receive for gate64's host, counted with gate64: its TUN's NAPI
/// (`corpnet.tun = "gate64"`) and, with `--nic-receive`, that of `tsrv`'s veths to the
/// clients and to the corporate host. A device of the same name in another namespace
/// at the same time would be counted with them.
pub const GATE64_NAPI_THREADS: &[&str] = &["napi/gate64-", "napi/vload-", "napi/vcorp-"];

/// The kernel threads that receive, with `--nic-receive`, for the lab's own ends (`tload`'s
/// and `tcorp`'s veth, `vsrv`): what gate64 sends them is received there, not inside
/// gate64's system calls, as on a real client or corporate host; reported apart, and part of
/// the machine's CPU.
pub const LAB_NAPI_THREADS: &[&str] = &["napi/vsrv-"];

/// Gives each end of the veths between `tsrv` and the clients (`tload`) and between `tsrv`
/// and the corporate host (`tcorp`) a NIC's receive path: GRO and a NAPI kernel thread of its
/// own (`napi/vload-N`, `napi/vcorp-N` in `tsrv`; `napi/vsrv-N` in `tload` and `tcorp`).
/// Without it a veth finishes the receiver's whole input path (IP, forwarding into the
/// generator's TUN, the sink's TCP) inside the sender's system call, so what gate64 sent
/// was received on gate64's CPU time, and what the generator and the sink sent to gate64
/// was received on theirs. With it each side's receive runs in its own NAPI threads, which
/// the report counts where they belong: `tsrv`'s with gate64 (beside its TUN's), the
/// others as the lab's.
fn nic_receive_paths(topo: &Topology, load: &Netns) -> Result<()> {
    topo.srv.nic_receive("vload")?;
    topo.srv.nic_receive("vcorp")?;
    load.nic_receive("vsrv")?;
    topo.corp.nic_receive("vsrv")
}

/// Debian's miredo client qualifies with gate64, then strongSwan builds both tunnels over
/// it with the lab's IPsec client certificate.
fn start_third_party<'t>(topo: &'t Topology, pki: &Path) -> Result<ThirdParty<'t>> {
    let mut miredo = topo.start_miredo_client()?;
    topo.wait_client_address(&mut miredo, Duration::from_secs(30))?;
    // Teredo's connectivity test and bubbles before IKE's first message.
    topo.ping6_all(&topo.cli, IKE_ENDPOINT, 3)
        .context("ping gate64's IKE endpoint over Teredo before IKE")?;
    // The infrastructure tunnel reaches the corporate host; DNS64 on gate64's corporate
    // address is reached through the intranet tunnel (the IKE peer lies outside both).
    let infrastructure = format!("{CORP_HOST}/128");
    let tunnels = vec![
        Tunnel::new(INFRASTRUCTURE, &[&infrastructure]),
        Tunnel::new(INTRANET, &[CORP_PREFIX]),
    ];
    let credentials = CertPaths::new(
        pki.join("ca.pem"),
        pki.join("ipsec-client.pem"),
        pki.join("ipsec-client.key"),
    );
    let charon = Charon::start(
        &topo.cli,
        "strongswan",
        CharonConfig::initiator(IpAddr::V6(IKE_ENDPOINT), credentials, tunnels),
    )?;
    charon.load_all()?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        charon.initiate(tunnel, tunnel, IKE_TIMEOUT)?;
    }
    charon.wait_established(2, 2, IKE_TIMEOUT)?;
    Ok(ThirdParty {
        _charon: charon,
        _miredo: miredo,
    })
}

/// `p` as UTF-8, or an error naming it.
pub(crate) fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("path {} is not UTF-8", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ike_endpoint_is_the_pools_default_endpoint() {
        let pool6 = POOL6.parse().expect("POOL6 is a prefix");
        assert_eq!(IKE_ENDPOINT, gate64_config::pool6_endpoint(pool6));
    }

    #[test]
    fn the_ready_budget_grows_with_the_clients_not_only_the_start_rate() {
        // Small runs: the start rate bounds it.
        assert_eq!(ready_budget(1500, 10), Duration::from_secs(120 + 600));
        // Large runs: the machine's set-up rate does, whatever the start rate.
        let big = ready_budget(100_000, 500);
        assert_eq!(big, Duration::from_secs(120 + 5_000));
        assert!(ready_budget(200_000, 500) > big);
        assert_eq!(ready_budget(0, 0), Duration::from_secs(120));
    }

    #[test]
    fn a_wait_stalls_only_when_progress_stops() {
        let t0 = Instant::now();
        let mut p = Progress::new(t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        p.saw(10, at(100));
        assert!(!p.stalled(at(399)));
        // A count that falls back (an SA lost and set up again) is no progress.
        p.saw(9, at(200));
        p.saw(10, at(300));
        assert!(p.stalled(at(401)));
        p.saw(11, at(401));
        assert!(!p.stalled(at(700)));
        assert!(p.stalled(at(702)));
        let s = Status {
            teredo_up: 1,
            iphttps_up: 2,
            mmsa: 4,
            up: 8,
            failed: 16,
            ..Status::default()
        };
        assert_eq!(settled(&s), 31);
    }
}
