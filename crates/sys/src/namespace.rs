//! Namespaces and mounts: `unshare`, `setns` and `mount`, as `gate64 demo`'s unprivileged lab,
//! the test harness and the TUN benchmark use them.

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;

pub use libc::{CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWUSER, MS_PRIVATE, MS_REC};

/// Moves the calling thread into new namespaces of the kinds in `flags` (`CLONE_NEW*`), as
/// `unshare(2)` does; a new user namespace needs a single-threaded process (EINVAL otherwise).
pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes flags only; no memory is passed.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Moves the calling thread into the network namespace `fd` refers to (an open
/// `/run/netns/NAME` or `/proc/PID/ns/net`), as `setns(fd, CLONE_NEWNET)` does.
pub fn enter_net(fd: RawFd) -> io::Result<()> {
    // SAFETY: setns only reads the descriptor number; CLONE_NEWNET affects the calling thread
    // alone.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `mount(2)` with no filesystem data: `source` on `target` of type `fstype`, or a change of
/// `target`'s propagation when `flags` say so (`MS_REC | MS_PRIVATE`).
pub fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
) -> io::Result<()> {
    let ptr = |s: Option<&CStr>| s.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is a NUL-terminated string that outlives the call, or null where
    // mount(2) allows it.
    let rc = unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
