//! The `/metrics` HTTP endpoint: a hyper 1 HTTP/1.1 server, one tokio task per connection;
//! also the status page (`/status`) when the daemon gives one.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, info};

use gate64_metrics::{Exporter, HttpRejected};
use gate64_metrics::{OPENMETRICS_CONTENT_TYPE, PROMETHEUS_TEXT_CONTENT_TYPE};

/// Serves `exporter` over HTTP/1.1 on `listener` until `shutdown` resolves.
///
/// - `GET /metrics`: 200 with [`Exporter::encode`] (Prometheus text 0.0.4), or
///   [`Exporter::encode_openmetrics`] when the `Accept` header asks for
///   `application/openmetrics-text` (as Prometheus does).
/// - `GET /`: 200, a small HTML page linking `/metrics`.
/// - Any other path: 404. Any method other than `GET` or `HEAD` on a known path: 405 with
///   `Allow: GET, HEAD`. `HEAD` is answered like `GET`, without the body.
/// - A request for another host: 421, counted in
///   `gate64_metrics_http_rejected_total{reason="foreign_host"}`. The host (the `Host` header,
///   or the authority of an absolute URI) must be an IP address (`192.0.2.1`, `[2001:db8::1]`,
///   with or without a port), `localhost` or one of `allowed_hosts` (`metrics.allowed_hosts`,
///   lower case). A web
///   page a browser loaded from elsewhere can thus not read the answers through a name of its
///   own that it points at this listener (DNS rebinding). A request without a host (HTTP/1.0)
///   is answered: browsers always send one.
///
/// Each connection runs in its own task. A client must send a complete request head within
/// 10 s of connecting (or of its previous response), a write to it that makes no progress
/// for 10 s (a client that sends requests but does not read the answers) closes the
/// connection (`gate64_metrics_http_rejected_total{reason="write_timeout"}`), and at most 256
/// connections are served at once (further ones are closed at once), so slow, idle or
/// unreading clients cannot pile up.
///
/// When `shutdown` resolves, the listener is closed, open connections are aborted (a scrape
/// in flight at that moment is cut off) and `serve` returns `Ok(())`.
///
/// # Errors
///
/// Returns an error only if the listener is not listening (`accept` fails with `EINVAL`).
/// Other `accept` errors do not end the server: those that concern one incoming connection
/// are skipped, and the rest (such as running out of file descriptors) are logged and retried
/// after a second.
pub async fn serve(
    listener: TcpListener,
    exporter: Exporter,
    allowed_hosts: Vec<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let site = Site {
        status: None,
        allowed_hosts: allowed_hosts.into(),
    };
    serve_with(listener, exporter, site, shutdown, Limits::DEFAULT).await
}

/// The status page's data: the JSON `/status.json` answers with, read at each request. The
/// daemon refreshes it in the background, so a request costs a copy, whoever sends it.
pub type StatusJson = std::sync::Arc<dyn Fn() -> String + Send + Sync>;

/// [`serve`] with the status page: `GET /status` (HTML), `/status.js`, `/status.css` (both
/// compiled into the binary: the page loads nothing from elsewhere) and `/status.json`
/// (`status`). The page's Content-Security-Policy allows only these.
pub async fn serve_with_status(
    listener: TcpListener,
    exporter: Exporter,
    status: StatusJson,
    allowed_hosts: Vec<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let site = Site {
        status: Some(status),
        allowed_hosts: allowed_hosts.into(),
    };
    serve_with(listener, exporter, site, shutdown, Limits::DEFAULT).await
}

/// What the listener serves besides `/metrics`, and for which hosts.
#[derive(Clone, Default)]
pub(crate) struct Site {
    pub(crate) status: Option<StatusJson>,
    pub(crate) allowed_hosts: Arc<[String]>,
}

