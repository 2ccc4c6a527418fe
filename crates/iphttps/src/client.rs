//! The IP-HTTPS client role ([MS-IPHTTPS] §3.1), sans-IO: send the POST, check the `200 OK`,
//! then configure from a Router Advertisement like any IPv6 host (RFC 4861 §6.3.7, RFC 4862).
//!
//! States: Established (request not answered yet) → LinkUp (200 received) → configured once an
//! RA has arrived. The driver, after the TLS handshake:
//!
//! ```text
//! write conn.request()
//! read until conn.handle_input(now, buf) gives Some(consumed); the rest is the packet stream
//! loop: conn.poll_transmit(now, out) -> RS to write;  sleep_until(conn.poll_timeout())
//!       every deframed packet: conn.handle_packet(now, pkt) -> Event
//! ```
//!
//! Router Solicitations come from `fe80::<interface id>` and go to `ff02::2`: up to
//! [`MAX_RTR_SOLICITATIONS`] of them, [`RTR_SOLICITATION_INTERVAL`] apart (RFC 4861 §10), then
//! the client waits for the server's unsolicited RAs. The interface id is derived from the
//! caller's seed, so it is stable across reconnects when the seed is; the global address is the
//! advertised /64 plus the same id.

use crate::http::{self, HttpError};
use gate64_wire::{icmpv6, ipv6};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

/// RFC 4861 §10 `RTR_SOLICITATION_INTERVAL`.
pub const RTR_SOLICITATION_INTERVAL: Duration = Duration::from_secs(4);
/// RFC 4861 §10 `MAX_RTR_SOLICITATIONS`.
pub const MAX_RTR_SOLICITATIONS: u32 = 3;
/// IPv6 minimum link MTU, and the IP-HTTPS link MTU (§3.1.5.2).
pub const MIN_MTU: u32 = 1280;
/// Bytes of the Router Solicitation [`ClientConnection::poll_transmit`] writes.
pub const RS_LEN: usize = ipv6::HEADER_LEN + 8;

/// What an accepted packet from the server meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The first RA, or one that changed the configuration: the address is now
    /// [`ClientConnection::address`].
    Configured {
        /// The advertised /64.
        prefix: Ipv6Addr,
        /// Its length (always 64).
        prefix_len: u8,
        /// Link MTU (the RA's MTU option, else 1280).
        mtu: u32,
        /// The router's link-local address (the RA source): the default gateway.
        router: Ipv6Addr,
    },
    /// An RA repeating the current configuration.
    Refreshed,
    /// Any other IPv6 packet: deliver it (e.g. to the TUN).
    Packet,
}

/// Why the client refused the server's response or a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The response head is not valid HTTP/1.x. Fatal: close and reconnect.
    #[error("bad response: {0}")]
    Http(HttpError),
    /// The server answered with this status instead of 200. Fatal: close and reconnect.
    #[error("server answered HTTP {0}")]
    Status(u16),
    /// The call does not fit the state (e.g. a packet before the 200): a driver bug.
    #[error("call invalid in this state")]
    WrongState,
    /// Not a well-formed IPv6 packet.
    #[error("bad packet: {0}")]
    Malformed(gate64_wire::Error),
    /// An RA failing validation (RFC 4861 §6.1.2) or unusable for SLAAC.
    #[error("bad router advertisement: {0}")]
    BadAdvertisement(&'static str),
}

/// Where the client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientState {
    /// The request is (to be) sent; waiting for the response head.
    Established,
    /// The 200 arrived; packets flow.
    LinkUp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Config {
    prefix: Ipv6Addr,
    mtu: u32,
    router: Ipv6Addr,
}

/// One IP-HTTPS connection, client side.
#[derive(Debug, Clone)]
pub struct ClientConnection {
    path: String,
    host: String,
    state: ClientState,
    iid: u64,
    rs_sent: u32,
    next_rs: Option<Instant>,
    config: Option<Config>,
}

impl ClientConnection {
    /// A client for `https://<host><path>`. `seed` (from the caller's RNG, or fixed for a
    /// stable address) gives the interface id.
    pub fn new(path: &str, host: &str, seed: u64) -> Self {
        let iid = match splitmix64(seed) {
            0 => 1, // RFC 4291 §2.6.1: the all-zero id is the subnet-router anycast address
            i => i,
        };
        ClientConnection {
            path: path.to_owned(),
            host: host.to_owned(),
            state: ClientState::Established,
            iid,
            rs_sent: 0,
            next_rs: None,
            config: None,
        }
    }

