//! `AF_PACKET` sockets: capture sockets, for tests that watch what reaches a namespace's
//! interfaces, and send-only ones that write whole frames (the GRE outer path).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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

/// Opens a send-only `AF_PACKET` socket (`SOCK_RAW`, protocol 0: the kernel queues it no
/// received packet) bound to interface `ifindex`, for writing whole frames with
/// [`send_frames`]. With `bypass_qdisc`, PACKET_QDISC_BYPASS is asked for (frames go straight
/// to the driver; refused silently by kernels without it). Needs CAP_NET_RAW.
pub fn open_tx(ifindex: u32, bypass_qdisc: bool) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) with integer arguments; the result is checked before it is owned.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut addr = sockaddr_ll(ifindex, 0);
    addr.sll_protocol = 0;
    // SAFETY: addr is a live sockaddr_ll and its size is passed; the kernel only reads it.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if bypass_qdisc {
        let one: libc::c_int = 1;
        // SAFETY: `one` is a live c_int for the call and its size is passed; the kernel only
        // reads it.
        let _ = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_QDISC_BYPASS,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
    Ok(fd)
}

fn sockaddr_ll(ifindex: u32, ethertype: u16) -> libc::sockaddr_ll {
    // SAFETY: an all-zero sockaddr_ll is a valid value.
    let mut a: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    a.sll_family = libc::AF_PACKET as libc::c_ushort;
    a.sll_protocol = ethertype.to_be();
    a.sll_ifindex = i32::try_from(ifindex).unwrap_or(0);
    a
}

/// Frames per `sendmmsg` call of [`send_frames`].
const FRAMES: usize = 64;

/// Writes `n` whole frames to interface `ifindex` through the packet socket `fd` (from
/// [`open_tx`]) with as few `sendmmsg` calls as possible; `frame(i)` gives frame `i`'s bytes
/// (link header included) and its EtherType. A frame the kernel refuses is skipped and
/// reported with `failed(i, error)`; a full buffer (`EAGAIN`, `ENOBUFS`) fails every frame
/// behind it at once. Returns how many were sent.
pub fn send_frames<'a>(
    fd: RawFd,
    ifindex: u32,
    n: usize,
    frame: impl Fn(usize) -> (&'a [u8], u16),
    mut failed: impl FnMut(usize, &io::Error),
) -> usize {
    let mut next = 0;
    let mut sent = 0;
    while next < n {
        let count = (n - next).min(FRAMES);
        let mut addrs = [sockaddr_ll(ifindex, 0); FRAMES];
        let mut iovs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; FRAMES];
        // SAFETY: a zeroed mmsghdr (null pointers, zero lengths) is a valid empty value.
        let mut hdrs: [libc::mmsghdr; FRAMES] = unsafe { std::mem::zeroed() };
        for i in 0..count {
            let (data, ethertype) = frame(next + i);
            addrs[i].sll_protocol = ethertype.to_be();
            iovs[i] = libc::iovec {
                iov_base: data.as_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            };
            hdrs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_ll).cast();
            hdrs[i].msg_hdr.msg_namelen =
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the headers point at live arrays (each address a whole sockaddr_ll, each
        // iovec one borrowed slice the caller keeps alive for 'a); the kernel only reads them,
        // and `count` does not exceed the arrays' length.
        let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), count as libc::c_uint, 0) };
        if r > 0 {
            sent += r as usize;
            next += r as usize;
            continue;
        }
        let e = if r == 0 {
            io::Error::from(io::ErrorKind::WriteZero)
        } else {
            io::Error::last_os_error()
        };
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock | io::ErrorKind::WriteZero => {
                (next..n).for_each(|i| failed(i, &e));
                break;
            }
            _ if e.raw_os_error() == Some(libc::ENOBUFS) => {
                (next..n).for_each(|i| failed(i, &e));
                break;
            }
            _ => {
                failed(next, &e);
                next += 1;
            }
        }
    }
    sent
}
