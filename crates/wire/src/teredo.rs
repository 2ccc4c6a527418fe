//! Teredo encapsulation headers (RFC 4380 §5.1.1): the authentication header, the origin
//! indication, and the IPv6 packet they precede inside a UDP datagram.

use crate::{Error, Result, ipv6};
use std::net::{Ipv4Addr, SocketAddrV4};

/// Length of an origin indication.
pub const ORIGIN_LEN: usize = 8;
/// Length of an authentication header without client identifier and authentication value.
pub const AUTH_MIN_LEN: usize = 13;

/// The authentication header. Real clients (Miredo, Windows) send empty identifier and value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Auth<'a> {
    /// Client identifier (`ID-len` bytes).
    pub client_id: &'a [u8],
    /// Authentication value (`AU-len` bytes).
    pub auth_value: &'a [u8],
    /// The 8-byte nonce the server must echo.
    pub nonce: [u8; 8],
    /// Confirmation byte: 0 means the shared key is still valid.
    pub confirmation: u8,
}

impl Auth<'_> {
    /// Bytes this header takes on the wire.
    pub fn wire_len(&self) -> usize {
        AUTH_MIN_LEN + self.client_id.len() + self.auth_value.len()
    }

    /// Writes the header at the start of `out`.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        let len = self.wire_len();
        let o = out.get_mut(..len).ok_or(Error::Truncated)?;
        let id_len = u8::try_from(self.client_id.len()).map_err(|_| Error::Malformed)?;
        let au_len = u8::try_from(self.auth_value.len()).map_err(|_| Error::Malformed)?;
        o[0] = 0;
        o[1] = 1;
        o[2] = id_len;
        o[3] = au_len;
        let mut at = 4;
        o[at..at + self.client_id.len()].copy_from_slice(self.client_id);
        at += self.client_id.len();
        o[at..at + self.auth_value.len()].copy_from_slice(self.auth_value);
        at += self.auth_value.len();
        o[at..at + 8].copy_from_slice(&self.nonce);
        o[at + 8] = self.confirmation;
        Ok(len)
    }
}

/// The origin indication: the IPv4 address and UDP port the server saw a packet come from.
/// On the wire both are XORed with all ones (RFC 4380 §5.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin(pub SocketAddrV4);

impl Origin {
    /// Writes the 8-byte origin indication at the start of `out`.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        let o = out.get_mut(..ORIGIN_LEN).ok_or(Error::Truncated)?;
        o[0] = 0;
        o[1] = 0;
        o[2..4].copy_from_slice(&(!self.0.port()).to_be_bytes());
        o[4..8].copy_from_slice(&(!u32::from(*self.0.ip())).to_be_bytes());
        Ok(ORIGIN_LEN)
    }

    fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..ORIGIN_LEN).ok_or(Error::Truncated)?;
        let port = !u16::from_be_bytes([b[2], b[3]]);
        let ip = !u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        Ok(Origin(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
    }
}

/// A parsed Teredo UDP payload: optional headers, then an IPv6 packet.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// Authentication header, when present (it comes first).
    pub auth: Option<Auth<'a>>,
    /// Origin indication, when present.
    pub origin: Option<Origin>,
    /// Offset of the IPv6 header inside the datagram.
    pub ipv6_offset: usize,
    /// The IPv6 packet (checked; trailing bytes after it are excluded).
    pub ipv6: ipv6::Packet<'a>,
}

