//! Liveness checks the responder starts (RFC 7296 §1.4, §2.4): an established IKE SA that
//! has heard no IKE message for [`ResponderConfig::dpd`] gets an empty INFORMATIONAL request;
//! after [`ResponderConfig::dpd_retransmits`] unanswered retransmissions, [`DPD_RETRANSMIT`]
//! apart, the peer is declared dead and the IKE SA and its child SAs are deleted (the
//! driver sees `ChildSaDown` and `IkeSaDown`, so the SA database and the gauges follow).
//!
//! With [`ResponderConfig::dpd_spread_percent`] a check comes up to that share of `dpd`
//! early, by a part drawn from the IKE SA's SPI and the check's message ID
//! ([`check_after`]): the checks of IKE SAs set up in one burst spread over the window
//! instead of going out, and being answered, in one burst every `dpd` for ever.
//!
//! An unanswered check proves nothing while gate64 itself drops input: under overload the
//! kernel drops datagrams on the IKE sockets before the driver reads them, answers to checks
//! among them, and deleting those clients' SAs would only add the load of their new
//! handshakes. So when the driver reported such drops ([`Responder::note_input_overflow`])
//! since a liveness check was first sent, the check that ran out of retransmissions gets
//! another one instead, up to [`OVERFLOW_EXTENSIONS`] times (each counted in
//! [`super::Stats::liveness_extended`]); a dead peer still goes, at most
//! `OVERFLOW_EXTENSIONS` × [`DPD_RETRANSMIT`] later. MOBIKE return-routability checks are not
//! extended: the client keeps its SA on the old address when one fails.
//!
//! The checks started per second are capped ([`Budget`]): at most [`checks_per_sec`] of
//! them, twice what the established IKE SAs need in a steady state (each needs one per
//! `dpd`, or per `dpd` less its spread, at least half of `dpd`), at least
//! [`LIVENESS_MIN_PER_SEC`] and at most [`LIVENESS_MAX_PER_SEC`], in slices of
//! [`LIVENESS_SLICE`] with a tenth each. IKE SAs whose checks bunch up (200,000 set up in a
//! burst, or taken over from an HA peer at once) then do not send tens of thousands of
//! checks in one second, whose answers would overflow the IKE sockets: a check past its
//! slice's share is put off, its deadline moved to a later slice (in the order they were
//! put off, a slice's share per slice), never dropped, and counted in
//! [`super::Stats::liveness_deferred`]. Retransmissions, and a Delete of expired child SAs
//! (which doubles as a check), are not capped: they are bounded by the checks outstanding.
//! Past `LIVENESS_MAX_PER_SEC` × `dpd` / 2 IKE SAs (150,000 at `dpd` 30 s; 100,000 clients
//! hold 200,000) the checks come later than `dpd`, and `liveness_deferred` keeps rising.
//!
//! The cap also backs off while gate64 drops its own input: each report of drops on the IKE
//! sockets ([`Responder::note_input_overflow`]) halves the checks a slice may start (at most
//! once per [`BACKOFF_HOLD`], down to [`LIVENESS_MIN_PER_SEC`]), and every slice without a
//! drop in the last `BACKOFF_HOLD` gives back a [`RECOVERY_PER_SLICE`] share of the full
//! cap. The full cap is a constant; a machine slower than the one it was measured on, or one
//! shared with other work, overflows its sockets below it, and then checks whose answers
//! are dropped retransmit and add to the load that dropped them, until the extensions run
//! out and live clients lose their SAs. Backing off breaks that loop: fewer checks, fewer
//! answers and retransmissions, the checks later than `dpd` meanwhile (counted as
//! deferred).
//!
//! Child SA lifetimes are the client's to keep (it rekeys before the soft lifetime, RFC
//! 7296 §2.8); a child SA still there at its soft lifetime is logged and counted, and one
//! still there at its hard lifetime (10% later) is deleted here, with a Delete payload
//! (§1.4.1) sent when no other request of ours is outstanding (one at a time, §2.3).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{IkeSa, Refusal, Responder, ResponderConfig};
use crate::keys;
use crate::message::{Delete, Header, Message, Payload, exchange, transform};

/// Time between retransmissions of a liveness check.
pub const DPD_RETRANSMIT: Duration = Duration::from_secs(5);

