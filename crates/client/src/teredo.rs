//! The Teredo client session (RFC 4380): qualification with the Teredo server (the sans-IO
//! [`Client`], §5.2), then the host's packets sent bare to the server, or to the relay a
//! direct IPv6 connectivity test (§5.2.9) found for their native destination, and the
//! packets the server and the relays deliver handed to the host.

use super::{Host, Ready, sleep_until};
use anyhow::{Context, Result};
use gate64_teredo::client::{self as teredo, Client};
use gate64_teredo::relay;
use gate64_wire::ipv6;
use gate64_wire::teredo as tw;
use std::net::SocketAddr;
use std::time::Instant;
use tokio::net::UdpSocket;
use tracing::{debug, trace, warn};

/// What a Teredo session sends and receives its datagrams through: a kernel UDP socket
/// (`gate64 connect`, the demo) or another endpoint that delivers whole datagrams with their
/// sender (the load generator's, many clients on one TUN device).
// The futures carry no `Send` bound of their own: a session runs on one task.
#[allow(async_fn_in_trait)]
pub trait Datagrams {
    /// Sends `buf` as one datagram to `to`.
    async fn send_to(&self, buf: &[u8], to: SocketAddr) -> std::io::Result<usize>;

    /// Waits for a datagram and appends it to `buf`'s spare capacity; its length and sender.
    /// Cancel safe: the session waits for it beside the host.
    async fn recv_buf_from(&self, buf: &mut Vec<u8>) -> std::io::Result<(usize, SocketAddr)>;

    /// Like [`Datagrams::recv_buf_from`] without waiting: `WouldBlock` when none is queued.
    fn try_recv_buf_from(&self, buf: &mut Vec<u8>) -> std::io::Result<(usize, SocketAddr)>;
}

impl Datagrams for UdpSocket {
    async fn send_to(&self, buf: &[u8], to: SocketAddr) -> std::io::Result<usize> {
        UdpSocket::send_to(self, buf, to).await
    }

    async fn recv_buf_from(&self, buf: &mut Vec<u8>) -> std::io::Result<(usize, SocketAddr)> {
        UdpSocket::recv_buf_from(self, buf).await
    }

    fn try_recv_buf_from(&self, buf: &mut Vec<u8>) -> std::io::Result<(usize, SocketAddr)> {
        UdpSocket::try_recv_buf_from(self, buf)
    }
}

/// Datagrams taken from the socket before the host is flushed (so that a burst reaches a TUN
/// device as one GRO write).
const DOWNLINK_BURST: usize = 64;
/// Packets sent for the host before the socket is read again.
const UPLINK_BURST: usize = tun_rs::IDEAL_BATCH_SIZE;
/// The largest datagram. The receive buffer is filled in place of its spare capacity, so only
/// the bytes of the datagrams received are ever touched (the demo runs many clients).
const DATAGRAM_CAPACITY: usize = 65_536;

/// Runs `client` on `sock` for `host` until the host is done (`Ok`) or the socket fails. The
/// socket may be connected to the server (the demo's) or not (then it also takes datagrams
/// from other relays).
pub async fn run<S: Datagrams, H: Host>(sock: &S, client: &mut Client, host: &mut H) -> Result<()> {
    let server = SocketAddr::V4(client.server());
    let mut dgram = Vec::with_capacity(DATAGRAM_CAPACITY);
    let mut rs = [0u8; teredo::RS_LEN];
    let mut uplink = Vec::new();
    // A failing send is reported once per qualification, not once per packet.
    let mut warned = false;
    loop {
        while let Some(n) = client.poll_transmit(Instant::now(), &mut rs) {
            debug!(qualified = client.is_qualified(), "router solicitation");
            if let Err(e) = sock.send_to(&rs[..n], server).await {
                // Unreachable network and the like: the next solicitation retries.
                warn!(error = %e, "sending the router solicitation");
            }
        }
        dgram.clear();
        tokio::select! {
            r = sock.recv_buf_from(&mut dgram) => {
                let first = r.context("UDP receive")?;
                if receive(sock, client, host, &mut dgram, first).await? {
                    warned = false;
                }
            }
            r = host.ready() => match r? {
                Ready::Packets => send(sock, client, host, &mut uplink, &mut warned).await?,
                Ready::Done => return Ok(()),
            },
            _ = sleep_until(client.poll_timeout()) => {}
        }
    }
}

