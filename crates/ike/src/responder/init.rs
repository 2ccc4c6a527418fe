//! IKE_SA_INIT (RFC 7296 §1.2): proposal choice, key exchange, NAT detection (§2.23),
//! stateless cookies (§2.6) and the half-open limits.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use super::ike_policy;
use super::init_jobs::{self, PendingInit};
pub(crate) use super::init_reply::error_response;
use super::proposal::{Choice, choose_ike_proposal, fresh_spi};
use super::{Event, Refusal, Responder, caps, half_open, second_auth};
use crate::auth::SigHash;
use crate::keys::{self, CryptoError, Group, Suite};
use crate::message::{Header, Message, Payload, Proposal, find_notify, notify};

/// Cookie: one version byte, then 16 bytes of the keyed hash.
const COOKIE_HASH_LEN: usize = 16;

/// The secrets behind stateless cookies: the current one and the one before it.
pub(crate) struct CookieSecrets {
    current: Vec<u8>,
    previous: Option<Vec<u8>>,
    version: u8,
    rotated: Instant,
}

impl CookieSecrets {
    pub(crate) fn new(now: Instant) -> Result<Self, CryptoError> {
        Ok(CookieSecrets {
            current: keys::random_bytes(32)?,
            previous: None,
            version: 0,
            rotated: now,
        })
    }

    pub(crate) fn next_rotation(&self, period: Duration) -> Instant {
        self.rotated + period
    }

    pub(crate) fn rotate_if_due(&mut self, now: Instant, period: Duration) {
        if now < self.rotated + period {
            return;
        }
        if let Ok(fresh) = keys::random_bytes(32) {
            self.previous = Some(std::mem::replace(&mut self.current, fresh));
            self.version = self.version.wrapping_add(1);
            self.rotated = now;
        }
    }

    /// RFC 7296 §2.6: Cookie = VersionIDofSecret | Hash(Ni | IPi | SPIi | secret).
    fn make(&self, ni: &[u8], ip: IpAddr, spi_i: u64) -> Vec<u8> {
        let mut out = vec![self.version];
        out.extend_from_slice(&Self::hash(&self.current, ni, ip, spi_i));
        out
    }

    fn check(&self, cookie: &[u8], ni: &[u8], ip: IpAddr, spi_i: u64) -> bool {
        let Some((&version, hash)) = cookie.split_first() else {
            return false;
        };
        let secret = if version == self.version {
            Some(&self.current)
        } else if version == self.version.wrapping_sub(1) {
            self.previous.as_ref()
        } else {
            None
        };
        secret.is_some_and(|s| {
            let expected = Self::hash(s, ni, ip, spi_i);
            aws_lc_rs::constant_time::verify_slices_are_equal(hash, &expected).is_ok()
        })
    }

    fn hash(secret: &[u8], ni: &[u8], ip: IpAddr, spi_i: u64) -> Vec<u8> {
        let ip = match ip {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        let mut h = keys::Prf::HmacSha256.prf(secret, &[ni, &ip, &spi_i.to_be_bytes()]);
        h.truncate(COOKIE_HASH_LEN);
        h
    }
}

struct InitRequest<'a> {
    proposals: &'a [Proposal],
    group: u16,
    ke: &'a [u8],
    ni: &'a [u8],
}

fn request_parts(m: &Message) -> Option<InitRequest<'_>> {
    let mut proposals = None;
    let mut ke = None;
    let mut ni = None;
    for p in &m.payloads {
        match p {
            Payload::Sa(list) => proposals = Some(list.as_slice()),
            Payload::Ke { group, data } => ke = Some((*group, data.as_slice())),
            Payload::Nonce(n) => ni = Some(n.as_slice()),
            _ => {}
        }
    }
    let (group, ke) = ke?;
    Some(InitRequest {
        proposals: proposals?,
        group,
        ke,
        ni: ni?,
    })
}

/// Handles an IKE_SA_INIT request (SPIr zero).
pub(super) fn handle(
    r: &mut Responder,
    now: Instant,
    local: SocketAddr,
    remote: SocketAddr,
    datagram: &[u8],
    m: &Message,
) {
    let h = m.header;
    if h.message_id != 0 || !h.from_initiator() {
        return r.refused(remote, Refusal::Malformed);
    }
    if let Some(&spi) = r.by_initiator.get(&(remote, h.spi_i))
        && init_jobs::is_pending(r, spi)
    {
        // Its key exchange is being computed: the response goes out when that ends.
        return;
    }
    if let Some(sa) = r
        .by_initiator
        .get(&(remote, h.spi_i))
        .and_then(|spi| r.sas.get(spi))
    {
        // RFC 7296 §2.1: a retransmitted IKE_SA_INIT gets the same response; another request
        // with the same SPIi from the same peer is ignored.
        if sa.init_request == datagram && !sa.established {
            let (l, bytes) = (sa.local, sa.init_response.clone());
            r.stats.retransmits += 1;
            r.transmit(l, remote, bytes);
        }
        return;
    }
    let Some(req) = request_parts(m) else {
        r.transmit(
            local,
            remote,
            error_response(h, notify::INVALID_SYNTAX, Vec::new()),
        );
        return r.refused(remote, Refusal::Malformed);
    };
    if !admit(r, (local, remote), datagram.len(), m, &req) {
        return;
    }
    let chosen = match choose_ike_proposal(req.proposals, req.group, &r.config.ike_policy) {
        Choice::Accept(number, suite, group) => (number, suite, group),
        Choice::WrongGroup(g) => {
            let reply =
                error_response(h, notify::INVALID_KE_PAYLOAD, g.id().to_be_bytes().to_vec());
            r.transmit(local, remote, reply);
            return r.refused(remote, Refusal::InvalidKe);
        }
        Choice::None => {
            log_refused_proposals(r, remote, req.proposals);
            r.transmit(
                local,
                remote,
                error_response(h, notify::NO_PROPOSAL_CHOSEN, Vec::new()),
            );
            r.event(Event::Negotiation {
                result: Err(Refusal::NoProposal),
                peer: Some(remote),
                identity: None,
                duration: Duration::ZERO,
            });
            return r.refused(remote, Refusal::NoProposal);
        }
    };
    match establish_half_open(r, now, local, remote, datagram, m, &req, chosen) {
        Ok(()) => {}
        Err(CryptoError::PeerPublicValue) => {
            r.transmit(
                local,
                remote,
                error_response(h, notify::INVALID_SYNTAX, Vec::new()),
            );
            r.refused(remote, Refusal::Malformed);
        }
        Err(CryptoError::Library) => r.refused(remote, Refusal::Crypto),
    }
}

