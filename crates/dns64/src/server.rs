//! Listening: the fast UDP path, hickory-server for TCP, and [`serve`].
//!
//! UDP is served by plain threads, one SO_REUSEPORT socket each per listen address (the kernel
//! spreads clients over them by flow hash). Each thread runs its own single-threaded tokio
//! runtime: it reads a batch with `recvmmsg`, answers cache hits in place and sends them with
//! one `sendmmsg` (no task, no allocation, no full DNS parse); a miss becomes a local task that
//! asks upstream from the same thread and answers on the same socket. TCP goes through
//! hickory-server's `Server` with [`Handler`]. `docs/performance.md` has the measurements
//! behind this split: with hickory-server serving UDP too, gate64 reached 0.64x Unbound's
//! cached rate on the 2-core lab; misses handed to a shared multi-threaded runtime spent most
//! of their CPU in context switches.

use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gate64_dataplane::{Dns64Result, Dns64Stats};
use gate64_nat64::Prefix;
use hickory_server::Server as HickoryServer;
use ipnet::Ipv6Net;
use socket2::{Domain, Protocol, Socket, Type};
use tracing::{debug, info, warn};

use crate::handler::{Dns64, Handler};
use crate::synth::{EDNS_PAYLOAD, Synthesizer};
use crate::upstream::Upstreams;

/// Datagrams per `recvmmsg`/`sendmmsg`.
const BATCH: usize = 32;
/// Receive slot size: larger queries are dropped (DNS queries are tiny).
const RX_SLOT: usize = 2048;
/// Queries waiting for upstream at once; beyond that new misses are dropped (counted as
/// `error`), as Unbound drops beyond `num-queries-per-thread`.
const MAX_IN_FLIGHT: usize = 8192;
/// Idle TCP connections are closed after this long.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// How the DNS64 server runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Addresses to serve on, UDP and TCP (port 0 picks one, the same for UDP and TCP).
    pub listen: Vec<SocketAddr>,
    /// Bind with IP_FREEBIND/IPV6_FREEBIND, so an address still in duplicate address
    /// detection (or not yet configured) can be bound.
    pub freebind: bool,
    /// Upstream resolvers, tried in order with sticky failover.
    pub upstream: Vec<SocketAddr>,
    /// The NAT64 prefix synthetic AAAA are built under.
    pub prefix: Prefix,
    /// AAAA ranges treated as absent; `::ffff:0:0/96` is always added.
    pub exclude: Vec<Ipv6Net>,
    /// Time allowed for each upstream attempt.
    pub timeout: Duration,
    /// Answers cached; 0 turns the cache off.
    pub cache_entries: usize,
    /// UDP threads (sockets) per listen address; 0 = one per CPU.
    pub udp_threads: usize,
    /// Serve UDP with the fast path (own threads, `recvmmsg`, cache hits without a task); when
    /// false hickory-server serves UDP too (kept to measure the difference).
    pub udp_fast_path: bool,
}

impl Settings {
    /// Settings with the defaults: no listener, cache of 65,536 answers, 2 s per attempt,
    /// one UDP thread per CPU, fast path on.
    pub fn new(upstream: Vec<SocketAddr>, prefix: Prefix) -> Settings {
        Settings {
            listen: Vec::new(),
            freebind: false,
            upstream,
            prefix,
            exclude: Vec::new(),
            timeout: Duration::from_millis(2000),
            cache_entries: 65_536,
            udp_threads: 0,
            udp_fast_path: true,
        }
    }
}

