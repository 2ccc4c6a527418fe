//! `[ipsec]`: the security step and the IKEv2/ESP responder: whether client traffic
//! needs an SA (`require`), gate64's IKE credentials and the CA whose client certificates it
//! accepts, the endpoint clients reach it at, the inner-address pool and the two tunnels'
//! prefixes (DirectAccess' infrastructure and intranet tunnels).
//!
//! IPsec is *configured* when `certificate`, `private_key` and `ca` are all given; a section
//! with only some of them is refused, naming the missing one. Every other key has a default.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::Deserialize;

use crate::corpnet::special_ipv6;
use crate::error::{check_readable_file, invalid, missing, quote};
use crate::teredo::teredo_prefix;
use crate::{Config, ConfigError, defaults};

/// `[ipsec]`: IKEv2 (RFC 7296) and ESP (RFC 4303) towards the clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipsec {
    /// The security step: a client's packet reaches the corporate network, NAT64 or another
    /// client only out of a child SA. `false` is the lab switch (warned about at start, every
    /// hour and in `check-config`).
    pub require: bool,
    /// PEM file with gate64's IKE certificate chain, leaf first.
    pub certificate: Option<PathBuf>,
    /// PEM file with that certificate's private key.
    pub private_key: Option<PathBuf>,
    /// PEM bundle of the CA(s) whose client certificates are accepted.
    pub ca: Option<PathBuf>,
    /// PEM bundle of the CA(s) whose user certificates the RFC 4739 second round accepts;
    /// `None`: `ca`.
    pub user_ca: Option<PathBuf>,
    /// CRL files (PEM or DER) whose revoked client certificates are refused, in both
    /// authentication rounds. A certificate whose issuer has no CRL here is not checked.
    pub crls: Vec<PathBuf>,
    /// What a CRL past its nextUpdate does.
    pub crl_expired: CrlExpired,
    /// Seconds between looks at the CRL files' modification times; a file that changed is
    /// read again and applied as a reload applies it.
    pub crl_refresh_secs: u64,
    /// gate64's IKE/ESP address as written; `None` = the first address of `pool6`, which
    /// the pool never hands out ([`Config::ipsec_endpoint`]).
    pub endpoint: Option<Ipv6Addr>,
    /// Inner addresses handed to clients that ask (configuration payload, RFC 7296 §3.15).
    /// Required while IPsec is configured (the responder hands addresses out of it).
    pub pool6: Option<Ipv6Net>,
    /// Inner IPv4 addresses for clients that ask (INTERNAL_IP4_ADDRESS); `None`: no IPv4
    /// inside the tunnels.
    pub pool4: Option<Ipv4Net>,
    /// IPv4 networks the infrastructure tunnel reaches; `None` = none
    /// ([`Config::ipsec_infrastructure_prefixes4`]).
    pub infrastructure_prefixes4: Option<Vec<Ipv4Net>>,
    /// IPv4 networks the intranet tunnel reaches; `None` = `corpnet.ipv4_prefixes`
    /// ([`Config::ipsec_intranet_prefixes4`]).
    pub intranet_prefixes4: Option<Vec<Ipv4Net>>,
    /// What the infrastructure tunnel reaches, as written; `None` = `corpnet.address6`/128
    /// (DNS64) ([`Config::ipsec_infrastructure_prefixes`]).
    pub infrastructure_prefixes: Option<Vec<Ipv6Net>>,
    /// What the intranet tunnel reaches, as written; `None` = every corporate prefix plus the
    /// NAT64 prefix while NAT64 is on ([`Config::ipsec_intranet_prefixes`]).
    pub intranet_prefixes: Option<Vec<Ipv6Net>>,
    /// Half-open IKE SAs above which IKE_SA_INIT is answered with a cookie (RFC 7296 §2.6);
    /// 0 = always.
    pub half_open_cookie_threshold: usize,
    /// Half-open IKE SAs one source may hold (an IPv4 address, an IPv6 /64, a Teredo
    /// client's NAT mapping); further IKE_SA_INIT are ignored.
    pub max_half_open_per_source: usize,
    /// Bytes all half-open IKE SAs may hold (IKE_SA_INIT messages, cached responses,
    /// IKE_AUTH fragments); beyond it new half-open SAs and fragments are refused.
    pub max_half_open_bytes: usize,
    /// IKE SAs in all, half-open and established; beyond it IKE_SA_INIT is refused.
    pub max_ike_sas: usize,
    /// IKE SAs one authenticated identity (certificate subject) may hold.
    pub max_ike_sas_per_identity: usize,
    /// Child SAs one IKE SA may hold; beyond it CREATE_CHILD_SA gets NO_ADDITIONAL_SAS.
    pub max_child_sas_per_ike_sa: usize,
    /// IKE worker threads beside the IKE task: IKE_SA_INIT key exchanges and IKE_AUTH
    /// verifications (chain building, signature checks); 0 means one per CPU the process may
    /// use ([`Config::effective_ike_auth_threads`]).
    pub auth_threads: usize,
    /// IKE packets per second one source may have handled: per client on each worker (a
    /// Teredo address, an IP-HTTPS /64), and per source address in the IKE driver; as many
    /// again may come at once. Beyond it IKE is shed before the responder does any work.
    pub ike_packets_per_source_per_sec: u32,
    /// Addresses (IPv4 or IPv6) on which the IKE driver binds UDP 500 and 4500 for clients
    /// that reach gate64 directly (RFC 7296 with NAT traversal, RFC 3948 ESP in UDP), beside
    /// `endpoint` inside Teredo and IP-HTTPS. Empty: none.
    pub listen: Vec<IpAddr>,
    /// Soft lifetime of child SAs, in seconds (the hard one is 10% more): the client rekeys
    /// before it.
    pub child_lifetime_secs: u64,
    /// Seconds an IKE SA may stay silent before gate64 checks its client's liveness (RFC
    /// 7296 §1.4); a client that answers none of the retransmissions loses its SAs.
    pub dpd_secs: u64,
    /// Seconds an IKE SA may live from its authentication: announced with AUTH_LIFETIME (RFC
    /// 4478); the IKE SA is deleted 10% later unless the client authenticated anew. 0 =
    /// never.
    pub reauth_secs: u64,
    /// RFC 4739 second authentication (a user certificate after the machine certificate).
    pub intranet_second_auth: SecondAuth,
    /// Which extended key usages a client certificate must list, over IKE and IP-HTTPS.
    pub client_eku: ClientEku,
    /// The identity gate64 proves in IDr when a client asks for none its certificate holds:
    /// an IP address, an email address (`@`), a subject DN (`=`) or a DNS name; `None` = the
    /// certificate's first subjectAltName, else its DN. Checked against the certificate when
    /// it is read.
    pub identity: Option<String>,
    /// With an RSA certificate, sign RFC 7427 AUTH (method 14) with RSASSA-PSS instead of
    /// PKCS#1 v1.5 (both SHA-256 or the client's first SHA-2 hash). Off: every RFC 7427 peer
    /// verifies PKCS#1 v1.5, not every one PSS. No effect on ECDSA keys or on method 1.
    pub rsa_pss: bool,
    /// What a new IKE_AUTH of an identity (issuer and subject) that already holds an IKE SA
    /// for the same tunnel does.
    pub unique_ids: UniqueIds,
    /// Whether client certificates are checked with their CA's OCSP responder.
    pub ocsp: Ocsp,
    /// The OCSP responder asked about every client certificate (`http://...`); `None` = the
    /// one each certificate names in its Authority Information Access.
    pub ocsp_url: Option<String>,
    /// How old (seconds from its thisUpdate) an OCSP answer without nextUpdate may be to be
    /// taken; older ones count as no answer.
    pub ocsp_max_age_secs: u64,
    /// DNS servers handed to clients that ask (INTERNAL_IP6_DNS) as written; `None` = DNS64's
    /// IPv6 addresses while DNS64 is on ([`Config::ipsec_dns`]).
    pub dns: Option<Vec<Ipv6Addr>>,
    /// The IPv4 entries of `ipsec.dns`, handed as INTERNAL_IP4_DNS to clients that ask for
    /// an IPv4 address. Empty: none.
    pub dns4: Vec<Ipv4Addr>,
    /// Split-DNS domains handed to clients that ask (INTERNAL_DNS_DOMAIN, RFC 8598): their
    /// names are resolved through `dns`, the rest through the client's own resolver.
    pub dns_domains: Vec<String>,
    /// The ESP suites child SAs may use, as written (strongSwan's notation), in gate64's
    /// order of preference ([`Ipsec::esp_suites`]).
    pub esp_proposals: Vec<String>,
    /// Child SAs of clients that reach gate64 over IP-HTTPS may use AES-GMAC, integrity only
    /// (ENCR_NULL_AUTH_AES_GMAC, RFC 4543; strongSwan's `aes256gmac`), preferred over
    /// `esp_proposals` when the client offers it: TLS already encrypts that hop between the
    /// same two ends, so ESP does not encrypt a second time. Teredo and native clients never
    /// get it. Off by default.
    pub iphttps_integrity_only: bool,
    /// SHA1 (integrity and PRF) and MODP-1024 may be chosen for IKE SAs (Windows' default
    /// proposals); 3DES never is.
    pub legacy_proposals: bool,
    /// IKE SA proposals in strongSwan's notation narrowing what gate64 accepts; empty =
    /// everything gate64 implements ([`Ipsec::ike_proposal_specs`]).
    pub ike_proposals: Vec<String>,
    /// `[[ipsec.tunnel_rule]]`, in file order: the tunnel of a client that does not name one,
    /// by its certificate; the first rule that matches wins. Empty: the traffic selectors
    /// decide, as for every client.
    pub tunnel_rule: Vec<TunnelRule>,
    /// `[[ipsec.eap_radius]]`: RADIUS servers that EAP clients (IKE_AUTH without AUTH) are
    /// relayed to, tried in order with the accounting client's retries, failover and
    /// hold-down. Empty: EAP is off and such clients are refused.
    pub eap_radius: Vec<crate::accounting::RadiusServer>,
    /// Whether a certificate client, once its certificate and AUTH verified, must also be
    /// authorized by the `[[ipsec.eap_radius]]` servers (an Access-Request without a
    /// password); validation refuses `radius` without a server.
    pub authorize_certificates: AuthorizeCertificates,
    /// `qcd_secret_file`: a file holding the Quick Crash Detection secret (RFC 6290; at least
    /// [`qcd::QCD_MIN_SECRET_LEN`] bytes, one trailing newline not counted), the same on both
    /// nodes of an HA pair. `None`: no QCD.
    pub qcd_secret_file: Option<PathBuf>,
}

