//! The per-connection bounded send queue of IP-HTTPS. IP-HTTPS has no framing (packets are
//! concatenated on the stream), so the queue is a byte buffer: a UDP worker appends a packet
//! read from the TUN (the one copy on this path) and wakes the connection's writer, which swaps
//! the whole buffer out and writes it into TLS. No allocation per packet; full = drop.
//!
//! How full is full depends on the connection: the queue holds at most what the connection
//! has recently drained in [`TARGET_DELAY`] (the writer reports how fast the socket took each
//! chunk), between [`MIN_BYTES`] and the configured maximum. A client on a slow link so gets
//! a short queue (little added latency, early drops that tell its TCP to slow down), one on
//! a fast path a deep one (no drops while the writer catches up with a burst: measured on
//! the 2-core lab, a fixed 256 KiB queue dropped 9% of a 5 Gbit/s download). A new
//! connection starts at [`MIN_BYTES`]: until its writer has shown a drain rate, nothing says
//! the client reads at all.
//!
//! Every queue's bytes also count against one [`QueueBudget`] shared by all connections:
//! reserved when a packet is queued, given back when the writer reports the chunk written, or
//! when the queue is dropped (whatever was still queued or being written), so a connection
//! that ends for any reason, a panic included, returns its share. The budget is shared, not
//! first come, first served: a queue whose writer has been stuck on one chunk for
//! [`STALL_AFTER`] (its client stopped reading) reserves only while the budget is at most
//! half used, so thousands of stalled clients cannot take the bytes a healthy connection
//! needs to keep its download going. That alone leaves the bytes they reserved before they
//! counted as stalled (the first second of 2,000 stalled clients filled a 16 MiB budget in
//! the lab, and a healthy download then found no room until the write timeout closed them):
//! so a stalled queue that is offered a packet while the budget is more than half used is
//! shed instead: its backlog goes back to the budget and its writer ends the link
//! ([`SendQueue::shed`]), as the write timeout would have later.

use gate64_dataplane::{ClientQueue, QueueBudget};
use gate64_iphttps::server::EgressTally;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How much queueing delay a connection may build up, at its recent drain rate.
pub const TARGET_DELAY: Duration = Duration::from_millis(10);
/// The queue bound never goes below this (a few packets of a burst always fit).
pub const MIN_BYTES: usize = 64 * 1024;
/// A writer that has not finished a chunk for this long counts as stalled: a reading
/// client's chunk (at most its drain rate × [`TARGET_DELAY`], or [`MIN_BYTES`]) leaves well
/// within it, even on a loaded machine.
pub const STALL_AFTER: Duration = Duration::from_millis(250);

/// A bounded byte queue with one async consumer.
#[derive(Debug)]
pub struct SendQueue {
    inner: Mutex<Inner>,
    notify: Notify,
    /// Woken once when the queue is shed (see the module docs).
    shed: Notify,
    cap: usize,
    budget: Arc<QueueBudget>,
}

#[derive(Debug)]
struct Inner {
    buf: Vec<u8>,
    closed: bool,
    /// Shed under budget pressure: closed, backlog released, the writer told to end.
    shed: bool,
    /// The current bound: recent drain rate × TARGET_DELAY, within MIN_BYTES..=cap.
    limit: usize,
    /// Recent drain rate, bytes per second (exponentially weighted).
    rate: f64,
    /// Bytes handed to the writer by [`SendQueue::take`] and not yet reported written; still
    /// reserved in the budget.
    taken: usize,
    /// When the writer took the chunk it has not yet reported written.
    taken_at: Option<Instant>,
    /// What the writer's egress filter let through and refused, until the reader folds it
    /// into the connection ([`SendQueue::take_egress`]).
    egress: EgressTally,
}

impl SendQueue {
    /// A queue holding at most `cap` bytes (less while the connection drains slowly), its
    /// bytes counted against `budget`.
    pub fn new(cap: usize, budget: Arc<QueueBudget>) -> Self {
        SendQueue {
            inner: Mutex::new(Inner {
                buf: Vec::new(),
                closed: false,
                shed: false,
                limit: MIN_BYTES.min(cap),
                rate: 0.0,
                taken: 0,
                taken_at: None,
                egress: EgressTally::default(),
            }),
            notify: Notify::new(),
            shed: Notify::new(),
            cap,
            budget,
        }
    }

