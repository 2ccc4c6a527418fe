//! Credentials: the user database (`getpwnam_r`, `getgrnam_r`), capabilities (`capget`,
//! `capset`, the bounding and ambient sets through `prctl`), and a per-thread privilege drop
//! (`setgroups`, `setresgid`, `setresuid`, `capset`, `PR_SET_NO_NEW_PRIVS`) that every thread
//! of the process runs, the others in a signal handler of this module.
//!
//! Linux keeps credentials per thread, and the raw system calls here change the calling
//! thread only (glibc's wrappers would broadcast to every thread, which a signal handler must
//! not start). [`install_drop_handler`] publishes the plan through atomics and installs the
//! handler; the caller signals each thread with [`signal_thread`] and reads the outcome back.

use std::ffi::CStr;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};

/// `_LINUX_CAPABILITY_VERSION_3` (linux/capability.h): two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// No uid/gid change (`u32::MAX` is `(uid_t)-1`, never a valid id).
const NO_ID: u32 = u32::MAX;

/// linux/capability.h `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// linux/capability.h `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const HEADER: CapHeader = CapHeader {
    version: CAPABILITY_VERSION_3,
    pid: 0,
};

/// NSS entries fit easily; a larger one is reported (ERANGE), not truncated.
const NSS_BUFFER: usize = 64 * 1024;

/// A user database entry's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    /// The user id.
    pub uid: u32,
    /// The user's primary group id.
    pub gid: u32,
}

/// Looks `name` up in the host's user database (`getpwnam_r`); `None` when there is no such
/// user.
pub fn lookup_user(name: &CStr) -> io::Result<Option<UserIds>> {
    let mut buf = vec![0 as libc::c_char; NSS_BUFFER];
    // SAFETY: a zeroed passwd is a valid out-parameter (null pointers, zero ids).
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is live for the call and `buf.len()` is its length; the strings
    // getpwnam_r points into `buf` are not read here.
    let r = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok((!found.is_null()).then_some(UserIds {
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    }))
}

/// Looks `name` up in the host's group database (`getgrnam_r`); `None` when there is no such
/// group.
pub fn lookup_group(name: &CStr) -> io::Result<Option<u32>> {
    let mut buf = vec![0 as libc::c_char; NSS_BUFFER];
    // SAFETY: a zeroed group is a valid out-parameter (null pointers, zero id).
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is live for the call and `buf.len()` is its length; the strings
    // getgrnam_r points into `buf` are not read here.
    let r = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok((!found.is_null()).then_some(grp.gr_gid))
}

/// Whether capability `cap` is in the bounding set (`PR_CAPBSET_READ`); an error (EINVAL)
/// past the highest capability this kernel knows.
pub fn capbset_read(cap: u32) -> io::Result<bool> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0, 0, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r == 1)
}

