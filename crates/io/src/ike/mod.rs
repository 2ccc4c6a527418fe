//! The IKE driver: UDP sockets on `[endpoint]:500` and `[endpoint]:4500`, the sans-IO
//! [`Responder`] with its timers, and an event sink. No protocol decisions are made here.
//!
//! On port 4500 IKE messages carry the 4-byte zero non-ESP marker (RFC 3948 §2.2): it is
//! stripped before [`Responder::handle`] and added to every datagram sent from 4500. A
//! one-byte 0xFF NAT-keepalive (RFC 3948 §2.3) is ignored; ESP (a non-zero first word) is the
//! dataplane's and should never reach this socket, so it is counted and dropped.
//!
//! Each turn of the loop reads one socket in `recvmmsg` batches, at most 256 datagrams and
//! no new batch after 20 ms (`turn.rs`), then runs the responder's timers that are due and
//! the auth threads' verdicts that are ready, whatever woke it, so a flood of input cannot
//! hold back retransmissions and liveness checks. Every datagram passes the per-source
//! shedding of `shed.rs` before the responder sees it: one address flooding IKE_SA_INIT
//! cannot keep the socket's receive buffer full, where the kernel would drop every client's
//! IKE alike (the flood test: `tests/e2e/ipsec_flood.rs`). The buffers are large
//! ([`SOCKET_BUFFER`]) so a burst waits for the next read instead of being dropped.
//! What the kernel still drops because a buffer was full is read after each drain (the
//! socket's drop count, SO_MEMINFO), counted ([`IkeSnapshot::socket_drops`]) and reported to
//! the responder ([`Responder::note_input_overflow`]): answers to its liveness checks may
//! have been among the drops, so it does not yet declare those peers dead.
//!
//! With [`IkeDriver::with_auth_threads`], IKE_SA_INIT's key exchange and IKE_AUTH's chain
//! building and signature checks run on a bounded pool of threads beside the responder
//! (`auth_pool.rs`), so IKE set-up uses every core and those steps do not hold up liveness
//! checks or established SAs; what the pool has no room for is shed and counted.
//!
//! Events go to the caller's sink (the daemon installs child SAs into `gate64_esp::SaDb` and
//! updates metrics there); [`IkeStatus`] holds a snapshot of the IKE SAs for `gate64 status`,
//! refreshed after every datagram or timer that changed something, and the shed counts.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket as StdUdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gate64_dataplane::IkeShedReason;
use gate64_ike::responder::{DisconnectTarget, Event, IkeSaInfo, Responder, Stats};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;

mod auth_pool;
pub mod eap_relay;
mod listener;
mod native;
pub mod ocsp;
mod shed;
mod turn;

pub use native::NativeEsp;

use crate::sys::{self, BATCH, ReceivedFrom};
use auth_pool::AuthPool;
use listener::{Listener, readable};
use shed::Shedder;
use turn::Turn;

use gate64_ike::udp_encap::{self, Encapsulated, NON_ESP_MARKER};
pub use gate64_ike::udp_encap::{IKE_PORT, NAT_T_PORT};
/// The status snapshot is refreshed at least this often while datagrams flow.
const STATUS_REFRESH: Duration = Duration::from_secs(1);
/// Largest datagram read.
const MAX_DATAGRAM: usize = 65_535;
/// Socket buffers asked for (with CAP_NET_ADMIN past `rmem_max`): about 8,000 small datagrams,
/// a fifth of a second of the netns test's flood, wait for the next read rather than being
/// dropped by the kernel while the responder works.
const SOCKET_BUFFER: usize = 8 << 20;
/// `[ipsec] ike_packets_per_source_per_sec`'s default, for drivers built without a config.
pub const DEFAULT_PACKETS_PER_SOURCE_PER_SEC: u32 = 1_000;

/// What `gate64 status` reads: the IKE SAs, the half-open count and the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IkeSnapshot {
    /// Established IKE SAs (`gate64_ipsec_mmsa`). The SAs themselves are listed on demand
    /// ([`IkeControl::ike_sas`]): a snapshot of every SA, copied on each change, cost O(N)
    /// per handshake and ~1 KB of memory per client.
    pub established: usize,
    /// Half-open IKE SAs (`gate64_ike_half_open`).
    pub half_open: usize,
    /// The responder's counters.
    pub stats: Stats,
    /// Datagrams on 4500 that were neither IKE nor keepalives (ESP the dataplane missed, or
    /// ESP on an `[ipsec] listen` socket while no [`NativeEsp`] takes it).
    pub stray_esp: u64,
    /// NAT keepalives (RFC 3948 §2.3) read on the 4500 sockets, consumed here.
    pub keepalives: u64,
    /// Datagrams the kernel dropped on the driver's sockets before it read them (receive
    /// buffer full), since the driver started (`gate64_ike_socket_drops_total`).
    pub socket_drops: u64,
    /// The responder's cache of verified certificate chains: chains held, and hits, misses
    /// and evictions across reloads (`gate64_ike_chain_cache_entries`,
    /// `gate64_ike_chain_cache_total`).
    pub chain_cache: gate64_ike::auth::ChainCacheCounts,
}

