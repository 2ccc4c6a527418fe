//! A connection's /64: taken from the pool at the TLS handshake, moved to the /64 the client
//! held before when its first Router Solicitation names a bound interface id (or one the HA
//! peer's IKE SAs name, [`LeaseHints`]), registered in the dataplane's client table with the
//! link's send queue, and given back whichever way the connection ends.

use super::queue::SendQueue;
use super::{IphttpsServer, MAX_PACKET, Tls};
use gate64_dataplane::ClientQueue;
use gate64_iphttps::framing;
use gate64_iphttps::server::{Claim, Connection, Hint, PrefixPool, solicitation_interface_id};
use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, ReadHalf};

/// How long a link waits for its first packet before it advertises the /64 it holds: a client
/// solicits a router at once (RFC 4861 §6.3.7), and its first solicitation decides the /64.
const FIRST_RS_WAIT: Duration = Duration::from_secs(1);
/// Most interface ids [`LeaseHints`] holds: the HA store's bound on IKE SA records.
const MAX_HINTS: usize = 262_144;

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

    /// Moves the lease (not yet registered) to the /64 bound to `iid`, or hinted for it,
    /// when no link holds that one; counts the outcome.
    fn claim(&mut self, iid: u64) -> Claim {
        debug_assert!(!self.registered);
        let hint = self.server.hints.as_ref().and_then(|h| h.get(iid));
        let claim = lock_pool(&self.server.pool).claim(self.prefix, iid, hint, Instant::now());
        let stats = self.server.stats();
        match claim {
            Claim::Reclaimed(prefix) => {
                self.prefix = prefix;
                stats.iphttps_prefix_reclaimed.inc();
            }
            Claim::InUse => stats.iphttps_prefix_in_use.inc(),
            Claim::Kept => {}
        }
        claim
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.unregister();
        lock_pool(&self.server.pool).release(self.prefix, Instant::now());
    }
}

/// The pool, whichever task last used it: `allocate`, `claim` and `release` leave it whole.
pub(super) fn lock_pool(pool: &Mutex<PrefixPool>) -> MutexGuard<'_, PrefixPool> {
    pool.lock().unwrap_or_else(PoisonError::into_inner)
}

impl IphttpsServer {
    /// Before the link's first RA: reads (at most [`FIRST_RS_WAIT`], at most one packet
    /// into `partial`) until the client's first packet is whole, and when it is a Router
    /// Solicitation from `fe80::<iid>`, moves `lease` and `conn` to the /64 `iid` held before
    /// if [`PrefixPool::claim`] grants it. `None` when the stream ended meanwhile.
    pub(super) async fn settle_prefix(
        &self,
        lease: &mut Lease,
        conn: &mut Connection,
        rd: &mut ReadHalf<Tls>,
        partial: &mut Vec<u8>,
    ) -> Option<()> {
        let until = tokio::time::Instant::now() + FIRST_RS_WAIT;
        let mut chunk = [0u8; 512];
        let iid = loop {
            match framing::next_packet(partial) {
                Ok(Some(len)) => break partial.get(..len).and_then(solicitation_interface_id),
                // Not IPv6: the link's own input closes it.
                Err(_) => break None,
                Ok(None) if partial.len() >= MAX_PACKET => break None,
                Ok(None) => {}
            }
            let want = chunk.len().min(MAX_PACKET - partial.len());
            match tokio::time::timeout_at(until, rd.read(&mut chunk[..want])).await {
                Err(_) => break None,
                Ok(Ok(0)) | Ok(Err(_)) => return None,
                Ok(Ok(n)) => partial.extend_from_slice(&chunk[..n]),
            }
        };
        let Some(iid) = iid else {
            return Some(());
        };
        let held = lease.prefix;
        let claim = lease.claim(iid);
        if let Claim::Reclaimed(prefix) = claim {
            // Nothing was judged or advertised on the link yet.
            let _ = conn.readdress(prefix);
        }
        tracing::debug!(iid = %format!("{iid:016x}"), %held, ?claim, "IP-HTTPS link's /64 by its interface id");
        Some(())
    }
}

