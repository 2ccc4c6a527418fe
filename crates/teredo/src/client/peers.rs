//! The relay of each native IPv6 peer (RFC 4380 §5.2.9, the direct IPv6 connectivity test).
//!
//! A Teredo server need not relay: Miredo's forwards nothing but ICMPv6 echo requests to
//! native IPv6, and the answers come back through whichever relay serves the Teredo prefix on
//! the peer's side. So, for a native destination, the client sends an echo request with a
//! random identifier, sequence number and 8-byte payload through its server, and takes the
//! IPv4 address and port the matching echo reply came from as that peer's relay: packets for
//! the peer then go there. Until a relay is known they go to the server, which is what a
//! server that is also the relay (gate64's) wants.
//!
//! Only an echo reply that carries an outstanding probe's 12 random bytes installs a relay, so
//! a third party that does not see the probe cannot divert the client's traffic. The table is
//! fixed: [`PEERS`] peers, the least recently used one replaced. A peer not heard from through
//! its relay for [`PEER_LIFETIME`] is tested afresh (RFC 4380 §5.2.9's lifetime) while the
//! relay stays in use; a probe unanswered is repeated every [`PROBE_RETRY`], [`PROBE_TRIES`]
//! times, then after [`PEER_LIFETIME`] (a peer that answers no echo costs a few datagrams a
//! minute).

