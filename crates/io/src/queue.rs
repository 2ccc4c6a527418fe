//! The per-connection bounded send queue of IP-HTTPS. IP-HTTPS has no framing (packets are
//! concatenated on the stream), so the queue is a byte buffer: a UDP worker appends a packet
//! read from the TUN (the one copy on this path) and wakes the connection's writer, which swaps
//! the whole buffer out and writes it into TLS. No allocation per packet; full = drop.

use gate64_dataplane::ClientQueue;
use std::sync::{Mutex, PoisonError};
use tokio::sync::Notify;

/// A bounded byte queue with one async consumer.
#[derive(Debug)]
pub struct SendQueue {
    inner: Mutex<Inner>,
    notify: Notify,
    cap: usize,
}

#[derive(Debug, Default)]
struct Inner {
    buf: Vec<u8>,
    closed: bool,
}

impl SendQueue {
    /// A queue holding at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        SendQueue {
            inner: Mutex::new(Inner::default()),
            notify: Notify::new(),
            cap,
        }
    }

    /// Waits for queued bytes and swaps them into `spare` (which must be empty). Returns false
    /// once the queue is closed and drained.
    pub async fn take(&self, spare: &mut Vec<u8>) -> bool {
        loop {
            {
                let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
                if !g.buf.is_empty() {
                    std::mem::swap(&mut g.buf, spare);
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
            if g.closed || g.buf.len() + packet.len() > self.cap {
                return false;
            }
            g.buf.extend_from_slice(packet);
        }
        self.notify.notify_one();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_fifo_and_close() {
        let q = SendQueue::new(10);
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
