//! The standard Teredo lab: a Miredo client behind one veth, the gate64 host, a corporate
//! IPv6 host and, optionally, an attacker. Addresses are TEST-NET (RFC 5737) and
//! documentation IPv6 (RFC 3849): Miredo rejects RFC 1918 server addresses.
//!
//! ```text
//!  tcli  198.51.100.10/24 ─ vsrv ══ vcli ─ tsrv  192.0.2.1/24, 192.0.2.2/24, 198.51.100.1/24
//!                                          tsrv  2001:db8:100:1::1/64 ─ vcorp ══ vsrv ─ tcorp
//!                                                                          2001:db8:100:1::2/64
//!  tatk  203.0.113.20/24 ─ vsrv ══ vatk ─ tsrv  203.0.113.1/24          (optional attacker)
//!                                          tsrv  10.20.0.1/24 on vcorp  ─ tcorp 10.20.0.2/24
//!                                                                       (optional IPv4 corp)
//! ```
//!
//! Only one [`Topology`] exists at a time per test process: [`TopologyBuilder::build`] takes
//! a process-wide lock, so netns tests run one after another (they share two cores and the
//! same fixed addresses would make their throughput numbers meaningless otherwise).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail, ensure};

use crate::metrics::Metrics;
use crate::netns::{Netns, Process, describe_status, find_tool, http_get, os};
use crate::wait::{wait_for, wait_until};

/// gate64's primary Teredo server address (Miredo's `ServerAddress`).
pub const SERVER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// gate64's secondary Teredo server address (primary + 1, RFC 4380 §5.2.1).
pub const SERVER_V4_2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// The Miredo client's IPv4 address in `tcli`.
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
/// `tsrv`'s address on the client link, the client's default gateway.
pub const CLIENT_GW_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// The attacker's IPv4 address in `tatk`.
pub const ATTACKER_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
/// `tsrv`'s address on the attacker link.
pub const ATTACKER_GW_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
/// UDP port the Miredo client binds (`BindPort`).
pub const CLIENT_PORT: u16 = 3546;
/// Teredo server port (RFC 4380 §2.7).
pub const TEREDO_PORT: u16 = 3544;
/// UDP port of Miredo's reference relay.
pub const REFERENCE_RELAY_PORT: u16 = 3545;
/// The corporate IPv6 host in `tcorp` (runs `iperf3 -s`).
pub const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 2);
/// `tsrv`'s address on the corporate link, `tcorp`'s default gateway.
pub const CORP_ROUTER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 1);
/// The Teredo /64 the server advertises: `2001:0:` + [`SERVER_V4`] (RFC 4380 §4).
pub const TEREDO_PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0, 0xc000, 0x0201, 0, 0, 0, 0);
/// Where gate64 serves `/metrics` inside `tsrv`.
pub const METRICS_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 9164);
/// `tcorp`'s IPv4 address when the topology has an IPv4 corporate network.
pub const CORP_HOST_V4: Ipv4Addr = Ipv4Addr::new(10, 20, 0, 2);
/// `tsrv`'s IPv4 address on the corporate link, `tcorp`'s IPv4 default gateway.
pub const CORP_ROUTER_V4: Ipv4Addr = Ipv4Addr::new(10, 20, 0, 1);

/// Serialises topologies within one test process.
static SERIAL: Mutex<()> = Mutex::new(());

/// Builds a [`Topology`].
#[derive(Debug, Clone, Default)]
pub struct TopologyBuilder {
    attacker: bool,
    corp_ipv4: bool,
}

impl TopologyBuilder {
    /// Also create the attacker namespace `tatk` (203.0.113.20/24, via 203.0.113.1 in tsrv).
    pub fn attacker(mut self, yes: bool) -> Self {
        self.attacker = yes;
        self
    }

    /// Also give the corporate link IPv4 (tcorp 10.20.0.2/24 via 10.20.0.1 in tsrv, IPv4
    /// forwarding on in tsrv): an IPv4-only corporate host for NAT64.
    pub fn corp_ipv4(mut self, yes: bool) -> Self {
        self.corp_ipv4 = yes;
        self
    }

