//! The Teredo server role (RFC 4380 §5.3): ingress acceptance rules and Router Advertisements.
//!
//! The server is stateless: [`Server::classify`] decides what an incoming datagram is and
//! whether it may pass; [`Server::emit_advertisement`] answers a Router Solicitation.

use crate::addr::{self, Address};
use gate64_wire::{icmpv6, ipv4, ipv6, teredo as tw};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

/// Static server configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Primary server address; it is the one embedded in the advertised prefix.
    pub primary: Ipv4Addr,
    /// Secondary server address (primary + 1 in RFC practice).
    pub secondary: Ipv4Addr,
    /// UDP port, 3544 unless a lab says otherwise.
    pub port: u16,
    /// Lab only: also accept 127/8 sources (the no-root demo runs on loopback).
    pub allow_loopback: bool,
    /// MTU option in RAs. Miredo's server sends 1280; `None` gives the 109-byte RA Windows
    /// diagnostics expect from Microsoft's servers.
    pub mtu_option: Option<u32>,
}

/// Why the server refused a datagram (a peer fault: counted, never fatal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Shorter than its headers announce.
    Truncated,
    /// Bad Teredo header or IPv6 header.
    Malformed,
    /// IPv6 jumbogram.
    Unsupported,
    /// §5.3.1: the IPv4 source is not global unicast.
    NonGlobalSource,
    /// The datagram came from one of our own server addresses (any port).
    LoopGuard,
    /// §5.3.1/§5.4.2: a Teredo source that does not encode the UDP source, or a non-Teredo
    /// source that is not addressed to one of our clients.
    SpoofedSource,
    /// A Teredo source belonging to another server.
    ForeignClient,
    /// ICMPv6 to the server itself that it does not answer.
    UnhandledIcmpv6,
    /// A bubble to relay whose trailing bytes are not well-formed RFC 6081 trailers.
    BadTrailer,
    /// A packet the server role does not relay between clients: not a bubble (RFC 4380
    /// §5.3.1 lets a server drop anything but bubbles and ICMPv6; data between clients takes
    /// the relay, which sends only to verified peers).
    NotRelayable,
}

impl From<gate64_wire::Error> for Reject {
    fn from(e: gate64_wire::Error) -> Self {
        match e {
            gate64_wire::Error::Truncated => Reject::Truncated,
            gate64_wire::Error::Malformed => Reject::Malformed,
            gate64_wire::Error::Unsupported => Reject::Unsupported,
        }
    }
}

/// A Router Solicitation to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Solicitation {
    /// The nonce of the authentication header, when the RS carried one (echoed back).
    pub nonce: Option<[u8; 8]>,
    /// The RS's IPv6 source, the RA's destination.
    pub source: Ipv6Addr,
    /// The RS source had the cone flag set: answer from the other server address.
    pub cone: bool,
}

/// What an accepted datagram is.
#[derive(Debug, Clone, Copy)]
pub enum Ingress<'a> {
    /// A Router Solicitation for the server.
    RouterSolicitation(Solicitation),
    /// An IPv6 packet from one of our clients whose source encodes the UDP source (§5.4.2).
    FromClient {
        /// The client's decoded Teredo source address.
        client: Address,
        /// The IPv6 packet.
        ipv6: ipv6::Packet<'a>,
        /// Where the IPv6 packet starts in the datagram.
        offset: usize,
    },
    /// A packet from a non-Teredo source addressed to one of our clients (§5.3.1 rule 6),
    /// e.g. a bubble from another relay; forwarded with an origin indication.
    ToClient {
        /// The decoded destination.
        dst: Address,
        /// The IPv6 packet.
        ipv6: ipv6::Packet<'a>,
        /// Where the IPv6 packet starts in the datagram.
        offset: usize,
    },
}

/// The stateless Teredo server.
#[derive(Debug, Clone)]
pub struct Server {
    cfg: ServerConfig,
    link_local: Ipv6Addr,
    prefix: Ipv6Addr,
}