/// The /64 each interface id had on the HA peer, from the remote addresses of the IKE SAs it
/// synced ([`LeaseHints::publish`]), with when the newest of those IKE SAs was made: what a
/// standby that takes the SAs over gives a reconnecting IP-HTTPS client unless the client
/// took a /64 on this node after that. An interface id seen in two /64s gives no hint.
/// Bounded by [`MAX_HINTS`].
///
/// A publish builds the new map outside the lock, holds the lock only to swap it in, and
/// frees the old map after: a link's lookup never waits for a build or a free of up to
/// [`MAX_HINTS`] entries.
#[derive(Default)]
pub struct LeaseHints(Mutex<HintMap>);

/// Interface id → the /64's upper half and when the newest IKE SA naming it was made;
/// `None` when the interface id was seen in two /64s.
type HintMap = HashMap<u64, Option<(u64, Instant)>>;

impl LeaseHints {
    /// Replaces the hints with those of `remotes`: each IKE SA's remote address (the pool
    /// ignores those outside it) and when the peer made that IKE SA.
    pub fn publish(&self, remotes: impl IntoIterator<Item = (Ipv6Addr, Instant)>) {
        let mut map = HintMap::new();
        for (a, made) in remotes {
            let (hi, iid) = ((u128::from(a) >> 64) as u64, u128::from(a) as u64);
            if map.len() >= MAX_HINTS && !map.contains_key(&iid) {
                break;
            }
            let e = map.entry(iid).or_insert(Some((hi, made)));
            *e = match *e {
                Some((h, since)) if h == hi => Some((h, since.max(made))),
                _ => None,
            };
        }
        let replaced = std::mem::replace(
            &mut *self.0.lock().unwrap_or_else(PoisonError::into_inner),
            map,
        );
        // The previous map is freed here, after the lock.
        drop(replaced);
    }

    /// The /64 hinted for `iid`, and since when.
    pub fn get(&self, iid: u64) -> Option<Hint> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (hi, since) = (*map.get(&iid)?)?;
        Some(Hint {
            prefix: Ipv6Addr::from(u128::from(hi) << 64),
            since,
        })
    }

    /// Interface ids hinted.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// No hints.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for LeaseHints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseHints")
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().expect("address")
    }

    #[test]
    fn a_hint_is_as_new_as_the_newest_ike_sa_naming_its_64() {
        let hints = LeaseHints::default();
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(5), t0 + Duration::from_secs(9));
        let iid = 0x1111_2222_3333_4444;
        let addr = a("2001:db8:1:7:1111:2222:3333:4444");
        hints.publish([(addr, t0)]);
        let first = hints.get(iid).expect("hinted");
        assert_eq!((first.prefix, first.since), (a("2001:db8:1:7::"), t0));
        // Both tunnels' IKE SAs name the /64: the newer one counts, in either order.
        for pair in [[(addr, t1), (addr, t0)], [(addr, t0), (addr, t1)]] {
            hints.publish(pair.into_iter().chain([(a("2001:db8:1:8::1"), t2)]));
            assert_eq!(hints.get(iid).map(|h| h.since), Some(t1));
            assert_eq!(hints.get(1).map(|h| h.since), Some(t2));
        }
        // Another /64 for the interface id: that one.
        hints.publish([(a("2001:db8:1:9:1111:2222:3333:4444"), t0)]);
        let moved = hints.get(iid).expect("hinted");
        assert_eq!((moved.prefix, moved.since), (a("2001:db8:1:9::"), t0));
        assert!(hints.get(1).is_none(), "gone from the records");
        // An interface id in two /64s gives none, whatever comes after.
        hints.publish([
            (a("2001:db8:1:9:1111:2222:3333:4444"), t0),
            (a("2001:db8:1:a:1111:2222:3333:4444"), t1),
            (a("2001:db8:1:9:1111:2222:3333:4444"), t2),
        ]);
        assert!(hints.get(iid).is_none());
        assert_eq!(hints.len(), 1);
    }
}
