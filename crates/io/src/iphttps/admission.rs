//! Who may hold an IP-HTTPS connection: the global connection limit and, per source (an IPv4
//! address, an IPv6 /64: what one host controls), a limit on connections before link-up and
//! one on connections at all; and per network (an IPv4 /24, an IPv6 /48: what one site or
//! one hosting customer typically holds), a limit on connections before link-up, so that a
//! few hosts of one network cannot take every handshake slot between them. Checked once at
//! accept, before any work is spent; a [`Slot`] holds the counts and gives them back when
//! dropped, so a connection task that ends in any way (a panic included) frees them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The limits, from `[limits]` and `[iphttps]`.
#[derive(Debug, Clone, Copy)]
pub(super) struct AdmissionLimits {
    /// Connections at once (`limits.max_iphttps_connections`).
    pub connections: usize,
    /// Connections before link-up per source (`iphttps.max_handshakes_per_source`).
    pub handshakes_per_source: usize,
    /// Connections before link-up per network (`iphttps.max_handshakes_per_network`).
    pub handshakes_per_network: usize,
    /// Connections per source (`iphttps.max_connections_per_source`).
    pub connections_per_source: usize,
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// `limits.max_iphttps_connections` reached.
    Busy,
    /// The source has `max_handshakes_per_source` connections before link-up.
    SourceHandshakes,
    /// The source's network has `max_handshakes_per_network` connections before link-up.
    NetworkHandshakes,
    /// The source has `max_connections_per_source` connections.
    SourceConnections,
}

/// The counts of every connection.
#[derive(Debug)]
pub(super) struct Admission {
    /// The [`AdmissionLimits`], which a reload may change.
    max_connections: AtomicUsize,
    max_handshakes_per_source: AtomicUsize,
    max_handshakes_per_network: AtomicUsize,
    max_connections_per_source: AtomicUsize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    connections: usize,
    /// Only sources with a connection: the map is bounded by the connection limit.
    sources: HashMap<u128, PerSource>,
    /// Connections before link-up per network; only networks with one.
    networks: HashMap<u128, usize>,
}

#[derive(Debug, Default, Clone, Copy)]
struct PerSource {
    connections: usize,
    handshakes: usize,
}

/// The host a connection comes from: an IPv4 address, or the /64 of an IPv6 one (a host
/// picks any address of its /64). IPv4-mapped IPv6 peers of a dual-stack listener count as
/// their IPv4 address.
fn source_key(peer: IpAddr) -> u128 {
    match peer.to_canonical() {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a) & !u128::from(u64::MAX),
    }
}

/// The network a connection comes from: the IPv4 /24 or the IPv6 /48 of its source.
fn network_key(peer: IpAddr) -> u128 {
    match peer.to_canonical() {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()) & !0xff,
        IpAddr::V6(a) => u128::from(a) & !(u128::MAX >> 48),
    }
}

