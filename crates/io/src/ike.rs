//! The IKE driver: UDP sockets on `[endpoint]:500` and `[endpoint]:4500`, the sans-IO
//! [`Responder`] with its timers, and an event sink. No protocol decisions are made here.
//!
//! On port 4500 IKE messages carry the 4-byte zero non-ESP marker (RFC 3948 §2.2): it is
//! stripped before [`Responder::handle`] and added to every datagram sent from 4500. A
//! one-byte 0xFF NAT-keepalive (RFC 3948 §2.3) is ignored; ESP (a non-zero first word) is the
//! dataplane's and should never reach this socket, so it is counted and dropped.
//!
//! Events go to the caller's sink (the daemon installs child SAs into `gate64_esp::SaDb` and
//! updates metrics there); [`IkeStatus`] holds a snapshot of the IKE SAs for `gate64 status`,
//! refreshed after every datagram or timer that changed something.

use std::future::Future;
use std::io;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket as StdUdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gate64_ike::responder::{Event, IkeSaInfo, Responder, Stats};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;

/// The IKE port (RFC 7296 §2).
pub const IKE_PORT: u16 = 500;
/// The NAT-T port (RFC 3948).
pub const NAT_T_PORT: u16 = 4500;
/// The RFC 3948 non-ESP marker before IKE messages on port 4500.
const NON_ESP_MARKER: [u8; 4] = [0; 4];
/// The status snapshot is refreshed at least this often while datagrams flow.
const STATUS_REFRESH: Duration = Duration::from_secs(1);
/// Above this many SAs a changed snapshot waits for [`BUSY_REFRESH`] since the last one:
/// building it copies every SA, and doing that per handshake made establishing N SAs cost
/// O(N²) (bench/ipsec.sh's ike setups: 1,000 handshakes/s fell to 40/s at 18,000 SAs).
const BUSY_SAS: usize = 1024;
/// The least time between snapshots while more than [`BUSY_SAS`] SAs are held.
const BUSY_REFRESH: Duration = Duration::from_millis(200);
/// Largest datagram read.
const MAX_DATAGRAM: usize = 65_535;

/// What `gate64 status` reads: the IKE SAs, the half-open count and the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IkeSnapshot {
    /// Every IKE SA, half-open ones included.
    pub sas: Vec<IkeSaInfo>,
    /// Half-open IKE SAs (`gate64_ike_half_open`).
    pub half_open: usize,
    /// The responder's counters.
    pub stats: Stats,
    /// Datagrams on 4500 that were neither IKE nor keepalives (ESP the dataplane missed).
    pub stray_esp: u64,
}

/// A shared, cheaply cloned view of the driver's latest [`IkeSnapshot`].
#[derive(Debug, Clone, Default)]
pub struct IkeStatus(Arc<Mutex<IkeSnapshot>>);

impl IkeStatus {
    /// The latest snapshot.
    pub fn snapshot(&self) -> IkeSnapshot {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn store(&self, snapshot: IkeSnapshot) {
        if let Ok(mut s) = self.0.lock() {
            *s = snapshot;
        }
    }
}

/// The two bound sockets (blocking mode off), before the runtime takes them.
#[derive(Debug)]
pub struct IkeSockets {
    ike: StdUdpSocket,
    nat_t: StdUdpSocket,
}

impl IkeSockets {
    /// Binds `[endpoint]:ike_port` and `[endpoint]:nat_t_port` (500 and 4500 in production;
    /// tests may pass 0 for any). IPV6_FREEBIND lets the daemon bind before the TUN address is
    /// up.
    pub fn bind(endpoint: Ipv6Addr, ike_port: u16, nat_t_port: u16) -> io::Result<IkeSockets> {
        Ok(IkeSockets {
            ike: bind_one(endpoint, ike_port)?,
            nat_t: bind_one(endpoint, nat_t_port)?,
        })
    }

