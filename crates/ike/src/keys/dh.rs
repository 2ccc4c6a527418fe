//! The key-exchange groups (RFC 7296 §3.3.2 transform type 4).
//!
//! Elliptic curves over aws-lc-rs: group 19, ECP-256, and group 20, ECP-384, whose KE data is
//! x ‖ y and whose shared secret is x alone (RFC 5903 §7: aws-lc-rs speaks the SEC1 form with
//! a 0x04 prefix, so it is added and stripped here); group 31, Curve25519, 32-byte keys
//! (RFC 8031).
//!
//! Finite-field groups (RFC 3526 groups 14, 15, 16 and RFC 2409 group 2, MODP-1024), which
//! aws-lc-rs does not offer, over crypto-bigint's constant-time Montgomery exponentiation:
//! generator 2, a 512-bit random private exponent (more than twice the strength of the
//! largest group, RFC 3526 §8), the public value and the shared secret as big-endian numbers
//! of the prime's length (RFC 7296 §3.4: zero-padded on the left). A peer value outside
//! 1 < y < p-1 is refused (RFC 7296 §5, NIST SP 800-56A's partial check).

use std::sync::OnceLock;

use aws_lc_rs::agreement;
use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};

use super::{CryptoError, Secret, random_bytes};

/// Bits of the private exponent of a MODP group.
const MODP_EXPONENT_BITS: u32 = 512;

/// A key-exchange group gate64 implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    /// 256-bit random ECP group, number 19.
    Ecp256,
    /// 384-bit random ECP group, number 20.
    Ecp384,
    /// Curve25519, number 31.
    Curve25519,
    /// 2048-bit MODP group, number 14.
    Modp2048,
    /// 3072-bit MODP group, number 15.
    Modp3072,
    /// 4096-bit MODP group, number 16.
    Modp4096,
    /// 1024-bit MODP group, number 2: only with `legacy_proposals`.
    Modp1024,
}

impl Group {
    /// Every one, in the responder's order of preference.
    pub const ALL: [Group; 7] = [
        Group::Ecp256,
        Group::Curve25519,
        Group::Ecp384,
        Group::Modp2048,
        Group::Modp3072,
        Group::Modp4096,
        Group::Modp1024,
    ];

    /// The group for a transform ID.
    pub fn from_id(id: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|g| g.id() == id)
    }

    /// The IANA transform ID.
    pub fn id(self) -> u16 {
        match self {
            Group::Modp1024 => 2,
            Group::Modp2048 => 14,
            Group::Modp3072 => 15,
            Group::Modp4096 => 16,
            Group::Ecp256 => 19,
            Group::Ecp384 => 20,
            Group::Curve25519 => 31,
        }
    }

    /// KE payload data length.
    pub fn public_len(self) -> usize {
        match self {
            Group::Ecp256 => 64,
            Group::Ecp384 => 96,
            Group::Curve25519 => 32,
            Group::Modp1024 => 128,
            Group::Modp2048 => 256,
            Group::Modp3072 => 384,
            Group::Modp4096 => 512,
        }
    }

    /// Whether only `legacy_proposals` allows it.
    pub fn is_legacy(self) -> bool {
        self == Group::Modp1024
    }

    fn curve(self) -> Option<&'static agreement::Algorithm> {
        match self {
            Group::Ecp256 => Some(&agreement::ECDH_P256),
            Group::Ecp384 => Some(&agreement::ECDH_P384),
            Group::Curve25519 => Some(&agreement::X25519),
            _ => None,
        }
    }

    fn is_sec1(self) -> bool {
        matches!(self, Group::Ecp256 | Group::Ecp384)
    }

    /// The prime's Montgomery parameters, computed once per group.
    fn modp(self) -> Option<&'static BoxedMontyParams> {
        static P1024: OnceLock<Option<BoxedMontyParams>> = OnceLock::new();
        static P2048: OnceLock<Option<BoxedMontyParams>> = OnceLock::new();
        static P3072: OnceLock<Option<BoxedMontyParams>> = OnceLock::new();
        static P4096: OnceLock<Option<BoxedMontyParams>> = OnceLock::new();
        let (cell, hex): (_, &[&str]) = match self {
            Group::Modp1024 => (&P1024, &MODP_1024),
            Group::Modp2048 => (&P2048, &MODP_2048),
            Group::Modp3072 => (&P3072, &MODP_3072),
            Group::Modp4096 => (&P4096, &MODP_4096),
            _ => return None,
        };
        cell.get_or_init(|| {
            let bytes = hex_bytes(&hex.concat())?;
            let bits = u32::try_from(bytes.len() * 8).ok()?;
            let p = BoxedUint::from_be_slice(&bytes, bits).ok()?;
            let odd = Option::<Odd<BoxedUint>>::from(Odd::new(p))?;
            Some(BoxedMontyParams::new_vartime(odd))
        })
        .as_ref()
    }
}

fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    let digits = hex.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks(2)
        .map(|pair| {
            let s = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(s, 16).ok()
        })
        .collect()
}

enum Private {
    Curve(agreement::PrivateKey),
    Modp(BoxedUint),
}

/// One side's key-exchange private value.
pub struct KeyExchange {
    group: Group,
    private: Private,
}

impl std::fmt::Debug for KeyExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyExchange({:?}, <redacted>)", self.group)
    }
}

impl KeyExchange {
    /// A fresh private value from the library's RNG.
    pub fn generate(group: Group) -> Result<Self, CryptoError> {
        let private = match group.curve() {
            Some(alg) => Private::Curve(
                agreement::PrivateKey::generate(alg).map_err(|_| CryptoError::Library)?,
            ),
            None => {
                let bytes = random_bytes(MODP_EXPONENT_BITS as usize / 8)?;
                Private::Modp(
                    BoxedUint::from_be_slice(&bytes, MODP_EXPONENT_BITS)
                        .map_err(|_| CryptoError::Library)?,
                )
            }
        };
        Ok(KeyExchange { group, private })
    }

    /// A given private value (known-answer tests): the scalar for a curve, the big-endian
    /// exponent (at most 512 bits) for a MODP group.
    pub fn from_private(group: Group, bytes: &[u8]) -> Result<Self, CryptoError> {
        let private = match group.curve() {
            Some(alg) => Private::Curve(
                agreement::PrivateKey::from_private_key(alg, bytes)
                    .map_err(|_| CryptoError::Library)?,
            ),
            None => {
                if bytes.len() * 8 > MODP_EXPONENT_BITS as usize {
                    return Err(CryptoError::Library);
                }
                let mut padded = vec![0; MODP_EXPONENT_BITS as usize / 8 - bytes.len()];
                padded.extend_from_slice(bytes);
                Private::Modp(
                    BoxedUint::from_be_slice(&padded, MODP_EXPONENT_BITS)
                        .map_err(|_| CryptoError::Library)?,
                )
            }
        };
        Ok(KeyExchange { group, private })
    }

    /// The group.
    pub fn group(&self) -> Group {
        self.group
    }

    /// The KE payload data.
    pub fn public_data(&self) -> Result<Vec<u8>, CryptoError> {
        match &self.private {
            Private::Curve(private) => {
                let public = private
                    .compute_public_key()
                    .map_err(|_| CryptoError::Library)?;
                let bytes = public.as_ref();
                Ok(if self.group.is_sec1() {
                    // RFC 5903 §7: x ‖ y without SEC1's 0x04 point-format byte.
                    bytes.get(1..).ok_or(CryptoError::Library)?.to_vec()
                } else {
                    bytes.to_vec()
                })
            }
            Private::Modp(x) => {
                let params = self.group.modp().ok_or(CryptoError::Library)?;
                let g = BoxedUint::from(2u8).widen(params.bits_precision());
                self.modp_power(g, x, params)
            }
        }
    }

