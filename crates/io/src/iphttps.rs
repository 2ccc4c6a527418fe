//! The IP-HTTPS server driver: accepts TCP, runs the TLS handshake (rustls), hands the
//! plaintext to `gate64-iphttps`'s sans-IO [`Connection`], and moves packets between the
//! stream and the dataplane. Protocol decisions (request check, RS/RA, anti-spoofing, routing,
//! policy) are made by the sans-IO crates; this module only does I/O, limits and timers.
//!
//! Per connection: one task reads (TLS → deframe → route), one writes (its bounded
//! [`SendQueue`] → TLS). Packets for the client are pushed into the queue by whichever UDP
//! worker read them from the TUN; a full queue drops them (`iphttps_queue_full`).

use crate::queue::SendQueue;
use crate::worker::CorpLink;
use gate64_dataplane::{
    ClientQueue, Direction, Drop, IphttpsEgress, Shared, Side, Stats, TlsResult,
};
use gate64_iphttps::framing::Deframer;
use gate64_iphttps::http;
use gate64_iphttps::server::{
    Connection, Handshake, MAX_REPLY_LEN, PacketVerdict, PrefixPool, ServerConfig,
};
use gate64_metrics::Exporter;
use std::cell::OnceCell;
use std::io;
use std::net::{Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tracing::{debug, info, warn};

/// Read buffer per connection: room for several 16 KiB TLS records read back to back (their
/// packets then share one coalesced TUN write), and for a partial packet of at most
/// [`MAX_PACKET`] bytes left between reads. Pages are only touched as a link gets busy.
const READ_BUF: usize = 64 * 1024;
/// Largest packet accepted from a client. The IP-HTTPS link MTU is 1280 (§3.2.3.1); this
/// leaves room for clients that send more, and keeps the read buffer small.
const MAX_PACKET: usize = 9216;
/// `http::error_response` knows only the statuses of request errors (anything else becomes
/// 500), so the two the driver itself sends are spelled out here.
const RESPONSE_408: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const RESPONSE_503: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Everything the connection tasks share.
pub struct IphttpsServer {
    acceptor: tokio_rustls::TlsAcceptor,
    proto: Arc<ServerConfig>,
    shared: Arc<Shared>,
    pool: Mutex<PrefixPool>,
    corp: Vec<Arc<CorpLink>>,
    exporter: Exporter,
    handshakes: Arc<Semaphore>,
    handshake_timeout: Duration,
    max_connections: usize,
    connections: AtomicUsize,
    send_queue_bytes: usize,
}

/// Server settings from `[iphttps]` and `[limits]`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Protocol settings for every connection (path, pool, timers).
    pub proto: ServerConfig,
    /// Concurrent TLS handshakes; further connections wait for a slot within the timeout.
    pub max_handshakes: usize,
    /// TLS handshake plus HTTP request must complete within this.
    pub handshake_timeout: Duration,
    /// Connections held at once; more are closed at accept.
    pub max_connections: usize,
    /// Per-connection send queue, bytes.
    pub send_queue_bytes: usize,
}

