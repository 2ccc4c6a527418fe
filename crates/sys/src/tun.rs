//! The ioctls of a TUN queue (linux/if_tun.h): attaching a `/dev/net/tun` descriptor to a
//! device with its flags, the virtio-net offloads the device may hand over, the NAPI queue's
//! byte bound, and an interface's MTU.

use std::io;
use std::os::fd::RawFd;

pub use libc::{IFF_MULTI_QUEUE, IFF_NAPI, IFF_NO_PI, IFF_TUN, IFF_VNET_HDR};
pub use libc::{TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6};

/// An `ifreq` naming `name`, all else zero; refused unless 1 to 15 bytes without NUL.
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: `ifreq` is plain data (a name array and a union of integers); all zeroes is a
    // valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= req.ifr_name.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("TUN device name `{name}` must be 1 to 15 bytes"),
        ));
    }
    for (d, &b) in req.ifr_name.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    Ok(req)
}

/// Attaches the `/dev/net/tun` descriptor `fd` to device `name` (creating it if needed) with
/// `flags` (`IFF_*`), as `TUNSETIFF` does.
pub fn set_iff(fd: RawFd, name: &str, flags: libc::c_int) -> io::Result<()> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: `req` is a live, NUL-terminated `ifreq` (the name is shorter than the field)
    // that the kernel reads and writes for the call.
    if unsafe { libc::ioctl(fd, libc::TUNSETIFF, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Tells the device which offloads (`TUN_F_*`) its reader takes (`TUNSETOFFLOAD`).
pub fn set_offload(fd: RawFd, offloads: libc::c_uint) -> io::Result<()> {
    // SAFETY: the argument is a flag mask passed by value; no memory is passed.
    if unsafe { libc::ioctl(fd, libc::TUNSETOFFLOAD, libc::c_ulong::from(offloads)) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bounds the bytes (skb truesize) the queue may hold in flight (`TUNSETSNDBUF`).
pub fn set_sndbuf(fd: RawFd, bytes: libc::c_int) -> io::Result<()> {
    // SAFETY: a pointer to an int that outlives the call; the kernel only reads it.
    if unsafe { libc::ioctl(fd, libc::TUNSETSNDBUF, &bytes) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The MTU of interface `name` (`SIOCGIFMTU`), asked through `sock`, a socket of the network
/// namespace the interface is in.
pub fn interface_mtu(sock: RawFd, name: &str) -> io::Result<i32> {
    let mut req = ifreq(name)?;
    // SAFETY: `req` is a live `ifreq` naming an interface (NUL-terminated, as checked by
    // `ifreq`), which the kernel reads and writes for the call.
    if unsafe { libc::ioctl(sock, libc::SIOCGIFMTU, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU succeeded, so it filled the `ifru_mtu` member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_mtu })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn names_are_checked_and_loopback_has_an_mtu() {
        assert!(ifreq("").is_err());
        assert!(ifreq("sixteen-bytes-xx").is_err());
        assert!(ifreq("a\0b").is_err());
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(interface_mtu(sock.as_raw_fd(), "lo").unwrap() >= 1280);
        let e = interface_mtu(sock.as_raw_fd(), "no-such-dev0").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
    }
}
