//! NAT64 IPv4→IPv6 translation (RFC 7915 §4), with and without IPv6 fragmentation, never
//! panics, never writes past `out`, and what it produces are IPv6 packets of the lengths it
//! reports.
#![no_main]

use gate64_nat64::translate::{self, Config};
use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, Ipv6Addr};

const SRC6: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0xc633, 0x6405);
const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5);

fuzz_target!(|data: &[u8]| {
    let mut out = [0u8; 1600];
    if let Ok(n) = translate::v4_to_v6(data, SRC6, DST6, &mut out) {
        check(&out, n);
    }
    // Jumbo MTUs, zero UDP checksums refused, and a mapping for any quoted addresses.
    let cfg = Config {
        ipv4_mtu: 9000,
        ipv6_mtu: 9000,
        lowest_ipv6_mtu: 9000,
        compute_udp_zero_checksum: false,
        ..Config::default()
    };
    let map = |s: Ipv4Addr, d: Ipv4Addr| {
        let p = gate64_nat64::Prefix::WELL_KNOWN.allow_private(true);
        Some((p.embed(s)?, p.embed(d)?))
    };
    let small = &mut out[..data.len().min(1400)];
    if let Ok(n) = translate::v4_to_v6_with(&cfg, data, SRC6, DST6, &map, small) {
        check(small, n);
    }
    // A low IPv6 limit makes most packets without DF go through fragmentation.
    let cfg = Config {
        lowest_ipv6_mtu: 200,
        ..Config::default()
    };
    let mut lens = [0usize; 16];
    if let Ok(k) = translate::v4_to_v6_fragments(&cfg, data, SRC6, DST6, &map, &mut out, &mut lens)
    {
        let mut at = 0;
        for &n in &lens[..k] {
            assert!(n <= 200 || k == 1);
            check(&out[at..], n);
            at += n;
        }
    }
});

fn check(out: &[u8], n: usize) {
    assert!(n >= 40 && n <= out.len());
    assert_eq!(out[0] >> 4, 6);
    assert_eq!(usize::from(u16::from_be_bytes([out[4], out[5]])) + 40, n);
}
