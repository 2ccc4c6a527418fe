//! One worker: a single-threaded event loop over its Teredo sockets (one per server address,
//! SO_REUSEPORT with the other workers) and its own queue of the corporate link. Both event
//! sources go through one dispatch: read a batch, hand each packet to the dataplane, file its
//! verdict ([`crate::batch::Batch`]), send the batch. UDP is received and sent in
//! `recvmmsg`/`sendmmsg` batches and UDP GSO sends.

use crate::batch::{self, Batch};
use crate::sys::{self, BATCH, Received};
use gate64_dataplane::{Direction, DropReason, HEADROOM, Side, Stats, Verdict, Worker};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Largest Teredo datagram accepted. The Teredo link MTU is 1280 (RFC 4380 §5.1.2); the rest
/// leaves room for headers and generous clients. Larger datagrams are counted as truncated.
pub const UDP_SLOT: usize = 2048;
/// How often relay timers run (bubble retries are paced at 2 s).
const TICK: Duration = Duration::from_millis(500);
/// Batches drained from one descriptor before looking at the others again.
const ROUNDS: usize = 8;
/// Packets per wake-up from which a worker counts as busy and moderates (see [`COALESCE`]).
const BUSY_PACKETS: usize = 8;
/// How long a busy worker lets packets gather before it polls again.
const COALESCE: Duration = Duration::from_micros(250);
/// Packets one TUN read can yield: a 64 KiB GSO packet split at the smallest IPv6 MSS.
const TUN_BATCH: usize = 128;
/// A zeroed virtio-net header: "no offload" for a packet written alone to an offloading TUN.
const NO_OFFLOAD_HDR: [u8; tun_rs::VIRTIO_NET_HDR_LEN] = [0; tun_rs::VIRTIO_NET_HDR_LEN];

/// The corporate side of a worker: a TUN queue, or (in the no-root lab) a connected UDP
/// socket that carries raw IPv6 packets to an in-process corporate network.
pub enum CorpLink {
    /// One queue of the multi-queue TUN device.
    Tun(tun_rs::SyncDevice),
    /// A connected datagram socket, one IPv6 packet per datagram.
    Socket(UdpSocket),
}

impl std::fmt::Debug for CorpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorpLink::Tun(t) => write!(f, "Tun(fd {})", t.as_raw_fd()),
            CorpLink::Socket(s) => write!(f, "Socket({:?})", s.local_addr()),
        }
    }
}

impl CorpLink {
    /// Writes one IPv6 packet (a TUN write or a datagram); safe from any thread. On an
    /// offloading TUN the packet goes behind a "no offload" virtio-net header.
    pub fn write(&self, packet: &[u8]) -> io::Result<usize> {
        if self.offload() {
            sys::writev2(self.fd(), &NO_OFFLOAD_HDR, packet)
        } else {
            sys::write(self.fd(), packet)
        }
    }

    /// Writes `packets` in order. On an offloading TUN each flow's consecutive TCP segments
    /// go as one super-packet, straight from the callers' buffers ([`crate::gro`]).
    pub fn write_packets(&self, packets: &[&[u8]]) -> crate::gro::Written {
        if self.offload() {
            return crate::gro::write_coalesced(self.fd(), packets);
        }
        let mut w = crate::gro::Written::default();
        for p in packets {
            match self.write(p) {
                Ok(_) => w.ok += 1,
                Err(_) => w.failed += 1,
            }
        }
        w
    }

    /// True for a TUN opened with virtio-net headers (TSO/GRO offload).
    pub fn offload(&self) -> bool {
        matches!(self, CorpLink::Tun(d) if d.tcp_gso())
    }

