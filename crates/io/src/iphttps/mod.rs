//! The IP-HTTPS server driver: accepts TCP, runs the TLS handshake (rustls), and executes what
//! `gate64-iphttps`'s sans-IO [`Connection`] and the dataplane decide. Protocol decisions
//! (request check, RS/RA, anti-spoofing, the egress filter, timers, routing, policy) are made
//! by the sans-IO crates; this module only does I/O and limits.
//!
//! Per connection: one task reads (TLS → deframe → [`Worker::handle_iphttps`], where the
//! connection judges each packet, answers RS and NS into the link's send queue and hands the
//! rest to the one road, all in the runtime thread's read buffer: see [`input`]) and runs the
//! connection's timers; one writes (its bounded [`SendQueue`] → the link's `EgressFilter` →
//! TLS). Each runtime thread has its own dataplane [`Worker`] (counters, scratch, queued
//! transmits), as each UDP worker thread does, and executes its verdicts itself: the TUN for
//! the corporate network and NAT64, a clone of a Teredo socket for Teredo clients. Packets
//! for the client are pushed into the queue by whichever thread routed them; a full queue
//! drops them (`iphttps_queue_full`).

mod admission;
mod input;
mod lease;
pub mod queue;
mod reclaim;
mod writer;

use crate::tun::CorpLink;
use gate64_dataplane::{ClientQueue, DropReason, Shared, Stats, TlsResult, Worker};
use gate64_iphttps::framing::Deframer;
use gate64_iphttps::http;
use gate64_iphttps::server::{
    CloseReason, Connection, Handshake, MAX_REPLY_LEN, PrefixPool, ServerConfig,
};
use gate64_metrics::Exporter;
use queue::SendQueue;
use std::cell::RefCell;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tracing::{debug, error, info};

use admission::{Admission, AdmissionLimits, Refusal, Slot};
use lease::Lease;
pub use lease::LeaseHints;
use reclaim::{Reclaim, Ticket};
use writer::{Writer, WriterEnd};

/// Largest packet accepted from a client. The IP-HTTPS link MTU is 1280 (§3.2.3.1); this
/// leaves room for clients that send more, and bounds the partial packet a link keeps.
const MAX_PACKET: usize = 9216;
/// `http::error_response` knows only the statuses of request errors (anything else becomes
/// 500), so the two the driver itself sends are spelled out here.
const RESPONSE_408: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const RESPONSE_503: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

type Tls = tokio_rustls::server::TlsStream<TcpStream>;

/// rustls' own buffer of records not yet taken by the socket (default 64 KiB). Outside the
/// queue budget, so kept to two full records: a stalled client holds at most this there.
const TLS_SEND_BUFFER: usize = 32 * 1024;
/// Unsent bytes the kernel keeps per connection (TCP_NOTSENT_LOWAT). Without it a client that
/// closes its window and stops reading made the kernel's autotuned send buffer take ~70 KiB
/// per connection and growing (`ss -tm`: 145 MB for 2,000 such clients), outside the queue
/// budget and outside gate64's RSS. Bytes in flight to a reading client are not limited.
const TCP_UNSENT_LIMIT: usize = 32 * 1024;
/// How long a refused client gets to take its answer.
const ANSWER_GRACE: Duration = Duration::from_secs(2);
/// How long a link whose read side ended waits for its writer's reason.
const READ_END_GRACE: Duration = Duration::from_millis(50);

/// Tells servers apart in the per-thread dataplane workers.
static NEXT_SERVER_ID: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This runtime thread's dataplane workers, one per server (tests run several).
    static DATAPLANE: RefCell<Vec<(u64, Worker)>> = const { RefCell::new(Vec::new()) };
}

