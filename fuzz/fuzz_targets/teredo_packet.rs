//! Teredo datagram parsing: headers, the IPv6 view, and an RA when the packet is one.
#![no_main]

use gate64_wire::{icmpv6, ipv6, teredo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = teredo::Packet::parse(data) {
        assert!(p.ipv6_offset + p.ipv6.total_len() <= data.len());
        let _ = (
            p.ipv6.src(),
            p.ipv6.dst(),
            p.ipv6.is_bubble(),
            p.ipv6.payload(),
        );
        if let Ok(ra) = icmpv6::RouterAdvert::parse(&p.ipv6) {
            // Whatever parsed must emit again.
            let mut out = [0u8; 128];
            let _ = ra.emit(&mut out, &p.ipv6.src(), &p.ipv6.dst());
        }
        let _ = icmpv6::type_code(&p.ipv6);
        let _ = icmpv6::checksum_ok(&p.ipv6);
    }
    if let Ok(p) = ipv6::Packet::new_checked(data) {
        assert!(p.total_len() <= data.len());
        let _ = icmpv6::RouterAdvert::parse(&p);
    }
});
