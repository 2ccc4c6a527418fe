//! IKE and IPsec counters: plain atomics the IKE driver (`gate64_io`) writes and the metrics
//! exporter reads, as [`crate::Dns64Stats`] does for DNS64. Child SAs (QMSA) are counted by
//! the SA database itself; ESP authentication and replay failures by the workers' drop
//! counters (`esp_auth`, `esp_replay`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How an IKE negotiation (IKE_SA_INIT + IKE_AUTH, or a CREATE_CHILD_SA) ended: the `result`
/// label of `gate64_ike_negotiations_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IkeResult {
    /// The SAs are up.
    Ok = 0,
    /// The peer's certificate or AUTH payload did not verify (unknown CA, expired, bad
    /// signature, identity mismatch).
    AuthFailed = 1,
    /// No proposal gate64 accepts (NO_PROPOSAL_CHOSEN, INVALID_KE_PAYLOAD not resolved).
    NoProposal = 2,
    /// The traffic selectors fit neither tunnel (TS_UNACCEPTABLE).
    TsUnacceptable = 3,
    /// The peer stopped answering (retransmissions exhausted, half-open SA expired).
    Timeout = 4,
    /// Anything else: malformed messages, internal refusals.
    Error = 5,
}

impl IkeResult {
    /// Every result, in label order.
    pub const ALL: [IkeResult; 6] = [
        IkeResult::Ok,
        IkeResult::AuthFailed,
        IkeResult::NoProposal,
        IkeResult::TsUnacceptable,
        IkeResult::Timeout,
        IkeResult::Error,
    ];

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            IkeResult::Ok => "ok",
            IkeResult::AuthFailed => "auth_failed",
            IkeResult::NoProposal => "no_proposal",
            IkeResult::TsUnacceptable => "ts_unacceptable",
            IkeResult::Timeout => "timeout",
            IkeResult::Error => "error",
        }
    }
}

/// What was rekeyed: the `kind` label of `gate64_ipsec_rekeys_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RekeyKind {
    /// An IKE SA (RFC 7296 §2.8, CREATE_CHILD_SA for the IKE SA).
    Ike = 0,
    /// A child SA.
    Child = 1,
}

impl RekeyKind {
    /// Every kind, in label order.
    pub const ALL: [RekeyKind; 2] = [RekeyKind::Ike, RekeyKind::Child];

    /// The `kind` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RekeyKind::Ike => "ike",
            RekeyKind::Child => "child",
        }
    }
}

/// What came of a native client's MOBIKE UPDATE_SA_ADDRESSES (RFC 4555): the `result` label
/// of `gate64_ike_mobike_updates_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MobikeResult {
    /// The return-routability check succeeded: the IKE SA and its child SAs moved.
    Moved = 0,
    /// It came from the IKE SA's current addresses: nothing to move.
    Unchanged = 1,
    /// The return-routability check went unanswered or without the cookie: not moved.
    CheckFailed = 2,
    /// Its MOBIKE notifies had wrong lengths: refused.
    Malformed = 3,
    /// NO_NATS_ALLOWED with a NAT found: refused.
    NatRefused = 4,
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

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            MobikeResult::Moved => "moved",
            MobikeResult::Unchanged => "unchanged",
            MobikeResult::CheckFailed => "check_failed",
            MobikeResult::Malformed => "malformed",
            MobikeResult::NatRefused => "nat_refused",
        }
    }
}

/// Why the IKE driver shed a datagram before the responder saw it: the `reason` label of
/// `gate64_ike_shed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IkeShedReason {
    /// Its source address had used `[ipsec] ike_packets_per_source_per_sec`.
    SourceRate = 0,
    /// The socket had a backlog and its source already had its share of the batch read.
    BatchShare = 1,
    /// An IKE_AUTH whose source already had its share of verifications in flight.
    AuthQueueSource = 2,
    /// An IKE_AUTH while the verification threads had as many jobs as they queue.
    AuthQueueFull = 3,
    /// An IKE_SA_INIT while the IKE worker threads had as many key exchanges as they queue.
    InitQueueFull = 4,
}

impl IkeShedReason {
    /// Every reason, in label order.
    pub const ALL: [IkeShedReason; 5] = [
        IkeShedReason::SourceRate,
        IkeShedReason::BatchShare,
        IkeShedReason::AuthQueueSource,
        IkeShedReason::AuthQueueFull,
        IkeShedReason::InitQueueFull,
    ];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            IkeShedReason::SourceRate => "source_rate",
            IkeShedReason::BatchShare => "batch_share",
            IkeShedReason::AuthQueueSource => "auth_queue_source",
            IkeShedReason::AuthQueueFull => "auth_queue_full",
            IkeShedReason::InitQueueFull => "init_queue_full",
        }
    }
}

