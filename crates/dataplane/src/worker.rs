//! The entry points a driver calls: one [`Worker`] per thread, fed packets with `now`.
//!
//! ```text
//! handle_teredo   UDP/3544 datagram   -> teredo.rs (classify, RS/RA, bubbles) -> ingress.rs
//! handle_iphttps  IP-HTTPS packet     -> iphttps.rs                           -> ingress.rs
//! handle_tun      TUN packet          -> egress.rs (NAT64 4->6, to a client)
//! handle_timeout  relay and NAT64 timers of one shard part, reassembly timeouts
//! poll_transmit / poll_tun_write      what was made off the fast path
//! ```
//!
//! Buffers are the caller's: a packet arrives in `buf[start..end]` with at least
//! [`crate::HEADROOM`] bytes free before `start` (IP-HTTPS: the `headroom` the driver names,
//! and nothing past `end`), so outer headers are prepended in place. A verdict names the byte
//! range to send; nothing is copied on the forwarding path, and nothing is allocated except
//! when a packet must wait in a relay queue.

use crate::icmp::TokenBucket;
use crate::iphttps::IphttpsLink;
use crate::ratelimit::{LIMITER_SLOTS, RateLimiter};
use crate::verdict::GsoRun;
use crate::{Direction, DropReason, Shared, Side, Stats, Transmit, Verdict};
use gate64_iphttps::server::MAX_REPLY_LEN;
use gate64_teredo::relay::TimerEvent;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the relay's and NAT64's timers run ([`Worker::handle_timeout`]): bubble retries
/// are paced at 2 s and NAT64 lifetimes are seconds, so half a second is exact enough.
pub const TIMER_INTERVAL: Duration = Duration::from_millis(500);

/// The rate limiters' hash key: random per worker, so no sender can predict which addresses
/// share a bucket; fixed in unit tests, so they are reproducible.
pub(crate) fn limiter_key() -> u64 {
    if cfg!(test) {
        return 0;
    }
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x6a7e_6464_u32)
}

/// One worker's pipeline. Owned by one thread; shares only [`Shared`].
#[derive(Debug)]
pub struct Worker {
    pub(crate) shared: Arc<Shared>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) rs_limiter: RateLimiter,
    /// Bubbles the server role relays per sender IPv4 address.
    pub(crate) relay_source_limiter: RateLimiter,
    /// Bubbles towards one IPv4 address that is not a verified peer (relayed or our own).
    pub(crate) relay_destination_limiter: RateLimiter,
    /// IKE to the IPsec endpoint per client (`ike_limit.rs`).
    pub(crate) ike_limiter: RateLimiter,
    /// IKE to the IPsec endpoint per host (`ike_limit.rs`).
    pub(crate) ike_host_limiter: RateLimiter,
    pub(crate) transmits: VecDeque<Transmit>,
    /// Packets for the TUN made off the fast path (ICMP errors gate64 sends).
    pub(crate) tun_writes: VecDeque<Vec<u8>>,
    /// NAT64's buffer for ICMP errors, whose quoted packet changes size.
    pub(crate) scratch: Vec<u8>,
    pub(crate) icmp_budget: TokenBucket,
    /// The UDP GSO send the current batch's datagrams are filling.
    gso_run: Option<GsoRun>,
    /// An IP-HTTPS connection's reply (RA, NA) on its way to the link's send queue.
    pub(crate) reply: [u8; MAX_REPLY_LEN],
    /// When the relay's and NAT64's timers are due again; `None` until they first ran.
    timers_due: Option<Instant>,
    /// Fragments to the IPsec endpoint waiting for the rest of their datagram.
    pub(crate) reassembly: crate::reassembly::Reassembly,
    /// This worker's copy of the child SAs awaiting an HA takeover (`SaDb::awaiting`).
    pub(crate) awaiting: gate64_esp::AwaitingView,
}

impl Worker {
    /// A worker over `shared`, counting into `stats`.
    pub fn new(shared: Arc<Shared>, stats: Arc<Stats>) -> Self {
        let key = limiter_key();
        let cfg = &shared.cfg;
        let rs_limiter = RateLimiter::new(cfg.rs_per_sec, cfg.rs_burst, LIMITER_SLOTS, key);
        let per_source = cfg.relay.relay_per_source_per_sec;
        let per_destination = cfg.relay.relay_per_destination_per_sec;
        let relay_source_limiter = RateLimiter::new(
            per_source,
            per_source.saturating_mul(2),
            LIMITER_SLOTS,
            key.rotate_left(21),
        );
        let relay_destination_limiter = RateLimiter::new(
            per_destination,
            per_destination.saturating_mul(2),
            LIMITER_SLOTS,
            key.rotate_left(42),
        );
        let ike_limiter = crate::ike_limit::limiter(cfg.ike_per_client_per_sec, key);
        let ike_host_limiter = crate::ike_limit::host_limiter(cfg.ike_per_client_per_sec, key);
        Worker {
            shared,
            stats,
            rs_limiter,
            ike_limiter,
            ike_host_limiter,
            relay_source_limiter,
            relay_destination_limiter,
            transmits: VecDeque::new(),
            tun_writes: VecDeque::new(),
            scratch: vec![0; 2048],
            icmp_budget: TokenBucket::default(),
            gso_run: None,
            reply: [0; MAX_REPLY_LEN],
            timers_due: None,
            reassembly: Default::default(),
            awaiting: Default::default(),
        }
    }

