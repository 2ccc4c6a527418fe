//! A link's writing side: one task per link moves the link's send queue into TLS, each chunk
//! through the connection's egress filter (only unicast to the client's /64 leaves,
//! [MS-IPHTTPS] §3.2.5.2.1), and ends the link when the client stops reading.

use super::queue::{self, SendQueue};
use super::{IphttpsServer, MAX_PACKET, Tls};
use gate64_dataplane::DropReason;
use gate64_iphttps::framing::Deframer;
use gate64_iphttps::server::EgressFilter;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncWriteExt, WriteHalf};
use tracing::error;

impl IphttpsServer {
    /// Moves the link's send queue into TLS, each chunk through the link's egress filter
    /// (only unicast to the client's /64 leaves, §3.2.5.2.1), whose tally goes back to the
    /// reader through the queue, so that traffic towards the client keeps the link from
    /// going idle. The connection itself stays with the reader. Returns why it stopped:
    /// a write that makes no progress within the write timeout ends it (the client stopped
    /// reading), and the reader then ends the link.
    pub(super) async fn writer(
        self: Arc<Self>,
        mut wr: WriteHalf<Tls>,
        queue: Arc<SendQueue>,
        mut filter: EgressFilter,
    ) -> WriterEnd {
        let deframer = Deframer::new(MAX_PACKET);
        let mut spare = Vec::new();
        while queue.take(&mut spare).await {
            let refused = egress_filter(&mut filter, &deframer, &mut spare);
            queue.report_egress(filter.take_tally());
            for reason in refused {
                self.stats().count_drops(reason, 1);
            }
            let t0 = tokio::time::Instant::now();
            let mut done = 0;
            while done < spare.len() {
                let write = tokio::time::timeout(self.write_timeout(), wr.write(&spare[done..]));
                let written = tokio::select! {
                    r = write => r,
                    () = queue.shed() => return WriterEnd::Stalled("shed: queue budget under pressure"),
                };
                match written {
                    Ok(Ok(n)) if n > 0 => done += n,
                    Ok(Err(e)) if e.kind() == io::ErrorKind::TimedOut => {
                        return WriterEnd::Stalled("TCP_USER_TIMEOUT");
                    }
                    Ok(_) => return WriterEnd::Failed,
                    Err(_) => return WriterEnd::Stalled("write timeout"),
                }
            }
            queue.report_drain(spare.len(), t0.elapsed());
            // A chunk well below what the buffer grew to after a burst: give the memory back
            // rather than keep megabytes per quiet connection. A slow (or new) connection
            // keeps none: the queue budget counts bytes, not capacity, and thousands of slow
            // clients each holding an empty 64 KiB buffer would add up outside it.
            if queue.limit() <= queue::MIN_BYTES
                || (spare.capacity() > 4 * queue::MIN_BYTES && spare.len() < queue::MIN_BYTES)
            {
                spare = Vec::new();
            }
            spare.clear();
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), wr.shutdown()).await;
        WriterEnd::Closed
    }

    /// Counts a link closed because its client stopped reading (or acknowledging): the
    /// writer's deadline, or TCP_USER_TIMEOUT seen by either task. Once per link: `serve`
    /// returns right after.
    pub(super) fn stalled(&self, by: &str) -> String {
        self.stats().iphttps_write_timeouts.inc();
        format!("stalled: the client stopped reading ({by})")
    }
}

/// Why a link's writer stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WriterEnd {
    /// The queue was closed and drained.
    Closed,
    /// A write made no progress in time (the client stopped reading).
    Stalled(&'static str),
    /// The stream failed.
    Failed,
    /// The task panicked or was cancelled.
    Gone,
}

/// A link's writer task, aborted when dropped (never left running without its link).
pub(super) struct Writer(pub(super) Option<tokio::task::JoinHandle<WriterEnd>>);

impl Writer {
    /// Waits until the writer ends and says why; pending forever once that was reported.
    pub(super) async fn ended(&mut self) -> WriterEnd {
        let Some(handle) = self.0.as_mut() else {
            return std::future::pending().await;
        };
        let end = match handle.await {
            Ok(end) => end,
            Err(e) => {
                if e.is_panic() {
                    error!(error = %e, "IP-HTTPS writer task panicked");
                }
                WriterEnd::Gone
            }
        };
        self.0 = None;
        end
    }

