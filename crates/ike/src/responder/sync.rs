//! Handing established IKE SAs to the standby node of an active/standby pair.
//!
//! The active node takes [`SyncedIkeSa`]s out with [`Responder::export_ike_sa`] when an IKE
//! SA comes up or is rekeyed, and again when its message IDs moved
//! ([`Responder::take_sync_changes`]); the standby keeps them outside its responder and, on
//! takeover, hands each to [`Responder::install_synced_ike_sa`]. The installed IKE SA
//! answers the client's next request, accepts its child SAs (rekeys, new ones, Deletes) and
//! checks its liveness like one negotiated here.
//!
//! Message IDs (RFC 7296 §2.2). Inbound: a record may be older than the client's latest
//! exchange, so until its first request is answered an installed IKE SA takes a request
//! whose ID is at or above the synced one, up to [`SYNCED_ID_WINDOW`] above (the request
//! still has to decrypt under the IKE SA's keys before anything happens). Outbound: the
//! client accepts only the exact next ID, so a margin cannot help; gate64 sends requests
//! rarely (a liveness check after `dpd_secs` of silence, a MOBIKE check), and each one marks
//! the IKE SA changed, so the active node streams the new ID within the driver's batch
//! interval. A request gate64 sent in the last interval before a crash is the one case left:
//! the client ignores the standby's liveness check under the stale ID, and the IKE SA ends
//! as dead after the retransmissions unless the client's own request comes first (which
//! moves nothing on our side: the client's IDs are its own counter). A client that
//! announced RFC 6311 support gets a Message ID sync request at the install instead
//! (`mid_sync.rs`), which closes that case; the window and the streaming stay for the others.
//!
//! Not carried: RADIUS authorization (`Filter-Id`, Class, Session-Timeout), the RFC 4739
//! second round's user, the certificates' issuer and serial (`gate64 status` shows none, and
//! a CRL reload does not end a taken-over IKE SA), the IKE_SA_INIT messages and nonces
//! (needed only for IKE_AUTH, which is over).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::{ChildRecord, Event, IkeSa, Responder};
use crate::auth::IdentityKey;
use crate::child_sa::TunnelKind;
use crate::keys::{Encr, IkeKeys, Integ, Prf, PrfKey, Secret, SkCipher, Suite};

/// How far above the synced inbound message ID a taken-over IKE SA's first request may be:
/// far more exchanges than a client makes in the batch interval.
pub const SYNCED_ID_WINDOW: u32 = 1024;

/// The seven keys of an IKE SA (RFC 7296 §2.14); `sk_ai`, `sk_ar` empty under an AEAD.
/// `Debug` prints none of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncedIkeKeys {
    /// SK_d.
    pub sk_d: Secret,
    /// SK_ai.
    pub sk_ai: Secret,
    /// SK_ar.
    pub sk_ar: Secret,
    /// SK_ei (the cipher's key, then its salt under AES-GCM).
    pub sk_ei: Secret,
    /// SK_er.
    pub sk_er: Secret,
    /// SK_pi.
    pub sk_pi: Secret,
    /// SK_pr.
    pub sk_pr: Secret,
}

/// One child SA of a synced IKE SA: its SPIs and age (its keys travel in the ESP record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncedChildRef {
    /// The SPI gate64 receives on.
    pub inbound_spi: u32,
    /// The SPI gate64 sends with.
    pub outbound_spi: u32,
    /// How old it was when exported.
    pub age: Duration,
}

