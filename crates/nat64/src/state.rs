//! Stateful NAT64 tables (RFC 6146 §3): Binding Information Base and sessions, per protocol,
//! sharded by IPv6 client.
//!
//! - Mapping is endpoint-independent (RFC 6146 §3.5.1, RFC 4787 REQ-1): one BIB entry
//!   (X',x) ↔ (T,t) serves every remote. Filtering is endpoint-independent by default,
//!   address-dependent as an option (§3.5.1.1).
//! - Port allocation keeps the IPv4 address a client already has (paired pooling), keeps the
//!   port range (0–1023 / 1024–65535) and parity (§3.5.1.1, RFC 4787 REQ-3/4), tries the
//!   client's own port first, never hands out port 0, and otherwise probes from a keyed hash
//!   (RFC 6056 algorithm 3) up to a configured number of candidates.
//! - Sharding: a client (IPv6 source address) lives in one shard, chosen by a keyed hash or by
//!   its static entries; IPv4 ports are dealt to shards in blocks of [`PORT_BLOCK`], so the
//!   shard of an IPv4→IPv6 packet follows from its destination port. Shards share nothing;
//!   a driver can put each behind its own lock or worker.
//! - Time comes in as `now`; lifetimes come from [`Timers`]. [`Shard::poll_timeout`] says
//!   when to call [`Shard::handle_timeout`]. BIB creation and deletion are queued as
//!   [`Event`]s for compliance logging (RFC 6888 §4).
//!
//! Not yet: holding an unsolicited IPv4 SYN for TCP_INCOMING_SYN (simultaneous open,
//! §3.5.2.2); it is refused with [`TableError::NoBinding`] as if the timer had run out.

use std::cmp::Reverse;
use std::collections::hash_map::{DefaultHasher, Entry};
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Ports are dealt to shards in blocks of this many consecutive ports.
pub const PORT_BLOCK: u16 = 64;

/// An IPv6 transport address: address and port (ICMP: identifier).
pub type Addr6 = (Ipv6Addr, u16);
/// An IPv4 transport address: address and port (ICMP: identifier).
pub type Addr4 = (Ipv4Addr, u16);

/// The protocols with their own tables (RFC 6146 §3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP, with the §3.5.2.2 state machine.
    Tcp,
    /// UDP.
    Udp,
    /// ICMP queries; the "port" is the identifier on both sides.
    Icmp,
}

impl Proto {
    /// Every protocol, in table order.
    pub const ALL: [Proto; 3] = [Proto::Tcp, Proto::Udp, Proto::Icmp];

    /// Lower-case name, for labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Icmp => "icmp",
        }
    }

    /// Position in [`Proto::ALL`].
    pub fn index(self) -> usize {
        match self {
            Proto::Tcp => 0,
            Proto::Udp => 1,
            Proto::Icmp => 2,
        }
    }
}

/// Session lifetimes (RFC 6146 §4). `Default` gives the RFC values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    /// UDP_DEFAULT: at least UDP_MIN (2 min), recommended 5 min.
    pub udp: Duration,
    /// TCP_EST: at least 2 h 4 min.
    pub tcp_est: Duration,
    /// TCP_TRANS: at least 4 min.
    pub tcp_trans: Duration,
    /// ICMP_DEFAULT: 60 s.
    pub icmp: Duration,
}

/// UDP_MIN (RFC 6146 §4).
pub const UDP_MIN: Duration = Duration::from_secs(120);

impl Default for Timers {
    fn default() -> Self {
        Timers {
            udp: Duration::from_secs(300),
            tcp_est: Duration::from_secs(7440),
            tcp_trans: Duration::from_secs(240),
            icmp: Duration::from_secs(60),
        }
    }
}

/// How IPv4 packets reach an existing mapping (RFC 6146 §3.5.1.1, §3.5.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Filtering {
    /// Any IPv4 remote may use a BIB entry.
    #[default]
    EndpointIndependent,
    /// Only IPv4 addresses the client has already sent to.
    AddressDependent,
}

