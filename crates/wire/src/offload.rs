//! TUN offload (virtio-net headers) without copies beyond one: the pure half. The TCP
//! segments of each flow in a batch, interleaved with other flows or not, become GSO
//! super-packet descriptions ([`GroTable`], [`for_each_write`]: a virtio-net header and the
//! first segment's headers, rewritten for the whole, then every payload as it lies in the
//! caller's buffers), and a read carrying a super-packet is cut back into segments
//! ([`split_into`]). The I/O half (`writev`) is in
//! `gate64-io`'s `gro` module.
//!
//! Coalescing does not verify the segments' TCP checksums: the kernel computes the
//! super-packet's checksum over the bytes it is given, so a segment that arrived with a bad
//! checksum leaves with a good one. The bytes come from a client's own stack through an
//! authenticated tunnel (TLS) or a UDP datagram whose checksum the kernel checked, and the
//! client could have sent the same bytes with a valid checksum, so nothing is gained by
//! refusing them. (tun-rs' GRO verified each segment and copied each packet twice.)
//!
//! The merge rules follow Linux's `tcp_gro_receive`: same addresses, ports, IP header fields
//! (TOS/traffic class, TTL/hop limit, DF, flow label), identical TCP options, same ACK number
//! and window, the same other control bits and no SYN/FIN/RST/URG/ECE/CWR, PSH only on the
//! last segment, every segment but the last exactly `gso_size` long, at most 64 KiB in all.
//! Every header byte a segment cut from the super-packet copies from the first is compared,
//! so splitting gives back the same bytes; the IPv4 identification is the exception (the
//! split numbers it from the first's, as the kernel's GSO does), which Linux GRO also accepts
//! for DF packets.

use crate::checksum::{fold, sum as sum_acc, udp_field};
use crate::virtio_net::{self, GsoType};
use crate::{ipv4, ipv6, tcp};

mod table;

pub use table::{GRO_BATCH, GroTable};

/// Size of the virtio-net header tun-rs configures (`struct virtio_net_hdr`, no
/// `num_buffers`).
pub const VNET_HDR_LEN: usize = virtio_net::HEADER_LEN;
/// Segments merged into one super-packet at most (iovecs per `writev`).
const MAX_SEGMENTS: usize = 64;
/// Largest IP header (IPv4 without options only, IPv6 without extension headers) plus the
/// largest TCP header.
const MAX_HEADERS: usize = 40 + 60;

const TCP_FIN: u8 = tcp::FLAG_FIN;
const TCP_PSH: u8 = tcp::FLAG_PSH;
/// Control bits that end a run (Linux `tcp_gro_receive` flushes on them).
const TCP_NO_MERGE: u8 =
    tcp::FLAG_FIN | tcp::FLAG_SYN | tcp::FLAG_RST | tcp::FLAG_URG | tcp::FLAG_ECE | tcp::FLAG_CWR;
/// Offset of the TCP checksum field from the TCP header (`csum_offset`).
const TCP_CSUM: usize = tcp::field::CHECKSUM.start;

/// One's-complement sum of `b`, folded to at most 0xffff (see [`crate::checksum::sum`]).
fn sum(b: &[u8]) -> u32 {
    sum_acc(b, 0)
}

/// What coalescing needs to know of a TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    v6: bool,
    /// IP header length.
    iph: usize,
    /// TCP header length.
    tcph: usize,
    seq: u32,
    flags: u8,
    payload: usize,
}

/// A TCP segment that may be merged, or `None`: IPv4 without options and not a fragment, or
/// IPv6 without extension headers, lengths consistent, a non-empty payload and none of the
/// control bits that end a run.
fn segment(p: &[u8]) -> Option<Segment> {
    let (v6, iph) = match p.first()? >> 4 {
        4 => {
            let ip = ipv4::Packet::new_checked(p).ok()?;
            let plain = ip.header_len() == ipv4::HEADER_LEN && !ip.is_fragment();
            if !plain || ip.protocol() != ipv4::PROTO_TCP || usize::from(ip.total_len()) != p.len()
            {
                return None;
            }
            (false, ipv4::HEADER_LEN)
        }
        6 => {
            let ip = ipv6::Packet::new_checked(p).ok()?;
            if ip.next_header() != ipv6::NH_TCP || ip.total_len() != p.len() {
                return None;
            }
            (true, ipv6::HEADER_LEN)
        }
        _ => return None,
    };
    let t = tcp::Packet::new_checked(p.get(iph..)?).ok()?;
    let (tcph, flags) = (t.header_len(), t.flags());
    let payload = t.payload().len();
    if flags & TCP_NO_MERGE != 0 || payload == 0 {
        return None;
    }
    Some(Segment {
        v6,
        iph,
        tcph,
        seq: t.seq_number(),
        flags,
        payload,
    })
}

