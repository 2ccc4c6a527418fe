//! Teredo addresses (RFC 4380 §4, flags updated by RFC 5991).
//!
//! | bits | 0–31 | 32–63 | 64–79 | 80–95 | 96–127 |
//! |---|---|---|---|---|---|
//! | field | `2001:0000` | server IPv4 | flags | port ^ 0xffff | IPv4 ^ 0xffffffff |

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

/// The Teredo service prefix `2001:0000::/32` (RFC 4380 §2.6).
pub const PREFIX: [u8; 4] = [0x20, 0x01, 0x00, 0x00];
/// The Teredo server UDP port (RFC 4380 §2.7).
pub const TEREDO_PORT: u16 = 3544;
/// Cone flag (RFC 4380 §4). RFC 5991 deprecates setting it, but servers still honour it.
pub const FLAG_CONE: u16 = 0x8000;

/// A decoded Teredo address. The random flag bits of RFC 5991 are carried but carry no
/// meaning: only the server address and the mapping identify a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Address {
    /// The client's Teredo server (bits 32–63).
    pub server: Ipv4Addr,
    /// Flags (bits 64–79).
    pub flags: u16,
    /// The client's mapped (NAT external) IPv4 address and UDP port.
    pub mapped: SocketAddrV4,
}

impl Address {
    /// Decodes `addr` when it lies in `2001:0::/32`.
    pub fn decode(addr: &Ipv6Addr) -> Option<Self> {
        let o = addr.octets();
        if o[..4] != PREFIX {
            return None;
        }
        let server = Ipv4Addr::new(o[4], o[5], o[6], o[7]);
        let flags = u16::from_be_bytes([o[8], o[9]]);
        let port = !u16::from_be_bytes([o[10], o[11]]);
        let ip = !u32::from_be_bytes([o[12], o[13], o[14], o[15]]);
        Some(Address {
            server,
            flags,
            mapped: SocketAddrV4::new(Ipv4Addr::from(ip), port),
        })
    }

    /// Encodes into an IPv6 address.
    pub fn encode(&self) -> Ipv6Addr {
        let mut o = [0u8; 16];
        o[..4].copy_from_slice(&PREFIX);
        o[4..8].copy_from_slice(&self.server.octets());
        o[8..10].copy_from_slice(&self.flags.to_be_bytes());
        o[10..12].copy_from_slice(&(!self.mapped.port()).to_be_bytes());
        o[12..16].copy_from_slice(&(!u32::from(*self.mapped.ip())).to_be_bytes());
        Ipv6Addr::from(o)
    }

    /// True when the cone flag is set.
    pub fn is_cone(&self) -> bool {
        self.flags & FLAG_CONE != 0
    }
}

/// True for any address in `2001:0::/32`.
pub fn is_teredo(addr: &Ipv6Addr) -> bool {
    addr.octets()[..4] == PREFIX
}

/// The /64 a server advertises: `2001:0:<server IPv4>::/64` (RFC 4380 §5.3.2).
pub fn server_prefix(server: Ipv4Addr) -> Ipv6Addr {
    let s = server.octets();
    Ipv6Addr::from([
        0x20, 0x01, 0, 0, s[0], s[1], s[2], s[3], 0, 0, 0, 0, 0, 0, 0, 0,
    ])
}

/// The server's link-local address, the source of its Router Advertisements (RFC 4380
/// §5.3.2): `fe80::` + cone flag + obfuscated port + obfuscated server IPv4.
pub fn server_link_local(server: Ipv4Addr, port: u16) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o[0] = 0xfe;
    o[1] = 0x80;
    o[8..10].copy_from_slice(&FLAG_CONE.to_be_bytes());
    o[10..12].copy_from_slice(&(!port).to_be_bytes());
    o[12..16].copy_from_slice(&(!u32::from(server)).to_be_bytes());
    Ipv6Addr::from(o)
}

/// True for a link-local address with the cone flag set in its interface identifier; a
/// client signals its cone probe this way in the RS source (RFC 4380 §5.2.1).
pub fn link_local_has_cone_flag(addr: &Ipv6Addr) -> bool {
    let o = addr.octets();
    o[0] == 0xfe && (o[1] & 0xc0) == 0x80 && u16::from_be_bytes([o[8], o[9]]) & FLAG_CONE != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    // Brief §1.2 worked example: server 65.54.227.120, client mapped 192.0.2.45:40000.
    #[test]
    fn rfc4380_4_worked_example_encode_decode() {
        let server = Ipv4Addr::new(65, 54, 227, 120);
        let mapped: SocketAddrV4 = "192.0.2.45:40000".parse().unwrap();
        for (flags, text) in [
            (0x0000, "2001:0:4136:e378:0:63bf:3fff:fdd2"),
            (0x8000, "2001:0:4136:e378:8000:63bf:3fff:fdd2"),
            (0x2c5a, "2001:0:4136:e378:2c5a:63bf:3fff:fdd2"),
        ] {
            let a = Address {
                server,
                flags,
                mapped,
            };
            assert_eq!(a.encode(), text.parse::<Ipv6Addr>().unwrap());
            assert_eq!(Address::decode(&text.parse().unwrap()), Some(a));
        }
        assert!(Address::decode(&"2001:db8::1".parse().unwrap()).is_none());
    }

    // Brief §1.2: fe80::8000:f227:bec9:1c87 for 65.54.227.120, fe80::8000:f227:3fff:fdfe for
    // 192.0.2.1 (seen on the wire from miredo-server).
    #[test]
    fn rfc4380_5_3_2_server_link_local() {
        assert_eq!(
            server_link_local(Ipv4Addr::new(65, 54, 227, 120), TEREDO_PORT),
            "fe80::8000:f227:bec9:1c87".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            server_link_local(Ipv4Addr::new(192, 0, 2, 1), TEREDO_PORT),
            "fe80::8000:f227:3fff:fdfe".parse::<Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn prefix_and_cone_probe_detection() {
        assert_eq!(
            server_prefix(Ipv4Addr::new(192, 0, 2, 1)),
            "2001:0:c000:201::".parse::<Ipv6Addr>().unwrap()
        );
        assert!(link_local_has_cone_flag(
            &"fe80::8000:ffff:ffff:fffe".parse().unwrap()
        ));
        assert!(!link_local_has_cone_flag(
            &"fe80::ffff:ffff:ffff".parse().unwrap()
        ));
        assert!(!link_local_has_cone_flag(
            &"2001::8000:0:0:0".parse().unwrap()
        ));
    }
}
