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
    assert!(c.corpnet.allow_without_ipsec);
    // IP-HTTPS is shown filled in but disabled, so its files need not exist.
    assert!(!c.iphttps.enabled);
    assert_eq!(
        c.iphttps.certificate.as_deref(),
        Some(Path::new("/etc/gate64/iphttps.crt"))
    );
    assert_eq!(
        c.iphttps.private_key.as_deref(),
        Some(Path::new("/etc/gate64/iphttps.key"))
    );
    assert_eq!(c.iphttps.prefix, Some("2001:db8:1::/48".parse().unwrap()));
    assert_eq!(c.iphttps.client_ca, None);
    c.check_files().unwrap_or_else(|e| panic!("{e}"));
    // Enabling it as written is valid too.
    let mut enabled = c.clone();
    enabled.iphttps.enabled = true;
    enabled.validate().unwrap_or_else(|e| panic!("{e}"));
    // The only advice for the example is the loud one about running without IPsec.
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("corpnet.allow_without_ipsec"), "{w:?}");
}