/// The calling thread's effective capability set, one bit per capability (`capget`).
pub fn effective_capabilities() -> io::Result<u64> {
    let mut data = [CapData::default(); 2];
    // SAFETY: header and data are live and laid out for version 3 (two data words).
    let r = unsafe { libc::syscall(libc::SYS_capget, &HEADER, data.as_mut_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from(data[0].effective) | u64::from(data[1].effective) << 32)
}

/// Sets the calling thread's effective, permitted and inheritable capability sets, one bit
/// per capability (`capset`).
pub fn set_capabilities(effective: u64, permitted: u64, inheritable: u64) -> io::Result<()> {
    let word = |set: u64, i: u32| (set >> (32 * i)) as u32;
    let data = [0, 1].map(|i| CapData {
        effective: word(effective, i),
        permitted: word(permitted, i),
        inheritable: word(inheritable, i),
    });
    // SAFETY: header and data are live and laid out for version 3 (two data words); the
    // kernel only reads them.
    let r = unsafe { libc::syscall(libc::SYS_capset, &HEADER, data.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What every thread must do in [`drop_this_thread`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropPlan {
    /// Clear the bounding set (needs CAP_SETPCAP).
    pub clear_bounding: bool,
    /// The highest capability to clear from the bounding set.
    pub last_cap: u32,
    /// Switch to this user and group (`(uid, gid)`), with no supplementary groups.
    pub ids: Option<(u32, u32)>,
}

/// A step of [`drop_this_thread`], in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// PR_CAPBSET_DROP of every capability in the bounding set.
    Bounding = 1,
    /// PR_CAP_AMBIENT_CLEAR_ALL.
    Ambient,
    /// setgroups with no groups.
    Groups,
    /// setresgid.
    Gid,
    /// setresuid.
    Uid,
    /// capset with every set empty.
    Capset,
    /// PR_SET_NO_NEW_PRIVS.
    NoNewPrivs,
}

impl Step {
    const ALL: [Step; 7] = [
        Step::Bounding,
        Step::Ambient,
        Step::Groups,
        Step::Gid,
        Step::Uid,
        Step::Capset,
        Step::NoNewPrivs,
    ];

    /// What the step does, for an error message.
    pub fn what(self) -> &'static str {
        match self {
            Step::Bounding => "clearing the capability bounding set (PR_CAPBSET_DROP)",
            Step::Ambient => "clearing the ambient capabilities (PR_CAP_AMBIENT_CLEAR_ALL)",
            Step::Groups => "dropping the supplementary groups (setgroups)",
            Step::Gid => "switching group (setresgid)",
            Step::Uid => "switching user (setresuid)",
            Step::Capset => "emptying the capability sets (capset)",
            Step::NoNewPrivs => "setting PR_SET_NO_NEW_PRIVS",
        }
    }
}

/// A step of [`drop_this_thread`] that failed, in which thread and with which errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// The step.
    pub step: Step,
    /// Its errno.
    pub errno: i32,
    /// The thread it failed in.
    pub tid: i32,
}

impl Failure {
    /// Packs into one non-zero word for the handler's atomic: step, errno and tid.
    fn encode(self) -> i64 {
        (self.step as i64) << 56 | i64::from(self.errno & 0xff_ffff) << 32 | i64::from(self.tid)
    }

    fn decode(word: i64) -> Option<Failure> {
        let step = Step::ALL.into_iter().find(|s| *s as i64 == word >> 56)?;
        Some(Failure {
            step,
            errno: ((word >> 32) & 0xff_ffff) as i32,
            tid: word as i32,
        })
    }
}

// The plan, shared with the signal handler through atomics (no locks in a handler).
static CLEAR_BOUNDING: AtomicBool = AtomicBool::new(false);
static LAST_CAP: AtomicU32 = AtomicU32::new(0);
static TARGET_UID: AtomicU32 = AtomicU32::new(NO_ID);
static TARGET_GID: AtomicU32 = AtomicU32::new(NO_ID);
/// The first failure in any thread: `Failure::encode`, 0 for none.
static FAILURE: AtomicI64 = AtomicI64::new(0);

fn publish(plan: &DropPlan) {
    CLEAR_BOUNDING.store(plan.clear_bounding, Ordering::SeqCst);
    LAST_CAP.store(plan.last_cap, Ordering::SeqCst);
    let (uid, gid) = plan.ids.unwrap_or((NO_ID, NO_ID));
    TARGET_UID.store(uid, Ordering::SeqCst);
    TARGET_GID.store(gid, Ordering::SeqCst);
    FAILURE.store(0, Ordering::SeqCst);
}

/// Publishes `plan` for [`drop_this_thread`] and installs the handler that runs it on
/// `signal` in whichever thread receives it (SA_RESTART: the threads' blocking calls resume
/// instead of failing EINTR). A failure in a handler is kept for [`first_failure`].
pub fn install_drop_handler(signal: libc::c_int, plan: &DropPlan) -> io::Result<()> {
    publish(plan);
    set_handler(signal, on_drop_signal as *const () as libc::sighandler_t)
}

/// Ignores `signal` again once the drop is done: the handler must not run again, nor kill the
/// process as the default disposition of a real-time signal would.
pub fn remove_drop_handler(signal: libc::c_int) -> io::Result<()> {
    set_handler(signal, libc::SIG_IGN)
}

/// The first failure any thread's handler met since [`install_drop_handler`].
pub fn first_failure() -> Option<Failure> {
    Failure::decode(FAILURE.load(Ordering::SeqCst))
}

/// `handler` is [`on_drop_signal`] or a constant disposition (`SIG_IGN`).
fn set_handler(signal: libc::c_int, handler: libc::sighandler_t) -> io::Result<()> {
    // SAFETY: a zeroed sigaction is valid (empty mask, no flags).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action` is fully initialised and live for the call; its handler is either a
    // constant or `on_drop_signal`, which is async-signal-safe (raw system calls and atomics);
    // the old action is not wanted.
    let r = unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

extern "C" fn on_drop_signal(_: libc::c_int) {
    let saved = errno();
    if let Err(f) = drop_this_thread() {
        let _ = FAILURE.compare_exchange(0, f.encode(), Ordering::SeqCst, Ordering::SeqCst);
    }
    set_errno(saved);
}

/// Runs the published plan in the calling thread: bounding set, ambient set, then (with ids)
/// no supplementary groups, the gid, the uid, then every capability set emptied and
/// `PR_SET_NO_NEW_PRIVS`. Async-signal-safe: raw system calls and atomics only.
pub fn drop_this_thread() -> Result<(), Failure> {
    let step = |step: Step, r: libc::c_long| {
        if r < 0 {
            Err(Failure {
                step,
                errno: errno(),
                tid: gettid(),
            })
        } else {
            Ok(())
        }
    };
    if CLEAR_BOUNDING.load(Ordering::SeqCst) {
        for cap in 0..=LAST_CAP.load(Ordering::SeqCst) {
            let cap = libc::c_ulong::from(cap);
            // SAFETY: prctl with integer arguments only.
            if unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } == 1 {
                // SAFETY: as above.
                let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
                step(Step::Bounding, r.into())?;
            }
        }
    }
    let clear_all = libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong;
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, clear_all, 0, 0, 0) };
    step(Step::Ambient, r.into())?;
    let (uid, gid) = (
        TARGET_UID.load(Ordering::SeqCst),
        TARGET_GID.load(Ordering::SeqCst),
    );
    if uid != NO_ID {
        // SAFETY: a zero-length group list is never read.
        let r = unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) };
        step(Step::Groups, r)?;
        // SAFETY: integer arguments only.
        let r = unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) };
        step(Step::Gid, r)?;
        // SAFETY: integer arguments only.
        let r = unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) };
        step(Step::Uid, r)?;
    }
    let empty = [CapData::default(); 2];
    // SAFETY: header and data are live, laid out for version 3 (two data words).
    let r = unsafe { libc::syscall(libc::SYS_capset, &HEADER, empty.as_ptr()) };
    step(Step::Capset, r)?;
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    step(Step::NoNewPrivs, r.into())
}