/// One `[[ipsec.tunnel_rule]]`: a client whose certificate meets every condition given gets
/// `tunnel` (unless it names its tunnel itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelRule {
    /// The tunnel; validation refuses a rule without one.
    pub tunnel: Option<RuleTunnel>,
    /// A PEM file of CA certificates: the client certificate was issued by one of them, or
    /// by a CA under one (the same subject name and public key as a certificate above the
    /// leaf in its verified chain).
    pub ca: Option<PathBuf>,
    /// A pattern (`*` for any run of characters, ASCII case-insensitive) that the
    /// certificate's subject commonName or one of its DNS or email subjectAltNames matches.
    pub identity: Option<String>,
}

/// `ipsec.tunnel_rule.tunnel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleTunnel {
    /// DirectAccess' infrastructure tunnel (`ipsec.infrastructure_prefixes`).
    Infrastructure,
    /// The intranet tunnel (`ipsec.intranet_prefixes`).
    Intranet,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTunnelRule {
    tunnel: Option<RuleTunnel>,
    ca: Option<PathBuf>,
    identity: Option<String>,
}

/// Whether `url` is an `ipsec.ocsp_url` gate64 can ask: `http://` and a host, short, without
/// whitespace or control characters.
fn valid_ocsp_url(url: &str) -> bool {
    url.len() <= 1024
        && url
            .strip_prefix("http://")
            .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'))
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Longest `ipsec.identity` (a DNS name is at most 253 bytes; a DN rarely longer).
const MAX_IDENTITY_LEN: usize = 1024;

/// `require = true` and nothing configured: the secure default of a file without `[ipsec]`.
impl Default for Ipsec {
    fn default() -> Self {
        Self {
            require: true,
            certificate: None,
            private_key: None,
            ca: None,
            user_ca: None,
            crls: Vec::new(),
            crl_expired: CrlExpired::Warn,
            crl_refresh_secs: defaults::CRL_REFRESH_SECS,
            endpoint: None,
            pool6: None,
            pool4: None,
            infrastructure_prefixes4: None,
            intranet_prefixes4: None,
            infrastructure_prefixes: None,
            intranet_prefixes: None,
            half_open_cookie_threshold: defaults::IKE_HALF_OPEN_COOKIE_THRESHOLD,
            max_half_open_per_source: defaults::IKE_MAX_HALF_OPEN_PER_SOURCE,
            max_half_open_bytes: defaults::IKE_MAX_HALF_OPEN_BYTES,
            max_ike_sas: defaults::IKE_MAX_SAS,
            max_ike_sas_per_identity: defaults::IKE_MAX_SAS_PER_IDENTITY,
            max_child_sas_per_ike_sa: defaults::IKE_MAX_CHILD_SAS_PER_IKE_SA,
            auth_threads: defaults::IKE_AUTH_THREADS,
            ike_packets_per_source_per_sec: defaults::IKE_PACKETS_PER_SOURCE_PER_SEC,
            listen: Vec::new(),
            child_lifetime_secs: defaults::CHILD_LIFETIME_SECS,
            dpd_secs: defaults::DPD_SECS,
            reauth_secs: defaults::REAUTH_SECS,
            intranet_second_auth: SecondAuth::default(),
            client_eku: ClientEku::default(),
            identity: None,
            rsa_pss: false,
            unique_ids: UniqueIds::default(),
            ocsp: Ocsp::default(),
            ocsp_url: None,
            ocsp_max_age_secs: defaults::OCSP_MAX_AGE_SECS,
            dns: None,
            dns4: Vec::new(),
            dns_domains: Vec::new(),
            esp_proposals: esp::DEFAULT_ESP_PROPOSALS.map(String::from).to_vec(),
            iphttps_integrity_only: false,
            legacy_proposals: false,
            ike_proposals: Vec::new(),
            tunnel_rule: Vec::new(),
            eap_radius: Vec::new(),
            authorize_certificates: AuthorizeCertificates::Off,
            qcd_secret_file: None,
        }
    }
}

impl Ipsec {
    /// True when gate64 answers IKE: `certificate`, `private_key` and `ca` are all given.
    pub fn configured(&self) -> bool {
        self.certificate.is_some() && self.private_key.is_some() && self.ca.is_some()
    }

    /// `ike_proposals` as transform IDs (entries that do not parse, which validation
    /// refuses, are left out).
    pub fn ike_proposal_specs(&self) -> Vec<IkeProposal> {
        self.ike_proposals
            .iter()
            .filter_map(|s| proposals::parse(s, self.legacy_proposals).ok())
            .collect()
    }

    /// Whether the responder may choose this IKE SA combination, by the rule it applies:
    /// `encr` is (transform ID, key bits), `integ` `None` for AES-GCM; SHA1 (integrity 2,
    /// PRF 2) and MODP-1024 (group 2) only with `legacy_proposals`; with `ike_proposals`
    /// set, only a combination one entry names in full. Transform IDs gate64 does not
    /// implement are not checked here: callers ask about the ones it does.
    pub fn ike_allows(&self, encr: (u16, u16), integ: Option<u16>, prf: u16, group: u16) -> bool {
        const LEGACY_ID: u16 = 2;
        if !self.legacy_proposals
            && (integ == Some(LEGACY_ID) || prf == LEGACY_ID || group == LEGACY_ID)
        {
            return false;
        }
        let specs = self.ike_proposal_specs();
        specs.is_empty()
            || specs.iter().any(|p| {
                p.encr.contains(&encr)
                    && integ.is_none_or(|i| p.integ.contains(&i))
                    && p.prf.contains(&prf)
                    && p.groups.contains(&group)
            })
    }

    /// The warning to show while `require = false` (at start-up, in `check-config`, and
    /// repeated by the daemon every hour), or `None` while the security step is on.
    pub fn open_to_unauthenticated_warning(&self) -> Option<&'static str> {
        (!self.require).then_some(OPEN_TO_UNAUTHENTICATED)
    }
}

