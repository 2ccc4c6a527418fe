//! What both IKE_AUTH rounds share (RFC 7296 §1.2, §2.15; RFC 4739's second round): the
//! client's proof and its verification, the request's payloads, the steps that establish the
//! IKE SA, answer with the first child SA or refuse, and where an IKE SA stands between its
//! rounds. The rounds themselves (the first round's exchange, RFC 4739's second round) and the
//! queue of verification jobs build on this module; it names none of them.

use std::net::{IpAddr, SocketAddr};
use std::time::{Instant, SystemTime};

use super::child::{self, ChildPlan, KeRule};
use super::{Event, Refusal, Responder, caps, cp, uniqueness};
use crate::auth::{
    AuthError, AuthMethod, CertSummary, Identity, IdentityKey, MAX_PEER_CERTS, RevocationKey,
    TrustAnchors,
};
use crate::child_sa::TunnelKind;
use crate::message::{
    Configuration, Header, Identification, Notify, Payload, Proposal, TrafficSelector, cfg,
    find_notify, notify,
};

/// What proves the client's identity in one IKE_AUTH round: IDi, CERTs and AUTH.
pub(super) struct ClientProof<'a> {
    pub(super) id: &'a Identification,
    certs: Vec<&'a [u8]>,
    /// Every CERT payload, whatever its encoding: all count against the cap.
    cert_payloads: usize,
    method: u8,
    auth_data: &'a [u8],
}

impl<'a> ClientProof<'a> {
    /// A proof over owned parts (a verification job's).
    pub(super) fn owned(
        id: &'a Identification,
        certs: &'a [Vec<u8>],
        cert_payloads: usize,
        method: u8,
        auth_data: &'a [u8],
    ) -> Self {
        ClientProof {
            id,
            certs: certs.iter().map(Vec::as_slice).collect(),
            cert_payloads,
            method,
            auth_data,
        }
    }

    /// Its parts, owned: IDi, the X.509 certificates, the CERT payload count, the AUTH method
    /// and data.
    pub(super) fn to_owned_parts(&self) -> OwnedProof {
        (
            self.id.clone(),
            self.certs.iter().map(|c| c.to_vec()).collect(),
            self.cert_payloads,
            self.method,
            self.auth_data.to_vec(),
        )
    }

    /// IDi, the X.509 CERT payloads (leaf first) and AUTH of one request.
    pub(super) fn from_payloads(inner: &'a [Payload]) -> Option<Self> {
        let (mut id, mut auth) = (None, None);
        let mut certs = Vec::new();
        let mut cert_payloads = 0;
        for p in inner {
            match p {
                Payload::IdI(i) => id = Some(i),
                Payload::Cert { encoding, data } => {
                    cert_payloads += 1;
                    if *encoding == super::CERT_X509_SIGNATURE {
                        certs.push(data.as_slice());
                    }
                }
                Payload::Auth { method, data } => auth = Some((*method, data.as_slice())),
                _ => {}
            }
        }
        let (method, auth_data) = auth?;
        Some(ClientProof {
            id: id?,
            certs,
            cert_payloads,
            method,
            auth_data,
        })
    }
}

/// A [`ClientProof`]'s parts, owned: IDi, the X.509 certificates, the CERT payload count, the
/// AUTH method and data.
pub(super) type OwnedProof = (Identification, Vec<Vec<u8>>, usize, u8, Vec<u8>);

/// The payloads of an IKE_AUTH request gate64 uses.
pub(super) struct AuthRequest<'a> {
    pub(super) proof: ClientProof<'a>,
    cp: Option<&'a Configuration>,
    proposals: &'a [Proposal],
    tsi: &'a [TrafficSelector],
    pub(super) tsr: &'a [TrafficSelector],
    /// The tunnel the client named ([`crate::child_sa::named_tunnel`]), if it did.
    pub(super) named: Option<TunnelKind>,
    pub(super) initial_contact: bool,
    /// The client announced MOBIKE_SUPPORTED (RFC 4555 §3.3).
    pub(super) mobike: bool,
    /// The client announced IKEV2_MESSAGE_ID_SYNC_SUPPORTED (RFC 6311 §3).
    pub(super) mid_sync: bool,
    /// The client asked for a Quick Crash Detection token (QCD_TOKEN, RFC 6290 §4.2).
    pub(super) qcd: bool,
}

