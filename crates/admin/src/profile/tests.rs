use super::suites::{ANDROID_BUILTIN, APPLE, STRONGSWAN, WINDOWS, choose_ike, ike_choices};
use super::{Inputs, android, apple, networkmanager, text, warnings, windows};
use gate64_config::Config;
use std::path::Path;

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
certificate = "/etc/gate64/ipsec.pem"
private_key = "/etc/gate64/ipsec.key"
ca = "/etc/gate64/clients-ca.pem"
pool6 = "fd00:c1::100/120"
listen = ["192.0.2.10"]
"#;

fn inputs(ipsec_keys: &str) -> Inputs {
    let config = Config::from_toml_str(&format!("{BASE}{ipsec_keys}")).expect("config");
    Inputs {
        config,
        server: "vpn.example.com".into(),
        remote_id: "vpn.example.com".into(),
        local_id: Some("client1.example.com".into()),
        name: "gate64 test".into(),
        ca_der: vec![0x30, 0x03, 0x02, 0x01, 0x01],
        ca_cn: "Example CA".into(),
        pkcs12: None,
    }
}

/// The text between `<name>` and `</name>`, for each occurrence.
fn elements<'a>(xml: &'a str, name: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    xml.split(open.as_str())
        .skip(1)
        .filter_map(|rest| rest.split(close.as_str()).next())
        .collect()
}

fn suite_of(xml: &str) -> Vec<String> {
    [
        "AuthenticationTransformConstants",
        "CipherTransformConstants",
        "EncryptionMethod",
        "IntegrityCheckMethod",
        "DHGroup",
        "PfsGroup",
    ]
    .iter()
    .map(|n| elements(xml, n).concat())
    .collect()
}

