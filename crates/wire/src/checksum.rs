//! The Internet checksum (RFC 1071) and the IPv6 upper-layer pseudo-header (RFC 8200 §8.1).

use std::net::Ipv6Addr;

/// One's-complement sum of `data` folded into 32 bits (not yet complemented).
pub fn sum(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc = acc.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
    }
    if let [last] = chunks.remainder() {
        acc = acc.wrapping_add(u32::from(*last) << 8);
    }
    acc
}

/// Folds a 32-bit accumulator into the final complemented 16-bit checksum.
pub fn finish(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Sum of the IPv6 pseudo-header for an upper-layer payload of `len` bytes.
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, len: u32) -> u32 {
    let mut acc = sum(&src.octets(), 0);
    acc = sum(&dst.octets(), acc);
    acc = acc.wrapping_add(len >> 16).wrapping_add(len & 0xffff);
    acc.wrapping_add(u32::from(next_header))
}

/// Checksum of an upper-layer payload (with its checksum field zeroed) over IPv6.
pub fn upper_layer_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, payload: &[u8]) -> u16 {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    finish(sum(payload, pseudo_header_v6(src, dst, next_header, len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 1071 §3 worked example: 0001 f203 f4f5 f6f7 sums to ddf2 (complement 220d).
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(finish(sum(&data, 0)), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(sum(&[0xab], 0), 0xab00);
    }
}