/// An established IKE SA as the standby node needs it to take over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncedIkeSa {
    /// The initiator's SPI.
    pub spi_i: u64,
    /// The responder's SPI.
    pub spi_r: u64,
    /// PRF transform id.
    pub prf: u16,
    /// Integrity transform id, 0 under an AEAD.
    pub integ: u16,
    /// Encryption transform id.
    pub encr: u16,
    /// The encryption key's bits.
    pub encr_key_bits: u16,
    /// The keys.
    pub keys: SyncedIkeKeys,
    /// The message ID of the client's next request.
    pub next_id_in: u32,
    /// The message ID of gate64's next request.
    pub next_id_out: u32,
    /// Our address and port.
    pub local: SocketAddr,
    /// The client's address and port.
    pub remote: SocketAddr,
    /// The authenticated certificate subject (RFC 4514 text).
    pub identity: String,
    /// The certificate's subjectAltNames `gate64 disconnect` matches.
    pub alt_names: Vec<String>,
    /// The identity's key (issuer and subject), what leases and caps count by.
    pub identity_key: [u8; 32],
    /// The IDi the client proved, as text.
    pub peer_id: Option<String>,
    /// The tunnel.
    pub tunnel: TunnelKind,
    /// Whether it may carry intranet child SAs.
    pub intranet_allowed: bool,
    /// MOBIKE was negotiated.
    pub mobike: bool,
    /// The client takes RFC 7383 fragments.
    pub fragmentation: bool,
    /// The inner address (IPv6 from the pool, or the client's own).
    pub inner: Option<IpAddr>,
    /// `inner` is a lease from `[ipsec] pool6`.
    pub leased: bool,
    /// The inner IPv4 address leased from `[ipsec] pool4`.
    pub inner4: Option<Ipv4Addr>,
    /// Its child SAs.
    pub children: Vec<SyncedChildRef>,
    /// How old it was when exported.
    pub age: Duration,
    /// How long before the export its client authenticated (an IKE rekey keeps it).
    pub authenticated_age: Option<Duration>,
    /// IKE SA rekeys so far.
    pub rekeys: u32,
    /// The client announced RFC 6311 Message ID synchronization and gate64 answered it: the
    /// node that installs it sends a sync request.
    pub mid_sync: bool,
}

/// Why a synced IKE SA was not installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// An IKE SA with its responder SPI, or a child SA with one of its inbound SPIs, is
    /// already here.
    #[error("an IKE or child SA with one of its SPIs exists")]
    Exists,
    /// Its transforms are not ones gate64 implements, or its keys do not fit them.
    #[error("its transforms or keys are not usable")]
    Keys,
    /// Its inner address is outside this node's pools or leased to another identity.
    #[error("its inner address cannot be leased here: {0:?}")]
    Lease(super::ClaimError),
}

impl Responder {
    /// The established IKE SA `spi_r` as the standby node needs it; `None` while it is not
    /// established (or unknown).
    pub fn export_ike_sa(&self, spi_r: u64, now: Instant) -> Option<SyncedIkeSa> {
        let sa = self.sas.get(&spi_r)?;
        if !sa.established || sa.half_open.is_some() {
            return None;
        }
        let k = &sa.keys;
        let (sk_ei, sk_ai) = k.sk_ei.key_material();
        let (sk_er, sk_ar) = k.sk_er.key_material();
        let name = sa.identity.as_ref();
        Some(SyncedIkeSa {
            spi_i: sa.spi_i,
            spi_r,
            prf: k.suite.prf.id(),
            integ: k.suite.integ.map_or(0, Integ::id),
            encr: k.suite.encr.id(),
            encr_key_bits: k.suite.encr.key_bits(),
            keys: SyncedIkeKeys {
                sk_d: k.sk_d.key.clone(),
                sk_ai,
                sk_ar,
                sk_ei,
                sk_er,
                sk_pi: k.sk_pi.key.clone(),
                sk_pr: k.sk_pr.key.clone(),
            },
            next_id_in: sa.expected_id,
            next_id_out: sa.liveness.next_request_id,
            local: sa.local,
            remote: sa.remote,
            identity: name.map_or_else(String::new, |n| n.subject.to_string()),
            alt_names: name.map_or_else(Vec::new, |n| {
                n.alt_names.iter().map(|a| a.to_string()).collect()
            }),
            identity_key: sa.identity_key?.to_bytes(),
            peer_id: sa.peer_id.clone(),
            tunnel: sa.tunnel?,
            intranet_allowed: sa.intranet_allowed,
            mobike: sa.mobike,
            fragmentation: sa.peer_fragmentation,
            inner: sa.inner,
            leased: sa.leased,
            inner4: sa.inner4,
            children: (sa.children.iter())
                .map(|c| SyncedChildRef {
                    inbound_spi: c.inbound_spi,
                    outbound_spi: c.outbound_spi,
                    age: now.saturating_duration_since(c.created),
                })
                .collect(),
            age: now.saturating_duration_since(sa.started),
            authenticated_age: sa.authenticated.map(|t| now.saturating_duration_since(t)),
            rekeys: sa.rekeys,
            mid_sync: sa.mid_sync,
        })
    }

