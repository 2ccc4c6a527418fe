//! `[ha]`: the state sync of an active/standby pair (docs/scale-out.md, "State
//! synchronisation").
//!
//! Both nodes run this the same way; which one serves is the address's business
//! (keepalived). Each node streams the IKE and child SAs its own responder makes to its
//! peer, sealed by gate64-ha, over one UDP socket (`ha.listen` to `ha.peer`):
//!
//! - the responder's events ([`Tap::on_event`]) name each IKE SA and child SA that came up
//!   (negotiated or rekeyed) or went; a gone one is sent at once, the others within
//!   [`FLUSH_EVERY`];
//! - every [`FLUSH_EVERY`] the node sends the IKE SAs whose message IDs moved since the last
//!   flush, and each of its other IKE SAs again every [`REFRESH_FLUSHES`] flushes; a child
//!   SA's whole record when it is new here (made, rekeyed, moved to another peer address, or
//!   installed at a takeover) and again every [`REFRESH_FLUSHES`] flushes (so a restarted
//!   peer, or one that lost a datagram, has both kinds again within that); and
//!   otherwise only the counters (outbound sequence number, inbound replay high-water mark)
//!   of the child SAs whose counters moved, batched ([`gate64_ha::ChildCounters`]). The peer
//!   is never more than a flush behind on them (gate64-esp adds `TAKEOVER_SEQ_MARGIN` to
//!   the outbound number at takeover for the packets of that last interval).
//!
//! What the peer sends is kept in a bounded [`store::Store`]; nothing is installed from it
//! and nothing is sent for it until a takeover ([`HaHandle::promote`]: `gate64 ha promote`
//! or SIGUSR1, from the keepalived notify script on MASTER), which installs every child SA
//! into the SA database and every IKE SA into the responder, and empties the store. From then on this node's
//! responder reports those SAs like its own, so it streams them back to the peer once that
//! runs again. A client's own request, or its ESP for one of its synced child SAs (the store's
//! child SPIs are published to `SaDb::awaiting` at each flush), can also take its IKE SA
//! over, once the peer has gone quiet ([`trigger`], "on demand"). Only a message that authenticated under the shared secret, from `ha.peer`,
//! reaches the store; every message is counted ([`Counters`]).

mod store;
mod trigger;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use gate64_config::Config;
use gate64_esp::{SaDb, TAKEOVER_SEQ_MARGIN};
use gate64_ha::{
    ChildCounters, ChildSaRecord, Gone, MAX_MESSAGE, MessageType, Opener, Refusal, Sealer,
};
use gate64_ike::responder::{Event, SyncedIkeSa};
use gate64_io::ike::IkeControl;
use gate64_io::iphttps::LeaseHints;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

use store::{Applied, MAX_CHILD_RECORDS, MAX_IKE_RECORDS, Store, StoreDrop};
pub(crate) use trigger::HaHandle;
use trigger::{Ask, Candidate, Candidates, Reply};

/// How often IKE SAs whose message IDs moved, and every child SA's counters, are sent.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// The sync socket's send and receive buffers, bytes: a flush's burst of records (one
/// datagram each) for many thousand clients.
const SOCKET_BUFFER: usize = 8 << 20;
/// Every this many flushes each IKE SA's and each child SA's whole record goes again (an
/// IKE SA's also whenever its message IDs moved, a child SA's counters at every flush they
/// moved): what a restarted peer, or one that lost the record's datagram, waits at most for
/// it. Each SA's turn falls on another flush (by SPI, [`refresh_turn`]), spreading them.
pub(crate) const REFRESH_FLUSHES: u64 = 30;

/// Whether the SA with this SPI has its refresh turn at flush number `flushes`: once in
/// every [`REFRESH_FLUSHES`] consecutive flushes.
fn refresh_turn(spi: u64, flushes: u64) -> bool {
    spi.wrapping_add(flushes).is_multiple_of(REFRESH_FLUSHES)
}

/// This node's own IKE SAs (by responder SPI), for their refresh: each is named once in
/// every [`REFRESH_FLUSHES`] flushes by [`IkeRefresh::due`].
#[derive(Default)]
struct IkeRefresh {
    held: HashSet<u64>,
}

impl IkeRefresh {
    /// An IKE SA came up here, or its record was exported.
    fn up(&mut self, spi_r: u64) {
        self.held.insert(spi_r);
    }

    /// An IKE SA went.
    fn gone(&mut self, spi_r: u64) {
        self.held.remove(&spi_r);
    }

    /// The IKE SAs whose refresh turn flush number `flushes` is.
    fn due(&self, flushes: u64) -> Vec<u64> {
        (self.held.iter().copied())
            .filter(|&spi| refresh_turn(spi, flushes))
            .collect()
    }

