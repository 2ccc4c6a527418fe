//! Inner addresses for clients that ask with CFG_REQUEST (RFC 7296 §3.15): IPv6
//! ([`AddressPool`], `[ipsec] pool6`) and IPv4 ([`AddressPool4`], `[ipsec] pool4`).
//!
//! Leases are keyed by the authenticated identity (issuer and subject) and counted, so a client's two IKE SAs
//! (infrastructure and intranet) share one inner address, as a DirectAccess client has one;
//! the address returns to the pool when its last IKE SA goes.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

use crate::auth::IdentityKey;

/// Why an address a RADIUS server assigned (Framed-IPv6-Address, Framed-IP-Address) cannot
/// be given to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimError {
    /// No pool configured for its family, or the address is outside it: the TUN's route
    /// would not bring its traffic back.
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

/// The offset of the first address handed out: 0 is the subnet-router anycast address and 1
/// gate64's own.
const FIRST_LEASED: u128 = 2;

/// A pool of IPv6 addresses.
#[derive(Debug, Clone)]
pub struct AddressPool {
    net: Ipv6Net,
    leases: HashMap<IdentityKey, (Ipv6Addr, usize)>,
    in_use: std::collections::HashSet<Ipv6Addr>,
    next: u128,
}

impl AddressPool {
    /// Every address of `net` except the subnet-router anycast (all-zero host part) and the
    /// first address, which is gate64's own: its IKE endpoint unless the configuration
    /// names another (`ipsec.endpoint`).
    pub fn new(net: Ipv6Net) -> Self {
        AddressPool {
            net,
            leases: HashMap::new(),
            in_use: Default::default(),
            next: FIRST_LEASED,
        }
    }

    /// The address leased to `identity` (the same one while any lease is held).
    pub fn lease(&mut self, identity: &IdentityKey) -> Option<Ipv6Addr> {
        if let Some((addr, count)) = self.leases.get_mut(identity) {
            *count += 1;
            return Some(*addr);
        }
        let size = 1u128
            .checked_shl(u32::from(128 - self.net.prefix_len()))
            .unwrap_or(u128::MAX);
        let base = u128::from(self.net.network());
        for _ in 0..size.min(1 << 20) {
            let offset = self.next % size;
            self.next = self.next.wrapping_add(1);
            if offset < FIRST_LEASED {
                continue;
            }
            let addr = Ipv6Addr::from(base + offset);
            if self.in_use.insert(addr) {
                self.leases.insert(*identity, (addr, 1));
                return Some(addr);
            }
        }
        None
    }

    /// Whether `addr` may be leased to `identity` ([`AddressPool::claim`]).
    pub fn check(&self, identity: &IdentityKey, addr: Ipv6Addr) -> Result<(), ClaimError> {
        if !self.net.contains(&addr) {
            return Err(ClaimError::OutsidePool);
        }
        if u128::from(addr) - u128::from(self.net.network()) < FIRST_LEASED {
            return Err(ClaimError::Reserved);
        }
        match self.leases.get(identity) {
            Some((held, _)) if *held == addr => Ok(()),
            Some(_) => Err(ClaimError::HoldsAnother),
            None if self.in_use.contains(&addr) => Err(ClaimError::HeldByOther),
            None => Ok(()),
        }
    }

    /// Leases `addr` (a RADIUS server's choice) to `identity`, counted as [`AddressPool::lease`]
    /// counts, when [`AddressPool::check`] allows it.
    pub fn claim(
        &mut self,
        identity: &IdentityKey,
        addr: Ipv6Addr,
    ) -> Result<Ipv6Addr, ClaimError> {
        self.check(identity, addr)?;
        self.in_use.insert(addr);
        self.leases.entry(*identity).or_insert((addr, 0)).1 += 1;
        Ok(addr)
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

/// A pool of IPv4 addresses, leased by the same rules as [`AddressPool`]: one address per
/// identity, shared by its IKE SAs, back in the pool when the last goes.
#[derive(Debug, Clone)]
pub struct AddressPool4 {
    net: Ipv4Net,
    leases: HashMap<IdentityKey, (Ipv4Addr, usize)>,
    in_use: std::collections::HashSet<Ipv4Addr>,
    next: u32,
}

impl AddressPool4 {
    /// Every address of `net` but its network and broadcast addresses (gate64 holds none
    /// of them: its IPv4 side is the TUN's routes, not an address in the pool).
    pub fn new(net: Ipv4Net) -> Self {
        AddressPool4 {
            net,
            leases: HashMap::new(),
            in_use: Default::default(),
            next: 1,
        }
    }

    /// The address leased to `identity` (the same one while any lease is held).
    pub fn lease(&mut self, identity: &IdentityKey) -> Option<Ipv4Addr> {
        if let Some((addr, count)) = self.leases.get_mut(identity) {
            *count += 1;
            return Some(*addr);
        }
        let size = 1u64 << (32 - u32::from(self.net.prefix_len()));
        let base = u64::from(u32::from(self.net.network()));
        for _ in 0..size.min(1 << 20) {
            let offset = u64::from(self.next) % size;
            self.next = self.next.wrapping_add(1);
            if offset == 0 || offset == size - 1 {
                continue;
            }
            let addr = Ipv4Addr::from(u32::try_from(base + offset).ok()?);
            if self.in_use.insert(addr) {
                self.leases.insert(*identity, (addr, 1));
                return Some(addr);
            }
        }
        None
    }

    /// Whether `addr` may be leased to `identity` ([`AddressPool4::claim`]).
    pub fn check(&self, identity: &IdentityKey, addr: Ipv4Addr) -> Result<(), ClaimError> {
        if !self.net.contains(&addr) {
            return Err(ClaimError::OutsidePool);
        }
        if self.net.prefix_len() < 31
            && (addr == self.net.network() || addr == self.net.broadcast())
        {
            return Err(ClaimError::Reserved);
        }
        match self.leases.get(identity) {
            Some((held, _)) if *held == addr => Ok(()),
            Some(_) => Err(ClaimError::HoldsAnother),
            None if self.in_use.contains(&addr) => Err(ClaimError::HeldByOther),
            None => Ok(()),
        }
    }

    /// Leases `addr` (a RADIUS server's choice) to `identity`, when
    /// [`AddressPool4::check`] allows it.
    pub fn claim(
        &mut self,
        identity: &IdentityKey,
        addr: Ipv4Addr,
    ) -> Result<Ipv4Addr, ClaimError> {
        self.check(identity, addr)?;
        self.in_use.insert(addr);
        self.leases.entry(*identity).or_insert((addr, 0)).1 += 1;
        Ok(addr)
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
}
