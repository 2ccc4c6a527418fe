//! MOBIKE (RFC 4555), responder side, for native clients (IKE SAs on an `[ipsec] listen`
//! address). Over Teredo and IP-HTTPS the outer address is the transport's, not the
//! client's network's: those IKE SAs never announce MOBIKE_SUPPORTED.
//!
//! - IKE_AUTH: MOBIKE_SUPPORTED is answered when the client sent it and the SA is native.
//! - An INFORMATIONAL request with UPDATE_SA_ADDRESSES (authenticated: inside SK) asks to
//!   move the IKE SA and its child SAs to the addresses it came from and went to. NAT
//!   detection is redone from its NAT_DETECTION_* notifies and answered with ours (§3.5);
//!   NO_NATS_ALLOWED with a NAT found is answered UNEXPECTED_NAT_DETECTED and nothing moves
//!   (§3.9). A COOKIE2 in any INFORMATIONAL request (the client checking its own path) is
//!   copied into the response (§4.5). From the IKE SA's current addresses it changes nothing. From new ones, a
//!   return-routability check (§3.5, §3.7) goes there first: an INFORMATIONAL request with a
//!   random COOKIE2, retransmitted on the liveness schedule (`DPD_RETRANSMIT` apart,
//!   `dpd_retransmits` times) and then given up. Only a response echoing the cookie moves
//!   the SA ([`Event::PeerMoved`]); a client that fails the check keeps its old addresses.
//! - One request of ours at a time (the liveness checks share the message IDs): a move
//!   asked for while one is out is checked once it ends; the latest UPDATE_SA_ADDRESSES wins.
//! - No implicit moves (RFC 4555 §3.8): other requests from elsewhere are answered there but
//!   move nothing (a MOBIKE client behind a NAT finds a new mapping with its own NAT
//!   detection and announces it). The child SAs' ESP still follows an authenticated ESP
//!   packet from a new address (the dataplane's rule for native SAs).
//! - ADDITIONAL_IP4/IP6_ADDRESS and NO_ADDITIONAL_ADDRESSES are ignored: gate64 never
//!   initiates a move, so the client's other addresses are of no use to it.
//!
//! Each UPDATE_SA_ADDRESSES is reported once with its outcome ([`Event::Mobike`]).

use std::net::SocketAddr;
use std::time::Instant;

use super::liveness::{Answered, Candidate, Check, Probe};
use super::{Event, MobikeResult, Refusal, Responder, nat_detection_hash};
use crate::keys;
use crate::message::{Header, Notify, Payload, exchange, notify};

/// Octets of the COOKIE2 we send (RFC 4555 §3.7 allows 8 to 64).
const COOKIE2_LEN: usize = 16;
/// The lengths a COOKIE2 may have (RFC 4555 §3.7).
const COOKIE2_RANGE: std::ops::RangeInclusive<usize> = 8..=64;
/// Octets of a NAT_DETECTION_* notify's data: a SHA-1 hash (RFC 7296 §2.23).
const NAT_HASH_LEN: usize = 20;

/// The MOBIKE notifies of an UPDATE_SA_ADDRESSES request, checked.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct UpdateNotifies<'a> {
    /// NAT_DETECTION_SOURCE_IP hashes (20 octets each).
    pub sources: Vec<&'a [u8]>,
    /// NAT_DETECTION_DESTINATION_IP hashes (20 octets each).
    pub destinations: Vec<&'a [u8]>,
    /// NO_NATS_ALLOWED was present.
    pub no_nats_allowed: bool,
}

/// Why an UPDATE_SA_ADDRESSES request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MalformedMobike;

/// The COOKIE2 of a request, to copy into its response (RFC 4555 §4.5); one of the wrong
/// length (§3.7: 8 to 64 octets) is not copied (an UPDATE_SA_ADDRESSES holding one is
/// refused by [`parse_update`]).
pub(super) fn cookie2_echo(inner: &[Payload]) -> Option<Payload> {
    inner.iter().find_map(|p| match p {
        Payload::Notify(n)
            if n.kind == notify::COOKIE2 && COOKIE2_RANGE.contains(&n.data.len()) =>
        {
            Some(Payload::Notify(Notify::new(
                notify::COOKIE2,
                n.data.clone(),
            )))
        }
        _ => None,
    })
}

/// Whether `inner`, the payloads of a request of exchange type `exchange`, ask for a move.
pub(super) fn is_update(exchange_type: u8, inner: &[Payload]) -> bool {
    exchange_type == exchange::INFORMATIONAL
        && inner
            .iter()
            .any(|p| matches!(p, Payload::Notify(n) if n.kind == notify::UPDATE_SA_ADDRESSES))
}

