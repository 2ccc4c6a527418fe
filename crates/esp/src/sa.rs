//! One direction of a child SA: [`Outbound`] seals, [`Inbound`] opens. Both are shared by
//! every data-path worker through `&self`.

use core::fmt;
use core::ops::Range;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use aws_lc_rs::aead::{AES_128_GCM, AES_192_GCM, AES_256_GCM, LessSafeKey, UnboundKey};
use aws_lc_rs::cipher::{AES_128, AES_256, DecryptingKey, EncryptingKey, UnboundCipherKey};
use aws_lc_rs::hmac;

use crate::replay::ReplayWindow;

mod cipher;
mod crypto;
mod params;
use crate::ICV_LEN;
use crate::selector::{Selector, any_covers};
pub use cipher::Cipher;
#[cfg(test)]
pub(crate) use crypto::gmac_verify as gmac_verify_for_tests;
use crypto::{
    GcmKey, esp_iv8, gcm_nonce, gmac_seal, gmac_verify, open_in_place, parse_trailer,
    seal_in_place, verify_hmac_icv, with_gmac_aad,
};
pub(crate) use crypto::{cbc_decrypt, cbc_encrypt, cbc_iv, icv_of};
pub use params::{Lifetime, SaKeys, SaParams};

/// Bytes of the salt at the end of the key material (RFC 4106 §8.1).
pub const SALT_LEN: usize = 4;
/// Pad Length and Next Header (RFC 4303 §2.4, §2.6).
const TRAILER_FIXED: usize = 2;

/// The last sequence number an SA without ESN may send; the counter must not cycle
/// (RFC 4303 §3.3.3), so the SA is expired after it.
const MAX_SEQ_32: u64 = u32::MAX as u64;
/// Without ESN, [`SaState::Rekey`] from here on: a quarter of the space is left for the
/// rekey to finish.
const SOFT_SEQ_32: u64 = 0xC000_0000;
/// With ESN the 64-bit counter is the IV and must not repeat either (RFC 4106 §3.1).
const MAX_SEQ_64: u64 = u64::MAX - 1;
const SOFT_SEQ_64: u64 = 1 << 63;

/// Bytes of the HMAC-SHA2-256 key (RFC 4868 §2.1.1: the key is as long as the output).
pub const HMAC_SHA256_KEY_LEN: usize = 32;
/// AES block, and the CBC IV carried in each packet (RFC 3602 §2.1, §3).
const AES_BLOCK: usize = 16;

/// Where an SA stands in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaState {
    /// Within every limit.
    Live,
    /// Past a soft limit (bytes, time, or three quarters of the sequence space): IKE should
    /// rekey it. It still seals and opens.
    Rekey,
    /// Past a hard limit or out of sequence numbers: it refuses to seal or open.
    Expired,
}

/// The key material does not fit the cipher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// KEYMAT of the wrong length for the cipher.
    #[error("{cipher:?} takes {expected} bytes of key material, got {actual}")]
    Length {
        /// The cipher.
        cipher: Cipher,
        /// What it takes.
        expected: usize,
        /// What was given.
        actual: usize,
    },
}

/// Why [`Outbound::seal`] did not seal.
///
/// Exhaustive on purpose: the dataplane maps each to a drop reason by name, so a new one
/// must be given its reason there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// `buf` has no room for the header before the inner packet or the trailer after it:
    /// a bug in the caller's buffer layout.
    #[error("buffer too small for the ESP header and trailer")]
    BufferTooSmall,
    /// The SA is past a hard limit or out of sequence numbers: IKE must replace it.
    #[error("SA expired")]
    Expired,
    /// The inner packet is longer than AES-GCM may encrypt under one nonce (2^36 bytes), or
    /// the cipher library refused it.
    #[error("inner packet too long for the cipher")]
    TooLong,
}

