//! The half-open IKE SAs (IKE_SA_INIT answered, IKE_AUTH not yet): how many there are, how
//! many each source has, and the bytes they hold.
//!
//! **Sources.** A half-open IKE SA is counted against its source's [`SourceKey`]: an IPv4
//! address; for a Teredo address (`2001:0::/32`) the client's NAT mapping it embeds (public
//! IPv4 and port, RFC 4380 §4), since the server and flag bits around it are the client's to
//! vary; for any other IPv6 address its /64, which an IP-HTTPS client owns whole and may take
//! any address of.
//!
//! **Hosts.** One host behind one public IPv4 address can open a Teredo mapping per port,
//! and one site holds many /64s of its /48; each is a source of its own. So a source's
//! half-open IKE SAs also count against its [`HostKey`] (the mapping's IPv4 address, all
//! ports; the /48 of a native IPv6 /64), capped at [`HOST_SHARE`] sources' worth: one host
//! cannot fill `max_half_open_bytes`, and a client from another address still gets in.
//! A /64 gate64 leased itself (`iphttps.prefix`, one per IP-HTTPS connection) is a host of
//! its own ([`Hosts`]): the leases of one pool share a /48 but not a host, and how many of
//! them one host holds is the IP-HTTPS listener's bound per source address.
//!
//! **Charges.** Each half-open IKE SA keeps the [`Charge`] it was counted under and is
//! released against it, not against the address its later requests come from: IKE_AUTH may
//! move it (to port 4500, or through another NAT mapping), and releasing against the new
//! address would leave the first source's count up for good, until that source could open
//! no IKE SA at all.
//!
//! **Bytes.** A half-open IKE SA holds both IKE_SA_INIT messages (the request up to 64 KiB),
//! its cached response and the RFC 7383 fragments of an IKE_AUTH being reassembled (up to 64
//! KiB more), all from a peer not yet authenticated. Their sum over all half-open SAs is kept
//! here, so new half-open SAs and new fragments are refused once it reaches
//! `ResponderConfig::max_half_open_bytes`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};

use super::{IkeSa, Responder};

/// Bytes counted for a half-open IKE SA besides its messages: the boxed SA with its keys, its
/// table entries and its timer (about 600 bytes measured, rounded up).
pub(crate) const FIXED_BYTES: usize = 1024;

/// The Teredo prefix `2001:0::/32` (RFC 4380 §2.6). Decoded here rather than through the
/// teredo crate: protocol crates do not depend on one another.
const TEREDO_PREFIX: [u8; 4] = [0x20, 0x01, 0x00, 0x00];

/// Whom a half-open IKE SA (or another per-source limit) is counted against: an IPv4
/// address, a Teredo client's NAT mapping, an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKey {
    /// An IPv4 address (or an IPv4-mapped IPv6 one).
    V4(Ipv4Addr),
    /// A Teredo client's NAT mapping.
    Teredo(SocketAddrV4),
    /// An IPv6 /64: its first 64 bits.
    V6Net(u64),
}

impl SourceKey {
    /// The key `ip` is counted under.
    pub fn of(ip: IpAddr) -> SourceKey {
        let v6 = match ip {
            IpAddr::V4(a) => return SourceKey::V4(a),
            IpAddr::V6(a) => a,
        };
        if let Some(a) = v6.to_ipv4_mapped() {
            return SourceKey::V4(a);
        }
        let o = v6.octets();
        if o[..4] == TEREDO_PREFIX {
            // RFC 4380 §4: the port (bits 80-95) and IPv4 (96-127) are stored inverted.
            let port = !u16::from_be_bytes([o[10], o[11]]);
            let ip = !u32::from_be_bytes([o[12], o[13], o[14], o[15]]);
            return SourceKey::Teredo(SocketAddrV4::new(Ipv4Addr::from(ip), port));
        }
        SourceKey::V6Net((u128::from(v6) >> 64) as u64)
    }

