//! What the responder reports to its driver: events, refusal reasons (metric labels) and
//! counters.

use std::net::SocketAddr;
use std::time::Duration;

use crate::auth::AuthError;
use crate::child_sa::{ChildSaPair, TunnelKind};

/// Which kind of SA was rekeyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RekeyKind {
    /// An IKE SA.
    Ike,
    /// A child SA.
    Child,
}

impl RekeyKind {
    /// Metric label (`gate64_ipsec_rekeys_total{kind}`).
    pub fn label(self) -> &'static str {
        match self {
            RekeyKind::Ike => "ike",
            RekeyKind::Child => "child",
        }
    }
}

/// Why the responder itself ended an established IKE SA (`gate64_ipsec_disconnects_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// A new IKE_AUTH of the same identity for the same tunnel took its place
    /// (`unique_ids = "replace"`, or the client's INITIAL_CONTACT), or a newer IKE SA of
    /// the identity synced from the HA peer, with another inner address, was installed.
    Replaced,
    /// The client did not authenticate anew within `reauth` and its grace (RFC 4478).
    Reauth,
    /// The certificate it was authenticated with passed its notAfter.
    Expired,
    /// A CRL in force lists the certificate it was authenticated with (found at a
    /// CREATE_CHILD_SA, or by [`super::Responder::disconnect_revoked`] after new CRLs).
    Revoked,
    /// The administrator ended it ([`super::Responder::disconnect`], `gate64 disconnect`).
    Administrator,
    /// A RADIUS Disconnect-Request (RFC 5176) ended it ([`super::Responder::disconnect_for`]).
    Radius,
    /// The end a RADIUS CoA-Request's Session-Timeout set passed
    /// ([`super::Responder::set_session_end`]).
    SessionTimeout,
}

/// Why a request, or a whole negotiation, was refused. Labels are metric label values.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The datagram is not an IKE message, or lacks required payloads.
    Malformed,
    /// An unknown payload had the critical bit.
    UnsupportedCritical,
    /// No acceptable proposal (IKE or ESP).
    NoProposal,
    /// The KE payload used another group; INVALID_KE_PAYLOAD sent.
    InvalidKe,
    /// Above the half-open threshold without a valid cookie; COOKIE sent.
    CookieRequired,
    /// Too many half-open IKE SAs from this source (an IPv4 address, an IPv6 /64, a Teredo
    /// client's mapping).
    HalfOpenCap,
    /// Too many half-open IKE SAs from this source's host: all Teredo mappings of one public
    /// IPv4 address, all /64s of one IPv6 /48.
    HalfOpenHostCap,
    /// The half-open IKE SAs hold `max_half_open_bytes`: no new one, no new fragment.
    HalfOpenBytes,
    /// `max_ike_sas` IKE SAs are held: no new one.
    IkeSaCap,
    /// The identity holds `max_ike_sas_per_identity` IKE SAs.
    IdentityCap,
    /// The identity already has an IKE SA for this tunnel and `unique_ids = "keep"`.
    DuplicateIdentity,
    /// Under `unique_ids = "replace"`, a second IKE SA of the identity asks, from the same
    /// address and without INITIAL_CONTACT, for the tunnel that one of its IKE SAs took less
    /// than [`super::uniqueness::REPLACE_HOLDOFF`] ago: two IKE SAs of one client that both
    /// end up as the same tunnel, which would otherwise replace each other in turn.
    SameTunnel,
    /// The IKE SA holds `max_child_sas_per_ike_sa` child SAs.
    ChildSaCap,
    /// No IKE SA for the SPIs.
    UnknownSpi,
    /// A message ID outside the window.
    MessageId,
    /// An authentic second answer to gate64's last request (a liveness or return-routability
    /// check) already answered: the client answered a retransmission of it too, or the path
    /// duplicated the answer. Harmless, and kept apart from [`Refusal::MessageId`] so that
    /// one says what it should.
    LateResponse,
    /// A duplicate request from another address or port than the original: the cached
    /// response is not reflected there.
    RetransmitElsewhere,
    /// The SK payload did not verify.
    Integrity,
    /// Certificate, identity or AUTH refused (the [`crate::auth::AuthError`] text).
    Authentication(String),
    /// The client's certificate (or an intermediate) is on its issuer's CRL, or its OCSP
    /// responder says it is revoked.
    Revoked,
    /// `ocsp = "require"` and no OCSP answer said the certificate is good.
    OcspUnavailable,
    /// More CERT payloads than [`crate::auth::MAX_PEER_CERTS`]; refused before any parse.
    TooManyCerts,
    /// The certificates do not form one linear chain ([`crate::auth::check_chain_shape`]);
    /// refused before path building or any signature check.
    ChainNotLinear,
    /// Traffic selectors fit neither tunnel.
    TsUnacceptable,
    /// The address pool is exhausted.
    PoolExhausted,
    /// A half-open IKE SA timed out.
    Timeout,
    /// An exchange or request we do not serve (e.g. EAP while none is configured,
    /// transport mode).
    Unsupported,
    /// Our crypto library failed.
    Crypto,
    /// EAP refused: the RADIUS server rejected the client, none answered, or the client's
    /// AUTH keyed by the MSK did not verify.
    Eap,
    /// An EAP exchange beyond [`super::EapPolicy`]'s bounds: exchanges in progress, round
    /// trips or time.
    EapCap,
    /// A RADIUS server assigned an inner address (Framed-IPv6-Address, Framed-IPv6-Prefix,
    /// Framed-IP-Address) that the pools cannot give: outside them, reserved, or held.
    FramedAddress,
    /// `authorize_certificates = "radius"` and the RADIUS server rejected the certificate
    /// client, or none answered.
    Radius,
}

