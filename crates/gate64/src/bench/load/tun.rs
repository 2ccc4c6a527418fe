//! The generator's one TUN device and the kernel routing around it: the corporate prefixes
//! into the device, the inner address pool local (AnyIP, so kernel sockets bind any inner
//! address and gate64's replies are delivered locally, with no per-address `ip addr`), and
//! the reader that hands each packet to its client.

use super::fleet::Fleet;
use super::spec::Spec;
use crate::client::ipsec::OVERHEAD;
use anyhow::{Context, Result};
use std::sync::Arc;

/// The device's MTU: IPv6's minimum, which a sealed packet plus its transport's headers
/// still crosses (Teredo and IP-HTTPS announce 1280).
pub const MTU: u16 = 1280;
/// Lets sockets of the namespace bind addresses that are not configured (the pool's).
const NONLOCAL_BIND: &str = "/proc/sys/net/ipv6/ip_nonlocal_bind";
/// Packets taken from the device per wake-up before yielding.
const READ_BUDGET: usize = 256;
/// The largest packet read (the device does no offload: one packet per read).
const READ_BUFFER: usize = 65_535;

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

/// Reads the device for as long as it exists, handing each packet to its client.
pub async fn read_loop(dev: Arc<tun_rs::AsyncDevice>, fleet: Arc<Fleet>) -> Result<()> {
    let mut buf = vec![0u8; READ_BUFFER];
    loop {
        let n = dev.recv(&mut buf).await.context("reading the TUN device")?;
        fleet.demux(&buf[..n.min(buf.len())]);
        for _ in 1..READ_BUDGET {
            match dev.try_recv(&mut buf) {
                Ok(n) => fleet.demux(&buf[..n.min(buf.len())]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e).context("reading the TUN device"),
            }
        }
    }
}

/// Runs `ip ARGS`, failing with its error output.
fn ip(args: &[&str]) -> Result<()> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .with_context(|| format!("running `ip {}`", args.join(" ")))?;
    anyhow::ensure!(
        out.status.success(),
        "`ip {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}