fn ini_value(body: &str, key: &str) -> String {
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_defaults_give_every_client_gates_first_choice_it_has() {
    let i = inputs("");
    let xml = windows::profile_xml(&i).unwrap();
    assert_eq!(
        suite_of(&xml),
        [
            "GCMAES256",
            "GCMAES256",
            "AES_GCM_256",
            "SHA256",
            "ECP256",
            "None"
        ]
    );
    let sswan: serde_json::Value =
        serde_json::from_str(&android::profile(&i).unwrap().body).unwrap();
    assert_eq!(sswan["ike-proposal"], "aes256gcm16-prfsha256-ecp256");
    assert_eq!(sswan["esp-proposal"], "aes256gcm16");
    let nm = networkmanager::profile(
        &i,
        Path::new("/etc/ca.pem"),
        Path::new("/etc/c.pem"),
        Path::new("/etc/c.key"),
    )
    .unwrap()
    .body;
    assert_eq!(ini_value(&nm, "ike"), "aes256gcm16-prfsha256-ecp256");
    assert_eq!(ini_value(&nm, "esp"), "aes256gcm16");
    let plist = apple::profile(&i).unwrap().body;
    assert!(plist.contains("<string>AES-256-GCM</string>"), "{plist}");
    assert!(plist.contains("<integer>19</integer>"), "{plist}");
}

#[test]
fn ike_proposals_narrow_what_each_profile_proposes() {
    let i = inputs("ike_proposals = [\"aes256-sha384-modp2048\"]\n");
    let xml = windows::profile_xml(&i).unwrap();
    assert_eq!(
        suite_of(&xml),
        [
            "GCMAES256",
            "GCMAES256",
            "AES256",
            "SHA384",
            "Group14",
            "None"
        ]
    );
    let plist = apple::profile(&i).unwrap().body;
    assert!(plist.contains("<string>AES-256</string>"), "{plist}");
    assert!(plist.contains("<string>SHA2-384</string>"), "{plist}");
    assert!(plist.contains("<integer>14</integer>"), "{plist}");
    let sswan: serde_json::Value =
        serde_json::from_str(&android::profile(&i).unwrap().body).unwrap();
    assert_eq!(sswan["ike-proposal"], "aes256-sha384-prfsha384-modp2048");
    // Every combination offered is one gate64 accepts, and only those.
    for os in [&WINDOWS, &APPLE, &STRONGSWAN, &ANDROID_BUILTIN] {
        let all = ike_choices(&i.config.ipsec, os);
        assert!(!all.is_empty(), "{}", os.name);
        assert!(
            all.iter()
                .all(|s| s.swan() == "aes256-sha384-prfsha384-modp2048"),
            "{}: {all:?}",
            os.name
        );
    }
}

#[test]
fn esp_proposals_narrow_the_child_sa() {
    let i = inputs("esp_proposals = [\"aes128-sha256\"]\n");
    let xml = windows::profile_xml(&i).unwrap();
    assert_eq!(&suite_of(&xml)[..2], ["SHA256128", "AES128"]);
    let plist = apple::profile(&i).unwrap().body;
    assert!(plist.contains("<string>AES-128</string>"), "{plist}");
    let nm = networkmanager::profile(
        &i,
        Path::new("/ca.pem"),
        Path::new("/c.pem"),
        Path::new("/c.key"),
    )
    .unwrap()
    .body;
    assert_eq!(ini_value(&nm, "esp"), "aes128-sha256");
}

#[test]
fn a_config_that_leaves_an_os_nothing_is_refused_naming_the_key() {
    // Windows has no Curve25519 and no SHA2-512.
    let i = inputs("ike_proposals = [\"aes256gcm16-prfsha512-curve25519\"]\n");
    let e = windows::profile(&i).err().expect("refused");
    assert!(e.contains("ipsec.ike_proposals"), "{e}");
    assert!(e.contains("Windows"), "{e}");
    assert!(e.contains("aes256gcm16-prfsha512-curve25519"), "{e}");
    // Apple and the strongSwan app can.
    assert!(apple::profile(&i).is_ok());
    assert_eq!(
        choose_ike(&i.config.ipsec, &ANDROID_BUILTIN)
            .unwrap()
            .swan(),
        "aes256gcm16-prfsha512-curve25519"
    );
    // Android's built-in client has no ECP groups: the .sswan is written, the notes say so.
    let i = inputs("ike_proposals = [\"aes256gcm16-prfsha256-ecp384\"]\n");
    let p = android::profile(&i).unwrap();
    assert!(
        p.notes.contains("built-in client cannot connect")
            && p.notes.contains("ipsec.ike_proposals"),
        "{}",
        p.notes
    );
    assert!(windows::profile(&i).is_ok());
}

/// Element names of the VPNv2 CSP's ProfileXML (learn.microsoft.com, "VPNv2 CSP" and
/// "ProfileXML XSD") that a device tunnel profile may use.
const VPNV2_ELEMENTS: &[&str] = &[
    "VPNProfile",
    "AlwaysOn",
    "DeviceTunnel",
    "RegisterDNS",
    "DnsSuffix",
    "RememberCredentials",
    "TrustedNetworkDetection",
    "NativeProfile",
    "Servers",
    "NativeProtocolType",
    "Authentication",
    "MachineMethod",
    "UserMethod",
    "RoutingPolicyType",
    "DisableClassBasedDefaultRoute",
    "CryptographySuite",
    "AuthenticationTransformConstants",
    "CipherTransformConstants",
    "EncryptionMethod",
    "IntegrityCheckMethod",
    "DHGroup",
    "PfsGroup",
    "Route",
    "Address",
    "PrefixSize",
    "ExclusionRoute",
    "DomainNameInformation",
    "DomainName",
    "DnsServers",
];

#[test]
fn the_profile_xml_uses_only_vpnv2_csp_elements() {
    let i = inputs("dns = [\"2001:db8:100::53\"]\ndns_domains = [\"corp.example\"]\n");
    let script = windows::profile(&i).unwrap().body;
    let xml = script
        .split("@'\n")
        .nth(1)
        .and_then(|r| r.split("'@").next())
        .expect("a here-string");
    let mut names = Vec::new();
    for tag in xml.split('<').skip(1) {
        let name = tag
            .trim_start_matches('/')
            .split(['>', ' ', '/'])
            .next()
            .unwrap_or_default();
        assert!(
            VPNV2_ELEMENTS.contains(&name),
            "<{name}> is no VPNv2 element"
        );
        names.push(name);
    }
    for required in [
        "DeviceTunnel",
        "Servers",
        "MachineMethod",
        "CryptographySuite",
        "Route",
    ] {
        assert!(names.contains(&required), "{required} missing:\n{xml}");
    }
    assert_eq!(elements(xml, "Servers"), ["vpn.example.com"]);
    assert_eq!(elements(xml, "DomainName"), [".corp.example"]);
    assert_eq!(elements(xml, "DnsServers"), ["2001:db8:100::53"]);
    // The infrastructure tunnel's routes: corpnet.address6/128 by default.
    assert_eq!(elements(xml, "Address"), ["2001:db8:100::1"]);
    assert_eq!(elements(xml, "PrefixSize"), ["128"]);
    assert!(script.contains("Import-Certificate"), "{script}");
    assert!(script.contains(&text::base64(&i.ca_der)), "{script}");
}

/// With `ipsec.pool4` the device tunnel's IPv4 networks are routes beside the IPv6 ones,
/// and the IPv4 DNS servers are listed beside the IPv6 ones.
#[test]
fn the_device_tunnel_routes_its_ipv4_networks_with_pool4() {
    let toml = BASE.replace(
        "address6 = \"2001:db8:100::1\"\n",
        "address6 = \"2001:db8:100::1\"\nipv4_prefixes = [\"10.1.0.0/16\"]\n",
    );
    let with = |keys: &str| {
        let mut i = inputs("");
        i.config = Config::from_toml_str(&format!("{toml}{keys}")).expect("config");
        windows::profile_xml(&i).expect("profile")
    };
    let keys = "infrastructure_prefixes4 = [\"10.1.0.53/32\"]\n\
                dns = [\"2001:db8:100::53\", \"10.1.0.53\"]\ndns_domains = [\"corp.example\"]\n";
    let xml = with(&format!("pool4 = \"10.77.0.0/16\"\n{keys}"));
    assert_eq!(elements(&xml, "Address"), ["2001:db8:100::1", "10.1.0.53"]);
    assert_eq!(elements(&xml, "PrefixSize"), ["128", "32"]);
    assert_eq!(elements(&xml, "DnsServers"), ["2001:db8:100::53,10.1.0.53"]);
    // Without pool4 the tunnel carries no IPv4: neither route nor server.
    let xml = with(keys);
    assert_eq!(elements(&xml, "Address"), ["2001:db8:100::1"]);
    assert_eq!(elements(&xml, "DnsServers"), ["2001:db8:100::53"]);
}

#[test]
fn base64_matches_rfc_4648_vectors() {
    for (plain, encoded) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(text::base64(plain.as_bytes()), encoded);
    }
    assert_eq!(text::base64(&[0xfb, 0xff]), "+/8=");
}

