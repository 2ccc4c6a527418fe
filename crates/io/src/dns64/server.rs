//! Listening: the fast UDP path, hickory-server for TCP, and [`serve`].
//!
//! UDP is served by plain threads, one SO_REUSEPORT socket each per listen address (the kernel
//! spreads clients over them by flow hash). Each thread runs its own single-threaded tokio
//! runtime: it reads a batch with `recvmmsg`, answers cache hits in place and sends them with
//! one `sendmmsg` (no task, no allocation, no full DNS parse); a miss becomes a local task that
//! asks upstream from the same thread and answers on the same socket. TCP goes through
//! hickory-server's `Server` with [`Handler`]. `docs/performance-history.md` ("DNS64: gate64 vs
//! Unbound's dns64 module") has the measurements behind this split: with hickory-server serving UDP too, gate64 reached 0.64x Unbound's
//! cached rate on the 2-core lab; misses handed to a shared multi-threaded runtime spent most
//! of their CPU in context switches.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gate64_dataplane::Dns64Stats;
use gate64_dns64::Outcome;
use gate64_dns64::synth::{EDNS_PAYLOAD, Synthesizer};
use gate64_nat64::Prefix;
use hickory_server::Server as HickoryServer;
use ipnet::Ipv6Net;
use socket2::{Domain, Protocol, Socket, Type};
use tracing::{debug, info, warn};

use super::handler::{Dns64, Handler};
use super::upstream::Upstreams;
use crate::sys::{self, BATCH, ReceivedFrom};

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
            let (first, local, tcp) = sys::udp_and_tcp_on_one_port(
                addr,
                |a| {
                    let s = udp_socket(a, settings.freebind)?;
                    let local = s
                        .local_addr()?
                        .as_socket()
                        .ok_or_else(|| io::Error::other("UDP socket without an IP address"))?;
                    Ok((s, local))
                },
                |a| tcp_listener(a, settings.freebind),
            )?;
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
        let mut received = [ReceivedFrom::EMPTY; BATCH];
        // For each tx slot: the client it answers and the answer's length.
        let mut replies = [(SocketAddr::from(([0, 0, 0, 0], 0)), 0usize); BATCH];
        loop {
            tokio::select! {
                r = sock.readable() => if let Err(e) = r {
                    warn!(error = %e, "DNS64 UDP socket failed");
                    return;
                },
                _ = stop.changed() => return,
            }
            let n = match sock.try_io(tokio::io::Interest::READABLE, || {
                sys::recv_batch_from(fd, &mut rx, &mut received)
            }) {
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
                    crate::log_limited!(warn, error = %e, "DNS64 UDP receive failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let now = Instant::now();
            let mut hits = 0;
            for (slot, got) in rx.iter().zip(&received).take(n) {
                if got.truncated {
                    dns.count(Outcome::Malformed);
                    continue;
                }
                let request = &slot[..got.len];
                // A source of another family cannot be answered, so it is not counted.
                let Some(src) = got.from else { continue };
                if let Some(out_len) = dns.answer_cached(request, true, now, &mut tx[hits]) {
                    replies[hits] = (src, out_len);
                    hits += 1;
                } else {
                    miss(&dns, &sock, &in_flight, request, src);
                }
            }
            // A reply the kernel refuses is skipped; the rest of the batch still goes.
            sys::send_batch_reporting(
                fd,
                hits,
                |i| (&tx[i][..replies[i].1], replies[i].0),
                |_, e| crate::log_limited!(debug, error = %e, "DNS64 UDP send failed"),
            );
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
        dns.count(Outcome::Error);
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
