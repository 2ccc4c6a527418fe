//! The loopback lab's IKE/ESP responder. The loopback lab has no namespaces and no TUN, so
//! the sans-IO [`Responder`] of `gate64-ike` runs inside its corporate network thread, at
//! [`ENDPOINT`] in the corporate prefix: the clients reach it through the daemon like any
//! corporate host, with the same two tunnels (infrastructure: [`INFRASTRUCTURE_TS`];
//! intranet: [`INTRANET_TS`]) and UDP-encapsulated ESP (RFC 3948). Its IKE SAs and child SAs
//! are the MMSA and QMSA of the loopback table. The default lab (`namespaced.rs`, a short
//! `bench capacity`) uses the daemon's own IKE endpoint.

use anyhow::{Context, Result};
use gate64_client::ipsec::{NAT_T_PORT, ike_packet, seal_udp};
use gate64_esp::udp_encap::{self, Encapsulated};
use gate64_esp::{SaDb, inner_addrs, spi_of};
use gate64_ike::auth::{Credentials, TrustAnchors};
use gate64_ike::responder::{Event, Responder, ResponderConfig};
use gate64_wire::{ipv6, udp};
use ipnet::{IpNet, Ipv6Net};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// The responder's address, in the lab's corporate prefix `2001:db8:c0::/48`.
pub const ENDPOINT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc0, 0, 0, 0, 0, 4);
/// The infrastructure tunnel's corporate side (the lab's "DNS server").
pub const INFRASTRUCTURE_TS: &str = "2001:db8:c0::53/128";
/// The intranet tunnel's corporate side: the whole corporate prefix.
pub const INTRANET_TS: &str = "2001:db8:c0::/48";
/// How often the responder's timers (half-open and idle timeouts, seconds apart) are checked.
const TIMER_CHECK: Duration = Duration::from_millis(250);
/// Inner addresses for clients that ask (the demo's clients do not: their Teredo or
/// IP-HTTPS address is their inner address too).
const POOL6: &str = "fd00:c1::/112";

/// IKE SAs (MMSA) and child SAs (QMSA) up, and when the last one came up.
#[derive(Default)]
pub struct SaCounts {
    /// IKE SAs established.
    pub mmsa: AtomicU64,
    /// Child SAs installed.
    pub qmsa: AtomicU64,
    /// Nanoseconds from the gateway's start to the first IKE SA (0: none yet).
    pub first_up_nanos: AtomicU64,
    /// Nanoseconds from the gateway's start to the latest IKE SA.
    pub last_up_nanos: AtomicU64,
}

impl SaCounts {
    /// IKE handshakes per second from the first IKE SA up to the latest, and that span.
    pub fn handshake_rate(&self) -> Option<(f64, f64)> {
        let n = self.mmsa.load(Ordering::Relaxed);
        let first = self.first_up_nanos.load(Ordering::Relaxed);
        let last = self.last_up_nanos.load(Ordering::Relaxed);
        let span = last.saturating_sub(first) as f64 / 1e9;
        (n > 1 && span > 0.0).then(|| ((n - 1) as f64 / span, span))
    }
}

/// The responder and its SA database.
pub struct Gateway {
    responder: Responder,
    sadb: SaDb,
    started: Instant,
    /// When the responder's timers are looked at next ([`TIMER_CHECK`]).
    next_timer_check: Instant,
    /// Sealed packets are built here.
    out: Vec<u8>,
}

impl Gateway {
    /// A responder with `ipsec.pem`/`ipsec.key` from `dir`, trusting the clients' CA
    /// `clients_ca` (PEM).
    pub fn new(dir: &Path, clients_ca: &str, started: Instant) -> Result<Self> {
        let read = |f: &str| std::fs::read(dir.join(f)).with_context(|| format!("reading {f}"));
        let credentials = Credentials::from_pem(&read("ipsec.pem")?, &read("ipsec.key")?)
            .map_err(|e| anyhow::anyhow!("ipsec.pem: {e}"))?;
        let anchors = TrustAnchors::from_pem(clients_ca.as_bytes())
            .map_err(|e| anyhow::anyhow!("the demo clients CA: {e}"))?;
        let net = |s: &str| s.parse::<IpNet>().context("lab prefix");
        let pool6: Ipv6Net = POOL6.parse().context("lab pool")?;
        let mut config = ResponderConfig::new(
            credentials,
            anchors,
            pool6,
            vec![net(INFRASTRUCTURE_TS)?],
            vec![net(INTRANET_TS)?],
        );
        // Every emulated client comes from the daemon's corporate links, many at once.
        config.half_open_cookie_threshold = usize::MAX;
        config.max_half_open_per_source = usize::MAX;
        // They all present `gate64 certs`' one client certificate: one identity, which may
        // hold many IKE SAs per tunnel, none replacing another.
        config.max_ike_sas_per_identity = usize::MAX;
        config.unique_ids = gate64_ike::responder::UniqueIds::Never;
        let responder = Responder::new(config, Instant::now(), SystemTime::now())
            .map_err(|e| anyhow::anyhow!("starting the IKE responder: {e:?}"))?;
        Ok(Gateway {
            responder,
            sadb: SaDb::new(),
            started,
            next_timer_check: started,
            out: Vec::new(),
        })
    }

