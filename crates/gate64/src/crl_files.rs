//! CRL files (`ipsec.crls`): read from disk here, parsed by the IKE crate, which reads no file.

use anyhow::{Context, Result};
use gate64_ike::auth::Crl;
use std::path::PathBuf;
use std::time::SystemTime;
use tracing::warn;

/// Reads and parses every file of `paths` (PEM or DER), naming `key` and the file in errors.
/// A CRL past its nextUpdate is warned about here; whether it still counts is the caller's
/// `crl_expired` rule.
pub fn read(key: &str, paths: &[PathBuf]) -> Result<Vec<Crl>> {
    let now = SystemTime::now();
    let mut out = Vec::new();
    for path in paths {
        let data =
            std::fs::read(path).with_context(|| format!("reading `{key}` ({})", path.display()))?;
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
