//! The cryptographic steps of sealing and opening, apart from the SA's bookkeeping: the
//! AES-GCM nonce and its in-place seal/open, the AES-CBC IV, encryption and the HMAC ICV,
//! and the trailer check. Under `cfg(fuzzing)` the ciphers leave the payload in clear and
//! the integrity checks pass, so the fuzzer reaches the logic behind them.
//!
//! AES-GCM SAs seal and open with ring, whose AES-GCM has a VAES + AVX2 path that aws-lc
//! 0.47 lacks (aws-lc's wide path needs AVX-512): on a CPU with VAES and no AVX-512 ring is
//! 1.6x as fast on a 1400-byte packet. AES-GMAC SAs stay on aws-lc-rs: it has the 192-bit
//! key ring does not offer, and its GHASH of a long AAD (all a GMAC packet is) took a third
//! of ring's time for a 1,424-byte packet on the same CPU.

use aws_lc_rs::aead::LessSafeKey;
use aws_lc_rs::cipher::{DecryptingKey, EncryptingKey, EncryptionContext};
use aws_lc_rs::hmac;

use std::cell::RefCell;

use super::{AES_BLOCK, OpenError, SALT_LEN, SealError, TRAILER_FIXED};
use crate::ICV_LEN;

/// An AES-GCM SA's expanded key (ring).
pub(super) type GcmKey = ring::aead::LessSafeKey;

/// RFC 4106 §4: nonce = salt || the 8-byte IV carried in the packet.
pub(super) fn gcm_nonce(salt: &[u8; SALT_LEN], iv: &[u8; 8]) -> [u8; 12] {
    let mut n = [0; 12];
    n[..SALT_LEN].copy_from_slice(salt);
    n[SALT_LEN..].copy_from_slice(iv);
    n
}

/// The first 8 bytes of an IV (all of an AES-GCM one).
pub(super) fn esp_iv8(iv: &[u8]) -> [u8; 8] {
    let mut out = [0; 8];
    for (o, i) in out.iter_mut().zip(iv) {
        *o = *i;
    }
    out
}

/// The AES-CBC IV of the packet with sequence number `seq`: the AES encryption, under the
/// SA's key, of the block `seq || 0^64` (NIST SP 800-38A Appendix C, first method: the
/// forward cipher applied to a nonce under the same key). The sequence number never
/// repeats under a key, so the IVs do not either, and without the key they are
/// unpredictable (RFC 3602 §2.1); no RNG and no system call per packet.
pub(crate) fn cbc_iv(iv_key: &EncryptingKey, seq: u64) -> Result<[u8; AES_BLOCK], SealError> {
    let mut block = [0; AES_BLOCK];
    block[..8].copy_from_slice(&seq.to_be_bytes());
    iv_key
        .less_safe_encrypt(&mut block, EncryptionContext::None)
        .map_err(|_| SealError::TooLong)?;
    Ok(block)
}

/// HMAC-SHA2-256 truncated to 128 bits (RFC 4868 §2.3) over `parts` (SPI through the end
/// of the ciphertext), with the high 32 bits of the sequence number appended when ESN is on
/// (RFC 4303 §2.2.1: counted in the ICV, never sent).
pub(crate) fn icv_of(mac: &hmac::Key, parts: &[&[u8]], seq_hi: Option<u64>) -> [u8; ICV_LEN] {
    let mut ctx = hmac::Context::with_key(mac);
    for p in parts {
        ctx.update(p);
    }
    if let Some(seq) = seq_hi {
        ctx.update(&((seq >> 32) as u32).to_be_bytes());
    }
    let tag = ctx.sign();
    let mut icv = [0; ICV_LEN];
    icv.copy_from_slice(&tag.as_ref()[..ICV_LEN]);
    icv
}

