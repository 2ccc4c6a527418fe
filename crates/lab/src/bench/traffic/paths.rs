//! What each path the lab claims carried: the DNS64 lookup, the NAT64 and native IPv6
//! destinations, and each transport's clients. `gate64 bench flows` fills one [`Paths`] per
//! run; the capacity search and the demo fail when a claimed path did not work, so a figure
//! printed "by name through DNS64 and NAT64" cannot hold while DNS64 is broken.
//!
//! In the capacity lab (`bench/lab.rs`) the destinations also tell the two IPsec tunnels
//! apart: the native IPv6 server is the infrastructure tunnel's one destination, while DNS64
//! (gate64's corporate address) and the NAT64 prefix lie in the intranet tunnel's. So `ipv6`
//! is the infrastructure tunnel's path and `dns64` and `nat64` the intranet tunnel's.

use crate::bench::spec::Transport;
use serde::{Deserialize, Serialize};
use std::net::Ipv6Addr;

/// How the IPv4-only server's name was resolved.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Dns64Outcome {
    /// A lookup was made (the run had a NAT64 share).
    pub tried: bool,
    /// DNS64 answered with the expected synthesized address.
    pub ok: bool,
    /// The AAAA answer, when one came.
    pub answer: Option<Ipv6Addr>,
    /// Why the lookup failed or the answer was wrong.
    pub error: Option<String>,
    /// The run went on with `--nat64-fallback`'s address instead of DNS64's answer.
    pub fallback_used: bool,
}

/// The traffic one path carried in a run.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct PathCounts {
    /// Probes sent on it (one per client with `--probe-all`).
    pub probes: u64,
    /// Probes whose echo came back.
    pub probes_ok: u64,
    /// Bulk flows on it.
    pub flows: u64,
    /// Bytes its bulk flows delivered (TCP bytes received, UDP payload echoed).
    pub bytes: u64,
}

impl PathCounts {
    /// Counts one probe and whether it came back.
    pub fn probe(&mut self, ok: bool) {
        self.probes += 1;
        self.probes_ok += u64::from(ok);
    }

    /// Counts one bulk flow and what it delivered.
    pub fn flow(&mut self, bytes: u64) {
        self.flows += 1;
        self.bytes += bytes;
    }

    /// Why this path did not work, if it did not: a probe on it unanswered, or bulk flows
    /// on it that delivered nothing. A path nothing was sent on has nothing to say.
    fn failure(&self, name: &str) -> Option<String> {
        if self.probes_ok < self.probes {
            return Some(format!(
                "{name}: {} of {} probes answered",
                self.probes_ok, self.probes
            ));
        }
        if self.flows > 0 && self.bytes == 0 {
            return Some(format!("{name}: {} flows delivered nothing", self.flows));
        }
        None
    }
}

/// Every path of one `gate64 bench flows` run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Paths {
    /// The DNS64 lookup of the IPv4-only server's name.
    pub dns64: Dns64Outcome,
    /// Traffic to the IPv4-only server through NAT64.
    pub nat64: PathCounts,
    /// Traffic to the native IPv6 server.
    pub ipv6: PathCounts,
    /// Traffic of Teredo clients.
    pub teredo: PathCounts,
    /// Traffic of IP-HTTPS clients.
    pub iphttps: PathCounts,
}

impl Paths {
    /// The counts of one destination path (`nat64` or not) and one transport.
    pub fn on(&mut self, nat64: bool, transport: Transport) -> [&mut PathCounts; 2] {
        let dest = if nat64 {
            &mut self.nat64
        } else {
            &mut self.ipv6
        };
        let via = match transport {
            Transport::Teredo => &mut self.teredo,
            Transport::Iphttps => &mut self.iphttps,
        };
        [dest, via]
    }

    /// Every claimed path that did not work, one line each; empty when all did. A NAT64
    /// share that went to `--nat64-fallback`'s address is a DNS64 failure all the same: the
    /// fallback keeps the NAT64 figures measurable, it does not make DNS64 work.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.dns64.tried && !self.dns64.ok {
            let why = self.dns64.error.as_deref().unwrap_or("no answer");
            let fallback = if self.dns64.fallback_used {
                " (the NAT64 share used --nat64-fallback's address)"
            } else {
                ""
            };
            out.push(format!("DNS64: {why}{fallback}"));
        }
        for (name, counts) in [
            ("NAT64", &self.nat64),
            ("IPv6", &self.ipv6),
            ("Teredo", &self.teredo),
            ("IP-HTTPS", &self.iphttps),
        ] {
            out.extend(counts.failure(name));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_working_is_no_failure() {
        let mut p = Paths {
            dns64: Dns64Outcome {
                tried: true,
                ok: true,
                ..Dns64Outcome::default()
            },
            ..Paths::default()
        };
        for c in p.on(true, Transport::Teredo) {
            c.probe(true);
            c.flow(100);
        }
        assert!(p.failures().is_empty(), "{:?}", p.failures());
    }

    #[test]
    fn a_broken_dns64_is_named_even_with_the_fallback() {
        let p = Paths {
            dns64: Dns64Outcome {
                tried: true,
                ok: false,
                error: Some("no answer from 2001:db8::53".into()),
                fallback_used: true,
                ..Dns64Outcome::default()
            },
            ..Paths::default()
        };
        let f = p.failures();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].starts_with("DNS64: no answer"), "{f:?}");
        assert!(f[0].contains("--nat64-fallback"), "{f:?}");
    }

    #[test]
    fn unanswered_probes_and_silent_flows_fail_their_path() {
        let mut p = Paths::default();
        for c in p.on(true, Transport::Iphttps) {
            c.probe(false);
        }
        for c in p.on(false, Transport::Teredo) {
            c.flow(0);
        }
        let f = p.failures();
        assert!(
            f.iter().any(|l| l == "NAT64: 0 of 1 probes answered"),
            "{f:?}"
        );
        assert!(
            f.iter().any(|l| l == "IP-HTTPS: 0 of 1 probes answered"),
            "{f:?}"
        );
        assert!(
            f.iter().any(|l| l == "IPv6: 1 flows delivered nothing"),
            "{f:?}"
        );
        assert!(
            f.iter().any(|l| l == "Teredo: 1 flows delivered nothing"),
            "{f:?}"
        );
    }
}
