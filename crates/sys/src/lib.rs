//! Every Linux system call gate64 makes through `libc`, behind safe functions, in the manner
//! of quinn-udp: this crate holds all of the workspace's `unsafe` code, and every other crate
//! has `#![forbid(unsafe_code)]`. Each `unsafe` block carries a `// SAFETY:` comment saying
//! why it is sound (`clippy::undocumented_unsafe_blocks` is denied here).
//!
//! The functions take descriptors as `RawFd`, as the drivers hold them: a wrong number makes
//! the call fail or act on another descriptor of this process, but never lets the kernel read
//! or write memory the call was not given. Callers keep their own logic (batching policy,
//! what to do on failure); a module here only makes the calls.
//!
//! | module | calls |
//! |---|---|
//! | [`udp`] | `recvmmsg`, `sendmmsg`, UDP GSO (`sendmsg` with `UDP_SEGMENT`) |
//! | [`socket`] | socket options: forced buffers, PMTU discovery, TCP_NOTSENT_LOWAT, SO_RCVTIMEO; drop counts |
//! | [`fd`] | `read`, `write`, `writev`, `epoll` |
//! | [`tun`] | TUN ioctls: TUNSETIFF, TUNSETOFFLOAD (virtio-net offloads), TUNSETSNDBUF; SIOCGIFMTU, SIOCETHTOOL (features) |
//! | [`privilege`] | user database, capabilities, the per-thread privilege drop and its signal |
//! | [`namespace`] | `unshare`, `setns`, `mount` |
//! | [`process`] | effective ids, `kill`, signal dispositions, the parent-death signal |
//! | [`resource`] | RLIMIT_NOFILE, clock ticks, thread CPU clocks, malloc statistics |
//! | [`random`] | `getrandom` |
//! | [`packet`] | `AF_PACKET` sockets: capture (tests), frame writing with `sendmmsg` (GRE) |
//! | [`netlink`] | `NETLINK_ROUTE` route, link and neighbour look-ups |
//! | [`rsa_sha1`] | aws-lc's `RSA_sign` with SHA-1 (IKEv2 AUTH method 1; aws-lc-rs has no SHA-1 RSA signing) |
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod fd;
pub mod namespace;
pub mod netlink;
pub mod packet;
pub mod privilege;
pub mod process;
pub mod random;
pub mod resource;
pub mod rsa_sha1;
pub mod socket;
pub mod tun;
pub mod udp;

use std::io;

/// A `c_int` result of a system call: the value, or the thread's errno when negative.
fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A `ssize_t` result of a system call: the byte count, or the thread's errno when negative.
fn cvt_size(r: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}
