//! TUN offload (virtio-net headers) without copies beyond one: the pure half. Runs of
//! consecutive TCP segments of one flow become one GSO super-packet description
//! ([`for_each_write`]: a virtio-net header and the first segment's headers, rewritten for
//! the whole, then every payload as it lies in the caller's buffers), and a read carrying a
//! super-packet is cut back into segments ([`split_into`]). The I/O half (`writev`) is in
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
//! and window, no SYN/FIN/RST/URG/ECE/CWR, PSH only on the last segment, every segment but the
//! last exactly `gso_size` long, at most 64 KiB in all.

/// Size of the virtio-net header tun-rs configures (`struct virtio_net_hdr`, no
/// `num_buffers`).
pub const VNET_HDR_LEN: usize = 10;
/// Segments merged into one super-packet at most (iovecs per `writev`).
const MAX_SEGMENTS: usize = 64;
/// Largest IP header (IPv4 without options only, IPv6 without extension headers) plus the
/// largest TCP header.
const MAX_HEADERS: usize = 40 + 60;

const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const F_NEEDS_CSUM: u8 = 1;

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_PSH: u8 = 0x08;
const TCP_URG: u8 = 0x20;
const TCP_ECE: u8 = 0x40;
const TCP_CWR: u8 = 0x80;

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

