//! The IKEv2 key schedule (RFC 7296 §2.13-§2.14, §2.17) and the encrypted payload with
//! AES-GCM-16 (RFC 5282), over aws-lc-rs.
//!
//! Key exchange: group 19, ECP-256, whose KE data is x ‖ y (64 bytes) and whose shared
//! secret is x alone (RFC 5903 §7: aws-lc-rs speaks the SEC1 form with a 0x04 prefix, so it is
//! added and stripped here); group 31, Curve25519, 32-byte keys (RFC 8031).
//! PRF: HMAC-SHA2-256 (RFC 4868). With an AEAD there are no SK_a* keys (RFC 5282 §7) and
//! each SK_e* is a 32-byte key followed by a 4-byte salt.

use aws_lc_rs::{aead, agreement, hmac, rand};

use crate::message::{
    HEADER_LEN, Header, ParseError, Payload, emit_chain, finish_length, kind, parse_chain,
};

/// Length of the AES-GCM explicit IV (RFC 5282 §3).
pub const IV_LEN: usize = 8;
/// Length of the AES-GCM-16 ICV.
pub const ICV_LEN: usize = 16;
/// AES-256 key plus the 4-byte salt, as prf+ yields it (RFC 5282 §7.1).
pub const AES256_GCM_KEYMAT: usize = 36;
/// Output length of PRF_HMAC_SHA2_256, and the SK_d/SK_p* length.
pub const PRF_LEN: usize = 32;

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

/// A Diffie-Hellman group gate64 implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// 256-bit random ECP group, number 19.
    Ecp256,
    /// Curve25519, number 31.
    Curve25519,
}

impl Group {
    /// The group for a transform ID.
    pub fn from_id(id: u16) -> Option<Self> {
        match id {
            19 => Some(Group::Ecp256),
            31 => Some(Group::Curve25519),
            _ => None,
        }
    }

    /// The IANA transform ID.
    pub fn id(self) -> u16 {
        match self {
            Group::Ecp256 => 19,
            Group::Curve25519 => 31,
        }
    }

    /// KE payload data length.
    pub fn public_len(self) -> usize {
        match self {
            Group::Ecp256 => 64,
            Group::Curve25519 => 32,
        }
    }

    fn algorithm(self) -> &'static agreement::Algorithm {
        match self {
            Group::Ecp256 => &agreement::ECDH_P256,
            Group::Curve25519 => &agreement::X25519,
        }
    }
}

/// One side's key-exchange private value.
pub struct KeyExchange {
    group: Group,
    private: agreement::PrivateKey,
}

impl std::fmt::Debug for KeyExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyExchange({:?}, <redacted>)", self.group)
    }
}

impl KeyExchange {
    /// A fresh private value from the library's RNG.
    pub fn generate(group: Group) -> Result<Self, CryptoError> {
        let private =
            agreement::PrivateKey::generate(group.algorithm()).map_err(|_| CryptoError::Library)?;
        Ok(KeyExchange { group, private })
    }

    /// A given private value (known-answer tests).
    pub fn from_private(group: Group, bytes: &[u8]) -> Result<Self, CryptoError> {
        let private = agreement::PrivateKey::from_private_key(group.algorithm(), bytes)
            .map_err(|_| CryptoError::Library)?;
        Ok(KeyExchange { group, private })
    }

    /// The group.
    pub fn group(&self) -> Group {
        self.group
    }

    /// The KE payload data.
    pub fn public_data(&self) -> Result<Vec<u8>, CryptoError> {
        let public = self
            .private
            .compute_public_key()
            .map_err(|_| CryptoError::Library)?;
        let bytes = public.as_ref();
        Ok(match self.group {
            // RFC 5903 §7: x ‖ y without SEC1's 0x04 point-format byte.
            Group::Ecp256 => bytes.get(1..).ok_or(CryptoError::Library)?.to_vec(),
            Group::Curve25519 => bytes.to_vec(),
        })
    }