    /// After a flush asked for `due` and the responder exported `exported`: a due IKE SA the
    /// responder no longer has (its end's event was lost) is forgotten; every exported one
    /// is held.
    fn exported(&mut self, due: &[u64], exported: &[SyncedIkeSa]) {
        let found: HashSet<u64> = exported.iter().map(|sa| sa.spi_r).collect();
        for spi in due.iter().filter(|s| !found.contains(s)) {
            self.held.remove(spi);
        }
        self.held.extend(found);
    }
}
/// Changes the responder's events may queue for the sync task; beyond, one is dropped and
/// counted (`tap_full`), and the next flush's child SA sweep still sends child SAs.
const TAP_QUEUE: usize = 65_536;

/// The counters of the sync channel, `gate64_ha_sync_total{direction,result}`.
#[derive(Default)]
pub(crate) struct Counters {
    sent: AtomicU64,
    send_failed: AtomicU64,
    tap_full: AtomicU64,
    stored: AtomicU64,
    refused: [AtomicU64; 5],
    from_elsewhere: AtomicU64,
    undecodable: AtomicU64,
    unknown_version: AtomicU64,
    counters_unknown_sa: AtomicU64,
    store_full: AtomicU64,
    installed: AtomicU64,
    install_failed: AtomicU64,
    /// Child SAs installed at a takeover and taken out again because their IKE SA could not
    /// be installed.
    withdrawn: AtomicU64,
    on_demand: AtomicU64,
    on_demand_peer_alive: AtomicU64,
    on_demand_limited: AtomicU64,
    on_demand_refused: AtomicU64,
    /// IKE SAs an ESP packet took over on demand (also counted in `on_demand`), and the ESP
    /// packets not looked at or refused.
    on_demand_esp: AtomicU64,
    on_demand_esp_peer_alive: AtomicU64,
    on_demand_esp_limited: AtomicU64,
    on_demand_esp_refused: AtomicU64,
    /// The store's distinct IKE SA and child SA records, `gate64_ha_store_records{kind}`.
    held: [AtomicU64; 2],
}

/// Every refusal of gate64-ha, in [`Counters::refused`]'s order.
const REFUSALS: [Refusal; 5] = [
    Refusal::Malformed,
    Refusal::TooLong,
    Refusal::Unauthenticated,
    Refusal::Replayed,
    Refusal::StaleEpoch,
];

impl Counters {
    /// `(direction, result, count)` for every label pair.
    pub(crate) fn samples(&self) -> Vec<(&'static str, &'static str, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = vec![
            ("out", "sent", get(&self.sent)),
            ("out", "send_failed", get(&self.send_failed)),
            ("out", "tap_full", get(&self.tap_full)),
            ("in", "stored", get(&self.stored)),
            ("in", "from_elsewhere", get(&self.from_elsewhere)),
            (
                "in",
                StoreDrop::Undecodable.as_str(),
                get(&self.undecodable),
            ),
            (
                "in",
                StoreDrop::UnknownVersion.as_str(),
                get(&self.unknown_version),
            ),
            ("in", "counters_unknown_sa", get(&self.counters_unknown_sa)),
            ("in", StoreDrop::Full.as_str(), get(&self.store_full)),
            ("takeover", "installed", get(&self.installed)),
            ("takeover", "install_failed", get(&self.install_failed)),
            ("takeover", "withdrawn", get(&self.withdrawn)),
            ("takeover", "on_demand", get(&self.on_demand)),
            (
                "takeover",
                "on_demand_peer_alive",
                get(&self.on_demand_peer_alive),
            ),
            (
                "takeover",
                "on_demand_limited",
                get(&self.on_demand_limited),
            ),
            (
                "takeover",
                "on_demand_refused",
                get(&self.on_demand_refused),
            ),
            ("takeover", "on_demand_esp", get(&self.on_demand_esp)),
            (
                "takeover",
                "on_demand_esp_peer_alive",
                get(&self.on_demand_esp_peer_alive),
            ),
            (
                "takeover",
                "on_demand_esp_limited",
                get(&self.on_demand_esp_limited),
            ),
            (
                "takeover",
                "on_demand_esp_refused",
                get(&self.on_demand_esp_refused),
            ),
        ];
        for (r, c) in REFUSALS.iter().zip(&self.refused) {
            out.push(("in", r.as_str(), get(c)));
        }
        out
    }

    /// `(kind, records)`: the distinct IKE SA and child SA records the store holds (a
    /// record that came again replaces its older one and counts once).
    pub(crate) fn held(&self) -> Vec<(&'static str, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![("ike", get(&self.held[0])), ("child", get(&self.held[1]))]
    }

