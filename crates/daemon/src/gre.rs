//! Starts the GRE gateway from `[[gre.tunnel]]` and `[[gre.tenant]]`: a TUN device per
//! tenant with its tunnels' routes, the tunnel table, the data-path thread, its metrics.

use anyhow::{Context, Result};
use gate64_config::Config;
use gate64_gre::{Gre, Keepalive, TenantId, TunnelConfig};
use gate64_io::gre::Gateway;
use gate64_metrics::Exporter;
use std::time::{Duration, Instant};
use tracing::info;

/// Starts the GRE data path when the configuration has tunnels (needs CAP_NET_ADMIN for the
/// devices and routes, CAP_NET_RAW for the sockets); `None` when it has none.
pub fn start(cfg: &Config, exporter: &Exporter) -> Result<Option<Gateway>> {
    let g = &cfg.gre;
    if g.tunnels.is_empty() {
        return Ok(None);
    }
    let tenant_of = |name: &str| g.tenants.iter().position(|t| t.name == name);
    let mut tunnels = Vec::with_capacity(g.tunnels.len());
    for t in &g.tunnels {
        let tenant = tenant_of(&t.tenant)
            .with_context(|| format!("gre tunnel {}: unknown tenant {}", t.name, t.tenant))?;
        tunnels.push(TunnelConfig {
            name: t.name.clone(),
            local: t.local,
            remote: t.remote,
            key: t.key,
            tenant: TenantId(tenant),
            routes: t.routes.clone(),
            send_checksum: t.checksum,
            send_sequence: t.sequence,
            keepalive: t.keepalive_secs.map(|s| Keepalive {
                interval: Duration::from_secs(s),
                retries: t.keepalive_retries,
            }),
        });
    }
    let gre = Gre::new(tunnels, Instant::now()).context("building the GRE tunnel table")?;
    let mut tuns = Vec::with_capacity(g.tenants.len());
    for tenant in &g.tenants {
        let mine = || g.tunnels.iter().filter(|t| t.tenant == tenant.name);
        let mtu = mine().map(|t| t.mtu).max().unwrap_or(1500);
        let dev = gate64_io::gre::create_tun(&tenant.tun, mtu).with_context(|| {
            format!(
                "creating TUN device `{}` for GRE tenant {} (`gre.tenant.tun`; needs CAP_NET_ADMIN)",
                tenant.tun, tenant.name
            )
        })?;
        if cfg.corpnet.manage_routes {
            for t in mine() {
                for net in &t.routes {
                    gate64_io::gre::route(*net, &tenant.tun, tenant.table, t.mtu).with_context(
                        || {
                            format!(
                                "routing {net} of GRE tunnel {} into `{}`",
                                t.name, tenant.tun
                            )
                        },
                    )?;
                }
            }
        }
        info!(tenant = %tenant.name, tun = %tenant.tun, table = tenant.table, mtu, "GRE tenant up");
        tuns.push(dev);
    }
    // One TUN queue and thread per worker (`server.workers`); see gate64_io::gre.
    let packet_sockets = g.outer_path == gate64_config::OuterPath::Packet;
    let gateway = Gateway::spawn(gre, tuns, cfg.effective_workers(), packet_sockets)
        .context("starting the GRE data path")?;
    exporter.add_gre(gateway.reader());
    info!(tunnels = g.tunnels.len(), "GRE gateway up");
    Ok(Some(gateway))
}
