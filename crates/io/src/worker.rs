//! One worker: a single-threaded event loop over its Teredo sockets (one per server address,
//! SO_REUSEPORT with the other workers) and its own queue of the corporate link. Each packet is
//! processed to completion here; UDP is received and sent in `recvmmsg`/`sendmmsg` batches.

use crate::sys::{self, BATCH, Received};
use gate64_dataplane::{Direction, Drop, HEADROOM, Side, Verdict, Worker};
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
/// Most slots one batch can hold (the larger of the UDP and TUN batches).
const MAX_SLOTS: usize = if BATCH > TUN_BATCH { BATCH } else { TUN_BATCH };
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
    let corp_slot = HEADROOM + io.corp_mtu.max(1280) + 64;
    let mut udp_slots = vec![vec![0u8; HEADROOM + UDP_SLOT]; BATCH];
    // One GSO read from an offloading TUN splits into up to 64 KiB / MSS segments.
    let mut corp_slots = vec![vec![0u8; corp_slot]; TUN_BATCH];
    let mut corp_to_tun: Vec<(usize, usize, usize)> = Vec::with_capacity(TUN_BATCH);
    let mut corp_sizes = vec![0usize; TUN_BATCH];
    let mut gso_buf = vec![
        0u8;
        if io.corp.offload() {
            tun_rs::VIRTIO_NET_HDR_LEN + 65_535
        } else {
            0
        }
    ];
    let mut to_tun: Vec<(usize, usize, usize)> = Vec::with_capacity(BATCH);
    let mut received = [Received {
        len: 0,
        from: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
        truncated: false,
    }; BATCH];
    let mut pending: Vec<Pending> = Vec::with_capacity(TUN_BATCH);
    let mut ready = Vec::with_capacity(8);
    let mut next_tick = Instant::now();
    let stats = Arc::clone(dp.stats());
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
            if token == corp_token {
                for _ in 0..ROUNDS {
                    pending.clear();
                    let n =
                        match corp_read(&io.corp, &mut gso_buf, &mut corp_slots, &mut corp_sizes) {
                            Ok(n) => n,
                            Err(_) => break,
                        };
                    let now = Instant::now();
                    corp_to_tun.clear();
                    for (i, slot) in corp_slots[..n].iter_mut().enumerate() {
                        match dp.handle_tun(now, slot, HEADROOM, HEADROOM + corp_sizes[i]) {
                            Verdict::Udp {
                                from,
                                to,
                                start,
                                end,
                            } => pending.push(Pending {
                                slot: i,
                                start,
                                end,
                                socket: socket_for(&io, from),
                                to,
                            }),
                            // NAT64 output (and hairpins) go back into the kernel.
                            Verdict::Tun { start, end } => corp_to_tun.push((i, start, end)),
                            Verdict::Consumed | Verdict::Drop(_) => {}
                        }
                    }
                    flush(&io, &stats, &pending, &corp_slots);
                    write_tun_batch(&io, &stats, &corp_to_tun, &corp_slots);
                    drain_transmits(&io, &stats, &mut dp);
                    drain_tun_writes(&io, &stats, &mut dp);
                }
            } else if let Some((local, sock)) = io.sockets.get(token as usize) {
                for _ in 0..ROUNDS {
                    let got = match sys::recv_batch(
                        sock.as_raw_fd(),
                        &mut udp_slots,
                        HEADROOM,
                        &mut received,
                    ) {
                        Ok(n) => n,
                        Err(_) => break,
                    };
                    let now = Instant::now();
                    pending.clear();
                    to_tun.clear();
                    for (i, r) in received[..got].iter().enumerate() {
                        if r.truncated {
                            stats.packet(Side::Internet, Direction::Rx, r.len);
                            stats.count_drops(Drop::Truncated, 1);
                            continue;
                        }
                        let slot = &mut udp_slots[i];
                        let v =
                            dp.handle_teredo(now, *local, r.from, slot, HEADROOM, HEADROOM + r.len);
                        match v {
                            Verdict::Tun { start, end } => to_tun.push((i, start, end)),
                            Verdict::Udp {
                                from,
                                to,
                                start,
                                end,
                            } => pending.push(Pending {
                                slot: i,
                                start,
                                end,
                                socket: socket_for(&io, from),
                                to,
                            }),
                            Verdict::Consumed | Verdict::Drop(_) => {}
                        }
                    }
                    flush(&io, &stats, &pending, &udp_slots);
                    write_tun_batch(&io, &stats, &to_tun, &udp_slots);
                    drain_transmits(&io, &stats, &mut dp);
                    drain_tun_writes(&io, &stats, &mut dp);
                    busy += got;
                    if got < BATCH {
                        break;
                    }
                }
            }
        }
        let now = Instant::now();
        if now >= next_tick {
            dp.handle_timeout(now, io.index, io.count);
            drain_transmits(&io, &stats, &mut dp);
            next_tick = now + TICK;
        }
    }
    Ok(())
}

/// A datagram waiting for the batch send: slot, byte range, socket and destination.
#[derive(Debug, Clone, Copy)]
struct Pending {
    slot: usize,
    start: usize,
    end: usize,
    socket: usize,
    to: SocketAddrV4,
}

fn socket_for(io: &WorkerIo, from: Ipv4Addr) -> usize {
    io.sockets.iter().position(|(a, _)| *a == from).unwrap_or(0)
}

