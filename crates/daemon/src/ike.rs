//! The daemon's side of IKE: the responder built from `[ipsec]`, its sockets bound on the
//! endpoint before the privilege drop, and its events turned into SA installs and metrics.

use crate::accounting::{Sessions, disconnect_reason};
use crate::settings::client_eku;
use anyhow::{Context, Result};
use gate64_config::{
    Config, EspProposal, IpsecCrlExpired, IpsecOcsp, IpsecSecondAuth, IpsecUniqueIds, RuleTunnel,
};
use gate64_dataplane::{
    ChainCacheResult, IkeResult, IkeShedReason, IpsecStats, MobikeResult, OcspResult, RekeyKind,
};
use gate64_esp::{Cipher, SaDb};
use gate64_ike::auth::{CaSet, Credentials, Crls, Identity, Sha1RsaSigner, TrustAnchors};
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::responder::{
    self, Event, IdentityPattern, Refusal, Responder, ResponderConfig, SecondAuthPolicy,
    TunnelRule, UniqueIds,
};
use gate64_io::ike::ocsp::{OcspChecker, OcspMode, OcspRule};
use gate64_io::ike::{
    IKE_PORT, IkeControl, IkeDriver, IkeSockets, NAT_T_PORT, NativeEsp, NativeSockets,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tracing::{debug, info, warn};

/// How often the half-open and IKE SA gauges are copied from the driver's status.
const GAUGE_REFRESH: Duration = Duration::from_secs(1);
/// Liveness checks come up to this percent of `ipsec.dpd_secs` early, differently per IKE
/// SA, so that the checks of clients set up together do not go out in one wave for ever.
const DPD_SPREAD_PERCENT: u32 = 20;

/// What a reload (SIGHUP) hands the running responder: `[ipsec]` certificate, key and CA
/// read from their files again (a renewed certificate at the same path too), the RFC 4739
/// policy and the tunnel rules (their CA files read again too). Established IKE SAs keep
/// running; new handshakes use these.
pub struct Reloaded {
    credentials: Credentials,
    anchors: TrustAnchors,
    user_anchors: Option<TrustAnchors>,
    second_auth: SecondAuthPolicy,
    unique_ids: UniqueIds,
    reauth: Option<Duration>,
    esp_suites: Vec<Cipher>,
    integrity_only_prefix: Option<ipnet::Ipv6Net>,
    tunnel_rules: Vec<TunnelRule>,
}

impl Reloaded {
    /// Reads the files of `cfg`; `None` while IPsec is not configured. Fails, naming the
    /// key, when a file cannot be read or parsed; nothing has changed then.
    pub fn read(cfg: &Config) -> Result<Option<Reloaded>> {
        let Some((credentials, anchors)) = read_credentials(cfg)? else {
            return Ok(None);
        };
        let user_anchors = read_user_anchors(cfg, anchors.crls())?;
        Ok(Some(Reloaded {
            credentials,
            anchors,
            user_anchors,
            second_auth: second_auth_policy(cfg),
            unique_ids: unique_ids(cfg),
            reauth: reauth(cfg),
            esp_suites: esp_suites(cfg),
            integrity_only_prefix: cfg.ipsec_integrity_only_prefix(),
            tunnel_rules: tunnel_rules(cfg)?,
        }))
    }

    /// [`endpoint_certificate_warning`] for these credentials.
    pub fn endpoint_warning(&self, cfg: &Config) -> Option<String> {
        endpoint_certificate_warning(cfg, &self.credentials)
    }

    /// Hands them to the responder behind `control`; `false` when it has stopped. The
    /// established IKE SAs whose certificate the new CRLs revoke are ended (each client is
    /// sent a Delete, and a client on IP-HTTPS loses its link in `shared`) and counted in
    /// `stats` as `revoked`; the others stay.
    pub fn apply(
        self,
        control: &IkeControl,
        stats: Option<Arc<IpsecStats>>,
        shared: Arc<gate64_dataplane::Shared>,
    ) -> bool {
        let next_updates = self.anchors.crls().next_updates().to_vec();
        control.apply(move |responder| {
            responder.replace_credentials(self.credentials, self.anchors);
            responder.replace_user_anchors(self.user_anchors);
            responder.set_intranet_second_auth(self.second_auth);
            responder.set_unique_ids(self.unique_ids);
            responder.set_reauth(self.reauth);
            responder.set_esp_suites(self.esp_suites);
            responder.set_integrity_only_prefix(self.integrity_only_prefix);
            responder.set_tunnel_rules(self.tunnel_rules);
            info!("IKE credentials reloaded: new IKE SAs use them, established ones stay");
            let removed = responder.disconnect_revoked(Instant::now());
            if !removed.is_empty() {
                info!(
                    ike_sas = removed.len(),
                    "IKE SAs ended: a CRL revokes their certificates"
                );
            }
            // The ends are counted from their events (`on_event`).
            if let Some(stats) = stats {
                stats.set_crl_next_updates(&next_updates);
            }
            crate::disconnect::close_iphttps_links(&shared, &removed);
        })
    }
}

/// Advice when gate64's IKE certificate does not hold `ipsec.endpoint` as an IP address
/// subjectAltName and `ipsec.identity` names no other identity: a client that asks for the
/// endpoint's address as gate64's identity (`gate64 connect` without `--ipsec-server-id`,
/// strongSwan with `remote.id` = the address) then refuses gate64.
pub fn endpoint_certificate_warning(cfg: &Config, credentials: &Credentials) -> Option<String> {
    let endpoint = cfg.ipsec_endpoint();
    if cfg.ipsec.identity.is_some() || credentials.holds_id(&Identity::ip(endpoint.into())) {
        return None;
    }
    let (key, hint) = if cfg.ipsec_endpoint_is_default() {
        (
            "ipsec.certificate",
            "the endpoint is the default, the first address of ipsec.pool6",
        )
    } else {
        ("ipsec.certificate", "ipsec.endpoint")
    };
    Some(format!(
        "{key}: the certificate does not hold gate64's IKE endpoint {endpoint} ({hint}) as a \
         subjectAltName: clients that ask for that address as gate64's identity (gate64 \
         connect without --ipsec-server-id, strongSwan with remote.id = the address) refuse \
         gate64; issue the certificate with it (gate64 certs --config FILE does), or give \
         clients a name the certificate holds and set ipsec.identity to it"
    ))
}

/// `[ipsec]` certificate, private key and CA, read and parsed; `None` while not configured.
fn read_credentials(cfg: &Config) -> Result<Option<(Credentials, TrustAnchors)>> {
    let s = &cfg.ipsec;
    let (Some(cert), Some(key), Some(ca)) = (&s.certificate, &s.private_key, &s.ca) else {
        return Ok(None);
    };
    let read = |key: &str, path: &std::path::Path| {
        std::fs::read(path).with_context(|| format!("{key}: cannot read {}", path.display()))
    };
    let credentials = load_credentials(
        (cert, &read("ipsec.certificate", cert)?),
        (key, &read("ipsec.private_key", key)?),
    )?;
    // PKCS#1 v1.5 unless asked: see `Ipsec::rsa_pss`.
    let credentials = if s.rsa_pss {
        credentials.with_rsa_pss()
    } else {
        credentials
    };
    let credentials = with_identity(credentials, s.identity.as_deref())?;
    let anchors = TrustAnchors::from_pem(&read("ipsec.ca", ca)?)
        .map_err(|e| anyhow::anyhow!("`ipsec.ca` ({}): {e}", ca.display()))?
        .for_clients(client_eku(cfg))
        .with_crls(read_crls(cfg)?);
    Ok(Some((credentials, anchors)))
}

/// gate64's IKE credentials from `ipsec.certificate` and `ipsec.private_key` (path and
/// contents each); a refusal names both keys, their files and the reason.
fn load_credentials(
    (cert, cert_pem): (&std::path::Path, &[u8]),
    (key, key_pem): (&std::path::Path, &[u8]),
) -> Result<Credentials> {
    Credentials::from_pem_with_sha1(cert_pem, key_pem, sha1_signer).map_err(|e| {
        anyhow::anyhow!(
            "`ipsec.certificate` ({}) / `ipsec.private_key` ({}): {e}",
            cert.display(),
            key.display()
        )
    })
}

/// aws-lc's RSASSA-PKCS1-v1_5 over SHA-1 (gate64-sys): an RSA certificate signs AUTH method 1
/// with it for clients that send no SIGNATURE_HASH_ALGORITHMS (RFC 7296 §3.8; aws-lc-rs,
/// which makes every other signature, has no SHA-1 RSA signing).
struct Sha1Signer(gate64_sys::rsa_sha1::RsaSha1Signer);

impl Sha1RsaSigner for Sha1Signer {
    fn sign_sha1(&self, octets: &[u8]) -> Option<Vec<u8>> {
        self.0.sign(octets).ok()
    }
}

/// Loads [`Sha1Signer`] from the private key's DER (PKCS#1 when `pkcs1`, else PKCS#8).
pub(crate) fn sha1_signer(der: &[u8], pkcs1: bool) -> Option<Box<dyn Sha1RsaSigner>> {
    let signer = gate64_sys::rsa_sha1::RsaSha1Signer::from_der(der, pkcs1).ok()?;
    Some(Box::new(Sha1Signer(signer)))
}

/// `ipsec.crls`, read and parsed, with `ipsec.crl_expired`. A CRL already past its
/// nextUpdate is warned about: under `warn` it is still used, under `refuse` the certificates
/// of its issuer are refused until a newer one is in place. Read once per load: both rounds'
/// anchors share them.
fn read_crls(cfg: &Config) -> Result<Crls> {
    let refuse = cfg.ipsec.crl_expired == IpsecCrlExpired::Refuse;
    let crls = crate::crl_files::read("ipsec.crls", &cfg.ipsec.crls)?;
    Ok(Crls::new(crls, refuse))
}

/// Our IDr when a client asks for none our certificate holds: `ipsec.identity`, which the
/// certificate must hold (an IP address, an email address with `@`, the subject DN as
/// `gate64 status` writes it with `=`, else a DNS name), or by default the certificate's first
/// subjectAltName, else its DN.
fn with_identity(credentials: Credentials, identity: Option<&str>) -> Result<Credentials> {
    let Some(text) = identity else {
        let id = credentials.first_san_or_dn();
        return credentials
            .with_id(id)
            .map_err(|e| anyhow::anyhow!("`ipsec.certificate`: {e}"));
    };
    let id = if let Ok(ip) = text.parse::<std::net::IpAddr>() {
        Identity::ip(ip)
    } else if text.contains('@') {
        Identity::email(text)
    } else if text.contains('=') {
        if credentials.subject() != text {
            anyhow::bail!(
                "`ipsec.identity` = {text:?}: not the certificate's subject DN ({:?})",
                credentials.subject()
            );
        }
        credentials.id_dn()
    } else {
        Identity::fqdn(text)
    };
    credentials.with_id(id).map_err(|_| {
        anyhow::anyhow!(
            "`ipsec.identity` = {text:?}: the certificate (`ipsec.certificate`) holds no such \
             subjectAltName; give one of its DNS names, IP addresses or email addresses, or its \
             subject DN"
        )
    })
}

/// `ipsec.user_ca`, read and parsed with the client rule of `ipsec.client_eku` and `crls`;
/// `None` when unset (the second round then uses `ipsec.ca`).
fn read_user_anchors(cfg: &Config, crls: &Crls) -> Result<Option<TrustAnchors>> {
    let Some(path) = &cfg.ipsec.user_ca else {
        return Ok(None);
    };
    let pem = std::fs::read(path)
        .with_context(|| format!("ipsec.user_ca: cannot read {}", path.display()))?;
    let anchors = TrustAnchors::from_pem(&pem)
        .map_err(|e| anyhow::anyhow!("`ipsec.user_ca` ({}): {e}", path.display()))?;
    Ok(Some(
        anchors.for_clients(client_eku(cfg)).with_crls(crls.clone()),
    ))
}

/// `ipsec.ocsp`, `ipsec.ocsp_url` and `ipsec.ocsp_max_age_secs` of `cfg` for a running
/// checker (a reload).
pub fn apply_ocsp(cfg: &Config, checker: &OcspChecker) {
    checker.set_rule(ocsp_rule(cfg));
}

/// `ipsec.ocsp`, `ipsec.ocsp_url` and `ipsec.ocsp_max_age_secs` as the driver's rule.
fn ocsp_rule(cfg: &Config) -> OcspRule {
    OcspRule {
        mode: match cfg.ipsec.ocsp {
            IpsecOcsp::Off => OcspMode::Off,
            IpsecOcsp::Soft => OcspMode::Soft,
            IpsecOcsp::Require => OcspMode::Require,
        },
        url: cfg.ipsec.ocsp_url.clone(),
        max_age: Duration::from_secs(cfg.ipsec.ocsp_max_age_secs),
    }
}

/// `ipsec.reauth_secs`, 0 meaning never.
fn reauth(cfg: &Config) -> Option<Duration> {
    (cfg.ipsec.reauth_secs != 0).then(|| Duration::from_secs(cfg.ipsec.reauth_secs))
}

fn unique_ids(cfg: &Config) -> UniqueIds {
    match cfg.ipsec.unique_ids {
        IpsecUniqueIds::Replace => UniqueIds::Replace,
        IpsecUniqueIds::Keep => UniqueIds::Keep,
        IpsecUniqueIds::Never => UniqueIds::Never,
    }
}

/// `ipsec.esp_proposals` as the responder's ESP suites, in the same order.
fn esp_suites(cfg: &Config) -> Vec<Cipher> {
    cfg.ipsec
        .esp_suites()
        .into_iter()
        .map(|s| match s {
            EspProposal::Aes256Gcm16 => Cipher::AesGcm16_256,
            EspProposal::Aes128Gcm16 => Cipher::AesGcm16_128,
            EspProposal::Aes256Sha256 => Cipher::AesCbc256HmacSha256,
            EspProposal::Aes128Sha256 => Cipher::AesCbc128HmacSha256,
        })
        .collect()
}

/// `[[ipsec.tunnel_rule]]` as the responder's rules, in file order, each CA file read and
/// parsed; a refusal names the key, the file and the rule's number.
fn tunnel_rules(cfg: &Config) -> Result<Vec<TunnelRule>> {
    (1..)
        .zip(&cfg.ipsec.tunnel_rule)
        .map(|(n, rule)| {
            let tunnel = match rule.tunnel {
                Some(RuleTunnel::Infrastructure) => TunnelKind::Infrastructure,
                Some(RuleTunnel::Intranet) => TunnelKind::Intranet,
                None => anyhow::bail!("`ipsec.tunnel_rule` #{n}: no tunnel"),
            };
            let ca = match &rule.ca {
                Some(path) => {
                    let pem = std::fs::read(path).with_context(|| {
                        format!(
                            "ipsec.tunnel_rule.ca (#{n}): cannot read {}",
                            path.display()
                        )
                    })?;
                    Some(CaSet::from_pem(&pem).map_err(|e| {
                        anyhow::anyhow!("`ipsec.tunnel_rule.ca` (#{n}, {}): {e}", path.display())
                    })?)
                }
                None => None,
            };
            Ok(TunnelRule {
                tunnel,
                ca,
                identity: rule.identity.as_deref().map(IdentityPattern::new),
            })
        })
        .collect()
}

fn second_auth_policy(cfg: &Config) -> SecondAuthPolicy {
    match cfg.ipsec.intranet_second_auth {
        IpsecSecondAuth::Off => SecondAuthPolicy::Off,
        IpsecSecondAuth::Optional => SecondAuthPolicy::Optional,
        IpsecSecondAuth::Required => SecondAuthPolicy::Required,
    }
}

/// The responder `[ipsec]` describes: credentials and trust anchors read from their files.
pub fn responder_config(cfg: &Config) -> Result<Option<ResponderConfig>> {
    let s = &cfg.ipsec;
    let Some(pool6) = s.pool6 else {
        return Ok(None);
    };
    let Some((credentials, anchors)) = read_credentials(cfg)? else {
        return Ok(None);
    };
    // The tunnels reach their IPv4 prefixes only while clients can get an IPv4 address.
    let ipv4 = s.pool4.is_some();
    let nets = |v6: Vec<ipnet::Ipv6Net>, v4: Vec<ipnet::Ipv4Net>| -> Vec<ipnet::IpNet> {
        v6.into_iter()
            .map(ipnet::IpNet::V6)
            .chain(v4.into_iter().filter(|_| ipv4).map(ipnet::IpNet::V4))
            .collect()
    };
    let mut config = ResponderConfig::new(
        credentials,
        anchors,
        pool6,
        nets(
            cfg.ipsec_infrastructure_prefixes(),
            cfg.ipsec_infrastructure_prefixes4(),
        ),
        nets(
            cfg.ipsec_intranet_prefixes(),
            cfg.ipsec_intranet_prefixes4(),
        ),
    );
    config.pool4 = s.pool4;
    config.peer_pool6 = cfg.ha.as_ref().and_then(|ha| ha.peer_pool6);
    config.peer_pool4 = cfg.ha.as_ref().and_then(|ha| ha.peer_pool4);
    config.dns4 = cfg.ipsec_dns4();
    config.user_anchors = read_user_anchors(cfg, config.anchors.crls())?;
    config.half_open_cookie_threshold = s.half_open_cookie_threshold;
    config.max_half_open_per_source = s.max_half_open_per_source;
    config.max_half_open_bytes = s.max_half_open_bytes;
    config.max_ike_sas = s.max_ike_sas;
    config.max_ike_sas_per_identity = s.max_ike_sas_per_identity;
    config.max_child_sas_per_ike_sa = s.max_child_sas_per_ike_sa;
    config.child_lifetime = Duration::from_secs(s.child_lifetime_secs);
    config.dpd = Duration::from_secs(s.dpd_secs);
    config.dpd_spread_percent = DPD_SPREAD_PERCENT;
    config.nat_t_port = NAT_T_PORT;
    config.native_addresses = cfg.ipsec.listen.clone();
    config.intranet_second_auth = second_auth_policy(cfg);
    config.unique_ids = unique_ids(cfg);
    config.reauth = reauth(cfg);
    config.dns = cfg.ipsec_dns();
    config.dns_domains = cfg.ipsec.dns_domains.clone();
    config.esp_suites = esp_suites(cfg);
    config.integrity_only_prefix = cfg.ipsec_integrity_only_prefix();
    config.hosts = gate64_ike::responder::Hosts::new(cfg.iphttps_pool());
    config.ike_policy = ike_policy(cfg);
    config.tunnel_rules = tunnel_rules(cfg)?;
    config.eap = (!cfg.ipsec.eap_radius.is_empty()).then(gate64_ike::responder::EapPolicy::default);
    config.authorize_certificates =
        cfg.ipsec.authorize_certificates == gate64_config::IpsecAuthorizeCertificates::Radius;
    config.qcd_secret = match cfg.qcd_secret()? {
        Some(secret) => Some(
            gate64_ike::responder::QcdSecret::new(&secret)
                .context("ipsec.qcd_secret_file: the secret is too short")?,
        ),
        None => None,
    };
    Ok(Some(config))
}

/// `ipsec.legacy_proposals` and `ipsec.ike_proposals` as the responder's policy (the
/// transform IDs the config names are all ones gate64 implements: validation refuses others).
fn ike_policy(cfg: &Config) -> gate64_ike::responder::IkePolicy {
    use gate64_ike::keys::{Encr, Group, Integ, Prf};
    let rules = cfg
        .ipsec
        .ike_proposal_specs()
        .into_iter()
        .map(|p| gate64_ike::responder::IkeProposalRule {
            encr: p
                .encr
                .iter()
                .filter_map(|&(id, bits)| Encr::from_transform(id, Some(bits)))
                .collect(),
            integ: p
                .integ
                .iter()
                .filter_map(|&id| Integ::from_id(id))
                .collect(),
            prf: p.prf.iter().filter_map(|&id| Prf::from_id(id)).collect(),
            groups: p
                .groups
                .iter()
                .filter_map(|&id| Group::from_id(id))
                .collect(),
        })
        .collect();
    gate64_ike::responder::IkePolicy {
        legacy: cfg.ipsec.legacy_proposals,
        rules,
    }
}

/// Binds the IKE sockets on `ipsec.endpoint` (500 and 4500: before the privilege drop) and
/// starts the responder on the current tokio runtime until `stop` turns true. Child SAs go
/// into `sadb`, counters and gauges into `stats`, sessions into `sessions` (the session log,
/// when on), and every event to `ha` (the HA sync channel, with `[ha]`). Returns the handle a reload changes it through and `gate64 status` lists its
/// SAs with.
pub fn start(
    cfg: &Config,
    sadb: Arc<SaDb>,
    stats: Arc<IpsecStats>,
    sessions: Option<Arc<Sessions>>,
    native: Option<(NativeSockets, NativeEsp)>,
    ha: Option<crate::ha::Tap>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Option<(IkeControl, Arc<OcspChecker>)>> {
    let Some(config) = responder_config(cfg)? else {
        return Ok(None);
    };
    stats.set_crl_next_updates(config.anchors.crls().next_updates());
    if let Some(w) = endpoint_certificate_warning(cfg, &config.credentials) {
        warn!("{w}");
    }
    let endpoint = cfg.ipsec_endpoint();
    let mut sockets = IkeSockets::bind(endpoint, IKE_PORT, NAT_T_PORT).with_context(|| {
        format!("binding IKE on [{endpoint}]:{IKE_PORT} and :{NAT_T_PORT} (`ipsec.endpoint`)")
    })?;
    let mut native_esp = None;
    if let Some((native, esp)) = native {
        sockets = sockets.with_native(native);
        native_esp = Some(esp);
    }
    let responder = Responder::new(config, Instant::now(), SystemTime::now())
        .map_err(|e| anyhow::anyhow!("starting the IKE responder: {e:?}"))?;
    let sink_stats = Arc::clone(&stats);
    let auth_threads = cfg.effective_ike_auth_threads();
    let (count_stats, count_sadb) = (Arc::clone(&stats), Arc::clone(&sadb));
    // Always there, off or not, so that a reload can turn lookups on.
    let ocsp = Arc::new(OcspChecker::new(ocsp_rule(cfg)));
    let policies = crate::policy::Policies::new(cfg);
    let mut driver = IkeDriver::new(sockets, responder, move |e| {
        if let Some(tap) = &ha {
            tap.on_event(&e);
        }
        on_event(&sadb, &sink_stats, sessions.as_deref(), &policies, e)
    })
    .with_packets_per_source(cfg.ipsec.ike_packets_per_source_per_sec)
    // MMSA and QMSA as one pair, taken after the events reached the SA database.
    .with_on_publish(move |s| {
        count_stats.set_sa_counts(s.established as u64, count_sadb.len() as u64);
    })
    .with_auth_threads(auth_threads, Some(Arc::clone(&ocsp)))
    .with_context(|| {
        format!("starting {auth_threads} IKE worker threads (`ipsec.auth_threads`)")
    })?;
    if let Some(esp) = native_esp {
        driver = driver.with_native_esp(esp);
    }
    if !cfg.ipsec.eap_radius.is_empty() {
        let servers = crate::accounting::eap_radius_servers(cfg)?;
        driver = driver.with_eap_relay(gate64_io::ike::eap_relay::EapRelay::new(
            servers,
            cfg.accounting.nas_identifier.clone(),
            gate64_io::radius::Timing::default(),
        ));
    }
    let control = driver.control();
    let gauges = driver.status();
    let mut gauge_stop = stop.clone();
    let counted = Arc::clone(&ocsp);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(GAUGE_REFRESH);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let s = gauges.snapshot();
                    stats.set_half_open(s.half_open as u64);
                    stats.set_keepalives(s.keepalives);
                    stats.set_socket_drops(s.socket_drops);
                    stats.set_liveness_extended(s.stats.liveness_extended);
                    stats.set_liveness_deferred(s.stats.liveness_deferred);
                    stats.set_mid_sync([s.stats.mid_sync_synced, s.stats.mid_sync_unsupported, s.stats.mid_sync_failed]);
                    for reason in IkeShedReason::ALL {
                        stats.set_shed(reason, gauges.shed(reason));
                    }
                    for result in OcspResult::ALL {
                        stats.set_ocsp(result, counted.count(result));
                    }
                    let cache = s.chain_cache;
                    stats.set_chain_cache_entries(cache.entries);
                    stats.set_chain_cache(ChainCacheResult::Hit, cache.hits);
                    stats.set_chain_cache(ChainCacheResult::Miss, cache.misses);
                    stats.set_chain_cache(ChainCacheResult::Evicted, cache.evicted);
                }
                _ = gauge_stop.wait_for(|stopped| *stopped) => return,
            }
        }
    });
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        };
        if let Err(e) = driver.run(shutdown).await {
            tracing::error!(error = %e, "IKE responder failed");
        }
    });
    info!(endpoint = %endpoint, listen = ?cfg.ipsec.listen, auth_threads, "IKE responder up");
    Ok(Some((control, ocsp)))
}

