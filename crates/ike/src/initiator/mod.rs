//! The IKEv2 initiator (RFC 7296 §1.2), sans-IO: one IKE SA with one child SA, as
//! `gate64 connect` builds for each of its two tunnels. IKE_SA_INIT (retrying on
//! INVALID_KE_PAYLOAD and COOKIE), IKE_AUTH with certificates, a CFG_REQUEST for an inner
//! IPv6 address, retransmission of the outstanding request (§2.1), and liveness answers.
//!
//! After NAT detection (§2.23) the exchange moves to port 4500 on both ends: transmits then
//! name local and remote port 4500, and the caller sends them from its NAT-T socket with the
//! RFC 3948 non-ESP marker prepended (and strips it from what that socket receives).
//!
//! With a second (user) certificate, [`Initiator::with_second_auth`], it offers RFC 4739
//! multiple authentication and, when the responder supports it, runs a second IKE_AUTH round
//! with the user certificate after the first (machine) one; the child SA comes with the last
//! response.
//!
//! [`Initiator::rekey_child`] rekeys the child SA (RFC 7296 §1.3.3, without PFS) and deletes
//! the old one once the new one is up (`rekey.rs`). Rekeying the IKE SA itself, and MOBIKE,
//! are not implemented: the caller negotiates afresh before the responder's limits.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::auth::{AuthError, AuthMethod, Credentials, Identity, SigHash, TrustAnchors};
use crate::child_sa::{
    ChildSaPair, Cipher, Lifetime, Peer, SaKeys, SaParams, Selector, TunnelKind,
};
use crate::keys::{self, CryptoError, Group, IkeKeys, KeyExchange};
use crate::message::{
    CfgAttribute, Configuration, Header, Identification, Message, Notify, Payload, Proposal,
    TrafficSelector, Transform, cfg, exchange, find_error_notify, find_notify, flags, notify,
    transform,
};
use crate::responder::nat_detection_hash;
use replies::{ChildReply, ResponderProof};
use second_auth::SecondAuth;

mod auth;
mod mid_sync;
mod qcd;
mod rekey;
mod replies;
mod second_auth;

pub use gate64_esp::udp_encap::NAT_T_PORT;
pub use qcd::QCD_ANSWER_LEN;

/// What the initiator negotiates.
#[derive(Debug)]
pub struct InitiatorConfig {
    /// Our certificate chain and key.
    pub credentials: Credentials,
    /// CAs the responder's certificate must chain to.
    pub anchors: TrustAnchors,
    /// The group of the first KE payload (the other one is offered too).
    pub group: Group,
    /// Ask for an inner IPv6 address (CFG_REQUEST).
    pub request_address: bool,
    /// Our traffic selectors (with `request_address`, `::/0` to be narrowed).
    pub tsi: Vec<TrafficSelector>,
    /// The responder-side selectors asked for.
    pub tsr: Vec<TrafficSelector>,
    /// Which tunnel this IKE SA is for (reported with the child SA).
    pub tunnel: TunnelKind,
    /// Retransmit an unanswered request after this long, doubling (RFC 7296 §2.1).
    pub retransmit_after: Duration,
    /// Give up after this many retransmissions.
    pub max_retransmits: u32,
    /// Offer AES-256-GMAC (integrity only, RFC 4543) before AES-256-GCM: for IP-HTTPS,
    /// whose TLS already encrypts the hop, with a responder that allows it
    /// (`[ipsec] iphttps_integrity_only`). Off: AES-256-GCM alone.
    pub integrity_only: bool,
}

