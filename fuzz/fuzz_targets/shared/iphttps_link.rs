//! An IP-HTTPS link for the dataplane targets: a connection whose link is up, and a send
//! queue for its replies, so that `handle_iphttps` judges and routes as the driver's does.

use gate64_dataplane::ClientQueue;
use gate64_iphttps::ClientConnection;
use gate64_iphttps::server::{Connection, Handshake, ServerConfig};
use gate64_wire::ipv6;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::Instant;

/// The link's own replies (RA, NA): IPv6, to its client.
pub struct Replies;

impl ClientQueue for Replies {
    fn push(&self, packet: &[u8]) -> bool {
        ipv6::Packet::new_checked(packet).expect("a reply is IPv6");
        true
    }
}

/// An IP-HTTPS connection of the /64 `prefix`, its link up at `now`.
pub fn link_up(prefix: Ipv6Addr, now: Instant) -> Connection {
    let cfg = ServerConfig::default();
    let request = ClientConnection::new(&cfg.path, "gate64.fuzz", 1).request();
    let mut conn = Connection::new(Arc::new(cfg), prefix, now);
    let up = conn.handle_input(
        now,
        &request,
        "Sun, 06 Nov 1994 08:49:37 GMT",
        &mut Vec::new(),
    );
    assert!(matches!(up, Ok(Handshake::LinkUp { .. })), "{up:?}");
    conn
}