/// A shared, cheaply cloned view of the driver's latest [`IkeSnapshot`] and of the datagrams
/// it shed.
#[derive(Debug, Clone, Default)]
pub struct IkeStatus {
    snapshot: Arc<Mutex<IkeSnapshot>>,
    shed: Arc<[AtomicU64; IkeShedReason::ALL.len()]>,
}

impl IkeStatus {
    /// The latest snapshot.
    pub fn snapshot(&self) -> IkeSnapshot {
        self.snapshot.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Datagrams shed for `reason` before the responder saw them, since the driver started
    /// (`gate64_ike_shed_total`); current after every read.
    pub fn shed(&self, reason: IkeShedReason) -> u64 {
        self.shed[reason as usize].load(Ordering::Relaxed)
    }

    fn store(&self, snapshot: IkeSnapshot) {
        if let Ok(mut s) = self.snapshot.lock() {
            *s = snapshot;
        }
    }

    fn store_shed(&self, shedder: &Shedder) {
        for reason in IkeShedReason::ALL {
            self.shed[reason as usize].store(shedder.shed(reason), Ordering::Relaxed);
        }
    }
}

/// The two bound sockets (blocking mode off), before the runtime takes them, and those of
/// `[ipsec] listen` ([`NativeSockets`]).
#[derive(Debug)]
pub struct IkeSockets {
    ike: StdUdpSocket,
    nat_t: StdUdpSocket,
    native: Vec<(StdUdpSocket, StdUdpSocket)>,
}

/// UDP 500 and 4500 on each address clients reach gate64 at directly (`[ipsec] listen`):
/// IKE there goes to the same responder as IKE through Teredo and IP-HTTPS, ESP on 4500 to
/// the dataplane ([`NativeEsp`]), which sends ESP back from clones of the 4500 sockets
/// ([`NativeSockets::senders`]).
#[derive(Debug)]
pub struct NativeSockets {
    pairs: Vec<(StdUdpSocket, StdUdpSocket)>,
}

impl NativeSockets {
    /// Binds `ike_port` and `nat_t_port` (500 and 4500 in production; tests may pass 0) on
    /// each of `addresses`.
    pub fn bind(addresses: &[IpAddr], ike_port: u16, nat_t_port: u16) -> io::Result<Self> {
        let pairs = addresses
            .iter()
            .map(|&a| {
                Ok((
                    bind_addr(SocketAddr::new(a, ike_port))?,
                    bind_addr(SocketAddr::new(a, nat_t_port))?,
                ))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(NativeSockets { pairs })
    }

    /// Clones of the NAT-T sockets with their bound addresses, for the drivers that send ESP
    /// to native clients (the UDP workers, [`NativeEsp`]).
    pub fn senders(&self) -> io::Result<Vec<(SocketAddr, StdUdpSocket)>> {
        self.pairs
            .iter()
            .map(|(_, s)| Ok((s.local_addr()?, s.try_clone()?)))
            .collect()
    }

    /// The bound addresses: (IKE, NAT-T) per listed address.
    pub fn local_addrs(&self) -> io::Result<Vec<(SocketAddr, SocketAddr)>> {
        self.pairs
            .iter()
            .map(|(i, n)| Ok((i.local_addr()?, n.local_addr()?)))
            .collect()
    }
}

impl IkeSockets {
    /// Binds `[endpoint]:ike_port` and `[endpoint]:nat_t_port` (500 and 4500 in production;
    /// tests may pass 0 for any). IPV6_FREEBIND lets the daemon bind before the TUN address is
    /// up.
    pub fn bind(endpoint: Ipv6Addr, ike_port: u16, nat_t_port: u16) -> io::Result<IkeSockets> {
        Ok(IkeSockets {
            ike: bind_one(endpoint, ike_port)?,
            nat_t: bind_one(endpoint, nat_t_port)?,
            native: Vec::new(),
        })
    }

    /// Serves the `[ipsec] listen` sockets too.
    pub fn with_native(mut self, native: NativeSockets) -> Self {
        self.native = native.pairs;
        self
    }

    /// The bound addresses: (IKE, NAT-T).
    pub fn local_addrs(&self) -> io::Result<(SocketAddr, SocketAddr)> {
        Ok((self.ike.local_addr()?, self.nat_t.local_addr()?))
    }
}

fn bind_one(endpoint: Ipv6Addr, port: u16) -> io::Result<StdUdpSocket> {
    bind_addr(SocketAddr::V6(SocketAddrV6::new(endpoint, port, 0, 0)))
}

fn bind_addr(addr: SocketAddr) -> io::Result<StdUdpSocket> {
    let s = match addr {
        SocketAddr::V6(_) => {
            let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
            s.set_only_v6(true)?;
            // Best effort: without it the bind fails until the endpoint address is configured.
            let _ = s.set_freebind_v6(true);
            s
        }
        SocketAddr::V4(_) => {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
            let _ = s.set_freebind_v4(true);
            s
        }
    };
    s.set_nonblocking(true)?;
    // Best effort too: a smaller buffer only means the kernel drops earlier under a burst.
    if sys::set_buffer_force(s.as_raw_fd(), SOCKET_BUFFER).is_err() {
        let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    }
    s.bind(&addr.into())?;
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

    /// Every IKE SA, half-open ones included, as the driver holds them now; `None` when the
    /// driver has stopped or did not answer within `timeout`. Blocks the calling thread.
    pub fn ike_sas(&self, timeout: Duration) -> Option<Vec<IkeSaInfo>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let asked = self.apply(move |r| {
            let _ = tx.send(r.ike_sas(Instant::now()));
        });
        asked.then(|| rx.recv_timeout(timeout).ok()).flatten()
    }

    /// Ends the IKE SAs `target` names (each client is sent a Delete) and returns what was
    /// removed; `None` when the driver has stopped or did not answer within `timeout`.
    /// Blocks the calling thread. Returns once the removal's events have reached the driver's
    /// sink, so the SA database, the counters and the session log show it by then.
    pub fn disconnect(
        &self,
        target: DisconnectTarget,
        timeout: Duration,
    ) -> Option<Vec<IkeSaInfo>> {
        self.disconnect_for(
            target,
            gate64_ike::responder::EndReason::Administrator,
            timeout,
        )
    }

    /// [`IkeControl::disconnect`] for `reason` (a RADIUS Disconnect-Request's, say).
    pub fn disconnect_for(
        &self,
        target: DisconnectTarget,
        reason: gate64_ike::responder::EndReason,
        timeout: Duration,
    ) -> Option<Vec<IkeSaInfo>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let removed = std::sync::Arc::new(std::sync::Mutex::new(None));
        let slot = std::sync::Arc::clone(&removed);
        let asked = self.apply(move |r| {
            let ended = r.disconnect_for(Instant::now(), &target, reason);
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(ended);
        });
        // Commands run one per turn of the driver's loop, each turn ending with the events
        // handed to the sink: this one answers after the removal's turn.
        let answered = asked
            && self.apply(move |_| {
                let ended = removed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                let _ = tx.send(ended);
            });
        answered
            .then(|| rx.recv_timeout(timeout).ok())
            .flatten()
            .flatten()
    }
}

impl IkeControl {
    /// Ends the established IKE SAs among `spis` `after` from now (a RADIUS
    /// Session-Timeout); returns those it was set for, `None` when the driver has stopped or
    /// did not answer within `timeout`. Blocks the calling thread.
    pub fn set_session_end(
        &self,
        spis: Vec<u64>,
        after: Duration,
        timeout: Duration,
    ) -> Option<Vec<u64>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let asked = self.apply(move |r| {
            let end = Instant::now() + after;
            let _ = tx.send(r.set_session_end(&spis, end));
        });
        asked.then(|| rx.recv_timeout(timeout).ok()).flatten()
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
    shedder: Shedder,
    commands: Option<tokio::sync::mpsc::UnboundedReceiver<Command>>,
    stray_esp: u64,
    keepalives: u64,
    socket_drops: u64,
    native_esp: Option<NativeEsp>,
    published: Instant,
    on_publish: Option<PublishHook>,
    auth_pool: Option<AuthPool>,
    eap_relay: Option<eap_relay::EapRelay>,
}

/// What [`IkeDriver::with_on_publish`] calls with each snapshot.
type PublishHook = Box<dyn FnMut(&IkeSnapshot) + Send>;

impl IkeDriver {
    /// A driver for `responder` on `sockets`; every event goes to `sink`.
    pub fn new(
        sockets: IkeSockets,
        responder: Responder,
        sink: impl FnMut(Event) + Send + 'static,
    ) -> Self {
        let hosts = responder.hosts();
        IkeDriver {
            sockets,
            responder,
            sink: Box::new(sink),
            esp_sink: None,
            status: IkeStatus::default(),
            shedder: Shedder::new(DEFAULT_PACKETS_PER_SOURCE_PER_SEC, hosts, shedder_key()),
            commands: None,
            stray_esp: 0,
            keepalives: 0,
            socket_drops: 0,
            native_esp: None,
            published: Instant::now(),
            on_publish: None,
            auth_pool: None,
            eap_relay: None,
        }
    }

