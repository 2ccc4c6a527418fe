//! Session accounting in the daemon (`[accounting]`): the IKE responder's events and each
//! removed child SA's final counters go into a [`Tracker`]; its lines go to the session
//! log's writer thread (`log`) and, turned into Accounting-Requests by an [`Accountant`], to
//! the RADIUS sender's thread (`[[accounting.radius]]`), with Interim-Updates every
//! `interim_secs`.
//!
//! Everything here runs on the IKE driver's thread (and on a timer and once at shutdown),
//! never on a worker: the data path only counts bytes into its SAs, as it does without
//! accounting.

use anyhow::{Context, Result};
use gate64_accounting::accountant::Accountant;
use gate64_accounting::tracker::{ClientKey, Found};
use gate64_accounting::{Counts, Line, Tracker, Tunnel};
use gate64_config::Config;
use gate64_dataplane::{DisconnectReason, Shared};
use gate64_esp::{InboundEntry, SaDb, TunnelKind};
use gate64_ike::responder::{EndReason, Event};
use gate64_io::logs::lines::{Handle, Lost, Sender};
use gate64_io::radius::{RadiusSender, RadiusStats, Server, Timing};
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Why the sessions still up when the daemon stops end.
const REASON_SHUTDOWN: &str = "shutdown";

/// How long a stopping daemon waits for the session log's last lines to reach the file, and
/// again for RADIUS servers to acknowledge the last Stops.
const FLUSH_AT_STOP: Duration = Duration::from_secs(2);

/// The running session accounting.
#[derive(Debug)]
pub struct Sessions {
    state: Mutex<State>,
    log: Option<(Sender<Line>, Handle)>,
    radius: Option<RadiusSender>,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct State {
    tracker: Tracker,
    accountant: Accountant,
}

impl Sessions {
    /// Opens the session log (append) and starts the RADIUS sender, as `cfg`'s
    /// `[accounting]` asks; `None` when it asks for neither.
    pub fn start(cfg: &Config, shared: Arc<Shared>) -> Result<Option<Arc<Sessions>>> {
        let a = &cfg.accounting;
        if !a.enabled() {
            return Ok(None);
        }
        let log = match &a.log {
            Some(path) => Some(
                gate64_io::logs::session::open(path)
                    .context("opening the session log (`accounting.log`)")?,
            ),
            None => None,
        };
        let radius = match a.radius.is_empty() {
            true => None,
            false => {
                let servers = radius_servers(cfg)?;
                Some(
                    gate64_io::radius::start(servers, a.nas_identifier.clone(), Timing::default())
                        .context("starting RADIUS accounting (`[[accounting.radius]]`)")?,
                )
            }
        };
        // Session ids start with the daemon's start time, so they stay unique across restarts.
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as u32);
        Ok(Some(Arc::new(Sessions {
            state: Mutex::new(State {
                tracker: Tracker::new(started),
                accountant: Accountant::new(),
            }),
            log,
            radius,
            shared,
        })))
    }

    /// Records lost because the session log's writer fell behind
    /// (`gate64_session_log_lost_total`); `None` without a log.
    pub fn lost(&self) -> Option<Arc<Lost>> {
        self.log.as_ref().map(|(_, handle)| handle.lost())
    }

    /// Refusal lines the tracker left out by its rate limit
    /// (`gate64_session_log_refusals_suppressed_total`).
    pub fn refusals_suppressed(&self) -> u64 {
        self.state().tracker.refusals_suppressed()
    }

    /// The RADIUS sender's counters; `None` without RADIUS.
    pub fn radius_stats(&self) -> Option<Arc<RadiusStats>> {
        self.radius.as_ref().map(RadiusSender::stats)
    }

    /// Reopens the session log at `path` (SIGHUP: logrotate moved it, or a reload named
    /// another).
    pub fn reopen(&self, path: &Path) {
        if let Some((_, handle)) = &self.log {
            handle.reopen(path);
        }
    }