    /// Waits for any other topology of this process to go away, then creates the namespaces,
    /// links, addresses and routes. Everything is undone when the result is dropped.
    pub fn build(self) -> Result<Topology> {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let cli = Netns::new("tcli")?;
        let srv = Netns::new("tsrv")?;
        let corp = Netns::new("tcorp")?;
        let atk = if self.attacker {
            Some(Netns::new("tatk")?)
        } else {
            None
        };

        srv.veth("vcli", &cli, "vsrv")?;
        for a in ["192.0.2.1/24", "192.0.2.2/24", "198.51.100.1/24"] {
            srv.addr_add("vcli", a)?;
        }
        srv.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        cli.addr_add("vsrv", "198.51.100.10/24")?;
        cli.ip(&["route", "add", "default", "via", "198.51.100.1"])?;

        srv.veth("vcorp", &corp, "vsrv")?;
        srv.addr_add("vcorp", "2001:db8:100:1::1/64")?;
        corp.addr_add("vsrv", "2001:db8:100:1::2/64")?;
        corp.ip(&["-6", "route", "add", "default", "via", "2001:db8:100:1::1"])?;
        if self.corp_ipv4 {
            srv.addr_add("vcorp", &format!("{CORP_ROUTER_V4}/24"))?;
            corp.addr_add("vsrv", &format!("{CORP_HOST_V4}/24"))?;
            corp.ip(&[
                "route",
                "add",
                "default",
                "via",
                &CORP_ROUTER_V4.to_string(),
            ])?;
            srv.sysctl("net.ipv4.ip_forward", "1")?;
        }

        if let Some(atk) = &atk {
            srv.veth("vatk", atk, "vsrv")?;
            srv.addr_add("vatk", "203.0.113.1/24")?;
            atk.addr_add("vsrv", "203.0.113.20/24")?;
            atk.ip(&["route", "add", "default", "via", "203.0.113.1"])?;
        }
        Ok(Topology {
            cli,
            srv,
            corp,
            atk,
            reported: AtomicBool::new(false),
            _serial: serial,
        })
    }
}

/// The namespaces of the standard lab (see the module docs); dropping it deletes them and
/// kills everything running inside. When dropped during a panic it first prints the logs of
/// every process spawned in it.
#[derive(Debug)]
pub struct Topology {
    /// `tcli`: the Miredo Teredo client.
    pub cli: Netns,
    /// `tsrv`: the gate64 host (or Miredo's reference server and relay).
    pub srv: Netns,
    /// `tcorp`: the corporate IPv6 host.
    pub corp: Netns,
    /// `tatk`: the attacker, if requested.
    pub atk: Option<Netns>,
    reported: AtomicBool,
    // Last field: released only after the namespaces above are gone.
    _serial: MutexGuard<'static, ()>,
}

/// Settings of the gate64 configuration written by [`Topology::start_gate64`].
#[derive(Debug, Clone)]
pub struct Gate64Options {
    /// `[log] level`.
    pub log_level: String,
    /// `[server] workers`.
    pub workers: u32,
    /// More TOML appended to the configuration (e.g. `[nat64]` and `[dns64]` sections).
    pub extra: String,
    /// Write `[ipsec] require = false`: the lab switch, clients reach the corporate network
    /// without IPsec. The tests that keep it say `without_ipsec` in their names; an IPsec
    /// test sets it false and writes its own `[ipsec]` section in `extra`.
    pub without_ipsec: bool,
}

impl Default for Gate64Options {
    fn default() -> Self {
        Gate64Options {
            log_level: "debug".to_owned(),
            workers: 2,
            extra: String::new(),
            without_ipsec: true,
        }
    }
}

impl Gate64Options {
    /// The TOML configuration for the standard lab.
    pub fn config_toml(&self) -> String {
        format!(
            r#"[server]
workers = {workers}

[teredo]
server_addresses = ["{SERVER_V4}", "{SERVER_V4_2}"]
port = {TEREDO_PORT}
relay = true

[corpnet]
tun = "gate64"
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
{ipsec}
[metrics]
listen = "{METRICS_ADDR}"

[log]
level = "{level}"

{extra}"#,
            workers = self.workers,
            level = self.log_level,
            extra = self.extra,
            ipsec = if self.without_ipsec {
                "\n[ipsec]\nrequire = false\n"
            } else {
                ""
            },
        )
    }
}

