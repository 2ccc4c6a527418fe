//! One GRE worker's engine: a single-threaded loop over its raw sockets (decapsulate, write to
//! the tenant's TUN queue, coalesced) and its tenants' TUN queues (read, split, encapsulate in
//! the headroom, send in batches), plus keepalive timers.

use super::frames::Frames;
use super::socket::{RawSocket, connect_to_loopback};
use super::*;

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

/// A whole frame to write: slot, byte range, packet socket, tunnel.
struct FrameOut {
    slot: usize,
    start: usize,
    end: usize,
    socket: usize,
    tunnel: usize,
}

pub(super) struct Engine {
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
    /// The frames of the batch, for the packet sockets of [`Engine::frames`].
    frame_out: Vec<FrameOut>,
    frames: Frames,
    epoll: sys::Epoll,
    /// When [`Engine::retry_connects`] may try again.
    next_connect: Instant,
}

/// Epoll tokens: sockets count up from 0, TUN devices from this.
const TUN_TOKEN: u64 = 1 << 32;

impl Engine {
    /// Worker `worker`'s engine: it reads `queues[worker]`; worker 0 also receives.
    pub(super) fn new(
        gre: Gre,
        sockets: Vec<RawSocket>,
        queues: &[Vec<Arc<crate::tun::TunQueue>>],
        worker: usize,
        packet_sockets: bool,
    ) -> io::Result<Self> {
        let frames = Frames::new(packet_sockets, worker, &gre, Instant::now());
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
            frame_out: Vec::with_capacity(TUN_BATCH),
            frames,
            epoll,
            next_connect: Instant::now() + CONNECT_RETRY,
        })
    }

    pub(super) fn run(&mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut ready = Vec::new();
        self.frames.refresh(&self.gre, Instant::now());
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
            self.frames.refresh(&self.gre, now);
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
        if let Some(p) = self.frames.path(id.0) {
            let ip_len = end - start + if p.frame.src.is_ipv4() { 20 } else { 40 };
            if ip_len <= p.mtu
                && let Some(at) = p.frame.prepend(buf, start, end, p.ident)
            {
                p.ident = p.ident.wrapping_add(1);
                self.frame_out.push(FrameOut {
                    slot,
                    start: at,
                    end,
                    socket: p.socket,
                    tunnel: id.0,
                });
                return;
            }
        }
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

    /// Sends the batch: the frames in [`Engine::frame_out`], one `sendmmsg` run per packet
    /// socket, then the datagrams in [`Engine::out`], one run per raw socket.
    fn flush(&mut self) {
        self.flush_frames();
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

    fn flush_frames(&mut self) {
        if self.frame_out.is_empty() {
            return;
        }
        let mut failed_tunnels: Vec<(usize, io::Error)> = Vec::new();
        for (si, (ifindex, fd)) in self.frames.sockets.iter().enumerate() {
            let mut mine = [0usize; TUN_BATCH];
            let mut n = 0;
            for (i, o) in self.frame_out.iter().enumerate() {
                if o.socket == si && n < TUN_BATCH {
                    mine[n] = i;
                    n += 1;
                }
            }
            if n == 0 {
                continue;
            }
            let (out, tx, frames) = (&self.frame_out, &self.tx, &self.frames);
            gate64_sys::packet::send_frames(
                fd.as_raw_fd(),
                *ifindex,
                n,
                |j| {
                    let o = &out[mine[j]];
                    let ethertype = frames.slots[o.tunnel]
                        .path
                        .as_ref()
                        .map_or(0, |p| p.frame.ethertype());
                    (&tx[o.slot][o.start..o.end], ethertype)
                },
                |j, e| {
                    crate::log_limited!(debug, error = %e, ifindex, "GRE frame send failed");
                    // A full buffer loses the frames as a full raw socket would; any other
                    // refusal moves the tunnel to the raw socket until it is looked up again.
                    let full = e.kind() == io::ErrorKind::WouldBlock
                        || e.raw_os_error() == Some(libc::ENOBUFS);
                    let t = out[mine[j]].tunnel;
                    if !full && !failed_tunnels.iter().any(|(f, _)| *f == t) {
                        failed_tunnels.push((t, io::Error::new(e.kind(), e.to_string())));
                    }
                },
            );
        }
        let now = Instant::now();
        for (t, e) in failed_tunnels {
            let name = self
                .gre
                .config(gate64_gre::TunnelId(t))
                .map_or_else(String::new, |c| c.name.clone());
            self.frames.failed(t, &name, &e, now);
        }
        self.frame_out.clear();
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
