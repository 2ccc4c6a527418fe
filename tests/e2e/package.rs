//! The Debian package (`scripts/package`, README.md "Deploying"), installed on this machine:
//! lintian finds nothing to warn about, it installs without starting or enabling the
//! service, its configuration passes `check-config` as the secure default, every subcommand
//! `gate64 --help` lists has a manual page that `man` renders, the unit passes
//! `systemd-analyze verify`, the bash completions complete, logrotate rotates the logs and
//! asks the service to reload, and `dpkg --purge` leaves nothing of the package behind.
//!
//! Before it installs anything it checks that the package was made from the tree under test
//! (version, commit and dirtiness, and the binary the other tests run), and fails on a stale
//! one.
//!
//! It needs root and installs to the real file system, so it is `#[ignore]`d (scripts/test
//! runs it as root, after its `package` step has built target/debian/gate64_*.deb) and has
//! the machine to itself (.config/nextest.toml). It refuses to run where gate64 is already
//! installed, or /etc/gate64 or /var/log/gate64 exist, rather than replace or purge them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail, ensure};

const UNIT: &str = "/lib/systemd/system/gate64.service";
const CONFIG: &str = "/etc/gate64/gate64.toml";
const BASH_COMPLETION: &str = "/usr/share/bash-completion/completions/gate64";
const LOG_DIR: &str = "/var/log/gate64";
/// Where systemd keeps `LogsDirectory=` of a `DynamicUser=` service, behind the LOG_DIR link.
const PRIVATE_LOGS: &str = "/var/log/private";
/// A uid from systemd's dynamic range (61184-65519), standing for the unit's dynamic user.
const DYNAMIC_UID: u32 = 61_999;

#[test]
#[ignore = "needs root: installs a package"]
fn root_package_installs_checks_and_purges() {
    let Some(deb) = ready_or_skip("root_package_installs_checks_and_purges") else {
        return;
    };
    lintian_clean(&deb).expect("lintian");
    let contents = deb_paths(&deb).expect("listing the package's contents");
    let existed: BTreeSet<PathBuf> = contents.iter().filter(|p| p.exists()).cloned().collect();
    let guard = Purge {
        private_logs_existed: Path::new(PRIVATE_LOGS).exists(),
    };
    install_and_check(&deb).expect("the installed package");
    drop(guard);
    purged(&contents, &existed).expect("nothing of the package after purge");
}

/// Purges the package when dropped, so a failing check still leaves the machine clean;
/// removes /var/log/private too when the test made it (and it is empty).
struct Purge {
    private_logs_existed: bool,
}

impl Drop for Purge {
    fn drop(&mut self) {
        if let Err(e) = run("dpkg", &["--purge", "gate64"]) {
            eprintln!("purging gate64: {e:#}");
        }
        if !self.private_logs_existed {
            let _ = std::fs::remove_dir(PRIVATE_LOGS);
        }
    }
}

/// `tool` on PATH; its absence fails `what`, naming the tool, unless the run opted out
/// (`scripts/test --unit-only`); scripts/test installs it.
fn have(tool: &str, what: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        gate64_testkit::skip_or_fail(what, &format!("{tool} not found"));
    }
    found
}

/// The .deb to test, or None (with the reason printed) when the test cannot run here.
fn ready_or_skip(test: &str) -> Option<PathBuf> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if !root {
        gate64_testkit::skip_or_fail(test, "needs root (it installs a package)");
        return None;
    }
    if !have("dpkg", test) {
        return None;
    }
    let state = dpkg_state();
    let taken = [
        "/usr/bin/gate64",
        "/etc/gate64",
        LOG_DIR,
        "/var/log/private/gate64",
    ]
    .into_iter()
    .find(|p| Path::new(p).symlink_metadata().is_ok());
    if state != "not-installed" || taken.is_some() {
        panic!(
            "{test}: gate64 is already on this machine (dpkg: {state:?}, {taken:?}): the test \
             would replace and purge it; remove it first"
        );
    }
    let deb = find_deb().expect("the package to test");
    built_from_this_tree(&deb).expect("a package of the tree under test");
    Some(deb)
}