/// Outcome of one `ping`.
#[derive(Debug, Clone)]
pub struct PingStats {
    /// Echo requests sent.
    pub transmitted: u32,
    /// Echo replies received.
    pub received: u32,
    /// ping's full output, for messages.
    pub output: String,
}

impl PingStats {
    /// Every request was answered.
    pub fn all_ok(&self) -> bool {
        self.transmitted > 0 && self.received == self.transmitted
    }
}

/// Totals of one `iperf3 --json` run (from its `end.sum_sent` / `end.sum_received`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IperfResult {
    /// Bytes the sender sent.
    pub sent_bytes: u64,
    /// Bytes the receiver received.
    pub received_bytes: u64,
    /// Receiver throughput in bit/s.
    pub received_bps: f64,
}

impl Topology {
    /// A builder; by default without the attacker namespace.
    pub fn builder() -> TopologyBuilder {
        TopologyBuilder::default()
    }

    /// The attacker namespace; fails if the topology was built without one.
    pub fn atk(&self) -> Result<&Netns> {
        self.atk
            .as_ref()
            .context("topology built without .attacker(true)")
    }

    /// All namespaces, client first.
    pub fn namespaces(&self) -> impl Iterator<Item = &Netns> {
        [&self.cli, &self.srv, &self.corp]
            .into_iter()
            .chain(self.atk.as_ref())
    }

    /// The logs of every process spawned in any namespace (last lines of each).
    pub fn logs_report(&self) -> String {
        self.namespaces().map(Netns::logs_report).collect()
    }

    /// Prints [`Topology::logs_report`] once (later calls and the panic-time report in
    /// `Drop` print nothing more).
    pub fn print_logs(&self) {
        if !self.reported.swap(true, Ordering::Relaxed) {
            eprintln!(
                "===== process logs =====\n{}===== end of logs =====",
                self.logs_report()
            );
        }
    }

    /// Unwraps a scenario's result: on error prints all logs and panics with the error
    /// chain.
    pub fn check<T>(&self, result: Result<T>) -> T {
        match result {
            Ok(v) => v,
            Err(e) => {
                self.print_logs();
                panic!("{e:#}");
            }
        }
    }

    /// Starts Miredo's own server (`miredo-server`, 192.0.2.1 + 192.0.2.2) and relay (`miredo`
    /// as a cone relay on 192.0.2.1:3545, interface `terelay`, which routes `2001::/32`) in
    /// `tsrv` and waits (≤ 10 s) until both are up. Returns `[server, relay]`.
    pub fn start_reference_pair(&self) -> Result<Vec<Process>> {
        let server_bin = tool("miredo-server", "miredo-server")?;
        let relay_bin = tool("miredo", "miredo")?;
        let srv = &self.srv;
        let conf = srv.write_file(
            "miredo-server.conf",
            &format!("ServerBindAddress {SERVER_V4}\nServerBindAddress2 {SERVER_V4_2}\n"),
        )?;
        let pid = srv.dir().join("miredo-server.pid");
        let mut server = srv.spawn("miredo-server", &miredo_argv(&server_bin, &conf, &pid))?;
        let conf = srv.write_file(
            "miredo-relay.conf",
            &format!(
                "RelayType cone\nInterfaceName terelay\nBindAddress {SERVER_V4}\n\
                 BindPort {REFERENCE_RELAY_PORT}\n"
            ),
        )?;
        let pid = srv.dir().join("miredo-relay.pid");
        let mut relay = srv.spawn("miredo-relay", &miredo_argv(&relay_bin, &conf, &pid))?;

        let server_sock = format!("{SERVER_V4}:{TEREDO_PORT}");
        let ready = wait_until(Duration::from_secs(10), || {
            server.is_running()
                && relay.is_running()
                && udp_listening(srv, &server_sock)
                && srv
                    .ip(&["-6", "route", "show", "2001::/32"])
                    .is_ok_and(|r| r.contains("dev terelay"))
        });
        server.ensure_running()?;
        relay.ensure_running()?;
        ensure!(
            ready,
            "miredo-server / miredo relay not ready within 10 s (UDP {server_sock} bound and \
             route 2001::/32 dev terelay); logs:\n{}{}",
            server.log(),
            relay.log()
        );
        Ok(vec![server, relay])
    }