/// True when `icv` is the truncated HMAC of `parts` (+ ESN high bits), compared in constant
/// time (RFC 4303 §3.4.4.1).
#[cfg(not(fuzzing))]
pub(super) fn verify_hmac_icv(
    mac: &hmac::Key,
    parts: &[&[u8]],
    seq_hi: Option<u64>,
    icv: &[u8],
) -> bool {
    let expected = icv_of(mac, parts, seq_hi);
    aws_lc_rs::constant_time::verify_slices_are_equal(&expected, icv).is_ok()
}

/// Under `cfg(fuzzing)` the ICV is not checked, as for AES-GCM.
#[cfg(fuzzing)]
pub(super) fn verify_hmac_icv(_: &hmac::Key, _: &[&[u8]], _: Option<u64>, _: &[u8]) -> bool {
    true
}

/// AES-CBC in place; `data` is whole blocks.
#[cfg(not(fuzzing))]
pub(crate) fn cbc_encrypt(
    key: &EncryptingKey,
    iv: [u8; AES_BLOCK],
    data: &mut [u8],
) -> Result<(), SealError> {
    key.less_safe_encrypt(data, EncryptionContext::Iv128(iv.into()))
        .map(|_| ())
        .map_err(|_| SealError::TooLong)
}

/// Under `cfg(fuzzing)` the payload stays in clear.
#[cfg(fuzzing)]
pub(crate) fn cbc_encrypt(
    _: &EncryptingKey,
    _: [u8; AES_BLOCK],
    _: &mut [u8],
) -> Result<(), SealError> {
    Ok(())
}

#[cfg(not(fuzzing))]
pub(crate) fn cbc_decrypt(
    key: &DecryptingKey,
    iv: [u8; AES_BLOCK],
    data: &mut [u8],
) -> Result<(), ()> {
    key.decrypt(data, aws_lc_rs::cipher::DecryptionContext::Iv128(iv.into()))
        .map(|_| ())
        .map_err(|_| ())
}

#[cfg(fuzzing)]
pub(crate) fn cbc_decrypt(_: &DecryptingKey, _: [u8; AES_BLOCK], _: &mut [u8]) -> Result<(), ()> {
    Ok(())
}

thread_local! {
    /// Where an AES-GMAC packet with ESN has its AAD put together: grows to the largest
    /// packet once per thread, so no packet allocates.
    static GMAC_AAD: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Calls `f` with the AES-GMAC AAD of `authed` (SPI through Next Header, RFC 4543 §3.3):
/// `authed` itself without ESN (no copy); with ESN, SPI || high 32 bits || the rest, put
/// together once in a per-thread buffer, since the high half is never sent.
pub(super) fn with_gmac_aad<R>(
    authed: &[u8],
    seq_hi: Option<u32>,
    f: impl FnOnce(&[u8]) -> R,
) -> R {
    let Some(hi) = seq_hi else {
        return f(authed);
    };
    let (spi, rest) = authed.split_at(authed.len().min(4));
    let build = |buf: &mut Vec<u8>| {
        buf.clear();
        buf.extend_from_slice(spi);
        buf.extend_from_slice(&hi.to_be_bytes());
        buf.extend_from_slice(rest);
    };
    GMAC_AAD.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            build(&mut buf);
            f(&buf)
        }
        // Only a re-entrant call finds it borrowed; none is made, but that case allocates
        // rather than panics.
        Err(_) => {
            let mut buf = Vec::new();
            build(&mut buf);
            f(&buf)
        }
    })
}

/// True when `icv` is the AES-GMAC tag of `authed` (+ ESN high bits) under `nonce`: the
/// AES-GCM open of an empty ciphertext, whose tag check is constant-time.
pub(crate) fn gmac_verify(
    key: &LessSafeKey,
    nonce: [u8; 12],
    authed: &[u8],
    seq_hi: Option<u32>,
    icv: &[u8],
) -> bool {
    let mut tag = [0; ICV_LEN];
    if icv.len() != ICV_LEN {
        return false;
    }
    tag.copy_from_slice(icv);
    with_gmac_aad(authed, seq_hi, |aad| gmac_open(key, nonce, aad, &mut tag))
}

