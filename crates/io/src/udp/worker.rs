//! One worker: a single-threaded event loop over its Teredo sockets (one per server address,
//! SO_REUSEPORT with the other workers) and its own queue of the corporate link. Both event
//! sources go through one dispatch: read a batch, hand each packet to the dataplane, file its
//! verdict ([`crate::batch::Batch`]), send the batch. UDP is received and sent in
//! `recvmmsg`/`sendmmsg` batches and UDP GSO sends.

use super::gro::{self, GroRx};
use crate::batch::{self, Batch};
use crate::sys;
use crate::tun::CorpLink;
use gate64_dataplane::{Direction, DropReason, HEADROOM, Side, Stats, Verdict, Worker};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use super::gro::UDP_SLOT;
/// The longest a worker waits in epoll before it looks at its stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);
/// Packets drained from one descriptor per wake-up before looking at the others again, as
/// NAPI's budget does: a fixed number of reads (8 of them was one GSO packet each from the
/// TUN) left the TUN's queue to overflow while the UDP side took whole batches.
const PACKET_BUDGET: usize = 1024;
/// Packets per wake-up (from either side) from which a worker counts as busy and moderates
/// (see [`COALESCE`]).
const BUSY_PACKETS: usize = 8;
/// How long a busy worker lets packets gather before it polls again.
const COALESCE: Duration = Duration::from_micros(250);
/// Packets one TUN read can yield: a 64 KiB GSO packet split at the smallest IPv6 MSS.
const TUN_BATCH: usize = 128;
/// Slots for packets from the corporate link: reads gather into one batch while a
/// worst-case read still fits, so small packets for many clients leave in one send.
const CORP_SLOTS: usize = 2 * TUN_BATCH;

/// What a worker thread owns.
#[derive(Debug)]
pub struct WorkerIo {
    /// This worker's index (it runs the relay timers of shard part `index` of `count`).
    pub index: usize,
    /// Number of workers.
    pub count: usize,
    /// One Teredo socket per server address.
    pub sockets: Vec<(Ipv4Addr, UdpSocket)>,
    /// The corporate link (shared: IP-HTTPS connections write into it too).
    pub corp: Arc<CorpLink>,
    /// Largest packet on the corporate link.
    pub corp_mtu: usize,
    /// Clones of the `[ipsec] listen` 4500 sockets, by bound address: ESP towards clients
    /// that reach gate64 directly leaves from them (`Verdict::Native`).
    pub native: Vec<(SocketAddr, UdpSocket)>,
}

/// Runs the event loop until `stop` is set. Errors only when the event loop itself fails.
pub fn run(io: WorkerIo, mut dp: Worker, stop: Arc<AtomicBool>) -> io::Result<()> {
    let epoll = sys::Epoll::new()?;
    for (i, (_, s)) in io.sockets.iter().enumerate() {
        epoll.add(s.as_raw_fd(), i as u64)?;
    }
    let corp_token = io.sockets.len() as u64;
    epoll.add(io.corp.fd(), corp_token)?;
    let mut lp = EventLoop::new(&io, Arc::clone(dp.stats()));
    let mut ready = Vec::with_capacity(8);
    let mut busy = 0usize;
    while !stop.load(Ordering::Relaxed) {
        // Interrupt moderation, as NICs do: after a busy round, let packets gather for a moment
        // so the next round reads, coalesces (GRO) and writes them in larger batches. Idle
        // links go straight back to epoll, so a lone ping pays nothing.
        if busy >= BUSY_PACKETS {
            std::thread::sleep(COALESCE);
        }
        busy = 0;
        // Until the dataplane's next timer (rounded up to whole milliseconds, so that it is
        // due when epoll returns), and at most STOP_CHECK.
        let wait = dp.poll_timeout().map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        });
        let wait_ms = wait.min(STOP_CHECK).as_micros().div_ceil(1000);
        epoll.wait(&mut ready, i32::try_from(wait_ms).unwrap_or(i32::MAX))?;
        for &token in &ready {
            let source = if token == corp_token {
                Source::Corp
            } else {
                Source::Udp(token as usize)
            };
            busy += lp.drain(&io, &mut dp, source, PACKET_BUDGET);
        }
        let now = Instant::now();
        if dp.poll_timeout().is_none_or(|t| now >= t) {
            dp.handle_timeout(now, io.index, io.count);
            batch::drain(&io.sockets, &io.corp, &lp.stats, &mut dp);
        }
    }
    Ok(())
}

/// Where a batch of packets is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The Teredo socket at this index of [`WorkerIo::sockets`].
    Udp(usize),
    /// The corporate link.
    Corp,
}

