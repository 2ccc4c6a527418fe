//! The answer cache, and the small wire readers it needs (no full DNS parse on a hit).
//!
//! Final answers are cached as wire bytes, keyed by the query's lower-case name, type, class
//! and the bits that change the answer (EDNS present, DO, CD, AD). A hit copies the bytes,
//! puts in the client's ID, RD bit and question (its letter case), and lowers every TTL by the
//! entry's age: no allocation, no parse beyond the question.
//!
//! What is cached: NOERROR and NXDOMAIN answers that are not truncated, for the smallest TTL
//! among their records (for negative answers `min(SOA TTL, SOA MINIMUM)`, RFC 2308 §5), at most
//! [`MAX_TTL`]. Answers without any record (NODATA without SOA) and errors are not cached.
//! Each of 64 shards holds `capacity / 64` entries; a full shard first drops expired entries
//! (at most once a second), then the oldest insertion (FIFO). Evicting "the first key the map
//! iterates" instead was measured to throw out a third of the new entries at once.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::Outcome;

/// Longest cache key: a 255-byte name, type, class and the flag byte.
pub const MAX_KEY: usize = 255 + 5;
/// Longest TTL the cache keeps an answer for (one day).
pub const MAX_TTL: u32 = 86_400;
/// Largest answer kept (bytes).
pub const MAX_ENTRY: usize = 4096;
/// DNS over UDP without EDNS: 512 bytes (RFC 1035 §2.3.4).
pub const CLASSIC_UDP: usize = 512;

const SHARDS: usize = 64;
const TYPE_OPT: u16 = 41;
const TYPE_SOA: u16 = 6;

/// What [`parse_query`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryInfo {
    /// Bytes of the key written.
    pub key_len: usize,
    /// End of the question section (the question is `12..question_end`).
    pub question_end: usize,
    /// The largest UDP answer the client takes: 512 without EDNS, else its EDNS payload size
    /// clamped to 512..=`limit` (RFC 6891 §6.2.5).
    pub max_udp: usize,
}

/// Reads a plain query (one question, at most an OPT record, nothing else) and writes its
/// cache key into `key`. `None` for anything else (the full parser then decides), never a
/// panic. `udp_limit` is our own EDNS payload size.
pub fn parse_query(wire: &[u8], key: &mut [u8; MAX_KEY], udp_limit: u16) -> Option<QueryInfo> {
    let h = wire.get(..12)?;
    // QR=0, opcode QUERY, TC=0; exactly one question, no answer or authority records.
    if h[2] & 0xfa != 0 || h[3] & 0x40 != 0 {
        return None;
    }
    let count = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
    let (qd, an, ns, ar) = (count(4), count(6), count(8), count(10));
    if qd != 1 || an != 0 || ns != 0 || ar > 1 {
        return None;
    }
    let mut at = 12;
    let mut k = 0;
    loop {
        let len = usize::from(*wire.get(at)?);
        if len > 63 {
            return None; // compression pointers or extended labels: not in a plain query
        }
        let label = wire.get(at..at + 1 + len)?;
        if k + label.len() > 255 {
            return None;
        }
        for (dst, &b) in key[k..k + label.len()].iter_mut().zip(label) {
            *dst = b.to_ascii_lowercase();
        }
        k += label.len();
        at += 1 + len;
        if len == 0 {
            break;
        }
    }
    let tc = wire.get(at..at + 4)?;
    key[k..k + 4].copy_from_slice(tc);
    k += 4;
    let question_end = at + 4;
    let cd = h[3] & 0x10 != 0;
    let ad = h[3] & 0x20 != 0;
    let mut flags = u8::from(cd) << 2 | u8::from(ad) << 3;
    let mut max_udp = CLASSIC_UDP;
    if ar == 1 {
        // OPT (RFC 6891 §6.1.2): root name, type 41, class = payload, TTL = ext-rcode,
        // version, flags; then the options, which the answer does not depend on.
        let opt = wire.get(question_end..question_end + 11)?;
        let rdlen = usize::from(u16::from_be_bytes([opt[9], opt[10]]));
        if opt[0] != 0
            || u16::from_be_bytes([opt[1], opt[2]]) != TYPE_OPT
            || opt[6] != 0 // version 0 only; others get BADVERS from the full path
            || question_end + 11 + rdlen != wire.len()
        {
            return None;
        }
        let payload = usize::from(u16::from_be_bytes([opt[3], opt[4]]));
        max_udp = payload.clamp(CLASSIC_UDP, usize::from(udp_limit).max(CLASSIC_UDP));
        let dnssec_ok = opt[7] & 0x80 != 0;
        flags |= 1 | u8::from(dnssec_ok) << 1;
    } else if question_end != wire.len() {
        return None;
    }
    key[k] = flags;
    Some(QueryInfo {
        key_len: k + 1,
        question_end,
        max_udp,
    })
}