/// Table settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// pool4 addresses.
    pub pool4: Vec<Ipv4Addr>,
    /// pool4 ports, inclusive (Jool's default 61001–65535 stays clear of Linux's ephemeral
    /// range; port 0 is never used).
    pub ports: (u16, u16),
    /// Number of shards (at least 1).
    pub shards: usize,
    /// Key for the client→shard and port-probe hashes (RFC 6056 §3.3.3 secret); the caller
    /// draws it so runs are reproducible.
    pub hash_key: u64,
    /// Candidate ports tried per allocation before giving up.
    pub max_iterations: usize,
    /// Session lifetimes.
    pub timers: Timers,
    /// IPv4 filtering policy.
    pub filtering: Filtering,
    /// Most sessions the whole table holds (one budget shared by all shards, so a single busy
    /// client is not capped at its shard's share); new flows beyond it are refused with
    /// [`TableError::SessionLimit`], protecting memory.
    pub max_sessions: usize,
    /// Queue BIB creation/deletion [`Event`]s for compliance logging. Off, nothing is queued
    /// (a queue nobody drains would grow without bound).
    pub events: bool,
}

impl Config {
    /// A configuration with RFC defaults for `pool4` over ports 1024–65535, one shard.
    pub fn new(pool4: Vec<Ipv4Addr>) -> Self {
        Config {
            pool4,
            ports: (1024, 65535),
            shards: 1,
            hash_key: 0,
            max_iterations: 4096,
            timers: Timers::default(),
            filtering: Filtering::default(),
            max_sessions: usize::MAX,
            events: true,
        }
    }
}

/// Why a packet found no mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// IPv4 packet with no BIB entry, or filtered out: reply ICMPv4 3/3 (RFC 6146 §3.5.1.1;
    /// Jool test "bibless"). TCP: also an unsolicited SYN.
    #[error("no binding for the IPv4 destination")]
    NoBinding,
    /// TCP segment that neither opens nor belongs to a session; dropped silently.
    #[error("no TCP session")]
    NoSession,
    /// No free IPv4 transport address; dropped (RFC 6146 §3.5.1.1).
    #[error("pool4 exhausted")]
    PoolExhausted,
    /// Static entry whose address or port is outside pool4, taken, or in another shard than
    /// the client's other static entries.
    #[error("static binding conflicts with pool4 or an existing binding")]
    StaticConflict,
    /// The session table is full (`max_sessions`); the packet is dropped.
    #[error("NAT64 session limit reached")]
    SessionLimit,
    /// Invalid configuration (empty pool, port 0 only, no shards, UDP lifetime below UDP_MIN).
    #[error("invalid NAT64 table configuration")]
    Config,
}

/// TCP flags that drive the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpFlags {
    /// SYN.
    pub syn: bool,
    /// FIN.
    pub fin: bool,
    /// RST.
    pub rst: bool,
}

impl TcpFlags {
    /// From the TCP header's flags byte (offset 13).
    pub fn from_byte(b: u8) -> Self {
        TcpFlags {
            fin: b & 0x01 != 0,
            syn: b & 0x02 != 0,
            rst: b & 0x04 != 0,
        }
    }
}

/// TCP session states (RFC 6146 §3.5.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpState {
    /// SYN seen from IPv6.
    V6Init,
    /// SYN seen from IPv4.
    V4Init,
    /// Both SYNs seen.
    Established,
    /// FIN seen from IPv4.
    V4FinRcv,
    /// FIN seen from IPv6.
    V6FinRcv,
    /// FIN seen from both sides.
    V4V6FinRcv,
    /// RST seen or the established lifetime ran out.
    Trans,
}

/// Compliance log records (RFC 6888 §4): the caller stamps them with UTC time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A BIB entry was created.
    BibCreated {
        /// Protocol table.
        proto: Proto,
        /// IPv6 source transport address.
        v6: Addr6,
        /// Its IPv4 transport address.
        v4: Addr4,
    },
    /// A BIB entry was deleted with its last session.
    BibDeleted {
        /// Protocol table.
        proto: Proto,
        /// IPv6 source transport address.
        v6: Addr6,
        /// Its IPv4 transport address.
        v4: Addr4,
    },
}

