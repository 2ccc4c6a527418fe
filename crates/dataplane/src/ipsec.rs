//! The ESP stage (RFC 4303, RFC 3948): ESP a client sends to the IPsec endpoint over its
//! transport is opened here, at the one ingress, and its inner packet takes the road again as
//! [`ClientBinding::Ipsec`]; towards a client with a child SA, packets are sealed here before
//! its transport carries them.
//!
//! ```text
//! ingress: IPv6 to endpoint, next header 50           -> ESP
//!          UDP to [endpoint]:4500, first word non-zero -> ESP (RFC 3948 §2.2)
//!          UDP to [endpoint]:4500, one byte 0xFF       -> NAT keepalive, consumed (§2.3)
//!          ESP -> SA by SPI (esp_unknown_spi; one awaiting an HA takeover: copied to the
//!                 sync task) -> from the SA's peer? (spoofed_source)
//!              -> open in place (esp_replay, esp_auth) -> selectors (esp_selector)
//!              -> the road, from ClientBinding::Ipsec
//!              -> IPv6: the road; IPv4 (ipsec.pool4): the IPv4 road (ingress4)
//! egress:  IPv6 or IPv4 to a client's inner address with an outbound SA (SaDb::outbound_for)
//!          -> ESP header in front, sealed in place, trailer and ICV behind
//!          -> UDP 4500 in front when the SA is UDP-encapsulated (checksum over it all)
//!          -> outer IPv6: endpoint -> the client's outer address -> its transport
//! ```
//!
//! Everything is written in place: the outer headers go into the room in front of the inner
//! packet ([`crate::HEADROOM`] from the drivers, or the outer headers of the ESP packet it
//! came in), the trailer behind it (the drivers leave tailroom, at least
//! [`gate64_esp::LARGEST_TRAILER`] bytes: an opened packet's own trailer may be shorter than
//! a resealed one's when the two SAs' ciphers differ, AES-CBC padding to 16 bytes and
//! AES-GCM to 4).

use crate::stats::{Direction, Side};
use crate::{ClientBinding, DropReason, Shared, Verdict, Worker};
use gate64_esp::udp_encap::{self, Encapsulated, IKE_PORT, NAT_T_PORT};
use gate64_esp::{InboundEntry, OpenError, OutboundEntry};
use gate64_wire::{ipv4, ipv6, udp};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// IPv6 next header of ESP (RFC 4303 §2).
pub(crate) const NH_ESP: u8 = 50;
/// Hop limit of the outer packets gate64 sends.
const OUTER_HOP_LIMIT: u8 = 64;

impl Shared {
    /// True for what the ESP stage takes: to the IPsec endpoint, ESP as next header 50, or
    /// UDP to port 4500 that is not IKE (no zero non-ESP marker): ESP in UDP or a NAT
    /// keepalive.
    pub(crate) fn is_esp(&self, pkt: &ipv6::Packet<'_>) -> bool {
        if self.cfg.ipsec_endpoint != Some(pkt.dst()) {
            return false;
        }
        match pkt.next_header() {
            NH_ESP => true,
            ipv6::NH_UDP => matches!(
                encap_to(pkt.payload()),
                Some(Encapsulated::Esp | Encapsulated::Keepalive)
            ),
            _ => false,
        }
    }

    /// The outbound SA a packet from `src` to `dst` leaves under, if `dst` is a client's
    /// inner address with one. IKE from gate64's own endpoint is never sealed (RFC 4301
    /// §5.2's bypass for IKE): it is what sets the SAs up, and must reach a client whose
    /// inner address is its outer one in the clear.
    fn outbound_sa(&self, pkt: &ipv6::Packet<'_>) -> Option<Arc<OutboundEntry>> {
        let sadb = self.cfg.sadb.as_ref()?;
        if self.cfg.ipsec_endpoint == Some(pkt.src())
            && pkt.next_header() == ipv6::NH_UDP
            && udp::peek_ports(pkt.payload())
                .is_some_and(|(src, _)| src == IKE_PORT || src == NAT_T_PORT)
        {
            return None;
        }
        sadb.outbound_for(IpAddr::V6(pkt.dst()), IpAddr::V6(pkt.src()))
    }
}

