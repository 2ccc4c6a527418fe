//! Hostile Teredo traffic: a seeded generator of random and malformed UDP payloads for a
//! Teredo server (RFC 4380 §5.1.1 framing) and a rate-limited sender spreading them over many
//! source ports. Used by the `teredo-flood` binary and by the netns flood test.
//!
//! The mix ([`Kind`]): random bytes of random length 0..=1500; truncated and garbage
//! authentication headers (`00 01 ..`); origin indications (`00 00 ..`) with garbage; IPv6
//! headers with a wrong version or a lying payload length; valid-looking Router Solicitations
//! (the 61-byte qualification probe, to hit the RS rate limit); IPv6 packets whose source is a
//! Teredo address that does not match the sender (spoofing); and bubbles towards foreign or
//! random Teredo clients. Same seed, same packets.

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use gate64_wire::checksum;

/// Largest datagram generated (a typical Ethernet MTU's worth of UDP payload).
pub const MAX_LEN: usize = 1500;

/// `fe80::ffff:ffff:ffff`, the RS source Miredo uses (cone bit 0).
const RS_SRC: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xffff, 0xffff, 0xffff);
/// `fe80::8000:5445:5245:444f` ("TEREDO"), the RFC 4380 RS source with the cone bit set.
const RS_SRC_CONE: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x8000, 0x5445, 0x5245, 0x444f);
/// `ff02::2`, all-routers.
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
const NH_ICMPV6: u8 = 58;
const NH_NONE: u8 = 59;

/// SplitMix64: tiny, seedable, good enough to make garbage. Not cryptographic.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator; equal seeds give equal sequences.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `lo..=hi` as `usize`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    /// `true` with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }

    /// A random u16.
    pub fn u16(&mut self) -> u16 {
        self.next_u64() as u16
    }

    /// A random IPv4 address (any range, private and multicast included).
    pub fn ipv4(&mut self) -> Ipv4Addr {
        Ipv4Addr::from(self.next_u64() as u32)
    }
}

macro_rules! kinds {
    ($($(#[doc = $doc:literal])* $variant:ident => $label:literal, $weight:literal;)*) => {
        /// The families of datagrams the flood sends.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Kind {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Kind {
            /// Every kind, in report order.
            pub const ALL: &'static [Kind] = &[$(Kind::$variant,)*];
            /// Number of kinds.
            pub const COUNT: usize = Kind::ALL.len();

            /// A short name for reports.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Kind::$variant => $label,)*
                }
            }

            /// Relative frequency in the mix (the weights sum to 100).
            pub fn weight(self) -> u64 {
                match self {
                    $(Kind::$variant => $weight,)*
                }
            }
        }
    };
}

kinds! {
    /// Random bytes of random length 0..=1500.
    RandomBytes => "random_bytes", 15;
    /// Truncated or inconsistent authentication headers, or garbage after a valid one.
    BadAuth => "bad_auth", 15;
    /// Origin indications (which only servers send) with garbage or truncated.
    BadOrigin => "bad_origin", 10;
    /// IPv6 headers with a wrong version, a lying payload length or cut short.
    BadIpv6 => "bad_ipv6", 15;
    /// Valid-looking 61-byte Router Solicitations with random nonces.
    RouterSolicitation => "router_solicitation", 20;
    /// ICMPv6 echo requests to a corporate host from a Teredo address that does not embed
    /// the sender's IPv4 address and port.
    SpoofedSource => "spoofed_source", 15;
    /// Bubbles to Teredo clients of other servers, or to random mappings behind ours.
    Bubble => "bubble", 10;
}

/// Picks a kind by weight and writes one datagram into `buf`; returns the kind and length.
pub fn generate(rng: &mut Rng, ctx: &Context, buf: &mut [u8; MAX_LEN]) -> (Kind, usize) {
    let mut pick = rng.below(100);
    let kind = Kind::ALL
        .iter()
        .copied()
        .find(|k| {
            if pick < k.weight() {
                true
            } else {
                pick -= k.weight();
                false
            }
        })
        .unwrap_or(Kind::RandomBytes);
    (kind, generate_kind(kind, rng, ctx, buf))
}

/// What the generator needs to know about the target network.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    /// The server under attack (embedded in Teredo addresses that should look like its own).
    pub server: Ipv4Addr,
    /// Where spoofed packets are addressed (a corporate host).
    pub victim: Ipv6Addr,
}