pub(super) fn request_parts(inner: &[Payload]) -> Option<AuthRequest<'_>> {
    let (mut cp, mut proposals, mut tsi, mut tsr) = (None, None, None, None);
    for p in inner {
        match p {
            Payload::Cp(c) if c.kind == cfg::REQUEST => cp = Some(c),
            Payload::Sa(l) => proposals = Some(l.as_slice()),
            Payload::TsI(l) => tsi = Some(l.as_slice()),
            Payload::TsR(l) => tsr = Some(l.as_slice()),
            _ => {}
        }
    }
    Some(AuthRequest {
        proof: ClientProof::from_payloads(inner)?,
        cp,
        proposals: proposals?,
        tsi: tsi?,
        tsr: tsr?,
        named: crate::child_sa::named_tunnel(inner),
        initial_contact: find_notify(inner, notify::INITIAL_CONTACT).is_some(),
        mobike: find_notify(inner, notify::MOBIKE_SUPPORTED).is_some(),
        qcd: super::qcd::requested(inner),
        mid_sync: crate::mid_sync::announced(inner),
    })
}

/// Checks the client: chain to our CAs at `wall`, ID against the certificate, AUTH over
/// `octets` (RFC 7296 §2.15: the initiator's IKE_SA_INIT request | Nr | prf(SK_pi, IDi')).
/// Returns what identifies the certificate and what a CRL names it by. The number and shape of
/// the certificates are checked first, so a hostile chain costs no path building and no
/// signature check.
pub(super) fn verify_client(
    anchors: &TrustAnchors,
    req: &ClientProof<'_>,
    octets: &[u8],
    wall: SystemTime,
) -> Result<Verified, AuthError> {
    if req.cert_payloads > MAX_PEER_CERTS {
        return Err(AuthError::TooManyCertificates(req.cert_payloads));
    }
    let (leaf, intermediates) = req.certs.split_first().ok_or(AuthError::NoCertificate)?;
    let peer = anchors.verify_peer(leaf, intermediates, wall)?;
    let identity = Identity::from_payload_body(&req.id.body())?;
    if !peer.matches_id(&identity) {
        return Err(AuthError::IdMismatch);
    }
    let method =
        AuthMethod::from_code(req.method).ok_or(AuthError::UnsupportedMethod(req.method))?;
    peer.verify_auth(method, req.auth_data, octets)?;
    // The client proved its key: its chain may skip the signatures next time.
    anchors.remember_verified(&peer);
    Ok(Verified {
        subject: peer.subject(),
        key: peer.identity_key(),
        revocation: peer.revocation_key().cloned(),
        summary: peer.summary().clone(),
        ocsp: peer.ocsp_query().cloned(),
        alt_names: peer.alt_names(),
        names: peer
            .common_names()
            .iter()
            .chain(peer.dns_names())
            .chain(peer.emails())
            .cloned()
            .collect(),
        issuers: peer.issuers().to_vec(),
    })
}

/// A client certificate that verified.
#[derive(Debug, Clone)]
pub(crate) struct Verified {
    /// Its subject as text (RFC 4514 escaping), for logs and `gate64 status`.
    pub(crate) subject: String,
    /// Issuer and subject together: what leases, INITIAL_CONTACT, uniqueness and the
    /// per-identity cap key on.
    pub(crate) key: IdentityKey,
    /// Its issuer and serial, for CRLs loaded later.
    pub(crate) revocation: Option<RevocationKey>,
    /// Issuer, serial and notAfter, for `gate64 status`.
    pub(crate) summary: CertSummary,
    /// What an OCSP lookup of it needs (the driver's verification threads do the lookup).
    pub(crate) ocsp: Option<crate::auth::OcspQuery>,
    /// Its subjectAltNames as text, which `gate64 disconnect` takes.
    pub(crate) alt_names: Vec<String>,
    /// Its subject commonNames, DNS names and email addresses: what a tunnel rule's identity
    /// pattern is matched against.
    pub(crate) names: Vec<String>,
    /// The CAs above it as chain verification found them (issuer first): what a tunnel rule's
    /// CA is matched against.
    pub(crate) issuers: Vec<crate::auth::CaFingerprint>,
}

