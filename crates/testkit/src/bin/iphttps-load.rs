//! `iphttps-load`: opens many concurrent IP-HTTPS connections to a server and holds them.
//!
//! Each connection: TCP connect, TLS (rustls, trusting `--ca`), the POST request of
//! [MS-IPHTTPS] §3.1.5.2, read until the response head; a `200` counts as established, and the
//! connection is then held open (whatever the server sends, e.g. router advertisements, is
//! read and discarded; with `--stop-reading` nothing is read after the response head, as a
//! client that stopped reading) until `--hold-secs` have passed after the last attempt finished (or
//! SIGINT / SIGTERM). Prints a summary line `established=N failed=N ...` once every attempt
//! has finished, and `done held=N` when it stops.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gate64_iphttps::http;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::sync::{Semaphore, watch};

const USAGE: &str = "\
usage: iphttps-load --url https://HOST[:PORT]/PATH --ca CA.pem [options]
  --url URL            IP-HTTPS URL                                   (required)
  --ca FILE            PEM CA bundle that signed the server certificate (required)
  --count N            connections to open                            (default 10000)
  --rate N             new connections per second at most, 0 = unlimited (default 0)
  --concurrency N      connection attempts in flight at once          (default 256)
  --hold-secs S        hold the connections this long once all attempts finished;
                       0 = until SIGINT/SIGTERM                       (default 30)
  --timeout S          per-attempt limit (TCP + TLS + HTTP head)      (default 30)
  --bind A,B,...       local source addresses, used round-robin (spreads ephemeral ports)
  --stop-reading       never read after the response head (a client that stopped reading)
  -h, --help           this text";

#[derive(Debug)]
struct Opts {
    host: String,
    port: u16,
    path: String,
    ca: PathBuf,
    count: u64,
    rate: f64,
    concurrency: usize,
    hold: Duration,
    timeout: Duration,
    bind: Vec<IpAddr>,
    stop_reading: bool,
}

/// Shared counters.
#[derive(Default)]
struct Counters {
    established: AtomicU64,
    failed: AtomicU64,
    /// Established, then closed by the server (or an error) while held.
    lost: AtomicU64,
    /// Failure reasons (first word of the error) and how often.
    reasons: Mutex<BTreeMap<String, u64>>,
    /// One full example per reason.
    examples: Mutex<BTreeMap<String, String>>,
    /// Time from the start to the last successful establishment, microseconds.
    last_established_us: AtomicU64,
}

