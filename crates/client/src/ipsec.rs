//! The DirectAccess-style IPsec layer of a client: two IKEv2 initiators
//! (`infrastructure` and `intranet`, one IKE SA and one child SA each, RFC 7296) and their ESP
//! (RFC 4303, AES-GCM RFC 4106) between the transport session and the host.
//!
//! [`IpsecHost`] wraps the [`Host`] of a transport session (the TUN device of `gate64 connect`),
//! so Teredo and IP-HTTPS carry it unchanged:
//! - once the transport configures the host with its outer address, both initiators start
//!   from `[outer]:4500` to `[endpoint]:4500` (RFC 7296 §2.23 lets an initiator start on
//!   4500; strongSwan's userspace ESP only takes UDP-encapsulated ESP anyway), or, without
//!   [`IpsecSettings::udp_encap`] (IP-HTTPS, whose tunnel has no NAT inside), from port 500
//!   to port 500, moving to 4500 only if NAT detection finds a NAT. Their datagrams become
//!   IPv6/UDP packets built here, with the non-ESP marker of RFC 3948 §2.2 on 4500, and go
//!   up the transport like the host's packets: no kernel socket;
//! - an established child SA gives the inner address (CFG_REPLY) and the corporate side (the
//!   narrowed TSr): the host adds the address and routes the selectors' prefixes to itself,
//!   so `--route` is not needed;
//! - host packets covered by a child SA (the narrowest remote selector wins: the
//!   infrastructure host stays in its own tunnel inside the intranet's /64) are sealed in
//!   place and wrapped in IPv6 + UDP 4500 (RFC 3948 §2.1) when the SA was negotiated on
//!   4500, else in IPv6 alone (next header 50); others pass as they are;
//! - from the transport, UDP from the endpoint to our port 4500 (or 500) is IKE when it starts
//!   with the zero marker, a NAT keepalive when it is the one byte 0xFF (RFC 3948 §2.3), ESP
//!   otherwise; raw ESP (next header 50) is accepted too. ESP is opened, its inner packet
//!   checked against the SA's selectors (RFC 4301 §5.2) and handed to the host.
//!
//! A tunnel whose negotiation fails, or whose IKE SA the responder deletes, starts over after
//! [`RETRY_AFTER`], doubling per failure up to [`RETRY_MAX`], with a random part so that many
//! clients refused together (a busy responder) do not come back together. Each tunnel is
//! negotiated afresh every [`RENEW_AFTER`] (by default), before the responder's lifetimes run
//! out: make before break, the old child SA carries the traffic until the new one is up, and
//! the new IKE SA's INITIAL_CONTACT retires the old one at the responder. Renewing the whole
//! tunnel renews the IKE SA too, which the initiator does not rekey. The initiator answers
//! liveness checks (DPD), and a responder's CREATE_CHILD_SA with an empty response (which
//! fails that rekey). A tunnel that seals packets but hears nothing back for
//! [`LIVENESS_AFTER`] sends a liveness check itself (RFC 7296 §2.4); unanswered, the tunnel is
//! negotiated again. Each IKE SA asks for a Quick Crash Detection token (RFC 6290): a
//! responder that restarted or failed over without the IKE SA (gate64 with `[ipsec]
//! qcd_secret_file`) answers the check with it at once, and the tunnel is negotiated again
//! without waiting for the retransmissions to run out. Each IKE SA announces RFC 6311
//! Message ID synchronization too, and answers the sync request of a gate64 node that took
//! it over from its HA peer.
//!
//! The packets themselves (IKE in IPv6/UDP, ESP in IPv6/UDP 4500 or IPv6) are built in `ipsec/packet.rs`,
//! the settings read from the command line in `ipsec/settings.rs`.

