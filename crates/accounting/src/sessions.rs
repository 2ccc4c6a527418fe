//! Reading a session log back: the lines of each session put together, for
//! `gate64 sessions`.

use crate::record::{Counts, EventKind, Line, Transport, Tunnel};
use crate::time::{parse_utc, rfc3339};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, SystemTime};

/// Which sessions to show.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Sessions still open at or after this time, and refusals from it on.
    pub since: Option<SystemTime>,
    /// Sessions and refusals whose identity contains this text (ignoring ASCII case), so
    /// `laptop-17` finds `CN=laptop-17,O=Example`.
    pub identity: Option<String>,
}

impl Filter {
    fn identity_matches(&self, identity: Option<&str>) -> bool {
        match &self.identity {
            None => true,
            Some(want) => identity.is_some_and(|have| {
                have.to_ascii_lowercase()
                    .contains(&want.to_ascii_lowercase())
            }),
        }
    }
}

/// One client session as the log tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Session {
    /// The session id.
    pub session: String,
    /// The authenticated identity.
    pub identity: Option<String>,
    /// How the client reached gate64.
    pub transport: Option<Transport>,
    /// Its outer address.
    pub outer: Option<Ipv6Addr>,
    /// Its IKE port.
    pub port: Option<u16>,
    /// Its inner addresses.
    pub inner: Vec<IpAddr>,
    /// When it connected (RFC 3339 UTC).
    pub since: String,
    /// When it went; `None` while connected (as far as the log tells).
    pub until: Option<String>,
    /// Seconds connected: to its disconnect, or to now while connected.
    pub duration_secs: u64,
    /// Why it went.
    pub reason: Option<String>,
    /// Bytes and packets of the whole session; known once it went.
    pub counts: Option<Counts>,
    /// The same per tunnel.
    pub per_tunnel: BTreeMap<Tunnel, Counts>,
    /// The tunnels it had.
    pub tunnels: Vec<Tunnel>,
}

/// A refused authentication as the log tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// When (RFC 3339 UTC).
    pub time: String,
    /// From where.
    pub source: Option<SocketAddr>,
    /// Why.
    pub reason: Option<String>,
    /// The identity claimed, when known.
    pub identity: Option<String>,
}

/// What [`read`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The sessions that match, oldest first.
    pub sessions: Vec<Session>,
    /// The refusals that match, oldest first.
    pub refused: Vec<Refusal>,
    /// Lines that were not records (a torn last line, another file's text).
    pub unreadable: usize,
}

/// Puts the sessions of `lines` (a session log, oldest first) together and keeps those
/// `filter` selects; `now` times the sessions still connected.
pub fn read<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    filter: &Filter,
    now: SystemTime,
) -> Report {
    let mut report = Report::default();
    let mut open: HashMap<String, Session> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut done: Vec<(usize, Session)> = Vec::new();
    for text in lines {
        if text.trim().is_empty() {
            continue;
        }
        let Some(line) = Line::parse(text) else {
            report.unreadable += 1;
            continue;
        };
        let Some(time) = parse_utc(&line.time) else {
            report.unreadable += 1;
            continue;
        };
        if line.event == EventKind::AuthRefused {
            if filter.since.is_none_or(|s| time >= s)
                && filter.identity_matches(line.identity.as_deref())
            {
                report.refused.push(Refusal {
                    time: line.time,
                    source: line.source,
                    reason: line.reason,
                    identity: line.identity,
                });
            }
            continue;
        }
        let Some(id) = line.session.clone() else {
            report.unreadable += 1;
            continue;
        };
        let session = open.entry(id.clone()).or_insert_with(|| {
            order.push(id.clone());
            Session {
                session: id.clone(),
                identity: None,
                transport: None,
                outer: None,
                port: None,
                inner: Vec::new(),
                since: line.time.clone(),
                until: None,
                duration_secs: 0,
                reason: None,
                counts: None,
                per_tunnel: BTreeMap::new(),
                tunnels: Vec::new(),
            }
        });
        merge(session, &line, time);
        if line.event == EventKind::Disconnect
            && let Some(s) = open.remove(&id)
        {
            let rank = order.iter().position(|o| *o == id).unwrap_or(usize::MAX);
            done.push((rank, s));
        }
    }
    let mut all: Vec<(usize, Session)> = done;
    for (rank, id) in order.iter().enumerate() {
        if let Some(mut s) = open.remove(id) {
            if let Some(since) = parse_utc(&s.since) {
                s.duration_secs = now.duration_since(since).unwrap_or_default().as_secs();
            }
            all.push((rank, s));
        }
    }
    all.sort_by_key(|(rank, _)| *rank);
    report.sessions = all
        .into_iter()
        .map(|(_, s)| s)
        .filter(|s| {
            let until = s.until.as_deref().and_then(parse_utc);
            filter
                .since
                .is_none_or(|since| until.is_none_or(|u| u >= since))
                && filter.identity_matches(s.identity.as_deref())
        })
        .collect();
    report
}

