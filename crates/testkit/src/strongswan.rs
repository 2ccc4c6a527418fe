//! strongSwan as a real IKEv2/ESP peer in a network namespace: one `charon-systemd` per
//! namespace, in the foreground, with its own `strongswan.conf`, vici socket, log file and
//! `swanctl/` directory generated from a [`CharonConfig`] (interop-strongswan.md).
//!
//! This machine's kernel has neither ESP nor GCM in XFRM, so charon runs its userspace ESP
//! (`kernel-libipsec`, a TUN named `ipsec0`), which always UDP-encapsulates ESP on port 4500.
//! Consequences built into the generated configuration:
//! - an initiator asks for a virtual IP (`vips = ::`, a CFG_REQUEST for INTERNAL_IP6_ADDRESS):
//!   libipsec routes each child SA's remote selector through `ipsec0`, so the inner address
//!   must not be the IKE address;
//! - `reuse_ikesa = no` and `unique = never`: each connection gets its own IKE SA (the
//!   DirectAccess shape, two IKE SAs + two child SAs per client), and the second IKE SA's
//!   INITIAL_CONTACT cannot make the responder delete the first.
//!
//! ```no_run
//! # fn demo(cli: &gate64_testkit::Netns, corp: &gate64_testkit::Netns) -> anyhow::Result<()> {
//! use std::time::Duration;
//! use gate64_testkit::strongswan::{Charon, CharonConfig, LabCerts, Tunnel};
//! let server: std::net::IpAddr = "2001:db8:100:1::2".parse()?;
//! let tunnels = vec![
//!     Tunnel::new("infrastructure", &["fd00:c0::53/128"]),
//!     Tunnel::new("intranet", &["fd00:c0::/64"]),
//! ];
//! let certs = LabCerts::generate(corp, &corp.dir().join("certs"), server)?;
//! let responder = Charon::start(
//!     corp,
//!     "responder",
//!     CharonConfig::responder(Some(server), certs.responder(), tunnels.clone(), "fd00:c1::100/120"),
//! )?;
//! let initiator = Charon::start(cli, "initiator", CharonConfig::initiator(server, certs.initiator(), tunnels))?;
//! responder.load_all()?;
//! initiator.load_all()?;
//! initiator.initiate("infrastructure", "infrastructure", Duration::from_secs(30))?;
//! initiator.initiate("intranet", "intranet", Duration::from_secs(30))?;
//! let sas = initiator.wait_established(2, 2, Duration::from_secs(10))?;
//! println!("{:?}", sas[0].children[0].packets_out);
//! # Ok(()) }
//! ```

mod config;
mod sas;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

pub use config::{
    CertPaths, CharonConfig, KeyType, LabCerts, Role, SecondAuth, Tunnel, write_pki_conf,
};
use sas::parse_list_sas;
pub use sas::{ChildSa, IkeSa, find_child};

use crate::netns::{Netns, Process, find_tool, os};
use crate::wait::{wait_for, wait_until};

/// IKE proposals that worked against strongSwan 5.9 (interop-strongswan.md): AES-GCM-16-256,
/// PRF-HMAC-SHA2-256, groups 19 (ECP-256) and 31 (Curve25519).
pub const IKE_PROPOSALS: [&str; 2] = [
    "aes256gcm16-prfsha256-ecp256",
    "aes256gcm16-prfsha256-x25519",
];
/// ESP proposal: AES-GCM-16-256 (RFC 4106), no ESN.
pub const ESP_PROPOSALS: [&str; 1] = ["aes256gcm16"];
/// The DirectAccess infrastructure tunnel's name (connection and child SA).
pub const INFRASTRUCTURE: &str = "infrastructure";
/// The DirectAccess intranet tunnel's name (connection and child SA).
pub const INTRANET: &str = "intranet";
/// The responder's one connection: every tunnel is a child of it, so the responder picks the
/// child by the traffic selectors the initiator asks for (strongSwan selects the peer config
/// in IKE_AUTH by identities alone, before it sees any selector).
pub const RESPONDER_CONNECTION: &str = "clients";

/// The plugins charon loads; `kernel-libipsec` must come before `kernel-netlink` so that it
/// provides the IPsec half (userspace ESP) and netlink only the networking half.
const CHARON_PLUGINS: &str = "random nonce openssl pem pkcs1 pkcs8 pubkey x509 revocation \
     constraints aes sha1 sha2 hmac gcm kdf attr kernel-libipsec kernel-netlink socket-default \
     vici";
