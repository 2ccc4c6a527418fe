//! IPv6 reassembly (RFC 8200 §4.5) for packets to the IPsec endpoint only. A client's IPsec
//! stack seals a full-size inner packet (strongSwan's `ipsec0` has MTU 1400) and its kernel
//! fragments the outer ESP-in-UDP packet to fit the 1280-byte Teredo or IP-HTTPS link, so
//! gate64 must put the fragments together before it can open the ESP.
//!
//! This runs before IPsec authenticates anything, for whoever reaches the endpoint, so every
//! fragment costs a fixed, small amount of work and memory, whatever the sender does:
//!
//! - **Floor.** A non-final fragment must carry at least [`MIN_FRAGMENT`] (512) bytes. Every
//!   IPv6 link carries 1280-byte packets (RFC 8200 §5) and a source fragments to its path MTU,
//!   so an honest non-final fragment carries 1232 bytes or nearly (a 1280-byte packet less the
//!   fixed and Fragment headers); RFC 8021 retired the one case where a smaller path MTU was
//!   reported (atomic fragments). 512 leaves room for extension headers in front and for a
//!   stack that splits evenly, and refuses the 8-byte fragments that make reassembly cost a
//!   sender nothing (`frag_too_small`; empty fragments too).
//! - **Fragments per datagram.** At most [`MAX_FRAGMENTS`] (64): a 65,535-byte datagram cut
//!   for a 1280-byte link needs 54. One more drops the datagram (`frag_too_many`).
//! - **Datagrams.** A fixed table of [`SLOTS`] (16) per worker, at most [`PER_CLIENT`] (4) per
//!   client. The client is the transport binding the fragment came through (a Teredo mapping,
//!   an IP-HTTPS connection's /64), not the IPv6 source, which a client chooses. A client
//!   starting one datagram more than its share gives up its own oldest (`frag_client_limit`);
//!   a full table takes a newcomer only in place of an expired datagram, else refuses it
//!   (`frag_table_full`): one client never evicts another's datagram. A datagram not whole
//!   within [`TIMEOUT`] is given up (`frag_timeout`) on the next fragment, on the driver's
//!   tick ([`crate::Worker::handle_timeout`]), or on the next IP-HTTPS packet of the thread,
//!   whose worker has no tick.
//! - **Ranges.** A datagram keeps the byte ranges it received sorted by offset, never
//!   overlapping; a new fragment finds its place by binary search and is checked against its
//!   two neighbours only (an overlap drops the datagram, RFC 5722: `frag_overlap`; an exact
//!   duplicate is dropped alone, as RFC 8200 §4.5 allows: `frag_duplicate`). Inserting moves
//!   at most 63 ranges (about 1 KiB); in-order fragments append.
//! - **Memory.** Each slot owns one buffer of [`SLOT_LEN`] bytes (65,724: 64.2 KiB, 1 MiB for
//!   the 16 slots), allocated the first time the slot is used and kept for the worker's life:
//!   nothing is allocated per fragment. A fragment's bytes are copied once, straight to their
//!   place in the reassembled packet, which sits at [`HEADROOM`] with room for an ESP trailer
//!   behind the largest payload, so the whole packet takes the road from the slot as a driver's
//!   packet would, without another copy. What the road makes of it is queued off the fast path
//!   (`poll_tun_write`, `poll_transmit`), since it does not lie in the caller's buffer.
//!
//! Every fragment either ends up in a datagram that takes the road or is counted once under a
//! `gate64_drops_total` reason: the one refused, and when a datagram is given up, each one it
//! had kept. Per worker: a client's datagrams reach one worker (the kernel hashes a Teredo
//! mapping to one socket, an IP-HTTPS connection lives on one thread).