    /// Sets the store's record counts to what `store` holds now.
    fn set_held(&self, store: &Store) {
        let (ike, child) = store.len();
        for (c, n) in self.held.iter().zip([ike, child]) {
            c.store(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }

    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// What the responder's events tell the sync task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Ike(u64),
    Child(u32),
    Gone(Gone),
}

/// The responder's side: called with every event on the IKE driver's thread; never blocks.
/// Requests for IKE SAs that wait for a takeover go on a queue of their own
/// ([`trigger::CANDIDATE_QUEUE`]), so a flood of them cannot crowd out the changes.
#[derive(Clone)]
pub(crate) struct Tap(mpsc::Sender<Change>, Arc<Counters>, mpsc::Sender<Candidate>);

impl Tap {
    pub(crate) fn on_event(&self, e: &Event) {
        if let Event::TakeoverCandidate {
            remote,
            spi_r,
            datagram,
            ..
        } = e
        {
            let candidate = Candidate {
                remote: *remote,
                spi_r: *spi_r,
                datagram: datagram.clone(),
            };
            if self.2.try_send(candidate).is_err() {
                Counters::add(&self.1.on_demand_limited, 1);
            }
            return;
        }
        let change = match e {
            Event::IkeSaUp { spi_r, .. } => Change::Ike(*spi_r),
            Event::IkeSaDown { spi_r, .. } => Change::Gone(Gone::IkeSa(*spi_r)),
            Event::ChildSaUp(pair) => Change::Child(pair.inbound.spi),
            Event::ChildSaDown { inbound_spi } => Change::Gone(Gone::ChildSa(*inbound_spi)),
            // The child SAs' records name the old address: they go whole again.
            Event::PeerMoved { inbound_spis, .. } => {
                for spi in inbound_spis {
                    self.send(Change::Child(*spi));
                }
                return;
            }
            _ => return,
        };
        self.send(change);
    }

    fn send(&self, change: Change) {
        if self.0.try_send(change).is_err() {
            Counters::add(&self.1.tap_full, 1);
        }
    }
}

/// The channel before the responder runs: its socket bound, its keys made.
pub(crate) struct Prepared {
    changes: mpsc::Receiver<Change>,
    candidates: mpsc::Receiver<Candidate>,
    socket: std::net::UdpSocket,
    peer: SocketAddr,
    sealer: Sealer,
    opener: Opener,
    counters: Arc<Counters>,
}

/// Binds `ha.listen` and makes the channel's keys from `ha.secret_file`; `None` without
/// `[ha]`. Before the privilege drop.
pub(crate) fn prepare(cfg: &Config) -> Result<Option<(Tap, Prepared)>> {
    let Some(ha) = &cfg.ha else {
        return Ok(None);
    };
    let bytes = cfg.ha_secret()?.context("ha.secret_file: no secret")?;
    let secret = gate64_ha::SharedSecret::from_file_contents(&bytes)
        .map_err(|e| anyhow::anyhow!("ha.secret_file: {e}"))?;
    // A restart must seal under a higher epoch than before (gate64-ha refuses older ones,
    // and the nonce repeats otherwise): seconds of the wall clock.
    let epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
    let sealer = Sealer::new(&secret, ha.node_id, ha.peer_node_id, epoch)
        .map_err(|e| anyhow::anyhow!("ha.node_id: {e}"))?;
    let opener = Opener::new(&secret, ha.node_id, ha.peer_node_id)
        .map_err(|e| anyhow::anyhow!("ha.node_id: {e}"))?;
    let socket = std::net::UdpSocket::bind(ha.listen)
        .with_context(|| format!("binding the HA sync socket on {} (`ha.listen`)", ha.listen))?;
    socket.set_nonblocking(true)?;
    // Each flush sends every child SA back to back: with a thousand clients the default
    // buffers overflowed and IKE SA records among them were lost. Best effort (needs
    // CAP_NET_ADMIN); the kernel's default stays otherwise.
    let _ =
        gate64_io::sys::set_buffer_force(std::os::fd::AsRawFd::as_raw_fd(&socket), SOCKET_BUFFER);
    let counters = Arc::new(Counters::default());
    let (tx, changes) = mpsc::channel(TAP_QUEUE);
    let (candidate_tx, candidates) = mpsc::channel(trigger::CANDIDATE_QUEUE);
    let prepared = Prepared {
        changes,
        candidates,
        socket,
        peer: ha.peer,
        sealer,
        opener,
        counters: Arc::clone(&counters),
    };
    Ok(Some((Tap(tx, counters, candidate_tx), prepared)))
}

impl Prepared {
    /// Starts the sync task on the current runtime, until `stop` turns true.
    pub(crate) fn spawn(
        self,
        control: IkeControl,
        (sadb, lease_hints): (Arc<SaDb>, Arc<LeaseHints>),
        stop: watch::Receiver<bool>,
    ) -> Result<HaHandle> {
        let socket = tokio::net::UdpSocket::from_std(self.socket)?;
        control.apply(|r| r.set_sync_tracking(true));
        let (asks, promotions) = mpsc::unbounded_channel();
        let handle = HaHandle::new(asks, self.peer, Arc::clone(&self.counters));
        // ESP for a child SA awaiting a takeover, from the ESP stage's drop path.
        let (esp_tx, esp_candidates) = mpsc::channel(trigger::CANDIDATE_QUEUE);
        let sink = trigger::esp_sink(esp_tx, Arc::clone(&self.counters));
        sadb.awaiting().set_sink(sink);
        let task = Task {
            socket,
            peer: self.peer,
            sealer: self.sealer,
            inbox: Inbox {
                peer: self.peer,
                opener: self.opener,
                store: Store::new(MAX_IKE_RECORDS, MAX_CHILD_RECORDS),
                counters: Arc::clone(&self.counters),
                last_authentic: None,
            },
            counters: self.counters,
            control,
            sadb,
            lease_hints,
            pending_ike: BTreeSet::new(),
            ike_sas: IkeRefresh::default(),
            children: HashSet::new(),
            sent_counters: HashMap::new(),
            flushes: 0,
            on_demand: Candidates::new(),
        };
        info!(peer = %task.peer, "HA state sync up");
        tokio::spawn(task.run(
            (self.changes, self.candidates, esp_candidates),
            promotions,
            stop,
        ));
        Ok(handle)
    }
}

/// The receiving end: what authenticates from the peer goes into the store.
struct Inbox {
    peer: SocketAddr,
    opener: Opener,
    store: Store,
    counters: Arc<Counters>,
    /// When the last message that opened came from the peer.
    last_authentic: Option<Instant>,
}

impl Inbox {
    /// Takes one datagram from `from`: only a message from the peer's address that opens
    /// (authentic, fresh) reaches the store; every other is counted and dropped.
    fn receive(&mut self, msg: &mut [u8], from: SocketAddr) {
        let c = &self.counters;
        if from != self.peer {
            return Counters::add(&c.from_elsewhere, 1);
        }
        let opened = match self.opener.open(msg) {
            Ok(o) => o,
            Err(refusal) => {
                let at = REFUSALS.iter().position(|r| *r == refusal).unwrap_or(0);
                debug!(reason = refusal.as_str(), "HA sync message refused");
                return Counters::add(&c.refused[at], 1);
            }
        };
        self.last_authentic = Some(Instant::now());
        match self.store.apply(opened.kind, opened.plaintext) {
            Ok(Applied { unknown_counters }) => {
                Counters::add(&c.stored, 1);
                Counters::add(&c.counters_unknown_sa, unknown_counters);
            }
            Err(StoreDrop::Undecodable) => Counters::add(&c.undecodable, 1),
            Err(StoreDrop::UnknownVersion) => Counters::add(&c.unknown_version, 1),
            Err(StoreDrop::Full) => Counters::add(&c.store_full, 1),
        }
        c.set_held(&self.store);
    }
}

struct Task {
    socket: tokio::net::UdpSocket,
    peer: SocketAddr,
    sealer: Sealer,
    inbox: Inbox,
    counters: Arc<Counters>,
    control: IkeControl,
    sadb: Arc<SaDb>,
    /// The /64s the peer's IP-HTTPS clients held, from the synced IKE SAs' remote addresses.
    lease_hints: Arc<LeaseHints>,
    /// IKE SAs that came up since the last flush.
    pending_ike: BTreeSet<u64>,
    /// This node's IKE SAs, for their refresh.
    ike_sas: IkeRefresh,
    /// This node's child SAs, swept every flush.
    children: HashSet<u32>,
    /// The counters last sent of each child SA whose record went; one missing here goes
    /// whole at the next flush.
    sent_counters: HashMap<u32, ChildCounters>,
    /// Flushes so far, for [`refresh_turn`].
    flushes: u64,
    /// The limits of the on-demand takeover.
    on_demand: Candidates,
}

impl Task {
    async fn run(
        mut self,
        (mut changes, mut candidates, mut esp_candidates): (
            mpsc::Receiver<Change>,
            mpsc::Receiver<Candidate>,
            mpsc::Receiver<gate64_esp::EspCandidate>,
        ),
        mut promotions: mpsc::UnboundedReceiver<Ask>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(FLUSH_EVERY);
        let mut buf = vec![0u8; MAX_MESSAGE + 1];
        loop {
            if *stop.borrow() {
                return;
            }
            tokio::select! {
                Some(change) = changes.recv() => self.note(change).await,
                _ = tick.tick() => self.flush().await,
                got = self.socket.recv_from(&mut buf) => match got {
                    Ok((len, from)) => self.inbox.receive(&mut buf[..len], from),
                    Err(e) => debug!(error = %e, "HA sync socket"),
                },
                Some(ask) = promotions.recv() => self.answer(ask),
                Some(candidate) = candidates.recv() => self.on_candidate(candidate),
                Some(candidate) = esp_candidates.recv() => self.on_esp_candidate(candidate),
                changed = stop.changed() => if changed.is_err() {
                    return;
                },
            }
        }
    }

    async fn note(&mut self, change: Change) {
        match change {
            Change::Ike(spi) => {
                self.pending_ike.insert(spi);
                self.ike_sas.up(spi);
            }
            Change::Child(spi) => {
                self.children.insert(spi);
                self.sent_counters.remove(&spi);
            }
            Change::Gone(gone) => {
                self.pending_ike.retain(|s| gone != Gone::IkeSa(*s));
                if let Gone::IkeSa(spi) = gone {
                    self.ike_sas.gone(spi);
                }
                if let Gone::ChildSa(spi) = gone {
                    self.children.remove(&spi);
                    self.sent_counters.remove(&spi);
                }
                let (kind, body) = gone.encode();
                self.send(kind, &body).await;
            }
        }
    }

    /// Tells the responder which of the peer's IKE SAs, and the ESP stage which of its child
    /// SAs, wait here for a takeover (when that changed), then sends the IKE SAs that came up, whose message IDs moved or whose
    /// refresh turn it is, and the child SAs ([`Task::flush_children`]).
    async fn flush(&mut self) {
        self.flushes = self.flushes.wrapping_add(1);
        // Also after a takeover emptied the store.
        self.counters.set_held(&self.inbox.store);
        if let Some(awaiting) = self.inbox.store.ike_spis_if_changed() {
            let store = &self.inbox.store;
            self.publish_lease_hints(awaiting.iter().filter_map(|&(_, r)| store.ike_made(r)));
            self.control
                .apply(move |r| r.set_awaiting_takeover(awaiting));
        }
        if let Some(awaiting) = self.inbox.store.child_spis_if_changed() {
            self.sadb.awaiting().publish(awaiting);
        }
        let due = self.ike_sas.due(self.flushes);
        let mut fresh: Vec<u64> = std::mem::take(&mut self.pending_ike).into_iter().collect();
        fresh.extend_from_slice(&due);
        let (tx, rx) = oneshot::channel::<Vec<SyncedIkeSa>>();
        let asked = self.control.apply(move |r| {
            let mut spis = r.take_sync_changes();
            spis.extend(fresh);
            spis.sort_unstable();
            spis.dedup();
            let now = Instant::now();
            let _ = tx.send(
                spis.iter()
                    .filter_map(|&s| r.export_ike_sa(s, now))
                    .collect(),
            );
        });
        if asked && let Ok(sas) = rx.await {
            self.ike_sas.exported(&due, &sas);
            for sa in &sas {
                self.send(MessageType::IkeSa, &gate64_ha::encode_ike_sa(sa))
                    .await;
            }
        }
        self.flush_children().await;
    }

    /// Tells the IP-HTTPS server the /64 of each IKE SA record's IPv6 remote address, and
    /// when the peer made that IKE SA, so a client reconnecting here after a takeover gets
    /// its /64, and so its address, back.
    fn publish_lease_hints<'a>(&self, records: impl Iterator<Item = (&'a SyncedIkeSa, Instant)>) {
        self.lease_hints
            .publish(records.filter_map(|(r, made)| match r.remote.ip() {
                std::net::IpAddr::V6(a) => Some((a, made)),
                std::net::IpAddr::V4(_) => None,
            }));
    }

