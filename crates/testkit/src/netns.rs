//! Network namespaces, processes inside them, and their cleanup.

use crate::skip::skip_or_fail;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};

use crate::wait::wait_until;

/// Every namespace this crate creates is named `g64-<tag>-<pid>-<n>`; the pid lets a later
/// run recognise (and delete) namespaces whose test process died without cleaning up.
const NAME_PREFIX: &str = "g64-";
/// Default timeout of [`Netns::exec`].
const EXEC_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopped process gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Lines of each log printed by [`Netns::logs_report`].
const LOG_TAIL_LINES: usize = 150;
/// Linux `IFNAMSIZ - 1`.
const MAX_IFNAME: usize = 15;

static COUNTER: AtomicU32 = AtomicU32::new(0);
static AVAILABLE: OnceLock<bool> = OnceLock::new();
static STALE_CLEANUP: Once = Once::new();

/// Whether this process can create network namespaces: it runs as root and `ip netns add`
/// works (checked once by creating and deleting a probe namespace).
pub fn netns_available() -> bool {
    *AVAILABLE.get_or_init(|| {
        if gate64_sys::process::geteuid() != 0 {
            return false;
        }
        let name = format!("{NAME_PREFIX}probe-{}-{}", std::process::id(), next_id());
        let ok = ip_root(&["netns", "add", &name]).is_ok();
        if ok {
            let _ = ip_root(&["netns", "del", &name]);
        }
        ok
    })
}

/// The gate every netns test passes first. Returns `true` when namespaces are available.
/// Otherwise the test fails, naming what is missing, unless the run opted out of the tests
/// that need root (`scripts/test --unit-only`, environment `GATE64_UNIT_ONLY`): then it
/// returns `false` after [`skip_or_fail`] recorded the skip.
pub fn netns_or_skip(test: &str) -> bool {
    if netns_available() {
        return true;
    }
    let why = if gate64_sys::process::geteuid() != 0 {
        "needs root (network namespaces)"
    } else {
        "`ip netns add` fails: the kernel needs network namespaces and iproute2"
    };
    skip_or_fail(test, why);
    false
}