impl Default for Context {
    fn default() -> Self {
        Context {
            server: Ipv4Addr::new(192, 0, 2, 1),
            victim: Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 2),
        }
    }
}

/// Writes one datagram of `kind` into `buf`; returns its length.
pub fn generate_kind(kind: Kind, rng: &mut Rng, ctx: &Context, buf: &mut [u8; MAX_LEN]) -> usize {
    match kind {
        Kind::RandomBytes => {
            let len = rng.range(0, MAX_LEN);
            rng.fill(&mut buf[..len]);
            len
        }
        Kind::BadAuth => bad_auth(rng, buf),
        Kind::BadOrigin => bad_origin(rng, ctx, buf),
        Kind::BadIpv6 => bad_ipv6(rng, buf),
        Kind::RouterSolicitation => {
            let src = if rng.chance(1, 4) {
                RS_SRC_CONE
            } else {
                RS_SRC
            };
            router_solicitation(rng, &src, buf)
        }
        Kind::SpoofedSource => spoofed(rng, ctx, buf),
        Kind::Bubble => bubble(rng, ctx, buf),
    }
}

/// A Teredo address (RFC 4380 §4): `2001:0:<server>:<flags>:<port ^ ffff>:<client ^ ffffffff>`.
pub fn teredo_address(server: Ipv4Addr, flags: u16, port: u16, client: Ipv4Addr) -> Ipv6Addr {
    let s = server.octets();
    let c = u32::from(client) ^ 0xffff_ffff;
    Ipv6Addr::new(
        0x2001,
        0,
        u16::from_be_bytes([s[0], s[1]]),
        u16::from_be_bytes([s[2], s[3]]),
        flags,
        port ^ 0xffff,
        (c >> 16) as u16,
        c as u16,
    )
}

/// `00 01 00 00 <nonce> 00`: an authentication header with no client id or auth value.
fn auth_header(rng: &mut Rng, buf: &mut [u8]) -> usize {
    buf[..4].copy_from_slice(&[0x00, 0x01, 0x00, 0x00]);
    rng.fill(&mut buf[4..12]);
    buf[12] = 0;
    13
}

fn ipv6_header(buf: &mut [u8], payload_len: u16, nh: u8, src: &Ipv6Addr, dst: &Ipv6Addr) {
    buf[..4].copy_from_slice(&[0x60, 0, 0, 0]);
    buf[4..6].copy_from_slice(&payload_len.to_be_bytes());
    buf[6] = nh;
    buf[7] = 255;
    buf[8..24].copy_from_slice(&src.octets());
    buf[24..40].copy_from_slice(&dst.octets());
}

/// The qualification probe: auth header + IPv6 `src` → ff02::2 + ICMPv6 RS (61 bytes).
fn router_solicitation(rng: &mut Rng, src: &Ipv6Addr, buf: &mut [u8]) -> usize {
    let at = auth_header(rng, buf);
    ipv6_header(&mut buf[at..], 8, NH_ICMPV6, src, &ALL_ROUTERS);
    let icmp = &mut buf[at + 40..at + 48];
    icmp.copy_from_slice(&[133, 0, 0, 0, 0, 0, 0, 0]);
    let ck = checksum::upper_layer_v6(src, &ALL_ROUTERS, NH_ICMPV6, icmp);
    icmp[2..4].copy_from_slice(&ck.to_be_bytes());
    at + 48
}

/// ICMPv6 echo request (id, seq and `data` random) from `src` to `dst` at `buf[0..]`.
fn echo_request(
    rng: &mut Rng,
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    data: usize,
    buf: &mut [u8],
) -> usize {
    let plen = 8 + data;
    ipv6_header(buf, plen as u16, NH_ICMPV6, src, dst);
    let icmp = &mut buf[40..40 + plen];
    icmp[..4].copy_from_slice(&[128, 0, 0, 0]);
    rng.fill(&mut icmp[4..]);
    let ck = checksum::upper_layer_v6(src, dst, NH_ICMPV6, icmp);
    icmp[2..4].copy_from_slice(&ck.to_be_bytes());
    40 + plen
}

