//! Writing to an offloading TUN (virtio-net headers) with TCP coalescing and no copy: the
//! writes a [`GroTable`] plans (each flow's segments grouped across the whole batch, however
//! the flows interleave), each handed to `writev` with the payloads straight from the
//! callers' buffers, so the kernel copies them once and forwards one skb per flow and batch
//! instead of one per segment. Reads are cut into segments by [`split_into`].

use std::io::IoSlice;
use std::os::fd::RawFd;

pub use gate64_wire::offload::{
    GRO_BATCH, GroTable, SplitError, VNET_HDR_LEN, for_each_write, split_into,
};
use std::cell::RefCell;

// The virtio-net header tun-rs configures on the device is the one the wire module writes.
const _: () = assert!(VNET_HDR_LEN == tun_rs::VIRTIO_NET_HDR_LEN);

/// The virtio-net header of a write that asks for no offload (one plain packet).
pub const NO_OFFLOAD_HDR: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];

/// Parts of one write at most: the headers and up to 64 payloads.
const MAX_PARTS: usize = 65;

/// Outcome of [`write_coalesced`]: packets handed to the kernel, and packets whose write
/// failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Packets written (each segment of a super-packet counts).
    pub ok: usize,
    /// Packets whose write failed.
    pub failed: usize,
}

thread_local! {
    /// One table per thread, reused: planning a batch clears a few hundred bytes, not the
    /// whole table, and allocates nothing.
    static TABLE: RefCell<Box<GroTable>> = RefCell::new(Box::default());
}

/// Writes `packets` to the offloading TUN `fd`, each flow's TCP segments coalesced into
/// super-packets across the batch (each flow's packets in order); other packets go one per
/// write behind a "no offload" header.
pub fn write_coalesced(fd: RawFd, packets: &[&[u8]]) -> Written {
    TABLE.with(|t| match t.try_borrow_mut() {
        Ok(mut table) => write_with(&mut table, fd, packets),
        // Only a write from inside a write's own callback could get here; plan it afresh.
        Err(_) => write_with(&mut GroTable::new(), fd, packets),
    })
}

/// [`write_coalesced`] with the caller's table.
pub fn write_with(table: &mut GroTable, fd: RawFd, packets: &[&[u8]]) -> Written {
    let mut w = Written::default();
    table.for_each_write(packets, |parts, n| {
        let mut iov = [IoSlice::new(&[]); MAX_PARTS];
        for (v, p) in iov.iter_mut().zip(parts) {
            *v = IoSlice::new(p);
        }
        match gate64_sys::fd::writev(fd, &iov[..parts.len().min(MAX_PARTS)]) {
            Ok(_) => w.ok += n,
            Err(_) => w.failed += n,
        }
    });
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// An IPv6 TCP segment (32-byte TCP header) with `payload` bytes of `fill`.
    fn tcp6(seq: u32, payload: usize, fill: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40 + 32 + payload];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((32 + payload) as u16).to_be_bytes());
        p[6] = 6;
        p[7] = 64;
        p[8] = 0x20;
        p[24] = 0x20;
        p[44..48].copy_from_slice(&seq.to_be_bytes());
        p[52] = 8 << 4;
        p[53] = 0x10;
        p[72..].fill(fill);
        p
    }

    #[test]
    fn writes_go_to_the_descriptor_as_one_packet_per_run() {
        // A socket pair stands in for the TUN: each writev is one datagram.
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let segs = [tcp6(1000, 1000, 1), tcp6(2000, 1000, 2), tcp6(3000, 10, 3)];
        let mut udp = tcp6(1, 10, 0);
        udp[6] = 17;
        let refs: Vec<&[u8]> = segs.iter().map(|p| &p[..]).chain([&udp[..]]).collect();
        let w = write_coalesced(a.as_raw_fd(), &refs);
        assert_eq!(w, Written { ok: 4, failed: 0 });
        let mut buf = [0u8; 4096];
        let n = b.recv(&mut buf).unwrap();
        assert_eq!(n, VNET_HDR_LEN + 72 + 2010);
        assert_eq!(
            &buf[VNET_HDR_LEN + 72..VNET_HDR_LEN + 72 + 1000],
            &[1u8; 1000][..]
        );
        assert_eq!(&buf[n - 10..n], &[3u8; 10][..]);
        let n = b.recv(&mut buf).unwrap();
        assert_eq!(n, VNET_HDR_LEN + udp.len());
        assert_eq!(buf[1], 0, "no offload");
    }
}
