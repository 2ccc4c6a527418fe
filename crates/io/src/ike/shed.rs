//! Which IKE datagrams the IKE driver hands to the responder and which it sheds unread.
//! Sans-IO: the driver feeds it each batch `recvmmsg` returned, with `now`.
//!
//! The responder answers an IKE_SA_INIT with a Diffie-Hellman share or, above the half-open
//! threshold, a stateless cookie (RFC 7296 §2.6). Even the cookie costs a parse, a MAC and a
//! send, tens of microseconds, while reading and shedding a datagram costs one or two: a
//! single address sending IKE_SA_INIT as fast as it can out-ran the responder, the socket's
//! receive buffer filled, and the kernel dropped every source's datagrams alike, so a new
//! client's IKE_SA_INIT and its retransmissions were lost. Shedding per source before the
//! responder keeps the socket drained:
//!
//! - **Per source** ([`SourceKey`], the responder's key for its half-open and
//!   verification caps: an IPv4 address, an IPv6 /64, a Teredo address, which names one NAT
//!   mapping), a token bucket of `[ipsec] ike_packets_per_source_per_sec` (as
//!   many again at once) in a fixed table ([`RateLimiter`]): O(1), no allocation per
//!   datagram, nothing a flood of sources can grow. Colliding addresses share a bucket
//!   (stricter, never looser); the hash is keyed per process, so nobody can aim at another's.
//! - **Per host**, a second table at [`HOST_SHARE`] times that rate: all Teredo mappings of
//!   one public IPv4 address (one host behind one NAT can open a mapping per port), all /64s
//!   of one IPv6 /48 outside gate64's IP-HTTPS pool ([`Hosts`]). An IPv4 source and a leased
//!   IP-HTTPS /64 are hosts of their own. Shed as `source_rate` too.
//! - **Per batch**, when the read came back full (the socket has a backlog), a source's
//!   datagrams beyond [`BATCH_SHARE`] are shed: even a source within its rate, or many
//!   sources whose budgets are still full, cannot take a whole backlogged batch of the
//!   responder's time from the others. A legitimate client's burst (an IKE_AUTH split into
//!   RFC 7383 fragments) fits in the share.

use gate64_dataplane::IkeShedReason;
use gate64_ike::responder::{HostKey, Hosts, SourceKey};
use gate64_wire::ratelimit::RateLimiter;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Instant;

/// Datagrams of one source the responder handles out of one full (backlogged) batch.
pub(crate) const BATCH_SHARE: usize = 8;
/// Buckets of the per-source table (12 bytes each): collisions stay rare at any realistic
/// number of sources sending IKE at the same moment.
const SOURCE_SLOTS: usize = 1 << 16;
/// How many sources' worth of datagrams one host ([`HostKey`]) may send: the responder's
/// share, as a rate factor.
const HOST_SHARE: u32 = gate64_ike::responder::HOST_SHARE as u32;

/// The per-source bucket's key, as an address ([`SourceKey::to_ipv6`]): an IPv4 source
/// IPv4-mapped, a Teredo address its NAT mapping, any other IPv6 address its /64 (an
/// IP-HTTPS client's, or a native client's, which may take a new address of its /64 for
/// every datagram).
fn source_of(ip: IpAddr) -> Ipv6Addr {
    SourceKey::of(ip).to_ipv6()
}

/// The host `source` belongs to ([`Hosts::of`]), as an address for the host table: a Teredo
/// address's public IPv4 address, IPv4-mapped; an IPv6 address's /48; `None` for an IPv4 (or
/// IPv4-mapped) source or a leased IP-HTTPS /64, a host already.
fn host_of(hosts: &Hosts, source: Ipv6Addr) -> Option<Ipv6Addr> {
    hosts.of(SourceKey::of(source.into())).map(HostKey::to_ipv6)
}

/// The driver's shedding state: the per-source buckets, this batch's sources, the counts.
#[derive(Debug)]
pub(crate) struct Shedder {
    hosts: Hosts,
    limiter: RateLimiter,
    host_limiter: RateLimiter,
    /// Sources seen in the current batch and how many of their datagrams were admitted;
    /// only filled while the batch is full.
    batch: Vec<(Ipv6Addr, usize)>,
    backlogged: bool,
    shed: [u64; IkeShedReason::ALL.len()],
}

