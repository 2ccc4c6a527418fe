//! A Teredo client and an IP-HTTPS client (their sans-IO client roles), the dataplane and a
//! fake TUN, driven in one process under a clock the test advances, in the style of quinn's
//! `Pair` (quinn-proto `tests/util.rs`). The harness does what the `gate64-io` drivers do —
//! a UDP worker's `handle_teredo`/`handle_tun` and the IP-HTTPS driver's `Connection` judge,
//! `handle_iphttps`, egress filter and timers — and executes the verdicts by handing the
//! bytes to the other side, so the decisions are tested without sockets or root.
#![allow(missing_docs)]

use gate64_dataplane::{
    ClientQueue, DataplaneConfig, DropReason, HEADROOM, Prefix, Shared, Stats, Verdict, Worker,
};
use gate64_iphttps::ClientConnection;
use gate64_iphttps::server::{
    CloseReason, Connection, Handshake, MAX_REPLY_LEN, PacketVerdict, ServerConfig as LinkConfig,
};
use gate64_teredo::client::{Client as TeredoRole, Event as TeredoEvent};
use gate64_teredo::{RelayConfig, ServerConfig};
use gate64_wire::{icmpv6, ipv6, teredo as tw};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SECONDARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// The Teredo client's NAT mapping: where its datagrams come from.
const MAPPING: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3546);
const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 5);
const CORP_ADDRESS: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
/// The /64 the IP-HTTPS connection gets from the pool (the `[iphttps]` default pool).
const LINK_PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0x5, 0, 0, 0, 0);

/// An IP-HTTPS connection's send queue: what the dataplane and the reader push, in order.
#[derive(Default)]
struct SendQueue(Mutex<Vec<Vec<u8>>>);

impl ClientQueue for SendQueue {
    fn push(&self, packet: &[u8]) -> bool {
        self.0.lock().unwrap().push(packet.to_vec());
        true
    }
}

/// A Teredo client behind a NAT that keeps `MAPPING`.
struct TeredoClient {
    role: TeredoRole,
    /// IPv6 packets delivered to it.
    inbox: Vec<Vec<u8>>,
}

/// An IP-HTTPS client and the server side of its connection.
struct IphttpsClient {
    role: ClientConnection,
    conn: Connection,
    queue: Arc<SendQueue>,
    inbox: Vec<Vec<u8>>,
}

struct Pair {
    now: Instant,
    /// What a UDP worker thread runs.
    udp: Worker,
    /// What an IP-HTTPS runtime thread runs.
    tls: Worker,
    /// Packets gate64 wrote to the TUN.
    tun: Vec<Vec<u8>>,
    teredo: TeredoClient,
    iphttps: IphttpsClient,
}