/// Sends `signal` to thread `tid` of this process (`tgkill`).
pub fn signal_thread(tid: i32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: tgkill and getpid take integers only; a thread that has ended gives ESRCH.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, signal) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's id (`gettid`).
pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() }
}

fn set_errno(value: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = value }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_survives_the_atomic_word() {
        for step in Step::ALL {
            let f = Failure {
                step,
                errno: libc::EPERM,
                tid: 4_194_303,
            };
            assert_ne!(f.encode(), 0);
            assert_eq!(Failure::decode(f.encode()), Some(f));
        }
        assert_eq!(Failure::decode(0), None);
    }

    #[test]
    fn user_database_and_capabilities_are_read() {
        assert_eq!(
            lookup_user(c"nobody").unwrap(),
            Some(UserIds {
                uid: 65534,
                gid: 65534
            })
        );
        assert_eq!(lookup_user(c"no-such-user-here").unwrap(), None);
        assert_eq!(lookup_group(c"root").unwrap(), Some(0));
        assert_eq!(lookup_group(c"no-such-group-here").unwrap(), None);
        // CAP_CHOWN (0) exists everywhere; 64 is past every kernel's last capability.
        capbset_read(0).unwrap();
        assert!(capbset_read(64).is_err());
        effective_capabilities().unwrap();
        assert!(gettid() > 0);
    }
}
