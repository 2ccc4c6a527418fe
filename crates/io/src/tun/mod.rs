//! The TUN device on the corporate side: created multi-queue (one queue per worker), brought
//! up with gate64's corporate address, and given routes for the clients' prefixes.
//!
//! Equivalent `ip` commands, for admins who want to check or pre-create the state:
//! ```text
//! ip tuntap add dev gate64 mode tun multi_queue vnet_hdr  # gate64 adds NAPI per queue
//! ip link set dev gate64 mtu 1280 txqueuelen 4096 up
//! echo 1 > /sys/class/net/gate64/threaded                  # NAPI in kernel threads
//! ip -6 addr replace 2001:db8:100::1/128 dev gate64 nodad
//! ip -6 route replace 2001:0:c000:201::/64 dev gate64   # the Teredo prefix
//! ip -4 route replace 192.0.2.64/28 dev gate64           # NAT64 pool4
//! ip -6 route replace 2001:db8:64::/96 dev gate64        # NAT64 prefix (route_prefix)
//! ip -6 addr replace 2001:db8:ffff::1/128 dev gate64 nodad  # ipsec.endpoint
//! ip -6 route replace fd00:c1::100/120 dev gate64        # ipsec.pool6
//! ```

pub mod gro;
mod link;

pub use link::CorpLink;

use gate64_sys::tun;
use gate64_wire::offload::{Slots, SplitError, split_to};
use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;

/// Packets the kernel queues per TUN queue for gate64 to read (`txqueuelen`).
pub const TX_QUEUE_LEN: u32 = 4096;
/// Bytes (skb truesize) one NAPI queue may hold between gate64's write and the packet's next
/// IP receive or transmit (`TUNSETSNDBUF`; the kernel's default is unlimited). The NAPI path
/// queues a write without a length check, so this is what bounds it if the NAPI thread falls
/// behind: a write past it fails (EAGAIN) and is counted as `tx_error`.
pub const NAPI_QUEUE_BYTES: libc::c_int = 16 << 20;

/// One queue of gate64's TUN device, opened with virtio-net headers (TSO/GRO offload).
///
/// gate64 opens the device itself rather than through tun-rs for one flag tun-rs does not
/// offer: `IFF_NAPI` (`corpnet.tun_napi`). Without it, every write runs the kernel's
/// forwarding of the packet, and the corporate host's receive behind a veth, inside the
/// writing worker's system call. With it and the device's NAPI in threaded mode
/// (`/sys/class/net/DEV/threaded`), a write queues the packet and returns; a kernel thread per
/// queue (`napi/DEV-N`) runs GRO over what was queued and forwards it, on whichever core is
/// free, as a NIC's receive path does, at the price of waking that thread per batch.
#[derive(Debug)]
pub struct TunQueue {
    file: File,
    /// The device's name and the TUNSETIFF flags, to open further queues like this one.
    name: String,
    flags: libc::c_int,
}

