//! The RADIUS accounting sender: Accounting-Requests from the session tracker go through a
//! bounded queue to a thread of their own, which sends them to the first reachable server of
//! `[[accounting.radius]]`, retransmits, fails over to the next server and counts what it
//! could not deliver. Nothing here can block the IKE driver or a worker: a full queue is
//! counted (`queue_full`) and the request dropped.
//!
//! Up to [`WINDOW`] requests are in flight at once, each under its own identifier; one that
//! gets no valid Accounting-Response within [`Timing::retry_after`] is sent again (the same
//! octets, RFC 5080 §2.2.1), and after [`Timing::tries`] sends the server counts as down: the
//! request and those after it go to the next server (under a new identifier and
//! Acct-Delay-Time). New requests go back to the first server [`Timing::hold_down`] after it
//! failed. A request every server failed is counted as `timeout`.

pub mod dae;

use gate64_accounting::radius::{self, Nas, Request};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

/// Requests queued for the sender before new ones are dropped (and counted).
const QUEUE: usize = 16_384;
/// Requests in flight at once.
pub const WINDOW: usize = 32;

/// The sender's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Time to wait for an Accounting-Response before sending again.
    pub retry_after: Duration,
    /// Sends of one request to one server before that server counts as down.
    pub tries: u32,
    /// How long a failed server is passed over for new requests.
    pub hold_down: Duration,
}

impl Default for Timing {
    /// 2 s, 3 sends, 30 s: a request waits at most 6 s per server.
    fn default() -> Self {
        Timing {
            retry_after: Duration::from_secs(2),
            tries: 3,
            hold_down: Duration::from_secs(30),
        }
    }
}

/// One accounting server.
pub struct Server {
    /// Where (`ADDR:PORT`).
    pub addr: SocketAddr,
    /// The shared secret (read from `secret_file`; never logged).
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// What became of the requests (`gate64_radius_accounting_total{result}` and
/// `gate64_radius_retransmits_total`).
#[derive(Debug, Default)]
pub struct RadiusStats {
    acked: AtomicU64,
    timeout: AtomicU64,
    queue_full: AtomicU64,
    retransmits: AtomicU64,
    failovers: AtomicU64,
    /// Queued or in flight: not yet acknowledged or given up.
    pending: AtomicU64,
}

impl RadiusStats {
    /// Requests a server acknowledged.
    pub fn acked(&self) -> u64 {
        self.acked.load(Relaxed)
    }
    /// Requests no server acknowledged.
    pub fn timeout(&self) -> u64 {
        self.timeout.load(Relaxed)
    }
    /// Requests dropped because the queue was full.
    pub fn queue_full(&self) -> u64 {
        self.queue_full.load(Relaxed)
    }
    /// Requests sent again.
    pub fn retransmits(&self) -> u64 {
        self.retransmits.load(Relaxed)
    }
    /// Requests queued or in flight.
    pub fn pending(&self) -> u64 {
        self.pending.load(Relaxed)
    }
    /// Times the sender moved to another server.
    pub fn failovers(&self) -> u64 {
        self.failovers.load(Relaxed)
    }
}

/// Where the session tracker's requests go.
#[derive(Debug, Clone)]
pub struct RadiusSender {
    tx: SyncSender<(Instant, Request)>,
    stats: Arc<RadiusStats>,
}

impl RadiusSender {
    /// Queues `request`; counts it as `queue_full` when the sender is behind.
    pub fn send(&self, request: Request) {
        self.stats.pending.fetch_add(1, Relaxed);
        match self.tx.try_send((Instant::now(), request)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.stats.pending.fetch_sub(1, Relaxed);
                if self
                    .stats
                    .queue_full
                    .fetch_add(1, Relaxed)
                    .is_multiple_of(1000)
                {
                    tracing::warn!("RADIUS accounting is behind; requests are being dropped");
                }
            }
        }
    }

    /// The counters.
    pub fn stats(&self) -> Arc<RadiusStats> {
        Arc::clone(&self.stats)
    }

