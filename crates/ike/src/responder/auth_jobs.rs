//! IKE_AUTH's expensive steps as a job the driver can run elsewhere: the client's certificate
//! chain (webpki path building) and its AUTH signature, then, in a first round whose client
//! verified, our own AUTH signature.
//!
//! With `ResponderConfig::offload_auth`, an IKE_AUTH round (the first, or RFC 4739's second)
//! stops after the cheap checks and queues an [`AuthJob`] ([`Responder::poll_auth_job`]). The
//! IKE SA keeps the request and ignores copies of it meanwhile. [`AuthJob::run`] is a pure
//! function of what the job holds (no clock, no I/O), so a driver may run it on any thread;
//! its [`AuthVerdict`] goes back through [`Responder::handle_auth_verdict`], which finishes the
//! round exactly as the synchronous path does (identity cap, our AUTH, the child SA). A job
//! the driver has no room for goes back through [`Responder::handle_auth_shed`]: the request
//! is forgotten as if it had been lost, and the client's retransmission starts it again.
//! Without `offload_auth` the same steps run inline.
//!
//! Our signature is part of the same job, one hop instead of two: [`AuthJob::run`] signs
//! ([`super::own_auth`]) only after the client's chain, identity and AUTH verified, so
//! nothing unauthenticated makes us sign; a refused client costs one verification and no
//! signature. A verified client over its identity cap (or refused by a RADIUS authorization
//! that follows) cost a signature that is not sent: it proved a certificate of ours first.
//! RFC 4739's second round signs nothing (our AUTH went with the first round's answer). The
//! IKE task then only builds and encrypts the answer. While the job is out, copies of the
//! request are ignored and, once answered, resent from the response cache
//! (`retransmit.rs`), so one request is signed once; a shed job never ran, and the client's
//! retransmission starts a new one.
//!
//! A job is worth running only while its IKE SA waits for it: each carries the half-open IKE
//! SA's deadline and a flag the IKE SA raises when it goes (timed out, deleted, evicted)
//! ([`AuthJob::watch`]). A driver skips a job, or the slow steps after it (an OCSP lookup),
//! once [`JobWatch::is_abandoned`] says so, and bounds those steps by the deadline; a skipped
//! job's verdict ([`AuthJob::skip`]) finishes nothing. So a queue of jobs behind a slow
//! responder drains at once when their IKE SAs are gone instead of each waiting its turn.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use super::auth_round::{self, ClientProof, OwnedProof, Pending, SecondAuth, Verified};
use super::own_auth::{self, OwnAuth};
use super::{Responder, half_open::SourceKey};
use crate::auth::{AuthError, TrustAnchors};
use crate::message::{Header, Identification, Payload};

/// Our IDr, certificates and AUTH as a job signed them, or why signing failed.
pub(crate) type Signed = Result<Vec<Payload>, AuthError>;

/// A chain and AUTH signature to verify, taken from one IKE_AUTH request.
#[derive(Debug)]
pub struct AuthJob {
    spi_r: u64,
    message_id: u32,
    peer: SocketAddr,
    anchors: TrustAnchors,
    id: Identification,
    certs: Vec<Vec<u8>>,
    cert_payloads: usize,
    method: u8,
    auth_data: Vec<u8>,
    octets: Vec<u8>,
    wall: SystemTime,
    watch: JobWatch,
    /// Our AUTH to sign once the client's verified: a first round's; `None` in a second.
    own: Option<OwnAuth>,
}

/// Whether a job's IKE SA still waits for it: its deadline (the half-open IKE SA's expiry)
/// and whether it went before that. Cheap to clone; readable from any thread.
#[derive(Debug, Clone)]
pub struct JobWatch {
    deadline: Instant,
    gone: Arc<AtomicBool>,
}

impl JobWatch {
    /// When the IKE SA expires unless it is established first: nothing the job does is of use
    /// after it.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the IKE SA no longer waits for the job at `now`: it went (timed out, deleted,
    /// evicted) or its deadline passed.
    pub fn is_abandoned(&self, now: Instant) -> bool {
        now >= self.deadline || self.gone.load(Ordering::Relaxed)
    }
}

/// Raises a job's `gone` flag when the request it was taken from is dropped: with its IKE SA,
/// or once the verdict was handled.
#[derive(Debug)]
pub(crate) struct GoneOnDrop(Arc<AtomicBool>);