/// A worker's buffers: packets are read into slots with [`HEADROOM`] and stay there until
/// their batch is sent.
struct EventLoop {
    stats: Arc<Stats>,
    /// The Teredo sockets' datagrams, coalesced by the kernel or not.
    udp: GroRx,
    /// The last UDP read filled every message: the socket may hold more.
    udp_more: bool,
    /// One GSO read from an offloading TUN splits into up to 64 KiB / MSS segments.
    corp_slots: Vec<Vec<u8>>,
    corp_sizes: Vec<usize>,
    gso_buf: Vec<u8>,
    batch: Batch,
}

impl EventLoop {
    fn new(io: &WorkerIo, stats: Arc<Stats>) -> Self {
        let corp_slot = HEADROOM + io.corp_mtu.max(1280) + 64;
        let gso_len = if io.corp.offload() {
            gate64_wire::offload::VNET_HDR_LEN + 65_535
        } else {
            0
        };
        EventLoop {
            stats,
            udp: GroRx::default(),
            udp_more: false,
            corp_slots: vec![vec![0u8; corp_slot]; CORP_SLOTS],
            corp_sizes: vec![0usize; CORP_SLOTS],
            gso_buf: vec![0u8; gso_len],
            batch: Batch::new(CORP_SLOTS.max(gro::POOL)).with_native(
                io.native
                    .iter()
                    .filter_map(|(a, s)| Some((*a, s.try_clone().ok()?)))
                    .collect(),
            ),
        }
    }

    /// Batches from `source` until it has none left or `budget` packets came (a read may
    /// pass it by one GSO packet), each processed and sent before the next read. Returns how
    /// many packets arrived, from either side: what interrupt moderation counts as work.
    /// Datagrams already received are always processed, whatever the budget.
    fn drain(&mut self, io: &WorkerIo, dp: &mut Worker, source: Source, budget: usize) -> usize {
        let mut packets = 0;
        while packets < budget || self.udp.pending() {
            let Ok((n, more)) = self.read(io, source, budget - packets) else {
                break;
            };
            let now = Instant::now();
            dp.start_batch();
            for i in 0..n {
                let v = self.handle(io, dp, source, now, i);
                let slot = match source {
                    Source::Udp(_) => self.udp.segs.get(i).map_or(0, |s| s.slot),
                    Source::Corp => i,
                };
                self.batch.dispatch(&io.sockets, slot, v);
            }
            let slots = match source {
                Source::Udp(_) => &self.udp.slots,
                Source::Corp => &self.corp_slots,
            };
            self.batch.send(&io.sockets, &io.corp, &self.stats, slots);
            batch::drain(&io.sockets, &io.corp, &self.stats, dp);
            packets += n;
            if !more {
                break;
            }
        }
        packets
    }

    /// Reads one batch of at most `want` packets (one GSO read, or one read of coalesced
    /// datagrams, may pass it) into the slots: how many arrived, and whether the source may
    /// hold more. UDP messages already received are cut into a round before reading again.
    fn read(&mut self, io: &WorkerIo, source: Source, want: usize) -> io::Result<(usize, bool)> {
        match source {
            Source::Udp(k) => {
                if !self.udp.pending() {
                    let (_, sock) = io.sockets.get(k).ok_or(io::ErrorKind::NotFound)?;
                    self.udp_more = self.udp.recv(sock.as_raw_fd(), want)?;
                }
                let n = self.udp.next_round();
                Ok((n, self.udp.pending() || self.udp_more))
            }
            Source::Corp => corp_read(
                &io.corp,
                &self.stats,
                &mut self.gso_buf,
                &mut self.corp_slots,
                &mut self.corp_sizes,
                want,
            ),
        }
    }

    /// The dataplane's verdict on packet `i` of the batch just read from `source`.
    fn handle(
        &mut self,
        io: &WorkerIo,
        dp: &mut Worker,
        source: Source,
        now: Instant,
        i: usize,
    ) -> Verdict {
        match source {
            Source::Udp(k) => {
                let Some(r) = self.udp.segs.get(i).copied() else {
                    return Verdict::Drop(DropReason::Truncated);
                };
                if r.truncated {
                    self.stats.packet(Side::Internet, Direction::Rx, r.len);
                    self.stats.count_drops(DropReason::Truncated, 1);
                    return Verdict::Drop(DropReason::Truncated);
                }
                let local = io.sockets.get(k).map_or(Ipv4Addr::UNSPECIFIED, |(a, _)| *a);
                let Some(slot) = self.udp.slots.get_mut(r.slot) else {
                    return Verdict::Drop(DropReason::Truncated);
                };
                dp.handle_teredo(now, local, r.from, slot, HEADROOM, HEADROOM + r.len)
            }
            Source::Corp => {
                let slot = &mut self.corp_slots[i];
                dp.handle_tun(now, slot, HEADROOM, HEADROOM + self.corp_sizes[i])
            }
        }
    }
}

