//! The harness: the sans-IO client roles, two dataplane workers (a UDP worker's and an
//! IP-HTTPS thread's), a fake TUN and, with IPsec, gate64's IKE endpoint (the sans-IO
//! responder with the SA database the dataplane reads, as `gate64-io`'s IKE driver and the
//! daemon run them). Verdicts are executed by handing the bytes to the other side; time is a
//! clock the tests move from one deadline to the next.

use gate64_dataplane::{
    ClientQueue, DataplaneConfig, DropReason, HEADROOM, IphttpsLink, Prefix, Shared, Stats,
    Verdict, Worker,
};
use gate64_esp::udp_encap::{self, Encapsulated, IKE_PORT, NAT_T_PORT};
use gate64_iphttps::ClientConnection;
use gate64_iphttps::server::{
    CloseReason, Connection, Handshake, MAX_REPLY_LEN, ServerConfig as LinkConfig,
};
use gate64_teredo::client::{Client as TeredoRole, Event as TeredoEvent};
use gate64_teredo::{RelayConfig, ServerConfig};
use gate64_wire::{checksum, icmpv6, ipv6, teredo as tw, udp as wudp};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::ipsec::{EspClient, Gateway};

pub const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const SECONDARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// The Teredo client's NAT mapping: where its datagrams come from.
pub const MAPPING: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3546);
pub const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 5);
pub const CORP_ADDRESS: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
/// gate64's IKE and ESP endpoint (`ipsec.endpoint`).
pub const ENDPOINT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
/// The /64 the IP-HTTPS connection gets from the pool (the `[iphttps]` default pool).
pub const LINK_PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1, 0x5, 0, 0, 0, 0);

/// An IP-HTTPS connection's send queue: what the dataplane pushes, in order.
#[derive(Default)]
pub struct SendQueue(Mutex<Vec<Vec<u8>>>);

impl ClientQueue for SendQueue {
    fn push(&self, packet: &[u8]) -> bool {
        self.0.lock().unwrap().push(packet.to_vec());
        true
    }
}

/// A Teredo client behind a NAT that keeps `MAPPING`.
pub struct TeredoClient {
    pub role: TeredoRole,
    /// IPv6 packets delivered to it.
    pub inbox: Vec<Vec<u8>>,
}

/// An IP-HTTPS client and the server side of its connection.
pub struct IphttpsClient {
    pub role: ClientConnection,
    pub conn: Connection,
    pub queue: Arc<SendQueue>,
    /// IPv6 packets delivered to it (what its IPsec layer did not take).
    pub inbox: Vec<Vec<u8>>,
    /// Why the link closed, once it has.
    pub closed: Option<CloseReason>,
}

pub struct Pair {
    pub now: Instant,
    /// What a UDP worker thread runs.
    pub udp: Worker,
    /// What an IP-HTTPS runtime thread runs.
    pub tls: Worker,
    /// Packets gate64 wrote to the TUN (what the kernel did not hand to the IKE endpoint).
    pub tun: Vec<Vec<u8>>,
    pub teredo: TeredoClient,
    pub iphttps: IphttpsClient,
    /// gate64's IKE endpoint, with IPsec.
    pub gateway: Option<Gateway>,
    /// The IP-HTTPS client's IPsec layer, with IPsec.
    pub esp: Option<EspClient>,
    /// Packets the kernel routes back into the TUN for a worker to read (the IKE endpoint's).
    kernel: VecDeque<Vec<u8>>,
}

/// The dataplane's configuration: `require_ipsec`, and the IPsec endpoint, pool and SA
/// database when `sadb` is given.
fn dataplane_config(require_ipsec: bool, sadb: Option<Arc<gate64_esp::SaDb>>) -> DataplaneConfig {
    let link = LinkConfig::default();
    let ipsec = sadb.is_some();
    DataplaneConfig {
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
        // As the daemon does: gate64's own addresses, the IPsec endpoint among them.
        self_addresses: if ipsec {
            vec![ENDPOINT.into()]
        } else {
            Vec::new()
        },
        dns64_listen: Vec::new(),
        require_ipsec,
        ipsec_endpoint: ipsec.then_some(ENDPOINT),
        ipsec4: None,
        ipsec_pool: ipsec.then(|| Prefix::new(super::ipsec::POOL, 120)),
        sadb,
        ike_per_client_per_sec: 1_000,
        rs_per_sec: 10,
        rs_burst: 10,
        iphttps_prefix: Some(Prefix::new(link.prefix, link.prefix_len)),
        iphttps_peer_prefix: None,
        nat64: None,
        binding_log: None,
    }
}