/// Everything the connection tasks share.
pub struct IphttpsServer {
    id: u64,
    teredo: Vec<(Ipv4Addr, UdpSocket)>,
    tls: crate::tls::ReloadableServerConfig,
    proto: Arc<ServerConfig>,
    shared: Arc<Shared>,
    pool: Mutex<PrefixPool>,
    hints: Option<Arc<LeaseHints>>,
    corp: Vec<Arc<CorpLink>>,
    exporter: Exporter,
    handshakes: Arc<Semaphore>,
    /// The set-ups holding a slot of `handshakes`, cut oldest first for a newcomer.
    reclaim: Arc<Reclaim>,
    handshake_timeout: Duration,
    /// `client_hello_timeout` and `write_timeout` of [`Settings`] in milliseconds, which a
    /// reload may change.
    client_hello_timeout_ms: AtomicU64,
    write_timeout_ms: AtomicU64,
    admission: Arc<Admission>,
    send_queue_bytes: usize,
    /// Test hook: the connection task panics once its link is up.
    #[cfg(test)]
    panic_after_link_up: std::sync::atomic::AtomicBool,
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
    /// All send queues together, bytes.
    pub queue_budget_bytes: usize,
    /// A write towards the client making no progress this long closes the connection; also
    /// the socket's TCP_USER_TIMEOUT.
    pub write_timeout: Duration,
    /// From TCP accept to the first byte of the ClientHello.
    pub client_hello_timeout: Duration,
    /// Connections before link-up per source (IPv4 address, IPv6 /64).
    pub max_handshakes_per_source: usize,
    /// Connections before link-up per network (IPv4 /24, IPv6 /48).
    pub max_handshakes_per_network: usize,
    /// Connections per source.
    pub max_connections_per_source: usize,
    /// The /64s the HA peer's clients held, for those that reconnect here (`[ha]`).
    pub lease_hints: Option<Arc<LeaseHints>>,
    /// The HA peer's IP-HTTPS pool (`ha.peer_iphttps_prefix`): a /64 of it goes to a link
    /// only by a claim a lease hint backs for the link's interface id, or by the binding that
    /// claim made ([`PrefixPool::with_peer`]).
    pub peer_prefix: Option<(Ipv6Addr, u8)>,
}

