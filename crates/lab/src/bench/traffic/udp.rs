//! The UDP socket the generator's flows and its DNS queries send from.

use anyhow::{Context, Result};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use tokio::net::UdpSocket;

/// A UDP socket bound to `src` with `IPV6_FREEBIND`: the inner addresses are routed local
/// (AnyIP) in the generator's namespace, not configured on an interface.
pub(super) fn bind_udp(src: Ipv6Addr) -> Result<UdpSocket> {
    let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::DGRAM, None)?;
    s.set_freebind_v6(true)?;
    s.set_nonblocking(true)?;
    let _ = s.set_recv_buffer_size(4 << 20);
    s.bind(&SocketAddr::V6(SocketAddrV6::new(src, 0, 0, 0)).into())
        .with_context(|| format!("binding UDP to {src}"))?;
    Ok(UdpSocket::from_std(s.into())?)
}