/// What the daemon and `check-config` say while `ipsec.require = false`.
const OPEN_TO_UNAUTHENTICATED: &str = "ipsec.require = false: the corporate network is open to \
     unauthenticated clients: client traffic enters it WITHOUT IPsec (no authentication, no \
     encryption), so any internet host that reaches gate64 over Teredo or IP-HTTPS reaches the \
     corporate network; lab use only, remove the key in production";

/// Allowed `ipsec.child_lifetime_secs`: a minute to a day.
const CHILD_LIFETIME_RANGE: std::ops::RangeInclusive<u64> = 60..=86_400;
/// Shortest `ipsec.crl_refresh_secs`: a look costs a stat per file, but a CRL changes
/// rarely.
const MIN_CRL_REFRESH_SECS: u64 = 10;
/// Allowed `ipsec.reauth_secs` (besides 0, never): a minute (every client's certificate
/// checked again that often costs a chain verification per client per minute) to a year.
const REAUTH_RANGE: std::ops::RangeInclusive<u64> = 60..=31_536_000;
/// Allowed `ipsec.dpd_secs`: often enough to matter, not so often that thousands of idle
/// clients keep the IKE thread busy.
const DPD_RANGE: std::ops::RangeInclusive<u64> = 5..=3_600;
/// Least `ipsec.ike_packets_per_source_per_sec`: both tunnels' handshakes, each with a cookie
/// round trip and a fragmented IKE_AUTH (RFC 7383), fit in its burst.
const MIN_IKE_PACKETS_PER_SOURCE_PER_SEC: u32 = 10;
/// Most `ipsec.auth_threads`: a typo must not start thousands of threads.
const MAX_AUTH_THREADS: usize = 1024;
/// Least `ipsec.max_half_open_bytes`: one half-open IKE SA at its largest (a 64 KiB
/// IKE_SA_INIT and 64 KiB of IKE_AUTH fragments).
const MIN_HALF_OPEN_BYTES: usize = 128 * 1024;
/// Allowed `ipsec.ocsp_max_age_secs`: a minute (responders that leave nextUpdate out
/// usually sign each answer when asked) to a week.
const OCSP_MAX_AGE_RANGE: std::ops::RangeInclusive<u64> = 60..=604_800;
/// Most `ipsec.dns` servers: a client takes a few, and each is an attribute of every reply.
const MAX_DNS_SERVERS: usize = 8;
/// Most `ipsec.dns_domains`.
const MAX_DNS_DOMAINS: usize = 32;

