//! The clients' shared state: one small [`Slot`] per client (what the TUN demultiplexer and
//! the status file need), the map from inner address to client, the run's counters, and
//! [`LoadHost`], the [`Host`] behind each client's IPsec layer.
//!
//! Uplink: the TUN reader appends a packet to the owning client's queue (packets back to
//! back in one reused buffer, no allocation per packet) and wakes the client's session, which
//! takes the queue through [`Host::take`], seals it in its ESP SA and sends it. Downlink: the
//! session writes what its SAs opened straight to the TUN device.

use super::probe;
use super::spec::ProbeSpec;
use super::tun;
pub use crate::bench::spec::Transport;
use crate::bench::spec::{SLOW_UPLINK_MS, SLOW_UPLINKS_KEPT, SlowUplink, unix_ms};
use anyhow::{Context, Result};
use gate64_client::ipsec::{InnerLink, IpsecStats};
use gate64_client::{Host, Ready};
use ipnet::Ipv6Net;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;
use tokio::sync::Notify;

/// Bytes queued for one client's tunnel before the TUN reader drops its packets (the
/// session is behind; TCP backs off).
const UPLINK_LIMIT: usize = 256 * 1024;
/// Packets taken from the device per wake-up before yielding.
const READ_BUDGET: usize = 256;
/// One read: the virtio-net header and a packet or TCP super-packet of up to 64 KiB.
const READ_BUFFER: usize = tun_rs::VIRTIO_NET_HDR_LEN + 65_535;
/// Tunnels per client: infrastructure and intranet.
pub const TUNNELS: u32 = 2;

/// One client as the rest of the process sees it.
pub struct Slot {
    /// The transport is up (qualified, or the RA received).
    transport_up: AtomicU8,
    /// Child SAs up.
    tunnels_up: AtomicU8,
    /// When the client was started, in seconds since the run's start plus one (0: not yet).
    started: AtomicU32,
    /// The inner address gate64 gave (CFG_REPLY).
    inner: Mutex<Option<Ipv6Addr>>,
    /// Packets from the TUN device for this client's tunnel, back to back.
    uplink: Mutex<Vec<u8>>,
    /// When the first packet now in `uplink` was queued, in ms since the run's start plus
    /// one (0: empty); set and cleared under `uplink`'s lock.
    queued_at: AtomicU64,
    /// When the client's session last handed it a packet (one its SAs opened), in ms since
    /// the run's start plus one (0: never), as of the fleet's last clock tick.
    delivered_at: AtomicU64,
    wake: Notify,
    /// The echoes of the client's probes.
    pub probe: probe::Track,
}

impl Slot {
    fn new() -> Self {
        Slot {
            transport_up: AtomicU8::new(0),
            tunnels_up: AtomicU8::new(0),
            started: AtomicU32::new(0),
            inner: Mutex::new(None),
            uplink: Mutex::new(Vec::new()),
            queued_at: AtomicU64::new(0),
            delivered_at: AtomicU64::new(0),
            wake: Notify::new(),
            probe: probe::Track::default(),
        }
    }

    /// Whether the uplink queued now has waited since at or before `since` (ms since the
    /// run's start plus one), untaken.
    pub fn uplink_waiting_since(&self, since: u64) -> bool {
        matches!(self.queued_at.load(Relaxed), at if at > 0 && at <= since)
    }

    /// Transport and both tunnels up.
    pub fn is_up(&self) -> bool {
        self.transport_up.load(Relaxed) != 0 && u32::from(self.tunnels_up.load(Relaxed)) >= TUNNELS
    }

    /// Seconds since the run's start when the client started, if it has.
    pub fn started_at(&self) -> Option<u32> {
        self.started.load(Relaxed).checked_sub(1)
    }

