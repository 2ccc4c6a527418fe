//! ESP from clients that reach gate64 directly (`[ipsec] listen`, RFC 3948 ESP in UDP on
//! port 4500). The IKE driver reads those sockets, since IKE and ESP share them: it tells
//! them apart (`udp_encap::classify`) and hands ESP here one `recvmmsg` batch at a time.
//! Each datagram is copied into a slot with [`HEADROOM`] (the driver's read buffers have
//! none), opened by this thread's own dataplane [`Worker`], and its verdict filed in a
//! [`Batch`]: TUN writes leave coalesced, ESP towards another native client from the
//! listen sockets. The slots are allocated once.

use crate::batch::{self, Batch};
use crate::sys::BATCH;
use crate::tun::CorpLink;
use crate::udp::worker::UDP_SLOT;
use gate64_dataplane::{Direction, DropReason, HEADROOM, Shared, Side, Stats, Worker};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Instant;

/// The dataplane side of the `[ipsec] listen` 4500 sockets.
pub struct NativeEsp {
    dp: Worker,
    corp: Arc<CorpLink>,
    batch: Batch,
    slots: Vec<Vec<u8>>,
    filled: usize,
    stats: Arc<Stats>,
}

impl NativeEsp {
    /// A dataplane worker over `shared` counting into `stats` (export them with the
    /// workers'), writing to `corp`, and sending ESP from `senders` (the clones of
    /// [`super::NativeSockets::senders`]).
    pub fn new(
        shared: Arc<Shared>,
        stats: Arc<Stats>,
        corp: Arc<CorpLink>,
        senders: Vec<(SocketAddr, UdpSocket)>,
    ) -> Self {
        NativeEsp {
            dp: Worker::new(shared, Arc::clone(&stats)),
            corp,
            batch: Batch::new(BATCH).with_native(senders),
            slots: vec![vec![0u8; HEADROOM + UDP_SLOT]; BATCH],
            filled: 0,
            stats,
        }
    }

    /// Opens the ESP `datagram` from `remote` to `local` and files its verdict; sends the
    /// batch first when it is full.
    pub(crate) fn push(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        datagram: &[u8],
    ) {
        if self.filled == self.slots.len() {
            self.flush();
        }
        let i = self.filled;
        let Some(room) = self.slots[i].get_mut(HEADROOM..HEADROOM + datagram.len()) else {
            self.stats
                .packet(Side::Internet, Direction::Rx, datagram.len());
            self.stats.count_drops(DropReason::Truncated, 1);
            return;
        };
        room.copy_from_slice(datagram);
        if i == 0 {
            self.dp.start_batch();
        }
        let end = HEADROOM + datagram.len();
        let v = self
            .dp
            .handle_native_esp(now, local, remote, &mut self.slots[i], HEADROOM, end);
        self.batch.dispatch(&[], i, v);
        self.filled += 1;
    }

    /// Sends what the pushed datagrams' verdicts filed.
    pub(crate) fn flush(&mut self) {
        if self.filled == 0 {
            return;
        }
        self.batch
            .send(&[], &self.corp, &self.stats, &self.slots[..self.filled]);
        batch::drain(&[], &self.corp, &self.stats, &mut self.dp);
        self.filled = 0;
    }
}
