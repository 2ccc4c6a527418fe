use crate::{Config, ConfigError};

/// The smallest GRE gateway: one tunnel beside `[corpnet] tun` and `[metrics]`, no client
/// transport.
const CONTRACT: &str = r#"
[corpnet]
tun = "gate64"

[metrics]
listen = "127.0.0.1:9164"

[[gre.tunnel]]
name = "site2"
local = "203.0.113.1"
remote = "203.0.113.2"
key = 42
routes = ["172.16.0.0/24"]
"#;

fn with(extra: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(&format!("{CONTRACT}\n{extra}"))
}

#[track_caller]
fn refused(extra: &str, key: &str, needle: &str) {
    let e = with(extra).expect_err("refused");
    assert_eq!(e.key(), Some(key), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(key) && msg.contains(needle), "{msg}");
}

#[test]
fn issue_contract_parses_on_its_own() {
    let c = Config::from_toml_str(CONTRACT).unwrap();
    assert!(!c.client_transport_enabled());
    let t = &c.gre.tunnels[0];
    assert_eq!(t.name, "site2");
    assert_eq!(t.key, Some(42));
    assert_eq!(t.tenant, "default");
    assert_eq!(t.routes, vec!["172.16.0.0/24".parse().unwrap()]);
    // 1500 - 20 (IPv4) - 4 (GRE) - 4 (key).
    assert_eq!(t.mtu, 1472);
    assert_eq!(t.keepalive_secs, None);
    assert_eq!(c.gre.tenants.len(), 1);
    assert_eq!(c.gre.tenants[0].tun, "gre-default");
    assert_eq!(c.gre.tenants[0].table, 254);
}

#[test]
fn default_mtu_arithmetic() {
    let c = Config::from_toml_str(
        &CONTRACT
            .replace("key = 42\n", "")
            .replace("routes", "keepalive_secs = 10\nroutes"),
    )
    .unwrap();
    assert_eq!(c.gre.tunnels[0].mtu, 1476, "1500 - 20 - 4");
    assert_eq!(c.gre.tunnels[0].keepalive_retries, 3);
    let v6 = CONTRACT
        .replace("203.0.113.1", "2001:db8::1")
        .replace("203.0.113.2", "2001:db8::2")
        .replace("key = 42\n", "");
    assert_eq!(
        Config::from_toml_str(&v6).unwrap().gre.tunnels[0].mtu,
        1456,
        "1500 - 40 - 4"
    );
}

const SECOND: &str = r#"
[[gre.tunnel]]
name = "site3"
local = "203.0.113.1"
remote = "203.0.113.3"
routes = ["172.17.0.0/24"]
"#;

#[test]
fn duplicate_tunnel_names_are_refused() {
    refused(
        &SECOND.replace("site3", "site2"),
        "gre.tunnel[1].name",
        "unique",
    );
}

#[test]
fn two_tunnels_with_the_same_endpoints_and_key_are_refused() {
    let dup = SECOND
        .replace("203.0.113.3", "203.0.113.2")
        .replace("routes", "key = 42\nroutes");
    refused(&dup, "gre.tunnel[1].key", "same local, remote and key");
    // Another key on the same pair is another tunnel.
    let other = SECOND
        .replace("203.0.113.3", "203.0.113.2")
        .replace("routes", "key = 43\nroutes");
    assert!(with(&other).is_ok());
}

#[test]
fn overlapping_routes_within_a_tenant_are_refused_across_tenants_allowed() {
    let overlap = SECOND.replace("172.17.0.0/24", "172.16.0.0/16");
    refused(&overlap, "gre.tunnel[1].routes", "overlaps 172.16.0.0/24");
    let other_tenant = format!(
        "{}\n[[gre.tenant]]\nname = \"blue\"\ntable = 100\n",
        overlap.replace("routes", "tenant = \"blue\"\nroutes")
    );
    let c = with(&other_tenant).unwrap();
    let tuns: Vec<_> = c.gre.tenants.iter().map(|t| t.tun.as_str()).collect();
    assert_eq!(tuns, ["gre-blue", "gre-default"]);
}