    /// The key as one IPv6 address, for tables keyed by address (`gate64_wire::ratelimit`):
    /// an IPv4 source IPv4-mapped, a /64 its first address, a Teredo mapping as a Teredo
    /// address of it (server part zero), which [`SourceKey::of`] maps back to this key.
    pub fn to_ipv6(self) -> Ipv6Addr {
        match self {
            SourceKey::V4(a) => a.to_ipv6_mapped(),
            SourceKey::V6Net(net) => Ipv6Addr::from(u128::from(net) << 64),
            SourceKey::Teredo(m) => {
                let mut o = [0u8; 16];
                o[..4].copy_from_slice(&TEREDO_PREFIX);
                o[10..12].copy_from_slice(&(!m.port()).to_be_bytes());
                o[12..].copy_from_slice(&(!u32::from(*m.ip())).to_be_bytes());
                Ipv6Addr::from(o)
            }
        }
    }
}

/// How many sources' worth one host (see [`HostKey`]) may take of a per-source bound: the
/// half-open IKE SAs here, and the drivers' per-source budgets beside them.
pub const HOST_SHARE: usize = 4;

/// The host a source belongs to, when the source is narrower than a host: a Teredo
/// mapping's public IPv4 address (all its ports), a native IPv6 /64's /48 ([`Hosts::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostKey {
    /// The public IPv4 address of a Teredo client's mapping.
    TeredoV4(Ipv4Addr),
    /// An IPv6 /48: its first 48 bits.
    V6Site(u64),
}

/// Which sources aggregate into a [`HostKey`]. Every /64 of the prefix gate64 leases to
/// IP-HTTPS connections is its own host: those /64s share the pool's /48 but belong to
/// unrelated clients, and counting them as one site let one client's IKE take the whole
/// site's share from every other IP-HTTPS client. What bounds one host there is the
/// IP-HTTPS listener (`iphttps.max_connections_per_source`, `max_handshakes_per_source`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hosts {
    /// The leased prefix's first 64 bits and the bits of them that name it (0 to 64);
    /// `None`: gate64 leases no /64s.
    leased: Option<(u64, u32)>,
}

impl Hosts {
    /// Hosts for a responder whose IP-HTTPS pool is `leased` (`iphttps.prefix`; a prefix
    /// longer than /64 leases no /64s and is ignored).
    pub fn new(leased: Option<ipnet::Ipv6Net>) -> Self {
        let leased = leased.filter(|p| p.prefix_len() <= 64).map(|p| {
            let net = (u128::from(p.network()) >> 64) as u64;
            (net, u32::from(p.prefix_len()))
        });
        Hosts { leased }
    }

    /// Whether `net64` (a /64's first 64 bits) is one of the leased /64s.
    fn leases(&self, net64: u64) -> bool {
        self.leased
            .is_some_and(|(net, bits)| bits == 0 || (net ^ net64) >> (64 - bits) == 0)
    }

    /// The host `key` aggregates into; `None` when the source is a host already (an IPv4
    /// address, a leased /64).
    pub fn of(&self, key: SourceKey) -> Option<HostKey> {
        match key {
            SourceKey::V4(_) => None,
            SourceKey::Teredo(m) => Some(HostKey::TeredoV4(*m.ip())),
            SourceKey::V6Net(net) if self.leases(net) => None,
            SourceKey::V6Net(net) => Some(HostKey::V6Site(net >> 16)),
        }
    }
}

impl HostKey {
    /// The host as one IPv6 address, for tables keyed by address: the IPv4 address
    /// IPv4-mapped, the /48's first address.
    pub fn to_ipv6(self) -> Ipv6Addr {
        match self {
            HostKey::TeredoV4(a) => a.to_ipv6_mapped(),
            HostKey::V6Site(site) => Ipv6Addr::from(u128::from(site) << 80),
        }
    }
}

/// How many of something (half-open IKE SAs, queued IKE_AUTH jobs) each [`HostKey`] holds.
/// A host has an entry only while its count is above zero, so the table is never larger than
/// the number of things counted, and [`HostCounts::release`] of a host it does not hold
/// changes nothing (no underflow).
#[derive(Debug, Clone, Default)]
pub struct HostCounts {
    counts: HashMap<HostKey, usize>,
}

impl HostCounts {
    /// No host counted.
    pub fn new() -> Self {
        HostCounts::default()
    }

    /// Counts one more for `host` if it holds fewer than `cap`; whether it was counted.
    pub fn try_admit(&mut self, host: HostKey, cap: usize) -> bool {
        if self.get(host) >= cap {
            return false;
        }
        *self.counts.entry(host).or_insert(0) += 1;
        true
    }