/// Why [`Inbound::open`] refused a packet. `Replay` and `Auth` are what the drop counters and
/// `gate64_esp_replay_drops_total` / `gate64_esp_auth_failures_total` count.
///
/// Exhaustive on purpose: the dataplane maps each to a drop reason by name, so a new one must
/// be given its own reason rather than fall into another's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Shorter than header, trailer and ICV.
    #[error("truncated ESP packet")]
    Truncated,
    /// Sequence number 0, already received, or older than the window (RFC 4303 §3.4.3).
    #[error("replayed or too old ESP sequence number")]
    Replay,
    /// The ICV did not verify (RFC 4303 §3.4.4): wrong key, tampered or forged.
    #[error("ESP integrity check failed")]
    Auth,
    /// Authentic, but the trailer is inconsistent (pad length, pad bytes, RFC 4303 §2.4), or
    /// the SPI is not this SA's, or (AES-CBC) the ciphertext is not whole AES blocks.
    #[error("malformed ESP packet")]
    Malformed,
    /// The SA is past a hard limit.
    #[error("SA expired")]
    Expired,
}

/// The inner packet [`Inbound::open`] decrypted, in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// Where the inner packet lies in the buffer given to `open` (offsets from the SPI).
    pub inner: Range<usize>,
    /// Next Header from the trailer: 4 = IPv4, 41 = IPv6, 59 = dummy (drop it, RFC 4303
    /// §2.6). Anything else is not tunnel mode and is for the caller to drop.
    pub next_header: u8,
}

/// The read-only accessors both directions share: each reads the SA's [`Core`].
macro_rules! core_accessors {
    ($spi_doc:literal, $counted:literal) => {
        #[doc = $spi_doc]
        pub fn spi(&self) -> u32 {
            self.core.spi
        }
        /// Whether extended sequence numbers are in use.
        pub fn esn(&self) -> bool {
            self.core.esn
        }
        /// The transform.
        pub fn cipher(&self) -> Cipher {
            self.core.cipher
        }
        /// Bytes in front of the inner packet ([`Cipher::header_len`]).
        pub fn header_len(&self) -> usize {
            self.core.cipher.header_len()
        }
        /// When IKE created the SA.
        pub fn created(&self) -> Instant {
            self.core.created
        }
        /// The SA's limits.
        pub fn lifetime(&self) -> Lifetime {
            self.core.lifetime
        }
        /// gate64's selectors.
        pub fn local_ts(&self) -> &[Selector] {
            &self.core.local_ts
        }
        /// The peer's selectors.
        pub fn remote_ts(&self) -> &[Selector] {
            &self.core.remote_ts
        }
        #[doc = concat!("Inner bytes ", $counted, ".")]
        pub fn bytes(&self) -> u64 {
            self.core.bytes.load(Relaxed)
        }
        #[doc = concat!("Packets ", $counted, ".")]
        pub fn packets(&self) -> u64 {
            self.core.packets.load(Relaxed)
        }
    };
}

/// The expanded keys of one SA.
// ring's AES-GCM key is inline (~550 bytes, where aws-lc's was a pointer to as much on the
// heap): nearly every SA is AES-GCM, and boxing it would add a pointer chase to every packet
// to save memory only on the rare AES-GMAC and AES-CBC SAs.
#[allow(clippy::large_enum_variant)]
enum Crypto {
    /// RFC 4106: one AEAD key and the nonce's salt.
    Gcm { key: GcmKey, salt: [u8; SALT_LEN] },
    /// RFC 4543: the AES-GCM key and salt, used with an empty plaintext, so the ICV
    /// authenticates the whole packet as AAD and nothing is encrypted.
    Gmac {
        key: LessSafeKey,
        salt: [u8; SALT_LEN],
    },
    /// RFC 3602 + RFC 4868: AES-CBC both ways, AES (one block, no chaining) for the IVs,
    /// HMAC-SHA2-256 for the ICV. Boxed: these expanded keys take ~2.9 KB, and inline they
    /// would make every SA that large, AES-GCM's too (~550 bytes): about 4.7 KB more per
    /// child SA, 9 KB per client with both tunnels. A CBC packet pays one pointer more,
    /// beside the microseconds its cipher and HMAC take.
    Cbc(Box<CbcKeys>),
}