use crate::{ClientBinding, DropReason, HEADROOM, Stats, Transmit, Verdict, Worker};
use gate64_wire::ipv6;
use std::net::{Ipv6Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// Fewest data bytes a non-final fragment may carry (see the module comment).
pub(crate) const MIN_FRAGMENT: usize = 512;
/// Most fragments one datagram may come in.
pub(crate) const MAX_FRAGMENTS: usize = 64;
/// Datagrams being reassembled at once, per worker.
pub(crate) const SLOTS: usize = 16;
/// Datagrams one client may have in progress at once, per worker. An honest client has one,
/// or two when the fragments of consecutive datagrams cross on the way.
pub(crate) const PER_CLIENT: usize = 4;
/// Largest reassembled payload (an IPv6 payload without jumbograms).
pub(crate) const MAX_LEN: usize = 65_535;
/// How long the fragments of one datagram may take (RFC 8200 §4.5 allows 60 s; a client's
/// fragments leave back to back).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(5);
/// Where a reassembled packet's data starts in its slot: behind the headroom and the fixed
/// header.
const DATA_AT: usize = HEADROOM + ipv6::HEADER_LEN;
/// A slot's buffer: headroom, fixed header, the largest payload, and an ESP trailer's room.
pub(crate) const SLOT_LEN: usize = DATA_AT + MAX_LEN + gate64_esp::LARGEST_TRAILER;

/// The client a fragment came from, as its transport identifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientKey {
    /// A Teredo client's NAT mapping.
    Teredo(SocketAddrV4),
    /// An IP-HTTPS connection, by its /64.
    Iphttps(Ipv6Addr),
}

impl ClientKey {
    /// The key of `from`; `None` for a packet out of an SA, which is never reassembled: an
    /// inner packet goes to the corporate side, and the road of a reassembled datagram must
    /// not come back here while it holds its slot.
    pub(crate) fn of(from: &ClientBinding) -> Option<ClientKey> {
        match *from {
            ClientBinding::Teredo { mapping, .. } => Some(ClientKey::Teredo(mapping)),
            ClientBinding::Iphttps { prefix } => Some(ClientKey::Iphttps(prefix)),
            ClientBinding::Ipsec { .. } => None,
        }
    }
}

/// Which datagram a fragment belongs to (RFC 8200 §4.5: source, destination and
/// Identification; the destination is always the endpoint), and whose it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    client: ClientKey,
    src: Ipv6Addr,
    ident: u32,
}

/// A slot in use.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: Key,
    started: Instant,
}

/// One fragment, checked on its own.
#[derive(Debug)]
struct Fragment<'a> {
    /// The packet's fixed header.
    header: &'a [u8],
    /// The fragmentable part's next header.
    next_header: u8,
    ident: u32,
    /// Byte range in the fragmentable part.
    start: usize,
    end: usize,
    more: bool,
    data: &'a [u8],
}

impl<'a> Fragment<'a> {
    /// The fragment in `pkt`, whose fixed header's next header is the Fragment header.
    fn parse(pkt: &ipv6::Packet<'a>) -> Result<Self, DropReason> {
        let payload = pkt.payload();
        let fh = ipv6::FragmentRepr::parse(payload)?;
        let data = payload
            .get(ipv6::FRAG_HEADER_LEN..)
            .ok_or(DropReason::Truncated)?;
        let header = pkt
            .as_bytes()
            .get(..ipv6::HEADER_LEN)
            .ok_or(DropReason::Truncated)?;
        // A fragment inside a fragment is nobody's honest packet, and would bring the
        // reassembled packet back here.
        if fh.next_header == ipv6::NH_FRAGMENT {
            return Err(DropReason::Malformed);
        }
        if data.is_empty() || (fh.more && data.len() < MIN_FRAGMENT) {
            return Err(DropReason::FragTooSmall);
        }
        let start = usize::from(fh.offset) * 8;
        let end = start + data.len();
        // RFC 8200 §4.5: every fragment but the last is a multiple of 8 bytes long, and the
        // whole fits a Payload Length.
        if (fh.more && !data.len().is_multiple_of(8)) || end > MAX_LEN {
            return Err(DropReason::Malformed);
        }
        Ok(Fragment {
            header,
            next_header: fh.next_header,
            ident: fh.ident,
            start,
            end,
            more: fh.more,
            data,
        })
    }
}

