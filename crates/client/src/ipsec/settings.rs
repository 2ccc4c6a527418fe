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
        Credentials::from_pem(chain, key)
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
        let mut initiator = Initiator::new(config, now, SystemTime::now(), local, remote)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
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
        Credentials::from_pem(&self.chain_pem, &self.key_pem).map_err(|e| anyhow::anyhow!("{e}"))
    }

    fn anchors(&self) -> Result<TrustAnchors> {
        TrustAnchors::from_pem(&self.ca_pem).map_err(|e| anyhow::anyhow!("{e}"))
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
        })
    }
}