    /// Starts (or stops) recording which IKE SAs changed for the sync channel: one that
    /// answered or sent a request (its message IDs moved). Off by default, so a node
    /// without `[ha]` keeps no such set.
    pub fn set_sync_tracking(&mut self, on: bool) {
        self.sync_changed = on.then(Default::default);
    }

    /// Names the IKE SAs (initiator's SPI, responder's SPI) the HA peer synced to this node
    /// and that wait for a takeover, replacing the previous set. Until they are installed
    /// ([`Responder::install_synced_ike_sa`]), a request for one of them is dropped as for an
    /// unknown SPI (counted as such) but never answered with INVALID_IKE_SPI and a Quick
    /// Crash Detection token: that answer would make the client end an IKE SA the takeover
    /// is about to install (the address can reach this node just before the takeover
    /// signal), whereas a dropped request is retransmitted and then finds it.
    pub fn set_awaiting_takeover(&mut self, spis: std::collections::HashSet<(u64, u64)>) {
        self.awaiting_takeover = spis;
    }

    /// Whether the IKE SA `(spi_i, spi_r)` waits for a takeover here
    /// ([`Responder::set_awaiting_takeover`]).
    pub(super) fn awaits_takeover(&self, spi_i: u64, spi_r: u64) -> bool {
        self.awaiting_takeover.contains(&(spi_i, spi_r))
    }

    /// The IKE SAs whose message IDs moved since the last call (see
    /// [`Responder::set_sync_tracking`]), each once; empty while tracking is off.
    pub fn take_sync_changes(&mut self) -> Vec<u64> {
        match &mut self.sync_changed {
            Some(set) => set.drain().collect(),
            None => Vec::new(),
        }
    }

    /// Records that IKE SA `spi_r`'s message IDs moved, while tracking is on.
    pub(crate) fn sync_touch(&mut self, spi_r: u64) {
        if let Some(set) = &mut self.sync_changed {
            set.insert(spi_r);
        }
    }

    /// Installs an IKE SA the active node exported, as established, with its child SAs'
    /// SPIs (their ESP SAs are the driver's to install) and its leases, and reports it with
    /// [`Event::IkeSaUp`]. Refused, with nothing changed, when one of its SPIs is taken, its
    /// keys do not fit its transforms, or its inner address cannot be leased here.
    pub fn install_synced_ike_sa(
        &mut self,
        now: Instant,
        synced: SyncedIkeSa,
    ) -> Result<(), InstallError> {
        let s = synced;
        let taken = |r: &Self| {
            r.sas.contains_key(&s.spi_r)
                || (s.children.iter()).any(|c| r.inbound_spis.contains_key(&c.inbound_spi))
        };
        if taken(self) {
            return Err(InstallError::Exists);
        }
        let keys = synced_keys(&s).ok_or(InstallError::Keys)?;
        let identity_key = IdentityKey::from_bytes(s.identity_key);
        let started = now.checked_sub(s.age).unwrap_or(now);
        match self.claim_synced_leases(&identity_key, &s) {
            Err(InstallError::Lease(super::ClaimError::HoldsAnother))
                if super::uniqueness::retire_older_than_synced(self, &identity_key, started) =>
            {
                self.claim_synced_leases(&identity_key, &s)?;
            }
            claimed => claimed?,
        }
        let mut sa = IkeSa::new((s.spi_i, s.spi_r), (s.local, s.remote), now, keys);
        sa.started = started;
        sa.established = true;
        sa.synced_ids = true;
        sa.expected_id = s.next_id_in;
        sa.liveness.next_request_id = s.next_id_out;
        sa.authenticated = s
            .authenticated_age
            .map(|a| now.checked_sub(a).unwrap_or(now));
        sa.identity = Some(self.identity_name(&identity_key, &s.identity, &s.alt_names));
        sa.identity_key = Some(identity_key);
        sa.peer_id = s.peer_id.clone();
        sa.tunnel = Some(s.tunnel);
        sa.intranet_allowed = s.intranet_allowed;
        sa.mobike = s.mobike;
        sa.peer_fragmentation = s.fragmentation;
        sa.inner = s.inner;
        sa.leased = s.leased;
        sa.inner4 = s.inner4;
        sa.rekeys = s.rekeys;
        sa.mid_sync = s.mid_sync;
        sa.children = (s.children.iter())
            .map(|c| ChildRecord {
                inbound_spi: c.inbound_spi,
                outbound_spi: c.outbound_spi,
                created: now.checked_sub(c.age).unwrap_or(now),
                past_soft: false,
            })
            .collect();
        for c in &sa.children {
            self.inbound_spis.insert(c.inbound_spi, s.spi_r);
        }
        self.by_initiator.insert((s.remote, s.spi_i), s.spi_r);
        self.index_identity(identity_key, s.spi_r);
        let native = self.native_socket(s.local);
        // RFC 6311: the sync request goes at the next timeout (`liveness.rs`, `mid_sync.rs`).
        sa.liveness.mid_sync_due = s.mid_sync;
        if !s.mid_sync {
            self.stats.mid_sync_unsupported += 1;
        }
        self.sas.insert(s.spi_r, sa);
        self.schedule(s.spi_r);
        self.event(Event::IkeSaUp {
            ike_spi: s.spi_i,
            spi_r: s.spi_r,
            peer: s.remote,
            native,
            identity: s.identity,
            tunnel: Some(s.tunnel),
            radius_user: None,
            filter_id: None,
            class: Vec::new(),
            eap_user: None,
        });
        Ok(())
    }

