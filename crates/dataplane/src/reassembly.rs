//! IPv6 reassembly (RFC 8200 §4.5) for packets to the IPsec endpoint only. A client's IPsec
//! stack seals a full-size inner packet (strongSwan's `ipsec0` has MTU 1400) and its kernel
//! fragments the outer ESP-in-UDP packet to fit the 1280-byte Teredo or IP-HTTPS link, so
//! gate64 must put the fragments together before it can open the ESP.
//!
//! Per worker: a client's datagrams reach one worker (the kernel hashes a Teredo mapping to
//! one socket, an IP-HTTPS connection lives on one thread). Bounded: at most
//! [`MAX_DATAGRAMS`] in progress, [`MAX_LEN`] bytes each, [`TIMEOUT`] to complete; the oldest
//! is given up for a newcomer. The whole datagram then takes the road from a buffer of the
//! worker's; what the road makes of it is queued off the fast path (`poll_tun_write`,
//! `poll_transmit`), since it no longer lies in the caller's buffer.

use crate::{ClientBinding, DropReason, HEADROOM, Transmit, Verdict, Worker};
use gate64_wire::ipv6;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

/// Datagrams being reassembled at once, per worker.
pub(crate) const MAX_DATAGRAMS: usize = 64;
/// Largest reassembled payload (an IPv6 payload without jumbograms).
pub(crate) const MAX_LEN: usize = 65_535;
/// How long the fragments of one datagram may take (RFC 8200 §4.5 allows 60 s; a client's
/// fragments leave back to back).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(5);
/// The Fragment header's length.
const FRAGMENT_HEADER_LEN: usize = 8;

/// One datagram in progress.
#[derive(Debug)]
struct Partial {
    src: Ipv6Addr,
    id: u32,
    started: Instant,
    /// The fixed header of the first fragment seen.
    header: [u8; ipv6::HEADER_LEN],
    /// The fragmentable part's next header.
    next_header: u8,
    /// (offset, bytes) of each fragment received.
    parts: Vec<(usize, Vec<u8>)>,
    /// Known once the last fragment (M = 0) arrived.
    total: Option<usize>,
}

/// The datagrams a worker is reassembling.
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    partials: Vec<Partial>,
}

impl Reassembly {
    /// Adds the fragment `pkt`; returns the whole packet (fixed header + payload, no Fragment
    /// header) once every part is in.
    fn add(&mut self, now: Instant, pkt: &ipv6::Packet<'_>) -> Result<Option<Vec<u8>>, DropReason> {
        let payload = pkt.payload();
        let fh = payload
            .get(..FRAGMENT_HEADER_LEN)
            .ok_or(DropReason::Truncated)?;
        let (next_header, field) = (fh[0], u16::from_be_bytes([fh[2], fh[3]]));
        let id = u32::from_be_bytes([fh[4], fh[5], fh[6], fh[7]]);
        let (offset, more) = (usize::from(field >> 3) * 8, field & 1 == 1);
        let data = &payload[FRAGMENT_HEADER_LEN..];
        // A fragment inside a fragment is nobody's honest packet.
        if next_header == ipv6::NH_FRAGMENT {
            return Err(DropReason::Malformed);
        }
        let fixed = pkt
            .as_bytes()
            .get(..ipv6::HEADER_LEN)
            .ok_or(DropReason::Truncated)?;
        // RFC 8200 §4.5: every fragment but the last is a multiple of 8 bytes long.
        if offset + data.len() > MAX_LEN || (more && !data.len().is_multiple_of(8)) {
            return Err(DropReason::Malformed);
        }
        self.partials
            .retain(|p| now.saturating_duration_since(p.started) < TIMEOUT);
        let src = pkt.src();
        let at = match self
            .partials
            .iter()
            .position(|p| p.src == src && p.id == id)
        {
            Some(at) => at,
            None => {
                if self.partials.len() >= MAX_DATAGRAMS {
                    self.partials.remove(0);
                }
                let mut header = [0u8; ipv6::HEADER_LEN];
                header.copy_from_slice(fixed);
                self.partials.push(Partial {
                    src,
                    id,
                    started: now,
                    header,
                    next_header,
                    parts: Vec::new(),
                    total: None,
                });
                self.partials.len() - 1
            }
        };
        let p = &mut self.partials[at];
        if !more {
            p.total = Some(offset + data.len());
        }
        // Overlapping fragments are refused (RFC 5722): the datagram is dropped whole.
        let end = offset + data.len();
        if p.parts
            .iter()
            .any(|(o, d)| offset < o + d.len() && *o < end)
            || p.total.is_some_and(|t| end > t)
        {
            self.partials.remove(at);
            return Err(DropReason::Malformed);
        }
        p.parts.push((offset, data.to_vec()));
        let Some(total) = p.total else {
            return Ok(None);
        };
        if p.parts.iter().map(|(_, d)| d.len()).sum::<usize>() != total {
            return Ok(None);
        }
        let p = self.partials.remove(at);
        let mut whole = vec![0u8; ipv6::HEADER_LEN + total];
        whole[..ipv6::HEADER_LEN].copy_from_slice(&p.header);
        let plen = u16::try_from(total).map_err(|_| DropReason::Unsupported)?;
        whole[4..6].copy_from_slice(&plen.to_be_bytes());
        whole[6] = p.next_header;
        for (offset, data) in p.parts {
            whole[ipv6::HEADER_LEN + offset..][..data.len()].copy_from_slice(&data);
        }
        Ok(Some(whole))
    }
}

impl Worker {
    /// A fragment to the IPsec endpoint in `buf[start..end]` from `from`: kept until its
    /// datagram is whole, which then takes the road from the worker's own buffer.
    pub(crate) fn endpoint_fragment(
        &mut self,
        now: Instant,
        from: &ClientBinding,
        buf: &[u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let pkt = ipv6::Packet::new_checked(bytes)?;
        let Some(whole) = self.reassembly.add(now, &pkt)? else {
            return Ok(Verdict::Consumed);
        };
        let mut own = vec![0u8; HEADROOM + whole.len() + gate64_esp::MAX_TRAILER];
        own[HEADROOM..HEADROOM + whole.len()].copy_from_slice(&whole);
        let floor = std::mem::replace(&mut self.write_floor, 0);
        let v = self.ingress(now, from, &mut own, HEADROOM, HEADROOM + whole.len());
        self.write_floor = floor;
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
            Verdict::Consumed | Verdict::Drop(_) => {}
        }
        Ok(Verdict::Consumed)
    }
}