    /// Waits until every request queued so far is acknowledged or given up, or `timeout`
    /// passed (the daemon stops: its last Stops should reach the server); false on timeout.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.stats.pending() > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }
}

/// Opens a socket per server and starts the sender thread. `nas_identifier` is sent as
/// NAS-Identifier; the NAS address is the address each socket sends from.
pub fn start(
    servers: Vec<Server>,
    nas_identifier: String,
    timing: Timing,
) -> io::Result<RadiusSender> {
    let mut links = Vec::with_capacity(servers.len());
    for server in servers {
        let any: SocketAddr = match server.addr {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(any)?;
        socket
            .connect(server.addr)
            .map_err(|e| io::Error::new(e.kind(), format!("RADIUS server {}: {e}", server.addr)))?;
        let nas_address = socket.local_addr().ok().map(|a| a.ip());
        links.push(Link {
            socket,
            server,
            nas_address,
            down_since: None,
            next_id: 0,
        });
    }
    let (tx, rx) = mpsc::sync_channel(QUEUE);
    let stats = Arc::new(RadiusStats::default());
    let thread_stats = Arc::clone(&stats);
    std::thread::Builder::new()
        .name("gate64-radius".into())
        .spawn(move || run(links, nas_identifier, timing, &rx, &thread_stats))?;
    Ok(RadiusSender { tx, stats })
}

struct Link {
    socket: UdpSocket,
    server: Server,
    nas_address: Option<IpAddr>,
    down_since: Option<Instant>,
    next_id: u8,
}

struct InFlight {
    request: Request,
    queued: Instant,
    link: usize,
    /// Servers this request has been given up on.
    tried: usize,
    id: u8,
    authenticator: [u8; 16],
    packet: Vec<u8>,
    sent: Instant,
    sends: u32,
}

fn run(
    mut links: Vec<Link>,
    nas_identifier: String,
    timing: Timing,
    rx: &Receiver<(Instant, Request)>,
    stats: &RadiusStats,
) {
    let mut flight: Vec<InFlight> = Vec::with_capacity(WINDOW);
    let mut buf = vec![0u8; radius::MAX_PACKET];
    loop {
        // Take new requests while the window has room; wait for one when idle.
        while flight.len() < WINDOW {
            let next = if flight.is_empty() {
                match rx.recv_timeout(Duration::from_secs(1)) {
                    Ok(r) => Some(r),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            } else {
                rx.try_recv().ok()
            };
            let Some((queued, request)) = next else { break };
            let link = preferred(&mut links, timing.hold_down);
            let mut f = InFlight {
                request,
                queued,
                link,
                tried: 0,
                id: 0,
                authenticator: [0; 16],
                packet: Vec::new(),
                sent: Instant::now(),
                sends: 0,
            };
            if prepare(&mut f, &mut links, &flight, &nas_identifier, stats) {
                transmit(&mut f, &links);
                flight.push(f);
            }
        }
        if flight.is_empty() {
            continue;
        }
        // Wait for answers until the earliest retransmission is due.
        let due = flight
            .iter()
            .map(|f| f.sent + timing.retry_after)
            .min()
            .unwrap_or_else(Instant::now);
        let wait = due
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), Duration::from_millis(100));
        let waiting_on = flight[0].link;
        for (i, link) in links.iter().enumerate() {
            let timeout = (i == waiting_on).then_some(wait);
            receive(link, i, timeout, &mut buf, &mut flight, stats);
        }
        retry(&mut flight, &mut links, &nas_identifier, timing, stats);
    }
}

/// The first server not held down (the first one when all are).
fn preferred(links: &mut [Link], hold_down: Duration) -> usize {
    let now = Instant::now();
    for (i, link) in links.iter_mut().enumerate() {
        match link.down_since {
            Some(t) if now.duration_since(t) < hold_down => continue,
            _ => {
                link.down_since = None;
                return i;
            }
        }
    }
    0
}

