//! RFC 6311 Message ID synchronization as the peer of a node that took the IKE SA over: with
//! [`Initiator::with_mid_sync`] IKE_AUTH announces IKEV2_MESSAGE_ID_SYNC_SUPPORTED; when the
//! responder's answer announced it too, a protected INFORMATIONAL request with Message ID 0
//! carrying IKEV2_MESSAGE_ID_SYNC is answered with the echoed nonce and this side's IDs
//! after the sync (`crate::mid_sync::answer`), which it then uses. A sync request refused
//! (off Message ID 0, from a responder that did not announce support, malformed, or behind
//! the ID expected) is dropped unanswered and counted ([`Initiator::mid_sync_refused`]).

use super::Initiator;
use crate::message::{Header, Payload, notify};
use crate::mid_sync;

impl Initiator {
    /// Announces RFC 6311 Message ID synchronization in IKE_AUTH (before
    /// [`Initiator::start`]) and answers a sync request of a responder that announced it.
    pub fn with_mid_sync(mut self) -> Self {
        self.mid_sync.announce = true;
        self
    }

    /// Whether both sides announced RFC 6311 support in IKE_AUTH.
    pub fn mid_sync_negotiated(&self) -> bool {
        self.mid_sync.negotiated
    }

    /// Sync requests answered so far.
    pub fn mid_syncs_answered(&self) -> u64 {
        self.mid_sync.answered
    }

    /// Sync requests refused and dropped so far.
    pub fn mid_sync_refused(&self) -> u64 {
        self.mid_sync.refused
    }

    /// IKE_AUTH's notify, when announcing.
    pub(super) fn mid_sync_notify(&self) -> Option<Payload> {
        self.mid_sync.announce.then(mid_sync::supported_notify)
    }

    /// Notes whether the IKE_AUTH response (`inner`) announced support.
    pub(super) fn note_mid_sync(&mut self, inner: &[Payload]) {
        self.mid_sync.negotiated = self.mid_sync.announce && mid_sync::announced(inner);
    }

    /// What to do with the responder's request `h` (decrypted: `inner`): a sync request is
    /// answered with the payloads given or refused; any other request moves the ID expected
    /// in the responder's next one.
    pub(super) fn answer_mid_sync(&mut self, h: Header, inner: &[Payload]) -> SyncReply {
        if crate::message::find_notify(inner, notify::IKEV2_MESSAGE_ID_SYNC).is_none() {
            let next = h.message_id.wrapping_add(1);
            self.mid_sync.peer_next = self.mid_sync.peer_next.max(next);
            return SyncReply::NotSync;
        }
        let ours = (self.next_id, self.mid_sync.peer_next);
        match mid_sync::answer(self.mid_sync.negotiated, h.message_id, inner, ours) {
            Ok(ans) => {
                self.next_id = ans.send;
                self.mid_sync.peer_next = ans.recv;
                self.mid_sync.answered += 1;
                SyncReply::Answer(vec![ans.notify()])
            }
            Err(e) => {
                self.mid_sync.refused += 1;
                tracing::info!(error = %e, "ike message id sync request refused");
                SyncReply::Refused
            }
        }
    }
}

/// What [`Initiator::answer_mid_sync`] found.
pub(super) enum SyncReply {
    /// No IKEV2_MESSAGE_ID_SYNC: answered as before.
    NotSync,
    /// A sync request taken: the response's payloads.
    Answer(Vec<Payload>),
    /// A sync request refused: dropped unanswered.
    Refused,
}

/// The initiator's RFC 6311 state.
#[derive(Debug, Default)]
pub(super) struct MidSyncState {
    /// IKE_AUTH announces support.
    pub(super) announce: bool,
    /// The responder announced support too.
    pub(super) negotiated: bool,
    /// The Message ID expected in the responder's next request.
    pub(super) peer_next: u32,
    pub(super) answered: u64,
    pub(super) refused: u64,
}