    /// This worker's counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The shared state this worker runs over.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Starts a batch: the next `Udp` verdict starts a new GSO send ([`crate::Gso`]). Call
    /// before the first `handle_*` of every batch of packets the driver sends together.
    pub fn start_batch(&mut self) {
        self.gso_run = None;
    }

    /// A Teredo datagram in `buf[start..end]` arrived on server address `local` from `remote`.
    pub fn handle_teredo(
        &mut self,
        now: Instant,
        local: Ipv4Addr,
        remote: SocketAddrV4,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Verdict {
        self.stats
            .packet(Side::Internet, Direction::Rx, end.saturating_sub(start));
        let v = self.teredo_ingress(now, local, remote, buf, start, end);
        self.finish(v)
    }

    /// A deframed packet in `buf[start..end]` from the IP-HTTPS client of `link`. Its
    /// connection judges it first (RS → RA into the link's send queue, ND, the /64 source
    /// check); what it forwards takes the road. The road may write `headroom` bytes before
    /// `start` and nothing past `end`: packets read from a TLS stream lie back to back, so the
    /// IP-HTTPS driver passes 0, and a packet that needs room in front (ESP sealed towards
    /// another client) finds it inside its own outer headers or is dropped.
    pub fn handle_iphttps(
        &mut self,
        now: Instant,
        link: &mut IphttpsLink<'_>,
        buf: &mut [u8],
        start: usize,
        end: usize,
        headroom: usize,
    ) -> Verdict {
        self.stats
            .packet(Side::Internet, Direction::Rx, end.saturating_sub(start));
        // An IP-HTTPS thread's worker gets no tick: its expired fragments are counted here.
        self.reassembly.expire(now, &self.stats);
        let v = self.iphttps_ingress(now, link, buf, (start, end, headroom));
        self.finish(v)
    }

    /// An IPv6 packet in `buf[start..end]` was read from the TUN device.
    pub fn handle_tun(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Verdict {
        self.stats
            .packet(Side::Corpnet, Direction::Rx, end.saturating_sub(start));
        let v = self.tun_ingress(now, buf, start, end);
        self.finish(v)
    }

    /// Runs relay and NAT64 timers for shard part `part` of `of` (one part per worker), and
    /// gives up this worker's fragmented datagrams that ran out of time.
    pub fn handle_timeout(&mut self, now: Instant, part: usize, of: usize) {
        self.timers_due = Some(now + TIMER_INTERVAL);
        self.reassembly.expire(now, &self.stats);
        if let Some(nat) = self.shared.cfg.nat64.as_ref() {
            nat.handle_timeout(now, part, of);
            if let Some(log) = self.shared.cfg.binding_log.as_ref() {
                nat.drain_events(part, of, |e| (log.0)(&e));
            }
        }
        let Some(server) = self.shared.server.as_ref() else {
            return;
        };
        let (stats, transmits) = (&self.stats, &mut self.transmits);
        let limiter = &mut self.relay_destination_limiter;
        self.shared
            .peers
            .handle_timeout(now, part, of, |e| match e {
                TimerEvent::Bubble { peer, mapping } => {
                    if limiter.allow(now, *mapping.ip()) {
                        transmits.extend(crate::teredo::bubble(server, &peer, mapping));
                    } else {
                        stats.count_drops(DropReason::RelayDestinationRateLimited, 1);
                    }
                }
                TimerEvent::GaveUp { dropped } => {
                    stats.count_drops(DropReason::BubbleTimeout, dropped as u64);
                }
            });
    }

    /// When the driver that runs this worker's timers should call [`Worker::handle_timeout`]
    /// next: [`TIMER_INTERVAL`] after the last call, or sooner when a fragmented datagram runs
    /// out of time. `None` before the first call: a driver calls it once as it starts.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let timers = self.timers_due?;
        Some(
            self.reassembly
                .next_expiry()
                .map_or(timers, |t| t.min(timers)),
        )
    }

    /// Datagrams produced off the fast path, oldest first; drain after every `handle_*` call.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// Packets for the TUN produced off the fast path (ICMP errors from gate64); drain after
    /// every `handle_*` call, oldest first.
    pub fn poll_tun_write(&mut self) -> Option<Vec<u8>> {
        self.tun_writes.pop_front()
    }

    /// Counts a drop once and marks a datagram's place in the batch's GSO sends.
    pub(crate) fn finish(&mut self, v: Result<Verdict, DropReason>) -> Verdict {
        let mut v = v.unwrap_or_else(Verdict::Drop);
        match v {
            Verdict::Drop(d) => self.stats.count_drops(d, 1),
            Verdict::Udp { .. } => GsoRun::mark(&mut self.gso_run, &mut v),
            Verdict::Tun { .. } | Verdict::Native { .. } | Verdict::Consumed => {}
        }
        v
    }
}
