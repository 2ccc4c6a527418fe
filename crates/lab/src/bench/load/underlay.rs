//! The underlay: one TUN device carrying every Teredo client's outer IPv4/UDP traffic, so that
//! a client holds no socket (and no file descriptor) of its own.
//!
//! The UDP part of the client source prefix (`source_v4`) is routed into the device by a
//! policy rule ahead of the local table, so gate64's datagrams to the clients come out of it
//! while TCP to the same addresses (the IP-HTTPS clients' sockets) stays local. The reader
//! parses each packet ([`gate64_wire::udp::parse_over_v4`]), drops and counts what is
//! malformed or for no client, and queues the datagram for the [`UdpEndpoint`] bound to its
//! destination address and port. An endpoint sends by writing an IPv4/UDP packet from its
//! own address and port to the device; the kernel forwards it to gate64.

use super::spec::Spec;
use anyhow::{Context, Result};
use gate64_client::teredo::Datagrams;
use gate64_io::tun::ip;
use gate64_wire::udp;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use tokio::sync::Notify;

/// The device's MTU: the largest Teredo datagram (an IPv6 packet of 1280 bytes, an origin
/// indication, UDP and IPv4) fits with room to spare.
const MTU: u16 = 1500;
/// The routing table holding the route into the device, and the preference of the rule that
/// selects it (UDP to the source prefix).
const TABLE: &str = "6464";
const RULE_PREF: &str = "100";
/// Where the local table's rule moves to: after the underlay's.
const LOCAL_PREF: &str = "200";
/// Bytes queued for one endpoint before the reader drops its datagrams (gate64 sends a
/// client's downlink in bursts; the client's task may wait for a core).
const DOWNLINK_LIMIT: usize = 256 * 1024;
/// A drained queue larger than this gives its memory back (most clients are idle).
const KEEP_CAPACITY: usize = 16 * 1024;
/// Per queued datagram: the sender's address (4), port (2) and the payload's length (2).
const RECORD_HEADER: usize = 8;
/// The device's transmit queue, packets: what gate64 sends the clients while the reader waits
/// for a core. 100,000 idle clients get ~10,000 datagrams/s (liveness checks, refresh RAs),
/// so 4,096 held under half a second: a reader stalled longer on a loaded machine made the
/// kernel drop them (the device's tx_drop), and a dropped liveness check costs gate64 a
/// retransmission 5 s later. 65,536 holds several seconds.
const TX_QUEUE_LEN: &str = "65536";
/// Shards of the endpoint map (readers and binds on different shards do not meet).
const SHARDS: usize = 64;
/// Packets taken from the device per wake-up before yielding.
const READ_BUDGET: usize = 256;

/// What the underlay dropped.
#[derive(Default)]
pub struct Counters {
    /// Packets from the device that are no whole IPv4/UDP datagram.
    pub malformed: AtomicU64,
    /// Datagrams for an address and port no endpoint is bound to.
    pub unknown_destination: AtomicU64,
    /// Datagrams dropped because their endpoint's queue was full.
    pub dropped: AtomicU64,
    /// Datagrams an endpoint could not write to the device.
    pub send_failed: AtomicU64,
}

/// Datagrams for one endpoint, back to back as `[from address][from port][length][payload]`
/// in one buffer, read from `read` on.
#[derive(Default)]
struct Queue {
    buf: Vec<u8>,
    read: usize,
}

struct Inbox {
    queue: Mutex<Queue>,
    wake: Notify,
}

type Shard = RwLock<HashMap<SocketAddrV4, Arc<Inbox>>>;

/// The device and the endpoints bound on it.
pub struct Underlay {
    dev: OnceLock<Arc<tun_rs::AsyncDevice>>,
    shards: Box<[Shard]>,
    /// What was dropped.
    pub counters: Counters,
}

impl Default for Underlay {
    fn default() -> Self {
        Underlay {
            dev: OnceLock::new(),
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            counters: Counters::default(),
        }
    }
}

impl Underlay {
    /// Sets the device the endpoints write to.
    pub fn set_device(&self, dev: Arc<tun_rs::AsyncDevice>) {
        let _ = self.dev.set(dev);
    }

    fn shard(&self, at: SocketAddrV4) -> &Shard {
        let h =
            (u32::from(*at.ip()) ^ u32::from(at.port()).rotate_left(16)).wrapping_mul(0x9e37_79b9);
        let i = (h >> 26) as usize % self.shards.len();
        &self.shards[i]
    }

