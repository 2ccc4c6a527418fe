//! The Teredo client role (RFC 4380 §5.2, RFC 5991 flags), sans-IO: qualification with the
//! server (RS → RA), the periodic refresh, and receiving data.
//!
//! The client behaves like Miredo's: every Router Solicitation carries an authentication header
//! with a fresh 8-byte nonce (no client identifier, no authentication value) and comes from
//! `fe80::ffff:ffff:ffff` (cone flag clear; RFC 5991 deprecates the cone probe). An RA is
//! accepted only when it echoes that nonce with confirmation byte 0, carries an origin
//! indication, is addressed to exactly the RS source, and has one /64 Prefix Information
//! option whose bits 32–63 are the server IPv4 address. The Teredo address is then the prefix,
//! 12 random flag bits (mask `0x3CFF`) and the mapped address from the origin indication.
//!
//! Timers (RFC 4380 §5.2.1, §5.2.5; Miredo's values): an unanswered RS is repeated every
//! [`QUALIFY_RETRY`] up to [`QUALIFY_TRIES`] times, then again after [`QUALIFY_PAUSE`]; once
//! qualified the client refreshes with an RS every [`REFRESH_INTERVAL`].
//!
//! Data packets are sent bare (no Teredo header) to the server, or, for a native IPv6 peer
//! whose relay a probe found ([`Client::probe`], RFC 4380 §5.2.9), to that relay. Nothing
//! here opens a socket or reads a clock: the driver calls [`Client::poll_transmit`] when
//! [`Client::poll_timeout`] is due, and passes every datagram received from the server (or a
//! relay) to [`Client::handle`].
//!
//! The RS nonces and probe tokens are what stops an off-path host from forging an RA or a
//! probe answer, so a real client draws them from the driver's cryptographic generator
//! ([`Client::with_random`]); [`Client::new`]'s seeded generator is for tests, the demo and
//! load generators, whose clients need reproducibility rather than secrecy.

mod peers;

pub use peers::{PEER_LIFETIME, PEERS, PROBE_LEN, PROBE_RETRY, PROBE_TRIES};

use crate::addr::{self, Address};
use gate64_wire::{icmpv6, ipv6, teredo as tw};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// Time to wait for an RA before repeating the RS (RFC 4380 §5.2.1 `T`).
pub const QUALIFY_RETRY: Duration = Duration::from_secs(4);
/// RS tries before pausing (RFC 4380 §5.2.1 `N`).
pub const QUALIFY_TRIES: u32 = 3;
/// Pause after [`QUALIFY_TRIES`] unanswered solicitations (Miredo: 100 s).
pub const QUALIFY_PAUSE: Duration = Duration::from_secs(100);
/// Refresh interval once qualified (RFC 4380 §5.2.5: at most 30 s).
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(30);
/// Bytes of the qualification RS: 13-byte authentication header + 40-byte IPv6 header + 8-byte
/// Router Solicitation.
pub const RS_LEN: usize = tw::AUTH_MIN_LEN + ipv6::HEADER_LEN + 8;
/// The RS source Miredo uses, and so do we: `fe80::ffff:ffff:ffff`.
pub const RS_SOURCE: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xffff, 0xffff, 0xffff);
/// The tunnel MTU when the RA carries no MTU option (RFC 4380 §5.1.2).
pub const DEFAULT_MTU: u32 = 1280;
/// RFC 5991: the flag bits a client fills at random (`C R A A A A U G A A A A A A A A`).
pub const RANDOM_FLAGS_MASK: u16 = 0x3CFF;

