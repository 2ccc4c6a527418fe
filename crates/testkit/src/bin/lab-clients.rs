//! `lab-clients`: a crowd of emulated Teredo and IP-HTTPS clients that each keep pinging a
//! host through gate64, for life-cycle tests (reload, drain) that must tell whether any client
//! was dropped.
//!
//! Each client runs the sans-IO client core of its transport (`gate64_teredo::client::Client`:
//! RS/RA qualification; `gate64_iphttps::ClientConnection`: TLS, POST, RS/RA) on its own
//! socket and, once it has an address, sends an ICMPv6 echo request to `--target` every
//! `--interval-ms`, counting the replies. A client never reconnects: an IP-HTTPS connection
//! that ends is a dropped client.
//!
//! Output (stdout): `all up N` once every client has its address; after `--mark FILE` appears,
//! replies are counted apart ("after the mark"); at the end (`--duration`, or the server closing
//! every IP-HTTPS connection) one line per client that did not pass traffic after the mark,
//! then `summary clients=N up=N passing_after_mark=N ended=N closed_cleanly=N`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gate64_iphttps::framing::{Deframer, StreamBuffer};
use gate64_iphttps::{ClientConnection, Event as HttpsEvent};
use gate64_teredo::client::{Client, Event as TeredoEvent, RS_LEN};
use gate64_wire::{icmpv6, ipv6};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const USAGE: &str = "\
usage: lab-clients --target IPV6 [options]
  --target IPV6          host to ping through gate64                    (required)
  --teredo N             emulated Teredo clients                        (default 0)
  --teredo-server IPV4   gate64's primary Teredo address (port 3544)    (default 192.0.2.1)
  --iphttps N            emulated IP-HTTPS clients                      (default 0)
  --url URL              IP-HTTPS URL, https://IPV4[:PORT]/PATH          (default https://198.51.100.1/IPHTTPS)
  --ca FILE              CA that signed the server certificate          (required with --iphttps)
  --bind A,B,...         local IPv4 addresses, used round-robin         (default: any)
  --interval-ms MS       echo requests per client every MS              (default 200)
  --duration SECS        run this long                                  (default 60)
  --mark FILE            count replies apart once FILE exists
  -h, --help             this text";

/// A client's counters, shared with the reporter.
#[derive(Default)]
struct Tally {
    up: AtomicBool,
    replies: AtomicU64,
    replies_after_mark: AtomicU64,
    ended: std::sync::Mutex<Option<String>>,
    closed_cleanly: AtomicBool,
}

struct Opts {
    target: Ipv6Addr,
    teredo: usize,
    teredo_server: Ipv4Addr,
    iphttps: usize,
    server: SocketAddr,
    host: String,
    path: String,
    ca: Option<PathBuf>,
    bind: Vec<Ipv4Addr>,
    interval: Duration,
    duration: Duration,
    mark: Option<PathBuf>,
}

fn main() -> ExitCode {
    let opts = match parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("lab-clients: {e:#}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lab-clients: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lab-clients: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Opts>> {
    let mut o = Opts {
        target: Ipv6Addr::UNSPECIFIED,
        teredo: 0,
        teredo_server: Ipv4Addr::new(192, 0, 2, 1),
        iphttps: 0,
        server: SocketAddr::from(([198, 51, 100, 1], 443)),
        host: "198.51.100.1".into(),
        path: "/IPHTTPS".into(),
        ca: None,
        bind: Vec::new(),
        interval: Duration::from_millis(200),
        duration: Duration::from_secs(60),
        mark: None,
    };
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        let v = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        let ctx = || format!("{flag} {v}");
        match flag.as_str() {
            "--target" => o.target = v.parse().with_context(ctx)?,
            "--teredo" => o.teredo = v.parse().with_context(ctx)?,
            "--teredo-server" => o.teredo_server = v.parse().with_context(ctx)?,
            "--iphttps" => o.iphttps = v.parse().with_context(ctx)?,
            "--url" => {
                let rest = v.strip_prefix("https://").with_context(ctx)?;
                let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let server: SocketAddr = match authority.parse() {
                    Ok(a) => a,
                    Err(_) => SocketAddr::new(authority.parse().with_context(ctx)?, 443),
                };
                o.server = server;
                o.host = server.ip().to_string();
                o.path = if path.is_empty() { "/IPHTTPS" } else { path }.to_owned();
            }
            "--ca" => o.ca = Some(PathBuf::from(v)),
            "--bind" => {
                for a in v.split(',').filter(|a| !a.is_empty()) {
                    o.bind.push(a.trim().parse().with_context(ctx)?);
                }
            }
            "--interval-ms" => o.interval = Duration::from_millis(v.parse().with_context(ctx)?),
            "--duration" => o.duration = Duration::from_secs(v.parse().with_context(ctx)?),
            "--mark" => o.mark = Some(PathBuf::from(v)),
            _ => bail!("unknown option {flag}"),
        }
    }
    ensure!(!o.target.is_unspecified(), "--target is required");
    ensure!(o.iphttps == 0 || o.ca.is_some(), "--iphttps needs --ca");
    Ok(Some(o))
}

