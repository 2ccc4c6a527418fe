//! IPv4-embedded IPv6 addresses (RFC 6052 §2).
//!
//! The IPv4 address follows the prefix, skipping byte 8 (bits 64–71, the "u octet", which is
//! always zero); the bytes after it (the suffix) are zero when building and ignored on receipt
//! (RFC 6052 §2.2).

use std::net::{Ipv4Addr, Ipv6Addr};

/// The Well-Known Prefix 64:ff9b::/96 (RFC 6052 §2.1).
pub const WELL_KNOWN_PREFIX: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0);

/// Byte index of the u octet (bits 64–71).
const U_OCTET: usize = 8;

/// Why a prefix was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrefixError {
    /// RFC 6052 §2.2 allows only 32, 40, 48, 56, 64 and 96.
    #[error("prefix length /{0} is not one of 32, 40, 48, 56, 64, 96 (RFC 6052 §2.2)")]
    Length(u8),
    /// Bits 64–71 must be zero (RFC 6052 §2.2); only a /96 covers them.
    #[error("bits 64-71 (the u octet) of the prefix must be zero (RFC 6052 §2.2)")]
    UOctet,
    /// Bits after the prefix length are set, so the prefix is ambiguous.
    #[error("the prefix has bits set after its length")]
    HostBits,
}

/// A NAT64 prefix (Pref64::/n) of one of the RFC 6052 lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    addr: Ipv6Addr,
    len: u8,
    allow_private: bool,
}

impl Prefix {
    /// The Well-Known Prefix 64:ff9b::/96, which refuses non-global IPv4 (RFC 6052 §3.1).
    pub const WELL_KNOWN: Prefix = Prefix {
        addr: WELL_KNOWN_PREFIX,
        len: 96,
        allow_private: false,
    };

    /// Validates `len` and that the u octet and the bits after `len` are zero.
    pub fn new(addr: Ipv6Addr, len: u8) -> Result<Prefix, PrefixError> {
        if !matches!(len, 32 | 40 | 48 | 56 | 64 | 96) {
            return Err(PrefixError::Length(len));
        }
        let o = addr.octets();
        if o[U_OCTET] != 0 {
            return Err(PrefixError::UOctet);
        }
        if o[usize::from(len / 8)..].iter().any(|&b| b != 0) {
            return Err(PrefixError::HostBits);
        }
        Ok(Prefix {
            addr,
            len,
            allow_private: false,
        })
    }

    /// Lets the Well-Known Prefix carry non-global IPv4 addresses, which RFC 6052 §3.1
    /// forbids; for labs and for networks that knowingly break the rule. Network-Specific
    /// Prefixes carry any IPv4 address regardless.
    pub fn allow_private(mut self, allow: bool) -> Prefix {
        self.allow_private = allow;
        self
    }

    /// The prefix address (bits after the length are zero).
    pub fn addr(&self) -> Ipv6Addr {
        self.addr
    }

    /// The prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// True for 64:ff9b::/96.
    pub fn is_well_known(&self) -> bool {
        self.len == 96 && self.addr == WELL_KNOWN_PREFIX
    }

    /// True when the prefix may carry `v4`: always for a Network-Specific Prefix; for the
    /// Well-Known Prefix only global IPv4 unless [`Prefix::allow_private`] was set.
    pub fn admits(&self, v4: Ipv4Addr) -> bool {
        !self.is_well_known() || self.allow_private || is_global_v4(v4)
    }

    /// True when `v6` starts with this prefix.
    pub fn contains(&self, v6: &Ipv6Addr) -> bool {
        let n = usize::from(self.len / 8);
        v6.octets()[..n] == self.addr.octets()[..n]
    }

    /// See [`embed`].
    pub fn embed(&self, v4: Ipv4Addr) -> Option<Ipv6Addr> {
        embed(self, v4)
    }

    /// See [`extract`].
    pub fn extract(&self, v6: &Ipv6Addr) -> Option<Ipv4Addr> {
        extract(self, v6)
    }
}

