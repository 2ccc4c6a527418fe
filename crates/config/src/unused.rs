//! Sections filled in but not enabled: an `[iphttps]` with a listener and a certificate but no
//! `enabled = true` serves nothing. Such keys are reported as warnings, never silently ignored.
//!
//! "Filled in" means the file wrote a key of the section besides its switch (`enabled`), apart
//! from keys another enabled feature reads (DNS64 synthesizes under `nat64.prefix` and honours
//! `nat64.allow_private_ipv4` while gate64's own NAT64 is off). Only a parsed file has written
//! keys; a configuration built in memory draws none of these warnings.

use crate::Config;

/// The keys each section of the file wrote, in the order the TOML table holds them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Written(Vec<(String, Vec<String>)>);

impl Written {
    /// The keys of every section of `table` (a whole configuration file).
    pub(crate) fn from_table(table: &toml::Table) -> Written {
        Written(
            table
                .iter()
                .filter_map(|(section, value)| {
                    let keys = value.as_table()?.keys().cloned().collect();
                    Some((section.clone(), keys))
                })
                .collect(),
        )
    }

    /// The keys written in `[section]` (empty when the file has no such section).
    fn keys(&self, section: &str) -> &[String] {
        self.0
            .iter()
            .find(|(s, _)| s == section)
            .map_or(&[], |(_, keys)| keys.as_slice())
    }
}

/// A section that has an on/off switch.
struct Switched {
    /// The section's name, e.g. `iphttps`.
    name: &'static str,
    /// The feature it configures, for messages.
    feature: &'static str,
    /// Whether the feature is on in the built configuration.
    on: bool,
    /// The key whose presence turns the feature on when `enabled` is not written (`pool4`,
    /// `upstream`); `None` when only `enabled` does.
    turned_on_by: Option<&'static str>,
    /// Keys another enabled feature reads even while this one is off.
    used_elsewhere: &'static [&'static str],
}

impl Config {
    /// One warning per section with a switch that the file filled in but did not enable,
    /// naming the section, the ignored keys and the key that turns the section on.
    pub(crate) fn unused_section_warnings(&self, out: &mut Vec<String>) {
        let nat64_keys_dns64_reads: &[&str] = if self.dns64.enabled {
            &["prefix", "allow_private_ipv4"]
        } else {
            &[]
        };
        let sections = [
            Switched {
                name: "teredo",
                feature: "Teredo",
                on: self.teredo.enabled,
                turned_on_by: None,
                used_elsewhere: &[],
            },
            Switched {
                name: "iphttps",
                feature: "IP-HTTPS",
                on: self.iphttps.enabled,
                turned_on_by: None,
                used_elsewhere: &[],
            },
            Switched {
                name: "nat64",
                feature: "NAT64",
                on: self.nat64.enabled,
                turned_on_by: Some("pool4"),
                used_elsewhere: nat64_keys_dns64_reads,
            },
            Switched {
                name: "dns64",
                feature: "DNS64",
                on: self.dns64.enabled,
                turned_on_by: Some("upstream"),
                used_elsewhere: &[],
            },
            Switched {
                name: "metrics",
                feature: "the metrics exporter",
                on: self.metrics.listen.is_some(),
                turned_on_by: None,
                used_elsewhere: &[],
            },
        ];
        for s in sections.iter().filter(|s| !s.on) {
            let written = self.written.keys(s.name);
            let ignored: Vec<&str> = written
                .iter()
                .map(String::as_str)
                .filter(|k| *k != "enabled" && !s.used_elsewhere.contains(k))
                .collect();
            if ignored.is_empty() {
                continue;
            }
            out.push(unused_section_warning(
                s,
                written.iter().any(|k| k == "enabled"),
                &ignored,
            ));
        }
    }
}

