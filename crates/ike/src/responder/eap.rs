//! EAP authentication of the client (RFC 7296 §2.16), relayed to a RADIUS server by the
//! driver.
//!
//! A client that sends its first IKE_AUTH without AUTH asks for EAP. When EAP is configured
//! ([`ResponderConfig::eap`]) gate64 answers with its own IDr, certificate and signature, as
//! for a certificate client, and an EAP-Request/Identity: the identity the client answers
//! with is the RADIUS User-Name. It is asked for rather than taken from IDi because a client
//! configured as strongSwan's `auth = eap-mschapv2` with an `eap_id` that differs from its
//! IKE identity answers it with the `eap_id` (the account name the server knows), while its
//! IDi is often an address. Every EAP message the client sends after that becomes an
//! [`EapJob`] ([`Responder::poll_eap_job`]); the driver sends it to the RADIUS server and
//! hands the answer back as an [`EapVerdict`] ([`Responder::handle_eap_verdict`]), so no
//! RADIUS round trip runs on the IKE task. An Access-Challenge goes to the client as the
//! next EAP request; an Access-Accept as EAP-Success, with the MSK that keys the client's
//! AUTH and ours (`prf(prf(MSK, "Key Pad for IKEv2"), signed octets)`); an Access-Reject,
//! an unreachable server, or the bounds of [`EapPolicy`] refuse the IKE SA
//! (`Refusal::Eap`, `Refusal::EapCap`). An EAP IKE SA is the intranet tunnel unless the
//! client names the infrastructure one.
//!
//! EAP may also be the second round of RFC 4739 ([`start_second`]): after a first round with
//! the machine certificate and ANOTHER_AUTH_FOLLOWS, answered with IDr, CERT and AUTH, the
//! client's second IKE_AUTH carries an IDi and no AUTH. gate64 then answers with the
//! EAP-Request/Identity alone (our identity was proven in the first round), relays the same
//! way under the same bounds, and ends with the AUTHs keyed by the MSK over this round's IDi
//! and the first round's IDr; the SA, TS and CP of the first request are answered then. The
//! IKE SA keeps the machine certificate as its identity, the EAP user as its second one, and
//! the Access-Accept's authorization.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::auth_round::{
    Pending, SecondAuth, Verified, admit_identity, complete, establish, fail, fail_auth, idr_body,
    our_auth_or_fail, request_parts,
};
use super::authz::{self, Authorization};
use super::half_open::SourceKey;
use super::{Refusal, Responder, child};
use crate::auth::{CertSummary, Identity, IdentityKey};
use crate::child_sa::TunnelKind;
use crate::keys::Secret;
use crate::message::{Header, Payload, find_notify, kind, notify};

/// RFC 7296 §2.15: the pad keyed by a shared secret (here the MSK).
const KEY_PAD: &[u8] = b"Key Pad for IKEv2";
/// AUTH method 2, Shared Key Message Integrity Code.
const SHARED_KEY_MIC: u8 = 2;
/// The longest EAP identity taken (a RADIUS User-Name holds 253 octets).
const MAX_IDENTITY: usize = 253;

/// The bounds on EAP exchanges before they succeed (gate64 faces the internet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EapPolicy {
    /// EAP messages relayed per exchange before it is refused.
    pub max_rounds: u32,
    /// Time from the first IKE_AUTH until the exchange must have succeeded.
    pub timeout: Duration,
    /// EAP exchanges in progress at once, in all.
    pub max_in_flight: usize,
    /// EAP exchanges in progress at once per source (an IPv4 address, an IPv6 /64, a
    /// Teredo client's mapping).
    pub max_per_source: usize,
}

impl Default for EapPolicy {
    /// 12 round trips (EAP-MSCHAPv2 takes 4, EAP-TLS with a chain about 8), 30 s, 1,024
    /// exchanges, 8 per source.
    fn default() -> Self {
        EapPolicy {
            max_rounds: 12,
            timeout: Duration::from_secs(30),
            max_in_flight: 1024,
            max_per_source: 8,
        }
    }
}

