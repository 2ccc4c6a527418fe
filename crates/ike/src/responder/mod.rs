//! The IKEv2 responder (RFC 7296), sans-IO: datagrams and `now` in; transmits, events and the
//! next deadline out (the quinn shape).
//!
//! Covered: IKE_SA_INIT (§1.2; proposal choice, INVALID_KE_PAYLOAD, NO_PROPOSAL_CHOSEN, NAT
//! detection §2.23, stateless cookies above a half-open threshold §2.6, half-open caps per
//! source and in bytes), IKE_AUTH with certificates through [`crate::auth`] (§2.15), the
//! configuration payload (§3.15, an IPv6 address from a pool), traffic-selector narrowing
//! (§2.9) into gate64's two tunnels, INFORMATIONAL (§1.4: Delete, liveness), CREATE_CHILD_SA
//! (§1.3: child and IKE SA rekey), message IDs and the response retransmission cache (§2.1,
//! §2.2; a duplicate is answered only where its original came from), and RFC 7383
//! reassembly of fragmented requests, and MOBIKE (RFC 4555) for native clients
//! (`mobike.rs`). IKE SAs in all, per identity and child SAs per IKE SA are capped
//! (`caps.rs`).
//!
//! The driver strips the RFC 3948 non-ESP marker before [`Responder::handle`] and adds it to
//! every [`Transmit`] whose `local` port is 4500. Nothing here panics on input; every refusal
//! becomes an [`Event::Refused`] with a [`Refusal`] reason.

mod admin;
mod auth_exchange;
mod auth_jobs;
mod auth_round;
mod authz;
mod caps;
mod cert_authz;
mod child;
mod config;
mod cp;
mod eap;
mod events;
mod half_open;
mod ike_policy;
mod ike_sa;
mod informational;
mod init;
mod init_jobs;
mod init_reply;
mod liveness;
mod mid_sync;
mod mobike;
mod own_auth;
mod pool;
mod proposal;
mod qcd;
mod retransmit;
mod second_auth;
mod sync;
mod takeover;
mod timers;
mod traffic_selectors;
mod tunnel_rules;
mod uniqueness;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ipnet::{IpNet, Ipv6Net};

use crate::auth::{CertSummary, ClientEku, Credentials, IdentityKey, TrustAnchors};
use crate::child_sa::Cipher;
use crate::keys;
use crate::message::{Header, Message, Notify, Payload, exchange, flags, notify};

pub use admin::{DisconnectTarget, IkeSaInfo};
pub use auth_jobs::{AuthJob, AuthVerdict, JobWatch};
pub use authz::Authorization;
pub use cert_authz::{AuthzJob, AuthzOutcome, AuthzVerdict};
pub use child::{DEFAULT_ESP_SUITES, INTEGRITY_ONLY_SUITES};
pub use config::ResponderConfig;
pub(crate) use config::anchors_for_clients;
pub use eap::{EapJob, EapOutcome, EapPolicy, EapVerdict};
pub use events::{EndReason, Event, MobikeResult, Refusal, RekeyKind, Stats, negotiation_label};
pub use half_open::{HOST_SHARE, HostCounts, HostKey, Hosts, SourceKey};
pub use ike_policy::{IkePolicy, IkeProposalRule};
pub use ike_sa::Transmit;
pub(crate) use ike_sa::{CachedResponse, ChildRecord, ClientName, IkeSa, Reassembly};
pub use init_jobs::{InitJob, InitVerdict};
pub use init_reply::nat_detection_hash;
pub use liveness::{
    BACKOFF_HOLD, DPD_RETRANSMIT, LIVENESS_MAX_PER_SEC, LIVENESS_MIN_PER_SEC, LIVENESS_SLICE,
    OVERFLOW_EXTENSIONS, RECOVERY_PER_SLICE, checks_per_sec,
};
pub use mobike::{MalformedMobike, UpdateNotifies, parse_update};
pub use pool::{AddressPool, AddressPool4, ClaimError, Pool, PoolNet};
pub use qcd::{MIN_SECRET_LEN as QCD_MIN_SECRET_LEN, QcdSecret, unknown_spi_answer};
pub use second_auth::SecondAuthPolicy;
pub use sync::{InstallError, SYNCED_ID_WINDOW, SyncedChildRef, SyncedIkeKeys, SyncedIkeSa};
pub use takeover::{MAX_CANDIDATE_LEN, synced_request_authentic};
pub use tunnel_rules::{IdentityPattern, TunnelRule};
pub use uniqueness::UniqueIds;

