//! The IKE SA's negotiated algorithms besides the key exchange: the encryption of the SK
//! payload, its integrity check when the cipher is not an AEAD, and the PRF of the key
//! schedule and the AUTH payload (RFC 7296 §3.3.2, IANA transform IDs).

use aws_lc_rs::hmac;

use crate::message::{Transform, transform};

/// ENCR_AES_CBC (RFC 3602).
pub const ENCR_AES_CBC: u16 = 12;
/// ENCR_3DES (RFC 2451): recognised so it can be named in refusals, never chosen.
pub const ENCR_3DES: u16 = 3;

/// The encryption of the SK payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encr {
    /// AES-GCM with a 16-byte ICV and a 256-bit key (RFC 5282).
    AesGcm16_256,
    /// AES-GCM with a 16-byte ICV and a 128-bit key (RFC 5282).
    AesGcm16_128,
    /// AES-CBC with a 256-bit key (RFC 3602), with a separate integrity algorithm.
    AesCbc256,
    /// AES-CBC with a 128-bit key (RFC 3602), with a separate integrity algorithm.
    AesCbc128,
}

impl Encr {
    /// Every one, in the responder's order of preference (AEAD first).
    pub const ALL: [Encr; 4] = [
        Encr::AesGcm16_256,
        Encr::AesGcm16_128,
        Encr::AesCbc256,
        Encr::AesCbc128,
    ];

    /// From a transform ID and its key-length attribute.
    pub fn from_transform(id: u16, key_bits: Option<u16>) -> Option<Self> {
        match (id, key_bits) {
            (transform::ENCR_AES_GCM_16, Some(256)) => Some(Encr::AesGcm16_256),
            (transform::ENCR_AES_GCM_16, Some(128)) => Some(Encr::AesGcm16_128),
            (ENCR_AES_CBC, Some(256)) => Some(Encr::AesCbc256),
            (ENCR_AES_CBC, Some(128)) => Some(Encr::AesCbc128),
            _ => None,
        }
    }

    /// The transform ID.
    pub fn id(self) -> u16 {
        match self {
            Encr::AesGcm16_256 | Encr::AesGcm16_128 => transform::ENCR_AES_GCM_16,
            Encr::AesCbc256 | Encr::AesCbc128 => ENCR_AES_CBC,
        }
    }

    /// The key-length attribute, in bits.
    pub fn key_bits(self) -> u16 {
        match self {
            Encr::AesGcm16_256 | Encr::AesCbc256 => 256,
            Encr::AesGcm16_128 | Encr::AesCbc128 => 128,
        }
    }

    /// The cipher key length in bytes.
    pub fn key_len(self) -> usize {
        usize::from(self.key_bits() / 8)
    }

    /// Bytes of prf+ output per direction: the key, plus the 4-byte salt for AES-GCM
    /// (RFC 5282 §7.1).
    pub fn keymat_len(self) -> usize {
        self.key_len() + if self.is_aead() { 4 } else { 0 }
    }

    /// Whether it is an AEAD (no integrity transform, no SK_a keys: RFC 5282 §8).
    pub fn is_aead(self) -> bool {
        matches!(self, Encr::AesGcm16_256 | Encr::AesGcm16_128)
    }
}

/// The integrity algorithm of the SK payload with AES-CBC (RFC 4868, RFC 2404).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Integ {
    /// AUTH_HMAC_SHA2_256_128.
    HmacSha256_128,
    /// AUTH_HMAC_SHA2_384_192.
    HmacSha384_192,
    /// AUTH_HMAC_SHA2_512_256.
    HmacSha512_256,
    /// AUTH_HMAC_SHA1_96: only with `legacy_proposals`.
    HmacSha1_96,
}

impl Integ {
    /// Every one, in the responder's order of preference.
    pub const ALL: [Integ; 4] = [
        Integ::HmacSha256_128,
        Integ::HmacSha384_192,
        Integ::HmacSha512_256,
        Integ::HmacSha1_96,
    ];

    /// From a transform ID.
    pub fn from_id(id: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|i| i.id() == id)
    }

    /// The transform ID.
    pub fn id(self) -> u16 {
        match self {
            Integ::HmacSha1_96 => 2,
            Integ::HmacSha256_128 => 12,
            Integ::HmacSha384_192 => 13,
            Integ::HmacSha512_256 => 14,
        }
    }

    /// SK_a* length: the hash's output length (RFC 4868 §2.1.1, RFC 2404 §3).
    pub fn key_len(self) -> usize {
        self.algorithm().digest_algorithm().output_len()
    }

    /// The truncated ICV length.
    pub fn icv_len(self) -> usize {
        match self {
            Integ::HmacSha1_96 => 12,
            Integ::HmacSha256_128 => 16,
            Integ::HmacSha384_192 => 24,
            Integ::HmacSha512_256 => 32,
        }
    }

    /// Whether only `legacy_proposals` allows it.
    pub fn is_legacy(self) -> bool {
        self == Integ::HmacSha1_96
    }

    pub(crate) fn algorithm(self) -> hmac::Algorithm {
        match self {
            Integ::HmacSha1_96 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Integ::HmacSha256_128 => hmac::HMAC_SHA256,
            Integ::HmacSha384_192 => hmac::HMAC_SHA384,
            Integ::HmacSha512_256 => hmac::HMAC_SHA512,
        }
    }

    /// The truncated MAC of `data` under `key`.
    pub fn mac(self, key: &[u8], data: &[&[u8]]) -> Vec<u8> {
        let mut ctx = hmac::Context::with_key(&hmac::Key::new(self.algorithm(), key));
        for d in data {
            ctx.update(d);
        }
        let mut tag = ctx.sign().as_ref().to_vec();
        tag.truncate(self.icv_len());
        tag
    }
}