/// The IPv6 bytes the four IPv4 bytes occupy for a prefix length (RFC 6052 §2.2 figure 1).
fn positions(len: u8) -> [usize; 4] {
    match len {
        32 => [4, 5, 6, 7],
        40 => [5, 6, 7, 9],
        48 => [6, 7, 9, 10],
        56 => [7, 9, 10, 11],
        64 => [9, 10, 11, 12],
        _ => [12, 13, 14, 15],
    }
}

/// Builds the IPv4-embedded IPv6 address of `v4` (RFC 6052 §2.2), with a zero u octet and
/// suffix. `None` when the prefix is the Well-Known Prefix and `v4` is not global
/// (RFC 6052 §3.1), unless the prefix allows it.
pub fn embed(prefix: &Prefix, v4: Ipv4Addr) -> Option<Ipv6Addr> {
    if !prefix.admits(v4) {
        return None;
    }
    let mut o = prefix.addr.octets();
    for (pos, b) in positions(prefix.len).into_iter().zip(v4.octets()) {
        o[pos] = b;
    }
    Some(Ipv6Addr::from(o))
}

/// Recovers the IPv4 address embedded in `v6` (RFC 6052 §2.2). `None` when `v6` is not under
/// the prefix, its u octet is non-zero, or the Well-Known Prefix would carry a non-global
/// address. The suffix is ignored, as RFC 6052 §2.2 says.
pub fn extract(prefix: &Prefix, v6: &Ipv6Addr) -> Option<Ipv4Addr> {
    if !prefix.contains(v6) {
        return None;
    }
    let o = v6.octets();
    if o[U_OCTET] != 0 {
        return None;
    }
    let p = positions(prefix.len);
    let v4 = Ipv4Addr::new(o[p[0]], o[p[1]], o[p[2]], o[p[3]]);
    prefix.admits(v4).then_some(v4)
}

