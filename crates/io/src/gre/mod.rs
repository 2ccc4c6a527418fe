//! The GRE data path: raw IP protocol-47 sockets on one side, a multi-queue TUN
//! device per tenant on the other, and the sans-IO [`gate64_gre::Gre`] between them, on one
//! or more worker threads.
//!
//! - **Sockets.** One raw socket per local outer address of the tunnels
//!   (`socket(AF_INET, SOCK_RAW, 47)` or `AF_INET6`), bound to that address with
//!   IP(V6)_FREEBIND (the address may arrive later, e.g. moved by keepalived). Binding is how
//!   the receive side learns the outer destination: the kernel hands a bound raw socket only
//!   packets to its address, so IPv6 (whose raw sockets deliver no IP header) needs no
//!   IPV6_RECVPKTINFO. IPv4 reads carry the IPv4 header, parsed for the source. Sends carry
//!   the GRE header and payload; the kernel adds the outer header from the bound address.
//!   Receives and sends are batched with `recvmmsg`/`sendmmsg` ([`crate::sys`]).
//! - **Frames.** With `[gre] outer_path = "packet"` (the default is `"raw"`), a tunnel whose next hop
//!   is an Ethernet neighbour sends through a packet socket of its interface instead: the
//!   outer IP and Ethernet headers are built in the headroom and whole frames go out with
//!   `sendmmsg`, sparing the kernel a route look-up and IP output per packet ([`frames`]);
//!   the raw socket carries the rest (keepalives, oversized packets, tunnels without such a
//!   path).
//! - **Tenants.** Each tenant has its own TUN device (one queue per worker) opened with virtio-net
//!   headers: a read may be a TCP super-packet (TSO), split here into MTU-sized packets
//!   straight into headroomed slots, each encapsulated in place and sent in one `sendmmsg`
//!   batch; decapsulated packets are written with [`crate::tun::gro::write_coalesced`], one
//!   `writev` per run of one flow's TCP segments. Its tunnels' routes point into it. A
//!   packet read from tenant T's device is routed over T's tunnels only, and a packet
//!   decapsulated from a tunnel is written to its tenant's device only, so tenants may share
//!   inner prefixes.
//! - **Timers.** Keepalives run on the same thread: the poll waits at most until
//!   [`gate64_gre::Gre::poll_timeout`]. A tunnel they find down refuses packets
//!   (`gre_tunnel_down`) until its peer answers again.
//!
//! - **Workers.** Worker `w` reads queue `w` of every tenant's device, encapsulates and
//!   sends on its own raw sockets (one per local address; a raw socket gets a copy of every
//!   GRE packet that matches its addresses and only worker 0 reads them, so the others are
//!   connected to the loopback address, which matches none, and drop-all filtered). So the
//!   outer sends, the largest cost, run on every worker. Worker 0 alone receives,
//!   decapsulates and runs the keepalive timers and the sequence windows; it writes each
//!   decapsulated packet into the queue of the worker its inner flow hashes to
//!   ([`flow_queue`], symmetric in source and destination). The kernel's TUN flow steering
//!   sends a flow's outgoing packets to the queue its last incoming packet was written to,
//!   so each flow is read by one worker and its packets stay in order. Tunnels that send
//!   RFC 2890 sequence numbers get one worker ([`gate64_gre::Gre::sender`]).
//!
//! One flow's packets stay in order because one thread reads them and every batch is sent
//! and written in the order it was read. Not yet: receiving on several workers (an
//! AF_PACKET `PACKET_FANOUT_HASH` group, see docs/architecture.md).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gate64_dataplane::DropReason as Drop;
use gate64_gre::{DropReason, DropStats, Gre, Inner, TenantId, TunnelStats};
use gate64_metrics::{GreReader, GreSnapshot, GreTunnelSample};
use gate64_wire::{ipv4, ipv6, udp};
use ipnet::IpNet;
use socket2::{Domain, Protocol, Socket, Type};
use tracing::{debug, info, warn};

