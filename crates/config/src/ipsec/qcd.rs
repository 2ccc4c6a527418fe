//! `[ipsec] qcd_secret_file`: reading and checking the Quick Crash Detection secret.

use super::*;

/// The shortest secret `[ipsec] qcd_secret_file` may hold, in bytes.
pub const QCD_MIN_SECRET_LEN: usize = 32;
/// The longest file `[ipsec] qcd_secret_file` may be, in bytes.
pub const QCD_MAX_SECRET_LEN: usize = 4096;
/// The key the Quick Crash Detection secret checks name.
const QCD_SECRET_FILE: &str = "ipsec.qcd_secret_file";

impl Config {
    /// The Quick Crash Detection secret (`[ipsec] qcd_secret_file`, one trailing newline not
    /// counted), `None` when the key is absent; refused, naming the key and why, when the file
    /// cannot be read or holds fewer than [`QCD_MIN_SECRET_LEN`]
    /// bytes. The error never shows the secret.
    pub fn qcd_secret(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        let Some(path) = &self.ipsec.qcd_secret_file else {
            return Ok(None);
        };
        check_readable_file(QCD_SECRET_FILE, path)?;
        let shown = || quote(&path.display().to_string());
        let len = std::fs::metadata(path)
            .map_err(|e| {
                invalid(
                    QCD_SECRET_FILE,
                    shown(),
                    format!("cannot read the file's size: {e}"),
                )
            })?
            .len();
        if len > QCD_MAX_SECRET_LEN as u64 {
            return Err(invalid(
                QCD_SECRET_FILE,
                shown(),
                format!("holds {len} bytes, more than {QCD_MAX_SECRET_LEN}: is it the right file?"),
            ));
        }
        let mut bytes = std::fs::read(path).map_err(|e| {
            invalid(
                QCD_SECRET_FILE,
                shown(),
                format!("cannot read the file: {e}"),
            )
        })?;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        if bytes.len() < QCD_MIN_SECRET_LEN {
            return Err(invalid(
                QCD_SECRET_FILE,
                shown(),
                format!(
                    "holds {} bytes of secret, fewer than {QCD_MIN_SECRET_LEN}; write a random \
                     one, e.g. `openssl rand -hex 32 > {}`, and copy it to both HA nodes",
                    bytes.len(),
                    path.display()
                ),
            ));
        }
        Ok(Some(bytes))
    }
}