/// Where the TTLs of an answer are, and how long it may be cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ttls {
    /// Offsets of every TTL field except OPT's.
    pub offsets: Vec<u16>,
    /// How long the answer may be cached: the smallest TTL (SOA: `min(TTL, MINIMUM)`);
    /// `None` when it has no record to take it from.
    pub cache_ttl: Option<u32>,
}

/// Walks a DNS message and finds its TTL fields. `None` if it is malformed.
pub fn ttls(wire: &[u8]) -> Option<Ttls> {
    let h = wire.get(..12)?;
    let count = |i: usize| usize::from(u16::from_be_bytes([h[i], h[i + 1]]));
    let mut at = 12;
    for _ in 0..count(4) {
        at = skip_name(wire, at)? + 4;
    }
    let records = count(6) + count(8) + count(10);
    let mut offsets = Vec::with_capacity(records);
    let mut min: Option<u32> = None;
    for _ in 0..records {
        at = skip_name(wire, at)?;
        let fixed = wire.get(at..at + 10)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let ttl = u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let rdata = wire.get(at + 10..at + 10 + rdlen)?;
        if rtype != TYPE_OPT {
            offsets.push(u16::try_from(at + 4).ok()?);
            let mut t = ttl;
            if rtype == TYPE_SOA && rdlen >= 20 {
                let m = &rdata[rdlen - 4..];
                t = t.min(u32::from_be_bytes([m[0], m[1], m[2], m[3]]));
            }
            min = Some(min.map_or(t, |m| m.min(t)));
        }
        at += 10 + rdlen;
    }
    Some(Ttls {
        offsets,
        cache_ttl: min,
    })
}

/// The offset after the name at `at` (labels, ending in a zero or a compression pointer).
fn skip_name(wire: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *wire.get(at)?;
        match len {
            0 => return Some(at + 1),
            1..=63 => at += 1 + usize::from(len),
            0xc0..=0xff => {
                wire.get(at + 1)?;
                return Some(at + 2);
            }
            _ => return None,
        }
    }
}

/// A bounded, sharded cache of final answers in wire form.
#[derive(Debug)]
pub struct Cache {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: RandomState,
    epoch: Instant,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<Box<[u8]>, Entry>,
    /// Keys in insertion order with the stamp of their entry; a record whose stamp no longer
    /// matches the map's entry (replaced or swept) is stale and skipped.
    order: VecDeque<(Box<[u8]>, u64)>,
    next_stamp: u64,
    last_sweep: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    wire: Box<[u8]>,
    ttl_offsets: Box<[u16]>,
    stored: Instant,
    expires: Instant,
    result: Outcome,
    stamp: u64,
}

impl Cache {
    /// A cache of about `capacity` answers; 0 turns caching off.
    pub fn new(capacity: usize) -> Cache {
        let per_shard = capacity.div_ceil(SHARDS);
        Cache {
            shards: (0..if capacity == 0 { 0 } else { SHARDS })
                .map(|_| Mutex::new(Shard::default()))
                .collect(),
            per_shard,
            hasher: RandomState::new(),
            epoch: Instant::now(),
        }
    }

    /// True when caching is on.
    pub fn enabled(&self) -> bool {
        !self.shards.is_empty()
    }

