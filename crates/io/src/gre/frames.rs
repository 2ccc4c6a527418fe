//! The packet-socket outer path: each tunnel whose route leaves through an Ethernet interface
//! with a known next hop gets its outer packets written as whole frames (Ethernet header with
//! the next hop's address, the outer IP header built here, GRE, payload) to an `AF_PACKET`
//! socket bound to that interface, so the kernel does no route look-up and no IP output per
//! packet. The route, the interface and the neighbour are looked up once (netlink, as
//! `ip route get` and `ip neigh` show them) and again every [`REFRESH`]; a tunnel without a
//! usable path (no neighbour entry yet, a non-Ethernet interface such as loopback or a TUN,
//! no CAP_NET_RAW, a failed send) uses the raw socket and is looked up again after
//! [`RETRY`]. Each switch to the raw socket is logged with the worker's count of them.

use std::os::fd::{AsRawFd, OwnedFd};

use gate64_gre::outer::Frame;

use super::*;

/// Time between look-ups of a tunnel that has a frame path (a moved route or a new neighbour
/// address is followed within it).
pub(super) const REFRESH: Duration = Duration::from_secs(10);
/// Time between look-ups of a tunnel without one.
pub(super) const RETRY: Duration = Duration::from_secs(1);

/// One tunnel's frame path.
pub(super) struct Path {
    pub(super) frame: Frame,
    /// Index into [`Frames::sockets`].
    pub(super) socket: usize,
    /// The interface's MTU: longer outer packets go through the raw socket (which fragments
    /// or reports as the kernel does).
    pub(super) mtu: usize,
    /// Next IPv4 identification.
    pub(super) ident: u16,
}

/// One tunnel's state: its path, when it is looked up next, whether its use of the raw
/// socket was logged.
pub(super) struct Slot {
    pub(super) path: Option<Path>,
    due: Instant,
    logged: bool,
}

/// One worker's frame paths.
pub(super) struct Frames {
    enabled: bool,
    worker: usize,
    /// One packet socket per interface: (ifindex, socket).
    pub(super) sockets: Vec<(u32, OwnedFd)>,
    /// Each tunnel's state, by tunnel index.
    pub(super) slots: Vec<Slot>,
    /// Times a tunnel was left on, or moved back to, the raw socket.
    fallbacks: u64,
}

impl Frames {
    /// Frame paths for `gre`'s tunnels, looked up at the first [`Frames::refresh`]; none
    /// when not `enabled` (`[gre] outer_path = "raw"`). The packet sockets of the Ethernet
    /// interfaces the tunnels' routes leave through are opened here, while the process still
    /// has CAP_NET_RAW (the workers run without it): a route that later moves to another
    /// interface keeps its tunnel on the raw socket.
    pub(super) fn new(enabled: bool, worker: usize, gre: &Gre, now: Instant) -> Frames {
        let tunnels = gre.tunnels().count();
        let mut frames = Frames {
            enabled,
            worker,
            sockets: Vec::new(),
            slots: (0..tunnels)
                .map(|_| Slot {
                    path: None,
                    due: now,
                    logged: false,
                })
                .collect(),
            fallbacks: 0,
        };
        if enabled {
            for (_, c, _) in gre.tunnels() {
                let Ok(route) = gate64_sys::netlink::route_get(c.remote, Some(c.local)) else {
                    continue;
                };
                if gate64_sys::netlink::link_get(route.ifindex).is_ok_and(|l| l.ethernet)
                    && let Err(e) = frames.socket(route.ifindex)
                {
                    debug!(tunnel = %c.name, error = %e, "no packet socket");
                }
            }
        }
        frames
    }

    /// The index of interface `ifindex`'s packet socket, opened on first use.
    fn socket(&mut self, ifindex: u32) -> Result<usize, String> {
        if let Some(s) = self.sockets.iter().position(|(i, _)| *i == ifindex) {
            return Ok(s);
        }
        let fd = gate64_sys::packet::open_tx(ifindex, true)
            .map_err(|e| format!("packet socket (needs CAP_NET_RAW): {e}"))?;
        if sys::set_buffer_force(fd.as_raw_fd(), SOCKET_BUFFER).is_err() {
            debug!("packet socket buffer not forced");
        }
        self.sockets.push((ifindex, fd));
        Ok(self.sockets.len() - 1)
    }

