//! Caps on the IKE state peers can make gate64 hold: IKE SAs in all (checked at IKE_SA_INIT,
//! before any key exchange), IKE SAs per authenticated identity (at IKE_AUTH, before we sign;
//! at an IKE SA rekey) and child SAs per IKE SA (at CREATE_CHILD_SA). Each refusal is counted
//! under its own [`Refusal`].
//!
//! An IKE SA rekey (RFC 7296 §2.18) is not held to `max_ike_sas`: it comes from an
//! authenticated client whose old IKE SA goes with the initiator's Delete, and it is held to
//! the per-identity cap instead, which bounds what one certificate can hold.

use super::Responder;
use crate::auth::IdentityKey;
use crate::child_sa::TunnelKind;

/// Whether a new IKE SA (an IKE_SA_INIT) fits `max_ike_sas`; IKE_SA_INITs whose key exchange
/// is being computed count.
pub(super) fn ike_sa_fits(r: &Responder) -> bool {
    r.sas.len().saturating_add(r.pending_inits.len()) < r.config.max_ike_sas
}

/// Whether `identity` may have one more IKE SA, for `tunnel` (the one chosen for it). When the
/// new one replaces old ones (`unique_ids = "replace"`, or INITIAL_CONTACT, RFC 7296 §2.4) those
/// of the same tunnel do not count, so a client that restarted is never locked out by its
/// old SAs.
pub(super) fn identity_has_room(
    r: &Responder,
    identity: &IdentityKey,
    tunnel: Option<TunnelKind>,
    replacing: bool,
) -> bool {
    let held = r.by_identity.get(identity).map_or(0, |spis| {
        spis.iter()
            .filter_map(|spi| r.sas.get(spi))
            .filter(|s| !(replacing && s.established && s.tunnel == tunnel))
            .count()
    });
    held < r.config.max_ike_sas_per_identity
}