    /// Starts Debian's `miredo` as the Teredo client in `tcli` (server 192.0.2.1, bound to
    /// 198.51.100.10:3546, interface `teredo`). Use [`Topology::wait_client_address`] next.
    pub fn start_miredo_client(&self) -> Result<Process> {
        let bin = tool("miredo", "miredo")?;
        let conf = self.cli.write_file(
            "miredo-client.conf",
            &format!(
                "RelayType client\nInterfaceName teredo\nServerAddress {SERVER_V4}\n\
                 BindAddress {CLIENT_V4}\nBindPort {CLIENT_PORT}\n"
            ),
        )?;
        let pid = self.cli.dir().join("miredo-client.pid");
        self.cli
            .spawn("miredo-client", &miredo_argv(&bin, &conf, &pid))
    }

    /// Starts Debian's `miredo` in `tcli` with `conf` as its whole `miredo.conf` (e.g. a
    /// document's example, taken as written); its `InterfaceName` must be `teredo` for
    /// [`Topology::wait_client_address`].
    pub fn start_miredo_client_with(&self, conf: &str) -> Result<Process> {
        let bin = tool("miredo", "miredo")?;
        let conf = self.cli.write_file("miredo-client.conf", conf)?;
        let pid = self.cli.dir().join("miredo-client.pid");
        self.cli
            .spawn("miredo-client", &miredo_argv(&bin, &conf, &pid))
    }

    /// Polls `ip -6 addr show dev teredo` in `tcli` until the client has an address in
    /// [`TEREDO_PREFIX`] (it qualified) and its default route via `teredo` is in place, or
    /// fails after `timeout` with the client's log.
    pub fn wait_client_address(&self, client: &mut Process, timeout: Duration) -> Result<Ipv6Addr> {
        let found = wait_for(timeout, || {
            if !client.is_running() {
                return Some(None);
            }
            // Miredo's hook script adds the address first and the routes after it: wait for
            // the default route too, or an immediate ping fails with ENETUNREACH.
            let routed = self
                .cli
                .ip(&["-6", "route", "show", "default"])
                .is_ok_and(|r| r.contains("dev teredo"));
            if !routed {
                return None;
            }
            teredo_address(&self.cli).map(Some)
        });
        match found {
            Some(Some(addr)) => Ok(addr),
            Some(None) => {
                client.ensure_running()?;
                unreachable!("ensure_running fails for an exited process")
            }
            None => bail!(
                "the Miredo client got no {TEREDO_PREFIX}/64 address within {timeout:?} \
                 (qualification failed; \"No reply from Teredo server\" means the RA was \
                 rejected); `ip -6 addr show dev teredo`: {}; `ip -6 route`: {}; client \
                 log:\n{}",
                self.cli
                    .ip(&["-6", "addr", "show", "dev", "teredo"])
                    .unwrap_or_else(|e| e.to_string()),
                self.cli
                    .ip(&["-6", "route"])
                    .unwrap_or_else(|e| e.to_string()),
                client.log()
            ),
        }
    }

    /// Starts `gate64 serve` in `tsrv` with [`Gate64Options::config_toml`] and waits (≤ 15 s)
    /// until it serves `/metrics` and has bound UDP 192.0.2.1:3544.
    pub fn start_gate64(&self, opts: &Gate64Options) -> Result<Process> {
        self.start_gate64_with(&opts.config_toml())
    }

