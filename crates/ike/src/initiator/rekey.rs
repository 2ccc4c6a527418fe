//! Rekeying the child SA from the initiator's side (RFC 7296 §1.3.3, §2.8): a CREATE_CHILD_SA
//! request with REKEY_SA naming the SA in use, a fresh SPI and nonce and the selectors the
//! responder narrowed to, without PFS (the new keys come from SK_d and the two nonces, §2.17).
//! When the answer comes, the new child SA is reported and the old one deleted with an
//! INFORMATIONAL Delete, one request at a time (§2.3).

use std::net::IpAddr;
use std::time::Instant;

use super::replies::ChildReply;
use super::{Initiator, InitiatorEvent, State, esp_proposals};
use crate::keys;
use crate::message::{
    Delete, Header, Notify, Payload, TrafficSelector, exchange, find_error_notify, flags, notify,
    transform,
};

/// The child SA in use: what a rekey asks for again.
#[derive(Debug, Clone)]
pub(super) struct CurrentChild {
    tsi: Vec<TrafficSelector>,
    tsr: Vec<TrafficSelector>,
    inner: Option<IpAddr>,
}

impl CurrentChild {
    pub(super) fn of(reply: &ChildReply<'_>) -> Self {
        CurrentChild {
            tsi: reply.tsi.to_vec(),
            tsr: reply.tsr.to_vec(),
            inner: reply.inner,
        }
    }
}

/// Our outstanding request on the established IKE SA.
#[derive(Debug)]
pub(super) enum Pending {
    /// CREATE_CHILD_SA: the new SA's inbound SPI and our nonce.
    Rekey {
        message_id: u32,
        new_spi: u32,
        ni: Vec<u8>,
    },
    /// INFORMATIONAL with the Delete of the rekeyed SA.
    Delete { message_id: u32 },
    /// An empty INFORMATIONAL: a liveness check (`qcd.rs`).
    Liveness { message_id: u32 },
}

impl Pending {
    fn message_id(&self) -> u32 {
        match self {
            Pending::Rekey { message_id, .. }
            | Pending::Delete { message_id }
            | Pending::Liveness { message_id } => *message_id,
        }
    }
}

impl Initiator {
    /// Starts a rekey of the child SA. `false` (nothing sent) when the IKE SA is not
    /// established or a request of ours is still outstanding (RFC 7296 §2.3: one at a time).
    pub fn rekey_child(&mut self, now: Instant) -> bool {
        if self.state != State::Established || self.outstanding.is_some() {
            return false;
        }
        let (Some(current), Ok(fresh)) = (self.child_now.clone(), keys::random_bytes(36)) else {
            return false;
        };
        let new_spi = u32::from_be_bytes([fresh[0], fresh[1], fresh[2], fresh[3]]).max(256);
        let ni = fresh[4..].to_vec();
        let payloads = vec![
            Payload::Notify(Notify {
                protocol: transform::PROTO_ESP,
                spi: self.child_spi.to_be_bytes().to_vec(),
                kind: notify::REKEY_SA,
                data: Vec::new(),
            }),
            Payload::Sa(esp_proposals(new_spi, self.config.integrity_only)),
            Payload::Nonce(ni.clone()),
            Payload::TsI(current.tsi),
            Payload::TsR(current.tsr),
        ];
        let Some(message_id) = self.request(now, exchange::CREATE_CHILD_SA, &payloads) else {
            return false;
        };
        self.pending = Some(Pending::Rekey {
            message_id,
            new_spi,
            ni,
        });
        true
    }

    /// Seals and sends a request of ours on the IKE SA; its message ID.
    fn request(&mut self, now: Instant, exchange_type: u8, payloads: &[Payload]) -> Option<u32> {
        let keys = self.keys.as_ref()?;
        let header = Header {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            exchange: exchange_type,
            flags: flags::INITIATOR,
            message_id: self.next_id,
        };
        let bytes = keys::seal_message(&header, payloads, &keys.sk_ei).ok()?;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.send(now, bytes);
        Some(id)
    }

    /// A response on the established IKE SA: to our rekey or our Delete, else ignored.
    pub(super) fn on_pending_response(&mut self, now: Instant, h: Header, datagram: &[u8]) {
        if self.pending.as_ref().map(Pending::message_id) != Some(h.message_id) {
            return;
        }
        let Some(keys) = self.keys.clone() else {
            return;
        };
        let Ok((_, inner)) = keys::open_message(datagram, &keys.sk_er) else {
            return;
        };
        self.outstanding = None;
        match self.pending.take() {
            Some(Pending::Rekey { new_spi, ni, .. }) => {
                self.rekeyed(now, &keys, &inner, new_spi, &ni)
            }
            Some(Pending::Delete { .. } | Pending::Liveness { .. }) | None => {}
        }
    }

    /// The answer to our CREATE_CHILD_SA: the new child SA reported, the old one deleted.
    fn rekeyed(
        &mut self,
        now: Instant,
        keys: &keys::IkeKeys,
        inner: &[Payload],
        new_spi: u32,
        ni: &[u8],
    ) {
        if let Some(kind) = find_error_notify(inner) {
            self.events.push_back(InitiatorEvent::RekeyRefused(kind));
            return;
        }
        let nr = inner.iter().find_map(|p| match p {
            Payload::Nonce(n) => Some(n.as_slice()),
            _ => None,
        });
        let (Some(nr), Some(mut reply)) = (nr, ChildReply::from(inner)) else {
            self.events.push_back(InitiatorEvent::RekeyRefused(0));
            return;
        };
        // A rekey carries no CP: the inner address stays the one IKE_AUTH gave.
        let current = self.child_now.clone();
        reply.inner = reply.inner.or(current.as_ref().and_then(|c| c.inner));
        let Ok(child) = self.child(now, keys, &reply, new_spi, (ni, nr)) else {
            self.events.push_back(InitiatorEvent::RekeyRefused(0));
            return;
        };
        let old_spi = std::mem::replace(&mut self.child_spi, new_spi);
        self.child_now = Some(CurrentChild::of(&reply));
        self.events.push_back(InitiatorEvent::Rekeyed {
            child: Box::new(child),
        });
        let delete = Payload::Delete(Delete {
            protocol: transform::PROTO_ESP,
            spi_size: 4,
            spis: vec![old_spi.to_be_bytes().to_vec()],
        });
        if let Some(message_id) = self.request(now, exchange::INFORMATIONAL, &[delete]) {
            self.pending = Some(Pending::Delete { message_id });
        }
    }
}
