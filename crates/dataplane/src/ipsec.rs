//! The ESP stage (RFC 4303, RFC 3948): ESP a client sends to the IPsec endpoint over its
//! transport is opened here, at the one ingress, and its inner packet takes the road again as
//! [`ClientBinding::Ipsec`]; towards a client with a child SA, packets are sealed here before
//! its transport carries them.
//!
//! ```text
//! ingress: IPv6 to endpoint, next header 50           -> ESP
//!          UDP to [endpoint]:4500, first word non-zero -> ESP (RFC 3948 §2.2)
//!          UDP to [endpoint]:4500, one byte 0xFF       -> NAT keepalive, consumed (§2.3)
//!          ESP -> SA by SPI (esp_unknown_spi) -> from the SA's peer? (spoofed_source)
//!              -> open in place (esp_replay, esp_auth) -> selectors (esp_selector)
//!              -> the road, from ClientBinding::Ipsec
//! ```

use crate::policy::NAT_T_PORT;
use crate::{ClientBinding, DropReason, Shared, Verdict, Worker};
use gate64_wire::ipv6;
use std::time::Instant;

/// IPv6 next header of ESP (RFC 4303 §2).
pub(crate) const NH_ESP: u8 = 50;
/// UDP header length.
const UDP_LEN: usize = 8;
/// RFC 3948 §2.3: a NAT-keepalive is one octet, 0xFF.
const NAT_KEEPALIVE: u8 = 0xff;

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
            ipv6::NH_UDP => {
                let udp = pkt.payload();
                let port = udp.get(2..4).map(|p| u16::from_be_bytes([p[0], p[1]]));
                port == Some(NAT_T_PORT) && udp.get(UDP_LEN..UDP_LEN + 4) != Some(&[0; 4][..])
            }
            _ => false,
        }
    }
}

impl Worker {
    /// ESP (or a NAT keepalive) in the IPv6 packet `buf[start..end]` from `from`.
    pub(crate) fn esp_ingress(
        &mut self,
        _now: Instant,
        from: &ClientBinding,
        buf: &mut [u8],
        start: usize,
        end: usize,
    ) -> Result<Verdict, DropReason> {
        // ESP inside ESP is no client's business: the inner packet goes to the corporate
        // side, never back to the endpoint.
        if matches!(from, ClientBinding::Ipsec { .. }) {
            return Err(DropReason::Malformed);
        }
        let bytes = buf.get(start..end).ok_or(DropReason::Truncated)?;
        let pkt = ipv6::Packet::new_checked(bytes)?;
        if pkt.next_header() == ipv6::NH_UDP
            && pkt.payload().get(UDP_LEN..) == Some(&[NAT_KEEPALIVE][..])
        {
            return Ok(Verdict::Consumed);
        }
        Err(DropReason::EspUnknownSpi)
    }
}
