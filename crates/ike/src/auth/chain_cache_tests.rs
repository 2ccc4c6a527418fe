//! Tests of the cache of verified chains ([`super::chain_cache`]): what a hit skips, what it
//! still checks (validity, revocation), and its bound.

use super::crl_tests::crl;
use super::tests::{Ca, ca, key, leaf_with};
use super::*;
use rcgen::SerialNumber;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn leaf(ca: &Ca, serial: u64, not_after_year: i32) -> Vec<u8> {
    leaf_with(ca, &key(&rcgen::PKCS_ECDSA_P256_SHA256), |p| {
        p.serial_number = Some(SerialNumber::from(serial));
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(not_after_year, 1, 1);
    })
    .der
}

fn at(year: i32) -> SystemTime {
    let secs = rcgen::date_time_ymd(year, 6, 1).unix_timestamp();
    UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap())
}

fn anchors(ca: &Ca) -> TrustAnchors {
    TrustAnchors::from_pem(ca.pem.as_bytes()).unwrap()
}

fn with_crl(anchors: TrustAnchors, ca: &Ca, serials: &[u64]) -> TrustAnchors {
    let list = Crl::parse(&crl(&ca.issuer, serials, 2099)).unwrap();
    anchors.with_crls(Crls::new(list, false))
}

#[test]
fn a_remembered_chain_is_a_hit_and_gives_the_same_leaf() {
    let lab = ca("lab CA");
    let (sub, sub_der) = lab.intermediate("lab issuing CA");
    let anchors = anchors(&lab);
    let der = leaf(&sub, 7, 2099);
    let first = anchors.verify_peer(&der, &[&sub_der], at(2030)).unwrap();
    // Verified but not yet proven: nothing kept.
    assert_eq!(anchors.cached_chains(), 0);
    anchors.verify_peer(&der, &[&sub_der], at(2030)).unwrap();
    assert_eq!(anchors.cache_hits(), 0);
    anchors.remember_verified(&first);
    assert_eq!(anchors.cached_chains(), 1);
    // A clone (a verification job's) shares the cache.
    let again = anchors
        .clone()
        .verify_peer(&der, &[&sub_der], at(2030))
        .unwrap();
    assert_eq!(anchors.cache_hits(), 1);
    assert_eq!(again.der(), first.der());
    assert_eq!(again.subject(), first.subject());
    assert_eq!(again.identity_key(), first.identity_key());
    assert_eq!(again.issuers(), first.issuers());
    assert_eq!(again.revocation_key(), first.revocation_key());
    assert_eq!(again.ocsp_query(), first.ocsp_query());
    assert_eq!(again.summary(), first.summary());
    // A leaf from the cache is not remembered twice.
    anchors.remember_verified(&again);
    assert_eq!(anchors.cached_chains(), 1);
}

#[test]
fn another_chain_misses_and_other_anchors_keep_nothing() {
    let lab = ca("lab CA");
    let (sub, sub_der) = lab.intermediate("lab issuing CA");
    let anchors = anchors(&lab);
    let der = leaf(&sub, 7, 2099);
    let peer = anchors.verify_peer(&der, &[&sub_der], at(2030)).unwrap();
    anchors.remember_verified(&peer);
    // The same leaf without its intermediate is another chain: webpki refuses it.
    assert_eq!(
        anchors.verify_peer(&der, &[], at(2030)).unwrap_err(),
        AuthError::UnknownCa
    );
    // Another leaf of the same CA.
    anchors
        .verify_peer(&leaf(&sub, 8, 2099), &[&sub_der], at(2030))
        .unwrap();
    assert_eq!(anchors.cache_hits(), 0);
    // Anchors loaded anew (a reload) start empty and do not take the old anchors' leaf.
    let reloaded = TrustAnchors::from_pem(lab.pem.as_bytes()).unwrap();
    reloaded.remember_verified(&peer);
    assert_eq!(reloaded.cached_chains(), 0);
    reloaded.verify_peer(&der, &[&sub_der], at(2030)).unwrap();
    assert_eq!(reloaded.cache_hits(), 0);
}

#[test]
fn the_cache_holds_at_most_its_capacity_and_drops_the_oldest() {
    let lab = ca("lab CA");
    let anchors = anchors(&lab).with_cache_capacity(2);
    let leaves: Vec<Vec<u8>> = (1..=3).map(|s| leaf(&lab, s, 2099)).collect();
    for der in &leaves {
        let peer = anchors.verify_peer(der, &[], at(2030)).unwrap();
        anchors.remember_verified(&peer);
        assert!(anchors.cached_chains() <= 2);
    }
    assert_eq!(anchors.cached_chains(), 2);
    anchors.verify_peer(&leaves[0], &[], at(2030)).unwrap();
    assert_eq!(anchors.cache_hits(), 0, "the first was dropped");
    anchors.verify_peer(&leaves[2], &[], at(2030)).unwrap();
    assert_eq!(anchors.cache_hits(), 1);
}

