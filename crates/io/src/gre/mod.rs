//! The GRE data path: raw IP protocol-47 sockets on one side, a multi-queue TUN
//! device per tenant on the other, and the sans-IO [`gate64_gre::Gre`] between them, on one
//! or more worker threads.
//!
//! - **Sockets.** One raw socket per local outer address of the tunnels
//!   (`socket(AF_INET, SOCK_RAW, 47)` or `AF_INET6`), bound to that address with
//!   IP(V6)_FREEBIND (the address may arrive later, e.g. moved by keepalived). Binding is how
//!   the receive side learns the outer destination: the kernel hands a bound raw socket only
//!   packets to its address, so IPv6 (whose raw sockets deliver no IP header) needs no
//!   IPV6_RECVPKTINFO. IPv4 reads carry the IPv4 header, parsed for the source. Sends carry
//!   the GRE header and payload; the kernel adds the outer header from the bound address.
//!   Receives and sends are batched with `recvmmsg`/`sendmmsg` ([`crate::sys`]).
//! - **Tenants.** Each tenant has its own TUN device (one queue per worker) opened with virtio-net
//!   headers: a read may be a TCP super-packet (TSO), split here into MTU-sized packets
//!   straight into headroomed slots, each encapsulated in place and sent in one `sendmmsg`
//!   batch; decapsulated packets are written with [`crate::tun::gro::write_coalesced`], one
//!   `writev` per run of one flow's TCP segments. Its tunnels' routes point into it. A
//!   packet read from tenant T's device is routed over T's tunnels only, and a packet
//!   decapsulated from a tunnel is written to its tenant's device only, so tenants may share
//!   inner prefixes.
//! - **Timers.** Keepalives run on the same thread: the poll waits at most until
//!   [`gate64_gre::Gre::poll_timeout`]. A tunnel they find down refuses packets
//!   (`gre_tunnel_down`) until its peer answers again.
//!
//! - **Workers.** Worker `w` reads queue `w` of every tenant's device, encapsulates and
//!   sends on its own raw sockets (one per local address; a raw socket gets a copy of every
//!   GRE packet that matches its addresses and only worker 0 reads them, so the others are
//!   connected to the loopback address, which matches none, and drop-all filtered). So the
//!   outer sends, the largest cost, run on every worker. Worker 0 alone receives,
//!   decapsulates and runs the keepalive timers and the sequence windows; it writes each
//!   decapsulated packet into the queue of the worker its inner flow hashes to
//!   ([`flow_queue`], symmetric in source and destination). The kernel's TUN flow steering
//!   sends a flow's outgoing packets to the queue its last incoming packet was written to,
//!   so each flow is read by one worker and its packets stay in order. Tunnels that send
//!   RFC 2890 sequence numbers get one worker ([`gate64_gre::Gre::sender`]).
//!
//! One flow's packets stay in order because one thread reads them and every batch is sent
//! and written in the order it was read. Not yet: receiving on several workers (an
//! AF_PACKET `PACKET_FANOUT_HASH` group, see docs/architecture.md).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gate64_dataplane::DropReason as Drop;
use gate64_gre::{DropReason, DropStats, Gre, Inner, TenantId, TunnelStats};
use gate64_metrics::{GreReader, GreSnapshot, GreTunnelSample};
use gate64_wire::{ipv4, ipv6, udp};
use ipnet::IpNet;
use socket2::{Domain, Protocol, Socket, Type};
use tracing::{debug, info, warn};

use crate::sys::{self, BATCH, ReceivedFrom};

/// Room before each inner packet read from a TUN for the GRE header.
const HEADROOM: usize = gate64_wire::gre::MAX_HEADER_LEN;
/// Bytes of one receive slot: the largest (reassembled) IP packet.
const SLOT: usize = 65_536;
/// Inner packets one TUN read may stand for (a 64 KiB TCP super-packet cut at the smallest
/// MSS the kernel uses): a read is only made with this many slots free.
const MAX_SPLIT: usize = 128;
/// Inner packets encapsulated per `sendmmsg` batch: several TUN reads (single packets, or
/// super-packets split) fill it before it is sent.
const TUN_BATCH: usize = 2 * MAX_SPLIT;
/// Bytes of one TUN read: the virtio-net header and a 64 KiB super-packet.
const TUN_READ: usize = gate64_wire::offload::VNET_HDR_LEN + 65_535;
/// Batches read from one ready descriptor before the others get their turn.
const ROUNDS: usize = 8;
/// Socket buffers asked for (the kernel caps them unless CAP_NET_ADMIN forces them).
const SOCKET_BUFFER: usize = 4 << 20;
/// Time between tries to connect a send-only socket to loopback (see
/// [`connect_to_loopback`]).
const CONNECT_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between checks of the stop flag.
const MAX_WAIT: Duration = Duration::from_millis(100);

