//! Least privilege once `gate64 serve` has started.
//!
//! Privilege is needed only while starting: CAP_NET_ADMIN creates the TUN device, adds the
//! routes (through `ip route`) and lets SO_RCVBUFFORCE size the Teredo sockets;
//! CAP_NET_BIND_SERVICE binds TCP 443 (IP-HTTPS) and port 53 (DNS64, with IPV6_FREEBIND,
//! which needs no capability). After that the daemon only reads and writes descriptors it
//! already holds, accepts on bound listeners and opens unprivileged sockets (DNS64's upstream
//! queries from ephemeral ports). So [`drop_after_start`] leaves no capability at all:
//!
//! 1. the bounding set is cleared, when CAP_SETPCAP allows it (started as root); under the
//!    systemd unit, `CapabilityBoundingSet=` has already reduced it to the two start-up
//!    capabilities and `NoNewPrivileges=` keeps exec from using them;
//! 2. the ambient set is cleared;
//! 3. with a configured user: no supplementary groups, then the gid, then the uid (in that
//!    order: each step needs the capability the next one drops);
//! 4. inheritable, permitted and effective are emptied with capset(2);
//! 5. `PR_SET_NO_NEW_PRIVS` is set, so no execve can grant anything again.
//!
//! Linux keeps credentials per thread (capset(2): "the calling thread"), and by this point the
//! control runtime, the workers and the DNS64 threads all exist. As glibc does for setuid(2),
//! every thread is signalled and runs the same steps in its signal handler (raw system calls
//! only: async-signal-safe; the calls and the handler are `gate64_sys::privilege`'s, this
//! module decides what to drop and checks the outcome). The outcome is then read back for
//! every thread from `/proc/self/task/*/status`; a thread left with any privilege is an
//! error, and the caller refuses to run rather than continue privileged.

use anyhow::{Context, Result, bail};
use gate64_sys::privilege::{self as sys, DropPlan, Failure};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long the other threads get to run their signal handlers.
const THREADS_DEADLINE: Duration = Duration::from_secs(2);
/// capability.h: CAP_SETPCAP, needed to lower the bounding set.
const CAP_SETPCAP: u32 = 8;

/// A user and group to run as, resolved before the drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The user id.
    pub uid: u32,
    /// The group id; the supplementary groups are emptied.
    pub gid: u32,
}

/// The identity `[server] user` and `group` name, resolved now (before any thread exists, so
/// the NSS lookup runs once); `None` when no user is configured. Refused, naming the key, when
/// the user or group does not exist, is uid 0, or gate64 is not running as root.
pub fn identity(server: &gate64_config::Server) -> Result<Option<Identity>> {
    let Some(user) = &server.user else {
        return Ok(None);
    };
    let identity = lookup(user, server.group.as_deref())?;
    if gate64_sys::process::geteuid() != 0 {
        bail!(
            "`server.user` = {user:?}: switching user needs gate64 started as root; under the \
             systemd unit, which already runs gate64 as its own user, leave the key out"
        );
    }
    Ok(Some(identity))
}

/// The user ids gate64 runs as, for files only it and root may own: the effective uid now
/// and, when `[server] user` names one, that user's (the daemon switches to it after
/// start-up). Refused, naming the key, when the user does not exist.
pub fn daemon_uids(server: &gate64_config::Server) -> Result<Vec<u32>> {
    let mut uids = vec![gate64_sys::process::geteuid()];
    if let Some(user) = &server.user {
        uids.push(lookup(user, server.group.as_deref())?.uid);
    }
    Ok(uids)
}

/// Looks up `user` (and `group`, else the user's primary group) in the host's user database.
fn lookup(user: &str, group: Option<&str>) -> Result<Identity> {
    let name = std::ffi::CString::new(user)
        .with_context(|| format!("`server.user` = {user:?}: contains a NUL byte"))?;
    let Some(pwd) = sys::lookup_user(&name)
        .with_context(|| format!("`server.user` = {user:?}: looking up the user"))?
    else {
        bail!("`server.user` = {user:?}: no such user on this host (getpwnam)");
    };
    if pwd.uid == 0 {
        bail!("`server.user` = {user:?}: is uid 0; name an unprivileged user");
    }
    let uid = pwd.uid;
    let mut gid = pwd.gid;
    if let Some(group) = group {
        let name = std::ffi::CString::new(group)
            .with_context(|| format!("`server.group` = {group:?}: contains a NUL byte"))?;
        let Some(found) = sys::lookup_group(&name)
            .with_context(|| format!("`server.group` = {group:?}: looking up the group"))?
        else {
            bail!("`server.group` = {group:?}: no such group on this host (getgrnam)");
        };
        gid = found;
    }
    if gid == 0 {
        bail!("`server.user` = {user:?}: its group is gid 0; set `server.group` to another");
    }
    Ok(Identity { uid, gid })
}

