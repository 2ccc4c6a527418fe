//! Plain descriptor I/O (`read`, `write`, `writev`) and `epoll`, for the TUN queues and the
//! workers' event loops.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::{cvt, cvt_size};

/// An epoll instance.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    /// Creates one (close-on-exec).
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; on success we own the returned descriptor.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fd is a fresh, owned descriptor.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for readability (level-triggered), tagging events with `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: ev is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    /// Waits up to `timeout_ms`; returns the tokens of ready descriptors in `out`.
    pub fn wait(&self, out: &mut Vec<u64>, timeout_ms: i32) -> io::Result<()> {
        // SAFETY: zeroed epoll_event values are valid.
        let mut evs: [libc::epoll_event; 8] = unsafe { std::mem::zeroed() };
        // SAFETY: evs is a live array of the length we pass.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 8, timeout_ms) };
        out.clear();
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        out.extend(evs[..n as usize].iter().map(|e| e.u64));
        Ok(())
    }
}

/// `read(2)` without blocking semantics of its own (the fd is non-blocking).
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is a live, writable buffer of the given length.
    let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `writev(2)` of two pieces: a header and a packet, in one call.
pub fn writev2(fd: RawFd, head: &[u8], body: &[u8]) -> io::Result<usize> {
    let iov = [
        libc::iovec {
            iov_base: head.as_ptr() as *mut libc::c_void,
            iov_len: head.len(),
        },
        libc::iovec {
            iov_base: body.as_ptr() as *mut libc::c_void,
            iov_len: body.len(),
        },
    ];
    // SAFETY: both iovecs point at live buffers the kernel only reads.
    let r = unsafe { libc::writev(fd, iov.as_ptr(), 2) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `write(2)`.
pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is a live buffer of the given length; the kernel only reads it.
    let r = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `writev(2)` of `parts` in one call (a TUN write of a virtio-net header and payloads).
pub fn writev(fd: RawFd, parts: &[IoSlice<'_>]) -> io::Result<usize> {
    let count = libc::c_int::try_from(parts.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many parts for writev"))?;
    // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix (std guarantees it); every
    // slice is borrowed for the call and the kernel only reads from them.
    cvt_size(unsafe { libc::writev(fd, parts.as_ptr().cast::<libc::iovec>(), count) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn writes_and_reads_through_a_socket_pair_with_epoll() {
        let (a, b) = UnixDatagram::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let epoll = Epoll::new().unwrap();
        epoll.add(b.as_raw_fd(), 7).unwrap();
        let mut ready = Vec::new();
        epoll.wait(&mut ready, 0).unwrap();
        assert!(ready.is_empty());
        let mut buf = [0u8; 64];
        assert_eq!(
            read(b.as_raw_fd(), &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(write(a.as_raw_fd(), b"one").unwrap(), 3);
        epoll.wait(&mut ready, 5000).unwrap();
        assert_eq!(ready, [7]);
        assert_eq!(read(b.as_raw_fd(), &mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"one");
        assert_eq!(writev2(a.as_raw_fd(), b"he", b"ad").unwrap(), 4);
        assert_eq!(read(b.as_raw_fd(), &mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"head");
        let parts = [IoSlice::new(b"a"), IoSlice::new(b""), IoSlice::new(b"bc")];
        assert_eq!(writev(a.as_raw_fd(), &parts).unwrap(), 3);
        assert_eq!(read(b.as_raw_fd(), &mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"abc");
    }
}