impl Drop for GoneOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What [`AuthJob::run`] found: the certificate subject, or why the client is refused.
#[derive(Debug)]
pub struct AuthVerdict {
    spi_r: u64,
    message_id: u32,
    /// `None` for a job that was skipped ([`AuthJob::skip`], [`AuthVerdict::skip`]): it
    /// finishes nothing.
    result: Option<Result<Verified, AuthError>>,
    /// The certificate an OCSP answer found revoked after it verified: established IKE SAs
    /// authenticated with it end too.
    revoked: Option<crate::auth::RevocationKey>,
    /// Our IDr, certificates and AUTH, signed after the client's verified (a first round).
    signed: Option<Signed>,
}

impl AuthVerdict {
    /// What an OCSP lookup of the certificate that verified needs; `None` when the
    /// verification refused it.
    pub fn ocsp_query(&self) -> Option<&crate::auth::OcspQuery> {
        self.result.as_ref()?.as_ref().ok()?.ocsp.as_ref()
    }

    /// Drops what the job found: its IKE SA no longer waits for it (the steps after the
    /// verification, such as an OCSP lookup, are then not taken either).
    pub fn skip(&mut self) {
        self.result = None;
        self.revoked = None;
        self.signed = None;
    }

    /// Whether the verdict was skipped.
    pub fn is_skipped(&self) -> bool {
        self.result.is_none()
    }

    /// Turns the verdict into a refusal (an OCSP answer that the certificate is revoked, or
    /// none when one is required). A revoked certificate's established IKE SAs (the client's
    /// other tunnel, say) are ended as well when the verdict is handled.
    pub fn refuse(&mut self, why: AuthError) {
        let Some(result) = &mut self.result else {
            return;
        };
        if why == AuthError::Revoked {
            self.revoked = result.as_ref().ok().and_then(|v| v.revocation.clone());
        }
        *result = Err(why);
    }
}

impl AuthJob {
    /// The address the request came from.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The key per-source limits count this job under: an IPv4 address, an IPv6 /64, a
    /// Teredo client's NAT mapping.
    pub fn source_key(&self) -> SourceKey {
        SourceKey::of(self.peer.ip())
    }

    /// Whether the job's IKE SA still waits for it, readable after the job moved on.
    pub fn watch(&self) -> JobWatch {
        self.watch.clone()
    }

    /// The verdict of a job not run, because its IKE SA no longer waits for it
    /// ([`JobWatch::is_abandoned`]): it finishes nothing.
    pub fn skip(self) -> AuthVerdict {
        AuthVerdict {
            spi_r: self.spi_r,
            message_id: self.message_id,
            result: None,
            revoked: None,
            signed: None,
        }
    }

    /// Verifies the chain to the trust anchors at the job's wall-clock time, the identity
    /// against the leaf and the AUTH signature; then, in a first round whose client verified,
    /// signs our AUTH. CPU and the crypto library's RNG only; tens of milliseconds at most
    /// (the chain's shape was bounded before path building).
    pub fn run(self) -> AuthVerdict {
        let proof = ClientProof::owned(
            &self.id,
            &self.certs,
            self.cert_payloads,
            self.method,
            &self.auth_data,
        );
        let result = auth_round::verify_client(&self.anchors, &proof, &self.octets, self.wall);
        let signed = match (&result, &self.own) {
            (Ok(_), Some(own)) => Some(own.sign()),
            _ => None,
        };
        AuthVerdict {
            spi_r: self.spi_r,
            message_id: self.message_id,
            result: Some(result),
            revoked: None,
            signed,
        }
    }
}

/// Which round an IKE SA's pending verification belongs to.
#[derive(Debug)]
pub(crate) enum Round {
    /// The first (machine) round.
    First,
    /// RFC 4739's second round, with what the first left for it.
    Second(Box<Pending>),
}

/// An IKE_AUTH request waiting for its [`AuthVerdict`].
#[derive(Debug)]
pub(crate) struct PendingAuth {
    pub(super) header: Header,
    pub(super) inner: Vec<Payload>,
    pub(super) round: Round,
    /// Tells the job, when this request is dropped, that nobody waits for it any more.
    pub(super) _gone: GoneOnDrop,
}

