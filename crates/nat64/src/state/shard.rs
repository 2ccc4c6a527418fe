//! One shard of the stateful tables: BIB, sessions, port allocation and the RFC 6146
//! §3.5.2.2 TCP state machine.

use super::*;

/// One shard: the three protocol tables of the clients it holds.
#[derive(Debug)]
pub struct Shard {
    tables: [ProtoTable; 3],
    pool4: Vec<Ipv4Addr>,
    /// Ports this shard may allocate, ascending.
    owned: Vec<u16>,
    hash_key: u64,
    max_iterations: usize,
    timers: Timers,
    filtering: Filtering,
    /// Expiry candidates, checked against the session's current deadline when popped.
    timeouts: BinaryHeap<Reverse<(Instant, Proto6Key)>>,
    events: VecDeque<Event>,
    log_events: bool,
    budget: Arc<SessionBudget>,
    pool_exhausted: u64,
    /// What each client of this shard holds, for the RFC 6888 per-client limits. A client
    /// lives in one shard ([`AddressPools::client_of`] decides both), so this is complete.
    clients: HashMap<u128, ClientUse>,
    /// `Config::address_pools`, shared with the other shards, for finding a source's client.
    address_pools: AddressPools,
    max_sessions_per_client: usize,
    /// `max_ports_per_client`, capped at the fair part of this shard's pool4 share.
    max_ports_per_client: usize,
}

/// Sessions and dynamic BIB entries (per protocol) one client holds.
#[derive(Debug, Clone, Copy, Default)]
struct ClientUse {
    sessions: usize,
    ports: [usize; 3],
}

impl ClientUse {
    fn is_empty(&self) -> bool {
        self.sessions == 0 && self.ports == [0; 3]
    }
}

/// Session key from the IPv6 side: (X',x), (Y',y) reduced to the IPv4 remote (Z,z), which
/// identifies Y' under a single Pref64.
type SessionKey = (Addr6, Addr4);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Proto6Key {
    proto: u8,
    x: (u128, u16),
    z: (u32, u16),
}

#[derive(Debug, Default)]
struct ProtoTable {
    bib6: HashMap<Addr6, Bib>,
    bib4: HashMap<Addr4, Addr6>,
    sessions: HashMap<SessionKey, Session>,
    /// (T,t),(Z,z) → (X',x).
    sessions4: HashMap<(Addr4, Addr4), Addr6>,
    /// Paired pooling: the IPv4 address of each client and how many BIB entries use it.
    client4: HashMap<Ipv6Addr, (Ipv4Addr, usize)>,
    /// BIB entries per pool4 address, so allocation skips full addresses instead of probing
    /// every port of each (a busy client fills its shard's share of an address quickly).
    per_addr: HashMap<Ipv4Addr, usize>,
    /// Address-dependent filtering: sessions per (T,t) and remote address.
    remotes: HashMap<(Addr4, Ipv4Addr), usize>,
}

/// Sessions per shard and protocol whose room is reserved when the shard is made, so that
/// up to here no map rehashes while the shard's lock stops the workers. The whole share of
/// `max_sessions` is reserved up to this bound; past it (the 4,000,000 default over 16 shards
/// is past it) the maps grow as usual. The bound keeps the memory touched at start (a control
/// byte per bucket) to a few MiB.
const RESERVED_PER_SHARD: usize = 1 << 14;

