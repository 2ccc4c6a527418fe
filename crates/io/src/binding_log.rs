//! The NAT64 binding log (RFC 6888 §4, what abuse desks ask a NAT operator for): one JSON line
//! per mapping creation and deletion, with UTC time, protocol and both transport addresses.
//!
//! Workers only push a small record into a bounded channel; a dedicated thread formats and
//! writes, so a slow disk never stalls the data plane. When the channel is full the record is
//! counted as lost (and a warning logged once per burst) rather than blocking a worker.

use gate64_dataplane::BindingLog;
use gate64_nat64::state::{Event, Proto};
use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Records queued for the writer before workers start losing them.
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

/// The running binding log, for the daemon: its lost-record counter and a way to reopen the
/// file (SIGHUP, after logrotate moved it away).
#[derive(Debug, Clone)]
pub struct Handle {
    lost: Arc<Lost>,
    reopen: Arc<Mutex<Option<PathBuf>>>,
}

impl Handle {
    /// The records lost so far (`gate64_nat64_binding_log_lost_total`).
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

/// Opens `path` for appending and starts the writer thread; returns the sink for the
/// dataplane and the daemon's handle.
pub fn open(path: &Path) -> io::Result<(BindingLog, Handle)> {
    let file = append(path)?;
    let (tx, rx) = mpsc::sync_channel::<(SystemTime, Event)>(QUEUE);
    let handle = Handle {
        lost: Arc::new(Lost::default()),
        reopen: Arc::new(Mutex::new(None)),
    };
    let reopen = Arc::clone(&handle.reopen);
    let shown = path.display().to_string();
    std::thread::Builder::new()
        .name("gate64-bindlog".into())
        .spawn(move || write_records(file, shown, &rx, &reopen))?;
    let sink_lost = Arc::clone(&handle.lost);
    let sink = BindingLog(Arc::new(move |e: &Event| {
        send(&tx, &sink_lost, *e);
    }));
    Ok((sink, handle))
}

fn append(path: &Path) -> io::Result<std::fs::File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", path.display())))
}

/// The writer thread: formats and appends records until every sink is gone, and reopens the
/// file when asked.
fn write_records(
    file: std::fs::File,
    mut shown: String,
    rx: &mpsc::Receiver<(SystemTime, Event)>,
    reopen: &Mutex<Option<PathBuf>>,
) {
    let mut out = BufWriter::new(file);
    let mut line = String::with_capacity(160);
    loop {
        let asked = reopen.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(path) = asked {
            let _ = out.flush();
            match append(&path) {
                Ok(f) => {
                    out = BufWriter::new(f);
                    shown = path.display().to_string();
                    tracing::info!(path = %shown, "NAT64 binding log reopened");
                }
                Err(e) => {
                    tracing::error!(error = %e, "NAT64 binding log not reopened; still writing the old file")
                }
            }
        }
        // Flush when the queue runs dry, so lines reach the disk within a second.
        let rec = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = out.flush();
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        line.clear();
        format_record(&mut line, rec.0, &rec.1);
        if let Err(e) = out.write_all(line.as_bytes()) {
            crate::log_limited!(error, path = %shown, error = %e, "binding log write failed");
        }
    }
    let _ = out.flush();
}

fn send(tx: &SyncSender<(SystemTime, Event)>, lost: &Lost, e: Event) {
    match tx.try_send((SystemTime::now(), e)) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
            if lost
                .0
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(10_000)
            {
                tracing::warn!("NAT64 binding log is behind; records are being lost");
            }
        }
    }
}

/// One JSON line: `{"time":"…Z","event":"created","proto":"udp","ipv6":"[…]:p","ipv4":"a:p"}`.
pub fn format_record(out: &mut String, at: SystemTime, e: &Event) {
    use std::fmt::Write as _;
    let (event, proto, v6, v4) = match *e {
        Event::BibCreated { proto, v6, v4 } => ("created", proto, v6, v4),
        Event::BibDeleted { proto, v6, v4 } => ("deleted", proto, v6, v4),
    };
    let proto = match proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
        Proto::Icmp => "icmp",
    };
    let _ = writeln!(
        out,
        r#"{{"time":"{}","event":"{event}","proto":"{proto}","ipv6":"[{}]:{}","ipv4":"{}:{}"}}"#,
        rfc3339(at),
        v6.0,
        v6.1,
        v4.0,
        v4.1
    );
}