/// Counters a driver exports as metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// BIB entries alive, per protocol (indexed like [`Proto::ALL`]).
    pub bib_by_proto: [usize; 3],
    /// Sessions alive, per protocol (indexed like [`Proto::ALL`]).
    pub sessions_by_proto: [usize; 3],
    /// BIB entries alive.
    pub bib_entries: usize,
    /// Sessions alive.
    pub sessions: usize,
    /// Allocations that found no free port.
    pub pool_exhausted: u64,
}

impl Stats {
    /// Element-wise sum.
    pub fn plus(self, b: &Stats) -> Stats {
        let mut bib_by_proto = self.bib_by_proto;
        let mut sessions_by_proto = self.sessions_by_proto;
        for i in 0..3 {
            bib_by_proto[i] += b.bib_by_proto[i];
            sessions_by_proto[i] += b.sessions_by_proto[i];
        }
        Stats {
            bib_by_proto,
            sessions_by_proto,
            bib_entries: self.bib_entries + b.bib_entries,
            sessions: self.sessions + b.sessions,
            pool_exhausted: self.pool_exhausted + b.pool_exhausted,
        }
    }
}

/// All shards. Route packets with [`Table::shard_of_v6`] and [`Table::shard_of_v4`], or use
/// the convenience methods that do it.
#[derive(Debug)]
pub struct Table {
    shards: Vec<Shard>,
    hash_key: u64,
    /// Clients pinned to a shard by their static entries.
    pinned: HashMap<Ipv6Addr, usize>,
}

impl Table {
    /// Builds the shards; fails on an unusable configuration.
    pub fn new(cfg: Config) -> Result<Table, TableError> {
        let (lo, hi) = (cfg.ports.0.max(1), cfg.ports.1);
        if cfg.pool4.is_empty() || cfg.shards == 0 || lo > hi || cfg.timers.udp < UDP_MIN {
            return Err(TableError::Config);
        }
        let n = cfg.shards;
        let budget = Arc::new(SessionBudget {
            used: AtomicUsize::new(0),
            max: cfg.max_sessions,
        });
        let shards = (0..n)
            .map(|i| {
                let owned: Vec<u16> = (lo..=hi).filter(|&p| owner(p, n) == i).collect();
                Shard::new(&cfg, owned, &budget)
            })
            .collect();
        Ok(Table {
            shards,
            hash_key: cfg.hash_key,
            pinned: HashMap::new(),
        })
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard holding the client `x6`.
    pub fn shard_of_v6(&self, x6: &Ipv6Addr) -> usize {
        if let Some(&s) = self.pinned.get(x6) {
            return s;
        }
        (keyed_hash(self.hash_key, x6) % self.shards.len() as u64) as usize
    }

    /// The shard owning IPv4 port (or ICMP identifier) `t`.
    pub fn shard_of_v4(&self, t: u16) -> usize {
        owner(t, self.shards.len())
    }

    /// One shard, for a driver that locks or runs shards separately.
    pub fn shard_mut(&mut self, i: usize) -> Option<&mut Shard> {
        self.shards.get_mut(i)
    }

    /// Adds a static BIB entry (port forwarding); it pins the client to the port's shard.
    pub fn add_static(&mut self, proto: Proto, v6: Addr6, v4: Addr4) -> Result<(), TableError> {
        let s = self.shard_of_v4(v4.1);
        if self.pinned.get(&v6.0).is_some_and(|&p| p != s) {
            return Err(TableError::StaticConflict);
        }
        let has_dynamic = self
            .shards
            .iter()
            .enumerate()
            .any(|(i, sh)| i != s && sh.tables.iter().any(|t| t.client4.contains_key(&v6.0)));
        if has_dynamic {
            return Err(TableError::StaticConflict);
        }
        self.shards[s].add_static(proto, v6, v4)?;
        self.pinned.insert(v6.0, s);
        Ok(())
    }

    /// IPv6→IPv4 lookup in the client's shard; see [`Shard::handle_v6`].
    pub fn handle_v6(
        &mut self,
        now: Instant,
        proto: Proto,
        x: Addr6,
        z: Addr4,
        flags: TcpFlags,
    ) -> Result<Addr4, TableError> {
        let s = self.shard_of_v6(&x.0);
        self.shards[s].handle_v6(now, proto, x, z, flags)
    }

    /// IPv4→IPv6 lookup in the port's shard; see [`Shard::handle_v4`].
    pub fn handle_v4(
        &mut self,
        now: Instant,
        proto: Proto,
        z: Addr4,
        t: Addr4,
        flags: TcpFlags,
    ) -> Result<Addr6, TableError> {
        let s = self.shard_of_v4(t.1);
        self.shards[s].handle_v4(now, proto, z, t, flags)
    }

    /// Expires sessions in every shard.
    pub fn handle_timeout(&mut self, now: Instant) {
        for s in &mut self.shards {
            s.handle_timeout(now);
        }
    }

    /// Earliest deadline over all shards.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.shards.iter().filter_map(Shard::poll_timeout).min()
    }