use super::{Host, Ready, sleep_until};
use anyhow::{Context, Result};
use gate64_esp::udp_encap::{self, Encapsulated};
use gate64_esp::{
    Inbound, MAX_TRAILER, NEXT_HEADER_IPV6, Outbound, SPI_SEQ_IV_LEN, TunnelKind, esp_len,
    inner_addrs, spi_of,
};
use gate64_ike::auth::{AuthError, Credentials, Identity, TrustAnchors};
use gate64_ike::initiator::{Initiator, InitiatorConfig, InitiatorError, InitiatorEvent};
use gate64_ike::keys::Group;
use gate64_ike::message::{TrafficSelector, notify};
use gate64_wire::{ipv6, udp};
use ipnet::Ipv6Net;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tracing::{debug, info, warn};

pub use gate64_esp::udp_encap::{IKE_PORT, NAT_T_PORT};
/// A failed or deleted tunnel is negotiated again after this long.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);
/// A tunnel is negotiated afresh after this long: below strongSwan's default child SA rekey
/// time (1 h, which it would try as responder and fail against this initiator) and gate64's
/// `child_lifetime` (8 h).
pub const RENEW_AFTER: Duration = Duration::from_secs(45 * 60);
/// The longest wait between two negotiations of a tunnel.
pub const RETRY_MAX: Duration = Duration::from_secs(120);
/// First retransmission of an unanswered IKE request (doubling, RFC 7296 §2.1).
const RETRANSMIT_AFTER: Duration = Duration::from_millis(500);
/// Retransmissions before a negotiation is given up (and retried after [`RETRY_AFTER`]).
const MAX_RETRANSMITS: u32 = 5;
/// A tunnel that has sealed packets but received nothing for this long sends a liveness check
/// (RFC 7296 §2.4); unanswered after [`MAX_RETRANSMITS`] retransmissions (about 30 s) the
/// tunnel is down and negotiated again.
pub const LIVENESS_AFTER: Duration = Duration::from_secs(10);
/// Outer bytes a sealed packet adds: IPv6 (40), UDP (8), SPI/sequence/IV (16) and the
/// largest trailer (padding, pad length, next header, ICV).
pub const OVERHEAD: usize = ipv6::HEADER_LEN + udp::HEADER_LEN + SPI_SEQ_IV_LEN + MAX_TRAILER;
/// ESP's IP protocol number (RFC 4303), as an IPv6 next header.
const NH_ESP: u8 = 50;
/// The hop limit of the outer packets.
const HOP_LIMIT: u8 = 64;

/// A host that can take the inner address and the corporate routes of a child SA.
pub trait InnerLink: Host {
    /// Adds `inner` as an address and routes `routes` to the host with `inner` as their
    /// source; TCP over them announces `mss` (a sealed segment must fit the transport's MTU).
    fn install_inner(&mut self, inner: Ipv6Addr, routes: &[Ipv6Net], mss: u16) -> Result<()>;

    /// The layer's counters changed (SAs up or down, packets sealed, opened or dropped):
    /// for a host that reports them, such as `gate64 bench load`'s.
    fn stats_changed(&mut self, _stats: &IpsecStats) {}
}

/// Counters of the IPsec layer (logged by `gate64 connect`, shown by the demo).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IpsecStats {
    /// IKE SAs established (MMSA).
    pub ike_sas: u32,
    /// Child SAs installed (QMSA).
    pub child_sas: u32,
    /// Packets sealed towards the responder.
    pub sealed: u64,
    /// Packets opened from the responder and handed to the host.
    pub opened: u64,
    /// ESP dropped: unknown SPI, failed ICV or replay, or outside the selectors.
    pub dropped: u64,
    /// IKE negotiations completed (IKE_SA_INIT and IKE_AUTH), renewals and negotiations
    /// after a lost SA included: unlike `ike_sas`, never goes down.
    pub negotiations: u64,
}

/// One tunnel's negotiation and, once established, its child SA.
struct Tunnel {
    kind: TunnelKind,
    initiator: Option<Initiator>,
    child: Option<ChildSa>,
    /// When to negotiate again after a failure.
    retry_at: Option<Instant>,
    /// Failures since the tunnel was last up.
    failures: u32,
    /// When to negotiate the established tunnel afresh ([`RENEW_AFTER`]).
    renew_at: Option<Instant>,
    /// When the first packet sealed since the responder was last heard from (ESP opened)
    /// went out: a liveness check is due [`LIVENESS_AFTER`] later.
    unanswered_since: Option<Instant>,
}