impl Shedder {
    /// `per_sec` datagrams per second per source address, as many again at once; sources
    /// aggregate into hosts by `hosts`; `key` keys the table's hash (random in the daemon).
    pub(crate) fn new(per_sec: u32, hosts: Hosts, key: u64) -> Self {
        Shedder {
            hosts,
            limiter: RateLimiter::new(per_sec, per_sec.saturating_mul(2), SOURCE_SLOTS, key),
            host_limiter: RateLimiter::new(
                per_sec.saturating_mul(HOST_SHARE),
                per_sec.saturating_mul(2 * HOST_SHARE),
                SOURCE_SLOTS,
                key.rotate_left(17),
            ),
            batch: Vec::with_capacity(crate::sys::BATCH),
            backlogged: false,
            shed: [0; IkeShedReason::ALL.len()],
        }
    }

    /// Starts a batch of `len` datagrams out of a read of at most `capacity`: a full read means
    /// more are waiting, and the batch share applies.
    pub(crate) fn start_batch(&mut self, len: usize, capacity: usize) {
        self.batch.clear();
        self.backlogged = len >= capacity;
    }

    /// Whether the responder may handle a datagram from `from`; counts it as shed otherwise.
    pub(crate) fn admit(&mut self, now: Instant, from: SocketAddr) -> bool {
        let source = source_of(from.ip());
        if self.backlogged {
            let seen = match self.batch.iter_mut().find(|(s, _)| *s == source) {
                Some((_, n)) => n,
                None => {
                    self.batch.push((source, 0));
                    let last = self.batch.len() - 1;
                    &mut self.batch[last].1
                }
            };
            if *seen >= BATCH_SHARE {
                self.shed[IkeShedReason::BatchShare as usize] += 1;
                return false;
            }
            *seen += 1;
        }
        if !self.limiter.allow_v6(now, source) {
            self.shed[IkeShedReason::SourceRate as usize] += 1;
            return false;
        }
        if let Some(host) = host_of(&self.hosts, source)
            && !self.host_limiter.allow_v6(now, host)
        {
            self.shed[IkeShedReason::SourceRate as usize] += 1;
            return false;
        }
        true
    }

    /// Counts one shed elsewhere in the driver (an IKE_AUTH verification with no room).
    pub(crate) fn note(&mut self, reason: IkeShedReason) {
        self.shed[reason as usize] += 1;
    }