/// The workspace under test.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `git <args>` in the workspace, its output trimmed.
fn git(args: &[&str]) -> Result<String> {
    let root = workspace();
    let mut argv = vec!["-C", root.to_str().context("workspace path")?];
    argv.extend_from_slice(args);
    Ok(stdout(&run("git", &argv)?).trim().to_owned())
}

/// The package was made from the tree under test, before anything is installed: its version
/// is the workspace's, the commit its changelog names (scripts/package writes `git describe
/// --always --dirty`) is HEAD, dirty exactly when the tree is, and its binary is the build
/// the other tests run (the same GNU build ID: strip keeps that note). A package left from
/// another commit, from other uncommitted changes or from an older build fails here.
fn built_from_this_tree(deb: &Path) -> Result<()> {
    let deb_str = deb.to_str().context("package path")?;
    let version = stdout(&run("dpkg-deb", &["--field", deb_str, "Version"])?);
    ensure!(
        version.trim() == env!("CARGO_PKG_VERSION"),
        "{}: version {:?}, the workspace is {}",
        deb.display(),
        version.trim(),
        env!("CARGO_PKG_VERSION")
    );
    let changelog = stdout(&run(
        "sh",
        &[
            "-c",
            "dpkg-deb --fsys-tarfile \"$0\" | tar -xOf - ./usr/share/doc/gate64/changelog.gz | \
             gzip -dc",
            deb_str,
        ],
    )?);
    let built = changelog
        .split("Built by scripts/package from commit ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|c| c.trim_end_matches('.'))
        .with_context(|| format!("no commit in the package's changelog: {changelog}"))?;
    let (built_commit, built_dirty) = match built.strip_suffix("-dirty") {
        Some(c) => (c, true),
        None => (built, false),
    };
    // `git describe` may prefix a tag: the commit is after its last "-g".
    let built_commit = built_commit
        .rsplit_once("-g")
        .map_or(built_commit, |(_, hash)| hash);
    let head = git(&["rev-parse", "HEAD"])?;
    let resolved = git(&[
        "rev-parse",
        "--verify",
        "--quiet",
        &format!("{built_commit}^{{commit}}"),
    ])
    .unwrap_or_default();
    let tree_dirty = git(&["describe", "--always", "--dirty"])?.ends_with("-dirty");
    ensure!(
        resolved == head && built_dirty == tree_dirty,
        "{} is stale: built from commit {built}, the tree under test is {head}{}; run \
         scripts/package again",
        deb.display(),
        if tree_dirty {
            " with uncommitted changes"
        } else {
            ""
        }
    );
    let scratch = std::env::temp_dir().join(format!("gate64-package-bin-{}", std::process::id()));
    let extracted = deb_file(deb, "./usr/bin/gate64", &scratch).and_then(|()| build_id(&scratch));
    let _ = std::fs::remove_file(&scratch);
    let packaged = extracted?;
    let under_test = gate64_testkit::gate64_binary()?;
    let tested = build_id(&under_test)?;
    ensure!(
        packaged == tested,
        "{} is stale: its binary (build ID {packaged}) is not {} (build ID {tested}); run \
         scripts/package --binary {} again",
        deb.display(),
        under_test.display(),
        under_test.display()
    );
    Ok(())
}

/// `path` (as `dpkg-deb --contents` names it) of `deb`, written to `to`.
fn deb_file(deb: &Path, path: &str, to: &Path) -> Result<()> {
    let deb = deb.to_str().context("package path")?;
    let to = to.to_str().context("path")?;
    run(
        "sh",
        &[
            "-c",
            "dpkg-deb --fsys-tarfile \"$0\" | tar -xOf - \"$1\" > \"$2\"",
            deb,
            path,
            to,
        ],
    )?;
    Ok(())
}

/// The GNU build ID of the ELF file `path`, as `readelf -n` prints it.
fn build_id(path: &Path) -> Result<String> {
    let notes = stdout(&run("readelf", &["-n", path.to_str().context("path")?])?);
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .map(str::to_owned)
        .with_context(|| format!("no GNU build ID in {}: {notes}", path.display()))
}

/// The one target/debian/gate64_<version>_*.deb of this workspace's version.
fn find_deb() -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debian");
    let prefix = format!("gate64_{}_", env!("CARGO_PKG_VERSION"));
    let debs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
                })
                .collect()
        })
        .unwrap_or_default();
    match debs.as_slice() {
        [deb] => Ok(deb.clone()),
        [] => bail!(
            "no {}/{prefix}*.deb: build it with scripts/package (scripts/test's package step \
             does) before this test",
            dir.display()
        ),
        _ => bail!("more than one package in {}: {debs:?}", dir.display()),
    }
}