/// ESP whose SPI found no SA: when that SPI is a child SA another node synced here and that
/// waits for a takeover (`[ha]`), a copy goes to the HA sync task, which takes the client
/// over if the packet authenticates under the synced keys. The packet itself is still
/// dropped (`esp_unknown_spi`); the client's next one finds the SA. Only this drop path pays
/// for the lookup: one atomic load while the published set is unchanged, then a hash lookup.
fn offer_for_takeover(
    sadb: &gate64_esp::SaDb,
    view: &mut gate64_esp::AwaitingView,
    remote: SocketAddr,
    spi: u32,
    esp: &[u8],
) {
    let awaiting = sadb.awaiting();
    if awaiting.contains(view, spi) {
        awaiting.offer(remote, esp);
    }
}

impl Worker {
    /// ESP (or a NAT keepalive) in the IPv6 packet `buf[start..end]` from `from`: opened, and
    /// its inner packet sent down the road from [`ClientBinding::Ipsec`].
    pub(crate) fn esp_ingress(
        &mut self,
        now: Instant,
        from: &ClientBinding,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        // ESP inside ESP is no client's business: an inner packet goes to the corporate side,
        // never back to the endpoint.
        if matches!(from, ClientBinding::Ipsec { .. }) {
            return Err(DropReason::Malformed);
        }
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let pkt = ipv6::Packet::new_checked(bytes)?;
        let (outer, end) = (pkt.src(), start + pkt.total_len());
        let esp_at = match pkt.next_header() {
            NH_ESP => start + ipv6::HEADER_LEN,
            _ if encap_to(pkt.payload()) == Some(Encapsulated::Keepalive) => {
                return Ok(Verdict::Consumed);
            }
            _ => start + ipv6::HEADER_LEN + udp::HEADER_LEN,
        };
        let esp = buf.get_mut(esp_at..end).ok_or(DropReason::Truncated)?;
        let spi = gate64_esp::spi_of(esp).ok_or(DropReason::Truncated)?;
        // `self.shared` is borrowed, not cloned: its reference count is one cache line every
        // worker would write twice per packet.
        let sadb = (self.shared.cfg.sadb.as_ref()).ok_or(DropReason::EspUnknownSpi)?;
        let Some(sa) = sadb.inbound(spi) else {
            let remote = SocketAddr::new(IpAddr::V6(outer), 0);
            offer_for_takeover(sadb, &mut self.awaiting, remote, spi, esp);
            return Err(DropReason::EspUnknownSpi);
        };
        // Only the client the SA was negotiated with may use it: the transport stage checked
        // that `outer` is that client's address. A native SA's ESP comes to its socket.
        if sa.peer().outer != outer || sa.peer().native.is_some() {
            return Err(DropReason::SpoofedSource);
        }
        let opened = sa.sa.open(esp).map_err(open_drop)?;
        self.opened_esp(now, (outer, spi), &sa, opened, buf, esp_at)
    }