/// A running GRE data path; dropping it stops the threads (the TUN devices, and with them
/// their routes, go when the threads exit).
pub struct Gateway {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<io::Result<()>>>,
    reader: GreReader,
}

impl Gateway {
    /// Starts `workers` threads (at least one; one when a tunnel sends sequence numbers):
    /// `tuns[i]` is the device of tenant `i`, made by [`create_tun`], whose further queues
    /// are opened here, one per worker.
    pub fn spawn(gre: Gre, tuns: Vec<crate::tun::TunQueue>, workers: usize) -> io::Result<Gateway> {
        let now = Instant::now();
        let senders: Vec<Gre> = (1..workers.max(1)).map_while(|_| gre.sender(now)).collect();
        if senders.len() + 1 < workers {
            info!("a GRE tunnel sends sequence numbers: one GRE worker");
        }
        let workers = senders.len() + 1;
        // queues[w][tenant]: worker w's queue of each tenant's device.
        let mut queues: Vec<Vec<Arc<crate::tun::TunQueue>>> = vec![Vec::new(); workers];
        for first in tuns {
            for q in queues.iter_mut().skip(1) {
                q.push(Arc::new(first.another_queue()?));
            }
            queues[0].push(Arc::new(first));
        }
        let reader = reader(&gre, &senders);
        let stop = Arc::new(AtomicBool::new(false));
        let mut engines = Vec::with_capacity(workers);
        let sockets = bind_sockets(&local_addresses(&gre), true)?;
        engines.push(Engine::new(gre, sockets, &queues, 0)?);
        for (i, sender) in senders.into_iter().enumerate() {
            let sockets = bind_sockets(&local_addresses(&sender), false)?;
            engines.push(Engine::new(sender, sockets, &queues, i + 1)?);
        }
        let mut threads = Vec::with_capacity(workers);
        for (w, mut engine) in engines.into_iter().enumerate() {
            let flag = Arc::clone(&stop);
            let spawned = std::thread::Builder::new()
                .name(format!("gre-{w}"))
                .spawn(move || engine.run(&flag));
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    let mut started = Gateway {
                        stop,
                        threads,
                        reader,
                    };
                    let _ = started.halt();
                    return Err(e);
                }
            }
        }
        info!(workers, "GRE workers up");
        Ok(Gateway {
            stop,
            threads,
            reader,
        })
    }

    /// The counters for the metrics exporter ([`gate64_metrics::Exporter::add_gre`]).
    pub fn reader(&self) -> GreReader {
        Arc::clone(&self.reader)
    }

    /// Stops the threads and returns the first error, if one failed.
    pub fn stop(mut self) -> io::Result<()> {
        self.halt()
    }

    fn halt(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            let r = match t.join() {
                Ok(r) => r,
                Err(_) => Err(io::Error::other("a GRE thread panicked")),
            };
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl std::ops::Drop for Gateway {
    fn drop(&mut self) {
        if let Err(e) = self.halt() {
            warn!(error = %e, "GRE data path failed");
        }
    }
}

/// Creates tenant `name`'s TUN device `dev`: up, MTU `mtu`, no address (the kernel routes
/// into it by the routes added with [`route`]). Opened with virtio-net headers
/// ([`crate::tun::open_device`]), so the kernel hands over TCP super-packets (TSO, split here
/// into MTU-sized packets, each its own GRE packet) and takes coalesced decapsulated segments
/// (GRO), one TUN syscall moving up to 64 KiB either way. Without the corporate TUN's threaded
/// NAPI: measured with `bench/gre.sh`, it moved no more (docs/performance-history.md,
/// "Threaded NAPI on the tenant TUNs"). Multi-queue: [`Gateway::spawn`] opens one more queue per further worker.
pub fn create_tun(dev: &str, mtu: u16) -> io::Result<crate::tun::TunQueue> {
    let first = crate::tun::open_device(dev, 1, true, false)?
        .pop()
        .ok_or_else(|| io::Error::other(format!("TUN device `{dev}`: no queue")))?;
    let mtu = mtu.to_string();
    crate::tun::ip(&["link", "set", "dev", dev, "mtu", &mtu, "up"])?;
    Ok(first)
}

/// Routes `net` into `dev` in routing table `table` with route MTU `mtu`
/// (`ip route replace NET dev DEV table T mtu M`), idempotently.
pub fn route(net: IpNet, dev: &str, table: u32, mtu: u16) -> io::Result<()> {
    let family = if matches!(net, IpNet::V4(_)) {
        "-4"
    } else {
        "-6"
    };
    let args = [
        family.to_owned(),
        "route".into(),
        "replace".into(),
        net.to_string(),
        "dev".into(),
        dev.into(),
        "table".into(),
        table.to_string(),
        "mtu".into(),
        mtu.to_string(),
    ];
    crate::tun::ip(&args)
}

/// The `gate64_drops_total` reason of a GRE drop.
pub fn drop_reason(r: DropReason) -> Drop {
    match r {
        DropReason::BadKey => Drop::GreBadKey,
        DropReason::UnknownPeer => Drop::GreUnknownPeer,
        DropReason::Sequence => Drop::GreSequence,
        DropReason::Checksum => Drop::GreChecksum,
        DropReason::Ttl => Drop::GreTtl,
        DropReason::NoRoute => Drop::GreNoRoute,
        DropReason::NoRoom => Drop::GreNoRoom,
        DropReason::TunnelDown => Drop::GreTunnelDown,
        DropReason::Truncated | DropReason::BadVersion | DropReason::Malformed => {
            Drop::GreMalformed
        }
    }
}

/// The exporter's view: each tunnel's counters summed over the original table and its
/// sender copies (one writer each), its state from the original.
fn reader(gre: &Gre, senders: &[Gre]) -> GreReader {
    let tables = || std::iter::once(gre).chain(senders);
    // tunnels[i]: (name, [the original's counters, then each sender's]).
    let tunnels: Vec<(String, Vec<Arc<TunnelStats>>)> = gre
        .tunnels()
        .map(|(id, c, _)| {
            let counters = tables()
                .filter_map(|t| t.tunnels().nth(id.0).map(|(_, _, s)| Arc::clone(s)))
                .collect();
            (c.name.clone(), counters)
        })
        .collect();
    let drops: Vec<Arc<DropStats>> = tables().map(|t| Arc::clone(t.drops())).collect();
    Arc::new(move || {
        let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let mut by_reason = Vec::new();
        for r in DropReason::ALL {
            let n: u64 = drops.iter().map(|d| d.get(r)).sum();
            if n > 0 {
                by_reason.push((drop_reason(r), n));
            }
        }
        let sum = |all: &[Arc<TunnelStats>],
                   f: fn(&TunnelStats) -> &std::sync::atomic::AtomicU64| {
            all.iter().map(|s| load(f(s))).sum::<u64>()
        };
        GreSnapshot {
            tunnels: tunnels
                .iter()
                .map(|(name, all)| GreTunnelSample {
                    name: name.clone(),
                    up: all.first().is_some_and(|s| load(&s.up) != 0),
                    bytes: [sum(all, |s| &s.rx_bytes), sum(all, |s| &s.tx_bytes)],
                    packets: [sum(all, |s| &s.rx_packets), sum(all, |s| &s.tx_packets)],
                })
                .collect(),
            drops: by_reason,
        }
    })
}

/// One raw socket per local outer address.
struct RawSocket {
    local: IpAddr,
    socket: Socket,
    /// A send-only socket not connected to loopback yet ([`connect_to_loopback`]): its local
    /// address was not on the host (a backup node before keepalived moves it in).
    unconnected: bool,
}

/// The tunnels' local outer addresses, each once, in tunnel order.
fn local_addresses(gre: &Gre) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for (_, c, _) in gre.tunnels() {
        if !out.contains(&c.local) {
            out.push(c.local);
        }
    }
    out
}