/// The package's state as dpkg knows it ("installed", "config-files", ...); "not-installed"
/// when dpkg never heard of it or it was purged.
fn dpkg_state() -> String {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "gate64"])
        .output();
    match out {
        Ok(o) if o.status.success() => stdout(&o)
            .split_whitespace()
            .last()
            .unwrap_or("not-installed")
            .to_owned(),
        _ => "not-installed".to_owned(),
    }
}

fn run(program: &str, args: &[&str]) -> Result<Output> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    ensure!(
        out.status.success(),
        "{program} {args:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Debian's package checker finds no error and no warning (a binary left unstripped, a
/// missing changelog or copyright, maintainer scripts calling systemctl where
/// deb-systemd-invoke belongs, ...).
fn lintian_clean(deb: &Path) -> Result<()> {
    if !have("lintian", "lintian") {
        return Ok(());
    }
    let deb = deb.to_str().context("package path")?;
    run(
        "lintian",
        &[
            "--fail-on",
            "error,warning",
            "--tag-display-limit",
            "0",
            deb,
        ],
    )?;
    Ok(())
}

/// Every path the package holds, from `dpkg-deb --contents` (before it is installed).
fn deb_paths(deb: &Path) -> Result<Vec<PathBuf>> {
    let deb = deb.to_str().context("package path")?;
    let out = run("dpkg-deb", &["--contents", deb])?;
    Ok(stdout(&out)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| PathBuf::from(p.trim_start_matches('.')))
        .filter(|p| p != Path::new("/") && !p.as_os_str().is_empty())
        .collect())
}

fn install_and_check(deb: &Path) -> Result<()> {
    let out = run("dpkg", &["-i", deb.to_str().context("package path")?])?;
    let said = stdout(&out);
    ensure!(
        said.contains("service disabled and stopped") && said.contains("systemctl enable"),
        "postinst says how to enable the service: {said}"
    );
    let listed = stdout(&run("dpkg", &["-L", "gate64"])?);
    for path in [
        "/usr/bin/gate64",
        UNIT,
        CONFIG,
        "/etc/logrotate.d/gate64",
        BASH_COMPLETION,
    ] {
        ensure!(
            listed.lines().any(|l| l == path),
            "{path} in dpkg -L: {listed}"
        );
    }
    let conffiles = stdout(&run("dpkg-query", &["-W", "-f=${Conffiles}", "gate64"])?);
    for path in [CONFIG, "/etc/logrotate.d/gate64"] {
        ensure!(conffiles.contains(path), "{path} a conffile: {conffiles}");
    }
    not_enabled_or_started()?;
    secure_config()?;
    manual_pages(&listed)?;
    unit_verifies()?;
    bash_completes()?;
    logrotate_rotates()?;
    reinstall_keeps_edits(deb)
}

/// Installing the package again (as an upgrade does) keeps an administrator's edit of the
/// configuration, leaves the service as it was, and does not repeat the first-install
/// message.
fn reinstall_keeps_edits(deb: &Path) -> Result<()> {
    let edit = "\n# edited by the administrator\n";
    let mut text = std::fs::read_to_string(CONFIG)?;
    text.push_str(edit);
    std::fs::write(CONFIG, &text)?;
    let out = run("dpkg", &["-i", deb.to_str().context("package path")?])?;
    let said = stdout(&out);
    ensure!(
        !said.contains("service disabled"),
        "upgrade message: {said}"
    );
    ensure!(
        std::fs::read_to_string(CONFIG)?.ends_with(edit),
        "{CONFIG} keeps the edit across a reinstall"
    );
    not_enabled_or_started()
}