/// What an accepted datagram meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A valid RA gave the client a Teredo address: the first qualification, or a refresh that
    /// revealed a new NAT mapping.
    Qualified {
        /// The client's Teredo address.
        address: Ipv6Addr,
        /// Tunnel MTU (the RA's MTU option, else 1280).
        mtu: u32,
    },
    /// A refresh RA confirmed the current address.
    Refreshed,
    /// An IPv6 data packet for the client at `datagram[offset..offset + len]`.
    Packet {
        /// Where the IPv6 packet starts in the datagram.
        offset: usize,
        /// Its length (bytes after it, e.g. RFC 6081 trailers, are excluded).
        len: usize,
    },
    /// A bubble (IPv6 header only): it opened NAT state; nothing to deliver.
    Bubble,
    /// The answer to a direct IPv6 connectivity test ([`Client::probe`]): packets for its
    /// peer now go to `relay`, the address it came from. Nothing to deliver.
    RelayFound {
        /// The peer's relay.
        relay: SocketAddrV4,
    },
}

/// Why a datagram was refused. Always the peer's fault; never fatal for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Not a well-formed Teredo datagram.
    #[error("not a Teredo datagram: {0}")]
    Malformed(gate64_wire::Error),
    /// An authenticated datagram while no RS is outstanding, or with another nonce.
    #[error("authentication header with an unexpected nonce")]
    NonceMismatch,
    /// The server set the confirmation byte: its key changed (RFC 4380 §5.2.2).
    #[error("server set the confirmation byte")]
    AuthenticationFailed,
    /// The RA has no origin indication, or one with IPv4 0.0.0.0.
    #[error("router advertisement without origin indication")]
    MissingOrigin,
    /// The RA breaks a rule (wrong destination, prefix length, MTU, not an RA, ...).
    #[error("bad router advertisement: {0}")]
    BadAdvertisement(&'static str),
    /// The RA's prefix does not embed the server the RS was sent to.
    #[error("advertised prefix does not embed our server")]
    WrongServer,
    /// An unauthenticated Router Advertisement (or other link-local ICMPv6) was offered.
    #[error("unauthenticated link-local packet")]
    Unauthenticated,
    /// Data arrived before the client had an address.
    #[error("data before qualification")]
    NotQualified,
    /// Data addressed to another address than the client's.
    #[error("data for another address")]
    NotForUs,
}

// Not `#[from]`: that would also make the wire error the `source`, and the message above
// already includes it, so error chains would print it twice.
impl From<gate64_wire::Error> for Error {
    fn from(e: gate64_wire::Error) -> Self {
        Error::Malformed(e)
    }
}

/// Qualification progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Soliciting; `tries` RSs sent since the last pause.
    Qualifying { tries: u32 },
    /// Has an address; refreshing.
    Qualified,
}

/// Where a client's nonces, probe tokens and address flags come from.
#[derive(Debug, Clone, Copy)]
enum Random {
    /// splitmix64 from a seed: reproducible, and predictable from one output.
    Seeded(u64),
    /// The driver's cryptographic generator.
    Fill(fn(&mut [u8; 8])),
}

impl Random {
    fn next_u64(&mut self) -> u64 {
        match self {
            Random::Seeded(state) => splitmix(state),
            Random::Fill(fill) => {
                let mut b = [0; 8];
                fill(&mut b);
                u64::from_ne_bytes(b)
            }
        }
    }
}

/// A Teredo client (one per UDP socket).
#[derive(Debug, Clone)]
pub struct Client {
    server: SocketAddrV4,
    rng: Random,
    state: State,
    /// The nonce of the outstanding RS, if any.
    nonce: Option<[u8; 8]>,
    /// When the next RS is due; `None` before the first one (due at once).
    next_rs: Option<Instant>,
    teredo: Option<Address>,
    mtu: u32,
    peers: peers::Peers,
}

impl Client {
    /// A client of the Teredo server at `server` (address and port) whose nonces, probe
    /// tokens and address flags come from splitmix64 seeded with `nonce_seed`: reproducible,
    /// for tests, the demo and load generators. One nonce gives the next ones away; a client
    /// on a network others share uses [`Client::with_random`].
    pub fn new(server: SocketAddrV4, nonce_seed: u64) -> Self {
        Self::with(server, Random::Seeded(nonce_seed))
    }

