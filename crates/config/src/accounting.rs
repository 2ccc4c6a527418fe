//! `[accounting]`: the session log and RADIUS accounting (who was connected, from where,
//! for how long, with how many bytes).

use std::net::{IpAddr, SocketAddr};
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
/// `dae.replay_window_seconds` when not set: how far an Event-Timestamp may be from now,
/// and how long a request is remembered to refuse its replay (RFC 5176 §3.5 suggests 300).
pub const DEFAULT_REPLAY_WINDOW_SECS: u64 = 300;
/// The window at most: a day.
pub const MAX_REPLAY_WINDOW_SECS: u64 = 86_400;
/// `[[accounting.dae.client]]` tables at most.
pub const MAX_DAE_CLIENTS: usize = 64;

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
    /// `[accounting.dae]`: RADIUS Dynamic Authorization (RFC 5176), Disconnect-Requests and
    /// CoA-Requests from the listed clients. `None`: off.
    pub dae: Option<Dae>,
}

/// `[accounting.dae]`: the Dynamic Authorization listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dae {
    /// `listen = "ADDR:PORT"` (the port of RFC 5176 is 3799).
    pub listen: SocketAddr,
    /// `replay_window_seconds`: how far an Event-Timestamp may be from now, and how long a
    /// request is remembered so that its replay has no effect.
    pub replay_window_secs: u64,
    /// `[[accounting.dae.client]]`: who may send requests, and with which secret.
    pub clients: Vec<DaeClient>,
}

/// One `[[accounting.dae.client]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaeClient {
    /// `address`: the client's address, or a prefix of addresses ("10.64.0.0/24").
    pub address: ipnet::IpNet,
    /// `secret_file`: a file holding the shared secret (its first line), as for
    /// `[[accounting.radius]]`.
    pub secret_file: PathBuf,
}

impl Default for Accounting {
    fn default() -> Self {
        Accounting {
            log: None,
            radius: Vec::new(),
            interim_secs: DEFAULT_INTERIM_SECS,
            nas_identifier: "gate64".to_owned(),
            dae: None,
        }
    }
}

impl Accounting {
    /// Whether anything tracks sessions (a log, RADIUS accounting, or Dynamic Authorization,
    /// which finds sessions as accounting names them).
    pub fn enabled(&self) -> bool {
        self.log.is_some() || !self.radius.is_empty() || self.dae.is_some()
    }