    /// Answers `request` (whose [`parse_query`] gave `info` and wrote `key`) from the cache
    /// into `out`, if a live entry fits in `limit` bytes and in `out`. Returns the length and
    /// the result the answer counts as.
    pub fn answer(
        &self,
        key: &[u8],
        request: &[u8],
        info: &QueryInfo,
        limit: usize,
        now: Instant,
        out: &mut [u8],
    ) -> Option<(usize, Outcome)> {
        let shard = self.shard(key)?;
        let guard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let e = guard.map.get(key)?;
        let len = e.wire.len();
        if now >= e.expires || len > limit || len > out.len() || len < info.question_end {
            return None;
        }
        let out = &mut out[..len];
        out.copy_from_slice(&e.wire);
        let age = u32::try_from(now.saturating_duration_since(e.stored).as_secs()).unwrap_or(0);
        let result = e.result;
        for &off in e.ttl_offsets.iter() {
            let off = usize::from(off);
            if let Some(f) = out.get_mut(off..off + 4) {
                let ttl = u32::from_be_bytes([f[0], f[1], f[2], f[3]]).saturating_sub(age);
                f.copy_from_slice(&ttl.to_be_bytes());
            }
        }
        drop(guard);
        // The client's ID, RD bit and question (its letter case: same name, same length).
        out[..2].copy_from_slice(&request[..2]);
        out[2] = (out[2] & !0x01) | (request[2] & 0x01);
        out[12..info.question_end].copy_from_slice(&request[12..info.question_end]);
        Some((len, result))
    }