    /// The shared secret g^ir from the peer's KE data.
    pub fn agree(&self, peer: &[u8]) -> Result<Secret, CryptoError> {
        if peer.len() != self.group.public_len() {
            return Err(CryptoError::PeerPublicValue);
        }
        let sec1;
        let peer = match self.group {
            Group::Ecp256 => {
                sec1 = [&[0x04][..], peer].concat();
                &sec1[..]
            }
            Group::Curve25519 => peer,
        };
        let unparsed = agreement::UnparsedPublicKey::new(self.group.algorithm(), peer);
        // RFC 5903 §7: the ECP shared secret is the x coordinate, which is what ECDH yields.
        agreement::agree(&self.private, unparsed, CryptoError::PeerPublicValue, |s| {
            Ok(Secret(s.to_vec()))
        })
    }
}

/// Secret bytes that never print.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// prf = HMAC-SHA2-256 (RFC 4868).
pub fn prf(key: &[u8], data: &[&[u8]]) -> Vec<u8> {
    let mut ctx = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, key));
    for d in data {
        ctx.update(d);
    }
    ctx.sign().as_ref().to_vec()
}

/// prf+ (RFC 7296 §2.13): T1 = prf(K, S ‖ 0x01), Tn = prf(K, Tn-1 ‖ S ‖ n), truncated to
/// `len` (at most 255 blocks).
pub fn prf_plus(key: &[u8], seed: &[u8], len: usize) -> Secret {
    let mut out = Vec::with_capacity(len + PRF_LEN);
    let mut previous: Vec<u8> = Vec::new();
    let mut counter: u8 = 1;
    while out.len() < len {
        previous = prf(key, &[&previous, seed, &[counter]]);
        out.extend_from_slice(&previous);
        match counter.checked_add(1) {
            Some(c) => counter = c,
            None => break,
        }
    }
    out.truncate(len);
    Secret(out)
}

/// The keys of one IKE SA (RFC 7296 §2.14), for AES-GCM-16-256 + PRF_HMAC_SHA2_256.
#[derive(Clone)]
pub struct IkeKeys {
    /// SK_d: seeds child SA keys and the rekeyed IKE SA.
    pub sk_d: Secret,
    /// SK_ei: protects initiator-to-responder messages.
    pub sk_ei: SkCipher,
    /// SK_er: protects responder-to-initiator messages.
    pub sk_er: SkCipher,
    /// SK_pi: used in the initiator's AUTH octets.
    pub sk_pi: Secret,
    /// SK_pr: used in the responder's AUTH octets.
    pub sk_pr: Secret,
}

impl std::fmt::Debug for IkeKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IkeKeys(<redacted>)")
    }
}

