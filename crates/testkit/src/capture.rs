//! A packet capture inside a test's network namespace: every IPv4 packet that reaches the
//! namespace's interfaces, whatever its port or protocol, as a bound socket would not see it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use anyhow::{Context, Result};

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
            .run_in(|| {
                let proto = (libc::ETH_P_IP as u16).to_be();
                // SAFETY: plain socket(2); the result is checked before it is owned.
                let fd = unsafe {
                    libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, libc::c_int::from(proto))
                };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: fd is a fresh descriptor that nothing else owns.
                Ok(unsafe { OwnedFd::from_raw_fd(fd) })
            })?
            .with_context(|| format!("AF_PACKET socket in {}", ns.name()))?;
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: libc::suseconds_t::from(timeout.subsec_micros()),
        };
        // SAFETY: tv is a live timeval and we pass its size.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error()).context("SO_RCVTIMEO on the capture");
        }
        Ok(Ipv4Capture { fd })
    }

    /// The next incoming IPv4 packet, whole, into `buf`; `None` when none came in time.
    /// Packets the namespace sends itself are skipped.
    pub fn next<'b>(&self, buf: &'b mut [u8]) -> io::Result<Option<&'b [u8]>> {
        loop {
            // SAFETY: an all-zero sockaddr_ll is valid; recvfrom writes at most its size.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: buf and from are live and their sizes are passed.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            return Ok(buf.get(..n as usize));
        }
    }
}