    /// The bound addresses: (IKE, NAT-T).
    pub fn local_addrs(&self) -> io::Result<(SocketAddr, SocketAddr)> {
        Ok((self.ike.local_addr()?, self.nat_t.local_addr()?))
    }
}

fn bind_one(endpoint: Ipv6Addr, port: u16) -> io::Result<StdUdpSocket> {
    let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_only_v6(true)?;
    s.set_nonblocking(true)?;
    // Best effort: without it the bind fails until the endpoint address is configured.
    let _ = s.set_freebind_v6(true);
    s.bind(&SocketAddr::V6(SocketAddrV6::new(endpoint, port, 0, 0)).into())?;
    Ok(s.into())
}

/// Where stray ESP goes (see [`IkeDriver::with_stray_esp`]).
type EspSink = Box<dyn FnMut(SocketAddr, &[u8]) + Send>;

/// A change to the running responder, applied between two datagrams.
type Command = Box<dyn FnOnce(&mut Responder) + Send>;

/// Changes a running [`IkeDriver`]'s responder from another task (a reload: new
/// credentials). Cheap to clone.
#[derive(Clone)]
pub struct IkeControl(tokio::sync::mpsc::UnboundedSender<Command>);

impl IkeControl {
    /// Runs `change` on the responder between two datagrams; `false` when the driver has
    /// stopped.
    pub fn apply(&self, change: impl FnOnce(&mut Responder) + Send + 'static) -> bool {
        self.0.send(Box::new(change)).is_ok()
    }
}

impl std::fmt::Debug for IkeControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IkeControl")
    }
}

/// Runs a [`Responder`] on its sockets.
pub struct IkeDriver {
    sockets: IkeSockets,
    responder: Responder,
    sink: Box<dyn FnMut(Event) + Send>,
    esp_sink: Option<EspSink>,
    status: IkeStatus,
    commands: Option<tokio::sync::mpsc::UnboundedReceiver<Command>>,
    stray_esp: u64,
    published: Instant,
    published_sas: usize,
    unpublished: bool,
}

impl IkeDriver {
    /// A driver for `responder` on `sockets`; every event goes to `sink`.
    pub fn new(
        sockets: IkeSockets,
        responder: Responder,
        sink: impl FnMut(Event) + Send + 'static,
    ) -> Self {
        IkeDriver {
            sockets,
            responder,
            sink: Box::new(sink),
            esp_sink: None,
            status: IkeStatus::default(),
            commands: None,
            stray_esp: 0,
            published: Instant::now(),
            published_sas: 0,
            unpublished: false,
        }
    }

    /// Hands ESP that reached the NAT-T socket (a non-zero first word: the dataplane, which
    /// opens ESP before the kernel sees it, let it through) to `sink` as well as counting it;
    /// for labs and tests that run the driver without the dataplane.
    pub fn with_stray_esp(mut self, sink: impl FnMut(SocketAddr, &[u8]) + Send + 'static) -> Self {
        self.esp_sink = Some(Box::new(sink));
        self
    }

    /// A handle that changes the responder while it runs (take it before [`IkeDriver::run`];
    /// a second call replaces the first handle, which then reaches nothing).
    pub fn control(&mut self) -> IkeControl {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.commands = Some(rx);
        IkeControl(tx)
    }

    /// The status handle (clone it before [`IkeDriver::run`]).
    pub fn status(&self) -> IkeStatus {
        self.status.clone()
    }