/// The fewest liveness checks the responder may start per second, however few IKE SAs it
/// holds.
pub const LIVENESS_MIN_PER_SEC: u32 = 100;

/// The most liveness checks the responder starts per second, however many IKE SAs it holds:
/// what one IKE loop answers beside its set-ups (it sent ~5,800 exchanges a second before
/// its socket overflowed at 170,000 IKE SAs), with room to catch up.
pub const LIVENESS_MAX_PER_SEC: u32 = 10_000;

/// The slice of time the cap on liveness checks is counted in: a tenth of the second, so
/// a second's checks do not all leave (and get answered) at its start.
pub const LIVENESS_SLICE: Duration = Duration::from_millis(100);

/// Extra retransmissions a liveness check gets, past [`ResponderConfig::dpd_retransmits`],
/// while the driver drops input (see the module documentation).
pub const OVERFLOW_EXTENSIONS: u32 = 3;

impl Responder {
    /// Tells the responder that datagrams meant for it were dropped before it could see them
    /// (the IKE sockets' receive buffers overflowed) at about `now`: the answers to its
    /// liveness checks may have been among them, so a check outstanding then is retransmitted
    /// a few more times before its peer is declared dead.
    pub fn note_input_overflow(&mut self, now: Instant) {
        if self.input_overflow.is_none_or(|t| t < now) {
            self.input_overflow = Some(now);
        }
        self.liveness_budget.back_off(now);
    }
}

/// Liveness checks started per second with `established` IKE SAs and `dpd`: twice the
/// steady state's `established / dpd` (a spread check comes at least half of `dpd` after the
/// last, so at most twice as often), within [`LIVENESS_MIN_PER_SEC`] and
/// [`LIVENESS_MAX_PER_SEC`].
pub fn checks_per_sec(established: usize, dpd: Duration) -> u32 {
    let secs = u128::from(dpd.as_secs().max(1));
    let established = u128::try_from(established).unwrap_or(u128::MAX);
    let wanted = established.saturating_mul(2).div_ceil(secs);
    u32::try_from(wanted)
        .unwrap_or(u32::MAX)
        .clamp(LIVENESS_MIN_PER_SEC, LIVENESS_MAX_PER_SEC)
}

/// How long after a report of dropped input the cap on liveness checks stays backed off
/// (and the least time between two halvings).
pub const BACKOFF_HOLD: Duration = Duration::from_secs(1);

/// The share of the full cap, per mille, a slice gives back once no input was dropped for
/// [`BACKOFF_HOLD`]: from the floor to the full cap in about ten seconds.
pub const RECOVERY_PER_SLICE: u32 = 10;

/// The full cap, per mille.
const FULL: u32 = 1_000;

/// The liveness checks of the current [`LIVENESS_SLICE`]: how many started, how many were
/// put off to later slices; and the share of the cap in force (see the module
/// documentation).
#[derive(Debug)]
pub(crate) struct Budget {
    /// When the current slice started; `None` before the first check.
    slice: Option<Instant>,
    started: u32,
    put_off: u32,
    /// The share of the cap a slice may start, per mille.
    share: u32,
    /// When the share was last halved.
    cut_at: Option<Instant>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            slice: None,
            started: 0,
            put_off: 0,
            share: FULL,
            cut_at: None,
        }
    }
}

impl Budget {
    /// Input was dropped at about `now`: halves the share, unless it was halved less than
    /// [`BACKOFF_HOLD`] ago.
    fn back_off(&mut self, now: Instant) {
        if self.cut_at.is_none_or(|t| now >= t + BACKOFF_HOLD) {
            self.share = (self.share / 2).max(1);
            self.cut_at = Some(now);
        }
    }

    /// The share of the cap in force, per mille.
    #[cfg(test)]
    pub(crate) fn share(&self) -> u32 {
        self.share
    }