/// What the initiator reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InitiatorEvent {
    /// IKE_AUTH completed; the child SA (gate64's side: `inbound` is what we receive).
    Established {
        /// The responder's certificate subject.
        identity: String,
        /// The inner address the responder gave (CFG_REPLY), if asked.
        inner: Option<IpAddr>,
        /// The DNS servers the responder gave (INTERNAL_IP6_DNS), if any.
        dns: Vec<Ipv6Addr>,
        /// The split-DNS domains the responder gave (INTERNAL_DNS_DOMAIN, RFC 8598).
        dns_domains: Vec<String>,
        /// The child SA.
        child: Box<ChildSaPair>,
        /// How long the responder lets this IKE SA live before the client must authenticate
        /// anew (AUTH_LIFETIME, RFC 4478), when it said.
        auth_lifetime: Option<Duration>,
    },
    /// The negotiation failed.
    Failed(InitiatorError),
    /// [`Initiator::rekey_child`] built a new child SA; the old one is being deleted (send
    /// with the new one from now on, receive with both until the old one's Delete is answered).
    Rekeyed {
        /// The new child SA.
        child: Box<ChildSaPair>,
    },
    /// The responder refused a rekey with this error notify; the child SA in use stays.
    RekeyRefused(u16),
}

/// Why the initiator gave up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InitiatorError {
    /// The responder answered with this error notify.
    #[error(
        "responder refused with {name} ({code}): {cause}",
        code = .0,
        name = crate::message::notify::describe(*.0).0,
        cause = crate::message::notify::describe(*.0).1
    )]
    Notify(u16),
    /// The responder's certificate or AUTH did not verify.
    #[error("responder authentication failed: {0}")]
    Auth(AuthError),
    /// A response we cannot use.
    #[error("malformed response")]
    Malformed,
    /// No response after every retransmission.
    #[error("no response")]
    Timeout,
    /// The responder deleted the IKE SA (an INFORMATIONAL Delete, RFC 7296 §1.4.1).
    #[error(
        "the responder deleted the IKE SA: its administrator disconnected this client, its \
         certificate was revoked or expired, it did not authenticate anew in time, or another \
         IKE SA of the same identity took its tunnel (gate64's session log names the reason)"
    )]
    Deleted,
    /// The responder proved, with the Quick Crash Detection token it gave in IKE_AUTH
    /// (RFC 6290), that it no longer has the IKE SA: it restarted or failed over.
    #[error("the responder lost the IKE SA (it restarted or failed over; RFC 6290 token matched)")]
    ResponderLost,
    /// Our crypto library failed.
    #[error("crypto failure")]
    Crypto,
}

impl From<CryptoError> for InitiatorError {
    fn from(_: CryptoError) -> Self {
        InitiatorError::Crypto
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Init,
    Auth,
    /// RFC 4739: the responder authenticated; our second round is outstanding.
    SecondAuth,
    Established,
    Failed,
}

/// One IKE SA from the initiator's side.
pub struct Initiator {
    config: InitiatorConfig,
    clock: (Instant, SystemTime),
    local: SocketAddr,
    remote: SocketAddr,
    state: State,
    pub(crate) spi_i: u64,
    pub(crate) spi_r: u64,
    /// Our key-exchange private value: this initiator's own, or one shared by several
    /// ([`Initiator::with_key_exchange`]).
    kex: Arc<KeyExchange>,
    /// The IKE SA algorithms proposed (with every group of `kex` and the defaults).
    ike_suite: keys::Suite,
    pub(crate) ni: Vec<u8>,
    pub(crate) nr: Vec<u8>,
    cookie: Option<Vec<u8>>,
    pub(crate) init_request: Vec<u8>,
    pub(crate) init_response: Vec<u8>,
    pub(crate) keys: Option<IkeKeys>,
    pub(crate) next_id: u32,
    child_spi: u32,
    outstanding: Option<(Vec<u8>, Instant, u32)>,
    transmits: VecDeque<(SocketAddr, SocketAddr, Vec<u8>)>,
    events: VecDeque<InitiatorEvent>,
    second_auth: Option<SecondAuth>,
    /// The identity the responder's certificate must hold, sent as IDr.
    server_id: Option<Identity>,
    /// Whether IKE_AUTH carries INITIAL_CONTACT (RFC 7296 §2.4).
    initial_contact: bool,
    /// Whether IKE_AUTH names the tunnel ([`crate::child_sa::tunnel_notify`]).
    name_tunnel: bool,
    /// Whether IKE_SA_INIT carries SIGNATURE_HASH_ALGORITHMS (RFC 7427 §4).
    signature_hashes: bool,
    /// The child SA in use: its selectors and our inner address, for a rekey.
    child_now: Option<rekey::CurrentChild>,
    /// Our outstanding rekey, Delete or liveness request, by message ID.
    pending: Option<rekey::Pending>,
    /// The responder's Quick Crash Detection token for this IKE SA (RFC 6290), if it gave one.
    pub(crate) qcd_token: Option<Vec<u8>>,
    /// Whether IKE_AUTH asks for a Quick Crash Detection token (`qcd.rs`).
    qcd: bool,
    /// Unprotected INVALID_IKE_SPI answers ignored (`qcd.rs`).
    qcd_ignored: u64,
    /// RFC 6311 Message ID synchronization (`mid_sync.rs`).
    mid_sync: mid_sync::MidSyncState,
}

impl Initiator {
    /// Our credentials (tests read the leaf's serial for their CRLs).
    #[cfg(test)]
    pub(crate) fn credentials(&self) -> &Credentials {
        &self.config.credentials
    }

