//! A link's input without a read buffer of its own: the link's task awaits a few
//! bytes into a small array; then, with no await in between, the runtime thread's read buffer
//! takes the partial packet left from the last read, those bytes and whatever else TLS has
//! ready, and every complete packet goes down the dataplane from there. Only an incomplete
//! packet at the end stays with the link, so an idle link holds no buffer at all: its TLS
//! records are decrypted into rustls' own buffer and copied once into the thread's.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use gate64_dataplane::IphttpsLink;
use gate64_iphttps::FrameError;
use tokio::io::{AsyncRead, ReadBuf, ReadHalf};

use super::{IphttpsServer, Link, MAX_PACKET, Tls};
use crate::batch::{self, Batch};

/// The runtime thread's read buffer: room for several 16 KiB TLS records taken back to back
/// (their packets then share one coalesced TUN write) behind a partial packet.
const READ_BUF: usize = 64 * 1024;
/// Packets per batch of verdicts (a full read buffer holds about 50 full-size packets).
const LINK_BATCH: usize = 64;
/// What a link's task awaits into: enough to learn that TLS has data, small enough to sit
/// in every idle link's task.
pub(super) const WAKE_READ: usize = 64;

// A partial packet (shorter than MAX_PACKET) and the bytes of one wake-up always fit, with a
// whole packet's room behind them for the first read that follows.
const _: () = assert!(2 * MAX_PACKET + WAKE_READ <= READ_BUF);

/// One runtime thread's scratch, shared by every link it serves.
struct Scratch {
    buf: Vec<u8>,
    batch: Batch,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch {
        buf: vec![0u8; READ_BUF],
        batch: Batch::new(LINK_BATCH),
    });
}

impl IphttpsServer {
    /// Takes the link's partial packet, then `woke` (what its task just read) and, with
    /// `rd`, whatever else TLS has ready now; judges and routes every complete packet. A read
    /// that ended the stream is left in `link.read_end` for the task.
    pub(super) fn input(
        &self,
        link: &mut Link,
        woke: &[u8],
        rd: Option<&mut ReadHalf<Tls>>,
    ) -> Result<(), FrameError> {
        SCRATCH.with(|cell| {
            // Nothing below awaits or takes another link's input, so this never re-enters.
            let mut scratch = cell.borrow_mut();
            let Scratch { buf, batch } = &mut *scratch;
            let held = link.partial.len();
            let mut end = held + woke.len();
            // The deframer keeps less than MAX_PACKET (the request head's leftover less than
            // http::MAX_HEAD_LEN), so this only fails on a broken invariant.
            let Some(into) = buf.get_mut(..end) else {
                debug_assert!(false, "{end} bytes of input do not fit the read buffer");
                return Err(FrameError::TooLarge { len: end });
            };
            into[..held].copy_from_slice(&link.partial);
            into[held..].copy_from_slice(woke);
            if let Some(rd) = rd {
                end = drain(rd, buf, end, &mut link.read_end);
            }
            let (consumed, r) = self.process(link, buf, batch, end);
            keep_partial(&mut link.partial, &buf[consumed..end]);
            r
        })
    }

    /// The packets in `buf[..end]`, each handed to this thread's dataplane worker (the
    /// connection's judgement, then the one road), the verdicts executed in batches. Returns
    /// how many bytes were whole packets. No await happens in here.
    fn process(
        &self,
        link: &mut Link,
        buf: &mut Vec<u8>,
        batch: &mut Batch,
        end: usize,
    ) -> (usize, Result<(), FrameError>) {
        let corp = &self.corp[(u128::from(link.prefix) >> 64) as usize % self.corp.len()];
        let deframer = link.deframer;
        self.with_dataplane(|dp| {
            let stats = Arc::clone(dp.stats());
            let mut view = IphttpsLink {
                conn: &mut link.conn,
                replies: &*link.queue,
            };
            // The packets of one read arrived together: one clock reading serves them all,
            // as it does for a UDP worker's batch.
            let now = Instant::now();
            dp.start_batch();
            let mut start = 0;
            let r = loop {
                let len = match deframer.next_packet(&buf[start..end]) {
                    Ok(Some(len)) => len,
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                };
                if batch.is_full() {
                    batch.send(&self.teredo, corp, &stats, std::slice::from_ref(buf));
                    dp.start_batch();
                }
                let at = start;
                start += len;
                // Packets lie back to back in the read buffer: no headroom, and the worker
                // writes nothing past this one.
                let v = dp.handle_iphttps(now, &mut view, buf, at, at + len, 0);
                batch.dispatch(&self.teredo, 0, v);
            };
            batch.send(&self.teredo, corp, &stats, std::slice::from_ref(buf));
            batch::drain(&self.teredo, corp, &stats, dp);
            (start, r)
        })
    }
}

/// Reads what TLS has ready now into `buf[end..]`, without waiting, while a whole packet
/// still fits behind it; returns the new end. The end of the stream, or an error, is left in
/// `read_end`.
fn drain(
    rd: &mut ReadHalf<Tls>,
    buf: &mut [u8],
    mut end: usize,
    read_end: &mut Option<io::Result<()>>,
) -> usize {
    // The link's task registers its own waker again at its next await of `rd`: these polls
    // only take what is there.
    let mut cx = Context::from_waker(Waker::noop());
    while buf.len() - end >= MAX_PACKET {
        let mut into = ReadBuf::new(&mut buf[end..]);
        match Pin::new(&mut *rd).poll_read(&mut cx, &mut into) {
            Poll::Ready(Ok(())) if !into.filled().is_empty() => end += into.filled().len(),
            Poll::Ready(r) => {
                *read_end = Some(r);
                break;
            }
            Poll::Pending => break,
        }
    }
    end
}

/// Keeps the incomplete packet at the end of a read for the next one; a link whose reads end
/// on a packet boundary keeps no allocation.
fn keep_partial(partial: &mut Vec<u8>, rest: &[u8]) {
    if rest.is_empty() {
        *partial = Vec::new();
    } else {
        partial.clear();
        partial.extend_from_slice(rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_ending_on_a_packet_boundary_leaves_the_link_no_allocation() {
        let mut partial = Vec::new();
        keep_partial(&mut partial, &[0x60, 0, 0]);
        assert_eq!(partial, [0x60, 0, 0]);
        keep_partial(&mut partial, &[]);
        assert_eq!(partial.capacity(), 0);
    }
}