use crate::sys::{self, BATCH, ReceivedFrom};

mod engine;
mod flow;
mod frames;
mod socket;

use engine::Engine;
pub use flow::flow_queue;
use socket::{bind_sockets, local_addresses};

/// Room before each inner packet read from a TUN for the GRE header and, on the packet-socket
/// path, the outer IP and Ethernet headers.
const HEADROOM: usize = gate64_wire::gre::MAX_HEADER_LEN + gate64_gre::outer::MAX_LEN;
/// Bytes of one receive slot: the largest (reassembled) IP packet.
const SLOT: usize = 65_536;
/// Inner packets one TUN read may stand for (a 64 KiB TCP super-packet cut at the smallest
/// MSS the kernel uses): a read is only made with this many slots free.
const MAX_SPLIT: usize = 128;
/// Inner packets encapsulated per `sendmmsg` batch: several TUN reads (single packets, or
/// super-packets split) fill it before it is sent.
const TUN_BATCH: usize = 2 * MAX_SPLIT;
/// Bytes of one TUN read: the virtio-net header and a 64 KiB super-packet.
const TUN_READ: usize = gate64_wire::offload::VNET_HDR_LEN + 65_535;
/// Batches read from one ready descriptor before the others get their turn.
const ROUNDS: usize = 8;
/// Socket buffers asked for (the kernel caps them unless CAP_NET_ADMIN forces them).
const SOCKET_BUFFER: usize = 4 << 20;
/// Time between tries to connect a send-only socket to loopback (see
/// [`connect_to_loopback`]).
const CONNECT_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between checks of the stop flag.
const MAX_WAIT: Duration = Duration::from_millis(100);

/// A running GRE data path; dropping it stops the threads (the TUN devices, and with them
/// their routes, go when the threads exit).
pub struct Gateway {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<io::Result<()>>>,
    reader: GreReader,
}

