//! UDP batches: `recvmmsg`, `sendmmsg` and UDP GSO (`sendmsg` with a `UDP_SEGMENT` control
//! message), for the Teredo workers, the IKE and GRE drivers and the DNS64 server.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

use crate::cvt;

/// Messages per `recvmmsg`/`sendmmsg` call.
pub const BATCH: usize = 32;

fn to_sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn from_sockaddr(s: &libc::sockaddr_in) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
        u16::from_be(s.sin_port),
    )
}

/// One received datagram: where it is in its slot and who sent it.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes received (the datagram starts at the slot's headroom).
    pub len: usize,
    /// Sender.
    pub from: SocketAddrV4,
    /// The kernel cut the datagram because the slot was too small.
    pub truncated: bool,
}

/// Receives up to `slots.len()` datagrams with one `recvmmsg`, each into `slot[headroom..]`.
/// Returns how many arrived; `WouldBlock` when none.
pub fn recv_batch(
    fd: RawFd,
    slots: &mut [Vec<u8>],
    headroom: usize,
    out: &mut [Received; BATCH],
) -> io::Result<usize> {
    let n = slots.len().min(BATCH);
    let mut addrs = [SocketAddrV4::empty(); BATCH];
    let mut iovs = [EMPTY_IOV; BATCH];
    for (iov, slot) in iovs.iter_mut().zip(slots.iter_mut()).take(n) {
        *iov = iovec_of(slot.get_mut(headroom..).unwrap_or_default());
    }
    recvmmsg_into(fd, &mut iovs[..n], &mut addrs, |i, h| {
        out[i] = Received {
            len: h.msg_len as usize,
            from: from_sockaddr(&addrs_at(h)),
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        };
    })
}

/// An `iovec` over nothing, to fill arrays with.
const EMPTY_IOV: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

/// An `iovec` over `buf`.
fn iovec_of(buf: &mut [u8]) -> libc::iovec {
    libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    }
}

/// The source address a `recvmmsg` header's `msg_name` points at.
fn addrs_at<A: Copy>(h: &libc::mmsghdr) -> A {
    // SAFETY: `recvmmsg_into` points `msg_name` at an `A` that outlives the call that hands
    // out `h`, and the kernel wrote at most `size_of::<A>()` bytes there.
    unsafe { *h.msg_hdr.msg_name.cast::<A>() }
}