    /// An initiator from `local` to the responder at `remote`; `wall` is the wall-clock time
    /// at `now` (certificate validity).
    pub fn new(
        config: InitiatorConfig,
        now: Instant,
        wall: SystemTime,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Result<Self, CryptoError> {
        let kex = Arc::new(KeyExchange::generate(config.group)?);
        Self::with_key_exchange(config, kex, now, wall, local, remote)
    }

    /// [`Initiator::new`] with a key-exchange private value the caller made, which it may give
    /// to other initiators as well: for load generators, which thereby save a key generation
    /// per handshake. IKE SAs that share one are not forward-secret against each other (one
    /// value's disclosure opens all of them), so gate64's own client never shares. It must be
    /// of `config.group` (else [`CryptoError::Library`]); an INVALID_KE_PAYLOAD answer still
    /// makes a fresh one of the group asked for.
    pub fn with_key_exchange(
        config: InitiatorConfig,
        kex: Arc<KeyExchange>,
        now: Instant,
        wall: SystemTime,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Result<Self, CryptoError> {
        if kex.group() != config.group {
            return Err(CryptoError::Library);
        }
        let spi = keys::random_bytes(12)?;
        let spi_i = u64::from_be_bytes([
            spi[0], spi[1], spi[2], spi[3], spi[4], spi[5], spi[6], spi[7],
        ]) | 1;
        let child_spi = u32::from_be_bytes([spi[8], spi[9], spi[10], spi[11]]).max(256);
        Ok(Initiator {
            config,
            clock: (now, wall),
            local,
            remote,
            state: State::Init,
            spi_i,
            spi_r: 0,
            kex,
            ike_suite: keys::Suite::GCM256_SHA256,
            ni: keys::random_bytes(32)?,
            nr: Vec::new(),
            cookie: None,
            init_request: Vec::new(),
            init_response: Vec::new(),
            keys: None,
            next_id: 0,
            child_spi,
            outstanding: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            second_auth: None,
            server_id: None,
            initial_contact: true,
            name_tunnel: false,
            signature_hashes: true,
            child_now: None,
            pending: None,
            qcd_token: None,
            qcd: true,
            qcd_ignored: 0,
            mid_sync: Default::default(),
        })
    }

    /// Proposes `suite` for the IKE SA instead of AES-GCM-16-256 with PRF-HMAC-SHA2-256
    /// (before [`Initiator::start`]); the key-exchange groups stay those of the config.
    pub fn set_ike_suite(&mut self, suite: keys::Suite) {
        self.ike_suite = suite;
    }

    /// Names the identity the responder must prove: sent as IDr in IKE_AUTH (RFC 7296 §2.15
    /// lets the initiator say whom it wants to talk to), and the responder's certificate must
    /// hold it (a subjectAltName dNSName, iPAddress or rfc822Name, or the subject DN), else
    /// the IKE SA fails with [`AuthError::IdMismatch`]. Without it any certificate under the
    /// anchors may answer.
    pub fn with_server_id(mut self, id: Identity) -> Self {
        self.server_id = Some(id);
        self
    }

    /// Leaves INITIAL_CONTACT out of IKE_AUTH, as a peer that holds other IKE SAs with the
    /// responder does (RFC 7296 §2.4): the responder then replaces none of the SAs of the
    /// same identity (a test's way to share one certificate among many clients).
    pub fn without_initial_contact(mut self) -> Self {
        self.initial_contact = false;
        self
    }

    /// Leaves SIGNATURE_HASH_ALGORITHMS out of IKE_SA_INIT, as a peer without RFC 7427 does
    /// (strongSwan with `signature_authentication = no`, Windows before 10 1803): the
    /// responder then signs with its classic method (1 for RSA, 9 or 10 for ECDSA), and so do
    /// we unless it announces hashes itself. Call before [`Initiator::start`].
    pub fn without_signature_hashes(mut self) -> Self {
        self.signature_hashes = false;
        self
    }

    /// Names the tunnel of [`InitiatorConfig::tunnel`] in IKE_AUTH (the private status notify
    /// [`crate::message::notify::GATE64_TUNNEL`]), so that a responder that knows it (gate64)
    /// narrows TSr into that tunnel's prefixes: the way to ask for both tunnels with `::/0`.
    /// Other responders ignore it.
    pub fn naming_tunnel(mut self) -> Self {
        self.name_tunnel = true;
        self
    }

    /// Leaves the QCD_TOKEN notify out of IKE_AUTH, as a peer without RFC 6290 does: the
    /// responder then gives no token, and an unprotected INVALID_IKE_SPI is ignored.
    pub fn without_qcd(mut self) -> Self {
        self.qcd = false;
        self
    }

    /// Offers RFC 4739 multiple authentication: `user` (a user certificate and key) is proven
    /// in a second IKE_AUTH round when the responder supports it; without that support the
    /// IKE SA is built with the machine certificate alone.
    pub fn with_second_auth(mut self, user: Credentials) -> Self {
        self.second_auth = Some(SecondAuth {
            user,
            negotiated: false,
            peer_hashes: Vec::new(),
            responder: String::new(),
        });
        self
    }

    /// Whether the responder agreed to a second authentication round (RFC 4739).
    pub fn second_auth_negotiated(&self) -> bool {
        self.second_auth.as_ref().is_some_and(|s| s.negotiated)
    }

    /// Sends IKE_SA_INIT.
    pub fn start(&mut self, now: Instant) {
        if let Err(e) = self.send_init(now) {
            self.fail(e);
        }
    }

    /// The next datagram to send: (local, remote, bytes without the non-ESP marker).
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, SocketAddr, Vec<u8>)> {
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<InitiatorEvent> {
        self.events.pop_front()
    }

    /// When to call [`Initiator::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.outstanding.as_ref().map(|(_, at, _)| *at)
    }

    /// Retransmits the outstanding request, or gives up.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some((bytes, at, tries)) = self.outstanding.take() else {
            return;
        };
        if now < at {
            self.outstanding = Some((bytes, at, tries));
            return;
        }
        if tries >= self.config.max_retransmits {
            return self.fail(InitiatorError::Timeout);
        }
        let wait = self.config.retransmit_after * 2u32.saturating_pow(tries + 1);
        self.transmits
            .push_back((self.local, self.remote, bytes.clone()));
        self.outstanding = Some((bytes, now + wait, tries + 1));
    }

