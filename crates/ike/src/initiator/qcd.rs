//! Quick Crash Detection (RFC 6290) with the initiator as token taker, and its liveness
//! checks.
//!
//! The first IKE_AUTH request carries an empty QCD_TOKEN notify: we take tokens and make
//! none. A responder that makes them answers with its token for this IKE SA in the last
//! IKE_AUTH response; it is kept. When the responder later answers one of our protected
//! requests with an unprotected INFORMATIONAL response of our SPIs carrying INVALID_IKE_SPI
//! and a QCD_TOKEN equal to the kept one (compared in constant time), it proved that it lost
//! the IKE SA (a restart, a failover): the IKE SA fails at once with
//! [`InitiatorError::ResponderLost`] instead of after every retransmission. Any other
//! unprotected message (no token kept, no token or a different one in it) is ignored and
//! counted ([`Initiator::qcd_ignored`]): anyone on the path can send one.
//!
//! [`Initiator::check_liveness`] sends the empty INFORMATIONAL request of RFC 7296 §2.4,
//! padded to at least [`QCD_ANSWER_LEN`] bytes, so that a responder that answers only
//! requests at least as long as its answer (gate64) can answer it.

use super::*;
use aws_lc_rs::constant_time;

/// The length of gate64's unprotected QCD answer (header, INVALID_IKE_SPI, a 32-byte
/// token): our liveness checks are padded to at least this.
pub const QCD_ANSWER_LEN: usize = crate::message::HEADER_LEN + 8 + 8 + 32;
/// The longest token kept; a longer one is ignored.
const MAX_TOKEN_LEN: usize = 64;

impl Initiator {
    /// The QCD_TOKEN notify of our first IKE_AUTH request: empty, as a taker that makes no
    /// tokens (Protocol ID 1, the IKE SA, RFC 6290 §4.1).
    pub(super) fn qcd_request_notify() -> Payload {
        let mut n = Notify::new(notify::QCD_TOKEN, Vec::new());
        n.protocol = transform::PROTO_IKE;
        Payload::Notify(n)
    }

    /// Keeps the responder's token from its last IKE_AUTH response `inner`, if it sent one.
    pub(super) fn keep_qcd_token(&mut self, inner: &[Payload]) {
        self.qcd_token = find_notify(inner, notify::QCD_TOKEN)
            .map(|n| n.data.clone())
            .filter(|t| (1..=MAX_TOKEN_LEN).contains(&t.len()));
    }

    /// Whether the responder gave a Quick Crash Detection token for this IKE SA.
    pub fn has_qcd_token(&self) -> bool {
        self.qcd_token.is_some()
    }

    /// Unprotected INVALID_IKE_SPI answers ignored (no token kept, none in the answer, or a
    /// different one).
    pub fn qcd_ignored(&self) -> u64 {
        self.qcd_ignored
    }

    /// An unprotected INFORMATIONAL response `m` for our SPIs: fails the IKE SA when it is the responder's
    /// proof that it lost it, else counts it as ignored.
    pub(super) fn on_unprotected_response(&mut self, m: &Message) {
        let h = m.header;
        let lost = h.spi_r == self.spi_r
            && h.flags & flags::INITIATOR == 0
            && self.state == State::Established
            && m.notify(notify::INVALID_IKE_SPI).is_some()
            && match (&self.qcd_token, m.notify(notify::QCD_TOKEN)) {
                (Some(kept), Some(n)) => {
                    constant_time::verify_slices_are_equal(kept, &n.data).is_ok()
                }
                _ => false,
            };
        if lost {
            tracing::debug!("ike: the responder proved it lost the IKE SA (QCD token matched)");
            self.fail(InitiatorError::ResponderLost);
        } else {
            self.qcd_ignored += 1;
            tracing::debug!(
                token_kept = self.qcd_token.is_some(),
                "ike: unprotected response ignored (not a matching QCD answer)"
            );
        }
    }

    /// Sends a liveness check (an empty INFORMATIONAL request, RFC 7296 §2.4) on the
    /// established IKE SA, unless another request is outstanding. No answer after every
    /// retransmission fails the IKE SA with [`InitiatorError::Timeout`].
    pub fn check_liveness(&mut self, now: Instant) -> bool {
        if self.state != State::Established || self.outstanding.is_some() {
            return false;
        }
        let Some(keys) = self.keys.as_ref() else {
            return false;
        };
        let header = Header {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            exchange: exchange::INFORMATIONAL,
            flags: flags::INITIATOR,
            message_id: self.next_id,
        };
        let Ok(bytes) = keys::seal_message_at_least(&header, &[], &keys.sk_ei, QCD_ANSWER_LEN)
        else {
            return false;
        };
        let message_id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.send(now, bytes);
        self.pending = Some(rekey::Pending::Liveness { message_id });
        true
    }
}
