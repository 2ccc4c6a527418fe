//! What the responder is configured with: credentials and trust anchors, the address pool and
//! the two tunnels' corporate prefixes, and the bounds and timers of every IKE SA.

use super::*;

/// What the responder is configured with.
#[derive(Debug)]
pub struct ResponderConfig {
    /// gate64's certificate chain and private key, shared with the IKE_AUTH jobs that sign
    /// with them ([`AuthJob`]).
    pub credentials: std::sync::Arc<Credentials>,
    /// CAs whose client certificates are accepted.
    pub anchors: TrustAnchors,
    /// CAs whose user certificates the RFC 4739 second round accepts (`[ipsec] user_ca`);
    /// `None`: [`ResponderConfig::anchors`].
    pub user_anchors: Option<TrustAnchors>,
    /// Inner addresses for clients that send CFG_REQUEST.
    pub pool6: Ipv6Net,
    /// Inner IPv4 addresses for clients whose CFG_REQUEST asks for INTERNAL_IP4_ADDRESS
    /// (`[ipsec] pool4`); `None`: no IPv4 inside the tunnels, and IPv4 traffic selectors are
    /// dropped from every child SA.
    pub pool4: Option<ipnet::Ipv4Net>,
    /// The `[ha]` peer's IPv6 pool (`ha.peer_pool6`): an IKE SA taken over from the peer may
    /// keep an inner address there (and only there or in [`ResponderConfig::pool6`]); no
    /// client is ever leased one. `None`: taken-over IKE SAs keep only addresses of
    /// `pool6`.
    pub peer_pool6: Option<Ipv6Net>,
    /// The `[ha]` peer's IPv4 pool (`ha.peer_pool4`), as [`ResponderConfig::peer_pool6`]
    /// for [`ResponderConfig::pool4`].
    pub peer_pool4: Option<ipnet::Ipv4Net>,
    /// A child SA whose TSr lies in these is the infrastructure tunnel.
    pub infrastructure_prefixes: Vec<IpNet>,
    /// A child SA whose TSr narrows into these is the intranet tunnel.
    pub intranet_prefixes: Vec<IpNet>,
    /// Above this many half-open IKE SAs, IKE_SA_INIT must carry a valid cookie (§2.6).
    pub half_open_cookie_threshold: usize,
    /// At most this many half-open IKE SAs per source: an IPv4 address, an IPv6 /64, a
    /// Teredo client's NAT mapping.
    pub max_half_open_per_source: usize,
    /// At most this many bytes held by all half-open IKE SAs (their IKE_SA_INIT messages,
    /// cached responses and IKE_AUTH fragments); beyond it new ones and new fragments are
    /// refused.
    pub max_half_open_bytes: usize,
    /// At most this many IKE SAs in all (half-open and established); beyond it IKE_SA_INIT
    /// is refused. IKE SA rekeys are held to the per-identity cap instead.
    pub max_ike_sas: usize,
    /// At most this many IKE SAs per authenticated identity (both tunnels and a rekey
    /// overlap need 3 or 4).
    pub max_ike_sas_per_identity: usize,
    /// At most this many child SAs per IKE SA (one per tunnel and a rekey overlap need 2).
    pub max_child_sas_per_ike_sa: usize,
    /// IKE_AUTH's chain and signature checks, and our own AUTH signature after them, become
    /// [`AuthJob`]s for the driver to run elsewhere ([`Responder::poll_auth_job`]) instead of
    /// running inline.
    pub offload_auth: bool,
    /// IKE_SA_INIT's key exchange and key derivation become [`InitJob`]s for the driver to
    /// run elsewhere ([`Responder::poll_init_job`]) instead of running inline.
    pub offload_init: bool,
    /// A half-open IKE SA is dropped after this long without IKE_AUTH.
    pub half_open_timeout: Duration,
    /// The cookie secret changes this often; the previous one is still accepted.
    pub cookie_rotation: Duration,
    /// Soft lifetime handed to child SAs (the hard one is 10% later). The initiator rekeys.
    pub child_lifetime: Duration,
    /// An IKE SA that hears no IKE message for this long is forgotten (its child SAs go
    /// down), whatever the liveness checks say; ESP traffic is not seen here, so this must
    /// exceed the clients' IKE rekey interval (strongSwan: 4 h by default).
    pub ike_idle_timeout: Duration,
    /// An established IKE SA that hears nothing for this long gets a liveness check.
    pub dpd: Duration,
    /// Percent of [`ResponderConfig::dpd`] a liveness check may come early, by a part that
    /// differs per IKE SA and per check (0: every check exactly at `dpd`). IKE SAs set up or
    /// answered in the same instant (a fast ramp, a driver that fell behind and ran many
    /// timers at once) would otherwise send their checks together for as long as they live.
    pub dpd_spread_percent: u32,
    /// Unanswered retransmissions of a liveness check before the peer is declared dead.
    pub dpd_retransmits: u32,
    /// Largest IKE datagram we send before RFC 7383 fragmentation (IPv6 minimum MTU less
    /// headers, as strongSwan's default).
    pub fragment_size: usize,
    /// The local NAT-T port (4500): a child SA negotiated over it is UDP-encapsulated
    /// (RFC 3948), since the client only moves there after NAT detection.
    pub nat_t_port: u16,
    /// Addresses clients reach gate64 at directly (`[ipsec] listen`): a child SA whose IKE SA
    /// runs on one of them is marked native ([`gate64_esp::Peer::native`]), so the dataplane
    /// sends its ESP from that socket rather than through Teredo or IP-HTTPS.
    pub native_addresses: Vec<std::net::IpAddr>,
    /// RFC 4739 second authentication (a user certificate after the machine's).
    pub intranet_second_auth: SecondAuthPolicy,
    /// What a second IKE SA of one identity for one tunnel does (`[ipsec] unique_ids`).
    pub unique_ids: UniqueIds,
    /// The ESP suites child SAs may use, in gate64's order of preference (`[ipsec]
    /// esp_proposals`); [`DEFAULT_ESP_SUITES`](super::child::DEFAULT_ESP_SUITES) unless
    /// narrowed. Empty refuses every child SA.
    pub esp_suites: Vec<Cipher>,
    /// Child SAs of IKE SAs whose client address lies in this prefix may use AES-GMAC,
    /// integrity only (RFC 4543), preferred over every suite of `esp_suites`: the IP-HTTPS
    /// prefix when `[ipsec] iphttps_integrity_only` is on, since TLS already encrypts that
    /// hop. Never for a Teredo address or an IKE SA on a native address. `None`: never.
    pub integrity_only_prefix: Option<Ipv6Net>,
    /// How long an IKE SA may live from its authentication (`[ipsec] reauth_secs`),
    /// announced with AUTH_LIFETIME (RFC 4478); it is deleted 10% later unless the client
    /// authenticated anew with a new IKE SA. `None`: never.
    pub reauth: Option<Duration>,
    /// DNS servers handed to a client whose CFG_REQUEST asks for INTERNAL_IP6_DNS
    /// (`[ipsec] dns`).
    pub dns: Vec<Ipv6Addr>,
    /// IPv4 DNS servers handed to a client with an inner IPv4 address whose CFG_REQUEST
    /// asks for INTERNAL_IP4_DNS (the IPv4 entries of `[ipsec] dns`).
    pub dns4: Vec<std::net::Ipv4Addr>,
    /// Split-DNS domains (RFC 8598) handed to a client whose CFG_REQUEST asks for
    /// INTERNAL_DNS_DOMAIN (`[ipsec] dns_domains`), while `dns` is not empty.
    pub dns_domains: Vec<String>,
    /// Which IKE SA algorithms may be chosen (`[ipsec] legacy_proposals`, `ike_proposals`).
    pub ike_policy: IkePolicy,
    /// The tunnel of a client that does not name one, by its certificate
    /// (`[[ipsec.tunnel_rule]]`): the first rule that matches wins; none matching, the TSr
    /// decides ([`TunnelRule`]).
    pub tunnel_rules: Vec<TunnelRule>,
    /// EAP authentication of clients that send no AUTH (`[[ipsec.eap_radius]]`), with its
    /// bounds; `None`: such clients are refused.
    pub eap: Option<super::EapPolicy>,
    /// Whether a certificate client is authorized by RADIUS after its AUTH verified
    /// (`[ipsec] authorize_certificates = "radius"`), within [`ResponderConfig::eap`]'s
    /// bounds (the defaults when `None`).
    pub authorize_certificates: bool,
    /// Quick Crash Detection (RFC 6290) as token maker (`[ipsec] qcd_secret_file`): tokens
    /// for clients that ask in IKE_AUTH, and unprotected INVALID_IKE_SPI answers with the
    /// token for requests to IKE SAs we do not have (`qcd.rs`). `None`: off.
    pub qcd_secret: Option<super::QcdSecret>,
    /// Which sources count as one host for the per-host caps (the IP-HTTPS pool's /64s each
    /// one); the IKE driver's shedding and verification queue key by the same.
    pub hosts: super::Hosts,
}

