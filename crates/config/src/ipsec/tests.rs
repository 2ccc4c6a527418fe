use crate::{Config, ConfigError, ErrorKind};

const BASE: &str = r#"
[teredo]
server_addresses = ["192.0.2.1", "192.0.2.2"]
[corpnet]
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
[nat64]
pool4 = ["198.51.100.0/30"]
prefix = "2001:db8:64::/96"
[ipsec]
"#;

const CREDENTIALS: &str = "certificate = \"/etc/gate64/ipsec.pem\"\n\
    private_key = \"/etc/gate64/ipsec.key\"\nca = \"/etc/gate64/clients-ca.pem\"\n\
    pool6 = \"fd00:c1::100/120\"\n";

fn parse(keys: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(&format!("{BASE}{keys}"))
}

#[track_caller]
fn refused(keys: &str, key: &str, needle: &str) -> ConfigError {
    let e = parse(keys).expect_err(keys);
    assert_eq!(e.key(), Some(key), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(needle), "{msg}");
    e
}

#[test]
fn absent_section_requires_ipsec_and_configures_nothing() {
    let c = Config::from_toml_str(BASE.trim_end_matches("[ipsec]\n")).unwrap();
    assert!(c.ipsec.require);
    assert!(!c.ipsec.configured());
    assert_eq!(
        c.ipsec_endpoint(),
        c.corpnet.address6,
        "no pool, no IKE: the endpoint is moot"
    );
    assert_eq!(
        c.ipsec_infrastructure_prefixes(),
        ["2001:db8:100::1/128".parse().unwrap()]
    );
    assert_eq!(
        c.ipsec_intranet_prefixes(),
        [
            "2001:db8:100::/48".parse().unwrap(),
            "2001:db8:64::/96".parse().unwrap()
        ]
    );
    let w = c.warnings();
    assert!(
        w.iter().any(|w| w.starts_with("ipsec.require = true")
            && w.contains("no client can reach the corporate network")),
        "{w:?}"
    );
}