async fn run(o: Opts) -> Result<()> {
    let marked = Arc::new(AtomicBool::new(false));
    let end = tokio::time::Instant::now() + o.duration;
    let tls = match &o.ca {
        Some(ca) => Some(gate64_io::tls::client_config(ca, None).context("--ca")?),
        None => None,
    };
    let total = o.teredo + o.iphttps;
    let tallies: Vec<Arc<Tally>> = (0..total).map(|_| Arc::new(Tally::default())).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, tally) in tallies.iter().enumerate() {
        let bind = o.bind.get(i % o.bind.len().max(1)).copied();
        let bind = IpAddr::V4(bind.unwrap_or(Ipv4Addr::UNSPECIFIED));
        let pinger = Pinger {
            target: o.target,
            ident: i as u16,
            interval: o.interval,
            end,
            marked: Arc::clone(&marked),
            tally: Arc::clone(tally),
        };
        if i < o.teredo {
            let server = SocketAddrV4::new(o.teredo_server, 3544);
            tasks.spawn(async move {
                let r = teredo_client(&pinger, bind, server, i as u64).await;
                pinger.finish(r);
            });
        } else {
            let (tls, server) = (tls.clone().context("no TLS")?, o.server);
            let (host, path) = (o.host.clone(), o.path.clone());
            tasks.spawn(async move {
                let r = iphttps_client(&pinger, bind, server, tls, &host, &path, i as u64).await;
                pinger.finish(r);
            });
        }
    }
    let reporter = tokio::spawn(watch(o.mark.clone(), marked, tallies.clone()));
    while tasks.join_next().await.is_some() {}
    reporter.abort();
    report(&tallies);
    Ok(())
}

/// Prints `all up N` once every client is up, and sets `marked` once the mark file exists.
async fn watch(mark: Option<PathBuf>, marked: Arc<AtomicBool>, tallies: Vec<Arc<Tally>>) {
    let mut announced = false;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !announced && tallies.iter().all(|t| t.up.load(Ordering::Relaxed)) {
            println!("all up {}", tallies.len());
            announced = true;
        }
        if mark.as_ref().is_some_and(|m| m.exists()) && !marked.swap(true, Ordering::Relaxed) {
            println!("mark seen");
        }
    }
}

fn report(tallies: &[Arc<Tally>]) {
    let (mut up, mut passing, mut ended, mut clean) = (0, 0, 0, 0);
    for (i, t) in tallies.iter().enumerate() {
        let after = t.replies_after_mark.load(Ordering::Relaxed);
        let end = t.ended.lock().unwrap_or_else(|e| e.into_inner()).clone();
        up += usize::from(t.up.load(Ordering::Relaxed));
        passing += usize::from(after > 0);
        ended += usize::from(end.is_some());
        clean += usize::from(t.closed_cleanly.load(Ordering::Relaxed));
        if after == 0 || end.is_some() {
            println!(
                "client {i}: up {} replies {} after mark {after} ended {end:?}",
                t.up.load(Ordering::Relaxed),
                t.replies.load(Ordering::Relaxed)
            );
        }
    }
    println!(
        "summary clients={} up={up} passing_after_mark={passing} ended={ended} closed_cleanly={clean}",
        tallies.len()
    );
}

/// What every client does once it has an address: echo requests to `target`, replies counted.
struct Pinger {
    target: Ipv6Addr,
    ident: u16,
    interval: Duration,
    end: tokio::time::Instant,
    marked: Arc<AtomicBool>,
    tally: Arc<Tally>,
}

impl Pinger {
    /// Echo request `seq` from `src`; the mark is encoded in the payload so that a reply is
    /// counted "after the mark" only for a request sent after it.
    fn request(&self, src: Ipv6Addr, seq: u16) -> Vec<u8> {
        let mut buf = vec![0u8; ipv6::HEADER_LEN + 8 + 8];
        let data = [u8::from(self.marked.load(Ordering::Relaxed)); 8];
        let n = icmpv6::emit_echo(&mut buf, true, &src, &self.target, self.ident, seq, &data)
            .unwrap_or(0);
        buf.truncate(n);
        buf
    }

