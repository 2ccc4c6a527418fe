//! Every file under the repository's `config/` directory must parse and validate, so the
//! examples never go stale.

use std::path::{Path, PathBuf};

use gate64_config::Config;

fn toml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("readable directory entry").path();
        if path.is_dir() {
            toml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
}

#[test]
fn every_example_config_is_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    let mut files = Vec::new();
    toml_files(&root, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no *.toml under {}", root.display());
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| Config::load(f).err().map(|e| e.to_string()))
        .collect();
    assert!(
        failures.is_empty(),
        "refused examples:\n{}",
        failures.join("\n")
    );
}

/// The example with every section switched on: `enabled = false` made true and every
/// commented-out `key = value` line uncommented, as an operator turning everything on would.
fn with_every_section_on(example: &str) -> String {
    example
        .lines()
        .map(|line| {
            let uncommented = line.strip_prefix("# ").unwrap_or(line);
            let is_key = uncommented.split_once(" = ").is_some_and(|(k, _)| {
                !k.is_empty()
                    && k.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            });
            // A commented-out table (`# [[accounting.radius]]`, `# [ha]`) comes on with its
            // keys.
            let is_table = uncommented.starts_with('[') && uncommented.ends_with(']');
            match (is_key || is_table, uncommented) {
                (true, "enabled = false") => "enabled = true",
                (true, l) => l,
                (false, _) => line,
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn main_example_is_the_documented_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/gate64.toml");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.teredo_primary(),
        "192.0.2.1".parse::<std::net::Ipv4Addr>().unwrap()
    );
    assert_eq!(
        c.teredo_secondary(),
        "192.0.2.2".parse::<std::net::Ipv4Addr>().unwrap()
    );
    assert_eq!(c.corpnet.tun, "gate64");
    assert_eq!(
        c.corpnet.address6,
        "2001:db8:100::1".parse::<std::net::Ipv6Addr>().unwrap()
    );
    assert_eq!(c.metrics.listen, Some("127.0.0.1:9164".parse().unwrap()));
    // The README installs this file as the production configuration: the security step is on.
    assert!(c.ipsec.require && !c.ipsec.configured());
    assert!(!c.teredo.lab_allow_loopback);
    // IP-HTTPS, NAT64 and DNS64 are off with their keys commented out, so nothing is filled
    // in but disabled, and the files need not exist.
    assert!(!c.iphttps.enabled && !c.nat64.enabled && !c.dns64.enabled);
    c.check_files().unwrap_or_else(|e| panic!("{e}"));
    // Installed as written, the example draws one piece of advice: IPsec needs its files
    // before any client reaches the corporate network.
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("no client can reach the corporate network"),
        "{w:?}"
    );
}

#[test]
fn main_example_with_every_section_on_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/gate64.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let on = with_every_section_on(&text);
    let c = Config::from_toml_str(&on).unwrap_or_else(|e| panic!("{e}\n{on}"));
    assert!(c.iphttps.enabled && c.nat64.enabled && c.dns64.enabled);
    assert_eq!(
        c.ha.as_ref().map(|h| (h.node_id, h.peer_node_id)),
        Some((1, 2))
    );
    assert_eq!(
        c.accounting.log.as_deref(),
        Some(Path::new("/var/log/gate64/sessions.jsonl"))
    );
    assert_eq!(c.accounting.radius.len(), 1);
    assert_eq!(
        c.accounting.radius[0].server,
        "192.0.2.5:1813".parse().unwrap()
    );
    assert_eq!(
        c.iphttps.certificate.as_deref(),
        Some(Path::new("/etc/gate64/iphttps.crt"))
    );
    assert_eq!(
        c.iphttps.private_key.as_deref(),
        Some(Path::new("/etc/gate64/iphttps.key"))
    );
    assert_eq!(c.iphttps.prefix, Some("2001:db8:1::/48".parse().unwrap()));
    assert_eq!(
        c.iphttps.client_ca.as_deref(),
        Some(Path::new("/etc/gate64/iphttps-clients.pem"))
    );
    assert_eq!(c.nat64.pool4, vec!["192.0.2.64/28".parse().unwrap()]);
    assert_eq!(c.dns64.upstream.len(), 2);
    // IPsec configured, both tunnels within the corporate side, the security step on.
    assert!(c.ipsec.require && c.ipsec.configured());
    assert_eq!(c.ipsec.pool6, Some("fd00:c1::100/120".parse().unwrap()));
    assert_eq!(c.ipsec.tunnel_rule.len(), 1);
    assert_eq!(
        c.ipsec.tunnel_rule[0].tunnel,
        Some(gate64_config::RuleTunnel::Infrastructure)
    );
    assert_eq!(c.ipsec_intranet_prefixes().len(), 2);
    let w = c.warnings();
    assert!(!w.iter().any(|w| w.starts_with("ipsec")), "{w:?}");
}
