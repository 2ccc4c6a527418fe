//! `[accounting]`: the session log and RADIUS accounting (who was connected, from where,
//! for how long, with how many bytes).

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::{invalid, quote};
use crate::{Config, ConfigError};

/// `interim_secs` when not set: RFC 2869 §2.1's advice of no less than 600 s is for dial-up
/// NASes; five minutes is what strongSwan's eap-radius and accel-ppp deployments use.
pub const DEFAULT_INTERIM_SECS: u64 = 300;
/// Fewer seconds between Interim-Updates would load the server more than it tells.
pub const MIN_INTERIM_SECS: u64 = 10;
/// At most a day between Interim-Updates.
pub const MAX_INTERIM_SECS: u64 = 86_400;
/// Servers listed at most: failover walks them in order.
pub const MAX_RADIUS_SERVERS: usize = 8;

/// `[accounting]`: session accounting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accounting {
    /// Write one JSON line per client connect, tunnel up or down, disconnect (with its
    /// duration and bytes) and refused authentication here. `None`: off.
    pub log: Option<PathBuf>,
    /// `[[accounting.radius]]`: RADIUS accounting servers, tried in order. Empty: off.
    pub radius: Vec<RadiusServer>,
    /// Seconds between Interim-Updates of an accounting session.
    pub interim_secs: u64,
    /// NAS-Identifier of the requests.
    pub nas_identifier: String,
}

impl Default for Accounting {
    fn default() -> Self {
        Accounting {
            log: None,
            radius: Vec::new(),
            interim_secs: DEFAULT_INTERIM_SECS,
            nas_identifier: "gate64".to_owned(),
        }
    }
}

impl Accounting {
    /// Whether anything accounts sessions (a log or RADIUS).
    pub fn enabled(&self) -> bool {
        self.log.is_some() || !self.radius.is_empty()
    }
}

