//! Append-only logs of one JSON line per record (the NAT64 binding log, the session log),
//! written off the path that produces the records.
//!
//! Producers only push a small record into a bounded channel; a thread of the log's own
//! formats and appends, so a slow disk never stalls a worker or the IKE driver. The channel
//! is bounded both in records and in bytes (each record weighed by its log's [`Weigh`], so a
//! few large records cannot hold what many small ones would); when either bound is reached
//! the record is counted as lost (and a warning logged once per burst) rather than blocking. The file is reopened on request (SIGHUP after logrotate moved it).
//! A log is created with mode 0640 whatever the umask, and an existing one that allows more
//! is narrowed to it when opened ([`MODE`]).

use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// How much may wait for the writer before producers start losing records.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// Records queued.
    records: usize,
    /// Their weight ([`Weigh`]) together.
    bytes: usize,
}

impl Bounds {
    const DEFAULT: Bounds = Bounds {
        records: 65_536,
        bytes: 16 << 20,
    };
}

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

/// The memory a queued record of type `T` holds, in bytes: its own size and what it points
/// to. The queue's byte bound is kept in these.
pub type Weigh<T> = fn(&T) -> usize;

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
    /// The weight of the records queued now.
    queued: Arc<AtomicUsize>,
    max_bytes: usize,
    weigh: Weigh<T>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender {
            tx: self.tx.clone(),
            lost: Arc::clone(&self.lost),
            name: self.name,
            queued: Arc::clone(&self.queued),
            max_bytes: self.max_bytes,
            weigh: self.weigh,
        }
    }
}

impl<T> Sender<T> {
    /// Queues `record`, stamped now; counts it as lost when the writer is behind (the queue
    /// holds as many records, or as many bytes, as it may).
    pub fn send(&self, record: T) {
        let weight = (self.weigh)(&record);
        let before = self.queued.fetch_add(weight, Ordering::Relaxed);
        if before.saturating_add(weight) > self.max_bytes {
            self.queued.fetch_sub(weight, Ordering::Relaxed);
            self.lose();
            return;
        }
        match self.tx.try_send(Item::Record(SystemTime::now(), record)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(weight, Ordering::Relaxed);
                self.lose();
            }
        }
    }

    fn lose(&self) {
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
/// the log's name in the daemon's own messages; `weigh` says what a queued record holds.
pub fn open<T: Send + 'static>(
    path: &Path,
    name: &'static str,
    thread: &str,
    format: Format<T>,
    weigh: Weigh<T>,
) -> io::Result<(Sender<T>, Handle)> {
    open_bounded(path, (name, thread), format, weigh, Bounds::DEFAULT)
}

fn open_bounded<T: Send + 'static>(
    path: &Path,
    (name, thread): (&'static str, &str),
    format: Format<T>,
    weigh: Weigh<T>,
    bounds: Bounds,
) -> io::Result<(Sender<T>, Handle)> {
    let file = append(path)?;
    let (tx, rx) = mpsc::sync_channel::<Item<T>>(bounds.records);
    let handle = Handle {
        lost: Arc::new(Lost::default()),
        reopen: Arc::new(Mutex::new(None)),
    };
    let reopen = Arc::clone(&handle.reopen);
    let shown = path.display().to_string();
    let queued = Arc::new(AtomicUsize::new(0));
    let writer = Writer {
        name,
        reopen,
        format,
        weigh,
        queued: Arc::clone(&queued),
    };
    std::thread::Builder::new()
        .name(thread.to_owned())
        .spawn(move || writer.run(file, shown, &rx))?;
    let sender = Sender {
        tx,
        lost: Arc::clone(&handle.lost),
        name,
        queued,
        max_bytes: bounds.bytes,
        weigh,
    };
    Ok((sender, handle))
}

/// The widest mode a log may have: owner read and write, group read. The lines name clients
/// (identities, addresses), so others get nothing whatever the umask.
pub const MODE: u32 = 0o640;

/// Opens `path` for appending, creating it with [`MODE`]. An existing file that allows more
/// than [`MODE`] is narrowed to it (a warning says so); one gate64 may not narrow (another
/// user's) is refused, naming the fix, rather than written to.
fn append(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let shown = path.display();
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(MODE)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("opening {shown}: {e}")))?;
    let mode = file
        .metadata()
        .map_err(|e| io::Error::new(e.kind(), format!("reading the mode of {shown}: {e}")))?
        .permissions()
        .mode()
        & 0o7777;
    if mode & !MODE != 0 {
        let narrowed = mode & MODE;
        file.set_permissions(std::fs::Permissions::from_mode(narrowed))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{shown} has mode {mode:04o}, more than a log naming clients may have \
                         ({MODE:04o}), and gate64 cannot narrow it: {e}; chmod {narrowed:04o} \
                         it or remove it"
                    ),
                )
            })?;
        tracing::warn!(
            path = %shown,
            "log had mode {mode:04o}; narrowed to {narrowed:04o} (the lines name clients)"
        );
    }
    Ok(file)
}

