//! The IKEv2 key schedule (RFC 7296 §2.13-§2.14, §2.17) and the encrypted payload, over
//! aws-lc-rs.
//!
//! What an IKE SA negotiated is a [`Suite`] (cipher, integrity, PRF: `suite`) and a
//! [`Group`] (`dh`). The SK payload is AES-GCM-16 (RFC 5282: no SK_a* keys, each SK_e* a
//! key followed by a 4-byte salt) or AES-CBC with an HMAC-SHA2 or, with
//! `legacy_proposals`, HMAC-SHA1-96 ICV (RFC 3602, RFC 4868, RFC 2404). The PRF is
//! HMAC-SHA2-256/384/512 or, with `legacy_proposals`, HMAC-SHA1; SK_d and SK_p* are as long
//! as its output.

use aws_lc_rs::iv::FixedLength;
use aws_lc_rs::{aead, cipher, constant_time, rand};

mod dh;
mod suite;

pub use dh::{Group, KeyExchange};
pub use suite::{ENCR_3DES, ENCR_AES_CBC, Encr, Integ, Prf, Suite};

use crate::message::{
    HEADER_LEN, Header, ParseError, Payload, emit_chain, finish_length, kind, parse_chain,
};

/// Length of the AES-GCM explicit IV (RFC 5282 §3).
pub const IV_LEN: usize = 8;
/// Length of the AES-GCM-16 ICV.
pub const ICV_LEN: usize = 16;
/// AES-256 key plus the 4-byte salt, as prf+ yields it (RFC 5282 §7.1).
pub const AES256_GCM_KEYMAT: usize = 36;

/// A crypto failure: bad peer public value, or an internal error of the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CryptoError {
    /// The peer's public value is not a valid point/key for the group.
    #[error("invalid peer public value")]
    PeerPublicValue,
    /// Key generation or the library failed.
    #[error("crypto library failure")]
    Library,
}

/// Why an encrypted payload could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The message does not parse, or its last payload is not SK/SKF.
    #[error("malformed: {0}")]
    Parse(#[from] ParseError),
    /// No SK payload.
    #[error("no encrypted payload")]
    NoEncryptedPayload,
    /// The ICV does not verify (wrong key, tampered, or not for us).
    #[error("integrity check failed")]
    Integrity,
}

/// Secret bytes that never print, wiped on drop (each clone wipes its own copy).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl Secret {
    /// The bytes, moved out without a copy (what is left to drop is empty): for a holder
    /// that wipes them itself, such as gate64-esp's `SaKeys`.
    pub fn into_bytes(mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

impl zeroize::Zeroize for Secret {
    fn zeroize(&mut self) {
        self.0.zeroize();
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(self);
    }
}

impl zeroize::ZeroizeOnDrop for Secret {}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A PRF key (SK_d, SK_pi, SK_pr) with the PRF it is used with.
#[derive(Clone, PartialEq, Eq)]
pub struct PrfKey {
    /// The IKE SA's PRF.
    pub prf: Prf,
    /// The key, as long as the PRF's output.
    pub key: Secret,
}

impl std::fmt::Debug for PrfKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrfKey({:?}, <redacted>)", self.prf)
    }
}

impl PrfKey {
    /// prf(key, data₀ ‖ data₁ ‖ ...).
    pub fn prf(&self, data: &[&[u8]]) -> Vec<u8> {
        self.prf.prf(&self.key.0, data)
    }
}

/// The keys of one IKE SA (RFC 7296 §2.14) for its negotiated [`Suite`].
#[derive(Clone)]
pub struct IkeKeys {
    /// The algorithms the keys are for.
    pub suite: Suite,
    /// SK_d: seeds child SA keys and the rekeyed IKE SA.
    pub sk_d: PrfKey,
    /// SK_ei (and SK_ai): protects initiator-to-responder messages.
    pub sk_ei: SkCipher,
    /// SK_er (and SK_ar): protects responder-to-initiator messages.
    pub sk_er: SkCipher,
    /// SK_pi: used in the initiator's AUTH octets.
    pub sk_pi: PrfKey,
    /// SK_pr: used in the responder's AUTH octets.
    pub sk_pr: PrfKey,
}