/// Finds an executable by name in `PATH` and in the sbin directories (which a non-root
/// `PATH` often lacks). Returns its full path.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ];
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| {
            fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// A network namespace, deleted on drop together with every process still running in it.
///
/// It owns a temporary directory ([`Netns::dir`]) for configuration files and the logs of
/// processes started with [`Netns::spawn`]; the directory is removed on drop unless the thread
/// is panicking, in which case its path is printed so the logs can be inspected.
#[derive(Debug)]
pub struct Netns {
    name: String,
    id: u32,
    dir: PathBuf,
    logs: Mutex<Vec<(String, PathBuf)>>,
}

impl Netns {
    /// Creates the namespace `g64-<tag>-<pid>-<n>` with `lo` up and IPv6 duplicate address
    /// detection off (so addresses are usable at once). `tag`: 1–8 ASCII alphanumerics.
    pub fn new(tag: &str) -> Result<Netns> {
        ensure!(
            !tag.is_empty() && tag.len() <= 8 && tag.bytes().all(|b| b.is_ascii_alphanumeric()),
            "netns tag {tag:?}: use 1-8 ASCII letters or digits"
        );
        STALE_CLEANUP.call_once(cleanup_stale);
        let id = next_id();
        let name = format!("{NAME_PREFIX}{tag}-{}-{id}", std::process::id());
        let dir = std::env::temp_dir().join(format!("gate64-{name}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        if let Err(e) = ip_root(&["netns", "add", &name]) {
            let _ = fs::remove_dir_all(&dir);
            return Err(e.context(format!("creating netns {name} (needs root)")));
        }
        // From here on, Drop deletes the namespace even if the setup below fails.
        let ns = Netns {
            name,
            id,
            dir,
            logs: Mutex::new(Vec::new()),
        };
        ns.link_up("lo")?;
        ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
        ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        Ok(ns)
    }

    /// Makes `nameserver` the resolver of processes run in this namespace: `ip netns exec`
    /// bind-mounts `/etc/netns/<name>/resolv.conf` over `/etc/resolv.conf`. Removed on drop.
    pub fn set_resolver(&self, nameserver: std::net::IpAddr) -> Result<()> {
        let dir = Path::new("/etc/netns").join(&self.name);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        fs::write(
            dir.join("resolv.conf"),
            format!("nameserver {nameserver}\noptions timeout:2 attempts:2\n"),
        )
        .with_context(|| format!("writing {}/resolv.conf", dir.display()))
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's private temporary directory (configuration files, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// An interface name unique to this namespace and test process, `tag` followed by the
    /// pid and namespace counter in hex; at most 15 bytes (`tag` is cut to 4 bytes). Use it
    /// for interfaces that live in the root namespace, even briefly.
    pub fn unique_ifname(&self, tag: &str) -> String {
        let tag: String = tag.chars().take(4).collect();
        let mut name = format!("{tag}{:x}{:x}", std::process::id(), self.id);
        name.truncate(MAX_IFNAME);
        name
    }

    /// Runs `argv` inside the namespace with a 30 s timeout and returns its output (a
    /// non-zero exit is not an error here; a timeout is).
    pub fn exec(&self, argv: &[&str]) -> Result<Output> {
        self.exec_timeout(argv, EXEC_TIMEOUT)
    }

    /// Runs `argv` inside the namespace; kills it and fails once `timeout` has passed.
    pub fn exec_timeout(&self, argv: &[&str], timeout: Duration) -> Result<Output> {
        ensure!(!argv.is_empty(), "empty command");
        let mut cmd = self.command(argv);
        output_with_timeout(&mut cmd, timeout)
            .with_context(|| format!("in netns {}: {}", self.name, argv.join(" ")))
    }

    /// Runs `argv` inside the namespace (30 s timeout) and returns its stdout; a non-zero
    /// exit is an error that quotes stdout and stderr.
    pub fn exec_ok(&self, argv: &[&str]) -> Result<String> {
        let out = self.exec(argv)?;
        check_output(&out).with_context(|| format!("in netns {}: {}", self.name, argv.join(" ")))
    }

    /// Starts `argv` inside the namespace in the background; stdout and stderr go to
    /// `<dir>/<label>.log`. The returned guard stops the process when dropped.
    pub fn spawn(&self, label: &str, argv: &[&str]) -> Result<Process> {
        ensure!(!argv.is_empty(), "empty command");
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        let file_name = if logs.iter().any(|(l, _)| l == label) {
            format!("{label}-{}.log", logs.len())
        } else {
            format!("{label}.log")
        };
        let log = self.dir.join(file_name);
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = self
            .command(argv)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("in netns {}: spawning {}", self.name, argv.join(" ")))?;
        logs.push((label.to_owned(), log.clone()));
        Ok(Process {
            label: label.to_owned(),
            child,
            log,
            status: None,
        })
    }

    /// Creates a veth pair with one end `ifname` here and the other end `peer_ifname` in
    /// `peer`, both created directly inside their namespaces (no name clash in the root
    /// namespace), and sets both up.
    pub fn veth(&self, ifname: &str, peer: &Netns, peer_ifname: &str) -> Result<()> {
        for n in [ifname, peer_ifname] {
            ensure!(
                !n.is_empty() && n.len() <= MAX_IFNAME,
                "interface name {n:?} too long"
            );
        }
        ip_root(&[
            "link",
            "add",
            "name",
            ifname,
            "netns",
            &self.name,
            "type",
            "veth",
            "peer",
            "name",
            peer_ifname,
            "netns",
            &peer.name,
        ])?;
        self.link_up(ifname)?;
        peer.link_up(peer_ifname)
    }

    /// `ip link set <dev> up`.
    pub fn link_up(&self, dev: &str) -> Result<()> {
        self.ip(&["link", "set", dev, "up"]).map(drop)
    }

    /// Adds an address (`cidr`, e.g. `192.0.2.1/24`) to `dev`; IPv6 addresses get `nodad`.
    pub fn addr_add(&self, dev: &str, cidr: &str) -> Result<()> {
        let mut args = vec!["addr", "add", cidr, "dev", dev];
        if cidr.contains(':') {
            args.push("nodad");
        }
        self.ip(&args).map(drop)
    }

    /// Runs `ip <args>` inside the namespace and returns its stdout.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut argv = vec!["ip"];
        argv.extend_from_slice(args);
        self.exec_ok(&argv)
    }

    /// Sets a sysctl inside the namespace (`key` in dotted form, e.g.
    /// `net.ipv6.conf.all.forwarding`), by writing `/proc/sys` with `sh` (no procps needed).
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        ensure!(
            key.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                && value.bytes().all(|b| b.is_ascii_alphanumeric()),
            "sysctl {key}={value}: unexpected characters"
        );
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        self.exec_ok(&["sh", "-c", &format!("echo {value} > {path}")])
            .map(drop)
    }

    /// Gives interface `ifname` (a veth end here) the receive path of a NIC: GRO (and UDP GRO
    /// for forwarding, without which a veth keeps a local socket's datagrams off it), and with
    /// it a NAPI instance of its own, run by a kernel thread (`napi/IFNAME-N`, threaded
    /// NAPI). What arrives on it is then received there, not inside the sender's system call.
    pub fn nic_receive(&self, ifname: &str) -> Result<()> {
        ensure!(
            !ifname.is_empty()
                && ifname.len() <= MAX_IFNAME
                && ifname
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
            "interface name {ifname:?}: unexpected characters"
        );
        self.run_in(|| -> Result<()> {
            let sock =
                std::net::UdpSocket::bind("0.0.0.0:0").context("a socket for SIOCETHTOOL")?;
            let on = [("rx-gro", true), ("rx-udp-gro-forwarding", true)];
            gate64_sys::tun::set_features(sock.as_raw_fd(), ifname, &on)
                .with_context(|| format!("GRO on {ifname}"))
        })??;
        let threaded = format!("/sys/class/net/{ifname}/threaded");
        self.exec_ok(&["sh", "-c", &format!("echo 1 > {threaded}")])
            .map(drop)
    }

    /// Writes `contents` to `<dir>/<file>` and returns the absolute path.
    pub fn write_file(&self, file: &str, contents: &str) -> Result<PathBuf> {
        let path = self.dir.join(file);
        fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// Pids of all processes whose network namespace is this one.
    pub fn pids(&self) -> Vec<i32> {
        netns_pids(&self.name)
    }

    /// Runs `f` on a fresh thread that has joined this namespace (`setns(2)` affects only
    /// that thread), e.g. to open a socket inside it, and returns its result.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        let path = self.ns_path();
        thread::scope(|s| {
            s.spawn(move || -> Result<T> {
                enter_netns(&path)?;
                Ok(f())
            })
            .join()
        })
        .map_err(|_| anyhow!("thread in netns {} panicked", self.name))?
    }

    /// Like [`Netns::run_in`] but in the background: starts a named thread inside the
    /// namespace and returns its handle.
    pub fn spawn_thread<T: Send + 'static>(
        &self,
        thread_name: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<JoinHandle<Result<T>>> {
        let path = self.ns_path();
        thread::Builder::new()
            .name(thread_name.to_owned())
            .spawn(move || -> Result<T> {
                enter_netns(&path)?;
                Ok(f())
            })
            .context("spawning thread")
    }

    /// The last lines of every log written by processes spawned here, with headers.
    pub fn logs_report(&self) -> String {
        let logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        let mut report = String::new();
        for (label, path) in logs.iter() {
            let text = fs::read(path)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|e| format!("<unreadable: {e}>"));
            let lines: Vec<&str> = text.lines().collect();
            let skip = lines.len().saturating_sub(LOG_TAIL_LINES);
            let _ = writeln!(
                report,
                "----- {} / {label} ({}{}) -----",
                self.name,
                path.display(),
                if skip > 0 {
                    format!(", last {LOG_TAIL_LINES} lines")
                } else {
                    String::new()
                }
            );
            for line in &lines[skip..] {
                let _ = writeln!(report, "{line}");
            }
        }
        report
    }

    fn ns_path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    fn command(&self, argv: &[&str]) -> Command {
        let mut cmd = Command::new(ip_path());
        cmd.args(["netns", "exec", &self.name]).args(argv);
        cmd
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        kill_all_in(&self.name);
        let _ = fs::remove_dir_all(Path::new("/etc/netns").join(&self.name));
        if let Err(e) = ip_root(&["netns", "del", &self.name]) {
            eprintln!("warning: deleting netns {}: {e:#}", self.name);
        }
        if thread::panicking() {
            eprintln!(
                "netns {}: files and logs kept in {}",
                self.name,
                self.dir.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A background process started with [`Netns::spawn`]. Dropping it stops it: SIGTERM, up to
/// 3 s grace, then SIGKILL, and always waits for it (no zombies).
#[derive(Debug)]
pub struct Process {
    label: String,
    child: Child,
    log: PathBuf,
    status: Option<ExitStatus>,
}

impl Process {
    /// The process id (of the command itself: `ip netns exec` execs it in place).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The label given to [`Netns::spawn`].
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Where stdout and stderr go.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Everything written to stdout and stderr so far (lossy UTF-8).
    pub fn log(&self) -> String {
        fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The exit status if the process has exited, without blocking.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// Waits up to `timeout` for the process to exit on its own.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_until(timeout, || self.try_status().is_some());
        self.status
    }

    /// Fails with the exit status and the log if the process is no longer running.
    pub fn ensure_running(&mut self) -> Result<()> {
        match self.try_status() {
            None => Ok(()),
            Some(status) => bail!(
                "{} exited unexpectedly ({}); its log:\n{}",
                self.label,
                describe_status(status),
                self.log()
            ),
        }
    }

    /// Stops the process (SIGTERM, 3 s grace, SIGKILL) and returns how it ended. Idempotent.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if self.try_status().is_some() {
            return self.status;
        }
        signal(self.pid() as i32, libc::SIGTERM);
        if self.wait_timeout(STOP_GRACE).is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
        self.status
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `exit 3` or `signal 9` for messages.
pub(crate) fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => status.to_string(),
    }
}

/// A minimal HTTP/1.0 GET of `http://<addr><path>` with a 5 s timeout; returns the body of a
/// 200 response (chunked transfer coding is decoded). Call it inside [`Netns::run_in`] to
/// reach a listener in a namespace.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let timeout = Duration::from_secs(5);
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("reading from {addr}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("no end of HTTP headers")?;
    let status = head.lines().next().unwrap_or_default();
    ensure!(
        status.split_whitespace().nth(1) == Some("200"),
        "GET {path}: {status}"
    );
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        dechunk(body)
    } else {
        Ok(body.to_owned())
    }
}