/// Keeps the certificate's revocation key with IKE SA `spi_r`, so that a later CRL can end
/// it ([`Responder::disconnect_revoked`]).
pub(super) fn remember_certificate(r: &mut Responder, spi_r: u64, verified: &Verified) {
    if let (Some(sa), Some(key)) = (r.sas.get_mut(&spi_r), verified.revocation.clone()) {
        sa.certificates.push(key);
    }
}

/// The tunnel an IKE_AUTH gets and its TSr narrowed into it, as
/// [`super::tunnel_rules::choose`] found it once after the first round verified; `None`: no
/// tunnel takes any of the TSr.
pub(crate) type TunnelChoice = Option<(TunnelKind, Vec<TrafficSelector>)>;

/// Adds the first child SA in `tunnel` (or the notify refusing it), responds and reports the
/// new SAs.
pub(super) fn complete(
    r: &mut Responder,
    now: Instant,
    (h, req): (Header, &AuthRequest<'_>),
    identity: Verified,
    tunnel: TunnelChoice,
    mut payloads: Vec<Payload>,
) {
    let Some((remote, started)) = r.sas.get(&h.spi_r).map(|s| (s.remote, s.started)) else {
        return;
    };
    // RFC 6290 §4.2: the token follows AUTH and precedes the CP and child SA payloads.
    if let (true, Some(secret)) = (req.qcd, r.config.qcd_secret.as_ref()) {
        let token = super::qcd::token_notify(secret, h.spi_i, h.spi_r);
        payloads.push(Payload::Notify(token));
    }
    let (tunnel, pair, result) = match first_child(r, now, h.spi_r, (req, tunnel), &identity.key) {
        Ok((child_payloads, pair)) => {
            payloads.extend(child_payloads);
            (Some(pair.tunnel), Some(pair), Ok(()))
        }
        Err((kind, reason)) => {
            // RFC 7296 §1.2: the IKE SA stands even when its first child SA is refused, but
            // the client did not get what it negotiated for: the negotiation counts under
            // the child's refusal (e.g. `ts_unacceptable`), not as established.
            payloads.push(Payload::Notify(Notify::new(kind, Vec::new())));
            r.refused(remote, reason.clone());
            (None, None, Err(reason))
        }
    };
    let (native, mobike) = closing_notifies(r, h.spi_r, req.mobike, &mut payloads);
    if req.mid_sync {
        payloads.push(crate::mid_sync::supported_notify());
    }
    r.respond(h.spi_r, h, payloads);
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.tunnel = tunnel;
        sa.mobike = mobike;
        sa.mid_sync = req.mid_sync;
    }
    if uniqueness::replaces(r, req.initial_contact) {
        uniqueness::forget_stale(r, h.spi_r, &identity.key, tunnel);
    }
    let eap_user = r
        .sas
        .get(&h.spi_r)
        .and_then(|s| s.eap_second_user())
        .map(str::to_owned);
    let grant = r.sas.get(&h.spi_r).and_then(|s| s.radius.as_deref());
    let (radius_user, filter_id, class) = match grant {
        Some(g) => (Some(g.user.clone()), g.filter_id.clone(), g.class.clone()),
        None => (None, None, Vec::new()),
    };
    tracing::info!(peer = %remote, identity = %identity.subject, ?tunnel, filter_id = filter_id.as_deref().unwrap_or("-"), "ike sa established");
    r.event(Event::IkeSaUp {
        ike_spi: h.spi_i,
        spi_r: h.spi_r,
        peer: remote,
        native,
        identity: identity.subject,
        eap_user,
        tunnel,
        radius_user,
        filter_id,
        class,
    });
    if let Some(pair) = pair {
        r.event(Event::ChildSaUp(Box::new(pair)));
    }
    let claimed = r.sas.get(&h.spi_r).and_then(|s| s.claimed_id.clone());
    r.event(Event::Negotiation {
        result,
        peer: Some(remote),
        identity: claimed,
        duration: now.saturating_duration_since(started),
    });
}

