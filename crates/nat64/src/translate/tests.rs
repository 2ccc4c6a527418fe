use super::*;
use gate64_wire::checksum;
use proptest::prelude::*;

const PROTO_ICMP: u8 = ipv4::PROTO_ICMP;
const PROTO_TCP: u8 = ipv4::PROTO_TCP;
const PROTO_UDP: u8 = ipv4::PROTO_UDP;
const NH_HOP_BY_HOP: u8 = ipv6::NH_HOP_BY_HOP;
const NH_ROUTING: u8 = ipv6::NH_ROUTING;
const NH_FRAGMENT: u8 = ipv6::NH_FRAGMENT;
const NH_ICMPV6: u8 = ipv6::NH_ICMPV6;
const NH_DEST_OPTS: u8 = ipv6::NH_DEST_OPTS;
const ICMPV4_ECHO_REPLY: u8 = icmpv4::TYPE_ECHO_REPLY;
const ICMPV4_ECHO_REQUEST: u8 = icmpv4::TYPE_ECHO_REQUEST;
const ICMPV6_ECHO_REQUEST: u8 = icmpv6::TYPE_ECHO_REQUEST;
const ICMPV6_ECHO_REPLY: u8 = icmpv6::TYPE_ECHO_REPLY;

fn addr_sum4(a: Ipv4Addr, b: Ipv4Addr) -> u32 {
    checksum::addr_sum_v4(&a, &b)
}

// Jool's graybox network (doc §5): n6 2001:db8::5, n4 192.0.2.5 as 64:ff9b::c000:205,
// the translator's pool4 192.0.2.2.
const N6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5);
const N4_AS_V6: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0xc000, 0x0205);
const POOL4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const N4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 5);
const ROUTER4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const ROUTER6: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0xcb00, 0x7101);

// --- builders -----------------------------------------------------------------------------

fn udp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    u
}

fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(data);
    t
}

