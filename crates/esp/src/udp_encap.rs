//! UDP encapsulation of IKE and ESP (RFC 3948), as both ends tell its datagrams apart: the
//! responder's dataplane and the Linux client read the same rules here.
//!
//! ```text
//! UDP to port 500                          -> IKE (no marker)
//! UDP to port 4500, payload 0xFF           -> NAT-keepalive (§2.3)
//! UDP to port 4500, payload 0x00000000 ... -> IKE after the non-ESP marker (§2.2)
//! UDP to port 4500, anything else          -> ESP (§2.1: the SPI is never zero)
//! ```
//!
//! An ESP payload shorter than an ESP header is still classed as ESP here: opening it fails
//! and the caller counts it as it counts any truncated ESP.

/// IKE's port (RFC 7296 §2).
pub const IKE_PORT: u16 = 500;
/// The NAT traversal port, where IKE carries the non-ESP marker and ESP rides in UDP
/// (RFC 3948 §2, RFC 7296 §2.23).
pub const NAT_T_PORT: u16 = 4500;
/// The four zero bytes in front of an IKE message on [`NAT_T_PORT`] (RFC 3948 §2.2).
pub const NON_ESP_MARKER: [u8; 4] = [0; 4];
/// A NAT-keepalive's one byte (RFC 3948 §2.3).
pub const NAT_KEEPALIVE: u8 = 0xff;

/// What a UDP datagram to one of the IPsec ports carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encapsulated {
    /// An IKE message, starting this many bytes into the UDP payload (0 on port 500, the
    /// marker's 4 on port 4500).
    Ike {
        /// Where the IKE header starts in the UDP payload.
        offset: usize,
    },
    /// A NAT-keepalive: nothing to do but note that the peer is there.
    Keepalive,
    /// ESP in UDP: the payload is the ESP packet.
    Esp,
}

/// Classifies a UDP payload sent to `dst_port`; `None` for any other port.
#[inline]
pub fn classify(dst_port: u16, payload: &[u8]) -> Option<Encapsulated> {
    match dst_port {
        IKE_PORT => Some(Encapsulated::Ike { offset: 0 }),
        NAT_T_PORT => Some(match payload {
            [NAT_KEEPALIVE] => Encapsulated::Keepalive,
            [0, 0, 0, 0, ..] => Encapsulated::Ike {
                offset: NON_ESP_MARKER.len(),
            },
            _ => Encapsulated::Esp,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_markers_and_keepalives_are_told_apart() {
        assert_eq!(
            classify(IKE_PORT, &[0, 0, 0, 0, 1]),
            Some(Encapsulated::Ike { offset: 0 })
        );
        assert_eq!(
            classify(NAT_T_PORT, &[0, 0, 0, 0, 0x21]),
            Some(Encapsulated::Ike { offset: 4 })
        );
        assert_eq!(
            classify(NAT_T_PORT, &[0, 0, 0, 0]),
            Some(Encapsulated::Ike { offset: 4 })
        );
        assert_eq!(classify(NAT_T_PORT, &[0xff]), Some(Encapsulated::Keepalive));
        assert_eq!(classify(NAT_T_PORT, &[0xff, 0]), Some(Encapsulated::Esp));
        assert_eq!(
            classify(NAT_T_PORT, &[0, 0, 0, 1, 0]),
            Some(Encapsulated::Esp)
        );
        assert_eq!(classify(NAT_T_PORT, &[0, 0]), Some(Encapsulated::Esp));
        assert_eq!(classify(NAT_T_PORT, &[]), Some(Encapsulated::Esp));
        assert_eq!(classify(53, &[0, 0, 0, 0]), None);
    }
}