    /// Whether IKE_AUTH completed.
    pub fn is_established(&self) -> bool {
        self.state == State::Established
    }

    /// Handles a datagram from the responder.
    pub fn handle(&mut self, now: Instant, datagram: &[u8]) {
        let Ok(m) = Message::parse(datagram) else {
            return;
        };
        let h = m.header;
        if h.spi_i != self.spi_i {
            return;
        }
        if !h.is_response() {
            return self.answer_request(h, datagram);
        }
        let protected = matches!(
            m.payloads.last(),
            Some(Payload::Sk { .. } | Payload::Skf { .. })
        );
        if !protected && h.exchange == exchange::INFORMATIONAL {
            return self.on_unprotected_response(&m);
        }
        let result = match (self.state, h.exchange) {
            (State::Init, exchange::IKE_SA_INIT) => self.on_init_response(now, datagram, &m),
            (State::Auth, exchange::IKE_AUTH) if h.message_id == 1 => {
                self.on_auth_response(now, datagram)
            }
            (State::SecondAuth, exchange::IKE_AUTH) if h.message_id == 2 => {
                self.on_second_auth_response(now, datagram)
            }
            (State::Established, exchange::CREATE_CHILD_SA | exchange::INFORMATIONAL) => {
                self.on_pending_response(now, h, datagram);
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            self.fail(e);
        }
    }

    fn fail(&mut self, e: InitiatorError) {
        self.state = State::Failed;
        self.outstanding = None;
        self.events.push_back(InitiatorEvent::Failed(e));
    }

    fn send(&mut self, now: Instant, bytes: Vec<u8>) {
        self.transmits
            .push_back((self.local, self.remote, bytes.clone()));
        self.outstanding = Some((bytes, now + self.config.retransmit_after, 0));
    }

    fn send_init(&mut self, now: Instant) -> Result<(), InitiatorError> {
        let mut payloads = Vec::new();
        if let Some(c) = &self.cookie {
            payloads.push(Payload::Notify(Notify::new(notify::COOKIE, c.clone())));
        }
        let mut transforms = self.ike_suite.transforms();
        for g in [self.config.group, Group::Ecp256, Group::Curve25519] {
            if !transforms
                .iter()
                .any(|t| t.kind == transform::KE && t.id == g.id())
            {
                transforms.push(Transform::new(transform::KE, g.id()));
            }
        }
        let proposal = Proposal {
            number: 1,
            protocol: transform::PROTO_IKE,
            spi: Vec::new(),
            transforms,
        };
        payloads.extend([
            Payload::Sa(vec![proposal]),
            Payload::Ke {
                group: self.kex.group().id(),
                data: self.kex.public_data()?,
            },
            Payload::Nonce(self.ni.clone()),
            // RFC 7296 §2.23: without these the responder does no NAT detection, and a peer
            // that needs UDP-encapsulated ESP (strongSwan's libipsec) cannot build the child.
            Payload::Notify(Notify::new(
                notify::NAT_DETECTION_SOURCE_IP,
                nat_detection_hash(self.spi_i, 0, self.local),
            )),
            Payload::Notify(Notify::new(
                notify::NAT_DETECTION_DESTINATION_IP,
                nat_detection_hash(self.spi_i, 0, self.remote),
            )),
            Payload::Notify(Notify::new(
                notify::IKEV2_FRAGMENTATION_SUPPORTED,
                Vec::new(),
            )),
        ]);
        if self.signature_hashes {
            payloads.push(Payload::Notify(Notify::new(
                notify::SIGNATURE_HASH_ALGORITHMS,
                SigHash::notify_data(),
            )));
        }
        let header = Header {
            spi_i: self.spi_i,
            spi_r: 0,
            exchange: exchange::IKE_SA_INIT,
            flags: flags::INITIATOR,
            message_id: 0,
        };
        self.init_request = Message { header, payloads }.emit();
        let bytes = self.init_request.clone();
        self.send(now, bytes);
        Ok(())
    }

    fn on_init_response(
        &mut self,
        now: Instant,
        datagram: &[u8],
        m: &Message,
    ) -> Result<(), InitiatorError> {
        if let Some(n) = m.notify(notify::COOKIE) {
            self.cookie = Some(n.data.clone());
            return self.send_init(now);
        }
        if let Some(n) = m.notify(notify::INVALID_KE_PAYLOAD) {
            let wanted = <[u8; 2]>::try_from(n.data.as_slice())
                .ok()
                .map(u16::from_be_bytes);
            let group = wanted
                .and_then(Group::from_id)
                .ok_or(InitiatorError::Notify(notify::INVALID_KE_PAYLOAD))?;
            if group == self.kex.group() {
                return Err(InitiatorError::Notify(notify::INVALID_KE_PAYLOAD));
            }
            self.kex = Arc::new(KeyExchange::generate(group)?);
            return self.send_init(now);
        }
        if let Some(n) = find_error_notify(&m.payloads) {
            return Err(InitiatorError::Notify(n));
        }
        let (mut ke, mut nr) = (None, None);
        for p in &m.payloads {
            match p {
                Payload::Ke { data, .. } => ke = Some(data.as_slice()),
                Payload::Nonce(n) => nr = Some(n.clone()),
                _ => {}
            }
        }
        let (ke, nr) = (
            ke.ok_or(InitiatorError::Malformed)?,
            nr.ok_or(InitiatorError::Malformed)?,
        );
        let shared = self.kex.agree(ke).map_err(|_| InitiatorError::Malformed)?;
        self.spi_r = m.header.spi_r;
        let keys = IkeKeys::derive(
            self.ike_suite,
            &shared,
            &self.ni,
            &nr,
            self.spi_i,
            self.spi_r,
        )?;
        self.nr = nr;
        if self.nat_detected(m) {
            // RFC 7296 §2.23: behind a NAT (or a peer that fakes one to force UDP
            // encapsulation, as strongSwan's libipsec does) IKE moves to port 4500.
            self.local.set_port(NAT_T_PORT);
            self.remote.set_port(NAT_T_PORT);
        }
        self.send_auth(now, datagram, &keys, m)?;
        self.keys = Some(keys);
        Ok(())
    }

    /// Whether the NAT detection notifies of the response disagree with the addresses this
    /// exchange used (RFC 7296 §2.23).
    fn nat_detected(&self, m: &Message) -> bool {
        let differs = |kind, addr| {
            m.notify(kind)
                .is_some_and(|n| n.data != nat_detection_hash(self.spi_i, self.spi_r, addr))
        };
        differs(notify::NAT_DETECTION_SOURCE_IP, self.remote)
            || differs(notify::NAT_DETECTION_DESTINATION_IP, self.local)
    }

    /// The child SA a response with SA, TSi and TSr completes: we receive on `inbound_spi`,
    /// keys from SK_d and the exchange's `(ni, nr)` (RFC 7296 §2.17).
    fn child(
        &self,
        now: Instant,
        keys: &IkeKeys,
        p: &ChildReply<'_>,
        inbound_spi: u32,
        (ni, nr): (&[u8], &[u8]),
    ) -> Result<ChildSaPair, InitiatorError> {
        let proposal = p.proposals.first().ok_or(InitiatorError::Malformed)?;
        let spi =
            <[u8; 4]>::try_from(proposal.spi.as_slice()).map_err(|_| InitiatorError::Malformed)?;
        let esn = proposal
            .transforms
            .iter()
            .any(|t| t.kind == transform::ESN && t.id == transform::ESN_ENABLED);
        let cipher = chosen_cipher(proposal, self.config.integrity_only)?;
        let (i_to_r, r_to_i) = keys::child_keymat(&keys.sk_d, None, ni, nr, cipher.keymat_len());
        let sel = |l: &[TrafficSelector]| -> Vec<Selector> {
            l.iter()
                .map(|t| Selector {
                    start: t.start,
                    end: t.end,
                    protocol: t.protocol,
                    ports: t.start_port..=t.end_port,
                })
                .collect()
        };
        let lifetime = Lifetime {
            soft_bytes: u64::MAX,
            hard_bytes: u64::MAX,
            soft_after: Duration::MAX,
            hard_after: Duration::MAX,
        };
        let params = |spi, key: keys::Secret| SaParams {
            spi,
            keys: SaKeys {
                cipher,
                key: key.into_bytes(),
            },
            esn,
            lifetime,
            created: now,
            local_ts: sel(p.tsi),
            remote_ts: sel(p.tsr),
        };
        let outer = match self.remote.ip() {
            IpAddr::V6(a) => a,
            IpAddr::V4(a) => a.to_ipv6_mapped(),
        };
        Ok(ChildSaPair {
            inbound: params(inbound_spi, r_to_i),
            outbound: params(u32::from_be_bytes(spi), i_to_r),
            peer: Peer {
                outer,
                native: None,
                udp_encap: (self.remote.port() == NAT_T_PORT).then_some(NAT_T_PORT),
                inner: p.inner.into_iter().collect(),
            },
            tunnel: self.config.tunnel,
            ike_spi: self.spi_i,
        })
    }

    /// Answers the responder's requests: an empty response to liveness checks and deletes,
    /// the IDs to an RFC 6311 sync request (`mid_sync.rs`).
    fn answer_request(&mut self, h: Header, datagram: &[u8]) {
        let Some(keys) = self.keys.clone() else {
            return;
        };
        let Ok((_, inner)) = keys::open_message(datagram, &keys.sk_er) else {
            return;
        };
        let deleted = inner
            .iter()
            .any(|p| matches!(p, Payload::Delete(d) if d.protocol == transform::PROTO_IKE));
        let payloads = match self.answer_mid_sync(h, &inner) {
            mid_sync::SyncReply::NotSync => Vec::new(),
            mid_sync::SyncReply::Answer(p) => p,
            mid_sync::SyncReply::Refused => return,
        };
        let header = Header {
            flags: flags::RESPONSE | flags::INITIATOR,
            ..h
        };
        if let Ok(bytes) = keys::seal_message(&header, &payloads, &keys.sk_ei) {
            self.transmits.push_back((self.local, self.remote, bytes));
        }
        if deleted {
            self.fail(InitiatorError::Deleted);
        }
    }
}

/// Our ESP proposals for a child SA we receive on `spi`, no ESN: AES-GCM-16-256, after
/// AES-256-GMAC (integrity only) when `integrity_only`.
fn esp_proposals(spi: u32, integrity_only: bool) -> Vec<Proposal> {
    let proposal = |number: u8, encr: u16| Proposal {
        number,
        protocol: transform::PROTO_ESP,
        spi: spi.to_be_bytes().to_vec(),
        transforms: vec![
            Transform::with_key_length(transform::ENCR, encr, 256),
            Transform::new(transform::ESN, transform::ESN_NONE),
        ],
    };
    if integrity_only {
        vec![
            proposal(1, transform::ENCR_NULL_AUTH_AES_GMAC),
            proposal(2, transform::ENCR_AES_GCM_16),
        ]
    } else {
        vec![proposal(1, transform::ENCR_AES_GCM_16)]
    }
}

/// The transform of the responder's chosen proposal: one of ours, else it is malformed.
fn chosen_cipher(p: &Proposal, integrity_only: bool) -> Result<Cipher, InitiatorError> {
    let encr = p
        .transforms
        .iter()
        .find(|t| t.kind == transform::ENCR)
        .ok_or(InitiatorError::Malformed)?;
    match (encr.id, encr.key_length()) {
        (transform::ENCR_AES_GCM_16, Some(256)) => Ok(Cipher::AesGcm16_256),
        (transform::ENCR_NULL_AUTH_AES_GMAC, Some(256)) if integrity_only => {
            Ok(Cipher::NullAesGmac256)
        }
        _ => Err(InitiatorError::Malformed),
    }
}
