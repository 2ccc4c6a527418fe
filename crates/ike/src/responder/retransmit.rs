//! Duplicate requests answered from the response cache (RFC 7296 §2.1), only to where the
//! original request came from.
//!
//! The cached response is resent before any integrity check (the copy is the same bytes, and
//! re-opening it would cost as much as the first time). So whoever learns an IKE SA's SPIs
//! and a message ID could send copies from a forged source and have the larger cached
//! response (after IKE_AUTH, a certificate chain) reflected at a third party. A copy from any
//! other address or port than the original's is dropped and counted
//! ([`Refusal::RetransmitElsewhere`]). A client whose NAT mapping changed between its request
//! and the retransmission gets no answer to it, as if the response had been lost.

use std::net::SocketAddr;

use super::{Payload, Refusal, Responder};
use crate::message::Message;

/// Answers `message` from IKE SA `spi_r`'s cache when it repeats the request the cache
/// answered. Returns `false` when it is not such a repeat and must be handled as new.
pub(super) fn answer_duplicate(
    r: &mut Responder,
    spi_r: u64,
    remote: SocketAddr,
    message: &Message,
) -> bool {
    let Some(sa) = r.sas.get(&spi_r) else {
        return false;
    };
    let Some(cached) = sa
        .cached
        .as_ref()
        .filter(|c| c.message_id == message.header.message_id)
    else {
        return false;
    };
    if cached.requester != remote {
        r.stats.retransmits_elsewhere += 1;
        r.refused(remote, Refusal::RetransmitElsewhere);
        return true;
    }
    // RFC 7383 §2.6.1: a retransmitted fragmented request is answered once, on its first
    // fragment, not once per fragment.
    if matches!(message.payloads.last(), Some(Payload::Skf { number, .. }) if *number != 1) {
        return true;
    }
    // RFC 7296 §2.1: a retransmitted request gets the same response bytes.
    let datagrams = cached.datagrams.clone();
    let local = sa.local;
    r.stats.retransmits += 1;
    for bytes in datagrams {
        r.transmit(local, remote, bytes);
    }
    true
}