/// A bound DNS64 server; [`Server::run`] serves until shutdown.
pub struct Server {
    dns: Arc<Dns64>,
    bound: Vec<SocketAddr>,
    udp: Vec<Socket>,
    hickory: HickoryServer<Handler>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

/// Binds the listeners of `settings` and serves until `shutdown` resolves. Must run inside a
/// tokio runtime.
pub async fn serve(
    settings: Settings,
    stats: Arc<Dns64Stats>,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    Server::bind(settings, stats)?.run(shutdown).await
}

impl Server {
    /// Binds UDP and TCP on every listen address. Must be called inside a tokio runtime.
    pub fn bind(settings: Settings, stats: Arc<Dns64Stats>) -> io::Result<Server> {
        if settings.upstream.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "DNS64 needs at least one upstream resolver",
            ));
        }
        let syn = Synthesizer::new(settings.prefix, &settings.exclude);
        let upstreams = Upstreams::new(settings.upstream.clone(), settings.timeout);
        let dns = Arc::new(Dns64::new(syn, upstreams, settings.cache_entries, stats));
        let handler = Handler(Arc::clone(&dns));
        let mut hickory = HickoryServer::new(handler);
        let threads = match settings.udp_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let mut bound = Vec::new();
        let mut udp = Vec::new();
        for &addr in &settings.listen {
            let first = udp_socket(addr, settings.freebind)?;
            let local = first
                .local_addr()?
                .as_socket()
                .ok_or_else(|| io::Error::other("UDP socket without an IP address"))?;
            let tcp = tcp_listener(local, settings.freebind)?;
            hickory.register_listener(tcp, TCP_IDLE, 65_535);
            if settings.udp_fast_path {
                udp.push(first);
                for _ in 1..threads {
                    udp.push(udp_socket(local, settings.freebind)?);
                }
            } else {
                first.set_nonblocking(true)?;
                hickory.register_socket(tokio::net::UdpSocket::from_std(first.into())?);
            }
            bound.push(local);
        }
        info!(listen = ?bound, upstream = ?settings.upstream, prefix = %format!("{}/{}",
            settings.prefix.addr(), settings.prefix.prefix_len()), "DNS64 listening");
        Ok(Server {
            dns,
            bound,
            udp,
            hickory,
        })
    }

    /// The bound addresses (UDP and TCP), in the order of `Settings::listen`.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.bound
    }

    /// The resolver (for its counters and cache).
    pub fn dns64(&self) -> &Arc<Dns64> {
        &self.dns
    }

    /// Serves until `shutdown` resolves, then stops the UDP threads and the TCP listeners.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> io::Result<()> {
        let Server {
            dns,
            udp,
            mut hickory,
            ..
        } = self;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        for (i, sock) in udp.into_iter().enumerate() {
            let ctx = UdpThread {
                sock,
                dns: Arc::clone(&dns),
                stop: stopped.clone(),
                in_flight: Arc::clone(&in_flight),
            };
            threads.push(
                std::thread::Builder::new()
                    .name(format!("gate64-dns{i}"))
                    .spawn(move || ctx.run())?,
            );
        }
        shutdown.await;
        let _ = stop.send(true);
        if let Err(e) = hickory.shutdown_gracefully().await {
            debug!(error = %e, "DNS64 TCP listeners stopped with an error");
        }
        let joined = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        });
        let _ = joined.await;
        info!("DNS64 stopped");
        Ok(())
    }
}

fn udp_socket(addr: SocketAddr, freebind: bool) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_port(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
        if freebind {
            s.set_freebind_v6(true)?;
        }
    } else if freebind {
        s.set_freebind_v4(true)?;
    }
    // A burst of queries should wait in the kernel rather than be dropped.
    let _ = s.set_recv_buffer_size(4 << 20);
    s.bind(&addr.into())?;
    Ok(s)
}

fn tcp_listener(addr: SocketAddr, freebind: bool) -> io::Result<tokio::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
        if freebind {
            s.set_freebind_v6(true)?;
        }
    } else if freebind {
        s.set_freebind_v4(true)?;
    }
    s.bind(&addr.into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(s.into())
}

struct UdpThread {
    sock: Socket,
    dns: Arc<Dns64>,
    stop: tokio::sync::watch::Receiver<bool>,
    in_flight: Arc<AtomicUsize>,
}

impl UdpThread {
    /// Runs the thread's own single-threaded runtime: the socket, the misses' upstream
    /// queries and their timers all live on this thread, so a query never changes threads
    /// (as in Unbound's one event loop per thread). Measured: handing misses to a shared
    /// multi-threaded runtime spent most of the CPU in context switches.
    fn run(self) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                warn!(error = %e, "DNS64 UDP thread cannot start its runtime");
                return;
            }
        };
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, self.serve());
    }

    async fn serve(self) {
        let UdpThread {
            sock,
            dns,
            mut stop,
            in_flight,
        } = self;
        let sock = match sock
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UdpSocket::from_std(sock.into()))
        {
            Ok(s) => Rc::new(s),
            Err(e) => {
                warn!(error = %e, "DNS64 UDP socket cannot join the runtime");
                return;
            }
        };
        let fd = sock.as_raw_fd();
        let mut rx = vec![[0u8; RX_SLOT]; BATCH];
        let mut tx = vec![[0u8; EDNS_PAYLOAD as usize]; BATCH];
        let mut batch = Batch::new();
        loop {
            tokio::select! {
                r = sock.readable() => if let Err(e) = r {
                    warn!(error = %e, "DNS64 UDP socket failed");
                    return;
                },
                _ = stop.changed() => return,
            }
            let n = match sock.try_io(tokio::io::Interest::READABLE, || batch.recv(fd, &mut rx)) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue;
                }
                Err(e) => {
                    warn!(error = %e, "DNS64 UDP receive failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let now = Instant::now();
            let mut hits = 0;
            for (i, slot) in rx.iter().enumerate().take(n) {
                let (len, truncated) = batch.received(i);
                if truncated {
                    dns.stats().count(Dns64Result::Malformed);
                    continue;
                }
                let request = &slot[..len];
                if let Some(out_len) = dns.answer_cached(request, true, now, &mut tx[hits]) {
                    batch.reply(hits, i, out_len);
                    hits += 1;
                } else if let Some(src) = batch.source(i) {
                    miss(&dns, &sock, &in_flight, request, src);
                }
            }
            if hits > 0
                && let Err(e) = batch.send(fd, &mut tx, hits)
            {
                debug!(error = %e, "DNS64 UDP send failed");
            }
        }
    }
}