    /// [`Topology::start_gate64`] with the configuration file `toml` as written (e.g. a
    /// [`Gate64Options::config_toml`] with keys added to its sections).
    pub fn start_gate64_with(&self, toml: &str) -> Result<Process> {
        let bin = gate64_binary()?;
        let conf = self.srv.write_file("gate64.toml", toml)?;
        let mut gate = self
            .srv
            .spawn("gate64", &[os(&bin), "serve", "--config", os(&conf)])?;
        let sock = format!("{SERVER_V4}:{TEREDO_PORT}");
        let ready = wait_until(Duration::from_secs(15), || {
            gate.is_running() && udp_listening(&self.srv, &sock) && self.metrics_text().is_ok()
        });
        gate.ensure_running()
            .with_context(|| format!("{} serve --config {}", bin.display(), conf.display()))?;
        if !ready {
            bail!(
                "gate64 ({}) did not come up within 15 s: UDP {sock} bound: {}, /metrics on \
                 {METRICS_ADDR}: {}; its log:\n{}",
                bin.display(),
                udp_listening(&self.srv, &sock),
                self.metrics_text()
                    .err()
                    .map_or("ok".to_owned(), |e| format!("{e:#}")),
                gate.log()
            );
        }
        Ok(gate)
    }

    /// Starts `iperf3 -s` in `tcorp` and waits (≤ 5 s) until it listens on TCP 5201.
    pub fn start_iperf_server(&self) -> Result<Process> {
        let bin = tool("iperf3", "iperf3")?;
        let mut p = self.corp.spawn("iperf3-server", &[os(&bin), "-s"])?;
        let ok = wait_until(Duration::from_secs(5), || {
            p.is_running()
                && self
                    .corp
                    .exec_ok(&["ss", "-Hntl", "sport = :5201"])
                    .is_ok_and(|s| !s.trim().is_empty())
        });
        p.ensure_running()?;
        ensure!(
            ok,
            "iperf3 -s not listening on 5201 within 5 s: {}",
            p.log()
        );
        Ok(p)
    }

    /// `ping -6 -c <count> -i 0.2 -W 3 <dst>` from `from`; returns the counts (a partial or
    /// total loss is not an error, a missing or hung ping is).
    pub fn ping6(&self, from: &Netns, dst: Ipv6Addr, count: u32) -> Result<PingStats> {
        self.ping6_host(from, &dst.to_string(), count)
    }

    /// Like [`Topology::ping6`] to a host name or address (IPv6 only: `ping -6`).
    pub fn ping6_host(&self, from: &Netns, dst: &str, count: u32) -> Result<PingStats> {
        let ping = tool("ping", "iputils-ping")?;
        let count_s = count.to_string();
        let timeout = Duration::from_secs(u64::from(count) + 15);
        let out = from.exec_timeout(
            &[
                os(&ping),
                "-6",
                "-n",
                "-c",
                &count_s,
                "-i",
                "0.2",
                "-W",
                "3",
                dst,
            ],
            timeout,
        )?;
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let (transmitted, received) = parse_ping_summary(&output).with_context(|| {
            format!(
                "ping {dst} from {} ({}): {output}",
                from.name(),
                describe_status(out.status)
            )
        })?;
        Ok(PingStats {
            transmitted,
            received,
            output,
        })
    }

    /// Like [`Topology::ping6`], but fails unless every echo request was answered.
    pub fn ping6_all(&self, from: &Netns, dst: Ipv6Addr, count: u32) -> Result<PingStats> {
        self.ping6_host_all(from, &dst.to_string(), count)
    }

    /// Like [`Topology::ping6_host`], but fails unless every echo request was answered.
    pub fn ping6_host_all(&self, from: &Netns, dst: &str, count: u32) -> Result<PingStats> {
        let stats = self.ping6_host(from, dst, count)?;
        ensure!(
            stats.all_ok(),
            "ping {dst} from {}: {}/{} replies:\n{}",
            from.name(),
            stats.received,
            stats.transmitted,
            stats.output
        );
        Ok(stats)
    }

    /// Runs `iperf3 -c 2001:db8:100:1::2 -t <secs> -P <flows> --json [-R]` in `tcli` (needs
    /// [`Topology::start_iperf_server`]); `reverse` = tcorp sends to the client.
    pub fn iperf3(&self, secs: u32, flows: u32, reverse: bool) -> Result<IperfResult> {
        self.iperf3_to(&CORP_HOST.to_string(), secs, flows, reverse, None)
    }

