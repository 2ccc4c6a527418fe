//! The client side of gate64's transports, shared by `gate64 connect` (one client in front of
//! a TUN device) and `gate64 demo` (a population of emulated clients). A session drives a
//! sans-IO state machine ([`gate64_iphttps::ClientConnection`],
//! [`gate64_teredo::client::Client`]) over its socket; a [`Host`] stands for what sits behind
//! the tunnel, so that the same session serves the TUN device and the emulated host.

#![forbid(unsafe_code)]

pub mod connect;
pub mod iphttps;
pub mod ipsec;
pub mod teredo;

use anyhow::Result;
use std::net::Ipv6Addr;
use std::time::Instant;

/// What a client tunnels for: the TUN device of `gate64 connect`, the emulated host of a
/// `gate64 demo` client.
// The futures carry no `Send` bound: every session runs on one task and its host with it.
#[allow(async_fn_in_trait)]
pub trait Host {
    /// The tunnel is up, or its configuration changed: the host's address is
    /// `address/prefix_len` and the tunnel's MTU `mtu`.
    async fn configure(&mut self, address: Ipv6Addr, prefix_len: u8, mtu: u32) -> Result<()>;

    /// A packet from the tunnel, accepted by the client; the host may hold it until
    /// [`Host::flush`].
    async fn deliver(&mut self, packet: &[u8]);

    /// The end of a burst of packets from the tunnel (one TLS read, or the datagrams queued on
    /// the socket), so that the host can hand them on together.
    async fn flush(&mut self);

    /// A packet from the tunnel that the client refused (the session logs why).
    fn refused(&mut self) {}

    /// Waits until the host has packets for the tunnel or is done with it; pending forever
    /// when neither will happen. Cancel safe: the session waits for it beside the socket.
    async fn ready(&mut self) -> Result<Ready>;

    /// After [`Ready::Packets`]: appends what the host has for the tunnel to `out`, IPv6
    /// packets back to back. `Ok(false)` when nothing more is waiting; the session calls it
    /// until then or until it has gathered a batch.
    fn take(&mut self, now: Instant, out: &mut Vec<u8>) -> Result<bool>;
}

/// What [`Host::ready`] waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// Packets for the tunnel: call [`Host::take`].
    Packets,
    /// The host is done with the tunnel: the session ends.
    Done,
}

/// Sleeps until `at`, or forever when there is no deadline.
pub(crate) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}
