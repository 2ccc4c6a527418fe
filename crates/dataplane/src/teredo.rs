//! The Teredo transport stage (RFC 4380): classify a datagram (§5.3.1 rules, §5.4.2
//! anti-spoofing), answer Router Solicitations (§5.3.2), take bubbles (§5.2.6), relay bubbles
//! to our clients with an origin indication (§5.3.1, §5.2.9), and relay everything else to a
//! client (§5.4.1: straight to a verified peer, else queue and bubble). A client's data packet
//! leaves this stage for the one road ([`crate::ingress`]).
//!
//! What gate64 sends from its server address towards a Teredo mapping (RFC 4380 §7:
//! no open reflector):
//!
//! ```text
//! RA          to the RS's own UDP source, rate-limited per source address (rs_rate_limited)
//! bubble      relayed for a client or another relay (server role): exactly a bubble with
//!             well-formed RFC 6081 trailers (teredo_bad_trailer), rate-limited per sender
//!             address and per destination address (teredo_relay_*_rate_limited)
//! our bubble  towards a peer a packet waits for, paced per peer (§5.2.6) and rate-limited
//!             per destination address
//! data        only to a verified peer: one whose datagram came from that mapping with a
//!             matching source (§5.4.2) within the peer lifetime; whatever its source (the
//!             corporate side, an IP-HTTPS client, another Teredo client), after the policy
//! never       to gate64's own server addresses (loop_guard) or a non-global IPv4
//!             (non_global_mapping)
//! ```

use crate::{ClientBinding, DropReason, Transmit, Verdict, Worker};
use gate64_teredo::relay::{self, TxDrop};
use gate64_teredo::{Address, Ingress, Reject, Server, TxDecision};
use gate64_wire::{ipv6, teredo as tw};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Instant;

impl Worker {
    /// A Teredo datagram in `buf[start..end]` from `remote`, received on server address `local`.
    pub(crate) fn teredo_ingress(
        &mut self,
        now: Instant,
        local: Ipv4Addr,
        remote: SocketAddrV4,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let shared = Arc::clone(&self.shared);
        let server = shared.server.as_ref().ok_or(DropReason::NoRoute)?;
        let datagram = buf.get(start..end).ok_or(DropReason::Truncated)?;
        match server.classify(remote, datagram)? {
            Ingress::RouterSolicitation(sol) => {
                if !self.rs_limiter.allow(now, *remote.ip()) {
                    return Err(DropReason::RsRateLimited);
                }
                let out = buf.get_mut(start..).ok_or(DropReason::Truncated)?;
                let (n, from) = server.emit_advertisement(&sol, local, remote, out)?;
                self.stats.teredo_qualifications.inc();
                Ok(Verdict::udp(from, remote, start, start + n))
            }
            Ingress::FromClient {
                client,
                ipv6,
                offset,
            } => {
                let (dst, is_bubble) = (ipv6.dst(), ipv6.is_bubble());
                self.client_seen(now, &client, remote)?;
                let pkt = start + offset;
                if is_bubble {
                    // Bubbles only open NAT state and establish trust (§5.2.6), except those
                    // addressed to another of our clients (indirect bubbles, §5.2.9), which
                    // the server relays with their RFC 6081 trailers.
                    return match Address::decode(&dst) {
                        Some(d) if server.is_own_client(&d) => {
                            self.relay_bubble(now, remote, buf, pkt, end, &d)
                        }
                        _ => Ok(Verdict::Consumed),
                    };
                }
                let from = ClientBinding::Teredo {
                    address: client,
                    mapping: remote,
                };
                self.ingress(now, &from, buf, pkt, end)
            }
            Ingress::ToClient { dst, ipv6, offset } => {
                // §5.3.1 rule 6 exists for other relays' indirect bubbles. Relaying other
                // native-sourced data would let anyone inject packets that look as if they came
                // from the corporate network, so only bubbles pass.
                if !ipv6.is_bubble() {
                    return Err(DropReason::SpoofedSource);
                }
                self.relay_bubble(now, remote, buf, start + offset, end, &dst)
            }
        }
    }

    /// §5.4.2: a verified packet from a client makes it a trusted peer; send what waited for it.
    fn client_seen(
        &mut self,
        now: Instant,
        client: &Address,
        remote: SocketAddrV4,
    ) -> Result<(), DropReason> {
        match self
            .shared
            .peers
            .handle_receive(now, &client.encode(), remote)
        {
            Ok(None) => Ok(()),
            Ok(Some(queued)) => {
                let from = self
                    .shared
                    .server
                    .as_ref()
                    .map_or(Ipv4Addr::UNSPECIFIED, |s| s.config().primary);
                self.transmits
                    .extend(queued.into_iter().map(|data| Transmit {
                        from,
                        to: remote,
                        data,
                    }));
                Ok(())
            }
            Err(d) => Err(d.into()),
        }
    }