/// An installed child SA from our side: `inbound` opens what the responder sends.
struct ChildSa {
    inbound: Inbound,
    outbound: Outbound,
    /// The size of the corporate side: the narrowest covering SA carries a packet.
    span: u128,
    /// ESP goes in UDP 4500 (the IKE SA runs on 4500), else as next header 50.
    udp_encap: bool,
}

/// What a packet from the transport is, for the IPsec layer.
enum Incoming {
    /// An IKE message (without the non-ESP marker) at this range of the packet.
    Ike(std::ops::Range<usize>),
    /// ESP from its SPI on, at this range.
    Esp(std::ops::Range<usize>),
    /// A NAT-keepalive (RFC 3948 §2.3).
    Keepalive,
}

/// The IPsec layer between a transport session and its host (see the module docs).
pub struct IpsecHost<H> {
    host: H,
    settings: Arc<IpsecSettings>,
    /// Our outer address (the transport's) once configured.
    outer: Option<Ipv6Addr>,
    mtu: u32,
    tunnels: Vec<Tunnel>,
    /// IKE packets waiting for the transport.
    pending: Vec<Vec<u8>>,
    /// Packets read from the host, before sealing.
    from_host: Vec<u8>,
    /// ESP copied out of the transport's buffer to be opened in place.
    esp: Vec<u8>,
    stats: IpsecStats,
    /// The counters last passed to [`InnerLink::stats_changed`].
    reported: IpsecStats,
}

impl<H: InnerLink> IpsecHost<H> {
    /// The layer in front of `host`; nothing is negotiated before the transport configures
    /// the host.
    pub fn new(host: H, settings: Arc<IpsecSettings>) -> Self {
        let tunnels = settings
            .tunnels
            .iter()
            .map(|(kind, _)| Tunnel {
                kind: *kind,
                initiator: None,
                child: None,
                retry_at: None,
                failures: 0,
                renew_at: None,
                unanswered_since: None,
            })
            .collect();
        IpsecHost {
            host,
            settings,
            outer: None,
            mtu: 1280,
            tunnels,
            pending: Vec::new(),
            from_host: Vec::new(),
            esp: Vec::new(),
            stats: IpsecStats::default(),
            reported: IpsecStats::default(),
        }
    }

    /// Tells the host about changed counters.
    fn report(&mut self) {
        if self.stats != self.reported {
            self.reported = self.stats;
            self.host.stats_changed(&self.stats);
        }
    }

    /// The host behind the layer.
    pub fn host_mut(&mut self) -> &mut H {
        &mut self.host
    }

    /// The counters so far.
    pub fn stats(&self) -> IpsecStats {
        self.stats
    }

    /// Starts (or restarts) the negotiation of tunnel `i` from `outer`; with `keep_child`
    /// the current child SA carries traffic until the new one is up.
    fn start(&mut self, i: usize, now: Instant, keep_child: bool) {
        let Some(outer) = self.outer else { return };
        let Some(kind) = self.tunnels.get(i).map(|t| t.kind) else {
            return;
        };
        let corporate = self
            .settings
            .tunnels
            .get(i)
            .map(|(_, c)| c.clone())
            .unwrap_or_default();
        let port = if self.settings.udp_encap {
            NAT_T_PORT
        } else {
            IKE_PORT
        };
        let local = SocketAddr::new(IpAddr::V6(outer), port);
        let remote = SocketAddr::new(IpAddr::V6(self.settings.endpoint), port);
        let made = self
            .settings
            .initiator(kind, &corporate, outer, (now, local, remote));
        let tunnel = &mut self.tunnels[i];
        tunnel.renew_at = None;
        if !keep_child && tunnel.child.take().is_some() {
            self.stats.child_sas = self.stats.child_sas.saturating_sub(1);
            self.stats.ike_sas = self.stats.ike_sas.saturating_sub(1);
        }
        match made {
            Ok(mut initiator) => {
                debug!(tunnel = ?kind, %local, %remote, "IKE: initiating");
                initiator.start(now);
                tunnel.initiator = Some(initiator);
                tunnel.retry_at = None;
            }
            Err(e) => {
                warn!(tunnel = ?kind, error = %format!("{e:#}"), "IKE: cannot initiate");
                tunnel.initiator = None;
                tunnel.retry_at = Some(now + RETRY_AFTER);
            }
        }
        self.pump(now);
    }