    /// Sends the whole record of each child SA that is new here or whose refresh turn it is,
    /// then, batched, the counters of the others whose counters moved since last sent.
    async fn flush_children(&mut self) {
        let now = Instant::now();
        let spis: Vec<u32> = self.children.iter().copied().collect();
        let mut moved = Vec::new();
        for spi in spis {
            let Some((outbound_next_seq, inbound_highest_seq)) = self.sadb.export_counters(spi)
            else {
                self.children.remove(&spi);
                self.sent_counters.remove(&spi);
                continue;
            };
            let counters = ChildCounters {
                spi,
                outbound_next_seq,
                inbound_highest_seq,
            };
            let refresh = refresh_turn(u64::from(spi), self.flushes);
            match self.sent_counters.get(&spi) {
                Some(last) if !refresh => {
                    if *last != counters {
                        moved.push(counters);
                        self.sent_counters.insert(spi, counters);
                    }
                }
                _ => {
                    let Some(sa) = self.sadb.export_sa(spi) else {
                        continue;
                    };
                    let record = ChildSaRecord::from_synced(&sa, now);
                    self.sent_counters.insert(spi, record.counters());
                    self.send(MessageType::ChildSa, &record.encode()).await;
                }
            }
        }
        for body in ChildCounters::encode_batches(&moved) {
            self.send(MessageType::ChildCounters, &body).await;
        }
    }