/// What a thread holds, as `/proc/<pid>/task/<tid>/status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadCredentials {
    /// `CapInh`.
    pub inheritable: u64,
    /// `CapPrm`.
    pub permitted: u64,
    /// `CapEff`.
    pub effective: u64,
    /// `CapBnd`.
    pub bounding: u64,
    /// `CapAmb`.
    pub ambient: u64,
    /// `NoNewPrivs`.
    pub no_new_privs: bool,
    /// Real, effective, saved and filesystem uid.
    pub uids: [u32; 4],
    /// Real, effective, saved and filesystem gid.
    pub gids: [u32; 4],
}

impl ThreadCredentials {
    /// Parses the text of a `status` file; `None` when a field is missing or malformed.
    pub fn parse(status: &str) -> Option<Self> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let caps = |name: &str| u64::from_str_radix(field(name)?, 16).ok();
        let ids = |name: &str| -> Option<[u32; 4]> {
            let v: Vec<u32> = field(name)?
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            v.try_into().ok()
        };
        Some(ThreadCredentials {
            inheritable: caps("CapInh")?,
            permitted: caps("CapPrm")?,
            effective: caps("CapEff")?,
            bounding: caps("CapBnd")?,
            ambient: caps("CapAmb")?,
            no_new_privs: field("NoNewPrivs")? == "1",
            uids: ids("Uid")?,
            gids: ids("Gid")?,
        })
    }
}

/// What every thread must end with.
#[derive(Debug, Clone, Copy)]
struct Plan {
    clear_bounding: bool,
    last_cap: u32,
    identity: Option<Identity>,
}

impl Plan {
    fn satisfied_by(&self, c: &ThreadCredentials) -> bool {
        let caps_gone =
            c.inheritable == 0 && c.permitted == 0 && c.effective == 0 && c.ambient == 0;
        let identity = self
            .identity
            .is_none_or(|id| c.uids == [id.uid; 4] && c.gids == [id.gid; 4]);
        caps_gone && c.no_new_privs && (!self.clear_bounding || c.bounding == 0) && identity
    }
}

/// The privileges left after [`drop_after_start`], for the log line.
#[derive(Debug, Clone, Copy)]
pub struct Dropped {
    /// The calling thread's credentials (every other thread was checked to match).
    pub credentials: ThreadCredentials,
    /// Whether the bounding set was cleared (needs CAP_SETPCAP at start).
    pub bounding_cleared: bool,
    /// How many threads were checked.
    pub threads: usize,
}

impl Dropped {
    /// Logs the one info line that says what is left.
    pub fn log(&self) {
        let c = &self.credentials;
        tracing::info!(
            cap_eff = %format!("{:016x}", c.effective),
            cap_prm = %format!("{:016x}", c.permitted),
            cap_inh = %format!("{:016x}", c.inheritable),
            cap_amb = %format!("{:016x}", c.ambient),
            cap_bnd = %format!("{:016x}", c.bounding),
            bounding_cleared = self.bounding_cleared,
            no_new_privs = c.no_new_privs,
            uid = c.uids[1],
            gid = c.gids[1],
            threads = self.threads,
            "privileges dropped"
        );
    }
}

/// Drops every capability in every thread of this process, switches to `identity` if given,
/// and sets `PR_SET_NO_NEW_PRIVS`. Call it once, after the TUN, sockets, listeners and routes
/// exist. Fails, and the daemon must then exit, when any thread is left privileged.
pub fn drop_after_start(identity: Option<Identity>) -> Result<Dropped> {
    drop_everywhere(identity)
        .context("dropping privileges after start-up (gate64 does not run privileged)")
}