/// One datagram's state and buffer.
#[derive(Debug)]
struct Slot {
    /// Received byte ranges `(start, end)`, sorted by start, never overlapping; `count` used.
    ranges: [(usize, usize); MAX_FRAGMENTS],
    count: usize,
    /// Bytes received; the ranges do not overlap, so once this is `total` the datagram is
    /// whole.
    received: usize,
    /// Length of the fragmentable part, known once the last fragment (M = 0) arrived.
    total: Option<usize>,
    /// The next header of the first fragment (offset 0), once it arrived.
    next_header: u8,
    /// Empty until the slot is first used; lent out while its datagram takes the road.
    buf: Vec<u8>,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            ranges: [(0, 0); MAX_FRAGMENTS],
            count: 0,
            received: 0,
            total: None,
            next_header: 0,
            buf: Vec::new(),
        }
    }
}

impl Slot {
    /// Makes the slot ready for a new datagram.
    fn reset(&mut self) {
        self.count = 0;
        self.received = 0;
        self.total = None;
        if self.buf.len() != SLOT_LEN {
            // Once per slot for the worker's life.
            self.buf = vec![0; SLOT_LEN];
        }
    }

    /// Takes `f` into the datagram. On `Err`, the fragment is refused; the datagram is to be
    /// dropped whole unless the reason is `FragDuplicate`.
    fn insert(&mut self, f: &Fragment<'_>) -> Result<(), DropReason> {
        if self.count >= MAX_FRAGMENTS {
            return Err(DropReason::FragTooMany);
        }
        let ranges = self.ranges.get(..self.count).unwrap_or_default();
        // Sorted and disjoint, so the last range ends furthest.
        let furthest = ranges.last().map_or(0, |r| r.1);
        // The last fragment fixes the datagram's length; nothing may run past it, and it
        // may not end short of data already received.
        let consistent = match (self.total, f.more) {
            (Some(t), true) => f.end < t,
            (Some(t), false) => f.end == t,
            (None, true) => true,
            (None, false) => f.end >= furthest,
        };
        if !consistent {
            return Err(DropReason::Malformed);
        }
        let at = ranges.partition_point(|r| r.0 < f.start);
        if let Some(&(start, end)) = ranges.get(at) {
            if (start, end) == (f.start, f.end) {
                return Err(DropReason::FragDuplicate);
            }
            if start < f.end {
                return Err(DropReason::FragOverlap);
            }
        }
        if at > 0 && ranges.get(at - 1).is_some_and(|r| r.1 > f.start) {
            return Err(DropReason::FragOverlap);
        }
        let place = self
            .buf
            .get_mut(DATA_AT + f.start..DATA_AT + f.end)
            .ok_or(DropReason::Truncated)?;
        place.copy_from_slice(f.data);
        if f.start == 0 {
            // RFC 8200 §4.5: the reassembled packet's header is the first fragment's.
            let header = self
                .buf
                .get_mut(HEADROOM..DATA_AT)
                .ok_or(DropReason::Truncated)?;
            header.copy_from_slice(f.header);
            self.next_header = f.next_header;
        }
        self.ranges.copy_within(at..self.count, at + 1);
        self.ranges[at] = (f.start, f.end);
        self.count += 1;
        self.received += f.data.len();
        if !f.more {
            self.total = Some(f.end);
        }
        Ok(())
    }
}

/// The datagrams a worker is reassembling.
#[derive(Debug)]
pub(crate) struct Reassembly {
    entries: [Option<Entry>; SLOTS],
    slots: Vec<Slot>,
    /// No datagram expires before this; `None` while the table is empty.
    next_expiry: Option<Instant>,
    /// A slot's buffer is out on the road.
    lent: bool,
}

