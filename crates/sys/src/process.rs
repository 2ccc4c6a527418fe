//! This process's ids and signals: `geteuid`, `getegid`, `kill`, ignoring a signal, and the
//! signal a child gets when its parent dies.

use std::io;

/// The effective user id.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// The effective group id.
pub fn getegid() -> u32 {
    // SAFETY: getegid has no arguments and cannot fail.
    unsafe { libc::getegid() }
}

/// Sends `signal` to process `pid` (`kill(2)`); refused without a call for `pid` ≤ 0, which
/// would name a process group or every process.
pub fn kill(pid: i32, signal: libc::c_int) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("kill: pid {pid} names no single process"),
        ));
    }
    // SAFETY: kill takes integers only; pid > 0 targets one process.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets `signal`'s disposition to ignore (`SIG_IGN`): no handler runs.
pub fn ignore_signal(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: SIG_IGN is a constant disposition; no code of ours runs on the signal.
    if unsafe { libc::signal(signal, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel to send `signal` to this process when its parent ends
/// (`PR_SET_PDEATHSIG`).
pub fn set_parent_death_signal(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl with integer arguments; no memory is passed.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_proc_and_kill_refuses_groups() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let second = |key: &str| -> u32 {
            let line = status.lines().find(|l| l.starts_with(key)).unwrap();
            line.split_whitespace().nth(2).unwrap().parse().unwrap()
        };
        assert_eq!(geteuid(), second("Uid:"));
        assert_eq!(getegid(), second("Gid:"));
        assert_eq!(
            kill(0, libc::SIGTERM).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        // Signal 0 checks that the process exists and sends nothing.
        kill(std::process::id() as i32, 0).unwrap();
    }
}