    /// ESP a client that reaches gate64 directly (`[ipsec] listen`) sent from `remote` to the
    /// socket `local` (port 4500): `buf[start..end]` is the UDP payload, which the driver
    /// already told apart from IKE and keepalives (RFC 3948 §2.2). Opened in place like ESP
    /// through the transports; once it authenticates, a new address or port of the client
    /// (its NAT mapping changed) becomes the SA's (RFC 7296 §2.23, RFC 3948 §2.1), so what
    /// gate64 sends follows it. The inner packet takes the road from
    /// [`ClientBinding::Ipsec`], its outer address the client's (IPv4-mapped for IPv4).
    pub fn handle_native_esp(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Verdict {
        self.stats
            .packet(Side::Internet, Direction::Rx, end.saturating_sub(start));
        // This worker gets no tick (it runs on the IKE task): its expired fragments are
        // counted here, as an IP-HTTPS thread's are.
        self.reassembly.expire(now, &self.stats);
        let v = self.native_esp_ingress(now, local, remote, buf, start, end);
        self.finish(v)
    }

    fn native_esp_ingress(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        let outer = match remote.ip() {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        let sadb = self
            .shared
            .cfg
            .sadb
            .as_ref()
            .ok_or(DropReason::EspUnknownSpi)?;
        let esp = buf.get_mut(start..end).ok_or(DropReason::Truncated)?;
        let spi = gate64_esp::spi_of(esp).ok_or(DropReason::Truncated)?;
        let Some(sa) = sadb.inbound(spi) else {
            offer_for_takeover(sadb, &mut self.awaiting, remote, spi, esp);
            return Err(DropReason::EspUnknownSpi);
        };
        // An SA negotiated through Teredo or IP-HTTPS, or at another of gate64's addresses,
        // is not this socket's.
        if sa.peer().native.map(|n| n.ip()) != Some(local.ip()) {
            return Err(DropReason::SpoofedSource);
        }
        let moved = sa.peer().outer != outer || sa.peer().udp_encap != Some(remote.port());
        let opened = sa.sa.open(esp).map_err(open_drop)?;
        if moved {
            let mut peer = sa.peer().clone();
            peer.outer = outer;
            peer.udp_encap = Some(remote.port());
            sadb.update_peer(spi, peer);
        }
        self.opened_esp(now, (outer, spi), &sa, opened, buf, start)
    }

    /// The rest of the ESP stage once `sa` (inbound SPI `spi`, peer `outer`) opened the ESP
    /// packet at `buf[esp_at..]`: dummy packets consumed, the inner packet held to the SA's
    /// selectors and sent down the road.
    fn opened_esp(
        &mut self,
        now: Instant,
        (outer, spi): (Ipv6Addr, u32),
        sa: &InboundEntry,
        opened: gate64_esp::Opened,
        buf: &mut [u8],
        esp_at: usize,
    ) -> Result<Verdict, DropReason> {
        self.stats.esp(Direction::Rx, opened.inner.len());
        let (inner_start, inner_end) = (esp_at + opened.inner.start, esp_at + opened.inner.end);
        match opened.next_header {
            gate64_esp::NEXT_HEADER_IPV6 => {}
            // IPv4 inside the tunnel only with `ipsec.pool4`.
            gate64_esp::NEXT_HEADER_IPV4 if self.shared.cfg.ipsec4.is_some() => {}
            // RFC 4303 §2.6: a dummy packet is discarded.
            gate64_esp::NEXT_HEADER_DUMMY => return Ok(Verdict::Consumed),
            gate64_esp::NEXT_HEADER_IPV4 => return Err(DropReason::Unsupported),
            _ => return Err(DropReason::Malformed),
        }
        let inner = buf
            .get(inner_start..inner_end)
            .ok_or(DropReason::Truncated)?;
        let (src, dst) =
            gate64_esp::inner_addrs(inner, opened.next_header).ok_or(DropReason::Malformed)?;
        if !sa.sa.admits(src, dst) {
            return Err(DropReason::EspSelector);
        }
        if let Some(policy) = sa.policy() {
            if !policy.reaches(dst) {
                return Err(DropReason::Policy);
            }
            if let Some(limit) = &policy.from_client
                && !limit.allow(now, inner.len())
            {
                return Err(DropReason::RateLimit);
            }
        }
        let binding = ClientBinding::Ipsec {
            outer,
            inbound_spi: spi,
        };
        if opened.next_header == gate64_esp::NEXT_HEADER_IPV4 {
            return self.ingress4(&binding, buf, inner_start, inner_end);
        }
        self.ingress(now, &binding, buf, inner_start, inner_end)
    }

    /// Seals the IPv6 packet `buf[start..end]` when its destination is a client's inner
    /// address with an outbound SA, and returns where the outer IPv6 packet (to the client's
    /// outer address) lies; returns `start..end` unchanged, and not sealed, when no SA covers
    /// it.
    pub(crate) fn seal_for_client(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Sealing, DropReason> {
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let pkt = ipv6::Packet::new_checked(bytes)?;
        let end = start + pkt.total_len();
        let Some(sa) = self.shared.outbound_sa(&pkt) else {
            return Ok(Sealing {
                span: (start, end),
                sealed: false,
                native: None,
            });
        };
        let src = IpAddr::V6(pkt.src());
        self.seal_under(
            now,
            &sa,
            buf,
            (start, end),
            gate64_esp::NEXT_HEADER_IPV6,
            src,
        )
    }

    /// Seals the IPv4 packet `buf[start..end]` towards a client's inner IPv4 address
    /// (`ipsec.pool4`) under the outbound SA that covers it, as [`Worker::seal_for_client`]
    /// does IPv6 (ESP next header 4). IPv4 reaches a client only inside ESP: without an SA
    /// it is [`DropReason::NoSaToClient`].
    pub(crate) fn seal4_for_client(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Sealing, DropReason> {
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let pkt = ipv4::Packet::new_checked(bytes)?;
        let end = start + usize::from(pkt.total_len());
        let sa = self
            .shared
            .cfg
            .sadb
            .as_ref()
            .and_then(|db| db.outbound_for(IpAddr::V4(pkt.dst()), IpAddr::V4(pkt.src())))
            .ok_or(DropReason::NoSaToClient)?;
        let src = IpAddr::V4(pkt.src());
        self.seal_under(
            now,
            &sa,
            buf,
            (start, end),
            gate64_esp::NEXT_HEADER_IPV4,
            src,
        )
    }

    /// Seals the inner packet `buf[start..end]` (of ESP next header `next_header`, from
    /// `src`) under `sa` and writes the outer headers in front of it. A session policy on
    /// the SA is checked first: `src` must be an address it reaches, within its rate.
    fn seal_under(
        &mut self,
        now: Instant,
        sa: &OutboundEntry,
        buf: &mut [u8],
        (start, end): (usize, usize),
        next_header: u8,
        src: IpAddr,
    ) -> Result<Sealing, DropReason> {
        if let Some(policy) = &sa.policy {
            if !policy.reaches(src) {
                return Err(DropReason::Policy);
            }
            if let Some(limit) = &policy.to_client
                && !limit.allow(now, end - start)
            {
                return Err(DropReason::RateLimit);
            }
        }
        let udp = sa.peer.udp_encap;
        // The ESP header's length depends on the cipher (an AES-CBC IV is 16 bytes, an
        // AES-GCM one 8).
        let esp_header = sa.sa.header_len();
        if let Some(local) = sa.peer.native {
            return self.seal_native(sa, local, buf, (start, end), next_header);
        }
        let endpoint = self.shared.cfg.ipsec_endpoint.ok_or(DropReason::NoRoute)?;
        let front = ipv6::HEADER_LEN + udp.map_or(0, |_| udp::HEADER_LEN) + esp_header;
        let outer_start = start.checked_sub(front).ok_or(DropReason::Unsupported)?;
        let esp_at = start - esp_header;
        let esp_len = sa
            .sa
            .seal(buf, esp_at, end - start, next_header)
            .map_err(seal_drop)?;
        self.stats.esp(Direction::Tx, end - start);
        let payload_len = esp_at + esp_len - (outer_start + ipv6::HEADER_LEN);
        let payload_len = u16::try_from(payload_len).map_err(|_| DropReason::PacketTooBig)?;
        let next_header = if udp.is_some() { ipv6::NH_UDP } else { NH_ESP };
        let outer_end = esp_at + esp_len;
        let out = buf
            .get_mut(outer_start..outer_end)
            .ok_or(DropReason::Truncated)?;
        ipv6::emit_header(
            out,
            payload_len,
            next_header,
            OUTER_HOP_LIMIT,
            &endpoint,
            &sa.peer.outer,
        )?;
        if let Some(port) = udp {
            // RFC 3948 §2.1: from 4500 to the client's port.
            udp::emit_over_v6(
                &mut out[ipv6::HEADER_LEN..],
                (&endpoint, &sa.peer.outer),
                NAT_T_PORT,
                port,
            )?;
        }
        Ok(Sealing {
            span: (outer_start, outer_end),
            sealed: true,
            native: None,
        })
    }
}

impl Worker {
    /// [`Worker::seal_for_client`] for a client that reaches gate64 directly: the ESP packet
    /// alone, for the listen socket `local` to send to the client's address and port (the
    /// socket adds the UDP and IP headers). A native SA is always UDP-encapsulated
    /// (negotiated on 4500); gate64 has no raw ESP socket.
    fn seal_native(
        &mut self,
        sa: &OutboundEntry,
        local: SocketAddr,
        buf: &mut [u8],
        (start, end): (usize, usize),
        next_header: u8,
    ) -> Result<Sealing, DropReason> {
        let port = sa.peer.udp_encap.ok_or(DropReason::Unsupported)?;
        let esp_at = start
            .checked_sub(sa.sa.header_len())
            .ok_or(DropReason::Unsupported)?;
        let esp_len = sa
            .sa
            .seal(buf, esp_at, end - start, next_header)
            .map_err(seal_drop)?;
        self.stats.esp(Direction::Tx, end - start);
        let to = match sa.peer.outer.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), port),
            None => SocketAddr::new(IpAddr::V6(sa.peer.outer), port),
        };
        Ok(Sealing {
            span: (esp_at, esp_at + esp_len),
            sealed: true,
            native: Some((local, to)),
        })
    }
}

/// What [`Worker::seal_for_client`] made of a packet towards a client.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sealing {
    /// Where the packet to send lies in the buffer: the ESP packet with its outer header when
    /// sealed, else the packet as it was.
    pub(crate) span: (usize, usize),
    /// Whether an outbound child SA sealed it.
    pub(crate) sealed: bool,
    /// For a client that reaches gate64 directly: the socket to send from and the client's
    /// address; the span is then the ESP packet alone (the UDP payload).
    pub(crate) native: Option<(SocketAddr, SocketAddr)>,
}