    /// Tunnel `id`'s path, if it has one.
    pub(super) fn path(&mut self, id: usize) -> Option<&mut Path> {
        self.slots.get_mut(id).and_then(|s| s.path.as_mut())
    }

    /// Looks up the tunnels whose time has come.
    pub(super) fn refresh(&mut self, gre: &Gre, now: Instant) {
        if !self.enabled {
            return;
        }
        for (id, c, _) in gre.tunnels() {
            if self.slots.get(id.0).is_none_or(|s| s.due > now) {
                continue;
            }
            let looked = self.look_up(c.local, c.remote);
            let (sockets, slot) = (&self.sockets, &mut self.slots[id.0]);
            match looked {
                Ok((frame, socket, mtu)) => {
                    let had = slot.path.as_ref().map(|p| (p.frame, p.socket));
                    if had != Some((frame, socket)) {
                        info!(
                            worker = self.worker,
                            tunnel = %c.name,
                            ifindex = sockets[socket].0,
                            next_hop = %mac(&frame.dst_mac),
                            "GRE tunnel sends whole frames on a packet socket"
                        );
                    }
                    let ident = slot.path.as_ref().map_or(0, |p| p.ident);
                    slot.path = Some(Path {
                        frame,
                        socket,
                        mtu,
                        ident,
                    });
                    slot.due = now + REFRESH;
                    slot.logged = false;
                }
                Err(why) => {
                    // Logged when the tunnel first fails or loses its path, not at every retry.
                    if slot.path.take().is_some() || !slot.logged {
                        self.fallbacks += 1;
                        info!(
                            worker = self.worker,
                            tunnel = %c.name,
                            reason = %why,
                            fallbacks = self.fallbacks,
                            "GRE tunnel sends through the raw socket"
                        );
                    }
                    slot.logged = true;
                    slot.due = now + RETRY;
                }
            }
        }
    }

    /// Tunnel `id`'s frame send failed: it uses the raw socket until it is looked up again,
    /// at the next [`Frames::refresh`].
    pub(super) fn failed(&mut self, id: usize, name: &str, e: &io::Error, now: Instant) {
        if let Some(slot) = self.slots.get_mut(id) {
            if slot.path.take().is_some() {
                self.fallbacks += 1;
                slot.logged = true;
                info!(
                    worker = self.worker,
                    tunnel = %name,
                    error = %e,
                    fallbacks = self.fallbacks,
                    "GRE frame send failed; the tunnel sends through the raw socket"
                );
            }
            slot.due = now;
        }
    }

    /// The route, interface and neighbour of `remote` from `local`: the frame header, the
    /// packet socket's index (opened on first use) and the interface's MTU.
    fn look_up(&mut self, local: IpAddr, remote: IpAddr) -> Result<(Frame, usize, usize), String> {
        let route = gate64_sys::netlink::route_get(remote, Some(local))
            .map_err(|e| format!("route look-up: {e}"))?;
        let link = gate64_sys::netlink::link_get(route.ifindex)
            .map_err(|e| format!("interface look-up: {e}"))?;
        let src_mac = match (link.ethernet, link.mac) {
            (true, Some(m)) => m,
            _ => return Err(format!("interface {} is not Ethernet", route.ifindex)),
        };
        let hop = route.gateway.unwrap_or(remote);
        if hop.is_ipv4() != remote.is_ipv4() {
            return Err(format!("next hop {hop} is of another family"));
        }
        let dst_mac = gate64_sys::netlink::neighbour_get(route.ifindex, hop)
            .map_err(|e| format!("neighbour look-up: {e}"))?
            .ok_or_else(|| format!("next hop {hop} has no link-layer address yet"))?;
        let socket = self.socket(route.ifindex)?;
        let frame = Frame {
            src: local,
            dst: remote,
            src_mac,
            dst_mac,
        };
        Ok((frame, socket, link.mtu as usize))
    }
}

fn mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