/// The plugins swanctl and pki need to parse keys and certificates (an explicit list also
/// keeps them from printing a line per absent default plugin).
const TOOL_PLUGINS: &str = "random nonce openssl pem pkcs1 pkcs8 pubkey x509 sha1 sha2";
/// The credential directories `swanctl --load-all` reads (strongSwan 5.9).
const SWANCTL_SUBDIRS: [&str; 13] = [
    "x509", "x509ca", "x509ocsp", "x509aa", "x509ac", "x509crl", "pubkey", "private", "rsa",
    "ecdsa", "bliss", "pkcs8", "pkcs12",
];
/// charon-systemd's path on Debian.
const CHARON_BIN: &str = "/usr/sbin/charon-systemd";
/// How long charon gets to create its vici socket and answer on it.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Timeout of swanctl commands that only talk to charon (no network exchange).
const SWANCTL_TIMEOUT: Duration = Duration::from_secs(20);
/// Lines of charon's log shown by [`Charon::log_tail`] in reports.
pub const LOG_TAIL_LINES: usize = 80;

/// A charon configuration as an administrator writes it, for [`Charon::start_verbatim`]:
/// `strongswan.conf` and `swanctl.conf` taken as they are, and credential files copied into
/// `swanctl/` under their own names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbatimConfig {
    /// The whole `strongswan.conf`.
    pub strongswan_conf: String,
    /// The whole `swanctl.conf`.
    pub swanctl_conf: String,
    /// Credentials: the `swanctl/` subdirectory (`x509`, `x509ca`, `private`, ...) and the
    /// file copied into it.
    pub files: Vec<(String, PathBuf)>,
}

/// A running charon in a namespace. Dropping it stops charon (SIGTERM, then SIGKILL), prints
/// its log's tail if the thread is panicking, and removes its directory.
#[derive(Debug)]
pub struct Charon<'a> {
    ns: &'a Netns,
    label: String,
    dir: PathBuf,
    swanctl: PathBuf,
    process: Option<Process>,
}

impl<'a> Charon<'a> {
    /// Writes the configuration into a fresh temporary directory, copies the credentials
    /// into its `swanctl/` tree, starts charon inside `ns` and waits (≤ 15 s) until it
    /// answers on its vici socket. `label` (letters, digits, `-`) names its log. At most one
    /// charon per namespace: each binds UDP 500 and 4500 and creates the `ipsec0` device.
    pub fn start(ns: &'a Netns, label: &str, config: CharonConfig) -> Result<Charon<'a>> {
        Charon::launch(ns, label, |charon| charon.write_files(&config))
    }

    /// [`Charon::start`] with configuration text as an administrator writes it
    /// ([`VerbatimConfig`]): `strongswan.conf` and `swanctl.conf` are written as given, and
    /// only this charon's own vici socket and log file are appended to `strongswan.conf`, so
    /// that charons in several namespaces do not share the default socket.
    pub fn start_verbatim(
        ns: &'a Netns,
        label: &str,
        config: &VerbatimConfig,
    ) -> Result<Charon<'a>> {
        Charon::launch(ns, label, |charon| charon.write_verbatim(config))
    }

    fn launch(
        ns: &'a Netns,
        label: &str,
        write: impl FnOnce(&Charon<'a>) -> Result<()>,
    ) -> Result<Charon<'a>> {
        ensure!(
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-'),
            "charon label {label:?}: use letters, digits and '-'"
        );
        let swanctl = find_tool("swanctl")
            .context("`swanctl` not found: apt-get install strongswan-swanctl")?;
        ensure!(
            Path::new(CHARON_BIN).is_file(),
            "{CHARON_BIN} not found: apt-get install charon-systemd libcharon-extra-plugins"
        );
        let dir = std::env::temp_dir().join(format!("gate64-charon-{}-{label}", ns.name()));
        let _ = fs::remove_dir_all(&dir);
        // From here on, Drop removes the directory whatever fails.
        let mut charon = Charon {
            ns,
            label: label.to_owned(),
            dir,
            swanctl,
            process: None,
        };
        write(&charon)?;
        let conf = charon.dir.join("strongswan.conf");
        let env = format!("STRONGSWAN_CONF={}", conf.display());
        let mut process = ns.spawn(&format!("charon-{label}"), &["env", &env, CHARON_BIN])?;
        let socket = charon.dir.join("charon.vici");
        // Stops early when charon exits (a configuration it refuses, a port in use).
        let up = wait_until(START_TIMEOUT, || {
            !process.is_running()
                || (socket.exists() && charon.swanctl_raw(&["--stats"], SWANCTL_TIMEOUT).is_ok())
        });
        let running = process.ensure_running();
        charon.process = Some(process);
        running.with_context(|| charon.failure("charon exited at start"))?;
        ensure!(
            up,
            "{}",
            charon.failure(&format!(
                "no answer on {} within {START_TIMEOUT:?}",
                socket.display()
            ))
        );
        Ok(charon)
    }

