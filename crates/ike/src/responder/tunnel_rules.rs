//! Which tunnel an IKE SA is: chosen once per IKE_AUTH, after the client's certificate
//! verified, and handed to every check that depends on it (uniqueness, the per-identity cap,
//! RFC 4739's policy) and to the first child SA.
//!
//! A client that names its tunnel ([`crate::child_sa::named_tunnel`]) gets that tunnel. One
//! that does not (Windows, Apple and Android clients never do, and often propose `::/0`) gets
//! the tunnel of the first [`TunnelRule`] its certificate matches (`[[ipsec.tunnel_rule]]`),
//! which then acts as if the client had named it: TSr narrowed into that tunnel's prefixes.
//! With no rule matching, the TSr alone decides ([`choose_tunnel`](super::traffic_selectors::choose_tunnel)). The client's own
//! choice wins over a rule, since a client that names its tunnels builds both of them with
//! one machine certificate; rules sort clients, they grant nothing (what gates the intranet
//! is `intranet_second_auth`).

use super::auth_round::Verified;
use super::{Responder, child};
use crate::auth::CaSet;
use crate::child_sa::TunnelKind;
use crate::message::TrafficSelector;

/// One `[[ipsec.tunnel_rule]]`: the tunnel of a client whose certificate matches every
/// condition given (at least one is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelRule {
    /// The tunnel such a client gets.
    pub tunnel: TunnelKind,
    /// The certificate was issued by one of these CAs, or by a CA under one
    /// ([`CaSet::issued`]).
    pub ca: Option<CaSet>,
    /// The certificate's subject commonName, or one of its DNS or email subjectAltNames,
    /// matches this pattern.
    pub identity: Option<IdentityPattern>,
}

impl TunnelRule {
    /// Whether the verified certificate meets every condition of the rule; a rule without
    /// any matches nothing.
    pub(super) fn matches(&self, cert: &Verified) -> bool {
        (self.ca.is_some() || self.identity.is_some())
            && self.ca.as_ref().is_none_or(|ca| ca.issued(&cert.issuers))
            && self
                .identity
                .as_ref()
                .is_none_or(|p| cert.names.iter().any(|n| p.matches(n)))
    }
}

/// A name pattern: `*` stands for any run of characters (dots included, none at all too);
/// every other character stands for itself, ASCII letters in either case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityPattern(String);

impl IdentityPattern {
    /// The pattern as written.
    pub fn new(pattern: &str) -> Self {
        IdentityPattern(pattern.to_owned())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `name` matches the pattern. Linear in the pattern times the name at worst.
    pub fn matches(&self, name: &str) -> bool {
        glob(self.0.as_bytes(), name.as_bytes())
    }
}

/// Wildcard matching with `*` only, ASCII case-insensitive: the last `*` seen is where a
/// mismatch backtracks to (one more character swallowed by it).
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(c) if c.eq_ignore_ascii_case(&name[n]) => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// The tunnel the rules give `cert`: the first that matches, with its index.
pub(super) fn ruled(rules: &[TunnelRule], cert: &Verified) -> Option<(usize, TunnelKind)> {
    rules
        .iter()
        .enumerate()
        .find(|(_, rule)| rule.matches(cert))
        .map(|(i, rule)| (i, rule.tunnel))
}

/// The tunnel of an IKE_AUTH whose first round verified `cert`, and its TSr narrowed into
/// that tunnel's prefixes; `None` when nothing of TSr is left (TS_UNACCEPTABLE for the first
/// child SA).
pub(super) fn choose(
    r: &Responder,
    (tsr, named): (&[TrafficSelector], Option<TunnelKind>),
    cert: &Verified,
) -> Option<(TunnelKind, Vec<TrafficSelector>)> {
    let wanted = named.or_else(|| {
        let (index, tunnel) = ruled(&r.config.tunnel_rules, cert)?;
        tracing::debug!(
            identity = %cert.subject,
            rule = index + 1,
            ?tunnel,
            "ike: the tunnel comes from ipsec.tunnel_rule"
        );
        Some(tunnel)
    });
    child::choose_tunnel(
        tsr,
        wanted,
        &r.config.infrastructure_prefixes,
        &r.config.intranet_prefixes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, name: &str) -> bool {
        IdentityPattern::new(pattern).matches(name)
    }

    #[test]
    fn glob_matches_stars_and_case() {
        assert!(m("*.devices.corp.example", "PC-17.Devices.Corp.Example"));
        assert!(m("*", ""));
        assert!(m("*", "anything"));
        assert!(m("pc-*", "pc-"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(m("a*b*c", "abc"));
        assert!(m("*@corp.example", "Alice@CORP.example"));
        assert!(m("exact.name", "EXACT.name"));
        assert!(m("**a", "a"));
        assert!(!m("exact.name", "exact.name2"));
        assert!(!m("*.devices.corp.example", "devices.corp.example"));
        assert!(!m("a*b", "ac"));
        assert!(!m("", "a"));
        assert!(m("", ""));
    }

    #[test]
    fn glob_backtracking_stays_bounded() {
        let name = "a".repeat(2000);
        let pattern = format!("{}b", "*a".repeat(50));
        assert!(!m(&pattern, &name));
    }
}