/// The warning for section `s`, which is off: `enabled = false` was written, or (when
/// `enabled_written` is false) the switch and the key that turns it on were left out.
fn unused_section_warning(s: &Switched, enabled_written: bool, ignored: &[&str]) -> String {
    let (name, feature) = (s.name, s.feature);
    let (they, them) = if ignored.len() == 1 {
        ("it is", "it")
    } else {
        ("they are", "them")
    };
    let ignored = ignored.join(", ");
    match (enabled_written, s.turned_on_by) {
        (true, needs) => format!(
            "{name}.enabled = false: [{name}] is filled in ({ignored}) but {feature} is off, \
             so {they} ignored; set {name}.enabled = true to turn {feature} on{}, or \
             remove {them}",
            needs.map_or(String::new(), |k| format!(" (it needs {name}.{k})"))
        ),
        (false, Some(key)) => format!(
            "{name}.{key} is not set: [{name}] is filled in ({ignored}) but {feature} is off \
             without {name}.{key}, so {they} ignored; set {name}.{key} (which turns \
             {feature} on), or remove {them}"
        ),
        (false, None) => format!(
            "{name}.enabled is not set: [{name}] is filled in ({ignored}) but {feature} is off \
             unless enabled, so {they} ignored; set {name}.enabled = true to turn \
             {feature} on, or remove {them}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    const BASE: &str = "[teredo]\nserver_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\n\
                        [corpnet]\nipv6_prefixes = [\"2001:db8:100::/48\"]\n\
                        address6 = \"2001:db8:100::1\"\n";

    /// The warnings of BASE plus `extra`, which must be valid.
    #[track_caller]
    fn warnings(extra: &str) -> Vec<String> {
        let text = format!("{BASE}{extra}");
        Config::from_toml_str(&text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .warnings()
    }

    /// The one warning about `[section]` being filled in but not enabled, checked to name the
    /// section, every ignored key and the key that turns the section on.
    #[track_caller]
    fn unused(extra: &str, section: &str, ignored: &[&str], to_set: &str) -> String {
        let w = warnings(extra);
        let hits: Vec<&String> = w
            .iter()
            .filter(|w| w.contains(&format!("[{section}] is filled in")))
            .collect();
        assert_eq!(hits.len(), 1, "{extra:?}: {w:?}");
        let hit = hits[0];
        for key in ignored {
            assert!(hit.contains(key), "{hit:?} lacks {key:?}");
        }
        assert!(
            hit.contains(&format!("set {to_set}")),
            "{hit:?} lacks {to_set:?}"
        );
        hit.clone()
    }

    #[track_caller]
    fn no_unused(extra: &str) {
        let w = warnings(extra);
        assert!(
            !w.iter().any(|w| w.contains("is filled in")),
            "{extra:?}: {w:?}"
        );
    }

    #[test]
    fn iphttps_filled_in_without_enabled_is_reported() {
        let w = unused(
            "[iphttps]\nlisten = \"[::]:443\"\ncertificate = \"/etc/gate64/i.crt\"\n",
            "iphttps",
            &["listen", "certificate"],
            "iphttps.enabled = true",
        );
        assert!(w.starts_with("iphttps.enabled is not set"), "{w}");
        assert!(
            w.contains("so they are ignored") && w.ends_with("remove them"),
            "{w}"
        );
        let w = unused(
            "[iphttps]\nenabled = false\nprefix = \"2001:db8:1::/48\"\n",
            "iphttps",
            &["prefix"],
            "iphttps.enabled = true",
        );
        assert!(w.starts_with("iphttps.enabled = false"), "{w}");
        assert!(
            w.contains("so it is ignored") && w.ends_with("remove it"),
            "{w}"
        );
    }

    #[test]
    fn teredo_filled_in_but_disabled_is_reported() {
        let text = "[teredo]\nenabled = false\nserver_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\n\
                    port = 3545\n[corpnet]\nipv6_prefixes = [\"2001:db8:100::/48\"]\n\
                    address6 = \"2001:db8:100::1\"\n";
        let w = Config::from_toml_str(text).unwrap().warnings();
        let hits: Vec<&String> = w
            .iter()
            .filter(|w| w.contains("[teredo] is filled in"))
            .collect();
        assert_eq!(hits.len(), 1, "{w:?}");
        let hit = hits[0];
        assert!(hit.starts_with("teredo.enabled = false"), "{hit}");
        assert!(hit.contains("(port, server_addresses)"), "{hit}");
        assert!(hit.contains("set teredo.enabled = true"), "{hit}");
    }

    #[test]
    fn nat64_without_pool4_or_disabled_is_reported() {
        let w = unused(
            "[nat64]\nprefix = \"2001:db8:64::/96\"\nudp_timeout_secs = 600\n",
            "nat64",
            &["prefix", "udp_timeout_secs"],
            "nat64.pool4",
        );
        assert!(w.starts_with("nat64.pool4 is not set"), "{w}");
        let w = unused(
            "[nat64]\nenabled = false\npool4 = [\"192.0.2.64/30\"]\n",
            "nat64",
            &["pool4"],
            "nat64.enabled = true",
        );
        assert!(w.starts_with("nat64.enabled = false"), "{w}");
    }

    #[test]
    fn nat64_prefix_read_by_dns64_is_not_unused() {
        // DNS64 synthesizes under nat64.prefix while gate64's own NAT64 is off.
        no_unused(
            "[nat64]\nprefix = \"2001:db8:64::/96\"\nallow_private_ipv4 = true\n\
             [dns64]\nupstream = [\"10.0.0.53\"]\n",
        );
        // Keys DNS64 does not read are still reported.
        unused(
            "[nat64]\nprefix = \"2001:db8:64::/96\"\nports = [2000, 3000]\n\
             [dns64]\nupstream = [\"10.0.0.53\"]\n",
            "nat64",
            &["ports"],
            "nat64.pool4",
        );
    }

    #[test]
    fn dns64_without_upstream_or_disabled_is_reported() {
        let w = unused(
            "[dns64]\nlisten = [\"127.0.0.1:5353\"]\n",
            "dns64",
            &["listen"],
            "dns64.upstream",
        );
        assert!(w.starts_with("dns64.upstream is not set"), "{w}");
        let w = unused(
            "[dns64]\nenabled = false\nupstream = [\"10.0.0.53\"]\ntimeout_ms = 500\n",
            "dns64",
            &["upstream", "timeout_ms"],
            "dns64.enabled = true",
        );
        assert!(w.starts_with("dns64.enabled = false"), "{w}");
    }

    #[test]
    fn metrics_listen_while_disabled_is_reported() {
        let w = unused(
            "[metrics]\nenabled = false\nlisten = \"127.0.0.1:9999\"\n",
            "metrics",
            &["listen"],
            "metrics.enabled = true",
        );
        assert!(w.starts_with("metrics.enabled = false"), "{w}");
    }

    #[test]
    fn a_switch_alone_or_an_enabled_section_is_not_reported() {
        no_unused(
            "[iphttps]\nenabled = false\n[nat64]\nenabled = false\n[dns64]\nenabled = false\n\
             [metrics]\nenabled = false\n",
        );
        no_unused(
            "[iphttps]\nenabled = true\ncertificate = \"c\"\nprivate_key = \"k\"\n\
             prefix = \"2001:db8:1::/48\"\n[nat64]\npool4 = [\"192.0.2.64/30\"]\n\
             [dns64]\nupstream = [\"10.0.0.53\"]\n[metrics]\nlisten = \"127.0.0.1:9999\"\n",
        );
        // Sections without a switch are never "not enabled".
        no_unused("[limits]\nmax_tls_handshakes = 10\n[log]\nlevel = \"debug\"\n");
        // A configuration built in memory has no written keys.
        let mut c = Config::lab(
            "127.0.0.1".parse().unwrap(),
            "127.0.0.2".parse().unwrap(),
            1,
        );
        c.iphttps.certificate = Some("c".into());
        assert!(!c.warnings().iter().any(|w| w.contains("is filled in")));
    }
}
