//! The record of one child SA: both directions with their key material, the peer, and
//! where the counters stood, as [`gate64_esp::SaDb::export_sa`] gives them and
//! [`gate64_esp::SaDb::install_synced`] takes them.
//!
//! ```text
//! version (1) | IKE SA (u64) | tunnel (u8) | peer | inbound direction | outbound direction
//!             | outbound next sequence number (u64) | inbound highest sequence number (u64)
//! peer:      outer IPv6 (16) | native? (u8) [address, port] | UDP port? (u8) [u16]
//!            | count (u8, <= 16) of inner addresses
//! direction: SPI (u32) | algorithm (u8) | ESN (u8) | KEYMAT (u8 length + bytes)
//!            | soft bytes, hard bytes (u64) | soft, hard time, age (u64 ms; all ones:
//!            unlimited) | local selectors | remote selectors
//! selectors: count (u8, <= 16) of: start, end address | protocol (u8) | ports (2 x u16)
//! address:   4 + 4 bytes or 6 + 16 bytes
//! ```

use std::net::IpAddr;
use std::time::{Duration, Instant};

use gate64_esp::{
    ChildSaPair, Cipher, Lifetime, Peer, SaKeys, SaParams, Selector, SyncedChildSa, TunnelKind,
};
use zeroize::Zeroizing;

use crate::counters::ChildCounters;
use crate::encoding::{DecodeError, Reader, Writer, tunnel_code, tunnel_of};

/// The version of the child SA record this build writes and reads.
pub const CHILD_RECORD_VERSION: u8 = 1;
/// Most traffic selectors per side, and most inner addresses of a peer, in a record.
pub const MAX_SELECTORS: usize = 16;
/// Fewest bytes of one encoded selector (two IPv4 addresses, protocol, ports).
const MIN_SELECTOR: usize = 2 * 5 + 1 + 4;

/// One direction of a child SA. `Debug` prints no key ([`SaKeys`] redacts it); the key is
/// wiped on drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectionRecord {
    /// The SPI.
    pub spi: u32,
    /// Cipher and KEYMAT (key and salt, or AES key and HMAC key).
    pub keys: SaKeys,
    /// Extended sequence numbers.
    pub esn: bool,
    /// Byte and time limits.
    pub lifetime: Lifetime,
    /// How old the SA was when the record was made; time limits count from its creation.
    pub age: Duration,
    /// gate64's selectors.
    pub local_ts: Vec<Selector>,
    /// The peer's selectors.
    pub remote_ts: Vec<Selector>,
}

/// One child SA, both directions (see the module docs for its encoding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSaRecord {
    /// The IKE SA that negotiated it (initiator's SPI).
    pub ike_spi: u64,
    /// Which tunnel.
    pub tunnel: TunnelKind,
    /// The client: outer address, native socket, UDP encapsulation, inner addresses.
    pub peer: Peer,
    /// What gate64 receives.
    pub inbound: DirectionRecord,
    /// What gate64 sends.
    pub outbound: DirectionRecord,
    /// The sequence number the next outbound packet would have got.
    pub outbound_next_seq: u64,
    /// The replay window's high-water mark: the highest inbound sequence number received.
    pub inbound_highest_seq: u64,
}

/// The record's number of a cipher.
fn cipher_code(c: Cipher) -> u8 {
    match c {
        Cipher::AesGcm16_128 => 1,
        Cipher::AesGcm16_256 => 2,
        Cipher::AesCbc128HmacSha256 => 3,
        Cipher::AesCbc256HmacSha256 => 4,
        Cipher::NullAesGmac128 => 5,
        Cipher::NullAesGmac192 => 6,
        Cipher::NullAesGmac256 => 7,
    }
}

fn cipher_of(code: u8) -> Result<Cipher, DecodeError> {
    match code {
        1 => Ok(Cipher::AesGcm16_128),
        2 => Ok(Cipher::AesGcm16_256),
        3 => Ok(Cipher::AesCbc128HmacSha256),
        4 => Ok(Cipher::AesCbc256HmacSha256),
        5 => Ok(Cipher::NullAesGmac128),
        6 => Ok(Cipher::NullAesGmac192),
        7 => Ok(Cipher::NullAesGmac256),
        _ => Err(DecodeError::Invalid("algorithm")),
    }
}

