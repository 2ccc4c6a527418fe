//! One direction of a child SA: [`Outbound`] seals, [`Inbound`] opens. Both are shared by
//! every data-path worker through `&self`.

use core::fmt;
use core::ops::Range;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use zeroize::Zeroize;

use crate::replay::ReplayWindow;
use crate::selector::{Selector, any_covers};
use crate::{ICV_LEN, SPI_SEQ_IV_LEN};

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

/// The ESP transform: AES-GCM with a 16-byte ICV (RFC 4106; IKEv2 transform ENCR_AES_GCM_16,
/// 20).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// AES-128-GCM, 16-byte ICV: 20 bytes of key material (key || salt).
    AesGcm16_128,
    /// AES-256-GCM, 16-byte ICV: 36 bytes of key material (key || salt).
    AesGcm16_256,
}

impl Cipher {
    /// Bytes of KEYMAT this cipher takes: the AES key and the 4-byte salt (RFC 4106 §8.1).
    pub const fn keymat_len(self) -> usize {
        match self {
            Cipher::AesGcm16_128 => 16 + SALT_LEN,
            Cipher::AesGcm16_256 => 32 + SALT_LEN,
        }
    }
}

/// Key material of one direction, as IKEv2 KEYMAT gives it: the AES key followed by the
/// 4-byte salt (RFC 4106 §8.1, RFC 7296 §2.17). Wiped on drop; `Debug` prints no key.
#[derive(Clone, PartialEq, Eq)]
pub struct SaKeys {
    /// The cipher the key is for.
    pub cipher: Cipher,
    /// Key || salt; [`Cipher::keymat_len`] bytes.
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
    #[error("{cipher:?} takes {expected} bytes of key material (key || salt), got {actual}")]
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
    /// The inner packet is longer than AES-GCM may encrypt under one nonce (2^36 bytes).
    #[error("inner packet too long for AES-GCM")]
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
    /// the SPI is not this SA's.
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

/// Key, salt and the limits both directions share.
struct Core {
    spi: u32,
    key: LessSafeKey,
    salt: [u8; SALT_LEN],
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
        let (key, salt) = p.keys.key.split_at(expected - SALT_LEN);
        let algorithm = match cipher {
            Cipher::AesGcm16_128 => &AES_128_GCM,
            Cipher::AesGcm16_256 => &AES_256_GCM,
        };
        let unbound = UnboundKey::new(algorithm, key).map_err(|_| KeyError::Length {
            cipher,
            expected,
            actual: p.keys.key.len(),
        })?;
        let mut salt_bytes = [0; SALT_LEN];
        salt_bytes.copy_from_slice(salt);
        Ok(Core {
            spi: p.spi,
            key: LessSafeKey::new(unbound),
            salt: salt_bytes,
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

    /// RFC 4106 §4: nonce = salt || the 8-byte IV carried in the packet.
    fn nonce(&self, iv: &[u8; 8]) -> Nonce {
        let mut n = [0; 12];
        n[..SALT_LEN].copy_from_slice(&self.salt);
        n[SALT_LEN..].copy_from_slice(iv);
        Nonce::assume_unique_for_key(n)
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

    /// Seals the inner packet at `buf[at + SPI_SEQ_IV_LEN ..][..inner_len]` in place:
    /// writes SPI, sequence number and IV into `buf[at..at + SPI_SEQ_IV_LEN]`, appends the
    /// padding (RFC 4303 §2.4: 1, 2, 3, ... up to a 4-byte boundary), Pad Length and
    /// `next_header`, encrypts and appends the ICV. `buf` needs up to
    /// [`MAX_TRAILER`](crate::MAX_TRAILER) bytes after the inner packet. Returns the ESP
    /// length from `at`. No allocation.
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
        let esp_len = esp_len(inner_len);
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
        self.seal_with_iv(esp, inner_len, next_header, seq, seq.to_be_bytes())?;
        Ok(esp_len)
    }

    /// Seals `esp` (exactly [`esp_len`]`(inner_len)` bytes, the inner packet at
    /// `SPI_SEQ_IV_LEN`) under `seq` with an explicit IV; `seal` passes the sequence number.
    pub(crate) fn seal_with_iv(
        &self,
        esp: &mut [u8],
        inner_len: usize,
        next_header: u8,
        seq: u64,
        iv: [u8; 8],
    ) -> Result<(), SealError> {
        let core = &self.core;
        esp[0..4].copy_from_slice(&core.spi.to_be_bytes());
        // RFC 4303 §2.2.1: only the low 32 bits travel, with or without ESN.
        esp[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
        esp[8..16].copy_from_slice(&iv);
        let trailer_at = SPI_SEQ_IV_LEN + inner_len;
        let pad = pad_len(inner_len);
        for (i, b) in esp[trailer_at..trailer_at + pad].iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        esp[trailer_at + pad] = pad as u8;
        esp[trailer_at + pad + 1] = next_header;
        let (aad, aad_len) = core.aad(seq);
        let tag_at = esp.len() - ICV_LEN;
        let (body, tag) = esp[SPI_SEQ_IV_LEN..].split_at_mut(tag_at - SPI_SEQ_IV_LEN);
        seal_in_place(
            &core.key,
            core.nonce(&iv),
            Aad::from(&aad[..aad_len]),
            body,
            tag,
        )
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

    /// Opens the ESP packet `esp` (from the SPI to the end of the ICV) in place: refuses
    /// replayed sequence numbers before decrypting, verifies the ICV and decrypts, marks the
    /// sequence number only then (RFC 4303 §3.4.3), and checks the trailer. No allocation.
    pub fn open(&self, esp: &mut [u8]) -> Result<Opened, OpenError> {
        if esp.len() < SPI_SEQ_IV_LEN + TRAILER_FIXED + ICV_LEN {
            return Err(OpenError::Truncated);
        }
        if self.core.expired.load(Relaxed) {
            return Err(OpenError::Expired);
        }
        let (head, body) = esp.split_at_mut(SPI_SEQ_IV_LEN);
        let field = |r: Range<usize>| {
            u32::from_be_bytes([
                head[r.start],
                head[r.start + 1],
                head[r.start + 2],
                head[r.start + 3],
            ])
        };
        if field(0..4) != self.core.spi {
            return Err(OpenError::Malformed);
        }
        let seq = self.check_replay(field(4..8))?;
        let mut iv = [0; 8];
        iv.copy_from_slice(&head[8..16]);
        let (aad, aad_len) = self.core.aad(seq);
        let nonce = self.core.nonce(&iv);
        if open_in_place(&self.core.key, nonce, Aad::from(&aad[..aad_len]), body).is_err() {
            self.auth_failures.fetch_add(1, Relaxed);
            return Err(OpenError::Auth);
        }
        if !self.lock().mark(seq) {
            // Another core opened the same sequence number since the check.
            self.replay_drops.fetch_add(1, Relaxed);
            return Err(OpenError::Replay);
        }
        let plain = &body[..body.len() - ICV_LEN];
        let (inner_len, next_header) = parse_trailer(plain)?;
        if !self.core.count(inner_len) {
            return Err(OpenError::Expired);
        }
        Ok(Opened {
            inner: SPI_SEQ_IV_LEN..SPI_SEQ_IV_LEN + inner_len,
            next_header,
        })
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

/// Bytes of an ESP packet carrying `inner_len` bytes: header, inner packet, padding, Pad
/// Length, Next Header and ICV.
pub const fn esp_len(inner_len: usize) -> usize {
    SPI_SEQ_IV_LEN + inner_len + pad_len(inner_len) + TRAILER_FIXED + ICV_LEN
}

/// RFC 4303 §2.4: padding so that the trailer ends on a 4-byte boundary (GCM needs no
/// block alignment, RFC 4106 §3).
const fn pad_len(inner_len: usize) -> usize {
    (4 - (inner_len + TRAILER_FIXED) % 4) % 4
}

/// Inner length and Next Header of the decrypted payload `plain`; the padding must be the
/// monotonic 1, 2, 3, ... RFC 4303 §2.4 prescribes.
fn parse_trailer(plain: &[u8]) -> Result<(usize, u8), OpenError> {
    let [.., pad_len, next_header] = *plain else {
        return Err(OpenError::Truncated);
    };
    let pad_len = usize::from(pad_len);
    let inner_len = plain
        .len()
        .checked_sub(TRAILER_FIXED + pad_len)
        .ok_or(OpenError::Malformed)?;
    let pad = &plain[inner_len..inner_len + pad_len];
    if pad
        .iter()
        .enumerate()
        .any(|(i, &b)| usize::from(b) != i + 1)
    {
        return Err(OpenError::Malformed);
    }
    Ok((inner_len, next_header))
}

#[cfg(not(fuzzing))]
fn seal_in_place(
    key: &LessSafeKey,
    nonce: Nonce,
    aad: Aad<&[u8]>,
    body: &mut [u8],
    icv: &mut [u8],
) -> Result<(), SealError> {
    // aws-lc refuses only inputs beyond GCM's limit, far above any packet.
    let tag = key
        .seal_in_place_separate_tag(nonce, aad, body)
        .map_err(|_| SealError::TooLong)?;
    icv.copy_from_slice(tag.as_ref());
    Ok(())
}

/// Under `cfg(fuzzing)` (cargo-fuzz builds only) the payload is left in clear and the ICV is
/// not checked, so the fuzzer reaches the trailer and replay logic behind it, as checksums
/// are skipped elsewhere in gate64.
#[cfg(fuzzing)]
fn seal_in_place(
    _: &LessSafeKey,
    _: Nonce,
    _: Aad<&[u8]>,
    _: &mut [u8],
    icv: &mut [u8],
) -> Result<(), SealError> {
    icv.fill(0);
    Ok(())
}

#[cfg(not(fuzzing))]
fn open_in_place(
    key: &LessSafeKey,
    nonce: Nonce,
    aad: Aad<&[u8]>,
    body: &mut [u8],
) -> Result<(), ()> {
    key.open_in_place(nonce, aad, body)
        .map(|_| ())
        .map_err(|_| ())
}

#[cfg(fuzzing)]
fn open_in_place(_: &LessSafeKey, _: Nonce, _: Aad<&[u8]>, _: &mut [u8]) -> Result<(), ()> {
    Ok(())
}