    /// Calls `f` with every snapshot the driver publishes, right after the events that
    /// changed it went to the sink: what `f` reads of the sink's state (the child SAs it
    /// installed) then agrees with the snapshot (the IKE SAs they belong to).
    pub fn with_on_publish(mut self, f: impl FnMut(&IkeSnapshot) + Send + 'static) -> Self {
        self.on_publish = Some(Box::new(f));
        self
    }

    /// Runs IKE_SA_INIT key exchanges and IKE_AUTH verifications (chain building, signature
    /// checks) on `threads` threads beside the responder instead of inline (`[ipsec]
    /// auth_threads`); `0` keeps them inline. With `ocsp`, each thread also asks the OCSP responder about a certificate that
    /// verified, and applies the answer ([`crate::ocsp`]); OCSP needs at least one thread.
    /// Fails when a thread cannot be started.
    pub fn with_auth_threads(
        mut self,
        threads: usize,
        ocsp: Option<Arc<ocsp::OcspChecker>>,
    ) -> io::Result<Self> {
        let threads = if ocsp.is_some() {
            threads.max(1)
        } else {
            threads
        };
        if threads > 0 {
            self.auth_pool = Some(AuthPool::start(threads, self.responder.hosts(), ocsp)?);
            self.responder.set_offload_auth(true);
            self.responder.set_offload_init(true);
        }
        Ok(self)
    }