    /// A child SA was installed in the SA database for the client `client`
    /// ([`crate::status::client_key`]).
    pub fn child_up(
        &self,
        inbound_spi: u32,
        client: ClientKey,
        inner: &[IpAddr],
        kind: TunnelKind,
    ) {
        let mut state = self.state();
        let now = SystemTime::now();
        state
            .tracker
            .child_up(now, inbound_spi, client, inner, tunnel(kind));
        self.drain(&mut state);
    }

    /// A child SA was removed from the SA database; `removed` is what it held (its final
    /// counters).
    pub fn child_down(&self, inbound_spi: u32, removed: Option<&InboundEntry>) {
        let counts = removed.map(counts_of).unwrap_or_default();
        let mut state = self.state();
        state
            .tracker
            .child_down(SystemTime::now(), inbound_spi, counts);
        self.drain(&mut state);
    }

    /// Takes one responder event about IKE SAs (child SAs come through
    /// [`Sessions::child_up`] and [`Sessions::child_down`], once the SA database followed).
    pub fn on_event(&self, event: &Event) {
        let now = SystemTime::now();
        let mut state = self.state();
        let tracker = &mut state.tracker;
        match event {
            Event::IkeSaUp {
                spi_r,
                peer,
                native,
                identity,
                eap_user,
                tunnel: kind,
                class,
                ..
            } => {
                let outer = gate64_accounting::tracker::outer_of(*peer);
                let transport = crate::status::transport_of(&self.shared, &outer, native.is_some());
                // A machine certificate then EAP (RFC 4739): the session log and RADIUS
                // accounting (User-Name) name the user EAP authenticated, as they do an IKE SA
                // authenticated by EAP alone.
                let identity = eap_user.as_deref().unwrap_or(identity);
                tracker.ike_up(now, *spi_r, *peer, identity, transport, kind.map(tunnel));
                tracker.authorize(*spi_r, class);
            }
            Event::IkeSaEnded { spi_r, reason } => tracker.ike_ended(*spi_r, end_label(*reason)),
            Event::PeerMoved { spi_r, peer, .. } => tracker.peer_moved(*spi_r, *peer),
            Event::IkeSaDown { spi_r, .. } => tracker.ike_down(now, *spi_r),
            Event::AuthRefused {
                peer,
                reason,
                identity,
            } => tracker.auth_refused(now, *peer, reason.label(), identity.as_deref()),
            _ => return,
        }
        self.drain(&mut state);
    }

    /// Sends an Interim-Update for every tunnel up, with its child SAs' counters as the SA
    /// database holds them now.
    pub fn interim(&self, sadb: Option<&SaDb>) {
        let Some(radius) = &self.radius else { return };
        let requests = {
            let state = self.state();
            let counts = state
                .tracker
                .tunnel_counts(|child| live_counts(sadb, child));
            state.accountant.interim(&counts, SystemTime::now())
        };
        for request in requests {
            radius.send(request);
        }
    }

    /// Ends every session still up (the daemon stops), with its child SAs' counters as the
    /// SA database holds them now, and waits (up to a bound) until the log's lines are
    /// written.
    pub fn end_all(&self, sadb: Option<&SaDb>) {
        let mut state = self.state();
        state
            .tracker
            .end_all(SystemTime::now(), REASON_SHUTDOWN, |child| {
                live_counts(sadb, child)
            });
        self.drain(&mut state);
        drop(state);
        if let Some((log, _)) = &self.log
            && !log.flush(FLUSH_AT_STOP)
        {
            tracing::warn!(
                "the session log's last lines were not written within {FLUSH_AT_STOP:?}"
            );
        }
        if let Some(radius) = &self.radius
            && !radius.flush(FLUSH_AT_STOP)
        {
            tracing::warn!(
                "RADIUS Stops still unanswered after {FLUSH_AT_STOP:?}; not waiting longer"
            );
        }
    }