/// The expanded keys of an AES-CBC + HMAC-SHA2-256 SA ([`Crypto::Cbc`]).
struct CbcKeys {
    enc: EncryptingKey,
    dec: DecryptingKey,
    iv: EncryptingKey,
    mac: hmac::Key,
}

/// Keys and the limits both directions share.
struct Core {
    spi: u32,
    cipher: Cipher,
    crypto: Crypto,
    /// The KEYMAT the SA was made from, kept (and wiped on drop) so that [`Core::params`]
    /// can hand the SA to a standby node.
    keys: SaKeys,
    esn: bool,
    lifetime: Lifetime,
    created: Instant,
    local_ts: Vec<Selector>,
    remote_ts: Vec<Selector>,
    bytes: AtomicU64,
    packets: AtomicU64,
    /// Latched once a hard limit is seen, by the data path (bytes, sequence numbers) or by
    /// `state(now)` (time): the data path has no clock.
    expired: AtomicBool,
}

impl Core {
    fn new(p: &SaParams) -> Result<Self, KeyError> {
        let cipher = p.keys.cipher;
        let expected = cipher.keymat_len();
        if p.keys.key.len() != expected {
            return Err(KeyError::Length {
                cipher,
                expected,
                actual: p.keys.key.len(),
            });
        }
        let refused = || KeyError::Length {
            cipher,
            expected,
            actual: p.keys.key.len(),
        };
        let (key, rest) = p.keys.key.split_at(cipher.aes_key_len());
        let crypto = match cipher {
            Cipher::AesGcm16_128
            | Cipher::AesGcm16_256
            | Cipher::NullAesGmac128
            | Cipher::NullAesGmac192
            | Cipher::NullAesGmac256 => {
                let mut salt = [0; SALT_LEN];
                salt.copy_from_slice(rest);
                if cipher.is_gmac() {
                    let algorithm = match cipher.aes_key_len() {
                        16 => &AES_128_GCM,
                        24 => &AES_192_GCM,
                        _ => &AES_256_GCM,
                    };
                    let key =
                        LessSafeKey::new(UnboundKey::new(algorithm, key).map_err(|_| refused())?);
                    Crypto::Gmac { key, salt }
                } else {
                    // AES-GCM SAs are 128- or 256-bit (`Cipher::AesGcm16_*`).
                    let algorithm = match cipher.aes_key_len() {
                        16 => &ring::aead::AES_128_GCM,
                        _ => &ring::aead::AES_256_GCM,
                    };
                    let unbound =
                        ring::aead::UnboundKey::new(algorithm, key).map_err(|_| refused())?;
                    Crypto::Gcm {
                        key: GcmKey::new(unbound),
                        salt,
                    }
                }
            }
            Cipher::AesCbc128HmacSha256 | Cipher::AesCbc256HmacSha256 => {
                let algorithm = if cipher == Cipher::AesCbc128HmacSha256 {
                    &AES_128
                } else {
                    &AES_256
                };
                let unbound = || UnboundCipherKey::new(algorithm, key).map_err(|_| refused());
                Crypto::Cbc(Box::new(CbcKeys {
                    enc: EncryptingKey::cbc(unbound()?).map_err(|_| refused())?,
                    dec: DecryptingKey::cbc(unbound()?).map_err(|_| refused())?,
                    iv: EncryptingKey::ecb(unbound()?).map_err(|_| refused())?,
                    mac: hmac::Key::new(hmac::HMAC_SHA256, rest),
                }))
            }
        };
        Ok(Core {
            spi: p.spi,
            cipher,
            crypto,
            keys: p.keys.clone(),
            esn: p.esn,
            lifetime: p.lifetime,
            created: p.created,
            local_ts: p.local_ts.clone(),
            remote_ts: p.remote_ts.clone(),
            bytes: AtomicU64::new(0),
            packets: AtomicU64::new(0),
            expired: AtomicBool::new(false),
        })
    }

