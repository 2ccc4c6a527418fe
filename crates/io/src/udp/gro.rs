//! Receiving Teredo datagrams the kernel coalesced (UDP GRO): one `recvmmsg` message can hold
//! up to 64 datagrams of one sender, and the kernel copies it into the message's buffers in
//! order. The buffers of a message are slots of the size the sender's datagrams had last
//! time, so each datagram lands in a slot of its own, with headroom and tailroom, exactly as
//! a datagram received alone: the dataplane takes it in place, and the kernel's copy stays
//! the only one. A datagram that does not line up with the slots (another size, or past a
//! message's slots) is copied out of the stream into a spare slot.
//!
//! While no message holds more than one datagram, a read takes [`BATCH`] messages of one slot
//! each (datagrams received alone, as without GRO); once one does, reads take
//! [`GRO_MSGS`] messages of [`GRO_PER_MSG`] slots, until a read sees none coalesced.

use crate::sys::{self, BATCH, Coalesced};
use gate64_dataplane::HEADROOM;
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::RawFd;

/// Largest Teredo datagram accepted. The Teredo link MTU is 1280 (RFC 4380 §5.1.2); the rest
/// leaves room for headers and generous clients. Larger datagrams are counted as truncated.
pub const UDP_SLOT: usize = 2048;
/// Slots per message while datagrams coalesce: the kernel coalesces at most 64.
pub const GRO_PER_MSG: usize = 64;
/// Messages per read while datagrams coalesce.
pub const GRO_MSGS: usize = 4;
/// Spare slots for datagrams copied out of a message's stream.
const SPILL: usize = 64;
/// Slots laid out for the kernel in either layout.
const LAID_OUT: usize = GRO_MSGS * GRO_PER_MSG;
/// All slots: the laid-out ones, then the spare ones.
pub const POOL: usize = LAID_OUT + SPILL;
/// The last buffer of every message: room for the rest of the largest coalesced message.
const TAIL: usize = 65_536;

const _: () = assert!(BATCH <= LAID_OUT);
const _: () = assert!(GRO_MSGS * (GRO_PER_MSG + 1) <= sys::COALESCED_IOVS);
const _: () = assert!(BATCH * 2 <= sys::COALESCED_IOVS);
// One message's datagrams always fit the spare slots of a round of their own.
const _: () = assert!(SPILL >= GRO_PER_MSG);

/// One datagram of a read: its slot (bytes from [`HEADROOM`]), length and sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Index into [`GroRx::slots`].
    pub slot: usize,
    /// Bytes.
    pub len: usize,
    /// Sender.
    pub from: SocketAddrV4,
    /// Larger than [`UDP_SLOT`] or cut by the kernel: counted and dropped, its bytes unused.
    pub truncated: bool,
}

/// A worker's UDP receive buffers and the datagrams of its last read.
pub struct GroRx {
    /// The slots datagrams are read into (and sent from, after the dataplane's verdicts).
    pub slots: Vec<Vec<u8>>,
    tails: Vec<Vec<u8>>,
    msgs: [Coalesced; BATCH],
    /// Messages of the last read, and the next one to cut into segments.
    got: usize,
    next: usize,
    /// Slots per message and bytes per slot of the last read.
    per_msg: usize,
    seg_len: usize,
    /// The datagram size of the last coalesced message, while messages coalesce.
    coalescing: Option<usize>,
    /// The datagrams of the current round, in arrival order.
    pub segs: Vec<Segment>,
}

impl std::fmt::Debug for GroRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroRx")
            .field("got", &self.got)
            .field("next", &self.next)
            .field("per_msg", &self.per_msg)
            .field("seg_len", &self.seg_len)
            .field("coalescing", &self.coalescing)
            .field("segs", &self.segs.len())
            .finish_non_exhaustive()
    }
}

impl Default for GroRx {
    fn default() -> Self {
        GroRx {
            slots: vec![vec![0u8; HEADROOM + UDP_SLOT]; POOL],
            tails: vec![vec![0u8; TAIL]; BATCH],
            msgs: [Coalesced::EMPTY; BATCH],
            got: 0,
            next: 0,
            per_msg: 1,
            seg_len: UDP_SLOT,
            coalescing: None,
            segs: Vec::with_capacity(POOL),
        }
    }
}

impl GroRx {
    /// True while messages of the last read have not been cut into rounds yet.
    pub fn pending(&self) -> bool {
        self.next < self.got
    }