/// Takes what `line` tells about its session.
fn merge(s: &mut Session, line: &Line, time: SystemTime) {
    if line.identity.is_some() {
        s.identity.clone_from(&line.identity);
    }
    s.transport = line.transport.or(s.transport);
    s.outer = line.outer.or(s.outer);
    s.port = line.port.or(s.port);
    if !line.inner.is_empty() {
        s.inner.clone_from(&line.inner);
    }
    for t in line.tunnels.iter().chain(&line.tunnel) {
        if !s.tunnels.contains(t) {
            s.tunnels.push(*t);
        }
    }
    match line.event {
        EventKind::Connect => s.since.clone_from(&line.time),
        EventKind::Disconnect => {
            s.until = Some(line.time.clone());
            s.reason.clone_from(&line.reason);
            s.counts = line.counts;
            s.per_tunnel.clone_from(&line.per_tunnel);
            for t in line.per_tunnel.keys() {
                if !s.tunnels.contains(t) {
                    s.tunnels.push(*t);
                }
            }
            if let Some(d) = line.duration_secs {
                s.duration_secs = d;
                // The connect line may have been rotated away: the start follows from the
                // duration.
                if let Some(start) = time.checked_sub(Duration::from_secs(d)) {
                    s.since = rfc3339(start);
                }
            }
        }
        _ => {}
    }
    s.tunnels.sort();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::Tracker;
    use std::time::UNIX_EPOCH;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_796_083_200 + secs)
    }

    /// A log the tracker writes: two clients, one gone, one connected; a refusal.
    fn log() -> String {
        let mut t = Tracker::new(1);
        let a: SocketAddr = "[2001:0:4136:e378:8000:63bf:3fff:1]:4500".parse().unwrap();
        let b: SocketAddr = "[2001:db8:1:1::2]:4500".parse().unwrap();
        let outer = |p: SocketAddr| match p.ip() {
            IpAddr::V6(a) => a,
            IpAddr::V4(_) => unreachable!(),
        };
        t.ike_up(at(0), 1, a, "CN=alice,O=Example", Transport::Teredo, None);
        t.child_up(at(0), 0x100, outer(a), &[], Tunnel::Infrastructure);
        t.ike_up(at(10), 2, b, "CN=bob,O=Example", Transport::Iphttps, None);
        t.child_up(at(10), 0x200, outer(b), &[], Tunnel::Intranet);
        t.auth_refused(at(20), b, "revoked", Some("CN=mallory"));
        t.child_down(
            at(100),
            0x100,
            Counts {
                bytes_in: 5,
                ..Counts::default()
            },
        );
        t.ike_down(at(100), 1);
        let mut out = String::new();
        while let Some(l) = t.poll_line() {
            l.write_json(&mut out);
        }
        out
    }

    #[test]
    fn sessions_are_put_together_from_their_lines() {
        let text = log();
        let r = read(text.lines(), &Filter::default(), at(400));
        assert_eq!(r.unreadable, 0);
        assert_eq!(r.sessions.len(), 2);
        let alice = &r.sessions[0];
        assert_eq!(alice.identity.as_deref(), Some("CN=alice,O=Example"));
        assert_eq!(alice.duration_secs, 100);
        assert_eq!(alice.reason.as_deref(), Some("closed"));
        assert_eq!(alice.counts.map(|c| c.bytes_in), Some(5));
        let bob = &r.sessions[1];
        assert_eq!(bob.until, None);
        assert_eq!(bob.duration_secs, 390);
        assert_eq!(r.refused.len(), 1);
    }

    #[test]
    fn since_keeps_sessions_still_open_then() {
        let text = log();
        let f = Filter {
            since: Some(at(200)),
            identity: None,
        };
        let r = read(text.lines(), &f, at(400));
        assert_eq!(r.sessions.len(), 1, "{r:?}");
        assert_eq!(r.sessions[0].identity.as_deref(), Some("CN=bob,O=Example"));
        assert!(r.refused.is_empty());
    }

    #[test]
    fn identity_is_found_inside_the_subject_ignoring_case() {
        let text = log();
        let f = Filter {
            since: None,
            identity: Some("ALICE".into()),
        };
        let r = read(text.lines(), &f, at(400));
        assert_eq!(r.sessions.len(), 1);
        assert!(r.refused.is_empty());
    }

    #[test]
    fn a_session_whose_connect_was_rotated_away_reads_whole() {
        let text = log();
        let tail: Vec<&str> = text
            .lines()
            .filter(|l| !l.contains("\"connect\""))
            .collect();
        let r = read(tail, &Filter::default(), at(400));
        let alice = &r.sessions[0];
        assert_eq!(alice.since, rfc3339(at(0)));
        assert_eq!(
            alice.outer,
            "2001:0:4136:e378:8000:63bf:3fff:1".parse().ok()
        );
    }

    #[test]
    fn lines_that_are_not_records_are_counted_not_fatal() {
        let mut text = log();
        text.push_str("garbage\n{\"time\":\"x\",\"event\":\"connect\",\"session\":\"1\"}\n{\"time\":\"2026-12-01T00:00:00Z\",\"event\":\"connect\"}\n{\"time\":\"2026-12-01T00:00:00Z\",\"event\":\"dis");
        let r = read(text.lines(), &Filter::default(), at(400));
        assert_eq!(r.unreadable, 4);
        assert_eq!(r.sessions.len(), 2);
    }
}