fn bad_auth(rng: &mut Rng, buf: &mut [u8]) -> usize {
    buf[0] = 0x00;
    buf[1] = 0x01;
    match rng.below(4) {
        // Cut short anywhere inside the 13-byte minimum.
        0 => {
            let len = rng.range(2, 12);
            rng.fill(&mut buf[2..len]);
            len
        }
        // Client-id / auth-value lengths that run past the end of the datagram.
        1 => {
            let len = rng.range(4, 200);
            rng.fill(&mut buf[2..len]);
            buf[2] = buf[2].max(100);
            len
        }
        // A Router Solicitation whose confirmation byte is non-zero.
        2 => {
            let len = router_solicitation(rng, &RS_SRC, buf);
            buf[12] = 1 + (rng.below(255) as u8);
            len
        }
        // A valid auth header followed by garbage instead of IPv6.
        _ => {
            let at = auth_header(rng, buf);
            let len = rng.range(at, 300);
            rng.fill(&mut buf[at..len]);
            buf[at] &= 0x5f; // never version 6
            len
        }
    }
}

fn bad_origin(rng: &mut Rng, ctx: &Context, buf: &mut [u8]) -> usize {
    buf[0] = 0x00;
    buf[1] = 0x00;
    rng.fill(&mut buf[2..8]);
    match rng.below(4) {
        // Truncated origin indication.
        0 => rng.range(2, 7),
        // Origin indication followed by garbage.
        1 => {
            let len = rng.range(8, 400);
            rng.fill(&mut buf[8..len]);
            len
        }
        // Origin indication (which only a server may send) followed by a plausible packet.
        2 => {
            let src = teredo_address(ctx.server, rng.u16() & 0x3cff, rng.u16(), rng.ipv4());
            8 + echo_request(rng, &src, &ctx.victim, 16, &mut buf[8..])
        }
        // Two origin indications in a row.
        _ => {
            buf[8] = 0;
            buf[9] = 0;
            rng.fill(&mut buf[10..16]);
            let len = rng.range(16, 120);
            rng.fill(&mut buf[16..len]);
            len
        }
    }
}

fn bad_ipv6(rng: &mut Rng, buf: &mut [u8]) -> usize {
    let src = teredo_address(rng.ipv4(), rng.u16(), rng.u16(), rng.ipv4());
    let dst = Ipv6Addr::from(u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64()));
    let data = rng.range(0, 200);
    let len = echo_request(rng, &src, &dst, data, buf);
    let plen = (len - 40) as u16;
    match rng.below(4) {
        // Wrong IP version (anything but 6).
        0 => {
            let v = [0u8, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15][rng.below(15) as usize];
            buf[0] = (v << 4) | (buf[0] & 0x0f);
            len
        }
        // Payload length larger than what follows.
        1 => {
            let lie = plen.saturating_add(1 + rng.below(2000) as u16);
            buf[4..6].copy_from_slice(&lie.to_be_bytes());
            len
        }
        // Payload length smaller than what follows (trailing garbage), or zero (jumbogram
        // without a hop-by-hop header).
        2 => {
            let lie = if rng.chance(1, 2) {
                0
            } else {
                rng.below(u64::from(plen)) as u16
            };
            buf[4..6].copy_from_slice(&lie.to_be_bytes());
            len
        }
        // Cut inside the fixed header.
        _ => rng.range(1, 39),
    }
}

fn spoofed(rng: &mut Rng, ctx: &Context, buf: &mut [u8]) -> usize {
    // Flags: cone bit and random bits, as RFC 5991 clients do; the mapping is random and so
    // (all but certainly) not the sender's.
    let src = teredo_address(ctx.server, rng.u16() & 0xbcff, rng.u16(), rng.ipv4());
    let data = rng.range(8, 64);
    echo_request(rng, &src, &ctx.victim, data, buf)
}

fn bubble(rng: &mut Rng, ctx: &Context, buf: &mut [u8]) -> usize {
    let src = teredo_address(ctx.server, rng.u16() & 0xbcff, rng.u16(), rng.ipv4());
    let server = if rng.chance(1, 2) {
        rng.ipv4()
    } else {
        ctx.server
    };
    let dst = teredo_address(server, rng.u16() & 0xbcff, rng.u16(), rng.ipv4());
    ipv6_header(buf, 0, NH_NONE, &src, &dst);
    40
}

/// Settings of [`run`].
#[derive(Debug, Clone)]
pub struct FloodConfig {
    /// Where to send (the Teredo server socket).
    pub target: SocketAddrV4,
    /// Datagrams to send.
    pub count: u64,
    /// Maximum datagrams per second; 0 = as fast as possible.
    pub pps: u64,
    /// PRNG seed.
    pub seed: u64,
    /// Number of sockets (distinct source ports) to spread the datagrams over.
    pub sources: usize,
    /// Local address to bind the sockets to (`0.0.0.0` = any).
    pub bind: Ipv4Addr,
    /// Stop after this long even if `count` was not reached.
    pub max_duration: Option<Duration>,
    /// Addresses the generator needs.
    pub context: Context,
}