impl DirectionRecord {
    fn from_params(p: &SaParams, now: Instant) -> Self {
        DirectionRecord {
            spi: p.spi,
            keys: p.keys.clone(),
            esn: p.esn,
            lifetime: p.lifetime,
            age: now.saturating_duration_since(p.created),
            local_ts: p.local_ts.clone(),
            remote_ts: p.remote_ts.clone(),
        }
    }

    /// The parameters, created `age` before `now` (or at `now` when the clock is too young
    /// for that).
    fn into_params(self, now: Instant) -> SaParams {
        SaParams {
            spi: self.spi,
            keys: self.keys,
            esn: self.esn,
            lifetime: self.lifetime,
            created: now.checked_sub(self.age).unwrap_or(now),
            local_ts: self.local_ts,
            remote_ts: self.remote_ts,
        }
    }

    fn encode(&self, w: &mut Writer<'_>) {
        w.u32(self.spi);
        w.u8(cipher_code(self.keys.cipher));
        w.u8(u8::from(self.esn));
        w.bytes8(&self.keys.key);
        let l = &self.lifetime;
        w.u64(l.soft_bytes);
        w.u64(l.hard_bytes);
        w.duration(l.soft_after);
        w.duration(l.hard_after);
        w.duration(self.age);
        for side in [&self.local_ts, &self.remote_ts] {
            let n = side.len().min(MAX_SELECTORS);
            w.u8(n as u8);
            for s in &side[..n] {
                w.ip(s.start);
                w.ip(s.end);
                w.u8(s.protocol);
                w.u16(*s.ports.start());
                w.u16(*s.ports.end());
            }
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let spi = r.u32()?;
        let cipher = cipher_of(r.u8()?)?;
        let esn = r.bool("esn")?;
        let key = r.bytes8(cipher.keymat_len(), "key")?;
        if key.len() != cipher.keymat_len() {
            return Err(DecodeError::Invalid("key"));
        }
        let keys = SaKeys {
            cipher,
            key: key.to_vec(),
        };
        let lifetime = Lifetime {
            soft_bytes: r.u64()?,
            hard_bytes: r.u64()?,
            soft_after: r.duration()?,
            hard_after: r.duration()?,
        };
        let age = r.duration()?;
        let local_ts = selectors(r)?;
        let remote_ts = selectors(r)?;
        Ok(DirectionRecord {
            spi,
            keys,
            esn,
            lifetime,
            age,
            local_ts,
            remote_ts,
        })
    }
}

fn selectors(r: &mut Reader<'_>) -> Result<Vec<Selector>, DecodeError> {
    let n = r.count(MAX_SELECTORS, MIN_SELECTOR, "selectors")?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = r.ip("selector")?;
        let end = r.ip("selector")?;
        if start.is_ipv4() != end.is_ipv4() {
            return Err(DecodeError::Invalid("selector"));
        }
        let protocol = r.u8()?;
        let ports = r.u16()?..=r.u16()?;
        out.push(Selector {
            start,
            end,
            protocol,
            ports,
        });
    }
    Ok(out)
}

impl ChildSaRecord {
    /// The record of `sa` (what [`gate64_esp::SaDb::export_sa`] gave) at `now`.
    pub fn from_synced(sa: &SyncedChildSa, now: Instant) -> Self {
        let p = &sa.pair;
        ChildSaRecord {
            ike_spi: p.ike_spi,
            tunnel: p.tunnel,
            peer: p.peer.clone(),
            inbound: DirectionRecord::from_params(&p.inbound, now),
            outbound: DirectionRecord::from_params(&p.outbound, now),
            outbound_next_seq: sa.outbound_next_seq,
            inbound_highest_seq: sa.inbound_highest_seq,
        }
    }

    /// What [`gate64_esp::SaDb::install_synced`] takes, the SA's age counted back from
    /// `now`.
    pub fn into_synced(self, now: Instant) -> SyncedChildSa {
        SyncedChildSa {
            pair: ChildSaPair {
                inbound: self.inbound.into_params(now),
                outbound: self.outbound.into_params(now),
                peer: self.peer,
                tunnel: self.tunnel,
                ike_spi: self.ike_spi,
            },
            outbound_next_seq: self.outbound_next_seq,
            inbound_highest_seq: self.inbound_highest_seq,
        }
    }

