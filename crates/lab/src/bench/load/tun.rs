//! The generator's one TUN device and the kernel routing around it: the corporate prefixes
//! into the device, the inner address pool local (AnyIP, so kernel sockets bind any inner
//! address and gate64's replies are delivered locally, with no per-address `ip addr`), and
//! the write of one packet to it.

use super::spec::Spec;
use anyhow::{Context, Result};
use gate64_client::ipsec::OVERHEAD;
use gate64_io::tun::ip;
use std::sync::Arc;

/// The device's MTU: IPv6's minimum, which a sealed packet plus its transport's headers
/// still crosses (Teredo and IP-HTTPS announce 1280).
pub const MTU: u16 = 1280;
/// Lets sockets of the namespace bind addresses that are not configured (the pool's).
const NONLOCAL_BIND: &str = "/proc/sys/net/ipv6/ip_nonlocal_bind";

/// The TCP MSS routes into the device announce: a sealed segment (inner IPv6 40 + TCP 20 +
/// options 20, plus [`OVERHEAD`]) within the transport's 1280.
pub fn mss() -> u16 {
    u16::try_from(usize::from(MTU).saturating_sub(OVERHEAD + 80)).unwrap_or(536)
}

/// Creates the device and routes `corp_prefixes` into it and `pool6` to `lo`.
pub fn set_up(spec: &Spec) -> Result<Arc<tun_rs::AsyncDevice>> {
    let dev = tun_rs::DeviceBuilder::new()
        .name(&spec.tun)
        .mtu(MTU)
        .multi_queue(false)
        .packet_information(false)
        // virtio-net headers: the flows' TCP segments come up to 64 KiB per read (TSO), so
        // neither the kernel (software GSO) nor this reader pays per segment for the
        // generator's own side of the load; the reader cuts them to MSS-sized packets.
        .offload(true)
        .enable(true)
        .build_async()
        .with_context(|| {
            format!(
                "`tun`: creating TUN device {:?} (needs CAP_NET_ADMIN)",
                spec.tun
            )
        })?;
    // Room for bursts while the one reader is busy: the default 500 dropped uplink packets
    // (`tx_drop`) at 1,500 clients. Over netlink, as gate64's own TUN (`gate64_io::tun`):
    // the ioctl needs CAP_NET_ADMIN in the initial user namespace, which `gate64 demo` lacks.
    ip(&["link", "set", "dev", &spec.tun, "txqueuelen", "4096"]).context("`tun`")?;
    let mss = mss().to_string();
    for prefix in &spec.corp_prefixes {
        ip(&[
            "-6",
            "route",
            "replace",
            &prefix.to_string(),
            "dev",
            &spec.tun,
            "advmss",
            &mss,
        ])
        .context("`corp_prefixes`")?;
    }
    ip(&[
        "-6",
        "route",
        "replace",
        "local",
        &spec.pool6.to_string(),
        "dev",
        "lo",
    ])
    .context("`pool6`")?;
    // IPv6 binds only configured addresses, not those of a local route, unless a socket
    // asks for IPV6_FREEBIND: this namespace-wide switch spares every flow the option.
    std::fs::write(NONLOCAL_BIND, "1").with_context(|| format!("writing 1 to {NONLOCAL_BIND}"))?;
    Ok(Arc::new(dev))
}

/// Removes the AnyIP route of `pool6` (the device's routes go with the device).
pub fn tear_down(spec: &Spec) {
    let _ = ip(&[
        "-6",
        "route",
        "del",
        "local",
        &spec.pool6.to_string(),
        "dev",
        "lo",
    ]);
}

/// Writes one packet to the offloading device (a header that asks for nothing, then the
/// packet). A TUN write does not block: the kernel takes the packet or drops it.
pub fn write(dev: &tun_rs::AsyncDevice, packet: &[u8]) -> bool {
    let bufs = [
        std::io::IoSlice::new(&gate64_io::tun::gro::NO_OFFLOAD_HDR),
        std::io::IoSlice::new(packet),
    ];
    dev.try_send_vectored(&bufs).is_ok()
}