    /// Next compliance event from any shard.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.shards.iter_mut().find_map(Shard::poll_event)
    }

    /// Sum of the shards' counters.
    pub fn stats(&self) -> Stats {
        self.shards
            .iter()
            .fold(Stats::default(), |a, s| a.plus(&s.stats()))
    }
}

impl Table {
    /// Splits the table for drivers whose threads share it: the routing part (hash key,
    /// clients pinned by static entries) and the shards, which the caller locks separately.
    pub fn into_parts(self) -> (Router, Vec<Shard>) {
        (
            Router {
                hash_key: self.hash_key,
                shards: self.shards.len(),
                pinned: self.pinned,
            },
            self.shards,
        )
    }
}

/// Which shard a packet belongs to, once the shards live apart (see [`Table::into_parts`]).
#[derive(Debug, Clone)]
pub struct Router {
    hash_key: u64,
    shards: usize,
    pinned: HashMap<Ipv6Addr, usize>,
}

impl Router {
    /// The shard holding the client `x6`.
    pub fn shard_of_v6(&self, x6: &Ipv6Addr) -> usize {
        if let Some(&s) = self.pinned.get(x6) {
            return s;
        }
        (keyed_hash(self.hash_key, x6) % self.shards as u64) as usize
    }

    /// The shard owning IPv4 port (or ICMP identifier) `t`.
    pub fn shard_of_v4(&self, t: u16) -> usize {
        owner(t, self.shards)
    }
}

/// The sessions all shards of one table may hold together. Touched when a session is made or
/// deleted, never per packet.
#[derive(Debug)]
struct SessionBudget {
    used: AtomicUsize,
    max: usize,
}

impl SessionBudget {
    fn take(&self) -> bool {
        if self.used.fetch_add(1, Ordering::Relaxed) >= self.max {
            self.used.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn give_back(&self) {
        self.used.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Shard owning port `p` among `n`.
fn owner(p: u16, n: usize) -> usize {
    usize::from(p / PORT_BLOCK) % n
}

fn keyed_hash<T: Hash>(key: u64, v: &T) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    v.hash(&mut h);
    h.finish()
}

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
    fn new(cfg: &Config, owned: Vec<u16>, budget: &Arc<SessionBudget>) -> Shard {
        Shard {
            tables: Default::default(),
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
        if !self.budget.take() {
            return Err(TableError::SessionLimit);
        }
        let t = match self.tables[proto.index()].bib6.get(&x) {
            Some(b) => Ok(b.v4),
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
        if !self.budget.take() {
            return Err(TableError::SessionLimit);
        }
        self.create_session(now, proto, (x, z), t, tcp, life);
        Ok(x)
    }

    /// Deletes sessions whose lifetime ended (and BIB entries with their last session, unless
    /// static). An established TCP session that runs out moves to TRANS instead (§3.5.2.2).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((at, k))) = self.timeouts.peek() {
            if at > now {
                break;
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

    fn add_static(&mut self, proto: Proto, v6: Addr6, v4: Addr4) -> Result<(), TableError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    const X1: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5);
    const X2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 5);
    const T1: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    const T2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 3);
    const Z1: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 24);
    const Z2: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 25);
    const NONE: TcpFlags = TcpFlags {
        syn: false,
        fin: false,
        rst: false,
    };
    const SYN: TcpFlags = TcpFlags {
        syn: true,
        fin: false,
        rst: false,
    };
    const FIN: TcpFlags = TcpFlags {
        syn: false,
        fin: true,
        rst: false,
    };
    const RST: TcpFlags = TcpFlags {
        syn: false,
        fin: false,
        rst: true,
    };

