//! The Internet checksum (RFC 1071), its incremental update (RFC 1624) and the IPv4 and IPv6
//! upper-layer pseudo-headers (RFC 768, RFC 793, RFC 8200 §8.1). The one checksum module of
//! gate64: the translator, the TUN offload and every emitter use these folds.

use std::net::{Ipv4Addr, Ipv6Addr};

/// One's-complement sum of `data` (16-bit big-endian words, an odd last byte padded with
/// zero) added to `acc`, folded to at most 0xffff and not complemented, so callers can add
/// a few such sums and lengths in a `u32` before [`finish`].
///
/// Adds 32-bit words in the machine's own byte order into a 64-bit accumulator and swaps the
/// folded 16-bit result into network order once at the end (RFC 1071 §2 (B): the sum is
/// independent of byte order up to that final swap). Since 2^16 ≡ 1 in one's-complement
/// arithmetic, 32-bit words give the same sum as 16-bit ones; without a byte swap per word the
/// loop is a plain widening add the compiler vectorizes (this runs over every byte of each
/// ESP-in-UDP datagram sealed towards a client and of every TUN super-packet split).
#[inline]
pub fn sum(data: &[u8], acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(4);
    let mut wide: u64 = (&mut chunks)
        .map(|c| u64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
        .sum();
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut tail = [0u8; 4];
        tail[..rest.len()].copy_from_slice(rest);
        wide += u64::from(u32::from_ne_bytes(tail));
    }
    // Four fixed folding steps, no loop: < 2^33, < 2^18, < 2^16 + 4, then at most 0xffff.
    let w = (wide & 0xffff_ffff) + (wide >> 32);
    let w = (w & 0xffff) + (w >> 16);
    let w = (w & 0xffff) + (w >> 16);
    let native = ((w & 0xffff) + (w >> 16)) as u16;
    // The folded sum in network order plus the caller's accumulator (< 2^18), folded twice:
    // < 2^16 + 4, then at most 0xffff.
    let net = u32::from(u16::from_be_bytes(native.to_ne_bytes()));
    let acc = (acc & 0xffff) + (acc >> 16) + net;
    let acc = (acc & 0xffff) + (acc >> 16);
    (acc & 0xffff) + (acc >> 16)
}

/// Folds a 32-bit accumulator to 16 bits without complementing it (the form a
/// `CHECKSUM_PARTIAL` field and RFC 1624's `m` take).
#[inline]
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Folds a 32-bit accumulator into the final complemented 16-bit checksum.
#[inline]
pub fn finish(acc: u32) -> u16 {
    !fold(acc)
}

/// The value a computed UDP checksum `c` goes out as: 0 means "no checksum" in UDP (RFC 768),
/// which IPv6 forbids (RFC 8200 §8.1) and which a NAT64 cannot adjust, so a computed 0 is sent
/// as 0xffff, its other one's-complement form (as the kernel's CSUM_MANGLED_0). For TCP and
/// ICMP the two forms are the same value and need no such step.
#[inline]
pub fn udp_field(c: u16) -> u16 {
    if c == 0 { 0xffff } else { c }
}

/// RFC 1624 eqn. 3: the checksum `hc` updated for data whose sum went from `remove` to `add`
/// (both unfolded sums): HC' = ~(~HC + ~m + m').
#[inline]
pub fn adjust(hc: u16, remove: u32, add: u32) -> u16 {
    let acc = u32::from(!hc) + u32::from(!fold(remove)) + u32::from(fold(add));
    finish(acc)
}

/// Sum of the IPv6 pseudo-header for an upper-layer payload of `len` bytes.
#[inline]
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, len: u32) -> u32 {
    let acc = sum(&dst.octets(), sum(&src.octets(), 0));
    acc + (len >> 16) + (len & 0xffff) + u32::from(next_header)
}

/// Sum of the IPv4 pseudo-header (RFC 793 §3.1, RFC 768) for a payload of `len` bytes.
#[inline]
pub fn pseudo_header_v4(src: &Ipv4Addr, dst: &Ipv4Addr, protocol: u8, len: u16) -> u32 {
    let acc = sum(&dst.octets(), sum(&src.octets(), 0));
    acc + u32::from(len) + u32::from(protocol)
}

/// Sum of two IPv6 addresses: what a translator removes from or adds to a pseudo-header.
#[inline]
pub fn addr_sum_v6(a: &Ipv6Addr, b: &Ipv6Addr) -> u32 {
    sum(&b.octets(), sum(&a.octets(), 0))
}

/// Sum of two IPv4 addresses.
#[inline]
pub fn addr_sum_v4(a: &Ipv4Addr, b: &Ipv4Addr) -> u32 {
    sum(&b.octets(), sum(&a.octets(), 0))
}

/// Checksum of an upper-layer payload (with its checksum field zeroed) over IPv6.
#[inline]
pub fn upper_layer_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, payload: &[u8]) -> u16 {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    finish(sum(payload, pseudo_header_v6(src, dst, next_header, len)))
}

/// Checksum of an upper-layer payload (with its checksum field zeroed) over IPv4.
#[inline]
pub fn upper_layer_v4(src: &Ipv4Addr, dst: &Ipv4Addr, protocol: u8, payload: &[u8]) -> u16 {
    let len = u16::try_from(payload.len()).unwrap_or(u16::MAX);
    finish(sum(payload, pseudo_header_v4(src, dst, protocol, len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_computed_udp_zero_goes_out_as_its_other_form() {
        assert_eq!(udp_field(0), 0xffff);
        assert_eq!(udp_field(0xffff), 0xffff);
        assert_eq!(udp_field(0x220d), 0x220d);
    }

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

    /// The word-at-a-time fold of RFC 1071 §4.1, as the reference.
    fn words(data: &[u8], acc: u32) -> u16 {
        let acc = data.chunks(2).fold(u64::from(acc), |a, c| {
            a + u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
        });
        let mut a = acc;
        while a > 0xffff {
            a = (a & 0xffff) + (a >> 16);
        }
        a as u16
    }

    // RFC 1624 §4 example: HC 0xdd2f, a field going from 0x5555 to 0x3285 gives 0x0000
    // (eqn. 3; eqn. 2 would give the -0 form 0xffff).
    #[test]
    fn rfc1624_4_example() {
        assert_eq!(adjust(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    proptest! {
        #[test]
        fn wide_sum_matches_the_word_sum(
            data in proptest::collection::vec(any::<u8>(), 0..2000),
            acc in any::<u32>(),
        ) {
            let s = sum(&data, acc);
            prop_assert!(s <= 0xffff, "not folded: {:#x}", s);
            prop_assert_eq!(s as u16, words(&data, acc));
        }

        #[test]
        fn adjust_matches_recomputing(
            mut data in proptest::collection::vec(any::<u8>(), 2..200),
            at in any::<prop::sample::Index>(),
            new in any::<u16>(),
        ) {
            let at = at.index(data.len() / 2) * 2;
            let before = finish(sum(&data, 0));
            let old = u16::from_be_bytes([data[at], data[at + 1]]);
            data[at..at + 2].copy_from_slice(&new.to_be_bytes());
            let after = finish(sum(&data, 0));
            let inc = adjust(before, u32::from(old), u32::from(new));
            // Both forms of zero are the same one's-complement value.
            prop_assert!(inc == after || (inc | after == 0xffff && inc & after == 0));
        }
    }
}
