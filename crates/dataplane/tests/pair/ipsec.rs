//! IPsec in the pair: gate64's IKE endpoint ([`Gateway`]: the sans-IO responder, its child
//! SAs installed into the SA database the dataplane reads, as the daemon does) and the
//! IP-HTTPS client's IPsec layer ([`EspClient`]: gate64's sans-IO initiator for each tunnel,
//! ESP sealed and opened with the child SAs it negotiated, as `gate64 connect` does).

use gate64_esp::{
    Inbound, NEXT_HEADER_IPV6, Outbound, SPI_SEQ_IV_LEN, SaDb, TunnelKind, esp_len, spi_of,
};
use gate64_ike::auth::{Credentials, TrustAnchors};
use gate64_ike::initiator::{Initiator, InitiatorConfig, InitiatorEvent};
use gate64_ike::keys::Group;
use gate64_ike::message::TrafficSelector;
use gate64_ike::responder::{Event, Responder, ResponderConfig};
use gate64_wire::ipv6;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::harness::{ENDPOINT, udp_to};

/// IPv6 Next Header of ESP (RFC 4303).
const NH_ESP: u8 = 50;

/// The inner addresses the responder leases (`ipsec.pool6`).
pub const POOL: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc1, 0, 0, 0, 0, 0, 0x100);
/// The infrastructure tunnel's one corporate host (a DNS server, a domain controller).
pub const INFRA_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x53);

/// A CA and the means to sign under it.
pub struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// A leaf certificate under `ca` for `name`: (chain PEM, key PEM).
fn leaf(ca: &Ca, name: &str, eku: ExtendedKeyUsagePurpose) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = vec![SanType::DnsName(name.try_into().unwrap())];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![eku];
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// The two CAs of a deployment: one for the clients, one for gate64.
pub struct Pki {
    clients: Ca,
    servers: Ca,
}

impl Pki {
    pub fn new() -> Self {
        Pki {
            clients: ca("pair clients CA"),
            servers: ca("pair servers CA"),
        }
    }

