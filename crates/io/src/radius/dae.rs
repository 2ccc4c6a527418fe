//! The RADIUS Dynamic Authorization listener (`[accounting.dae]`, RFC 5176): a thread of its
//! own receives Disconnect-Requests and CoA-Requests on one UDP socket, has
//! [`gate64_accounting::dae::Dae`] verify them, asks the daemon's [`Handler`] to act on those
//! that pass and sends the ACK or NAK. Nothing here runs on the IKE driver's task: the
//! handler hands the change to the driver and waits for it on this thread.
//!
//! Every datagram is counted once, by code and result ([`DaeStats`]); a dropped one gets no
//! answer.

use gate64_accounting::dae::{self, Dae, ErrorCause, Kind, Request};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often the thread looks whether it should stop.
const POLL: Duration = Duration::from_millis(500);

/// The `code` labels, in the order of [`DaeStats`]' rows.
pub const CODES: [&str; 3] = ["disconnect", "coa", "other"];

/// What the daemon does with a request that verified: `None` when it did everything the
/// request asks (ACK), else the NAK's Error-Cause. `source` is who sent it.
pub type Handler = Box<dyn FnMut(&Request, IpAddr) -> Option<ErrorCause> + Send>;

/// The listener's counters: requests by code and result.
#[derive(Debug)]
pub struct DaeStats {
    counts: [[AtomicU64; dae::RESULTS.len()]; CODES.len()],
}

impl DaeStats {
    fn new() -> DaeStats {
        DaeStats {
            counts: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    fn count(&self, kind: Option<Kind>, result: &str) {
        let row = match kind {
            Some(Kind::Disconnect) => 0,
            Some(Kind::Coa) => 1,
            None => 2,
        };
        if let Some(col) = dae::RESULTS.iter().position(|r| *r == result) {
            self.counts[row][col].fetch_add(1, Relaxed);
        }
    }

    /// Every `(code, result, requests)`.
    pub fn read(&self) -> Vec<(&'static str, &'static str, u64)> {
        let mut out = Vec::with_capacity(CODES.len() * dae::RESULTS.len());
        for (row, code) in CODES.iter().enumerate() {
            for (col, result) in dae::RESULTS.iter().enumerate() {
                out.push((*code, *result, self.counts[row][col].load(Relaxed)));
            }
        }
        out
    }

    /// Requests of `code` with `result` so far.
    pub fn get(&self, code: &str, result: &str) -> u64 {
        self.read()
            .into_iter()
            .find(|(c, r, _)| *c == code && *r == result)
            .map_or(0, |(_, _, n)| n)
    }
}

/// The running listener; it stops when dropped.
#[derive(Debug)]
pub struct DaeListener {
    stats: Arc<DaeStats>,
    stop: Arc<AtomicBool>,
    local: SocketAddr,
}

impl DaeListener {
    /// Its counters.
    pub fn stats(&self) -> Arc<DaeStats> {
        Arc::clone(&self.stats)
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for DaeListener {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

/// Binds `listen` and starts the listener's thread.
pub fn start(listen: SocketAddr, core: Dae, handler: Handler) -> io::Result<DaeListener> {
    let socket = UdpSocket::bind(listen)?;
    socket.set_read_timeout(Some(POLL))?;
    let local = socket.local_addr()?;
    let stats = Arc::new(DaeStats::new());
    let stop = Arc::new(AtomicBool::new(false));
    let (thread_stats, thread_stop) = (Arc::clone(&stats), Arc::clone(&stop));
    std::thread::Builder::new()
        .name("radius-dae".into())
        .spawn(move || run(&socket, core, handler, &thread_stats, &thread_stop))?;
    Ok(DaeListener { stats, stop, local })
}

fn run(
    socket: &UdpSocket,
    mut core: Dae,
    mut handler: Handler,
    stats: &DaeStats,
    stop: &AtomicBool,
) {
    let mut buf = vec![0u8; dae::MAX_PACKET + 1];
    let mut out = Vec::with_capacity(dae::MAX_PACKET);
    while !stop.load(Relaxed) {
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "radius dae: receive failed");
                continue;
            }
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let request = match core.handle(now, from.ip(), &buf[..n]) {
            Ok(request) => request,
            Err((kind, dropped)) => {
                // Debug only: anyone can send these, the counter says how many.
                tracing::debug!(client = %from, reason = dropped.label(), "radius dae: request dropped unanswered");
                stats.count(kind, dropped.label());
                continue;
            }
        };
        let cause = match dae::precheck(&request) {
            Some(cause) => {
                tracing::info!(client = %from, request = request.kind.label(), error_cause = cause as u32, unsupported = ?request.unsupported, "radius dae: request refused");
                Some(cause)
            }
            None => handler(&request, from.ip()),
        };
        let Some(secret) = core.client(request.client).map(|c| c.secret.clone()) else {
            continue;
        };
        dae::encode_response(&request, cause, &secret, &mut out);
        // Counted before the answer leaves, so whoever got the answer sees the count.
        stats.count(Some(request.kind), cause.map_or("ack", ErrorCause::label));
        if let Err(e) = socket.send_to(&out, from) {
            tracing::debug!(client = %from, error = %e, "radius dae: answer not sent");
        }
    }
}

#[cfg(test)]
mod tests;
