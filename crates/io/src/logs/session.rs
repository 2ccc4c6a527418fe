//! The session log (`[accounting] log`): the lines of the daemon's session tracker
//! ([`gate64_accounting::Tracker`]), one JSON object each, written by [`super::lines`]'s
//! thread so that a slow disk never stalls the IKE driver.

use super::lines::{self, Handle, Sender};
use gate64_accounting::Line;
use std::io;
use std::path::Path;
use std::time::SystemTime;

/// Opens `path` for appending and starts its writer; lines sent to the returned sender
/// are appended in order (its lost records are `gate64_session_log_lost_total`).
pub fn open(path: &Path) -> io::Result<(Sender<Line>, Handle)> {
    lines::open(path, "session log", "gate64-sessions", format_line, weigh)
}

/// What a queued line holds: the struct and its strings and lists.
fn weigh(line: &Line) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
    std::mem::size_of::<Line>()
        + line.time.capacity()
        + text(&line.session)
        + text(&line.identity)
        + text(&line.reason)
        + line.inner.capacity() * std::mem::size_of::<std::net::IpAddr>()
        + line.tunnels.capacity()
        + line.per_tunnel.len() * 64
}

/// The line carries its own time (the event's, not the queueing's).
fn format_line(out: &mut String, _queued: SystemTime, line: &Line) {
    line.write_json(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_accounting::EventKind;
    use std::time::Duration;

    #[test]
    fn lines_reach_the_file_and_a_reopen_follows_a_rotation() {
        let dir = std::env::temp_dir().join(format!("gate64-sessionlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sessions.jsonl");
        let rotated = dir.join("sessions.jsonl.1");
        let (tx, handle) = open(&path).unwrap();
        let line = |reason: &str| {
            let mut l = Line::new("2026-12-02T00:00:00.000Z".into(), EventKind::AuthRefused);
            l.reason = Some(reason.to_owned());
            l
        };
        let wait_for = |p: &Path, needle: &str| {
            (0..250).any(|_| {
                let found = std::fs::read_to_string(p).is_ok_and(|t| t.contains(needle));
                if !found {
                    std::thread::sleep(Duration::from_millis(20));
                }
                found
            })
        };
        tx.send(line("first"));
        assert!(wait_for(&path, "\"first\""));
        std::fs::rename(&path, &rotated).unwrap();
        handle.reopen(&path);
        let reopened = (0..250).any(|_| {
            tx.send(line("second"));
            std::thread::sleep(Duration::from_millis(20));
            std::fs::read_to_string(&path).is_ok_and(|t| t.contains("\"second\""))
        });
        assert!(reopened, "lines reach a new file at the old path");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.lines().all(|l| Line::parse(l).is_some()), "{text}");
        assert_eq!(handle.lost().get(), 0);
        tx.send(line("last"));
        assert!(
            tx.flush(Duration::from_secs(10)),
            "the writer answers a flush"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("\"last\""),
            "a flush writes what was queued before it: {text}"
        );
        drop(tx);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