    /// Handles `pkt` if it is for [`ENDPOINT`]: IKE answered, ESP opened and its inner packet
    /// left at the returned range of `pkt` (for the corporate host). `None` when the packet
    /// was not for the endpoint; `Some(None)` when it was and nothing is left for the host.
    pub fn receive(
        &mut self,
        pkt: &mut [u8],
        via: SocketAddr,
        sock: &UdpSocket,
        counts: &SaCounts,
    ) -> Option<Option<std::ops::Range<usize>>> {
        let p = ipv6::Packet::new_checked(pkt).ok()?;
        if p.dst() != ENDPOINT || p.next_header() != ipv6::NH_UDP {
            return None;
        }
        let src = p.src();
        let u = udp::Packet::new_checked(p.payload()).ok()?;
        let (sport, dport) = (u.src_port(), u.dst_port());
        let start = ipv6::HEADER_LEN + udp::HEADER_LEN;
        let end = ipv6::HEADER_LEN + usize::from(u.len());
        let payload = pkt.get_mut(start..end)?;
        let local = SocketAddr::new(IpAddr::V6(ENDPOINT), dport);
        let remote = SocketAddr::new(IpAddr::V6(src), sport);
        let ike = match udp_encap::classify(dport, payload) {
            Some(Encapsulated::Ike { offset }) => Some(offset),
            Some(Encapsulated::Esp) if payload.len() > 1 => None,
            _ => return Some(None),
        };
        if let Some(skip) = ike {
            let now = Instant::now();
            self.responder.handle(now, local, remote, &payload[skip..]);
            self.flush(now, via, sock, counts);
            return Some(None);
        }
        let inner = self.open(payload)?;
        Some(Some(start + inner.start..start + inner.end))
    }

    /// Opens ESP in place; the inner packet's range within `esp`.
    fn open(&self, esp: &mut [u8]) -> Option<std::ops::Range<usize>> {
        let entry = self.sadb.inbound(spi_of(esp)?)?;
        let opened = entry.sa.open(esp).ok()?;
        let inner = esp.get(opened.inner.clone())?;
        let (s, d) = inner_addrs(inner, opened.next_header)?;
        entry.sa.admits(s, d).then_some(opened.inner)
    }

    /// Sends the IPv6 packet `pkt` from the corporate network towards a client: sealed under
    /// its child SA when it has one, as it is otherwise.
    pub fn send(&mut self, pkt: &[u8], via: SocketAddr, sock: &UdpSocket) -> bool {
        let Some((src, dst)) = ipv6::peek_addrs(pkt) else {
            return false;
        };
        let Some(sa) = self.sadb.outbound_for(IpAddr::V6(dst), IpAddr::V6(src)) else {
            return sock.send_to(pkt, via).is_ok();
        };
        let port = sa.peer.udp_encap.unwrap_or(NAT_T_PORT);
        let from = SocketAddr::new(IpAddr::V6(ENDPOINT), NAT_T_PORT);
        let to = SocketAddr::new(IpAddr::V6(sa.peer.outer), port);
        self.out.clear();
        seal_udp(&sa.sa, from, to, pkt, &mut self.out).is_ok()
            && sock.send_to(&self.out, via).is_ok()
    }

    /// Runs the responder's timers, at most every [`TIMER_CHECK`]: `Responder::poll_timeout`
    /// walks every IKE SA, which at thousands of SAs must not happen per datagram.
    pub fn tick(&mut self, via: Option<SocketAddr>, sock: &UdpSocket, counts: &SaCounts) {
        let now = Instant::now();
        if now < self.next_timer_check {
            return;
        }
        self.next_timer_check = now + TIMER_CHECK;
        if self.responder.poll_timeout().is_some_and(|t| t <= now) {
            self.responder.handle_timeout(now);
        }
        if let Some(via) = via {
            self.flush(now, via, sock, counts);
        }
    }

    /// Sends the responder's datagrams and applies its events.
    fn flush(&mut self, now: Instant, via: SocketAddr, sock: &UdpSocket, counts: &SaCounts) {
        while let Some(t) = self.responder.poll_transmit() {
            if let Some(pkt) = ike_packet(t.local, t.remote, &t.bytes) {
                let _ = sock.send_to(&pkt, via);
            }
        }
        while let Some(e) = self.responder.poll_event() {
            match e {
                Event::IkeSaUp { .. } => {
                    counts.mmsa.fetch_add(1, Ordering::Relaxed);
                    let since = now.duration_since(self.started).as_nanos();
                    let since = u64::try_from(since).unwrap_or(u64::MAX);
                    counts.last_up_nanos.fetch_max(since, Ordering::Relaxed);
                    let _ = counts.first_up_nanos.compare_exchange(
                        0,
                        since.max(1),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                Event::IkeSaDown { .. } => {
                    let _ = counts
                        .mmsa
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
                }
                Event::ChildSaUp(pair) => {
                    let installed = self.sadb.install(*pair).is_ok();
                    counts
                        .qmsa
                        .fetch_add(u64::from(installed), Ordering::Relaxed);
                }
                Event::ChildSaDown { inbound_spi } if self.sadb.inbound(inbound_spi).is_some() => {
                    self.sadb.remove(inbound_spi);
                    let _ = counts
                        .qmsa
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
                }
                _ => {}
            }
        }
    }
}
