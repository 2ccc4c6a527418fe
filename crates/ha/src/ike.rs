//! The record of one IKE SA: its SPIs, the seven keys of RFC 7296 §2.14, the transforms they
//! are for, the message IDs both ways, the peer and its identity, its inner addresses, the
//! SPIs of its child SAs and its age.
//!
//! ```text
//! version (1) | initiator SPI, responder SPI (u64) | PRF, integrity, encryption transform
//!   ids, encryption key bits (u16 each) | SK_d, SK_ai, SK_ar, SK_ei, SK_er, SK_pi, SK_pr
//!   (u8 length <= 64 + bytes each) | next request ID from the peer, next request ID to it
//!   (u32) | identity (u16 length <= 1,024 + UTF-8) | alt names (u8 count <= 16, each u16
//!   length <= 1,024 + UTF-8) | identity key (32) | proven IDi (u8 0/1, then u16 length <=
//!   1,024 + UTF-8) | tunnel (u8) | flags (u8: 1 intranet allowed, 2 MOBIKE, 4 RFC 7383
//!   fragments, 8 leased) | our address and port | peer address and port | inner address
//!   (u8 0/1, then address) | inner IPv4 address (u8 0/1, then 4 bytes) | child SAs (u8
//!   count <= 16, each inbound SPI, outbound SPI (u32), age (u64 ms)) | age (u64 ms) | time
//!   since authentication (u8 0/1, then u64 ms) | IKE rekeys (u32)
//! ```
//!
//! Durations are whole milliseconds, all ones for anything longer.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use gate64_esp::TunnelKind;
use zeroize::Zeroizing;

use crate::encoding::{DecodeError, Reader, Writer, tunnel_code, tunnel_of};

/// The version of the IKE SA record this build writes and reads.
pub const IKE_RECORD_VERSION: u8 = 2;
/// Most bytes of one key (SK_d and SK_p* are a PRF's output, 64 bytes for HMAC-SHA2-512).
pub const MAX_KEY_LEN: usize = 64;
/// Most bytes of the peer's identity (and of each alt name and of the proven IDi).
pub const MAX_IDENTITY_LEN: usize = 1024;
/// Most subjectAltNames a record carries.
pub const MAX_ALT_NAMES: usize = 16;
/// Most child SAs a record lists.
pub const MAX_CHILDREN: usize = 16;

/// One child SA of an IKE SA record: its SPIs and age (its keys are in its own record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildRef {
    /// The SPI the node receives on.
    pub inbound_spi: u32,
    /// The SPI the node sends with.
    pub outbound_spi: u32,
    /// Its age when the record was made.
    pub age: Duration,
}

/// The keys of an IKE SA (RFC 7296 §2.14). `SK_ai` and `SK_ar` are empty under an AEAD
/// cipher. Each is wiped on drop; `Debug` prints only their lengths.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct IkeKeys {
    /// SK_d, from which child SA keys derive.
    pub sk_d: Zeroizing<Vec<u8>>,
    /// SK_ai, integrity of the initiator's messages.
    pub sk_ai: Zeroizing<Vec<u8>>,
    /// SK_ar, integrity of the responder's messages.
    pub sk_ar: Zeroizing<Vec<u8>>,
    /// SK_ei, encryption of the initiator's messages.
    pub sk_ei: Zeroizing<Vec<u8>>,
    /// SK_er, encryption of the responder's messages.
    pub sk_er: Zeroizing<Vec<u8>>,
    /// SK_pi, for the initiator's AUTH payload.
    pub sk_pi: Zeroizing<Vec<u8>>,
    /// SK_pr, for the responder's AUTH payload.
    pub sk_pr: Zeroizing<Vec<u8>>,
}

impl IkeKeys {
    fn all(&self) -> [&Zeroizing<Vec<u8>>; 7] {
        [
            &self.sk_d,
            &self.sk_ai,
            &self.sk_ar,
            &self.sk_ei,
            &self.sk_er,
            &self.sk_pi,
            &self.sk_pr,
        ]
    }
}

impl fmt::Debug for IkeKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lens = self.all().map(|k| k.len());
        f.debug_struct("IkeKeys")
            .field("lengths", &lens)
            .finish_non_exhaustive()
    }
}