fn main() -> ExitCode {
    let opts = match parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("iphttps-load: {e:#}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("iphttps-load: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(opts)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("iphttps-load: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Opts>> {
    let mut url = None;
    let mut o = Opts {
        host: String::new(),
        port: 443,
        path: String::new(),
        ca: PathBuf::new(),
        count: 10_000,
        rate: 0.0,
        concurrency: 256,
        hold: Duration::from_secs(30),
        timeout: Duration::from_secs(30),
        bind: Vec::new(),
        stop_reading: false,
    };
    let mut ca = None;
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        if flag == "--stop-reading" {
            o.stop_reading = true;
            continue;
        }
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        let ctx = || format!("{flag} {value}");
        match flag.as_str() {
            "--url" => url = Some(value),
            "--ca" => ca = Some(PathBuf::from(value)),
            "--count" => o.count = value.parse().with_context(ctx)?,
            "--rate" => o.rate = value.parse().with_context(ctx)?,
            "--concurrency" => o.concurrency = value.parse().with_context(ctx)?,
            "--hold-secs" => {
                o.hold = Duration::try_from_secs_f64(value.parse().with_context(ctx)?)
                    .with_context(ctx)?;
            }
            "--timeout" => {
                o.timeout = Duration::try_from_secs_f64(value.parse().with_context(ctx)?)
                    .with_context(ctx)?;
            }
            "--bind" => {
                for a in value.split(',').filter(|a| !a.is_empty()) {
                    o.bind.push(a.trim().parse().with_context(ctx)?);
                }
            }
            _ => bail!("unknown option {flag}"),
        }
    }
    let url = url.context("--url is required")?;
    o.ca = ca.context("--ca is required")?;
    (o.host, o.port, o.path) = parse_url(&url)?;
    ensure!(o.concurrency > 0, "--concurrency must be at least 1");
    ensure!(o.rate >= 0.0 && o.rate.is_finite(), "--rate must be >= 0");
    Ok(Some(o))
}

/// `https://host[:port]/path` (IPv6 hosts in brackets) → (host, port, path).
fn parse_url(url: &str) -> Result<(String, u16, String)> {
    let rest = url
        .strip_prefix("https://")
        .with_context(|| format!("--url {url}: must start with https://"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_owned()),
        None => (rest, http::DEFAULT_PATH.to_owned()),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .with_context(|| format!("--url {url}: unclosed ["))?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().with_context(|| format!("--url {url}: port"))?,
            None => 443,
        };
        (h.to_owned(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (
                h.to_owned(),
                p.parse().with_context(|| format!("--url {url}: port"))?,
            ),
            None => (authority.to_owned(), 443),
        }
    };
    ensure!(!host.is_empty(), "--url {url}: no host");
    Ok((host, port, path))
}

async fn run(o: Opts) -> Result<bool> {
    let nofile = gate64_sys::resource::raise_nofile(o.count + 64);
    if nofile < o.count + 64 {
        eprintln!(
            "iphttps-load: warning: RLIMIT_NOFILE is {nofile}, fewer than --count {} + 64; \
             raise it (ulimit -Hn / -n)",
            o.count
        );
    }
    let tls = gate64_io::tls::client_config(&o.ca, None)
        .with_context(|| format!("--ca {}", o.ca.display()))?;
    let connector = tokio_rustls::TlsConnector::from(tls);
    let server_name = ServerName::try_from(o.host.clone())
        .with_context(|| format!("server name {:?}", o.host))?;
    let target: SocketAddr = tokio::net::lookup_host((o.host.as_str(), o.port))
        .await
        .with_context(|| format!("resolving {}", o.host))?
        .next()
        .with_context(|| format!("{} has no address", o.host))?;
    let request = Arc::new(http::request(&o.path, &o.host));
    println!(
        "iphttps-load: {} connections to {target} (https://{}:{}{}), concurrency {}, rate {}, \
         nofile {nofile}, bind {:?}",
        o.count,
        o.host,
        o.port,
        o.path,
        o.concurrency,
        if o.rate > 0.0 {
            format!("{}/s", o.rate)
        } else {
            "unlimited".to_owned()
        },
        o.bind
    );

    let counters = Arc::new(Counters::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let in_flight = Arc::new(Semaphore::new(o.concurrency));
    let start = Instant::now();
    let tick = (o.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / o.rate));

    // Progress, once a second, to stderr.
    let progress = {
        let c = Arc::clone(&counters);
        let total = o.count;
        tokio::spawn(async move {
            let mut last = 0;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let (e, f) = (
                    c.established.load(Ordering::Relaxed),
                    c.failed.load(Ordering::Relaxed),
                );
                if e + f != last {
                    eprintln!(
                        "[{:6.1}s] established {e}, failed {f}, lost {} of {total}",
                        start.elapsed().as_secs_f64(),
                        c.lost.load(Ordering::Relaxed)
                    );
                    last = e + f;
                }
            }
        })
    };

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..o.count {
        if let Some(t) = tick {
            tokio::time::sleep_until((start + t.mul_f64(i as f64)).into()).await;
        }
        let permit = Arc::clone(&in_flight)
            .acquire_owned()
            .await
            .context("semaphore closed")?;
        let bind = (!o.bind.is_empty()).then(|| o.bind[i as usize % o.bind.len()]);
        let (connector, name, request, counters, stop) = (
            connector.clone(),
            server_name.clone(),
            Arc::clone(&request),
            Arc::clone(&counters),
            stop_rx.clone(),
        );
        let (timeout, stop_reading) = (o.timeout, o.stop_reading);
        tasks.spawn(async move {
            let est = tokio::time::timeout(
                timeout,
                establish(&connector, name, target, bind, &request, stop_reading),
            )
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("timeout after {timeout:?}")));
            // Count before the permit goes back: all permits back = all attempts counted.
            match est {
                Ok(stream) => {
                    counters.established.fetch_add(1, Ordering::Relaxed);
                    counters
                        .last_established_us
                        .fetch_max(start.elapsed().as_micros() as u64, Ordering::Relaxed);
                    drop(permit);
                    if !hold(stream, stop, stop_reading).await {
                        counters.lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => {
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                    let msg = format!("{e:#}");
                    let key: String = msg.split(':').next().unwrap_or("").to_owned();
                    *counters
                        .reasons
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(key.clone())
                        .or_default() += 1;
                    counters
                        .examples
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(key)
                        .or_insert(msg);
                    drop(permit);
                }
            }
        });
        // Reap finished tasks as we go so the set does not grow with failures.
        while tasks.try_join_next().is_some() {}
    }
    // Every attempt has finished once all permits are back.
    let _all = in_flight
        .acquire_many(o.concurrency as u32)
        .await
        .context("semaphore closed")?;
    let attempts_done = start.elapsed();
    progress.abort();

    let established = counters.established.load(Ordering::Relaxed);
    let failed = counters.failed.load(Ordering::Relaxed);
    let t_est = Duration::from_micros(counters.last_established_us.load(Ordering::Relaxed));
    let cps = if t_est.is_zero() {
        0.0
    } else {
        established as f64 / t_est.as_secs_f64()
    };
    println!(
        "established={established} failed={failed} elapsed={:.2}s establish_time={:.2}s \
         conns_per_sec={cps:.0}",
        attempts_done.as_secs_f64(),
        t_est.as_secs_f64()
    );
    for (reason, n) in counters
        .reasons
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        let ex = counters
            .examples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(reason)
            .cloned()
            .unwrap_or_default();
        println!("  failed {n}x: {ex}");
    }
    let _ = std::io::stdout().flush();

    // Hold.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("SIGTERM handler")?;
    let hold_done = async {
        if o.hold.is_zero() {
            std::future::pending::<()>().await;
        } else {
            tokio::time::sleep(o.hold).await;
        }
    };
    tokio::select! {
        _ = hold_done => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let lost = counters.lost.load(Ordering::Relaxed);
    println!(
        "done held={} lost={lost} after {:.1}s",
        established.saturating_sub(lost),
        start.elapsed().as_secs_f64()
    );
    let _ = std::io::stdout().flush();
    let _ = stop_tx.send(true);
    // Close politely but do not wait long for 10k close_notify round trips.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    Ok(failed == 0 && lost == 0)
}

