//! The takeover's triggers: `gate64 ha promote` and SIGUSR1 ([`HaHandle::promote`]), which
//! install every SA the peer synced; a client's authenticated request for its synced IKE SA,
//! or its authenticated ESP for one of that IKE SA's synced child SAs, while the peer is
//! quiet, which installs that client's IKE SA and child SAs ("on demand",
//! [`Task::on_candidate`], [`Task::on_esp_candidate`]); and the state `gate64 ha status`
//! shows ([`HaHandle::status`]).
//!
//! On demand installs one client, not the whole store: the peer may be alive and serving
//! its other clients (two active nodes behind ECMP, each the other's `[ha]` peer, where a
//! client whose path moved is the only one to take over), and a client whose request checks
//! under its synced keys is proof enough for its own SAs only. A hot standby that should take
//! everything at once is promoted (`gate64 ha promote`, SIGUSR1).
//!
//! Bounded: a request or ESP packet is looked at only when the peer has been quiet for
//! [`QUIET_AFTER`], within [`PER_SOURCE_PER_SEC`] per client address and [`TOTAL_PER_SEC`]
//! in all (token buckets of `gate64_wire::ratelimit`, shared by both triggers), from a queue
//! of [`CANDIDATE_QUEUE`] each, and costs one integrity check; only one that passes installs
//! anything. Every one is counted under `gate64_ha_sync_total{direction="takeover"}`:
//! requests as `on_demand` (IKE SAs installed, by either trigger), `on_demand_peer_alive`,
//! `on_demand_limited` (over a limit or the queue full), `on_demand_refused` (not stored, or
//! its integrity check failed); ESP packets as `on_demand_esp` (IKE SAs they installed, also
//! in `on_demand`), `on_demand_esp_peer_alive`, `on_demand_esp_limited`,
//! `on_demand_esp_refused`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gate64_control::{HaState, Promoted};
use gate64_esp::EspCandidate;
use gate64_ha::ChildSaRecord;
use gate64_ike::responder::SyncedIkeSa;
use tokio::sync::mpsc;

use gate64_wire::ratelimit::RateLimiter;

use super::{Counters, FLUSH_EVERY, Store, Task};

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

/// What an ESP candidate came to.
#[derive(Debug)]
pub(super) enum EspOutcome {
    /// The peer sent something authentic within [`QUIET_AFTER`].
    PeerAlive,
    /// Over the per-source or the total limit.
    Limited,
    /// Its SPI is no stored child SA's, no stored IKE SA names that child SA, or it did not
    /// authenticate under the child SA's synced keys: nothing taken.
    Refused,
    /// Authentic: the IKE SA naming its child SA and all that IKE SA's child SAs, taken out
    /// of the store.
    Taken(Box<SyncedIkeSa>, Vec<ChildSaRecord>),
}

/// ESP for a child SA the store may hold: when admitted ([`Candidates::admit`], the limits
/// the requests share) and it authenticates under that child SA's synced keys (exactly one
/// ICV check, no replay window moved), the IKE SA record naming that child SA and all its
/// child SAs are taken out of `store`. The packet itself was dropped (`esp_unknown_spi`).
pub(super) fn esp_candidate(
    store: &mut Store,
    limits: &mut Candidates,
    last: Option<Instant>,
    c: &mut EspCandidate,
    now: Instant,
) -> EspOutcome {
    match limits.admit(now, last, c.remote) {
        Ok(()) => {}
        Err(Skip::PeerAlive) => return EspOutcome::PeerAlive,
        Err(Skip::Limited) => return EspOutcome::Limited,
    }
    let stored = gate64_esp::spi_of(&c.esp).and_then(|spi| store.child(spi));
    let Some((record, Some(spi_r))) = stored else {
        return EspOutcome::Refused;
    };
    if !record.esp_authentic(&mut c.esp, now) {
        return EspOutcome::Refused;
    }
    let Some(children) = (store.ike(spi_r)).map(|ike| {
        (ike.children.iter())
            .map(|r| r.inbound_spi)
            .collect::<Vec<u32>>()
    }) else {
        return EspOutcome::Refused;
    };
    match store.take_one(spi_r, &children) {
        Some((ike, child)) => EspOutcome::Taken(Box::new(ike), child),
        None => EspOutcome::Refused,
    }
}