#[test]
fn family_mismatch_is_refused() {
    refused(
        &SECOND.replace("203.0.113.3", "2001:db8::3"),
        "gre.tunnel[1].remote",
        "family",
    );
}

#[test]
fn unknown_tenant_is_refused() {
    let red = SECOND.replace("routes", "tenant = \"red\"\nroutes");
    refused(&red, "gre.tunnel[1].tenant", "no [[gre.tenant]]");
}

#[test]
fn tenant_rules() {
    let t = "[[gre.tenant]]\nname = \"a\"\n[[gre.tenant]]\nname = \"a\"\n";
    refused(t, "gre.tenant[1].name", "unique");
    refused(
        "[[gre.tenant]]\nname = \"a\"\ntun = \"gate64\"\n",
        "gre.tenant[0].tun",
        "corpnet.tun",
    );
    refused(
        "[[gre.tenant]]\nname = \"a\"\ntable = 255\n",
        "gre.tenant[0].table",
        "local table",
    );
    refused(
        "[[gre.tenant]]\nname = \"a\"\ntun = \"x/y\"\n",
        "gre.tenant[0].tun",
        "'/'",
    );
}

#[test]
fn per_key_errors_name_the_key() {
    let r = |from: &str, to: &str| SECOND.replace(from, to);
    refused(
        &r("routes", "colour = 1\nroutes"),
        "gre.tunnel[1].colour",
        "unknown field",
    );
    refused(&r("routes", "key = \"x\"\nroutes"), "gre.tunnel[1].key", "");
    refused(&r("name = \"site3\"\n", ""), "gre.tunnel[1].name", "name");
    refused(
        &r("0.0/24\"]", "0.1/24\"]"),
        "gre.tunnel[1].routes",
        "host bits",
    );
    let retries = r("routes", "keepalive_retries = 2\nroutes");
    refused(
        &retries,
        "gre.tunnel[1].keepalive_retries",
        "keepalive_secs",
    );
    let zero = r("routes", "keepalive_secs = 0\nroutes");
    refused(&zero, "gre.tunnel[1].keepalive_secs", "at least 1");
    refused(
        &r("routes", "mtu = 500\nroutes"),
        "gre.tunnel[1].mtu",
        "576",
    );
    refused("[gre]\nfoo = 1\n", "gre.foo", "no such key");
}

#[test]
fn explicit_teredo_still_needs_its_addresses() {
    let e = with("[teredo]\nport = 3544\n").expect_err("Teredo on by default once written");
    assert_eq!(e.key(), Some("teredo.server_addresses"));
}

#[test]
fn a_gre_only_gateway_draws_no_client_transport_warning() {
    let c = Config::from_toml_str(CONTRACT).unwrap();
    assert!(
        c.warnings().iter().all(|w| !w.contains("no client")),
        "{:?}",
        c.warnings()
    );
}

#[test]
fn outer_path_defaults_to_raw_and_is_checked() {
    use crate::OuterPath;
    assert_eq!(with("").unwrap().gre.outer_path, OuterPath::Raw);
    let packet = Config::from_toml_str(&CONTRACT.replace(
        "[[gre.tunnel]]",
        "[gre]\nouter_path = \"packet\"\n\n[[gre.tunnel]]",
    ))
    .unwrap();
    assert_eq!(packet.gre.outer_path, OuterPath::Packet);
    let raw = Config::from_toml_str(&CONTRACT.replace(
        "[[gre.tunnel]]",
        "[gre]\nouter_path = \"raw\"\n\n[[gre.tunnel]]",
    ))
    .unwrap();
    assert_eq!(raw.gre.outer_path, OuterPath::Raw);
    let bad = Config::from_toml_str(&CONTRACT.replace(
        "[[gre.tunnel]]",
        "[gre]\nouter_path = \"ring\"\n\n[[gre.tunnel]]",
    ))
    .expect_err("refused");
    assert_eq!(bad.key(), Some("gre.outer_path"), "{bad}");
    assert!(bad.to_string().contains("\"packet\" or \"raw\""), "{bad}");
}
