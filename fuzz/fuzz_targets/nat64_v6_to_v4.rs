//! NAT64 IPv6→IPv4 translation (RFC 7915 §5) never panics, never writes past `out`, and what
//! it produces is an IPv4 packet of the length it reports.
#![no_main]

use gate64_nat64::translate::{self, Config};
use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, Ipv6Addr};

const SRC4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const DST4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 5);

fuzz_target!(|data: &[u8]| {
    let mut out = [0u8; 1600];
    if let Ok(n) = translate::v6_to_v4(data, SRC4, DST4, &mut out) {
        check(&out, n);
    }
    // Small MTUs and a mapping that accepts any quoted addresses reach the PTB and ICMP
    // error paths more often.
    let cfg = Config {
        ipv4_mtu: 576,
        ipv6_mtu: 1280,
        traffic_class: Some(0x10),
        ..Config::default()
    };
    let map = |s: Ipv6Addr, d: Ipv6Addr| {
        let (s, d) = (s.octets(), d.octets());
        Some((
            Ipv4Addr::new(s[12], s[13], s[14], s[15]),
            Ipv4Addr::new(d[12], d[13], d[14], d[15]),
        ))
    };
    let small = &mut out[..data.len().min(600)];
    if let Ok(n) = translate::v6_to_v4_with(&cfg, data, SRC4, DST4, &map, small) {
        check(small, n);
    }
});

fn check(out: &[u8], n: usize) {
    assert!(n >= 20 && n <= out.len());
    assert_eq!(out[0], 0x45);
    assert_eq!(usize::from(u16::from_be_bytes([out[2], out[3]])), n);
}