/// One raw socket per address of `locals`. A socket that does not `receive` only sends: a
/// filter that accepts nothing keeps the kernel from queueing it a copy of every GRE packet.
fn bind_sockets(locals: &[IpAddr], receive: bool) -> io::Result<Vec<RawSocket>> {
    let mut out: Vec<RawSocket> = Vec::new();
    for &local in locals {
        let domain = if local.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let protocol = Protocol::from(i32::from(gate64_wire::gre::IP_PROTOCOL));
        let s = Socket::new(domain, Type::RAW, Some(protocol)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("opening a raw GRE socket (needs CAP_NET_RAW): {e}"),
            )
        })?;
        if !receive {
            // BPF_RET | BPF_K with 0: keep no byte of any packet.
            s.attach_filter(&[socket2::SockFilter::new(0x06, 0, 0, 0)])?;
        }
        if local.is_ipv4() {
            s.set_freebind_v4(true)?;
        } else {
            s.set_freebind_v6(true)?;
        }
        s.set_nonblocking(true)?;
        if sys::set_buffer_force(s.as_raw_fd(), SOCKET_BUFFER).is_err() {
            let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
            let _ = s.set_send_buffer_size(SOCKET_BUFFER);
        }
        s.bind(&SocketAddr::new(local, 0).into()).map_err(|e| {
            io::Error::new(e.kind(), format!("binding the GRE socket to {local}: {e}"))
        })?;
        let unconnected = !receive && !connect_to_loopback(&s, local);
        debug!(%local, receive, unconnected, "GRE socket up");
        out.push(RawSocket {
            local,
            socket: s,
            unconnected,
        });
    }
    Ok(out)
}

