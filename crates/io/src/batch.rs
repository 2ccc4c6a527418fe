//! Executes a batch of verdicts: the `Udp` ones through the Teredo sockets (UDP GSO sends as
//! the verdicts mark them, the rest in `sendmmsg` batches), the `Tun` ones through the
//! corporate link in one coalescing write. Both drivers (the UDP workers and the IP-HTTPS
//! connections) use it, so a verdict means the same thing whoever took the packet.

use crate::sys;
use crate::tun::CorpLink;
use gate64_dataplane::{Direction, DropReason, Gso, Side, Stats, Verdict, Worker};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

// The dataplane marks GSO sends within the kernel's limits, which `sys::send_gso` enforces.
const _: () = assert!(gate64_dataplane::GSO_MAX_SEGMENTS <= sys::GSO_MAX_SEGMENTS);
const _: () = assert!(gate64_dataplane::GSO_MAX_BYTES <= sys::GSO_MAX_BYTES);

/// Kernels without UDP GSO (or a device that refuses it) turn it off for the process.
static GSO_OFF: AtomicBool = AtomicBool::new(false);

/// The Teredo sockets a driver sends from, one per server address.
pub type Sockets = [(Ipv4Addr, UdpSocket)];

/// A datagram waiting for the batch send: slot, byte range, socket, destination, GSO place.
#[derive(Debug, Clone, Copy)]
struct Pending {
    slot: usize,
    start: usize,
    end: usize,
    socket: usize,
    to: SocketAddrV4,
    gso: Gso,
}

/// The verdicts of one batch of packets, in arrival order; `slot` indexes the driver's
/// buffers.
#[derive(Debug)]
pub(crate) struct Batch {
    udp: Vec<Pending>,
    tun: Vec<(usize, usize, usize)>,
    capacity: usize,
    /// The `[ipsec] listen` 4500 sockets `Native` verdicts leave from, and what they filed.
    native_sockets: Vec<(SocketAddr, UdpSocket)>,
    native: Vec<NativePending>,
}

/// A datagram to a native client waiting for the batch send: slot, byte range, socket index
/// in `native_sockets`, destination.
#[derive(Debug, Clone, Copy)]
struct NativePending {
    slot: usize,
    start: usize,
    end: usize,
    socket: usize,
    to: SocketAddr,
}

impl Batch {
    /// A batch of at most `capacity` datagrams and `capacity` TUN writes.
    pub(crate) fn new(capacity: usize) -> Self {
        Batch {
            udp: Vec::with_capacity(capacity),
            tun: Vec::with_capacity(capacity),
            capacity,
            native_sockets: Vec::new(),
            native: Vec::with_capacity(capacity),
        }
    }

    /// Sends `Native` verdicts from `sockets` (by their bound address); without the socket a
    /// verdict names, its datagram is counted as `tx_error`.
    pub(crate) fn with_native(mut self, sockets: Vec<(SocketAddr, UdpSocket)>) -> Self {
        self.native_sockets = sockets;
        self
    }

    /// True when one more verdict might not fit.
    pub(crate) fn is_full(&self) -> bool {
        self.udp.len() == self.capacity
            || self.tun.len() == self.capacity
            || self.native.len() == self.capacity
    }

    /// Files the verdict for the packet in `slot`. The one dispatch on verdicts.
    pub(crate) fn dispatch(&mut self, sockets: &Sockets, slot: usize, v: Verdict) {
        match v {
            Verdict::Tun { start, end } => self.tun.push((slot, start, end)),
            Verdict::Udp {
                from,
                to,
                start,
                end,
                gso,
            } => self.udp.push(Pending {
                slot,
                start,
                end,
                socket: socket_for(sockets, from),
                to,
                gso,
            }),
            Verdict::Native {
                from,
                to,
                start,
                end,
            } => self.native.push(NativePending {
                slot,
                start,
                end,
                socket: self
                    .native_sockets
                    .iter()
                    .position(|(a, _)| *a == from)
                    .unwrap_or(usize::MAX),
                to,
            }),
            Verdict::Consumed | Verdict::Drop(_) => {}
        }
    }

    /// Sends everything filed, reading the bytes from `slots`, and empties the batch.
    pub(crate) fn send(
        &mut self,
        sockets: &Sockets,
        corp: &CorpLink,
        stats: &Stats,
        slots: &[Vec<u8>],
    ) {
        for (si, (_, sock)) in sockets.iter().enumerate() {
            send_udp(sock.as_raw_fd(), si, stats, &self.udp, slots);
        }
        if sockets.is_empty() {
            // A driver without Teredo sockets cannot send what the dataplane routed to UDP.
            stats.count_drops(DropReason::TxError, self.udp.len() as u64);
        }
        write_tun(corp, stats, &self.tun, slots);
        self.send_native(stats, slots);
        self.udp.clear();
        self.tun.clear();
        self.native.clear();
    }
}

