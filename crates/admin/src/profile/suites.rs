//! The algorithms each client OS can propose, and the strongest combination of them that
//! gate64's configuration accepts (`[ipsec] legacy_proposals`, `ike_proposals`,
//! `esp_proposals`), in gate64's own order of preference: AES-GCM-256, AES-GCM-128,
//! AES-CBC-256, AES-CBC-128; SHA2-256, SHA2-384, SHA2-512, SHA1; ECP-256, Curve25519,
//! ECP-384, MODP-2048, MODP-3072, MODP-4096, MODP-1024.

use gate64_config::{EspProposal, Ipsec};

/// An IKE cipher gate64 implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encr {
    /// AES-GCM with a 16-byte ICV, 256-bit key.
    Gcm256,
    /// AES-GCM with a 16-byte ICV, 128-bit key.
    Gcm128,
    /// AES-CBC, 256-bit key.
    Cbc256,
    /// AES-CBC, 128-bit key.
    Cbc128,
}

impl Encr {
    const ALL: [Encr; 4] = [Encr::Gcm256, Encr::Gcm128, Encr::Cbc256, Encr::Cbc128];

    /// (IANA transform ID, key bits).
    fn transform(self) -> (u16, u16) {
        match self {
            Encr::Gcm256 => (20, 256),
            Encr::Gcm128 => (20, 128),
            Encr::Cbc256 => (12, 256),
            Encr::Cbc128 => (12, 128),
        }
    }

    /// AES-GCM: no separate integrity algorithm.
    pub fn is_aead(self) -> bool {
        matches!(self, Encr::Gcm256 | Encr::Gcm128)
    }

    /// strongSwan's token.
    pub fn swan(self) -> &'static str {
        match self {
            Encr::Gcm256 => "aes256gcm16",
            Encr::Gcm128 => "aes128gcm16",
            Encr::Cbc256 => "aes256",
            Encr::Cbc128 => "aes128",
        }
    }
}

/// A hash as IKE integrity (HMAC, truncated as RFC 4868 says) and as PRF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    /// SHA2-256.
    Sha256,
    /// SHA2-384.
    Sha384,
    /// SHA2-512.
    Sha512,
    /// SHA1 (legacy).
    Sha1,
}

impl Hash {
    const ALL: [Hash; 4] = [Hash::Sha256, Hash::Sha384, Hash::Sha512, Hash::Sha1];

    fn integ_id(self) -> u16 {
        match self {
            Hash::Sha256 => 12,
            Hash::Sha384 => 13,
            Hash::Sha512 => 14,
            Hash::Sha1 => 2,
        }
    }

    fn prf_id(self) -> u16 {
        match self {
            Hash::Sha256 => 5,
            Hash::Sha384 => 6,
            Hash::Sha512 => 7,
            Hash::Sha1 => 2,
        }
    }

    /// strongSwan's integrity token.
    pub fn swan(self) -> &'static str {
        match self {
            Hash::Sha256 => "sha256",
            Hash::Sha384 => "sha384",
            Hash::Sha512 => "sha512",
            Hash::Sha1 => "sha1",
        }
    }
}

/// A key-exchange group gate64 implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// ECP-256 (RFC 5903), group 19.
    Ecp256,
    /// Curve25519 (RFC 8031), group 31.
    Curve25519,
    /// ECP-384, group 20.
    Ecp384,
    /// MODP-2048 (RFC 3526), group 14.
    Modp2048,
    /// MODP-3072, group 15.
    Modp3072,
    /// MODP-4096, group 16.
    Modp4096,
    /// MODP-1024 (legacy), group 2.
    Modp1024,
}

impl Group {
    const ALL: [Group; 7] = [
        Group::Ecp256,
        Group::Curve25519,
        Group::Ecp384,
        Group::Modp2048,
        Group::Modp3072,
        Group::Modp4096,
        Group::Modp1024,
    ];

    /// The IANA group number.
    pub fn id(self) -> u16 {
        match self {
            Group::Ecp256 => 19,
            Group::Curve25519 => 31,
            Group::Ecp384 => 20,
            Group::Modp2048 => 14,
            Group::Modp3072 => 15,
            Group::Modp4096 => 16,
            Group::Modp1024 => 2,
        }
    }

    /// strongSwan's token.
    pub fn swan(self) -> &'static str {
        match self {
            Group::Ecp256 => "ecp256",
            Group::Curve25519 => "curve25519",
            Group::Ecp384 => "ecp384",
            Group::Modp2048 => "modp2048",
            Group::Modp3072 => "modp3072",
            Group::Modp4096 => "modp4096",
            Group::Modp1024 => "modp1024",
        }
    }
}

/// One IKE SA combination: `integ` is `None` with AES-GCM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IkeSuite {
    /// The cipher.
    pub encr: Encr,
    /// Integrity, for AES-CBC.
    pub integ: Option<Hash>,
    /// The PRF.
    pub prf: Hash,
    /// The key-exchange group.
    pub group: Group,
}

impl IkeSuite {
    /// In strongSwan's notation, e.g. `aes256gcm16-prfsha256-ecp256`,
    /// `aes256-sha256-prfsha256-modp2048`.
    pub fn swan(&self) -> String {
        let mut s = self.encr.swan().to_string();
        if let Some(i) = self.integ {
            s.push('-');
            s.push_str(i.swan());
        }
        s.push_str("-prf");
        s.push_str(self.prf.swan());
        s.push('-');
        s.push_str(self.group.swan());
        s
    }
}

