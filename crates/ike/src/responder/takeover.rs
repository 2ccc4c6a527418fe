//! On-demand takeover: a request for an IKE SA the HA peer synced to this node, before any
//! takeover installed it, is reported ([`Event::TakeoverCandidate`]) for the driver's HA task,
//! which may install that IKE SA once the request's integrity checks under the synced keys
//! ([`synced_request_authentic`]).

use std::net::SocketAddr;

use super::sync::synced_keys;
use super::{Event, Responder, SyncedIkeSa};
use crate::keys;
use crate::message::{Message, Payload};

/// Longest request copied into a [`Event::TakeoverCandidate`]: a liveness check, rekey or
/// Delete is far shorter; a longer one is left to its retransmission after a takeover.
pub const MAX_CANDIDATE_LEN: usize = 2048;

impl Responder {
    /// Reports a protected request (`datagram`, from `remote` on `local`) for a synced IKE SA
    /// that waits for a takeover here; anything else is not reported.
    pub(super) fn report_takeover_candidate(
        &mut self,
        (local, remote): (SocketAddr, SocketAddr),
        datagram: &[u8],
        message: &Message,
    ) {
        let h = message.header;
        let protected = matches!(message.payloads.last(), Some(Payload::Sk { .. }));
        if h.is_response()
            || !protected
            || datagram.len() > MAX_CANDIDATE_LEN
            || !self.awaits_takeover(h.spi_i, h.spi_r)
        {
            return;
        }
        self.event(Event::TakeoverCandidate {
            local,
            remote,
            spi_r: h.spi_r,
            datagram: datagram.to_vec(),
        });
    }
}

/// Whether `datagram` is a request for the synced IKE SA `s` (both SPIs) whose integrity
/// checks under `s`'s keys (the initiator's SK_ei and SK_ai): one decryption, nothing else.
pub fn synced_request_authentic(s: &SyncedIkeSa, datagram: &[u8]) -> bool {
    let Ok(message) = Message::parse(datagram) else {
        return false;
    };
    let h = message.header;
    if h.is_response() || h.spi_i != s.spi_i || h.spi_r != s.spi_r {
        return false;
    }
    if !matches!(message.payloads.last(), Some(Payload::Sk { .. })) {
        return false;
    }
    synced_keys(s).is_some_and(|k| keys::open_message(datagram, &k.sk_ei).is_ok())
}
