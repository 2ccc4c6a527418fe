//! The record of one IKE SA: its SPIs, the seven keys of RFC 7296 §2.14, the transforms they
//! are for, the message IDs both ways, the peer and its identity, and the lifetimes.
//!
//! ```text
//! version (1) | initiator SPI, responder SPI (u64) | PRF, integrity, encryption transform
//!   ids, encryption key bits (u16 each) | SK_d, SK_ai, SK_ar, SK_ei, SK_er, SK_pi, SK_pr
//!   (u8 length <= 64 + bytes each) | next request ID from the peer, next request ID to it
//!   (u32) | identity (u16 length <= 1,024 + UTF-8) | tunnel (u8) | peer address and port
//!   | rekey after, hard after, age (u64 ms; all ones: unlimited)
//! ```

use core::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use gate64_esp::TunnelKind;
use zeroize::Zeroizing;

use crate::encoding::{DecodeError, Reader, Writer, tunnel_code, tunnel_of};

/// The version of the IKE SA record this build writes and reads.
pub const IKE_RECORD_VERSION: u8 = 1;
/// Most bytes of one key (SK_d and SK_p* are a PRF's output, 64 bytes for HMAC-SHA2-512).
pub const MAX_KEY_LEN: usize = 64;
/// Most bytes of the peer's identity.
pub const MAX_IDENTITY_LEN: usize = 1024;

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
    /// The peer's authenticated identity.
    pub identity: String,
    /// Which tunnel.
    pub tunnel: TunnelKind,
    /// The peer's address and port.
    pub peer: SocketAddr,
    /// Rekey this long after creation.
    pub rekey_after: Duration,
    /// Delete this long after creation.
    pub hard_after: Duration,
    /// How old the IKE SA was when the record was made.
    pub age: Duration,
}

impl IkeSaRecord {
    /// The encoded record. It holds key material, so the buffer is wiped on drop. A key over
    /// [`MAX_KEY_LEN`] bytes or an identity over [`MAX_IDENTITY_LEN`] is cut there (no
    /// transform gate64 offers makes one, and decoding refuses it).
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
        let mut id_len = self.identity.len().min(MAX_IDENTITY_LEN);
        while !self.identity.is_char_boundary(id_len) {
            id_len -= 1;
        }
        w.bytes16(&self.identity.as_bytes()[..id_len]);
        w.u8(tunnel_code(self.tunnel));
        w.socket(self.peer);
        w.duration(self.rekey_after);
        w.duration(self.hard_after);
        w.duration(self.age);
        buf
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
        let identity = core::str::from_utf8(r.bytes16(MAX_IDENTITY_LEN, "identity")?)
            .map_err(|_| DecodeError::Invalid("identity"))?
            .to_owned();
        let tunnel = tunnel_of(r.u8()?)?;
        let peer = r.socket("peer")?;
        let rekey_after = r.duration()?;
        let hard_after = r.duration()?;
        let age = r.duration()?;
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
            tunnel,
            peer,
            rekey_after,
            hard_after,
            age,
        })
    }
}