    /// Counts one more for `host`, whatever it holds (the caller applied its bound before).
    pub fn admit(&mut self, host: HostKey) {
        let n = self.counts.entry(host).or_insert(0);
        *n = n.saturating_add(1);
    }

    /// Counts one out of `host`, dropping its entry at zero; nothing for a host not counted.
    pub fn release(&mut self, host: HostKey) {
        if let Some(n) = self.counts.get_mut(&host) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.counts.remove(&host);
            }
        }
    }

    /// How many `host` holds.
    pub fn get(&self, host: HostKey) -> usize {
        self.counts.get(&host).copied().unwrap_or(0)
    }

    /// Hosts holding at least one.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether no host holds any.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

/// What one half-open IKE SA was counted under; released exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Charge {
    key: SourceKey,
    bytes: usize,
}

/// The half-open IKE SAs of one responder.
#[derive(Debug, Default)]
pub(crate) struct HalfOpen {
    hosts: Hosts,
    count: usize,
    bytes: usize,
    by_source: HashMap<SourceKey, usize>,
    /// Entries only while non-zero, so no larger than `by_source`.
    by_host: HostCounts,
}

impl HalfOpen {
    /// No half-open IKE SAs yet; sources aggregate into hosts by `hosts`.
    pub(crate) fn new(hosts: Hosts) -> Self {
        HalfOpen {
            hosts,
            ..HalfOpen::default()
        }
    }

    /// Half-open IKE SAs in all.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Bytes held by half-open IKE SAs in all.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Half-open IKE SAs counted against `ip`'s source key.
    pub(crate) fn of_source(&self, ip: IpAddr) -> usize {
        self.by_source.get(&SourceKey::of(ip)).copied().unwrap_or(0)
    }

    /// Half-open IKE SAs counted against the host `ip`'s source belongs to (0 for an IPv4
    /// address, which is a host and a source at once).
    pub(crate) fn of_host(&self, ip: IpAddr) -> usize {
        self.hosts
            .of(SourceKey::of(ip))
            .map_or(0, |h| self.by_host.get(h))
    }

    /// Counts a new half-open IKE SA from `ip` holding `bytes`.
    pub(crate) fn charge(&mut self, ip: IpAddr, bytes: usize) -> Charge {
        let key = SourceKey::of(ip);
        self.count += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        *self.by_source.entry(key).or_insert(0) += 1;
        if let Some(host) = self.hosts.of(key) {
            self.by_host.admit(host);
        }
        Charge { key, bytes }
    }

    /// The half-open IKE SA charged `charge` now holds `bytes`.
    pub(crate) fn resize(&mut self, charge: &mut Charge, bytes: usize) {
        self.bytes = self
            .bytes
            .saturating_sub(charge.bytes)
            .saturating_add(bytes);
        charge.bytes = bytes;
    }

    /// Uncounts the half-open IKE SA that was charged `charge`.
    pub(crate) fn release(&mut self, charge: Charge) {
        self.count = self.count.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(charge.bytes);
        if let Some(n) = self.by_source.get_mut(&charge.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_source.remove(&charge.key);
            }
        }
        if let Some(host) = self.hosts.of(charge.key) {
            self.by_host.release(host);
        }
    }

    /// Source keys with a count (the table holds none at zero).
    #[cfg(test)]
    pub(crate) fn sources(&self) -> usize {
        self.by_source.len()
    }
}

/// The bytes `sa` holds that a half-open SA is charged for.
pub(crate) fn footprint(sa: &IkeSa) -> usize {
    let cached = sa
        .cached
        .as_ref()
        .map_or(0, |c| c.datagrams.iter().map(Vec::len).sum());
    let fragments = sa.reassembly.as_ref().map_or(0, |f| f.bytes);
    FIXED_BYTES
        + sa.init_request.len()
        + sa.init_response.len()
        + sa.ni.len()
        + sa.nr.len()
        + cached
        + fragments
}

/// Recounts the bytes of IKE SA `spi_r` while it is half-open (after its fragments or its
/// cached response changed).
pub(crate) fn refresh(r: &mut Responder, spi_r: u64) {
    let Some(sa) = r.sas.get_mut(&spi_r) else {
        return;
    };
    let bytes = footprint(sa);
    if let Some(charge) = sa.half_open.as_mut() {
        r.half_open.resize(charge, bytes);
    }
}

