//! What the standby keeps of its peer's SAs until a takeover: the latest record of each IKE
//! SA (by responder SPI) and child SA (by inbound SPI), bounded. Only messages that
//! authenticated reach it; a record that does not decode is dropped and counted.

use std::collections::{HashMap, HashSet};

use gate64_ha::{ChildSaRecord, Gone, IkeSaRecord, MessageType};

/// Most IKE SA records kept: gate64's default cap on IKE SAs, with room.
pub(crate) const MAX_IKE_RECORDS: usize = 262_144;
/// Most child SA records kept: two per IKE SA, with room for rekeys in flight.
pub(crate) const MAX_CHILD_RECORDS: usize = 2 * MAX_IKE_RECORDS;

/// Why an authentic message changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreDrop {
    /// Its record did not decode (another version, a bug on the sender).
    Undecodable,
    /// The store holds its maximum of that kind of record.
    Full,
}

impl StoreDrop {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StoreDrop::Undecodable => "undecodable",
            StoreDrop::Full => "store_full",
        }
    }
}

/// The records.
pub(crate) struct Store {
    ike: HashMap<u64, IkeSaRecord>,
    child: HashMap<u32, ChildSaRecord>,
    max: (usize, usize),
    /// An IKE SA record came or went since [`Store::ike_spis_if_changed`] last answered.
    ike_changed: bool,
}

impl Store {
    pub(crate) fn new(max_ike: usize, max_child: usize) -> Self {
        Store {
            ike: HashMap::new(),
            child: HashMap::new(),
            max: (max_ike, max_child),
            ike_changed: false,
        }
    }

    /// Takes the body of an authentic message of type `kind`: a record replaces the one with
    /// its SPI, a `Gone` removes it.
    pub(crate) fn apply(&mut self, kind: MessageType, body: &[u8]) -> Result<(), StoreDrop> {
        if let Some(gone) = Gone::decode(kind, body) {
            match gone.map_err(|_| StoreDrop::Undecodable)? {
                Gone::IkeSa(spi) => {
                    self.ike_changed |= self.ike.remove(&spi).is_some();
                }
                Gone::ChildSa(spi) => {
                    self.child.remove(&spi);
                }
            }
            return Ok(());
        }
        match kind {
            MessageType::IkeSa => {
                let r = IkeSaRecord::decode(body).map_err(|_| StoreDrop::Undecodable)?;
                if self.ike.len() >= self.max.0 && !self.ike.contains_key(&r.spi_r) {
                    return Err(StoreDrop::Full);
                }
                let pair = (r.spi_i, r.spi_r);
                let before = self
                    .ike
                    .insert(r.spi_r, r)
                    .map(|old| (old.spi_i, old.spi_r));
                self.ike_changed |= before != Some(pair);
            }
            MessageType::ChildSa => {
                let r = ChildSaRecord::decode(body).map_err(|_| StoreDrop::Undecodable)?;
                let spi = r.inbound.spi;
                if self.child.len() >= self.max.1 && !self.child.contains_key(&spi) {
                    return Err(StoreDrop::Full);
                }
                self.child.insert(spi, r);
            }
            _ => return Err(StoreDrop::Undecodable),
        }
        Ok(())
    }

    /// The (initiator's, responder's) SPIs of every IKE SA record, when one came or went
    /// since the last call: what the responder must not answer as unknown before the takeover.
    pub(crate) fn ike_spis_if_changed(&mut self) -> Option<HashSet<(u64, u64)>> {
        if !std::mem::take(&mut self.ike_changed) {
            return None;
        }
        Some(self.ike.values().map(|r| (r.spi_i, r.spi_r)).collect())
    }

    /// Every record, leaving the store empty (a takeover installs them).
    pub(crate) fn take(&mut self) -> (Vec<IkeSaRecord>, Vec<ChildSaRecord>) {
        self.ike_changed = false;
        let ike = self.ike.drain().map(|(_, r)| r).collect();
        let child = self.child.drain().map(|(_, r)| r).collect();
        (ike, child)
    }

    /// The record of IKE SA `spi_r`.
    pub(crate) fn ike(&self, spi_r: u64) -> Option<&IkeSaRecord> {
        self.ike.get(&spi_r)
    }

    /// Takes out IKE SA `spi_r`'s record and those of the child SAs whose inbound SPIs
    /// `children` names (an on-demand takeover installs them); the rest stays.
    pub(crate) fn take_one(
        &mut self,
        spi_r: u64,
        children: &[u32],
    ) -> Option<(IkeSaRecord, Vec<ChildSaRecord>)> {
        let ike = self.ike.remove(&spi_r)?;
        self.ike_changed = true;
        let child = children
            .iter()
            .filter_map(|spi| self.child.remove(spi))
            .collect();
        Some((ike, child))
    }

    /// How many IKE and child SA records it holds.
    pub(crate) fn len(&self) -> (usize, usize) {
        (self.ike.len(), self.child.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_replace_gone_removes_and_the_bound_holds() {
        let mut store = Store::new(2, 2);
        let mut sa = super::super::convert::sample();
        let body = |sa: &gate64_ike::responder::SyncedIkeSa| {
            super::super::convert::record_of(sa).encode().to_vec()
        };
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
        assert_eq!(
            store.apply(MessageType::ChildSa, &bad),
            Err(StoreDrop::Undecodable)
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