/// CERT/CERTREQ encoding 4, X.509 certificate - signature.
pub(crate) const CERT_X509_SIGNATURE: u8 = 4;

/// The IKEv2 responder: all IKE SAs of one gate64 endpoint.
pub struct Responder {
    pub(crate) config: ResponderConfig,
    pub(crate) clock: (Instant, SystemTime),
    pub(crate) sas: HashMap<u64, Box<IkeSa>>,
    pub(crate) by_initiator: HashMap<(SocketAddr, u64), u64>,
    /// Established IKE SAs by authenticated identity, for INITIAL_CONTACT (RFC 7296 §2.4),
    /// which would otherwise scan every SA on each IKE_AUTH.
    pub(crate) by_identity: HashMap<IdentityKey, Vec<u64>>,
    /// The issuer names of clients' certificates, one copy each (see `IkeSa::certificate`).
    pub(crate) issuer_names: std::collections::HashSet<Arc<str>>,
    pub(crate) half_open: half_open::HalfOpen,
    pub(crate) cookie_secrets: init::CookieSecrets,
    pub(crate) pool: AddressPool,
    /// `[ipsec] pool4`, when set.
    pub(crate) pool4: Option<AddressPool4>,
    pub(crate) inbound_spis: HashMap<u32, u64>,
    /// Each IKE SA's next deadline (expiry, liveness check, child lifetime), earliest first:
    /// a timeout touches only the SAs that are due, not all of them (with 200,000
    /// SAs a scan per event took a core). Entries are not removed when a deadline moves
    /// later or an SA goes; such a stale entry is skipped when it fires (see
    /// [`Responder::schedule`]).
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    pub(crate) auth_jobs: VecDeque<AuthJob>,
    /// IKE_SA_INIT key exchanges for the driver to compute (`init_jobs.rs`).
    pub(crate) init_jobs: VecDeque<InitJob>,
    /// IKE_SA_INITs waiting for their key exchange, by the SPIr chosen for them; counted as
    /// half-open.
    pub(crate) pending_inits: HashMap<u64, init_jobs::PendingInit>,
    /// Client EAP messages for the driver's RADIUS relay.
    pub(crate) eap_jobs: VecDeque<EapJob>,
    /// EAP exchanges in progress, counted against [`EapPolicy`]'s caps.
    pub(crate) eap_flight: eap::Flight,
    /// Certificate identities for the driver's RADIUS authorization (`cert_authz.rs`).
    pub(crate) authz_jobs: VecDeque<AuthzJob>,
    /// Authorizations in flight, counted against [`EapPolicy`]'s caps.
    pub(crate) cert_authz_flight: cert_authz::Flight,
    stats: Stats,
    /// While a request of a MOBIKE IKE SA from elsewhere than its addresses is handled: the
    /// SA, and the addresses the request arrived at and came from (where its response goes;
    /// the SA moves only after a return-routability check).
    answer_at: Option<(u64, SocketAddr, SocketAddr)>,
    /// The caps on Quick Crash Detection answers (`qcd.rs`).
    qcd: qcd::Limiter,
    /// IKE SAs whose message IDs moved since the sync channel last asked (`sync.rs`);
    /// `None` without HA sync.
    sync_changed: Option<std::collections::HashSet<u64>>,
    /// IKE SAs (initiator's SPI, responder's SPI) the HA peer synced that wait for a
    /// takeover here (`sync.rs`): a request for one is not answered as unknown.
    awaiting_takeover: std::collections::HashSet<(u64, u64)>,
    /// When the driver last reported that datagrams for the responder were dropped before
    /// it could read them ([`Responder::note_input_overflow`]).
    pub(crate) input_overflow: Option<Instant>,
    /// How many liveness checks the current slice of time has started and put off
    /// (`liveness.rs`).
    pub(crate) liveness_budget: liveness::Budget,
}