fn icmp(t: u8, c: u8, rest: [u8; 4], data: &[u8]) -> Vec<u8> {
    let mut m = vec![t, c, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(data);
    m
}

fn csum_at(proto: u8) -> Option<usize> {
    match proto {
        PROTO_TCP => Some(16),
        PROTO_UDP => Some(6),
        PROTO_ICMP | NH_ICMPV6 => Some(2),
        _ => None,
    }
}

/// IPv6 packet; `ext` = extension headers (chained by the caller, last one's next header
/// = `proto`); the upper-layer checksum is filled in when `proto` has one.
#[allow(clippy::too_many_arguments)]
fn v6pkt(
    tc: u8,
    hop: u8,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    first_nh: u8,
    ext: &[u8],
    proto: u8,
    upper: &[u8],
) -> Vec<u8> {
    let mut up = upper.to_vec();
    if let Some(at) = csum_at(proto).filter(|&at| up.len() >= at + 2) {
        up[at..at + 2].fill(0);
        let c = checksum::upper_layer_v6(&src, &dst, proto, &up);
        let c = if c == 0 && proto == PROTO_UDP {
            0xffff
        } else {
            c
        };
        up[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    let mut p = vec![0x60 | (tc >> 4), tc << 4, 0, 0];
    p.extend_from_slice(&((ext.len() + up.len()) as u16).to_be_bytes());
    p.push(first_nh);
    p.push(hop);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(ext);
    p.extend_from_slice(&up);
    p
}

fn simple6(hop: u8, src: Ipv6Addr, dst: Ipv6Addr, proto: u8, upper: &[u8]) -> Vec<u8> {
    v6pkt(0, hop, src, dst, proto, &[], proto, upper)
}

fn pseudo4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> u32 {
    addr_sum4(src, dst) + u32::from(proto) + len as u32
}

/// IPv4 packet with header and upper-layer checksums filled (`ff` = flags and offset).
#[allow(clippy::too_many_arguments)]
fn v4pkt(
    tos: u8,
    ttl: u8,
    id: u16,
    ff: u16,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    opts: &[u8],
    upper: &[u8],
) -> Vec<u8> {
    let mut up = upper.to_vec();
    if let Some(at) = csum_at(proto).filter(|&at| up.len() >= at + 2) {
        up[at..at + 2].fill(0);
        let ps = if proto == PROTO_ICMP {
            0
        } else {
            pseudo4(src, dst, proto, up.len())
        };
        let c = checksum::finish(checksum::sum(&up, ps));
        let c = if c == 0 && proto == PROTO_UDP {
            0xffff
        } else {
            c
        };
        up[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    let ihl = 20 + opts.len();
    let mut p = vec![0x40 | (ihl / 4) as u8, tos];
    p.extend_from_slice(&((ihl + up.len()) as u16).to_be_bytes());
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&ff.to_be_bytes());
    p.extend_from_slice(&[ttl, proto, 0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(opts);
    let c = checksum::finish(checksum::sum(&p, 0));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&up);
    p
}

fn simple4(ttl: u8, src: Ipv4Addr, dst: Ipv4Addr, proto: u8, upper: &[u8]) -> Vec<u8> {
    v4pkt(0, ttl, 0x1234, 0, src, dst, proto, &[], upper)
}

/// (type, code) in, (type, code) out or dropped.
type TypeCodeCase = ((u8, u8), Option<(u8, u8)>);

// --- from-scratch verification -----------------------------------------------------------

/// IPv4 header checksum, and for whole packets the TCP/UDP/ICMP checksum.
fn check_v4(p: &[u8]) {
    let h = parse_v4(p, false).expect("valid IPv4");
    assert_eq!(checksum::finish(checksum::sum(&p[..h.ihl], 0)), 0, "header");
    if h.is_fragment() {
        return;
    }
    let (s, d) = v4_addrs(p);
    let up = &p[h.ihl..h.total];
    let ps = match h.proto {
        PROTO_TCP | PROTO_UDP => pseudo4(s, d, h.proto, up.len()),
        PROTO_ICMP => 0,
        _ => return,
    };
    assert_eq!(
        checksum::finish(checksum::sum(up, ps)),
        0,
        "upper {}",
        h.proto
    );
}

/// TCP/UDP/ICMPv6 checksum of a whole IPv6 packet.
fn check_v6(p: &[u8]) {
    let h = parse_v6(p, false).expect("valid IPv6");
    if h.frag.is_some() {
        return;
    }
    let (s, d) = v6_addrs(p);
    let up = &p[h.off..];
    if matches!(h.proto, PROTO_TCP | PROTO_UDP | NH_ICMPV6) {
        let c = checksum::upper_layer_v6(&s, &d, h.proto, up);
        assert_eq!(c, 0, "upper {}", h.proto);
    }
}

fn t64(p: &[u8]) -> Result<Vec<u8>, TranslateError> {
    t64_with(&Config::default(), p)
}

fn t64_with(cfg: &Config, p: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let mut out = [0u8; 70_000];
    let map = |s: Ipv6Addr, d: Ipv6Addr| Some((sip4(s)?, sip4(d)?));
    let (s, d) = v6_addrs(p);
    let (s4, d4) = (sip4(s).unwrap(), sip4(d).unwrap());
    let n = v6_to_v4_with(cfg, p, s4, d4, &map, &mut out)?;
    check_v4(&out[..n]);
    Ok(out[..n].to_vec())
}

fn t46(p: &[u8]) -> Result<Vec<u8>, TranslateError> {
    t46_with(&Config::default(), p)
}

fn t46_with(cfg: &Config, p: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let mut out = [0u8; 70_000];
    let map = |s: Ipv4Addr, d: Ipv4Addr| Some((sip6(s), sip6(d)));
    let (s, d) = v4_addrs(p);
    let n = v4_to_v6_with(cfg, p, sip6(s), sip6(d), &map, &mut out)?;
    check_v6(&out[..n]);
    Ok(out[..n].to_vec())
}

/// The test network's static mapping: 2001:db8::5 ↔ 192.0.2.2, 64:ff9b::/96 otherwise.
fn sip4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    if a == N6 {
        return Some(POOL4);
    }
    crate::Prefix::WELL_KNOWN.allow_private(true).extract(&a)
}

fn sip6(a: Ipv4Addr) -> Ipv6Addr {
    if a == POOL4 {
        return N6;
    }
    crate::Prefix::WELL_KNOWN
        .allow_private(true)
        .embed(a)
        .unwrap()
}

/// Replaces the IPv4 identification (derived from contents when DF is clear) and fixes
/// the header checksum, so packets can be compared byte for byte.
fn with_id(mut p: Vec<u8>, id: u16) -> Vec<u8> {
    p[4..6].copy_from_slice(&id.to_be_bytes());
    p[10..12].fill(0);
    let c = checksum::finish(checksum::sum(&p[..20], 0));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

fn id_of(p: &[u8]) -> u16 {
    u16::from_be_bytes([p[4], p[5]])
}

// --- RFC 7915 §5.1 / §4.1 header fields ---------------------------------------------------

#[test]
fn rfc7915_5_1_udp_fields() {
    let p6 = v6pkt(
        0xb8,
        64,
        N6,
        N4_AS_V6,
        PROTO_UDP,
        &[],
        PROTO_UDP,
        &udp(2000, 53, b"q"),
    );
    let p4 = t64(&p6).unwrap();
    let want = v4pkt(
        0xb8,
        63,
        0,
        0,
        POOL4,
        N4,
        PROTO_UDP,
        &[],
        &udp(2000, 53, b"q"),
    );
    assert_eq!(with_id(p4.clone(), 0), want);
    // A literal check of the header fields too.
    assert_eq!(&p4[..4], &[0x45, 0xb8, 0x00, 29]);
    assert_eq!(&p4[6..10], &[0, 0, 63, 17]);
    assert_eq!(&p4[12..20], &[192, 0, 2, 2, 192, 0, 2, 5]);
}

#[test]
fn rfc7915_4_1_udp_fields() {
    let p4 = v4pkt(
        0x2e,
        64,
        7,
        0x4000,
        N4,
        POOL4,
        PROTO_UDP,
        &[],
        &udp(53, 2000, b"ans"),
    );
    let p6 = t46(&p4).unwrap();
    let want = v6pkt(
        0x2e,
        63,
        N4_AS_V6,
        N6,
        PROTO_UDP,
        &[],
        PROTO_UDP,
        &udp(53, 2000, b"ans"),
    );
    assert_eq!(p6, want);
    assert_eq!(&p6[..8], &[0x62, 0xe0, 0, 0, 0, 11, 17, 63]);
}

#[test]
fn rfc7915_5_5_tcp_both_ways() {
    let seg = tcp(40000, 443, 0xdead_beef, 0x02, b"hello");
    let p6 = simple6(10, N6, N4_AS_V6, PROTO_TCP, &seg);
    let p4 = t64(&p6).unwrap();
    assert_eq!(
        with_id(p4.clone(), 0),
        v4pkt(0, 9, 0, 0, POOL4, N4, PROTO_TCP, &[], &seg)
    );
    let back = simple4(9, N4, POOL4, PROTO_TCP, &seg);
    assert_eq!(
        t46(&back).unwrap(),
        simple6(8, N4_AS_V6, N6, PROTO_TCP, &seg)
    );
}

#[test]
fn rfc7915_5_2_echo_both_ways() {
    let e6 = icmp(ICMPV6_ECHO_REQUEST, 0, [0x12, 0x34, 0, 1], b"ping");
    let e4 = icmp(ICMPV4_ECHO_REQUEST, 0, [0x12, 0x34, 0, 1], b"ping");
    let p4 = t64(&simple6(64, N6, N4_AS_V6, NH_ICMPV6, &e6)).unwrap();
    assert_eq!(
        with_id(p4, 0),
        v4pkt(0, 63, 0, 0, POOL4, N4, PROTO_ICMP, &[], &e4)
    );

    let r4 = icmp(ICMPV4_ECHO_REPLY, 0, [0x12, 0x34, 0, 1], b"ping");
    let r6 = icmp(ICMPV6_ECHO_REPLY, 0, [0x12, 0x34, 0, 1], b"ping");
    let p6 = t46(&simple4(64, N4, POOL4, PROTO_ICMP, &r4)).unwrap();
    assert_eq!(p6, simple6(63, N4_AS_V6, N6, NH_ICMPV6, &r6));
}

#[test]
fn rfc7915_hop_limit_expiry_both_ways() {
    let u = udp(1, 2, b"");
    assert_eq!(
        t64(&simple6(1, N6, N4_AS_V6, PROTO_UDP, &u)),
        Err(TranslateError::TimeExceeded)
    );
    assert_eq!(
        t64(&simple6(0, N6, N4_AS_V6, PROTO_UDP, &u)),
        Err(TranslateError::TimeExceeded)
    );
    assert_eq!(
        t46(&simple4(1, N4, POOL4, PROTO_UDP, &u)),
        Err(TranslateError::TimeExceeded)
    );
    assert!(t46(&simple4(2, N4, POOL4, PROTO_UDP, &u)).is_ok());
}

#[test]
fn rfc7915_5_1_df_threshold_1260() {
    // Doc §5 case 14 (Jool ch/ci): 1281 → 1261 with DF; 1280 → 1260 without.
    let big = simple6(64, N6, N4_AS_V6, PROTO_UDP, &udp(1, 2, &[7; 1233]));
    assert_eq!(big.len(), 1281);
    let p4 = t64(&big).unwrap();
    assert_eq!((p4.len(), p4[6] & 0x40, id_of(&p4)), (1261, 0x40, 0));
    let p4 = t64(&simple6(
        64,
        N6,
        N4_AS_V6,
        PROTO_UDP,
        &udp(1, 2, &[7; 1232]),
    ))
    .unwrap();
    assert_eq!((p4.len(), p4[6] & 0x40), (1260, 0));
}

#[test]
fn rfc7915_5_1_1_fragment_header() {
    // Doc §5 case 15 (Jool cj): ID 0x01020408, offset 80, M on/off → ID 1032, MF copied.
    for m in [1u8, 0] {
        let frag = [PROTO_UDP, 0, 0x02, 0x80 | m, 0x01, 0x02, 0x04, 0x08];
        let p6 = v6pkt(0, 64, N6, N4_AS_V6, NH_FRAGMENT, &frag, 0xff, &[9; 16]);
        let p4 = t64(&p6).unwrap();
        let ff = u16::from_be_bytes([p4[6], p4[7]]);
        assert_eq!(id_of(&p4), 1032);
        assert_eq!(ff, 80 | (u16::from(m) << 13), "DF clear, offset 80");
        assert_eq!(p4[9], PROTO_UDP);
        assert_eq!(&p4[20..], &[9; 16]);
    }
}

#[test]
fn rfc7915_5_1_extension_headers_skipped() {
    // Doc §5 case 2 (Jool ab): HbH, DestOpt, Routing (SL 0), Fragment, then UDP.
    let u = udp(5, 6, b"xyz");
    let mut ext = vec![NH_DEST_OPTS, 0, 1, 4, 0, 0, 0, 0];
    ext.extend_from_slice(&[NH_ROUTING, 0, 1, 4, 0, 0, 0, 0]);
    ext.extend_from_slice(&[NH_FRAGMENT, 0, 0, 0, 0, 0, 0, 0]);
    ext.extend_from_slice(&[PROTO_UDP, 0, 0, 1, 0, 0, 0x12, 0x34]);
    let p6 = v6pkt(0, 64, N6, N4_AS_V6, NH_HOP_BY_HOP, &ext, PROTO_UDP, &u);
    let p4 = t64(&p6).unwrap();
    assert_eq!(
        (p4.len(), p4[9], id_of(&p4)),
        (20 + u.len(), PROTO_UDP, 0x1234)
    );
    assert_eq!(p4[6], 0x20, "MF, no DF");
    // Without the Fragment header: unfragmented and the UDP checksum still verifies.
    ext.truncate(16);
    ext[8] = PROTO_UDP;
    let p6 = v6pkt(0, 64, N6, N4_AS_V6, NH_HOP_BY_HOP, &ext, PROTO_UDP, &u);
    let p4 = t64(&p6).unwrap();
    assert_eq!(&p4[6..8], &[0, 0]);
    check_v4(&p4);
}

#[test]
fn rfc7915_5_1_routing_segments_left() {
    let ext = [PROTO_UDP, 0, 0, 1, 0, 0, 0, 0];
    let p6 = v6pkt(
        0,
        64,
        N6,
        N4_AS_V6,
        NH_ROUTING,
        &ext,
        PROTO_UDP,
        &udp(1, 2, b""),
    );
    assert_eq!(
        t64(&p6),
        Err(TranslateError::ParameterProblem { pointer: 43 })
    );
}

#[test]
fn rfc7915_5_1_header_after_fragment() {
    // Doc §5 case 3 (Jool ac).
    let ext = [
        NH_DEST_OPTS,
        0,
        0,
        0,
        0,
        0,
        0,
        1,
        PROTO_UDP,
        0,
        1,
        4,
        0,
        0,
        0,
        0,
    ];
    let p6 = v6pkt(
        0,
        64,
        N6,
        N4_AS_V6,
        NH_FRAGMENT,
        &ext,
        PROTO_UDP,
        &udp(1, 2, b""),
    );
    assert_eq!(t64(&p6), Err(TranslateError::HeaderAfterFragment));
}

#[test]
fn rfc7915_opaque_protocols() {
    // Doc §5 case 4 (Jool ad, fa): No Next Header and DCCP pass unchanged.
    let p4 = t64(&simple6(64, N6, N4_AS_V6, 59, &[])).unwrap();
    assert_eq!((p4.len(), p4[9], p4[6] & 0x40), (20, 59, 0));
    let p4 = t64(&simple6(64, N6, N4_AS_V6, 33, &[1, 2, 3, 4])).unwrap();
    assert_eq!((&p4[20..], p4[9]), (&[1u8, 2, 3, 4][..], 33));
    let p6 = t46(&simple4(64, N4, POOL4, 33, &[1, 2, 3, 4])).unwrap();
    assert_eq!((&p6[40..], p6[6]), (&[1u8, 2, 3, 4][..], 33));
}

#[test]
fn rfc7915_5_1_packet_too_big() {
    // Doc §5 case 13 (Jool cg): IPv6 1421 B, IPv4 MTU 1400 → PTB 1420.
    let cfg = Config {
        ipv4_mtu: 1400,
        ..Config::default()
    };
    let p6 = simple6(64, N6, N4_AS_V6, PROTO_UDP, &udp(1, 2, &[0; 1373]));
    assert_eq!(p6.len(), 1421);
    assert_eq!(
        t64_with(&cfg, &p6),
        Err(TranslateError::PacketTooBig { mtu: 1420 })
    );
    let p6 = simple6(64, N6, N4_AS_V6, PROTO_UDP, &udp(1, 2, &[0; 1372]));
    assert_eq!(t64_with(&cfg, &p6).unwrap().len(), 1400);
}

#[test]
fn rfc7915_4_1_options_dropped() {
    // Doc §5 case 1 (Jool aa): options vanish, an expired source route included.
    let u = udp(53, 2000, b"a");
    let rr = [7, 7, 4, 0, 0, 0, 0, 0]; // Record Route, then EOL padding.
    let lsrr_expired = [0x83, 7, 8, 1, 2, 3, 4, 0];
    for opts in [&rr[..], &lsrr_expired[..]] {
        let p4 = v4pkt(0, 64, 1, 0x4000, N4, POOL4, PROTO_UDP, opts, &u);
        assert_eq!(t46(&p4).unwrap(), simple6(63, N4_AS_V6, N6, PROTO_UDP, &u));
    }
    let lsrr_live = [0x83, 7, 4, 1, 2, 3, 4, 0];
    let p4 = v4pkt(0, 64, 1, 0x4000, N4, POOL4, PROTO_UDP, &lsrr_live, &u);
    assert_eq!(t46(&p4), Err(TranslateError::SourceRoute));
}

#[test]
fn rfc7915_4_1_fragment_gets_fragment_header() {
    // Doc §5 case 11 (Jool ce): fragment with MF, ID 1234, 1252 B → 1280 B, same ID.
    let u = udp(53, 2000, &[3; 1224]);
    let p4 = v4pkt(0, 64, 1234, 0x6000, N4, POOL4, PROTO_UDP, &[], &u);
    assert_eq!(p4.len(), 1252);
    let p6 = t46(&p4).unwrap();
    assert_eq!(p6.len(), 1280);
    assert_eq!(p6[6], NH_FRAGMENT);
    assert_eq!(&p6[40..48], &[PROTO_UDP, 0, 0, 1, 0, 0, 0x04, 0xd2]);
    // Non-first fragment: offset copied, payload opaque.
    let p4 = v4pkt(0, 64, 1234, 0x0010, N4, POOL4, PROTO_UDP, &[], &[5; 24]);
    let p6 = t46(&p4).unwrap();
    assert_eq!(&p6[40..48], &[PROTO_UDP, 0, 0, 0x80, 0, 0, 0x04, 0xd2]);
    assert_eq!(&p6[48..], &p4[20..], "payload untouched");
}

#[test]
fn rfc7915_4_1_mtu_rules() {
    let cfg = Config {
        ipv6_mtu: 1280,
        ..Config::default()
    };
    // Doc §5 case 9 (cb, cd): 1260 B → 1280 B, no Fragment header, DF or not.
    for ff in [0x4000, 0] {
        let p4 = v4pkt(
            0,
            64,
            9,
            ff,
            N4,
            POOL4,
            PROTO_TCP,
            &[],
            &tcp(1, 2, 3, 0x10, &[0; 1220]),
        );
        assert_eq!(t46_with(&cfg, &p4).unwrap().len(), 1280);
    }
    // Case 8 (ca): 1261 B with DF → Fragmentation Needed, MTU 1260.
    let seg = tcp(1, 2, 3, 0x10, &[0; 1221]);
    let p4 = v4pkt(0, 64, 9, 0x4000, N4, POOL4, PROTO_TCP, &[], &seg);
    assert_eq!(
        t46_with(&cfg, &p4),
        Err(TranslateError::FragmentationNeeded { mtu: 1260 })
    );
    // Case 10 without DF: needs IPv6 fragments.
    let p4 = v4pkt(0, 64, 1234, 0, N4, POOL4, PROTO_TCP, &[], &seg);
    assert_eq!(
        t46_with(&cfg, &p4),
        Err(TranslateError::NeedsFragmentation { mtu: 1280 })
    );
}

#[test]
fn rfc7915_4_5_udp_zero_checksum() {
    let mut u = udp(53, 2000, b"zero");
    let mut p4 = simple4(64, N4, POOL4, PROTO_UDP, &u);
    p4[26..28].fill(0);
    // Doc §5 case 17 (eb): computed afresh.
    let p6 = t46(&p4).unwrap();
    assert_eq!(p6, simple6(63, N4_AS_V6, N6, PROTO_UDP, &u));
    // (ea): option off → 3/13.
    let off = Config {
        compute_udp_zero_checksum: false,
        ..Config::default()
    };
    assert_eq!(t46_with(&off, &p4), Err(TranslateError::UdpZeroChecksum));
    // (ec): first fragment → 3/13 regardless.
    u.extend_from_slice(&[0; 4]);
    let mut p4 = v4pkt(0, 64, 1, 0x2000, N4, POOL4, PROTO_UDP, &[], &u);
    p4[26..28].fill(0);
    assert_eq!(t46(&p4), Err(TranslateError::UdpZeroChecksum));
}

#[test]
fn rfc7915_4_1_bad_ipv4_header_checksum() {
    let mut p4 = simple4(64, N4, POOL4, PROTO_UDP, &udp(1, 2, b""));
    p4[10] ^= 1;
    assert_eq!(t46(&p4), Err(TranslateError::BadHeaderChecksum));
}

// --- ICMP errors (RFC 7915 §4.2-4.3, §5.2-5.3) --------------------------------------------

/// An ICMPv4 error from `from` to the IPv4 side's view of n6, quoting a UDP packet n6 sent.
fn icmp4_error(t: u8, c: u8, rest: [u8; 4], from: Ipv4Addr, inner_data: usize) -> Vec<u8> {
    let inner = v4pkt(
        0,
        5,
        77,
        0,
        POOL4,
        N4,
        PROTO_UDP,
        &[],
        &udp(2000, 4000, &vec![1; inner_data]),
    );
    simple4(64, from, POOL4, PROTO_ICMP, &icmp(t, c, rest, &inner))
}

fn icmp6_error(t: u8, c: u8, rest: [u8; 4], from: Ipv6Addr, inner_data: usize) -> Vec<u8> {
    let inner = simple6(
        5,
        N6,
        N4_AS_V6,
        PROTO_UDP,
        &udp(2000, 4000, &vec![1; inner_data]),
    );
    simple6(64, from, N6, NH_ICMPV6, &icmp(t, c, rest, &inner))
}

fn type_code_rest(p: &[u8], hdr: usize) -> (u8, u8, [u8; 4]) {
    (
        p[hdr],
        p[hdr + 1],
        [p[hdr + 4], p[hdr + 5], p[hdr + 6], p[hdr + 7]],
    )
}

#[test]
fn rfc7915_4_2_port_unreachable_with_inner_packet() {
    let p4 = icmp4_error(3, 3, [0; 4], N4, 4);
    let p6 = t46(&p4).unwrap();
    let inner6 = simple6(5, N6, N4_AS_V6, PROTO_UDP, &udp(2000, 4000, &[1; 4]));
    let want = simple6(63, N4_AS_V6, N6, NH_ICMPV6, &icmp(1, 4, [0; 4], &inner6));
    assert_eq!(p6, want);
    check_v6(&p6[48..]); // the inner UDP checksum was updated too
}

#[test]
fn rfc7915_5_2_port_unreachable_with_inner_packet() {
    let p6 = icmp6_error(1, 4, [0; 4], N4_AS_V6, 4);
    let p4 = t64(&p6).unwrap();
    assert_eq!(type_code_rest(&p4, 20), (3, 3, [0; 4]));
    let inner = &p4[28..];
    let want = v4pkt(
        0,
        5,
        id_of(inner),
        0,
        POOL4,
        N4,
        PROTO_UDP,
        &[],
        &udp(2000, 4000, &[1; 4]),
    );
    assert_eq!(
        inner,
        &want[..],
        "inner TTL kept, addresses and checksum mapped"
    );
    assert_eq!(p4.len(), 20 + 8 + 20 + 12);
}

#[test]
fn rfc7915_4_2_type_code_table() {
    let cases: &[TypeCodeCase] = &[
        ((3, 0), Some((1, 0))),
        ((3, 1), Some((1, 0))),
        ((3, 2), Some((4, 1))),
        ((3, 3), Some((1, 4))),
        ((3, 5), Some((1, 0))),
        ((3, 6), Some((1, 0))),
        ((3, 7), Some((1, 0))),
        ((3, 8), Some((1, 0))),
        ((3, 9), Some((1, 1))),
        ((3, 10), Some((1, 1))),
        ((3, 11), Some((1, 0))),
        ((3, 12), Some((1, 0))),
        ((3, 13), Some((1, 1))),
        ((3, 14), None),
        ((3, 15), Some((1, 1))),
        ((11, 0), Some((3, 0))),
        ((11, 1), Some((3, 1))),
        ((12, 1), None),
        ((4, 0), None),
        ((5, 0), None),
    ];
    for &((t, c), want) in cases {
        let r = t46(&icmp4_error(t, c, [0; 4], ROUTER4, 4));
        match want {
            Some((t6, c6)) => {
                let p6 = r.unwrap_or_else(|e| panic!("{t}/{c}: {e}"));
                assert_eq!((p6[40], p6[41]), (t6, c6), "{t}/{c}");
            }
            None => assert_eq!(r, Err(TranslateError::Untranslatable), "{t}/{c}"),
        }
    }
    // 3/2 → 4/1 pointing at the Next Header field.
    let p6 = t46(&icmp4_error(3, 2, [0; 4], N4, 4)).unwrap();
    assert_eq!(type_code_rest(&p6, 40), (4, 1, [0, 0, 0, 6]));
    // Informational types other than echo are dropped.
    let ts = simple4(64, N4, POOL4, PROTO_ICMP, &icmp(13, 0, [0; 4], &[0; 12]));
    assert_eq!(t46(&ts), Err(TranslateError::Untranslatable));
}

#[test]
fn rfc7915_5_2_type_code_table() {
    let cases: &[TypeCodeCase] = &[
        ((1, 0), Some((3, 1))),
        ((1, 1), Some((3, 10))),
        ((1, 2), Some((3, 1))),
        ((1, 3), Some((3, 1))),
        ((1, 4), Some((3, 3))),
        ((1, 5), None),
        ((3, 0), Some((11, 0))),
        ((3, 1), Some((11, 1))),
        ((4, 1), Some((3, 2))),
        ((4, 2), None),
        ((5, 0), None),
    ];
    for &((t, c), want) in cases {
        let r = t64(&icmp6_error(t, c, [0; 4], ROUTER6, 4));
        match want {
            Some((t4, c4)) => {
                let p4 = r.unwrap_or_else(|e| panic!("{t}/{c}: {e}"));
                assert_eq!((p4[20], p4[21]), (t4, c4), "{t}/{c}");
            }
            None => assert_eq!(r, Err(TranslateError::Untranslatable), "{t}/{c}"),
        }
    }
    // Neighbour Discovery and MLD have no IPv4 counterpart.
    for t in [130, 133, 135, 136] {
        let nd = simple6(255, N6, N4_AS_V6, NH_ICMPV6, &icmp(t, 0, [0; 4], &[0; 16]));
        assert_eq!(t64(&nd), Err(TranslateError::Untranslatable), "{t}");
    }
}

#[test]
fn rfc7915_parameter_problem_pointers() {
    let v4_to_v6: &[(u8, Option<u32>)] = &[
        (0, Some(0)),
        (1, Some(1)),
        (2, Some(4)),
        (3, Some(4)),
        (4, None),
        (7, None),
        (8, Some(7)),
        (9, Some(6)),
        (10, None),
        (11, None),
        (12, Some(8)),
        (15, Some(8)),
        (16, Some(24)),
        (19, Some(24)),
        (20, None),
    ];
    for &(p4, want) in v4_to_v6 {
        let r = t46(&icmp4_error(12, 0, [p4, 0, 0, 0], ROUTER4, 4));
        match want {
            Some(p6) => {
                let o = r.unwrap();
                assert_eq!(type_code_rest(&o, 40), (4, 0, p6.to_be_bytes()), "{p4}");
            }
            None => assert_eq!(r, Err(TranslateError::Untranslatable), "{p4}"),
        }
    }
    let v6_to_v4: &[(u32, Option<u8>)] = &[
        (0, Some(0)),
        (1, Some(1)),
        (2, None),
        (3, None),
        (4, Some(2)),
        (5, Some(2)),
        (6, Some(9)),
        (7, Some(8)),
        (8, Some(12)),
        (23, Some(12)),
        (24, Some(16)),
        (39, Some(16)),
        (40, None),
    ];
    for &(p6, want) in v6_to_v4 {
        let r = t64(&icmp6_error(4, 0, p6.to_be_bytes(), ROUTER6, 4));
        match want {
            Some(p4) => {
                let o = r.unwrap();
                assert_eq!(type_code_rest(&o, 20), (12, 0, [p4, 0, 0, 0]), "{p6}");
            }
            None => assert_eq!(r, Err(TranslateError::Untranslatable), "{p6}"),
        }
    }
}

#[test]
fn rfc7915_5_2_ptb_to_fragmentation_needed() {
    // Doc §5 case 16 (da): PTB 1280 → FN 1260.
    let p4 = t64(&icmp6_error(2, 0, 1280u32.to_be_bytes(), ROUTER6, 4)).unwrap();
    assert_eq!(type_code_rest(&p4, 20), (3, 4, [0, 0, 0x04, 0xec]));
    // Capped by the IPv4 MTU and the IPv6 MTU − 20.
    let cfg = Config {
        ipv4_mtu: 1400,
        ipv6_mtu: 1500,
        ..Config::default()
    };
    let p4 = t64_with(&cfg, &icmp6_error(2, 0, 9000u32.to_be_bytes(), ROUTER6, 4)).unwrap();
    assert_eq!(u16::from_be_bytes([p4[26], p4[27]]), 1400);
}

#[test]
fn rfc7915_4_2_fragmentation_needed_to_ptb() {
    // Doc §5 case 16 (db): FN 1261/1260/1259 → PTB 1281/1280/1280.
    for (fnm, ptb) in [(1261u16, 1281u32), (1260, 1280), (1259, 1280)] {
        let [a, b] = fnm.to_be_bytes();
        let p6 = t46(&icmp4_error(3, 4, [0, 0, a, b], ROUTER4, 4)).unwrap();
        assert_eq!(type_code_rest(&p6, 40), (2, 0, ptb.to_be_bytes()), "{fnm}");
    }
    // Case 24: FN 1400 → PTB 1420.
    let p6 = t46(&icmp4_error(3, 4, [0, 0, 0x05, 0x78], ROUTER4, 4)).unwrap();
    assert_eq!(type_code_rest(&p6, 40).2, 1420u32.to_be_bytes());
    // FN MTU 0: plateau below the quoted Total Length (1500 → 1492, + 20).
    let p6 = t46(&icmp4_error(3, 4, [0; 4], ROUTER4, 1472)).unwrap();
    assert_eq!(
        type_code_rest(&p6, 40).2,
        1500u32.to_be_bytes(),
        "IPv6 MTU caps"
    );
    let cfg = Config {
        ipv6_mtu: 9000,
        ipv4_mtu: 9000,
        ..Config::default()
    };
    let p6 = t46_with(&cfg, &icmp4_error(3, 4, [0; 4], ROUTER4, 1472)).unwrap();
    assert_eq!(type_code_rest(&p6, 40).2, 1512u32.to_be_bytes());
}

#[test]
fn rfc7915_4_3_error_sizes() {
    // Doc §5 case 5 (ba): ICMPv4 error 400 B (20+8+20+8+344) → ICMPv6 440 B, inner TTL kept.
    let p4 = icmp4_error(3, 3, [0; 4], N4, 344);
    assert_eq!(p4.len(), 400);
    let p6 = t46(&p4).unwrap();
    assert_eq!(p6.len(), 440);
    assert_eq!(p6[48 + 7], 5, "inner hop limit = inner TTL");
    // Cases 6 (bb, bc) and 28: 1500 B → exactly 1280 B, inner lengths as they were.
    let p4 = icmp4_error(3, 3, [0; 4], N4, 1444);
    assert_eq!(p4.len(), 1500);
    let p6 = t46(&p4).unwrap();
    assert_eq!(p6.len(), 1280);
    assert_eq!(u16::from_be_bytes([p6[4], p6[5]]), 1240);
    assert_eq!(
        u16::from_be_bytes([p6[48 + 4], p6[48 + 5]]),
        1452,
        "inner plen"
    );
}

#[test]
fn rfc7915_5_3_error_sizes() {
    // Doc §5 case 7 (bd): ICMPv6 error 400 B → ICMPv4 360 B; (be) 700 B → 576 B.
    let p6 = icmp6_error(1, 4, [0; 4], N4_AS_V6, 304);
    assert_eq!(p6.len(), 400);
    assert_eq!(t64(&p6).unwrap().len(), 360);
    let p6 = icmp6_error(1, 4, [0; 4], N4_AS_V6, 604);
    assert_eq!(p6.len(), 700);
    let p4 = t64(&p6).unwrap();
    assert_eq!(p4.len(), 576);
    assert_eq!(
        u16::from_be_bytes([p4[28 + 2], p4[28 + 3]]),
        20 + 612,
        "inner total"
    );
}

#[test]
fn rfc7915_icmp_error_rules() {
    // Doc §5 case 18 (ha): an error from 127.0.0.1 is still translated.
    let p4 = icmp4_error(11, 0, [0; 4], Ipv4Addr::LOCALHOST, 4);
    let mut out = [0u8; 1500];
    let map = |s: Ipv4Addr, d: Ipv4Addr| Some((sip6(s), sip6(d)));
    let n = v4_to_v6_with(&Config::default(), &p4, ROUTER6, N6, &map, &mut out).unwrap();
    assert_eq!((out[40], n), (3, 40 + 8 + 40 + 12));
    // Bad checksum → dropped; an error quoting an error → dropped.
    let mut bad = icmp4_error(3, 3, [0; 4], N4, 4);
    bad[23] ^= 1;
    assert_eq!(t46(&bad), Err(TranslateError::BadChecksum));
    let mut bad6 = icmp6_error(1, 4, [0; 4], N4_AS_V6, 4);
    bad6[43] ^= 1;
    assert_eq!(t64(&bad6), Err(TranslateError::BadChecksum));
    let nested = simple4(
        64,
        N4,
        POOL4,
        PROTO_ICMP,
        &icmp(3, 3, [0; 4], &icmp4_error(3, 3, [0; 4], N4, 4)),
    );
    assert_eq!(t46(&nested), Err(TranslateError::Untranslatable));
    // Quoted packet with other addresses: the plain functions refuse, a mapping works.
    let te = icmp4_error(11, 0, [0; 4], ROUTER4, 4);
    assert_eq!(
        v4_to_v6(&te, ROUTER6, N6, &mut out),
        Err(TranslateError::Untranslatable)
    );
    let pu = icmp4_error(3, 3, [0; 4], N4, 4);
    assert!(v4_to_v6(&pu, N4_AS_V6, N6, &mut out).is_ok());
}

// --- malformed input ----------------------------------------------------------------------

#[test]
fn malformed_input_is_an_error() {
    let mut out = [0u8; 2000];
    let p6 = simple6(64, N6, N4_AS_V6, PROTO_UDP, &udp(1, 2, b"abc"));
    let p4 = simple4(64, N4, POOL4, PROTO_UDP, &udp(1, 2, b"abc"));
    for n in 0..p6.len() {
        assert!(v6_to_v4(&p6[..n], POOL4, N4, &mut out).is_err(), "{n}");
    }
    for n in 0..p4.len() {
        assert!(v4_to_v6(&p4[..n], N4_AS_V6, N6, &mut out).is_err(), "{n}");
    }
    let mut v = p6.clone();
    v[0] = 0x40;
    assert_eq!(
        v6_to_v4(&v, POOL4, N4, &mut out),
        Err(TranslateError::Malformed)
    );
    let mut v = p4.clone();
    v[0] = 0x65;
    assert_eq!(
        v4_to_v6(&v, N4_AS_V6, N6, &mut out),
        Err(TranslateError::Malformed)
    );
    // Lying lengths.
    let mut v = p6.clone();
    v[5] += 1;
    assert_eq!(
        v6_to_v4(&v, POOL4, N4, &mut out),
        Err(TranslateError::Truncated)
    );
    let mut v = p4.clone();
    v[0] = 0x4f;
    assert!(v4_to_v6(&v, N4_AS_V6, N6, &mut out).is_err());
    // Output buffer too small.
    assert_eq!(
        v6_to_v4(&p6, POOL4, N4, &mut out[..30]),
        Err(TranslateError::BufferTooSmall)
    );
    assert_eq!(
        v4_to_v6(&p4, N4_AS_V6, N6, &mut out[..50]),
        Err(TranslateError::BufferTooSmall)
    );
}

// --- IPv6 fragmentation of IPv4 packets without DF (RFC 7915 §4.1, doc §2.7) -------------

fn frag46(cfg: &Config, p4: &[u8]) -> Result<Vec<Vec<u8>>, TranslateError> {
    let mut out = [0u8; 70_000];
    let mut lens = [0usize; 64];
    let map = |s: Ipv4Addr, d: Ipv4Addr| Some((sip6(s), sip6(d)));
    let (s, d) = v4_addrs(p4);
    let k = v4_to_v6_fragments(cfg, p4, sip6(s), sip6(d), &map, &mut out, &mut lens)?;
    let mut at = 0;
    Ok(lens[..k]
        .iter()
        .map(|&n| {
            at += n;
            out[at - n..at].to_vec()
        })
        .collect())
}

/// (offset in bytes, M, identification) of an IPv6 fragment.
fn frag_fields(p: &[u8]) -> (usize, bool, u32) {
    assert_eq!(p[6], NH_FRAGMENT);
    let fo = u16::from_be_bytes([p[42], p[43]]);
    let id = u32::from_be_bytes([p[44], p[45], p[46], p[47]]);
    (usize::from(fo >> 3) * 8, fo & 1 == 1, id)
}

/// Reassembles fragments of one datagram (in order) into an unfragmented IPv6 packet.
fn reassemble(frags: &[Vec<u8>]) -> Vec<u8> {
    let mut p = frags[0][..40].to_vec();
    p[6] = frags[0][40];
    for f in frags {
        p.extend_from_slice(&f[48..]);
    }
    let plen = (p.len() - 40) as u16;
    p[4..6].copy_from_slice(&plen.to_be_bytes());
    p
}

#[test]
fn rfc7915_4_1_fragments_tcp_1261() {
    // Doc §5 case 10 (cc, ck): TCP 1261 B, DF=0, ID 1234 → 1280 B (MF) + 57 B at 1232.
    let seg = tcp(1, 2, 3, 0x10, &[0x5a; 1221]);
    let p4 = v4pkt(0, 64, 1234, 0, N4, POOL4, PROTO_TCP, &[], &seg);
    assert_eq!(p4.len(), 1261);
    let f = frag46(&Config::default(), &p4).unwrap();
    assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), [1280, 57]);
    assert_eq!(frag_fields(&f[0]), (0, true, 1234));
    assert_eq!(frag_fields(&f[1]), (1232, false, 1234));
    let whole = reassemble(&f);
    check_v6(&whole);
    assert_eq!(whole, simple6(63, N4_AS_V6, N6, PROTO_TCP, &seg));
}

#[test]
fn rfc7915_4_1_fragments_of_a_fragment() {
    // Doc §5 case 12 (cf): IPv4 fragment 1268 B, DF=0 → 1280 B + 64 B, ID kept, MF on both.
    let p4 = v4pkt(0, 64, 1234, 0x2000, N4, POOL4, 0xfd, &[], &[1; 1248]);
    let f = frag46(&Config::default(), &p4).unwrap();
    assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), [1280, 64]);
    assert_eq!(frag_fields(&f[0]), (0, true, 1234));
    assert_eq!(frag_fields(&f[1]), (1232, true, 1234));
}

#[test]
fn rfc7915_4_1_fragments_udp_and_lowest_mtu() {
    // Doc §5 case 29 (minmtu6): UDP 1400-byte payload, ID 4660 → 1280 B + 224 B.
    let u = udp(53, 2000, &[7; 1400]);
    let p4 = v4pkt(0, 64, 4660, 0, N4, POOL4, PROTO_UDP, &[], &u);
    let f = frag46(&Config::default(), &p4).unwrap();
    assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), [1280, 224]);
    assert_eq!(frag_fields(&f[1]).2, 4660);
    check_v6(&reassemble(&f));
    // Case 20 (jca, jcb): lowest-ipv6-mtu 1402 → 1400 B (1352 data) + rest; DF=1 whole.
    let cfg = Config {
        lowest_ipv6_mtu: 1402,
        ..Config::default()
    };
    let u = udp(53, 2000, &[7; 1355]);
    let p4 = v4pkt(0, 64, 4660, 0, N4, POOL4, PROTO_UDP, &[], &u);
    let f = frag46(&cfg, &p4).unwrap();
    assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), [1400, 48 + 11]);
    assert_eq!(frag_fields(&f[1]).0, 169 * 8);
    let p4 = v4pkt(0, 64, 4660, 0x4000, N4, POOL4, PROTO_UDP, &[], &u);
    assert_eq!(frag46(&cfg, &p4).unwrap().len(), 1);
    // Zero UDP checksum computed over the whole datagram.
    let mut p4 = v4pkt(0, 64, 4660, 0, N4, POOL4, PROTO_UDP, &[], &u);
    p4[26..28].fill(0);
    let f = frag46(&cfg, &p4).unwrap();
    assert_eq!(reassemble(&f), simple6(63, N4_AS_V6, N6, PROTO_UDP, &u));
    // Small packets pass through as one.
    let p4 = simple4(64, N4, POOL4, PROTO_UDP, &udp(1, 2, b"x"));
    assert_eq!(frag46(&cfg, &p4).unwrap(), vec![t46(&p4).unwrap()]);
}