/// The notifies that close an IKE_AUTH response: the seconds until the client must
/// authenticate anew (RFC 4478 §3) and MOBIKE_SUPPORTED when the client asked for it on a
/// native IKE SA (RFC 4555 §3.3; over Teredo and IP-HTTPS the outer address is the
/// transport's). Returns the native socket and whether MOBIKE is on. IKEV2_MESSAGE_ID_SYNC_SUPPORTED
/// (RFC 6311 §3) follows them when the client announced it.
fn closing_notifies(
    r: &Responder,
    spi_r: u64,
    asked_mobike: bool,
    payloads: &mut Vec<Payload>,
) -> (Option<SocketAddr>, bool) {
    if let Some(lifetime) = r.config.reauth {
        let secs = u32::try_from(lifetime.as_secs()).unwrap_or(u32::MAX);
        payloads.push(Payload::Notify(Notify::new(
            notify::AUTH_LIFETIME,
            secs.to_be_bytes().to_vec(),
        )));
    }
    let native = r.sas.get(&spi_r).and_then(|s| r.native_socket(s.local));
    let mobike = asked_mobike && native.is_some();
    if mobike {
        payloads.push(Payload::Notify(Notify::new(
            notify::MOBIKE_SUPPORTED,
            Vec::new(),
        )));
    }
    (native, mobike)
}

/// Marks the IKE SA established and out of the half-open count.
///
/// `intranet_allowed` is whether this IKE SA may build the intranet tunnel, fixed now
/// (RFC 4739 under `required`: the intranet only for an IKE SA whose second round proved a
/// user), so that no later CREATE_CHILD_SA (after a refused first child, or a reload of the
/// policy) can reach it otherwise.
pub(super) fn establish(
    r: &mut Responder,
    now: Instant,
    h: Header,
    identity: &Verified,
    intranet_allowed: bool,
) {
    let issuer = r.intern_issuer(&identity.summary.issuer);
    let name = r.identity_name(&identity.key, &identity.subject, &identity.alt_names);
    let Some(sa) = r.sas.get_mut(&h.spi_r) else {
        return;
    };
    sa.established = true;
    sa.authenticated = Some(now);
    sa.identity = Some(name);
    sa.identity_key = Some(identity.key);
    sa.certificate = Some((issuer, identity.summary.not_after));
    sa.intranet_allowed = intranet_allowed;
    sa.last_heard = now;
    // Its half-open deadline no longer applies: the entry set for it goes stale.
    sa.timer = None;
    // The IKE_SA_INIT messages are only needed for the AUTH octets.
    sa.init_request = Vec::new();
    sa.init_response = Vec::new();
    let charge = sa.half_open.take();
    r.index_identity(identity.key, h.spi_r);
    if let Some(charge) = charge {
        // Against the source it was charged to: IKE_AUTH may have moved `remote`.
        r.half_open.release(charge);
    }
    r.schedule(h.spi_r);
}

/// Answers with the error notify `kind`, ends the negotiation and forgets the half-open SA.
pub(super) fn fail(
    r: &mut Responder,
    h: Header,
    now: Instant,
    started: Instant,
    kind: u16,
    reason: Refusal,
) {
    r.respond(
        h.spi_r,
        h,
        vec![Payload::Notify(Notify::new(kind, Vec::new()))],
    );
    let (peer, claimed) = match r.sas.get(&h.spi_r) {
        Some(s) => (Some(s.remote), s.claimed_id.clone()),
        None => (None, None),
    };
    if let Some(peer) = peer {
        r.refused(peer, reason.clone());
    }
    r.event(Event::Negotiation {
        result: Err(reason),
        peer,
        identity: claimed,
        duration: now.saturating_duration_since(started),
    });
    r.remove_sa(h.spi_r);
}