    /// Leases a synced IKE SA's inner addresses to its identity (a second IKE SA of the
    /// identity shares the lease); on failure nothing stays leased.
    fn claim_synced_leases(
        &mut self,
        identity: &IdentityKey,
        s: &SyncedIkeSa,
    ) -> Result<(), InstallError> {
        let v6 = match (s.leased, s.inner) {
            (true, Some(IpAddr::V6(a))) => Some(a),
            (true, _) => return Err(InstallError::Lease(super::ClaimError::OutsidePool)),
            (false, _) => None,
        };
        if let Some(a) = v6 {
            self.pool
                .claim_synced(identity, a)
                .map_err(InstallError::Lease)?;
        }
        if let Some(a) = s.inner4 {
            let claimed = match self.pool4.as_mut() {
                Some(pool4) => pool4.claim_synced(identity, a),
                None => Err(super::ClaimError::OutsidePool),
            };
            if let Err(e) = claimed {
                if v6.is_some() {
                    self.pool.release(identity);
                }
                return Err(InstallError::Lease(e));
            }
        }
        Ok(())
    }
}

/// Whether a request with message ID `id` is the one IKE SA `sa` expects: the next one, or,
/// on a taken-over IKE SA whose first request is still to come, one up to
/// [`SYNCED_ID_WINDOW`] above the synced ID.
pub(crate) fn expects(sa: &IkeSa, id: u32) -> bool {
    id == sa.expected_id
        || (sa.synced_ids && id > sa.expected_id && id - sa.expected_id <= SYNCED_ID_WINDOW)
}

/// The keys of a synced IKE SA, `None` when its transforms or key lengths are not ones
/// gate64 implements.
pub(super) fn synced_keys(s: &SyncedIkeSa) -> Option<IkeKeys> {
    let encr = Encr::from_transform(s.encr, Some(s.encr_key_bits))?;
    let integ = match s.integ {
        0 => None,
        id => Some(Integ::from_id(id)?),
    };
    let prf = Prf::from_id(s.prf)?;
    let suite = Suite { encr, integ, prf };
    if !suite.is_consistent() {
        return None;
    }
    let k = &s.keys;
    let prf_len = prf.output_len();
    if [&k.sk_d, &k.sk_pi, &k.sk_pr]
        .iter()
        .any(|key| key.0.len() != prf_len)
    {
        return None;
    }
    let cipher = |keymat: &Secret, integ_key: &Secret| {
        SkCipher::new(encr, &keymat.0, integ.map(|i| (i, &integ_key.0[..]))).ok()
    };
    let key = |k: &Secret| PrfKey {
        prf,
        key: k.clone(),
    };
    Some(IkeKeys {
        suite,
        sk_d: key(&k.sk_d),
        sk_ei: cipher(&k.sk_ei, &k.sk_ai)?,
        sk_er: cipher(&k.sk_er, &k.sk_ar)?,
        sk_pi: key(&k.sk_pi),
        sk_pr: key(&k.sk_pr),
    })
}
