//! The corporate link of a worker: one queue of the multi-queue TUN device, or in the no-root
//! lab a connected UDP socket. The UDP workers, the IP-HTTPS threads and the verdict executor
//! all write into it; it depends on nothing of theirs.

use super::gro::NO_OFFLOAD_HDR;
use crate::sys;
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};

/// The corporate side of a worker: a TUN queue, or (in the no-root lab) a connected UDP
/// socket that carries raw IPv6 packets to an in-process corporate network.
pub enum CorpLink {
    /// One queue of the multi-queue TUN device.
    Tun(super::TunQueue),
    /// A connected datagram socket, one IPv6 packet per datagram.
    Socket(UdpSocket),
}

impl std::fmt::Debug for CorpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorpLink::Tun(t) => write!(f, "Tun(fd {})", t.as_raw_fd()),
            CorpLink::Socket(s) => write!(f, "Socket({:?})", s.local_addr()),
        }
    }
}

impl CorpLink {
    /// Writes one IPv6 packet (a TUN write or a datagram); safe from any thread. On an
    /// offloading TUN the packet goes behind a "no offload" virtio-net header.
    pub fn write(&self, packet: &[u8]) -> io::Result<usize> {
        if self.offload() {
            sys::writev2(self.fd(), &NO_OFFLOAD_HDR, packet)
        } else {
            sys::write(self.fd(), packet)
        }
    }

    /// Writes `packets` in order. On an offloading TUN each flow's consecutive TCP segments
    /// go as one super-packet, straight from the callers' buffers ([`super::gro`]).
    pub fn write_packets(&self, packets: &[&[u8]]) -> super::gro::Written {
        if self.offload() {
            return super::gro::write_coalesced(self.fd(), packets);
        }
        let mut w = super::gro::Written::default();
        for p in packets {
            match self.write(p) {
                Ok(_) => w.ok += 1,
                Err(_) => w.failed += 1,
            }
        }
        w
    }

    /// True for a TUN (always opened with virtio-net headers: TSO/GRO offload).
    pub fn offload(&self) -> bool {
        matches!(self, CorpLink::Tun(_))
    }

    pub(crate) fn fd(&self) -> RawFd {
        match self {
            CorpLink::Tun(t) => t.as_raw_fd(),
            CorpLink::Socket(s) => s.as_raw_fd(),
        }
    }
}
