//! The record of one IKE SA, [`gate64_ike::responder::SyncedIkeSa`] as the responder exports
//! and installs it: its SPIs, the seven keys of RFC 7296 §2.14, the transforms they are
//! for, the message IDs both ways, the peer and its identity, its inner addresses, the SPIs
//! of its child SAs and its age. gate64-ha encodes the responder's own type, so no copy of
//! it lives here; gate64-ike knows nothing of the channel.
//!
//! ```text
//! version (1) | initiator SPI, responder SPI (u64) | PRF, integrity, encryption transform
//!   ids, encryption key bits (u16 each) | SK_d, SK_ai, SK_ar, SK_ei, SK_er, SK_pi, SK_pr
//!   (u8 length <= 64 + bytes each) | next request ID from the peer, next request ID to it
//!   (u32) | identity (u16 length <= 1,024 + UTF-8) | alt names (u8 count <= 16, each u16
//!   length <= 1,024 + UTF-8) | identity key (32) | proven IDi (u8 0/1, then u16 length <=
//!   1,024 + UTF-8) | tunnel (u8) | flags (u8: 1 intranet allowed, 2 MOBIKE, 4 RFC 7383
//!   fragments, 8 leased, 16 RFC 6311 Message ID sync) | our address and port | peer address and port | inner address
//!   (u8 0/1, then address) | inner IPv4 address (u8 0/1, then 4 bytes) | child SAs (u8
//!   count <= 16, each inbound SPI, outbound SPI (u32), age (u64 ms)) | age (u64 ms) | time
//!   since authentication (u8 0/1, then u64 ms) | IKE rekeys (u32)
//! ```
//!
//! Durations are whole milliseconds, all ones for anything longer.
//!
//! The RFC 6311 flag (16) takes a bit the layout left free rather than a new version: a
//! record without it is byte for byte what a build without it writes and reads, so a node
//! of an older release still takes the IKE SAs of clients that did not announce support,
//! and refuses (as `undecodable`) only those that did.

use std::net::Ipv4Addr;

use gate64_ike::keys::Secret;
use gate64_ike::responder::{SyncedChildRef, SyncedIkeKeys, SyncedIkeSa};
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

const INTRANET_ALLOWED: u8 = 1;
const MOBIKE: u8 = 2;
const FRAGMENTATION: u8 = 4;
const LEASED: u8 = 8;
const MID_SYNC: u8 = 16;

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

fn all_keys(k: &SyncedIkeKeys) -> [&Secret; 7] {
    [
        &k.sk_d, &k.sk_ai, &k.sk_ar, &k.sk_ei, &k.sk_er, &k.sk_pi, &k.sk_pr,
    ]
}

/// The encoded record of `sa`. It holds key material, so the buffer is wiped on drop. A key
/// over [`MAX_KEY_LEN`] bytes, a name over [`MAX_IDENTITY_LEN`], more than
/// [`MAX_ALT_NAMES`] names or [`MAX_CHILDREN`] child SAs are cut there (gate64 makes none of
/// them, and decoding refuses them).
pub fn encode_ike_sa(sa: &SyncedIkeSa) -> Zeroizing<Vec<u8>> {
    let mut buf = Zeroizing::new(Vec::with_capacity(512));
    let w = &mut Writer(&mut buf);
    w.u8(IKE_RECORD_VERSION);
    w.u64(sa.spi_i);
    w.u64(sa.spi_r);
    w.u16(sa.prf);
    w.u16(sa.integ);
    w.u16(sa.encr);
    w.u16(sa.encr_key_bits);
    for k in all_keys(&sa.keys) {
        w.bytes8(&k.0[..k.0.len().min(MAX_KEY_LEN)]);
    }
    w.u32(sa.next_id_in);
    w.u32(sa.next_id_out);
    w.bytes16(cut(&sa.identity, MAX_IDENTITY_LEN));
    let names = &sa.alt_names[..sa.alt_names.len().min(MAX_ALT_NAMES)];
    w.u8(names.len() as u8);
    for n in names {
        w.bytes16(cut(n, MAX_IDENTITY_LEN));
    }
    w.0.extend_from_slice(&sa.identity_key);
    match &sa.peer_id {
        Some(id) => {
            w.u8(1);
            w.bytes16(cut(id, MAX_IDENTITY_LEN));
        }
        None => w.u8(0),
    }
    w.u8(tunnel_code(sa.tunnel));
    let flags = [
        (sa.intranet_allowed, INTRANET_ALLOWED),
        (sa.mobike, MOBIKE),
        (sa.fragmentation, FRAGMENTATION),
        (sa.leased, LEASED),
        (sa.mid_sync, MID_SYNC),
    ];
    w.u8(flags
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |a, (_, bit)| a | bit));
    w.socket(sa.local);
    w.socket(sa.remote);
    encode_tail(sa, w);
    buf
}