/// Bounds on what clients of the endpoint can hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Time a client has to send a complete request head.
    pub(crate) header_read_timeout: Duration,
    /// Connections served at once.
    pub(crate) max_connections: usize,
    /// Time a write to the client may make no progress before the connection is closed.
    pub(crate) write_timeout: Duration,
}

impl Limits {
    pub(crate) const DEFAULT: Limits = Limits {
        header_read_timeout: Duration::from_secs(10),
        max_connections: 256,
        write_timeout: Duration::from_secs(10),
    };
}

/// Read buffer per connection; hyper's default (~400 KiB) is far more than a scraper's
/// request needs. Writes are only flow-controlled by it, so large responses still go out.
const MAX_BUF_SIZE: usize = 16 * 1024;

/// How long to wait before accepting again after an error that is not the connection's.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

pub(crate) async fn serve_with(
    listener: TcpListener,
    exporter: Exporter,
    site: Site,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: Limits,
) -> io::Result<()> {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_BUF_SIZE);
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "metrics endpoint listening");
    }

    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            // Reap finished connections so the set holds only live ones.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if conns.len() >= limits.max_connections {
                        debug!(%peer, "metrics connection refused: too many open");
                        continue;
                    }
                    let counts = exporter.clone();
                    let exporter = exporter.clone();
                    let site = site.clone();
                    let service = service_fn(move |req| {
                        let response = respond(&exporter, &site, &req);
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let stream = WriteDeadline::new(stream, limits.write_timeout);
                    let timed_out = Arc::clone(&stream.timed_out);
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    conns.spawn(async move {
                        if let Err(error) = conn.await {
                            debug!(%peer, %error, "metrics connection failed");
                        }
                        if timed_out.load(Ordering::Relaxed) {
                            counts.count_http_rejected(HttpRejected::WriteTimeout);
                        }
                    });
                }
                Err(error) if is_connection_error(&error) => {
                    debug!(%error, "metrics accept: connection failed before accept");
                }
                // EINVAL: the socket is not listening; retrying cannot help.
                Err(error) if error.kind() == io::ErrorKind::InvalidInput => return Err(error),
                // Out of file descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) or a
                // rarer protocol error: retrying at once would spin, so wait for resources.
                Err(error) => {
                    crate::log_limited!(warn, %error, "metrics accept failed, backing off");
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            },
        }
    }
    conns.shutdown().await;
    Ok(())
}

/// Errors that concern only the connection being accepted: Linux reports a pending network
/// error of the new socket from `accept` itself and asks callers to retry (accept(2), NOTES).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
            | io::ErrorKind::PermissionDenied
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::NetworkDown
    )
}

const INDEX_HTML: &str = "<!DOCTYPE html>\n<html><head><title>gate64</title></head>\n\
    <body><h1>gate64</h1><p><a href=\"metrics\">Metrics</a></p></body></html>\n";

const INDEX_WITH_STATUS_HTML: &str = "<!DOCTYPE html>\n<html><head><title>gate64</title></head>\n\
    <body><h1>gate64</h1><p><a href=\"status\">Status</a> · <a href=\"metrics\">Metrics</a></p>\
    </body></html>\n";

const STATUS_HTML: &str = include_str!("status_page/status.html");
const STATUS_JS: &str = include_str!("status_page/status.js");
const STATUS_CSS: &str = include_str!("status_page/status.css");

/// The status page's policy: its own script, style and data, nothing inline, nothing from
/// elsewhere, no framing.
const STATUS_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// A connection whose writes must make progress: a write (or flush) the socket has not taken
/// any of for `limit` fails with `TimedOut`, which ends hyper's connection and closes the
/// socket. Reads pass through (hyper bounds the wait for a request head itself).
struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Running while a write is stalled; cleared by any progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    timed_out: Arc<AtomicBool>,
}

impl<S> WriteDeadline<S> {
    fn new(inner: S, limit: Duration) -> Self {
        WriteDeadline {
            inner,
            limit,
            stalled: None,
            timed_out: Arc::new(AtomicBool::new(false)),
        }
    }