    /// Whether a check may start at `now`, with `per_slice` checks allowed per slice at the
    /// full cap (less while backed off, never below the floor's share); `Err` with the instant
    /// it is put off to when not. Those put off in one slice fill the following slices in
    /// order, a slice's share each.
    fn start(&mut self, now: Instant, per_slice: u32) -> Result<(), Instant> {
        let slice = match self.slice {
            Some(s) if now < s + LIVENESS_SLICE => s,
            _ => {
                if self.cut_at.is_none_or(|t| now >= t + BACKOFF_HOLD) {
                    self.share = (self.share + RECOVERY_PER_SLICE).min(FULL);
                }
                (self.slice, self.started, self.put_off) = (Some(now), 0, 0);
                now
            }
        };
        let floor = LIVENESS_MIN_PER_SEC.div_ceil(10);
        let scaled = u64::from(per_slice) * u64::from(self.share) / u64::from(FULL);
        let per_slice = u32::try_from(scaled)
            .unwrap_or(per_slice)
            .max(floor.min(per_slice));
        if self.started < per_slice {
            self.started += 1;
            return Ok(());
        }
        let ahead = 1 + self.put_off / per_slice.max(1);
        self.put_off = self.put_off.saturating_add(1);
        Err(slice + LIVENESS_SLICE * ahead)
    }
}

/// The requests the responder sends on one IKE SA (its own message-ID counter, §2.2): a
/// liveness check or a MOBIKE return-routability check, one at a time.
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    pub(super) next_request_id: u32,
    pub(super) probe: Option<Probe>,
    /// When its next liveness check was put off to, its slice's share of checks having
    /// started (see [`Budget`]); `None` once it starts.
    pub(super) put_off_to: Option<Instant>,
    /// Where the client's latest UPDATE_SA_ADDRESSES asked the IKE SA to move, until a
    /// return-routability check there succeeds or fails (`mobike.rs`).
    pub(super) wanted: Option<Box<Candidate>>,
    /// An RFC 6311 Message ID sync request is to be sent (`mid_sync.rs`), under the same cap
    /// per slice as the liveness checks: a takeover installs every IKE SA at once.
    pub(super) mid_sync_due: bool,
}

/// Addresses a MOBIKE client asked the IKE SA to move to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Our address and port the request arrived at.
    pub(super) local: SocketAddr,
    /// The client's address and port the request came from.
    pub(super) remote: SocketAddr,
}

/// An outstanding MOBIKE return-routability check (RFC 4555 §3.5).
#[derive(Debug)]
pub(crate) struct Check {
    /// Where it was sent, and where the IKE SA moves when it is answered.
    pub(super) to: Candidate,
    /// The COOKIE2 the answer must echo.
    pub(super) cookie: Vec<u8>,
}

/// A response to a request of ours, authenticated and taken: what `mobike.rs` goes on with.
pub(super) struct Answered {
    /// The IKE SA.
    pub(super) spi_r: u64,
    /// The return-routability check it answers; `None` for a liveness check.
    pub(super) check: Option<Box<Check>>,
    /// Its payloads.
    pub(super) inner: Vec<crate::message::Payload>,
}

/// The outstanding request.
#[derive(Debug)]
pub(super) struct Probe {
    pub(super) message_id: u32,
    /// When it was first sent.
    pub(super) first_sent: Instant,
    /// When it was last sent.
    pub(super) sent: Instant,
    pub(super) retransmits: u32,
    pub(super) datagram: Vec<u8>,
    /// A return-routability check (RFC 4555 §3.5), sent to its candidate address; `None`
    /// for a liveness check.
    pub(super) check: Option<Box<Check>>,
    /// An RFC 6311 Message ID sync request (Message ID 0, `mid_sync.rs`): what it carried.
    pub(super) mid_sync: Option<crate::mid_sync::MidSync>,
}

/// How long an IKE SA may be idle before its next liveness check: `dpd` less a part of up
/// to `spread_percent` percent of it, drawn from the IKE SA's SPI and the message ID the
/// check will carry, so that it differs per IKE SA and from one check to the next.
pub(super) fn check_after(
    spi_r: u64,
    message_id: u32,
    dpd: Duration,
    spread_percent: u32,
) -> Duration {
    let span = dpd.as_nanos() * u128::from(spread_percent.min(100)) / 100;
    // SplitMix64's finalizer: neighbouring inputs give unrelated outputs.
    let mut x = spi_r ^ u64::from(message_id).rotate_left(32);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let early = (span * u128::from(x)) >> 64;
    let early = u64::try_from(early).unwrap_or(u64::MAX);
    dpd.saturating_sub(Duration::from_nanos(early))
}

/// [`check_after`] for `sa`'s next liveness check.
fn idle_before_check(sa: &IkeSa, config: &ResponderConfig) -> Duration {
    check_after(
        sa.spi_r,
        sa.liveness.next_request_id,
        config.dpd,
        config.dpd_spread_percent,
    )
}