    /// Serves until `shutdown` completes. Needs a tokio runtime with I/O and time enabled.
    pub async fn run(mut self, shutdown: impl Future<Output = ()> + Send) -> io::Result<()> {
        let ike = UdpSocket::from_std(self.sockets.ike.try_clone()?)?;
        let nat_t = UdpSocket::from_std(self.sockets.nat_t.try_clone()?)?;
        let (ike_addr, nat_t_addr) = (ike.local_addr()?, nat_t.local_addr()?);
        tracing::info!(ike = %ike_addr, nat_t = %nat_t_addr, "ike responder listening");
        let mut a = vec![0u8; MAX_DATAGRAM];
        let mut b = vec![0u8; MAX_DATAGRAM];
        tokio::pin!(shutdown);
        let mut commands = self.commands.take();
        self.publish(Instant::now());
        loop {
            let mut deadline = self
                .responder
                .poll_timeout()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(60));
            if self.unpublished {
                // A change held back while busy is published without waiting for traffic.
                deadline = deadline.min(self.published + BUSY_REFRESH);
            }
            tokio::select! {
                _ = &mut shutdown => {
                    // Tell the clients, so they do not wait for their liveness checks.
                    self.responder.shutdown();
                    self.flush(&ike, &nat_t).await;
                    return Ok(());
                }
                r = ike.recv_from(&mut a) => match r {
                    Ok((n, from)) => self.responder.handle(Instant::now(), ike_addr, from, &a[..n]),
                    Err(e) => tracing::debug!(error = %e, "ike: receive on 500 failed"),
                },
                r = nat_t.recv_from(&mut b) => match r {
                    Ok((n, from)) => self.on_nat_t(nat_t_addr, from, &b[..n]),
                    Err(e) => tracing::debug!(error = %e, "ike: receive on 4500 failed"),
                },
                _ = tokio::time::sleep_until(deadline.into()) => self.responder.handle_timeout(Instant::now()),
                Some(change) = next_command(&mut commands) => change(&mut self.responder),
            }
            self.flush(&ike, &nat_t).await;
        }
    }

    fn on_nat_t(&mut self, local: SocketAddr, from: SocketAddr, datagram: &[u8]) {
        match datagram {
            [0xff] => {}
            [0, 0, 0, 0, ike @ ..] => self.responder.handle(Instant::now(), local, from, ike),
            esp => {
                self.stray_esp += 1;
                if let Some(sink) = self.esp_sink.as_mut() {
                    sink(from, esp);
                }
            }
        }
    }

    /// Sends what the responder queued, hands its events to the sink, refreshes the status.
    async fn flush(&mut self, ike: &UdpSocket, nat_t: &UdpSocket) {
        let nat_t_port = nat_t.local_addr().map(|a| a.port()).unwrap_or(NAT_T_PORT);
        let mut changed = false;
        while let Some(t) = self.responder.poll_transmit() {
            let sent = if t.local.port() == nat_t_port {
                let mut framed = Vec::with_capacity(4 + t.bytes.len());
                framed.extend_from_slice(&NON_ESP_MARKER);
                framed.extend_from_slice(&t.bytes);
                nat_t.send_to(&framed, t.remote).await
            } else {
                ike.send_to(&t.bytes, t.remote).await
            };
            if let Err(e) = sent {
                tracing::debug!(peer = %t.remote, error = %e, "ike: send failed");
            }
        }
        while let Some(e) = self.responder.poll_event() {
            changed = true;
            (self.sink)(e);
        }
        // Events change what status shows; half-open counts and counters may lag a second,
        // and with many SAs held the SA list may lag BUSY_REFRESH.
        let now = Instant::now();
        self.unpublished |= changed;
        let busy = self.published_sas > BUSY_SAS && now < self.published + BUSY_REFRESH;
        if (self.unpublished && !busy) || now >= self.published + STATUS_REFRESH {
            self.publish(now);
        }
    }

    fn publish(&mut self, now: Instant) {
        self.published = now;
        self.unpublished = false;
        let sas = self.responder.ike_sas(now);
        self.published_sas = sas.len();
        self.status.store(IkeSnapshot {
            sas,
            half_open: self.responder.half_open(),
            stats: self.responder.stats(),
            stray_esp: self.stray_esp,
        });
    }
}

