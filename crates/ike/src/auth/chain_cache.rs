//! Chains already verified: the exact DER of a chain that webpki accepted under one set of
//! trust anchors, with the verified leaf it gave, so that the same chain sent again costs no
//! path building, no certificate signature checks and no parsing.
//!
//! What a hit skips depends only on the certificates themselves and on the anchors: the CA
//! signatures along the path, the leaf's key usage and extended key usage, its identities.
//! What depends on the moment is checked on every hit: the validity period of each certificate
//! of the path (a time outside the window of all of them goes through webpki again, which
//! refuses with its own error), and revocation by the CRLs ([`super::Crls::check_path`]; a list
//! whose signature is not yet known to verify sends the chain through webpki again). The AUTH
//! signature over the handshake is never cached, and neither is OCSP, which the caller checks.
//!
//! A chain enters only after its holder proved its key (the caller's
//! [`super::TrustAnchors::remember_verified`] once the AUTH signature verified), so a chain
//! copied from another client does not. The cache holds at most [`CAPACITY`] chains and drops
//! the oldest entry first; a new set of anchors or CRLs starts with an empty one.
//!
//! Its lookups and evictions are counted in a [`ChainCacheStats`] that outlives it: the
//! responder hands the counters of its old anchors to the new ones a reload loads
//! ([`super::TrustAnchors::with_cache_stats`]), so `gate64_ike_chain_cache_total` counts on.
//! Counting is a relaxed atomic add beside the lookup, no lock or allocation of its own.

use super::crl::PathCert;
use aws_lc_rs::digest;
use rustls_pki_types::CertificateDer;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

/// Chains held at most. A few kilobytes each (the chain's DER and its parsed leaf), so some
/// megabytes when full.
pub(crate) const CAPACITY: usize = 4096;

/// Tells caches apart, so that a leaf verified under one set of anchors is never remembered
/// by another.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The cache of one set of trust anchors (shared by its clones); `L` is the verified leaf a
/// hit gives back.
pub(crate) struct ChainCache<L> {
    id: u64,
    capacity: usize,
    inner: Mutex<Inner<L>>,
    /// Chains held, as the last insertion left the map: read without the lock.
    held: AtomicUsize,
    stats: Arc<ChainCacheStats>,
}

/// What the caches handed it counted ([`super::TrustAnchors::with_cache_stats`]): lookups
/// that found their chain (`hit`), lookups that did not (`miss`), and chains dropped as the
/// oldest of a full cache (`evicted`). Shared: the caches of both authentication rounds
/// count into the responder's one, and a reload's new anchors keep counting into it.
#[derive(Debug, Default)]
pub struct ChainCacheStats {
    hits: AtomicU64,
    misses: AtomicU64,
    evicted: AtomicU64,
}

impl ChainCacheStats {
    /// Lookups that found their chain (its validity and the CRLs are still checked, and a
    /// time outside its window sends it through webpki again).
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Lookups that did not find their chain (webpki verified it). Chains too long to be
    /// looked up (more than 4 certificates or 8 KiB) are neither hits nor misses.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Chains dropped as the oldest of a full cache; a cache a reload replaces is not counted.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// These counts with `entries`, the chains held now.
    pub fn counts(&self, entries: u64) -> ChainCacheCounts {
        ChainCacheCounts {
            entries,
            hits: self.hits(),
            misses: self.misses(),
            evicted: self.evicted(),
        }
    }
}

/// The responder's chain cache as the metrics show it (`gate64_ike_chain_cache_entries`,
/// `gate64_ike_chain_cache_total{result}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChainCacheCounts {
    /// Chains held now, by the caches of both authentication rounds.
    pub entries: u64,
    /// [`ChainCacheStats::hits`].
    pub hits: u64,
    /// [`ChainCacheStats::misses`].
    pub misses: u64,
    /// [`ChainCacheStats::evicted`].
    pub evicted: u64,
}

struct Inner<L> {
    map: HashMap<[u8; 32], Arc<Entry<L>>>,
    /// Keys in the order they came in: the first is dropped when the cache is full.
    order: VecDeque<[u8; 32]>,
}

/// What a hit needs: the chain it was (compared byte for byte), the window in which every
/// certificate of its path is valid, its path as revocation sees it, and the verified leaf.
pub(crate) struct Entry<L> {
    pub(crate) facts: ChainFacts,
    pub(crate) leaf: L,
}

/// What verification learned of a chain beyond its leaf, kept with the leaf it gave
/// ([`super::PeerCert`]) until the caller says the chain may be remembered.
#[derive(Debug, Clone)]
pub(crate) struct ChainFacts {
    /// The cache of the anchors that verified it.
    cache_id: u64,
    /// [`chain_key`] of the chain.
    key: [u8; 32],
    /// The chain as [`chain_bytes`] lays it out.
    chain: Vec<u8>,
    /// The latest notBefore and the earliest notAfter of the path's certificates (leaf and
    /// intermediates; the trust anchor's own dates bind nothing, as in webpki), in seconds
    /// since the Unix epoch.
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
    /// The path's certificates as [`super::Crls::check_path`] takes them, leaf first.
    pub(crate) path: Vec<OwnedPathCert>,
}

