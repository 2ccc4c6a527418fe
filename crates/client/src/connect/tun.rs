//! The TUN side of `gate64 connect`: the device the tunnel's packets are written to and this
//! host's packets are read from, as the [`Host`] of the client sessions (offload and GRO as
//! the module above describes).

use crate::ipsec::InnerLink;
use crate::{Host, Ready};
use anyhow::{Context, Result};
use gate64_io::tun::ip;
use ipnet::Ipv6Net;
use std::net::Ipv6Addr;
use std::time::Instant;
use tracing::{debug, info};

/// The most packets gathered for one GRO write to the TUN device.
const BATCH: usize = tun_rs::IDEAL_BATCH_SIZE;
/// Capacity of a downlink slot: the largest packet.
const SLOT_CAPACITY: usize = 65_535;

/// The client's TUN device: absent until the first configuration, then kept for the process'
/// lifetime (reconnects reuse it, changing the address when the server hands out another).
pub(super) struct TunLink {
    ifname: String,
    routes: Vec<Ipv6Net>,
    dev: Option<tun_rs::AsyncDevice>,
    addr: Option<(Ipv6Addr, u8)>,
    /// Inner addresses given by IPsec (CFG_REPLY), kept across reconfigurations.
    inner: Vec<Ipv6Addr>,
    mtu: u32,
    /// The device carries virtio-net headers (offload is on).
    vnet: bool,
    /// Uplink: one raw read (virtio-net header + up to 64 KiB), allocated with the device.
    gso_buf: Vec<u8>,
    /// Downlink: packets from the tunnel, one per slot, `queued` of them waiting
    /// for [`Host::flush`]. Slots are added as needed, up to `BATCH`.
    slots: Vec<Vec<u8>>,
    queued: usize,
}

impl TunLink {
    pub(super) fn new(ifname: String, routes: Vec<Ipv6Net>) -> Self {
        TunLink {
            ifname,
            routes,
            dev: None,
            addr: None,
            inner: Vec::new(),
            mtu: 0,
            vnet: false,
            gso_buf: Vec::new(),
            slots: Vec::new(),
            queued: 0,
        }
    }

    /// Creates the device if needed, sets `addr/len` (replacing the previous address) and the
    /// MTU, and (re)installs the routes.
    fn set_up(&mut self, addr: Ipv6Addr, len: u8, mtu: u32) -> Result<()> {
        let mtu16 = u16::try_from(mtu).unwrap_or(u16::MAX);
        let ifname = self.ifname.clone();
        let dev = match &mut self.dev {
            Some(d) => d,
            None => {
                let d = tun_rs::DeviceBuilder::new()
                    .name(&ifname)
                    .mtu(mtu16)
                    .multi_queue(false)
                    .packet_information(false)
                    // virtio-net headers: TCP super-packets from the local stack in one read
                    // (TSO), coalesced ones written (GRO).
                    .offload(true)
                    .enable(false)
                    .build_async()
                    .with_context(|| {
                        format!("creating TUN device `{ifname}` (needs CAP_NET_ADMIN)")
                    })?;
                // Before the link goes up: the server owns the link's addressing (it routes
                // the whole /64 to us), so no DAD delay before the address is usable, and no
                // kernel Router Solicitations or SLAAC (RAs are consumed here anyway).
                for (key, value) in [("accept_dad", "0"), ("accept_ra", "0")] {
                    let path = format!("/proc/sys/net/ipv6/conf/{ifname}/{key}");
                    if let Err(e) = std::fs::write(&path, value) {
                        debug!(%path, error = %e, "sysctl not set");
                    }
                }
                d.enabled(true)
                    .with_context(|| format!("setting `{ifname}` up"))?;
                debug!(
                    tso = d.tcp_gso(),
                    uso = d.udp_gso(),
                    ifname = %ifname,
                    "TUN device created"
                );
                self.mtu = mtu;
                self.vnet = d.tcp_gso();
                self.gso_buf = vec![0; tun_rs::VIRTIO_NET_HDR_LEN + 65_535];
                self.dev.insert(d)
            }
        };
        if self.mtu != mtu {
            dev.set_mtu(mtu16)
                .with_context(|| format!("setting MTU {mtu} on `{ifname}`"))?;
            self.mtu = mtu;
        }
        if self.addr != Some((addr, len)) {
            if let Some((old, old_len)) = self.addr.take()
                && let Err(e) = dev.remove_address_v6(old, old_len)
            {
                debug!(address = %old, error = %e, "removing the old address");
            }
            dev.add_address_v6(addr, len)
                .with_context(|| format!("adding {addr}/{len} to `{ifname}`"))?;
            self.addr = Some((addr, len));
        }
        for r in &self.routes {
            gate64_io::tun::route(r.network(), r.prefix_len(), &ifname)?;
        }
        info!(address = %addr, ifname = %ifname, mtu, "link up");
        Ok(())
    }