use gate64_wire::{icmpv6, ipv6};
use std::net::{Ipv6Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// Native peers whose relay the client tracks.
pub const PEERS: usize = 8;
/// Time to wait for the answer to a probe before repeating it.
pub const PROBE_RETRY: Duration = Duration::from_secs(2);
/// Probes sent before pausing for [`PEER_LIFETIME`].
pub const PROBE_TRIES: u32 = 3;
/// A relay not heard from for this long is tested afresh (RFC 4380 §5.2.9: 30 s).
pub const PEER_LIFETIME: Duration = Duration::from_secs(30);
/// Bytes of a probe: IPv6 header + ICMPv6 echo header + 8-byte nonce.
pub const PROBE_LEN: usize = ipv6::HEADER_LEN + 8 + NONCE_LEN;
const NONCE_LEN: usize = 8;

/// What a probe carries: identifier, sequence number, payload.
type Token = (u16, u16, [u8; NONCE_LEN]);

#[derive(Debug, Clone, Copy)]
struct Peer {
    addr: Ipv6Addr,
    /// Where its packets go; `None` until a probe is answered.
    relay: Option<SocketAddrV4>,
    /// The outstanding probe.
    token: Option<Token>,
    /// When the next probe is due, if the relay has not been heard from by then.
    next_probe: Instant,
    /// Probes sent since the last answer or pause.
    tries: u32,
    /// The last packet from the peer through its relay (or the last answer).
    seen: Instant,
    /// The last packet sent to or received from the peer (for replacement).
    used: Instant,
}

/// The peers' table.
#[derive(Debug, Clone, Default)]
pub(super) struct Peers {
    slots: [Option<Peer>; PEERS],
}

impl Peers {
    /// The relay for `dst`, if a probe found one.
    pub(super) fn relay(&self, dst: &Ipv6Addr) -> Option<SocketAddrV4> {
        self.slots
            .iter()
            .flatten()
            .find(|p| p.addr == *dst)
            .and_then(|p| p.relay)
    }

    /// Notes a packet for native `dst` at `now`; when a probe towards it is due, writes it
    /// from `src` into `out` and returns its length. `rng` gives the probe's random bytes.
    pub(super) fn probe(
        &mut self,
        now: Instant,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        out: &mut [u8],
        rng: &mut super::Random,
    ) -> Option<usize> {
        if out.len() < PROBE_LEN {
            return None;
        }
        let peer = match self
            .slots
            .iter()
            .position(|p| p.is_some_and(|p| p.addr == *dst))
        {
            Some(i) => self.slots[i].as_mut()?,
            None => self.insert(now, *dst),
        };
        peer.used = now;
        if now < peer.next_probe
            || (peer.relay.is_some() && now.saturating_duration_since(peer.seen) < PEER_LIFETIME)
        {
            return None;
        }
        let (a, b) = (rng.next_u64(), rng.next_u64());
        let token = ((b >> 48) as u16, (b >> 32) as u16, a.to_be_bytes());
        let n = icmpv6::emit_echo(out, true, src, dst, token.0, token.1, &token.2).ok()?;
        peer.token = Some(token);
        peer.tries += 1;
        peer.next_probe = if peer.tries >= PROBE_TRIES {
            peer.tries = 0;
            now + PEER_LIFETIME
        } else {
            now + PROBE_RETRY
        };
        Some(n)
    }

    /// A free slot, or the least recently used one, for `addr`, probed at once.
    fn insert(&mut self, now: Instant, addr: Ipv6Addr) -> &mut Peer {
        let i = self
            .slots
            .iter()
            .position(Option::is_none)
            .unwrap_or_else(|| {
                (0..PEERS)
                    .min_by_key(|&i| self.slots[i].map(|p| p.used))
                    .unwrap_or(0)
            });
        self.slots[i].insert(Peer {
            addr,
            relay: None,
            token: None,
            next_probe: now,
            tries: 0,
            seen: now,
            used: now,
        })
    }

    /// Looks at a packet `from` the server or a relay: the answer to an outstanding probe
    /// installs `from` as the peer's relay and returns true (nothing for the host); any other
    /// packet from a peer through its relay keeps that relay fresh.
    pub(super) fn received(
        &mut self,
        now: Instant,
        p: &ipv6::Packet<'_>,
        from: SocketAddrV4,
    ) -> bool {
        let src = p.src();
        let Some(peer) = self.slots.iter_mut().flatten().find(|x| x.addr == src) else {
            return false;
        };
        if let Some(token) = peer.token
            && is_answer(p, token)
        {
            peer.relay = Some(from);
            peer.token = None;
            peer.tries = 0;
            peer.seen = now;
            peer.used = now;
            peer.next_probe = now;
            return true;
        }
        if peer.relay == Some(from) {
            peer.seen = now;
            peer.used = now;
        }
        false
    }
}

/// True when `p` is an echo reply carrying `token`.
fn is_answer(p: &ipv6::Packet<'_>, (ident, seq, nonce): Token) -> bool {
    let b = p.payload();
    p.next_header() == ipv6::NH_ICMPV6
        && b.len() == 8 + NONCE_LEN
        && b[0] == icmpv6::TYPE_ECHO_REPLY
        && b[1] == 0
        && b[4..6] == ident.to_be_bytes()
        && b[6..8] == seq.to_be_bytes()
        && b[8..] == nonce
        && icmpv6::checksum_ok(p)
}

#[cfg(test)]
mod tests {
    use super::super::{Client, Event};
    use super::*;
    use crate::server::{Ingress, Server, ServerConfig};
    use std::net::Ipv4Addr;

    const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 3544);
    const RELAY: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 3545);
    const PEER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 2);

    /// A client qualified through gate64's server code, at `now`.
    fn qualified(now: Instant) -> Client {
        let s = Server::new(ServerConfig {
            primary: *SERVER.ip(),
            secondary: Ipv4Addr::new(192, 0, 2, 2),
            port: 3544,
            allow_loopback: false,
            mtu_option: Some(1280),
        });
        let mut c = Client::new(SERVER, 11);
        let mut rs = [0u8; 128];
        let n = c.poll_transmit(now, &mut rs).unwrap();
        let mapped: SocketAddrV4 = "198.51.100.10:40000".parse().unwrap();
        let Ok(Ingress::RouterSolicitation(sol)) = s.classify(mapped, &rs[..n]) else {
            panic!("server refused the RS")
        };
        let mut ra = [0u8; 256];
        let (n, _) = s
            .emit_advertisement(&sol, *SERVER.ip(), mapped, &mut ra)
            .unwrap();
        assert!(matches!(
            c.handle(now, &ra[..n]),
            Ok(Event::Qualified { .. })
        ));
        c
    }

    /// A UDP packet from the client to `dst`.
    fn packet(c: &Client, dst: Ipv6Addr) -> Vec<u8> {
        let mut p = vec![0u8; ipv6::HEADER_LEN + 8];
        ipv6::emit_header(&mut p, 8, 17, 64, &c.address().unwrap(), &dst).unwrap();
        p
    }

    /// The peer's answer to `probe`: an echo reply with its identifier, sequence and data.
    fn answer(probe: &[u8]) -> Vec<u8> {
        let p = ipv6::Packet::new_checked(probe).unwrap();
        let b = p.payload();
        let (ident, seq) = (
            u16::from_be_bytes([b[4], b[5]]),
            u16::from_be_bytes([b[6], b[7]]),
        );
        let mut out = vec![0u8; PROBE_LEN];
        let n =
            icmpv6::emit_echo(&mut out, false, &p.dst(), &p.src(), ident, seq, &b[8..]).unwrap();
        out.truncate(n);
        out
    }

    // RFC 4380 §5.2.9: an echo request through the server, the relay taken from its answer.
    #[test]
    fn rfc4380_5_2_9_the_answer_names_the_relay() {
        let t0 = Instant::now();
        let mut c = qualified(t0);
        let pkt = packet(&c, PEER);
        assert_eq!(c.encapsulate(&pkt), Ok(SERVER), "no relay known yet");
        let mut probe = [0u8; PROBE_LEN];
        let n = c.probe(t0, &pkt, &mut probe).expect("a probe");
        let p = ipv6::Packet::new_checked(&probe[..n]).unwrap();
        assert_eq!((p.src(), p.dst()), (c.address().unwrap(), PEER));
        assert_eq!(icmpv6::type_code(&p), Some((icmpv6::TYPE_ECHO_REQUEST, 0)));
        assert!(icmpv6::checksum_ok(&p));
        assert!(
            c.probe(t0, &pkt, &mut [0u8; PROBE_LEN]).is_none(),
            "one outstanding"
        );
        let reply = answer(&probe[..n]);
        assert_eq!(
            c.handle_from(t0, &reply, RELAY),
            Ok(Event::RelayFound { relay: RELAY })
        );
        assert_eq!(c.encapsulate(&pkt), Ok(RELAY));
        // Answered once: the same reply again is the host's (an echo reply it did not ask for).
        assert!(matches!(
            c.handle_from(t0, &reply, RELAY),
            Ok(Event::Packet { .. })
        ));
        // Teredo peers are not probed and keep going to the server.
        let teredo = packet(&c, Ipv6Addr::new(0x2001, 0, 0xc000, 0x201, 0, 0, 0, 1));
        assert!(c.probe(t0, &teredo, &mut [0u8; PROBE_LEN]).is_none());
        assert_eq!(c.encapsulate(&teredo), Ok(SERVER));
    }

    #[test]
    fn a_reply_without_the_probes_bytes_installs_nothing() {
        let t0 = Instant::now();
        let mut c = qualified(t0);
        let pkt = packet(&c, PEER);
        let mut probe = [0u8; PROBE_LEN];
        let n = c.probe(t0, &pkt, &mut probe).unwrap();
        let mut forged = answer(&probe[..n]);
        let last = forged.len() - 1;
        forged[last] ^= 1;
        icmpv6::fill_checksum(&mut forged).unwrap();
        let attacker = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 9), 3545);
        assert!(matches!(
            c.handle_from(t0, &forged, attacker),
            Ok(Event::Packet { .. })
        ));
        assert_eq!(c.encapsulate(&pkt), Ok(SERVER));
    }

    #[test]
    fn unanswered_probes_repeat_then_pause() {
        let t0 = Instant::now();
        let mut c = qualified(t0);
        let pkt = packet(&c, PEER);
        let mut out = [0u8; PROBE_LEN];
        let mut t = t0;
        for _ in 0..PROBE_TRIES {
            assert!(c.probe(t, &pkt, &mut out).is_some());
            assert!(c.probe(t + PROBE_RETRY / 2, &pkt, &mut out).is_none());
            t += PROBE_RETRY;
        }
        assert!(c.probe(t, &pkt, &mut out).is_none(), "paused");
        assert!(c.probe(t0 + PEER_LIFETIME * 2, &pkt, &mut out).is_some());
    }

    #[test]
    fn a_silent_relay_is_tested_afresh_and_kept_meanwhile() {
        let t0 = Instant::now();
        let mut c = qualified(t0);
        let pkt = packet(&c, PEER);
        let mut out = [0u8; PROBE_LEN];
        let n = c.probe(t0, &pkt, &mut out).unwrap();
        c.handle_from(t0, &answer(&out[..n]), RELAY).unwrap();
        // Traffic from the peer through the relay keeps it fresh.
        let mut from_peer = vec![0u8; ipv6::HEADER_LEN + 8];
        ipv6::emit_header(&mut from_peer, 8, 17, 64, &PEER, &c.address().unwrap()).unwrap();
        let t1 = t0 + PEER_LIFETIME - Duration::from_secs(1);
        c.handle_from(t1, &from_peer, RELAY).unwrap();
        assert!(c.probe(t0 + PEER_LIFETIME, &pkt, &mut out).is_none());
        let t2 = t1 + PEER_LIFETIME;
        assert!(
            c.probe(t2, &pkt, &mut out).is_some(),
            "silent: tested afresh"
        );
        assert_eq!(c.encapsulate(&pkt), Ok(RELAY), "kept while testing");
    }

    #[test]
    fn the_table_keeps_the_most_recent_peers() {
        let t0 = Instant::now();
        let mut c = qualified(t0);
        let mut out = [0u8; PROBE_LEN];
        let first = packet(&c, PEER);
        let n = c.probe(t0, &first, &mut out).unwrap();
        c.handle_from(t0, &answer(&out[..n]), RELAY).unwrap();
        for i in 0..PEERS as u16 {
            let other = packet(&c, Ipv6Addr::new(0x2001, 0xdb8, 0x200, i, 0, 0, 0, 1));
            let t = t0 + Duration::from_millis(u64::from(i) + 1);
            assert!(c.probe(t, &other, &mut out).is_some());
        }
        assert_eq!(
            c.encapsulate(&first),
            Ok(SERVER),
            "the oldest peer was replaced"
        );
    }
}
