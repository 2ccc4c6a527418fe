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

/// The unprivileged user and group (`nobody`/`nogroup` on Debian) the namespace demo runs as
/// when the test runs as root.
const NOBODY: &str = "65534";

/// A copy of the binary that any user may run (the checkout may sit in a directory only root
/// can enter, such as /root), removed on drop.
struct WorldCopy(std::path::PathBuf);

impl WorldCopy {
    fn new() -> std::io::Result<WorldCopy> {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::path::Path::new("/tmp").join(format!("gate64-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        let bin = dir.join("gate64");
        std::fs::copy(env!("CARGO_BIN_EXE_gate64"), &bin)?;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))?;
        Ok(WorldCopy(dir))
    }

    fn bin(&self) -> std::path::PathBuf {
        self.0.join("gate64")
    }
}

impl Drop for WorldCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The demo command as an unprivileged user: this one, or `nobody` (through `setpriv`, on a
/// world-runnable copy of the binary) when running as root; `None`, with the reason printed,
/// when that cannot be arranged.
fn unprivileged(args: &[&str]) -> Option<(Command, Option<WorldCopy>)> {
    if gate64_sys::process::geteuid() != 0 {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gate64"));
        cmd.args(args);
        return Some((cmd, None));
    }
    let copy = match WorldCopy::new() {
        Ok(c) => c,
        Err(e) => {
            gate64_testkit::skip_or_fail(
                "the unprivileged demo",
                &format!("copying the binary to /tmp for `nobody`: {e}"),
            );
            return None;
        }
    };
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--"])
        .arg(copy.bin())
        .args(args)
        // nobody's temporary files go to /tmp, not to a root-only TMPDIR.
        .env_remove("TMPDIR")
        .current_dir("/");
    Some((cmd, Some(copy)))
}

/// The default demo: every client connects over its transport, builds both IPsec tunnels and
/// passes traffic through the real daemon, TUN and kernel routing, and the capacity search
/// prints the reference's columns. Where the kernel refuses unprivileged user namespaces the
/// demo falls back to the loopback lab; a run that did not opt out (`--unit-only`) must not.
#[test]
fn demo_in_user_namespace_measures_capacity_without_root() {
    let Some((mut cmd, _copy)) = unprivileged(&["demo", "--clients", "60", "--seconds", "2"])
    else {
        return;
    };
    let (stdout, stderr) = run_ok(&mut cmd);
    if stderr.contains("running the loopback demo instead") {
        gate64_testkit::skip_or_fail(
            "demo_in_user_namespace_measures_capacity_without_root",
            &format!("the kernel refused an unprivileged user namespace:\n{stderr}"),
        );
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

/// The demo claims traffic "by name through DNS64 and NAT64": with DNS64 pointed at an
/// upstream nobody serves it fails, and its error names DNS64.
#[test]
fn demo_fails_naming_dns64_when_dns64_is_broken() {
    // 10.20.0.99 is on the lab's corporate link, where no host answers.
    let args = [
        "demo",
        "--clients",
        "20",
        "--seconds",
        "2",
        "--dns64-upstream",
        "10.20.0.99",
    ];
    let Some((mut cmd, _copy)) = unprivileged(&args) else {
        return;
    };
    let out = cmd.output().expect("running gate64 demo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("running the loopback demo instead") {
        gate64_testkit::skip_or_fail(
            "demo_fails_naming_dns64_when_dns64_is_broken",
            &format!("the kernel refused an unprivileged user namespace:\n{stderr}"),
        );
        return;
    }
    assert!(
        !out.status.success(),
        "the demo passed with DNS64 broken:\n{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("gate64: error") && l.contains("DNS64")),
        "the demo's error does not name DNS64:\n{stderr}"
    );
}
