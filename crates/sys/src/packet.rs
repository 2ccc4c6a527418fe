//! `AF_PACKET` capture sockets, for tests that watch what reaches a namespace's interfaces.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Opens an `AF_PACKET` socket (`SOCK_DGRAM`, `ETH_P_IP`) in the calling thread's network
/// namespace: it reads IPv4 packets without their link header, whatever their port or
/// protocol. Needs CAP_NET_RAW.
pub fn open_ipv4() -> io::Result<OwnedFd> {
    let proto = (libc::ETH_P_IP as u16).to_be();
    // SAFETY: plain socket(2) with integer arguments; the result is checked before it is owned.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, libc::c_int::from(proto)) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One packet read by [`recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Captured {
    /// Bytes written at the start of the buffer.
    pub len: usize,
    /// The packet was sent by this namespace (`PACKET_OUTGOING`), not received.
    pub outgoing: bool,
}

/// Reads one packet from the capture socket `fd` into `buf` (`recvfrom`), with whether it was
/// outgoing.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<Captured> {
    // SAFETY: an all-zero sockaddr_ll is a valid value.
    let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: buf and from are live and writable for the call and their sizes are passed, so
    // the kernel writes within them.
    let n = unsafe {
        libc::recvfrom(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            0,
            (&mut from as *mut libc::sockaddr_ll).cast(),
            &mut len,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Captured {
        len: (n as usize).min(buf.len()),
        outgoing: from.sll_pkttype == libc::PACKET_OUTGOING,
    })
}
