//! `gate64 connect`: Linux clients for gate64's transports, for labs and CI (there is no
//! open-source IP-HTTPS client, teredo-iphttps.md §2.6).
//!
//! - `connect iphttps`: TCP + TLS (rustls) to `https://host[:port]/path`, the `POST` of
//!   [MS-IPHTTPS] §3.1.5.2, then RS/RA (the sans-IO [`gate64_iphttps::ClientConnection`]) and a
//!   TUN device with `prefix::iid/64`. Packets from the TUN are written to the stream as they
//!   are (the protocol has no framing, §2.2); the stream is deframed into the TUN.
//! - `connect teredo`: qualification with the Teredo server (the sans-IO
//!   [`gate64_teredo::client::Client`], RFC 4380 §5.2), a TUN device with the Teredo
//!   address/32 (so `2001::/32` goes into the tunnel, as Miredo does) and data sent bare to the
//!   server, which is also the relay of the networks behind it.
//!
//! The TUN device is opened with offload (virtio-net headers, as the server's): one read takes
//! a TCP super-packet from the local stack (TSO) and splits it into MTU-sized packets, which
//! go into one TLS write (IP-HTTPS) or one datagram each (Teredo); packets from the tunnel are
//! gathered per TLS read or per burst of datagrams and written with GRO, so a flow's segments
//! enter the local stack as one super-packet.
//!
//! The TUN device is created on the first configuration and survives reconnects; `--route`
//! prefixes are routed into it (`ip -6 route replace`). On a lost IP-HTTPS connection the
//! client reconnects after 1 s, doubling up to 60 s, and resets after a successful link. (The
//! spec's schedule, 30 s then growing to 15 min, §3.1.2.1, suits Windows fleets hitting one
//! server; a lab client wants to come back quickly.) Ctrl-C / SIGTERM exit cleanly; the TUN
//! device disappears with the process.

use anyhow::{Context, Result, ensure};
use gate64_iphttps::framing::{Deframer, StreamBuffer};
use gate64_iphttps::{ClientConnection, Event};
use gate64_teredo::client::{self as teredo, Client as TeredoClient};
use ipnet::Ipv6Net;
use rustls::pki_types::ServerName;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tracing::{debug, info, trace, warn};

/// First reconnect delay.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Longest reconnect delay.
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// TCP connect + TLS handshake + HTTP response must complete within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of TUN packets gathered into one TLS write.
const UPLINK_BATCH: usize = 256 * 1024;
/// Packets split from one TUN read (one TCP super-packet: 64 KiB / MSS segments), and the most
/// packets gathered for one GRO write to the TUN device.
const BATCH: usize = tun_rs::IDEAL_BATCH_SIZE;
/// Capacity of a downlink slot: the largest packet.
const SLOT_CAPACITY: usize = 65_535;
/// Datagrams the Teredo client takes from the socket before writing to the TUN device.
const TEREDO_BURST: usize = 64;
/// The CA bundle used when `--ca` is not given (Debian's `ca-certificates`).
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Arguments of `gate64 connect`.
#[derive(clap::Args, Debug)]
pub struct ConnectArgs {
    #[command(subcommand)]
    transport: Transport,
}

#[derive(clap::Subcommand, Debug)]
enum Transport {
    /// IPv6 over HTTPS ([MS-IPHTTPS]).
    Iphttps(IphttpsArgs),
    /// IPv6 over UDP/IPv4 (RFC 4380), with gate64 as Teredo server and relay.
    Teredo(TeredoArgs),
}

#[derive(clap::Args, Debug)]
struct IphttpsArgs {
    /// The IP-HTTPS URL, `https://host[:port]/path` (host: a name or an IP literal).
    #[arg(long)]
    server: String,
    /// CA certificate(s) to trust (PEM); default: the system bundle.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Client certificate (PEM), for servers with `client_ca`.
    #[arg(long, requires = "client_key")]
    client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "client_cert")]
    client_key: Option<PathBuf>,
    /// Name of the TUN device.
    #[arg(long, default_value = "gate64c")]
    ifname: String,
    /// A prefix to route into the tunnel (repeatable), e.g. the corporate /48.
    #[arg(long = "route")]
    routes: Vec<Ipv6Net>,
}