    /// Creates `swanctl/` with every directory `swanctl --load-all` opens, so that it
    /// reports no missing ones.
    fn make_swanctl_dirs(&self) -> Result<PathBuf> {
        let swanctl_dir = self.dir.join("swanctl");
        for sub in SWANCTL_SUBDIRS {
            fs::create_dir_all(swanctl_dir.join(sub))
                .with_context(|| format!("creating {}/{sub}", swanctl_dir.display()))?;
        }
        Ok(swanctl_dir)
    }

    fn write_verbatim(&self, config: &VerbatimConfig) -> Result<()> {
        let swanctl_dir = self.make_swanctl_dirs()?;
        for (sub, file) in &config.files {
            ensure!(
                SWANCTL_SUBDIRS.contains(&sub.as_str()),
                "{sub:?} is not a swanctl credential directory ({SWANCTL_SUBDIRS:?})"
            );
            let name = file
                .file_name()
                .with_context(|| format!("{} has no file name", file.display()))?;
            fs::copy(file, swanctl_dir.join(sub).join(name))
                .with_context(|| format!("copying {}", file.display()))?;
        }
        let dir = self.dir.display();
        let plumbing = format!(
            "\n# gate64_testkit: this charon's own vici socket, log file and resolv.conf (the\n\
             # resolve plugin writes the DNS servers it is given there, never the host's).\n\
             charon-systemd {{\n  filelog {{\n    charon {{\n      path = {dir}/charon.log\n      \
             default = 1\n      ike = 2\n      cfg = 2\n      time_format = %H:%M:%S\n      \
             ike_name = yes\n      flush_line = yes\n      append = no\n    }}\n  }}\n  \
             journal {{\n    default = -1\n  }}\n  plugins {{\n    vici {{\n      \
             socket = unix://{dir}/charon.vici\n    }}\n    resolve {{\n      \
             file = {dir}/resolv.conf\n      resolvconf {{\n        \
             path = {dir}/no-resolvconf\n      }}\n    }}\n  }}\n}}\n\
             swanctl {{\n  load = {TOOL_PLUGINS}\n  socket = unix://{dir}/charon.vici\n}}\n"
        );
        fs::write(
            self.dir.join("strongswan.conf"),
            format!("{}{plumbing}", config.strongswan_conf),
        )?;
        fs::write(swanctl_dir.join("swanctl.conf"), &config.swanctl_conf)?;
        Ok(())
    }

    fn write_files(&self, config: &CharonConfig) -> Result<()> {
        let swanctl_dir = self.make_swanctl_dirs()?;
        // swanctl reads one certificate per file: split a chain, leaf first.
        let pem = fs::read_to_string(&config.certs.cert)
            .with_context(|| format!("reading {}", config.certs.cert.display()))?;
        let blocks = pem_certificates(&pem);
        ensure!(
            !blocks.is_empty(),
            "{}: no PEM certificate",
            config.certs.cert.display()
        );
        for (i, block) in blocks.iter().enumerate() {
            let name = if i == 0 {
                "own.pem".to_owned()
            } else {
                format!("chain-{i}.pem")
            };
            fs::write(swanctl_dir.join("x509").join(name), block)?;
        }
        for (i, ca) in config.certs.cas.iter().enumerate() {
            let pem =
                fs::read_to_string(ca).with_context(|| format!("reading {}", ca.display()))?;
            for (j, block) in pem_certificates(&pem).iter().enumerate() {
                fs::write(
                    swanctl_dir.join("x509ca").join(format!("ca-{i}-{j}.pem")),
                    block,
                )?;
            }
        }
        fs::copy(
            &config.certs.key,
            swanctl_dir.join("private").join("own.key"),
        )
        .with_context(|| format!("copying {}", config.certs.key.display()))?;
        if let Some(second) = &config.second_auth {
            fs::copy(
                &second.cert,
                swanctl_dir.join("x509").join(config::SECOND_CERT),
            )
            .with_context(|| format!("copying {}", second.cert.display()))?;
            fs::copy(&second.key, swanctl_dir.join("private").join("second.key"))
                .with_context(|| format!("copying {}", second.key.display()))?;
        }
        fs::write(
            self.dir.join("strongswan.conf"),
            config.strongswan_conf(&self.dir),
        )?;
        fs::write(
            swanctl_dir.join("swanctl.conf"),
            config.swanctl_conf("own.pem"),
        )?;
        Ok(())
    }