    /// A client whose nonces, probe tokens and address flags come from `fill`, which fills
    /// its 8 bytes from a cryptographic generator (the driver's; this crate reads none).
    pub fn with_random(server: SocketAddrV4, fill: fn(&mut [u8; 8])) -> Self {
        Self::with(server, Random::Fill(fill))
    }

    fn with(server: SocketAddrV4, rng: Random) -> Self {
        Client {
            server,
            rng,
            state: State::Qualifying { tries: 0 },
            nonce: None,
            next_rs: None,
            teredo: None,
            mtu: DEFAULT_MTU,
            peers: peers::Peers::default(),
        }
    }

    /// The server this client qualifies with; send every datagram there.
    pub fn server(&self) -> SocketAddrV4 {
        self.server
    }

    /// The Teredo address, once qualified.
    pub fn address(&self) -> Option<Ipv6Addr> {
        self.teredo.map(|a| a.encode())
    }

    /// The NAT mapping the server reported, once qualified.
    pub fn mapped(&self) -> Option<SocketAddrV4> {
        self.teredo.map(|a| a.mapped)
    }

    /// The tunnel MTU (1280 until an RA says otherwise).
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// True once the client has an address.
    pub fn is_qualified(&self) -> bool {
        self.state == State::Qualified
    }

    /// When [`Client::poll_transmit`] has something to send next. `None` before the first call
    /// to it: the first RS is due at once.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_rs
    }

    /// Writes the RS into `out` when one is due at `now` and returns its length
    /// ([`RS_LEN`]); send it to [`Client::server`]. `None` when nothing is due or `out` is
    /// shorter than [`RS_LEN`].
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        if self.next_rs.is_some_and(|t| now < t) || out.len() < RS_LEN {
            return None;
        }
        let nonce = self.next_u64().to_be_bytes();
        let auth = tw::Auth {
            client_id: &[],
            auth_value: &[],
            nonce,
            confirmation: 0,
        };
        let a = auth.emit(out).ok()?;
        let r = icmpv6::emit_router_solicitation(out.get_mut(a..)?, &RS_SOURCE).ok()?;
        self.nonce = Some(nonce);
        self.next_rs = Some(match &mut self.state {
            State::Qualifying { tries } => {
                *tries += 1;
                if *tries >= QUALIFY_TRIES {
                    *tries = 0;
                    now + QUALIFY_RETRY + QUALIFY_PAUSE
                } else {
                    now + QUALIFY_RETRY
                }
            }
            State::Qualified => now + REFRESH_INTERVAL,
        });
        Some(a + r)
    }

    /// [`Client::handle`] for a datagram that came from `from`: the answer to a probe
    /// ([`Client::probe`]) makes `from` the peer's relay ([`Event::RelayFound`]); other
    /// packets from a peer through its relay keep that relay in use.
    pub fn handle_from(
        &mut self,
        now: Instant,
        datagram: &[u8],
        from: SocketAddrV4,
    ) -> Result<Event, Error> {
        let ev = self.handle(now, datagram)?;
        if let Event::Packet { offset, len } = ev
            && let Some(pkt) = datagram.get(offset..offset + len)
            && let Ok(p) = ipv6::Packet::new_checked(pkt)
            && self.peers.received(now, &p, from)
        {
            return Ok(Event::RelayFound { relay: from });
        }
        Ok(ev)
    }

    /// Processes a datagram received from the server or a relay (without relay selection:
    /// see [`Client::handle_from`]).
    pub fn handle(&mut self, now: Instant, datagram: &[u8]) -> Result<Event, Error> {
        let pkt = tw::Packet::parse(datagram)?;
        if let Some(auth) = pkt.auth {
            return self.handle_advertisement(now, &pkt, &auth);
        }
        let ip6 = pkt.ipv6;
        if ip6.is_bubble() {
            return Ok(Event::Bubble);
        }
        if is_link_local(&ip6.src()) && icmpv6::type_code(&ip6).is_some() {
            return Err(Error::Unauthenticated);
        }
        let mine = self.address().ok_or(Error::NotQualified)?;
        if ip6.dst() != mine {
            return Err(Error::NotForUs);
        }
        Ok(Event::Packet {
            offset: pkt.ipv6_offset,
            len: ip6.total_len(),
        })
    }

    /// Checks that `packet` is an IPv6 packet from this client's address and returns where to
    /// send it: the server (also the relay), bare, with no Teredo header (RFC 4380 §5.2.4 for
    /// non-Teredo destinations).
    pub fn encapsulate(&self, packet: &[u8]) -> Result<SocketAddrV4, Error> {
        let mine = self.address().ok_or(Error::NotQualified)?;
        let p = ipv6::Packet::new_checked(packet)?;
        if p.src() != mine {
            return Err(Error::NotForUs);
        }
        let dst = p.dst();
        if is_native(&dst)
            && let Some(relay) = self.peers.relay(&dst)
        {
            return Ok(relay);
        }
        Ok(self.server)
    }

    /// The direct IPv6 connectivity test (RFC 4380 §5.2.9) for the host's `packet`, called
    /// before [`Client::encapsulate`]: when `packet` goes to a native IPv6 peer whose relay is
    /// unknown or has not been heard from for [`PEER_LIFETIME`], and no probe is outstanding,
    /// writes an ICMPv6 echo request to that peer into `out` (at least [`PROBE_LEN`] bytes)
    /// and returns its length; send it to [`Client::server`]. Its answer, passed to
    /// [`Client::handle_from`], names the relay [`Client::encapsulate`] then sends to.
    pub fn probe(&mut self, now: Instant, packet: &[u8], out: &mut [u8]) -> Option<usize> {
        let mine = self.address()?;
        let p = ipv6::Packet::new_checked(packet).ok()?;
        let dst = p.dst();
        if p.src() != mine || !is_native(&dst) {
            return None;
        }
        self.peers.probe(now, &mine, &dst, out, &mut self.rng)
    }

    fn handle_advertisement(
        &mut self,
        now: Instant,
        pkt: &tw::Packet<'_>,
        auth: &tw::Auth<'_>,
    ) -> Result<Event, Error> {
        if self.nonce != Some(auth.nonce) {
            return Err(Error::NonceMismatch);
        }
        if auth.confirmation != 0 {
            return Err(Error::AuthenticationFailed);
        }
        let origin = pkt
            .origin
            .filter(|o| !o.0.ip().is_unspecified())
            .ok_or(Error::MissingOrigin)?;
        let ip6 = &pkt.ipv6;
        if ip6.dst() != RS_SOURCE {
            return Err(Error::BadAdvertisement("not addressed to the RS source"));
        }
        let ra = icmpv6::RouterAdvert::parse(ip6)
            .map_err(|_| Error::BadAdvertisement("not a router advertisement with one PIO"))?;
        let p = ra.prefix.octets();
        if ra.prefix_len != 64 || p[0] == 0xff {
            return Err(Error::BadAdvertisement("prefix is not a unicast /64"));
        }
        if p[..4] != addr::PREFIX {
            return Err(Error::BadAdvertisement("prefix is not 2001:0::/32"));
        }
        let server = Ipv4Addr::new(p[4], p[5], p[6], p[7]);
        if server != *self.server.ip() {
            return Err(Error::WrongServer);
        }
        let mtu = match ra.mtu {
            None => DEFAULT_MTU,
            Some(m) if (1280..=65535).contains(&m) => m,
            Some(_) => return Err(Error::BadAdvertisement("MTU outside 1280..=65535")),
        };
        self.nonce = None;
        let was = self.teredo;
        let unchanged = was.is_some_and(|a| a.server == server && a.mapped == origin.0);
        self.state = State::Qualified;
        self.next_rs = Some(now + REFRESH_INTERVAL);
        if unchanged && mtu == self.mtu {
            return Ok(Event::Refreshed);
        }
        // Miredo draws new random flags whenever the address changes (RFC 5991).
        let flags = match was {
            Some(a) if a.mapped == origin.0 => a.flags,
            _ => (self.next_u64() as u16) & RANDOM_FLAGS_MASK,
        };
        let a = Address {
            server,
            flags,
            mapped: origin.0,
        };
        if was.map(|w| w.encode()) != Some(a.encode()) {
            // The relays answered the old address.
            self.peers = peers::Peers::default();
        }
        self.teredo = Some(a);
        self.mtu = mtu;
        Ok(Event::Qualified {
            address: a.encode(),
            mtu,
        })
    }

    fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }
}