/// The one `recvmmsg` of this module: receives into `iovs` (one datagram each) with source
/// addresses of type `A` (`sockaddr_in` or `sockaddr_storage`) in `addrs`, then calls
/// `each(i, header)` for every datagram that arrived. Returns how many; `WouldBlock` when none.
fn recvmmsg_into<A>(
    fd: RawFd,
    iovs: &mut [libc::iovec],
    addrs: &mut [A; BATCH],
    mut each: impl FnMut(usize, &libc::mmsghdr),
) -> io::Result<usize> {
    let n = iovs.len().min(BATCH);
    // SAFETY: a zeroed mmsghdr is a valid "empty" value for this C struct.
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for (i, (h, iov)) in hdrs.iter_mut().zip(iovs.iter_mut()).take(n).enumerate() {
        h.msg_hdr.msg_name = (&mut addrs[i] as *mut A).cast();
        h.msg_hdr.msg_namelen = std::mem::size_of::<A>() as libc::socklen_t;
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every header points at live buffers (the iovecs' slots, `iovs`, `addrs`) that
    // outlive the call, and `n` does not exceed the arrays' length.
    let got = cvt(unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    })? as usize;
    for (i, h) in hdrs.iter().enumerate().take(got) {
        each(i, h);
    }
    Ok(got)
}

/// A datagram's destination as `sendmmsg` takes it: an IPv4 socket address (written as a
/// small `sockaddr_in`, the Teredo path) or one of either family (`sockaddr_storage`).
pub trait Destination: Copy {
    /// The C address it is written as.
    type Raw: Copy;
    /// An all-zero address, a valid empty value.
    fn empty() -> Self::Raw;
    /// Writes `self` into `raw`; returns the length to pass with it.
    fn write(self, raw: &mut Self::Raw) -> libc::socklen_t;
}

impl Destination for SocketAddrV4 {
    type Raw = libc::sockaddr_in;
    fn empty() -> libc::sockaddr_in {
        to_sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
    }
    fn write(self, raw: &mut libc::sockaddr_in) -> libc::socklen_t {
        *raw = to_sockaddr(self);
        std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
    }
}

impl Destination for SocketAddr {
    type Raw = libc::sockaddr_storage;
    fn empty() -> libc::sockaddr_storage {
        // SAFETY: an all-zero sockaddr_storage is a valid (AF_UNSPEC) value.
        unsafe { std::mem::zeroed() }
    }
    fn write(self, raw: &mut libc::sockaddr_storage) -> libc::socklen_t {
        addr_to_storage(self, raw)
    }
}

/// Sends `n` datagrams with as few `sendmmsg` calls as possible; `msg(i)` gives the bytes and
/// destination of datagram `i`. Returns how many the kernel took. A datagram the kernel
/// refuses (an unroutable or forbidden destination) is skipped and the rest are sent; see
/// [`send_batch_reporting`] for which ones failed.
pub fn send_batch<'a>(
    fd: RawFd,
    n: usize,
    msg: impl Fn(usize) -> (&'a [u8], SocketAddrV4),
) -> usize {
    send_batch_reporting(fd, n, msg, |_, _| {})
}

/// [`send_batch`], calling `failed(i, error)` for every datagram `i` that was not sent.
///
/// `sendmmsg` stops at the first datagram that fails and reports only that error (or the
/// count sent before it), so one bad destination would cost every datagram behind it: the
/// failing one is skipped and the call repeated for the rest. A full socket buffer
/// (`EAGAIN`, `ENOBUFS`) fails every datagram behind it too, so those are given up at once
/// instead of being tried one by one.
pub fn send_batch_reporting<'a, A: Destination>(
    fd: RawFd,
    n: usize,
    msg: impl Fn(usize) -> (&'a [u8], A),
    mut failed: impl FnMut(usize, &io::Error),
) -> usize {
    let mut next = 0;
    let mut sent = 0;
    while next < n {
        match sendmmsg_chunk(fd, next, (n - next).min(BATCH), &msg) {
            Ok(0) => {
                let e = io::Error::from(io::ErrorKind::WriteZero);
                (next..n).for_each(|i| failed(i, &e));
                break;
            }
            Ok(k) => {
                sent += k;
                next += k;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_buffer_full(&e) => {
                (next..n).for_each(|i| failed(i, &e));
                break;
            }
            Err(e) => {
                failed(next, &e);
                next += 1;
            }
        }
    }
    sent
}

fn is_buffer_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS)
}

/// One `sendmmsg` of datagrams `first..first + count` (`count` ≤ [`BATCH`]).
fn sendmmsg_chunk<'a, A: Destination>(
    fd: RawFd,
    first: usize,
    count: usize,
    msg: &impl Fn(usize) -> (&'a [u8], A),
) -> io::Result<usize> {
    let count = count.min(BATCH);
    let mut addrs = [A::empty(); BATCH];
    let mut iovs = [EMPTY_IOV; BATCH];
    // SAFETY: a zeroed mmsghdr (null pointers, zero lengths) is a valid empty value.
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for i in 0..count {
        let (data, to) = msg(first + i);
        // Never past the address's own bytes, whatever a `Destination` returns.
        let room = std::mem::size_of::<A::Raw>() as libc::socklen_t;
        hdrs[i].msg_hdr.msg_namelen = to.write(&mut addrs[i]).min(room);
        iovs[i] = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        hdrs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut A::Raw).cast();
        hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: headers point at live arrays (each address's length capped at its size, each
    // iovec at one borrowed slice); the kernel only reads the data buffers, which the caller
    // keeps alive for 'a, and `count` does not exceed the arrays' length.
    let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), count as libc::c_uint, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// One datagram received by [`recv_batch_from`] on a socket of either address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivedFrom {
    /// Bytes received, at the start of the slot.
    pub len: usize,
    /// Sender; `None` when the kernel reported an address of another family.
    pub from: Option<SocketAddr>,
    /// The kernel cut the datagram because the slot was too small.
    pub truncated: bool,
}

