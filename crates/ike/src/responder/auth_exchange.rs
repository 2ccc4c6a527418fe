//! IKE_AUTH (RFC 7296 §1.2, §2.15): the client's certificate and AUTH through [`crate::auth`],
//! ours in return, the configuration payload and the first child SA.

use std::net::SocketAddr;
use std::time::Instant;

use super::auth_jobs::{self, AuthVerdict, PendingAuth, Round};
use super::auth_round::{
    AuthRequest, Pending, Verified, complete, establish, fail, remember_certificate, request_parts,
    verify_client,
};
use super::{Event, Refusal, Responder, caps, eap, second_auth, tunnel_rules, uniqueness};
use crate::auth::{AuthError, AuthMethod, Identity};
use crate::child_sa::TunnelKind;
use crate::message::{Header, Identification, Payload, find_notify, notify};

/// Handles the IKE_AUTH request of a half-open IKE SA.
pub(super) fn handle(r: &mut Responder, now: Instant, h: Header, inner: Vec<Payload>) {
    if auth_jobs::is_pending(r, h.spi_r) {
        // A copy of the request being verified: the answer goes out when that ends.
        return;
    }
    if second_auth::is_second_round(r, h.spi_r) {
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
    after_verify(r, now, h, inner, verified);
}

/// The rest of a first IKE_AUTH round once the client's chain and AUTH were checked:
/// `verified` is the certificate subject, or why the client is refused.
pub(super) fn after_verify(
    r: &mut Responder,
    now: Instant,
    h: Header,
    inner: Vec<Payload>,
    verified: Result<Verified, AuthError>,
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
    // Before we sign: a certificate already holding its share of IKE SAs gets no more.
    if let Err(reason) = admit_identity(r, now, &identity, (&req, kind), remote) {
        let subject = Some(identity.subject.clone());
        return fail_auth(r, (h, now, started), remote, reason, subject);
    }
    let another_follows = match second_auth::check_first_round(r, h.spi_r, &inner, kind) {
        Ok(another) => another,
        Err(reason) => return fail(r, h, now, started, notify::AUTHENTICATION_FAILED, reason),
    };
    let payloads = match our_auth(r, h.spi_r, requested_idr(&inner).as_ref()) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "ike: signing our AUTH failed");
            return fail(
                r,
                h,
                now,
                started,
                notify::AUTHENTICATION_FAILED,
                Refusal::Crypto,
            );
        }
    };
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.peer_id = disconnect_name(&req);
    }
    if another_follows {
        let pending = Pending {
            machine: identity,
            first_request: inner,
            tunnel,
        };
        return second_auth::await_second_round(r, h, pending, payloads);
    }
    let intranet_allowed = second_auth::intranet_allowed(r, h.spi_r);
    establish(r, now, h, &identity, intranet_allowed);
    complete(r, now, (h, &req), identity, tunnel, payloads);
}

/// Whether the verified `identity` may hold one more IKE SA for `tunnel`, the one chosen for
/// it: the `unique_ids` rule, then the per-identity cap (an SA that INITIAL_CONTACT replaces
/// does not count).
pub(super) fn admit_identity(
    r: &mut Responder,
    now: Instant,
    identity: &Verified,
    (req, tunnel): (&AuthRequest<'_>, Option<TunnelKind>),
    remote: SocketAddr,
) -> Result<(), Refusal> {
    let ask = uniqueness::Ask {
        tunnel,
        initial_contact: req.initial_contact,
        remote,
        now,
        subject: &identity.subject,
    };
    if let Err(reason) = uniqueness::admit(r, &identity.key, &ask) {
        if reason == Refusal::DuplicateIdentity {
            tracing::info!(peer = %remote, identity = %identity.subject, "ike: the identity already holds this tunnel (unique_ids = \"keep\")");
        }
        return Err(reason);
    }
    let replacing = uniqueness::replaces(r, req.initial_contact);
    if !caps::identity_has_room(r, &identity.key, tunnel, replacing) {
        tracing::debug!(peer = %remote, identity = %identity.subject, "ike identity cap reached");
        return Err(Refusal::IdentityCap);
    }
    Ok(())
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

/// The identity the client asked us to prove, from the IDr payload of its IKE_AUTH request
/// (RFC 7296 §3.5); none when it sent none or one that does not parse.
pub(super) fn requested_idr(inner: &[Payload]) -> Option<Identity> {
    inner.iter().find_map(|p| match p {
        Payload::IdR(id) => Identity::from_payload_body(&id.body()).ok(),
        _ => None,
    })
}

/// IDr, our certificates and our AUTH over the IKE_SA_INIT response | Ni | prf(SK_pr, IDr')
/// (RFC 7296 §2.15), by RFC 7427 when the client sent SIGNATURE_HASH_ALGORITHMS. IDr is the
/// identity the client asked for when our certificate holds it (a strongSwan client whose
/// `remote.id` is our address or DNS name), else the configured one (`[ipsec] identity`).
pub(super) fn our_auth(
    r: &Responder,
    spi_r: u64,
    requested: Option<&Identity>,
) -> Result<Vec<Payload>, AuthError> {
    let sa = r.sas.get(&spi_r).ok_or(AuthError::Malformed("no IKE SA"))?;
    let credentials = &r.config.credentials;
    let ours = match requested {
        Some(id) if credentials.holds_id(id) => id.clone(),
        _ => credentials.id(),
    };
    let idr = Identification {
        kind: ours.id_type.code(),
        data: ours.data.clone(),
    };
    let octets = [
        &sa.init_response[..],
        &sa.ni,
        &sa.keys.sk_pr.prf(&[&idr.body()]),
    ]
    .concat();
    let method = if sa.peer_hashes.is_empty() {
        credentials.classic_method()
    } else {
        AuthMethod::DigitalSignature
    };
    let (method, data) = credentials.sign(method, &octets, &sa.peer_hashes)?;
    let mut payloads = vec![Payload::IdR(idr)];
    payloads.extend(credentials.chain_der().map(|c| Payload::Cert {
        encoding: super::CERT_X509_SIGNATURE,
        data: c.to_vec(),
    }));
    payloads.push(Payload::Auth {
        method: method.code(),
        data,
    });
    Ok(payloads)
}

/// [`fail`] for a refusal of the client's credentials, reported first with the identity it
/// claimed ([`Event::AuthRefused`]).
pub(super) fn fail_auth(
    r: &mut Responder,
    (h, now, started): (Header, Instant, Instant),
    peer: SocketAddr,
    reason: Refusal,
    identity: Option<String>,
) {
    r.event(Event::AuthRefused {
        peer,
        reason: reason.clone(),
        identity,
    });
    fail(r, h, now, started, notify::AUTHENTICATION_FAILED, reason);
}

/// Finishes the round `verdict` belongs to, first or second, as the synchronous path does.
pub(super) fn handle_verdict(r: &mut Responder, now: Instant, verdict: AuthVerdict) {
    let Some((pending, result)) = auth_jobs::take_verdict(r, verdict) else {
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
        Round::First => after_verify(r, now, header, inner, result),
        Round::Second(first) => second_auth::after_verify(r, now, header, *first, result),
    }
}