    /// The request head to write first (§3.1.5.2).
    pub fn request(&self) -> Vec<u8> {
        http::request(&self.path, &self.host)
    }

    /// Current state.
    pub fn state(&self) -> ClientState {
        self.state
    }

    /// The link-local address: `fe80::<interface id>`.
    pub fn link_local(&self) -> Ipv6Addr {
        Ipv6Addr::from((0xfe80u128 << 112) | u128::from(self.iid))
    }

    /// The global address (advertised prefix + interface id), once configured.
    pub fn address(&self) -> Option<Ipv6Addr> {
        self.config
            .map(|c| Ipv6Addr::from(u128::from(c.prefix) | u128::from(self.iid)))
    }

    /// Link MTU, once configured.
    pub fn mtu(&self) -> Option<u32> {
        self.config.map(|c| c.mtu)
    }

    /// Feeds the bytes received so far while waiting for the response. `Ok(Some(consumed))`:
    /// the 200 head took `consumed` bytes, the rest is the packet stream and the link is up.
    /// `Ok(None)`: read more.
    pub fn handle_input(&mut self, now: Instant, buf: &[u8]) -> Result<Option<usize>, ClientError> {
        if self.state != ClientState::Established {
            return Err(ClientError::WrongState);
        }
        match http::parse_response(buf).map_err(ClientError::Http)? {
            None => Ok(None),
            Some((200, consumed)) => {
                self.state = ClientState::LinkUp;
                self.next_rs = Some(now);
                Ok(Some(consumed))
            }
            Some((status, _)) => Err(ClientError::Status(status)),
        }
    }

    /// Writes a Router Solicitation into `out` (at least [`RS_LEN`] bytes) when one is due.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        if self.next_rs.is_none_or(|t| now < t) {
            return None;
        }
        let len = icmpv6::emit_router_solicitation(out, &self.link_local());
        debug_assert!(len.is_ok(), "RS buffer shorter than RS_LEN");
        let len = len.ok()?;
        self.rs_sent += 1;
        self.next_rs =
            (self.rs_sent < MAX_RTR_SOLICITATIONS).then(|| now + RTR_SOLICITATION_INTERVAL);
        Some(len)
    }

    /// When [`ClientConnection::poll_transmit`] is due next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_rs
    }

    /// Handles one deframed packet from the server.
    pub fn handle_packet(&mut self, _now: Instant, pkt: &[u8]) -> Result<Event, ClientError> {
        if self.state != ClientState::LinkUp {
            return Err(ClientError::WrongState);
        }
        let p = ipv6::Packet::new_checked(pkt).map_err(ClientError::Malformed)?;
        match icmpv6::type_code(&p) {
            Some((icmpv6::TYPE_ROUTER_ADVERTISEMENT, _)) => self.handle_ra(&p),
            _ => Ok(Event::Packet),
        }
    }

    /// RFC 4861 §6.1.2 validation, then RFC 4862 §5.5.3 (a /64 for SLAAC).
    fn handle_ra(&mut self, p: &ipv6::Packet<'_>) -> Result<Event, ClientError> {
        let bad = ClientError::BadAdvertisement;
        let src = p.src();
        if src.segments()[0] & 0xffc0 != 0xfe80 {
            return Err(bad("source is not link-local"));
        }
        if p.hop_limit() != 255 {
            return Err(bad("hop limit is not 255"));
        }
        if !(p.dst() == self.link_local() || p.dst() == crate::server::ALL_NODES) {
            return Err(bad("not addressed to us"));
        }
        if !icmpv6::checksum_ok(p) {
            return Err(bad("checksum"));
        }
        let ra = icmpv6::RouterAdvert::parse(p).map_err(|_| bad("no single prefix option"))?;
        if ra.prefix_len != 64 {
            return Err(bad("prefix length is not 64"));
        }
        let prefix = Ipv6Addr::from(u128::from(ra.prefix) & !u128::from(u64::MAX));
        if prefix.segments()[0] & 0xffc0 == 0xfe80 || prefix.is_multicast() {
            return Err(bad("link-local or multicast prefix"));
        }
        // RFC 4861 §6.3.4: an MTU below the IPv6 minimum is ignored.
        let mtu = ra.mtu.filter(|m| *m >= MIN_MTU).unwrap_or(MIN_MTU);
        let config = Config {
            prefix,
            mtu,
            router: src,
        };
        self.next_rs = None;
        if self.config == Some(config) {
            return Ok(Event::Refreshed);
        }
        self.config = Some(config);
        Ok(Event::Configured {
            prefix,
            prefix_len: 64,
            mtu,
            router: src,
        })
    }
}

