//! The UDP workers: one thread per core, each a single-threaded event loop over its own
//! SO_REUSEPORT Teredo sockets and its queue of the corporate link ([`worker`]), moving
//! packets through its own sans-IO [`gate64_dataplane::Worker`]. The sockets take datagrams
//! the kernel coalesced (UDP GRO), cut in place by [`gro`].

pub mod gro;
pub mod worker;

use crate::sys;
use crate::tun::CorpLink;
use gate64_dataplane::{Shared, Stats, Worker};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
pub use worker::WorkerIo;

/// Socket buffer size asked for on Teredo sockets; the kernel caps it at `rmem_max`.
const SOCKET_BUFFER: usize = 4 << 20;

/// Binds one Teredo UDP socket on `addr` with SO_REUSEPORT, so that every worker owns one and
/// the kernel spreads clients over them by flow hash.
pub fn bind_teredo_socket(addr: SocketAddrV4) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    // Best effort: a smaller buffer only means earlier drops under bursts. With CAP_NET_ADMIN
    // (which the daemon has for the TUN) the FORCE variants go past net.core.rmem_max.
    if sys::set_buffer_force(s.as_raw_fd(), SOCKET_BUFFER).is_err() {
        let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    }
    sys::set_pmtudisc_dont(s.as_raw_fd())?;
    // Best effort: without UDP GRO every datagram arrives alone, as the workers also handle.
    let _ = sys::set_udp_gro(s.as_raw_fd());
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// Clones of `sockets` (the same kernel sockets) for another thread to send from: the
/// IP-HTTPS driver sends its datagrams to Teredo clients from the Teredo server addresses.
pub fn clone_sockets(sockets: &[(Ipv4Addr, UdpSocket)]) -> io::Result<Vec<(Ipv4Addr, UdpSocket)>> {
    sockets
        .iter()
        .map(|(a, s)| Ok((*a, s.try_clone()?)))
        .collect()
}

/// The running workers.
#[derive(Debug)]
pub struct Workers {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<io::Result<()>>>,
    stats: Vec<Arc<Stats>>,
}

impl Workers {
    /// Starts one thread per `WorkerIo`, each with its own dataplane worker over `shared`.
    pub fn spawn(shared: &Arc<Shared>, ios: Vec<WorkerIo>) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        let mut stats = Vec::new();
        for io in ios {
            let s = Arc::new(Stats::default());
            stats.push(Arc::clone(&s));
            let dp = Worker::new(Arc::clone(shared), s);
            let stop = Arc::clone(&stop);
            let name = format!("gate64-w{}", io.index);
            handles.push(
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || worker::run(io, dp, stop))?,
            );
        }
        Ok(Workers {
            stop,
            handles,
            stats,
        })
    }

    /// Per-worker counters, for the exporter.
    pub fn stats(&self) -> Vec<Arc<Stats>> {
        self.stats.clone()
    }

    /// True while every worker thread is running.
    pub fn all_running(&self) -> bool {
        self.handles.iter().all(|h| !h.is_finished())
    }

    /// Stops the workers and waits for them; returns the first error any of them hit.
    pub fn stop(self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let mut result = Ok(());
        for h in self.handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("worker thread panicked")));
            if result.is_ok() {
                result = r;
            }
        }
        result
    }
}

/// Builds the sockets of `count` workers for the given Teredo addresses and port, pairing each
/// with a corporate link from `corp`.
pub fn worker_ios(
    addresses: &[Ipv4Addr],
    port: u16,
    corp: Vec<Arc<CorpLink>>,
    corp_mtu: usize,
) -> io::Result<Vec<WorkerIo>> {
    let count = corp.len();
    corp.into_iter()
        .enumerate()
        .map(|(index, corp)| {
            let sockets = addresses
                .iter()
                .map(|a| Ok((*a, bind_teredo_socket(SocketAddrV4::new(*a, port))?)))
                .collect::<io::Result<Vec<_>>>()?;
            Ok(WorkerIo {
                index,
                count,
                sockets,
                corp,
                corp_mtu,
                native: Vec::new(),
            })
        })
        .collect()
}