/// Connects the send-only socket `s` (bound to `local`) to the loopback address; whether it
/// did. The kernel clones every GRE packet for each raw protocol-47 socket whose bound and
/// connected addresses match it, before any filter runs, and no GRE packet from the wire
/// comes from loopback, so a connected send-only socket is cloned none (`sendmmsg` still
/// names each packet's destination). The connect looks a route up from `local`, which fails
/// while `local` is not on the host; the worker then retries ([`Engine::retry_connects`]).
fn connect_to_loopback(s: &Socket, local: IpAddr) -> bool {
    let loopback = if local.is_ipv4() {
        IpAddr::from(std::net::Ipv4Addr::LOCALHOST)
    } else {
        IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
    };
    match s.connect(&SocketAddr::new(loopback, 0).into()) {
        Ok(()) => true,
        Err(e) => {
            debug!(%local, error = %e, "GRE send socket not connected to loopback yet");
            false
        }
    }
}

/// A decapsulated inner packet waiting in a receive slot to be written.
struct Decapped {
    tenant: usize,
    queue: usize,
    slot: usize,
    from: usize,
    to: usize,
}

/// A datagram to send: slot, byte range, socket, destination.
struct Outgoing {
    slot: usize,
    start: usize,
    end: usize,
    socket: usize,
    to: SocketAddr,
}

struct Engine {
    gre: Gre,
    sockets: Vec<RawSocket>,
    /// Socket index of each tunnel.
    socket_of: Vec<usize>,
    /// This worker's queue of each tenant's device, read here.
    tuns: Vec<Arc<crate::tun::TunQueue>>,
    /// Worker 0 only (the receiver): `[worker][tenant]`, every queue decapsulated packets
    /// are written to.
    queues: Vec<Vec<Arc<crate::tun::TunQueue>>>,
    rx: Vec<Vec<u8>>,
    /// Where each received datagram's inner packet lies (slot, range), its tenant and the
    /// queue (worker) its flow hashes to.
    decapped: Vec<Decapped>,
    /// One raw TUN read (virtio-net header and packet) before it is split into `tx`.
    tun_read: Vec<u8>,
    tx: Vec<Vec<u8>>,
    tx_sizes: Vec<usize>,
    out: Vec<Outgoing>,
    epoll: sys::Epoll,
    /// When [`Engine::retry_connects`] may try again.
    next_connect: Instant,
}

/// Epoll tokens: sockets count up from 0, TUN devices from this.
const TUN_TOKEN: u64 = 1 << 32;