impl IphttpsServer {
    /// Builds the server. `corp` are the corporate links (TUN queues) packets are written to;
    /// `teredo` the Teredo sockets (clones, see [`crate::clone_sockets`]) that datagrams to
    /// Teredo clients leave from.
    pub fn new(
        tls: Arc<rustls::ServerConfig>,
        settings: Settings,
        shared: Arc<Shared>,
        corp: Vec<Arc<CorpLink>>,
        teredo: Vec<(Ipv4Addr, UdpSocket)>,
        exporter: Exporter,
    ) -> io::Result<Arc<Self>> {
        let invalid =
            |key: &str, e| io::Error::new(io::ErrorKind::InvalidInput, format!("`{key}`: {e}"));
        let mut pool =
            PrefixPool::from_config(&settings.proto).map_err(|e| invalid("iphttps.prefix", e))?;
        if let Some((prefix, len)) = settings.peer_prefix {
            pool =
                (pool.with_peer(prefix, len)).map_err(|e| invalid("ha.peer_iphttps_prefix", e))?;
        }
        if corp.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no corporate link",
            ));
        }
        shared
            .iphttps_clients()
            .budget()
            .set_limit(settings.queue_budget_bytes);
        let admission = Admission::new(admission_limits(&settings));
        Ok(Arc::new(IphttpsServer {
            id: NEXT_SERVER_ID.fetch_add(1, Ordering::Relaxed),
            teredo,
            tls: crate::tls::ReloadableServerConfig::new(tls),
            proto: Arc::new(settings.proto),
            shared,
            pool: Mutex::new(pool),
            hints: settings.lease_hints.clone(),
            corp,
            exporter,
            handshakes: Arc::new(Semaphore::new(settings.max_handshakes.max(1))),
            reclaim: Reclaim::new(Reclaim::min_age_for(settings.handshake_timeout)),
            handshake_timeout: settings.handshake_timeout,
            client_hello_timeout_ms: AtomicU64::new(millis(settings.client_hello_timeout)),
            write_timeout_ms: AtomicU64::new(millis(settings.write_timeout)),
            admission,
            send_queue_bytes: settings.send_queue_bytes,
            #[cfg(test)]
            panic_after_link_up: std::sync::atomic::AtomicBool::new(false),
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
                        let Some(slot) = self.admit(peer) else { continue };
                        let me = Arc::clone(&self);
                        let stop = shutdown.clone();
                        tasks.spawn(async move { me.connection(tcp, peer, slot, stop).await });
                    }
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        crate::log_limited!(warn, error = %e, "IP-HTTPS accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                _ = shutdown.changed() => break,
                Some(r) = tasks.join_next(), if !tasks.is_empty() => log_panic(r),
            }
        }
        drop(listener);
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(r) = tasks.join_next().await {
                log_panic(r);
            }
        })
        .await;
    }

    /// The TLS configuration new connections get; replace it to serve a new certificate
    /// without dropping the connections up.
    pub fn tls(&self) -> crate::tls::ReloadableServerConfig {
        self.tls.clone()
    }

    /// Applies the settings a reload may change (docs/config.md, "Reloading"): the limits on
    /// connections (at once, and per source before and after link-up) for the accepts from
    /// now on, the ClientHello deadline for connections accepted from now on, the write
    /// timeout for every write from now on, and the shared queue budget at once (a lowered
    /// budget refuses new bytes until the queues drain below it). Connections above a
    /// lowered limit stay up. The other fields of `settings` are ignored.
    pub fn apply(&self, settings: &Settings) {
        self.admission.set_limits(admission_limits(settings));
        self.client_hello_timeout_ms
            .store(millis(settings.client_hello_timeout), Ordering::Relaxed);
        self.write_timeout_ms
            .store(millis(settings.write_timeout), Ordering::Relaxed);
        self.shared
            .iphttps_clients()
            .budget()
            .set_limit(settings.queue_budget_bytes);
    }

    fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.write_timeout_ms.load(Ordering::Relaxed))
    }

    fn client_hello_timeout(&self) -> Duration {
        Duration::from_millis(self.client_hello_timeout_ms.load(Ordering::Relaxed))
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.admission.connections()
    }

    /// Counts `peer`'s new connection, or counts and logs why it is refused (the caller then
    /// drops the socket: nothing was spent on it).
    fn admit(&self, peer: SocketAddr) -> Option<Slot> {
        let refusal = match self.admission.admit(peer.ip()) {
            Ok(slot) => return Some(slot),
            Err(r) => r,
        };
        let (result, key) = match refusal {
            Refusal::Busy => (TlsResult::Busy, "limits.max_iphttps_connections"),
            Refusal::SourceHandshakes => (
                TlsResult::SourceHandshakes,
                "iphttps.max_handshakes_per_source",
            ),
            Refusal::NetworkHandshakes => (
                TlsResult::NetworkHandshakes,
                "iphttps.max_handshakes_per_network",
            ),
            Refusal::SourceConnections => (
                TlsResult::SourceConnections,
                "iphttps.max_connections_per_source",
            ),
        };
        self.stats().tls_handshake(result);
        debug!(%peer, "refused: {key} reached");
        None
    }

    /// Runs `f` with this thread's dataplane worker, made (and its counters registered with
    /// the exporter) on first use. Counters are single-writer; a runtime thread is one writer.
    /// `f` must not call back into this.
    fn with_dataplane<R>(&self, f: impl FnOnce(&mut Worker) -> R) -> R {
        DATAPLANE.with(|cell| {
            let mut workers = cell.borrow_mut();
            let i = match workers.iter().position(|(id, _)| *id == self.id) {
                Some(i) => i,
                None => {
                    let stats = Arc::new(Stats::default());
                    self.exporter.add_workers(vec![Arc::clone(&stats)]);
                    workers.push((self.id, Worker::new(Arc::clone(&self.shared), stats)));
                    workers.len() - 1
                }
            };
            f(&mut workers[i].1)
        })
    }

    /// This thread's counters.
    fn stats(&self) -> Arc<Stats> {
        self.with_dataplane(|dp| Arc::clone(dp.stats()))
    }

    /// One of `limits.max_tls_handshakes` before `deadline`. When every one is taken, the
    /// oldest set-up past the reclaim age is cut first (`reclaim.rs`), so slow set-ups cannot
    /// hold the slots against newcomers.
    async fn handshake_slot(
        &self,
        deadline: tokio::time::Instant,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(permit) = Arc::clone(&self.handshakes).try_acquire_owned() {
            return Some(permit);
        }
        self.reclaim.reclaim_oldest(tokio::time::Instant::now());
        tokio::time::timeout_at(deadline, Arc::clone(&self.handshakes).acquire_owned())
            .await
            .ok()?
            .ok()
    }

    async fn connection(
        self: &Arc<Self>,
        tcp: TcpStream,
        peer: SocketAddr,
        slot: Slot,
        shutdown: watch::Receiver<bool>,
    ) {
        let _ = tcp.set_nodelay(true);
        // Unacknowledged data to a client that vanished ends the connection as a stalled
        // write does, instead of ~15 minutes of retransmissions. Twice the write timeout: the
        // writer's own deadline, which counts the event, normally comes first.
        let _ = socket2::SockRef::from(&tcp).set_tcp_user_timeout(Some(2 * self.write_timeout()));
        if let Err(e) = crate::sys::set_notsent_lowat(tcp.as_raw_fd(), TCP_UNSENT_LIMIT) {
            crate::log_limited!(debug, %peer, error = %e, "TCP_NOTSENT_LOWAT refused");
        }
        let accepted = tokio::time::Instant::now();
        let deadline = accepted + self.handshake_timeout;
        // An idle TCP connection takes no handshake slot: only a started ClientHello does.
        let hello = accepted + self.client_hello_timeout().min(self.handshake_timeout);
        if !matches!(
            tokio::time::timeout_at(hello, tcp.peek(&mut [0u8; 1])).await,
            Ok(Ok(1))
        ) {
            self.stats().tls_handshake(TlsResult::NoClientHello);
            debug!(%peer, "no ClientHello");
            return;
        }
        let Some(permit) = self.handshake_slot(deadline).await else {
            self.stats().tls_handshake(TlsResult::Busy);
            return;
        };
        let ticket = self.reclaim.register(accepted);
        let acceptor = tokio_rustls::TlsAcceptor::from(self.tls.current());
        let accept = tokio::select! {
            biased;
            () = ticket.reclaimed() => None,
            r = tokio::time::timeout_at(deadline, acceptor.accept(tcp)) => Some(r),
        };
        let Some(accept) = accept else {
            self.stats().tls_handshake(TlsResult::Reclaimed);
            crate::log_limited!(debug, %peer, "TLS handshake cut for a newcomer");
            return;
        };
        let mut tls = match accept {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) if crate::tls::is_revoked(&e) => {
                self.stats().tls_handshake(TlsResult::Revoked);
                crate::log_limited!(info, %peer, "IP-HTTPS client certificate refused: revoked");
                return;
            }
            Ok(Err(e)) => {
                self.stats().tls_handshake(TlsResult::TlsError);
                crate::log_limited!(debug, %peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                self.stats().tls_handshake(TlsResult::Timeout);
                crate::log_limited!(debug, %peer, "TLS handshake timed out");
                return;
            }
        };
        tls.get_mut().1.set_buffer_limit(Some(TLS_SEND_BUFFER));
        let Some(lease) = Lease::take(self) else {
            self.stats().tls_handshake(TlsResult::PoolExhausted);
            crate::log_limited!(warn, %peer, "IP-HTTPS prefix pool exhausted (`iphttps.prefix`)");
            let (_, mut w) = tokio::io::split(tls);
            answer_and_close(&mut w, RESPONSE_503).await;
            return;
        };
        let setup = Setup {
            deadline,
            permit,
            ticket,
            slot,
        };
        self.link(tls, peer, lease, setup, shutdown).await;
    }

    /// The link's life after the TLS handshake: the request head, then packets both ways
    /// until the connection closes. Everything it holds is given back by drop guards, so a
    /// panic in here frees the slot, the /64 and the queue's budget, and stops the writer.
    async fn link(
        self: &Arc<Self>,
        tls: Tls,
        peer: SocketAddr,
        mut lease: Lease,
        setup: Setup,
        shutdown: watch::Receiver<bool>,
    ) {
        let (mut rd, mut wr) = tokio::io::split(tls);
        let mut conn = Connection::new(Arc::clone(&self.proto), lease.prefix, Instant::now());
        // Only while the head is read: afterwards the link has no buffer of its own.
        let mut head = vec![0u8; http::MAX_HEAD_LEN];
        let head_read = tokio::select! {
            biased;
            () = setup.ticket.reclaimed() => {
                self.stats().tls_handshake(TlsResult::Reclaimed);
                crate::log_limited!(debug, %peer, "request head cut for a newcomer");
                return;
            }
            r = self.request_head(&mut conn, &mut rd, &mut wr, &mut head, setup.deadline) => r,
        };
        let Some((start, end)) = head_read else {
            return;
        };
        let mut partial = head.get(start..end).map(<[u8]>::to_vec).unwrap_or_default();
        drop(head);
        let Setup {
            permit,
            ticket,
            mut slot,
            ..
        } = setup;
        drop((permit, ticket));
        slot.link_up();
        self.stats().tls_handshake(TlsResult::Ok);
        let settled = (self.settle_prefix(&mut lease, &mut conn, &mut rd, &mut partial)).await;
        if settled.is_none() {
            crate::log_limited!(debug, %peer, "IP-HTTPS link closed before its first packet");
            return;
        }
        let prefix = lease.prefix;
        let queue = Arc::new(SendQueue::new(
            self.send_queue_bytes,
            Arc::clone(self.shared.iphttps_clients().budget()),
        ));
        lease.register(Arc::clone(&queue));
        crate::log_limited!(info, %peer, prefix = %format!("{prefix}/64"), "IP-HTTPS link up");
        let mut writer = Writer(Some(tokio::spawn(Arc::clone(self).writer(
            wr,
            Arc::clone(&queue),
            conn.egress_filter(),
        ))));
        #[cfg(test)]
        if self.panic_after_link_up.load(Ordering::Relaxed) {
            panic!("injected: connection task panics after link-up");
        }
        let mut link = Link {
            conn,
            queue: Arc::clone(&queue),
            prefix,
            partial,
            read_end: None,
            deframer: Deframer::new(MAX_PACKET),
            reply: [0u8; MAX_REPLY_LEN],
        };
        let reason = self.serve(&mut link, &mut rd, &mut writer, shutdown).await;
        lease.unregister();
        queue.close();
        // A short grace for the writer to flush and send close_notify; a client that does
        // not read gets none: the writer is aborted, not left behind.
        writer.finish(Duration::from_secs(2)).await;
        drop(writer);
        // The /64 goes back only now that nothing can still be sent to its old owner.
        drop(lease);
        drop(slot);
        crate::log_limited!(info, %peer, prefix = %format!("{prefix}/64"), %reason, "IP-HTTPS link down");
    }

    /// Reads the request head within the handshake deadline and the connection's request
    /// timer (slowloris gets cut here) and answers it. Returns the buffered bytes after the
    /// head, `buf[start..end]`, once the link is up.
    async fn request_head(
        &self,
        conn: &mut Connection,
        rd: &mut ReadHalf<Tls>,
        wr: &mut WriteHalf<Tls>,
        buf: &mut [u8],
        deadline: tokio::time::Instant,
    ) -> Option<(usize, usize)> {
        let mut end = 0usize;
        let mut out = Vec::with_capacity(256);
        let until = conn.poll_timeout().map_or(deadline, |t| {
            deadline.min(tokio::time::Instant::from_std(t))
        });
        let consumed = loop {
            let n = match tokio::time::timeout_at(until, rd.read(&mut buf[end..])).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    self.stats().tls_handshake(TlsResult::HttpError);
                    return None;
                }
                Ok(Ok(n)) => n,
                Err(_) => {
                    conn.handle_timeout(Instant::now());
                    self.stats().tls_handshake(TlsResult::Timeout);
                    answer_and_close(wr, RESPONSE_408).await;
                    return None;
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
                    answer_and_close(wr, &out).await;
                    return None;
                }
            }
        };
        wr.write_all(&out).await.ok()?;
        Some((consumed, end))
    }

    /// Moves packets from the stream to the dataplane and runs the connection's timers until
    /// the link ends; returns why it ended.
    async fn serve(
        &self,
        link: &mut Link,
        rd: &mut ReadHalf<Tls>,
        writer: &mut Writer,
        mut shutdown: watch::Receiver<bool>,
    ) -> String {
        let mut woke = [0u8; input::WAKE_READ];
        let mut n = 0;
        loop {
            // The first turn takes the packets that came with the request head.
            if n > 0 || !link.partial.is_empty() {
                let more = (n > 0).then_some(&mut *rd);
                if let Err(e) = self.input(link, &woke[..n], more) {
                    // §3.2.5.2.2: a non-IPv6 packet loses the stream; close the session.
                    self.stats().count_drops(DropReason::NotIpv6, 1);
                    link.conn.close(CloseReason::Framing(e));
                    return format!("framing: {e}");
                }
                n = 0;
            }
            if let Some(r) = link.read_end.take() {
                return self.read_ended(r, writer).await;
            }
            let now = Instant::now();
            let wake = {
                let conn = &mut link.conn;
                // What the writer sent since: counters, and traffic towards the client keeps
                // the link from going idle.
                conn.note_egress(link.queue.take_egress());
                if let Some(reason) = conn.handle_timeout(now) {
                    return reason.to_string();
                }
                if let Some(n) = conn.poll_unsolicited_ra(now, &mut link.reply) {
                    link.queue.push(&link.reply[..n]);
                }
                let Some(wake) = conn.poll_timeout() else {
                    return "closed".to_owned();
                };
                tokio::time::Instant::from_std(wake)
            };
            tokio::select! {
                r = rd.read(&mut woke) => match r {
                    Ok(read) if read > 0 => n = read,
                    r => return self.read_ended(r.map(|_| ()), writer).await,
                },
                _ = tokio::time::sleep_until(wake) => {}
                end = writer.ended() => return match end {
                    WriterEnd::Stalled(by) => self.stalled(by),
                    end => format!("writer: {end:?}"),
                },
                _ = shutdown.changed() => return "shutdown".to_owned(),
            }
        }
    }

    /// Why the link ended when its read side did (`Ok` for the end of the stream).
    async fn read_ended(&self, r: io::Result<()>, writer: &mut Writer) -> String {
        if let Err(e) = &r
            && e.kind() == io::ErrorKind::TimedOut
        {
            return self.stalled("TCP_USER_TIMEOUT");
        }
        // The kernel ends a stalled connection for both tasks at once: the writer's reason,
        // if it has one, is the real one.
        let end = tokio::time::timeout(READ_END_GRACE, writer.ended()).await;
        match (end, r) {
            (Ok(WriterEnd::Stalled(by)), _) => self.stalled(by),
            (_, Ok(())) => "closed by client".to_owned(),
            (_, Err(e)) => format!("read: {e}"),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn admission_limits(settings: &Settings) -> AdmissionLimits {
    AdmissionLimits {
        connections: settings.max_connections,
        handshakes_per_source: settings.max_handshakes_per_source,
        handshakes_per_network: settings.max_handshakes_per_network,
        connections_per_source: settings.max_connections_per_source,
    }
}

/// What a connection holds from accept to link-up.
struct Setup {
    /// End of the TLS handshake and the request head.
    deadline: tokio::time::Instant,
    /// One of `limits.max_tls_handshakes`.
    permit: tokio::sync::OwnedSemaphorePermit,
    /// The set-up's place among the slot holders: it may be cut for a newcomer until
    /// link-up.
    ticket: Ticket,
    /// Its place in the connection counts.
    slot: Slot,
}

/// Logs a connection task that panicked; its guards ([`Slot`], [`Lease`], [`Writer`], the
/// queue) have given back what it held while unwinding.
fn log_panic(r: Result<(), tokio::task::JoinError>) {
    if let Err(e) = r
        && e.is_panic()
    {
        error!(error = %e, "IP-HTTPS connection task panicked; its slot and /64 are freed");
    }
}

/// One link's reading side: its connection (the reader's alone: the writer has the egress
/// filter), its partial packet and what its packets need on their way.
struct Link {
    conn: Connection,
    queue: Arc<SendQueue>,
    prefix: Ipv6Addr,
    /// An incomplete packet from the last read (none while the link is idle).
    partial: Vec<u8>,
    /// The end of the stream (`Ok`) or the error a read without waiting came upon.
    read_end: Option<io::Result<()>>,
    deframer: Deframer,
    reply: [u8; MAX_REPLY_LEN],
}

/// Sends a refusal and closes, within [`ANSWER_GRACE`]: a client that does not read keeps
/// nothing (its handshake slot included) by not reading it.
async fn answer_and_close(wr: &mut WriteHalf<Tls>, answer: &[u8]) {
    let _ = tokio::time::timeout(ANSWER_GRACE, async {
        let _ = wr.write_all(answer).await;
        let _ = wr.shutdown().await;
    })
    .await;
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
