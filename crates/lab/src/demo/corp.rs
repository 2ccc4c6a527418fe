//! The lab's corporate network: one host at [`CORP_HOST`] behind the daemon's corporate links
//! (connected loopback UDP sockets carrying raw IPv6), answering the emulated clients and
//! streaming to them.

use super::gateway::Gateway;
use super::{Totals, add};
use gate64_wire::{checksum, icmpv6, ipv6};
use std::collections::HashMap;
use std::net::{Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The corporate host the clients talk to.
pub const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc0, 0, 0, 0, 0, 0x10);
/// UDP echo (RFC 862) and discard (RFC 863) ports.
pub const ECHO_PORT: u16 = 7;
/// See [`ECHO_PORT`].
pub const DISCARD_PORT: u16 = 9;
/// Bulk packets fill the Teredo MTU.
pub const BULK_PACKET: usize = 1280;

/// The bulk packet size: the Teredo MTU, less the ESP and UDP encapsulation when the packets
/// go through a tunnel (the sealed packet must fit the MTU).
pub fn bulk_packet(ipsec: bool) -> usize {
    if ipsec {
        BULK_PACKET - gate64_client::ipsec::OVERHEAD
    } else {
        BULK_PACKET
    }
}

/// The corporate network: a host at [`CORP_HOST`] answering ICMPv6 echo and UDP echo,
/// discarding UDP to port 9, and, once the measured run has begun, sending a bulk stream of
/// `down` bytes/s spread over every client it has heard from. Replies go to the worker
/// socket the request came from. With a [`Gateway`], IKE and ESP to its endpoint are handled
/// there, and what goes back to a client with a child SA is sealed.
pub fn corpnet(
    sock: UdpSocket,
    down: f64,
    totals: &Totals,
    stop: &AtomicBool,
    mut gateway: Option<Gateway>,
) {
    let mut buf = vec![0u8; 65_536];
    let bulk = bulk_packet(gateway.is_some());
    let mut out = vec![0u8; bulk];
    let mut clients: HashMap<Ipv6Addr, SocketAddr> = HashMap::new();
    let mut order: Vec<Ipv6Addr> = Vec::new();
    let mut rr = 0usize;
    let mut tokens = 0.0f64;
    let mut last = Instant::now();
    let mut last_via = None;
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            last_via = Some(from);
            let for_host = match gateway.as_mut() {
                Some(g) => match g.receive(&mut buf[..n], from, &sock, &totals.sas) {
                    Some(inner) => inner,
                    None => Some(0..n),
                },
                None => Some(0..n),
            };
            if let Some(pkt) = for_host.and_then(|r| buf.get_mut(r))
                && let Some(src) = answer(pkt, totals)
            {
                if clients.insert(src, from).is_none() {
                    order.push(src);
                }
                if pkt[0] != 0 {
                    send(&mut gateway, pkt, from, &sock);
                }
            }
        }
        if let Some(g) = gateway.as_mut() {
            g.tick(last_via, &sock, &totals.sas);
        }
        let now = Instant::now();
        let dt = now.duration_since(last).as_secs_f64();
        if dt < 0.002 {
            continue;
        }
        last = now;
        if order.is_empty() || down <= 0.0 || !totals.running.load(Ordering::Relaxed) {
            continue;
        }
        tokens = (tokens + down * dt).min(down * 0.05);
        while tokens >= bulk as f64 {
            rr = (rr + 1) % order.len();
            let dst = order[rr];
            let via = clients[&dst];
            if let Ok(len) = emit_udp(
                &mut out,
                &CORP_HOST,
                &dst,
                DISCARD_PORT,
                DISCARD_PORT,
                bulk - 48,
            ) && send(&mut gateway, &out[..len], via, &sock)
            {
                add(&totals.corp_sent, len as u64);
            }
            tokens -= bulk as f64;
        }
    }
}

/// Sends `pkt` to a client through the daemon's link `via`, sealed when the gateway has a
/// child SA for it.
fn send(gateway: &mut Option<Gateway>, pkt: &[u8], via: SocketAddr, sock: &UdpSocket) -> bool {
    match gateway {
        Some(g) => g.send(pkt, via, sock),
        None => sock.send_to(pkt, via).is_ok(),
    }
}

/// Turns a request in `pkt` into its answer in place. Returns the client's address when the
/// packet was for [`CORP_HOST`]; `pkt[0]` is zeroed when nothing goes back.
fn answer(pkt: &mut [u8], totals: &Totals) -> Option<Ipv6Addr> {
    let p = ipv6::Packet::new_checked(pkt).ok()?;
    let (src, dst, nh, len) = (p.src(), p.dst(), p.next_header(), p.total_len());
    if dst != CORP_HOST {
        return None;
    }
    let tc = icmpv6::type_code(&p);
    let pkt = &mut pkt[..len];
    match nh {
        ipv6::NH_ICMPV6 if tc == Some((icmpv6::TYPE_ECHO_REQUEST, 0)) => {
            swap_addresses(pkt);
            pkt[ipv6::HEADER_LEN] = icmpv6::TYPE_ECHO_REPLY;
            icmpv6::fill_checksum(pkt).ok()?;
            add(&totals.corp_pings, 1);
        }
        ipv6::NH_UDP if len >= ipv6::HEADER_LEN + 8 => {
            let u = ipv6::HEADER_LEN;
            let dport = u16::from_be_bytes([pkt[u + 2], pkt[u + 3]]);
            match dport {
                ECHO_PORT => {
                    swap_addresses(pkt);
                    let (a, b) = pkt[u..u + 4].split_at_mut(2);
                    a.swap_with_slice(b);
                    fill_udp_checksum(pkt);
                    add(&totals.corp_echoes, 1);
                }
                DISCARD_PORT => {
                    add(&totals.corp_discarded, len as u64);
                    pkt[0] = 0;
                }
                _ => pkt[0] = 0,
            }
        }
        _ => pkt[0] = 0,
    }
    Some(src)
}

fn swap_addresses(pkt: &mut [u8]) {
    let (s, d) = pkt[8..40].split_at_mut(16);
    s.swap_with_slice(d);
}

/// Recomputes the UDP checksum of the IPv6 packet `pkt` (RFC 8200 §8.1: 0 is sent as 0xffff).
fn fill_udp_checksum(pkt: &mut [u8]) {
    let mut a = [0u8; 16];
    let mut b = [0u8; 16];
    a.copy_from_slice(&pkt[8..24]);
    b.copy_from_slice(&pkt[24..40]);
    let u = &mut pkt[ipv6::HEADER_LEN..];
    u[6] = 0;
    u[7] = 0;
    let c = checksum::udp_field(checksum::upper_layer_v6(
        &a.into(),
        &b.into(),
        ipv6::NH_UDP,
        u,
    ));
    u[6..8].copy_from_slice(&c.to_be_bytes());
}

/// Writes an IPv6/UDP packet with `payload` zero bytes; returns its length.
pub fn emit_udp(
    out: &mut [u8],
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    sport: u16,
    dport: u16,
    payload: usize,
) -> gate64_wire::Result<usize> {
    let ulen = 8 + payload;
    let len = ipv6::HEADER_LEN + ulen;
    let plen = u16::try_from(ulen).map_err(|_| gate64_wire::Error::Malformed)?;
    let o = out.get_mut(..len).ok_or(gate64_wire::Error::Truncated)?;
    ipv6::emit_header(o, plen, ipv6::NH_UDP, 64, src, dst)?;
    let u = &mut o[ipv6::HEADER_LEN..];
    u.fill(0);
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&plen.to_be_bytes());
    fill_udp_checksum(o);
    Ok(len)
}
