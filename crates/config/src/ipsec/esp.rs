//! `ipsec.esp_proposals`: the ESP suites child SAs may use, in strongSwan's notation, in
//! gate64's order of preference.

use super::*;

/// One ESP suite `ipsec.esp_proposals` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EspProposal {
    /// `aes256gcm16`: AES-256-GCM with a 16-byte ICV (RFC 4106).
    Aes256Gcm16,
    /// `aes128gcm16`: AES-128-GCM with a 16-byte ICV.
    Aes128Gcm16,
    /// `aes256-sha256`: AES-256-CBC (RFC 3602) with HMAC-SHA2-256-128 (RFC 4868), what macOS,
    /// iOS and Windows propose by default.
    Aes256Sha256,
    /// `aes128-sha256`: AES-128-CBC with HMAC-SHA2-256-128.
    Aes128Sha256,
}

/// The default: every suite, AES-GCM first.
pub(crate) const DEFAULT_ESP_PROPOSALS: [&str; 4] = [
    "aes256gcm16",
    "aes128gcm16",
    "aes256-sha256",
    "aes128-sha256",
];

impl EspProposal {
    /// The suite a strongSwan proposal token names (case-insensitive): `aes256gcm16` (also
    /// `aes256gcm`, `aes256gcm128`, as strongSwan spells the 128-bit ICV), `aes128gcm16`,
    /// `aes256-sha256` (also `aes256-sha2_256`), `aes128-sha256`; `None` for anything else.
    pub fn parse(token: &str) -> Option<EspProposal> {
        Some(match token.trim().to_ascii_lowercase().as_str() {
            "aes256gcm16" | "aes256gcm" | "aes256gcm128" => EspProposal::Aes256Gcm16,
            "aes128gcm16" | "aes128gcm" | "aes128gcm128" => EspProposal::Aes128Gcm16,
            "aes256-sha256" | "aes256-sha2_256" => EspProposal::Aes256Sha256,
            "aes128-sha256" | "aes128-sha2_256" => EspProposal::Aes128Sha256,
            _ => return None,
        })
    }
}

impl Ipsec {
    /// The suites of `esp_proposals`, in order, each once. Tokens that name no suite are
    /// left out (validation has refused them).
    pub fn esp_suites(&self) -> Vec<EspProposal> {
        let mut out = Vec::new();
        for s in self
            .esp_proposals
            .iter()
            .filter_map(|t| EspProposal::parse(t))
        {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }
}

impl Config {
    /// Refuses an empty `esp_proposals` or a token naming no suite gate64 has, naming the
    /// key and the token.
    pub(crate) fn validate_esp_proposals(&self) -> Result<(), ConfigError> {
        const KEY: &str = "ipsec.esp_proposals";
        if self.ipsec.esp_proposals.is_empty() {
            return Err(invalid(
                KEY,
                "[]",
                format!(
                    "must name at least one ESP suite, e.g. {}",
                    DEFAULT_ESP_PROPOSALS.map(quote).join(", ")
                ),
            ));
        }
        for token in &self.ipsec.esp_proposals {
            if EspProposal::parse(token).is_some() {
                continue;
            }
            let lower = token.to_ascii_lowercase();
            let why = if lower.contains("sha1") || lower.ends_with("-sha") {
                "ESP with SHA1 integrity is not offered"
            } else {
                "is no ESP suite gate64 has"
            };
            return Err(invalid(
                KEY,
                quote(token),
                format!(
                    "{why}; the suites are \"aes256gcm16\", \"aes128gcm16\" (AES-GCM, also \
                     written \"aes256gcm\", \"aes128gcm\"), \"aes256-sha256\" and \
                     \"aes128-sha256\" (AES-CBC with HMAC-SHA2-256-128), one per entry"
                ),
            ));
        }
        Ok(())
    }
}
