//! RADIUS accounting sessions from the session log's lines: one accounting session per
//! tunnel of a client (each of a DirectAccess client's tunnels is an IKE SA of its own, and
//! an IKE rekey keeps the tunnel), tied to the client's session by Acct-Multi-Session-Id.
//! A connect or tunnel_up starts one, a tunnel_down stops it with that tunnel's counters and
//! the reason as Acct-Terminate-Cause; [`Accountant::interim`] makes the Interim-Updates
//! from [`crate::Tracker::tunnel_counts`].

use crate::radius::{Request, StatusType, TerminateCause};
use crate::record::{EventKind, Line, Tunnel};
use crate::time::parse_utc;
use crate::tracker::TunnelCounts;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{SystemTime, UNIX_EPOCH};

/// The accounting sessions open now.
#[derive(Debug, Default)]
pub struct Accountant {
    open: HashMap<(String, Tunnel), Open>,
    /// The client's inner addresses by session, from its connect line.
    framed: HashMap<String, Vec<Ipv6Addr>>,
}

#[derive(Debug)]
struct Open {
    since: SystemTime,
    user: String,
    calling: String,
    class: Vec<Vec<u8>>,
}

impl Accountant {
    /// No session open.
    pub fn new() -> Accountant {
        Accountant::default()
    }

    /// The request `line` calls for: a Start, a Stop, or nothing.
    pub fn on_line(&mut self, line: &Line) -> Option<Request> {
        let at = parse_utc(&line.time)?;
        let session = line.session.clone()?;
        match line.event {
            EventKind::Connect => {
                let framed = line
                    .inner
                    .iter()
                    .filter_map(|a| match a {
                        IpAddr::V6(v6) => Some(*v6),
                        IpAddr::V4(_) => None,
                    })
                    .collect();
                self.framed.insert(session.clone(), framed);
                self.start(line, session, *line.tunnels.first()?, at)
            }
            EventKind::TunnelUp => self.start(line, session, line.tunnel?, at),
            EventKind::TunnelDown => {
                let tunnel = line.tunnel?;
                let open = self.open.remove(&(session.clone(), tunnel))?;
                let mut req = self.request(StatusType::Stop, &session, tunnel, &open, at);
                req.counts = line.counts;
                req.terminate = Some(TerminateCause::for_reason(
                    line.reason.as_deref().unwrap_or("closed"),
                ));
                Some(req)
            }
            EventKind::Disconnect => {
                // Its tunnels' stops came before it.
                self.framed.remove(&session);
                None
            }
            EventKind::AuthRefused => None,
        }
    }

    /// Interim-Updates for the tunnels of `counts` that are open, at `now`.
    pub fn interim(&self, counts: &[TunnelCounts], now: SystemTime) -> Vec<Request> {
        counts
            .iter()
            .filter_map(|c| {
                let open = self.open.get(&(c.session.clone(), c.tunnel))?;
                let mut req =
                    self.request(StatusType::InterimUpdate, &c.session, c.tunnel, open, now);
                req.counts = Some(c.counts);
                Some(req)
            })
            .collect()
    }

    /// Accounting sessions open.
    pub fn open(&self) -> usize {
        self.open.len()
    }

    fn start(
        &mut self,
        line: &Line,
        session: String,
        tunnel: Tunnel,
        at: SystemTime,
    ) -> Option<Request> {
        let open = Open {
            since: at,
            user: line.identity.clone().unwrap_or_default(),
            calling: line.outer.map(|a| a.to_string()).unwrap_or_default(),
            class: line.class.clone(),
        };
        let req = self.request(StatusType::Start, &session, tunnel, &open, at);
        self.open.insert((session, tunnel), open);
        Some(req)
    }

