//! Per-worker counters. Each worker owns one [`Stats`] and is its only writer; the metrics
//! exporter sums all workers' values at scrape time, so the hot path never contends on a
//! shared cache line or takes a lock.

use std::sync::atomic::{AtomicU64, Ordering};

/// A counter with a single writer (its worker) and any number of readers (the exporter).
/// A plain load and store instead of `fetch_add` avoids a locked instruction per packet;
/// it is correct because only the owning worker ever writes.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n` (single writer only).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Adds one (single writer only).
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Which side of gate64 a packet crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The corporate network (the TUN device).
    Corpnet = 0,
    /// The internet (client transports: Teredo UDP, IP-HTTPS TLS).
    Internet = 1,
}

impl Side {
    /// Both sides, in label order.
    pub const ALL: [Side; 2] = [Side::Corpnet, Side::Internet];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Corpnet => "corpnet",
            Side::Internet => "internet",
        }
    }
}

/// Direction as seen from gate64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received by gate64.
    Rx = 0,
    /// Sent by gate64.
    Tx = 1,
}

impl Direction {
    /// Both directions, in label order.
    pub const ALL: [Direction; 2] = [Direction::Rx, Direction::Tx];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Rx => "rx",
            Direction::Tx => "tx",
        }
    }
}

/// One worker's counters.
#[derive(Debug)]
pub struct Stats {
    bytes: [[Counter; 2]; 2],
    packets: [[Counter; 2]; 2],
    drops: [Counter; crate::DropReason::COUNT],
    /// Router Advertisements sent in answer to Teredo Router Solicitations.
    pub teredo_qualifications: Counter,
    tls_handshakes: [Counter; TlsResult::ALL.len()],
    /// Packets NAT64 translated, by direction ([`Nat64Direction`]).
    nat64_translations: [Counter; 2],
    /// IP-HTTPS connections closed because a write towards the client made no progress
    /// within `iphttps.write_timeout_secs` (the client stopped reading).
    pub iphttps_write_timeouts: Counter,
    /// IP-HTTPS links moved back to the /64 their client held before (a reconnect, or a
    /// takeover of its IPsec SAs).
    pub iphttps_prefix_reclaimed: Counter,
    /// IP-HTTPS links refused the /64 their client's interface id was bound to because
    /// another link held it (they keep a fresh one).
    pub iphttps_prefix_in_use: Counter,
    /// Inner bytes and packets of ESP opened from clients ([`Direction::Rx`]) and sealed to
    /// them ([`Direction::Tx`]): the sum of what the SAs count, so the session log's totals
    /// add up to these.
    esp_bytes: [Counter; 2],
    esp_packets: [Counter; 2],
}

// By hand: `Default` is derived for arrays of at most 32 elements, and there are more drop
// reasons.
impl Default for Stats {
    fn default() -> Self {
        Stats {
            bytes: Default::default(),
            packets: Default::default(),
            drops: std::array::from_fn(|_| Counter::default()),
            teredo_qualifications: Counter::default(),
            tls_handshakes: Default::default(),
            nat64_translations: Default::default(),
            iphttps_write_timeouts: Counter::default(),
            iphttps_prefix_reclaimed: Counter::default(),
            iphttps_prefix_in_use: Counter::default(),
            esp_bytes: Default::default(),
            esp_packets: Default::default(),
        }
    }
}

/// Which way NAT64 translated a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nat64Direction {
    /// IPv6 client to IPv4 host.
    V6ToV4 = 0,
    /// IPv4 host to IPv6 client.
    V4ToV6 = 1,
}

impl Nat64Direction {
    /// Both directions, in label order.
    pub const ALL: [Nat64Direction; 2] = [Nat64Direction::V6ToV4, Nat64Direction::V4ToV6];

    /// The `direction` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Nat64Direction::V6ToV4 => "v6_to_v4",
            Nat64Direction::V4ToV6 => "v4_to_v6",
        }
    }
}

