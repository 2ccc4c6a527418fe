//! Authorization of certificate clients by RADIUS (`[ipsec] authorize_certificates =
//! "radius"`).
//!
//! Once a certificate client's chain and AUTH verified and every local check passed, and
//! before anything is answered, the IKE_AUTH waits for an [`AuthzJob`]
//! ([`Responder::poll_authz_job`]): the driver sends an Access-Request for the identity with
//! no password and hands the answer back as an [`AuthzVerdict`]
//! ([`Responder::handle_authz_verdict`]), so no RADIUS round trip runs on the IKE task. An
//! Access-Accept grants the IKE SA what it carries exactly as an EAP Access-Accept does
//! (`authz.rs`: Filter-Id, framed addresses, Session-Timeout, Class); an Access-Reject, no
//! server answering, the exchange's deadline passing or the bounds of [`super::EapPolicy`]
//! (authorizations in flight, in all and per source) refuse the IKE_AUTH with
//! AUTHENTICATION_FAILED as [`Refusal::Radius`].
//!
//! The User-Name is the identity accounting reports: the certificate subject. Under RFC 4739
//! (two certificate rounds) it is the second round's, the user's: the RADIUS account is the
//! person, not the machine that carries the device tunnel; the first round alone asks
//! nothing, so a client is asked about once per IKE SA.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use super::auth_round::{TunnelChoice, Verified, complete, establish, fail_auth};
use super::authz::{self, Authorization};
use super::half_open::SourceKey;
use super::{Refusal, Responder};
use crate::message::{Header, Payload};

/// One certificate identity for the RADIUS server to authorize.
#[derive(Debug)]
pub struct AuthzJob {
    spi_r: u64,
    message_id: u32,
    /// The client's outer address (Calling-Station-Id).
    pub peer: SocketAddr,
    /// The identity to authorize (User-Name): the certificate subject.
    pub user: String,
    /// When the answer is of no use any more: no server is asked after it.
    pub deadline: Instant,
}

impl AuthzJob {
    /// The verdict for this job.
    pub fn verdict(&self, outcome: AuthzOutcome) -> AuthzVerdict {
        AuthzVerdict {
            spi_r: self.spi_r,
            message_id: self.message_id,
            outcome,
        }
    }
}

/// What the RADIUS server answered to an [`AuthzJob`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthzOutcome {
    /// Access-Accept, with what it authorizes.
    Accept(Authorization),
    /// Access-Reject (or an Access-Challenge, which an authorization cannot answer).
    Reject,
    /// No server answered in time.
    Unreachable,
}

/// The answer to one [`AuthzJob`].
#[derive(Debug)]
pub struct AuthzVerdict {
    spi_r: u64,
    message_id: u32,
    outcome: AuthzOutcome,
}

/// What an IKE_AUTH that verified needs to finish: the first IKE_AUTH request (its SA, TS and
/// CP), the identity the IKE SA is established under, its tunnel, the payloads answered
/// before the child's (our IDr, CERT, AUTH; none after a second round), whether it may build
/// the intranet tunnel, and the RADIUS User-Name.
#[derive(Debug)]
pub(crate) struct Conclusion {
    pub(crate) request: Vec<Payload>,
    pub(crate) identity: Verified,
    pub(crate) tunnel: TunnelChoice,
    pub(crate) payloads: Vec<Payload>,
    pub(crate) intranet_allowed: bool,
    pub(crate) user: String,
}

/// An IKE SA whose authorization job is out.
#[derive(Debug)]
pub(crate) struct Awaiting {
    header: Header,
    conclusion: Conclusion,
    source: SourceKey,
    deadline: Instant,
}

/// Authorizations in flight, in all and per source.
#[derive(Debug, Default)]
pub(crate) struct Flight {
    total: usize,
    per_source: HashMap<SourceKey, usize>,
}

impl Flight {
    fn release(&mut self, source: SourceKey) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
    }
}

/// Whether IKE SA `spi_r` waits for its authorization.
pub(super) fn is_pending(r: &Responder, spi_r: u64) -> bool {
    r.sas.get(&spi_r).is_some_and(|sa| sa.cert_authz.is_some())
}

/// Forgets an IKE SA's authorization in flight (it ends, or the SA goes).
pub(super) fn release(r: &mut Responder, state: &Awaiting) {
    r.cert_authz_flight.release(state.source);
}