impl Default for Reassembly {
    fn default() -> Self {
        Reassembly {
            entries: [None; SLOTS],
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            next_expiry: None,
            lent: false,
        }
    }
}

/// A datagram made whole: its slot, and where the packet ends in the slot's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Whole {
    slot: usize,
    end: usize,
}

impl Reassembly {
    /// Adds the fragment in `pkt` from `client`; returns the datagram once every part is in.
    /// Drops of fragments kept before are counted into `stats` here; the fragment's own
    /// refusal is the caller's to count.
    pub(crate) fn add(
        &mut self,
        now: Instant,
        client: ClientKey,
        pkt: &ipv6::Packet<'_>,
        stats: &Stats,
    ) -> Result<Option<Whole>, DropReason> {
        if self.lent {
            return Err(DropReason::Malformed);
        }
        let f = Fragment::parse(pkt)?;
        self.expire(now, stats);
        let key = Key {
            client,
            src: pkt.src(),
            ident: f.ident,
        };
        let at = match self.find(&key) {
            Some(at) => at,
            None => self.open(now, key, stats)?,
        };
        let slot = self.slots.get_mut(at).ok_or(DropReason::Truncated)?;
        if let Err(reason) = slot.insert(&f) {
            if reason != DropReason::FragDuplicate {
                self.discard(at, reason, stats);
            }
            return Err(reason);
        }
        if slot.total != Some(slot.received) {
            return Ok(None);
        }
        Ok(Some(Whole {
            slot: at,
            end: DATA_AT + slot.received,
        }))
    }

    /// The slot holding `key`'s datagram.
    fn find(&self, key: &Key) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.is_some_and(|e| e.key == *key))
    }

    /// A slot for a new datagram of `key.client`: its own oldest when it has its share, else a
    /// free one (expired ones were freed just before), else none.
    fn open(&mut self, now: Instant, key: Key, stats: &Stats) -> Result<usize, DropReason> {
        let (mut mine, mut oldest, mut free) = (0, None::<(usize, Instant)>, None);
        for (i, e) in self.entries.iter().enumerate() {
            match e {
                None => free = free.or(Some(i)),
                Some(e) if e.key.client == key.client => {
                    mine += 1;
                    if oldest.is_none_or(|(_, t)| e.started < t) {
                        oldest = Some((i, e.started));
                    }
                }
                Some(_) => {}
            }
        }
        let at = match (oldest, free) {
            (Some((i, _)), _) if mine >= PER_CLIENT => {
                self.discard(i, DropReason::FragClientLimit, stats);
                i
            }
            (_, Some(i)) => i,
            _ => return Err(DropReason::FragTableFull),
        };
        let (entry, slot) = match (self.entries.get_mut(at), self.slots.get_mut(at)) {
            (Some(e), Some(s)) => (e, s),
            _ => return Err(DropReason::FragTableFull),
        };
        slot.reset();
        *entry = Some(Entry { key, started: now });
        let expiry = now.checked_add(TIMEOUT);
        self.next_expiry = match (self.next_expiry, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(at)
    }

    /// Gives up the datagram in slot `at`, counting each fragment it kept under `reason`.
    fn discard(&mut self, at: usize, reason: DropReason, stats: &Stats) {
        if let (Some(entry), Some(slot)) = (self.entries.get_mut(at), self.slots.get(at))
            && entry.take().is_some()
            && slot.count > 0
        {
            stats.count_drops(reason, slot.count as u64);
        }
    }

    /// Gives up every datagram older than [`TIMEOUT`] (`frag_timeout`). Cheap when none is
    /// due: one comparison.
    pub(crate) fn expire(&mut self, now: Instant, stats: &Stats) {
        if self.next_expiry.is_none_or(|t| now < t) {
            return;
        }
        let mut next = None::<Instant>;
        for at in 0..SLOTS {
            let Some(Some(e)) = self.entries.get(at) else {
                continue;
            };
            match e.started.checked_add(TIMEOUT) {
                Some(due) if due > now => next = Some(next.map_or(due, |n| n.min(due))),
                _ => self.discard(at, DropReason::FragTimeout, stats),
            }
        }
        self.next_expiry = next;
    }

    /// When the oldest datagram in progress runs out of time; `None` with none in progress.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.next_expiry
    }

    /// Datagrams in progress.
    #[cfg(test)]
    pub(crate) fn in_progress(&self) -> usize {
        self.entries.iter().flatten().count()
    }

    /// Frees the slot of `whole` and lends its buffer, the reassembled packet in
    /// `[HEADROOM..end]` with its Payload Length and Next Header set; give it back with
    /// [`Reassembly::give_back`].
    fn lend(&mut self, whole: Whole) -> Result<Vec<u8>, DropReason> {
        let (entry, slot) = match (
            self.entries.get_mut(whole.slot),
            self.slots.get_mut(whole.slot),
        ) {
            (Some(e), Some(s)) => (e, s),
            _ => return Err(DropReason::Truncated),
        };
        *entry = None;
        let plen = u16::try_from(whole.end - DATA_AT).map_err(|_| DropReason::Unsupported)?;
        let header = slot
            .buf
            .get_mut(HEADROOM..DATA_AT)
            .ok_or(DropReason::Truncated)?;
        header[ipv6::field::LENGTH].copy_from_slice(&plen.to_be_bytes());
        header[ipv6::field::NXT_HDR] = slot.next_header;
        self.lent = true;
        Ok(std::mem::take(&mut slot.buf))
    }

    /// Returns the buffer [`Reassembly::lend`] lent for `whole`.
    fn give_back(&mut self, whole: Whole, buf: Vec<u8>) {
        if let Some(slot) = self.slots.get_mut(whole.slot) {
            slot.buf = buf;
        }
        self.lent = false;
    }
}

