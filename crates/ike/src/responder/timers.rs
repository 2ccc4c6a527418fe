//! The responder's timers: each IKE SA's next deadline (half-open or idle expiry,
//! reauthentication deadline, liveness check, child SA lifetime) in one heap, earliest first, so a timeout touches only the SAs
//! that are due (with 20,000 SAs a scan of all of them per event took a core).
//! Entries are not removed when a deadline moves later or an SA goes: such a stale entry is
//! recognised (the SA's `timer` no longer names it) and skipped when it comes up.

use std::cmp::Reverse;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{EndReason, Event, IkeSa, Refusal, Responder, ResponderConfig, liveness, mobike};

impl Responder {
    /// When [`Responder::handle_timeout`] should run next (early when an SA heard a message
    /// since its deadline was set: it is then rescheduled).
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, spi))) = self.timers.peek() {
            if self.sas.get(&spi).is_some_and(|s| s.timer == Some(at)) {
                break;
            }
            self.timers.pop();
        }
        let next_sa = self.timers.peek().map(|Reverse((at, _))| *at);
        let rotation = self
            .cookie_secrets
            .next_rotation(self.config.cookie_rotation);
        Some(next_sa.map_or(rotation, |at| at.min(rotation)))
    }

    /// Expires half-open and idle IKE SAs, runs liveness checks and rotates the cookie
    /// secret: only for the IKE SAs whose deadline has come.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.cookie_secrets
            .rotate_if_due(now, self.config.cookie_rotation);
        let mut due = Vec::new();
        while let Some(&Reverse((at, spi))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            // Stale when the SA is gone or its deadline moved since this entry was made.
            if let Some(sa) = self.sas.get_mut(&spi).filter(|s| s.timer == Some(at)) {
                sa.timer = None;
                due.push(spi);
            }
        }
        for spi in liveness::on_timeout(self, &due, now) {
            mobike::check_unanswered(self, spi, now);
        }
        for &spi in &due {
            let Some(sa) = self.sas.get(&spi) else {
                continue;
            };
            if now < expiry(sa, &self.config, self.clock) {
                self.schedule(spi);
                continue;
            }
            if sa.session_end.is_some_and(|d| now >= d) {
                tracing::info!(peer = %sa.remote, identity = ?sa.identity, spi = format!("{spi:016x}"), "ike SA ended: its RADIUS Session-Timeout passed");
                self.events.push_back(Event::IkeSaEnded {
                    spi_r: spi,
                    reason: EndReason::SessionTimeout,
                });
                liveness::delete_one(self, spi);
                continue;
            }
            if cert_deadline(sa, self.clock).is_some_and(|d| now >= d) {
                tracing::info!(peer = %sa.remote, identity = ?sa.identity, spi = format!("{spi:016x}"), "ike SA ended: its client's certificate expired");
                self.events.push_back(Event::IkeSaEnded {
                    spi_r: spi,
                    reason: EndReason::Expired,
                });
                liveness::delete_one(self, spi);
                continue;
            }
            if reauth_deadline(sa, &self.config).is_some_and(|d| now >= d) {
                tracing::info!(peer = %sa.remote, identity = ?sa.identity, spi = format!("{spi:016x}"), "ike SA ended: its client did not authenticate anew (reauth_secs)");
                self.events.push_back(Event::IkeSaEnded {
                    spi_r: spi,
                    reason: EndReason::Reauth,
                });
                liveness::delete_one(self, spi);
                continue;
            }
            if !sa.established {
                let (peer, duration) = (sa.remote, now.saturating_duration_since(sa.started));
                self.events.push_back(Event::Negotiation {
                    result: Err(Refusal::Timeout),
                    peer: Some(peer),
                    identity: sa.claimed_id.clone(),
                    duration,
                });
                self.refused(peer, Refusal::Timeout);
            }
            self.remove_sa(spi);
        }
    }

    /// Makes sure the IKE SA `spi_r` is woken by its deadline. Called where a deadline can
    /// move earlier (a new SA, established, a new child SA); a deadline that moves later
    /// (a message heard) is found when the earlier entry fires, which then reschedules.
    pub(crate) fn schedule(&mut self, spi_r: u64) {
        let Some(sa) = self.sas.get_mut(&spi_r) else {
            return;
        };
        let expiry = expiry(sa, &self.config, self.clock);
        let at = match sa.established {
            true => liveness::deadline(sa, &self.config).map_or(expiry, |d| d.min(expiry)),
            false => expiry,
        };
        if sa.timer.is_none_or(|t| at < t) {
            sa.timer = Some(at);
            self.timers.push(Reverse((at, spi_r)));
        }
    }
}

/// When `sa` expires: half-open ones a fixed time after they started, established ones when
/// idle (nothing heard) for the idle timeout, past their reauthentication deadline, when
/// their client's certificate expires, or at the end a RADIUS Session-Timeout set. `clock` is an instant and the wall-clock time then.
pub(super) fn expiry(
    sa: &IkeSa,
    config: &ResponderConfig,
    clock: (Instant, SystemTime),
) -> Instant {
    if sa.established {
        let idle = sa.last_heard + config.ike_idle_timeout;
        [
            reauth_deadline(sa, config),
            cert_deadline(sa, clock),
            sa.session_end,
        ]
        .into_iter()
        .flatten()
        .fold(idle, Instant::min)
    } else {
        sa.started + config.half_open_timeout
    }
}

/// When the certificate an established IKE SA was authenticated with (the first round's)
/// passes its notAfter, as an instant of `clock` (an instant and the wall-clock time then).
fn cert_deadline(sa: &IkeSa, (at, wall): (Instant, SystemTime)) -> Option<Instant> {
    let (_, not_after) = sa.certificate.as_ref()?;
    let not_after = UNIX_EPOCH + Duration::from_secs(u64::try_from(*not_after).unwrap_or(0));
    match not_after.duration_since(wall) {
        // Beyond what an Instant can hold: never, in practice.
        Ok(left) => at.checked_add(left),
        Err(_) => Some(at),
    }
}

/// When an established IKE SA whose client has not authenticated anew is deleted: the
/// announced lifetime (AUTH_LIFETIME) and a tenth more, the time a client such as strongSwan
/// takes from its margin to reauthenticate before the lifetime ends.
fn reauth_deadline(sa: &IkeSa, config: &ResponderConfig) -> Option<Instant> {
    let lifetime = config.reauth?;
    Some(sa.authenticated? + lifetime + lifetime / 10)
}