impl ReceivedFrom {
    /// Nothing received (for initializing the output array).
    pub const EMPTY: ReceivedFrom = ReceivedFrom {
        len: 0,
        from: None,
        truncated: false,
    };
}

fn storage_to_addr(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match i32::from(s.ss_family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the kernel wrote a sockaddr_in here (family and length checked), and
            // sockaddr_storage is large and aligned enough for it.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(from_sockaddr(a)))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn addr_to_storage(a: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            unsafe {
                std::ptr::write(
                    (out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>(),
                    to_sockaddr(v4),
                );
            }
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
            unsafe {
                std::ptr::write(
                    (out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>(),
                    sin6,
                );
            }
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Receives up to `slots.len()` (at most [`BATCH`]) datagrams with one `recvmmsg`, each at the
/// start of its slot, from a socket of either address family. Returns how many arrived;
/// `WouldBlock` when none.
pub fn recv_batch_from<S: AsMut<[u8]>>(
    fd: RawFd,
    slots: &mut [S],
    out: &mut [ReceivedFrom; BATCH],
) -> io::Result<usize> {
    let n = slots.len().min(BATCH);
    let mut addrs = [SocketAddr::empty(); BATCH];
    let mut iovs = [EMPTY_IOV; BATCH];
    for (iov, slot) in iovs.iter_mut().zip(slots.iter_mut()).take(n) {
        *iov = iovec_of(slot.as_mut());
    }
    let caps: [usize; BATCH] = std::array::from_fn(|i| iovs[i].iov_len);
    recvmmsg_into(fd, &mut iovs[..n], &mut addrs, |i, h| {
        out[i] = ReceivedFrom {
            len: (h.msg_len as usize).min(caps[i]),
            from: storage_to_addr(&addrs_at(h), h.msg_hdr.msg_namelen),
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        };
    })
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, and to `want` past it when this process
/// Socket option and control message of UDP GRO (`linux/udp.h`).
const UDP_GRO: libc::c_int = 104;

/// Asks the kernel to hand `fd` the datagrams it coalesced (UDP GRO) as one message each,
/// with their segment size in a control message, instead of cutting them up first.
pub fn set_udp_gro(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `on` is a live c_int and its size is passed with it.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_UDP,
            UDP_GRO,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// One message received by [`recv_coalesced`]: one datagram, or several the kernel coalesced.
#[derive(Debug, Clone, Copy)]
pub struct Coalesced {
    /// Bytes received, over the message's buffers in order.
    pub len: usize,
    /// Sender.
    pub from: SocketAddrV4,
    /// The size of each coalesced datagram (the last may be shorter); `None`: one datagram.
    pub segment: Option<usize>,
    /// The kernel cut the message because its buffers were too small.
    pub truncated: bool,
}

impl Coalesced {
    /// Nothing received (for initializing the output array).
    pub const EMPTY: Coalesced = Coalesced {
        len: 0,
        from: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
        segment: None,
        truncated: false,
    };
}

/// Most buffers one [`recv_coalesced`] call hands the kernel.
pub const COALESCED_IOVS: usize = 320;

/// Receives up to `tails.len()` (at most [`BATCH`]) messages with one `recvmmsg` from a
/// socket with [`set_udp_gro`]. Message `i` fills, in order, `slots[i * per_msg..][..per_msg]`
/// (each from `headroom`, `seg_len` bytes at most) and then all of `tails[i]`. Returns how
/// many messages arrived; `WouldBlock` when none.
pub fn recv_coalesced(
    fd: RawFd,
    slots: &mut [Vec<u8>],
    headroom: usize,
    seg_len: usize,
    per_msg: usize,
    tails: &mut [Vec<u8>],
    out: &mut [Coalesced; BATCH],
) -> io::Result<usize> {
    let per = per_msg + 1;
    let n = tails.len().min(BATCH).min(COALESCED_IOVS / per.max(1));
    let mut iovs = [EMPTY_IOV; COALESCED_IOVS];
    let mut slot_iter = slots.iter_mut();
    for (m, tail) in tails.iter_mut().enumerate().take(n) {
        for k in 0..per_msg {
            if let Some(s) = slot_iter.next() {
                let end = headroom.saturating_add(seg_len).min(s.len());
                iovs[m * per + k] = iovec_of(s.get_mut(headroom..end).unwrap_or_default());
            }
        }
        iovs[m * per + per_msg] = iovec_of(tail);
    }
    let mut addrs = [SocketAddrV4::empty(); BATCH];
    // u64 storage keeps each control buffer aligned for cmsghdr; one int-sized message fits.
    let mut controls = [[0u64; 4]; BATCH];
    // SAFETY: a zeroed mmsghdr is a valid "empty" value for this C struct.
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    let (iov_base, addr_base) = (iovs.as_mut_ptr(), addrs.as_mut_ptr());
    let control_base = controls.as_mut_ptr();
    for (m, h) in hdrs.iter_mut().enumerate().take(n) {
        h.msg_hdr.msg_name = addr_base.wrapping_add(m).cast();
        h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.msg_hdr.msg_iov = iov_base.wrapping_add(m * per);
        h.msg_hdr.msg_iovlen = per;
        h.msg_hdr.msg_control = control_base.wrapping_add(m).cast();
        h.msg_hdr.msg_controllen = std::mem::size_of::<[u64; 4]>();
    }
    // SAFETY: every header points at live buffers (the slots' and tails' bytes, `iovs`,
    // `addrs`, `controls`) that outlive the call and are not touched until it returns; `per`
    // iovecs from `m * per` lie inside `iovs` because `n * per` ≤ COALESCED_IOVS, and
    // `m < n` ≤ BATCH for `addrs` and `controls`.
    let got = cvt(unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    })? as usize;
    for (m, h) in hdrs.iter().enumerate().take(got) {
        out[m] = Coalesced {
            len: h.msg_len as usize,
            from: from_sockaddr(&addrs_at(h)),
            segment: gro_segment(&h.msg_hdr),
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        };
    }
    Ok(got)
}

/// The segment size of a UDP GRO control message in `msg`'s control buffer, if any.
fn gro_segment(msg: &libc::msghdr) -> Option<usize> {
    // SAFETY: `msg` is a header the kernel filled: its control pointer and length describe
    // the buffer `recv_coalesced` gave it, and CMSG_FIRSTHDR/CMSG_NXTHDR stay inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let data_len = (*c).cmsg_len.saturating_sub(libc::CMSG_LEN(0) as usize);
            if (*c).cmsg_level == libc::SOL_UDP
                && (*c).cmsg_type == UDP_GRO
                && data_len >= std::mem::size_of::<libc::c_int>()
            {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok().filter(|&s| s > 0);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

/// Most segments one UDP GSO send may carry (the kernel's UDP_MAX_SEGMENTS on older kernels).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Most payload bytes one UDP GSO send may carry.
pub const GSO_MAX_BYTES: usize = 65_000;
const UDP_SEGMENT: libc::c_int = 103;

/// Sends `n` datagrams of `segment` bytes each (the last may be shorter) to `to` with one
/// `sendmsg` and the UDP_SEGMENT option (UDP GSO): the stack is traversed once and the
/// datagrams are cut at the end. `seg(i)` gives datagram `i`; `n` ≤ [`GSO_MAX_SEGMENTS`].
pub fn send_gso<'a>(
    fd: RawFd,
    n: usize,
    segment: u16,
    to: SocketAddrV4,
    seg: impl Fn(usize) -> &'a [u8],
) -> io::Result<usize> {
    let n = n.min(GSO_MAX_SEGMENTS);
    let mut iovs = [EMPTY_IOV; GSO_MAX_SEGMENTS];
    for (i, iov) in iovs.iter_mut().enumerate().take(n) {
        let d = seg(i);
        *iov = libc::iovec {
            iov_base: d.as_ptr() as *mut libc::c_void,
            iov_len: d.len(),
        };
    }
    let mut addr = to_sockaddr(to);
    // u64 storage keeps the control buffer aligned for cmsghdr.
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr (null pointers, zero lengths) is a valid empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut addr as *mut libc::sockaddr_in).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    msg.msg_iov = iovs.as_mut_ptr();
    msg.msg_iovlen = n;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
    // SAFETY: the control buffer (32 bytes) holds one cmsghdr with a u16 payload (24 bytes);
    // CMSG_FIRSTHDR/CMSG_DATA point inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(io::Error::other(
                "no room for the UDP_SEGMENT control message",
            ));
        }
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = UDP_SEGMENT;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment);
    }
    // SAFETY: msg points at live iovecs, address and control buffer for the call's duration.
    let r = unsafe { libc::sendmsg(fd, &msg, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn batch_roundtrip_on_loopback() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_nonblocking(true).unwrap();
        let to = match b.local_addr().unwrap() {
            std::net::SocketAddr::V4(v) => v,
            _ => unreachable!(),
        };
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        assert_eq!(
            send_batch(a.as_raw_fd(), 40, |i| (&payloads[i][..], to)),
            40
        );
        let mut slots = vec![vec![0u8; 64 + 100]; BATCH];
        let mut got = [Received {
            len: 0,
            from: to,
            truncated: false,
        }; BATCH];
        let mut total = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while total < 40 && std::time::Instant::now() < deadline {
            match recv_batch(b.as_raw_fd(), &mut slots, 64, &mut got) {
                Ok(n) => {
                    for (i, r) in got[..n].iter().enumerate() {
                        assert_eq!(&slots[i][64..64 + r.len], &payloads[total + i][..]);
                        assert!(!r.truncated);
                        assert_eq!(*r.from.ip(), Ipv4Addr::LOCALHOST);
                    }
                    total += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(total, 40);
    }

    /// A datagram to 255.255.255.255 from a socket without SO_BROADCAST fails (EACCES) in the
    /// middle of a batch: the others still go out, in order, and the failure is reported.
    #[test]
    fn a_failing_datagram_does_not_abandon_the_batch() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_nonblocking(true).unwrap();
        let to = match b.local_addr().unwrap() {
            std::net::SocketAddr::V4(v) => v,
            _ => unreachable!(),
        };
        let unroutable = SocketAddrV4::new(Ipv4Addr::BROADCAST, to.port());
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 8]).collect();
        let dest = |i: usize| if i == 5 || i == 33 { unroutable } else { to };
        let mut failures = Vec::new();
        let sent = send_batch_reporting(
            a.as_raw_fd(),
            40,
            |i| (&payloads[i][..], dest(i)),
            |i, e| failures.push((i, e.kind())),
        );
        assert_eq!(sent, 38);
        assert_eq!(
            failures,
            vec![
                (5, io::ErrorKind::PermissionDenied),
                (33, io::ErrorKind::PermissionDenied)
            ]
        );
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < 38 && std::time::Instant::now() < deadline {
            match b.recv(&mut buf) {
                Ok(n) => got.push(buf[..n].to_vec()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        let want: Vec<Vec<u8>> = (0..40)
            .filter(|&i| i != 5 && i != 33)
            .map(|i| payloads[i].clone())
            .collect();
        assert_eq!(got, want);
    }

    /// The same for destinations of either family (the DNS64 and GRE paths): a refused
    /// datagram is reported and skipped, the rest arrive.
    #[test]
    fn a_failing_datagram_of_either_family_does_not_abandon_the_batch() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = b.local_addr().unwrap();
        let unroutable = SocketAddr::new(Ipv4Addr::BROADCAST.into(), to.port());
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 8]).collect();
        let mut failures = Vec::new();
        let sent = send_batch_reporting(
            a.as_raw_fd(),
            40,
            |i| (&payloads[i][..], if i == 0 { unroutable } else { to }),
            |i, e| failures.push((i, e.kind())),
        );
        assert_eq!(sent, 39);
        assert_eq!(failures, vec![(0, io::ErrorKind::PermissionDenied)]);
        assert_eq!(recv_all_from(&b, 39).len(), 39);
    }

    #[test]
    fn gso_send_arrives_as_separate_datagrams() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = match b.local_addr().unwrap() {
            std::net::SocketAddr::V4(v) => v,
            _ => unreachable!(),
        };
        let segs: Vec<Vec<u8>> = vec![vec![1; 100], vec![2; 100], vec![3; 40]];
        match send_gso(a.as_raw_fd(), 3, 100, to, |i| &segs[i][..]) {
            Ok(n) => assert_eq!(n, 240),
            // Kernels without UDP GSO: the worker falls back to sendmmsg.
            Err(e) => return eprintln!("UDP GSO unavailable here: {e}"),
        }
        let mut buf = [0u8; 512];
        for want in &segs {
            let n = b.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &want[..]);
        }
    }

    #[test]
    fn truncation_is_reported() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.send_to(&[7u8; 200], b.local_addr().unwrap()).unwrap();
        let mut slots = vec![vec![0u8; 16 + 100]];
        let mut got = [Received {
            len: 0,
            from: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            truncated: false,
        }; BATCH];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match recv_batch(b.as_raw_fd(), &mut slots, 16, &mut got) {
                Ok(1) => break,
                _ if std::time::Instant::now() < deadline => std::thread::yield_now(),
                r => panic!("{r:?}"),
            }
        }
        assert!(got[0].truncated);
    }

    /// Receives `want` datagrams on `sock` with [`recv_batch_from`] into 64-byte slots.
    fn recv_all_from(sock: &UdpSocket, want: usize) -> Vec<(Vec<u8>, ReceivedFrom)> {
        let mut slots = vec![[0u8; 64]; BATCH];
        let mut got = [ReceivedFrom::EMPTY; BATCH];
        let mut all = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while all.len() < want && std::time::Instant::now() < deadline {
            match recv_batch_from(sock.as_raw_fd(), &mut slots, &mut got) {
                Ok(n) => all.extend((0..n).map(|i| (slots[i][..got[i].len].to_vec(), got[i]))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        all
    }

    #[test]
    fn batches_of_either_family_round_trip_with_their_sources() {
        for local in ["127.0.0.1:0", "[::1]:0"] {
            let (Ok(a), Ok(b)) = (UdpSocket::bind(local), UdpSocket::bind(local)) else {
                eprintln!("no loopback for {local} here");
                continue;
            };
            let to = b.local_addr().unwrap();
            let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1 + usize::from(i)]).collect();
            let sent = send_batch_reporting(
                a.as_raw_fd(),
                40,
                |i| (&payloads[i][..], to),
                |i, e| panic!("datagram {i}: {e}"),
            );
            assert_eq!(sent, 40);
            let got = recv_all_from(&b, 40);
            assert_eq!(got.len(), 40, "{local}");
            for ((data, meta), want) in got.iter().zip(&payloads) {
                assert_eq!(data, want);
                assert!(!meta.truncated);
                assert_eq!(meta.from, Some(a.local_addr().unwrap()), "{local}");
            }
        }
    }

    #[test]
    fn truncation_is_reported_for_either_family() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.send_to(&[7u8; 200], b.local_addr().unwrap()).unwrap();
        let got = recv_all_from(&b, 1);
        assert_eq!(got.len(), 1);
        assert!(got[0].1.truncated);
        assert_eq!(got[0].1.len, 64, "the length is capped at the slot");
    }
}
