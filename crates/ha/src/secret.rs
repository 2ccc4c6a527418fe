//! The shared secret both nodes read from a file, and the per-direction AES-256-GCM keys
//! derived from it (HKDF-SHA256, RFC 5869).

use core::fmt;

use aws_lc_rs::aead::{AES_256_GCM, LessSafeKey, UnboundKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
use zeroize::Zeroizing;

/// Fewest bytes a shared secret may have: 32, the AES-256 key it stands for.
pub const MIN_SECRET_LEN: usize = 32;
/// Most bytes a shared secret may have (a longer file is a mistake, not a stronger key).
pub const MAX_SECRET_LEN: usize = 4096;

/// HKDF salt: the protocol and its version, so a key of this channel is never a key of
/// anything else made from the same secret.
const SALT: &[u8] = b"gate64-ha sync v1";
/// HKDF info prefix of a direction's key; the sender's and receiver's node ids follow.
const KEY_INFO: &[u8] = b"gate64-ha sync v1 key";

/// Why a shared secret was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// Fewer than [`MIN_SECRET_LEN`] bytes once trailing white space is removed.
    #[error("the HA shared secret has {0} bytes, fewer than {MIN_SECRET_LEN}")]
    TooShort(usize),
    /// More than [`MAX_SECRET_LEN`] bytes.
    #[error("the HA shared secret has {0} bytes, more than {MAX_SECRET_LEN}")]
    TooLong(usize),
}

/// The secret both nodes share, as read from its file. Wiped on drop; `Debug` prints no
/// byte of it.
pub struct SharedSecret(Zeroizing<Vec<u8>>);

impl SharedSecret {
    /// The secret in `contents`, a file's bytes: trailing white space (the newline an editor
    /// adds) is not part of it; what is left must be [`MIN_SECRET_LEN`] to
    /// [`MAX_SECRET_LEN`] bytes. Use random bytes (e.g. `openssl rand -base64 48`).
    pub fn from_file_contents(contents: &[u8]) -> Result<Self, SecretError> {
        let end = contents
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        let secret = &contents[..end];
        if secret.len() < MIN_SECRET_LEN {
            return Err(SecretError::TooShort(secret.len()));
        }
        if secret.len() > MAX_SECRET_LEN {
            return Err(SecretError::TooLong(secret.len()));
        }
        Ok(SharedSecret(Zeroizing::new(secret.to_vec())))
    }

    /// The AES-256-GCM key of messages from node `sender` to node `receiver`. Each direction
    /// has its own key, so a message reflected back to its sender does not authenticate.
    pub(crate) fn direction_key(&self, sender: u32, receiver: u32) -> LessSafeKey {
        let prk = Salt::new(HKDF_SHA256, SALT).extract(&self.0);
        let (s, r) = (sender.to_be_bytes(), receiver.to_be_bytes());
        let info = [KEY_INFO, &s[..], &r[..]];
        let okm = prk
            .expand(&info, &AES_256_GCM)
            // Expand fails only when asked for more than 255 hash lengths; 32 bytes never is.
            .expect("HKDF-SHA256 expands to an AES-256 key");
        LessSafeKey::new(UnboundKey::from(okm))
    }
}

impl fmt::Debug for SharedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSecret")
            .field("len", &self.0.len())
            .finish_non_exhaustive()
    }
}