/// One IKE SA (see the module docs for its encoding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeSaRecord {
    /// The initiator's SPI.
    pub spi_i: u64,
    /// The responder's SPI.
    pub spi_r: u64,
    /// PRF transform id (RFC 7296 §3.3.2, type 2).
    pub prf: u16,
    /// Integrity transform id (type 3; 0 = none, under an AEAD cipher).
    pub integ: u16,
    /// Encryption transform id (type 1).
    pub encr: u16,
    /// The encryption key length in bits (the Key Length attribute; 0 when none).
    pub encr_key_bits: u16,
    /// The keys.
    pub keys: IkeKeys,
    /// The message ID the peer's next request carries.
    pub next_id_in: u32,
    /// The message ID gate64's next request carries.
    pub next_id_out: u32,
    /// The peer's authenticated identity (its certificate's subject).
    pub identity: String,
    /// The certificate's subjectAltNames (at most [`MAX_ALT_NAMES`]).
    pub alt_names: Vec<String>,
    /// The identity's key (a hash of issuer and subject), what leases count by.
    pub identity_key: [u8; 32],
    /// The IDi the peer proved, as text.
    pub peer_id: Option<String>,
    /// Which tunnel.
    pub tunnel: TunnelKind,
    /// It may carry intranet child SAs.
    pub intranet_allowed: bool,
    /// MOBIKE was negotiated.
    pub mobike: bool,
    /// The peer takes RFC 7383 fragments.
    pub fragmentation: bool,
    /// `inner` is a lease from the node's IPv6 pool.
    pub leased: bool,
    /// The node's address and port.
    pub local: SocketAddr,
    /// The peer's address and port.
    pub peer: SocketAddr,
    /// The peer's inner address.
    pub inner: Option<IpAddr>,
    /// The peer's inner IPv4 address (leased).
    pub inner4: Option<Ipv4Addr>,
    /// Its child SAs (at most [`MAX_CHILDREN`]).
    pub children: Vec<ChildRef>,
    /// How old the IKE SA was when the record was made.
    pub age: Duration,
    /// How long before the record its peer authenticated.
    pub authenticated_age: Option<Duration>,
    /// IKE SA rekeys so far.
    pub rekeys: u32,
}

const INTRANET_ALLOWED: u8 = 1;
const MOBIKE: u8 = 2;
const FRAGMENTATION: u8 = 4;
const LEASED: u8 = 8;

/// `s` cut to at most `max` bytes on a character boundary.
fn cut(s: &str, max: usize) -> &[u8] {
    let mut len = s.len().min(max);
    while !s.is_char_boundary(len) {
        len -= 1;
    }
    &s.as_bytes()[..len]
}

fn text(r: &mut Reader<'_>, field: &'static str) -> Result<String, DecodeError> {
    core::str::from_utf8(r.bytes16(MAX_IDENTITY_LEN, field)?)
        .map(str::to_owned)
        .map_err(|_| DecodeError::Invalid(field))
}

impl IkeSaRecord {
    /// The encoded record. It holds key material, so the buffer is wiped on drop. A key over
    /// [`MAX_KEY_LEN`] bytes, a name over [`MAX_IDENTITY_LEN`], more than [`MAX_ALT_NAMES`]
    /// names or [`MAX_CHILDREN`] child SAs are cut there (gate64 makes none of them, and
    /// decoding refuses them).
    pub fn encode(&self) -> Zeroizing<Vec<u8>> {
        let mut buf = Zeroizing::new(Vec::with_capacity(512));
        let w = &mut Writer(&mut buf);
        w.u8(IKE_RECORD_VERSION);
        w.u64(self.spi_i);
        w.u64(self.spi_r);
        w.u16(self.prf);
        w.u16(self.integ);
        w.u16(self.encr);
        w.u16(self.encr_key_bits);
        for k in self.keys.all() {
            w.bytes8(&k[..k.len().min(MAX_KEY_LEN)]);
        }
        w.u32(self.next_id_in);
        w.u32(self.next_id_out);
        w.bytes16(cut(&self.identity, MAX_IDENTITY_LEN));
        let names = &self.alt_names[..self.alt_names.len().min(MAX_ALT_NAMES)];
        w.u8(names.len() as u8);
        for n in names {
            w.bytes16(cut(n, MAX_IDENTITY_LEN));
        }
        w.0.extend_from_slice(&self.identity_key);
        match &self.peer_id {
            Some(id) => {
                w.u8(1);
                w.bytes16(cut(id, MAX_IDENTITY_LEN));
            }
            None => w.u8(0),
        }
        w.u8(tunnel_code(self.tunnel));
        let flags = [
            (self.intranet_allowed, INTRANET_ALLOWED),
            (self.mobike, MOBIKE),
            (self.fragmentation, FRAGMENTATION),
            (self.leased, LEASED),
        ];
        w.u8(flags
            .iter()
            .filter(|(on, _)| *on)
            .fold(0, |a, (_, bit)| a | bit));
        w.socket(self.local);
        w.socket(self.peer);
        self.encode_tail(w);
        buf
    }