impl ResponderConfig {
    /// A configuration with the defaults of `[ipsec]` for everything but the credentials,
    /// anchors, pool and prefixes.
    pub fn new(
        credentials: Credentials,
        anchors: TrustAnchors,
        pool6: Ipv6Net,
        infrastructure_prefixes: Vec<IpNet>,
        intranet_prefixes: Vec<IpNet>,
    ) -> Self {
        ResponderConfig {
            credentials: std::sync::Arc::new(credentials),
            anchors: anchors_for_clients(anchors),
            user_anchors: None,
            pool6,
            pool4: None,
            peer_pool6: None,
            peer_pool4: None,
            infrastructure_prefixes,
            intranet_prefixes,
            half_open_cookie_threshold: 64,
            max_half_open_per_source: 16,
            max_half_open_bytes: 64 << 20,
            max_ike_sas: 200_000,
            max_ike_sas_per_identity: 4,
            max_child_sas_per_ike_sa: 8,
            offload_auth: false,
            offload_init: false,
            half_open_timeout: Duration::from_secs(30),
            cookie_rotation: Duration::from_secs(120),
            child_lifetime: Duration::from_secs(8 * 3600),
            ike_idle_timeout: Duration::from_secs(24 * 3600),
            dpd: Duration::from_secs(30),
            dpd_spread_percent: 0,
            dpd_retransmits: 3,
            fragment_size: 1232,
            nat_t_port: 4500,
            native_addresses: Vec::new(),
            intranet_second_auth: SecondAuthPolicy::default(),
            unique_ids: UniqueIds::default(),
            reauth: Some(Duration::from_secs(86_400)),
            dns: Vec::new(),
            dns4: Vec::new(),
            dns_domains: Vec::new(),
            esp_suites: super::child::DEFAULT_ESP_SUITES.to_vec(),
            integrity_only_prefix: None,
            ike_policy: IkePolicy::default(),
            tunnel_rules: Vec::new(),
            eap: None,
            authorize_certificates: false,
            qcd_secret: None,
            hosts: super::Hosts::default(),
        }
    }
}

