//! RFC 4739 multiple authentication, initiator side: after the machine certificate's round,
//! a second IKE_AUTH round proves the user certificate; the responder answers it with the
//! child SA.

use std::time::Instant;

use super::auth::{certificates, prove};
use super::{Initiator, InitiatorError, State};
use crate::auth::{Credentials, SigHash};
use crate::keys::{self, IkeKeys};
use crate::message::{Header, Message, Notify, Payload, exchange, flags, notify};

/// RFC 4739 state: the user credentials and what the second round needs.
pub(super) struct SecondAuth {
    pub(super) user: Credentials,
    /// The responder answered MULTIPLE_AUTH_SUPPORTED.
    pub(super) negotiated: bool,
    /// The responder's RFC 7427 hash algorithms, for our second AUTH.
    pub(super) peer_hashes: Vec<SigHash>,
    /// The responder's identity, verified in the first round.
    pub(super) responder: String,
}

impl Initiator {
    /// From the IKE_SA_INIT response: whether the responder announced RFC 4739 support
    /// (§3.1), and its RFC 7427 hash algorithms for our second AUTH.
    pub(super) fn note_multiple_auth(&mut self, response: &Message, hashes: &[SigHash]) {
        let announced = response.notify(notify::MULTIPLE_AUTH_SUPPORTED).is_some();
        if let Some(second) = self.second_auth.as_mut() {
            second.negotiated = announced;
            second.peer_hashes = hashes.to_vec();
        }
    }

    /// For the first IKE_AUTH request when a second round follows: our support (RFC 4739
    /// §3.1, sent in IKE_AUTH by the initiator) and ANOTHER_AUTH_FOLLOWS (§3.2).
    pub(super) fn multiple_auth_notifies(&self) -> Vec<Payload> {
        if !self.second_auth_negotiated() {
            return Vec::new();
        }
        [
            notify::MULTIPLE_AUTH_SUPPORTED,
            notify::ANOTHER_AUTH_FOLLOWS,
        ]
        .into_iter()
        .map(|kind| Payload::Notify(Notify::new(kind, Vec::new())))
        .collect()
    }

    /// RFC 4739 §3: IDi, CERT and AUTH of the user, the AUTH over the same octets as the
    /// first round's with this round's IDi.
    pub(super) fn send_second_auth(
        &mut self,
        now: Instant,
        keys: &IkeKeys,
        responder: String,
    ) -> Result<(), InitiatorError> {
        let Some(second) = self.second_auth.as_mut() else {
            return Err(InitiatorError::Malformed);
        };
        second.responder = responder;
        let (idi, auth) = prove(
            &second.user,
            &self.init_request,
            &self.nr,
            keys,
            &second.peer_hashes,
        )?;
        let mut payloads = vec![Payload::IdI(idi)];
        payloads.extend(certificates(&second.user));
        payloads.push(auth);
        let header = Header {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            exchange: exchange::IKE_AUTH,
            flags: flags::INITIATOR,
            message_id: 2,
        };
        let bytes = keys::seal_message(&header, &payloads, &keys.sk_ei)?;
        self.state = State::SecondAuth;
        self.next_id = 3;
        self.send(now, bytes);
        Ok(())
    }

    /// The last IKE_AUTH response of RFC 4739: the child SA (the responder authenticated in
    /// the first round).
    pub(super) fn on_second_auth_response(
        &mut self,
        now: Instant,
        datagram: &[u8],
    ) -> Result<(), InitiatorError> {
        let Some((keys, inner)) = self.open_auth_response(datagram)? else {
            return Ok(());
        };
        let identity = self
            .second_auth
            .as_ref()
            .map(|s| s.responder.clone())
            .unwrap_or_default();
        self.establish(now, &keys, &inner, identity)
    }
}