impl Responder {
    /// A responder starting at `now`; `wall` is the wall-clock time at `now`, used to check
    /// certificate validity (time stays a parameter).
    pub fn new(
        mut config: ResponderConfig,
        now: Instant,
        wall: SystemTime,
    ) -> Result<Self, keys::CryptoError> {
        config.share_chain_cache_stats();
        let pool = AddressPool::new(config.pool6).with_peer(config.peer_pool6);
        let hosts = config.hosts;
        let pool4 = (config.pool4).map(|net| AddressPool4::new(net).with_peer(config.peer_pool4));
        let cookie_secrets = init::CookieSecrets::new(now)?;
        Ok(Responder {
            config,
            clock: (now, wall),
            sas: HashMap::new(),
            by_initiator: HashMap::new(),
            by_identity: HashMap::new(),
            issuer_names: Default::default(),
            half_open: half_open::HalfOpen::new(hosts),
            cookie_secrets,
            pool,
            pool4,
            inbound_spis: HashMap::new(),
            timers: BinaryHeap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            auth_jobs: VecDeque::new(),
            init_jobs: VecDeque::new(),
            pending_inits: HashMap::new(),
            eap_jobs: VecDeque::new(),
            eap_flight: eap::Flight::default(),
            authz_jobs: VecDeque::new(),
            cert_authz_flight: cert_authz::Flight::default(),
            stats: Stats::default(),
            input_overflow: None,
            liveness_budget: liveness::Budget::default(),
            answer_at: None,
            qcd: qcd::Limiter::default(),
            sync_changed: None,
            awaiting_takeover: Default::default(),
        })
    }

    /// Handles one IKE datagram received on `local` from `remote` (non-ESP marker removed).
    pub fn handle(&mut self, now: Instant, local: SocketAddr, remote: SocketAddr, datagram: &[u8]) {
        self.stats.datagrams += 1;
        let message = match Message::parse(datagram) {
            Ok(m) => m,
            Err(e) => return self.refuse_unparsable(local, remote, datagram, e),
        };
        let h = message.header;
        if h.is_response() {
            if let Some(answered) = liveness::handle_response(self, now, remote, datagram, &message)
            {
                mobike::after_answer(self, now, answered);
            }
            return;
        }
        if h.exchange == exchange::IKE_SA_INIT && h.spi_r == 0 {
            return init::handle(self, now, local, remote, datagram, &message);
        }
        if self.sas.get(&h.spi_r).is_none_or(|sa| sa.spi_i != h.spi_i) {
            self.report_takeover_candidate((local, remote), datagram, &message);
            qcd::on_unknown_spi(self, now, (local, remote), datagram, &message);
            return self.refused(remote, Refusal::UnknownSpi);
        }
        if retransmit::answer_duplicate(self, h.spi_r, remote, &message) {
            return;
        }
        let Some(sa) = self.sas.get_mut(&h.spi_r) else {
            return;
        };
        if !sync::expects(sa, h.message_id) {
            return self.refused(remote, Refusal::MessageId);
        }
        let Some(inner) = self.open(h.spi_r, datagram, &message, remote) else {
            return;
        };
        let Some(sa) = self.sas.get_mut(&h.spi_r) else {
            return;
        };
        sa.last_heard = now;
        // RFC 7296 §2.23: follow the client to the address and port of its latest
        // authenticated request (the move to 4500 after NAT detection). With MOBIKE the
        // client announces its moves, NAT mapping changes included (UPDATE_SA_ADDRESSES,
        // checked before the SA moves, `mobike.rs`): no implicit move (RFC 4555 §3.8).
        let follow = !sa.mobike || !sa.established;
        let moved =
            (follow && sa.established && (sa.local, sa.remote) != (local, remote)).then(|| {
                sa.children
                    .iter()
                    .map(|c| c.inbound_spi)
                    .collect::<Vec<_>>()
            });
        if follow {
            sa.local = local;
            sa.remote = remote;
        } else if (sa.local, sa.remote) != (local, remote) {
            self.answer_at = Some((h.spi_r, local, remote));
        }
        let established = sa.established;
        if let Some(inbound_spis) = moved {
            let native = self.native_socket(local);
            self.event(Event::PeerMoved {
                spi_r: h.spi_r,
                inbound_spis,
                peer: remote,
                native,
            });
        }
        match (h.exchange, established) {
            (exchange::IKE_AUTH, false) => auth_exchange::handle(self, now, h, inner),
            (exchange::INFORMATIONAL, true) => informational::handle(self, now, h, inner),
            (exchange::CREATE_CHILD_SA, true) => child::handle_create(self, now, h, inner),
            _ => {
                self.respond_error(h, notify::INVALID_SYNTAX);
                self.refused(remote, Refusal::Unsupported);
            }
        }
        // A half-open SA may now hold a response (the first of two authentication rounds).
        half_open::refresh(self, h.spi_r);
        self.answer_at = None;
    }