impl Gateway {
    /// Starts `workers` threads (at least one; one when a tunnel sends sequence numbers):
    /// `tuns[i]` is the device of tenant `i`, made by [`create_tun`], whose further queues
    /// are opened here, one per worker. With `packet_sockets`, tunnels whose next hop is on an
    /// Ethernet interface send whole frames through packet sockets ([`frames`]).
    pub fn spawn(
        gre: Gre,
        tuns: Vec<crate::tun::TunQueue>,
        workers: usize,
        packet_sockets: bool,
    ) -> io::Result<Gateway> {
        let now = Instant::now();
        let senders: Vec<Gre> = (1..workers.max(1)).map_while(|_| gre.sender(now)).collect();
        if senders.len() + 1 < workers {
            info!("a GRE tunnel sends sequence numbers: one GRE worker");
        }
        let workers = senders.len() + 1;
        // queues[w][tenant]: worker w's queue of each tenant's device.
        let mut queues: Vec<Vec<Arc<crate::tun::TunQueue>>> = vec![Vec::new(); workers];
        for first in tuns {
            for q in queues.iter_mut().skip(1) {
                q.push(Arc::new(first.another_queue()?));
            }
            queues[0].push(Arc::new(first));
        }
        let reader = reader(&gre, &senders);
        let stop = Arc::new(AtomicBool::new(false));
        let mut engines = Vec::with_capacity(workers);
        let sockets = bind_sockets(&local_addresses(&gre), true)?;
        engines.push(Engine::new(gre, sockets, &queues, 0, packet_sockets)?);
        for (i, sender) in senders.into_iter().enumerate() {
            let sockets = bind_sockets(&local_addresses(&sender), false)?;
            engines.push(Engine::new(
                sender,
                sockets,
                &queues,
                i + 1,
                packet_sockets,
            )?);
        }
        let mut threads = Vec::with_capacity(workers);
        for (w, mut engine) in engines.into_iter().enumerate() {
            let flag = Arc::clone(&stop);
            let spawned = std::thread::Builder::new()
                .name(format!("gre-{w}"))
                .spawn(move || engine.run(&flag));
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    let mut started = Gateway {
                        stop,
                        threads,
                        reader,
                    };
                    let _ = started.halt();
                    return Err(e);
                }
            }
        }
        info!(workers, "GRE workers up");
        Ok(Gateway {
            stop,
            threads,
            reader,
        })
    }

    /// The counters for the metrics exporter ([`gate64_metrics::Exporter::add_gre`]).
    pub fn reader(&self) -> GreReader {
        Arc::clone(&self.reader)
    }

    /// Stops the threads and returns the first error, if one failed.
    pub fn stop(mut self) -> io::Result<()> {
        self.halt()
    }

    fn halt(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            let r = match t.join() {
                Ok(r) => r,
                Err(_) => Err(io::Error::other("a GRE thread panicked")),
            };
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl std::ops::Drop for Gateway {
    fn drop(&mut self) {
        if let Err(e) = self.halt() {
            warn!(error = %e, "GRE data path failed");
        }
    }
}

/// Creates tenant `name`'s TUN device `dev`: up, MTU `mtu`, no address (the kernel routes
/// into it by the routes added with [`route`]). Opened with virtio-net headers
/// ([`crate::tun::open_device`]), so the kernel hands over TCP super-packets (TSO, split here
/// into MTU-sized packets, each its own GRE packet) and takes coalesced decapsulated segments
/// (GRO), one TUN syscall moving up to 64 KiB either way. Without the corporate TUN's threaded
/// NAPI: measured with `bench/gre.sh`, it moved no more (docs/performance-history.md,
/// "Threaded NAPI on the tenant TUNs"). Multi-queue: [`Gateway::spawn`] opens one more queue per further worker.
pub fn create_tun(dev: &str, mtu: u16) -> io::Result<crate::tun::TunQueue> {
    let first = crate::tun::open_device(dev, 1, true, false)?
        .pop()
        .ok_or_else(|| io::Error::other(format!("TUN device `{dev}`: no queue")))?;
    let mtu = mtu.to_string();
    crate::tun::ip(&["link", "set", "dev", dev, "mtu", &mtu, "up"])?;
    Ok(first)
}

/// Routes `net` into `dev` in routing table `table` with route MTU `mtu`
/// (`ip route replace NET dev DEV table T mtu M`, IPv6 through the TUN's nominal next hop:
/// [`crate::tun::route_into`]), idempotently.
pub fn route(net: IpNet, dev: &str, table: u32, mtu: u16) -> io::Result<()> {
    let (table, mtu) = (table.to_string(), mtu.to_string());
    let ipv6 = matches!(net, IpNet::V6(_));
    crate::tun::route_into(&net.to_string(), ipv6, dev, &["table", &table, "mtu", &mtu])
}

/// The `gate64_drops_total` reason of a GRE drop.
pub fn drop_reason(r: DropReason) -> Drop {
    match r {
        DropReason::BadKey => Drop::GreBadKey,
        DropReason::UnknownPeer => Drop::GreUnknownPeer,
        DropReason::Sequence => Drop::GreSequence,
        DropReason::Checksum => Drop::GreChecksum,
        DropReason::Ttl => Drop::GreTtl,
        DropReason::NoRoute => Drop::GreNoRoute,
        DropReason::NoRoom => Drop::GreNoRoom,
        DropReason::TunnelDown => Drop::GreTunnelDown,
        DropReason::Truncated | DropReason::BadVersion | DropReason::Malformed => {
            Drop::GreMalformed
        }
    }
}

/// The exporter's view: each tunnel's counters summed over the original table and its
/// sender copies (one writer each), its state from the original.
fn reader(gre: &Gre, senders: &[Gre]) -> GreReader {
    let tables = || std::iter::once(gre).chain(senders);
    // tunnels[i]: (name, [the original's counters, then each sender's]).
    let tunnels: Vec<(String, Vec<Arc<TunnelStats>>)> = gre
        .tunnels()
        .map(|(id, c, _)| {
            let counters = tables()
                .filter_map(|t| t.tunnels().nth(id.0).map(|(_, _, s)| Arc::clone(s)))
                .collect();
            (c.name.clone(), counters)
        })
        .collect();
    let drops: Vec<Arc<DropStats>> = tables().map(|t| Arc::clone(t.drops())).collect();
    Arc::new(move || {
        let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let mut by_reason = Vec::new();
        for r in DropReason::ALL {
            let n: u64 = drops.iter().map(|d| d.get(r)).sum();
            if n > 0 {
                by_reason.push((drop_reason(r), n));
            }
        }
        let sum = |all: &[Arc<TunnelStats>],
                   f: fn(&TunnelStats) -> &std::sync::atomic::AtomicU64| {
            all.iter().map(|s| load(f(s))).sum::<u64>()
        };
        GreSnapshot {
            tunnels: tunnels
                .iter()
                .map(|(name, all)| GreTunnelSample {
                    name: name.clone(),
                    up: all.first().is_some_and(|s| load(&s.up) != 0),
                    bytes: [sum(all, |s| &s.rx_bytes), sum(all, |s| &s.tx_bytes)],
                    packets: [sum(all, |s| &s.rx_packets), sum(all, |s| &s.tx_packets)],
                })
                .collect(),
            drops: by_reason,
        }
    })
}

#[cfg(test)]
mod reader_tests {
    use std::net::IpAddr;
    use std::time::Instant;

    use gate64_gre::{DropReason, Gre, TenantId, TunnelConfig};

    use super::reader;

    /// A keyed tunnel 203.0.113.1 → .2 routing 172.16.0.0/24.
    fn table() -> Gre {
        let config = TunnelConfig {
            name: "site2".into(),
            local: IpAddr::from([203, 0, 113, 1]),
            remote: IpAddr::from([203, 0, 113, 2]),
            key: Some(42),
            tenant: TenantId(0),
            routes: vec!["172.16.0.0/24".parse().unwrap()],
            send_checksum: false,
            send_sequence: false,
            keepalive: None,
        };
        Gre::new(vec![config], Instant::now()).unwrap()
    }

    /// Encapsulates one 40-byte IPv4 packet to 172.16.0.9, or to 192.0.2.9 (no route).
    fn send(gre: &mut Gre, routed: bool) {
        let mut inner = [0u8; 40];
        inner[0] = 0x45;
        inner[3] = 40;
        inner[8] = 64;
        let dst = if routed {
            [172, 16, 0, 9]
        } else {
            [192, 0, 2, 9]
        };
        inner[16..20].copy_from_slice(&dst);
        let Ok(id) = gre.route_packet(TenantId(0), &inner) else {
            return;
        };
        let headroom = gate64_wire::gre::MAX_HEADER_LEN;
        let mut buf = vec![0u8; headroom + inner.len()];
        buf[headroom..].copy_from_slice(&inner);
        let end = buf.len();
        gre.encap(id, &mut buf, headroom, end).unwrap();
    }

    /// The exporter's figures are the sum over the original table and its sender copies,
    /// each of which counts in counters of its own.
    #[test]
    fn snapshot_sums_every_worker() {
        let mut original = table();
        let mut senders: Vec<Gre> = (0..2)
            .map(|_| original.sender(Instant::now()).unwrap())
            .collect();
        let read = reader(&original, &senders);
        send(&mut original, true);
        for (i, s) in senders.iter_mut().enumerate() {
            for _ in 0..=i {
                send(s, true);
            }
            send(s, false);
        }
        let snap = read();
        assert_eq!(snap.tunnels.len(), 1);
        assert_eq!(snap.tunnels[0].packets, [0, 1 + 1 + 2]);
        assert_eq!(snap.tunnels[0].bytes, [0, 40 * 4]);
        assert!(snap.tunnels[0].up);
        assert_eq!(
            snap.drops,
            vec![(super::drop_reason(DropReason::NoRoute), 2)]
        );
    }
}