#[test]
fn the_contract_keys_parse() {
    let c = parse(&format!(
        "{CREDENTIALS}require = true\nendpoint = \"2001:db8:ffff::1\"\n\
         infrastructure_prefixes = [\"2001:db8:100::53/128\"]\n\
         intranet_prefixes = [\"2001:db8:100::/64\", \"2001:db8:64::/96\"]\n\
         half_open_cookie_threshold = 0\nmax_half_open_per_source = 2\n\
         child_lifetime_secs = 600\ndpd_secs = 10\nike_packets_per_source_per_sec = 250\n\
         max_half_open_bytes = 1048576\nmax_ike_sas = 1000\nmax_ike_sas_per_identity = 2\n\
         max_child_sas_per_ike_sa = 3\nauth_threads = 3\n"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let s = &c.ipsec;
    assert!(s.configured() && s.require);
    assert_eq!(
        c.ipsec_endpoint(),
        "2001:db8:ffff::1".parse::<std::net::Ipv6Addr>().unwrap()
    );
    assert_eq!(s.pool6, Some("fd00:c1::100/120".parse().unwrap()));
    assert_eq!(
        c.ipsec_infrastructure_prefixes(),
        ["2001:db8:100::53/128".parse().unwrap()]
    );
    assert_eq!(c.ipsec_intranet_prefixes().len(), 2);
    assert_eq!(
        (s.half_open_cookie_threshold, s.max_half_open_per_source),
        (0, 2)
    );
    assert_eq!(s.child_lifetime_secs, 600);
    assert_eq!(s.ike_packets_per_source_per_sec, 250);
    assert_eq!(s.dpd_secs, 10);
    assert_eq!(
        (
            s.max_half_open_bytes,
            s.max_ike_sas,
            s.max_ike_sas_per_identity,
            s.max_child_sas_per_ike_sa
        ),
        (1_048_576, 1000, 2, 3)
    );
    assert_eq!(c.effective_ike_auth_threads(), 3);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn credentials_go_together() {
    for (keys, key) in [
        ("certificate = \"/a\"\n", "ipsec.private_key"),
        ("certificate = \"/a\"\nprivate_key = \"/b\"\n", "ipsec.ca"),
        ("ca = \"/c\"\n", "ipsec.certificate"),
        (
            "certificate = \"/a\"\nprivate_key = \"/b\"\nca = \"/c\"\n",
            "ipsec.pool6",
        ),
    ] {
        let e = refused(keys, key, "IPsec is configured");
        assert_eq!(e.kind(), ErrorKind::MissingKey);
    }
    refused(
        "certificate = \"\"\nprivate_key = \"/b\"\nca = \"/c\"\n",
        "ipsec.certificate",
        "must not be empty",
    );
}

#[test]
fn pool6_is_disjoint_from_what_is_routed_elsewhere() {
    refused(
        "pool6 = \"2001:db8:100:5::/120\"\n",
        "ipsec.pool6",
        "corpnet.ipv6_prefixes",
    );
    refused(
        "pool6 = \"2001:db8:64::/120\"\n",
        "ipsec.pool6",
        "nat64.prefix",
    );
    refused("pool6 = \"2001:0:1::/120\"\n", "ipsec.pool6", "Teredo");
    refused("pool6 = \"fd00:c1::1/120\"\n", "ipsec.pool6", "host bits");
    refused("pool6 = \"fd00:c1::/48\"\n", "ipsec.pool6", "/64 or longer");
    refused("pool6 = \"fe80::/64\"\n", "ipsec.pool6", "link-local");
    parse("pool6 = \"fd00:c1::/64\"\n").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn tunnel_prefixes_lie_on_the_corporate_side() {
    for key in ["infrastructure_prefixes", "intranet_prefixes"] {
        let path = format!("ipsec.{key}");
        refused(
            &format!("{key} = [\"2001:db8:200::/64\"]\n"),
            &path,
            "outside",
        );
        refused(&format!("{key} = []\n"), &path, "at least one");
        refused(
            &format!("{key} = [\"2001:db8:100::1/64\"]\n"),
            &path,
            "host bits",
        );
        for ok in [
            "2001:db8:100:1::/64",
            "2001:db8:64::/96",
            "2001:db8:100::1/128",
        ] {
            parse(&format!("{key} = [\"{ok}\"]\n")).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn the_nat64_prefix_counts_only_while_nat64_is_on() {
    let text = BASE.replace("pool4 = [\"198.51.100.0/30\"]\n", "")
        + "intranet_prefixes = [\"2001:db8:64::/96\"]\n";
    let e = Config::from_toml_str(&text).expect_err(&text);
    assert_eq!(e.key(), Some("ipsec.intranet_prefixes"), "{e}");
}

#[test]
fn endpoint_is_a_usable_address_of_gate64() {
    refused("endpoint = \"::1\"\n", "ipsec.endpoint", "loopback");
    refused("endpoint = \"2001:0:1::1\"\n", "ipsec.endpoint", "Teredo");
    let e = refused(
        "endpoint = \"fd00:c1::5\"\npool6 = \"fd00:c1::/120\"\n",
        "ipsec.endpoint",
        "ipsec.pool6",
    );
    assert!(e.to_string().contains("fd00:c1::1"), "{e}");
}

#[test]
fn the_default_endpoint_is_the_pools_first_address_and_collides_with_nothing() {
    let c = parse(CREDENTIALS).unwrap_or_else(|e| panic!("{e}"));
    let endpoint: std::net::Ipv6Addr = "fd00:c1::101".parse().unwrap();
    assert!(c.ipsec_endpoint_is_default());
    assert_eq!(c.ipsec_endpoint(), endpoint);
    assert_ne!(c.ipsec_endpoint(), c.corpnet.address6);
    for p in c
        .ipsec_infrastructure_prefixes()
        .iter()
        .chain(&c.ipsec_intranet_prefixes())
    {
        assert!(!p.contains(&endpoint), "{p}");
    }
    assert!(
        !c.warnings().iter().any(|w| w.starts_with("ipsec.endpoint")),
        "{:?}",
        c.warnings()
    );
    // Written out, the same address is accepted although it lies in the pool.
    let c = parse(&format!("{CREDENTIALS}endpoint = \"fd00:c1::101\"\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.ipsec_endpoint(), endpoint);
}

#[test]
fn an_endpoint_that_dns64_or_a_tunnel_shares_is_warned_about() {
    for (endpoint, extra, needle) in [
        ("2001:db8:100::1", "", "corpnet.address6"),
        ("2001:db8:100::9", "", "(ipsec.intranet_prefixes)"),
        (
            "2001:db8:100::53",
            "infrastructure_prefixes = [\"2001:db8:100::53/128\"]\n",
            "(ipsec.infrastructure_prefixes)",
        ),
    ] {
        let c = parse(&format!("{CREDENTIALS}endpoint = \"{endpoint}\"\n{extra}"))
            .unwrap_or_else(|e| panic!("{e}"));
        let w = c.warnings();
        let w = w
            .iter()
            .find(|w| w.starts_with("ipsec.endpoint"))
            .unwrap_or_else(|| panic!("{endpoint}: no warning in {w:?}"));
        assert!(w.contains(needle), "{w}");
        assert!(
            w.contains("leave ipsec.endpoint out to use \"fd00:c1::101\""),
            "{w}"
        );
    }
}

#[test]
fn a_pool_keeps_room_for_gate64_and_clients() {
    refused(
        "pool6 = \"fd00:c1::/127\"\n",
        "ipsec.pool6",
        "/126 or shorter",
    );
    parse("pool6 = \"fd00:c1::/126\"\n").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn timers_are_bounded() {
    refused(
        "child_lifetime_secs = 10\n",
        "ipsec.child_lifetime_secs",
        "60..=86400",
    );
    refused("dpd_secs = 0\n", "ipsec.dpd_secs", "5..=3600");
    refused("dpd_secs = 86400\n", "ipsec.dpd_secs", "5..=3600");
    refused("dpd_secs = -1\n", "ipsec.dpd_secs", "a whole number");
    refused(
        "max_half_open_per_source = 0\n",
        "ipsec.max_half_open_per_source",
        "at least 1",
    );
    for key in [
        "max_ike_sas",
        "max_ike_sas_per_identity",
        "max_child_sas_per_ike_sa",
    ] {
        refused(
            &format!("{key} = 0\n"),
            &format!("ipsec.{key}"),
            "at least 1",
        );
        refused(
            &format!("{key} = -1\n"),
            &format!("ipsec.{key}"),
            "a whole number",
        );
    }
    refused(
        "auth_threads = 5000\n",
        "ipsec.auth_threads",
        "at most 1024",
    );
    refused(
        "max_half_open_bytes = 1000\n",
        "ipsec.max_half_open_bytes",
        "at least 131072",
    );
    refused(
        "ike_packets_per_source_per_sec = 0\n",
        "ipsec.ike_packets_per_source_per_sec",
        "at least 10",
    );
    refused(
        "ike_packets_per_source_per_sec = -5\n",
        "ipsec.ike_packets_per_source_per_sec",
        "a whole number",
    );
    refused(
        "child_lifetime_secs = \"x\"\n",
        "ipsec.child_lifetime_secs",
        "a whole number",
    );
}

#[test]
fn require_false_is_the_lab_switch_with_its_warning() {
    let c = parse("require = false\n").unwrap();
    assert!(!c.ipsec.require);
    let w = c.warnings();
    let hits: Vec<&String> = w
        .iter()
        .filter(|w| w.starts_with("ipsec.require = false"))
        .collect();
    assert_eq!(hits.len(), 1, "{w:?}");
    assert_eq!(
        Some(hits[0].as_str()),
        c.ipsec.open_to_unauthenticated_warning()
    );
    assert!(hits[0].contains("open to unauthenticated clients"), "{w:?}");
    // Configured and required: no advice at all.
    let c = parse(CREDENTIALS).unwrap();
    assert_eq!(c.ipsec.open_to_unauthenticated_warning(), None);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn the_old_lab_switches_are_refused_naming_ipsec_require() {
    for old in ["lab_allow_without_ipsec", "allow_without_ipsec"] {
        for value in ["true", "false"] {
            let text = BASE.replace(
                "address6 = \"2001:db8:100::1\"\n",
                &format!("address6 = \"2001:db8:100::1\"\n{old} = {value}\n"),
            );
            let e = Config::from_toml_str(&text).expect_err(&text);
            assert_eq!(e.kind(), ErrorKind::UnknownKey, "{e}");
            assert_eq!(e.key(), Some(format!("corpnet.{old}").as_str()), "{e}");
            let msg = e.to_string();
            assert!(msg.contains("replaced by `ipsec.require`"), "{msg}");
            assert!(msg.contains("require = false"), "{msg}");
        }
    }
}

#[test]
fn check_files_names_the_ipsec_key() {
    let dir = std::env::temp_dir().join(format!("gate64-ipsec-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str| {
        let p = dir.join(name);
        std::fs::write(&p, "x").unwrap();
        p.display().to_string()
    };
    let (cert, key) = (file("c.pem"), file("k.pem"));
    let missing = dir.join("absent.pem").display().to_string();
    let c = parse(&format!(
        "certificate = \"{cert}\"\nprivate_key = \"{key}\"\nca = \"{missing}\"\npool6 = \"fd00:c1::/120\"\n"
    ))
    .unwrap();
    let e = c.check_files().expect_err("the CA file is absent");
    assert_eq!(
        (e.kind(), e.key()),
        (ErrorKind::Io, Some("ipsec.ca")),
        "{e}"
    );
    let ca = file("ca.pem");
    let c = parse(&format!(
        "certificate = \"{cert}\"\nprivate_key = \"{key}\"\nca = \"{ca}\"\npool6 = \"fd00:c1::/120\"\n"
    ))
    .unwrap();
    c.check_files().unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn intranet_second_auth_defaults_to_optional_and_names_its_key() {
    use crate::IpsecSecondAuth;
    let c = parse(CREDENTIALS).unwrap();
    assert_eq!(c.ipsec.intranet_second_auth, IpsecSecondAuth::Optional);
    for (value, want) in [
        ("off", IpsecSecondAuth::Off),
        ("optional", IpsecSecondAuth::Optional),
        ("required", IpsecSecondAuth::Required),
    ] {
        let c = parse(&format!(
            "{CREDENTIALS}intranet_second_auth = \"{value}\"\n"
        ))
        .unwrap();
        assert_eq!(c.ipsec.intranet_second_auth, want);
    }
    let e = refused(
        &format!("{CREDENTIALS}intranet_second_auth = \"always\"\n"),
        "ipsec.intranet_second_auth",
        "\"off\", \"optional\" or \"required\"",
    );
    assert_eq!(e.kind(), ErrorKind::WrongType);
    refused(
        &format!("{CREDENTIALS}intranet_second_auth = true\n"),
        "ipsec.intranet_second_auth",
        "\"off\", \"optional\" or \"required\"",
    );
}

#[test]
fn client_eku_defaults_to_strict_and_names_its_key() {
    use crate::IpsecClientEku;
    let c = parse(CREDENTIALS).unwrap();
    assert_eq!(c.ipsec.client_eku, IpsecClientEku::Strict);
    for (value, want) in [
        ("strict", IpsecClientEku::Strict),
        ("any", IpsecClientEku::Any),
    ] {
        let c = parse(&format!("{CREDENTIALS}client_eku = \"{value}\"\n")).unwrap();
        assert_eq!(c.ipsec.client_eku, want);
    }
    let e = refused(
        &format!("{CREDENTIALS}client_eku = \"loose\"\n"),
        "ipsec.client_eku",
        "\"strict\" or \"any\"",
    );
    assert_eq!(e.kind(), ErrorKind::WrongType);
}

#[test]
fn crls_default_to_none_and_crl_expired_to_warn() {
    use crate::IpsecCrlExpired;
    let c = parse(CREDENTIALS).unwrap();
    assert!(c.ipsec.crls.is_empty());
    assert_eq!(c.ipsec.crl_expired, IpsecCrlExpired::Warn);
    let c = parse(&format!(
        "{CREDENTIALS}crls = [\"/etc/gate64/a.crl\", \"/etc/gate64/b.crl\"]\ncrl_expired = \"refuse\"\n"
    ))
    .unwrap();
    assert_eq!(c.ipsec.crls.len(), 2);
    assert_eq!(c.ipsec.crl_expired, IpsecCrlExpired::Refuse);
    let e = refused(
        &format!("{CREDENTIALS}crl_expired = \"ignore\"\n"),
        "ipsec.crl_expired",
        "\"warn\" or \"refuse\"",
    );
    assert_eq!(e.kind(), ErrorKind::WrongType);
    refused(
        &format!("{CREDENTIALS}crls = \"/etc/gate64/a.crl\"\n"),
        "ipsec.crls",
        "a list of file paths",
    );
    assert_eq!(c.ipsec.crl_refresh_secs, 300);
    let c = parse(&format!("{CREDENTIALS}crl_refresh_secs = 10\n")).unwrap();
    assert_eq!(c.ipsec.crl_refresh_secs, 10);
    refused(
        &format!("{CREDENTIALS}crl_refresh_secs = 9\n"),
        "ipsec.crl_refresh_secs",
        "at least 10",
    );
    refused(
        &format!("{CREDENTIALS}crls = [\"\"]\n"),
        "ipsec.crls",
        "empty path",
    );
}

#[test]
fn check_files_names_the_crl_key() {
    let dir = std::env::temp_dir().join(format!("gate64-ipsec-crls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str| {
        let p = dir.join(name);
        std::fs::write(&p, "x").unwrap();
        p.display().to_string()
    };
    let (cert, key, ca, crl) = (file("c.pem"), file("k.pem"), file("ca.pem"), file("a.crl"));
    let missing = dir.join("absent.crl").display().to_string();
    let keys = |crls: &str| {
        format!(
            "certificate = \"{cert}\"\nprivate_key = \"{key}\"\nca = \"{ca}\"\npool6 = \"fd00:c1::/120\"\ncrls = [{crls}]\n"
        )
    };
    let c = parse(&keys(&format!("\"{crl}\", \"{missing}\""))).unwrap();
    let e = c.check_files().expect_err("the second CRL is absent");
    assert_eq!(
        (e.kind(), e.key()),
        (ErrorKind::Io, Some("ipsec.crls")),
        "{e}"
    );
    let c = parse(&keys(&format!("\"{crl}\""))).unwrap();
    c.check_files().unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn crls_apply_on_reload() {
    let a = parse(CREDENTIALS).unwrap();
    let b = parse(&format!(
        "{CREDENTIALS}crls = [\"/etc/gate64/a.crl\"]\ncrl_expired = \"refuse\"\ncrl_refresh_secs = 60\n"
    ))
    .unwrap();
    assert!(a.restart_only_changes(&b).is_empty());
}

#[test]
fn unique_ids_defaults_to_replace_and_names_its_key() {
    use crate::IpsecUniqueIds;
    let c = parse(CREDENTIALS).unwrap();
    assert_eq!(c.ipsec.unique_ids, IpsecUniqueIds::Replace);
    for (value, want) in [
        ("replace", IpsecUniqueIds::Replace),
        ("keep", IpsecUniqueIds::Keep),
        ("never", IpsecUniqueIds::Never),
    ] {
        let c = parse(&format!("{CREDENTIALS}unique_ids = \"{value}\"\n")).unwrap();
        assert_eq!(c.ipsec.unique_ids, want);
    }
    let e = refused(
        &format!("{CREDENTIALS}unique_ids = \"yes\"\n"),
        "ipsec.unique_ids",
        "\"replace\", \"keep\" or \"never\"",
    );
    assert_eq!(e.kind(), ErrorKind::WrongType);
}

#[test]
fn rsa_pss_defaults_to_off_applies_on_reload_and_names_its_key() {
    let off = parse(CREDENTIALS).unwrap();
    assert!(!off.ipsec.rsa_pss);
    let on = parse(&format!("{CREDENTIALS}rsa_pss = true\n")).unwrap();
    assert!(on.ipsec.rsa_pss);
    assert!(off.restart_only_changes(&on).is_empty());
    let e = refused(
        &format!("{CREDENTIALS}rsa_pss = \"yes\"\n"),
        "ipsec.rsa_pss",
        "true or false",
    );
    assert_eq!(e.kind(), ErrorKind::WrongType);
}

#[test]
fn ocsp_max_age_defaults_to_an_hour_within_a_minute_and_a_week() {
    let c = parse(CREDENTIALS).unwrap();
    assert_eq!(c.ipsec.ocsp_max_age_secs, 3600);
    for value in [60, 604_800] {
        let c = parse(&format!("{CREDENTIALS}ocsp_max_age_secs = {value}\n")).unwrap();
        assert_eq!(c.ipsec.ocsp_max_age_secs, value);
    }
    for value in [0, 59, 604_801] {
        refused(
            &format!("{CREDENTIALS}ocsp_max_age_secs = {value}\n"),
            "ipsec.ocsp_max_age_secs",
            "must be 60..=604800 seconds",
        );
    }
}

#[test]
fn ocsp_defaults_to_off_and_its_url_must_be_http() {
    use crate::IpsecOcsp;
    let c = parse(CREDENTIALS).unwrap();
    assert_eq!(
        (c.ipsec.ocsp, c.ipsec.ocsp_url.as_deref()),
        (IpsecOcsp::Off, None)
    );
    for (value, want) in [
        ("off", IpsecOcsp::Off),
        ("soft", IpsecOcsp::Soft),
        ("require", IpsecOcsp::Require),
    ] {
        let c = parse(&format!("{CREDENTIALS}ocsp = \"{value}\"\n")).unwrap();
        assert_eq!(c.ipsec.ocsp, want);
    }
    let e = refused(
        &format!("{CREDENTIALS}ocsp = true\n"),
        "ipsec.ocsp",
        "\"off\", \"soft\" or \"require\"",
    );
    assert_eq!(e.kind(), ErrorKind::WrongType);
    let c = parse(&format!(
        "{CREDENTIALS}ocsp = \"soft\"\nocsp_url = \"http://[2001:db8::99]:8888\"\n"
    ))
    .unwrap();
    assert_eq!(
        c.ipsec.ocsp_url.as_deref(),
        Some("http://[2001:db8::99]:8888")
    );
    for bad in [
        "https://ocsp.example.com/",
        "http://",
        "http:///x",
        "http://a b",
    ] {
        let e = refused(
            &format!("{CREDENTIALS}ocsp_url = \"{bad}\"\n"),
            "ipsec.ocsp_url",
            "must be an http:// URL",
        );
        assert_eq!(e.kind(), ErrorKind::InvalidValue, "{bad}");
    }
}

#[test]
fn reauth_secs_defaults_to_a_day_takes_zero_and_refuses_less_than_a_minute() {
    let c = parse(CREDENTIALS).unwrap();
    assert_eq!(c.ipsec.reauth_secs, 86_400);
    for value in [0, 60, 3600] {
        let c = parse(&format!("{CREDENTIALS}reauth_secs = {value}\n")).unwrap();
        assert_eq!(c.ipsec.reauth_secs, value);
    }
    for value in [1, 59, 31_536_001] {
        let e = refused(
            &format!("{CREDENTIALS}reauth_secs = {value}\n"),
            "ipsec.reauth_secs",
            "must be 0 (never) or 60..=31536000 seconds",
        );
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
    }
}

#[test]
fn dns_defaults_to_dns64_and_domains_need_a_server() {
    // BASE turns NAT64 on, not DNS64: no server by default.
    let c = parse(CREDENTIALS).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.ipsec_dns().is_empty());
    let with_dns64 = |ipsec: &str| {
        Config::from_toml_str(&format!(
            "{}[dns64]\nenabled = true\nupstream = [\"192.0.2.53\"]\n",
            BASE.replace("[ipsec]\n", &format!("[ipsec]\n{CREDENTIALS}{ipsec}"))
        ))
    };
    let c = with_dns64("").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.ipsec_dns(),
        ["2001:db8:100::1".parse::<std::net::Ipv6Addr>().unwrap()]
    );
    let c = with_dns64("dns_domains = [\"Corp.Example.COM.\", \"lab.example\"]\n")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.ipsec.dns_domains, ["corp.example.com", "lab.example"]);
    let c = parse(&format!(
        "{CREDENTIALS}dns = [\"2001:db8:100::53\"]\ndns_domains = [\"corp.example.com\"]\n"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.ipsec_dns(),
        ["2001:db8:100::53".parse::<std::net::Ipv6Addr>().unwrap()]
    );
    assert!(
        !c.warnings().iter().any(|w| w.starts_with("ipsec.dns")),
        "{:?}",
        c.warnings()
    );

    refused(
        &format!("{CREDENTIALS}dns_domains = [\"corp.example.com\"]\n"),
        "ipsec.dns_domains",
        "set ipsec.dns, or turn DNS64 on",
    );
    for bad in [
        "",
        "-corp.example",
        "corp..example",
        "corp example",
        "é.example",
    ] {
        refused(
            &format!("dns = [\"2001:db8:100::53\"]\ndns_domains = [\"{bad}\"]\n"),
            "ipsec.dns_domains",
            "not a DNS name",
        );
    }
    refused("dns = [\"ff02::1\"]\n", "ipsec.dns", "unicast");
    refused("dns = [\"127.0.0.53\"]\n", "ipsec.dns", "loopback");
    // A server outside both tunnels: clients cannot reach it through them.
    let c = parse(&format!("{CREDENTIALS}dns = [\"2001:db8:999::53\"]\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        c.warnings()
            .iter()
            .any(|w| w.starts_with("ipsec.dns: 2001:db8:999::53 lies in neither tunnel")),
        "{:?}",
        c.warnings()
    );
}

#[test]
fn esp_proposals_default_to_every_suite_gcm_first_and_narrow_in_order() {
    use crate::EspProposal;
    let c = parse(CREDENTIALS).unwrap();
    assert_eq!(
        c.ipsec.esp_suites(),
        [
            EspProposal::Aes256Gcm16,
            EspProposal::Aes128Gcm16,
            EspProposal::Aes256Sha256,
            EspProposal::Aes128Sha256
        ]
    );
    let c = parse(&format!(
        "{CREDENTIALS}esp_proposals = [\"AES256-sha256\", \"aes128gcm\", \"aes256-sha2_256\"]\n"
    ))
    .unwrap();
    assert_eq!(
        c.ipsec.esp_suites(),
        [EspProposal::Aes256Sha256, EspProposal::Aes128Gcm16],
        "order kept, duplicates once"
    );
}

#[test]
fn esp_proposals_refuse_unknown_tokens_sha1_and_an_empty_list_naming_key_and_token() {
    for (token, needle) in [
        ("aes256-sha1", "SHA1"),
        ("3des-sha1", "SHA1"),
        ("aes192-sha256", "no ESP suite"),
        ("aes256gcm16-aes128gcm16", "no ESP suite"),
        ("chacha20poly1305", "no ESP suite"),
    ] {
        let e = refused(
            &format!("{CREDENTIALS}esp_proposals = [\"aes256gcm16\", \"{token}\"]\n"),
            "ipsec.esp_proposals",
            needle,
        );
        assert!(e.to_string().contains(token), "{e}");
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
    }
    refused(
        &format!("{CREDENTIALS}esp_proposals = []\n"),
        "ipsec.esp_proposals",
        "at least one",
    );
    let e = refused(
        &format!("{CREDENTIALS}esp_proposals = \"aes256gcm16\"\n"),
        "ipsec.esp_proposals",
        "a list of ESP suites",
    );
    assert_eq!(e.kind(), ErrorKind::WrongType);
}

#[test]
fn esp_proposals_reload_without_a_restart() {
    let a = parse(CREDENTIALS).unwrap();
    let b = parse(&format!("{CREDENTIALS}esp_proposals = [\"aes256gcm16\"]\n")).unwrap();
    assert_eq!(a.changed_keys(&b), ["ipsec.esp_proposals"]);
    assert!(a.restart_only_changes(&b).is_empty());
}

#[test]
fn listen_takes_both_families_and_defaults_to_none() {
    let c = parse(CREDENTIALS).unwrap();
    assert!(c.ipsec.listen.is_empty());
    let c = parse(&format!(
        "{CREDENTIALS}listen = [\"192.0.2.10\", \"2001:db8::10\"]\n"
    ))
    .unwrap();
    assert_eq!(
        c.ipsec.listen,
        [
            "192.0.2.10".parse::<std::net::IpAddr>().unwrap(),
            "2001:db8::10".parse().unwrap()
        ]
    );
}

#[test]
fn listen_refuses_what_cannot_be_served() {
    let with = |list: &str| format!("{CREDENTIALS}listen = {list}\n");
    refused(
        &with("[\"192.0.2.10\", \"192.0.2.10\"]"),
        "ipsec.listen",
        "twice",
    );
    refused(&with("[\"0.0.0.0\"]"), "ipsec.listen", "unspecified");
    refused(&with("[\"::\"]"), "ipsec.listen", "unspecified");
    refused(&with("[\"224.0.0.5\"]"), "ipsec.listen", "multicast");
    refused(&with("[\"ff02::1\"]"), "ipsec.listen", "multicast");
    refused(&with("[\"255.255.255.255\"]"), "ipsec.listen", "broadcast");
    refused(&with("[\"127.0.0.1\"]"), "ipsec.listen", "loopback");
    refused(
        &with("[\"::ffff:192.0.2.1\"]"),
        "ipsec.listen",
        "IPv4-mapped",
    );
    refused(&with("[\"fd00:c1::101\"]"), "ipsec.listen", "endpoint");
    refused(
        "listen = [\"192.0.2.10\"]\n",
        "ipsec.listen",
        "IPsec configured",
    );
    refused(
        "listen = \"192.0.2.10\"\n",
        "ipsec.listen",
        "list of IP addresses",
    );
}

#[test]
fn legacy_proposals_default_off_and_typed() {
    let c = parse(CREDENTIALS).unwrap();
    assert!(!c.ipsec.legacy_proposals);
    assert!(c.ipsec.ike_proposals.is_empty());
    assert!(c.ipsec.ike_proposal_specs().is_empty());
    let c = parse(&format!("{CREDENTIALS}legacy_proposals = true\n")).unwrap();
    assert!(c.ipsec.legacy_proposals);
    let e = refused(
        &format!("{CREDENTIALS}legacy_proposals = \"yes\"\n"),
        "ipsec.legacy_proposals",
        "true or false",
    );
    assert_eq!(e.kind(), ErrorKind::WrongType);
}

#[test]
fn ike_proposals_parse_in_strongswan_notation() {
    use crate::IkeProposal;
    let c = parse(&format!(
        "{CREDENTIALS}ike_proposals = [\"aes256gcm16-prfsha384-ecp384\", \
         \"aes256-aes128-sha256-sha512-modp2048-curve25519\", \"aes256gcm16-sha256-ecp256\"]\n"
    ))
    .unwrap();
    assert_eq!(
        c.ipsec.ike_proposal_specs(),
        vec![
            IkeProposal {
                encr: vec![(20, 256)],
                integ: vec![],
                prf: vec![6],
                groups: vec![20],
            },
            // Without PRF tokens AES-CBC takes the integrity tokens' PRFs.
            IkeProposal {
                encr: vec![(12, 256), (12, 128)],
                integ: vec![12, 14],
                prf: vec![5, 7],
                groups: vec![14, 31],
            },
            // With AES-GCM an integrity token names the PRF.
            IkeProposal {
                encr: vec![(20, 256)],
                integ: vec![],
                prf: vec![5],
                groups: vec![19],
            },
        ]
    );
}

#[test]
fn ike_proposals_refuse_unknown_legacy_and_incomplete_entries() {
    for (value, needle) in [
        ("aes256-sha256-modp9999", "\"modp9999\""),
        ("3des-sha256-modp2048", "\"3des\""),
        ("aes192-sha256-modp2048", "\"aes192\""),
        ("aes256-sha1-modp2048", "ipsec.legacy_proposals = true"),
        ("aes256-sha256-modp1024", "ipsec.legacy_proposals = true"),
        ("aes256-modp2048", "integrity"),
        ("aes256gcm16-ecp256", "PRF"),
        ("aes256-sha256", "key-exchange group"),
        ("sha256-ecp256", "cipher"),
    ] {
        refused(
            &format!("{CREDENTIALS}ike_proposals = [\"{value}\"]\n"),
            "ipsec.ike_proposals",
            needle,
        );
    }
    // Legacy tokens are accepted once legacy_proposals is set.
    let c = parse(&format!(
        "{CREDENTIALS}legacy_proposals = true\nike_proposals = [\"aes256-sha1-modp1024\"]\n"
    ))
    .unwrap();
    assert_eq!(c.ipsec.ike_proposal_specs()[0].groups, vec![2]);
    let e = refused(
        &format!("{CREDENTIALS}ike_proposals = \"aes256-sha256-modp2048\"\n"),
        "ipsec.ike_proposals",
        "strongSwan's notation",
    );
    assert_eq!(e.kind(), ErrorKind::WrongType);
}

#[test]
fn proposal_keys_need_a_restart() {
    let a = parse(CREDENTIALS).unwrap();
    let b = parse(&format!(
        "{CREDENTIALS}legacy_proposals = true\nike_proposals = [\"aes256-sha256-modp2048\"]\n"
    ))
    .unwrap();
    assert_eq!(
        a.restart_only_changes(&b),
        ["ipsec.legacy_proposals", "ipsec.ike_proposals"]
    );
}

#[test]
fn ike_allows_applies_legacy_and_ike_proposals() {
    const GCM256: (u16, u16) = (20, 256);
    const CBC256: (u16, u16) = (12, 256);
    let all = parse(CREDENTIALS).unwrap();
    assert!(all.ipsec.ike_allows(GCM256, None, 5, 19));
    assert!(all.ipsec.ike_allows(CBC256, Some(12), 5, 14));
    // SHA1 and MODP-1024 only with legacy_proposals.
    assert!(!all.ipsec.ike_allows(CBC256, Some(2), 2, 14));
    assert!(!all.ipsec.ike_allows(CBC256, Some(12), 5, 2));
    let legacy = parse(&format!("{CREDENTIALS}legacy_proposals = true\n")).unwrap();
    assert!(legacy.ipsec.ike_allows(CBC256, Some(2), 2, 2));
    // ike_proposals: only combinations one entry names in full.
    let narrow = parse(&format!(
        "{CREDENTIALS}ike_proposals = [\"aes256-sha384-modp3072\", \"aes128gcm16-prfsha512-curve25519\"]\n"
    ))
    .unwrap();
    assert!(narrow.ipsec.ike_allows(CBC256, Some(13), 6, 15));
    assert!(narrow.ipsec.ike_allows((20, 128), None, 7, 31));
    assert!(!narrow.ipsec.ike_allows(CBC256, Some(12), 5, 15));
    assert!(!narrow.ipsec.ike_allows(CBC256, Some(13), 6, 31));
    assert!(!narrow.ipsec.ike_allows(GCM256, None, 7, 31));
}

#[test]
fn tunnel_rules_parse_in_file_order() {
    let c = parse(&format!(
        "{CREDENTIALS}[[ipsec.tunnel_rule]]\ntunnel = \"infrastructure\"\n\
         ca = \"/etc/gate64/device-ca.pem\"\n\
         [[ipsec.tunnel_rule]]\ntunnel = \"intranet\"\nidentity = \"*.users.example.com\"\n\
         [[ipsec.tunnel_rule]]\ntunnel = \"infrastructure\"\nca = \"/etc/gate64/device-ca.pem\"\n\
         identity = \"PC-*\"\n"
    ))
    .unwrap();
    let rules = &c.ipsec.tunnel_rule;
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[0].tunnel, Some(super::RuleTunnel::Infrastructure));
    assert_eq!(
        rules[0].ca.as_deref(),
        Some(std::path::Path::new("/etc/gate64/device-ca.pem"))
    );
    assert_eq!(rules[0].identity, None);
    assert_eq!(rules[1].tunnel, Some(super::RuleTunnel::Intranet));
    assert_eq!(rules[1].identity.as_deref(), Some("*.users.example.com"));
    assert!(rules[2].ca.is_some() && rules[2].identity.as_deref() == Some("PC-*"));
    assert!(parse(CREDENTIALS).unwrap().ipsec.tunnel_rule.is_empty());
}

#[test]
fn tunnel_rules_are_refused_naming_the_key() {
    let rule = |body: &str| format!("{CREDENTIALS}[[ipsec.tunnel_rule]]\n{body}");
    refused(
        &rule("ca = \"/etc/gate64/device-ca.pem\"\n"),
        "ipsec.tunnel_rule.tunnel",
        "#1 names no tunnel",
    );
    refused(
        &rule("tunnel = \"infrastructure\"\n"),
        "ipsec.tunnel_rule",
        "no condition",
    );
    refused(
        &rule("tunnel = \"infrastructure\"\nidentity = \"\"\n"),
        "ipsec.tunnel_rule.identity",
        "1..=",
    );
    refused(
        &rule("tunnel = \"infrastructure\"\nidentity = \"a b\"\n"),
        "ipsec.tunnel_rule.identity",
        "without spaces",
    );
    refused(
        &rule("tunnel = \"intranet\"\nca = \"\"\n"),
        "ipsec.tunnel_rule.ca",
        "PEM file",
    );
    let e = parse(&rule("tunnel = \"device\"\nca = \"/x.pem\"\n")).unwrap_err();
    assert!(
        e.key().is_some_and(|k| k.starts_with("ipsec.tunnel_rule")),
        "{e}"
    );
    let e = parse(&rule("tunnel = \"intranet\"\ncn = \"x\"\n")).unwrap_err();
    assert!(
        e.key().is_some_and(|k| k.starts_with("ipsec.tunnel_rule")),
        "{e}"
    );
    let second = format!(
        "{CREDENTIALS}[[ipsec.tunnel_rule]]\ntunnel = \"intranet\"\nidentity = \"a\"\n\
         [[ipsec.tunnel_rule]]\ntunnel = \"intranet\"\n"
    );
    refused(&second, "ipsec.tunnel_rule", "#2");
}

#[test]
fn a_tunnel_rule_ca_must_be_readable() {
    let dir = std::env::temp_dir().join(format!("gate64-rule-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = String::new();
    for name in ["ipsec.pem", "ipsec.key", "clients-ca.pem"] {
        let path = dir.join(name);
        std::fs::write(&path, "x").unwrap();
        let key = match name {
            "ipsec.pem" => "certificate",
            "ipsec.key" => "private_key",
            _ => "ca",
        };
        files.push_str(&format!("{key} = \"{}\"\n", path.display()));
    }
    let c = parse(&format!(
        "{files}pool6 = \"fd00:c1::100/120\"\n[[ipsec.tunnel_rule]]\ntunnel = \"infrastructure\"\n\
         ca = \"{}\"\n",
        dir.join("missing-device-ca.pem").display()
    ))
    .unwrap();
    let e = c.check_files().unwrap_err();
    assert_eq!(e.key(), Some("ipsec.tunnel_rule.ca"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// BASE plus corporate IPv4 networks (NAT64's pool is 198.51.100.0/30).
fn parse4(corpnet4: &str, keys: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(&format!(
        "{}{keys}",
        BASE.replace(
            "address6 = \"2001:db8:100::1\"\n",
            &format!("address6 = \"2001:db8:100::1\"\nipv4_prefixes = {corpnet4}\n")
        )
    ))
}

#[track_caller]
fn refused4(corpnet4: &str, keys: &str, key: &str, needle: &str) {
    let e = parse4(corpnet4, keys).expect_err(keys);
    assert_eq!(e.key(), Some(key), "{e}");
    assert!(e.to_string().contains(needle), "{e}");
}

#[test]
fn ipv4_inside_the_tunnels_is_off_by_default() {
    let c = parse(&format!("{CREDENTIALS}pool4 = \"10.77.0.0/16\"\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        c.warnings()
            .iter()
            .any(|w| w.starts_with("ipsec.pool4") && w.contains("goes nowhere")),
        "{:?}",
        c.warnings()
    );
    let c = parse(CREDENTIALS).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.ipsec.pool4, None);
    assert!(c.corpnet.ipv4_prefixes.is_empty());
    assert!(c.ipsec_infrastructure_prefixes4().is_empty());
    assert!(c.ipsec_intranet_prefixes4().is_empty());
    assert!(c.ipsec_dns4().is_empty());
}

#[test]
fn pool4_and_the_ipv4_tunnel_prefixes_parse_with_their_defaults() {
    let c = parse4(
        "[\"10.1.0.0/16\", \"172.16.0.0/12\"]",
        &format!(
            "{CREDENTIALS}pool4 = \"10.77.0.0/16\"\ndns = [\"2001:db8:100::53\", \"10.1.0.53\"]\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.ipsec.pool4, Some("10.77.0.0/16".parse().unwrap()));
    assert_eq!(
        c.ipsec_intranet_prefixes4(),
        [
            "10.1.0.0/16".parse().unwrap(),
            "172.16.0.0/12".parse().unwrap()
        ],
        "the intranet tunnel reaches every corporate IPv4 network"
    );
    assert!(c.ipsec_infrastructure_prefixes4().is_empty());
    assert_eq!(
        c.ipsec_dns(),
        ["2001:db8:100::53".parse::<std::net::Ipv6Addr>().unwrap()]
    );
    assert_eq!(
        c.ipsec_dns4(),
        ["10.1.0.53".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert!(
        !c.warnings().iter().any(|w| w.starts_with("ipsec.dns")),
        "{:?}",
        c.warnings()
    );
    let c = parse4(
        "[\"10.1.0.0/16\"]",
        &format!(
            "{CREDENTIALS}pool4 = \"10.77.0.0/30\"\ninfrastructure_prefixes4 = [\"10.1.0.53/32\"]\n\
             intranet_prefixes4 = [\"10.1.2.0/24\"]\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.ipsec_infrastructure_prefixes4(),
        ["10.1.0.53/32".parse().unwrap()]
    );
    assert_eq!(
        c.ipsec_intranet_prefixes4(),
        ["10.1.2.0/24".parse().unwrap()]
    );
}

#[test]
fn pool4_refusals_name_the_key_and_reason() {
    let corp = "[\"10.1.0.0/16\"]";
    refused4(
        corp,
        "pool4 = \"198.51.100.0/29\"\n",
        "ipsec.pool4",
        "nat64.pool4",
    );
    refused4(
        corp,
        "pool4 = \"10.1.5.0/24\"\n",
        "ipsec.pool4",
        "corpnet.ipv4_prefixes",
    );
    refused4(
        "[\"10.0.0.0/8\"]",
        "pool4 = \"10.77.0.0/16\"\nintranet_prefixes4 = [\"10.1.0.0/16\"]\n",
        "ipsec.pool4",
        "corpnet.ipv4_prefixes",
    );
    refused4(
        corp,
        "pool4 = \"127.0.0.0/16\"\n",
        "ipsec.pool4",
        "loopback",
    );
    refused4(
        corp,
        "pool4 = \"224.1.0.0/16\"\n",
        "ipsec.pool4",
        "multicast",
    );
    refused4(
        corp,
        "pool4 = \"0.0.0.0/16\"\n",
        "ipsec.pool4",
        "unspecified",
    );
    refused4(
        corp,
        "pool4 = \"10.77.0.0/31\"\n",
        "ipsec.pool4",
        "too small",
    );
    refused4(
        corp,
        "pool4 = \"10.77.0.1/24\"\n",
        "ipsec.pool4",
        "host bits",
    );
    refused4(
        corp,
        "pool4 = \"10.0.0.0/7\"\n",
        "ipsec.pool4",
        "/8 or longer",
    );
    parse4(corp, "pool4 = \"10.77.0.0/30\"\n").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn ipv4_tunnel_prefixes_lie_in_the_corporate_ipv4_networks() {
    let corp = "[\"10.1.0.0/16\"]";
    for key in ["infrastructure_prefixes4", "intranet_prefixes4"] {
        refused4(
            corp,
            &format!("{key} = [\"10.2.0.0/24\"]\n"),
            &format!("ipsec.{key}"),
            "outside every corpnet.ipv4_prefixes",
        );
        refused4(
            corp,
            &format!("{key} = [\"10.1.0.1/24\"]\n"),
            &format!("ipsec.{key}"),
            "host bits",
        );
    }
    refused4(
        "[\"198.51.100.0/24\"]",
        "",
        "corpnet.ipv4_prefixes",
        "nat64.pool4",
    );
    refused4("[\"127.0.0.0/8\"]", "", "corpnet.ipv4_prefixes", "loopback");
    refused4(
        "[\"10.1.0.1/16\"]",
        "",
        "corpnet.ipv4_prefixes",
        "host bits",
    );
}

#[test]
fn ipv4_dns_outside_the_tunnels_ipv4_prefixes_is_warned_about() {
    let c = parse4(
        "[\"10.1.0.0/16\"]",
        &format!(
            "{CREDENTIALS}pool4 = \"10.77.0.0/16\"\nintranet_prefixes4 = [\"10.1.2.0/24\"]\n\
             dns = [\"2001:db8:100::53\", \"10.1.0.53\"]\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        c.warnings()
            .iter()
            .any(|w| w.starts_with("ipsec.dns: 10.1.0.53 lies in neither tunnel's IPv4 prefixes")),
        "{:?}",
        c.warnings()
    );
    // IPv4 servers without pool4 reach no client.
    let c = parse4(
        "[\"10.1.0.0/16\"]",
        &format!("{CREDENTIALS}dns = [\"10.1.0.53\"]\ndns_domains = [\"corp.example\"]\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        c.warnings()
            .iter()
            .any(|w| w.contains("handed to no client")),
        "{:?}",
        c.warnings()
    );
}

#[test]
fn ipv4_keys_need_a_restart_and_name_themselves() {
    let corp = "[\"10.1.0.0/16\"]";
    let a = parse4(corp, &format!("{CREDENTIALS}dns = [\"10.1.0.53\"]\n")).unwrap();
    for (keys, changed) in [
        (
            "pool4 = \"10.77.0.0/16\"\ndns = [\"10.1.0.53\"]\n",
            "ipsec.pool4",
        ),
        ("dns = [\"10.1.0.54\"]\n", "ipsec.dns"),
        (
            "dns = [\"10.1.0.53\"]\nintranet_prefixes4 = [\"10.1.2.0/24\"]\n",
            "ipsec.intranet_prefixes4",
        ),
    ] {
        let b = parse4(corp, &format!("{CREDENTIALS}{keys}")).unwrap();
        assert_eq!(a.restart_only_changes(&b), [changed], "{keys}");
    }
}

#[test]
fn ha_peer_pool6_has_the_bounds_of_pool6() {
    assert_eq!(
        crate::ha::PEER_POOL6_LEN,
        (super::MIN_POOL6_LEN, super::MAX_POOL6_LEN)
    );
}