impl Server {
    /// Creates the server.
    pub fn new(cfg: ServerConfig) -> Self {
        let link_local = addr::server_link_local(cfg.primary, cfg.port);
        let prefix = addr::server_prefix(cfg.primary);
        Server {
            cfg,
            link_local,
            prefix,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// The server's link-local address (RA source, bubble source).
    pub fn link_local(&self) -> Ipv6Addr {
        self.link_local
    }

    /// The advertised `2001:0:<primary>::/64`.
    pub fn prefix(&self) -> Ipv6Addr {
        self.prefix
    }

    /// True when `a` is a Teredo address served by this server (bits 32–63 = primary).
    pub fn is_own_client(&self, a: &Address) -> bool {
        a.server == self.cfg.primary
    }

    /// True when `ip` may be a client's (mapped or embedded) IPv4 address.
    pub fn is_acceptable_v4(&self, ip: Ipv4Addr) -> bool {
        ipv4::is_teredo_global(ip) || (self.cfg.allow_loopback && ip.is_loopback())
    }

    /// True when `a` is gate64 itself: one of the server addresses, on any port (Miredo
    /// checks only its own address and port 3544), so that nothing gate64 sends, an RA
    /// included, ever goes to itself. In the loopback lab mode clients share the server's
    /// address, so there only the server port counts.
    pub fn is_own_address(&self, a: SocketAddrV4) -> bool {
        let ours = *a.ip() == self.cfg.primary || *a.ip() == self.cfg.secondary;
        ours && (a.port() == self.cfg.port || !self.cfg.allow_loopback)
    }

    /// Applies the §5.3.1 acceptance rules, in the RFC's order, to a datagram from `remote`.
    pub fn classify<'a>(
        &self,
        remote: SocketAddrV4,
        datagram: &'a [u8],
    ) -> Result<Ingress<'a>, Reject> {
        let pkt = tw::Packet::parse(datagram)?;
        if !self.is_acceptable_v4(*remote.ip()) {
            return Err(Reject::NonGlobalSource);
        }
        if self.is_own_address(remote) {
            return Err(Reject::LoopGuard);
        }
        let ip6 = pkt.ipv6;
        let src = ip6.src();
        let dst = ip6.dst();
        if is_link_local(&src) && (dst == icmpv6::ALL_ROUTERS || dst == self.link_local) {
            return match icmpv6::type_code(&ip6) {
                Some((icmpv6::TYPE_ROUTER_SOLICITATION, 0))
                    if dst == icmpv6::ALL_ROUTERS && icmpv6::checksum_ok(&ip6) =>
                {
                    Ok(Ingress::RouterSolicitation(Solicitation {
                        nonce: pkt.auth.map(|a| a.nonce),
                        source: src,
                        cone: addr::link_local_has_cone_flag(&src),
                    }))
                }
                _ => Err(Reject::UnhandledIcmpv6),
            };
        }
        if let Some(client) = Address::decode(&src) {
            if client.mapped != remote {
                return Err(Reject::SpoofedSource);
            }
            if !self.is_own_client(&client) {
                return Err(Reject::ForeignClient);
            }
            return Ok(Ingress::FromClient {
                client,
                ipv6: ip6,
                offset: pkt.ipv6_offset,
            });
        }
        match Address::decode(&dst) {
            Some(d) if self.is_own_client(&d) => Ok(Ingress::ToClient {
                dst: d,
                ipv6: ip6,
                offset: pkt.ipv6_offset,
            }),
            _ => Err(Reject::SpoofedSource),
        }
    }

    /// Writes the answer to `rs` into `out` (§5.3.2): the echoed authentication header when the
    /// RS had one, an origin indication with the client's mapping (`remote`), and an RA from the
    /// server's link-local address to exactly the RS source with one `2001:0:<primary>::/64`
    /// prefix. Returns the datagram length and the server address to send it from: the other
    /// address than `local` when the RS had the cone flag, else `local`.
    pub fn emit_advertisement(
        &self,
        rs: &Solicitation,
        local: Ipv4Addr,
        remote: SocketAddrV4,
        out: &mut [u8],
    ) -> Result<(usize, Ipv4Addr), Reject> {
        let mut at = 0;
        if let Some(nonce) = rs.nonce {
            let auth = tw::Auth {
                client_id: &[],
                auth_value: &[],
                nonce,
                confirmation: 0,
            };
            at += auth.emit(out)?;
        }
        at += tw::Origin(remote).emit(out.get_mut(at..).ok_or(Reject::Truncated)?)?;
        let ra = icmpv6::RouterAdvert {
            router_lifetime: 0,
            prefix: self.prefix,
            prefix_len: 64,
            mtu: self.cfg.mtu_option,
        };
        at += ra.emit(
            out.get_mut(at..).ok_or(Reject::Truncated)?,
            &self.link_local,
            &rs.source,
        )?;
        let from = if rs.cone { self.other(local) } else { local };
        Ok((at, from))
    }

