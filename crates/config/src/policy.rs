//! `[[policy]]`: named per-user policies RADIUS picks with Filter-Id (at authentication or
//! by a CoA-Request): which corporate prefixes a session may reach, and how fast.

use std::collections::HashSet;

use ipnet::IpNet;
use serde::Deserialize;

use crate::error::{ConfigError, ErrorKind, invalid, missing, quote};
use crate::gre::{raw_at, wrong_type};

/// Largest `rate_mbps`: 100 Gbit/s, beyond any link gate64 serves (a larger value is a typo).
pub const MAX_RATE_MBPS: u32 = 100_000;
/// Longest policy name: a RADIUS attribute holds at most 253 octets.
pub const MAX_NAME_LEN: usize = 253;

/// One `[[policy]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Unique name, as RADIUS's Filter-Id carries it.
    pub name: String,
    /// IPv6 and IPv4 prefixes the policy's users may reach (inside their tunnel's).
    pub prefixes: Vec<IpNet>,
    /// Per-session limit in Mbit/s, each direction; `None` = no limit.
    pub rate_mbps: Option<u32>,
}

/// The keys of a `[[policy]]`.
const KEYS: &[&str] = &["name", "prefixes", "rate_mbps"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    name: Option<String>,
    prefixes: Option<Vec<IpNet>>,
    rate_mbps: Option<u32>,
}

/// Parses every `[[policy]]` of the whole file `table` (none when absent).
pub(crate) fn parse(table: &toml::Table) -> Result<Vec<Policy>, ConfigError> {
    let entries = match table.get("policy") {
        None => return Ok(Vec::new()),
        Some(toml::Value::Array(a)) => a.as_slice(),
        Some(toml::Value::Table(t)) => {
            return Err(match t.keys().find(|k| !KEYS.contains(&k.as_str())) {
                Some(k) => ConfigError::new(
                    ErrorKind::UnknownKey,
                    &format!("policy.{k}"),
                    None,
                    "[[policy]] has no such key; expected one of `name`, `prefixes`, `rate_mbps`",
                ),
                None => wrong_type(
                    "policy",
                    &toml::Value::Table(t.clone()),
                    "an array of tables, written [[policy]]",
                ),
            });
        }
        Some(v) => {
            return Err(wrong_type(
                "policy",
                v,
                "an array of tables, written [[policy]]",
            ));
        }
    };
    let mut names = HashSet::new();
    let mut out = Vec::new();
    for (i, v) in entries.iter().enumerate() {
        let path = format!("policy[{i}]");
        let p = build(&path, raw_at(v, &path)?)?;
        if !names.insert(p.name.clone()) {
            return Err(invalid(
                &format!("{path}.name"),
                quote(&p.name),
                "another [[policy]] has this name; names must be unique",
            ));
        }
        out.push(p);
    }
    Ok(out)
}

fn build(path: &str, r: RawPolicy) -> Result<Policy, ConfigError> {
    let key = |k: &str| format!("{path}.{k}");
    let name = r.name.ok_or_else(|| {
        missing(
            &key("name"),
            "give the policy the name RADIUS sends as Filter-Id, e.g. \"contractors\"",
        )
    })?;
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.chars().any(char::is_control) {
        return Err(invalid(
            &key("name"),
            quote(&name),
            format!("must be 1 to {MAX_NAME_LEN} bytes without control characters"),
        ));
    }
    let prefixes = r.prefixes.ok_or_else(|| {
        missing(
            &key("prefixes"),
            "list the IPv6 and IPv4 prefixes the policy's users may reach, e.g. [\"fd00:c1::/64\", \"10.1.0.0/16\"]",
        )
    })?;
    if prefixes.is_empty() {
        return Err(invalid(
            &key("prefixes"),
            "[]",
            "give at least one prefix (a policy that reaches nothing is a disconnect)",
        ));
    }
    if let Some(p) = prefixes.iter().find(|p| p.trunc() != **p) {
        return Err(invalid(
            &key("prefixes"),
            quote(&p.to_string()),
            format!(
                "write the prefix with its host bits zero: \"{}\"",
                p.trunc()
            ),
        ));
    }
    if let Some(rate) = r.rate_mbps
        && !(1..=MAX_RATE_MBPS).contains(&rate)
    {
        return Err(invalid(
            &key("rate_mbps"),
            rate,
            format!("must be 1..={MAX_RATE_MBPS} (leave it out for no limit)"),
        ));
    }
    Ok(Policy {
        name,
        prefixes,
        rate_mbps: r.rate_mbps,
    })
}