type Stream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// TCP + TLS + request + response head. Fails unless the status is 200.
async fn establish(
    connector: &tokio_rustls::TlsConnector,
    name: ServerName<'static>,
    target: SocketAddr,
    bind: Option<IpAddr>,
    request: &[u8],
    stop_reading: bool,
) -> Result<Stream> {
    let sock = if target.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .context("socket")?;
    if stop_reading {
        // A small window: the server's writes stall after little data, as towards a client
        // on a slow or stuck link.
        let _ = sock.set_recv_buffer_size(4096);
    }
    if let Some(addr) = bind {
        sock.bind(SocketAddr::new(addr, 0))
            .with_context(|| format!("bind {addr}"))?;
    }
    let tcp = sock.connect(target).await.context("connect")?;
    let _ = tcp.set_nodelay(true);
    let mut tls = connector.connect(name, tcp).await.context("tls")?;
    tls.write_all(request).await.context("write request")?;
    tls.flush().await.context("write request")?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = tls.read(&mut chunk).await.context("read response")?;
        ensure!(n > 0, "closed before the response head");
        buf.extend_from_slice(&chunk[..n]);
        match http::parse_response(&buf) {
            Ok(Some((200, _))) => return Ok(tls),
            Ok(Some((code, _))) => bail!("http: status {code}"),
            Ok(None) => {}
            Err(e) => bail!("http: bad response head: {e}"),
        }
    }
}

/// Reads and discards until `stop`; false when the connection ended before that. With
/// `stop_reading`, only waits (the socket's receive buffer fills and stays full).
async fn hold(mut tls: Stream, mut stop: watch::Receiver<bool>, stop_reading: bool) -> bool {
    if stop_reading {
        let _ = stop.changed().await;
        return true;
    }
    let mut buf = [0u8; 2048];
    loop {
        tokio::select! {
            r = tls.read(&mut buf) => match r {
                Ok(0) | Err(_) => return *stop.borrow(),
                Ok(_) => {}
            },
            _ = stop.changed() => {
                let _ = tokio::time::timeout(Duration::from_millis(500), tls.shutdown()).await;
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("https://198.51.100.1/IPHTTPS").unwrap(),
            ("198.51.100.1".into(), 443, "/IPHTTPS".into())
        );
        assert_eq!(
            parse_url("https://gate:8443/x").unwrap(),
            ("gate".into(), 8443, "/x".into())
        );
        assert_eq!(
            parse_url("https://[2001:db8::1]:444/IPTLS").unwrap(),
            ("2001:db8::1".into(), 444, "/IPTLS".into())
        );
        assert_eq!(parse_url("https://h").unwrap().2, "/IPHTTPS");
        assert!(parse_url("http://h/x").is_err());
    }
}