/// A DNS name as INTERNAL_DNS_DOMAIN carries it: ASCII labels of letters, digits, '-' (and
/// '_'), 1..=63 each, not starting or ending with '-', 253 characters in all.
fn valid_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Shortest `ipsec.pool6` prefix: larger pools only cost memory for nothing.
const MIN_POOL6_LEN: u8 = 64;
/// Longest `ipsec.pool6` prefix: its all-zero address is never handed out and its first
/// address is the default endpoint, so a /126 leaves two addresses for clients.
const MAX_POOL6_LEN: u8 = 126;

/// The default `ipsec.endpoint`: the first address of `pool6` (the one after the all-zero
/// subnet-router anycast address). The responder's pool never leases it.
pub fn pool6_endpoint(pool6: Ipv6Net) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(pool6.network()).wrapping_add(1))
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIpsec {
    require: Option<bool>,
    certificate: Option<PathBuf>,
    private_key: Option<PathBuf>,
    ca: Option<PathBuf>,
    user_ca: Option<PathBuf>,
    crls: Option<Vec<PathBuf>>,
    crl_expired: Option<CrlExpired>,
    crl_refresh_secs: Option<u64>,
    endpoint: Option<Ipv6Addr>,
    pool6: Option<Ipv6Net>,
    pool4: Option<Ipv4Net>,
    infrastructure_prefixes4: Option<Vec<Ipv4Net>>,
    intranet_prefixes4: Option<Vec<Ipv4Net>>,
    infrastructure_prefixes: Option<Vec<Ipv6Net>>,
    intranet_prefixes: Option<Vec<Ipv6Net>>,
    half_open_cookie_threshold: Option<usize>,
    max_half_open_per_source: Option<usize>,
    max_half_open_bytes: Option<usize>,
    max_ike_sas: Option<usize>,
    max_ike_sas_per_identity: Option<usize>,
    max_child_sas_per_ike_sa: Option<usize>,
    auth_threads: Option<usize>,
    ike_packets_per_source_per_sec: Option<u32>,
    listen: Option<Vec<IpAddr>>,
    child_lifetime_secs: Option<u64>,
    dpd_secs: Option<u64>,
    reauth_secs: Option<u64>,
    intranet_second_auth: Option<SecondAuth>,
    client_eku: Option<ClientEku>,
    identity: Option<String>,
    rsa_pss: Option<bool>,
    unique_ids: Option<UniqueIds>,
    ocsp: Option<Ocsp>,
    ocsp_url: Option<String>,
    ocsp_max_age_secs: Option<u64>,
    dns: Option<Vec<IpAddr>>,
    dns_domains: Option<Vec<String>>,
    esp_proposals: Option<Vec<String>>,
    iphttps_integrity_only: Option<bool>,
    legacy_proposals: Option<bool>,
    ike_proposals: Option<Vec<String>>,
    tunnel_rule: Option<Vec<RawTunnelRule>>,
    eap_radius: Option<Vec<crate::accounting::RawRadiusServer>>,
    authorize_certificates: Option<AuthorizeCertificates>,
    qcd_secret_file: Option<PathBuf>,
}