    /// Counts `pkt` if it is a reply to one of this client's requests.
    fn receive(&self, pkt: &[u8]) {
        let Ok(p) = ipv6::Packet::new_checked(pkt) else {
            return;
        };
        let body = p.payload();
        let is_reply = p.next_header() == ipv6::NH_ICMPV6
            && body.len() >= 16
            && body[0] == icmpv6::TYPE_ECHO_REPLY
            && body[4..6] == self.ident.to_be_bytes();
        if is_reply {
            self.tally.replies.fetch_add(1, Ordering::Relaxed);
            if body[8] == 1 {
                self.tally
                    .replies_after_mark
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn finish(&self, r: Result<()>) {
        if let Err(e) = r {
            *self.tally.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("{e:#}"));
        }
    }
}

async fn teredo_client(p: &Pinger, bind: IpAddr, server: SocketAddrV4, seed: u64) -> Result<()> {
    let sock = tokio::net::UdpSocket::bind(SocketAddr::new(bind, 0)).await?;
    let mut client = Client::new(server, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut rs = [0u8; RS_LEN];
    let mut buf = vec![0u8; 2048];
    let mut next_ping = tokio::time::Instant::now();
    let mut seq = 0u16;
    loop {
        while let Some(n) = client.poll_transmit(Instant::now(), &mut rs) {
            sock.send_to(&rs[..n], server).await.context("RS")?;
        }
        if let (Some(me), true) = (client.address(), tokio::time::Instant::now() >= next_ping) {
            let pkt = p.request(me, seq);
            seq = seq.wrapping_add(1);
            if let Ok(to) = client.encapsulate(&pkt) {
                let _ = sock.send_to(&pkt, to).await;
            }
            next_ping += p.interval;
        }
        let wake = client
            .poll_timeout()
            .map_or(next_ping, tokio::time::Instant::from_std)
            .min(next_ping)
            .min(p.end);
        tokio::select! {
            r = sock.recv_from(&mut buf) => {
                let (n, _) = r.context("receive")?;
                match client.handle(Instant::now(), &buf[..n]) {
                    Ok(TeredoEvent::Qualified { .. }) => p.tally.up.store(true, Ordering::Relaxed),
                    Ok(TeredoEvent::Packet { offset, len }) => p.receive(&buf[offset..offset + len]),
                    _ => {}
                }
            }
            _ = tokio::time::sleep_until(wake) => {}
        }
        if tokio::time::Instant::now() >= p.end {
            return Ok(());
        }
    }
}

async fn iphttps_client(
    p: &Pinger,
    bind: IpAddr,
    server: SocketAddr,
    tls: Arc<tokio_rustls::rustls::ClientConfig>,
    host: &str,
    path: &str,
    seed: u64,
) -> Result<()> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(bind, 0)).context("bind")?;
    let tcp = sock.connect(server).await.context("connect")?;
    let name = ServerName::try_from(host.to_owned()).context("server name")?;
    let mut stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .context("TLS")?;
    let mut conn = ClientConnection::new(path, host, seed + 1);
    stream.write_all(&conn.request()).await?;
    stream.flush().await?;
    let mut rx = StreamBuffer::default();
    loop {
        let n = stream.read(rx.spare()).await.context("HTTP response")?;
        ensure!(n > 0, "closed before the HTTP response");
        rx.commit(n);
        if let Some(used) = conn.handle_input(Instant::now(), rx.data())? {
            rx.consume(used);
            break;
        }
    }
    let deframer = Deframer::default();
    let mut rs = [0u8; gate64_iphttps::client::RS_LEN];
    let mut next_ping = tokio::time::Instant::now();
    let mut seq = 0u16;
    loop {
        while let Some(pkt) = rx.next_packet(&deframer)? {
            match conn.handle_packet(Instant::now(), pkt) {
                Ok(HttpsEvent::Configured { .. }) => p.tally.up.store(true, Ordering::Relaxed),
                Ok(HttpsEvent::Packet) => p.receive(pkt),
                _ => {}
            }
        }
        while let Some(n) = conn.poll_transmit(Instant::now(), &mut rs) {
            stream.write_all(&rs[..n]).await.context("RS")?;
            stream.flush().await.context("RS")?;
        }
        if let (Some(me), true) = (conn.address(), tokio::time::Instant::now() >= next_ping) {
            stream
                .write_all(&p.request(me, seq))
                .await
                .context("write")?;
            stream.flush().await.context("write")?;
            seq = seq.wrapping_add(1);
            next_ping += p.interval;
        }
        let wake = conn
            .poll_timeout()
            .map_or(next_ping, tokio::time::Instant::from_std)
            .min(next_ping)
            .min(p.end);
        tokio::select! {
            r = stream.read(rx.spare()) => match r {
                Ok(0) => {
                    // close_notify from the server: a clean end (e.g. its shutdown).
                    p.tally.closed_cleanly.store(true, Ordering::Relaxed);
                    bail!("closed by the server (close_notify)");
                }
                Ok(n) => rx.commit(n),
                Err(e) => bail!("read: {e}"),
            },
            _ = tokio::time::sleep_until(wake) => {}
        }
        if tokio::time::Instant::now() >= p.end {
            let _ = stream.shutdown().await;
            return Ok(());
        }
    }
}