    /// Every secret file: the accounting servers' and the Dynamic Authorization clients'.
    fn secret_files(&self) -> impl Iterator<Item = (&'static str, &PathBuf)> {
        let radius = self.radius.iter().map(|r| (SECRET_FILE, &r.secret_file));
        let dae = self
            .dae
            .iter()
            .flat_map(|d| &d.clients)
            .map(|c| (DAE_SECRET_FILE, &c.secret_file));
        radius.chain(dae)
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
    dae: Option<RawDae>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDae {
    listen: Option<SocketAddr>,
    replay_window_seconds: Option<u64>,
    client: Option<Vec<RawDaeClient>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDaeClient {
    address: String,
    secret_file: PathBuf,
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
    pub(crate) fn build(self) -> Result<Accounting, ConfigError> {
        let d = Accounting::default();
        let dae = match self.dae {
            None => None,
            Some(raw) => Some(raw.build()?),
        };
        Ok(Accounting {
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
            dae,
        })
    }
}

impl RawDae {
    fn build(self) -> Result<Dae, ConfigError> {
        let listen = self.listen.ok_or_else(|| {
            crate::error::missing(
                "accounting.dae.listen",
                "[accounting.dae] needs the address to listen on, e.g. listen = \"10.64.0.1:3799\"",
            )
        })?;
        let clients = self
            .client
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                let address = match c.address.parse::<ipnet::IpNet>() {
                    Ok(net) => net,
                    Err(_) => c.address.parse::<IpAddr>().map(ipnet::IpNet::from).map_err(|_| {
                        invalid(
                            "accounting.dae.client.address",
                            quote(&c.address),
                            "must be an IP address or prefix, e.g. \"10.64.0.2\" or \"10.64.0.0/24\"",
                        )
                    })?,
                };
                Ok(DaeClient {
                    address: address.trunc(),
                    secret_file: c.secret_file,
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(Dae {
            listen,
            replay_window_secs: self
                .replay_window_seconds
                .unwrap_or(DEFAULT_REPLAY_WINDOW_SECS),
            clients,
        })
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
        if let Some(path) = &self.ipsec.qcd_secret_file
            && !path.is_absolute()
        {
            return Err(invalid(
                QCD_SECRET_FILE,
                quote(&path.display().to_string()),
                "must be an absolute path, e.g. \"/etc/gate64/qcd.secret\"",
            ));
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
        if let Some(dae) = &a.dae {
            validate_dae(dae)?;
        }
        if a.enabled() && !self.ipsec.configured() {
            let (key, value) = match (&a.log, &a.dae) {
                (Some(log), _) => ("accounting.log", quote(&log.display().to_string())),
                (None, Some(dae)) => ("accounting.dae.listen", quote(&dae.listen.to_string())),
                (None, None) => ("accounting.radius", a.radius.len().to_string()),
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

    /// The secret files (RADIUS, Quick Crash Detection) exist, are readable, and give their
    /// group and others no access at all; the QCD secret is long enough (`check-config`,
    /// start-up and reload).
    pub(crate) fn check_accounting_files(&self) -> Result<(), ConfigError> {
        self.qcd_secret()?;
        self.ha_secret()?;
        for (key, path) in self.secret_files() {
            crate::error::check_readable_file(key, path)?;
            let meta = secret_metadata(key, path)?;
            let mode = meta.mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(invalid(
                    key,
                    quote(&path.display().to_string()),
                    format!(
                        "is open to its group or to others (mode {mode:04o}): the shared \
                         secret must be private to root and gate64's user; run \
                         `chmod 600 {}`",
                        path.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The secret files (RADIUS, Quick Crash Detection) are owned by root or by one of `daemon_uids` (the user gate64
    /// runs as): anyone else who owns the file can read it, or change the secret, whatever its
    /// mode. `check-config`, start-up and reload, after [`Config::check_files`].
    pub fn check_secret_file_owners(&self, daemon_uids: &[u32]) -> Result<(), ConfigError> {
        for (key, path) in self.secret_files() {
            let owner = secret_metadata(key, path)?.uid();
            if owner != 0 && !daemon_uids.contains(&owner) {
                let user = daemon_uids
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" or ");
                return Err(invalid(
                    key,
                    quote(&path.display().to_string()),
                    format!(
                        "is owned by uid {owner}, neither root nor gate64's user (uid {user}): \
                         that owner can read or replace the shared secret; run \
                         `chown root: {path} && chmod 600 {path}`",
                        path = path.display()
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

/// The key the Quick Crash Detection secret file checks name.
const QCD_SECRET_FILE: &str = "ipsec.qcd_secret_file";

impl Config {
    /// Every secret file, with the key that names it: the RADIUS servers' (accounting's, the
    /// Dynamic Authorization clients' and the EAP relay's), the Quick Crash Detection one and
    /// the HA sync channel's.
    fn secret_files(&self) -> impl Iterator<Item = (&'static str, &PathBuf)> {
        let accounting = self.accounting.secret_files();
        let eap = (self.ipsec.eap_radius.iter()).map(|r| (EAP_SECRET_FILE, &r.secret_file));
        let qcd = (self.ipsec.qcd_secret_file.iter()).map(|p| (QCD_SECRET_FILE, p));
        let ha = (self.ha.iter()).map(|h| (crate::ha::HA_SECRET_FILE, &h.secret_file));
        accounting.chain(eap).chain(qcd).chain(ha)
    }
}

/// The key the Dynamic Authorization clients' secret file checks name.
const DAE_SECRET_FILE: &str = "accounting.dae.client.secret_file";

fn validate_dae(dae: &Dae) -> Result<(), ConfigError> {
    if dae.listen.port() == 0 {
        return Err(invalid(
            "accounting.dae.listen",
            quote(&dae.listen.to_string()),
            "needs a port, e.g. \"10.64.0.1:3799\" (RFC 5176's port is 3799)",
        ));
    }
    if !(1..=MAX_REPLAY_WINDOW_SECS).contains(&dae.replay_window_secs) {
        return Err(invalid(
            "accounting.dae.replay_window_seconds",
            dae.replay_window_secs,
            format!("must be 1..={MAX_REPLAY_WINDOW_SECS} seconds"),
        ));
    }
    if dae.clients.is_empty() {
        return Err(invalid(
            "accounting.dae.client",
            0,
            "list at least one [[accounting.dae.client]] with address and secret_file: \
             requests from any other address are dropped",
        ));
    }
    if dae.clients.len() > MAX_DAE_CLIENTS {
        return Err(invalid(
            "accounting.dae.client",
            dae.clients.len(),
            format!("at most {MAX_DAE_CLIENTS} clients"),
        ));
    }
    for c in &dae.clients {
        if !c.secret_file.is_absolute() {
            return Err(invalid(
                DAE_SECRET_FILE,
                quote(&c.secret_file.display().to_string()),
                "must be an absolute path, e.g. \"/etc/gate64/dae.secret\"",
            ));
        }
    }
    Ok(())
}

/// The secret file's metadata (the file itself, not a symbolic link to it).
fn secret_metadata(key: &str, path: &std::path::Path) -> Result<std::fs::Metadata, ConfigError> {
    std::fs::metadata(path).map_err(|e| {
        invalid(
            key,
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
        "accounting.dae.listen" => "an address and port in quotes, e.g. \"10.64.0.1:3799\"",
        "accounting.dae.replay_window_seconds" => "a whole number of seconds, e.g. 300",
        "accounting.dae.client" => {
            "[[accounting.dae.client]] tables with address = \"ADDR\" or \"PREFIX\" and \
             secret_file = \"PATH\""
        }
        "accounting.dae" => "an [accounting.dae] table with listen = \"ADDR:3799\"",
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