    /// The parameters the SA was made from (key material included).
    fn params(&self) -> SaParams {
        SaParams {
            spi: self.spi,
            keys: self.keys.clone(),
            esn: self.esn,
            lifetime: self.lifetime,
            created: self.created,
            local_ts: self.local_ts.clone(),
            remote_ts: self.remote_ts.clone(),
        }
    }

    /// RFC 4106 §5: AAD = SPI || 32-bit sequence number, or SPI || high || low with ESN.
    fn aad(&self, seq: u64) -> ([u8; 12], usize) {
        let mut a = [0; 12];
        a[..4].copy_from_slice(&self.spi.to_be_bytes());
        if self.esn {
            a[4..12].copy_from_slice(&seq.to_be_bytes());
            (a, 12)
        } else {
            a[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
            (a, 8)
        }
    }

    /// Adds `len` bytes; false when that crosses the hard byte limit (the SA is then
    /// expired).
    fn count(&self, len: usize) -> bool {
        let len = len as u64;
        let total = self.bytes.fetch_add(len, Relaxed).saturating_add(len);
        if total > self.lifetime.hard_bytes {
            self.expired.store(true, Relaxed);
            return false;
        }
        self.packets.fetch_add(1, Relaxed);
        true
    }

    fn state(&self, now: Instant, seq_soft: bool, seq_hard: bool) -> SaState {
        let age = now.saturating_duration_since(self.created);
        let bytes = self.bytes.load(Relaxed);
        let l = &self.lifetime;
        if self.expired.load(Relaxed) || seq_hard || age >= l.hard_after || bytes >= l.hard_bytes {
            self.expired.store(true, Relaxed);
            SaState::Expired
        } else if seq_soft || age >= l.soft_after || bytes >= l.soft_bytes {
            SaState::Rekey
        } else {
            SaState::Live
        }
    }
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sa")
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("esn", &self.esn)
            .field("bytes", &self.bytes.load(Relaxed))
            .field("packets", &self.packets.load(Relaxed))
            .field("expired", &self.expired.load(Relaxed))
            .finish_non_exhaustive()
    }
}

/// The sending direction of a child SA. Sequence numbers come from one atomic counter, so
/// several cores may seal under it at once; each packet gets a distinct number, which is
/// also its IV (RFC 4106 §3.1: the IV must not repeat under a key).
#[derive(Debug)]
pub struct Outbound {
    core: Core,
    /// The next sequence number to send; starts at 1 (RFC 4303 §3.3.3).
    seq: AtomicU64,
}

impl Outbound {
    /// The sealing side of `params`.
    pub fn new(params: &SaParams) -> Result<Self, KeyError> {
        Ok(Outbound {
            core: Core::new(params)?,
            seq: AtomicU64::new(1),
        })
    }

    /// The sealing side of `params` whose first packet gets sequence number `next_seq`:
    /// an SA taken over from another node, whose counter must continue past every number
    /// that node may have used. A `next_seq` beyond the sequence space leaves the SA
    /// expired.
    pub fn resume(params: &SaParams, next_seq: u64) -> Result<Self, KeyError> {
        let sa = Outbound {
            core: Core::new(params)?,
            seq: AtomicU64::new(next_seq.max(1)),
        };
        if next_seq > sa.max_seq() {
            // Expired before any `seal` takes a number, so none can wrap around.
            sa.core.expired.store(true, Relaxed);
        }
        Ok(sa)
    }

    /// The parameters the SA was made from, key material included, for handing it to a
    /// standby node.
    pub fn params(&self) -> SaParams {
        self.core.params()
    }