/// One client EAP message for the RADIUS server.
#[derive(Debug)]
pub struct EapJob {
    spi_r: u64,
    message_id: u32,
    /// The client's outer address (Calling-Station-Id).
    pub peer: SocketAddr,
    /// The EAP identity the client gave (User-Name).
    pub user: String,
    /// The EAP message, as the client sent it.
    pub eap_message: Vec<u8>,
    /// The State of the server's last Access-Challenge, to echo.
    pub state: Option<Vec<u8>>,
    /// When the exchange's bound runs out: nothing the relay does is of use after it.
    pub deadline: Instant,
}

impl EapJob {
    /// The verdict for this job.
    pub fn verdict(&self, outcome: EapOutcome) -> EapVerdict {
        EapVerdict {
            spi_r: self.spi_r,
            message_id: self.message_id,
            outcome,
        }
    }
}

/// What the RADIUS server answered to an [`EapJob`].
#[derive(Clone, PartialEq, Eq)]
pub enum EapOutcome {
    /// Access-Challenge: the next EAP request for the client, and the State to echo.
    Challenge {
        /// The EAP message.
        eap_message: Vec<u8>,
        /// The State attribute.
        state: Option<Vec<u8>>,
    },
    /// Access-Accept: the EAP-Success and the MSK.
    Accept {
        /// The EAP message (an EAP-Success; empty: gate64 makes one).
        eap_message: Vec<u8>,
        /// MS-MPPE-Recv-Key ‖ MS-MPPE-Send-Key.
        msk: Vec<u8>,
        /// What the server authorizes (`authz.rs` applies it once the client's AUTH
        /// verifies).
        authorization: Authorization,
    },
    /// Access-Reject.
    Reject,
    /// No server answered in time.
    Unreachable,
}

impl std::fmt::Debug for EapOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EapOutcome::Challenge { .. } => "Challenge",
            EapOutcome::Accept { .. } => "Accept",
            EapOutcome::Reject => "Reject",
            EapOutcome::Unreachable => "Unreachable",
        })
    }
}

/// The answer to one [`EapJob`].
#[derive(Debug)]
pub struct EapVerdict {
    spi_r: u64,
    message_id: u32,
    outcome: EapOutcome,
}

/// Where an IKE SA's EAP exchange stands.
#[derive(Debug)]
enum Stage {
    /// EAP-Request/Identity sent; the client's answer is due.
    Identity,
    /// A job for the request with this header is out.
    Relaying(Header),
    /// The server's challenge went to the client; its answer is due.
    Client,
    /// EAP-Success sent; the client's AUTH keyed by the MSK is due.
    Auth(Secret),
}

/// Which authentication round an EAP exchange is.
#[derive(Debug)]
enum Round {
    /// The only one: the first IKE_AUTH request, whose IDi, SA, TS and CP are answered at the
    /// end.
    Only(Vec<Payload>),
    /// RFC 4739's second, after the machine certificate's round: what that round left (its
    /// request's SA, TS and CP are answered at the end).
    Second(Box<Pending>),
}

/// One IKE SA's EAP exchange.
#[derive(Debug)]
pub(crate) struct EapState {
    round: Round,
    /// The body of the IDi the client's AUTH covers (this round's).
    idi_body: Vec<u8>,
    /// The IDr body we sent (for our AUTH at the end).
    idr_body: Vec<u8>,
    /// Our EAP-Request/Identity's identifier.
    identity_id: u8,
    user: Option<String>,
    state: Option<Vec<u8>>,
    rounds: u32,
    started: Instant,
    stage: Stage,
    source: SourceKey,
    /// The Access-Accept's authorization, once it came.
    authorization: Authorization,
}

/// EAP exchanges in progress, in all and per source.
#[derive(Debug, Default)]
pub(crate) struct Flight {
    total: usize,
    per_source: HashMap<SourceKey, usize>,
}

impl Flight {
    pub(super) fn total(&self) -> usize {
        self.total
    }

    fn release(&mut self, source: SourceKey) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per_source.get_mut(&source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
    }
}

/// Whether the first IKE_AUTH request `inner` asks for EAP: an IDi and no AUTH.
pub(super) fn wanted(inner: &[Payload]) -> bool {
    inner.iter().any(|p| matches!(p, Payload::IdI(_)))
        && !inner.iter().any(|p| matches!(p, Payload::Auth { .. }))
}

