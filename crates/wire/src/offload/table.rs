//! The GRO table: which packets of a batch go out together. Segments are grouped by flow
//! across the whole batch, as Linux's `dev_gro_receive` and wireguard-go's `tcpGROTable` do,
//! so the segments of thousands of interleaved TCP flows still coalesce; grouping only
//! adjacent segments coalesces almost nothing once many clients share a batch.
//!
//! Each flow (addresses and ports) has at most one open item, the one its next segment may
//! join. A packet of the flow that cannot join (a gap, other flags or options, a different
//! ACK, PSH before it, a short segment before it) closes that item; if it is a mergeable
//! segment it opens the flow's next item, else it goes alone. Items leave in the order their
//! first packet arrived, so the packets of one flow keep their order; packets of different
//! flows may pass each other, as they do through Linux GRO. Packets without a readable flow
//! (not TCP, IPv4 fragments, truncated) go alone, where they arrived.
//!
//! Fixed capacity: [`GRO_BATCH`] packets per plan, a table of twice as many buckets with
//! linear probing, so a lookup always ends at an empty bucket and nothing is allocated.

use super::{MAX_SEGMENTS, Segment, can_follow, segment};
use crate::{ipv4, ipv6};

/// Packets planned together at most; longer batches are planned in consecutive chunks.
pub const GRO_BATCH: usize = 128;
/// Hash buckets: a power of two, at least twice [`GRO_BATCH`], so probes stay short and one
/// bucket is always empty.
const BUCKETS: usize = 2 * GRO_BATCH;
const EMPTY: u16 = u16::MAX;
const NO_PACKET: u16 = u16::MAX;

/// Where a packet's flow identity lies: addresses at the family's fixed offsets, ports at
/// `l4`.
#[derive(Debug, Clone, Copy, Default)]
struct Flow {
    v6: bool,
    l4: usize,
    hash: u32,
}

/// A group of packets that leaves as one write.
#[derive(Debug, Clone, Copy)]
struct Item {
    /// Index of the first packet, then of the last; packets in between are chained through
    /// [`GroTable::next`].
    first: u16,
    tail: u16,
    count: u16,
    /// The merge state: first segment, last segment, payload bytes so far. `None` for a
    /// packet that goes alone.
    run: Option<(Segment, Segment, usize)>,
    /// The flow's next segment may still join.
    open: bool,
    flow: Flow,
}

const NO_ITEM: Item = Item {
    first: NO_PACKET,
    tail: NO_PACKET,
    count: 0,
    run: None,
    open: false,
    flow: Flow {
        v6: false,
        l4: 0,
        hash: 0,
    },
};

/// A reusable GRO table; [`GroTable::for_each_write`] plans and emits one batch.
#[derive(Debug, Clone)]
pub struct GroTable {
    items: [Item; GRO_BATCH],
    len: usize,
    /// The packet after packet `i` in its item.
    next: [u16; GRO_BATCH],
    /// Bucket -> the latest item of the flow hashed there.
    buckets: [u16; BUCKETS],
}

impl Default for GroTable {
    fn default() -> Self {
        GroTable {
            items: [NO_ITEM; GRO_BATCH],
            len: 0,
            next: [NO_PACKET; GRO_BATCH],
            buckets: [EMPTY; BUCKETS],
        }
    }
}

impl GroTable {
    /// An empty table (about 12 KiB; keep one per thread rather than one per batch).
    pub fn new() -> Self {
        Self::default()
    }

    /// The writes that put `packets` on an offloading TUN: calls `emit` once per write with
    /// its parts (virtio-net header, headers, payloads; at most 65 of them) and the number of
    /// packets it carries. Every packet is written exactly once; see the module doc for the
    /// order.
    pub fn for_each_write(&mut self, packets: &[&[u8]], mut emit: impl FnMut(&[&[u8]], usize)) {
        for chunk in packets.chunks(GRO_BATCH) {
            self.plan(chunk);
            self.emit(chunk, &mut emit);
        }
    }

    /// Groups `packets` (at most [`GRO_BATCH`]) into items.
    fn plan(&mut self, packets: &[&[u8]]) {
        debug_assert!(packets.len() <= GRO_BATCH);
        self.len = 0;
        self.buckets.fill(EMPTY);
        for (i, &p) in packets.iter().enumerate() {
            self.next[i] = NO_PACKET;
            let Some(flow) = flow_of(p) else {
                self.push(i, None, Flow::default(), None);
                continue;
            };
            let seg = segment(p);
            let bucket = self.find(packets, p, &flow);
            let latest = self.buckets[bucket];
            if let (Some(qs), Some(item)) = (seg, self.items.get_mut(usize::from(latest)))
                && item.open
                && let Some((fs, last, total)) = item.run.as_mut()
            {
                let first = packets[usize::from(item.first)];
                if usize::from(item.count) < MAX_SEGMENTS
                    && can_follow(first, fs, last, *total, p, &qs)
                {
                    *last = qs;
                    *total += qs.payload;
                    self.next[usize::from(item.tail)] = i as u16;
                    item.tail = i as u16;
                    item.count += 1;
                    continue;
                }
            }
            self.push(i, seg, flow, Some(bucket));
        }
    }

