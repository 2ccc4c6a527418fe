//! gate64's I/O drivers: the Teredo UDP sockets, the multi-queue TUN device and the worker
//! threads that move packets between them through the sans-IO dataplane, and the drivers of
//! IP-HTTPS, IKE, DNS64, GRE and the metrics listener, one folder each. Protocol decisions are
//! the sans-IO crates' (both transports' stages are the dataplane's); what a driver still
//! decides itself (IKE's per-source shedding, the OCSP rule, IP-HTTPS admission) says so in
//! its module.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod batch;
pub mod dns64;
pub mod gre;
pub mod ike;
pub mod iphttps;
pub mod logs;
pub mod metrics_http;
pub mod radius;
pub mod ratelog;
pub mod sys;
pub mod tls;
pub mod tun;
pub mod udp;

pub use tun::CorpLink;
pub use udp::{WorkerIo, Workers, bind_teredo_socket, clone_sockets, worker_ios};

/// True when the kernel forwards IPv6 (`net.ipv6.conf.all.forwarding`); `None` if unknown.
pub fn ipv6_forwarding() -> Option<bool> {
    std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/forwarding")
        .ok()
        .map(|s| s.trim() == "1")
}

/// Whether the kernel forwards IPv4 (`net.ipv4.ip_forward`); `None` if unreadable. NAT64
/// needs it: translated packets enter the kernel from the TUN and leave on another interface.
pub fn ipv4_forwarding() -> Option<bool> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward")
        .ok()
        .map(|s| s.trim() == "1")
}