    /// `polled` is what the socket said; `Pending` starts (or goes on with) the deadline.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.limit;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.timed_out.store(true, Ordering::Relaxed);
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client read nothing of the answer in time",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The host a request is for: the authority of an absolute URI, which RFC 9112 §3.2.2 says
/// takes the place of `Host`, else the `Host` header. `Ok(None)` when there is none;
/// `Err(())` when there are several `Host` headers or one that is not text.
fn request_host(req: &Request<Incoming>) -> Result<Option<&str>, ()> {
    if let Some(authority) = req.uri().authority() {
        return Ok(Some(authority.as_str()));
    }
    let mut hosts = req.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) => Ok(None),
        (Some(host), None) => host.to_str().map(Some).map_err(|_| ()),
        (Some(_), Some(_)) => Err(()),
    }
}

/// Whether this listener answers for `host` (`name[:port]`): an IPv4 address, an IPv6
/// address in brackets, `localhost`, or one of `names` (lower case), ASCII case ignored and
/// one trailing dot allowed. A name that only starts like an address (`127.0.0.1.example`)
/// is a name.
fn host_allowed(host: &str, names: &[String]) -> bool {
    let is_port = |p: &str| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = host.strip_prefix('[') {
        let Some((ip, port)) = rest.split_once(']') else {
            return false;
        };
        return ip.parse::<Ipv6Addr>().is_ok()
            && (port.is_empty() || port.strip_prefix(':').is_some_and(is_port));
    }
    let (name, port) = match host.split_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    if port.is_some_and(|p| !is_port(p)) {
        return false;
    }
    if name.parse::<Ipv4Addr>().is_ok() {
        return true;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    name.eq_ignore_ascii_case("localhost") || names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

fn respond(exporter: &Exporter, site: &Site, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let foreign = match request_host(req) {
        Ok(Some(host)) => !host_allowed(host, &site.allowed_hosts),
        Ok(None) => false,
        Err(()) => true,
    };
    if foreign {
        exporter.count_http_rejected(HttpRejected::ForeignHost);
        // RFC 9110 §15.5.20: this server does not answer for that host.
        return plain(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected request: the host is neither an IP address, localhost nor a name \
             of metrics.allowed_hosts\n",
        );
    }
    let status = site.status.as_ref();
    let path = req.uri().path();
    let status_path = matches!(
        path,
        "/status" | "/status.js" | "/status.css" | "/status.json"
    );
    if path != "/metrics" && path != "/" && !(status_path && status.is_some()) {
        return plain(StatusCode::NOT_FOUND, "not found\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        // RFC 9110 §15.5.6: a 405 response must list the allowed methods.
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    if path == "/" {
        let index = if status.is_some() {
            INDEX_WITH_STATUS_HTML
        } else {
            INDEX_HTML
        };
        return with_type(StatusCode::OK, index.into(), "text/html; charset=utf-8");
    }
    if let Some(status) = status.filter(|_| status_path) {
        let (body, content_type) = match path {
            "/status" => (STATUS_HTML.to_owned(), "text/html; charset=utf-8"),
            "/status.js" => (STATUS_JS.to_owned(), "text/javascript; charset=utf-8"),
            "/status.css" => (STATUS_CSS.to_owned(), "text/css; charset=utf-8"),
            _ => (status(), "application/json"),
        };
        let mut response = with_type(StatusCode::OK, body, content_type);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(STATUS_CSP),
        );
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return response;
    }
    if wants_openmetrics(req) {
        with_type(
            StatusCode::OK,
            exporter.encode_openmetrics(),
            OPENMETRICS_CONTENT_TYPE,
        )
    } else {
        with_type(
            StatusCode::OK,
            exporter.encode(),
            PROMETHEUS_TEXT_CONTENT_TYPE,
        )
    }
}

/// Whether the client accepts OpenMetrics. Prometheus lists it first in its `Accept` header;
/// curl and browsers don't list it and get the classic text format. A plain substring test,
/// as q-values other than 0 would not change the outcome and nobody sends `q=0` for it.
fn wants_openmetrics(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.to_ascii_lowercase()
                .contains("application/openmetrics-text")
        })
}

fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    with_type(status, body.into(), "text/plain; charset=utf-8")
}