/// UTC time as RFC 3339 with milliseconds (`2026-11-30T05:01:02.345Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2000-03-01 (after a leap day in a century leap year) and 2026-11-30 12:34:56.789.
        let t = UNIX_EPOCH + Duration::from_secs(951_868_800);
        assert_eq!(rfc3339(t), "2000-03-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_042_096_789);
        assert_eq!(rfc3339(t), "2026-11-30T12:34:56.789Z");
    }

    #[test]
    fn record_is_one_json_line_with_both_transport_addresses() {
        let mut s = String::new();
        let e = Event::BibCreated {
            proto: Proto::Udp,
            v6: ("2001:db8::5".parse::<Ipv6Addr>().unwrap(), 40000),
            v4: (Ipv4Addr::new(192, 0, 2, 10), 61001),
        };
        format_record(&mut s, UNIX_EPOCH, &e);
        assert_eq!(
            s,
            "{\"time\":\"1970-01-01T00:00:00.000Z\",\"event\":\"created\",\"proto\":\"udp\",\
             \"ipv6\":\"[2001:db8::5]:40000\",\"ipv4\":\"192.0.2.10:61001\"}\n"
        );
    }

    /// logrotate's way: the file is renamed, the daemon told to reopen; later records go to
    /// a new file at the old path, none is lost.
    #[test]
    fn reopen_after_rotation_writes_a_new_file() {
        let dir = std::env::temp_dir().join(format!("gate64-bindlog-rot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.jsonl");
        let rotated = dir.join("b.jsonl.1");
        let (sink, handle) = open(&path).unwrap();
        let record = |port| Event::BibCreated {
            proto: Proto::Udp,
            v6: (Ipv6Addr::LOCALHOST, port),
            v4: (Ipv4Addr::LOCALHOST, port),
        };
        let read_until = |p: &Path, needle: &str| {
            for _ in 0..200 {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                if text.contains(needle) {
                    return text;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            std::fs::read_to_string(p).unwrap_or_default()
        };
        (sink.0)(&record(1111));
        assert!(read_until(&path, ":1111").contains(":1111"));
        std::fs::rename(&path, &rotated).unwrap();
        handle.reopen(&path);
        // Until the writer has reopened, records may still land in the rotated file.
        let new = (0..200).find_map(|_| {
            (sink.0)(&record(2222));
            std::thread::sleep(Duration::from_millis(20));
            std::fs::read_to_string(&path)
                .ok()
                .filter(|t| t.contains(":2222"))
        });
        let new = new.expect("records reach a new file at the old path");
        assert!(!new.contains(":1111"), "{new}");
        assert!(std::fs::read_to_string(&rotated).unwrap().contains(":1111"));
        assert_eq!(handle.lost().get(), 0);
        drop(sink);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn file_gets_the_lines() {
        let dir = std::env::temp_dir().join(format!("gate64-bindlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.jsonl");
        let (sink, handle) = open(&path).unwrap();
        let lost = handle.lost();
        let e = Event::BibDeleted {
            proto: Proto::Tcp,
            v6: (Ipv6Addr::LOCALHOST, 1),
            v4: (Ipv4Addr::LOCALHOST, 2),
        };
        (sink.0)(&e);
        drop(sink);
        // The writer exits once the sink is gone, flushing on the way out.
        let mut text = String::new();
        for _ in 0..100 {
            text = std::fs::read_to_string(&path).unwrap_or_default();
            if !text.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(text.contains("\"event\":\"deleted\""), "{text:?}");
        assert_eq!(lost.get(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