#[derive(clap::Args, Debug)]
struct TeredoArgs {
    /// The Teredo server's IPv4 address (port 3544).
    #[arg(long)]
    server: Ipv4Addr,
    /// Local UDP address to bind.
    #[arg(long, default_value = "0.0.0.0:0")]
    bind: SocketAddrV4,
    /// Name of the TUN device.
    #[arg(long, default_value = "gate64t")]
    ifname: String,
    /// A prefix to route into the tunnel besides `2001::/32` (repeatable).
    #[arg(long = "route")]
    routes: Vec<Ipv6Net>,
}

/// Runs `gate64 connect`.
pub fn run(args: ConnectArgs) -> Result<()> {
    init_logging();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let client = async {
            match args.transport {
                Transport::Iphttps(a) => iphttps(a).await,
                Transport::Teredo(a) => teredo_client(a).await,
            }
        };
        // Dropping the client future closes the connection and removes the TUN device.
        tokio::select! {
            r = client => r,
            _ = tokio::signal::ctrl_c() => { info!("interrupted, exiting"); Ok(()) }
            _ = term.recv() => { info!("terminated, exiting"); Ok(()) }
        }
    })
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

// ---------------------------------------------------------------------------------------------
// IP-HTTPS

/// The parts of `https://host[:port]/path` the client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    /// Host name or IP literal, without brackets: for DNS, SNI and certificate checks.
    host: String,
    port: u16,
    path: String,
    /// The `Host` header value (brackets for IPv6, port when not 443).
    authority: String,
}