impl IphttpsServer {
    /// Builds the server. `corp` are the corporate links (TUN queues) packets are written to.
    pub fn new(
        tls: Arc<rustls::ServerConfig>,
        settings: Settings,
        shared: Arc<Shared>,
        corp: Vec<Arc<CorpLink>>,
        exporter: Exporter,
    ) -> io::Result<Arc<Self>> {
        let pool = PrefixPool::from_config(&settings.proto).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`iphttps.prefix`: {e}"),
            )
        })?;
        if corp.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no corporate link",
            ));
        }
        Ok(Arc::new(IphttpsServer {
            acceptor: tokio_rustls::TlsAcceptor::from(tls),
            proto: Arc::new(settings.proto),
            shared,
            pool: Mutex::new(pool),
            corp,
            exporter,
            handshakes: Arc::new(Semaphore::new(settings.max_handshakes.max(1))),
            handshake_timeout: settings.handshake_timeout,
            max_connections: settings.max_connections,
            connections: AtomicUsize::new(0),
            send_queue_bytes: settings.send_queue_bytes,
        }))
    }

    /// Accepts connections until `shutdown` turns true, then closes every link gracefully
    /// (TLS close_notify) and waits up to 5 s for them.
    pub async fn run(self: Arc<Self>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
        info!(listen = ?listener.local_addr().ok(), path = %self.proto.path, "IP-HTTPS listening");
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((tcp, peer)) => {
                        if self.connections.load(Ordering::Relaxed) >= self.max_connections {
                            self.stats().tls_handshake(TlsResult::Busy);
                            debug!(%peer, "refused: limits.max_iphttps_connections reached");
                            continue;
                        }
                        self.connections.fetch_add(1, Ordering::Relaxed);
                        let me = Arc::clone(&self);
                        let stop = shutdown.clone();
                        tasks.spawn(async move {
                            me.connection(tcp, peer, stop).await;
                            me.connections.fetch_sub(1, Ordering::Relaxed);
                        });
                    }
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        warn!(error = %e, "IP-HTTPS accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                _ = shutdown.changed() => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        drop(listener);
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// This thread's counters (registered with the exporter on first use). Counters are
    /// single-writer; a tokio worker thread is one writer.
    fn stats(&self) -> Arc<Stats> {
        thread_local! {
            static LOCAL: OnceCell<Arc<Stats>> = const { OnceCell::new() };
        }
        LOCAL.with(|c| {
            Arc::clone(c.get_or_init(|| {
                let s = Arc::new(Stats::default());
                self.exporter.add_workers(vec![Arc::clone(&s)]);
                s
            }))
        })
    }

    async fn connection(
        self: &Arc<Self>,
        tcp: TcpStream,
        peer: SocketAddr,
        shutdown: watch::Receiver<bool>,
    ) {
        let _ = tcp.set_nodelay(true);
        let deadline = tokio::time::Instant::now() + self.handshake_timeout;
        let Ok(Ok(permit)) =
            tokio::time::timeout_at(deadline, Arc::clone(&self.handshakes).acquire_owned()).await
        else {
            self.stats().tls_handshake(TlsResult::Busy);
            return;
        };
        let tls = match tokio::time::timeout_at(deadline, self.acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                self.stats().tls_handshake(TlsResult::TlsError);
                debug!(%peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                self.stats().tls_handshake(TlsResult::Timeout);
                debug!(%peer, "TLS handshake timed out");
                return;
            }
        };
        let Some(prefix) = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .allocate()
        else {
            self.stats().tls_handshake(TlsResult::PoolExhausted);
            warn!(%peer, "IP-HTTPS prefix pool exhausted (`iphttps.prefix`)");
            let (_, mut w) = tokio::io::split(tls);
            let _ = w.write_all(RESPONSE_503).await;
            let _ = w.shutdown().await;
            return;
        };
        self.link(tls, peer, prefix, deadline, permit, shutdown)
            .await;
        self.pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .release(prefix);
    }

    async fn link(
        self: &Arc<Self>,
        tls: tokio_rustls::server::TlsStream<TcpStream>,
        peer: SocketAddr,
        prefix: Ipv6Addr,
        deadline: tokio::time::Instant,
        permit: tokio::sync::OwnedSemaphorePermit,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let (mut rd, mut wr) = tokio::io::split(tls);
        let mut conn = Connection::new(Arc::clone(&self.proto), prefix, Instant::now());
        let mut buf = vec![0u8; READ_BUF];
        let mut end = 0usize;
        let mut out = Vec::with_capacity(256);

        // The request head, within the handshake deadline (slowloris gets cut here).
        let mut start = loop {
            let n = match tokio::time::timeout_at(deadline, rd.read(&mut buf[end..])).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    self.stats().tls_handshake(TlsResult::HttpError);
                    return;
                }
                Ok(Ok(n)) => n,
                Err(_) => {
                    self.stats().tls_handshake(TlsResult::Timeout);
                    let _ = wr.write_all(RESPONSE_408).await;
                    let _ = wr.shutdown().await;
                    return;
                }
            };
            end += n;
            let date = http::http_date(unix_now());
            match conn.handle_input(Instant::now(), &buf[..end], &date, &mut out) {
                Ok(Handshake::Pending) if end < buf.len() => continue,
                Ok(Handshake::LinkUp { consumed, .. }) => break consumed,
                Ok(Handshake::Pending) | Ok(Handshake::Rejected { .. }) | Err(_) => {
                    self.stats().tls_handshake(TlsResult::HttpError);
                    if out.is_empty() {
                        out.extend_from_slice(http::error_response(431));
                    }
                    let _ = wr.write_all(&out).await;
                    let _ = wr.shutdown().await;
                    return;
                }
            }
        };
        if wr.write_all(&out).await.is_err() {
            return;
        }
        drop(permit);
        self.stats().tls_handshake(TlsResult::Ok);
        let queue = Arc::new(SendQueue::new(self.send_queue_bytes));
        self.shared
            .iphttps_clients()
            .insert(prefix, Arc::clone(&queue) as Arc<dyn ClientQueue>);
        info!(%peer, prefix = %format!("{prefix}/64"), "IP-HTTPS link up");

        let writer = {
            let queue = Arc::clone(&queue);
            // Bytes in the queue were counted as sent when the worker queued them.
            tokio::spawn(async move {
                let mut spare = Vec::new();
                while queue.take(&mut spare).await {
                    let t0 = tokio::time::Instant::now();
                    if wr.write_all(&spare).await.is_err() {
                        break;
                    }
                    queue.report_drain(spare.len(), t0.elapsed());
                    // A chunk well below what the buffer grew to after a burst: give the
                    // memory back rather than keep megabytes per quiet connection.
                    if spare.capacity() > 4 * crate::queue::MIN_BYTES
                        && spare.len() < crate::queue::MIN_BYTES
                    {
                        spare = Vec::new();
                    }
                    spare.clear();
                }
                queue.close();
                let _ = wr.shutdown().await;
            })
        };

        let deframer = Deframer::new(MAX_PACKET);
        let mut reply = [0u8; MAX_REPLY_LEN];
        let corp = &self.corp[(u128::from(prefix) >> 64) as usize % self.corp.len()];
        let idle = self.proto.idle_timeout;
        let mut last_rx = tokio::time::Instant::now();
        let reason = 'link: loop {
            // Whatever is buffered first: the bytes after the request head, then each read.
            // The packets of one read that go to the TUN leave in one coalescing write. No
            // await happens between filling this thread's batch and flushing it.
            let framing = {
                let stats = self.stats();
                let mut batch = TunBatch::default();
                let r = loop {
                    match deframer.next_packet(&buf[start..end]) {
                        Ok(Some(len)) => {
                            let pkt = &buf[start..start + len];
                            if let Some(n) = self
                                .handle_client_packet(&mut conn, &queue, &stats, pkt, &mut reply)
                            {
                                if batch.is_full() {
                                    batch.flush(&buf, corp, &stats);
                                }
                                batch.push(start, n);
                            }
                            start += len;
                        }
                        Ok(None) => break Ok(()),
                        Err(e) => break Err(e),
                    }
                };
                batch.flush(&buf, corp, &stats);
                r
            };
            if let Err(e) = framing {
                // §3.2.5.2.2: a non-IPv6 packet loses the stream; close the session.
                self.stats().count_drops(Drop::NotIpv6, 1);
                break 'link format!("framing: {e}");
            }
            if start == end {
                (start, end) = (0, 0);
            } else if buf.len() - end < MAX_PACKET {
                buf.copy_within(start..end, 0);
                (start, end) = (0, end - start);
            }
            if let Some(n) = conn.poll_unsolicited_ra(Instant::now(), &mut reply) {
                queue.push(&reply[..n]);
            }
            let wake = conn
                .poll_timeout()
                .map(tokio::time::Instant::from_std)
                .unwrap_or_else(|| tokio::time::Instant::now() + idle);
            let idle_at = last_rx.checked_add(idle).unwrap_or(wake);
            tokio::select! {
                r = rd.read(&mut buf[end..]) => match r {
                    Ok(0) => break 'link "closed by client".to_owned(),
                    Ok(n) => {
                        end += n;
                        last_rx = tokio::time::Instant::now();
                        // Take whatever else TLS has ready now, so the packets of several
                        // records leave in one coalesced TUN write.
                        while buf.len() - end >= MAX_PACKET {
                            tokio::select! {
                                biased;
                                r = rd.read(&mut buf[end..]) => match r {
                                    Ok(n) if n > 0 => end += n,
                                    _ => break,
                                },
                                _ = std::future::ready(()) => break,
                            }
                        }
                    }
                    Err(e) => break 'link format!("read: {e}"),
                },
                _ = tokio::time::sleep_until(wake.min(idle_at)) => {
                    if tokio::time::Instant::now() >= idle_at {
                        break 'link "idle timeout".to_owned();
                    }
                }
                _ = shutdown.changed() => break 'link "shutdown".to_owned(),
            }
        };
        self.shared.iphttps_clients().remove(prefix);
        queue.close();
        let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
        info!(%peer, prefix = %format!("{prefix}/64"), %reason, "IP-HTTPS link down");
    }

    /// One packet from the client: the sans-IO connection judges it (RS → RA, spoofing), the
    /// dataplane routes it (policy step, corporate prefixes, other IP-HTTPS clients). Returns
    /// how many of its bytes go to the TUN, if it goes there.
    fn handle_client_packet(
        &self,
        conn: &mut Connection,
        queue: &SendQueue,
        stats: &Stats,
        pkt: &[u8],
        reply: &mut [u8],
    ) -> Option<usize> {
        stats.packet(Side::Internet, Direction::Rx, pkt.len());
        match conn.handle_packet(Instant::now(), pkt, reply) {
            PacketVerdict::Forward => match self.shared.route_from_iphttps(stats, pkt) {
                Ok(IphttpsEgress::Tun { len }) => return Some(len),
                Ok(IphttpsEgress::Delivered) | Err(_) => {}
            },
            PacketVerdict::Reply { len } => {
                if !queue.push(&reply[..len]) {
                    stats.count_drops(Drop::IphttpsQueueFull, 1);
                }
            }
            PacketVerdict::Consumed => {}
            PacketVerdict::Drop(reason) => stats.count_drops(drop_reason(reason), 1),
        }
        None
    }
}