    /// Like [`Topology::iperf3`] towards `host` (an IPv6 address or a name, over IPv6 only:
    /// `-6`); `udp_bitrate` (e.g. `"20M"`) runs a UDP test at that rate instead of TCP.
    pub fn iperf3_to(
        &self,
        host: &str,
        secs: u32,
        flows: u32,
        reverse: bool,
        udp_bitrate: Option<&str>,
    ) -> Result<IperfResult> {
        let bin = tool("iperf3", "iperf3")?;
        let (secs_s, flows_s, host) = (secs.to_string(), flows.to_string(), host.to_string());
        let mut argv = vec![
            os(&bin),
            "-c",
            &host,
            "-t",
            &secs_s,
            "-P",
            &flows_s,
            "--json",
            "--connect-timeout",
            "5000",
            "-6",
        ];
        if reverse {
            argv.push("-R");
        }
        if let Some(rate) = udp_bitrate {
            // 1200-byte datagrams fit the Teredo MTU (1280) with their IPv6 and UDP headers.
            argv.extend(["-u", "-b", rate, "-l", "1200"]);
        }
        let out = self
            .cli
            .exec_timeout(&argv, Duration::from_secs(u64::from(secs) + 30))?;
        let json = String::from_utf8_lossy(&out.stdout);
        let what = format!("iperf3 {}", argv[1..].join(" "));
        if let Some(err) = json_string_after(&json, &["\"error\""]) {
            bail!("{what}: {err}");
        }
        ensure!(
            out.status.success(),
            "{what}: {}: {json}",
            describe_status(out.status)
        );
        let num = |path: &[&str]| {
            json_number_after(&json, path).with_context(|| format!("{what}: no {path:?} in {json}"))
        };
        if udp_bitrate.is_some() {
            // UDP reports one "sum" for the receiving side, with the loss counted.
            let bytes = num(&["\"end\"", "\"sum\"", "\"bytes\""])? as u64;
            let lost = num(&["\"end\"", "\"sum\"", "\"lost_percent\""])?;
            return Ok(IperfResult {
                sent_bytes: bytes,
                received_bytes: (bytes as f64 * (1.0 - lost / 100.0)) as u64,
                received_bps: num(&["\"end\"", "\"sum\"", "\"bits_per_second\""])?
                    * (1.0 - lost / 100.0),
            });
        }
        Ok(IperfResult {
            sent_bytes: num(&["\"end\"", "\"sum_sent\"", "\"bytes\""])? as u64,
            received_bytes: num(&["\"end\"", "\"sum_received\"", "\"bytes\""])? as u64,
            received_bps: num(&["\"end\"", "\"sum_received\"", "\"bits_per_second\""])?,
        })
    }

    /// Starts Debian's `unbound` in the foreground in `ns`, listening on `listen` port 53 and
    /// answering `local_data` records (unbound `local-data:` strings such as
    /// `"v4only.corp.example. 300 IN A 10.20.0.2"`) from a static zone `corp.example.`
    /// (anything else there is NXDOMAIN; no recursion anywhere). Waits (≤ 10 s) until it
    /// listens.
    pub fn start_unbound(
        &self,
        ns: &Netns,
        listen: IpAddr,
        local_data: &[&str],
    ) -> Result<Process> {
        let bin = tool("unbound", "unbound")?;
        let mut conf = format!(
            "server:\n  interface: {listen}\n  port: 53\n  do-daemonize: no\n  \
             username: \"\"\n  chroot: \"\"\n  directory: \"{dir}\"\n  pidfile: \"{dir}/unbound.pid\"\n  \
             use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n  access-control: 0.0.0.0/0 allow\n  \
             access-control: ::/0 allow\n  do-ip6: yes\n  num-threads: 1\n  \
             local-zone: \"corp.example.\" static\n  \
             local-zone: \"in-addr.arpa.\" static\n",
            dir = ns.dir().display()
        );
        for d in local_data {
            conf.push_str(&format!("  local-data: \"{d}\"\n"));
        }
        let path = ns.write_file("unbound.conf", &conf)?;
        let mut p = ns.spawn("unbound", &[os(&bin), "-d", "-c", os(&path)])?;
        let sock = match listen {
            IpAddr::V4(a) => format!("{a}:53"),
            IpAddr::V6(a) => format!("[{a}]:53"),
        };
        let ok = wait_until(Duration::from_secs(10), || {
            p.is_running() && udp_listening(ns, &sock)
        });
        p.ensure_running()?;
        ensure!(
            ok,
            "unbound not listening on {sock} within 10 s: {}",
            p.log()
        );
        Ok(p)
    }