    /// Where the response to the request being handled on IKE SA `spi_r` goes: where the
    /// request came from and arrived at.
    pub(crate) fn reply_path(&self, spi_r: u64) -> Option<(SocketAddr, SocketAddr)> {
        match self.answer_at {
            Some((spi, local, remote)) if spi == spi_r => Some((local, remote)),
            _ => self.sas.get(&spi_r).map(|s| (s.local, s.remote)),
        }
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next IKE_AUTH verification (and, in a first round, our AUTH signature after it) to
    /// run (with `offload_auth`); its verdict goes to
    /// [`Responder::handle_auth_verdict`], or the job to [`Responder::handle_auth_shed`].
    pub fn poll_auth_job(&mut self) -> Option<AuthJob> {
        self.auth_jobs.pop_front()
    }

    /// The next IKE_SA_INIT key exchange to compute (with `offload_init`); its verdict goes to
    /// [`Responder::handle_init_verdict`], or the job to [`Responder::handle_init_shed`].
    pub fn poll_init_job(&mut self) -> Option<InitJob> {
        self.init_jobs.pop_front()
    }

    /// Answers the IKE_SA_INIT `verdict` was computed for.
    pub fn handle_init_verdict(&mut self, _now: Instant, verdict: InitVerdict) {
        init_jobs::finish(self, verdict);
    }

    /// Forgets the IKE_SA_INIT of a job the driver could not run, as if it had been lost.
    pub fn handle_init_shed(&mut self, job: InitJob) {
        init_jobs::handle_shed(self, job);
    }

    /// Computes IKE_SA_INIT key exchanges inline (`false`) or as [`InitJob`]s (`true`).
    pub fn set_offload_init(&mut self, on: bool) {
        self.config.offload_init = on;
    }

    /// Finishes the IKE_AUTH round `verdict` answers.
    pub fn handle_auth_verdict(&mut self, now: Instant, verdict: AuthVerdict) {
        auth_exchange::handle_verdict(self, now, verdict);
    }

    /// The next client EAP message for the RADIUS relay; its answer goes to
    /// [`Responder::handle_eap_verdict`].
    pub fn poll_eap_job(&mut self) -> Option<EapJob> {
        self.eap_jobs.pop_front()
    }

    /// Continues the EAP exchange `verdict` answers.
    pub fn handle_eap_verdict(&mut self, now: Instant, verdict: EapVerdict) {
        eap::handle_verdict(self, now, verdict);
    }

    /// The next certificate identity for RADIUS to authorize (`authorize_certificates =
    /// "radius"`); its answer goes to [`Responder::handle_authz_verdict`].
    pub fn poll_authz_job(&mut self) -> Option<AuthzJob> {
        self.authz_jobs.pop_front()
    }

    /// Finishes the IKE_AUTH whose authorization `verdict` answers.
    pub fn handle_authz_verdict(&mut self, now: Instant, verdict: AuthzVerdict) {
        cert_authz::handle_verdict(self, now, verdict);
    }

    /// Forgets the request of a job the driver could not run, as if it had been lost.
    pub fn handle_auth_shed(&mut self, job: AuthJob) {
        auth_jobs::handle_shed(self, job);
    }

    /// Runs IKE_AUTH verifications inline (`false`) or as [`AuthJob`]s (`true`).
    pub fn set_offload_auth(&mut self, on: bool) {
        self.config.offload_auth = on;
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// At shutdown: sends a Delete for every established IKE SA and forgets them all.
    pub fn shutdown(&mut self) {
        liveness::delete_all(self);
    }

    /// A snapshot of every IKE SA.
    pub fn ike_sas(&self, now: Instant) -> Vec<IkeSaInfo> {
        self.sas
            .values()
            .map(|s| IkeSaInfo {
                spi_r: s.spi_r,
                spi_i: s.spi_i,
                peer: s.remote,
                local: s.local,
                established: s.established,
                identity: s.identity.as_ref().map(|n| n.subject.to_string()),
                user_identity: s.second_auth.user().map(str::to_owned),
                certificate: s
                    .certificate
                    .as_ref()
                    .map(|(issuer, not_after)| CertSummary {
                        issuer: issuer.to_string(),
                        serial: s
                            .certificates
                            .first()
                            .map(|k| crate::auth::serial_hex(k.serial()))
                            .unwrap_or_default(),
                        not_after: *not_after,
                    }),
                tunnel: s.tunnel,
                inner: s.inner,
                inner4: s.inner4,
                child_spis: s.children.iter().map(|c| c.inbound_spi).collect(),
                age: now.saturating_duration_since(s.started),
                rekeys: s.rekeys,
                auth_method: s.established.then_some(match &s.radius {
                    Some(_) if s.eap_second_user().is_some() => "certificate+eap",
                    Some(g) if g.eap => "eap",
                    _ => "certificate",
                }),
                radius_user: s.radius.as_ref().map(|g| g.user.clone()),
                filter_id: s.radius.as_ref().and_then(|g| g.filter_id.clone()),
            })
            .collect()
    }

    /// Established IKE SAs (`gate64_ipsec_mmsa`): every SA that is not half-open.
    pub fn established(&self) -> usize {
        // Half-open counts the IKE_SA_INITs waiting for their key exchange, which hold no
        // IKE SA yet.
        let half_open_sas = self
            .half_open
            .count()
            .saturating_sub(self.pending_inits.len());
        self.sas.len().saturating_sub(half_open_sas)
    }

    /// EAP exchanges in progress.
    pub fn eap_in_flight(&self) -> usize {
        self.eap_flight.total()
    }

    /// Which sources count as one host ([`ResponderConfig::hosts`]).
    pub fn hosts(&self) -> Hosts {
        self.config.hosts
    }

    /// Half-open IKE SAs (`gate64_ike_half_open`).
    pub fn half_open(&self) -> usize {
        self.half_open.count()
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The chain cache of both authentication rounds' anchors: the chains held now, and the
    /// hits, misses and evictions since the responder started, reloads included
    /// (`gate64_ike_chain_cache_entries`, `gate64_ike_chain_cache_total`). Atomic loads only.
    pub fn chain_cache(&self) -> crate::auth::ChainCacheCounts {
        self.config.chain_cache()
    }

    pub(crate) fn wall(&self, now: Instant) -> SystemTime {
        self.clock.1 + now.saturating_duration_since(self.clock.0)
    }

    /// `local` when it is on one of [`ResponderConfig::native_addresses`] (an IKE SA there
    /// is a native client's: [`gate64_esp::Peer::native`]), else `None`.
    pub(crate) fn native_socket(&self, local: SocketAddr) -> Option<SocketAddr> {
        self.config
            .native_addresses
            .contains(&local.ip())
            .then_some(local)
    }

    pub(crate) fn event(&mut self, event: Event) {
        if matches!(event, Event::CookieSent { .. }) {
            self.stats.cookies_sent += 1;
        }
        self.events.push_back(event);
    }

    pub(crate) fn refused(&mut self, peer: SocketAddr, reason: Refusal) {
        tracing::debug!(%peer, reason = reason.label(), "ike request refused");
        self.events.push_back(Event::Refused { peer, reason });
    }

    pub(crate) fn transmit(&mut self, local: SocketAddr, remote: SocketAddr, bytes: Vec<u8>) {
        self.transmits.push_back(Transmit {
            local,
            remote,
            bytes,
        });
    }

    /// Decrypts the SK (or reassembles SKF) payload of a request to IKE SA `spi_r`.
    fn open(
        &mut self,
        spi_r: u64,
        datagram: &[u8],
        message: &Message,
        remote: SocketAddr,
    ) -> Option<Vec<Payload>> {
        let sa = self.sas.get_mut(&spi_r)?;
        match message.payloads.last() {
            Some(Payload::Sk { .. }) => match keys::open_message(datagram, &sa.keys.sk_ei) {
                Ok((_, inner)) => Some(inner),
                // It decrypted, but what is inside does not parse (more payloads than a
                // message may hold, a bad length): malformed, not forged.
                Err(keys::OpenError::Parse(_)) => {
                    self.refused(remote, Refusal::Malformed);
                    None
                }
                Err(_) => {
                    self.refused(remote, Refusal::Integrity);
                    None
                }
            },
            Some(Payload::Skf {
                first,
                number,
                total,
                body,
            }) => {
                let plain = keys::open_fragment(datagram, body, &sa.keys.sk_ei);
                let Ok(plain) = plain else {
                    self.refused(remote, Refusal::Integrity);
                    return None;
                };
                if sa.half_open.is_some() && !half_open::has_room(self, plain.len()) {
                    self.refused(remote, Refusal::HalfOpenBytes);
                    return None;
                }
                let sa = self.sas.get_mut(&spi_r)?;
                let id = message.header.message_id;
                let done = informational::reassemble(sa, id, *first, *number, *total, plain);
                half_open::refresh(self, spi_r);
                match done {
                    Ok(done) => done,
                    Err(reason) => {
                        self.refused(remote, reason);
                        None
                    }
                }
            }
            _ => {
                self.refused(remote, Refusal::Malformed);
                None
            }
        }
    }

    /// Seals `inner` as the response to request `request` on IKE SA `spi_r`, fragments it
    /// when the peer supports RFC 7383 and it is too big, caches it and queues it.
    pub(crate) fn respond(&mut self, spi_r: u64, request: Header, inner: Vec<Payload>) {
        let Some(sa) = self.sas.get_mut(&spi_r) else {
            return;
        };
        let header = Header {
            flags: flags::RESPONSE,
            ..request
        };
        let datagrams =
            match informational::seal_response(sa, header, &inner, self.config.fragment_size) {
                Ok(d) => d,
                Err(_) => {
                    let peer = sa.remote;
                    return self.refused(peer, Refusal::Crypto);
                }
            };
        sa.expected_id = request.message_id.wrapping_add(1);
        sa.synced_ids = false;
        // Where the request came from: the IKE SA's own addresses (`handle` moved them to
        // the request's source) unless a MOBIKE client's request came from elsewhere.
        let (local, remote) = match self.answer_at {
            Some((spi, local, remote)) if spi == spi_r => (local, remote),
            _ => (sa.local, sa.remote),
        };
        sa.cached = Some(CachedResponse {
            message_id: request.message_id,
            requester: remote,
            datagrams: datagrams.clone(),
        });
        for bytes in datagrams {
            self.transmit(local, remote, bytes);
        }
        self.sync_touch(spi_r);
    }

    /// Answers a request on an existing IKE SA with one error notify.
    pub(crate) fn respond_error(&mut self, request: Header, kind: u16) {
        self.respond(
            request.spi_r,
            request,
            vec![Payload::Notify(Notify::new(kind, Vec::new()))],
        );
    }

    /// Answers an unparsable datagram where RFC 7296 asks for an answer: an unknown critical
    /// payload (§2.5) or another major version (§1.5), both unprotected.
    fn refuse_unparsable(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        datagram: &[u8],
        e: crate::message::ParseError,
    ) {
        use crate::message::ParseError;
        let reason = match e {
            ParseError::UnsupportedCritical(_) => Refusal::UnsupportedCritical,
            _ => Refusal::Malformed,
        };
        let answer = match e {
            ParseError::Version(_) => Some(notify::INVALID_MAJOR_VERSION),
            ParseError::UnsupportedCritical(_) => Some(notify::UNSUPPORTED_CRITICAL_PAYLOAD),
            _ => None,
        };
        if let (Some(kind), Some(raw)) = (answer, datagram.get(..crate::message::HEADER_LEN)) {
            let mut h = [0u8; 8];
            h.copy_from_slice(&raw[..8]);
            let mut r = [0u8; 8];
            r.copy_from_slice(&raw[8..16]);
            let request = Header {
                spi_i: u64::from_be_bytes(h),
                spi_r: u64::from_be_bytes(r),
                exchange: raw[18],
                flags: raw[19],
                message_id: u32::from_be_bytes([raw[20], raw[21], raw[22], raw[23]]),
            };
            let is_request = request.flags & flags::RESPONSE == 0;
            if is_request && request.exchange == exchange::IKE_SA_INIT {
                let reply = init::error_response(request, kind, Vec::new());
                self.transmit(local, remote, reply);
            } else if is_request && self.sas.contains_key(&request.spi_r) {
                self.respond_error(request, kind);
            }
        }
        self.refused(remote, reason);
    }

    /// The names of `key`'s identity: shared with an IKE SA it already has (a client's two
    /// tunnels hold one copy), else made of `subject` and `alt_names`.
    pub(crate) fn identity_name(
        &self,
        key: &IdentityKey,
        subject: &str,
        alt_names: &[String],
    ) -> Arc<ClientName> {
        self.by_identity
            .get(key)
            .and_then(|spis| {
                spis.iter()
                    .find_map(|spi| self.sas.get(spi)?.identity.clone())
            })
            .unwrap_or_else(|| {
                Arc::new(ClientName {
                    subject: subject.into(),
                    alt_names: alt_names.iter().map(|n| n.as_str().into()).collect(),
                })
            })
    }

    /// The one shared copy of the issuer name `issuer`.
    pub(crate) fn intern_issuer(&mut self, issuer: &str) -> Arc<str> {
        if let Some(shared) = self.issuer_names.get(issuer) {
            return shared.clone();
        }
        let shared: Arc<str> = issuer.into();
        self.issuer_names.insert(shared.clone());
        shared
    }

    /// Files the established IKE SA `spi_r` under `identity`.
    pub(crate) fn index_identity(&mut self, identity: IdentityKey, spi_r: u64) {
        let spis = self.by_identity.entry(identity).or_default();
        if !spis.contains(&spi_r) {
            spis.push(spi_r);
        }
    }

    fn unindex_identity(&mut self, identity: &IdentityKey, spi_r: u64) {
        if let Some(spis) = self.by_identity.get_mut(identity) {
            spis.retain(|&s| s != spi_r);
            if spis.is_empty() {
                self.by_identity.remove(identity);
            }
        }
    }

    /// Forgets an IKE SA, its children and its lease; reports the downs.
    pub(crate) fn remove_sa(&mut self, spi_r: u64) {
        let Some(sa) = self.sas.remove(&spi_r) else {
            return;
        };
        let key = (sa.init_remote, sa.spi_i);
        if self.by_initiator.get(&key) == Some(&spi_r) {
            self.by_initiator.remove(&key);
        }
        if let Some(key) = sa.identity_key.as_ref() {
            self.unindex_identity(key, spi_r);
        }
        if let Some(charge) = sa.half_open {
            self.half_open.release(charge);
        }
        if let Some(state) = &sa.eap {
            eap::release(self, state);
        }
        if let Some(state) = &sa.cert_authz {
            cert_authz::release(self, state);
        }
        for c in &sa.children {
            self.inbound_spis.remove(&c.inbound_spi);
            self.events.push_back(Event::ChildSaDown {
                inbound_spi: c.inbound_spi,
            });
        }
        if let (Some(key), true) = (sa.identity_key.as_ref(), sa.leased) {
            self.pool.release(key);
        }
        if let (Some(key), Some(_), Some(pool4)) =
            (sa.identity_key.as_ref(), sa.inner4, self.pool4.as_mut())
        {
            pool4.release(key);
        }
        if sa.established {
            self.events.push_back(Event::IkeSaDown {
                ike_spi: sa.spi_i,
                spi_r,
                peer: sa.remote,
                identity: sa
                    .identity
                    .as_ref()
                    .map_or_else(String::new, |n| n.subject.to_string()),
                tunnel: sa.tunnel,
            });
        }
    }
}

#[cfg(test)]
mod tests;