    fn table(shards: usize) -> Table {
        Table::new(Config {
            shards,
            hash_key: 7,
            ..Config::new(vec![T1, T2])
        })
        .unwrap()
    }

    #[test]
    fn rfc6146_3_5_1_endpoint_independent_mapping() {
        let now = Instant::now();
        let mut t = table(1);
        let a = t
            .handle_v6(now, Proto::Udp, (X1, 2000), (Z1, 53), NONE)
            .unwrap();
        let b = t
            .handle_v6(now, Proto::Udp, (X1, 2000), (Z2, 4000), NONE)
            .unwrap();
        assert_eq!(a, b, "same BIB entry for every remote");
        assert_eq!(a.1, 2000, "port preserved when free");
        // The reply comes back to the client; an unrelated remote also may (EIF).
        assert_eq!(
            t.handle_v4(now, Proto::Udp, (Z1, 53), a, NONE),
            Ok((X1, 2000))
        );
        assert_eq!(
            t.handle_v4(
                now,
                Proto::Udp,
                (Ipv4Addr::new(198, 51, 100, 1), 9),
                a,
                NONE
            ),
            Ok((X1, 2000))
        );
        assert_eq!(
            t.handle_v4(now, Proto::Udp, (Z1, 53), (a.0, a.1 + 1), NONE),
            Err(TableError::NoBinding)
        );
        assert_eq!(
            t.poll_event(),
            Some(Event::BibCreated {
                proto: Proto::Udp,
                v6: (X1, 2000),
                v4: a
            })
        );
    }

    #[test]
    fn rfc6146_3_5_1_1_address_dependent_filtering() {
        let now = Instant::now();
        let mut t = Table::new(Config {
            filtering: Filtering::AddressDependent,
            ..Config::new(vec![T1])
        })
        .unwrap();
        let a = t
            .handle_v6(now, Proto::Udp, (X1, 2000), (Z1, 53), NONE)
            .unwrap();
        assert_eq!(
            t.handle_v4(now, Proto::Udp, (Z1, 99), a, NONE),
            Ok((X1, 2000))
        );
        assert_eq!(
            t.handle_v4(now, Proto::Udp, (Z2, 53), a, NONE),
            Err(TableError::NoBinding)
        );
    }

    #[test]
    fn rfc6146_3_5_1_1_paired_pooling_range_and_parity() {
        let now = Instant::now();
        let mut t = table(1);
        let a = t
            .handle_v6(now, Proto::Udp, (X1, 5000), (Z1, 1), NONE)
            .unwrap();
        // Same client, other port: same IPv4 address.
        let b = t
            .handle_v6(now, Proto::Udp, (X1, 5001), (Z1, 1), NONE)
            .unwrap();
        assert_eq!(a.0, b.0);
        // Another client wants the taken port: same parity and range, never 0.
        let c = t.handle_v6(now, Proto::Udp, (X2, a.1), (Z1, 1), NONE);
        let c = c.unwrap();
        assert_ne!(c, a);
        if c.0 == a.0 {
            assert_eq!(c.1 % 2, a.1 % 2);
        }
        assert!(c.1 >= 1024);
        // A low port is kept low when the pool has low ports.
        let mut low = Table::new(Config {
            ports: (0, 65535),
            ..Config::new(vec![T1])
        })
        .unwrap();
        low.add_static(Proto::Udp, (X2, 1), (T1, 123)).unwrap();
        let d = low
            .handle_v6(now, Proto::Udp, (X1, 123), (Z1, 1), NONE)
            .unwrap();
        assert!(d.1 < 1024 && d.1 != 0 && d.1 % 2 == 1, "{d:?}");
    }