/// The child SA of IKE_AUTH: ESP proposal, the tunnel chosen for the IKE SA with its TSr,
/// inner address (CP or the outer address), TSi narrowed to it; the payloads CP, SA, TSi, TSr.
fn first_child(
    r: &mut Responder,
    now: Instant,
    spi_r: u64,
    (req, tunnel): (&AuthRequest<'_>, TunnelChoice),
    identity: &IdentityKey,
) -> Result<(Vec<Payload>, crate::child_sa::ChildSaPair), child::ChildError> {
    let suites = r
        .sas
        .get(&spi_r)
        .map(|sa| child::esp_suites_for(&r.config, sa.local, sa.remote))
        .unwrap_or_default();
    let choice = child::choose_esp_proposal(req.proposals, KeRule::Ignore, &suites)?;
    let (tunnel, tsr) = tunnel.ok_or((notify::TS_UNACCEPTABLE, Refusal::TsUnacceptable))?;
    let (inner, wants_address, inner4) = inner_addresses(r, spi_r, req, identity)?;
    let Some((tsi, tsr)) = child::fit_selectors(req.tsi, tsr, inner, inner4) else {
        if wants_address {
            r.pool.release(identity);
        }
        if let (Some(_), Some(pool4)) = (inner4, r.pool4.as_mut()) {
            pool4.release(identity);
        }
        return Err((notify::TS_UNACCEPTABLE, Refusal::TsUnacceptable));
    };
    let (ni, nr) = match r.sas.get_mut(&spi_r) {
        Some(sa) => {
            sa.inner = Some(inner);
            sa.leased = wants_address;
            sa.inner4 = inner4;
            sa.local_ts = tsr.clone();
            (sa.ni.clone(), sa.nr.clone())
        }
        None => return Err((notify::TEMPORARY_FAILURE, Refusal::UnknownSpi)),
    };
    let plan = ChildPlan {
        choice,
        tunnel,
        tsi: tsi.clone(),
        tsr: tsr.clone(),
        inner,
        inner4: inner4.filter(|_| tsi.iter().any(|t| t.start.is_ipv4())),
        ni: &ni,
        nr: &nr,
        pfs: None,
    };
    let (pair, proposal) = child::build_child(r, now, spi_r, plan)
        .map_err(|_| (notify::TEMPORARY_FAILURE, Refusal::Crypto))?;
    let mut payloads = Vec::new();
    if let Some(request) = req.cp {
        payloads.extend(cp::cfg_reply(
            request,
            (wants_address.then_some(inner), inner4),
            tunnel,
            &r.config,
        ));
    }
    payloads.extend([
        Payload::Sa(vec![proposal]),
        Payload::TsI(tsi),
        Payload::TsR(tsr),
    ]);
    Ok((payloads, pair))
}

/// The inner addresses of IKE_AUTH's child SA: IPv6 from the RADIUS server's Framed-IPv6
/// or `pool6` when the client asks (else its outer address, and `false`), IPv4 from the
/// Framed-IP or `pool4` when it asks and the pool is set.
fn inner_addresses(
    r: &mut Responder,
    spi_r: u64,
    req: &AuthRequest<'_>,
    identity: &IdentityKey,
) -> Result<(IpAddr, bool, Option<std::net::Ipv4Addr>), child::ChildError> {
    let wants_address = req.cp.is_some_and(|c| c.has(cfg::INTERNAL_IP6_ADDRESS));
    let (remote_ip, framed6, framed4) = r
        .sas
        .get(&spi_r)
        .map(|s| {
            let g = s.radius.as_deref();
            (
                s.remote.ip(),
                g.and_then(|g| g.framed6),
                g.and_then(|g| g.framed4),
            )
        })
        .ok_or((notify::TEMPORARY_FAILURE, Refusal::UnknownSpi))?;
    // A RADIUS server's address was checked before the IKE SA was established
    // (`authz::check_framed`); claiming it fails only if another IKE SA took it since.
    let inner: IpAddr = match (wants_address, framed6) {
        (true, Some(a)) => IpAddr::V6(
            r.pool
                .claim(identity, a)
                .map_err(|_| (notify::INTERNAL_ADDRESS_FAILURE, Refusal::FramedAddress))?,
        ),
        (true, None) => IpAddr::V6(
            r.pool
                .lease(identity)
                .ok_or((notify::INTERNAL_ADDRESS_FAILURE, Refusal::PoolExhausted))?,
        ),
        (false, _) => remote_ip,
    };
    let wants4 = req.cp.is_some_and(|c| c.has(cfg::INTERNAL_IP4_ADDRESS));
    // An exhausted IPv4 pool leaves the client with IPv6 inside the tunnel, as if it had
    // not asked: IPv4 is the extra here, not a reason to refuse the tunnel.
    let inner4 = match (r.pool4.as_mut(), framed4) {
        (Some(pool4), Some(a)) if wants4 => pool4.claim(identity, a).ok(),
        (Some(pool4), None) if wants4 => pool4.lease(identity),
        _ => None,
    };
    Ok((inner, wants_address, inner4))
}

/// Where one IKE SA stands in RFC 4739.
#[derive(Debug, Clone, Default)]
pub(crate) enum SecondAuth {
    /// We did not announce MULTIPLE_AUTH_SUPPORTED (policy `off`).
    #[default]
    NotAnnounced,
    /// Our IKE_SA_INIT response announced MULTIPLE_AUTH_SUPPORTED; the client may ask for
    /// a second round.
    Announced,
    /// The first round verified and was answered; the second IKE_AUTH is due.
    Awaiting(Box<Pending>),
    /// Both rounds verified: the second identity (the user certificate's subject).
    Done(Box<str>),
}

/// What the second round needs from the first.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The first round's identity (the machine certificate).
    pub(super) machine: Verified,
    /// The first IKE_AUTH request: its SA, TS and CP are answered after the second round.
    pub(super) first_request: Vec<Payload>,
    /// The tunnel the first round chose, with its TSr.
    pub(super) tunnel: TunnelChoice,
    /// The body of the IDr our first answer carried: an EAP second round's last AUTH covers
    /// it (RFC 7296 §2.16).
    pub(super) idr_body: Vec<u8>,
}