fn dechunk(mut body: &str) -> Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").context("truncated chunk size")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .context("bad chunk size")?;
        if size == 0 {
            return Ok(out);
        }
        ensure!(rest.len() >= size, "truncated chunk");
        out.push_str(
            rest.get(..size)
                .context("chunk boundary inside a character")?,
        );
        body = rest[size..].strip_prefix("\r\n").unwrap_or(&rest[size..]);
    }
}

fn next_id() -> u32 {
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

fn ip_path() -> PathBuf {
    find_tool("ip").unwrap_or_else(|| PathBuf::from("ip"))
}

/// Runs `ip <args>` in the root namespace (30 s timeout); stdout, or an error with stderr.
fn ip_root(args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(ip_path());
    cmd.args(args);
    let out = output_with_timeout(&mut cmd, EXEC_TIMEOUT)?;
    check_output(&out).with_context(|| format!("ip {}", args.join(" ")))
}

fn check_output(out: &Output) -> Result<String> {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "failed ({}); stdout: {}; stderr: {}",
            describe_status(out.status),
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(stdout)
}

/// Runs `cmd` to completion with stdout and stderr captured in temporary files (not pipes: a
/// daemonising grandchild holding a pipe open would block the reader forever). Kills it and
/// fails after `timeout`.
fn output_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    let base = std::env::temp_dir().join(format!(
        "gate64-testkit-exec-{}-{}",
        std::process::id(),
        next_id()
    ));
    let (out_path, err_path) = (base.with_extension("out"), base.with_extension("err"));
    let result = (|| -> Result<Output> {
        let program = cmd.get_program().to_owned();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(File::create(&out_path)?)
            .stderr(File::create(&err_path)?)
            .spawn()
            .with_context(|| format!("spawning {}", Path::new(&program).display()))?;
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if start.elapsed() >= timeout {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "timed out after {timeout:?}; stdout so far: {}; stderr so far: {}",
                    String::from_utf8_lossy(&fs::read(&out_path).unwrap_or_default()).trim(),
                    String::from_utf8_lossy(&fs::read(&err_path).unwrap_or_default()).trim()
                );
            }
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        };
        Ok(Output {
            status,
            stdout: fs::read(&out_path)?,
            stderr: fs::read(&err_path)?,
        })
    })();
    let _ = fs::remove_file(&out_path);
    let _ = fs::remove_file(&err_path);
    result
}