/// True when `q` (described by `qs`) may follow the run that starts with `first` and ends
/// with `last`, whose payloads so far total `total`.
fn can_follow(
    first: &[u8],
    fs: &Segment,
    last: &Segment,
    total: usize,
    q: &[u8],
    qs: &Segment,
) -> bool {
    // Control bits as the first's, PSH aside (Linux `tcp_gro_receive` flushes on the rest).
    if qs.v6 != fs.v6 || qs.tcph != fs.tcph || (qs.flags ^ fs.flags) & !TCP_PSH != 0 {
        return false;
    }
    // Every segment but the last is exactly gso_size (the first's payload) long.
    if last.payload != fs.payload || qs.payload > fs.payload || last.flags & TCP_PSH != 0 {
        return false;
    }
    if qs.seq != last.seq.wrapping_add(last.payload as u32) {
        return false;
    }
    if fs.iph + fs.tcph + total + qs.payload > usize::from(u16::MAX) {
        return false;
    }
    let same = |r: std::ops::Range<usize>| first.get(r.clone()) == q.get(r);
    let ip_same = if fs.v6 {
        // Version, traffic class, flow label; hop limit; addresses.
        same(0..4) && same(7..8) && same(8..40)
    } else {
        // TOS; reserved bit and DF; TTL; addresses.
        same(1..2) && first[6] & 0xc0 == q[6] & 0xc0 && same(8..9) && same(12..20)
    };
    let t = fs.iph;
    // Ports, ACK number, data offset and reserved bits, window, urgent pointer, options: the
    // segments cut from the super-packet copy them from the first.
    ip_same
        && same(t..t + 4)
        && same(t + 8..t + 13)
        && same(t + 14..t + 16)
        && same(t + 18..t + fs.tcph)
}

/// Builds the virtio-net header and the super-packet's headers into `out` for a run starting
/// with `first` whose payloads total `total` bytes and whose last segment had `last_flags`.
/// Returns the bytes used.
fn super_headers(
    out: &mut [u8; VNET_HDR_LEN + MAX_HEADERS],
    first: &[u8],
    fs: &Segment,
    total: usize,
    last_flags: u8,
) -> usize {
    let hl = fs.iph + fs.tcph;
    let (vh, h) = out.split_at_mut(VNET_HDR_LEN);
    let h = &mut h[..hl];
    h.copy_from_slice(&first[..hl]);
    let tcp_len = fs.tcph + total;
    let addrs = set_ip_lengths(h, fs.v6, fs.iph, tcp_len, None);
    let acc = addrs + u32::from(ipv6::NH_TCP) + tcp_len as u32;
    let mut t = tcp::Packet::new_unchecked(&mut h[fs.iph..]);
    // PSH of the last segment goes on the super-packet; the kernel keeps it on the last
    // segment it cuts.
    t.set_flags((t.flags() & !TCP_PSH) | (last_flags & TCP_PSH));
    // CHECKSUM_PARTIAL: the field holds the folded pseudo-header sum, not complemented.
    t.set_checksum(fold(acc));
    let vnet = virtio_net::Header {
        flags: virtio_net::F_NEEDS_CSUM,
        gso_type: if fs.v6 {
            GsoType::TcpV6
        } else {
            GsoType::TcpV4
        },
        gso_ecn: false,
        hdr_len: hl as u16,
        gso_size: fs.payload as u16,
        csum_start: fs.iph as u16,
        csum_offset: TCP_CSUM as u16,
    };
    // `vh` is exactly VNET_HDR_LEN bytes.
    let _ = vnet.encode(vh);
    VNET_HDR_LEN + hl
}