impl Engine {
    /// Worker `worker`'s engine: it reads `queues[worker]`; worker 0 also receives.
    fn new(
        gre: Gre,
        sockets: Vec<RawSocket>,
        queues: &[Vec<Arc<crate::tun::TunQueue>>],
        worker: usize,
    ) -> io::Result<Self> {
        let socket_of = gre
            .tunnels()
            .map(|(_, c, _)| sockets.iter().position(|s| s.local == c.local).unwrap_or(0))
            .collect();
        let receive = worker == 0;
        let tuns = queues.get(worker).cloned().unwrap_or_default();
        let epoll = sys::Epoll::new()?;
        if receive {
            for (i, s) in sockets.iter().enumerate() {
                epoll.add(s.socket.as_raw_fd(), i as u64)?;
            }
        }
        for (i, t) in tuns.iter().enumerate() {
            epoll.add(t.as_raw_fd(), TUN_TOKEN + i as u64)?;
        }
        // A TUN read is split into packets of at most the device's MTU.
        let mtu = tuns
            .iter()
            .filter_map(|t| t.mtu().ok())
            .max()
            .map_or(SLOT, usize::from);
        Ok(Engine {
            gre,
            sockets,
            socket_of,
            tuns,
            queues: if receive { queues.to_vec() } else { Vec::new() },
            rx: vec![vec![0; if receive { SLOT } else { 0 }]; BATCH],
            decapped: Vec::with_capacity(BATCH),
            tun_read: vec![0; TUN_READ],
            tx: vec![vec![0; HEADROOM + mtu]; TUN_BATCH],
            tx_sizes: vec![0; TUN_BATCH],
            out: Vec::with_capacity(TUN_BATCH),
            epoll,
            next_connect: Instant::now() + CONNECT_RETRY,
        })
    }

