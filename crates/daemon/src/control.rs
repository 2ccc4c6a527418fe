//! The control socket's server: `gate64 status`, `gate64 disconnect` and `gate64 ha` ask the running
//! daemon here, in the protocol of `gate64-control` (one request line, one JSON answer per
//! connection). The socket is created before the privilege drop with mode 0600 in a 0700
//! directory, and a peer that is neither root nor the daemon's own user is refused
//! (`SO_PEERCRED`), whatever the file mode says.

use crate::disconnect::{Ended, removed};
use anyhow::{Context, Result};
use gate64_control::{Disconnected, HaState, MAX_REQUEST, Promoted, Request, Snapshot, Target};
use gate64_ike::responder::DisconnectTarget;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The control socket's file as [`bind`] made it: removed by [`Bound::remove`] on a clean
/// stop, when it is still that file (same device, inode and change time: a file system may
/// hand a freed inode number to the next file), so a socket another daemon has bound at the
/// same path meanwhile stays.
pub struct Bound {
    path: PathBuf,
    file: FileId,
}

/// What tells one file from another at the same path.
type FileId = (u64, u64, i64, i64);

fn file_id(meta: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
}

impl Bound {
    /// Removes the socket file. `Ok(false)` when the path no longer holds this socket (gone,
    /// or another file now); an error when it could not be removed (after the privilege drop,
    /// a directory the daemon's user may not write to): the next start replaces it.
    pub fn remove(&self) -> std::io::Result<bool> {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if file_id(&meta) == self.file => {
                std::fs::remove_file(&self.path)?;
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Binds the control socket at `path`: its directory created (0700) when missing, a stale
/// socket replaced, the socket itself 0600. Call before the privilege drop.
pub fn bind(path: &Path) -> Result<(tokio::net::UnixListener, Bound)> {
    if let Some(dir) = path.parent()
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private", dir.display()))?;
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        anyhow::bail!("{} is in use: is another gate64 running?", path.display());
    }
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("binding the control socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} private", path.display()))?;
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("reading back the control socket {}", path.display()))?;
    let bound = Bound {
        path: path.to_owned(),
        file: file_id(&meta),
    };
    Ok((listener, bound))
}

/// What the control socket answers: the status snapshot and, for `gate64 disconnect`, the
/// IKE SAs it ended. Both block (they ask the IKE driver and wait for it).
#[derive(Clone)]
pub struct ControlHandlers {
    /// The current snapshot.
    pub read: Arc<dyn Fn() -> Snapshot + Send + Sync>,
    /// Ends the IKE SAs a target names, and the IP-HTTPS links of their clients; `None` when
    /// IPsec does not run or the driver did not answer.
    pub disconnect:
        Arc<dyn Fn(gate64_ike::responder::DisconnectTarget) -> Option<Ended> + Send + Sync>,
    /// Takes over the SAs the HA peer synced and says what was installed (`gate64 ha
    /// promote`, as SIGUSR1).
    pub ha_promote: Arc<dyn Fn() -> Promoted + Send + Sync>,
    /// The HA sync channel's state (`gate64 ha status`).
    pub ha_status: Arc<dyn Fn() -> HaState + Send + Sync>,
}

/// How long a peer has to send its request (a client that sends nothing gets the status).
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads one request line (up to [`MAX_REQUEST`] bytes, until a newline or the peer's end of
/// sending, within [`REQUEST_TIMEOUT`]).
async fn read_request(stream: &mut tokio::net::UnixStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
    while buf.len() < MAX_REQUEST && !buf.contains(&b'\n') {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
    String::from_utf8_lossy(line).trim().to_owned()
}

/// Answers every connection on `listener` until `stop` turns true. Peers other than root and
/// the daemon's own user are refused.
pub async fn serve(
    listener: tokio::net::UnixListener,
    handlers: ControlHandlers,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "control socket accept failed");
                    continue;
                }
            },
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        // Read at each connection: the privilege drop may change the daemon's user.
        let own = gate64_sys::process::geteuid();
        let allowed = stream
            .peer_cred()
            .is_ok_and(|c| c.uid() == 0 || c.uid() == own);
        if !allowed {
            tracing::warn!("control socket: refused a peer that is neither root nor gate64");
            continue;
        }
        let handlers = handlers.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            let request = read_request(&mut stream).await;
            // Both ask the IKE driver and wait: off the runtime's threads.
            let answer = tokio::task::spawn_blocking(move || answer(&request, &handlers)).await;
            let Ok(body) = answer else {
                return;
            };
            let _ = stream.write_all(&body).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// The daemon's answer to one request line (JSON): the snapshot, what a disconnect ended