impl Pair {
    /// `open`: `[ipsec] require = false`, the lab switch.
    fn new(open: bool) -> Self {
        let link = LinkConfig::default();
        let shared = Shared::new(DataplaneConfig {
            teredo: Some(ServerConfig {
                primary: PRIMARY,
                secondary: SECONDARY,
                port: 3544,
                allow_loopback: false,
                mtu_option: Some(1280),
            }),
            relay: RelayConfig::default(),
            corp_prefixes: vec![Prefix::new(CORP_ADDRESS, 48)],
            corp_address: CORP_ADDRESS,
            self_addresses: Vec::new(),
            dns64_listen: Vec::new(),
            require_ipsec: !open,
            ipsec_endpoint: None,
            ipsec_pool: None,
            sadb: None,
            ike_per_client_per_sec: 1_000,
            rs_per_sec: 10,
            rs_burst: 10,
            iphttps_prefix: Some(Prefix::new(link.prefix, link.prefix_len)),
            nat64: None,
            binding_log: None,
        });
        let now = Instant::now();
        let worker = |s: &Arc<Shared>| Worker::new(Arc::clone(s), Arc::new(Stats::default()));
        Pair {
            now,
            udp: worker(&shared),
            tls: worker(&shared),
            tun: Vec::new(),
            teredo: TeredoClient {
                role: TeredoRole::new(SocketAddrV4::new(PRIMARY, 3544), 7),
                inbox: Vec::new(),
            },
            iphttps: IphttpsClient {
                role: ClientConnection::new(&link.path, "gate64.example", 9),
                conn: Connection::new(Arc::new(link), LINK_PREFIX, now),
                queue: Arc::new(SendQueue::default()),
                inbox: Vec::new(),
            },
        }
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    fn teredo_address(&self) -> Ipv6Addr {
        self.teredo.role.address().expect("qualified")
    }

    fn iphttps_address(&self) -> Ipv6Addr {
        self.iphttps.role.address().expect("configured")
    }

    /// RFC 4380 §5.2.1: the client solicits until the server's RA qualifies it.
    fn qualify_teredo(&mut self) {
        let mut rs = [0u8; 128];
        for _ in 0..3 {
            let Some(n) = self.teredo.role.poll_transmit(self.now, &mut rs) else {
                break;
            };
            self.teredo_datagram(&rs[..n]);
            if self.teredo.role.is_qualified() {
                return;
            }
        }
        panic!("the Teredo client did not qualify");
    }

    /// The Teredo client sends an IPv6 packet (bare, to its server: RFC 4380 §5.2.4).
    fn teredo_send(&mut self, packet: &[u8]) -> Verdict {
        self.teredo_datagram(packet)
    }

    /// A datagram from the Teredo client reaches a UDP worker.
    fn teredo_datagram(&mut self, datagram: &[u8]) -> Verdict {
        let (mut buf, start, end) = framed(datagram, HEADROOM);
        self.udp.start_batch();
        let v = self
            .udp
            .handle_teredo(self.now, PRIMARY, MAPPING, &mut buf, start, end);
        self.execute(v, &buf);
        self.drain_udp_worker();
        v
    }

    /// A packet read from the TUN by a UDP worker.
    fn corp_send(&mut self, packet: &[u8]) -> Verdict {
        let (mut buf, start, end) = framed(packet, HEADROOM);
        self.udp.start_batch();
        let v = self.udp.handle_tun(self.now, &mut buf, start, end);
        self.execute(v, &buf);
        self.drain_udp_worker();
        v
    }

    /// TLS is up: the client's POST, the server's 200, the connection registered.
    fn iphttps_link_up(&mut self) {
        let request = self.iphttps.role.request();
        let mut out = Vec::new();
        let date = "Sun, 06 Nov 1994 08:49:37 GMT";
        let up = self
            .iphttps
            .conn
            .handle_input(self.now, &request, date, &mut out);
        assert!(matches!(up, Ok(Handshake::LinkUp { .. })), "{up:?}");
        assert!(matches!(
            self.iphttps.role.handle_input(self.now, &out),
            Ok(Some(_))
        ));
        let queue = Arc::clone(&self.iphttps.queue) as Arc<dyn ClientQueue>;
        self.tls
            .shared()
            .iphttps_clients()
            .insert(LINK_PREFIX, queue);
        let mut rs = [0u8; 64];
        let n = self.iphttps.role.poll_transmit(self.now, &mut rs).unwrap();
        assert_eq!(self.iphttps_send(&rs[..n]), Ok(Verdict::Consumed));
        self.iphttps_deliver();
        assert!(
            self.iphttps.role.address().is_some(),
            "configured by the RA"
        );
    }

    /// The IP-HTTPS client sends a packet: the driver's reader judges it with the
    /// connection and takes what it forwards down the dataplane's road. Packets lie back to
    /// back in the driver's stream buffer, so this one gets no headroom.
    fn iphttps_send(&mut self, packet: &[u8]) -> Result<Verdict, DropReason> {
        let mut reply = [0u8; MAX_REPLY_LEN];
        match self
            .iphttps
            .conn
            .handle_packet(self.now, packet, &mut reply)
        {
            PacketVerdict::Forward => {
                let (mut buf, start, end) = framed(packet, 0);
                self.tls.start_batch();
                let v = self
                    .tls
                    .handle_iphttps(self.now, LINK_PREFIX, &mut buf, start, end);
                self.execute(v, &buf);
                while let Some(t) = self.tls.poll_transmit() {
                    self.deliver_to_mapping(t.to, &t.data);
                }
                Ok(v)
            }
            PacketVerdict::Reply { len } => {
                self.iphttps.queue.push(&reply[..len]);
                Ok(Verdict::Consumed)
            }
            PacketVerdict::Consumed => Ok(Verdict::Consumed),
            PacketVerdict::Drop(r) => Err(DropReason::from(r)),
        }
    }

    /// The driver's writer: the send queue through the connection's egress filter to the
    /// client.
    fn iphttps_deliver(&mut self) {
        let queued = std::mem::take(&mut *self.iphttps.queue.0.lock().unwrap());
        for p in queued {
            if self.iphttps.conn.handle_egress(self.now, &p).is_ok()
                && matches!(
                    self.iphttps.role.handle_packet(self.now, &p),
                    Ok(gate64_iphttps::Event::Packet)
                )
            {
                self.iphttps.inbox.push(p);
            }
        }
    }

    /// The driver's timers: the connection's, then its unsolicited RA through the queue.
    fn iphttps_timers(&mut self) -> Option<CloseReason> {
        if let Some(reason) = self.iphttps.conn.handle_timeout(self.now) {
            return Some(reason);
        }
        let mut ra = [0u8; MAX_REPLY_LEN];
        while let Some(n) = self.iphttps.conn.poll_unsolicited_ra(self.now, &mut ra) {
            self.iphttps.queue.push(&ra[..n]);
        }
        self.iphttps_deliver();
        None
    }

    /// Executes a verdict on `buf` the way the drivers' batch does.
    fn execute(&mut self, v: Verdict, buf: &[u8]) {
        match v {
            Verdict::Tun { start, end } => self.tun.push(buf[start..end].to_vec()),
            Verdict::Udp { to, start, end, .. } => self.deliver_to_mapping(to, &buf[start..end]),
            Verdict::Consumed | Verdict::Drop(_) => {}
        }
    }

    fn drain_udp_worker(&mut self) {
        while let Some(t) = self.udp.poll_transmit() {
            self.deliver_to_mapping(t.to, &t.data);
        }
        while let Some(p) = self.udp.poll_tun_write() {
            self.tun.push(p);
        }
    }

    /// A datagram from gate64 to `to`: the Teredo client's NAT lets it through.
    fn deliver_to_mapping(&mut self, to: SocketAddrV4, datagram: &[u8]) {
        assert_eq!(to, MAPPING, "gate64 sent a datagram to a stranger");
        match self.teredo.role.handle(self.now, datagram) {
            Ok(TeredoEvent::Packet { offset, len }) => self
                .teredo
                .inbox
                .push(datagram[offset..offset + len].to_vec()),
            // RFC 4380 §5.2.3: answer an indirect bubble with a direct one to its source.
            Ok(TeredoEvent::Bubble) => {
                let Ok(p) = tw::Packet::parse(datagram) else {
                    return;
                };
                if p.origin.is_some() {
                    let answer = bubble(self.teredo_address(), p.ipv6.src());
                    self.teredo_send(&answer);
                }
            }
            _ => {}
        }
    }
}

/// `bytes` at `headroom` in a buffer with room after it: `(buf, start, end)`.
fn framed(bytes: &[u8], headroom: usize) -> (Vec<u8>, usize, usize) {
    let mut buf = vec![0u8; headroom + bytes.len() + 256];
    buf[headroom..headroom + bytes.len()].copy_from_slice(bytes);
    (buf, headroom, headroom + bytes.len())
}

fn udp(src: Ipv6Addr, dst: Ipv6Addr, total: usize) -> Vec<u8> {
    let mut b = vec![0x5a; total];
    let plen = u16::try_from(total - ipv6::HEADER_LEN).unwrap();
    ipv6::emit_header(&mut b, plen, ipv6::NH_UDP, 64, &src, &dst).unwrap();
    b
}

fn echo(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut b = vec![0u8; ipv6::HEADER_LEN + 8 + 8];
    icmpv6::emit_echo(&mut b, true, &src, &dst, 7, 1, &[0xa5; 8]).unwrap();
    b
}

fn bubble(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut b = vec![0u8; ipv6::HEADER_LEN];
    ipv6::emit_header(&mut b, 0, ipv6::NH_NONE, 255, &src, &dst).unwrap();
    b
}

// RFC 4380 §5.2.1 / §5.3.2: RS with a nonce, RA from the primary with the origin indication.
#[test]
fn teredo_client_qualifies() {
    let mut p = Pair::new(false);
    p.qualify_teredo();
    let a = gate64_teredo::Address::decode(&p.teredo_address()).unwrap();
    assert_eq!((a.server, a.mapped), (PRIMARY, MAPPING));
    assert_eq!(p.udp.stats().teredo_qualifications.get(), 1);
    // The refresh 30 s later confirms the address.
    p.advance(Duration::from_secs(30));
    p.qualify_teredo();
    assert_eq!(p.udp.stats().teredo_qualifications.get(), 2);
}

#[test]
fn teredo_client_reaches_corpnet_and_the_reply_comes_back_without_ipsec() {
    let mut p = Pair::new(true);
    p.qualify_teredo();
    let me = p.teredo_address();
    let out = udp(me, CORP_HOST, 300);
    assert!(matches!(p.teredo_send(&out), Verdict::Tun { .. }));
    assert_eq!(p.tun, vec![out]);
    // Its packet made it a trusted peer (§5.4.2): the reply goes straight to its mapping.
    let back = udp(CORP_HOST, me, 500);
    assert!(matches!(p.corp_send(&back), Verdict::Udp { .. }));
    assert_eq!(p.teredo.inbox, vec![back]);
}

// RFC 4380 §5.4.1: to a client not heard from, the relay bubbles first and sends once the
// client answered.
#[test]
fn corp_to_a_silent_teredo_client_waits_for_its_bubble_without_ipsec() {
    let mut p = Pair::new(true);
    p.qualify_teredo();
    p.advance(Duration::from_secs(40));
    let me = p.teredo_address();
    let pkt = udp(CORP_HOST, me, 200);
    // Trust has lapsed after 30 s; the client's answer to the bubble releases the packet.
    assert_eq!(p.corp_send(&pkt), Verdict::Consumed);
    assert_eq!(p.teredo.inbox, vec![pkt]);
    // Trusted again: the next one goes straight out.
    let next = udp(CORP_HOST, me, 300);
    assert!(matches!(p.corp_send(&next), Verdict::Udp { .. }));
    assert_eq!(p.teredo.inbox.len(), 2);
}

#[test]
fn iphttps_client_reaches_corpnet_and_the_reply_comes_back_without_ipsec() {
    let mut p = Pair::new(true);
    p.iphttps_link_up();
    let me = p.iphttps_address();
    let out = udp(me, CORP_HOST, 300);
    assert!(matches!(p.iphttps_send(&out), Ok(Verdict::Tun { .. })));
    assert_eq!(p.tun, vec![out]);
    let back = udp(CORP_HOST, me, 400);
    assert_eq!(p.corp_send(&back), Verdict::Consumed);
    p.iphttps_deliver();
    assert_eq!(p.iphttps.inbox, vec![back]);
}

// The security step sits on the one road: both transports meet it the same way.
#[test]
fn policy_without_ipsec_drops_corp_traffic_from_both_transports() {
    let mut p = Pair::new(false);
    p.qualify_teredo();
    p.iphttps_link_up();
    let (t, i) = (p.teredo_address(), p.iphttps_address());
    assert_eq!(
        p.teredo_send(&udp(t, CORP_HOST, 100)),
        Verdict::Drop(DropReason::NoSa)
    );
    assert_eq!(
        p.iphttps_send(&udp(i, CORP_HOST, 100)),
        Ok(Verdict::Drop(DropReason::NoSa))
    );
    // Echo to gate64 itself passes, from either.
    assert!(matches!(
        p.teredo_send(&echo(t, CORP_ADDRESS)),
        Verdict::Tun { .. }
    ));
    assert!(matches!(
        p.iphttps_send(&echo(i, CORP_ADDRESS)),
        Ok(Verdict::Tun { .. })
    ));
    assert_eq!(p.udp.stats().drops(DropReason::NoSa), 1);
    assert_eq!(p.tls.stats().drops(DropReason::NoSa), 1);
    assert_eq!(p.tun.len(), 2);
}

// Client to client across transports, with `require = false` (with IPsec required, only out
// of an SA: `src/tests/ipsec.rs`).
#[test]
fn teredo_and_iphttps_clients_reach_each_other_without_ipsec() {
    let mut p = Pair::new(true);
    p.qualify_teredo();
    p.iphttps_link_up();
    let (t, i) = (p.teredo_address(), p.iphttps_address());
    let hello = udp(t, i, 200);
    assert_eq!(p.teredo_send(&hello), Verdict::Consumed);
    p.iphttps_deliver();
    assert_eq!(p.iphttps.inbox, vec![hello]);
    // The Teredo client just sent, so it is trusted: the answer leaves the IP-HTTPS thread
    // as a datagram to its mapping.
    let answer = udp(i, t, 300);
    assert!(matches!(p.iphttps_send(&answer), Ok(Verdict::Udp { .. })));
    assert_eq!(p.teredo.inbox, vec![answer]);
    assert!(p.tun.is_empty());
}

// docs/config.md: an IP-HTTPS link closes after `idle_timeout` with no packet in either
// direction; our own RAs do not count.
#[test]
fn iphttps_idle_timeout_counts_traffic_both_ways_without_ipsec() {
    let mut p = Pair::new(true);
    let t0 = p.now;
    p.iphttps_link_up();
    let idle = LinkConfig::default().idle_timeout;
    let me = p.iphttps_address();
    // Only towards the client, 10 minutes in: that keeps the link up.
    p.advance(Duration::from_secs(600));
    assert_eq!(p.iphttps_timers(), None);
    assert_eq!(p.corp_send(&udp(CORP_HOST, me, 100)), Verdict::Consumed);
    p.iphttps_deliver();
    p.advance(idle - Duration::from_secs(1));
    assert_eq!(p.iphttps_timers(), None, "traffic to the client counts");
    // Then nothing but our RAs until the timer runs out.
    p.advance(Duration::from_secs(1));
    assert_eq!(p.iphttps_timers(), Some(CloseReason::IdleTimeout));
    assert_eq!(p.now, t0 + Duration::from_secs(600) + idle);
    assert_eq!(
        p.iphttps_send(&udp(me, CORP_HOST, 100)),
        Err(DropReason::NoRoute),
        "a closed link forwards nothing"
    );
}