/// Whether `more` bytes fit the half-open budget.
pub(crate) fn has_room(r: &Responder, more: usize) -> bool {
    r.half_open.bytes().saturating_add(more) <= r.config.max_half_open_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> SourceKey {
        SourceKey::of(s.parse().expect("address"))
    }

    /// A key as an address is an address of that key, and keys that differ stay apart.
    #[test]
    fn a_key_as_an_address_maps_back_to_the_key() {
        let keys = [
            key("2001:0:4136:e378:8000:63bf:3fff:fdd2"),
            key("2001:0:4136:e378:8000:63bf:3fff:fdd3"),
            key("192.0.2.45"),
            key("::ffff:192.0.2.46"),
            key("2001:db8:7:1::2"),
            key("2001:db8:7:2::2"),
        ];
        assert_eq!(
            keys[0].to_ipv6(),
            "2001::63bf:3fff:fdd2".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            keys[2].to_ipv6(),
            "::ffff:192.0.2.45".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            keys[4].to_ipv6(),
            "2001:db8:7:1::".parse::<Ipv6Addr>().unwrap()
        );
        for k in keys {
            assert_eq!(SourceKey::of(k.to_ipv6().into()), k, "{k:?}");
        }
        let addresses: std::collections::HashSet<Ipv6Addr> =
            keys.iter().map(|k| k.to_ipv6()).collect();
        assert_eq!(addresses.len(), keys.len());
    }

    /// RFC 4380 §4: 2001:0:4136:e378:8000:63bf:3fff:fdd2 is the mapping 192.0.2.45:40000
    /// through server 65.54.227.120; other server or flag bits, same mapping, same key.
    #[test]
    fn rfc4380_4_teredo_sources_are_keyed_by_their_mapping() {
        let a = key("2001:0:4136:e378:8000:63bf:3fff:fdd2");
        assert_eq!(
            a,
            SourceKey::Teredo("192.0.2.45:40000".parse().expect("mapping"))
        );
        assert_eq!(a, key("2001:0:c000:201:1234:63bf:3fff:fdd2"));
        assert_ne!(
            a,
            key("2001:0:4136:e378:8000:63be:3fff:fdd2"),
            "another port"
        );
    }

    #[test]
    fn ipv6_sources_are_keyed_by_their_64_and_ipv4_by_address() {
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("192.0.2.1"), key("::ffff:192.0.2.1"));
        assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
    }

    #[test]
    fn host_counts_admit_to_the_cap_and_refuse_above() {
        let a = HostKey::TeredoV4("192.0.2.45".parse().expect("ip"));
        let b = HostKey::V6Site(0x2001_0db8_0001);
        let mut c = HostCounts::new();
        assert!(c.try_admit(a, 2));
        assert!(c.try_admit(a, 2));
        assert!(!c.try_admit(a, 2), "a third is above the cap");
        assert_eq!(c.get(a), 2);
        assert!(c.try_admit(b, 2), "another host has its own count");
        assert_eq!((c.get(b), c.len()), (1, 2));
        assert!(!c.try_admit(b, 1));
        assert!(
            !c.try_admit(HostKey::V6Site(7), 0),
            "a cap of zero admits none"
        );
        assert_eq!(c.len(), 2, "and leaves no entry behind");
    }

    #[test]
    fn host_counts_release_removes_at_zero_and_never_underflows() {
        let a = HostKey::TeredoV4("192.0.2.45".parse().expect("ip"));
        let mut c = HostCounts::new();
        c.release(a);
        assert_eq!((c.get(a), c.len()), (0, 0), "release of a host not counted");
        c.admit(a);
        assert!(c.try_admit(a, 3));
        c.release(a);
        assert_eq!((c.get(a), c.len()), (1, 1));
        c.release(a);
        assert_eq!((c.get(a), c.len()), (0, 0));
        assert!(c.is_empty());
        c.release(a);
        assert_eq!(c.get(a), 0);
        assert!(c.try_admit(a, 1), "counting starts over from zero");
        assert_eq!(c.get(a), 1);
    }

    #[test]
    fn charges_release_what_they_counted() {
        let mut h = HalfOpen::default();
        let a = h.charge("2001:db8::1".parse().expect("ip"), 100);
        let mut b = h.charge("2001:db8::2".parse().expect("ip"), 200);
        assert_eq!((h.count(), h.bytes(), h.sources()), (2, 300, 1));
        assert_eq!(h.of_source("2001:db8::ffff".parse().expect("ip")), 2);
        h.resize(&mut b, 1000);
        assert_eq!(h.bytes(), 1100);
        h.release(a);
        h.release(b);
        assert_eq!((h.count(), h.bytes(), h.sources()), (0, 0, 0));
        assert!(h.by_host.is_empty());
    }

    #[test]
    fn teredo_mappings_aggregate_by_ipv4_and_ipv6_by_48() {
        let mut h = HalfOpen::default();
        let a = h.charge(
            "2001:0:4136:e378:8000:63bf:3fff:fdd2".parse().expect("ip"),
            1,
        );
        let b = h.charge(
            "2001:0:4136:e378:8000:63be:3fff:fdd2".parse().expect("ip"),
            1,
        );
        let c = h.charge("2001:db8:1:2::1".parse().expect("ip"), 1);
        let d = h.charge("2001:db8:1:3::1".parse().expect("ip"), 1);
        assert_eq!(
            h.of_host("2001:0:c000:201:0:6300:3fff:fdd2".parse().expect("ip")),
            2
        );
        assert_eq!(h.of_host("2001:db8:1:ffff::1".parse().expect("ip")), 2);
        assert_eq!(h.of_host("2001:db8:2::1".parse().expect("ip")), 0);
        assert_eq!(h.of_host("192.0.2.45".parse().expect("ip")), 0);
        for ch in [a, b, c, d] {
            h.release(ch);
        }
        assert!(h.by_host.is_empty());
    }

    /// The /64s of the IP-HTTPS pool are hosts of their own: a client's half-open IKE SAs
    /// do not count against the others' who share the pool's /48, while a native /64 outside
    /// the pool still counts against its /48.
    #[test]
    fn leased_64s_are_hosts_of_their_own() {
        let pool: ipnet::Ipv6Net = "2001:db8:8000::/40".parse().expect("prefix");
        let mut h = HalfOpen::new(Hosts::new(Some(pool)));
        let leased = h.charge("2001:db8:8000:1::1".parse().expect("ip"), 1);
        let native = h.charge("2001:db8:9900:1::1".parse().expect("ip"), 1);
        assert_eq!(h.of_host("2001:db8:8000:2::1".parse().expect("ip")), 0);
        assert_eq!(h.of_host("2001:db8:80ff:ffff::1".parse().expect("ip")), 0);
        assert_eq!(h.of_host("2001:db8:9900:2::1".parse().expect("ip")), 1);
        assert_eq!(h.of_source("2001:db8:8000:1::9".parse().expect("ip")), 1);
        h.release(leased);
        h.release(native);
        assert!(h.by_host.is_empty());
    }

    #[test]
    fn hosts_take_leased_prefixes_up_to_64_bits() {
        let v6net = |s: &str| match key(s) {
            SourceKey::V6Net(n) => n,
            other => panic!("{other:?}"),
        };
        let pool64 = Hosts::new(Some("2001:db8:1:2::/64".parse().expect("prefix")));
        assert_eq!(pool64.of(SourceKey::V6Net(v6net("2001:db8:1:2::5"))), None);
        assert!(
            pool64
                .of(SourceKey::V6Net(v6net("2001:db8:1:3::5")))
                .is_some()
        );
        let too_long = Hosts::new(Some("2001:db8:1:2::/96".parse().expect("prefix")));
        assert!(
            too_long
                .of(SourceKey::V6Net(v6net("2001:db8:1:2::5")))
                .is_some()
        );
        let everything = Hosts::new(Some("::/0".parse().expect("prefix")));
        assert_eq!(
            everything.of(SourceKey::V6Net(v6net("2001:db8:1:2::5"))),
            None
        );
        assert!(
            Hosts::default()
                .of(key("2001:0:4136:e378:8000:63bf:3fff:fdd2"))
                .is_some()
        );
    }
}
