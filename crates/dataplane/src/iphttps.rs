//! The IP-HTTPS transport stage ([MS-IPHTTPS]), as `teredo.rs` is Teredo's: the link's
//! sans-IO [`Connection`] judges each packet from the client (RS → RA, ND, the /64 source
//! check), its replies go into the link's send queue, and what it forwards takes the one road
//! ([`Worker::ingress`]) as a client of that /64. Towards a client, a packet is copied into
//! its connection's bounded send queue, the one copy between the TUN and the TLS stream.

use crate::clients::{ClientQueue, Delivery};
use crate::{ClientBinding, Direction, DropReason, Side, Verdict, Worker};
use gate64_iphttps::server::{Connection, DropReason as ConnectionDrop, PacketVerdict};
use std::net::Ipv6Addr;
use std::time::Instant;

/// One IP-HTTPS link while the dataplane handles its packets.
pub struct IphttpsLink<'a> {
    /// The link's protocol state: it judges every packet before the road sees it.
    pub conn: &'a mut Connection,
    /// The link's send queue, for the connection's own replies (RA, NA).
    pub replies: &'a dyn ClientQueue,
}

impl std::fmt::Debug for IphttpsLink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IphttpsLink")
            .field("prefix", &self.conn.client_prefix())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// The transport stage of a packet from an IP-HTTPS client, `buf[start..end]`: the
    /// connection's judgement, then the road in `buf[start - headroom..end]`, so that the road
    /// writes neither before the room it was given nor past the packet (in a stream buffer the
    /// next packet follows). The verdict's offsets are `buf`'s.
    pub(crate) fn iphttps_ingress(
        &mut self,
        now: Instant,
        link: &mut IphttpsLink<'_>,
        buf: &mut [u8],
        (start, end, headroom): (usize, usize, usize),
    ) -> Result<Verdict, DropReason> {
        let packet = buf.get(start..end).ok_or(DropReason::Truncated)?;
        match link.conn.handle_packet(now, packet, &mut self.reply) {
            PacketVerdict::Forward => {}
            PacketVerdict::Reply { len } => {
                let reply = self.reply.get(..len).ok_or(DropReason::TxError)?;
                return if link.replies.push(reply) {
                    Ok(Verdict::Consumed)
                } else {
                    Err(DropReason::IphttpsQueueFull)
                };
            }
            PacketVerdict::Consumed => return Ok(Verdict::Consumed),
            PacketVerdict::Drop(reason) => return Err(reason.into()),
        }
        let from = ClientBinding::Iphttps {
            prefix: link.conn.client_prefix(),
        };
        let floor = start.saturating_sub(headroom);
        let room = buf.get_mut(floor..end).ok_or(DropReason::Truncated)?;
        let v = self.ingress(now, &from, room, start - floor, end - floor)?;
        Ok(v.shifted(floor))
    }

    /// Offers `buf[start..end]`, exactly one IPv6 packet to `dst`, to the IP-HTTPS connection
    /// that owns `dst`'s /64.
    pub(crate) fn send_to_iphttps_client(
        &mut self,
        dst: &Ipv6Addr,
        buf: &[u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let packet = buf.get(start..end).ok_or(DropReason::Truncated)?;
        match self.shared.iphttps.deliver(dst, packet) {
            Delivery::Queued => {
                // Counted as sent now: the connection's writer only moves bytes.
                self.stats
                    .packet(Side::Internet, Direction::Tx, packet.len());
                Ok(Verdict::Consumed)
            }
            Delivery::QueueFull => Err(DropReason::IphttpsQueueFull),
            Delivery::NoClient => Err(DropReason::NoRoute),
        }
    }
}

/// The `gate64_drops_total{reason}` label of a packet an IP-HTTPS connection refused.
impl From<ConnectionDrop> for DropReason {
    fn from(r: ConnectionDrop) -> Self {
        match r {
            ConnectionDrop::SpoofedSource => DropReason::SpoofedSource,
            ConnectionDrop::Malformed => DropReason::Malformed,
            ConnectionDrop::Multicast
            | ConnectionDrop::LinkLocal
            | ConnectionDrop::NotForwardable
            | ConnectionDrop::UnspecifiedSource => DropReason::BadDestination,
            ConnectionDrop::InvalidRouterSolicitation
            | ConnectionDrop::InvalidNeighborSolicitation => DropReason::UnhandledIcmpv6,
            // No link yet, so no route through it.
            ConnectionDrop::NotLinkUp => DropReason::NoRoute,
            // Towards the client, outside its /64: no route to it through this link.
            ConnectionDrop::NotForClient => DropReason::NoRoute,
            // The reply could not be built (a caller's buffer too short): not sent.
            ConnectionDrop::ReplyBuffer => DropReason::TxError,
        }
    }
}