/// SplitMix64: spreads a seed (possibly small or sequential) over 64 bits.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::{Deframer, StreamBuffer};
    use crate::server::{
        Connection, DropReason, Handshake, MAX_REPLY_LEN, PacketVerdict, PrefixPool, ServerConfig,
    };
    use std::sync::Arc;

    const REMOTE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);

    fn udp(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut p = vec![0u8; 48];
        ipv6::emit_header(&mut p, 8, ipv6::NH_UDP, 64, &src, &dst).unwrap();
        p
    }

    /// Client and server back to back over two in-memory byte streams, with a fake clock.
    #[test]
    fn client_and_server_back_to_back() {
        let t0 = Instant::now();
        let cfg = Arc::new(ServerConfig::default());
        let mut pool = PrefixPool::from_config(&cfg).unwrap();
        let prefix = pool.allocate().unwrap();
        let mut server = Connection::new(cfg, prefix, t0);
        let mut client = ClientConnection::new("/IPHTTPS", "gw.example.net", 42);
        let deframer = Deframer::default();
        let mut to_server = StreamBuffer::default();
        let mut to_client = StreamBuffer::default();

        // Client request → server → 200.
        to_server.extend_from_slice(&client.request());
        let mut out = Vec::new();
        let Handshake::LinkUp { consumed, request } = server
            .handle_input(
                t0,
                to_server.data(),
                "Thu, 01 Jan 1970 00:00:00 GMT",
                &mut out,
            )
            .unwrap()
        else {
            panic!("request refused")
        };
        assert_eq!(request.host.as_deref(), Some("gw.example.net"));
        to_server.consume(consumed);
        to_client.extend_from_slice(&out);
        let consumed = client.handle_input(t0, to_client.data()).unwrap().unwrap();
        to_client.consume(consumed);
        assert_eq!(client.state(), ClientState::LinkUp);

        // Client RS → server RA → client configured.
        let mut pkt = [0u8; 1500];
        let n = client.poll_transmit(t0, &mut pkt).unwrap();
        assert_eq!(client.poll_transmit(t0, &mut pkt), None);
        to_server.extend_from_slice(&pkt[..n]);
        let mut reply = [0u8; MAX_REPLY_LEN];
        let rs = to_server.next_packet(&deframer).unwrap().unwrap();
        let PacketVerdict::Reply { len } = server.handle_packet(t0, rs, &mut reply) else {
            panic!("no RA")
        };
        to_client.extend_from_slice(&reply[..len]);
        let ra = to_client.next_packet(&deframer).unwrap().unwrap();
        assert_eq!(
            client.handle_packet(t0, ra).unwrap(),
            Event::Configured {
                prefix,
                prefix_len: 64,
                mtu: 1280,
                router: crate::server::SERVER_LINK_LOCAL,
            }
        );
        assert_eq!(client.poll_timeout(), None, "no more RS once configured");
        let addr = client.address().unwrap();
        assert_eq!(u128::from(addr) >> 64, u128::from(prefix) >> 64);

        // The solicited RA postponed the unsolicited one; when it comes, it only refreshes.
        assert_eq!(server.poll_unsolicited_ra(t0, &mut reply), None);
        let t1 = server.poll_timeout().unwrap();
        assert_eq!(t1, t0 + ServerConfig::default().ra_interval);
        server.handle_timeout(t1);
        let n = server.poll_unsolicited_ra(t1, &mut reply).unwrap();
        assert_eq!(client.handle_packet(t1, &reply[..n]), Ok(Event::Refreshed));

        // Data from the client's address is forwarded; back the other way it is delivered.
        to_server.extend_from_slice(&udp(addr, REMOTE));
        let data = to_server.next_packet(&deframer).unwrap().unwrap();
        assert_eq!(
            server.handle_packet(t1, data, &mut reply),
            PacketVerdict::Forward
        );
        let back = udp(REMOTE, addr);
        assert_eq!(server.handle_egress(t1, &back), Ok(()));
        to_client.extend_from_slice(&back);
        let got = to_client.next_packet(&deframer).unwrap().unwrap();
        assert_eq!(client.handle_packet(t0, got), Ok(Event::Packet));

        // A second client cannot use the first one's address on its own connection.
        let other = pool.allocate().unwrap();
        let mut server2 = Connection::new(Arc::new(ServerConfig::default()), other, t0);
        let mut out = Vec::new();
        server2
            .handle_input(t0, &client.request(), "x", &mut out)
            .unwrap();
        assert_eq!(
            server2.handle_packet(t0, &udp(addr, REMOTE), &mut reply),
            PacketVerdict::Drop(DropReason::SpoofedSource)
        );
    }

    #[test]
    fn non_200_is_an_error() {
        let t0 = Instant::now();
        let mut c = ClientConnection::new("/IPHTTPS", "gw", 1);
        assert_eq!(c.handle_input(t0, b"HTTP/1.1 404 Not"), Ok(None));
        assert_eq!(
            c.handle_input(t0, http::error_response(404)),
            Err(ClientError::Status(404))
        );
        assert_eq!(
            c.handle_input(t0, b"SSH-2.0-OpenSSH\r\n\r\n"),
            Err(ClientError::Http(HttpError::Malformed))
        );
        assert_eq!(c.state(), ClientState::Established);
        assert_eq!(
            c.handle_packet(t0, &[0x60; 40]),
            Err(ClientError::WrongState)
        );
    }

    #[test]
    fn rs_retransmitted_then_stops() {
        let t0 = Instant::now();
        let mut c = ClientConnection::new("/IPHTTPS", "gw", 7);
        assert_eq!(c.poll_timeout(), None);
        c.handle_input(t0, b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
        let mut out = [0u8; RS_LEN];
        let mut sent = Vec::new();
        while let Some(t) = c.poll_timeout() {
            let n = c.poll_transmit(t, &mut out).unwrap();
            let p = ipv6::Packet::new_checked(&out[..n]).unwrap();
            assert_eq!((p.src(), p.dst()), (c.link_local(), icmpv6::ALL_ROUTERS));
            assert!(icmpv6::checksum_ok(&p));
            sent.push(t - t0);
        }
        assert_eq!(
            sent,
            [0, 4, 8].map(Duration::from_secs).to_vec(),
            "RFC 4861 §10"
        );
    }

    #[test]
    fn bad_advertisements_refused() {
        let t0 = Instant::now();
        let mut c = ClientConnection::new("/IPHTTPS", "gw", 9);
        c.handle_input(t0, b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
        let ra = |prefix_len: u8, src: Ipv6Addr, dst: Ipv6Addr| {
            let mut b = vec![0u8; MAX_REPLY_LEN];
            let r = icmpv6::RouterAdvert {
                router_lifetime: 1800,
                prefix: "2001:db8:1:2::".parse().unwrap(),
                prefix_len,
                mtu: Some(1280),
            };
            let n = r.emit(&mut b, &src, &dst).unwrap();
            b.truncate(n);
            b
        };
        let router = crate::server::SERVER_LINK_LOCAL;
        let all = crate::server::ALL_NODES;
        let cases = [
            ra(48, router, all),
            ra(64, REMOTE, all),
            ra(64, router, REMOTE),
        ];
        for p in cases {
            assert!(matches!(
                c.handle_packet(t0, &p),
                Err(ClientError::BadAdvertisement(_))
            ));
        }
        let mut bad_sum = ra(64, router, all);
        bad_sum[50] ^= 0xff;
        assert_eq!(
            c.handle_packet(t0, &bad_sum),
            Err(ClientError::BadAdvertisement("checksum"))
        );
        assert_eq!(c.address(), None);
        let good = ra(64, router, c.link_local());
        assert!(matches!(
            c.handle_packet(t0, &good),
            Ok(Event::Configured { .. })
        ));
        assert_eq!(c.mtu(), Some(1280));
    }

    #[test]
    fn interface_id_is_stable_per_seed() {
        let a = ClientConnection::new("/IPHTTPS", "gw", 5);
        let b = ClientConnection::new("/IPHTTPS", "gw", 5);
        let c = ClientConnection::new("/IPHTTPS", "gw", 6);
        assert_eq!(a.link_local(), b.link_local());
        assert_ne!(a.link_local(), c.link_local());
        assert_eq!(a.link_local().segments()[..4], [0xfe80, 0, 0, 0]);
    }
}