/// How an IP-HTTPS connection attempt ended its set-up (TLS handshake and HTTP request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsResult {
    /// TLS and HTTP accepted: the link is up.
    Ok = 0,
    /// The TLS handshake failed (protocol version, cipher, certificate, garbage).
    TlsError = 1,
    /// TLS or the HTTP request did not complete in time (slowloris).
    Timeout = 2,
    /// The HTTP request was refused (wrong path or method, malformed).
    HttpError = 3,
    /// Refused at accept: too many handshakes or connections (`[limits]`).
    Busy = 4,
    /// No /64 left in the IP-HTTPS prefix pool.
    PoolExhausted = 5,
    /// Refused at accept: the source (IPv4 /32, IPv6 /64) already has
    /// `iphttps.max_handshakes_per_source` connections before link-up.
    SourceHandshakes = 6,
    /// Refused at accept: the source already has `iphttps.max_connections_per_source`.
    SourceConnections = 7,
    /// No ClientHello byte within `iphttps.client_hello_timeout_secs` of the accept.
    NoClientHello = 8,
    /// Refused at accept: the source's network (IPv4 /24, IPv6 /48) already has
    /// `iphttps.max_handshakes_per_network` connections before link-up.
    NetworkHandshakes = 9,
    /// Cut before link-up to give its handshake slot to a newcomer: every slot of
    /// `limits.max_tls_handshakes` was taken and this was the oldest set-up old enough to be
    /// reclaimed.
    Reclaimed = 10,
    /// The client's certificate is listed in a CRL of `iphttps.client_crls`.
    Revoked = 11,
}

impl TlsResult {
    /// Every result, in label order.
    pub const ALL: [TlsResult; 12] = [
        TlsResult::Ok,
        TlsResult::TlsError,
        TlsResult::Timeout,
        TlsResult::HttpError,
        TlsResult::Busy,
        TlsResult::PoolExhausted,
        TlsResult::SourceHandshakes,
        TlsResult::SourceConnections,
        TlsResult::NoClientHello,
        TlsResult::NetworkHandshakes,
        TlsResult::Reclaimed,
        TlsResult::Revoked,
    ];

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsResult::Ok => "ok",
            TlsResult::TlsError => "tls_error",
            TlsResult::Timeout => "timeout",
            TlsResult::HttpError => "http_error",
            TlsResult::Busy => "busy",
            TlsResult::PoolExhausted => "pool_exhausted",
            TlsResult::SourceHandshakes => "source_handshakes",
            TlsResult::SourceConnections => "source_connections",
            TlsResult::NoClientHello => "no_client_hello",
            TlsResult::NetworkHandshakes => "network_handshakes",
            TlsResult::Reclaimed => "reclaimed",
            TlsResult::Revoked => "revoked",
        }
    }
}

impl Stats {
    /// Counts one packet of `len` bytes.
    #[inline]
    pub fn packet(&self, side: Side, dir: Direction, len: usize) {
        self.packets[side as usize][dir as usize].inc();
        self.bytes[side as usize][dir as usize].add(len as u64);
    }

    /// Counts `n` dropped packets.
    #[inline]
    pub fn count_drops(&self, reason: crate::DropReason, n: u64) {
        self.drops[reason as usize].add(n);
    }

    /// Bytes counted for a side and direction.
    pub fn bytes(&self, side: Side, dir: Direction) -> u64 {
        self.bytes[side as usize][dir as usize].get()
    }

    /// Packets counted for a side and direction.
    pub fn packets(&self, side: Side, dir: Direction) -> u64 {
        self.packets[side as usize][dir as usize].get()
    }

    /// Counts one IP-HTTPS set-up outcome.
    pub fn tls_handshake(&self, r: TlsResult) {
        self.tls_handshakes[r as usize].inc();
    }

    /// IP-HTTPS set-up outcomes counted for a result.
    pub fn tls_handshakes(&self, r: TlsResult) -> u64 {
        self.tls_handshakes[r as usize].get()
    }

    /// Counts one NAT64 translation.
    #[inline]
    pub fn nat64_translation(&self, d: Nat64Direction) {
        self.nat64_translations[d as usize].inc();
    }

    /// NAT64 translations counted for a direction.
    pub fn nat64_translations(&self, d: Nat64Direction) -> u64 {
        self.nat64_translations[d as usize].get()
    }

    /// Counts one ESP packet whose inner packet has `len` bytes, opened (`Rx`) or sealed
    /// (`Tx`).
    #[inline]
    pub fn esp(&self, dir: Direction, len: usize) {
        self.esp_packets[dir as usize].inc();
        self.esp_bytes[dir as usize].add(len as u64);
    }

    /// Inner bytes of ESP counted for a direction.
    pub fn esp_bytes(&self, dir: Direction) -> u64 {
        self.esp_bytes[dir as usize].get()
    }

    /// ESP packets counted for a direction.
    pub fn esp_packets(&self, dir: Direction) -> u64 {
        self.esp_packets[dir as usize].get()
    }

    /// Drops counted for a reason.
    pub fn drops(&self, reason: crate::DropReason) -> u64 {
        self.drops[reason as usize].get()
    }
}