    fn other(&self, local: Ipv4Addr) -> Ipv4Addr {
        if local == self.cfg.primary {
            self.cfg.secondary
        } else {
            self.cfg.primary
        }
    }
}

/// The server role's rule for what it relays to a Teredo client on behalf of another sender,
/// unverified, with an origin indication (RFC 4380 §5.3.1, §5.2.9): exactly a bubble (next
/// header 59, payload length 0, no extension) whose trailing bytes, `datagram[end..]` after
/// the IPv6 packet, are well-formed RFC 6081 trailers ([`crate::trailer`]). Miredo's server
/// relays small ICMPv6 too; gate64 sends any payload only to peers that proved their mapping
/// (the relay, [`crate::relay`]), so the server address never carries a sender's payload to
/// a mapping that did not ask for it.
pub fn check_relayed(ipv6: &ipv6::Packet<'_>, trailing: &[u8]) -> Result<(), Reject> {
    if !ipv6.is_bubble() {
        return Err(Reject::NotRelayable);
    }
    crate::trailer::check(trailing).map_err(|_| Reject::BadTrailer)
}

fn is_link_local(a: &Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Server {
        Server::new(ServerConfig {
            primary: Ipv4Addr::new(192, 0, 2, 1),
            secondary: Ipv4Addr::new(192, 0, 2, 2),
            port: 3544,
            allow_loopback: false,
            mtu_option: Some(1280),
        })
    }

    /// The 61-byte RS Miredo sends: auth header with a nonce, then the RS.
    fn miredo_rs(src: &str) -> Vec<u8> {
        let mut b = vec![0u8; 61];
        let auth = tw::Auth {
            client_id: &[],
            auth_value: &[],
            nonce: *b"nonce-01",
            confirmation: 0,
        };
        auth.emit(&mut b).unwrap();
        icmpv6::emit_router_solicitation(&mut b[13..], &src.parse().unwrap()).unwrap();
        b
    }

    const CLIENT: &str = "198.51.100.10:3546";

    // RFC 4380 §5.3.2 and brief §1.9: the RA Miredo's client accepts.
    #[test]
    fn rfc4380_5_3_2_rs_gets_ra_with_nonce_origin_and_prefix() {
        let s = server();
        let rs = miredo_rs("fe80::ffff:ffff:ffff");
        let remote: SocketAddrV4 = CLIENT.parse().unwrap();
        let Ok(Ingress::RouterSolicitation(sol)) = s.classify(remote, &rs) else {
            panic!()
        };
        assert!(!sol.cone);
        let mut out = [0u8; 256];
        let (n, from) = s
            .emit_advertisement(&sol, s.cfg.primary, remote, &mut out)
            .unwrap();
        assert_eq!(n, 117, "Miredo's server sends 117-byte RAs");
        assert_eq!(from, s.cfg.primary);
        let p = tw::Packet::parse(&out[..n]).unwrap();
        assert_eq!(p.auth.unwrap().nonce, *b"nonce-01");
        assert_eq!(p.auth.unwrap().confirmation, 0);
        assert_eq!(p.origin.unwrap().0, remote);
        assert_eq!(
            p.ipv6.src(),
            "fe80::8000:f227:3fff:fdfe".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            p.ipv6.dst(),
            "fe80::ffff:ffff:ffff".parse::<Ipv6Addr>().unwrap()
        );
        assert!(icmpv6::checksum_ok(&p.ipv6));
        let ra = icmpv6::RouterAdvert::parse(&p.ipv6).unwrap();
        assert_eq!(ra.prefix, "2001:0:c000:201::".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ra.prefix_len, 64);
        assert_eq!(ra.mtu, Some(1280));
    }

    // RFC 4380 §5.3.2 cone rule: a cone RS is answered from the other address, and the prefix
    // still carries the primary.
    #[test]
    fn rfc4380_5_3_2_cone_rs_answered_from_other_address() {
        let s = server();
        let rs = miredo_rs("fe80::8000:ffff:ffff:fffe");
        let remote: SocketAddrV4 = CLIENT.parse().unwrap();
        let Ok(Ingress::RouterSolicitation(sol)) = s.classify(remote, &rs) else {
            panic!()
        };
        assert!(sol.cone);
        let mut out = [0u8; 256];
        let (_, from) = s
            .emit_advertisement(&sol, s.cfg.primary, remote, &mut out)
            .unwrap();
        assert_eq!(from, s.cfg.secondary);
        let (n, from) = s
            .emit_advertisement(&sol, s.cfg.secondary, remote, &mut out)
            .unwrap();
        assert_eq!(from, s.cfg.primary);
        let p = tw::Packet::parse(&out[..n]).unwrap();
        let ra = icmpv6::RouterAdvert::parse(&p.ipv6).unwrap();
        assert_eq!(ra.prefix, "2001:0:c000:201::".parse::<Ipv6Addr>().unwrap());
        // A plain RS on the secondary is answered from the secondary.
        let plain = Solicitation { cone: false, ..sol };
        let (_, from) = s
            .emit_advertisement(&plain, s.cfg.secondary, remote, &mut out)
            .unwrap();
        assert_eq!(from, s.cfg.secondary);
    }

    #[test]
    fn rs_without_auth_gets_ra_without_auth() {
        let s = server();
        let rs = &miredo_rs("fe80::ffff:ffff:ffff")[13..];
        let remote: SocketAddrV4 = CLIENT.parse().unwrap();
        let Ok(Ingress::RouterSolicitation(sol)) = s.classify(remote, rs) else {
            panic!()
        };
        let mut out = [0u8; 256];
        let (n, _) = s
            .emit_advertisement(&sol, s.cfg.primary, remote, &mut out)
            .unwrap();
        assert_eq!(n, 104);
        assert!(tw::Packet::parse(&out[..n]).unwrap().auth.is_none());
    }

    fn data_from(src: Ipv6Addr, dst: &str) -> Vec<u8> {
        let mut b = vec![0u8; 48];
        icmpv6::emit_echo(&mut b, true, &src, &dst.parse().unwrap(), 1, 1, &[]).unwrap();
        b
    }

    fn client_addr(server: [u8; 4], mapped: &str) -> Address {
        Address {
            server: Ipv4Addr::from(server),
            flags: 0x2c5a,
            mapped: mapped.parse().unwrap(),
        }
    }

    // RFC 4380 §5.3.1 rules 3 and 5, §5.4.2.
    #[test]
    fn rfc4380_5_3_1_acceptance_rules() {
        let s = server();
        let remote: SocketAddrV4 = CLIENT.parse().unwrap();
        let me = client_addr([192, 0, 2, 1], CLIENT);
        let ok = data_from(me.encode(), "2001:db8:100::1");
        assert!(
            matches!(s.classify(remote, &ok), Ok(Ingress::FromClient { client, .. }) if client == me)
        );
        // Same packet from another port: spoofed.
        assert_eq!(
            s.classify("198.51.100.10:9999".parse().unwrap(), &ok)
                .unwrap_err(),
            Reject::SpoofedSource
        );
        // Non-global sources.
        for bad in [
            "10.0.0.1:3546",
            "127.0.0.1:3546",
            "192.168.1.1:1",
            "224.0.0.253:3544",
        ] {
            assert_eq!(
                s.classify(bad.parse().unwrap(), &ok).unwrap_err(),
                Reject::NonGlobalSource,
                "{bad}"
            );
        }
        // Loop guard: our own addresses, any port.
        for own in ["192.0.2.2:3544", "192.0.2.1:40000"] {
            assert_eq!(
                s.classify(own.parse().unwrap(), &ok).unwrap_err(),
                Reject::LoopGuard,
                "{own}"
            );
        }
        // Another server's client.
        let foreign = client_addr([203, 0, 113, 9], CLIENT);
        assert_eq!(
            s.classify(remote, &data_from(foreign.encode(), "2001:db8:100::1"))
                .unwrap_err(),
            Reject::ForeignClient
        );
        // Native source to our client: rule 6; to anything else: dropped.
        let native = data_from("2001:db8:7::1".parse().unwrap(), &me.encode().to_string());
        assert!(
            matches!(s.classify(remote, &native), Ok(Ingress::ToClient { dst, .. }) if dst == me)
        );
        let stray = data_from("2001:db8:7::1".parse().unwrap(), "2001:db8:100::1");
        assert_eq!(
            s.classify(remote, &stray).unwrap_err(),
            Reject::SpoofedSource
        );
        // Link-local ICMPv6 other than an RS, and an RS with a bad checksum.
        let ll = data_from("fe80::1".parse().unwrap(), "ff02::2");
        assert_eq!(
            s.classify(remote, &ll).unwrap_err(),
            Reject::UnhandledIcmpv6
        );
        let mut rs = miredo_rs("fe80::ffff:ffff:ffff");
        rs[13 + 42] ^= 0xff;
        assert_eq!(
            s.classify(remote, &rs).unwrap_err(),
            Reject::UnhandledIcmpv6
        );
        // Garbage.
        assert_eq!(
            s.classify(remote, &[0, 1, 0]).unwrap_err(),
            Reject::Truncated
        );
        assert_eq!(
            s.classify(remote, &[0x45; 60]).unwrap_err(),
            Reject::Malformed
        );
    }

    #[test]
    fn loopback_only_in_lab_mode() {
        let mut cfg = server().cfg;
        cfg.allow_loopback = true;
        let s = Server::new(cfg);
        let remote: SocketAddrV4 = "127.0.0.1:40000".parse().unwrap();
        let rs = miredo_rs("fe80::ffff:ffff:ffff");
        assert!(matches!(
            s.classify(remote, &rs),
            Ok(Ingress::RouterSolicitation(_))
        ));
        assert_eq!(
            s.classify("10.1.1.1:1".parse().unwrap(), &rs).unwrap_err(),
            Reject::NonGlobalSource
        );
        // Loopback lab clients share the server's address: only its port is ours there.
        assert!(s.is_own_address("192.0.2.1:3544".parse().unwrap()));
        assert!(!s.is_own_address("192.0.2.1:40000".parse().unwrap()));
        assert!(server().is_own_address("192.0.2.1:40000".parse().unwrap()));
    }

    // RFC 4380 §5.3.1: the server relays exactly bubbles with RFC 6081 trailers.
    #[test]
    fn rfc4380_5_3_1_relays_only_bubbles_with_well_formed_trailers() {
        let mut b = [0u8; 40];
        let dst = client_addr([192, 0, 2, 1], "203.0.113.20:40000").encode();
        ipv6::emit_header(
            &mut b,
            0,
            ipv6::NH_NONE,
            255,
            &"fe80::1".parse().unwrap(),
            &dst,
        )
        .unwrap();
        let bubble = ipv6::Packet::new_checked(&b).unwrap();
        assert_eq!(check_relayed(&bubble, &[]), Ok(()));
        assert_eq!(check_relayed(&bubble, &[0x01, 4, 1, 2, 3, 4]), Ok(()));
        assert_eq!(check_relayed(&bubble, b"payload"), Err(Reject::BadTrailer));
        let echo = data_from(
            client_addr([192, 0, 2, 1], CLIENT).encode(),
            &dst.to_string(),
        );
        let echo = ipv6::Packet::new_checked(&echo).unwrap();
        assert_eq!(check_relayed(&echo, &[]), Err(Reject::NotRelayable));
        // Next header 59 with a payload is no bubble either.
        ipv6::emit_header(
            &mut b,
            0,
            ipv6::NH_UDP,
            255,
            &"fe80::1".parse().unwrap(),
            &dst,
        )
        .unwrap();
        let not_bubble = ipv6::Packet::new_checked(&b).unwrap();
        assert_eq!(check_relayed(&not_bubble, &[]), Err(Reject::NotRelayable));
    }
}
