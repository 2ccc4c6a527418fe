//! The IKE SA's proposal, chosen at IKE_SA_INIT and again at an IKE SA rekey
//! (CREATE_CHILD_SA, RFC 7296 §1.3.2): which offer is acceptable, the proposal echoed back,
//! and a fresh responder SPI.

use super::IkePolicy;
use super::Responder;
use crate::keys::{self, CryptoError, Encr, Group, Integ, Prf, Suite};
use crate::message::{Proposal, Transform, transform};

/// The outcome of proposal selection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    /// This proposal number with these algorithms and this group.
    Accept(u8, Suite, Group),
    /// Acceptable, but the KE payload used another group: ask for this one.
    WrongGroup(Group),
    /// Nothing acceptable.
    None,
}

/// Picks an IKE proposal (RFC 7296 §2.7, §3.3.6: a proposal with a transform type we do not
/// know is unacceptable): among the client's proposals, the (cipher, integrity, PRF, group)
/// combinations gate64 implements and `policy` allows, preferring AES-GCM to AES-CBC and
/// then the order of [`Encr::ALL`], [`Integ::ALL`] and [`Prf::ALL`]; a combination whose
/// group is the KE payload's is taken before one that needs another round trip, and among
/// groups the client's order counts.
pub(crate) fn choose_ike_proposal(
    proposals: &[Proposal],
    ke_group: u16,
    policy: &IkePolicy,
) -> Choice {
    let mut best: Option<(usize, u8, Suite, Group)> = None;
    let mut wanted: Option<(usize, Group)> = None;
    for p in proposals
        .iter()
        .filter(|p| p.protocol == transform::PROTO_IKE)
    {
        for (rank, suite, groups) in acceptable_ike(p, policy) {
            if let Some(g) = groups.iter().find(|g| g.id() == ke_group)
                && best.is_none_or(|(r, ..)| rank < r)
            {
                best = Some((rank, p.number, suite, *g));
            }
            if let Some(g) = groups.first()
                && wanted.is_none_or(|(r, _)| rank < r)
            {
                wanted = Some((rank, *g));
            }
        }
    }
    match (best, wanted) {
        (Some((_, number, suite, group)), _) => Choice::Accept(number, suite, group),
        (None, Some((_, group))) => Choice::WrongGroup(group),
        (None, None) => Choice::None,
    }
}

/// The suites of `p` gate64 could choose, each with a rank (lower is preferred) and the
/// groups `policy` allows with it, in the client's order.
fn acceptable_ike(p: &Proposal, policy: &IkePolicy) -> Vec<(usize, Suite, Vec<Group>)> {
    let known = [
        transform::ENCR,
        transform::PRF,
        transform::INTEG,
        transform::KE,
    ];
    if !p.only_understood(&known) {
        return Vec::new();
    }
    let of = |kind: u8| p.transforms.iter().filter(move |t| t.kind == kind);
    let encrs: Vec<Encr> = of(transform::ENCR)
        .filter_map(|t| Encr::from_transform(t.id, t.key_length()))
        .collect();
    let integs: Vec<u16> = of(transform::INTEG).map(|t| t.id).collect();
    let prfs: Vec<Prf> = of(transform::PRF)
        .filter_map(|t| Prf::from_id(t.id))
        .collect();
    let groups: Vec<Group> = of(transform::KE)
        .filter_map(|t| Group::from_id(t.id))
        .collect();
    let mut out = Vec::new();
    let offered = |e: &(usize, Encr)| encrs.contains(&e.1);
    for (encr_rank, encr) in Encr::ALL.into_iter().enumerate().filter(offered) {
        // RFC 5282 §8: with an AEAD, no integrity transform or only NONE.
        let integ_options: Vec<(usize, Option<Integ>)> = if encr.is_aead() {
            if integs.iter().all(|&id| id == 0) {
                vec![(0, None)]
            } else {
                Vec::new()
            }
        } else {
            Integ::ALL
                .into_iter()
                .enumerate()
                .filter(|(_, i)| integs.contains(&i.id()))
                .map(|(n, i)| (n, Some(i)))
                .collect()
        };
        for (integ_rank, integ) in integ_options {
            for (prf_rank, prf) in Prf::ALL
                .into_iter()
                .enumerate()
                .filter(|f| prfs.contains(&f.1))
            {
                // Cipher first, then integrity, then PRF; the lists are short.
                let rank = (encr_rank * 8 + integ_rank) * 8 + prf_rank;
                let suite = Suite { encr, integ, prf };
                let allowed: Vec<Group> = groups
                    .iter()
                    .copied()
                    .filter(|g| policy.allows(&suite, *g))
                    .collect();
                if !allowed.is_empty() {
                    out.push((rank, suite, allowed));
                }
            }
        }
    }
    out
}

/// The chosen IKE proposal as the responder echoes it: the cipher, PRF, integrity and the
/// group (with our SPI when rekeying, RFC 7296 §1.3.2).
pub(crate) fn ike_reply(number: u8, suite: Suite, group: Group, spi: Vec<u8>) -> Proposal {
    let mut transforms = suite.transforms();
    transforms.push(Transform::new(transform::KE, group.id()));
    Proposal {
        number,
        protocol: transform::PROTO_IKE,
        spi,
        transforms,
    }
}

/// A random, non-zero IKE SPI not in use.
pub(crate) fn fresh_spi(r: &Responder) -> Result<u64, CryptoError> {
    loop {
        let b = keys::random_bytes(8)?;
        let mut a = [0; 8];
        a.copy_from_slice(&b);
        let spi = u64::from_be_bytes(a);
        if spi != 0 && !r.sas.contains_key(&spi) && !r.pending_inits.contains_key(&spi) {
            return Ok(spi);
        }
    }
}
