//! ESP tunnel mode with AES-GCM, AES-CBC + HMAC-SHA2-256 or AES-GMAC (integrity only) for gate64: sealing and opening in place, anti-replay,
//! extended sequence numbers, lifetimes, traffic selectors and the SA database. Sans-IO:
//! no sockets, no clock (time is passed in), no RNG (the caller's).
//!
//! Covered: RFC 4303 (ESP: §2 packet format, §2.2.1 ESN, §2.4 padding, §3.3.3 sequence
//! numbers, §3.4.3 anti-replay, Appendix A ESN reconstruction), RFC 4106 (AES-GCM in ESP:
//! §3 IV, §4 nonce, §5 AAD, §8.1 key material), RFC 3602 (AES-CBC in ESP) with RFC 4868
//! (HMAC-SHA2-256-128), RFC 4543 (AES-GMAC, ENCR_NULL_AUTH_AES_GMAC: integrity only), RFC 4301 §4.4.1 / RFC 7296 §3.13.1 (traffic
//! selectors, checked by address). UDP encapsulation (RFC 3948) adds only the outer UDP
//! header in front of the same bytes: that is the caller's, as is the outer IP header;
//! [`udp_encap`] tells IKE, NAT-keepalives and ESP apart on the UDP ports.
//!
//! ```text
//! offset from `at`:
//! 0        4             8               16               16+n                     end-16    end
//! +--------+-------------+---------------+----------------+---------+-----+-----+---------+
//! | SPI    | seq, low 32 | IV = seq, 64  | inner IPv4/IPv6 | pad 0-3 | pad | next| ICV     |
//! |        | bits        | bits          | packet (n)      | 1,2,3   | len | hdr | 16      |
//! +--------+-------------+---------------+----------------+---------+-----+-----+---------+
//! |<---- SPI_SEQ_IV_LEN = 16 ----------->|<------------ encrypted ------------->|
//! |<-- AAD -->|  = SPI || seq low, or SPI || seq high || seq low with ESN (12 bytes)
//!                                                         |<- at most MAX_TRAILER = 21 ->|
//! nonce = salt || IV   (salt = the last 4 bytes of the KEYMAT slice, RFC 4106 §4)
//! next header: 4 = IPv4, 41 = IPv6, 59 = dummy
//!
//! AES-CBC + HMAC-SHA2-256-128 (RFC 3602, RFC 4868):
//! 0        4             8               24              24+n            end-16    end
//! +--------+-------------+---------------+----------------+--------------+---------+
//! | SPI    | seq, low 32 | IV, 16 bytes  | inner packet   | pad 0-15,    | ICV     |
//! |        | bits        |               | (n)            | len, next hdr| 16      |
//! +--------+-------------+---------------+----------------+--------------+---------+
//!                                        |<---- encrypted, whole blocks ->|
//! |<------------- ICV = HMAC-SHA2-256(SPI .. ciphertext [|| seq high with ESN]), 128 bits
//! IV = AES_K(seq || 0^64): unique per packet, unpredictable without the key
//!
//! AES-GMAC (RFC 4543): the AES-GCM layout, but nothing is encrypted
//! |<------------- AAD = SPI .. Next Header (with ESN: SPI || seq high || seq low || ..) ->| ICV
//! ICV = the AES-GCM tag of an empty plaintext under that AAD; nonce = salt || IV as above
//! ```
//!
//! Design choices:
//! - **In place, no allocation per packet.** [`Outbound::seal`] takes the caller's buffer with
//!   the inner packet at `at + SPI_SEQ_IV_LEN` and room for [`MAX_TRAILER`] after it, writes
//!   the header in front and the trailer behind, encrypts in place and appends the ICV;
//!   [`Inbound::open`] decrypts in place and returns where the inner packet lies. Outer
//!   headers go into the headroom before `at`, so nothing is copied.
//! - **All cryptography is aws-lc-rs** (`aead::LessSafeKey`, AES_128_GCM / AES_256_GCM;
//!   `cipher::EncryptingKey::cbc` / `DecryptingKey::cbc` and `hmac` with HMAC_SHA256); keys
//!   are expanded once per SA. Where the inner packet starts depends on the cipher:
//!   [`Outbound::header_len`] / [`Cipher::header_len`] ([`SPI_SEQ_IV_LEN`] for AES-GCM, 24
//!   for AES-CBC); [`LARGEST_HEADER`] and [`LARGEST_TRAILER`] bound every cipher.
//! - **AES-GMAC**: the packet is its own AAD, so without ESN nothing is copied; with ESN the
//!   high half of the sequence number (never sent) must sit after the SPI, so the AAD is put
//!   together in a per-thread buffer (one copy, no allocation once it has grown). gate64
//!   allows it only where another layer already encrypts (IP-HTTPS's TLS).
//! - **AES-CBC**: the ICV is verified in constant time before anything is decrypted, and
//!   before the replay window is marked. The IV is the AES encryption of the sequence
//!   number under the SA's key (NIST SP 800-38A Appendix C), so no RNG runs per packet.
//! - **IV = the 64-bit sequence number.** It is unique per packet under one key (RFC 4106
//!   §3.1 requires exactly that) and needs no RNG on the data path; it also reveals nothing
//!   the sequence number field does not. One `AtomicU64` hands out numbers, so several
//!   cores seal under one SA. Without ESN the SA expires after 2^32 - 1 (RFC 4303 §3.3.3:
//!   the counter must not cycle).
//! - **Anti-replay**: a 1,024-packet window ([`REPLAY_WINDOW`]) in a ring of words (RFC
//!   6479 style), behind a small mutex per SA (never a global lock). It is checked before
//!   decryption and marked only after the ICV verifies (RFC 4303 §3.4.3); the mark re-checks,
//!   so two cores racing on one sequence number deliver it once. With ESN the high half is
//!   reconstructed from the window (RFC 4303 Appendix A2) and authenticated through the AAD.
//! - **Lifetimes**: bytes are counted per SA in atomics on the data path; soft limits report
//!   [`SaState::Rekey`], hard ones [`SaState::Expired`]. The data path has no clock, so a
//!   time-based hard limit takes effect once `state(now)` has seen it (IKE's timer polls it);
//!   byte and sequence limits take effect at once.
//! - **Selectors**: [`Inbound::admits`] checks a decrypted packet's addresses
//!   ([`inner_addrs`]) against the SA's selectors (RFC 4301 §5.2). Protocol and ports are
//!   carried but not enforced: gate64's tunnels select by address.
//! - **[`SaDb`]**: sharded maps (dashmap): inbound by SPI, outbound by inner destination,
//!   newest live SA first so rekeyed SAs take over while the old one drains.
//! - **Session policies**: [`SaDb::apply_policy`] puts a [`SessionPolicy`] (reach and a
//!   lock-free [`RateLimit`] per direction) on every child SA of an IKE SA, now and at its
//!   later installs; the caller's data path checks it after the selectors.
//! - **Takeover**: [`SaDb::export_sa`] hands out one child SA with its key material and
//!   counters ([`SyncedChildSa`]); [`SaDb::install_synced`] installs it on another node with
//!   the outbound counter moved [`TAKEOVER_SEQ_MARGIN`] ahead and the replay window closed up
//!   to the highest sequence number received. Each SA keeps its KEYMAT (wiped on drop) for
//!   that.
//!   On the standby, [`SaDb::awaiting`] holds the inbound SPIs of the synced child SAs
//!   that wait for a takeover and hands ESP for one of them (copied, bounded) to the HA sync
//!   task, which checks it with [`Inbound::authentic`] (one ICV check, nothing changed) before
//!   taking that client over.
//!
//! Contract: nothing here panics on packet bytes; `open` accepts any bytes. Errors map to
//! drop reasons: [`OpenError::Auth`] -> `esp_auth`, [`OpenError::Replay`] -> `esp_replay`,
//! an SPI [`SaDb::inbound`] does not know (or [`spi_of`] `None` on a non-ESP packet) ->
//! `esp_unknown_spi`, [`Inbound::admits`] false -> `esp_selector`, [`OpenError::Expired`] ->
//! `no_sa`, [`OpenError::Truncated`] / [`OpenError::Malformed`] -> the existing truncated /
//! malformed reasons. Under `cfg(fuzzing)` the AEAD and AES-CBC + HMAC are null ciphers
//! (payload in clear, ICV unchecked) so fuzzers reach the code behind them.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod awaiting;
mod policy;
mod replay;
mod sa;
mod sadb;
mod selector;
pub mod udp_encap;