    /// The encoded record. It holds key material, so the buffer is wiped on drop. More than
    /// [`MAX_SELECTORS`] selectors per side or inner addresses are cut to that many (gate64
    /// narrows a client to a few).
    pub fn encode(&self) -> Zeroizing<Vec<u8>> {
        let mut buf = Zeroizing::new(Vec::with_capacity(256));
        let w = &mut Writer(&mut buf);
        w.u8(CHILD_RECORD_VERSION);
        w.u64(self.ike_spi);
        w.u8(tunnel_code(self.tunnel));
        w.0.extend_from_slice(&self.peer.outer.octets());
        match self.peer.native {
            Some(s) => {
                w.u8(1);
                w.socket(s);
            }
            None => w.u8(0),
        }
        match self.peer.udp_encap {
            Some(port) => {
                w.u8(1);
                w.u16(port);
            }
            None => w.u8(0),
        }
        let n = self.peer.inner.len().min(MAX_SELECTORS);
        w.u8(n as u8);
        for a in &self.peer.inner[..n] {
            w.ip(*a);
        }
        self.inbound.encode(w);
        self.outbound.encode(w);
        w.u64(self.outbound_next_seq);
        w.u64(self.inbound_highest_seq);
        buf
    }

    /// The record in `bytes`, which must hold exactly one.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        r.version(CHILD_RECORD_VERSION)?;
        let ike_spi = r.u64()?;
        let tunnel = tunnel_of(r.u8()?)?;
        let outer = r.ipv6()?;
        let native = if r.bool("native")? {
            Some(r.socket("native")?)
        } else {
            None
        };
        let udp_encap = if r.bool("udp_encap")? {
            Some(r.u16()?)
        } else {
            None
        };
        let n = r.count(MAX_SELECTORS, 5, "inner")?;
        let mut inner: Vec<IpAddr> = Vec::with_capacity(n);
        for _ in 0..n {
            inner.push(r.ip("inner")?);
        }
        let inbound = DirectionRecord::decode(&mut r)?;
        let outbound = DirectionRecord::decode(&mut r)?;
        let outbound_next_seq = r.u64()?;
        let inbound_highest_seq = r.u64()?;
        r.finish()?;
        Ok(ChildSaRecord {
            ike_spi,
            tunnel,
            peer: Peer {
                outer,
                native,
                udp_encap,
                inner,
            },
            inbound,
            outbound,
            outbound_next_seq,
            inbound_highest_seq,
        })
    }

    /// Whether the ESP packet `esp` (from the SPI to the end of the ICV) was sealed under
    /// this record's inbound keys, by its SPI and above its replay high-water mark: exactly
    /// one integrity check (AES-GCM/GMAC tag or HMAC), nothing installed or changed. `esp`
    /// is scratch (AES-GCM decrypts it in place). False too when the record's keys do not
    /// make an SA. What a standby asks before ESP takes its client over.
    pub fn esp_authentic(&self, esp: &mut [u8], now: Instant) -> bool {
        let params = self.inbound.clone().into_params(now);
        gate64_esp::Inbound::resume(&params, self.inbound_highest_seq)
            .is_ok_and(|sa| sa.authentic(esp))
    }

    /// Where this record's counters stand.
    pub fn counters(&self) -> ChildCounters {
        ChildCounters {
            spi: self.inbound.spi,
            outbound_next_seq: self.outbound_next_seq,
            inbound_highest_seq: self.inbound_highest_seq,
        }
    }

    /// Raises the record's counters to `c`'s where they are higher; never lowers one (an
    /// older message may arrive after a newer one). True when either moved. `c` is for
    /// this record: the caller looked it up by `c.spi`.
    pub fn apply_counters(&mut self, c: &ChildCounters) -> bool {
        let before = (self.outbound_next_seq, self.inbound_highest_seq);
        self.outbound_next_seq = self.outbound_next_seq.max(c.outbound_next_seq);
        self.inbound_highest_seq = self.inbound_highest_seq.max(c.inbound_highest_seq);
        before != (self.outbound_next_seq, self.inbound_highest_seq)
    }
}