/// Reads from the corporate link into `slots[..][HEADROOM..]` until about `want` packets
/// arrived, the link has none left, or the slots could not take another worst-case read.
/// Returns how many packets arrived and whether the link may hold more. An offloading TUN
/// hands over one GSO packet per read, cut into up to [`TUN_BATCH`]
/// segments; otherwise packets are read one per call.
fn corp_read(
    link: &CorpLink,
    stats: &Stats,
    gso_buf: &mut [u8],
    slots: &mut [Vec<u8>],
    sizes: &mut [usize],
    want: usize,
) -> io::Result<(usize, bool)> {
    let gso = match link {
        CorpLink::Tun(dev) => Some(dev),
        _ => None,
    };
    let per_read = if gso.is_some() { TUN_BATCH } else { 1 };
    let mut n = 0;
    while n < want && n + per_read <= slots.len() {
        let got = match gso {
            Some(dev) => dev.recv_multiple(gso_buf, &mut slots[n..], &mut sizes[n..], HEADROOM),
            None => sys::read(link.fd(), &mut slots[n][HEADROOM..]).map(|len| {
                sizes[n] = len;
                1
            }),
        };
        match got {
            Ok(0) => return Ok((n, false)),
            Ok(k) => n += k,
            // A read the split refused (a GSO type gate64 does not cut, or headers shorter
            // than announced) is consumed and counted. It ends the batch, and with nothing
            // read the drain too, so a queue of such reads cannot hold the worker here.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                stats.count_drops(DropReason::Unsupported, 1);
                return Ok((n, n > 0));
            }
            Err(e) if n == 0 => return Err(e),
            Err(_) => return Ok((n, false)),
        }
    }
    Ok((n, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_dataplane::{DataplaneConfig, Shared};

    fn worker() -> Worker {
        let shared = Shared::new(DataplaneConfig {
            teredo: None,
            relay: gate64_teredo::RelayConfig::default(),
            corp_prefixes: Vec::new(),
            corp_address: "2001:db8:100::1".parse().unwrap(),
            require_ipsec: true,
            ipsec_endpoint: None,
            ipsec4: None,
            ipsec_pool: None,
            sadb: None,
            rs_per_sec: 20,
            rs_burst: 40,
            iphttps_prefix: None,
            iphttps_peer_prefix: None,
            nat64: None,
            binding_log: None,
            self_addresses: Vec::new(),
            dns64_listen: Vec::new(),
            ike_per_client_per_sec: 1000,
        });
        Worker::new(shared, Arc::default())
    }

    /// A corporate link that is a UDP socket, and a socket that writes into it.
    fn corp_lab() -> (WorkerIo, UdpSocket) {
        let corp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let sender = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        corp.connect(sender.local_addr().unwrap()).unwrap();
        corp.set_nonblocking(true).unwrap();
        sender.connect(corp.local_addr().unwrap()).unwrap();
        let io = WorkerIo {
            index: 0,
            count: 1,
            sockets: Vec::new(),
            corp: Arc::new(CorpLink::Socket(corp)),
            corp_mtu: 1280,
            native: Vec::new(),
        };
        (io, sender)
    }

    /// Packets from the corporate link are drained past the old cap of 8 reads, to the
    /// budget, and count as work for interrupt moderation.
    #[test]
    fn corp_reads_drain_to_the_budget_and_count_as_work() {
        let (io, sender) = corp_lab();
        let mut dp = worker();
        let mut lp = EventLoop::new(&io, Arc::clone(dp.stats()));
        // Not IPv6: each is read, judged and dropped.
        for _ in 0..150 {
            sender.send(&[0u8; 40]).unwrap();
        }
        assert_eq!(lp.drain(&io, &mut dp, Source::Corp, 64), 64);
        assert_eq!(lp.drain(&io, &mut dp, Source::Corp, 64), 64);
        assert_eq!(lp.drain(&io, &mut dp, Source::Corp, 64), 22);
        assert_eq!(lp.drain(&io, &mut dp, Source::Corp, 64), 0);
        assert_eq!(lp.stats.packets(Side::Corpnet, Direction::Rx), 150);
        // With the worker's own budget, one wake-up takes them all.
        for _ in 0..150 {
            sender.send(&[0u8; 40]).unwrap();
        }
        let busy = lp.drain(&io, &mut dp, Source::Corp, PACKET_BUDGET);
        assert_eq!(busy, 150);
        assert!(busy >= BUSY_PACKETS);
    }
}
