//! The child SA types handed to the ESP layer. They mirror `gate64_esp`'s (ipsec-design.md)
//! until that crate merges; then this module re-exports them.

use std::net::{IpAddr, Ipv6Addr};
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

/// Which of a client's two tunnels a child SA belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelKind {
    /// Reaches only `[ipsec] infrastructure_prefixes`.
    Infrastructure,
    /// Reaches `[ipsec] intranet_prefixes`.
    Intranet,
}

/// A traffic selector as ESP checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// First address.
    pub start: IpAddr,
    /// Last address.
    pub end: IpAddr,
    /// IP protocol, 0 for any.
    pub protocol: u8,
    /// Port range.
    pub ports: RangeInclusive<u16>,
}

/// The ESP cipher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// AES-128-GCM-16: 20 bytes of KEYMAT.
    AesGcm16_128,
    /// AES-256-GCM-16: 36 bytes of KEYMAT.
    AesGcm16_256,
}

/// One direction's keys: key ‖ 4-byte salt.
#[derive(Clone, PartialEq, Eq)]
pub struct SaKeys {
    /// The cipher.
    pub cipher: Cipher,
    /// Key ‖ salt.
    pub key: Vec<u8>,
}

impl std::fmt::Debug for SaKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SaKeys({:?}, <redacted>)", self.cipher)
    }
}

/// Byte and time limits.
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

/// One direction of a child SA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaParams {
    /// The receiver's SPI.
    pub spi: u32,
    /// Cipher and KEYMAT.
    pub keys: SaKeys,
    /// Extended sequence numbers.
    pub esn: bool,
    /// Limits.
    pub lifetime: Lifetime,
    /// When IKE established it.
    pub created: Instant,
    /// gate64's side of the selectors.
    pub local_ts: Vec<Selector>,
    /// The peer's side of the selectors.
    pub remote_ts: Vec<Selector>,
}

/// Where the peer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The client's outer IPv6 address.
    pub outer: Ipv6Addr,
    /// The client's UDP port when ESP is UDP-encapsulated.
    pub udp_encap: Option<u16>,
    /// The client's inner addresses.
    pub inner: Vec<IpAddr>,
}

/// Both directions of one child SA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSaPair {
    /// What gate64 receives (gate64's SPI).
    pub inbound: SaParams,
    /// What gate64 sends (the client's SPI).
    pub outbound: SaParams,
    /// The client.
    pub peer: Peer,
    /// Which tunnel.
    pub tunnel: TunnelKind,
    /// The initiator's IKE SPI.
    pub ike_spi: u64,
}