    /// Relays the responder's EAP exchanges to RADIUS through `relay`
    /// (`[[ipsec.eap_radius]]`).
    pub fn with_eap_relay(mut self, relay: eap_relay::EapRelay) -> Self {
        self.eap_relay = Some(relay);
        self
    }

    /// Hands ESP that reached the NAT-T socket (a non-zero first word: the dataplane, which
    /// opens ESP before the kernel sees it, let it through) to `sink` as well as counting it;
    /// for labs and tests that run the driver without the dataplane.
    pub fn with_stray_esp(mut self, sink: impl FnMut(SocketAddr, &[u8]) + Send + 'static) -> Self {
        self.esp_sink = Some(Box::new(sink));
        self
    }

    /// Hands ESP read on the `[ipsec] listen` 4500 sockets to `esp` (the dataplane), batch by
    /// batch.
    pub fn with_native_esp(mut self, esp: NativeEsp) -> Self {
        self.native_esp = Some(esp);
        self
    }

    /// Lets each source address have `per_sec` datagrams per second handled, as many again at
    /// once (`[ipsec] ike_packets_per_source_per_sec`; [`DEFAULT_PACKETS_PER_SOURCE_PER_SEC`]
    /// unless set); the rest is shed unread.
    pub fn with_packets_per_source(mut self, per_sec: u32) -> Self {
        self.shedder = Shedder::new(per_sec, self.responder.hosts(), shedder_key());
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
        let mut listeners = vec![
            Listener::new(&self.sockets.ike, false, false)?,
            Listener::new(&self.sockets.nat_t, true, false)?,
        ];
        for (ike, nat_t) in &self.sockets.native {
            listeners.push(Listener::new(ike, false, true)?);
            listeners.push(Listener::new(nat_t, true, true)?);
        }
        for l in &listeners {
            tracing::info!(local = %l.local, nat_t = l.nat_t, native = l.native, "ike responder listening");
        }
        // Pages are touched only as large datagrams arrive: most of the 2 MiB stays unmapped.
        let mut slots: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; MAX_DATAGRAM]).collect();
        tokio::pin!(shutdown);
        let mut commands = self.commands.take();
        let mut pool = self.auth_pool.take();
        let mut relay = self.eap_relay.take();
        self.publish(Instant::now());
        let mut turn = 0usize;
        let mut timers_ran = Instant::now();
        loop {
            turn = turn.wrapping_add(1);
            // At least once a STATUS_REFRESH: what the last wake changed without an event (a
            // half-open SA added) is published then, not at the next datagram.
            let deadline = turn::timer_wake(self.responder.poll_timeout(), timers_ran)
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(60))
                .min(self.published + STATUS_REFRESH);
            tokio::select! {
                _ = &mut shutdown => {
                    // Tell the clients, so they do not wait for their liveness checks.
                    self.responder.shutdown();
                    self.flush(&listeners).await;
                    return Ok(());
                }
                (i, r) = readable(&listeners, turn) => match r {
                    Ok(()) => self.drain(&listeners[i], &mut slots),
                    Err(e) => tracing::debug!(local = %listeners[i].local, error = %e, "ike: waiting for datagrams failed"),
                },
                _ = tokio::time::sleep_until(deadline.into()) => {
                    timers_ran = Instant::now();
                    self.responder.handle_timeout(timers_ran);
                }
                Some(change) = next_command(&mut commands) => change(&mut self.responder),
                Some(verdict) = next_verdict(&mut pool) => {
                    let now = Instant::now();
                    self.on_verdict(now, verdict);
                    // The others ready now go out with this one's in one flush.
                    while let Some(verdict) = pool.as_mut().and_then(AuthPool::ready_verdict) {
                        self.on_verdict(now, verdict);
                    }
                }
                Some(verdict) = next_relay_verdict(&mut relay) => match verdict {
                    eap_relay::RelayVerdict::Eap(v) => self.responder.handle_eap_verdict(Instant::now(), v),
                    eap_relay::RelayVerdict::Authz(v) => self.responder.handle_authz_verdict(Instant::now(), v),
                },
            }
            // Whatever woke this turn, it ends with the timers that are due and the verdicts
            // that are ready: a socket that is always readable wins the select above as
            // often as the timer does, and would otherwise hold them back.
            let now = Instant::now();
            if turn::timers_due(self.responder.poll_timeout(), now) {
                timers_ran = now;
                self.responder.handle_timeout(now);
            }
            while let Some(verdict) = pool.as_mut().and_then(AuthPool::ready_verdict) {
                self.on_verdict(now, verdict);
            }
            self.dispatch_auth_jobs(pool.as_mut());
            self.dispatch_eap_jobs(relay.as_ref());
            self.flush(&listeners).await;
        }
    }

    /// Reads from `listener` what one turn may ([`Turn`]: at most [`turn::TURN_DATAGRAMS`],
    /// no new batch after [`turn::TURN_READ_TIME`]), sheds per source, and hands the rest to
    /// the responder (native ESP to the dataplane, one batch at a time).
    fn drain(&mut self, listener: &Listener, slots: &mut [Vec<u8>]) {
        let Listener {
            socket,
            local,
            nat_t,
            native,
            ..
        } = listener;
        let (local, nat_t, native) = (*local, *nat_t, *native);
        let mut received = [ReceivedFrom::EMPTY; BATCH];
        let mut turn = Turn::new(Instant::now());
        while turn.may_read(Instant::now()) {
            let read = socket.try_io(Interest::READABLE, || {
                sys::recv_batch_from(socket.as_raw_fd(), slots, &mut received)
            });
            let n = match read {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::debug!(local = %local, error = %e, "ike: receive failed");
                    break;
                }
            };
            turn.read(n);
            let now = Instant::now();
            self.shedder.start_batch(n, slots.len());
            for (r, slot) in received[..n].iter().zip(slots.iter()) {
                let (Some(from), Some(datagram)) = (r.from, slot.get(..r.len)) else {
                    continue;
                };
                if nat_t {
                    self.on_nat_t(now, (local, native), from, datagram);
                } else if self.shedder.admit(now, from) {
                    self.responder.handle(now, local, from, datagram);
                }
            }
            if let Some(esp) = self.native_esp.as_mut() {
                esp.flush();
            }
            if n < slots.len() {
                break;
            }
        }
        self.status.store_shed(&self.shedder);
        self.count_socket_drops(listener);
    }

    /// Adds what the kernel dropped on `listener`'s socket since the last look to
    /// `socket_drops`, and tells the responder when there was any.
    fn count_socket_drops(&mut self, listener: &Listener) {
        let new = listener.new_drops();
        if new > 0 {
            self.socket_drops += u64::from(new);
            self.responder.note_input_overflow(Instant::now());
            tracing::debug!(local = %listener.local, drops = new, "ike: receive buffer full, datagrams dropped");
        }
    }

    fn on_nat_t(
        &mut self,
        now: Instant,
        (local, native): (SocketAddr, bool),
        from: SocketAddr,
        datagram: &[u8],
    ) {
        match udp_encap::classify(NAT_T_PORT, datagram) {
            Some(Encapsulated::Keepalive) => self.keepalives += 1,
            Some(Encapsulated::Esp) if native && self.native_esp.is_some() => {
                if let Some(esp) = self.native_esp.as_mut() {
                    esp.push(now, local, from, datagram);
                }
            }
            Some(Encapsulated::Ike { offset }) => {
                if self.shedder.admit(now, from) {
                    let ike = datagram.get(offset..).unwrap_or_default();
                    self.responder.handle(now, local, from, ike);
                }
            }
            Some(Encapsulated::Esp) | None => {
                self.stray_esp += 1;
                if let Some(sink) = self.esp_sink.as_mut() {
                    sink(from, datagram);
                }
            }
        }
    }

    /// Hands the responder's EAP messages and certificate authorizations to the RADIUS
    /// relay; without one (configured in the responder but no server) each is answered as
    /// unreachable.
    fn dispatch_eap_jobs(&mut self, relay: Option<&eap_relay::EapRelay>) {
        while let Some(job) = self.responder.poll_eap_job() {
            match relay {
                Some(relay) => relay.submit(job),
                None => {
                    let verdict = job.verdict(gate64_ike::responder::EapOutcome::Unreachable);
                    self.responder.handle_eap_verdict(Instant::now(), verdict);
                }
            }
        }
        // `authorize_certificates = "radius"`: the same servers authorize certificates.
        while let Some(job) = self.responder.poll_authz_job() {
            match relay {
                Some(relay) => relay.authorize(job),
                None => {
                    let verdict = job.verdict(gate64_ike::responder::AuthzOutcome::Unreachable);
                    self.responder.handle_authz_verdict(Instant::now(), verdict);
                }
            }
        }
    }

    /// Hands a worker thread's verdict to the responder.
    fn on_verdict(&mut self, now: Instant, verdict: auth_pool::Verdict) {
        match verdict {
            auth_pool::Verdict::Init(v) => self.responder.handle_init_verdict(now, v),
            auth_pool::Verdict::Auth(v) => self.responder.handle_auth_verdict(now, v),
        }
    }

    /// Hands the responder's IKE_SA_INIT key exchanges and IKE_AUTH verifications to the
    /// pool; what does not fit is shed and handed back (the responder forgets the request, as
    /// if it had been lost).
    fn dispatch_auth_jobs(&mut self, pool: Option<&mut AuthPool>) {
        let Some(pool) = pool else {
            return;
        };
        let mut shed = false;
        while let Some(job) = self.responder.poll_init_job() {
            if let Err((job, reason)) = pool.submit_init(job) {
                tracing::debug!(peer = %job.peer(), reason = reason.as_str(), "ike: IKE_SA_INIT shed");
                self.shedder.note(reason);
                self.responder.handle_init_shed(*job);
                shed = true;
            }
        }
        while let Some(job) = self.responder.poll_auth_job() {
            if let Err((job, reason)) = pool.submit(job) {
                tracing::debug!(peer = %job.peer(), reason = reason.as_str(), "ike: IKE_AUTH shed");
                self.shedder.note(reason);
                self.responder.handle_auth_shed(*job);
                shed = true;
            }
        }
        if shed {
            self.status.store_shed(&self.shedder);
        }
    }

    /// Hands the responder's events to the sink, then sends what it queued, and refreshes the
    /// status. Events first: the sink installs a new child SA in the SA database before the
    /// IKE_AUTH or CREATE_CHILD_SA response that completes it leaves, so the client's first
    /// ESP packets, sent as soon as it has the response, find their SA. Each datagram leaves
    /// from the socket it answers (`t.local`): the client's NAT mapping and its NAT detection
    /// hashes are for that address and port.
    async fn flush(&mut self, listeners: &[Listener]) {
        let mut changed = false;
        while let Some(e) = self.responder.poll_event() {
            changed = true;
            (self.sink)(e);
        }
        while let Some(t) = self.responder.poll_transmit() {
            let Some(l) = listeners.iter().find(|l| l.local == t.local).or_else(|| {
                listeners
                    .iter()
                    .find(|l| !l.native && l.local.port() == t.local.port())
            }) else {
                tracing::debug!(local = %t.local, peer = %t.remote, "ike: no socket to send from");
                continue;
            };
            let sent = if l.nat_t {
                let mut framed = Vec::with_capacity(4 + t.bytes.len());
                framed.extend_from_slice(&NON_ESP_MARKER);
                framed.extend_from_slice(&t.bytes);
                l.socket.send_to(&framed, t.remote).await
            } else {
                l.socket.send_to(&t.bytes, t.remote).await
            };
            if let Err(e) = sent {
                tracing::debug!(peer = %t.remote, error = %e, "ike: send failed");
            }
        }
        // Events change what status shows; the counters may lag a second.
        let now = Instant::now();
        if changed || now >= self.published + STATUS_REFRESH {
            self.publish(now);
        }
    }

    fn publish(&mut self, now: Instant) {
        self.published = now;
        let snapshot = IkeSnapshot {
            established: self.responder.established(),
            half_open: self.responder.half_open(),
            stats: self.responder.stats(),
            stray_esp: self.stray_esp,
            keepalives: self.keepalives,
            socket_drops: self.socket_drops,
            chain_cache: self.responder.chain_cache(),
        };
        if let Some(f) = self.on_publish.as_mut() {
            f(&snapshot);
        }
        self.status.store(snapshot);
    }
}