    /// Gives a still-running writer `grace` to flush what is queued.
    pub(super) async fn finish(&mut self, grace: Duration) {
        if self.0.is_some() {
            let _ = tokio::time::timeout(grace, self.ended()).await;
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

/// Drops the packets of `chunk` the link's filter refuses to send (§3.2.5.2.1), keeping the
/// rest in order; returns why each refused one was refused.
fn egress_filter(
    filter: &mut EgressFilter,
    deframer: &Deframer,
    chunk: &mut Vec<u8>,
) -> Vec<DropReason> {
    let mut refused = Vec::new();
    let now = Instant::now();
    let (mut read, mut kept) = (0, 0);
    while let Ok(Some(len)) = deframer.next_packet(&chunk[read..]) {
        match filter.handle(now, &chunk[read..read + len]) {
            Ok(()) => {
                if kept != read {
                    chunk.copy_within(read..read + len, kept);
                }
                kept += len;
            }
            Err(r) => refused.push(DropReason::from(r)),
        }
        read += len;
    }
    // Whatever does not deframe was never a packet the dataplane queued.
    chunk.truncate(kept);
    refused
}

#[cfg(test)]
mod egress_tests {
    use super::*;
    use gate64_iphttps::http;
    use gate64_iphttps::server::{Connection, Handshake, MAX_REPLY_LEN, ServerConfig};
    use gate64_wire::ipv6;
    use std::net::Ipv6Addr;

    fn packet(src: Ipv6Addr, dst: Ipv6Addr, total: usize) -> Vec<u8> {
        let mut b = vec![0x5a; total];
        let plen = u16::try_from(total - ipv6::HEADER_LEN).unwrap();
        ipv6::emit_header(&mut b, plen, ipv6::NH_UDP, 64, &src, &dst).unwrap();
        b
    }

    // §3.2.5.2.1: of a chunk from the send queue only unicast to the client's /64 and the
    // server's own RAs leave, in order; the rest is counted under its label.
    #[test]
    fn egress_filter_keeps_the_clients_packets_and_our_ras_in_order() {
        let prefix: Ipv6Addr = "2001:db8:1:5::".parse().unwrap();
        let client: Ipv6Addr = "2001:db8:1:5::a".parse().unwrap();
        let corp: Ipv6Addr = "2001:db8:100::5".parse().unwrap();
        let t0 = Instant::now();
        let mut conn = Connection::new(Arc::new(ServerConfig::default()), prefix, t0);
        let mut out = Vec::new();
        let head = http::request("/IPHTTPS", "gw");
        assert!(matches!(
            conn.handle_input(t0, &head, "Sun, 06 Nov 1994 08:49:37 GMT", &mut out),
            Ok(Handshake::LinkUp { .. })
        ));
        let mut ra = [0u8; MAX_REPLY_LEN];
        let n = conn.poll_unsolicited_ra(t0, &mut ra).unwrap();
        let first = packet(corp, client, 100);
        let stray = packet(corp, "2001:db8:1:6::1".parse().unwrap(), 80);
        let last = packet(corp, client, 60);
        let mut chunk = [&first[..], &ra[..n], &stray, &last].concat();
        let mut filter = conn.egress_filter();
        let refused = egress_filter(&mut filter, &Deframer::new(MAX_PACKET), &mut chunk);
        assert_eq!(refused, vec![DropReason::NoRoute]);
        assert_eq!(chunk, [&first[..], &ra[..n], &last].concat());
        // The tally, folded into the connection by the reader, counts what went and moves
        // the idle timer for the client's packets (not for our RA).
        let tally = filter.take_tally();
        assert_eq!((tally.packets, tally.refused), (3, 1));
        assert!(tally.last_traffic.is_some_and(|t| t >= t0));
        conn.note_egress(tally);
        assert_eq!(conn.stats().packets_out, 3);
    }
}
