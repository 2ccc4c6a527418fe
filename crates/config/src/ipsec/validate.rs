//! What a valid `[ipsec]` section is: the credential files named, an endpoint and pool that
//! fit the rest of the configuration, sound tunnel prefixes, timers and caps within their
//! ranges. Each refusal names its key. (The files themselves are read by `check_ipsec_files`
//! and by the daemon.)

use super::pool::{self, PoolRules};
use super::*;

impl Config {
    /// Refuses an `[ipsec]` section that cannot work, naming the key.
    pub(crate) fn validate_ipsec(&self) -> Result<(), ConfigError> {
        self.validate_ipsec_credentials()?;
        self.validate_esp_proposals()?;
        if let Some(id) = &self.ipsec.identity
            && (id.trim().is_empty() || id.len() > MAX_IDENTITY_LEN)
        {
            return Err(invalid(
                "ipsec.identity",
                format!("{id:?}"),
                format!(
                    "must be 1..={MAX_IDENTITY_LEN} bytes: a DNS name, an IP address, an email \
                     address or the subject DN the certificate holds"
                ),
            ));
        }
        if self.ipsec.crls.iter().any(|p| p.as_os_str().is_empty()) {
            return Err(invalid(
                "ipsec.crls",
                "\"\"",
                "must not hold an empty path; give CRL files (PEM or DER)",
            ));
        }
        self.validate_ipsec_endpoint()?;
        self.validate_ipsec_dns()?;
        self.validate_ipsec_listen()?;
        if let Some(pool) = &self.ipsec.pool6 {
            self.validate_pool6(pool)?;
        }
        for (key, prefixes) in [
            (
                "ipsec.infrastructure_prefixes",
                &self.ipsec.infrastructure_prefixes,
            ),
            ("ipsec.intranet_prefixes", &self.ipsec.intranet_prefixes),
        ] {
            if let Some(prefixes) = prefixes {
                self.validate_tunnel_prefixes(key, prefixes)?;
            }
        }
        self.validate_ipsec_ipv4()?;
        self.validate_ike_proposals()?;
        self.validate_tunnel_rules()?;
        if self.ipsec.authorize_certificates == AuthorizeCertificates::Radius
            && self.ipsec.eap_radius.is_empty()
        {
            return Err(invalid(
                "ipsec.authorize_certificates",
                quote("radius"),
                "asks the [[ipsec.eap_radius]] servers, and none is configured: add one \
                 (server, secret_file) or set \"off\"",
            ));
        }
        self.validate_ipsec_timers()
    }