impl std::fmt::Debug for IkeKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IkeKeys({:?}, <redacted>)", self.suite)
    }
}

impl IkeKeys {
    /// SKEYSEED = prf(Ni ‖ Nr, g^ir); {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} =
    /// prf+(SKEYSEED, Ni ‖ Nr ‖ SPIi ‖ SPIr). SK_ai/SK_ar are empty with an AEAD.
    pub fn derive(
        suite: Suite,
        shared: &Secret,
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Self, CryptoError> {
        let skeyseed = suite.prf.prf(&[ni, nr].concat(), &[&shared.0]);
        Self::from_skeyseed(suite, &skeyseed, ni, nr, spi_i, spi_r)
    }

    /// For an IKE SA rekey (RFC 7296 §2.18): SKEYSEED = prf(SK_d (old), g^ir (new) ‖ Ni ‖ Nr)
    /// with the old IKE SA's PRF (the exchange belongs to it), then prf+ with the new one's.
    pub fn derive_rekey(
        old_sk_d: &PrfKey,
        suite: Suite,
        shared: &Secret,
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Self, CryptoError> {
        let skeyseed = old_sk_d.prf(&[&shared.0, ni, nr]);
        Self::from_skeyseed(suite, &skeyseed, ni, nr, spi_i, spi_r)
    }

    fn from_skeyseed(
        suite: Suite,
        skeyseed: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Self, CryptoError> {
        if !suite.is_consistent() {
            return Err(CryptoError::Library);
        }
        let seed = [ni, nr, &spi_i.to_be_bytes(), &spi_r.to_be_bytes()].concat();
        let prf_len = suite.prf.output_len();
        let integ_len = suite.integ.map_or(0, Integ::key_len);
        let encr_len = suite.encr.keymat_len();
        let total = 3 * prf_len + 2 * integ_len + 2 * encr_len;
        let km = suite.prf.prf_plus(skeyseed, &seed, total);
        let (sk_d, rest) = km.split_at(prf_len);
        let (sk_ai, rest) = rest.split_at(integ_len);
        let (sk_ar, rest) = rest.split_at(integ_len);
        let (sk_ei, rest) = rest.split_at(encr_len);
        let (sk_er, rest) = rest.split_at(encr_len);
        let (sk_pi, sk_pr) = rest.split_at(prf_len);
        let key = |k: &[u8]| PrfKey {
            prf: suite.prf,
            key: Secret(k.to_vec()),
        };
        Ok(IkeKeys {
            suite,
            sk_d: key(sk_d),
            sk_ei: SkCipher::new(suite.encr, sk_ei, suite.integ.map(|i| (i, sk_ai)))?,
            sk_er: SkCipher::new(suite.encr, sk_er, suite.integ.map(|i| (i, sk_ar)))?,
            sk_pi: key(sk_pi),
            sk_pr: key(sk_pr),
        })
    }
}

/// Child SA key material (RFC 7296 §2.17): KEYMAT = prf+(SK_d, [g^ir (new) ‖] Ni ‖ Nr),
/// initiator-to-responder key first. Each half is `per_direction` bytes (36 for
/// AES-GCM-16-256: key ‖ salt).
pub fn child_keymat(
    sk_d: &PrfKey,
    pfs: Option<&Secret>,
    ni: &[u8],
    nr: &[u8],
    per_direction: usize,
) -> (Secret, Secret) {
    let seed = [pfs.map_or(&[][..], |s| &s.0), ni, nr].concat();
    let km = sk_d.prf.prf_plus(&sk_d.key.0, &seed, 2 * per_direction);
    let (i_to_r, r_to_i) = km.split_at(per_direction);
    (Secret(i_to_r.to_vec()), Secret(r_to_i.to_vec()))
}

/// The SK payload's protection in one direction: AES-GCM-16 (RFC 5282: key and 4-byte salt,
/// 8-byte explicit IV, 16-byte ICV over the AAD), or AES-CBC (RFC 3602: 16-byte random IV,
/// plaintext padded to the block) followed by an HMAC over the whole message up to the ICV
/// (RFC 7296 §3.14, RFC 4868).
///
/// Holds the key bytes, not the library's expanded key (about 670 bytes of aws-lc
/// context): an IKE SA seals and opens a message every few minutes at most once it is up,
/// while gate64 holds two of these for every one of up to 200,000 IKE SAs, so the
/// key schedule is run per message instead.
#[derive(Clone)]
pub struct SkCipher {
    encr: Encr,
    key: [u8; 32],
    salt: [u8; 4],
    integ: Option<(Integ, Box<[u8]>)>,
}

/// AES block length: the CBC IV and the padding unit.
const AES_BLOCK: usize = 16;

impl SkCipher {
    /// From prf+ output: the cipher's key material (the key, then the salt for AES-GCM,
    /// RFC 5282 §7.1) and, exactly when the cipher is not an AEAD, the integrity algorithm
    /// with its key.
    pub fn new(
        encr: Encr,
        keymat: &[u8],
        integ: Option<(Integ, &[u8])>,
    ) -> Result<Self, CryptoError> {
        if keymat.len() != encr.keymat_len() || encr.is_aead() != integ.is_none() {
            return Err(CryptoError::Library);
        }
        let key_len = encr.key_len();
        let mut key = [0; 32];
        key[..key_len].copy_from_slice(&keymat[..key_len]);
        let mut salt = [0; 4];
        if encr.is_aead() {
            salt.copy_from_slice(&keymat[key_len..]);
        }
        let integ = match integ {
            Some((i, k)) if k.len() == i.key_len() => Some((i, Box::from(k))),
            Some(_) => return Err(CryptoError::Library),
            None => None,
        };
        let cipher = SkCipher {
            encr,
            key,
            salt,
            integ,
        };
        if encr.is_aead() {
            cipher.aead_key()?;
        }
        Ok(cipher)
    }

    /// The cipher.
    pub fn encr(&self) -> Encr {
        self.encr
    }

    /// What [`SkCipher::new`] was made from: the cipher's key material (the key, then the
    /// salt for AES-GCM) and the integrity key (empty under an AEAD). For handing an IKE SA
    /// to the standby node of a pair.
    pub fn key_material(&self) -> (Secret, Secret) {
        let mut keymat = self.key_bytes().to_vec();
        if self.encr.is_aead() {
            keymat.extend_from_slice(&self.salt);
        }
        let integ = self
            .integ
            .as_ref()
            .map_or_else(Vec::new, |(_, k)| k.to_vec());
        (Secret(keymat), Secret(integ))
    }

    /// Length of the IV in front of the ciphertext.
    pub fn iv_len(&self) -> usize {
        if self.encr.is_aead() {
            IV_LEN
        } else {
            AES_BLOCK
        }
    }

    /// Length of the ICV behind the ciphertext.
    pub fn icv_len(&self) -> usize {
        match &self.integ {
            Some((i, _)) => i.icv_len(),
            None => ICV_LEN,
        }
    }

    /// Bytes the ciphertext may grow by through padding (to the block, beyond the pad
    /// length byte).
    pub fn max_padding(&self) -> usize {
        if self.encr.is_aead() {
            0
        } else {
            AES_BLOCK - 1
        }
    }

    fn key_bytes(&self) -> &[u8] {
        &self.key[..self.encr.key_len()]
    }

    /// The AEAD key as the library uses it (checked once by [`SkCipher::new`]).
    fn aead_key(&self) -> Result<aead::LessSafeKey, CryptoError> {
        let alg = match self.encr {
            Encr::AesGcm16_128 => &aead::AES_128_GCM,
            _ => &aead::AES_256_GCM,
        };
        aead::UnboundKey::new(alg, self.key_bytes())
            .map(aead::LessSafeKey::new)
            .map_err(|_| CryptoError::Library)
    }

    fn cbc_key(&self) -> Result<cipher::UnboundCipherKey, CryptoError> {
        let alg = match self.encr {
            Encr::AesCbc128 => &cipher::AES_128,
            _ => &cipher::AES_256,
        };
        cipher::UnboundCipherKey::new(alg, self.key_bytes()).map_err(|_| CryptoError::Library)
    }

    fn nonce(&self, iv: &[u8; IV_LEN]) -> aead::Nonce {
        let mut n = [0; 12];
        n[..4].copy_from_slice(&self.salt);
        n[4..].copy_from_slice(iv);
        aead::Nonce::assume_unique_for_key(n)
    }

    /// Appends padding and the pad length byte: none with AES-GCM, to a whole number of
    /// blocks with AES-CBC (RFC 7296 §3.14: the padding's content is not checked).
    fn pad(&self, plain: &mut Vec<u8>) {
        self.pad_more(plain, 0);
    }

    /// [`SkCipher::pad`] with at least `extra` more bytes of padding (RFC 7296 §3.14 lets the
    /// sender choose any padding up to 255 bytes), rounded up to the cipher's block.
    fn pad_more(&self, plain: &mut Vec<u8>, extra: usize) {
        let extra = extra.min(255 - AES_BLOCK);
        let padding = if self.encr.is_aead() {
            extra
        } else {
            (AES_BLOCK - (plain.len() + extra + 1) % AES_BLOCK) % AES_BLOCK + extra
        };
        plain.resize(plain.len() + padding, 0);
        // `extra` is capped so that `padding` stays below 256 and fits a byte.
        plain.push(u8::try_from(padding).unwrap_or(0));
    }

    /// Seals padded `plain` onto `out`, which holds the message up to the encrypted body
    /// with every length field already final: appends IV ‖ ciphertext ‖ ICV.
    fn seal_onto(&self, out: &mut Vec<u8>, mut plain: Vec<u8>) -> Result<(), CryptoError> {
        match &self.integ {
            None => {
                let mut iv = [0; IV_LEN];
                rand::fill(&mut iv).map_err(|_| CryptoError::Library)?;
                self.aead_key()?
                    .seal_in_place_append_tag(
                        self.nonce(&iv),
                        aead::Aad::from(&out[..]),
                        &mut plain,
                    )
                    .map_err(|_| CryptoError::Library)?;
                out.extend_from_slice(&iv);
                out.extend_from_slice(&plain);
            }
            Some((integ, integ_key)) => {
                let mut iv = [0; AES_BLOCK];
                rand::fill(&mut iv).map_err(|_| CryptoError::Library)?;
                cipher::EncryptingKey::cbc(self.cbc_key()?)
                    .and_then(|k| {
                        k.less_safe_encrypt(
                            &mut plain,
                            cipher::EncryptionContext::Iv128(FixedLength::from(iv)),
                        )
                    })
                    .map_err(|_| CryptoError::Library)?;
                out.extend_from_slice(&iv);
                out.extend_from_slice(&plain);
                let icv = integ.mac(integ_key, &[out]);
                out.extend_from_slice(&icv);
            }
        }
        Ok(())
    }

    /// Opens IV ‖ ciphertext ‖ ICV, the tail of a message whose head is `aad`; returns the
    /// plaintext with its padding.
    fn open(&self, aad: &[u8], body: &[u8]) -> Result<Vec<u8>, OpenError> {
        let (iv_len, icv_len) = (self.iv_len(), self.icv_len());
        if body.len() < iv_len + icv_len {
            return Err(OpenError::Integrity);
        }
        let (iv, rest) = body.split_at(iv_len);
        let (text, icv) = rest.split_at(rest.len() - icv_len);
        match &self.integ {
            None => {
                let mut explicit = [0; IV_LEN];
                explicit.copy_from_slice(iv);
                // `new` expanded this key once already: a failure here is the library's,
                // and the message is refused like one that does not verify.
                let key = self.aead_key().map_err(|_| OpenError::Integrity)?;
                let mut buf = rest.to_vec();
                let plain_len = key
                    .open_in_place(self.nonce(&explicit), aead::Aad::from(aad), &mut buf)
                    .map_err(|_| OpenError::Integrity)?
                    .len();
                buf.truncate(plain_len);
                Ok(buf)
            }
            Some((integ, integ_key)) => {
                let expected = integ.mac(integ_key, &[aad, iv, text]);
                constant_time::verify_slices_are_equal(&expected, icv)
                    .map_err(|_| OpenError::Integrity)?;
                // Authentic but not whole blocks: the peer's encoder is broken.
                if text.is_empty() || text.len() % AES_BLOCK != 0 {
                    return Err(OpenError::Parse(ParseError::Malformed));
                }
                let mut block_iv = [0; AES_BLOCK];
                block_iv.copy_from_slice(iv);
                let mut buf = text.to_vec();
                let key =
                    cipher::DecryptingKey::cbc(self.cbc_key().map_err(|_| OpenError::Integrity)?)
                        .map_err(|_| OpenError::Integrity)?;
                let len = key
                    .decrypt(
                        &mut buf,
                        cipher::DecryptionContext::Iv128(FixedLength::from(block_iv)),
                    )
                    .map_err(|_| OpenError::Integrity)?
                    .len();
                buf.truncate(len);
                Ok(buf)
            }
        }
    }
}

/// Random bytes from the library's RNG (nonces, SPIs, cookie secrets).
pub fn random_bytes(len: usize) -> Result<Vec<u8>, CryptoError> {
    let mut out = vec![0; len];
    rand::fill(&mut out).map_err(|_| CryptoError::Library)?;
    Ok(out)
}

/// Builds a protected message: header, then one SK payload holding `inner` (RFC 7296 §3.14;
/// plaintext = payloads ‖ padding ‖ pad length; AES-GCM's AAD = IKE header ‖ SK header,
/// RFC 5282 §5.1; AES-CBC's ICV covers the message up to it).
pub fn seal_message(
    header: &Header,
    inner: &[Payload],
    cipher: &SkCipher,
) -> Result<Vec<u8>, CryptoError> {
    seal_message_at_least(header, inner, cipher, 0)
}

/// [`seal_message`], padded (up to 255 bytes of padding) so that the message is at least
/// `min_len` bytes long: a request whose answer may be longer than itself (an unprotected
/// Quick Crash Detection answer, RFC 6290, which a responder sends only when it is no
/// larger than the request).
pub fn seal_message_at_least(
    header: &Header,
    inner: &[Payload],
    cipher: &SkCipher,
    min_len: usize,
) -> Result<Vec<u8>, CryptoError> {
    let mut plain = Vec::with_capacity(1024);
    let first = emit_chain(inner, &mut plain);
    let bare = HEADER_LEN + 4 + cipher.iv_len() + plain.len() + 1 + cipher.icv_len();
    cipher.pad_more(&mut plain, min_len.saturating_sub(bare));
    let body_len = cipher.iv_len() + plain.len() + cipher.icv_len();
    let mut out = Vec::with_capacity(HEADER_LEN + 4 + body_len);
    header.emit(kind::SK, &mut out);
    let sk_len = u16::try_from(4 + body_len).map_err(|_| CryptoError::Library)?;
    out.push(first);
    out.push(0);
    out.extend_from_slice(&sk_len.to_be_bytes());
    set_length(&mut out, body_len)?;
    cipher.seal_onto(&mut out, plain)?;
    Ok(out)
}

/// Writes into the IKE header of `head` the length of the whole message: `head` and the
/// `body_len` bytes still to come.
fn set_length(head: &mut Vec<u8>, body_len: usize) -> Result<(), CryptoError> {
    let len = head.len();
    head.resize(len + body_len, 0);
    finish_length(head);
    head.truncate(len);
    Ok(())
}

/// Builds RFC 7383 fragments of a protected message: the inner payload chain is cut into
/// pieces so each datagram fits `fragment_size`, and each piece is sealed on its own in an
/// SKF payload (AAD = IKE header | SKF header | fragment number | total, §2.5).
pub fn seal_fragments(
    header: &Header,
    inner: &[Payload],
    cipher: &SkCipher,
    fragment_size: usize,
) -> Result<Vec<Vec<u8>>, CryptoError> {
    let mut chain = Vec::with_capacity(2048);
    let first = emit_chain(inner, &mut chain);
    let overhead = HEADER_LEN + 8 + cipher.iv_len() + 1 + cipher.max_padding() + cipher.icv_len();
    let room = fragment_size
        .checked_sub(overhead)
        .filter(|r| *r >= 64)
        .ok_or(CryptoError::Library)?;
    let pieces: Vec<&[u8]> = chain.chunks(room).collect();
    let total = u16::try_from(pieces.len()).map_err(|_| CryptoError::Library)?;
    let mut out = Vec::with_capacity(pieces.len());
    for (i, piece) in pieces.iter().enumerate() {
        let number = u16::try_from(i + 1).map_err(|_| CryptoError::Library)?;
        let mut plain = piece.to_vec();
        cipher.pad(&mut plain);
        let body_len = cipher.iv_len() + plain.len() + cipher.icv_len();
        let mut msg = Vec::with_capacity(HEADER_LEN + 8 + body_len);
        header.emit(kind::SKF, &mut msg);
        let len = u16::try_from(8 + body_len).map_err(|_| CryptoError::Library)?;
        msg.push(if number == 1 { first } else { kind::NONE });
        msg.push(0);
        msg.extend_from_slice(&len.to_be_bytes());
        msg.extend_from_slice(&number.to_be_bytes());
        msg.extend_from_slice(&total.to_be_bytes());
        set_length(&mut msg, body_len)?;
        cipher.seal_onto(&mut msg, plain)?;
        out.push(msg);
    }
    Ok(out)
}

/// Opens the SK payload of `datagram` (which must be the last payload); returns the header
/// and the inner payloads. SKF fragments are opened with [`open_fragment`].
pub fn open_message(
    datagram: &[u8],
    cipher: &SkCipher,
) -> Result<(Header, Vec<Payload>), OpenError> {
    let (header, first) = Header::parse(datagram)?;
    let payloads = parse_chain(first, &datagram[HEADER_LEN..])?;
    let Some(Payload::Sk { first, body }) = payloads.last() else {
        return Err(OpenError::NoEncryptedPayload);
    };
    let plain = open_body(datagram, body, cipher)?;
    Ok((header, parse_chain(*first, &plain)?))
}

/// Opens one SKF fragment (RFC 7383 §2.5: each fragment is protected on its own; the AAD runs
/// to the end of the fragment number fields). Returns the fragment's plaintext without padding.
pub fn open_fragment(
    datagram: &[u8],
    body: &[u8],
    cipher: &SkCipher,
) -> Result<Vec<u8>, OpenError> {
    open_body(datagram, body, cipher)
}

fn open_body(datagram: &[u8], body: &[u8], cipher: &SkCipher) -> Result<Vec<u8>, OpenError> {
    // The encrypted payload is last, so its body is the datagram's tail and everything before
    // it is the AAD.
    let aad_len = datagram
        .len()
        .checked_sub(body.len())
        .ok_or(OpenError::NoEncryptedPayload)?;
    let mut plain = cipher.open(&datagram[..aad_len], body)?;
    let pad = usize::from(*plain.last().ok_or(ParseError::Truncated)?);
    let keep = plain
        .len()
        .checked_sub(pad + 1)
        .ok_or(ParseError::Malformed)?;
    plain.truncate(keep);
    Ok(plain)
}

#[cfg(test)]
mod tests;
