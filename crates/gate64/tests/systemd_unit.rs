//! The shipped systemd unit (`config/systemd/gate64.service`, docs/security.md): its exposure
//! score stays at 2.5 or lower, and its system call filter allows every call the daemon makes.
//! Both need `systemd-analyze` (Debian package `systemd`, which `scripts/test` installs);
//! without it they fail, naming the package, unless the run opted out
//! (`scripts/test --unit-only`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The bound the test keeps the score under; README.md and docs/security.md state the
/// unit's score, and the test also checks that the measured score is the one they state.
const MAX_EXPOSURE: f64 = 2.5;

/// The score README.md states, from its "`systemd-analyze security` score X.Y".
fn readme_score() -> f64 {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&readme).expect("reading README.md");
    text.split("`systemd-analyze security` score ")
        .nth(1)
        .and_then(|rest| {
            let end = rest.find(|c: char| !c.is_ascii_digit() && c != '.')?;
            rest[..end].trim_end_matches('.').parse().ok()
        })
        .expect("README.md states the unit's `systemd-analyze security` score")
}

/// Every system call `gate64 serve` and the `ip route` it runs made under `strace -f` in the
/// netns suite (Teredo with Miredo, IP-HTTPS with iperf3, DNS64 with Unbound), plus the
/// drop's own `capset`, `capget`, `prctl` and `tgkill`.
const USED_SYSCALLS: &[&str] = &[
    "accept4",
    "access",
    "arch_prctl",
    "bind",
    "brk",
    "capget",
    "capset",
    "clock_nanosleep",
    "clone3",
    "close",
    "connect",
    "dup2",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "eventfd2",
    "execve",
    "exit",
    "exit_group",
    "fcntl",
    "futex",
    "getdents64",
    "getpid",
    "getrandom",
    "getsockname",
    "gettid",
    "getuid",
    "ioctl",
    "listen",
    "lseek",
    "madvise",
    "mmap",
    "mprotect",
    "mremap",
    "munmap",
    "newfstatat",
    "openat",
    "pipe2",
    "poll",
    "prctl",
    "pread64",
    "prlimit64",
    "read",
    "recvfrom",
    "recvmmsg",
    "recvmsg",
    "rseq",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sched_getaffinity",
    "sched_yield",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "set_robust_list",
    "set_tid_address",
    "setsockopt",
    "shutdown",
    "sigaltstack",
    "socket",
    "socketpair",
    "statx",
    "tgkill",
    "wait4",
    "write",
    "writev",
];

#[test]
fn exposure_score_at_most_2_5() {
    let Some(analyze) = systemd_analyze("exposure_score_at_most_2_5") else {
        return;
    };
    let unit = unit_path();
    let out = Command::new(&analyze)
        .args(["security", "--offline=true"])
        .arg(&unit)
        .output()
        .expect("running systemd-analyze security");
    let text = String::from_utf8_lossy(&out.stdout);
    let score = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for gate64.service:").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or_else(|| {
            panic!(
                "no overall exposure level in the output of systemd-analyze security:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    println!("systemd-analyze security --offline=true: {score}");
    let stated = readme_score();
    assert!(
        (score - stated).abs() < 0.05,
        "the unit scores {score}; README.md states {stated}"
    );
    assert!(
        score <= MAX_EXPOSURE,
        "{} scores {score}, above {MAX_EXPOSURE}:\n{text}",
        unit.display()
    );
}

#[test]
fn syscall_filter_allows_what_the_daemon_uses() {
    let Some(analyze) = systemd_analyze("syscall_filter_allows_what_the_daemon_uses") else {
        return;
    };
    let unit = std::fs::read_to_string(unit_path()).expect("the unit file is readable");
    let allowed = effective_filter(&analyze, &unit);
    let denied: Vec<&str> = USED_SYSCALLS
        .iter()
        .copied()
        .filter(|s| !allowed.contains(*s))
        .collect();
    assert!(
        denied.is_empty(),
        "the unit's SystemCallFilter= denies {denied:?}"
    );
    // The filter does filter: the groups the unit removes stay removed.
    for gone in [
        "setuid",
        "reboot",
        "init_module",
        "sched_setaffinity",
        "mount",
    ] {
        assert!(!allowed.contains(gone), "{gone} is allowed");
    }
}

/// systemd.exec(5): the first `SystemCallFilter=` line without `~` makes an allow list;
/// later `~` lines remove from it and later plain lines add to it.
fn effective_filter(analyze: &Path, unit: &str) -> BTreeSet<String> {
    let mut allowed = BTreeSet::new();
    let mut any = false;
    for value in unit
        .lines()
        .filter_map(|l| l.trim().strip_prefix("SystemCallFilter="))
    {
        let (deny, list) = match value.strip_prefix('~') {
            Some(rest) => (true, rest),
            None => (false, value),
        };
        assert!(
            any || !deny,
            "the unit's filter must start as an allow list"
        );
        any = true;
        for item in list.split_whitespace() {
            let calls = expand(analyze, item);
            if deny {
                allowed.retain(|c| !calls.contains(c));
            } else {
                allowed.extend(calls);
            }
        }
    }
    assert!(any, "the unit has no SystemCallFilter=");
    allowed
}

/// A system call, or the calls of a `@group` (recursively, as `systemd-analyze` lists them).
fn expand(analyze: &Path, item: &str) -> BTreeSet<String> {
    if !item.starts_with('@') {
        return BTreeSet::from([item.to_owned()]);
    }
    let out = Command::new(analyze)
        .args(["syscall-filter", item])
        .output()
        .expect("running systemd-analyze syscall-filter");
    assert!(
        out.status.success(),
        "systemd-analyze syscall-filter {item}"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .flat_map(|l| expand(analyze, l))
        .collect()
}

fn unit_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/systemd/gate64.service")
}

/// `systemd-analyze` from PATH, or None after saying why `test` is skipped.
fn systemd_analyze(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("systemd-analyze"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        gate64_testkit::skip_or_fail(test, "systemd-analyze not found (Debian package systemd)");
    }
    found
}
