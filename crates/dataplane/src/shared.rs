//! State every worker shares: the configuration, the Teredo server, the relay's peer table
//! and the IP-HTTPS client table. Workers and the IP-HTTPS driver hold it in an `Arc`.

use crate::clients::ClientTable;
use crate::{DataplaneConfig, Gauges, Nat64Gauges};
use gate64_teredo::{Peers, Server};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// State shared by all workers: the server and the sharded peer table.
#[derive(Debug)]
pub struct Shared {
    pub(crate) cfg: DataplaneConfig,
    pub(crate) server: Option<Server>,
    pub(crate) peers: Peers,
    pub(crate) iphttps: ClientTable,
    /// `cfg.require_ipsec` as the policy reads it: a reload (SIGHUP) may change it.
    pub(crate) require_ipsec: AtomicBool,
}

impl Shared {
    /// Builds the shared state.
    pub fn new(cfg: DataplaneConfig) -> Arc<Self> {
        let server = cfg.teredo.clone().map(Server::new);
        let peers = Peers::new(cfg.relay.clone());
        Arc::new(Shared {
            require_ipsec: AtomicBool::new(cfg.require_ipsec),
            cfg,
            server,
            peers,
            iphttps: ClientTable::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DataplaneConfig {
        &self.cfg
    }

    /// Whether the policy admits clients into the corporate network, NAT64, DNS64 and other
    /// clients only out of a child SA (`[ipsec] require`; `false` is the lab switch).
    pub fn require_ipsec(&self) -> bool {
        self.require_ipsec.load(Ordering::Relaxed)
    }

    /// Changes [`Shared::require_ipsec`] for the packets routed from now on (a reload).
    pub fn set_require_ipsec(&self, require: bool) {
        self.require_ipsec.store(require, Ordering::Relaxed);
    }

    /// The Teredo server, when enabled.
    pub fn teredo(&self) -> Option<&Server> {
        self.server.as_ref()
    }

    /// The child SAs the workers open and seal with (the IKE driver installs them); `None`
    /// while IPsec is not configured.
    pub fn sadb(&self) -> Option<&Arc<gate64_esp::SaDb>> {
        self.cfg.sadb.as_ref()
    }

    /// The IP-HTTPS client table (connections register their /64 here).
    pub fn iphttps_clients(&self) -> &ClientTable {
        &self.iphttps
    }

    /// Gauges for the exporter.
    pub fn gauges(&self, now: Instant) -> Gauges {
        let (valid, total) = self.peers.count(now);
        let nat = self.cfg.nat64.as_ref().map(|n| (n.stats(), n.capacity()));
        Gauges {
            teredo_clients: valid as u64,
            teredo_peers: total as u64,
            iphttps_clients: self.iphttps.len() as u64,
            iphttps_queued_bytes: self.iphttps.budget().used() as u64,
            iphttps_queue_budget_bytes: self.iphttps.budget().limit() as u64,
            nat64: nat.map(|(s, capacity)| Nat64Gauges {
                bib_entries: s.bib_by_proto.map(|n| n as u64),
                sessions: s.sessions_by_proto.map(|n| n as u64),
                pool_capacity: capacity,
                pool_exhausted: s.pool_exhausted,
            }),
        }
    }
}