/// Kernels without UDP GSO (or a device that refuses it) turn it off for the process.
static GSO_OFF: AtomicBool = AtomicBool::new(false);

/// Sends the pending datagrams. Consecutive datagrams to the same client of the same size (the
/// segments of a TCP super-packet read from the TUN) go out as one UDP GSO send; the rest in
/// `sendmmsg` batches. Order is kept.
fn flush(io: &WorkerIo, stats: &gate64_dataplane::Stats, pending: &[Pending], slots: &[Vec<u8>]) {
    for (si, (_, sock)) in io.sockets.iter().enumerate() {
        let fd = sock.as_raw_fd();
        let mut singles = [0usize; TUN_BATCH];
        let mut ns = 0;
        let mut k = 0;
        while k < pending.len() {
            let p = pending[k];
            if p.socket != si {
                k += 1;
                continue;
            }
            let seg = p.end - p.start;
            let mut run_end = k + 1;
            if !GSO_OFF.load(Ordering::Relaxed) {
                let mut total = seg;
                while run_end < pending.len() && run_end - k < sys::GSO_MAX_SEGMENTS {
                    let q = pending[run_end];
                    let l = q.end - q.start;
                    if q.socket != si || q.to != p.to || l > seg || total + l > sys::GSO_MAX_BYTES {
                        break;
                    }
                    total += l;
                    run_end += 1;
                    if l < seg {
                        break;
                    }
                }
            }
            if run_end - k >= 2 {
                send_singles(fd, stats, pending, slots, &singles[..ns]);
                ns = 0;
                let run = &pending[k..run_end];
                let sent = sys::send_gso(fd, run.len(), seg as u16, p.to, |j| {
                    let q = run[j];
                    &slots[q.slot][q.start..q.end]
                });
                match sent {
                    Ok(_) => {
                        for q in run {
                            stats.packet(Side::Internet, Direction::Tx, q.end - q.start);
                        }
                    }
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
                        ) =>
                    {
                        tracing::warn!(error = %e, "UDP GSO refused by the kernel; sending datagrams one by one");
                        GSO_OFF.store(true, Ordering::Relaxed);
                        let idx: Vec<usize> = (k..run_end).collect();
                        send_singles(fd, stats, pending, slots, &idx);
                    }
                    Err(_) => stats.count_drops(Drop::TxError, run.len() as u64),
                }
            } else {
                singles[ns] = k;
                ns += 1;
                if ns == singles.len() {
                    send_singles(fd, stats, pending, slots, &singles[..ns]);
                    ns = 0;
                }
            }
            k = run_end;
        }
        send_singles(fd, stats, pending, slots, &singles[..ns]);
    }
}

fn send_singles(
    fd: RawFd,
    stats: &gate64_dataplane::Stats,
    pending: &[Pending],
    slots: &[Vec<u8>],
    idx: &[usize],
) {
    if idx.is_empty() {
        return;
    }
    let sent = sys::send_batch(fd, idx.len(), |i| {
        let p = pending[idx[i]];
        (&slots[p.slot][p.start..p.end], p.to)
    });
    for &i in &idx[..sent] {
        let p = pending[i];
        stats.packet(Side::Internet, Direction::Tx, p.end - p.start);
    }
    stats.count_drops(Drop::TxError, (idx.len() - sent) as u64);
}

/// Writes the packets the pipeline made off the fast path for the TUN (ICMP errors).
fn drain_tun_writes(io: &WorkerIo, stats: &gate64_dataplane::Stats, dp: &mut Worker) {
    while let Some(p) = dp.poll_tun_write() {
        match io.corp.write(&p) {
            Ok(_) => stats.packet(Side::Corpnet, Direction::Tx, p.len()),
            Err(_) => stats.count_drops(Drop::TxError, 1),
        }
    }
}

fn drain_transmits(io: &WorkerIo, stats: &gate64_dataplane::Stats, dp: &mut Worker) {
    while let Some(t) = dp.poll_transmit() {
        let sock = &io.sockets[socket_for(io, t.from)].1;
        if sys::send_batch(sock.as_raw_fd(), 1, |_| (&t.data[..], t.to)) == 1 {
            stats.packet(Side::Internet, Direction::Tx, t.data.len());
        } else {
            stats.count_drops(Drop::TxError, 1);
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

/// Writes the packets `to_tun` (slot, start, end) to the corporate link, in order. On an
/// offloading TUN a flow's consecutive TCP segments leave as one super-packet
/// ([`crate::gro`]): one write and one pass through the kernel's forwarding path instead of
/// dozens, with the payload passed from the slots as they are.
fn write_tun_batch(
    io: &WorkerIo,
    stats: &gate64_dataplane::Stats,
    to_tun: &[(usize, usize, usize)],
    slots: &[Vec<u8>],
) {
    let mut packets: [&[u8]; MAX_SLOTS] = [&[]; MAX_SLOTS];
    for chunk in to_tun.chunks(MAX_SLOTS) {
        for (k, &(i, start, end)) in chunk.iter().enumerate() {
            packets[k] = slots
                .get(i)
                .and_then(|s| s.get(start..end))
                .unwrap_or_default();
        }
        let w = io.corp.write_packets(&packets[..chunk.len()]);
        for &(_, start, end) in &chunk[..w.ok.min(chunk.len())] {
            stats.packet(Side::Corpnet, Direction::Tx, end - start);
        }
        stats.count_drops(Drop::TxError, w.failed as u64);
    }
}