impl TunQueue {
    /// Opens (creating if needed) queue `name` with `flags` and TCP offloads; non-blocking.
    fn open(name: &str, flags: libc::c_int) -> io::Result<TunQueue> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        let fd = file.as_raw_fd();
        tun::set_iff(fd, name, flags)?;
        // TCP segmentation offloads only: a UDP super-packet (USO) would be one gate64 does
        // not cut, so the kernel segments UDP before handing it over.
        tun::set_offload(fd, tun::TUN_F_CSUM | tun::TUN_F_TSO4 | tun::TUN_F_TSO6)?;
        if flags & tun::IFF_NAPI != 0 {
            tun::set_sndbuf(fd, NAPI_QUEUE_BYTES)?;
        }
        Ok(TunQueue {
            file,
            name: name.to_owned(),
            flags,
        })
    }

    /// Opens one more queue of this multi-queue device, with the same flags (a NAPI thread
    /// of its own when the device's NAPI is threaded).
    pub fn another_queue(&self) -> io::Result<TunQueue> {
        TunQueue::open(&self.name, self.flags)
    }

    /// The device's MTU (SIOCGIFMTU on a datagram socket of the calling thread's namespace).
    pub fn mtu(&self) -> io::Result<u16> {
        let sock = std::net::UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, 0))
            .or_else(|_| std::net::UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)))?;
        // The name was checked to fit the kernel's field when the queue was opened.
        let mtu = tun::interface_mtu(sock.as_raw_fd(), &self.name)?;
        u16::try_from(mtu).map_err(|_| io::Error::other(format!("MTU {mtu} out of range")))
    }

    /// Reads one packet, or one TCP super-packet, into `raw` (at least
    /// [`gate64_wire::offload::VNET_HDR_LEN`] + 65,535 bytes) and cuts it into `bufs`, one
    /// packet per buffer at `offset`, its length in `sizes`. Returns how many packets; a read
    /// that cannot be cut (or does not fit) is an `InvalidData` error, the read consumed.
    pub fn recv_multiple<B: AsMut<[u8]>>(
        &self,
        raw: &mut [u8],
        bufs: &mut [B],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        let n = crate::sys::read(self.file.as_raw_fd(), raw)?;
        let mut out = Slots::new(bufs, sizes, offset);
        split_to(&raw[..n], &mut out)
            .map_err(|e: SplitError| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

impl AsRawFd for TunQueue {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Creates the TUN device `name` with `queues` queues (non-blocking), MTU `mtu`, and
/// `address/128`, and brings it up. With `napi` (`corpnet.tun_napi`) the queues use threaded
/// NAPI ([`TunQueue`]), and the call fails when the kernel or `/sys` refuses it; without, a
/// write forwards the packet in the worker's time, as a plain TUN does.
pub fn create(
    name: &str,
    mtu: u16,
    address: Ipv6Addr,
    queues: usize,
    napi: bool,
) -> io::Result<Vec<CorpLink>> {
    let links = open_device(name, queues, queues > 1, napi)?;
    tracing::info!(
        device = name,
        queues = links.len(),
        napi_threads = napi,
        "TUN device open"
    );
    // Each queue holds this many packets for its worker; the kernel's default of 500
    // dropped bursts from the corporate side (a TCP sender's window arriving while the
    // worker was busy with the client side: `tx_drop` on the device in the capacity lab).
    // Set over netlink: the SIOCSIFTXQLEN ioctl needs CAP_NET_ADMIN in the initial user
    // namespace, which `gate64 demo`'s unprivileged lab does not have.
    let qlen = TX_QUEUE_LEN.to_string();
    let mtu = mtu.to_string();
    ip(&[
        "link",
        "set",
        "dev",
        name,
        "mtu",
        &mtu,
        "txqueuelen",
        &qlen,
        "up",
    ])?;
    // A GRE-only gateway has no corporate address (`corpnet.address6` left out).
    if !address.is_unspecified() {
        add_address(address, name)?;
    }
    Ok(links.into_iter().map(CorpLink::Tun).collect())
}

/// Opens `queues` queues (at least one) of the offloading TUN device `name`, multi-queue if
/// `multi_queue` (more can be added with [`TunQueue::another_queue`]); with `napi`, also
/// switches the device's NAPI to threaded mode, and fails (closing the queues, so the device
/// goes away) with an error naming `corpnet.tun_napi` where `/sys` refuses that (a `/sys` of
/// another network namespace; a `threaded` file the process may not write, as under the
/// shipped systemd unit's unprivileged user). The device is not brought up.
pub fn open_device(
    name: &str,
    queues: usize,
    multi_queue: bool,
    napi: bool,
) -> io::Result<Vec<TunQueue>> {
    let mut flags = tun::IFF_TUN | tun::IFF_NO_PI | tun::IFF_VNET_HDR;
    if multi_queue {
        flags |= tun::IFF_MULTI_QUEUE;
    }
    if napi {
        flags |= tun::IFF_NAPI;
    }
    let mut links = Vec::with_capacity(queues);
    for _ in 0..queues.max(1) {
        links.push(
            TunQueue::open(name, flags).map_err(|e| {
                io::Error::new(e.kind(), format!("creating TUN device `{name}`: {e}"))
            })?,
        );
    }
    if napi {
        let threaded = format!("/sys/class/net/{name}/threaded");
        std::fs::write(&threaded, "1").map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "writing {threaded}: {e} (`corpnet.tun_napi = true` asks for threaded \
                     NAPI; set it to false)"
                ),
            )
        })?;
    }
    Ok(links)
}