/// A TCP segment that may be merged, or `None`.
fn segment(p: &[u8]) -> Option<Segment> {
    let (v6, iph) = match p.first()? >> 4 {
        4 => {
            // No options, not a fragment, TCP, lengths consistent.
            let total = usize::from(u16::from_be_bytes([*p.get(2)?, *p.get(3)?]));
            let frag = u16::from_be_bytes([*p.get(6)?, *p.get(7)?]);
            if p[0] != 0x45 || p.get(9)? != &6 || total != p.len() || frag & 0x3fff != 0 {
                return None;
            }
            (false, 20)
        }
        6 => {
            let plen = usize::from(u16::from_be_bytes([*p.get(4)?, *p.get(5)?]));
            if p.get(6)? != &6 || plen + 40 != p.len() {
                return None;
            }
            (true, 40)
        }
        _ => return None,
    };
    let tcph = usize::from(p.get(iph + 12)? >> 4) * 4;
    if tcph < 20 || iph + tcph > p.len() {
        return None;
    }
    let flags = p[iph + 13];
    if flags & (TCP_FIN | TCP_SYN | TCP_RST | TCP_URG | TCP_ECE | TCP_CWR) != 0 {
        return None;
    }
    let payload = p.len() - iph - tcph;
    if payload == 0 {
        return None;
    }
    let seq = u32::from_be_bytes([p[iph + 4], p[iph + 5], p[iph + 6], p[iph + 7]]);
    Some(Segment {
        v6,
        iph,
        tcph,
        seq,
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
    if qs.v6 != fs.v6 || qs.tcph != fs.tcph {
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
        // TOS; DF; TTL; addresses.
        same(1..2) && first[6] & 0x40 == q[6] & 0x40 && same(8..9) && same(12..20)
    };
    let t = fs.iph;
    // Ports, ACK number, window, options.
    ip_same
        && same(t..t + 4)
        && same(t + 8..t + 12)
        && same(t + 14..t + 16)
        && same(t + 20..t + fs.tcph)
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
    let mut acc: u32;
    if fs.v6 {
        h[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        acc = sum(&h[8..40]);
    } else {
        h[2..4].copy_from_slice(&((fs.iph + tcp_len) as u16).to_be_bytes());
        h[10..12].fill(0);
        let c = !fold(sum(&h[..20]));
        h[10..12].copy_from_slice(&c.to_be_bytes());
        acc = sum(&h[12..20]);
    }
    acc = acc.wrapping_add(6).wrapping_add(tcp_len as u32);
    // PSH of the last segment goes on the super-packet; the kernel keeps it on the last
    // segment it cuts.
    h[fs.iph + 13] = (h[fs.iph + 13] & !TCP_PSH) | (last_flags & TCP_PSH);
    // CHECKSUM_PARTIAL: the field holds the folded pseudo-header sum, not complemented.
    h[fs.iph + 16..fs.iph + 18].copy_from_slice(&fold(acc).to_be_bytes());
    vh.fill(0);
    vh[0] = F_NEEDS_CSUM;
    vh[1] = if fs.v6 { GSO_TCPV6 } else { GSO_TCPV4 };
    vh[2..4].copy_from_slice(&(hl as u16).to_ne_bytes());
    vh[4..6].copy_from_slice(&(fs.payload as u16).to_ne_bytes());
    vh[6..8].copy_from_slice(&(fs.iph as u16).to_ne_bytes());
    vh[8..10].copy_from_slice(&16u16.to_ne_bytes());
    VNET_HDR_LEN + hl
}

/// One's-complement sum of `b` as 16-bit big-endian words, folded to 16 bits (not complemented).
/// Adds 32-bit words into a 64-bit accumulator, eight bytes per step: folding 2^16 to 1 makes
/// that the same sum, at a fraction of the cost of a word at a time (this runs over every
/// payload byte of a split).
fn sum(b: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        acc += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            + u64::from(u32::from_be_bytes([c[4], c[5], c[6], c[7]]));
    }
    let mut tail = [0u8; 8];
    let r = chunks.remainder();
    tail[..r.len()].copy_from_slice(r);
    acc += u64::from(u32::from_be_bytes([tail[0], tail[1], tail[2], tail[3]]))
        + u64::from(u32::from_be_bytes([tail[4], tail[5], tail[6], tail[7]]));
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    // At most 0xffff, so callers can add a few such sums and lengths in a u32 safely.
    acc as u32
}

fn fold(mut a: u32) -> u16 {
    while a > 0xffff {
        a = (a & 0xffff) + (a >> 16);
    }
    a as u16
}

/// The writes that put `packets` on an offloading TUN, in order, without making them: calls `emit` once per write
/// with its parts (virtio-net header, headers, payloads; at most 65 of them) and the number of
/// packets it carries. Pure, for tests and fuzzing.
pub fn for_each_write(packets: &[&[u8]], mut emit: impl FnMut(&[&[u8]], usize)) {
    let mut hdr = [0u8; VNET_HDR_LEN + MAX_HEADERS];
    let plain = [0u8; VNET_HDR_LEN];
    let mut i = 0;
    while i < packets.len() {
        let first = packets[i];
        let run = segment(first).map(|fs| {
            let (mut last, mut total, mut end) = (fs, fs.payload, i + 1);
            while end < packets.len() && end - i < MAX_SEGMENTS {
                let q = packets[end];
                match segment(q) {
                    Some(qs) if can_follow(first, &fs, &last, total, q, &qs) => {
                        last = qs;
                        total += qs.payload;
                        end += 1;
                    }
                    _ => break,
                }
            }
            (fs, last, total, end)
        });
        match run {
            Some((fs, last, total, end)) if end - i > 1 => {
                let n = super_headers(&mut hdr, first, &fs, total, last.flags);
                let off = fs.iph + fs.tcph;
                let mut parts: [&[u8]; MAX_SEGMENTS + 1] = [&[]; MAX_SEGMENTS + 1];
                parts[0] = &hdr[..n];
                for (k, p) in packets[i..end].iter().enumerate() {
                    parts[k + 1] = p.get(off..).unwrap_or_default();
                }
                emit(&parts[..end - i + 1], end - i);
                i = end;
            }
            _ => {
                // Not TCP, or alone: as it is, behind a "no offload" header.
                emit(&[&plain, first], 1);
                i += 1;
            }
        }
    }
}

impl core::fmt::Display for SplitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SplitError::Truncated => "truncated TUN read",
            SplitError::Unsupported => "unsupported offload in TUN read",
        })
    }
}

impl std::error::Error for SplitError {}

/// Why a read from the TUN could not be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitError {
    /// Shorter than the virtio-net header or the headers it announces.
    Truncated,
    /// A GSO type other than TCP over IPv4/IPv6, or headers that do not match it.
    Unsupported,
}