    /// Stores `answer` under `key` if it is cacheable (see the module documentation).
    pub fn insert(&self, key: &[u8], answer: &[u8], result: Outcome, now: Instant) {
        let Some(shard) = self.shard(key) else { return };
        if answer.len() > MAX_ENTRY || answer.len() < 12 {
            return;
        }
        let rcode = answer[3] & 0x0f;
        if answer[2] & 0x02 != 0 || !(rcode == 0 || rcode == 3) {
            return; // truncated, or not NOERROR/NXDOMAIN
        }
        let Some(t) = ttls(answer) else { return };
        let Some(ttl) = t.cache_ttl.filter(|&t| t > 0) else {
            return;
        };
        let entry = Entry {
            wire: answer.into(),
            ttl_offsets: t.offsets.into(),
            stored: now,
            expires: now + Duration::from_secs(u64::from(ttl.min(MAX_TTL))),
            result,
            stamp: 0,
        };
        let mut guard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let s = &mut *guard;
        if s.map.len() >= self.per_shard && !s.map.contains_key(key) {
            let sweep = s
                .last_sweep
                .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(1));
            if sweep {
                s.map.retain(|_, e| e.expires > now);
                s.last_sweep = Some(now);
            }
            // Then first in, first out: the oldest live insertion goes.
            while s.map.len() >= self.per_shard {
                let Some((k, stamp)) = s.order.pop_front() else {
                    break;
                };
                if s.map.get(&k).is_some_and(|e| e.stamp == stamp) {
                    s.map.remove(&k);
                }
            }
        }
        let stamp = s.next_stamp;
        s.next_stamp += 1;
        let key: Box<[u8]> = key.into();
        s.order.push_back((key.clone(), stamp));
        s.map.insert(key, Entry { stamp, ..entry });
        // Replacements and sweeps leave stale records behind; drop them now and then.
        if s.order.len() > 2 * self.per_shard.max(8) {
            let map = &s.map;
            s.order
                .retain(|(k, stamp)| map.get(k).is_some_and(|e| e.stamp == *stamp));
        }
    }

    /// Number of entries (expired ones included until they are swept or replaced).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).map.len())
            .sum()
    }

    /// True when [`Cache::len`] is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &[u8]) -> Option<&Mutex<Shard>> {
        if self.shards.is_empty() {
            return None;
        }
        let h = self.hasher.hash_one(key);
        // The high bits: the maps inside use the low ones.
        self.shards.get((h >> 58) as usize % self.shards.len())
    }

    /// When the cache was made (for tests of expiry).
    pub fn epoch(&self) -> Instant {
        self.epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{Edns, Message, OpCode, Query, ResponseCode};
    use hickory_proto::rr::rdata::{A, SOA};
    use hickory_proto::rr::{Name, RData, Record, RecordType};

    fn query(name: &str, edns: Option<bool>) -> Vec<u8> {
        let mut m = Message::query();
        m.metadata.id = 0xbeef;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        if let Some(dnssec_ok) = edns {
            let mut e = Edns::new();
            e.set_max_payload(4096);
            e.set_dnssec_ok(dnssec_ok);
            m.set_edns(e);
        }
        m.to_vec().unwrap()
    }

    fn answer_for(q: &[u8], ttl: u32) -> Vec<u8> {
        let req = Message::from_vec(q).unwrap();
        let mut m = Message::response(req.metadata.id, OpCode::Query);
        m.metadata.recursion_desired = true;
        m.queries = req.queries.clone();
        m.add_answer(Record::from_rdata(
            req.queries[0].name().clone(),
            ttl,
            RData::A(A::new(192, 0, 2, 1)),
        ));
        m.to_vec().unwrap()
    }

    #[test]
    fn key_ignores_case_and_id_but_not_flags() {
        let mut k1 = [0; MAX_KEY];
        let mut k2 = [0; MAX_KEY];
        let a = parse_query(&query("WWW.Example.", None), &mut k1, 1232).unwrap();
        let b = parse_query(&query("www.example.", None), &mut k2, 1232).unwrap();
        assert_eq!(k1[..a.key_len], k2[..b.key_len]);
        assert_eq!(a.max_udp, 512);
        let c = parse_query(&query("www.example.", Some(true)), &mut k2, 1232).unwrap();
        assert_ne!(k1[..a.key_len], k2[..c.key_len]);
        assert_eq!(c.max_udp, 1232, "clamped to our limit");
    }

    #[test]
    fn parse_query_refuses_what_it_does_not_know() {
        let mut k = [0; MAX_KEY];
        let q = query("a.example.", None);
        assert!(parse_query(&q[..11], &mut k, 1232).is_none());
        assert!(parse_query(&q[..q.len() - 1], &mut k, 1232).is_none());
        let mut resp = q.clone();
        resp[2] |= 0x80;
        assert!(parse_query(&resp, &mut k, 1232).is_none());
        let mut trailing = q.clone();
        trailing.push(0);
        assert!(parse_query(&trailing, &mut k, 1232).is_none());
        let mut pointer = q;
        pointer[12] = 0xc0;
        assert!(parse_query(&pointer, &mut k, 1232).is_none());
        // Every prefix and single-byte change of a valid query: no panic.
        let q = query("a.example.", Some(false));
        for n in 0..q.len() {
            let _ = parse_query(&q[..n], &mut k, 1232);
            for b in [0x00, 0x3f, 0x40, 0xc0, 0xff] {
                let mut m = q.clone();
                m[n] = b;
                let _ = parse_query(&m, &mut k, 1232);
                let _ = ttls(&m);
            }
        }
    }

    #[test]
    fn hit_rewrites_id_case_and_ttl() {
        let cache = Cache::new(128);
        let now = cache.epoch();
        let q1 = query("host.example.", None);
        let ans = answer_for(&q1, 300);
        let mut key = [0; MAX_KEY];
        let info = parse_query(&q1, &mut key, 1232).unwrap();
        cache.insert(&key[..info.key_len], &ans, Outcome::Native, now);
        assert_eq!(cache.len(), 1);

        let mut q2 = query("HOST.example.", None);
        q2[0..2].copy_from_slice(&[0x12, 0x34]);
        let info2 = parse_query(&q2, &mut key, 1232).unwrap();
        let mut out = [0u8; 1232];
        let later = now + Duration::from_secs(100);
        let (len, r) = cache
            .answer(&key[..info2.key_len], &q2, &info2, 512, later, &mut out)
            .unwrap();
        assert_eq!(r, Outcome::Native);
        let m = Message::from_vec(&out[..len]).unwrap();
        assert_eq!(m.metadata.id, 0x1234);
        assert_eq!(m.queries[0].name().to_ascii(), "HOST.example.");
        assert_eq!(m.answers[0].ttl, 200);
        // Expired, or too big for the client: miss.
        let gone = now + Duration::from_secs(300);
        assert!(
            cache
                .answer(&key[..info2.key_len], &q2, &info2, 512, gone, &mut out)
                .is_none()
        );
        assert!(
            cache
                .answer(&key[..info2.key_len], &q2, &info2, 20, later, &mut out)
                .is_none()
        );
    }

    #[test]
    fn negative_answers_use_the_soa_and_errors_are_not_cached() {
        let q = query("nx.example.", None);
        let req = Message::from_vec(&q).unwrap();
        let mut m = Message::response(1, OpCode::Query);
        m.queries = req.queries.clone();
        m.metadata.response_code = ResponseCode::NXDomain;
        let soa = SOA::new(
            Name::from_ascii("ns.example.").unwrap(),
            Name::from_ascii("h.example.").unwrap(),
            1,
            2,
            3,
            4,
            60,
        );
        m.add_authority(Record::from_rdata(
            Name::from_ascii("example.").unwrap(),
            3600,
            RData::SOA(soa),
        ));
        let t = ttls(&m.to_vec().unwrap()).unwrap();
        assert_eq!(t.cache_ttl, Some(60));
        assert_eq!(t.offsets.len(), 1);

        let cache = Cache::new(64);
        let mut key = [0; MAX_KEY];
        let info = parse_query(&q, &mut key, 1232).unwrap();
        m.metadata.response_code = ResponseCode::ServFail;
        cache.insert(
            &key[..info.key_len],
            &m.to_vec().unwrap(),
            Outcome::Error,
            cache.epoch(),
        );
        assert!(cache.is_empty());
        let empty = Message::response(1, OpCode::Query).to_vec().unwrap();
        cache.insert(&key[..info.key_len], &empty, Outcome::Native, cache.epoch());
        assert!(cache.is_empty(), "no record, no TTL: not cached");
    }

    #[test]
    fn bounded() {
        let cache = Cache::new(64); // one entry per shard
        let now = cache.epoch();
        let mut key = [0; MAX_KEY];
        for i in 0..1000 {
            let q = query(&format!("h{i}.example."), None);
            let info = parse_query(&q, &mut key, 1232).unwrap();
            cache.insert(
                &key[..info.key_len],
                &answer_for(&q, 60),
                Outcome::Native,
                now,
            );
        }
        assert!(cache.len() <= 64, "{}", cache.len());
        assert!(!Cache::new(0).enabled());
    }

    #[test]
    fn a_full_cache_keeps_what_it_just_stored() {
        let cache = Cache::new(2048);
        let now = cache.epoch();
        let mut key = [0; MAX_KEY];
        for i in 0..10_000 {
            let q = query(&format!("old{i}.example."), None);
            let info = parse_query(&q, &mut key, 1232).unwrap();
            cache.insert(
                &key[..info.key_len],
                &answer_for(&q, 60),
                Outcome::Native,
                now,
            );
        }
        let mut out = [0u8; 1232];
        for i in 0..200 {
            let q = query(&format!("new{i}.example."), None);
            let info = parse_query(&q, &mut key, 1232).unwrap();
            cache.insert(
                &key[..info.key_len],
                &answer_for(&q, 60),
                Outcome::Native,
                now,
            );
        }
        let hits = (0..200)
            .filter(|i| {
                let q = query(&format!("new{i}.example."), None);
                let info = parse_query(&q, &mut key, 1232).unwrap();
                let k = &key[..info.key_len];
                cache.answer(k, &q, &info, 512, now, &mut out).is_some()
            })
            .count();
        assert_eq!(hits, 200);
        assert!(cache.len() <= 2048);
    }
}