fn enter_netns(path: &Path) -> Result<()> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // The descriptor stays open for the call; only the calling thread moves.
    gate64_sys::namespace::enter_net(f.as_raw_fd())
        .with_context(|| format!("setns({})", path.display()))
}

fn signal(pid: i32, sig: i32) {
    if pid > 0 {
        // pid > 0 targets one process; one that has ended already is not an error here.
        let _ = gate64_sys::process::kill(pid, sig);
    }
}

fn netns_pids(name: &str) -> Vec<i32> {
    ip_root(&["netns", "pids", name])
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// SIGTERM every process in the namespace, wait up to 3 s, then SIGKILL the rest.
fn kill_all_in(name: &str) {
    let pids = netns_pids(name);
    if pids.is_empty() {
        return;
    }
    for &pid in &pids {
        signal(pid, libc::SIGTERM);
    }
    if !wait_until(STOP_GRACE, || netns_pids(name).is_empty()) {
        for pid in netns_pids(name) {
            signal(pid, libc::SIGKILL);
        }
        wait_until(Duration::from_secs(2), || netns_pids(name).is_empty());
    }
}

/// Deletes `g64-*` namespaces whose creating test process no longer exists (it was killed
/// before its destructors ran).
fn cleanup_stale() {
    let Ok(list) = ip_root(&["netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix(NAME_PREFIX) else {
            continue;
        };
        let parts: Vec<&str> = rest.rsplitn(3, '-').collect();
        let [_, pid, _] = parts.as_slice() else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            eprintln!("removing stale netns {name} (its test process {pid} is gone)");
            kill_all_in(name);
            let _ = ip_root(&["netns", "del", name]);
        }
    }
}