impl Default for FloodConfig {
    fn default() -> Self {
        FloodConfig {
            target: SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 3544),
            count: 1_000_000,
            pps: 150_000,
            seed: 1,
            sources: 256,
            bind: Ipv4Addr::UNSPECIFIED,
            max_duration: None,
            context: Context::default(),
        }
    }
}

/// What [`run`] did.
#[derive(Debug, Clone, Default)]
pub struct FloodReport {
    /// Datagrams handed to the kernel.
    pub sent: u64,
    /// `send_to` failures (e.g. `ENOBUFS`); those datagrams were not retried.
    pub send_errors: u64,
    /// Sent datagrams per [`Kind`], indexed like [`Kind::ALL`].
    pub by_kind: [u64; Kind::COUNT],
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Whether the run ended early (stop flag or `max_duration`).
    pub stopped_early: bool,
}

impl fmt::Display for FloodReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        writeln!(
            f,
            "sent {} datagrams in {:.2} s ({:.0} pps), {} send errors{}",
            self.sent,
            secs,
            self.sent as f64 / secs.max(1e-9),
            self.send_errors,
            if self.stopped_early {
                ", stopped early"
            } else {
                ""
            }
        )?;
        for (kind, n) in Kind::ALL.iter().zip(self.by_kind) {
            writeln!(f, "  {:<20} {n}", kind.as_str())?;
        }
        Ok(())
    }
}

/// Sends `cfg.count` generated datagrams to `cfg.target`, each from a random one of
/// `cfg.sources` sockets, paced to at most `cfg.pps`. Returns early when `stop` becomes true
/// or `cfg.max_duration` passes. Only socket creation errors are returned; send errors are
/// counted.
pub fn run(cfg: &FloodConfig, stop: &AtomicBool) -> io::Result<FloodReport> {
    let sockets = (0..cfg.sources.max(1))
        .map(|_| UdpSocket::bind(SocketAddrV4::new(cfg.bind, 0)))
        .collect::<io::Result<Vec<_>>>()?;
    let mut rng = Rng::new(cfg.seed);
    let mut buf = [0u8; MAX_LEN];
    let mut report = FloodReport::default();
    let start = Instant::now();
    let pace = (cfg.pps > 0).then(|| Duration::from_secs_f64(1.0 / cfg.pps as f64));
    for i in 0..cfg.count {
        if i % 256 == 0 {
            if stop.load(Ordering::Relaxed)
                || cfg.max_duration.is_some_and(|m| start.elapsed() >= m)
            {
                report.stopped_early = true;
                break;
            }
            // Pace in batches: sleep only when more than 2 ms ahead of schedule.
            if let Some(pace) = pace {
                let due = start + pace.mul_f64(i as f64);
                let now = Instant::now();
                if due > now + Duration::from_millis(2) {
                    thread::sleep(due - now);
                }
            }
        }
        let (kind, len) = generate(&mut rng, &cfg.context, &mut buf);
        let sock = &sockets[rng.below(sockets.len() as u64) as usize];
        match sock.send_to(&buf[..len], cfg.target) {
            Ok(_) => {
                report.sent += 1;
                report.by_kind[Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0)] += 1;
            }
            Err(_) => report.send_errors += 1,
        }
    }
    report.elapsed = start.elapsed();
    Ok(report)
}

/// Bytes every reflection-attack datagram carries where a payload or trailer goes, so that a
/// victim can tell the attacker's bytes from gate64's own.
pub const MARKER: &[u8; 16] = b"G64-REFLECT-ATK!";

/// The datagrams of a reflection attack through gate64's Teredo port: each asks gate64 to
/// send something to the victim's mapping, encoded in a Teredo destination address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reflect {
    /// A bubble from the attacker's own mapping with the marker as trailing bytes.
    BubbleJunkTrailer,
    /// A bare bubble from the attacker's own mapping (gate64 may relay it, rate-limited).
    BubbleBare,
    /// A bubble with a well-formed RFC 6081 nonce trailer (may be relayed, rate-limited).
    BubbleNonceTrailer,
    /// A bubble from a native IPv6 source (RFC 4380 §5.3.1 rule 6) with the marker after it.
    NativeBubbleJunkTrailer,
    /// An 80-byte ICMPv6 echo request carrying the marker (small ICMPv6).
    SmallEcho,
    /// A UDP packet carrying the marker, 600 bytes.
    UdpPayload,
    /// An echo request whose Teredo source does not embed the sender's mapping.
    SpoofedSource,
}

