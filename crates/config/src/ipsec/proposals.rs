//! `ipsec.ike_proposals`: IKE SA proposals in strongSwan's notation
//! (`aes256gcm16-prfsha256-ecp256`, `aes256-sha256-modp2048`), as IANA transform IDs
//! (RFC 7296 §3.3.2) the responder narrows its choice with.
//!
//! A proposal is tokens joined by `-`: ciphers (`aes128`, `aes256`, `aes128gcm16`,
//! `aes256gcm16`; `aes` is `aes128`, `aesNNNgcm128` the same as `aesNNNgcm16`), integrity
//! (`sha256`, `sha384`, `sha512`, `sha1`; `sha2_256` and so on are the same), PRFs
//! (`prfsha256`, `prfsha384`, `prfsha512`, `prfsha1`) and groups (`ecp256`, `ecp384`,
//! `curve25519` or `x25519`, `modp2048`, `modp3072`, `modp4096`, `modp1024`). As in
//! strongSwan, an AES-CBC proposal without PRF tokens takes the PRFs of its integrity
//! tokens, and an AES-GCM proposal reads integrity tokens as PRFs.

/// One parsed `ike_proposals` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IkeProposal {
    /// Ciphers: (transform ID, key length in bits).
    pub encr: Vec<(u16, u16)>,
    /// Integrity transform IDs (for the non-AEAD ciphers).
    pub integ: Vec<u16>,
    /// PRF transform IDs.
    pub prf: Vec<u16>,
    /// Key-exchange group numbers.
    pub groups: Vec<u16>,
}

const ENCR_AES_CBC: u16 = 12;
const ENCR_AES_GCM_16: u16 = 20;

/// Why a proposal string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProposalError {
    /// A token gate64 does not know or implement.
    Unknown(String),
    /// A token that needs `ipsec.legacy_proposals = true`.
    Legacy(String),
    /// A kind of algorithm is missing (a cipher, a PRF or integrity, a group).
    Missing(&'static str),
}

enum Token {
    Encr(u16, u16),
    Integ(u16),
    Prf(u16),
    Group(u16),
}

fn token(t: &str) -> Option<(Token, bool)> {
    let modern = |tok| Some((tok, false));
    let legacy = |tok| Some((tok, true));
    match t {
        "aes" | "aes128" => modern(Token::Encr(ENCR_AES_CBC, 128)),
        "aes256" => modern(Token::Encr(ENCR_AES_CBC, 256)),
        "aes128gcm16" | "aes128gcm128" => modern(Token::Encr(ENCR_AES_GCM_16, 128)),
        "aes256gcm16" | "aes256gcm128" => modern(Token::Encr(ENCR_AES_GCM_16, 256)),
        "sha1" | "sha" => legacy(Token::Integ(2)),
        "sha256" | "sha2_256" => modern(Token::Integ(12)),
        "sha384" | "sha2_384" => modern(Token::Integ(13)),
        "sha512" | "sha2_512" => modern(Token::Integ(14)),
        "prfsha1" => legacy(Token::Prf(2)),
        "prfsha256" => modern(Token::Prf(5)),
        "prfsha384" => modern(Token::Prf(6)),
        "prfsha512" => modern(Token::Prf(7)),
        "modp1024" => legacy(Token::Group(2)),
        "modp2048" => modern(Token::Group(14)),
        "modp3072" => modern(Token::Group(15)),
        "modp4096" => modern(Token::Group(16)),
        "ecp256" => modern(Token::Group(19)),
        "ecp384" => modern(Token::Group(20)),
        "curve25519" | "x25519" => modern(Token::Group(31)),
        _ => None,
    }
}

/// The PRF an integrity token stands for (strongSwan's rule when no PRF is given).
fn prf_of_integ(id: u16) -> u16 {
    match id {
        2 => 2,
        12 => 5,
        13 => 6,
        _ => 7,
    }
}

/// Parses one proposal; `legacy` is `ipsec.legacy_proposals`.
pub(crate) fn parse(s: &str, legacy: bool) -> Result<IkeProposal, ProposalError> {
    let mut p = IkeProposal::default();
    for t in s.trim().split('-') {
        let lower = t.to_ascii_lowercase();
        let (tok, is_legacy) = token(&lower).ok_or_else(|| ProposalError::Unknown(t.into()))?;
        if is_legacy && !legacy {
            return Err(ProposalError::Legacy(t.into()));
        }
        let push = |v: &mut Vec<u16>, x| {
            if !v.contains(&x) {
                v.push(x)
            }
        };
        match tok {
            Token::Encr(id, bits) if !p.encr.contains(&(id, bits)) => p.encr.push((id, bits)),
            Token::Encr(..) => {}
            Token::Integ(id) => push(&mut p.integ, id),
            Token::Prf(id) => push(&mut p.prf, id),
            Token::Group(id) => push(&mut p.groups, id),
        }
    }
    let aead = p.encr.iter().any(|(id, _)| *id == ENCR_AES_GCM_16);
    let cbc = p.encr.iter().any(|(id, _)| *id == ENCR_AES_CBC);
    if p.prf.is_empty() {
        p.prf = p.integ.iter().map(|&i| prf_of_integ(i)).collect();
    }
    if !cbc {
        // AEAD only: integrity tokens were PRFs (handled above) and integrity is none.
        p.integ.clear();
    }
    if p.encr.is_empty() {
        return Err(ProposalError::Missing(
            "a cipher (aes128, aes256, aes256gcm16, ...)",
        ));
    }
    if cbc && p.integ.is_empty() {
        return Err(ProposalError::Missing(
            "an integrity algorithm for AES-CBC (sha256, sha384, sha512)",
        ));
    }
    if p.prf.is_empty() {
        return Err(ProposalError::Missing(if aead {
            "a PRF for AES-GCM (prfsha256, prfsha384, prfsha512)"
        } else {
            "a PRF (prfsha256, ...)"
        }));
    }
    if p.groups.is_empty() {
        return Err(ProposalError::Missing(
            "a key-exchange group (ecp256, ecp384, curve25519, modp2048, ...)",
        ));
    }
    Ok(p)
}

/// Every token `parse` knows, for refusals.
pub(crate) const KNOWN_TOKENS: &str = "aes128 aes256 aes128gcm16 aes256gcm16 sha256 sha384 \
sha512 prfsha256 prfsha384 prfsha512 ecp256 ecp384 curve25519 modp2048 modp3072 modp4096, and \
with legacy_proposals sha1 prfsha1 modp1024";