    /// An endpoint at `local`; an error when another endpoint holds it.
    pub fn bind(self: &Arc<Self>, local: SocketAddrV4) -> io::Result<UdpEndpoint> {
        let inbox = Arc::new(Inbox {
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
        });
        let mut map = self.shard(local).write().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(&local) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{local} is bound on the underlay"),
            ));
        }
        map.insert(local, Arc::clone(&inbox));
        Ok(UdpEndpoint {
            underlay: Arc::clone(self),
            local,
            inbox,
            ident: AtomicU16::new(0),
            scratch: Mutex::new(Vec::new()),
        })
    }

    /// Queues the datagram in `packet` (an IPv4 packet from the device) for the endpoint
    /// bound to its destination; drops and counts it otherwise.
    pub fn deliver(&self, packet: &[u8]) {
        let Ok(d) = udp::parse_over_v4(packet) else {
            self.counters.malformed.fetch_add(1, Relaxed);
            return;
        };
        let Ok(len) = u16::try_from(d.payload.len()) else {
            self.counters.malformed.fetch_add(1, Relaxed);
            return;
        };
        let map = self.shard(d.dst).read().unwrap_or_else(|e| e.into_inner());
        let Some(inbox) = map.get(&d.dst) else {
            self.counters.unknown_destination.fetch_add(1, Relaxed);
            return;
        };
        {
            let mut q = inbox.queue.lock().unwrap_or_else(|e| e.into_inner());
            if q.buf.len() - q.read + RECORD_HEADER + d.payload.len() > DOWNLINK_LIMIT {
                self.counters.dropped.fetch_add(1, Relaxed);
                return;
            }
            q.buf.extend_from_slice(&d.src.ip().octets());
            q.buf.extend_from_slice(&d.src.port().to_be_bytes());
            q.buf.extend_from_slice(&len.to_be_bytes());
            q.buf.extend_from_slice(d.payload);
        }
        inbox.wake.notify_one();
    }
}

/// A UDP endpoint on the underlay: what a kernel socket bound to `local` would be, without
/// a file descriptor. Unbound when dropped.
pub struct UdpEndpoint {
    underlay: Arc<Underlay>,
    local: SocketAddrV4,
    inbox: Arc<Inbox>,
    ident: AtomicU16,
    /// The packet being sent (its lock is never held across an await).
    scratch: Mutex<Vec<u8>>,
}

impl Drop for UdpEndpoint {
    fn drop(&mut self) {
        let mut map = self
            .underlay
            .shard(self.local)
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if map
            .get(&self.local)
            .is_some_and(|i| Arc::ptr_eq(i, &self.inbox))
        {
            map.remove(&self.local);
        }
    }
}

impl UdpEndpoint {
    /// Takes the first queued datagram into `buf`'s end.
    fn take(&self, buf: &mut Vec<u8>) -> Option<(usize, SocketAddr)> {
        let mut q = self.inbox.queue.lock().unwrap_or_else(|e| e.into_inner());
        let Queue { buf: queued, read } = &mut *q;
        let rest = queued.get(*read..)?;
        let (header, rest) = rest.split_first_chunk::<RECORD_HEADER>()?;
        let [a, b, c, d, p0, p1, l0, l1] = *header;
        let len = usize::from(u16::from_be_bytes([l0, l1]));
        let payload = rest.get(..len)?;
        buf.extend_from_slice(payload);
        let from = SocketAddrV4::new(Ipv4Addr::new(a, b, c, d), u16::from_be_bytes([p0, p1]));
        *read += RECORD_HEADER + len;
        if *read >= queued.len() {
            queued.clear();
            *read = 0;
            if queued.capacity() > KEEP_CAPACITY {
                queued.shrink_to(0);
            }
        }
        Some((len, SocketAddr::V4(from)))
    }
}

