//! IPv6 fixed header view (RFC 8200 §3).

use crate::{Error, Result};
use std::net::Ipv6Addr;

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;
/// Next-header value for ICMPv6.
pub const NH_ICMPV6: u8 = 58;
/// Next-header value "no next header", used by Teredo bubbles.
pub const NH_NONE: u8 = 59;
/// Next-header value for UDP.
pub const NH_UDP: u8 = 17;
/// Next-header value for TCP.
pub const NH_TCP: u8 = 6;

/// A checked view of an IPv6 packet: the version is 6 and the buffer holds at least
/// `40 + payload_len` bytes. Accessors never panic once [`Packet::new_checked`] succeeded.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    buf: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Checks version and length; bytes after `40 + payload_len` are allowed (RFC 4380 §5.3.1
    /// and RFC 6081 trailers) and excluded from [`Packet::as_bytes`].
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if buf[0] >> 4 != 6 {
            return Err(Error::Malformed);
        }
        let plen = usize::from(u16::from_be_bytes([buf[4], buf[5]]));
        if plen == 0 && buf[6] == 0 {
            // A hop-by-hop header with payload length 0 announces a jumbogram (RFC 2675).
            return Err(Error::Unsupported);
        }
        if buf.len() < HEADER_LEN + plen {
            return Err(Error::Truncated);
        }
        Ok(Packet {
            buf: &buf[..HEADER_LEN + plen],
        })
    }

    /// The packet bytes, header and payload, without trailing bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// Total length: 40 + payload length.
    pub fn total_len(&self) -> usize {
        self.buf.len()
    }

    /// Payload length field.
    pub fn payload_len(&self) -> u16 {
        u16::from_be_bytes([self.buf[4], self.buf[5]])
    }

    /// Next-header field.
    pub fn next_header(&self) -> u8 {
        self.buf[6]
    }

    /// Hop limit field.
    pub fn hop_limit(&self) -> u8 {
        self.buf[7]
    }

    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        addr_at(self.buf, 8)
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        addr_at(self.buf, 24)
    }

    /// Payload after the fixed header.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[HEADER_LEN..]
    }

    /// A Teredo bubble: no next header and an empty payload (RFC 4380 §2.8).
    pub fn is_bubble(&self) -> bool {
        self.next_header() == NH_NONE && self.payload_len() == 0
    }
}

fn addr_at(buf: &[u8], at: usize) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&buf[at..at + 16]);
    Ipv6Addr::from(o)
}

/// Reads the destination address of something that looks like an IPv6 header, for routing
/// decisions before full validation. Returns `None` when too short.
pub fn peek_dst(buf: &[u8]) -> Option<Ipv6Addr> {
    (buf.len() >= HEADER_LEN).then(|| addr_at(buf, 24))
}

/// Writes a fixed IPv6 header into `out[..40]`.
pub fn emit_header(
    out: &mut [u8],
    payload_len: u16,
    next_header: u8,
    hop_limit: u8,
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
) -> Result<()> {
    let h = out.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
    h[..4].copy_from_slice(&[0x60, 0, 0, 0]);
    h[4..6].copy_from_slice(&payload_len.to_be_bytes());
    h[6] = next_header;
    h[7] = hop_limit;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    Ok(())
}

/// True for addresses an IPv6 router may forward between links: not unspecified, loopback,
/// link-local, multicast or IPv4-mapped (RFC 4380 §5.3.1 "MUST NOT forward").
pub fn is_forwardable_unicast(a: &Ipv6Addr) -> bool {
    let s = a.segments();
    !(a.is_unspecified()
        || a.is_loopback()
        || a.is_multicast()
        || (s[0] & 0xffc0) == 0xfe80
        || a.to_ipv4_mapped().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bubble() -> [u8; 40] {
        let mut b = [0u8; 40];
        emit_header(
            &mut b,
            0,
            NH_NONE,
            64,
            &"fe80::1".parse().unwrap(),
            &"2001::1".parse().unwrap(),
        )
        .unwrap();
        b
    }

    #[test]
    fn parses_bubble_and_keeps_trailer_out() {
        let mut buf = bubble().to_vec();
        buf.extend_from_slice(&[1, 2, 3]);
        let p = Packet::new_checked(&buf).unwrap();
        assert!(p.is_bubble());
        assert_eq!(p.total_len(), 40);
        assert_eq!(p.src(), "fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst(), "2001::1".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn rejects_short_wrong_version_and_lying_length() {
        let b = bubble();
        assert_eq!(Packet::new_checked(&b[..39]).unwrap_err(), Error::Truncated);
        let mut v4 = b;
        v4[0] = 0x45;
        assert_eq!(Packet::new_checked(&v4).unwrap_err(), Error::Malformed);
        let mut long = b;
        long[5] = 8;
        assert_eq!(Packet::new_checked(&long).unwrap_err(), Error::Truncated);
        let mut jumbo = b;
        jumbo[6] = 0;
        assert_eq!(Packet::new_checked(&jumbo).unwrap_err(), Error::Unsupported);
    }

    #[test]
    fn forwardable_classes() {
        for a in ["::", "::1", "fe80::1", "ff02::2", "::ffff:1.2.3.4"] {
            assert!(!is_forwardable_unicast(&a.parse().unwrap()), "{a}");
        }
        assert!(is_forwardable_unicast(&"2001:db8::1".parse().unwrap()));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn new_checked_never_panics(
                buf in prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..2000),
                    (any::<[u8; 40]>(), proptest::collection::vec(any::<u8>(), 0..300))
                        .prop_map(|(mut h, t)| { h[0] = 0x60 | (h[0] & 0xf); [&h[..], &t].concat() }),
                ]
            ) {
                if let Ok(p) = Packet::new_checked(&buf) {
                    prop_assert_eq!(p.total_len(), HEADER_LEN + usize::from(p.payload_len()));
                    prop_assert!(p.total_len() <= buf.len());
                    prop_assert_eq!(p.payload().len(), usize::from(p.payload_len()));
                    let _ = (p.src(), p.dst(), p.next_header(), p.hop_limit(), p.is_bubble());
                }
                let _ = peek_dst(&buf);
            }

            #[test]
            fn header_emit_parse_roundtrip(
                plen in 0u16..512,
                nh in 1u8..=255,
                hop in any::<u8>(),
                src in any::<u128>(),
                dst in any::<u128>(),
            ) {
                let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
                let mut b = vec![0u8; HEADER_LEN + usize::from(plen)];
                emit_header(&mut b, plen, nh, hop, &src, &dst).unwrap();
                let p = Packet::new_checked(&b).unwrap();
                prop_assert_eq!(
                    (p.payload_len(), p.next_header(), p.hop_limit(), p.src(), p.dst()),
                    (plen, nh, hop, src, dst)
                );
            }
        }
    }
}