fn with_type(
    status: StatusCode,
    body: String,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use gate64_dataplane::{Direction, Gauges, Side, Stats};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;
    use tokio::time::timeout;

    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    struct Server {
        addr: SocketAddr,
        exporter: Exporter,
        stop: oneshot::Sender<()>,
        task: JoinHandle<io::Result<()>>,
    }

    impl Server {
        async fn start(limits: Limits) -> Server {
            Server::start_with(limits, None).await
        }

        async fn start_with(limits: Limits, status: Option<StatusJson>) -> Server {
            let site = Site {
                status,
                allowed_hosts: Arc::from([]),
            };
            Server::start_site(limits, site).await
        }

        async fn start_site(limits: Limits, site: Site) -> Server {
            let stats = Arc::new(Stats::default());
            stats.packet(Side::Corpnet, Direction::Rx, 1400);
            let exporter = Exporter::new(
                vec![stats],
                Arc::new(|| Gauges {
                    teredo_clients: 42,
                    teredo_peers: 0,
                    iphttps_clients: 0,
                    nat64: None,
                    ..Default::default()
                }),
            );
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind loopback");
            let addr = listener.local_addr().expect("bound address");
            let (stop, stopped) = oneshot::channel::<()>();
            let shutdown = async {
                let _ = stopped.await;
            };
            let task = tokio::spawn(serve_with(
                listener,
                exporter.clone(),
                site,
                shutdown,
                limits,
            ));
            Server {
                addr,
                exporter,
                stop,
                task,
            }
        }

        async fn stop(self) {
            self.stop.send(()).expect("server still running");
            let result = timeout(WAIT, self.task)
                .await
                .expect("server stops on shutdown");
            result
                .expect("server task did not panic")
                .expect("server returns Ok");
        }
    }

    struct Reply {
        status: u16,
        head: String,
        body: String,
    }

    impl Reply {
        fn header(&self, name: &str) -> Option<&str> {
            self.head.lines().skip(1).find_map(|line| {
                let (k, v) = line.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim())
            })
        }
    }

    /// One HTTP/1.1 request over a fresh connection, read until the server closes it.
    async fn request(addr: SocketAddr, method: &str, path: &str, extra: &str) -> Reply {
        request_to(addr, "localhost", method, path, extra).await
    }

    /// [`request`] with `Host: host`.
    async fn request_to(
        addr: SocketAddr,
        host: &str,
        method: &str,
        path: &str,
        extra: &str,
    ) -> Reply {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let req =
            format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n");
        stream
            .write_all(req.as_bytes())
            .await
            .expect("send request");
        let mut raw = Vec::new();
        timeout(WAIT, stream.read_to_end(&mut raw))
            .await
            .expect("server closes the connection")
            .expect("read response");
        let raw = String::from_utf8(raw).expect("response is UTF-8");
        let (head, body) = raw.split_once("\r\n\r\n").expect("header/body separator");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status code");
        Reply {
            status,
            head: head.replace("\r\n", "\n"),
            body: body.to_owned(),
        }
    }

    #[tokio::test]
    async fn get_metrics_returns_prometheus_text() {
        let server = Server::start(Limits::DEFAULT).await;
        let reply = request(server.addr, "GET", "/metrics", "").await;
        assert_eq!(reply.status, 200, "{}", reply.head);
        assert_eq!(
            reply.header("content-type"),
            Some(PROMETHEUS_TEXT_CONTENT_TYPE)
        );
        assert!(
            reply
                .body
                .contains("gate64_bytes_total{side=\"corpnet\",direction=\"rx\"} 1400\n"),
            "{}",
            reply.body
        );
        assert!(
            reply
                .body
                .contains("gate64_clients{transport=\"teredo\"} 42\n")
        );
        assert!(!reply.body.contains("# EOF"));
        server.stop().await;
    }

    #[tokio::test]
    async fn status_page_is_served_with_a_strict_policy_only_when_given() {
        let json: StatusJson = Arc::new(|| r#"{"clients":[]}"#.to_owned());
        let server = Server::start_with(Limits::DEFAULT, Some(json)).await;
        for (path, content_type, needle) in [
            (
                "/status",
                "text/html; charset=utf-8",
                "<script src=\"status.js\"",
            ),
            (
                "/status.js",
                "text/javascript; charset=utf-8",
                "textContent",
            ),
            ("/status.css", "text/css; charset=utf-8", "table"),
            ("/status.json", "application/json", "\"clients\""),
        ] {
            let reply = request(server.addr, "GET", path, "").await;
            assert_eq!(reply.status, 200, "{path}: {}", reply.head);
            assert_eq!(reply.header("content-type"), Some(content_type), "{path}");
            assert_eq!(reply.header("content-security-policy"), Some(STATUS_CSP));
            assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
            assert!(reply.body.contains(needle), "{path}: {}", reply.body);
        }
        // The page loads nothing from elsewhere.
        for asset in [STATUS_HTML, STATUS_CSS] {
            assert!(!asset.contains("://"), "{asset}");
        }
        let js_urls: Vec<&str> = STATUS_JS.matches("://").collect();
        assert_eq!(js_urls.len(), 1, "only the SVG namespace name");
        assert!(
            !STATUS_JS.contains("innerHTML"),
            "client values go through textContent"
        );
        let index = request(server.addr, "GET", "/", "").await;
        assert!(index.body.contains("href=\"status\""));
        let reply = request(server.addr, "POST", "/status.json", "").await;
        assert_eq!(reply.status, 405);
        server.stop().await;

        let without = Server::start(Limits::DEFAULT).await;
        for path in ["/status", "/status.json", "/status.js"] {
            let reply = request(without.addr, "GET", path, "").await;
            assert_eq!(reply.status, 404, "{path} without a status page");
        }
        without.stop().await;
    }

    #[tokio::test]
    async fn openmetrics_when_accepted() {
        let server = Server::start(Limits::DEFAULT).await;
        // Prometheus 2.x's default scrape Accept header.
        let accept = "Accept: application/openmetrics-text;version=1.0.0,\
            application/openmetrics-text;version=0.0.1;q=0.75,\
            text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n";
        let reply = request(server.addr, "GET", "/metrics?x=1", accept).await;
        assert_eq!(reply.status, 200, "{}", reply.head);
        assert_eq!(reply.header("content-type"), Some(OPENMETRICS_CONTENT_TYPE));
        assert!(reply.body.contains("# TYPE gate64_bytes counter\n"));
        assert!(reply.body.ends_with("# EOF\n"), "{}", reply.body);
        server.stop().await;
    }

    #[tokio::test]
    async fn index_links_metrics() {
        let server = Server::start(Limits::DEFAULT).await;
        let reply = request(server.addr, "GET", "/", "").await;
        assert_eq!(reply.status, 200, "{}", reply.head);
        assert!(
            reply
                .header("content-type")
                .unwrap()
                .starts_with("text/html")
        );
        assert!(reply.body.contains("href=\"metrics\""), "{}", reply.body);
        server.stop().await;
    }

    #[tokio::test]
    async fn head_has_no_body() {
        let server = Server::start(Limits::DEFAULT).await;
        let reply = request(server.addr, "HEAD", "/metrics", "").await;
        assert_eq!(reply.status, 200, "{}", reply.head);
        assert_eq!(reply.body, "");
        server.stop().await;
    }

    #[tokio::test]
    async fn unknown_path_is_404_and_other_methods_405() {
        let server = Server::start(Limits::DEFAULT).await;
        let reply = request(server.addr, "GET", "/nope", "").await;
        assert_eq!(reply.status, 404, "{}", reply.head);
        let reply = request(server.addr, "GET", "/metrics/", "").await;
        assert_eq!(reply.status, 404, "{}", reply.head);
        for path in ["/metrics", "/"] {
            let reply = request(server.addr, "POST", path, "Content-Length: 0\r\n").await;
            assert_eq!(reply.status, 405, "{}", reply.head);
            assert_eq!(reply.header("allow"), Some("GET, HEAD"));
        }
        let reply = request(server.addr, "DELETE", "/metrics", "").await;
        assert_eq!(reply.status, 405, "{}", reply.head);
        server.stop().await;
    }

    #[tokio::test]
    async fn shutdown_ends_server_and_open_connections() {
        let server = Server::start(Limits::DEFAULT).await;
        // An idle keep-alive connection must not hold the server up.
        let mut idle = TcpStream::connect(server.addr).await.expect("connect");
        idle.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .expect("send");
        let mut buf = [0; 256];
        assert!(idle.read(&mut buf).await.expect("read response") > 0);
        let addr = server.addr;
        server.stop().await;
        let mut rest = Vec::new();
        let read = timeout(WAIT, idle.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "connection still open after shutdown");
        assert!(TcpStream::connect(addr).await.is_err(), "still listening");
    }

    #[tokio::test]
    async fn public_serve_spawns_and_returns_on_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let exporter = Exporter::new(Vec::new(), Arc::new(Gauges::default));
        // tokio::spawn requires the future to be Send + 'static.
        let task = tokio::spawn(serve(
            listener,
            exporter,
            Vec::new(),
            std::future::ready(()),
        ));
        let result = timeout(WAIT, task).await.expect("serve returns");
        result.expect("no panic").expect("Ok on shutdown");
    }

    #[tokio::test]
    async fn slow_header_is_cut_off() {
        let limits = Limits {
            header_read_timeout: Duration::from_millis(200),
            ..Limits::DEFAULT
        };
        let server = Server::start(limits).await;
        let mut slow = TcpStream::connect(server.addr).await.expect("connect");
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
            .await
            .expect("send partial head");
        let mut rest = Vec::new();
        // EOF or a reset, either way within the timeout and without a response.
        let read = timeout(WAIT, slow.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "slow client not disconnected");
        assert!(
            rest.is_empty() || rest.starts_with(b"HTTP/1.1 408"),
            "{rest:?}"
        );
        // An idle connection that never sends a byte is cut off too.
        let mut idle = TcpStream::connect(server.addr).await.expect("connect");
        let read = timeout(WAIT, idle.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "idle client not disconnected");
        server.stop().await;
    }

    fn rejected(server: &Server, reason: &str) -> String {
        let text = server.exporter.encode();
        let key = format!("gate64_metrics_http_rejected_total{{reason=\"{reason}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .unwrap_or("absent")
            .to_owned()
    }

    /// A page a browser loaded from elsewhere reaches the listener through a name of its own
    /// (DNS rebinding): that Host is answered 421 and counted; IP addresses, localhost and
    /// the configured names are answered.
    #[tokio::test]
    async fn only_addresses_localhost_and_listed_names_are_answered() {
        let json: StatusJson = Arc::new(|| r#"{"clients":[]}"#.to_owned());
        let site = Site {
            status: Some(json),
            allowed_hosts: Arc::from(["gate64-mgmt.example.net".to_owned()]),
        };
        let server = Server::start_site(Limits::DEFAULT, site).await;
        let foreign = [
            "rebind.example",
            "127.0.0.1.nip.io",
            "localhost.rebind.example",
            "gate64-mgmt.example.net.rebind.example",
            "[::1",
            "::1",
            "[::1]x",
            "127.0.0.1:x",
            "127.0.0.1:9164:1",
            "user@127.0.0.1",
            "",
        ];
        for host in foreign {
            let reply = request_to(server.addr, host, "GET", "/status.json", "").await;
            assert_eq!(reply.status, 421, "Host: {host:?}: {}", reply.head);
            assert!(!reply.body.contains("clients"), "{host:?}");
        }
        // An absolute URI's authority is the host, whatever Host says.
        let reply = request(server.addr, "GET", "http://rebind.example/metrics", "").await;
        assert_eq!(reply.status, 421, "{}", reply.head);
        let reply = request(server.addr, "GET", "/metrics", "Host: localhost\r\n").await;
        assert_eq!(reply.status, 421, "two Host headers: {}", reply.head);
        assert_eq!(
            rejected(&server, "foreign_host"),
            (foreign.len() + 2).to_string()
        );
        for host in [
            "127.0.0.1",
            "127.0.0.1:9164",
            "10.1.2.3",
            "[::1]",
            "[::1]:9164",
            "[2001:db8::7]:80",
            "localhost",
            "LocalHost:9164",
            "localhost.",
            "gate64-mgmt.example.net",
            "Gate64-Mgmt.Example.Net.:9164",
        ] {
            let reply = request_to(server.addr, host, "GET", "/status.json", "").await;
            assert_eq!(reply.status, 200, "Host: {host:?}: {}", reply.head);
        }
        let reply = request(server.addr, "GET", "http://127.0.0.1:9164/metrics", "").await;
        assert_eq!(reply.status, 200, "{}", reply.head);
        assert_eq!(
            rejected(&server, "foreign_host"),
            (foreign.len() + 2).to_string()
        );
        server.stop().await;
    }

    /// Clients that pipeline requests and never read the answers are closed once a write
    /// has made no progress for the write timeout; they no longer hold every slot.
    #[tokio::test]
    async fn clients_that_never_read_are_closed_and_others_answered() {
        let limits = Limits {
            max_connections: 2,
            write_timeout: Duration::from_millis(300),
            ..Limits::DEFAULT
        };
        // Large answers fill the socket buffers after a few requests.
        let big = Arc::new("x".repeat(1 << 20));
        let json: StatusJson = Arc::new(move || big.as_str().to_owned());
        let server = Server::start_with(limits, Some(json)).await;
        let mut stuck = Vec::new();
        for _ in 0..2 {
            let mut stream = TcpStream::connect(server.addr).await.expect("connect");
            stuck.push(tokio::spawn(async move {
                let request = b"GET /status.json HTTP/1.1\r\nHost: localhost\r\n\r\n";
                // Until the server closes the connection; never reading.
                loop {
                    if let Err(e) = stream.write_all(request).await {
                        return e;
                    }
                }
            }));
        }
        for task in stuck {
            let error = timeout(WAIT, task)
                .await
                .expect("a client that does not read is closed")
                .expect("no panic");
            assert!(
                matches!(
                    error.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                ),
                "{error}"
            );
        }
        let reply = request(server.addr, "GET", "/metrics", "").await;
        assert_eq!(reply.status, 200, "{}", reply.head);
        assert_eq!(rejected(&server, "write_timeout"), "2");
        server.stop().await;
    }

    #[tokio::test]
    async fn connections_beyond_the_limit_are_closed() {
        let limits = Limits {
            max_connections: 1,
            ..Limits::DEFAULT
        };
        let server = Server::start(limits).await;
        let mut first = TcpStream::connect(server.addr).await.expect("connect");
        // Make sure the server has accepted and spawned the first connection.
        first
            .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .expect("send");
        let mut buf = [0; 64];
        assert!(first.read(&mut buf).await.expect("read") > 0);
        let mut second = TcpStream::connect(server.addr).await.expect("connect");
        let mut rest = Vec::new();
        let read = timeout(WAIT, second.read_to_end(&mut rest)).await;
        assert!(
            read.is_ok() && rest.is_empty(),
            "second connection served: {rest:?}"
        );
        drop(first);
        server.stop().await;
    }
}