    /// Seals the inner packet at `buf[at + h ..][..inner_len]` in place, where `h` is
    /// [`Outbound::header_len`] ([`SPI_SEQ_IV_LEN`] for AES-GCM, 24 for AES-CBC): writes
    /// SPI, sequence number and IV into `buf[at..at + h]`, appends the padding (RFC 4303
    /// §2.4: 1, 2, 3, ... up to a 4-byte boundary, or a 16-byte one for AES-CBC), Pad Length
    /// and `next_header`, encrypts and appends the ICV. `buf` needs up to
    /// [`Cipher::max_trailer`] bytes after the inner packet. Returns the ESP length from
    /// `at`. No allocation.
    pub fn seal(
        &self,
        buf: &mut [u8],
        at: usize,
        inner_len: usize,
        next_header: u8,
    ) -> Result<usize, SealError> {
        // `inner_len` beyond the buffer would also overflow `esp_len`.
        if inner_len > buf.len() {
            return Err(SealError::BufferTooSmall);
        }
        let esp_len = self.core.cipher.esp_len(inner_len);
        if at.checked_add(esp_len).is_none_or(|end| end > buf.len()) {
            return Err(SealError::BufferTooSmall);
        }
        if self.core.expired.load(Relaxed) {
            return Err(SealError::Expired);
        }
        let seq = self.seq.fetch_add(1, Relaxed);
        if seq > self.max_seq() || !self.core.count(inner_len) {
            self.core.expired.store(true, Relaxed);
            return Err(SealError::Expired);
        }
        let esp = &mut buf[at..at + esp_len];
        match &self.core.crypto {
            Crypto::Gcm { .. } | Crypto::Gmac { .. } => {
                self.seal_with_iv(esp, inner_len, next_header, seq, seq.to_be_bytes())?
            }
            Crypto::Cbc(keys) => {
                let iv = cbc_iv(&keys.iv, seq)?;
                self.seal_with_iv(esp, inner_len, next_header, seq, iv)?
            }
        }
        Ok(esp_len)
    }

