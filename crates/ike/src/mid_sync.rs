//! RFC 6311 Message ID synchronization, both sides of the exchange, without any state of
//! its own: the responder and the initiator keep their counters and call these.
//!
//! Both peers announce support in IKE_AUTH (IKEV2_MESSAGE_ID_SYNC_SUPPORTED, no data).
//! After a failover the node that took the IKE SA over (the *sender*) sends an INFORMATIONAL
//! request with Message ID 0 whose only payload is IKEV2_MESSAGE_ID_SYNC: a fresh 4-octet
//! nonce, the Message ID of its next request (EXPECTED_SEND_REQ_MESSAGE_ID, M1) and the one
//! it expects in the peer's next request (EXPECTED_RECV_REQ_MESSAGE_ID, P1). The peer echoes
//! the nonce with its own values: the ID of its next request, max(P1, its own), and the ID it
//! expects from the sender next, max(M1, its own) ([`answer`]); both sides then use the larger
//! ones ([`adopt`]). The exchange does not move either side's counters by itself (Message ID
//! 0 is outside the window), and a response is matched by its nonce.
//!
//! ```text
//! Notify data (12 octets): Nonce Data (4) | EXPECTED_SEND_REQ_MESSAGE_ID (4) |
//!                          EXPECTED_RECV_REQ_MESSAGE_ID (4)
//! ```

use crate::message::{Notify, Payload, notify};

/// Octets of IKEV2_MESSAGE_ID_SYNC's data.
pub const DATA_LEN: usize = 12;

/// How far past the synced ID of its next request a node that took an IKE SA over asks the
/// peer to expect (M1): the old node may have sent a request or two in the last sync
/// interval that the record did not carry yet, and a peer ignores a sync whose M1 is below
/// the ID it expects (strongSwan does). One request is outstanding at a time and each takes
/// a round trip, so 16 is more than one sync interval holds; the IDs skipped are never used.
pub const SEND_MARGIN: u32 = 16;

/// The data of one IKEV2_MESSAGE_ID_SYNC notify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MidSync {
    /// The nonce the response echoes.
    pub nonce: [u8; 4],
    /// EXPECTED_SEND_REQ_MESSAGE_ID: the Message ID of the sender's next request.
    pub send: u32,
    /// EXPECTED_RECV_REQ_MESSAGE_ID: the Message ID the sender expects in the other side's
    /// next request.
    pub recv: u32,
}

/// Why a sync notify or exchange was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MidSyncError {
    /// The message carries no IKEV2_MESSAGE_ID_SYNC notify.
    #[error("no IKEV2_MESSAGE_ID_SYNC notify")]
    Missing,
    /// The notify's data is not 12 octets, or it names an SA (RFC 6311 §4.1: protocol 0, no
    /// SPI).
    #[error("IKEV2_MESSAGE_ID_SYNC of the wrong shape")]
    Malformed,
    /// A response whose nonce is not the one sent.
    #[error("IKEV2_MESSAGE_ID_SYNC with another nonce")]
    Nonce,
    /// A request with a Message ID other than 0.
    #[error("IKEV2_MESSAGE_ID_SYNC outside Message ID 0")]
    MessageId,
    /// A request on an IKE SA whose peer never announced support.
    #[error("IKEV2_MESSAGE_ID_SYNC from a peer that did not announce support")]
    Unsupported,
    /// A request whose M1 is below the ID this side expects next: it cannot be from a node
    /// that holds the IKE SA's latest state.
    #[error("IKEV2_MESSAGE_ID_SYNC with an older sender Message ID")]
    Behind,
}

