//! What a worker tells its driver: where the bytes go ([`Verdict`]), and how datagrams join
//! one UDP GSO send ([`Gso`]) so that the driver batches without planning.

use crate::DropReason;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// Most datagrams one UDP GSO send carries (the kernel's `UDP_MAX_SEGMENTS`).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Most payload bytes one UDP GSO send carries (an IPv4 datagram's 64 KiB less headers).
pub const GSO_MAX_BYTES: usize = 65_000;

/// Where the bytes `buf[start..end]` go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write to the TUN device.
    Tun {
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
    },
    /// Send as a UDP datagram from the Teredo socket on `from`.
    Udp {
        /// Which server address to send from.
        from: Ipv4Addr,
        /// Destination.
        to: SocketAddrV4,
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
        /// Whether it joins the UDP GSO send of the previous `Udp` verdict of this batch.
        gso: Gso,
    },
    /// Send as a UDP datagram from the `[ipsec] listen` socket `from` (ESP in UDP to a client
    /// that reaches gate64 directly, RFC 3948).
    Native {
        /// The socket to send from: one of `[ipsec] listen`, port 4500.
        from: SocketAddr,
        /// The client's address and port (its NAT mapping).
        to: SocketAddr,
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
    },
    /// Handled here (a bubble, or queued while the peer is bubbled); nothing to send now.
    Consumed,
    /// Dropped and counted.
    Drop(DropReason),
}

impl Verdict {
    /// A datagram; [`crate::Worker`] sets its [`Gso`] place when it hands the verdict out.
    pub(crate) fn udp(from: Ipv4Addr, to: SocketAddrV4, start: usize, end: usize) -> Self {
        Verdict::Udp {
            from,
            to,
            start,
            end,
            gso: Gso::Start,
        }
    }

    /// The same verdict for a buffer in which the bytes it names lie `by` further on.
    pub(crate) fn shifted(self, by: usize) -> Self {
        match self {
            Verdict::Tun { start, end } => Verdict::Tun {
                start: start + by,
                end: end + by,
            },
            Verdict::Udp {
                from,
                to,
                start,
                end,
                gso,
            } => Verdict::Udp {
                from,
                to,
                start: start + by,
                end: end + by,
                gso,
            },
            Verdict::Native {
                from,
                to,
                start,
                end,
            } => Verdict::Native {
                from,
                to,
                start: start + by,
                end: end + by,
            },
            Verdict::Consumed | Verdict::Drop(_) => self,
        }
    }
}

/// How a datagram joins the one-`sendmsg` UDP GSO send (`UDP_SEGMENT`) of the datagrams before
/// it. A send carries datagrams from one socket to one destination, all of the first one's
/// size except a shorter last one, at most [`GSO_MAX_SEGMENTS`] and [`GSO_MAX_BYTES`]: the
/// segments of a TCP super-packet read from the TUN, typically.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gso {
    /// Starts a send (alone, or followed by [`Gso::Append`]s).
    Start,
    /// Goes in the same send as the `Udp` verdict before it in this batch.
    Append,
}

/// A datagram produced off the fast path (bubbles, flushed relay queues).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Which server address to send from.
    pub from: Ipv4Addr,
    /// Destination.
    pub to: SocketAddrV4,
    /// The datagram.
    pub data: Vec<u8>,
}

/// The GSO send the `Udp` verdicts of the current batch are filling.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GsoRun {
    from: Ipv4Addr,
    to: SocketAddrV4,
    segment: usize,
    segments: usize,
    bytes: usize,
    /// False after a shorter segment: nothing may follow it.
    open: bool,
}

impl GsoRun {
    /// Sets `v`'s [`Gso`] from the run in `run`, which it then extends or replaces.
    pub(crate) fn mark(run: &mut Option<GsoRun>, v: &mut Verdict) {
        let Verdict::Udp {
            from,
            to,
            start,
            end,
            gso,
        } = v
        else {
            return;
        };
        let len = end.saturating_sub(*start);
        if let Some(r) = run.as_mut()
            && r.open
            && r.from == *from
            && r.to == *to
            && len <= r.segment
            && r.segments < GSO_MAX_SEGMENTS
            && r.bytes + len <= GSO_MAX_BYTES
        {
            r.segments += 1;
            r.bytes += len;
            r.open = len == r.segment;
            *gso = Gso::Append;
            return;
        }
        *gso = Gso::Start;
        *run = Some(GsoRun {
            from: *from,
            to: *to,
            segment: len,
            segments: 1,
            bytes: len,
            open: true,
        });
    }
}