/// The drop reason of a packet its SA would not seal.
fn seal_drop(e: gate64_esp::SealError) -> DropReason {
    match e {
        gate64_esp::SealError::Expired => DropReason::NoSa,
        // No room for ESP's header and trailer around the packet, or more than AES-GCM may
        // seal at once: the packet does not fit the tunnel.
        gate64_esp::SealError::BufferTooSmall | gate64_esp::SealError::TooLong => {
            DropReason::Truncated
        }
    }
}

/// The drop reason of a packet its SA would not open.
fn open_drop(e: OpenError) -> DropReason {
    match e {
        OpenError::Replay => DropReason::EspReplay,
        OpenError::Auth => DropReason::EspAuth,
        OpenError::Truncated => DropReason::Truncated,
        OpenError::Expired => DropReason::NoSa,
        OpenError::Malformed => DropReason::Malformed,
    }
}

/// What a UDP datagram (`udp`: header and payload) carries by its destination port: IKE,
/// a NAT-keepalive or ESP on the IPsec ports (RFC 3948), `None` on any other.
pub(crate) fn encap_to(udp: &[u8]) -> Option<Encapsulated> {
    let (_, dst) = udp::peek_ports(udp)?;
    udp_encap::classify(dst, udp.get(udp::HEADER_LEN..).unwrap_or_default())
}

/// As [`encap_to`], by the source port: what gate64's responder sends from the IPsec ports.
pub(crate) fn encap_from(udp: &[u8]) -> Option<Encapsulated> {
    let (src, _) = udp::peek_ports(udp)?;
    udp_encap::classify(src, udp.get(udp::HEADER_LEN..).unwrap_or_default())
}