impl ProtoTable {
    /// Tables for TCP, UDP and ICMP with room for `share` sessions each (at most
    /// [`RESERVED_PER_SHARD`]); a session has at most one BIB entry of its own.
    fn reserved(share: usize) -> [ProtoTable; 3] {
        let n = share.min(RESERVED_PER_SHARD);
        std::array::from_fn(|_| ProtoTable {
            bib6: HashMap::with_capacity(n),
            bib4: HashMap::with_capacity(n),
            sessions: HashMap::with_capacity(n),
            sessions4: HashMap::with_capacity(n),
            ..ProtoTable::default()
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Bib {
    v4: Addr4,
    sessions: usize,
    is_static: bool,
}

#[derive(Debug, Clone, Copy)]
struct Session {
    expires: Instant,
    /// Deadline of this session's live entry in the timer heap. Refreshes only move
    /// `expires`; the heap gets a new entry only when the deadline comes earlier (or when the
    /// live entry pops early), so it holds about one entry per session, not one per packet.
    armed: Instant,
    tcp: Option<TcpState>,
}

impl Session {
    /// Sets a new deadline; returns it when the timer heap needs an entry for it.
    fn refresh(&mut self, expires: Instant) -> Option<Instant> {
        self.expires = expires;
        (expires < self.armed).then(|| {
            self.armed = expires;
            expires
        })
    }
}

impl Shard {
    pub(super) fn new(
        cfg: &Config,
        owned: Vec<u16>,
        budget: &Arc<SessionBudget>,
        address_pools: &AddressPools,
    ) -> Shard {
        let share = owned.len().saturating_mul(cfg.pool4.len());
        // One client per share: no cap beyond the pool itself (exhaustion is its own error).
        let fair = match cfg.clients_per_share {
            0 | 1 => usize::MAX,
            n => (share / n).max(1),
        };
        Shard {
            clients: HashMap::new(),
            address_pools: address_pools.clone(),
            max_sessions_per_client: cfg.max_sessions_per_client,
            max_ports_per_client: cfg.max_ports_per_client.min(fair),
            // No maximum configured (`usize::MAX`): nothing to size the reservation by.
            tables: ProtoTable::reserved(match cfg.max_sessions {
                usize::MAX => 0,
                max => max.div_ceil(cfg.shards.max(1)),
            }),
            pool4: cfg.pool4.clone(),
            owned,
            hash_key: cfg.hash_key,
            max_iterations: cfg.max_iterations,
            timers: cfg.timers,
            filtering: cfg.filtering,
            timeouts: BinaryHeap::new(),
            events: VecDeque::new(),
            log_events: cfg.events,
            budget: Arc::clone(budget),
            pool_exhausted: 0,
        }
    }

    /// IPv6 packet from (X',x) to Pref64+Z, port z (RFC 6146 §3.5.1, §3.5.2): finds or creates
    /// the BIB entry and session and returns the IPv4 source (T,t). TCP sessions are created
    /// only by a SYN.
    pub fn handle_v6(
        &mut self,
        now: Instant,
        proto: Proto,
        x: Addr6,
        z: Addr4,
        flags: TcpFlags,
    ) -> Result<Addr4, TableError> {
        let key = (x, z);
        let timers = self.timers;
        if let Some(s) = self.tables[proto.index()].sessions.get_mut(&key) {
            let (tcp, life) = match s.tcp {
                Some(st) => {
                    let (n, l) = tcp_v6(st, flags, &timers);
                    (Some(n), l)
                }
                None => (None, life_of(proto, &timers)),
            };
            s.tcp = tcp;
            if let Some(l) = life
                && let Some(at) = s.refresh(now + l)
            {
                self.arm(proto, key, at);
            }
            let bib = self.tables[proto.index()].bib6.get(&x);
            return bib.map(|b| b.v4).ok_or(TableError::NoSession);
        }
        if proto == Proto::Tcp && !flags.syn {
            return Err(TableError::NoSession);
        }
        let bib = self.tables[proto.index()].bib6.get(&x).map(|b| b.v4);
        self.check_client_limits(proto, &x.0, bib.is_none())?;
        if !self.budget.take() {
            return Err(TableError::SessionLimit);
        }
        let t = match bib {
            Some(t) => Ok(t),
            None => self.create_bib(proto, x),
        };
        let t = match t {
            Ok(t) => t,
            Err(e) => {
                self.budget.give_back();
                return Err(e);
            }
        };
        let (tcp, life) = match proto {
            Proto::Tcp => (Some(TcpState::V6Init), timers.tcp_trans),
            _ => (None, life_of(proto, &timers).unwrap_or(timers.udp)),
        };
        self.create_session(now, proto, key, t, tcp, life);
        Ok(t)
    }

    /// IPv4 packet from (Z,z) to (T,t) (RFC 6146 §3.5.1.1, §3.5.2.1): returns the client
    /// (X',x) if a session exists or filtering lets a new one be made.
    pub fn handle_v4(
        &mut self,
        now: Instant,
        proto: Proto,
        z: Addr4,
        t: Addr4,
        flags: TcpFlags,
    ) -> Result<Addr6, TableError> {
        let timers = self.timers;
        let tab = &mut self.tables[proto.index()];
        if let Some(&x) = tab.sessions4.get(&(t, z)) {
            let key = (x, z);
            if let Some(s) = tab.sessions.get_mut(&key) {
                let (tcp, life) = match s.tcp {
                    Some(st) => {
                        let (n, l) = tcp_v4(st, flags, &timers);
                        (Some(n), l)
                    }
                    None => (None, life_of(proto, &timers)),
                };
                s.tcp = tcp;
                if let Some(l) = life
                    && let Some(at) = s.refresh(now + l)
                {
                    self.arm(proto, key, at);
                }
            }
            return Ok(x);
        }
        let x = *tab.bib4.get(&t).ok_or(TableError::NoBinding)?;
        if self.filtering == Filtering::AddressDependent && !tab.remotes.contains_key(&(t, z.0)) {
            return Err(TableError::NoBinding);
        }
        let (tcp, life) = match proto {
            Proto::Tcp if flags.syn => (Some(TcpState::V4Init), timers.tcp_trans),
            // RFC 6146 §3.5.2.2: only a SYN opens a session; Jool translates non-SYN
            // segments for an existing BIB, we drop them.
            Proto::Tcp => return Err(TableError::NoSession),
            _ => (None, life_of(proto, &timers).unwrap_or(timers.udp)),
        };
        self.check_client_limits(proto, &x.0, false)?;
        if !self.budget.take() {
            return Err(TableError::SessionLimit);
        }
        self.create_session(now, proto, (x, z), t, tcp, life);
        Ok(x)
    }

    /// Deletes sessions whose lifetime ended (and BIB entries with their last session, unless
    /// static). An established TCP session that runs out moves to TRANS instead (§3.5.2.2).
    pub fn handle_timeout(&mut self, now: Instant) {
        while self.handle_timeout_bounded(now, usize::MAX) {}
    }

    /// [`Shard::handle_timeout`], visiting at most `max_visits` timer entries, so a driver
    /// holding the shard's lock does bounded work per tick even when a mass of sessions runs
    /// out at once (expiry may then lag by a few ticks: RFC 6146's lifetimes are minimums).
    /// True when entries that are due remain.
    pub fn handle_timeout_bounded(&mut self, now: Instant, max_visits: usize) -> bool {
        for _ in 0..max_visits {
            let Some(&Reverse((at, k))) = self.timeouts.peek() else {
                return false;
            };
            if at > now {
                return false;
            }
            self.timeouts.pop();
            let proto = match k.proto {
                0 => Proto::Tcp,
                1 => Proto::Udp,
                _ => Proto::Icmp,
            };
            let key = (
                (Ipv6Addr::from(k.x.0), k.x.1),
                (Ipv4Addr::from(k.z.0), k.z.1),
            );
            let tab = &mut self.tables[proto.index()];
            let Some(s) = tab.sessions.get_mut(&key) else {
                continue;
            };
            if s.armed != at {
                continue; // superseded by an earlier entry for the same session
            }
            if s.expires > now {
                // Refreshed since armed: one entry per session, moved to the new deadline.
                s.armed = s.expires;
                let at = s.expires;
                self.arm(proto, key, at);
                continue;
            }
            if s.tcp == Some(TcpState::Established) {
                s.tcp = Some(TcpState::Trans);
                s.expires = now + self.timers.tcp_trans;
                s.armed = s.expires;
                let at = s.expires;
                self.arm(proto, key, at);
                continue;
            }
            self.delete_session(proto, key);
        }
        self.timeouts
            .peek()
            .is_some_and(|Reverse((at, _))| *at <= now)
    }

    /// When [`Shard::handle_timeout`] has work next. May be early (a refreshed session), never
    /// late.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timeouts.peek().map(|Reverse((at, _))| *at)
    }

    /// Next compliance event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// TCP state of a session, for tests and diagnostics.
    pub fn tcp_state(&self, x: Addr6, z: Addr4) -> Option<TcpState> {
        self.tables[0].sessions.get(&(x, z)).and_then(|s| s.tcp)
    }

    /// BIB lookup by the IPv6 side.
    pub fn bib_v6(&self, proto: Proto, x: Addr6) -> Option<Addr4> {
        self.tables[proto.index()].bib6.get(&x).map(|b| b.v4)
    }

    /// Sessions per protocol the maps hold before they must grow, for tests and diagnostics.
    pub fn reserved_sessions(&self) -> [usize; 3] {
        [0, 1, 2].map(|i| {
            let t = &self.tables[i];
            t.sessions.capacity().min(t.sessions4.capacity())
        })
    }

    /// Entries in the timer heap (about one per session), for tests and diagnostics.
    pub fn timer_entries(&self) -> usize {
        self.timeouts.len()
    }

    /// BIB lookup by the IPv4 side: the client behind (T,t), without touching sessions
    /// (for ICMP errors quoting a packet the client sent).
    pub fn bib_v4(&self, proto: Proto, t: Addr4) -> Option<Addr6> {
        self.tables[proto.index()].bib4.get(&t).copied()
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        let bib_by_proto = [0, 1, 2].map(|i| self.tables[i].bib6.len());
        let sessions_by_proto = [0, 1, 2].map(|i| self.tables[i].sessions.len());
        Stats {
            bib_by_proto,
            sessions_by_proto,
            bib_entries: bib_by_proto.iter().sum(),
            sessions: sessions_by_proto.iter().sum(),
            pool_exhausted: self.pool_exhausted,
        }
    }

    /// True when client `x6` holds a binding (of any protocol) in this shard.
    pub(super) fn has_client(&self, x6: &Ipv6Addr) -> bool {
        self.tables.iter().any(|t| t.client4.contains_key(x6))
    }

    pub(super) fn add_static(
        &mut self,
        proto: Proto,
        v6: Addr6,
        v4: Addr4,
    ) -> Result<(), TableError> {
        let tab = &mut self.tables[proto.index()];
        if v4.1 == 0
            || !self.pool4.contains(&v4.0)
            || tab.bib4.contains_key(&v4)
            || tab.bib6.contains_key(&v6)
        {
            return Err(TableError::StaticConflict);
        }
        tab.bib6.insert(
            v6,
            Bib {
                v4,
                sessions: 0,
                is_static: true,
            },
        );
        tab.bib4.insert(v4, v6);
        tab.client4.entry(v6.0).or_insert((v4.0, 0)).1 += 1;
        *tab.per_addr.entry(v4.0).or_insert(0) += 1;
        Ok(())
    }

    /// RFC 6888 REQ-3/REQ-4: refuses a new session of client `x6` at its session limit, and
    /// a new mapping (`new_port`) at its port limit for `proto`. Existing state stays
    /// (REQ-4: nothing is deleted to make room).
    fn check_client_limits(
        &self,
        proto: Proto,
        x6: &Ipv6Addr,
        new_port: bool,
    ) -> Result<(), TableError> {
        let Some(used) = self.clients.get(&self.address_pools.client_of(x6)) else {
            return Ok(());
        };
        if used.sessions >= self.max_sessions_per_client {
            return Err(TableError::ClientSessionLimit);
        }
        if new_port && used.ports[proto.index()] >= self.max_ports_per_client {
            return Err(TableError::ClientPortLimit);
        }
        Ok(())
    }

    /// Sessions and per-protocol ports client `x6` holds here, for tests and diagnostics.
    pub fn client_use(&self, x6: &Ipv6Addr) -> (usize, [usize; 3]) {
        self.clients
            .get(&self.address_pools.client_of(x6))
            .map_or((0, [0; 3]), |u| (u.sessions, u.ports))
    }

    /// Applies `f` to client `x6`'s counters, dropping the entry once it holds nothing.
    fn client_use_mut(&mut self, x6: &Ipv6Addr, f: impl FnOnce(&mut ClientUse)) {
        match self.clients.entry(self.address_pools.client_of(x6)) {
            Entry::Occupied(mut e) => {
                f(e.get_mut());
                if e.get().is_empty() {
                    e.remove();
                }
            }
            Entry::Vacant(e) => {
                let mut u = ClientUse::default();
                f(&mut u);
                if !u.is_empty() {
                    e.insert(u);
                }
            }
        }
    }

    fn create_bib(&mut self, proto: Proto, x: Addr6) -> Result<Addr4, TableError> {
        let t = self.allocate(proto, x).ok_or_else(|| {
            self.pool_exhausted += 1;
            TableError::PoolExhausted
        })?;
        let tab = &mut self.tables[proto.index()];
        tab.bib6.insert(
            x,
            Bib {
                v4: t,
                sessions: 0,
                is_static: false,
            },
        );
        tab.bib4.insert(t, x);
        tab.client4.entry(x.0).or_insert((t.0, 0)).1 += 1;
        *tab.per_addr.entry(t.0).or_insert(0) += 1;
        self.client_use_mut(&x.0, |u| u.ports[proto.index()] += 1);
        if self.log_events {
            self.events.push_back(Event::BibCreated {
                proto,
                v6: x,
                v4: t,
            });
        }
        Ok(t)
    }

    /// RFC 6146 §3.5.1.1: the client's address if it has one, then the others; its own port
    /// if free, else a keyed-hash probe keeping range and parity, then keeping range only.
    fn allocate(&self, proto: Proto, x: Addr6) -> Option<Addr4> {
        let tab = &self.tables[proto.index()];
        let n = self.pool4.len();
        let first = match tab.client4.get(&x.0) {
            Some(&(a, _)) => self.pool4.iter().position(|&p| p == a).unwrap_or(0),
            None => (keyed_hash(self.hash_key, &x.0) % n as u64) as usize,
        };
        let low = x.1 < 1024;
        let in_range = |p: u16| (p < 1024) == low;
        for i in 0..n {
            let addr = self.pool4[(first + i) % n];
            if tab
                .per_addr
                .get(&addr)
                .is_some_and(|&used| used >= self.owned.len())
            {
                continue;
            }
            let free = |p: u16| p != 0 && !tab.bib4.contains_key(&(addr, p));
            if self.owned.binary_search(&x.1).is_ok() && free(x.1) {
                return Some((addr, x.1));
            }
            let start = keyed_hash(self.hash_key, &(proto.index(), x, addr)) as usize;
            // Parity and range are SHOULDs: relax parity first, then range.
            for (parity, range) in [(true, true), (false, true), (false, false)] {
                let ok =
                    |p: u16| (!range || in_range(p)) && (!parity || p % 2 == x.1 % 2) && free(p);
                if let Some(p) = self.probe(start, ok) {
                    return Some((addr, p));
                }
            }
        }
        None
    }

    fn probe(&self, start: usize, ok: impl Fn(u16) -> bool) -> Option<u16> {
        let len = self.owned.len();
        if len == 0 {
            return None;
        }
        (0..len.min(self.max_iterations))
            .map(|k| self.owned[(start.wrapping_add(k)) % len])
            .find(|&p| ok(p))
    }

    fn create_session(
        &mut self,
        now: Instant,
        proto: Proto,
        key: SessionKey,
        t: Addr4,
        tcp: Option<TcpState>,
        life: Duration,
    ) {
        let tab = &mut self.tables[proto.index()];
        let (x, z) = key;
        if let Entry::Vacant(e) = tab.sessions.entry(key) {
            e.insert(Session {
                expires: now + life,
                armed: now + life,
                tcp,
            });
            tab.sessions4.insert((t, z), x);
            *tab.remotes.entry((t, z.0)).or_insert(0) += 1;
            if let Some(b) = tab.bib6.get_mut(&x) {
                b.sessions += 1;
            }
            self.client_use_mut(&x.0, |u| u.sessions += 1);
        }
        self.arm(proto, key, now + life);
    }

    fn delete_session(&mut self, proto: Proto, key: SessionKey) {
        let tab = &mut self.tables[proto.index()];
        if tab.sessions.remove(&key).is_none() {
            return;
        }
        self.budget.give_back();
        let (x, z) = key;
        self.client_use_mut(&x.0, |u| u.sessions = u.sessions.saturating_sub(1));
        let tab = &mut self.tables[proto.index()];
        let Some(b) = tab.bib6.get_mut(&x) else {
            return;
        };
        let t = b.v4;
        tab.sessions4.remove(&(t, z));
        if let Entry::Occupied(mut e) = tab.remotes.entry((t, z.0)) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        b.sessions -= 1;
        if b.sessions == 0 && !b.is_static {
            tab.bib6.remove(&x);
            tab.bib4.remove(&t);
            if let Entry::Occupied(mut e) = tab.per_addr.entry(t.0) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
            if let Entry::Occupied(mut e) = tab.client4.entry(x.0) {
                e.get_mut().1 -= 1;
                if e.get().1 == 0 {
                    e.remove();
                }
            }
            let i = proto.index();
            self.client_use_mut(&x.0, |u| u.ports[i] = u.ports[i].saturating_sub(1));
            if self.log_events {
                self.events.push_back(Event::BibDeleted {
                    proto,
                    v6: x,
                    v4: t,
                });
            }
        }
    }

    fn arm(&mut self, proto: Proto, key: SessionKey, at: Instant) {
        let ((x6, x), (z4, z)) = key;
        let k = Proto6Key {
            proto: proto.index() as u8,
            x: (u128::from(x6), x),
            z: (u32::from(z4), z),
        };
        self.timeouts.push(Reverse((at, k)));
    }
}

/// Lifetime of a non-TCP session; `None` for TCP (the state machine decides).
fn life_of(proto: Proto, t: &Timers) -> Option<Duration> {
    match proto {
        Proto::Tcp => None,
        Proto::Udp => Some(t.udp),
        Proto::Icmp => Some(t.icmp),
    }
}

/// RFC 6146 §3.5.2.2, IPv6 side: next state and the new lifetime (`None`: leave it).
fn tcp_v6(st: TcpState, f: TcpFlags, t: &Timers) -> (TcpState, Option<Duration>) {
    use TcpState::*;
    match st {
        V6Init if f.syn => (V6Init, Some(t.tcp_trans)),
        V4Init if f.syn => (Established, Some(t.tcp_est)),
        V6Init | V4Init => (st, None),
        Established if f.rst => (Trans, Some(t.tcp_trans)),
        Established if f.fin => (V6FinRcv, None),
        Established => (Established, Some(t.tcp_est)),
        V4FinRcv if f.fin => (V4V6FinRcv, Some(t.tcp_trans)),
        V4FinRcv | V6FinRcv => (st, Some(t.tcp_est)),
        V4V6FinRcv => (V4V6FinRcv, None),
        Trans if f.rst => (Trans, None),
        Trans => (Established, Some(t.tcp_est)),
    }
}

/// RFC 6146 §3.5.2.2, IPv4 side.
fn tcp_v4(st: TcpState, f: TcpFlags, t: &Timers) -> (TcpState, Option<Duration>) {
    use TcpState::*;
    match st {
        V6Init if f.syn => (Established, Some(t.tcp_est)),
        V4Init if f.syn => (V4Init, Some(t.tcp_trans)),
        V6Init | V4Init => (st, None),
        Established if f.rst => (Trans, Some(t.tcp_trans)),
        Established if f.fin => (V4FinRcv, None),
        Established => (Established, Some(t.tcp_est)),
        V6FinRcv if f.fin => (V4V6FinRcv, Some(t.tcp_trans)),
        V4FinRcv | V6FinRcv => (st, Some(t.tcp_est)),
        V4V6FinRcv => (V4V6FinRcv, None),
        Trans if f.rst => (Trans, None),
        Trans => (Established, Some(t.tcp_est)),
    }
}