/// Splits one read from an offloading TUN (`raw`: virtio-net header, then the packet) into
/// the packets it stands for, appended back to back to `out` (the IP-HTTPS stream format),
/// each with its checksum completed. Returns how many packets were appended. The payload is
/// copied once, from `raw` to `out`.
pub fn split_into(raw: &[u8], out: &mut Vec<u8>) -> Result<usize, SplitError> {
    let vh = raw.get(..VNET_HDR_LEN).ok_or(SplitError::Truncated)?;
    let pkt = &raw[VNET_HDR_LEN..];
    let (flags, gso_type) = (vh[0], vh[1] & 0x7f);
    let gso_size = usize::from(u16::from_ne_bytes([vh[4], vh[5]]));
    let csum_start = usize::from(u16::from_ne_bytes([vh[6], vh[7]]));
    let csum_offset = usize::from(u16::from_ne_bytes([vh[8], vh[9]]));
    if gso_type == GSO_NONE {
        let at = out.len();
        out.extend_from_slice(pkt);
        if flags & F_NEEDS_CSUM != 0 {
            let field = csum_start + csum_offset;
            let p = &mut out[at..];
            if field + 2 > p.len() {
                out.truncate(at);
                return Err(SplitError::Truncated);
            }
            // The field holds the pseudo-header sum; the checksum covers csum_start.. .
            let c = !fold(sum(&p[csum_start..]));
            p[field..field + 2].copy_from_slice(&c.to_be_bytes());
        }
        return Ok(1);
    }
    let v6 = match (gso_type, pkt.first().map(|b| b >> 4)) {
        (GSO_TCPV6, Some(6)) => true,
        (GSO_TCPV4, Some(4)) => false,
        _ => return Err(SplitError::Unsupported),
    };
    let iph = if v6 {
        40
    } else {
        usize::from(pkt[0] & 0x0f) * 4
    };
    if (v6 && pkt.get(6) != Some(&6)) || (!v6 && pkt.get(9) != Some(&6)) || iph < 20 {
        return Err(SplitError::Unsupported);
    }
    let tcph = usize::from(pkt.get(iph + 12).ok_or(SplitError::Truncated)? >> 4) * 4;
    let hl = iph + tcph;
    if tcph < 20 || hl > pkt.len() || gso_size == 0 {
        return Err(SplitError::Truncated);
    }
    let payload = &pkt[hl..];
    let seq0 = u32::from_be_bytes([pkt[iph + 4], pkt[iph + 5], pkt[iph + 6], pkt[iph + 7]]);
    let id0 = u16::from_be_bytes([pkt[4], pkt[5]]);
    let flags0 = pkt[iph + 13];
    let chunks = payload.len().div_ceil(gso_size).max(1);
    for (k, chunk) in payload.chunks(gso_size).enumerate() {
        let at = out.len();
        out.extend_from_slice(&pkt[..hl]);
        out.extend_from_slice(chunk);
        let p = &mut out[at..];
        let tcp_len = tcph + chunk.len();
        let addrs = if v6 {
            p[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            sum(&p[8..40])
        } else {
            p[2..4].copy_from_slice(&((iph + tcp_len) as u16).to_be_bytes());
            p[4..6].copy_from_slice(&id0.wrapping_add(k as u16).to_be_bytes());
            p[10..12].fill(0);
            let c = !fold(sum(&p[..iph]));
            p[10..12].copy_from_slice(&c.to_be_bytes());
            sum(&p[12..20])
        };
        let t = iph;
        let seq = seq0.wrapping_add((k * gso_size) as u32);
        p[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
        if k + 1 < chunks {
            // FIN and PSH belong to the last segment only (as the kernel's own GSO does).
            p[t + 13] = flags0 & !(TCP_FIN | TCP_PSH);
        }
        p[t + 16..t + 18].fill(0);
        let acc = addrs
            .wrapping_add(6)
            .wrapping_add(tcp_len as u32)
            .wrapping_add(sum(&p[t..]));
        let c = !fold(acc);
        p[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn split_undoes_coalescing() {
        // Three segments coalesced into a super-packet, then split again.
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
