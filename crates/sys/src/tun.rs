//! The ioctls of a TUN queue (linux/if_tun.h): attaching a `/dev/net/tun` descriptor to a
//! device with its flags, the virtio-net offloads the device may hand over, the NAPI queue's
//! byte bound; and of any interface: its MTU, and its features (`ethtool -K`: GRO and the
//! like).

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

/// linux/ethtool.h: the commands and the string set used here.
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;
/// More feature names than any kernel has (it has about 70): a bound on what is read.
const MAX_FEATURES: u32 = 1024;

/// `struct ethtool_sset_info` asking for one string set, room for its one count.
#[repr(C)]
struct SsetInfo {
    cmd: u32,
    reserved: u32,
    sset_mask: u64,
    count: u32,
}

/// `SIOCETHTOOL` on interface `name` through `sock`, with `data` as the command's buffer.
///
/// # Safety
/// `data` must point to a buffer that the command reads and writes within its bounds.
unsafe fn ethtool(sock: RawFd, name: &str, data: *mut libc::c_char) -> io::Result<()> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_data = data;
    // SAFETY: `req` is a live `ifreq` naming an interface (NUL-terminated, as checked by
    // `ifreq`); its data pointer is the caller's buffer, sized for the command.
    if unsafe { libc::ioctl(sock, libc::SIOCETHTOOL, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The names of interface `name`'s features (`ethtool -k`), in the order of their bits.
fn feature_names(sock: RawFd, name: &str) -> io::Result<Vec<String>> {
    let mut info = SsetInfo {
        cmd: ETHTOOL_GSSET_INFO,
        reserved: 0,
        sset_mask: 1 << ETH_SS_FEATURES,
        count: 0,
    };
    // SAFETY: the kernel reads the header and writes one count per set asked for (one) into
    // `info`, which has room for it.
    unsafe { ethtool(sock, name, (&raw mut info).cast())? };
    if info.sset_mask != 1 << ETH_SS_FEATURES || info.count > MAX_FEATURES {
        return Err(io::Error::other("SIOCETHTOOL: no feature names"));
    }
    let count = info.count as usize;
    // `struct ethtool_gstrings`: three u32 of header, then `count` names of 32 bytes each.
    let mut buf = vec![0u32; 3 + count * ETH_GSTRING_LEN / 4];
    buf[0] = ETHTOOL_GSTRINGS;
    buf[1] = ETH_SS_FEATURES;
    buf[2] = info.count;
    // SAFETY: the kernel writes the header and as many names as the string set has: the
    // count it reported above (the kernel's fixed number of netdev features), which `buf`
    // has room for.
    unsafe { ethtool(sock, name, buf.as_mut_ptr().cast())? };
    let written = (buf[2] as usize).min(count);
    let bytes: Vec<u8> = buf[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok(bytes
        .chunks(ETH_GSTRING_LEN)
        .take(written)
        .map(|n| {
            let end = n.iter().position(|&b| b == 0).unwrap_or(n.len());
            String::from_utf8_lossy(&n[..end]).into_owned()
        })
        .collect())
}

/// Turns features of interface `name` on or off by their `ethtool -k` names (`rx-gro`,
/// `rx-udp-gro-forwarding`, ...), asked through `sock`, a socket of the network namespace
/// the interface is in, as `ethtool -K` does (`SIOCETHTOOL` with `ETHTOOL_SFEATURES`). A
/// name the interface does not have is an error. On a veth, GRO gives the receiving end a
/// NAPI instance of its own, which `/sys/class/net/NAME/threaded` can move to a kernel
/// thread: a NIC's receive path instead of the sender's system call; a datagram a local
/// socket sent takes it only with `rx-udp-gro-forwarding` as well.
pub fn set_features(sock: RawFd, name: &str, features: &[(&str, bool)]) -> io::Result<()> {
    let names = feature_names(sock, name)?;
    let blocks = names.len().div_ceil(32);
    // `struct ethtool_sfeatures`: cmd and size, then per block of 32 features a `valid` and
    // a `requested` mask.
    let mut buf = vec![0u32; 2 + 2 * blocks];
    buf[0] = ETHTOOL_SFEATURES;
    buf[1] = blocks as u32;
    for &(feature, on) in features {
        let bit = names.iter().position(|n| n == feature).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{name} has no feature `{feature}`"),
            )
        })?;
        let (block, mask) = (bit / 32, 1u32 << (bit % 32));
        buf[2 + 2 * block] |= mask;
        if on {
            buf[3 + 2 * block] |= mask;
        }
    }
    // SAFETY: the kernel reads the header and `size` blocks, which `buf` holds.
    unsafe { ethtool(sock, name, buf.as_mut_ptr().cast()) }
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
        let e = set_features(sock.as_raw_fd(), "no-such-dev0", &[("rx-gro", true)]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
        assert!(set_features(sock.as_raw_fd(), "sixteen-bytes-xx", &[]).is_err());
        // Reading the names needs no privilege; loopback has GRO among them.
        let names = feature_names(sock.as_raw_fd(), "lo").unwrap();
        assert!(names.iter().any(|n| n == "rx-gro"), "{names:?}");
        let e = set_features(sock.as_raw_fd(), "lo", &[("no-such-feature", true)]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
