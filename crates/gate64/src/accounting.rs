//! Session accounting in the daemon (`[accounting] log`): the IKE responder's events and
//! each removed child SA's final counters go into a [`Tracker`], whose lines go to the
//! session log's writer thread.
//!
//! Everything here runs on the IKE driver's thread (and once at shutdown), never on a
//! worker: the data path only counts bytes into its SAs, as it does without accounting.

use anyhow::{Context, Result};
use gate64_accounting::{Counts, Line, Tracker, Tunnel};
use gate64_dataplane::Shared;
use gate64_esp::{InboundEntry, SaDb, TunnelKind};
use gate64_ike::responder::{EndReason, Event, Refusal};
use gate64_io::line_log::{Handle, Lost, Sender};
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// Why the sessions still up when the daemon stops end.
const REASON_SHUTDOWN: &str = "shutdown";

/// How long a stopping daemon waits for the session log's last lines to reach the file.
const FLUSH_AT_STOP: std::time::Duration = std::time::Duration::from_secs(2);

/// The running session log.
#[derive(Debug)]
pub struct Sessions {
    tracker: Mutex<Tracker>,
    log: Sender<Line>,
    handle: Handle,
    shared: Arc<Shared>,
}

impl Sessions {
    /// Opens the session log at `path` (append) and starts its writer.
    pub fn open(path: &Path, shared: Arc<Shared>) -> Result<Arc<Sessions>> {
        let (log, handle) = gate64_io::session_log::open(path)
            .context("opening the session log (`accounting.log`)")?;
        // Session ids start with the daemon's start time, so they stay unique across restarts.
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as u32);
        Ok(Arc::new(Sessions {
            tracker: Mutex::new(Tracker::new(started)),
            log,
            handle,
            shared,
        }))
    }

    /// Records lost because the writer fell behind (`gate64_session_log_lost_total`).
    pub fn lost(&self) -> Arc<Lost> {
        self.handle.lost()
    }

    /// Reopens the file at `path` (SIGHUP: logrotate moved it, or a reload named another).
    pub fn reopen(&self, path: &Path) {
        self.handle.reopen(path);
    }

    /// A child SA was installed in the SA database.
    pub fn child_up(&self, inbound_spi: u32, outer: Ipv6Addr, inner: &[IpAddr], kind: TunnelKind) {
        let mut tracker = self.tracker();
        tracker.child_up(SystemTime::now(), inbound_spi, outer, inner, tunnel(kind));
        self.drain(&mut tracker);
    }

    /// A child SA was removed from the SA database; `removed` is what it held (its final
    /// counters).
    pub fn child_down(&self, inbound_spi: u32, removed: Option<&InboundEntry>) {
        let counts = removed.map(counts_of).unwrap_or_default();
        let mut tracker = self.tracker();
        tracker.child_down(SystemTime::now(), inbound_spi, counts);
        self.drain(&mut tracker);
    }

    /// Takes one responder event about IKE SAs (child SAs come through
    /// [`Sessions::child_up`] and [`Sessions::child_down`], once the SA database followed).
    pub fn on_event(&self, event: &Event) {
        let now = SystemTime::now();
        let mut tracker = self.tracker();
        match event {
            Event::IkeSaUp {
                spi_r,
                peer,
                identity,
                ..
            } => {
                let outer = match peer.ip() {
                    std::net::IpAddr::V6(a) => a,
                    std::net::IpAddr::V4(a) => a.to_ipv6_mapped(),
                };
                let transport = crate::status::transport_of(&self.shared, &outer);
                tracker.ike_up(now, *spi_r, *peer, identity, transport);
            }
            Event::IkeSaEnded { spi_r, reason } => tracker.ike_ended(*spi_r, end_label(*reason)),
            Event::IkeSaDown { spi_r, .. } => tracker.ike_down(now, *spi_r),
            Event::Refused { peer, reason } if is_authentication(reason) => {
                tracker.auth_refused(now, *peer, reason.label(), None);
            }
            _ => {}
        }
        self.drain(&mut tracker);
    }

    /// Ends every session still up (the daemon stops), with its child SAs' counters as the
    /// SA database holds them now, and waits (up to a bound) until the lines are written.
    pub fn end_all(&self, sadb: Option<&SaDb>) {
        let mut tracker = self.tracker();
        tracker.end_all(SystemTime::now(), REASON_SHUTDOWN, |child| {
            sadb.and_then(|db| db.inbound(child.inbound_spi))
                .map(|e| counts_of(&e))
                .unwrap_or_default()
        });
        self.drain(&mut tracker);
        drop(tracker);
        if !self.log.flush(FLUSH_AT_STOP) {
            tracing::warn!(
                "the session log's last lines were not written within {FLUSH_AT_STOP:?}"
            );
        }
    }

    fn tracker(&self) -> std::sync::MutexGuard<'_, Tracker> {
        self.tracker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn drain(&self, tracker: &mut Tracker) {
        while let Some(line) = tracker.poll_line() {
            self.log.send(line);
        }
    }
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

fn tunnel(kind: TunnelKind) -> Tunnel {
    match kind {
        TunnelKind::Infrastructure => Tunnel::Infrastructure,
        TunnelKind::Intranet => Tunnel::Intranet,
    }
}

/// The session log's `reason` for an end the responder made: the words of
/// `gate64_ipsec_disconnects_total{reason}`.
fn end_label(reason: EndReason) -> &'static str {
    crate::ike::disconnect_reason(reason).as_str()
}

/// The refusals of an authentication (a client that completed IKE_SA_INIT and presented
/// credentials): what an admin looks for. Malformed packets, cookies and caps are counted
/// in metrics only, so a flood cannot fill the log.
fn is_authentication(reason: &Refusal) -> bool {
    matches!(
        reason,
        Refusal::Authentication(_)
            | Refusal::Revoked
            | Refusal::OcspUnavailable
            | Refusal::TooManyCerts
            | Refusal::ChainNotLinear
            | Refusal::IdentityCap
            | Refusal::DuplicateIdentity
    )
}
