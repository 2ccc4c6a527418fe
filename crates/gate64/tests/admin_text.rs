//! What an admin reads: `check-config`'s errors and warnings as docs/config.md shows them
//! (each example there is this binary's real output for a file below), the files it reads as
//! `serve` would, and `gate64 certs --help` naming every file `gate64 certs` writes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where docs/config.md's examples say the configuration file is.
const DOC_FILE: &str = "/etc/gate64/gate64.toml";

fn gate64(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gate64"))
        .args(args)
        .output()
        .expect("running gate64")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gate64-admin-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `gate64 check-config` on `body` written at `dir/gate64.toml`: (exit ok, stdout, stderr),
/// with that path spelt as the docs spell it.
fn check_config(dir: &Path, body: &str) -> (bool, String, String) {
    let file = dir.join("gate64.toml");
    std::fs::write(&file, body).expect("writing the configuration");
    let out = gate64(&["check-config", file.to_str().expect("UTF-8 path")]);
    let path = file.display().to_string();
    (
        out.status.success(),
        text(&out.stdout).replace(&path, DOC_FILE),
        text(&out.stderr).replace(&path, DOC_FILE),
    )
}

const TEREDO: &str = "[teredo]\nserver_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\n";
const CORPNET: &str =
    "[corpnet]\nipv6_prefixes = [\"2001:db8:100::/48\"]\naddress6 = \"2001:db8:100::1\"\n";

/// The files behind docs/config.md's "Errors and warnings" examples, one per line there.
fn documented_cases() -> Vec<String> {
    let valid = format!("{TEREDO}\n{CORPNET}");
    vec![
        format!("[teredo]\nserver_addresses = [\"10.0.0.1\", \"192.0.2.2\"]\n\n{CORPNET}"),
        format!("{TEREDO}bogus = 1\n\n{CORPNET}"),
        format!("{TEREDO}\n[corpnet]\nipv6_prefixes = [\"2001:db8:100::/48\"]\n"),
        format!("{TEREDO}port = \"x\"\n\n{CORPNET}"),
        format!("[teredo]\nenabled = yes\n\n{CORPNET}"),
        format!("{valid}lab_allow_without_ipsec = true\n"),
        format!(
            "{valid}\n[ipsec]\ncertificate = \"/etc/gate64/ipsec.pem\"\n\
             private_key = \"/etc/gate64/ipsec.key\"\nca = \"/etc/gate64/clients-ca.pem\"\n\
             pool6 = \"2001:db8:100:5::/120\"\n"
        ),
        format!(
            "{valid}\n[iphttps]\nenabled = true\ncertificate = \"/etc/gate64/iphttps.crt\"\n\
             private_key = \"/etc/gate64/iphttps.key\"\nprefix = \"2001:db8:1::/48\"\n"
        ),
        format!(
            "{valid}\n[iphttps]\nlisten = \"0.0.0.0:443\"\ncertificate = \"/etc/gate64/iphttps.crt\"\n"
        ),
    ]
}

/// The lines of docs/config.md's "Errors and warnings" section that show output: those of
/// its `text` blocks that start with `gate64: error:` or `warning:`.
fn documented_lines() -> BTreeSet<String> {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/config.md");
    let doc = std::fs::read_to_string(doc).expect("reading docs/config.md");
    let section = doc
        .split("\n## Errors and warnings\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/config.md has an \"Errors and warnings\" section");
    let mut lines = BTreeSet::new();
    for block in section.split("```text\n").skip(1) {
        let block = block.split("```").next().unwrap_or_default();
        for line in block.lines() {
            if line.starts_with("gate64: error: ") || line.starts_with("warning: ") {
                lines.insert(line.to_owned());
            }
        }
    }
    lines
}

/// Every error and warning docs/config.md shows is what `check-config` prints for one of the
/// files above, word for word, and each of those files prints one of them.
#[test]
fn the_documented_errors_are_check_configs_real_output() {
    let dir = temp_dir("doc-errors");
    let documented = documented_lines();
    assert!(
        documented.len() >= 8,
        "too few examples found: {documented:?}"
    );
    let mut produced = BTreeSet::new();
    for body in documented_cases() {
        let (_, stdout, stderr) = check_config(&dir, &body);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("gate64: error: "))
            .chain(
                stdout
                    .lines()
                    .filter(|l| l.starts_with("warning: iphttps.enabled")),
            )
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "for\n{body}\nstdout: {stdout}\nstderr: {stderr}"
        );
        assert!(
            documented.contains(lines[0]),
            "docs/config.md does not show what check-config prints for\n{body}\n{}",
            lines[0]
        );
        produced.insert(lines[0].to_owned());
    }
    let stale: Vec<_> = documented.difference(&produced).collect();
    assert!(
        stale.is_empty(),
        "documented but not produced by any case: {stale:?}"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// A file error names the key and the file once, and the OS's reason once.
#[test]
fn a_missing_file_is_named_once_with_its_key() {
    let dir = temp_dir("missing");
    let (ok, _, stderr) = check_config(
        &dir,
        &format!(
            "{TEREDO}\n{CORPNET}\n[ipsec]\ncertificate = \"/nonexistent/x.pem\"\n\
             private_key = \"/nonexistent/x.key\"\nca = \"/nonexistent/ca.pem\"\n\
             pool6 = \"2001:db8:9::/64\"\n"
        ),
    );
    assert!(!ok);
    assert_eq!(
        stderr,
        "gate64: error: ipsec.certificate: cannot read /nonexistent/x.pem: \
         No such file or directory (os error 2)\n"
    );
    let absent = dir.join("absent.toml");
    let out = gate64(&["check-config", absent.to_str().expect("UTF-8")]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr,
        format!(
            "gate64: error: cannot read the configuration file {}: \
             No such file or directory (os error 2)\n",
            absent.display()
        )
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// `check-config` loads the IP-HTTPS certificate as the listener does: a key file given as
/// the certificate is refused there, naming the key, not first at `serve`.
#[test]
fn check_config_refuses_a_key_file_as_the_iphttps_certificate() {
    let dir = temp_dir("keyascert");
    let certs = dir.join("certs");
    let out = gate64(&["certs", "--out", certs.to_str().expect("UTF-8")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let iphttps = |cert: &str| {
        format!(
            "{TEREDO}\n{CORPNET}\n[iphttps]\nenabled = true\ncertificate = {:?}\n\
             private_key = {:?}\nprefix = \"2001:db8:1::/48\"\n",
            certs.join(cert).display().to_string(),
            certs.join("server.key").display().to_string(),
        )
    };
    let (ok, stdout, stderr) = check_config(&dir, &iphttps("server.pem"));
    assert!(ok, "{stdout}{stderr}");
    let (ok, _, stderr) = check_config(&dir, &iphttps("server.key"));
    assert!(!ok, "a key file passed as iphttps.certificate");
    assert!(stderr.contains("iphttps.certificate"), "{stderr}");
    assert!(stderr.contains("server.key"), "{stderr}");
    assert!(stderr.contains("no certificate in the file"), "{stderr}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// `gate64 certs --help` names every file `gate64 certs` writes.
#[test]
fn certs_help_names_every_file_it_writes() {
    let dir = temp_dir("certs-help");
    let out = gate64(&["certs", "--out", dir.to_str().expect("UTF-8")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let help = text(&gate64(&["certs", "--help"]).stdout);
    let written: Vec<String> = std::fs::read_dir(&dir)
        .expect("listing")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(written.len(), 18, "{written:?}");
    for file in &written {
        let named = help
            .split(|c: char| c.is_whitespace() || c == ',' || c == ':')
            .any(|word| word == file);
        assert!(named, "`gate64 certs --help` does not name {file}:\n{help}");
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}