    async fn send(&mut self, kind: MessageType, body: &[u8]) {
        let mut msg = zeroize::Zeroizing::new(Vec::with_capacity(body.len() + 64));
        let sent = match self.sealer.seal(kind, body, &mut msg) {
            Ok(_) => self.socket.send_to(&msg, self.peer).await.is_ok(),
            Err(e) => {
                warn!(error = %e, "HA sync message not sealed");
                false
            }
        };
        let c = &self.counters;
        Counters::add(if sent { &c.sent } else { &c.send_failed }, 1);
    }

    /// Installs every stored SA: the child SAs into the SA database (outbound sequence
    /// numbers advanced by `TAKEOVER_SEQ_MARGIN`, inbound ones up to the synced mark
    /// refused as replays), then the IKE SAs into the responder; tells `reply` what was
    /// installed once the responder has.
    fn takeover(&mut self, reply: Reply) {
        let (stored_ike, stored_child) = self.inbox.store.len();
        debug!(stored_ike, stored_child, "HA takeover");
        // Records that came since the last flush have no hint yet.
        self.publish_lease_hints(self.inbox.store.ike_records());
        let (ike, child) = self.inbox.store.take();
        self.install(ike, child, reply, true);
    }

    /// Installs `child` into the SA database and then `ike` into the responder, counting
    /// each; tells `reply` what was installed. `all`: the whole store was taken, so the
    /// responder's set of IKE SAs awaiting a takeover is emptied too.
    fn install(
        &mut self,
        ike: Vec<SyncedIkeSa>,
        child: Vec<ChildSaRecord>,
        reply: Reply,
        all: bool,
    ) {
        let now = Instant::now();
        let c = Arc::clone(&self.counters);
        let mut children = 0;
        let mut children_failed = 0;
        // The child SAs this call installed: the only ones it may take out again.
        let mut installed_now = HashSet::new();
        for record in child {
            let spi = record.inbound.spi;
            match self
                .sadb
                .install_synced(record.into_synced(now), TAKEOVER_SEQ_MARGIN)
            {
                Ok(()) => {
                    children += 1;
                    self.children.insert(spi);
                    installed_now.insert(spi);
                    Counters::add(&c.installed, 1);
                }
                Err(e) => {
                    warn!(spi = format_args!("{spi:08x}"), error = %e, "synced child SA not installed");
                    Counters::add(&c.install_failed, 1);
                    children_failed += 1;
                }
            }
        }
        let synced = ike;
        let total = synced.len();
        info!(
            ike_sas = total,
            child_sas = children,
            "HA takeover: installing the synced SAs"
        );
        let mut promoted = gate64_control::Promoted {
            child_installed: children,
            child_failed: children_failed,
            ..Default::default()
        };
        let reply_later = reply.clone();
        let sadb = Arc::clone(&self.sadb);
        let asked = self.control.apply(move |r| {
            for sa in synced {
                let spi = sa.spi_r;
                let child_spis: Vec<u32> = sa.children.iter().map(|c| c.inbound_spi).collect();
                match r.install_synced_ike_sa(Instant::now(), sa) {
                    Ok(()) => {
                        Counters::add(&c.installed, 1);
                        promoted.ike_installed += 1;
                    }
                    Err(e) => {
                        warn!(spi = format_args!("{spi:016x}"), error = %e, "synced IKE SA not installed");
                        Counters::add(&c.install_failed, 1);
                        promoted.ike_failed += 1;
                        let withdrawn = withdraw_children(&sadb, &installed_now, &child_spis);
                        Counters::add(&c.withdrawn, withdrawn);
                        promoted.child_installed = promoted.child_installed.saturating_sub(withdrawn);
                        promoted.child_failed += withdrawn;
                    }
                }
            }
            if all {
                r.set_awaiting_takeover(Default::default());
            }
            reply_later.send(promoted);
        });
        if !asked {
            reply.send(gate64_control::Promoted::refused(
                "the IKE driver has stopped: the synced IKE SAs were not installed",
            ));
        }
    }
}

