//! Liveness checks the responder starts (RFC 7296 §1.4, §2.4): an established IKE SA that
//! has heard no IKE message for [`ResponderConfig::dpd`] gets an empty INFORMATIONAL request;
//! after [`ResponderConfig::dpd_retransmits`] unanswered retransmissions, [`DPD_RETRANSMIT`]
//! apart, the peer is declared dead and the IKE SA and its child SAs are deleted (the
//! driver sees `ChildSaDown` and `IkeSaDown`, so the SA database and the gauges follow).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{IkeSa, Refusal, Responder, ResponderConfig};
use crate::keys;
use crate::message::{Header, Message, exchange};

/// Time between retransmissions of a liveness check.
pub const DPD_RETRANSMIT: Duration = Duration::from_secs(5);

/// The requests the responder sends on one IKE SA (its own message-ID counter, §2.2).
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    next_request_id: u32,
    probe: Option<Probe>,
}

/// The outstanding liveness check.
#[derive(Debug)]
struct Probe {
    message_id: u32,
    sent: Instant,
    retransmits: u32,
    datagram: Vec<u8>,
}

/// When the IKE SA needs a liveness check sent, retransmitted or given up.
pub(super) fn deadline(sa: &IkeSa, config: &ResponderConfig) -> Option<Instant> {
    if !sa.established {
        return None;
    }
    Some(match &sa.liveness.probe {
        None => sa.last_heard + config.dpd,
        Some(p) => p.sent + DPD_RETRANSMIT,
    })
}

enum Step {
    Send(SocketAddr, SocketAddr, Vec<u8>),
    Dead(SocketAddr),
    SealFailed(SocketAddr),
}

/// Sends, retransmits or gives up the liveness checks that are due at `now`.
pub(super) fn on_timeout(r: &mut Responder, now: Instant) {
    let due: Vec<u64> = r
        .sas
        .values()
        .filter(|s| deadline(s, &r.config).is_some_and(|d| now >= d))
        .map(|s| s.spi_r)
        .collect();
    for spi in due {
        let Some(sa) = r.sas.get_mut(&spi) else {
            continue;
        };
        let step = match sa.liveness.probe.as_mut() {
            None => {
                // We are the original responder: the Initiator flag stays clear (§3.1).
                let header = Header {
                    spi_i: sa.spi_i,
                    spi_r: sa.spi_r,
                    exchange: exchange::INFORMATIONAL,
                    flags: 0,
                    message_id: sa.liveness.next_request_id,
                };
                match keys::seal_message(&header, &[], &sa.keys.sk_er) {
                    Ok(datagram) => {
                        sa.liveness.probe = Some(Probe {
                            message_id: header.message_id,
                            sent: now,
                            retransmits: 0,
                            datagram: datagram.clone(),
                        });
                        Step::Send(sa.local, sa.remote, datagram)
                    }
                    Err(_) => Step::SealFailed(sa.remote),
                }
            }
            Some(p) if p.retransmits < r.config.dpd_retransmits => {
                p.retransmits += 1;
                p.sent = now;
                Step::Send(sa.local, sa.remote, p.datagram.clone())
            }
            Some(_) => Step::Dead(sa.remote),
        };
        match step {
            Step::Send(local, remote, bytes) => r.transmit(local, remote, bytes),
            Step::Dead(peer) => {
                tracing::info!(%peer, "ike peer does not answer liveness checks: deleting its SAs");
                r.remove_sa(spi);
            }
            Step::SealFailed(peer) => r.refused(peer, Refusal::Crypto),
        }
    }
}

/// A response from the client: the answer to our liveness check, or dropped.
pub(super) fn handle_response(
    r: &mut Responder,
    now: Instant,
    remote: SocketAddr,
    datagram: &[u8],
    message: &Message,
) {
    let h = message.header;
    let Some(sa) = r.sas.get_mut(&h.spi_r).filter(|s| s.spi_i == h.spi_i) else {
        return r.refused(remote, Refusal::UnknownSpi);
    };
    let outstanding = sa.liveness.probe.as_ref().map(|p| p.message_id);
    if outstanding != Some(h.message_id) || h.exchange != exchange::INFORMATIONAL {
        return r.refused(remote, Refusal::MessageId);
    }
    if keys::open_message(datagram, &sa.keys.sk_ei).is_err() {
        return r.refused(remote, Refusal::Integrity);
    }
    sa.liveness.probe = None;
    sa.liveness.next_request_id = h.message_id.wrapping_add(1);
    sa.last_heard = now;
}
