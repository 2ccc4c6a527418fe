//! Per-user policies (`[[policy]]`) as the daemon applies them: [`Policies::apply`] puts
//! the named policy (its prefixes, its rate) on every child SA of an IKE SA, now and for
//! the child SAs it installs later (rekeys), through [`SaDb::apply_policy`]. RADIUS names
//! the policy with Filter-Id, in a CoA-Request (`crate::dae`).
//!
//! Each IKE SA gets its own copy of the policy, with its own rate buckets: a session's two
//! tunnels are limited separately, each to `rate_mbps` each way.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use gate64_config::Config;
use gate64_esp::{SaDb, Selector, SessionPolicy};

/// The `[[policy]]` tables by name, resolved once at start (a change needs a restart).
#[derive(Debug, Default)]
pub struct Policies {
    by_name: HashMap<String, gate64_config::Policy>,
    /// Time 0 of the rate buckets' clocks.
    epoch: Option<Instant>,
}

/// A Filter-Id that names no `[[policy]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPolicy(pub String);

impl std::fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no [[policy]] is named {:?}", self.0)
    }
}

impl std::error::Error for UnknownPolicy {}

impl Policies {
    /// The policies of `cfg`.
    pub fn new(cfg: &Config) -> Policies {
        Policies {
            by_name: cfg
                .policy
                .iter()
                .map(|p| (p.name.clone(), p.clone()))
                .collect(),
            epoch: Some(Instant::now()),
        }
    }

    /// A fresh instance of the policy `name` (its own rate buckets).
    pub fn instance(&self, name: &str) -> Result<Arc<SessionPolicy>, UnknownPolicy> {
        let p = self
            .by_name
            .get(name)
            .ok_or_else(|| UnknownPolicy(name.to_owned()))?;
        Ok(Arc::new(SessionPolicy::new(
            p.name.clone(),
            p.prefixes.iter().copied().map(Selector::prefix).collect(),
            p.rate_mbps,
            self.epoch.unwrap_or_else(Instant::now),
        )))
    }

    /// Whether `name` is a configured policy.
    pub fn knows(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Applies the policy `name` (`None`: none) to the child SAs of the IKE SA whose
    /// initiator SPI is `ike_spi_i` (what [`SaDb`] files child SAs under): those installed,
    /// from their next packet, and those it installs later. Returns how many installed child
    /// SAs changed; an unknown name changes nothing.
    pub fn apply(
        &self,
        sadb: &SaDb,
        ike_spi_i: u64,
        name: Option<&str>,
    ) -> Result<usize, UnknownPolicy> {
        let policy = name.map(|n| self.instance(n)).transpose()?;
        Ok(sadb.apply_policy(ike_spi_i, policy))
    }

    /// Applies the Filter-Id `name` of an IKE SA's Access-Accept when it comes up (and again
    /// under its new SPI when it is rekeyed). A name no `[[policy]]` has fails closed: the
    /// IKE SA's child SAs reach nothing (every packet is `policy`) and an error names it.
    pub fn apply_at_auth(&self, sadb: &SaDb, ike_spi_i: u64, name: &str, identity: &str) {
        match self.apply(sadb, ike_spi_i, Some(name)) {
            Ok(_) => tracing::info!(%identity, policy = %name, "IKE SA under policy"),
            Err(e) => {
                tracing::error!(%identity, filter_id = %name, error = %e, "Access-Accept names an unknown policy: the session reaches nothing");
                let closed = SessionPolicy::new(
                    name.to_owned(),
                    Vec::new(),
                    None,
                    self.epoch.unwrap_or_else(Instant::now),
                );
                sadb.apply_policy(ike_spi_i, Some(Arc::new(closed)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policies() -> Policies {
        let cfg = Config::from_toml_str(
            r#"
[[policy]]
name = "contractors"
prefixes = ["2001:db8:100::5/128", "10.1.0.0/16"]
rate_mbps = 5

[teredo]
server_addresses = ["192.0.2.1", "192.0.2.2"]
[corpnet]
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
"#,
        )
        .unwrap();
        Policies::new(&cfg)
    }

    #[test]
    fn a_known_name_gives_its_prefixes_and_rate_and_an_unknown_one_nothing() {
        let p = policies();
        let c = p.instance("contractors").unwrap();
        assert!(c.reaches("2001:db8:100::5".parse().unwrap()));
        assert!(!c.reaches("2001:db8:100::6".parse().unwrap()));
        assert!(c.reaches("10.1.9.9".parse().unwrap()));
        assert!(c.from_client.is_some() && c.to_client.is_some());
        assert!(p.knows("contractors") && !p.knows("Contractors"));
        let db = SaDb::new();
        assert_eq!(
            p.apply(&db, 7, Some("staff")),
            Err(UnknownPolicy("staff".into()))
        );
        assert!(db.policy_of(7).is_none(), "nothing set for an unknown name");
        assert_eq!(p.apply(&db, 7, Some("contractors")), Ok(0));
        assert_eq!(db.policy_of(7).unwrap().name, "contractors");
        assert_eq!(p.apply(&db, 7, None), Ok(0));
        assert!(db.policy_of(7).is_none());
        // At authentication, an unknown name fails closed.
        p.apply_at_auth(&db, 8, "staff", "CN=laptop");
        let closed = db.policy_of(8).unwrap();
        assert!(!closed.reaches("2001:db8:100::5".parse().unwrap()));
        p.apply_at_auth(&db, 9, "contractors", "CN=laptop");
        assert!(
            db.policy_of(9)
                .unwrap()
                .reaches("2001:db8:100::5".parse().unwrap())
        );
    }
}