impl Batch {
    /// Sends the `Native` datagrams filed, socket by socket, in `sendmmsg` batches.
    fn send_native(&self, stats: &Stats, slots: &[Vec<u8>]) {
        let unsent = self
            .native
            .iter()
            .filter(|p| p.socket >= self.native_sockets.len())
            .count();
        stats.count_drops(DropReason::TxError, unsent as u64);
        let mut idx = [0usize; sys::BATCH];
        for (si, (_, sock)) in self.native_sockets.iter().enumerate() {
            let mut n = 0;
            for (k, p) in self.native.iter().enumerate() {
                if p.socket != si {
                    continue;
                }
                idx[n] = k;
                n += 1;
                if n == idx.len() {
                    self.send_native_chunk(sock.as_raw_fd(), stats, slots, &idx[..n]);
                    n = 0;
                }
            }
            self.send_native_chunk(sock.as_raw_fd(), stats, slots, &idx[..n]);
        }
    }

    fn send_native_chunk(&self, fd: RawFd, stats: &Stats, slots: &[Vec<u8>], idx: &[usize]) {
        if idx.is_empty() {
            return;
        }
        let bytes = |p: &NativePending| {
            slots
                .get(p.slot)
                .and_then(|s| s.get(p.start..p.end))
                .unwrap_or_default()
        };
        let mut failed = 0u64;
        sys::send_batch_reporting(
            fd,
            idx.len(),
            |i| {
                let p = &self.native[idx[i]];
                (bytes(p), p.to)
            },
            |i, e| {
                failed |= 1u64.checked_shl(i as u32).unwrap_or(0);
                crate::log_limited!(debug, error = %e, to = %self.native[idx[i]].to, "ESP datagram not sent");
            },
        );
        for (k, &i) in idx.iter().enumerate() {
            if failed & 1u64.checked_shl(k as u32).unwrap_or(0) == 0 {
                let p = &self.native[i];
                stats.packet(Side::Internet, Direction::Tx, p.end - p.start);
            }
        }
        stats.count_drops(DropReason::TxError, u64::from(failed.count_ones()));
    }
}

/// Sends what the worker made off the fast path: datagrams (bubbles, released relay queues)
/// and TUN packets (ICMP errors).
pub(crate) fn drain(sockets: &Sockets, corp: &CorpLink, stats: &Stats, dp: &mut Worker) {
    while let Some(t) = dp.poll_transmit() {
        let Some((_, sock)) = sockets.get(socket_for(sockets, t.from)) else {
            stats.count_drops(DropReason::TxError, 1);
            continue;
        };
        if sys::send_batch(sock.as_raw_fd(), 1, |_| (&t.data[..], t.to)) == 1 {
            stats.packet(Side::Internet, Direction::Tx, t.data.len());
        } else {
            stats.count_drops(DropReason::TxError, 1);
        }
    }
    while let Some(p) = dp.poll_tun_write() {
        match corp.write(&p) {
            Ok(_) => stats.packet(Side::Corpnet, Direction::Tx, p.len()),
            Err(_) => stats.count_drops(DropReason::TxError, 1),
        }
    }
}

fn socket_for(sockets: &Sockets, from: Ipv4Addr) -> usize {
    sockets.iter().position(|(a, _)| *a == from).unwrap_or(0)
}

/// Sends the datagrams of `pending` that go out on socket `si`, in order: each GSO send the
/// verdicts marked (a `Start` and the `Append`s after it) with one `sendmsg`, the datagrams
/// alone in `sendmmsg` batches.
fn send_udp(fd: RawFd, si: usize, stats: &Stats, pending: &[Pending], slots: &[Vec<u8>]) {
    let mut singles = [0usize; sys::BATCH];
    let mut ns = 0;
    let mut k = 0;
    while k < pending.len() {
        if pending[k].socket != si {
            k += 1;
            continue;
        }
        let mut run_end = k + 1;
        while run_end < pending.len() && pending[run_end].gso == Gso::Append {
            run_end += 1;
        }
        if run_end - k >= 2 && !GSO_OFF.load(Ordering::Relaxed) {
            send_singles(fd, stats, pending, slots, &singles[..ns]);
            ns = 0;
            send_gso_run(fd, stats, &pending[k..run_end], slots);
        } else {
            for i in k..run_end {
                singles[ns] = i;
                ns += 1;
                if ns == singles.len() {
                    send_singles(fd, stats, pending, slots, &singles[..ns]);
                    ns = 0;
                }
            }
        }
        k = run_end;
    }
    send_singles(fd, stats, pending, slots, &singles[..ns]);
}