/// The caps, the cookie and the per-source checks; answers with a cookie when one is needed.
fn admit(
    r: &mut Responder,
    (local, remote): (SocketAddr, SocketAddr),
    datagram_len: usize,
    m: &Message,
    req: &InitRequest<'_>,
) -> bool {
    let h = m.header;
    // The caps first: they cost nothing, a cookie costs a MAC and an answer.
    if !caps::ike_sa_fits(r) {
        r.refused(remote, Refusal::IkeSaCap);
        return false;
    }
    if !half_open::has_room(r, half_open::FIXED_BYTES + datagram_len) {
        r.refused(remote, Refusal::HalfOpenBytes);
        return false;
    }
    if r.half_open.count() >= r.config.half_open_cookie_threshold {
        let cookie = match m.payloads.first() {
            Some(Payload::Notify(n)) if n.kind == notify::COOKIE => Some(n.data.as_slice()),
            _ => None,
        };
        let valid = cookie.is_some_and(|c| r.cookie_secrets.check(c, req.ni, remote.ip(), h.spi_i));
        if !valid {
            let cookie = r.cookie_secrets.make(req.ni, remote.ip(), h.spi_i);
            r.transmit(local, remote, error_response(h, notify::COOKIE, cookie));
            r.event(Event::CookieSent { peer: remote });
            r.refused(remote, Refusal::CookieRequired);
            return false;
        }
    }
    let from_source = r.half_open.of_source(remote.ip());
    if from_source >= r.config.max_half_open_per_source {
        r.refused(remote, Refusal::HalfOpenCap);
        return false;
    }
    let host_cap = r
        .config
        .max_half_open_per_source
        .saturating_mul(super::half_open::HOST_SHARE);
    if r.half_open.of_host(remote.ip()) >= host_cap {
        r.refused(remote, Refusal::HalfOpenHostCap);
        return false;
    }
    true
}

/// Chooses the SPIr, counts the request as half-open and hands its key exchange to
/// `init_jobs` (a job for the driver, or inline), which answers it.
#[allow(clippy::too_many_arguments)]
fn establish_half_open(
    r: &mut Responder,
    now: Instant,
    local: SocketAddr,
    remote: SocketAddr,
    datagram: &[u8],
    m: &Message,
    req: &InitRequest<'_>,
    chosen: (u8, Suite, Group),
) -> Result<(), CryptoError> {
    let h = m.header;
    let spi_r = fresh_spi(r)?;
    let peer_hashes = find_notify(&m.payloads, notify::SIGNATURE_HASH_ALGORITHMS)
        .and_then(|n| SigHash::parse_notify(&n.data).ok())
        .unwrap_or_default();
    let peer_fragmentation =
        find_notify(&m.payloads, notify::IKEV2_FRAGMENTATION_SUPPORTED).is_some();
    let charge = r
        .half_open
        .charge(remote.ip(), init_jobs::pending_bytes(datagram.len()));
    let pending = PendingInit {
        header: Header { spi_r, ..h },
        local,
        remote,
        request: datagram.to_vec(),
        ni: req.ni.to_vec(),
        chosen,
        peer_hashes,
        peer_fragmentation,
        second_auth: second_auth::announce(r.config.intranet_second_auth),
        started: now,
        charge,
    };
    init_jobs::submit(r, pending, req.ke);
    Ok(())
}

/// Logs a client whose IKE proposals offered nothing acceptable: at warn level, naming
/// `ipsec.legacy_proposals`, when they held 3DES, SHA1 or MODP-1024 (Windows' default set),
/// since that key is then the likely fix; at info level otherwise.
pub(super) fn log_refused_proposals(r: &Responder, remote: SocketAddr, proposals: &[Proposal]) {
    let offered = ike_policy::describe(proposals);
    let legacy = ike_policy::legacy_offered(proposals);
    if legacy.is_empty() {
        tracing::info!(peer = %remote, proposals = %offered, "no acceptable IKE proposal");
    } else if r.config.ike_policy.legacy {
        tracing::warn!(
            peer = %remote,
            proposals = %offered,
            legacy = %legacy.join(","),
            "no acceptable IKE proposal: ipsec.legacy_proposals is set, but 3DES is never \
             accepted and ipsec.ike_proposals may narrow the rest"
        );
    } else {
        tracing::warn!(
            peer = %remote,
            proposals = %offered,
            legacy = %legacy.join(","),
            "no acceptable IKE proposal: the client offers legacy algorithms, which \
             ipsec.legacy_proposals = true accepts (SHA1, MODP-1024; never 3DES)"
        );
    }
}