impl MidSync {
    /// The notify's data, [`DATA_LEN`] octets.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DATA_LEN);
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(&self.send.to_be_bytes());
        out.extend_from_slice(&self.recv.to_be_bytes());
        out
    }

    /// The notify payload carrying it.
    pub fn notify(&self) -> Payload {
        Payload::Notify(Notify::new(notify::IKEV2_MESSAGE_ID_SYNC, self.encode()))
    }

    /// The notify's data parsed: exactly [`DATA_LEN`] octets.
    pub fn parse(data: &[u8]) -> Result<Self, MidSyncError> {
        let data: &[u8; DATA_LEN] = data.try_into().map_err(|_| MidSyncError::Malformed)?;
        let [n0, n1, n2, n3, s0, s1, s2, s3, r0, r1, r2, r3] = *data;
        Ok(MidSync {
            nonce: [n0, n1, n2, n3],
            send: u32::from_be_bytes([s0, s1, s2, s3]),
            recv: u32::from_be_bytes([r0, r1, r2, r3]),
        })
    }

    /// The IKEV2_MESSAGE_ID_SYNC notify among `payloads` (a decrypted message's), parsed.
    pub fn find(payloads: &[Payload]) -> Result<Self, MidSyncError> {
        let n = crate::message::find_notify(payloads, notify::IKEV2_MESSAGE_ID_SYNC)
            .ok_or(MidSyncError::Missing)?;
        if n.protocol != 0 || !n.spi.is_empty() {
            return Err(MidSyncError::Malformed);
        }
        Self::parse(&n.data)
    }
}

/// Whether `payloads` (a decrypted request's) announce IKEV2_MESSAGE_ID_SYNC_SUPPORTED.
pub fn announced(payloads: &[Payload]) -> bool {
    crate::message::find_notify(payloads, notify::IKEV2_MESSAGE_ID_SYNC_SUPPORTED).is_some()
}

/// The IKEV2_MESSAGE_ID_SYNC_SUPPORTED notify.
pub fn supported_notify() -> Payload {
    Payload::Notify(Notify::new(
        notify::IKEV2_MESSAGE_ID_SYNC_SUPPORTED,
        Vec::new(),
    ))
}

/// The sync request a node that took an IKE SA over sends: `nonce`, its next request's ID
/// (`next_send`, the synced one) plus [`SEND_MARGIN`], and the ID it expects from the peer
/// (`expected_recv`).
pub fn request(nonce: [u8; 4], next_send: u32, expected_recv: u32) -> MidSync {
    MidSync {
        nonce,
        send: next_send.wrapping_add(SEND_MARGIN),
        recv: expected_recv,
    }
}

/// The answer to a sync request (`payloads`, decrypted, of a request with Message ID
/// `message_id`) on an IKE SA whose peer announced support (`peer_supports`), where this
/// side's next request is `next_send` and the peer's next request is expected as
/// `expected_recv`. Returns the response's data, which carries this side's counters after
/// the sync: `send` is this side's next request ID, `recv` the ID it expects next.
pub fn answer(
    peer_supports: bool,
    message_id: u32,
    payloads: &[Payload],
    (next_send, expected_recv): (u32, u32),
) -> Result<MidSync, MidSyncError> {
    if message_id != 0 {
        return Err(MidSyncError::MessageId);
    }
    if !peer_supports {
        return Err(MidSyncError::Unsupported);
    }
    let req = MidSync::find(payloads)?;
    if req.send < expected_recv {
        return Err(MidSyncError::Behind);
    }
    Ok(MidSync {
        nonce: req.nonce,
        send: req.recv.max(next_send),
        recv: req.send,
    })
}

/// The counters the sender of `sent` uses after its response (`payloads`, decrypted):
/// `(next request ID, expected ID of the peer's next request)`, each the larger of its own
/// and the peer's. Refused when the response's nonce is not `sent`'s.
pub fn adopt(sent: &MidSync, payloads: &[Payload]) -> Result<(u32, u32), MidSyncError> {
    let resp = MidSync::find(payloads)?;
    if resp.nonce != sent.nonce {
        return Err(MidSyncError::Nonce);
    }
    Ok((sent.send.max(resp.recv), sent.recv.max(resp.send)))
}

#[cfg(test)]
mod tests;