/// Nothing enables or starts the service on install.
fn not_enabled_or_started() -> Result<()> {
    let wants = Path::new("/etc/systemd/system/multi-user.target.wants/gate64.service");
    ensure!(!wants.exists(), "the package enabled the service");
    for entry in std::fs::read_dir("/proc")?.flatten() {
        if std::fs::read_link(entry.path().join("exe"))
            .is_ok_and(|exe| exe == Path::new("/usr/bin/gate64"))
        {
            bail!("a /usr/bin/gate64 process runs: {}", entry.path().display());
        }
    }
    Ok(())
}

/// The shipped configuration is the repository's, passes `check-config`, and lets no client
/// reach the corporate network until IPsec is configured.
fn secure_config() -> Result<()> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/gate64.toml");
    ensure!(
        std::fs::read(CONFIG)? == std::fs::read(&repo)?,
        "{CONFIG} is config/gate64.toml"
    );
    let out = stdout(&run("/usr/bin/gate64", &["check-config", CONFIG])?);
    ensure!(
        out.contains("no client can reach the corporate network"),
        "check-config warns that the shipped file needs IPsec first: {out}"
    );
    Ok(())
}

/// A page for gate64 and for each subcommand `gate64 --help` lists, rendered by `man`.
fn manual_pages(listed: &str) -> Result<()> {
    let help = stdout(&run("/usr/bin/gate64", &["--help"])?);
    let subcommands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    ensure!(
        subcommands.contains(&"serve"),
        "subcommands in --help: {help}"
    );
    if !have("man", "the manual pages") {
        return Ok(());
    }
    let top = stdout(&run("man", &["-P", "cat", "gate64"])?);
    ensure!(top.contains("SUBCOMMANDS"), "man gate64: {top}");
    for sub in subcommands {
        let page = format!("/usr/share/man/man8/gate64-{sub}.8.gz");
        ensure!(listed.lines().any(|l| l == page), "{page} in the package");
        let text = stdout(&run("man", &["-P", "cat", &format!("gate64-{sub}")])?);
        // Justified text: words, whatever the spaces between them.
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        ensure!(
            words.contains(&format!("SYNOPSIS gate64 {sub}"))
                && top.contains(&format!("gate64-{sub}(8)")),
            "man gate64-{sub}: {text}"
        );
    }
    Ok(())
}

/// `systemd-analyze verify` accepts the installed unit without a word about it (it checks,
/// among others, that the Exec lines' binary exists). It works without systemd running. It
/// also loads the machine's other units and may warn about them (Debian's freeradius.service
/// uses a deprecated directive): lines that name another unit file are not gate64's.
fn unit_verifies() -> Result<()> {
    let unit = std::fs::read_to_string(UNIT)?;
    ensure!(
        unit.contains("\nExecStart=/usr/bin/gate64 serve --config /etc/gate64/gate64.toml\n")
            && !unit.contains("/usr/local/bin/gate64 "),
        "the unit runs the package's binary: {unit}"
    );
    if !have("systemd-analyze", "systemd-analyze verify") {
        return Ok(());
    }
    let out = run("systemd-analyze", &["verify", UNIT])?;
    let said = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    let about_gate64: Vec<&str> = said
        .lines()
        .filter(|l| !l.trim().is_empty() && !about_another_unit(l))
        .collect();
    ensure!(
        out.status.success() && about_gate64.is_empty(),
        "systemd-analyze verify {UNIT}: {said}"
    );
    Ok(())
}

/// A `systemd-analyze` line that starts with the path of a unit file other than gate64's.
fn about_another_unit(line: &str) -> bool {
    let Some(path) = line.split(':').next().filter(|p| p.starts_with('/')) else {
        return false;
    };
    let unit = path.rsplit('/').next().unwrap_or(path);
    (unit.ends_with(".service") || unit.ends_with(".socket") || unit.ends_with(".target"))
        && !unit.starts_with("gate64")
}

