//! The client side: connect to the daemon's control socket, send one request, read its
//! answer.

use crate::{Disconnected, HaState, Promoted, Request, Snapshot, Target};
use anyhow::{Context, Result};
use std::io::{Read as _, Write as _};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Sends `line` on the control socket at `socket`, ends the sending side and returns the
/// daemon's whole answer.
pub fn request_line(socket: &Path, line: &str) -> Result<Vec<u8>> {
    let mut stream = UnixStream::connect(socket).with_context(|| {
        format!(
            "connecting to {} (is gate64 serving? the control socket needs root; see \
             `control.socket`)",
            socket.display()
        )
    })?;
    stream
        .write_all(format!("{line}\n").as_bytes())
        .context("sending the request")?;
    stream
        .shutdown(Shutdown::Write)
        .context("sending the request")?;
    let mut body = Vec::new();
    stream
        .read_to_end(&mut body)
        .context("reading the answer")?;
    Ok(body)
}

/// The daemon's status snapshot.
pub fn status(socket: &Path) -> Result<Snapshot> {
    let body = request_line(socket, &Request::Status.line())?;
    serde_json::from_slice(&body).context("the daemon's answer is not a status snapshot")
}

/// Asks the daemon to end what `target` names; its answer, which may carry its refusal.
pub fn disconnect(socket: &Path, target: Target) -> Result<Disconnected> {
    let body = request_line(socket, &Request::Disconnect(target).line())?;
    serde_json::from_slice(&body).context("the daemon's answer is not a disconnect result")
}

/// Asks the daemon to take over the SAs its HA peer synced (only the daemon of process id
/// `pid`, when given); what it installed, or why not.
pub fn ha_promote(socket: &Path, pid: Option<u32>) -> Result<Promoted> {
    let body = request_line(socket, &Request::HaPromote(pid).line())?;
    serde_json::from_slice(&body)
        .context("the daemon's answer is not a takeover result (a gate64 without `gate64 ha`?)")
}

/// The daemon's HA sync channel state.
pub fn ha_status(socket: &Path) -> Result<HaState> {
    let body = request_line(socket, &Request::HaStatus.line())?;
    serde_json::from_slice(&body)
        .context("the daemon's answer is not an HA state (a gate64 without `gate64 ha`?)")
}