    /// Seals `esp` (exactly [`Cipher::esp_len`]`(inner_len)` bytes, the inner packet at
    /// [`Cipher::header_len`]) under `seq` with an explicit IV of the cipher's length (8
    /// bytes for AES-GCM, 16 for AES-CBC); `seal` passes the sequence number (GCM) or its
    /// AES encryption (CBC).
    pub(crate) fn seal_with_iv<const N: usize>(
        &self,
        esp: &mut [u8],
        inner_len: usize,
        next_header: u8,
        seq: u64,
        iv: [u8; N],
    ) -> Result<(), SealError> {
        let core = &self.core;
        let header_len = core.cipher.header_len();
        if 8 + N != header_len || esp.len() != core.cipher.esp_len(inner_len) {
            return Err(SealError::BufferTooSmall);
        }
        esp[0..4].copy_from_slice(&core.spi.to_be_bytes());
        // RFC 4303 §2.2.1: only the low 32 bits travel, with or without ESN.
        esp[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
        esp[8..header_len].copy_from_slice(&iv);
        let trailer_at = header_len + inner_len;
        let pad = core.cipher.pad_len(inner_len);
        for (i, b) in esp[trailer_at..trailer_at + pad].iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        esp[trailer_at + pad] = pad as u8;
        esp[trailer_at + pad + 1] = next_header;
        let tag_at = esp.len() - ICV_LEN;
        match &core.crypto {
            Crypto::Gcm { key, salt } => {
                let (aad, aad_len) = core.aad(seq);
                let (body, tag) = esp[header_len..].split_at_mut(tag_at - header_len);
                seal_in_place(
                    key,
                    gcm_nonce(salt, &esp_iv8(&iv)),
                    &aad[..aad_len],
                    body,
                    tag,
                )
            }
            Crypto::Gmac { key, salt } => {
                // RFC 4543 §3: empty plaintext; SPI through Next Header (with the ESN high
                // half after the SPI) is the AAD, and the tag is the ICV.
                let (authed, tag) = esp.split_at_mut(tag_at);
                let seq_hi = core.esn.then_some((seq >> 32) as u32);
                with_gmac_aad(authed, seq_hi, |aad| {
                    gmac_seal(key, gcm_nonce(salt, &esp_iv8(&iv)), aad, tag)
                })
            }
            Crypto::Cbc(keys) => {
                let CbcKeys { enc, mac, .. } = &**keys;
                let mut iv16 = [0; AES_BLOCK];
                iv16.copy_from_slice(&esp[8..header_len]);
                cbc_encrypt(enc, iv16, &mut esp[header_len..tag_at])?;
                let (authed, icv) = esp.split_at_mut(tag_at);
                icv.copy_from_slice(&icv_of(mac, &[authed], core.esn.then_some(seq)));
                Ok(())
            }
        }
    }

    /// Lifetime state at `now`. Also latches a time-based hard expiry, which `seal` then
    /// honours (the data path has no clock; IKE polls this for rekeying anyway).
    pub fn state(&self, now: Instant) -> SaState {
        let next = self.seq.load(Relaxed);
        let soft = if self.core.esn {
            SOFT_SEQ_64
        } else {
            SOFT_SEQ_32
        };
        self.core.state(now, next > soft, next > self.max_seq())
    }

    /// True when the peer's selectors cover `inner_dst` and ours cover `inner_src`: this SA
    /// may carry the packet.
    pub fn covers(&self, inner_dst: IpAddr, inner_src: IpAddr) -> bool {
        any_covers(&self.core.remote_ts, inner_dst) && any_covers(&self.core.local_ts, inner_src)
    }

    core_accessors!("The SPI (the peer's inbound SPI).", "sealed");

    /// The sequence number the next packet gets.
    pub fn next_seq(&self) -> u64 {
        self.seq.load(Relaxed)
    }
    /// True once a hard limit was seen (by `seal` or by [`Outbound::state`]).
    pub fn is_expired(&self) -> bool {
        self.core.expired.load(Relaxed)
    }

    /// Moves the counter, for tests of the sequence-number limits.
    #[cfg(test)]
    pub(crate) fn set_next_seq(&self, next: u64) {
        self.seq.store(next, Relaxed);
    }

    fn max_seq(&self) -> u64 {
        if self.core.esn {
            MAX_SEQ_64
        } else {
            MAX_SEQ_32
        }
    }
}

/// The receiving direction of a child SA: anti-replay window of
/// [`REPLAY_WINDOW`](crate::REPLAY_WINDOW) packets behind a per-SA mutex (held for a few
/// word operations, twice per packet, never during decryption), so several cores may open
/// packets of one SA at once.
#[derive(Debug)]
pub struct Inbound {
    core: Core,
    replay: Mutex<ReplayWindow>,
    auth_failures: AtomicU64,
    replay_drops: AtomicU64,
}

impl Inbound {
    /// The opening side of `params`.
    pub fn new(params: &SaParams) -> Result<Self, KeyError> {
        Ok(Inbound {
            core: Core::new(params)?,
            replay: Mutex::new(ReplayWindow::default()),
            auth_failures: AtomicU64::new(0),
            replay_drops: AtomicU64::new(0),
        })
    }

    /// The opening side of `params` that refuses every sequence number up to and including
    /// `highest_seq`: an SA taken over from another node, which received those (or may
    /// have), so a replay of them is dropped here too. Numbers above it are accepted once.
    pub fn resume(params: &SaParams, highest_seq: u64) -> Result<Self, KeyError> {
        Ok(Inbound {
            core: Core::new(params)?,
            replay: Mutex::new(ReplayWindow::seen_up_to(highest_seq)),
            auth_failures: AtomicU64::new(0),
            replay_drops: AtomicU64::new(0),
        })
    }

    /// The parameters the SA was made from, key material included, for handing it to a
    /// standby node.
    pub fn params(&self) -> SaParams {
        self.core.params()
    }