/// (its refusal when the line names no target or IPsec does not run), what a takeover
/// installed, or the HA state.
pub fn answer(request: &str, handlers: &ControlHandlers) -> Vec<u8> {
    let body = match Request::parse(request) {
        Ok(Request::Status) => {
            let json = serde_json::to_vec(&(handlers.read)()).unwrap_or_default();
            // The snapshot listed every IKE SA and client in small blocks, now freed: give
            // their pages back, or a status of 100,000 clients leaves the RSS ~300 MB higher.
            gate64_sys::resource::release_free_heap();
            return json;
        }
        Ok(Request::HaPromote(pid)) => {
            let own = std::process::id();
            let promoted = match pid {
                Some(pid) if pid != own => Promoted::refused(format!(
                    "this control socket is gate64 pid {own}'s, not pid {pid}'s: nothing done"
                )),
                _ => (handlers.ha_promote)(),
            };
            return serde_json::to_vec(&promoted).unwrap_or_default();
        }
        Ok(Request::HaStatus) => {
            return serde_json::to_vec(&(handlers.ha_status)()).unwrap_or_default();
        }
        Err(e) if request.starts_with("ha ") => {
            return serde_json::to_vec(&Promoted::refused(e)).unwrap_or_default();
        }
        Ok(Request::Disconnect(target)) => match (handlers.disconnect)(ike_target(target)) {
            Some(ended) => Disconnected {
                removed: ended.ike_sas.iter().map(removed).collect(),
                links_closed: ended.links_closed.iter().map(|a| a.to_string()).collect(),
                error: None,
            },
            None => refused("IPsec is not running, or its driver did not answer".into()),
        },
        Err(e) => refused(e),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// A disconnect that ended nothing, and why.
fn refused(error: String) -> Disconnected {
    Disconnected {
        removed: Vec::new(),
        links_closed: Vec::new(),
        error: Some(error),
    }
}

/// The IKE driver's name for a disconnect target.
fn ike_target(target: Target) -> DisconnectTarget {
    match target {
        Target::Identity(id) => DisconnectTarget::Identity(id),
        Target::IkeSpi(spi) => DisconnectTarget::IkeSpi(spi),
        Target::All => DisconnectTarget::All,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gate64-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// The clean stop removes the socket it bound; a file another daemon bound at the path
    /// meanwhile is left alone.
    #[tokio::test]
    async fn the_stop_removes_the_socket_it_bound_and_only_that() {
        let dir = temp_dir("control-remove");
        let path = dir.join("sub").join("control.sock");
        let (listener, bound) = bind(&path).expect("bind in a new directory");
        assert!(path.exists());
        assert!(bound.remove().expect("removable"));
        assert!(!path.exists(), "the socket outlived the stop");
        assert!(!bound.remove().expect("already gone"));
        drop(listener);

        let (listener, bound) = bind(&path).expect("bind again");
        drop(listener);
        std::fs::remove_file(&path).expect("remove");
        // Past the file system's timestamp granularity, as a later daemon would be.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (_other, _other_bound) = bind(&path).expect("another daemon binds the path");
        assert!(!bound.remove().expect("not ours"));
        assert!(path.exists(), "the other daemon's socket was removed");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