impl SecondAuth {
    /// The user identity, once the second round verified.
    pub(crate) fn user(&self) -> Option<&str> {
        match self {
            SecondAuth::Done(user) => Some(user),
            _ => None,
        }
    }

    pub(super) fn is_awaiting(&self) -> bool {
        matches!(self, SecondAuth::Awaiting(_))
    }
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

/// The identity the client asked us to prove, from the IDr payload of its IKE_AUTH request
/// (RFC 7296 §3.5); none when it sent none or one that does not parse.
pub(super) fn requested_idr(inner: &[Payload]) -> Option<Identity> {
    inner.iter().find_map(|p| match p {
        Payload::IdR(id) => Identity::from_payload_body(&id.body()).ok(),
        _ => None,
    })
}

/// IDr, our certificates and our AUTH over the IKE_SA_INIT response | Ni | prf(SK_pr, IDr')
/// (RFC 7296 §2.15), signed here, on the calling thread ([`super::own_auth`]).
pub(super) fn our_auth(
    r: &Responder,
    spi_r: u64,
    requested: Option<&Identity>,
) -> Result<Vec<Payload>, AuthError> {
    super::own_auth::prepare(r, spi_r, requested)?.sign()
}

/// The body of the IDr among our `payloads` (from [`our_auth`]), for the AUTH keyed by an
/// EAP MSK at the end.
pub(super) fn idr_body(payloads: &[Payload]) -> Vec<u8> {
    payloads
        .iter()
        .find_map(|p| match p {
            Payload::IdR(id) => Some(id.body()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Our IDr, certificates and AUTH for the IKE_AUTH request `inner` (its IDr asks for our
/// identity): `signed` when a verification job already signed them (after the client's AUTH
/// verified), else [`our_auth`] here. When signing failed (a fault of ours, logged at warn),
/// the IKE SA is refused with AUTHENTICATION_FAILED under `crypto` and `None` returned.
pub(super) fn our_auth_or_fail(
    r: &mut Responder,
    (h, now, started): (Header, Instant, Instant),
    inner: &[Payload],
    signed: Option<Result<Vec<Payload>, AuthError>>,
) -> Option<Vec<Payload>> {
    let signed = signed.unwrap_or_else(|| our_auth(r, h.spi_r, requested_idr(inner).as_ref()));
    match signed {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(error = %e, "ike: signing our AUTH failed");
            fail(
                r,
                h,
                now,
                started,
                notify::AUTHENTICATION_FAILED,
                Refusal::Crypto,
            );
            None
        }
    }
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