    #[test]
    fn pool_exhaustion() {
        let now = Instant::now();
        let mut t = Table::new(Config {
            ports: (2000, 2001),
            ..Config::new(vec![T1])
        })
        .unwrap();
        for p in [10, 11] {
            t.handle_v6(now, Proto::Udp, (X1, p), (Z1, 1), NONE)
                .unwrap();
        }
        assert_eq!(
            t.handle_v6(now, Proto::Udp, (X1, 12), (Z1, 1), NONE),
            Err(TableError::PoolExhausted)
        );
        assert_eq!(t.stats().pool_exhausted, 1);
        // Protocols have separate tables.
        assert!(
            t.handle_v6(now, Proto::Icmp, (X1, 12), (Z1, 12), NONE)
                .is_ok()
        );
    }

    #[test]
    fn rfc6146_4_udp_and_icmp_lifetimes() {
        let now = Instant::now();
        let mut t = table(1);
        let a = t
            .handle_v6(now, Proto::Udp, (X1, 2000), (Z1, 53), NONE)
            .unwrap();
        t.handle_v6(now, Proto::Icmp, (X1, 77), (Z1, 77), NONE)
            .unwrap();
        assert_eq!(t.poll_timeout(), Some(now + Duration::from_secs(60)));
        t.handle_timeout(now + Duration::from_secs(61));
        assert_eq!(t.stats().sessions, 1, "ICMP gone after 60 s");
        // Inbound traffic refreshes the UDP session.
        let later = now + Duration::from_secs(200);
        t.handle_v4(later, Proto::Udp, (Z1, 53), a, NONE).unwrap();
        t.handle_timeout(now + Duration::from_secs(301));
        assert_eq!(t.stats().sessions, 1);
        t.handle_timeout(later + Duration::from_secs(300));
        assert_eq!(t.stats(), Stats::default());
        let ev: Vec<_> = std::iter::from_fn(|| t.poll_event()).collect();
        assert_eq!(ev.len(), 4, "two created, two deleted: {ev:?}");
        assert!(matches!(
            ev[3],
            Event::BibDeleted {
                proto: Proto::Udp,
                ..
            }
        ));
    }

    #[test]
    fn rfc6146_3_5_2_2_tcp_state_machine() {
        let now = Instant::now();
        let mut t = table(1);
        let x = (X1, 40000);
        let z = (Z1, 443);
        assert_eq!(
            t.handle_v6(now, Proto::Tcp, x, z, NONE),
            Err(TableError::NoSession),
            "only SYN opens"
        );
        let tt = t.handle_v6(now, Proto::Tcp, x, z, SYN).unwrap();
        let sh = t.shard_of_v6(&X1);
        let st = |t: &mut Table| t.shard_mut(sh).unwrap().tcp_state(x, z);
        assert_eq!(st(&mut t), Some(TcpState::V6Init));
        t.handle_v4(now, Proto::Tcp, z, tt, SYN).unwrap();
        assert_eq!(st(&mut t), Some(TcpState::Established));
        // The V6 INIT deadline is stale now; the session lives on with TCP_EST.
        assert!(t.poll_timeout() <= Some(now + Duration::from_secs(7440)));
        t.handle_timeout(now + Duration::from_secs(241));
        assert_eq!(st(&mut t), Some(TcpState::Established));
        let now = now + Duration::from_secs(241);
        t.handle_v6(now, Proto::Tcp, x, z, RST).unwrap();
        assert_eq!(st(&mut t), Some(TcpState::Trans));
        t.handle_v4(now, Proto::Tcp, z, tt, NONE).unwrap();
        assert_eq!(st(&mut t), Some(TcpState::Established));
        t.handle_v4(now, Proto::Tcp, z, tt, FIN).unwrap();
        assert_eq!(st(&mut t), Some(TcpState::V4FinRcv));
        t.handle_v6(now, Proto::Tcp, x, z, FIN).unwrap();
        assert_eq!(st(&mut t), Some(TcpState::V4V6FinRcv));
        // Not refreshed any more: gone after TCP_TRANS.
        t.handle_v6(now + Duration::from_secs(100), Proto::Tcp, x, z, NONE)
            .unwrap();
        t.handle_timeout(now + Duration::from_secs(241));
        assert_eq!(t.stats(), Stats::default());
    }

