//! What the responder keeps of each IKE SA, its child SAs and its last response, and the
//! datagrams it hands the driver.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use super::*;
use crate::auth::{IdentityKey, SigHash};
use crate::child_sa::TunnelKind;
use crate::keys::IkeKeys;

/// A datagram to send. `local` is the socket to send from (port 500 or 4500).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Our address and port.
    pub local: SocketAddr,
    /// The peer's address and port.
    pub remote: SocketAddr,
    /// The IKE message, without the non-ESP marker.
    pub bytes: Vec<u8>,
}

/// One child SA as the IKE SA remembers it.
#[derive(Debug, Clone)]
pub(crate) struct ChildRecord {
    pub(crate) inbound_spi: u32,
    pub(crate) outbound_spi: u32,
    pub(crate) created: Instant,
    /// Its soft lifetime passed without a rekey, and that was counted.
    pub(crate) past_soft: bool,
}

/// The last response, resent for a duplicate request (§2.1).
#[derive(Debug, Clone)]
pub(crate) struct CachedResponse {
    pub(crate) message_id: u32,
    /// Where the request came from: the only address a duplicate is answered at.
    pub(crate) requester: SocketAddr,
    pub(crate) datagrams: Vec<Vec<u8>>,
}

/// Fragments of one request being reassembled (RFC 7383 §2.6).
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    pub(crate) message_id: u32,
    pub(crate) first: u8,
    pub(crate) total: u16,
    pub(crate) parts: Vec<Option<Vec<u8>>>,
    pub(crate) bytes: usize,
}

/// What an authenticated client is called: its certificate's subject as text (RFC 4514
/// escaping), and its subjectAltNames (DNS names, email addresses, IP addresses) that
/// `gate64 disconnect` also takes.
#[derive(Debug)]
pub(crate) struct ClientName {
    pub(crate) subject: Box<str>,
    pub(crate) alt_names: Box<[Box<str>]>,
}

/// One IKE SA.
pub(crate) struct IkeSa {
    pub(crate) spi_i: u64,
    pub(crate) spi_r: u64,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    pub(crate) established: bool,
    pub(crate) started: Instant,
    pub(crate) last_heard: Instant,
    /// When its client authenticated (IKE_AUTH): an IKE SA rekey keeps it, so
    /// `ResponderConfig::reauth` counts from the authentication, not from the last rekey.
    pub(crate) authenticated: Option<Instant>,
    /// When a RADIUS Session-Timeout ([`Responder::set_session_end`]) ends it, whatever the
    /// client does; an IKE SA rekey keeps it.
    pub(crate) session_end: Option<Instant>,
    pub(crate) ni: Vec<u8>,
    pub(crate) nr: Vec<u8>,
    pub(crate) init_request: Vec<u8>,
    pub(crate) init_response: Vec<u8>,
    pub(crate) keys: IkeKeys,
    pub(crate) peer_hashes: Vec<SigHash>,
    pub(crate) peer_fragmentation: bool,
    pub(crate) expected_id: u32,
    /// Installed from the HA sync channel and its first request not yet answered: a
    /// request somewhat above `expected_id` is taken (`sync.rs`).
    pub(crate) synced_ids: bool,
    pub(crate) cached: Option<CachedResponse>,
    pub(crate) reassembly: Option<Reassembly>,
    /// The authenticated identity's names, shared with the identity's other IKE SAs.
    pub(crate) identity: Option<Arc<ClientName>>,
    /// What the identity is keyed by (issuer and subject), once established.
    pub(crate) identity_key: Option<IdentityKey>,
    /// The first round's certificate's issuer (interned: every client of a CA shares it) and
    /// notAfter, for `gate64 status`; its serial is in `certificates`.
    pub(crate) certificate: Option<(Arc<str>, i64)>,
    /// The IDi the client proved, as text (an FQDN, address, email, or the DN rendered).
    pub(crate) peer_id: Option<String>,
    /// The IDi of the client's first IKE_AUTH request as [`crate::auth::Identity`] writes it
    /// (`fqdn:…`, `dn:…`), before anything verified it: what a failed negotiation reports.
    pub(crate) claimed_id: Option<String>,
    pub(crate) tunnel: Option<TunnelKind>,
    /// Whether this IKE SA may have child SAs for the intranet tunnel: fixed when it is
    /// established (not with `intranet_second_auth = "required"` unless the second round
    /// proved a user), checked on every CREATE_CHILD_SA and carried over by IKE rekeys.
    pub(crate) intranet_allowed: bool,
    /// Issuer and serial of the certificates it was authenticated with (the machine's, and
    /// the user's after an RFC 4739 second round), checked against CRLs a reload brings.
    pub(crate) certificates: Vec<crate::auth::RevocationKey>,
    pub(crate) local_ts: Vec<crate::message::TrafficSelector>,
    pub(crate) inner: Option<IpAddr>,
    pub(crate) leased: bool,
    /// The inner IPv4 address leased from `[ipsec] pool4`, if the client asked for one.
    pub(crate) inner4: Option<std::net::Ipv4Addr>,
    pub(crate) children: Vec<ChildRecord>,
    pub(crate) rekeys: u32,
    pub(crate) liveness: liveness::Liveness,
    pub(crate) second_auth: auth_round::SecondAuth,
    /// Where IKE_SA_INIT came from: the key of `Responder::by_initiator` (`remote` follows
    /// the client, e.g. to port 4500).
    pub(crate) init_remote: SocketAddr,
    /// When its entry in `Responder::timers` fires (`None` while being handled).
    pub(crate) timer: Option<Instant>,
    /// What it is counted under while half-open (`None` once established).
    pub(crate) half_open: Option<half_open::Charge>,
    /// An IKE_AUTH request whose [`AuthJob`] is out.
    pub(crate) pending_auth: Option<Box<auth_jobs::PendingAuth>>,
    /// MOBIKE (RFC 4555) was negotiated: the client announced it and the IKE SA is native.
    pub(crate) mobike: bool,
    /// The client announced IKEV2_MESSAGE_ID_SYNC_SUPPORTED and gate64 answered it (RFC
    /// 6311): a node that takes this IKE SA over synchronizes the Message IDs with it.
    pub(crate) mid_sync: bool,
    /// Its EAP exchange, while one is in progress (`eap.rs`).
    pub(crate) eap: Option<Box<eap::EapState>>,
    /// What RADIUS authenticated or authorized it as (`authz.rs`); an IKE SA rekey keeps it.
    pub(crate) radius: Option<Box<authz::Grant>>,
    /// Its IKE_AUTH, verified, while RADIUS authorizes the certificate (`cert_authz.rs`).
    pub(crate) cert_authz: Option<Box<cert_authz::Awaiting>>,
}