    fn run(&mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut ready = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let wait = self
                .gre
                .poll_timeout()
                .map_or(MAX_WAIT, |t| t.saturating_duration_since(now).min(MAX_WAIT));
            self.epoll.wait(&mut ready, wait.as_millis() as i32)?;
            for &token in &ready {
                if token >= TUN_TOKEN {
                    self.handle_tun((token - TUN_TOKEN) as usize);
                } else {
                    self.handle_socket(token as usize);
                }
            }
            let now = Instant::now();
            self.timers(now);
            self.retry_connects(now);
        }
        Ok(())
    }

    /// Retries [`connect_to_loopback`] for the send-only sockets that are not connected,
    /// once per [`CONNECT_RETRY`].
    fn retry_connects(&mut self, now: Instant) {
        if now < self.next_connect {
            return;
        }
        self.next_connect = now + CONNECT_RETRY;
        for s in self.sockets.iter_mut().filter(|s| s.unconnected) {
            s.unconnected = !connect_to_loopback(&s.socket, s.local);
        }
    }

    /// Reads batches from socket `si` until it is empty or [`ROUNDS`] were read.
    fn handle_socket(&mut self, si: usize) {
        for _ in 0..ROUNDS {
            if self.socket_batch(si) < BATCH {
                break;
            }
        }
    }

    /// Reads one batch from socket `si`, decapsulates, writes the inner packets to their
    /// tenants' devices (TCP segments of one flow coalesced into super-packets) and reflects
    /// the peers' keepalives. Returns how many datagrams arrived.
    fn socket_batch(&mut self, si: usize) -> usize {
        let mut got = [ReceivedFrom::EMPTY; BATCH];
        let fd = self.sockets[si].socket.as_raw_fd();
        let n = match sys::recv_batch_from(fd, &mut self.rx, &mut got) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return 0,
            Err(e) => {
                debug!(error = %e, "GRE receive failed");
                return 0;
            }
        };
        let local = self.sockets[si].local;
        self.decapped.clear();
        for (i, r) in got.iter().enumerate().take(n) {
            let buf = &self.rx[i][..r.len];
            let Some((src, start, end)) = outer(local, r, buf) else {
                continue;
            };
            let Ok(d) = self.gre.decap(src, local, &buf[start..end]) else {
                continue;
            };
            let (from, to) = (start + d.range.start, start + d.range.end);
            match d.inner {
                Inner::Ipv4 | Inner::Ipv6 => self.decapped.push(Decapped {
                    tenant: d.tenant.0,
                    queue: flow_queue(&buf[from..to], self.queues.len()),
                    slot: i,
                    from,
                    to,
                }),
                Inner::KeepaliveReflect => {
                    let to_peer = SocketAddr::new(src, 0);
                    let s = &self.sockets[si].socket;
                    if let Err(e) = s.send_to(&self.rx[i][from..to], &to_peer.into()) {
                        debug!(error = %e, "keepalive reflection failed");
                    }
                }
                _ => {}
            }
        }
        self.write_decapped();
        n
    }

    /// Writes the packets in [`Engine::decapped`] to their tenants' devices, each into the
    /// queue of the worker its flow hashes to, in order per queue, one `writev` per run of one
    /// flow's TCP segments ([`crate::tun::gro`]).
    fn write_decapped(&mut self) {
        // Only the (tenant, queue) pairs present in the batch (there may be many tenants
        // configured), each once.
        for (i, first) in self.decapped.iter().enumerate() {
            let same = |d: &Decapped| d.tenant == first.tenant && d.queue == first.queue;
            if self.decapped[..i].iter().any(same) {
                continue;
            }
            let Some(tun) = self
                .queues
                .get(first.queue)
                .and_then(|q| q.get(first.tenant))
            else {
                continue;
            };
            let mut packets: [&[u8]; BATCH] = [&[]; BATCH];
            let mut k = 0;
            for d in self.decapped[i..].iter().filter(|d| same(d)) {
                if k < BATCH {
                    packets[k] = &self.rx[d.slot][d.from..d.to];
                    k += 1;
                }
            }
            let w = crate::tun::gro::write_coalesced(tun.as_raw_fd(), &packets[..k]);
            if w.failed > 0 {
                debug!(failed = w.failed, "TUN write failed");
            }
        }
    }

    /// Reads from tenant `tenant`'s device until it is empty or [`ROUNDS`] batches were sent.
    fn handle_tun(&mut self, tenant: usize) {
        for _ in 0..ROUNDS {
            if !self.tun_batch(tenant) {
                break;
            }
        }
    }

    /// Fills one batch from tenant `tenant`'s device: each read is one packet or a
    /// super-packet split into MTU-sized packets (TSO done here, each segment its own GRE
    /// packet; the kernel segments UDP itself), encapsulated in place for the tunnel its
    /// destination routes to; the batch then goes out with `sendmmsg`. Returns whether the
    /// device may hold more.
    fn tun_batch(&mut self, tenant: usize) -> bool {
        self.out.clear();
        let mut used = 0;
        let mut more = true;
        while TUN_BATCH - used >= MAX_SPLIT {
            let Some(tun) = self.tuns.get(tenant) else {
                return false;
            };
            let n = match tun.recv_multiple(
                &mut self.tun_read,
                &mut self.tx[used..],
                &mut self.tx_sizes[used..],
                HEADROOM,
            ) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    more = false;
                    break;
                }
                Err(e) => {
                    // A super-packet that cannot be split is lost, not the device; the
                    // batch so far is still sent (handle_tun bounds the retries).
                    if e.kind() == io::ErrorKind::InvalidData {
                        self.gre.drops().count(DropReason::Malformed);
                    }
                    debug!(error = %e, "TUN read failed");
                    break;
                }
            };
            for slot in used..used + n {
                self.encap_slot(tenant, slot);
            }
            used += n;
        }
        self.flush();
        more
    }

    /// Encapsulates the inner packet in `tx[slot]` and files it for [`Engine::flush`].
    fn encap_slot(&mut self, tenant: usize, slot: usize) {
        let end = HEADROOM + self.tx_sizes[slot];
        let buf = &mut self.tx[slot];
        let Ok(id) = self.gre.route_packet(TenantId(tenant), &buf[HEADROOM..end]) else {
            return;
        };
        let Ok(start) = self.gre.encap(id, buf, HEADROOM, end) else {
            return;
        };
        if let (Some(c), Some(&socket)) = (self.gre.config(id), self.socket_of.get(id.0)) {
            self.out.push(Outgoing {
                slot,
                start,
                end,
                socket,
                to: SocketAddr::new(c.remote, 0),
            });
        }
    }

    /// Sends the batch in [`Engine::out`], one `sendmmsg` run per socket.
    fn flush(&mut self) {
        for (si, s) in self.sockets.iter().enumerate() {
            // This socket's datagrams, in batch order (a flow's packets stay in order).
            let mut mine = [0usize; TUN_BATCH];
            let mut n = 0;
            for (i, o) in self.out.iter().enumerate() {
                if o.socket == si && n < TUN_BATCH {
                    mine[n] = i;
                    n += 1;
                }
            }
            if n == 0 {
                continue;
            }
            let (out, tx) = (&self.out, &self.tx);
            // A packet the kernel refuses is skipped; the rest of the batch still goes.
            sys::send_batch_reporting(
                s.socket.as_raw_fd(),
                n,
                |j| {
                    let o = &out[mine[j]];
                    (&tx[o.slot][o.start..o.end], o.to)
                },
                |_, e| crate::log_limited!(debug, error = %e, local = %s.local, "GRE send failed"),
            );
        }
        self.out.clear();
    }

    /// Runs the keepalive timers and sends the keepalives due.
    fn timers(&mut self, now: Instant) {
        if self.gre.poll_timeout().is_none_or(|t| t > now) {
            return;
        }
        self.gre.handle_timeout(now);
        let mut buf = [0u8; 128];
        while let Some((id, n)) = self.gre.poll_transmit(&mut buf) {
            let (Some(c), Some(&si)) = (self.gre.config(id), self.socket_of.get(id.0)) else {
                continue;
            };
            let to = SocketAddr::new(c.remote, 0);
            if let Err(e) = self.sockets[si].socket.send_to(&buf[..n], &to.into()) {
                debug!(error = %e, tunnel = %c.name, "keepalive send failed");
            }
        }
    }
}

