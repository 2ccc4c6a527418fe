//! The client's IPsec settings: gate64's IKE endpoint, our credentials and the CAs the
//! responder must chain to, and the corporate side each tunnel asks for.

use super::*;

/// What the client's IPsec layer needs: where gate64's IKE endpoint is, our credentials, and
/// the corporate side each tunnel asks for.
pub struct IpsecSettings {
    /// The responder's IKE/ESP address.
    pub endpoint: Ipv6Addr,
    /// Our certificate chain (PEM, leaf first).
    pub chain_pem: Vec<u8>,
    /// Our private key (PEM).
    pub key_pem: Vec<u8>,
    /// The CA(s) the responder's certificate must chain to (PEM).
    pub ca_pem: Vec<u8>,
    /// The corporate prefixes asked for in each tunnel (TSr), narrowed by the responder;
    /// empty: `::/0`.
    pub tunnels: Vec<(TunnelKind, Vec<Ipv6Net>)>,
    /// Ask for an inner address (CFG_REQUEST, TSi `::/0`); otherwise the outer address is
    /// the inner one too (TSi = it alone), as the design allows for clients that do not ask.
    pub request_address: bool,
    /// Negotiate each tunnel afresh after this long ([`RENEW_AFTER`] by default).
    pub renew_after: Duration,
    /// A user certificate chain and key (PEM) for an RFC 4739 second authentication on the
    /// intranet tunnel, as DirectAccess proves the user after the machine; the
    /// infrastructure tunnel authenticates the machine alone.
    pub user_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// The identity the responder's certificate must hold (sent as IDr); `None`: any
    /// certificate under the CA may answer.
    pub server_id: Option<Identity>,
    /// Offer AES-256-GMAC (integrity only) before AES-256-GCM for the child SAs: set over
    /// IP-HTTPS, whose TLS already encrypts the hop to gate64; gate64 takes it only with
    /// `[ipsec] iphttps_integrity_only`.
    pub integrity_only: bool,
    /// Start IKE on port 4500 (RFC 7296 §2.23), which makes ESP UDP-encapsulated (RFC 3948)
    /// whether or not a NAT is found: set for Teredo, and over IP-HTTPS for a responder
    /// whose user-space ESP takes nothing else (strongSwan's kernel-libipsec). Otherwise IKE
    /// starts on port 500 and ESP is IPv6 next header 50 unless NAT detection finds a NAT
    /// (then both move to 4500): no UDP header, no UDP checksum per packet.
    pub udp_encap: bool,
}

impl IpsecSettings {
    /// Reads the PEM files and checks that they parse, so that a bad file fails at start
    /// rather than at every negotiation.
    pub fn load(
        endpoint: Ipv6Addr,
        cert: &Path,
        key: &Path,
        ca: &Path,
        tunnels: Vec<(TunnelKind, Vec<Ipv6Net>)>,
    ) -> Result<Self> {
        let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        let s = IpsecSettings {
            endpoint,
            chain_pem: read(cert)?,
            key_pem: read(key)?,
            ca_pem: read(ca)?,
            tunnels,
            request_address: true,
            renew_after: RENEW_AFTER,
            user_pem: None,
            server_id: None,
            integrity_only: false,
            udp_encap: true,
        };
        s.credentials().with_context(|| {
            format!(
                "IPsec certificate {} / key {}",
                cert.display(),
                key.display()
            )
        })?;
        s.anchors()
            .with_context(|| format!("IPsec CA {}", ca.display()))?;
        Ok(s)
    }

    /// Adds a user certificate and key for the intranet tunnel's second authentication
    /// (RFC 4739), checking that they parse.
    pub fn load_user(&mut self, cert: &Path, key: &Path) -> Result<()> {
        let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        self.user_pem = Some((read(cert)?, read(key)?));
        self.user_credentials().with_context(|| {
            format!(
                "user certificate {} / key {}",
                cert.display(),
                key.display()
            )
        })?;
        Ok(())
    }