/// When `sa`'s next liveness check is due: after [`idle_before_check`] without a message,
/// and not before the slice it was put off to.
fn check_due(sa: &IkeSa, config: &ResponderConfig) -> Instant {
    let idle = sa.last_heard + idle_before_check(sa, config);
    sa.liveness.put_off_to.map_or(idle, |t| t.max(idle))
}

/// A child SA's hard lifetime: 10% after the soft one, as the SA database is told.
fn hard_lifetime(config: &ResponderConfig) -> Duration {
    config.child_lifetime + config.child_lifetime / 10
}

/// When the IKE SA needs a liveness check sent, retransmitted or given up, or one of its
/// child SAs reaches a lifetime.
pub(super) fn deadline(sa: &IkeSa, config: &ResponderConfig) -> Option<Instant> {
    if !sa.established {
        return None;
    }
    let request = match &sa.liveness.probe {
        None if sa.liveness.mid_sync_due => sa.liveness.put_off_to.unwrap_or(sa.last_heard),
        None => check_due(sa, config),
        Some(p) => p.sent + DPD_RETRANSMIT,
    };
    let lifetimes = sa.children.iter().map(|c| {
        if c.past_soft {
            c.created + hard_lifetime(config)
        } else {
            c.created + config.child_lifetime
        }
    });
    lifetimes.chain([request]).min()
}

/// Counts child SAs past their soft lifetime and removes those past their hard one;
/// returns the removed inbound SPIs.
fn expire_children(r: &mut Responder, spi_r: u64, now: Instant) -> Vec<u32> {
    let (soft, hard) = (r.config.child_lifetime, hard_lifetime(&r.config));
    let Some(sa) = r.sas.get_mut(&spi_r) else {
        return Vec::new();
    };
    for c in sa.children.iter_mut() {
        if !c.past_soft && now >= c.created + soft {
            c.past_soft = true;
            r.stats.children_past_soft_lifetime += 1;
            tracing::info!(peer = %sa.remote, spi = c.inbound_spi, "child SA not rekeyed at its soft lifetime");
        }
    }
    let mut expired = Vec::new();
    sa.children.retain(|c| {
        let keep = now < c.created + hard;
        if !keep {
            expired.push(c.inbound_spi);
        }
        keep
    });
    for spi in &expired {
        r.inbound_spis.remove(spi);
        r.stats.children_expired += 1;
        r.events
            .push_back(super::Event::ChildSaDown { inbound_spi: *spi });
        tracing::info!(peer = %sa.remote, spi, "child SA deleted at its hard lifetime");
    }
    expired
}

enum Step {
    Send(SocketAddr, SocketAddr, Vec<u8>),
    Dead(SocketAddr),
    SyncUnanswered,
    SealFailed(SocketAddr),
    CheckFailed,
}

/// Whether the outstanding request `p` is retransmitted rather than given up: while it has
/// [`ResponderConfig::dpd_retransmits`] left, and a liveness check up to
/// [`OVERFLOW_EXTENSIONS`] times more when input was dropped (`overflow`, the latest report)
/// since it was first sent.
fn may_retransmit(p: &Probe, config: &ResponderConfig, overflow: Option<Instant>) -> bool {
    p.retransmits < config.dpd_retransmits
        || (p.check.is_none()
            && p.retransmits < config.dpd_retransmits.saturating_add(OVERFLOW_EXTENSIONS)
            && overflow.is_some_and(|t| t >= p.first_sent))
}

/// Where a retransmission of `p` goes: a return-routability check to its candidate; a
/// liveness check to where the client last asked to be (`wanted`: it may have left the old
/// address), else to the SA's addresses (`sa`, ours and the client's).
fn retransmit_to(
    p: &Probe,
    wanted: Option<&Candidate>,
    sa: (SocketAddr, SocketAddr),
) -> (SocketAddr, SocketAddr) {
    match (p.check.as_deref(), wanted) {
        (Some(c), _) => (c.to.local, c.to.remote),
        (None, Some(w)) => (w.local, w.remote),
        (None, None) => sa,
    }
}

