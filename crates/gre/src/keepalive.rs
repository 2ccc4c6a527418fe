//! Keepalive timer and up/down state of one tunnel, as Cisco IOS runs them: a keepalive every
//! `interval`; each one sent while the previous ones are unanswered counts a miss; more than
//! `retries` misses and the tunnel is down; any answer resets the count and brings it up.

use std::time::Instant;

use crate::Keepalive;

pub(crate) struct Timer {
    config: Option<Keepalive>,
    next: Option<Instant>,
    unanswered: u32,
    up: bool,
}

impl Timer {
    pub(crate) fn new(config: Option<Keepalive>, now: Instant) -> Timer {
        Timer {
            next: config.map(|k| now + k.interval),
            config,
            unanswered: 0,
            up: true,
        }
    }

    pub(crate) fn is_up(&self) -> bool {
        self.up
    }

    pub(crate) fn due(&self) -> Option<Instant> {
        self.next
    }

    /// An answer arrived: the peer is there.
    pub(crate) fn answered(&mut self) {
        self.unanswered = 0;
        self.up = true;
    }

    /// Runs the timer at `now`; true when a keepalive is to be sent.
    pub(crate) fn fire(&mut self, now: Instant) -> bool {
        let (Some(config), Some(next)) = (self.config, self.next) else {
            return false;
        };
        if now < next {
            return false;
        }
        if self.unanswered >= config.retries {
            self.up = false;
        }
        self.unanswered = self.unanswered.saturating_add(1);
        // A late call (a stalled thread) sends one keepalive, not a burst to catch up.
        self.next = Some(now.max(next) + config.interval);
        true
    }
}
