//! The virtio-net header a TUN with `IFF_VNET_HDR` puts before each packet (virtio spec
//! v1.2 §5.1.6, `struct virtio_net_hdr` without `num_buffers`), typed as wireguard-go's
//! `virtioNetHdr`. Its fields are in the host's byte order, as Linux's `tun` exchanges them
//! on a little- or big-endian host alike (legacy virtio, no `VIRTIO_F_VERSION_1`).

use crate::{Error, Result};

/// Length of the header (`struct virtio_net_hdr`, no `num_buffers`).
pub const HEADER_LEN: usize = 10;

/// Byte ranges of the header fields.
pub mod field {
    use core::ops::Range;
    /// Flags.
    pub const FLAGS: usize = 0;
    /// GSO type (and the ECN bit 0x80).
    pub const GSO_TYPE: usize = 1;
    /// Length of the headers to copy into each segment.
    pub const HDR_LEN: Range<usize> = 2..4;
    /// Payload bytes per segment.
    pub const GSO_SIZE: Range<usize> = 4..6;
    /// Where checksumming starts.
    pub const CSUM_START: Range<usize> = 6..8;
    /// Offset of the checksum field from `csum_start`.
    pub const CSUM_OFFSET: Range<usize> = 8..10;
}

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum field holds the pseudo-header sum and the
/// checksum over `csum_start..` is still to be computed (`CHECKSUM_PARTIAL`).
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_ECN`, or-ed into the GSO type.
pub const GSO_ECN: u8 = 0x80;

/// The segmentation the header asks for (`VIRTIO_NET_HDR_GSO_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoType {
    /// Not a GSO packet.
    None,
    /// TCP over IPv4.
    TcpV4,
    /// UDP (fragmentation offload, deprecated).
    Udp,
    /// TCP over IPv6.
    TcpV6,
    /// UDP segmentation (`VIRTIO_NET_HDR_GSO_UDP_L4`).
    UdpL4,
}

impl GsoType {
    /// The wire value, ECN bit clear.
    pub fn to_u8(self) -> u8 {
        match self {
            GsoType::None => 0,
            GsoType::TcpV4 => 1,
            GsoType::Udp => 3,
            GsoType::TcpV6 => 4,
            GsoType::UdpL4 => 5,
        }
    }

    /// From the wire value (ECN bit masked off); `None` for unknown types.
    pub fn from_u8(v: u8) -> Option<GsoType> {
        Some(match v & !GSO_ECN {
            0 => GsoType::None,
            1 => GsoType::TcpV4,
            3 => GsoType::Udp,
            4 => GsoType::TcpV6,
            5 => GsoType::UdpL4,
            _ => return None,
        })
    }
}

/// A decoded virtio-net header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Flags ([`F_NEEDS_CSUM`]).
    pub flags: u8,
    /// Segmentation type.
    pub gso_type: GsoType,
    /// ECN bit of the GSO type.
    pub gso_ecn: bool,
    /// Length of the IP and transport headers.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where checksumming starts (the transport header).
    pub csum_start: u16,
    /// Offset of the checksum field from `csum_start` (16 for TCP, 6 for UDP).
    pub csum_offset: u16,
}

impl Header {
    /// A header saying "no offload": the packet is complete as it is.
    pub const NONE: Header = Header {
        flags: 0,
        gso_type: GsoType::None,
        gso_ecn: false,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 0,
        csum_offset: 0,
    };

    /// Decodes the header at the start of `b`. Unknown GSO types are
    /// [`Error::Unsupported`].
    pub fn decode(b: &[u8]) -> Result<Header> {
        let b = b.get(..HEADER_LEN).ok_or(Error::Truncated)?;
        let u16_at = |r: core::ops::Range<usize>| u16::from_ne_bytes([b[r.start], b[r.start + 1]]);
        Ok(Header {
            flags: b[field::FLAGS],
            gso_type: GsoType::from_u8(b[field::GSO_TYPE]).ok_or(Error::Unsupported)?,
            gso_ecn: b[field::GSO_TYPE] & GSO_ECN != 0,
            hdr_len: u16_at(field::HDR_LEN),
            gso_size: u16_at(field::GSO_SIZE),
            csum_start: u16_at(field::CSUM_START),
            csum_offset: u16_at(field::CSUM_OFFSET),
        })
    }

    /// Encodes the header into `out[..10]`.
    pub fn encode(&self, out: &mut [u8]) -> Result<()> {
        let b = out.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
        b[field::FLAGS] = self.flags;
        b[field::GSO_TYPE] = self.gso_type.to_u8() | if self.gso_ecn { GSO_ECN } else { 0 };
        b[field::HDR_LEN].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[field::GSO_SIZE].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[field::CSUM_START].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[field::CSUM_OFFSET].copy_from_slice(&self.csum_offset.to_ne_bytes());
        Ok(())
    }

    /// True when the checksum at `csum_start + csum_offset` is still to be completed.
    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }
}

#[cfg(test)]
mod tests;
