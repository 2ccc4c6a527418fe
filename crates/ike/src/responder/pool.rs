//! Inner addresses for clients that ask with CFG_REQUEST (RFC 7296 §3.15): IPv6
//! ([`AddressPool`], `[ipsec] pool6`) and IPv4 ([`AddressPool4`], `[ipsec] pool4`).
//!
//! Leases are keyed by the authenticated identity (issuer and subject) and counted, so a client's two IKE SAs
//! (infrastructure and intranet) share one inner address, as a DirectAccess client has one;
//! the address returns to the pool when its last IKE SA goes.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

use crate::auth::IdentityKey;

/// Why an address a RADIUS server assigned (Framed-IPv6-Address, Framed-IP-Address) cannot
/// be given to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimError {
    /// No pool configured for its family, or the address is outside it (and, for an IKE SA
    /// taken over from the `[ha]` peer, outside the peer's pool too): the TUN's route would
    /// not bring its traffic back.
    OutsidePool,
    /// The pool's subnet-router anycast, gate64's own address, or the network or broadcast
    /// address of an IPv4 pool.
    Reserved,
    /// Another identity holds it.
    HeldByOther,
    /// This identity already holds another address (its other IKE SA got one before).
    HoldsAnother,
}

impl ClaimError {
    /// For a log line.
    pub fn text(self) -> &'static str {
        match self {
            ClaimError::OutsidePool => "outside the address pool",
            ClaimError::Reserved => "reserved in the address pool",
            ClaimError::HeldByOther => "held by another identity",
            ClaimError::HoldsAnother => "the identity holds another address",
        }
    }
}

/// What a pool needs to know of its address family: how big the network is, which offsets
/// are never leased, and which addresses a RADIUS server may not assign.
pub trait PoolNet: Copy + std::fmt::Debug {
    /// The family's address.
    type Addr: Copy + Eq + Hash + std::fmt::Debug;
    /// The offset [`Pool::lease`] tries first.
    const FIRST: u128;
    /// How many addresses the network has (saturating at `u128::MAX`).
    fn size(&self) -> u128;
    /// Whether [`Pool::lease`] skips the address at `offset` of a network of `size`.
    fn skips(offset: u128, size: u128) -> bool;
    /// The address at `offset` from the network address (`None`: beyond the family).
    fn at(&self, offset: u128) -> Option<Self::Addr>;
    /// Whether `addr` lies in the network.
    fn holds(&self, addr: Self::Addr) -> bool;
    /// Whether `addr` (in the network) is never given to a client.
    fn reserved(&self, addr: Self::Addr) -> bool;
}

/// The offset of the first address handed out: 0 is the subnet-router anycast address and 1
/// gate64's own.
const FIRST_LEASED: u128 = 2;

impl PoolNet for Ipv6Net {
    type Addr = Ipv6Addr;
    const FIRST: u128 = FIRST_LEASED;

    fn size(&self) -> u128 {
        1u128
            .checked_shl(u32::from(128 - self.prefix_len()))
            .unwrap_or(u128::MAX)
    }

    fn skips(offset: u128, _size: u128) -> bool {
        offset < FIRST_LEASED
    }

    fn at(&self, offset: u128) -> Option<Ipv6Addr> {
        u128::from(self.network())
            .checked_add(offset)
            .map(Ipv6Addr::from)
    }

    fn holds(&self, addr: Ipv6Addr) -> bool {
        self.contains(&addr)
    }

    fn reserved(&self, addr: Ipv6Addr) -> bool {
        u128::from(addr).wrapping_sub(u128::from(self.network())) < FIRST_LEASED
    }
}

impl PoolNet for Ipv4Net {
    type Addr = Ipv4Addr;
    const FIRST: u128 = 1;

    fn size(&self) -> u128 {
        1u128 << (32 - u32::from(self.prefix_len()))
    }

    fn skips(offset: u128, size: u128) -> bool {
        offset == 0 || offset == size - 1
    }

    fn at(&self, offset: u128) -> Option<Ipv4Addr> {
        let addr = u128::from(u32::from(self.network())).checked_add(offset)?;
        u32::try_from(addr).ok().map(Ipv4Addr::from)
    }

    fn holds(&self, addr: Ipv4Addr) -> bool {
        self.contains(&addr)
    }

    fn reserved(&self, addr: Ipv4Addr) -> bool {
        self.prefix_len() < 31 && (addr == self.network() || addr == self.broadcast())
    }
}

/// A pool of IPv6 addresses: every address of its network except the subnet-router anycast
/// (all-zero host part) and the first address, which is gate64's own: its IKE endpoint
/// unless the configuration names another (`ipsec.endpoint`).
pub type AddressPool = Pool<Ipv6Net>;