#[test]
fn fragments_refuse_small_buffers() {
    let p4 = v4pkt(
        0,
        64,
        1,
        0,
        N4,
        POOL4,
        PROTO_UDP,
        &[],
        &udp(1, 2, &[0; 3000]),
    );
    let map = |s: Ipv4Addr, d: Ipv4Addr| Some((sip6(s), sip6(d)));
    let mut out = [0u8; 4000];
    let cfg = Config::default();
    let mut lens = [0usize; 2];
    assert_eq!(
        v4_to_v6_fragments(&cfg, &p4, N4_AS_V6, N6, &map, &mut out, &mut lens),
        Err(TranslateError::BufferTooSmall)
    );
    let mut lens = [0usize; 3];
    assert_eq!(
        v4_to_v6_fragments(&cfg, &p4, N4_AS_V6, N6, &map, &mut out[..3100], &mut lens),
        Err(TranslateError::BufferTooSmall)
    );
    assert_eq!(
        v4_to_v6_fragments(&cfg, &p4, N4_AS_V6, N6, &map, &mut out, &mut lens),
        Ok(3)
    );
}

// --- properties ---------------------------------------------------------------------------

fn upper_strategy() -> impl Strategy<Value = (u8, Vec<u8>)> {
    (
        0u8..4,
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(k, a, b, seq, data)| match k {
            0 => (PROTO_UDP, udp(a, b, &data)),
            1 => (PROTO_TCP, tcp(a, b, seq, 0x18, &data)),
            2 => (
                NH_ICMPV6,
                icmp(ICMPV6_ECHO_REQUEST, 0, seq.to_be_bytes(), &data),
            ),
            _ => (
                NH_ICMPV6,
                icmp(ICMPV6_ECHO_REPLY, 0, seq.to_be_bytes(), &data),
            ),
        })
}