/// What an OCSP lookup of a client certificate ended in: the `result` label of
/// `gate64_ike_ocsp_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OcspResult {
    /// The responder said good.
    Good = 0,
    /// The responder said revoked.
    Revoked = 1,
    /// The responder does not know the certificate.
    Unknown = 2,
    /// No usable answer: unreachable, an HTTP error, or an answer that did not verify.
    Unavailable = 3,
    /// Answered from the cache.
    Cached = 4,
}

impl OcspResult {
    /// Every result, in label order.
    pub const ALL: [OcspResult; 5] = [
        OcspResult::Good,
        OcspResult::Revoked,
        OcspResult::Unknown,
        OcspResult::Unavailable,
        OcspResult::Cached,
    ];

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            OcspResult::Good => "good",
            OcspResult::Revoked => "revoked",
            OcspResult::Unknown => "unknown",
            OcspResult::Unavailable => "unavailable",
            OcspResult::Cached => "cached",
        }
    }
}

/// What became of a certificate chain in the IKE responder's cache of verified chains: the
/// `result` label of `gate64_ike_chain_cache_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainCacheResult {
    /// A lookup found the chain: no path building or certificate signature checks.
    Hit = 0,
    /// A lookup did not find it: webpki verified it.
    Miss = 1,
    /// It was dropped as the oldest of a full cache.
    Evicted = 2,
}

impl ChainCacheResult {
    /// Every result, in label order.
    pub const ALL: [ChainCacheResult; 3] = [
        ChainCacheResult::Hit,
        ChainCacheResult::Miss,
        ChainCacheResult::Evicted,
    ];

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ChainCacheResult::Hit => "hit",
            ChainCacheResult::Miss => "miss",
            ChainCacheResult::Evicted => "evicted",
        }
    }
}

/// Upper bounds, in seconds, of `gate64_ike_negotiation_duration_seconds`' buckets: a LAN
/// handshake takes milliseconds, one over Teredo tens of them, a retransmitted one seconds.
pub const NEGOTIATION_BUCKETS: [f64; 10] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// The IKE driver's counters and gauges.
#[derive(Debug, Default)]
pub struct IpsecStats {
    /// IKE SAs established (high 32 bits) and child SAs installed (low 32 bits), stored
    /// together so that a reader never sees child SAs of an IKE SA the other count misses.
    sa_counts: AtomicU64,
    half_open: AtomicU64,
    negotiations: [AtomicU64; IkeResult::ALL.len()],
    rekeys: [AtomicU64; RekeyKind::ALL.len()],
    cookies_sent: AtomicU64,
    mobike: [AtomicU64; MobikeResult::ALL.len()],
    /// Quick Crash Detection answers: sent, capped.
    qcd: [AtomicU64; 2],
    keepalives: AtomicU64,
    socket_drops: AtomicU64,
    liveness_extended: AtomicU64,
    liveness_deferred: AtomicU64,
    /// RFC 6311 Message ID syncs after takeovers: synced, unsupported, failed.
    mid_sync: [AtomicU64; 3],
    shed: [AtomicU64; IkeShedReason::ALL.len()],
    /// Requests the responder refused, by its reason label. A map, not an array: the
    /// responder's reasons are its own (`gate64_ike::responder::Refusal::label`), and a
    /// reason shows once it has happened.
    refused: Mutex<BTreeMap<&'static str, u64>>,
    /// Per bucket of [`NEGOTIATION_BUCKETS`] (not cumulative), then the overflow.
    duration_buckets: [AtomicU64; NEGOTIATION_BUCKETS.len() + 1],
    duration_sum_micros: AtomicU64,
    disconnects: [AtomicU64; DisconnectReason::ALL.len()],
    ocsp: [AtomicU64; OcspResult::ALL.len()],
    chain_cache_entries: AtomicU64,
    chain_cache: [AtomicU64; ChainCacheResult::ALL.len()],
    /// The nextUpdate of each CRL of `ipsec.crls` in force, seconds since the epoch.
    crl_next_updates: Mutex<Vec<u64>>,
    /// The same of `iphttps.client_crls` (the IP-HTTPS listener's TLS client check).
    iphttps_crl_next_updates: Mutex<Vec<u64>>,
}