/// What the daemon does with each responder event: the SA database and the counters follow
/// it, and the session log (when on) records it. An IKE SA authorized with a Filter-Id gets
/// that policy on its child SAs (`crate::policy`).
fn on_event(
    sadb: &SaDb,
    stats: &IpsecStats,
    sessions: Option<&Sessions>,
    policies: &crate::policy::Policies,
    event: Event,
) {
    if let Some(sessions) = sessions {
        sessions.on_event(&event);
    }
    match event {
        Event::ChildSaUp(pair) => {
            let (spi, tunnel, outer) = (pair.inbound.spi, pair.tunnel, pair.peer.outer);
            let client = crate::status::client_key(&pair.peer);
            let inner = sessions.map(|_| pair.peer.inner.clone());
            match sadb.install(*pair) {
                Ok(()) => {
                    info!(spi = format_args!("{spi:08x}"), ?tunnel, client = %outer, "child SA up");
                    if let (Some(sessions), Some(inner)) = (sessions, inner) {
                        sessions.child_up(spi, client, &inner, tunnel);
                    }
                }
                Err(e) => {
                    warn!(spi = format_args!("{spi:08x}"), error = %e, "child SA not installed")
                }
            }
        }
        Event::ChildSaDown { inbound_spi } => {
            let removed = sadb.remove(inbound_spi);
            info!(spi = format_args!("{inbound_spi:08x}"), "child SA down");
            if let Some(sessions) = sessions {
                sessions.child_down(inbound_spi, removed.as_deref());
            }
        }
        Event::IkeSaUp {
            ike_spi,
            peer,
            identity,
            tunnel,
            filter_id,
            ..
        } => {
            info!(%peer, %identity, ?tunnel, "IKE SA up");
            if let Some(name) = filter_id {
                policies.apply_at_auth(sadb, ike_spi, &name, &identity);
            }
        }
        Event::IkeSaDown { peer, identity, .. } => info!(%peer, %identity, "IKE SA down"),
        Event::PeerMoved {
            inbound_spis,
            peer,
            native,
            ..
        } => {
            info!(%peer, "IKE client moved");
            follow_peer(sadb, &inbound_spis, peer, native);
        }
        Event::Rekeyed { kind } => stats.rekey(match kind {
            responder::RekeyKind::Ike => RekeyKind::Ike,
            _ => RekeyKind::Child,
        }),
        Event::Negotiation {
            result,
            duration,
            peer,
            identity,
        } => {
            if let Err(why) = &result {
                info!(
                    reason = why.label(),
                    peer = %peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
                    identity = %identity.as_deref().map_or_else(|| "none".to_owned(), log_text),
                    cause = %log_text(why.cause()),
                    "IKE negotiation failed"
                );
            }
            stats.negotiation(ike_result(&result), duration);
        }
        Event::CookieSent { .. } => stats.cookie_sent(),
        Event::Qcd { sent, .. } => stats.qcd_answer(sent),
        Event::Mobike { peer, result } => {
            debug!(%peer, result = result.label(), "MOBIKE update settled");
            stats.mobike_update(match result {
                responder::MobikeResult::Moved => MobikeResult::Moved,
                responder::MobikeResult::Unchanged => MobikeResult::Unchanged,
                responder::MobikeResult::CheckFailed => MobikeResult::CheckFailed,
                responder::MobikeResult::Malformed => MobikeResult::Malformed,
                responder::MobikeResult::NatRefused => MobikeResult::NatRefused,
            });
        }
        Event::IkeSaEnded { reason, .. } => stats.disconnected(disconnect_reason(reason), 1),
        Event::Refused { peer, reason } => {
            stats.refused(reason.label());
            debug!(%peer, reason = reason.label(), "IKE refused");
        }
        _ => {}
    }
}

