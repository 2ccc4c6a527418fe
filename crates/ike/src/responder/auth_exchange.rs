//! IKE_AUTH (RFC 7296 §1.2, §2.15): the client's certificate and AUTH through [`crate::auth`],
//! ours in return, the configuration payload and the first child SA.

use std::time::Instant;

use super::auth_jobs::{self, AuthVerdict, PendingAuth, Round, Signed};
use super::auth_round::{
    AuthRequest, Pending, Verified, admit_identity, fail, fail_auth, idr_body, our_auth_or_fail,
    remember_certificate, request_parts, verify_client,
};
use super::cert_authz::{self, Conclusion};
use super::{Refusal, Responder, eap, second_auth, tunnel_rules};
use crate::auth::{AuthError, Identity};
use crate::message::{Header, Payload, find_notify, notify};

/// Handles the IKE_AUTH request of a half-open IKE SA.
pub(super) fn handle(r: &mut Responder, now: Instant, h: Header, inner: Vec<Payload>) {
    if auth_jobs::is_pending(r, h.spi_r) {
        // A copy of the request being verified: the answer goes out when that ends.
        return;
    }
    if cert_authz::is_pending(r, h.spi_r) {
        // A copy of the request being authorized: the answer goes out when the server's
        // comes, or a refusal once its deadline passed.
        return cert_authz::handle_retransmit(r, now, h.spi_r);
    }
    if second_auth::is_second_round(r, h.spi_r) {
        // RFC 4739 §3 with RFC 7296 §2.16: a second round without AUTH asks for EAP.
        if r.config.eap.is_some() && eap::wanted(&inner) {
            return eap::start_second(r, now, h, inner);
        }
        return second_auth::handle_second_round(r, now, h, inner);
    }
    if eap::active(r, h.spi_r) {
        return eap::handle(r, now, h, inner);
    }
    if r.config.eap.is_some() && eap::wanted(&inner) {
        return eap::start(r, now, h, inner);
    }
    let Some(sa) = r.sas.get(&h.spi_r) else {
        return;
    };
    let started = sa.started;
    let Some(req) = request_parts(&inner) else {
        return fail(
            r,
            h,
            now,
            started,
            notify::INVALID_SYNTAX,
            Refusal::Malformed,
        );
    };
    if find_notify(&inner, notify::USE_TRANSPORT_MODE).is_some()
        || inner.iter().any(|p| p.kind() == 48)
    {
        // gate64 builds tunnels only; EAP only when `[[ipsec.eap_radius]]` is configured
        // (then a request without AUTH went to `eap::start` above).
        return fail(
            r,
            h,
            now,
            started,
            notify::NO_PROPOSAL_CHOSEN,
            Refusal::Unsupported,
        );
    }
    // RFC 7296 §2.15: the initiator signs its IKE_SA_INIT request | Nr | prf(SK_pi, IDi').
    let octets_i = [
        &sa.init_request[..],
        &sa.nr,
        &sa.keys.sk_pi.prf(&[&req.proof.id.body()]),
    ]
    .concat();
    if r.config.offload_auth {
        let proof = req.proof.to_owned_parts();
        return auth_jobs::submit(r, now, (h, inner), proof, octets_i, Round::First);
    }
    let verified = verify_client(&r.config.anchors, &req.proof, &octets_i, r.wall(now));
    after_verify(r, now, h, inner, (verified, None));
}

/// The rest of a first IKE_AUTH round once the client's chain and AUTH were checked:
/// `verified` is the certificate subject, or why the client is refused; `signed`, our IDr,
/// certificates and AUTH when the verification job signed them (else they are signed here).
pub(super) fn after_verify(
    r: &mut Responder,
    now: Instant,
    h: Header,
    inner: Vec<Payload>,
    (verified, signed): (Result<Verified, AuthError>, Option<Signed>),
) {
    let Some((remote, started)) = r.sas.get(&h.spi_r).map(|s| (s.remote, s.started)) else {
        return;
    };
    let Some(req) = request_parts(&inner) else {
        return fail(
            r,
            h,
            now,
            started,
            notify::INVALID_SYNTAX,
            Refusal::Malformed,
        );
    };
    let claimed = Identity::from_payload_body(&req.proof.id.body())
        .ok()
        .map(|id| id.to_string());
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.claimed_id.clone_from(&claimed);
    }
    let identity = match verified {
        Ok(verified) => {
            remember_certificate(r, h.spi_r, &verified);
            verified
        }
        Err(e) => {
            tracing::debug!(peer = %remote, error = %e, "ike client authentication failed");
            return fail_auth(r, (h, now, started), remote, Refusal::from(&e), claimed);
        }
    };
    // Once, now that the certificate is known: every check below and the first child SA
    // take this tunnel.
    let tunnel = tunnel_rules::choose(r, (req.tsr, req.named), &identity);
    let kind = tunnel.as_ref().map(|(kind, _)| *kind);
    // A certificate already holding its share of IKE SAs gets no more: checked before we
    // sign inline (a verification job signed already, after the client verified).
    if let Err(reason) = admit_identity(r, now, &identity, (&req, kind), remote) {
        let subject = Some(identity.subject.clone());
        return fail_auth(r, (h, now, started), remote, reason, subject);
    }
    let another_follows = match second_auth::check_first_round(r, h.spi_r, &inner, kind) {
        Ok(another) => another,
        Err(reason) => return fail(r, h, now, started, notify::AUTHENTICATION_FAILED, reason),
    };
    let Some(payloads) = our_auth_or_fail(r, (h, now, started), &inner, signed) else {
        return;
    };
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.peer_id = disconnect_name(&req);
    }
    if another_follows {
        let idr_body = idr_body(&payloads);
        let pending = Pending {
            machine: identity,
            first_request: inner,
            tunnel,
            idr_body,
        };
        return second_auth::await_second_round(r, h, pending, payloads);
    }
    let intranet_allowed = second_auth::intranet_allowed(r, h.spi_r);
    let user = identity.subject.clone();
    let conclusion = Conclusion {
        request: inner,
        identity,
        tunnel,
        payloads,
        intranet_allowed,
        user,
    };
    cert_authz::conclude(r, now, h, conclusion);
}

/// The client's IDi as `gate64 disconnect` matches it: the identity's text without its type.
fn disconnect_name(req: &AuthRequest<'_>) -> Option<String> {
    let text = Identity::from_payload_body(&req.proof.id.body())
        .ok()?
        .to_string();
    Some(
        text.split_once(':')
            .map_or(text.clone(), |(_, v)| v.to_owned()),
    )
}

/// Finishes the round `verdict` belongs to, first or second, as the synchronous path does.
pub(super) fn handle_verdict(r: &mut Responder, now: Instant, verdict: AuthVerdict) {
    let Some((pending, result, signed)) = auth_jobs::take_verdict(r, verdict) else {
        // The IKE SA timed out or was deleted meanwhile.
        return;
    };
    let PendingAuth {
        header,
        inner,
        round,
        ..
    } = pending;
    match round {
        Round::First => after_verify(r, now, header, inner, (result, signed)),
        Round::Second(first) => second_auth::after_verify(r, now, header, *first, result),
    }
}
