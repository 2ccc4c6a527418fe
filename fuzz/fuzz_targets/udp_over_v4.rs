//! `gate64_wire::udp::parse_over_v4` (the load generator's underlay reader) on arbitrary
//! bytes: it never panics, and what it accepts emits back to a packet that parses to the same
//! addresses, ports and payload.
#![no_main]

use gate64_wire::udp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(d) = udp::parse_over_v4(data) else {
        return;
    };
    assert!(d.payload.len() + udp::V4_OVERHEAD <= data.len());
    let mut out = Vec::new();
    udp::emit_over_v4(&mut out, d.src, d.dst, 0, d.payload).expect("a parsed payload fits");
    let again = udp::parse_over_v4(&out).expect("an emitted packet parses");
    assert_eq!(
        (again.src, again.dst, again.payload),
        (d.src, d.dst, d.payload)
    );
});
