//! Client sessions from the IKE responder's events: the sans-IO core of the session log.
//!
//! A client is its outer address. Its session starts at its first child SA (it can send
//! then; the IKE SA before it is only authentication) and ends when its last IKE SA and
//! last child SA are gone; a tunnel is up while at least one of its child SAs is installed,
//! so a rekey (the new SA installed before the old one goes) neither ends a tunnel nor
//! starts one. An IKE SA that never got a child SA leaves no line.
//!
//! Byte counts come in with each child SA as it is removed (its final counters), so a
//! session's totals are the sum over every child SA it had, rekeyed ones included. The
//! driver feeds events in the order the responder reports them and reads the lines with
//! [`Tracker::poll_line`]; nothing here does I/O or reads a clock.

use crate::record::{Counts, EventKind, Line, Transport, Tunnel};
use crate::time::rfc3339;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::SystemTime;

/// Why a client's session ended when nothing more specific is known: the client deleted its
/// IKE SA, or went silent and failed the liveness checks.
pub const REASON_CLOSED: &str = "closed";

/// Lines waiting for the driver beyond which the oldest are dropped (and counted): the
/// driver drains after every event, so only a driver that stopped reading reaches it.
const MAX_PENDING: usize = 4096;

/// The most bytes of a refused client's claimed identity a line keeps. The IDi is whatever
/// the client sent, unverified, up to an IKE message's size; a longer one keeps its first
/// bytes (whole characters) and is marked ([`claimed_identity`]).
pub const MAX_CLAIMED_IDENTITY: usize = 256;

/// Refusal lines written at once before the rate limit applies.
const REFUSAL_BURST: u64 = 50;
/// Refusal lines per second in the long run; the rest are counted
/// ([`Tracker::refusals_suppressed`]), not written, so that a flood of failing IKE_AUTHs
/// cannot fill the disk.
const REFUSALS_PER_SEC: u64 = 5;

/// The sessions of the connected clients.
#[derive(Debug)]
pub struct Tracker {
    sessions: HashMap<Ipv6Addr, Session>,
    /// IKE SAs by our SPI: the client they belong to, and why the responder ended them
    /// (set between `ike_ended` and `ike_down`).
    ike: HashMap<u64, IkeSa>,
    /// Child SAs by our inbound SPI.
    children: HashMap<u32, Child>,
    id_prefix: u32,
    next_id: u32,
    pending: VecDeque<Line>,
    dropped: u64,
    refusals: RefusalBudget,
}

/// A token bucket for refusal lines, in thousandths of a line.
#[derive(Debug)]
struct RefusalBudget {
    millis: u64,
    last: Option<SystemTime>,
    suppressed: u64,
}

impl RefusalBudget {
    const FULL: u64 = REFUSAL_BURST * 1000;

    fn new() -> RefusalBudget {
        RefusalBudget {
            millis: Self::FULL,
            last: None,
            suppressed: 0,
        }
    }

    /// Whether a refusal at `at` may be written; counts it as suppressed when not. A clock
    /// that steps back refills nothing.
    fn take(&mut self, at: SystemTime) -> bool {
        if let Some(last) = self.last {
            let elapsed = at.duration_since(last).unwrap_or_default();
            let refill = u64::try_from(elapsed.as_millis())
                .unwrap_or(u64::MAX)
                .saturating_mul(REFUSALS_PER_SEC);
            self.millis = self.millis.saturating_add(refill).min(Self::FULL);
        }
        if self.last.is_none_or(|last| at > last) {
            self.last = Some(at);
        }
        match self.millis.checked_sub(1000) {
            Some(left) => {
                self.millis = left;
                true
            }
            None => {
                self.suppressed += 1;
                false
            }
        }
    }
}

#[derive(Debug)]
struct IkeSa {
    outer: Ipv6Addr,
    ended: Option<String>,
}

#[derive(Debug)]
struct Child {
    outer: Ipv6Addr,
    tunnel: Tunnel,
}