/// One `[[accounting.radius]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RadiusServer {
    /// `server = "ADDR:PORT"` (accounting's port is 1813).
    pub server: SocketAddr,
    /// `secret_file`: a file holding the shared secret (its first line, without the line
    /// break), so the secret stays out of the configuration file and its backups.
    pub secret_file: PathBuf,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccounting {
    log: Option<PathBuf>,
    radius: Option<Vec<RawRadiusServer>>,
    interim_secs: Option<u64>,
    nas_identifier: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRadiusServer {
    server: SocketAddr,
    secret_file: PathBuf,
}

impl RawRadiusServer {
    pub(crate) fn build(self) -> RadiusServer {
        RadiusServer {
            server: self.server,
            secret_file: self.secret_file,
        }
    }
}

impl RawAccounting {
    pub(crate) fn build(self) -> Accounting {
        let d = Accounting::default();
        Accounting {
            log: self.log,
            radius: self
                .radius
                .unwrap_or_default()
                .into_iter()
                .map(|r| RadiusServer {
                    server: r.server,
                    secret_file: r.secret_file,
                })
                .collect(),
            interim_secs: self.interim_secs.unwrap_or(d.interim_secs),
            nas_identifier: self.nas_identifier.unwrap_or(d.nas_identifier),
        }
    }
}

impl Config {
    /// A relative path would land wherever the daemon happened to be started from; and a
    /// session is an IKE SA's, so without `[ipsec]` there would be nothing to account.
    pub(crate) fn validate_accounting(&self) -> Result<(), ConfigError> {
        let a = &self.accounting;
        if let Some(log) = &a.log
            && !log.is_absolute()
        {
            return Err(invalid(
                "accounting.log",
                quote(&log.display().to_string()),
                "must be an absolute path, e.g. \"/var/log/gate64/sessions.jsonl\"",
            ));
        }
        if !(MIN_INTERIM_SECS..=MAX_INTERIM_SECS).contains(&a.interim_secs) {
            return Err(invalid(
                "accounting.interim_secs",
                a.interim_secs,
                format!("must be {MIN_INTERIM_SECS}..={MAX_INTERIM_SECS} seconds"),
            ));
        }
        let id = &a.nas_identifier;
        if id.is_empty() || id.len() > 253 || id.chars().any(char::is_control) {
            return Err(invalid(
                "accounting.nas_identifier",
                quote(id),
                "must be 1 to 253 bytes without control characters (RADIUS NAS-Identifier)",
            ));
        }
        if a.radius.len() > MAX_RADIUS_SERVERS {
            return Err(invalid(
                "accounting.radius",
                a.radius.len(),
                format!("at most {MAX_RADIUS_SERVERS} servers"),
            ));
        }
        for r in &a.radius {
            if r.server.port() == 0 || r.server.ip().is_unspecified() {
                return Err(invalid(
                    "accounting.radius.server",
                    quote(&r.server.to_string()),
                    "must be a server's address and port, e.g. \"10.0.0.5:1813\"",
                ));
            }
            if !r.secret_file.is_absolute() {
                return Err(invalid(
                    "accounting.radius.secret_file",
                    quote(&r.secret_file.display().to_string()),
                    "must be an absolute path, e.g. \"/etc/gate64/radius.secret\"",
                ));
            }
        }
        let eap = &self.ipsec.eap_radius;
        if eap.len() > MAX_RADIUS_SERVERS {
            return Err(invalid(
                "ipsec.eap_radius",
                eap.len(),
                format!("at most {MAX_RADIUS_SERVERS} servers"),
            ));
        }
        for r in eap {
            if r.server.port() == 0 || r.server.ip().is_unspecified() {
                return Err(invalid(
                    "ipsec.eap_radius.server",
                    quote(&r.server.to_string()),
                    "must be a server's address and port, e.g. \"10.0.0.5:1812\"",
                ));
            }
            if !r.secret_file.is_absolute() {
                return Err(invalid(
                    EAP_SECRET_FILE,
                    quote(&r.secret_file.display().to_string()),
                    "must be an absolute path, e.g. \"/etc/gate64/radius.secret\"",
                ));
            }
        }
        if a.enabled() && !self.ipsec.configured() {
            let (key, value) = match &a.log {
                Some(log) => ("accounting.log", quote(&log.display().to_string())),
                None => ("accounting.radius", a.radius.len().to_string()),
            };
            return Err(invalid(
                key,
                value,
                "sessions are accounted per IKE SA: configure [ipsec] (certificate, private_key, \
                 ca) or remove [accounting]",
            ));
        }
        Ok(())
    }

    /// The RADIUS secret files exist, are readable, and give their group and others no
    /// access at all (`check-config`, start-up and reload).
    pub(crate) fn check_accounting_files(&self) -> Result<(), ConfigError> {
        for (key, r) in self.secret_files() {
            crate::error::check_readable_file(key, &r.secret_file)?;
            let meta = secret_metadata(&r.secret_file)?;
            let mode = meta.mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(invalid(
                    key,
                    quote(&r.secret_file.display().to_string()),
                    format!(
                        "is open to its group or to others (mode {mode:04o}): the RADIUS \
                         shared secret must be private to root and gate64's user; run \
                         `chmod 600 {}`",
                        r.secret_file.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The RADIUS secret files are owned by root or by one of `daemon_uids` (the user gate64
    /// runs as): anyone else who owns the file can read it, or change the secret, whatever its
    /// mode. `check-config`, start-up and reload, after [`Config::check_files`].
    pub fn check_secret_file_owners(&self, daemon_uids: &[u32]) -> Result<(), ConfigError> {
        for (key, r) in self.secret_files() {
            let owner = secret_metadata(&r.secret_file)?.uid();
            if owner != 0 && !daemon_uids.contains(&owner) {
                let user = daemon_uids
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" or ");
                return Err(invalid(
                    key,
                    quote(&r.secret_file.display().to_string()),
                    format!(
                        "is owned by uid {owner}, neither root nor gate64's user (uid {user}): \
                         that owner can read or replace the RADIUS shared secret; run \
                         `chown root: {path} && chmod 600 {path}`",
                        path = r.secret_file.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The key the RADIUS secret file checks name.
const SECRET_FILE: &str = "accounting.radius.secret_file";
/// The key the EAP relay's secret file checks name.
const EAP_SECRET_FILE: &str = "ipsec.eap_radius.secret_file";

impl Config {
    /// Every RADIUS server's secret file, with the key that names it: accounting's and the
    /// EAP relay's.
    fn secret_files(&self) -> impl Iterator<Item = (&'static str, &RadiusServer)> {
        let accounting = self.accounting.radius.iter().map(|r| (SECRET_FILE, r));
        let eap = self.ipsec.eap_radius.iter().map(|r| (EAP_SECRET_FILE, r));
        accounting.chain(eap)
    }
}

/// The secret file's metadata (the file itself, not a symbolic link to it).
fn secret_metadata(path: &std::path::Path) -> Result<std::fs::Metadata, ConfigError> {
    std::fs::metadata(path).map_err(|e| {
        invalid(
            SECRET_FILE,
            quote(&path.display().to_string()),
            format!("cannot read the file's owner and mode: {e}"),
        )
    })
}

/// What an `[accounting]` key's value looks like, for type errors.
pub(crate) fn expected_form(path: &str) -> Option<&'static str> {
    Some(match path {
        "accounting.log" => "a file path in quotes, e.g. \"/var/log/gate64/sessions.jsonl\"",
        "accounting.interim_secs" => "a whole number of seconds, e.g. 300",
        "accounting.nas_identifier" => "a name in quotes, e.g. \"gate64-paris\"",
        "accounting.radius" => {
            "[[accounting.radius]] tables with server = \"ADDR:PORT\" and \
             secret_file = \"PATH\""
        }
        "ipsec.eap_radius" => {
            "[[ipsec.eap_radius]] tables with server = \"ADDR:PORT\" and \
             secret_file = \"PATH\""
        }
        _ => return None,
    })
}
