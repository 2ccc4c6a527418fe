//! The status snapshot: the daemon's IPsec clients and their SAs, as `gate64 status` shows
//! them (its `--json` is this document as the daemon sent it).

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Everything `gate64 status` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// gate64's IKE/ESP address; `None` while IPsec is not configured.
    pub endpoint: Option<Ipv6Addr>,
    /// `[ipsec] require`.
    pub require_ipsec: bool,
    /// IKE SAs established (the driver's count).
    pub ike_sas: u64,
    /// Child SAs installed.
    pub child_sas: u64,
    /// Clients with at least one child SA, by outer address.
    pub clients: Vec<Client>,
}

/// One client and its SAs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Client {
    /// `teredo`, `iphttps`, `native` (IKEv2 straight to an `[ipsec] listen` address) or
    /// `other`: the transport the client reaches gate64 by.
    pub transport: String,
    /// Its outer IPv6 address (Teredo address or an address of its IP-HTTPS /64).
    pub outer: Ipv6Addr,
    /// A native client's UDP port (its NAT mapping: machines behind one NAT share `outer`
    /// and are told apart by it); `null` for Teredo and IP-HTTPS clients, whose outer
    /// address is their own.
    #[serde(default)]
    pub port: Option<u16>,
    /// Its inner addresses (from `ipsec.pool6`, or the outer one; and from `ipsec.pool4`
    /// when its first child SA carries IPv4).
    pub inner: Vec<IpAddr>,
    /// Its inner IPv4 address (from `ipsec.pool4`), `null` when it holds none.
    #[serde(default)]
    pub address4: Option<Ipv4Addr>,
    /// Its child SAs, infrastructure first, oldest first.
    pub sas: Vec<ChildSa>,
}

/// One child SA, both directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildSa {
    /// `infrastructure` or `intranet`.
    pub tunnel: String,
    /// The IKE SA that negotiated it (initiator's SPI), as a JSON number. Deprecated: most
    /// JSON readers hold numbers as doubles, exact only up to 2^53, and an SPI is a random
    /// 64-bit value; read `ike_spi_hex`. Still written, for the readers of the previous
    /// release.
    pub ike_spi: u64,
    /// The same SPI as a string: `0x` and 16 hexadecimal digits ([`crate::spi_hex`]), the spelling
    /// `gate64 disconnect --ike-spi` takes and `gate64 status` prints.
    #[serde(default)]
    pub ike_spi_hex: String,
    /// The SPI gate64 receives on.
    pub spi_in: u32,
    /// The SPI gate64 sends with.
    pub spi_out: u32,
    /// The client's UDP port when ESP is UDP-encapsulated (RFC 3948), else next header 50.
    pub udp_encap: Option<u16>,
    /// gate64's traffic selectors.
    pub local_ts: Vec<String>,
    /// The client's traffic selectors.
    pub remote_ts: Vec<String>,
    /// Seconds since IKE installed it.
    pub age_secs: u64,
    /// The client's authenticated identity (its certificate subject), from the IKE SA: the
    /// machine certificate's when the client ran a second round.
    pub identity: Option<String>,
    /// The identity of the IKE SA's RFC 4739 second authentication round (the user
    /// certificate's subject), when the client ran one.
    #[serde(default)]
    pub user_identity: Option<String>,
    /// The issuer of the (machine) certificate the IKE SA was authenticated with.
    #[serde(default)]
    pub issuer: Option<String>,
    /// That certificate's serial number in hex, as `openssl x509 -serial` prints it: what a
    /// CRL names it by.
    #[serde(default)]
    pub serial: Option<String>,
    /// That certificate's notAfter, RFC 3339 in UTC.
    #[serde(default)]
    pub not_after: Option<String>,
    /// How often the IKE SA and its child SAs were rekeyed.
    pub rekeys: Option<u32>,
    /// Inner bytes opened.
    pub bytes_in: u64,
    /// Packets opened.
    pub packets_in: u64,
    /// Inner bytes sealed.
    pub bytes_out: u64,
    /// Packets sealed.
    pub packets_out: u64,
    /// How the IKE SA's client authenticated: `certificate` or `eap`; `null` from a daemon
    /// of an earlier release.
    #[serde(default)]
    pub auth_method: Option<String>,
    /// The RADIUS User-Name the IKE SA was authenticated (EAP) or authorized
    /// (`ipsec.authorize_certificates = "radius"`) under.
    #[serde(default)]
    pub radius_user: Option<String>,
    /// The Filter-Id of its Access-Accept: the name of the `[[policy]]` for its traffic.
    #[serde(default)]
    pub filter_id: Option<String>,
    /// The `[[policy]]` its traffic is under now: the one its Access-Accept's Filter-Id
    /// named, or the one a later CoA-Request's Filter-Id put on it; `null` while none applies
    /// (and from a daemon of an earlier release).
    #[serde(default)]
    pub policy: Option<String>,
    /// The rate limit that policy puts on its traffic, as text: `5 Mbit/s each way` (the
    /// policy's `rate_mbps`; the client's traffic and the traffic sealed to it are limited
    /// separately); `null` while none applies.
    #[serde(default)]
    pub limit: Option<String>,
    /// The ESP suite in strongSwan's notation, as `ipsec.esp_proposals` names it:
    /// `aes256gcm16`, `aes128gcm16`, `aes256-sha256` or `aes128-sha256`. Empty from a daemon
    /// of an earlier release.
    #[serde(default)]
    pub esp: String,
}