/// Whether IKE SA `spi_r` is in an EAP exchange.
pub(super) fn active(r: &Responder, spi_r: u64) -> bool {
    r.sas.get(&spi_r).is_some_and(|sa| sa.eap.is_some())
}

/// Forgets an IKE SA's EAP exchange (it ends, or the SA goes).
pub(super) fn release(r: &mut Responder, state: &EapState) {
    r.eap_flight.release(state.source);
}

/// Starts EAP for the first IKE_AUTH request `inner` (no AUTH): our IDr, certificate and
/// signature, and an EAP-Request/Identity.
pub(super) fn start(r: &mut Responder, now: Instant, h: Header, inner: Vec<Payload>) {
    let Some((remote, started)) = r.sas.get(&h.spi_r).map(|s| (s.remote, s.started)) else {
        return;
    };
    let Some(policy) = r.config.eap else {
        return;
    };
    let claimed = inner.iter().find_map(|p| match p {
        Payload::IdI(id) => Identity::from_payload_body(&id.body())
            .ok()
            .map(|i| i.to_string()),
        _ => None,
    });
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.claimed_id.clone_from(&claimed);
    }
    let has = |k: u8| inner.iter().any(|p| p.kind() == k);
    if !(has(kind::SA) && has(kind::TSI) && has(kind::TSR)) {
        return fail(
            r,
            h,
            now,
            started,
            notify::INVALID_SYNTAX,
            Refusal::Malformed,
        );
    }
    let Some(source) = flight_room(r, &policy, remote) else {
        return fail_auth(r, (h, now, started), remote, Refusal::EapCap, claimed);
    };
    let Some(payloads) = our_auth_or_fail(r, (h, now, started), &inner, None) else {
        return;
    };
    let idr_body = idr_body(&payloads);
    let idi_body = idi_body(&inner);
    let round = Round::Only(inner);
    open(r, now, h, (round, source), (idi_body, idr_body), payloads);
}

/// Starts EAP as RFC 4739's second round: the IKE_AUTH request `inner` after a certificate
/// round carries IDi and no AUTH. Our IDr, certificate and AUTH went out with the first
/// round, so the answer is the EAP-Request/Identity alone; the exchange is bounded as a
/// first-round one is.
pub(super) fn start_second(r: &mut Responder, now: Instant, h: Header, inner: Vec<Payload>) {
    let Some(policy) = r.config.eap else {
        return;
    };
    let Some(sa) = r.sas.get_mut(&h.spi_r) else {
        return;
    };
    let (remote, started) = (sa.remote, sa.started);
    let SecondAuth::Awaiting(pending) = std::mem::take(&mut sa.second_auth) else {
        return;
    };
    let machine = Some(pending.machine.subject.clone());
    if find_notify(&inner, notify::ANOTHER_AUTH_FOLLOWS).is_some() {
        let reason = Refusal::Authentication("more than two authentication rounds".into());
        return fail(r, h, now, started, notify::AUTHENTICATION_FAILED, reason);
    }
    let Some(source) = flight_room(r, &policy, remote) else {
        return fail_auth(r, (h, now, started), remote, Refusal::EapCap, machine);
    };
    // The AUTH we send at the end covers the IDr of the first round's answer.
    let idr_body = pending.idr_body.clone();
    let idi_body = idi_body(&inner);
    let round = Round::Second(pending);
    open(r, now, h, (round, source), (idi_body, idr_body), Vec::new());
}

