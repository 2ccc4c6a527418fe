//! FreeRADIUS (Debian's `freeradius` 3.2) in a network namespace as an accounting server
//! (`../shared/docs/interop-accounting-revocation.md`): a private copy of the Debian
//! configuration whose `logdir` and `run_dir` are in the namespace's directory, one client
//! entry, the daemon in the foreground. Accounting records land in its `detail` files, which
//! [`FreeRadius::records`] parses. Dropping it stops the daemon.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::netns::{Netns, Process, find_tool};
use crate::wait::wait_until;

/// Debian's configuration, copied per instance.
const DEBIAN_RADDB: &str = "/etc/freeradius/3.0";
/// FreeRADIUS starts in well under a second; generous for a loaded machine.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A running FreeRADIUS.
#[derive(Debug)]
pub struct FreeRadius {
    process: Process,
    dir: PathBuf,
}

/// One accounting record of a detail file: attribute name to value (quotes removed).
pub type Record = BTreeMap<String, String>;

impl FreeRadius {
    /// Starts FreeRADIUS in `ns`, accepting requests from `client` (an address or prefix)
    /// under `secret`. Accounting is on UDP 1813 of the namespace.
    pub fn start(ns: &Netns, client: &str, secret: &str) -> Result<FreeRadius> {
        FreeRadius::start_with_users(ns, client, secret, &[])
    }

    /// [`FreeRadius::start`] that also authenticates `users` (name, cleartext password)
    /// on UDP 1812, e.g. with its `eap` module (Debian's default configuration: EAP-MD5
    /// first, EAP-MSCHAPv2 after the client's NAK).
    pub fn start_with_users(
        ns: &Netns,
        client: &str,
        secret: &str,
        users: &[(&str, &str)],
    ) -> Result<FreeRadius> {
        let entries: String = users
            .iter()
            .map(|(name, password)| format!("{name} Cleartext-Password := \"{password}\"\n"))
            .collect();
        FreeRadius::start_with_users_file(ns, client, secret, &entries)
    }

    /// [`FreeRadius::start`] whose users file begins with `entries`, verbatim (check items
    /// and the reply attributes on the lines after, e.g. `Session-Timeout = 8`).
    pub fn start_with_users_file(
        ns: &Netns,
        client: &str,
        secret: &str,
        entries: &str,
    ) -> Result<FreeRadius> {
        let binary = find_tool("freeradius")
            .context("freeradius is not installed (Debian package freeradius)")?;
        let dir = ns.dir().join("freeradius");
        let raddb = dir.join("raddb");
        std::fs::create_dir_all(&dir)?;
        let copied = std::process::Command::new("cp")
            .args(["-a", DEBIAN_RADDB])
            .arg(&raddb)
            .status()
            .context("copying /etc/freeradius/3.0")?;
        ensure!(copied.success(), "copying {DEBIAN_RADDB}: {copied}");
        let (log, run) = (dir.join("log"), dir.join("run"));
        for d in [&log, &log.join("radacct"), &run] {
            std::fs::create_dir_all(d)?;
        }
        let conf = raddb.join("radiusd.conf");
        let text = std::fs::read_to_string(&conf)?;
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("logdir = ") {
                    format!("logdir = {}", log.display())
                } else if l.starts_with("run_dir = ") {
                    format!("run_dir = {}", run.display())
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&conf, text + "\n")?;
        std::fs::write(
            raddb.join("clients.conf"),
            format!("client gate64 {{\n    ipaddr = {client}\n    secret = {secret}\n}}\n"),
        )?;
        if !entries.is_empty() {
            let authorize = raddb.join("mods-config/files/authorize");
            let rest = std::fs::read_to_string(&authorize).unwrap_or_default();
            let mut text = entries.to_owned();
            text.push_str(&rest);
            std::fs::write(&authorize, text)?;
        }
        // The daemon drops to `freerad`: it must reach and write its log and run
        // directories (the namespace's directory is otherwise root's alone).
        for d in [ns.dir(), dir.as_path()] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711))?;
        }
        let owned = std::process::Command::new("chown")
            .args(["-R", "freerad:freerad"])
            .arg(&log)
            .arg(&run)
            .status()?;
        ensure!(owned.success(), "chown freerad {}: {owned}", log.display());
        let process = ns.spawn(
            "freeradius",
            &[path(&binary)?, "-f", "-l", "stdout", "-d", path(&raddb)?],
        )?;
        let mut radius = FreeRadius { process, dir: log };
        let ready = wait_until(READY_TIMEOUT, || {
            radius.process.log().contains("Ready to process requests")
                || !radius.process.is_running()
        });
        radius.process.ensure_running()?;
        ensure!(
            ready && radius.process.log().contains("Ready to process requests"),
            "FreeRADIUS did not get ready:\n{}",
            radius.process.log()
        );
        Ok(radius)
    }

    /// Every accounting record written so far, oldest first (all detail files).
    pub fn records(&self) -> Result<Vec<Record>> {
        let mut files = Vec::new();
        collect(&self.dir.join("radacct"), &mut files)?;
        files.sort();
        let mut out = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f)?;
            out.extend(parse_detail(&text));
        }
        Ok(out)
    }

    /// The daemon's output.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Stops the daemon (the server goes down).
    pub fn stop(&mut self) {
        self.process.stop();
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        if p.is_dir() {
            collect(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

/// A detail file's records: blocks separated by blank lines, a time line first, then
/// `\tName = value` lines.
pub fn parse_detail(text: &str) -> Vec<Record> {
    let mut out = Vec::new();
    let mut current = Record::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            continue;
        }
        if let Some((name, value)) = line.trim().split_once(" = ") {
            current.insert(name.to_owned(), value.trim_matches('"').to_owned());
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn path(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_blocks_parse() {
        let text = "Wed Dec  2 18:01:22 2026\n\tAcct-Status-Type = Start\n\tUser-Name = \"x\"\n\n\
                    Wed Dec  2 18:01:23 2026\n\tAcct-Status-Type = Stop\n\tAcct-Input-Octets = 5\n";
        let r = parse_detail(text);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0]["User-Name"], "x");
        assert_eq!(r[1]["Acct-Input-Octets"], "5");
    }
}