/// Sets the IP length field of the headers `h` (IP header of `iph` bytes, then TCP) for a
/// TCP segment of `tcp_len` bytes, and for IPv4 the identification (`ident`, if given) and
/// header checksum. Returns the sum of the addresses, for the pseudo-header.
fn set_ip_lengths(h: &mut [u8], v6: bool, iph: usize, tcp_len: usize, ident: Option<u16>) -> u32 {
    if v6 {
        h[ipv6::field::LENGTH].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        return sum(&h[ipv6::field::SRC.start..ipv6::field::DST.end]);
    }
    h[ipv4::field::LENGTH].copy_from_slice(&((iph + tcp_len) as u16).to_be_bytes());
    if let Some(id) = ident {
        h[ipv4::field::IDENT].copy_from_slice(&id.to_be_bytes());
    }
    ipv4::Packet::new_unchecked(&mut h[..iph]).fill_checksum();
    sum(&h[ipv4::field::SRC.start..ipv4::field::DST.end])
}

/// The writes that put `packets` on an offloading TUN: calls `emit` once per write with its
/// parts (virtio-net header, headers, payloads; at most 65 of them) and the number of packets
/// it carries. Segments are grouped by flow across the batch ([`GroTable`]); callers that
/// write often keep a [`GroTable`] instead, which saves clearing one per call. Pure, for
/// tests and fuzzing.
pub fn for_each_write(packets: &[&[u8]], emit: impl FnMut(&[&[u8]], usize)) {
    GroTable::new().for_each_write(packets, emit);
}

/// Why a read from the TUN could not be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// Shorter than the virtio-net header or the headers it announces.
    #[error("truncated TUN read")]
    Truncated,
    /// A GSO type other than TCP over IPv4/IPv6, or headers that do not match it.
    #[error("unsupported offload in TUN read")]
    Unsupported,
    /// More segments than the caller has slots for, or a segment larger than a slot.
    #[error("TUN read does not fit the slots")]
    NoRoom,
}

/// Where a split puts the packets it cuts: each is copied in from two parts (headers and
/// payload, or the whole packet and nothing) and then completed in place.
pub trait SplitOut {
    /// Copies `head` then `body` in as the next packet and returns it, or `None` when there
    /// is no room for it.
    fn next_packet(&mut self, head: &[u8], body: &[u8]) -> Option<&mut [u8]>;
}

/// Packets back to back (the IP-HTTPS stream format).
impl SplitOut for Vec<u8> {
    fn next_packet(&mut self, head: &[u8], body: &[u8]) -> Option<&mut [u8]> {
        let at = self.len();
        self.extend_from_slice(head);
        self.extend_from_slice(body);
        Some(&mut self[at..])
    }
}

/// One packet per slot, each at `offset` (headroom for encapsulation), its length in
/// `sizes`: what a worker reads a TUN into.
pub struct Slots<'a, B> {
    /// The slots, filled from the first.
    pub bufs: &'a mut [B],
    /// Each filled slot's packet length.
    pub sizes: &'a mut [usize],
    /// Where each packet starts in its slot.
    pub offset: usize,
    /// Slots filled so far.
    pub filled: usize,
}

impl<'a, B> Slots<'a, B> {
    /// Empty slots `bufs`, packets to start at `offset` in each, their lengths into `sizes`.
    pub fn new(bufs: &'a mut [B], sizes: &'a mut [usize], offset: usize) -> Self {
        Slots {
            bufs,
            sizes,
            offset,
            filled: 0,
        }
    }
}

impl<B: AsMut<[u8]>> SplitOut for Slots<'_, B> {
    fn next_packet(&mut self, head: &[u8], body: &[u8]) -> Option<&mut [u8]> {
        let len = head.len() + body.len();
        let size = self.sizes.get_mut(self.filled)?;
        let slot = self
            .bufs
            .get_mut(self.filled)?
            .as_mut()
            .get_mut(self.offset..)?
            .get_mut(..len)?;
        *size = len;
        self.filled += 1;
        slot[..head.len()].copy_from_slice(head);
        slot[head.len()..].copy_from_slice(body);
        Some(slot)
    }
}

/// Splits one read from an offloading TUN (`raw`: virtio-net header, then the packet) into
/// the packets it stands for, appended back to back to `out` (the IP-HTTPS stream format),
/// each with its checksum completed. Returns how many packets were appended. The payload is
/// copied once, from `raw` to `out`.
pub fn split_into(raw: &[u8], out: &mut Vec<u8>) -> Result<usize, SplitError> {
    split_to(raw, out)
}

