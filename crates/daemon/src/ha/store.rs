//! What the standby keeps of its peer's SAs until a takeover: the latest record of each IKE
//! SA (by responder SPI) and child SA (by inbound SPI), bounded. Only messages that
//! authenticated reach it; a record that does not decode is dropped and counted. Counters
//! (`ChildCounters`) raise the child SA records they name and never lower them; counters for
//! a child SA without a record are counted and dropped (its record comes with the sender's
//! next refresh).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use gate64_ha::{ChildCounters, ChildSaRecord, DecodeError, Gone, MessageType};
use gate64_ike::responder::SyncedIkeSa;

/// Most IKE SA records kept: gate64's default cap on IKE SAs, with room.
pub(crate) const MAX_IKE_RECORDS: usize = 262_144;
/// Most child SA records kept: two per IKE SA, with room for rekeys in flight.
pub(crate) const MAX_CHILD_RECORDS: usize = 2 * MAX_IKE_RECORDS;

/// Why an authentic message changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreDrop {
    /// Its record did not decode (a bug on the sender, or a type this build does not store).
    Undecodable,
    /// Its record or counters have a version this build does not read (the peer runs
    /// another release).
    UnknownVersion,
    /// The store holds its maximum of that kind of record.
    Full,
}

impl StoreDrop {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StoreDrop::Undecodable => "undecodable",
            StoreDrop::UnknownVersion => "unknown_version",
            StoreDrop::Full => "store_full",
        }
    }
}

/// What an applied message did beyond storing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Applied {
    /// Counters entries for child SAs the store holds no record of: dropped.
    pub(crate) unknown_counters: u64,
}

fn drop_of(e: DecodeError) -> StoreDrop {
    match e {
        DecodeError::Version(_) => StoreDrop::UnknownVersion,
        _ => StoreDrop::Undecodable,
    }
}

/// An IKE SA record, and when the peer made that IKE SA as this node reckons it: when the
/// record came, less the age it was exported with (the sync link's delay aside).
struct IkeRecord {
    sa: SyncedIkeSa,
    made: Instant,
}

/// The records.
pub(crate) struct Store {
    ike: HashMap<u64, IkeRecord>,
    child: HashMap<u32, ChildSaRecord>,
    max: (usize, usize),
    /// An IKE SA record came or went since [`Store::ike_spis_if_changed`] last answered.
    ike_changed: bool,
    /// The responder SPI of the IKE SA record naming each inbound child SPI.
    by_child: HashMap<u32, u64>,
    /// A child SA record came or went since [`Store::child_spis_if_changed`] last answered.
    child_changed: bool,
}

impl Store {
    pub(crate) fn new(max_ike: usize, max_child: usize) -> Self {
        Store {
            ike: HashMap::new(),
            child: HashMap::new(),
            max: (max_ike, max_child),
            ike_changed: false,
            by_child: HashMap::new(),
            child_changed: false,
        }
    }

    /// Forgets which child SAs IKE SA record `r` named.
    fn unindex(by_child: &mut HashMap<u32, u64>, r: &SyncedIkeSa) {
        for c in &r.children {
            if by_child.get(&c.inbound_spi) == Some(&r.spi_r) {
                by_child.remove(&c.inbound_spi);
            }
        }
    }

    /// Takes the body of an authentic message of type `kind`, which came now: a record
    /// replaces the one with its SPI (a child SA's keeping the higher of each counter:
    /// datagrams reorder), a `Gone` removes it, counters raise the records they name.
    pub(crate) fn apply(&mut self, kind: MessageType, body: &[u8]) -> Result<Applied, StoreDrop> {
        self.apply_at(kind, body, Instant::now())
    }