/// Adds `address/128` to the device (`ip -6 addr replace ... nodad`), idempotently: the
/// IPsec endpoint when it is not the device's own address. No duplicate address detection,
/// so the IKE sockets can bind at once (the address is gate64's by configuration).
pub fn add_address(address: Ipv6Addr, dev: &str) -> io::Result<()> {
    let net = format!("{address}/128");
    ip(&["-6", "addr", "replace", &net, "dev", dev, "nodad"])
}

/// The nominal next hop of gate64's IPv6 routes into its TUN device. The device has no
/// link layer, so no packet is ever addressed to it; what it changes is the kernel's
/// neighbour cache. A route without a next hop makes every destination its own next hop, and
/// IPv6 keeps a neighbour entry per next hop even on a device without neighbour discovery: one
/// per client address, created and collected again as packets to tens of thousands of clients
/// go out (1,600 a second at 20,000 idle clients), each announced on rtnetlink, and beyond
/// `net.ipv6.neigh.default.gc_thresh3` (1,024) every new one forces a collection. Through one
/// next hop, all of them share one entry. (IPv4 needs nothing: it keys the neighbours of a
/// point-to-point device by no address at all.)
pub const TUN_NEXT_HOP6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

/// Routes `prefix/len` into the device through [`TUN_NEXT_HOP6`] (`ip -6 route replace ...
/// via fe80::1 dev DEV`), idempotently.
pub fn route(prefix: Ipv6Addr, len: u8, dev: &str) -> io::Result<()> {
    route_any(IpAddr::V6(prefix), len, dev)
}

/// Routes an IPv4 or IPv6 `prefix/len` into the device (`ip -4|-6 route replace`; IPv6
/// through [`TUN_NEXT_HOP6`]), idempotently.
pub fn route_any(prefix: IpAddr, len: u8, dev: &str) -> io::Result<()> {
    route_into(&format!("{prefix}/{len}"), prefix.is_ipv6(), dev, &[])
}

/// `ip -4|-6 route replace NET [via fe80::1] dev DEV EXTRA...`: the one way a route into a TUN
/// device (the corporate one, or a GRE tenant's) is made, IPv6 through [`TUN_NEXT_HOP6`];
/// `extra` adds options such as `table T mtu M`.
pub fn route_into(net: &str, ipv6: bool, dev: &str, extra: &[&str]) -> io::Result<()> {
    let via = TUN_NEXT_HOP6.to_string();
    let mut args = vec![if ipv6 { "-6" } else { "-4" }, "route", "replace", net];
    if ipv6 {
        args.extend(["via", via.as_str()]);
    }
    args.extend(["dev", dev]);
    args.extend_from_slice(extra);
    ip(&args)
}

/// Where iproute2's `ip` is looked for, in this order. gate64 runs it while it still holds
/// CAP_NET_ADMIN, so it is never looked up through `PATH` (which whoever starts gate64
/// controls), and it runs with an empty environment.
const IP_PATHS: [&str; 4] = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"];

/// The absolute path of iproute2's `ip` among [`IP_PATHS`].
fn ip_binary() -> io::Result<&'static str> {
    IP_PATHS
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("iproute2's `ip` is in none of {}", IP_PATHS.join(", ")),
            )
        })
}

/// Runs `ip args...` (iproute2, by absolute path, with an empty environment); an error names
/// the command and carries its stderr. The one runner of `ip` in gate64's daemon.
pub fn ip<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> io::Result<()> {
    let shown = || {
        args.iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let out = Command::new(ip_binary()?)
        .args(args)
        .env_clear()
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("running `ip {}`: {e}", shown())))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`ip {}` failed: {}",
            shown(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_runs_from_a_system_directory_without_path() {
        let found = ip_binary().expect("iproute2 is installed (scripts/test installs it)");
        assert!(IP_PATHS.contains(&found));
        // `ip -V` needs no privilege: the runner works with an empty environment.
        ip(&["-V"]).expect("ip -V");
        let err = ip(&["no-such-object"]).unwrap_err();
        assert!(
            err.to_string().contains("`ip no-such-object` failed"),
            "{err}"
        );
    }
}