/// The IDi body of the request `inner` (empty without one).
fn idi_body(inner: &[Payload]) -> Vec<u8> {
    inner
        .iter()
        .find_map(|p| match p {
            Payload::IdI(id) => Some(id.body()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The source key of `remote` when one more EAP exchange fits under `policy`, in all and
/// for that source; `None` (logged) at either cap.
fn flight_room(r: &Responder, policy: &EapPolicy, remote: SocketAddr) -> Option<SourceKey> {
    let source = SourceKey::of(remote.ip());
    let here = r.eap_flight.per_source.get(&source).copied().unwrap_or(0);
    if r.eap_flight.total >= policy.max_in_flight || here >= policy.max_per_source {
        tracing::debug!(peer = %remote, "ike: EAP exchanges in progress at their cap");
        return None;
    }
    Some(source)
}

/// Counts the exchange under `source`, keeps its state on IKE SA `h.spi_r` and answers with
/// `payloads` and an EAP-Request/Identity.
fn open(
    r: &mut Responder,
    now: Instant,
    h: Header,
    (round, source): (Round, SourceKey),
    (idi_body, idr_body): (Vec<u8>, Vec<u8>),
    mut payloads: Vec<Payload>,
) {
    let identity_id = 1;
    r.eap_flight.total += 1;
    *r.eap_flight.per_source.entry(source).or_default() += 1;
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.eap = Some(Box::new(EapState {
            round,
            idi_body,
            idr_body,
            identity_id,
            user: None,
            state: None,
            rounds: 0,
            started: now,
            stage: Stage::Identity,
            source,
            authorization: Authorization::default(),
        }));
    }
    // EAP-Request (1), identifier, length 5, type Identity (1).
    payloads.push(eap_payload(vec![1, identity_id, 0, 5, 1]));
    r.respond(h.spi_r, h, payloads);
}

fn eap_payload(body: Vec<u8>) -> Payload {
    Payload::Other {
        kind: kind::EAP,
        body,
    }
}

/// The user name, for logs and refusals.
fn user_of(r: &Responder, spi_r: u64) -> Option<String> {
    let sa = r.sas.get(&spi_r)?;
    let user = sa.eap.as_ref()?.user.clone();
    user.map(|u| format!("eap:{u}"))
        .or_else(|| sa.claimed_id.clone())
}

/// Refuses the EAP exchange of IKE SA `h.spi_r` with AUTHENTICATION_FAILED.
fn refuse(r: &mut Responder, now: Instant, h: Header, reason: Refusal, why: &str) {
    let Some((remote, started)) = r.sas.get(&h.spi_r).map(|s| (s.remote, s.started)) else {
        return;
    };
    let user = user_of(r, h.spi_r);
    tracing::info!(
        peer = %remote,
        user = user.as_deref().unwrap_or("-"),
        why,
        "ike: EAP authentication refused"
    );
    fail_auth(r, (h, now, started), remote, reason, user);
}

/// A later IKE_AUTH request of an IKE SA in an EAP exchange.
pub(super) fn handle(r: &mut Responder, now: Instant, h: Header, inner: Vec<Payload>) {
    let Some(policy) = r.config.eap else {
        return;
    };
    let Some(sa) = r.sas.get_mut(&h.spi_r) else {
        return;
    };
    let remote = sa.remote;
    let Some(eap) = sa.eap.as_mut() else {
        return;
    };
    if matches!(eap.stage, Stage::Relaying(_)) {
        // A copy of the request being relayed: the answer goes out when the server's comes.
        return;
    }
    if now.saturating_duration_since(eap.started) > policy.timeout {
        return refuse(r, now, h, Refusal::EapCap, "exchange took too long");
    }
    if let Stage::Auth(_) = eap.stage {
        return finish(r, now, h, inner);
    }
    let Some(message) = inner.iter().find_map(|p| match p {
        Payload::Other { kind: k, body } if *k == kind::EAP => Some(body.clone()),
        _ => None,
    }) else {
        return refuse(r, now, h, Refusal::Eap, "no EAP payload");
    };
    eap.rounds += 1;
    if eap.rounds > policy.max_rounds {
        return refuse(r, now, h, Refusal::EapCap, "too many EAP round trips");
    }
    if eap.user.is_none() {
        // EAP-Response (2) / Identity (1) to our request, its type-data the identity.
        match message.as_slice() {
            [2, id, _, _, 1, name @ ..] if *id == eap.identity_id && !name.is_empty() => {
                let name = &name[..name.len().min(MAX_IDENTITY)];
                eap.user = Some(String::from_utf8_lossy(name).into_owned());
            }
            _ => return refuse(r, now, h, Refusal::Eap, "no EAP identity"),
        }
    }
    eap.stage = Stage::Relaying(h);
    let job = EapJob {
        spi_r: h.spi_r,
        message_id: h.message_id,
        peer: remote,
        user: eap.user.clone().unwrap_or_default(),
        eap_message: message,
        state: eap.state.clone(),
        deadline: eap.started + policy.timeout,
    };
    r.eap_jobs.push_back(job);
}

/// Finishes the job `verdict` answers.
pub(super) fn handle_verdict(r: &mut Responder, now: Instant, verdict: EapVerdict) {
    let Some(eap) = r.sas.get_mut(&verdict.spi_r).and_then(|sa| sa.eap.as_mut()) else {
        return;
    };
    let h = match eap.stage {
        Stage::Relaying(h) if h.message_id == verdict.message_id => h,
        _ => return,
    };
    match verdict.outcome {
        EapOutcome::Challenge { eap_message, state } => {
            eap.state = state;
            eap.stage = Stage::Client;
            r.respond(h.spi_r, h, vec![eap_payload(eap_message)]);
        }
        EapOutcome::Accept {
            eap_message,
            msk,
            authorization,
        } => {
            if msk.is_empty() {
                // RFC 7296 §2.16 allows methods without keys, but an MSK-less AUTH proves
                // nothing about who ran EAP: gate64 takes key-generating methods only.
                return refuse(r, now, h, Refusal::Eap, "the server sent no MSK");
            }
            eap.stage = Stage::Auth(Secret(msk));
            eap.authorization = authorization;
            let success = if eap_message.first() == Some(&3) {
                eap_message
            } else {
                vec![3, 0, 0, 4]
            };
            r.respond(h.spi_r, h, vec![eap_payload(success)]);
        }
        EapOutcome::Reject => refuse(r, now, h, Refusal::Eap, "the RADIUS server rejected it"),
        EapOutcome::Unreachable => refuse(r, now, h, Refusal::Eap, "no RADIUS server answered"),
    }
    super::half_open::refresh(r, verdict.spi_r);
}

/// The last IKE_AUTH request: the client's AUTH keyed by the MSK; ours in return, then the
/// first child SA as after a certificate.
fn finish(r: &mut Responder, now: Instant, h: Header, inner: Vec<Payload>) {
    let Some(sa) = r.sas.get_mut(&h.spi_r) else {
        return;
    };
    let Some(eap) = sa.eap.take() else {
        return;
    };
    let (started, remote) = (sa.started, sa.remote);
    let auths = msk_auths(sa, &eap);
    // The exchange ends here, whatever follows: its slot is free again.
    release(r, &eap);
    let Some((expected, ours)) = auths else {
        return;
    };
    let user = eap.user.clone().unwrap_or_default();
    let client_auth = inner.iter().find_map(|p| match p {
        Payload::Auth { method, data } => Some((*method, data.as_slice())),
        _ => None,
    });
    let ok = matches!(client_auth, Some((SHARED_KEY_MIC, data))
        if aws_lc_rs::constant_time::verify_slices_are_equal(data, &expected).is_ok());
    let named = Some(format!("eap:{user}"));
    if !ok {
        tracing::info!(peer = %remote, user, "ike: EAP client's AUTH does not verify");
        return fail_auth(r, (h, now, started), remote, Refusal::Eap, named);
    }
    let first_request = match eap.round {
        Round::Only(first_request) => first_request,
        Round::Second(pending) => {
            let ok = (user, eap.authorization, ours);
            return finish_second(r, (h, now, started), remote, *pending, ok);
        }
    };
    let combined = with_auth_of(first_request, inner);
    let Some(req) = request_parts(&combined) else {
        return fail(
            r,
            h,
            now,
            started,
            notify::INVALID_SYNTAX,
            Refusal::Malformed,
        );
    };
    let identity = verified_user(&user);
    let tunnel = child::choose_tunnel(
        req.tsr,
        req.named.or(Some(TunnelKind::Intranet)),
        &r.config.infrastructure_prefixes,
        &r.config.intranet_prefixes,
    );
    let kind = tunnel.as_ref().map(|(kind, _)| *kind);
    if let Err(reason) = admit_identity(r, now, &identity, (&req, kind), remote) {
        return fail_auth(r, (h, now, started), remote, reason, named);
    }
    if let Err(why) = authz::check_framed(r, &identity.key, &eap.authorization) {
        let reason = authz::framed_refusal(remote, &user, &why);
        return fail_auth(r, (h, now, started), remote, reason, named);
    }
    authz::grant(r, h.spi_r, now, (&user, true), eap.authorization);
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.peer_id = Some(user);
    }
    let payloads = vec![Payload::Auth {
        method: SHARED_KEY_MIC,
        data: ours,
    }];
    establish(r, now, h, &identity, true);
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        // No certificate: nothing of one may expire or be revoked.
        sa.certificate = None;
    }
    complete(r, now, (h, &req), identity, tunnel, payloads);
}

/// The first request's IDi, SA, TS and CP with the AUTH of the last request, `last`.
fn with_auth_of(first_request: Vec<Payload>, last: Vec<Payload>) -> Vec<Payload> {
    let mut combined = first_request;
    combined.retain(|p| !matches!(p, Payload::Auth { .. }));
    combined.extend(
        last.into_iter()
            .filter(|p| matches!(p, Payload::Auth { .. })),
    );
    combined
}

/// The client's AUTH as it must be and ours, both keyed by `prf(MSK, "Key Pad for IKEv2")`
/// (RFC 7296 §2.15-2.16): over the initiator's IKE_SA_INIT request | Nr | prf(SK_pi, IDi'),
/// and over our IKE_SA_INIT response | Ni | prf(SK_pr, IDr'), IDi' being this round's and
/// IDr' the one we sent (in the first round). `None` before the MSK.
fn msk_auths(sa: &super::IkeSa, eap: &EapState) -> Option<(Vec<u8>, Vec<u8>)> {
    let Stage::Auth(msk) = &eap.stage else {
        return None;
    };
    let prf = sa.keys.sk_pi.prf;
    let key = prf.prf(&msk.0, &[KEY_PAD]);
    let octets_i = [
        &sa.init_request[..],
        &sa.nr,
        &sa.keys.sk_pi.prf(&[&eap.idi_body]),
    ]
    .concat();
    let octets_r = [
        &sa.init_response[..],
        &sa.ni,
        &sa.keys.sk_pr.prf(&[&eap.idr_body]),
    ]
    .concat();
    Some((prf.prf(&key, &[&octets_i]), prf.prf(&key, &[&octets_r])))
}

/// The end of EAP as RFC 4739's second round, the client's AUTH verified: `user` passed EAP
/// and the server granted `authorization`, `ours` is our AUTH. The IKE SA is established
/// under the first round's machine certificate, with the user as its second identity (which
/// `intranet_second_auth = "required"` asks for), and the first request's child SA.
fn finish_second(
    r: &mut Responder,
    (h, now, started): (Header, Instant, Instant),
    remote: SocketAddr,
    pending: Pending,
    (user, authorization, ours): (String, Authorization, Vec<u8>),
) {
    let named = Some(format!("eap:{user}"));
    let Some(req) = request_parts(&pending.first_request) else {
        return fail(
            r,
            h,
            now,
            started,
            notify::INVALID_SYNTAX,
            Refusal::Malformed,
        );
    };
    let machine = &pending.machine;
    // Leases are the machine's, as after a certificate second round.
    if let Err(why) = authz::check_framed(r, &machine.key, &authorization) {
        let reason = authz::framed_refusal(remote, &user, &why);
        return fail_auth(r, (h, now, started), remote, reason, named);
    }
    tracing::debug!(peer = %remote, machine = %machine.subject, user, "ike second authentication by EAP");
    authz::grant(r, h.spi_r, now, (&user, true), authorization);
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.second_auth = SecondAuth::Done(format!("eap:{user}").into());
    }
    // A second round proved a user: the intranet is allowed whatever `intranet_second_auth`.
    establish(r, now, h, machine, true);
    let payloads = vec![Payload::Auth {
        method: SHARED_KEY_MIC,
        data: ours,
    }];
    let Pending {
        machine, tunnel, ..
    } = pending;
    complete(r, now, (h, &req), machine, tunnel, payloads);
}

/// What an EAP user is known by, in place of a certificate: the name as subject, keyed apart
/// from every certificate subject.
fn verified_user(user: &str) -> Verified {
    Verified {
        subject: format!("eap:{user}"),
        key: IdentityKey::new(b"eap", user.as_bytes()),
        revocation: None,
        summary: CertSummary {
            issuer: String::new(),
            serial: String::new(),
            not_after: 0,
        },
        ocsp: None,
        alt_names: vec![user.to_owned()],
        names: vec![user.to_owned()],
        issuers: Vec::new(),
    }
}
