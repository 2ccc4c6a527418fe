//! Inner routes per tenant: which tunnel carries a packet read from a tenant's routing
//! domain. Longest prefix match over a short list per tenant (site-to-site gateways carry a
//! handful of prefixes per tunnel), sorted longest first so the first match wins.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::{TenantId, TunnelId};

/// The tunnels' inner prefixes, per tenant.
#[derive(Debug, Default, Clone)]
pub struct Routes {
    by_tenant: Vec<Vec<(IpNet, TunnelId)>>,
}

impl Routes {
    /// Adds `net` via `tunnel` to `tenant`'s routes.
    pub fn insert(&mut self, tenant: TenantId, net: IpNet, tunnel: TunnelId) {
        if self.by_tenant.len() <= tenant.0 {
            self.by_tenant.resize_with(tenant.0 + 1, Vec::new);
        }
        let list = &mut self.by_tenant[tenant.0];
        list.push((net.trunc(), tunnel));
        list.sort_by_key(|(n, _)| std::cmp::Reverse(n.prefix_len()));
    }

    /// The tunnel of the longest of `tenant`'s prefixes that holds `dst`.
    pub fn lookup(&self, tenant: TenantId, dst: IpAddr) -> Option<TunnelId> {
        self.by_tenant
            .get(tenant.0)?
            .iter()
            .find(|(n, _)| n.contains(&dst))
            .map(|(_, t)| *t)
    }
}
