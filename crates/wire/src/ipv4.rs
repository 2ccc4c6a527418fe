//! IPv4 address classes that Teredo cares about.

use std::net::Ipv4Addr;

/// RFC 4380 §5.2.4 "global unicast" test, the list Miredo's `v4global.c` implements too:
/// 0/8, 10/8, 127/8, 169.254/16, 172.16/12, 192.168/16, 192.88.99/24 (6to4 anycast) and
/// 224/4 and above (multicast, reserved, broadcast) are not global. TEST-NETs and 100.64/10
/// are global by this definition, which is what makes them usable in labs.
pub fn is_teredo_global(addr: Ipv4Addr) -> bool {
    let o = addr.octets();
    !(o[0] == 0
        || o[0] == 10
        || o[0] == 127
        || (o[0] == 169 && o[1] == 254)
        || (o[0] == 172 && (o[1] & 0xf0) == 16)
        || (o[0] == 192 && o[1] == 168)
        || (o[0] == 192 && o[1] == 88 && o[2] == 99)
        || o[0] >= 224)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4380_5_2_4_non_global_list() {
        for a in [
            "0.1.2.3",
            "10.0.0.1",
            "127.0.0.1",
            "169.254.1.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "192.88.99.1",
            "224.0.0.253",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(
                !is_teredo_global(a.parse().unwrap()),
                "{a} must not be global"
            );
        }
        for a in [
            "192.0.2.1",
            "198.51.100.10",
            "100.64.0.1",
            "172.32.0.1",
            "8.8.8.8",
        ] {
            assert!(is_teredo_global(a.parse().unwrap()), "{a} must be global");
        }
    }
}