/// The pseudorandom function (RFC 4868, RFC 2104).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prf {
    /// PRF_HMAC_SHA2_256.
    HmacSha256,
    /// PRF_HMAC_SHA2_384.
    HmacSha384,
    /// PRF_HMAC_SHA2_512.
    HmacSha512,
    /// PRF_HMAC_SHA1: only with `legacy_proposals`.
    HmacSha1,
}

impl Prf {
    /// Every one, in the responder's order of preference.
    pub const ALL: [Prf; 4] = [
        Prf::HmacSha256,
        Prf::HmacSha384,
        Prf::HmacSha512,
        Prf::HmacSha1,
    ];

    /// From a transform ID.
    pub fn from_id(id: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.id() == id)
    }

    /// The transform ID.
    pub fn id(self) -> u16 {
        match self {
            Prf::HmacSha1 => 2,
            Prf::HmacSha256 => transform::PRF_HMAC_SHA2_256,
            Prf::HmacSha384 => 6,
            Prf::HmacSha512 => 7,
        }
    }

    /// Output length, which is also the length of SK_d and SK_p* (RFC 7296 §2.14).
    pub fn output_len(self) -> usize {
        self.algorithm().digest_algorithm().output_len()
    }

    /// Whether only `legacy_proposals` allows it.
    pub fn is_legacy(self) -> bool {
        self == Prf::HmacSha1
    }

    fn algorithm(self) -> hmac::Algorithm {
        match self {
            Prf::HmacSha1 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Prf::HmacSha256 => hmac::HMAC_SHA256,
            Prf::HmacSha384 => hmac::HMAC_SHA384,
            Prf::HmacSha512 => hmac::HMAC_SHA512,
        }
    }

    /// prf(key, data₀ ‖ data₁ ‖ ...).
    pub fn prf(self, key: &[u8], data: &[&[u8]]) -> Vec<u8> {
        let mut ctx = hmac::Context::with_key(&hmac::Key::new(self.algorithm(), key));
        for d in data {
            ctx.update(d);
        }
        ctx.sign().as_ref().to_vec()
    }

    /// prf+ (RFC 7296 §2.13): T1 = prf(K, S ‖ 0x01), Tn = prf(K, Tn-1 ‖ S ‖ n), truncated to
    /// `len` (at most 255 blocks).
    pub fn prf_plus(self, key: &[u8], seed: &[u8], len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + self.output_len());
        let mut previous: Vec<u8> = Vec::new();
        let mut counter: u8 = 1;
        while out.len() < len {
            previous = self.prf(key, &[&previous, seed, &[counter]]);
            out.extend_from_slice(&previous);
            match counter.checked_add(1) {
                Some(c) => counter = c,
                None => break,
            }
        }
        out.truncate(len);
        out
    }
}

/// What an IKE SA protects its messages and derives its keys with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Suite {
    /// The SK payload's cipher.
    pub encr: Encr,
    /// Its integrity algorithm: `None` exactly when `encr` is an AEAD.
    pub integ: Option<Integ>,
    /// The PRF.
    pub prf: Prf,
}

impl Suite {
    /// AES-GCM-16-256 with PRF-HMAC-SHA2-256: what gate64's initiator proposes.
    pub const GCM256_SHA256: Suite = Suite {
        encr: Encr::AesGcm16_256,
        integ: None,
        prf: Prf::HmacSha256,
    };

    /// Whether the integrity algorithm goes with the cipher (none with an AEAD, one
    /// without).
    pub fn is_consistent(&self) -> bool {
        self.encr.is_aead() == self.integ.is_none()
    }

    /// Whether any part needs `legacy_proposals`.
    pub fn is_legacy(&self) -> bool {
        self.prf.is_legacy() || self.integ.is_some_and(Integ::is_legacy)
    }

    /// The transforms of the chosen proposal, group excluded, as the responder echoes them.
    pub fn transforms(&self) -> Vec<Transform> {
        let mut out = vec![Transform::with_key_length(
            transform::ENCR,
            self.encr.id(),
            self.encr.key_bits(),
        )];
        out.push(Transform::new(transform::PRF, self.prf.id()));
        if let Some(i) = self.integ {
            out.push(Transform::new(transform::INTEG, i.id()));
        }
        out
    }
}
