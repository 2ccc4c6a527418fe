//! CRL files: `ipsec.crls` read from disk here and parsed by the IKE crate, which reads no
//! file; `iphttps.client_crls` read with the IP-HTTPS listener's TLS configuration. Both are
//! looked at again every `ipsec.crl_refresh_secs` and read anew when a file changed.

use anyhow::{Context, Result};
use gate64_config::{Config, IpsecCrlExpired};
use gate64_dataplane::{IpsecStats, Shared};
use gate64_ike::auth::{Crl, Crls};
use gate64_io::ike::IkeControl;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use tracing::{info, warn};

/// Reads and parses every file of `paths` (PEM or DER), naming `key` and the file in errors.
/// A CRL past its nextUpdate is warned about here; whether it still counts is the caller's
/// `crl_expired` rule.
pub fn read(key: &str, paths: &[PathBuf]) -> Result<Vec<Crl>> {
    let now = SystemTime::now();
    let mut out = Vec::new();
    for path in paths {
        let data = std::fs::read(path)
            .with_context(|| format!("{key}: cannot read {}", path.display()))?;
        let crls =
            Crl::parse(&data).map_err(|e| anyhow::anyhow!("`{key}` ({}): {e}", path.display()))?;
        for crl in &crls {
            if crl.is_expired(now) {
                let next_update = unix_secs(crl.next_update());
                warn!(
                    file = %path.display(),
                    next_update,
                    "`{key}`: a CRL is past its nextUpdate; publish a newer one"
                );
            }
        }
        out.extend(crls);
    }
    Ok(out)
}

/// Seconds since the epoch, for the log.
fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A list of files and the modification times last seen, for both CRL refreshes.
struct FileTimes {
    paths: Vec<PathBuf>,
    seen: Vec<Option<SystemTime>>,
}

impl FileTimes {
    /// `paths` with their modification times now (they were just read).
    fn new(paths: &[PathBuf]) -> FileTimes {
        FileTimes {
            paths: paths.to_vec(),
            seen: paths.iter().map(|p| modified(p)).collect(),
        }
    }

    /// Whether a modification time changed since the last look (a file that vanished counts
    /// as changed). The times are recorded either way, so a file that fails to read is
    /// retried only once it changes again.
    fn changed(&mut self) -> bool {
        let now: Vec<Option<SystemTime>> = self.paths.iter().map(|p| modified(p)).collect();
        if now == self.seen {
            return false;
        }
        self.seen = now;
        true
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// What the CRL refresh looks at: the running configuration's `ipsec.crls`, their rule and
/// period, and the modification times last seen. A reload replaces it ([`Watch::reset`]).
pub struct Watch {
    files: FileTimes,
    refuse_expired: bool,
    period: Duration,
}

impl Watch {
    /// The files of `cfg`, with their modification times now (they were just read).
    pub fn new(cfg: &Config) -> Watch {
        Watch {
            files: FileTimes::new(&cfg.ipsec.crls),
            refuse_expired: cfg.ipsec.crl_expired == IpsecCrlExpired::Refuse,
            period: Duration::from_secs(cfg.ipsec.crl_refresh_secs),
        }
    }

    /// Takes `cfg` after a reload, which read its files already.
    pub fn reset(&mut self, cfg: &Config) {
        *self = Watch::new(cfg);
    }

    /// The files again when one changed since the last look ([`FileTimes::changed`]; a file
    /// that vanished fails to read); `None` when none did.
    fn changed(&mut self) -> Option<Result<Crls>> {
        if !self.files.changed() {
            return None;
        }
        Some(read("ipsec.crls", &self.files.paths).map(|c| Crls::new(c, self.refuse_expired)))
    }
}

/// Every `ipsec.crl_refresh_secs`, reads the CRL files whose modification time changed and
/// hands them to the responder, which ends the established IKE SAs they revoke (counted as
/// `revoked`; their clients' IP-HTTPS links in `shared` are closed). A file that fails to read
/// or parse leaves the CRLs in force as they were. Must run inside a tokio runtime; ends when
/// `stop` turns true.
pub fn spawn_refresh(
    watch: Arc<Mutex<Watch>>,
    control: IkeControl,
    (stats, shared): (Arc<IpsecStats>, Arc<Shared>),
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        loop {
            let period = lock(&watch).period;
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            let changed = lock(&watch).changed();
            match changed {
                None => {}
                Some(Err(e)) => {
                    warn!(error = %format!("{e:#}"), "CRL files changed but were not applied; the CRLs in force stay");
                }
                Some(Ok(crls)) => {
                    let (stats, shared) = (Arc::clone(&stats), Arc::clone(&shared));
                    let next_updates = crls.next_updates().to_vec();
                    let applied = control.apply(move |responder| {
                        responder.replace_crls(crls);
                        let removed = responder.disconnect_revoked(Instant::now());
                        info!(
                            ended = removed.len(),
                            "CRL files changed: read again, IKE SAs of revoked certificates ended"
                        );
                        // The ends are counted from their events.
                        stats.set_crl_next_updates(&next_updates);
                        crate::disconnect::close_iphttps_links(&shared, &removed);
                    });
                    if !applied {
                        return;
                    }
                }
            }
        }
    });
}

