//! RFC 4739 multiple authentication: a machine certificate in the first IKE_AUTH round and a
//! user certificate in a second one, as DirectAccess builds its intranet tunnel.
//!
//! The exchange (RFC 4739 §3, both rounds with certificates):
//!
//! ```text
//! HDR, SAi1, KEi, Ni                                     -->
//!                <-- HDR, SAr1, KEr, Nr, N(MULTIPLE_AUTH_SUPPORTED)
//! HDR, SK {IDi, CERT, AUTH, SAi2, TSi, TSr,
//!          N(MULTIPLE_AUTH_SUPPORTED), N(ANOTHER_AUTH_FOLLOWS)} -->
//!                <-- HDR, SK {IDr, CERT, AUTH}
//! HDR, SK {IDi', CERT', AUTH'}                            -->
//!                <-- HDR, SK {SAr2, TSi, TSr}
//! ```
//!
//! A second round that asks for EAP (IDi without AUTH) runs in `eap.rs` instead, when
//! `[[ipsec.eap_radius]]` is configured; this module handles the certificate one.
//!
//! The state lives in one [`SecondAuth`] per IKE SA, so the rest of the SA is untouched: the
//! first request is kept (its SA, TS and CP payloads are answered only after the second round)
//! until the second round ends or the half-open timeout forgets the SA.

use std::time::Instant;

use super::auth_jobs::{self, Round};
use super::auth_round::{self, ClientProof, Pending, SecondAuth};
use super::{Refusal, Responder};
use crate::auth::AuthError;
use crate::child_sa::TunnelKind;
use crate::message::{Header, Payload, find_notify, notify};

/// When gate64 asks for, or accepts, a second authentication (`[ipsec] intranet_second_auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecondAuthPolicy {
    /// Never offered: no MULTIPLE_AUTH_SUPPORTED; an ANOTHER_AUTH_FOLLOWS is refused.
    Off,
    /// Offered to every client; run when the client asks, on either tunnel.
    #[default]
    Optional,
    /// As `Optional`, and the intranet tunnel is refused (AUTHENTICATION_FAILED) to a client
    /// that authenticates only once.
    Required,
}

/// Whether IKE SA `spi_r`, now established, may build the intranet tunnel: always, unless
/// `intranet_second_auth = "required"`, which asks that a second round proved a user.
pub(super) fn intranet_allowed(r: &Responder, spi_r: u64) -> bool {
    r.config.intranet_second_auth != SecondAuthPolicy::Required
        || r.sas
            .get(&spi_r)
            .is_some_and(|sa| matches!(sa.second_auth, SecondAuth::Done(_)))
}

/// At IKE_SA_INIT: whether our response announces MULTIPLE_AUTH_SUPPORTED. RFC 4739 §3.1:
/// the responder announces it in the IKE_SA_INIT response, the initiator in its first
/// IKE_AUTH request, so the responder cannot wait for the client's; a client that does not
/// know it ignores an unknown status notify (RFC 7296 §3.10.1).
pub(crate) fn announce(policy: SecondAuthPolicy) -> SecondAuth {
    if policy == SecondAuthPolicy::Off {
        SecondAuth::NotAnnounced
    } else {
        SecondAuth::Announced
    }
}

/// The notify the IKE_SA_INIT response carries for `state`.
pub(crate) fn init_notify(state: &SecondAuth) -> Option<Payload> {
    matches!(state, SecondAuth::Announced).then(|| {
        Payload::Notify(crate::message::Notify::new(
            notify::MULTIPLE_AUTH_SUPPORTED,
            Vec::new(),
        ))
    })
}

/// Whether an IKE_AUTH request on IKE SA `spi_r` is the second round.
pub(crate) fn is_second_round(r: &Responder, spi_r: u64) -> bool {
    r.sas
        .get(&spi_r)
        .is_some_and(|s| s.second_auth.is_awaiting())
}

/// After the first round's AUTH verified, for an IKE SA whose tunnel is `tunnel`: `Ok(true)`
/// when a second round follows, `Ok(false)` when the IKE SA completes now, `Err` when the
/// policy refuses either.
pub(crate) fn check_first_round(
    r: &Responder,
    spi_r: u64,
    request: &[Payload],
    tunnel: Option<TunnelKind>,
) -> Result<bool, Refusal> {
    let another = find_notify(request, notify::ANOTHER_AUTH_FOLLOWS).is_some();
    let announced = r
        .sas
        .get(&spi_r)
        .is_some_and(|s| matches!(s.second_auth, SecondAuth::Announced));
    if another {
        // RFC 4739 §3.2: ANOTHER_AUTH_FOLLOWS only to a responder that announced support.
        return if announced {
            Ok(true)
        } else {
            Err(Refusal::Authentication(
                "second authentication not announced (RFC 4739)".into(),
            ))
        };
    }
    let intranet = tunnel == Some(TunnelKind::Intranet);
    if intranet && r.config.intranet_second_auth == SecondAuthPolicy::Required {
        return Err(Refusal::Authentication(
            "the intranet tunnel requires a second authentication (RFC 4739)".into(),
        ));
    }
    Ok(false)
}