/// The outer source and the GRE bytes' range of a received datagram: IPv4 raw sockets
/// deliver the IPv4 header (parsed here), IPv6 ones only the payload, the source in the
/// sender address.
fn outer(local: IpAddr, r: &ReceivedFrom, buf: &[u8]) -> Option<(IpAddr, usize, usize)> {
    if r.truncated {
        return None;
    }
    if local.is_ipv4() {
        let p = ipv4::Packet::new_checked(buf).ok()?;
        Some((
            IpAddr::V4(p.src()),
            p.header_len(),
            usize::from(p.total_len()),
        ))
    } else {
        Some((r.from?.ip(), 0, buf.len()))
    }
}

/// The queue (of `queues`) for an inner IP packet's flow: a hash of its addresses and, for
/// TCP and UDP (unfragmented IPv4, or IPv6 with no extension header first), its ports, the
/// same for both directions of a flow. Unparseable packets go to queue 0.
pub fn flow_queue(packet: &[u8], queues: usize) -> usize {
    if queues <= 1 {
        return 0;
    }
    let Some(h) = flow_hash(packet) else {
        return 0;
    };
    // Fibonacci hashing spreads the XOR's bits over the queue index.
    let mixed = h.wrapping_mul(0x9e37_79b9);
    ((u64::from(mixed) * queues as u64) >> 32) as usize
}