    /// Scrapes gate64's `/metrics` from inside `tsrv` (raw text).
    pub fn metrics_text(&self) -> Result<String> {
        self.srv.run_in(|| http_get(METRICS_ADDR, "/metrics"))?
    }

    /// Scrapes and parses gate64's `/metrics`.
    pub fn metrics(&self) -> Result<Metrics> {
        Ok(Metrics::parse(&self.metrics_text()?))
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if thread::panicking() {
            self.print_logs();
        }
    }
}

/// Finds the gate64 binary: `$GATE64_BIN` if set, else as [`find_binary`] does.
pub fn gate64_binary() -> Result<PathBuf> {
    find_binary("gate64", "GATE64_BIN").map_err(|e| {
        e.context("run `cargo build -p gate64` first (scripts/test does), or set GATE64_BIN")
    })
}

/// Finds a binary built in this workspace: `$<env_var>` if set; otherwise, in the cargo
/// target directory of the running test (or `$CARGO_TARGET_DIR`, or `<workspace>/target`),
/// `release/<name>` if it is newer than `debug/<name>` (or the only one), else
/// `debug/<name>`.
pub fn find_binary(name: &str, env_var: &str) -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os(env_var) {
        let bin = PathBuf::from(bin);
        ensure!(bin.is_file(), "{env_var}={} does not exist", bin.display());
        return Ok(bin);
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        // <target>/debug/deps/e2e-<hash>: cargo marks <target> with CACHEDIR.TAG.
        if let Some(t) = exe.ancestors().find(|a| a.join("CACHEDIR.TAG").is_file()) {
            dirs.push(t.to_owned());
        }
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        dirs.push(PathBuf::from(t));
    }
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    for dir in &dirs {
        let (release, debug) = (dir.join("release").join(name), dir.join("debug").join(name));
        match (mtime(&release), mtime(&debug)) {
            (Some(r), Some(d)) if r > d => return Ok(release),
            (Some(_), None) => return Ok(release),
            (_, Some(_)) => return Ok(debug),
            (None, None) => {}
        }
    }
    bail!(
        "binary `{name}` not found (looked for release/{name} and debug/{name} in {})",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p)
        .ok()
        .filter(|m| m.is_file())?
        .modified()
        .ok()
}

/// Finds a required tool or fails with the package to install.
fn tool(name: &str, package: &str) -> Result<PathBuf> {
    find_tool(name).with_context(|| {
        format!("`{name}` not found: apt-get install {package} (scripts/test installs it)")
    })
}

/// Miredo's command line. `-f`: stay in the foreground (logs go to stderr as well as syslog);
/// `-p`: a pidfile of our own, since the default `/run/miredo*.pid` is locked per instance.
/// The configuration path must be absolute: Miredo changes to `/` before reading it.
///
/// Started as root, Miredo forks a worker that drops to the user `miredo` (created by the
/// Debian package) and refuses `-u root` ("not supposed to keep root privileges"); where
/// that user does not exist, fall back to `nobody`.
fn miredo_argv<'a>(bin: &'a Path, conf: &'a Path, pid: &'a Path) -> Vec<&'a str> {
    let mut argv = vec![os(bin), "-f", "-c", os(conf), "-p", os(pid)];
    let has_user = std::fs::read_to_string("/etc/passwd")
        .is_ok_and(|p| p.lines().any(|l| l.starts_with("miredo:")));
    if !has_user {
        argv.extend(["-u", "nobody"]);
    }
    argv
}

/// Whether a UDP socket is bound to exactly `addr` (e.g. `192.0.2.1:3544`) in `ns`.
fn udp_listening(ns: &Netns, addr: &str) -> bool {
    ns.exec_ok(&["ss", "-Hnuln"])
        .is_ok_and(|s| s.lines().any(|l| l.split_whitespace().any(|w| w == addr)))
}

