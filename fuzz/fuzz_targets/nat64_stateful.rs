//! The stateful NAT64 engine (RFC 6146 tables + in-place RFC 7915 translation + port rewrite)
//! never panics and keeps its output inside the buffer, over a sequence of packets in both
//! directions (so later packets meet the sessions earlier ones created). Input: records of
//! `[direction byte][length byte][packet bytes]`; the destination address of each packet is
//! forced into Pref64 (IPv6) or pool4 (IPv4) so the table code, not just the parser, runs.
#![no_main]

use gate64_nat64::{Nat64, Prefix, Settings, state, translate};
use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

const POOL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HEAD: usize = 64;

fuzz_target!(|data: &[u8]| {
    let mut table = state::Config::new(vec![POOL]);
    table.shards = 2;
    table.ports = (61000, 61200);
    table.max_sessions = 64;
    let Ok(prefix) = Prefix::new(Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0, 0), 96) else {
        return;
    };
    let Ok(nat) = Nat64::new(Settings {
        prefix,
        table,
        translate: translate::Config {
            ipv4_mtu: 576,
            ..translate::Config::default()
        },
    }) else {
        return;
    };
    let start = Instant::now();
    let mut rest = data;
    let mut step = 0u64;
    let mut buf = [0u8; HEAD + 1600];
    let mut scratch = [0u8; 1600];
    while let [dir, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (pkt, next) = tail.split_at(n);
        rest = next;
        step += 1;
        let now = start + Duration::from_secs(step * 7);
        buf.fill(0);
        buf[HEAD..HEAD + n].copy_from_slice(pkt);
        let r = if dir & 1 == 0 {
            if n >= 40 {
                buf[HEAD] = 0x60 | (buf[HEAD] & 0x0f);
                buf[HEAD + 24..HEAD + 36].copy_from_slice(&prefix.addr().octets()[..12]);
            }
            nat.v6_to_v4(now, &mut buf, HEAD, HEAD + n, &mut scratch)
        } else {
            if n >= 20 {
                buf[HEAD] = 0x45;
                buf[HEAD + 16..HEAD + 20].copy_from_slice(&POOL.octets());
            }
            nat.v4_to_v6(now, &mut buf, HEAD, HEAD + n, &mut scratch)
        };
        if let Ok(t) = r {
            assert!(t.start <= t.end && t.end <= buf.len());
            let v = buf[t.start] >> 4;
            assert!(v == 4 || v == 6, "version {v}");
        }
        if dir & 2 != 0 {
            nat.handle_timeout(now, 0, 1);
        }
    }
    let s = nat.stats();
    assert!(s.sessions <= 64);
});