impl RawIpsec {
    pub(crate) fn build(self) -> Ipsec {
        let d = Ipsec::default();
        Ipsec {
            require: self.require.unwrap_or(d.require),
            certificate: self.certificate,
            private_key: self.private_key,
            ca: self.ca,
            user_ca: self.user_ca,
            crls: self.crls.unwrap_or_default(),
            crl_expired: self.crl_expired.unwrap_or(d.crl_expired),
            crl_refresh_secs: self.crl_refresh_secs.unwrap_or(d.crl_refresh_secs),
            endpoint: self.endpoint,
            pool6: self.pool6,
            pool4: self.pool4,
            infrastructure_prefixes4: self.infrastructure_prefixes4,
            intranet_prefixes4: self.intranet_prefixes4,
            infrastructure_prefixes: self.infrastructure_prefixes,
            intranet_prefixes: self.intranet_prefixes,
            half_open_cookie_threshold: self
                .half_open_cookie_threshold
                .unwrap_or(d.half_open_cookie_threshold),
            max_half_open_per_source: self
                .max_half_open_per_source
                .unwrap_or(d.max_half_open_per_source),
            max_half_open_bytes: self.max_half_open_bytes.unwrap_or(d.max_half_open_bytes),
            max_ike_sas: self.max_ike_sas.unwrap_or(d.max_ike_sas),
            max_ike_sas_per_identity: self
                .max_ike_sas_per_identity
                .unwrap_or(d.max_ike_sas_per_identity),
            max_child_sas_per_ike_sa: self
                .max_child_sas_per_ike_sa
                .unwrap_or(d.max_child_sas_per_ike_sa),
            auth_threads: self.auth_threads.unwrap_or(d.auth_threads),
            ike_packets_per_source_per_sec: self
                .ike_packets_per_source_per_sec
                .unwrap_or(d.ike_packets_per_source_per_sec),
            listen: self.listen.unwrap_or_default(),
            child_lifetime_secs: self.child_lifetime_secs.unwrap_or(d.child_lifetime_secs),
            dpd_secs: self.dpd_secs.unwrap_or(d.dpd_secs),
            reauth_secs: self.reauth_secs.unwrap_or(d.reauth_secs),
            intranet_second_auth: self.intranet_second_auth.unwrap_or(d.intranet_second_auth),
            client_eku: self.client_eku.unwrap_or(d.client_eku),
            identity: self.identity,
            rsa_pss: self.rsa_pss.unwrap_or(d.rsa_pss),
            unique_ids: self.unique_ids.unwrap_or(d.unique_ids),
            ocsp: self.ocsp.unwrap_or(d.ocsp),
            ocsp_url: self.ocsp_url,
            ocsp_max_age_secs: self.ocsp_max_age_secs.unwrap_or(d.ocsp_max_age_secs),
            dns: ipv4::dns6(self.dns.as_deref()),
            dns4: ipv4::dns4(self.dns.as_deref()),
            dns_domains: self
                .dns_domains
                .unwrap_or_default()
                .into_iter()
                .map(|d| d.trim_end_matches('.').to_ascii_lowercase())
                .collect(),
            esp_proposals: self.esp_proposals.unwrap_or(d.esp_proposals),
            iphttps_integrity_only: self
                .iphttps_integrity_only
                .unwrap_or(d.iphttps_integrity_only),
            legacy_proposals: self.legacy_proposals.unwrap_or(d.legacy_proposals),
            ike_proposals: self.ike_proposals.unwrap_or_default(),
            tunnel_rule: self
                .tunnel_rule
                .unwrap_or_default()
                .into_iter()
                .map(|r| TunnelRule {
                    tunnel: r.tunnel,
                    ca: r.ca,
                    identity: r.identity,
                })
                .collect(),
            eap_radius: self
                .eap_radius
                .unwrap_or_default()
                .into_iter()
                .map(crate::accounting::RawRadiusServer::build)
                .collect(),
            authorize_certificates: self
                .authorize_certificates
                .unwrap_or(d.authorize_certificates),
            qcd_secret_file: self.qcd_secret_file,
        }
    }
}

