//! Traffic selectors (RFC 7296 §3.13.1, RFC 4301 §4.4.1) and the addresses of an inner
//! packet they are checked against.

use core::ops::RangeInclusive;
use std::net::IpAddr;

use gate64_wire::{ipv4, ipv6};

/// Next Header of an ESP payload carrying an IPv4 packet (IANA protocol 4, IP-in-IP).
pub const NEXT_HEADER_IPV4: u8 = 4;
/// Next Header of an ESP payload carrying an IPv6 packet (IANA protocol 41).
pub const NEXT_HEADER_IPV6: u8 = 41;
/// Next Header of a dummy packet, to be dropped silently (RFC 4303 §2.6).
pub const NEXT_HEADER_DUMMY: u8 = 59;

/// One traffic selector as IKEv2 negotiates it: an address range, an IP protocol (0 = any)
/// and a port range (`0..=65535` = any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// First address of the range.
    pub start: IpAddr,
    /// Last address of the range, same family as `start`.
    pub end: IpAddr,
    /// IP protocol number, 0 for any (RFC 7296 §3.13.1).
    pub protocol: u8,
    /// Port range; `0..=65535` for any.
    pub ports: RangeInclusive<u16>,
}

impl Selector {
    /// Whether `addr` lies in `start..=end`. An address of the other family never does.
    /// Protocol and ports are not looked at: gate64's tunnels select by address only.
    pub fn covers(&self, addr: IpAddr) -> bool {
        match (self.start, self.end, addr) {
            (IpAddr::V4(s), IpAddr::V4(e), IpAddr::V4(a)) => s <= a && a <= e,
            (IpAddr::V6(s), IpAddr::V6(e), IpAddr::V6(a)) => s <= a && a <= e,
            _ => false,
        }
    }

    /// The selector for every address of `net`, any protocol and port.
    pub fn prefix(net: ipnet::IpNet) -> Self {
        Selector {
            start: net.network(),
            end: net.broadcast(),
            protocol: 0,
            ports: 0..=u16::MAX,
        }
    }

    /// The selector for one address, any protocol and port.
    pub fn address(addr: IpAddr) -> Self {
        Selector {
            start: addr,
            end: addr,
            protocol: 0,
            ports: 0..=u16::MAX,
        }
    }

    /// True when the range is one address (the usual remote selector of a client).
    pub fn is_single_address(&self) -> bool {
        self.start == self.end
    }
}

/// Whether any selector of `selectors` covers `addr`.
pub fn any_covers(selectors: &[Selector], addr: IpAddr) -> bool {
    selectors.iter().any(|s| s.covers(addr))
}

/// Source and destination of the inner packet an ESP payload carries, read through
/// gate64-wire's checked views: `next_header` 4 must hold a whole IPv4 packet, 41 a whole
/// IPv6 packet. `None` for anything else (including the dummy packet, 59) or when the packet
/// is truncated or of the other version.
pub fn inner_addrs(inner: &[u8], next_header: u8) -> Option<(IpAddr, IpAddr)> {
    match next_header {
        NEXT_HEADER_IPV4 => {
            let p = ipv4::Packet::new_checked(inner).ok()?;
            Some((p.src().into(), p.dst().into()))
        }
        NEXT_HEADER_IPV6 => {
            let p = ipv6::Packet::new_checked(inner).ok()?;
            Some((p.src().into(), p.dst().into()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v6(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn prefix_covers_its_range_only() {
        let s = Selector::prefix("fd00:c0::/64".parse().unwrap());
        assert!(s.covers(v6("fd00:c0::")));
        assert!(s.covers(v6("fd00:c0::53")));
        assert!(s.covers(v6("fd00:c0::ffff:ffff:ffff:ffff")));
        assert!(!s.covers(v6("fd00:c0:0:1::")));
        assert!(!s.covers(v6("fd00:bf:ffff:ffff:ffff:ffff:ffff:ffff")));
        assert!(!s.covers(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
    }

    #[test]
    fn single_address_and_family_mismatch() {
        let s = Selector::address(v6("fd00:c1::100"));
        assert!(s.is_single_address());
        assert!(s.covers(v6("fd00:c1::100")));
        assert!(!s.covers(v6("fd00:c1::101")));
        let v4 = Selector::prefix("10.0.0.0/8".parse().unwrap());
        assert!(v4.covers(IpAddr::V4(Ipv4Addr::new(10, 255, 0, 1))));
        assert!(!v4.covers(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        let mixed = Selector {
            start: v6("::"),
            end: IpAddr::V4(Ipv4Addr::BROADCAST),
            protocol: 0,
            ports: 0..=u16::MAX,
        };
        assert!(
            !mixed.covers(v6("::1")),
            "a malformed mixed-family range covers nothing"
        );
    }

    #[test]
    fn inner_addrs_reads_ipv4_and_ipv6() {
        let mut p6 = [0u8; 40];
        ipv6::emit_header(
            &mut p6,
            0,
            59,
            64,
            &"fd00:c1::100".parse().unwrap(),
            &"fd00:c0::53".parse().unwrap(),
        )
        .unwrap();
        assert_eq!(
            inner_addrs(&p6, NEXT_HEADER_IPV6),
            Some((v6("fd00:c1::100"), v6("fd00:c0::53")))
        );
        assert_eq!(inner_addrs(&p6, NEXT_HEADER_IPV4), None, "version mismatch");
        assert_eq!(inner_addrs(&p6[..39], NEXT_HEADER_IPV6), None);
        assert_eq!(inner_addrs(&p6, NEXT_HEADER_DUMMY), None);

        let mut p4 = [0u8; 20];
        p4[0] = 0x45;
        p4[3] = 20;
        p4[12..16].copy_from_slice(&[192, 0, 2, 1]);
        p4[16..20].copy_from_slice(&[10, 0, 0, 7]);
        assert_eq!(
            inner_addrs(&p4, NEXT_HEADER_IPV4),
            Some((
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))
            ))
        );
        assert_eq!(inner_addrs(&p4[..19], NEXT_HEADER_IPV4), None);
    }
}
