//! The outer headers of a GRE packet written as a whole frame (the data path's packet-socket
//! sender): Ethernet, then IPv4 (with its header checksum) or the IPv6 fixed header, built in
//! place in the headroom before the GRE header, as the kernel's IP output would have.

use std::net::IpAddr;

use gate64_wire::{checksum, gre::IP_PROTOCOL};

/// Bytes of an Ethernet header (no VLAN tag).
pub const ETHERNET_LEN: usize = 14;
/// The largest outer header built here: Ethernet and the IPv6 fixed header.
pub const MAX_LEN: usize = ETHERNET_LEN + 40;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// TTL / hop limit of the outer header (Linux's default, what the raw socket sends with).
pub const TTL: u8 = 64;

/// One tunnel's frame header fields: its outer addresses and the link-layer addresses of the
/// hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Outer source (the tunnel's local address).
    pub src: IpAddr,
    /// Outer destination (the peer).
    pub dst: IpAddr,
    /// The outgoing interface's address.
    pub src_mac: [u8; 6],
    /// The next hop's address.
    pub dst_mac: [u8; 6],
}

impl Frame {
    /// The EtherType of the frames.
    pub fn ethertype(&self) -> u16 {
        if self.src.is_ipv4() {
            ETHERTYPE_IPV4
        } else {
            ETHERTYPE_IPV6
        }
    }

    /// Writes the Ethernet and outer IP headers before the GRE packet `buf[start..end]` and
    /// returns where the frame starts, or `None` when the headroom is too small, the GRE
    /// packet too long for the IP header's length field, or the addresses of mixed families.
    /// `ident` is the IPv4 identification (the IPv4 header has DF set, as the kernel's
    /// raw socket sends with path MTU discovery).
    pub fn prepend(&self, buf: &mut [u8], start: usize, end: usize, ident: u16) -> Option<usize> {
        let payload = end.checked_sub(start)?;
        if end > buf.len() {
            return None;
        }
        let ip_start = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let at = start.checked_sub(20)?;
                let total = u16::try_from(payload + 20).ok()?;
                let h = &mut buf[at..start];
                h[0] = 0x45;
                h[1] = 0;
                h[2..4].copy_from_slice(&total.to_be_bytes());
                h[4..6].copy_from_slice(&ident.to_be_bytes());
                h[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
                h[8] = TTL;
                h[9] = IP_PROTOCOL;
                h[10..12].copy_from_slice(&[0, 0]);
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                let c = checksum::finish(checksum::sum(h, 0));
                h[10..12].copy_from_slice(&c.to_be_bytes());
                at
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let at = start.checked_sub(40)?;
                let len = u16::try_from(payload).ok()?;
                let h = &mut buf[at..start];
                h[0..4].copy_from_slice(&0x6000_0000u32.to_be_bytes());
                h[4..6].copy_from_slice(&len.to_be_bytes());
                h[6] = IP_PROTOCOL;
                h[7] = TTL;
                h[8..24].copy_from_slice(&s.octets());
                h[24..40].copy_from_slice(&d.octets());
                at
            }
            _ => return None,
        };
        let at = ip_start.checked_sub(ETHERNET_LEN)?;
        let e = &mut buf[at..ip_start];
        e[0..6].copy_from_slice(&self.dst_mac);
        e[6..12].copy_from_slice(&self.src_mac);
        e[12..14].copy_from_slice(&self.ethertype().to_be_bytes());
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
    const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

    fn frame(src: &str, dst: &str) -> Frame {
        Frame {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            src_mac: SRC_MAC,
            dst_mac: DST_MAC,
        }
    }

    /// The IPv4 header matches one written out by hand, checksum included (the sum of the
    /// header with its checksum is 0xffff).
    #[test]
    fn ipv4_header_and_checksum() {
        let mut buf = vec![0xaau8; 64 + 8];
        let f = frame("203.0.113.1", "203.0.113.2");
        let at = f.prepend(&mut buf, 64, 72, 0x1234).unwrap();
        assert_eq!(at, 64 - 20 - 14);
        let expected_eth = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        assert_eq!(buf[at..at + 14], expected_eth);
        // 45 00 001c 1234 4000 40 2f cksum cb007101 cb007102: the checksum by hand is
        // !(0x4500 + 0x001c + 0x1234 + 0x4000 + 0x402f + 0xcb00 + 0x7101 + 0xcb00 + 0x7102)
        // = !(0x3_4f82 folded to 0x4f85) = 0xb07a.
        let expected_ip = [
            0x45, 0, 0, 28, 0x12, 0x34, 0x40, 0, 64, 47, 0xb0, 0x7a, 203, 0, 113, 1, 203, 0, 113, 2,
        ];
        assert_eq!(buf[at + 14..at + 34], expected_ip);
        let p = gate64_wire::ipv4::Packet::new_checked(&buf[at + 14..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(usize::from(p.total_len()), 28);
        assert_eq!(buf[64..], [0xaa; 8]);
    }

    #[test]
    fn ipv6_fixed_header() {
        let mut buf = vec![0u8; 100];
        let f = frame("2001:db8::1", "2001:db8::2");
        let at = f.prepend(&mut buf, 60, 100, 7).unwrap();
        assert_eq!(at, 60 - 40 - 14);
        assert_eq!(buf[at + 12..at + 14], [0x86, 0xdd]);
        let h = &buf[at + 14..60];
        assert_eq!(h[..8], [0x60, 0, 0, 0, 0, 40, 47, 64]);
        let mut src = [0u8; 16];
        src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        src[15] = 1;
        assert_eq!(h[8..24], src);
        src[15] = 2;
        assert_eq!(h[24..40], src);
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let f = frame("203.0.113.1", "203.0.113.2");
        let mut buf = vec![0u8; 100];
        assert_eq!(f.prepend(&mut buf, 33, 40, 0), None);
        assert_eq!(f.prepend(&mut buf, 60, 101, 0), None);
        assert_eq!(f.prepend(&mut buf, 60, 50, 0), None);
        let mixed = frame("203.0.113.1", "2001:db8::2");
        assert_eq!(mixed.prepend(&mut buf, 60, 100, 0), None);
        let mut big = vec![0u8; 70_000];
        assert_eq!(f.prepend(&mut big, 60, 70_000, 0), None);
    }
}