pub use awaiting::{AwaitingTakeover, AwaitingView, EspCandidate, MAX_ESP_CANDIDATE};
pub use policy::{RateLimit, SessionPolicy};
pub use replay::REPLAY_WINDOW;
pub use sa::{
    Cipher, HMAC_SHA256_KEY_LEN, Inbound, KeyError, Lifetime, OpenError, Opened, Outbound,
    SALT_LEN, SaKeys, SaParams, SaState, SealError, esp_len,
};
pub use sadb::{
    ChildSaPair, InboundEntry, InstallError, MIN_SPI, OutboundEntry, Peer, SaDb, SyncedChildSa,
    TAKEOVER_SEQ_MARGIN, TunnelKind,
};
pub use selector::{
    NEXT_HEADER_DUMMY, NEXT_HEADER_IPV4, NEXT_HEADER_IPV6, Selector, any_covers, inner_addrs,
};

/// Bytes in front of the inner packet of an AES-GCM SA: SPI (4), sequence number (4), IV (8).
/// [`Cipher::header_len`] for any cipher.
pub const SPI_SEQ_IV_LEN: usize = 16;
/// Bytes of the ICV: AES-GCM's (the "16" of ENCR_AES_GCM_16, RFC 4106 §6) and
/// HMAC-SHA2-256-128's (RFC 4868 §2.3).
pub const ICV_LEN: usize = 16;
/// Most bytes after the inner packet of an AES-GCM SA: padding 0..3, Pad Length, Next
/// Header, ICV. [`Cipher::max_trailer`] for any cipher.
pub const MAX_TRAILER: usize = 3 + 2 + ICV_LEN;
/// Most bytes in front of the inner packet under any cipher (AES-CBC: 8 + a 16-byte IV).
pub const LARGEST_HEADER: usize = Cipher::AesCbc256HmacSha256.header_len();
/// Most bytes after the inner packet under any cipher (AES-CBC: padding 0..15, Pad Length,
/// Next Header, ICV).
pub const LARGEST_TRAILER: usize = Cipher::AesCbc256HmacSha256.max_trailer();

/// The SPI of an ESP packet: its first 4 bytes. `None` when shorter, or for 0, which is not
/// an SPI but the non-ESP marker of IKE on port 4500 (RFC 3948 §2.2).
pub fn spi_of(esp: &[u8]) -> Option<u32> {
    let spi = u32::from_be_bytes(esp.get(..4)?.try_into().ok()?);
    (spi != 0).then_some(spi)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cbc;
#[cfg(test)]
mod tests_gmac;
#[cfg(test)]
mod tests_takeover;