impl Url {
    fn parse(s: &str) -> Result<Url> {
        let rest = s
            .strip_prefix("https://")
            .with_context(|| format!("--server {s:?}: expected https://host[:port]/path"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/IPHTTPS"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .with_context(|| format!("--server {s:?}: unterminated [IPv6 literal]"))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .with_context(|| format!("--server {s:?}: junk after the IPv6 literal"))?,
                ),
            };
            (h, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        ensure!(!host.is_empty(), "--server {s:?}: no host");
        let port = match port {
            Some(p) => p
                .parse()
                .with_context(|| format!("--server {s:?}: bad port {p:?}"))?,
            None => 443,
        };
        Ok(Url {
            host: host.to_owned(),
            port,
            path: path.to_owned(),
            authority: authority.to_owned(),
        })
    }
}

async fn iphttps(args: IphttpsArgs) -> Result<()> {
    let url = Url::parse(&args.server)?;
    let ca = args
        .ca
        .clone()
        .unwrap_or_else(|| PathBuf::from(SYSTEM_CA_BUNDLE));
    let client_cert = args.client_cert.as_deref().zip(args.client_key.as_deref());
    let tls = gate64_io::tls::client_config(&ca, client_cert)?;
    let name = ServerName::try_from(url.host.clone())
        .with_context(|| format!("--server: {:?} is not a valid TLS server name", url.host))?;
    // One seed per run: the interface id, and so the address, stays the same across
    // reconnects that get the same /64.
    let seed = random_u64();
    let mut link = TunLink::new(args.ifname, args.routes);
    let mut backoff = BACKOFF_MIN;
    loop {
        let mut linked = false;
        let err = match iphttps_session(&url, &tls, &name, seed, &mut link, &mut linked).await {
            Ok(never) => match never {},
            Err(e) => e,
        };
        if linked {
            backoff = BACKOFF_MIN;
        }
        warn!(server = %args.server, error = %format!("{err:#}"), retry_in = ?backoff, "IP-HTTPS connection lost");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One connection: returns only with the reason it ended. Sets `linked` once the server
/// answered 200 (the link was up: the next retry starts from the shortest delay).
async fn iphttps_session(
    url: &Url,
    tls: &Arc<rustls::ClientConfig>,
    name: &ServerName<'static>,
    seed: u64,
    link: &mut TunLink,
    linked: &mut bool,
) -> Result<std::convert::Infallible> {
    let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
    let within = |what: &'static str| move |_| anyhow::anyhow!("{what}: timed out");
    let tcp = tokio::time::timeout_at(deadline, TcpStream::connect((url.host.as_str(), url.port)))
        .await
        .map_err(within("TCP connect"))?
        .with_context(|| format!("TCP connect to {}:{}", url.host, url.port))?;
    let _ = tcp.set_nodelay(true);
    let peer = tcp.peer_addr().ok();
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(tls));
    let mut stream = tokio::time::timeout_at(deadline, connector.connect(name.clone(), tcp))
        .await
        .map_err(within("TLS handshake"))?
        .context("TLS handshake")?;
    debug!(?peer, "TLS up");

    let mut conn = ClientConnection::new(&url.path, &url.authority, seed);
    stream
        .write_all(&conn.request())
        .await
        .context("sending the request")?;
    stream.flush().await.context("sending the request")?;
    let mut rx = StreamBuffer::default();
    loop {
        let n = tokio::time::timeout_at(deadline, stream.read(rx.spare()))
            .await
            .map_err(within("HTTP response"))?
            // A server requiring a client certificate refuses it here under TLS 1.3.
            .context("reading the HTTP response")?;
        ensure!(n > 0, "connection closed before the HTTP response");
        rx.commit(n);
        if let Some(consumed) = conn
            .handle_input(Instant::now(), rx.data())
            .context("HTTP response")?
        {
            rx.consume(consumed);
            break;
        }
    }
    *linked = true;
    info!(?peer, path = %url.path, "IP-HTTPS connected, soliciting a router");

    let deframer = Deframer::default();
    let mut rs = [0u8; gate64_iphttps::client::RS_LEN];
    let mut batch = Vec::with_capacity(UPLINK_BATCH + 2 * 65_536);
    loop {
        while let Some(pkt) = rx.next_packet(&deframer).context("server stream")? {
            match conn.handle_packet(Instant::now(), pkt) {
                Ok(Event::Configured { mtu, router, .. }) => {
                    let addr = conn.address().expect("configured");
                    debug!(%router, mtu, "router advertisement");
                    link.flush().await;
                    link.configure(addr, 64, mtu)?;
                }
                Ok(Event::Refreshed) => trace!("router advertisement (unchanged)"),
                Ok(Event::Packet) => link.deliver(pkt).await,
                Err(e) => debug!(error = %e, "packet from the server refused"),
            }
        }
        // The packets of this read go to the TUN device together (GRO).
        link.flush().await;
        let mut wrote = false;
        while let Some(n) = conn.poll_transmit(Instant::now(), &mut rs) {
            debug!("router solicitation");
            stream.write_all(&rs[..n]).await.context("write")?;
            wrote = true;
        }
        if wrote {
            stream.flush().await.context("write")?;
        }
        let wake = conn.poll_timeout().map(tokio::time::Instant::from_std);
        tokio::select! {
            r = stream.read(rx.spare()) => {
                let n = r.context("read")?;
                ensure!(n > 0, "closed by the server");
                rx.commit(n);
            }
            r = link.recv_raw() => {
                let mut n = r.context("reading the TUN device")?;
                batch.clear();
                // The segments of this read, and whatever else is queued, go in one TLS write:
                // split straight into the stream buffer (IP-HTTPS packets are back to back).
                loop {
                    link.split_raw(n, &mut batch);
                    if batch.len() >= UPLINK_BATCH {
                        break;
                    }
                    match link.try_recv_raw() {
                        Some(m) => n = m,
                        None => break,
                    }
                }
                if !batch.is_empty() {
                    stream.write_all(&batch).await.context("write")?;
                    stream.flush().await.context("write")?;
                }
            }
            _ = sleep_until(wake) => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Teredo

async fn teredo_client(args: TeredoArgs) -> Result<()> {
    let server = SocketAddrV4::new(args.server, gate64_teredo::TEREDO_PORT);
    let sock = UdpSocket::bind(args.bind)
        .await
        .with_context(|| format!("binding UDP {}", args.bind))?;
    let mut client = TeredoClient::new(server, random_u64());
    let mut link = TunLink::new(args.ifname, args.routes);
    info!(%server, local = ?sock.local_addr().ok(), "Teredo: qualifying");
    let mut dgram = vec![0u8; 65_536];
    let mut out = [0u8; teredo::RS_LEN];
    let mut warned = false;
    loop {
        while let Some(n) = client.poll_transmit(Instant::now(), &mut out) {
            debug!(qualified = client.is_qualified(), "router solicitation");
            if let Err(e) = sock.send_to(&out[..n], SocketAddr::V4(server)).await {
                // Unreachable network and the like: the next solicitation retries.
                warn!(error = %e, "sending the router solicitation");
            }
        }
        let wake = client.poll_timeout().map(tokio::time::Instant::from_std);
        tokio::select! {
            r = sock.recv_from(&mut dgram) => {
                let (n, from) = r.context("UDP receive")?;
                let mut got = Some((n, from));
                let mut burst = 0;
                // This datagram and those already queued; their packets go to the TUN device
                // together (GRO).
                while let Some((n, from)) = got.take() {
                    match client.handle(Instant::now(), &dgram[..n]) {
                        Ok(teredo::Event::Qualified { address, mtu }) => {
                            // Miredo's layout: the address /32, so 2001::/32 goes into the
                            // tunnel.
                            link.flush().await;
                            link.configure(address, 32, mtu)?;
                            warned = false;
                        }
                        Ok(teredo::Event::Packet { offset, len }) => {
                            link.deliver(&dgram[offset..offset + len]).await;
                        }
                        Ok(teredo::Event::Refreshed) => trace!("qualification refreshed"),
                        Ok(_) => {}
                        Err(e) => debug!(%from, error = %e, "datagram refused"),
                    }
                    burst += 1;
                    if burst < TEREDO_BURST {
                        // Errors other than "nothing queued" come back from recv_from.
                        got = sock.try_recv_from(&mut dgram).ok();
                    }
                }
                link.flush().await;
            }
            r = link.recv() => {
                let mut n = r.context("reading the TUN device")?;
                let mut sent = 0;
                // One datagram per segment: the server takes packets up to the MTU.
                loop {
                    for i in 0..n {
                        let pkt = link.packet(i);
                        match client.encapsulate(pkt) {
                            Ok(to) => {
                                if let Err(e) = sock.send_to(pkt, SocketAddr::V4(to)).await
                                    && !std::mem::replace(&mut warned, true)
                                {
                                    warn!(error = %e, "sending to the Teredo server");
                                }
                            }
                            Err(e) => trace!(error = %e, "packet from the TUN not sent"),
                        }
                    }
                    sent += n;
                    if sent >= BATCH {
                        break;
                    }
                    match link.try_recv() {
                        Some(m) => n = m,
                        None => break,
                    }
                }
            }
            _ = sleep_until(wake) => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The TUN side

/// The client's TUN device: absent until the first configuration, then kept for the process'
/// lifetime (reconnects reuse it, changing the address when the server hands out another).
struct TunLink {
    ifname: String,
    routes: Vec<Ipv6Net>,
    dev: Option<tun_rs::AsyncDevice>,
    addr: Option<(Ipv6Addr, u8)>,
    mtu: u32,
    /// The device carries virtio-net headers (offload is on).
    vnet: bool,
    /// Uplink: one raw read (virtio-net header + up to 64 KiB)...
    gso_buf: Vec<u8>,
    /// ... split into these MTU-sized packets (`sizes` long each), allocated with the device.
    bufs: Vec<Vec<u8>>,
    sizes: Vec<usize>,
    /// Downlink: packets from the tunnel, one per slot, `queued` of them waiting
    /// for [`TunLink::flush`]. Slots are added as needed, up to `BATCH`.
    slots: Vec<Vec<u8>>,
    queued: usize,
}

impl TunLink {
    fn new(ifname: String, routes: Vec<Ipv6Net>) -> Self {
        TunLink {
            ifname,
            routes,
            dev: None,
            addr: None,
            mtu: 0,
            vnet: false,
            gso_buf: Vec::new(),
            bufs: Vec::new(),
            sizes: Vec::new(),
            slots: Vec::new(),
            queued: 0,
        }
    }

    /// Creates the device if needed, sets `addr/len` (replacing the previous address) and the
    /// MTU, and (re)installs the routes.
    fn configure(&mut self, addr: Ipv6Addr, len: u8, mtu: u32) -> Result<()> {
        let mtu16 = u16::try_from(mtu).unwrap_or(u16::MAX);
        let ifname = self.ifname.clone();
        let dev = match &mut self.dev {
            Some(d) => d,
            None => {
                let d = tun_rs::DeviceBuilder::new()
                    .name(&ifname)
                    .mtu(mtu16)
                    .multi_queue(false)
                    .packet_information(false)
                    // virtio-net headers: TCP super-packets from the local stack in one read
                    // (TSO), coalesced ones written (GRO).
                    .offload(true)
                    .enable(false)
                    .build_async()
                    .with_context(|| {
                        format!("creating TUN device `{ifname}` (needs CAP_NET_ADMIN)")
                    })?;
                // Before the link goes up: the server owns the link's addressing (it routes
                // the whole /64 to us), so no DAD delay before the address is usable, and no
                // kernel Router Solicitations or SLAAC (RAs are consumed here anyway).
                for (key, value) in [("accept_dad", "0"), ("accept_ra", "0")] {
                    let path = format!("/proc/sys/net/ipv6/conf/{ifname}/{key}");
                    if let Err(e) = std::fs::write(&path, value) {
                        debug!(%path, error = %e, "sysctl not set");
                    }
                }
                d.enabled(true)
                    .with_context(|| format!("setting `{ifname}` up"))?;
                debug!(
                    tso = d.tcp_gso(),
                    uso = d.udp_gso(),
                    ifname = %ifname,
                    "TUN device created"
                );
                self.mtu = mtu;
                self.vnet = d.tcp_gso();
                self.gso_buf = vec![0; tun_rs::VIRTIO_NET_HDR_LEN + 65_535];
                self.bufs = vec![vec![0; mtu as usize + 64]; BATCH];
                self.sizes = vec![0; BATCH];
                self.dev.insert(d)
            }
        };
        if self.mtu != mtu {
            dev.set_mtu(mtu16)
                .with_context(|| format!("setting MTU {mtu} on `{ifname}`"))?;
            self.mtu = mtu;
            for b in &mut self.bufs {
                b.resize(mtu as usize + 64, 0);
            }
        }
        if self.addr != Some((addr, len)) {
            if let Some((old, old_len)) = self.addr.take()
                && let Err(e) = dev.remove_address_v6(old, old_len)
            {
                debug!(address = %old, error = %e, "removing the old address");
            }
            dev.add_address_v6(addr, len)
                .with_context(|| format!("adding {addr}/{len} to `{ifname}`"))?;
            self.addr = Some((addr, len));
        }
        for r in &self.routes {
            gate64_io::tun::route(r.network(), r.prefix_len(), &ifname)?;
        }
        info!(address = %addr, ifname = %ifname, mtu, "link up");
        Ok(())
    }

    /// Queues a packet from the tunnel for the device (dropped while there is none); it is
    /// written by the next [`TunLink::flush`], or now if the batch is full.
    async fn deliver(&mut self, pkt: &[u8]) {
        if self.dev.is_none() || pkt.is_empty() || pkt.len() > 65_535 {
            return;
        }
        if self.queued == self.slots.len() {
            self.slots.push(Vec::with_capacity(SLOT_CAPACITY));
        }
        let slot = &mut self.slots[self.queued];
        slot.clear();
        slot.extend_from_slice(pkt);
        self.queued += 1;
        if self.queued >= BATCH {
            self.flush().await;
        }
    }

    /// Writes the queued packets to the device, a flow's TCP segments coalesced into one
    /// super-packet (GRO, [`gate64_io::gro`]). A TUN write does not block (the kernel takes
    /// the packet or drops it), so it is done in place rather than through the reactor.
    async fn flush(&mut self) {
        let n = std::mem::take(&mut self.queued);
        let Some(dev) = &self.dev else { return };
        if n == 0 {
            return;
        }
        if !self.vnet {
            for slot in &self.slots[..n] {
                if let Err(e) = dev.send(slot).await {
                    debug!(error = %e, "TUN write failed");
                }
            }
            return;
        }
        let mut packets: [&[u8]; BATCH] = [&[]; BATCH];
        for (p, slot) in packets.iter_mut().zip(&self.slots[..n]) {
            *p = slot;
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(dev);
        let w = gate64_io::gro::write_coalesced(fd, &packets[..n]);
        if w.failed > 0 {
            debug!(failed = w.failed, packets = n, "TUN write failed");
        }
    }

    /// Reads from the device, pending forever while there is none: returns how many packets
    /// the read split into, for [`TunLink::packet`] (0 for a packet that could not be split).
    async fn recv(&mut self) -> std::io::Result<usize> {
        let Some(dev) = &self.dev else {
            return std::future::pending().await;
        };
        let r = dev
            .recv_multiple(&mut self.gso_buf, &mut self.bufs, &mut self.sizes, 0)
            .await;
        split_result(r)
    }

    /// Like [`TunLink::recv`] for what is already queued in the device, if anything.
    fn try_recv(&mut self) -> Option<usize> {
        let dev = self.dev.as_ref()?;
        let r = dev.try_recv_multiple(&mut self.gso_buf, &mut self.bufs, &mut self.sizes, 0);
        match r {
            Err(e) if e.raw_os_error().is_some() || e.kind() == std::io::ErrorKind::WouldBlock => {
                None
            }
            r => split_result(r).ok(),
        }
    }

    /// Reads one raw packet (virtio-net header first, on an offloading device) into the read
    /// buffer, pending forever while there is no device; returns its length.
    async fn recv_raw(&mut self) -> std::io::Result<usize> {
        let Some(dev) = &self.dev else {
            return std::future::pending().await;
        };
        dev.recv(&mut self.gso_buf).await
    }

    /// Like [`TunLink::recv_raw`] for what is already queued, if anything.
    fn try_recv_raw(&mut self) -> Option<usize> {
        self.dev.as_ref()?.try_recv(&mut self.gso_buf).ok()
    }

    /// Appends the packets of the last raw read of `n` bytes to `out`, back to back.
    fn split_raw(&self, n: usize, out: &mut Vec<u8>) {
        let raw = &self.gso_buf[..n.min(self.gso_buf.len())];
        if !self.vnet {
            out.extend_from_slice(raw);
            return;
        }
        if let Err(e) = gate64_io::gro::split_into(raw, out) {
            debug!(error = %e, "TUN packet dropped");
        }
    }

    /// Packet `i` of the last read.
    fn packet(&self, i: usize) -> &[u8] {
        &self.bufs[i][..self.sizes[i]]
    }
}

/// A TUN read's result: errors from the device stand, a packet tun-rs could not split (a bad
/// header, more segments than slots) is dropped.
fn split_result(r: std::io::Result<usize>) -> std::io::Result<usize> {
    match r {
        Err(e) if e.raw_os_error().is_none() && e.kind() != std::io::ErrorKind::WouldBlock => {
            debug!(error = %e, "TUN packet dropped");
            Ok(0)
        }
        r => r,
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// 64 random bits from the OS (seeds for the interface id and Teredo nonces).
fn random_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_ne_bytes(b);
    }
    // No /dev/urandom: still distinct per process and run.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_forms() {
        let u = Url::parse("https://198.51.100.1/IPHTTPS").unwrap();
        assert_eq!(
            (
                u.host.as_str(),
                u.port,
                u.path.as_str(),
                u.authority.as_str()
            ),
            ("198.51.100.1", 443, "/IPHTTPS", "198.51.100.1")
        );
        let u = Url::parse("https://gw.example.net:8443/IPTLS").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("gw.example.net", 8443, "/IPTLS")
        );
        let u = Url::parse("https://[2001:db8::1]:444/x").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.authority.as_str()),
            ("2001:db8::1", 444, "[2001:db8::1]:444")
        );
        let u = Url::parse("https://[2001:db8::1]").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("2001:db8::1", 443, "/IPHTTPS")
        );
        for bad in [
            "http://x/",
            "https://",
            "https://:443/",
            "https://h:port/",
            "https://[::1/",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }
}