/// Why gate64 ended a client's IKE SAs itself (`gate64_ipsec_disconnects_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisconnectReason {
    /// `gate64 disconnect`.
    Admin = 0,
    /// A CRL (a reload, or a CRL file that changed) revokes the client's certificate.
    Revoked = 1,
    /// A new IKE SA of the same identity and tunnel took its place (`ipsec.unique_ids =
    /// "replace"`, or the client's INITIAL_CONTACT).
    Replaced = 2,
    /// The client did not authenticate anew within `ipsec.reauth_secs` and its grace.
    Reauth = 3,
    /// The client's certificate passed its notAfter.
    Expired = 4,
    /// A RADIUS Disconnect-Request (RFC 5176) ended it.
    Radius = 5,
    /// The end a RADIUS CoA-Request's Session-Timeout set passed.
    SessionTimeout = 6,
}

impl DisconnectReason {
    /// Every reason, in label order.
    pub const ALL: [DisconnectReason; 7] = [
        DisconnectReason::Admin,
        DisconnectReason::Revoked,
        DisconnectReason::Replaced,
        DisconnectReason::Reauth,
        DisconnectReason::Expired,
        DisconnectReason::Radius,
        DisconnectReason::SessionTimeout,
    ];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DisconnectReason::Admin => "admin",
            DisconnectReason::Revoked => "revoked",
            DisconnectReason::Replaced => "replaced",
            DisconnectReason::Reauth => "reauth",
            DisconnectReason::Expired => "expired",
            DisconnectReason::Radius => "radius",
            DisconnectReason::SessionTimeout => "session_timeout",
        }
    }
}

impl IpsecStats {
    /// Sets the IKE SAs established (`gate64_ipsec_mmsa`) and the child SAs installed
    /// (`gate64_ipsec_qmsa`), read at one instant by the caller: both change in one store,
    /// so a scrape sees them move together. Each saturates at `u32::MAX`.
    pub fn set_sa_counts(&self, ike_sas: u64, child_sas: u64) {
        let (mmsa, qmsa) = (
            ike_sas.min(u64::from(u32::MAX)),
            child_sas.min(u64::from(u32::MAX)),
        );
        self.sa_counts.store(mmsa << 32 | qmsa, Ordering::Relaxed);
    }

    /// IKE SAs established and child SAs installed, as last set together.
    pub fn sa_counts(&self) -> (u64, u64) {
        let both = self.sa_counts.load(Ordering::Relaxed);
        (both >> 32, both & u64::from(u32::MAX))
    }

    /// Sets the number of half-open IKE SAs (`gate64_ike_half_open`).
    pub fn set_half_open(&self, n: u64) {
        self.half_open.store(n, Ordering::Relaxed);
    }