    /// Moves the initiators' datagrams to `pending` and handles their events.
    fn pump(&mut self, now: Instant) {
        for i in 0..self.tunnels.len() {
            let Some(initiator) = self.tunnels[i].initiator.as_mut() else {
                continue;
            };
            while let Some((local, remote, bytes)) = initiator.poll_transmit() {
                if let Some(pkt) = ike_packet(local, remote, &bytes) {
                    self.pending.push(pkt);
                }
            }
            let mut events = Vec::new();
            while let Some(e) = initiator.poll_event() {
                events.push(e);
            }
            for e in events {
                self.on_event(i, now, e);
            }
        }
        // An event may have made another tunnel's initiator send (a liveness check).
        for t in &mut self.tunnels {
            if let Some(initiator) = t.initiator.as_mut() {
                while let Some((local, remote, bytes)) = initiator.poll_transmit() {
                    if let Some(pkt) = ike_packet(local, remote, &bytes) {
                        self.pending.push(pkt);
                    }
                }
            }
        }
    }

    fn on_event(&mut self, i: usize, now: Instant, event: InitiatorEvent) {
        let kind = self.tunnels[i].kind;
        match event {
            InitiatorEvent::Established {
                identity,
                inner,
                dns,
                dns_domains,
                child,
                auth_lifetime,
                ..
            } => {
                let sa = Inbound::new(&child.inbound)
                    .and_then(|inb| Ok((inb, Outbound::new(&child.outbound)?)));
                let (inbound, outbound) = match sa {
                    Ok(pair) => pair,
                    Err(e) => {
                        warn!(tunnel = ?kind, error = ?e, "child SA keys refused");
                        self.retry(i, now);
                        return;
                    }
                };
                let corporate = &child.outbound.remote_ts;
                let routes: Vec<Ipv6Net> = corporate.iter().flat_map(prefixes_of).collect();
                let span = corporate.iter().map(span_of).min().unwrap_or(u128::MAX);
                let inner6 = match inner {
                    Some(IpAddr::V6(a)) => Some(a),
                    _ => self.outer,
                };
                if let Some(addr) = inner6
                    && let Err(e) = self.host.install_inner(addr, &routes, self.mss())
                {
                    warn!(tunnel = ?kind, error = %format!("{e:#}"), "installing the inner address and routes");
                }
                info!(
                    tunnel = ?kind,
                    responder = %identity,
                    inner = ?inner6,
                    routes = ?routes,
                    dns = ?dns,
                    dns_domains = ?dns_domains,
                    spi_in = format_args!("{:08x}", inbound.spi()),
                    spi_out = format_args!("{:08x}", outbound.spi()),
                    "IPsec tunnel up"
                );
                self.stats.negotiations += 1;
                let tunnel = &mut self.tunnels[i];
                tunnel.failures = 0;
                tunnel.unanswered_since = None;
                tunnel.renew_at = Some(now + renew_after(self.settings.renew_after, auth_lifetime));
                let child = ChildSa {
                    inbound,
                    outbound,
                    span,
                    udp_encap: child.peer.udp_encap.is_some(),
                };
                if tunnel.child.replace(child).is_none() {
                    self.stats.ike_sas += 1;
                    self.stats.child_sas += 1;
                }
            }
            InitiatorEvent::Failed(InitiatorError::ResponderLost) => {
                // RFC 6290: the responder proved that it lost the IKE SA; nothing to wait
                // for, negotiate at once.
                self.retry(i, now);
                self.tunnels[i].retry_at = Some(now);
                // The other tunnel's IKE SA is most likely gone too; the token proves only
                // this one's loss, so check it now rather than after its own silence.
                for (j, t) in self.tunnels.iter_mut().enumerate() {
                    if let (true, Some(other)) = (j != i, t.initiator.as_mut())
                        && other.check_liveness(now)
                    {
                        t.unanswered_since = None;
                        debug!(tunnel = ?t.kind, "IKE: liveness check after the other tunnel's loss");
                    }
                }
                info!(
                    tunnel = ?kind,
                    "IPsec tunnel down: the responder lost its IKE SA (restart or failover, \
                     RFC 6290 Quick Crash Detection); reconnecting now"
                );
            }
            InitiatorEvent::Failed(e) => {
                let wait = self.retry(i, now);
                match failure_hint(&e) {
                    Some(hint) => {
                        warn!(tunnel = ?kind, error = %e, hint, retry_in = ?wait, "IPsec tunnel down")
                    }
                    None => {
                        warn!(tunnel = ?kind, error = %e, retry_in = ?wait, "IPsec tunnel down")
                    }
                }
            }
            _ => {}
        }
    }