impl ResponderConfig {
    /// The CAs the second authentication round verifies against.
    pub(crate) fn second_round_anchors(&self) -> &TrustAnchors {
        self.user_anchors.as_ref().unwrap_or(&self.anchors)
    }

    /// Has the second round's anchors (an empty cache of their own) count into the first
    /// round's chain cache counters: one set of counters for the responder.
    pub(crate) fn share_chain_cache_stats(&mut self) {
        let stats = std::sync::Arc::clone(self.anchors.cache_stats());
        if let Some(user) = self.user_anchors.take() {
            self.user_anchors = Some(user.with_cache_stats(stats));
        }
    }

    /// The chains both rounds' caches hold, and what they counted.
    pub(crate) fn chain_cache(&self) -> crate::auth::ChainCacheCounts {
        let second = self
            .user_anchors
            .as_ref()
            .map_or(0, TrustAnchors::cached_chains);
        let entries = self.anchors.cached_chains().saturating_add(second);
        self.anchors.cache_stats().counts(entries as u64)
    }
}

/// `anchors` as the responder holds its clients to them: with the strict client EKU rule
/// ([`ClientEku::Strict`]) unless the caller chose one.
pub(crate) fn anchors_for_clients(anchors: TrustAnchors) -> TrustAnchors {
    match anchors.client_eku() {
        Some(_) => anchors,
        None => anchors.for_clients(ClientEku::Strict),
    }
}