/// One UDP GSO send; a kernel that refuses GSO turns it off and gets the datagrams alone.
fn send_gso_run(fd: RawFd, stats: &Stats, run: &[Pending], slots: &[Vec<u8>]) {
    let bytes = |q: &Pending| {
        slots
            .get(q.slot)
            .and_then(|s| s.get(q.start..q.end))
            .unwrap_or_default()
    };
    let segment = run.first().map_or(0, |p| p.end - p.start);
    let sent = sys::send_gso(fd, run.len(), segment as u16, run[0].to, |j| bytes(&run[j]));
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
            let idx: Vec<usize> = (0..run.len()).collect();
            send_singles(fd, stats, run, slots, &idx);
        }
        Err(_) => stats.count_drops(DropReason::TxError, run.len() as u64),
    }
}

/// Sends the datagrams `pending[idx[..]]` (at most 64) with `sendmmsg`; one the kernel refuses
/// is counted as `tx_error` and the others still go.
fn send_singles(fd: RawFd, stats: &Stats, pending: &[Pending], slots: &[Vec<u8>], idx: &[usize]) {
    if idx.is_empty() {
        return;
    }
    debug_assert!(
        idx.len() <= 64,
        "callers send at most one GSO run or one BATCH"
    );
    let mut failed = 0u64;
    sys::send_batch_reporting(
        fd,
        idx.len(),
        |i| {
            let p = pending[idx[i]];
            let data = slots
                .get(p.slot)
                .and_then(|s| s.get(p.start..p.end))
                .unwrap_or_default();
            (data, p.to)
        },
        |i, e| {
            failed |= 1u64.checked_shl(i as u32).unwrap_or(0);
            crate::log_limited!(debug, error = %e, to = %pending[idx[i]].to, "datagram not sent");
        },
    );
    for (k, &i) in idx.iter().enumerate() {
        if failed & 1u64.checked_shl(k as u32).unwrap_or(0) == 0 {
            let p = pending[i];
            stats.packet(Side::Internet, Direction::Tx, p.end - p.start);
        }
    }
    stats.count_drops(DropReason::TxError, u64::from(failed.count_ones()));
}

/// Writes the packets `to_tun` (slot, start, end) to the corporate link, in order. On an
/// offloading TUN a flow's consecutive TCP segments leave as one super-packet
/// ([`crate::tun::gro`]): one write and one pass through the kernel's forwarding path instead of
/// dozens, with the payload passed from the slots as they are.
fn write_tun(corp: &CorpLink, stats: &Stats, to_tun: &[(usize, usize, usize)], slots: &[Vec<u8>]) {
    const CHUNK: usize = 128;
    let mut packets: [&[u8]; CHUNK] = [&[]; CHUNK];
    for chunk in to_tun.chunks(CHUNK) {
        for (k, &(i, start, end)) in chunk.iter().enumerate() {
            packets[k] = slots
                .get(i)
                .and_then(|s| s.get(start..end))
                .unwrap_or_default();
        }
        let w = corp.write_packets(&packets[..chunk.len()]);
        for &(_, start, end) in &chunk[..w.ok.min(chunk.len())] {
            stats.packet(Side::Corpnet, Direction::Tx, end - start);
        }
        stats.count_drops(DropReason::TxError, w.failed as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::net::UdpSocket;

    /// A batch of verdicts with an unroutable destination (255.255.255.255 without
    /// SO_BROADCAST: EACCES) in the middle: the datagram is counted as `tx_error`, the others
    /// are sent and counted as sent.
    #[test]
    fn a_refused_datagram_is_counted_and_the_rest_of_the_batch_sent() {
        let from = Ipv4Addr::LOCALHOST;
        let sock = UdpSocket::bind((from, 0)).unwrap();
        let rx = UdpSocket::bind((from, 0)).unwrap();
        rx.set_nonblocking(true).unwrap();
        let to = match rx.local_addr().unwrap() {
            std::net::SocketAddr::V4(v) => v,
            _ => unreachable!(),
        };
        let unroutable = SocketAddrV4::new(Ipv4Addr::BROADCAST, to.port());
        let sockets = [(from, sock)];
        let slots: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 16]).collect();
        let mut batch = Batch::new(8);
        for (i, dst) in [to, to, unroutable, to, to].into_iter().enumerate() {
            let v = Verdict::Udp {
                from,
                to: dst,
                start: 0,
                end: 16,
                gso: Gso::Start,
            };
            batch.dispatch(&sockets, i, v);
        }
        let corp = CorpLink::Socket(UdpSocket::bind((from, 0)).unwrap());
        let stats = Stats::default();
        batch.send(&sockets, &corp, &stats, &slots);
        assert_eq!(stats.drops(DropReason::TxError), 1);
        assert_eq!(stats.packets(Side::Internet, Direction::Tx), 4);
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < 4 && std::time::Instant::now() < deadline {
            match rx.recv(&mut buf) {
                Ok(n) => got.push(buf[0..n].to_vec()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        let want: Vec<Vec<u8>> = [0, 1, 3, 4].map(|i| slots[i].clone()).into();
        assert_eq!(got, want);
    }
}
