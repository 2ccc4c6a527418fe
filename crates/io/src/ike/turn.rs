//! How much input one turn of the IKE loop takes before it runs the responder's timers and
//! the auth threads' finished verdicts again: at most [`TURN_DATAGRAMS`] datagrams, and no
//! new batch once [`TURN_READ_TIME`] has passed. A socket that is always readable (a flood,
//! or 200,000 clients' answers) then cannot hold back retransmissions, liveness checks and
//! set-ups waiting for their verdicts: every turn ends with the timers that are due and the
//! verdicts that are ready, whatever woke it. The time between two such ends is at most
//! `TURN_READ_TIME` plus one batch ([`BATCH`] datagrams, each at most one IKE_AUTH verified
//! inline when there are no auth threads), plus the timers' own work and sending what the
//! turn queued.
//!
//! A timer alone wakes the loop at most once per [`TIMER_SLACK`]: the liveness checks of
//! many IKE SAs are spread over their interval on purpose, so with 200,000 SAs one falls due
//! every 150 µs, and a wake each (a system call to sleep, another to send, and the worker
//! that relays the check woken as often) cost more than the checks. Waking at most every
//! `TIMER_SLACK` handles whatever fell due meanwhile in one turn; nothing the timers run
//! (retransmissions 5 s apart, expiry after seconds, liveness checks after tens of seconds)
//! notices a deadline met that much late.

use std::time::{Duration, Instant};

use crate::sys::BATCH;

/// Datagrams one turn reads at most: 8 `recvmmsg` batches of [`BATCH`], enough to drain a
/// flood at a few system calls per thousand datagrams.
pub(super) const TURN_DATAGRAMS: usize = 8 * BATCH;

/// Time after which a turn reads no further batch: the most the timers and verdicts wait for
/// input, short beside the 5 s between retransmissions of a liveness check.
pub(super) const TURN_READ_TIME: Duration = Duration::from_millis(20);

/// The input one turn has taken so far.
#[derive(Debug)]
pub(super) struct Turn {
    started: Instant,
    read: usize,
}

impl Turn {
    /// A turn starting at `now`.
    pub(super) fn new(now: Instant) -> Self {
        Turn {
            started: now,
            read: 0,
        }
    }

    /// Whether the turn may read another batch at `now`.
    pub(super) fn may_read(&self, now: Instant) -> bool {
        self.read + BATCH <= TURN_DATAGRAMS && now < self.started + TURN_READ_TIME
    }

    /// Counts `n` datagrams read.
    pub(super) fn read(&mut self, n: usize) {
        self.read = self.read.saturating_add(n);
    }
}

/// The most a timer's deadline is put off so that the timers due within it run together.
pub(super) const TIMER_SLACK: Duration = Duration::from_millis(25);

/// When the loop wakes for the responder's timers: their next deadline (`next`: its
/// `poll_timeout`), but no sooner than [`TIMER_SLACK`] after the timers last ran.
pub(super) fn timer_wake(next: Option<Instant>, last_run: Instant) -> Option<Instant> {
    next.map(|at| at.max(last_run + TIMER_SLACK))
}

/// Whether the responder's timers are due at `now` (`next`: its `poll_timeout`).
pub(super) fn timers_due(next: Option<Instant>, now: Instant) -> bool {
    next.is_some_and(|at| at <= now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_reads_at_most_its_datagrams() {
        let t0 = Instant::now();
        let mut turn = Turn::new(t0);
        let mut batches = 0;
        while turn.may_read(t0) {
            turn.read(BATCH);
            batches += 1;
            assert!(batches <= 100, "unbounded");
        }
        assert_eq!(batches * BATCH, TURN_DATAGRAMS);
        // Short batches (a socket nearly drained) still count what they read.
        let mut turn = Turn::new(t0);
        turn.read(TURN_DATAGRAMS - BATCH);
        assert!(turn.may_read(t0));
        turn.read(1);
        assert!(!turn.may_read(t0), "a full batch no longer fits");
    }

    #[test]
    fn a_turn_reads_no_batch_past_its_time() {
        let t0 = Instant::now();
        let turn = Turn::new(t0);
        assert!(turn.may_read(t0 + TURN_READ_TIME - Duration::from_micros(1)));
        assert!(!turn.may_read(t0 + TURN_READ_TIME));
    }

    #[test]
    fn timers_are_due_at_their_deadline() {
        let t0 = Instant::now();
        assert!(timers_due(Some(t0), t0));
        assert!(timers_due(Some(t0), t0 + Duration::from_millis(1)));
        assert!(!timers_due(Some(t0 + Duration::from_millis(1)), t0));
        assert!(!timers_due(None, t0));
    }

    #[test]
    fn a_timer_wakes_the_loop_at_most_once_per_slack() {
        // A second on, so that a second before it is a valid Instant on any machine.
        let t0 = Instant::now() + Duration::from_secs(1);
        let soon = t0 + Duration::from_millis(1);
        assert_eq!(timer_wake(Some(soon), t0), Some(t0 + TIMER_SLACK));
        let later = t0 + TIMER_SLACK + Duration::from_millis(5);
        assert_eq!(
            timer_wake(Some(later), t0),
            Some(later),
            "a later deadline is kept"
        );
        // Timers that ran long ago do not hold back one already due.
        let long_ago = t0 - Duration::from_secs(1);
        assert_eq!(timer_wake(Some(t0), long_ago), Some(t0));
        assert_eq!(timer_wake(None, t0), None);
    }
}