/// splitmix64: small and seedable; its output gives its state away.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn is_link_local(a: &Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}

/// A global unicast destination outside the Teredo prefix: reached through a relay.
fn is_native(a: &Ipv6Addr) -> bool {
    !addr::is_teredo(a) && !is_link_local(a) && !a.is_multicast() && !a.is_unspecified()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{Ingress, Server, ServerConfig};

    const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const MAPPED: &str = "198.51.100.10:40000";

    #[test]
    fn errors_name_their_cause_once() {
        let e = Error::from(gate64_wire::Error::Truncated);
        assert_eq!(e.to_string(), "not a Teredo datagram: truncated packet");
        assert!(std::error::Error::source(&e).is_none());
        assert_eq!(
            Error::BadAdvertisement("no prefix").to_string(),
            "bad router advertisement: no prefix"
        );
    }

    fn server() -> Server {
        Server::new(ServerConfig {
            primary: SERVER,
            secondary: Ipv4Addr::new(192, 0, 2, 2),
            port: 3544,
            allow_loopback: false,
            mtu_option: Some(1280),
        })
    }

    fn client() -> Client {
        Client::new(SocketAddrV4::new(SERVER, 3544), 7)
    }

    /// Runs `rs` through the server as if it came from `MAPPED`; returns the RA datagram.
    fn answer(s: &Server, rs: &[u8]) -> Vec<u8> {
        let remote: SocketAddrV4 = MAPPED.parse().unwrap();
        let Ok(Ingress::RouterSolicitation(sol)) = s.classify(remote, rs) else {
            panic!("server refused the RS")
        };
        let mut out = [0u8; 256];
        let (n, from) = s
            .emit_advertisement(&sol, SERVER, remote, &mut out)
            .unwrap();
        assert_eq!(from, SERVER);
        out[..n].to_vec()
    }

    // Brief §1.4: the 61-byte RS, as Miredo sends it.
    #[test]
    fn rs_layout_is_miredos() {
        let mut c = client();
        let now = Instant::now();
        let mut b = [0u8; 128];
        let n = c.poll_transmit(now, &mut b).unwrap();
        assert_eq!(n, 61);
        assert_eq!(&b[..4], &[0, 1, 0, 0], "auth header, ID-len = AU-len = 0");
        assert_eq!(b[12], 0, "confirmation byte");
        let p = tw::Packet::parse(&b[..n]).unwrap();
        assert_eq!(p.auth.unwrap().nonce, c.nonce.unwrap());
        assert!(p.origin.is_none());
        assert_eq!(p.ipv6_offset, 13);
        assert_eq!(p.ipv6.src(), RS_SOURCE);
        assert_eq!(p.ipv6.dst(), icmpv6::ALL_ROUTERS);
        assert_eq!(p.ipv6.hop_limit(), 255);
        assert_eq!(icmpv6::type_code(&p.ipv6), Some((133, 0)));
        assert!(icmpv6::checksum_ok(&p.ipv6));
        // Brief §1.4: Miredo's RS checksum from fe80::ffff:ffff:ffff.
        assert_eq!(&b[13 + 40 + 2..13 + 40 + 4], &[0x7d, 0x37]);
    }

    // RFC 4380 §5.2.1: retry every 4 s, 3 tries, then pause; refresh every 30 s.
    #[test]
    fn rfc4380_5_2_1_retry_timers() {
        let mut c = client();
        let t0 = Instant::now();
        let mut b = [0u8; 128];
        assert!(c.poll_timeout().is_none());
        assert!(c.poll_transmit(t0, &mut b).is_some());
        assert_eq!(c.poll_timeout(), Some(t0 + QUALIFY_RETRY));
        assert!(
            c.poll_transmit(t0 + Duration::from_secs(1), &mut b)
                .is_none()
        );
        let t1 = t0 + QUALIFY_RETRY;
        assert!(c.poll_transmit(t1, &mut b).is_some());
        let t2 = t1 + QUALIFY_RETRY;
        assert!(c.poll_transmit(t2, &mut b).is_some());
        assert_eq!(c.poll_timeout(), Some(t2 + QUALIFY_RETRY + QUALIFY_PAUSE));
        let t3 = t2 + QUALIFY_RETRY + QUALIFY_PAUSE;
        let n = c.poll_transmit(t3, &mut b).unwrap();
        let ra = answer(&server(), &b[..n]);
        assert!(matches!(c.handle(t3, &ra), Ok(Event::Qualified { .. })));
        assert_eq!(c.poll_timeout(), Some(t3 + REFRESH_INTERVAL));
    }

    // RFC 4380 §5.2.1 against our own server, back to back.
    #[test]
    fn qualifies_against_server() {
        let s = server();
        let mut c = client();
        let now = Instant::now();
        let mut b = [0u8; 128];
        let n = c.poll_transmit(now, &mut b).unwrap();
        let ra = answer(&s, &b[..n]);
        let Ok(Event::Qualified { address, mtu }) = c.handle(now, &ra) else {
            panic!("not qualified")
        };
        assert_eq!(mtu, 1280);
        assert!(c.is_qualified());
        assert_eq!(c.address(), Some(address));
        let a = Address::decode(&address).unwrap();
        assert_eq!(a.server, SERVER);
        assert_eq!(a.mapped, MAPPED.parse::<SocketAddrV4>().unwrap());
        assert_eq!(a.flags & !RANDOM_FLAGS_MASK, 0, "C, R, U, G clear");
        assert!(s.is_own_client(&a));
        // The same RA again: its nonce was used up.
        assert_eq!(c.handle(now, &ra), Err(Error::NonceMismatch));
        // Refresh: same mapping, same address.
        let later = now + REFRESH_INTERVAL;
        let n = c.poll_transmit(later, &mut b).unwrap();
        let ra = answer(&s, &b[..n]);
        assert_eq!(c.handle(later, &ra), Ok(Event::Refreshed));
        assert_eq!(c.address(), Some(address));
    }

    // A client built with a generator takes its nonces from it and qualifies as well.
    #[test]
    fn nonces_come_from_the_given_generator() {
        fn counting(out: &mut [u8; 8]) {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            *out = n.to_ne_bytes();
        }
        let s = server();
        let mut c = Client::with_random(SocketAddrV4::new(SERVER, 3544), counting);
        let now = Instant::now();
        let mut b = [0u8; 128];
        let n = c.poll_transmit(now, &mut b).unwrap();
        // Authentication header: type 0x0001, two lengths of 0, then the nonce.
        let nonce = u64::from_be_bytes(b[4..12].try_into().unwrap());
        assert!(
            (1..=8).contains(&nonce),
            "nonce {nonce:#x} not from the generator"
        );
        let ra = answer(&s, &b[..n]);
        assert!(matches!(c.handle(now, &ra), Ok(Event::Qualified { .. })));
    }

    #[test]
    fn wrong_nonce_rejected() {
        let s = server();
        let mut c = client();
        let now = Instant::now();
        let mut b = [0u8; 128];
        let n = c.poll_transmit(now, &mut b).unwrap();
        let mut ra = answer(&s, &b[..n]);
        ra[4] ^= 0xff;
        assert_eq!(c.handle(now, &ra), Err(Error::NonceMismatch));
        assert!(!c.is_qualified());
    }

    #[test]
    fn bad_advertisements_rejected() {
        let s = server();
        let mut c = client();
        let now = Instant::now();
        let mut b = [0u8; 128];
        let n = c.poll_transmit(now, &mut b).unwrap();
        let good = answer(&s, &b[..n]);
        // Confirmation byte set.
        let mut ra = good.clone();
        ra[12] = 1;
        assert_eq!(c.handle(now, &ra), Err(Error::AuthenticationFailed));
        // Prefix of another server (PIO prefix at 13 + 8 + 40 + 16 + 16).
        let mut ra = good.clone();
        ra[13 + 8 + 40 + 16 + 16 + 4] ^= 1;
        assert_eq!(c.handle(now, &ra), Err(Error::WrongServer));
        // Wrong IPv6 destination.
        let mut ra = good.clone();
        ra[13 + 8 + 24 + 15] = 0xfe;
        assert!(matches!(
            c.handle(now, &ra),
            Err(Error::BadAdvertisement(_))
        ));
        // No origin indication.
        let mut ra = good[..13].to_vec();
        ra.extend_from_slice(&good[21..]);
        assert_eq!(c.handle(now, &ra), Err(Error::MissingOrigin));
        // Every truncation and garbage: errors, never panics.
        for cut in 0..good.len() {
            assert!(c.handle(now, &good[..cut]).is_err());
        }
        for i in 0..good.len() {
            let mut ra = good.clone();
            ra[i] ^= 0x5a;
            let _ = c.handle(now, &ra);
        }
        assert!(c.handle(now, &[0x42; 70]).is_err());
        // Still able to qualify with the genuine RA afterwards (unless a mutation passed).
        let mut c = client();
        let n = c.poll_transmit(now, &mut b).unwrap();
        let good = answer(&s, &b[..n]);
        assert!(matches!(c.handle(now, &good), Ok(Event::Qualified { .. })));
    }

    #[test]
    fn data_packets_and_bubbles() {
        let s = server();
        let mut c = client();
        let now = Instant::now();
        let mut b = [0u8; 128];
        let corp: Ipv6Addr = "2001:db8:c0::10".parse().unwrap();
        let mut pkt = [0u8; 64];
        let n = icmpv6::emit_echo(
            &mut pkt,
            false,
            &corp,
            &"2001::1".parse().unwrap(),
            1,
            1,
            b"x",
        )
        .unwrap();
        assert_eq!(c.handle(now, &pkt[..n]), Err(Error::NotQualified));
        let rs = c.poll_transmit(now, &mut b).unwrap();
        let ra = answer(&s, &b[..rs]);
        c.handle(now, &ra).unwrap();
        let me = c.address().unwrap();
        assert_eq!(c.handle(now, &pkt[..n]), Err(Error::NotForUs));
        let n = icmpv6::emit_echo(&mut pkt, false, &corp, &me, 1, 1, b"x").unwrap();
        assert_eq!(
            c.handle(now, &pkt[..n]),
            Ok(Event::Packet { offset: 0, len: n })
        );
        let mut bubble = [0u8; 48];
        tw::Origin(SocketAddrV4::new(SERVER, 3544))
            .emit(&mut bubble)
            .unwrap();
        ipv6::emit_header(&mut bubble[8..], 0, ipv6::NH_NONE, 64, &s.link_local(), &me).unwrap();
        assert_eq!(c.handle(now, &bubble), Ok(Event::Bubble));
        // Outgoing: bare, to the server, only from our address.
        let n = icmpv6::emit_echo(&mut pkt, true, &me, &corp, 1, 1, b"x").unwrap();
        assert_eq!(
            c.encapsulate(&pkt[..n]),
            Ok(SocketAddrV4::new(SERVER, 3544))
        );
        let n = icmpv6::emit_echo(&mut pkt, true, &corp, &me, 1, 1, b"x").unwrap();
        assert_eq!(c.encapsulate(&pkt[..n]), Err(Error::NotForUs));
    }
}