#[test]
fn a_cached_chain_is_refused_once_a_crl_revokes_it() {
    let lab = ca("lab CA");
    let anchors = with_crl(anchors(&lab), &lab, &[99]);
    let der = leaf(&lab, 8, 2099);
    let peer = anchors.verify_peer(&der, &[], at(2030)).unwrap();
    anchors.remember_verified(&peer);
    anchors.verify_peer(&der, &[], at(2030)).unwrap();
    assert_eq!(anchors.cache_hits(), 1);
    // A new list (a reload) empties the cache, and revokes.
    let reloaded = with_crl(anchors.clone(), &lab, &[8]);
    assert_eq!(reloaded.cached_chains(), 0);
    assert_eq!(
        reloaded.verify_peer(&der, &[], at(2030)).unwrap_err(),
        AuthError::Revoked
    );
    // The same list read by the cache's own lookup: once its signature is known (checked with
    // another chain), a hit is refused by the lookup itself.
    let listed = Crls::new(Crl::parse(&crl(&lab.issuer, &[8], 2099)).unwrap(), false);
    let kept = anchors.with_crls_keeping_cache(listed);
    kept.verify_peer(&leaf(&lab, 5, 2099), &[], at(2030))
        .unwrap();
    let hits = kept.cache_hits();
    assert_eq!(
        kept.verify_peer(&der, &[], at(2030)).unwrap_err(),
        AuthError::Revoked
    );
    assert_eq!(kept.cache_hits(), hits + 1, "refused on the hit");
}

#[test]
fn a_cached_chain_is_refused_outside_its_validity() {
    let lab = ca("lab CA");
    let (sub, sub_der) = lab.intermediate("lab issuing CA");
    let anchors = anchors(&lab);
    let der = leaf(&sub, 7, 2040);
    let peer = anchors.verify_peer(&der, &[&sub_der], at(2030)).unwrap();
    anchors.remember_verified(&peer);
    assert_eq!(
        anchors
            .verify_peer(&der, &[&sub_der], at(2041))
            .unwrap_err(),
        AuthError::Expired
    );
    assert_eq!(
        anchors
            .verify_peer(&der, &[&sub_der], at(2019))
            .unwrap_err(),
        AuthError::NotYetValid
    );
    // Both were found in the cache, outside its window, and refused by webpki's own check.
    assert_eq!(anchors.cache_hits(), 2);
    anchors.verify_peer(&der, &[&sub_der], at(2039)).unwrap();
    assert_eq!(anchors.cache_hits(), 3);
}

/// The counters behind `gate64_ike_chain_cache_total`: a chain seen again is a hit, a new one
/// a miss, and filling a cache of 2 past its bound evicts the oldest, whose next lookup
/// misses again.
#[test]
fn the_counters_count_hits_misses_and_evictions() {
    let lab = ca("lab CA");
    let (sub, sub_der) = lab.intermediate("lab issuing CA");
    let anchors = anchors(&lab).with_cache_capacity(2);
    let stats = Arc::clone(anchors.cache_stats());
    let counts = |entries| stats.counts(entries);
    let leaves: Vec<Vec<u8>> = (1..=3).map(|s| leaf(&sub, s, 2099)).collect();
    let verify = |der: &Vec<u8>| anchors.verify_peer(der, &[&sub_der], at(2030)).unwrap();
    let first = verify(&leaves[0]);
    anchors.remember_verified(&first);
    assert_eq!(
        counts(1),
        ChainCacheCounts {
            entries: 1,
            misses: 1,
            ..Default::default()
        }
    );
    verify(&leaves[0]);
    let held = anchors.cached_chains() as u64;
    assert_eq!(
        counts(held),
        ChainCacheCounts {
            entries: 1,
            hits: 1,
            misses: 1,
            evicted: 0
        }
    );
    for der in &leaves[1..] {
        let peer = verify(der);
        anchors.remember_verified(&peer);
    }
    let held = anchors.cached_chains() as u64;
    assert_eq!(
        counts(held),
        ChainCacheCounts {
            entries: 2,
            hits: 1,
            misses: 3,
            evicted: 1
        }
    );
    verify(&leaves[0]);
    verify(&leaves[2]);
    assert_eq!((stats.hits(), stats.misses(), stats.evicted()), (2, 4, 1));
    // Chains too long to be looked up count as neither.
    let long = vec![sub_der.as_slice(); 4];
    let _ = anchors.verify_peer(&leaves[0], &long, at(2030));
    assert_eq!((stats.hits(), stats.misses()), (2, 4));
}

/// The counters outlive the cache: new CRLs or a new capacity empty it and keep counting into
/// the same counters, and anchors loaded anew (a reload) count into counters handed in.
#[test]
fn the_counters_outlive_the_cache() {
    let lab = ca("lab CA");
    let der = leaf(&lab, 7, 2099);
    let anchors = anchors(&lab);
    let peer = anchors.verify_peer(&der, &[], at(2030)).unwrap();
    anchors.remember_verified(&peer);
    anchors.verify_peer(&der, &[], at(2030)).unwrap();
    let stats = Arc::clone(anchors.cache_stats());
    assert_eq!((stats.hits(), stats.misses()), (1, 1));
    let listed = with_crl(anchors, &lab, &[99]);
    assert_eq!(listed.cached_chains(), 0);
    listed.verify_peer(&der, &[], at(2030)).unwrap();
    assert_eq!(
        (stats.hits(), stats.misses()),
        (1, 2),
        "counted on after new CRLs"
    );
    let reloaded = TrustAnchors::from_pem(lab.pem.as_bytes())
        .unwrap()
        .with_cache_stats(Arc::clone(&stats));
    assert!(Arc::ptr_eq(reloaded.cache_stats(), &stats));
    let peer = reloaded.verify_peer(&der, &[], at(2030)).unwrap();
    reloaded.remember_verified(&peer);
    reloaded.verify_peer(&der, &[], at(2030)).unwrap();
    assert_eq!(
        (stats.hits(), stats.misses()),
        (2, 3),
        "counted on after a reload"
    );
    // Anchors loaded without them count apart.
    let apart = TrustAnchors::from_pem(lab.pem.as_bytes()).unwrap();
    apart.verify_peer(&der, &[], at(2030)).unwrap();
    assert_eq!((stats.misses(), apart.cache_stats().misses()), (3, 1));
}