/// The header of an INFORMATIONAL request of ours on `sa` numbered `message_id`. We are the
/// original responder, so the Initiator flag stays clear (RFC 7296 §3.1).
pub(super) fn own_informational(sa: &IkeSa, message_id: u32) -> Header {
    Header {
        spi_i: sa.spi_i,
        spi_r: sa.spi_r,
        exchange: exchange::INFORMATIONAL,
        flags: 0,
        message_id,
    }
}

/// Sends `sa`'s liveness check at `now`, carrying a Delete of its `expired` child SAs
/// (which doubles as the check), and keeps it as the outstanding request.
fn first_send(sa: &mut IkeSa, expired: &[u32], now: Instant) -> Step {
    // A Delete of expired child SAs doubles as the liveness check.
    let payloads: Vec<Payload> = if expired.is_empty() {
        Vec::new()
    } else {
        vec![Payload::Delete(Delete {
            protocol: transform::PROTO_ESP,
            spi_size: 4,
            spis: expired.iter().map(|s| s.to_be_bytes().to_vec()).collect(),
        })]
    };
    let header = own_informational(sa, sa.liveness.next_request_id);
    match keys::seal_message(&header, &payloads, &sa.keys.sk_er) {
        Ok(datagram) => {
            sa.liveness.put_off_to = None;
            sa.liveness.probe = Some(Probe {
                message_id: header.message_id,
                first_sent: now,
                sent: now,
                retransmits: 0,
                datagram: datagram.clone(),
                check: None,
                mid_sync: None,
            });
            Step::Send(sa.local, sa.remote, datagram)
        }
        Err(_) => Step::SealFailed(sa.remote),
    }
}

/// Sends, retransmits or gives up the liveness checks of the IKE SAs `due` (those whose
/// deadline has come) that are due at `now`. Returns the IKE SAs whose return-routability
/// check ran out of retransmissions (still outstanding, for `mobike.rs` to give up).
pub(super) fn on_timeout(r: &mut Responder, due: &[u64], now: Instant) -> Vec<u64> {
    let mut unanswered = Vec::new();
    let per_sec = checks_per_sec(r.established(), r.config.dpd);
    let per_slice = per_sec.div_ceil(10);
    for &spi in due {
        let due_now = r
            .sas
            .get(&spi)
            .and_then(|s| deadline(s, &r.config))
            .is_some_and(|d| now >= d);
        if !due_now {
            continue;
        }
        if start_mid_sync(r, spi, now, per_slice) {
            continue;
        }
        let expired = expire_children(r, spi, now);
        let Some(sa) = r.sas.get_mut(&spi) else {
            continue;
        };
        let idle = now >= check_due(sa, &r.config);
        if sa.liveness.probe.is_none()
            && idle
            && expired.is_empty()
            && let Err(later) = r.liveness_budget.start(now, per_slice)
        {
            // Put off: its deadline moves to a later slice, where it is due again.
            sa.liveness.put_off_to = Some(later);
            r.stats.liveness_deferred += 1;
            continue;
        }
        let step = match sa.liveness.probe.as_mut() {
            None if !idle && expired.is_empty() => continue,
            None => first_send(sa, &expired, now),
            Some(p) if now < p.sent + DPD_RETRANSMIT => continue,
            Some(p) if may_retransmit(p, &r.config, r.input_overflow) => {
                if p.retransmits >= r.config.dpd_retransmits {
                    r.stats.liveness_extended += 1;
                }
                p.retransmits += 1;
                p.sent = now;
                let (local, remote) =
                    retransmit_to(p, sa.liveness.wanted.as_deref(), (sa.local, sa.remote));
                Step::Send(local, remote, p.datagram.clone())
            }
            Some(p) if p.check.is_some() => Step::CheckFailed,
            Some(p) if p.mid_sync.is_some() => Step::SyncUnanswered,
            Some(_) => Step::Dead(sa.remote),
        };
        match step {
            Step::Send(local, remote, bytes) => r.transmit(local, remote, bytes),
            Step::Dead(peer) => {
                tracing::info!(%peer, "ike peer does not answer liveness checks: deleting its SAs");
                r.remove_sa(spi);
            }
            Step::SealFailed(peer) => r.refused(peer, Refusal::Crypto),
            Step::CheckFailed => unanswered.push(spi),
            Step::SyncUnanswered => super::mid_sync::unanswered(r, spi),
        }
    }
    unanswered
}