#[test]
fn uuids_are_version_4_and_differ() {
    let (a, b) = (text::uuid(), text::uuid());
    assert_ne!(a, b);
    let parts: Vec<&str> = a.split('-').collect();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12]
    );
    assert!(parts[2].starts_with('4'), "{a}");
    assert!("89AB".contains(&parts[3][..1]), "{a}");
}

#[test]
fn names_and_identities_that_could_break_a_profile_are_refused() {
    assert!(text::plain("vpn.example.com") && text::plain("2001:db8::10"));
    assert!(!text::plain("vpn.example.com'; rm") && !text::plain(""));
    assert!(text::identity("CN=gw, O=Example") && text::identity("a@b.example"));
    for bad in ["a\"b", "<x>", "a&b", "$(x)", "a'b", "a\nb", ""] {
        assert!(!text::identity(bad), "{bad:?}");
    }
}

#[test]
fn a_server_address_gate64_does_not_listen_on_is_warned_about() {
    let mut i = inputs("");
    assert_eq!(warnings(&i), "");
    i.server = "192.0.2.10".into();
    assert_eq!(warnings(&i), "");
    i.server = "203.0.113.7".into();
    let w = warnings(&i);
    assert!(
        w.contains("203.0.113.7") && w.contains("ipsec.listen (192.0.2.10)"),
        "{w}"
    );
    let config =
        Config::from_toml_str(&BASE.replace("listen = [\"192.0.2.10\"]\n", "")).expect("config");
    i.config = config;
    assert!(warnings(&i).contains("ipsec.listen is empty"));
}
