//! RFC 6311 Message ID synchronization as the node that took an IKE SA over: when a synced
//! IKE SA whose client announced IKEV2_MESSAGE_ID_SYNC_SUPPORTED is installed
//! ([`Responder::install_synced_ike_sa`]), gate64 sends the client, at the responder's next
//! timeout and under the cap on liveness checks per slice (`liveness.rs`: a takeover installs
//! every IKE SA at once), an INFORMATIONAL request with Message ID 0 carrying IKEV2_MESSAGE_ID_SYNC (a fresh nonce, the synced ID of its next
//! request plus [`crate::mid_sync::SEND_MARGIN`], the synced ID it expects from the client)
//! and, from the answer that echoes the nonce, takes the larger IDs both ways. The request is
//! the IKE SA's one outstanding request (`liveness.rs`), retransmitted like a liveness check;
//! when it is never answered, or answered without the notify or with another nonce, the IKE
//! SA keeps the synced IDs (the client still decides whether it lives: an unanswered sync
//! does not delete it, its liveness checks do). An IKE SA whose client did not announce
//! support keeps the synced IDs and their window (`sync.rs`). Each outcome is counted
//! ([`super::Stats::mid_sync_synced`] and the two beside it).

use super::{IkeSa, Responder, Stats};
use crate::keys;
use crate::message::{Header, Payload, exchange};
use crate::mid_sync::{self, MidSync};

/// IKE SA `sa`'s sync request: what it carries and the sealed datagram (`liveness.rs` sends
/// it as the IKE SA's outstanding request when it is due and its slice's share allows);
/// `None` when no nonce or no seal could be made.
pub(super) fn seal_request(sa: &IkeSa) -> Option<(MidSync, Vec<u8>)> {
    let nonce = keys::random_bytes(4).ok()?;
    let nonce = <[u8; 4]>::try_from(nonce.as_slice()).ok()?;
    let req = mid_sync::request(nonce, sa.liveness.next_request_id, sa.expected_id);
    // Message ID 0, outside the window (RFC 6311 §4.1); the Initiator flag stays clear, we
    // are the original responder (RFC 7296 §3.1).
    let header = Header {
        spi_i: sa.spi_i,
        spi_r: sa.spi_r,
        exchange: exchange::INFORMATIONAL,
        flags: 0,
        message_id: 0,
    };
    let bytes = keys::seal_message(&header, &[req.notify()], &sa.keys.sk_er).ok()?;
    Some((req, bytes))
}

/// Takes the client's answer (`inner`, decrypted) to the sync request `sent` on `sa`.
pub(super) fn settle(sa: &mut IkeSa, stats: &mut Stats, sent: &MidSync, inner: &[Payload]) {
    match mid_sync::adopt(sent, inner) {
        Ok((next_send, expected)) => {
            sa.liveness.next_request_id = next_send;
            sa.expected_id = sa.expected_id.max(expected);
            stats.mid_sync_synced += 1;
            tracing::info!(peer = %sa.remote, next_send, expected, "ike message ids synchronised (RFC 6311)");
        }
        Err(e) => {
            stats.mid_sync_failed += 1;
            tracing::info!(peer = %sa.remote, error = %e, "ike message id sync answered wrongly: keeping the synced ids");
        }
    }
}

/// The sync request of IKE SA `spi_r` ran out of retransmissions: it is given up, the IKE
/// SA stays with the synced IDs.
pub(super) fn unanswered(r: &mut Responder, spi_r: u64) {
    if let Some(sa) = r.sas.get_mut(&spi_r) {
        sa.liveness.probe = None;
        r.stats.mid_sync_failed += 1;
        tracing::info!(peer = %sa.remote, "ike message id sync unanswered: keeping the synced ids");
    }
    r.schedule(spi_r);
}
