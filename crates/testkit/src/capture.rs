//! A packet capture inside a test's network namespace: every IPv4 packet that reaches the
//! namespace's interfaces, whatever its port or protocol, as a bound socket would not see it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use anyhow::{Context, Result};
use gate64_sys::{packet, socket};

use crate::Netns;

/// An `AF_PACKET` socket (`SOCK_DGRAM`, `ETH_P_IP`) opened in a namespace: reads IPv4 packets
/// without their link header, incoming ones only.
pub struct Ipv4Capture {
    fd: OwnedFd,
}

impl Ipv4Capture {
    /// Opens the capture in `ns`; each read waits at most `timeout`.
    pub fn open(ns: &Netns, timeout: Duration) -> Result<Ipv4Capture> {
        let fd = ns
            .run_in(packet::open_ipv4)?
            .with_context(|| format!("AF_PACKET socket in {}", ns.name()))?;
        socket::set_recv_timeout(fd.as_raw_fd(), timeout).context("SO_RCVTIMEO on the capture")?;
        Ok(Ipv4Capture { fd })
    }

    /// The next incoming IPv4 packet, whole, into `buf`; `None` when none came in time.
    /// Packets the namespace sends itself are skipped.
    pub fn next<'b>(&self, buf: &'b mut [u8]) -> io::Result<Option<&'b [u8]>> {
        loop {
            let got = match packet::recv(self.fd.as_raw_fd(), buf) {
                Ok(got) => got,
                Err(e) => {
                    return match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Ok(None),
                        io::ErrorKind::Interrupted => continue,
                        _ => Err(e),
                    };
                }
            };
            if got.outgoing {
                continue;
            }
            return Ok(buf.get(..got.len));
        }
    }
}
