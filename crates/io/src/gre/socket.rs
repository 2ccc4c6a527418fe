//! The GRE workers' raw sockets: one per local outer address, bound (and, to send before the
//! address is on the host, connected to loopback) by the gateway.

use super::*;

/// One raw socket per local outer address.
pub(super) struct RawSocket {
    pub(super) local: IpAddr,
    pub(super) socket: Socket,
    /// A send-only socket not connected to loopback yet ([`connect_to_loopback`]): its local
    /// address was not on the host (a backup node before keepalived moves it in).
    pub(super) unconnected: bool,
}

/// The tunnels' local outer addresses, each once, in tunnel order.
pub(super) fn local_addresses(gre: &Gre) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for (_, c, _) in gre.tunnels() {
        if !out.contains(&c.local) {
            out.push(c.local);
        }
    }
    out
}

/// One raw socket per address of `locals`. A socket that does not `receive` only sends: a
/// filter that accepts nothing keeps the kernel from queueing it a copy of every GRE packet.
pub(super) fn bind_sockets(locals: &[IpAddr], receive: bool) -> io::Result<Vec<RawSocket>> {
    let mut out: Vec<RawSocket> = Vec::new();
    for &local in locals {
        let domain = if local.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let protocol = Protocol::from(i32::from(gate64_wire::gre::IP_PROTOCOL));
        let s = Socket::new(domain, Type::RAW, Some(protocol)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("opening a raw GRE socket (needs CAP_NET_RAW): {e}"),
            )
        })?;
        if !receive {
            // BPF_RET | BPF_K with 0: keep no byte of any packet.
            s.attach_filter(&[socket2::SockFilter::new(0x06, 0, 0, 0)])?;
        }
        if local.is_ipv4() {
            s.set_freebind_v4(true)?;
        } else {
            s.set_freebind_v6(true)?;
        }
        s.set_nonblocking(true)?;
        if sys::set_buffer_force(s.as_raw_fd(), SOCKET_BUFFER).is_err() {
            let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
            let _ = s.set_send_buffer_size(SOCKET_BUFFER);
        }
        s.bind(&SocketAddr::new(local, 0).into()).map_err(|e| {
            io::Error::new(e.kind(), format!("binding the GRE socket to {local}: {e}"))
        })?;
        let unconnected = !receive && !connect_to_loopback(&s, local);
        debug!(%local, receive, unconnected, "GRE socket up");
        out.push(RawSocket {
            local,
            socket: s,
            unconnected,
        });
    }
    Ok(out)
}

/// Connects the send-only socket `s` (bound to `local`) to the loopback address; whether it
/// did. The kernel clones every GRE packet for each raw protocol-47 socket whose bound and
/// connected addresses match it, before any filter runs, and no GRE packet from the wire
/// comes from loopback, so a connected send-only socket is cloned none (`sendmmsg` still
/// names each packet's destination). The connect looks a route up from `local`, which fails
/// while `local` is not on the host; the worker then retries ([`Engine::retry_connects`]).
pub(super) fn connect_to_loopback(s: &Socket, local: IpAddr) -> bool {
    let loopback = if local.is_ipv4() {
        IpAddr::from(std::net::Ipv4Addr::LOCALHOST)
    } else {
        IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
    };
    match s.connect(&SocketAddr::new(loopback, 0).into()) {
        Ok(()) => true,
        Err(e) => {
            debug!(%local, error = %e, "GRE send socket not connected to loopback yet");
            false
        }
    }
}
