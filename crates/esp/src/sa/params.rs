//! What IKE hands over for one direction of a child SA: the key material, the limits and the
//! parameters an [`Outbound`](super::Outbound) or [`Inbound`](super::Inbound) is made from.

use core::fmt;
use std::time::{Duration, Instant};

use zeroize::Zeroize;

use super::Cipher;
use crate::selector::Selector;

/// Key material of one direction, as IKEv2 KEYMAT gives it (RFC 7296 §2.17): the AES key
/// followed by the 4-byte salt for AES-GCM (RFC 4106 §8.1), the AES key followed by the HMAC
/// key for AES-CBC. Wiped on drop; `Debug` prints no key.
#[derive(Clone, PartialEq, Eq)]
pub struct SaKeys {
    /// The cipher the key is for.
    pub cipher: Cipher,
    /// Key || salt, or AES key || HMAC key; [`Cipher::keymat_len`] bytes.
    pub key: Vec<u8>,
}

impl fmt::Debug for SaKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaKeys")
            .field("cipher", &self.cipher)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl Drop for SaKeys {
    fn drop(&mut self) {
        self.key.zeroize();
    }
}

/// Byte and time limits of an SA (RFC 4301 §4.4.2.1): past a soft limit the SA asks for a
/// rekey ([`SaState::Rekey`]), past a hard one it is [`SaState::Expired`] and refuses to seal
/// or open. Bytes count inner packets. [`Lifetime::UNLIMITED`] sets no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// Rekey after this many bytes.
    pub soft_bytes: u64,
    /// Expire after this many bytes.
    pub hard_bytes: u64,
    /// Rekey this long after creation.
    pub soft_after: Duration,
    /// Expire this long after creation.
    pub hard_after: Duration,
}

impl Lifetime {
    /// No byte or time limit (the sequence number still bounds the SA).
    pub const UNLIMITED: Lifetime = Lifetime {
        soft_bytes: u64::MAX,
        hard_bytes: u64::MAX,
        soft_after: Duration::MAX,
        hard_after: Duration::MAX,
    };
}

impl Default for Lifetime {
    fn default() -> Self {
        Lifetime::UNLIMITED
    }
}

/// What IKE negotiated for one direction of a child SA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaParams {
    /// The SPI the receiver of this direction chose (RFC 4303 §2.1).
    pub spi: u32,
    /// Cipher and KEYMAT.
    pub keys: SaKeys,
    /// Extended (64-bit) sequence numbers (RFC 4303 §2.2.1; IKEv2 transform type 5).
    pub esn: bool,
    /// Byte and time limits.
    pub lifetime: Lifetime,
    /// When IKE established the SA; lifetimes count from here.
    pub created: Instant,
    /// gate64's side of the traffic selectors.
    pub local_ts: Vec<Selector>,
    /// The peer's side of the traffic selectors.
    pub remote_ts: Vec<Selector>,
}