impl Reflect {
    /// Every kind, sent in turn.
    pub const ALL: [Reflect; 7] = [
        Reflect::BubbleJunkTrailer,
        Reflect::BubbleBare,
        Reflect::BubbleNonceTrailer,
        Reflect::NativeBubbleJunkTrailer,
        Reflect::SmallEcho,
        Reflect::UdpPayload,
        Reflect::SpoofedSource,
    ];
}

/// Writes one reflection datagram of `kind` from the attacker's mapping `me` to the victim's
/// mapping `victim`, both under the Teredo server `server`; returns its length.
pub fn reflect_datagram(
    kind: Reflect,
    rng: &mut Rng,
    server: Ipv4Addr,
    me: SocketAddrV4,
    victim: SocketAddrV4,
    buf: &mut [u8; MAX_LEN],
) -> usize {
    let flags = rng.u16() & 0x3cff;
    let src = teredo_address(server, flags, me.port(), *me.ip());
    let dst = teredo_address(server, rng.u16() & 0x3cff, victim.port(), *victim.ip());
    match kind {
        Reflect::BubbleJunkTrailer | Reflect::BubbleBare | Reflect::BubbleNonceTrailer => {
            ipv6_header(buf, 0, NH_NONE, &src, &dst);
            let tail: &[u8] = match kind {
                Reflect::BubbleJunkTrailer => MARKER,
                Reflect::BubbleNonceTrailer => &[0x01, 0x04, 0x47, 0x36, 0x34, 0x21],
                _ => &[],
            };
            buf[40..40 + tail.len()].copy_from_slice(tail);
            40 + tail.len()
        }
        Reflect::NativeBubbleJunkTrailer => {
            let native = Ipv6Addr::new(0x2001, 0xdb8, 0x7, 0, 0, 0, 0, 1);
            ipv6_header(buf, 0, NH_NONE, &native, &dst);
            buf[40..40 + MARKER.len()].copy_from_slice(MARKER);
            40 + MARKER.len()
        }
        Reflect::SmallEcho => marked(buf, NH_ICMPV6, &src, &dst, 40),
        Reflect::UdpPayload => marked(buf, 17, &src, &dst, 560),
        Reflect::SpoofedSource => {
            let other = teredo_address(server, flags, rng.u16(), rng.ipv4());
            marked(buf, NH_ICMPV6, &other, &dst, 40)
        }
    }
}

/// An IPv6 packet with `payload` bytes of repeated [`MARKER`] (an ICMPv6 echo request header
/// first when `nh` is ICMPv6; the checksum does not matter to a reflector).
fn marked(buf: &mut [u8], nh: u8, src: &Ipv6Addr, dst: &Ipv6Addr, payload: usize) -> usize {
    ipv6_header(buf, payload as u16, nh, src, dst);
    let data = if nh == NH_ICMPV6 {
        buf[40..48].copy_from_slice(&[128, 0, 0, 0, 0, 1, 0, 1]);
        48
    } else {
        40
    };
    for (i, b) in buf[data..40 + payload].iter_mut().enumerate() {
        *b = MARKER[i % MARKER.len()];
    }
    40 + payload
}

/// Settings of [`run_reflection`].
#[derive(Debug, Clone)]
pub struct ReflectConfig {
    /// The Teredo server socket.
    pub target: SocketAddrV4,
    /// The attacker's address; its sockets' ports make its mappings.
    pub bind: Ipv4Addr,
    /// Attacker sockets.
    pub sources: usize,
    /// The mappings to reflect to.
    pub victims: Vec<SocketAddrV4>,
    /// Datagrams per second.
    pub pps: u64,
    /// How long to send.
    pub duration: Duration,
    /// PRNG seed.
    pub seed: u64,
}