    /// One `recvmmsg` of at most `want` messages (at least one) from `fd`. Returns whether
    /// it filled every message (the socket may hold more); `WouldBlock` when none came.
    pub fn recv(&mut self, fd: RawFd, want: usize) -> io::Result<bool> {
        let (per_msg, seg_len, msgs) = match self.coalescing {
            Some(s) => (GRO_PER_MSG, s, GRO_MSGS),
            None => (1, UDP_SLOT, BATCH),
        };
        let msgs = msgs.min(want.max(1));
        let tails = &mut self.tails[..msgs];
        let n = sys::recv_coalesced(
            fd,
            &mut self.slots[..LAID_OUT],
            HEADROOM,
            seg_len,
            per_msg,
            tails,
            &mut self.msgs,
        )?;
        (self.got, self.next, self.per_msg, self.seg_len) = (n, 0, per_msg, seg_len);
        self.coalescing = self.msgs[..n]
            .iter()
            .filter_map(|m| m.segment.filter(|&s| m.len > s && s <= UDP_SLOT))
            .next_back();
        Ok(n == msgs)
    }

    /// Cuts the next messages into [`GroRx::segs`], as many as the spare slots and
    /// [`POOL`] datagrams allow (at least one message while any is pending). Returns how many
    /// datagrams.
    pub fn next_round(&mut self) -> usize {
        self.segs.clear();
        let mut spilled = 0;
        while self.next < self.got {
            let m = self.msgs[self.next];
            let need = self.spills(&m);
            let full = spilled + need > SPILL || self.segs.len() + Self::shape(&m).1 > POOL;
            if full && !self.segs.is_empty() {
                break;
            }
            self.cut(self.next, &m, &mut spilled);
            self.next += 1;
        }
        self.segs.len()
    }

    /// The datagram size of message `m` and how many datagrams it holds.
    fn shape(m: &Coalesced) -> (usize, usize) {
        let s = m.segment.unwrap_or(m.len);
        let count = if s == 0 { 1 } else { m.len.div_ceil(s) };
        (s, count)
    }

    /// Whether datagram `j` of `m` lies in a slot of its own.
    fn in_place(&self, m: &Coalesced, j: usize) -> bool {
        let (s, count) = Self::shape(m);
        j < self.per_msg && (s == self.seg_len || (count == 1 && m.len <= self.seg_len))
    }

    /// Whether `m` is dropped whole: cut by the kernel, datagrams larger than a slot, or
    /// more datagrams than a round holds (the kernel coalesces at most 64; a local sender's
    /// UDP GSO may pass more).
    fn dropped(m: &Coalesced) -> bool {
        let (s, count) = Self::shape(m);
        m.truncated || s > UDP_SLOT || count > POOL
    }

    /// How many of `m`'s datagrams need a spare slot.
    fn spills(&self, m: &Coalesced) -> usize {
        let (_, count) = Self::shape(m);
        if Self::dropped(m) {
            return 0;
        }
        (0..count).filter(|&j| !self.in_place(m, j)).count()
    }

    /// Appends message `k`'s datagrams to the round, copying those not in place; those the
    /// spare slots cannot take are marked truncated.
    fn cut(&mut self, k: usize, m: &Coalesced, spilled: &mut usize) {
        let (s, count) = Self::shape(m);
        if Self::dropped(m) {
            let count = if m.truncated || count > POOL {
                1
            } else {
                count
            };
            for _ in 0..count {
                self.segs.push(Segment {
                    slot: 0,
                    len: s.min(m.len),
                    from: m.from,
                    truncated: true,
                });
            }
            return;
        }
        for j in 0..count {
            let off = j * s;
            let len = s.min(m.len - off);
            let seg = if self.in_place(m, j) {
                Segment {
                    slot: k * self.per_msg + j,
                    len,
                    from: m.from,
                    truncated: false,
                }
            } else if *spilled < SPILL {
                let slot = LAID_OUT + *spilled;
                *spilled += 1;
                let complete = self.copy_out(k, off, len, slot);
                Segment {
                    slot,
                    len,
                    from: m.from,
                    truncated: !complete,
                }
            } else {
                Segment {
                    slot: 0,
                    len,
                    from: m.from,
                    truncated: true,
                }
            };
            self.segs.push(seg);
        }
    }

    /// Copies bytes `off..off + len` of message `k`'s stream (its slots, then its tail) into
    /// spare slot `dst`. False when the stream is shorter (not expected: the kernel filled it).
    fn copy_out(&mut self, k: usize, off: usize, len: usize, dst: usize) -> bool {
        let (per, g) = (self.per_msg, self.seg_len);
        let (laid, spare) = self.slots.split_at_mut(LAID_OUT);
        let Some(out) = spare
            .get_mut(dst.saturating_sub(LAID_OUT))
            .and_then(|d| d.get_mut(HEADROOM..HEADROOM + len))
        else {
            return false;
        };
        let tail = self.tails.get(k).map_or(&[][..], |t| &t[..]);
        let mut done = 0;
        while done < len {
            let p = off + done;
            let piece = if g > 0 && p < per * g {
                laid.get(k * per + p / g)
                    .and_then(|v| v.get(HEADROOM + p % g..HEADROOM + g))
                    .unwrap_or_default()
            } else {
                tail.get(p - per * g..).unwrap_or_default()
            };
            let take = piece.len().min(len - done);
            if take == 0 {
                return false;
            }
            out[done..done + take].copy_from_slice(&piece[..take]);
            done += take;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, UdpSocket};
    use std::os::fd::AsRawFd;

    fn pair() -> (UdpSocket, UdpSocket, SocketAddrV4) {
        let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        sys::set_udp_gro(rx.as_raw_fd()).unwrap();
        rx.set_nonblocking(true).unwrap();
        let to = match rx.local_addr().unwrap() {
            std::net::SocketAddr::V4(v) => v,
            _ => unreachable!(),
        };
        (tx, rx, to)
    }

    /// Datagram `i` of a test: `len` bytes, each `(i * 7 + b) % 251`.
    fn datagram(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|b| ((i * 7 + b) % 251) as u8).collect()
    }