fn encode_tail(sa: &SyncedIkeSa, w: &mut Writer<'_>) {
    match sa.inner {
        Some(a) => {
            w.u8(1);
            w.ip(a);
        }
        None => w.u8(0),
    }
    match sa.inner4 {
        Some(a) => {
            w.u8(1);
            w.0.extend_from_slice(&a.octets());
        }
        None => w.u8(0),
    }
    let children = &sa.children[..sa.children.len().min(MAX_CHILDREN)];
    w.u8(children.len() as u8);
    for c in children {
        w.u32(c.inbound_spi);
        w.u32(c.outbound_spi);
        w.duration(c.age);
    }
    w.duration(sa.age);
    match sa.authenticated_age {
        Some(d) => {
            w.u8(1);
            w.duration(d);
        }
        None => w.u8(0),
    }
    w.u32(sa.rekeys);
}

/// The IKE SA in `bytes`, which must hold exactly one record.
pub fn decode_ike_sa(bytes: &[u8]) -> Result<SyncedIkeSa, DecodeError> {
    let mut r = Reader::new(bytes);
    r.version(IKE_RECORD_VERSION)?;
    let spi_i = r.u64()?;
    let spi_r = r.u64()?;
    let (prf, integ, encr, encr_key_bits) = (r.u16()?, r.u16()?, r.u16()?, r.u16()?);
    let mut key =
        || -> Result<Secret, DecodeError> { Ok(Secret(r.bytes8(MAX_KEY_LEN, "key")?.to_vec())) };
    let keys = SyncedIkeKeys {
        sk_d: key()?,
        sk_ai: key()?,
        sk_ar: key()?,
        sk_ei: key()?,
        sk_er: key()?,
        sk_pi: key()?,
        sk_pr: key()?,
    };
    if keys.sk_d.0.is_empty() || keys.sk_ei.0.is_empty() || keys.sk_pi.0.is_empty() {
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
    if flags & !(INTRANET_ALLOWED | MOBIKE | FRAGMENTATION | LEASED | MID_SYNC) != 0 {
        return Err(DecodeError::Invalid("flags"));
    }
    let local = r.socket("local")?;
    let remote = r.socket("peer")?;
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
        children.push(SyncedChildRef {
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
    Ok(SyncedIkeSa {
        spi_i,
        spi_r,
        prf,
        integ,
        encr,
        encr_key_bits,
        keys,
        next_id_in,
        next_id_out,
        local,
        remote,
        identity,
        alt_names,
        identity_key,
        peer_id,
        tunnel,
        intranet_allowed: flags & INTRANET_ALLOWED != 0,
        mobike: flags & MOBIKE != 0,
        fragmentation: flags & FRAGMENTATION != 0,
        inner,
        leased: flags & LEASED != 0,
        inner4,
        children,
        age,
        authenticated_age,
        rekeys,
        mid_sync: flags & MID_SYNC != 0,
    })
}