#[derive(Debug)]
struct Session {
    id: String,
    since: SystemTime,
    identity: String,
    transport: Transport,
    outer: Ipv6Addr,
    port: u16,
    inner: Vec<IpAddr>,
    /// A connect line was written (the first child SA came).
    announced: bool,
    ike_sas: u32,
    /// Child SAs installed, per tunnel.
    live: [u32; 2],
    /// Counts of the child SAs removed so far, per tunnel.
    totals: [Counts; 2],
    /// Tunnels the session ever had.
    had: [bool; 2],
    /// Why its last IKE SA to go went.
    reason: Option<String>,
    /// Why an IKE SA of it is ending now (between the responder's end and that IKE SA's
    /// down): the reason of the tunnel that goes down meanwhile.
    ending: Option<String>,
    /// The RADIUS Class attributes of its authorization ([`Tracker::authorize`]).
    class: Vec<Vec<u8>>,
}

/// One tunnel's counters so far ([`Tracker::tunnel_counts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelCounts {
    /// The session id.
    pub session: String,
    /// Which tunnel.
    pub tunnel: Tunnel,
    /// Its counters so far.
    pub counts: Counts,
}

/// A session a Dynamic Authorization request names ([`Tracker::find`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The session id (Acct-Multi-Session-Id).
    pub session: String,
    /// Its identity (User-Name).
    pub identity: String,
    /// The client's outer address (Calling-Station-Id).
    pub outer: Ipv6Addr,
    /// The one tunnel named (by Acct-Session-Id); `None`: all of them.
    pub tunnel: Option<Tunnel>,
    /// Its IKE SAs (our SPIs) not already ending.
    pub ike_spis: Vec<u64>,
}

/// Whether Calling-Station-Id `text` is `outer`: as an address (an IPv4 client's outer
/// address is IPv4-mapped), or as the text accounting sends.
fn same_address(text: &str, outer: Ipv6Addr) -> bool {
    match text.parse::<IpAddr>() {
        Ok(IpAddr::V6(a)) => a == outer,
        Ok(IpAddr::V4(a)) => a.to_ipv6_mapped() == outer,
        Err(_) => text == outer.to_string(),
    }
}

/// A child SA still installed, for [`Tracker::end_all`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveChild {
    /// gate64's inbound SPI.
    pub inbound_spi: u32,
}

impl Tracker {
    /// An empty tracker. `id_prefix` makes session ids unique across restarts (the daemon
    /// passes its start time in seconds); the rest of an id counts sessions.
    pub fn new(id_prefix: u32) -> Tracker {
        Tracker {
            sessions: HashMap::new(),
            ike: HashMap::new(),
            children: HashMap::new(),
            id_prefix,
            next_id: 0,
            pending: VecDeque::new(),
            dropped: 0,
            refusals: RefusalBudget::new(),
        }
    }

    /// An IKE SA was authenticated (or a rekey replaced one) for `identity` at `peer`.
    pub fn ike_up(
        &mut self,
        at: SystemTime,
        spi_r: u64,
        peer: SocketAddr,
        identity: &str,
        transport: Transport,
    ) {
        let outer = outer_of(peer);
        match self.ike.entry(spi_r) {
            Entry::Occupied(_) => return,
            Entry::Vacant(slot) => slot.insert(IkeSa { outer, ended: None }),
        };
        let (prefix, next) = (self.id_prefix, &mut self.next_id);
        let session = self.sessions.entry(outer).or_insert_with(|| {
            *next = next.wrapping_add(1);
            Session {
                id: format!("{prefix:08x}{:08x}", *next),
                since: at,
                identity: identity.to_owned(),
                transport,
                outer,
                port: peer.port(),
                inner: Vec::new(),
                announced: false,
                ike_sas: 0,
                live: [0; 2],
                totals: [Counts::default(); 2],
                had: [false; 2],
                reason: None,
                ending: None,
                class: Vec::new(),
            }
        });
        session.ike_sas += 1;
    }

