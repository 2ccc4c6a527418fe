//! Route, link and neighbour look-ups over `NETLINK_ROUTE` (`RTM_GETROUTE`, `RTM_GETLINK`,
//! `RTM_GETNEIGH`, each one request and its one reply), for senders that write whole frames
//! to an interface and so need what `ip route get` and `ip neigh` show: the outgoing
//! interface, the next hop, its link-layer address.
//!
//! Replies are parsed defensively: a truncated or odd message is an error, never a panic.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::cvt;

/// Where the kernel would send a packet: the outgoing interface and, when the destination is
/// not on the link, the gateway (the next hop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Index of the outgoing interface.
    pub ifindex: u32,
    /// The gateway, or `None` when the destination itself is the next hop.
    pub gateway: Option<IpAddr>,
}

/// What a frame writer needs of an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// ARPHRD_ETHER: frames start with a 14-byte Ethernet header.
    pub ethernet: bool,
    /// Its link-layer address, when 6 bytes long.
    pub mac: Option<[u8; 6]>,
    /// Its MTU.
    pub mtu: u32,
}

const NLMSG_HDR: usize = 16;
const RTMSG: usize = 12;
const IFINFOMSG: usize = 16;
const NDMSG: usize = 12;
const RTA_DST: u16 = 1;
const RTA_SRC: u16 = 2;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const IFLA_ADDRESS: u16 = 1;
const IFLA_MTU: u16 = 4;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const ARPHRD_ETHER: u16 = 1;
/// Neighbour states whose link-layer address may be used: REACHABLE, STALE, DELAY, PROBE,
/// PERMANENT (not INCOMPLETE, FAILED, NOARP, NONE).
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x80;

/// The route the kernel picks for `dst` (from `src` when given; a source that is not on the
/// host yet makes the kernel refuse, so the look-up is then repeated without it).
pub fn route_get(dst: IpAddr, src: Option<IpAddr>) -> io::Result<Route> {
    match src.map(|s| route_get_from(dst, Some(s))) {
        Some(Ok(r)) => Ok(r),
        _ => route_get_from(dst, None),
    }
}

fn route_get_from(dst: IpAddr, src: Option<IpAddr>) -> io::Result<Route> {
    let (family, bits) = family(dst);
    let mut body = vec![0u8; RTMSG];
    body[0] = family;
    body[1] = bits; // rtm_dst_len
    push_attr(&mut body, RTA_DST, &addr_bytes(dst));
    if let Some(s) = src {
        body[2] = family_bits(s); // rtm_src_len
        push_attr(&mut body, RTA_SRC, &addr_bytes(s));
    }
    let reply = request(libc::RTM_GETROUTE, &body, libc::RTM_NEWROUTE)?;
    let attrs = reply.get(RTMSG..).ok_or_else(malformed)?;
    let mut ifindex = None;
    let mut gateway = None;
    for (kind, value) in Attrs(attrs) {
        match kind {
            RTA_OIF => ifindex = value.try_into().ok().map(u32::from_ne_bytes),
            RTA_GATEWAY => gateway = parse_addr(value),
            _ => {}
        }
    }
    Ok(Route {
        ifindex: ifindex.ok_or_else(|| io::Error::other("route without an interface"))?,
        gateway,
    })
}