#[cfg(test)]
mod tests {
    use crate::Config;

    const BASE: &str = r#"
[teredo]
server_addresses = ["192.0.2.1", "192.0.2.2"]
[corpnet]
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
"#;

    /// The base file with `extra` in front (top-level keys come before any table).
    fn load(extra: &str) -> Result<Config, crate::ConfigError> {
        Config::from_toml_str(&format!("{extra}\n{BASE}"))
    }

    #[test]
    fn parses_policies_of_both_families() {
        let c = load(
            r#"
[[policy]]
name = "contractors"
prefixes = ["2001:db8:100::10/128", "10.1.0.0/16"]
rate_mbps = 5
[[policy]]
name = "staff"
prefixes = ["::/0"]
"#,
        )
        .unwrap();
        assert_eq!(c.policy.len(), 2);
        assert_eq!(c.policy[0].name, "contractors");
        assert_eq!(c.policy[0].prefixes.len(), 2);
        assert!(c.policy[0].prefixes[1].addr().is_ipv4());
        assert_eq!(c.policy[0].rate_mbps, Some(5));
        assert_eq!(c.policy[1].rate_mbps, None);
        assert!(load("").unwrap().policy.is_empty());
    }

    #[test]
    fn refuses_bad_values_naming_the_key() {
        let cases = [
            ("[[policy]]\nprefixes = [\"::/0\"]\n", "policy[0].name"),
            ("[[policy]]\nname = \"a\"\n", "policy[0].prefixes"),
            (
                "[[policy]]\nname = \"a\"\nprefixes = []\n",
                "policy[0].prefixes",
            ),
            (
                "[[policy]]\nname = \"a\"\nprefixes = [\"10.1.0.1/16\"]\n",
                "policy[0].prefixes",
            ),
            (
                "[[policy]]\nname = \"a\"\nprefixes = [\"10.1.0.0/33\"]\n",
                "policy[0].prefixes",
            ),
            (
                "[[policy]]\nname = \"a\"\nprefixes = [\"::/0\"]\nrate_mbps = 0\n",
                "policy[0].rate_mbps",
            ),
            (
                "[[policy]]\nname = \"a\"\nprefixes = [\"::/0\"]\nrate_mbps = -1\n",
                "policy[0].rate_mbps",
            ),
            (
                "[[policy]]\nname = \"a\"\nprefixes = [\"::/0\"]\nrate = 5\n",
                "policy[0].rate",
            ),
            (
                "[[policy]]\nname = \"\"\nprefixes = [\"::/0\"]\n",
                "policy[0].name",
            ),
            ("policy = 5\n", "policy"),
        ];
        for (extra, key) in cases {
            let e = load(extra).expect_err(extra);
            assert_eq!(e.key(), Some(key), "{extra}: {e}");
        }
    }

    #[test]
    fn refuses_duplicate_names() {
        let e = load(
            "[[policy]]\nname = \"a\"\nprefixes = [\"::/0\"]\n[[policy]]\nname = \"a\"\nprefixes = [\"10.0.0.0/8\"]\n",
        )
        .unwrap_err();
        assert_eq!(e.key(), Some("policy[1].name"));
        assert!(e.to_string().contains("unique"), "{e}");
    }

    #[test]
    fn a_policy_change_needs_a_restart() {
        let a = load("[[policy]]\nname = \"a\"\nprefixes = [\"::/0\"]\n").unwrap();
        let b = load("[[policy]]\nname = \"a\"\nprefixes = [\"::/0\"]\nrate_mbps = 5\n").unwrap();
        assert_eq!(a.restart_only_changes(&b), ["policy"]);
        assert!(a.restart_only_changes(&a.clone()).is_empty());
    }
}
