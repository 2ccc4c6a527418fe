//! Asking the upstream resolvers: UDP from a random port with a random ID, TCP when the
//! answer comes back truncated, the next upstream on timeout, network error or REFUSED.
//!
//! Upstream UDP sockets are kept per thread and reused for up to 64 answered queries each, then
//! closed, so source ports keep changing without a socket per query.
//!
//! Failover is sticky: the upstream that answered last is tried first, so a dead primary costs
//! one timeout, not one per query. An answer is accepted only from the address asked (the
//! socket is connected), with the query's ID and question.

use std::cell::RefCell;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gate64_dns64::synth::{Ask, UpstreamError};
use gate64_dns64::upstream::{encode, matches};
use hickory_proto::op::{Message, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tracing::debug;

use crate::sys;

/// Largest answer read over UDP.
const UDP_BUFFER: usize = 4096;

/// The configured upstream resolvers.
#[derive(Debug)]
pub struct Upstreams {
    servers: Vec<SocketAddr>,
    timeout: Duration,
    preferred: AtomicUsize,
}

/// How one attempt at one upstream ended.
enum Attempt {
    Answer(Message),
    /// Try the next upstream (timeout, refusal, network error).
    Next,
}

impl Upstreams {
    /// Upstreams tried in this order (starting from the last one that answered); `timeout`
    /// bounds each attempt (the UDP query, and the TCP retry after truncation).
    pub fn new(servers: Vec<SocketAddr>, timeout: Duration) -> Upstreams {
        Upstreams {
            servers,
            timeout,
            preferred: AtomicUsize::new(0),
        }
    }

    /// The upstream addresses.
    pub fn servers(&self) -> &[SocketAddr] {
        &self.servers
    }

    /// Asks `ask` of the upstreams until one answers.
    pub async fn ask(&self, ask: &Ask) -> Result<Message, UpstreamError> {
        let n = self.servers.len();
        let first = self.preferred.load(Ordering::Relaxed);
        let mut refused = None;
        for i in 0..n {
            let idx = (first + i) % n;
            let server = self.servers[idx];
            let id = random_id();
            let wire = match encode(ask, id) {
                Ok(w) => w,
                Err(e) => {
                    debug!(error = %e, "cannot encode the upstream query");
                    return Err(UpstreamError::NoAnswer);
                }
            };
            match self.attempt(server, &wire, id, ask).await {
                Attempt::Answer(m) if m.metadata.response_code == ResponseCode::Refused => {
                    crate::log_limited!(debug, %server, "upstream refused; trying the next");
                    refused = Some(m);
                }
                Attempt::Answer(m) => {
                    if idx != first {
                        self.preferred.store(idx, Ordering::Relaxed);
                    }
                    return Ok(m);
                }
                Attempt::Next => {}
            }
        }
        // Every upstream refused: that is an error for the client (SERVFAIL), not a refusal
        // by gate64.
        let _ = refused;
        Err(UpstreamError::NoAnswer)
    }

    async fn attempt(&self, server: SocketAddr, wire: &[u8], id: u16, ask: &Ask) -> Attempt {
        match tokio::time::timeout(self.timeout, udp(server, wire, id, ask)).await {
            Ok(Ok(m)) if !m.metadata.truncation => Attempt::Answer(m),
            Ok(Ok(_truncated)) => {
                match tokio::time::timeout(self.timeout, tcp(server, wire, id, ask)).await {
                    Ok(Ok(m)) => Attempt::Answer(m),
                    Ok(Err(e)) => {
                        crate::log_limited!(debug, %server, error = %e, "upstream TCP failed");
                        Attempt::Next
                    }
                    Err(_) => {
                        crate::log_limited!(debug, %server, "upstream TCP timed out");
                        Attempt::Next
                    }
                }
            }
            Ok(Err(e)) => {
                crate::log_limited!(debug, %server, error = %e, "upstream UDP failed");
                Attempt::Next
            }
            Err(_) => {
                crate::log_limited!(debug, %server, "upstream timed out");
                Attempt::Next
            }
        }
    }
}

async fn udp(server: SocketAddr, wire: &[u8], id: u16, ask: &Ask) -> std::io::Result<Message> {
    let (sock, uses) = match take_idle(server) {
        Some(s) => s,
        None => {
            let local: SocketAddr = match server {
                SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
                SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
            };
            // The kernel picks a random ephemeral port (RFC 5452 §9.1 with the random ID).
            let sock = UdpSocket::bind(local).await?;
            sock.connect(server).await?;
            (sock, 0)
        }
    };
    sock.send(wire).await?;
    let mut buf = vec![0u8; UDP_BUFFER];
    loop {
        let n = sock.recv(&mut buf).await?;
        // Anything else (garbage, another ID, a late answer to an earlier query on this
        // socket) is ignored; the timeout bounds the wait.
        if let Ok(m) = Message::from_vec(&buf[..n])
            && matches(&m, id, ask)
        {
            // Only a socket whose query was answered goes back; one that timed out is
            // dropped with the future (closed), so late answers die with it.
            give_idle(server, sock, uses + 1);
            return Ok(m);
        }
    }
}

/// Queries one upstream socket carries before it is closed and a new port is drawn.
const SOCKET_USES: u32 = 64;
/// Idle upstream sockets kept per thread.
const IDLE_SOCKETS: usize = 256;

thread_local! {
    /// Idle connected upstream sockets of this thread. Opening, registering and closing a
    /// socket per query cost about a quarter of the CPU of a cache miss (measured with
    /// `perf`); reusing each for [`SOCKET_USES`] queries keeps the source ports changing
    /// while saving most of that. Thread-local because each UDP thread runs its own runtime,
    /// whose sockets belong to it.
    static IDLE: RefCell<Vec<(SocketAddr, UdpSocket, u32)>> = const { RefCell::new(Vec::new()) };
}

fn take_idle(server: SocketAddr) -> Option<(UdpSocket, u32)> {
    IDLE.with_borrow_mut(|idle| {
        let i = idle.iter().rposition(|(s, _, _)| *s == server)?;
        let (_, sock, uses) = idle.swap_remove(i);
        Some((sock, uses))
    })
}

fn give_idle(server: SocketAddr, sock: UdpSocket, uses: u32) {
    if uses >= SOCKET_USES {
        return;
    }
    IDLE.with_borrow_mut(|idle| {
        if idle.len() < IDLE_SOCKETS {
            idle.push((server, sock, uses));
        }
    });
}

async fn tcp(server: SocketAddr, wire: &[u8], id: u16, ask: &Ask) -> std::io::Result<Message> {
    let mut s = TcpStream::connect(server).await?;
    s.set_nodelay(true)?;
    let len = u16::try_from(wire.len()).map_err(std::io::Error::other)?;
    let mut framed = Vec::with_capacity(2 + wire.len());
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(wire);
    s.write_all(&framed).await?;
    loop {
        let n = usize::from(s.read_u16().await?);
        let mut buf = vec![0u8; n];
        s.read_exact(&mut buf).await?;
        match Message::from_vec(&buf) {
            Ok(m) if matches(&m, id, ask) => return Ok(m),
            _ => continue,
        }
    }
}

/// A query ID from the kernel's random source (RFC 5452 §9.2).
fn random_id() -> u16 {
    let mut b = [0u8; 2];
    if sys::getrandom(&mut b).is_ok() {
        return u16::from_ne_bytes(b);
    }
    // getrandom cannot fail for 2 bytes after boot; fall back to the clock just in case.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (t ^ (t >> 16)) as u16
}