    /// [`Store::apply`] of a message that came at `now`.
    pub(crate) fn apply_at(
        &mut self,
        kind: MessageType,
        body: &[u8],
        now: Instant,
    ) -> Result<Applied, StoreDrop> {
        if let Some(gone) = Gone::decode(kind, body) {
            match gone.map_err(|_| StoreDrop::Undecodable)? {
                Gone::IkeSa(spi) => {
                    if let Some(old) = self.ike.remove(&spi) {
                        Self::unindex(&mut self.by_child, &old.sa);
                        self.ike_changed = true;
                    }
                }
                Gone::ChildSa(spi) => {
                    self.child_changed |= self.child.remove(&spi).is_some();
                }
            }
            return Ok(Applied::default());
        }
        match kind {
            MessageType::IkeSa => {
                let r = gate64_ha::decode_ike_sa(body).map_err(drop_of)?;
                if self.ike.len() >= self.max.0 && !self.ike.contains_key(&r.spi_r) {
                    return Err(StoreDrop::Full);
                }
                let pair = (r.spi_i, r.spi_r);
                for c in &r.children {
                    self.by_child.insert(c.inbound_spi, r.spi_r);
                }
                let made = now.checked_sub(r.age).unwrap_or(now);
                let old = (self.ike.insert(r.spi_r, IkeRecord { sa: r, made })).map(|o| o.sa);
                if let Some(old) = &old {
                    // Children it no longer names (rekeyed away) lose their index entry.
                    let now = self.ike.get(&old.spi_r).map(|r| &r.sa.children);
                    for c in &old.children {
                        let kept =
                            now.is_some_and(|n| n.iter().any(|k| k.inbound_spi == c.inbound_spi));
                        if !kept && self.by_child.get(&c.inbound_spi) == Some(&old.spi_r) {
                            self.by_child.remove(&c.inbound_spi);
                        }
                    }
                }
                self.ike_changed |= old.map(|o| (o.spi_i, o.spi_r)) != Some(pair);
            }
            MessageType::ChildSa => {
                let mut r = ChildSaRecord::decode(body).map_err(drop_of)?;
                let spi = r.inbound.spi;
                match self.child.get(&spi) {
                    Some(old) => {
                        r.apply_counters(&old.counters());
                    }
                    None if self.child.len() >= self.max.1 => return Err(StoreDrop::Full),
                    None => self.child_changed = true,
                }
                self.child.insert(spi, r);
            }
            MessageType::ChildCounters => {
                let entries = ChildCounters::decode_batch(body).map_err(drop_of)?;
                let mut applied = Applied::default();
                for c in &entries {
                    match self.child.get_mut(&c.spi) {
                        Some(r) => {
                            r.apply_counters(c);
                        }
                        None => applied.unknown_counters += 1,
                    }
                }
                return Ok(applied);
            }
            _ => return Err(StoreDrop::Undecodable),
        }
        Ok(Applied::default())
    }

    /// The (initiator's, responder's) SPIs of every IKE SA record, when one came or went
    /// since the last call: what the responder must not answer as unknown before the takeover.
    pub(crate) fn ike_spis_if_changed(&mut self) -> Option<HashSet<(u64, u64)>> {
        if !std::mem::take(&mut self.ike_changed) {
            return None;
        }
        Some(
            self.ike
                .values()
                .map(|r| (r.sa.spi_i, r.sa.spi_r))
                .collect(),
        )
    }

    /// The inbound SPIs of every child SA record, when one came or went since the last
    /// call: what the ESP stage hands to the on-demand takeover when it finds no SA.
    pub(crate) fn child_spis_if_changed(&mut self) -> Option<HashSet<u32>> {
        if !std::mem::take(&mut self.child_changed) {
            return None;
        }
        Some(self.child.keys().copied().collect())
    }

    /// The record of the child SA whose inbound SPI is `spi`, and the responder SPI of the
    /// IKE SA record naming it (none when no IKE SA record does).
    pub(crate) fn child(&self, spi: u32) -> Option<(&ChildSaRecord, Option<u64>)> {
        let r = self.child.get(&spi)?;
        Some((r, self.by_child.get(&spi).copied()))
    }

    /// Every record, leaving the store empty (a takeover installs them).
    pub(crate) fn take(&mut self) -> (Vec<SyncedIkeSa>, Vec<ChildSaRecord>) {
        self.ike_changed = false;
        self.child_changed |= !self.child.is_empty();
        self.by_child.clear();
        let ike = self.ike.drain().map(|(_, r)| r.sa).collect();
        let child = self.child.drain().map(|(_, r)| r).collect();
        (ike, child)
    }