    /// The server role's relay of the bubble in `buf[start..end]` (its IPv6 header, then any
    /// trailers through the end of the datagram) from `remote` to our client `dst` (§5.3.1,
    /// §5.2.9): only a bubble with well-formed RFC 6081 trailers, within the per-sender and
    /// per-destination budgets, with an origin indication naming `remote`.
    fn relay_bubble(
        &mut self,
        now: Instant,
        remote: SocketAddrV4,
        buf: &mut [u8],
        start: usize,
        end: usize,
        dst: &Address,
    ) -> Result<Verdict, DropReason> {
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let ipv6 = ipv6::Packet::new_checked(bytes)?;
        let trailing = bytes.get(ipv6.total_len()..).unwrap_or_default();
        gate64_teredo::check_relayed(&ipv6, trailing)?;
        self.check_mapping(&dst.mapped)?;
        if !self.relay_source_limiter.allow(now, *remote.ip()) {
            return Err(DropReason::RelaySourceRateLimited);
        }
        if !self.relay_destination_limiter.allow(now, *dst.mapped.ip()) {
            return Err(DropReason::RelayDestinationRateLimited);
        }
        self.relay_to_client(remote, buf, start, end, dst)
    }

    /// RFC 4380 §5.3.1/§5.4.1: never send to a non-global IPv4 address, nor to one of our own
    /// server addresses (a loop through our own sockets).
    fn check_mapping(&self, mapping: &SocketAddrV4) -> Result<(), DropReason> {
        let server = self.shared.server.as_ref().ok_or(DropReason::NoRoute)?;
        if !server.is_acceptable_v4(*mapping.ip()) {
            return Err(DropReason::NonGlobalMapping);
        }
        if server.is_own_address(*mapping) {
            return Err(DropReason::LoopGuard);
        }
        Ok(())
    }

    /// Server forwarding to one of our clients (§5.3.1): with an origin indication naming
    /// `remote`, where the packet came from, prepended in the headroom.
    fn relay_to_client(
        &self,
        remote: SocketAddrV4,
        buf: &mut [u8],
        start: usize,
        end: usize,
        dst: &Address,
    ) -> Result<Verdict, DropReason> {
        let server = self.shared.server.as_ref().ok_or(DropReason::NoRoute)?;
        let at = start
            .checked_sub(tw::ORIGIN_LEN)
            .ok_or(DropReason::Truncated)?;
        let head = buf.get_mut(at..start).ok_or(DropReason::Truncated)?;
        tw::Origin(remote)
            .emit(head)
            .map_err(|_| DropReason::Truncated)?;
        Ok(Verdict::udp(server.config().primary, dst.mapped, at, end))
    }

    /// The relay towards our client `dst` for a packet that passed the policy (from the
    /// corporate network, NAT64, an IP-HTTPS client or another Teredo client),
    /// `buf[start..end]` being exactly the IPv6 packet (§5.4.1): straight to a verified peer's
    /// mapping, else queued behind a bubble (paced per peer, limited per destination address)
    /// until the peer answers from that mapping.
    pub(crate) fn send_to_teredo_client(
        &mut self,
        now: Instant,
        dst: &Address,
        buf: &[u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let shared = Arc::clone(&self.shared);
        let server = shared.server.as_ref().ok_or(DropReason::NoRoute)?;
        self.check_mapping(&dst.mapped)?;
        let packet = buf.get(start..end).ok_or(DropReason::Truncated)?;
        match shared.peers.handle_transmit(now, dst, packet) {
            TxDecision::Send(to) => Ok(Verdict::udp(server.config().primary, to, start, end)),
            TxDecision::Queued { bubble, mapping } => {
                if bubble {
                    // The packet stays queued; the peer's next bubble retry may pass.
                    if self.relay_destination_limiter.allow(now, *mapping.ip()) {
                        self.transmits
                            .extend(self::bubble(server, &dst.encode(), mapping));
                    } else {
                        self.stats
                            .count_drops(DropReason::RelayDestinationRateLimited, 1);
                    }
                }
                Ok(Verdict::Consumed)
            }
            TxDecision::Drop(d) => Err(d.into()),
        }
    }
}

/// A bubble from the server's link-local address to the Teredo peer `peer`, sent to its
/// mapping from the primary address with an origin indication naming primary:port, as the
/// client's server relays it (RFC 4380 §5.2.9, §5.4.1). Off the fast path: it allocates.
pub(crate) fn bubble(server: &Server, peer: &Ipv6Addr, mapping: SocketAddrV4) -> Option<Transmit> {
    let from = server.config().primary;
    let origin = SocketAddrV4::new(from, server.config().port);
    let mut data = vec![0u8; tw::ORIGIN_LEN + ipv6::HEADER_LEN];
    let n = relay::emit_bubble(&mut data, &server.link_local(), peer, Some(origin)).ok()?;
    data.truncate(n);
    Some(Transmit {
        from,
        to: mapping,
        data,
    })
}

impl From<Reject> for DropReason {
    fn from(r: Reject) -> Self {
        match r {
            Reject::Truncated => DropReason::Truncated,
            Reject::Malformed => DropReason::Malformed,
            Reject::Unsupported => DropReason::Unsupported,
            Reject::NonGlobalSource => DropReason::NonGlobalSource,
            Reject::LoopGuard => DropReason::LoopGuard,
            Reject::SpoofedSource => DropReason::SpoofedSource,
            Reject::ForeignClient => DropReason::ForeignClient,
            Reject::UnhandledIcmpv6 => DropReason::UnhandledIcmpv6,
            Reject::BadTrailer => DropReason::TeredoBadTrailer,
            Reject::NotRelayable => DropReason::TeredoNotRelayable,
        }
    }
}

impl From<TxDrop> for DropReason {
    fn from(d: TxDrop) -> Self {
        match d {
            TxDrop::QueueFull => DropReason::RelayQueueFull,
            TxDrop::TableFull => DropReason::PeerTableFull,
            TxDrop::Ipv4Full => DropReason::PeerIpv4Full,
        }
    }
}
