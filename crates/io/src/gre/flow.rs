//! Which TUN queue an inner packet goes to: a hash of its flow, the same both ways.

use super::*;

/// The queue (of `queues`) for an inner IP packet's flow: a hash of its addresses and, for
/// TCP and UDP (unfragmented IPv4, or IPv6 with no extension header first), its ports, the
/// same for both directions of a flow. Unparseable packets go to queue 0.
pub fn flow_queue(packet: &[u8], queues: usize) -> usize {
    if queues <= 1 {
        return 0;
    }
    let Some(h) = flow_hash(packet) else {
        return 0;
    };
    // Fibonacci hashing spreads the XOR's bits over the queue index.
    let mixed = h.wrapping_mul(0x9e37_79b9);
    ((u64::from(mixed) * queues as u64) >> 32) as usize
}

/// The XOR of the packet's address words and, for TCP and UDP, of its two ports: symmetric in
/// source and destination. Headers are read through `wire`'s views (the quoted kind, which
/// needs the headers only, not the whole payload).
fn flow_hash(packet: &[u8]) -> Option<u32> {
    // TCP's header starts with the two ports as UDP's does.
    let ports = |protocol: u8, transport: &[u8]| {
        matches!(protocol, 6 | 17)
            .then(|| udp::peek_ports(transport))
            .flatten()
            .map_or(0, |(src, dst)| u32::from(src ^ dst))
    };
    match packet.first()? >> 4 {
        4 => {
            let p = ipv4::Packet::new_checked_quoted(packet).ok()?;
            let protocol = if p.is_fragment() { 0 } else { p.protocol() };
            Some(u32::from(p.src()) ^ u32::from(p.dst()) ^ ports(protocol, p.payload()))
        }
        6 => {
            let p = ipv6::Packet::new_checked_quoted(packet).ok()?;
            let words = |a: std::net::Ipv6Addr| {
                let s = a.segments();
                (0..4).fold(0u32, |h, i| {
                    h ^ (u32::from(s[2 * i]) << 16 | u32::from(s[2 * i + 1]))
                })
            };
            Some(words(p.src()) ^ words(p.dst()) ^ ports(p.next_header(), p.payload()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::flow_queue;

    /// A TCP/IPv4 header pair 10.64.0.5:`sport` → 172.16.0.5:`dport`.
    fn tcp_v4(sport: u16, dport: u16, swap: bool) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[3] = 40;
        p[9] = 6;
        let (a, b) = ([10, 64, 0, 5], [172, 16, 0, 5]);
        let (src, dst, sp, dp) = if swap {
            (b, a, dport, sport)
        } else {
            (a, b, sport, dport)
        };
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sp.to_be_bytes());
        p[22..24].copy_from_slice(&dp.to_be_bytes());
        p
    }

    #[test]
    fn both_directions_of_a_flow_share_a_queue() {
        for sport in 40_000..40_064 {
            let out = flow_queue(&tcp_v4(sport, 5201, false), 4);
            assert!(out < 4);
            assert_eq!(out, flow_queue(&tcp_v4(sport, 5201, true), 4));
        }
    }

    #[test]
    fn flows_of_one_address_pair_spread_over_the_queues() {
        let mut seen = [0usize; 2];
        for sport in 40_000..40_064 {
            seen[flow_queue(&tcp_v4(sport, 5201, false), 2)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }

    /// A UDP/IPv6 header pair 2001:db8::5:`sport` → 2001:db8:100::5:`dport`.
    fn udp_v6(sport: u16, dport: u16, swap: bool) -> Vec<u8> {
        let mut p = vec![0u8; 48];
        p[0] = 0x60;
        p[5] = 8;
        p[6] = 17;
        let a: std::net::Ipv6Addr = "2001:db8::5".parse().expect("address");
        let b: std::net::Ipv6Addr = "2001:db8:100::5".parse().expect("address");
        let (src, dst, sp, dp) = if swap {
            (b, a, dport, sport)
        } else {
            (a, b, sport, dport)
        };
        p[8..24].copy_from_slice(&src.octets());
        p[24..40].copy_from_slice(&dst.octets());
        p[40..42].copy_from_slice(&sp.to_be_bytes());
        p[42..44].copy_from_slice(&dp.to_be_bytes());
        p
    }

    #[test]
    fn ipv6_flows_share_a_queue_both_ways_and_spread() {
        let mut seen = [0u32; 4];
        for sport in 40000..40064 {
            let out = flow_queue(&udp_v6(sport, 53, false), 4);
            assert_eq!(out, flow_queue(&udp_v6(sport, 53, true), 4));
            seen[out] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }

    #[test]
    fn one_queue_or_garbage_goes_to_queue_0() {
        assert_eq!(flow_queue(&tcp_v4(1, 2, false), 1), 0);
        assert_eq!(flow_queue(&[], 4), 0);
        assert_eq!(flow_queue(&[0x45, 0, 0], 4), 0);
        assert_eq!(flow_queue(&[0x60; 20], 4), 0);
    }
}