/// Points the native child SAs `inbound_spis` (those of a client that reaches gate64
/// directly) at the client's new address and port, and at `native`, gate64's listen socket
/// the IKE SA runs on now (a MOBIKE move to another `[ipsec] listen` address, or a NAT
/// rebinding that arrived on another one), which their ESP is sent from. When `native` is
/// `None` (the IKE SA is on no listen address) the SAs keep the socket they had. A client
/// of Teredo or IP-HTTPS is another client when its outer address changes; its SAs stay as
/// they are.
fn follow_peer(sadb: &SaDb, inbound_spis: &[u32], peer: SocketAddr, native: Option<SocketAddr>) {
    let outer = match peer.ip() {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    for &spi in inbound_spis {
        let Some(entry) = sadb.inbound(spi) else {
            continue;
        };
        let old = entry.peer();
        if old.native.is_none() {
            continue;
        }
        let mut moved = old.clone();
        moved.outer = outer;
        if moved.udp_encap.is_some() {
            moved.udp_encap = Some(peer.port());
        }
        if native.is_some() {
            moved.native = native;
        }
        if moved != *old {
            sadb.update_peer(spi, moved);
        }
    }
}

/// The most bytes of client-supplied text (a claimed identity) that one log line carries.
const LOG_TEXT_MAX: usize = 256;

/// Client-supplied text made safe for one log line: control characters, quotes and
/// backslashes escaped as Rust writes them (`\n`, `\u{1b}`, `\"`), at most
/// [`LOG_TEXT_MAX`] bytes, a cut one ending with `…`.
fn log_text(text: &str) -> String {
    let escaped: String = text.chars().flat_map(char::escape_debug).collect();
    if escaped.len() <= LOG_TEXT_MAX {
        return escaped;
    }
    let mut end = LOG_TEXT_MAX - '…'.len_utf8();
    while !escaped.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &escaped[..end])
}

