//! The IP-HTTPS transport stage ([MS-IPHTTPS]): the driver's `Connection` has judged a
//! client's packet (RS/RA, ND, the /64 source check) before [`Worker::handle_iphttps`] takes
//! it to the one road; towards a client, a packet is copied into its connection's bounded send
//! queue, the one copy between the TUN and the TLS stream.

use crate::clients::Delivery;
use crate::{Direction, DropReason, Side, Verdict, Worker};
use gate64_iphttps::server::DropReason as ConnectionDrop;
use std::net::Ipv6Addr;

impl Worker {
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