/// Sends [`Reflect`] datagrams of every kind in turn towards every victim, spread over the
/// attacker's sockets, paced to `cfg.pps`, for `cfg.duration` or until `stop`. Returns the
/// datagrams sent per kind (indexed like [`Reflect::ALL`]).
pub fn run_reflection(cfg: &ReflectConfig, stop: &AtomicBool) -> io::Result<[u64; 7]> {
    let sockets = (0..cfg.sources.max(1))
        .map(|_| UdpSocket::bind(SocketAddrV4::new(cfg.bind, 0)))
        .collect::<io::Result<Vec<_>>>()?;
    let mapped = sockets
        .iter()
        .map(|s| match s.local_addr()? {
            std::net::SocketAddr::V4(a) => Ok(a),
            a => Err(io::Error::other(format!("not IPv4: {a}"))),
        })
        .collect::<io::Result<Vec<_>>>()?;
    let mut rng = Rng::new(cfg.seed);
    let mut buf = [0u8; MAX_LEN];
    let mut sent = [0u64; 7];
    let start = Instant::now();
    let pace = Duration::from_secs_f64(1.0 / cfg.pps.max(1) as f64);
    let mut n: u64 = 0;
    while start.elapsed() < cfg.duration && !stop.load(Ordering::Relaxed) {
        let due = start + pace.mul_f64(n as f64);
        let now = Instant::now();
        if due > now + Duration::from_millis(2) {
            thread::sleep(due - now);
        }
        let k = (n % 7) as usize;
        let s = (n / 7) as usize % sockets.len();
        let victim = cfg.victims[(n as usize / 3) % cfg.victims.len().max(1)];
        let len = reflect_datagram(
            Reflect::ALL[k],
            &mut rng,
            *cfg.target.ip(),
            mapped[s],
            victim,
            &mut buf,
        );
        if sockets[s].send_to(&buf[..len], cfg.target).is_ok() {
            sent[k] += 1;
        }
        n += 1;
    }
    Ok(sent)
}

/// What arrived at a victim's socket, judged without gate64's code: a bubble (RFC 4380 §2.8:
/// IPv6, next header 59, payload length 0) behind optional Teredo headers, then nothing or
/// well-formed RFC 6081 trailers; anything else is foreign.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VictimCounts {
    /// Datagrams received.
    pub datagrams: u64,
    /// Bubbles with nothing after the IPv6 header.
    pub bare_bubbles: u64,
    /// Bubbles followed by well-formed RFC 6081 trailers.
    pub bubbles_with_trailers: u64,
    /// Anything else (a relayed payload, a bubble with junk after it).
    pub foreign: u64,
    /// Datagrams that contain [`MARKER`] anywhere.
    pub marked: u64,
}

impl VictimCounts {
    /// Classifies and counts one datagram.
    pub fn add(&mut self, d: &[u8]) {
        self.datagrams += 1;
        if d.windows(MARKER.len()).any(|w| w == MARKER) {
            self.marked += 1;
        }
        match bubble_tail(d) {
            Some([]) => self.bare_bubbles += 1,
            Some(t) if well_formed_trailers(t) => self.bubbles_with_trailers += 1,
            _ => self.foreign += 1,
        }
    }
}

/// The bytes after the IPv6 header of a bubble behind optional authentication and origin
/// headers; `None` when `d` is not such a bubble.
fn bubble_tail(d: &[u8]) -> Option<&[u8]> {
    let mut at = 0;
    if d.get(..2)? == [0, 1] {
        let (id, au) = (usize::from(*d.get(2)?), usize::from(*d.get(3)?));
        at += 13 + id + au;
    }
    if d.get(at..at + 2)? == [0, 0] {
        at += 8;
    }
    let ip = d.get(at..at + 40)?;
    let bubble = ip[0] >> 4 == 6 && ip[4] == 0 && ip[5] == 0 && ip[6] == NH_NONE;
    bubble.then(|| &d[at + 40..])
}

/// RFC 6081 §4 trailers: type, length, value; nonce (1, 4 bytes), alternate address (3,
/// 2 + 6n bytes), neighbor discovery (4, 4 bytes), random port (5, 2 bytes).
fn well_formed_trailers(mut t: &[u8]) -> bool {
    while !t.is_empty() {
        let (Some(&kind), Some(&len)) = (t.first(), t.get(1)) else {
            return false;
        };
        let len = usize::from(len);
        let ok = match kind {
            1 | 4 => len == 4,
            5 => len == 2,
            3 => len >= 8 && (len - 2).is_multiple_of(6),
            _ => false,
        };
        if !ok || t.len() < 2 + len {
            return false;
        }
        t = &t[2 + len..];
    }
    true
}