    fn fd(&self) -> RawFd {
        match self {
            CorpLink::Tun(t) => t.as_raw_fd(),
            CorpLink::Socket(s) => s.as_raw_fd(),
        }
    }
}

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
    let mut next_tick = Instant::now();
    let mut busy = 0usize;
    while !stop.load(Ordering::Relaxed) {
        // Interrupt moderation, as NICs do: after a busy round, let packets gather for a moment
        // so the next round reads, coalesces (GRO) and writes them in larger batches. Idle
        // links go straight back to epoll, so a lone ping pays nothing.
        if busy >= BUSY_PACKETS {
            std::thread::sleep(COALESCE);
        }
        busy = 0;
        epoll.wait(&mut ready, 100)?;
        for &token in &ready {
            let source = if token == corp_token {
                Source::Corp
            } else {
                Source::Udp(token as usize)
            };
            busy += lp.drain(&io, &mut dp, source);
        }
        let now = Instant::now();
        if now >= next_tick {
            dp.handle_timeout(now, io.index, io.count);
            batch::drain(&io.sockets, &io.corp, &lp.stats, &mut dp);
            next_tick = now + TICK;
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
    udp_slots: Vec<Vec<u8>>,
    received: [Received; BATCH],
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
            tun_rs::VIRTIO_NET_HDR_LEN + 65_535
        } else {
            0
        };
        EventLoop {
            stats,
            udp_slots: vec![vec![0u8; HEADROOM + UDP_SLOT]; BATCH],
            received: [Received {
                len: 0,
                from: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                truncated: false,
            }; BATCH],
            corp_slots: vec![vec![0u8; corp_slot]; TUN_BATCH],
            corp_sizes: vec![0usize; TUN_BATCH],
            gso_buf: vec![0u8; gso_len],
            batch: Batch::new(TUN_BATCH),
        }
    }

    /// Up to [`ROUNDS`] batches from `source`, each processed and sent before the next read.
    /// Returns how many Teredo datagrams arrived (what interrupt moderation counts).
    fn drain(&mut self, io: &WorkerIo, dp: &mut Worker, source: Source) -> usize {
        let mut datagrams = 0;
        for _ in 0..ROUNDS {
            let Ok(n) = self.read(io, source) else {
                break;
            };
            let now = Instant::now();
            dp.start_batch();
            for i in 0..n {
                let v = self.handle(io, dp, source, now, i);
                self.batch.dispatch(&io.sockets, i, v);
            }
            let slots = match source {
                Source::Udp(_) => &self.udp_slots,
                Source::Corp => &self.corp_slots,
            };
            self.batch.send(&io.sockets, &io.corp, &self.stats, slots);
            batch::drain(&io.sockets, &io.corp, &self.stats, dp);
            if let Source::Udp(_) = source {
                datagrams += n;
                if n < BATCH {
                    break;
                }
            }
        }
        datagrams
    }

    /// Reads one batch into the slots; how many packets arrived.
    fn read(&mut self, io: &WorkerIo, source: Source) -> io::Result<usize> {
        match source {
            Source::Udp(k) => {
                let (_, sock) = io.sockets.get(k).ok_or(io::ErrorKind::NotFound)?;
                sys::recv_batch(
                    sock.as_raw_fd(),
                    &mut self.udp_slots,
                    HEADROOM,
                    &mut self.received,
                )
            }
            Source::Corp => corp_read(
                &io.corp,
                &mut self.gso_buf,
                &mut self.corp_slots,
                &mut self.corp_sizes,
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
                let r = self.received[i];
                if r.truncated {
                    self.stats.packet(Side::Internet, Direction::Rx, r.len);
                    self.stats.count_drops(DropReason::Truncated, 1);
                    return Verdict::Drop(DropReason::Truncated);
                }
                let local = io.sockets.get(k).map_or(Ipv4Addr::UNSPECIFIED, |(a, _)| *a);
                let slot = &mut self.udp_slots[i];
                dp.handle_teredo(now, local, r.from, slot, HEADROOM, HEADROOM + r.len)
            }
            Source::Corp => {
                let slot = &mut self.corp_slots[i];
                dp.handle_tun(now, slot, HEADROOM, HEADROOM + self.corp_sizes[i])
            }
        }
    }
}

/// Reads from the corporate link into `slots[..][HEADROOM..]`, returning how many packets
/// arrived. An offloading TUN hands over one GSO packet per read, which tun-rs splits into
/// segments; otherwise packets are read one per call until the batch is full or none is left.
fn corp_read(
    link: &CorpLink,
    gso_buf: &mut [u8],
    slots: &mut [Vec<u8>],
    sizes: &mut [usize],
) -> io::Result<usize> {
    if let CorpLink::Tun(dev) = link
        && dev.tcp_gso()
    {
        return dev.recv_multiple(gso_buf, slots, sizes, HEADROOM);
    }
    let mut n = 0;
    while n < BATCH.min(slots.len()) {
        match sys::read(link.fd(), &mut slots[n][HEADROOM..]) {
            Ok(len) => {
                sizes[n] = len;
                n += 1;
            }
            Err(e) if n == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(n)
}