/// Hands a query the cache cannot answer to a task on this thread.
fn miss(
    dns: &Arc<Dns64>,
    sock: &Rc<tokio::net::UdpSocket>,
    in_flight: &Arc<AtomicUsize>,
    request: &[u8],
    src: SocketAddr,
) {
    if in_flight.fetch_add(1, Ordering::Relaxed) >= MAX_IN_FLIGHT {
        in_flight.fetch_sub(1, Ordering::Relaxed);
        dns.stats().count(Dns64Result::Error);
        return;
    }
    let request = request.to_vec();
    let dns = Arc::clone(dns);
    let sock = Rc::clone(sock);
    let in_flight = Arc::clone(in_flight);
    tokio::task::spawn_local(async move {
        if let Some(answer) = dns.answer_uncached(&request, true).await {
            // Non-blocking: if the socket buffer is full the answer is lost, as on a wire.
            let _ = sock.try_send_to(&answer, src);
        }
        in_flight.fetch_sub(1, Ordering::Relaxed);
    });
}

/// `recvmmsg`/`sendmmsg` bookkeeping for one batch.
struct Batch {
    addrs: [libc::sockaddr_storage; BATCH],
    rx_hdr: [libc::mmsghdr; BATCH],
    rx_iov: [libc::iovec; BATCH],
    /// For each reply: (tx slot, rx index, length).
    replies: [(usize, usize); BATCH],
}

impl Batch {
    fn new() -> Batch {
        // SAFETY: all-zero is a valid value for these plain C structs (null pointers, zero
        // lengths); they are filled before each system call.
        unsafe { MaybeUninit::<Batch>::zeroed().assume_init() }
    }

    /// Receives up to [`BATCH`] datagrams into `rx` from the non-blocking socket.
    fn recv(&mut self, fd: RawFd, rx: &mut [[u8; RX_SLOT]]) -> io::Result<usize> {
        let n = rx.len().min(BATCH);
        for (i, slot) in rx.iter_mut().enumerate().take(n) {
            self.rx_iov[i] = libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: RX_SLOT,
            };
            let h = &mut self.rx_hdr[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.rx_iov[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            self.rx_hdr[i].msg_len = 0;
        }
        // SAFETY: the headers point at `self.addrs`, `self.rx_iov` and `rx`, all alive and
        // sized as declared for the duration of the call.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.rx_hdr.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }

    /// Length of datagram `i` and whether it was cut short.
    fn received(&self, i: usize) -> (usize, bool) {
        let h = &self.rx_hdr[i];
        let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        ((h.msg_len as usize).min(RX_SLOT), truncated)
    }

    /// The source address of datagram `i`.
    fn source(&self, i: usize) -> Option<SocketAddr> {
        let s = &self.addrs[i];
        let len = self.rx_hdr[i].msg_hdr.msg_namelen as usize;
        match i32::from(s.ss_family) {
            libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
                // SAFETY: the kernel wrote a sockaddr_in here (family and length checked).
                let a =
                    unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
                let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
            }
            libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
                // SAFETY: the kernel wrote a sockaddr_in6 here (family and length checked).
                let a =
                    unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
                let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
                Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                    ip,
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }

    /// Records that tx slot `slot` answers datagram `rx` with `len` bytes.
    fn reply(&mut self, slot: usize, rx: usize, len: usize) {
        self.replies[slot] = (rx, len);
    }

    /// Sends the first `count` replies, each to the source of the datagram it answers.
    fn send(
        &mut self,
        fd: RawFd,
        tx: &mut [[u8; EDNS_PAYLOAD as usize]],
        count: usize,
    ) -> io::Result<()> {
        let mut hdrs: [MaybeUninit<libc::mmsghdr>; BATCH] =
            [const { MaybeUninit::uninit() }; BATCH];
        let mut iovs: [MaybeUninit<libc::iovec>; BATCH] = [const { MaybeUninit::uninit() }; BATCH];
        for slot in 0..count {
            let (rx, len) = self.replies[slot];
            iovs[slot].write(libc::iovec {
                iov_base: tx[slot].as_mut_ptr().cast(),
                iov_len: len,
            });
            // SAFETY: zeroed mmsghdr is valid; the fields are set below.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (&mut self.addrs[rx] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = self.rx_hdr[rx].msg_hdr.msg_namelen;
            h.msg_hdr.msg_iov = iovs[slot].as_mut_ptr();
            h.msg_hdr.msg_iovlen = 1;
            hdrs[slot].write(h);
        }
        let mut sent = 0;
        while sent < count {
            // SAFETY: entries `sent..count` are initialized and point at live buffers and
            // addresses.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs[sent].as_mut_ptr(),
                    (count - sent) as libc::c_uint,
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if r == 0 {
                break;
            }
            sent += r as usize;
        }
        Ok(())
    }
}
