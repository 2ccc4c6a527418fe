//! The takeover's triggers: `gate64 ha promote` and SIGUSR1 ([`HaHandle::promote`]), and
//! the state `gate64 ha status` shows ([`HaHandle::status`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gate64_control::{HaState, Promoted};
use tokio::sync::mpsc;

use super::{Counters, FLUSH_EVERY, Task};

/// How long the peer may send nothing that authenticates before it counts as quiet: three
/// flush intervals, each of which carries at least the peer's child SA sweep while it has
/// clients (and its IKE SAs when their message IDs moved).
pub(crate) const QUIET_AFTER: Duration = Duration::from_secs(3 * FLUSH_EVERY.as_secs());

/// What the sync task is asked from outside.
pub(super) enum Ask {
    /// Take over every stored SA.
    Promote(Reply),
    /// Describe the channel.
    Status(std::sync::mpsc::Sender<HaState>),
}

/// Where a takeover's result goes: the control socket's waiting request, or nowhere
/// (SIGUSR1).
#[derive(Clone)]
pub(super) struct Reply(Option<std::sync::mpsc::Sender<Promoted>>);

impl Reply {
    pub(super) fn send(&self, promoted: Promoted) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(promoted);
        }
    }
}

/// The running channel's handle.
#[derive(Clone)]
pub(crate) struct HaHandle {
    asks: mpsc::UnboundedSender<Ask>,
    peer: SocketAddr,
    counters: Arc<Counters>,
}

impl HaHandle {
    pub(super) fn new(
        asks: mpsc::UnboundedSender<Ask>,
        peer: SocketAddr,
        counters: Arc<Counters>,
    ) -> Self {
        HaHandle {
            asks,
            peer,
            counters,
        }
    }

    /// Takes over: installs every SA the peer synced (SIGUSR1), without waiting.
    pub(crate) fn promote(&self) {
        let _ = self.asks.send(Ask::Promote(Reply(None)));
    }

    /// Takes over and waits, up to `timeout`, for what was installed (`gate64 ha promote`).
    /// Blocks the calling thread.
    pub(crate) fn promote_and_wait(&self, timeout: Duration) -> Promoted {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.asks.send(Ask::Promote(Reply(Some(tx)))).is_err() {
            return Promoted::refused("the HA sync task has stopped");
        }
        rx.recv_timeout(timeout).unwrap_or_else(|_| {
            Promoted::refused("the takeover did not finish in time; see the daemon's log")
        })
    }

    /// The channel's state (`gate64 ha status`), waiting up to `timeout`. Blocks the calling
    /// thread.
    pub(crate) fn status(&self, timeout: Duration) -> HaState {
        let (tx, rx) = std::sync::mpsc::channel();
        let answered = self.asks.send(Ask::Status(tx)).is_ok();
        match answered.then(|| rx.recv_timeout(timeout).ok()).flatten() {
            Some(state) => state,
            None => HaState {
                peer: Some(self.peer.to_string()),
                error: Some("the HA sync task did not answer".to_owned()),
                ..HaState::default()
            },
        }
    }

    /// The counters.
    pub(crate) fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }
}

/// Whether a peer last heard from at `last` counts as quiet at `now`.
pub(super) fn peer_quiet(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|t| now.saturating_duration_since(t) > QUIET_AFTER)
}

impl Task {
    pub(super) fn answer(&mut self, ask: Ask) {
        match ask {
            Ask::Promote(reply) => self.takeover(reply),
            Ask::Status(tx) => {
                let _ = tx.send(self.state(Instant::now()));
            }
        }
    }

    fn state(&self, now: Instant) -> HaState {
        let (ike, child) = self.inbox.store.len();
        let last = self.inbox.last_authentic;
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        HaState {
            peer: Some(self.peer.to_string()),
            stored_ike_sas: ike as u64,
            stored_child_sas: child as u64,
            last_from_peer_secs: last.map(|t| now.saturating_duration_since(t).as_secs_f64()),
            peer_quiet: peer_quiet(last, now),
            installed: get(&self.counters.installed),
            install_failed: get(&self.counters.install_failed),
            on_demand: get(&self.counters.on_demand),
            error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_is_quiet_only_past_three_flush_intervals() {
        let now = Instant::now() + Duration::from_secs(60);
        assert!(peer_quiet(None, now), "never heard");
        assert!(!peer_quiet(Some(now), now));
        assert!(!peer_quiet(Some(now - QUIET_AFTER), now));
        assert!(peer_quiet(
            Some(now - QUIET_AFTER - Duration::from_millis(1)),
            now
        ));
        assert_eq!(QUIET_AFTER, Duration::from_secs(3));
    }
}