impl Refusal {
    /// What went wrong, for a log line: the authentication error's text for
    /// [`Refusal::Authentication`] (e.g. "certificate expired"), else the label.
    pub fn cause(&self) -> &str {
        match self {
            Refusal::Authentication(text) => text,
            other => other.label(),
        }
    }

    /// Metric label (`gate64_ike_negotiations_total{result}`).
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::UnsupportedCritical => "unsupported_critical",
            Refusal::NoProposal => "no_proposal",
            Refusal::InvalidKe => "invalid_ke",
            Refusal::CookieRequired => "cookie_required",
            Refusal::HalfOpenCap => "half_open_cap",
            Refusal::HalfOpenHostCap => "half_open_host_cap",
            Refusal::HalfOpenBytes => "half_open_bytes",
            Refusal::IkeSaCap => "ike_sa_cap",
            Refusal::IdentityCap => "identity_cap",
            Refusal::DuplicateIdentity => "duplicate_identity",
            Refusal::SameTunnel => "same_tunnel",
            Refusal::ChildSaCap => "child_sa_cap",
            Refusal::UnknownSpi => "unknown_spi",
            Refusal::MessageId => "message_id",
            Refusal::LateResponse => "late_response",
            Refusal::RetransmitElsewhere => "retransmit_elsewhere",
            Refusal::Integrity => "integrity",
            Refusal::Authentication(_) => "auth_failed",
            Refusal::Revoked => "revoked",
            Refusal::OcspUnavailable => "ocsp_unavailable",
            Refusal::TooManyCerts => "too_many_certs",
            Refusal::ChainNotLinear => "chain_not_linear",
            Refusal::TsUnacceptable => "ts_unacceptable",
            Refusal::PoolExhausted => "pool_exhausted",
            Refusal::Timeout => "timeout",
            Refusal::Unsupported => "unsupported",
            Refusal::Crypto => "crypto",
            Refusal::Eap => "eap",
            Refusal::EapCap => "eap_cap",
            Refusal::FramedAddress => "framed_address",
            Refusal::Radius => "radius",
        }
    }
}

impl From<&AuthError> for Refusal {
    /// The chain-shape refusals keep their own reasons (they are what a CPU-exhaustion
    /// attempt looks like), and so does a revoked certificate (a lost machine trying);
    /// every other authentication failure is `auth_failed`.
    fn from(e: &AuthError) -> Self {
        match e {
            AuthError::TooManyCertificates(_) => Refusal::TooManyCerts,
            AuthError::ChainNotLinear(_) => Refusal::ChainNotLinear,
            AuthError::Revoked => Refusal::Revoked,
            AuthError::OcspUnavailable(_) => Refusal::OcspUnavailable,
            other => Refusal::Authentication(other.to_string()),
        }
    }
}

/// The `result` label of `gate64_ike_negotiations_total` for an [`Event::Negotiation`]:
/// `established`, or the refusal's label.
pub fn negotiation_label(result: &Result<(), Refusal>) -> &'static str {
    match result {
        Ok(()) => "established",
        Err(r) => r.label(),
    }
}