/// Takes out of `sadb` the child SAs of an IKE SA that could not be installed, of those
/// `installed_now` holds (this takeover's: an SPI that was already in use belongs to another
/// SA): without their IKE SA nothing would rekey or delete them, and their inner addresses
/// would hold no lease on this node, which could hand them to another client. How many.
fn withdraw_children(sadb: &SaDb, installed_now: &HashSet<u32>, child_spis: &[u32]) -> u64 {
    let mut withdrawn = 0;
    for spi in child_spis.iter().filter(|spi| installed_now.contains(spi)) {
        if sadb.remove(*spi).is_some() {
            warn!(
                spi = format_args!("{spi:08x}"),
                "synced child SA withdrawn: its IKE SA was not installed"
            );
            withdrawn += 1;
        }
    }
    withdrawn
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_ike::responder::RekeyKind;

    /// Node 1's inbox for node 2 at `10.0.9.2:4501`, with its shared secret and counters.
    fn test_inbox() -> (gate64_ha::SharedSecret, SocketAddr, Arc<Counters>, Inbox) {
        let secret = gate64_ha::SharedSecret::from_file_contents(&[b'k'; 48]).unwrap();
        let peer: SocketAddr = "10.0.9.2:4501".parse().unwrap();
        let counters = Arc::new(Counters::default());
        let inbox = Inbox {
            peer,
            opener: Opener::new(&secret, 1, 2).unwrap(),
            store: Store::new(8, 8),
            counters: Arc::clone(&counters),
            last_authentic: None,
        };
        (secret, peer, counters, inbox)
    }

    /// Only what authenticates from the peer's address reaches the store.
    #[test]
    fn the_inbox_stores_only_authentic_fresh_messages_from_the_peer() {
        let (secret, peer, counters, mut inbox) = test_inbox();
        let mut from_peer = Sealer::new(&secret, 2, 1, 7).unwrap();
        let mut reflected = Sealer::new(&secret, 1, 2, 7).unwrap();
        let record = gate64_ha::encode_ike_sa(&store::sample());
        let seal = |s: &mut Sealer| {
            let mut m = Vec::new();
            s.seal(MessageType::IkeSa, &record, &mut m).unwrap();
            m
        };
        let good = seal(&mut from_peer);
        inbox.receive(&mut good.clone(), "10.0.9.3:4501".parse().unwrap());
        inbox.receive(&mut seal(&mut reflected), peer);
        let mut tampered = seal(&mut from_peer);
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        inbox.receive(&mut tampered, peer);
        assert_eq!(inbox.store.len(), (0, 0), "nothing stored yet");
        assert_eq!(inbox.last_authentic, None, "nothing authentic came yet");
        inbox.receive(&mut good.clone(), peer);
        inbox.receive(&mut good.clone(), peer);
        assert_eq!(inbox.store.len(), (1, 0));
        assert!(inbox.last_authentic.is_some());
        let samples = counters.samples();
        for expected in [
            ("in", "from_elsewhere", 1),
            ("in", "unauthenticated", 2),
            ("in", "stored", 1),
            ("in", "replayed", 1),
        ] {
            assert!(samples.contains(&expected), "{expected:?} in {samples:?}");
        }
        let (ike, _) = inbox.store.take();
        assert_eq!(ike[0], store::sample());
    }

    /// Every IKE SA held here is due for its refresh exactly once in any
    /// [`REFRESH_FLUSHES`] consecutive flushes, its message IDs moving or not; one that
    /// went, or that the responder no longer exports, is not due again.
    #[test]
    fn each_ike_sa_is_refreshed_once_every_refresh_flushes() {
        let mut ike = IkeRefresh::default();
        let spis = [2, 3, 0x1d, u64::MAX, 0x8000_0000_0000_0001];
        for spi in spis.into_iter().chain([40, 41]) {
            ike.up(spi);
        }
        ike.gone(40);
        let mut seen: HashMap<u64, Vec<u64>> = HashMap::new();
        for flush in 1_000..1_000 + REFRESH_FLUSHES {
            let due = ike.due(flush);
            let exported: Vec<SyncedIkeSa> = (due.iter())
                .filter(|&&spi| spi != 41)
                .map(|&spi_r| SyncedIkeSa {
                    spi_r,
                    ..store::sample()
                })
                .collect();
            ike.exported(&due, &exported);
            for spi in due {
                seen.entry(spi).or_default().push(flush);
            }
        }
        for spi in spis {
            assert_eq!(seen.get(&spi).map(Vec::len), Some(1), "{spi:#x}: {seen:?}");
        }
        assert!(!seen.contains_key(&40), "gone: never due");
        assert_eq!(seen[&41].len(), 1, "due once, not exported");
        let later: Vec<u64> = (0..REFRESH_FLUSHES).flat_map(|f| ike.due(f)).collect();
        assert!(!later.contains(&41), "then forgotten: {later:?}");
        assert_eq!(later.len(), spis.len());
        // The turns spread: these SPIs do not all fall on one flush.
        let flushes: HashSet<u64> = seen.values().flatten().copied().collect();
        assert!(flushes.len() > 1, "{seen:?}");
    }

    /// `stored` counts messages; the held gauge counts distinct records, so an update of a
    /// record already held does not raise it and a gone one lowers it.
    #[test]
    fn the_held_gauge_counts_distinct_records_not_messages() {
        let (secret, peer, counters, mut inbox) = test_inbox();
        let mut sealer = Sealer::new(&secret, 2, 1, 7).unwrap();
        let mut deliver = |kind, body: &[u8]| {
            let mut m = Vec::new();
            sealer.seal(kind, body, &mut m).unwrap();
            inbox.receive(&mut m, peer);
        };
        let mut sa = store::sample();
        for _ in 0..3 {
            deliver(MessageType::IkeSa, &gate64_ha::encode_ike_sa(&sa));
            sa.next_id_in += 1;
        }
        sa.spi_r = 77;
        deliver(MessageType::IkeSa, &gate64_ha::encode_ike_sa(&sa));
        assert!(counters.samples().contains(&("in", "stored", 4)));
        assert_eq!(counters.held(), vec![("ike", 2), ("child", 0)]);
        let (kind, gone) = Gone::IkeSa(77).encode();
        deliver(kind, &gone);
        assert_eq!(counters.held(), vec![("ike", 1), ("child", 0)]);
    }

    /// A peer that moved makes its child SAs' records go whole again.
    #[test]
    fn the_tap_names_the_child_sas_of_a_peer_that_moved() {
        let (tx, mut rx) = mpsc::channel(4);
        let (candidate_tx, _candidates) = mpsc::channel(1);
        let tap = Tap(tx, Arc::new(Counters::default()), candidate_tx);
        tap.on_event(&Event::PeerMoved {
            spi_r: 2,
            inbound_spis: vec![0xc1, 0xc2],
            peer: "[2001:db8::8]:4500".parse().unwrap(),
            native: None,
        });
        assert_eq!(rx.try_recv(), Ok(Change::Child(0xc1)));
        assert_eq!(rx.try_recv(), Ok(Change::Child(0xc2)));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn the_tap_names_what_came_and_went_and_counts_a_full_queue() {
        let counters = Arc::new(Counters::default());
        let (tx, mut rx) = mpsc::channel(2);
        let (candidate_tx, mut candidates) = mpsc::channel(1);
        let tap = Tap(tx, Arc::clone(&counters), candidate_tx);
        tap.on_event(&Event::Rekeyed {
            kind: RekeyKind::Ike,
        });
        tap.on_event(&Event::IkeSaDown {
            ike_spi: 1,
            spi_r: 2,
            peer: "[2001:db8::7]:4500".parse().unwrap(),
            identity: String::new(),
            tunnel: None,
        });
        tap.on_event(&Event::ChildSaDown { inbound_spi: 3 });
        tap.on_event(&Event::ChildSaDown { inbound_spi: 4 });
        assert_eq!(rx.try_recv(), Ok(Change::Gone(Gone::IkeSa(2))));
        assert_eq!(rx.try_recv(), Ok(Change::Gone(Gone::ChildSa(3))));
        assert!(
            rx.try_recv().is_err(),
            "the third change found the queue full"
        );
        let candidate = |spi_r| Event::TakeoverCandidate {
            local: "[2001:db8::1]:4500".parse().unwrap(),
            remote: "[2001:db8::7]:4500".parse().unwrap(),
            spi_r,
            datagram: vec![1, 2, 3],
        };
        tap.on_event(&candidate(5));
        tap.on_event(&candidate(6));
        let first = candidates.try_recv().expect("a candidate");
        assert_eq!((first.spi_r, first.datagram), (5, vec![1, 2, 3]));
        assert!(candidates.try_recv().is_err(), "the second found it full");
        assert!(rx.try_recv().is_err(), "candidates are not changes");
        let samples = counters.samples();
        assert!(samples.contains(&("out", "tap_full", 1)), "{samples:?}");
        assert!(
            samples.contains(&("takeover", "on_demand_limited", 1)),
            "{samples:?}"
        );
        for refusal in REFUSALS {
            assert!(
                samples.contains(&("in", refusal.as_str(), 0)),
                "{refusal:?}"
            );
        }
    }

    /// A failed IKE SA takes out only the child SAs this takeover installed for it.
    #[test]
    fn a_failed_ike_sa_withdraws_only_the_child_sas_the_takeover_installed() {
        let sadb = SaDb::new();
        let now = Instant::now();
        let pair = |spi: u32| {
            store::test_child_pair(
                store::test_sa_params(spi, 3, now),
                store::test_sa_params(spi | 0x8000_0000, 4, now),
            )
        };
        // 0x100 was there before the takeover; 0x101 and 0x102 the takeover installed.
        for spi in [0x100, 0x101, 0x102] {
            sadb.install(pair(spi)).unwrap();
        }
        let installed_now: HashSet<u32> = [0x101, 0x102].into();
        let withdrawn = withdraw_children(&sadb, &installed_now, &[0x100, 0x101, 0x103]);
        assert_eq!(
            withdrawn, 1,
            "only 0x101: 0x100 is another SA's, 0x103 never went in"
        );
        assert!(
            sadb.inbound(0x100).is_some(),
            "an SA the takeover did not install stays"
        );
        assert!(
            sadb.inbound(0x101).is_none(),
            "the failed IKE SA's child SA is gone"
        );
        assert!(
            sadb.inbound(0x102).is_some(),
            "another IKE SA's child SA stays"
        );
        assert_eq!(
            withdraw_children(&sadb, &installed_now, &[0x101]),
            0,
            "taken out once"
        );
    }
}