    /// Sends `n` datagrams of `len` bytes (the first numbered `first`) as one UDP GSO send,
    /// which loopback hands to a UDP GRO socket as one message.
    fn send(tx: &UdpSocket, to: SocketAddrV4, first: usize, n: usize, len: usize) {
        let d: Vec<Vec<u8>> = (first..first + n).map(|i| datagram(i, len)).collect();
        sys::send_gso(tx.as_raw_fd(), n, len as u16, to, |j| &d[j]).unwrap();
    }

    /// Reads every round of everything queued: (datagrams in order, spare slots used).
    fn read_all(rx: &UdpSocket, g: &mut GroRx) -> (Vec<Vec<u8>>, usize) {
        let (mut out, mut spare) = (Vec::new(), 0);
        while g.recv(rx.as_raw_fd(), BATCH).is_ok() {
            while g.pending() {
                g.next_round();
                for s in &g.segs {
                    assert!(!s.truncated);
                    spare += usize::from(s.slot >= LAID_OUT);
                    out.push(g.slots[s.slot][HEADROOM..HEADROOM + s.len].to_vec());
                }
            }
        }
        (out, spare)
    }

    /// Coalesced datagrams come out whole and in order: copied while the layout does not
    /// match their size, in place once it does; a size change is copied, then in place.
    #[test]
    fn coalesced_datagrams_are_cut_in_place_once_the_size_is_known() {
        let (tx, rx, to) = pair();
        let mut g = GroRx::default();
        send(&tx, to, 0, 10, 1280);
        let (got, spare) = read_all(&rx, &mut g);
        assert_eq!(got, (0..10).map(|i| datagram(i, 1280)).collect::<Vec<_>>());
        assert_eq!(spare, 10, "one-slot messages: every datagram copied");
        assert_eq!(g.coalescing, Some(1280));
        send(&tx, to, 10, 45, 1280);
        let (got, spare) = read_all(&rx, &mut g);
        assert_eq!(got, (10..55).map(|i| datagram(i, 1280)).collect::<Vec<_>>());
        assert_eq!(spare, 0, "slots of the datagrams' size: all in place");
        // Larger datagrams than the slots: the stream runs into the tail, all copied.
        send(&tx, to, 0, 40, 1500);
        let (got, spare) = read_all(&rx, &mut g);
        assert_eq!(got, (0..40).map(|i| datagram(i, 1500)).collect::<Vec<_>>());
        assert_eq!(spare, 40);
        send(&tx, to, 0, 40, 1500);
        assert_eq!(read_all(&rx, &mut g).1, 0);
        // Slots of 500 bytes hold 32,000 of a message's bytes; the rest is read from its tail.
        send(&tx, to, 0, 10, 500);
        read_all(&rx, &mut g);
        assert_eq!(g.coalescing, Some(500));
        send(&tx, to, 100, 40, 1500);
        let (got, spare) = read_all(&rx, &mut g);
        assert_eq!(
            got,
            (100..140).map(|i| datagram(i, 1500)).collect::<Vec<_>>()
        );
        assert_eq!(spare, 40);
    }

    /// More messages to copy than spare slots: they leave over several rounds, in order; lone
    /// datagrams switch back to one slot per message; an oversized one is marked truncated.
    #[test]
    fn rounds_and_lone_datagrams() {
        let (tx, rx, to) = pair();
        let mut g = GroRx::default();
        for k in 0..8 {
            send(&tx, to, k * 20, 20, 1000);
        }
        let (got, _) = read_all(&rx, &mut g);
        assert_eq!(got, (0..160).map(|i| datagram(i, 1000)).collect::<Vec<_>>());
        for i in 0..5 {
            tx.send_to(&datagram(i, 100 + i), to).unwrap();
        }
        let (got, spare) = read_all(&rx, &mut g);
        assert_eq!(
            got,
            (0..5).map(|i| datagram(i, 100 + i)).collect::<Vec<_>>()
        );
        assert_eq!(g.coalescing, None);
        assert!(spare <= 5);
        tx.send_to(&datagram(0, UDP_SLOT + 1), to).unwrap();
        g.recv(rx.as_raw_fd(), BATCH).unwrap();
        assert_eq!(g.next_round(), 1);
        assert!(g.segs[0].truncated);
    }
}