    /// gate64's responder: the infrastructure tunnel reaches [`INFRA_HOST`], the intranet
    /// tunnel the corporate /48; `edit` sets lifetimes and liveness checks.
    pub fn gateway(&self, now: Instant, edit: impl FnOnce(&mut ResponderConfig)) -> Gateway {
        let (chain, key) = leaf(
            &self.servers,
            "gate64.pair",
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let credentials = Credentials::from_pem(chain.as_bytes(), key.as_bytes()).unwrap();
        let anchors = TrustAnchors::from_pem(self.clients.pem.as_bytes()).unwrap();
        let mut config = ResponderConfig::new(
            credentials,
            anchors,
            "fd00:c1::100/120".parse().unwrap(),
            vec![format!("{INFRA_HOST}/128").parse().unwrap()],
            vec!["2001:db8:100::/48".parse().unwrap()],
        );
        edit(&mut config);
        Gateway {
            responder: Responder::new(config, now, SystemTime::now()).unwrap(),
            sadb: Arc::new(SaDb::new()),
            events: Vec::new(),
        }
    }

    /// The client's IPsec layer, one initiator per tunnel, from `outer` (its IP-HTTPS
    /// address) to gate64's endpoint.
    pub fn client(&self, now: Instant, outer: Ipv6Addr) -> EspClient {
        let (chain, key) = leaf(
            &self.clients,
            "laptop1.pair",
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let tunnel = |kind, tsr: &str| {
            let net: ipnet::IpNet = tsr.parse().unwrap();
            let config = InitiatorConfig {
                credentials: Credentials::from_pem(chain.as_bytes(), key.as_bytes()).unwrap(),
                anchors: TrustAnchors::from_pem(self.servers.pem.as_bytes()).unwrap(),
                group: Group::Ecp256,
                request_address: true,
                tsi: vec![TrafficSelector::range(
                    IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                    IpAddr::V6(Ipv6Addr::from(u128::MAX)),
                )],
                tsr: vec![TrafficSelector::range(net.network(), net.broadcast())],
                tunnel: kind,
                retransmit_after: Duration::from_secs(2),
                max_retransmits: 3,
                integrity_only: false,
            };
            let local = SocketAddr::new(IpAddr::V6(outer), 500);
            let remote = SocketAddr::new(IpAddr::V6(ENDPOINT), 500);
            Initiator::new(config, now, SystemTime::now(), local, remote).unwrap()
        };
        EspClient {
            outer,
            initiators: vec![
                tunnel(TunnelKind::Infrastructure, &format!("{INFRA_HOST}/128")),
                tunnel(TunnelKind::Intranet, "2001:db8:100::/48"),
            ],
            tunnels: Vec::new(),
            ike_in: 0,
            inner: None,
            received: Vec::new(),
            transmits: Vec::new(),
        }
    }
}

/// gate64's IKE endpoint: what the IKE driver and the daemon do with the responder.
pub struct Gateway {
    pub responder: Responder,
    /// The SA database the dataplane seals and opens with.
    pub sadb: Arc<SaDb>,
    /// Every event the responder reported.
    pub events: Vec<Event>,
}

impl Gateway {
    /// Takes the responder's events and applies them to the SA database as the daemon does.
    pub fn take_events(&mut self) {
        while let Some(e) = self.responder.poll_event() {
            match &e {
                Event::ChildSaUp(pair) => self.sadb.install((**pair).clone()).unwrap(),
                Event::ChildSaDown { inbound_spi } => {
                    self.sadb.remove(*inbound_spi);
                }
                _ => {}
            }
            self.events.push(e);
        }
    }

    /// The inbound SPIs of the child SAs installed now.
    pub fn sadb_spis(&self) -> Vec<u32> {
        let mut spis = Vec::new();
        self.sadb.for_each(|e| spis.push(e.sa.spi()));
        spis.sort_unstable();
        spis
    }

    /// How many events matched `f`.
    pub fn count(&self, f: impl Fn(&Event) -> bool) -> usize {
        self.events.iter().filter(|e| f(e)).count()
    }
}

/// One tunnel's child SA on the client: it receives with `inbound`, sends with `outbound`.
pub struct ClientTunnel {
    pub kind: TunnelKind,
    inbound: Inbound,
    pub outbound: Outbound,
}

/// The IP-HTTPS client's IPsec layer.
pub struct EspClient {
    outer: Ipv6Addr,
    pub initiators: Vec<Initiator>,
    pub tunnels: Vec<ClientTunnel>,
    /// IKE datagrams received from gate64.
    pub ike_in: usize,
    /// The inner address gate64 leased (CFG_REPLY).
    pub inner: Option<Ipv6Addr>,
    /// Inner packets opened from ESP.
    pub received: Vec<Vec<u8>>,
    /// Packets for the link: IKE datagrams and ESP, in order.
    transmits: Vec<Vec<u8>>,
}

impl EspClient {
    /// Starts both negotiations.
    pub fn start(&mut self, now: Instant) {
        for i in &mut self.initiators {
            i.start(now);
        }
    }

    /// The IKE datagrams and ESP the layer has for the link.
    pub fn take_transmits(&mut self) -> Vec<Vec<u8>> {
        for i in &mut self.initiators {
            while let Some((local, remote, bytes)) = i.poll_transmit() {
                self.transmits
                    .push(super::harness::ike_packet(local, remote, &bytes));
            }
        }
        self.take_events();
        std::mem::take(&mut self.transmits)
    }

    fn take_events(&mut self) {
        for i in &mut self.initiators {
            while let Some(e) = i.poll_event() {
                match e {
                    InitiatorEvent::Established { inner, child, .. } => {
                        if let Some(IpAddr::V6(a)) = inner {
                            self.inner = Some(a);
                        }
                        self.tunnels.push(ClientTunnel {
                            kind: child.tunnel,
                            inbound: Inbound::new(&child.inbound).unwrap(),
                            outbound: Outbound::new(&child.outbound).unwrap(),
                        });
                    }
                    // The new child SA sends from now on; the old one still receives until
                    // its Delete is through.
                    InitiatorEvent::Rekeyed { child } => self.tunnels.push(ClientTunnel {
                        kind: child.tunnel,
                        inbound: Inbound::new(&child.inbound).unwrap(),
                        outbound: Outbound::new(&child.outbound).unwrap(),
                    }),
                    InitiatorEvent::Failed(e) => panic!("a tunnel failed: {e}"),
                    _ => {}
                }
            }
        }
    }

    /// Rekeys the child SA of the tunnel of `kind`.
    pub fn rekey(&mut self, now: Instant, kind: TunnelKind) -> bool {
        let at = match kind {
            TunnelKind::Infrastructure => 0,
            TunnelKind::Intranet => 1,
        };
        self.initiators[at].rekey_child(now)
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.initiators
            .iter()
            .filter_map(|i| i.poll_timeout())
            .min()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        for i in &mut self.initiators {
            if i.poll_timeout().is_some_and(|t| t <= now) {
                i.handle_timeout(now);
            }
        }
    }

    /// A packet from the link: IKE goes to the initiators, ESP is opened; `false` for
    /// anything else (the caller's inbox keeps it).
    pub fn receive(&mut self, now: Instant, packet: &[u8]) -> bool {
        if let Some((_, port, payload)) = udp_to(packet, self.outer)
            .filter(|(from, ..)| from.ip() == IpAddr::V6(ENDPOINT))
            .map(|(from, _, payload)| (from, from.port(), payload))
        {
            let ike = if port == 4500 {
                payload.get(4..).unwrap_or_default()
            } else {
                payload
            };
            self.ike_in += 1;
            for i in &mut self.initiators {
                i.handle(now, ike);
            }
            return true;
        }
        let Ok(pkt) = ipv6::Packet::new_checked(packet) else {
            return false;
        };
        if pkt.next_header() != NH_ESP || pkt.src() != ENDPOINT {
            return false;
        }
        let mut esp = pkt.payload().to_vec();
        let Some(t) = spi_of(&esp).and_then(|spi| {
            self.tunnels
                .iter()
                .find(|t| t.inbound.spi() == spi && !t.inbound.is_expired())
        }) else {
            return true;
        };
        if let Ok(opened) = t.inbound.open(&mut esp) {
            self.received.push(esp[opened.inner].to_vec());
        }
        true
    }

    /// Seals the inner packet `inner` in the newest tunnel of `kind` when its selectors
    /// cover it, and queues the ESP packet for the link; `false` when they do not.
    pub fn send(&mut self, kind: TunnelKind, inner: &[u8]) -> bool {
        let Ok(pkt) = ipv6::Packet::new_checked(inner) else {
            return false;
        };
        let (src, dst) = (IpAddr::V6(pkt.src()), IpAddr::V6(pkt.dst()));
        let Some(t) = self
            .tunnels
            .iter()
            .rev()
            .find(|t| t.kind == kind && t.outbound.covers(dst, src))
        else {
            return false;
        };
        let len = esp_len(inner.len());
        let mut out = vec![0u8; ipv6::HEADER_LEN + len];
        let at = ipv6::HEADER_LEN;
        out[at + SPI_SEQ_IV_LEN..at + SPI_SEQ_IV_LEN + inner.len()].copy_from_slice(inner);
        if t.outbound
            .seal(&mut out[at..], 0, inner.len(), NEXT_HEADER_IPV6)
            .is_err()
        {
            return false;
        }
        let plen = u16::try_from(len).unwrap();
        ipv6::emit_header(&mut out, plen, NH_ESP, 64, &self.outer, &ENDPOINT).unwrap();
        self.transmits.push(out);
        true
    }
}

/// RFC 7296 §1.2, §1.3.3, §1.4, §2.8 and RFC 4303 over IP-HTTPS: a client builds both
/// tunnels through the dataplane to gate64's IKE endpoint, sends and receives ESP in each,
/// rekeys one and goes on under the new keys, answers a liveness check, and sees its child
/// SAs deleted at their hard lifetime, after which gate64 seals nothing more to it and opens
/// nothing more from it.
#[test]
fn iphttps_client_builds_both_tunnels_carries_esp_rekeys_answers_liveness_and_expires() {
    use super::harness::*;
    use gate64_dataplane::{DropReason, Verdict};
    let pki = Pki::new();
    let t0 = Instant::now();
    let gateway = pki.gateway(t0, |c| {
        c.child_lifetime = secs(120);
        c.dpd = secs(30);
    });
    let mut p = Pair::with_ipsec(t0, gateway);
    p.iphttps_link_up();
    let me = p.iphttps_address();
    p.esp = Some(pki.client(p.now, me));
    p.esp.as_mut().unwrap().start(p.now);
    p.settle();

    // Both tunnels, one inner address, both child SAs in the dataplane's database.
    let esp = p.esp.as_ref().unwrap();
    assert_eq!(esp.tunnels.len(), 2, "both tunnels up");
    let inner = esp.inner.expect("an inner address from the pool");
    assert_eq!(u128::from(inner) >> 8, u128::from(POOL) >> 8);
    let g = p.gateway.as_ref().unwrap();
    assert_eq!(g.count(|e| matches!(e, Event::ChildSaUp(_))), 2);
    assert_eq!(g.sadb.len(), 2);
    assert!(
        p.tun.is_empty(),
        "IKE went to the endpoint, not the corporate network"
    );

    // ESP both ways in each tunnel: the inner packets reach the TUN as they were sent, and
    // the corporate hosts' answers come back sealed.
    for (kind, host) in [
        (TunnelKind::Infrastructure, INFRA_HOST),
        (TunnelKind::Intranet, CORP_HOST),
    ] {
        let out = udp(inner, host, 240);
        assert!(
            p.esp.as_mut().unwrap().send(kind, &out),
            "{kind:?} covers {host}"
        );
        p.settle();
        assert_eq!(p.tun.pop(), Some(out), "{kind:?}");
        let back = udp(host, inner, 400);
        assert_eq!(p.corp_send(&back), Verdict::Consumed, "queued to the link");
        p.settle();
        assert_eq!(
            p.esp.as_mut().unwrap().received.pop(),
            Some(back),
            "{kind:?}"
        );
    }
    let sealed: u64 = p
        .esp
        .as_ref()
        .unwrap()
        .tunnels
        .iter()
        .map(|t| t.outbound.next_seq())
        .sum();
    assert!(sealed >= 2, "each tunnel sealed");

    // The client rekeys its intranet tunnel: gate64 installs the new child SA, the client
    // deletes the old one, and traffic goes on under the new keys both ways.
    let old_spis = p.gateway.as_ref().unwrap().sadb_spis();
    assert!(p.esp.as_mut().unwrap().rekey(p.now, TunnelKind::Intranet));
    p.settle();
    let g = p.gateway.as_ref().unwrap();
    assert_eq!(g.count(|e| matches!(e, Event::Rekeyed { .. })), 1);
    assert_eq!(g.count(|e| matches!(e, Event::ChildSaUp(_))), 3);
    assert_eq!(
        g.count(|e| matches!(e, Event::ChildSaDown { .. })),
        1,
        "the old one"
    );
    let spis = g.sadb_spis();
    assert_eq!(spis.len(), 2);
    assert_eq!(
        spis.iter().filter(|s| !old_spis.contains(s)).count(),
        1,
        "one new SA beside the infrastructure tunnel's"
    );
    let out = udp(inner, CORP_HOST, 300);
    assert!(p.esp.as_mut().unwrap().send(TunnelKind::Intranet, &out));
    p.settle();
    assert_eq!(p.tun.pop(), Some(out), "sent under the new SA");
    let back = udp(CORP_HOST, inner, 500);
    assert_eq!(p.corp_send(&back), Verdict::Consumed);
    p.settle();
    assert_eq!(
        p.esp.as_mut().unwrap().received.pop(),
        Some(back),
        "sealed under the new SA"
    );

    // Quiet for a while: gate64 checks the client is alive, the client answers, nothing goes.
    let ike_before = p.esp.as_ref().unwrap().ike_in;
    p.run_until(t0 + secs(100));
    assert!(
        p.esp.as_ref().unwrap().ike_in > ike_before,
        "a liveness check reached the client"
    );
    let g = p.gateway.as_ref().unwrap();
    assert_eq!(g.count(|e| matches!(e, Event::IkeSaDown { .. })), 0);
    assert_eq!(g.sadb.len(), 2, "answered: the SAs stay");

    // Past the hard lifetime (10% after the soft one at 120 s) both child SAs are deleted
    // (the rekeyed one was made at the same instant on this clock, so it goes with the other):
    // gate64 seals nothing more to the client and opens nothing more from it.
    p.run_until(t0 + secs(140));
    let g = p.gateway.as_ref().unwrap();
    // (One more went earlier: the rekeyed one.)
    assert_eq!(g.count(|e| matches!(e, Event::ChildSaDown { .. })), 3);
    assert_eq!(g.sadb.len(), 0);
    assert_eq!(g.responder.stats().children_expired, 2);
    let late = udp(CORP_HOST, inner, 100);
    assert!(
        matches!(p.corp_send(&late), Verdict::Drop(_)),
        "not sealed, not sent"
    );
    p.settle();
    assert!(p.esp.as_ref().unwrap().received.is_empty());
    let stale = udp(inner, CORP_HOST, 100);
    assert!(p.esp.as_mut().unwrap().send(TunnelKind::Intranet, &stale));
    p.settle();
    assert!(p.tun.is_empty(), "an expired SA's ESP is not opened");
    assert!(drops(&p, DropReason::EspUnknownSpi) + drops(&p, DropReason::NoSa) >= 1);
}