/// The ESP stage's sink for ESP candidates ([`gate64_esp::AwaitingTakeover::set_sink`]):
/// a packet is copied only once it holds a place in `tx`'s queue (of [`CANDIDATE_QUEUE`]),
/// so a full queue costs no allocation; a full queue's refusal is counted
/// (`on_demand_esp_limited`).
pub(super) fn esp_sink(
    tx: mpsc::Sender<EspCandidate>,
    counters: Arc<Counters>,
) -> impl Fn(SocketAddr, &[u8]) -> bool + Send + Sync + 'static {
    move |remote, esp| match tx.try_reserve() {
        Ok(place) => {
            place.send(EspCandidate {
                remote,
                esp: esp.to_vec(),
            });
            true
        }
        Err(_) => {
            Counters::add(&counters.on_demand_esp_limited, 1);
            false
        }
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
        self.install_on_demand(c.remote, ike, child, "request");
    }

    /// ESP the ESP stage found no SA for but whose SPI is a stored child SA's
    /// ([`esp_candidate`]): counted, and what it took out of the store installed.
    pub(super) fn on_esp_candidate(&mut self, mut c: EspCandidate) {
        let now = Instant::now();
        let counters = Arc::clone(&self.counters);
        let last = self.inbox.last_authentic;
        let (ike, child) = match esp_candidate(
            &mut self.inbox.store,
            &mut self.on_demand,
            last,
            &mut c,
            now,
        ) {
            EspOutcome::PeerAlive => {
                return Counters::add(&counters.on_demand_esp_peer_alive, 1);
            }
            EspOutcome::Limited => return Counters::add(&counters.on_demand_esp_limited, 1),
            EspOutcome::Refused => {
                tracing::debug!(peer = %c.remote, "HA on-demand takeover: ESP refused");
                return Counters::add(&counters.on_demand_esp_refused, 1);
            }
            EspOutcome::Taken(ike, child) => (ike, child),
        };
        Counters::add(&counters.on_demand_esp, 1);
        self.install_on_demand(c.remote, *ike, child, "ESP");
    }

    /// Installs what an on-demand takeover took out of the store for the client at `remote`
    /// (its IKE SA and child SAs), after logging it and counting it as `on_demand`; `proof`
    /// names what of the client's authenticated ("request" or "ESP").
    fn install_on_demand(
        &mut self,
        remote: SocketAddr,
        ike: SyncedIkeSa,
        child: Vec<ChildSaRecord>,
        proof: &'static str,
    ) {
        tracing::info!(
            peer = %remote,
            spi = format_args!("{:016x}", ike.spi_r),
            child_sas = child.len(),
            "HA on-demand takeover: the peer is quiet and its client's {proof} authenticated"
        );
        Counters::add(&self.counters.on_demand, 1);
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

    /// A child SA record (AES-GCM, inbound SPI `spi`, replay mark `high`) and the client's
    /// sealing side of it.
    fn child(spi: u32, high: u64) -> (ChildSaRecord, gate64_esp::Outbound) {
        use gate64_esp::SyncedChildSa;
        let now = Instant::now();
        let inbound = super::super::store::test_sa_params(spi, 3, now);
        let client = gate64_esp::Outbound::new(&inbound).unwrap();
        let outbound = super::super::store::test_sa_params(!spi, 4, now);
        let sa = SyncedChildSa {
            pair: super::super::store::test_child_pair(inbound, outbound),
            outbound_next_seq: 1,
            inbound_highest_seq: high,
        };
        (ChildSaRecord::from_synced(&sa, now), client)
    }

    fn esp(client: &gate64_esp::Outbound, from: &str) -> EspCandidate {
        let h = client.header_len();
        let mut buf = vec![0; h + 4 + client.cipher().max_trailer()];
        buf[h..h + 4].copy_from_slice(&[0x60, 0, 0, 0]);
        let len = client
            .seal(&mut buf, 0, 4, gate64_esp::NEXT_HEADER_IPV6)
            .unwrap();
        buf.truncate(len);
        EspCandidate {
            remote: from.parse().unwrap(),
            esp: buf,
        }
    }

    /// ESP takes its client over only from a quiet peer, within the limits the requests
    /// share, when it authenticates under a stored child SA's keys and a stored IKE SA names
    /// that child SA; then that IKE SA and all its child SAs leave the store, and nothing
    /// else does.
    #[test]
    fn esp_takes_over_only_when_quiet_admitted_stored_and_authentic() {
        let mut store = Store::new(8, 8);
        let mut ike = super::super::store::sample();
        ike.children = vec![
            gate64_ike::responder::SyncedChildRef {
                inbound_spi: 0xc1,
                outbound_spi: 0xd1,
                age: Duration::from_secs(5),
            },
            gate64_ike::responder::SyncedChildRef {
                inbound_spi: 0xc2,
                outbound_spi: 0xd2,
                age: Duration::from_secs(5),
            },
        ];
        let (c1, client1) = child(0xc1, 0);
        let (c2, _) = child(0xc2, 0);
        let (orphan, orphan_client) = child(0xc9, 0);
        store
            .apply(
                gate64_ha::MessageType::IkeSa,
                &gate64_ha::encode_ike_sa(&ike),
            )
            .unwrap();
        for r in [&c1, &c2, &orphan] {
            store
                .apply(gate64_ha::MessageType::ChildSa, &r.encode())
                .unwrap();
        }
        let published = store.child_spis_if_changed().expect("records came");
        assert_eq!(published, [0xc1, 0xc2, 0xc9].into_iter().collect());
        assert!(store.child_spis_if_changed().is_none(), "unchanged since");

        let mut limits = Candidates::new();
        let start = Instant::now() + Duration::from_secs(60);
        let heard = Some(start);
        let quiet = start + QUIET_AFTER + Duration::from_millis(1);
        let client = "[2001:db8::7]:0";
        let outcome = |store: &mut Store, limits: &mut Candidates, now, mut c: EspCandidate| {
            esp_candidate(store, limits, heard, &mut c, now)
        };
        assert!(matches!(
            outcome(&mut store, &mut limits, start, esp(&client1, client)),
            EspOutcome::PeerAlive
        ));
        let mut forged = esp(&client1, "[2001:db8::8]:0");
        let last = forged.esp.len() - 1;
        forged.esp[last] ^= 1;
        assert!(matches!(
            outcome(&mut store, &mut limits, quiet, forged),
            EspOutcome::Refused
        ));
        assert!(
            matches!(
                outcome(
                    &mut store,
                    &mut limits,
                    quiet,
                    esp(&orphan_client, "[2001:db8::9]:0")
                ),
                EspOutcome::Refused
            ),
            "no IKE SA record names that child SA"
        );
        assert_eq!(store.len(), (1, 3), "nothing taken");
        // The requests' per-source burst is this source's too.
        let later = quiet + Duration::from_secs(5);
        assert_eq!(limits.admit(later, heard, client.parse().unwrap()), Ok(()));
        assert_eq!(limits.admit(later, heard, client.parse().unwrap()), Ok(()));
        assert!(matches!(
            outcome(&mut store, &mut limits, later, esp(&client1, client)),
            EspOutcome::Limited
        ));
        let refilled = later + Duration::from_secs(1);
        match outcome(&mut store, &mut limits, refilled, esp(&client1, client)) {
            EspOutcome::Taken(taken, children) => {
                assert_eq!(taken.spi_r, ike.spi_r);
                let mut spis: Vec<u32> = children.iter().map(|r| r.inbound.spi).collect();
                spis.sort_unstable();
                assert_eq!(spis, vec![0xc1, 0xc2]);
            }
            other => panic!("not taken over: {other:?}"),
        }
        assert_eq!(store.len(), (0, 1), "the orphan child SA stays");
        assert_eq!(
            store.child_spis_if_changed(),
            Some([0xc9].into_iter().collect())
        );
        let again = refilled + Duration::from_secs(1);
        assert!(
            matches!(
                outcome(&mut store, &mut limits, again, esp(&client1, client)),
                EspOutcome::Refused
            ),
            "taken once"
        );
    }

    /// The ESP stage's offers fill the queue up to [`CANDIDATE_QUEUE`]; past that an offer is
    /// refused and counted as `on_demand_esp_limited`, and the queue holds the first ones
    /// only; once one is taken out, there is room again.
    #[test]
    fn a_full_esp_queue_refuses_and_counts_without_taking_the_packet() {
        let counters = Arc::new(Counters::default());
        let (tx, mut rx) = mpsc::channel(CANDIDATE_QUEUE);
        let awaiting = gate64_esp::AwaitingTakeover::default();
        assert!(awaiting.set_sink(esp_sink(tx, Arc::clone(&counters))));
        let remote: SocketAddr = "[2001:db8::7]:4500".parse().unwrap();
        let limited = || counters.on_demand_esp_limited.load(Ordering::Relaxed);
        for n in 0..CANDIDATE_QUEUE {
            assert!(awaiting.offer(remote, &(n as u32).to_be_bytes()), "{n}");
        }
        assert_eq!(limited(), 0);
        let late = 0xffff_ffffu32.to_be_bytes();
        assert!(!awaiting.offer(remote, &late), "the queue is full");
        assert!(!awaiting.offer(remote, &late));
        assert_eq!(limited(), 2, "each refusal counted");
        let mut held = Vec::new();
        while let Ok(c) = rx.try_recv() {
            assert_eq!(c.remote, remote);
            held.push(c.esp);
        }
        let first: Vec<Vec<u8>> = (0..CANDIDATE_QUEUE as u32)
            .map(|n| n.to_be_bytes().to_vec())
            .collect();
        assert_eq!(held, first, "the refused packets were not queued");
        assert!(awaiting.offer(remote, &late), "room again");
        assert_eq!(rx.try_recv().unwrap().esp, late.to_vec());
        assert_eq!(limited(), 2);
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