/// What the responder tells its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// An IKE SA was authenticated (a main-mode SA, MMSA).
    IkeSaUp {
        /// The initiator's SPI, as `ChildSaPair::ike_spi` carries it.
        ike_spi: u64,
        /// Our SPI (SPIr).
        spi_r: u64,
        /// The client's address and port.
        peer: SocketAddr,
        /// gate64's socket address when the IKE SA runs on one of
        /// [`ResponderConfig::native_addresses`](super::ResponderConfig::native_addresses)
        /// (a native client, as [`gate64_esp::Peer::native`]); `None` over Teredo and IP-HTTPS.
        native: Option<SocketAddr>,
        /// The authenticated identity (certificate subject).
        identity: String,
        /// The user RFC 4739's second round authenticated by EAP, as `eap:NAME` (what an
        /// IKE SA authenticated by EAP alone has as `identity`): the user behind the machine
        /// certificate of `identity`. `None` without an EAP second round.
        eap_user: Option<String>,
        /// The tunnel of its child SA, when one was built.
        tunnel: Option<TunnelKind>,
        /// The RADIUS User-Name it was authenticated or authorized under, if any.
        radius_user: Option<String>,
        /// The Filter-Id of its Access-Accept: the name of the policy for its traffic.
        filter_id: Option<String>,
        /// The Class attributes of its Access-Accept, to echo in its Accounting-Requests.
        class: Vec<Vec<u8>>,
    },
    /// An IKE SA is gone (deleted by the peer, rekeyed away, timed out).
    IkeSaDown {
        /// The initiator's SPI.
        ike_spi: u64,
        /// Our SPI (SPIr).
        spi_r: u64,
        /// The client's address and port.
        peer: SocketAddr,
        /// The authenticated identity.
        identity: String,
        /// The tunnel of its child SA.
        tunnel: Option<TunnelKind>,
    },
    /// A child SA to install (a quick-mode SA, QMSA).
    ChildSaUp(Box<ChildSaPair>),
    /// A child SA to remove, by gate64's inbound SPI.
    ChildSaDown {
        /// gate64's inbound SPI.
        inbound_spi: u32,
    },
    /// An established IKE SA's client was heard, in an authenticated request, from another
    /// address or port than before (its NAT mapping changed; RFC 7296 §2.23), or a MOBIKE
    /// client's UPDATE_SA_ADDRESSES passed its return-routability check (RFC 4555 §3.5): the
    /// IKE SA answers there from now on, and its child SAs' ESP should go there too.
    PeerMoved {
        /// Our SPI (SPIr) of the IKE SA that moved.
        spi_r: u64,
        /// gate64's inbound SPIs of the IKE SA's child SAs.
        inbound_spis: Vec<u32>,
        /// The client's new address and port.
        peer: SocketAddr,
        /// gate64's socket address the IKE SA runs on now when it is a native one
        /// ([`gate64_esp::Peer::native`]: the client moved to, or arrived at, that
        /// `[ipsec] listen` address); `None` when it is not one.
        native: Option<SocketAddr>,
    },
    /// An SA was rekeyed.
    Rekeyed {
        /// IKE or child.
        kind: RekeyKind,
    },
    /// A negotiation ended (IKE_SA_INIT to IKE_AUTH response): `Ok` when the IKE SA is up.
    Negotiation {
        /// Established, or why not.
        result: Result<(), Refusal>,
        /// The client's address (the latest, IKE_AUTH may have moved it); `None` when its
        /// half-open IKE SA was already gone.
        peer: Option<SocketAddr>,
        /// The identity the client claimed in its first IKE_AUTH request's IDi, unverified
        /// (`fqdn:…`, `dn:…`, as [`crate::auth::Identity`] writes it); `None` before that
        /// request, or when its IDi did not parse. Peer-controlled text: escape it for logs.
        identity: Option<String>,
        /// From the first IKE_SA_INIT to the end.
        duration: Duration,
    },
    /// A request was refused (counted; some refusals also end a negotiation).
    Refused {
        /// The sender.
        peer: SocketAddr,
        /// Why.
        reason: Refusal,
    },
    /// An IKE_AUTH was refused for its credentials (the certificate did not verify or is
    /// revoked, or the identity is over its caps), with the identity the client claimed in
    /// its IDi (unverified, when it parsed) or the verified subject for the caps. For session
    /// accounting; the [`Event::Refused`] with the same reason that comes with it is the one
    /// to count.
    AuthRefused {
        /// The sender.
        peer: SocketAddr,
        /// Why.
        reason: Refusal,
        /// Who the client said it was, or was.
        identity: Option<String>,
    },
    /// The responder ended an established IKE SA (with its child SAs) for `reason`; an
    /// [`Event::IkeSaDown`] follows it. Ends the driver asks for ([`super::Responder::disconnect`],
    /// [`super::Responder::disconnect_revoked`]) are reported here too, so the driver counts
    /// every end in one place; their return values say what was ended, for the caller's reply.
    IkeSaEnded {
        /// Our SPI (SPIr).
        spi_r: u64,
        /// Why.
        reason: EndReason,
    },
    /// A protected request (at most [`super::MAX_CANDIDATE_LEN`] bytes) for an IKE SA the HA
    /// peer synced here and that waits for a takeover
    /// ([`super::Responder::set_awaiting_takeover`]); unauthenticated: the HA task checks it
    /// with [`super::synced_request_authentic`] before it installs anything. The request
    /// itself is dropped (counted as `unknown_spi`); the client's retransmission finds the IKE
    /// SA if it was installed.
    TakeoverCandidate {
        /// Our address and port it came to.
        local: SocketAddr,
        /// The client's address and port.
        remote: SocketAddr,
        /// The responder's SPI it names.
        spi_r: u64,
        /// The whole request.
        datagram: Vec<u8>,
    },
    /// A request for an IKE SA we do not have got the unprotected INVALID_IKE_SPI answer
    /// with its Quick Crash Detection token (`sent`), or would have but for the caps or the
    /// request's length (`gate64_ike_qcd_total`).
    Qcd {
        /// Where the request came from.
        peer: SocketAddr,
        /// Whether the answer went out.
        sent: bool,
    },
    /// A stateless cookie was sent (RFC 7296 §2.6).
    CookieSent {
        /// The sender of the IKE_SA_INIT.
        peer: SocketAddr,
    },
    /// An UPDATE_SA_ADDRESSES request (MOBIKE, RFC 4555) was settled.
    Mobike {
        /// The address the client asked to move to.
        peer: SocketAddr,
        /// What came of it.
        result: MobikeResult,
    },
}