/// Finishes a certificate IKE_AUTH whose every local check passed: at once, or, under
/// `authorize_certificates = "radius"`, once the RADIUS server authorized `c.user`.
pub(super) fn conclude(r: &mut Responder, now: Instant, h: Header, c: Conclusion) {
    if !r.config.authorize_certificates {
        return finish(r, now, h, c, None);
    }
    let Some((remote, started)) = r.sas.get(&h.spi_r).map(|s| (s.remote, s.started)) else {
        return;
    };
    let policy = r.config.eap.unwrap_or_default();
    let source = SourceKey::of(remote.ip());
    let flight = &mut r.cert_authz_flight;
    let here = flight.per_source.get(&source).copied().unwrap_or(0);
    if flight.total >= policy.max_in_flight || here >= policy.max_per_source {
        tracing::info!(peer = %remote, user = c.user, "ike: RADIUS authorizations in flight at their cap; refused");
        let user = Some(c.user);
        return fail_auth(r, (h, now, started), remote, Refusal::Radius, user);
    }
    flight.total += 1;
    *flight.per_source.entry(source).or_default() += 1;
    let deadline = now + policy.timeout;
    r.authz_jobs.push_back(AuthzJob {
        spi_r: h.spi_r,
        message_id: h.message_id,
        peer: remote,
        user: c.user.clone(),
        deadline,
    });
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.cert_authz = Some(Box::new(Awaiting {
            header: h,
            conclusion: c,
            source,
            deadline,
        }));
    }
}

/// A copy of an IKE_AUTH request whose authorization is out: ignored (the answer goes out
/// when the server's comes), unless the deadline passed without one.
pub(super) fn handle_retransmit(r: &mut Responder, now: Instant, spi_r: u64) {
    let Some(awaiting) = r.sas.get(&spi_r).and_then(|sa| sa.cert_authz.as_deref()) else {
        return;
    };
    if now >= awaiting.deadline {
        let h = awaiting.header;
        refuse(r, now, h, "no RADIUS answer in time");
    }
}

/// Finishes the IKE_AUTH `verdict` answers.
pub(super) fn handle_verdict(r: &mut Responder, now: Instant, verdict: AuthzVerdict) {
    let Some(awaiting) = r
        .sas
        .get(&verdict.spi_r)
        .and_then(|sa| sa.cert_authz.as_deref())
    else {
        // The IKE SA timed out or was deleted meanwhile.
        return;
    };
    let h = awaiting.header;
    if h.message_id != verdict.message_id {
        return;
    }
    match verdict.outcome {
        AuthzOutcome::Accept(authorization) => {
            let Some(awaiting) = take(r, h.spi_r) else {
                return;
            };
            finish(r, now, h, awaiting.conclusion, Some(authorization));
        }
        AuthzOutcome::Reject => refuse(r, now, h, "the RADIUS server rejected it"),
        AuthzOutcome::Unreachable => refuse(r, now, h, "no RADIUS server answered"),
    }
}

/// Takes IKE SA `spi_r`'s wait, freeing its slot.
fn take(r: &mut Responder, spi_r: u64) -> Option<Box<Awaiting>> {
    let awaiting = r.sas.get_mut(&spi_r)?.cert_authz.take()?;
    release(r, &awaiting);
    Some(awaiting)
}

/// Refuses the IKE_AUTH waiting on IKE SA `h.spi_r` (reason `radius`), naming the identity.
fn refuse(r: &mut Responder, now: Instant, h: Header, why: &str) {
    let Some((remote, started)) = r.sas.get(&h.spi_r).map(|s| (s.remote, s.started)) else {
        return;
    };
    let Some(awaiting) = take(r, h.spi_r) else {
        return;
    };
    let user = awaiting.conclusion.user;
    tracing::info!(peer = %remote, user, why, "ike: certificate client not authorized by RADIUS");
    fail_auth(r, (h, now, started), remote, Refusal::Radius, Some(user));
}

/// Establishes the IKE SA and answers with its first child SA; `authorization`, when RADIUS
/// gave one, is granted first (its framed addresses checked against the pools).
fn finish(
    r: &mut Responder,
    now: Instant,
    h: Header,
    c: Conclusion,
    authorization: Option<Authorization>,
) {
    let Some((remote, started)) = r.sas.get(&h.spi_r).map(|s| (s.remote, s.started)) else {
        return;
    };
    let Some(req) = super::auth_round::request_parts(&c.request) else {
        return super::auth_round::fail(
            r,
            h,
            now,
            started,
            crate::message::notify::INVALID_SYNTAX,
            Refusal::Malformed,
        );
    };
    if let Some(authorization) = authorization {
        if let Err(why) = authz::check_framed(r, &c.identity.key, &authorization) {
            let reason = authz::framed_refusal(remote, &c.user, &why);
            return fail_auth(r, (h, now, started), remote, reason, Some(c.user));
        }
        authz::grant(r, h.spi_r, now, (&c.user, false), authorization);
    }
    establish(r, now, h, &c.identity, c.intranet_allowed);
    complete(r, now, (h, &req), c.identity, c.tunnel, c.payloads);
}