/// The XOR of the packet's address words and, for TCP and UDP, of its two ports: symmetric in
/// source and destination. Headers are read through `wire`'s views (the quoted kind, which
/// needs the headers only, not the whole payload).
fn flow_hash(packet: &[u8]) -> Option<u32> {
    // TCP's header starts with the two ports as UDP's does.
    let ports = |protocol: u8, transport: &[u8]| {
        matches!(protocol, 6 | 17)
            .then(|| udp::peek_ports(transport))
            .flatten()
            .map_or(0, |(src, dst)| u32::from(src ^ dst))
    };
    match packet.first()? >> 4 {
        4 => {
            let p = ipv4::Packet::new_checked_quoted(packet).ok()?;
            let protocol = if p.is_fragment() { 0 } else { p.protocol() };
            Some(u32::from(p.src()) ^ u32::from(p.dst()) ^ ports(protocol, p.payload()))
        }
        6 => {
            let p = ipv6::Packet::new_checked_quoted(packet).ok()?;
            let words = |a: std::net::Ipv6Addr| {
                let s = a.segments();
                (0..4).fold(0u32, |h, i| {
                    h ^ (u32::from(s[2 * i]) << 16 | u32::from(s[2 * i + 1]))
                })
            };
            Some(words(p.src()) ^ words(p.dst()) ^ ports(p.next_header(), p.payload()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::flow_queue;

    /// A TCP/IPv4 header pair 10.64.0.5:`sport` → 172.16.0.5:`dport`.
    fn tcp_v4(sport: u16, dport: u16, swap: bool) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[3] = 40;
        p[9] = 6;
        let (a, b) = ([10, 64, 0, 5], [172, 16, 0, 5]);
        let (src, dst, sp, dp) = if swap {
            (b, a, dport, sport)
        } else {
            (a, b, sport, dport)
        };
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sp.to_be_bytes());
        p[22..24].copy_from_slice(&dp.to_be_bytes());
        p
    }

    #[test]
    fn both_directions_of_a_flow_share_a_queue() {
        for sport in 40_000..40_064 {
            let out = flow_queue(&tcp_v4(sport, 5201, false), 4);
            assert!(out < 4);
            assert_eq!(out, flow_queue(&tcp_v4(sport, 5201, true), 4));
        }
    }

    #[test]
    fn flows_of_one_address_pair_spread_over_the_queues() {
        let mut seen = [0usize; 2];
        for sport in 40_000..40_064 {
            seen[flow_queue(&tcp_v4(sport, 5201, false), 2)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }

    /// A UDP/IPv6 header pair 2001:db8::5:`sport` → 2001:db8:100::5:`dport`.
    fn udp_v6(sport: u16, dport: u16, swap: bool) -> Vec<u8> {
        let mut p = vec![0u8; 48];
        p[0] = 0x60;
        p[5] = 8;
        p[6] = 17;
        let a: std::net::Ipv6Addr = "2001:db8::5".parse().expect("address");
        let b: std::net::Ipv6Addr = "2001:db8:100::5".parse().expect("address");
        let (src, dst, sp, dp) = if swap {
            (b, a, dport, sport)
        } else {
            (a, b, sport, dport)
        };
        p[8..24].copy_from_slice(&src.octets());
        p[24..40].copy_from_slice(&dst.octets());
        p[40..42].copy_from_slice(&sp.to_be_bytes());
        p[42..44].copy_from_slice(&dp.to_be_bytes());
        p
    }

    #[test]
    fn ipv6_flows_share_a_queue_both_ways_and_spread() {
        let mut seen = [0u32; 4];
        for sport in 40000..40064 {
            let out = flow_queue(&udp_v6(sport, 53, false), 4);
            assert_eq!(out, flow_queue(&udp_v6(sport, 53, true), 4));
            seen[out] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }

    #[test]
    fn one_queue_or_garbage_goes_to_queue_0() {
        assert_eq!(flow_queue(&tcp_v4(1, 2, false), 1), 0);
        assert_eq!(flow_queue(&[], 4), 0);
        assert_eq!(flow_queue(&[0x45, 0, 0], 4), 0);
        assert_eq!(flow_queue(&[0x60; 20], 4), 0);
    }
}

#[cfg(test)]
mod reader_tests {
    use std::net::IpAddr;
    use std::time::Instant;

    use gate64_gre::{DropReason, Gre, TenantId, TunnelConfig};

    use super::reader;

    /// A keyed tunnel 203.0.113.1 → .2 routing 172.16.0.0/24.
    fn table() -> Gre {
        let config = TunnelConfig {
            name: "site2".into(),
            local: IpAddr::from([203, 0, 113, 1]),
            remote: IpAddr::from([203, 0, 113, 2]),
            key: Some(42),
            tenant: TenantId(0),
            routes: vec!["172.16.0.0/24".parse().unwrap()],
            send_checksum: false,
            send_sequence: false,
            keepalive: None,
        };
        Gre::new(vec![config], Instant::now()).unwrap()
    }

    /// Encapsulates one 40-byte IPv4 packet to 172.16.0.9, or to 192.0.2.9 (no route).
    fn send(gre: &mut Gre, routed: bool) {
        let mut inner = [0u8; 40];
        inner[0] = 0x45;
        inner[3] = 40;
        inner[8] = 64;
        let dst = if routed {
            [172, 16, 0, 9]
        } else {
            [192, 0, 2, 9]
        };
        inner[16..20].copy_from_slice(&dst);
        let Ok(id) = gre.route_packet(TenantId(0), &inner) else {
            return;
        };
        let headroom = gate64_wire::gre::MAX_HEADER_LEN;
        let mut buf = vec![0u8; headroom + inner.len()];
        buf[headroom..].copy_from_slice(&inner);
        let end = buf.len();
        gre.encap(id, &mut buf, headroom, end).unwrap();
    }

    /// The exporter's figures are the sum over the original table and its sender copies,
    /// each of which counts in counters of its own.
    #[test]
    fn snapshot_sums_every_worker() {
        let mut original = table();
        let mut senders: Vec<Gre> = (0..2)
            .map(|_| original.sender(Instant::now()).unwrap())
            .collect();
        let read = reader(&original, &senders);
        send(&mut original, true);
        for (i, s) in senders.iter_mut().enumerate() {
            for _ in 0..=i {
                send(s, true);
            }
            send(s, false);
        }
        let snap = read();
        assert_eq!(snap.tunnels.len(), 1);
        assert_eq!(snap.tunnels[0].packets, [0, 1 + 1 + 2]);
        assert_eq!(snap.tunnels[0].bytes, [0, 40 * 4]);
        assert!(snap.tunnels[0].up);
        assert_eq!(
            snap.drops,
            vec![(super::drop_reason(DropReason::NoRoute), 2)]
        );
    }
}