/// What the writer thread holds besides the file and the queue.
struct Writer<T> {
    name: &'static str,
    reopen: Arc<Mutex<Option<PathBuf>>>,
    format: Format<T>,
    weigh: Weigh<T>,
    queued: Arc<AtomicUsize>,
}

impl<T> Writer<T> {
    /// The writer thread: formats and appends records until every sender is gone, and reopens
    /// the file when asked.
    fn run(self, file: std::fs::File, mut shown: String, rx: &mpsc::Receiver<Item<T>>) {
        let Writer {
            name,
            reopen,
            format,
            weigh,
            queued,
        } = self;
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
                Ok(Item::Record(at, record)) => {
                    queued.fetch_sub(weigh(&record), Ordering::Relaxed);
                    (at, record)
                }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gate64-lines-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// A new log is 0640 even under umask 000. The umask is the process's, so the test runs
    /// itself again under a shell that set it, and looks at what that run created: the log,
    /// and beside it a plain file that shows the umask really was 000.
    #[test]
    fn a_new_log_is_0640_under_a_permissive_umask() {
        const CHILD: &str = "GATE64_TEST_OPEN_LOG_AT";
        if let Some(dir) = std::env::var_os(CHILD) {
            let dir = PathBuf::from(dir);
            std::fs::File::create(dir.join("plain")).unwrap();
            append(&dir.join("log.jsonl")).unwrap();
            return;
        }
        let dir = temp_dir("umask");
        let name = concat!(
            module_path!(),
            "::a_new_log_is_0640_under_a_permissive_umask"
        );
        let name = name.split_once("::").map_or(name, |(_, rest)| rest);
        let status = std::process::Command::new("sh")
            .args(["-c", "umask 000 && exec \"$0\" \"$@\""])
            .arg(std::env::current_exe().unwrap())
            .args([name, "--exact", "--test-threads=1"])
            .env(CHILD, &dir)
            .status()
            .unwrap();
        assert!(status.success(), "the run under umask 000: {status}");
        assert_eq!(mode_of(&dir.join("plain")), 0o666, "the umask was 000");
        assert_eq!(mode_of(&dir.join("log.jsonl")), 0o640);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Set while the test's writer is inside its format function, which waits while
    /// `HOLD` is set: the writer stands still with the queue as the test filled it.
    static INSIDE: AtomicU64 = AtomicU64::new(0);
    static HOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

    /// A test record: its text is its line.
    struct Text(String);

    fn held_format(out: &mut String, _: SystemTime, record: &Text) {
        INSIDE.fetch_add(1, Ordering::SeqCst);
        while HOLD.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        out.push_str(&record.0);
        out.push('\n');
    }

    /// Large records fill the queue's bytes long before its record count: past the byte
    /// bound a record is lost and counted; a small one still fits.
    #[test]
    fn the_queue_is_bounded_in_bytes() {
        let dir = temp_dir("bytes");
        let path = dir.join("log.jsonl");
        let bounds = Bounds {
            records: 1000,
            bytes: 10_000,
        };
        let weigh: Weigh<Text> = |t| t.0.len();
        let (tx, handle) = open_bounded(
            &path,
            ("test log", "gate64-test"),
            held_format,
            weigh,
            bounds,
        )
        .unwrap();
        // The writer takes the first record and stands still in its format function.
        tx.send(Text("first".to_owned()));
        while INSIDE.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let big = "x".repeat(3000);
        for _ in 0..5 {
            tx.send(Text(big.clone()));
        }
        assert_eq!(handle.lost().get(), 2, "three of 3000 bytes fit in 10,000");
        tx.send(Text("small".to_owned()));
        assert_eq!(handle.lost().get(), 2, "1,000 bytes are left");
        HOLD.store(false, Ordering::SeqCst);
        assert!(tx.flush(Duration::from_secs(10)));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 5, "first, three big, small");
        // Written records give their bytes back.
        for _ in 0..3 {
            tx.send(Text(big.clone()));
        }
        assert!(tx.flush(Duration::from_secs(10)));
        assert_eq!(handle.lost().get(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_existing_log_that_others_can_read_is_narrowed() {
        let dir = temp_dir("narrow");
        let path = dir.join("log.jsonl");
        std::fs::write(&path, "{}\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        append(&path).unwrap();
        assert_eq!(mode_of(&path), 0o640);
        // Narrower than 0640 stays as it is.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        append(&path).unwrap();
        assert_eq!(mode_of(&path), 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}\n", "kept");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