impl Admission {
    pub(super) fn new(limits: AdmissionLimits) -> Arc<Self> {
        Arc::new(Admission {
            max_connections: AtomicUsize::new(limits.connections),
            max_handshakes_per_source: AtomicUsize::new(limits.handshakes_per_source),
            max_handshakes_per_network: AtomicUsize::new(limits.handshakes_per_network),
            max_connections_per_source: AtomicUsize::new(limits.connections_per_source),
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update below leaves the counts whole before it can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a new connection from `peer` (in its handshake), or says why not.
    pub(super) fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Refusal> {
        let (key, network) = (source_key(peer), network_key(peer));
        let mut s = self.lock();
        if s.connections >= self.max_connections.load(Ordering::Relaxed) {
            return Err(Refusal::Busy);
        }
        let src = s.sources.get(&key).copied().unwrap_or_default();
        if src.connections >= self.max_connections_per_source.load(Ordering::Relaxed) {
            return Err(Refusal::SourceConnections);
        }
        if src.handshakes >= self.max_handshakes_per_source.load(Ordering::Relaxed) {
            return Err(Refusal::SourceHandshakes);
        }
        let net = s.networks.get(&network).copied().unwrap_or_default();
        if net >= self.max_handshakes_per_network.load(Ordering::Relaxed) {
            return Err(Refusal::NetworkHandshakes);
        }
        s.connections += 1;
        let e = s.sources.entry(key).or_default();
        e.connections += 1;
        e.handshakes += 1;
        *s.networks.entry(network).or_default() += 1;
        Ok(Slot {
            admission: Arc::clone(self),
            source: key,
            network,
            handshaking: true,
        })
    }

    /// Changes the limits for the admissions from now on (a reload); connections above a
    /// lowered limit stay up.
    pub(super) fn set_limits(&self, limits: AdmissionLimits) {
        self.max_connections
            .store(limits.connections, Ordering::Relaxed);
        self.max_handshakes_per_source
            .store(limits.handshakes_per_source, Ordering::Relaxed);
        self.max_handshakes_per_network
            .store(limits.handshakes_per_network, Ordering::Relaxed);
        self.max_connections_per_source
            .store(limits.connections_per_source, Ordering::Relaxed);
    }

    /// Connections counted now.
    pub(super) fn connections(&self) -> usize {
        self.lock().connections
    }

    /// Sources with a connection now.
    #[cfg(test)]
    pub(super) fn sources(&self) -> usize {
        self.lock().sources.len()
    }

    /// Networks with a connection before link-up now.
    #[cfg(test)]
    pub(super) fn networks(&self) -> usize {
        self.lock().networks.len()
    }
}

/// One admitted connection's place in the counts.
#[derive(Debug)]
pub(super) struct Slot {
    admission: Arc<Admission>,
    source: u128,
    network: u128,
    handshaking: bool,
}

impl Slot {
    /// The link is up: the connection no longer counts as a handshake of its source.
    pub(super) fn link_up(&mut self) {
        if std::mem::replace(&mut self.handshaking, false) {
            let mut s = self.admission.lock();
            if let Some(e) = s.sources.get_mut(&self.source) {
                e.handshakes = e.handshakes.saturating_sub(1);
            }
            s.handshake_done(self.network);
        }
    }
}

impl State {
    /// One connection of `network` left its handshake (linked up or gone).
    fn handshake_done(&mut self, network: u128) {
        if let Some(n) = self.networks.get_mut(&network) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.networks.remove(&network);
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.admission.lock();
        s.connections = s.connections.saturating_sub(1);
        if let Some(e) = s.sources.get_mut(&self.source) {
            e.connections = e.connections.saturating_sub(1);
            if self.handshaking {
                e.handshakes = e.handshakes.saturating_sub(1);
            }
            if e.connections == 0 {
                s.sources.remove(&self.source);
            }
        }
        if self.handshaking {
            s.handshake_done(self.network);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(connections: usize, handshakes: usize, per_source: usize) -> Arc<Admission> {
        Admission::new(AdmissionLimits {
            connections,
            handshakes_per_source: handshakes,
            handshakes_per_network: usize::MAX,
            connections_per_source: per_source,
        })
    }

    #[test]
    fn a_network_holds_at_most_its_share_of_handshakes() {
        let a = Admission::new(AdmissionLimits {
            connections: 100,
            handshakes_per_source: 2,
            handshakes_per_network: 3,
            connections_per_source: 100,
        });
        // Three hosts of 203.0.113.0/24 share its 3 handshakes.
        let mut h1 = a.admit("203.0.113.1".parse().unwrap()).unwrap();
        let h2 = a.admit("203.0.113.1".parse().unwrap()).unwrap();
        let h3 = a.admit("203.0.113.2".parse().unwrap()).unwrap();
        assert_eq!(
            a.admit("203.0.113.3".parse().unwrap()).unwrap_err(),
            Refusal::NetworkHandshakes
        );
        // Another /24, and an IPv6 /48 apart from its neighbour /48.
        let _o = a.admit("203.0.114.1".parse().unwrap()).unwrap();
        let v6: Vec<Slot> = ["2001:db8:1:1::1", "2001:db8:1:2::1", "2001:db8:1:3::1"]
            .iter()
            .map(|s| a.admit(s.parse().unwrap()).unwrap())
            .collect();
        assert_eq!(
            a.admit("2001:db8:1:4::1".parse().unwrap()).unwrap_err(),
            Refusal::NetworkHandshakes,
            "the same /48"
        );
        let _n = a.admit("2001:db8:2::1".parse().unwrap()).unwrap();
        // A linked-up connection leaves its network's handshake count.
        h1.link_up();
        let h4 = a.admit("203.0.113.3".parse().unwrap()).unwrap();
        drop((h1, h2, h3, h4, v6));
        assert_eq!(a.networks(), 2, "only the networks still handshaking");
    }

    #[test]
    fn one_source_cannot_take_the_handshake_slots_of_another() {
        let a = admission(100, 2, 3);
        let flood: IpAddr = "203.0.113.20".parse().unwrap();
        let h1 = a.admit(flood).unwrap();
        let mut h2 = a.admit(flood).unwrap();
        assert_eq!(a.admit(flood).unwrap_err(), Refusal::SourceHandshakes);
        let other = a.admit("198.51.100.10".parse().unwrap()).unwrap();
        // Linked-up connections leave the handshake count but stay in the connection count.
        h2.link_up();
        let mut h3 = a.admit(flood).unwrap();
        h3.link_up();
        assert_eq!(a.admit(flood).unwrap_err(), Refusal::SourceConnections);
        assert_eq!(a.connections(), 4);
        drop((h1, h2, h3, other));
        assert_eq!(a.connections(), 0);
        assert_eq!(a.sources(), 0, "no entry outlives its connections");
    }

    #[test]
    fn a_reload_changes_the_limits_for_new_admissions_only() {
        let a = admission(100, 1, 1);
        let src: IpAddr = "203.0.113.20".parse().unwrap();
        let mut first = a.admit(src).unwrap();
        first.link_up();
        assert_eq!(a.admit(src).unwrap_err(), Refusal::SourceConnections);
        a.set_limits(AdmissionLimits {
            connections: 100,
            handshakes_per_source: 1,
            handshakes_per_network: 8,
            connections_per_source: 2,
        });
        let second = a.admit(src).unwrap();
        assert_eq!(a.admit(src).unwrap_err(), Refusal::SourceConnections);
        // Lowered below what is held: nobody is dropped, new ones are refused.
        a.set_limits(AdmissionLimits {
            connections: 1,
            handshakes_per_source: 1,
            handshakes_per_network: 8,
            connections_per_source: 1,
        });
        assert_eq!(a.connections(), 2);
        assert_eq!(
            a.admit("198.51.100.10".parse().unwrap()).unwrap_err(),
            Refusal::Busy
        );
        drop((first, second));
    }

    #[test]
    fn sources_are_ipv4_addresses_and_ipv6_64s() {
        let a = admission(100, 1, 100);
        let _x = a.admit("2001:db8:7:1::1".parse().unwrap()).unwrap();
        assert_eq!(
            a.admit("2001:db8:7:1::ffff".parse().unwrap()).unwrap_err(),
            Refusal::SourceHandshakes,
            "the same /64"
        );
        let _y = a.admit("2001:db8:7:2::1".parse().unwrap()).unwrap();
        let _z = a.admit("192.0.2.7".parse().unwrap()).unwrap();
        assert_eq!(
            a.admit("::ffff:192.0.2.7".parse().unwrap()).unwrap_err(),
            Refusal::SourceHandshakes,
            "IPv4-mapped is the IPv4 address"
        );
    }

    #[test]
    fn the_global_limit_comes_first() {
        let a = admission(1, 10, 10);
        let _x = a.admit("192.0.2.1".parse().unwrap()).unwrap();
        assert_eq!(
            a.admit("192.0.2.2".parse().unwrap()).unwrap_err(),
            Refusal::Busy
        );
    }
}