    /// Drops tunnel `i`'s SAs and schedules its next negotiation; returns the wait.
    fn retry(&mut self, i: usize, now: Instant) -> Duration {
        let tunnel = &mut self.tunnels[i];
        if tunnel.child.take().is_some() {
            self.stats.child_sas = self.stats.child_sas.saturating_sub(1);
            self.stats.ike_sas = self.stats.ike_sas.saturating_sub(1);
        }
        tunnel.initiator = None;
        tunnel.renew_at = None;
        tunnel.unanswered_since = None;
        let wait = retry_delay(tunnel.failures);
        tunnel.failures = tunnel.failures.saturating_add(1);
        tunnel.retry_at = Some(now + wait);
        wait
    }

    /// The TCP MSS that keeps a sealed segment within the transport's MTU (inner IPv6 40 +
    /// TCP 20 + options 20 besides [`OVERHEAD`]).
    fn mss(&self) -> u16 {
        let room = usize::try_from(self.mtu).unwrap_or(1280);
        u16::try_from(room.saturating_sub(OVERHEAD + 80).max(536)).unwrap_or(536)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.tunnels
            .iter()
            .filter_map(|t| {
                let ike = t.initiator.as_ref().and_then(Initiator::poll_timeout);
                let liveness = t.unanswered_since.map(|at| at + LIVENESS_AFTER);
                [ike, t.retry_at, t.renew_at, liveness]
                    .into_iter()
                    .flatten()
                    .min()
            })
            .min()
    }

    fn on_timeout(&mut self, now: Instant) {
        for i in 0..self.tunnels.len() {
            if self.tunnels[i].retry_at.is_some_and(|at| at <= now) {
                self.start(i, now, false);
            } else if self.tunnels[i].renew_at.is_some_and(|at| at <= now) {
                debug!(tunnel = ?self.tunnels[i].kind, "IKE: negotiating the tunnel afresh");
                self.start(i, now, true);
            } else if let Some(initiator) = self.tunnels[i].initiator.as_mut() {
                initiator.handle_timeout(now);
                let tunnel = &mut self.tunnels[i];
                if tunnel
                    .unanswered_since
                    .is_some_and(|at| at + LIVENESS_AFTER <= now)
                {
                    tunnel.unanswered_since = None;
                    if let Some(initiator) = tunnel.initiator.as_mut()
                        && initiator.check_liveness(now)
                    {
                        debug!(tunnel = ?tunnel.kind, "IKE: nothing heard, liveness check");
                    }
                }
            }
        }
        self.pump(now);
    }

    /// Classifies a packet from the transport: IKE or ESP from the endpoint to us, or `None`
    /// for the host.
    fn classify(&self, pkt: &[u8]) -> Option<Incoming> {
        let outer = self.outer?;
        let p = ipv6::Packet::new_checked(pkt).ok()?;
        if p.src() != self.settings.endpoint || p.dst() != outer {
            return None;
        }
        let at = ipv6::HEADER_LEN;
        match p.next_header() {
            NH_ESP => Some(Incoming::Esp(at..p.total_len())),
            ipv6::NH_UDP => {
                let u = udp::Packet::new_checked(p.payload()).ok()?;
                let data = at + udp::HEADER_LEN..at + usize::from(u.len());
                match udp_encap::classify(u.dst_port(), u.payload())? {
                    Encapsulated::Ike { offset } => {
                        Some(Incoming::Ike(data.start + offset..data.end))
                    }
                    Encapsulated::Keepalive => Some(Incoming::Keepalive),
                    Encapsulated::Esp => Some(Incoming::Esp(data)),
                }
            }
            _ => None,
        }
    }

