//! The takeover's triggers: `gate64 ha promote` and SIGUSR1 ([`HaHandle::promote`]), which
//! install every SA the peer synced; a client's authenticated request for its synced IKE SA
//! while the peer is quiet, which installs that client's IKE SA and child SAs ("on demand",
//! [`Task::on_candidate`]); and the state `gate64 ha status` shows ([`HaHandle::status`]).
//!
//! On demand installs one client, not the whole store: the peer may be alive and serving
//! its other clients (two active nodes behind ECMP, each the other's `[ha]` peer, where a
//! client whose path moved is the only one to take over), and a client whose request checks
//! under its synced keys is proof enough for its own SAs only. A hot standby that should take
//! everything at once is promoted (`gate64 ha promote`, SIGUSR1).
//!
//! Bounded: a request is looked at only when the peer has been quiet for [`QUIET_AFTER`],
//! within [`PER_SOURCE_PER_SEC`] per client address and [`TOTAL_PER_SEC`] in all (token
//! buckets of `gate64_wire::ratelimit`), and costs one integrity check; only one that passes
//! installs anything. Every one is counted under `gate64_ha_sync_total{direction="takeover"}`:
//! `on_demand` (installed), `on_demand_peer_alive`, `on_demand_limited` (over a limit or
//! the queue full), `on_demand_refused` (not stored, or its integrity check failed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gate64_control::{HaState, Promoted};
use tokio::sync::mpsc;

use gate64_wire::ratelimit::RateLimiter;

use super::{Counters, FLUSH_EVERY, Task};

/// How long the peer may send nothing that authenticates before it counts as quiet: three
/// flush intervals, each of which carries at least the peer's child SA sweep while it has
/// clients (and its IKE SAs when their message IDs moved).
pub(crate) const QUIET_AFTER: Duration = Duration::from_secs(3 * FLUSH_EVERY.as_secs());

/// Requests for IKE SAs awaiting a takeover queued for the sync task; beyond, one is dropped
/// and counted (`on_demand_limited`).
pub(crate) const CANDIDATE_QUEUE: usize = 64;
/// Requests looked at per second per client address (and the burst: a retransmission).
pub(crate) const PER_SOURCE_PER_SEC: u32 = 1;
const PER_SOURCE_BURST: u32 = 2;
/// Requests looked at per second in all: an integrity check each, whoever sends them.
pub(crate) const TOTAL_PER_SEC: u32 = 200;
const TOTAL_BURST: u32 = 400;
/// Buckets of the per-source table.
const SOURCE_SLOTS: usize = 4096;

/// A request the responder reported for an IKE SA awaiting a takeover; unauthenticated.
pub(crate) struct Candidate {
    pub(super) remote: SocketAddr,
    pub(super) spi_r: u64,
    pub(super) datagram: Vec<u8>,
}

/// Why a candidate is not looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Skip {
    /// The peer sent something authentic within [`QUIET_AFTER`].
    PeerAlive,
    /// Over the per-source or the total limit.
    Limited,
}

/// The on-demand takeover's limits.
pub(super) struct Candidates {
    per_source: RateLimiter,
    total: RateLimiter,
}

impl Candidates {
    pub(super) fn new() -> Self {
        let key = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64);
        Candidates {
            per_source: RateLimiter::new(PER_SOURCE_PER_SEC, PER_SOURCE_BURST, SOURCE_SLOTS, key),
            total: RateLimiter::new(TOTAL_PER_SEC, TOTAL_BURST, 1, key),
        }
    }

    /// Whether a request from `remote` may cost an integrity check at `now`, the peer last
    /// heard at `last`: only while the peer is quiet, within both limits.
    pub(super) fn admit(
        &mut self,
        now: Instant,
        last: Option<Instant>,
        remote: SocketAddr,
    ) -> Result<(), Skip> {
        if !peer_quiet(last, now) {
            return Err(Skip::PeerAlive);
        }
        let source_ok = match remote.ip() {
            std::net::IpAddr::V4(a) => self.per_source.allow(now, a),
            std::net::IpAddr::V6(a) => self.per_source.allow_v6(now, a),
        };
        if !source_ok || !self.total.allow(now, std::net::Ipv4Addr::UNSPECIFIED) {
            return Err(Skip::Limited);
        }
        Ok(())
    }
}

