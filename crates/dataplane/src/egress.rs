//! From the TUN to the clients: IPv4 to `ipsec.pool4` is sealed under the client's SA (ESP
//! next header 4), other IPv4 (to NAT64's pool4) goes through NAT64 first, IPv6 to Pref64 (a
//! corporate IPv6 host) through NAT64 to the TUN, and IPv6 for a client to its connection's
//! queue (IP-HTTPS) or through the relay (Teredo). The kernel routed the packet here, so it
//! has passed whatever policy the corporate side applies.
//!
//! ```text
//! TUN IPv4 to ipsec.pool4 (or ha.peer_pool4) -> ESP seal (no SA: no_sa_to_client) -> the client's transport
//! TUN IPv4              -> NAT64 4->6 -> a client | a corporate IPv6 host (back to the TUN)
//! TUN IPv6 to Pref64    -> NAT64 6->4 -> TUN
//! TUN IPv6 to a client  -> [ESP seal] -> IP-HTTPS queue | Teredo relay (trusted: UDP; else
//!                          queue + bubble)
//! ```

use crate::{DropReason, Verdict, Worker};
use gate64_teredo::Address;
use gate64_wire::ipv6;
use std::net::Ipv4Addr;
use std::time::Instant;

/// What [`Worker::deliver_to_client`] does with a destination that is no client of ours.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Elsewhere {
    /// Drop it (`no_route`): the packet came from the kernel, which routed it to us.
    Drop,
    /// Hand it to the kernel: NAT64 output for a corporate IPv6 host.
    Tun,
}

impl Worker {
    /// A packet read from the TUN, in `buf[start..end]`.
    pub(crate) fn tun_ingress(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        if bytes.first().is_some_and(|b| b >> 4 == 4) {
            let to_pool4 = match (&self.shared.cfg.ipsec4, bytes.get(16..20)) {
                (Some(v4), Some(&[a, b, c, d])) => v4.holds(&Ipv4Addr::new(a, b, c, d)),
                _ => false,
            };
            if to_pool4 {
                let sealed = self.seal4_for_client(now, buf, start, end)?;
                return self.send_sealed(now, sealed, buf, Elsewhere::Drop);
            }
            return self.nat64_from_v4(now, buf, start, end);
        }
        let dst = ipv6::Packet::new_checked(bytes)?.dst();
        if self
            .shared
            .cfg
            .nat64
            .as_ref()
            .is_some_and(|n| n.prefix().contains(&dst))
        {
            return self.nat64_from_v6(now, buf, start, end);
        }
        self.deliver_to_client(now, buf, start, end, Elsewhere::Drop)
    }

    /// Routes the IPv6 packet `buf[start..end]` to the client that owns its destination: an
    /// IP-HTTPS connection's queue or a Teredo client through the relay; sealed first under
    /// the client's outbound SA when its destination is an inner address with one
    /// (`ipsec.rs`), and then routed by the outer destination. A packet no SA covers passes
    /// the security step's other half first ([`crate::Shared::to_client_in_clear`]).
    pub(crate) fn deliver_to_client(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
        elsewhere: Elsewhere,
    ) -> Result<Verdict, DropReason> {
        let sealed = self.seal_for_client(now, buf, start, end)?;
        self.send_sealed(now, sealed, buf, elsewhere)
    }

    /// Sends what [`Worker::seal_for_client`] (or `seal4_for_client`) made of a packet
    /// towards a client: a native client's ESP from its listen socket; otherwise the IPv6
    /// packet, sealed or not, to its connection's queue or through the relay by its
    /// destination.
    fn send_sealed(
        &mut self,
        now: Instant,
        sealed: crate::ipsec::Sealing,
        buf: &mut [u8],
        elsewhere: Elsewhere,
    ) -> Result<Verdict, DropReason> {
        let (start, end) = sealed.span;
        if let Some((from, to)) = sealed.native {
            return Ok(Verdict::Native {
                from,
                to,
                start,
                end,
            });
        }
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let pkt = ipv6::Packet::new_checked(bytes)?;
        let end = start + pkt.total_len();
        let dst = pkt.dst();
        let to_iphttps = self.shared.cfg.is_iphttps(&dst);
        let own = self
            .shared
            .server
            .as_ref()
            .filter(|_| !to_iphttps)
            .and_then(|s| Address::decode(&dst).filter(|d| s.is_own_client(d)));
        if !sealed.sealed && (to_iphttps || own.is_some()) {
            self.shared.to_client_in_clear(&pkt)?;
        }
        if to_iphttps {
            return self.send_to_iphttps_client(&dst, buf, start, end);
        }
        match (own, elsewhere) {
            (Some(d), _) => self.send_to_teredo_client(now, &d, buf, start, end),
            (None, Elsewhere::Drop) => Err(DropReason::NoRoute),
            (None, Elsewhere::Tun) => Ok(Verdict::Tun { start, end }),
        }
    }
}