proptest! {
    /// RFC 7915 round trip: 6→4→6 gives back the packet, hop limit down by two.
    #[test]
    fn round_trip_6_4_6(
        (proto, upper) in upper_strategy(),
        tc in any::<u8>(),
        hop in 3u8..=255,
        s in any::<[u8; 16]>(),
        d4 in any::<u32>(),
        s4 in any::<u32>(),
    ) {
        let src6 = Ipv6Addr::from(s);
        let dst6 = crate::Prefix::WELL_KNOWN.allow_private(true).embed(Ipv4Addr::from(d4)).unwrap();
        let (src4, dst4) = (Ipv4Addr::from(s4), Ipv4Addr::from(d4));
        let p6 = v6pkt(tc, hop, src6, dst6, proto, &[], proto, &upper);
        let mut mid = [0u8; 1500];
        let n = v6_to_v4(&p6, src4, dst4, &mut mid).unwrap();
        check_v4(&mid[..n]);
        let mut back = [0u8; 1500];
        let m = v4_to_v6(&mid[..n], src6, dst6, &mut back).unwrap();
        let mut want = p6.clone();
        want[7] = hop - 2;
        prop_assert_eq!(&back[..m], &want[..]);
    }

    /// Arbitrary bytes never panic and never claim more output than the buffer holds.
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut out = [0u8; 300];
        if let Ok(n) = v6_to_v4(&data, POOL4, N4, &mut out) {
            prop_assert!(n <= out.len());
        }
        if let Ok(n) = v4_to_v6(&data, N4_AS_V6, N6, &mut out) {
            prop_assert!(n <= out.len());
        }
    }

    /// Valid packets with a few bytes changed (version nibble kept) never panic, and
    /// small output buffers are refused rather than overrun.
    #[test]
    fn mutated_packets_never_panic(
        (proto, upper) in upper_strategy(),
        err in any::<bool>(),
        flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 1..6),
        outlen in 0usize..1600,
    ) {
        let mut out = vec![0u8; outlen];
        let mut p6 = simple6(64, N6, N4_AS_V6, proto, &upper);
        if err {
            p6 = icmp6_error(1, 4, [0; 4], N4_AS_V6, upper.len());
        }
        let mut p4 = simple4(64, N4, POOL4, if proto == NH_ICMPV6 { PROTO_ICMP } else { proto }, &upper);
        if err {
            p4 = icmp4_error(3, 4, [0; 4], N4, upper.len());
        }
        for (at, x) in &flips {
            let i = usize::from(*at) % p6.len();
            if i > 0 { p6[i] ^= x; }
            let i = usize::from(*at) % p4.len();
            if i > 0 { p4[i] ^= x; }
        }
        if let Ok(n) = v6_to_v4(&p6, POOL4, N4, &mut out) {
            prop_assert!(n <= outlen);
        }
        if let Ok(n) = v4_to_v6(&p4, N4_AS_V6, N6, &mut out) {
            prop_assert!(n <= outlen);
        }
    }
}