/// Queues the verification of the proof over `octets` for request `h` of a half-open IKE SA,
/// with, in a first round, the signing of our AUTH, keeping the request for when the verdict
/// comes.
pub(super) fn submit(
    r: &mut Responder,
    now: Instant,
    (h, inner): (Header, Vec<Payload>),
    (id, certs, cert_payloads, method, auth_data): OwnedProof,
    octets: Vec<u8>,
    round: Round,
) {
    let wall = r.wall(now);
    let own = match round {
        // Without an IKE SA nothing is queued below either.
        Round::First => {
            own_auth::prepare(r, h.spi_r, auth_round::requested_idr(&inner).as_ref()).ok()
        }
        Round::Second(_) => None,
    };
    let Some(deadline) = r
        .sas
        .get(&h.spi_r)
        .map(|sa| super::timers::expiry(sa, &r.config, r.clock))
    else {
        return;
    };
    let Some(sa) = r.sas.get_mut(&h.spi_r) else {
        return;
    };
    let gone = Arc::new(AtomicBool::new(false));
    let job = AuthJob {
        spi_r: h.spi_r,
        message_id: h.message_id,
        peer: sa.remote,
        anchors: match round {
            Round::First => r.config.anchors.clone(),
            Round::Second(_) => r.config.second_round_anchors().clone(),
        },
        id,
        certs,
        cert_payloads,
        method,
        auth_data,
        octets,
        wall,
        watch: JobWatch {
            deadline,
            gone: Arc::clone(&gone),
        },
        own,
    };
    sa.pending_auth = Some(Box::new(PendingAuth {
        header: h,
        inner,
        round,
        _gone: GoneOnDrop(gone),
    }));
    r.auth_jobs.push_back(job);
}

/// Whether IKE SA `spi_r` waits for a verdict (copies of its request are then ignored).
pub(super) fn is_pending(r: &Responder, spi_r: u64) -> bool {
    r.sas
        .get(&spi_r)
        .is_some_and(|sa| sa.pending_auth.is_some())
}

/// Takes the request `verdict` answers, if its IKE SA is still there and still waiting.
fn take_pending(r: &mut Responder, spi_r: u64, message_id: u32) -> Option<Box<PendingAuth>> {
    let sa = r.sas.get_mut(&spi_r)?;
    let pending = sa.pending_auth.take()?;
    if pending.header.message_id != message_id {
        sa.pending_auth = Some(pending);
        return None;
    }
    Some(pending)
}

/// The request `verdict` answers, taken from its IKE SA, the verdict's result and what it
/// signed for us, if the IKE SA is still there and still waiting. An OCSP answer that found a
/// certificate revoked ends the IKE SAs it authenticated first, whichever request it came
/// with. A skipped verdict finishes nothing: its IKE SA, if still there, is past its deadline
/// and expires.
pub(super) fn take_verdict(
    r: &mut Responder,
    verdict: AuthVerdict,
) -> Option<(PendingAuth, Result<Verified, AuthError>, Option<Signed>)> {
    if let Some(key) = &verdict.revoked {
        end_revoked(r, key);
    }
    let result = verdict.result?;
    let pending = take_pending(r, verdict.spi_r, verdict.message_id)?;
    Some((*pending, result, verdict.signed))
}

/// Ends, with a Delete each, the established IKE SAs authenticated with the certificate `key`
/// names (an OCSP answer found it revoked).
fn end_revoked(r: &mut Responder, key: &crate::auth::RevocationKey) {
    let ended: Vec<u64> = r
        .sas
        .values()
        .filter(|sa| sa.established && sa.certificates.contains(key))
        .map(|sa| sa.spi_r)
        .collect();
    for spi in ended {
        tracing::info!(
            spi = format!("{spi:016x}"),
            "ike SA ended: OCSP says its certificate is revoked"
        );
        r.event(super::Event::IkeSaEnded {
            spi_r: spi,
            reason: super::EndReason::Revoked,
        });
        super::liveness::delete_one(r, spi);
    }
}

/// Forgets the request `job` was taken from, as if it had been lost; a second-round request
/// puts back what the first round left, so the client's retransmission finds it.
pub(super) fn handle_shed(r: &mut Responder, job: AuthJob) {
    let Some(pending) = take_pending(r, job.spi_r, job.message_id) else {
        return;
    };
    if let (Round::Second(first), Some(sa)) = (pending.round, r.sas.get_mut(&job.spi_r)) {
        sa.second_auth = SecondAuth::Awaiting(first);
    }
}