    /// The label given to [`Charon::start`].
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The directory holding `strongswan.conf`, `swanctl/`, the vici socket and the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// charon's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("charon.log")
    }

    /// Where the resolve plugin of a charon started with [`Charon::start_verbatim`] writes
    /// the DNS servers it is given (instead of `/etc/resolv.conf`).
    pub fn resolv_conf_path(&self) -> PathBuf {
        self.dir.join("resolv.conf")
    }

    /// The last `lines` lines of charon's log (and of its stdout/stderr), with a header.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        let mut sources = vec![("charon.log".to_owned(), self.log_path())];
        if let Some(p) = &self.process {
            sources.push(("stdout/stderr".to_owned(), p.log_path().to_owned()));
        }
        for (what, path) in sources {
            let text = fs::read(&path)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            let _ = writeln!(
                out,
                "----- charon {} in {}: {what}, last {} of {} lines -----",
                self.label,
                self.ns.name(),
                tail.len(),
                all.len()
            );
            for line in tail {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }

    /// Fails if charon is no longer running (with its log).
    pub fn ensure_running(&mut self) -> Result<()> {
        let label = self.label.clone();
        match self.process.as_mut() {
            Some(p) => p
                .ensure_running()
                .with_context(|| format!("charon {label} died")),
            None => bail!("charon {label} not started"),
        }
    }

    /// `swanctl --load-all --noprompt`: credentials, pools and connections.
    pub fn load_all(&self) -> Result<String> {
        let out = self.swanctl(&["--load-all", "--noprompt"], SWANCTL_TIMEOUT)?;
        ensure!(
            out.contains("successfully loaded") && !out.contains("failed"),
            "{}",
            self.failure(&format!("swanctl --load-all:\n{out}"))
        );
        Ok(out)
    }

    /// `swanctl --initiate --ike <ike> --child <child>`, waiting up to `timeout` for the
    /// exchange to complete; fails (with charon's log) unless it did.
    pub fn initiate(&self, ike: &str, child: &str, timeout: Duration) -> Result<String> {
        let secs = timeout.as_secs().max(1).to_string();
        let out = self.swanctl(
            &[
                "--initiate",
                "--ike",
                ike,
                "--child",
                child,
                "--timeout",
                &secs,
            ],
            timeout + Duration::from_secs(10),
        )?;
        ensure!(
            out.contains("initiate completed successfully"),
            "{}",
            self.failure(&format!("initiating {ike}/{child}:\n{out}"))
        );
        Ok(out)
    }

    /// `swanctl --terminate --ike <ike>`, waiting up to `timeout` for the delete exchange.
    pub fn terminate(&self, ike: &str, timeout: Duration) -> Result<String> {
        let secs = timeout.as_secs().max(1).to_string();
        let out = self.swanctl(
            &["--terminate", "--ike", ike, "--timeout", &secs],
            timeout + Duration::from_secs(10),
        )?;
        ensure!(
            out.contains("terminate completed successfully"),
            "{}",
            self.failure(&format!("terminating {ike}:\n{out}"))
        );
        Ok(out)
    }

    /// `swanctl --rekey --child <child>`: starts a CREATE_CHILD_SA rekey of every child SA of
    /// that name (returns once charon has queued it; watch [`Charon::list_sas`] for the new
    /// SPIs).
    pub fn rekey_child(&self, child: &str) -> Result<String> {
        self.swanctl(&["--rekey", "--child", child], SWANCTL_TIMEOUT)
    }

    /// `swanctl --rekey --ike <ike>`: starts a CREATE_CHILD_SA rekey of the IKE SA(s) of that
    /// name (returns once charon has queued it).
    pub fn rekey_ike(&self, ike: &str) -> Result<String> {
        self.swanctl(&["--rekey", "--ike", ike], SWANCTL_TIMEOUT)
    }

    /// `swanctl --list-sas`, parsed.
    pub fn list_sas(&self) -> Result<Vec<IkeSa>> {
        let out = self.swanctl(&["--list-sas", "--pretty"], SWANCTL_TIMEOUT)?;
        parse_list_sas(&out).with_context(|| format!("parsing swanctl --list-sas:\n{out}"))
    }

    /// Polls [`Charon::list_sas`] until exactly `ike_sas` IKE SAs are established and
    /// exactly `child_sas` child SAs installed; fails after `timeout` with what it saw.
    pub fn wait_established(
        &self,
        ike_sas: usize,
        child_sas: usize,
        timeout: Duration,
    ) -> Result<Vec<IkeSa>> {
        let mut last = Err(anyhow::anyhow!("never listed"));
        let found = wait_for(timeout, || {
            last = self.list_sas();
            let sas = last.as_ref().ok()?;
            let ike = sas.iter().filter(|s| s.is_established()).count();
            let child = sas
                .iter()
                .flat_map(|s| &s.children)
                .filter(|c| c.is_installed())
                .count();
            (ike == ike_sas && child == child_sas).then(|| sas.clone())
        });
        match found {
            Some(sas) => Ok(sas),
            None => bail!(
                "{}",
                self.failure(&format!(
                    "expected {ike_sas} established IKE SAs and {child_sas} installed child \
                     SAs within {timeout:?}; last list: {last:#?}"
                ))
            ),
        }
    }

    /// Runs `swanctl <args>` against this charon (inside its namespace) and returns stdout and
    /// stderr; a non-zero exit is an error quoting both.
    pub fn swanctl(&self, args: &[&str], timeout: Duration) -> Result<String> {
        self.swanctl_raw(args, timeout)
            .with_context(|| format!("charon {}: swanctl {}", self.label, args.join(" ")))
    }

    fn swanctl_raw(&self, args: &[&str], timeout: Duration) -> Result<String> {
        let conf = format!(
            "STRONGSWAN_CONF={}",
            self.dir.join("strongswan.conf").display()
        );
        let dir = format!("SWANCTL_DIR={}", self.dir.join("swanctl").display());
        let mut argv = vec!["env", &conf, &dir, os(&self.swanctl)];
        argv.extend_from_slice(args);
        let out = self.ns.exec_timeout(&argv, timeout)?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(out.status.success(), "exit {}: {text}", out.status);
        Ok(text)
    }

    /// `what` followed by the tail of charon's log, for error messages.
    fn failure(&self, what: &str) -> String {
        format!(
            "charon {}: {what}\n{}",
            self.label,
            self.log_tail(LOG_TAIL_LINES)
        )
    }
}

