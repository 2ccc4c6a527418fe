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

/// A fair pool4 split (RFC 6888 REQ-3): a shard keeps its share of pool4 for at least this
/// many clients at their port limit, so no client takes the ports every other client of its
/// shard draws from. For [`Config::clients_per_share`].
pub const FAIR_CLIENTS_PER_SHARE: usize = 4;

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
    /// Most sessions one client holds (RFC 6888 REQ-4); new flows beyond are refused with
    /// [`TableError::ClientSessionLimit`]. A client is a Teredo address, or any other IPv6
    /// address's /64 (an IP-HTTPS connection's prefix, a subscriber's LAN).
    pub max_sessions_per_client: usize,
    /// Most dynamic BIB entries (pool4 ports, ICMP identifiers) one client holds per protocol
    /// (RFC 6888 REQ-3); beyond, new mappings are refused with [`TableError::ClientPortLimit`].
    pub max_ports_per_client: usize,
    /// The port limit is also at most the client's shard's share of pool4 (ports per protocol)
    /// divided by this: 1 lets one client take its whole share,
    /// [`FAIR_CLIENTS_PER_SHARE`] keeps room for others.
    pub clients_per_share: usize,
    /// Queue BIB creation/deletion [`Event`]s for compliance logging. Off, nothing is queued
    /// (a queue nobody drains would grow without bound).
    pub events: bool,
    /// IPv6 prefixes whose every address is a client of its own, as a Teredo address is:
    /// gate64's IPsec address pool (`[ipsec] pool6`) gives each client one /128, all of them
    /// inside one /64, which would otherwise count (and shard) as one client.
    pub address_pools: Vec<(Ipv6Addr, u8)>,
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
            max_sessions_per_client: usize::MAX,
            max_ports_per_client: usize::MAX,
            clients_per_share: 1,
            events: true,
            address_pools: Vec::new(),
        }
    }
}

/// Why a packet found no mapping.
///
/// Exhaustive on purpose: the dataplane maps each to a drop reason by name, so a new one
/// must be given its reason there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
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
    /// The client holds `max_sessions_per_client` sessions (RFC 6888 REQ-4); the packet is
    /// dropped and no other client's state is touched.
    #[error("NAT64 session limit of this client reached")]
    ClientSessionLimit,
    /// The client holds `max_ports_per_client` ports of the protocol, or its fair part of its
    /// shard's pool4 share (RFC 6888 REQ-3); the packet is dropped.
    #[error("NAT64 port limit of this client reached")]
    ClientPortLimit,
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
    address_pools: AddressPools,
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
        let address_pools = AddressPools::new(&cfg.address_pools);
        let budget = Arc::new(SessionBudget {
            used: AtomicUsize::new(0),
            max: cfg.max_sessions,
        });
        let shards = (0..n)
            .map(|i| {
                let owned: Vec<u16> = (lo..=hi).filter(|&p| owner(p, n) == i).collect();
                Shard::new(&cfg, owned, &budget, &address_pools)
            })
            .collect();
        Ok(Table {
            shards,
            hash_key: cfg.hash_key,
            address_pools,
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
        let client = self.address_pools.client_of(x6);
        (keyed_hash(self.hash_key, &client) % self.shards.len() as u64) as usize
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
            .any(|(i, sh)| i != s && sh.has_client(&v6.0));
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
                address_pools: self.address_pools,
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
    address_pools: AddressPools,
    pinned: HashMap<Ipv6Addr, usize>,
}

impl Router {
    /// The shard holding the client `x6`.
    pub fn shard_of_v6(&self, x6: &Ipv6Addr) -> usize {
        if let Some(&s) = self.pinned.get(x6) {
            return s;
        }
        let client = self.address_pools.client_of(x6);
        (keyed_hash(self.hash_key, &client) % self.shards as u64) as usize
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

/// `Config::address_pools` as (network, mask) pairs, masks computed once when the table is
/// built so [`AddressPools::client_of`] does only an AND and a compare per pool on the packet
/// path. Cloning shares the pairs: the table, its router and every shard read one copy.
#[derive(Debug, Clone)]
pub struct AddressPools(Arc<[(u128, u128)]>);

impl Default for AddressPools {
    fn default() -> Self {
        AddressPools(Arc::new([]))
    }
}

impl AddressPools {
    /// From (prefix, length) pairs; a length above 128 counts as 128.
    pub fn new(prefixes: &[(Ipv6Addr, u8)]) -> Self {
        let pairs: Vec<(u128, u128)> = prefixes
            .iter()
            .map(|&(net, len)| {
                // `checked_shl` because a /0 would shift by 128: its mask is 0, matching all.
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(len.min(128)))
                    .unwrap_or(0);
                (u128::from(net) & mask, mask)
            })
            .collect();
        AddressPools(pairs.into())
    }

    /// The client (RFC 6888 "subscriber") an IPv6 source belongs to, which per-client limits
    /// count and the shard follows: a Teredo address (RFC 4380 §2.14, 2001::/32) is one client
    /// by itself, since all of a server's clients share its /64, and so is an address of one
    /// of the pools (the IPsec pool's /128 per client); any other source counts by its /64,
    /// the least an IPv6 subscriber is given (an IP-HTTPS connection owns one), so a client
    /// cannot escape its limits by changing interface identifiers.
    pub fn client_of(&self, x6: &Ipv6Addr) -> u128 {
        const TEREDO: u128 = 0x2001_0000 << 96;
        let a = u128::from(*x6);
        if a >> 96 == TEREDO >> 96 || self.0.iter().any(|&(net, mask)| a & mask == net) {
            a
        } else {
            a & (u128::MAX << 64)
        }
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

mod shard;
pub use shard::Shard;

#[cfg(test)]
mod tests;