/// Sends IKE SA `spi`'s due RFC 6311 sync request when its slice's share of requests allows,
/// or puts it off to a later slice; `false` when none is due or another request is out.
fn start_mid_sync(r: &mut Responder, spi: u64, now: Instant, per_slice: u32) -> bool {
    let Some(sa) = r.sas.get_mut(&spi) else {
        return false;
    };
    if !sa.liveness.mid_sync_due || sa.liveness.probe.is_some() {
        return false;
    }
    if let Err(later) = r.liveness_budget.start(now, per_slice) {
        sa.liveness.put_off_to = Some(later);
        r.stats.liveness_deferred += 1;
        r.schedule(spi);
        return true;
    }
    sa.liveness.mid_sync_due = false;
    sa.liveness.put_off_to = None;
    let Some((req, datagram)) = super::mid_sync::seal_request(sa) else {
        r.stats.mid_sync_failed += 1;
        let peer = sa.remote;
        r.refused(peer, Refusal::Crypto);
        return true;
    };
    sa.liveness.probe = Some(Probe {
        message_id: 0,
        first_sent: now,
        sent: now,
        retransmits: 0,
        datagram: datagram.clone(),
        check: None,
        mid_sync: Some(req),
    });
    let (local, remote) = (sa.local, sa.remote);
    r.transmit(local, remote, datagram);
    r.schedule(spi);
    true
}

/// A response from the client: the answer to our liveness or return-routability check
/// (returned, for `mobike.rs`), or dropped.
pub(super) fn handle_response(
    r: &mut Responder,
    now: Instant,
    remote: SocketAddr,
    datagram: &[u8],
    message: &Message,
) -> Option<Answered> {
    let h = message.header;
    let Some(sa) = r.sas.get_mut(&h.spi_r).filter(|s| s.spi_i == h.spi_i) else {
        r.refused(remote, Refusal::UnknownSpi);
        return None;
    };
    let outstanding = sa.liveness.probe.as_ref().map(|p| p.message_id);
    if h.exchange != exchange::INFORMATIONAL {
        r.refused(remote, Refusal::MessageId);
        return None;
    }
    if outstanding != Some(h.message_id) {
        // The request before the next one was answered already; a copy of its answer that
        // verifies is a late one (retransmitted checks are answered twice), not a refusal of
        // the window.
        let late = h.message_id.wrapping_add(1) == sa.liveness.next_request_id
            && keys::open_message(datagram, &sa.keys.sk_ei).is_ok();
        let reason = if late {
            Refusal::LateResponse
        } else {
            Refusal::MessageId
        };
        r.refused(remote, reason);
        return None;
    }
    let inner = match keys::open_message(datagram, &sa.keys.sk_ei) {
        Ok((_, inner)) => inner,
        Err(keys::OpenError::Parse(_)) => {
            r.refused(remote, Refusal::Malformed);
            return None;
        }
        Err(_) => {
            r.refused(remote, Refusal::Integrity);
            return None;
        }
    };
    let (check, sync) = sa
        .liveness
        .probe
        .take()
        .map_or((None, None), |p| (p.check, p.mid_sync));
    match sync {
        None => sa.liveness.next_request_id = h.message_id.wrapping_add(1),
        Some(sent) => super::mid_sync::settle(sa, &mut r.stats, &sent, &inner),
    }
    sa.last_heard = now;
    // RFC 7296 §2.1 keeps our last response for a retransmission of its request. A check
    // goes out only after `dpd` without a new request, and a peer that answers it has had
    // that long to retransmit: the response (after IKE_AUTH, gate64's certificate chain) is
    // let go rather than held for the IKE SA's life (held, it would cost memory per client).
    sa.cached = None;
    r.sync_touch(h.spi_r);
    Some(Answered {
        spi_r: h.spi_r,
        check,
        inner,
    })
}

/// Sends a Delete of every established IKE SA (RFC 7296 §1.4.1: its child SAs go with it)
/// and forgets them all, so clients learn at once that gate64 stopped rather than after
/// their own liveness checks time out. Best effort: nothing is retransmitted.
pub(super) fn delete_all(r: &mut Responder) {
    let spis: Vec<u64> = r.sas.keys().copied().collect();
    for spi in spis {
        delete_one(r, spi);
    }
}