/// The `result` label of a negotiation's outcome.
fn ike_result(result: &Result<(), Refusal>) -> IkeResult {
    match result {
        Ok(()) => IkeResult::Ok,
        Err(
            Refusal::Authentication(_)
            | Refusal::TooManyCerts
            | Refusal::ChainNotLinear
            | Refusal::Revoked
            | Refusal::OcspUnavailable
            | Refusal::IdentityCap
            | Refusal::DuplicateIdentity
            | Refusal::SameTunnel,
        ) => IkeResult::AuthFailed,
        Err(Refusal::NoProposal | Refusal::InvalidKe) => IkeResult::NoProposal,
        Err(Refusal::TsUnacceptable) => IkeResult::TsUnacceptable,
        Err(Refusal::Timeout) => IkeResult::Timeout,
        Err(_) => IkeResult::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    /// A claimed identity is the client's text: one log line, escaped, at most 256 bytes.
    #[test]
    fn client_text_is_escaped_and_capped_for_the_log() {
        assert_eq!(log_text("fqdn:client1.lab"), "fqdn:client1.lab");
        assert_eq!(
            log_text("fqdn:a\nreason=\"ok\"\u{1b}"),
            "fqdn:a\\nreason=\\\"ok\\\"\\u{1b}"
        );
        let long = log_text(&"é".repeat(1000));
        assert!(long.len() <= LOG_TEXT_MAX, "{}", long.len());
        assert!(long.ends_with('…'), "{long}");
        let exact = "x".repeat(LOG_TEXT_MAX);
        assert_eq!(log_text(&exact), exact);
        let cut = log_text(&"\n".repeat(LOG_TEXT_MAX));
        assert!(cut.len() <= LOG_TEXT_MAX && !cut.contains('\n'), "{cut}");
    }

    /// A configuration with `[ipsec]` (its files are not read here), more `[ipsec]` keys to
    /// follow.
    const IPSEC_BASE: &str = "[teredo]\nserver_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\n\
        [corpnet]\nipv6_prefixes = [\"2001:db8:100::/48\"]\naddress6 = \"2001:db8:100::1\"\n\
        [ipsec]\ncertificate = \"/c.pem\"\nprivate_key = \"/c.key\"\n\
        ca = \"/ca.pem\"\npool6 = \"fd00:c1::100/120\"\n";

    /// `Ipsec::ike_allows` (what `gate64 profile` asks) and the responder's `IkePolicy` built
    /// from the same configuration agree on every IKE SA combination gate64 implements.
    #[test]
    fn profile_ike_rule_matches_the_responder_policy() {
        use gate64_ike::keys::{Encr, Group, Integ, Prf, Suite};
        let base = IPSEC_BASE;
        let configs = [
            "",
            "legacy_proposals = true\n",
            "ike_proposals = [\"aes256-sha384-modp3072\", \"aes128gcm16-prfsha512-curve25519\"]\n",
            "ike_proposals = [\"aes128-aes256-sha256-sha512-prfsha384-ecp256-ecp384-modp4096\"]\n",
            "ike_proposals = [\"aes256gcm16-aes128gcm16-sha256-sha384-ecp256-modp2048\"]\n",
            "legacy_proposals = true\n\
             ike_proposals = [\"aes128-sha1-prfsha1-modp1024\", \"aes256gcm16-prfsha256-modp1024\"]\n",
            "legacy_proposals = true\nike_proposals = [\"aes256-sha1-sha256-ecp256\"]\n",
        ];
        let mut suites = Vec::new();
        for encr in Encr::ALL {
            let integs: Vec<Option<Integ>> = if encr.is_aead() {
                vec![None]
            } else {
                Integ::ALL.into_iter().map(Some).collect()
            };
            for integ in integs {
                for prf in Prf::ALL {
                    suites.push(Suite { encr, integ, prf });
                }
            }
        }
        for extra in configs {
            let cfg = Config::from_toml_str(&format!("{base}{extra}"))
                .unwrap_or_else(|e| panic!("{extra}: {e:#}"));
            let policy = ike_policy(&cfg);
            let (mut allowed, mut refused) = (0, 0);
            for suite in &suites {
                for group in Group::ALL {
                    let responder = policy.allows(suite, group);
                    let profile = cfg.ipsec.ike_allows(
                        (suite.encr.id(), suite.encr.key_bits()),
                        suite.integ.map(Integ::id),
                        suite.prf.id(),
                        group.id(),
                    );
                    assert_eq!(
                        profile, responder,
                        "{extra}: {suite:?} with {group:?}: profile {profile}, responder {responder}"
                    );
                    if responder {
                        allowed += 1;
                    } else {
                        refused += 1;
                    }
                }
            }
            // Each configuration both allows and refuses something (the legacy one with no
            // `ike_proposals` aside: it allows all), so the comparison covers both answers.
            assert!(allowed > 0, "{extra}: nothing allowed");
            assert!(
                refused > 0 || extra == "legacy_proposals = true\n",
                "{extra}: nothing refused"
            );
        }
    }

    /// A move follows the client's new address and port and, for a native SA, the listen
    /// socket the IKE SA runs on now; without one the SA keeps its socket; tunnelled SAs
    /// never move.
    #[test]
    fn a_moved_native_client_is_sent_to_from_its_new_listen_socket() {
        use crate::status::tests::install_client;
        let sadb = SaDb::new();
        let client = std::net::Ipv4Addr::new(198, 51, 100, 10).to_ipv6_mapped();
        let listen_a: SocketAddr = "192.0.2.10:4500".parse().expect("a");
        let listen_b: SocketAddr = "192.0.2.11:4500".parse().expect("b");
        let teredo: Ipv6Addr = "2001:0:c000:201:2c5a:39cb:9bff:f1f5"
            .parse()
            .expect("teredo");
        let now = Instant::now();
        install_client(&sadb, 0x100, now, client, Some(listen_a));
        install_client(&sadb, 0x200, now, teredo, None);
        let peer_of = |spi| sadb.inbound(spi).expect("installed").peer().clone();

        // MOBIKE to the other listen address, from the same public address and port.
        let same: SocketAddr = "198.51.100.10:4500".parse().expect("same");
        follow_peer(&sadb, &[0x100, 0x200], same, Some(listen_b));
        let moved = peer_of(0x100);
        assert_eq!(
            (moved.outer, moved.udp_encap, moved.native),
            (client, Some(4500), Some(listen_b))
        );
        assert_eq!(peer_of(0x200).native, None, "a Teredo SA stays tunnelled");
        assert_eq!(peer_of(0x200).outer, teredo);

        // A NAT rebinding reported on no listen socket: the port follows, the socket stays.
        let rebound: SocketAddr = "198.51.100.10:40001".parse().expect("rebound");
        follow_peer(&sadb, &[0x100], rebound, None);
        let moved = peer_of(0x100);
        assert_eq!(
            (moved.udp_encap, moved.native),
            (Some(40001), Some(listen_b))
        );
    }

    /// The IKE certificate of `gate64 certs` for `gw.gate64.lab` and `2001:db8:ffff::1`.
    fn lab_credentials(tag: &str) -> Credentials {
        let dir = std::env::temp_dir().join(format!("gate64-ike-id-{tag}-{}", std::process::id()));
        let ip: std::net::IpAddr = "2001:db8:ffff::1".parse().expect("ip");
        crate::certs::generate(&dir, &["gw.gate64.lab".to_owned()], &[ip]).expect("certs");
        let read = |f: &str| std::fs::read(dir.join(f)).expect("read");
        let c = Credentials::from_pem(&read("ipsec.pem"), &read("ipsec.key")).expect("creds");
        let _ = std::fs::remove_dir_all(&dir);
        c
    }

    #[test]
    fn a_certificate_without_the_endpoint_is_warned_about() {
        let base = IPSEC_BASE;
        let cfg = |extra: &str| Config::from_toml_str(&format!("{base}{extra}")).expect("config");
        let creds = lab_credentials("endpoint");
        // The certificate holds 2001:db8:ffff::1, not the default endpoint fd00:c1::101.
        let w = endpoint_certificate_warning(&cfg(""), &creds).expect("a warning");
        assert!(
            w.starts_with("ipsec.certificate:")
                && w.contains("fd00:c1::101")
                && w.contains("first address of ipsec.pool6")
                && w.contains("gate64 certs --config"),
            "{w}"
        );
        assert_eq!(
            endpoint_certificate_warning(&cfg("endpoint = \"2001:db8:ffff::1\"\n"), &creds),
            None
        );
        // A name the certificate holds, proven instead: clients ask for that.
        assert_eq!(
            endpoint_certificate_warning(&cfg("identity = \"gw.gate64.lab\"\n"), &creds),
            None
        );
    }

    #[test]
    fn identity_defaults_to_the_first_subject_alt_name_and_must_be_held() {
        let c = with_identity(lab_credentials("default"), None).expect("default");
        assert_eq!(c.id(), Identity::fqdn("gw.gate64.lab"));
        for (given, want) in [
            (
                "2001:db8:ffff::1",
                Identity::ip("2001:db8:ffff::1".parse().expect("ip")),
            ),
            ("gw.gate64.lab", Identity::fqdn("gw.gate64.lab")),
        ] {
            let c = with_identity(lab_credentials("given"), Some(given)).expect(given);
            assert_eq!(c.id(), want);
        }
        let subject = lab_credentials("dn").subject();
        let c = with_identity(lab_credentials("dn2"), Some(&subject)).expect("the DN");
        assert_eq!(c.id(), c.id_dn());
        for refused in ["elsewhere.gate64.lab", "2001:db8::9", "CN=someone else"] {
            let e = with_identity(lab_credentials("refused"), Some(refused)).unwrap_err();
            assert!(format!("{e:#}").contains("ipsec.identity"), "{e:#}");
        }
    }

    /// A key that is not the certificate's kind, or not a key, is refused naming both config
    /// keys, their files and the reason; an RSA one of `gate64 certs --ipsec-key-type rsa`
    /// loads with method 1.
    #[test]
    fn unusable_private_keys_are_refused_naming_the_keys() {
        use crate::certs::{IpsecKeyType, generate_with};
        use gate64_ike::auth::AuthMethod;
        use std::path::Path;
        let dir = std::env::temp_dir().join(format!("gate64-ike-keys-{}", std::process::id()));
        generate_with(
            &dir,
            &["gw.gate64.lab".to_owned()],
            &[],
            &[],
            IpsecKeyType::Rsa,
        )
        .expect("certs");
        let read = |f: &str| std::fs::read(dir.join(f)).expect("read");
        let (cert, key) = (
            Path::new("/etc/gate64/ipsec.pem"),
            Path::new("/etc/gate64/ipsec.key"),
        );
        let rsa = load_credentials((cert, &read("ipsec.pem")), (key, &read("ipsec.key")))
            .expect("RSA credentials");
        assert_eq!(
            rsa.sign(AuthMethod::RsaPkcs1, b"octets", &[])
                .expect("method 1")
                .0,
            AuthMethod::RsaPkcs1
        );
        let garbage = b"-----BEGIN RSA PRIVATE KEY-----\nMAMCAQA=\n-----END RSA PRIVATE KEY-----\n";
        for (bad, reason) in [
            (read("client.key"), "not an RSA key"),
            (garbage.to_vec(), "not an RSA key"),
            (
                b"no PEM here".to_vec(),
                "no unencrypted PKCS#8, SEC1 or PKCS#1 PEM block",
            ),
        ] {
            let e = load_credentials((cert, &read("ipsec.pem")), (key, &bad)).unwrap_err();
            let text = format!("{e:#}");
            for needle in [
                "`ipsec.private_key` (/etc/gate64/ipsec.key)",
                "`ipsec.certificate` (/etc/gate64/ipsec.pem)",
                reason,
            ] {
                assert!(text.contains(needle), "{needle:?} not in {text}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `[[ipsec.tunnel_rule]]` CA files are read and parsed (as at start, reload and
    /// `check-config`): one that cannot be read or holds no certificate is refused naming the
    /// key, the rule and the file; good ones become the responder's rules in file order.
    #[test]
    fn tunnel_rule_cas_are_read_and_refused_naming_the_key() {
        let dir = std::env::temp_dir().join(format!("gate64-ike-rules-{}", std::process::id()));
        crate::certs::generate(&dir, &["gw.gate64.lab".to_owned()], &[]).expect("certs");
        std::fs::write(dir.join("garbage.pem"), "not a certificate").expect("write");
        let base = IPSEC_BASE;
        let cfg = |ca: &str| {
            let text = format!(
                "{base}[[ipsec.tunnel_rule]]\ntunnel = \"intranet\"\nidentity = \"alice*\"\n\
                 [[ipsec.tunnel_rule]]\ntunnel = \"infrastructure\"\nca = \"{}\"\n",
                dir.join(ca).display()
            );
            Config::from_toml_str(&text).expect("config")
        };
        let rules = tunnel_rules(&cfg("clients-ca.pem")).expect("rules");
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].tunnel, TunnelKind::Intranet);
        assert_eq!(
            rules[0].identity.as_ref().map(IdentityPattern::as_str),
            Some("alice*")
        );
        assert!(rules[0].ca.is_none());
        assert_eq!(rules[1].tunnel, TunnelKind::Infrastructure);
        assert!(rules[1].ca.as_ref().is_some_and(|ca| ca.len() == 1));
        for (file, reason) in [
            ("garbage.pem", "no certificate"),
            ("absent.pem", "cannot read"),
        ] {
            let e = format!("{:#}", tunnel_rules(&cfg(file)).unwrap_err());
            assert!(
                e.contains("ipsec.tunnel_rule.ca") && e.contains("#2") && e.contains(file),
                "{e}"
            );
            assert!(e.contains(reason), "{reason:?} not in {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