/// What came of a client's UPDATE_SA_ADDRESSES: the `result` label of
/// `gate64_ike_mobike_updates_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MobikeResult {
    /// The return-routability check succeeded: the IKE SA and its child SAs moved.
    Moved,
    /// It came from the IKE SA's current addresses: nothing moved.
    Unchanged,
    /// The return-routability check was answered without the cookie or not at all: the SA
    /// stayed where it was.
    CheckFailed,
    /// Its MOBIKE notifies had wrong lengths: refused with INVALID_SYNTAX.
    Malformed,
    /// It carried NO_NATS_ALLOWED and a NAT was found: refused with UNEXPECTED_NAT_DETECTED.
    NatRefused,
}

impl MobikeResult {
    /// Every result, in label order.
    pub const ALL: [MobikeResult; 5] = [
        MobikeResult::Moved,
        MobikeResult::Unchanged,
        MobikeResult::CheckFailed,
        MobikeResult::Malformed,
        MobikeResult::NatRefused,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            MobikeResult::Moved => "moved",
            MobikeResult::Unchanged => "unchanged",
            MobikeResult::CheckFailed => "check_failed",
            MobikeResult::Malformed => "malformed",
            MobikeResult::NatRefused => "nat_refused",
        }
    }
}

/// Counters (exported as metrics by the driver).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams handled.
    pub datagrams: u64,
    /// Cookies sent.
    pub cookies_sent: u64,
    /// Responses retransmitted from the cache.
    pub retransmits: u64,
    /// Duplicate requests dropped because they came from elsewhere than the original.
    pub retransmits_elsewhere: u64,
    /// Child SAs that reached their soft lifetime without the client rekeying them.
    pub children_past_soft_lifetime: u64,
    /// Child SAs deleted at their hard lifetime.
    pub children_expired: u64,
    /// Liveness checks given one more retransmission, instead of the peer being declared
    /// dead, because the driver dropped input while they were outstanding.
    pub liveness_extended: u64,
    /// Liveness checks put off to a later slice of time because the current one had started
    /// its share of checks already (`gate64_ike_liveness_deferred_total`): one check put off
    /// twice counts twice.
    pub liveness_deferred: u64,
    /// RFC 6311 Message ID syncs with clients of IKE SAs taken over from the HA peer
    /// (`gate64_ha_mid_sync_total`): answered with the echoed nonce and adopted.
    pub mid_sync_synced: u64,
    /// IKE SAs taken over whose client never announced support: they keep the synced IDs.
    pub mid_sync_unsupported: u64,
    /// Syncs that got no answer after the retransmissions, one without the notify or with
    /// another nonce, or that could not be sent: the IKE SA keeps the synced IDs.
    pub mid_sync_failed: u64,
}