    /// The writer reports that the socket took `bytes` (of what [`SendQueue::take`] gave it)
    /// in `took`: they leave the budget, and the queue bound follows the drain rate.
    pub fn report_drain(&self, bytes: usize, took: Duration) {
        let rate = bytes as f64 / took.as_secs_f64().max(1e-6);
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let written = bytes.min(g.taken);
        g.taken -= written;
        g.taken_at = None;
        self.budget.release(written);
        g.rate = if g.rate == 0.0 {
            rate
        } else {
            0.75 * g.rate + 0.25 * rate
        };
        let want = (g.rate * TARGET_DELAY.as_secs_f64()) as usize;
        g.limit = want.clamp(MIN_BYTES.min(self.cap), self.cap);
    }

    /// The writer reports what its egress filter let through and refused.
    pub fn report_egress(&self, tally: EgressTally) {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        g.egress.merge(tally);
    }

    /// What the writer reported since the last call, for the reader to fold into the
    /// connection before its timers run.
    pub fn take_egress(&self) -> EgressTally {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut g.egress)
    }

    /// The current bound, for tests and diagnostics.
    pub fn limit(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .limit
    }

    /// Waits for queued bytes and swaps them into `spare` (which must be empty). Returns false
    /// once the queue is closed and drained.
    pub async fn take(&self, spare: &mut Vec<u8>) -> bool {
        loop {
            {
                let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
                if !g.buf.is_empty() {
                    std::mem::swap(&mut g.buf, spare);
                    g.taken += spare.len();
                    g.taken_at = Some(Instant::now());
                    return true;
                }
                if g.closed {
                    return false;
                }
            }
            // notify_one stores a permit when nobody waits, so a push between the check and
            // here is not lost.
            self.notify.notified().await;
        }
    }

    /// Resolves once the queue has been shed: its client stopped reading while the budget
    /// was under pressure. The writer selects on it beside its blocked write and ends the
    /// link.
    pub async fn shed(&self) {
        loop {
            if self
                .inner
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .shed
            {
                return;
            }
            // notify_one stores a permit when nobody waits: a shed between the check and
            // here is not lost.
            self.shed.notified().await;
        }
    }

    /// Refuses further packets and wakes the consumer.
    pub fn close(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closed = true;
        self.notify.notify_one();
    }
}

impl ClientQueue for SendQueue {
    fn push(&self, packet: &[u8]) -> bool {
        {
            let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            if g.closed {
                return false;
            }
            let stalled = g.taken_at.is_some_and(|t| t.elapsed() >= STALL_AFTER);
            if stalled && self.budget.used() + packet.len() > self.budget.limit() / 2 {
                // Under pressure a client that stopped reading gives its backlog back now.
                let backlog = std::mem::take(&mut g.buf);
                self.budget.release(backlog.len());
                g.closed = true;
                g.shed = true;
                drop(g);
                self.shed.notify_one();
                self.notify.notify_one();
                return false;
            }
            if g.buf.len() + packet.len() > g.limit || !self.budget.try_reserve(packet.len()) {
                return false;
            }
            g.buf.extend_from_slice(packet);
        }
        self.notify.notify_one();
        true
    }

    fn close(&self) {
        SendQueue::close(self);
    }
}