    #[test]
    fn rfc6146_3_5_2_2_established_expiry_goes_to_trans() {
        let now = Instant::now();
        let mut t = table(1);
        let (x, z) = ((X1, 40000), (Z1, 443));
        let tt = t.handle_v6(now, Proto::Tcp, x, z, SYN).unwrap();
        t.handle_v4(now, Proto::Tcp, z, tt, SYN).unwrap();
        let est = now + Duration::from_secs(7440);
        t.handle_timeout(est);
        let sh = t.shard_of_v6(&X1);
        assert_eq!(
            t.shard_mut(sh).unwrap().tcp_state(x, z),
            Some(TcpState::Trans)
        );
        t.handle_timeout(est + Duration::from_secs(240));
        assert_eq!(t.stats().sessions, 0);
    }

    #[test]
    fn rfc6146_tcp_v4_syn_needs_a_binding() {
        let now = Instant::now();
        let mut t = table(1);
        assert_eq!(
            t.handle_v4(now, Proto::Tcp, (Z1, 50000), (T1, 1500), SYN),
            Err(TableError::NoBinding)
        );
        // With a static binding (port forwarding) the v4 SYN opens V4 INIT.
        t.add_static(Proto::Tcp, (X1, 80), (T1, 8080)).unwrap();
        assert_eq!(
            t.handle_v4(now, Proto::Tcp, (Z1, 50000), (T1, 8080), SYN),
            Ok((X1, 80))
        );
        let sh = t.shard_of_v6(&X1);
        assert_eq!(
            t.shard_mut(sh).unwrap().tcp_state((X1, 80), (Z1, 50000)),
            Some(TcpState::V4Init)
        );
        t.handle_v6(now, Proto::Tcp, (X1, 80), (Z1, 50000), SYN)
            .unwrap();
        assert_eq!(
            t.shard_mut(sh).unwrap().tcp_state((X1, 80), (Z1, 50000)),
            Some(TcpState::Established)
        );
        // Static entries outlive their sessions.
        t.handle_timeout(now + Duration::from_secs(100_000));
        assert_eq!(t.stats().bib_entries, 1);
    }

    #[test]
    fn sharding_routes_both_directions() {
        let now = Instant::now();
        let mut t = table(4);
        for i in 0..200u16 {
            let x6 = Ipv6Addr::new(0x2001, 0xdb8, i, 0, 0, 0, 0, 1);
            let a = t
                .handle_v6(now, Proto::Udp, (x6, 1000 + i), (Z1, 53), NONE)
                .unwrap();
            assert_eq!(t.shard_of_v4(a.1), t.shard_of_v6(&x6));
            assert_eq!(
                t.handle_v4(now, Proto::Udp, (Z1, 53), a, NONE),
                Ok((x6, 1000 + i))
            );
        }
        // A static entry pins its client to the port's shard.
        let x6 = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
        t.add_static(Proto::Udp, (x6, 53), (T1, 5353)).unwrap();
        assert_eq!(t.shard_of_v6(&x6), t.shard_of_v4(5353));
        let b = t
            .handle_v6(now, Proto::Udp, (x6, 54), (Z1, 53), NONE)
            .unwrap();
        assert_eq!(t.shard_of_v4(b.1), t.shard_of_v4(5353));
    }

    #[test]
    fn config_validation() {
        assert_eq!(
            Table::new(Config::new(vec![])).err(),
            Some(TableError::Config)
        );
        let mut c = Config::new(vec![T1]);
        c.timers.udp = Duration::from_secs(60);
        assert_eq!(Table::new(c).err(), Some(TableError::Config));
        let mut c = Config::new(vec![T1]);
        c.ports = (0, 0);
        assert_eq!(Table::new(c).err(), Some(TableError::Config));
    }
}
