//! Append-only logs of one JSON line per record (the NAT64 binding log, the session log),
//! written off the path that produces the records.
//!
//! Producers only push a small record into a bounded channel; a thread of the log's own
//! formats and appends, so a slow disk never stalls a worker or the IKE driver. When the
//! channel is full the record is counted as lost (and a warning logged once per burst)
//! rather than blocking. The file is reopened on request (SIGHUP after logrotate moved it).

use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// Records queued for the writer before producers start losing them.
const QUEUE: usize = 65_536;

/// Records that could not be queued (the writer fell behind).
#[derive(Debug, Default)]
pub struct Lost(AtomicU64);

impl Lost {
    /// How many records were lost so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A running log, for the daemon: its lost-record counter and a way to reopen the file.
#[derive(Debug, Clone)]
pub struct Handle {
    lost: Arc<Lost>,
    reopen: Arc<Mutex<Option<PathBuf>>>,
}

impl Handle {
    /// The records lost so far.
    pub fn lost(&self) -> Arc<Lost> {
        Arc::clone(&self.lost)
    }

    /// Asks the writer to close the file and open `path` (the same one after a rotation),
    /// within a second. Records queued meanwhile go to the new file; if it cannot be opened
    /// the old one is kept and the error logged.
    pub fn reopen(&self, path: &Path) {
        *self.reopen.lock().unwrap_or_else(PoisonError::into_inner) = Some(path.to_owned());
    }
}

/// How a record of type `T` becomes its line (the newline included), given when it was
/// queued.
pub type Format<T> = fn(&mut String, SystemTime, &T);

/// What goes through the queue: a record stamped when it was queued, or a request to write
/// out everything queued before it.
#[derive(Debug)]
enum Item<T> {
    Record(SystemTime, T),
    Flush(mpsc::Sender<()>),
}

/// Where producers put records; the writer thread ends once every clone is dropped.
#[derive(Debug)]
pub struct Sender<T> {
    tx: SyncSender<Item<T>>,
    lost: Arc<Lost>,
    name: &'static str,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender {
            tx: self.tx.clone(),
            lost: Arc::clone(&self.lost),
            name: self.name,
        }
    }
}

impl<T> Sender<T> {
    /// Queues `record`, stamped now; counts it as lost when the writer is behind.
    pub fn send(&self, record: T) {
        match self.tx.try_send(Item::Record(SystemTime::now(), record)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                if self
                    .lost
                    .0
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(10_000)
                {
                    tracing::warn!(
                        log = self.name,
                        "log writer is behind; records are being lost"
                    );
                }
            }
        }
    }
}

impl<T> Sender<T> {
    /// Waits until every record queued before this call is written to the file (the daemon
    /// stops: the last lines must not die with the process). False when the writer did not
    /// answer within `timeout`.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (done, wait) = mpsc::channel();
        let deadline = std::time::Instant::now() + timeout;
        let mut item = Item::Flush(done);
        loop {
            match self.tx.try_send(item) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) => {
                    if std::time::Instant::now() >= deadline {
                        return false;
                    }
                    item = back;
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        wait.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .is_ok()
    }
}

/// Opens `path` for appending and starts the writer thread (`thread` names it). `name` is
/// the log's name in the daemon's own messages.
pub fn open<T: Send + 'static>(
    path: &Path,
    name: &'static str,
    thread: &str,
    format: Format<T>,
) -> io::Result<(Sender<T>, Handle)> {
    let file = append(path)?;
    let (tx, rx) = mpsc::sync_channel::<Item<T>>(QUEUE);
    let handle = Handle {
        lost: Arc::new(Lost::default()),
        reopen: Arc::new(Mutex::new(None)),
    };
    let reopen = Arc::clone(&handle.reopen);
    let shown = path.display().to_string();
    std::thread::Builder::new()
        .name(thread.to_owned())
        .spawn(move || write_records(file, shown, name, &rx, &reopen, format))?;
    let sender = Sender {
        tx,
        lost: Arc::clone(&handle.lost),
        name,
    };
    Ok((sender, handle))
}

fn append(path: &Path) -> io::Result<std::fs::File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", path.display())))
}

/// The writer thread: formats and appends records until every sender is gone, and reopens
/// the file when asked.
fn write_records<T>(
    file: std::fs::File,
    mut shown: String,
    name: &'static str,
    rx: &mpsc::Receiver<Item<T>>,
    reopen: &Mutex<Option<PathBuf>>,
    format: Format<T>,
) {
    let mut out = BufWriter::new(file);
    let mut line = String::with_capacity(256);
    loop {
        let asked = reopen.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(path) = asked {
            let _ = out.flush();
            match append(&path) {
                Ok(f) => {
                    out = BufWriter::new(f);
                    shown = path.display().to_string();
                    tracing::info!(log = name, path = %shown, "log reopened");
                }
                Err(e) => {
                    tracing::error!(log = name, error = %e, "log not reopened; still writing the old file")
                }
            }
        }
        // Flush when the queue runs dry, so lines reach the disk within a second.
        let (at, record) = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(Item::Record(at, record)) => (at, record),
            Ok(Item::Flush(done)) => {
                let _ = out.flush();
                let _ = done.send(());
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = out.flush();
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        line.clear();
        format(&mut line, at, &record);
        if let Err(e) = out.write_all(line.as_bytes()) {
            crate::log_limited!(error, log = name, path = %shown, error = %e, "log write failed");
        }
    }
    let _ = out.flush();
}