/// A pool of IPv4 addresses: every address of its network but its network and broadcast
/// addresses (gate64 holds none of them: its IPv4 side is the TUN's routes, not an address
/// in the pool).
pub type AddressPool4 = Pool<Ipv4Net>;

/// A pool of one family's addresses ([`AddressPool`], [`AddressPool4`]): one address per
/// identity, shared by its IKE SAs, back in the pool when the last goes.
///
/// It may also know the `[ha]` peer's pool of the family (`ha.peer_pool6`, `ha.peer_pool4`;
/// [`Pool::with_peer`]): an IKE SA taken over from the peer keeps its inner address, which
/// lies there ([`Pool::claim_synced`]). Such an address is held as a lease of this pool is
/// (counted, released with the identity's last IKE SA), but [`Pool::lease`] hands out only
/// addresses of its own network and [`Pool::claim`] (a RADIUS server's choice) accepts only
/// those too.
#[derive(Debug, Clone)]
pub struct Pool<N: PoolNet> {
    net: N,
    peer: Option<N>,
    leases: HashMap<IdentityKey, (N::Addr, usize)>,
    in_use: HashSet<N::Addr>,
    next: u128,
}

impl<N: PoolNet> Pool<N> {
    /// Every address of `net` but those its family reserves ([`AddressPool`],
    /// [`AddressPool4`]).
    pub fn new(net: N) -> Self {
        Pool {
            net,
            peer: None,
            leases: HashMap::new(),
            in_use: HashSet::new(),
            next: N::FIRST,
        }
    }

    /// The pool with the `[ha]` peer's pool of its family, whose addresses only
    /// [`Pool::claim_synced`] accepts. The configuration keeps the two apart
    /// (`ha.peer_pool6`, `ha.peer_pool4`).
    pub fn with_peer(mut self, peer: Option<N>) -> Self {
        self.peer = peer;
        self
    }

    /// The address leased to `identity` (the same one while any lease is held).
    pub fn lease(&mut self, identity: &IdentityKey) -> Option<N::Addr> {
        if let Some((addr, count)) = self.leases.get_mut(identity) {
            *count += 1;
            return Some(*addr);
        }
        let size = self.net.size();
        for _ in 0..size.min(1 << 20) {
            let offset = self.next % size;
            self.next = self.next.wrapping_add(1);
            if N::skips(offset, size) {
                continue;
            }
            let addr = self.net.at(offset)?;
            if self.in_use.insert(addr) {
                self.leases.insert(*identity, (addr, 1));
                return Some(addr);
            }
        }
        None
    }

    /// Whether `addr` may be leased to `identity` ([`Pool::claim`]).
    pub fn check(&self, identity: &IdentityKey, addr: N::Addr) -> Result<(), ClaimError> {
        self.check_in(self.net, identity, addr)
    }

    /// Whether `addr`, in `net`, may be leased to `identity`.
    fn check_in(&self, net: N, identity: &IdentityKey, addr: N::Addr) -> Result<(), ClaimError> {
        if !net.holds(addr) {
            return Err(ClaimError::OutsidePool);
        }
        if net.reserved(addr) {
            return Err(ClaimError::Reserved);
        }
        match self.leases.get(identity) {
            Some((held, _)) if *held == addr => Ok(()),
            Some(_) => Err(ClaimError::HoldsAnother),
            None if self.in_use.contains(&addr) => Err(ClaimError::HeldByOther),
            None => Ok(()),
        }
    }

    /// Leases `addr` (a RADIUS server's choice) to `identity`, counted as [`Pool::lease`]
    /// counts, when [`Pool::check`] allows it.
    pub fn claim(&mut self, identity: &IdentityKey, addr: N::Addr) -> Result<N::Addr, ClaimError> {
        self.check(identity, addr)?;
        Ok(self.hold(identity, addr))
    }

    /// Leases the inner address of an IKE SA synced from the `[ha]` peer to `identity`: an
    /// address of this pool as [`Pool::claim`] would, or one of the peer's pool
    /// ([`Pool::with_peer`]) under the same rules (not reserved there, not held by another
    /// identity, not another address than the identity holds). Outside both:
    /// [`ClaimError::OutsidePool`].
    pub fn claim_synced(
        &mut self,
        identity: &IdentityKey,
        addr: N::Addr,
    ) -> Result<N::Addr, ClaimError> {
        match self.peer {
            Some(peer) if !self.net.holds(addr) => self.check_in(peer, identity, addr)?,
            _ => self.check(identity, addr)?,
        }
        Ok(self.hold(identity, addr))
    }