    /// Every `[[ipsec.tunnel_rule]]` names its tunnel and at least one condition: a CA file
    /// path and/or a name pattern of sensible length without control characters or spaces.
    fn validate_tunnel_rules(&self) -> Result<(), ConfigError> {
        for (n, rule) in (1..).zip(&self.ipsec.tunnel_rule) {
            if rule.tunnel.is_none() {
                return Err(missing(
                    "ipsec.tunnel_rule.tunnel",
                    &format!(
                        "[[ipsec.tunnel_rule]] #{n} names no tunnel: add tunnel = \
                         \"infrastructure\" or \"intranet\""
                    ),
                ));
            }
            if rule.ca.is_none() && rule.identity.is_none() {
                return Err(missing(
                    "ipsec.tunnel_rule",
                    &format!(
                        "[[ipsec.tunnel_rule]] #{n} has no condition, so it would match every \
                         client: give ca = \"PATH\" (the CA that issues these clients' \
                         certificates) and/or identity = \"PATTERN\""
                    ),
                ));
            }
            if let Some(ca) = &rule.ca
                && ca.as_os_str().is_empty()
            {
                return Err(invalid(
                    "ipsec.tunnel_rule.ca",
                    "\"\"",
                    format!("[[ipsec.tunnel_rule]] #{n}: give a PEM file of CA certificates"),
                ));
            }
            if let Some(id) = &rule.identity
                && (id.is_empty()
                    || id.len() > MAX_IDENTITY_LEN
                    || id.chars().any(|c| c.is_whitespace() || c.is_control()))
            {
                return Err(invalid(
                    "ipsec.tunnel_rule.identity",
                    format!("{id:?}"),
                    format!(
                        "[[ipsec.tunnel_rule]] #{n}: must be 1..={MAX_IDENTITY_LEN} bytes \
                         without spaces or control characters, e.g. \"*.devices.example.com\" \
                         (`*` matches any run of characters)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every `ike_proposals` entry parses: known tokens, legacy ones only with
    /// `legacy_proposals`, a cipher, integrity or PRF and a group in each.
    fn validate_ike_proposals(&self) -> Result<(), ConfigError> {
        let key = "ipsec.ike_proposals";
        for s in &self.ipsec.ike_proposals {
            match proposals::parse(s, self.ipsec.legacy_proposals) {
                Ok(_) => {}
                Err(proposals::ProposalError::Unknown(t)) => {
                    return Err(invalid(
                        key,
                        format!("{s:?}"),
                        format!(
                            "unknown or unsupported algorithm {t:?} (3DES and AES-192 are not \
                             implemented); known: {}",
                            proposals::KNOWN_TOKENS
                        ),
                    ));
                }
                Err(proposals::ProposalError::Legacy(t)) => {
                    return Err(invalid(
                        key,
                        format!("{s:?}"),
                        format!(
                            "{t:?} is a legacy algorithm: set ipsec.legacy_proposals = true to allow it"
                        ),
                    ));
                }
                Err(proposals::ProposalError::Missing(what)) => {
                    return Err(invalid(key, format!("{s:?}"), format!("lacks {what}")));
                }
            }
        }
        Ok(())
    }

    /// The three files go together: IPsec is configured by all of them or none.
    fn validate_ipsec_credentials(&self) -> Result<(), ConfigError> {
        let s = &self.ipsec;
        let keys = [
            (
                "ipsec.certificate",
                &s.certificate,
                "gate64's IKE certificate chain, leaf first, e.g. \"/etc/gate64/ipsec.pem\"",
            ),
            (
                "ipsec.private_key",
                &s.private_key,
                "the certificate's private key, e.g. \"/etc/gate64/ipsec.key\"",
            ),
            (
                "ipsec.ca",
                &s.ca,
                "the CA bundle whose client certificates are accepted, e.g. \"/etc/gate64/clients-ca.pem\"",
            ),
        ];
        for (key, path, _) in keys {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(invalid(
                    key,
                    "\"\"",
                    "must not be empty; give the path of a PEM file (or leave the key out)",
                ));
            }
        }
        let given = keys.iter().filter(|(_, p, _)| p.is_some()).count();
        if given == keys.len() && s.pool6.is_none() {
            return Err(missing(
                "ipsec.pool6",
                "IPsec is configured: give the prefix the responder hands clients' inner \
                 addresses from, e.g. \"fd00:c1::100/120\"",
            ));
        }
        if given == 0 || given == keys.len() {
            return Ok(());
        }
        let (key, _, what) = keys
            .iter()
            .find(|(_, p, _)| p.is_none())
            .expect("some but not all are given");
        Err(missing(
            key,
            &format!(
                "IPsec is configured by ipsec.certificate, ipsec.private_key and ipsec.ca \
                 together; give the PEM file with {what} (or remove the other two)"
            ),
        ))
    }

    fn validate_ipsec_endpoint(&self) -> Result<(), ConfigError> {
        let Some(a) = self.ipsec.endpoint else {
            return Ok(());
        };
        let value = quote(&a.to_string());
        let why = special_ipv6(a)
            .map(|w| format!("is {w}; it must be a global (or unique-local) unicast address"))
            .or_else(|| {
                teredo_prefix()
                    .contains(&a)
                    .then(|| "is a Teredo address, where clients live".to_owned())
            })
            .or_else(|| {
                self.iphttps_pool()
                    .filter(|p| p.contains(&a))
                    .map(|p| format!("lies in iphttps.prefix {p}, where clients live"))
            })
            .or_else(|| {
                self.ipsec
                    .pool6
                    .filter(|p| p.contains(&a) && pool6_endpoint(*p) != a)
                    .map(|p| {
                        format!(
                            "lies in ipsec.pool6 {p}, the clients' inner addresses (only the \
                             pool's first address, {}, is gate64's: leave ipsec.endpoint out \
                             to use it)",
                            pool6_endpoint(p)
                        )
                    })
            });
        match why {
            Some(why) => Err(invalid("ipsec.endpoint", value, why)),
            None => Ok(()),
        }
    }

    /// `dns`: unicast addresses, a handful; `dns_domains`: DNS names, only beside a server
    /// (RFC 8598 §4: the domains say which queries go to the servers given with them).
    fn validate_ipsec_dns(&self) -> Result<(), ConfigError> {
        let s = &self.ipsec;
        for a in &s.dns4 {
            if let Some(w) = ipv4::special_ipv4(*a) {
                return Err(invalid(
                    "ipsec.dns",
                    quote(&a.to_string()),
                    format!("is {w}; give a unicast address clients reach through a tunnel"),
                ));
            }
        }
        if let Some(dns) = &s.dns {
            if dns.len() + s.dns4.len() > MAX_DNS_SERVERS {
                return Err(invalid(
                    "ipsec.dns",
                    format!("[{} addresses]", dns.len() + s.dns4.len()),
                    format!("give at most {MAX_DNS_SERVERS} servers"),
                ));
            }
            for a in dns {
                if let Some(w) = special_ipv6(*a) {
                    return Err(invalid(
                        "ipsec.dns",
                        quote(&a.to_string()),
                        format!("is {w}; give a unicast address clients reach through a tunnel"),
                    ));
                }
            }
        }
        if s.dns_domains.len() > MAX_DNS_DOMAINS {
            return Err(invalid(
                "ipsec.dns_domains",
                format!("[{} names]", s.dns_domains.len()),
                format!("give at most {MAX_DNS_DOMAINS} domains"),
            ));
        }
        for d in &s.dns_domains {
            if !valid_dns_name(d) {
                return Err(invalid(
                    "ipsec.dns_domains",
                    quote(d),
                    "is not a DNS name: labels of letters, digits and '-', 1 to 63 characters \
                     each, 253 in all, e.g. \"corp.example.com\"",
                ));
            }
        }
        if !s.dns_domains.is_empty()
            && s.configured()
            && self.ipsec_dns().is_empty()
            && s.dns4.is_empty()
        {
            return Err(invalid(
                "ipsec.dns_domains",
                quote(&s.dns_domains.join(", ")),
                "needs DNS servers to send those names to: set ipsec.dns, or turn DNS64 on \
                 (dns64.enabled), whose address is the default",
            ));
        }
        Ok(())
    }

    /// Each address must be one clients can reach and gate64 can bind once: unicast, not the
    /// endpoint (whose ports the tunnelled IKE already holds), no duplicates; and there is
    /// nothing to serve on them without IPsec configured.
    fn validate_ipsec_listen(&self) -> Result<(), ConfigError> {
        let list = &self.ipsec.listen;
        let value = || {
            let items: Vec<String> = list.iter().map(|a| quote(&a.to_string())).collect();
            format!("[{}]", items.join(", "))
        };
        if !list.is_empty() && !self.ipsec.configured() {
            return Err(invalid(
                "ipsec.listen",
                value(),
                "needs IPsec configured (ipsec.certificate, ipsec.private_key and ipsec.ca); \
                 without them there is no responder to serve on these addresses",
            ));
        }
        for (i, a) in list.iter().enumerate() {
            if list[..i].contains(a) {
                return Err(invalid(
                    "ipsec.listen",
                    value(),
                    format!("lists {a} twice; each address is bound once"),
                ));
            }
            let why = match a {
                IpAddr::V4(v4) => {
                    if v4.is_unspecified() {
                        Some("the unspecified address 0.0.0.0".to_owned())
                    } else if v4.is_loopback() {
                        Some("a loopback address (127.0.0.0/8)".to_owned())
                    } else if v4.is_multicast() {
                        Some("multicast (224.0.0.0/4)".to_owned())
                    } else if v4.is_broadcast() {
                        Some("the broadcast address".to_owned())
                    } else {
                        None
                    }
                }
                IpAddr::V6(v6) => special_ipv6(*v6).map(str::to_owned).or_else(|| {
                    (Some(*v6) == self.ipsec.endpoint || *v6 == self.ipsec_endpoint())
                        .then(|| "the IPsec endpoint, whose ports tunnelled IKE holds".to_owned())
                }),
            };
            if let Some(why) = why {
                return Err(invalid(
                    "ipsec.listen",
                    value(),
                    format!("holds {a}, {why}; give unicast addresses clients reach gate64 at"),
                ));
            }
        }
        Ok(())
    }

    /// The pool hands out client addresses: it may not overlap anything that is routed
    /// elsewhere (the corporate network, NAT64, the other transports' clients).
    fn validate_pool6(&self, pool: &Ipv6Net) -> Result<(), ConfigError> {
        let mut taken: Vec<(IpNet, &str)> = self
            .corpnet
            .ipv6_prefixes
            .iter()
            .map(|p| (IpNet::V6(*p), "corpnet.ipv6_prefixes"))
            .collect();
        taken.push((IpNet::V6(teredo_prefix()), "the Teredo prefix"));
        if self.nat64.enabled {
            taken.push((IpNet::V6(self.nat64.prefix), "nat64.prefix"));
        }
        taken.extend(
            self.iphttps_pool()
                .map(|p| (IpNet::V6(p), "iphttps.prefix")),
        );
        pool::check_pool(
            IpNet::V6(*pool),
            PoolRules {
                key: "ipsec.pool6",
                min_len: (
                    MIN_POOL6_LEN,
                    format!("must be a /{MIN_POOL6_LEN} or longer (one address per client)"),
                ),
                max_len: (
                    MAX_POOL6_LEN,
                    format!(
                        "must be a /{MAX_POOL6_LEN} or shorter: its all-zero address and its \
                         first address (gate64's default endpoint) are never handed out"
                    ),
                ),
                special: special_ipv6(pool.network())
                    .map(|why| format!("is {why}, not a routable unicast prefix")),
                taken: &taken,
                disjoint_from: "the pool must be disjoint from the corporate prefixes, NAT64 \
                                and the other transports' clients",
            },
        )
    }

    /// A tunnel reaches only what gate64 routes to the corporate side: each prefix inside a
    /// corporate prefix, the NAT64 prefix, or gate64's own `corpnet.address6`.
    fn validate_tunnel_prefixes(&self, key: &str, prefixes: &[Ipv6Net]) -> Result<(), ConfigError> {
        if prefixes.is_empty() {
            return Err(invalid(key, "[]", "list at least one prefix"));
        }
        let own = Ipv6Net::new(self.corpnet.address6, 128).expect("128 is a valid prefix length");
        for p in prefixes {
            let value = quote(&p.to_string());
            if p.addr() != p.network() {
                return Err(invalid(
                    key,
                    value,
                    format!("host bits are set; did you mean {}?", p.trunc()),
                ));
            }
            let inside = self.corpnet.ipv6_prefixes.iter().any(|c| c.contains(p))
                || (self.nat64.enabled && self.nat64.prefix.contains(p))
                || *p == own;
            if !inside {
                return Err(invalid(
                    key,
                    value,
                    "lies outside every corpnet.ipv6_prefixes entry and the NAT64 prefix \
                     (nat64.prefix, while NAT64 is on); a tunnel reaches only the corporate \
                     side",
                ));
            }
        }
        Ok(())
    }

    fn validate_ipsec_timers(&self) -> Result<(), ConfigError> {
        let s = &self.ipsec;
        let range = CHILD_LIFETIME_RANGE;
        if !range.contains(&s.child_lifetime_secs) {
            return Err(invalid(
                "ipsec.child_lifetime_secs",
                s.child_lifetime_secs,
                format!("must be {}..={} seconds", range.start(), range.end()),
            ));
        }
        if !DPD_RANGE.contains(&s.dpd_secs) {
            return Err(invalid(
                "ipsec.dpd_secs",
                s.dpd_secs,
                format!(
                    "must be {}..={} seconds",
                    DPD_RANGE.start(),
                    DPD_RANGE.end()
                ),
            ));
        }
        if let Some(url) = &s.ocsp_url
            && !valid_ocsp_url(url)
        {
            return Err(invalid(
                "ipsec.ocsp_url",
                url,
                "must be an http:// URL (OCSP answers are signed, so plain HTTP is the norm) of \
                 at most 1024 bytes without spaces",
            ));
        }
        if !OCSP_MAX_AGE_RANGE.contains(&s.ocsp_max_age_secs) {
            return Err(invalid(
                "ipsec.ocsp_max_age_secs",
                s.ocsp_max_age_secs,
                format!(
                    "must be {}..={} seconds: how old an OCSP answer without nextUpdate may be \
                     (from its thisUpdate) before it counts as no answer",
                    OCSP_MAX_AGE_RANGE.start(),
                    OCSP_MAX_AGE_RANGE.end()
                ),
            ));
        }
        if s.reauth_secs != 0 && !REAUTH_RANGE.contains(&s.reauth_secs) {
            return Err(invalid(
                "ipsec.reauth_secs",
                s.reauth_secs,
                format!(
                    "must be 0 (never) or {}..={} seconds",
                    REAUTH_RANGE.start(),
                    REAUTH_RANGE.end()
                ),
            ));
        }
        if s.crl_refresh_secs < MIN_CRL_REFRESH_SECS {
            return Err(invalid(
                "ipsec.crl_refresh_secs",
                s.crl_refresh_secs,
                format!("must be at least {MIN_CRL_REFRESH_SECS} seconds"),
            ));
        }
        if s.max_half_open_per_source == 0 {
            return Err(invalid(
                "ipsec.max_half_open_per_source",
                0,
                "must be at least 1, or no client could start IKE",
            ));
        }
        self.validate_ipsec_caps()?;
        if s.ike_packets_per_source_per_sec < MIN_IKE_PACKETS_PER_SOURCE_PER_SEC {
            return Err(invalid(
                "ipsec.ike_packets_per_source_per_sec",
                s.ike_packets_per_source_per_sec,
                format!(
                    "must be at least {MIN_IKE_PACKETS_PER_SOURCE_PER_SEC}: one client's two \
                     tunnels with cookies and fragmented certificates take about that many"
                ),
            ));
        }
        Ok(())
    }

    fn validate_ipsec_caps(&self) -> Result<(), ConfigError> {
        let s = &self.ipsec;
        for (key, value, why) in [
            (
                "ipsec.max_ike_sas",
                s.max_ike_sas,
                "must be at least 1, or no client could start IKE",
            ),
            (
                "ipsec.max_ike_sas_per_identity",
                s.max_ike_sas_per_identity,
                "must be at least 1, or no client could authenticate (a DirectAccess client \
                 needs 2, and 4 while rekeying)",
            ),
            (
                "ipsec.max_child_sas_per_ike_sa",
                s.max_child_sas_per_ike_sa,
                "must be at least 1, or no tunnel could be built",
            ),
        ] {
            if value == 0 {
                return Err(invalid(key, value, why));
            }
        }
        if s.auth_threads > MAX_AUTH_THREADS {
            return Err(invalid(
                "ipsec.auth_threads",
                s.auth_threads,
                format!("at most {MAX_AUTH_THREADS} threads (0 = one per core)"),
            ));
        }
        if s.max_half_open_bytes < MIN_HALF_OPEN_BYTES {
            return Err(invalid(
                "ipsec.max_half_open_bytes",
                s.max_half_open_bytes,
                format!(
                    "must be at least {MIN_HALF_OPEN_BYTES}: one half-open IKE SA with a \
                     fragmented IKE_AUTH holds up to that much"
                ),
            ));
        }
        Ok(())
    }
}
