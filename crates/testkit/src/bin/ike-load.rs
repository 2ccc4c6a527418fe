//! `ike-load`: IKEv2 handshakes per second and SAs held, from many emulated clients.
//!
//! Each emulated client runs two sans-IO [`Initiator`]s, as a DirectAccess client does: the
//! `infrastructure` tunnel and the `intranet` tunnel, each its own IKE SA and child SA, with
//! the client's own certificate (issued here under the CA of `make-ca`, so the responder sees
//! distinct identities and INITIAL_CONTACT replaces nothing). Initiators are spread over
//! UDP sockets on the `--bind` addresses (one ephemeral port per socket, `--sockets` per
//! address); datagrams are told apart by the initiator's SPI. At most `--window` handshakes
//! are in flight, and at most `--per-socket` per socket (a responder caps half-open SAs and
//! IKE_AUTH verifications in flight per source address; gate64 caps the verifications per /48
//! as well, so `--bind` addresses in distinct /48s keep a run within its caps). Prints `established=N failed=N elapsed_s=S handshakes_per_s=R` once
//! every handshake has finished, then holds the SAs (answering liveness checks) until
//! `--hold-secs` have passed, or SIGINT / SIGTERM with `--hold-secs 0`, and prints
//! `done held=N`.
//!
//!   ike-load make-ca DIR     writes DIR/clients-ca.pem and DIR/clients-ca.key
//!   ike-load run [options]   see USAGE

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use gate64_ike::auth::{Credentials, TrustAnchors};
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::initiator::{Initiator, InitiatorConfig, InitiatorEvent};
use gate64_ike::keys::{Group, KeyExchange};
use gate64_ike::message::TrafficSelector;
use ipnet::Ipv6Net;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio::net::UdpSocket;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

const USAGE: &str = "\
usage: ike-load make-ca DIR
       ike-load run --server ADDR --server-ca FILE --ca-dir DIR --bind A,B,... [options]
  --server ADDR        the responder's IPv6 address (IKE on UDP 500)         (required)
  --port N             the responder's IKE port                           (default 500)
  --server-ca FILE     PEM CA that signed the responder's certificate         (required)
  --ca-dir DIR         the clients' CA from `ike-load make-ca DIR`             (required)
  --bind A,B,...       local IPv6 source addresses                             (required)
  --sockets N          UDP sockets (ephemeral ports) per source address     (default 4)
  --clients N          emulated clients, two IKE SAs each                 (default 100)
  --window N           handshakes in flight at once                        (default 16)
  --per-socket N       handshakes in flight per socket at most              (default 2)
  --group 19|31|14     Diffie-Hellman group of the first KE payload        (default 19)
                       (ECP-256, Curve25519 or MODP-2048; 19 and 31 are offered too)
  --kex-reuse N        each socket's key-exchange private value serves N handshakes
                       before a new one is made: saves the generator a key generation
                       per handshake, at the cost of forward secrecy between those SAs
                       (a test tool's; the responder's own value is fresh each time)
                                                                              (default 1)
  --infrastructure P   remote selector of the infrastructure tunnel (default fd00:c0::53/128)
  --intranet P         remote selector of the intranet tunnel       (default fd00:c0::/64)
  --hold-secs S        hold the SAs this long after the last handshake;
                       0 = until SIGINT/SIGTERM                              (default 0)
  -h, --help           this text

Shortcuts that make the generator cheaper without changing what the responder sees: each
client's certificate and key are loaded once, before the clock starts, and shared by both of
its tunnels; the responder's certificate chain is verified once per run (its signatures and
parsing; validity, the AUTH signature of every IKE_AUTH response and the identity are checked
every time).";

/// The CA's subject; `make-ca` and `run` must build the same issuer from it.
const CA_NAME: &str = "gate64 ike-load clients CA";
/// Largest IKE datagram read.
const MAX_DATAGRAM: usize = 65_535;
/// The RFC 3948 non-ESP marker before IKE messages on port 4500.
const NON_ESP_MARKER: [u8; 4] = [0; 4];
/// How often a socket's task looks at its initiators' timers at least.
const TICK: Duration = Duration::from_millis(50);