fn lock<T>(watch: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    watch.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The IP-HTTPS listener's TLS configuration as `cfg` asks for it (certificate, key, client CA
/// and CRLs, the client EKU and expired-CRL rules), read from disk now; `None` without a
/// certificate and key.
pub fn iphttps_tls(cfg: &Config) -> Result<Option<Arc<rustls::ServerConfig>>> {
    let i = &cfg.iphttps;
    let (Some(cert), Some(key)) = (&i.certificate, &i.private_key) else {
        return Ok(None);
    };
    let tls = gate64_io::tls::server_config(
        cert,
        key,
        i.client_ca.as_deref(),
        (&i.client_crls, crate::settings::crl_expired_refuses(cfg)),
        crate::settings::client_eku(cfg),
    )?;
    Ok(Some(tls))
}

/// Hands `stats` the nextUpdate times of the CRLs in `client_crls` (`iphttps.client_crls`,
/// for `gate64_ipsec_crls_expired{crls="iphttps"}`), read from the files the IP-HTTPS TLS
/// configuration was just built from; a CRL past its nextUpdate is warned about, as for
/// `ipsec.crls`. A file that no longer reads leaves the gauge as it was, with a warning.
pub fn note_iphttps_crls(client_crls: &[PathBuf], stats: Option<&IpsecStats>) {
    let Some(stats) = stats else { return };
    match read("iphttps.client_crls", client_crls) {
        Ok(crls) => {
            let next_updates: Vec<SystemTime> = crls.iter().map(Crl::next_update).collect();
            stats.set_iphttps_crl_next_updates(&next_updates);
        }
        Err(e) => {
            warn!(error = %format!("{e:#}"), "`iphttps.client_crls`: the nextUpdate gauge was not updated");
        }
    }
}

/// What the IP-HTTPS CRL refresh looks at: the running configuration (its TLS files are read
/// anew when a CRL changed) and the modification times of its `iphttps.client_crls` last
/// seen. A reload replaces it ([`TlsWatch::reset`]).
pub struct TlsWatch {
    cfg: Config,
    files: FileTimes,
}

impl TlsWatch {
    /// `cfg`'s files, with their modification times now (they were just read).
    pub fn new(cfg: &Config) -> TlsWatch {
        TlsWatch {
            cfg: cfg.clone(),
            files: FileTimes::new(&cfg.iphttps.client_crls),
        }
    }

    /// Takes `cfg` after a reload, which read its files already.
    pub fn reset(&mut self, cfg: &Config) {
        *self = TlsWatch::new(cfg);
    }

    fn period(&self) -> Duration {
        Duration::from_secs(self.cfg.ipsec.crl_refresh_secs)
    }

    /// The TLS configuration read anew when a CRL file's modification time changed; `None`
    /// when none did. As [`Watch`], a file that fails is retried only once it changes.
    fn changed(&mut self) -> Option<Result<Option<Arc<rustls::ServerConfig>>>> {
        self.files.changed().then(|| iphttps_tls(&self.cfg))
    }
}

/// Every `ipsec.crl_refresh_secs`, reads the IP-HTTPS TLS files again when a CRL of
/// `iphttps.client_crls` changed, for the handshakes from then on (links up stay: a client
/// with IPsec is cut off through its IKE SAs and `ipsec.crls`), and hands `stats` their
/// nextUpdate times. A file that fails to read or parse leaves the configuration in force.
/// Must run inside a tokio runtime; ends when `stop` turns true.
pub fn spawn_tls_refresh(
    watch: Arc<Mutex<TlsWatch>>,
    tls: gate64_io::tls::ReloadableServerConfig,
    stats: Option<Arc<IpsecStats>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        loop {
            let period = lock(&watch).period();
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            let changed = lock(&watch).changed();
            match changed {
                None | Some(Ok(None)) => {}
                Some(Err(e)) => {
                    warn!(error = %format!("{e:#}"), "`iphttps.client_crls` changed but was not applied; the CRLs in force stay");
                }
                Some(Ok(Some(config))) => {
                    tls.replace(config);
                    info!("`iphttps.client_crls` changed: read again for new IP-HTTPS handshakes");
                    let paths = lock(&watch).cfg.iphttps.client_crls.clone();
                    note_iphttps_crls(&paths, stats.as_deref());
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PEM file of two CRLs of a fresh CA, one past its nextUpdate (2021), one not (2099).
    fn two_crls_pem() -> String {
        use rcgen::{
            BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType, IsCa,
            Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, SerialNumber,
        };
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "clients CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = Issuer::new(params, key);
        [2021, 2099]
            .into_iter()
            .map(|year| {
                CertificateRevocationListParams {
                    this_update: rcgen::date_time_ymd(2020, 1, 1),
                    next_update: rcgen::date_time_ymd(year, 1, 1),
                    crl_number: SerialNumber::from(1u64),
                    issuing_distribution_point: None,
                    revoked_certs: Vec::new(),
                    key_identifier_method: KeyIdMethod::Sha256,
                }
                .signed_by(&issuer)
                .expect("CRL")
                .pem()
                .expect("PEM")
            })
            .collect()
    }

    /// The IP-HTTPS client CRLs reach the expired-CRL gauge apart from `ipsec.crls`; a file
    /// that no longer reads leaves it as it was.
    #[test]
    fn iphttps_client_crls_are_counted_when_expired() {
        let dir = std::env::temp_dir().join(format!("gate64-crl-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("clients.crl");
        std::fs::write(&path, two_crls_pem()).expect("write");
        let stats = IpsecStats::default();
        let now = unix_secs(SystemTime::now());
        note_iphttps_crls(std::slice::from_ref(&path), Some(&stats));
        assert_eq!(stats.iphttps_crls_expired(now), 1);
        assert_eq!(stats.crls_expired(now), 0, "ipsec.crls are another list");
        std::fs::write(&path, "not a CRL").expect("write");
        note_iphttps_crls(std::slice::from_ref(&path), Some(&stats));
        assert_eq!(stats.iphttps_crls_expired(now), 1, "kept");
        note_iphttps_crls(&[], Some(&stats));
        assert_eq!(stats.iphttps_crls_expired(now), 0, "none configured now");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_changed_modification_time_reads_the_files_again() {
        let dir = std::env::temp_dir().join(format!("gate64-crl-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("ca.crl");
        std::fs::write(&path, "not a CRL").expect("write");
        let mut w = Watch {
            files: FileTimes::new(std::slice::from_ref(&path)),
            refuse_expired: false,
            period: Duration::from_secs(10),
        };
        assert!(w.changed().is_none(), "nothing changed");
        let later = SystemTime::now() + Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(later))
            .expect("set mtime");
        let e = w.changed().expect("changed").expect_err("garbage");
        assert!(format!("{e:#}").contains("ipsec.crls"), "{e:#}");
        assert!(w.changed().is_none(), "seen once");
        std::fs::remove_file(&path).expect("remove");
        assert!(w.changed().expect("vanished").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