    /// Opens ESP and hands its inner packet to the host.
    async fn open(&mut self, esp: &[u8]) {
        let Some(spi) = spi_of(esp) else {
            self.stats.dropped += 1;
            return;
        };
        let Some(tunnel) = self
            .tunnels
            .iter_mut()
            .find(|t| t.child.as_ref().is_some_and(|c| c.inbound.spi() == spi))
        else {
            debug!(spi = format_args!("{spi:08x}"), "ESP for an unknown SPI");
            self.stats.dropped += 1;
            return;
        };
        let Some(sa) = tunnel.child.as_ref() else {
            return;
        };
        self.esp.clear();
        self.esp.extend_from_slice(esp);
        let opened = match sa.inbound.open(&mut self.esp) {
            Ok(o) => o,
            Err(e) => {
                debug!(spi = format_args!("{spi:08x}"), error = ?e, "ESP refused");
                self.stats.dropped += 1;
                return;
            }
        };
        let Some(inner) = self.esp.get(opened.inner.clone()) else {
            self.stats.dropped += 1;
            return;
        };
        let admitted = inner_addrs(inner, opened.next_header)
            .is_some_and(|(src, dst)| sa.inbound.admits(src, dst));
        if !admitted {
            debug!(
                spi = format_args!("{spi:08x}"),
                "ESP inner packet outside the selectors"
            );
            self.stats.dropped += 1;
            return;
        }
        tunnel.unanswered_since = None;
        self.stats.opened += 1;
        self.host.deliver(inner).await;
    }

    /// Seals `pkt` under the narrowest child SA covering it and appends the outer packet to
    /// `out`; appends `pkt` as it is when no SA covers it.
    fn seal_or_pass(&mut self, pkt: &[u8], out: &mut Vec<u8>) {
        let (Some(outer), Some((src, dst))) = (self.outer, ipv6::peek_addrs(pkt)) else {
            out.extend_from_slice(pkt);
            return;
        };
        let (src, dst) = (IpAddr::V6(src), IpAddr::V6(dst));
        let tunnel = self
            .tunnels
            .iter_mut()
            .filter(|t| {
                t.child
                    .as_ref()
                    .is_some_and(|c| c.outbound.covers(dst, src))
            })
            .min_by_key(|t| t.child.as_ref().map_or(u128::MAX, |c| c.span));
        let Some(tunnel) = tunnel else {
            out.extend_from_slice(pkt);
            return;
        };
        let Some(sa) = tunnel.child.as_ref() else {
            out.extend_from_slice(pkt);
            return;
        };
        let nat_t = |a| SocketAddr::new(IpAddr::V6(a), NAT_T_PORT);
        let sealed = if sa.udp_encap {
            seal_udp(
                &sa.outbound,
                nat_t(outer),
                nat_t(self.settings.endpoint),
                pkt,
                out,
            )
        } else {
            seal_raw(&sa.outbound, (outer, self.settings.endpoint), pkt, out)
        };
        match sealed {
            Ok(()) => {
                self.stats.sealed += 1;
                tunnel.unanswered_since.get_or_insert_with(Instant::now);
            }
            Err(e) => debug!(error = %e, "packet not sealed"),
        }
    }
}

/// When a tunnel is negotiated afresh: after `configured`, or sooner when the responder
/// announced that it must be authenticated anew (AUTH_LIFETIME, RFC 4478), at nine tenths of
/// that lifetime, as strongSwan keeps a margin before it.
fn renew_after(configured: Duration, auth_lifetime: Option<Duration>) -> Duration {
    auth_lifetime.map_or(configured, |lifetime| configured.min(lifetime.mul_f64(0.9)))
}

