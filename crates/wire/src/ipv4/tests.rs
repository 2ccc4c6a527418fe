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
