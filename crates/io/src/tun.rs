//! The TUN device on the corporate side: created multi-queue (one queue per worker), brought
//! up with gate64's corporate address, and given routes for the clients' prefixes.
//!
//! Equivalent `ip` commands, for admins who want to check or pre-create the state:
//! ```text
//! ip tuntap add dev gate64 mode tun multi_queue
//! ip link set dev gate64 mtu 1280 txqueuelen 4096 up
//! ip -6 addr add 2001:db8:100::1/128 dev gate64
//! ip -6 route replace 2001:0:c000:201::/64 dev gate64   # the Teredo prefix
//! ip -4 route replace 192.0.2.64/28 dev gate64           # NAT64 pool4
//! ip -6 route replace 2001:db8:64::/96 dev gate64        # NAT64 prefix (route_prefix)
//! ip -6 addr replace 2001:db8:ffff::1/128 dev gate64 nodad  # ipsec.endpoint
//! ip -6 route replace fd00:c1::100/120 dev gate64        # ipsec.pool6
//! ```

use crate::worker::CorpLink;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::process::Command;

/// Packets the kernel queues per TUN queue for gate64 to read (`txqueuelen`).
pub const TX_QUEUE_LEN: u32 = 4096;

/// Creates the TUN device `name` with `queues` queues (non-blocking), MTU `mtu`, and
/// `address/128`, and brings it up.
pub fn create(name: &str, mtu: u16, address: Ipv6Addr, queues: usize) -> io::Result<Vec<CorpLink>> {
    let mut builder = tun_rs::DeviceBuilder::new().name(name).mtu(mtu);
    // A GRE-only gateway has no corporate address (`corpnet.address6` left out).
    if !address.is_unspecified() {
        builder = builder.ipv6(address, 128u8);
    }
    let first = builder
        .multi_queue(queues > 1)
        // virtio-net headers: the kernel hands over TCP super-packets (TSO) and takes coalesced
        // ones (GRO), so one read or write moves up to 64 KiB instead of one MTU.
        .offload(true)
        .build_sync()
        .map_err(|e| io::Error::new(e.kind(), format!("creating TUN device `{name}`: {e}")))?;
    // Each queue holds this many packets for its worker; the kernel's default of 500
    // dropped bursts from the corporate side (a TCP sender's window arriving while the
    // worker was busy with the client side: `tx_drop` on the device in the capacity lab).
    // Set over netlink: the SIOCSIFTXQLEN ioctl needs CAP_NET_ADMIN in the initial user
    // namespace, which `gate64 demo`'s unprivileged lab does not have.
    let qlen = TX_QUEUE_LEN.to_string();
    ip(&["link", "set", "dev", name, "txqueuelen", &qlen])?;
    let mut links = Vec::with_capacity(queues);
    for _ in 1..queues {
        let q = first.try_clone()?;
        q.set_nonblocking(true)?;
        links.push(CorpLink::Tun(q));
    }
    first.set_nonblocking(true)?;
    links.insert(0, CorpLink::Tun(first));
    Ok(links)
}

/// Adds `address/128` to the device (`ip -6 addr replace ... nodad`), idempotently: the
/// IPsec endpoint when it is not the device's own address. No duplicate address detection,
/// so the IKE sockets can bind at once (the address is gate64's by configuration).
pub fn add_address(address: Ipv6Addr, dev: &str) -> io::Result<()> {
    let net = format!("{address}/128");
    ip(&["-6", "addr", "replace", &net, "dev", dev, "nodad"])
}

/// Routes `prefix/len` into the device (`ip -6 route replace`), idempotently.
pub fn route(prefix: Ipv6Addr, len: u8, dev: &str) -> io::Result<()> {
    route_any(IpAddr::V6(prefix), len, dev)
}

/// Routes an IPv4 or IPv6 `prefix/len` into the device (`ip -4|-6 route replace`),
/// idempotently.
pub fn route_any(prefix: IpAddr, len: u8, dev: &str) -> io::Result<()> {
    let family = if prefix.is_ipv4() { "-4" } else { "-6" };
    let net = format!("{prefix}/{len}");
    ip(&[family, "route", "replace", &net, "dev", dev])
}

/// Runs `ip args...` (iproute2); an error names the command and carries its stderr.
pub fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("running `ip {}`: {e}", args.join(" "))))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