impl Datagrams for UdpEndpoint {
    async fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        let SocketAddr::V4(to) = to else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the underlay carries IPv4 only",
            ));
        };
        let Some(dev) = self.underlay.dev.get() else {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the underlay has no device",
            ));
        };
        let mut packet = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        packet.clear();
        let ident = self.ident.fetch_add(1, Relaxed);
        udp::emit_over_v4(&mut packet, self.local, to, ident, buf)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // A TUN write does not block: the kernel takes the packet or drops it.
        match dev.try_send(&packet) {
            Ok(_) => Ok(buf.len()),
            Err(e) => {
                self.underlay.counters.send_failed.fetch_add(1, Relaxed);
                Err(e)
            }
        }
    }

    async fn recv_buf_from(&self, buf: &mut Vec<u8>) -> io::Result<(usize, SocketAddr)> {
        loop {
            if let Some(got) = self.take(buf) {
                return Ok(got);
            }
            // A notification sent before this wait is kept as a permit: none is lost.
            self.inbox.wake.notified().await;
        }
    }

    fn try_recv_buf_from(&self, buf: &mut Vec<u8>) -> io::Result<(usize, SocketAddr)> {
        self.take(buf)
            .ok_or_else(|| io::ErrorKind::WouldBlock.into())
    }
}

/// Reads the device for as long as it exists, handing each datagram to its endpoint.
pub async fn read_loop(dev: Arc<tun_rs::AsyncDevice>, underlay: Arc<Underlay>) -> Result<()> {
    let mut raw = vec![0u8; usize::from(u16::MAX)];
    loop {
        let n = dev
            .recv(&mut raw)
            .await
            .context("reading the underlay device")?;
        underlay.deliver(raw.get(..n).unwrap_or_default());
        for _ in 1..READ_BUDGET {
            match dev.try_recv(&mut raw) {
                Ok(n) => underlay.deliver(raw.get(..n).unwrap_or_default()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e).context("reading the underlay device"),
            }
        }
    }
}