/// The MOBIKE notifies of `inner` when it holds UPDATE_SA_ADDRESSES (`None` otherwise).
/// Refused: UPDATE_SA_ADDRESSES with data or an SPI (RFC 4555 §4.6: neither), a NAT
/// detection hash that is not 20 octets, NO_NATS_ALLOWED without the 12 (IPv4) or 36
/// (IPv6) octets of addresses and ports (§4.8), a COOKIE2 outside 8 to 64 octets (§3.7).
pub fn parse_update(inner: &[Payload]) -> Result<Option<UpdateNotifies<'_>>, MalformedMobike> {
    let mut update = false;
    let mut found = UpdateNotifies::default();
    for p in inner {
        let Payload::Notify(n) = p else { continue };
        match n.kind {
            notify::UPDATE_SA_ADDRESSES if n.data.is_empty() && n.spi.is_empty() => {
                update = true;
            }
            notify::NAT_DETECTION_SOURCE_IP if n.data.len() == NAT_HASH_LEN => {
                found.sources.push(&n.data);
            }
            notify::NAT_DETECTION_DESTINATION_IP if n.data.len() == NAT_HASH_LEN => {
                found.destinations.push(&n.data);
            }
            notify::NO_NATS_ALLOWED if matches!(n.data.len(), 12 | 36) => {
                found.no_nats_allowed = true;
            }
            notify::COOKIE2 if COOKIE2_RANGE.contains(&n.data.len()) => {}
            notify::UPDATE_SA_ADDRESSES
            | notify::NAT_DETECTION_SOURCE_IP
            | notify::NAT_DETECTION_DESTINATION_IP
            | notify::NO_NATS_ALLOWED
            | notify::COOKIE2 => return Err(MalformedMobike),
            _ => {}
        }
    }
    Ok(update.then_some(found))
}

/// Whether any of `hashes` is the NAT detection hash of `addr`.
fn matches_any(hashes: &[&[u8]], spis: (u64, u64), addr: SocketAddr) -> bool {
    let ours = nat_detection_hash(spis.0, spis.1, addr);
    hashes.contains(&ours.as_slice())
}

/// What the INFORMATIONAL request `h` with UPDATE_SA_ADDRESSES asks: the payloads to add to
/// its response, or the error notify to answer with instead. Records the move it asks for
/// (checked by [`start_check`] once the response is queued).
pub(super) fn handle_update(
    r: &mut Responder,
    h: Header,
    inner: &[Payload],
) -> Result<Vec<Payload>, u16> {
    let Some((local, remote)) = r.reply_path(h.spi_r) else {
        return Ok(Vec::new());
    };
    let Some(sa) = r.sas.get_mut(&h.spi_r) else {
        return Ok(Vec::new());
    };
    if !sa.mobike {
        // Not negotiated: an unknown status notify, ignored (RFC 7296 §3.10.1).
        return Ok(Vec::new());
    }
    let notifies = match parse_update(inner) {
        Ok(Some(n)) => n,
        Ok(None) => return Ok(Vec::new()),
        Err(MalformedMobike) => {
            r.refused(remote, Refusal::Malformed);
            r.event(Event::Mobike {
                peer: remote,
                result: MobikeResult::Malformed,
            });
            return Err(notify::INVALID_SYNTAX);
        }
    };
    let spis = (sa.spi_i, sa.spi_r);
    let nat_client = !notifies.sources.is_empty() && !matches_any(&notifies.sources, spis, remote);
    let nat_here =
        !notifies.destinations.is_empty() && !matches_any(&notifies.destinations, spis, local);
    if notifies.no_nats_allowed && (nat_client || nat_here) {
        r.event(Event::Mobike {
            peer: remote,
            result: MobikeResult::NatRefused,
        });
        return Err(notify::UNEXPECTED_NAT_DETECTED);
    }
    let mut payloads = Vec::new();
    if !notifies.sources.is_empty() || !notifies.destinations.is_empty() {
        // RFC 4555 §3.5: NAT detection answered as in IKE_SA_INIT, over both SPIs.
        payloads.push(Payload::Notify(Notify::new(
            notify::NAT_DETECTION_SOURCE_IP,
            nat_detection_hash(spis.0, spis.1, local),
        )));
        payloads.push(Payload::Notify(Notify::new(
            notify::NAT_DETECTION_DESTINATION_IP,
            nat_detection_hash(spis.0, spis.1, remote),
        )));
    }
    if (local, remote) == (sa.local, sa.remote) {
        sa.liveness.wanted = None;
        r.event(Event::Mobike {
            peer: remote,
            result: MobikeResult::Unchanged,
        });
    } else {
        tracing::debug!(from = %sa.remote, to = %remote, nat_client, nat_here, "ike client asks to move (MOBIKE)");
        sa.liveness.wanted = Some(Box::new(Candidate { local, remote }));
    }
    Ok(payloads)
}

