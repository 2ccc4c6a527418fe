//! Which IKE SA algorithms the responder may choose (`[ipsec] legacy_proposals` and
//! `ike_proposals`), and how a refused client's proposals read in the log.

use crate::keys::{ENCR_3DES, Encr, Group, Integ, Prf, Suite};
use crate::message::{Proposal, transform};

/// One `ike_proposals` entry: the algorithms it allows together.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IkeProposalRule {
    /// Ciphers.
    pub encr: Vec<Encr>,
    /// Integrity algorithms (for the non-AEAD ciphers).
    pub integ: Vec<Integ>,
    /// PRFs.
    pub prf: Vec<Prf>,
    /// Key-exchange groups.
    pub groups: Vec<Group>,
}

/// The IKE SA algorithms the responder accepts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IkePolicy {
    /// SHA1 (integrity and PRF) and MODP-1024 are acceptable (`legacy_proposals`).
    pub legacy: bool,
    /// When not empty, only combinations one of these allows (`ike_proposals`).
    pub rules: Vec<IkeProposalRule>,
}

impl IkePolicy {
    /// Whether `suite` with `group` may be chosen.
    pub fn allows(&self, suite: &Suite, group: Group) -> bool {
        if !self.legacy && (suite.is_legacy() || group.is_legacy()) {
            return false;
        }
        self.rules.is_empty()
            || self.rules.iter().any(|r| {
                r.encr.contains(&suite.encr)
                    && suite.integ.is_none_or(|i| r.integ.contains(&i))
                    && r.prf.contains(&suite.prf)
                    && r.groups.contains(&group)
            })
    }
}

/// The legacy algorithms (3DES, SHA1, MODP-1024) among the client's IKE proposals, in
/// strongSwan's names; empty when there are none.
pub(crate) fn legacy_offered(proposals: &[Proposal]) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut add = |name| {
        if !out.contains(&name) {
            out.push(name);
        }
    };
    for t in proposals
        .iter()
        .filter(|p| p.protocol == transform::PROTO_IKE)
        .flat_map(|p| &p.transforms)
    {
        match (t.kind, t.id) {
            (transform::ENCR, ENCR_3DES) => add("3des"),
            (transform::INTEG, 2) => add("sha1"),
            (transform::PRF, 2) => add("prfsha1"),
            (transform::KE, 2) => add("modp1024"),
            _ => {}
        }
    }
    out
}

/// The client's IKE proposals in strongSwan's notation (`aes256-sha1-prfsha1-modp1024`),
/// comma-separated; transforms gate64 has no name for read `encr5`, `dh24` and so on.
pub(crate) fn describe(proposals: &[Proposal]) -> String {
    proposals
        .iter()
        .filter(|p| p.protocol == transform::PROTO_IKE)
        .map(|p| {
            p.transforms
                .iter()
                .map(|t| name(t.kind, t.id, t.key_length()))
                .collect::<Vec<_>>()
                .join("-")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn name(kind: u8, id: u16, key_bits: Option<u16>) -> String {
    let known = match kind {
        transform::ENCR if id == ENCR_3DES => Some("3des".to_string()),
        transform::ENCR => Encr::from_transform(id, key_bits).map(|e| {
            match e {
                Encr::AesGcm16_256 => "aes256gcm16",
                Encr::AesGcm16_128 => "aes128gcm16",
                Encr::AesCbc256 => "aes256",
                Encr::AesCbc128 => "aes128",
            }
            .to_string()
        }),
        transform::INTEG => Integ::from_id(id).map(|i| {
            match i {
                Integ::HmacSha1_96 => "sha1",
                Integ::HmacSha256_128 => "sha256",
                Integ::HmacSha384_192 => "sha384",
                Integ::HmacSha512_256 => "sha512",
            }
            .to_string()
        }),
        transform::PRF => Prf::from_id(id).map(|f| {
            match f {
                Prf::HmacSha1 => "prfsha1",
                Prf::HmacSha256 => "prfsha256",
                Prf::HmacSha384 => "prfsha384",
                Prf::HmacSha512 => "prfsha512",
            }
            .to_string()
        }),
        transform::KE => Group::from_id(id).map(|g| {
            match g {
                Group::Ecp256 => "ecp256",
                Group::Ecp384 => "ecp384",
                Group::Curve25519 => "curve25519",
                Group::Modp1024 => "modp1024",
                Group::Modp2048 => "modp2048",
                Group::Modp3072 => "modp3072",
                Group::Modp4096 => "modp4096",
            }
            .to_string()
        }),
        _ => None,
    };
    known.unwrap_or_else(|| {
        let prefix = match kind {
            transform::ENCR => "encr",
            transform::PRF => "prf",
            transform::INTEG => "integ",
            transform::KE => "dh",
            _ => "transform",
        };
        match key_bits {
            Some(bits) => format!("{prefix}{id}/{bits}"),
            None => format!("{prefix}{id}"),
        }
    })
}