    /// Counts one negotiation that ended with `result` after `took`.
    pub fn negotiation(&self, result: IkeResult, took: Duration) {
        self.negotiations[result as usize].fetch_add(1, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let bucket = NEGOTIATION_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(NEGOTIATION_BUCKETS.len());
        self.duration_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.duration_sum_micros
            .fetch_add(micros, Ordering::Relaxed);
    }

    /// Counts `n` IKE SAs ended for `reason`.
    pub fn disconnected(&self, reason: DisconnectReason, n: usize) {
        self.disconnects[reason as usize].fetch_add(n as u64, Ordering::Relaxed);
    }

    /// IKE SAs ended for `reason`.
    pub fn disconnects(&self, reason: DisconnectReason) -> u64 {
        self.disconnects[reason as usize].load(Ordering::Relaxed)
    }

    /// Counts one rekey.
    pub fn rekey(&self, kind: RekeyKind) {
        self.rekeys[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one IKE_SA_INIT answered with a cookie (RFC 7296 §2.6).
    pub fn cookie_sent(&self) {
        self.cookies_sent.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one unprotected Quick Crash Detection answer (RFC 6290) `sent`, or not sent
    /// for the caps or the request's length.
    pub fn qcd_answer(&self, sent: bool) {
        self.qcd[usize::from(!sent)].fetch_add(1, Ordering::Relaxed);
    }

    /// Quick Crash Detection answers sent (`sent`) or not (`gate64_ike_qcd_total`).
    pub fn qcd_answers(&self, sent: bool) -> u64 {
        self.qcd[usize::from(!sent)].load(Ordering::Relaxed)
    }

    /// Counts one UPDATE_SA_ADDRESSES settled with `result`.
    pub fn mobike_update(&self, result: MobikeResult) {
        self.mobike[result as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// UPDATE_SA_ADDRESSES settled with `result` (`gate64_ike_mobike_updates_total`).
    pub fn mobike_updates(&self, result: MobikeResult) -> u64 {
        self.mobike[result as usize].load(Ordering::Relaxed)
    }

    /// Sets the NAT keepalives the IKE driver read since it started.
    pub fn set_keepalives(&self, n: u64) {
        self.keepalives.store(n, Ordering::Relaxed);
    }

    /// NAT keepalives read (`gate64_ike_keepalives_total`).
    pub fn keepalives(&self) -> u64 {
        self.keepalives.load(Ordering::Relaxed)
    }

    /// Sets the datagrams the kernel dropped on the IKE driver's sockets since it started.
    pub fn set_socket_drops(&self, n: u64) {
        self.socket_drops.store(n, Ordering::Relaxed);
    }

    /// Datagrams dropped on full IKE sockets (`gate64_ike_socket_drops_total`).
    pub fn socket_drops(&self) -> u64 {
        self.socket_drops.load(Ordering::Relaxed)
    }

    /// Sets the liveness checks the IKE responder retransmitted past `dpd_retransmits`
    /// because input was dropped meanwhile, since it started.
    pub fn set_liveness_extended(&self, n: u64) {
        self.liveness_extended.store(n, Ordering::Relaxed);
    }

    /// Liveness checks extended (`gate64_ike_liveness_extended_total`).
    pub fn liveness_extended(&self) -> u64 {
        self.liveness_extended.load(Ordering::Relaxed)
    }

    /// Sets the liveness checks the IKE responder put off to a later slice of time, the
    /// current one having started its share, since it started.
    pub fn set_liveness_deferred(&self, n: u64) {
        self.liveness_deferred.store(n, Ordering::Relaxed);
    }

    /// Liveness checks put off (`gate64_ike_liveness_deferred_total`).
    pub fn liveness_deferred(&self) -> u64 {
        self.liveness_deferred.load(Ordering::Relaxed)
    }

    /// Sets the RFC 6311 Message ID syncs of IKE SAs taken over since the responder started:
    /// `[synced, unsupported, failed]`.
    pub fn set_mid_sync(&self, counts: [u64; 3]) {
        for (slot, n) in self.mid_sync.iter().zip(counts) {
            slot.store(n, Ordering::Relaxed);
        }
    }

    /// The RFC 6311 Message ID syncs (`gate64_ha_mid_sync_total{result}`), by result label.
    pub fn mid_sync(&self) -> [(&'static str, u64); 3] {
        let n = |i: usize| self.mid_sync[i].load(Ordering::Relaxed);
        [("synced", n(0)), ("unsupported", n(1)), ("failed", n(2))]
    }

    /// Sets the datagrams the IKE driver shed for `reason` since it started (the driver
    /// counts them; the daemon copies its totals here).
    pub fn set_shed(&self, reason: IkeShedReason, n: u64) {
        self.shed[reason as usize].store(n, Ordering::Relaxed);
    }

    /// Sets the OCSP lookups that ended in `result` since the IKE driver started (its
    /// verification threads count them; the daemon copies their totals here).
    pub fn set_ocsp(&self, result: OcspResult, n: u64) {
        self.ocsp[result as usize].store(n, Ordering::Relaxed);
    }

    /// OCSP lookups that ended in `result`.
    pub fn ocsp(&self, result: OcspResult) -> u64 {
        self.ocsp[result as usize].load(Ordering::Relaxed)
    }

    /// Sets the chains the IKE responder's cache holds now (the driver reads them; the daemon
    /// copies them here).
    pub fn set_chain_cache_entries(&self, n: u64) {
        self.chain_cache_entries.store(n, Ordering::Relaxed);
    }

    /// Chains held by the IKE responder's cache (`gate64_ike_chain_cache_entries`).
    pub fn chain_cache_entries(&self) -> u64 {
        self.chain_cache_entries.load(Ordering::Relaxed)
    }

    /// Sets the chain cache lookups or evictions of `result` since the IKE responder started,
    /// reloads included (its anchors count them; the daemon copies their totals here).
    pub fn set_chain_cache(&self, result: ChainCacheResult, n: u64) {
        self.chain_cache[result as usize].store(n, Ordering::Relaxed);
    }

    /// Chain cache lookups or evictions of `result` (`gate64_ike_chain_cache_total`).
    pub fn chain_cache(&self, result: ChainCacheResult) -> u64 {
        self.chain_cache[result as usize].load(Ordering::Relaxed)
    }

    /// The CRLs of `ipsec.crls` now in force: their nextUpdate times (a start, a reload or a
    /// refresh read them).
    pub fn set_crl_next_updates(&self, next_updates: &[std::time::SystemTime]) {
        *self
            .crl_next_updates
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = epoch_secs(next_updates);
    }

    /// The CRLs of `iphttps.client_crls` now in force: their nextUpdate times (read with the
    /// IP-HTTPS listener's TLS configuration at a start, a reload or a refresh).
    pub fn set_iphttps_crl_next_updates(&self, next_updates: &[std::time::SystemTime]) {
        *self
            .iphttps_crl_next_updates
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = epoch_secs(next_updates);
    }

    /// The CRLs of `ipsec.crls` in force whose nextUpdate is before `now` (seconds since the
    /// epoch).
    pub fn crls_expired(&self, now: u64) -> u64 {
        expired(&self.crl_next_updates, now)
    }

    /// The CRLs of `iphttps.client_crls` in force whose nextUpdate is before `now`.
    pub fn iphttps_crls_expired(&self, now: u64) -> u64 {
        expired(&self.iphttps_crl_next_updates, now)
    }

    /// The earliest nextUpdate of the CRLs in force (seconds since the epoch), 0 without any.
    pub fn crl_next_update(&self) -> u64 {
        let lists = self
            .crl_next_updates
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        lists.iter().copied().min().unwrap_or(0)
    }

    /// Counts one request the IKE responder refused, by its reason label.
    pub fn refused(&self, reason: &'static str) {
        let mut map = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        *map.entry(reason).or_insert(0) += 1;
    }

    /// Requests the IKE responder refused, by reason label, in label order.
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        let map = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter().map(|(r, n)| (*r, *n)).collect()
    }

    /// Datagrams the IKE driver shed for `reason`.
    pub fn shed(&self, reason: IkeShedReason) -> u64 {
        self.shed[reason as usize].load(Ordering::Relaxed)
    }

    /// IKE SAs established.
    pub fn ike_sas(&self) -> u64 {
        self.sa_counts().0
    }

    /// Half-open IKE SAs.
    pub fn half_open(&self) -> u64 {
        self.half_open.load(Ordering::Relaxed)
    }

    /// Negotiations that ended with `result`.
    pub fn negotiations(&self, result: IkeResult) -> u64 {
        self.negotiations[result as usize].load(Ordering::Relaxed)
    }

    /// Rekeys of `kind`.
    pub fn rekeys(&self, kind: RekeyKind) -> u64 {
        self.rekeys[kind as usize].load(Ordering::Relaxed)
    }

    /// Cookies sent.
    pub fn cookies_sent(&self) -> u64 {
        self.cookies_sent.load(Ordering::Relaxed)
    }

    /// The duration histogram: (sum in seconds, count, and per bucket of
    /// [`NEGOTIATION_BUCKETS`] then `+Inf` its upper bound and the negotiations that fell
    /// in it, not cumulative: the encoder sums them up).
    pub fn durations(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let bounds = NEGOTIATION_BUCKETS.iter().copied().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds
            .zip(&self.duration_buckets)
            .map(|(bound, n)| (bound, n.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().fold(0u64, |t, (_, n)| t.wrapping_add(*n));
        let sum = self.duration_sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        (sum, count, buckets)
    }
}

/// How many of the nextUpdate times in `list` are before `now`.
fn expired(list: &Mutex<Vec<u64>>, now: u64) -> u64 {
    let list = list.lock().unwrap_or_else(PoisonError::into_inner);
    list.iter().filter(|&&t| t < now).count() as u64
}

/// Times as seconds since the epoch (0 for one before it).
fn epoch_secs(times: &[std::time::SystemTime]) -> Vec<u64> {
    times
        .iter()
        .map(|t| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiations_fill_their_buckets() {
        let s = IpsecStats::default();
        s.negotiation(IkeResult::Ok, Duration::from_millis(3));
        s.negotiation(IkeResult::Ok, Duration::from_millis(40));
        s.negotiation(IkeResult::AuthFailed, Duration::from_secs(30));
        let (sum, count, buckets) = s.durations();
        assert_eq!(count, 3);
        assert!((sum - 30.043).abs() < 1e-9, "{sum}");
        assert_eq!(buckets[0], (0.005, 1));
        assert_eq!(buckets[3], (0.05, 1));
        assert_eq!(buckets[9], (10.0, 0));
        assert_eq!(buckets[10], (f64::INFINITY, 1));
        assert_eq!(s.negotiations(IkeResult::Ok), 2);
        assert_eq!(s.negotiations(IkeResult::AuthFailed), 1);
        let labels: Vec<_> = IkeResult::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            labels,
            [
                "ok",
                "auth_failed",
                "no_proposal",
                "ts_unacceptable",
                "timeout",
                "error"
            ]
        );
    }
}
