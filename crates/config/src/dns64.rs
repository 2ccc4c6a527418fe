//! `[dns64]`: the DNS64 resolver (RFC 6147) that clients ask through their tunnel.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use ipnet::Ipv6Net;
use serde::Deserialize;

use crate::error::{invalid, missing, quote};
use crate::{Config, ConfigError};

/// Defaults of `[dns64]`, as documented in `docs/config.md`.
pub mod defaults {
    /// Port of `dns64.upstream` and `dns64.listen` entries written without one.
    pub const PORT: u16 = 53;
    /// `dns64.timeout_ms`: time allowed for each upstream attempt.
    pub const TIMEOUT_MS: u64 = 2000;
    /// `dns64.cache_entries`: answers cached (0 = no cache).
    pub const CACHE_ENTRIES: usize = 65_536;
}

/// `::ffff:0:0/96`, IPv4-mapped addresses: never a native AAAA (RFC 6147 §5.1.4), always in
/// [`Dns64::exclude`].
pub const MAPPED: Ipv6Net = match Ipv6Net::new(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96) {
    Ok(n) => n,
    Err(_) => panic!("96 is a valid prefix length"),
};

/// `[dns64]`: the DNS64 resolver. AAAA records are synthesized under `nat64.prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dns64 {
    /// Whether gate64 serves DNS64. Default: on when `upstream` is given.
    pub enabled: bool,
    /// Extra addresses to serve on, UDP and TCP. Empty by default: gate64 is never an open
    /// resolver on the internet side unless told so.
    pub listen: Vec<SocketAddr>,
    /// Also serve on `corpnet.address6` port 53, where clients reach it through their tunnel.
    pub serve_on_corp_address: bool,
    /// Upstream resolvers, tried in order. Required while enabled.
    pub upstream: Vec<SocketAddr>,
    /// AAAA ranges treated as absent; `::ffff:0:0/96` is always first.
    pub exclude: Vec<Ipv6Net>,
    /// Time allowed for each upstream attempt, in milliseconds.
    pub timeout_ms: u64,
    /// Answers cached; 0 turns the cache off.
    pub cache_entries: usize,
}

/// DNS64 disabled, every key at its default.
impl Default for Dns64 {
    fn default() -> Self {
        Dns64 {
            enabled: false,
            listen: Vec::new(),
            serve_on_corp_address: true,
            upstream: Vec::new(),
            exclude: vec![MAPPED],
            timeout_ms: defaults::TIMEOUT_MS,
            cache_entries: defaults::CACHE_ENTRIES,
        }
    }
}

impl Dns64 {
    /// Every address DNS64 serves on: `listen`, plus `corpnet.address6` port 53 when
    /// `serve_on_corp_address` is set. Empty while disabled.
    pub fn listen_addresses(&self, corp_address6: Ipv6Addr) -> Vec<SocketAddr> {
        if !self.enabled {
            return Vec::new();
        }
        let mut out = self.listen.clone();
        let corp = SocketAddr::from((corp_address6, defaults::PORT));
        if self.serve_on_corp_address && !out.contains(&corp) {
            out.push(corp);
        }
        out
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDns64 {
    enabled: Option<bool>,
    listen: Option<Vec<Endpoint>>,
    serve_on_corp_address: Option<bool>,
    upstream: Option<Vec<Endpoint>>,
    exclude: Option<Vec<Ipv6Net>>,
    timeout_ms: Option<u64>,
    cache_entries: Option<usize>,
}

/// A DNS server address: `"10.0.0.53"`, `"10.0.0.53:5353"`, `"2001:db8::53"` or
/// `"[2001:db8::53]:5353"`; without a port, port 53.
pub(crate) struct Endpoint(SocketAddr);

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(Endpoint(a));
        }
        s.parse::<IpAddr>()
            .map(|ip| Endpoint(SocketAddr::new(ip, defaults::PORT)))
            .map_err(|_| {
                serde::de::Error::custom(format!(
                    "{s:?} is neither an IP address nor an address with a port"
                ))
            })
    }
}

impl RawDns64 {
    pub(crate) fn build(self) -> Result<Dns64, ConfigError> {
        let d = Dns64::default();
        let enabled = self.enabled.unwrap_or(self.upstream.is_some());
        let upstream: Vec<SocketAddr> = match self.upstream {
            Some(u) => u.into_iter().map(|e| e.0).collect(),
            None if enabled => {
                return Err(missing(
                    "dns64.upstream",
                    "list the resolvers DNS64 forwards to, e.g. [\"10.0.0.53\"] (or set \
                     dns64.enabled = false)",
                ));
            }
            None => Vec::new(),
        };
        let mut exclude = vec![MAPPED];
        for n in self.exclude.unwrap_or_default() {
            if !exclude.contains(&n) {
                exclude.push(n);
            }
        }
        Ok(Dns64 {
            enabled,
            listen: self
                .listen
                .map(|l| l.into_iter().map(|e| e.0).collect())
                .unwrap_or_default(),
            serve_on_corp_address: self
                .serve_on_corp_address
                .unwrap_or(d.serve_on_corp_address),
            upstream,
            exclude,
            timeout_ms: self.timeout_ms.unwrap_or(d.timeout_ms),
            cache_entries: self.cache_entries.unwrap_or(d.cache_entries),
        })
    }
}