/// [`PathCert`] with its own bytes.
#[derive(Debug, Clone)]
pub(crate) struct OwnedPathCert {
    pub(crate) issuer: Vec<u8>,
    pub(crate) serial: Vec<u8>,
    pub(crate) issuer_key: [u8; 32],
}

impl From<&PathCert<'_>> for OwnedPathCert {
    fn from(c: &PathCert<'_>) -> Self {
        OwnedPathCert {
            issuer: c.issuer.to_vec(),
            serial: c.serial.to_vec(),
            issuer_key: c.issuer_key,
        }
    }
}

impl OwnedPathCert {
    pub(crate) fn borrowed(&self) -> PathCert<'_> {
        PathCert {
            issuer: &self.issuer,
            serial: &self.serial,
            issuer_key: self.issuer_key,
        }
    }
}

/// The chain as one byte string: each certificate's length (4 bytes, big-endian) then its DER,
/// leaf first, so that no two chains give the same bytes.
pub(crate) fn chain_bytes(leaf: &[u8], intermediates: &[&[u8]]) -> Vec<u8> {
    let total = 4 + leaf.len() + intermediates.iter().map(|c| 4 + c.len()).sum::<usize>();
    let mut out = Vec::with_capacity(total);
    for cert in std::iter::once(leaf).chain(intermediates.iter().copied()) {
        // A certificate is at most an IKE message long, far below 4 GiB.
        out.extend_from_slice(&u32::try_from(cert.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(cert);
    }
    out
}

/// SHA-256 of [`chain_bytes`]: the map's key (a hit still compares the bytes).
pub(crate) fn chain_key(chain: &[u8]) -> [u8; 32] {
    let mut key = [0u8; 32];
    key.copy_from_slice(digest::digest(&digest::SHA256, chain).as_ref());
    key
}

/// The latest notBefore and earliest notAfter of the leaf and the intermediates of a verified
/// path, in seconds since the Unix epoch; `None` if one does not parse (then the chain is not
/// cached).
pub(crate) fn path_validity(leaf: &[u8], path: &webpki::VerifiedPath<'_>) -> Option<(i64, i64)> {
    let mut window = (i64::MIN, i64::MAX);
    let intermediates = path.intermediate_certificates().map(|c| c.der());
    for der in std::iter::once(CertificateDer::from(leaf)).chain(intermediates) {
        let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
        let v = cert.validity();
        window.0 = window.0.max(v.not_before.timestamp());
        window.1 = window.1.min(v.not_after.timestamp());
    }
    Some(window)
}

impl<L> std::fmt::Debug for ChainCache<L> {
    /// How many chains, not which: the anchors' Debug stays short.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainCache")
            .field("chains", &self.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl<L> Default for ChainCache<L> {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl<L> ChainCache<L> {
    /// An empty cache of at most `capacity` chains, with counters of its own.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self::counting_into(capacity, Arc::default())
    }

    /// An empty cache of at most `capacity` chains that counts into `stats`.
    pub(crate) fn counting_into(capacity: usize, stats: Arc<ChainCacheStats>) -> Self {
        ChainCache {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            capacity,
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                order: VecDeque::new(),
            }),
            held: AtomicUsize::new(0),
            stats,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<L>> {
        // The map is consistent after every statement that changes it: a panic elsewhere
        // while it was held leaves nothing half-done.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The entry for `chain` (its bytes and key), if it holds that exact chain; counted as a
    /// hit or a miss.
    pub(crate) fn get(&self, key: &[u8; 32], chain: &[u8]) -> Option<Arc<Entry<L>>> {
        let entry = self.lock().map.get(key).cloned();
        let found = entry.filter(|e| e.facts.chain == chain);
        let counter = match found {
            Some(_) => &self.stats.hits,
            None => &self.stats.misses,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// The facts of a chain these anchors verified, for the leaf to carry.
    pub(crate) fn facts(
        &self,
        chain: Vec<u8>,
        not_before: i64,
        not_after: i64,
        path: Vec<OwnedPathCert>,
    ) -> ChainFacts {
        ChainFacts {
            cache_id: self.id,
            key: chain_key(&chain),
            chain,
            not_before,
            not_after,
            path,
        }
    }

    /// Keeps the chain of `facts` with its `leaf`, if this cache's anchors verified it
    /// ([`ChainCache::facts`]); drops the oldest entry when full, counted as evicted.
    pub(crate) fn insert(&self, facts: &ChainFacts, leaf: L) {
        if facts.cache_id != self.id || self.capacity == 0 {
            return;
        }
        let entry = Arc::new(Entry {
            facts: facts.clone(),
            leaf,
        });
        let mut inner = self.lock();
        if inner.map.insert(facts.key, entry).is_some() {
            return;
        }
        inner.order.push_back(facts.key);
        while inner.order.len() > self.capacity {
            if let Some(old) = inner.order.pop_front() {
                inner.map.remove(&old);
                self.stats.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.held.store(inner.map.len(), Ordering::Relaxed);
    }

    /// Chains held at most.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Chains held (no lock taken).
    pub(crate) fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The counters this cache counts into.
    pub(crate) fn stats(&self) -> &Arc<ChainCacheStats> {
        &self.stats
    }

    /// An empty cache of the same capacity, counting into the same counters.
    pub(crate) fn emptied(&self) -> Self {
        Self::counting_into(self.capacity, Arc::clone(&self.stats))
    }
}

/// The cache as the anchors' users see it.
impl super::TrustAnchors {
    /// These anchors with an empty cache of at most `capacity` chains (0: none; default
    /// 4,096), counting into the same [`ChainCacheStats`].
    pub fn with_cache_capacity(mut self, capacity: usize) -> Self {
        self.cache = Arc::new(ChainCache::counting_into(
            capacity,
            Arc::clone(self.cache.stats()),
        ));
        self
    }

    /// These anchors with an empty cache of the same capacity that counts into `stats`: how
    /// the responder keeps one set of counters across reloads and both authentication rounds.
    pub fn with_cache_stats(mut self, stats: Arc<ChainCacheStats>) -> Self {
        self.cache = Arc::new(ChainCache::counting_into(self.cache.capacity(), stats));
        self
    }

    /// The counters the cache counts into (shared by clones, kept by
    /// [`super::TrustAnchors::for_clients`], [`super::TrustAnchors::with_crls`] and
    /// [`super::TrustAnchors::with_cache_capacity`]).
    pub fn cache_stats(&self) -> &Arc<ChainCacheStats> {
        self.cache.stats()
    }

    /// Chains held by the cache of [`super::TrustAnchors::remember_verified`] (no lock taken).
    pub fn cached_chains(&self) -> usize {
        self.cache.len()
    }

    /// Lookups that found their chain ([`ChainCacheStats::hits`]), since these anchors' counters
    /// were made.
    pub fn cache_hits(&self) -> u64 {
        self.cache.stats().hits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Facts of a made-up chain `n` (one 8-byte "certificate"), from `cache`'s anchors.
    fn facts(cache: &ChainCache<u32>, n: u32) -> ChainFacts {
        let cert = u64::from(n).to_be_bytes();
        cache.facts(chain_bytes(&cert, &[]), 0, i64::MAX, Vec::new())
    }

    fn holds(cache: &ChainCache<u32>, n: u32) -> bool {
        let f = facts(cache, n);
        cache.get(&f.key, &f.chain).is_some_and(|e| e.leaf == n)
    }

    /// Filling past a small capacity keeps `capacity` chains, the newest; the oldest leave
    /// first, in the order they came in, and a chain inserted twice is held once.
    #[test]
    fn past_its_capacity_the_cache_drops_the_oldest_first() {
        let cache = ChainCache::with_capacity(3);
        for n in 0..3 {
            cache.insert(&facts(&cache, n), n);
        }
        cache.insert(&facts(&cache, 1), 1);
        assert_eq!(cache.len(), 3, "the same chain twice is held once");
        for n in 3..8 {
            cache.insert(&facts(&cache, n), n);
            assert_eq!(cache.len(), 3);
            let held: Vec<u32> = (0..8).filter(|&m| holds(&cache, m)).collect();
            assert_eq!(held, vec![n - 2, n - 1, n], "after inserting {n}");
        }
        let other = ChainCache::<u32>::with_capacity(3);
        cache.insert(&facts(&other, 9), 9);
        assert!(!holds(&cache, 9), "another cache's chain is not kept");
        let off = ChainCache::with_capacity(0);
        off.insert(&facts(&off, 1), 1);
        assert_eq!(off.len(), 0);
        // 8 chains through 3 places: 5 dropped; nothing of the other cache's was kept.
        assert_eq!(cache.stats().evicted(), 5);
        assert_eq!(off.stats().evicted(), 0);
    }

    /// The default cache never holds more than [`CAPACITY`] (4,096) chains, however many
    /// come, and keeps the latest [`CAPACITY`].
    #[test]
    fn the_default_cache_never_exceeds_4096_chains() {
        let cache = ChainCache::default();
        assert_eq!((cache.capacity(), CAPACITY), (4096, 4096));
        let total = CAPACITY as u32 + 1000;
        for n in 0..total {
            cache.insert(&facts(&cache, n), n);
            assert!(cache.len() <= CAPACITY, "{} after {n}", cache.len());
        }
        assert_eq!(cache.len(), CAPACITY);
        assert!(!holds(&cache, 999) && holds(&cache, 1000) && holds(&cache, total - 1));
    }
}
