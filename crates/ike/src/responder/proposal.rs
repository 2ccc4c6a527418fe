//! The IKE SA's proposal, chosen at IKE_SA_INIT and again at an IKE SA rekey
//! (CREATE_CHILD_SA, RFC 7296 §1.3.2): which offer is acceptable, the proposal echoed back,
//! and a fresh responder SPI.

use super::Responder;
use crate::keys::{self, CryptoError, Group};
use crate::message::{Proposal, Transform, transform};

/// The outcome of proposal selection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    /// This proposal number with this group.
    Accept(u8, Group),
    /// Acceptable, but the KE payload used another group: ask for this one.
    WrongGroup(Group),
    /// Nothing acceptable.
    None,
}

/// Picks an IKE proposal: ENCR_AES_GCM_16 with a 256-bit key, PRF_HMAC_SHA2_256, no
/// integrity (RFC 5282 §8: AEAD needs none), group 19 or 31 (RFC 7296 §3.3.6: a proposal with
/// a transform type we do not know is unacceptable).
pub(crate) fn choose_ike_proposal(proposals: &[Proposal], ke_group: u16) -> Choice {
    let mut wanted = None;
    for p in proposals
        .iter()
        .filter(|p| p.protocol == transform::PROTO_IKE)
    {
        let Some(groups) = acceptable_ike_groups(p) else {
            continue;
        };
        if let Some(g) = groups.iter().find(|g| g.id() == ke_group) {
            return Choice::Accept(p.number, *g);
        }
        wanted = wanted.or(groups.first().copied());
    }
    wanted.map_or(Choice::None, Choice::WrongGroup)
}

fn acceptable_ike_groups(p: &Proposal) -> Option<Vec<Group>> {
    let known = [
        transform::ENCR,
        transform::PRF,
        transform::INTEG,
        transform::KE,
    ];
    if !p.only_understood(&known) {
        return None;
    }
    let has = |kind: u8, ok: &dyn Fn(&Transform) -> bool| {
        p.transforms.iter().any(|t| t.kind == kind && ok(t))
    };
    let encr = has(transform::ENCR, &|t| {
        t.id == transform::ENCR_AES_GCM_16 && t.key_length() == Some(256)
    });
    let prf = has(transform::PRF, &|t| t.id == transform::PRF_HMAC_SHA2_256);
    let integ_ok = p
        .transforms
        .iter()
        .filter(|t| t.kind == transform::INTEG)
        .all(|t| t.id == 0);
    let groups: Vec<Group> = p
        .transforms
        .iter()
        .filter(|t| t.kind == transform::KE)
        .filter_map(|t| Group::from_id(t.id))
        .collect();
    (encr && prf && integ_ok && !groups.is_empty()).then_some(groups)
}

/// The chosen IKE proposal as the responder echoes it: AES-GCM-16-256, PRF-HMAC-SHA2-256 and
/// the group (with our SPI when rekeying, RFC 7296 §1.3.2).
pub(crate) fn ike_reply(number: u8, group: Group, spi: Vec<u8>) -> Proposal {
    Proposal {
        number,
        protocol: transform::PROTO_IKE,
        spi,
        transforms: vec![
            Transform::with_key_length(transform::ENCR, transform::ENCR_AES_GCM_16, 256),
            Transform::new(transform::PRF, transform::PRF_HMAC_SHA2_256),
            Transform::new(transform::KE, group.id()),
        ],
    }
}

/// A random, non-zero IKE SPI not in use.
pub(crate) fn fresh_spi(r: &Responder) -> Result<u64, CryptoError> {
    loop {
        let b = keys::random_bytes(8)?;
        let mut a = [0; 8];
        a.copy_from_slice(&b);
        let spi = u64::from_be_bytes(a);
        if spi != 0 && !r.sas.contains_key(&spi) {
            return Ok(spi);
        }
    }
}