    /// Opens the ESP packet `esp` (from the SPI to the end of the ICV) in place: refuses
    /// replayed sequence numbers before decrypting, verifies the ICV and decrypts (AES-CBC:
    /// the HMAC is checked in constant time before anything is decrypted; AES-GMAC: only the
    /// ICV is checked, the payload is in clear), marks the
    /// sequence number only then (RFC 4303 §3.4.3), and checks the trailer. No allocation.
    pub fn open(&self, esp: &mut [u8]) -> Result<Opened, OpenError> {
        let cipher = self.core.cipher;
        let header_len = cipher.header_len();
        // The encrypted part holds at least Pad Length and Next Header, padded to the
        // cipher's boundary (RFC 3602 §2.4: whole AES blocks for CBC).
        let min_body = if cipher.is_cbc() {
            AES_BLOCK
        } else {
            TRAILER_FIXED
        };
        if esp.len() < header_len + min_body + ICV_LEN {
            return Err(OpenError::Truncated);
        }
        if cipher.is_cbc() && !(esp.len() - header_len - ICV_LEN).is_multiple_of(AES_BLOCK) {
            return Err(OpenError::Malformed);
        }
        if self.core.expired.load(Relaxed) {
            return Err(OpenError::Expired);
        }
        let field =
            |at: usize| u32::from_be_bytes([esp[at], esp[at + 1], esp[at + 2], esp[at + 3]]);
        if field(0) != self.core.spi {
            return Err(OpenError::Malformed);
        }
        let seq = self.check_replay(field(4))?;
        let icv_at = esp.len() - ICV_LEN;
        let authentic = match &self.core.crypto {
            Crypto::Gcm { key, salt } => {
                let (head, body) = esp.split_at_mut(header_len);
                let (aad, aad_len) = self.core.aad(seq);
                let nonce = gcm_nonce(salt, &esp_iv8(&head[8..16]));
                open_in_place(key, nonce, &aad[..aad_len], body).is_ok()
            }
            Crypto::Gmac { .. } => self.icv_ok(esp, seq),
            // The HMAC is checked in constant time before anything is decrypted.
            Crypto::Cbc(keys) => {
                let mut iv = [0; AES_BLOCK];
                iv.copy_from_slice(&esp[8..header_len]);
                self.icv_ok(esp, seq)
                    && cbc_decrypt(&keys.dec, iv, &mut esp[header_len..icv_at]).is_ok()
            }
        };
        if !authentic {
            self.auth_failures.fetch_add(1, Relaxed);
            return Err(OpenError::Auth);
        }
        if !self.lock().mark(seq) {
            // Another core opened the same sequence number since the check.
            self.replay_drops.fetch_add(1, Relaxed);
            return Err(OpenError::Replay);
        }
        let plain = &esp[header_len..icv_at];
        let (inner_len, next_header) = parse_trailer(plain)?;
        if !self.core.count(inner_len) {
            return Err(OpenError::Expired);
        }
        Ok(Opened {
            inner: header_len..header_len + inner_len,
            next_header,
        })
    }

    /// Whether the ESP packet `esp` (from the SPI to the end of the ICV) is this SA's and
    /// authentic: its SPI is this SA's, its sequence number lies above what the replay window
    /// saw, and its ICV verifies (one AES-GCM/GMAC tag or HMAC check). Changes nothing: not
    /// the replay window, not the counters, not the lifetime. `esp` is scratch (AES-GCM
    /// decrypts it in place). For a standby deciding whether a packet proves its sender
    /// holds a child SA synced here.
    pub fn authentic(&self, esp: &mut [u8]) -> bool {
        let cipher = self.core.cipher;
        let header_len = cipher.header_len();
        let min_body = if cipher.is_cbc() {
            AES_BLOCK
        } else {
            TRAILER_FIXED
        };
        if esp.len() < header_len + min_body + ICV_LEN
            || (cipher.is_cbc() && !(esp.len() - header_len - ICV_LEN).is_multiple_of(AES_BLOCK))
        {
            return false;
        }
        let field =
            |at: usize| u32::from_be_bytes([esp[at], esp[at + 1], esp[at + 2], esp[at + 3]]);
        if field(0) != self.core.spi {
            return false;
        }
        let seq = {
            let window = self.lock();
            let seq = if self.core.esn {
                window.reconstruct(field(4))
            } else {
                Some(u64::from(field(4)))
            };
            match seq {
                Some(seq) if window.check(seq) => seq,
                _ => return false,
            }
        };
        match &self.core.crypto {
            Crypto::Gcm { key, salt } => {
                let (head, body) = esp.split_at_mut(header_len);
                let (aad, aad_len) = self.core.aad(seq);
                let nonce = gcm_nonce(salt, &esp_iv8(&head[8..16]));
                open_in_place(key, nonce, &aad[..aad_len], body).is_ok()
            }
            Crypto::Gmac { .. } | Crypto::Cbc(_) => self.icv_ok(esp, seq),
        }
    }