    /// Appends the packets of the last raw read of `n` bytes to `out`, back to back.
    fn split_raw(&self, n: usize, out: &mut Vec<u8>) {
        let raw = &self.gso_buf[..n.min(self.gso_buf.len())];
        if !self.vnet {
            out.extend_from_slice(raw);
            return;
        }
        if let Err(e) = gate64_io::tun::gro::split_into(raw, out) {
            debug!(error = %e, "TUN packet dropped");
        }
    }
}

impl InnerLink for TunLink {
    /// Adds `inner/128` and routes each prefix to the device from `inner` (`ip -6 route
    /// replace PREFIX dev IF src INNER advmss MSS`), so the local stack picks the inner
    /// address, which the child SA's selectors cover, rather than the transport's.
    fn install_inner(&mut self, inner: Ipv6Addr, routes: &[Ipv6Net], mss: u16) -> Result<()> {
        anyhow::ensure!(self.dev.is_some(), "no TUN device yet");
        let (addr, src, mss) = (format!("{inner}/128"), inner.to_string(), mss.to_string());
        if !self.inner.contains(&inner) {
            // `nodad`: the server owns the inner addressing; a tentative address could not
            // be the routes' source yet.
            ip(&["-6", "addr", "replace", &addr, "dev", &self.ifname, "nodad"])?;
            self.inner.push(inner);
        }
        for r in routes {
            let net = r.to_string();
            ip(&[
                "-6",
                "route",
                "replace",
                &net,
                "dev",
                &self.ifname,
                "src",
                &src,
                "advmss",
                &mss,
            ])?;
        }
        info!(inner = %inner, routes = ?routes, ifname = %self.ifname, "inner address and routes");
        Ok(())
    }
}

impl Host for TunLink {
    async fn configure(&mut self, address: Ipv6Addr, prefix_len: u8, mtu: u32) -> Result<()> {
        // Packets for the old configuration go first.
        self.flush().await;
        self.set_up(address, prefix_len, mtu)
    }

    /// Queues a packet from the tunnel for the device (dropped while there is none); it is
    /// written by the next [`Host::flush`], or now if the batch is full.
    async fn deliver(&mut self, pkt: &[u8]) {
        if self.dev.is_none() || pkt.is_empty() || pkt.len() > 65_535 {
            return;
        }
        if self.queued == self.slots.len() {
            self.slots.push(Vec::with_capacity(SLOT_CAPACITY));
        }
        let slot = &mut self.slots[self.queued];
        slot.clear();
        slot.extend_from_slice(pkt);
        self.queued += 1;
        if self.queued >= BATCH {
            self.flush().await;
        }
    }

    /// Writes the queued packets to the device, a flow's TCP segments coalesced into one
    /// super-packet (GRO, [`gate64_io::tun::gro`]). A TUN write does not block (the kernel takes
    /// the packet or drops it), so it is done in place rather than through the reactor.
    async fn flush(&mut self) {
        let n = std::mem::take(&mut self.queued);
        let Some(dev) = &self.dev else { return };
        if n == 0 {
            return;
        }
        if !self.vnet {
            for slot in &self.slots[..n] {
                if let Err(e) = dev.send(slot).await {
                    debug!(error = %e, "TUN write failed");
                }
            }
            return;
        }
        let mut packets: [&[u8]; BATCH] = [&[]; BATCH];
        for (p, slot) in packets.iter_mut().zip(&self.slots[..n]) {
            *p = slot;
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(dev);
        let w = gate64_io::tun::gro::write_coalesced(fd, &packets[..n]);
        if w.failed > 0 {
            debug!(failed = w.failed, packets = n, "TUN write failed");
        }
    }

    async fn ready(&mut self) -> Result<Ready> {
        let Some(dev) = &self.dev else {
            return std::future::pending().await;
        };
        dev.readable().await.context("reading the TUN device")?;
        Ok(Ready::Packets)
    }

    fn take(&mut self, _now: Instant, out: &mut Vec<u8>) -> Result<bool> {
        let Some(dev) = &self.dev else {
            return Ok(false);
        };
        let n = match dev.try_recv(&mut self.gso_buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e).context("reading the TUN device"),
        };
        self.split_raw(n, out);
        Ok(true)
    }
}