    /// Opens a new item for packet `i`; with a bucket it becomes its flow's latest item.
    fn push(&mut self, i: usize, seg: Option<Segment>, flow: Flow, bucket: Option<usize>) {
        if let Some(b) = bucket {
            if let Some(prev) = self.items.get_mut(usize::from(self.buckets[b])) {
                prev.open = false;
            }
            self.buckets[b] = self.len as u16;
        }
        self.items[self.len] = Item {
            first: i as u16,
            tail: i as u16,
            count: 1,
            run: seg.map(|s| (s, s, s.payload)),
            open: seg.is_some() && bucket.is_some(),
            flow,
        };
        self.len += 1;
    }

    /// The bucket holding `p`'s flow, or the empty bucket where it would go.
    fn find(&self, packets: &[&[u8]], p: &[u8], flow: &Flow) -> usize {
        let mask = BUCKETS - 1;
        let mut b = flow.hash as usize & mask;
        loop {
            let Some(item) = self.items.get(usize::from(self.buckets[b])) else {
                return b;
            };
            if item.flow.hash == flow.hash
                && same_flow(packets[usize::from(item.first)], &item.flow, p, flow)
            {
                return b;
            }
            b = (b + 1) & mask;
        }
    }

    /// Emits the planned items of `packets`, in the order their first packets arrived.
    fn emit(&self, packets: &[&[u8]], emit: &mut impl FnMut(&[&[u8]], usize)) {
        let plain = [0u8; super::VNET_HDR_LEN];
        for item in &self.items[..self.len] {
            let first = packets[usize::from(item.first)];
            let Some((fs, last, total)) = item.run.filter(|_| item.count > 1) else {
                emit(&[&plain, first], 1);
                continue;
            };
            let mut hdr = [0u8; super::VNET_HDR_LEN + super::MAX_HEADERS];
            let mut parts: [&[u8]; MAX_SEGMENTS + 1] = [&[]; MAX_SEGMENTS + 1];
            let n = super::super_headers(&mut hdr, first, &fs, total, last.flags);
            parts[0] = &hdr[..n];
            let off = fs.iph + fs.tcph;
            let (mut at, mut k) = (item.first, 1);
            while at != NO_PACKET && k <= MAX_SEGMENTS {
                let i = usize::from(at);
                parts[k] = packets[i].get(off..).unwrap_or_default();
                at = self.next[i];
                k += 1;
            }
            emit(&parts[..k], usize::from(item.count));
        }
    }
}

/// The flow of a TCP packet whose ports can be read: IPv4 (options allowed) that is not a
/// fragment, or IPv6 whose extension headers (if any) lead to TCP without a Fragment header.
/// Packets keyed here but refused by [`segment`] go alone and close their flow's item.
fn flow_of(p: &[u8]) -> Option<Flow> {
    let (v6, l4) = match p.first()? >> 4 {
        4 => {
            let ip = ipv4::Packet::new_checked(p).ok()?;
            if ip.is_fragment() || ip.protocol() != ipv4::PROTO_TCP {
                return None;
            }
            (false, ip.header_len())
        }
        6 => {
            let chain = ipv6::Packet::new_checked(p).ok()?.walk().ok()?;
            if chain.fragment.is_some() || chain.protocol != ipv6::NH_TCP {
                return None;
            }
            (true, chain.upper_offset)
        }
        _ => return None,
    };
    let ports = p.get(l4..l4 + 4)?;
    let addrs = if v6 { &p[8..40] } else { &p[12..20] };
    Some(Flow {
        v6,
        l4,
        hash: hash(addrs, ports),
    })
}

/// True when `a` and `b` carry the same addresses and ports.
fn same_flow(a: &[u8], fa: &Flow, b: &[u8], fb: &Flow) -> bool {
    let addrs = if fa.v6 { 8..40 } else { 12..20 };
    fa.v6 == fb.v6
        && a.get(addrs.clone()) == b.get(addrs)
        && a.get(fa.l4..fa.l4 + 4) == b.get(fb.l4..fb.l4 + 4)
}

