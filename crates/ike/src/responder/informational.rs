//! INFORMATIONAL (RFC 7296 §1.4: Delete, liveness; RFC 4555 UPDATE_SA_ADDRESSES, see
//! `mobike.rs`), RFC 7383 reassembly of fragmented
//! requests and fragmentation of large responses.

use std::time::Instant;

use super::{Event, IkeSa, Reassembly, Refusal, Responder, mobike};
use crate::keys::{self, CryptoError};
use crate::message::{Delete, Header, Payload, parse_chain, transform};

/// At most this many fragments in one message (RFC 7383 leaves it open; strongSwan sends a
/// handful for an RSA chain).
const MAX_FRAGMENTS: u16 = 32;
/// At most this many reassembled bytes.
const MAX_REASSEMBLED: usize = 64 * 1024;

/// Handles an INFORMATIONAL request on an established IKE SA.
pub(super) fn handle(r: &mut Responder, now: Instant, h: Header, inner: Vec<Payload>) {
    let update = mobike::is_update(h.exchange, &inner);
    let mut payloads = Vec::new();
    if update {
        match mobike::handle_update(r, h, &inner) {
            Ok(answer) => payloads = answer,
            Err(kind) => return r.respond_error(h, kind),
        }
    }
    let mut delete_ike = false;
    let mut ours = Vec::new();
    for p in &inner {
        let Payload::Delete(d) = p else { continue };
        match d.protocol {
            transform::PROTO_IKE => delete_ike = true,
            transform::PROTO_ESP => ours.extend(delete_children(r, h.spi_r, d)),
            _ => {}
        }
    }
    if delete_ike {
        // RFC 7296 §1.4.1: the response is empty, and the IKE SA and its children are gone.
        r.respond(h.spi_r, h, Vec::new());
        return r.remove_sa(h.spi_r);
    }
    if !ours.is_empty() {
        // RFC 7296 §1.4.1: answer with the SPIs of our halves of the deleted child SAs.
        let spis = ours
            .iter()
            .map(|s: &u32| s.to_be_bytes().to_vec())
            .collect();
        payloads.push(Payload::Delete(Delete {
            protocol: transform::PROTO_ESP,
            spi_size: 4,
            spis,
        }));
    }
    // RFC 4555 §4.5: a COOKIE2 in a request (a MOBIKE client checking its own path) is
    // copied into the response.
    payloads.extend(mobike::cookie2_echo(&inner));
    // An empty request is the liveness check (§1.4): the empty response is the answer.
    r.respond(h.spi_r, h, payloads);
    if update {
        // RFC 4555 §3.5: the return-routability check follows the response.
        mobike::start_check(r, h.spi_r, now);
    }
}

/// Removes the children whose peer SPIs (our outbound) are listed; returns our inbound SPIs.
fn delete_children(r: &mut Responder, spi_r: u64, d: &Delete) -> Vec<u32> {
    let Some(sa) = r.sas.get_mut(&spi_r) else {
        return Vec::new();
    };
    let mut ours = Vec::new();
    for spi in d.esp_spis() {
        if let Some(i) = sa.children.iter().position(|c| c.outbound_spi == spi) {
            ours.push(sa.children.remove(i).inbound_spi);
        }
    }
    for spi in &ours {
        r.inbound_spis.remove(spi);
        r.event(Event::ChildSaDown { inbound_spi: *spi });
    }
    ours
}

/// Collects one opened fragment; returns the inner payloads once all have arrived.
pub(super) fn reassemble(
    sa: &mut IkeSa,
    message_id: u32,
    first: u8,
    number: u16,
    total: u16,
    plain: Vec<u8>,
) -> Result<Option<Vec<Payload>>, Refusal> {
    if total > MAX_FRAGMENTS {
        return Err(Refusal::Malformed);
    }
    let fresh = || Reassembly {
        message_id,
        total,
        parts: vec![None; usize::from(total)],
        ..Default::default()
    };
    let r = sa.reassembly.get_or_insert_with(fresh);
    if r.message_id != message_id || r.total != total {
        // RFC 7383 §2.6.2: a different Total Fragments restarts the collection.
        *r = fresh();
    }
    if number == 1 {
        r.first = first;
    }
    let slot = r
        .parts
        .get_mut(usize::from(number) - 1)
        .ok_or(Refusal::Malformed)?;
    if slot.is_none() {
        r.bytes += plain.len();
        *slot = Some(plain);
    }
    if r.bytes > MAX_REASSEMBLED {
        sa.reassembly = None;
        return Err(Refusal::Malformed);
    }
    if r.parts.iter().any(Option::is_none) {
        return Ok(None);
    }
    let whole: Vec<u8> = r.parts.iter().flatten().flatten().copied().collect();
    let first = r.first;
    sa.reassembly = None;
    parse_chain(first, &whole)
        .map(Some)
        .map_err(|_| Refusal::Malformed)
}

/// The response datagrams: one SK message, or RFC 7383 fragments when it exceeds
/// `fragment_size` and the peer announced IKEV2_FRAGMENTATION_SUPPORTED.
pub(super) fn seal_response(
    sa: &IkeSa,
    header: Header,
    inner: &[Payload],
    fragment_size: usize,
) -> Result<Vec<Vec<u8>>, CryptoError> {
    let whole = keys::seal_message(&header, inner, &sa.keys.sk_er)?;
    if whole.len() <= fragment_size || !sa.peer_fragmentation {
        return Ok(vec![whole]);
    }
    keys::seal_fragments(&header, inner, &sa.keys.sk_er, fragment_size)
}
