//! The ESP transforms an SA may use, and the sizes each puts on a packet.

use super::{AES_BLOCK, HMAC_SHA256_KEY_LEN, SALT_LEN, TRAILER_FIXED};
use crate::{ICV_LEN, SPI_SEQ_IV_LEN};

/// The ESP transform: AES-GCM with a 16-byte ICV (RFC 4106; IKEv2 transform ENCR_AES_GCM_16,
/// 20), AES-CBC (RFC 3602; ENCR_AES_CBC, 12) with HMAC-SHA2-256-128 integrity (RFC 4868;
/// AUTH_HMAC_SHA2_256_128, 12), what macOS, iOS and Windows propose by default, or AES-GMAC
/// without encryption (RFC 4543; ENCR_NULL_AUTH_AES_GMAC, 21): integrity only, the payload
/// travels in clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// AES-128-GCM, 16-byte ICV: 20 bytes of key material (key || salt).
    AesGcm16_128,
    /// AES-256-GCM, 16-byte ICV: 36 bytes of key material (key || salt).
    AesGcm16_256,
    /// AES-128-CBC with HMAC-SHA2-256-128: 48 bytes of key material (AES key || HMAC key).
    AesCbc128HmacSha256,
    /// AES-256-CBC with HMAC-SHA2-256-128: 64 bytes of key material (AES key || HMAC key).
    AesCbc256HmacSha256,
    /// AES-128-GMAC, integrity only (RFC 4543): 20 bytes of key material (key || salt).
    NullAesGmac128,
    /// AES-192-GMAC, integrity only: 28 bytes of key material (key || salt).
    NullAesGmac192,
    /// AES-256-GMAC, integrity only: 36 bytes of key material (key || salt).
    NullAesGmac256,
}

impl Cipher {
    /// Bytes of KEYMAT this cipher takes: for AES-GCM and AES-GMAC the AES key and the 4-byte
    /// salt (RFC 4106 §8.1, RFC 4543 §3.4); for AES-CBC the AES key, then the 32-byte HMAC key (RFC 7296 §2.17:
    /// encryption key first, then integrity key).
    pub const fn keymat_len(self) -> usize {
        self.aes_key_len()
            + match self {
                Cipher::AesGcm16_128
                | Cipher::AesGcm16_256
                | Cipher::NullAesGmac128
                | Cipher::NullAesGmac192
                | Cipher::NullAesGmac256 => SALT_LEN,
                Cipher::AesCbc128HmacSha256 | Cipher::AesCbc256HmacSha256 => HMAC_SHA256_KEY_LEN,
            }
    }

    /// Bytes of the AES key alone: 16, 24 (AES-192-GMAC only) or 32.
    pub const fn aes_key_len(self) -> usize {
        match self {
            Cipher::AesGcm16_128 | Cipher::AesCbc128HmacSha256 | Cipher::NullAesGmac128 => 16,
            Cipher::NullAesGmac192 => 24,
            Cipher::AesGcm16_256 | Cipher::AesCbc256HmacSha256 | Cipher::NullAesGmac256 => 32,
        }
    }

    /// True for AES-GMAC (ENCR_NULL_AUTH_AES_GMAC): integrity only, nothing is encrypted.
    pub const fn is_gmac(self) -> bool {
        matches!(
            self,
            Cipher::NullAesGmac128 | Cipher::NullAesGmac192 | Cipher::NullAesGmac256
        )
    }

    /// True for the AES-CBC + HMAC suites.
    pub const fn is_cbc(self) -> bool {
        matches!(
            self,
            Cipher::AesCbc128HmacSha256 | Cipher::AesCbc256HmacSha256
        )
    }

    /// Bytes in front of the inner packet: SPI (4), sequence number (4) and the IV, 8 bytes
    /// for AES-GCM and AES-GMAC (RFC 4106 §3.1, RFC 4543 §3.1), 16 for AES-CBC (RFC 3602 §3).
    pub const fn header_len(self) -> usize {
        if self.is_cbc() {
            8 + AES_BLOCK
        } else {
            SPI_SEQ_IV_LEN
        }
    }

    /// What the encrypted part (inner packet, padding, Pad Length, Next Header) is padded
    /// to: 4 bytes for AES-GCM and AES-GMAC (RFC 4303 §2.4), the AES block for CBC (RFC 3602 §2.4).
    pub(super) const fn align(self) -> usize {
        if self.is_cbc() { AES_BLOCK } else { 4 }
    }

    /// Most bytes after the inner packet: the longest padding, Pad Length, Next Header, ICV.
    pub const fn max_trailer(self) -> usize {
        self.align() - 1 + TRAILER_FIXED + ICV_LEN
    }

    /// Bytes of an ESP packet under this cipher carrying `inner_len` bytes: header, inner
    /// packet, padding, Pad Length, Next Header and ICV.
    pub const fn esp_len(self, inner_len: usize) -> usize {
        self.header_len() + inner_len + self.pad_len(inner_len) + TRAILER_FIXED + ICV_LEN
    }

    /// RFC 4303 §2.4: padding so that the encrypted part ends on the cipher's boundary.
    pub(super) const fn pad_len(self, inner_len: usize) -> usize {
        let a = self.align();
        (a - (inner_len + TRAILER_FIXED) % a) % a
    }
}