/// A multiplicative hash of the flow's addresses and ports. Not keyed: a sender who makes its
/// flows collide only lengthens probes within one bounded batch.
fn hash(addrs: &[u8], ports: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for w in addrs.chunks_exact(4).chain(ports.chunks_exact(4)) {
        let w = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
        h = (h ^ w).wrapping_mul(0x9e37_79b1).rotate_left(13);
    }
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;
    use crate::offload::{VNET_HDR_LEN, split_into};
    use crate::tcp;
    use proptest::prelude::*;

    const ACK: u8 = tcp::FLAG_ACK;
    const PSH: u8 = tcp::FLAG_PSH;
    const TCP_HEADER: usize = 32;

    /// One TCP segment to build, with valid checksums.
    #[derive(Debug, Clone, Copy)]
    struct Seg {
        v6: bool,
        flow: u8,
        seq: u32,
        payload: usize,
        flags: u8,
        /// IPv4 identification.
        ident: u16,
        /// Timestamp option value (options differ when it does).
        tsval: u8,
        /// IPv6 with an 8-byte Destination Options header before TCP.
        ext: bool,
    }

    impl Seg {
        fn new(v6: bool, flow: u8, seq: u32, payload: usize) -> Self {
            Seg {
                v6,
                flow,
                seq,
                payload,
                flags: ACK,
                // Consecutive along a flow of equal segments, as a sender numbers them.
                ident: seq.checked_div(payload as u32).unwrap_or(0) as u16,
                tsval: 9,
                ext: false,
            }
        }
    }

    fn build(s: &Seg) -> Vec<u8> {
        let iph = match (s.v6, s.ext) {
            (true, false) => 40,
            (true, true) => 48,
            (false, _) => 20,
        };
        let tcp_len = TCP_HEADER + s.payload;
        let mut p = vec![0u8; iph + tcp_len];
        if s.v6 {
            p[0] = 0x60;
            p[4..6].copy_from_slice(&((iph - 40 + tcp_len) as u16).to_be_bytes());
            p[6] = if s.ext {
                ipv6::NH_DEST_OPTS
            } else {
                ipv6::NH_TCP
            };
            p[7] = 64;
            p[8..10].copy_from_slice(&[0x20, 0x01]);
            p[23] = s.flow;
            p[24..26].copy_from_slice(&[0x20, 0x01]);
            p[39] = 5;
            if s.ext {
                p[40] = ipv6::NH_TCP;
            }
        } else {
            p[0] = 0x45;
            p[2..4].copy_from_slice(&((iph + tcp_len) as u16).to_be_bytes());
            p[4..6].copy_from_slice(&s.ident.to_be_bytes());
            p[6] = 0x40;
            p[8] = 64;
            p[9] = ipv4::PROTO_TCP;
            p[12..16].copy_from_slice(&[192, 0, 2, s.flow]);
            p[16..20].copy_from_slice(&[10, 1, 0, 5]);
            ipv4::Packet::new_unchecked(&mut p[..20]).fill_checksum();
        }
        let t = iph;
        p[t..t + 2].copy_from_slice(&(40000 + u16::from(s.flow)).to_be_bytes());
        p[t + 2..t + 4].copy_from_slice(&443u16.to_be_bytes());
        p[t + 4..t + 8].copy_from_slice(&s.seq.to_be_bytes());
        p[t + 8..t + 12].copy_from_slice(&7u32.to_be_bytes());
        p[t + 12] = ((TCP_HEADER / 4) as u8) << 4;
        p[t + 13] = s.flags;
        p[t + 14..t + 16].copy_from_slice(&512u16.to_be_bytes());
        p[t + 20..t + 32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, s.tsval, 0, 0, 0, 3]);
        for (k, b) in p[t + TCP_HEADER..].iter_mut().enumerate() {
            *b = (s.seq as usize + k) as u8 ^ s.flow;
        }
        let addrs = if s.v6 { &p[8..40] } else { &p[12..20] };
        let pseudo = checksum::sum(addrs, 0) + u32::from(ipv6::NH_TCP) + tcp_len as u32;
        tcp::Packet::new_unchecked(&mut p[t..]).fill_checksum(pseudo);
        p
    }

    /// For each write, the number of packets it carries.
    fn plan(packets: &[Vec<u8>]) -> Vec<usize> {
        let refs: Vec<&[u8]> = packets.iter().map(|p| &p[..]).collect();
        let mut out = Vec::new();
        GroTable::new().for_each_write(&refs, |_, n| out.push(n));
        out
    }

    /// Writes `packets`, splits every write back and returns the packets that come out.
    fn round_trip(packets: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let refs: Vec<&[u8]> = packets.iter().map(|p| &p[..]).collect();
        let mut stream = Vec::new();
        let mut written = 0;
        GroTable::new().for_each_write(&refs, |parts, n| {
            let raw = parts.concat();
            assert_eq!(split_into(&raw, &mut stream), Ok(n));
            written += n;
        });
        assert_eq!(written, packets.len(), "every packet written once");
        let mut out = Vec::new();
        let mut at = 0;
        while at < stream.len() {
            let len = match stream[at] >> 4 {
                6 => 40 + usize::from(u16::from_be_bytes([stream[at + 4], stream[at + 5]])),
                _ => usize::from(u16::from_be_bytes([stream[at + 2], stream[at + 3]])),
            };
            out.push(stream[at..at + len].to_vec());
            at += len;
        }
        out
    }

    /// Packets grouped by flow (family and source port), each group in order.
    fn by_flow(packets: &[Vec<u8>]) -> std::collections::BTreeMap<(u8, Vec<u8>), Vec<Vec<u8>>> {
        let mut m = std::collections::BTreeMap::<_, Vec<Vec<u8>>>::new();
        for p in packets {
            let key = match flow_of(p) {
                Some(f) => (p[0] >> 4, p[f.l4..f.l4 + 2].to_vec()),
                None => (0, Vec::new()),
            };
            m.entry(key).or_default().push(p.clone());
        }
        m
    }

    #[test]
    fn interleaved_flows_coalesce_per_flow() {
        // 32 flows, 4 segments each, sent round robin: no two adjacent packets share a flow.
        let mut packets = Vec::new();
        for k in 0..4u32 {
            for flow in 0..32u8 {
                packets.push(build(&Seg::new(flow % 2 == 0, flow, 1000 + k * 500, 500)));
            }
        }
        assert_eq!(plan(&packets), vec![4; 32]);
        assert_eq!(by_flow(&round_trip(&packets)), by_flow(&packets));
        // The adjacent-only grouping this replaced wrote every packet alone.
        let mut adjacent = 0;
        for w in packets.windows(2) {
            adjacent +=
                usize::from(flow_of(&w[0]).map(|f| f.hash) == flow_of(&w[1]).map(|f| f.hash));
        }
        assert_eq!(adjacent, 0);
    }

    #[test]
    fn a_segment_that_cannot_join_closes_its_flows_item() {
        let a = |seq, flow| Seg::new(true, flow, seq, 100);
        let mut fin = a(1200, 1);
        fin.flags |= tcp::FLAG_FIN;
        let mut other_ts = a(1300, 1);
        other_ts.tsval = 10;
        let mut ext = a(1400, 1);
        ext.ext = true;
        let mut rst = a(1100, 2);
        rst.flags = tcp::FLAG_RST | ACK;
        let segs = [
            a(1000, 1),
            a(1000, 2),
            a(1100, 1),
            rst,        // not mergeable: goes alone and closes flow 2's item
            a(1200, 2), // so this one starts flow 2's next item
            a(1300, 2),
            fin,      // flow 1: alone
            other_ts, // flow 1: after the FIN, a new item
            a(1400, 1).with_seq(1400),
            ext,                     // IPv6 extension header: alone, closes flow 1's item
            a(1500, 1),              // a new item
            a(1700, 1),              // a gap: a new item
            a(1600, 1),              // out of order: a new item, after the one above
            a(1700, 1).with_len(50), // short: joins, and ends what may join
            a(1750, 1),              // longer than the short segment before it: a new item
        ];
        let packets: Vec<Vec<u8>> = segs.iter().map(build).collect();
        // Items in the order their first packets arrived.
        assert_eq!(plan(&packets), vec![2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1]);
        let out = round_trip(&packets);
        assert_eq!(by_flow(&out), by_flow(&packets));
    }

    #[test]
    fn psh_ends_an_item_and_different_flags_do_not_merge() {
        let mut psh = Seg::new(false, 3, 1100, 100);
        psh.flags |= PSH;
        let mut no_ack = Seg::new(false, 3, 1300, 100);
        no_ack.flags = 0;
        let segs = [
            Seg::new(false, 3, 1000, 100),
            psh,
            Seg::new(false, 3, 1200, 100),
            no_ack,
        ];
        let packets: Vec<Vec<u8>> = segs.iter().map(build).collect();
        assert_eq!(plan(&packets), vec![2, 1, 1]);
        assert_eq!(round_trip(&packets), packets);
    }

    #[test]
    fn a_full_item_opens_the_next_and_long_batches_are_chunked() {
        // 300 segments of one flow: 64 per item at most, 128 packets per plan.
        let packets: Vec<Vec<u8>> = (0..300u32)
            .map(|k| build(&Seg::new(true, 1, k * 10, 10)))
            .collect();
        assert_eq!(plan(&packets), vec![64, 64, 64, 64, 44]);
        assert_eq!(round_trip(&packets), packets);
    }

    #[test]
    fn non_tcp_and_fragments_go_alone_where_they_arrived() {
        let mut udp = build(&Seg::new(true, 1, 0, 20));
        udp[6] = ipv6::NH_UDP;
        let mut frag = build(&Seg::new(false, 1, 100, 20));
        frag[6] |= 0x20;
        assert!(flow_of(&udp).is_none() && flow_of(&frag).is_none());
        assert!(flow_of(&[0x60; 10]).is_none() && flow_of(&[]).is_none());
        let packets = vec![udp, build(&Seg::new(true, 1, 0, 20)), frag];
        assert_eq!(plan(&packets), vec![1, 1, 1]);
    }

    impl Seg {
        fn with_seq(mut self, seq: u32) -> Self {
            self.seq = seq;
            self
        }
        fn with_len(mut self, payload: usize) -> Self {
            self.payload = payload;
            self
        }
    }

    /// One flow's segments: in sequence with the given payload sizes, each with a chance of a
    /// gap before it, PSH or a different option.
    fn flow_segments(v6: bool, flow: u8) -> impl Strategy<Value = Vec<Seg>> {
        let seg = (
            prop_oneof![4 => Just(300usize), 1 => 1usize..300],
            prop_oneof![8 => Just(0u32), 1 => 1u32..400],
            prop_oneof![8 => Just(ACK), 1 => Just(ACK | PSH), 1 => Just(0u8)],
            prop_oneof![8 => Just(9u8), 1 => Just(10u8)],
            prop_oneof![12 => Just(false), 1 => Just(true)],
        );
        proptest::collection::vec(seg, 1..12).prop_map(move |v| {
            let mut seq = 1000u32;
            v.into_iter()
                .enumerate()
                .map(|(k, (payload, gap, flags, tsval, ext))| {
                    seq = seq.wrapping_add(gap);
                    let s = Seg {
                        v6,
                        flow,
                        seq,
                        payload,
                        flags,
                        ident: 100 + k as u16,
                        tsval,
                        ext: ext && v6,
                    };
                    seq = seq.wrapping_add(payload as u32);
                    s
                })
                .collect()
        })
    }

    /// Several flows, interleaved in a random order that keeps each flow's own order.
    fn interleaved() -> impl Strategy<Value = Vec<Seg>> {
        (1usize..8)
            .prop_flat_map(|n| {
                let flows: Vec<_> = (0..n).map(|f| flow_segments(f % 3 != 0, f as u8)).collect();
                (flows, proptest::collection::vec(any::<u8>(), 100))
            })
            .prop_map(|(mut flows, picks)| {
                let mut out = Vec::new();
                let mut picks = picks.into_iter().cycle();
                for f in &mut flows {
                    f.reverse();
                }
                while flows.iter().any(|f| !f.is_empty()) {
                    let live: Vec<usize> =
                        (0..flows.len()).filter(|&i| !flows[i].is_empty()).collect();
                    let pick = live[usize::from(picks.next().unwrap_or(0)) % live.len()];
                    out.extend(flows[pick].pop());
                }
                out
            })
    }

    proptest! {
        /// Coalescing then splitting gives back every flow's packets, byte for byte, in order.
        #[test]
        fn coalescing_then_splitting_gives_back_the_same_bytes(segs in interleaved()) {
            let packets: Vec<Vec<u8>> = segs.iter().map(build).collect();
            let out = round_trip(&packets);
            prop_assert_eq!(out.len(), packets.len());
            prop_assert_eq!(by_flow(&out), by_flow(&packets));
        }
    }

    #[test]
    fn the_table_is_reusable_and_headers_are_sized_for_it() {
        let mut t = GroTable::new();
        let a: Vec<Vec<u8>> = (0..3u32)
            .map(|k| build(&Seg::new(true, 1, k * 10, 10)))
            .collect();
        let refs: Vec<&[u8]> = a.iter().map(|p| &p[..]).collect();
        for _ in 0..2 {
            let mut writes = Vec::new();
            t.for_each_write(&refs, |parts, n| writes.push((parts[0].len(), n)));
            assert_eq!(writes, vec![(VNET_HDR_LEN + 40 + TCP_HEADER, 3)]);
        }
    }
}