/// Allowed `dns64.timeout_ms`.
const TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 100..=30_000;
/// Upper bound of `dns64.cache_entries`.
const MAX_CACHE_ENTRIES: usize = 16_777_216;

impl Config {
    pub(crate) fn validate_dns64(&self) -> Result<(), ConfigError> {
        let d = &self.dns64;
        if !d.enabled {
            return Ok(());
        }
        if d.upstream.is_empty() {
            return Err(invalid(
                "dns64.upstream",
                "[]",
                "list at least one resolver, e.g. [\"10.0.0.53\"] (or set dns64.enabled = false)",
            ));
        }
        for (key, list) in [("dns64.upstream", &d.upstream), ("dns64.listen", &d.listen)] {
            for a in list {
                let value = quote(&a.to_string());
                if a.port() == 0 {
                    return Err(invalid(key, value, "the port must be 1..=65535"));
                }
                if key == "dns64.upstream" && (a.ip().is_unspecified() || a.ip().is_multicast()) {
                    return Err(invalid(
                        key,
                        value,
                        "must be a unicast address of a resolver gate64 can reach",
                    ));
                }
            }
        }
        for n in &d.exclude {
            if n.addr() != n.network() {
                return Err(invalid(
                    "dns64.exclude",
                    quote(&n.to_string()),
                    format!("host bits are set; did you mean {}?", n.trunc()),
                ));
            }
        }
        if !TIMEOUT_RANGE.contains(&d.timeout_ms) {
            return Err(invalid(
                "dns64.timeout_ms",
                d.timeout_ms,
                format!(
                    "must be {}..={} milliseconds",
                    TIMEOUT_RANGE.start(),
                    TIMEOUT_RANGE.end()
                ),
            ));
        }
        if d.cache_entries > MAX_CACHE_ENTRIES {
            return Err(invalid(
                "dns64.cache_entries",
                d.cache_entries,
                format!("at most {MAX_CACHE_ENTRIES} answers (0 turns the cache off)"),
            ));
        }
        // DNS64 synthesizes under nat64.prefix even when gate64's own NAT64 is off (the
        // translator may be another box), so the prefix must be an RFC 6052 one here too.
        let p = self.nat64.prefix;
        let value = quote(&p.to_string());
        if ![32, 40, 48, 56, 64, 96].contains(&p.prefix_len()) {
            return Err(invalid(
                "nat64.prefix",
                value,
                "DNS64 synthesizes under it: the length must be 32, 40, 48, 56, 64 or 96 \
                 (RFC 6052 §2.2)",
            ));
        }
        if p.addr() != p.network() {
            return Err(invalid(
                "nat64.prefix",
                value,
                format!("host bits are set; did you mean {}?", p.trunc()),
            ));
        }
        if p.prefix_len() < 96 && p.addr().octets()[8] != 0 {
            return Err(invalid(
                "nat64.prefix",
                value,
                "bits 64-71 (the u octet) must be zero (RFC 6052 §2.2)",
            ));
        }
        Ok(())
    }

    pub(crate) fn dns64_warnings(&self, out: &mut Vec<String>) {
        let d = &self.dns64;
        if !d.enabled {
            return;
        }
        if d.listen_addresses(self.corpnet.address6).is_empty() {
            out.push(
                "dns64.enabled = true but dns64.listen is empty and \
                 dns64.serve_on_corp_address = false: DNS64 serves nobody"
                    .to_owned(),
            );
        }
        for a in &d.listen {
            if a.ip().is_unspecified() {
                out.push(format!(
                    "dns64.listen = {}: a wildcard address also serves the internet side; \
                     make sure a firewall keeps gate64 from being an open resolver",
                    quote(&a.to_string())
                ));
            }
        }
        if !self.nat64.enabled {
            out.push(format!(
                "dns64.enabled = true but nat64.enabled = false: synthesized addresses under \
                 {} reach IPv4 hosts only if another NAT64 serves that prefix",
                self.nat64.prefix
            ));
        }
    }
}