impl Drop for Charon<'_> {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.stop();
        }
        if thread::panicking() {
            eprintln!("{}", self.log_tail(LOG_TAIL_LINES));
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `result`, or its error followed by the tail of every charon's log: wrap a scenario that
/// uses charons so that any failure (a ping, an assertion) shows what IKE did.
pub fn with_charon_logs<T>(result: Result<T>, charons: &[&Charon<'_>]) -> Result<T> {
    result.map_err(|e| {
        let logs: String = charons.iter().map(|c| c.log_tail(LOG_TAIL_LINES)).collect();
        anyhow::anyhow!("{e:#}\n{logs}")
    })
}

/// The PEM `CERTIFICATE` blocks of `pem`, each with its BEGIN/END lines.
fn pem_certificates(pem: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in pem.lines() {
        let line = line.trim_end();
        if line == "-----BEGIN CERTIFICATE-----" {
            current = Some(String::new());
        }
        if let Some(block) = current.as_mut() {
            block.push_str(line);
            block.push('\n');
        }
        if line == "-----END CERTIFICATE-----" {
            out.extend(current.take());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_pem_chains() {
        let pem = "junk\n-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n\
                   -----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n";
        let blocks = pem_certificates(pem);
        assert_eq!(blocks.len(), 2);
        assert!(blocks[1].contains("BBB") && !blocks[1].contains("AAA"));
    }
}