/// The wait before negotiating again after `failures` failures in a row: [`RETRY_AFTER`]
/// doubling up to [`RETRY_MAX`], of which a random half.
fn retry_delay(failures: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let base = RETRY_AFTER
        .saturating_mul(1u32.checked_shl(failures).unwrap_or(u32::MAX))
        .min(RETRY_MAX);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(failures);
    let fraction = (h.finish() % 1000) as f64 / 1000.0;
    base / 2 + base.mul_f64(fraction / 2.0)
}

impl<H: InnerLink> Host for IpsecHost<H> {
    async fn configure(&mut self, address: Ipv6Addr, prefix_len: u8, mtu: u32) -> Result<()> {
        self.host.configure(address, prefix_len, mtu).await?;
        self.mtu = mtu;
        if self.outer != Some(address) {
            // A new outer address: the responder knows us by the old one, so both tunnels
            // are negotiated again (no MOBIKE).
            self.outer = Some(address);
            let now = Instant::now();
            for i in 0..self.tunnels.len() {
                self.start(i, now, false);
            }
            self.report();
        }
        Ok(())
    }

    async fn deliver(&mut self, packet: &[u8]) {
        match self.classify(packet) {
            Some(Incoming::Ike(r)) => {
                let now = Instant::now();
                if let Some(ike) = packet.get(r) {
                    for t in &mut self.tunnels {
                        if let Some(initiator) = t.initiator.as_mut() {
                            initiator.handle(now, ike);
                        }
                    }
                }
                self.pump(now);
            }
            Some(Incoming::Esp(r)) => {
                if let Some(esp) = packet.get(r) {
                    self.open(esp).await;
                }
            }
            Some(Incoming::Keepalive) => {}
            None => self.host.deliver(packet).await,
        }
        self.report();
    }

    async fn flush(&mut self) {
        self.host.flush().await;
    }

    fn refused(&mut self) {
        self.host.refused();
    }

    async fn ready(&mut self) -> Result<Ready> {
        loop {
            if !self.pending.is_empty() {
                return Ok(Ready::Packets);
            }
            let deadline = self.next_deadline();
            tokio::select! {
                r = self.host.ready() => return r,
                _ = sleep_until(deadline) => {
                    self.on_timeout(Instant::now());
                    self.report();
                }
            }
        }
    }

    fn take(&mut self, now: Instant, out: &mut Vec<u8>) -> Result<bool> {
        if !self.pending.is_empty() {
            for p in self.pending.drain(..) {
                out.extend_from_slice(&p);
            }
            return Ok(true);
        }
        let mut from_host = std::mem::take(&mut self.from_host);
        from_host.clear();
        let more = self.host.take(now, &mut from_host);
        if let Ok(true) = more {
            let mut rest = from_host.as_slice();
            while let Some(len) = ipv6::Packet::new_checked(rest).ok().map(|p| p.total_len()) {
                let (pkt, tail) = rest.split_at(len.min(rest.len()));
                self.seal_or_pass(pkt, out);
                rest = tail;
            }
        }
        self.from_host = from_host;
        more
    }
}

mod packet;
mod selectors;
mod settings;

pub use packet::{ike_packet, seal_raw, seal_udp};
pub use settings::IpsecSettings;
/// What this client's admin can change when the responder refuses with `e`: the flags of
/// `gate64 connect` that the refusal points at.
fn failure_hint(e: &InitiatorError) -> Option<&'static str> {
    match e {
        InitiatorError::Notify(notify::TS_UNACCEPTABLE) => Some(
            "give --infrastructure-ts / --intranet-ts prefixes inside the server's \
             infrastructure_prefixes / intranet_prefixes",
        ),
        InitiatorError::Auth(AuthError::ExpectedIdMismatch { .. }) => Some(
            "the identity expected of the server is --ipsec-server-id (default: the \
             --ipsec-endpoint address); give one its certificate carries",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests;

use selectors::{prefixes_of, span_of};