/// Settings of [`run_peer_flood`].
#[derive(Debug, Clone)]
pub struct PeerFloodConfig {
    /// The Teredo server socket.
    pub target: SocketAddrV4,
    /// The flooding host's address.
    pub bind: Ipv4Addr,
    /// Sockets (mappings) to send from.
    pub sources: usize,
    /// Datagrams per second.
    pub pps: u64,
    /// How long to send.
    pub duration: Duration,
}

/// Fills a Teredo peer table from one host: from each of `cfg.sources` sockets,
/// bubbles whose source is that socket's own mapping (so they pass RFC 4380 §5.4.2) under
/// every flag value in turn, to the server's link-local address. Returns datagrams sent.
pub fn run_peer_flood(cfg: &PeerFloodConfig, stop: &AtomicBool) -> io::Result<u64> {
    let sockets = (0..cfg.sources.max(1))
        .map(|_| UdpSocket::bind(SocketAddrV4::new(cfg.bind, 0)))
        .collect::<io::Result<Vec<_>>>()?;
    let mut ports = Vec::with_capacity(sockets.len());
    for s in &sockets {
        ports.push(s.local_addr()?.port());
    }
    let server = *cfg.target.ip();
    let c = u32::from(server) ^ 0xffff_ffff;
    // RFC 4380 §5.3.2: fe80::8000:<port ^ ffff>:<server ^ ffffffff>.
    let server_ll = Ipv6Addr::new(
        0xfe80,
        0,
        0,
        0,
        0x8000,
        cfg.target.port() ^ 0xffff,
        (c >> 16) as u16,
        c as u16,
    );
    let mut buf = [0u8; 40];
    let start = Instant::now();
    let pace = Duration::from_secs_f64(1.0 / cfg.pps.max(1) as f64);
    let mut n: u64 = 0;
    while start.elapsed() < cfg.duration && !stop.load(Ordering::Relaxed) {
        if n.is_multiple_of(64) {
            let due = start + pace.mul_f64(n as f64);
            let now = Instant::now();
            if due > now + Duration::from_millis(2) {
                thread::sleep(due - now);
            }
        }
        let i = n as usize % sockets.len();
        let flags = (n / sockets.len() as u64) as u16;
        let src = teredo_address(server, flags, ports[i], cfg.bind);
        ipv6_header(&mut buf, 0, NH_NONE, &src, &server_ll);
        let _ = sockets[i].send_to(&buf, cfg.target);
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_wire::{icmpv6, ipv6, teredo};

    fn one(kind: Kind, seed: u64) -> Vec<u8> {
        let mut buf = [0u8; MAX_LEN];
        let len = generate_kind(kind, &mut Rng::new(seed), &Context::default(), &mut buf);
        buf[..len].to_vec()
    }

    #[test]
    fn weights_sum_to_100() {
        assert_eq!(Kind::ALL.iter().map(|k| k.weight()).sum::<u64>(), 100);
    }

    #[test]
    fn deterministic_per_seed() {
        for kind in Kind::ALL {
            assert_eq!(one(*kind, 7), one(*kind, 7), "{kind:?}");
        }
        assert_ne!(one(Kind::RandomBytes, 1), one(Kind::RandomBytes, 2));
    }

    // RFC 4380 §5.2.1 / teredo-iphttps.md §1.4: the RS is 61 bytes of UDP payload
    // (13 auth + 40 + 8), with a valid ICMPv6 checksum.
    #[test]
    fn router_solicitation_is_a_valid_61_byte_probe() {
        for seed in 0..32 {
            let b = one(Kind::RouterSolicitation, seed);
            assert_eq!(b.len(), 61);
            assert_eq!(&b[..4], &[0, 1, 0, 0]);
            assert_eq!(b[12], 0);
            let p = teredo::Packet::parse(&b).expect("parses as Teredo");
            assert!(p.auth.is_some() && p.origin.is_none());
            assert_eq!(p.ipv6.dst(), ALL_ROUTERS);
            assert!([RS_SRC, RS_SRC_CONE].contains(&p.ipv6.src()));
            assert_eq!(icmpv6::type_code(&p.ipv6), Some((133, 0)));
            assert!(icmpv6::checksum_ok(&p.ipv6));
        }
    }

    // RFC 4380 §4 layout; teredo-iphttps.md §3 example 2001:0:c000:201:XXXX:f225:39cc:9bf5.
    #[test]
    fn teredo_address_layout() {
        let a = teredo_address(
            Ipv4Addr::new(192, 0, 2, 1),
            0x041b,
            3546,
            Ipv4Addr::new(198, 51, 100, 10),
        );
        assert_eq!(
            a,
            "2001:0:c000:201:41b:f225:39cc:9bf5"
                .parse::<Ipv6Addr>()
                .unwrap()
        );
    }

    #[test]
    fn spoofed_packets_are_well_formed_echo_requests() {
        for seed in 0..32 {
            let b = one(Kind::SpoofedSource, seed);
            let p = ipv6::Packet::new_checked(&b).expect("valid IPv6");
            assert_eq!(p.src().segments()[..4], [0x2001, 0, 0xc000, 0x0201]);
            assert_eq!(p.dst(), Context::default().victim);
            assert_eq!(icmpv6::type_code(&p), Some((128, 0)));
            assert!(icmpv6::checksum_ok(&p));
        }
    }

    #[test]
    fn bad_ipv6_never_parses_cleanly_as_declared() {
        for seed in 0..200 {
            let b = one(Kind::BadIpv6, seed);
            let declared = b
                .get(4..6)
                .map(|l| u16::from_be_bytes([l[0], l[1]]) as usize + 40);
            let version_ok = b.first().is_some_and(|v| v >> 4 == 6);
            assert!(
                !version_ok || b.len() < 40 || declared != Some(b.len()),
                "seed {seed}: {b:02x?}"
            );
        }
    }

    #[test]
    fn mix_covers_every_kind_within_bounds() {
        let mut rng = Rng::new(1);
        let mut buf = [0u8; MAX_LEN];
        let mut seen = [0u32; Kind::COUNT];
        for _ in 0..20_000 {
            let (kind, len) = generate(&mut rng, &Context::default(), &mut buf);
            assert!(len <= MAX_LEN);
            seen[Kind::ALL.iter().position(|k| *k == kind).unwrap()] += 1;
            match kind {
                Kind::BadAuth => assert_eq!(&buf[..2], &[0, 1]),
                Kind::BadOrigin => assert_eq!(&buf[..2], &[0, 0]),
                _ => {}
            }
        }
        for (kind, n) in Kind::ALL.iter().zip(seen) {
            let expect = kind.weight() as u32 * 200;
            assert!(n > expect / 2 && n < expect * 2, "{kind:?}: {n}");
        }
    }

    #[test]
    fn run_sends_to_a_local_socket() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let std::net::SocketAddr::V4(target) = rx.local_addr().unwrap() else {
            unreachable!()
        };
        let cfg = FloodConfig {
            target,
            count: 50,
            pps: 0,
            sources: 4,
            bind: Ipv4Addr::LOCALHOST,
            ..FloodConfig::default()
        };
        let report = run(&cfg, &AtomicBool::new(false)).unwrap();
        assert_eq!(report.sent + report.send_errors, 50);
        assert_eq!(report.by_kind.iter().sum::<u64>(), report.sent);
        let mut buf = [0u8; 2048];
        assert!(rx.recv_from(&mut buf).is_ok(), "{report}");
    }

    #[test]
    fn stop_flag_ends_early() {
        let cfg = FloodConfig {
            target: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9),
            count: u64::MAX,
            sources: 1,
            bind: Ipv4Addr::LOCALHOST,
            ..FloodConfig::default()
        };
        let report = run(&cfg, &AtomicBool::new(true)).unwrap();
        assert!(report.stopped_early);
        assert_eq!(report.sent, 0);
    }

    #[test]
    fn victim_counts_tell_bubbles_from_payloads() {
        let mut rng = Rng::new(3);
        let server = Ipv4Addr::new(192, 0, 2, 1);
        let me: SocketAddrV4 = "203.0.113.20:4000".parse().unwrap();
        let victim: SocketAddrV4 = "198.18.0.10:5001".parse().unwrap();
        let mut buf = [0u8; MAX_LEN];
        let mut c = VictimCounts::default();
        for kind in Reflect::ALL {
            let len = reflect_datagram(kind, &mut rng, server, me, victim, &mut buf);
            // As gate64 would relay it: origin indication first.
            let mut d = vec![0, 0, 1, 2, 3, 4, 5, 6];
            d.extend_from_slice(&buf[..len]);
            c.add(&d);
        }
        assert_eq!(c.datagrams, 7);
        assert_eq!(c.bare_bubbles, 1);
        assert_eq!(c.bubbles_with_trailers, 1);
        assert_eq!(c.foreign, 5);
        assert_eq!(c.marked, 5);
    }
}