/// [`split_into`] for any [`SplitOut`]. On an error some packets may have been put out
/// already; the caller discards the read.
pub fn split_to(raw: &[u8], out: &mut impl SplitOut) -> Result<usize, SplitError> {
    let vh = virtio_net::Header::decode(raw).map_err(|e| match e {
        crate::Error::Truncated => SplitError::Truncated,
        _ => SplitError::Unsupported,
    })?;
    let pkt = &raw[VNET_HDR_LEN..];
    let v6 = match (vh.gso_type, pkt.first().map(|b| b >> 4)) {
        (GsoType::None, _) => return complete_one(&vh, pkt, out),
        (GsoType::TcpV6, Some(6)) => true,
        (GsoType::TcpV4, Some(4)) => false,
        _ => return Err(SplitError::Unsupported),
    };
    let iph = if v6 {
        ipv6::HEADER_LEN
    } else {
        usize::from(pkt[0] & 0x0f) * 4
    };
    let proto = pkt.get(if v6 {
        ipv6::field::NXT_HDR
    } else {
        ipv4::field::PROTOCOL
    });
    if proto != Some(&ipv6::NH_TCP) || iph < ipv4::HEADER_LEN {
        return Err(SplitError::Unsupported);
    }
    let t = pkt
        .get(iph..)
        .and_then(|b| tcp::Packet::new_checked(b).ok())
        .ok_or(SplitError::Truncated)?;
    let gso_size = usize::from(vh.gso_size);
    if gso_size == 0 {
        return Err(SplitError::Truncated);
    }
    let hl = iph + t.header_len();
    let first = FirstSegment {
        v6,
        iph,
        headers: &pkt[..hl],
        seq: t.seq_number(),
        ident: if v6 {
            0
        } else {
            ipv4::Packet::new_unchecked(pkt).ident()
        },
        flags: t.flags(),
    };
    let chunks = t.payload().len().div_ceil(gso_size).max(1);
    for (k, chunk) in t.payload().chunks(gso_size).enumerate() {
        let p = out
            .next_packet(first.headers, chunk)
            .ok_or(SplitError::NoRoom)?;
        complete_segment(p, &first, k, gso_size, k + 1 == chunks);
    }
    Ok(chunks)
}

/// A packet without GSO: as it is, its checksum completed when the header asks for that.
fn complete_one(
    vh: &virtio_net::Header,
    pkt: &[u8],
    out: &mut impl SplitOut,
) -> Result<usize, SplitError> {
    let csum = vh
        .needs_csum()
        .then(|| (usize::from(vh.csum_start), usize::from(vh.csum_offset)));
    if let Some((start, offset)) = csum
        && start + offset + 2 > pkt.len()
    {
        return Err(SplitError::Truncated);
    }
    let p = out.next_packet(pkt, &[]).ok_or(SplitError::NoRoom)?;
    if let Some((start, offset)) = csum {
        let field = start + offset;
        // The field holds the pseudo-header sum; the checksum covers csum_start.. . The
        // kernel completes UDP and TCP alike; the UDP form is right for both (for TCP a 0
        // and 0xffff are the same value).
        let c = udp_field(!fold(sum(&p[start..])));
        p[field..field + 2].copy_from_slice(&c.to_be_bytes());
    }
    Ok(1)
}

/// What every segment cut from a super-packet copies or derives from its first one.
struct FirstSegment<'a> {
    v6: bool,
    iph: usize,
    /// IP and TCP headers.
    headers: &'a [u8],
    seq: u32,
    ident: u16,
    flags: u8,
}