/// Answers the first round with our IDr, CERT and AUTH only (RFC 4739 §3: no SA, TSi, TSr
/// until the last round) and keeps what the first round found (the machine certificate, the
/// request, the tunnel) for the second.
pub(crate) fn await_second_round(
    r: &mut Responder,
    h: Header,
    pending: Pending,
    our_auth: Vec<Payload>,
) {
    r.respond(h.spi_r, h, our_auth);
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.second_auth = SecondAuth::Awaiting(Box::new(pending));
    }
}

/// The second IKE_AUTH request: IDi, CERT and AUTH of the user, verified as the first round
/// was (RFC 4739 §3: the AUTH covers the same IKE_SA_INIT request and Nr, with this round's
/// IDi); then the child SA the first request asked for.
pub(crate) fn handle_second_round(r: &mut Responder, now: Instant, h: Header, inner: Vec<Payload>) {
    let Some(sa) = r.sas.get_mut(&h.spi_r) else {
        return;
    };
    let started = sa.started;
    let SecondAuth::Awaiting(pending) = std::mem::take(&mut sa.second_auth) else {
        return;
    };
    let Some(proof) = ClientProof::from_payloads(&inner) else {
        // No AUTH: a round asking for EAP without `[[ipsec.eap_radius]]` (with it the round
        // went to `eap::start_second`), or a truncated one.
        let reason = Refusal::Authentication("second round without IDi and AUTH".into());
        return auth_round::fail(r, h, now, started, notify::AUTHENTICATION_FAILED, reason);
    };
    if find_notify(&inner, notify::ANOTHER_AUTH_FOLLOWS).is_some() {
        let reason = Refusal::Authentication("more than two authentication rounds".into());
        return auth_round::fail(r, h, now, started, notify::AUTHENTICATION_FAILED, reason);
    }
    let octets = [
        &sa.init_request[..],
        &sa.nr,
        &sa.keys.sk_pi.prf(&[&proof.id.body()]),
    ]
    .concat();
    if r.config.offload_auth {
        let owned = proof.to_owned_parts();
        let round = Round::Second(pending);
        return auth_jobs::submit(r, now, (h, inner), owned, octets, round);
    }
    let anchors = r.config.second_round_anchors();
    let verified = auth_round::verify_client(anchors, &proof, &octets, r.wall(now));
    after_verify(r, now, h, *pending, verified);
}

/// The rest of the second round once the user's chain and AUTH were checked: `verified` is
/// the user certificate's subject, or why it is refused; `pending` is what the first round
/// left.
pub(crate) fn after_verify(
    r: &mut Responder,
    now: Instant,
    h: Header,
    pending: Pending,
    verified: Result<auth_round::Verified, AuthError>,
) {
    let Some((remote, started)) = r.sas.get(&h.spi_r).map(|s| (s.remote, s.started)) else {
        return;
    };
    let user = match verified {
        Ok(verified) => verified,
        Err(e) => {
            tracing::debug!(peer = %remote, error = %e, "ike second authentication failed");
            let reason = Refusal::from(&e);
            return auth_round::fail(r, h, now, started, notify::AUTHENTICATION_FAILED, reason);
        }
    };
    // The second round proves a user: the machine's identity again proves nothing more.
    if user.key == pending.machine.key {
        tracing::debug!(peer = %remote, user = %user.subject, "ike second round repeated the machine identity");
        let reason = Refusal::Authentication("the second round proved the machine again".into());
        return auth_round::fail(r, h, now, started, notify::AUTHENTICATION_FAILED, reason);
    }
    if auth_round::request_parts(&pending.first_request).is_none() {
        return auth_round::fail(
            r,
            h,
            now,
            started,
            notify::INVALID_SYNTAX,
            Refusal::Malformed,
        );
    }
    auth_round::remember_certificate(r, h.spi_r, &user);
    tracing::debug!(peer = %remote, machine = %pending.machine.subject, user = %user.subject, "ike second authentication");
    let radius_user = user.subject.clone();
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.second_auth = SecondAuth::Done(user.subject.into());
    }
    let intranet_allowed = intranet_allowed(r, h.spi_r);
    let Pending {
        machine,
        tunnel,
        first_request,
        ..
    } = pending;
    // RADIUS, when it authorizes certificates, authorizes the user (`cert_authz.rs`).
    let conclusion = super::cert_authz::Conclusion {
        request: first_request,
        identity: machine,
        tunnel,
        payloads: Vec::new(),
        intranet_allowed,
        user: radius_user,
    };
    super::cert_authz::conclude(r, now, h, conclusion);
}
