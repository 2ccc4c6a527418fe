//! Where the daemon's control socket is.

use anyhow::Result;
use gate64_config::Config;
use std::path::PathBuf;

/// The control socket: `socket`, else `control.socket` of the file `config`, else the
/// default.
pub(crate) fn control_socket(socket: Option<PathBuf>, config: Option<PathBuf>) -> Result<PathBuf> {
    Ok(match (socket, config) {
        (Some(s), _) => s,
        (None, Some(file)) => Config::load(&file)?.control.socket,
        (None, None) => PathBuf::from(gate64_config::defaults::CONTROL_SOCKET),
    })
}