    /// IKE SA `spi_r` (after [`Tracker::ike_up`]) was authorized by a RADIUS Access-Accept
    /// carrying `class`: its session's Accounting-Requests echo them from now on (an empty
    /// `class` leaves the session's as they are: a rekeyed IKE SA carries the same).
    pub fn authorize(&mut self, spi_r: u64, class: &[Vec<u8>]) {
        if class.is_empty() {
            return;
        }
        let Some(outer) = self.ike.get(&spi_r).map(|sa| sa.outer) else {
            return;
        };
        if let Some(session) = self.sessions.get_mut(&outer) {
            session.class = class.to_vec();
        }
    }

    /// A child SA was installed for the client at `outer`.
    pub fn child_up(
        &mut self,
        at: SystemTime,
        inbound_spi: u32,
        outer: Ipv6Addr,
        inner: &[IpAddr],
        tunnel: Tunnel,
    ) {
        let Some(session) = self.sessions.get_mut(&outer) else {
            // A child SA of no IKE SA this tracker saw: nothing to account it to.
            return;
        };
        match self.children.entry(inbound_spi) {
            Entry::Occupied(_) => return,
            Entry::Vacant(slot) => slot.insert(Child { outer, tunnel }),
        };
        let t = tunnel.index();
        session.live[t] += 1;
        session.had[t] = true;
        if !session.announced {
            session.announced = true;
            session.since = at;
            session.inner = inner.to_vec();
            let mut line = session.line(at, EventKind::Connect);
            line.port = Some(session.port);
            line.inner = session.inner.clone();
            line.tunnels = vec![tunnel];
            self.push(line);
        } else if session.live[t] == 1 {
            let mut line = session.line(at, EventKind::TunnelUp);
            line.tunnel = Some(tunnel);
            self.push(line);
        }
    }

    /// A child SA was removed; `counts` are its final counters.
    pub fn child_down(&mut self, at: SystemTime, inbound_spi: u32, counts: Counts) {
        let Some(child) = self.children.remove(&inbound_spi) else {
            return;
        };
        let Some(session) = self.sessions.get_mut(&child.outer) else {
            return;
        };
        let t = child.tunnel.index();
        session.totals[t].add(&counts);
        session.live[t] = session.live[t].saturating_sub(1);
        if session.live[t] == 0 {
            let mut line = session.line(at, EventKind::TunnelDown);
            line.tunnel = Some(child.tunnel);
            line.counts = Some(session.totals[t]);
            line.reason = Some(
                session
                    .ending
                    .clone()
                    .unwrap_or_else(|| REASON_CLOSED.to_owned()),
            );
            self.push(line);
        }
        self.end_if_gone(at, child.outer);
    }

    /// The responder ended the IKE SA for `reason` (its `ike_down` follows).
    pub fn ike_ended(&mut self, spi_r: u64, reason: &str) {
        if let Some(sa) = self.ike.get_mut(&spi_r) {
            sa.ended = Some(reason.to_owned());
            if let Some(session) = self.sessions.get_mut(&sa.outer) {
                session.ending = Some(reason.to_owned());
            }
        }
    }

    /// The IKE SA is gone (its child SAs were reported down before it).
    pub fn ike_down(&mut self, at: SystemTime, spi_r: u64) {
        let Some(sa) = self.ike.remove(&spi_r) else {
            return;
        };
        if let Some(session) = self.sessions.get_mut(&sa.outer) {
            session.ike_sas = session.ike_sas.saturating_sub(1);
            session.reason = sa.ended;
            session.ending = None;
        }
        self.end_if_gone(at, sa.outer);
    }