/// The shedding table's hash key: random per driver, so no sender can predict which
/// addresses share a bucket.
fn shedder_key() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x1ce5_11ed_u32)
}

/// The next command, or never when there is no control handle (or it was dropped).
/// The relay's next verdict (EAP or certificate authorization); never, without a relay.
async fn next_relay_verdict(
    relay: &mut Option<eap_relay::EapRelay>,
) -> Option<eap_relay::RelayVerdict> {
    match relay.as_mut() {
        Some(r) => r.next_verdict().await,
        None => std::future::pending().await,
    }
}

/// The pool's next verdict; never, without a pool.
async fn next_verdict(pool: &mut Option<AuthPool>) -> Option<auth_pool::Verdict> {
    match pool.as_mut() {
        Some(p) => p.verdict().await,
        None => std::future::pending().await,
    }
}

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
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    use std::net::Ipv4Addr;
    use std::time::SystemTime;
    use tokio::net::UdpSocket;

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
        // Both purposes: the same helper makes clients' and servers' certificates.
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ];
        let cert = params.signed_by(&key, issuer).expect("signed");
        Credentials::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
            .expect("credentials")
    }

    /// The whole exchange on the NAT-T socket, as strongSwan's libipsec does it: the marker
    /// is stripped on the way in and added on the way out; a keepalive is ignored.
    /// A responder for the clients of `clients_pem`, with gate64.lab's credentials from
    /// `servers`, on loopback sockets.
    fn responder_config(clients_pem: &str, servers: &Issuer<'static, KeyPair>) -> ResponderConfig {
        ResponderConfig::new(
            credentials(servers, "gate64.lab"),
            TrustAnchors::from_pem(clients_pem.as_bytes()).expect("anchors"),
            "fd00:c1::100/120".parse().expect("pool"),
            vec!["fd00:c0::53/128".parse().expect("prefix")],
            vec!["fd00:c0::/64".parse().expect("prefix")],
        )
    }

    /// An infrastructure-tunnel initiator with a certificate from `clients`, trusting
    /// `servers_pem`.
    fn initiator_config(clients: &Issuer<'static, KeyPair>, servers_pem: &str) -> InitiatorConfig {
        let tsr = TrafficSelector::range(
            "fd00:c0::53".parse().expect("a"),
            "fd00:c0::53".parse().expect("a"),
        );
        InitiatorConfig {
            credentials: credentials(clients, "client1"),
            anchors: TrustAnchors::from_pem(servers_pem.as_bytes()).expect("anchors"),
            group: Group::Curve25519,
            request_address: true,
            tsi: vec![TrafficSelector::range(
                "::".parse().expect("a"),
                Ipv6Addr::from(u128::MAX).into(),
            )],
            tsr: vec![tsr],
            tunnel: TunnelKind::Infrastructure,
            retransmit_after: Duration::from_secs(1),
            max_retransmits: 5,
            integrity_only: false,
        }
    }

    /// An IKE_SA_INIT flood against the driver: one loopback socket sends far more IKE_SA_INIT
    /// than its source's budget; the driver sheds the excess unread (`source_rate`), and once
    /// the source slows down its bucket refills and its IKE_SA_INIT is answered again. (Other
    /// sources passing during a flood: `shed.rs`' tests; loopback has one address.)
    #[tokio::test]
    async fn a_flooding_source_is_shed_unread_and_answered_once_it_slows() {
        let (clients_pem, clients) = ca("clients");
        let (servers_pem, servers) = ca("servers");
        let sockets = IkeSockets::bind(Ipv6Addr::LOCALHOST, 0, 0).expect("bind");
        let (ike_addr, _) = sockets.local_addrs().expect("addrs");
        let config = responder_config(&clients_pem, &servers);
        let responder =
            Responder::new(config, Instant::now(), SystemTime::now()).expect("responder");
        let driver = IkeDriver::new(sockets, responder, |_| {}).with_packets_per_source(10);
        let status = driver.status();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(driver.run(async {
            let _ = stopped.await;
        }));
        let flooder = UdpSocket::bind("[::1]:0").await.expect("flood socket");
        // A header-sized IKE_SA_INIT-like datagram: what the responder makes of it does not
        // matter, only that it is not asked.
        let mut junk = [0u8; 28];
        junk[17] = 0x20;
        junk[18] = 34;
        for i in 0..300u64 {
            junk[..8].copy_from_slice(&(i | 1 << 63).to_be_bytes());
            flooder.send_to(&junk, ike_addr).await.expect("flood");
            if i % 20 == 19 {
                // Lets the driver read: without CAP_NET_ADMIN the socket buffer holds only
                // about a hundred datagrams, and what the kernel drops is never shed.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while status.shed(IkeShedReason::SourceRate) < 200 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            status.shed(IkeShedReason::SourceRate) >= 200,
            "shed {}",
            status.shed(IkeShedReason::SourceRate)
        );
        // 10 per second: half a second refills five.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let client = UdpSocket::bind("[::1]:0").await.expect("client socket");
        let mut initiator = Initiator::new(
            initiator_config(&clients, &servers_pem),
            Instant::now(),
            SystemTime::now(),
            client.local_addr().expect("addr"),
            ike_addr,
        )
        .expect("initiator");
        initiator.start(Instant::now());
        let (_, to, bytes) = initiator.poll_transmit().expect("IKE_SA_INIT");
        client.send_to(&bytes, to).await.expect("send");
        let mut buf = vec![0u8; 4096];
        let answer = tokio::time::timeout(Duration::from_secs(10), client.recv_from(&mut buf));
        let (n, _) = answer.await.expect("answered in time").expect("recv");
        assert_eq!(buf[..8], bytes[..8], "the answer is to our SPIi");
        assert!(n > 28);
        let _ = stop.send(());
        task.await.expect("join").expect("driver");
    }

    /// Datagrams the kernel drops because the IKE socket's receive buffer is full (the
    /// driver cannot read while the runtime's one thread floods) show in the status.
    #[tokio::test]
    async fn datagrams_dropped_on_a_full_socket_are_counted() {
        let (clients_pem, _) = ca("clients");
        let (_, servers) = ca("servers");
        let sockets = IkeSockets::bind(Ipv6Addr::LOCALHOST, 0, 0).expect("bind");
        // The kernel's smallest receive buffer: a few datagrams.
        socket2::SockRef::from(&sockets.ike)
            .set_recv_buffer_size(1)
            .expect("shrink the buffer");
        let (ike_addr, _) = sockets.local_addrs().expect("addrs");
        let config = responder_config(&clients_pem, &servers);
        let responder =
            Responder::new(config, Instant::now(), SystemTime::now()).expect("responder");
        let driver = IkeDriver::new(sockets, responder, |_| {});
        let status = driver.status();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(driver.run(async {
            let _ = stopped.await;
        }));
        // Lets the driver start and wait for datagrams.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(status.snapshot().socket_drops, 0);
        let flooder = StdUdpSocket::bind("[::1]:0").expect("flood socket");
        let mut junk = [0u8; 28];
        junk[17] = 0x20;
        junk[18] = 34;
        // Blocking sends on the runtime's only thread: nothing is read meanwhile.
        for _ in 0..500 {
            flooder.send_to(&junk, ike_addr).expect("flood");
        }
        // The status is refreshed within a second while datagrams flow.
        let deadline = Instant::now() + Duration::from_secs(10);
        while status.snapshot().socket_drops == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            flooder.send_to(&junk, ike_addr).expect("one more");
        }
        let drops = status.snapshot().socket_drops;
        assert!((400..=500).contains(&drops), "{drops} drops");
        let _ = stop.send(());
        task.await.expect("join").expect("driver");
    }

    #[tokio::test]
    async fn rfc3948_exchange_on_4500_reaches_the_sink_and_the_status() {
        exchange_on_4500(0).await;
    }

    /// The same with IKE_AUTH verified on the pool's threads.
    #[tokio::test]
    async fn ike_auth_verified_on_the_auth_threads() {
        exchange_on_4500(2).await;
    }

    async fn exchange_on_4500(auth_threads: usize) {
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
        // The child SAs the sink has seen, and (IKE SAs, those child SAs) at each publish.
        let installed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let published = Arc::new(Mutex::new(Vec::<(usize, usize)>::new()));
        let (sink_installed, hook_installed, hook_published) = (
            Arc::clone(&installed),
            Arc::clone(&installed),
            Arc::clone(&published),
        );
        let driver = IkeDriver::new(sockets, responder, move |e| {
            if matches!(e, Event::ChildSaUp(_)) {
                sink_installed.fetch_add(1, Ordering::Relaxed);
            }
            let _ = tx.send(e);
        })
        .with_on_publish(move |s| {
            let children = hook_installed.load(Ordering::Relaxed);
            if let Ok(mut p) = hook_published.lock() {
                p.push((s.established, children));
            }
        })
        .with_auth_threads(auth_threads, None)
        .expect("auth threads");
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
            integrity_only: false,
        };
        let local = client.local_addr().expect("addr");
        let mut initiator = Initiator::new(init_config, now, SystemTime::now(), local, nat_t_addr)
            .expect("initiator");
        client
            .send_to(&[udp_encap::NAT_KEEPALIVE], nat_t_addr)
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
        assert_eq!(inner, Some("fd00:c1::102".parse().expect("a")));
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
        assert_eq!((snapshot.established, snapshot.half_open), (1, 0));
        assert_eq!(snapshot.stray_esp, 0);
        assert_eq!(
            snapshot.keepalives, 1,
            "the keepalive was consumed and counted"
        );
        // Every publish after the child SA reached the sink counts its IKE SA too: the pair
        // the daemon exports as MMSA and QMSA never shows a child SA without its IKE SA.
        let published = published.lock().expect("lock").clone();
        assert!(published.contains(&(1, 1)), "{published:?}");
        assert!(
            published.iter().all(|&(ike, child)| child == 0 || ike >= 1),
            "{published:?}"
        );
        for reason in [IkeShedReason::AuthQueueSource, IkeShedReason::AuthQueueFull] {
            assert_eq!(status.shed(reason), 0);
        }
        let _ = stop.send(());
        task.await.expect("join").expect("driver");
    }

    /// A client that reaches the driver on an `[ipsec] listen` address over IPv4: its whole
    /// exchange is answered from that socket (not the endpoint's), its NAT detection is over
    /// those addresses, and its child SA is marked native with the socket and its port.
    #[tokio::test]
    async fn a_native_ipv4_client_is_answered_from_its_listen_socket() {
        let (clients_pem, clients) = ca("clients");
        let (servers_pem, servers) = ca("servers");
        let sockets = IkeSockets::bind(Ipv6Addr::LOCALHOST, 0, 0).expect("bind");
        let (ike_addr, nat_t_addr) = sockets.local_addrs().expect("addrs");
        // The same port numbers on IPv4 loopback (the endpoint's sockets are IPv6-only), as
        // 500 and 4500 are on every address in production.
        let v4 = IpAddr::from([127, 0, 0, 1]);
        let native =
            NativeSockets::bind(&[v4], ike_addr.port(), nat_t_addr.port()).expect("bind native");
        let listen = native.local_addrs().expect("addrs")[0].1;
        assert_eq!(native.senders().expect("senders")[0].0, listen);
        let mut config = responder_config(&clients_pem, &servers);
        config.nat_t_port = nat_t_addr.port();
        config.native_addresses = vec![v4];
        let responder =
            Responder::new(config, Instant::now(), SystemTime::now()).expect("responder");
        let (tx, rx) = std::sync::mpsc::channel();
        let driver = IkeDriver::new(sockets.with_native(native), responder, move |e| {
            let _ = tx.send(e);
        });
        let status = driver.status();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(driver.run(async {
            let _ = stopped.await;
        }));
        let client = UdpSocket::bind("127.0.0.1:0").await.expect("client socket");
        let local = client.local_addr().expect("addr");
        let mut initiator = Initiator::new(
            initiator_config(&clients, &servers_pem),
            Instant::now(),
            SystemTime::now(),
            local,
            listen,
        )
        .expect("initiator");
        client
            .send_to(&[udp_encap::NAT_KEEPALIVE], listen)
            .await
            .expect("keepalive");
        initiator.start(Instant::now());
        let mut buf = vec![0u8; 4096];
        let deadline = Instant::now() + Duration::from_secs(20);
        while !initiator.is_established() && Instant::now() < deadline {
            while let Some((_, to, bytes)) = initiator.poll_transmit() {
                assert_eq!(to, listen);
                let framed = [&NON_ESP_MARKER[..], &bytes].concat();
                client.send_to(&framed, to).await.expect("send");
            }
            if let Ok(Ok((n, from))) =
                tokio::time::timeout(Duration::from_secs(1), client.recv_from(&mut buf)).await
            {
                assert_eq!(from, listen, "answered from the listen socket");
                assert_eq!(buf[..4], NON_ESP_MARKER);
                initiator.handle(Instant::now(), &buf[4..n]);
            }
            initiator.handle_timeout(Instant::now());
        }
        assert!(
            initiator.is_established(),
            "the initiator did not establish"
        );
        let pair = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(5)).ok())
            .find_map(|e| match e {
                Event::ChildSaUp(p) => Some(p),
                _ => None,
            })
            .expect("a child SA reached the sink");
        assert_eq!(pair.peer.native, Some(listen));
        assert_eq!(pair.peer.outer, Ipv4Addr::LOCALHOST.to_ipv6_mapped());
        assert_eq!(pair.peer.udp_encap, Some(local.port()));
        assert_eq!(status.snapshot().keepalives, 1);
        let _ = stop.send(());
        task.await.expect("join").expect("driver");
    }
}