/// Sends the return-routability check of the move IKE SA `spi_r` waits for, unless another
/// request of ours is out (it follows that one).
pub(super) fn start_check(r: &mut Responder, spi_r: u64, now: Instant) {
    let Some(sa) = r.sas.get_mut(&spi_r) else {
        return;
    };
    if sa.liveness.probe.is_some() {
        return;
    }
    let Some(to) = sa.liveness.wanted.as_deref().copied() else {
        return;
    };
    let Ok(cookie) = keys::random_bytes(COOKIE2_LEN) else {
        return r.refused(to.remote, Refusal::Crypto);
    };
    let header = super::liveness::own_informational(sa, sa.liveness.next_request_id);
    let request = [Payload::Notify(Notify::new(
        notify::COOKIE2,
        cookie.clone(),
    ))];
    let Ok(datagram) = keys::seal_message(&header, &request, &sa.keys.sk_er) else {
        return r.refused(to.remote, Refusal::Crypto);
    };
    sa.liveness.probe = Some(Probe {
        message_id: header.message_id,
        first_sent: now,
        sent: now,
        retransmits: 0,
        datagram: datagram.clone(),
        check: Some(Box::new(Check { to, cookie })),
        mid_sync: None,
    });
    r.transmit(to.local, to.remote, datagram);
    r.schedule(spi_r);
}

/// Goes on after the client answered a request of ours: a return-routability check is
/// settled; after a liveness check, a move asked for meanwhile is checked now.
pub(super) fn after_answer(r: &mut Responder, now: Instant, answered: Answered) {
    match answered.check {
        Some(check) => check_answered(r, answered.spi_r, now, *check, &answered.inner),
        None => start_check(r, answered.spi_r, now),
    }
}

/// The response to `check` arrived with `inner`: the SA moves when it echoes the cookie and
/// the move is still the one the client wants.
fn check_answered(r: &mut Responder, spi_r: u64, now: Instant, check: Check, inner: &[Payload]) {
    let echoed = inner.iter().any(
        |p| matches!(p, Payload::Notify(n) if n.kind == notify::COOKIE2 && n.data == check.cookie),
    );
    let Some(sa) = r.sas.get_mut(&spi_r) else {
        return;
    };
    if sa.liveness.wanted.as_deref() != Some(&check.to) {
        // A later UPDATE_SA_ADDRESSES asked for elsewhere (or to stay): that one counts.
        return start_check(r, spi_r, now);
    }
    sa.liveness.wanted = None;
    let to = check.to;
    if !echoed {
        tracing::info!(peer = %sa.remote, candidate = %to.remote, "ike client failed the MOBIKE return-routability check: not moved");
        r.event(Event::Mobike {
            peer: to.remote,
            result: MobikeResult::CheckFailed,
        });
        return;
    }
    tracing::info!(from = %sa.remote, to = %to.remote, "ike client moved (MOBIKE)");
    sa.local = to.local;
    sa.remote = to.remote;
    let inbound_spis = sa.children.iter().map(|c| c.inbound_spi).collect();
    let native = r.native_socket(to.local);
    r.event(Event::PeerMoved {
        spi_r,
        inbound_spis,
        peer: to.remote,
        native,
    });
    r.event(Event::Mobike {
        peer: to.remote,
        result: MobikeResult::Moved,
    });
}

/// The check of IKE SA `spi_r` went unanswered through its retransmissions: given up, the
/// SA stays where it is. Its message ID is used again by the next request (the client never
/// answered it, so most likely never saw it).
pub(super) fn check_unanswered(r: &mut Responder, spi_r: u64, now: Instant) {
    let Some(sa) = r.sas.get_mut(&spi_r) else {
        return;
    };
    let Some(check) = sa.liveness.probe.take().and_then(|p| p.check) else {
        return;
    };
    if sa.liveness.wanted.as_deref() == Some(&check.to) {
        sa.liveness.wanted = None;
    }
    tracing::info!(peer = %sa.remote, candidate = %check.to.remote, "MOBIKE return-routability check unanswered: not moved");
    r.event(Event::Mobike {
        peer: check.to.remote,
        result: MobikeResult::CheckFailed,
    });
    start_check(r, spi_r, now);
}