/// What one client can propose.
pub struct Os {
    /// Its name in refusals ("Windows").
    pub name: &'static str,
    /// Its IKE ciphers.
    pub encr: &'static [Encr],
    /// Its hashes (integrity and PRF).
    pub hashes: &'static [Hash],
    /// Whether it uses one hash for integrity and PRF (Windows, Apple) rather than any pair.
    pub one_hash: bool,
    /// Its groups.
    pub groups: &'static [Group],
    /// Its ESP suites.
    pub esp: &'static [EspProposal],
    /// The IKE algorithms as a sentence, for refusals.
    pub offers: &'static str,
}

const ALL_ESP: &[EspProposal] = &[
    EspProposal::Aes256Gcm16,
    EspProposal::Aes128Gcm16,
    EspProposal::Aes256Sha256,
    EspProposal::Aes128Sha256,
];

/// Windows 10/11 with a `CryptographySuite`: the values of its DHGroup (Group14, ECP256,
/// ECP384, Group2), IntegrityCheckMethod (SHA256, SHA384, SHA196) and EncryptionMethod
/// (AES_GCM_256, AES_GCM_128, AES256, AES128) that gate64 implements.
pub const WINDOWS: Os = Os {
    name: "Windows",
    encr: &Encr::ALL,
    hashes: &[Hash::Sha256, Hash::Sha384, Hash::Sha1],
    one_hash: true,
    groups: &[
        Group::Ecp256,
        Group::Ecp384,
        Group::Modp2048,
        Group::Modp1024,
    ],
    esp: ALL_ESP,
    offers: "AES-GCM or AES-CBC with SHA2-256 or SHA2-384, and ECP-256, ECP-384 or MODP-2048",
};

/// macOS and iOS (IKESecurityAssociationParameters): every gate64 cipher, hash and group.
pub const APPLE: Os = Os {
    name: "macOS/iOS",
    encr: &Encr::ALL,
    hashes: &Hash::ALL,
    one_hash: true,
    groups: &Group::ALL,
    esp: ALL_ESP,
    offers: "one hash as integrity and PRF (SHA2-256, SHA2-384, SHA2-512)",
};

/// strongSwan (its Android app, NetworkManager-strongswan): anything gate64 implements.
pub const STRONGSWAN: Os = Os {
    name: "strongSwan",
    encr: &Encr::ALL,
    hashes: &Hash::ALL,
    one_hash: false,
    groups: &Group::ALL,
    esp: ALL_ESP,
    offers: "every algorithm gate64 implements",
};

/// Android's built-in IKEv2 client (11 and later): AES-GCM and AES-CBC with SHA2, MODP-2048,
/// 3072, 4096 and Curve25519, no ECP groups, no SHA1; proposals are fixed, not configurable.
pub const ANDROID_BUILTIN: Os = Os {
    name: "Android's built-in client",
    encr: &Encr::ALL,
    hashes: &[Hash::Sha256, Hash::Sha384, Hash::Sha512],
    one_hash: false,
    groups: &[
        Group::Curve25519,
        Group::Modp2048,
        Group::Modp3072,
        Group::Modp4096,
    ],
    esp: ALL_ESP,
    offers: "SHA2 with MODP-2048/3072/4096 or Curve25519 (no ECP groups, no SHA1)",
};

/// Every IKE combination `os` can propose that `ipsec` accepts, best first.
pub fn ike_choices(ipsec: &Ipsec, os: &Os) -> Vec<IkeSuite> {
    let mut out = Vec::new();
    for encr in Encr::ALL.into_iter().filter(|e| os.encr.contains(e)) {
        for prf in Hash::ALL.into_iter().filter(|h| os.hashes.contains(h)) {
            let integs: Vec<Option<Hash>> = if encr.is_aead() {
                vec![None]
            } else if os.one_hash {
                vec![Some(prf)]
            } else {
                Hash::ALL
                    .into_iter()
                    .filter(|h| os.hashes.contains(h))
                    .map(Some)
                    .collect()
            };
            for integ in integs {
                for group in Group::ALL.into_iter().filter(|g| os.groups.contains(g)) {
                    if ipsec.ike_allows(
                        encr.transform(),
                        integ.map(Hash::integ_id),
                        prf.prf_id(),
                        group.id(),
                    ) {
                        out.push(IkeSuite {
                            encr,
                            integ,
                            prf,
                            group,
                        });
                    }
                }
            }
        }
    }
    out
}

/// The best IKE combination `os` can propose that `ipsec` accepts, or a refusal naming the
/// key and the OS.
pub fn choose_ike(ipsec: &Ipsec, os: &Os) -> Result<IkeSuite, String> {
    ike_choices(ipsec, os).first().copied().ok_or_else(|| {
        let key = if ipsec.ike_proposals.is_empty() {
            "ipsec.legacy_proposals"
        } else {
            "ipsec.ike_proposals"
        };
        format!(
            "{key} leaves {} no IKE proposal gate64 accepts: it offers {}; \
             widen {key} (now {:?})",
            os.name, os.offers, ipsec.ike_proposals
        )
    })
}

/// The first `esp_proposals` suite `os` has, or a refusal naming the key and the OS.
pub fn choose_esp(ipsec: &Ipsec, os: &Os) -> Result<EspProposal, String> {
    ipsec
        .esp_suites()
        .into_iter()
        .find(|s| os.esp.contains(s))
        .ok_or_else(|| {
            format!(
                "ipsec.esp_proposals leaves {} no ESP suite it can propose (now {:?})",
                os.name, ipsec.esp_proposals
            )
        })
}

/// An ESP suite in strongSwan's notation.
pub fn esp_swan(s: EspProposal) -> &'static str {
    match s {
        EspProposal::Aes256Gcm16 => "aes256gcm16",
        EspProposal::Aes128Gcm16 => "aes128gcm16",
        EspProposal::Aes256Sha256 => "aes256-sha256",
        EspProposal::Aes128Sha256 => "aes128-sha256",
    }
}
