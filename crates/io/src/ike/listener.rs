//! The sockets the IKE driver reads, and the wait for the next one with a datagram.

use std::io;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::net::UdpSocket;

use crate::sys;

/// One socket the driver reads: on the endpoint or an `[ipsec] listen` address (`native`),
/// port 500 or 4500 (`nat_t`).
pub(super) struct Listener {
    pub(super) socket: UdpSocket,
    pub(super) local: SocketAddr,
    pub(super) nat_t: bool,
    pub(super) native: bool,
    /// The socket's drop count when last read ([`sys::socket_drops`]).
    drops: AtomicU32,
}

impl Listener {
    pub(super) fn new(socket: &StdUdpSocket, nat_t: bool, native: bool) -> io::Result<Self> {
        let socket = UdpSocket::from_std(socket.try_clone()?)?;
        let local = socket.local_addr()?;
        let drops = sys::socket_drops(socket.as_raw_fd()).unwrap_or(0);
        Ok(Listener {
            socket,
            local,
            nat_t,
            native,
            drops: drops.into(),
        })
    }

    /// Datagrams the kernel dropped on the socket (receive buffer full) since the last call;
    /// 0 when the count cannot be read.
    pub(super) fn new_drops(&self) -> u32 {
        let Ok(total) = sys::socket_drops(self.socket.as_raw_fd()) else {
            return 0;
        };
        total.wrapping_sub(self.drops.swap(total, Ordering::Relaxed))
    }
}

/// A listener with a datagram to read (its index), or the error waiting on it; looked at
/// from `turn` on, so a socket that is always readable (a flood) does not starve the others.
pub(super) async fn readable(listeners: &[Listener], turn: usize) -> (usize, io::Result<()>) {
    std::future::poll_fn(|cx| {
        for k in 0..listeners.len() {
            let i = (turn + k) % listeners.len();
            if let std::task::Poll::Ready(r) = listeners[i].socket.poll_recv_ready(cx) {
                return std::task::Poll::Ready((i, r));
            }
        }
        std::task::Poll::Pending
    })
    .await
}