/// Sends a Delete of IKE SA `spi` when it is established (RFC 7296 §1.4.1: its child SAs go
/// with it) and forgets it and its child SAs. Best effort: nothing is retransmitted, and the
/// client that misses the Delete finds out by its own liveness check.
pub(super) fn delete_one(r: &mut Responder, spi: u64) {
    {
        let Some(sa) = r.sas.get(&spi).filter(|s| s.established) else {
            r.remove_sa(spi);
            return;
        };
        let message_id = sa
            .liveness
            .probe
            .as_ref()
            .filter(|p| p.mid_sync.is_none())
            .map_or(sa.liveness.next_request_id, |p| {
                p.message_id.wrapping_add(1)
            });
        let header = own_informational(sa, message_id);
        let delete = Payload::Delete(Delete {
            protocol: transform::PROTO_IKE,
            spi_size: 0,
            spis: Vec::new(),
        });
        let (local, remote) = (sa.local, sa.remote);
        if let Ok(bytes) = keys::seal_message(&header, &[delete], &sa.keys.sk_er) {
            r.transmit(local, remote, bytes);
        }
    }
    r.remove_sa(spi);
}

#[cfg(test)]
mod tests {
    use super::{Budget, LIVENESS_SLICE, check_after};
    use std::time::{Duration, Instant};

    /// A slice starts `per_slice` checks; those past it go to the following slices in
    /// order, `per_slice` each; a new slice starts afresh.
    #[test]
    fn a_budget_starts_a_share_per_slice_and_spreads_the_rest() {
        let t0 = Instant::now();
        let mut b = Budget::default();
        for _ in 0..3 {
            assert_eq!(b.start(t0, 3), Ok(()));
        }
        let put_off: Vec<_> = (0..7).map(|_| b.start(t0, 3)).collect();
        let slice = |k: u32| Err(t0 + LIVENESS_SLICE * k);
        assert_eq!(
            put_off,
            [
                slice(1),
                slice(1),
                slice(1),
                slice(2),
                slice(2),
                slice(2),
                slice(3)
            ]
        );
        // Still the same slice just before its end; a new one at its end.
        let late = t0 + LIVENESS_SLICE - Duration::from_millis(1);
        assert_eq!(b.start(late, 3), slice(3));
        let next = t0 + LIVENESS_SLICE;
        for _ in 0..3 {
            assert_eq!(b.start(next, 3), Ok(()));
        }
        assert_eq!(b.start(next, 3), Err(next + LIVENESS_SLICE));
        // A share of 0 (never configured so, but not a division by zero) puts all off.
        assert!(Budget::default().start(t0, 0).is_err());
    }

    const DPD: Duration = Duration::from_secs(30);

    #[test]
    fn without_spread_every_check_is_at_dpd() {
        for spi in [0, 1, u64::MAX, 0x0123_4567_89ab_cdef] {
            assert_eq!(check_after(spi, 7, DPD, 0), DPD);
        }
    }

    #[test]
    fn a_spread_check_comes_early_by_at_most_its_share() {
        let lowest = DPD - DPD / 5;
        for spi in 0..10_000u64 {
            let at = check_after(spi, 0, DPD, 20);
            assert!((lowest..=DPD).contains(&at), "spi {spi}: {at:?}");
        }
        // More than 100% is taken as 100%: never before the SA went idle.
        assert!(check_after(3, 0, DPD, 500) <= DPD);
    }

    /// IKE SAs with neighbouring SPIs (set up in one burst) fall all over the window, and
    /// one IKE SA's successive checks move within it.
    #[test]
    fn checks_of_a_burst_spread_over_the_window() {
        let window = (DPD / 5).as_millis();
        let mut buckets = [0u32; 10];
        for spi in 1_000..11_000u64 {
            let early = (DPD - check_after(spi, 0, DPD, 20)).as_millis();
            let b = usize::try_from(early * 10 / window).unwrap_or(9).min(9);
            buckets[b] += 1;
        }
        // 10,000 SAs over ten buckets: each near 1,000.
        assert!(
            buckets.iter().all(|&n| (800..=1_200).contains(&n)),
            "{buckets:?}"
        );
        let rounds: std::collections::HashSet<Duration> =
            (0..20).map(|id| check_after(42, id, DPD, 20)).collect();
        assert!(rounds.len() > 15, "{rounds:?}");
    }
}