/// Inner length and Next Header of the decrypted payload `plain`; the padding must be the
/// monotonic 1, 2, 3, ... RFC 4303 §2.4 prescribes.
pub(super) fn parse_trailer(plain: &[u8]) -> Result<(usize, u8), OpenError> {
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

/// AES-GCM (RFC 4106): encrypts `body` in place under `nonce`, authenticating `aad` with it,
/// and writes the tag to `icv`.
#[cfg(not(fuzzing))]
pub(super) fn seal_in_place(
    key: &GcmKey,
    nonce: [u8; 12],
    aad: &[u8],
    body: &mut [u8],
    icv: &mut [u8],
) -> Result<(), SealError> {
    // ring refuses only inputs beyond GCM's limit, far above any packet.
    let tag = key
        .seal_in_place_separate_tag(
            ring::aead::Nonce::assume_unique_for_key(nonce),
            ring::aead::Aad::from(aad),
            body,
        )
        .map_err(|_| SealError::TooLong)?;
    icv.copy_from_slice(tag.as_ref());
    Ok(())
}

/// Under `cfg(fuzzing)` (cargo-fuzz builds only) the payload is left in clear and the ICV is
/// not checked, so the fuzzer reaches the trailer and replay logic behind it, as checksums
/// are skipped elsewhere in gate64.
#[cfg(fuzzing)]
pub(super) fn seal_in_place(
    _: &GcmKey,
    _: [u8; 12],
    _: &[u8],
    _: &mut [u8],
    icv: &mut [u8],
) -> Result<(), SealError> {
    icv.fill(0);
    Ok(())
}

/// AES-GCM: checks the tag at the end of `body` and decrypts the rest in place.
#[cfg(not(fuzzing))]
pub(super) fn open_in_place(
    key: &GcmKey,
    nonce: [u8; 12],
    aad: &[u8],
    body: &mut [u8],
) -> Result<(), ()> {
    key.open_in_place(
        ring::aead::Nonce::assume_unique_for_key(nonce),
        ring::aead::Aad::from(aad),
        body,
    )
    .map(|_| ())
    .map_err(|_| ())
}

#[cfg(fuzzing)]
pub(super) fn open_in_place(_: &GcmKey, _: [u8; 12], _: &[u8], _: &mut [u8]) -> Result<(), ()> {
    Ok(())
}

/// AES-GMAC (RFC 4543): the AES-GCM tag of `aad` with an empty plaintext, into `icv`.
#[cfg(not(fuzzing))]
pub(super) fn gmac_seal(
    key: &LessSafeKey,
    nonce: [u8; 12],
    aad: &[u8],
    icv: &mut [u8],
) -> Result<(), SealError> {
    let tag = key
        .seal_in_place_separate_tag(
            aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce),
            aws_lc_rs::aead::Aad::from(aad),
            &mut [],
        )
        .map_err(|_| SealError::TooLong)?;
    icv.copy_from_slice(tag.as_ref());
    Ok(())
}

#[cfg(fuzzing)]
pub(super) fn gmac_seal(
    _: &LessSafeKey,
    _: [u8; 12],
    _: &[u8],
    icv: &mut [u8],
) -> Result<(), SealError> {
    icv.fill(0);
    Ok(())
}

/// True when `tag` is the AES-GMAC tag of `aad` under `nonce` (aws-lc's tag check is
/// constant-time).
#[cfg(not(fuzzing))]
fn gmac_open(key: &LessSafeKey, nonce: [u8; 12], aad: &[u8], tag: &mut [u8]) -> bool {
    key.open_in_place(
        aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce),
        aws_lc_rs::aead::Aad::from(aad),
        tag,
    )
    .is_ok()
}

#[cfg(fuzzing)]
fn gmac_open(_: &LessSafeKey, _: [u8; 12], _: &[u8], _: &mut [u8]) -> bool {
    true
}
