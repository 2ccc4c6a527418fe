//! The NAT64 binding log (RFC 6888 §4, what abuse desks ask a NAT operator for): one JSON line
//! per mapping creation and deletion, with UTC time, protocol and both transport addresses.
//!
//! Workers only push a small record; [`super::lines`]'s thread formats and writes it, so a
//! slow disk never stalls the data plane, and a record that finds the queue full is counted
//! as lost rather than blocking a worker.

use super::lines;
use gate64_dataplane::BindingLog;
use gate64_nat64::state::{Event, Proto};
use std::io;
use std::path::Path;
use std::time::SystemTime;

pub use super::lines::{Handle, Lost};
pub use gate64_accounting::time::rfc3339;

/// Opens `path` for appending and starts the writer thread; returns the sink for the
/// dataplane and the daemon's handle (its lost records are
/// `gate64_nat64_binding_log_lost_total`).
pub fn open(path: &Path) -> io::Result<(BindingLog, Handle)> {
    let (sender, handle) = lines::open(
        path,
        "NAT64 binding log",
        "gate64-bindlog",
        format_record,
        |_: &Event| std::mem::size_of::<Event>(),
    )?;
    let sink = BindingLog(std::sync::Arc::new(move |e: &Event| sender.send(*e)));
    Ok((sink, handle))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::time::{Duration, UNIX_EPOCH};

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
