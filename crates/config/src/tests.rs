use super::*;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::line_column;
use crate::parse::SECTIONS;
use ipnet::Ipv6Net;
use proptest::prelude::*;

/// The smallest valid file: only the required keys.
const MINIMAL: &[(&str, &str)] = &[
    ("teredo", r#"server_addresses = ["192.0.2.1", "192.0.2.2"]"#),
    ("corpnet", r#"ipv6_prefixes = ["2001:db8:100::/48"]"#),
    ("corpnet", r#"address6 = "2001:db8:100::1""#),
];

/// Builds a file from [`MINIMAL`] with `changes` applied: a `(section, "key = value")` pair
/// replaces the line with the same key or adds it; `(section, "key")` without `=` removes it.
fn doc(changes: &[(&str, &str)]) -> String {
    fn key(line: &str) -> &str {
        line.split('=').next().unwrap_or("").trim()
    }
    let mut lines: Vec<(String, String)> = MINIMAL
        .iter()
        .map(|(s, l)| (s.to_string(), l.to_string()))
        .collect();
    for (section, line) in changes {
        lines.retain(|(s, l)| !(s == section && key(l) == key(line)));
        if line.contains('=') {
            lines.push((section.to_string(), line.to_string()));
        }
    }
    let mut sections: Vec<&str> = Vec::new();
    for (s, _) in &lines {
        if !sections.contains(&s.as_str()) {
            sections.push(s);
        }
    }
    let mut out = String::new();
    for s in sections {
        out.push_str(&format!("[{s}]\n"));
        for (_, l) in lines.iter().filter(|(ls, _)| ls == s) {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// The warnings other than the one every file without IPsec credentials draws (tested in
/// `ipsec/tests.rs`).
fn advice(c: &Config) -> Vec<String> {
    c.warnings()
        .into_iter()
        .filter(|w| !w.contains("IPsec is not configured"))
        .collect()
}

fn parse(changes: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_toml_str(&doc(changes))
}

#[track_caller]
fn refused(changes: &[(&str, &str)]) -> ConfigError {
    match parse(changes) {
        Ok(c) => panic!("accepted {changes:?}: {c:?}"),
        Err(e) => e,
    }
}

/// Asserts that the error names `key` and every one of `needles`, and returns the message.
#[track_caller]
fn assert_names(e: &ConfigError, key: &str, needles: &[&str]) -> String {
    let msg = e.to_string();
    assert!(msg.contains(key), "{msg:?} does not name {key:?}");
    assert_eq!(e.key(), Some(key), "{msg}");
    for n in needles {
        assert!(msg.contains(n), "{msg:?} does not contain {n:?}");
    }
    msg
}

#[test]
fn tls_threads_bounded_and_named() {
    let e = Config::from_toml_str(&doc(&[("server", "tls_threads = 5000")])).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("server.tls_threads") && msg.contains("5000"),
        "{msg}"
    );
    let c = Config::from_toml_str(&doc(&[("server", "tls_threads = 3")])).unwrap();
    assert_eq!(c.effective_tls_threads(), 3);
}

#[test]
fn server_user_and_group_checked_and_named() {
    let c = parse(&[("server", r#"user = "gate64""#)]).unwrap();
    assert_eq!(c.server.user.as_deref(), Some("gate64"));
    assert_eq!(c.server.group, None);
    let c = parse(&[
        ("server", r#"user = "gate64""#),
        ("server", r#"group = "nogroup""#),
    ])
    .unwrap();
    assert_eq!(c.server.group.as_deref(), Some("nogroup"));
    for (line, key, needles) in [
        (r#"user = "root""#, "server.user", &["root", "uid 0"][..]),
        (r#"user = """#, "server.user", &["1 to 32"][..]),
        (r#"user = "a b""#, "server.user", &["letters"][..]),
        (r#"user = "-x""#, "server.user", &["leading"][..]),
        (r#"user = "1000""#, "server.user", &["numeric"][..]),
        (r#"group = "nogroup""#, "server.group", &["server.user"][..]),
    ] {
        let e = refused(&[("server", line)]);
        assert_names(&e, key, needles);
    }
    let long = format!("user = \"{}\"", "u".repeat(33));
    assert_names(&refused(&[("server", &long)]), "server.user", &["32"]);
}

#[test]
fn minimal_file_gets_the_documented_defaults() {
    let c = parse(&[]).unwrap();
    assert_eq!(
        c.server,
        Server {
            workers: 0,
            tls_threads: 0,
            user: None,
            group: None,
        }
    );
    assert_eq!(
        c.teredo,
        Teredo {
            enabled: true,
            server_addresses: [Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2)],
            port: 3544,
            relay: true,
            lab_allow_loopback: false,
        }
    );
    assert_eq!(c.corpnet.tun, "gate64");
    assert_eq!(
        c.corpnet.ipv6_prefixes,
        vec!["2001:db8:100::/48".parse::<Ipv6Net>().unwrap()]
    );
    assert_eq!(
        c.corpnet.address6,
        "2001:db8:100::1".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(c.corpnet.mtu, 1280);
    assert!(c.corpnet.manage_routes);
    assert!(!c.corpnet.tun_napi, "a plain TUN unless asked");
    assert!(c.ipsec.require && !c.ipsec.configured());
    assert_eq!(
        c.metrics.listen,
        Some("127.0.0.1:9164".parse::<SocketAddr>().unwrap())
    );
    assert_eq!(
        c.limits,
        Limits {
            rs_per_source_per_sec: 20,
            rs_burst: 40,
            max_teredo_peers: 1_000_000,
            relay_queue_packets: 8,
            peer_idle_timeout_secs: 30,
            max_teredo_peers_per_ipv4: 256,
            teredo_relay_per_source_per_sec: 10,
            teredo_relay_per_destination_per_sec: 10,
            max_tls_handshakes: 1024,
            max_iphttps_connections: 50_000,
            tls_handshake_timeout_secs: 10,
        }
    );
    assert_eq!(c.limits, Limits::default());
    assert_eq!(
        c.iphttps,
        Iphttps {
            enabled: false,
            listen: "0.0.0.0:443".parse().unwrap(),
            path: "/IPHTTPS".to_owned(),
            certificate: None,
            private_key: None,
            client_ca: None,
            client_crls: Vec::new(),
            prefix: None,
            idle_timeout_secs: 900,
            ra_interval_secs: 300,
            send_queue_bytes: 4_194_304,
            queue_budget_bytes: 268_435_456,
            write_timeout_secs: 30,
            client_hello_timeout_secs: 2,
            max_handshakes_per_source: 32,
            max_handshakes_per_network: 128,
            max_connections_per_source: 1024,
        }
    );
    assert_eq!(c.iphttps, Iphttps::default());
    c.check_files().unwrap();
    assert_eq!(c.log, Log::default());
    assert_eq!(c.log.level, "info");
    assert_eq!(c.log.format, LogFormat::Text);
    assert_eq!(c.teredo_primary(), Ipv4Addr::new(192, 0, 2, 1));
    assert_eq!(c.teredo_secondary(), Ipv4Addr::new(192, 0, 2, 2));
    // Only the advice that IPsec needs its files before a client reaches the corporate side.
    assert_eq!(c.warnings().len(), 1, "{:?}", c.warnings());
    assert!(advice(&c).is_empty(), "{:?}", c.warnings());
}

#[test]
fn every_key_can_be_set() {
    let c = parse(&[
        ("server", "workers = 4"),
        ("teredo", "enabled = true"),
        ("teredo", r#"server_addresses = ["127.0.0.1", "127.0.0.2"]"#),
        ("teredo", "port = 13544"),
        ("teredo", "relay = true"),
        ("teredo", "lab_allow_loopback = true"),
        ("corpnet", r#"tun = "corp0""#),
        (
            "corpnet",
            r#"ipv6_prefixes = ["2001:db8:100::/48", "fd00:1::/64"]"#,
        ),
        ("corpnet", r#"address6 = "fd00:1::1""#),
        ("corpnet", "mtu = 9000"),
        ("corpnet", "manage_routes = false"),
        ("ipsec", "require = false"),
        ("metrics", "enabled = true"),
        ("metrics", r#"listen = "[::1]:9999""#),
        ("limits", "rs_per_source_per_sec = 5"),
        ("limits", "rs_burst = 5"),
        ("limits", "max_teredo_peers = 10"),
        ("limits", "relay_queue_packets = 1024"),
        ("limits", "peer_idle_timeout_secs = 3600"),
        ("limits", "max_teredo_peers_per_ipv4 = 1"),
        ("limits", "teredo_relay_per_source_per_sec = 1000"),
        ("limits", "teredo_relay_per_destination_per_sec = 2"),
        ("limits", "max_tls_handshakes = 1"),
        ("limits", "max_iphttps_connections = 1"),
        ("limits", "tls_handshake_timeout_secs = 300"),
        ("iphttps", "enabled = true"),
        ("iphttps", r#"listen = "[::]:8443""#),
        ("iphttps", r#"path = "/IPTLS""#),
        ("iphttps", r#"certificate = "/etc/gate64/iphttps.crt""#),
        ("iphttps", r#"private_key = "/etc/gate64/iphttps.key""#),
        ("iphttps", r#"client_ca = "/etc/gate64/clients.pem""#),
        ("iphttps", r#"prefix = "2001:db8:1::/48""#),
        ("iphttps", "idle_timeout_secs = 0"),
        ("iphttps", "ra_interval_secs = 86400"),
        ("iphttps", "send_queue_bytes = 16777216"),
        ("iphttps", "queue_budget_bytes = 33554432"),
        ("iphttps", "write_timeout_secs = 600"),
        ("iphttps", "client_hello_timeout_secs = 60"),
        ("iphttps", "max_handshakes_per_source = 1"),
        ("iphttps", "max_handshakes_per_network = 2"),
        ("iphttps", "max_connections_per_source = 1"),
        ("log", r#"level = "warn,gate64_teredo=trace""#),
        ("log", r#"format = "json""#),
    ])
    .unwrap();
    assert_eq!(c.server.workers, 4);
    assert_eq!(c.effective_workers(), 4);
    assert_eq!(c.teredo.port, 13544);
    assert!(c.teredo.relay && c.teredo.lab_allow_loopback);
    assert_eq!(c.corpnet.tun, "corp0");
    assert_eq!(c.corpnet.ipv6_prefixes.len(), 2);
    assert_eq!(c.corpnet.mtu, 9000);
    assert!(!c.corpnet.manage_routes && !c.ipsec.require);
    assert_eq!(c.metrics.listen, Some("[::1]:9999".parse().unwrap()));
    assert_eq!(
        c.limits,
        Limits {
            rs_per_source_per_sec: 5,
            rs_burst: 5,
            max_teredo_peers: 10,
            relay_queue_packets: 1024,
            peer_idle_timeout_secs: 3600,
            max_teredo_peers_per_ipv4: 1,
            teredo_relay_per_source_per_sec: 1000,
            teredo_relay_per_destination_per_sec: 2,
            max_tls_handshakes: 1,
            max_iphttps_connections: 1,
            tls_handshake_timeout_secs: 300,
        }
    );
    assert_eq!(
        c.iphttps,
        Iphttps {
            enabled: true,
            listen: "[::]:8443".parse().unwrap(),
            path: "/IPTLS".to_owned(),
            certificate: Some("/etc/gate64/iphttps.crt".into()),
            private_key: Some("/etc/gate64/iphttps.key".into()),
            client_ca: Some("/etc/gate64/clients.pem".into()),
            client_crls: Vec::new(),
            prefix: Some("2001:db8:1::/48".parse().unwrap()),
            idle_timeout_secs: 0,
            ra_interval_secs: 86400,
            send_queue_bytes: 16_777_216,
            queue_budget_bytes: 33_554_432,
            write_timeout_secs: 600,
            client_hello_timeout_secs: 60,
            max_handshakes_per_source: 1,
            max_handshakes_per_network: 2,
            max_connections_per_source: 1,
        }
    );
    assert_eq!(c.log.level, "warn,gate64_teredo=trace");
    assert_eq!(c.log.format, LogFormat::Json);
}

#[test]
fn effective_workers_is_one_per_core_when_zero() {
    let c = parse(&[]).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(c.effective_workers(), cores);
    assert!(c.effective_workers() >= 1);
}

#[test]
fn rs_burst_defaults_to_twice_a_configured_rate() {
    let c = parse(&[("limits", "rs_per_source_per_sec = 100")]).unwrap();
    assert_eq!(c.limits.rs_burst, 200);
    let c = parse(&[("limits", "rs_per_source_per_sec = 4294967295")]).unwrap();
    assert_eq!(c.limits.rs_burst, u32::MAX);
}

#[test]
fn metrics_can_be_disabled() {
    let c = parse(&[("metrics", "enabled = false")]).unwrap();
    assert_eq!(c.metrics.listen, None);
    let c = parse(&[
        ("metrics", "enabled = false"),
        ("metrics", r#"listen = "127.0.0.1:1""#),
    ])
    .unwrap();
    assert_eq!(c.metrics.listen, None);
    let c = parse(&[("metrics", r#"listen = "127.0.0.1:0""#)]).unwrap();
    assert_eq!(c.metrics.listen, Some("127.0.0.1:0".parse().unwrap()));
}

#[test]
fn metrics_allowed_hosts_are_names_kept_in_lower_case() {
    assert!(parse(&[]).unwrap().metrics.allowed_hosts.is_empty());
    let c = parse(&[(
        "metrics",
        r#"allowed_hosts = ["Gate64-Mgmt.Example.NET.", "prometheus"]"#,
    )])
    .unwrap();
    assert_eq!(
        c.metrics.allowed_hosts,
        ["gate64-mgmt.example.net", "prometheus"]
    );
    for bad in [
        "10.0.0.1",
        "[::1]",
        "::1",
        "host:9164",
        "",
        "-lead.example",
        "a..b",
        "under_score.example",
        "0x7f.1",
    ] {
        let e = refused(&[("metrics", &format!("allowed_hosts = [\"{bad}\"]"))]);
        assert_names(&e, "metrics.allowed_hosts", &["host name"]);
    }
    let e = refused(&[("metrics", r#"allowed_hosts = "one.example""#)]);
    assert_names(&e, "metrics.allowed_hosts", &["list of host names"]);
}

#[test]
fn teredo_disabled_needs_no_server_addresses() {
    let c = parse(&[
        ("teredo", "enabled = false"),
        ("teredo", "server_addresses"),
    ])
    .unwrap();
    assert!(!c.teredo.enabled);
    assert_eq!(c.teredo.server_addresses, [Ipv4Addr::UNSPECIFIED; 2]);
    let w = c.warnings();
    assert!(
        w.iter()
            .any(|w| w.starts_with("teredo.enabled") && w.contains("no client transport")),
        "{w:?}"
    );
    // With IP-HTTPS enabled there is a client transport, so no warning about Teredo.
    let c = parse(&[
        ("teredo", "enabled = false"),
        ("teredo", "server_addresses"),
        ("iphttps", "enabled = true"),
        ("iphttps", r#"certificate = "/c.pem""#),
        ("iphttps", r#"private_key = "/k.pem""#),
        ("iphttps", r#"client_ca = "/ca.pem""#),
        ("iphttps", r#"prefix = "2001:db8:1::/48""#),
    ])
    .unwrap();
    assert!(advice(&c).is_empty(), "{:?}", c.warnings());
    // Addresses are not checked while Teredo is off.
    parse(&[
        ("teredo", "enabled = false"),
        ("teredo", r#"server_addresses = ["10.0.0.1", "10.0.0.1"]"#),
    ])
    .unwrap();
}

#[test]
fn loopback_server_addresses_need_lab_allow_loopback() {
    let lo = ("teredo", r#"server_addresses = ["127.0.0.1", "127.0.0.2"]"#);
    let e = refused(&[lo]);
    assert_names(&e, "teredo.server_addresses", &["127.0.0.1", "loopback"]);
    let c = parse(&[lo, ("teredo", "lab_allow_loopback = true")]).unwrap();
    assert!(
        c.warnings()
            .iter()
            .any(|w| w.contains("lab_allow_loopback"))
    );
    // lab_allow_loopback allows loopback only, not private ranges.
    let e = refused(&[
        ("teredo", r#"server_addresses = ["127.0.0.1", "10.0.0.2"]"#),
        ("teredo", "lab_allow_loopback = true"),
    ]);
    assert_names(
        &e,
        "teredo.server_addresses",
        &["10.0.0.2", "secondary", "10.0.0.0/8"],
    );
}

#[test]
fn each_semantic_rule_names_key_and_value() {
    // (change, key named, value shown)
    let cases: &[((&str, &str), &str, &str)] = &[
        (("server", "workers = 5000"), "server.workers", "5000"),
        (("teredo", "port = 0"), "teredo.port", "= 0"),
        (
            ("teredo", r#"server_addresses = ["192.0.2.1", "192.0.2.1"]"#),
            "teredo.server_addresses",
            "192.0.2.1",
        ),
        (("corpnet", r#"tun = """#), "corpnet.tun", r#""""#),
        (
            ("corpnet", r#"tun = "abcdefghijklmnop""#),
            "corpnet.tun",
            "abcdefghijklmnop",
        ),
        (("corpnet", r#"tun = "a/b""#), "corpnet.tun", "a/b"),
        (("corpnet", r#"tun = "a b""#), "corpnet.tun", "a b"),
        (("corpnet", r#"tun = "a:b""#), "corpnet.tun", "a:b"),
        (("corpnet", r#"tun = ".""#), "corpnet.tun", r#"".""#),
        (("corpnet", r#"tun = "..""#), "corpnet.tun", r#""..""#),
        (
            ("corpnet", "ipv6_prefixes = []"),
            "corpnet.ipv6_prefixes",
            "[]",
        ),
        (
            ("corpnet", r#"ipv6_prefixes = ["2001:0:100::/48"]"#),
            "corpnet.ipv6_prefixes",
            "2001:0:100::/48",
        ),
        (
            ("corpnet", r#"ipv6_prefixes = ["2000::/3"]"#),
            "corpnet.ipv6_prefixes",
            "2000::/3",
        ),
        (
            ("corpnet", r#"ipv6_prefixes = ["::/0"]"#),
            "corpnet.ipv6_prefixes",
            "::/0",
        ),
        (
            ("corpnet", r#"ipv6_prefixes = ["2001:db8:100::1/48"]"#),
            "corpnet.ipv6_prefixes",
            "2001:db8:100::1/48",
        ),
        (
            ("corpnet", r#"ipv6_prefixes = ["fe80::/64"]"#),
            "corpnet.ipv6_prefixes",
            "fe80::/64",
        ),
        (
            ("corpnet", r#"ipv6_prefixes = ["ff05::/16"]"#),
            "corpnet.ipv6_prefixes",
            "ff05::/16",
        ),
        (
            ("corpnet", r#"address6 = "fe80::1""#),
            "corpnet.address6",
            "fe80::1",
        ),
        (
            ("corpnet", r#"address6 = "ff02::1""#),
            "corpnet.address6",
            "ff02::1",
        ),
        (
            ("corpnet", r#"address6 = "::1""#),
            "corpnet.address6",
            "::1",
        ),
        (
            ("corpnet", r#"address6 = "::""#),
            "corpnet.address6",
            r#""::""#,
        ),
        (
            ("corpnet", r#"address6 = "::ffff:192.0.2.1""#),
            "corpnet.address6",
            "::ffff:",
        ),
        (
            ("corpnet", r#"address6 = "2001:0:1::1""#),
            "corpnet.address6",
            "2001:0:1::1",
        ),
        (("corpnet", "mtu = 1279"), "corpnet.mtu", "1279"),
        (
            ("limits", "rs_per_source_per_sec = 0"),
            "limits.rs_per_source_per_sec",
            "= 0",
        ),
        (("limits", "rs_burst = 19"), "limits.rs_burst", "19"),
        (
            ("limits", "max_teredo_peers = 0"),
            "limits.max_teredo_peers",
            "= 0",
        ),
        (
            ("limits", "relay_queue_packets = 0"),
            "limits.relay_queue_packets",
            "= 0",
        ),
        (
            ("limits", "relay_queue_packets = 1025"),
            "limits.relay_queue_packets",
            "1025",
        ),
        (
            ("limits", "peer_idle_timeout_secs = 9"),
            "limits.peer_idle_timeout_secs",
            "9",
        ),
        (
            ("limits", "peer_idle_timeout_secs = 3601"),
            "limits.peer_idle_timeout_secs",
            "3601",
        ),
        (
            ("limits", "max_teredo_peers_per_ipv4 = 0"),
            "limits.max_teredo_peers_per_ipv4",
            "= 0",
        ),
        (
            ("limits", "teredo_relay_per_source_per_sec = 0"),
            "limits.teredo_relay_per_source_per_sec",
            "= 0",
        ),
        (
            ("limits", "teredo_relay_per_destination_per_sec = 0"),
            "limits.teredo_relay_per_destination_per_sec",
            "= 0",
        ),
        (("log", r#"level = """#), "log.level", r#""""#),
        (
            ("log", r#"level = "info gate64=debug""#),
            "log.level",
            "info gate64=debug",
        ),
        (("log", r#"level = "[span]""#), "log.level", "[span]"),
        (
            ("limits", "max_tls_handshakes = 0"),
            "limits.max_tls_handshakes",
            "= 0",
        ),
        (
            ("limits", "max_iphttps_connections = 0"),
            "limits.max_iphttps_connections",
            "= 0",
        ),
        (
            ("limits", "tls_handshake_timeout_secs = 0"),
            "limits.tls_handshake_timeout_secs",
            "= 0",
        ),
        (
            ("limits", "tls_handshake_timeout_secs = 301"),
            "limits.tls_handshake_timeout_secs",
            "301",
        ),
        (("iphttps", r#"path = """#), "iphttps.path", r#""""#),
        (
            ("iphttps", r#"path = "IPHTTPS""#),
            "iphttps.path",
            "IPHTTPS",
        ),
        (
            ("iphttps", r#"path = "/IP HTTPS""#),
            "iphttps.path",
            "/IP HTTPS",
        ),
        (
            ("iphttps", r#"path = "/IPHTTPS\t""#),
            "iphttps.path",
            "/IPHTTPS",
        ),
        (("iphttps", r#"path = "/é""#), "iphttps.path", "/é"),
        (("iphttps", r#"path = "/\u007f""#), "iphttps.path", "/"),
        (
            ("iphttps", r#"certificate = """#),
            "iphttps.certificate",
            r#""""#,
        ),
        (
            ("iphttps", r#"private_key = """#),
            "iphttps.private_key",
            r#""""#,
        ),
        (
            ("iphttps", r#"client_ca = """#),
            "iphttps.client_ca",
            r#""""#,
        ),
        (
            ("iphttps", r#"prefix = "2001:db8:1::/65""#),
            "iphttps.prefix",
            "2001:db8:1::/65",
        ),
        (("iphttps", r#"prefix = "::/0""#), "iphttps.prefix", "::/0"),
        (
            ("iphttps", r#"prefix = "2001:db8:1::1/48""#),
            "iphttps.prefix",
            "2001:db8:1::1/48",
        ),
        (
            ("iphttps", r#"prefix = "2001:0:1::/48""#),
            "iphttps.prefix",
            "2001:0:1::/48",
        ),
        (
            ("iphttps", r#"prefix = "2000::/3""#),
            "iphttps.prefix",
            "2000::/3",
        ),
        (
            ("iphttps", r#"prefix = "fe80::/64""#),
            "iphttps.prefix",
            "fe80::/64",
        ),
        (
            ("iphttps", r#"prefix = "2001:db8:100:1::/64""#),
            "iphttps.prefix",
            "2001:db8:100:1::/64",
        ),
        (
            ("iphttps", r#"prefix = "2001:db8::/32""#),
            "iphttps.prefix",
            "2001:db8::/32",
        ),
        (
            ("iphttps", "idle_timeout_secs = 59"),
            "iphttps.idle_timeout_secs",
            "59",
        ),
        (
            ("iphttps", "idle_timeout_secs = 1"),
            "iphttps.idle_timeout_secs",
            "= 1",
        ),
        (
            ("iphttps", "ra_interval_secs = 9"),
            "iphttps.ra_interval_secs",
            "9",
        ),
        (
            ("iphttps", "ra_interval_secs = 86401"),
            "iphttps.ra_interval_secs",
            "86401",
        ),
        (
            ("iphttps", "send_queue_bytes = 16383"),
            "iphttps.send_queue_bytes",
            "16383",
        ),
        (
            ("iphttps", "send_queue_bytes = 16777217"),
            "iphttps.send_queue_bytes",
            "16777217",
        ),
    ];
    for (change, key, value) in cases {
        let e = refused(&[*change]);
        assert_eq!(e.kind(), ErrorKind::InvalidValue, "{e}");
        assert_names(&e, key, &[value]);
        assert!(!e.reason().is_empty());
    }
}

#[test]
fn iphttps_rules_give_their_reason() {
    let cases: &[((&str, &str), &str, &str)] = &[
        (
            ("iphttps", r#"path = "IPHTTPS""#),
            "iphttps.path",
            "start with '/'",
        ),
        (("iphttps", r#"path = "/a b""#), "iphttps.path", "' '"),
        (
            ("iphttps", r#"prefix = "2001:db8:1::/65""#),
            "iphttps.prefix",
            "1..=64",
        ),
        (
            ("iphttps", r#"prefix = "2001:db8:1::1/48""#),
            "iphttps.prefix",
            "2001:db8:1::/48?",
        ),
        (
            ("iphttps", r#"prefix = "2001:0:1::/48""#),
            "iphttps.prefix",
            "2001::/32",
        ),
        (
            ("iphttps", r#"prefix = "2001:db8::/32""#),
            "iphttps.prefix",
            "corpnet.ipv6_prefixes",
        ),
        (
            ("iphttps", "idle_timeout_secs = 59"),
            "iphttps.idle_timeout_secs",
            "0 (never)",
        ),
    ];
    for (change, key, reason) in cases {
        let e = refused(&[*change]);
        assert_names(&e, key, &[reason]);
    }
    // gate64's own address outside corpnet.ipv6_prefixes but inside the client pool.
    let e = refused(&[
        ("corpnet", r#"address6 = "2001:db8:1::1""#),
        ("iphttps", r#"prefix = "2001:db8:1::/48""#),
    ]);
    assert_names(
        &e,
        "iphttps.prefix",
        &["2001:db8:1::/48", "corpnet.address6"],
    );
}

#[test]
fn iphttps_boundaries_are_accepted() {
    for change in [
        ("iphttps", r#"path = "/""#),
        ("iphttps", r#"path = "/a/b?c=d&e=%20~""#),
        ("iphttps", "idle_timeout_secs = 0"),
        ("iphttps", "idle_timeout_secs = 60"),
        ("iphttps", "ra_interval_secs = 10"),
        ("iphttps", "ra_interval_secs = 86400"),
        ("iphttps", "send_queue_bytes = 16384"),
        ("iphttps", "send_queue_bytes = 16777216"),
        ("iphttps", r#"prefix = "2001:db8:1:2::/64""#),
        ("iphttps", r#"prefix = "fd00:1::/48""#),
        ("iphttps", r#"listen = "127.0.0.1:0""#),
        ("limits", "tls_handshake_timeout_secs = 1"),
    ] {
        parse(&[change]).unwrap_or_else(|e| panic!("{change:?}: {e}"));
    }
    let long = format!("path = \"/{}\"", "a".repeat(255));
    assert_eq!(
        parse(&[("iphttps", &long)]).unwrap().iphttps.path.len(),
        256
    );
    let too_long = format!("path = \"/{}\"", "a".repeat(256));
    let e = refused(&[("iphttps", &too_long)]);
    assert_names(&e, "iphttps.path", &["257 bytes", "256"]);
}

#[test]
fn iphttps_limits_name_key_value_and_reason() {
    for (change, key, needles) in [
        (
            ("iphttps", "queue_budget_bytes = 1048575"),
            "iphttps.queue_budget_bytes",
            &["1048575", "1048576"][..],
        ),
        (
            ("iphttps", "queue_budget_bytes = 2097152"),
            "iphttps.queue_budget_bytes",
            &["at least iphttps.send_queue_bytes (4194304)"][..],
        ),
        (
            ("iphttps", "write_timeout_secs = 4"),
            "iphttps.write_timeout_secs",
            &["5..=600"][..],
        ),
        (
            ("iphttps", "client_hello_timeout_secs = 0"),
            "iphttps.client_hello_timeout_secs",
            &["1..=60"][..],
        ),
        (
            ("iphttps", "max_handshakes_per_source = 0"),
            "iphttps.max_handshakes_per_source",
            &["at least 1"][..],
        ),
        (
            ("iphttps", "max_handshakes_per_network = 0"),
            "iphttps.max_handshakes_per_network",
            &["at least 1"][..],
        ),
        (
            ("iphttps", "max_connections_per_source = 0"),
            "iphttps.max_connections_per_source",
            &["at least 1"][..],
        ),
    ] {
        assert_names(&refused(&[change]), key, needles);
    }
}

// check-config refuses a pool that cannot give every admitted connection its /64; the
// defaults fit the example's /48.
#[test]
fn iphttps_pool_must_hold_max_connections() {
    let enabled: &[(&str, &str)] = &[
        ("iphttps", "enabled = true"),
        ("iphttps", r#"certificate = "/etc/gate64/iphttps.crt""#),
        ("iphttps", r#"private_key = "/etc/gate64/iphttps.key""#),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v = enabled.to_vec();
        v.extend_from_slice(extra);
        v
    };
    parse(&with(&[("iphttps", r#"prefix = "2001:db8:1::/48""#)])).unwrap();
    let e = refused(&with(&[("iphttps", r#"prefix = "2001:db8:1::/56""#)]));
    assert_names(
        &e,
        "iphttps.prefix",
        &["256 /64s", "limits.max_iphttps_connections (50000)"],
    );
    parse(&with(&[
        ("iphttps", r#"prefix = "2001:db8:1::/56""#),
        ("limits", "max_iphttps_connections = 256"),
    ]))
    .unwrap();
    let e = refused(&with(&[
        ("iphttps", r#"prefix = "2001:db8:1::/48""#),
        ("limits", "max_iphttps_connections = 65537"),
    ]));
    assert_names(&e, "iphttps.prefix", &["65536 /64s"]);
}

#[test]
fn iphttps_enabled_requires_certificate_key_and_prefix() {
    let full: &[(&str, &str)] = &[
        ("iphttps", "enabled = true"),
        ("iphttps", r#"certificate = "/etc/gate64/iphttps.crt""#),
        ("iphttps", r#"private_key = "/etc/gate64/iphttps.key""#),
        ("iphttps", r#"prefix = "2001:db8:1::/48""#),
    ];
    let c = parse(full).unwrap();
    assert!(c.iphttps.enabled);
    for key in ["certificate", "private_key", "prefix"] {
        let mut changes = full.to_vec();
        changes.push(("iphttps", key));
        let e = refused(&changes);
        assert_eq!(e.kind(), ErrorKind::MissingKey, "{e}");
        let path = format!("iphttps.{key}");
        assert_names(
            &e,
            &path,
            &[&format!("missing required key `{path}`"), "iphttps.enabled"],
        );
    }
    // Disabled: nothing is required.
    let c = parse(&[("iphttps", "enabled = false")]).unwrap();
    assert!(!c.iphttps.enabled && c.iphttps.prefix.is_none());
    // The same rule holds for a configuration built in memory.
    let mut c = parse(&[]).unwrap();
    c.iphttps.enabled = true;
    assert_eq!(c.validate().unwrap_err().key(), Some("iphttps.certificate"));
}

#[test]
fn iphttps_warnings() {
    let enabled: &[(&str, &str)] = &[
        ("iphttps", "enabled = true"),
        ("iphttps", r#"certificate = "/c.pem""#),
        ("iphttps", r#"private_key = "/k.pem""#),
        ("iphttps", r#"prefix = "2001:db8:1::/48""#),
    ];
    let w = advice(&parse(enabled).unwrap());
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("iphttps.client_ca"), "{w:?}");
    assert!(w[0].contains("not authenticated at TLS"), "{w:?}");
    assert!(w[0].contains("IPsec"), "{w:?}");
    let mut with_ca = enabled.to_vec();
    with_ca.push(("iphttps", r#"client_ca = "/ca.pem""#));
    assert!(advice(&parse(&with_ca).unwrap()).is_empty());
    // Disabled without a CA: no advice about it.
    assert!(advice(&parse(&[]).unwrap()).is_empty());
}

#[test]
fn check_files_names_the_key_and_path() {
    let dir = std::env::temp_dir().join(format!("gate64-config-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let crt = dir.join("iphttps.crt");
    let key = dir.join("iphttps.key");
    let ca = dir.join("ca.pem");
    for f in [&crt, &key, &ca] {
        std::fs::write(f, "-----BEGIN X-----\n").unwrap();
    }
    let mut c = Config::lab(
        Ipv4Addr::new(127, 0, 0, 1),
        Ipv4Addr::new(127, 0, 0, 2),
        40000,
    );
    // Disabled: the files are not looked at.
    c.iphttps.certificate = Some(dir.join("absent.crt"));
    c.check_files().unwrap();

    c.iphttps = Config::lab_iphttps("127.0.0.1:0".parse().unwrap(), crt.clone(), key.clone());
    c.validate().unwrap();
    c.check_files().unwrap();
    c.iphttps.client_ca = Some(ca.clone());
    c.check_files().unwrap();

    let absent = dir.join("absent.pem");
    for field in [
        "iphttps.certificate",
        "iphttps.private_key",
        "iphttps.client_ca",
    ] {
        for bad in [absent.clone(), dir.clone()] {
            let mut c = c.clone();
            let slot = match field {
                "iphttps.certificate" => &mut c.iphttps.certificate,
                "iphttps.private_key" => &mut c.iphttps.private_key,
                _ => &mut c.iphttps.client_ca,
            };
            *slot = Some(bad.clone());
            let e = c.check_files().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Io, "{e}");
            let msg = assert_names(&e, field, &[&bad.display().to_string()]);
            assert!(!msg.contains("configuration file"), "{msg}");
            if bad == absent {
                assert!(e.io_error().is_some());
                // `gate64: error: iphttps.certificate: cannot read PATH: No such file ...`:
                // the key first, the file and the OS's reason once.
                assert_eq!(
                    msg,
                    format!(
                        "{field}: cannot read {}: No such file or directory (os error 2)",
                        bad.display()
                    )
                );
                assert!(std::error::Error::source(&e).is_none());
            } else {
                assert!(msg.contains("not a regular file"), "{msg}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn teredo_server_addresses_must_be_global() {
    for bad in [
        "0.1.2.3",
        "10.1.2.3",
        "127.0.0.1",
        "169.254.1.1",
        "172.16.0.1",
        "172.31.255.254",
        "192.168.1.1",
        "192.88.99.1",
        "224.0.0.1",
        "239.1.1.1",
        "240.0.0.1",
        "255.255.255.255",
    ] {
        let line = format!(r#"server_addresses = ["{bad}", "192.0.2.2"]"#);
        let e = refused(&[("teredo", &line)]);
        assert_names(&e, "teredo.server_addresses", &[bad, "primary"]);
        let line = format!(r#"server_addresses = ["192.0.2.1", "{bad}"]"#);
        let e = refused(&[("teredo", &line)]);
        assert_names(&e, "teredo.server_addresses", &[bad, "secondary"]);
    }
    for good in [
        "172.32.0.1",
        "172.15.255.254",
        "192.88.98.1",
        "100.64.0.1",
        "203.0.113.9",
    ] {
        let line = format!(r#"server_addresses = ["{good}", "192.0.2.2"]"#);
        parse(&[("teredo", &line)]).unwrap();
    }
}

#[test]
fn non_consecutive_server_addresses_are_only_a_warning() {
    let c = parse(&[("teredo", r#"server_addresses = ["192.0.2.1", "192.0.2.9"]"#)]).unwrap();
    let w = c.warnings();
    assert!(
        w.iter()
            .any(|w| w.contains("teredo.server_addresses") && w.contains("192.0.2.9")),
        "{w:?}"
    );
    let c = parse(&[("teredo", r#"server_addresses = ["192.0.2.2", "192.0.2.1"]"#)]).unwrap();
    assert_eq!(advice(&c).len(), 1);
}

#[test]
fn warnings_name_their_key() {
    let c = parse(&[
        ("teredo", "port = 4000"),
        ("ipsec", "require = false"),
        (
            "corpnet",
            r#"ipv6_prefixes = ["2001:db8:100::/48", "2001:db8:100:1::/64"]"#,
        ),
        ("corpnet", r#"address6 = "2001:db8:200::1""#),
        ("limits", "peer_idle_timeout_secs = 10"),
    ])
    .unwrap();
    let w = c.warnings();
    for key in [
        "teredo.port",
        "ipsec.require",
        "corpnet.ipv6_prefixes",
        "corpnet.address6",
        "limits.peer_idle_timeout_secs",
    ] {
        assert!(
            w.iter().any(|w| w.starts_with(key)),
            "no warning for {key}: {w:?}"
        );
    }
    assert_eq!(w.len(), 5, "{w:?}");
}

#[test]
fn unknown_key_in_each_section_is_named() {
    for section in SECTIONS {
        let e = refused(&[(section, "bogus = 1")]);
        assert_eq!(e.kind(), ErrorKind::UnknownKey, "{e}");
        let key = format!("{section}.bogus");
        let msg = assert_names(&e, &key, &[&format!("unknown key `{key}`")]);
        // The message lists the valid keys, so a typo is easy to fix.
        assert!(msg.contains("expected"), "{msg}");
    }
    let e = refused(&[("teredo", "bogus = 1")]);
    assert!(e.to_string().contains("unknown key `teredo.bogus`"), "{e}");
    assert!(e.to_string().contains("`server_addresses`"), "{e}");
}

#[test]
fn unknown_section_is_named() {
    for text in [
        format!("{}[bogus]\nenabled = true\n", doc(&[])),
        format!("workers = 4\n{}", doc(&[])),
    ] {
        let e = Config::from_toml_str(&text).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownKey, "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("unknown key `bogus`") || msg.contains("unknown key `workers`"),
            "{msg}"
        );
        assert!(msg.contains("[teredo]"), "{msg}");
        assert!(msg.contains("[iphttps]"), "{msg}");
    }
}

#[test]
fn wrong_types_are_named_with_their_value() {
    let cases: &[((&str, &str), &str, &str)] = &[
        (("server", "workers = -1"), "server.workers", "-1"),
        (("server", r#"workers = "4""#), "server.workers", r#""4""#),
        (
            ("teredo", r#"enabled = "yes""#),
            "teredo.enabled",
            r#""yes""#,
        ),
        (("teredo", r#"port = "3544""#), "teredo.port", r#""3544""#),
        (("teredo", "port = 70000"), "teredo.port", "70000"),
        (("teredo", "port = 3544.5"), "teredo.port", "3544.5"),
        (
            ("teredo", r#"server_addresses = ["192.0.2.1"]"#),
            "teredo.server_addresses",
            "192.0.2.1",
        ),
        (
            (
                "teredo",
                r#"server_addresses = ["192.0.2.1", "192.0.2.2", "192.0.2.3"]"#,
            ),
            "teredo.server_addresses",
            "192.0.2.3",
        ),
        (
            (
                "teredo",
                r#"server_addresses = ["192.0.2.1", "host.example"]"#,
            ),
            "teredo.server_addresses",
            "host.example",
        ),
        (
            ("teredo", r#"server_addresses = "192.0.2.1""#),
            "teredo.server_addresses",
            "192.0.2.1",
        ),
        (("corpnet", "tun = 5"), "corpnet.tun", "= 5"),
        (
            ("corpnet", r#"ipv6_prefixes = "2001:db8::/48""#),
            "corpnet.ipv6_prefixes",
            "2001:db8::/48",
        ),
        (
            ("corpnet", r#"ipv6_prefixes = ["2001:db8::/129"]"#),
            "corpnet.ipv6_prefixes",
            "2001:db8::/129",
        ),
        (
            ("corpnet", r#"ipv6_prefixes = ["10.0.0.0/8"]"#),
            "corpnet.ipv6_prefixes",
            "10.0.0.0/8",
        ),
        (
            ("corpnet", r#"address6 = "192.0.2.1""#),
            "corpnet.address6",
            "192.0.2.1",
        ),
        (("corpnet", "mtu = 65536"), "corpnet.mtu", "65536"),
        (
            ("corpnet", "manage_routes = 1"),
            "corpnet.manage_routes",
            "= 1",
        ),
        (("metrics", r#"listen = """#), "metrics.listen", r#""""#),
        (("metrics", r#"listen = "off""#), "metrics.listen", "off"),
        (
            ("metrics", r#"listen = "127.0.0.1""#),
            "metrics.listen",
            "127.0.0.1",
        ),
        (("limits", "rs_burst = true"), "limits.rs_burst", "true"),
        (("log", "level = 3"), "log.level", "= 3"),
        (("log", r#"format = "xml""#), "log.format", "xml"),
        (("log", r#"format = "Text""#), "log.format", "Text"),
        (("iphttps", "enabled = 1"), "iphttps.enabled", "= 1"),
        (("iphttps", r#"listen = "443""#), "iphttps.listen", "443"),
        (
            ("iphttps", r#"listen = "0.0.0.0""#),
            "iphttps.listen",
            "0.0.0.0",
        ),
        (("iphttps", "path = 1"), "iphttps.path", "= 1"),
        (("iphttps", "certificate = 1"), "iphttps.certificate", "= 1"),
        (
            ("iphttps", "private_key = true"),
            "iphttps.private_key",
            "true",
        ),
        (
            ("iphttps", r#"client_ca = ["/a"]"#),
            "iphttps.client_ca",
            "/a",
        ),
        (
            ("iphttps", r#"prefix = "2001:db8:1::""#),
            "iphttps.prefix",
            "2001:db8:1::",
        ),
        (
            ("iphttps", "idle_timeout_secs = -1"),
            "iphttps.idle_timeout_secs",
            "-1",
        ),
        (
            ("iphttps", "ra_interval_secs = 1.5"),
            "iphttps.ra_interval_secs",
            "1.5",
        ),
        (
            ("iphttps", r#"send_queue_bytes = "1M""#),
            "iphttps.send_queue_bytes",
            "1M",
        ),
        (
            ("limits", "max_tls_handshakes = -1"),
            "limits.max_tls_handshakes",
            "-1",
        ),
        (
            ("limits", "max_iphttps_connections = false"),
            "limits.max_iphttps_connections",
            "false",
        ),
        (
            ("limits", r#"tls_handshake_timeout_secs = "10s""#),
            "limits.tls_handshake_timeout_secs",
            "10s",
        ),
    ];
    for (change, key, value) in cases {
        let e = refused(&[*change]);
        assert_eq!(e.kind(), ErrorKind::WrongType, "{e}");
        assert_names(&e, key, &[value]);
    }
    let e = refused(&[("log", r#"format = "xml""#)]);
    assert!(e.to_string().contains("json"), "{e}");
}

#[test]
fn section_that_is_not_a_table_is_named() {
    let e = Config::from_toml_str(&format!("log = \"debug\"\n{}", doc(&[]))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WrongType);
    assert_names(&e, "log", &["\"debug\"", "[log]"]);
}

#[test]
fn missing_required_keys_are_named() {
    for (section, key) in [
        ("teredo", "server_addresses"),
        ("corpnet", "ipv6_prefixes"),
        ("corpnet", "address6"),
    ] {
        let e = refused(&[(section, key)]);
        assert_eq!(e.kind(), ErrorKind::MissingKey, "{e}");
        let path = format!("{section}.{key}");
        assert_names(&e, &path, &[&format!("missing required key `{path}`")]);
    }
    let e = Config::from_toml_str("").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MissingKey);
    assert_eq!(e.key(), Some("teredo.server_addresses"));
}

#[test]
fn malformed_toml_names_the_line() {
    for (text, line) in [
        ("[teredo\nport = 1\n", "line 1"),
        ("[teredo]\nport = \n", "line 2"),
        ("[teredo]\nport = 1\nport = 2\n", "line 3"),
        (
            "[teredo]\n\n\nserver_addresses = [\"192.0.2.1\"\n",
            "line 4",
        ),
        ("\u{feff}\u{0}", "line 1"),
    ] {
        let e = Config::from_toml_str(text).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Syntax, "{text:?}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("invalid TOML") && msg.contains(line),
            "{text:?}: {msg}"
        );
        assert!(!msg.contains('\n'), "one line: {msg:?}");
    }
}

#[test]
fn lab_config_is_valid() {
    let c = Config::lab(
        Ipv4Addr::new(127, 0, 0, 1),
        Ipv4Addr::new(127, 0, 0, 2),
        40000,
    );
    c.validate().unwrap();
    assert!(c.teredo.lab_allow_loopback && !c.ipsec.require);
    assert_eq!(c.metrics.listen, None);
    assert_eq!(c.teredo_primary(), Ipv4Addr::new(127, 0, 0, 1));
    assert_eq!(c.teredo_secondary(), Ipv4Addr::new(127, 0, 0, 2));
    assert_eq!(c.teredo.port, 40000);
    assert!(!c.iphttps.enabled);
    assert_eq!(c.iphttps, Iphttps::default());

    let mut c = c;
    c.iphttps = Config::lab_iphttps(
        "127.0.0.1:4443".parse().unwrap(),
        "/lab/iphttps.crt".into(),
        "/lab/iphttps.key".into(),
    );
    c.validate().unwrap();
    assert_eq!(
        c.iphttps,
        Iphttps {
            enabled: true,
            listen: "127.0.0.1:4443".parse().unwrap(),
            certificate: Some("/lab/iphttps.crt".into()),
            private_key: Some("/lab/iphttps.key".into()),
            prefix: Some("2001:db8:c1::/48".parse().unwrap()),
            ..Iphttps::default()
        }
    );
    let e = Config::lab(Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2), 0)
        .validate()
        .unwrap_err();
    assert_eq!(e.key(), Some("teredo.port"));
}

#[test]
fn load_names_the_file() {
    let dir = std::env::temp_dir().join(format!("gate64-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let missing = dir.join("missing.toml");
    let e = Config::load(&missing).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert_eq!(
        e.to_string(),
        format!(
            "cannot read the configuration file {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    assert!(e.io_error().is_some());
    assert!(std::error::Error::source(&e).is_none());

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, doc(&[("teredo", "port = 0")])).unwrap();
    let e = Config::load(&bad).unwrap_err();
    assert_eq!(e.file(), Some(bad.as_path()));
    let msg = e.to_string();
    assert!(
        msg.contains(&bad.display().to_string()) && msg.contains("teredo.port"),
        "{msg}"
    );

    let good = dir.join("good.toml");
    std::fs::write(&good, doc(&[])).unwrap();
    assert_eq!(Config::load(&good).unwrap(), parse(&[]).unwrap());

    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn line_column_counts_characters() {
    assert_eq!(line_column("", 0), (1, 1));
    assert_eq!(line_column("ab\ncd", 4), (2, 2));
    assert_eq!(line_column("é=", 2), (1, 2));
    assert_eq!(line_column("é", 1), (1, 1));
    assert_eq!(line_column("x", 99), (1, 2));
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(s in "\\PC*") {
        let _ = Config::from_toml_str(&s);
    }

    #[test]
    fn arbitrary_toml_ish_text_never_panics(
        s in "(\\[(server|teredo|iphttps|corpnet|metrics|limits|log)\\]\n|[a-z_]{1,12} = \
              (-?[0-9]{1,6}|\"[ -~]{0,20}\"|true|\\[\"[0-9a-f:./]{0,20}\"\\])\n){0,12}"
    ) {
        let _ = Config::from_toml_str(&s);
    }

    #[test]
    fn any_key_value_is_accepted_or_named(
        idx in 0usize..KEYS.len(),
        // Valid TOML values only, so every refusal must come from gate64's own checks.
        value in concat!(
            "0|-?[1-9][0-9]{0,11}|true|false",
            "|\"[a-zA-Z0-9 :./_-]{0,24}\"|\\[\"[0-9a-f:./]{0,20}\"\\]",
        ),
    ) {
        let (section, key) = KEYS[idx];
        let line = format!("{key} = {value}");
        if let Err(e) = parse(&[(section, &line)]) {
            let msg = e.to_string();
            prop_assert!(e.kind() != ErrorKind::Syntax, "{}", msg);
            // The error is about this key, or (for a valid value) a rule linking it to another.
            prop_assert!(e.key().is_some(), "{}", msg);
            prop_assert!(msg.contains(e.key().unwrap_or_default()), "{}", msg);
        }
    }
}

const KEYS: &[(&str, &str)] = &[
    ("server", "workers"),
    ("server", "tls_threads"),
    ("server", "user"),
    ("server", "group"),
    ("teredo", "enabled"),
    ("teredo", "server_addresses"),
    ("teredo", "port"),
    ("teredo", "relay"),
    ("teredo", "lab_allow_loopback"),
    ("corpnet", "tun"),
    ("corpnet", "ipv6_prefixes"),
    ("corpnet", "address6"),
    ("corpnet", "mtu"),
    ("corpnet", "manage_routes"),
    ("corpnet", "tun_napi"),
    ("corpnet", "lab_allow_without_ipsec"),
    ("nat64", "enabled"),
    ("nat64", "prefix"),
    ("nat64", "allow_private_ipv4"),
    ("nat64", "pool4"),
    ("nat64", "ports"),
    ("nat64", "udp_timeout_secs"),
    ("nat64", "tcp_established_timeout_secs"),
    ("nat64", "tcp_transitory_timeout_secs"),
    ("nat64", "icmp_timeout_secs"),
    ("nat64", "filtering"),
    ("nat64", "ipv4_mtu"),
    ("nat64", "max_sessions"),
    ("nat64", "max_sessions_per_client"),
    ("nat64", "max_ports_per_client"),
    ("nat64", "route_prefix"),
    ("nat64", "binding_log"),
    ("metrics", "enabled"),
    ("metrics", "listen"),
    ("metrics", "allowed_hosts"),
    ("limits", "rs_per_source_per_sec"),
    ("limits", "rs_burst"),
    ("limits", "max_teredo_peers"),
    ("limits", "relay_queue_packets"),
    ("limits", "peer_idle_timeout_secs"),
    ("limits", "max_teredo_peers_per_ipv4"),
    ("limits", "teredo_relay_per_source_per_sec"),
    ("limits", "teredo_relay_per_destination_per_sec"),
    ("limits", "max_tls_handshakes"),
    ("limits", "max_iphttps_connections"),
    ("limits", "tls_handshake_timeout_secs"),
    ("iphttps", "enabled"),
    ("iphttps", "listen"),
    ("iphttps", "path"),
    ("iphttps", "certificate"),
    ("iphttps", "private_key"),
    ("iphttps", "client_ca"),
    ("iphttps", "client_crls"),
    ("iphttps", "prefix"),
    ("iphttps", "idle_timeout_secs"),
    ("iphttps", "ra_interval_secs"),
    ("iphttps", "send_queue_bytes"),
    ("iphttps", "queue_budget_bytes"),
    ("iphttps", "write_timeout_secs"),
    ("iphttps", "client_hello_timeout_secs"),
    ("iphttps", "max_handshakes_per_source"),
    ("iphttps", "max_handshakes_per_network"),
    ("iphttps", "max_connections_per_source"),
    ("log", "level"),
    ("log", "format"),
    ("accounting", "log"),
    ("accounting", "interim_secs"),
    ("accounting", "nas_identifier"),
];

// [nat64]

#[test]
fn nat64_is_off_without_pool4_and_on_with_it() {
    let c = parse(&[]).unwrap();
    assert!(!c.nat64.enabled);
    let c = parse(&[
        ("nat64", r#"pool4 = ["192.0.2.64/30", "198.51.100.7"]"#),
        ("nat64", r#"prefix = "2001:db8:64::/96""#),
    ])
    .unwrap();
    assert!(c.nat64.enabled);
    assert_eq!(c.nat64.pool4.len(), 2);
    assert_eq!(
        c.nat64.pool4[1].prefix_len(),
        32,
        "a bare address is its /32"
    );
    assert_eq!(c.nat64.udp_timeout_secs, 300);
    assert_eq!(c.nat64.tcp_established_timeout_secs, 7440);
    assert_eq!(c.nat64.ports, [1024, 65535]);
    assert!(c.nat64.route_prefix);
    assert!(c.nat64.binding_log.is_none());
}

#[test]
fn nat64_enabled_requires_pool4() {
    let e = refused(&[("nat64", "enabled = true")]);
    assert_names(&e, "nat64.pool4", &["192.0.2.64/28"]);
}

#[test]
fn nat64_rules_name_key_value_and_reason() {
    let pool = ("nat64", r#"pool4 = ["192.0.2.64/30"]"#);
    for (change, key, needle) in [
        (
            ("nat64", r#"prefix = "2001:db8:64::/80""#),
            "nat64.prefix",
            "RFC 6052",
        ),
        (
            ("nat64", r#"prefix = "2001:db8:64::1/96""#),
            "nat64.prefix",
            "host bits",
        ),
        (
            ("nat64", r#"prefix = "2001:db8:64:0:ff00::/96""#),
            "nat64.prefix",
            "u",
        ),
        (
            ("nat64", r#"prefix = "2001:db8:100:64::/96""#),
            "nat64.prefix",
            "corpnet",
        ),
        (
            ("nat64", r#"prefix = "2001:0:1::/96""#),
            "nat64.prefix",
            "Teredo",
        ),
        (
            ("nat64", "udp_timeout_secs = 60"),
            "nat64.udp_timeout_secs",
            "RFC 6146",
        ),
        (
            ("nat64", "tcp_established_timeout_secs = 7200"),
            "nat64.tcp_established_timeout_secs",
            "7440",
        ),
        (
            ("nat64", "tcp_transitory_timeout_secs = 10"),
            "nat64.tcp_transitory_timeout_secs",
            "240",
        ),
        (
            ("nat64", "icmp_timeout_secs = 0"),
            "nat64.icmp_timeout_secs",
            "1",
        ),
        (("nat64", "ports = [0, 100]"), "nat64.ports", "first"),
        (("nat64", "ports = [2000, 1000]"), "nat64.ports", "first"),
        (("nat64", "ipv4_mtu = 60"), "nat64.ipv4_mtu", "68"),
        (
            ("nat64", "max_sessions = 0"),
            "nat64.max_sessions",
            "at least 1",
        ),
        (("nat64", r#"pool4 = []"#), "nat64.pool4", "at least one"),
        (
            ("nat64", r#"pool4 = ["192.0.2.65/30"]"#),
            "nat64.pool4",
            "host bits",
        ),
        (
            ("nat64", r#"pool4 = ["127.0.0.0/8"]"#),
            "nat64.pool4",
            "unicast",
        ),
        (
            ("nat64", r#"pool4 = ["192.0.2.0/24"]"#),
            "nat64.pool4",
            "teredo.server_addresses",
        ),
        (
            ("nat64", r#"pool4 = ["10.0.0.0/8"]"#),
            "nat64.pool4",
            "at most",
        ),
        (
            ("nat64", r#"pool4 = ["not-an-address"]"#),
            "nat64.pool4",
            "neither",
        ),
        (
            ("nat64", r#"filtering = "strict""#),
            "nat64.filtering",
            "endpoint-independent",
        ),
    ] {
        let e = refused(&[pool, change]);
        assert_names(&e, key, &[needle]);
    }
}

#[test]
fn nat64_per_client_limits_have_defaults_and_are_checked() {
    let pool = ("nat64", r#"pool4 = ["192.0.2.64/30"]"#);
    let c = parse(&[pool]).unwrap();
    assert_eq!(c.nat64.max_sessions_per_client, 4_096);
    assert_eq!(c.nat64.max_ports_per_client, 2_048);
    let c = parse(&[
        pool,
        ("nat64", "max_sessions_per_client = 10"),
        ("nat64", "max_ports_per_client = 5"),
    ])
    .unwrap();
    assert_eq!(
        (
            c.nat64.max_sessions_per_client,
            c.nat64.max_ports_per_client
        ),
        (10, 5)
    );
    for (change, key, needle) in [
        (
            ("nat64", "max_sessions_per_client = 0"),
            "nat64.max_sessions_per_client",
            "at least 1",
        ),
        (
            ("nat64", "max_sessions = 100\nmax_sessions_per_client = 101"),
            "nat64.max_sessions_per_client",
            "nat64.max_sessions = 100",
        ),
        (
            ("nat64", "max_ports_per_client = 0"),
            "nat64.max_ports_per_client",
            "at least 1",
        ),
        (
            (
                "nat64",
                "ports = [60000, 60099]\nmax_ports_per_client = 101",
            ),
            "nat64.max_ports_per_client",
            "100 ports",
        ),
    ] {
        let e = refused(&[pool, change]);
        assert_names(&e, key, &[needle]);
    }
}

#[test]
fn metrics_on_a_wildcard_address_is_a_warning() {
    let c = parse(&[("metrics", r#"listen = "[::]:9164""#)]).unwrap();
    assert!(
        c.warnings().iter().any(|w| w.starts_with("metrics.listen")),
        "{:?}",
        c.warnings()
    );
    let c = parse(&[("metrics", r#"listen = "[::1]:9164""#)]).unwrap();
    assert!(!c.warnings().iter().any(|w| w.starts_with("metrics")));
}

#[test]
fn nat64_well_known_prefix_and_missing_ipsec_are_warnings() {
    let c = parse(&[("nat64", r#"pool4 = ["192.0.2.64/30"]"#)]).unwrap();
    let w = c.warnings().join("\n");
    assert!(w.contains("nat64.prefix"), "{w}");
    assert!(w.contains("IPsec is not configured"), "{w}");
    let c = parse(&[
        ("nat64", r#"pool4 = ["192.0.2.64/30"]"#),
        ("nat64", r#"prefix = "2001:db8:64::/96""#),
        ("ipsec", "require = false"),
    ])
    .unwrap();
    assert!(!c.warnings().iter().any(|w| w.starts_with("nat64")));
}

/// `teredo.relay = false` was parsed and ignored; it is refused now, naming the key and the
/// way to serve no Teredo clients, and `relay = true` (the old default) still parses.
#[test]
fn teredo_relay_cannot_be_turned_off() {
    let e = refused(&[("teredo", "relay = false")]);
    assert_names(
        &e,
        "teredo.relay",
        &["teredo.enabled = false", "deprecated"],
    );
    assert!(parse(&[("teredo", "relay = true")]).is_ok_and(|c| c.teredo.relay));
    // Teredo off: the key means nothing, but false is still refused rather than ignored.
    let e = refused(&[
        ("teredo", "enabled = false"),
        ("teredo", "server_addresses"),
        ("teredo", "relay = false"),
    ]);
    assert_names(&e, "teredo.relay", &[]);
}

#[test]
fn iphttps_client_crls_need_client_ca_and_name_their_key() {
    let dir = std::env::temp_dir().join(format!("gate64-iphttps-crls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (crt, key, ca, crl) = (
        dir.join("s.crt"),
        dir.join("s.key"),
        dir.join("ca.pem"),
        dir.join("a.crl"),
    );
    for p in [&crt, &key, &ca, &crl] {
        std::fs::write(p, "x").unwrap();
    }
    let mut c = parse(&[]).unwrap();
    c.iphttps = Config::lab_iphttps("127.0.0.1:0".parse().unwrap(), crt, key);
    c.iphttps.client_crls = vec![crl.clone()];
    let e = c.validate().expect_err("CRLs without a client CA");
    assert_eq!(e.key(), Some("iphttps.client_crls"), "{e}");
    c.iphttps.client_ca = Some(ca);
    c.validate().unwrap();
    c.check_files().unwrap();
    c.iphttps.client_crls.push(dir.join("absent.crl"));
    let e = c.check_files().expect_err("an absent CRL");
    assert_eq!(
        (e.kind(), e.key()),
        (ErrorKind::Io, Some("iphttps.client_crls")),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// [accounting]

/// A file with IPsec configured (what accounting needs) and `extra` TOML after it.
fn with_ipsec(extra: &str) -> Result<Config, ConfigError> {
    let base = doc(&[
        ("ipsec", r#"certificate = "/etc/gate64/ipsec.pem""#),
        ("ipsec", r#"private_key = "/etc/gate64/ipsec.key""#),
        ("ipsec", r#"ca = "/etc/gate64/clients-ca.pem""#),
        ("ipsec", r#"pool6 = "fd00:c1::100/120""#),
    ]);
    Config::from_toml_str(&format!("{base}{extra}"))
}

#[test]
fn the_session_log_is_off_by_default_and_must_be_absolute() {
    assert_eq!(parse(&[]).unwrap().accounting.log, None);
    let c = with_ipsec("[accounting]\nlog = \"/var/log/gate64/sessions.jsonl\"\n").unwrap();
    assert_eq!(
        c.accounting.log.as_deref(),
        Some(Path::new("/var/log/gate64/sessions.jsonl"))
    );
    let e = with_ipsec("[accounting]\nlog = \"sessions.jsonl\"\n").unwrap_err();
    assert_names(&e, "accounting.log", &["absolute", "\"sessions.jsonl\""]);
    let e = refused(&[("accounting", "log = 5")]);
    assert_names(&e, "accounting.log", &["file path"]);
    // Without IPsec there is no session to account.
    let e = refused(&[("accounting", r#"log = "/var/log/gate64/sessions.jsonl""#)]);
    assert_names(&e, "accounting.log", &["[ipsec]"]);
}

/// A RADIUS secret file open to its group or others, or owned by neither root nor gate64's
/// user, is refused naming the key and what to run; a 0600 file of root or of that user
/// passes.
#[test]
fn radius_secret_files_must_be_private() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = std::env::temp_dir().join(format!("gate64-config-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("radius.secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let c = with_ipsec(&format!(
        "[[accounting.radius]]\nserver = \"10.0.0.5:1813\"\nsecret_file = \"{}\"\n",
        secret.display()
    ))
    .unwrap();
    let path = secret.display().to_string();
    for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o700 | 0o010] {
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = c.check_accounting_files().unwrap_err();
        assert_names(
            &e,
            "accounting.radius.secret_file",
            &[
                &path,
                &format!("mode {mode:04o}"),
                &format!("chmod 600 {path}"),
            ],
        );
    }
    for mode in [0o600, 0o400] {
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(mode)).unwrap();
        c.check_accounting_files().unwrap();
    }

    // The owner: root always passes; another user only when gate64 runs as it.
    if std::fs::metadata(&secret).unwrap().uid() == 0 {
        std::os::unix::fs::chown(&secret, Some(54_321), None).unwrap();
    }
    let owner = std::fs::metadata(&secret).unwrap().uid();
    assert_ne!(owner, 0);
    c.check_secret_file_owners(&[owner]).unwrap();
    let e = c.check_secret_file_owners(&[owner + 1]).unwrap_err();
    assert_names(
        &e,
        "accounting.radius.secret_file",
        &[
            &path,
            &format!("owned by uid {owner}"),
            "chown root:",
            "chmod 600",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn radius_servers_interim_and_nas_identifier() {
    let c = parse(&[]).unwrap();
    assert!(c.accounting.radius.is_empty());
    assert_eq!(c.accounting.interim_secs, 300);
    assert_eq!(c.accounting.nas_identifier, "gate64");
    let two = "[accounting]\ninterim_secs = 60\nnas_identifier = \"gw-paris\"\n\
               [[accounting.radius]]\nserver = \"10.0.0.5:1813\"\n\
               secret_file = \"/etc/gate64/radius.secret\"\n\
               [[accounting.radius]]\nserver = \"[2001:db8::5]:1813\"\n\
               secret_file = \"/etc/gate64/radius2.secret\"\n";
    let c = with_ipsec(two).unwrap();
    assert_eq!(c.accounting.radius.len(), 2);
    assert_eq!(
        c.accounting.radius[1].server,
        "[2001:db8::5]:1813".parse().unwrap()
    );
    assert_eq!(
        (c.accounting.interim_secs, &*c.accounting.nas_identifier),
        (60, "gw-paris")
    );
    for (text, key, needle) in [
        (
            "[accounting]\ninterim_secs = 5\n",
            "accounting.interim_secs",
            "10..=86400",
        ),
        (
            "[accounting]\nnas_identifier = \"\"\n",
            "accounting.nas_identifier",
            "NAS-Identifier",
        ),
        (
            "[[accounting.radius]]\nserver = \"10.0.0.5:0\"\nsecret_file = \"/s\"\n",
            "accounting.radius.server",
            "address and port",
        ),
        (
            "[[accounting.radius]]\nserver = \"10.0.0.5:1813\"\nsecret_file = \"s\"\n",
            "accounting.radius.secret_file",
            "absolute",
        ),
        (
            "[[accounting.radius]]\nserver = \"10.0.0.5\"\nsecret_file = \"/s\"\n",
            "accounting.radius",
            "",
        ),
        (
            "[[accounting.radius]]\nserver = \"10.0.0.5:1813\"\nsecret = \"x\"\n",
            "accounting.radius",
            "",
        ),
    ] {
        let e = with_ipsec(text).unwrap_err();
        let msg = e.to_string();
        assert!(
            e.key().is_some_and(|k| k.starts_with(key)) && msg.contains(needle),
            "{text}: {msg}"
        );
    }
    let e = refused(&[("accounting", "port = 1813")]);
    assert_names(&e, "accounting.port", &[]);
}

#[test]
fn eap_radius_servers_are_off_by_default_and_checked() {
    assert!(with_ipsec("").unwrap().ipsec.eap_radius.is_empty());
    let two = "[[ipsec.eap_radius]]\nserver = \"10.0.0.5:1812\"\n\
               secret_file = \"/etc/gate64/eap.secret\"\n\
               [[ipsec.eap_radius]]\nserver = \"[2001:db8::5]:1812\"\n\
               secret_file = \"/etc/gate64/eap2.secret\"\n";
    let c = with_ipsec(two).unwrap();
    let servers: Vec<String> = c
        .ipsec
        .eap_radius
        .iter()
        .map(|s| s.server.to_string())
        .collect();
    assert_eq!(servers, ["10.0.0.5:1812", "[2001:db8::5]:1812"]);
    let relative =
        "[[ipsec.eap_radius]]\nserver = \"10.0.0.5:1812\"\nsecret_file = \"eap.secret\"\n";
    assert_names(
        &with_ipsec(relative).unwrap_err(),
        "ipsec.eap_radius.secret_file",
        &["absolute"],
    );
    let unspecified =
        "[[ipsec.eap_radius]]\nserver = \"0.0.0.0:1812\"\nsecret_file = \"/etc/gate64/e\"\n";
    assert_names(
        &with_ipsec(unspecified).unwrap_err(),
        "ipsec.eap_radius.server",
        &["1812"],
    );
    let open = std::env::temp_dir().join(format!("gate64-config-eap-{}", std::process::id()));
    std::fs::write(&open, "s3cret\n").unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let c = with_ipsec(&format!(
        "[[ipsec.eap_radius]]\nserver = \"10.0.0.5:1812\"\nsecret_file = \"{}\"\n",
        open.display()
    ))
    .unwrap();
    let e = c.check_accounting_files().unwrap_err();
    assert_names(&e, "ipsec.eap_radius.secret_file", &["chmod 600"]);
    std::fs::remove_file(&open).unwrap();
}

#[test]
fn authorize_certificates_is_off_by_default_and_needs_an_eap_radius_server() {
    use crate::ipsec::AuthorizeCertificates;
    let c = with_ipsec("").unwrap();
    assert_eq!(c.ipsec.authorize_certificates, AuthorizeCertificates::Off);
    let server = "[[ipsec.eap_radius]]\nserver = \"10.0.0.5:1812\"\n\
                  secret_file = \"/etc/gate64/eap.secret\"\n";
    let on = with_ipsec(&format!("authorize_certificates = \"radius\"\n{server}")).unwrap();
    assert_eq!(
        on.ipsec.authorize_certificates,
        AuthorizeCertificates::Radius
    );
    let off = with_ipsec(&format!("authorize_certificates = \"off\"\n{server}")).unwrap();
    assert_eq!(off.ipsec.authorize_certificates, AuthorizeCertificates::Off);
    assert_names(
        &with_ipsec("authorize_certificates = \"radius\"\n").unwrap_err(),
        "ipsec.authorize_certificates",
        &["eap_radius", "none is configured"],
    );
    for bad in ["\"ldap\"", "\"Radius\"", "true"] {
        assert_names(
            &with_ipsec(&format!("authorize_certificates = {bad}\n{server}")).unwrap_err(),
            "ipsec.authorize_certificates",
            &["\"off\" or \"radius\""],
        );
    }
}

#[test]
fn dynamic_authorization_is_off_by_default_and_checked() {
    assert_eq!(parse(&[]).unwrap().accounting.dae, None);
    let on = "[accounting.dae]\nlisten = \"10.64.0.1:3799\"\n\
              [[accounting.dae.client]]\naddress = \"10.64.0.2\"\n\
              secret_file = \"/etc/gate64/dae.secret\"\n\
              [[accounting.dae.client]]\naddress = \"fd00:64::7/48\"\n\
              secret_file = \"/etc/gate64/dae2.secret\"\n";
    let c = with_ipsec(on).unwrap();
    let dae = c.accounting.dae.as_ref().unwrap();
    assert!(c.accounting.enabled());
    assert_eq!(dae.listen, "10.64.0.1:3799".parse().unwrap());
    assert_eq!(dae.replay_window_secs, 300);
    assert_eq!(dae.clients[0].address, "10.64.0.2/32".parse().unwrap());
    // A prefix is kept as its network.
    assert_eq!(dae.clients[1].address, "fd00:64::/48".parse().unwrap());
    let client = "[[accounting.dae.client]]\naddress = \"10.64.0.2\"\nsecret_file = \"/s\"\n";
    for (text, key, needle) in [
        (
            format!("[accounting.dae]\nlisten = \"10.64.0.1:0\"\n{client}"),
            "accounting.dae.listen",
            "port",
        ),
        (
            format!("[accounting.dae]\nreplay_window_seconds = 300\n{client}"),
            "accounting.dae.listen",
            "listen",
        ),
        (
            format!(
                "[accounting.dae]\nlisten = \"10.64.0.1:3799\"\nreplay_window_seconds = 0\n{client}"
            ),
            "accounting.dae.replay_window_seconds",
            "1..=86400",
        ),
        (
            "[accounting.dae]\nlisten = \"10.64.0.1:3799\"\n".to_owned(),
            "accounting.dae.client",
            "at least one",
        ),
        (
            "[accounting.dae]\nlisten = \"10.64.0.1:3799\"\n[[accounting.dae.client]]\n\
             address = \"radius.example\"\nsecret_file = \"/s\"\n"
                .to_owned(),
            "accounting.dae.client.address",
            "IP address or prefix",
        ),
        (
            "[accounting.dae]\nlisten = \"10.64.0.1:3799\"\n[[accounting.dae.client]]\n\
             address = \"10.64.0.2\"\nsecret_file = \"dae.secret\"\n"
                .to_owned(),
            "accounting.dae.client.secret_file",
            "absolute",
        ),
        (
            format!("[accounting.dae]\nlisten = \"10.64.0.1:3799\"\nsecret = \"x\"\n{client}"),
            "accounting.dae",
            "",
        ),
    ] {
        let e = with_ipsec(&text).unwrap_err();
        let msg = e.to_string();
        assert!(
            e.key().is_some_and(|k| k.starts_with(key)) && msg.contains(needle),
            "{text}: {msg}"
        );
    }
    // Without IPsec there is no session to end.
    let e = Config::from_toml_str(&format!("{}{on}", doc(&[]))).unwrap_err();
    assert_names(&e, "accounting.dae.listen", &["[ipsec]"]);
}

#[test]
fn qcd_secret_file_is_read_and_refused_with_its_key_and_reason() {
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(with_ipsec("").unwrap().qcd_secret().unwrap(), None);
    let e = with_ipsec("qcd_secret_file = \"qcd.secret\"\n").unwrap_err();
    assert_names(&e, "ipsec.qcd_secret_file", &["absolute path"]);

    let dir = std::env::temp_dir().join(format!("gate64-config-qcd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("qcd.secret");
    let path = secret.display().to_string();
    let c = with_ipsec(&format!("qcd_secret_file = \"{path}\"\n")).unwrap();
    let e = c.check_accounting_files().unwrap_err();
    assert_names(&e, "ipsec.qcd_secret_file", &[&path, "cannot read"]);

    std::fs::write(&secret, format!("{}\n", "a".repeat(31))).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = c.qcd_secret().unwrap_err();
    let msg = assert_names(&e, "ipsec.qcd_secret_file", &["31 bytes", "fewer than 32"]);
    assert!(
        !msg.contains(&"a".repeat(31)),
        "the secret is never shown: {msg}"
    );

    let hex = "0123456789abcdef".repeat(4);
    std::fs::write(&secret, format!("{hex}\n")).unwrap();
    assert_eq!(c.qcd_secret().unwrap(), Some(hex.clone().into_bytes()));
    c.check_accounting_files().unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = c.check_accounting_files().unwrap_err();
    assert_names(&e, "ipsec.qcd_secret_file", &["mode 0644", "chmod 600"]);
    std::fs::remove_dir_all(&dir).unwrap();

    // Both nodes of a pair restart to take a new secret: not a live key.
    let other = with_ipsec("qcd_secret_file = \"/etc/gate64/qcd2\"\n").unwrap();
    assert_eq!(c.restart_only_changes(&other), ["ipsec.qcd_secret_file"]);
}