/// Interface `ifindex`'s type, link-layer address and MTU.
pub fn link_get(ifindex: u32) -> io::Result<Link> {
    let mut body = vec![0u8; IFINFOMSG];
    body[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    let reply = request(libc::RTM_GETLINK, &body, libc::RTM_NEWLINK)?;
    let head = reply.get(..IFINFOMSG).ok_or_else(malformed)?;
    let kind = u16::from_ne_bytes([head[2], head[3]]);
    let mut mac = None;
    let mut mtu = 0;
    for (t, value) in Attrs(&reply[IFINFOMSG..]) {
        match t {
            IFLA_ADDRESS => mac = value.try_into().ok(),
            IFLA_MTU => mtu = value.try_into().map_or(0, u32::from_ne_bytes),
            _ => {}
        }
    }
    Ok(Link {
        ethernet: kind == ARPHRD_ETHER,
        mac,
        mtu,
    })
}

/// The link-layer address of neighbour `addr` on interface `ifindex`, when the kernel knows a
/// usable one (`None`: no entry, or one still being resolved or failed).
pub fn neighbour_get(ifindex: u32, addr: IpAddr) -> io::Result<Option<[u8; 6]>> {
    let mut body = vec![0u8; NDMSG];
    body[0] = family(addr).0;
    body[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    push_attr(&mut body, NDA_DST, &addr_bytes(addr));
    let reply = match request(libc::RTM_GETNEIGH, &body, libc::RTM_NEWNEIGH) {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    let head = reply.get(..NDMSG).ok_or_else(malformed)?;
    let state = u16::from_ne_bytes([head[8], head[9]]);
    if state & NUD_USABLE == 0 {
        return Ok(None);
    }
    Ok(Attrs(&reply[NDMSG..])
        .find(|(t, _)| *t == NDA_LLADDR)
        .and_then(|(_, v)| v.try_into().ok()))
}

fn malformed() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "malformed netlink reply")
}

fn family(a: IpAddr) -> (u8, u8) {
    match a {
        IpAddr::V4(_) => (libc::AF_INET as u8, 32),
        IpAddr::V6(_) => (libc::AF_INET6 as u8, 128),
    }
}

fn family_bits(a: IpAddr) -> u8 {
    family(a).1
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

fn parse_addr(v: &[u8]) -> Option<IpAddr> {
    if let Ok(b) = <[u8; 4]>::try_from(v) {
        Some(IpAddr::V4(Ipv4Addr::from(b)))
    } else {
        <[u8; 16]>::try_from(v)
            .ok()
            .map(|b| IpAddr::V6(Ipv6Addr::from(b)))
    }
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn push_attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(align4(out.len()), 0);
}

/// The route attributes (type without its flag bits, value) of a message body.
struct Attrs<'a>(&'a [u8]);

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.0;
        let len = usize::from(u16::from_ne_bytes([*b.first()?, *b.get(1)?]));
        let kind = u16::from_ne_bytes([*b.get(2)?, *b.get(3)?]) & 0x3fff;
        let value = b.get(4..len)?;
        self.0 = b.get(align4(len)..).unwrap_or(&[]);
        Some((kind, value))
    }
}

/// Sends one request of type `kind` with `body` and returns the body of the reply of type
/// `expect` (an error reply becomes its errno).
fn request(kind: u16, body: &[u8], expect: u16) -> io::Result<Vec<u8>> {
    // SAFETY: plain socket(2) with integer arguments; the result is checked before it is owned.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    })?;
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    crate::socket::set_recv_timeout(fd.as_raw_fd(), std::time::Duration::from_secs(1))?;
    let seq: u32 = 1;
    let mut msg = Vec::with_capacity(NLMSG_HDR + body.len());
    msg.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(body);
    // SAFETY: an all-zero sockaddr_nl is the kernel's address (pid 0, no groups).
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: msg and kernel are live for the call and their sizes are passed; the kernel
    // only reads them.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    crate::cvt_size(sent)?;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: buf is live and writable for the call and its length is passed.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        let n = crate::cvt_size(n)?.min(buf.len());
        let mut rest = &buf[..n];
        while rest.len() >= NLMSG_HDR {
            let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let t = u16::from_ne_bytes([rest[4], rest[5]]);
            let s = u32::from_ne_bytes([rest[8], rest[9], rest[10], rest[11]]);
            let m = rest.get(NLMSG_HDR..len).ok_or_else(malformed)?;
            rest = rest.get(align4(len)..).unwrap_or(&[]);
            if s != seq {
                continue;
            }
            if t == libc::NLMSG_ERROR as u16 {
                let code = m
                    .get(..4)
                    .and_then(|c| c.try_into().ok())
                    .map(i32::from_ne_bytes)
                    .ok_or_else(malformed)?;
                return Err(if code == 0 {
                    io::Error::other("netlink request acknowledged without an answer")
                } else {
                    io::Error::from_raw_os_error(-code)
                });
            }
            if t == expect {
                return Ok(m.to_vec());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_walked_and_bounded() {
        let mut b = Vec::new();
        push_attr(&mut b, RTA_OIF, &7u32.to_ne_bytes());
        push_attr(&mut b, RTA_GATEWAY, &[192, 0, 2, 1]);
        push_attr(&mut b, 9, &[1, 2, 3]);
        let got: Vec<_> = Attrs(&b).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[1], (RTA_GATEWAY, &[192u8, 0, 2, 1][..]));
        assert_eq!(got[2].1, &[1, 2, 3]);
        // A length past the end, or shorter than the header, ends the walk.
        assert_eq!(Attrs(&[200, 0, 1, 0, 9]).count(), 0);
        assert_eq!(Attrs(&[2, 0, 1, 0]).count(), 0);
        assert_eq!(Attrs(&[]).count(), 0);
    }

    #[test]
    fn loopback_routes_are_found() {
        let r = route_get(IpAddr::from([127, 0, 0, 1]), None).unwrap();
        let l = link_get(r.ifindex).unwrap();
        assert!(!l.ethernet);
        assert!(l.mtu >= 1280);
        assert_eq!(
            neighbour_get(r.ifindex, IpAddr::from([192, 0, 2, 77])).unwrap(),
            None
        );
    }
}