/// Handles the datagram `first` (all of `dgram`) and those queued behind it, then flushes
/// the host. Returns whether the client (re)qualified.
async fn receive<S: Datagrams, H: Host>(
    sock: &S,
    client: &mut Client,
    host: &mut H,
    dgram: &mut Vec<u8>,
    first: (usize, SocketAddr),
) -> Result<bool> {
    let mut qualified = false;
    let mut got = Some(first);
    let mut burst = 0;
    while let Some((n, from)) = got.take() {
        let event = match from {
            SocketAddr::V4(v4) => client.handle_from(Instant::now(), &dgram[..n], v4),
            SocketAddr::V6(_) => client.handle(Instant::now(), &dgram[..n]),
        };
        match event {
            Ok(teredo::Event::Qualified { address, mtu }) => {
                // Miredo's layout: the address /32, so 2001::/32 goes into the tunnel.
                host.configure(address, 32, mtu).await?;
                qualified = true;
            }
            Ok(teredo::Event::Packet { offset, len }) => {
                host.deliver(&dgram[offset..offset + len]).await;
            }
            Ok(teredo::Event::Refreshed) => trace!("qualification refreshed"),
            Ok(teredo::Event::RelayFound { relay }) => debug!(%relay, "relay found"),
            Ok(teredo::Event::Bubble) => answer_bubble(sock, client, &dgram[..n], from).await,
            Err(e) => {
                debug!(%from, error = %e, "datagram refused");
                host.refused();
            }
        }
        burst += 1;
        if burst < DOWNLINK_BURST {
            // Errors other than "nothing queued" come back from recv_buf_from.
            dgram.clear();
            got = sock.try_recv_buf_from(dgram).ok();
        }
    }
    host.flush().await;
    Ok(qualified)
}

/// Answers a bubble with a direct bubble to its origin (the relay that is holding packets
/// for us, named by the origin indication its server added) or its sender (RFC 4380 §5.2.3,
/// §5.4.1): a relay whose last packet from us is older than its peer lifetime queues what it
/// has for us until we do, so an idle client that stays silent would lose it.
async fn answer_bubble<S: Datagrams>(sock: &S, client: &Client, dgram: &[u8], from: SocketAddr) {
    let (Some(me), Ok(pkt)) = (client.address(), tw::Packet::parse(dgram)) else {
        return;
    };
    let to = pkt.origin.map_or(from, |o| SocketAddr::V4(o.0));
    let mut bubble = [0u8; ipv6::HEADER_LEN];
    if relay::emit_bubble(&mut bubble, &me, &pkt.ipv6.src(), None).is_ok()
        && let Err(e) = sock.send_to(&bubble, to).await
    {
        debug!(%to, error = %e, "answering a bubble");
    }
}

/// Sends what the host has, one datagram per packet (the server takes packets up to the MTU),
/// up to a burst.
async fn send<S: Datagrams, H: Host>(
    sock: &S,
    client: &mut Client,
    host: &mut H,
    uplink: &mut Vec<u8>,
    warned: &mut bool,
) -> Result<()> {
    let mut sent = 0;
    while sent < UPLINK_BURST {
        uplink.clear();
        let now = Instant::now();
        if !host.take(now, uplink)? {
            break;
        }
        let mut rest = uplink.as_slice();
        while !rest.is_empty() {
            let pkt;
            (pkt, rest) = match split_first(rest) {
                Ok(split) => split,
                Err(e) => {
                    // The rest of the read cannot be delimited.
                    trace!(error = %e, "packet from the host not sent");
                    break;
                }
            };
            sent += 1;
            probe(sock, client, now, pkt).await;
            match client.encapsulate(pkt) {
                Ok(to) => {
                    if let Err(e) = sock.send_to(pkt, SocketAddr::V4(to)).await
                        && !std::mem::replace(warned, true)
                    {
                        warn!(error = %e, "sending to the Teredo server");
                    }
                }
                Err(e) => trace!(error = %e, "packet from the host not sent"),
            }
        }
    }
    Ok(())
}

/// Sends the direct IPv6 connectivity test (RFC 4380 §5.2.9) for `pkt` to the server when
/// one is due: the relay its answer comes through then carries the packets for that peer.
async fn probe<S: Datagrams>(sock: &S, client: &mut Client, now: Instant, pkt: &[u8]) {
    let mut out = [0u8; teredo::PROBE_LEN];
    if let Some(n) = client.probe(now, pkt, &mut out) {
        let server = SocketAddr::V4(client.server());
        debug!(%server, "direct IPv6 connectivity test");
        if let Err(e) = sock.send_to(&out[..n], server).await {
            debug!(error = %e, "sending the connectivity test");
        }
    }
}

/// Splits the first of the IPv6 packets laid back to back in `buf` off the others.
fn split_first(buf: &[u8]) -> gate64_wire::Result<(&[u8], &[u8])> {
    let len = ipv6::Packet::new_checked(buf)?.total_len();
    Ok(buf.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    fn packet(payload_len: u16, fill: u8) -> Vec<u8> {
        let mut p = vec![fill; ipv6::HEADER_LEN + usize::from(payload_len)];
        let (src, dst) = (Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST);
        ipv6::emit_header(&mut p, payload_len, ipv6::NH_UDP, 64, &src, &dst).unwrap();
        p
    }

    #[test]
    fn back_to_back_packets_split_one_by_one() {
        let (a, b) = (packet(8, 0xaa), packet(1232, 0xbb));
        let buf = [a.as_slice(), b.as_slice()].concat();
        let (first, rest) = split_first(&buf).unwrap();
        assert_eq!(first, a.as_slice());
        let (second, rest) = split_first(rest).unwrap();
        assert_eq!(second, b.as_slice());
        assert!(rest.is_empty());
    }

    #[test]
    fn a_cut_or_foreign_packet_is_not_split() {
        let a = packet(100, 0xaa);
        assert!(split_first(&a[..a.len() - 1]).is_err());
        let mut v4 = a.clone();
        v4[0] = 0x45;
        assert!(split_first(&v4).is_err());
    }
}
