//! The IP-HTTPS client session ([MS-IPHTTPS]): TCP + TLS (rustls) to
//! `https://host[:port]/path`, the `POST` of §3.1.5.2, then RS/RA (the sans-IO
//! [`ClientConnection`]). The host's packets are written to the stream as they are (the
//! protocol has no framing, §2.2); the stream is deframed for the host.

use super::{Host, Ready, sleep_until};
use anyhow::{Context, Result, ensure};
use gate64_iphttps::framing::{Deframer, StreamBuffer};
use gate64_iphttps::{ClientConnection, Event};
use rustls::pki_types::ServerName;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;
use tracing::{debug, info, trace};

/// Bytes of the host's packets gathered into one TLS write.
const UPLINK_BATCH: usize = 256 * 1024;
/// Room in the uplink buffer past [`UPLINK_BATCH`]: one more TUN read (up to 64 KiB) split
/// into packets, which can be slightly larger than the read.
const UPLINK_SLACK: usize = 2 * 65_536;
/// The path when the URL has none.
const DEFAULT_PATH: &str = "/IPHTTPS";

/// The parts of `https://host[:port]/path` the client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// Host name or IP literal, without brackets: for DNS, SNI and certificate checks.
    host: String,
    port: u16,
    path: String,
    /// The `Host` header value (brackets for IPv6, port when not 443).
    authority: String,
}

impl Url {
    /// Parses `https://host[:port][/path]` (the `--server` of `gate64 connect iphttps`).
    pub fn parse(s: &str) -> Result<Url> {
        let rest = s
            .strip_prefix("https://")
            .with_context(|| format!("--server {s:?}: expected https://host[:port]/path"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, DEFAULT_PATH),
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

    /// The URL of the server listening on `addr` at `path` (the lab's, which has no name).
    pub fn for_address(addr: SocketAddr, path: &str) -> Url {
        Url {
            host: addr.ip().to_string(),
            port: addr.port(),
            path: path.to_owned(),
            authority: addr.to_string(),
        }
    }
}

/// An IP-HTTPS server as the client reaches it: its URL, the TLS settings and the name its
/// certificate must carry.
#[derive(Debug, Clone)]
pub struct Server {
    url: Url,
    tls: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
    /// The local address connections are made from; the kernel's choice when `None`.
    source: Option<IpAddr>,
}

impl Server {
    /// Checks that the URL's host can be a TLS server name (a DNS name or an IP literal).
    pub fn new(url: Url, tls: Arc<rustls::ClientConfig>) -> Result<Self> {
        let name = ServerName::try_from(url.host.clone())
            .with_context(|| format!("--server: {:?} is not a valid TLS server name", url.host))?;
        Ok(Server {
            url,
            tls,
            name,
            source: None,
        })
    }

    /// The server with `name` as the TLS server name its certificate must carry, instead of
    /// the URL's host (a URL with an IP literal for a server certificate with a DNS name).
    pub fn with_server_name(mut self, name: &str) -> Result<Self> {
        self.name = ServerName::try_from(name.to_owned())
            .with_context(|| format!("{name:?} is not a valid TLS server name"))?;
        Ok(self)
    }

    /// The server reached from `source` (port chosen by the kernel): many clients of one
    /// process then come from distinct addresses, as real ones do.
    pub fn with_source(mut self, source: IpAddr) -> Self {
        self.source = Some(source);
        self
    }

    /// One connection for `host`: returns `Ok` when the host is done with the tunnel,
    /// otherwise with the reason the connection ended. The connection must be up (TCP, TLS and
    /// the server's 200) by `deadline`; `linked` is set once the server answered 200. `seed`
    /// gives the interface id: the same seed keeps the address across reconnects that get the
    /// same /64.
    pub async fn session<H: Host>(
        &self,
        seed: u64,
        deadline: tokio::time::Instant,
        host: &mut H,
        linked: &mut bool,
    ) -> Result<()> {
        let (stream, conn, rx) = self.connect(seed, deadline).await?;
        *linked = true;
        run(stream, conn, rx, host).await
    }

    /// The TCP connection to the server, from [`Server::with_source`]'s address if set.
    async fn tcp_connect(&self) -> Result<TcpStream> {
        let url = &self.url;
        let Some(source) = self.source else {
            return Ok(TcpStream::connect((url.host.as_str(), url.port)).await?);
        };
        let mut last = None;
        for peer in tokio::net::lookup_host((url.host.as_str(), url.port)).await? {
            if peer.is_ipv4() != source.is_ipv4() {
                continue;
            }
            let sock = if peer.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            sock.bind(SocketAddr::new(source, 0))
                .with_context(|| format!("binding {source}"))?;
            match sock.connect(peer).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(e) => Err(e.into()),
            None => anyhow::bail!("no address of {} in the family of {source}", url.host),
        }
    }

    /// TCP connect, TLS handshake, the POST and the server's response: the link is up. The
    /// returned buffer holds what the server sent after the response head.
    async fn connect(
        &self,
        seed: u64,
        deadline: tokio::time::Instant,
    ) -> Result<(TlsStream<TcpStream>, ClientConnection, StreamBuffer)> {
        let url = &self.url;
        let within = |what: &'static str| move |_| anyhow::anyhow!("{what}: timed out");
        let tcp = tokio::time::timeout_at(deadline, self.tcp_connect())
            .await
            .map_err(within("TCP connect"))?
            .with_context(|| format!("TCP connect to {}:{}", url.host, url.port))?;
        let _ = tcp.set_nodelay(true);
        let peer = tcp.peer_addr().ok();
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.tls));
        let mut stream =
            tokio::time::timeout_at(deadline, connector.connect(self.name.clone(), tcp))
                .await
                .map_err(within("TLS handshake"))?
                .context("TLS handshake")?;
        debug!(?peer, "TLS up");

        let mut conn = ClientConnection::new(&url.path, &url.authority, seed);
        stream.write_all(&conn.request()).await.context("write")?;
        stream.flush().await.context("write")?;
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
        info!(?peer, path = %url.path, "IP-HTTPS connected, soliciting a router");
        Ok((stream, conn, rx))
    }
}