/// The next command, or never when there is no control handle (or it was dropped).
async fn next_command(
    commands: &mut Option<tokio::sync::mpsc::UnboundedReceiver<Command>>,
) -> Option<Command> {
    match commands.as_mut() {
        Some(rx) => match rx.recv().await {
            Some(c) => Some(c),
            None => {
                *commands = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_ike::auth::{Credentials, TrustAnchors};
    use gate64_ike::child_sa::TunnelKind;
    use gate64_ike::initiator::{Initiator, InitiatorConfig, InitiatorEvent};
    use gate64_ike::keys::Group;
    use gate64_ike::message::TrafficSelector;
    use gate64_ike::responder::ResponderConfig;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    use std::time::SystemTime;

    fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let cert = params.self_signed(&key).expect("self-signed");
        (cert.pem(), Issuer::new(params, key))
    }

    fn credentials(issuer: &Issuer<'static, KeyPair>, name: &str) -> Credentials {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = params.signed_by(&key, issuer).expect("signed");
        Credentials::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
            .expect("credentials")
    }

    /// The whole exchange on the NAT-T socket, as strongSwan's libipsec does it: the marker
    /// is stripped on the way in and added on the way out; a keepalive is ignored.
    #[tokio::test]
    async fn rfc3948_exchange_on_4500_reaches_the_sink_and_the_status() {
        let (clients_pem, clients) = ca("clients");
        let (servers_pem, servers) = ca("servers");
        let now = Instant::now();
        let config = ResponderConfig::new(
            credentials(&servers, "gate64.lab"),
            TrustAnchors::from_pem(clients_pem.as_bytes()).expect("anchors"),
            "fd00:c1::100/120".parse().expect("pool"),
            vec!["fd00:c0::53/128".parse().expect("prefix")],
            vec!["fd00:c0::/64".parse().expect("prefix")],
        );
        let sockets = IkeSockets::bind(Ipv6Addr::LOCALHOST, 0, 0).expect("bind");
        let (_, nat_t_addr) = sockets.local_addrs().expect("addrs");
        let mut config = config;
        config.nat_t_port = nat_t_addr.port();
        let responder = Responder::new(config, now, SystemTime::now()).expect("responder");
        let (tx, rx) = std::sync::mpsc::channel();
        let driver = IkeDriver::new(sockets, responder, move |e| {
            let _ = tx.send(e);
        });
        let status = driver.status();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(driver.run(async {
            let _ = stopped.await;
        }));

        let client = UdpSocket::bind("[::1]:0").await.expect("client socket");
        let any = TrafficSelector::range(
            "::".parse().expect("a"),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
                .parse()
                .expect("a"),
        );
        let tsr = TrafficSelector::range(
            "fd00:c0::53".parse().expect("a"),
            "fd00:c0::53".parse().expect("a"),
        );
        let init_config = InitiatorConfig {
            credentials: credentials(&clients, "client1"),
            anchors: TrustAnchors::from_pem(servers_pem.as_bytes()).expect("anchors"),
            group: Group::Curve25519,
            request_address: true,
            tsi: vec![any],
            tsr: vec![tsr],
            tunnel: TunnelKind::Infrastructure,
            retransmit_after: Duration::from_secs(1),
            max_retransmits: 5,
        };
        let local = client.local_addr().expect("addr");
        let mut initiator = Initiator::new(init_config, now, SystemTime::now(), local, nat_t_addr)
            .expect("initiator");
        client
            .send_to(&[0xff], nat_t_addr)
            .await
            .expect("keepalive");
        initiator.start(Instant::now());
        let mut buf = vec![0u8; 4096];
        let deadline = Instant::now() + Duration::from_secs(20);
        while !initiator.is_established() && Instant::now() < deadline {
            while let Some((_, to, bytes)) = initiator.poll_transmit() {
                let framed = [&NON_ESP_MARKER[..], &bytes].concat();
                client.send_to(&framed, to).await.expect("send");
            }
            if let Ok(Ok((n, _))) =
                tokio::time::timeout(Duration::from_secs(1), client.recv_from(&mut buf)).await
            {
                assert_eq!(
                    buf[..4],
                    NON_ESP_MARKER,
                    "responses from 4500 carry the marker"
                );
                initiator.handle(Instant::now(), &buf[4..n]);
            }
            initiator.handle_timeout(Instant::now());
        }
        let Some(InitiatorEvent::Established { inner, .. }) = initiator.poll_event() else {
            panic!("the initiator did not establish");
        };
        assert_eq!(inner, Some("fd00:c1::101".parse().expect("a")));
        let events: Vec<Event> =
            std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(5)).ok())
                .take_while(|e| !matches!(e, Event::Negotiation { .. }))
                .collect();
        let pair = events.iter().find_map(|e| match e {
            Event::ChildSaUp(p) => Some(p),
            _ => None,
        });
        let pair = pair.expect("a child SA reached the sink");
        assert_eq!(pair.tunnel, TunnelKind::Infrastructure);
        assert_eq!(
            pair.peer.udp_encap,
            Some(local.port()),
            "ESP goes UDP-encapsulated to the client"
        );
        let snapshot = status.snapshot();
        assert_eq!(snapshot.sas.len(), 1);
        assert!(snapshot.sas[0].established);
        assert_eq!(snapshot.stray_esp, 0);
        let _ = stop.send(());
        task.await.expect("join").expect("driver");
    }
}