// RFC 7915 §4.2 / §5.2 through the wire ErrorReprs: the errors the two tables pair map back
// to themselves; MTUs follow the §4.2 and §5.2 formulas.
#[test]
fn rfc7915_error_repr_tables_pair_up() {
    use gate64_wire::icmpv4::ErrorRepr as V4;
    use gate64_wire::icmpv6::ErrorRepr as V6;
    let cfg = Config::default();
    for e6 in [
        V6::DstUnreachable { code: 1 },
        V6::DstUnreachable { code: 4 },
        V6::TimeExceeded { code: 0 },
        V6::TimeExceeded { code: 1 },
        V6::ParamProblem {
            code: 0,
            pointer: 6,
        },
        V6::ParamProblem {
            code: 0,
            pointer: 24,
        },
    ] {
        let e4 = error_6to4(&cfg, e6).unwrap();
        assert_eq!(error_4to6(&cfg, e4, 0), Ok(e6), "{e6:?} via {e4:?}");
    }
    let ptb = V6::PacketTooBig { mtu: 1500 };
    assert_eq!(error_6to4(&cfg, ptb), Ok(V4::FragNeeded { mtu: 1480 }));
    assert_eq!(error_4to6(&cfg, V4::FragNeeded { mtu: 1480 }, 0), Ok(ptb));
    // FN with MTU 0: the RFC 1191 plateau below the quoted Total Length (1492 below 1500,
    // + 20, capped by the 1500-byte IPv6 MTU; 508 below 600, raised to 1280).
    let old_router = V4::FragNeeded { mtu: 0 };
    assert_eq!(
        error_4to6(&cfg, old_router, 1500),
        Ok(V6::PacketTooBig { mtu: 1500 })
    );
    assert_eq!(
        error_4to6(&cfg, old_router, 600),
        Ok(V6::PacketTooBig { mtu: 1280 })
    );
    assert_eq!(
        error_6to4(&cfg, V6::DstUnreachable { code: 9 }),
        Err(TranslateError::Untranslatable)
    );
    assert_eq!(
        error_4to6(
            &cfg,
            V4::ParamProblem {
                code: 0,
                pointer: 5
            },
            0
        ),
        Err(TranslateError::Untranslatable)
    );
}
