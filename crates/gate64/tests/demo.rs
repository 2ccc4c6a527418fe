//! `gate64 demo` end to end, without root.
//!
//! - The loopback lab (`--loopback`): 20 emulated clients (the default mix: 14 Teredo,
//!   6 IP-HTTPS) qualify or connect, ping the corporate host and exchange traffic through the
//!   daemon on loopback.
//! - The default lab: the capacity workload in an unprivileged user namespace, run as an
//!   unprivileged user (as root, the test switches to `nobody` with `setpriv`).

use std::process::Command;

/// Runs the demo; its stdout and stderr once it succeeded.
fn run_ok(cmd: &mut Command) -> (String, String) {
    let out = cmd.output().expect("running gate64 demo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "gate64 demo failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

#[test]
fn demo_loopback_small_population_succeeds_and_prints_table() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gate64"));
    cmd.args(["demo", "--loopback", "--clients", "20", "--seconds", "2"]);
    let (stdout, _) = run_ok(&mut cmd);
    for column in [
        "clients",
        "Teredo",
        "IP-HTTPS",
        "corpnet Mbit/s",
        "internet Mbit/s",
        "CPU",
        "memory",
    ] {
        assert!(
            stdout.contains(column),
            "no `{column}` column in:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("reference: WS2012 DirectAccess"),
        "{stdout}"
    );
    assert!(
        stdout.contains("20/20"),
        "not every client qualified:\n{stdout}"
    );
    assert!(
        stdout.contains("14/14 qualified") && stdout.contains("6/6 connected"),
        "not every client of each transport came up:\n{stdout}"
    );
    assert!(stdout.contains("demo ok"), "{stdout}");
}

/// The unprivileged user to run the namespace demo as when the test runs as root.
const NOBODY: &str = "nobody";

/// The demo command as an unprivileged user: this one, or `nobody` when running as root (if
/// `nobody` can execute the binary at all; otherwise `None`, with the reason printed).
fn unprivileged(args: &[&str]) -> Option<Command> {
    let bin = env!("CARGO_BIN_EXE_gate64");
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        let mut cmd = Command::new(bin);
        cmd.args(args);
        return Some(cmd);
    }
    let as_nobody = |extra: &[&str]| {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid",
            NOBODY,
            "--regid",
            "nogroup",
            "--clear-groups",
            "--",
        ])
        .arg(bin)
        .args(extra)
        // nobody's temporary files go to /tmp, not to a root-only TMPDIR.
        .env_remove("TMPDIR")
        .current_dir("/");
        cmd
    };
    match as_nobody(&["--version"]).output() {
        Ok(o) if o.status.success() => Some(as_nobody(args)),
        Ok(o) => {
            eprintln!(
                "skipping the unprivileged demo: {NOBODY} cannot run {bin}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            None
        }
        Err(e) => {
            eprintln!("skipping the unprivileged demo: setpriv: {e}");
            None
        }
    }
}

/// The default demo: every client connects over its transport, builds both IPsec tunnels and
/// passes traffic through the real daemon, TUN and kernel routing, and the capacity search
/// prints the reference's columns. Where the kernel refuses unprivileged user namespaces the
/// demo falls back to the loopback lab; CI (which has them) must not.
#[test]
fn demo_in_user_namespace_measures_capacity_without_root() {
    let Some(mut cmd) = unprivileged(&["demo", "--clients", "60", "--seconds", "2"]) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the unprivileged demo"
        );
        return;
    };
    let (stdout, stderr) = run_ok(&mut cmd);
    if stderr.contains("running the loopback demo instead") {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI has user namespaces, yet the demo fell back:\n{stderr}"
        );
        eprintln!("the kernel refused an unprivileged user namespace; the loopback demo ran");
        return;
    }
    for column in [
        "hardware",
        "Teredo",
        "IP-HTTPS",
        "corpnet Mbit/s",
        "internet Mbit/s",
        "CPU",
        "memory",
        "QMSA",
        "MMSA",
        "WS2012 DirectAccess, 8 cores",
    ] {
        assert!(stdout.contains(column), "no `{column}` in:\n{stdout}");
    }
    assert!(
        stdout.contains("demo ok: 60/60 clients (42 Teredo, 18 IP-HTTPS)"),
        "not every client passed traffic:\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stderr.contains("step "), "no load step:\n{stderr}");
}