fn drop_everywhere(identity: Option<Identity>) -> Result<Dropped> {
    let plan = Plan {
        clear_bounding: has_effective(CAP_SETPCAP)?,
        last_cap: last_cap(),
        identity,
    };
    let signal = libc::SIGRTMIN() + 4;
    let published = DropPlan {
        clear_bounding: plan.clear_bounding,
        last_cap: plan.last_cap,
        ids: plan.identity.map(|i| (i.uid, i.gid)),
    };
    sys::install_drop_handler(signal, &published)
        .context("installing the privilege-drop signal handler")?;
    let outcome = drop_in_every_thread(&plan, signal);
    // The handler must not run again once the drop is done (nor kill us, as SIG_DFL would).
    let restored = sys::remove_drop_handler(signal);
    let threads = outcome?;
    restored.context("ignoring the privilege-drop signal")?;
    let credentials = read_credentials("self")?;
    Ok(Dropped {
        credentials,
        bounding_cleared: plan.clear_bounding,
        threads,
    })
}

/// Signals every thread not yet privilege-free (once each) until all are, or the deadline.
/// Returns how many threads were checked in the last pass.
fn drop_in_every_thread(plan: &Plan, signal: libc::c_int) -> Result<usize> {
    let me = sys::gettid();
    sys::drop_this_thread().map_err(|f| failure_error(f, me))?;
    let mut signalled: HashSet<i32> = HashSet::from([me]);
    let deadline = Instant::now() + THREADS_DEADLINE;
    loop {
        if let Some(f) = sys::first_failure() {
            bail!(failure_error(f, f.tid));
        }
        let mut stale = Vec::new();
        let tasks = list_tasks()?;
        for &tid in &tasks {
            match read_credentials(&format!("self/task/{tid}")) {
                Ok(c) if plan.satisfied_by(&c) => {}
                Ok(c) => stale.push((tid, c)),
                // The thread ended between the listing and the read.
                Err(_) if !task_exists(tid) => {}
                Err(e) => return Err(e),
            }
        }
        if stale.is_empty() {
            return Ok(tasks.len());
        }
        if Instant::now() >= deadline {
            let (tid, c) = stale[0];
            bail!(
                "{} thread(s) still privileged after {THREADS_DEADLINE:?}, e.g. thread {tid}: \
                 {c:?} (is the signal {signal} blocked in that thread?)",
                stale.len()
            );
        }
        for (tid, _) in stale {
            if signalled.insert(tid) {
                // A thread that has ended gives ESRCH.
                match sys::signal_thread(tid, signal) {
                    Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
                        bail!("signalling thread {tid} to drop its privileges: {e}")
                    }
                    _ => {}
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The error for a step of the drop that failed in thread `tid`.
fn failure_error(f: Failure, tid: i32) -> anyhow::Error {
    anyhow::anyhow!(
        "dropping privileges in thread {tid}: {} failed: {}",
        f.step.what(),
        std::io::Error::from_raw_os_error(f.errno)
    )
}

/// Whether `cap` is in this thread's effective set (capget(2)).
fn has_effective(cap: u32) -> Result<bool> {
    let effective = sys::effective_capabilities().context("reading capabilities (capget)")?;
    Ok(effective & (1 << cap) != 0)
}

/// The highest capability this kernel knows: PR_CAPBSET_READ fails with EINVAL past it.
/// (Not `/proc/sys/kernel/cap_last_cap`: `ProcSubset=pid` hides /proc/sys.)
fn last_cap() -> u32 {
    (1..64)
        .take_while(|&cap| sys::capbset_read(cap).is_ok())
        .last()
        .unwrap_or(0)
}

fn read_credentials(task: &str) -> Result<ThreadCredentials> {
    let path = format!("/proc/{task}/status");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path} to check the dropped privileges"))?;
    ThreadCredentials::parse(&text)
        .with_context(|| format!("{path}: no capability, NoNewPrivs, Uid or Gid lines"))
}

fn list_tasks() -> Result<Vec<i32>> {
    let dir = std::fs::read_dir("/proc/self/task").context("listing /proc/self/task")?;
    let mut tids = Vec::new();
    for entry in dir {
        let entry = entry.context("listing /proc/self/task")?;
        if let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

fn task_exists(tid: i32) -> bool {
    std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The lines of a real `/proc/<pid>/status` (Linux 6.1, a thread of `gate64 serve` after
    /// the drop) that the parser reads, with others around them.
    const STATUS: &str = "Name:\tgate64-ctl\nUmask:\t0077\nState:\tS (sleeping)\n\
        Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\nCapInh:\t0000000000000000\n\
        CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n\
        CapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t0\n";

    #[test]
    fn parses_proc_status() {
        let c = ThreadCredentials::parse(STATUS).expect("complete status");
        assert_eq!(
            c,
            ThreadCredentials {
                no_new_privs: true,
                ..ThreadCredentials::default()
            }
        );
        let privileged = STATUS
            .replace("CapEff:\t0000000000000000", "CapEff:\t000001ffffffffff")
            .replace("NoNewPrivs:\t1", "NoNewPrivs:\t0")
            .replace("Uid:\t0\t0\t0\t0", "Uid:\t0\t1000\t0\t1000");
        let c = ThreadCredentials::parse(&privileged).expect("complete status");
        assert_eq!(c.effective, 0x1ff_ffff_ffff);
        assert!(!c.no_new_privs);
        assert_eq!(c.uids, [0, 1000, 0, 1000]);
        assert!(ThreadCredentials::parse("CapEff:\tzz\n").is_none());
        assert!(ThreadCredentials::parse(&STATUS.replace("NoNewPrivs:\t1\n", "")).is_none());
    }

    #[test]
    fn plan_demands_every_set_empty() {
        let dropped = ThreadCredentials::parse(STATUS).expect("complete status");
        let plan = Plan {
            clear_bounding: true,
            last_cap: 40,
            identity: None,
        };
        assert!(plan.satisfied_by(&dropped));
        for spoil in [
            ThreadCredentials {
                effective: 1 << 12,
                ..dropped
            },
            ThreadCredentials {
                permitted: 1,
                ..dropped
            },
            ThreadCredentials {
                inheritable: 1,
                ..dropped
            },
            ThreadCredentials {
                ambient: 1,
                ..dropped
            },
            ThreadCredentials {
                bounding: 1,
                ..dropped
            },
            ThreadCredentials {
                no_new_privs: false,
                ..dropped
            },
        ] {
            assert!(!plan.satisfied_by(&spoil), "{spoil:?}");
        }
        let kept_bounding = Plan {
            clear_bounding: false,
            ..plan
        };
        assert!(kept_bounding.satisfied_by(&ThreadCredentials {
            bounding: 1,
            ..dropped
        }));
        let as_user = Plan {
            identity: Some(Identity {
                uid: 65534,
                gid: 65534,
            }),
            ..plan
        };
        assert!(!as_user.satisfied_by(&dropped));
        let switched = ThreadCredentials {
            uids: [65534; 4],
            gids: [65534; 4],
            ..dropped
        };
        assert!(as_user.satisfied_by(&switched));
        assert!(!as_user.satisfied_by(&ThreadCredentials {
            gids: [0; 4],
            ..switched
        }));
    }

    /// Set for the child process that [`drops_in_every_thread`] starts: `plain` or `nobody`.
    const CHILD_ENV: &str = "GATE64_PRIVILEGE_CHILD";

    /// The nobody user and nogroup of Debian's base-passwd.
    const NOBODY: Identity = Identity {
        uid: 65534,
        gid: 65534,
    };

    /// Runs [`child_drops_privileges`] in a child process (the drop is for good, and must
    /// not take this test harness's threads with it) and checks its verdict.
    #[test]
    fn drops_in_every_thread() {
        let root = gate64_sys::process::geteuid() == 0;
        let modes: &[&str] = if root {
            &["plain", "nobody"]
        } else {
            &["plain"]
        };
        if !root {
            println!("note: not root, so switching to nobody is not tried");
        }
        for mode in modes {
            let exe = std::env::current_exe().expect("the test binary exists");
            let out = std::process::Command::new(exe)
                .args(["--exact", "privilege::tests::child_drops_privileges"])
                .args(["--include-ignored", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, mode)
                .output()
                .expect("running the test binary");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "{mode}: {text}");
            assert!(text.contains("every thread unprivileged"), "{mode}: {text}");
        }
    }

    /// The child of [`drops_in_every_thread`]: busy, sleeping and waiting threads, then the
    /// drop, then every thread's status checked here again, independently of the module.
    #[test]
    #[ignore = "run in a child process by drops_in_every_thread"]
    fn child_drops_privileges() {
        let Ok(mode) = std::env::var(CHILD_ENV) else {
            return;
        };
        let identity = (mode == "nobody").then_some(NOBODY);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let pair = std::sync::Arc::new((std::sync::Mutex::new(()), std::sync::Condvar::new()));
        let mut threads = Vec::new();
        for kind in 0..6 {
            let (stop, pair) = (stop.clone(), pair.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match kind % 3 {
                        0 => std::hint::spin_loop(),
                        1 => std::thread::sleep(Duration::from_millis(50)),
                        _ => {
                            let guard = pair.0.lock().unwrap_or_else(|e| e.into_inner());
                            let _ = pair.1.wait_timeout(guard, Duration::from_millis(50));
                        }
                    }
                }
            }));
        }
        let dropped = drop_after_start(identity).expect("the drop succeeds");
        assert!(dropped.threads >= 7, "{dropped:?}");
        let tasks = list_tasks().expect("/proc/self/task");
        for tid in tasks {
            let path = format!("/proc/self/task/{tid}/status");
            let text = std::fs::read_to_string(&path).expect("status readable");
            let c = ThreadCredentials::parse(&text).expect("complete status");
            let caps = [c.inheritable, c.permitted, c.effective, c.ambient];
            assert_eq!(caps, [0; 4], "{path}: {text}");
            assert!(c.no_new_privs, "{path}: {text}");
            if dropped.bounding_cleared {
                assert_eq!(c.bounding, 0, "{path}: {text}");
            }
            if let Some(id) = identity {
                assert_eq!((c.uids, c.gids), ([id.uid; 4], [id.gid; 4]), "{path}");
            }
        }
        // Nothing can be regained: raising CAP_NET_ADMIN back fails in this thread.
        let net_admin = 1 << 12;
        let r = sys::set_capabilities(net_admin, net_admin, 0);
        assert!(r.is_err(), "capset raised CAP_NET_ADMIN again");
        stop.store(true, Ordering::SeqCst);
        for t in threads {
            t.join().expect("thread ran to its end");
        }
        println!("every thread unprivileged: {dropped:?}");
    }

    #[test]
    fn identity_from_the_user_database() {
        let nobody = gate64_config::Server {
            user: Some("nobody".into()),
            ..gate64_config::Server::default()
        };
        // Debian's base-passwd: nobody is 65534 in nogroup 65534.
        assert_eq!(lookup("nobody", None).expect("nobody exists"), NOBODY);
        let etc_group = std::fs::read_to_string("/etc/group").expect("/etc/group");
        let daemon_gid: u32 = etc_group
            .lines()
            .find_map(|l| l.strip_prefix("daemon:x:")?.split(':').next()?.parse().ok())
            .expect("a daemon group");
        assert_eq!(
            lookup("nobody", Some("daemon")).expect("daemon exists"),
            Identity {
                uid: 65534,
                gid: daemon_gid
            }
        );
        let e = format!("{:#}", lookup("no-such-user-here", None).unwrap_err());
        assert!(
            e.contains("server.user") && e.contains("no such user"),
            "{e}"
        );
        let e = format!("{:#}", lookup("nobody", Some("no-such-group")).unwrap_err());
        assert!(
            e.contains("server.group") && e.contains("no such group"),
            "{e}"
        );
        let e = format!("{:#}", lookup("root", None).unwrap_err());
        assert!(e.contains("uid 0"), "{e}");
        let e = format!("{:#}", lookup("nobody", Some("root")).unwrap_err());
        assert!(e.contains("gid 0"), "{e}");
        assert_eq!(identity(&gate64_config::Server::default()).ok(), Some(None));
        match (identity(&nobody), gate64_sys::process::geteuid() == 0) {
            (Ok(id), true) => assert_eq!(id, Some(NOBODY)),
            (Err(e), false) => assert!(format!("{e:#}").contains("needs gate64 started as root")),
            (other, root) => panic!("{other:?} with root = {root}"),
        }
    }

    #[test]
    fn kernel_reports_a_plausible_last_capability() {
        // CAP_AUDIT_READ (37) exists since Linux 3.16; 63 is the format's limit.
        let last = last_cap();
        assert!((37..64).contains(&last), "{last}");
    }
}
