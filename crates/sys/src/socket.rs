//! Socket options the drivers set on sockets they already hold: forced buffer sizes, no DF
//! on Teredo datagrams, TCP's unsent-bytes cap, a receive timeout; the count of datagrams
//! the kernel dropped on a socket; and binding UDP and TCP on one port.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::cvt;

/// Sets a socket option of type `T` (a plain C value).
fn setsockopt<T: Copy>(fd: RawFd, level: libc::c_int, opt: libc::c_int, v: T) -> io::Result<()> {
    // SAFETY: `v` is a live `T` for the call and its exact size is passed; the kernel only
    // reads it.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Sets both socket buffers with SO_RCVBUFFORCE/SO_SNDBUFFORCE (needs CAP_NET_ADMIN).
pub fn set_buffer_force(fd: RawFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        setsockopt(fd, libc::SOL_SOCKET, opt, v)?;
    }
    Ok(())
}

/// Datagrams the kernel dropped on the socket since it was created, mostly because its
/// receive buffer was full (SO_MEMINFO's SK_MEMINFO_DROPS, the count SO_RXQ_OVFL reports;
/// also those a socket filter or a bad checksum dropped). A 32-bit counter that wraps:
/// callers take differences with `wrapping_sub`.
pub fn socket_drops(fd: RawFd) -> io::Result<u32> {
    // Room for the kernel's SK_MEMINFO_VARS (9 today); it writes what it has.
    let mut info = [0u32; 16];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` is a live, writable buffer of `len` bytes for the call; the kernel
    // writes at most `len` bytes into it and stores the length it wrote in `len`.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    let drops = libc::SK_MEMINFO_DROPS as usize;
    if (len as usize) < (drops + 1) * std::mem::size_of::<u32>() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "SO_MEMINFO without the drop count",
        ));
    }
    Ok(info[drops])
}

/// Keeps the kernel from setting DF on Teredo datagrams (RFC 4380 §5.1.2: SHOULD NOT be set).
pub fn set_pmtudisc_dont(fd: RawFd) -> io::Result<()> {
    setsockopt(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DONT,
    )
}

/// Caps the bytes a TCP socket holds that were written but not yet sent
/// (TCP_NOTSENT_LOWAT): a write beyond it would block. Bytes in flight are not counted, so
/// a reading peer keeps its whole congestion window; a peer whose window stays closed holds
/// at most `bytes` of kernel memory instead of a send buffer that autotuning keeps growing.
pub fn set_notsent_lowat(fd: RawFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, v)
}

/// Makes each blocking receive on the socket wait at most `timeout` (SO_RCVTIMEO); a receive
/// that times out fails with `WouldBlock`.
pub fn set_recv_timeout(fd: RawFd, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros()),
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, tv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsRawFd;

    #[test]
    fn options_are_set_and_a_receive_times_out() {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_pmtudisc_dont(udp.as_raw_fd()).unwrap();
        set_recv_timeout(udp.as_raw_fd(), Duration::from_millis(20)).unwrap();
        assert_eq!(udp.read_timeout().unwrap(), Some(Duration::from_millis(20)));
        let mut buf = [0u8; 8];
        assert_eq!(
            udp.recv(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        set_notsent_lowat(tcp.as_raw_fd(), 64 * 1024).unwrap();
    }

    /// Datagrams sent to a socket whose small receive buffer is full are dropped by the
    /// kernel and counted; a socket nobody overflowed counts none.
    #[test]
    fn a_full_receive_buffer_counts_drops() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(socket_drops(rx.as_raw_fd()).unwrap(), 0);
        // Unprivileged: the kernel rounds this up to its minimum, a few KB.
        let small: libc::c_int = 1;
        setsockopt(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, small).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let datagram = [0u8; 1_000];
        for _ in 0..1_000 {
            tx.send_to(&datagram, rx.local_addr().unwrap()).unwrap();
        }
        let drops = socket_drops(rx.as_raw_fd()).unwrap();
        assert!(drops > 900, "{drops} drops");
        assert!(socket_drops(-1).is_err());
    }
}

/// Attempts at a port free for both UDP and TCP when the address asks for any port (0).
pub const SAME_PORT_ATTEMPTS: usize = 32;

/// A UDP socket and a TCP socket on the same address and port (a DNS server's pair), made by
/// `udp` (which binds the address it is given and returns the address it got) and `tcp`
/// (which binds the address it is given). With port 0 the UDP port the kernel picks is tried
/// on TCP, and a number another socket already holds on TCP (`EADDRINUSE`) is given up for
/// another, up to [`SAME_PORT_ATTEMPTS`] times; a fixed port is tried once and fails as the
/// kernel says.
pub fn udp_and_tcp_on_one_port<U, T>(
    addr: SocketAddr,
    mut udp: impl FnMut(SocketAddr) -> io::Result<(U, SocketAddr)>,
    mut tcp: impl FnMut(SocketAddr) -> io::Result<T>,
) -> io::Result<(U, SocketAddr, T)> {
    let attempts = if addr.port() == 0 {
        SAME_PORT_ATTEMPTS
    } else {
        1
    };
    let mut last = io::Error::from(io::ErrorKind::AddrInUse);
    for _ in 0..attempts {
        let (u, local) = udp(addr)?;
        match tcp(local) {
            Ok(t) => return Ok((u, local, t)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

#[cfg(test)]
mod same_port_tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener, UdpSocket};

    fn udp(a: SocketAddr) -> io::Result<(UdpSocket, SocketAddr)> {
        let s = UdpSocket::bind(a)?;
        let got = s.local_addr()?;
        Ok((s, got))
    }

    #[test]
    fn port_zero_gives_one_port_for_both() {
        let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let (u, addr, t) = udp_and_tcp_on_one_port(any, udp, TcpListener::bind).unwrap();
        assert_ne!(addr.port(), 0);
        assert_eq!(u.local_addr().unwrap(), addr);
        assert_eq!(t.local_addr().unwrap(), addr);
    }

    // A TCP side that is taken makes port 0 try another number, and a fixed port fail.
    #[test]
    fn a_taken_tcp_side_is_given_up_for_another_port_only_under_port_zero() {
        let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        // A number whose TCP side stays held while its UDP side is let go.
        let (held_udp, taken, _held_tcp) =
            udp_and_tcp_on_one_port(any, udp, TcpListener::bind).unwrap();
        drop(held_udp);
        let mut calls = 0;
        // The first UDP bind lands on the taken number, as the kernel might pick it.
        let udp_first_taken = |a: SocketAddr| {
            calls += 1;
            udp(if calls == 1 { taken } else { a })
        };
        let (_, addr, _) =
            udp_and_tcp_on_one_port(any, udp_first_taken, TcpListener::bind).unwrap();
        assert_ne!(addr, taken);
        assert_eq!(calls, 2, "one more UDP bind after the taken number");
        let e = udp_and_tcp_on_one_port(taken, udp, TcpListener::bind).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    }
}