    /// The user credentials, when configured.
    fn user_credentials(&self) -> Result<Option<Credentials>> {
        let Some((chain, key)) = &self.user_pem else {
            return Ok(None);
        };
        Credentials::from_pem_with_sha1(chain, key, sha1_signer)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The initiator for tunnel `kind`: the intranet tunnel offers the user certificate.
    pub(super) fn initiator(
        &self,
        kind: TunnelKind,
        corporate: &[Ipv6Net],
        outer: Ipv6Addr,
        (now, local, remote): (Instant, SocketAddr, SocketAddr),
    ) -> Result<Initiator> {
        let config = self.initiator_config(kind, corporate, outer)?;
        // RFC 6311: a gate64 pair that takes this IKE SA over synchronizes the Message IDs.
        let mut initiator = Initiator::new(config, now, SystemTime::now(), local, remote)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .with_mid_sync();
        if let Some(id) = &self.server_id {
            initiator = initiator.with_server_id(id.clone());
        }
        if corporate.is_empty() {
            // `::/0` alone does not say which tunnel this is: name it, so that gate64 gives
            // each of the two IKE SAs its own tunnel instead of the same one twice.
            initiator = initiator.naming_tunnel();
        }
        Ok(match (kind, self.user_credentials()?) {
            (TunnelKind::Intranet, Some(user)) => initiator.with_second_auth(user),
            _ => initiator,
        })
    }

    fn credentials(&self) -> Result<Credentials> {
        Credentials::from_pem_with_sha1(&self.chain_pem, &self.key_pem, sha1_signer)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The anchors of `ca_pem`. The last ones loaded in this process are kept and handed out
    /// again (a clone shares their cache of verified chains): every negotiation, and every
    /// emulated client of `gate64 bench load`, then verifies the responder's chain once, its
    /// validity and the AUTH signature of each IKE_AUTH response still every time.
    fn anchors(&self) -> Result<TrustAnchors> {
        static LAST: std::sync::Mutex<Option<(Vec<u8>, TrustAnchors)>> =
            std::sync::Mutex::new(None);
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((pem, anchors)) = last.as_ref()
            && *pem == self.ca_pem
        {
            return Ok(anchors.clone());
        }
        let anchors = TrustAnchors::from_pem(&self.ca_pem).map_err(|e| anyhow::anyhow!("{e}"))?;
        *last = Some((self.ca_pem.clone(), anchors.clone()));
        Ok(anchors)
    }

    /// The initiator's configuration for one tunnel.
    fn initiator_config(
        &self,
        kind: TunnelKind,
        corporate: &[Ipv6Net],
        outer: Ipv6Addr,
    ) -> Result<InitiatorConfig> {
        let any: Ipv6Net = Ipv6Net::default();
        let range = |n: &Ipv6Net| {
            TrafficSelector::range(IpAddr::V6(n.network()), IpAddr::V6(n.broadcast()))
        };
        let tsr = if corporate.is_empty() {
            vec![range(&any)]
        } else {
            corporate.iter().map(range).collect()
        };
        Ok(InitiatorConfig {
            credentials: self.credentials()?,
            anchors: self.anchors()?,
            group: Group::Ecp256,
            request_address: self.request_address,
            tsi: vec![if self.request_address {
                range(&any)
            } else {
                range(&Ipv6Net::from(outer))
            }],
            tsr,
            tunnel: kind,
            retransmit_after: RETRANSMIT_AFTER,
            max_retransmits: MAX_RETRANSMITS,
            integrity_only: self.integrity_only,
        })
    }
}

/// aws-lc's RSASSA-PKCS1-v1_5 over SHA-1 (gate64-sys): an RSA client certificate signs AUTH
/// method 1 with it towards a responder that announces no SIGNATURE_HASH_ALGORITHMS (aws-lc-rs,
/// which makes every other signature, has no SHA-1 RSA signing).
struct Sha1Signer(gate64_sys::rsa_sha1::RsaSha1Signer);

impl gate64_ike::auth::Sha1RsaSigner for Sha1Signer {
    fn sign_sha1(&self, octets: &[u8]) -> Option<Vec<u8>> {
        self.0.sign(octets).ok()
    }
}

fn sha1_signer(der: &[u8], pkcs1: bool) -> Option<Box<dyn gate64_ike::auth::Sha1RsaSigner>> {
    let signer = gate64_sys::rsa_sha1::RsaSha1Signer::from_der(der, pkcs1).ok()?;
    Some(Box::new(Sha1Signer(signer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_ike::auth::{AuthMethod, SigHash, TrustAnchors};

    /// An RSA client certificate signs method 1 (towards a responder without RFC 7427) and
    /// method 14, both verifying under its CA.
    #[test]
    fn an_rsa_client_certificate_signs_methods_1_and_14() {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key =
            rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)
                .unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["client1.gate64.lab".into()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let creds = Credentials::from_pem_with_sha1(
            leaf.pem().as_bytes(),
            key.serialize_pem().as_bytes(),
            sha1_signer,
        )
        .unwrap();
        let peer = TrustAnchors::from_pem(ca_pem.as_bytes())
            .unwrap()
            .verify_peer(leaf.der(), &[], std::time::SystemTime::now())
            .unwrap();
        for (method, hashes) in [
            (AuthMethod::RsaPkcs1, &[][..]),
            (AuthMethod::DigitalSignature, &SigHash::ALL[..]),
        ] {
            let (used, data) = creds.sign(method, b"octets", hashes).unwrap();
            assert_eq!(used, method);
            peer.verify_auth(used, &data, b"octets").unwrap();
        }
    }
}