    /// The record of IKE SA `spi_r`.
    pub(crate) fn ike(&self, spi_r: u64) -> Option<&SyncedIkeSa> {
        self.ike.get(&spi_r).map(|r| &r.sa)
    }

    /// The record of IKE SA `spi_r` and when the peer made that IKE SA.
    pub(crate) fn ike_made(&self, spi_r: u64) -> Option<(&SyncedIkeSa, Instant)> {
        self.ike.get(&spi_r).map(|r| (&r.sa, r.made))
    }

    /// Every IKE SA record and when the peer made that IKE SA.
    pub(crate) fn ike_records(&self) -> impl Iterator<Item = (&SyncedIkeSa, Instant)> {
        self.ike.values().map(|r| (&r.sa, r.made))
    }

    /// Takes out IKE SA `spi_r`'s record and those of the child SAs whose inbound SPIs
    /// `children` names (an on-demand takeover installs them); the rest stays.
    pub(crate) fn take_one(
        &mut self,
        spi_r: u64,
        children: &[u32],
    ) -> Option<(SyncedIkeSa, Vec<ChildSaRecord>)> {
        let ike = self.ike.remove(&spi_r)?.sa;
        Self::unindex(&mut self.by_child, &ike);
        self.ike_changed = true;
        let child: Vec<ChildSaRecord> = children
            .iter()
            .filter_map(|spi| self.child.remove(spi))
            .collect();
        self.child_changed |= !child.is_empty();
        Some((ike, child))
    }

    /// How many IKE and child SA records it holds.
    pub(crate) fn len(&self) -> (usize, usize) {
        (self.ike.len(), self.child.len())
    }
}