/// Completes segment `k` of a super-packet (`p`: the first's headers, then its payload), as
/// the kernel's own GSO cuts it: lengths, IPv4 identification + k, sequence number +
/// k × gso_size, FIN and PSH on the last segment only, checksums complete.
fn complete_segment(p: &mut [u8], first: &FirstSegment<'_>, k: usize, gso_size: usize, last: bool) {
    let tcp_len = p.len() - first.iph;
    let ident = first.ident.wrapping_add(k as u16);
    let addrs = set_ip_lengths(p, first.v6, first.iph, tcp_len, Some(ident));
    let mut t = tcp::Packet::new_unchecked(&mut p[first.iph..]);
    t.set_seq_number(first.seq.wrapping_add((k * gso_size) as u32));
    if !last {
        t.set_flags(first.flags & !(TCP_FIN | TCP_PSH));
    }
    t.fill_checksum(addrs + u32::from(ipv6::NH_TCP) + tcp_len as u32);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio_net::F_NEEDS_CSUM;

    const GSO_TCPV4: u8 = 1;
    const GSO_TCPV6: u8 = 4;

    /// An IPv6 TCP segment with `payload` bytes of `fill`, sequence `seq`, flags `flags`.
    fn tcp6(seq: u32, payload: usize, flags: u8, fill: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40 + 32 + payload];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((32 + payload) as u16).to_be_bytes());
        p[6] = 6;
        p[7] = 64;
        p[8..24].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p[24..40].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5]);
        let t = 40;
        p[t..t + 2].copy_from_slice(&40000u16.to_be_bytes());
        p[t + 2..t + 4].copy_from_slice(&5201u16.to_be_bytes());
        p[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
        p[t + 8..t + 12].copy_from_slice(&7u32.to_be_bytes());
        p[t + 12] = 8 << 4;
        p[t + 13] = 0x10 | flags;
        p[t + 14..t + 16].copy_from_slice(&512u16.to_be_bytes());
        // Timestamp option.
        p[t + 20..t + 32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3]);
        p[t + 32..].fill(fill);
        p
    }

    fn tcp4(seq: u32, payload: usize, flags: u8) -> Vec<u8> {
        let mut p = vec![0u8; 20 + 20 + payload];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[192, 0, 2, 10]);
        p[16..20].copy_from_slice(&[10, 1, 0, 5]);
        p[20..22].copy_from_slice(&61001u16.to_be_bytes());
        p[22..24].copy_from_slice(&80u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = 0x10 | flags;
        p
    }

    /// The run lengths `write_coalesced` would form.
    fn runs(packets: &[Vec<u8>]) -> Vec<usize> {
        let refs: Vec<&[u8]> = packets.iter().map(|p| &p[..]).collect();
        let mut out = Vec::new();
        for_each_write(&refs, |_, n| out.push(n));
        out
    }

    #[test]
    fn contiguous_segments_merge_and_breaks_split_runs() {
        let a = tcp6(1000, 1000, 0, 1);
        let b = tcp6(2000, 1000, 0, 2);
        let c = tcp6(3000, 400, TCP_PSH, 3);
        assert_eq!(runs(&[a.clone(), b.clone(), c.clone()]), vec![3]);
        // A gap in the sequence, a short segment in the middle, PSH before the end, another
        // flow, an ACK number change, a FIN: each starts a new run.
        let gap = tcp6(3500, 1000, 0, 4);
        assert_eq!(runs(&[a.clone(), gap]), vec![1, 1]);
        let short = tcp6(2000, 500, 0, 4);
        let after_short = tcp6(2500, 500, 0, 4);
        assert_eq!(runs(&[a.clone(), short, after_short]), vec![2, 1]);
        let psh = tcp6(2000, 1000, TCP_PSH, 4);
        assert_eq!(runs(&[a.clone(), psh, c.clone()]), vec![2, 1]);
        let mut other = b.clone();
        other[41] ^= 1;
        assert_eq!(runs(&[a.clone(), other]), vec![1, 1]);
        let mut ack = b.clone();
        ack[51] ^= 1;
        assert_eq!(runs(&[a.clone(), ack]), vec![1, 1]);
        let fin = tcp6(2000, 1000, TCP_FIN, 4);
        assert_eq!(runs(&[a.clone(), fin]), vec![1, 1]);
        let mut ts = b.clone();
        ts[40 + 27] ^= 1;
        assert_eq!(runs(&[a, ts]), vec![1, 1]);
    }

    #[test]
    fn non_tcp_and_malformed_are_single() {
        assert_eq!(segment(&[]), None);
        assert_eq!(segment(&[0x60; 39]), None);
        let mut udp = tcp6(1, 10, 0, 0);
        udp[6] = 17;
        assert_eq!(segment(&udp), None);
        let mut bad_len = tcp6(1, 10, 0, 0);
        bad_len[5] ^= 1;
        assert_eq!(segment(&bad_len), None);
        let mut frag = tcp4(1, 10, 0);
        frag[6] |= 0x20;
        assert_eq!(segment(&frag), None);
        assert!(segment(&tcp4(1, 10, 0)).is_some());
        let empty = tcp6(1, 0, 0, 0);
        assert_eq!(segment(&empty), None);
    }

    #[test]
    fn super_headers_carry_the_totals_and_the_pseudo_header_sum() {
        let a = tcp6(1000, 1000, 0, 1);
        let fs = segment(&a).unwrap();
        let mut out = [0u8; VNET_HDR_LEN + MAX_HEADERS];
        let n = super_headers(&mut out, &a, &fs, 2400, TCP_PSH);
        assert_eq!(n, VNET_HDR_LEN + 72);
        let h = &out[VNET_HDR_LEN..n];
        assert_eq!(u16::from_be_bytes([h[4], h[5]]), 32 + 2400);
        assert_eq!(h[53] & TCP_PSH, TCP_PSH);
        let pseudo = fold(sum(&a[8..40]) + 6 + 32 + 2400);
        assert_eq!(u16::from_be_bytes([h[56], h[57]]), pseudo);
        assert_eq!(out[0], F_NEEDS_CSUM);
        assert_eq!(out[1], GSO_TCPV6);
        assert_eq!(u16::from_ne_bytes([out[4], out[5]]), 1000);
        // IPv4: total length and a valid header checksum.
        let b = tcp4(1, 1000, 0);
        let bs = segment(&b).unwrap();
        let n = super_headers(&mut out, &b, &bs, 3000, 0);
        let h = &out[VNET_HDR_LEN..n];
        assert_eq!(u16::from_be_bytes([h[2], h[3]]), 40 + 3000);
        assert_eq!(fold(sum(&h[..20])), 0xffff);
        assert_eq!(out[1], GSO_TCPV4);
    }

    /// TCP checksum over IPv6 verifies.
    fn tcp6_valid(p: &[u8]) -> bool {
        let len = p.len() - 40;
        fold(sum(&p[8..40]) + 6 + len as u32 + sum(&p[40..])) == 0xffff
    }

    #[test]
    fn wide_sum_matches_the_word_sum() {
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 7919 % 251) as u8).collect();
        for len in [0, 1, 2, 3, 7, 8, 9, 63, 1000, 1001] {
            let words = data[..len].chunks(2).fold(0u32, |a, c| {
                a + u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
            });
            assert_eq!(fold(sum(&data[..len])), fold(words), "len {len}");
        }
    }

    /// Three segments of one flow and the super-packet read they coalesce into.
    fn three_coalesced() -> ([Vec<u8>; 3], Vec<u8>) {
        let segs = [
            tcp6(1000, 1000, 0, 1),
            tcp6(2000, 1000, 0, 2),
            tcp6(3000, 10, TCP_PSH, 3),
        ];
        let fs = segment(&segs[0]).unwrap();
        let mut hdr = [0u8; VNET_HDR_LEN + MAX_HEADERS];
        let n = super_headers(&mut hdr, &segs[0], &fs, 2010, TCP_PSH);
        let mut raw = hdr[..n].to_vec();
        for s in &segs {
            raw.extend_from_slice(&s[72..]);
        }
        (segs, raw)
    }

    #[test]
    fn split_undoes_coalescing() {
        // Three segments coalesced into a super-packet, then split again.
        let (segs, raw) = three_coalesced();
        let mut out = Vec::new();
        assert_eq!(split_into(&raw, &mut out), Ok(3));
        let mut at = 0;
        for (k, want) in segs.iter().enumerate() {
            let got = &out[at..at + want.len()];
            assert!(tcp6_valid(got), "segment {k} checksum");
            // Same bytes as the original segment, checksum aside.
            let mut a = got.to_vec();
            let mut b = want.clone();
            a[56..58].fill(0);
            b[56..58].fill(0);
            assert_eq!(a, b, "segment {k}");
            at += want.len();
        }
        assert_eq!(at, out.len());
    }

    #[test]
    fn split_into_slots_gives_the_stream_split_one_packet_per_slot() {
        let (_, raw) = three_coalesced();
        let mut stream = Vec::new();
        assert_eq!(split_into(&raw, &mut stream), Ok(3));
        let (offset, slot) = (16, 16 + 1072);
        let mut bufs = vec![vec![0u8; slot]; 4];
        let mut sizes = [0usize; 4];
        let mut out = Slots::new(&mut bufs, &mut sizes, offset);
        assert_eq!(split_to(&raw, &mut out), Ok(3));
        assert_eq!(out.filled, 3);
        let mut at = 0;
        for k in 0..3 {
            let got = &bufs[k][offset..offset + sizes[k]];
            assert_eq!(got, &stream[at..at + sizes[k]], "segment {k}");
            at += sizes[k];
        }
        assert_eq!(at, stream.len());
        // Too few slots, or slots too small for a segment: refused, not cut short.
        let mut sizes = [0usize; 2];
        let mut out = Slots::new(&mut bufs[..2], &mut sizes, offset);
        assert_eq!(split_to(&raw, &mut out), Err(SplitError::NoRoom));
        let mut small = vec![vec![0u8; slot - 1]; 4];
        let mut sizes = [0usize; 4];
        let mut out = Slots::new(&mut small, &mut sizes, offset);
        assert_eq!(split_to(&raw, &mut out), Err(SplitError::NoRoom));
    }

    /// A UDP datagram over IPv6 whose checksum computes to 0, as a local socket hands it to
    /// a TUN device with checksum offload (NEEDS_CSUM, the field holding the pseudo-header
    /// sum): completed as 0xffff, which a receiver verifies, never as 0, which it drops.
    #[test]
    fn a_udp_checksum_that_computes_to_zero_is_completed_as_0xffff() {
        let (src, dst) = (
            "2001:db8::2".parse().unwrap(),
            "2001:db8:1::5".parse().unwrap(),
        );
        let mut udp = vec![0u8; 8 + 10];
        udp[0..2].copy_from_slice(&47007u16.to_be_bytes());
        udp[2..4].copy_from_slice(&9000u16.to_be_bytes());
        udp[4..6].copy_from_slice(&18u16.to_be_bytes());
        udp[8..16].copy_from_slice(b"probe 42");
        // The last payload word makes the sum over pseudo-header and datagram 0xffff: its
        // checksum computes to 0.
        let pseudo = crate::checksum::pseudo_header_v6(&src, &dst, crate::ipv6::NH_UDP, 18);
        let without = crate::checksum::fold(crate::checksum::sum(&udp, pseudo));
        udp[16..18].copy_from_slice(&(0xffff - without).to_be_bytes());
        assert_eq!(crate::checksum::upper_layer_v6(&src, &dst, 17, &udp), 0);
        let mut p = vec![0u8; 40];
        crate::ipv6::emit_header(&mut p, 18, crate::ipv6::NH_UDP, 64, &src, &dst).unwrap();
        // As the kernel hands it over: the field holds the folded pseudo-header sum.
        udp[6..8].copy_from_slice(&crate::checksum::fold(pseudo).to_be_bytes());
        p.extend_from_slice(&udp);
        let vh = virtio_net::Header {
            flags: F_NEEDS_CSUM,
            csum_start: 40,
            csum_offset: 6,
            ..virtio_net::Header::NONE
        };
        let mut raw = vec![0u8; VNET_HDR_LEN];
        vh.encode(&mut raw).unwrap();
        raw.extend_from_slice(&p);
        let mut out = Vec::new();
        assert_eq!(split_into(&raw, &mut out), Ok(1));
        assert_eq!(&out[46..48], &[0xff, 0xff]);
        // It verifies: the sum over pseudo-header and datagram, field included, is 0xffff.
        assert_eq!(
            crate::checksum::finish(crate::checksum::sum(&out[40..], pseudo)),
            0
        );
    }

    #[test]
    fn split_refuses_what_it_cannot_handle() {
        let mut out = Vec::new();
        assert_eq!(split_into(&[0; 4], &mut out), Err(SplitError::Truncated));
        let mut raw = vec![0u8; VNET_HDR_LEN];
        raw[1] = 5; // UDP_L4
        raw.extend_from_slice(&tcp6(1, 10, 0, 0));
        assert_eq!(split_into(&raw, &mut out), Err(SplitError::Unsupported));
        let mut raw = vec![0u8; VNET_HDR_LEN];
        raw[1] = GSO_TCPV6;
        raw[4..6].copy_from_slice(&100u16.to_ne_bytes());
        raw.extend_from_slice(&tcp6(1, 10, 0, 0)[..50]);
        assert_eq!(split_into(&raw, &mut out), Err(SplitError::Truncated));
        assert!(out.is_empty());
        // No offload: the packet as it is, with its checksum completed when asked.
        let p = tcp6(5, 20, 0, 9);
        let mut raw = vec![0u8; VNET_HDR_LEN];
        raw.extend_from_slice(&p);
        assert_eq!(split_into(&raw, &mut out), Ok(1));
        assert_eq!(out, p);
    }
}