/// For `Command` arguments built from paths.
pub(crate) fn os(s: &Path) -> &str {
    s.to_str()
        .unwrap_or_else(|| panic!("non-UTF-8 path {}", s.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skip::UNIT_ONLY_ENV;

    #[test]
    fn dechunk_decodes() {
        assert_eq!(
            dechunk("5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n").unwrap(),
            "hello world"
        );
        assert!(dechunk("5\r\nhel").is_err());
    }

    #[test]
    fn find_tool_finds_sh() {
        assert!(find_tool("sh").is_some());
        assert!(find_tool("surely-not-a-tool-gate64").is_none());
    }

    #[test]
    #[ignore = "netns: needs root"]
    fn netns_harness_creates_links_runs_and_cleans_up() {
        if !netns_or_skip("netns_harness_creates_links_runs_and_cleans_up") {
            return;
        }
        let (a_name, b_name, dir);
        {
            let a = Netns::new("ta").unwrap();
            let b = Netns::new("tb").unwrap();
            a.veth("v0", &b, "v1").unwrap();
            a.addr_add("v0", "2001:db8:9::1/64").unwrap();
            b.addr_add("v1", "2001:db8:9::2/64").unwrap();
            // nodad + accept_dad=0: usable at once, no 2 s DAD wait.
            let out = a
                .exec_ok(&["ping", "-6", "-c", "1", "-W", "2", "2001:db8:9::2"])
                .unwrap();
            assert!(out.contains("1 received"), "{out}");
            assert!(a.unique_ifname("vethx").len() <= MAX_IFNAME);

            // nic_receive: GRO on, and a NAPI kernel thread of the device's own.
            b.nic_receive("v1").unwrap();
            let threaded = b.exec_ok(&["cat", "/sys/class/net/v1/threaded"]).unwrap();
            assert_eq!(threaded.trim(), "1");
            let napi_thread = || {
                fs::read_dir("/proc").unwrap().flatten().any(|e| {
                    fs::read_to_string(e.path().join("comm"))
                        .is_ok_and(|c| c.starts_with("napi/v1-"))
                })
            };
            assert!(napi_thread());
            let out = a
                .exec_ok(&["ping", "-6", "-c", "1", "-W", "2", "2001:db8:9::2"])
                .unwrap();
            assert!(out.contains("1 received"), "{out}");
            assert!(b.nic_receive("no/such").is_err());

            // exec: timeouts are enforced; non-zero exits are reported, not errors.
            let t = Instant::now();
            assert!(
                a.exec_timeout(&["sleep", "10"], Duration::from_millis(300))
                    .is_err()
            );
            assert!(t.elapsed() < Duration::from_secs(3));
            assert!(!a.exec(&["false"]).unwrap().status.success());
            assert!(a.exec_ok(&["false"]).is_err());

            // spawn: output lands in the log; the guard stops the process.
            let mut p = a
                .spawn("echo", &["sh", "-c", "echo hello; exec sleep 30"])
                .unwrap();
            assert!(wait_until(Duration::from_secs(5), || p
                .log()
                .contains("hello")));
            assert!(p.is_running());
            assert!(a.logs_report().contains("hello"));
            let status = p.stop().unwrap();
            assert_eq!(status.signal(), Some(libc::SIGTERM));

            // run_in: sockets opened on that thread live in the namespace.
            let links = a
                .run_in(|| fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default())
                .unwrap();
            assert!(links.contains("v0:"), "{links}");

            // A process nobody holds a guard for is killed when the namespace goes.
            let orphan = a.spawn("orphan", &["sleep", "30"]).unwrap();
            std::mem::forget(orphan);
            // (`ip netns exec` joins the namespace just after the spawn returns.)
            assert!(wait_until(Duration::from_secs(5), || !a.pids().is_empty()));
            (a_name, b_name, dir) = (a.name().to_owned(), b.name().to_owned(), a.dir().to_owned());
        }
        let list = ip_root(&["netns", "list"]).unwrap();
        assert!(!list.contains(&a_name) && !list.contains(&b_name), "{list}");
        assert!(!dir.exists());
    }

    #[test]
    #[ignore = "netns: needs root"]
    fn netns_cleanup_runs_when_a_test_panics() {
        if !netns_or_skip("netns_cleanup_runs_when_a_test_panics") {
            return;
        }
        let name = std::sync::Mutex::new(String::new());
        let r = std::panic::catch_unwind(|| {
            let a = Netns::new("tp").unwrap();
            *name.lock().unwrap() = a.name().to_owned();
            let _p = a.spawn("sleeper", &["sleep", "30"]).unwrap();
            panic!("deliberate");
        });
        assert!(r.is_err());
        let name = name.into_inner().unwrap();
        let list = ip_root(&["netns", "list"]).unwrap();
        assert!(!name.is_empty() && !list.contains(&name), "{list}");
        // Logs are kept for inspection after a panic; remove them here.
        let _ = fs::remove_dir_all(std::env::temp_dir().join(format!("gate64-{name}")));
    }

    #[test]
    fn a_missing_precondition_fails_without_the_opt_out() {
        // The opt-out is read from the environment; this test runs in a process of its own
        // (nextest), and only the unset case is checked, so it changes nothing.
        if std::env::var_os(UNIT_ONLY_ENV).is_some() {
            return;
        }
        let r = std::panic::catch_unwind(|| skip_or_fail("probe", "needs a tool"));
        let msg = r.expect_err("a skip without the opt-out must fail");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("probe: needs a tool"), "{msg}");
        assert!(msg.contains("--unit-only"), "{msg}");
    }
}