    /// The shared secret g^ir from the peer's KE data.
    pub fn agree(&self, peer: &[u8]) -> Result<Secret, CryptoError> {
        if peer.len() != self.group.public_len() {
            return Err(CryptoError::PeerPublicValue);
        }
        match &self.private {
            Private::Curve(private) => {
                let sec1;
                let peer = if self.group.is_sec1() {
                    sec1 = [&[0x04][..], peer].concat();
                    &sec1[..]
                } else {
                    peer
                };
                let alg = self.group.curve().ok_or(CryptoError::Library)?;
                let unparsed = agreement::UnparsedPublicKey::new(alg, peer);
                // RFC 5903 §7: the ECP shared secret is the x coordinate, which ECDH yields.
                agreement::agree(private, unparsed, CryptoError::PeerPublicValue, |s| {
                    Ok(Secret(s.to_vec()))
                })
            }
            Private::Modp(x) => {
                let params = self.group.modp().ok_or(CryptoError::Library)?;
                let y = BoxedUint::from_be_slice(peer, params.bits_precision())
                    .map_err(|_| CryptoError::PeerPublicValue)?;
                // 1 < y < p-1: 0, 1 and p-1 (and anything not below p) would pin the shared
                // secret to a handful of values.
                let one = BoxedUint::one_with_precision(params.bits_precision());
                let p_minus_1 = params.modulus().as_ref().wrapping_sub(&one);
                if y <= one || y >= p_minus_1 {
                    return Err(CryptoError::PeerPublicValue);
                }
                self.modp_power(y, x, params).map(Secret)
            }
        }
    }

    /// base^x mod p as a big-endian number of the prime's length.
    fn modp_power(
        &self,
        base: BoxedUint,
        x: &BoxedUint,
        params: &BoxedMontyParams,
    ) -> Result<Vec<u8>, CryptoError> {
        let b = BoxedMontyForm::new(base, params.clone());
        let out = b.pow_bounded_exp(x, MODP_EXPONENT_BITS).retrieve();
        let bytes = out.to_be_bytes().to_vec();
        if bytes.len() != self.group.public_len() {
            return Err(CryptoError::Library);
        }
        Ok(bytes)
    }
}

/// The MODP-1024 prime, big-endian hex.
const MODP_1024: [&str; 4] = [
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED",
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF",
];

/// The MODP-2048 prime, big-endian hex.
const MODP_2048: [&str; 8] = [
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED",
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05",
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB",
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B",
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718",
    "3995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
];

/// The MODP-3072 prime, big-endian hex.
const MODP_3072: [&str; 12] = [
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED",
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05",
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB",
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B",
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718",
    "3995497CEA956AE515D2261898FA051015728E5A8AAAC42DAD33170D04507A33",
    "A85521ABDF1CBA64ECFB850458DBEF0A8AEA71575D060C7DB3970F85A6E1E4C7",
    "ABF5AE8CDB0933D71E8C94E04A25619DCEE3D2261AD2EE6BF12FFA06D98A0864",
    "D87602733EC86A64521F2B18177B200CBBE117577A615D6C770988C0BAD946E2",
    "08E24FA074E5AB3143DB5BFCE0FD108E4B82D120A93AD2CAFFFFFFFFFFFFFFFF",
];

/// The MODP-4096 prime, big-endian hex.
const MODP_4096: [&str; 16] = [
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED",
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05",
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB",
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B",
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718",
    "3995497CEA956AE515D2261898FA051015728E5A8AAAC42DAD33170D04507A33",
    "A85521ABDF1CBA64ECFB850458DBEF0A8AEA71575D060C7DB3970F85A6E1E4C7",
    "ABF5AE8CDB0933D71E8C94E04A25619DCEE3D2261AD2EE6BF12FFA06D98A0864",
    "D87602733EC86A64521F2B18177B200CBBE117577A615D6C770988C0BAD946E2",
    "08E24FA074E5AB3143DB5BFCE0FD108E4B82D120A92108011A723C12A787E6D7",
    "88719A10BDBA5B2699C327186AF4E23C1A946834B6150BDA2583E9CA2AD44CE8",
    "DBBBC2DB04DE8EF92E8EFC141FBECAA6287C59474E6BC05D99B2964FA090C3A2",
    "233BA186515BE7ED1F612970CEE2D7AFB81BDD762170481CD0069127D5B05AA9",
    "93B4EA988D8FDDC186FFB7DC90A6C08F4DF435C934063199FFFFFFFFFFFFFFFF",
];