/// Creates the underlay device and routes UDP to `source_v4` into it: table 6464 holds the
/// route, a rule at preference 100 selects it for UDP, and the local table's rule moves from
/// 0 to 200 so that it comes after (the prefix may be routed local for the IP-HTTPS
/// clients' TCP). The namespace forwards between the device and gate64's side.
pub fn set_up(spec: &Spec) -> Result<Arc<tun_rs::AsyncDevice>> {
    let name = spec.underlay_name();
    let dev = tun_rs::DeviceBuilder::new()
        .name(&name)
        .mtu(MTU)
        .multi_queue(false)
        .packet_information(false)
        .enable(true)
        .build_async()
        .with_context(|| format!("`underlay_tun`: creating TUN device {name:?}"))?;
    ip(&["link", "set", "dev", &name, "txqueuelen", TX_QUEUE_LEN]).context("`underlay_tun`")?;
    let source = spec.source_v4.to_string();
    ip(&[
        "-4", "route", "replace", &source, "dev", &name, "table", TABLE,
    ])
    .context("`source_v4`: routing into the underlay")?;
    let _ = ip(&["-4", "rule", "del", "pref", RULE_PREF]);
    ip(&[
        "-4", "rule", "add", "pref", RULE_PREF, "to", &source, "ipproto", "udp", "lookup", TABLE,
    ])
    .context("`source_v4`: the underlay's rule")?;
    let _ = ip(&["-4", "rule", "del", "pref", LOCAL_PREF]);
    ip(&["-4", "rule", "add", "pref", LOCAL_PREF, "lookup", "local"])
        .context("moving the local table's rule")?;
    let _ = ip(&["-4", "rule", "del", "pref", "0"]);
    for (path, value) in [
        ("/proc/sys/net/ipv4/ip_forward".to_owned(), "1"),
        (format!("/proc/sys/net/ipv4/conf/{name}/rp_filter"), "0"),
        // The clients' sources may be local addresses (routed local for TCP).
        (format!("/proc/sys/net/ipv4/conf/{name}/accept_local"), "1"),
        // IPv4 only: no router solicitations or MLD reports for the reader to refuse.
        (format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1"),
    ] {
        std::fs::write(&path, value).with_context(|| format!("writing {value} to {path}"))?;
    }
    Ok(Arc::new(dev))
}

/// Puts the local table's rule back at 0 and removes the underlay's (its route goes with the
/// device).
pub fn tear_down() {
    let _ = ip(&["-4", "rule", "add", "pref", "0", "lookup", "local"]);
    let _ = ip(&["-4", "rule", "del", "pref", LOCAL_PREF]);
    let _ = ip(&["-4", "rule", "del", "pref", RULE_PREF]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    fn packet(from: &str, to: &str, payload: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        udp::emit_over_v4(&mut p, at(from), at(to), 1, payload).unwrap();
        p
    }

    fn recv(e: &UdpEndpoint) -> Option<(Vec<u8>, SocketAddr)> {
        let mut buf = Vec::new();
        let (n, from) = e.try_recv_buf_from(&mut buf).ok()?;
        assert_eq!(n, buf.len());
        Some((buf, from))
    }

    #[test]
    fn datagrams_reach_the_endpoint_of_their_address_and_port() {
        let u = Arc::new(Underlay::default());
        let a = u.bind(at("100.64.0.1:1024")).unwrap();
        let b = u.bind(at("100.64.0.1:1025")).unwrap();
        let c = u.bind(at("100.64.0.2:1024")).unwrap();
        u.deliver(&packet("192.0.2.1:3544", "100.64.0.1:1025", b"to b"));
        u.deliver(&packet("192.0.2.2:3544", "100.64.0.1:1024", b"to a"));
        u.deliver(&packet("192.0.2.1:3544", "100.64.0.1:1025", b""));
        let from = |s: &str| SocketAddr::V4(at(s));
        assert_eq!(recv(&a), Some((b"to a".to_vec(), from("192.0.2.2:3544"))));
        assert_eq!(recv(&b), Some((b"to b".to_vec(), from("192.0.2.1:3544"))));
        assert_eq!(recv(&b), Some((Vec::new(), from("192.0.2.1:3544"))));
        assert_eq!((recv(&a), recv(&b), recv(&c)), (None, None, None));
        let e = c.try_recv_buf_from(&mut Vec::new()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn malformed_and_unknown_datagrams_are_counted_and_dropped() {
        let u = Arc::new(Underlay::default());
        let a = u.bind(at("100.64.0.1:1024")).unwrap();
        let mut p = packet("192.0.2.1:3544", "100.64.0.1:1024", b"payload");
        let last = p.len() - 1;
        p[last] ^= 0xff;
        u.deliver(&p);
        u.deliver(&p[..25]);
        u.deliver(&[]);
        u.deliver(&packet("192.0.2.1:3544", "100.64.0.1:1026", b"nobody"));
        assert_eq!(u.counters.malformed.load(Relaxed), 3);
        assert_eq!(u.counters.unknown_destination.load(Relaxed), 1);
        assert_eq!(recv(&a), None);
    }

    #[test]
    fn a_full_queue_drops_and_a_drained_one_takes_again() {
        let u = Arc::new(Underlay::default());
        let a = u.bind(at("100.64.0.1:1024")).unwrap();
        let p = packet("192.0.2.1:3544", "100.64.0.1:1024", &[7u8; 1200]);
        let fits = DOWNLINK_LIMIT / (RECORD_HEADER + 1200);
        for _ in 0..fits + 3 {
            u.deliver(&p);
        }
        assert_eq!(u.counters.dropped.load(Relaxed), 3);
        for _ in 0..fits {
            assert_eq!(recv(&a).map(|(b, _)| b.len()), Some(1200));
        }
        assert_eq!(recv(&a), None);
        u.deliver(&p);
        assert!(recv(&a).is_some());
        assert_eq!(u.counters.dropped.load(Relaxed), 3);
    }

    #[test]
    fn an_address_binds_once_and_is_free_again_after_the_drop() {
        let u = Arc::new(Underlay::default());
        let a = u.bind(at("100.64.0.1:1024")).unwrap();
        let e = u.bind(at("100.64.0.1:1024")).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        drop(a);
        u.deliver(&packet("192.0.2.1:3544", "100.64.0.1:1024", b"late"));
        assert_eq!(u.counters.unknown_destination.load(Relaxed), 1);
        let again = u.bind(at("100.64.0.1:1024")).unwrap();
        u.deliver(&packet("192.0.2.1:3544", "100.64.0.1:1024", b"new"));
        assert_eq!(recv(&again).map(|(b, _)| b), Some(b"new".to_vec()));
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_and_a_send_needs_the_device() {
        let u = Arc::new(Underlay::default());
        let a = u.bind(at("100.64.0.1:1024")).unwrap();
        let u2 = Arc::clone(&u);
        let feed = tokio::spawn(async move {
            tokio::task::yield_now().await;
            u2.deliver(&packet("192.0.2.1:3544", "100.64.0.1:1024", b"late"));
        });
        let mut buf = Vec::new();
        let (n, _) = a.recv_buf_from(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"late");
        feed.await.unwrap();
        let e = a
            .send_to(b"x", SocketAddr::V4(at("192.0.2.1:3544")))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotConnected);
        let v6: SocketAddr = "[2001:db8::1]:3544".parse().unwrap();
        let e = a.send_to(b"x", v6).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