/// Encodes `f` for its link under a free identifier; false (and the request dropped) when
/// it does not fit a RADIUS packet.
fn prepare(
    f: &mut InFlight,
    links: &mut [Link],
    flight: &[InFlight],
    nas_identifier: &str,
    stats: &RadiusStats,
) -> bool {
    let link = &mut links[f.link];
    // A free identifier on this link: the window is far smaller than 256.
    let mut id = link.next_id;
    while flight.iter().any(|o| o.link == f.link && o.id == id) {
        id = id.wrapping_add(1);
    }
    link.next_id = id.wrapping_add(1);
    let nas = Nas {
        identifier: nas_identifier,
        address: link.nas_address,
    };
    let delay = u32::try_from(f.queued.elapsed().as_secs()).unwrap_or(u32::MAX);
    match radius::encode_request(
        id,
        &f.request,
        &nas,
        delay,
        &link.server.secret,
        &mut f.packet,
    ) {
        Ok(authenticator) => {
            f.id = id;
            f.authenticator = authenticator;
            f.sends = 0;
            true
        }
        Err(radius::TooLong) => {
            tracing::warn!(session = %f.request.session_id, "RADIUS request too long; not sent");
            stats.pending.fetch_sub(1, Relaxed);
            false
        }
    }
}

fn transmit(f: &mut InFlight, links: &[Link]) {
    if let Err(e) = links[f.link].socket.send(&f.packet) {
        tracing::debug!(server = %links[f.link].server.addr, error = %e, "RADIUS send failed");
    }
    f.sent = Instant::now();
    f.sends += 1;
}

/// Reads the answers waiting on `link` (waiting up to `timeout` for the first when given)
/// and retires the requests they acknowledge.
fn receive(
    link: &Link,
    index: usize,
    timeout: Option<Duration>,
    buf: &mut [u8],
    flight: &mut Vec<InFlight>,
    stats: &RadiusStats,
) {
    let mut first = timeout;
    loop {
        let set = match first.take() {
            Some(t) => link
                .socket
                .set_nonblocking(false)
                .and_then(|()| link.socket.set_read_timeout(Some(t))),
            None => link.socket.set_nonblocking(true),
        };
        if set.is_err() {
            return;
        }
        let n = match link.socket.recv(buf) {
            Ok(n) => n,
            // Timeout, nothing waiting, or an ICMP port unreachable from a server that is
            // not there: the retransmission timer handles all three.
            Err(_) => return,
        };
        let datagram = &buf[..n];
        let Ok(id) = radius::response_identifier(datagram) else {
            continue;
        };
        let Some(pos) = flight.iter().position(|f| f.link == index && f.id == id) else {
            continue;
        };
        if radius::check_response(datagram, &flight[pos].authenticator, &link.server.secret).is_ok()
        {
            flight.swap_remove(pos);
            stats.acked.fetch_add(1, Relaxed);
            stats.pending.fetch_sub(1, Relaxed);
        }
    }
}

/// Sends again what is due; moves what a server failed to the next one, or gives it up.
fn retry(
    flight: &mut Vec<InFlight>,
    links: &mut [Link],
    nas_identifier: &str,
    timing: Timing,
    stats: &RadiusStats,
) {
    let now = Instant::now();
    let mut i = 0;
    while i < flight.len() {
        if now < flight[i].sent + timing.retry_after {
            i += 1;
            continue;
        }
        if flight[i].sends < timing.tries {
            stats.retransmits.fetch_add(1, Relaxed);
            transmit(&mut flight[i], links);
            i += 1;
            continue;
        }
        let failed = flight[i].link;
        if links[failed].down_since.is_none() {
            links[failed].down_since = Some(now);
            tracing::warn!(server = %links[failed].server.addr, "RADIUS server did not answer; trying the next one");
        }
        let mut f = flight.swap_remove(i);
        f.tried += 1;
        if f.tried >= links.len() {
            stats.timeout.fetch_add(1, Relaxed);
            stats.pending.fetch_sub(1, Relaxed);
            continue;
        }
        stats.failovers.fetch_add(1, Relaxed);
        f.link = (failed + 1) % links.len();
        if prepare(&mut f, links, flight, nas_identifier, stats) {
            transmit(&mut f, links);
            flight.push(f);
        }
    }
}

#[cfg(test)]
mod tests;