/// The client's address in [`TEREDO_PREFIX`] on `teredo`, if any.
fn teredo_address(cli: &Netns) -> Option<Ipv6Addr> {
    let out = cli
        .ip(&["-6", "-o", "addr", "show", "dev", "teredo"])
        .ok()?;
    let prefix = TEREDO_PREFIX.segments();
    out.split_whitespace()
        .filter_map(|w| w.split('/').next()?.parse::<Ipv6Addr>().ok())
        .find(|a| a.segments()[..4] == prefix[..4])
}

/// `3 packets transmitted, 3 received, ...` → (3, 3).
fn parse_ping_summary(output: &str) -> Option<(u32, u32)> {
    let line = output.lines().find(|l| l.contains("packets transmitted"))?;
    let mut nums = line
        .split(',')
        .map(|part| part.split_whitespace().next()?.parse::<u32>().ok());
    Some((nums.next()??, nums.next()??))
}

/// Follows `path` (each element a literal such as `"end"` with quotes) through `json` by
/// successive searches and parses the number after the last key's colon. Enough for iperf3's
/// fixed layout without a JSON dependency.
fn json_number_after(json: &str, path: &[&str]) -> Option<f64> {
    let rest = json_after(json, path)?;
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Like [`json_number_after`] for a string value (no escape handling beyond `\"`).
fn json_string_after(json: &str, path: &[&str]) -> Option<String> {
    let rest = json_after(json, path)?.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => out.push(chars.next()?),
            c => out.push(c),
        }
    }
    None
}

fn json_after<'a>(json: &'a str, path: &[&str]) -> Option<&'a str> {
    let mut rest = json;
    for key in path {
        rest = &rest[rest.find(key)? + key.len()..];
    }
    Some(rest.trim_start().strip_prefix(':')?.trim_start())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_summary() {
        let out = "--- x ping statistics ---\n3 packets transmitted, 2 received, 33% packet \
                   loss, time 401ms\n";
        assert_eq!(parse_ping_summary(out), Some((3, 2)));
        let out = "4 packets transmitted, 0 received, +4 errors, 100% packet loss\n";
        assert_eq!(parse_ping_summary(out), Some((4, 0)));
        assert_eq!(
            parse_ping_summary("ping: connect: Network is unreachable"),
            None
        );
    }

    #[test]
    fn iperf_json_fields() {
        let json = r#"{"start":{"x":{"bytes": 1}},"end":{"streams":[],"sum_sent":{"start":0,
            "end":3.0,"seconds":3.0,"bytes":363724800,"bits_per_second":969932800.5,
            "retransmits":0},"sum_received":{"start":0,"seconds":3.0,"bytes":363000000,
            "bits_per_second":9.6e8}}}"#;
        let p = ["\"end\"", "\"sum_sent\"", "\"bytes\""];
        assert_eq!(json_number_after(json, &p), Some(363724800.0));
        let p = ["\"end\"", "\"sum_received\"", "\"bits_per_second\""];
        assert_eq!(json_number_after(json, &p), Some(9.6e8));
        assert_eq!(json_string_after(json, &["\"error\""]), None);
        let err = r#"{"start":{},"error":"unable to connect to server: \"x\""}"#;
        assert_eq!(
            json_string_after(err, &["\"error\""]).as_deref(),
            Some("unable to connect to server: \"x\"")
        );
    }

    #[test]
    fn config_has_the_lab_addresses() {
        let toml = Gate64Options::default().config_toml();
        assert!(
            toml.contains(r#"server_addresses = ["192.0.2.1", "192.0.2.2"]"#),
            "{toml}"
        );
        assert!(toml.contains(r#"listen = "127.0.0.1:9164""#), "{toml}");
        assert!(toml.contains(r#"level = "debug""#), "{toml}");
        assert!(toml.contains("\n[ipsec]\nrequire = false\n"), "{toml}");
        let with_ipsec = Gate64Options {
            without_ipsec: false,
            ..Gate64Options::default()
        };
        assert!(!with_ipsec.config_toml().contains("[ipsec]"));
    }

    #[test]
    fn teredo_prefix_embeds_the_server() {
        let s = TEREDO_PREFIX.segments();
        let v4 = SERVER_V4.octets();
        assert_eq!(s[2], u16::from_be_bytes([v4[0], v4[1]]));
        assert_eq!(s[3], u16::from_be_bytes([v4[2], v4[3]]));
    }
}