/// What the sync task is asked from outside.
pub(super) enum Ask {
    /// Take over every stored SA.
    Promote(Reply),
    /// Describe the channel.
    Status(std::sync::mpsc::Sender<HaState>),
}

/// Where a takeover's result goes: the control socket's waiting request, or nowhere
/// (SIGUSR1).
#[derive(Clone)]
pub(super) struct Reply(Option<std::sync::mpsc::Sender<Promoted>>);

impl Reply {
    pub(super) fn send(&self, promoted: Promoted) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(promoted);
        }
    }
}

/// The running channel's handle.
#[derive(Clone)]
pub(crate) struct HaHandle {
    asks: mpsc::UnboundedSender<Ask>,
    peer: SocketAddr,
    counters: Arc<Counters>,
}

impl HaHandle {
    pub(super) fn new(
        asks: mpsc::UnboundedSender<Ask>,
        peer: SocketAddr,
        counters: Arc<Counters>,
    ) -> Self {
        HaHandle {
            asks,
            peer,
            counters,
        }
    }

    /// Takes over: installs every SA the peer synced (SIGUSR1), without waiting.
    pub(crate) fn promote(&self) {
        let _ = self.asks.send(Ask::Promote(Reply(None)));
    }

    /// Takes over and waits, up to `timeout`, for what was installed (`gate64 ha promote`).
    /// Blocks the calling thread.
    pub(crate) fn promote_and_wait(&self, timeout: Duration) -> Promoted {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.asks.send(Ask::Promote(Reply(Some(tx)))).is_err() {
            return Promoted::refused("the HA sync task has stopped");
        }
        rx.recv_timeout(timeout).unwrap_or_else(|_| {
            Promoted::refused("the takeover did not finish in time; see the daemon's log")
        })
    }

    /// The channel's state (`gate64 ha status`), waiting up to `timeout`. Blocks the calling
    /// thread.
    pub(crate) fn status(&self, timeout: Duration) -> HaState {
        let (tx, rx) = std::sync::mpsc::channel();
        let answered = self.asks.send(Ask::Status(tx)).is_ok();
        match answered.then(|| rx.recv_timeout(timeout).ok()).flatten() {
            Some(state) => state,
            None => HaState {
                peer: Some(self.peer.to_string()),
                error: Some("the HA sync task did not answer".to_owned()),
                ..HaState::default()
            },
        }
    }

    /// The counters.
    pub(crate) fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }
}

/// Whether a peer last heard from at `last` counts as quiet at `now`.
pub(super) fn peer_quiet(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|t| now.saturating_duration_since(t) > QUIET_AFTER)
}

impl Task {
    pub(super) fn answer(&mut self, ask: Ask) {
        match ask {
            Ask::Promote(reply) => self.takeover(reply),
            Ask::Status(tx) => {
                let _ = tx.send(self.state(Instant::now()));
            }
        }
    }

    /// A request for an IKE SA awaiting a takeover: when admitted ([`Candidates::admit`])
    /// and its integrity checks under the stored IKE SA's keys, that IKE SA and its child
    /// SAs are taken out of the store and installed.
    pub(super) fn on_candidate(&mut self, c: Candidate) {
        let now = Instant::now();
        let counters = Arc::clone(&self.counters);
        match self
            .on_demand
            .admit(now, self.inbox.last_authentic, c.remote)
        {
            Ok(()) => {}
            Err(Skip::PeerAlive) => return Counters::add(&counters.on_demand_peer_alive, 1),
            Err(Skip::Limited) => return Counters::add(&counters.on_demand_limited, 1),
        }
        let Some(record) = self.inbox.store.ike(c.spi_r) else {
            return Counters::add(&counters.on_demand_refused, 1);
        };
        let synced = record;
        if !gate64_ike::responder::synced_request_authentic(synced, &c.datagram) {
            tracing::debug!(peer = %c.remote, "HA on-demand takeover: request not authentic");
            return Counters::add(&counters.on_demand_refused, 1);
        }
        let children: Vec<u32> = synced.children.iter().map(|r| r.inbound_spi).collect();
        let Some((ike, child)) = self.inbox.store.take_one(c.spi_r, &children) else {
            return;
        };
        tracing::info!(
            peer = %c.remote,
            spi = format_args!("{:016x}", c.spi_r),
            child_sas = child.len(),
            "HA on-demand takeover: the peer is quiet and its client's request authenticated"
        );
        Counters::add(&counters.on_demand, 1);
        self.install(vec![ike], child, Reply(None), false);
    }

