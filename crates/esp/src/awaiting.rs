//! The child SAs another node synced here that wait for a takeover, as the ESP stage sees
//! them: a set of inbound SPIs the HA sync task publishes ([`AwaitingTakeover::publish`]),
//! read by each worker through a [`AwaitingView`] of its own (one atomic load per lookup
//! while the set is unchanged; the lock only when it changed), and where ESP for one of
//! them goes ([`AwaitingTakeover::offer`]: handed to the sink the sync task set, which must
//! not block and copies the packet only once its bounded queue has room for it). Only ESP
//! whose SPI found no SA is looked up here.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// ESP packets longer than this (from the SPI to the end of the ICV) are not offered.
pub const MAX_ESP_CANDIDATE: usize = 2048;

/// An ESP packet for a child SA awaiting a takeover; unauthenticated.
#[derive(Debug)]
pub struct EspCandidate {
    /// Who sent it: the client's outer address (port 0 when it came through a transport).
    pub remote: SocketAddr,
    /// The ESP packet, from the SPI to the end of the ICV.
    pub esp: Vec<u8>,
}

/// Where an offered packet goes, with its sender: the sink copies it (into an
/// [`EspCandidate`]) only after it has a place for it in its queue, so a full queue costs no
/// allocation; true when it was taken, false when the queue was full.
type Sink = Box<dyn Fn(SocketAddr, &[u8]) -> bool + Send + Sync>;

/// The published set and the sink.
#[derive(Default)]
pub struct AwaitingTakeover {
    /// Moves with every publication; 0 before the first.
    generation: AtomicU64,
    spis: Mutex<Arc<HashSet<u32>>>,
    sink: OnceLock<Sink>,
}

impl std::fmt::Debug for AwaitingTakeover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwaitingTakeover")
            .field("generation", &self.generation.load(Ordering::Relaxed))
            .field("sink", &self.sink.get().is_some())
            .finish()
    }
}

/// One worker's copy of the published set.
#[derive(Debug, Default)]
pub struct AwaitingView {
    generation: u64,
    spis: Arc<HashSet<u32>>,
}

impl AwaitingTakeover {
    /// Makes `spis` the set of inbound SPIs awaiting a takeover; workers see it at their
    /// next lookup.
    pub fn publish(&self, spis: HashSet<u32>) {
        let mut held = self.spis.lock().unwrap_or_else(PoisonError::into_inner);
        *held = Arc::new(spis);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Sets where offered packets go (once; later calls change nothing and return false).
    /// `sink(remote, esp)` must not block, and should copy `esp` only once its queue has room.
    pub fn set_sink(
        &self,
        sink: impl Fn(SocketAddr, &[u8]) -> bool + Send + Sync + 'static,
    ) -> bool {
        self.sink.set(Box::new(sink)).is_ok()
    }

    /// Whether inbound SPI `spi` awaits a takeover, as of the last publication; `view` is
    /// the calling worker's copy, refreshed when a publication came since.
    pub fn contains(&self, view: &mut AwaitingView, spi: u32) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        if generation != view.generation {
            let held = self.spis.lock().unwrap_or_else(PoisonError::into_inner);
            view.spis = Arc::clone(&held);
            view.generation = generation;
        }
        view.spis.contains(&spi)
    }

    /// Hands `esp` from `remote` to the sink, which copies it if its queue has room. Nothing
    /// happens without a sink or for a packet over [`MAX_ESP_CANDIDATE`] bytes; false when
    /// the sink's queue was full (the sink counts that).
    pub fn offer(&self, remote: SocketAddr, esp: &[u8]) -> bool {
        let Some(sink) = self.sink.get() else {
            return false;
        };
        if esp.len() > MAX_ESP_CANDIDATE {
            return false;
        }
        sink(remote, esp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_view_follows_each_publication() {
        let awaiting = AwaitingTakeover::default();
        let mut view = AwaitingView::default();
        assert!(!awaiting.contains(&mut view, 7), "nothing published");
        awaiting.publish([7, 8].into_iter().collect());
        assert!(awaiting.contains(&mut view, 7) && awaiting.contains(&mut view, 8));
        assert!(!awaiting.contains(&mut view, 9));
        awaiting.publish([9].into_iter().collect());
        assert!(!awaiting.contains(&mut view, 7), "taken over since");
        assert!(awaiting.contains(&mut view, 9));
        let mut late = AwaitingView::default();
        assert!(
            awaiting.contains(&mut late, 9),
            "a new view reads the latest"
        );
    }

    #[test]
    fn offers_are_copied_bounded_and_need_a_sink() {
        let awaiting = AwaitingTakeover::default();
        let remote: SocketAddr = "192.0.2.50:4500".parse().unwrap();
        assert!(!awaiting.offer(remote, &[1, 2, 3]), "no sink yet");
        let (tx, rx) = mpsc::sync_channel(1);
        assert!(awaiting.set_sink(move |remote, esp| {
            let esp = esp.to_vec();
            tx.try_send(EspCandidate { remote, esp }).is_ok()
        }));
        assert!(!awaiting.set_sink(|_, _| true), "set once");
        assert!(awaiting.offer(remote, &[1, 2, 3]));
        assert!(!awaiting.offer(remote, &[4]), "the queue is full");
        assert!(!awaiting.offer(remote, &vec![0; MAX_ESP_CANDIDATE + 1]));
        let got = rx.try_recv().unwrap();
        assert_eq!((got.remote, got.esp), (remote, vec![1, 2, 3]));
        assert!(rx.try_recv().is_err());
    }
}