impl Drop for SendQueue {
    /// Whatever is still queued or being written leaves the budget with the queue.
    fn drop(&mut self) {
        let g = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        self.budget.release(g.buf.len() + g.taken);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unbounded() -> Arc<QueueBudget> {
        Arc::new(QueueBudget::default())
    }

    #[test]
    fn the_bound_follows_the_drain_rate() {
        let q = SendQueue::new(4 << 20, unbounded());
        assert_eq!(
            q.limit(),
            MIN_BYTES,
            "a new connection starts small: its client may not read at all"
        );
        // 10 Mbit/s: 10 ms is 12.5 KB, so the floor applies.
        for _ in 0..20 {
            q.report_drain(12_500, Duration::from_millis(10));
        }
        assert_eq!(q.limit(), MIN_BYTES);
        // 5 Gbit/s: 10 ms is 6.25 MB, capped at the maximum.
        for _ in 0..20 {
            q.report_drain(625_000, Duration::from_micros(1000));
        }
        assert_eq!(q.limit(), 4 << 20);
        // 100 Mbit/s: 125 KB.
        for _ in 0..40 {
            q.report_drain(125_000, Duration::from_millis(10));
        }
        let l = q.limit();
        assert!((120_000..=130_000).contains(&l), "{l}");
        let pkt = vec![0u8; 1280];
        let mut fits = 0;
        while q.push(&pkt) {
            fits += 1;
        }
        assert_eq!(fits, l / 1280);
    }

    #[tokio::test]
    async fn all_queues_share_one_budget_and_return_it() {
        let budget = Arc::new(QueueBudget::default());
        budget.set_limit(3000);
        let (a, b) = (
            SendQueue::new(1 << 20, Arc::clone(&budget)),
            SendQueue::new(1 << 20, Arc::clone(&budget)),
        );
        let pkt = [0u8; 1000];
        assert!(a.push(&pkt) && a.push(&pkt) && b.push(&pkt));
        assert!(
            !b.push(&pkt),
            "the budget is spent, though b's own bound is not"
        );
        assert_eq!(budget.used(), 3000);
        let mut spare = Vec::new();
        assert!(a.take(&mut spare).await);
        assert_eq!(budget.used(), 3000, "bytes being written are still held");
        a.report_drain(spare.len(), Duration::from_millis(1));
        assert_eq!(budget.used(), 1000);
        assert!(b.push(&pkt));
        drop(b);
        assert_eq!(budget.used(), 0, "a dropped queue returns its share");
        // Taken and never reported written (the writer was aborted): returned on drop.
        assert!(a.push(&pkt));
        spare.clear();
        assert!(a.take(&mut spare).await);
        drop(a);
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn a_stalled_queue_leaves_half_the_budget_to_the_others() {
        let budget = Arc::new(QueueBudget::default());
        budget.set_limit(8000);
        let (stalled, healthy) = (
            SendQueue::new(1 << 20, Arc::clone(&budget)),
            SendQueue::new(1 << 20, Arc::clone(&budget)),
        );
        let pkt = [0u8; 1000];
        assert!(stalled.push(&pkt));
        let mut spare = Vec::new();
        assert!(stalled.take(&mut spare).await);
        assert!(
            stalled.push(&pkt) && stalled.push(&pkt),
            "a writer busy for less than STALL_AFTER is not stalled"
        );
        tokio::time::sleep(STALL_AFTER).await;
        assert!(stalled.push(&pkt), "4000 of 8000 used: still within half");
        assert_eq!(budget.used(), 4000);
        for _ in 0..3 {
            assert!(
                healthy.push(&pkt),
                "the healthy queue takes more of the budget"
            );
        }
        assert_eq!(budget.used(), 7000);
        assert!(
            tokio::time::timeout(Duration::from_millis(1), stalled.shed())
                .await
                .is_err(),
            "not shed before pressure meets a packet"
        );
        assert!(
            !stalled.push(&pkt),
            "stalled under pressure: refused, and shed"
        );
        assert_eq!(
            budget.used(),
            4000,
            "the stalled backlog (3000 queued) went back to the budget; its taken chunk is \
             held until the writer ends"
        );
        tokio::time::timeout(Duration::from_secs(1), stalled.shed())
            .await
            .expect("the writer is told to end the link");
        for _ in 0..4 {
            assert!(healthy.push(&pkt), "the room is the healthy queue's");
        }
        assert!(
            !healthy.push(&pkt),
            "the budget itself still bounds everyone"
        );
        drop(stalled);
        assert_eq!(
            budget.used(),
            7000,
            "the ended link returns its taken chunk"
        );
    }

    #[tokio::test]
    async fn a_stalled_queue_without_pressure_is_kept() {
        let budget = Arc::new(QueueBudget::default());
        budget.set_limit(8000);
        let q = SendQueue::new(1 << 20, Arc::clone(&budget));
        let pkt = [0u8; 1000];
        assert!(q.push(&pkt));
        let mut spare = Vec::new();
        assert!(q.take(&mut spare).await);
        tokio::time::sleep(STALL_AFTER).await;
        assert!(q.push(&pkt) && q.push(&pkt), "3000 of 8000: no pressure");
        q.report_drain(spare.len(), STALL_AFTER);
        assert!(
            q.push(&pkt),
            "a writer that finished its chunk is no longer stalled"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(1), q.shed())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn bounded_fifo_and_close() {
        let q = SendQueue::new(10, unbounded());
        assert!(q.push(b"abcd"));
        assert!(q.push(b"efgh"));
        assert!(!q.push(b"ijk"), "over capacity");
        let mut spare = Vec::new();
        assert!(q.take(&mut spare).await);
        assert_eq!(spare, b"abcdefgh");
        spare.clear();
        assert!(q.push(b"ijk"));
        q.close();
        assert!(!q.push(b"x"));
        assert!(q.take(&mut spare).await);
        assert_eq!(spare, b"ijk");
        spare.clear();
        assert!(!q.take(&mut spare).await);
    }
}