/// What a `[dns64]` key's value looks like, for type errors.
pub(crate) fn expected_form(path: &str) -> Option<&'static str> {
    Some(match path {
        "dns64.enabled" | "dns64.serve_on_corp_address" => "true or false",
        "dns64.listen" => "a list of addresses with ports, e.g. [\"127.0.0.1:5353\"]",
        "dns64.upstream" => "a list of resolver addresses, e.g. [\"10.0.0.53\", \"10.0.1.53:53\"]",
        "dns64.exclude" => "a list of IPv6 prefixes, e.g. [\"2001:db8:dead::/48\"]",
        "dns64.timeout_ms" | "dns64.cache_entries" => "a whole number",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use crate::{Config, ConfigError, ErrorKind};

    const BASE: &str = "[teredo]\nserver_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\n\
                        [corpnet]\nipv6_prefixes = [\"2001:db8:100::/48\"]\n\
                        address6 = \"2001:db8:100::1\"\n";

    fn parse(extra: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str(&format!("{BASE}{extra}"))
    }

    #[track_caller]
    fn refused(extra: &str, key: &str, needle: &str) -> ConfigError {
        let e = parse(extra).expect_err(extra);
        let msg = e.to_string();
        assert_eq!(e.key(), Some(key), "{msg}");
        assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
        e
    }

    #[test]
    fn absent_section_means_off_and_no_listener() {
        let c = parse("").unwrap();
        assert!(!c.dns64.enabled);
        assert!(c.dns64.listen.is_empty());
        assert!(c.dns64.listen_addresses(c.corpnet.address6).is_empty());
        assert_eq!(c.dns64.exclude, vec![super::MAPPED]);
    }

    #[test]
    fn upstream_turns_it_on_with_defaults() {
        let c =
            parse("[dns64]\nupstream = [\"10.0.0.53\", \"10.0.1.53:5353\", \"2001:db8::53\"]\n")
                .unwrap();
        let d = &c.dns64;
        assert!(d.enabled && d.serve_on_corp_address);
        let up: Vec<String> = d.upstream.iter().map(|a| a.to_string()).collect();
        assert_eq!(up, ["10.0.0.53:53", "10.0.1.53:5353", "[2001:db8::53]:53"]);
        assert_eq!(d.timeout_ms, super::defaults::TIMEOUT_MS);
        assert_eq!(d.cache_entries, super::defaults::CACHE_ENTRIES);
        assert_eq!(
            d.listen_addresses(c.corpnet.address6),
            vec!["[2001:db8:100::1]:53".parse().unwrap()]
        );
        // NAT64 is off here: a warning says synthesized addresses need a translator.
        assert!(
            c.warnings()
                .iter()
                .any(|w| w.contains("nat64.enabled = false"))
        );
    }

    #[test]
    fn every_key() {
        let c = parse(
            "[dns64]\nenabled = true\nlisten = [\"127.0.0.1:5353\", \"[::1]:5353\"]\n\
             serve_on_corp_address = false\nupstream = [\"10.0.0.53\"]\n\
             exclude = [\"2001:db8:dead::/48\", \"::ffff:0:0/96\"]\ntimeout_ms = 500\n\
             cache_entries = 0\n",
        )
        .unwrap();
        let d = &c.dns64;
        assert_eq!(d.listen.len(), 2);
        assert_eq!(d.listen_addresses(c.corpnet.address6), d.listen);
        assert_eq!(d.exclude.len(), 2, "::ffff:0:0/96 once");
        assert_eq!((d.timeout_ms, d.cache_entries), (500, 0));
        // Disabled explicitly: upstream may be absent.
        let c = parse("[dns64]\nenabled = false\n").unwrap();
        assert!(!c.dns64.enabled);
    }

    #[test]
    fn errors_name_the_key() {
        let e = refused("[dns64]\nenabled = true\n", "dns64.upstream", "resolvers");
        assert_eq!(e.kind(), ErrorKind::MissingKey);
        refused("[dns64]\nupstream = []\n", "dns64.upstream", "at least one");
        refused(
            "[dns64]\nupstream = [\"0.0.0.0\"]\n",
            "dns64.upstream",
            "unicast",
        );
        refused(
            "[dns64]\nupstream = [\"10.0.0.53:0\"]\n",
            "dns64.upstream",
            "port",
        );
        let e = refused(
            "[dns64]\nupstream = [\"resolver\"]\n",
            "dns64.upstream",
            "address",
        );
        assert_eq!(e.kind(), ErrorKind::WrongType);
        refused(
            "[dns64]\nupstream = [\"10.0.0.53\"]\nlisten = [\"127.0.0.1:0\"]\n",
            "dns64.listen",
            "port",
        );
        refused(
            "[dns64]\nupstream = [\"10.0.0.53\"]\nexclude = [\"2001:db8::1/48\"]\n",
            "dns64.exclude",
            "host bits",
        );
        refused(
            "[dns64]\nupstream = [\"10.0.0.53\"]\ntimeout_ms = 5\n",
            "dns64.timeout_ms",
            "milliseconds",
        );
        refused(
            "[dns64]\nupstream = [\"10.0.0.53\"]\ncache_entries = 100000000\n",
            "dns64.cache_entries",
            "at most",
        );
        let e = refused(
            "[dns64]\nupstreams = [\"10.0.0.53\"]\n",
            "dns64.upstreams",
            "no such key",
        );
        assert_eq!(e.kind(), ErrorKind::UnknownKey);
        refused(
            "[dns64]\nupstream = [\"10.0.0.53\"]\n[nat64]\nprefix = \"2001:db8:64::/80\"\n",
            "nat64.prefix",
            "DNS64",
        );
    }

    #[test]
    fn wildcard_listen_warns() {
        let c = parse("[dns64]\nupstream = [\"10.0.0.53\"]\nlisten = [\"0.0.0.0:53\"]\n").unwrap();
        assert!(c.warnings().iter().any(|w| w.contains("open resolver")));
    }
}