    fn encode_tail(&self, w: &mut Writer<'_>) {
        match self.inner {
            Some(a) => {
                w.u8(1);
                w.ip(a);
            }
            None => w.u8(0),
        }
        match self.inner4 {
            Some(a) => {
                w.u8(1);
                w.0.extend_from_slice(&a.octets());
            }
            None => w.u8(0),
        }
        let children = &self.children[..self.children.len().min(MAX_CHILDREN)];
        w.u8(children.len() as u8);
        for c in children {
            w.u32(c.inbound_spi);
            w.u32(c.outbound_spi);
            w.duration(c.age);
        }
        w.duration(self.age);
        match self.authenticated_age {
            Some(d) => {
                w.u8(1);
                w.duration(d);
            }
            None => w.u8(0),
        }
        w.u32(self.rekeys);
    }

    /// The record in `bytes`, which must hold exactly one.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        r.version(IKE_RECORD_VERSION)?;
        let spi_i = r.u64()?;
        let spi_r = r.u64()?;
        let (prf, integ, encr, encr_key_bits) = (r.u16()?, r.u16()?, r.u16()?, r.u16()?);
        let mut key = || -> Result<Zeroizing<Vec<u8>>, DecodeError> {
            Ok(Zeroizing::new(r.bytes8(MAX_KEY_LEN, "key")?.to_vec()))
        };
        let keys = IkeKeys {
            sk_d: key()?,
            sk_ai: key()?,
            sk_ar: key()?,
            sk_ei: key()?,
            sk_er: key()?,
            sk_pi: key()?,
            sk_pr: key()?,
        };
        if keys.sk_d.is_empty() || keys.sk_ei.is_empty() || keys.sk_pi.is_empty() {
            return Err(DecodeError::Invalid("key"));
        }
        let next_id_in = r.u32()?;
        let next_id_out = r.u32()?;
        let identity = text(&mut r, "identity")?;
        let n = r.count(MAX_ALT_NAMES, 2, "alt_names")?;
        let mut alt_names = Vec::with_capacity(n);
        for _ in 0..n {
            alt_names.push(text(&mut r, "alt_names")?);
        }
        let identity_key = r.array::<32>()?;
        let peer_id = match r.bool("peer_id")? {
            true => Some(text(&mut r, "peer_id")?),
            false => None,
        };
        let tunnel = tunnel_of(r.u8()?)?;
        let flags = r.u8()?;
        if flags & !(INTRANET_ALLOWED | MOBIKE | FRAGMENTATION | LEASED) != 0 {
            return Err(DecodeError::Invalid("flags"));
        }
        let local = r.socket("local")?;
        let peer = r.socket("peer")?;
        let inner = match r.bool("inner")? {
            true => Some(r.ip("inner")?),
            false => None,
        };
        let inner4 = match r.bool("inner4")? {
            true => Some(Ipv4Addr::from(r.array::<4>()?)),
            false => None,
        };
        let n = r.count(MAX_CHILDREN, 16, "children")?;
        let mut children = Vec::with_capacity(n);
        for _ in 0..n {
            children.push(ChildRef {
                inbound_spi: r.u32()?,
                outbound_spi: r.u32()?,
                age: r.duration()?,
            });
        }
        let age = r.duration()?;
        let authenticated_age = match r.bool("authenticated_age")? {
            true => Some(r.duration()?),
            false => None,
        };
        let rekeys = r.u32()?;
        r.finish()?;
        Ok(IkeSaRecord {
            spi_i,
            spi_r,
            prf,
            integ,
            encr,
            encr_key_bits,
            keys,
            next_id_in,
            next_id_out,
            identity,
            alt_names,
            identity_key,
            peer_id,
            tunnel,
            intranet_allowed: flags & INTRANET_ALLOWED != 0,
            mobike: flags & MOBIKE != 0,
            fragmentation: flags & FRAGMENTATION != 0,
            leased: flags & LEASED != 0,
            local,
            peer,
            inner,
            inner4,
            children,
            age,
            authenticated_age,
            rekeys,
        })
    }
}