/// The bash completions parse, and complete a subcommand and a flag.
fn bash_completes() -> Result<()> {
    run("bash", &["-n", BASH_COMPLETION])?;
    let script = format!(
        "source {BASH_COMPLETION}
         f=$(complete -p gate64 | sed -n 's/.*-F \\([^ ]*\\) .*/\\1/p')
         COMP_WORDS=(gate64 check-c); COMP_CWORD=1; \"$f\" gate64 check-c gate64
         echo \"1:${{COMPREPLY[*]}}\"
         COMP_WORDS=(gate64 serve --con); COMP_CWORD=2; \"$f\" gate64 --con serve
         echo \"2:${{COMPREPLY[*]}}\""
    );
    let out = stdout(&run("bash", &["-c", &script])?);
    ensure!(
        out.lines().any(|l| l == "1:check-config") && out.lines().any(|l| l == "2:--config"),
        "bash completions: {out}"
    );
    Ok(())
}

/// logrotate, with Debian's global `create` in force, moves a log away in the directory
/// systemd makes for the unit, leaves making the new file to gate64 (`nocreate`), and runs
/// `systemctl reload gate64.service` (SIGHUP, which reopens the log) once. A `systemctl`
/// first on PATH records the call: this test does not start the service.
fn logrotate_rotates() -> Result<()> {
    if !have("logrotate", "the logrotate check") {
        return Ok(());
    }
    let scratch = std::env::temp_dir().join(format!("gate64-package-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let record = scratch.join("systemctl.args");
    let fake = scratch.join("systemctl");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", record.display()),
    )?;
    run("chmod", &["0755", fake.to_str().context("path")?])?;
    let conf = scratch.join("logrotate.conf");
    std::fs::write(&conf, "create\ninclude /etc/logrotate.d/gate64\n")?;
    dynamic_user_logs_directory()?;
    let (log, old) = (
        Path::new(LOG_DIR).join("nat64-bindings.jsonl"),
        Path::new(LOG_DIR).join("nat64-bindings.jsonl.1"),
    );
    std::fs::write(&log, "{\"event\":\"test\"}\n")?;
    std::os::unix::fs::chown(&log, Some(DYNAMIC_UID), Some(DYNAMIC_UID))?;
    let path = format!(
        "{}:{}",
        scratch.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("logrotate")
        .args(["-f", "-s"])
        .arg(scratch.join("state"))
        .arg(&conf)
        .env("PATH", path)
        .output()?;
    let calls = std::fs::read_to_string(&record).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&scratch);
    ensure!(out.status.success(), "logrotate: {out:?}");
    ensure!(
        old.is_file() && !log.exists(),
        "rotated, no new file: {out:?}"
    );
    ensure!(calls == "reload gate64.service\n", "postrotate: {calls:?}");
    Ok(())
}

/// What systemd makes for `LogsDirectory=gate64` under `DynamicUser=yes` when the service
/// starts: /var/log/private/gate64 (mode 0755) owned by the dynamic user, inside the root-only
/// /var/log/private, and the link /var/log/gate64 to it.
fn dynamic_user_logs_directory() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let private = Path::new(PRIVATE_LOGS);
    if !private.exists() {
        std::fs::create_dir(private)?;
        std::fs::set_permissions(private, std::fs::Permissions::from_mode(0o700))?;
    }
    let dir = private.join("gate64");
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    std::os::unix::fs::chown(&dir, Some(DYNAMIC_UID), Some(DYNAMIC_UID))?;
    std::os::unix::fs::symlink("private/gate64", LOG_DIR)?;
    Ok(())
}

/// After purge: dpkg knows no gate64, no file of the package is left, nor any directory it
/// brought that was not there before, nor /etc/gate64, /var/log/gate64 and
/// /var/log/private/gate64 (which hold files the package did not ship).
fn purged(contents: &[PathBuf], existed: &BTreeSet<PathBuf>) -> Result<()> {
    let state = dpkg_state();
    ensure!(state == "not-installed", "dpkg after purge: {state:?}");
    let left: Vec<&PathBuf> = contents
        .iter()
        .filter(|p| p.symlink_metadata().is_ok() && !existed.contains(*p))
        .collect();
    ensure!(left.is_empty(), "left behind: {left:?}");
    for dir in ["/etc/gate64", LOG_DIR, "/var/log/private/gate64"] {
        ensure!(
            Path::new(dir).symlink_metadata().is_err(),
            "{dir} left behind"
        );
    }
    Ok(())
}