#[derive(Debug)]
struct Opts {
    server: SocketAddr,
    server_ca: PathBuf,
    ca_dir: PathBuf,
    bind: Vec<Ipv6Addr>,
    sockets: usize,
    clients: usize,
    window: usize,
    per_socket: usize,
    group: Group,
    kex_reuse: usize,
    infrastructure: Ipv6Net,
    intranet: Ipv6Net,
    hold: Duration,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("make-ca") => match args.get(1) {
            Some(dir) => make_ca(Path::new(dir)).map(|()| true),
            None => Err(anyhow::anyhow!("make-ca needs a directory")),
        },
        Some("run") => match parse(args[1..].iter().cloned()) {
            Ok(opts) => tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("tokio runtime")
                .and_then(|rt| rt.block_on(run(opts))),
            Err(e) => Err(e),
        },
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => Err(anyhow::anyhow!("expected make-ca or run")),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("ike-load: {e:#}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Opts> {
    let (mut server, mut port, mut server_ca, mut ca_dir) = (None, 500u16, None, None);
    let mut o = Opts {
        server: SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
        server_ca: PathBuf::new(),
        ca_dir: PathBuf::new(),
        bind: Vec::new(),
        sockets: 4,
        clients: 100,
        window: 16,
        per_socket: 2,
        group: Group::Ecp256,
        kex_reuse: 1,
        infrastructure: "fd00:c0::53/128".parse()?,
        intranet: "fd00:c0::/64".parse()?,
        hold: Duration::ZERO,
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        let ctx = || format!("{flag} {value}");
        match flag.as_str() {
            "--server" => server = Some(value.parse::<Ipv6Addr>().with_context(ctx)?),
            "--port" => port = value.parse().with_context(ctx)?,
            "--server-ca" => server_ca = Some(PathBuf::from(&value)),
            "--ca-dir" => ca_dir = Some(PathBuf::from(&value)),
            "--bind" => {
                for a in value.split(',').filter(|a| !a.is_empty()) {
                    o.bind.push(a.trim().parse().with_context(ctx)?);
                }
            }
            "--sockets" => o.sockets = value.parse().with_context(ctx)?,
            "--clients" => o.clients = value.parse().with_context(ctx)?,
            "--window" => o.window = value.parse().with_context(ctx)?,
            "--per-socket" => o.per_socket = value.parse().with_context(ctx)?,
            "--group" => {
                o.group = match value.as_str() {
                    "19" => Group::Ecp256,
                    "31" => Group::Curve25519,
                    "14" => Group::Modp2048,
                    _ => bail!("{flag} {value}: 19, 31 or 14"),
                }
            }
            "--kex-reuse" => o.kex_reuse = value.parse().with_context(ctx)?,
            "--infrastructure" => o.infrastructure = value.parse().with_context(ctx)?,
            "--intranet" => o.intranet = value.parse().with_context(ctx)?,
            "--hold-secs" => {
                o.hold = Duration::try_from_secs_f64(value.parse().with_context(ctx)?)
                    .with_context(ctx)?;
            }
            _ => bail!("unknown option {flag}"),
        }
    }
    o.server = SocketAddr::from((server.context("--server is required")?, port));
    o.server_ca = server_ca.context("--server-ca is required")?;
    o.ca_dir = ca_dir.context("--ca-dir is required")?;
    ensure!(!o.bind.is_empty(), "--bind needs at least one address");
    ensure!(
        o.sockets > 0 && o.window > 0 && o.per_socket > 0 && o.kex_reuse > 0,
        "--sockets, --window, --per-socket and --kex-reuse must be at least 1"
    );
    Ok(o)
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

fn make_ca(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let key = KeyPair::generate().context("CA key")?;
    let cert = ca_params().self_signed(&key).context("CA certificate")?;
    std::fs::write(dir.join("clients-ca.pem"), cert.pem())?;
    std::fs::write(dir.join("clients-ca.key"), key.serialize_pem())?;
    Ok(())
}

/// A certificate and key for each client, loaded: both of its tunnels share them.
fn issue_clients(ca_dir: &Path, count: usize) -> Result<Vec<Credentials>> {
    let ca_key = std::fs::read_to_string(ca_dir.join("clients-ca.key"))
        .with_context(|| format!("{}/clients-ca.key", ca_dir.display()))?;
    let issuer = Issuer::new(ca_params(), KeyPair::from_pem(&ca_key).context("CA key")?);
    (0..count)
        .map(|i| {
            let key = KeyPair::generate().context("client key")?;
            let name = format!("client-{i}.load.gate64.lab");
            let mut params = CertificateParams::new(vec![name.clone()]).context("SAN")?;
            params.distinguished_name.push(DnType::CommonName, name);
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            let cert = params.signed_by(&key, &issuer).context("client cert")?;
            Credentials::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
                .context("client credentials")
        })
        .collect()
}

/// One handshake to make: client index and tunnel.
#[derive(Debug, Clone, Copy)]
struct Job {
    client: usize,
    tunnel: TunnelKind,
}

/// What a socket's task reports when its handshakes are finished.
#[derive(Debug, Default)]
struct Tally {
    established: u64,
    failed: u64,
    reasons: BTreeMap<String, u64>,
}

/// Everything a socket's task needs to build initiators.
struct Shared {
    certs: Vec<Credentials>,
    anchors: TrustAnchors,
    opts: Opts,
    window: Arc<Semaphore>,
    start: Instant,
}

async fn run(opts: Opts) -> Result<bool> {
    let anchors_pem =
        std::fs::read(&opts.server_ca).with_context(|| format!("{}", opts.server_ca.display()))?;
    let anchors = TrustAnchors::from_pem(&anchors_pem).context("--server-ca")?;
    let t = Instant::now();
    let certs = issue_clients(&opts.ca_dir, opts.clients)?;
    println!(
        "issued {} client certificates in {:.1} s",
        certs.len(),
        t.elapsed().as_secs_f64()
    );
    let mut sockets = Vec::new();
    for addr in &opts.bind {
        for _ in 0..opts.sockets {
            let s = UdpSocket::bind(SocketAddr::from((*addr, 0)))
                .await
                .with_context(|| format!("bind [{addr}]:0"))?;
            sockets.push(s);
        }
    }
    // Both tunnels of a client from one socket (one source address and port, as a client).
    let mut jobs: Vec<Vec<Job>> = vec![Vec::new(); sockets.len()];
    for client in 0..opts.clients {
        for tunnel in [TunnelKind::Infrastructure, TunnelKind::Intranet] {
            jobs[client % sockets.len()].push(Job { client, tunnel });
        }
    }
    let shared = Arc::new(Shared {
        certs,
        anchors,
        window: Arc::new(Semaphore::new(opts.window)),
        opts,
        start: Instant::now(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for (socket, jobs) in sockets.into_iter().zip(jobs) {
        let (shared, done, stop) = (shared.clone(), done_tx.clone(), stop_rx.clone());
        tasks.push(tokio::spawn(drive_socket(socket, jobs, shared, done, stop)));
    }
    drop(done_tx);
    let mut total = Tally::default();
    let mut last_done = Duration::ZERO;
    for _ in 0..tasks.len() {
        let Some((tally, at)) = done_rx.recv().await else {
            break;
        };
        total.established += tally.established;
        total.failed += tally.failed;
        for (k, v) in tally.reasons {
            *total.reasons.entry(k).or_default() += v;
        }
        last_done = last_done.max(at);
    }
    let secs = last_done.as_secs_f64();
    let rate = if secs > 0.0 {
        total.established as f64 / secs
    } else {
        0.0
    };
    println!(
        "established={} failed={} elapsed_s={secs:.2} handshakes_per_s={rate:.1} reasons={:?}",
        total.established, total.failed, total.reasons
    );
    let _ = std::io::stdout().flush();
    hold(shared.opts.hold).await;
    let _ = stop_tx.send(true);
    let mut held = 0;
    for t in tasks {
        held += t.await.context("socket task")?;
    }
    println!("done held={held}");
    Ok(total.failed == 0)
}

async fn hold(hold: Duration) {
    let signals = async {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            _ => std::future::pending().await,
        }
    };
    if hold.is_zero() {
        signals.await;
    } else {
        tokio::select! {
            _ = signals => {}
            _ = tokio::time::sleep(hold) => {}
        }
    }
}

/// An initiator and, while its handshake runs, its place in the window.
struct Slot {
    initiator: Initiator,
    permit: Option<OwnedSemaphorePermit>,
}

/// Runs `jobs` from `socket`; reports its tally on `done` when they are finished, then answers
/// for the established SAs until `stop`. Returns how many SAs it held to the end.
async fn drive_socket(
    socket: UdpSocket,
    mut jobs: Vec<Job>,
    shared: Arc<Shared>,
    done: mpsc::UnboundedSender<(Tally, Duration)>,
    mut stop: watch::Receiver<bool>,
) -> usize {
    jobs.reverse();
    let mut slots: HashMap<u64, Slot> = HashMap::new();
    let mut tally = Tally::default();
    let mut in_flight = 0usize;
    let mut reported = false;
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut kex = KexReuse::default();
    let Ok(local) = socket.local_addr() else {
        return 0;
    };
    loop {
        if !reported && jobs.is_empty() && in_flight == 0 {
            reported = true;
            let _ = done.send((std::mem::take(&mut tally), shared.start.elapsed()));
        }
        let may_start = in_flight < shared.opts.per_socket && !jobs.is_empty();
        tokio::select! {
            // Waiting here (not polling) keeps the window full: the semaphore wakes the next
            // socket as soon as a handshake finishes.
            permit = shared.window.clone().acquire_owned(), if may_start => {
                if let (Ok(permit), Some(job)) = (permit, jobs.pop()) {
                    match start(&shared, job, local, &mut kex) {
                        Ok((spi, initiator, (to, first))) => {
                            send(&socket, to, &first).await;
                            let permit = Some(permit);
                            slots.insert(spi, Slot { initiator, permit });
                            in_flight += 1;
                        }
                        Err(e) => count_failure(&mut tally, &format!("{e:#}")),
                    }
                }
            }
            r = socket.recv_from(&mut buf) => {
                if let Ok((n, from)) = r {
                    on_datagram(&socket, &mut slots, &buf[..n], from).await;
                }
            }
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.changed() => return slots.len(),
        }
        let now = Instant::now();
        let mut finished = Vec::new();
        for (spi, slot) in slots.iter_mut() {
            if slot.permit.is_none() {
                continue;
            }
            if slot.initiator.poll_timeout().is_some_and(|t| t <= now) {
                slot.initiator.handle_timeout(now);
                send_all(&socket, &mut slot.initiator).await;
            }
            match slot.initiator.poll_event() {
                Some(InitiatorEvent::Established { .. }) => {
                    tally.established += 1;
                    slot.permit = None;
                    in_flight -= 1;
                }
                Some(InitiatorEvent::Failed(e)) => {
                    count_failure(&mut tally, &e.to_string());
                    finished.push(*spi);
                    in_flight -= 1;
                }
                _ => {}
            }
        }
        for spi in finished {
            slots.remove(&spi);
        }
    }
}

fn count_failure(tally: &mut Tally, reason: &str) {
    tally.failed += 1;
    *tally.reasons.entry(reason.to_owned()).or_default() += 1;
}

/// A socket's key-exchange private value and how many handshakes it has served
/// (`--kex-reuse`).
#[derive(Default)]
struct KexReuse {
    current: Option<(Arc<KeyExchange>, usize)>,
}

impl KexReuse {
    /// The value for the next handshake: the current one until it has served `limit`.
    fn next(&mut self, group: Group, limit: usize) -> Result<Arc<KeyExchange>> {
        match &mut self.current {
            Some((kex, used)) if *used < limit => {
                *used += 1;
                Ok(kex.clone())
            }
            _ => {
                let kex = Arc::new(KeyExchange::generate(group).context("key exchange")?);
                self.current = Some((kex.clone(), 1));
                Ok(kex)
            }
        }
    }
}

/// A started initiator for `job`, its SPI (from its IKE_SA_INIT header, RFC 7296 §3.1) and
/// that IKE_SA_INIT, for the caller to send.
fn start(
    shared: &Shared,
    job: Job,
    local: SocketAddr,
    kex: &mut KexReuse,
) -> Result<(u64, Initiator, (SocketAddr, Vec<u8>))> {
    let credentials = shared
        .certs
        .get(job.client)
        .context("no certificate for the client")?
        .clone();
    let remote_ts = match job.tunnel {
        TunnelKind::Infrastructure => shared.opts.infrastructure,
        _ => shared.opts.intranet,
    };
    let config = InitiatorConfig {
        credentials,
        anchors: shared.anchors.clone(),
        group: shared.opts.group,
        request_address: true,
        tsi: vec![TrafficSelector::range(
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::from(u128::MAX)),
        )],
        tsr: vec![TrafficSelector::range(
            IpAddr::V6(remote_ts.network()),
            IpAddr::V6(remote_ts.broadcast()),
        )],
        tunnel: job.tunnel,
        retransmit_after: Duration::from_secs(2),
        max_retransmits: 4,
        integrity_only: false,
    };
    let now = Instant::now();
    let kex = kex.next(shared.opts.group, shared.opts.kex_reuse)?;
    let mut initiator = Initiator::with_key_exchange(
        config,
        kex,
        now,
        SystemTime::now(),
        local,
        shared.opts.server,
    )
    .context("initiator")?;
    initiator.start(now);
    let Some((_, to, first)) = initiator.poll_transmit() else {
        bail!("no IKE_SA_INIT to send");
    };
    let spi = first
        .get(..8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .context("IKE_SA_INIT shorter than its header")?;
    Ok((u64::from_be_bytes(spi), initiator, (to, first)))
}

async fn send_all(socket: &UdpSocket, initiator: &mut Initiator) {
    while let Some((_, to, bytes)) = initiator.poll_transmit() {
        send(socket, to, &bytes).await;
    }
}

async fn send(socket: &UdpSocket, to: SocketAddr, bytes: &[u8]) {
    // RFC 3948 §2.2: on port 4500 IKE carries the non-ESP marker.
    let sent = if to.port() == 4500 {
        socket
            .send_to(&[&NON_ESP_MARKER[..], bytes].concat(), to)
            .await
    } else {
        socket.send_to(bytes, to).await
    };
    if let Err(e) = sent {
        eprintln!("ike-load: send to {to}: {e}");
    }
}

async fn on_datagram(
    socket: &UdpSocket,
    slots: &mut HashMap<u64, Slot>,
    datagram: &[u8],
    from: SocketAddr,
) {
    let ike = match datagram {
        [0xff] => return,
        [0, 0, 0, 0, ike @ ..] if from.port() == 4500 => ike,
        _ if from.port() == 4500 => return,
        ike => ike,
    };
    let Some(spi) = ike.get(..8).and_then(|s| <[u8; 8]>::try_from(s).ok()) else {
        return;
    };
    if let Some(slot) = slots.get_mut(&u64::from_be_bytes(spi)) {
        slot.initiator.handle(Instant::now(), ike);
        send_all(socket, &mut slot.initiator).await;
    }
}