    /// An IKE_AUTH from `source` was refused for `reason`; `identity` is the one it claimed,
    /// when known, kept to [`MAX_CLAIMED_IDENTITY`] bytes. Refusal lines are rate-limited
    /// (a burst of 50, then 5 a second); the ones over it are only counted
    /// ([`Tracker::refusals_suppressed`]).
    pub fn auth_refused(
        &mut self,
        at: SystemTime,
        source: SocketAddr,
        reason: &str,
        identity: Option<&str>,
    ) {
        if !self.refusals.take(at) {
            return;
        }
        let mut line = Line::new(rfc3339(at), EventKind::AuthRefused);
        line.source = Some(source);
        line.reason = Some(reason.to_owned());
        line.identity = identity.map(claimed_identity);
        self.push(line);
    }

    /// Refusal lines not written because of the rate limit ([`Tracker::auth_refused`]).
    pub fn refusals_suppressed(&self) -> u64 {
        self.refusals.suppressed
    }

    /// The child SAs still installed, for [`Tracker::end_all`]'s counts.
    pub fn live_children(&self) -> impl Iterator<Item = LiveChild> + '_ {
        self.children
            .keys()
            .map(|&inbound_spi| LiveChild { inbound_spi })
    }

    /// Ends every session for `reason` (the daemon stops): each child SA still installed
    /// with the counters `counts` gives for it.
    pub fn end_all(
        &mut self,
        at: SystemTime,
        reason: &str,
        mut counts: impl FnMut(LiveChild) -> Counts,
    ) {
        let live: Vec<LiveChild> = self.live_children().collect();
        for child in live {
            let c = counts(child);
            self.child_down(at, child.inbound_spi, c);
        }
        let spis: Vec<u64> = self.ike.keys().copied().collect();
        for spi_r in spis {
            self.ike_ended(spi_r, reason);
            self.ike_down(at, spi_r);
        }
    }

    /// The counters of every tunnel up now, for interim accounting: what its removed child
    /// SAs counted plus what `live` reads from each child SA still installed. Linear in the
    /// child SAs.
    pub fn tunnel_counts(&self, mut live: impl FnMut(LiveChild) -> Counts) -> Vec<TunnelCounts> {
        let mut sums: HashMap<(Ipv6Addr, Tunnel), Counts> = HashMap::new();
        for (&inbound_spi, child) in &self.children {
            sums.entry((child.outer, child.tunnel))
                .or_default()
                .add(&live(LiveChild { inbound_spi }));
        }
        let mut out = Vec::with_capacity(sums.len());
        for ((outer, tunnel), now) in sums {
            let Some(session) = self.sessions.get(&outer).filter(|s| s.announced) else {
                continue;
            };
            let mut counts = session.totals[tunnel.index()];
            counts.add(&now);
            out.push(TunnelCounts {
                session: session.id.clone(),
                tunnel,
                counts,
            });
        }
        out
    }

    /// The next line to write.
    pub fn poll_line(&mut self) -> Option<Line> {
        self.pending.pop_front()
    }

    /// Lines dropped because nobody polled them.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The sessions a Dynamic Authorization request names (every attribute it gives must
    /// match, RFC 5176 §3), with their IKE SAs. User-Name is the session's identity (without
    /// regard to ASCII case, as `gate64 disconnect` compares names), Acct-Multi-Session-Id
    /// its id, Acct-Session-Id one of its tunnels (`ID-TUNNEL`, as accounting sends it),
    /// Calling-Station-Id its outer address, Framed-IP(v6)-Address one of its inner
    /// addresses. Sessions without an IKE SA left are not found.
    pub fn find(&self, c: &crate::dae::Criteria) -> Vec<Found> {
        if c.is_empty() {
            return Vec::new();
        }
        let mut found: Vec<Found> = self
            .sessions
            .values()
            .filter(|s| s.ike_sas > 0)
            .filter_map(|s| {
                if c.user_name
                    .as_deref()
                    .is_some_and(|u| !u.eq_ignore_ascii_case(&s.identity))
                    || c.multi_session_id.as_deref().is_some_and(|m| m != s.id)
                    || c.calling_station
                        .as_deref()
                        .is_some_and(|cs| !same_address(cs, s.outer))
                    || c.framed.iter().any(|a| !s.inner.contains(a))
                {
                    return None;
                }
                let tunnel = match c.session_id.as_deref() {
                    None => None,
                    Some(id) => {
                        let t = [Tunnel::Infrastructure, Tunnel::Intranet]
                            .into_iter()
                            .find(|t| *id == format!("{}-{}", s.id, t.as_str()))?;
                        s.had[t.index()].then_some(t)?;
                        Some(t)
                    }
                };
                let mut ike_spis: Vec<u64> = self
                    .ike
                    .iter()
                    .filter(|(_, sa)| sa.outer == s.outer && sa.ended.is_none())
                    .map(|(spi, _)| *spi)
                    .collect();
                ike_spis.sort_unstable();
                Some(Found {
                    session: s.id.clone(),
                    identity: s.identity.clone(),
                    outer: s.outer,
                    tunnel,
                    ike_spis,
                })
            })
            .collect();
        found.sort_by(|a, b| a.session.cmp(&b.session));
        found
    }

    /// Connected clients (sessions with a connect line and no disconnect yet).
    pub fn connected(&self) -> usize {
        self.sessions.values().filter(|s| s.announced).count()
    }

    fn end_if_gone(&mut self, at: SystemTime, outer: Ipv6Addr) {
        let gone = self
            .sessions
            .get(&outer)
            .is_some_and(|s| s.ike_sas == 0 && s.live == [0, 0]);
        if !gone {
            return;
        }
        let Some(session) = self.sessions.remove(&outer) else {
            return;
        };
        if !session.announced {
            return;
        }
        let mut line = session.line(at, EventKind::Disconnect);
        line.port = Some(session.port);
        line.inner = session.inner.clone();
        line.reason = Some(
            session
                .reason
                .clone()
                .unwrap_or_else(|| REASON_CLOSED.to_owned()),
        );
        line.duration_secs = Some(
            at.duration_since(session.since)
                .unwrap_or_default()
                .as_secs(),
        );
        let mut total = Counts::default();
        let mut per_tunnel = BTreeMap::new();
        for tunnel in Tunnel::ALL {
            if session.had[tunnel.index()] {
                let c = session.totals[tunnel.index()];
                total.add(&c);
                per_tunnel.insert(tunnel, c);
            }
        }
        line.counts = Some(total);
        line.per_tunnel = per_tunnel;
        self.push(line);
    }

    fn push(&mut self, line: Line) {
        if self.pending.len() >= MAX_PENDING {
            self.pending.pop_front();
            self.dropped += 1;
        }
        self.pending.push_back(line);
    }
}

impl Session {
    /// A line of this session with the fields every session line carries.
    fn line(&self, at: SystemTime, event: EventKind) -> Line {
        let mut line = Line::new(rfc3339(at), event);
        line.session = Some(self.id.clone());
        line.identity = Some(self.identity.clone());
        line.transport = Some(self.transport);
        line.outer = Some(self.outer);
        line.class.clone_from(&self.class);
        line
    }
}

/// A claimed identity as a refusal line keeps it: whole, or its first characters within
/// [`MAX_CLAIMED_IDENTITY`] bytes followed by `…[truncated, N bytes]` (N the whole length).
pub fn claimed_identity(identity: &str) -> String {
    if identity.len() <= MAX_CLAIMED_IDENTITY {
        return identity.to_owned();
    }
    let mut end = MAX_CLAIMED_IDENTITY;
    while !identity.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}…[truncated, {} bytes]",
        identity.get(..end).unwrap_or_default(),
        identity.len()
    )
}

/// A peer's address as the outer IPv6 address sessions are keyed by (an IPv4 peer, on a
/// lab endpoint, as its mapped form).
pub fn outer_of(peer: SocketAddr) -> Ipv6Addr {
    match peer.ip() {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    }
}

#[cfg(test)]
mod tests;
