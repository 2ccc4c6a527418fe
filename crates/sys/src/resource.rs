//! Process resources: the open-file limit, CPU clocks (the `/proc` tick rate, a thread's CPU
//! clock) and glibc's heap statistics, for the daemon's start-up and the benchmarks.

use std::io;
use std::time::Duration;

use crate::cvt;

/// The soft and hard `RLIMIT_NOFILE` of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The soft limit: what `open` is held to.
    pub soft: u64,
    /// The hard limit: the most the soft one may be raised to without CAP_SYS_RESOURCE.
    pub hard: u64,
}

/// This process's open-file limit (`getrlimit(RLIMIT_NOFILE)`).
pub fn nofile_limit() -> io::Result<Limit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed, which is live for the call.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    Ok(Limit {
        soft: lim.rlim_cur,
        hard: lim.rlim_max,
    })
}

/// Sets this process's open-file limit (`setrlimit(RLIMIT_NOFILE)`).
pub fn set_nofile_limit(limit: Limit) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: limit.soft,
        rlim_max: limit.hard,
    };
    // SAFETY: setrlimit only reads the struct passed, which is live for the call.
    cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    Ok(())
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, and to `want` past it when this process
/// may raise the hard limit too (CAP_SYS_RESOURCE, e.g. root before gate64 drops privileges).
/// Returns the soft limit now (0 when it cannot be read).
pub fn raise_nofile(want: u64) -> u64 {
    let Ok(mut lim) = nofile_limit() else {
        return 0;
    };
    let target = lim.hard.max(want);
    if lim.soft < target {
        let raised = Limit {
            soft: target,
            hard: target,
        };
        if set_nofile_limit(raised).is_err() {
            let _ = set_nofile_limit(Limit {
                soft: lim.hard,
                hard: lim.hard,
            });
        }
        if let Ok(now) = nofile_limit() {
            lim = now;
        }
    }
    lim.soft
}

/// Clock ticks per second of the CPU times in `/proc/PID/stat` (`sysconf(_SC_CLK_TCK)`);
/// `None` when the system does not say.
pub fn clock_ticks_per_sec() -> Option<u64> {
    // SAFETY: sysconf takes an integer and touches no memory of ours.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&hz| hz > 0)
}

/// The CPU-time clock of one thread (`pthread_getcpuclockid`), readable from any thread of
/// the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadCpuClock(libc::clockid_t);

impl ThreadCpuClock {
    /// The clock of the calling thread.
    pub fn current() -> io::Result<ThreadCpuClock> {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: pthread_self is the live calling thread; `clock` is writable for the call.
        let r = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        Ok(ThreadCpuClock(clock))
    }

    /// CPU time the thread has used (`clock_gettime`); zero when the clock cannot be read
    /// (the thread has ended).
    pub fn elapsed(self) -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call.
        if unsafe { libc::clock_gettime(self.0, &mut ts) } != 0 {
            return Duration::ZERO;
        }
        Duration::new(
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u32::try_from(ts.tv_nsec).unwrap_or(0),
        )
    }
}

/// Bytes in use in glibc malloc's chunks, chunk headers included, and in blocks it mapped
/// apart from its arenas (`mallinfo2`: `uordblks + hblkhd`).
pub fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 takes nothing and only reads the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

/// Hands the free pages of glibc malloc's heap back to the kernel (`malloc_trim(0)`), so that
/// memory a large, short-lived build used (a status listing every IKE SA, tens of MB in
/// small blocks among the SAs' own) stops counting in the RSS. Off the packet path: it walks
/// every arena, holding each one's lock. Returns whether any memory was released.
pub fn release_free_heap() -> bool {
    // SAFETY: malloc_trim takes a size and only rearranges the allocator's free memory.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_heap_goes_back_to_the_kernel() {
        // 64 MB in blocks small enough to come from the arena, freed apart from every
        // 64th block: the rest is free memory in the middle of the heap.
        let mut blocks: Vec<Vec<u8>> = (0..16_384).map(|_| vec![1u8; 4096]).collect();
        let kept: Vec<Vec<u8>> = blocks.iter().step_by(64).cloned().collect();
        blocks.clear();
        blocks.shrink_to_fit();
        assert!(release_free_heap(), "nothing was released");
        drop(kept);
    }

    #[test]
    fn the_soft_limit_reaches_the_hard_one() {
        let before = nofile_limit().unwrap();
        let soft = raise_nofile(0);
        let after = nofile_limit().unwrap();
        assert_eq!(soft, after.soft);
        assert!(after.soft >= before.soft);
        assert_eq!(after.soft, after.hard);
    }

    #[test]
    fn clocks_and_heap_are_read() {
        assert!(clock_ticks_per_sec().is_some_and(|hz| hz >= 1));
        let clock = ThreadCpuClock::current().unwrap();
        let start = clock.elapsed();
        let mut x = 0u64;
        while clock.elapsed() <= start {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        // black_box keeps the optimiser from removing an allocation nothing reads (it does
        // in release builds). A 1 MiB block is above malloc's mmap threshold: it counts in
        // `hblkhd` while it lives and is unmapped, so no longer counted, when freed.
        let block = std::hint::black_box(vec![1u8; 1 << 20]);
        let with_block = heap_in_use();
        assert!(with_block >= block.len(), "{with_block} < {}", block.len());
        drop(std::hint::black_box(block));
        let without = heap_in_use();
        assert!(
            without < with_block,
            "freeing 1 MiB left the heap at {without} (was {with_block})"
        );
    }
}