    /// Datagrams shed for `reason` so far.
    pub(crate) fn shed(&self, reason: IkeShedReason) -> u64 {
        self.shed[reason as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(a: &str) -> SocketAddr {
        SocketAddr::new(a.parse().expect("address"), 500)
    }

    // An IKE flood: one address far over its rate is cut to it, another address in
    // the same batches still gets every datagram through, and the budget refills.
    #[test]
    fn a_flooding_source_is_cut_to_its_rate_and_others_pass() {
        let mut s = Shedder::new(100, Hosts::default(), 1);
        let (flood, client) = (at("2001:db8:100:1::2"), at("2001:db8:100:2::3"));
        let t0 = Instant::now();
        let mut admitted = 0;
        for _ in 0..100 {
            s.start_batch(16, 32);
            admitted += (0..16).filter(|_| s.admit(t0, flood)).count();
        }
        assert_eq!(admitted, 200, "the burst is twice the rate");
        assert_eq!(s.shed(IkeShedReason::SourceRate), 1_600 - 200);
        s.start_batch(2, 32);
        assert!(s.admit(t0, client) && s.admit(t0, client));
        let later = t0 + Duration::from_millis(100);
        s.start_batch(12, 32);
        let refilled = (0..12).filter(|_| s.admit(later, flood)).count();
        assert_eq!(refilled, 10, "100 per second for 100 ms");
        assert_eq!(s.shed(IkeShedReason::BatchShare), 0, "no batch was full");
    }

    // A full read means a backlog: one source gets BATCH_SHARE datagrams of the batch, the
    // others all of theirs, whatever their budgets.
    #[test]
    fn a_backlogged_batch_is_shared_between_sources() {
        let mut s = Shedder::new(10_000, Hosts::default(), 2);
        let (a, b) = (at("2001:db8::a"), at("2001:db8:0:1::b"));
        let t0 = Instant::now();
        s.start_batch(32, 32);
        let from_a = (0..28).filter(|_| s.admit(t0, a)).count();
        let from_b = (0..4).filter(|_| s.admit(t0, b)).count();
        assert_eq!((from_a, from_b), (BATCH_SHARE, 4));
        assert_eq!(s.shed(IkeShedReason::BatchShare), 28 - BATCH_SHARE as u64);
        // The next batch starts a new share.
        s.start_batch(32, 32);
        assert!(s.admit(t0, a));
        assert_eq!(s.shed(IkeShedReason::SourceRate), 0);
    }

    // One host behind one IPv4 address opens a Teredo mapping per port: 200 ports of it get
    // no more than the per-host budget; a client of another address still gets in.
    #[test]
    fn all_teredo_ports_of_one_ipv4_share_one_host_budget() {
        let mut s = Shedder::new(10, Hosts::default(), 4);
        let t0 = Instant::now();
        let teredo = |ipv4: [u8; 4], port: u16| {
            let p = (!port).to_be_bytes();
            let a = (!u32::from_be_bytes(ipv4)).to_be_bytes();
            let o = [
                0x20, 0x01, 0, 0, 0x41, 0x36, 0xe3, 0x78, 0x80, 0, p[0], p[1], a[0], a[1], a[2],
                a[3],
            ];
            SocketAddr::new(Ipv6Addr::from(o).into(), 500)
        };
        s.start_batch(1, 32);
        let admitted: usize = (40_000..40_200)
            .map(|port| {
                (0..3)
                    .filter(|_| s.admit(t0, teredo([192, 0, 2, 45], port)))
                    .count()
            })
            .sum();
        assert_eq!(admitted, 2 * 10 * HOST_SHARE as usize, "the host's burst");
        assert!(s.admit(t0, teredo([198, 51, 100, 7], 40_000)));
        let site: usize = (1..=50u16)
            .map(|n| at(&format!("2001:db8:1:{n:x}::1")))
            .map(|a| (0..3).filter(|_| s.admit(t0, a)).count())
            .sum();
        assert_eq!(site, 2 * 10 * HOST_SHARE as usize, "the /64s of one /48");
    }

    // The /64s of gate64's IP-HTTPS pool are unrelated clients: each keeps its own budget
    // however many of the pool's /48 are sending, while the /64s of a native /48 still share.
    #[test]
    fn leased_iphttps_64s_are_hosts_of_their_own() {
        let pool = "2001:db8:8000::/40".parse().expect("prefix");
        let mut s = Shedder::new(10, Hosts::new(Some(pool)), 6);
        let t0 = Instant::now();
        s.start_batch(1, 32);
        let leased: usize = (1..=50u16)
            .map(|n| at(&format!("2001:db8:8000:{n:x}::1")))
            .map(|a| (0..3).filter(|_| s.admit(t0, a)).count())
            .sum();
        // 150 datagrams, within each lease's burst of 20 and past one host's 80.
        assert_eq!(leased, 50 * 3, "every lease in its own budget");
        let site: usize = (1..=50u16)
            .map(|n| at(&format!("2001:db8:1:{n:x}::1")))
            .map(|a| (0..3).filter(|_| s.admit(t0, a)).count())
            .sum();
        assert_eq!(
            site,
            2 * 10 * HOST_SHARE as usize,
            "the /64s of one native /48"
        );
    }

    // A native IPv6 client may send each datagram from another address of its /64: they all
    // draw on the /64's one bucket; the next /64 has its own.
    #[test]
    fn the_addresses_of_one_ipv6_64_share_one_bucket() {
        let mut s = Shedder::new(5, Hosts::default(), 5);
        let t0 = Instant::now();
        s.start_batch(1, 32);
        let admitted = (1..=40u16)
            .filter(|n| s.admit(t0, at(&format!("2001:db8:7:1::{n:x}"))))
            .count();
        assert_eq!(admitted, 10, "the /64's burst");
        assert!(s.admit(t0, at("2001:db8:7:2::1")));
    }

    // IPv4 senders (a dual-stack endpoint) have buckets of their own.
    #[test]
    fn ipv4_sources_are_limited_too() {
        let mut s = Shedder::new(1, Hosts::default(), 3);
        let t0 = Instant::now();
        let v4 = SocketAddr::from(([192, 0, 2, 7], 500));
        s.start_batch(5, 32);
        assert_eq!((0..5).filter(|_| s.admit(t0, v4)).count(), 2);
        assert_eq!(s.shed(IkeShedReason::SourceRate), 3);
    }
}