impl<'a> Packet<'a> {
    /// Parses a Teredo datagram: `00 01` starts an authentication header, `00 00` an origin
    /// indication, and a version nibble of 6 the IPv6 packet (RFC 4380 §5.1.1). Anything else is
    /// malformed. Trailing bytes after the IPv6 packet are allowed (RFC 6081 trailers).
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        let mut at = 0;
        let mut auth = None;
        let mut origin = None;
        if buf.len() < 2 {
            return Err(Error::Truncated);
        }
        if buf[0] == 0 && buf[1] == 1 {
            let h = buf.get(..4).ok_or(Error::Truncated)?;
            let id_len = usize::from(h[2]);
            let au_len = usize::from(h[3]);
            let len = AUTH_MIN_LEN + id_len + au_len;
            let b = buf.get(..len).ok_or(Error::Truncated)?;
            let mut nonce = [0u8; 8];
            nonce.copy_from_slice(&b[4 + id_len + au_len..12 + id_len + au_len]);
            auth = Some(Auth {
                client_id: &b[4..4 + id_len],
                auth_value: &b[4 + id_len..4 + id_len + au_len],
                nonce,
                confirmation: b[12 + id_len + au_len],
            });
            at = len;
        }
        let rest = buf.get(at..).ok_or(Error::Truncated)?;
        if rest.len() >= 2 && rest[0] == 0 && rest[1] == 0 {
            origin = Some(Origin::parse(rest)?);
            at += ORIGIN_LEN;
        }
        let rest = buf.get(at..).ok_or(Error::Truncated)?;
        match rest.first() {
            None => return Err(Error::Truncated),
            Some(b) if b >> 4 != 6 => return Err(Error::Malformed),
            Some(_) => {}
        }
        let ipv6 = ipv6::Packet::new_checked(rest)?;
        Ok(Packet {
            auth,
            origin,
            ipv6_offset: at,
            ipv6,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 4380 §5.1.1: port 337 and address 1.2.3.4 give the origin indication
    // 0000FEAEFEFDFCFB.
    #[test]
    fn rfc4380_5_1_1_origin_indication_example() {
        let mut b = [0u8; 8];
        Origin(SocketAddrV4::new(Ipv4Addr::new(1, 2, 3, 4), 337))
            .emit(&mut b)
            .unwrap();
        assert_eq!(b, [0x00, 0x00, 0xfe, 0xae, 0xfe, 0xfd, 0xfc, 0xfb]);
        assert_eq!(Origin::parse(&b).unwrap().0, "1.2.3.4:337".parse().unwrap());
    }

    // Brief §1.2 worked example: 192.0.2.45:40000 -> 00 00 63 bf 3f ff fd d2.
    #[test]
    fn origin_indication_worked_example() {
        let mut b = [0u8; 8];
        Origin("192.0.2.45:40000".parse().unwrap())
            .emit(&mut b)
            .unwrap();
        assert_eq!(b, [0x00, 0x00, 0x63, 0xbf, 0x3f, 0xff, 0xfd, 0xd2]);
    }

    fn bubble() -> [u8; 40] {
        let mut b = [0u8; 40];
        ipv6::emit_header(
            &mut b,
            0,
            ipv6::NH_NONE,
            64,
            &"fe80::1".parse().unwrap(),
            &"2001::1".parse().unwrap(),
        )
        .unwrap();
        b
    }

    #[test]
    fn auth_then_origin_then_ipv6_roundtrip() {
        let mut buf = [0u8; 13 + 8 + 40];
        let auth = Auth {
            client_id: &[],
            auth_value: &[],
            nonce: [1, 2, 3, 4, 5, 6, 7, 8],
            confirmation: 0,
        };
        let mut at = auth.emit(&mut buf).unwrap();
        at += Origin("198.51.100.10:3546".parse().unwrap())
            .emit(&mut buf[at..])
            .unwrap();
        buf[at..].copy_from_slice(&bubble());
        let p = Packet::parse(&buf).unwrap();
        assert_eq!(p.auth.unwrap().nonce, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(p.origin.unwrap().0, "198.51.100.10:3546".parse().unwrap());
        assert_eq!(p.ipv6_offset, 21);
        assert!(p.ipv6.is_bubble());
    }

    #[test]
    fn auth_with_id_and_value_lengths() {
        let mut buf = vec![0u8, 1, 2, 3, 0xa, 0xb, 0xc, 0xd, 0xe];
        buf.extend_from_slice(&[9; 8]);
        buf.push(0);
        buf.extend_from_slice(&bubble());
        let p = Packet::parse(&buf).unwrap();
        let a = p.auth.unwrap();
        assert_eq!(a.client_id, &[0xa, 0xb]);
        assert_eq!(a.auth_value, &[0xc, 0xd, 0xe]);
        assert_eq!(a.wire_len(), 18);
    }

    #[test]
    fn malformed_inputs_are_errors_not_panics() {
        let cases: &[&[u8]] = &[
            &[],
            &[0],
            &[0, 1],
            &[0, 1, 255, 255, 0],
            &[0, 0, 1, 2],
            &[0, 0, 1, 2, 3, 4, 5, 6],
            &[0x45, 0, 0, 20],
            &[0, 2, 0, 0],
        ];
        for c in cases {
            assert!(Packet::parse(c).is_err(), "{c:?}");
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// Arbitrary bytes, plus inputs that start like the real headers so the deeper
        /// branches are reached.
        fn datagram() -> impl Strategy<Value = Vec<u8>> {
            let tail = proptest::collection::vec(any::<u8>(), 0..200);
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..2000),
                tail.clone().prop_map(|t| [&[0u8, 1][..], &t].concat()),
                tail.clone().prop_map(|t| [&[0u8, 0][..], &t].concat()),
                (tail, 0u8..64).prop_map(|(t, v)| [&[0x60 | (v & 0xf)][..], &t].concat()),
            ]
        }

        proptest! {
            #[test]
            fn parse_never_panics(buf in datagram()) {
                if let Ok(p) = Packet::parse(&buf) {
                    prop_assert!(p.ipv6_offset + p.ipv6.total_len() <= buf.len());
                    let header = p.auth.map_or(0, |a| a.wire_len())
                        + if p.origin.is_some() { ORIGIN_LEN } else { 0 };
                    prop_assert_eq!(p.ipv6_offset, header);
                }
            }

            #[test]
            fn origin_emit_parse_roundtrip(ip in any::<u32>(), port in any::<u16>()) {
                let o = Origin(SocketAddrV4::new(Ipv4Addr::from(ip), port));
                let mut b = [0u8; ORIGIN_LEN];
                prop_assert_eq!(o.emit(&mut b), Ok(ORIGIN_LEN));
                prop_assert_eq!(&b[..2], &[0, 0]);
                prop_assert_eq!(Origin::parse(&b), Ok(o));
            }

            #[test]
            fn auth_origin_ipv6_emit_parse_roundtrip(
                id in proptest::collection::vec(any::<u8>(), 0..=255),
                au in proptest::collection::vec(any::<u8>(), 0..=255),
                nonce in any::<[u8; 8]>(),
                confirmation in any::<u8>(),
                origin in proptest::option::of((any::<u32>(), any::<u16>())),
            ) {
                let auth = Auth { client_id: &id, auth_value: &au, nonce, confirmation };
                let mut buf = vec![0u8; auth.wire_len() + ORIGIN_LEN + 40];
                let mut at = auth.emit(&mut buf).unwrap();
                let origin = origin.map(|(ip, port)| Origin(SocketAddrV4::new(ip.into(), port)));
                if let Some(o) = origin {
                    at += o.emit(&mut buf[at..]).unwrap();
                }
                buf.truncate(at + 40);
                buf[at..].copy_from_slice(&bubble());
                let p = Packet::parse(&buf).unwrap();
                prop_assert_eq!(p.auth, Some(auth));
                prop_assert_eq!(p.origin, origin);
                prop_assert_eq!(p.ipv6_offset, at);
                prop_assert!(p.ipv6.is_bubble());
            }
        }
    }
}