/// The link: RS/RA and packets both ways until the host is done or the connection fails.
async fn run<H: Host>(
    mut stream: TlsStream<TcpStream>,
    mut conn: ClientConnection,
    mut rx: StreamBuffer,
    host: &mut H,
) -> Result<()> {
    let deframer = Deframer::default();
    let mut rs = [0u8; gate64_iphttps::client::RS_LEN];
    let mut uplink = Vec::with_capacity(UPLINK_BATCH + UPLINK_SLACK);
    loop {
        while let Some(pkt) = rx.next_packet(&deframer).context("server stream")? {
            match conn.handle_packet(Instant::now(), pkt) {
                Ok(Event::Configured { mtu, router, .. }) => {
                    let address = conn.address().context("configured without an address")?;
                    debug!(%router, mtu, "router advertisement");
                    host.configure(address, 64, mtu).await?;
                }
                Ok(Event::Refreshed) => trace!("router advertisement (unchanged)"),
                Ok(Event::Packet) => host.deliver(pkt).await,
                Err(e) => {
                    debug!(error = %e, "packet from the server refused");
                    host.refused();
                }
            }
        }
        // The packets of this read go to the host together (GRO on a TUN device).
        host.flush().await;
        let mut wrote = false;
        while let Some(n) = conn.poll_transmit(Instant::now(), &mut rs) {
            debug!("router solicitation");
            stream.write_all(&rs[..n]).await.context("write")?;
            wrote = true;
        }
        if wrote {
            stream.flush().await.context("write")?;
        }
        tokio::select! {
            r = stream.read(rx.spare()) => {
                let n = r.context("read")?;
                ensure!(n > 0, "closed by the server");
                rx.commit(n);
            }
            r = host.ready() => match r? {
                Ready::Packets => {
                    // What the host has, up to a batch, goes in one TLS write (IP-HTTPS
                    // packets are back to back).
                    uplink.clear();
                    let now = Instant::now();
                    while uplink.len() < UPLINK_BATCH && host.take(now, &mut uplink)? {}
                    if !uplink.is_empty() {
                        stream.write_all(&uplink).await.context("write")?;
                        stream.flush().await.context("write")?;
                    }
                }
                Ready::Done => {
                    // close_notify, so that the server sees a clean end.
                    let _ = stream.shutdown().await;
                    return Ok(());
                }
            },
            _ = sleep_until(conn.poll_timeout()) => {}
        }
    }
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

    #[test]
    fn url_for_address_matches_the_parsed_form() {
        let addr: SocketAddr = "127.0.0.1:8443".parse().unwrap();
        assert_eq!(
            Url::for_address(addr, "/IPHTTPS"),
            Url::parse("https://127.0.0.1:8443/IPHTTPS").unwrap()
        );
        let addr: SocketAddr = "[2001:db8::1]:444".parse().unwrap();
        assert_eq!(
            Url::for_address(addr, "/x"),
            Url::parse("https://[2001:db8::1]:444/x").unwrap()
        );
    }
}