    fn request(
        &self,
        status: StatusType,
        session: &str,
        tunnel: Tunnel,
        open: &Open,
        at: SystemTime,
    ) -> Request {
        let elapsed = at.duration_since(open.since).unwrap_or_default().as_secs();
        Request {
            status,
            session_id: format!("{session}-{}", tunnel.as_str()),
            multi_session_id: session.to_owned(),
            user_name: open.user.clone(),
            calling_station: open.calling.clone(),
            framed: self.framed.get(session).cloned().unwrap_or_default(),
            class: open.class.clone(),
            session_time: (status != StatusType::Start)
                .then(|| u32::try_from(elapsed).unwrap_or(u32::MAX)),
            counts: None,
            terminate: None,
            event_time: at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Counts, Transport};
    use crate::tracker::Tracker;
    use std::net::SocketAddr;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_796_083_200 + secs)
    }

    #[test]
    fn each_tunnel_is_a_session_started_updated_and_stopped() {
        let mut t = Tracker::new(1);
        let mut a = Accountant::new();
        let peer: SocketAddr = "[2001:0:4136:e378:8000:63bf:3fff:1]:4500".parse().unwrap();
        let outer = "2001:0:4136:e378:8000:63bf:3fff:1".parse().unwrap();
        let inner = ["fd00:c1::5".parse().unwrap()];
        let mut requests = Vec::new();
        let feed = |t: &mut Tracker, a: &mut Accountant, out: &mut Vec<Request>| {
            while let Some(line) = t.poll_line() {
                out.extend(a.on_line(&line));
            }
        };
        t.ike_up(at(0), 1, peer, "CN=laptop", Transport::Teredo);
        t.child_up(at(0), 0x100, outer, &inner, Tunnel::Infrastructure);
        t.ike_up(at(1), 2, peer, "CN=laptop", Transport::Teredo);
        t.child_up(at(1), 0x101, outer, &inner, Tunnel::Intranet);
        feed(&mut t, &mut a, &mut requests);
        assert_eq!(requests.len(), 2);
        assert!(requests.iter().all(|r| r.status == StatusType::Start));
        assert_eq!(requests[0].session_id, "0000000100000001-infrastructure");
        assert_eq!(requests[1].session_id, "0000000100000001-intranet");
        assert!(
            requests
                .iter()
                .all(|r| r.multi_session_id == "0000000100000001")
        );
        assert!(requests.iter().all(|r| r.user_name == "CN=laptop"));
        assert_eq!(
            requests[1].framed,
            ["fd00:c1::5".parse::<Ipv6Addr>().unwrap()]
        );

        let live = |c: crate::tracker::LiveChild| Counts {
            bytes_in: u64::from(c.inbound_spi),
            ..Counts::default()
        };
        let interim = a.interim(&t.tunnel_counts(live), at(300));
        assert_eq!(interim.len(), 2);
        assert!(
            interim
                .iter()
                .all(|r| r.status == StatusType::InterimUpdate)
        );
        let infra = interim
            .iter()
            .find(|r| r.session_id.ends_with("infrastructure"))
            .unwrap();
        assert_eq!(infra.session_time, Some(300));
        assert_eq!(infra.counts.map(|c| c.bytes_in), Some(0x100));

        requests.clear();
        t.ike_ended(2, "admin");
        t.child_down(
            at(400),
            0x101,
            Counts {
                bytes_in: 9,
                ..Counts::default()
            },
        );
        t.ike_down(at(400), 2);
        t.child_down(at(401), 0x100, Counts::default());
        t.ike_down(at(401), 1);
        feed(&mut t, &mut a, &mut requests);
        assert_eq!(requests.len(), 2);
        assert!(requests.iter().all(|r| r.status == StatusType::Stop));
        assert_eq!(requests[0].terminate, Some(TerminateCause::AdminReset));
        assert_eq!(requests[0].counts.map(|c| c.bytes_in), Some(9));
        assert_eq!(requests[0].session_time, Some(399));
        assert_eq!(requests[1].terminate, Some(TerminateCause::UserRequest));
        assert_eq!(a.open(), 0);
    }

    /// The Class attributes of the session's Access-Accept go out in its Start,
    /// Interim-Update and Stop, every one in order (RFC 2865 §5.25).
    #[test]
    fn class_is_echoed_in_every_request_of_the_session() {
        let mut t = Tracker::new(1);
        let mut a = Accountant::new();
        let peer: SocketAddr = "[2001:db8::7]:4500".parse().unwrap();
        let outer = "2001:db8::7".parse().unwrap();
        let class = vec![b"grp-a".to_vec(), vec![0, 0xff]];
        let mut requests = Vec::new();
        t.ike_up(at(0), 1, peer, "eap:alice", Transport::Native);
        t.authorize(1, &class);
        t.child_up(at(0), 0x100, outer, &[], Tunnel::Intranet);
        // Another client, not authorized by RADIUS: no Class.
        let other: SocketAddr = "[2001:db8::8]:4500".parse().unwrap();
        t.ike_up(at(0), 2, other, "CN=laptop", Transport::Native);
        t.child_up(
            at(0),
            0x200,
            "2001:db8::8".parse().unwrap(),
            &[],
            Tunnel::Intranet,
        );
        while let Some(line) = t.poll_line() {
            requests.extend(a.on_line(&line));
        }
        let interim = a.interim(&t.tunnel_counts(|_| Counts::default()), at(60));
        requests.extend(interim);
        t.child_down(at(90), 0x100, Counts::default());
        t.ike_down(at(90), 1);
        while let Some(line) = t.poll_line() {
            requests.extend(a.on_line(&line));
        }
        let alice: Vec<&Request> = requests
            .iter()
            .filter(|r| r.user_name == "eap:alice")
            .collect();
        let statuses: Vec<StatusType> = alice.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [
                StatusType::Start,
                StatusType::InterimUpdate,
                StatusType::Stop
            ]
        );
        assert!(alice.iter().all(|r| r.class == class), "{alice:?}");
        assert!(
            requests
                .iter()
                .filter(|r| r.user_name == "CN=laptop")
                .all(|r| r.class.is_empty())
        );
    }
}