    fn state(&self, now: Instant) -> HaState {
        let (ike, child) = self.inbox.store.len();
        let last = self.inbox.last_authentic;
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        HaState {
            peer: Some(self.peer.to_string()),
            stored_ike_sas: ike as u64,
            stored_child_sas: child as u64,
            last_from_peer_secs: last.map(|t| now.saturating_duration_since(t).as_secs_f64()),
            peer_quiet: peer_quiet(last, now),
            installed: get(&self.counters.installed),
            install_failed: get(&self.counters.install_failed),
            on_demand: get(&self.counters.on_demand),
            error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_is_quiet_only_past_three_flush_intervals() {
        let now = Instant::now() + Duration::from_secs(60);
        assert!(peer_quiet(None, now), "never heard");
        assert!(!peer_quiet(Some(now), now));
        assert!(!peer_quiet(Some(now - QUIET_AFTER), now));
        assert!(peer_quiet(
            Some(now - QUIET_AFTER - Duration::from_millis(1)),
            now
        ));
        assert_eq!(QUIET_AFTER, Duration::from_secs(3));
    }

    /// An on-demand takeover takes its one IKE SA out of the store, leaves the others, and
    /// makes the responder's awaiting set be sent again.
    #[test]
    fn take_one_takes_out_one_ike_sa_and_leaves_the_rest() {
        let mut store = super::super::Store::new(8, 8);
        let mut sa = super::super::store::sample();
        let mut add = |sa: &gate64_ike::responder::SyncedIkeSa| {
            let body = gate64_ha::encode_ike_sa(sa);
            store.apply(gate64_ha::MessageType::IkeSa, &body).unwrap();
        };
        add(&sa);
        let first = sa.spi_r;
        sa.spi_r += 1;
        add(&sa);
        assert!(store.ike_spis_if_changed().is_some());
        let (ike, child) = store.take_one(first, &[0xc1]).expect("stored");
        assert_eq!((ike.spi_r, child.len()), (first, 0));
        assert_eq!(store.len(), (1, 0));
        assert!(store.ike(first).is_none() && store.ike(sa.spi_r).is_some());
        assert!(store.take_one(first, &[]).is_none(), "taken once");
        let awaiting = store.ike_spis_if_changed().expect("changed");
        assert_eq!(awaiting.len(), 1);
    }

    /// Nothing is looked at while the peer speaks; once quiet, one source gets its burst and
    /// then one a second, and all sources together no more than the total.
    #[test]
    fn candidates_are_admitted_only_from_a_quiet_peer_within_the_limits() {
        let mut c = Candidates::new();
        let start = Instant::now() + Duration::from_secs(60);
        let heard = Some(start);
        let client: SocketAddr = "[2001:db8::7]:4500".parse().unwrap();
        assert_eq!(c.admit(start, heard, client), Err(Skip::PeerAlive));
        let quiet = start + QUIET_AFTER + Duration::from_millis(1);
        for _ in 0..PER_SOURCE_BURST {
            assert_eq!(c.admit(quiet, heard, client), Ok(()));
        }
        assert_eq!(c.admit(quiet, heard, client), Err(Skip::Limited));
        let later = quiet + Duration::from_secs(1);
        assert_eq!(c.admit(later, heard, client), Ok(()), "refilled");
        let admitted = (0..2 * TOTAL_BURST)
            .filter(|n| {
                let other = SocketAddr::from(([10, (n >> 8) as u8, *n as u8, 1], 4500));
                c.admit(later, heard, other).is_ok()
            })
            .count();
        assert!(
            admitted < TOTAL_BURST as usize,
            "the total bound holds: {admitted}"
        );
        assert!(admitted > 0);
    }
}