    /// The sessions a RADIUS Dynamic Authorization request names, with their IKE SAs.
    pub fn find(&self, criteria: &gate64_accounting::dae::Criteria) -> Vec<Found> {
        self.state().tracker.find(criteria)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn drain(&self, state: &mut State) {
        while let Some(line) = state.tracker.poll_line() {
            if let Some(radius) = &self.radius
                && let Some(request) = state.accountant.on_line(&line)
            {
                radius.send(request);
            }
            if let Some((log, _)) = &self.log {
                log.send(line);
            }
        }
    }
}

/// The RADIUS servers of `[[accounting.radius]]` with their secrets read from
/// `secret_file` (`gate64 check-config` reads them here too).
pub(crate) fn radius_servers(cfg: &Config) -> Result<Vec<Server>> {
    servers(&cfg.accounting.radius, "accounting.radius.secret_file")
}

/// The RADIUS servers of `[[ipsec.eap_radius]]` with their secrets, as
/// [`radius_servers`].
pub(crate) fn eap_radius_servers(cfg: &Config) -> Result<Vec<Server>> {
    servers(&cfg.ipsec.eap_radius, "ipsec.eap_radius.secret_file")
}

fn servers(list: &[gate64_config::RadiusServer], key: &str) -> Result<Vec<Server>> {
    list.iter()
        .map(|r| {
            Ok(Server {
                addr: r.server,
                secret: read_secret(key, &r.secret_file)?,
            })
        })
        .collect()
}

/// The shared secret: the file's first line without its line break. Never logged.
pub(crate) fn read_secret(key: &str, path: &Path) -> Result<Vec<u8>> {
    let text =
        std::fs::read(path).with_context(|| format!("{key}: cannot read {}", path.display()))?;
    let line = text.split(|&b| b == b'\n').next().unwrap_or_default();
    let secret = line.strip_suffix(b"\r").unwrap_or(line);
    anyhow::ensure!(
        !secret.is_empty(),
        "the RADIUS secret file {} (`{key}`) is empty",
        path.display()
    );
    Ok(secret.to_vec())
}

fn live_counts(sadb: Option<&SaDb>, child: gate64_accounting::tracker::LiveChild) -> Counts {
    sadb.and_then(|db| db.inbound(child.inbound_spi))
        .map(|e| counts_of(&e))
        .unwrap_or_default()
}

/// An SA's counters: `in` what gate64 opened from the client, `out` what it sealed to it.
fn counts_of(e: &InboundEntry) -> Counts {
    let out = &e.outbound.sa;
    Counts {
        bytes_in: e.sa.bytes(),
        bytes_out: out.bytes(),
        packets_in: e.sa.packets(),
        packets_out: out.packets(),
    }
}

pub(crate) fn tunnel(kind: TunnelKind) -> Tunnel {
    match kind {
        TunnelKind::Infrastructure => Tunnel::Infrastructure,
        TunnelKind::Intranet => Tunnel::Intranet,
    }
}

/// The session log's `reason` for an end the responder made: the words of
/// `gate64_ipsec_disconnects_total{reason}`.
fn end_label(reason: EndReason) -> &'static str {
    disconnect_reason(reason).as_str()
}

/// The `gate64_ipsec_disconnects_total` reason of an end the responder made.
pub(crate) fn disconnect_reason(reason: EndReason) -> DisconnectReason {
    match reason {
        EndReason::Replaced => DisconnectReason::Replaced,
        EndReason::Reauth => DisconnectReason::Reauth,
        EndReason::Expired => DisconnectReason::Expired,
        EndReason::Revoked => DisconnectReason::Revoked,
        EndReason::Administrator => DisconnectReason::Admin,
        EndReason::Radius => DisconnectReason::Radius,
        EndReason::SessionTimeout => DisconnectReason::SessionTimeout,
    }
}