    /// Counts one more lease of `addr` to `identity` (checked by the caller).
    fn hold(&mut self, identity: &IdentityKey, addr: N::Addr) -> N::Addr {
        self.in_use.insert(addr);
        self.leases.entry(*identity).or_insert((addr, 0)).1 += 1;
        addr
    }

    /// Drops one lease of `identity`.
    pub fn release(&mut self, identity: &IdentityKey) {
        if let Some((addr, count)) = self.leases.get_mut(identity) {
            *count -= 1;
            if *count == 0 {
                let addr = *addr;
                self.in_use.remove(&addr);
                self.leases.remove(identity);
            }
        }
    }

    /// Addresses currently leased.
    pub fn leased(&self) -> usize {
        self.in_use.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> IdentityKey {
        IdentityKey::new(b"CN=ca", name.as_bytes())
    }

    #[test]
    fn one_address_per_identity_until_the_last_release() {
        let mut pool = AddressPool::new("fd00:c1::100/125".parse().expect("net"));
        let a = pool.lease(&id("alice")).expect("free");
        assert_eq!(pool.lease(&id("alice")), Some(a));
        let b = pool.lease(&id("bob")).expect("free");
        let c = pool
            .lease(&IdentityKey::new(b"CN=other ca", b"bob"))
            .expect("free");
        assert!(
            a != b && b != c && a != c,
            "one subject from two CAs: two identities"
        );
        for name in ["carol", "erin", "frank"] {
            pool.lease(&id(name)).expect("free");
        }
        assert_eq!(
            pool.lease(&id("dave")),
            None,
            "a /125 has six addresses for clients"
        );
        pool.release(&id("alice"));
        assert_eq!(pool.lease(&id("dave")), None, "alice still holds one lease");
        pool.release(&id("alice"));
        assert_eq!(pool.lease(&id("dave")), Some(a));
    }

    #[test]
    fn never_leases_the_anycast_nor_gate64s_own_address() {
        let net: Ipv6Net = "fd00:c1::100/126".parse().expect("net");
        let mut pool = AddressPool::new(net);
        let mut leased: Vec<Ipv6Addr> = ["a", "b", "c"]
            .iter()
            .filter_map(|n| pool.lease(&id(n)))
            .collect();
        leased.sort();
        let own: Ipv6Addr = "fd00:c1::101".parse().expect("addr");
        assert_eq!(
            leased,
            [
                "fd00:c1::102".parse::<Ipv6Addr>().expect("addr"),
                "fd00:c1::103".parse().expect("addr")
            ],
            "neither {} nor {own}",
            net.network()
        );
    }

    #[test]
    fn ipv4_one_address_per_identity_never_network_nor_broadcast() {
        let mut pool = AddressPool4::new("10.77.0.0/29".parse().expect("net"));
        let a = pool.lease(&id("alice")).expect("free");
        assert_eq!(pool.lease(&id("alice")), Some(a), "both tunnels share it");
        let mut all = vec![a];
        for name in ["b", "c", "d", "e", "f"] {
            all.push(pool.lease(&id(name)).expect("free"));
        }
        all.sort();
        let want: Vec<Ipv4Addr> = (1..=6).map(|i| Ipv4Addr::new(10, 77, 0, i)).collect();
        assert_eq!(all, want, "neither 10.77.0.0 nor 10.77.0.7");
        assert_eq!(
            pool.lease(&id("g")),
            None,
            "a /29 has six addresses for clients"
        );
        assert_eq!(pool.leased(), 6);
        pool.release(&id("alice"));
        assert_eq!(pool.lease(&id("g")), None, "alice still holds one lease");
        pool.release(&id("alice"));
        assert_eq!(pool.lease(&id("g")), Some(a), "freed on the last release");
    }

    #[test]
    fn a_framed_address_is_claimed_only_inside_the_pool_and_unheld() {
        let mut pool = AddressPool::new("fd00:c1::/120".parse().expect("net"));
        let a: Ipv6Addr = "fd00:c1::77".parse().expect("addr");
        assert_eq!(
            pool.claim(&id("alice"), "fd00:c2::77".parse().expect("addr")),
            Err(ClaimError::OutsidePool)
        );
        assert_eq!(
            pool.claim(&id("alice"), "fd00:c1::1".parse().expect("addr")),
            Err(ClaimError::Reserved)
        );
        assert_eq!(pool.claim(&id("alice"), a), Ok(a));
        assert_eq!(pool.claim(&id("alice"), a), Ok(a), "her second IKE SA");
        assert_eq!(pool.claim(&id("bob"), a), Err(ClaimError::HeldByOther));
        let b = pool.lease(&id("bob")).expect("free");
        assert_ne!(b, a, "a lease never hands out a claimed address");
        assert_eq!(
            pool.claim(&id("bob"), "fd00:c1::78".parse().expect("addr")),
            Err(ClaimError::HoldsAnother)
        );
        pool.release(&id("alice"));
        assert_eq!(pool.claim(&id("carol"), a), Err(ClaimError::HeldByOther));
        pool.release(&id("alice"));
        assert_eq!(
            pool.claim(&id("carol"), a),
            Ok(a),
            "free after the last release"
        );

        let mut pool4 = AddressPool4::new("10.77.0.0/29".parse().expect("net"));
        let v4 = Ipv4Addr::new(10, 77, 0, 5);
        assert_eq!(
            pool4.claim(&id("alice"), Ipv4Addr::new(10, 77, 0, 7)),
            Err(ClaimError::Reserved)
        );
        assert_eq!(
            pool4.claim(&id("alice"), Ipv4Addr::new(10, 78, 0, 5)),
            Err(ClaimError::OutsidePool)
        );
        assert_eq!(pool4.claim(&id("alice"), v4), Ok(v4));
        assert_eq!(pool4.claim(&id("bob"), v4), Err(ClaimError::HeldByOther));
    }

    #[test]
    fn a_synced_address_is_claimed_in_this_pool_or_the_peers_only() {
        let own: Ipv6Net = "fd00:c1::/105".parse().expect("net");
        let peer: Ipv6Net = "fd00:c1::80:0/105".parse().expect("net");
        let addr = |s: &str| s.parse::<Ipv6Addr>().expect("addr");
        let mut alone = AddressPool::new(own);
        let theirs = addr("fd00:c1::80:2");
        assert_eq!(
            alone.claim_synced(&id("alice"), theirs),
            Err(ClaimError::OutsidePool),
            "without the peer's pool, as before"
        );
        let mut pool = AddressPool::new(own).with_peer(Some(peer));
        assert_eq!(
            pool.claim(&id("alice"), theirs),
            Err(ClaimError::OutsidePool),
            "a RADIUS server's choice stays inside this node's own pool"
        );
        assert_eq!(
            pool.claim_synced(&id("zed"), addr("fd00:c2::2")),
            Err(ClaimError::OutsidePool),
            "in neither pool"
        );
        assert_eq!(
            pool.claim_synced(&id("zed"), addr("fd00:c1::80:1")),
            Err(ClaimError::Reserved),
            "the peer's own address"
        );
        assert_eq!(pool.claim_synced(&id("alice"), theirs), Ok(theirs));
        assert_eq!(
            pool.claim_synced(&id("alice"), theirs),
            Ok(theirs),
            "2nd IKE SA"
        );
        assert_eq!(
            pool.claim_synced(&id("bob"), theirs),
            Err(ClaimError::HeldByOther)
        );
        assert_eq!(
            pool.claim_synced(&id("alice"), addr("fd00:c1::80:3")),
            Err(ClaimError::HoldsAnother)
        );
        let mine = addr("fd00:c1::5");
        assert_eq!(
            pool.claim_synced(&id("carol"), mine),
            Ok(mine),
            "its own pool"
        );
        assert_eq!(pool.leased(), 2, "both held");
        for n in 0..8 {
            let leased = pool.lease(&id(&format!("new{n}"))).expect("free");
            assert!(own.contains(&leased) && leased != mine, "{leased}");
        }
        pool.release(&id("alice"));
        assert_eq!(
            pool.claim_synced(&id("bob"), theirs),
            Err(ClaimError::HeldByOther)
        );
        pool.release(&id("alice"));
        assert_eq!(
            pool.claim_synced(&id("bob"), theirs),
            Ok(theirs),
            "released"
        );

        let mut pool4 = AddressPool4::new("10.77.0.0/29".parse().expect("net"))
            .with_peer(Some("10.77.0.8/29".parse().expect("net")));
        let v4 = Ipv4Addr::new(10, 77, 0, 9);
        assert_eq!(pool4.claim_synced(&id("alice"), v4), Ok(v4));
        assert_eq!(
            pool4.claim_synced(&id("bob"), Ipv4Addr::new(10, 77, 0, 15)),
            Err(ClaimError::Reserved),
            "the peer pool's broadcast address"
        );
        assert_eq!(
            pool4.claim_synced(&id("bob"), Ipv4Addr::new(10, 77, 0, 16)),
            Err(ClaimError::OutsidePool)
        );
    }
}