impl Pair {
    /// `open`: `[ipsec] require = false`, the lab switch.
    pub fn new(open: bool) -> Self {
        Self::build(dataplane_config(!open, None), Instant::now())
    }

    /// IPsec required, with gate64's IKE endpoint `gateway` installing into the SA database
    /// the dataplane reads. The IP-HTTPS client's IPsec layer ([`Pair::esp`]) comes once the
    /// client has its address.
    pub fn with_ipsec(now: Instant, gateway: Gateway) -> Self {
        let sadb = Arc::clone(&gateway.sadb);
        let mut p = Self::build(dataplane_config(true, Some(sadb)), now);
        p.gateway = Some(gateway);
        p
    }

    fn build(config: DataplaneConfig, now: Instant) -> Self {
        let link = LinkConfig::default();
        let shared = Shared::new(config);
        let worker = |s: &Arc<Shared>| Worker::new(Arc::clone(s), Arc::new(Stats::default()));
        let mut udp = worker(&shared);
        // A driver runs the timers once as it starts; `poll_timeout` says when next.
        udp.handle_timeout(now, 0, 1);
        Pair {
            now,
            udp,
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
                closed: None,
            },
            gateway: None,
            esp: None,
            kernel: VecDeque::new(),
        }
    }

    /// The earliest deadline of every timer in the pair: the UDP worker's, the IP-HTTPS
    /// connection's, and with IPsec the IKE endpoint's and the client's.
    fn next_deadline(&mut self) -> Option<Instant> {
        let mut deadlines = vec![self.udp.poll_timeout(), self.iphttps.conn.poll_timeout()];
        if let Some(g) = self.gateway.as_mut() {
            deadlines.push(g.responder.poll_timeout());
        }
        if let Some(c) = self.esp.as_ref() {
            deadlines.push(c.poll_timeout());
        }
        deadlines.into_iter().flatten().min()
    }

    /// Moves the clock to `until`, stopping at every deadline on the way and running what is
    /// due there, as the drivers do. Returns how many deadlines it stopped at.
    pub fn run_until(&mut self, until: Instant) -> usize {
        let mut stops = 0;
        loop {
            match self.next_deadline() {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.fire_timers();
                    stops += 1;
                    assert!(stops < 100_000, "timers do not move on");
                }
                _ => {
                    self.now = until;
                    self.fire_timers();
                    return stops;
                }
            }
        }
    }

    /// Runs every timer due at `now`, then lets the packets they made settle.
    fn fire_timers(&mut self) {
        let now = self.now;
        if self.udp.poll_timeout().is_some_and(|t| t <= now) {
            self.udp.handle_timeout(now, 0, 1);
            self.drain_udp_worker();
        }
        self.iphttps_timers();
        if let Some(g) = self.gateway.as_mut()
            && g.responder.poll_timeout().is_some_and(|t| t <= now)
        {
            g.responder.handle_timeout(now);
        }
        if let Some(c) = self.esp.as_mut() {
            c.handle_timeout(now);
        }
        self.settle();
    }

    pub fn teredo_address(&self) -> Ipv6Addr {
        self.teredo.role.address().expect("qualified")
    }

    pub fn iphttps_address(&self) -> Ipv6Addr {
        self.iphttps.role.address().expect("configured")
    }

    /// RFC 4380 §5.2.1: the client solicits until the server's RA qualifies it.
    pub fn qualify_teredo(&mut self) {
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
    pub fn teredo_send(&mut self, packet: &[u8]) -> Verdict {
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
    pub fn corp_send(&mut self, packet: &[u8]) -> Verdict {
        let (mut buf, start, end) = framed(packet, HEADROOM);
        self.udp.start_batch();
        let v = self.udp.handle_tun(self.now, &mut buf, start, end);
        self.execute(v, &buf);
        self.drain_udp_worker();
        v
    }

    /// TLS is up: the client's POST, the server's 200, the connection registered, and its
    /// RS answered by an RA that configures it.
    pub fn iphttps_link_up(&mut self) {
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
        assert_eq!(self.iphttps_send(&rs[..n]), Verdict::Consumed);
        self.iphttps_deliver();
        assert!(
            self.iphttps.role.address().is_some(),
            "configured by the RA"
        );
    }

    /// The IP-HTTPS client sends a packet: the driver's reader hands it to its thread's
    /// worker, which judges it with the connection and takes it down the road. Packets lie
    /// back to back in the driver's stream buffer, so this one gets no headroom and the
    /// packets around it must come through untouched.
    pub fn iphttps_send(&mut self, packet: &[u8]) -> Verdict {
        const GUARD: u8 = 0xee;
        let mut buf = vec![GUARD; packet.len() + 2 * 64];
        let (start, end) = (64, 64 + packet.len());
        buf[start..end].copy_from_slice(packet);
        self.tls.start_batch();
        let mut link = IphttpsLink {
            conn: &mut self.iphttps.conn,
            replies: &*self.iphttps.queue,
        };
        let v = self
            .tls
            .handle_iphttps(self.now, &mut link, &mut buf, start, end, 0);
        assert!(
            buf[..start].iter().chain(&buf[end..]).all(|b| *b == GUARD),
            "the road wrote outside the packet"
        );
        self.execute(v, &buf);
        while let Some(t) = self.tls.poll_transmit() {
            self.deliver_to_mapping(t.to, &t.data);
        }
        v
    }

    /// The driver's writer: the send queue through the connection's egress filter to the
    /// client, whose IPsec layer takes what is its own.
    pub fn iphttps_deliver(&mut self) {
        let queued = std::mem::take(&mut *self.iphttps.queue.0.lock().unwrap());
        for p in queued {
            if self.iphttps.conn.handle_egress(self.now, &p).is_err()
                || !matches!(
                    self.iphttps.role.handle_packet(self.now, &p),
                    Ok(gate64_iphttps::Event::Packet)
                )
            {
                continue;
            }
            let taken = match self.esp.as_mut() {
                Some(c) => c.receive(self.now, &p),
                None => false,
            };
            if !taken {
                self.iphttps.inbox.push(p);
            }
        }
    }

    /// The driver's timers: the connection's, then its unsolicited RA through the queue.
    fn iphttps_timers(&mut self) {
        if self.iphttps.closed.is_some() {
            return;
        }
        if let Some(reason) = self.iphttps.conn.handle_timeout(self.now) {
            self.iphttps.closed = Some(reason);
            return;
        }
        let mut ra = [0u8; MAX_REPLY_LEN];
        while let Some(n) = self.iphttps.conn.poll_unsolicited_ra(self.now, &mut ra) {
            self.iphttps.queue.push(&ra[..n]);
        }
        self.iphttps_deliver();
    }

    /// Executes a verdict on `buf` the way the drivers' batch does.
    fn execute(&mut self, v: Verdict, buf: &[u8]) {
        match v {
            Verdict::Tun { start, end } => self.write_tun(buf[start..end].to_vec()),
            Verdict::Udp { to, start, end, .. } => self.deliver_to_mapping(to, &buf[start..end]),
            Verdict::Native { .. } => panic!("the pair harness has no native clients"),
            Verdict::Consumed | Verdict::Drop(_) => {}
        }
    }

    /// A packet gate64 wrote to the TUN: the kernel hands IKE for the endpoint to the IKE
    /// driver's socket; the rest is the corporate network's.
    fn write_tun(&mut self, packet: Vec<u8>) {
        if let Some(g) = self.gateway.as_mut()
            && let Some((remote, port, payload)) = udp_to(&packet, ENDPOINT)
            && let Some(Encapsulated::Ike { offset }) = udp_encap::classify(port, payload)
        {
            let local = SocketAddr::new(IpAddr::V6(ENDPOINT), port);
            g.responder
                .handle(self.now, local, remote, &payload[offset..]);
            return;
        }
        self.tun.push(packet);
    }

    fn drain_udp_worker(&mut self) {
        while let Some(t) = self.udp.poll_transmit() {
            self.deliver_to_mapping(t.to, &t.data);
        }
        while let Some(p) = self.udp.poll_tun_write() {
            self.write_tun(p);
        }
    }

    /// Moves what the IKE endpoint and the client's IPsec layer sent, and what the send
    /// queue holds, until nothing moves.
    pub fn settle(&mut self) {
        for _ in 0..1_000 {
            let mut moved = false;
            if let Some(g) = self.gateway.as_mut() {
                g.take_events();
                while let Some(t) = g.responder.poll_transmit() {
                    self.kernel
                        .push_back(ike_packet(t.local, t.remote, &t.bytes));
                }
            }
            while let Some(p) = self.kernel.pop_front() {
                self.corp_send(&p);
                moved = true;
            }
            if !self.iphttps.queue.0.lock().unwrap().is_empty() {
                self.iphttps_deliver();
                moved = true;
            }
            let sent = self.esp.as_mut().map(EspClient::take_transmits);
            for p in sent.into_iter().flatten() {
                self.iphttps_send(&p);
                moved = true;
            }
            if !moved {
                return;
            }
        }
        panic!("the pair does not settle");
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
pub fn framed(bytes: &[u8], headroom: usize) -> (Vec<u8>, usize, usize) {
    let mut buf = vec![0u8; headroom + bytes.len() + 256];
    buf[headroom..headroom + bytes.len()].copy_from_slice(bytes);
    (buf, headroom, headroom + bytes.len())
}

/// An IPv6 packet of `total` bytes carrying UDP-like filler from `src` to `dst`.
pub fn udp(src: Ipv6Addr, dst: Ipv6Addr, total: usize) -> Vec<u8> {
    let mut b = vec![0x5a; total];
    let plen = u16::try_from(total - ipv6::HEADER_LEN).unwrap();
    ipv6::emit_header(&mut b, plen, ipv6::NH_UDP, 64, &src, &dst).unwrap();
    b
}

pub fn echo(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut b = vec![0u8; ipv6::HEADER_LEN + 8 + 8];
    icmpv6::emit_echo(&mut b, true, &src, &dst, 7, 1, &[0xa5; 8]).unwrap();
    b
}

pub fn bubble(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut b = vec![0u8; ipv6::HEADER_LEN];
    ipv6::emit_header(&mut b, 0, ipv6::NH_NONE, 255, &src, &dst).unwrap();
    b
}

/// An IPv6/UDP packet from `src` to `dst` (both IPv6) with `payload` and its checksum.
pub fn udp_packet(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
    let (IpAddr::V6(s), IpAddr::V6(d)) = (src.ip(), dst.ip()) else {
        panic!("IPv6 addresses only");
    };
    let udp_len = u16::try_from(wudp::HEADER_LEN + payload.len()).unwrap();
    let mut pkt = vec![0u8; ipv6::HEADER_LEN + usize::from(udp_len)];
    ipv6::emit_header(&mut pkt, udp_len, ipv6::NH_UDP, 64, &s, &d).unwrap();
    let dgram = &mut pkt[ipv6::HEADER_LEN..];
    dgram[wudp::HEADER_LEN..].copy_from_slice(payload);
    let repr = wudp::Repr {
        src_port: src.port(),
        dst_port: dst.port(),
        payload_len: u16::try_from(payload.len()).unwrap(),
    };
    repr.emit(dgram).unwrap();
    let pseudo = checksum::pseudo_header_v6(&s, &d, ipv6::NH_UDP, u32::from(udp_len));
    wudp::Packet::new_unchecked(dgram).fill_checksum(pseudo);
    pkt
}

/// An IKE message as the packet that carries it: on port 4500 behind the non-ESP marker
/// (RFC 3948 §2.2).
pub fn ike_packet(local: SocketAddr, remote: SocketAddr, ike: &[u8]) -> Vec<u8> {
    if remote.port() == NAT_T_PORT {
        let mut payload = udp_encap::NON_ESP_MARKER.to_vec();
        payload.extend_from_slice(ike);
        udp_packet(local, remote, &payload)
    } else {
        udp_packet(local, remote, ike)
    }
}

/// The sender, destination port and payload of a UDP packet to `to` on an IPsec port.
pub fn udp_to(packet: &[u8], to: Ipv6Addr) -> Option<(SocketAddr, u16, &[u8])> {
    let pkt = ipv6::Packet::new_checked(packet).ok()?;
    if pkt.dst() != to || pkt.next_header() != ipv6::NH_UDP {
        return None;
    }
    let (src_port, dst_port) = wudp::peek_ports(pkt.payload())?;
    if dst_port != IKE_PORT && dst_port != NAT_T_PORT {
        return None;
    }
    let payload = packet.get(ipv6::HEADER_LEN + wudp::HEADER_LEN..)?;
    Some((
        SocketAddr::new(IpAddr::V6(pkt.src()), src_port),
        dst_port,
        payload,
    ))
}

/// Every drop the two workers counted for `reason`.
pub fn drops(p: &Pair, reason: DropReason) -> u64 {
    p.udp.stats().drops(reason) + p.tls.stats().drops(reason)
}

/// `Duration` in seconds, for readability.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
