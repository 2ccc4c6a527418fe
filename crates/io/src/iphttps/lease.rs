//! A connection's /64: taken from the pool at link-up, registered in the dataplane's client
//! table with the link's send queue, and given back whichever way the connection ends.

use super::IphttpsServer;
use super::queue::SendQueue;
use gate64_dataplane::ClientQueue;
use gate64_iphttps::server::PrefixPool;
use std::net::Ipv6Addr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A connection's /64, from the pool until dropped: then out of the client table and back to
/// the pool, whichever way the connection ended.
pub(super) struct Lease {
    server: Arc<IphttpsServer>,
    pub(super) prefix: Ipv6Addr,
    registered: bool,
}

impl Lease {
    pub(super) fn take(server: &Arc<IphttpsServer>) -> Option<Lease> {
        let prefix = lock_pool(&server.pool).allocate()?;
        Some(Lease {
            server: Arc::clone(server),
            prefix,
            registered: false,
        })
    }

    /// Routes the /64 to `queue`.
    pub(super) fn register(&mut self, queue: Arc<SendQueue>) {
        self.server
            .shared
            .iphttps_clients()
            .insert(self.prefix, queue as Arc<dyn ClientQueue>);
        self.registered = true;
    }

    /// Stops routing the /64 to the connection (it stays leased).
    pub(super) fn unregister(&mut self) {
        if std::mem::replace(&mut self.registered, false) {
            self.server.shared.iphttps_clients().remove(self.prefix);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.unregister();
        lock_pool(&self.server.pool).release(self.prefix);
    }
}

/// The pool, whichever task last used it: `allocate` and `release` leave it whole.
pub(super) fn lock_pool(pool: &Mutex<PrefixPool>) -> MutexGuard<'_, PrefixPool> {
    pool.lock().unwrap_or_else(PoisonError::into_inner)
}