impl IkeSa {
    /// A fresh IKE SA with keys, nothing negotiated beyond them yet. Boxed: the table of
    /// IKE SAs holds a pointer per slot, not a whole SA in every slot of its spare capacity
    /// (a power of two above the SAs held, so up to half of it empty).
    pub(crate) fn new(
        (spi_i, spi_r): (u64, u64),
        (local, remote): (SocketAddr, SocketAddr),
        now: Instant,
        keys: IkeKeys,
    ) -> Box<Self> {
        Box::new(IkeSa {
            spi_i,
            spi_r,
            local,
            remote,
            established: false,
            started: now,
            last_heard: now,
            authenticated: None,
            session_end: None,
            ni: Vec::new(),
            nr: Vec::new(),
            init_request: Vec::new(),
            init_response: Vec::new(),
            keys,
            peer_hashes: Vec::new(),
            peer_fragmentation: false,
            expected_id: 0,
            synced_ids: false,
            cached: None,
            reassembly: None,
            identity: None,
            identity_key: None,
            certificate: None,
            peer_id: None,
            claimed_id: None,
            tunnel: None,
            intranet_allowed: false,
            certificates: Vec::new(),
            local_ts: Vec::new(),
            inner: None,
            leased: false,
            inner4: None,
            children: Vec::new(),
            rekeys: 0,
            liveness: liveness::Liveness::default(),
            second_auth: auth_round::SecondAuth::default(),
            init_remote: remote,
            timer: None,
            half_open: None,
            pending_auth: None,
            mobike: false,
            mid_sync: false,
            eap: None,
            radius: None,
            cert_authz: None,
        })
    }

    /// The user RFC 4739's second round authenticated by EAP (`eap:NAME`): the second round
    /// is done and its grant came from EAP. `None` for a certificate second round or none.
    pub(crate) fn eap_second_user(&self) -> Option<&str> {
        self.radius
            .as_ref()
            .filter(|g| g.eap)
            .and(self.second_auth.user())
    }
}