impl Worker {
    /// A fragment to the IPsec endpoint in `buf[start..end]` from `from`: kept until its
    /// datagram is whole, which then takes the road from its slot.
    pub(crate) fn endpoint_fragment(
        &mut self,
        now: Instant,
        from: &ClientBinding,
        buf: &[u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let client = ClientKey::of(from).ok_or(DropReason::Malformed)?;
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let pkt = ipv6::Packet::new_checked(bytes)?;
        let Some(whole) = self.reassembly.add(now, client, &pkt, &self.stats)? else {
            return Ok(Verdict::Consumed);
        };
        let mut own = match self.reassembly.lend(whole) {
            Ok(own) => own,
            Err(reason) => {
                self.reassembly.give_back(whole, Vec::new());
                return Err(reason);
            }
        };
        // The slot has headroom of its own: the road may write in front of the packet.
        let v = self.ingress(now, from, &mut own, HEADROOM, whole.end);
        let queued = self.queue_whole(v, &own);
        self.reassembly.give_back(whole, own);
        queued
    }

    /// Queues what the road made of a reassembled datagram in `own` off the fast path.
    fn queue_whole(
        &mut self,
        v: Result<Verdict, DropReason>,
        own: &[u8],
    ) -> Result<Verdict, DropReason> {
        match v? {
            Verdict::Tun { start, end } => {
                let packet = own.get(start..end).ok_or(DropReason::Truncated)?;
                self.tun_writes.push_back(packet.to_vec());
            }
            Verdict::Udp {
                from,
                to,
                start,
                end,
                ..
            } => {
                let data = own.get(start..end).ok_or(DropReason::Truncated)?.to_vec();
                self.transmits.push_back(Transmit { from, to, data });
            }
            // Off the fast path there is no queue towards the native sockets; a reassembled
            // datagram that ends with a client reached directly is not carried.
            Verdict::Native { .. } => return Err(DropReason::Unsupported),
            Verdict::Consumed | Verdict::Drop(_) => {}
        }
        Ok(Verdict::Consumed)
    }
}