/// True unless `a` is in a block the IANA IPv4 Special-Purpose Address Registry marks as not
/// globally reachable, or is multicast: 0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12,
/// 192.0.0/24 (except .9 and .10), 192.0.2/24, 192.88.99/24, 192.168/16, 198.18/15,
/// 198.51.100/24, 203.0.113/24, 224/4, 240/4 (which includes 255.255.255.255).
pub fn is_global_v4(a: Ipv4Addr) -> bool {
    let o = a.octets();
    let non_global = o[0] == 0
        || o[0] == 10
        || (o[0] == 100 && (o[1] & 0xc0) == 64)
        || o[0] == 127
        || (o[0] == 169 && o[1] == 254)
        || (o[0] == 172 && (o[1] & 0xf0) == 16)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0 && o[3] != 9 && o[3] != 10)
        || (o[0] == 192 && o[1] == 0 && o[2] == 2)
        || (o[0] == 192 && o[1] == 88 && o[2] == 99)
        || (o[0] == 192 && o[1] == 168)
        || (o[0] == 198 && (o[1] & 0xfe) == 18)
        || (o[0] == 198 && o[1] == 51 && o[2] == 100)
        || (o[0] == 203 && o[1] == 0 && o[2] == 113)
        || o[0] >= 224;
    !non_global
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    const V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 33);

    // RFC 6052 §2.4 table (192.0.2.33 = c0.00.02.21), rows checked by hand against figure 1.
    const RFC6052_2_4: [(&str, u8, &str); 6] = [
        ("2001:db8::", 32, "2001:db8:c000:221::"),
        ("2001:db8:100::", 40, "2001:db8:1c0:2:21::"),
        ("2001:db8:122::", 48, "2001:db8:122:c000:2:2100::"),
        ("2001:db8:122:300::", 56, "2001:db8:122:3c0:0:221::"),
        ("2001:db8:122:344::", 64, "2001:db8:122:344:c0:2:2100:0"),
        ("2001:db8:122:344::", 96, "2001:db8:122:344::c000:221"),
    ];

    #[test]
    fn rfc6052_2_4_table() {
        for (p, len, want) in RFC6052_2_4 {
            let prefix = Prefix::new(v6(p), len).unwrap();
            assert_eq!(prefix.embed(V4), Some(v6(want)), "{p}/{len}");
            assert_eq!(prefix.extract(&v6(want)), Some(V4), "{p}/{len}");
        }
    }

    // RFC 6052 §2.4 last row: 64:ff9b::192.0.2.33. 192.0.2.0/24 is TEST-NET-1, not global, so
    // the Well-Known Prefix refuses it unless told otherwise (§3.1).
    #[test]
    fn rfc6052_2_4_well_known_prefix() {
        let want = v6("64:ff9b::c000:221");
        assert_eq!(want, v6("64:ff9b::192.0.2.33"));
        assert_eq!(Prefix::WELL_KNOWN.embed(V4), None);
        assert_eq!(Prefix::WELL_KNOWN.extract(&want), None);
        let lab = Prefix::WELL_KNOWN.allow_private(true);
        assert_eq!(lab.embed(V4), Some(want));
        assert_eq!(lab.extract(&want), Some(V4));
        // A global address passes without the flag.
        let g = Ipv4Addr::new(198, 51, 99, 10);
        assert_eq!(Prefix::WELL_KNOWN.embed(g), Some(v6("64:ff9b::c633:630a")));
    }

    #[test]
    fn rfc6052_3_1_well_known_refuses_private() {
        for a in [
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "127.0.0.1",
            "169.254.0.1",
        ] {
            let a: Ipv4Addr = a.parse().unwrap();
            assert_eq!(Prefix::WELL_KNOWN.embed(a), None, "{a}");
            // A Network-Specific Prefix carries it.
            let nsp = Prefix::new(v6("2001:db8:64::"), 96).unwrap();
            assert!(nsp.embed(a).is_some(), "{a}");
        }
    }

    #[test]
    fn rfc6052_2_2_prefix_validation() {
        for len in [0, 24, 33, 63, 80, 128] {
            assert_eq!(
                Prefix::new(v6("2001:db8::"), len),
                Err(PrefixError::Length(len))
            );
        }
        assert_eq!(
            Prefix::new(v6("2001:db8:0:0:ff00::"), 96),
            Err(PrefixError::UOctet)
        );
        assert_eq!(
            Prefix::new(v6("2001:db8:1::"), 32),
            Err(PrefixError::HostBits)
        );
    }

    #[test]
    fn rfc6052_2_2_extract_checks_prefix_and_u_octet() {
        let p = Prefix::new(v6("2001:db8::"), 32).unwrap();
        assert_eq!(p.extract(&v6("2001:db9:c000:221::")), None);
        assert_eq!(p.extract(&v6("2001:db8:c000:221:100::")), None);
        // Suffix bytes are ignored on receipt.
        assert_eq!(p.extract(&v6("2001:db8:c000:221:0:1::")), Some(V4));
    }

    #[test]
    fn well_known_prefix_is_checksum_neutral() {
        let s: u32 = WELL_KNOWN_PREFIX
            .segments()
            .iter()
            .map(|&w| u32::from(w))
            .sum();
        assert_eq!(s, 0xffff);
    }

    proptest! {
        #[test]
        fn embed_extract_round_trip(
            pre in any::<[u8; 16]>(),
            len_i in 0usize..6,
            v4 in any::<u32>(),
        ) {
            let len = [32u8, 40, 48, 56, 64, 96][len_i];
            let mut o = pre;
            for b in &mut o[usize::from(len / 8)..] {
                *b = 0;
            }
            o[U_OCTET] = 0;
            let p = Prefix::new(Ipv6Addr::from(o), len).unwrap().allow_private(true);
            let v4 = Ipv4Addr::from(v4);
            let a = p.embed(v4).unwrap();
            prop_assert_eq!(a.octets()[U_OCTET], 0);
            prop_assert_eq!(p.extract(&a), Some(v4));
        }
    }
}
