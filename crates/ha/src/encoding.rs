//! The byte-level pieces of the records' encoding: big-endian integers, length-prefixed
//! byte strings and addresses, written into a buffer and read back with every length
//! checked against what is left.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// Why a record did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes end inside a field.
    #[error("record truncated")]
    Truncated,
    /// A record version this build does not read.
    #[error("record version {0} is not supported")]
    Version(u8),
    /// A field holds a value it may not (named).
    #[error("record field {0} is invalid")]
    Invalid(&'static str),
    /// Bytes left after the record.
    #[error("bytes after the record")]
    Trailing,
}

/// Appends the encoding's fields to a buffer.
pub(crate) struct Writer<'a>(pub(crate) &'a mut Vec<u8>);

impl Writer<'_> {
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(crate) fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    /// Whole milliseconds, `u64::MAX` for anything longer (the unlimited lifetime).
    pub(crate) fn duration(&mut self, d: Duration) {
        self.u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    }
    /// A byte string of at most 255 bytes behind its length; the caller keeps to the limit.
    pub(crate) fn bytes8(&mut self, b: &[u8]) {
        let len = b.len().min(usize::from(u8::MAX));
        self.u8(len as u8);
        self.0.extend_from_slice(&b[..len]);
    }
    /// A byte string of at most 65,535 bytes behind its length; the caller keeps to the
    /// limit.
    pub(crate) fn bytes16(&mut self, b: &[u8]) {
        let len = b.len().min(usize::from(u16::MAX));
        self.u16(len as u16);
        self.0.extend_from_slice(&b[..len]);
    }
    /// 4 and 4 bytes, or 6 and 16.
    pub(crate) fn ip(&mut self, a: IpAddr) {
        match a {
            IpAddr::V4(a) => {
                self.u8(4);
                self.0.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                self.u8(6);
                self.0.extend_from_slice(&a.octets());
            }
        }
    }
    pub(crate) fn socket(&mut self, s: SocketAddr) {
        self.ip(s.ip());
        self.u16(s.port());
    }
}

/// Reads the encoding's fields from a byte slice; never reads past it, never panics.
pub(crate) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader(bytes)
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.0.len() {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Invalid(field)),
        }
    }
    pub(crate) fn duration(&mut self) -> Result<Duration, DecodeError> {
        Ok(match self.u64()? {
            u64::MAX => Duration::MAX,
            ms => Duration::from_millis(ms),
        })
    }
    /// A byte string of at most `max` bytes behind a one-byte length.
    pub(crate) fn bytes8(
        &mut self,
        max: usize,
        field: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        let len = usize::from(self.u8()?);
        if len > max {
            return Err(DecodeError::Invalid(field));
        }
        self.take(len)
    }
    /// A byte string of at most `max` bytes behind a two-byte length.
    pub(crate) fn bytes16(
        &mut self,
        max: usize,
        field: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        let len = usize::from(self.u16()?);
        if len > max {
            return Err(DecodeError::Invalid(field));
        }
        self.take(len)
    }
    /// A count of at most `max` items, each at least `min_item` bytes: refused before
    /// anything is allocated for them when the bytes left cannot hold that many.
    pub(crate) fn count(
        &mut self,
        max: usize,
        min_item: usize,
        field: &'static str,
    ) -> Result<usize, DecodeError> {
        let n = usize::from(self.u8()?);
        if n > max {
            return Err(DecodeError::Invalid(field));
        }
        if n * min_item > self.0.len() {
            return Err(DecodeError::Truncated);
        }
        Ok(n)
    }
    pub(crate) fn ip(&mut self, field: &'static str) -> Result<IpAddr, DecodeError> {
        match self.u8()? {
            4 => Ok(IpAddr::V4(Ipv4Addr::from(self.array::<4>()?))),
            6 => Ok(IpAddr::V6(Ipv6Addr::from(self.array::<16>()?))),
            _ => Err(DecodeError::Invalid(field)),
        }
    }
    pub(crate) fn ipv6(&mut self) -> Result<Ipv6Addr, DecodeError> {
        Ok(Ipv6Addr::from(self.array::<16>()?))
    }
    pub(crate) fn socket(&mut self, field: &'static str) -> Result<SocketAddr, DecodeError> {
        let ip = self.ip(field)?;
        Ok(SocketAddr::new(ip, self.u16()?))
    }
    /// The version byte, which must be `version`.
    pub(crate) fn version(&mut self, version: u8) -> Result<(), DecodeError> {
        match self.u8()? {
            v if v == version => Ok(()),
            v => Err(DecodeError::Version(v)),
        }
    }
    /// Ok when every byte was read.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing)
        }
    }
}

/// The tunnel a record's SA belongs to: 0 infrastructure, 1 intranet.
pub(crate) fn tunnel_code(t: gate64_esp::TunnelKind) -> u8 {
    match t {
        gate64_esp::TunnelKind::Infrastructure => 0,
        gate64_esp::TunnelKind::Intranet => 1,
    }
}

pub(crate) fn tunnel_of(code: u8) -> Result<gate64_esp::TunnelKind, DecodeError> {
    match code {
        0 => Ok(gate64_esp::TunnelKind::Infrastructure),
        1 => Ok(gate64_esp::TunnelKind::Intranet),
        _ => Err(DecodeError::Invalid("tunnel")),
    }
}