impl Config {
    /// The IKE worker threads to start (key exchanges, IKE_AUTH verifications): `ipsec.auth_threads`, or the number of
    /// CPUs the process may use when it is 0 (1 if that cannot be determined).
    pub fn effective_ike_auth_threads(&self) -> usize {
        match self.ipsec.auth_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// gate64's IKE/ESP address: `ipsec.endpoint`, by default the first address of
    /// `ipsec.pool6` ([`pool6_endpoint`]). That address lies outside everything the tunnels
    /// reach (the pool is disjoint from the corporate prefixes and NAT64, and DNS64 answers
    /// at `corpnet.address6`), so a client that routes its tunnels' prefixes into the tunnel
    /// still reaches the endpoint outside it. Without a pool (IPsec not configured) nothing
    /// answers IKE, and this is `corpnet.address6`.
    pub fn ipsec_endpoint(&self) -> Ipv6Addr {
        self.ipsec
            .endpoint
            .or_else(|| self.ipsec.pool6.map(pool6_endpoint))
            .unwrap_or(self.corpnet.address6)
    }

    /// Whether `ipsec.endpoint` is left to its default.
    pub fn ipsec_endpoint_is_default(&self) -> bool {
        self.ipsec.endpoint.is_none()
    }

    /// The DNS servers clients are given: `ipsec.dns`, by default DNS64's IPv6 addresses
    /// while DNS64 is on (none otherwise).
    pub fn ipsec_dns(&self) -> Vec<Ipv6Addr> {
        if let Some(dns) = &self.ipsec.dns {
            return dns.clone();
        }
        let mut out: Vec<Ipv6Addr> = Vec::new();
        for a in self.dns64.listen_addresses(self.corpnet.address6) {
            if let std::net::IpAddr::V6(v6) = a.ip()
                && !out.contains(&v6)
            {
                out.push(v6);
            }
        }
        out
    }

    /// What the infrastructure tunnel reaches: `ipsec.infrastructure_prefixes`, by default
    /// `corpnet.address6`/128 (where DNS64 answers).
    pub fn ipsec_infrastructure_prefixes(&self) -> Vec<Ipv6Net> {
        self.ipsec
            .infrastructure_prefixes
            .clone()
            .unwrap_or_else(|| {
                vec![
                    Ipv6Net::new(self.corpnet.address6, 128).expect("128 is a valid prefix length"),
                ]
            })
    }

    /// What the intranet tunnel reaches: `ipsec.intranet_prefixes`, by default every
    /// `corpnet.ipv6_prefixes` entry plus `nat64.prefix` while NAT64 is on.
    pub fn ipsec_intranet_prefixes(&self) -> Vec<Ipv6Net> {
        self.ipsec.intranet_prefixes.clone().unwrap_or_else(|| {
            let mut out = self.corpnet.ipv6_prefixes.clone();
            if self.nat64.enabled {
                out.push(self.nat64.prefix);
            }
            out
        })
    }

    /// `ipsec.certificate`, `ipsec.private_key`, `ipsec.ca`, `ipsec.user_ca`, every
    /// `ipsec.crls` entry and every `ipsec.tunnel_rule` CA are readable files, while IPsec is
    /// configured.
    pub(crate) fn check_ipsec_files(&self) -> Result<(), ConfigError> {
        let s = &self.ipsec;
        if !s.configured() {
            return Ok(());
        }
        for (key, path) in [
            ("ipsec.certificate", &s.certificate),
            ("ipsec.private_key", &s.private_key),
            ("ipsec.ca", &s.ca),
            ("ipsec.user_ca", &s.user_ca),
        ] {
            if let Some(path) = path {
                check_readable_file(key, path)?;
            }
        }
        for path in &s.crls {
            check_readable_file("ipsec.crls", path)?;
        }
        for path in s.tunnel_rule.iter().filter_map(|r| r.ca.as_ref()) {
            check_readable_file("ipsec.tunnel_rule.ca", path)?;
        }
        Ok(())
    }

    /// Advice about `[ipsec]`.
    pub(crate) fn ipsec_warnings(&self, out: &mut Vec<String>) {
        let s = &self.ipsec;
        if let Some(w) = s.open_to_unauthenticated_warning() {
            out.push(w.to_owned());
        } else if !s.configured() && self.client_transport_enabled() {
            out.push(
                "ipsec.require = true but IPsec is not configured (ipsec.certificate, \
                 ipsec.private_key and ipsec.ca): no client can reach the corporate network, \
                 NAT64 or DNS64; clients reach only gate64 itself (ICMPv6 echo)"
                    .to_owned(),
            );
        }
        if let Some(w) = self.endpoint_collision_warning() {
            out.push(w);
        }
        if s.configured() {
            let reached: Vec<Ipv6Net> = self
                .ipsec_infrastructure_prefixes()
                .into_iter()
                .chain(self.ipsec_intranet_prefixes())
                .collect();
            for a in self.ipsec_dns() {
                if !reached.iter().any(|p| p.contains(&a)) {
                    out.push(format!(
                        "ipsec.dns: {a} lies in neither tunnel's prefixes \
                         (ipsec.infrastructure_prefixes, ipsec.intranet_prefixes): clients are \
                         told to ask it, but their queries leave outside the tunnels and gate64 \
                         drops them"
                    ));
                }
            }
            self.ipsec_ipv4_warnings(out);
        }
    }

    /// An `ipsec.endpoint` that is also DNS64's address or lies inside what a tunnel reaches.
    /// gate64 itself copes (IKE and ESP to the endpoint are taken before routing), but a
    /// client that routes its tunnels' prefixes into the tunnel cannot: strongSwan's
    /// userspace ESP refuses a route that would capture its IKE peer, or excludes that one
    /// address from the tunnel, and then whatever answers there (DNS64) is out of reach.
    fn endpoint_collision_warning(&self) -> Option<String> {
        let s = &self.ipsec;
        let (endpoint, pool) = (s.endpoint?, s.pool6?);
        if !s.configured() {
            return None;
        }
        let own = |what: &str| {
            format!(
                "ipsec.endpoint = \"{endpoint}\" is {what}: clients that route the tunnels' \
                 prefixes into the tunnel (strongSwan's kernel-libipsec, Windows, Apple) cannot \
                 reach it through the tunnel, since IKE and ESP must go to the endpoint outside \
                 it; leave ipsec.endpoint out to use \"{}\" (the first address of \
                 ipsec.pool6), which collides with nothing",
                pool6_endpoint(pool)
            )
        };
        if endpoint == self.corpnet.address6 {
            return Some(own(if self.dns64.enabled {
                "also corpnet.address6, where DNS64 answers"
            } else {
                "also corpnet.address6, gate64's corporate address"
            }));
        }
        for (key, prefixes) in [
            (
                "ipsec.infrastructure_prefixes",
                self.ipsec_infrastructure_prefixes(),
            ),
            ("ipsec.intranet_prefixes", self.ipsec_intranet_prefixes()),
        ] {
            if let Some(p) = prefixes.iter().find(|p| p.contains(&endpoint)) {
                return Some(own(&format!("inside {p} ({key})")));
            }
        }
        None
    }

    /// The prefix whose clients' child SAs may be integrity-only (AES-GMAC): the IP-HTTPS
    /// prefix while IP-HTTPS is enabled and `ipsec.iphttps_integrity_only` is on.
    pub fn ipsec_integrity_only_prefix(&self) -> Option<Ipv6Net> {
        self.iphttps_pool()
            .filter(|_| self.ipsec.iphttps_integrity_only)
    }

    /// The prefix IP-HTTPS connections lease their /64s from, when IP-HTTPS is on.
    pub fn iphttps_pool(&self) -> Option<Ipv6Net> {
        self.iphttps
            .enabled
            .then_some(self.iphttps.prefix)
            .flatten()
    }
}

/// What an `[ipsec]` key's value looks like, for type errors.
pub(crate) fn expected_form(path: &str) -> Option<&'static str> {
    Some(match path {
        "ipsec.require"
        | "ipsec.rsa_pss"
        | "ipsec.legacy_proposals"
        | "ipsec.iphttps_integrity_only" => "true or false",
        "ipsec.ike_proposals" => {
            "a list of proposals in strongSwan's notation, e.g. [\"aes256gcm16-prfsha256-ecp256\", \"aes256-sha256-modp2048\"]"
        }
        "ipsec.certificate" | "ipsec.private_key" | "ipsec.ca" | "ipsec.user_ca" => {
            "a file path in quotes, e.g. \"/etc/gate64/ipsec.pem\""
        }
        "ipsec.crls" => "a list of file paths, e.g. [\"/etc/gate64/clients-ca.crl\"]",
        "ipsec.crl_expired" => "\"warn\" or \"refuse\"",
        "ipsec.endpoint" => "an IPv6 address in quotes, e.g. \"2001:db8:100::1\"",
        "ipsec.pool6" => "an IPv6 prefix in quotes, e.g. \"fd00:c1::100/120\"",
        "ipsec.pool4" => "an IPv4 prefix in quotes, e.g. \"10.77.0.0/16\"",
        "ipsec.infrastructure_prefixes4" | "ipsec.intranet_prefixes4" => {
            "a list of IPv4 prefixes, e.g. [\"10.1.0.0/16\"]"
        }
        "ipsec.listen" => "a list of IP addresses, e.g. [\"192.0.2.10\", \"2001:db8::10\"]",
        "ipsec.infrastructure_prefixes" | "ipsec.intranet_prefixes" => {
            "a list of IPv6 prefixes, e.g. [\"2001:db8:100::53/128\"]"
        }
        "ipsec.half_open_cookie_threshold"
        | "ipsec.max_half_open_per_source"
        | "ipsec.max_half_open_bytes"
        | "ipsec.max_ike_sas"
        | "ipsec.max_ike_sas_per_identity"
        | "ipsec.max_child_sas_per_ike_sa"
        | "ipsec.auth_threads"
        | "ipsec.ike_packets_per_source_per_sec"
        | "ipsec.child_lifetime_secs"
        | "ipsec.dpd_secs"
        | "ipsec.reauth_secs"
        | "ipsec.crl_refresh_secs"
        | "ipsec.ocsp_max_age_secs" => "a whole number",
        "ipsec.intranet_second_auth" => "\"off\", \"optional\" or \"required\"",
        "ipsec.client_eku" => "\"strict\" or \"any\"",
        "ipsec.unique_ids" => "\"replace\", \"keep\" or \"never\"",
        "ipsec.authorize_certificates" => "\"off\" or \"radius\"",
        "ipsec.ocsp" => "\"off\", \"soft\" or \"require\"",
        "ipsec.qcd_secret_file" => "a file path in quotes, e.g. \"/etc/gate64/qcd.secret\"",
        "ipsec.ocsp_url" => "a URL in quotes, e.g. \"http://ocsp.example.com/\"",
        "ipsec.identity" => "a string, e.g. \"gw.example.com\" or \"2001:db8::1\"",
        "ipsec.dns" => "a list of IP addresses, e.g. [\"2001:db8:100::1\", \"10.1.0.53\"]",
        "ipsec.dns_domains" => "a list of domain names, e.g. [\"corp.example.com\"]",
        "ipsec.tunnel_rule" => {
            "[[ipsec.tunnel_rule]] tables with tunnel = \"infrastructure\" or \"intranet\" \
             and ca = \"PATH\" and/or identity = \"PATTERN\""
        }
        "ipsec.tunnel_rule.tunnel" => "\"infrastructure\" or \"intranet\"",
        "ipsec.tunnel_rule.ca" => "a file path in quotes, e.g. \"/etc/gate64/device-ca.pem\"",
        "ipsec.tunnel_rule.identity" => "a pattern in quotes, e.g. \"*.devices.example.com\"",
        "ipsec.esp_proposals" => {
            "a list of ESP suites in strongSwan's notation, e.g. [\"aes256gcm16\", \"aes256-sha256\"]"
        }
        _ => return None,
    })
}

mod esp;
mod ipv4;
mod kinds;
mod pool;
mod proposals;
mod qcd;
mod validate;

pub use esp::EspProposal;
pub use kinds::{AuthorizeCertificates, ClientEku, CrlExpired, Ocsp, SecondAuth, UniqueIds};
pub use proposals::IkeProposal;

#[cfg(test)]
mod tests;