    /// Whether the ICV of `esp` (from the SPI to the end of the ICV, at least a header and an
    /// ICV long) verifies for full sequence number `seq`, without touching `esp`: the AES-GMAC
    /// tag over the whole packet (RFC 4543 §3), or the HMAC-SHA2-256 over header and
    /// ciphertext (RFC 4303 §2.8, compared in constant time). AES-GCM's tag is checked only by
    /// decrypting, which `open` and `authentic` do themselves: false for it.
    fn icv_ok(&self, esp: &[u8], seq: u64) -> bool {
        let (authed, icv) = esp.split_at(esp.len() - ICV_LEN);
        match &self.core.crypto {
            Crypto::Gmac { key, salt } => {
                let seq_hi = self.core.esn.then_some((seq >> 32) as u32);
                let nonce = gcm_nonce(salt, &esp_iv8(&authed[8..16]));
                gmac_verify(key, nonce, authed, seq_hi, icv)
            }
            Crypto::Cbc(keys) => {
                let seq_hi = self.core.esn.then_some(seq);
                verify_hmac_icv(&keys.mac, &[authed], seq_hi, icv)
            }
            Crypto::Gcm { .. } => false,
        }
    }

    /// The full sequence number of a packet carrying `seq_lo`, if the window accepts it.
    fn check_replay(&self, seq_lo: u32) -> Result<u64, OpenError> {
        let window = self.lock();
        let seq = if self.core.esn {
            window.reconstruct(seq_lo)
        } else {
            Some(u64::from(seq_lo))
        };
        match seq {
            Some(seq) if window.check(seq) => Ok(seq),
            _ => {
                self.replay_drops.fetch_add(1, Relaxed);
                Err(OpenError::Replay)
            }
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, ReplayWindow> {
        // The window is consistent after every call (nothing panics while it is held).
        self.replay.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// True when the decrypted inner packet may come out of this SA (RFC 4301 §5.2 step 4):
    /// the peer's selectors cover its source and ours its destination.
    pub fn admits(&self, inner_src: IpAddr, inner_dst: IpAddr) -> bool {
        any_covers(&self.core.remote_ts, inner_src) && any_covers(&self.core.local_ts, inner_dst)
    }

    /// Lifetime state at `now`; latches a time-based hard expiry, which `open` then honours.
    pub fn state(&self, now: Instant) -> SaState {
        self.core.state(now, false, false)
    }

    core_accessors!("The SPI (chosen by gate64).", "opened");

    /// Packets whose ICV did not verify.
    pub fn auth_failures(&self) -> u64 {
        self.auth_failures.load(Relaxed)
    }
    /// Packets refused by the replay window.
    pub fn replay_drops(&self) -> u64 {
        self.replay_drops.load(Relaxed)
    }
    /// True once a hard limit was seen (by `open` or by [`Inbound::state`]).
    pub fn is_expired(&self) -> bool {
        self.core.expired.load(Relaxed)
    }
    /// The highest sequence number received.
    pub fn highest_seq(&self) -> u64 {
        self.lock().top()
    }
}

/// Bytes of an AES-GCM ESP packet carrying `inner_len` bytes: header, inner packet, padding,
/// Pad Length, Next Header and ICV ([`Cipher::esp_len`] for any cipher).
pub const fn esp_len(inner_len: usize) -> usize {
    Cipher::AesGcm16_256.esp_len(inner_len)
}
