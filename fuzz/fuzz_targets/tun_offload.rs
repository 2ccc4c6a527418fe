//! TUN offload (gate64-wire `offload`): planning coalesced writes from arbitrary packets and
//! splitting arbitrary reads never panics; every packet is written exactly once; a coalesced
//! write splits back into as many packets as it carries.
//! Input: `[selector][records: len byte, bytes]`. Selector bit 0: also try `split_into` on the
//! raw input, and the split into a worker's slots (`split_to` with `Slots`, as small as the
//! selector's high bits say), which must agree with it packet for packet when both succeed.
//! Packets whose first byte is even get a valid-looking IPv6/TCP prefix, so runs form often
//! enough to reach the coalescing code.
#![no_main]

use gate64_wire::offload::{Slots, VNET_HDR_LEN, for_each_write, split_into, split_to};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    if sel & 1 != 0 {
        let mut out = Vec::new();
        let stream = split_into(rest, &mut out);
        let (count, slot) = (usize::from(sel >> 4) + 1, 64 << (sel >> 1 & 7));
        let mut bufs = vec![vec![0u8; slot]; count];
        let mut sizes = vec![0usize; count];
        let mut slots = Slots::new(&mut bufs, &mut sizes, 8);
        if let (Ok(n), Ok(m)) = (stream, split_to(rest, &mut slots)) {
            assert_eq!(n, m);
            let joined: Vec<u8> = (0..m)
                .flat_map(|k| bufs[k][8..8 + sizes[k]].to_vec())
                .collect();
            assert_eq!(joined, out, "slots and stream hold the same packets");
        }
    }
    let mut owned: Vec<Vec<u8>> = Vec::new();
    while let [len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let mut p = tail[..n].to_vec();
        rest = &tail[n..];
        if p.first().is_some_and(|b| b % 2 == 0) && p.len() >= 60 {
            // IPv6, TCP, payload length consistent, 20-byte TCP header, ACK only.
            let plen = (p.len() - 40) as u16;
            p[0] = 0x60;
            p[4..6].copy_from_slice(&plen.to_be_bytes());
            p[6] = 6;
            p[52] = 5 << 4;
            p[53] = 0x10;
        }
        owned.push(p);
    }
    let packets: Vec<&[u8]> = owned.iter().map(|p| &p[..]).collect();
    let mut written = 0;
    for_each_write(&packets, |parts, n| {
        assert!(n >= 1 && parts.len() >= 2 && parts.len() <= 65);
        written += n;
        if n > 1 {
            let raw: Vec<u8> = parts.concat();
            assert!(raw.len() <= VNET_HDR_LEN + 65_535);
            let mut out = Vec::new();
            assert_eq!(
                split_into(&raw, &mut out),
                Ok(n),
                "a coalesced write splits back"
            );
        }
    });
    assert_eq!(written, packets.len());
});