#[cfg(test)]
pub(crate) use tests::{sample, test_child_pair, test_sa_params};

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_ike::child_sa::TunnelKind;
    use gate64_ike::keys::Secret;
    use gate64_ike::responder::{SyncedChildRef, SyncedIkeKeys};
    use std::time::{Duration, Instant};

    #[test]
    fn a_synced_ike_sa_survives_its_encoding() {
        let sa = sample();
        let bytes = gate64_ha::encode_ike_sa(&sa);
        assert_eq!(gate64_ha::decode_ike_sa(&bytes), Ok(sa));
    }

    pub(crate) fn sample() -> SyncedIkeSa {
        let key = |b: u8, n: usize| Secret(vec![b; n]);
        SyncedIkeSa {
            spi_i: 1,
            spi_r: 2,
            prf: 5,
            integ: 0,
            encr: 20,
            encr_key_bits: 256,
            keys: SyncedIkeKeys {
                sk_d: key(1, 32),
                sk_ai: key(0, 0),
                sk_ar: key(0, 0),
                sk_ei: key(2, 36),
                sk_er: key(3, 36),
                sk_pi: key(4, 32),
                sk_pr: key(5, 32),
            },
            next_id_in: 9,
            next_id_out: 4,
            local: "[2001:db8::1]:4500".parse().unwrap(),
            remote: "[2001:db8::7]:4500".parse().unwrap(),
            identity: "CN=c7".to_owned(),
            alt_names: vec!["c7.corp".to_owned()],
            identity_key: [7; 32],
            peer_id: None,
            tunnel: TunnelKind::Infrastructure,
            intranet_allowed: false,
            mobike: true,
            fragmentation: false,
            inner: Some("fd00:c1::5".parse().unwrap()),
            leased: true,
            inner4: None,
            children: vec![SyncedChildRef {
                inbound_spi: 0xc1,
                outbound_spi: 0xd1,
                age: Duration::from_secs(5),
            }],
            age: Duration::from_secs(9),
            authenticated_age: Some(Duration::from_secs(9)),
            rekeys: 0,
            mid_sync: false,
        }
    }

    /// One direction of an AES-GCM child SA with inbound or outbound SPI `spi`, its key
    /// material all `seed` bytes, made at `created`, without selectors.
    pub(crate) fn test_sa_params(spi: u32, seed: u8, created: Instant) -> gate64_esp::SaParams {
        use gate64_esp::{Cipher, Lifetime, SaKeys, SaParams};
        SaParams {
            spi,
            keys: SaKeys {
                cipher: Cipher::AesGcm16_128,
                key: vec![seed; Cipher::AesGcm16_128.keymat_len()],
            },
            esn: false,
            lifetime: Lifetime {
                soft_bytes: 1 << 30,
                hard_bytes: 1 << 31,
                soft_after: Duration::from_secs(3000),
                hard_after: Duration::MAX,
            },
            created,
            local_ts: Vec::new(),
            remote_ts: Vec::new(),
        }
    }

    /// A child SA pair of `inbound` and `outbound` for IKE SA 1, Infrastructure tunnel, peer
    /// 2001:db8::7 without inner addresses: the HA tests' child SA.
    pub(crate) fn test_child_pair(
        inbound: gate64_esp::SaParams,
        outbound: gate64_esp::SaParams,
    ) -> gate64_esp::ChildSaPair {
        use gate64_esp::{ChildSaPair, Peer, TunnelKind};
        ChildSaPair {
            inbound,
            outbound,
            peer: Peer {
                outer: "2001:db8::7".parse().expect("an IPv6 address"),
                native: None,
                udp_encap: None,
                inner: Vec::new(),
            },
            tunnel: TunnelKind::Infrastructure,
            ike_spi: 1,
        }
    }

    /// When the peer made an IKE SA is when its record came less the age it was exported
    /// with; a later record of the same SA (a refresh) keeps the same time, one made later
    /// (another SPI, e.g. a rekey) has its own.
    #[test]
    fn an_ike_record_knows_when_the_peer_made_it() {
        let mut store = Store::new(4, 4);
        let mut sa = sample();
        let t0 = Instant::now();
        let body = |sa: &SyncedIkeSa| gate64_ha::encode_ike_sa(sa).to_vec();
        let (t1, t2) = (t0 + Duration::from_secs(40), t0 + Duration::from_secs(70));
        sa.age = Duration::from_secs(30);
        store.apply_at(MessageType::IkeSa, &body(&sa), t1).unwrap();
        let made = t1 - Duration::from_secs(30);
        assert_eq!(store.ike_made(sa.spi_r).map(|(_, m)| m), Some(made));
        sa.age = Duration::from_secs(60);
        store.apply_at(MessageType::IkeSa, &body(&sa), t2).unwrap();
        assert_eq!(store.ike_made(sa.spi_r).map(|(_, m)| m), Some(made));
        sa.spi_r ^= 1;
        sa.age = Duration::from_secs(5);
        store.apply_at(MessageType::IkeSa, &body(&sa), t2).unwrap();
        let times: Vec<Instant> = store.ike_records().map(|(_, m)| m).collect();
        assert_eq!(times.len(), 2);
        assert!(times.contains(&made) && times.contains(&(t2 - Duration::from_secs(5))));
    }

    #[test]
    fn records_replace_gone_removes_and_the_bound_holds() {
        let mut store = Store::new(2, 2);
        let mut sa = sample();
        let body = |sa: &SyncedIkeSa| gate64_ha::encode_ike_sa(sa).to_vec();
        store.apply(MessageType::IkeSa, &body(&sa)).unwrap();
        sa.next_id_in += 1;
        store.apply(MessageType::IkeSa, &body(&sa)).unwrap();
        assert_eq!(store.len(), (1, 0), "the same SPI replaces its record");
        sa.spi_r = 3;
        store.apply(MessageType::IkeSa, &body(&sa)).unwrap();
        sa.spi_r = 4;
        assert_eq!(
            store.apply(MessageType::IkeSa, &body(&sa)),
            Err(StoreDrop::Full)
        );
        let (kind, gone) = Gone::IkeSa(3).encode();
        store.apply(kind, &gone).unwrap();
        store.apply(MessageType::IkeSa, &body(&sa)).unwrap();
        let bad = body(&sa)[..20].to_vec();
        assert_eq!(
            store.apply(MessageType::IkeSa, &bad),
            Err(StoreDrop::Undecodable)
        );
        // An IKE SA record's version (2) is not a child SA record's.
        assert_eq!(
            store.apply(MessageType::ChildSa, &bad),
            Err(StoreDrop::UnknownVersion)
        );
        assert_eq!(
            store.apply(MessageType::IkeSaGone, &[1]),
            Err(StoreDrop::Undecodable)
        );
        let spi_i = sa.spi_i;
        assert_eq!(
            store.ike_spis_if_changed(),
            Some([(spi_i, 2), (spi_i, 4)].into_iter().collect())
        );
        assert_eq!(
            store.ike_spis_if_changed(),
            None,
            "nothing came or went since"
        );
        sa.spi_r = 2;
        sa.next_id_in += 1;
        store.apply(MessageType::IkeSa, &body(&sa)).unwrap();
        assert_eq!(
            store.ike_spis_if_changed(),
            None,
            "a newer record of the same SA"
        );
        let (ike, child) = store.take();
        let mut spis: Vec<u64> = ike.iter().map(|r| r.spi_r).collect();
        spis.sort();
        assert_eq!((spis, child.len()), (vec![2, 4], 0));
        assert_eq!(ike.iter().find(|r| r.spi_r == 2).unwrap().next_id_in, 11);
        assert_eq!(store.len(), (0, 0));
    }
}

