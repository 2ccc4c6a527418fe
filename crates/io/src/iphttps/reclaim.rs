//! Reclaiming handshake slots under pressure. `limits.max_tls_handshakes` bounds the set-ups
//! (TLS handshake and HTTP request) in progress; a host that opens connections and then
//! crawls through them could hold its slots until their deadline, and a few such hosts every
//! slot. So when a newcomer finds every slot taken, the oldest set-up that has run for at
//! least [`Reclaim::min_age`] is cut and its slot goes to the newcomer: oldest incomplete
//! first. An honest client finishes in a few round trips, well inside that age, so only the
//! slow are cut; a newcomer that finds nothing old enough waits for a slot as before.
//!
//! Each set-up holding a slot registers a [`Ticket`]; the registry keeps them in accept
//! order, so finding the oldest is O(log n) and the registry is bounded by the slots.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The set-ups that hold a handshake slot, oldest first.
#[derive(Debug)]
pub(super) struct Reclaim {
    min_age: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    /// By (accept time, id): the id keeps set-ups accepted in the same instant apart.
    holders: BTreeMap<(Instant, u64), Arc<Notify>>,
}

impl Reclaim {
    /// A registry that cuts set-ups older than `min_age` for a newcomer.
    pub(super) fn new(min_age: Duration) -> Arc<Self> {
        Arc::new(Reclaim {
            min_age,
            state: Mutex::new(State::default()),
        })
    }

    /// The age a set-up must reach before a newcomer may take its slot: a quarter of the
    /// set-up deadline (`limits.tls_handshake_timeout_secs`), at least one second. An honest
    /// client needs a few round trips; a host that holds its slot longer than that is the
    /// one to cut.
    pub(super) fn min_age_for(handshake_timeout: Duration) -> Duration {
        (handshake_timeout / 4).max(Duration::from_secs(1))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update below is a single map operation: the map is whole if one panicked.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a set-up accepted at `accepted` that now holds a slot.
    pub(super) fn register(self: &Arc<Self>, accepted: Instant) -> Ticket {
        let notify = Arc::new(Notify::new());
        let mut s = self.lock();
        let key = (accepted, s.next_id);
        s.next_id = s.next_id.wrapping_add(1);
        s.holders.insert(key, Arc::clone(&notify));
        Ticket {
            registry: Arc::clone(self),
            key,
            notify,
        }
    }

    /// Every slot is taken: cuts the oldest set-up accepted at least `min_age` before `now`.
    /// Returns whether one was cut (its slot comes free once its task sees the notice).
    pub(super) fn reclaim_oldest(&self, now: Instant) -> bool {
        let mut s = self.lock();
        let Some((&key, _)) = s.holders.first_key_value() else {
            return false;
        };
        if now.saturating_duration_since(key.0) < self.min_age {
            return false;
        }
        match s.holders.remove(&key) {
            Some(notify) => {
                // notify_one keeps the notice if the task is between two awaits.
                notify.notify_one();
                true
            }
            None => false,
        }
    }

    /// Set-ups registered now.
    #[cfg(test)]
    pub(super) fn holders(&self) -> usize {
        self.lock().holders.len()
    }
}

/// A set-up's place in the registry, removed when dropped (link-up, failure, or cut).
#[derive(Debug)]
pub(super) struct Ticket {
    registry: Arc<Reclaim>,
    key: (Instant, u64),
    notify: Arc<Notify>,
}

impl Ticket {
    /// Completes when a newcomer has reclaimed this set-up's slot.
    pub(super) async fn reclaimed(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.registry.lock().holders.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_setup_past_the_minimum_age_is_cut_first() {
        let r = Reclaim::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let oldest = r.register(t0);
        let younger = r.register(t0 + Duration::from_millis(500));
        // Nothing is old enough yet: no cut.
        assert!(!r.reclaim_oldest(t0 + Duration::from_secs(1)));
        assert!(r.reclaim_oldest(t0 + Duration::from_millis(2600)));
        tokio::time::timeout(Duration::from_secs(5), oldest.reclaimed())
            .await
            .expect("the oldest heard it");
        assert!(
            tokio::time::timeout(Duration::from_millis(10), younger.reclaimed())
                .await
                .is_err(),
            "the younger one was not cut"
        );
        assert_eq!(r.holders(), 1);
        drop((oldest, younger));
        assert_eq!(r.holders(), 0);
        assert!(
            !r.reclaim_oldest(t0 + Duration::from_secs(60)),
            "an empty registry cuts nothing"
        );
    }

    #[test]
    fn the_minimum_age_is_a_quarter_of_the_deadline_and_at_least_a_second() {
        assert_eq!(
            Reclaim::min_age_for(Duration::from_secs(10)),
            Duration::from_millis(2500)
        );
        assert_eq!(
            Reclaim::min_age_for(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
    }
}