/// The packets of one read on their way to the TUN: byte ranges of the connection's read
/// buffer, written together so a flow's segments coalesce into one super-packet with no copy
/// ([`crate::gro`]).
struct TunBatch {
    ranges: [(usize, usize); TUN_BATCH],
    n: usize,
}

/// Packets per TUN write batch at most (a 64 KiB read holds about 50).
const TUN_BATCH: usize = 64;

impl Default for TunBatch {
    fn default() -> Self {
        TunBatch {
            ranges: [(0, 0); TUN_BATCH],
            n: 0,
        }
    }
}

impl TunBatch {
    fn is_full(&self) -> bool {
        self.n == TUN_BATCH
    }

    fn push(&mut self, start: usize, len: usize) {
        self.ranges[self.n] = (start, len);
        self.n += 1;
    }

    fn flush(&mut self, buf: &[u8], corp: &CorpLink, stats: &Stats) {
        if self.n == 0 {
            return;
        }
        let mut packets: [&[u8]; TUN_BATCH] = [&[]; TUN_BATCH];
        for (p, &(start, len)) in packets.iter_mut().zip(&self.ranges[..self.n]) {
            *p = buf.get(start..start + len).unwrap_or_default();
        }
        let w = corp.write_packets(&packets[..self.n]);
        for p in &packets[..w.ok.min(self.n)] {
            stats.packet(Side::Corpnet, Direction::Tx, p.len());
        }
        stats.count_drops(Drop::TxError, w.failed as u64);
        self.n = 0;
    }
}

fn drop_reason(r: gate64_iphttps::server::DropReason) -> Drop {
    use gate64_iphttps::server::DropReason as R;
    match r {
        R::SpoofedSource => Drop::SpoofedSource,
        R::Malformed => Drop::Malformed,
        R::Multicast | R::LinkLocal | R::NotForwardable | R::UnspecifiedSource => {
            Drop::BadDestination
        }
        R::InvalidRouterSolicitation | R::InvalidNeighborSolicitation => Drop::UnhandledIcmpv6,
        _ => Drop::NoRoute,
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