#[cfg(test)]
mod counters_tests {
    use std::time::Instant;

    use gate64_esp::SyncedChildSa;

    use super::*;

    fn child(spi: u32, out: u64, high: u64) -> ChildSaRecord {
        let now = Instant::now();
        let sa = SyncedChildSa {
            pair: test_child_pair(test_sa_params(spi, 3, now), test_sa_params(!spi, 3, now)),
            outbound_next_seq: out,
            inbound_highest_seq: high,
        };
        ChildSaRecord::from_synced(&sa, now)
    }

    fn counters(entries: &[(u32, u64, u64)]) -> Vec<u8> {
        let entries: Vec<ChildCounters> = (entries.iter())
            .map(|&(spi, out, high)| ChildCounters {
                spi,
                outbound_next_seq: out,
                inbound_highest_seq: high,
            })
            .collect();
        ChildCounters::encode_batches(&entries).remove(0)
    }

    fn held(store: &mut Store) -> Vec<(u32, u64, u64)> {
        let (_, mut child) = store.take();
        child.sort_by_key(|r| r.inbound.spi);
        (child.iter())
            .map(|r| (r.inbound.spi, r.outbound_next_seq, r.inbound_highest_seq))
            .collect()
    }

    #[test]
    fn counters_raise_held_records_only_and_never_lower_them() {
        let mut store = Store::new(4, 4);
        store
            .apply(MessageType::ChildSa, &child(10, 5, 5).encode())
            .unwrap();
        store
            .apply(MessageType::ChildSa, &child(11, 1, 0).encode())
            .unwrap();
        let applied = store
            .apply(
                MessageType::ChildCounters,
                &counters(&[(10, 900, 40), (11, 7, 3), (99, 1, 1), (98, 1, 1)]),
            )
            .unwrap();
        assert_eq!(applied.unknown_counters, 2, "SPIs 99 and 98 held no record");
        assert_eq!(store.len(), (0, 2), "an unknown SPI is not stored");
        store
            .apply(MessageType::ChildCounters, &counters(&[(10, 800, 50)]))
            .unwrap();
        // A record older than the counters (reordered) lowers nothing either.
        store
            .apply(MessageType::ChildSa, &child(11, 2, 1).encode())
            .unwrap();
        assert_eq!(held(&mut store), vec![(10, 900, 50), (11, 7, 3)]);
    }

    #[test]
    fn unreadable_counters_and_versions_are_refused_by_name() {
        let mut store = Store::new(4, 4);
        store
            .apply(MessageType::ChildSa, &child(10, 5, 5).encode())
            .unwrap();
        let good = counters(&[(10, 900, 40)]);
        assert_eq!(
            store.apply(MessageType::ChildCounters, &good[..good.len() - 1]),
            Err(StoreDrop::Undecodable)
        );
        let mut other = good.clone();
        other[0] = 2;
        assert_eq!(
            store.apply(MessageType::ChildCounters, &other),
            Err(StoreDrop::UnknownVersion)
        );
        let mut record = child(12, 1, 1).encode().to_vec();
        record[0] = 9;
        assert_eq!(
            store.apply(MessageType::ChildSa, &record),
            Err(StoreDrop::UnknownVersion)
        );
        assert_eq!(held(&mut store), vec![(10, 5, 5)], "nothing moved");
    }
}