    /// The client's inner address, once gate64 gave one.
    pub fn inner(&self) -> Option<Ipv6Addr> {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Counters of the whole run (the status file's).
#[derive(Default)]
pub struct Counters {
    /// Teredo clients qualified.
    pub teredo_up: AtomicU64,
    /// IP-HTTPS clients configured by a router advertisement.
    pub iphttps_up: AtomicU64,
    /// IKE SAs established (MMSA).
    pub mmsa: AtomicU64,
    /// Child SAs installed (QMSA).
    pub qmsa: AtomicU64,
    /// Packets written to the TUN device.
    pub rx_packets: AtomicU64,
    /// Packets read from the TUN device and queued for a client.
    pub tx_packets: AtomicU64,
    /// ESP refused: unknown SPI, failed ICV, replay, outside the selectors.
    pub esp_errors: AtomicU64,
    /// Packets from the TUN device whose source is no client's inner address.
    pub unknown_source: AtomicU64,
    /// Packets from the TUN device dropped because their client's queue was full.
    pub uplink_dropped: AtomicU64,
    /// Packets a client's SAs opened that the TUN device did not take.
    pub tun_write_failed: AtomicU64,
    /// Client sessions that ended with an error (their client is restarted).
    pub session_errors: AtomicU64,
    /// Clients with transport and both tunnels up.
    pub up: AtomicU64,
    /// Clients started and not up within the setup timeout, as the status loop last counted.
    pub failed: AtomicU64,
    /// IKE negotiations completed (IKE_SA_INIT and IKE_AUTH), every session's.
    pub negotiations: AtomicU64,
    /// Probes queued for a client's tunnel.
    pub probe_sent: AtomicU64,
    /// Probe echoes opened by a client's SA.
    pub probe_received: AtomicU64,
    /// Takes of a client's queued uplink [`SLOW_UPLINK_MS`] or more after its first packet
    /// was queued.
    pub uplink_slow: AtomicU64,
    /// The longest wait of a client's queued uplink, in ms.
    pub uplink_longest_wait_ms: AtomicU64,
    /// The last [`SLOW_UPLINKS_KEPT`] slow takes (locked only on a slow take).
    pub slow_uplinks: Mutex<VecDeque<SlowUplink>>,
}

/// Every client's slot, the inner address map and the counters.
pub struct Fleet {
    /// Slot `i` is client `i`'s.
    pub slots: Vec<Slot>,
    /// Which transport client `i` runs.
    pub transports: Vec<Transport>,
    by_inner: RwLock<HashMap<Ipv6Addr, u32>>,
    /// The run's counters.
    pub counters: Counters,
    /// The run's start.
    pub epoch: Instant,
    /// [`Fleet::now_ms`] plus one as of the last [`Fleet::tick_clock`] (once per status
    /// write): what a stamp taken per packet reads instead of the clock.
    coarse_ms: AtomicU64,
    /// The TUN device (set once it exists).
    tun: std::sync::OnceLock<Arc<tun_rs::AsyncDevice>>,
    pool6: Ipv6Net,
    /// The round trips each client makes once up, if any.
    pub probe: Option<ProbeSpec>,
}

impl Fleet {
    /// Slots for `transports.len()` clients whose inner addresses come from `pool6`.
    pub fn new(transports: Vec<Transport>, pool6: Ipv6Net) -> Self {
        let n = transports.len();
        Fleet {
            slots: (0..n).map(|_| Slot::new()).collect(),
            transports,
            by_inner: RwLock::new(HashMap::with_capacity(n)),
            counters: Counters::default(),
            epoch: Instant::now(),
            coarse_ms: AtomicU64::new(1),
            tun: std::sync::OnceLock::new(),
            pool6,
            probe: None,
        }
    }

    /// The same fleet, its clients making the round trips of `probe`.
    pub fn with_probe(mut self, probe: Option<ProbeSpec>) -> Self {
        self.probe = probe;
        self
    }

    /// Milliseconds since the run's start.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Moves the coarse clock the per-packet stamps read to now.
    pub fn tick_clock(&self) {
        self.coarse_ms.store(self.now_ms() + 1, Relaxed);
    }

    /// Sets the TUN device the clients write their downlink to.
    pub fn set_tun(&self, dev: Arc<tun_rs::AsyncDevice>) {
        let _ = self.tun.set(dev);
    }

    /// Marks client `i` started now.
    pub fn mark_started(&self, i: usize) {
        if let Some(s) = self.slots.get(i) {
            let secs = u32::try_from(self.epoch.elapsed().as_secs()).unwrap_or(u32::MAX - 1);
            s.started.store(secs + 1, Relaxed);
        }
    }

    /// Queues `pkt`, read from the TUN device (or a probe), for the client whose inner
    /// address is its source; false if it was dropped (and counted).
    pub fn demux(&self, pkt: &[u8]) -> bool {
        let Some((src, _)) = gate64_wire::ipv6::peek_addrs(pkt) else {
            self.counters.unknown_source.fetch_add(1, Relaxed);
            return false;
        };
        let owner = self
            .by_inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&src)
            .copied();
        let Some(slot) = owner.and_then(|i| self.slots.get(i as usize)) else {
            self.counters.unknown_source.fetch_add(1, Relaxed);
            return false;
        };
        {
            let mut q = slot.uplink.lock().unwrap_or_else(|e| e.into_inner());
            if q.len() + pkt.len() > UPLINK_LIMIT {
                self.counters.uplink_dropped.fetch_add(1, Relaxed);
                return false;
            }
            if q.is_empty() {
                slot.queued_at.store(self.now_ms() + 1, Relaxed);
            }
            q.extend_from_slice(pkt);
        }
        self.counters.tx_packets.fetch_add(1, Relaxed);
        slot.wake.notify_one();
        true
    }

    /// Client `id`'s task took its queued uplink, the first packet of which was queued at
    /// `queued_at` (ms since the run's start plus one): a wait of [`SLOW_UPLINK_MS`] or more
    /// is counted and kept.
    fn note_taken(&self, id: usize, queued_at: u64) {
        let now = self.now_ms() + 1;
        let waited = now.saturating_sub(queued_at);
        let Some(slot) = self.slots.get(id) else {
            return;
        };
        if queued_at == 0 || waited < SLOW_UPLINK_MS {
            return;
        }
        let c = &self.counters;
        c.uplink_slow.fetch_add(1, Relaxed);
        c.uplink_longest_wait_ms.fetch_max(waited, Relaxed);
        let delivered = slot.delivered_at.load(Relaxed);
        let slow = SlowUplink {
            inner: slot.inner(),
            transport: self
                .transports
                .get(id)
                .copied()
                .unwrap_or(Transport::Teredo),
            taken_unix_ms: unix_ms(),
            waited_ms: waited,
            since_delivery_ms: (delivered > 0).then(|| now.saturating_sub(delivered)),
        };
        let mut kept = c.slow_uplinks.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= SLOW_UPLINKS_KEPT {
            kept.pop_front();
        }
        kept.push_back(slow);
    }

    /// Starts a new measuring window for every client's probes (SIGUSR1).
    pub fn reset_probe_window(&self) {
        for slot in &self.slots {
            slot.probe.reset();
        }
    }
}

/// What sits behind client `id`'s IPsec layer: the shared TUN device.
pub struct LoadHost {
    fleet: Arc<Fleet>,
    id: usize,
    /// The counters last added to the fleet's.
    reported: IpsecStats,
    configured: bool,
}

impl LoadHost {
    /// The host of client `id`.
    pub fn new(fleet: Arc<Fleet>, id: usize) -> Self {
        LoadHost {
            fleet,
            id,
            reported: IpsecStats::default(),
            configured: false,
        }
    }

    fn slot(&self) -> Option<&Slot> {
        self.fleet.slots.get(self.id)
    }

    /// Runs `change` on the slot and keeps the fleet's count of clients up in step.
    fn update(&self, change: impl FnOnce(&Slot)) {
        let Some(slot) = self.slot() else { return };
        let was = slot.is_up();
        change(slot);
        match (was, slot.is_up()) {
            (false, true) => {
                self.fleet.counters.up.fetch_add(1, Relaxed);
            }
            (true, false) => {
                self.fleet.counters.up.fetch_sub(1, Relaxed);
            }
            _ => {}
        }
    }

    /// Takes back what this client added to the fleet's counters, when its session ends (a
    /// new one starts from zero).
    pub fn retire(&mut self) {
        self.stats_changed(&IpsecStats {
            dropped: self.reported.dropped,
            negotiations: self.reported.negotiations,
            ..IpsecStats::default()
        });
        if std::mem::take(&mut self.configured) {
            self.transport_counter().fetch_sub(1, Relaxed);
            self.update(|s| s.transport_up.store(0, Relaxed));
        }
    }

    fn transport_counter(&self) -> &AtomicU64 {
        let c = &self.fleet.counters;
        match self.fleet.transports.get(self.id) {
            Some(Transport::Iphttps) => &c.iphttps_up,
            _ => &c.teredo_up,
        }
    }
}

/// Adds `new - old` to `counter`.
fn add_delta(counter: &AtomicU64, old: u64, new: u64) {
    if new > old {
        counter.fetch_add(new - old, Relaxed);
    } else if old > new {
        counter.fetch_sub(old - new, Relaxed);
    }
}

impl InnerLink for LoadHost {
    /// Maps `inner` to this client for the TUN demultiplexer; the routes are the generator's
    /// (`corp_prefixes`), set once for all clients.
    fn install_inner(&mut self, inner: Ipv6Addr, _routes: &[Ipv6Net], _mss: u16) -> Result<()> {
        anyhow::ensure!(
            self.fleet.pool6.contains(&inner),
            "inner address {inner} outside pool6 {}",
            self.fleet.pool6
        );
        let id = u32::try_from(self.id)?;
        let Some(slot) = self.slot() else {
            return Ok(());
        };
        let old = slot
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(inner);
        if old != Some(inner) {
            let mut map = self
                .fleet
                .by_inner
                .write()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(old) = old {
                map.remove(&old);
            }
            map.insert(inner, id);
        }
        Ok(())
    }

    fn stats_changed(&mut self, stats: &IpsecStats) {
        let c = &self.fleet.counters;
        let old = self.reported;
        add_delta(&c.mmsa, old.ike_sas.into(), stats.ike_sas.into());
        add_delta(&c.qmsa, old.child_sas.into(), stats.child_sas.into());
        add_delta(&c.esp_errors, old.dropped, stats.dropped);
        add_delta(&c.negotiations, old.negotiations, stats.negotiations);
        let tunnels = u8::try_from(stats.child_sas).unwrap_or(u8::MAX);
        self.update(|s| s.tunnels_up.store(tunnels, Relaxed));
        self.reported = *stats;
    }
}

impl Host for LoadHost {
    async fn configure(&mut self, _address: Ipv6Addr, _prefix_len: u8, _mtu: u32) -> Result<()> {
        if !std::mem::replace(&mut self.configured, true) {
            self.transport_counter().fetch_add(1, Relaxed);
            self.update(|s| s.transport_up.store(1, Relaxed));
        }
        Ok(())
    }

    /// Writes what the client's SAs opened to the TUN device; packets for no inner address
    /// (clear text over the transport) are not the generator's, and the echoes of the
    /// client's probes are counted in its [`probe::Track`] instead.
    async fn deliver(&mut self, packet: &[u8]) {
        if let Some(slot) = self.slot() {
            slot.delivered_at
                .store(self.fleet.coarse_ms.load(Relaxed), Relaxed);
        }
        if let Some(target) = self
            .fleet
            .probe
            .as_ref()
            .and_then(|p| probe::echo_of(p, packet))
        {
            if let Some(slot) = self.slot() {
                slot.probe.answered(target, self.fleet.now_ms());
                self.fleet.counters.probe_received.fetch_add(1, Relaxed);
            }
            return;
        }
        let to_pool = gate64_wire::ipv6::peek_addrs(packet)
            .is_some_and(|(_, dst)| self.fleet.pool6.contains(&dst));
        let Some(dev) = self.fleet.tun.get().filter(|_| to_pool) else {
            return;
        };
        if tun::write(dev, packet) {
            self.fleet.counters.rx_packets.fetch_add(1, Relaxed);
        } else {
            self.fleet.counters.tun_write_failed.fetch_add(1, Relaxed);
        }
    }

    async fn flush(&mut self) {}

    async fn ready(&mut self) -> Result<Ready> {
        let Some(slot) = self.fleet.slots.get(self.id) else {
            return std::future::pending().await;
        };
        loop {
            if !slot
                .uplink
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
            {
                return Ok(Ready::Packets);
            }
            slot.wake.notified().await;
        }
    }

    fn take(&mut self, _now: Instant, out: &mut Vec<u8>) -> Result<bool> {
        let Some(slot) = self.slot() else {
            return Ok(false);
        };
        let mut q = slot.uplink.lock().unwrap_or_else(|e| e.into_inner());
        if q.is_empty() {
            return Ok(false);
        }
        out.extend_from_slice(&q);
        q.clear();
        let queued_at = slot.queued_at.swap(0, Relaxed);
        drop(q);
        self.fleet.note_taken(self.id, queued_at);
        Ok(true)
    }
}

/// Reads the device for as long as it exists, handing each packet to its client.
pub async fn read_loop(dev: Arc<tun_rs::AsyncDevice>, fleet: Arc<Fleet>) -> Result<()> {
    let mut raw = vec![0u8; READ_BUFFER];
    let mut packets = Vec::with_capacity(2 * READ_BUFFER);
    loop {
        let n = dev.recv(&mut raw).await.context("reading the TUN device")?;
        demux_read(&fleet, &raw[..n.min(raw.len())], &mut packets);
        for _ in 1..READ_BUDGET {
            match dev.try_recv(&mut raw) {
                Ok(n) => demux_read(&fleet, &raw[..n.min(raw.len())], &mut packets),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e).context("reading the TUN device"),
            }
        }
    }
}

/// Cuts one offloaded read into its packets (in `packets`, reused) and hands each to its
/// client.
fn demux_read(fleet: &Fleet, raw: &[u8], packets: &mut Vec<u8>) {
    packets.clear();
    if gate64_io::tun::gro::split_into(raw, packets).is_err() {
        fleet.counters.unknown_source.fetch_add(1, Relaxed);
        return;
    }
    let mut rest = &packets[..];
    while let Ok(p) = gate64_wire::ipv6::Packet::new_checked(rest) {
        let len = p.total_len();
        fleet.demux(p.as_bytes());
        rest = rest.get(len..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What STATUS.json's `uplink_waiting` says now.
    fn waiting(fleet: &Fleet) -> u64 {
        crate::bench::load::status::collect(fleet, 60).uplink_waiting
    }

    fn fleet(probe: Option<ProbeSpec>) -> Arc<Fleet> {
        let pool = "fd00:c1::/104".parse().unwrap();
        Arc::new(Fleet::new(vec![Transport::Teredo; 2], pool).with_probe(probe))
    }

    #[test]
    fn negotiations_survive_the_end_of_a_session_and_add_up_across_sessions() {
        let fleet = fleet(None);
        let c = &fleet.counters;
        let mut host = LoadHost::new(Arc::clone(&fleet), 0);
        let up = IpsecStats {
            ike_sas: 2,
            child_sas: 2,
            negotiations: 2,
            ..IpsecStats::default()
        };
        host.stats_changed(&up);
        assert_eq!((c.mmsa.load(Relaxed), c.negotiations.load(Relaxed)), (2, 2));
        // The SAs are gone with the session; the negotiations it made stay counted.
        host.retire();
        assert_eq!((c.mmsa.load(Relaxed), c.negotiations.load(Relaxed)), (0, 2));
        // The next session negotiates both tunnels again.
        let mut again = LoadHost::new(Arc::clone(&fleet), 0);
        again.stats_changed(&up);
        assert_eq!((c.mmsa.load(Relaxed), c.negotiations.load(Relaxed)), (2, 4));
    }

    #[test]
    fn an_uplink_that_waited_a_second_is_counted_slow_and_kept_with_its_client() {
        let mut fleet = Fleet::new(
            vec![Transport::Teredo, Transport::Iphttps],
            "fd00:c1::/104".parse().unwrap(),
        );
        // The run started 10 s ago, so a packet can have been queued seconds ago.
        fleet.epoch = Instant::now() - std::time::Duration::from_secs(10);
        let fleet = Arc::new(fleet);
        let inner: Ipv6Addr = "fd00:c1::7".parse().unwrap();
        let mut host = LoadHost::new(Arc::clone(&fleet), 1);
        host.install_inner(inner, &[], 1200).unwrap();
        let mut pkt = Vec::new();
        probe::build(&mut pkt, inner, "2001:db8::1".parse().unwrap(), 7, 0);
        // Taken at once: not slow.
        assert!(fleet.demux(&pkt));
        let mut out = Vec::new();
        assert!(host.take(Instant::now(), &mut out).unwrap());
        assert_eq!(fleet.counters.uplink_slow.load(Relaxed), 0);
        // Queued 3 s ago (the second packet does not move the first one's time) and still
        // waiting: counted as waiting, then as slow when taken.
        assert!(fleet.demux(&pkt));
        let now = fleet.now_ms();
        fleet.slots[1].queued_at.store(now + 1 - 3000, Relaxed);
        assert!(fleet.demux(&pkt));
        assert_eq!(waiting(&fleet), 1);
        out.clear();
        assert!(host.take(Instant::now(), &mut out).unwrap());
        assert_eq!(out.len(), 2 * pkt.len());
        assert_eq!(waiting(&fleet), 0);
        let c = &fleet.counters;
        assert_eq!(c.uplink_slow.load(Relaxed), 1);
        assert!(c.uplink_longest_wait_ms.load(Relaxed) >= 3000);
        let kept = c.slow_uplinks.lock().unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].inner, Some(inner));
        assert_eq!(kept[0].transport, Transport::Iphttps);
        assert!(kept[0].waited_ms >= 3000 && kept[0].since_delivery_ms.is_none());
    }

    #[test]
    fn slow_uplinks_keep_only_the_last_ones() {
        let mut fleet = Fleet::new(vec![Transport::Teredo], "fd00:c1::/104".parse().unwrap());
        fleet.epoch = Instant::now() - std::time::Duration::from_secs(10);
        for _ in 0..SLOW_UPLINKS_KEPT + 5 {
            fleet.note_taken(0, 1);
        }
        let c = &fleet.counters;
        assert_eq!(c.uplink_slow.load(Relaxed), (SLOW_UPLINKS_KEPT + 5) as u64);
        assert_eq!(c.slow_uplinks.lock().unwrap().len(), SLOW_UPLINKS_KEPT);
        // An empty queue's take (queued_at 0) and an index past the slots change nothing.
        fleet.note_taken(0, 0);
        fleet.note_taken(7, 1);
        assert_eq!(c.uplink_slow.load(Relaxed), (SLOW_UPLINKS_KEPT + 5) as u64);
    }

    #[tokio::test]
    async fn a_probe_echo_is_counted_for_its_client_and_not_delivered() {
        let target: Ipv6Addr = "2001:db8:100:1::2".parse().unwrap();
        let spec = ProbeSpec {
            targets: vec![target],
            port: 7007,
            interval_ms: 500,
        };
        let fleet = fleet(Some(spec));
        let inner: Ipv6Addr = "fd00:c1::9".parse().unwrap();
        let mut host = LoadHost::new(Arc::clone(&fleet), 1);
        host.install_inner(inner, &[], 1200).unwrap();
        // The probe goes to client 1's queue.
        let mut probe = Vec::new();
        probe::build(&mut probe, inner, target, 7007, 0);
        assert!(fleet.demux(&probe));
        let mut out = Vec::new();
        assert!(host.take(Instant::now(), &mut out).unwrap());
        assert_eq!(out, probe);
        // Its echo is counted for client 1, not client 0.
        let mut echo = Vec::new();
        probe::build(&mut echo, target, inner, 0, 0);
        echo[40..42].copy_from_slice(&7007u16.to_be_bytes());
        echo[42..44].copy_from_slice(&probe::SOURCE_PORT.to_be_bytes());
        host.deliver(&echo).await;
        assert_eq!(fleet.counters.probe_received.load(Relaxed), 1);
        assert_eq!(fleet.counters.rx_packets.load(Relaxed), 0);
        assert!(matches!(
            fleet.slots[1].probe.gap(1, fleet.now_ms()),
            probe::Gap::Measured { .. }
        ));
        assert_eq!(
            fleet.slots[0].probe.gap(1, fleet.now_ms()),
            probe::Gap::Never
        );
    }
}
