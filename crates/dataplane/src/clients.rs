//! The IP-HTTPS client table: each connection owns one /64 of the IP-HTTPS prefix, and packets
//! for it go into that connection's bounded send queue. A [`DashMap`]: one shard lock per
//! lookup, never a global one.

use dashmap::DashMap;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Shards; a power of two well above the worker count keeps contention negligible.
const SHARDS: usize = 64;

/// A connection's bounded send queue. `push` copies the packet (the one copy between the TUN
/// and the TLS stream) and returns false when the queue is full; the caller drops and counts.
pub trait ClientQueue: Send + Sync {
    /// Queues `packet`; false when full or closed.
    fn push(&self, packet: &[u8]) -> bool;

    /// Ends the connection behind the queue (an administrator's disconnect, a revoked
    /// client): it takes no more packets and closes once what it holds is written. Queues
    /// without a connection (test doubles) need not do anything.
    fn close(&self) {}
}

/// What happened to a packet offered to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Queued for the connection.
    Queued,
    /// The connection's queue is full.
    QueueFull,
    /// No connection owns that /64.
    NoClient,
}

/// The one memory budget of every IP-HTTPS send queue: a queue reserves a packet's bytes
/// here before it takes the packet and gives them back once the bytes left for the socket,
/// so clients that stop reading cannot make the process grow past it. One atomic, no lock.
#[derive(Debug)]
pub struct QueueBudget {
    used: AtomicUsize,
    limit: AtomicUsize,
}

impl Default for QueueBudget {
    /// No bound until the IP-HTTPS server sets one.
    fn default() -> Self {
        QueueBudget {
            used: AtomicUsize::new(0),
            limit: AtomicUsize::new(usize::MAX),
        }
    }
}

impl QueueBudget {
    /// Sets the bound (`iphttps.queue_budget_bytes`); bytes already reserved stay reserved.
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    /// The bound.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Bytes reserved now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Reserves `bytes`; false (nothing reserved) when that would pass the bound.
    pub fn try_reserve(&self, bytes: usize) -> bool {
        let limit = self.limit();
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(bytes).filter(|&n| n <= limit)
            })
            .is_ok()
    }

    /// Gives back `bytes` reserved earlier.
    pub fn release(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(bytes))
            });
    }
}

/// /64 → connection queue.
pub struct ClientTable {
    table: DashMap<u64, Arc<dyn ClientQueue>>,
    budget: Arc<QueueBudget>,
}

impl std::fmt::Debug for ClientTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTable")
            .field("len", &self.len())
            .finish()
    }
}

impl Default for ClientTable {
    fn default() -> Self {
        ClientTable {
            table: DashMap::with_shard_amount(SHARDS),
            budget: Arc::default(),
        }
    }
}

fn key(a: &Ipv6Addr) -> u64 {
    (u128::from(*a) >> 64) as u64
}

impl ClientTable {
    /// Registers the connection owning the /64 of `prefix`, replacing any previous owner.
    pub fn insert(&self, prefix: Ipv6Addr, queue: Arc<dyn ClientQueue>) {
        self.table.insert(key(&prefix), queue);
    }

    /// Unregisters the /64 of `prefix`.
    pub fn remove(&self, prefix: Ipv6Addr) {
        self.table.remove(&key(&prefix));
    }

    /// Closes the connection owning `addr`'s /64 ([`ClientQueue::close`]); false when no
    /// connection owns it. The connection unregisters itself as it ends.
    pub fn close(&self, addr: &Ipv6Addr) -> bool {
        match self.table.get(&key(addr)) {
            Some(q) => {
                q.close();
                true
            }
            None => false,
        }
    }

    /// Offers `packet` to the connection owning `dst`'s /64; one shard read lock, no allocation.
    pub fn deliver(&self, dst: &Ipv6Addr, packet: &[u8]) -> Delivery {
        match self.table.get(&key(dst)) {
            Some(q) if q.push(packet) => Delivery::Queued,
            Some(_) => Delivery::QueueFull,
            None => Delivery::NoClient,
        }
    }

    /// Connections registered.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when no connection is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The memory budget the connections' queues share.
    pub fn budget(&self) -> &Arc<QueueBudget> {
        &self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Q(Mutex<Vec<Vec<u8>>>, usize);
    impl ClientQueue for Q {
        fn push(&self, p: &[u8]) -> bool {
            let mut v = self.0.lock().unwrap();
            if v.len() >= self.1 {
                return false;
            }
            v.push(p.to_vec());
            true
        }
    }

    #[test]
    fn deliver_by_64_and_bounded() {
        let t = ClientTable::default();
        let q = Arc::new(Q(Mutex::new(Vec::new()), 1));
        t.insert("2001:db8:1:5::".parse().unwrap(), q.clone());
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.deliver(&"2001:db8:1:5::abcd".parse().unwrap(), b"x"),
            Delivery::Queued
        );
        assert_eq!(
            t.deliver(&"2001:db8:1:5::1".parse().unwrap(), b"y"),
            Delivery::QueueFull
        );
        assert_eq!(
            t.deliver(&"2001:db8:1:6::1".parse().unwrap(), b"z"),
            Delivery::NoClient
        );
        t.remove("2001:db8:1:5::".parse().unwrap());
        assert!(t.is_empty());
        assert_eq!(q.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn the_budget_refuses_past_its_limit_and_takes_back_releases() {
        let b = QueueBudget::default();
        assert!(b.try_reserve(1 << 40), "unbounded until a limit is set");
        b.release(1 << 40);
        b.set_limit(1000);
        assert!(b.try_reserve(600));
        assert!(!b.try_reserve(401));
        assert_eq!(b.used(), 600);
        assert!(b.try_reserve(400));
        b.release(1000);
        assert_eq!(b.used(), 0);
        b.release(5);
        assert_eq!(b.used(), 0, "never below zero");
    }

    #[test]
    fn insert_replaces_the_owner_of_a_64() {
        let t = ClientTable::default();
        let old = Arc::new(Q(Mutex::new(Vec::new()), 8));
        let new = Arc::new(Q(Mutex::new(Vec::new()), 8));
        t.insert("2001:db8:1:5::".parse().unwrap(), old.clone());
        t.insert("2001:db8:1:5::1".parse().unwrap(), new.clone());
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.deliver(&"2001:db8:1:5::abcd".parse().unwrap(), b"x"),
            Delivery::Queued
        );
        assert!(old.0.lock().unwrap().is_empty());
        assert_eq!(new.0.lock().unwrap().len(), 1);
        t.remove("2001:db8:1:5::".parse().unwrap());
        t.remove("2001:db8:1:5::".parse().unwrap());
        assert!(t.is_empty());
    }
}