impl IkeKeys {
    /// SKEYSEED = prf(Ni ‖ Nr, g^ir); {SK_d | SK_ei | SK_er | SK_pi | SK_pr} =
    /// prf+(SKEYSEED, Ni ‖ Nr ‖ SPIi ‖ SPIr). SK_ai/SK_ar are empty with an AEAD.
    pub fn derive(
        shared: &Secret,
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Self, CryptoError> {
        let skeyseed = prf(&[ni, nr].concat(), &[&shared.0]);
        Self::from_skeyseed(&skeyseed, ni, nr, spi_i, spi_r)
    }

    /// For an IKE SA rekey (RFC 7296 §2.18): SKEYSEED = prf(SK_d (old), g^ir (new) ‖ Ni ‖ Nr).
    pub fn derive_rekey(
        old_sk_d: &Secret,
        shared: &Secret,
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Self, CryptoError> {
        let skeyseed = prf(&old_sk_d.0, &[&shared.0, ni, nr]);
        Self::from_skeyseed(&skeyseed, ni, nr, spi_i, spi_r)
    }

    fn from_skeyseed(
        skeyseed: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Self, CryptoError> {
        let seed = [ni, nr, &spi_i.to_be_bytes(), &spi_r.to_be_bytes()].concat();
        let total = PRF_LEN + 2 * AES256_GCM_KEYMAT + 2 * PRF_LEN;
        let km = prf_plus(skeyseed, &seed, total);
        let (sk_d, rest) = km.0.split_at(PRF_LEN);
        let (sk_ei, rest) = rest.split_at(AES256_GCM_KEYMAT);
        let (sk_er, rest) = rest.split_at(AES256_GCM_KEYMAT);
        let (sk_pi, sk_pr) = rest.split_at(PRF_LEN);
        Ok(IkeKeys {
            sk_d: Secret(sk_d.to_vec()),
            sk_ei: SkCipher::new(sk_ei)?,
            sk_er: SkCipher::new(sk_er)?,
            sk_pi: Secret(sk_pi.to_vec()),
            sk_pr: Secret(sk_pr.to_vec()),
        })
    }
}

/// Child SA key material (RFC 7296 §2.17): KEYMAT = prf+(SK_d, [g^ir (new) ‖] Ni ‖ Nr),
/// initiator-to-responder key first. Each half is `per_direction` bytes (36 for
/// AES-GCM-16-256: key ‖ salt).
pub fn child_keymat(
    sk_d: &Secret,
    pfs: Option<&Secret>,
    ni: &[u8],
    nr: &[u8],
    per_direction: usize,
) -> (Secret, Secret) {
    let seed = [pfs.map_or(&[][..], |s| &s.0), ni, nr].concat();
    let km = prf_plus(&sk_d.0, &seed, 2 * per_direction);
    let (i_to_r, r_to_i) = km.0.split_at(per_direction);
    (Secret(i_to_r.to_vec()), Secret(r_to_i.to_vec()))
}

/// AES-256-GCM-16 for the SK payload: key and 4-byte salt.
///
/// Holds the 32 key bytes, not the library's expanded key (about 670 bytes of aws-lc
/// context): an IKE SA seals and opens a message every few minutes at most once it is up,
/// while gate64 holds two of these for every one of up to 200,000 IKE SAs, so the
/// key schedule is run per message instead.
#[derive(Clone)]
pub struct SkCipher {
    key: [u8; 32],
    salt: [u8; 4],
}

impl SkCipher {
    /// From 36 bytes of prf+ output: 32-byte key then 4-byte salt (RFC 5282 §7.1).
    pub fn new(keymat: &[u8]) -> Result<Self, CryptoError> {
        if keymat.len() != AES256_GCM_KEYMAT {
            return Err(CryptoError::Library);
        }
        let mut key = [0; 32];
        key.copy_from_slice(&keymat[..32]);
        let mut salt = [0; 4];
        salt.copy_from_slice(&keymat[32..]);
        let cipher = SkCipher { key, salt };
        cipher.expanded()?;
        Ok(cipher)
    }

    /// The key as the library uses it (checked once by [`SkCipher::new`]).
    fn expanded(&self) -> Result<aead::LessSafeKey, CryptoError> {
        aead::UnboundKey::new(&aead::AES_256_GCM, &self.key)
            .map(aead::LessSafeKey::new)
            .map_err(|_| CryptoError::Library)
    }

    fn nonce(&self, iv: &[u8; IV_LEN]) -> aead::Nonce {
        let mut n = [0; 12];
        n[..4].copy_from_slice(&self.salt);
        n[4..].copy_from_slice(iv);
        aead::Nonce::assume_unique_for_key(n)
    }

    /// Encrypts `plain` in place under `aad` and explicit IV `iv`; appends the ICV.
    fn seal(&self, iv: &[u8; IV_LEN], aad: &[u8], plain: &mut Vec<u8>) -> Result<(), CryptoError> {
        self.expanded()?
            .seal_in_place_append_tag(self.nonce(iv), aead::Aad::from(aad), plain)
            .map_err(|_| CryptoError::Library)
    }

    /// Opens IV ‖ ciphertext ‖ ICV authenticated with `aad`; returns the plaintext.
    fn open(&self, aad: &[u8], body: &[u8]) -> Result<Vec<u8>, OpenError> {
        if body.len() < IV_LEN + ICV_LEN {
            return Err(OpenError::Integrity);
        }
        let mut iv = [0; IV_LEN];
        iv.copy_from_slice(&body[..IV_LEN]);
        // `new` expanded this key once already: a failure here is the library's, and the
        // message is refused like one that does not verify.
        let key = self.expanded().map_err(|_| OpenError::Integrity)?;
        let mut buf = body[IV_LEN..].to_vec();
        let plain_len = key
            .open_in_place(self.nonce(&iv), aead::Aad::from(aad), &mut buf)
            .map_err(|_| OpenError::Integrity)?
            .len();
        buf.truncate(plain_len);
        Ok(buf)
    }
}

/// A fresh random explicit IV. RFC 5282 §3 requires IVs never to repeat under one key;
/// 64 random bits per message are far from a collision over an IKE SA's lifetime.
pub fn random_iv() -> Result<[u8; IV_LEN], CryptoError> {
    let mut iv = [0; IV_LEN];
    rand::fill(&mut iv).map_err(|_| CryptoError::Library)?;
    Ok(iv)
}

/// Random bytes from the library's RNG (nonces, SPIs, cookie secrets).
pub fn random_bytes(len: usize) -> Result<Vec<u8>, CryptoError> {
    let mut out = vec![0; len];
    rand::fill(&mut out).map_err(|_| CryptoError::Library)?;
    Ok(out)
}

/// Builds a protected message: header, then one SK payload holding `inner` (RFC 7296 §3.14;
/// plaintext = payloads ‖ padding (none) ‖ pad length; AAD = IKE header ‖ SK header,
/// RFC 5282 §5.1).
pub fn seal_message(
    header: &Header,
    inner: &[Payload],
    cipher: &SkCipher,
) -> Result<Vec<u8>, CryptoError> {
    let mut plain = Vec::with_capacity(1024);
    let first = emit_chain(inner, &mut plain);
    plain.push(0);
    let mut out = Vec::with_capacity(HEADER_LEN + 4 + IV_LEN + plain.len() + ICV_LEN);
    header.emit(kind::SK, &mut out);
    let sk_len =
        u16::try_from(4 + IV_LEN + plain.len() + ICV_LEN).map_err(|_| CryptoError::Library)?;
    out.push(first);
    out.push(0);
    out.extend_from_slice(&sk_len.to_be_bytes());
    out.resize(out.len() + IV_LEN + plain.len() + ICV_LEN, 0);
    finish_length(&mut out);
    let aad_len = HEADER_LEN + 4;
    out.truncate(aad_len);
    let iv = random_iv()?;
    cipher.seal(&iv, &out, &mut plain)?;
    out.extend_from_slice(&iv);
    out.extend_from_slice(&plain);
    Ok(out)
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
    let overhead = HEADER_LEN + 8 + IV_LEN + 1 + ICV_LEN;
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
        plain.push(0);
        let mut msg = Vec::with_capacity(overhead + piece.len());
        header.emit(kind::SKF, &mut msg);
        let len =
            u16::try_from(8 + IV_LEN + plain.len() + ICV_LEN).map_err(|_| CryptoError::Library)?;
        msg.push(if number == 1 { first } else { kind::NONE });
        msg.push(0);
        msg.extend_from_slice(&len.to_be_bytes());
        msg.extend_from_slice(&number.to_be_bytes());
        msg.extend_from_slice(&total.to_be_bytes());
        let aad_len = msg.len();
        msg.resize(aad_len + IV_LEN + plain.len() + ICV_LEN, 0);
        finish_length(&mut msg);
        msg.truncate(aad_len);
        let iv = random_iv()?;
        cipher.seal(&iv, &msg, &mut plain)?;
        msg.extend_from_slice(&iv);
        msg.extend_from_slice(&plain);
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
