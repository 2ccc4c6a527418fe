//! Upper-layer rewrites of a translated packet (RFC 7915 §4.5, §5.5 checksums; §4.2, §5.2
//! echo types), in place on the first fragment or whole packet.

use super::{Config, TranslateError};
use gate64_wire::checksum::{self, addr_sum_v4, addr_sum_v6, adjust};
use gate64_wire::{icmpv4, icmpv6, ipv4, ipv6, tcp, udp};
use std::net::{Ipv4Addr, Ipv6Addr};

const TCP_CSUM: usize = tcp::field::CHECKSUM.start;
const UDP_CSUM: usize = udp::field::CHECKSUM.start;
const ICMP_CSUM: usize = icmpv4::field::CHECKSUM.start;
const ICMP_HDR: usize = icmpv4::HEADER_LEN;

fn read16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Applies `f` to the 16-bit field at `at` if the buffer holds it (a quoted packet may be
/// cut short of its checksum).
fn update16(b: &mut [u8], at: usize, f: impl FnOnce(u16) -> u16) {
    if let Some(v) = read16(b, at) {
        b[at..at + 2].copy_from_slice(&f(v).to_be_bytes());
    }
}

/// RFC 768: a computed 0 is sent as all ones; 0 itself means "no checksum".
fn udp_nonzero(c: u16) -> u16 {
    if c == 0 { 0xffff } else { c }
}

/// Sum of the ICMPv6 pseudo-header (RFC 4443 §2.3) for a message of `len` bytes.
pub(crate) fn icmp6_pseudo(src: Ipv6Addr, dst: Ipv6Addr, len: usize) -> u32 {
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    checksum::pseudo_header_v6(&src, &dst, ipv6::NH_ICMPV6, len)
}

/// Rewrites the upper-layer header `u` (first fragment or whole packet) from IPv6 to IPv4:
/// TCP/UDP checksums incrementally (RFC 7915 §5.5), ICMPv6 echo to ICMPv4 echo (§5.2).
/// `v6` = (src, dst, upper-layer length), `v4` = (src, dst).
pub(crate) fn fix_upper_6to4(
    u: &mut [u8],
    proto: u8,
    whole: bool,
    v6: (Ipv6Addr, Ipv6Addr, usize),
    v4: (Ipv4Addr, Ipv4Addr),
) -> Result<(), TranslateError> {
    let (remove, add) = (addr_sum_v6(&v6.0, &v6.1), addr_sum_v4(&v4.0, &v4.1));
    match proto {
        ipv4::PROTO_TCP => update16(u, TCP_CSUM, |c| adjust(c, remove, add)),
        ipv4::PROTO_UDP => update16(u, UDP_CSUM, |c| udp_nonzero(adjust(c, remove, add))),
        ipv6::NH_ICMPV6 => {
            if !whole {
                // The pseudo-header length is that of the whole datagram, unknown here.
                return Err(TranslateError::Unsupported);
            }
            let t = match u.first() {
                Some(&icmpv6::TYPE_ECHO_REQUEST) => icmpv4::TYPE_ECHO_REQUEST,
                Some(&icmpv6::TYPE_ECHO_REPLY) => icmpv4::TYPE_ECHO_REPLY,
                _ => return Err(TranslateError::Untranslatable),
            };
            if u.len() < ICMP_HDR {
                return Err(TranslateError::Truncated);
            }
            let remove = icmp6_pseudo(v6.0, v6.1, v6.2) + (u32::from(u[0]) << 8);
            u[0] = t;
            update16(u, ICMP_CSUM, |c| adjust(c, remove, u32::from(t) << 8));
        }
        _ => {}
    }
    Ok(())
}

/// IPv4→IPv6 counterpart of [`fix_upper_6to4`] (RFC 7915 §4.5, §4.2). `v6` = (src, dst,
/// upper-layer length from the IPv4 Total Length).
pub(crate) fn fix_upper_4to6(
    cfg: &Config,
    u: &mut [u8],
    proto: u8,
    whole: bool,
    v4: (Ipv4Addr, Ipv4Addr),
    v6: (Ipv6Addr, Ipv6Addr, usize),
) -> Result<(), TranslateError> {
    let (remove, add) = (addr_sum_v4(&v4.0, &v4.1), addr_sum_v6(&v6.0, &v6.1));
    match proto {
        ipv4::PROTO_TCP => update16(u, TCP_CSUM, |c| adjust(c, remove, add)),
        ipv4::PROTO_UDP => match read16(u, UDP_CSUM) {
            Some(0) => {
                // RFC 7915 §4.5: IPv6 forbids a zero UDP checksum.
                if !whole || !cfg.compute_udp_zero_checksum {
                    return Err(TranslateError::UdpZeroChecksum);
                }
                let c = udp_checksum_v6(u, v6.0, v6.1);
                u[udp::field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
            }
            Some(_) => update16(u, UDP_CSUM, |c| udp_nonzero(adjust(c, remove, add))),
            None => {}
        },
        ipv4::PROTO_ICMP => {
            if !whole {
                return Err(TranslateError::Unsupported);
            }
            let t = match u.first() {
                Some(&icmpv4::TYPE_ECHO_REQUEST) => icmpv6::TYPE_ECHO_REQUEST,
                Some(&icmpv4::TYPE_ECHO_REPLY) => icmpv6::TYPE_ECHO_REPLY,
                _ => return Err(TranslateError::Untranslatable),
            };
            if u.len() < ICMP_HDR {
                return Err(TranslateError::Truncated);
            }
            let add = icmp6_pseudo(v6.0, v6.1, v6.2) + (u32::from(t) << 8);
            let remove = u32::from(u[0]) << 8;
            u[0] = t;
            update16(u, ICMP_CSUM, |c| adjust(c, remove, add));
        }
        _ => {}
    }
    Ok(())
}

/// The UDP checksum over IPv6 of the whole datagram `datagram` (its checksum field zero),
/// never 0 (RFC 7915 §4.5, RFC 768).
pub(crate) fn udp_checksum_v6(datagram: &[u8], src: Ipv6Addr, dst: Ipv6Addr) -> u16 {
    udp_nonzero(checksum::upper_layer_v6(
        &src,
        &dst,
        ipv4::PROTO_UDP,
        datagram,
    ))
}
